// test_server_hardening.mjs -- the server against hostile or careless clients, through real HTTP on 127.0.0.1:
// abandoned non-streaming requests are cancelled, a context that fills while answering gives the answer with
// finish_reason "length", Host / Origin checks (DNS rebinding, cross-site), connection limits and the header
// deadline, request validation with the engine's rules, HEAD / Allow / the request log, shutdown errors.
import http from 'node:http';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { check, note, startServer, stopServer, done, peerModel, waitFor } from './server_lib.mjs';

// raw request: resolves { status, headers, body } (no client-side rewriting of Host / Origin)
function raw(port, { method = 'GET', path = '/', headers = {}, body = null, localAddress } = {}) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers, localAddress, agent: false }, (res) => {
      let data = '';
      res.on('data', (d) => { data += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
      res.on('error', (e) => resolve({ status: 0, body: String(e) }));
    });
    req.on('error', (e) => resolve({ status: 0, body: String(e) }));
    req.setTimeout(20000, () => { req.destroy(); resolve({ status: 0, body: 'timeout' }); });
    req.end(body);
  });
}
const J = { 'Content-Type': 'application/json' };
const chat = (extra) => JSON.stringify({ messages: [{ role: 'user', content: 'Tell me about the harbor.' }], ...extra });
const metric = async (port, name) => {
  const t = (await raw(port, { path: '/metrics' })).body;
  const m = t.match(new RegExp('^' + name + ' (\\d+)', 'm'));
  return m ? Number(m[1]) : NaN;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- 5: an abandoned non-streaming request is cancelled, queued or running ----------------------------------
{
  const srv = await startServer(['--parallel', '1', '--queue', '1', '--max-tokens', '4096', '-c', '2048', '--quiet'], {}, peerModel());
  try {
    // three long answers (the peer model runs to max_tokens): one runs, one waits, one is refused; all abandoned
    const reqs = [];
    for (let i = 0; i < 3; i++) {
      const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/chat/completions', headers: J, agent: false });
      req.on('error', () => {});
      req.end(chat({ max_tokens: 1900 }));
      reqs.push(req);
      await sleep(150);
    }
    await sleep(500);
    for (const r of reqs) r.destroy();
    const idle = await waitFor(async () => (await raw(srv.port, { path: '/metrics' })).body,
      (t) => /^pocketbrain_slots_busy 0$/m.test(t) && /^pocketbrain_queue_depth 0$/m.test(t), 3000);
    check(/^pocketbrain_slots_busy 0$/m.test(idle) && /^pocketbrain_queue_depth 0$/m.test(idle),
      'abandoned non-streaming requests free their slot and queue place at once: ' + (idle.match(/^pocketbrain_(slots_busy|queue_depth) \d+$/gm) || []).join(', '));
    const t0 = Date.now();
    const r = await raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: chat({ max_tokens: 4 }) });
    check(r.status === 200, `a new request is served after the abandoned ones (${r.status} in ${Date.now() - t0} ms)`);
    const cancelled = await metric(srv.port, 'pocketbrain_requests_cancelled_total');
    check(cancelled >= 2, `both admitted abandoned requests counted as cancelled (${cancelled})`);
  } catch (e) { check(false, 'unexpected error: ' + e.stack); }
  await stopServer(srv);
  check(!/ (GET|POST) \/(v1|metrics)/.test(srv.stderr()), '--quiet: no request log lines on stderr');
}

// ---- 6: the context filling up while answering -> 200 with finish_reason "length" ---------------------------
// ---- 9: validation, UTF-8, HEAD, Allow, include_usage, the request log ----------------------------------------
{
  const srv = await startServer(['-c', '128', '--max-tokens', '512'], {}, peerModel());
  try {
    const r = await raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: chat({ max_tokens: 500 }) });
    const j = r.status === 200 ? JSON.parse(r.body) : null;
    check(r.status === 200 && j.choices[0].finish_reason === 'length' && j.usage.completion_tokens > 0 &&
      j.usage.prompt_tokens + j.usage.completion_tokens <= 128 + 1, // the last token is sampled and returned, never fed back
    `context full while answering: ${r.status}, finish_reason ${j?.choices[0].finish_reason}, ${j?.usage.prompt_tokens}+${j?.usage.completion_tokens} tokens (${r.body.slice(0, 120)})`);
    const s = await raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: chat({ max_tokens: 500, stream: true, stream_options: { include_usage: true } }) });
    const events = s.body.split('\n\n').filter((e) => e.startsWith('data: ') && !e.includes('[DONE]')).map((e) => JSON.parse(e.slice(6)));
    const fin = events.filter((e) => e.choices.length && e.choices[0].finish_reason);
    check(s.status === 200 && fin.length === 1 && fin[0].choices[0].finish_reason === 'length' && !s.body.includes('"error"'),
      'stream: the final chunk says finish_reason "length" ' + JSON.stringify(fin.map((e) => e.choices[0].finish_reason)));
    const last = events[events.length - 1];
    check(last && Array.isArray(last.choices) && last.choices.length === 0 && last.usage && last.usage.completion_tokens > 0 &&
      events.slice(0, -1).every((e) => !e.usage),
    'include_usage: the usage comes alone in the last chunk with empty choices ' + JSON.stringify(last));

    // request fields checked with the engine's rules: 400 naming the field, never 500
    const bad = async (what, body, param, path = '/v1/chat/completions') => {
      const b = await raw(srv.port, { method: 'POST', path, headers: J, body });
      let e = null;
      try { e = JSON.parse(b.body).error; } catch { /* not JSON */ }
      check(b.status === 400 && e && e.param === param, `${what} -> ${b.status} param ${e?.param}: ${e?.message}`);
    };
    await bad('top_p 0', chat({ top_p: 0 }), 'top_p');
    await bad('a 10,000-byte stop string', chat({ stop: 'x'.repeat(10000) }), 'stop');
    await bad('stream_options not an object', chat({ stream: true, stream_options: 3 }), 'stream_options');
    const badUtf8 = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"caf'), Buffer.from([0xe9, 0x21]), Buffer.from('"}]}')]);
    await bad('invalid UTF-8 in a message', badUtf8, 'messages[0].content');
    const badUtf8c = Buffer.concat([Buffer.from('{"prompt":"a'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}')]);
    await bad('invalid UTF-8 in a completion prompt', badUtf8c, 'prompt', '/v1/completions');
    // what the server does not do is refused, never silently ignored (the client would miss what it asked for)
    await bad('logprobs: true', chat({ logprobs: true }), 'logprobs');
    await bad('tools (function calling)', chat({ tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] }), 'tools');
    await bad('tool_choice: required', chat({ tool_choice: 'required' }), 'tool_choice');
    await bad('response_format json_object', chat({ response_format: { type: 'json_object' } }), 'response_format');
    await bad('echo on a completion', JSON.stringify({ prompt: 'a', echo: true }), 'echo', '/v1/completions');
    // logit_bias is done, with the engine's rules: ids in the vocabulary, values -100..100
    await bad('logit_bias id outside the vocabulary', chat({ logit_bias: { 999999: 5 } }), 'logit_bias');
    await bad('logit_bias key not an id', chat({ logit_bias: { harbor: 5 } }), 'logit_bias');
    await bad('logit_bias value 101', chat({ logit_bias: { 1000: 101 } }), 'logit_bias');
    const lb = await raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: chat({ max_tokens: 3, temperature: 0, logit_bias: { 1500: 100 } }) });
    const lbText = lb.status === 200 ? JSON.parse(lb.body).choices[0].message.content : '';
    check(lb.status === 200 && lbText === ' show show show', `logit_bias {1500: 100} makes token 1500 every token: ${lb.status} ${JSON.stringify(lbText)}`);
    const okFalse = await raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: chat({ max_tokens: 2, logprobs: false, tools: [], response_format: { type: 'text' } }) });
    check(okFalse.status === 200, `logprobs false, empty tools, response_format text are fine: ${okFalse.status}`);
    // a \u0000 in the text would be cut there by the JSON parser without a word: refused
    const nul = await raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: '{"messages":[{"role":"user","content":"a\\u0000b"}]}' });
    check(nul.status === 400 && /NUL/.test(nul.body), 'a NUL character (\\u0000) in a message -> ' + nul.status + ' ' + nul.body.slice(0, 100));
    const esc = await raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: '{"messages":[{"role":"user","content":"a\\\\u0000b"}],"max_tokens":2}' });
    check(esc.status === 200, 'an escaped backslash before u0000 is text, not a NUL: ' + esc.status);

    // HEAD where GET works; 405 carries Allow
    for (const p of ['/health', '/v1/models', '/']) {
      const h = await raw(srv.port, { method: 'HEAD', path: p });
      check(h.status === 200 && h.body === '', `HEAD ${p} -> ${h.status}, no body`);
    }
    const m1 = await raw(srv.port, { method: 'DELETE', path: '/health' });
    check(m1.status === 405 && m1.headers.allow === 'GET, HEAD, OPTIONS', `DELETE /health -> ${m1.status}, Allow: ${m1.headers.allow}`);
    const m2 = await raw(srv.port, { method: 'GET', path: '/v1/chat/completions' });
    check(m2.status === 405 && m2.headers.allow === 'POST, OPTIONS', `GET /v1/chat/completions -> ${m2.status}, Allow: ${m2.headers.allow}`);
    const hl = JSON.parse((await raw(srv.port, { path: '/health' })).body);
    check(typeof hl.model === 'string' && hl.knowledge_base === false, '/health names the model and says there is no knowledge base: ' + JSON.stringify(hl));
  } catch (e) { check(false, 'unexpected error: ' + e.stack); }
  await stopServer(srv);
  const log = srv.stderr().split('\n').filter((l) => / POST \/v1\/chat\/completions /.test(l));
  check(log.some((l) => /^pocketbrain serve: 127\.0\.0\.1 POST \/v1\/chat\/completions 200 \d+\+\d+ tokens \d+\.\d+ s$/.test(l)) &&
    log.some((l) => / 400 /.test(l)), 'a request log line per request: ' + log[0]);
}

// ---- 7: Host and Origin checks ---------------------------------------------------------------------------------
{
  const srv = await startServer(['--quiet'], {}, peerModel());
  const cors = await startServer(['--quiet', '--cors', 'http://app.example:3000', '--allow-host', 'pocketbrain.lan'], {}, peerModel());
  try {
    const p = srv.port;
    const g = async (what, opts, want) => {
      const r = await raw(opts.port || p, opts);
      check(r.status === want, `${what} -> ${r.status} ${r.status >= 400 ? r.body.slice(0, 140) : ''}`);
      return r;
    };
    await g('Host: evil.example (DNS rebinding)', { path: '/v1/models', headers: { Host: 'evil.example:' + p } }, 403);
    await g('Host: evil.example on a POST', { method: 'POST', path: '/v1/chat/completions', headers: { ...J, Host: 'evil.example' }, body: chat({ max_tokens: 2 }) }, 403);
    await g('Host: 127.0.0.1:PORT', { path: '/v1/models', headers: { Host: '127.0.0.1:' + p } }, 200);
    await g('Host: localhost:PORT', { path: '/v1/models', headers: { Host: 'localhost:' + p } }, 200);
    await g('Host: 10.1.2.3 (not an address it listens on)', { path: '/health', headers: { Host: '10.1.2.3' } }, 403);
    await g('cross-origin POST from a web page', { method: 'POST', path: '/v1/chat/completions', headers: { ...J, Origin: 'http://evil.example' }, body: chat({ max_tokens: 2 }) }, 403);
    await g('cross-site no-cors GET', { path: '/v1/models', headers: { 'Sec-Fetch-Site': 'cross-site' } }, 403);
    await g('same-origin POST (the web UI)', { method: 'POST', path: '/v1/chat/completions', headers: { ...J, Origin: 'http://127.0.0.1:' + p, Host: '127.0.0.1:' + p }, body: chat({ max_tokens: 2 }) }, 200);
    const pre = await g('CORS preflight without --cors', { method: 'OPTIONS', path: '/v1/chat/completions', port: p, headers: { Origin: 'http://app.example:3000', 'Access-Control-Request-Method': 'POST' } }, 403);
    check(!pre.headers['access-control-allow-origin'], 'no CORS header without --cors');
    const q = cors.port;
    const pf = await g('--cors: preflight from the allowed origin', { port: q, method: 'OPTIONS', path: '/v1/chat/completions', headers: { Origin: 'http://app.example:3000', 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type' } }, 204);
    check(pf.headers['access-control-allow-origin'] === 'http://app.example:3000' && /POST/.test(pf.headers['access-control-allow-methods']), 'preflight carries the CORS headers');
    const cr = await g('--cors: POST from the allowed origin', { port: q, method: 'POST', path: '/v1/chat/completions', headers: { ...J, Origin: 'http://app.example:3000' }, body: chat({ max_tokens: 2 }) }, 200);
    check(cr.headers['access-control-allow-origin'] === 'http://app.example:3000', 'the answer carries Access-Control-Allow-Origin');
    await g('--cors: another origin still refused', { port: q, method: 'POST', path: '/v1/chat/completions', headers: { ...J, Origin: 'http://evil.example' }, body: chat({ max_tokens: 2 }) }, 403);
    await g('--allow-host pocketbrain.lan', { port: q, path: '/health', headers: { Host: 'pocketbrain.lan:' + q } }, 200);
  } catch (e) { check(false, 'unexpected error: ' + e.stack); }
  await stopServer(srv);
  await stopServer(cors);
}

// ---- 8: slow clients: per-address limit and the header deadline -----------------------------------------------
{
  const srv = await startServer(['--quiet', '--header-timeout', '2'], {}, peerModel());
  const socks = [];
  try {
    // 600 clients that never finish their headers (slowloris), from one address
    await Promise.all(Array.from({ length: 600 }, () => new Promise((resolve) => {
      const s = net.connect({ host: '127.0.0.1', port: srv.port }, () => { s.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n'); resolve(); });
      s.on('error', () => resolve());
      socks.push(s);
    })));
    await sleep(300);
    const t0 = Date.now();
    const h = await raw(srv.port, { path: '/health', localAddress: '127.0.0.2' });
    const ms = Date.now() - t0;
    check(h.status === 200 && ms < 1500, `/health from another address answers during 600 slow connections (${h.status} in ${ms} ms)`);
    const open = socks.filter((s) => !s.destroyed && s.readyState === 'open').length;
    note(`${open} of 600 slow connections still open right after connecting`);
    // one that trickles a header byte every 300 ms is closed at its deadline
    const t1 = Date.now();
    const closedAfter = await new Promise((resolve) => {
      const s = net.connect({ host: '127.0.0.1', port: srv.port, localAddress: '127.0.0.3' }, () => {
        s.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n');
        const iv = setInterval(() => { if (!s.destroyed) s.write('X'); }, 300);
        s.on('close', () => { clearInterval(iv); resolve(Date.now() - t1); });
      });
      s.on('error', () => {});
      setTimeout(() => { s.destroy(); resolve(-1); }, 8000);
    });
    check(closedAfter > 1500 && closedAfter < 4500, `a trickling client is closed at the 2 s header deadline (after ${closedAfter} ms)`);
  } catch (e) { check(false, 'unexpected error: ' + e.stack); }
  for (const s of socks) s.destroy();
  await stopServer(srv);
}

// ---- 9: a request queued at shutdown gets the error a stream gets, not an empty success -----------------------
{
  const srv = await startServer(['--quiet', '--parallel', '2', '--max-tokens', '4096'], {}, peerModel());
  try {
    // two answers running when the server stops, cut short: neither may look whole ("finish_reason": "stop")
    const running = raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: chat({ max_tokens: 1900 }) });
    const runningStream = raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: chat({ max_tokens: 1900, stream: true }) });
    await waitFor(() => metric(srv.port, 'pocketbrain_slots_busy'), (v) => v === 2, 10000);
    const queued = raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: chat({ max_tokens: 8 }) });
    await waitFor(() => metric(srv.port, 'pocketbrain_queue_depth'), (v) => v === 1, 10000);
    const queuedStream = raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: chat({ max_tokens: 8, stream: true }) });
    await waitFor(() => metric(srv.port, 'pocketbrain_queue_depth'), (v) => v === 2, 10000);
    const code = await stopServer(srv);
    const q = await queued;
    const qs = await queuedStream;
    const r = await running;
    const rs = await runningStream;
    check(r.status === 503 && /shutting down/.test(r.body) && /"code":"shutting_down"/.test(r.body),
      `running non-streaming request at shutdown -> ${r.status} ${r.body.slice(0, 120)}`);
    check(/"content":/.test(rs.body) && /"error":\{"message":"the server is shutting down: this answer was cut short"/.test(rs.body) &&
      /\[DONE\]/.test(rs.body) && !/finish_reason":"stop"/.test(rs.body),
      'running stream at shutdown: its text so far, then an error event, no "stop" ' + JSON.stringify(rs.body.slice(-200)));
    check(q.status === 503 && /shutting down/.test(q.body), `queued non-streaming request at shutdown -> ${q.status} ${q.body.slice(0, 100)}`);
    check(/"error":\{"message":"the server is shutting down"/.test(qs.body) && /\[DONE\]/.test(qs.body) && !/finish_reason":"stop"/.test(qs.body),
      'queued stream at shutdown: an error event, then [DONE] ' + qs.body.slice(-160));
    check(code === 0, 'server exited 0');
  } catch (e) { check(false, 'unexpected error: ' + e.stack); srv.proc.kill('SIGKILL'); }
}

// ---- 9: prompts are built and tokenized only after a queue place: a burst of 1 MB prompts is refused cheaply ----
{
  const srv = await startServer(['--quiet', '--parallel', '1', '--queue', '0', '--max-body', '2M', '--max-tokens', '4096'], {}, peerModel());
  try {
    const hwm = () => Number(readFileSync(`/proc/${srv.proc.pid}/status`, 'utf8').match(/VmHWM:\s+(\d+)/)[1]) * 1024;
    const running = raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: chat({ max_tokens: 1900 }) });
    await waitFor(() => metric(srv.port, 'pocketbrain_slots_busy'), (v) => v === 1, 10000);
    const before = hwm();
    const big = JSON.stringify({ messages: [{ role: 'user', content: 'word '.repeat(200000) }], max_tokens: 4 });
    const codes = await Promise.all(Array.from({ length: 24 }, () => raw(srv.port, { method: 'POST', path: '/v1/chat/completions', headers: J, body: big }).then((r) => r.status)));
    const grew = hwm() - before;
    // tokenizing one such prompt takes ~20 MB; 24 of them at once took ~500 MB before the fix
    check(codes.every((c) => c === 429) && grew < 200e6, `24 concurrent 1 MB prompts with no queue place: ${[...new Set(codes)]}, peak memory +${(grew / 1e6).toFixed(0)} MB`);
    // the same class: /tokenize (the UI's live counter) counts one text at a time
    const before2 = hwm();
    const bigTok = JSON.stringify({ content: 'word '.repeat(200000) });
    const tcodes = await Promise.all(Array.from({ length: 24 }, () => raw(srv.port, { method: 'POST', path: '/tokenize', headers: J, body: bigTok }).then((r) => r.status)));
    const grew2 = hwm() - before2;
    check(tcodes.every((c) => c === 200) && grew2 < 200e6, `24 concurrent 1 MB /tokenize requests: ${[...new Set(tcodes)]}, peak memory +${(grew2 / 1e6).toFixed(0)} MB`);
    const bt = await raw(srv.port, { method: 'POST', path: '/tokenize', headers: J, body: Buffer.concat([Buffer.from('{"content":"a'), Buffer.from([0xff]), Buffer.from('"}')]) });
    check(bt.status === 400 && /content/.test(bt.body), '/tokenize: invalid UTF-8 -> ' + bt.status + ' ' + bt.body.slice(0, 100));
    await stopServer(srv);
    await running;
  } catch (e) { check(false, 'unexpected error: ' + e.stack); srv.proc.kill('SIGKILL'); }
}

// ---- 9: --host accepts localhost and IPv6 ---------------------------------------------------------------------
{
  for (const host of ['localhost', '::1']) {
    try {
      const srv = await startServer(['--quiet', '--host', host], {}, peerModel());
      const ok = await new Promise((resolve) => {
        http.get({ host: host === '::1' ? '::1' : 'localhost', port: srv.port, path: '/health', agent: false }, (res) => { res.resume(); resolve(res.statusCode); })
          .on('error', (e) => resolve(String(e)));
      });
      check(ok === 200, `--host ${host}: /health -> ${ok}`);
      await stopServer(srv);
    } catch (e) {
      if (host === '::1' && /Cannot assign|not available|no IPv4 or IPv6|EADDRNOTAVAIL/.test(String(e))) note('no IPv6 loopback here: ' + e.message);
      else check(false, `--host ${host}: ${e.message}`);
    }
  }
}
done();
