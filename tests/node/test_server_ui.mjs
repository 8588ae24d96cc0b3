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
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(srv.url + '/');
  check((await page.title()) === 'pocketbrain', 'page loads');

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

  // stop mid-answer
  await page.fill('#input', 'Please write a very long story about a harbor.');
  await page.press('#input', 'Enter');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant').length === 2 &&
    !document.querySelectorAll('.msg.assistant')[1].classList.contains('thinking') &&
    document.querySelectorAll('.msg.assistant')[1].querySelector('.body').textContent.length > 3, null, { timeout: 180000 });
  await page.click('#stop');
  await page.waitForFunction(() => document.querySelector('#status').textContent === 'stopped', null, { timeout: 30000 });
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

  // theme toggle
  await page.click('#theme');
  check(await page.evaluate(() => document.documentElement.classList.contains('dark')), 'dark theme toggles');
  await page.screenshot({ path: art + '/ui-dark.png' });
  check(errors.length === 0, 'no page errors ' + errors.join('; '));
} catch (e) {
  check(false, 'unexpected error: ' + e.stack + '\nserver stderr: ' + srv.stderr());
}
await browser.close();
await stopServer(srv);
done();
