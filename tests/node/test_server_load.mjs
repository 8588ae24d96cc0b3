// test_server_load.mjs -- bounded loopback load: N concurrent streaming clients for LOAD_SECONDS (default 20),
// a quarter of them disconnecting mid-stream. No crash, every non-cancelled request completes, memory flat.
import http from 'node:http';
import { check, note, startServer, stopServer, done, peerModel, waitFor, bin, sanitizerOf } from './server_lib.mjs';

const SECONDS = Number(process.env.LOAD_SECONDS || 20);
const CLIENTS = Number(process.env.LOAD_CLIENTS || 32);
// the peer model's answers run to max_tokens, so every disconnecting client really disconnects mid-stream
const srv = await startServer(['--parallel', '2', '--queue', '64', '--max-tokens', '32'], {}, peerModel());
// Under a sanitizer the RSS is the sanitizer's allocator: ASan's quarantine of freed blocks (256 MB) and its
// per-thread state grow with every request served, so the growth measures how fast the machine was, not the
// server (idle 2 cores, 60 s: ~740 requests, +75 MB). There the sanitizer itself checks memory (LeakSanitizer,
// reports fail this test below) and the RSS is only reported; the plain build asserts "memory flat".
const sanitizer = sanitizerOf(bin());

function rss() {
  return fetch(srv.url + '/metrics').then((r) => r.text()).then((t) => Number((t.match(/^pocketbrain_resident_memory_bytes (\d+)/m) || [])[1]));
}

function oneRequest(i, disconnect) {
  return new Promise((resolve) => {
    const body = JSON.stringify({ messages: [{ role: 'user', content: 'Client ' + i + ' says hello.' }], stream: true, max_tokens: 16 + (i % 8) });
    const req = http.request(srv.url + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' } }, (res) => {
      let data = '', events = 0;
      res.on('data', (d) => {
        data += d;
        events = (data.match(/^data: /gm) || []).length;
        if (disconnect && events >= 3) { req.destroy(); resolve('cancelled'); }
      });
      res.on('end', () => resolve(res.statusCode === 429 ? 'rejected' : data.includes('data: [DONE]') && data.includes('finish_reason":"') ? 'ok' : 'incomplete:' + res.statusCode + ':' + data.slice(-200)));
      res.on('error', () => resolve(disconnect ? 'cancelled' : 'error'));
    });
    req.on('error', (e) => resolve(disconnect ? 'cancelled' : 'error:' + e.message));
    req.end(body);
  });
}

const counts = { ok: 0, cancelled: 0, rejected: 0, bad: 0 };
const bad = [];
try {
  // warm up, then measure memory before the load
  await oneRequest(-1, false);
  const rssBefore = await rss();
  const deadline = Date.now() + SECONDS * 1000;
  let n = 0;
  async function client(k) {
    // a quarter of the clients (k % 4 == 0) disconnect mid-stream on every other request, the first included
    for (let mine = 0; Date.now() < deadline; mine++) {
      const r = await oneRequest(n++, k % 4 === 0 && mine % 2 === 0);
      if (r in counts) counts[r]++; else { counts.bad++; if (bad.length < 5) bad.push(r); }
    }
  }
  await Promise.all(Array.from({ length: CLIENTS }, (_, k) => client(k)));
  // cancelled generations wind down on the server after their clients left: wait until the queue is empty
  // and the slots are idle (checked below), then measure
  const idle = (t) => /^pocketbrain_queue_depth 0$/m.test(t) && /^pocketbrain_slots_busy 0$/m.test(t);
  const m = await waitFor(() => fetch(srv.url + '/metrics').then((r) => r.text()), idle, 60000);
  const health = await fetch(srv.url + '/health');
  const rssAfter = await rss();
  note(`load ${SECONDS}s x ${CLIENTS} clients: ${JSON.stringify(counts)}; RSS ${(rssBefore / 1e6).toFixed(1)} -> ${(rssAfter / 1e6).toFixed(1)} MB`);
  check(health.status === 200, 'server alive after the load');
  check(counts.ok > 0 && counts.cancelled > 0, `requests completed (${counts.ok}) and cancelled (${counts.cancelled})`);
  check(counts.bad === 0, 'every non-cancelled request completed or was rejected with 429 ' + bad.join(' | '));
  // memory flat: allow allocator slack, not growth per request
  if (sanitizer) note(`${sanitizer} build: RSS +${((rssAfter - rssBefore) / 1e6).toFixed(1)} MB is the sanitizer's allocator, not checked`);
  else check(rssAfter < rssBefore + 64e6, `memory flat after the load (+${((rssAfter - rssBefore) / 1e6).toFixed(1)} MB)`);
  check(idle(m), 'queue drained and slots idle: ' + (m.match(/^pocketbrain_(queue_depth|slots_busy) \d+$/gm) || []).join(', '));
} catch (e) {
  check(false, 'unexpected error: ' + e.stack + '\n' + srv.stderr());
}
const code = await stopServer(srv);
check(code === 0, 'server exited 0 after SIGTERM (' + code + ')');
if (/AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error/.test(srv.stderr())) check(false, 'sanitizer report: ' + srv.stderr().slice(-2000));
done();
