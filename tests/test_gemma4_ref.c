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
        CHECK(okk && pb_kv_bytes(kv) == want_b &&
                  pb_engine_kv_estimate(pb_model_hparams(m), NTOK, PB_KV_F32, 0) == want_b,
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

/* Malformed gemma4 files are refused with a message naming the key or tensor (micro versions of these are the
 * fuzzer's gemma4 seeds: corpus() below). */
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
        {"PLE tables without their width (was: opened, ran without them)", NULL,
         "gemma4.embedding_length_per_layer_input", NULL, 0, 0,
         "present but key 'gemma4.embedding_length_per_layer_input' is 0 or missing"},
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

/* ---- thinking: the <|think|> system turn, typed markers stay text ---------------------------------------------- */

static int count_id(const int32_t *ids, int64_t n, int32_t id) {
    int c = 0;
    for (int64_t i = 0; i < n; i++) c += ids[i] == id;
    return c;
}

static bool on_text(const char *p, size_t n, void *user) {
    (void)p, (void)n, (void)user;
    return true;
}

static void think_chat(void) {
    pb_model *m = NULL;
    if (pb_model_open("tests/data/model/gemma4_e2b/llama.f32.gguf", NULL, &m) != PB_OK) {
        CHECK(0, "think: model opens (%s)", pb_last_error());
        return;
    }
    /* the user typed every marker; the template alone makes <|turn> (105), <|think|> (98), <turn|> (106) */
    pb_chat_msg msgs[2] = {{"system", "be brief"}, {"user", "hi <|channel>x<|think|><|turn>"}};
    pb_chat_opts o = {.add_generation_prompt = true, .think = true};
    static const int32_t want[] = {
        2,    105,  1581, 107,  98,                           /* <bos> <|turn> system \n <|think|> */
        985,  427,  443,  434,  430, 431, 106, 107,           /* be_ b r i e f <turn|> \n */
        105,  1187, 107,  587,                                /* <|turn> user \n hi */
        1190, 453,  542,  540,  439, 430, 437, 394, 449,      /* _< | ch an n e l > x: the typed <|channel> as text */
        392,  453,  524,  523,  436, 453, 779, 453, 781, 394, /* < | th in k | >< | turn >: typed <|think|><|turn> */
        106,  107,  105,  1396, 107};                         /* <turn|> \n <|turn> model \n */
    int32_t ids[256];
    int64_t n = 0;
    pb_status st = pb_chat_tokenize_opts(m, msgs, 2, &o, ids, 256, &n);
    bool same = st == PB_OK && n == (int64_t)(sizeof want / sizeof want[0]) && memcmp(ids, want, sizeof want) == 0;
    CHECK(same, "think: prompt ids exact: <bos><|turn>system\\n<|think|>be brief<turn|>\\n... (%lld ids)",
          (long long)n);
    CHECK(st == PB_OK && count_id(ids, n, 100) == 0 && count_id(ids, n, 101) == 0 && count_id(ids, n, 98) == 1 &&
              count_id(ids, n, 105) == 3,
          "think: typed <|channel>/<|think|>/<|turn> never become control ids (<|channel> is USER_DEFINED here)");
    char buf[512];
    size_t len = 0;
    st = pb_chat_format_opts(m, msgs + 1, 1, &o, buf, sizeof buf, &len);
    CHECK(st == PB_OK &&
              strcmp(buf, "<|turn>system\n<|think|><turn|>\n<|turn>user\nhi <|channel>x<|think|><|turn><turn|>\n"
                          "<|turn>model\n") == 0,
          "think: no system message: a system turn of <|think|> alone, typed markers kept as text");
    o.think = false;
    int64_t n0 = 0;
    st = pb_chat_tokenize_opts(m, msgs, 2, &o, ids, 256, &n0);
    CHECK(st == PB_OK && n0 == n - 1 && count_id(ids, n0, 98) == 0, "think off: the same prompt without <|think|>");

    /* the session path (pb_session_chat) feeds the same ids, and a typed marker stays text there too */
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 128;
    sp.think = true;
    pb_session *s = NULL;
    pb_gen_params gp = pb_gen_default_params();
    gp.max_tokens = 1;
    gp.sampler.temperature = 0;
    int64_t nt = 0;
    const int32_t *toks = NULL;
    bool ok = pb_session_new(m, &sp, &s) == PB_OK &&
              pb_session_chat(s, "be brief", "hi <|channel>x<|think|><|turn>", &gp, on_text, NULL, NULL) == PB_OK;
    if (ok) toks = pb_session_tokens(s, &nt);
    CHECK(ok && toks && nt >= (int64_t)(sizeof want / sizeof want[0]) && memcmp(toks, want, sizeof want) == 0,
          "think: pb_session_chat with params.think feeds the same ids (%s)", ok ? "ok" : pb_last_error());
    pb_session_free(s);
    pb_model_close(m);
}

/* ---- micro Gemma 4 files: the fuzzer's gemma4 seeds (tests/data/gguf/gemma4_*.gguf) -------------------------- */

/* Geometry of a micro model: d 4, 2 heads, vocab 16; swa[il] 1 = sliding. */
typedef struct micro {
    int L, n_shared, P, E, I, hkv[4], ff[4];
    bool keqv;
    uint8_t swa[4];
    bool bigram; /* the scripted model below instead of random weights */
} micro;

enum { MD = 4, MH = 2, MHD_SWA = 4, MHD_FULL = 8, MV = 16 };

/* A scripted "bigram" Gemma 4 model: every block weight 0 (the stream stays the token's embedding), one-hot
 * embeddings (d = vocab), and output.weight picking the next token from the current one alone, so greedy decoding
 * after any prompt writes "<|channel>" "thought\n" "x" "y" "<channel|>" "A" "B" "<turn|>": a thought "xy" and the
 * answer "AB". For tests of the thought channel end to end (session, CLI, server). */
enum { BV = 19 };
static const char *const bigram_pieces[BV] = {
    "<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>", "thought\n",
    "x",     "y",     "A",     "B",     "\n",      "user",    "model",     "system",     "hi"};
/* --write-bigram-bytes: the same model with the answer's pieces "A" "B" as byte tokens <0xC3> <0xA9>: the answer "é"
 * arrives split inside its character (tests that outputs which must be UTF-8 join or repair it). */
static bool bigram_bytes;
static const char *const bigram_byte_pieces[BV] = {
    "<pad>", "<eos>", "<bos>",  "<unk>",  "<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>", "thought\n",
    "x",     "y",     "<0xC3>", "<0xA9>", "\n",      "user",    "model",     "system",     "hi"};
static int bigram_next(int t) {
    static const int chain[][2] = {{7, 9}, {9, 10}, {10, 11}, {11, 8}, {8, 12}, {12, 13}, {13, 5}};
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
        if (chain[i][0] == t) return chain[i][1];
    return 7; /* anything else (the prompt's last token): open the thought channel */
}
static float bigram_embd[BV * BV], bigram_out[BV * BV];

/* Deterministic small values for matrices, positive ones near 1 for vectors (norms, scales, rope factors): the
 * seeds are byte-stable across runs. */
static float micro_vals[4096], micro_pos[4096];

static pb_status micro_tensor(pb_gguf_writer *w, const char *name, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2) {
    int64_t ne[3] = {ne0, ne1, ne2};
    PB_ASSERT(ne0 * ne1 * ne2 <= 4096);
    return pb_gguf_add_tensor(w, name, PB_TYPE_F32, n_dims, ne, n_dims == 1 ? micro_pos : micro_vals);
}

/* The tensor table and gemma4.* keys llama.cpp's converter writes for m (as tools/convert_gemma4.c plans them), a
 * 16-piece SentencePiece vocabulary, F32 data. */
static bool micro_write(const micro *m, const char *path) {
    uint32_t state = 12345;
    for (int i = 0; i < 4096; i++) {
        state = state * 1664525u + 1013904223u;
        micro_vals[i] = (float)((int)(state >> 24) - 128) / 512.0f;
        micro_pos[i] = 1.0f + fabsf(micro_vals[i]);
        if (m->bigram) micro_vals[i] = 0.0f, micro_pos[i] = 1.0f;
    }
    const int MDX = m->bigram ? BV : MD, MVX = m->bigram ? BV : MV; /* d and vocab of this file */
    for (int t = 0; t < BV; t++)
        for (int k = 0; k < BV; k++) {
            bigram_embd[t * BV + k] = k == t;             /* token_embd row t: e_t */
            bigram_out[t * BV + k] = bigram_next(k) == t; /* output row u: 1 at each t whose next token is u */
        }
    pb_gguf_writer *w = pb_gguf_writer_new();
    pb_status s = pb_gguf_set_str(w, "general.architecture", "gemma4");
    uint32_t arr[4];
#define U32(k, v)                                                                                                      \
    if (s == PB_OK) s = pb_gguf_set_u32(w, "gemma4." k, (v))
    U32("context_length", 64);
    U32("embedding_length", (uint32_t)MDX);
    U32("block_count", (uint32_t)m->L);
    for (int il = 0; il < m->L; il++) arr[il] = (uint32_t)m->ff[il];
    if (s == PB_OK) s = pb_gguf_set_arr(w, "gemma4.feed_forward_length", PB_GGUF_UINT32, arr, (uint64_t)m->L);
    U32("attention.head_count", MH);
    for (int il = 0; il < m->L; il++) arr[il] = (uint32_t)m->hkv[il];
    if (s == PB_OK) s = pb_gguf_set_arr(w, "gemma4.attention.head_count_kv", PB_GGUF_UINT32, arr, (uint64_t)m->L);
    if (s == PB_OK) s = pb_gguf_set_f32(w, "gemma4.attention.layer_norm_rms_epsilon", 1e-6f);
    if (m->E) {
        U32("expert_count", (uint32_t)m->E);
        U32("expert_used_count", 1);
        U32("expert_feed_forward_length", (uint32_t)m->I);
    }
    U32("attention.key_length", MHD_FULL);
    U32("attention.value_length", MHD_FULL);
    U32("attention.key_length_swa", MHD_SWA);
    U32("attention.value_length_swa", MHD_SWA);
    if (s == PB_OK) s = pb_gguf_set_f32(w, "gemma4.final_logit_softcapping", 30.0f);
    U32("attention.sliding_window", 4);
    U32("attention.shared_kv_layers", (uint32_t)m->n_shared);
    U32("embedding_length_per_layer_input", (uint32_t)m->P);
    if (s == PB_OK)
        s = pb_gguf_set_arr(w, "gemma4.attention.sliding_window_pattern", PB_GGUF_BOOL, m->swa, (uint64_t)m->L);
#undef U32
    static const char *const pieces[MV] = {"<pad>",
                                           "<eos>",
                                           "<bos>",
                                           "<unk>",
                                           "\xe2\x96\x81",
                                           "a",
                                           "b",
                                           "c",
                                           "d",
                                           "e",
                                           "\xe2\x96\x81"
                                           "a",
                                           "\xe2\x96\x81"
                                           "b",
                                           "ab",
                                           "cd",
                                           "de",
                                           "x"};
    float scores[BV];
    int32_t types[BV];
    for (int i = 0; i < MVX; i++) scores[i] = -(float)i, types[i] = i < 4 || (m->bigram && i < 9) ? 3 : 1;
    types[3] = 2;
    if (m->bigram && bigram_bytes) types[12] = types[13] = 6; /* byte-fallback pieces */
    if (s == PB_OK) s = pb_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    if (s == PB_OK)
        s = pb_gguf_set_arr_str(w, "tokenizer.ggml.tokens",
                                m->bigram ? (bigram_bytes ? bigram_byte_pieces : bigram_pieces) : pieces, NULL,
                                (uint64_t)MVX);
    if (s == PB_OK) s = pb_gguf_set_arr(w, "tokenizer.ggml.scores", PB_GGUF_FLOAT32, scores, (uint64_t)MVX);
    if (s == PB_OK) s = pb_gguf_set_arr(w, "tokenizer.ggml.token_type", PB_GGUF_INT32, types, (uint64_t)MVX);
    if (s == PB_OK) s = pb_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
    if (s == PB_OK) s = pb_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 1);
    char n[64];
#define T(name, nd, a, b, c)                                                                                           \
    if (s == PB_OK) s = micro_tensor(w, name, nd, a, b, c)
#define LT(suffix, nd, a, b, c)                                                                                        \
    snprintf(n, sizeof n, "blk.%d." suffix, il);                                                                       \
    T(n, nd, a, b, c)
    T("output_norm.weight", 1, MDX, 1, 1);
    T("rope_freqs.weight", 1, MHD_FULL / 2, 1, 1);
    if (m->bigram) {
        int64_t ne[2] = {BV, BV};
        if (s == PB_OK) s = pb_gguf_add_tensor(w, "output.weight", PB_TYPE_F32, 2, ne, bigram_out);
        if (s == PB_OK) s = pb_gguf_add_tensor(w, "token_embd.weight", PB_TYPE_F32, 2, ne, bigram_embd);
    } else {
        T("token_embd.weight", 2, MDX, MV, 1);
    }
    if (m->P) {
        T("per_layer_model_proj.weight", 2, MDX, m->L * m->P, 1);
        T("per_layer_proj_norm.weight", 1, m->P, 1, 1);
        T("per_layer_token_embd.weight", 2, m->L * m->P, MV, 1);
    }
    for (int il = 0; il < m->L; il++) {
        int hd = m->swa[il] ? MHD_SWA : MHD_FULL;
        LT("attn_norm.weight", 1, MDX, 1, 1);
        LT("attn_q.weight", 2, MDX, MH * hd, 1);
        LT("attn_q_norm.weight", 1, hd, 1, 1);
        if (il < m->L - m->n_shared) {
            LT("attn_k.weight", 2, MDX, m->hkv[il] * hd, 1);
            LT("attn_k_norm.weight", 1, hd, 1, 1);
            if (!(m->keqv && !m->swa[il])) {
                LT("attn_v.weight", 2, MDX, m->hkv[il] * hd, 1);
            }
        }
        LT("attn_output.weight", 2, MH * hd, MDX, 1);
        LT("post_attention_norm.weight", 1, MDX, 1, 1);
        LT("ffn_norm.weight", 1, MDX, 1, 1);
        LT("ffn_gate.weight", 2, MDX, m->ff[il], 1);
        LT("ffn_up.weight", 2, MDX, m->ff[il], 1);
        LT("ffn_down.weight", 2, m->ff[il], MDX, 1);
        LT("post_ffw_norm.weight", 1, MDX, 1, 1);
        LT("layer_output_scale.weight", 1, 1, 1, 1);
        if (m->P) {
            LT("inp_gate.weight", 2, MDX, m->P, 1);
            LT("proj.weight", 2, m->P, MDX, 1);
            LT("post_norm.weight", 1, MDX, 1, 1);
        }
        if (m->E) {
            LT("ffn_gate_inp.weight", 2, MDX, m->E, 1);
            LT("ffn_gate_inp.scale", 1, MDX, 1, 1);
            LT("ffn_down_exps.scale", 1, m->E, 1, 1);
            LT("pre_ffw_norm_2.weight", 1, MDX, 1, 1);
            LT("post_ffw_norm_1.weight", 1, MDX, 1, 1);
            LT("post_ffw_norm_2.weight", 1, MDX, 1, 1);
            LT("ffn_gate_up_exps.weight", 3, MDX, 2 * m->I, m->E);
            LT("ffn_down_exps.weight", 3, m->I, MDX, m->E);
        }
    }
#undef LT
#undef T
    if (s == PB_OK) s = pb_gguf_write(w, path);
    pb_gguf_writer_free(w);
    if (s != PB_OK) NOTE("micro_write %s: %s", path, pb_last_error());
    return s == PB_OK;
}

/* e2b-like: sliding/full/sliding/full, the last two KV-shared (reading layers 0 and 1), double-wide MLP there, PLE 2.
 * moe: sliding (2 KV heads) + full k_eq_v (1 KV head), 2 experts of width 4 beside the dense MLP. */
static const micro micro_e2b = {4, 2, 2, 0, 0, {1, 1, 1, 1}, {8, 8, 16, 16}, false, {1, 0, 1, 0}, false};
static const micro micro_moe = {2, 0, 0, 2, 4, {2, 1}, {8, 8}, true, {1, 0}, false};
static const micro micro_bigram = {1, 0, 0, 0, 0, {1}, {8}, false, {0}, true};
/* the same with a sliding layer (window 4) before the full one: a chat's context passes the window in its first turn */
static const micro micro_bigram_swa = {2, 0, 0, 0, 0, {1, 1}, {8, 8}, false, {1, 0}, true};

/* Seeds: the two valid micro files, their truncations, and the malformed cases of malformed() applied to them. The
 * name says what each is; want is the text the refusal names ("" = opens). */
static const struct seed {
    const char *name;
    const micro *m;
    const char *drop, *key, *key2;
    uint32_t v;
    int n_arr;
    size_t cut; /* bytes kept (0: all) */
    const char *want;
} seeds[] = {
    {"gemma4_micro_e2b", &micro_e2b, NULL, NULL, NULL, 0, 0, 0, ""},
    {"gemma4_micro_moe", &micro_moe, NULL, NULL, NULL, 0, 0, 0, ""},
    {"gemma4_missing_ple_tensor", &micro_e2b, "blk.1.inp_gate.weight", NULL, NULL, 0, 0, 0, "blk.1.inp_gate.weight"},
    {"gemma4_missing_expert", &micro_moe, "blk.1.ffn_down_exps.weight", NULL, NULL, 0, 0, 0,
     "blk.1.ffn_down_exps.weight"},
    {"gemma4_ff_array_short", &micro_moe, NULL, "gemma4.feed_forward_length", NULL, 8, 1, 0,
     "gemma4.feed_forward_length"},
    {"gemma4_shared_all", &micro_moe, NULL, "gemma4.attention.shared_kv_layers", NULL, 2, 0, 0, "shared_kv_layers"},
    {"gemma4_head_dim_swa", &micro_moe, NULL, "gemma4.attention.key_length_swa", "gemma4.attention.value_length_swa", 2,
     0, 0, "blk.0.attn_q.weight"},
    {"gemma4_truncated_header", &micro_moe, NULL, NULL, NULL, 0, 0, 300, "gguf: "},
    {"gemma4_truncated_data", &micro_e2b, NULL, NULL, NULL, 0, 0, 9000, "gguf: "},
};

/* Writes seed i to path; false on failure. */
static bool seed_write(size_t i, const char *path) {
    const struct seed *sd = &seeds[i];
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.micro", path);
    bool ok = micro_write(sd->m, sd->drop || sd->key ? tmp : path);
    if (ok && (sd->drop || sd->key)) {
        ok = mutate(tmp, path, sd->drop, sd->key, sd->key2, sd->v, sd->n_arr);
        remove(tmp);
    }
    if (ok && sd->cut) ok = truncate(path, (off_t)sd->cut) == 0;
    return ok;
}

static int write_corpus(const char *dir) {
    char path[512];
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        snprintf(path, sizeof path, "%s/%s.gguf", dir, seeds[i].name);
        if (!seed_write(i, path)) {
            fprintf(stderr, "cannot write %s: %s\n", path, pb_last_error());
            return 1;
        }
    }
    printf("wrote %zu gemma4 seeds to %s\n", sizeof seeds / sizeof seeds[0], dir);
    return 0;
}

static bool same_bytes(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* The committed gemma4 seeds are what seed_write makes; the valid ones open and run, the others are refused
 * naming the defect, through the same header checks the fuzzer runs (hparams + tensor check) and pb_model_open. */
static void corpus(void) {
    char path[512], fresh[512];
    size_t total = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        const struct seed *sd = &seeds[i];
        snprintf(path, sizeof path, "tests/data/gguf/%s.gguf", sd->name);
        snprintf(fresh, sizeof fresh, "/tmp/pb_g4_seed_%d_%zu.gguf", (int)getpid(), i);
        struct stat st;
        bool made = seed_write(i, fresh);
        CHECK(
            made && stat(path, &st) == 0 && same_bytes(path, fresh),
            "seed %s is committed and in sync (regenerate: build/tests/test_gemma4_ref --write-corpus tests/data/gguf)",
            path);
        total += stat(path, &st) == 0 ? (size_t)st.st_size : 0;
        pb_model *m = NULL;
        pb_status s = pb_model_open(path, NULL, &m);
        if (!*sd->want) {
            pb_gguf *g = NULL;
            pb_hparams hp;
            bool hdr = pb_gguf_open(path, &g) == PB_OK && pb_hparams_from_gguf(g, &hp) == PB_OK &&
                       pb_arch_check_tensors(g, &hp, NULL, NULL) == PB_OK;
            pb_gguf_close(g);
            int32_t toks[3] = {2, 5, 6};
            float *lg = malloc(3 * MV * sizeof(float));
            bool fwd = s == PB_OK && run(m, toks, 3, 3, PB_KV_F32, 1, lg) == PB_OK;
            bool finite = fwd;
            for (int k = 0; fwd && k < 3 * MV; k++) finite = finite && isfinite(lg[k]);
            CHECK(hdr && fwd && finite, "seed %s: header checks pass, opens and runs 3 tokens (%s)", sd->name,
                  s == PB_OK ? "finite logits" : pb_last_error());
            free(lg);
        } else {
            const char *msg = pb_last_error();
            CHECK(s != PB_OK && m == NULL && strstr(msg, sd->want), "seed %s: refused naming '%s' (%s)", sd->name,
                  sd->want, msg);
        }
        pb_model_close(m);
        remove(fresh);
    }
    CHECK(total > 0 && total < 100 * 1024, "gemma4 seeds total %zu bytes (< 100 KB)", total);
}

/* expert_used_count past the router's top-k tables (64) is refused at open; it wrote past them on the stack in the
 * first MoE token. 64 of 65 experts (the limit) opens and runs. */
static void many_experts(void) {
    static const micro m65 = {2, 0, 0, 65, 4, {2, 1}, {8, 8}, true, {1, 0}, false};
    char tmp[256], path[256];
    snprintf(tmp, sizeof tmp, "/tmp/pb_g4_e65_%d.micro", (int)getpid());
    snprintf(path, sizeof path, "/tmp/pb_g4_e65_%d.gguf", (int)getpid());
    bool made = micro_write(&m65, tmp);
    for (uint32_t k = 64; k <= 65; k++) {
        pb_model *m = NULL;
        pb_status st = made && mutate(tmp, path, NULL, "gemma4.expert_used_count", NULL, k, 0)
                           ? pb_model_open(path, NULL, &m)
                           : PB_ERR_IO;
        if (k == 64) {
            int32_t toks[3] = {2, 5, 6};
            float lg[3 * MV];
            bool ok = st == PB_OK && run(m, toks, 3, 3, PB_KV_F32, 1, lg) == PB_OK, finite = ok;
            for (int i = 0; ok && i < 3 * MV; i++) finite = finite && isfinite(lg[i]);
            CHECK(finite, "MoE top-64 of 65 experts opens and runs 3 tokens (%s)", st ? pb_last_error() : "ok");
        } else {
            CHECK(st == PB_ERR_UNSUPPORTED && !m && strstr(pb_last_error(), "'gemma4.expert_used_count' = 65"),
                  "MoE expert_used_count 65 refused at open (%s)", st ? pb_last_error() : "opened");
        }
        pb_model_close(m);
        remove(path);
    }
    remove(tmp);
}

typedef struct text_buf {
    char s[256];
    size_t n;
} text_buf;

static bool collect(const char *p, size_t n, void *user) {
    text_buf *b = user;
    if (b->n + n < sizeof b->s) memcpy(b->s + b->n, p, n), b->n += n, b->s[b->n] = 0;
    return true;
}

/* The scripted model through pb_session_chat: the thought reaches thought_cb only, the answer the piece callback
 * only, and a stop string that occurs in the thought ("x") does not end the answer. */
static void bigram_chat(void) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/pb_g4_bigram_%d.gguf", (int)getpid());
    pb_model *m = NULL;
    if (!micro_write(&micro_bigram, path) || pb_model_open(path, NULL, &m) != PB_OK) {
        CHECK(0, "bigram model written and opened (%s)", pb_last_error());
        remove(path);
        return;
    }
    for (int round = 0; round < 2; round++) {
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = 64;
        sp.think = true;
        pb_session *s = NULL;
        pb_gen_params gp = pb_gen_default_params();
        gp.sampler.temperature = 0;
        gp.max_tokens = 20;
        text_buf ans = {{0}, 0}, th = {{0}, 0};
        gp.thought_cb = collect;
        gp.thought_user = &th;
        const char *stops[] = {"x"};
        if (round == 1) gp.stop = stops, gp.n_stop = 1;
        pb_gen_stats st;
        bool ok =
            pb_session_new(m, &sp, &s) == PB_OK && pb_session_chat(s, NULL, "hi", &gp, collect, &ans, &st) == PB_OK;
        CHECK(ok && strcmp(ans.s, "AB") == 0 && strcmp(th.s, "xy") == 0 && st.stop_reason == PB_STOP_EOS &&
                  st.n_generated == 8,
              "thought channel%s: answer [%s], thought [%s], %lld tokens, stop %s", round ? " (stop string \"x\")" : "",
              ans.s, th.s, ok ? (long long)st.n_generated : -1LL,
              ok ? pb_stop_reason_name(st.stop_reason) : pb_last_error());
        pb_session_free(s);
    }
    /* A second turn: the first turn's thought has left the context (Google's Gemma 4 guide: a conversation's
     * history carries the answers, not the thoughts), which then holds the ids the chat template writes for
     * [user, assistant "AB", user] -- what a client re-sending the conversation gives the server -- and the
     * second turn answers as the first; with keep_thoughts the thought stays. */
    for (int keep = 0; keep < 2; keep++) {
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = 64;
        sp.think = true;
        sp.keep_thoughts = keep;
        pb_session *s = NULL;
        pb_gen_params gp = pb_gen_default_params();
        gp.sampler.temperature = 0;
        gp.max_tokens = 20;
        text_buf ans = {{0}, 0}, th = {{0}, 0}, ans2 = {{0}, 0}, th2 = {{0}, 0};
        gp.thought_cb = collect;
        gp.thought_user = &th;
        pb_gen_stats st1, st2;
        bool ok =
            pb_session_new(m, &sp, &s) == PB_OK && pb_session_chat(s, NULL, "hi", &gp, collect, &ans, &st1) == PB_OK;
        gp.thought_user = &th2;
        ok = ok && pb_session_chat(s, NULL, "hi", &gp, collect, &ans2, &st2) == PB_OK;
        CHECK(ok && !strcmp(ans.s, "AB") && !strcmp(th.s, "xy") && !strcmp(ans2.s, "AB") && !strcmp(th2.s, "xy"),
              "two thinking turns%s: answers [%s] [%s], thoughts [%s] [%s] (%s)", keep ? " (keep_thoughts)" : "", ans.s,
              ans2.s, th.s, th2.s, ok ? "ok" : pb_last_error());
        pb_chat_msg msgs[3] = {{"user", "hi"}, {"assistant", "AB"}, {"user", "hi"}};
        pb_chat_opts o = {.add_generation_prompt = true, .think = true};
        int32_t want[64];
        int64_t nw = 0, nt = 0;
        const int32_t *toks = ok ? pb_session_tokens(s, &nt) : NULL;
        bool tmpl = pb_chat_tokenize_opts(m, msgs, 3, &o, want, 64, &nw) == PB_OK;
        int chan = 0;
        for (int64_t i = 0; toks && i < nt; i++) chan += toks[i] == 7;
        if (!keep) {
            CHECK(tmpl && toks && nt > nw && memcmp(toks, want, (size_t)nw * sizeof *want) == 0 && chan == 1 &&
                      st2.n_reprefilled == 2,
                  "the first turn's thought left the context: the history is the template's [user, assistant AB, "
                  "user] (%lld ids), the second turn's channel alone (%d), 2 answer ids re-fed (%lld)",
                  (long long)nw, chan, ok ? (long long)st2.n_reprefilled : -1LL);
        } else {
            CHECK(toks && chan == 2 && st2.n_reprefilled == 0 && !(nt > nw && !memcmp(toks, want, (size_t)nw * 4)),
                  "keep_thoughts: both turns' channels stay in the context (%d), nothing re-fed", chan);
        }
        pb_session_free(s);
    }
    pb_model_close(m);
    remove(path);
    /* With a sliding-window layer the first turn (~25 ids) passes the window (4): the thought and answer are cut out
     * of the context without re-reading it (the session's ring keeps rows beyond its window: pb_engine_ring_extra),
     * only the answer's 2 ids are fed again, and the history is still the template's. */
    m = NULL;
    if (!micro_write(&micro_bigram_swa, path) || pb_model_open(path, NULL, &m) != PB_OK) {
        CHECK(0, "bigram model with a sliding layer written and opened (%s)", pb_last_error());
        remove(path);
        return;
    }
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 64;
    sp.think = true;
    pb_session *s = NULL;
    pb_gen_params gp = pb_gen_default_params();
    gp.sampler.temperature = 0;
    gp.max_tokens = 20;
    text_buf ans = {{0}, 0}, ans2 = {{0}, 0}, th = {{0}, 0};
    gp.thought_cb = collect;
    gp.thought_user = &th;
    pb_gen_stats st1, st2;
    bool ok = pb_session_new(m, &sp, &s) == PB_OK &&
              pb_session_chat(s, NULL, "hi", &gp, collect, &ans, &st1) == PB_OK &&
              pb_session_chat(s, NULL, "hi", &gp, collect, &ans2, &st2) == PB_OK;
    pb_chat_msg msgs[3] = {{"user", "hi"}, {"assistant", "AB"}, {"user", "hi"}};
    pb_chat_opts o = {.add_generation_prompt = true, .think = true};
    int32_t want[64];
    int64_t nw = 0, nt = 0;
    const int32_t *toks = ok ? pb_session_tokens(s, &nt) : NULL;
    bool tmpl = pb_chat_tokenize_opts(m, msgs, 3, &o, want, 64, &nw) == PB_OK;
    CHECK(ok && !strcmp(ans.s, "AB") && !strcmp(ans2.s, "AB") && tmpl && nw > 8 && toks && nt > nw &&
              !memcmp(toks, want, (size_t)nw * sizeof *want) && st2.n_reprefilled == 2,
          "window 4 passed in the first turn (%lld ids): the thought left the context with 2 ids re-fed (%lld), "
          "answers [%s] [%s] (%s)",
          (long long)nw, ok ? (long long)st2.n_reprefilled : -1LL, ans.s, ans2.s, ok ? "ok" : pb_last_error());
    /* undo / retry of a thinking turn (pb_session_pop_turn): the context after the retry is the one before it */
    int32_t before[64];
    const int64_t nb = nt <= 64 ? nt : 0;
    if (toks && nb) memcpy(before, toks, (size_t)nb * sizeof *before);
    text_buf ans3 = {{0}, 0}, th3 = {{0}, 0};
    gp.thought_user = &th3;
    pb_session_totals t0, t1;
    pb_session_get_totals(s, &t0);
    bool ok3 = ok && nb && pb_session_pop_turn(s) == PB_OK && pb_session_n_turns(s) == 1;
    pb_session_get_totals(s, &t1);
    ok3 = ok3 && pb_session_chat(s, NULL, "hi", &gp, collect, &ans3, &st2) == PB_OK;
    int64_t n3 = 0;
    const int32_t *k3 = ok3 ? pb_session_tokens(s, &n3) : NULL;
    CHECK(ok3 && k3 && n3 == nb && !memcmp(k3, before, (size_t)nb * sizeof *before) && !strcmp(ans3.s, "AB") &&
              !strcmp(th3.s, "xy") && t1.n_reprefilled == t0.n_reprefilled,
          "retry of a thinking turn past the window: pop (0 re-read) + the same text = the same context (%lld ids), "
          "answer [%s], thought [%s] (%s)",
          (long long)n3, ans3.s, th3.s, ok3 ? "ok" : pb_last_error());
    pb_session_free(s);
    pb_model_close(m);
    remove(path);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) return write_corpus(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--write-bigram") == 0) return micro_write(&micro_bigram, argv[2]) ? 0 : 1;
    if (argc == 3 && strcmp(argv[1], "--write-bigram-swa") == 0) return micro_write(&micro_bigram_swa, argv[2]) ? 0 : 1;
    if (argc == 3 && strcmp(argv[1], "--write-bigram-bytes") == 0) {
        bigram_bytes = true;
        return micro_write(&micro_bigram, argv[2]) ? 0 : 1;
    }
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
    corpus();
    many_experts();
    think_chat();
    bigram_chat();
    TEST_DONE();
}
