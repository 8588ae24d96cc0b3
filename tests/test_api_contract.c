/* test_api_contract.c -- every function of pocketbrain.h under misuse: NULL for each pointer, zero / negative / huge
 * sizes and counts, ids outside the vocabulary, and misuse sequences (work after a cancel, truncation past the
 * context, foreign or garbage session state, a batch freed under its sessions). Each call runs in a child process,
 * so a crash, an abort (a sanitizer's too), an exit() or a byte printed to stdout / stderr is a failed check of its
 * own; the status and that pb_last_error() names the function or the argument are checked. Only the public header:
 * what an app embedding the library sees (docs/API.md, "Misuse"). Run under ASan + UBSan too. */
#include "pb_test.h"
#include "pocketbrain.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* ---- the harness: one call in a child ----------------------------------------------------------------------- */

typedef struct outcome {
    int reported;   /* the child got to the end of the call */
    pb_status st;   /* what the call returned (PB_OK for void calls) */
    int64_t val;    /* a getter's value, or what the body wants checked */
    int msg_null;   /* pb_last_error() returned NULL */
    char msg[1024]; /* pb_last_error() after the call */
    char note[160]; /* BROKE: a side effect the call must not have had */
} outcome;

#define STALE "(no message set by the call)"

static outcome *shared_out; /* MAP_SHARED: the child writes, the parent reads */
static char out_path[64];   /* the child's stdout + stderr */

typedef struct result {
    outcome o;
    int sig;           /* the signal that ended the child, 0 */
    int code;          /* its exit status */
    char printed[600]; /* the start of what it printed */
    size_t n_printed;
} result;

static result last; /* of the last RUN */

/* Forks; returns true in the child (stdout / stderr redirected, a 30 s alarm), false in the parent once the child
 * has ended and `last` is filled. */
static bool isolate(void) {
    memset(shared_out, 0, sizeof *shared_out);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        alarm(30);
        pb_preset p;
        (void)pb_preset_from_name(STALE, &p); /* the message a call that sets none would leave */
        return true;
    }
    memset(&last, 0, sizeof last);
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid) {
        last.sig = -1;
        return false;
    }
    last.o = *shared_out;
    if (WIFSIGNALED(ws)) last.sig = WTERMSIG(ws);
    if (WIFEXITED(ws)) last.code = WEXITSTATUS(ws);
    FILE *f = fopen(out_path, "rb");
    if (f) {
        last.n_printed = fread(last.printed, 1, sizeof last.printed - 1, f);
        for (size_t i = 0; i < last.n_printed; i++)
            if (last.printed[i] == '\n') last.printed[i] = '|';
        fclose(f);
    }
    return false;
}

static void child_report(pb_status st, int64_t val) {
    const char *e = pb_last_error();
    shared_out->st = st;
    shared_out->val = val;
    shared_out->msg_null = e == NULL;
    snprintf(shared_out->msg, sizeof shared_out->msg, "%s", e ? e : "");
    shared_out->reported = 1;
    _exit(0); /* no atexit handlers, no leak report: the parent owns every object */
}

/* In a RUN body: the call had a side effect it must not have (a changed session, an out pointer set). */
#define BROKE(...) (st_ = PB_ERR_INTERNAL, snprintf(shared_out->note, sizeof shared_out->note, __VA_ARGS__))
/* In a RUN body: the session s still holds n tokens. */
#define KEPT(n)                                                                                                        \
    if (pb_session_n_past(s) != (n))                                                                                   \
    BROKE("the context changed: n_past %lld, was %d", (long long)pb_session_n_past(s), (n))

/* RUN(body): body runs in a child; it sets st_ (a status) and / or val_ (a value) from the calls it makes. */
#define RUN(body)                                                                                                      \
    do {                                                                                                               \
        if (isolate()) {                                                                                               \
            pb_status st_ = PB_OK;                                                                                     \
            int64_t val_ = 0;                                                                                          \
            body;                                                                                                      \
            child_report(st_, val_);                                                                                   \
        }                                                                                                              \
    } while (0)

/* What the child printed, from a sanitizer's verdict when there is one. */
static const char *printed_text(void) {
    const char *p = last.printed, *q;
    if ((q = strstr(p, "ERROR: ")) || (q = strstr(p, "runtime error"))) p = q;
    return p;
}

/* How the child ended, when not cleanly: "" when it did. */
static const char *how_it_ended(void) {
    static char why[256];
    why[0] = 0;
    if (last.sig > 0)
        snprintf(why, sizeof why, "crashed with signal %d (%s)%s%.120s", last.sig, strsignal(last.sig),
                 last.n_printed ? ", printed: " : "", printed_text());
    else if (last.sig < 0)
        snprintf(why, sizeof why, "fork failed");
    else if (!last.o.reported)
        snprintf(why, sizeof why, "exited with status %d before returning%s%.120s", last.code,
                 last.n_printed ? ", printed: " : "", printed_text());
    else if (last.n_printed)
        snprintf(why, sizeof why, "printed: %.120s", printed_text());
    else if (last.o.msg_null)
        snprintf(why, sizeof why, "pb_last_error() returned NULL");
    return why;
}

/* The call set a message, holding up to three words (NULL: none). */
static bool names(const char *a, const char *b, const char *c) {
    if (!last.o.msg[0] || strstr(last.o.msg, STALE)) return false;
    const char *w[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (w[i] && !strstr(last.o.msg, w[i])) return false;
    return true;
}

/* The call returned `want` and its message names a, b, c. */
static void expect_st(const char *what, pb_status want, const char *a, const char *b, const char *c) {
    const char *why = how_it_ended();
    bool ok = !*why && last.o.st == want && (want == PB_OK || names(a, b, c));
    const char *said = strstr(last.o.msg, STALE) ? "(no message)" : last.o.msg;
    if (last.o.note[0])
        CHECK(ok, "%s -> %s (%s; the call said %.200s)", what, pb_status_name(want), last.o.note, said);
    else
        CHECK(ok, "%s -> %s%s%s (got %s: \"%.200s\")", what, pb_status_name(want), *why ? ": " : "", why,
              pb_status_name(last.o.st), said);
}

/* The call returned (void or a getter) and its value is `want`. */
static void expect_val(const char *what, int64_t want) {
    const char *why = how_it_ended();
    bool ok = !*why && last.o.val == want;
    CHECK(ok, "%s -> %lld%s%s (got %lld)", what, (long long)want, *why ? ": " : "", why, (long long)last.o.val);
}

/* ---- fixtures -------------------------------------------------------------------------------------------------- */

static bool piece_cb(const char *p, size_t n, void *user) {
    (void)p, (void)n, (void)user;
    return true;
}

static char logged[1024];
static void on_log(int level, const char *msg, void *user) {
    (void)level, (void)user;
    snprintf(logged, sizeof logged, "%s", msg);
}

static bool all_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return false;
    return true;
}

static pb_session *new_session(pb_model *m, int n_ctx, pb_kv_type kv) {
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = 1; /* a child of fork() has only the calling thread: no pool workers to wait for */
    sp.kv_type = kv;
    pb_session *s = NULL;
    if (pb_session_new(m, &sp, &s) != PB_OK) NOTE("session_new: %s", pb_last_error());
    return s;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static pb_gen_params greedy(int max_tokens) {
    pb_gen_params gp = pb_gen_default_params();
    gp.sampler.temperature = 0;
    gp.max_tokens = max_tokens;
    return gp;
}

/* A copy of src/engine/state.c's checksum: crafted headers get past it and reach the checks of each field. */
static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}
static void sum_block(uint64_t lane[4], const uint8_t *p) {
    for (int i = 0; i < 4; i++) {
        uint64_t w = rd64(p + 8 * i) * 0x87c37b91114253d5ull;
        w = (w << 31) | (w >> 33);
        lane[i] = (lane[i] ^ w) * 0x4cf5ad432745937full;
        lane[i] = (lane[i] << 27) | (lane[i] >> 37);
    }
}
/* Writes the checksum of buf[0..len) (header field 96 taken as 0) into field 96. */
static void reseal(uint8_t *buf, size_t len) {
    uint64_t lane[4], zero = 0;
    for (int i = 0; i < 4; i++) lane[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    memcpy(buf + 96, &zero, 8);
    size_t n = len;
    const uint8_t *p = buf;
    for (; n >= 32; p += 32, n -= 32) sum_block(lane, p);
    uint8_t tail[32] = {0};
    memcpy(tail, p, n);
    sum_block(lane, tail);
    uint64_t h = len;
    for (int i = 0; i < 4; i++) h = mix64(h ^ lane[i]) + 0x9e3779b97f4a7c15ull;
    memcpy(buf + 96, &h, 8);
}
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* ---- the probes ----------------------------------------------------------------------------------------------- */

static void probe_base(void) {
    RUN(val_ = pb_last_error() != NULL);
    expect_val("pb_last_error() before any failure is not NULL", 1);
    RUN(val_ = strcmp(pb_status_name((pb_status)-1), "PB_ERR_UNKNOWN") == 0 &&
               strcmp(pb_status_name((pb_status)12), "PB_ERR_UNKNOWN") == 0 &&
               strcmp(pb_status_name((pb_status)INT_MAX), "PB_ERR_UNKNOWN") == 0);
    expect_val("pb_status_name(-1 / 12 / INT_MAX) is \"PB_ERR_UNKNOWN\"", 1);
    RUN(val_ =
            pb_version() != NULL && strcmp(pb_version(), PB_VERSION_STRING) == 0 && pb_abi_version() == PB_ABI_VERSION);
    expect_val("pb_version / pb_abi_version match the header", 1);
    RUN(pb_set_log(NULL, NULL); pb_set_log(NULL, (void *)1));
    expect_val("pb_set_log(NULL, ...) is a no-op", 0);
}

static void probe_model(const char *path, pb_model *m, const char *dir) {
    pb_model *mo = (pb_model *)1;
    pb_model_info info;
    char buf[1024];
    RUN(st_ = pb_model_open(NULL, NULL, &mo); val_ = mo == NULL);
    expect_st("pb_model_open(path NULL)", PB_ERR_INVALID_ARG, "pb_model_open", "path", NULL);
    RUN(st_ = pb_model_open(path, NULL, NULL));
    expect_st("pb_model_open(out NULL)", PB_ERR_INVALID_ARG, "pb_model_open", "out", NULL);
    RUN(st_ = pb_model_open("/nonexistent/m.gguf", NULL, &mo); if (mo) BROKE("*out is not NULL"));
    expect_st("pb_model_open(a missing file) sets *out NULL", PB_ERR_IO, "/nonexistent/m.gguf", NULL, NULL);
    RUN(st_ = pb_model_open("", NULL, &mo));
    expect_st("pb_model_open(\"\")", PB_ERR_IO, NULL, NULL, NULL);
    RUN(st_ = pb_model_open(dir, NULL, &mo));
    expect_st("pb_model_open(a directory)", PB_ERR_IO, dir, NULL, NULL);
    {
        char garbage[256];
        snprintf(garbage, sizeof garbage, "%s/garbage.gguf", dir);
        RUN(st_ = pb_model_open(garbage, NULL, &mo));
        expect_st("pb_model_open(a file of garbage)", PB_ERR_FORMAT, "garbage.gguf", NULL, NULL);
    }
    pb_model_params mp = pb_model_default_params();
    mp.pack_cache_dir = "/nonexistent/cache";
    RUN(st_ = pb_model_open(path, &mp, &mo); if (st_ == PB_OK) {
        pb_model_get_info(mo, &info);
        val_ = info.pack_cache;
    });
    expect_st("pb_model_open(pack_cache_dir that cannot be made) still opens", PB_OK, NULL, NULL, NULL);
    mp.pack_cache_dir = path; /* a file, not a directory */
    RUN(st_ = pb_model_open(path, &mp, &mo));
    expect_st("pb_model_open(pack_cache_dir a file) still opens", PB_OK, NULL, NULL, NULL);
    mp.pack_cache_dir = "";
    RUN(st_ = pb_model_open(path, &mp, &mo));
    expect_st("pb_model_open(pack_cache_dir \"\") still opens", PB_OK, NULL, NULL, NULL);
    mp = pb_model_default_params();
    mp.n_threads = -1;
    RUN(st_ = pb_model_open(path, &mp, &mo));
    expect_st("pb_model_open(n_threads -1)", PB_ERR_INVALID_ARG, "pb_model_open", "n_threads", NULL);
    mp.n_threads = 100000;
    RUN(st_ = pb_model_open(path, &mp, &mo));
    expect_st("pb_model_open(n_threads 100000)", PB_ERR_INVALID_ARG, "pb_model_open", "n_threads", NULL);
    mp = pb_model_default_params();
    mp.gpu = 7;
    RUN(st_ = pb_model_open(path, &mp, &mo));
    expect_st("pb_model_open(gpu 7)", PB_ERR_INVALID_ARG, "pb_model_open", "gpu", NULL);
    mp.gpu = -2;
    RUN(st_ = pb_model_open(path, &mp, &mo));
    expect_st("pb_model_open(gpu -2)", PB_ERR_INVALID_ARG, "pb_model_open", "gpu", NULL);

    RUN(pb_model_close(NULL));
    expect_val("pb_model_close(NULL) is a no-op", 0);
    RUN(val_ = pb_model_pack_cache_busy(NULL));
    expect_val("pb_model_pack_cache_busy(NULL) is false", 0);
    RUN(pb_model_pack_cache_wait(NULL));
    expect_val("pb_model_pack_cache_wait(NULL) is a no-op", 0);
    RUN(val_ = pb_model_pack_cache_busy(m); pb_model_pack_cache_wait(m));
    expect_val("pb_model_pack_cache_busy / wait on a model without a cache", 0);

    RUN(st_ = pb_pack_cache_file(NULL, path, buf, sizeof buf));
    expect_st("pb_pack_cache_file(dir NULL)", PB_ERR_INVALID_ARG, "pb_pack_cache_file", "dir", NULL);
    RUN(st_ = pb_pack_cache_file(dir, NULL, buf, sizeof buf));
    expect_st("pb_pack_cache_file(model_path NULL)", PB_ERR_INVALID_ARG, "pb_pack_cache_file", "model_path", NULL);
    RUN(st_ = pb_pack_cache_file(dir, path, NULL, sizeof buf));
    expect_st("pb_pack_cache_file(buf NULL)", PB_ERR_INVALID_ARG, "pb_pack_cache_file", "buf", NULL);
    RUN(st_ = pb_pack_cache_file(dir, path, buf, 0));
    expect_st("pb_pack_cache_file(cap 0)", PB_ERR_INVALID_ARG, "pb_pack_cache_file", "cap", NULL);
    RUN(st_ = pb_pack_cache_file(dir, path, buf, 8));
    expect_st("pb_pack_cache_file(cap 8: too small)", PB_ERR_INVALID_ARG, "pb_pack_cache_file", "cap", NULL);
    RUN(st_ = pb_pack_cache_file(dir, path, buf, sizeof buf); val_ = st_ == PB_OK && strstr(buf, ".pbpack") != NULL);
    expect_val("pb_pack_cache_file fits a 1024-byte buffer", 1);

    RUN(st_ = pb_model_get_info(NULL, &info));
    expect_st("pb_model_get_info(model NULL)", PB_ERR_INVALID_ARG, "pb_model_get_info", "model", NULL);
    RUN(st_ = pb_model_get_info(m, NULL));
    expect_st("pb_model_get_info(out NULL)", PB_ERR_INVALID_ARG, "pb_model_get_info", "out", NULL);
}

static void probe_vocab(const char *path, pb_model *m) {
    const pb_vocab *mv = pb_model_vocab(m);
    int32_t nv = pb_vocab_size(mv);
    pb_vocab *vo = (pb_vocab *)1;
    RUN(val_ = pb_model_vocab(NULL) == NULL);
    expect_val("pb_model_vocab(NULL) is NULL", 1);
    RUN(st_ = pb_vocab_open(NULL, &vo));
    expect_st("pb_vocab_open(gguf_path NULL)", PB_ERR_INVALID_ARG, "pb_vocab_open", "gguf_path", NULL);
    RUN(st_ = pb_vocab_open(path, NULL));
    expect_st("pb_vocab_open(out NULL)", PB_ERR_INVALID_ARG, "pb_vocab_open", "out", NULL);
    RUN(st_ = pb_vocab_open("/nonexistent/v.gguf", &vo); if (vo) BROKE("*out is not NULL"));
    expect_st("pb_vocab_open(a missing file) sets *out NULL", PB_ERR_IO, "/nonexistent/v.gguf", NULL, NULL);
    RUN(pb_vocab_free(NULL));
    expect_val("pb_vocab_free(NULL) is a no-op", 0);
    RUN(val_ = pb_vocab_size(NULL));
    expect_val("pb_vocab_size(NULL)", 0);
    RUN(val_ = pb_vocab_bos(NULL));
    expect_val("pb_vocab_bos(NULL)", -1);
    RUN(val_ = pb_vocab_eos(NULL));
    expect_val("pb_vocab_eos(NULL)", -1);
    RUN(val_ = pb_vocab_eot(NULL));
    expect_val("pb_vocab_eot(NULL)", -1);
    RUN(val_ = pb_vocab_find(NULL, "a", 1));
    expect_val("pb_vocab_find(vocab NULL)", -1);
    RUN(val_ = pb_vocab_find(mv, NULL, 5));
    expect_val("pb_vocab_find(text NULL, len 5)", -1);
    RUN(val_ = pb_vocab_find(mv, "<bos>", 0));
    expect_val("pb_vocab_find(len 0)", -1);
    RUN(val_ = pb_vocab_piece(NULL, 0) == NULL);
    expect_val("pb_vocab_piece(vocab NULL) is NULL", 1);
    RUN(val_ = pb_vocab_piece(mv, -1) == NULL && pb_vocab_piece(mv, nv) == NULL &&
               pb_vocab_piece(mv, INT32_MAX) == NULL && pb_vocab_piece(mv, INT32_MIN) == NULL);
    expect_val("pb_vocab_piece(-1 / n_vocab / INT32_MAX / INT32_MIN) is NULL", 1);

    /* pb_tokenize */
    int32_t ids[64];
    int64_t n = -7;
    RUN(st_ = pb_tokenize(NULL, "hi", 2, 0, ids, 64, &n));
    expect_st("pb_tokenize(vocab NULL)", PB_ERR_INVALID_ARG, "pb_tokenize", "vocab", NULL);
    RUN(st_ = pb_tokenize(mv, NULL, 2, 0, ids, 64, &n));
    expect_st("pb_tokenize(text NULL, len 2)", PB_ERR_INVALID_ARG, "pb_tokenize", "text", NULL);
    RUN(st_ = pb_tokenize(mv, "hi", 2, 0, ids, 64, NULL));
    expect_st("pb_tokenize(n_out NULL)", PB_ERR_INVALID_ARG, "pb_tokenize", "n_out", NULL);
    RUN(st_ = pb_tokenize(mv, "hi", 2, 0, NULL, 64, &n));
    expect_st("pb_tokenize(ids NULL, cap 64)", PB_ERR_INVALID_ARG, "pb_tokenize", "ids", NULL);
    RUN(st_ = pb_tokenize(mv, "hi", 2, 0, ids, -1, &n));
    expect_st("pb_tokenize(cap -1)", PB_ERR_INVALID_ARG, "pb_tokenize", "cap", NULL);
    RUN(st_ = pb_tokenize(mv, "hi", 2, 0, ids, INT64_MIN, &n));
    expect_st("pb_tokenize(cap INT64_MIN)", PB_ERR_INVALID_ARG, "pb_tokenize", "cap", NULL);
    RUN(st_ = pb_tokenize(mv, "hello world", 11, 0, NULL, 0, &n); val_ = st_ == PB_ERR_INVALID_ARG && n > 0);
    expect_val("pb_tokenize(ids NULL, cap 0) asks for the size (*n_out > 0)", 1);
    RUN(st_ = pb_tokenize(mv, NULL, 0, 0, NULL, 0, &n); val_ = st_ == PB_OK && n == 0);
    expect_val("pb_tokenize(text NULL, len 0) is 0 tokens", 1);
    RUN(st_ = pb_tokenize(mv, "hi", SIZE_MAX, 0, ids, 64, &n));
    expect_st("pb_tokenize(len SIZE_MAX)", PB_ERR_INVALID_ARG, "pb_tokenize", "too long", NULL);
    RUN(st_ = pb_tokenize(mv, "hi", 2, -1, ids, 64, &n));
    expect_st("pb_tokenize(flags -1: unknown bits)", PB_ERR_INVALID_ARG, "pb_tokenize", "flags", NULL);
    RUN(st_ = pb_tokenize(mv, "hi", 2, 64, ids, 64, &n));
    expect_st("pb_tokenize(flags 64: an unknown bit)", PB_ERR_INVALID_ARG, "pb_tokenize", "flags", NULL);

    /* pb_detokenize */
    char buf[256];
    size_t len = 7;
    int32_t good[3] = {2, 100, 200}, bad_neg[2] = {100, -1}, bad_big[2] = {100, nv}, bad_min[1] = {INT32_MIN};
    RUN(st_ = pb_detokenize(NULL, good, 3, false, buf, sizeof buf, &len));
    expect_st("pb_detokenize(vocab NULL)", PB_ERR_INVALID_ARG, "pb_detokenize", "vocab", NULL);
    RUN(st_ = pb_detokenize(mv, NULL, 3, false, buf, sizeof buf, &len));
    expect_st("pb_detokenize(ids NULL, n 3)", PB_ERR_INVALID_ARG, "pb_detokenize", "ids", NULL);
    RUN(st_ = pb_detokenize(mv, good, -1, false, buf, sizeof buf, &len));
    expect_st("pb_detokenize(n -1)", PB_ERR_INVALID_ARG, "pb_detokenize", "n ", NULL);
    RUN(st_ = pb_detokenize(mv, good, 3, false, buf, sizeof buf, NULL));
    expect_st("pb_detokenize(len_out NULL)", PB_ERR_INVALID_ARG, "pb_detokenize", "len_out", NULL);
    RUN(st_ = pb_detokenize(mv, good, 3, false, NULL, 10, &len));
    expect_st("pb_detokenize(buf NULL, cap 10)", PB_ERR_INVALID_ARG, "pb_detokenize", "buf", NULL);
    RUN(st_ = pb_detokenize(mv, bad_neg, 2, false, buf, sizeof buf, &len));
    expect_st("pb_detokenize(id -1)", PB_ERR_INVALID_ARG, "pb_detokenize", "-1", "vocabulary");
    RUN(st_ = pb_detokenize(mv, bad_big, 2, true, buf, sizeof buf, &len));
    expect_st("pb_detokenize(id n_vocab)", PB_ERR_INVALID_ARG, "pb_detokenize", "vocabulary", NULL);
    RUN(st_ = pb_detokenize(mv, bad_min, 1, false, buf, sizeof buf, &len));
    expect_st("pb_detokenize(id INT32_MIN)", PB_ERR_INVALID_ARG, "pb_detokenize", "vocabulary", NULL);
    RUN(st_ = pb_detokenize(mv, good, 3, false, NULL, 0, &len); val_ = st_ == PB_ERR_INVALID_ARG && len > 0);
    expect_val("pb_detokenize(buf NULL, cap 0) asks for the size", 1);
    RUN(st_ = pb_detokenize(mv, good, 3, false, buf, 1, &len); val_ = st_ == PB_ERR_INVALID_ARG && buf[0] == 0);
    expect_val("pb_detokenize(cap 1) gives \"\" and the size", 1);
    RUN(st_ = pb_detokenize(mv, NULL, 0, false, buf, sizeof buf, &len); val_ = st_ == PB_OK && len == 0 && !buf[0]);
    expect_val("pb_detokenize(n 0) is \"\"", 1);

    /* the streaming detokenizer */
    pb_detok_stream *ds = NULL;
    const char *out = NULL;
    CHECK(pb_detok_stream_new(mv, &ds) == PB_OK, "pb_detok_stream_new: %s", pb_last_error());
    RUN(st_ = pb_detok_stream_new(NULL, &ds));
    expect_st("pb_detok_stream_new(vocab NULL)", PB_ERR_INVALID_ARG, "pb_detok_stream_new", "vocab", NULL);
    RUN(st_ = pb_detok_stream_new(mv, NULL));
    expect_st("pb_detok_stream_new(out NULL)", PB_ERR_INVALID_ARG, "pb_detok_stream_new", "out", NULL);
    RUN(pb_detok_stream_free(NULL));
    expect_val("pb_detok_stream_free(NULL) is a no-op", 0);
    RUN(st_ = pb_detok_stream_push(NULL, 100, &out, &len));
    expect_st("pb_detok_stream_push(stream NULL)", PB_ERR_INVALID_ARG, "pb_detok_stream_push", "stream", NULL);
    RUN(st_ = pb_detok_stream_push(ds, 100, NULL, &len));
    expect_st("pb_detok_stream_push(out NULL)", PB_ERR_INVALID_ARG, "pb_detok_stream_push", "out", NULL);
    RUN(st_ = pb_detok_stream_push(ds, 100, &out, NULL));
    expect_st("pb_detok_stream_push(out_len NULL)", PB_ERR_INVALID_ARG, "pb_detok_stream_push", "out_len", NULL);
    RUN(st_ = pb_detok_stream_push(ds, -1, &out, &len));
    expect_st("pb_detok_stream_push(id -1)", PB_ERR_INVALID_ARG, "pb_detok_stream_push", "vocabulary", NULL);
    RUN(st_ = pb_detok_stream_push(ds, nv, &out, &len));
    expect_st("pb_detok_stream_push(id n_vocab)", PB_ERR_INVALID_ARG, "pb_detok_stream_push", "vocabulary", NULL);
    RUN(st_ = pb_detok_stream_flush(NULL, &out, &len));
    expect_st("pb_detok_stream_flush(stream NULL)", PB_ERR_INVALID_ARG, "pb_detok_stream_flush", "stream", NULL);
    RUN(st_ = pb_detok_stream_flush(ds, NULL, &len));
    expect_st("pb_detok_stream_flush(out NULL)", PB_ERR_INVALID_ARG, "pb_detok_stream_flush", "out", NULL);
    RUN(st_ = pb_detok_stream_flush(ds, &out, NULL));
    expect_st("pb_detok_stream_flush(out_len NULL)", PB_ERR_INVALID_ARG, "pb_detok_stream_flush", "out_len", NULL);
    pb_detok_stream_free(ds);
}

static void probe_chat(pb_model *m) {
    pb_chat_msg msgs[2] = {{"system", "Be brief."}, {"user", "Hi"}};
    pb_chat_msg no_role[1] = {{NULL, "x"}}, no_content[1] = {{"user", NULL}}, odd_role[1] = {{"robot", "x"}};
    pb_chat_opts opts = {.add_generation_prompt = true};
    char buf[512];
    size_t len = 0;
    int32_t ids[128];
    int64_t n = 0;
    RUN(st_ = pb_chat_format(NULL, msgs, 2, true, buf, sizeof buf, &len));
    expect_st("pb_chat_format(model NULL)", PB_ERR_INVALID_ARG, "pb_chat_format", "model", NULL);
    RUN(st_ = pb_chat_format(m, NULL, 2, true, buf, sizeof buf, &len));
    expect_st("pb_chat_format(msgs NULL, n_msgs 2)", PB_ERR_INVALID_ARG, "pb_chat_format", "msgs", NULL);
    RUN(st_ = pb_chat_format(m, msgs, -1, true, buf, sizeof buf, &len));
    expect_st("pb_chat_format(n_msgs -1)", PB_ERR_INVALID_ARG, "pb_chat_format", "n_msgs", NULL);
    RUN(st_ = pb_chat_format(m, msgs, INT_MIN, true, buf, sizeof buf, &len));
    expect_st("pb_chat_format(n_msgs INT_MIN)", PB_ERR_INVALID_ARG, "pb_chat_format", "n_msgs", NULL);
    RUN(st_ = pb_chat_format(m, msgs, 2, true, NULL, 10, &len));
    expect_st("pb_chat_format(buf NULL, cap 10)", PB_ERR_INVALID_ARG, "pb_chat_format", "buf", NULL);
    RUN(st_ = pb_chat_format(m, msgs, 2, true, buf, sizeof buf, NULL));
    expect_st("pb_chat_format(len_out NULL)", PB_ERR_INVALID_ARG, "pb_chat_format", "len_out", NULL);
    RUN(st_ = pb_chat_format(m, msgs, 2, true, NULL, 0, &len); val_ = st_ == PB_ERR_INVALID_ARG && len > 0);
    expect_val("pb_chat_format(buf NULL, cap 0) asks for the size", 1);
    RUN(st_ = pb_chat_format(m, no_role, 1, true, buf, sizeof buf, &len));
    expect_st("pb_chat_format(a message without role)", PB_ERR_INVALID_ARG, "message 0", "role", NULL);
    RUN(st_ = pb_chat_format(m, no_content, 1, true, buf, sizeof buf, &len));
    expect_st("pb_chat_format(a message without content)", PB_ERR_INVALID_ARG, "message 0", "content", NULL);
    RUN(st_ = pb_chat_format(m, odd_role, 1, true, buf, sizeof buf, &len));
    expect_st("pb_chat_format(role 'robot')", PB_ERR_INVALID_ARG, "robot", NULL, NULL);
    RUN(st_ = pb_chat_format(m, NULL, 0, false, buf, sizeof buf, &len); val_ = st_ == PB_OK && len == 0);
    expect_val("pb_chat_format(no messages) is \"\"", 1);

    RUN(st_ = pb_chat_tokenize(NULL, msgs, 2, true, ids, 128, &n));
    expect_st("pb_chat_tokenize(model NULL)", PB_ERR_INVALID_ARG, "pb_chat_tokenize", "model", NULL);
    RUN(st_ = pb_chat_tokenize(m, NULL, 1, true, ids, 128, &n));
    expect_st("pb_chat_tokenize(msgs NULL, n_msgs 1)", PB_ERR_INVALID_ARG, "pb_chat_tokenize", "msgs", NULL);
    RUN(st_ = pb_chat_tokenize(m, msgs, -3, true, ids, 128, &n));
    expect_st("pb_chat_tokenize(n_msgs -3)", PB_ERR_INVALID_ARG, "pb_chat_tokenize", "n_msgs", NULL);
    RUN(st_ = pb_chat_tokenize(m, msgs, 2, true, ids, -1, &n));
    expect_st("pb_chat_tokenize(cap -1)", PB_ERR_INVALID_ARG, "pb_chat_tokenize", "cap", NULL);
    RUN(st_ = pb_chat_tokenize(m, msgs, 2, true, NULL, 128, &n));
    expect_st("pb_chat_tokenize(ids NULL, cap 128)", PB_ERR_INVALID_ARG, "pb_chat_tokenize", "ids", NULL);
    RUN(st_ = pb_chat_tokenize(m, msgs, 2, true, ids, 128, NULL));
    expect_st("pb_chat_tokenize(n_out NULL)", PB_ERR_INVALID_ARG, "pb_chat_tokenize", "n_out", NULL);
    RUN(st_ = pb_chat_tokenize(m, msgs, 2, true, NULL, 0, &n); val_ = st_ == PB_ERR_INVALID_ARG && n > 0);
    expect_val("pb_chat_tokenize(ids NULL, cap 0) asks for the size", 1);
    RUN(st_ = pb_chat_tokenize(m, msgs, 2, true, ids, 3, &n); val_ = st_ == PB_ERR_INVALID_ARG && n > 3);
    expect_val("pb_chat_tokenize(cap 3) asks for the size", 1);
    RUN(st_ = pb_chat_tokenize(m, no_content, 1, true, ids, 128, &n));
    expect_st("pb_chat_tokenize(a message without content)", PB_ERR_INVALID_ARG, "message 0", "content", NULL);

    RUN(st_ = pb_chat_format_opts(m, msgs, 2, NULL, buf, sizeof buf, &len));
    expect_st("pb_chat_format_opts(opts NULL)", PB_ERR_INVALID_ARG, "pb_chat_format_opts", "opts", NULL);
    RUN(st_ = pb_chat_format_opts(NULL, msgs, 2, &opts, buf, sizeof buf, &len));
    expect_st("pb_chat_format_opts(model NULL)", PB_ERR_INVALID_ARG, "pb_chat_format_opts", "model", NULL);
    RUN(st_ = pb_chat_tokenize_opts(m, msgs, 2, NULL, ids, 128, &n));
    expect_st("pb_chat_tokenize_opts(opts NULL)", PB_ERR_INVALID_ARG, "pb_chat_tokenize_opts", "opts", NULL);
    RUN(st_ = pb_chat_tokenize_opts(NULL, msgs, 2, &opts, ids, 128, &n));
    expect_st("pb_chat_tokenize_opts(model NULL)", PB_ERR_INVALID_ARG, "pb_chat_tokenize_opts", "model", NULL);
    opts.think = true;
    RUN(st_ = pb_chat_tokenize_opts(m, msgs, 2, &opts, ids, 128, &n));
    expect_st("pb_chat_tokenize_opts(think on a Gemma 2 vocabulary)", PB_ERR_UNSUPPORTED, "think", NULL, NULL);
}

static void probe_sampler(int32_t nv) {
    pb_preset pr = PB_PRESET_CODE;
    RUN(val_ = pb_sampler_preset((pb_preset)-1).temperature == pb_sampler_default_params().temperature &&
               pb_sampler_preset((pb_preset)99).top_p == pb_sampler_default_params().top_p);
    expect_val("pb_sampler_preset(-1 / 99) is balanced", 1);
    RUN(val_ = strcmp(pb_preset_name((pb_preset)-1), "?") == 0 && strcmp(pb_preset_name((pb_preset)4), "?") == 0);
    expect_val("pb_preset_name(-1 / 4) is \"?\"", 1);
    RUN(st_ = pb_preset_from_name(NULL, &pr));
    expect_st("pb_preset_from_name(name NULL)", PB_ERR_INVALID_ARG, "pb_preset_from_name", "name", NULL);
    RUN(st_ = pb_preset_from_name("wild", &pr));
    expect_st("pb_preset_from_name(\"wild\")", PB_ERR_INVALID_ARG, "unknown preset", "wild", NULL);
    RUN(st_ = pb_preset_from_name("precise", NULL));
    expect_st("pb_preset_from_name(out NULL)", PB_ERR_INVALID_ARG, "pb_preset_from_name", "out", NULL);
    RUN(st_ = pb_preset_from_name("wild", NULL));
    expect_st("pb_preset_from_name(\"wild\", out NULL)", PB_ERR_INVALID_ARG, "pb_preset_from_name", "out", NULL);

    pb_sampler_params sp;
    RUN(st_ = pb_sampler_params_check(NULL, nv));
    expect_st("pb_sampler_params_check(params NULL)", PB_ERR_INVALID_ARG, "params", NULL, NULL);
#define SP_CASE(desc, field_assign, word)                                                                              \
    do {                                                                                                               \
        sp = pb_sampler_default_params();                                                                              \
        field_assign;                                                                                                  \
        RUN(st_ = pb_sampler_params_check(&sp, nv));                                                                   \
        expect_st("pb_sampler_params_check(" desc ")", PB_ERR_INVALID_ARG, word, NULL, NULL);                          \
    } while (0)
    SP_CASE("temperature NaN", sp.temperature = NAN, "temperature");
    SP_CASE("temperature -1", sp.temperature = -1, "temperature");
    SP_CASE("temperature inf", sp.temperature = INFINITY, "temperature");
    SP_CASE("top_k -1", sp.top_k = -1, "top_k");
    SP_CASE("top_p 0", sp.top_p = 0, "top_p");
    SP_CASE("top_p NaN", sp.top_p = NAN, "top_p");
    SP_CASE("min_p 2", sp.min_p = 2, "min_p");
    SP_CASE("repeat_penalty 0", sp.repeat_penalty = 0, "repeat_penalty");
    SP_CASE("presence_penalty NaN", sp.presence_penalty = NAN, "presence_penalty");
    SP_CASE("frequency_penalty -inf", sp.frequency_penalty = -INFINITY, "frequency_penalty");
    SP_CASE("penalty_last_n -1", sp.penalty_last_n = -1, "penalty_last_n");
    SP_CASE("n_bias -1", sp.n_bias = -1, "n_bias");
    SP_CASE("n_bias 2, bias_ids NULL", sp.n_bias = 2, "n_bias");
    static const int32_t bid_neg[1] = {-1}, bid_big[1] = {INT32_MAX}, bid_ok[1] = {5};
    static const float bval[1] = {1.0f}, bnan[1] = {NAN};
    SP_CASE("bias id -1", (sp.n_bias = 1, sp.bias_ids = bid_neg, sp.bias_values = bval), "bias");
    SP_CASE("bias id INT32_MAX", (sp.n_bias = 1, sp.bias_ids = bid_big, sp.bias_values = bval), "bias");
    SP_CASE("bias value NaN", (sp.n_bias = 1, sp.bias_ids = bid_ok, sp.bias_values = bnan), "bias");
#undef SP_CASE
    sp = pb_sampler_default_params();
    sp.top_k = INT_MAX;
    sp.penalty_last_n = INT_MAX;
    RUN(st_ = pb_sampler_params_check(&sp, -5));
    expect_st("pb_sampler_params_check(top_k, penalty_last_n INT_MAX; n_vocab -5)", PB_OK, NULL, NULL, NULL);

    pb_gen_params gp;
    RUN(st_ = pb_gen_params_check(NULL, nv));
    expect_st("pb_gen_params_check(params NULL)", PB_ERR_INVALID_ARG, "params", NULL, NULL);
    static const char *const stop_null[1] = {NULL}, *const stop_empty[1] = {""};
    static char long_stop[300];
    memset(long_stop, 'x', sizeof long_stop - 1);
    const char *stop_long[1] = {long_stop};
    static const int32_t st_neg[1] = {-1}, st_big[1] = {1 << 30};
#define GP_CASE(desc, field_assign, word)                                                                              \
    do {                                                                                                               \
        gp = pb_gen_default_params();                                                                                  \
        field_assign;                                                                                                  \
        RUN(st_ = pb_gen_params_check(&gp, nv));                                                                       \
        expect_st("pb_gen_params_check(" desc ")", PB_ERR_INVALID_ARG, word, NULL, NULL);                              \
    } while (0)
    GP_CASE("max_tokens -1", gp.max_tokens = -1, "max_tokens");
    GP_CASE("n_stop -1", gp.n_stop = -1, "n_stop");
    GP_CASE("n_stop 1, stop NULL", gp.n_stop = 1, "n_stop");
    GP_CASE("a NULL stop string", (gp.n_stop = 1, gp.stop = stop_null), "stop");
    GP_CASE("an empty stop string", (gp.n_stop = 1, gp.stop = stop_empty), "stop");
    GP_CASE("a 299-byte stop string", (gp.n_stop = 1, gp.stop = stop_long), "stop");
    GP_CASE("n_stop_tokens -1", gp.n_stop_tokens = -1, "n_stop_tokens");
    GP_CASE("n_stop_tokens 1, stop_tokens NULL", gp.n_stop_tokens = 1, "n_stop_tokens");
    GP_CASE("stop token -1", (gp.n_stop_tokens = 1, gp.stop_tokens = st_neg), "stop token");
    GP_CASE("stop token 2^30", (gp.n_stop_tokens = 1, gp.stop_tokens = st_big), "stop token");
    GP_CASE("sampler top_p 0", gp.sampler.top_p = 0, "top_p");
#undef GP_CASE
    RUN(val_ = strcmp(pb_stop_reason_name(-1), "?") == 0 && strcmp(pb_stop_reason_name(7), "?") == 0 &&
               strcmp(pb_stop_reason_name(INT_MIN), "?") == 0 && strcmp(pb_stop_reason_name(INT_MAX), "?") == 0);
    expect_val("pb_stop_reason_name(-1 / 7 / INT_MIN / INT_MAX) is \"?\"", 1);
}

static void probe_session_new(pb_model *m, pb_model *m2, const char *dir) {
    pb_session *so = (pb_session *)1;
    pb_session_params sp = pb_session_default_params();
    sp.n_threads = 1;
    RUN(st_ = pb_session_new(NULL, &sp, &so));
    expect_st("pb_session_new(model NULL)", PB_ERR_INVALID_ARG, "pb_session_new", "model", NULL);
    RUN(st_ = pb_session_new(m, &sp, NULL));
    expect_st("pb_session_new(out NULL)", PB_ERR_INVALID_ARG, "pb_session_new", "out", NULL);
    RUN(st_ = pb_session_new(m, NULL, &so); val_ = st_ == PB_OK && so && pb_session_n_ctx(so) > 0);
    expect_val("pb_session_new(params NULL) uses the defaults", 1);
#define SN_CASE(desc, field_assign, want, word)                                                                        \
    do {                                                                                                               \
        sp = pb_session_default_params();                                                                              \
        sp.n_threads = 1;                                                                                              \
        field_assign;                                                                                                  \
        so = (pb_session *)1;                                                                                          \
        RUN(st_ = pb_session_new(m, &sp, &so); if (st_ != PB_OK && so) BROKE("*out is not NULL"));                     \
        expect_st("pb_session_new(" desc ")", want, word, NULL, NULL);                                                 \
    } while (0)
    SN_CASE("n_ctx -1", sp.n_ctx = -1, PB_ERR_INVALID_ARG, "n_ctx");
    SN_CASE("n_ctx 1", sp.n_ctx = 1, PB_ERR_INVALID_ARG, "n_ctx");
    SN_CASE("n_ctx INT_MAX", sp.n_ctx = INT_MAX, PB_ERR_INVALID_ARG, "n_ctx");
    SN_CASE("n_ctx INT_MIN", sp.n_ctx = INT_MIN, PB_ERR_INVALID_ARG, "n_ctx");
    SN_CASE("n_batch -1", sp.n_batch = -1, PB_ERR_INVALID_ARG, "n_batch");
    SN_CASE("n_threads -1", sp.n_threads = -1, PB_ERR_INVALID_ARG, "n_threads");
    SN_CASE("n_threads 100000", sp.n_threads = 100000, PB_ERR_INVALID_ARG, "n_threads");
    SN_CASE("kv_type 7", sp.kv_type = (pb_kv_type)7, PB_ERR_INVALID_ARG, "kv_type");
    SN_CASE("kv_type -1", sp.kv_type = (pb_kv_type)-1, PB_ERR_INVALID_ARG, "kv_type");
    SN_CASE("ring_extra -1", sp.ring_extra = -1, PB_ERR_INVALID_ARG, "ring_extra");
    SN_CASE("ring_extra 2^24 + 1", sp.ring_extra = (1 << 24) + 1, PB_ERR_INVALID_ARG, "ring_extra");
    SN_CASE("ctx_policy 9", sp.ctx_policy = (pb_ctx_policy)9, PB_ERR_INVALID_ARG, "ctx_policy");
    SN_CASE("thermal a missing file", sp.thermal = "/nonexistent/temp", PB_ERR_NOT_FOUND, "/nonexistent/temp");
    SN_CASE("thermal a directory", sp.thermal = dir, PB_ERR_NOT_FOUND, dir);
    SN_CASE("thermal warm >= hot", (sp.thermal = "auto", sp.thermal_warm_c = 90), PB_ERR_INVALID_ARG, "thermal");
    SN_CASE("thermal hysteresis NaN", (sp.thermal = "auto", sp.thermal_hysteresis_c = NAN), PB_ERR_INVALID_ARG,
            "thermal");
    SN_CASE("thermal warm NaN", (sp.thermal = "auto", sp.thermal_warm_c = NAN), PB_ERR_INVALID_ARG, "thermal");
    SN_CASE("thermal_pause_ms -1", (sp.thermal = "auto", sp.thermal_pause_ms = -1), PB_ERR_INVALID_ARG, "thermal");
    SN_CASE("think on a Gemma 2 vocabulary", sp.think = true, PB_ERR_UNSUPPORTED, "think");
    {
        static char long_path[400];
        memset(long_path, 'x', sizeof long_path - 1);
        long_path[0] = '/';
        SN_CASE("thermal a 399-byte path", sp.thermal = long_path, PB_ERR_INVALID_ARG, "too long");
    }
    sp = pb_session_default_params();
    sp.n_threads = 1;
    sp.n_batch = INT_MAX;
    sp.n_ctx = 64;
    RUN(st_ = pb_session_new(m, &sp, &so));
    expect_st("pb_session_new(n_batch INT_MAX: clamped to n_ctx)", PB_OK, NULL, NULL, NULL);
#undef SN_CASE

    /* batches */
    pb_batch *b = (pb_batch *)1;
    RUN(st_ = pb_batch_new(NULL, 2, &b));
    expect_st("pb_batch_new(model NULL)", PB_ERR_INVALID_ARG, "pb_batch_new", "model", NULL);
    RUN(st_ = pb_batch_new(m, 2, NULL));
    expect_st("pb_batch_new(out NULL)", PB_ERR_INVALID_ARG, "pb_batch_new", "out", NULL);
    static const int bad_max[] = {0, -1, PB_BATCH_MAX_SESSIONS + 1, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof bad_max / sizeof *bad_max; i++) {
        char what[80];
        snprintf(what, sizeof what, "pb_batch_new(max_sessions %d) sets *out NULL", bad_max[i]);
        RUN(st_ = pb_batch_new(m, bad_max[i], &b); if (b) BROKE("*out is not NULL"));
        expect_st(what, PB_ERR_INVALID_ARG, "pb_batch_new", "max_sessions", NULL);
    }
    RUN(pb_batch_free(NULL));
    expect_val("pb_batch_free(NULL) is a no-op", 0);
    pb_batch_stats bs;
    memset(&bs, 0x5a, sizeof bs);
    RUN(pb_batch_get_stats(NULL, &bs); val_ = all_zero(&bs, sizeof bs));
    expect_val("pb_batch_get_stats(batch NULL) gives zeros", 1);
    CHECK(pb_batch_new(m, 1, &b) == PB_OK, "pb_batch_new(max_sessions 1): %s", pb_last_error());
    RUN(pb_batch_get_stats(b, NULL));
    expect_val("pb_batch_get_stats(out NULL) is a no-op", 0);
    sp = pb_session_default_params();
    sp.n_threads = 1;
    sp.n_ctx = 64;
    sp.batch = b;
    RUN(st_ = pb_session_new(m2, &sp, &so));
    expect_st("pb_session_new(a batch of another model)", PB_ERR_INVALID_ARG, "batch", "model", NULL);
    pb_session *member = NULL;
    CHECK(pb_session_new(m, &sp, &member) == PB_OK, "a session joins the batch: %s", pb_last_error());
    RUN(st_ = pb_session_new(m, &sp, &so));
    expect_st("pb_session_new(a full batch)", PB_ERR_INVALID_ARG, "batch", "full", NULL);
    /* freeing the batch first: the sessions keep it (freed with the last of them), nothing crashes */
    {
        pb_gen_params gp = greedy(4);
        int32_t prompt[3] = {2, 100, 200};
        RUN(pb_set_log(on_log, NULL); pb_batch_free(b);
            st_ = pb_session_generate(member, prompt, 3, &gp, NULL, NULL, NULL); pb_session_free(member);
            if (!strstr(logged, "pb_batch_free")) BROKE("not logged: \"%.100s\"", logged));
        expect_st("pb_batch_free while a session uses it (logged), then the session generates and is freed", PB_OK,
                  NULL, NULL, NULL);
    }
    pb_session_free(member);
    pb_batch_free(b);
}

static void probe_session(pb_model *m, pb_model *m2, const char *dir) {
    pb_session *s = new_session(m, 64, PB_KV_F16);
    if (!s) return;
    int32_t nv = pb_vocab_size(pb_model_vocab(m));
    int32_t prompt[4] = {2, 100, 200, 300}, bad_neg[2] = {100, -1}, bad_big[2] = {100, nv}, bad_min[1] = {INT32_MIN};
    pb_gen_params gp = greedy(4);
    pb_gen_stats gs;
    int64_t k = 0, n = 0;

    /* getters and void calls on NULL: the documented neutral values */
    RUN(val_ = pb_session_n_past(NULL));
    expect_val("pb_session_n_past(NULL)", 0);
    RUN(val_ = pb_session_n_ctx(NULL));
    expect_val("pb_session_n_ctx(NULL)", 0);
    RUN(val_ = pb_session_n_turns(NULL));
    expect_val("pb_session_n_turns(NULL)", 0);
    RUN(val_ = pb_session_logits(NULL) == NULL);
    expect_val("pb_session_logits(NULL) is NULL", 1);
    RUN(val_ = pb_session_logits(s) == NULL);
    expect_val("pb_session_logits(a fresh session) is NULL", 1);
    n = 5;
    RUN(val_ = pb_session_tokens(NULL, &n) == NULL && n == 0);
    expect_val("pb_session_tokens(NULL, &n) is NULL, n 0", 1);
    RUN(val_ = pb_session_tokens(s, NULL) != NULL);
    expect_val("pb_session_tokens(s, NULL) still answers", 1);
    RUN(pb_session_cancel(NULL));
    expect_val("pb_session_cancel(NULL) is a no-op", 0);
    RUN(pb_session_free(NULL));
    expect_val("pb_session_free(NULL) is a no-op", 0);
    pb_session_totals tot;
    memset(&tot, 0x5a, sizeof tot);
    RUN(pb_session_get_totals(NULL, &tot); val_ = all_zero(&tot, sizeof tot));
    expect_val("pb_session_get_totals(session NULL) gives zeros", 1);
    RUN(pb_session_get_totals(s, NULL));
    expect_val("pb_session_get_totals(out NULL) is a no-op", 0);
    RUN(pb_session_get_totals(NULL, NULL));
    expect_val("pb_session_get_totals(NULL, NULL) is a no-op", 0);
    pb_thermal_state ts;
    memset(&ts, 0x5a, sizeof ts);
    RUN(pb_session_thermal(NULL, &ts); val_ = all_zero(&ts, sizeof ts));
    expect_val("pb_session_thermal(session NULL) gives zeros", 1);
    RUN(pb_session_thermal(s, NULL));
    expect_val("pb_session_thermal(out NULL) is a no-op", 0);
    RUN(pb_session_thermal(NULL, NULL));
    expect_val("pb_session_thermal(NULL, NULL) is a no-op", 0);

    /* prefill */
    RUN(st_ = pb_session_prefill(NULL, prompt, 4));
    expect_st("pb_session_prefill(session NULL)", PB_ERR_INVALID_ARG, "pb_session_prefill", "session", NULL);
    RUN(st_ = pb_session_prefill(s, NULL, 3));
    expect_st("pb_session_prefill(ids NULL, n 3)", PB_ERR_INVALID_ARG, "pb_session_prefill", "ids", NULL);
    RUN(st_ = pb_session_prefill(s, prompt, -1));
    expect_st("pb_session_prefill(n -1)", PB_ERR_INVALID_ARG, "pb_session_prefill", "n ", NULL);
    RUN(st_ = pb_session_prefill(s, prompt, INT64_MIN));
    expect_st("pb_session_prefill(n INT64_MIN)", PB_ERR_INVALID_ARG, "pb_session_prefill", "n ", NULL);
    RUN(st_ = pb_session_prefill(s, prompt, INT64_MAX); val_ = pb_session_n_past(s));
    expect_st("pb_session_prefill(n INT64_MAX)", PB_ERR_CONTEXT_FULL, "context full", NULL, NULL);
    RUN(st_ = pb_session_prefill(s, prompt, 4); if (st_ == PB_OK) st_ = pb_session_prefill(s, prompt, INT64_MAX));
    expect_st("pb_session_prefill(n INT64_MAX) after 4 tokens", PB_ERR_CONTEXT_FULL, "context full", NULL, NULL);
    RUN(st_ = pb_session_prefill(s, prompt, 4);
        if (st_ == PB_OK) st_ = pb_session_generate(s, prompt, INT64_MAX - 2, &gp, NULL, NULL, NULL));
    expect_st("pb_session_generate(n_prompt INT64_MAX - 2) after 4 tokens", PB_ERR_CONTEXT_FULL, "context full", NULL,
              NULL);
    RUN(st_ = pb_session_prefill(s, prompt, 65));
    expect_st("pb_session_prefill(n 65 > n_ctx 64)", PB_ERR_CONTEXT_FULL, "context full", NULL, NULL);
    RUN(st_ = pb_session_prefill(s, bad_neg, 2); KEPT(0));
    expect_st("pb_session_prefill(id -1) feeds nothing", PB_ERR_INVALID_ARG, "-1", "vocabulary", NULL);
    RUN(st_ = pb_session_prefill(s, bad_big, 2); KEPT(0));
    expect_st("pb_session_prefill(id n_vocab) feeds nothing", PB_ERR_INVALID_ARG, "vocabulary", NULL, NULL);
    RUN(st_ = pb_session_prefill(s, bad_min, 1));
    expect_st("pb_session_prefill(id INT32_MIN)", PB_ERR_INVALID_ARG, "vocabulary", NULL, NULL);
    RUN(st_ = pb_session_prefill(s, NULL, 0));
    expect_st("pb_session_prefill(ids NULL, n 0)", PB_OK, NULL, NULL, NULL);
    RUN(pb_session_cancel(s); st_ = pb_session_prefill(s, prompt, 4); KEPT(4));
    expect_st("pb_session_prefill after pb_session_cancel (a cancel from before is cleared)", PB_OK, NULL, NULL, NULL);
    {
        pb_session *sh = NULL;
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = 64;
        sp.n_threads = 1;
        sp.ctx_policy = PB_CTX_SHIFT;
        CHECK(pb_session_new(m, &sp, &sh) == PB_OK, "a PB_CTX_SHIFT session: %s", pb_last_error());
        /* a refused call changes nothing: no shift, no pending token fed, before the ids are found bad */
        int32_t many[60], bad_tail[10];
        for (int i = 0; i < 60; i++) many[i] = 10 + i;
        for (int i = 0; i < 10; i++) bad_tail[i] = i == 9 ? nv : 5;
        RUN(st_ = pb_session_prefill(sh, many, 60); if (st_ == PB_OK) st_ = pb_session_prefill(sh, bad_tail, 10);
            if (pb_session_n_past(sh) != 60)
                BROKE("the context changed: n_past %lld, was 60", (long long)pb_session_n_past(sh)));
        expect_st("pb_session_prefill(a bad id last) with PB_CTX_SHIFT and a full context shifts nothing",
                  PB_ERR_INVALID_ARG, "pb_session_prefill", "vocabulary", NULL);
        RUN(st_ = pb_session_prefill(sh, many, 60);
            if (st_ == PB_OK) st_ = pb_session_generate(sh, bad_tail, 10, &gp, NULL, NULL, NULL);
            if (pb_session_n_past(sh) != 60)
                BROKE("the context changed: n_past %lld, was 60", (long long)pb_session_n_past(sh)));
        expect_st("pb_session_generate(a bad id last) with PB_CTX_SHIFT and a full context shifts nothing",
                  PB_ERR_INVALID_ARG, "pb_session_generate", "vocabulary", NULL);
        RUN(st_ = pb_session_prefill(sh, many, 60); if (st_ == PB_OK) st_ = pb_session_prefill(sh, many, 10);
            if (pb_session_n_past(sh) > 64) BROKE("n_past %lld > n_ctx", (long long)pb_session_n_past(sh)));
        expect_st("pb_session_prefill(10 more) with PB_CTX_SHIFT and no chat turns: a shift makes room", PB_OK, NULL,
                  NULL, NULL);
        RUN(st_ = pb_session_prefill(sh, prompt, 4); if (st_ == PB_OK) st_ = pb_session_prefill(sh, prompt, INT64_MAX));
        expect_st("pb_session_prefill(n INT64_MAX) with PB_CTX_SHIFT", PB_ERR_CONTEXT_FULL, "context full", NULL, NULL);
        RUN(st_ = pb_session_prefill(sh, prompt, 4);
            if (st_ == PB_OK) st_ = pb_session_generate(sh, prompt, INT64_MAX / 2, &gp, NULL, NULL, NULL));
        expect_st("pb_session_generate(n_prompt INT64_MAX / 2) with PB_CTX_SHIFT", PB_ERR_CONTEXT_FULL, "context full",
                  NULL, NULL);
        pb_session_free(sh);
    }

    /* generate */
    RUN(st_ = pb_session_generate(NULL, prompt, 4, &gp, NULL, NULL, &gs));
    expect_st("pb_session_generate(session NULL)", PB_ERR_INVALID_ARG, "pb_session_generate", "session", NULL);
    RUN(st_ = pb_session_generate(s, NULL, 4, &gp, NULL, NULL, &gs));
    expect_st("pb_session_generate(prompt NULL, n_prompt 4)", PB_ERR_INVALID_ARG, "pb_session_generate", "prompt",
              NULL);
    RUN(st_ = pb_session_generate(s, prompt, -1, &gp, NULL, NULL, &gs));
    expect_st("pb_session_generate(n_prompt -1)", PB_ERR_INVALID_ARG, "pb_session_generate", "n_prompt", NULL);
    RUN(st_ = pb_session_generate(s, prompt, 4, NULL, NULL, NULL, &gs);
        if (gs.stop_reason != PB_STOP_ERROR) BROKE("stats stop_reason %d", gs.stop_reason));
    expect_st("pb_session_generate(params NULL) (stats: error)", PB_ERR_INVALID_ARG, "params", NULL, NULL);
    RUN(st_ = pb_session_generate(s, prompt, INT64_MAX, &gp, NULL, NULL, &gs));
    expect_st("pb_session_generate(n_prompt INT64_MAX)", PB_ERR_CONTEXT_FULL, "context full", NULL, NULL);
    RUN(st_ = pb_session_generate(s, bad_big, 2, &gp, NULL, NULL, NULL));
    expect_st("pb_session_generate(a prompt id n_vocab)", PB_ERR_INVALID_ARG, "vocabulary", NULL, NULL);
    RUN(st_ = pb_session_generate(s, NULL, 0, &gp, NULL, NULL, NULL));
    expect_st("pb_session_generate(an empty session, no prompt)", PB_ERR_INVALID_ARG, "empty", NULL, NULL);
    RUN(pb_session_cancel(s); st_ = pb_session_generate(s, prompt, 4, &gp, piece_cb, NULL, &gs);
        if (gs.n_generated != 4) BROKE("%lld tokens generated", (long long)gs.n_generated));
    expect_st("pb_session_generate after pb_session_cancel (cleared: 4 tokens)", PB_OK, NULL, NULL, NULL);
    RUN(st_ = pb_session_generate(s, prompt, 4, &gp, NULL, NULL, NULL); int64_t before = pb_session_n_past(s);
        if (st_ == PB_OK) st_ = pb_session_prefill(s, bad_big, 2); if (pb_session_n_past(s) != before) BROKE(
            "the pending token was fed: n_past %lld, was %lld", (long long)pb_session_n_past(s), (long long)before));
    expect_st("pb_session_prefill(a bad id) after a generation feeds nothing (the pending token waits)",
              PB_ERR_INVALID_ARG, "pb_session_prefill", "vocabulary", NULL);
    gp.max_tokens = 0;
    RUN(st_ = pb_session_generate(s, prompt, 4, &gp, NULL, NULL, NULL); val_ = pb_session_n_past(s));
    expect_st("pb_session_generate(max_tokens 0) runs to the end of the context", PB_ERR_CONTEXT_FULL, "context full",
              NULL, NULL);
    gp.max_tokens = 4;
    {
        pb_gen_params bias = greedy(2);
        static const int32_t bid[1] = {7};
        static const float binf[1] = {INFINITY};
        bias.sampler.temperature = 0.8f;
        bias.sampler.n_bias = 1;
        bias.sampler.bias_ids = bid;
        bias.sampler.bias_values = binf;
        RUN(st_ = pb_session_generate(s, prompt, 4, &bias, NULL, NULL, &gs));
        expect_st("pb_session_generate(a +inf logit bias, sampled)", PB_OK, NULL, NULL, NULL);
    }

    /* chat */
    RUN(st_ = pb_session_chat(NULL, NULL, "hi", &gp, NULL, NULL, &gs));
    expect_st("pb_session_chat(session NULL)", PB_ERR_INVALID_ARG, "pb_session_chat", "session", NULL);
    RUN(st_ = pb_session_chat(s, "sys", NULL, &gp, NULL, NULL, &gs));
    expect_st("pb_session_chat(user_text NULL)", PB_ERR_INVALID_ARG, "pb_session_chat", "user_text", NULL);
    RUN(st_ = pb_session_chat(s, NULL, "hi", NULL, NULL, NULL, NULL));
    expect_st("pb_session_chat(params NULL)", PB_ERR_INVALID_ARG, "params", NULL, NULL);
    RUN(pb_session_cancel(s); st_ = pb_session_chat(s, NULL, "hi", &gp, NULL, NULL, NULL));
    expect_st("pb_session_chat after pb_session_cancel", PB_OK, NULL, NULL, NULL);
    {
        static char longtext[4000];
        memset(longtext, 'a', sizeof longtext - 1);
        for (size_t i = 0; i + 1 < sizeof longtext; i += 2) longtext[i] = ' ';
        RUN(st_ = pb_session_chat(s, NULL, longtext, &gp, NULL, NULL, NULL); val_ = pb_session_n_past(s));
        expect_st("pb_session_chat(a turn longer than n_ctx)", PB_ERR_CONTEXT_FULL, "context full", NULL, NULL);
    }

    /* truncate and prefix reuse, on a session holding 4 tokens */
    CHECK(pb_session_prefill(s, prompt, 4) == PB_OK, "prefill 4 tokens: %s", pb_last_error());
    RUN(st_ = pb_session_truncate(NULL, 0));
    expect_st("pb_session_truncate(session NULL)", PB_ERR_INVALID_ARG, "pb_session_truncate", "session", NULL);
    static const int64_t bad_n[] = {-1, 5, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof bad_n / sizeof *bad_n; i++) {
        char what[96];
        snprintf(what, sizeof what, "pb_session_truncate(n %lld, n_past 4) keeps the context", (long long)bad_n[i]);
        RUN(st_ = pb_session_truncate(s, bad_n[i]); KEPT(4));
        expect_st(what, PB_ERR_INVALID_ARG, "pb_session_truncate", "n ", NULL);
    }
    RUN(pb_session_cancel(s); st_ = pb_session_truncate(s, 2);
        if (pb_session_n_past(s) != 2) BROKE("n_past %lld, not 2", (long long)pb_session_n_past(s)));
    expect_st("pb_session_truncate(2) after pb_session_cancel", PB_OK, NULL, NULL, NULL);
    RUN(st_ = pb_session_pop_turn(NULL));
    expect_st("pb_session_pop_turn(session NULL)", PB_ERR_INVALID_ARG, "pb_session_pop_turn", "session", NULL);
    RUN(st_ = pb_session_pop_turn(s));
    expect_st("pb_session_pop_turn(no chat turn)", PB_ERR_INVALID_ARG, "pb_session_pop_turn", "no chat turn", NULL);
    RUN(st_ = pb_session_reuse_prefix(NULL, prompt, 4, &k));
    expect_st("pb_session_reuse_prefix(session NULL)", PB_ERR_INVALID_ARG, "pb_session_reuse_prefix", "session", NULL);
    RUN(st_ = pb_session_reuse_prefix(s, NULL, 4, &k));
    expect_st("pb_session_reuse_prefix(ids NULL, n 4)", PB_ERR_INVALID_ARG, "pb_session_reuse_prefix", "ids", NULL);
    RUN(st_ = pb_session_reuse_prefix(s, prompt, 4, NULL));
    expect_st("pb_session_reuse_prefix(n_kept NULL)", PB_ERR_INVALID_ARG, "pb_session_reuse_prefix", "n_kept", NULL);
    RUN(st_ = pb_session_reuse_prefix(s, prompt, -1, &k); KEPT(4));
    expect_st("pb_session_reuse_prefix(n -1) keeps the context", PB_ERR_INVALID_ARG, "pb_session_reuse_prefix", "n ",
              NULL);
    RUN(st_ = pb_session_reuse_prefix(s, prompt, INT64_MIN, &k); KEPT(4));
    expect_st("pb_session_reuse_prefix(n INT64_MIN) keeps the context", PB_ERR_INVALID_ARG, "pb_session_reuse_prefix",
              "n ", NULL);
    {
        int32_t longer[100];
        for (int i = 0; i < 100; i++) longer[i] = i < 4 ? prompt[i] : 500 + i;
        RUN(st_ = pb_session_reuse_prefix(s, longer, 100, &k); if (k != 4) BROKE("n_kept %lld, not 4", (long long)k);
            if (st_ == PB_OK) st_ = pb_session_prefill(s, longer + k, 100 - k));
        expect_st("pb_session_reuse_prefix(n 100 > n_ctx 64) keeps 4, feeding the rest is context full",
                  PB_ERR_CONTEXT_FULL, "context full", NULL, NULL);
    }

    /* state: sizes, buffers, garbage, other models */
    size_t need = 0, len = 0;
    CHECK(pb_session_state_size(s, &need) == PB_OK && need > 128, "pb_session_state_size: %zu", need);
    uint8_t *buf = malloc(need + 64);
    RUN(st_ = pb_session_state_size(NULL, &need));
    expect_st("pb_session_state_size(session NULL)", PB_ERR_INVALID_ARG, "pb_session_state_size", "session", NULL);
    RUN(st_ = pb_session_state_size(s, NULL));
    expect_st("pb_session_state_size(out NULL)", PB_ERR_INVALID_ARG, "pb_session_state_size", "out", NULL);
    RUN(st_ = pb_session_state_write(NULL, buf, need, &len));
    expect_st("pb_session_state_write(session NULL)", PB_ERR_INVALID_ARG, "pb_session_state_write", "session", NULL);
    RUN(st_ = pb_session_state_write(s, NULL, need, &len));
    expect_st("pb_session_state_write(buf NULL, cap > 0)", PB_ERR_INVALID_ARG, "pb_session_state_write", "buf", NULL);
    RUN(st_ = pb_session_state_write(s, buf, 10, &len);
        val_ = st_ == PB_ERR_INVALID_ARG && len == need && strstr(pb_last_error(), "pb_session_state_write"));
    expect_val("pb_session_state_write(cap 10) gives the size needed", 1);
    RUN(st_ = pb_session_state_write(s, buf, 0, NULL));
    expect_st("pb_session_state_write(cap 0, len_out NULL)", PB_ERR_INVALID_ARG, "pb_session_state_write", "cap", NULL);
    CHECK(pb_session_state_write(s, buf, need, &len) == PB_OK && len == need, "pb_session_state_write: %s",
          pb_last_error());
    RUN(st_ = pb_session_state_read(NULL, buf, need));
    expect_st("pb_session_state_read(session NULL)", PB_ERR_INVALID_ARG, "pb_session_state_read", "session", NULL);
    RUN(st_ = pb_session_state_read(s, NULL, need));
    expect_st("pb_session_state_read(buf NULL, len > 0)", PB_ERR_INVALID_ARG, "pb_session_state_read", "buf", NULL);
    static const size_t short_len[] = {0, 1, 8, 127, 128};
    for (size_t i = 0; i < sizeof short_len / sizeof *short_len; i++) {
        char what[96];
        snprintf(what, sizeof what, "pb_session_state_read(the first %zu bytes) keeps the session", short_len[i]);
        RUN(st_ = pb_session_state_read(s, buf, short_len[i]); KEPT(4));
        expect_st(what, PB_ERR_FORMAT, "session", NULL, NULL);
    }
    {
        /* crafted headers and payloads with a valid checksum: each field's own check answers, the session stays */
        uint8_t *c = malloc(need);
        RUN(memcpy(c, buf, need); reseal(c, need); st_ = pb_session_state_read(s, c, need));
        expect_st("pb_session_state_read(resealed unchanged: the checksum copy agrees)", PB_OK, NULL, NULL, NULL);
        uint32_t n_past32;
        memcpy(&n_past32, buf + 56, 4);
#define CRAFT(desc, edit, want, word)                                                                                  \
    do {                                                                                                               \
        RUN(memcpy(c, buf, need); edit; reseal(c, need); st_ = pb_session_state_read(s, c, need); KEPT(4));            \
        expect_st("pb_session_state_read(" desc ") keeps the session", want, word, NULL, NULL);                        \
    } while (0)
        CRAFT("version 2", put32(c + 8, 2), PB_ERR_FORMAT, "version");
        CRAFT("header bytes 64", put32(c + 12, 64), PB_ERR_FORMAT, "version");
        CRAFT("n_vocab 5", put32(c + 104, 5), PB_ERR_MISMATCH, "n_vocab");
        CRAFT("kv_type 9", put32(c + 52, 9), PB_ERR_MISMATCH, "KV");
        CRAFT("n_past 2^40", put64(c + 56, 1ull << 40), PB_ERR_MISMATCH, "n_ctx");
        CRAFT("n_turns n_past + 1", put32(c + 64, n_past32 + 1), PB_ERR_FORMAT, "inconsistent");
        CRAFT("n_turns 2^31", put32(c + 64, 1u << 31), PB_ERR_FORMAT, "inconsistent");
        CRAFT("pending n_vocab", put32(c + 68, (uint32_t)nv), PB_ERR_FORMAT, "inconsistent");
        CRAFT("pending -2", put32(c + 68, (uint32_t)-2), PB_ERR_FORMAT, "inconsistent");
        CRAFT("n_keep n_past + 1", put64(c + 72, n_past32 + 1ull), PB_ERR_FORMAT, "inconsistent");
        CRAFT("flags 6", put32(c + 108, 6), PB_ERR_FORMAT, "inconsistent");
        CRAFT("kv bytes 2^63", put64(c + 80, 1ull << 63), PB_ERR_FORMAT, "sizes");
        CRAFT("kv bytes - 8", put64(c + 80, rd64(c + 80) - 8), PB_ERR_FORMAT, "sizes");
        CRAFT("logits flag off", put32(c + 108, 0), PB_ERR_FORMAT, "sizes");
        CRAFT("token -5 in the payload", put32(c + 128 + 4, (uint32_t)-5), PB_ERR_FORMAT, "vocabulary");
        CRAFT("token n_vocab in the payload", put32(c + 128, (uint32_t)nv), PB_ERR_FORMAT, "vocabulary");
        /* the KV part: after tokens (n_past x 4), turns (none here) and logits (n_vocab x 4) */
        size_t kv_at = 128 + (size_t)n_past32 * 4 + (size_t)nv * 4;
        CRAFT("KV magic damaged", c[kv_at] ^= 0x20, PB_ERR_FORMAT, "KV");
        CRAFT("KV positions 3 (header says 4)", put32(c + kv_at + 20, 3), PB_ERR_FORMAT, "KV");
        CRAFT("KV positions 2^31", put32(c + kv_at + 20, 1u << 31), PB_ERR_FORMAT, "KV");
        CRAFT("KV layer count 1", put32(c + kv_at + 12, 1), PB_ERR_MISMATCH, "KV");
        CRAFT("KV layer 0 rows 2^31", put32(c + kv_at + 24 + 4, 1u << 31), PB_ERR_FORMAT, "KV");
#undef CRAFT
        free(c);
    }
    RUN(st_ = pb_session_state_read(s, NULL, 0));
    expect_st("pb_session_state_read(NULL, 0)", PB_ERR_FORMAT, "session", NULL, NULL);
    RUN(st_ = pb_session_state_read(s, buf, need - 1));
    expect_st("pb_session_state_read(one byte short)", PB_ERR_FORMAT, "truncated", NULL, NULL);
    {
        uint8_t *garbage = malloc(need);
        for (size_t i = 0; i < need; i++) garbage[i] = (uint8_t)(i * 131 + 7);
        RUN(st_ = pb_session_state_read(s, garbage, need));
        expect_st("pb_session_state_read(garbage)", PB_ERR_FORMAT, "not a pocketbrain session", NULL, NULL);
        memcpy(garbage, buf, 128); /* a valid header over garbage: the checksum catches it */
        RUN(st_ = pb_session_state_read(s, garbage, need); KEPT(4));
        expect_st("pb_session_state_read(a header over garbage)", PB_ERR_FORMAT, "checksum", NULL, NULL);
        free(garbage);
    }
    {
        /* another model, another KV type, a longer context */
        pb_session *o = new_session(m2, 64, PB_KV_F16), *q = new_session(m, 64, PB_KV_Q8_0),
                   *big = new_session(m, 128, PB_KV_F16);
        int32_t many[100];
        for (int i = 0; i < 100; i++) many[i] = 10 + i;
        if (o && q && big && pb_session_prefill(o, prompt, 4) == PB_OK && pb_session_prefill(q, prompt, 4) == PB_OK &&
            pb_session_prefill(big, many, 100) == PB_OK) {
            size_t no = 0, nq = 0, nb = 0;
            pb_session_state_size(o, &no);
            pb_session_state_size(q, &nq);
            pb_session_state_size(big, &nb);
            uint8_t *bo = malloc(no), *bq = malloc(nq), *bb = malloc(nb);
            pb_session_state_write(o, bo, no, &no);
            pb_session_state_write(q, bq, nq, &nq);
            pb_session_state_write(big, bb, nb, &nb);
            RUN(st_ = pb_session_state_read(s, bo, no); KEPT(4));
            expect_st("pb_session_state_read(another model's state)", PB_ERR_MISMATCH, "another model", NULL, NULL);
            RUN(st_ = pb_session_state_read(s, bq, nq); KEPT(4));
            expect_st("pb_session_state_read(a q8_0 KV state into f16)", PB_ERR_MISMATCH, "KV", NULL, NULL);
            RUN(st_ = pb_session_state_read(s, bb, nb); KEPT(4));
            expect_st("pb_session_state_read(100 tokens into n_ctx 64)", PB_ERR_MISMATCH, "n_ctx", NULL, NULL);

            char other[256], garbage_file[256], empty[256];
            snprintf(other, sizeof other, "%s/other.pbs", dir);
            snprintf(garbage_file, sizeof garbage_file, "%s/garbage.gguf", dir);
            snprintf(empty, sizeof empty, "%s/empty.pbs", dir);
            write_file(empty, "", 0);
            CHECK(pb_session_save(o, other) == PB_OK, "save another model's session: %s", pb_last_error());
            RUN(st_ = pb_session_load(s, other); KEPT(4));
            expect_st("pb_session_load(a file of another model)", PB_ERR_MISMATCH, "another model", "other.pbs", NULL);
            RUN(st_ = pb_session_load(s, garbage_file));
            expect_st("pb_session_load(a file of garbage)", PB_ERR_FORMAT, "garbage.gguf", NULL, NULL);
            RUN(st_ = pb_session_load(s, empty));
            expect_st("pb_session_load(an empty file)", PB_ERR_FORMAT, "empty.pbs", NULL, NULL);
            RUN(st_ = pb_session_load(s, dir));
            expect_st("pb_session_load(a directory)", PB_ERR_IO, dir, NULL, NULL);
            RUN(st_ = pb_session_load(s, "/nonexistent/s.pbs"));
            expect_st("pb_session_load(a missing file)", PB_ERR_IO, "/nonexistent/s.pbs", NULL, NULL);
            free(bo), free(bq), free(bb);
        }
        pb_session_free(o);
        pb_session_free(q);
        pb_session_free(big);
    }
    RUN(st_ = pb_session_load(NULL, "x.pbs"));
    expect_st("pb_session_load(session NULL)", PB_ERR_INVALID_ARG, "pb_session_load", "session", NULL);
    RUN(st_ = pb_session_load(s, NULL));
    expect_st("pb_session_load(path NULL)", PB_ERR_INVALID_ARG, "pb_session_load", "path", NULL);
    RUN(st_ = pb_session_save(NULL, "x.pbs"));
    expect_st("pb_session_save(session NULL)", PB_ERR_INVALID_ARG, "pb_session_save", "session", NULL);
    RUN(st_ = pb_session_save(s, NULL));
    expect_st("pb_session_save(path NULL)", PB_ERR_INVALID_ARG, "pb_session_save", "path", NULL);
    RUN(st_ = pb_session_save(s, "/nonexistent/dir/s.pbs"));
    expect_st("pb_session_save(into a missing directory)", PB_ERR_IO, "/nonexistent/dir/s.pbs", NULL, NULL);
    RUN(st_ = pb_session_save(s, dir));
    expect_st("pb_session_save(over a directory)", PB_ERR_IO, dir, NULL, NULL);
    RUN(st_ = pb_session_save(s, ""));
    expect_st("pb_session_save(\"\")", PB_ERR_INVALID_ARG, "empty", NULL, NULL);
    free(buf);
    pb_session_free(s);
}

static void probe_memory(const char *path, const char *dir) {
    pb_mem_estimate est;
    pb_session_params sp = pb_session_default_params();
    RUN(st_ = pb_estimate_memory(NULL, &sp, 0, &est));
    expect_st("pb_estimate_memory(model_path NULL)", PB_ERR_INVALID_ARG, "pb_estimate_memory", "model_path", NULL);
    RUN(st_ = pb_estimate_memory(path, &sp, 0, NULL));
    expect_st("pb_estimate_memory(out NULL)", PB_ERR_INVALID_ARG, "pb_estimate_memory", "out", NULL);
    RUN(st_ = pb_estimate_memory(path, NULL, 0, &est); val_ = st_ == PB_OK && est.total > 0);
    expect_val("pb_estimate_memory(params NULL) uses the defaults", 1);
    RUN(st_ = pb_estimate_memory("/nonexistent/m.gguf", NULL, 0, &est));
    expect_st("pb_estimate_memory(a missing file)", PB_ERR_IO, "/nonexistent/m.gguf", NULL, NULL);
    RUN(st_ = pb_estimate_memory(dir, NULL, 0, &est));
    expect_st("pb_estimate_memory(a directory)", PB_ERR_IO, dir, NULL, NULL);
    RUN(st_ = pb_session_admit(NULL, &sp, 0, false, &est));
    expect_st("pb_session_admit(model_path NULL)", PB_ERR_INVALID_ARG, "pb_session_admit", "model_path", NULL);
    RUN(st_ = pb_session_admit(path, NULL, 0, false, &est));
    expect_st("pb_session_admit(params NULL)", PB_ERR_INVALID_ARG, "pb_session_admit", "params", NULL);
    RUN(st_ = pb_session_admit(path, &sp, SIZE_MAX, false, NULL));
    expect_st("pb_session_admit(out NULL, mem_limit SIZE_MAX)", PB_OK, NULL, NULL, NULL);
    RUN(st_ = pb_session_admit(path, &sp, 1, true, &est));
    expect_st("pb_session_admit(mem_limit 1 byte, fit)", PB_ERR_MEMORY_LIMIT, NULL, NULL, NULL);
#define MEM_CASE(desc, field_assign, word)                                                                             \
    do {                                                                                                               \
        sp = pb_session_default_params();                                                                              \
        field_assign;                                                                                                  \
        RUN(st_ = pb_estimate_memory(path, &sp, 0, &est));                                                             \
        expect_st("pb_estimate_memory(" desc ")", PB_ERR_INVALID_ARG, word, NULL, NULL);                               \
        RUN(st_ = pb_session_admit(path, &sp, 0, true, &est));                                                         \
        expect_st("pb_session_admit(" desc ")", PB_ERR_INVALID_ARG, word, NULL, NULL);                                 \
    } while (0)
    MEM_CASE("n_ctx -1", sp.n_ctx = -1, "n_ctx");
    MEM_CASE("n_ctx INT_MAX", sp.n_ctx = INT_MAX, "n_ctx");
    MEM_CASE("n_batch -1", sp.n_batch = -1, "n_batch");
    MEM_CASE("kv_type 7", sp.kv_type = (pb_kv_type)7, "kv_type");
    MEM_CASE("kv_type -1", sp.kv_type = (pb_kv_type)-1, "kv_type");
    MEM_CASE("ring_extra -1", sp.ring_extra = -1, "ring_extra");
#undef MEM_CASE
}

int main(void) {
    const char *path = pbt_fixture("model/gemma2-tiny-v.q8_0.gguf");
    const char *path2 = pbt_fixture("model/gemma2-tiny-v.q4_0.gguf");
    if (!path || !path2) TEST_DONE();
    shared_out = mmap(NULL, sizeof *shared_out, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared_out == MAP_FAILED) {
        CHECK(0, "mmap of the shared result");
        TEST_DONE();
    }
    char dir[] = "/tmp/pb_contract_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    snprintf(out_path, sizeof out_path, "%s/printed", dir);
    {
        char garbage[256];
        snprintf(garbage, sizeof garbage, "%s/garbage.gguf", dir);
        char junk[4096];
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 31 + 3);
        write_file(garbage, junk, sizeof junk);
    }
    pb_model_params mp = pb_model_default_params();
    mp.n_threads = 1;
    pb_model *m = NULL, *m2 = NULL;
    CHECK(pb_model_open(path, &mp, &m) == PB_OK, "open the q8_0 model: %s", pb_last_error());
    CHECK(pb_model_open(path2, &mp, &m2) == PB_OK, "open the q4_0 model: %s", pb_last_error());
    if (!m || !m2) TEST_DONE();

    probe_base();
    probe_model(path, m, dir);
    probe_vocab(path, m);
    probe_chat(m);
    probe_sampler(pb_vocab_size(pb_model_vocab(m)));
    probe_session_new(m, m2, dir);
    probe_session(m, m2, dir);
    probe_memory(path, dir);

    pb_model_close(m);
    pb_model_close(m2);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) NOTE("could not remove %s", dir);
    TEST_DONE();
}
