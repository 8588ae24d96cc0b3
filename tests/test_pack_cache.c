/* test_pack_cache.c -- the packed-weights cache through the public API: the first open writes it, the next maps it
 * without repacking, logits are bit-identical with and without it, a corrupt / truncated / stale / foreign file
 * is detected and rebuilt, an unwritable directory still opens the model, concurrent opens agree, and a background
 * write (pack_cache_background) lets the model answer first. */
#include "pb_test.h"

#include "pocketbrain.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

enum { NTOK = 16 };

static char dir[256], model[300], cache[300];
static int32_t toks[NTOK];
static int n_vocab;

static bool copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    bool ok = a && b;
    char buf[1 << 16];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b && fclose(b) != 0) ok = false;
    return ok;
}

/* Files in the cache directory: *.pbpack count (its path in `cache`), and anything else (temp files). */
static void list_cache(int *n_pack, int *n_other) {
    *n_pack = *n_other = 0;
    DIR *d = opendir(cache);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        size_t l = strlen(e->d_name);
        if (l > 7 && strcmp(e->d_name + l - 7, ".pbpack") == 0)
            ++*n_pack;
        else
            ++*n_other;
    }
    closedir(d);
}

static bool pack_file(char *out, size_t cap) {
    DIR *d = opendir(cache);
    struct dirent *e;
    bool found = false;
    while (d && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l > 7 && strcmp(e->d_name + l - 7, ".pbpack") == 0) {
            snprintf(out, cap, "%s/%s", cache, e->d_name);
            found = true;
        }
    }
    if (d) closedir(d);
    return found;
}

/* The tests' model parameters: 2 threads, the CPU, cache directory cdir (NULL: none). */
static pb_model_params model_params(const char *cdir) {
    pb_model_params mp = pb_model_default_params();
    mp.n_threads = 2;
    mp.gpu = 0;
    mp.pack_cache_dir = cdir;
    return mp;
}

/* The tests' sessions: 64 positions, 2 threads. */
static pb_session_params session_params(void) {
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 64;
    sp.n_threads = 2;
    return sp;
}

/* Opens the model with cache directory cdir (NULL: none), prefills the tokens; *info and the last logits. */
static bool run(const char *cdir, pb_model_info *info, float *logits) {
    const pb_model_params mp = model_params(cdir);
    pb_model *m = NULL;
    pb_session *s = NULL;
    const pb_session_params sp = session_params();
    bool ok = pb_model_open(model, &mp, &m) == PB_OK && pb_model_get_info(m, info) == PB_OK &&
              pb_session_new(m, &sp, &s) == PB_OK && pb_session_prefill(s, toks, NTOK) == PB_OK;
    if (ok) memcpy(logits, pb_session_logits(s), sizeof(float) * (size_t)info->n_vocab);
    if (!ok) NOTE("run: %s", pb_last_error());
    pb_session_free(s);
    pb_model_close(m);
    return ok;
}

/* Overwrites n bytes at off of the cache file with x (a byte flip when x is NULL). */
static bool poke(long off, const char *x, size_t n) {
    char p[600];
    if (!pack_file(p, sizeof p)) return false;
    int fd = open(p, O_RDWR);
    if (fd < 0) return false;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        unsigned char c;
        ok = pread(fd, &c, 1, off + (long)i) == 1;
        c = x ? (unsigned char)x[i] : (unsigned char)(c ^ 0x5a);
        ok = ok && pwrite(fd, &c, 1, off + (long)i) == 1;
    }
    close(fd);
    return ok;
}

/* One open that must notice the damage (its note names `why`), rebuild, and be used by the open after it. */
static void expect_rebuilt(const char *what, const char *why, const float *ref, float *lg) {
    pb_model_info in;
    bool ok = run(cache, &in, lg);
    CHECK(ok && in.pack_cache == PB_PACK_CACHE_WRITTEN && strstr(in.pack_cache_note, why),
          "%s: detected and rebuilt (state %d, note '%s')", what, in.pack_cache, in.pack_cache_note);
    CHECK(ok && memcmp(lg, ref, sizeof(float) * (size_t)n_vocab) == 0, "%s: logits still identical", what);
    ok = run(cache, &in, lg);
    CHECK(ok && in.pack_cache == PB_PACK_CACHE_HIT, "%s: the rebuilt cache is used by the next open (state %d)", what,
          in.pack_cache);
}

static void *concurrent(void *arg) {
    pb_model_info in;
    float *lg = malloc(sizeof(float) * (size_t)n_vocab);
    bool ok = lg && run(cache, &in, lg);
    *(float **)arg = ok ? lg : (free(lg), NULL);
    return NULL;
}

/* fraction of the file's pages in the page cache (mincore over a read-only mapping); -1 when it cannot tell */
static double resident(const char *path) {
    if (!path) return -1;
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
    long pg = sysconf(_SC_PAGESIZE);
    size_t n = ((size_t)st.st_size + (size_t)pg - 1) / (size_t)pg, in = 0;
    unsigned char *v = malloc(n);
    if (v && mincore(p, (size_t)st.st_size, v) == 0)
        for (size_t i = 0; i < n; i++) in += v[i] & 1;
    munmap(p, (size_t)st.st_size);
    double r = v ? (double)in / (double)n : -1;
    free(v);
    return r;
}

int main(void) {
    const char *fx = pbt_fixture("model/gemma2-tiny-v.q4_0.gguf"), *tp = pbt_fixture("model/tokens.bin");
    if (!fx || !tp) TEST_DONE();
    FILE *tf = fopen(tp, "rb");
    bool tok_ok = tf && fread(toks, 4, NTOK, tf) == NTOK;
    if (tf) fclose(tf);
    snprintf(dir, sizeof dir, "/tmp/pb_pack_cache_XXXXXX");
    CHECK(tok_ok && mkdtemp(dir) != NULL, "temp dir and tokens");
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    snprintf(cache, sizeof cache, "%s/cache/sub", dir); /* missing: created at the first open */
    CHECK(copy_file(fx, model), "copy of the model");

    pb_model_info in;
    float *ref = malloc(sizeof(float) * 300000), *lg = malloc(sizeof(float) * 300000);
    bool ok = run(NULL, &in, ref);
    n_vocab = in.n_vocab;
    CHECK(ok && in.pack_cache == PB_PACK_CACHE_OFF && in.pack_cache_note[0] == 0, "no cache dir: cache off");
    CHECK(in.n_repacked > 0, "this CPU repacks %d matrices (the cache only holds repacked ones)", in.n_repacked);
    if (!ok || in.n_repacked == 0) TEST_DONE();

    ok = run(cache, &in, lg);
    int n_pack, n_other;
    list_cache(&n_pack, &n_other);
    CHECK(ok && in.pack_cache == PB_PACK_CACHE_WRITTEN, "first open repacks and writes the cache (state %d, '%s')",
          in.pack_cache, in.pack_cache_note);
    CHECK(n_pack == 1 && n_other == 0, "one cache file, no temp file left (%d, %d)", n_pack, n_other);
    CHECK(ok && memcmp(lg, ref, sizeof(float) * (size_t)n_vocab) == 0, "logits identical, cache written");
    {
        /* the written file's pages were dropped from the page cache, so the next open reads it back in 2 MiB folios
         * (written pages are small folios: a mapping of them got 79% huge pages; not on tmpfs, which keeps them) */
        char pf[600];
        struct statfs sf;
        double res = resident(pack_file(pf, sizeof pf) ? pf : NULL);
        if (pack_file(pf, sizeof pf) && statfs(pf, &sf) == 0 && sf.f_type != 0x01021994)
            CHECK(res >= 0 && res < 0.5, "the written cache file is not left in the page cache (%.0f%% resident)",
                  100 * res);
    }
    int repacked = in.n_repacked;

    ok = run(cache, &in, lg);
    CHECK(ok && in.pack_cache == PB_PACK_CACHE_HIT && strstr(in.pack_cache_note, "mapped"),
          "second open maps the cache, nothing repacked (state %d, '%s')", in.pack_cache, in.pack_cache_note);
    CHECK(in.n_repacked == repacked, "same matrices in the packed layout (%d)", in.n_repacked);
    CHECK(ok && memcmp(lg, ref, sizeof(float) * (size_t)n_vocab) == 0, "logits bit-identical from the cache");

    /* damage of every kind is detected, rebuilt, and the answer never changes */
    char p[600];
    struct stat st;
    CHECK(pack_file(p, sizeof p) && stat(p, &st) == 0, "cache file found");
    CHECK(poke((2 << 20) + 100, NULL, 4), "flip bytes in the first packed matrix (data start at 2 MiB)");
    expect_rebuilt("corrupt data", "corrupt data", ref, lg);
    CHECK(pack_file(p, sizeof p) && stat(p, &st) == 0, "cache file found");
    CHECK(poke((long)st.st_size - 200, NULL, 4), "flip bytes in the last packed matrix");
    expect_rebuilt("corrupt data at the end", "corrupt data", ref, lg);
    CHECK(poke(40, NULL, 1), "flip a header byte");
    expect_rebuilt("corrupt header", "corrupt header", ref, lg);
    CHECK(poke(0, "GGUF", 4), "foreign magic");
    expect_rebuilt("foreign file", "not a pocketbrain cache", ref, lg);
    CHECK(pack_file(p, sizeof p) && truncate(p, st.st_size / 2) == 0, "truncate the cache to half");
    expect_rebuilt("truncated", "truncated", ref, lg);
    CHECK(pack_file(p, sizeof p) && truncate(p, 100) == 0, "truncate the cache inside its header");
    expect_rebuilt("truncated header", "truncated", ref, lg);
    CHECK(pack_file(p, sizeof p) && truncate(p, st.st_size + 4096) == 0, "extend the cache");
    expect_rebuilt("padded", "does not match", ref, lg);
    /* the model file changes: a new modification time, then a new file at the same path (another inode) */
    struct timespec ts[2] = {{0, UTIME_NOW}, {1000000, 0}};
    CHECK(utimensat(AT_FDCWD, model, ts, 0) == 0, "model file touched");
    expect_rebuilt("stale (mtime)", "stale", ref, lg);
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%s.new", model);
    CHECK(copy_file(model, tmp) && rename(tmp, model) == 0, "model file replaced by a copy");
    expect_rebuilt("stale (replaced)", "stale", ref, lg);
    list_cache(&n_pack, &n_other);
    CHECK(n_pack == 1 && n_other == 0, "rebuilds replace the one file (%d cache files, %d others)", n_pack, n_other);

    /* concurrent first opens: both work, agree, and leave one complete cache file */
    CHECK(pack_file(p, sizeof p) && unlink(p) == 0, "cache removed");
    pthread_t th[2];
    float *out[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, concurrent, &out[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        CHECK(out[i] && memcmp(out[i], ref, sizeof(float) * (size_t)n_vocab) == 0, "concurrent open %d: same logits",
              i);
    list_cache(&n_pack, &n_other);
    CHECK(n_pack == 1 && n_other == 0, "after concurrent opens: one cache file, no temp file (%d, %d)", n_pack,
          n_other);
    ok = run(cache, &in, lg);
    CHECK(ok && in.pack_cache == PB_PACK_CACHE_HIT, "and it is used (state %d)", in.pack_cache);
    free(out[0]);
    free(out[1]);

    /* a directory that cannot be made (a file is in the way): the model still opens, repacked, and says why */
    char blocked[400];
    snprintf(blocked, sizeof blocked, "%s/model.gguf/cache", dir);
    ok = run(blocked, &in, lg);
    CHECK(ok && in.pack_cache == PB_PACK_CACHE_FAILED && strstr(in.pack_cache_note, "not written") &&
              in.n_repacked == repacked,
          "unwritable cache dir: opens, repacks, says why ('%s')", in.pack_cache_note);
    CHECK(ok && memcmp(lg, ref, sizeof(float) * (size_t)n_vocab) == 0, "unwritable cache dir: same logits");

    /* pack_cache_background: the open returns before the cache is written (state WRITING), the model answers while
     * the writer runs, wait gives the outcome, and the next open maps the file; an unwritable directory fails there */
    {
        CHECK(pack_file(p, sizeof p) && unlink(p) == 0, "cache removed (background write)");
        pb_model_params bp = model_params(cache);
        bp.pack_cache_background = true;
        pb_model *bm = NULL;
        pb_session *bs = NULL;
        const pb_session_params sp = session_params();
        ok = pb_model_open(model, &bp, &bm) == PB_OK && pb_model_get_info(bm, &in) == PB_OK;
        CHECK(ok && in.pack_cache == PB_PACK_CACHE_WRITING && strstr(in.pack_cache_note, "in the background"),
              "background: the open returns with the write under way (state %d, '%s')", in.pack_cache,
              in.pack_cache_note);
        ok = ok && pb_session_new(bm, &sp, &bs) == PB_OK && pb_session_prefill(bs, toks, NTOK) == PB_OK;
        CHECK(ok && memcmp(pb_session_logits(bs), ref, sizeof(float) * (size_t)n_vocab) == 0,
              "background: the model answers while it writes, same logits");
        pb_model_pack_cache_wait(bm);
        CHECK(!pb_model_pack_cache_busy(bm) && pb_model_get_info(bm, &in) == PB_OK &&
                  in.pack_cache == PB_PACK_CACHE_WRITTEN && strstr(in.pack_cache_note, "wrote"),
              "background: wait gives the outcome (state %d, '%s')", in.pack_cache, in.pack_cache_note);
        pb_model_pack_cache_wait(bm); /* a second wait: nothing left to wait for */
        pb_session_free(bs);
        pb_model_close(bm);
        list_cache(&n_pack, &n_other);
        CHECK(n_pack == 1 && n_other == 0, "background: one cache file, no temp file (%d, %d)", n_pack, n_other);
        ok = run(cache, &in, lg);
        CHECK(ok && in.pack_cache == PB_PACK_CACHE_HIT && memcmp(lg, ref, sizeof(float) * (size_t)n_vocab) == 0,
              "background: the next open maps what it wrote (state %d)", in.pack_cache);
        /* closed without a wait, right after the open: close waits for the writer (the file is complete) */
        CHECK(pack_file(p, sizeof p) && unlink(p) == 0, "cache removed (close while writing)");
        ok = pb_model_open(model, &bp, &bm) == PB_OK;
        pb_model_close(bm);
        list_cache(&n_pack, &n_other);
        CHECK(ok && n_pack == 1 && n_other == 0, "background: close waits for the write (%d, %d)", n_pack, n_other);
        ok = run(cache, &in, lg);
        CHECK(ok && in.pack_cache == PB_PACK_CACHE_HIT, "background: and it is used (state %d)", in.pack_cache);
        bp.pack_cache_dir = blocked;
        ok = pb_model_open(model, &bp, &bm) == PB_OK;
        pb_model_pack_cache_wait(bm);
        CHECK(ok && pb_model_get_info(bm, &in) == PB_OK && in.pack_cache == PB_PACK_CACHE_FAILED &&
                  strstr(in.pack_cache_note, "not written"),
              "background, unwritable cache dir: opens, says why ('%s')", in.pack_cache_note);
        pb_model_close(bm);
        CHECK(!pb_model_pack_cache_busy(NULL), "busy(NULL) is false");
        pb_model_pack_cache_wait(NULL);
    }

    /* use_mmap off: the model is a heap copy packed in place, no cache involved */
    pb_model_params mp = pb_model_default_params();
    mp.use_mmap = false;
    mp.gpu = 0;
    mp.pack_cache_dir = cache;
    pb_model *m = NULL;
    ok = pb_model_open(model, &mp, &m) == PB_OK && pb_model_get_info(m, &in) == PB_OK;
    CHECK(ok && in.pack_cache == PB_PACK_CACHE_OFF, "use_mmap off: no cache (state %d)", in.pack_cache);
    pb_model_close(m);

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    free(ref);
    free(lg);
    TEST_DONE();
}
