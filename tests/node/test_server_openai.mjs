// test_server_openai.mjs -- the official openai npm client against `pocketbrain serve`: chat, streaming,
// stop, completions, models, errors (4xx JSON), API key, prefix reuse across turns, SIGTERM shutdown.
import OpenAI from 'openai';
import { check, note, startServer, stopServer, done, peerModel, waitFor } from './server_lib.mjs';

// The peer model (random weights) rarely emits <eos>, so answers run to max_tokens: the abort and SIGTERM
// checks below then always catch a generation in flight.
const srv = await startServer(['--parallel', '2', '--api-key', 'sekrit', '--max-body', '64K', '--max-tokens', '1000'], {}, peerModel());
const client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'sekrit', maxRetries: 0 });
const bad = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'wrong', maxRetries: 0 });
let M = 'default'; // the served model's id (requests naming another model get a 404)

try {
  // models
  const models = await client.models.list();
  check(models.data.length === 1 && typeof models.data[0].id === 'string', 'GET /v1/models lists the model');
  M = models.data[0].id;
  const one = await client.models.retrieve(M); // GET /v1/models/ID
  check(one.id === M && one.object === 'model' && one.loaded === true, `GET /v1/models/${M} retrieves the model (${JSON.stringify(one)})`);

  // non-stream chat
  const r = await client.chat.completions.create({
    model: M, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'What does harbor mean?' }],
    max_tokens: 16, temperature: 0, seed: 1,
  });
  check(r.object === 'chat.completion' && r.choices[0].message.role === 'assistant', 'chat completion shape');
  check(typeof r.choices[0].message.content === 'string' && r.usage.completion_tokens > 0, `chat produced ${r.usage.completion_tokens} tokens`);
  check(['stop', 'length'].includes(r.choices[0].finish_reason), 'finish_reason is stop or length');
  check(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, 'usage adds up');

  // determinism: same seed + settings -> same text
  const r2 = await client.chat.completions.create({
    model: M, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'What does harbor mean?' }],
    max_tokens: 16, temperature: 0, seed: 1,
  });
  check(r2.choices[0].message.content === r.choices[0].message.content, 'same request, same seed -> same answer');

  // streaming
  const stream = await client.chat.completions.create({
    model: M, messages: [{ role: 'user', content: 'Tell me a story.' }], stream: true, max_tokens: 24, temperature: 0.7, seed: 3,
    stream_options: { include_usage: true },
  });
  let chunks = 0, text = '', finish = null, usage = null;
  for await (const ch of stream) {
    if (ch.choices[0]?.delta?.content) { chunks++; text += ch.choices[0].delta.content; }
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
    if (ch.usage) usage = ch.usage;
  }
  check(chunks >= 2, `stream delivered ${chunks} content chunks`);
  check(finish !== null, 'stream ends with a finish_reason');
  check(usage && usage.completion_tokens >= chunks, 'stream_options.include_usage gives usage');

  // stop strings: the stop text never appears
  const noStop = await client.chat.completions.create({
    model: M, messages: [{ role: 'user', content: 'Count.' }], max_tokens: 40, temperature: 0, seed: 5,
  });
  const full = noStop.choices[0].message.content;
  if (full.length >= 6) {
    const stopStr = full.slice(3, 6);
    const withStop = await client.chat.completions.create({
      model: M, messages: [{ role: 'user', content: 'Count.' }], max_tokens: 40, temperature: 0, seed: 5, stop: [stopStr],
    });
    const t = withStop.choices[0].message.content;
    check(!t.includes(stopStr) && full.startsWith(t), `stop string ${JSON.stringify(stopStr)} cuts the answer (${t.length} < ${full.length} chars)`);
    check(withStop.choices[0].finish_reason === 'stop', 'stop string gives finish_reason stop');
  } else {
    check(false, 'answer long enough to test a stop string: ' + JSON.stringify(full));
  }

  // completions endpoint
  const c = await client.completions.create({ model: M, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  check(c.object === 'text_completion' && typeof c.choices[0].text === 'string', 'POST /v1/completions works');

  // multi-turn prefix reuse: the second turn reuses the cached first turn
  const metric = async (name) => {
    const t = await (await fetch(srv.url + '/metrics', { headers: { Authorization: 'Bearer sekrit' } })).text();
    const m = t.match(new RegExp('^' + name + ' (\\d+)', 'm'));
    return m ? Number(m[1]) : NaN;
  };
  const convo = [{ role: 'user', content: 'What does harbor mean? Please answer in detail.' }];
  const t1 = await client.chat.completions.create({ model: M, messages: convo, max_tokens: 12, temperature: 0 });
  const reusedBefore = await metric('pocketbrain_prompt_tokens_reused_total');
  convo.push({ role: 'assistant', content: t1.choices[0].message.content }, { role: 'user', content: 'Use it in a sentence.' });
  await client.chat.completions.create({ model: M, messages: convo, max_tokens: 8, temperature: 0 });
  const reusedAfter = await metric('pocketbrain_prompt_tokens_reused_total');
  check(reusedAfter - reusedBefore >= t1.usage.prompt_tokens, `second turn reused ${reusedAfter - reusedBefore} cached prompt tokens (first prompt ${t1.usage.prompt_tokens})`);

  // errors through the client
  const expectError = async (what, fn, status) => {
    try { await fn(); check(false, what + ' should fail'); } catch (e) {
      check(e.status === status && e.error && typeof e.error.message === 'string', `${what} -> ${e.status} (${e.error?.message})`);
    }
  };
  await expectError('bad API key', () => bad.models.list(), 401);
  await expectError('retrieving a model the server does not have', () => client.models.retrieve('gpt-4'), 404);
  await expectError('retrieving a model with a bad API key', () => bad.models.retrieve(M), 401);
  // with --api-key, /metrics, /stats and /tokenize are behind the key too (they tell what is asked and how busy it is)
  for (const [path, init] of [['/metrics', {}], ['/stats', {}], ['/tokenize', { method: 'POST', body: '{"content":"hi"}' }]]) {
    const none = await fetch(srv.url + path, init);
    const wrong = await fetch(srv.url + path, { ...init, headers: { Authorization: 'Bearer wrong' } });
    const right = await fetch(srv.url + path, { ...init, headers: { Authorization: 'Bearer sekrit' } });
    check(none.status === 401 && wrong.status === 401 && right.status === 200,
      `${path}: no key ${none.status}, wrong key ${wrong.status}, the key ${right.status}`);
  }
  const health = await fetch(srv.url + '/health');
  check(health.status === 200, `/health answers without the key (${health.status}): liveness probes carry none`);
  await expectError('missing messages', () => client.chat.completions.create({ model: M }), 400);
  await expectError('temperature out of range', () => client.chat.completions.create({ model: M, messages: [{ role: 'user', content: 'hi' }], temperature: 9 }), 400);
  await expectError('bad role', () => client.chat.completions.create({ model: M, messages: [{ role: 'wizard', content: 'hi' }] }), 400);
  await expectError('max_tokens above the cap', () => client.chat.completions.create({ model: M, messages: [{ role: 'user', content: 'hi' }], max_tokens: 100000 }), 400);
  await expectError('prompt longer than the context', () => client.chat.completions.create({ model: M, messages: [{ role: 'user', content: 'word '.repeat(3000) }] }), 400);

  // cancellation by the client: abort a stream mid-way, server stays healthy
  const ac = new AbortController();
  let got = 0;
  try {
    const s2 = await client.chat.completions.create({ model: M, messages: [{ role: 'user', content: 'Go on and on.' }], stream: true, max_tokens: 64 }, { signal: ac.signal });
    for await (const ch of s2) { if (ch.choices[0]?.delta?.content) got++; if (got === 3) ac.abort(); }
  } catch (e) { /* aborted */ }
  // the server counts the cancel once the slot has wound the generation down: wait for it, not a fixed time
  const cancelled = await waitFor(() => metric('pocketbrain_requests_cancelled_total'), (v) => v >= 1);
  check(cancelled >= 1, `client abort cancelled the generation (cancelled_total ${cancelled})`);
  const h = await fetch(srv.url + '/health');
  check(h.status === 200, 'server healthy after the abort');

  // SIGTERM during a stream: the answer is cut short, and the stream says so with an error event (the client throws
  // it; a final "stop" would pass the cut answer off as whole), then the process exits 0
  const s3 = await client.chat.completions.create({ model: M, messages: [{ role: 'user', content: 'Long answer please.' }], stream: true, max_tokens: 1000 });
  let ended = false, n3 = 0, exitCode = null;
  const reading = (async () => { try { for await (const ch of s3) { n3++; if (n3 === 2) exitCode = stopServer(srv); } ended = true; } catch (e) { ended = 'error: ' + e.message; } })();
  await reading;
  const code = await (exitCode || stopServer(srv));
  check(n3 >= 2 && /shutting down: this answer was cut short/.test(String(ended)),
    `in-flight stream cut by SIGTERM: the client got ${n3} chunks, then the server's error (${ended})`);
  check(code === 0, 'server exited 0 after SIGTERM (got ' + code + ')');
} catch (e) {
  check(false, 'unexpected error: ' + e.stack + '\nserver stderr: ' + srv.stderr());
  srv.proc.kill('SIGKILL');
}
done();
