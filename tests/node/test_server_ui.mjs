// test_server_ui.mjs -- Playwright (playwright-core + Debian chromium) through the web UI: send a message and
// see streamed text grow, stop mid-answer, switch style, reload and find the history; storage full, two tabs,
// unreadable stored values, cut and refused answers. Screenshots go to $PB_BUILD/test-artifacts/.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { check, note, startServer, stopServer, done, peerModel } from './server_lib.mjs';

const art = (process.env.PB_BUILD || 'build') + '/test-artifacts';
mkdirSync(art, { recursive: true });
const srv = await startServer(['--max-tokens', '2048'], {}, peerModel());
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
try {
  const page = await browser.newPage();
  // generous deadlines: on a slow, loaded machine the browser and a 256-token answer both take their time
  page.setDefaultTimeout(60000);
  const errors = [], failedUrls = [], consoleErrors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('response', (r) => { if (r.status() >= 400) failedUrls.push(r.status() + ' ' + r.url()); });
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  await page.goto(srv.url + '/');
  check((await page.title()) === 'pocketbrain', 'page loads');

  // first look: the model's name, a hint in the empty conversation, no "use my documents" without a knowledge
  // base, a favicon and no failed request (a 404 would show in the browser console)
  await page.waitForFunction(() => document.querySelector('#model-name').textContent !== '', null, { timeout: 10000 });
  check((await page.textContent('#model-name')) === 'gemma2-tiny-v.q8_0.gguf', 'the model name is shown: ' + (await page.textContent('#model-name')));
  check(/Ask anything/.test((await page.textContent('#empty')) || ''), 'the empty conversation shows a hint');
  check(await page.isHidden('#use-docs'), '"Use my documents" is not offered: this server has no knowledge base');
  const icon = await page.evaluate(async () => { const r = await fetch('/favicon.ico'); return r.status + ' ' + r.headers.get('content-type'); });
  check(/^200 image\/svg\+xml/.test(icon) && (await page.$('link[rel=icon]')) !== null, 'favicon served (' + icon + ') and linked');

  // live token count
  await page.fill('#input', 'What does harbor mean?');
  await page.waitForFunction(() => /^[1-9]\d* tokens?$/.test(document.querySelector('#token-count').textContent), null, { timeout: 30000 });
  check(true, 'live token count: ' + (await page.textContent('#token-count')));

  // send; watch the answer grow, with the thinking placeholder first. Every render of the answer's body is
  // recorded from the mutation records themselves (the length of the text each render put in): observer
  // callbacks are batched, and a fast model can deliver many tokens in one network read.
  await page.selectOption('#style', 'precise');
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver((muts) => {
      for (const m of muts) {
        if (m.type !== 'childList' || !m.target.classList || !m.target.classList.contains('body')) continue;
        if (!m.target.closest('.msg.assistant') || m.addedNodes.length === 0) continue;
        let n = 0;
        for (const a of m.addedNodes) n += a.textContent.length;
        window.__lengths.push(n);
      }
    }).observe(document.querySelector('#messages'), { childList: true, subtree: true, characterData: true });
  });
  await page.press('#input', 'Enter');
  await page.waitForSelector('.msg.assistant', { timeout: 30000 });
  const sawThinking = await page.evaluate(() => document.querySelector('.msg.assistant .body').textContent);
  await page.waitForFunction(() => !document.querySelector('#send').disabled, null, { timeout: 180000 });
  const lengths = await page.evaluate(() => window.__lengths);
  const distinct = new Set(lengths).size;
  note('answer length samples: ' + lengths.slice(0, 40).join(',') + (lengths.length > 40 ? ',...' : ''));
  check(distinct >= 10, `answer grew progressively (${distinct} distinct lengths)`);
  check(sawThinking === 'thinking…' || sawThinking.length > 0, 'placeholder or first text shown at once: ' + JSON.stringify(sawThinking.slice(0, 20)));
  await page.screenshot({ path: art + '/ui-answer.png' });
  const answer1 = await page.textContent('.msg.assistant .body');
  check(answer1.length > 0 && answer1 !== 'thinking…', 'answer text shown');

  // stop mid-answer: this answer is asked for 2048 tokens (the UI leaves max_tokens to the server's 256, which a fast
  // machine can finish before the click lands)
  await page.route('**/v1/chat/completions', (route) => {
    const body = JSON.parse(route.request().postData());
    route.continue({ postData: JSON.stringify({ ...body, max_tokens: 2048 }) });
  });
  // The Stop button is pressed from inside the page the moment the answer's text first passes 3 characters (a
  // mutation observer): a click sent from here after a round trip could land after a short context had filled and
  // the answer had ended, leaving a disabled button (it happened on idle and loaded machines alike).
  await page.evaluate(() => {
    window.__stopClicked = false;
    const obs = new MutationObserver(() => {
      const a = document.querySelectorAll('.msg.assistant');
      if (a.length !== 2 || a[1].classList.contains('thinking')) return;
      const body = a[1].querySelector('.body'), stop = document.querySelector('#stop');
      if (body && body.textContent.length > 3 && !stop.disabled) {
        stop.click();
        window.__stopClicked = true;
        obs.disconnect();
      }
    });
    obs.observe(document.querySelector('#messages'), { childList: true, subtree: true, characterData: true });
  });
  await page.fill('#input', 'Please write a very long story about a harbor.');
  await page.press('#input', 'Enter');
  await page.waitForFunction(() => window.__stopClicked && document.querySelector('#status').textContent === 'stopped',
    null, { timeout: 180000 });
  await page.unroute('**/v1/chat/completions');
  check(true, 'stop button stops the answer');
  await page.screenshot({ path: art + '/ui-stopped.png' });

  // style persisted, history after reload
  await page.reload();
  check((await page.inputValue('#style')) === 'precise', 'style selection survives reload');
  const msgs = await page.$$eval('.msg', (els) => els.map((e) => e.className));
  check(msgs.filter((c) => c.includes('user')).length === 2 && msgs.filter((c) => c.includes('assistant')).length === 2,
    `history restored after reload, the stopped partial answer included (${msgs.length} messages)`);
  check((await page.$$('#conv-list li')).length === 1, 'conversation listed in the sidebar');

  // a second conversation and switching back
  await page.click('#new-chat');
  check((await page.$$('.msg')).length === 0, 'new chat starts empty');
  check((await page.$$('#conv-list li')).length === 2, 'two conversations listed');
  await page.click('#conv-list li:nth-child(2)');
  check((await page.$$('.msg.user')).length === 2, 'switching back shows the first conversation');

  // Markdown is rendered safely: injected HTML is shown as text, not executed
  await page.evaluate(() => {
    const convs = JSON.parse(localStorage.getItem('pocketbrain.conversations.v1'));
    const cur = JSON.parse(localStorage.getItem('pocketbrain.settings.v1')).current;
    convs.find((c) => c.id === cur).messages.push({ role: 'assistant', content: '**bold** <img src=x onerror="window.__pwned=1"> `code`' });
    localStorage.setItem('pocketbrain.conversations.v1', JSON.stringify(convs));
  });
  await page.reload();
  await page.waitForTimeout(300);
  const pwned = await page.evaluate(() => window.__pwned === 1);
  const html = await page.$$eval('.msg.assistant .body', (els) => els[els.length - 1].innerHTML);
  check(!pwned && html.includes('<strong>bold</strong>') && html.includes('&lt;img'), 'Markdown rendered, HTML injection escaped: ' + html);

  // an answer cut by a server error: the error is shown, the partial text is not stored as the assistant's turn;
  // sources are listed once each, the path not repeated (the server's stream is stood in for by page.route)
  await page.click('#new-chat');
  await page.route('**/v1/chat/completions', (route) => route.fulfill({
    status: 200, headers: { 'Content-Type': 'text/event-stream' },
    body: 'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"sources":[' +
      '{"num":1,"source":"docs/harbor.md","location":"docs/harbor.md:3-9"},{"num":1,"source":"docs/harbor.md","location":"docs/harbor.md:3-9"},' +
      '{"num":2,"source":"docs/ships.md","location":"docs/ships.md","file_state":"changed"},' +
      '{"num":3,"source":"docs/old.md","location":"docs/old.md:1-2","file_state":"gone"},' +
      '{"num":4,"source":"docs/x.md","location":"docs/x.md","file_state":"toString"}]}\n\n' +
      'data: {"choices":[{"index":0,"delta":{"content":"partial words"}}]}\n\n' +
      'data: {"error":{"message":"the model failed","type":"server_error"}}\n\ndata: [DONE]\n\n',
  }));
  await page.fill('#input', 'Tell me about harbors.');
  await page.press('#input', 'Enter');
  await page.waitForSelector('.msg.assistant .error', { timeout: 30000 });
  const errText = await page.textContent('.msg.assistant .error');
  const stored = await page.evaluate(() => {
    const convs = JSON.parse(localStorage.getItem('pocketbrain.conversations.v1'));
    const cur = JSON.parse(localStorage.getItem('pocketbrain.settings.v1')).current;
    return convs.find((c) => c.id === cur).messages;
  });
  check(/the model failed/.test(errText) && stored.length === 1 && stored[0].role === 'user',
    'an error is shown, not stored as an assistant message: ' + JSON.stringify(stored.map((m) => m.role)));
  const src = await page.textContent('.msg.assistant .sources');
  check(src.startsWith('Sources: [1] docs/harbor.md:3-9  [2] docs/ships.md'), 'each source path printed once: ' + JSON.stringify(src));
  // a source whose file was edited or deleted since it was ingested says so (the answer quotes the text of then)
  check(src === 'Sources: [1] docs/harbor.md:3-9  [2] docs/ships.md (changed since ingest)  [3] docs/old.md:1-2 (file is gone)  [4] docs/x.md',
    'sources changed or gone since ingest are marked: ' + JSON.stringify(src));
  await page.unroute('**/v1/chat/completions');

  // a server with a knowledge base: the option is offered (its /health, stood in for here, says so)
  await page.route('**/health', (route) => route.fulfill({ status: 200, contentType: 'application/json', body: '{"status":"ok","model":"m.gguf","knowledge_base":true}' }));
  await page.reload();
  await page.waitForFunction(() => document.querySelector('#model-name').textContent === 'm.gguf', null, { timeout: 10000 });
  check(await page.isVisible('#use-docs'), '"Use my documents" offered when the server has a knowledge base');
  await page.unroute('**/health');

  // theme toggle
  await page.click('#theme');
  check(await page.evaluate(() => document.documentElement.classList.contains('dark')), 'dark theme toggles');
  await page.screenshot({ path: art + '/ui-dark.png' });
  check(errors.length === 0, 'no page errors ' + errors.join('; '));
  check(failedUrls.length === 0 && consoleErrors.length === 0, 'no failed request, nothing in the console: ' + failedUrls.concat(consoleErrors).join('; '));

  // ---- nothing the user saved is lost: storage full, two tabs, stored values this page cannot read, a reload,
  // a switch or a delete mid-answer; a cut answer and a refused one say so. Each browser context has its own
  // localStorage; answers are stood in for (page.route, or a stream fed from here) unless the server's own is meant.
  const pageErrors = [];
  const open = async (ctx) => {
    const p = await (ctx || (await browser.newContext())).newPage();
    p.setDefaultTimeout(60000);
    p.on('pageerror', (e) => pageErrors.push(e.message));
    await p.goto(srv.url + '/');
    return p;
  };
  const storedConvs = (p) => p.evaluate(() => JSON.parse(localStorage.getItem('pocketbrain.conversations.v1')));
  const idle = (p) => p.waitForFunction(() => !document.querySelector('#send').disabled, null, { timeout: 15000 }).then(() => true, () => false);
  const ask = async (p, text) => { await p.fill('#input', text); await p.press('#input', 'Enter'); };
  const userTexts = (p) => p.$$eval('.msg.user', (els) => els.map((e) => e.textContent));
  const answerWith = (p, text) => p.route('**/v1/chat/completions', (r) => r.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' },
    body: 'data: ' + JSON.stringify({ choices: [{ index: 0, delta: { content: text } }] }) + '\n\ndata: [DONE]\n\n' }));
  // window.fetch answers the chat with a stream this test feeds: __feed(text) adds a piece (or a raw "data: ..."
  // event), __feed('') ends it; an abort (Stop) errors it as fetch's own stream does
  const feedable = (p) => p.evaluate(() => {
    const real = window.fetch, enc = new TextEncoder();
    window.fetch = (url, opts) => {
      if (!String(url).endsWith('/v1/chat/completions')) return real(url, opts);
      const body = new ReadableStream({ start(c) {
        window.__feed = (t) => (t === '' ? c.close() : c.enqueue(enc.encode(t.startsWith('data: ') ? t
          : 'data: ' + JSON.stringify({ choices: [{ index: 0, delta: { content: t } }] }) + '\n\n')));
        opts.signal.addEventListener('abort', () => c.error(new DOMException('aborted', 'AbortError')));
      } });
      return Promise.resolve(new Response(body, { headers: { 'Content-Type': 'text/event-stream' } }));
    };
  });
  const notice = (p) => p.evaluate(() => { const n = document.querySelector('#notice'); return n && !n.hidden ? n.textContent : ''; });
  const lastAnswer = (p) => p.$$eval('.msg.assistant', (els) => (els.length ? els[els.length - 1].textContent : ''));

  // two tabs: each keeps the other's conversations (a save wrote this tab's whole list over the other's)
  const tabs = await browser.newContext();
  const ta = await open(tabs), tb = await open(tabs);
  await answerWith(ta, 'answer in A');
  await answerWith(tb, 'answer in B');
  await ask(ta, 'asked in tab A');
  await idle(ta);
  await tb.click('#new-chat');
  await ask(tb, 'asked in tab B');
  await idle(tb);
  await ask(ta, 'tab A again');
  await idle(ta);
  const both = (await storedConvs(ta)).map((c) => c.title + ':' + c.messages.length);
  check(both.includes('asked in tab B:2') && both.includes('asked in tab A:4'), 'two tabs: both conversations kept: ' + JSON.stringify(both));
  check((await ta.$$('#conv-list li')).length === 2, "tab A lists tab B's conversation without a reload");

  // storage full: the message is shown and answered, the user told, what was stored kept; the next save stores it
  const before = await ta.evaluate(() => localStorage.getItem('pocketbrain.conversations.v1'));
  await ta.evaluate(() => {
    window.__setItem = Storage.prototype.setItem;
    Storage.prototype.setItem = function (k, v) {
      if (k === 'pocketbrain.conversations.v1') throw new DOMException('quota', 'QuotaExceededError');
      return window.__setItem.call(this, k, v);
    };
  });
  await ask(ta, 'asked with storage full');
  const freed = await idle(ta);
  const full = { notice: await notice(ta), users: await userTexts(ta),
    same: (await ta.evaluate(() => localStorage.getItem('pocketbrain.conversations.v1'))) === before };
  check(freed && /storage .*is full/.test(full.notice) && full.users.includes('asked with storage full') && full.same &&
    /answer in A/.test(await lastAnswer(ta)), 'storage full: shown, answered, told, the stored list untouched: ' + JSON.stringify(full));
  await ta.evaluate(() => { Storage.prototype.setItem = window.__setItem; });
  await ta.click('#new-chat');
  const kept = (await storedConvs(ta)).find((c) => c.title === 'asked in tab A');
  check(kept && kept.messages.length === 6 && (await notice(ta)) === '', 'storage free again: the exchange saved, the message gone');
  await tabs.close();

  // values this page cannot read: not a list -> set aside and said; unusable entries -> kept as they are
  const pc = await open();
  await pc.evaluate(() => {
    localStorage.setItem('pocketbrain.conversations.v1', '{"conversations": "from another version"}');
    localStorage.setItem('pocketbrain.settings.v1', '"dark"');
  });
  await pc.reload();
  await pc.click('#new-chat');
  const aside = await pc.evaluate(() => Object.keys(localStorage).filter((k) => k.startsWith('pocketbrain.conversations.v1.unreadable'))
    .map((k) => localStorage.getItem(k)));
  const said = await notice(pc);
  check(aside.length === 1 && aside[0] === '{"conversations": "from another version"}' && /could not be read/.test(said) &&
    (await pc.$$('#conv-list li')).length === 1, 'a stored value that is no list is set aside, said, and the UI works: ' + said);
  await pc.evaluate(() => localStorage.setItem('pocketbrain.conversations.v1', JSON.stringify([5, { id: 'x' },
    { id: 'ok', title: 'kept', messages: [null, { role: 'user', content: 'hello' }, { role: 'user' }] }])));
  await pc.reload();
  const oddSaid = await notice(pc);
  await answerWith(pc, 'an answer');
  await ask(pc, 'more');
  await idle(pc);
  const odd = await storedConvs(pc);
  check(odd.length === 3 && odd[0] === 5 && odd[1].id === 'x' && odd[2].messages.length === 5 && odd[2].messages[0] === null &&
    JSON.stringify(await userTexts(pc)) === '["hello","more"]' && /^4 saved entries .*could not be read/.test(oddSaid),
    'entries this page cannot use are kept and counted, the rest shown and continued: ' + oddSaid + ' ' + JSON.stringify(odd).slice(0, 160));
  await pc.close();

  // mid-answer: a reload keeps the answer so far (as Stop does); switching away and back shows the answer still
  // coming; deleting its conversation stops it
  const pm = await open();
  await feedable(pm);
  await ask(pm, 'tell a story');
  await pm.waitForFunction(() => window.__feed);
  await pm.evaluate(() => window.__feed('the first words'));
  await pm.waitForFunction(() => /the first words/.test(document.querySelector('.msg.assistant .body').textContent));
  await pm.reload();
  const afterReload = (await storedConvs(pm))[0].messages;
  check(afterReload.length === 2 && afterReload[1].content === 'the first words', 'a reload mid-answer keeps the answer so far: ' +
    JSON.stringify(afterReload));
  await feedable(pm);
  await ask(pm, 'and then?');
  await pm.waitForFunction(() => window.__feed);
  await pm.evaluate(() => window.__feed('still coming'));
  await pm.click('#new-chat');
  await pm.click('#conv-list li:nth-child(2) span');
  await pm.evaluate(() => window.__feed(' and more'));
  await pm.waitForFunction(() => /and more/.test(document.querySelector('#messages').textContent), null, { timeout: 5000 }).catch(() => {});
  check(/still coming and more/.test(await lastAnswer(pm)), 'switching back mid-answer shows the answer coming: ' + JSON.stringify(await lastAnswer(pm)));
  await pm.click('#conv-list li:nth-child(2) button');
  const stopped = await idle(pm);
  check(stopped && (await pm.textContent('#status')) === 'stopped' && (await storedConvs(pm)).length === 1,
    'deleting the conversation being answered stops its answer');

  // a stream that ends without [DONE] is a cut answer (error, not stored); finish_reason "length" is said
  await pm.close();
  const pr = await open();
  await feedable(pr);
  await ask(pr, 'cut me');
  await pr.waitForFunction(() => window.__feed);
  await pr.evaluate(() => { window.__feed('partial'); window.__feed(''); });
  await idle(pr);
  const cut = (await storedConvs(pr)).find((c) => c.title === 'cut me');
  check(/cut off/.test(await lastAnswer(pr)) && cut.messages.length === 1, 'a stream closed before [DONE]: an error, not a stored answer: ' +
    JSON.stringify(await lastAnswer(pr)));
  await ask(pr, 'long answer');
  await pr.waitForFunction(() => document.querySelectorAll('.msg.user').length === 2);
  await pr.evaluate(() => {
    window.__feed('the start');
    window.__feed('data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n');
    window.__feed('data: [DONE]\n\n');
    window.__feed('');
  });
  await idle(pr);
  const lengthNote = await pr.$$eval('.msg.assistant .note', (els) => els.map((e) => e.textContent));
  await pr.reload();
  const noteAfter = await pr.$$eval('.msg.assistant .note', (els) => els.length);
  check(lengthNote.length === 1 && /length limit/.test(lengthNote[0]) && noteAfter === 1, 'an answer cut at the length limit says so, also after a reload: ' +
    JSON.stringify(lengthNote));

  // refused before any answer: the server unreachable, a message longer than the context (the server's own 400)
  await pr.route('**/v1/chat/completions', (r) => r.abort('connectionrefused'));
  await ask(pr, 'anyone there?');
  await idle(pr);
  check(/cannot reach the server/.test(await lastAnswer(pr)), 'an unreachable server is named: ' + JSON.stringify(await lastAnswer(pr)));
  await pr.unroute('**/v1/chat/completions');
  await pr.fill('#api-key', 'ключ');
  await pr.dispatchEvent('#api-key', 'change');
  await ask(pr, 'with an odd key');
  await idle(pr);
  check(/API key/.test(await lastAnswer(pr)), 'an API key no header can carry is named: ' + JSON.stringify(await lastAnswer(pr)));
  await pr.fill('#api-key', '');
  await pr.dispatchEvent('#api-key', 'change');
  await pr.click('#new-chat');
  const huge = 'harbor '.repeat(5000).trim();
  await ask(pr, huge);
  await pr.waitForSelector('.msg.assistant .error', { timeout: 60000 });
  check(/longer than the model's context.*back in the input box/.test(await lastAnswer(pr)) && (await pr.inputValue('#input')) === huge,
    'a message longer than the context: said, and its text back in the input box: ' + JSON.stringify((await lastAnswer(pr)).slice(0, 160)));
  check(pageErrors.length === 0, 'no page errors in these probes ' + pageErrors.join('; '));
} catch (e) {
  check(false, 'unexpected error: ' + e.stack + '\nserver stderr: ' + srv.stderr());
}
await browser.close();
await stopServer(srv);
done();
