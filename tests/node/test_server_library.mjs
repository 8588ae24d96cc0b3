// test_server_library.mjs -- `pocketbrain serve` with a model library: /v1/models lists it, a request's "model"
// loads that model (one at a time; running requests of the other finish first), an unknown name is a 404.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { bin, check, done, note, peerModel, pickModel, startServer, stopServer } from './server_lib.mjs';

const lib = fs.mkdtempSync(path.join(os.tmpdir(), 'pb-serve-lib-'));
fs.symlinkSync(path.resolve(pickModel()), path.join(lib, 'alpha.gguf'));
fs.symlinkSync(path.resolve(peerModel()), path.join(lib, 'beta.gguf'));
fs.writeFileSync(path.join(lib, 'broken.gguf'), 'GGUF but not really a model');
check(fs.existsSync(peerModel()), `peer model fixture ${peerModel()}`);

const srv = await startServer(['--max-tokens', '64'], { PB_MODELS: lib }, 'alpha');
const post = (body) => fetch(srv.url + '/v1/chat/completions', {
  method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
});
const ask = (model, n = 4) => post({ ...(model === undefined ? {} : { model }), messages: [{ role: 'user', content: 'Say something.' }], max_tokens: n, temperature: 0 });
const listed = async () => (await (await fetch(srv.url + '/v1/models')).json()).data;

try {
  check(/model alpha, 1 slot, 2 more in the library/.test(srv.stderr()), `serve -m NAME names the library model: ${srv.stderr().trim()}`);
  let d = await listed();
  check(d.map((m) => m.id).join(',') === 'alpha,beta,broken' && d[0].loaded && !d[1].loaded, `/v1/models lists the library, alpha loaded (${JSON.stringify(d.map((m) => [m.id, m.loaded]))})`);

  // a request naming another model is checked before the switch: one refused anyway never makes the server close
  // alpha and open beta (each of these switched models before the 400)
  {
    const hi = [{ role: 'user', content: 'hi' }];
    const bad = [
      ['messages not an array', '/v1/chat/completions', { model: 'beta', messages: 'garbage' }],
      ['no messages', '/v1/chat/completions', { model: 'beta' }],
      ['temperature a string', '/v1/chat/completions', { model: 'beta', messages: hi, temperature: 'hot' }],
      ['top_p 0 (the engine refuses it)', '/v1/chat/completions', { model: 'beta', messages: hi, top_p: 0 }],
      ['a logit_bias key that is no token id', '/v1/chat/completions', { model: 'beta', messages: hi, logit_bias: { x: 1 } }],
      ['stream not a boolean', '/v1/chat/completions', { model: 'beta', messages: hi, stream: 'yes' }],
      ['logprobs (not supported)', '/v1/chat/completions', { model: 'beta', messages: hi, logprobs: true }],
      ['a completion without a prompt', '/v1/completions', { model: 'beta', max_tokens: 2 }],
    ];
    const codes = [];
    for (const [, route, body] of bad) {
      const r = await fetch(srv.url + route, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      codes.push(r.status);
      await r.text();
    }
    check(codes.every((c) => c === 400), `${bad.length} invalid requests naming beta -> 400 (${codes.join(',')})`);
    const d0 = await listed();
    check(d0[0].loaded && !d0[1].loaded,
      `... and alpha is still the loaded model: none of them switched (${JSON.stringify(d0.map((m) => [m.id, m.loaded]))})`);
    // a preflight of /v1/models/ID answers as its GET: 404 for a model the library does not have (it was 204)
    const opt = async (id) => (await fetch(srv.url + '/v1/models/' + id, { method: 'OPTIONS' })).status;
    const [o1, o2, o3] = [await opt('gpt-4'), await opt('beta'), await opt('%FF%0A')];
    check(o1 === 404 && o2 === 204 && o3 === 404, `OPTIONS /v1/models/gpt-4 -> 404, /v1/models/beta -> 204, an unprintable id -> 404 (${o1} ${o2} ${o3})`);
  }

  let r = await ask('alpha');
  let j = await r.json();
  check(r.status === 200 && j.model === 'alpha', `model alpha -> 200 from alpha (${r.status} ${j.model})`);
  const alphaText = j.choices[0].message.content;

  r = await ask('beta');
  j = await r.json();
  check(r.status === 200 && j.model === 'beta', `model beta -> the server loads beta (${r.status} ${j.model})`);
  const betaText = j.choices[0].message.content;
  d = await listed();
  check(!d[0].loaded && d[1].loaded, 'now beta is the loaded one (one at a time)');
  {
    const get = async (id) => { const g = await fetch(srv.url + '/v1/models/' + id); return [g.status, await g.json()]; };
    let [gs, gj] = await get('beta');
    check(gs === 200 && gj.id === 'beta' && gj.loaded === true, `GET /v1/models/beta: the loaded one (${gs} ${JSON.stringify(gj)})`);
    [gs, gj] = await get('alpha');
    check(gs === 200 && gj.id === 'alpha' && gj.loaded === false, `GET /v1/models/alpha: listed, not loaded (${gs} ${JSON.stringify(gj)})`);
    [gs, gj] = await get('gpt-4');
    check(gs === 404 && gj.error.code === 'model_not_found' && /'gpt-4' is not available/.test(gj.error.message), `GET /v1/models/gpt-4 -> 404 model_not_found (${gs} ${gj.error && gj.error.message})`);
    [gs, gj] = await get('%FF%0A');
    check(gs === 404 && /\(unprintable\)/.test(gj.error.message), `a non-UTF-8 / control-byte id is not echoed (${gs} ${gj.error && gj.error.message})`);
    const post = await fetch(srv.url + '/v1/models/beta', { method: 'POST', body: '{}' });
    check(post.status === 405 && /GET/.test(post.headers.get('allow') || ''), `POST /v1/models/beta -> 405 with Allow (${post.status} ${post.headers.get('allow')})`);
  }
  const h = await (await fetch(srv.url + '/health')).json();
  check(h.model === 'beta', `/health names the loaded model (${h.model})`);
  check(alphaText !== betaText, `two different models answer differently (${JSON.stringify(alphaText)} vs ${JSON.stringify(betaText)})`);

  r = await ask('gpt-4');
  j = await r.json();
  check(r.status === 404 && j.error.code === 'model_not_found' && j.error.param === 'model' && /GET \/v1\/models/.test(j.error.message),
    `unknown model -> 404 model_not_found, nothing served (${r.status} ${j.error && j.error.message})`);
  r = await ask('broken');
  j = await r.json();
  check(r.status === 500 && j.error.code === 'model_load_failed' && /cannot load model 'broken'/.test(j.error.message),
    `a library model that fails to load -> 500 naming it (${j.error && j.error.message})`);
  d = await listed();
  r = await ask(undefined);
  j = await r.json();
  check(d[1].loaded && r.status === 200 && j.model === 'beta', 'after the failed load the previous model is loaded again and serves');
  r = await post({ model: 7, messages: [{ role: 'user', content: 'hi' }] });
  check(r.status === 400, `"model": 7 -> 400 (${r.status})`);

  r = await ask(undefined);
  j = await r.json();
  check(r.status === 200 && j.model === 'beta', `no "model" -> the loaded model (${j.model})`);

  // a long answer from beta while alpha is asked for: beta's request finishes, then the swap, both complete
  const t0 = Date.now();
  const [rb, ra] = await Promise.all([ask('beta', 64), new Promise((res) => setTimeout(() => res(ask('alpha', 4)), 50))]);
  const jb = await rb.json(), ja = await ra.json();
  check(rb.status === 200 && ra.status === 200 && jb.model === 'beta' && ja.model === 'alpha' && jb.usage.completion_tokens > 4,
    `concurrent beta (${jb.usage && jb.usage.completion_tokens} tokens) and alpha requests both complete in ${Date.now() - t0} ms`);
  check(ja.choices[0].message.content === alphaText, 'alpha after the swap back answers as before (greedy)');

  // streaming names its model in every chunk
  r = await post({ model: 'beta', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, stream: true });
  const body = await r.text();
  const chunks = body.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)));
  check(r.status === 200 && chunks.length > 0 && chunks.every((c) => c.model === 'beta'), `stream from beta: ${chunks.length} chunks, all model beta`);
} catch (e) {
  check(false, 'exception: ' + (e.stack || e));
} finally {
  const code = await stopServer(srv);
  check(code === 0, `serve stops cleanly (${code})`);
  fs.rmSync(lib, { recursive: true, force: true });
}
// serve -m PATH of a library file: named as in the library, listed once
{
  const lib2 = fs.mkdtempSync(path.join(os.tmpdir(), 'pb-serve-lib2-'));
  fs.copyFileSync(pickModel(), path.join(lib2, 'gemma-2-2b-it:q4_k_m.gguf'));
  const s2 = await startServer([], { PB_MODELS: lib2 }, 'gemma-2-2b-it'); // a catalog name: its default quantization
  const d = (await (await fetch(s2.url + '/v1/models')).json()).data;
  check(d.length === 1 && d[0].id === 'gemma-2-2b-it:q4_k_m' && d[0].loaded, `serve -m gemma-2-2b-it: listed once as ${JSON.stringify(d.map((m) => m.id))}`);
  const short = await fetch(s2.url + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'gemma-2-2b-it', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }) });
  const sj = await short.json();
  check(short.status === 200 && sj.model === 'gemma-2-2b-it:q4_k_m', `"model": "gemma-2-2b-it" (no quantization, as -m takes it) -> the one in the library (${short.status} ${sj.model})`);
  await stopServer(s2);
  fs.copyFileSync(pickModel(), path.join(lib2, 'gemma-2-2b-it:q8_0.gguf'));
  const s4 = await startServer([], { PB_MODELS: lib2 }, 'gemma-2-2b-it:q8_0');
  const amb = await fetch(s4.url + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'gemma-2-2b-it', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }) });
  const aj = await amb.json();
  check(amb.status === 404 && /ambiguous/.test(aj.error.message), `two quantizations: the short name is a 404 saying it is ambiguous (${amb.status} ${aj.error && aj.error.message})`);
  await stopServer(s4);
  fs.rmSync(path.join(lib2, 'gemma-2-2b-it:q8_0.gguf'));
  const s3 = await startServer([], { PB_MODELS: lib2 }, path.join(lib2, 'gemma-2-2b-it:q4_k_m.gguf'));
  const d3 = (await (await fetch(s3.url + '/v1/models')).json()).data;
  check(d3.length === 1 && d3[0].id === 'gemma-2-2b-it:q4_k_m', `serve -m PATH of a library file: ${JSON.stringify(d3.map((m) => m.id))}`);
  await stopServer(s3);
  fs.rmSync(lib2, { recursive: true, force: true });
}
// the library changes while the server runs: a model pulled later is listed and served; `rm` of the loaded model
// leaves it serving from memory until another is loaded, then it is gone (404)
{
  const lib3 = fs.mkdtempSync(path.join(os.tmpdir(), 'pb-serve-lib3-'));
  fs.symlinkSync(path.resolve(pickModel()), path.join(lib3, 'alpha.gguf'));
  const s5 = await startServer([], { PB_MODELS: lib3 }, 'alpha');
  const ids = async () => (await (await fetch(s5.url + '/v1/models')).json()).data.map((m) => m.id + (m.loaded ? '*' : ''));
  const chat = async (model) => {
    const r = await fetch(s5.url + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, temperature: 0 }) });
    const j = await r.json();
    return `${r.status} ${j.model || j.error.code}`;
  };
  try {
    check((await ids()).join(',') === 'alpha*', 'started with alpha only');
    fs.copyFileSync(peerModel(), path.join(lib3, 'gamma.gguf')); // as `pull` leaves it
    let got = await chat('gamma');
    check(got === '200 gamma', `a model put into the library after the start is served by name (${got})`);
    fs.copyFileSync(peerModel(), path.join(lib3, 'delta.gguf'));
    check((await ids()).join(',') === 'alpha,delta,gamma*', `/v1/models shows the library as it is now (${await ids()})`);
    const rm = spawnSync(bin(), ['rm', 'gamma'], { env: { ...process.env, PB_MODELS: lib3 }, encoding: 'utf8' });
    got = await chat('gamma');
    check(rm.status === 0 && got === '200 gamma' && (await ids()).join(',') === 'alpha,delta,gamma*',
      `rm of the loaded model: it keeps serving from memory, still listed as loaded (${got}; ${await ids()})`);
    got = await chat('alpha');
    const after = await chat('gamma');
    check(got === '200 alpha' && after === '404 model_not_found' && (await ids()).join(',') === 'alpha*,delta',
      `once another model is loaded the removed one is gone: ${after} (${await ids()})`);
  } catch (e) {
    check(false, 'exception: ' + (e.stack || e));
  } finally {
    await stopServer(s5);
    fs.rmSync(lib3, { recursive: true, force: true });
  }
}
// A request naming a model the library does not have lists the library again only when its directory changed: it was
// listed anew for each such request (for 2,000 models 0.35 s of manifests and GGUF headers read, under the lock every
// request takes: 20 of them at once held a valid request back 7 s). A model put into the library later is still
// found at once. strace counts the directory's listings (opendir).
{
  const lib5 = fs.mkdtempSync(path.join(os.tmpdir(), 'pb-serve-lib5-'));
  fs.symlinkSync(path.resolve(pickModel()), path.join(lib5, 'alpha.gguf'));
  for (let i = 0; i < 300; i++) fs.symlinkSync(path.resolve(peerModel()), path.join(lib5, `m${i}.gguf`));
  const st = spawnSync('strace', ['-f', '-qq', '-o', '/dev/null', 'true']);
  if (st.status !== 0) {
    note('strace cannot run here: the rescan count is not checked');
  } else {
    const log = path.join(lib5, 'strace.log');
    const proc = spawn('strace', ['-f', '-qq', '-e', 'trace=openat', '-o', log, bin(), 'serve', '-m', 'alpha', '--port', '0'],
      { env: { ...process.env, PB_MODELS: lib5 }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout.on('data', (d) => { out += d; });
    const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
    for (let i = 0; i < 600 && !/listening \d+/.test(out); i++) await sleep(100);
    const url = 'http://127.0.0.1:' + (out.match(/listening (\d+)/) || [])[1];
    const listings = () => fs.readFileSync(log, 'utf8').split('\n').filter((l) => l.includes(`"${lib5}", `) && l.includes('O_DIRECTORY')).length;
    const chat = async (model) => {
      const r = await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }) });
      const j = await r.json();
      return `${r.status} ${j.model || j.error.code}`;
    };
    try {
      await sleep(2500); // the directory's times older than 2 s: younger ones do not count as unchanged
      const n0 = listings();
      const got = await Promise.all(Array.from({ length: 20 }, () => chat('gpt-4')));
      for (let i = 0; i < 5; i++) await (await fetch(url + '/v1/models')).text();
      const n1 = listings() - n0;
      check(got.every((g) => g === '404 model_not_found') && n1 <= 1,
        `20 requests naming an unknown model and 5 GET /v1/models on an unchanged library of 301: ${n1} listings of it (at most 1)`);
      fs.symlinkSync(path.resolve(peerModel()), path.join(lib5, 'late.gguf'));
      const late = await chat('late');
      check(late === '200 late', `a model put into the library after that is served by name at once (${late})`);
    } catch (e) {
      check(false, 'exception: ' + (e.stack || e));
    } finally {
      const pid = Number(fs.readFileSync(log, 'utf8').split(' ')[0]); // strace's first line: the server's pid
      if (pid > 0) process.kill(pid, 'SIGTERM');
      await new Promise((res) => { const t = setTimeout(() => { proc.kill('SIGKILL'); res(); }, 15000); proc.on('exit', () => { clearTimeout(t); res(); }); });
    }
  }
  fs.rmSync(lib5, { recursive: true, force: true });
}
// Waiting for a model is bounded: a request for alpha while beta answers long waits at most --idle-timeout (then 503
// model_busy), and one whose client leaves stops waiting at once. Before, both waited for beta's running requests
// whatever their length, and held back every new request for beta meanwhile; a waiter that had left still had alpha
// loaded when beta's requests ended. A hot thermal zone (a pause of 100 ms a token) makes beta's answer long.
{
  const lib4 = fs.mkdtempSync(path.join(os.tmpdir(), 'pb-serve-lib4-'));
  fs.symlinkSync(path.resolve(pickModel()), path.join(lib4, 'alpha.gguf'));
  fs.symlinkSync(path.resolve(peerModel()), path.join(lib4, 'beta.gguf'));
  fs.writeFileSync(path.join(lib4, 'temp'), '91000\n');
  const s6 = await startServer(['-np', '2', '--idle-timeout', '2', '--thermal', path.join(lib4, 'temp')], { PB_MODELS: lib4 }, 'beta');
  const chat = (model, n, signal) => fetch(s6.url + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, signal,
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Say something.' }], max_tokens: n, temperature: 0, logit_bias: { 1: -100, 107: -100 } }) });
  const loaded = async () => (await (await fetch(s6.url + '/v1/models')).json()).data.filter((m) => m.loaded).map((m) => m.id).join(',');
  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
  try {
    const t0 = Date.now();
    const long = chat('beta', 120); // about 12 s at 100 ms a token
    await sleep(500);
    // a client that gives up on alpha after 1 s: the server stops waiting for it
    const ac = new AbortController();
    const left = chat('alpha', 2, ac.signal).catch(() => 'aborted');
    await sleep(1000);
    ac.abort();
    await left;
    await sleep(600); // the server notices within a 200 ms nap
    // beta serves a new request in its second slot at once: no waiter for alpha holds it back any more
    const t1 = Date.now();
    const rb = await chat('beta', 2);
    const jb = await rb.json();
    const tb = Date.now() - t1;
    check(rb.status === 200 && jb.model === 'beta' && tb < 4000, `beta answers beside the long request once alpha's waiter left (${rb.status} in ${tb} ms)`);
    check(/POST \/v1\/chat\/completions 499/.test(s6.stderr()), 'the waiter whose client left is logged as 499');
    // a waiter that stays: 503 model_busy after --idle-timeout (2 s), naming both models
    const t2 = Date.now();
    const ra = await chat('alpha', 2);
    const ja = await ra.json();
    const ta = Date.now() - t2;
    check(ra.status === 503 && ja.error.code === 'model_busy' && /'alpha' could not be loaded within 2 s/.test(ja.error.message) && /'beta'/.test(ja.error.message) && ta < 6000,
      `a request for alpha while beta is busy -> 503 model_busy after ${ta} ms: ${ja.error && ja.error.message}`);
    const rl = await long;
    const jl = await rl.json();
    check(rl.status === 200 && jl.model === 'beta' && Date.now() - t0 > 6000, `the long beta request completes (${rl.status}, ${jl.usage && jl.usage.completion_tokens} tokens, ${Date.now() - t0} ms)`);
    await sleep(500);
    const now = await loaded();
    check(now === 'beta', `no switch to alpha for the requests that gave up (loaded: ${now})`);
    const r2 = await chat('alpha', 2);
    check(r2.status === 200 && (await r2.json()).model === 'alpha', `alpha loads once beta is free (${r2.status})`);
  } catch (e) {
    check(false, 'exception: ' + (e.stack || e));
  } finally {
    await stopServer(s6);
    fs.rmSync(lib4, { recursive: true, force: true });
  }
}
note('library: alpha = ' + pickModel() + ', beta = ' + peerModel());
done();
