// test_pull.mjs -- `pocketbrain pull` against a fault-injecting server on 127.0.0.1 (tests/node/fault_server.mjs):
// drops, stalls, short bodies, 404/416/500/401, redirects, a file that changes, wrong digests, Ctrl-C and resume,
// two pulls at once, a full disk; then `models`, `rm` and `-m NAME`. Nothing here reaches the network.
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FaultServer, sha256 } from './fault_server.mjs';
import { bin, check, done, note, pickModel } from './server_lib.mjs';

const model = fs.readFileSync(pickModel());
const size = model.length;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pb-pull-'));
// a second version of the model: same GGUF, a byte of tensor data different near the start and near the end
// (so the old file's first MiBs followed by the new file's rest is neither version)
const model2 = Buffer.from(model);
model2[1 << 20] ^= 0x5a;
model2[model2.length - 100] ^= 0x5a;

const srv = await new FaultServer().listen();
let libn = 0;

// A fresh library per case; HF_TOKEN from the caller's environment never leaks in.
function env(extra = {}) {
  const lib = path.join(tmp, `lib${++libn}`);
  const e = { ...process.env, PB_MODELS: lib, PB_HF_ENDPOINT: srv.url, PB_PULL_BACKOFF_MS: '20', ...extra };
  delete e.HF_TOKEN;
  delete e.PB_CATALOG;
  if (extra.HF_TOKEN) e.HF_TOKEN = extra.HF_TOKEN;
  return { env: e, lib };
}

function run(args, e, opts = {}) {
  return new Promise((resolve) => {
    const p = spawn(bin(), args, { env: e, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; if (opts.onErr) opts.onErr(p, err); });
    if (opts.onStart) opts.onStart(p);
    p.on('exit', (code, sig) => resolve({ code: code === null ? sig : code, out, err }));
  });
}

const exists = (f) => fs.existsSync(f);
// check() that shows the command's last stderr lines (as comments) when it fails
function chk(cond, msg, r) {
  check(cond, msg);
  if (!cond && r) for (const l of r.err.trim().split('\n').slice(-8)) note(l);
}
const target = (lib, name) => path.join(lib, `${name}.gguf`);
const good = (lib, name, want = model) => exists(target(lib, name)) && sha256(fs.readFileSync(target(lib, name))) === sha256(want);
const noFile = (lib, name) => !exists(target(lib, name)) && !exists(target(lib, name) + '.part');

const URL_ = () => `${srv.url}/files/model.gguf`;

// 1. the hub path: hf: ref -> resolve redirect with X-Linked-Etag -> file store
{
  srv.reset({ file: model });
  const { env: e, lib } = env();
  const r = await run(['pull', 'hf:acme/tiny-GGUF/tiny-q8.gguf', '--name', 'tiny'], e);
  chk(r.code === 0 && good(lib, 'tiny'), `hf: ref pulls through the hub redirect (exit ${r.code})`, r);
  check(/hub \(X-Linked-Etag\)/.test(r.out), 'the digest was checked against the hub\'s X-Linked-Etag');
  const lines = r.err.split('\n').filter((l) => /^tiny: \d+% \([\d.]+ MiB of 16\.4 MiB, [\d.]+ MiB\/s\)$/.test(l));
  check(lines.length >= 2 && !r.err.includes('\r'), `not a terminal: plain progress lines (${lines.length}, like ${JSON.stringify(lines[0])})`);
  check(srv.requests[0].path === '/acme/tiny-GGUF/resolve/main/tiny-q8.gguf', `resolve URL ${srv.requests[0].path}`);
  check(srv.sent === size, `one full transfer (${srv.sent} of ${size} bytes)`);
  check(!exists(target(lib, 'tiny') + '.part') && !exists(target(lib, 'tiny') + '.part.json'), 'no .part left after success');
  const m = JSON.parse(fs.readFileSync(path.join(lib, 'tiny.json'), 'utf8'));
  check(m.sha256 === sha256(model) && m.architecture && m.pulled_at, `manifest records sha256, architecture, time (${m.architecture})`);
  const again = await run(['pull', 'hf:acme/tiny-GGUF/tiny-q8.gguf', '--name', 'tiny'], e);
  check(again.code === 0 && /already in the library/.test(again.out) && /pocketbrain verify tiny/.test(again.out) && srv.requests.length === 2,
    'pulling it again says it is there (and how to re-check it) and downloads nothing');
  fs.truncateSync(target(lib, 'tiny'), 4096); // damaged in the library (a crash of a copy, a disk error)
  srv.reset({ file: model });
  const fix = await run(['pull', 'hf:acme/tiny-GGUF/tiny-q8.gguf', '--name', 'tiny'], e);
  chk(fix.code === 0 && /tiny in the library is damaged \(4096 bytes, \d+ when it was pulled\); downloading it again/.test(fix.err) &&
    good(lib, 'tiny') && srv.sent === size, `a truncated library file is noticed and pulled again (exit ${fix.code})`, fix);
  srv.reset({ file: model });
  const rev = await run(['pull', 'hf:acme/tiny-GGUF/sub/tiny-q8.gguf@v1.2', '--quiet'], e);
  check(rev.code === 0 && srv.requests[0].path === '/acme/tiny-GGUF/resolve/v1.2/sub/tiny-q8.gguf' && good(lib, 'tiny-q8'),
    `@REVISION and a file in a folder (${srv.requests[0] && srv.requests[0].path}); name from the file`);
}

// 2. connection dropped at several offsets: resumed each time, no byte sent twice
{
  const drops = [1 << 20, 5 << 20, 9 << 20, size - 1000];
  srv.reset({ file: model, dropAt: drops });
  const { env: e, lib } = env();
  const r = await run(['pull', URL_(), '--name', 'm'], e);
  chk(r.code === 0 && good(lib, 'm'), `drops at ${drops.join(', ')}: complete and verified (exit ${r.code})`, r);
  check(srv.fileRequests === 5, `resumed 4 times (${srv.fileRequests} requests)`);
  check(srv.sent === size, `resumed downloads sent only the missing bytes: ${srv.sent} == ${size}`);
  const ranges = srv.requests.map((q) => q.range).join(' ');
  check(srv.requests.slice(1).every((q, i) => q.range === `bytes=${drops[i]}-` && q.ifRange === '"v1"'),
    `each resume asks for the rest with If-Range (${ranges})`);
}

// 3. a stall: the attempt is abandoned after --timeout and resumed
{
  srv.reset({ file: model, stallAt: 3 << 20 });
  const { env: e, lib } = env();
  const t0 = Date.now();
  const r = await run(['pull', URL_(), '--name', 'm', '--timeout', '1'], e);
  check(r.code === 0 && good(lib, 'm'), `stall at 3 MiB: resumed and complete in ${Date.now() - t0} ms (exit ${r.code})`);
  check(srv.sent === size && srv.fileRequests === 2, `stall: ${srv.sent} bytes sent for ${size}, ${srv.fileRequests} requests`);
}

// 4. fewer bytes than Content-Length
{
  srv.reset({ file: model, shortBy: 123457 });
  const { env: e, lib } = env();
  const r = await run(['pull', URL_(), '--name', 'm'], e);
  check(r.code === 0 && good(lib, 'm') && srv.sent === size, `short body: resumed for the missing ${123457} bytes (sent ${srv.sent})`);
}

// 5. 404, 500 (always / once), 401
{
  srv.reset({ file: model });
  let { env: e, lib } = env();
  let r = await run(['pull', `${srv.url}/nothing-here`, '--name', 'm'], e);
  check(r.code === 1 && /404/.test(r.err) && /not found/.test(r.err) && noFile(lib, 'm'), `404: clear error, no file (${r.err.trim().split('\n').pop()})`);

  srv.reset({ file: model, statuses: [500, 500, 500, 500] });
  ({ env: e, lib } = env());
  r = await run(['pull', URL_(), '--name', 'm', '--retries', '3'], e);
  check(r.code === 1 && /HTTP 500/.test(r.err) && /gave up after 4 attempts/.test(r.err) && noFile(lib, 'm'),
    `500 every time: retried 3 times with backoff, then a clear error (${srv.fileRequests} requests)`);

  srv.reset({ file: model, statuses: [503, 500] });
  ({ env: e, lib } = env());
  r = await run(['pull', URL_(), '--name', 'm'], e);
  check(r.code === 0 && good(lib, 'm') && /retry 1 of 5/.test(r.err), '503 then 500 then 200: retried, complete');

  srv.reset({ file: model, token: 'sekrit' });
  ({ env: e, lib } = env());
  r = await run(['pull', 'hf:google/gated-GGUF/g.gguf', '--name', 'g'], e);
  check(r.code === 1 && /this model is gated: accept its license on the model page, then set HF_TOKEN/.test(r.err) && noFile(lib, 'g'),
    `401: the gated-model message, no file (${r.err.trim().split('\n').pop()})`);
  srv.reset({ file: model, token: 'sekrit' });
  r = await run(['pull', 'hf:google/gated-GGUF/g.gguf', '--name', 'g'], { ...e, HF_TOKEN: 'sekrit' });
  check(r.code === 0 && good(lib, 'g'), 'HF_TOKEN is sent to the hub: the gated model downloads');
  srv.reset({ file: model, token: 'sekrit' });
  r = await run(['pull', 'hf:google/gated-GGUF/g.gguf', '--name', 'g2', '--token', 'sekrit'], e);
  check(r.code === 0 && good(lib, 'g2'), '--token works the same');
  srv.reset({ file: model });
  r = await run(['pull', `http://localhost:${srv.port}/files/model.gguf`, '--name', 'u'], { ...e, HF_TOKEN: 'sekrit' });
  check(r.code === 0 && srv.requests.every((q) => q.auth === null), 'the token is not sent to a URL that is not the hub');
}

// 6. 416 on a resume: the part is dropped and the download starts over
{
  srv.reset({ file: model, dropAt: [2 << 20], range416: true });
  const { env: e, lib } = env();
  const r = await run(['pull', URL_(), '--name', 'm'], e);
  chk(r.code === 0 && good(lib, 'm'), `416 on resume: restarted from 0, complete (exit ${r.code})`, r);
  check(srv.sent === size + (2 << 20), `416: sent ${srv.sent} = the dropped 2 MiB + one full copy`);
}

// 7. redirects: once (followed), in a loop (a clear error)
{
  srv.reset({ file: model });
  let { env: e, lib } = env();
  let r = await run(['pull', `${srv.url}/redir`, '--name', 'm'], e);
  check(r.code === 0 && good(lib, 'm'), 'one redirect: followed');
  srv.reset({ file: model });
  ({ env: e, lib } = env());
  r = await run(['pull', `${srv.url}/loop`, '--name', 'm'], e);
  check(r.code === 1 && /too many redirects/.test(r.err) && noFile(lib, 'm'), `redirect loop: clear error (${r.err.trim().split('\n').pop()})`);
}

// 8. the file changes on the server between two attempts (new ETag): the download restarts cleanly
for (const ignoreIfRange of [false, true]) {
  srv.reset({ file: model, dropAt: [4 << 20], changeAfter: 1, changeTo: { file: model2, etag: '"v2"' }, ignoreIfRange });
  const { env: e, lib } = env();
  const r = await run(['pull', URL_(), '--name', 'm'], e);
  const how = ignoreIfRange ? 'server ignores If-Range: the client sees the new ETag' : 'If-Range: the server sends it whole';
  chk(r.code === 0 && good(lib, 'm', model2), `changed file (${how}): the new file, complete (exit ${r.code})`, r);
  const last = srv.requests[srv.requests.length - 1];
  check(last.status === 200 && last.sent === size && srv.requests.length === (ignoreIfRange ? 3 : 2),
    `changed file (${how}): the part was started over (requests ${JSON.stringify(srv.requests.map((q) => [q.range, q.status, q.sent]))})`);
}

// 9. bytes that do not match the digest: --sha256, and the hub's X-Linked-Etag
{
  srv.reset({ file: model });
  let { env: e, lib } = env();
  let r = await run(['pull', URL_(), '--name', 'm', '--sha256', 'ab'.repeat(32)], e);
  check(r.code === 1 && /sha256 mismatch/.test(r.err) && noFile(lib, 'm'), `--sha256 mismatch: clear error, nothing left (${r.err.trim().split('\n').pop()})`);
  srv.reset({ file: model });
  r = await run(['pull', URL_(), '--name', 'm', '--sha256', sha256(model).toUpperCase()], e);
  check(r.code === 0 && good(lib, 'm') && /--sha256/.test(r.out), '--sha256 that matches (any case): accepted');
  srv.reset({ file: model, corrupt: true });
  ({ env: e, lib } = env());
  r = await run(['pull', 'hf:acme/tiny-GGUF/tiny.gguf', '--name', 'm'], e);
  check(r.code === 1 && /sha256 mismatch/.test(r.err) && /X-Linked-Etag/.test(r.err) && noFile(lib, 'm'),
    'corrupt bytes against the hub digest: clear error, nothing left');
  srv.reset({ file: model, corrupt: true, dropAt: [3 << 20] });
  ({ env: e, lib } = env());
  r = await run(['pull', 'hf:acme/tiny-GGUF/tiny.gguf', '--name', 'm'], e);
  check(r.code === 1 && /downloading it again/.test(r.err) && noFile(lib, 'm'), 'a mismatch after a resume is retried once from the start, then refused');
  srv.reset({ file: Buffer.from('this is not a model'.repeat(1000)) });
  ({ env: e, lib } = env());
  r = await run(['pull', URL_(), '--name', 'm'], e);
  check(r.code === 1 && /not a usable model/.test(r.err) && noFile(lib, 'm'), `not a GGUF: refused by the model checks (${r.err.trim().split('\n').pop()})`);
}

// 10. Ctrl-C keeps the .part; the next pull resumes it and fetches only the rest
{
  srv.reset({ file: model, throttle: { chunk: 256 << 10, ms: 20 } });
  const { env: e, lib } = env();
  let signalled = false;
  const r = await run(['pull', URL_(), '--name', 'm'], e, {
    onStart: (p) => {
      const t = setInterval(() => {
        if (srv.sent >= (3 << 20) && !signalled) { signalled = true; p.kill('SIGINT'); clearInterval(t); }
      }, 10);
    },
  });
  const part = target(lib, 'm') + '.part';
  const kept = exists(part) ? fs.statSync(part).size : 0;
  check(r.code === 130 && kept > 0 && !exists(target(lib, 'm')) && /the same pull resumes it/.test(r.err),
    `SIGINT: exit ${r.code}, ${kept} bytes kept in the .part, no model yet`);
  srv.reset({ file: model });
  const r2 = await run(['pull', URL_(), '--name', 'm'], e);
  check(r2.code === 0 && good(lib, 'm') && /resuming/.test(r2.err), `the next pull resumed it (exit ${r2.code})`);
  check(srv.sent === size - kept && srv.requests[0].range === `bytes=${kept}-`, `resume sent only the missing ${srv.sent} bytes (${size} - ${kept})`);
  // SIGTERM (a kill, a service stopped) keeps the .part as well, and the command ends by that signal (it exited 130, as
  // for Ctrl-C), as ingest, chat, quantize and convert do
  srv.reset({ file: model, throttle: { chunk: 256 << 10, ms: 20 } });
  const { env: e2, lib: lib2 } = env();
  signalled = false;
  const r3 = await run(['pull', URL_(), '--name', 'm'], e2, {
    onStart: (p) => {
      const t = setInterval(() => {
        if (srv.sent >= (3 << 20) && !signalled) { signalled = true; p.kill('SIGTERM'); clearInterval(t); }
      }, 10);
    },
  });
  const kept2 = exists(target(lib2, 'm') + '.part') ? fs.statSync(target(lib2, 'm') + '.part').size : 0;
  check(r3.code === 'SIGTERM' && kept2 > 0 && /the same pull resumes it/.test(r3.err), `SIGTERM: ended by ${r3.code}, ${kept2} bytes kept in the .part`);
}

// 11. two pulls of one model at once: one waits, one good file, one download
{
  // slow enough (about 2 s) that `rm` started once the first byte is sent still finds the pull running, also
  // under a sanitizer build
  srv.reset({ file: model, throttle: { chunk: 256 << 10, ms: 30 } });
  const { env: e, lib } = env();
  let rmDuring = null;
  const rmLater = new Promise((resolve) => {
    const t = setInterval(async () => {
      if (srv.sent > 0) { clearInterval(t); rmDuring = await run(['rm', 'm'], e); resolve(); }
    }, 10);
  });
  const [a, b] = await Promise.all([run(['pull', URL_(), '--name', 'm'], e), run(['pull', URL_(), '--name', 'm'], e)]);
  await rmLater;
  check(rmDuring && rmDuring.code === 1 && /being pulled right now/.test(rmDuring.err), `rm during the pull is refused (${rmDuring && rmDuring.err.trim()})`);
  const waited = [a, b].filter((r) => /another pull of m is running; waiting/.test(r.err)).length;
  check(a.code === 0 && b.code === 0 && waited === 1, `concurrent pulls: both succeed, one waited (exit ${a.code}/${b.code})`);
  check(good(lib, 'm') && srv.fileRequests === 1 && srv.sent === size, `one good file, downloaded once (${srv.fileRequests} requests)`);
  const rm = await run(['rm', 'm'], e);
  check(rm.code === 0 && !exists(target(lib, 'm')) && !exists(path.join(lib, 'm.json')), 'rm removes the file and its manifest');
}

// 12. a full disk: "not enough space" before the first byte is written
{
  const mnt = path.join(tmp, 'small');
  fs.mkdirSync(mnt);
  const m = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', mnt], { encoding: 'utf8' });
  if (m.status !== 0) {
    check(process.env.CI !== 'true', `full-disk case needs root to mount a tmpfs (${(m.stderr || '').trim()}) # SKIP outside CI`);
  } else {
    try {
      srv.reset({ file: model });
      const lib = path.join(mnt, 'models');
      const { env: e } = env();
      const r = await run(['pull', URL_(), '--name', 'm'], { ...e, PB_MODELS: lib });
      check(r.code === 1 && /not enough space in .*: the download needs 16\.4 MiB/.test(r.err) && noFile(lib, 'm'), `4 MiB tmpfs: ${r.err.trim().split('\n').pop()}`);
      check(fs.readdirSync(lib).filter((f) => !f.startsWith('.')).length === 0, 'nothing written into the library');
    } finally {
      spawnSync('umount', [mnt]);
    }
  }
}

// 13. catalog names, models, -m NAME, rm, bad input
{
  srv.reset({ file: model });
  const { env: e, lib } = env();
  let r = await run(['pull', 'gemma-2-2b-it'], e);
  chk(r.code === 0 && good(lib, 'gemma-2-2b-it:q4_k_m') && /license: Gemma Terms of Use/.test(r.out),
    `catalog name -> gemma-2-2b-it:q4_k_m from the hub (exit ${r.code})`, r);
  check(srv.requests[0].path === '/bartowski/gemma-2-2b-it-GGUF/resolve/main/gemma-2-2b-it-Q4_K_M.gguf', `catalog URL ${srv.requests[0].path}`);
  srv.reset({ file: model });
  r = await run(['pull', 'gemma-3-1b-it:Q8_0', '--quiet'], e);
  check(r.code === 0 && good(lib, 'gemma-3-1b-it:q8_0') && r.err === '', 'NAME:QUANT (any case), --quiet prints nothing on stderr');
  r = await run(['models'], e);
  check(r.code === 0 && /gemma-2-2b-it:q4_k_m\s+gemma-2-2b-it:q4_k_m\.gguf/.test(r.out) && /gemma-3-1b-it:q8_0/.test(r.out) && /gemma2/.test(r.out),
    'models lists both with file and architecture');
  const j = JSON.parse((await run(['models', '--json'], e)).out);
  const g = j.models.find((x) => x.name === 'gemma-2-2b-it:q4_k_m');
  check(j.models.length === 2 && g.size === size && g.context > 0 && g.quantization && g.pulled_at.endsWith('Z'),
    `models --json: size, context ${g.context}, quantization ${g.quantization}, pulled_at`);
  r = await run(['run', '-m', 'gemma-2-2b-it', '-n', '3', '--temp', '0', '-p', 'Hello'], e);
  chk(r.code === 0, `run -m gemma-2-2b-it (catalog name, default quantization) uses the library file (exit ${r.code})`, r);
  r = await run(['run', '-m', 'gemma-3-1b-it:q8_0', '-n', '2', '-p', 'Hi'], e);
  check(r.code === 0, '-m NAME:QUANT');
  r = await run(['run', '-m', 'no-such-model', '-n', '2', '-p', 'Hi'], e);
  check(r.code === 1 && /neither a file nor a model in the library/.test(r.err), `-m unknown name: ${r.err.trim()}`);
  r = await run(['rm', 'gemma-2-2b-it:q4_k_m'], e);
  check(r.code === 0 && !exists(target(lib, 'gemma-2-2b-it:q4_k_m')), 'rm NAME');
  r = await run(['run', '-m', 'gemma-2-2b-it', '-n', '2', '-p', 'Hi'], e);
  check(r.code === 1 && /pocketbrain pull/.test(r.err), '-m of a removed catalog model suggests pull');
  r = await run(['rm', 'gemma-2-2b-it:q4_k_m'], e);
  check(r.code === 1 && /no model named/.test(r.err), 'rm of an unknown name: clear error');
  fs.copyFileSync(pickModel(), path.join(lib, 'byhand.gguf'));
  r = await run(['models'], e);
  check(/byhand\s+byhand\.gguf/.test(r.out), 'a GGUF copied into the library by hand is listed');
  r = await run(['pull', URL_(), '--name', 'byhand'], e);
  check(r.code === 1 && /already has a model named byhand/.test(r.err), 'pull does not overwrite another model of that name');
  r = await run(['pull', 'http://example.invalid/x.gguf'], e);
  check(r.code === 1 && /refusing plain http/.test(r.err), 'plain http:// to a non-loopback host is refused');
  r = await run(['pull', 'hf:only-owner'], e);
  check(r.code === 1 && /hf:OWNER\/REPO\/FILE/.test(r.err), 'malformed hf: ref');
  r = await run(['pull', 'not-in-catalog'], e);
  check(r.code === 1 && /not in the catalog/.test(r.err), 'unknown catalog name');
  r = await run(['pull', URL_(), '--name', '../evil'], e);
  check(r.code === 2 && /not a usable library name/.test(r.err), '--name with a path is refused');
  r = await run(['info', 'gemma-3-1b-it:q8_0'], e);
  check(r.code === 0 && /architecture:\s+gemma2/.test(r.out), 'info NAME reads the library model');
  // a well-formed GGUF of an architecture this build does not run: kept, listed, with a warning
  const alien = Buffer.from(model);
  const head = alien.subarray(0, 1 << 20);
  let at = 0, n = 0;
  while ((at = head.indexOf('gemma2', at)) >= 0) { head.write('gemma9', at); at += 6; n++; }
  srv.reset({ file: alien });
  r = await run(['pull', URL_(), '--name', 'alien'], e);
  chk(n > 0 && r.code === 0 && /cannot run it yet/.test(r.err) && good(lib, 'alien', alien), `unsupported architecture: kept with a warning (${n} keys renamed)`, r);
  r = await run(['models'], e);
  check(/alien\s+alien\.gguf\s+[\d.]+ MiB\s+gemma9/.test(r.out), 'models shows its architecture');
  r = await run(['pull', '--list'], e);
  check(r.code === 0 && /gemma-2-2b-it:q4_k_m \*/.test(r.out) && /gemma-4-e2b-it/.test(r.out), 'pull --list prints the catalog');
}

// 13b. where the token goes, and plain http:// only to loopback hosts (also after a redirect)
{
  // the hub redirects to its file store on another host (here: localhost vs 127.0.0.1): the token stays with the hub
  srv.reset({ file: model, token: 'sekrit', cdnHost: 'localhost' });
  const { env: e, lib } = env({ HF_TOKEN: 'sekrit' });
  let r = await run(['pull', 'hf:google/gated-GGUF/g.gguf', '--name', 'g'], e);
  const hub = srv.requests.filter((q) => q.path.includes('/resolve/')), cdn = srv.requests.filter((q) => q.path.startsWith('/cdn/'));
  chk(r.code === 0 && good(lib, 'g') && hub.length === 1 && hub[0].auth === 'Bearer sekrit' && cdn.length === 1 && cdn[0].auth === null,
    `HF_TOKEN goes to the hub, not to the file store it redirects to (${JSON.stringify(srv.requests.map((q) => [q.path, q.auth]))})`, r);
  srv.reset({ file: model, farRedirect: 'http://example.invalid/model.gguf' });
  r = await run(['pull', `${srv.url}/far`, '--name', 'far'], e);
  chk(r.code === 1 && /refusing a redirect to plain http:\/\/ \('http:\/\/example\.invalid\/model\.gguf'\)/.test(r.err) && noFile(lib, 'far'),
    `a loopback mirror's redirect to plain http:// elsewhere is refused (${r.err.trim().split('\n').pop()})`, r);
  // a scheme-relative Location ("//host/path") keeps the mirror's plain http://: checked as the URL it resolves to
  // (was followed: curl went on to http://example.invalid)
  srv.reset({ file: model, farRedirect: '//example.invalid/model.gguf' });
  r = await run(['pull', `${srv.url}/far`, '--name', 'far2', '--retries', '0'], e);
  chk(r.code === 1 && /refusing a redirect to plain http:\/\/ \('http:\/\/example\.invalid\/model\.gguf'\)/.test(r.err) && noFile(lib, 'far2'),
    `a scheme-relative redirect to plain http:// elsewhere is refused (${r.err.trim().split('\n').pop()})`, r);
  for (const u of ['http://127.0.0.1.example.invalid/x.gguf', 'http://127.0.0.1@example.invalid/x.gguf', 'http://localhost.example.invalid/x.gguf']) {
    r = await run(['pull', u], e);
    check(r.code === 1 && /refusing plain http:\/\//.test(r.err), `${u} is not a loopback host: refused`);
  }
  srv.reset({ file: model });
  r = await run(['pull', `http://[::1]:${srv.port}/files/model.gguf`, '--name', 'v6', '--retries', '0'], e);
  check(!/refusing/.test(r.err), `http://[::1]:port is loopback: not refused (exit ${r.code}; the server listens on 127.0.0.1 only)`);
}

// 13c. the disk fills up during a download whose size was not announced (no Content-Length): "not enough space",
// nothing at the target, the part kept for a resume; with the hub's X-Linked-Size the check comes before any byte
{
  const mnt = path.join(tmp, 'small2');
  fs.mkdirSync(mnt);
  const m = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', mnt], { encoding: 'utf8' });
  if (m.status !== 0) {
    check(process.env.CI !== 'true', `disk-full case needs root to mount a tmpfs (${(m.stderr || '').trim()}) # SKIP outside CI`);
  } else {
    try {
      srv.reset({ file: model, chunked: true });
      const lib = path.join(mnt, 'models');
      const { env: e0 } = env();
      const e = { ...e0, PB_MODELS: lib };
      let r = await run(['pull', URL_(), '--name', 'm'], e);
      const part = target(lib, 'm') + '.part';
      chk(r.code === 1 && /not enough space for .*the disk filled up after/.test(r.err) && /pocketbrain rm m/.test(r.err) &&
        !exists(target(lib, 'm')) && exists(part), `ENOSPC mid-download: ${r.err.trim().split('\n').pop()}`, r);
      r = await run(['rm', 'm'], e);
      check(r.code === 0 && !exists(part) && !exists(part + '.json'), 'rm NAME drops the partial download');
      srv.reset({ file: model, chunked: true });
      r = await run(['pull', 'hf:acme/tiny-GGUF/tiny.gguf', '--name', 'm'], e);
      chk(r.code === 1 && /not enough space in .*: the download needs 16\.4 MiB/.test(r.err) && !exists(part) && !exists(target(lib, 'm')),
        `no Content-Length but the hub's X-Linked-Size: refused before the first byte (${r.err.trim().split('\n').pop()})`, r);
    } finally {
      spawnSync('umount', [mnt]);
    }
  }
}

// 13d. a file beyond 4 GiB: 64-bit offsets in the resume (Range, Content-Range, the part's rehash, the size).
// The part is a sparse file of 4 GiB + 4 KiB zeros; the server's file is 4 GiB + 12 KiB of zeros.
{
  const big = 2 ** 32 + 12288, have = 2 ** 32 + 4096;
  const h = crypto.createHash('sha256');
  const z = Buffer.alloc(64 << 20);
  for (let left = big; left > 0; left -= Math.min(left, z.length)) h.update(z.subarray(0, Math.min(left, z.length)));
  const digest = h.digest('hex');
  srv.reset({ file: Buffer.alloc(0), zeros: big });
  const { env: e, lib } = env();
  fs.mkdirSync(lib, { recursive: true });
  const url = `${srv.url}/files/big.gguf`;
  const fd = fs.openSync(target(lib, 'big') + '.part', 'w');
  fs.ftruncateSync(fd, have);
  fs.closeSync(fd);
  fs.writeFileSync(target(lib, 'big') + '.part.json', JSON.stringify({ url, etag: '"v1"', last_modified: '', hub_sha256: '', size: big }));
  const r = await run(['pull', url, '--name', 'big', '--sha256', digest, '--retries', '0'], e);
  chk(r.code === 1 && /resuming a partial download \(4\.00 GiB already here\)/.test(r.err) && srv.requests.length === 1 &&
    srv.requests[0].range === `bytes=${have}-` && srv.sent === big - have && !/sha256 mismatch/.test(r.err) &&
    /not a usable model/.test(r.err) && noFile(lib, 'big'),
    `> 4 GiB: resumed at byte ${srv.requests[0] && srv.requests[0].range}, ${srv.sent} bytes sent, digest matched, then refused as not a model`, r);
}

// 13e. sizes from the network parsed strictly: a malformed X-Linked-Size or Content-Length ("-1", "+5", "12abc",
// empty, past 2^63) is refused naming the header (was: strtoll / %llu turned it into 2^64-1, 5, 12 or ignored it,
// which then drove the free-space check, the progress and the resume); a Content-Range that is not
// "bytes FROM-LAST/SIZE" for the asked FROM (a sign, junk after it, a size that disagrees) restarts the download
{
  for (const v of ['-1', '+5', '12abc', '', ' 7 7', '18446744073709551615', '99999999999999999999']) {
    srv.reset({ file: model, chunked: true, linkedSize: v });
    const { env: e, lib } = env();
    const r = await run(['pull', 'hf:acme/tiny-GGUF/tiny.gguf', '--name', 'm'], e);
    chk(r.code === 1 && r.err.includes(`malformed X-Linked-Size header '${v.trim()}'`) && noFile(lib, 'm'),
      `X-Linked-Size ${JSON.stringify(v)}: refused naming the header (exit ${r.code}: ${r.err.trim().split('\n').pop()})`, r);
  }
  for (const v of ['+5', '12abc', '99999999999999999999', '9223372036854775808']) {
    srv.reset({ file: model, clen: v });
    const { env: e, lib } = env();
    const r = await run(['pull', URL_(), '--name', 'm'], e);
    chk(r.code === 1 && r.err.includes(`malformed Content-Length header '${v}'`) && noFile(lib, 'm'),
      `Content-Length ${JSON.stringify(v)}: refused naming the header (exit ${r.code}: ${r.err.trim().split('\n').pop()})`, r);
  }
  const from = 1 << 20;
  for (const v of [`bytes ${from}-${size - 1}/${size}x`, `bytes +${from}-${size - 1}/${size}`,
    `bytes ${from}-${size - 1}/${size + 1000}`]) {
    srv.reset({ file: model, dropAt: [from], crange: v });
    const { env: e, lib } = env();
    const r = await run(['pull', URL_(), '--name', 'm'], e);
    chk(r.code === 0 && good(lib, 'm') && r.err.includes(`answered the range request with '${v}'`),
      `Content-Range ${JSON.stringify(v)} on a resume: refused, the file fetched again whole (exit ${r.code})`, r);
  }
}

// 13f. the status line parsed strictly: three digits after one blank, then a blank or the line's end (strtol took
// "200abc" and " 200" as 200, so a garbled answer was stored as the file; libcurl itself refuses "+200", "2000", "-200")
{
  for (const v of ['HTTP/1.1 200abc', 'HTTP/1.1  200 OK', 'HTTP/1.1 200x OK', 'HTTP/1.1 +200 OK', 'HTTP/1.1 2000 OK',
    'HTTP/1.1 99999999999999999999 OK']) {
    srv.reset({ file: model, statusLine: v });
    const { env: e, lib } = env();
    const r = await run(['pull', URL_(), '--name', 'm', '--retries', '0'], e);
    const named = r.err.includes(`malformed status line '${v}'`) || /Unsupported response code/.test(r.err); // curl's own
    chk(r.code === 1 && named && noFile(lib, 'm'), `status line ${JSON.stringify(v)}: refused (exit ${r.code}: ${r.err.trim().split('\n').pop()})`, r);
  }
  for (const v of ['HTTP/1.1 200 OK', 'HTTP/1.1 200', 'HTTP/1.0 200 Fine']) { // well-formed, a reason phrase or none
    srv.reset({ file: model, statusLine: v });
    const { env: e, lib } = env();
    const r = await run(['pull', URL_(), '--name', 'm', '--retries', '0'], e);
    chk(r.code === 0 && good(lib, 'm'), `status line ${JSON.stringify(v)}: pulled (exit ${r.code})`, r);
  }
}

// 14. on a terminal: a progress bar redrawn in place with bytes, rate and ETA (script(1) gives it a pty)
{
  srv.reset({ file: model, throttle: { chunk: 1 << 20, ms: 60 } });
  const { env: e, lib } = env();
  const q = (x) => `'${x.replace(/'/g, "'\\''")}'`;
  // asynchronous: the server answers from this process's event loop
  const r = await new Promise((resolve) => {
    const p = spawn('script', ['-qfec', `${q(path.resolve(bin()))} pull ${q(URL_())} --name t`, '/dev/null'], { env: e });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.on('error', (error) => resolve({ error }));
    p.on('exit', (status) => resolve({ status, stdout: out }));
  });
  const frames = (r.stdout || '').split('\r').filter((f) => /\] +\d+%  [\d.]+ MiB \/ 16\.4 MiB  [\d.]+ MiB\/s  ETA \d+m\d\ds/.test(f));
  if (r.error) check(process.env.CI !== 'true', `progress bar case needs script(1): ${r.error.message} # SKIP outside CI`);
  else chk(r.status === 0 && frames.length >= 2 && good(lib, 't'), `terminal progress: ${frames.length} frames like ${JSON.stringify(frames[0])}`, { err: r.stdout || '' });
}

// 15. the library's files are never written through a planted symbolic link (issue 18 item 1: every writer)
{
  srv.reset({ file: model });
  const { env: e, lib } = env();
  fs.mkdirSync(lib, { recursive: true });
  const victim = path.join(tmp, 'victim-part');
  fs.writeFileSync(victim, 'precious');
  fs.symlinkSync(victim, path.join(lib, 'p.gguf.part'));
  let r = await run(['pull', URL_(), '--name', 'p'], e);
  chk(r.code === 1 && /symbolic link/.test(r.err) && fs.readFileSync(victim, 'utf8') === 'precious' && !exists(target(lib, 'p')),
    `a symlink at the part's name is refused, its target untouched (exit ${r.code})`, r);
  // the resume state's temp name was "<state>.tmp", opened with fopen(): a link there redirected the write
  const victim2 = path.join(tmp, 'victim-state');
  fs.writeFileSync(victim2, 'precious');
  fs.symlinkSync(victim2, path.join(lib, 's.gguf.part.json.tmp'));
  r = await run(['pull', URL_(), '--name', 's'], e);
  chk(r.code === 0 && good(lib, 's') && fs.readFileSync(victim2, 'utf8') === 'precious',
    `a symlink at the old predictable state temp name is not followed (exit ${r.code})`, r);
  // the model file itself: a link at the target is refused, not replaced
  const victim3 = path.join(tmp, 'victim-target');
  fs.writeFileSync(victim3, 'precious');
  fs.symlinkSync(victim3, target(lib, 't'));
  srv.reset({ file: model });
  r = await run(['pull', URL_(), '--name', 't', '--force'], e);
  chk(r.code === 1 && /symbolic link/.test(r.err) && fs.lstatSync(target(lib, 't')).isSymbolicLink() &&
    fs.readFileSync(victim3, 'utf8') === 'precious', `a symlink at the model's name is refused, left as it is (exit ${r.code})`, r);
  // refused before the download (was: the whole file fetched, then refused, and left behind as a .part)
  check(srv.sent === 0 && !exists(target(lib, 't') + '.part'), `refused before any byte is downloaded (${srv.sent} sent)`);
  fs.mkdirSync(target(lib, 'd'));
  srv.reset({ file: model });
  r = await run(['pull', URL_(), '--name', 'd'], e);
  chk(r.code === 1 && /is a directory/.test(r.err) && srv.sent === 0 && !exists(target(lib, 'd') + '.part'),
    `a directory at the model's name: refused before the download (exit ${r.code}, ${srv.sent} sent)`, r);
  const left = fs.readdirSync(lib).filter((f) => /\.tmp\./.test(f));
  check(left.length === 0, 'no temp file left in the library: ' + left.join(' '));
}

await srv.close();
fs.rmSync(tmp, { recursive: true, force: true });
note(`model ${pickModel()} (${size} bytes)`);
done();
