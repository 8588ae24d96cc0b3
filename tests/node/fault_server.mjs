// fault_server.mjs -- a model file server on 127.0.0.1 for the pull tests: Range / If-Range, a hub-like
// resolve redirect with X-Linked-Etag, and faults chosen per test (drops, stalls, short bodies, error
// statuses, redirect loops, a file that changes, corrupt bytes, throttling). Counts body bytes it sends.
import http from 'node:http';
import crypto from 'node:crypto';

export function sha256(buf) { return crypto.createHash('sha256').update(buf).digest('hex'); }

export class FaultServer {
  constructor() {
    this.reset({});
    this.server = http.createServer((req, res) => this.handle(req, res));
    this.sockets = new Set();
    this.server.on('connection', (s) => { this.sockets.add(s); s.on('close', () => this.sockets.delete(s)); });
  }

  listen() {
    return new Promise((resolve) => this.server.listen(0, '127.0.0.1', () => {
      this.port = this.server.address().port;
      this.url = `http://127.0.0.1:${this.port}`;
      resolve(this);
    }));
  }

  close() {
    for (const s of this.sockets) s.destroy();
    return new Promise((resolve) => this.server.close(resolve));
  }

  // cfg: file (Buffer), etag, then any of: dropAt [offset per file request], stallAt, shortBy, statuses
  // [per file request], range416, ignoreIfRange, changeTo {file, etag} after changeAfter requests, token,
  // corrupt, throttle {chunk, ms}, linked (X-Linked-Etag on the file response too), linkedSha (override),
// chunked (no Content-Length), zeros (a file of that many zero bytes, > 4 GiB allowed, served by range only), cdnHost (the hub redirects to http://cdnHost:port/cdn/...; a token is then
// asked for on /resolve/ only), farRedirect (/far redirects there: a plain-http host that is not loopback),
// linkedSize (the resolve redirect's X-Linked-Size, as sent), clen / crange (the file response's Content-Length /
// Content-Range, as sent; the connection is closed after the body when clen is set), statusLine (the file
// response's status line, as sent: written on the socket by hand, since writeHead only makes valid ones).
  reset(cfg) {
    this.cfg = { etag: '"v1"', lastmod: 'Tue, 01 Dec 2026 00:00:00 GMT', ...cfg };
    this.requests = [];
    this.sent = 0;       // body bytes of the model file written to sockets
    this.fileRequests = 0;
  }

  // A huge file of zeros (cfg.zeros bytes, beyond 4 GiB) without holding it: only range requests are served (a
  // whole download would take minutes: 500 instead, so a client that restarts fails fast).
  zeros(req, res, rec) {
    const size = this.cfg.zeros;
    const m = /^bytes=(\d+)-$/.exec(req.headers.range || '');
    if (!m) { rec.status = 500; res.writeHead(500); return res.end('range requests only'); }
    const start = Number(m[1]);
    if (start >= size) { rec.status = 416; res.writeHead(416, { 'Content-Range': `bytes */${size}` }); return res.end(); }
    rec.status = 206;
    res.writeHead(206, { 'Content-Length': String(size - start), 'Content-Range': `bytes ${start}-${size - 1}/${size}`,
      ETag: this.cfg.etag, 'Last-Modified': this.cfg.lastmod, 'Accept-Ranges': 'bytes' });
    const z = Buffer.alloc(Math.min(1 << 20, size - start));
    let left = size - start;
    const pump = () => {
      while (left > 0) {
        const piece = z.subarray(0, Math.min(z.length, left));
        left -= piece.length;
        this.sent += piece.length;
        rec.sent += piece.length;
        if (!res.write(piece)) { res.once('drain', pump); return; }
      }
      res.end();
    };
    pump();
  }

  linkedSha() { return this.cfg.linkedSha || sha256(this.cfg.file); }

  handle(req, res) {
    const cfg = this.cfg;
    const u = new URL(req.url, 'http://x');
    const rec = { path: u.pathname, range: req.headers.range || null, ifRange: req.headers['if-range'] || null,
      auth: req.headers.authorization || null, status: 0, sent: 0 };
    this.requests.push(rec);
    const needToken = cfg.token && (!cfg.cdnHost || u.pathname.includes('/resolve/'));
    if (needToken && req.headers.authorization !== `Bearer ${cfg.token}`) {
      rec.status = 401;
      res.writeHead(401, { 'Content-Type': 'text/plain' });
      return res.end('Access to model is restricted. You must have access to it and be authenticated.');
    }
    if (u.pathname === '/loop') { rec.status = 302; res.writeHead(302, { Location: '/loop' }); return res.end(); }
    if (u.pathname === '/far') { rec.status = 302; res.writeHead(302, { Location: cfg.farRedirect }); return res.end(); }
    if (u.pathname === '/redir') { rec.status = 302; res.writeHead(302, { Location: '/cdn/model.gguf' }); return res.end(); }
    if (u.pathname.includes('/resolve/')) { // the hub: a redirect to its file store, the LFS sha256 on it
      rec.status = 302;
      const cdn = cfg.cdnHost ? `http://${cfg.cdnHost}:${this.port}` : '';
      res.writeHead(302, { Location: cdn + '/cdn/' + u.pathname.split('/').pop(), 'X-Linked-Etag': `"${this.linkedSha()}"`,
        'X-Linked-Size': cfg.linkedSize ?? String(cfg.file.length), ETag: `"${this.linkedSha()}"` });
      return res.end();
    }
    if (!u.pathname.endsWith('.gguf')) { rec.status = 404; res.writeHead(404); return res.end('no such file'); }
    const k = this.fileRequests++;
    if (cfg.changeTo && k === cfg.changeAfter) { // the file is replaced on the server between two requests
      cfg.file = cfg.changeTo.file;
      cfg.etag = cfg.changeTo.etag;
      cfg.lastmod = 'Wed, 02 Dec 2026 00:00:00 GMT';
      cfg.linkedSha = null;
    }
    if (cfg.zeros) return this.zeros(req, res, rec);
    const st = cfg.statuses && cfg.statuses[k];
    if (st && st !== 200) { rec.status = st; res.writeHead(st, { 'Content-Type': 'text/plain' }); return res.end(`status ${st}`); }
    const data = cfg.file;
    let start = 0, status = 200;
    if (req.headers.range) {
      if (cfg.range416) {
        rec.status = 416;
        res.writeHead(416, { 'Content-Range': `bytes */${data.length}` });
        return res.end();
      }
      const m = /^bytes=(\d+)-$/.exec(req.headers.range);
      const ifr = req.headers['if-range'];
      const valid = !ifr || cfg.ignoreIfRange || ifr === cfg.etag || ifr === cfg.lastmod;
      if (m && valid) {
        start = Number(m[1]);
        if (start >= data.length) {
          rec.status = 416;
          res.writeHead(416, { 'Content-Range': `bytes */${data.length}` });
          return res.end();
        }
        status = 206;
      }
    }
    let body = data.subarray(start);
    if (cfg.corrupt) { body = Buffer.from(body); body[body.length >> 1] ^= 0xff; }
    const headers = { 'Content-Length': String(body.length), 'Accept-Ranges': 'bytes', ETag: cfg.etag,
      'Last-Modified': cfg.lastmod, 'Content-Type': 'application/octet-stream' };
    if (cfg.chunked) delete headers['Content-Length']; // Transfer-Encoding: chunked, the size unknown
    if (status === 206) headers['Content-Range'] = `bytes ${start}-${data.length - 1}/${data.length}`;
    if (cfg.linked) headers['X-Linked-Etag'] = `"${this.linkedSha()}"`;
    if (cfg.clen !== undefined) headers['Content-Length'] = cfg.clen;
    if (cfg.crange !== undefined && status === 206) headers['Content-Range'] = cfg.crange;
    rec.status = status;
    if (cfg.statusLine !== undefined) { // the whole response by hand, then the connection closed
      const sock = res.socket;
      sock.write(`${cfg.statusLine}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}Connection: close\r\n\r\n`);
      this.sent += body.length;
      rec.sent += body.length;
      return sock.end(body);
    }
    res.writeHead(status, headers);
    // how much of the body this request gets before its fault
    let limit = body.length, fault = null;
    if (cfg.dropAt && cfg.dropAt[k] !== undefined) { limit = Math.max(0, cfg.dropAt[k] - start); fault = 'drop'; }
    else if (cfg.stallAt !== undefined && k === 0) { limit = cfg.stallAt; fault = 'stall'; }
    else if (cfg.shortBy && k === 0) { limit = body.length - cfg.shortBy; fault = 'short'; }
    const finish = () => {
      if (fault === 'stall') return; // say nothing more: the client has to notice
      if (fault || cfg.clen !== undefined) { res.socket.end(); return; } // short body, or a Content-Length as sent
      res.end();
    };
    const chunk = cfg.throttle ? cfg.throttle.chunk : 1 << 20;
    let off = 0;
    const pump = () => {
      while (off < limit) {
        if (res.destroyed || res.socket === null || res.socket.destroyed) return;
        const piece = body.subarray(off, Math.min(limit, off + chunk));
        off += piece.length;
        this.sent += piece.length;
        rec.sent += piece.length;
        const last = off >= limit;
        const more = res.write(piece, last ? finish : undefined);
        if (last) return;
        if (cfg.throttle) { setTimeout(pump, cfg.throttle.ms); return; }
        if (!more) { res.once('drain', pump); return; }
      }
      if (limit === 0) finish();
    };
    pump();
  }
}
