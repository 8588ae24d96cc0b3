/* test_gemma4_ref.c -- tiny random Gemma 4 models (tests/data/model/gemma4_*, made by tools/reference/gemma4_tiny.py
 * with transformers 5.17 and converted by llama.cpp's convert_hf_to_gguf.py): our logits vs transformers float64 at
 * every position, prefill at once == chunked == token by token, and `pocketbrain convert` of the HF folder (MoE
 * included) giving the same logits as llama.cpp's file. e2b: 4:1 sliding:full, PLE, KV sharing, double-wide MLP; keqv:
 * k_eq_v full layers with 1 KV head (2 on sliding layers); moe: 8 experts top 2 beside the dense MLP. Window 8 < 40
 * tokens. */
#include "engine/engine.h"
#include "forward_common.h"
#include "tensor/types.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NTOK = 40, NV = 2048 };

static int sh(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static cmp cmpn(const float *a, const float *b) { return compare(a, b, NTOK, NV); }

static double range_of(const float *x, size_t n) {
    float lo = x[0], hi = x[0];
    for (size_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    return (double)hi - (double)lo;
}

static void check_geometry(const char *name, const pb_hparams *hp) {
    if (strcmp(name, "gemma4_e2b") == 0)
        CHECK(hp->arch == PB_ARCH_GEMMA4 && hp->n_layer == 10 && hp->hd_swa == 16 && hp->hd_full == 32 &&
                  hp->head_dim_l[4] == 32 && hp->head_dim_l[3] == 16 && hp->n_kv_shared == 5 && hp->kv_src[5] == 3 &&
                  hp->kv_src[8] == 3 && hp->kv_src[9] == 4 && hp->kv_src[4] == 4 && hp->n_ff_l[4] == 64 &&
                  hp->n_ff_l[5] == 128 && hp->n_embd_per_layer == 8 && hp->query_scale == 1.0f &&
                  hp->final_softcap == 30.0f && hp->rope_base_local == 1e4f && hp->rope_base == 1e6f,
              "%s: 4:1 layers, head dims 16/32, layers 5..9 share K/V of 3 (sliding) / 4 (full), MLP 64/128, PLE 8",
              name);
    if (strcmp(name, "gemma4_keqv") == 0)
        CHECK(hp->n_layer == 6 && hp->n_head_kv_l[0] == 2 && hp->n_head_kv_l[5] == 1 && hp->head_dim_l[5] == 32,
              "%s: 2 KV heads on sliding layers, 1 on the full layer (head dim 32)", name);
    if (strcmp(name, "gemma4_moe") == 0)
        CHECK(hp->n_expert == 8 && hp->n_expert_used == 2 && hp->n_ff_exp == 16, "%s: 8 experts, top 2, width 16",
              name);
}

static void test_model(const char *bin, const char *name) {
    char dir[256], path[512], ours[256], cmd[1024];
    snprintf(dir, sizeof dir, "tests/data/model/%s", name);
    snprintf(path, sizeof path, "%s/llama.f32.gguf", dir);
    pb_model *m = NULL;
    if (pb_model_open(path, NULL, &m) != PB_OK) {
        CHECK(0, "%s: llama.cpp-converted file opens (%s)", name, pb_last_error());
        return;
    }
    check_geometry(name, pb_model_hparams(m));
    int32_t toks[NTOK];
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    FILE *f = fopen(path, "rb");
    CHECK(f && fread(toks, 4, NTOK, f) == NTOK, "%s: tokens.bin", name);
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/logits.f64.f32", dir);
    size_t n = (size_t)NTOK * NV;
    float *hf = read_f32(path, n);
    float *ex = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4), *h16 = malloc(n * 4);
    bool ok = hf && run_ex(m, toks, NTOK, NTOK, PB_KV_F32, 2, true, ex) == PB_OK &&
              run(m, toks, NTOK, NTOK, PB_KV_F32, 2, a) == PB_OK && run(m, toks, NTOK, 7, PB_KV_F32, 2, b) == PB_OK &&
              run(m, toks, NTOK, 1, PB_KV_F32, 1, c) == PB_OK && run(m, toks, NTOK, NTOK, PB_KV_F16, 2, h16) == PB_OK;
    CHECK(ok, "%s: reference read, forward runs (%s)", name, ok ? "" : pb_last_error());
    if (ok) {
        double range = range_of(hf, n);
        cmp vex = cmpn(ex, hf), va = cmpn(a, hf), ab = cmpn(a, b), ac = cmpn(a, c), k16 = cmpn(h16, hf);
        NOTE("== %s (logit range %.1f)", name, range);
        NOTE("exact vs HF f64        max|d| %.3g (%.2g of range) top-1 %d/%d", vex.max, vex.max / range, vex.top1,
             NTOK);
        NOTE("default vs HF f64      max|d| %.3g top-1 %d/%d; F16 KV %.3g", va.max, va.top1, NTOK, k16.max);
        CHECK(vex.max <= 1e-3 * range && vex.top1 == NTOK,
              "%s: exact: max|dlogit| %.3g <= 1e-3 x range vs transformers f64, top-1 at all %d positions", name,
              vex.max, NTOK);
        CHECK(va.max <= 1e-3 * range && va.top1 == NTOK, "%s: default path within 1e-3 x range, top-1 identical", name);
        CHECK(ab.max == 0.0 && ac.max == 0.0, "%s: prefill at once == chunks of 7 == token by token (bit-identical)",
              name);
        CHECK(k16.top1 == NTOK, "%s: F16 KV cache keeps top-1 (max|d| %.3g)", name, k16.max);
    }
    if (strcmp(name, "gemma4_e2b") == 0 && ok) {
        /* KV sized per layer: layers 0-3 sliding (window 8 rows of 1 x 16), layer 4 full (40 rows of 1 x 32), the
         * shared layers 5-9 nothing -- F32: 2 x 4 x (4 x 8 x 16) + 2 x 4 x (40 x 32) bytes */
        pb_kv_cache *kv = NULL, *kv2 = NULL;
        pb_forward_ctx *fc = NULL;
        bool okk = pb_kv_new(m, NTOK, PB_KV_F32, &kv) == PB_OK && pb_kv_new(m, NTOK, PB_KV_F32, &kv2) == PB_OK &&
                   pb_forward_ctx_new_kv(m, NTOK, kv, &fc) == PB_OK;
        size_t want_b = 2 * 4 * (4 * 8 * 16) + 2 * 4 * (40 * 32);
        CHECK(okk && pb_kv_bytes(kv) == want_b && pb_engine_kv_estimate(pb_model_hparams(m), NTOK, PB_KV_F32) == want_b,
              "%s: KV cache %zu bytes (shared layers hold none), estimate agrees", name, okk ? pb_kv_bytes(kv) : 0);
        /* session state: save after 30 tokens, restore into a fresh cache, the last 10 give the same logits */
        size_t cap = okk ? pb_kv_state_size(kv) + (1 << 16) : 0, len = 0;
        void *buf = malloc(cap + 1);
        okk = okk && pb_forward(m, kv, fc, NULL, toks, 30, b, true, NULL) == PB_OK &&
              pb_kv_state_write(kv, buf, cap, &len) == PB_OK && pb_kv_state_read(kv2, buf, len) == PB_OK &&
              pb_forward(m, kv2, fc, NULL, toks + 30, 10, b + (size_t)30 * NV, true, NULL) == PB_OK;
        CHECK(okk && cmpn(b, a).max == 0.0, "%s: KV state saved at 30 tokens and restored: same logits", name);
        free(buf);
        pb_forward_ctx_free(fc);
        pb_kv_free(kv);
        pb_kv_free(kv2);
    }
    /* our converter over the HF folder: the same logits as llama.cpp's file */
    snprintf(ours, sizeof ours, "/tmp/pb_gemma4_ref_%d_%s.gguf", (int)getpid(), name);
    snprintf(cmd, sizeof cmd, "%s convert %s %s --type f32 >/dev/null 2>&1", bin, dir, ours);
    int rc = bin ? sh(cmd) : -1;
    pb_model *m2 = NULL;
    if (bin)
        CHECK(rc == 0 && pb_model_open(ours, NULL, &m2) == PB_OK, "%s: pocketbrain convert --type f32 opens (rc %d)",
              name, rc);
    if (m2 && ok) {
        bool ok2 = run_ex(m2, toks, NTOK, NTOK, PB_KV_F32, 2, true, b) == PB_OK;
        cmp d = cmpn(b, ex), dh = cmpn(b, hf);
        double range = range_of(hf, n);
        CHECK(ok2 && d.max <= 1e-4, "%s: our conversion == llama.cpp's (max|d| %.3g <= 1e-4)", name, d.max);
        CHECK(ok2 && dh.max <= 1e-3 * range && dh.top1 == NTOK,
              "%s: our conversion vs transformers f64: max|d| %.3g <= 1e-3 x range, top-1 at all %d positions", name,
              dh.max, NTOK);
    }
    pb_model_close(m2);
    remove(ours);
    if (bin && strcmp(name, "gemma4_moe") == 0) { /* --type f16: the router stays f32 (llama.cpp's rule) */
        snprintf(cmd, sizeof cmd, "%s convert %s %s --type f16 >/dev/null 2>&1", bin, dir, ours);
        pb_gguf *g = NULL;
        const pb_gguf_tensor *gi = NULL, *gu = NULL;
        if (sh(cmd) == 0 && pb_gguf_open(ours, &g) == PB_OK) {
            gi = pb_gguf_find_tensor(g, "blk.3.ffn_gate_inp.weight");
            gu = pb_gguf_find_tensor(g, "blk.3.ffn_gate_up_exps.weight");
        }
        CHECK(gi && gu && gi->type == PB_TYPE_F32 && gu->type == PB_TYPE_F16 && gu->n_dims == 3 && gu->ne[2] == 8,
              "%s: convert --type f16: router f32, experts f16 [32, 32, 8]", name);
        pb_gguf_close(g);
        remove(ours);
    }

    /* quantized: our error vs transformers no worse than llama.cpp's on the same file + 10% (llama_quant_err.txt:
     * tools/reference/gemma4_llama_quant.sh, llama.cpp run on our quantize output) */
    snprintf(path, sizeof path, "%s/llama_quant_err.txt", dir);
    f = fopen(path, "r");
    char qn[16];
    double lmean, lmax;
    while (bin && hf && f && fscanf(f, "%15s %lf %lf", qn, &lmean, &lmax) == 3) {
        snprintf(cmd, sizeof cmd, "%s quantize %s/llama.f32.gguf %s %s >/dev/null 2>&1", bin, dir, ours, qn);
        pb_model *mq = NULL;
        bool okq = sh(cmd) == 0 && pb_model_open(ours, NULL, &mq) == PB_OK &&
                   run(mq, toks, NTOK, NTOK, PB_KV_F16, 2, a) == PB_OK;
        cmp e = okq ? cmpn(a, hf) : (cmp){1e9, 1e9, 0};
        NOTE("%s %s: ours mean|d| %.4g max %.4g, llama.cpp mean %.4g max %.4g", name, qn, e.mean, e.max, lmean, lmax);
        CHECK(okq && e.mean <= 1.1 * lmean && e.max <= 1.1 * lmax,
              "%s %s: error vs transformers within llama.cpp's + 10%% (mean %.4g <= %.4g, max %.4g <= %.4g)", name, qn,
              e.mean, 1.1 * lmean, e.max, 1.1 * lmax);
        pb_model_close(mq);
        remove(ours);
    }
    CHECK(f != NULL, "%s: llama_quant_err.txt present", name);
    if (f) fclose(f);
    free(ex);
    free(a);
    free(b);
    free(c);
    free(h16);
    free(hf);
    pb_model_close(m);
}

/* A copy of src with one change: drop_tensor removed, and/or key set to u32 value v (n_arr > 0: an array of n_arr
 * u32 v). Written to path. */
static bool mutate(const char *src, const char *path, const char *drop_tensor, const char *key, const char *key2,
                   uint32_t v, int n_arr) {
    pb_gguf *g = NULL;
    if (pb_gguf_open(src, &g) != PB_OK) return false;
    pb_gguf_writer *w = pb_gguf_writer_new();
    pb_status s = PB_OK;
    for (int64_t i = 0; i < pb_gguf_n_kv(g) && s == PB_OK; i++) s = pb_gguf_copy_kv(w, g, i);
    if (key && s == PB_OK) {
        uint32_t arr[64];
        for (int i = 0; i < 64; i++) arr[i] = v;
        s = pb_gguf_remove_key(w, key);
        s = n_arr > 0 ? pb_gguf_set_arr(w, key, PB_GGUF_UINT32, arr, (uint64_t)n_arr) : pb_gguf_set_u32(w, key, v);
        if (key2 && s == PB_OK) s = pb_gguf_set_u32(w, key2, v);
    }
    for (int64_t i = 0; i < pb_gguf_n_tensors(g) && s == PB_OK; i++) {
        const pb_gguf_tensor *t = pb_gguf_tensor_at(g, i);
        if (drop_tensor && strcmp(t->name, drop_tensor) == 0) continue;
        s = pb_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    if (s == PB_OK) s = pb_gguf_write(w, path);
    pb_gguf_writer_free(w);
    pb_gguf_close(g);
    return s == PB_OK;
}

/* Malformed gemma4 files are refused with a message naming the key or tensor (also written to the fuzz corpus
 * directory when PB_G4_CORPUS names one). */
static void malformed(void) {
    const char *src = "tests/data/model/gemma4_e2b/llama.f32.gguf";
    static const struct {
        const char *what, *drop, *key, *key2;
        uint32_t v;
        int n_arr;
        const char *want;
    } cases[] = {
        {"missing PLE tensor", "blk.3.inp_gate.weight", NULL, NULL, 0, 0, "blk.3.inp_gate.weight"},
        {"missing PLE table", "per_layer_token_embd.weight", NULL, NULL, 0, 0, "per_layer_token_embd.weight"},
        {"per-layer array of 9 for 10 layers", NULL, "gemma4.feed_forward_length", NULL, 64, 9,
         "gemma4.feed_forward_length"},
        {"shared_kv_layers = layer count", NULL, "gemma4.attention.shared_kv_layers", NULL, 10, 0, "shared_kv_layers"},
        {"sliding head dim 8 vs tensors of 16", NULL, "gemma4.attention.key_length_swa",
         "gemma4.attention.value_length_swa", 8, 0, "blk.0.attn_q.weight"},
        {"full head dim 64 vs tensors of 32", NULL, "gemma4.attention.key_length", "gemma4.attention.value_length", 64,
         0, "rope_freqs.weight"},
        {"value_length differs from key_length", NULL, "gemma4.attention.value_length_swa", NULL, 8, 0,
         "gemma4.attention.value_length_swa"},
    };
    char path[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "/tmp/pb_g4_bad_%d_%zu.gguf", (int)getpid(), i);
        bool made = mutate(src, path, cases[i].drop, cases[i].key, cases[i].key2, cases[i].v, cases[i].n_arr);
        pb_model *m = NULL;
        pb_status st = made ? pb_model_open(path, NULL, &m) : PB_OK;
        const char *msg = pb_last_error();
        CHECK(made && st != PB_OK && m == NULL && strstr(msg, cases[i].want),
              "malformed gemma4 (%s): refused, message names '%s' (%s)", cases[i].what, cases[i].want, msg);
        pb_model_close(m);
        remove(path);
    }
}

int main(void) {
    const char *bin = getenv("PB_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        const char *ci = getenv("CI");
        if (ci && strcmp(ci, "true") == 0)
            CHECK(0, "PB_BIN (%s) is not an executable pocketbrain", bin ? bin : "unset");
        bin = NULL;
    }
    const char *names[] = {"gemma4_e2b", "gemma4_keqv", "gemma4_moe"};
    for (int i = 0; i < 3; i++) test_model(bin, names[i]);
    malformed();
    TEST_DONE();
}
