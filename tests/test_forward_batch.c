/* test_forward_batch.c -- pb_forward_batch: n sequences decoded in one step == each decoded alone with pb_forward
 * (logits and KV states bit for bit), on synth tiny Gemma 1-4 models; every refused call changes no cache. */
#include "pb_test.h"

#include "base/base.h"
#include "model/model.h"

enum { NSEQ = 7, STEPS = 20, NCTX = 96 };

static pb_model *synth(const char *arch, const char *type) {
    const char *bin = getenv("PB_BIN") ? getenv("PB_BIN") : "build/pocketbrain";
    char path[256], cmd[768];
    snprintf(path, sizeof path, "/tmp/pb_fb_%d_%s_%s.gguf", (int)getpid(), arch, type);
    snprintf(cmd, sizeof cmd, "%s synth --arch %s --size tiny --type %s -o %s >/dev/null 2>&1", bin, arch, type, path);
    pb_model *m = NULL;
    if (system(cmd) != 0 || pb_model_open(path, NULL, &m) != PB_OK) {
        CHECK(0, "synth %s %s opens (%s)", arch, type, pb_last_error());
        m = NULL;
    }
    unlink(path);
    return m;
}

static int tok_of(int seq, int t, int V) { return (int)((seq * 7919u + (unsigned)t * 104729u + 13u) % (unsigned)V); }

static bool same_state(pb_kv_cache *a, pb_kv_cache *b) {
    size_t na = pb_kv_state_size(a), nb = pb_kv_state_size(b), la = 0, lb = 0;
    if (na != nb) return false;
    void *x = malloc(na), *y = malloc(nb);
    bool ok = pb_kv_state_write(a, x, na, &la) == PB_OK && pb_kv_state_write(b, y, nb, &lb) == PB_OK && la == lb &&
              memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return ok;
}

/* k sequences with prompts of different lengths (some past the sliding window), then STEPS batched steps where the
 * active set changes (1, 2, 3, 7 sequences), against the same decoded one at a time. */
static void test_parity(const char *arch, const char *type, bool exact, pb_pool *pool) {
    pb_model *m = synth(arch, type);
    if (!m) return;
    int V = pb_model_hparams(m)->n_vocab;
    pb_kv_cache *ka[NSEQ] = {0}, *kb[NSEQ] = {0};
    pb_forward_ctx *fa = NULL, *fb = NULL;
    float *la = malloc((size_t)NSEQ * V * 4), *lb = malloc((size_t)NSEQ * V * 4);
    int32_t prompt[64];
    static const int plen[NSEQ] = {3, 40, 17, 1, 60, 9, 33};
    bool ok = pb_forward_ctx_new(m, 64, &fa) == PB_OK && pb_forward_ctx_new(m, 64, &fb) == PB_OK;
    pb_forward_set_exact(fa, exact);
    pb_forward_set_exact(fb, exact);
    for (int i = 0; ok && i < NSEQ; i++) {
        ok = pb_kv_new(m, NCTX, PB_KV_F16, &ka[i]) == PB_OK && pb_kv_new(m, NCTX, PB_KV_F16, &kb[i]) == PB_OK;
        for (int t = 0; t < plen[i]; t++) prompt[t] = tok_of(i, t, V);
        ok = ok && pb_forward(m, ka[i], fa, pool, prompt, plen[i], la, false, NULL) == PB_OK &&
             pb_forward(m, kb[i], fb, pool, prompt, plen[i], lb, false, NULL) == PB_OK;
    }
    bool same = ok;
    int steps = 0;
    for (int s = 0; ok && s < STEPS; s++) {
        static const int sets[4] = {1, 2, 3, 7};
        int n = sets[s % 4];
        pb_kv_cache *kvs[NSEQ];
        int32_t toks[NSEQ];
        for (int i = 0; i < n; i++) {
            int q = (i + s) % NSEQ; /* sequences join and leave between steps */
            kvs[i] = ka[q];
            toks[i] = tok_of(q, 100 + s, V);
            ok = ok && pb_forward(m, kb[q], fb, pool, &toks[i], 1, lb + (size_t)i * V, false, NULL) == PB_OK;
        }
        ok = ok && pb_forward_batch(m, kvs, fa, pool, toks, n, la, NULL) == PB_OK;
        same = same && ok && memcmp(la, lb, (size_t)n * V * 4) == 0;
        steps += ok;
    }
    bool states = ok;
    for (int i = 0; ok && i < NSEQ; i++)
        states = states && pb_kv_n_past(ka[i]) == pb_kv_n_past(kb[i]) && same_state(ka[i], kb[i]);
    CHECK(ok && steps == STEPS, "%s %s%s%s: %d batched steps run (%s)", arch, type, exact ? " exact" : "",
          pool ? " pool 2" : "", steps, ok ? "" : pb_last_error());
    CHECK(same, "%s %s%s%s: batched logits == one at a time, bit for bit", arch, type, exact ? " exact" : "",
          pool ? " pool 2" : "");
    CHECK(states, "%s %s%s%s: KV states identical", arch, type, exact ? " exact" : "", pool ? " pool 2" : "");
    for (int i = 0; i < NSEQ; i++) {
        pb_kv_free(ka[i]);
        pb_kv_free(kb[i]);
    }
    pb_forward_ctx_free(fa);
    pb_forward_ctx_free(fb);
    free(la);
    free(lb);
    pb_model_close(m);
}

static void test_errors(void) {
    pb_model *m = synth("gemma2", "q8_0");
    if (!m) return;
    int V = pb_model_hparams(m)->n_vocab;
    pb_kv_cache *kv[3] = {0};
    pb_forward_ctx *fc = NULL;
    float *lg = malloc((size_t)70 * V * 4);
    int32_t toks[70] = {0}, one = 5;
    CHECK(pb_forward_ctx_new(m, 2, &fc) == PB_OK, "scratch of 2");
    for (int i = 0; i < 3; i++) CHECK(pb_kv_new(m, 8, PB_KV_F16, &kv[i]) == PB_OK, "cache %d", i);
    pb_forward(m, kv[0], fc, NULL, &one, 1, lg, false, NULL);
    int32_t full[2] = {1, 2};
    for (int t = 0; t < 7; t++) pb_forward(m, kv[2], fc, NULL, &full[t & 1], 1, lg, false, NULL); /* 7 of 8 */
    pb_forward(m, kv[2], fc, NULL, &one, 1, lg, false, NULL);                                     /* full */
    size_t sz[3];
    void *before[3];
    int np[3];
    for (int i = 0; i < 3; i++) {
        sz[i] = pb_kv_state_size(kv[i]);
        before[i] = malloc(sz[i]);
        pb_kv_state_write(kv[i], before[i], sz[i], &sz[i]);
        np[i] = pb_kv_n_past(kv[i]);
    }
    pb_kv_cache *two[2] = {kv[0], kv[1]}, *dup[2] = {kv[0], kv[0]}, *withfull[2] = {kv[1], kv[2]};
    pb_kv_cache *many[70];
    for (int i = 0; i < 70; i++) many[i] = kv[i % 2];
    int32_t bad[2] = {1, V};
    int32_t top[2];
    CHECK(pb_forward_batch(m, two, fc, NULL, toks, 0, lg, NULL) == PB_ERR_INVALID_ARG, "n = 0");
    CHECK(pb_forward_batch(m, many, fc, NULL, toks, PB_FORWARD_BATCH_MAX + 1, lg, NULL) == PB_ERR_INVALID_ARG,
          "n > PB_FORWARD_BATCH_MAX");
    CHECK(pb_forward_batch(m, many, fc, NULL, toks, 3, lg, NULL) == PB_ERR_INVALID_ARG, "n > fc->n_batch");
    CHECK(pb_forward_batch(m, dup, fc, NULL, toks, 2, lg, NULL) == PB_ERR_INVALID_ARG, "one cache twice");
    CHECK(pb_forward_batch(m, withfull, fc, NULL, toks, 2, lg, NULL) == PB_ERR_CONTEXT_FULL &&
              strstr(pb_last_error(), "cache 1"),
          "a full cache: PB_ERR_CONTEXT_FULL naming it (%s)", pb_last_error());
    CHECK(pb_forward_batch(m, two, fc, NULL, bad, 2, lg, NULL) == PB_ERR_INVALID_ARG, "a token outside the vocabulary");
    CHECK(pb_forward_batch(m, two, fc, NULL, toks, 2, lg, top) == PB_ERR_UNSUPPORTED, "top on the CPU");
    bool unchanged = true;
    for (int i = 0; i < 3; i++) {
        size_t n = pb_kv_state_size(kv[i]), l = 0;
        void *now = malloc(n);
        pb_kv_state_write(kv[i], now, n, &l);
        unchanged = unchanged && l == sz[i] && memcmp(now, before[i], l) == 0 && pb_kv_n_past(kv[i]) == np[i];
        free(now);
        free(before[i]);
    }
    CHECK(unchanged, "every refused call left every cache as it was (n_past and state)");
    CHECK(pb_forward_batch(m, two, fc, NULL, toks, 2, lg, NULL) == PB_OK && pb_kv_n_past(kv[0]) == np[0] + 1 &&
              pb_kv_n_past(kv[1]) == np[1] + 1,
          "a good call advances each n_past by one");
    for (int i = 0; i < 3; i++) pb_kv_free(kv[i]);
    pb_forward_ctx_free(fc);
    free(lg);
    pb_model_close(m);
}

int main(void) {
    pb_pool *pool = NULL;
    CHECK(pb_pool_new(2, &pool) == PB_OK, "pool of 2");
    static const char *arch[4] = {"gemma", "gemma2", "gemma3", "gemma4"};
    static const char *type[3] = {"q4_k_m", "q8_0", "f16"};
    for (int a = 0; a < 4; a++)
        for (int t = 0; t < 3; t++) {
            test_parity(arch[a], type[t], false, t == 0 ? NULL : pool);
            if (t != 1) test_parity(arch[a], type[t], true, t == 2 ? NULL : pool);
        }
    test_errors();
    pb_pool_free(pool);
    return pbt_failures != 0;
}
