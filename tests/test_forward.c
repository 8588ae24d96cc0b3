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
    float *ours = malloc(sizeof(float) * (size_t)NT * V), *o32 = malloc(sizeof(float) * (size_t)NT * V);
    double t0 = pb_time_ms();
    pb_status s = run(m, toks, NT, NT, PB_KV_F16, 2, ours);
    double t1 = pb_time_ms();
    CHECK(s == PB_OK, "%s: 128 tokens in one batch (F16 KV, 2 threads, %.0f ms) %s", q, t1 - t0, pb_last_error());
    bool is_f16 = strcmp(q, "f16") == 0;
    if (is_f16) CHECK(run(m, toks, NT, NT, PB_KV_F32, 2, o32) == PB_OK, "%s: F32 KV run", q);
    cmp ours_hf = compare(ours, hf, NT, V), lc_hf = compare(lcpp, hf, NT, V), ours_ref = compare(ours, ref, NT, V),
        lc_ref = compare(lcpp, ref, NT, V), ours_lc = compare(ours, lcpp, NT, V), o32_ref = compare(o32, ref, NT, V),
        o32_hf = compare(o32, hf, NT, V), ref_hf = compare(ref, hf, NT, V);
    NOTE("== %s", q);
    report("ours (F16 KV) vs HF", ours_hf);
    report("llama.cpp vs HF", lc_hf);
    if (is_f16) report("ours (F32 KV) vs HF", o32_hf);
    report("ref (quantization alone) vs HF", ref_hf);
    report("ours (F16 KV) vs ref", ours_ref);
    if (is_f16) report("ours (F32 KV) vs ref", o32_ref);
    report("llama.cpp vs ref", lc_ref);
    report("ours vs llama.cpp", ours_lc);
    /* Acceptance: not worse than llama.cpp's own HF error on the same file by more than 10%. */
    CHECK(ours_hf.max <= 1.10 * lc_hf.max && ours_hf.mean <= 1.10 * lc_hf.mean,
          "%s: ours-vs-HF (%.4g, %.4g) within 110%% of llama.cpp-vs-HF (%.4g, %.4g)", q, ours_hf.max, ours_hf.mean,
          lc_hf.max, lc_hf.mean);
    /* Close to the float64 forward of the same weights: no farther than llama.cpp is (both quantize the
     * activations for quantized weights); float weights: float32 rounding only. */
    if (is_f16) {
        CHECK(o32_ref.max < 2e-3 && o32_ref.top1 == NT, "f16: F32 KV vs float64 reference max|d| %.3g < 2e-3",
              o32_ref.max);
        CHECK(ours_ref.max < 0.05 && ours_ref.top1 >= NT - 1, "f16: F16 KV vs reference max|d| %.3g < 0.05",
              ours_ref.max);
    } else {
        CHECK(ours_ref.max <= 1.10 * lc_ref.max && ours_ref.mean <= 1.10 * lc_ref.mean,
              "%s: ours-vs-ref (%.4g, %.4g) within 110%% of llama.cpp-vs-ref (%.4g, %.4g)", q, ours_ref.max,
              ours_ref.mean, lc_ref.max, lc_ref.mean);
    }
    free(ours);
    free(o32);
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
