/* pb_test.h -- tiny test harness: CHECK prints "ok - ..." / "not ok - ..." lines that tests/run.sh counts. */
#ifndef PB_TEST_H
#define PB_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int pbt_failures;

static void pbt_report(int ok, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void pbt_report(int ok, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok" : "not ok");
    vprintf(fmt, ap);
    if (!ok) printf("  (%s:%d)", file, line);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (!ok) pbt_failures++;
}

/* CHECK(cond, "what was checked %d", args): one counted check. */
/* The condition is evaluated before the message's arguments (a statement, not one call: the order in which a call's
 * arguments are evaluated is unspecified, and a message naming a value the condition computes printed garbage). */
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        const int pbt_ok_ = (cond) ? 1 : 0;                                                                            \
        pbt_report(pbt_ok_, __FILE__, __LINE__, __VA_ARGS__);                                                          \
    } while (0)
/* NOTE(...): a diagnostic line (not counted). */
#define NOTE(...) (printf("# " __VA_ARGS__), printf("\n"), fflush(stdout))

/* Path of a file under ../shared/fixtures/peer (or $PB_SHARED/fixtures/peer). Returns NULL when it
 * is missing outside CI (the caller skips with a NOTE); under CI (CI=true) a missing fixture is a
 * failed check, never a silent skip. */
static inline const char *pbt_fixture(const char *rel) {
    static char buf[8][1024];
    static int slot;
    const char *shared = getenv("PB_SHARED");
    char *p = buf[slot++ & 7];
    snprintf(p, 1024, "%s/fixtures/peer/%s", shared ? shared : "../shared", rel);
    if (access(p, R_OK) == 0) return p;
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0) {
        pbt_report(0, __FILE__, __LINE__, "fixture %s is missing under CI", p);
    } else {
        NOTE("skip: fixture %s not found", p);
    }
    return NULL;
}

/* CPU time of the calling thread in ms. Speed targets for single-threaded work are checked on it, not on
 * the wall clock: on a loaded machine the wall clock also counts the time other processes ran. */
static inline double pbt_thread_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Ends main(): exit status 1 when any check failed. */
#define TEST_DONE() return pbt_failures ? 1 : 0

#endif
