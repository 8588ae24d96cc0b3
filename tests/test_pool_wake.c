/* test_pool_wake.c -- the thread pool's sleep/wake hand-offs never lose a wake-up for good: thousands of jobs
 * whose worker parts end around the moment the caller gives up spinning and goes to sleep (and gaps between
 * jobs long enough for workers to sleep), watched by a watchdog that fails the test when no job finishes for
 * several seconds. Runs natively and under qemu-aarch64 (scripts/cross_test.sh), where a store-release
 * followed by a load-acquire was not kept in order and a lost wake-up once hung CI. */
#include "base/base.h"
#include "pb_test.h"

#include <pthread.h>
#include <stdatomic.h>

enum { STALL_MS = 4000, RUN_MS = 2500 };

static atomic_llong jobs_done;
static atomic_int watch_stop;

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

typedef struct {
    int64_t part_ns[4]; /* how long each part busy-waits */
    atomic_int ran[4];
} job;

static void busy(int64_t ns) {
    uint64_t t0 = pb_time_ns();
    while ((int64_t)(pb_time_ns() - t0) < ns) {
    }
}

static void part_fn(void *ctx, int ith, int nth) {
    job *j = ctx;
    (void)nth;
    busy(j->part_ns[ith]);
    atomic_fetch_add(&j->ran[ith], 1);
}

static void *watchdog(void *arg) {
    (void)arg;
    long long last = -1;
    uint64_t since = pb_time_ns();
    while (!atomic_load(&watch_stop)) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        long long now_done = atomic_load(&jobs_done);
        if (now_done != last)
            last = now_done, since = pb_time_ns();
        else if (pb_time_ns() - since > (uint64_t)STALL_MS * 1000000u) {
            printf("not ok - a pool job stalled for %d ms after %lld jobs (a lost wake-up)\n", STALL_MS, now_done);
            fflush(stdout);
            _exit(1);
        }
    }
    return NULL;
}

/* Jobs on a pool of n threads for about RUN_MS: each worker part lasts 0..4 ms (around the caller's 2 ms spin
 * budget, which halves on every time-out, so the caller often sleeps just as a part ends); every fourth job is
 * followed by a pause of 0..3 ms, so workers also go to sleep and are woken. Returns how many jobs ran; *bad
 * counts jobs whose parts did not each run exactly once. */
static long long run_jobs(int n, int *bad) {
    pb_pool *pool;
    if (pb_pool_new(n, &pool) != PB_OK) return -1;
    uint64_t t0 = pb_time_ns();
    long long count = 0;
    while (pb_time_ns() - t0 < (uint64_t)RUN_MS * 1000000u) {
        job j = {0};
        j.part_ns[0] = rnd() % 5000;
        for (int i = 1; i < n; i++) j.part_ns[i] = count % 64 == 0 ? rnd() % 4000000 : rnd() % 40000;
        pb_pool_run_n(pool, n, part_fn, &j);
        for (int i = 0; i < n; i++) *bad += atomic_load(&j.ran[i]) != 1;
        count++;
        atomic_fetch_add(&jobs_done, 1);
        if (count % 256 == 0) nanosleep(&(struct timespec){0, (long)(rnd() % 3000000)}, NULL);
    }
    pb_pool_free(pool);
    return count;
}

int main(void) {
    pthread_t wd;
    CHECK(pthread_create(&wd, NULL, watchdog, NULL) == 0, "watchdog thread started");
    for (int n = 2; n <= 3; n++) {
        int bad = 0;
        long long count = run_jobs(n, &bad);
        CHECK(count > 0, "%d-thread pool ran %lld jobs with no stall of %d ms", n, count, STALL_MS);
        CHECK(bad == 0, "%d-thread pool: every part of every job ran exactly once (%d wrong)", n, bad);
    }
    atomic_store(&watch_stop, 1);
    pthread_join(wd, NULL);
    TEST_DONE();
}
