/* error.c -- status names, thread-local last-error text, asserts, log sink, checked allocation. */
#include "base/base.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *pb_last_error(void) { return last_error; }

void pb_error_clear(void) { last_error[0] = 0; }

uintptr_t pb_thread_tag(void) { return (uintptr_t)&last_error[0]; }

pb_status pb_error(pb_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

pb_status pb_error_prefix(pb_status s, const char *fmt, ...) {
    char prefix[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* a message that already starts with the prefix keeps one copy ("session: session: ..." helps nobody) */
    if (strncmp(last_error, prefix, strlen(prefix)) == 0) return s;
    memcpy(old, last_error, sizeof old);
    size_t n = strlen(prefix);
    if (n >= sizeof last_error) n = sizeof last_error - 1;
    memcpy(last_error, prefix, n);
    size_t m = strlen(old);
    if (m > sizeof last_error - 1 - n) m = sizeof last_error - 1 - n;
    memcpy(last_error + n, old, m);
    last_error[n + m] = 0;
    return s;
}

const char *pb_status_name(pb_status s) {
    switch (s) {
    case PB_OK: return "PB_OK";
    case PB_ERR_INVALID_ARG: return "PB_ERR_INVALID_ARG";
    case PB_ERR_IO: return "PB_ERR_IO";
    case PB_ERR_FORMAT: return "PB_ERR_FORMAT";
    case PB_ERR_UNSUPPORTED: return "PB_ERR_UNSUPPORTED";
    case PB_ERR_NOMEM: return "PB_ERR_NOMEM";
    case PB_ERR_NOT_FOUND: return "PB_ERR_NOT_FOUND";
    case PB_ERR_CONTEXT_FULL: return "PB_ERR_CONTEXT_FULL";
    case PB_ERR_CANCELLED: return "PB_ERR_CANCELLED";
    case PB_ERR_MISMATCH: return "PB_ERR_MISMATCH";
    case PB_ERR_MEMORY_LIMIT: return "PB_ERR_MEMORY_LIMIT";
    case PB_ERR_INTERNAL: return "PB_ERR_INTERNAL";
    }
    return "PB_ERR_UNKNOWN";
}

const char *pb_version(void) { return PB_VERSION_STRING; }
int pb_abi_version(void) { return PB_ABI_VERSION; }

void pb_assert_fail(const char *expr, const char *file, int line) {
    /* A bug, not an input error: report on stderr and abort (the only place the library writes). */
    fprintf(stderr, "pocketbrain: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

/* The sink is a pair read by whichever thread logs (a pb_model_close or pb_batch_free on an app's worker thread) while
 * the app may set it on another: both are read and written under a spinlock (held for two stores or loads, never
 * while the sink runs, so a sink may call pb_set_log itself). */
static pb_log_fn log_fn;
static void *log_user;
static atomic_flag log_lock = ATOMIC_FLAG_INIT;

static void log_acquire(void) {
    while (atomic_flag_test_and_set_explicit(&log_lock, memory_order_acquire)) {
    }
}
static void log_release(void) { atomic_flag_clear_explicit(&log_lock, memory_order_release); }

void pb_set_log(pb_log_fn fn, void *user) {
    log_acquire();
    log_fn = fn;
    log_user = user;
    log_release();
}

void pb_log(int level, const char *fmt, ...) {
    log_acquire();
    pb_log_fn fn = log_fn;
    void *user = log_user;
    log_release();
    if (!fn) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fn(level, msg, user);
}

void *pb_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) pb_error(PB_ERR_NOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

void *pb_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) pb_error(PB_ERR_NOMEM, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *pb_aligned_alloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? PB_PAD(n, 64) : 64) != 0) {
        pb_error(PB_ERR_NOMEM, "out of memory allocating %zu bytes", n);
        return NULL;
    }
    return p;
}

void pb_aligned_free(void *p) { free(p); }

char *pb_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = pb_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
