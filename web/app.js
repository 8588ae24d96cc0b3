// app.js -- pocketbrain web chat: streaming (SSE over fetch), conversations in localStorage, safe Markdown.
'use strict';

const $ = (id) => document.getElementById(id);
const STORE = 'pocketbrain.conversations.v1';
const SETTINGS = 'pocketbrain.settings.v1';

let convs = load(STORE, []);
let settings = load(SETTINGS, { style: 'balanced', theme: 'light', apiKey: '', useDocs: false, current: null });
let controller = null;

function load(key, dflt) {
  try { const v = JSON.parse(localStorage.getItem(key)); return v == null ? dflt : v; } catch (e) { return dflt; }
}
function save() {
  localStorage.setItem(STORE, JSON.stringify(convs));
  localStorage.setItem(SETTINGS, JSON.stringify(settings));
}
function current() { return convs.find((c) => c.id === settings.current); }
function newConv() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: 'New chat', messages: [] };
  convs.unshift(c);
  settings.current = c.id;
  save();
  render();
  return c;
}

// ---- safe Markdown: escape everything first, then add a few constructs on the escaped text ----
function escapeHtml(s) {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}
function inline(s) {
  return s
    .replace(/`([^`]+)`/g, '<code>$1</code>')
    .replace(/\*\*([^*]+)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|[^*])\*([^*\s][^*]*)\*/g, '$1<em>$2</em>')
    .replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g, '<a href="$2" rel="noopener noreferrer" target="_blank">$1</a>');
}
function renderMarkdown(src) {
  const parts = src.split(/```/);
  let html = '';
  parts.forEach((part, i) => {
    if (i % 2 === 1) { // code block: first line may name the language
      const nl = part.indexOf('\n');
      const code = nl >= 0 ? part.slice(nl + 1) : part;
      html += '<pre><code>' + escapeHtml(code) + '</code></pre>';
      return;
    }
    const lines = escapeHtml(part).split('\n');
    let inList = false;
    for (const line of lines) {
      const m = line.match(/^\s*([-*]|\d+\.)\s+(.*)$/);
      if (m) {
        if (!inList) { html += '<ul>'; inList = true; }
        html += '<li>' + inline(m[2]) + '</li>';
        continue;
      }
      if (inList) { html += '</ul>'; inList = false; }
      const h = line.match(/^(#{1,3})\s+(.*)$/);
      if (h) html += '<h' + (h[1].length + 2) + '>' + inline(h[2]) + '</h' + (h[1].length + 2) + '>';
      else if (line.trim() === '') html += '<br>';
      else html += '<div>' + inline(line) + '</div>';
    }
    if (inList) html += '</ul>';
  });
  return html;
}

// ---- rendering ----
function render() {
  const list = $('conv-list');
  list.textContent = '';
  for (const c of convs) {
    const li = document.createElement('li');
    if (c.id === settings.current) li.className = 'active';
    const t = document.createElement('span');
    t.textContent = c.title;
    li.appendChild(t);
    const del = document.createElement('button');
    del.textContent = '×';
    del.title = 'Delete';
    del.onclick = (e) => {
      e.stopPropagation();
      convs = convs.filter((x) => x.id !== c.id);
      if (settings.current === c.id) settings.current = convs.length ? convs[0].id : null;
      save();
      render();
    };
    li.appendChild(del);
    li.onclick = () => { settings.current = c.id; save(); render(); };
    list.appendChild(li);
  }
  const box = $('messages');
  box.textContent = '';
  const c = current();
  if (c) for (const m of c.messages) box.appendChild(messageEl(m));
  if (!c || c.messages.length === 0) box.appendChild(emptyEl());
  box.scrollTop = box.scrollHeight;
}

// What a new user sees before the first message.
function emptyEl() {
  const d = document.createElement('div');
  d.id = 'empty';
  d.textContent = 'Ask anything below: the answer is written on this machine, offline' +
    (server.knowledgeBase ? '. Tick "Use my documents" to answer from your knowledge base, with sources.' : '.') +
    ' Enter sends, Shift+Enter starts a new line; Stop ends an answer early.';
  return d;
}

// ---- what the server offers: model name, knowledge base (GET /health; the API key admits the details) ----
let server = { model: '', knowledgeBase: false };
async function loadServerInfo() {
  try {
    const r = await fetch('/health', { headers: headers() });
    const j = await r.json();
    server = { model: j.model || '', knowledgeBase: j.knowledge_base === true };
  } catch (e) { /* server unreachable: keep the defaults */ }
  $('model-name').textContent = server.model;
  $('model-name').title = server.model ? 'model: ' + server.model : '';
  // "Use my documents" only where there are documents
  $('use-docs-row').hidden = !server.knowledgeBase;
  if (!server.knowledgeBase && settings.useDocs) { settings.useDocs = false; $('use-docs').checked = false; save(); }
  render();
}

function messageEl(m) {
  const div = document.createElement('div');
  div.className = 'msg ' + m.role;
  const body = document.createElement('div');
  body.className = 'body';
  if (m.role === 'user') body.textContent = m.content;
  else body.innerHTML = renderMarkdown(m.content);
  div.appendChild(body);
  if (m.role === 'assistant') {
    const copy = document.createElement('button');
    copy.className = 'copy';
    copy.type = 'button';
    copy.textContent = 'Copy';
    copy.onclick = () => {
      const done = () => { copy.textContent = 'Copied'; setTimeout(() => (copy.textContent = 'Copy'), 1200); };
      if (navigator.clipboard) navigator.clipboard.writeText(m.content).then(done, done);
      else done();
    };
    div.appendChild(copy);
  }
  if (m.sources && m.sources.length) div.appendChild(sourcesEl(m.sources));
  return div;
}

// The server's "location" already starts with the path ("docs/a.md:10-20"); the path alone only when there is none.
// Each source is listed once, under the number the answer cites it by.
function sourcesEl(sources) {
  const d = document.createElement('div');
  d.className = 'sources';
  const seen = new Set();
  const items = [];
  sources.forEach((s, i) => {
    const label = s.location || s.source || s.path || '';
    if (seen.has(label)) return;
    seen.add(label);
    items.push('[' + (s.num || i + 1) + '] ' + label);
  });
  d.textContent = 'Sources: ' + items.join('  ');
  return d;
}

// ---- sending ----
function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (settings.apiKey) h.Authorization = 'Bearer ' + settings.apiKey;
  return h;
}

async function send(text) {
  const c = current() || newConv();
  c.messages.push({ role: 'user', content: text });
  if (c.title === 'New chat') c.title = text.slice(0, 40);
  save();
  render();

  const box = $('messages');
  const empty = $('empty');
  if (empty) empty.remove();
  const answer = { role: 'assistant', content: '' };
  const el = messageEl(answer);
  el.classList.add('thinking');
  const body = el.querySelector('.body');
  body.textContent = 'thinking…';
  box.appendChild(el);
  box.scrollTop = box.scrollHeight;

  controller = new AbortController();
  $('stop').disabled = false;
  $('send').disabled = true;
  $('status').textContent = '';
  const t0 = performance.now();
  let nTok = 0;
  let failed = false;
  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: headers(),
      signal: controller.signal,
      body: JSON.stringify({
        messages: c.messages.filter((m) => m.role !== 'error').map((m) => ({ role: m.role, content: m.content })),
        stream: true,
        preset: settings.style,
        use_documents: server.knowledgeBase && settings.useDocs,
      }),
    });
    if (!res.ok) {
      let msg = res.status + ' ' + res.statusText;
      try { msg = (await res.json()).error.message; } catch (e) { /* keep status text */ }
      throw new Error(msg);
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let idx;
      while ((idx = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, idx);
        buf = buf.slice(idx + 2);
        if (!ev.startsWith('data: ')) continue;
        const data = ev.slice(6);
        if (data === '[DONE]') continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        if (j.sources) answer.sources = j.sources;
        const delta = j.choices && j.choices[0] && j.choices[0].delta;
        if (delta && delta.content) {
          if (el.classList.contains('thinking')) el.classList.remove('thinking');
          answer.content += delta.content;
          nTok++;
          body.innerHTML = renderMarkdown(answer.content);
          box.scrollTop = box.scrollHeight;
        }
      }
    }
    const secs = (performance.now() - t0) / 1000;
    $('status').textContent = nTok + ' tokens in ' + secs.toFixed(1) + ' s';
  } catch (e) {
    if (e.name === 'AbortError') $('status').textContent = 'stopped';
    else {
      failed = true;
      $('status').textContent = '';
      const err = document.createElement('div');
      err.className = 'error';
      err.textContent = 'Error: ' + e.message;
      el.appendChild(err);
    }
  } finally {
    el.classList.remove('thinking');
    if (answer.content === '' && body.textContent === 'thinking…') body.textContent = '';
    // an answer cut by an error is shown with the error but not kept as the assistant's turn (it would be sent
    // back as context and restored as if complete); a stopped answer is kept
    if (answer.content !== '' && !failed) c.messages.push(answer);
    save();
    controller = null;
    $('stop').disabled = true;
    $('send').disabled = false;
    if (answer.sources) el.appendChild(sourcesEl(answer.sources));
  }
}

// ---- live token count of the input (debounced) ----
let countTimer = null;
function scheduleCount() {
  clearTimeout(countTimer);
  countTimer = setTimeout(async () => {
    const text = $('input').value;
    try {
      const r = await fetch('/tokenize', { method: 'POST', headers: headers(), body: JSON.stringify({ content: text }) });
      if (r.ok) {
        const j = await r.json();
        $('token-count').textContent = j.count + (j.count === 1 ? ' token' : ' tokens');
      }
    } catch (e) { /* offline or stopped server: keep the last count */ }
  }, 150);
}

// ---- wiring ----
function applyTheme() { document.documentElement.classList.toggle('dark', settings.theme === 'dark'); }

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('input').value.trim();
  if (!text || controller) return;
  $('input').value = '';
  scheduleCount();
  send(text);
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); $('composer').requestSubmit(); }
});
$('input').addEventListener('input', scheduleCount);
$('stop').addEventListener('click', () => { if (controller) controller.abort(); });
$('new-chat').addEventListener('click', () => newConv());
$('style').value = settings.style;
$('style').addEventListener('change', () => { settings.style = $('style').value; save(); });
$('use-docs').checked = !!settings.useDocs;
$('use-docs').addEventListener('change', () => { settings.useDocs = $('use-docs').checked; save(); });
$('api-key').value = settings.apiKey || '';
$('api-key').addEventListener('change', () => { settings.apiKey = $('api-key').value; save(); loadServerInfo(); });
$('theme').addEventListener('click', () => { settings.theme = settings.theme === 'dark' ? 'light' : 'dark'; save(); applyTheme(); });

applyTheme();
if (!current() && convs.length) settings.current = convs[0].id;
render();
loadServerInfo();
