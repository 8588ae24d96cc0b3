/* fetch.c -- one resumable, verified download with libcurl: Range + If-Range into a .part file, retries
 * with backoff, free-space check, SHA-256 (OpenSSL EVP) while writing, progress on stderr. No renames
 * into the library and no GGUF checks here (tools/cmd_pull.c). */
#include "fetch.h"
#include "base/base.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

static volatile sig_atomic_t interrupted;

void fetch_interrupt(void) { interrupted = 1; }

/* Why a transfer was stopped from inside a callback. */
enum { STOP_NONE, STOP_NOSPACE, STOP_IO, STOP_CHANGED, STOP_INTERRUPT, STOP_STALL, STOP_REFUSED, STOP_BADHDR };

typedef struct xfer {
    const fetch_opts *o;
    CURL *curl; /* this attempt's handle (the URL a relative redirect is resolved against) */
    int fd;
    EVP_MD_CTX *md;
    uint64_t have;     /* bytes in the part, all hashed into md */
    uint64_t req_from; /* Range start of this attempt (0 = whole file) */
    uint64_t total;    /* file size when known (0 = unknown) */
    /* the part's identity, as recorded in the state file */
    char part_etag[256], part_lastmod[128], part_sha[65];
    /* the response being received (reset on each status line: redirects have their own headers) */
    long status;
    char etag[256], lastmod[128], crange[128];
    int64_t clen;
    bool location;
    char hub_sha[65];  /* X-Linked-Etag of any hop (the hub sends it on its redirect) */
    uint64_t hub_size; /* X-Linked-Size of any hop: the size when the file response has no Content-Length */
    bool body;         /* this response's body is the file (200/206 accepted) */
    int stop;
    char stop_msg[512];
    /* progress */
    bool tty;
    double t0, t_last;
    uint64_t got;  /* bytes received by this process (rate) */
    double t_recv; /* when the last byte (header or body) arrived in this attempt */
    int last_step;
} xfer;

/* ---- small helpers ------------------------------------------------------------------------------- */

static bool is_hex64(const char *s) {
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return s[64] == 0;
}

static void human(double b, char *buf, size_t cap) {
    if (b >= 1024 * MIB)
        snprintf(buf, cap, "%.2f GiB", b / (1024 * MIB));
    else
        snprintf(buf, cap, "%.1f MiB", b / MIB);
}

static void hex(const unsigned char *d, char out[65]) {
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* Copies a header value (after "Name:") without surrounding blanks. */
static void header_value(const char *line, size_t n, size_t skip, char *dst, size_t cap) {
    const char *v = line + skip, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
    size_t l = (size_t)(end - v) < cap - 1 ? (size_t)(end - v) : cap - 1;
    memcpy(dst, v, l);
    dst[l] = 0;
}

/* A byte count from the network: plain decimal digits only (no sign, blank, suffix or empty value), at most
 * max. strtoll / %llu took "-1" as 2^64-1, "+5" as 5, "12abc" as 12 and clamped or wrapped past 2^63. */
static bool parse_count(const char *s, size_t len, uint64_t max, uint64_t *out) {
    uint64_t v = 0;
    if (len == 0) return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (max - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* The status code of a status line "HTTP/VERSION NNN[ REASON]" (n bytes, its CRLF included): after the first blank
 * exactly three digits (100..999, as parse_count reads them), then a blank or the end of the line. strtol took
 * "+200", " 200" and "200abc" as 200 and read past a fourth digit; libcurl 7.88 refuses a sign or a fourth digit
 * itself, but passes "200abc" and a second blank on to this callback. */
static bool parse_status(const char *line, size_t n, long *out) {
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == '\n')) n--;
    const char *sp = memchr(line, ' ', n);
    if (!sp) return false;
    const char *p = sp + 1;
    size_t left = n - (size_t)(p - line);
    uint64_t v;
    if (left < 3 || !parse_count(p, 3, 999, &v) || v < 100 || (left > 3 && p[3] != ' ')) return false;
    *out = (long)v;
    return true;
}

/* "bytes A-B/T" (a 206), or with a == NULL "bytes * /T" without the blank (a 416); numbers as parse_count. */
static bool parse_content_range(const char *s, uint64_t *a, uint64_t *b, uint64_t *t) {
    if (strncmp(s, "bytes ", 6) != 0) return false;
    s += 6;
    const char *slash = strchr(s, '/');
    if (!slash || !parse_count(slash + 1, strlen(slash + 1), UINT64_MAX, t)) return false;
    if (a == NULL) return slash - s == 1 && *s == '*';
    const char *dash = memchr(s, '-', (size_t)(slash - s));
    return dash && parse_count(s, (size_t)(dash - s), UINT64_MAX, a) &&
           parse_count(dash + 1, (size_t)(slash - dash - 1), UINT64_MAX, b);
}

static bool header_is(const char *line, size_t n, const char *name) {
    size_t l = strlen(name);
    return n > l && strncasecmp(line, name, l) == 0 && line[l] == ':';
}

bool fetch_is_loopback(const char *url) {
    const char *h = strstr(url, "://");
    if (!h) return false;
    h += 3;
    size_t auth = strcspn(h, "/?#"); /* the authority: [user[:pass]@]host[:port] */
    const char *at = memchr(h, '@', auth);
    if (at) auth -= (size_t)(at + 1 - h), h = at + 1;
    char host[256];
    size_t n;
    if (*h == '[') { /* an IPv6 literal */
        const char *e = memchr(h, ']', auth);
        if (!e) return false;
        n = (size_t)(e - h - 1), h++;
    } else {
        n = strcspn(h, ":/?#");
        if (n > auth) n = auth;
    }
    if (n == 0 || n >= sizeof host) return false;
    memcpy(host, h, n);
    host[n] = 0;
    unsigned char a[16];
    if (inet_pton(AF_INET, host, a) == 1) return a[0] == 127;
    if (inet_pton(AF_INET6, host, a) == 1) {
        static const unsigned char one[16] = {[15] = 1};
        return memcmp(a, one, 16) == 0;
    }
    return strcasecmp(host, "localhost") == 0;
}

/* ---- state file (JSON beside the part) ------------------------------------------------------------ */

static void state_write(const xfer *x) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "url", x->o->url);
    cJSON_AddStringToObject(o, "etag", x->part_etag);
    cJSON_AddStringToObject(o, "last_modified", x->part_lastmod);
    cJSON_AddStringToObject(o, "hub_sha256", x->part_sha);
    cJSON_AddNumberToObject(o, "size", (double)x->total);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    /* the atomic writer (random O_EXCL temp name, never through a link): a state file that cannot be written only
     * costs the resume */
    pb_atomic_file f;
    if (t && pb_atomic_open(x->o->state, &f) == PB_OK) {
        if (pb_atomic_write(&f, t, strlen(t)) == PB_OK)
            pb_atomic_commit(&f);
        else
            pb_atomic_abort(&f);
    }
    free(t);
}

/* True when the state file describes a part of this url; fills the part's identity. */
static bool state_read(xfer *x) {
    FILE *f = fopen(x->o->state, "rb");
    if (!f) return false;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *o = cJSON_Parse(buf);
    const char *url = cJSON_GetStringValue(cJSON_GetObjectItem(o, "url"));
    bool same = url && strcmp(url, x->o->url) == 0;
    if (same) {
        const char *e = cJSON_GetStringValue(cJSON_GetObjectItem(o, "etag"));
        const char *l = cJSON_GetStringValue(cJSON_GetObjectItem(o, "last_modified"));
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, "hub_sha256"));
        const cJSON *sz = cJSON_GetObjectItem(o, "size");
        snprintf(x->part_etag, sizeof x->part_etag, "%s", e ? e : "");
        snprintf(x->part_lastmod, sizeof x->part_lastmod, "%s", l ? l : "");
        snprintf(x->part_sha, sizeof x->part_sha, "%s", s ? s : "");
        double d = cJSON_IsNumber(sz) ? sz->valuedouble : 0; /* our own file, but a size must be a byte count */
        x->total = d >= 1 && d <= 9007199254740992.0 && d == floor(d) ? (uint64_t)d : 0;
    }
    cJSON_Delete(o);
    return same;
}

/* Empties the part: the next bytes start the file again. */
static bool restart_part(xfer *x) {
    x->have = 0;
    x->part_etag[0] = x->part_lastmod[0] = x->part_sha[0] = 0;
    return ftruncate(x->fd, 0) == 0 && lseek(x->fd, 0, SEEK_SET) == 0 &&
           EVP_DigestInit_ex(x->md, EVP_sha256(), NULL) == 1;
}

/* Hashes the bytes already in the part (a resumed download continues the digest from them). */
static bool rehash_part(xfer *x, uint64_t n) {
    static unsigned char buf[1 << 20];
    uint64_t done = 0;
    if (lseek(x->fd, 0, SEEK_SET) != 0) return false;
    while (done < n) {
        size_t want = n - done < sizeof buf ? (size_t)(n - done) : sizeof buf;
        ssize_t r = read(x->fd, buf, want);
        if (r <= 0) return false;
        EVP_DigestUpdate(x->md, buf, (size_t)r);
        done += (uint64_t)r;
    }
    x->have = n;
    return lseek(x->fd, (off_t)n, SEEK_SET) == (off_t)n;
}

/* ---- progress ------------------------------------------------------------------------------------- */

static void progress(xfer *x, bool final) {
    if (x->o->quiet) return;
    double now = pb_time_ms(), el = (now - x->t0) / 1000.0;
    double rate = el > 0 ? (double)x->got / el : 0;
    char a[32], b[32], r[32];
    human((double)x->have, a, sizeof a);
    human((double)x->total, b, sizeof b);
    human(rate, r, sizeof r);
    int pct = x->total ? (int)(100.0 * (double)x->have / (double)x->total) : -1;
    if (x->tty) {
        if (!final && now - x->t_last < 200) return;
        x->t_last = now;
        double eta = rate > 0 && x->total > x->have ? (double)(x->total - x->have) / rate : 0;
        int w = 24, fill = pct > 0 ? pct * w / 100 : 0;
        fprintf(stderr, "\r%s [", x->o->label);
        for (int i = 0; i < w; i++) fputc(i < fill ? '#' : '.', stderr);
        if (pct >= 0)
            fprintf(stderr, "] %3d%%  %s / %s  %s/s  ETA %dm%02ds ", pct, a, b, r, (int)(eta + 0.5) / 60,
                    (int)(eta + 0.5) % 60);
        else
            fprintf(stderr, "] %s  %s/s ", a, r);
        if (final) fputc('\n', stderr);
        fflush(stderr);
        return;
    }
    /* not a terminal: one plain line per 10% (or per 64 MiB when the size is unknown) */
    int step = pct >= 0 ? pct / 10 : (int)(x->have / (64u << 20));
    if (step == x->last_step) return;
    x->last_step = step;
    if (pct >= 0)
        fprintf(stderr, "%s: %d%% (%s of %s, %s/s)\n", x->o->label, pct, a, b, r);
    else
        fprintf(stderr, "%s: %s (%s/s)\n", x->o->label, a, r);
}

/* ---- libcurl callbacks ----------------------------------------------------------------------------- */

static void stop(xfer *x, int why, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void stop(xfer *x, int why, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->stop_msg, sizeof x->stop_msg, fmt, ap);
    va_end(ap);
    x->stop = why;
}

/* The last header of a response that is not a redirect: decide whether its body is our file. false stops
 * the transfer (x->stop says why). */
static bool accept_response(xfer *x) {
    if (x->status != 200 && x->status != 206) return true; /* an error: its body is read as a message */
    uint64_t total = 0;
    if (x->status == 206) {
        uint64_t a, b, t;
        /* we ask for "bytes=FROM-": the answer must run from FROM to the file's last byte, Content-Length long */
        if (!parse_content_range(x->crange, &a, &b, &t) || a != x->req_from || b >= t || b != t - 1 ||
            (x->clen >= 0 && (uint64_t)x->clen != b - a + 1)) {
            stop(x, STOP_CHANGED, "the server answered the range request with '%s'", x->crange);
            return false;
        }
        /* If-Range should have turned a changed file into a 200; check anyway (not every server does) */
        if ((x->part_etag[0] && x->etag[0] && strcmp(x->part_etag, x->etag) != 0) ||
            (!x->part_etag[0] && x->part_lastmod[0] && x->lastmod[0] && strcmp(x->part_lastmod, x->lastmod) != 0) ||
            (x->part_sha[0] && x->hub_sha[0] && strcmp(x->part_sha, x->hub_sha) != 0)) {
            stop(x, STOP_CHANGED, "the file changed on the server since the partial download (new ETag)");
            return false;
        }
        total = t;
    } else {
        if (x->have > 0 && !restart_part(x)) { /* the whole file again: the part starts over */
            stop(x, STOP_IO, "cannot truncate '%s': %s", x->o->part, strerror(errno));
            return false;
        }
        if (x->req_from > 0 && !x->o->quiet)
            fprintf(stderr, "%s: the server sent the whole file (it changed, or ignores ranges); starting over\n",
                    x->o->label);
        x->req_from = 0;
        total = x->clen > 0 ? (uint64_t)x->clen : x->hub_size; /* chunked: the size the hub announced */
    }
    x->total = total;
    /* enough room for the rest? checked before the first byte is written */
    struct statvfs vs;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", x->o->part);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = 0;
    else
        snprintf(dir, sizeof dir, ".");
    if (total > x->have && statvfs(dir, &vs) == 0) {
        uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize, need = total - x->have;
        if (avail < need) {
            char n[32], f[32];
            human((double)need, n, sizeof n);
            human((double)avail, f, sizeof f);
            stop(x, STOP_NOSPACE, "not enough space in %s: the download needs %s (%llu bytes), %s is free", dir, n,
                 (unsigned long long)need, f);
            return false;
        }
    }
    snprintf(x->part_etag, sizeof x->part_etag, "%s", x->etag);
    snprintf(x->part_lastmod, sizeof x->part_lastmod, "%s", x->lastmod);
    snprintf(x->part_sha, sizeof x->part_sha, "%s", x->hub_sha);
    state_write(x);
    x->body = true;
    return true;
}

static size_t on_header(char *line, size_t sz, size_t nmemb, void *user) {
    xfer *x = user;
    size_t n = sz * nmemb;
    x->t_recv = pb_time_ms();
    if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) { /* a new response (first, or after a redirect) */
        if (!parse_status(line, n, &x->status)) {   /* the code decides what the body is: a garbled one is no code */
            int l = (int)n;
            while (l > 0 && (line[l - 1] == '\r' || line[l - 1] == '\n')) l--;
            stop(x, STOP_BADHDR, "the server sent a malformed status line '%.*s'", l < 60 ? l : 60, line);
            return 0;
        }
        x->etag[0] = x->lastmod[0] = x->crange[0] = 0;
        x->clen = -1;
        x->location = false;
        x->body = false;
    } else if (header_is(line, n, "ETag")) {
        header_value(line, n, 5, x->etag, sizeof x->etag);
    } else if (header_is(line, n, "Last-Modified")) {
        header_value(line, n, 14, x->lastmod, sizeof x->lastmod);
    } else if (header_is(line, n, "Content-Range")) {
        header_value(line, n, 14, x->crange, sizeof x->crange);
    } else if (header_is(line, n, "Content-Length")) {
        char v[64];
        header_value(line, n, 15, v, sizeof v);
        uint64_t c;
        if (!parse_count(v, strlen(v), INT64_MAX, &c)) { /* the body's length is then unknown: refuse it */
            stop(x, STOP_BADHDR, "the server sent a malformed Content-Length header '%.40s' (not a byte count)", v);
            return 0;
        }
        x->clen = (int64_t)c;
    } else if (header_is(line, n, "Location")) {
        char v[2048];
        header_value(line, n, 9, v, sizeof v);
        x->location = true;
        /* plain http:// only to loopback mirrors unless --insecure, also when a redirect leads there (curl's
         * protocol list allows http for the whole transfer once the first URL is a loopback one); a relative
         * Location ("//host/x" keeps the scheme) is checked as the URL it resolves to */
        char *eff = NULL, *dest = NULL;
        CURLU *u = curl_url();
        curl_easy_getinfo(x->curl, CURLINFO_EFFECTIVE_URL, &eff);
        if (u && eff && curl_url_set(u, CURLUPART_URL, eff, 0) == CURLUE_OK &&
            curl_url_set(u, CURLUPART_URL, v, CURLU_URLENCODE | CURLU_ALLOW_SPACE) == CURLUE_OK)
            curl_url_get(u, CURLUPART_URL, &dest, 0);
        curl_url_cleanup(u);
        const char *to = dest ? dest : v;
        bool refuse = !x->o->insecure && strncasecmp(to, "http://", 7) == 0 && !fetch_is_loopback(to);
        if (refuse)
            stop(x, STOP_REFUSED,
                 "refusing a redirect to plain http:// ('%.300s'): only loopback addresses; use --insecure", to);
        curl_free(dest);
        if (refuse) return 0;
    } else if (header_is(line, n, "X-Linked-Size")) {
        char v[64];
        header_value(line, n, 14, v, sizeof v);
        uint64_t s; /* the hub's size drives the free-space check and the progress: a bad one is refused */
        if (!parse_count(v, strlen(v), INT64_MAX, &s)) {
            stop(x, STOP_BADHDR, "the server sent a malformed X-Linked-Size header '%.40s' (not a byte count)", v);
            return 0;
        }
        x->hub_size = s;
    } else if (header_is(line, n, "X-Linked-Etag")) { /* the hub: "sha256 of the LFS file", quoted */
        char v[80], *p = v;
        header_value(line, n, 14, v, sizeof v);
        if (*p == 'W' && p[1] == '/') p += 2;
        if (*p == '"') p++;
        if (strlen(p) >= 64) {
            p[64] = 0;
            if (is_hex64(p))
                for (int i = 0; i <= 64; i++) x->hub_sha[i] = (char)tolower((unsigned char)p[i]);
        }
    } else if (n <= 2 && (line[0] == '\r' || line[0] == '\n')) { /* end of this response's headers */
        bool redirect = x->status >= 300 && x->status < 400 && x->location;
        if (!redirect && !accept_response(x)) return 0;
    }
    return n;
}

static size_t on_body(char *data, size_t sz, size_t nmemb, void *user) {
    xfer *x = user;
    size_t n = sz * nmemb;
    if (interrupted) {
        x->stop = STOP_INTERRUPT;
        return 0;
    }
    if (!x->body) return n; /* an error page: ignored (the status says what happened) */
    for (size_t off = 0; off < n;) {
        ssize_t w = write(x->fd, data + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == ENOSPC || errno == EDQUOT)) { /* the size was unknown, or the disk filled */
            char h[32];
            human((double)(x->have + off), h, sizeof h);
            stop(x, STOP_NOSPACE,
                 "not enough space for '%s': the disk filled up after %s (%s); free some space and run the same "
                 "pull to resume it, or 'pocketbrain rm %s' to drop it",
                 x->o->part, h, strerror(errno), x->o->label);
            return 0;
        }
        if (w <= 0) {
            stop(x, STOP_IO, "writing '%s': %s", x->o->part, strerror(w < 0 ? errno : EIO));
            return 0;
        }
        off += (size_t)w;
    }
    EVP_DigestUpdate(x->md, data, n);
    x->t_recv = pb_time_ms();
    x->have += n;
    x->got += n;
    progress(x, false);
    return n;
}

static int on_tick(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    xfer *x = user;
    if (interrupted) {
        x->stop = STOP_INTERRUPT;
        return 1;
    }
    /* a stall: nothing received for stall_s (curl's own low-speed check averages over several seconds) */
    if (x->o->stall_s > 0 && pb_time_ms() - x->t_recv > 1000.0 * (double)x->o->stall_s) {
        stop(x, STOP_STALL, "no data for %ld s (stalled)", x->o->stall_s);
        return 1;
    }
    return 0;
}

/* ---- attempts ------------------------------------------------------------------------------------------ */

enum { ATT_DONE, ATT_RETRY, ATT_AGAIN, ATT_FAIL, ATT_INTR };

/* One request. ATT_DONE: the part holds the whole file. ATT_RETRY: a transient failure (back off).
 * ATT_AGAIN: start over at once (changed file, bad range). ATT_FAIL / ATT_INTR: stop (err filled). */
static int attempt(xfer *x, char *err, size_t cap) {
    const fetch_opts *o = x->o;
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(err, cap, "cannot initialise libcurl");
        return ATT_FAIL;
    }
    struct curl_slist *hdr = NULL;
    char line[512], cerr[CURL_ERROR_SIZE] = "";
    if (o->token && *o->token) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", o->token);
        hdr = curl_slist_append(hdr, line);
    }
    x->curl = c;
    x->req_from = x->have;
    if (x->have > 0) {
        char range[64];
        snprintf(range, sizeof range, "%llu-", (unsigned long long)x->have);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
        /* If-Range: the server sends the rest only if the file is still the one the part started from */
        const char *v = x->part_etag[0] && strncmp(x->part_etag, "W/", 2) != 0 ? x->part_etag : x->part_lastmod;
        if (*v) {
            snprintf(line, sizeof line, "If-Range: %s", v);
            hdr = curl_slist_append(hdr, line);
        }
    }
    x->hub_sha[0] = 0;
    x->hub_size = 0;
    x->status = 0;
    x->body = false;
    x->stop = STOP_NONE;
    x->t_recv = pb_time_ms();
    curl_easy_setopt(c, CURLOPT_URL, o->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    char ua[64];
    snprintf(ua, sizeof ua, "pocketbrain/%s", pb_version());
    curl_easy_setopt(c, CURLOPT_USERAGENT, ua);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, o->allow_http ? "http,https" : "https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, o->allow_http ? "http,https" : "https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_tick);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdr);
    if (x->stop == STOP_INTERRUPT || interrupted) return ATT_INTR;
    if (x->stop == STOP_NOSPACE || x->stop == STOP_IO || x->stop == STOP_REFUSED || x->stop == STOP_BADHDR) {
        snprintf(err, cap, "%s", x->stop_msg);
        return ATT_FAIL;
    }
    if (x->stop == STOP_STALL) {
        snprintf(err, cap, "%s", x->stop_msg);
        return ATT_RETRY;
    }
    if (x->stop == STOP_CHANGED) {
        snprintf(err, cap, "%s", x->stop_msg);
        return restart_part(x) ? ATT_AGAIN : ATT_FAIL;
    }
    if (rc == CURLE_OK && (status == 200 || status == 206)) {
        if (x->total && x->have != x->total) {
            snprintf(err, cap, "the server closed after %llu of %llu bytes", (unsigned long long)x->have,
                     (unsigned long long)x->total);
            return ATT_RETRY;
        }
        return ATT_DONE;
    }
    if (rc == CURLE_OK && status == 416 && x->req_from > 0) {
        uint64_t t;
        if (parse_content_range(x->crange, NULL, NULL, &t) && t == x->have && x->have == x->total) return ATT_DONE;
        snprintf(err, cap, "the server refused to resume at byte %llu (HTTP 416)", (unsigned long long)x->have);
        return restart_part(x) ? ATT_AGAIN : ATT_FAIL;
    }
    if (rc == CURLE_OK) {
        if (status == 401 || status == 403) {
            if (o->hub)
                snprintf(err, cap,
                         "HTTP %ld from %s: this model is gated: accept its license on the model page, then set "
                         "HF_TOKEN (or pass --token)%s",
                         status, o->url, o->token && *o->token ? " (a token was sent: check it has access)" : "");
            else
                snprintf(err, cap, "HTTP %ld from %s: access denied", status, o->url);
            return ATT_FAIL;
        }
        snprintf(err, cap, "HTTP %ld from %s%s", status, o->url,
                 status == 404                    ? ": not found (check the name, file and revision)"
                 : status == 416                  ? ": range not satisfiable"
                 : status == 429 || status >= 500 ? " (server busy or failing)"
                                                  : "");
        return status == 408 || status == 429 || status >= 500 ? ATT_RETRY : ATT_FAIL;
    }
    snprintf(err, cap, "%s", cerr[0] ? cerr : curl_easy_strerror(rc));
    switch (rc) {
    case CURLE_TOO_MANY_REDIRECTS:
        snprintf(err, cap, "too many redirects from %s (a redirect loop?)", o->url);
        return ATT_FAIL;
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR: return ATT_RETRY;
    default: return ATT_FAIL;
    }
}

/* Sleeps ms milliseconds; false when interrupted. */
static bool nap(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        if (errno != EINTR || interrupted) return !interrupted;
    return !interrupted;
}

int fetch_file(const fetch_opts *o, fetch_result *r, char *err, size_t cap) {
    memset(r, 0, sizeof *r);
    err[0] = 0;
    static bool curl_ready;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            snprintf(err, cap, "cannot initialise libcurl");
            return FETCH_FAIL;
        }
        curl_ready = true;
    }
    xfer x;
    memset(&x, 0, sizeof x);
    x.o = o;
    x.tty = isatty(2);
    x.t0 = x.t_last = pb_time_ms();
    x.last_step = -1;
    /* the part is appended to in place (resume), so not through the atomic writer: never through a symbolic link
     * (O_NOFOLLOW) and only into a regular file */
    if (pb_output_check(o->part) != PB_OK) {
        snprintf(err, cap, "%s", pb_last_error());
        return FETCH_FAIL;
    }
    x.md = EVP_MD_CTX_new();
    x.fd = open(o->part, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    struct stat pst;
    if (x.fd >= 0 && (fstat(x.fd, &pst) != 0 || !S_ISREG(pst.st_mode))) {
        snprintf(err, cap, "'%s' is not a regular file: refusing to write into it", o->part);
        EVP_MD_CTX_free(x.md);
        close(x.fd);
        return FETCH_FAIL;
    }
    if (!x.md || x.fd < 0 || EVP_DigestInit_ex(x.md, EVP_sha256(), NULL) != 1) {
        snprintf(err, cap, "cannot open '%s': %s", o->part, x.fd < 0 ? strerror(errno) : "no SHA-256");
        EVP_MD_CTX_free(x.md);
        if (x.fd >= 0) close(x.fd);
        return FETCH_FAIL;
    }
    struct stat st;
    bool resumed = false;
    if (fstat(x.fd, &st) == 0 && st.st_size > 0 && state_read(&x)) {
        if (!rehash_part(&x, (uint64_t)st.st_size)) restart_part(&x);
        resumed = x.have > 0;
        if (resumed && !o->quiet) {
            char h[32];
            human((double)x.have, h, sizeof h);
            fprintf(stderr, "%s: resuming a partial download (%s already here)\n", o->label, h);
        }
    } else {
        restart_part(&x);
    }
    int rc = FETCH_FAIL, fails = 0;
    bool fresh_retry_done = false;
    for (;;) {
        uint64_t before = x.have;
        if (x.have > 0) resumed = true;
        int a = attempt(&x, err, cap);
        if (a == ATT_INTR) {
            rc = FETCH_INTERRUPTED;
            char h[32];
            human((double)x.have, h, sizeof h);
            snprintf(err, cap, "interrupted; %s kept in %s: the same pull resumes it", h, o->part);
            break;
        }
        if (a == ATT_FAIL) break;
        if (a == ATT_DONE) {
            unsigned char d[32];
            unsigned int dl = 0;
            EVP_DigestFinal_ex(x.md, d, &dl);
            hex(d, r->sha256);
            r->size = x.have;
            const char *want = o->pinned_sha && *o->pinned_sha ? o->pinned_sha : x.part_sha[0] ? x.part_sha : NULL;
            if (want && strcmp(want, r->sha256) != 0) {
                const char *by = o->pinned_sha && *o->pinned_sha ? o->pinned_by : "the hub's X-Linked-Etag";
                if (resumed && !fresh_retry_done) { /* stale bytes from before? once more from the start */
                    if (!o->quiet)
                        fprintf(stderr, "%s: sha256 mismatch after a resumed download; downloading it again\n",
                                o->label);
                    fresh_retry_done = true;
                    resumed = false;
                    if (!restart_part(&x)) break;
                    continue;
                }
                snprintf(err, cap, "sha256 mismatch: the download is %s, %s says %s; discarded", r->sha256, by, want);
                unlink(o->part);
                unlink(o->state);
                break;
            }
            snprintf(r->verified_by, sizeof r->verified_by, "%s",
                     !want                             ? ""
                     : o->pinned_sha && *o->pinned_sha ? o->pinned_by
                                                       : "hub (X-Linked-Etag)");
            progress(&x, true);
            rc = FETCH_OK;
            break;
        }
        if (x.have > before) fails = 0; /* progress was made: only consecutive failures count */
        if (++fails > o->retries) {
            size_t l = strlen(err);
            snprintf(err + l, cap - l, " (gave up after %d attempts)", fails);
            break;
        }
        long wait = a == ATT_AGAIN ? 0 : o->backoff_ms << (fails - 1 < 10 ? fails - 1 : 10);
        if (wait > 30000) wait = 30000;
        if (!o->quiet) {
            if (x.tty) fputc('\n', stderr);
            fprintf(stderr, "%s: %s; retry %d of %d in %.1f s\n", o->label, err, fails, o->retries, wait / 1000.0);
        }
        if (!nap(wait)) {
            rc = FETCH_INTERRUPTED;
            snprintf(err, cap, "interrupted; the partial download is kept in %s: the same pull resumes it", o->part);
            break;
        }
    }
    if (rc != FETCH_OK && x.tty && !o->quiet) fputc('\n', stderr);
    fsync(x.fd);
    close(x.fd);
    EVP_MD_CTX_free(x.md);
    if (rc != FETCH_OK && x.have == 0) { /* nothing worth keeping */
        unlink(o->part);
        unlink(o->state);
    }
    return rc;
}
