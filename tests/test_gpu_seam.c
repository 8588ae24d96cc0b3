/* test_gpu_seam.c -- the GPU backend seam as a build without a usable GPU sees it: pb_model_params.gpu = 1 fails
 * with the reason through pb_status / pb_last_error ("built without CUDA" in a plain build), -1 (the default)
 * runs on the CPU and says why in pb_model_info.gpu_note, 0 stays quiet; the CPU results do not change. Gemma 4: a
 * dense model reaches the backend (the reason is the missing GPU, no longer its architecture); a MoE model is
 * refused by name before it (gpu = 1 fails naming the MoE layer, auto runs it on the CPU with that note). */
#include "pb_test.h"

#include <pocketbrain.h>

/* Gemma 4 micro files (tests/data/gguf, test_gemma4_ref --write-corpus). */
static void gemma4_seam(void) {
    const char *dense = "tests/data/gguf/gemma4_micro_e2b.gguf", *moe = "tests/data/gguf/gemma4_micro_moe.gguf";
    pb_model_params p = pb_model_default_params();
    pb_model *m = NULL;
    p.gpu = 1;
    pb_status st = pb_model_open(dense, &p, &m);
    if (st == PB_OK) { /* a GPU machine: gpu_parity covers it */
        pb_model_close(m);
    } else {
        CHECK(st == PB_ERR_UNSUPPORTED && !strstr(pb_last_error(), "Gemma 4"),
              "gemma4 dense, gpu = 1: only the missing GPU is named (%s)", pb_last_error());
    }
    m = NULL;
    st = pb_model_open(moe, &p, &m);
    CHECK(st == PB_ERR_UNSUPPORTED && m == NULL && strstr(pb_last_error(), "MoE") &&
              strstr(pb_last_error(), "blk.0.ffn_gate_inp"),
          "gemma4 MoE, gpu = 1: refused by name (%s: %s)", pb_status_name(st), pb_last_error());
    if (m) pb_model_close(m);
    m = NULL;
    p.gpu = -1;
    st = pb_model_open(moe, &p, &m);
    CHECK(st == PB_OK, "gemma4 MoE, gpu = -1: opens (%s)", pb_status_name(st));
    if (st) return;
    pb_model_info info;
    pb_model_get_info(m, &info);
    CHECK(!info.gpu && strstr(info.gpu_note, "MoE"), "gemma4 MoE, gpu = -1: on the CPU, note '%s'", info.gpu_note);
    pb_session *s = NULL;
    int32_t ids[3] = {1, 2, 3};
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 16;
    st = pb_session_new(m, &sp, &s);
    if (!st) st = pb_session_prefill(s, ids, 3);
    CHECK(st == PB_OK, "gemma4 MoE, gpu = -1: a session runs on the CPU (%s)", pb_status_name(st));
    pb_session_free(s);
    pb_model_close(m);
}

int main(void) {
    gemma4_seam();
    const char *path = pbt_fixture("model/gemma2-tiny-v.q4_0.gguf");
    if (!path) TEST_DONE();
    pb_model_params p = pb_model_default_params();
    CHECK(p.gpu == -1, "default params ask for the GPU when usable (gpu = %d)", p.gpu);
    pb_model *m = NULL;
    p.gpu = 1;
    pb_status st = pb_model_open(path, &p, &m);
    if (st == PB_OK) { /* a CUDA build on a GPU machine: the GPU tests (tests/gpu_parity.c) cover it */
        pb_model_info info;
        pb_model_get_info(m, &info);
        CHECK(info.gpu, "gpu = 1 opened on the GPU (%s)", info.gpu_name);
        pb_model_close(m);
        TEST_DONE();
    }
    CHECK(st == PB_ERR_UNSUPPORTED && m == NULL, "gpu = 1 without a usable GPU fails (%s)", pb_status_name(st));
    CHECK(strstr(pb_last_error(), "without CUDA") || strstr(pb_last_error(), "no CUDA device"),
          "the error names the reason: %s", pb_last_error());
    float first[2][8];
    for (int i = 0; i < 2; i++) {
        p.gpu = i ? 0 : -1;
        st = pb_model_open(path, &p, &m);
        CHECK(st == PB_OK, "gpu = %d opens on the CPU", p.gpu);
        if (st) continue;
        pb_model_info info;
        pb_model_get_info(m, &info);
        CHECK(!info.gpu && (i ? info.gpu_note[0] == 0 : info.gpu_note[0] != 0), "gpu = %d: CPU, note '%s'", p.gpu,
              info.gpu_note);
        pb_session *s = NULL;
        int32_t ids[4] = {2, 100, 200, 300};
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = 64;
        st = pb_session_new(m, &sp, &s);
        if (!st) st = pb_session_prefill(s, ids, 4);
        CHECK(st == PB_OK, "gpu = %d: a session runs", p.gpu);
        if (!st) memcpy(first[i], pb_session_logits(s), sizeof first[i]);
        pb_session_free(s);
        pb_model_close(m);
    }
    CHECK(memcmp(first[0], first[1], sizeof first[0]) == 0, "auto and CPU-only give the same logits");
    TEST_DONE();
}
