/* fetch.h -- resumable, verified HTTP(S) download of one file into a .part file (libcurl + OpenSSL
 * SHA-256). Used by `pocketbrain pull`; the only place the CLI talks to a network. Never renames the
 * result into place: the caller checks it and does that. */
#ifndef PB_FETCH_H
#define PB_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fetch_opts {
    const char *url;
    const char *token;      /* sent as "Authorization: Bearer ..." (curl drops it on a redirect to another host) */
    bool allow_http;        /* plain http:// at all: the url is a loopback mirror, or --insecure */
    bool insecure;          /* --insecure: plain http:// also to other hosts (else a redirect there is refused) */
    bool hub;               /* a Hugging Face URL: 401/403 explains gated models */
    const char *part;       /* the partial file, resumed when its state file matches this url */
    const char *state;      /* JSON beside the part: url, ETag, Last-Modified, size, hub sha256 */
    const char *pinned_sha; /* expected sha256 (lower-case hex) from the catalog or --sha256, or NULL */
    const char *pinned_by;  /* "catalog" or "--sha256" */
    int retries;            /* attempts after the first one that failed (timeouts, lost connections, 5xx) */
    long backoff_ms;        /* wait before the first retry; doubles each time, at most 30 s */
    long stall_s;           /* an attempt that receives nothing for this long is abandoned (and retried) */
    bool quiet;             /* no progress and no retry notes */
    const char *label;      /* name shown on the progress line */
} fetch_opts;

typedef struct fetch_result {
    char sha256[65];      /* of the complete file */
    uint64_t size;        /* bytes */
    char verified_by[32]; /* "catalog", "--sha256", "hub (X-Linked-Etag)" or "" when nothing was published */
} fetch_result;

enum { FETCH_OK = 0, FETCH_FAIL = 1, FETCH_INTERRUPTED = 130 };

/* Downloads url into o->part (resuming it when o->state says it is the same file, restarting cleanly when
 * the server's ETag / Last-Modified / digest changed), checks free space before the first byte, hashes
 * while writing and compares with the pinned or hub-published sha256. FETCH_OK: the part is complete
 * and verified (or no digest was known: verified_by ""). FETCH_FAIL: err says why; a part that cannot
 * become the right file (digest mismatch, not enough space for an empty part) is removed, one that can
 * be resumed is kept. FETCH_INTERRUPTED: fetch_interrupt() was called; the part and its state are kept. */
int fetch_file(const fetch_opts *o, fetch_result *r, char *err, size_t cap);

/* True when url's host is a loopback address (127.0.0.0/8, ::1, localhost), parsed past any user@ part:
 * "http://127.0.0.1.example.org/" and "http://127.0.0.1@example.org/" are not loopback. */
bool fetch_is_loopback(const char *url);

/* Async-signal-safe: makes a running fetch_file stop and return FETCH_INTERRUPTED. */
void fetch_interrupt(void);

#endif
