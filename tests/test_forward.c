/* test_forward.c -- our logits on the llama.cpp-made tiny Gemma 2 files vs llama.cpp, vs the float64 reference
 * of the same file and vs transformers (acceptance: within 110% of llama.cpp's own errors). */
#include "forward_common.h"

static void test_file(const char *q, const int32_t *toks, const float *hf) {
    char rel[128];
    snprintf(rel, sizeof rel, "model/gemma2-tiny-v.%s.gguf", q);
    const char *path = pbt_fixture(rel);
    snprintf(rel, sizeof rel, "model/logits.llamacpp.%s.f32", q);
    float *lcpp = read_f32(pbt_fixture(rel), (size_t)NT * 4096);
    snprintf(rel, sizeof rel, "model/logits.ref.%s.f32", q);
    float *ref = read_f32(pbt_fixture(rel), (size_t)NT * 4096);
    pb_model *m = NULL;
    if (!path || !lcpp || !ref || pb_model_open(path, NULL, &m) != PB_OK) {
        CHECK(0, "%s: fixture files and model open (%s)", q, pb_last_error());
        free(lcpp);
        free(ref);
        return;
    }
    int V = pb_model_hparams(m)->n_vocab;
    size_t n = (size_t)NT * V;
    float *fast = malloc(sizeof(float) * n), *ex = malloc(sizeof(float) * n), *ex32 = malloc(sizeof(float) * n);
    double t0 = pb_time_ms();
    pb_status s1 = run_ex(m, toks, NT, NT, PB_KV_F16, 2, false, fast);
    double t1 = pb_time_ms();
    pb_status s2 = run_ex(m, toks, NT, NT, PB_KV_F16, 2, true, ex);
    double t2 = pb_time_ms();
    pb_status s3 = run_ex(m, toks, NT, NT, PB_KV_F32, 2, true, ex32);
    CHECK(s1 == PB_OK && s2 == PB_OK && s3 == PB_OK,
          "%s: 128 tokens in one batch: pb_matmul %.0f ms, exact %.0f ms (%s)", q, t1 - t0, t2 - t1, pb_last_error());
    cmp lc_hf = compare(lcpp, hf, NT, V), lc_ref = compare(lcpp, ref, NT, V), ref_hf = compare(ref, hf, NT, V);
    cmp ex_hf = compare(ex, hf, NT, V), ex_ref = compare(ex, ref, NT, V), ex32_ref = compare(ex32, ref, NT, V),
        ex32_hf = compare(ex32, hf, NT, V);
    cmp fa_hf = compare(fast, hf, NT, V), fa_ref = compare(fast, ref, NT, V), fa_lc = compare(fast, lcpp, NT, V);
    NOTE("== %s", q);
    report("llama.cpp vs HF", lc_hf);
    report("ref (quantization alone) vs HF", ref_hf);
    report("ours exact, F16 KV vs HF", ex_hf);
    report("ours exact, F32 KV vs HF", ex32_hf);
    report("ours pb_matmul, F16 KV vs HF", fa_hf);
    report("llama.cpp vs ref", lc_ref);
    report("ours exact, F16 KV vs ref", ex_ref);
    report("ours exact, F32 KV vs ref", ex32_ref);
    report("ours pb_matmul, F16 KV vs ref", fa_ref);
    report("ours pb_matmul vs llama.cpp", fa_lc);
    /* Acceptance: not worse than llama.cpp's own HF error on the same file by more than 10% (same F16 KV). */
    CHECK(ex_hf.max <= 1.10 * lc_hf.max && ex_hf.mean <= 1.10 * lc_hf.mean,
          "%s: exact ours-vs-HF (%.4g, %.4g) within 110%% of llama.cpp-vs-HF (%.4g, %.4g)", q, ex_hf.max, ex_hf.mean,
          lc_hf.max, lc_hf.mean);
    /* Close to the float64 forward of the same weights: float32 rounding only. */
    CHECK(ex32_ref.max < 2e-3 && ex32_ref.top1 == NT, "%s: exact F32 KV vs float64 reference max|d| %.3g < 2e-3", q,
          ex32_ref.max);
    /* pb_matmul quantizes activations like llama.cpp: its error is llama.cpp's kind of noise. Mean within 10%;
     * the max of that noise moves by ~10% with the summation order, so it gets 25%. */
    CHECK(fa_hf.mean <= 1.10 * lc_hf.mean && fa_hf.max <= 1.25 * lc_hf.max,
          "%s: pb_matmul ours-vs-HF (%.4g, %.4g): mean within 110%%, max within 125%% of llama.cpp's (%.4g, %.4g)", q,
          fa_hf.max, fa_hf.mean, lc_hf.max, lc_hf.mean);
    CHECK(fa_ref.mean <= 1.10 * lc_ref.mean && fa_ref.max <= 1.25 * lc_ref.max,
          "%s: pb_matmul ours-vs-ref (%.4g, %.4g) of the size of llama.cpp-vs-ref (%.4g, %.4g)", q, fa_ref.max,
          fa_ref.mean, lc_ref.max, lc_ref.mean);
    free(fast);
    free(ex);
    free(ex32);
    free(lcpp);
    free(ref);
    pb_model_close(m);
}

int main(void) {
    const char *tp = pbt_fixture("model/tokens.bin");
    const char *hp = pbt_fixture("model/logits.hf.f32");
    if (!tp || !hp) TEST_DONE();
    int32_t toks[NT];
    CHECK(read_tokens(toks), "tokens.bin");
    float *hf = read_f32(hp, (size_t)NT * 4096);
    CHECK(hf != NULL, "logits.hf.f32");
    if (!hf) TEST_DONE();
    const char *files[] = {"f16", "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) test_file(files[i], toks, hf);
    free(hf);
    TEST_DONE();
}
