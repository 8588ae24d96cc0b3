// test_server_ui.mjs -- Playwright (playwright-core + Debian chromium) through the web UI: send a message and
// see streamed text grow, stop mid-answer, switch style, reload and find the history. Screenshots go to
// $PB_BUILD/test-artifacts/.
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
      '{"num":2,"source":"docs/ships.md","location":"docs/ships.md"}]}\n\n' +
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
  check(src === 'Sources: [1] docs/harbor.md:3-9  [2] docs/ships.md', 'each source path printed once: ' + JSON.stringify(src));
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
} catch (e) {
  check(false, 'unexpected error: ' + e.stack + '\nserver stderr: ' + srv.stderr());
}
await browser.close();
await stopServer(srv);
done();
