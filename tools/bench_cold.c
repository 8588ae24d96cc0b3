/* bench_cold.c -- `pocketbrain bench --cold`: time from process start to the first token in a fresh process
 * (exec of this binary), with the model file's pages evicted from the page cache first where the OS lets us
 * (posix_fadvise DONTNEED; mincore says how much stayed resident, and the report says so). */
#include "bench_cold.h"
#include "base/base.h"
#include "cli_common.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define COLD_PROMPT 24 /* tokens: the prompt of the measurement */

/* Evicts path's pages from the page cache; returns the fraction still resident afterwards (0..1), or -1
 * when it cannot be told. Only clean pages no other process maps can go: the figure says what happened. */
static double evict(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK); /* a FIFO must not block: fstat below finds no size */
    if (fd < 0) return -1;
    struct stat st;
    double frac = -1;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        size_t len = (size_t)st.st_size, page = (size_t)sysconf(_SC_PAGESIZE), n = (len + page - 1) / page;
        void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        unsigned char *vec = malloc(n);
        if (p != MAP_FAILED && vec && mincore(p, len, vec) == 0) {
            size_t in = 0;
            for (size_t i = 0; i < n; i++) in += vec[i] & 1;
            frac = (double)in / (double)n;
        }
        free(vec);
        if (p != MAP_FAILED) munmap(p, len);
    }
    close(fd);
    return frac;
}

/* Evicts every regular file of dir (the packed-weights cache) from the page cache. */
static void evict_dir(const char *dir) {
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        (void)evict(p);
    }
    closedir(d);
}

int bench_cold_child(const char *path, int threads, int out_fd, const char *cache_dir) {
    double t0 = pb_time_ms();
    pb_model *m;
    pb_model_params mp = pb_model_default_params();
    mp.n_threads = threads;
    mp.pack_cache_dir = cache_dir;
    pb_status st = pb_model_open(path, &mp, &m);
    if (st != PB_OK) return cli_fail("bench", st, "cannot open model");
    pb_session_params sp = pb_session_default_params();
    sp.n_threads = threads;
    sp.n_ctx = 0; /* the default context, as run, chat and serve use: its K/V cache is part of cold start */
    pb_session *s;
    if ((st = pb_session_new(m, &sp, &s)) != PB_OK) {
        pb_model_close(m);
        return cli_fail("bench", st, "cannot create session");
    }
    double t_open = pb_time_ms() - t0;
    pb_model_info mi;
    int cache_state = pb_model_get_info(m, &mi) == PB_OK ? mi.pack_cache : 0;
    const pb_vocab *v = pb_model_vocab(m);
    int32_t ids[COLD_PROMPT], n_vocab = pb_vocab_size(v);
    uint64_t x = 1234;
    for (int i = 0; i < COLD_PROMPT; i++) { /* random ids as the other bench tests (splitmix-style steps) */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)n_vocab);
    }
    if (pb_vocab_bos(v) >= 0) ids[0] = pb_vocab_bos(v);
    pb_gen_params gp = pb_gen_default_params();
    gp.sampler.temperature = 0;
    gp.max_tokens = 1;
    gp.stop_at_eos = false;
    pb_gen_stats gs;
    st = pb_session_generate(s, ids, COLD_PROMPT, &gp, NULL, NULL, &gs);
    double t_first = pb_time_ms() - t0;
    pb_session_free(s);
    pb_model_close(m);
    if (st != PB_OK) return cli_fail("bench", st, "first token failed");
    char line[128];
    int n = snprintf(line, sizeof line, "%.3f %.3f %d\n", t_open, t_first - t_open, cache_state);
    return write(out_fd, line, (size_t)n) == n ? 0 : 1;
}

/* One fresh process: exec this binary as `bench --cold-child`; wall time from fork to the child's report. */
static int one_run(const char *path, int threads, const char *cache_dir, double *wall, double *open_ms,
                   double *first_ms, int *cache_state) {
    int fd[2];
    if (pipe(fd) != 0) return cli_fail("bench", PB_ERR_IO, "pipe");
    double t0 = pb_time_ms();
    pid_t pid = fork();
    if (pid < 0) return cli_fail("bench", PB_ERR_IO, "fork");
    if (pid == 0) {
        close(fd[0]);
        char tb[16], fb[16];
        snprintf(tb, sizeof tb, "%d", threads);
        snprintf(fb, sizeof fb, "%d", fd[1]);
        execl("/proc/self/exe", "pocketbrain", "bench", "--cold-child", path, tb, fb, cache_dir ? cache_dir : "-",
              (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[128];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fd[0], buf + got, sizeof buf - 1 - got)) != 0) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        got += (size_t)r;
        if (memchr(buf, '\n', got)) break;
    }
    *wall = pb_time_ms() - t0;
    buf[got] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (sscanf(buf, "%lf %lf %d", open_ms, first_ms, cache_state) != 3 || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        cli_err("bench", "--cold: the child process failed (status %d)", status);
        return 1;
    }
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *cache_word(int state) {
    switch (state) {
    case PB_PACK_CACHE_HIT: return "mapped from the pack cache";
    case PB_PACK_CACHE_WRITTEN: return "repacked, cache written";
    case PB_PACK_CACHE_FAILED: return "repacked (cache not writable)";
    }
    return "repacked";
}

int bench_cold(const char *path, const int *threads, int n_threads, int reps, bool json, const char *cache_dir) {
    enum { MAX_REPS = 100 };
    if (cache_dir) { /* untimed: the cache file exists before the timed runs (the first open writes it) */
        double w, o, f;
        int cs;
        int rc = one_run(path, threads[0], cache_dir, &w, &o, &f, &cs);
        if (rc) return rc;
    }
    if (!json) {
        printf("| threads | cold start ms: process start -> first token (%d-token prompt), median | min | max | "
               "open ms | prefill + first token ms | weights | model file resident before start |\n",
               COLD_PROMPT);
        printf("| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n");
    }
    cJSON *root = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(root, "runs");
    cJSON_AddStringToObject(root, "model", path);
    cJSON_AddNumberToObject(root, "prompt_tokens", COLD_PROMPT);
    cJSON_AddNumberToObject(root, "reps", reps);
    for (int k = 0; k < n_threads; k++) {
        double wall[MAX_REPS], op[MAX_REPS], fi[MAX_REPS], res_max = 0;
        bool unknown = false;
        int cs = 0;
        for (int r = 0; r < reps && r < MAX_REPS; r++) {
            double f = evict(path);
            evict_dir(cache_dir);
            if (f < 0) unknown = true;
            if (f > res_max) res_max = f;
            int rc = one_run(path, threads[k], cache_dir, &wall[r], &op[r], &fi[r], &cs);
            if (rc) {
                cJSON_Delete(root);
                return rc;
            }
        }
        int n = reps < MAX_REPS ? reps : MAX_REPS;
        double w_min = wall[0], w_max = wall[0];
        for (int r = 1; r < n; r++) w_min = PB_MIN(w_min, wall[r]), w_max = PB_MAX(w_max, wall[r]);
        double w = median(wall, n), o = median(op, n), f = median(fi, n);
        char cache[96];
        if (unknown)
            snprintf(cache, sizeof cache, "unknown (could not evict or measure)");
        else
            snprintf(cache, sizeof cache, "%.0f%% (evicted with posix_fadvise DONTNEED)", 100.0 * res_max);
        cJSON *o_ = cJSON_CreateObject(), *c = cJSON_AddObjectToObject(o_, "cold_ms");
        cJSON_AddNumberToObject(o_, "threads", threads[k]);
        cJSON_AddNumberToObject(c, "median", w);
        cJSON_AddNumberToObject(c, "min", w_min);
        cJSON_AddNumberToObject(c, "max", w_max);
        cJSON_AddNumberToObject(o_, "open_ms", o);
        cJSON_AddNumberToObject(o_, "first_token_ms", f);
        cJSON_AddNumberToObject(o_, "resident_before", unknown ? -1.0 : res_max);
        cJSON_AddStringToObject(o_, "weights", cache_word(cs));
        cJSON_AddItemToArray(runs, o_);
        if (!json)
            printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %s |\n", threads[k], w, w_min, w_max, o, f,
                   cache_word(cs), cache);
    }
    if (json) {
        cli_json_print(root, true);
        root = NULL;
    } else
        printf("\n%d fresh processes per thread count; the model file's pages%s were evicted before each (a "
               "figure above 0%% means they could not all be)\n",
               reps, cache_dir ? " and the pack cache's" : "");
    cJSON_Delete(root);
    return 0;
}
