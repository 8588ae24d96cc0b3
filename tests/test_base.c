/* test_base.c -- base room: errors, atomic files, thread pool, CPU detection. */
#include "base/base.h"
#include "pb_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>

static atomic_int hits[8];
static void count_fn(void *ctx, int ith, int nth) {
    (void)ctx;
    (void)nth;
    atomic_fetch_add(&hits[ith], 1);
}

// --- thread pool under stress ---------------------------------------------------------------------

/* A job over real data: part ith of nth sums its pb_split range of xs into sums[ith] and counts itself. */
enum { SUM_N = 10007, MAX_TH = 16 };
typedef struct {
    const int64_t *xs;
    int64_t sums[MAX_TH];
    atomic_int runs[MAX_TH];   /* times each part ran in this job */
    atomic_int active[MAX_TH]; /* a part running twice at once would show here */
    atomic_int overlap;
    atomic_int caller_parts; /* parts run on the thread that called pb_pool_run */
    const int *caller_mark;
    int sleep_us; /* parts other than 0 sleep this long (a slow or descheduled worker) */
} sum_job;

static _Thread_local int thread_mark;

static void sleep_us(int us) {
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void sum_fn(void *ctx, int ith, int nth) {
    sum_job *j = ctx;
    if (atomic_fetch_add(&j->active[ith], 1) != 0) atomic_fetch_add(&j->overlap, 1);
    if (&thread_mark == j->caller_mark) atomic_fetch_add(&j->caller_parts, 1);
    if (ith == 0 && &thread_mark != j->caller_mark) atomic_fetch_add(&j->overlap, 1000); /* contract: ith 0 */
    if (ith != 0 && j->sleep_us) sleep_us(j->sleep_us);
    int64_t lo, hi, s = 0;
    pb_split(SUM_N, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) s += j->xs[i];
    j->sums[ith] = s;
    atomic_fetch_add(&j->runs[ith], 1);
    atomic_fetch_sub(&j->active[ith], 1);
}

/* Runs `jobs` jobs of n parts (n = 0: cycle n through 1..size); returns how many came out wrong. */
static int run_sums(pb_pool *pool, const int64_t *xs, int64_t want, int jobs, int n, int sleep, int pause_us,
                    int *caller_parts) {
    int bad = 0;
    for (int it = 0; it < jobs; it++) {
        sum_job j = {.xs = xs, .caller_mark = &thread_mark, .sleep_us = sleep};
        int nth = n ? n : 1 + it % pb_pool_size(pool);
        pb_pool_run_n(pool, nth, sum_fn, &j);
        int64_t total = 0;
        int ok = atomic_load(&j.overlap) == 0;
        for (int i = 0; i < MAX_TH; i++) {
            ok &= atomic_load(&j.runs[i]) == (i < nth ? 1 : 0);
            if (i < nth) total += j.sums[i];
        }
        bad += !ok || total != want;
        if (caller_parts) *caller_parts += atomic_load(&j.caller_parts);
        if (pause_us) sleep_us(pause_us);
    }
    return bad;
}

static void test_pool_stress(void) {
    static int64_t xs[SUM_N];
    int64_t want = 0;
    for (int i = 0; i < SUM_N; i++) want += xs[i] = (int64_t)i * 7919 % 1000003 - 500000;

    /* more threads than cores: 16 threads on a 2-core machine, every part count from 1 to 16 */
    pb_pool *pool;
    CHECK(pb_pool_new(MAX_TH, &pool) == PB_OK, "pool of %d threads", MAX_TH);
    double t0 = pb_time_ms();
    int bad = run_sums(pool, xs, want, 4000, 0, 0, 0, NULL);
    CHECK(bad == 0,
          "16 threads (more than cores): 4000 jobs, each part exactly once, none twice at once, "
          "sums exact, ith 0 on the caller (%d bad)",
          bad);
    NOTE("16-thread pool: %.1f us per job", (pb_time_ms() - t0) * 1000.0 / 4000);
    /* slow workers: the caller must wait (spin, then sleep) for parts still running */
    bad = run_sums(pool, xs, want, 40, 0, 300, 0, NULL);
    CHECK(bad == 0, "slow parts (300 us sleeps in workers' parts): 40 jobs right (%d bad)", bad);
    /* gaps between jobs longer than any spin: workers fall asleep and must be woken */
    bad = run_sums(pool, xs, want, 40, 0, 0, 2000, NULL);
    CHECK(bad == 0, "2 ms gaps between jobs (workers sleep, get woken): 40 jobs right (%d bad)", bad);
    pb_pool_set_limit(pool, 3);
    CHECK(pb_pool_limit(pool) == 3, "limit 3");
    sum_job j = {.xs = xs, .caller_mark = &thread_mark};
    pb_pool_run(pool, sum_fn, &j);
    CHECK(atomic_load(&j.runs[2]) == 1 && atomic_load(&j.runs[3]) == 0, "pb_pool_run honours the limit");
    pb_pool_free(pool);

    /* repeated runs on a 2-thread pool (the decode shape), and pools made and freed while workers spin */
    CHECK(pb_pool_new(2, &pool) == PB_OK, "pool of 2 threads");
    bad = run_sums(pool, xs, want, 20000, 2, 0, 0, NULL);
    CHECK(bad == 0, "2 threads: 20000 back-to-back jobs right (%d bad)", bad);
    pb_pool_free(pool);
    int made = 0;
    for (int i = 0; i < 50; i++) {
        if (pb_pool_new(1 + i % 5, &pool) != PB_OK) break;
        if (i % 2 == 0) bad += run_sums(pool, xs, want, 3, 0, 0, 0, NULL);
        pb_pool_free(pool);
        made++;
    }
    CHECK(made == 50 && bad == 0, "50 pools made, used and freed (%d made, %d bad jobs)", made, bad);

#if defined(__linux__)
    /* descheduled workers: pin the process to one CPU, so a worker can only run when the caller is
     * preempted or asleep. A pool that waited for its workers would lose a time slice (milliseconds) per
     * job; this one lets the caller run the parts nobody picked up. */
    cpu_set_t old_set, one;
    if (sched_getaffinity(0, sizeof old_set, &old_set) == 0) {
        int cpu = 0;
        while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &old_set)) cpu++;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one) == 0) {
            CHECK(pb_pool_new(4, &pool) == PB_OK, "pool of 4 threads pinned to one CPU");
            int caller_parts = 0;
            t0 = pb_time_ms();
            bad = run_sums(pool, xs, want, 2000, 4, 0, 0, &caller_parts);
            double ms = pb_time_ms() - t0;
            CHECK(bad == 0, "4 threads on 1 CPU: 2000 jobs right (%d bad)", bad);
            t0 = pb_time_ms(); /* the same parts run in a plain loop: what the CPU needs for the work */
            for (int it = 0; it < 2000; it++) {
                sum_job sj = {.xs = xs, .caller_mark = &thread_mark};
                for (int i = 0; i < 4; i++) sum_fn(&sj, i, 4);
            }
            double plain_ms = pb_time_ms() - t0;
            NOTE("4 threads on 1 CPU: %.1f us per job (plain loop %.1f); the caller ran %.0f%% of the parts",
                 ms * 1000.0 / 2000, plain_ms * 1000.0 / 2000, 100.0 * caller_parts / (2000.0 * 4));
            /* waiting out a 1-4 ms time slice per job would take seconds; both runs share the machine's load */
            CHECK(ms < 20 * plain_ms + 1000,
                  "4 threads on 1 CPU: 2000 jobs take %.0f ms (< 20 x %.0f ms of the plain loop + 1 s: the pool "
                  "does not wait out time slices for descheduled workers)",
                  ms, plain_ms);
            pb_pool_free(pool);
            sched_setaffinity(0, sizeof old_set, &old_set);
        } else {
            NOTE("skip: cannot pin to one CPU");
        }
    }
#else
    NOTE("skip: one-CPU pinning test needs Linux");
#endif
}

// --- atomic output: what is at the target, planted temp names --------------------------------------

static int file_is(const char *path, const char *want) {
    char buf[64] = {0};
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    return n >= 0 && strcmp(buf, want) == 0;
}

static int leftover_temps(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

static pb_status write_text(const char *path, const char *text) {
    pb_atomic_file f;
    pb_status s = pb_atomic_open(path, &f);
    if (s) return s;
    if ((s = pb_atomic_write(&f, text, strlen(text)))) {
        pb_atomic_abort(&f);
        return s;
    }
    return pb_atomic_commit(&f);
}

static void test_atomic_targets(void) {
    char dir[] = "/tmp/pb-atomic-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    char victim[128], out[128], planted[160], fifo[128], link[128], sub[128];
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(out, sizeof out, "%s/out.bin", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CHECK(write_text(victim, "precious") == PB_OK, "atomic write of a new file");

    /* A symlink planted at the temp name an old writer used ("<path>.tmp.<pid>") must not redirect the write. */
    snprintf(planted, sizeof planted, "%s.tmp.%ld", out, (long)getpid());
    CHECK(symlink(victim, planted) == 0, "plant a symlink at the predictable temp name");
    CHECK(write_text(out, "new") == PB_OK && file_is(out, "new"), "write beside a planted temp-name symlink");
    CHECK(file_is(victim, "precious"), "the planted link's target is untouched (temp file not followed)");
    unlink(planted);

    /* Two writers of one path at once get different temp files (the second never truncates the first's). */
    pb_atomic_file a, b;
    CHECK(pb_atomic_open(out, &a) == PB_OK && pb_atomic_open(out, &b) == PB_OK, "two writers open one target");
    CHECK(a.tmp_path && b.tmp_path && strcmp(a.tmp_path, b.tmp_path) != 0, "distinct temp names: %s %s",
          a.tmp_path ? a.tmp_path : "-", b.tmp_path ? b.tmp_path : "-");
    pb_atomic_write(&a, "first", 5);
    pb_atomic_abort(&b);
    CHECK(pb_atomic_commit(&a) == PB_OK && file_is(out, "first"),
          "the first writer's bytes survive the second's abort");

    /* A replaced file keeps its permission bits. */
    chmod(out, 0600);
    struct stat st;
    CHECK(write_text(out, "again") == PB_OK && stat(out, &st) == 0 && (st.st_mode & 0777) == 0600,
          "a replaced file keeps mode 0600 (got %o)", (unsigned)(st.st_mode & 0777));

    /* Targets that are not regular files are refused, named, and left as they are. */
    CHECK(symlink(victim, link) == 0, "make a symlink target");
    pb_status s = write_text(link, "through");
    CHECK(s == PB_ERR_IO && strstr(pb_last_error(), "symbolic link"), "symlink target refused: %s", pb_last_error());
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode) && file_is(victim, "precious"),
          "the link is still a link and its target unchanged");
    CHECK(mkfifo(fifo, 0600) == 0, "make a FIFO target");
    s = write_text(fifo, "x");
    CHECK(s == PB_ERR_IO && strstr(pb_last_error(), "FIFO"), "FIFO target refused: %s", pb_last_error());
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is still a FIFO");
    CHECK(mkdir(sub, 0700) == 0 && write_text(sub, "x") == PB_ERR_IO && strstr(pb_last_error(), "directory"),
          "directory target refused: %s", pb_last_error());
    CHECK(pb_output_check("/dev/null") == PB_ERR_IO && strstr(pb_last_error(), "device"),
          "a device target is refused before anything is created: %s", pb_last_error());
    CHECK(leftover_temps(dir) == 0, "no temp file left in the directory");
    unlink(victim);
    unlink(out);
    unlink(link);
    unlink(fifo);
    rmdir(sub);
    rmdir(dir);
}

/* A FIFO named where a file is read (a model, a session file) is refused at once: open() without O_NONBLOCK
 * blocked until a writer came (info, run -m, chat --session hung for ever). */
static void fifo_hung(int sig) {
    (void)sig;
    static const char msg[] = "not ok - pb_map_open on a FIFO still blocked after 5 s\n";
    (void)!write(1, msg, sizeof msg - 1);
    _exit(1);
}

static void test_map_special(void) {
    char dir[] = "/tmp/pb-map-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    char fifo[128];
    snprintf(fifo, sizeof fifo, "%s/model.gguf", dir);
    CHECK(mkfifo(fifo, 0600) == 0, "make a FIFO where a model is read");
    signal(SIGALRM, fifo_hung);
    alarm(5);
    pb_map m;
    pb_status s = pb_map_open(fifo, true, &m);
    CHECK(s == PB_ERR_IO && strstr(pb_last_error(), "not a regular file"), "pb_map_open refuses a FIFO at once: %s",
          pb_last_error());
    s = pb_map_open_huge(fifo, &m);
    CHECK(s == PB_ERR_IO && strstr(pb_last_error(), "not a regular file"),
          "pb_map_open_huge refuses a FIFO at once: %s", pb_last_error());
    pb_file_drop_cache(fifo); /* must not block either */
    alarm(0);
    signal(SIGALRM, SIG_DFL);
    CHECK(pb_map_open("/dev/null", true, &m) == PB_ERR_IO && strstr(pb_last_error(), "not a regular file"),
          "a device is refused: %s", pb_last_error());
    unlink(fifo);
    rmdir(dir);
}

int main(void) {
    pb_status s = pb_error(PB_ERR_FORMAT, "gguf: field %s at offset %d", "x", 12);
    CHECK(s == PB_ERR_FORMAT && strcmp(pb_last_error(), "gguf: field x at offset 12") == 0, "pb_error sets text");
    CHECK(strcmp(pb_status_name(PB_ERR_IO), "PB_ERR_IO") == 0, "status names");
    /* a prefix the message already starts with is not added again ("session: session: ...") */
    pb_error(PB_ERR_INVALID_ARG, "session: n_ctx 9 is too small");
    pb_error_prefix(PB_ERR_INVALID_ARG, "session: ");
    CHECK(strcmp(pb_last_error(), "session: n_ctx 9 is too small") == 0, "pb_error_prefix keeps one copy: %s",
          pb_last_error());
    pb_error_prefix(PB_ERR_INVALID_ARG, "model.gguf: ");
    pb_error_prefix(PB_ERR_INVALID_ARG, "model.gguf: ");
    CHECK(strcmp(pb_last_error(), "model.gguf: session: n_ctx 9 is too small") == 0,
          "pb_error_prefix prefixes once: %s", pb_last_error());

    const char *path = "build-test-atomic.bin";
    pb_atomic_file f;
    CHECK(pb_atomic_open(path, &f) == PB_OK, "atomic open");
    pb_atomic_write(&f, "hello", 5);
    struct stat st;
    CHECK(stat(path, &st) != 0, "target absent before commit");
    pb_atomic_abort(&f);
    CHECK(stat(path, &st) != 0, "abort leaves no file");
    CHECK(pb_atomic_open(path, &f) == PB_OK && pb_atomic_write(&f, "hello", 5) == PB_OK &&
              pb_atomic_commit(&f) == PB_OK,
          "atomic commit");
    CHECK(stat(path, &st) == 0 && st.st_size == 5, "committed file has the bytes");
    unlink(path);
    CHECK(pb_atomic_open("/nonexistent-dir/x", &f) == PB_ERR_IO, "atomic open in missing dir fails cleanly");
    test_atomic_targets();
    test_map_special();

    pb_pool *pool;
    CHECK(pb_pool_new(4, &pool) == PB_OK, "pool new");
    for (int it = 0; it < 1000; it++) pb_pool_run(pool, count_fn, NULL);
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= hits[i] == 1000;
    CHECK(ok, "pool ran every part of 1000 jobs exactly once");
    pb_pool_run_n(pool, 2, count_fn, NULL);
    CHECK(hits[0] == 1001 && hits[1] == 1001 && hits[2] == 1000, "pool_run_n uses only n threads");
    pb_pool_free(pool);
    pb_pool_free(NULL);
    test_pool_stress();

    CHECK(pb_cpu_physical_cores() >= 1, "physical cores >= 1 (%d)", pb_cpu_physical_cores());
    NOTE("cpu features 0x%x", pb_cpu_features());
    CHECK(pb_mem_available() > 0, "mem available known (%zu MiB)", pb_mem_available() >> 20);
    TEST_DONE();
}
