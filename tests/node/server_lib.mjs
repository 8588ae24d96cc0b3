// server_lib.mjs -- helpers for the server tests: start `pocketbrain serve` on a free port, TAP-style checks.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

export let failures = 0;
export function check(cond, msg) {
  if (cond) console.log('ok - ' + msg);
  else { console.log('not ok - ' + msg); failures++; }
}
export function note(msg) { console.log('# ' + msg); }

export function pickModel() {
  if (process.env.PB_TEST_MODEL) return process.env.PB_TEST_MODEL;
  if (existsSync('models/default.gguf')) return 'models/default.gguf';
  const shared = process.env.PB_SHARED || '../shared';
  return path.join(shared, 'fixtures/peer/model/gemma2-tiny-v.q8_0.gguf');
}

// The peer fixture model: random weights that rarely emit <eos>, so answers run to max_tokens (long
// enough to watch streaming and to press Stop).
export function peerModel() {
  return path.join(process.env.PB_SHARED || '../shared', 'fixtures/peer/model/gemma2-tiny-v.q8_0.gguf');
}

export function bin() { return process.env.PB_BIN || 'build/pocketbrain'; }

// 'AddressSanitizer' / 'ThreadSanitizer' when the binary is built with one (its runtime lists its flags on
// ASAN_OPTIONS=help=1 / TSAN_OPTIONS=help=1), else null.
export function sanitizerOf(path) {
  const r = spawnSync(path, ['--help'], { env: { ...process.env, ASAN_OPTIONS: 'help=1', TSAN_OPTIONS: 'help=1' }, encoding: 'utf8' });
  const m = /Available flags for (AddressSanitizer|ThreadSanitizer)/.exec(r.stderr || '');
  return m ? m[1] : null;
}

// Starts the server; resolves { url, port, proc, stderr() } once it printed "listening PORT".
export function startServer(extraArgs = [], env = {}, model = pickModel()) {
  return new Promise((resolve, reject) => {
    const args = ['serve', '-m', model, '--port', '0', ...extraArgs];
    // an empty model library unless the test gives one: the user's pulled models stay out of the tests
    const lib = { PB_MODELS: process.env.PB_MODELS || path.join(process.env.PB_BUILD || 'build', 'test-library') };
    const proc = spawn(bin(), args, { env: { ...process.env, ...lib, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error('server did not start: ' + err)); }, 30000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening (\d+)/);
      if (m) {
        clearTimeout(timer);
        const port = Number(m[1]);
        resolve({ url: `http://127.0.0.1:${port}`, port, proc, stderr: () => err });
      }
    });
    proc.stderr.on('data', (d) => { err += d; });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}: ${err}`)); });
  });
}

// Stops with SIGTERM and resolves the exit code.
export function stopServer(srv) {
  return new Promise((resolve) => {
    srv.proc.removeAllListeners('exit');
    const t = setTimeout(() => srv.proc.kill('SIGKILL'), 15000);
    srv.proc.on('exit', (code, sig) => { clearTimeout(t); resolve(code === null ? sig : code); });
    srv.proc.kill('SIGTERM');
  });
}

// Polls the async probe every 100 ms until pred(value) holds or ms pass; resolves the last value seen. For
// state the server reaches a little after a client-side event (a cancel noticed, slots going idle): waiting
// for the condition, not a fixed sleep, keeps the checks right on a slow, loaded machine.
export async function waitFor(probe, pred, ms = 30000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (pred(v) || Date.now() >= deadline) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
}

export function done() { process.exit(failures ? 1 : 0); }
