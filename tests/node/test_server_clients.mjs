// test_server_clients.mjs -- `pocketbrain serve` through clients nobody here wrote: the Vercel AI SDK
// (ai + @ai-sdk/openai-compatible) and LangChain JS (@langchain/openai), plain and streaming, with usage, a
// context that fills while answering (finish reason "length"), an aborted request and a 400 surfaced as an error.
import { generateText, streamText } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { check, startServer, stopServer, done, peerModel, waitFor } from './server_lib.mjs';

// -c 160: a 200-token answer fills the context, so "length" is reached both ways (max_tokens, a full context)
const srv = await startServer(['--quiet', '--api-key', 'k2', '-c', '160', '--max-tokens', '256'], {}, peerModel());
const metric = async (name) => {
  const t = await (await fetch(srv.url + '/metrics', { headers: { Authorization: 'Bearer k2' } })).text();
  const m = t.match(new RegExp('^' + name + ' (\\d+)', 'm'));
  return m ? Number(m[1]) : NaN;
};
// the served model's id: a request naming another model is a 404
const served = (await (await fetch(srv.url + '/v1/models', { headers: { Authorization: 'Bearer k2' } })).json()).data[0].id;
try {
  const provider = createOpenAICompatible({ name: 'pocketbrain', baseURL: srv.url + '/v1', apiKey: 'k2', includeUsage: true });
  const model = provider.chatModel(served);

  const g = await generateText({ model, prompt: 'What does harbor mean?', maxOutputTokens: 12, temperature: 0, maxRetries: 0 });
  check(typeof g.text === 'string' && g.text.length > 0 && g.usage.outputTokens > 0 && g.usage.inputTokens > 0,
    `AI SDK generateText: ${g.usage.inputTokens}+${g.usage.outputTokens} tokens, finish ${g.finishReason}`);
  check(['stop', 'length'].includes(g.finishReason), 'AI SDK reads the finish reason: ' + g.finishReason);

  const st = streamText({ model, prompt: 'Tell me a story.', maxOutputTokens: 16, temperature: 0.5, maxRetries: 0 });
  let parts = 0, text = '';
  for await (const t of st.textStream) { parts++; text += t; }
  const usage = await st.usage, finish = await st.finishReason;
  check(parts >= 2 && text.length > 0, `AI SDK streamText: ${parts} text parts`);
  check(usage.outputTokens > 0 && usage.inputTokens > 0, `AI SDK stream usage (include_usage chunk): ${usage.inputTokens}+${usage.outputTokens}`);
  check(finish === 'length' || finish === 'stop', 'AI SDK stream finish reason: ' + finish);

  const full = await generateText({ model, prompt: 'Go on and on.', maxOutputTokens: 250, maxRetries: 0 });
  check(full.finishReason === 'length' && full.text.length > 0,
    `AI SDK: a context that fills while answering gives the answer with finish "length" (${full.finishReason}, ${full.usage.outputTokens} tokens)`);

  let err = null;
  try { await generateText({ model, prompt: 'hi', topP: 0, maxRetries: 0 }); } catch (e) { err = e; }
  check(err && err.statusCode === 400 && /top_p/.test(err.message), 'AI SDK: top_p 0 is a 400 naming top_p: ' + (err && err.message));

  // LangChain JS
  const lc = new ChatOpenAI({ model: served, apiKey: 'k2', configuration: { baseURL: srv.url + '/v1' }, maxTokens: 12, temperature: 0, maxRetries: 0 });
  const m = await lc.invoke([['system', 'Be brief.'], ['human', 'What does harbor mean?']]);
  check(typeof m.content === 'string' && m.content.length > 0 && m.usage_metadata && m.usage_metadata.output_tokens > 0,
    `LangChain invoke: ${m.usage_metadata?.input_tokens}+${m.usage_metadata?.output_tokens} tokens`);
  let chunks = 0, ltext = '';
  const lcs = new ChatOpenAI({ model: served, apiKey: 'k2', configuration: { baseURL: srv.url + '/v1' }, maxTokens: 16, maxRetries: 0, streamUsage: true });
  let lusage = null;
  for await (const c of await lcs.stream('Tell me a story.')) { chunks++; ltext += c.content; if (c.usage_metadata) lusage = c.usage_metadata; }
  check(chunks >= 2 && ltext.length > 0, `LangChain stream: ${chunks} chunks`);
  check(lusage && lusage.output_tokens > 0, 'LangChain stream usage: ' + JSON.stringify(lusage));

  // an aborted non-streaming request through a client: cancelled on the server
  const before = await metric('pocketbrain_requests_cancelled_total');
  const ac = new AbortController();
  const p = generateText({ model, prompt: 'Go on.', maxOutputTokens: 120, abortSignal: ac.signal, maxRetries: 0 }).catch((e) => e);
  // aborted once the server holds it (a slot or the queue), not after a fixed 30 ms: on a loaded machine the client
  // could abort before its request reached the server, which then had nothing to cancel (a flake seen in make test)
  // (polled back to back: the answer takes ~0.1 s here, waitFor's 100 ms step would miss it)
  for (const t0 = Date.now(); Date.now() - t0 < 10000;)
    if ((await metric('pocketbrain_slots_busy')) + (await metric('pocketbrain_queue_depth')) > 0) break;
  ac.abort();
  await p;
  const after = await waitFor(() => metric('pocketbrain_requests_cancelled_total'), (v) => v > before, 10000);
  check(after > before, `AI SDK abort of a non-streaming request cancels it on the server (${before} -> ${after})`);
} catch (e) {
  check(false, 'unexpected error: ' + e.stack + '\nserver stderr: ' + srv.stderr());
}
const code = await stopServer(srv);
check(code === 0, 'server exited 0');
done();
