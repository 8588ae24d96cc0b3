// app.js -- pocketbrain web chat: streaming (SSE over fetch), conversations in localStorage (shared by tabs, never
// written over unread), safe Markdown. No framework, no build step.
'use strict';

const $ = (id) => document.getElementById(id);
const STORE = 'pocketbrain.conversations.v1';
const SETTINGS = 'pocketbrain.settings.v1';

let settings = Object.assign({ style: 'balanced', theme: 'light', apiKey: '', useDocs: false, current: null },
  record(load(SETTINGS)));
let convs = []; // the conversations shown: the usable entries of the stored list, in its order
const touched = new Set(), deleted = new Set(); // ids this tab changed / deleted since its last save
let controller = null;
// the answer shown but not stored: the one being streamed, or the last one, failed, with its error (until the next
// send): { id: its conversation, answer, el, kept: not to be stored (again) }
let live = null;

function load(key) {
  try { return JSON.parse(localStorage.getItem(key)); } catch (e) { return null; }
}
function record(v) { return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : {}; }
function usable(c) { return record(c) === c && typeof c.id === 'string' && Array.isArray(c.messages); }
function shown(m) { return record(m) === m && typeof m.role === 'string' && m.role !== 'error' && typeof m.content === 'string'; }
function byId(id) { return convs.find((c) => c.id === id); }
function current() { return byId(settings.current); }

// ---- storage: the list is shared with this page's other tabs, and holds what this page cannot read ----
// The stored list; a value that is no list is first set aside under a key of its own (if that fails, this throws
// and nothing is written over it).
function storedList() {
  const raw = localStorage.getItem(STORE);
  if (raw === null) return [];
  const v = load(STORE);
  if (Array.isArray(v)) return v;
  const key = STORE + '.unreadable.' + Date.now();
  localStorage.setItem(key, raw);
  localStorage.removeItem(STORE);
  notify('Saved conversations could not be read (not a list); they are kept as they were under "' + key + '".');
  return [];
}
// Reads the list again and puts this tab's changes over it, so another tab's new or continued conversations are
// kept and a save never writes back a stale copy of them; entries this page cannot use stay where they are.
function merge() {
  const list = storedList();
  const ids = new Set(list.filter(usable).map((x) => x.id));
  const mine = new Map(convs.filter((c) => touched.has(c.id)).map((c) => [c.id, c]));
  const merged = convs.filter((c) => mine.has(c.id) && !ids.has(c.id))
    .concat(list.filter((x) => !(usable(x) && deleted.has(x.id))).map((x) => (usable(x) && mine.get(x.id)) || x));
  convs = merged.filter(usable);
  return merged;
}
// Writes the conversations; false, with a message shown, when the browser refuses (storage full): what is stored
// stays as it was, and this tab's changes are kept in memory for the next save.
let saveFailed = false;
function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(merge()));
    touched.clear();
    deleted.clear();
    if (saveFailed) { saveFailed = false; notify(''); }
    return saveSettings();
  } catch (e) {
    saveFailed = true;
    const why = e && e.name === 'QuotaExceededError' ? "the browser's storage for this page is full" : String(e && e.message);
    notify('Not saved: ' + why + '. Delete old conversations to make room; until then this conversation lives in this tab only.');
    return false;
  }
}
function saveSettings() {
  try { localStorage.setItem(SETTINGS, JSON.stringify(settings)); return true; } catch (e) { return false; }
}
function notify(text) {
  $('notice').textContent = text;
  $('notice').hidden = text === '';
}
function newConv() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: 'New chat', messages: [] };
  convs.unshift(c);
  touched.add(c.id);
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
    t.textContent = typeof c.title === 'string' ? c.title : 'Untitled';
    li.appendChild(t);
    const del = document.createElement('button');
    del.textContent = '×';
    del.title = 'Delete';
    del.onclick = (e) => {
      e.stopPropagation();
      if (live && live.id === c.id && controller) controller.abort(); // its answer has nowhere to go
      convs = convs.filter((x) => x.id !== c.id);
      deleted.add(c.id);
      if (settings.current === c.id) settings.current = convs.length ? convs[0].id : null;
      save();
      render();
    };
    li.appendChild(del);
    li.onclick = () => { settings.current = c.id; saveSettings(); render(); };
    list.appendChild(li);
  }
  const box = $('messages');
  box.textContent = '';
  const c = current();
  if (c) for (const m of c.messages) if (shown(m)) box.appendChild(messageEl(m));
  if (live && c && live.id === c.id) box.appendChild(live.el); // also after a switch away and back
  else if (!c || !c.messages.some(shown)) box.appendChild(emptyEl());
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
  if (!server.knowledgeBase && settings.useDocs) { settings.useDocs = false; $('use-docs').checked = false; saveSettings(); }
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
  if (m.cut) div.appendChild(noteEl(LENGTH_NOTE));
  if (Array.isArray(m.sources) && m.sources.length) div.appendChild(sourcesEl(m.sources));
  return div;
}

const LENGTH_NOTE = "Cut short: the answer reached the server's length limit (max tokens), or the model's context is full.";
function noteEl(text) {
  const d = document.createElement('div');
  d.className = 'note';
  d.textContent = text;
  return d;
}

// The server's "location" already starts with the path ("docs/a.md:10-20"); the path alone only when there is none.
// Each source is listed once, under the number the answer cites it by; one whose file was edited or deleted since it
// was ingested says so (the answer quotes the text of then: the file holds other text now, or nothing).
const FILE_STATE = { changed: ' (changed since ingest)', gone: ' (file is gone)' };
function sourcesEl(sources) {
  const d = document.createElement('div');
  d.className = 'sources';
  const seen = new Set();
  const items = [];
  sources.map(record).forEach((s, i) => {
    const label = s.location || s.source || s.path || '';
    if (seen.has(label)) return;
    seen.add(label);
    items.push('[' + (s.num || i + 1) + '] ' + label + (Object.hasOwn(FILE_STATE, s.file_state) ? FILE_STATE[s.file_state] : ''));
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
  const id = c.id;
  c.messages.push({ role: 'user', content: text });
  if (c.title === 'New chat') c.title = text.slice(0, 40);
  touched.add(id);
  save();

  const box = $('messages');
  const answer = { role: 'assistant', content: '' };
  const el = messageEl(answer);
  el.classList.add('thinking');
  const body = el.querySelector('.body');
  body.textContent = 'thinking…';
  live = { id, answer, el, kept: false };
  render();

  controller = new AbortController();
  $('stop').disabled = false;
  $('send').disabled = true;
  $('status').textContent = '';
  const t0 = performance.now();
  let nTok = 0;
  let failed = false;
  // a failed fetch or read says which; an abort (Stop, a deleted conversation) stays an abort
  const lost = (what) => (e) => { throw e.name === 'AbortError' ? e : new Error(what + ' (' + e.message + ')'); };
  try {
    // fetch refuses such a header with a TypeError that would read as "cannot reach the server"
    if (/[^\x20-\x7e]/.test(settings.apiKey || '')) {
      throw new Error('the API key holds a character a header cannot carry (printable ASCII only)');
    }
    const res = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: headers(),
      signal: controller.signal,
      body: JSON.stringify({
        messages: c.messages.filter(shown).map((m) => ({ role: m.role, content: m.content })),
        stream: true,
        preset: settings.style,
        use_documents: server.knowledgeBase && settings.useDocs,
      }),
    }).catch(lost('cannot reach the server: is pocketbrain serve running?'));
    if (!res.ok) {
      let msg = res.status + ' ' + res.statusText, code = '';
      try { const j = (await res.json()).error; msg = j.message; code = j.code; } catch (e) { /* keep status text */ }
      if (code === 'context_length_exceeded') {
        // every later message in this conversation would be refused the same way: say what helps, and give the
        // text back to send elsewhere (it also stays in the conversation)
        const back = $('input').value === '';
        if (back) $('input').value = text;
        msg = (c.messages.filter(shown).length > 1
          ? 'This conversation no longer fits the model\'s context (' + msg + '). Start a new chat to go on'
          : 'Your message is longer than the model\'s context (' + msg + '). Shorten it') +
          (back ? ': it is back in the input box.' : '.');
      }
      throw new Error(msg);
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '', ended = false;
    for (;;) {
      const { value, done } = await reader.read().catch(lost('the connection to the server was lost mid-answer'));
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let idx;
      while ((idx = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, idx);
        buf = buf.slice(idx + 2);
        if (!ev.startsWith('data: ')) continue;
        const data = ev.slice(6);
        if (data === '[DONE]') { ended = true; continue; }
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        if (j.sources) answer.sources = j.sources;
        const choice = j.choices && j.choices[0];
        if (choice && choice.finish_reason === 'length') answer.cut = true;
        const delta = choice && choice.delta;
        if (delta && delta.content) {
          if (el.classList.contains('thinking')) el.classList.remove('thinking');
          answer.content += delta.content;
          nTok++;
          body.innerHTML = renderMarkdown(answer.content);
          box.scrollTop = box.scrollHeight;
        }
      }
    }
    // the server ends every stream with [DONE]: without it the answer was cut (a proxy, the server gone)
    if (!ended) throw new Error('the answer was cut off: the connection closed before its end');
    const secs = (performance.now() - t0) / 1000;
    $('status').textContent = nTok + ' tokens in ' + secs.toFixed(1) + ' s';
    if (answer.cut) el.appendChild(noteEl(LENGTH_NOTE));
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
    // back as context and restored as if complete); a stopped answer is kept, in its conversation (found again
    // by id: another tab's save may have replaced the object; a deleted conversation gets nothing)
    const to = byId(id);
    if (answer.content !== '' && !failed && !live.kept && to) { to.messages.push(answer); touched.add(id); }
    live = failed ? { id, answer, el, kept: true } : null;
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
if (!$('style').value) $('style').value = settings.style = 'balanced'; // a value no option has
$('style').addEventListener('change', () => { settings.style = $('style').value; saveSettings(); });
$('use-docs').checked = !!settings.useDocs;
$('use-docs').addEventListener('change', () => { settings.useDocs = $('use-docs').checked; saveSettings(); });
$('api-key').value = typeof settings.apiKey === 'string' ? settings.apiKey : '';
$('api-key').addEventListener('change', () => { settings.apiKey = $('api-key').value; saveSettings(); loadServerInfo(); });
$('theme').addEventListener('click', () => { settings.theme = settings.theme === 'dark' ? 'light' : 'dark'; saveSettings(); applyTheme(); });
// another tab saved: show its conversations (this tab's unsaved changes stay on top)
window.addEventListener('storage', (e) => {
  if (e.key !== STORE && e.key !== null) return;
  try { merge(); } catch (err) { return; } // a value that cannot be set aside: the next save says so
  render();
});
// a reload or a closed tab mid-answer keeps the answer so far, as Stop does
window.addEventListener('pagehide', () => {
  const c = live && live.answer.content !== '' && !live.kept && byId(live.id);
  if (!c) return;
  c.messages.push(live.answer);
  touched.add(c.id);
  live.kept = true;
  save();
});

applyTheme();
try {
  const list = merge(); // role "error": errors an older version stored, left out on purpose
  const odd = list.length - convs.length +
    convs.reduce((n, c) => n + c.messages.filter((m) => !shown(m) && record(m).role !== 'error').length, 0);
  if (odd > 0) {
    notify(odd + ' saved ' + (odd === 1 ? 'entry' : 'entries') +
      ' (conversations or messages) could not be read: kept as stored, not shown.');
  }
} catch (e) {
  notify('Saved conversations could not be read, nor set aside (' + e.message + '); nothing is saved over them.');
}
if (!current() && convs.length) settings.current = convs[0].id;
render();
loadServerInfo();
