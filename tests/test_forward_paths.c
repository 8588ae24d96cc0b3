/* test_forward_paths.c -- prefill at once == chunks of 7 == token by token (past the sliding window), thread
 * count independence, and the F16 / Q8_0 / F32 KV cache types, on the llama.cpp-made tiny Gemma 2 files. */
#include "forward_common.h"

static pb_model *open_peer(const char *q) {
    char rel[128];
    snprintf(rel, sizeof rel, "model/gemma2-tiny-v.%s.gguf", q);
    const char *path = pbt_fixture(rel);
    pb_model *m = NULL;
    if (!path || pb_model_open(path, NULL, &m) != PB_OK) CHECK(0, "%s opens (%s)", q, pb_last_error());
    return m;
}

/* Prefill at once == chunks of 7 == token by token; 1 vs 2 threads (q4_0: quantized weights and activations). */
static void test_paths(const int32_t *toks) {
    pb_model *m = open_peer("q4_0");
    if (!m) return;
    int V = pb_model_hparams(m)->n_vocab;
    size_t n = (size_t)NT * V;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4), *d = malloc(n * 4);
    CHECK(run(m, toks, NT, NT, PB_KV_F16, 2, a) == PB_OK, "q4_0: batch 128");
    CHECK(run(m, toks, NT, 7, PB_KV_F16, 2, b) == PB_OK, "q4_0: chunks of 7");
    CHECK(run(m, toks, NT, 1, PB_KV_F16, 2, c) == PB_OK, "q4_0: token by token");
    CHECK(run(m, toks, NT, 32, PB_KV_F16, 1, d) == PB_OK, "q4_0: one thread, chunks of 32");
    cmp ab = compare(a, b, NT, V), ac = compare(a, c, NT, V), ad = compare(a, d, NT, V);
    float *ea = malloc(n * 4), *eb = malloc(n * 4);
    CHECK(run_ex(m, toks, NT, NT, PB_KV_F16, 2, true, ea) == PB_OK &&
              run_ex(m, toks, NT, 1, PB_KV_F16, 1, true, eb) == PB_OK,
          "q4_0 exact mode: batch on 2 threads, token by token on 1");
    cmp ee = compare(ea, eb, NT, V);
    report("exact: batch vs token by token", ee);
    CHECK(ee.max == 0.0, "exact mode: token by token on 1 thread == batch on 2 threads, bit for bit");
    free(ea);
    free(eb);
    report("batch vs chunks of 7", ab);
    report("batch vs token by token", ac);
    report("2 threads vs 1 thread (chunks 32)", ad);
    CHECK(ab.max <= 1e-4 && ab.top1 == NT, "chunked prefill == one batch (max|d| %.3g)", ab.max);
    CHECK(ac.max <= 1e-4 && ac.top1 == NT,
          "token-by-token decode == one batch over 128 positions, window 32 (max|d| %.3g)", ac.max);
    CHECK(ad.max <= 1e-4, "thread count does not change the result (max|d| %.3g)", ad.max);
    free(a);
    free(b);
    free(c);
    free(d);
    pb_model_close(m);
}

/* Contexts longer than one attention block (128 keys): decode splits the keys over threads in blocks and
 * merges them; prefill walks the same blocks. 200 positions = the 128 tokens then 72 of them again. */
static void test_blocks(const int32_t *toks) {
    pb_model *m = open_peer("q4_0");
    if (!m) return;
    enum { N2 = 200 };
    int32_t t2[N2];
    for (int i = 0; i < N2; i++) t2[i] = toks[i % NT];
    int V = pb_model_hparams(m)->n_vocab;
    float *a = malloc(sizeof(float) * N2 * (size_t)V), *b = malloc(sizeof(float) * N2 * (size_t)V),
          *c1 = malloc(sizeof(float) * N2 * (size_t)V);
    pb_status s1 = run(m, t2, N2, N2, PB_KV_F16, 2, a), s2 = run(m, t2, N2, 1, PB_KV_F16, 2, b),
              s3 = run(m, t2, N2, 1, PB_KV_F16, 1, c1);
    CHECK(s1 == PB_OK && s2 == PB_OK && s3 == PB_OK, "200 positions: batch, token by token on 2 and 1 threads");
    cmp c = compare(a, b, N2, V), split = compare(b, c1, N2, V);
    NOTE("200 positions, batch vs token by token: max|d| %.3g top-1 %d/%d", c.max, c.top1, N2);
    NOTE("200 positions, decode with key blocks split over 2 threads vs walked by 1: max|d| %.3g", split.max);
    CHECK(split.max == 0.0, "decode over key blocks split across threads == one thread, bit for bit");
    CHECK(c.max <= 1e-4 && c.top1 == N2, "200 positions: token by token == one batch (max|d| %.3g)", c.max);
    free(c1);
    free(a);
    free(b);
    pb_model_close(m);
}

/* KV cache types on the f16 file (float weights, so the KV rounding is all that differs). */
static void test_kv_types(const int32_t *toks) {
    pb_model *m = open_peer("f16");
    if (!m) return;
    int V = pb_model_hparams(m)->n_vocab;
    size_t n = (size_t)NT * V;
    float *a = malloc(n * 4), *e = malloc(n * 4), *f = malloc(n * 4);
    CHECK(run(m, toks, NT, NT, PB_KV_F16, 2, a) == PB_OK, "f16: F16 KV");
    CHECK(run(m, toks, NT, NT, PB_KV_F32, 2, e) == PB_OK, "f16: F32 KV");
    CHECK(run(m, toks, NT, NT, PB_KV_Q8_0, 2, f) == PB_OK, "f16: Q8_0 KV (%s)", pb_last_error());
    cmp f16_f32 = compare(a, e, NT, V), q8_f32 = compare(f, e, NT, V), q8_f16 = compare(f, a, NT, V);
    report("F16 KV vs F32 KV", f16_f32);
    report("Q8_0 KV vs F32 KV", q8_f32);
    report("Q8_0 KV vs F16 KV", q8_f16);
    CHECK(f16_f32.max > 0.0 && f16_f32.max < 0.1 && f16_f32.top1 >= NT - 2, "F16 KV close to (not equal to) F32 KV");
    CHECK(q8_f32.max > f16_f32.max && q8_f32.max < 1.5 && q8_f32.mean < 0.1 && q8_f32.top1 >= NT - 8,
          "Q8_0 KV close to F32 KV, coarser than F16");
    size_t b16, b8, b32;
    pb_kv_cache *k1 = NULL, *k2 = NULL, *k3 = NULL;
    pb_kv_new(m, 256, PB_KV_F16, &k1);
    pb_kv_new(m, 256, PB_KV_Q8_0, &k2);
    pb_kv_new(m, 256, PB_KV_F32, &k3);
    b16 = pb_kv_bytes(k1);
    b8 = pb_kv_bytes(k2);
    b32 = pb_kv_bytes(k3);
    NOTE("KV bytes at n_ctx 256: f32 %zu, f16 %zu, q8_0 %zu", b32, b16, b8);
    CHECK(b32 == 2 * b16 && b8 * 64 == b16 * 34, "KV sizes: f32 = 2 x f16, q8_0 = 34/64 of f16");
    pb_kv_free(k1);
    pb_kv_free(k2);
    pb_kv_free(k3);
    free(a);
    free(e);
    free(f);
    pb_model_close(m);
}

int main(void) {
    int32_t toks[NT];
    if (!pbt_fixture("model/tokens.bin")) TEST_DONE();
    CHECK(read_tokens(toks), "tokens.bin");
    test_paths(toks);
    test_blocks(toks);
    test_kv_types(toks);
    TEST_DONE();
}
