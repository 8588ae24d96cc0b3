// test_server_batch.mjs -- continuous batching in `pocketbrain serve --parallel 4` (the openai client): concurrent
// streaming requests get the answers they get one at a time (greedy and seeded), /metrics shows steps that held
// several slots, a switch to another model of the library batches again, and --no-batch decodes each slot alone.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { check, done, note, peerModel, startServer, stopServer } from './server_lib.mjs';

const shared = process.env.PB_SHARED || '../shared';
const lib = fs.mkdtempSync(path.join(os.tmpdir(), 'pb-serve-batch-'));
fs.symlinkSync(path.resolve(peerModel()), path.join(lib, 'alpha.gguf'));
fs.symlinkSync(path.resolve(path.join(shared, 'fixtures/peer/model/gemma2-tiny-v.q4_0.gguf')), path.join(lib, 'beta.gguf'));

const prompts = ['What is a harbor?', 'Name three colors.', 'Tell me a story about a ship.', 'Why is the sea salty?',
  'Count to ten.', 'Describe the moon.', 'What do cats eat?', 'Say hello in French.'];
// greedy for most, two seeded samplers (the same seed gives the same tokens, batched or not); lengths differ
const reqOf = (model, i) => ({
  model, messages: [{ role: 'user', content: prompts[i] }], max_tokens: 20 + 5 * i,
  ...(i % 4 === 3 ? { temperature: 0.8, top_p: 0.9, seed: 10 + i } : { temperature: 0 }),
});

async function streamText(client, body) {
  const s = await client.chat.completions.create({ ...body, stream: true });
  let text = '';
  for await (const ch of s) if (ch.choices[0]?.delta?.content) text += ch.choices[0].delta.content;
  return text;
}

async function metrics(srv) {
  const t = await (await fetch(srv.url + '/metrics')).text();
  const num = (re) => { const m = re.exec(t); return m ? Number(m[1]) : NaN; };
  return {
    enabled: num(/^pocketbrain_batch_enabled (\S+)$/m),
    steps: num(/^pocketbrain_batch_size_count (\S+)$/m),
    tokens: num(/^pocketbrain_batch_size_sum (\S+)$/m),
    ones: num(/^pocketbrain_batch_size_bucket\{le="1"\} (\S+)$/m),
    max: num(/^pocketbrain_batch_size_max (\S+)$/m),
  };
}

let seq = [];
const srv = await startServer(['--parallel', '4', '--max-tokens', '64', '--queue', '16'], { PB_MODELS: lib }, 'alpha');
const client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'none', maxRetries: 0 });
try {
  check(/4 slots decoding in one batch/.test(srv.stderr()), `the start line says the slots decode in one batch: ${srv.stderr().trim()}`);
  // one at a time: the answers of each request alone (a step of one)
  for (let i = 0; i < prompts.length; i++) seq.push(await streamText(client, reqOf('alpha', i)));
  const m0 = await metrics(srv);
  check(m0.enabled === 1 && m0.max === 1 && m0.steps === m0.ones, `sequential requests: steps of one only (${JSON.stringify(m0)})`);

  // all at once (4 slots, 4 queued): the same answers, in steps of several slots
  const conc = await Promise.all(prompts.map((_, i) => streamText(client, reqOf('alpha', i))));
  let same = 0;
  for (let i = 0; i < prompts.length; i++) {
    if (conc[i] === seq[i]) same++;
    else note(`request ${i}: concurrent ${JSON.stringify(conc[i])} vs alone ${JSON.stringify(seq[i])}`);
  }
  check(same === prompts.length && seq.every((t) => t.length > 0), `8 concurrent streams (4 slots) = the same requests one at a time (${same}/8)`);
  const m1 = await metrics(srv);
  const multi = (m1.steps - m1.ones) - (m0.steps - m0.ones);
  check(multi > 0 && m1.max >= 2 && m1.max <= 4, `/metrics: ${multi} steps held 2+ slots (max ${m1.max}, mean ${((m1.tokens - m0.tokens) / (m1.steps - m0.steps)).toFixed(2)})`);
  const st = await (await fetch(srv.url + '/stats')).json();
  check(st.batch && st.batch.enabled === true && st.batch.max_size === m1.max && st.batch.decoding === 0, `/stats batch: ${JSON.stringify(st.batch)}`);

  // another model: the switch makes the batch anew, and its slots batch too
  const betaSeq = [];
  for (let i = 0; i < 4; i++) betaSeq.push(await streamText(client, reqOf('beta', i)));
  const m2 = await metrics(srv);
  const betaConc = await Promise.all([0, 1, 2, 3].map((i) => streamText(client, reqOf('beta', i))));
  check(betaConc.every((t, i) => t === betaSeq[i]), 'after a switch to beta: 4 concurrent streams = one at a time');
  const m3 = await metrics(srv);
  check((m3.steps - m3.ones) - (m2.steps - m2.ones) > 0 && m3.steps >= m1.steps,
    `after the switch steps hold several slots again (${(m3.steps - m3.ones) - (m2.steps - m2.ones)}); the counters carry over (${m1.steps} -> ${m3.steps})`);
  check(betaSeq.join('|') !== seq.slice(0, 4).join('|'), 'beta answers differently from alpha (the switch happened)');
} catch (e) {
  check(false, 'exception: ' + (e.stack || e));
} finally {
  const code = await stopServer(srv);
  check(code === 0, `serve stops cleanly (${code})`);
}

// --no-batch: each slot alone, the same answers
const srv2 = await startServer(['--parallel', '4', '--max-tokens', '64', '--no-batch'], { PB_MODELS: lib }, 'alpha');
const client2 = new OpenAI({ baseURL: srv2.url + '/v1', apiKey: 'none', maxRetries: 0 });
try {
  check(/4 slots each alone/.test(srv2.stderr()), 'the start line says each slot decodes alone');
  const conc = await Promise.all(prompts.map((_, i) => streamText(client2, reqOf('alpha', i))));
  check(conc.every((t, i) => t === seq[i]), '--no-batch: 8 concurrent streams = the batched server\'s answers');
  const m = await metrics(srv2);
  check(m.enabled === 0 && m.steps === 0, `--no-batch: no batch steps (${JSON.stringify(m)})`);
} catch (e) {
  check(false, 'exception: ' + (e.stack || e));
} finally {
  const code = await stopServer(srv2);
  check(code === 0, `serve --no-batch stops cleanly (${code})`);
  fs.rmSync(lib, { recursive: true, force: true });
}
done();
