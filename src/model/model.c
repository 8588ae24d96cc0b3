/* model.c -- opens a Gemma GGUF: hparams from metadata, weight binding with shape checks, fingerprint, info.
 * No math of the forward pass here (forward.c) and no K/V storage (kv_cache.c). */
#include "model/gpu.h"
#include "model/model_impl.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "tensor/ops.h"
#include "tensor/types.h"
#include "tokenizer/vocab.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- hyperparameters ------------------------------------------------------------------------------

static const char *arch_name(pb_arch a) {
    switch (a) {
    case PB_ARCH_GEMMA: return "gemma";
    case PB_ARCH_GEMMA2: return "gemma2";
    case PB_ARCH_GEMMA3: return "gemma3";
    case PB_ARCH_GEMMA4: return "gemma4";
    }
    return "?";
}

/* "{arch}.suffix" */
static const char *akey(char *buf, size_t cap, pb_arch a, const char *suffix) {
    snprintf(buf, cap, "%s.%s", arch_name(a), suffix);
    return buf;
}

/* Reads an integer key into *out (kept as is when absent). PB_ERR_FORMAT when out of [lo, hi]. */
static pb_status get_int(const pb_gguf *g, pb_arch a, const char *suffix, bool required, int64_t lo, int64_t hi,
                         int *out) {
    char k[128];
    int64_t v;
    pb_status s = pb_gguf_get_i64(g, akey(k, sizeof k, a, suffix), &v);
    if (s == PB_ERR_NOT_FOUND) {
        if (required) return pb_error(PB_ERR_FORMAT, "model: required key '%s' is missing", k);
        return PB_OK;
    }
    if (s) return s;
    if (v < lo || v > hi)
        return pb_error(PB_ERR_FORMAT, "model: key '%s' = %lld is out of range [%lld, %lld]", k, (long long)v,
                        (long long)lo, (long long)hi);
    *out = (int)v;
    return PB_OK;
}

static pb_status get_float(const pb_gguf *g, pb_arch a, const char *suffix, float lo, float hi, float *out) {
    char k[128];
    float v;
    pb_status s = pb_gguf_get_f32(g, akey(k, sizeof k, a, suffix), &v);
    if (s == PB_ERR_NOT_FOUND) return PB_OK;
    if (s) return s;
    if (!(v >= lo && v <= hi))
        return pb_error(PB_ERR_FORMAT, "model: key '%s' = %g is out of range [%g, %g]", k, (double)v, (double)lo,
                        (double)hi);
    *out = v;
    return PB_OK;
}

static pb_status arch_from_gguf(const pb_gguf *g, pb_arch *out) {
    pb_gguf_str s;
    pb_status st = pb_gguf_get_str(g, "general.architecture", &s);
    if (st == PB_ERR_NOT_FOUND) return pb_error(PB_ERR_FORMAT, "model: key 'general.architecture' is missing");
    if (st) return st;
    static const struct {
        const char *name;
        pb_arch a;
    } known[] = {
        {"gemma", PB_ARCH_GEMMA}, {"gemma2", PB_ARCH_GEMMA2}, {"gemma3", PB_ARCH_GEMMA3}, {"gemma4", PB_ARCH_GEMMA4}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (s.len == strlen(known[i].name) && memcmp(s.ptr, known[i].name, s.len) == 0) {
            *out = known[i].a;
            return PB_OK;
        }
    int n = s.len > 64 ? 64 : (int)s.len;
    return pb_error(PB_ERR_UNSUPPORTED, "model: architecture '%.*s' is not supported (gemma, gemma2, gemma3, gemma4)",
                    n, s.ptr);
}

/* n_vocab: rows of token_embd (the tokenizer may list fewer or more pieces). */
static pb_status n_vocab_from_gguf(const pb_gguf *g, pb_hparams *hp) {
    const pb_gguf_tensor *te = pb_gguf_find_tensor(g, "token_embd.weight");
    if (te) {
        if (te->ne[1] < 1 || te->ne[1] > (1 << 24))
            return pb_error(PB_ERR_FORMAT, "model: tensor 'token_embd.weight' has %lld rows", (long long)te->ne[1]);
        hp->n_vocab = (int)te->ne[1];
    } else {
        int64_t ki = pb_gguf_find_key(g, "tokenizer.ggml.tokens");
        pb_gguf_vtype et;
        uint64_t n = 0;
        const void *d;
        if (ki >= 0 && pb_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &d) == PB_OK && n <= (1u << 24))
            hp->n_vocab = (int)n;
    }
    return PB_OK;
}

/* A per-layer key that is either one integer or an array of n_layer integers (llama.cpp writes arrays only when
 * layers differ). Kept as is when absent and not required. PB_ERR_FORMAT names the key on a wrong length, type
 * or value. */
static pb_status get_layer_ints(const pb_gguf *g, pb_arch a, const char *suffix, bool required, int64_t lo, int64_t hi,
                                int n_layer, int32_t *out) {
    char k[128];
    akey(k, sizeof k, a, suffix);
    pb_gguf_vtype et;
    uint64_t n;
    const void *data;
    pb_status s = pb_gguf_get_arr(g, k, &et, &n, &data);
    if (s == PB_OK) {
        if (n != (uint64_t)n_layer)
            return pb_error(PB_ERR_FORMAT, "model: key '%s' has %llu entries, expected one per layer (%d)", k,
                            (unsigned long long)n, n_layer);
        for (int il = 0; il < n_layer; il++) {
            int64_t v;
            const uint8_t *p = (const uint8_t *)data;
            if (et == PB_GGUF_INT32 || et == PB_GGUF_UINT32) {
                uint32_t u;
                memcpy(&u, p + 4 * il, 4);
                v = et == PB_GGUF_INT32 ? (int64_t)(int32_t)u : (int64_t)u;
            } else
                return pb_error(PB_ERR_FORMAT, "model: key '%s' is an array of type %d, expected 32-bit integers", k,
                                (int)et);
            if (v < lo || v > hi)
                return pb_error(PB_ERR_FORMAT, "model: key '%s'[%d] = %lld is out of range [%lld, %lld]", k, il,
                                (long long)v, (long long)lo, (long long)hi);
            out[il] = (int32_t)v;
        }
        return PB_OK;
    }
    int v = -1;
    if ((s = get_int(g, a, suffix, required, lo, hi, &v))) return s;
    if (v != -1)
        for (int il = 0; il < n_layer; il++) out[il] = v;
    return PB_OK;
}

/* Gemma 4 (llama.cpp's keys, docs/gemma4 notes): per-layer head dims (full key_length, sliding key_length_swa),
 * KV-head counts and MLP widths, the sliding pattern as a bool array, KV sharing, PLE width, MoE sizes. */
static pb_status hparams_gemma4(const pb_gguf *g, pb_hparams *hp) {
    pb_arch a = PB_ARCH_GEMMA4;
    int L = hp->n_layer;
    int32_t ff[PB_MAX_LAYERS], hkv[PB_MAX_LAYERS];
    for (int il = 0; il < L; il++) hkv[il] = hp->n_head, ff[il] = 0;
    pb_status s;
    int v_full = -1, v_swa = -1;
    hp->hd_full = 512;
    hp->hd_swa = 256;
    if ((s = get_layer_ints(g, a, "feed_forward_length", true, 1, 1 << 20, L, ff)) ||
        (s = get_layer_ints(g, a, "attention.head_count_kv", false, 1, 1024, L, hkv)) ||
        (s = get_int(g, a, "attention.key_length", false, 2, PB_MAX_HEAD_DIM, &hp->hd_full)) ||
        (s = get_int(g, a, "attention.value_length", false, 2, PB_MAX_HEAD_DIM, &v_full)) ||
        (s = get_int(g, a, "attention.key_length_swa", false, 2, PB_MAX_HEAD_DIM, &hp->hd_swa)) ||
        (s = get_int(g, a, "attention.value_length_swa", false, 2, PB_MAX_HEAD_DIM, &v_swa)) ||
        (s = get_int(g, a, "attention.sliding_window", true, 1, 1 << 24, &hp->sliding_window)) ||
        (s = get_int(g, a, "attention.shared_kv_layers", false, 0, PB_MAX_LAYERS, &hp->n_kv_shared)) ||
        (s = get_int(g, a, "embedding_length_per_layer_input", false, 0, 1 << 16, &hp->n_embd_per_layer)) ||
        (s = get_int(g, a, "expert_count", false, 0, 4096, &hp->n_expert)) ||
        (s = get_int(g, a, "expert_used_count", false, 0, 4096, &hp->n_expert_used)) ||
        (s = get_int(g, a, "expert_feed_forward_length", false, 0, 1 << 20, &hp->n_ff_exp)))
        return s;
    if (v_full != -1 && v_full != hp->hd_full)
        return pb_error(PB_ERR_UNSUPPORTED,
                        "model: key 'gemma4.attention.value_length' = %d differs from key_length %d", v_full,
                        hp->hd_full);
    if (v_swa != -1 && v_swa != hp->hd_swa)
        return pb_error(PB_ERR_UNSUPPORTED,
                        "model: key 'gemma4.attention.value_length_swa' = %d differs from key_length_swa %d", v_swa,
                        hp->hd_swa);
    if (hp->hd_full % 2 || hp->hd_swa % 2)
        return pb_error(PB_ERR_FORMAT, "model: key 'gemma4.attention.key_length(_swa)' must be even (%d, %d)",
                        hp->hd_full, hp->hd_swa);
    if (hp->n_kv_shared >= L)
        return pb_error(PB_ERR_FORMAT,
                        "model: key 'gemma4.attention.shared_kv_layers' = %d leaves no layer computing "
                        "K/V (%d layers)",
                        hp->n_kv_shared, L);
    if (hp->n_expert > 0 && (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert || hp->n_ff_exp < 1))
        return pb_error(PB_ERR_FORMAT,
                        "model: gemma4 MoE keys: expert_count %d, expert_used_count %d, "
                        "expert_feed_forward_length %d",
                        hp->n_expert, hp->n_expert_used, hp->n_ff_exp);
    if (hp->n_expert > 0 && hp->n_expert_used > PB_MAX_EXPERT_USED) /* forward.c's top-k tables */
        return pb_error(PB_ERR_UNSUPPORTED, "model: key 'gemma4.expert_used_count' = %d is not supported (at most %d)",
                        hp->n_expert_used, PB_MAX_EXPERT_USED);
    /* sliding pattern: one bool per layer (true = sliding) */
    {
        char k[128];
        akey(k, sizeof k, a, "attention.sliding_window_pattern");
        pb_gguf_vtype et;
        uint64_t n;
        const void *data;
        s = pb_gguf_get_arr(g, k, &et, &n, &data);
        if (s == PB_ERR_NOT_FOUND) return pb_error(PB_ERR_FORMAT, "model: required key '%s' is missing", k);
        if (s) return s;
        if (et != PB_GGUF_BOOL || n != (uint64_t)L)
            return pb_error(PB_ERR_FORMAT, "model: key '%s' must be %d booleans (has %llu of type %d)", k, L,
                            (unsigned long long)n, (int)et);
        for (int il = 0; il < L; il++) hp->swa_layer[il] = ((const uint8_t *)data)[il] != 0;
    }
    hp->rope_base = 1000000.0f;
    hp->rope_base_local = 10000.0f; /* never the full layers' base when the key is absent */
    hp->rope_scale = 1.0f;
    if ((s = get_float(g, a, "rope.freq_base", 1.0f, 1e12f, &hp->rope_base)) ||
        (s = get_float(g, a, "rope.freq_base_swa", 1.0f, 1e12f, &hp->rope_base_local)) ||
        (s = get_float(g, a, "final_logit_softcapping", 0.0f, 1e6f, &hp->final_softcap)))
        return s;
    int first_shared = L - hp->n_kv_shared;
    hp->head_dim = hp->n_head_kv = hp->n_ff = 0;
    for (int il = 0; il < L; il++) {
        int hd = hp->swa_layer[il] ? hp->hd_swa : hp->hd_full;
        if (hp->n_head % hkv[il] != 0 || hp->n_head / hkv[il] > PB_MAX_GQA)
            return pb_error(PB_ERR_FORMAT,
                            "model: key 'gemma4.attention.head_count_kv' of layer %d (%d) does not "
                            "divide head_count %d (at most %d per kv head)",
                            il, hkv[il], hp->n_head, PB_MAX_GQA);
        hp->head_dim_l[il] = (int16_t)hd;
        hp->n_head_kv_l[il] = (int16_t)hkv[il];
        hp->n_ff_l[il] = ff[il];
        hp->kv_src[il] = (int16_t)il;
        if (il >= first_shared) { /* HF: the last layer of the same type that computes K/V */
            int src = -1;
            for (int j = first_shared - 1; j >= 0 && src < 0; j--)
                if (hp->swa_layer[j] == hp->swa_layer[il]) src = j;
            if (src < 0)
                return pb_error(PB_ERR_FORMAT,
                                "model: key 'gemma4.attention.shared_kv_layers' = %d: layer %d has no "
                                "earlier %s layer to share K/V with",
                                hp->n_kv_shared, il, hp->swa_layer[il] ? "sliding" : "full");
            if (hkv[src] != hkv[il])
                return pb_error(PB_ERR_FORMAT, "model: layer %d shares the K/V of layer %d with another head_count_kv",
                                il, src);
            hp->kv_src[il] = (int16_t)src;
        }
        hp->head_dim = PB_MAX(hp->head_dim, hd);
        hp->n_head_kv = PB_MAX(hp->n_head_kv, hkv[il]);
        hp->n_ff = PB_MAX(hp->n_ff, ff[il]);
    }
    hp->query_scale = 1.0f; /* Gemma 4: no QK^T scaling (the q/k norm gains carry it) */
    hp->has_qk_norm = true;
    hp->has_post_norms = true;
    hp->has_v_norm = true;
    return PB_OK;
}

pb_status pb_hparams_from_gguf(const pb_gguf *g, pb_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    pb_status s = arch_from_gguf(g, &hp->arch);
    if (s) return s;
    pb_arch a = hp->arch;
    hp->n_ctx_train = 8192;
    if ((s = get_int(g, a, "context_length", false, 1, 1 << 24, &hp->n_ctx_train)) ||
        (s = get_int(g, a, "embedding_length", true, 1, 1 << 16, &hp->n_embd)) ||
        (s = get_int(g, a, "block_count", true, 1, PB_MAX_LAYERS, &hp->n_layer)) ||
        (s = get_int(g, a, "attention.head_count", true, 1, 1024, &hp->n_head)))
        return s;
    hp->norm_eps = 1e-6f;
    if (a == PB_ARCH_GEMMA4) {
        if ((s = get_float(g, a, "attention.layer_norm_rms_epsilon", 0.0f, 1.0f, &hp->norm_eps)) ||
            (s = hparams_gemma4(g, hp)))
            return s;
        return n_vocab_from_gguf(g, hp);
    }
    if ((s = get_int(g, a, "feed_forward_length", true, 1, 1 << 20, &hp->n_ff))) return s;
    hp->n_head_kv = hp->n_head; /* llama.cpp: defaults to n_head */
    hp->head_dim = hp->n_embd / hp->n_head;
    int v_len = -1;
    if ((s = get_int(g, a, "attention.head_count_kv", false, 1, 1024, &hp->n_head_kv)) ||
        (s = get_int(g, a, "attention.key_length", false, 2, PB_MAX_HEAD_DIM, &hp->head_dim)) ||
        (s = get_int(g, a, "attention.value_length", false, 2, PB_MAX_HEAD_DIM, &v_len)))
        return s;
    if (hp->n_head % hp->n_head_kv != 0)
        return pb_error(PB_ERR_FORMAT, "model: head_count %d is not a multiple of head_count_kv %d", hp->n_head,
                        hp->n_head_kv);
    if (hp->n_head / hp->n_head_kv > PB_MAX_GQA)
        return pb_error(PB_ERR_UNSUPPORTED, "model: %d query heads per kv head (at most %d)",
                        hp->n_head / hp->n_head_kv, PB_MAX_GQA);
    if (hp->head_dim % 2 != 0 || hp->head_dim < 2 || hp->head_dim > PB_MAX_HEAD_DIM)
        return pb_error(PB_ERR_FORMAT, "model: head dimension %d must be even and <= %d", hp->head_dim,
                        PB_MAX_HEAD_DIM);
    if (v_len != -1 && v_len != hp->head_dim)
        return pb_error(PB_ERR_UNSUPPORTED, "model: value_length %d differs from key_length %d", v_len, hp->head_dim);

    hp->norm_eps = 1e-6f;
    if ((s = get_float(g, a, "attention.layer_norm_rms_epsilon", 0.0f, 1.0f, &hp->norm_eps))) return s;

    /* RoPE: Gemma 1/2 write no base (llama.cpp default 10000); Gemma 3 global layers use freq_base (HF
     * default 1e6), local layers 10000; optional linear scaling on global layers only. */
    hp->rope_base = a == PB_ARCH_GEMMA3 ? 1000000.0f : 10000.0f;
    hp->rope_base_local = 10000.0f;
    hp->rope_scale = 1.0f;
    if ((s = get_float(g, a, "rope.freq_base", 1.0f, 1e12f, &hp->rope_base))) return s;
    if (a != PB_ARCH_GEMMA3) hp->rope_base_local = hp->rope_base;
    {
        char k[128];
        pb_gguf_str type = {0};
        pb_status ts = pb_gguf_get_str(g, akey(k, sizeof k, a, "rope.scaling.type"), &type);
        if (ts && ts != PB_ERR_NOT_FOUND) return ts;
        bool linear = ts == PB_ERR_NOT_FOUND || (type.len == 6 && memcmp(type.ptr, "linear", 6) == 0) ||
                      (type.len == 4 && memcmp(type.ptr, "none", 4) == 0);
        if (!linear)
            return pb_error(PB_ERR_UNSUPPORTED, "model: rope scaling type '%.*s' is not supported (linear)",
                            (int)(type.len > 32 ? 32 : type.len), type.ptr);
        if (!(ts == PB_OK && type.len == 4) &&
            (s = get_float(g, a, "rope.scaling.factor", 1e-3f, 1e6f, &hp->rope_scale)))
            return s;
    }

    /* Soft-capping and sliding windows: llama.cpp's gemma2 defaults (50, 30, 4096) when keys are absent. */
    if (a == PB_ARCH_GEMMA2) {
        hp->attn_softcap = 50.0f;
        hp->final_softcap = 30.0f;
        hp->sliding_window = 4096;
    }
    if (a != PB_ARCH_GEMMA) {
        if ((s = get_float(g, a, "attn_logit_softcapping", 0.0f, 1e6f, &hp->attn_softcap)) ||
            (s = get_float(g, a, "final_logit_softcapping", 0.0f, 1e6f, &hp->final_softcap)) ||
            (s = get_int(g, a, "attention.sliding_window", a == PB_ARCH_GEMMA3, 1, 1 << 24, &hp->sliding_window)))
            return s;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        /* Gemma 2: even layers local; Gemma 3: 5 local then 1 global (il % 6 < 5 local). */
        bool local = a == PB_ARCH_GEMMA2 ? (il % 2 == 0) : a == PB_ARCH_GEMMA3 ? (il % 6 < 5) : false;
        hp->swa_layer[il] = (uint8_t)(local && hp->sliding_window > 0);
    }

    /* Attention scale (no standard GGUF key): 1/sqrt(head_dim), except llama.cpp's rule for the 27B models
     * (gemma2 46 layers, gemma3 62 layers): 1/sqrt(n_embd/n_head). An explicit
     * {arch}.attention.query_pre_attn_scalar key (our converter may write it) wins. */
    float qpas = (float)hp->head_dim;
    if ((a == PB_ARCH_GEMMA2 && hp->n_layer == 46) || (a == PB_ARCH_GEMMA3 && hp->n_layer == 62))
        qpas = (float)hp->n_embd / (float)hp->n_head;
    if ((s = get_float(g, a, "attention.query_pre_attn_scalar", 1e-6f, 1e9f, &qpas))) return s;
    hp->query_scale = (float)(1.0 / sqrt((double)qpas));

    hp->has_qk_norm = a == PB_ARCH_GEMMA3;
    hp->has_post_norms = a != PB_ARCH_GEMMA;
    hp->hd_swa = hp->hd_full = hp->head_dim;
    for (int il = 0; il < hp->n_layer; il++) {
        hp->head_dim_l[il] = (int16_t)hp->head_dim;
        hp->n_head_kv_l[il] = (int16_t)hp->n_head_kv;
        hp->n_ff_l[il] = hp->n_ff;
        hp->kv_src[il] = (int16_t)il;
    }

    return n_vocab_from_gguf(g, hp);
}

// --- tensor table check -----------------------------------------------------------------------------

typedef struct {
    void (*report)(void *, const char *, const char *);
    void *user;
    pb_status first;
} checker;

static void problem(checker *c, pb_status s, const char *tensor, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void problem(checker *c, pb_status s, const char *tensor, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->report) c->report(c->user, tensor, msg);
    if (c->first == PB_OK) {
        c->first = s;
        pb_error(s, "model: tensor '%s': %s", tensor, msg);
    }
}

/* Checks one tensor: present (unless optional), n_dims, ne, and a type we can use. matrix: used by a matmul
 * (needs dequantization and a dot kernel); otherwise a norm vector (any readable type). ne2: experts (else 1). */
static const pb_gguf_tensor *check_t(checker *c, const pb_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                                     int64_t ne2, bool matrix, bool optional) {
    const pb_gguf_tensor *t = pb_gguf_find_tensor(g, name);
    if (!t) {
        if (!optional) problem(c, PB_ERR_FORMAT, name, "missing");
        return NULL;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1) {
        problem(c, PB_ERR_FORMAT, name, "shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]",
                (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], (long long)ne0,
                (long long)ne1, (long long)ne2);
        return NULL;
    }
    const pb_type_traits *tr = pb_kernels_type(t->type);
    if (tr->blck == 0 || !tr->supported || !tr->to_float) {
        problem(c, PB_ERR_UNSUPPORTED, name, "tensor type %s is not supported", pb_type_name(t->type));
        return NULL;
    }
    if (ne0 % tr->blck != 0) {
        problem(c, PB_ERR_FORMAT, name, "row of %lld is not a multiple of the %s block (%lld)", (long long)ne0,
                pb_type_name(t->type), (long long)tr->blck);
        return NULL;
    }
    if (matrix && !tr->vec_dot) {
        problem(c, PB_ERR_UNSUPPORTED, name, "no dot-product kernel for type %s", pb_type_name(t->type));
        return NULL;
    }
    return t;
}

static const pb_gguf_tensor *check_one(checker *c, const pb_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                                       bool matrix, bool optional) {
    return check_t(c, g, name, ne0, ne1, 1, matrix, optional);
}

static pb_wmat wm(const pb_gguf_tensor *t) { return (pb_wmat){t, t ? t->data : NULL, false}; }

/* Gemma 4 extras of layer il: PLE block, layer scale, MoE block (see model_impl.h). */
static void bind_gemma4_layer(const pb_gguf *g, const pb_hparams *hp, checker *c, int il, pb_layer_w *w) {
    int64_t d = hp->n_embd, P = hp->n_embd_per_layer, E = hp->n_expert, I = hp->n_ff_exp;
    char name[96];
#define T(suffix, ne0, ne1, mat, opt)                                                                                  \
    (snprintf(name, sizeof name, "blk.%d." suffix, il), check_one(c, g, name, ne0, ne1, mat, opt))
    T("layer_output_scale.weight", 1, 1, false, true);
    if (P > 0) {
        w->inp_gate = wm(T("inp_gate.weight", d, P, true, false));
        w->proj = wm(T("proj.weight", P, d, true, false));
        T("post_norm.weight", d, 1, false, false);
    }
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
    if (E > 0 || pb_gguf_find_tensor(g, name)) {
        if (E < 1) {
            problem(c, PB_ERR_FORMAT, name, "present but key 'gemma4.expert_count' is missing");
            return;
        }
        w->gate_inp = wm(T("ffn_gate_inp.weight", d, E, true, false));
        T("ffn_gate_inp.scale", d, 1, false, false);
        T("ffn_down_exps.scale", E, 1, false, true);
        T("pre_ffw_norm_2.weight", d, 1, false, false);
        T("post_ffw_norm_1.weight", d, 1, false, false);
        T("post_ffw_norm_2.weight", d, 1, false, false);
        snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", il);
        if (pb_gguf_find_tensor(g, name)) {
            w->exp_gate_up = check_t(c, g, name, d, 2 * I, E, true, false);
        } else {
            snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", il);
            w->exp_gate = check_t(c, g, name, d, I, E, true, false);
            snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", il);
            w->exp_up = check_t(c, g, name, d, I, E, true, false);
        }
        snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", il);
        w->exp_down = check_t(c, g, name, I, d, E, true, false);
    }
#undef T
}

/* Binds (or only checks, when m == NULL) every tensor of the architecture, with each layer's own geometry. */
static pb_status bind_tensors(const pb_gguf *g, const pb_hparams *hp, checker *c, pb_model *m) {
    int64_t d = hp->n_embd, V = hp->n_vocab, L = hp->n_layer, P = hp->n_embd_per_layer;
    if (V < 1) problem(c, PB_ERR_FORMAT, "token_embd.weight", "missing (and no tokenizer.ggml.tokens)");
    const pb_gguf_tensor *te = check_one(c, g, "token_embd.weight", d, V, true, false);
    const pb_gguf_tensor *out = check_one(c, g, "output.weight", d, V, true, true);
    const pb_gguf_tensor *on = check_one(c, g, "output_norm.weight", d, 1, false, false);
    /* One row per token id, as llama.cpp requires: ids the tokenizer makes past the rows, or rows it has no piece
     * for (a sampled id), would fail only in the middle of a prompt or an answer. */
    uint64_t n_tok;
    if (te && pb_gguf_get_arr(g, "tokenizer.ggml.tokens", NULL, &n_tok, NULL) == PB_OK && n_tok != (uint64_t)V)
        problem(c, PB_ERR_FORMAT, "token_embd.weight", "%lld rows, but tokenizer.ggml.tokens lists %llu tokens",
                (long long)V, (unsigned long long)n_tok);
    if (m) {
        m->tok_embd = wm(te);
        m->output = out ? wm(out) : m->tok_embd; /* tied: HF tie_word_embeddings */
        (void)on;
    }
    if (hp->arch == PB_ARCH_GEMMA4) {
        check_one(c, g, "rope_freqs.weight", hp->hd_full / 2, 1, false, true);
        if (P > 0) {
            const pb_gguf_tensor *pt = check_one(c, g, "per_layer_token_embd.weight", L * P, V, false, false);
            const pb_gguf_tensor *pp = check_one(c, g, "per_layer_model_proj.weight", d, L * P, true, false);
            check_one(c, g, "per_layer_proj_norm.weight", P, 1, false, false);
            if (m) m->ple_tok = wm(pt), m->ple_proj = wm(pp);
        } else { /* the tables without their width would be ignored: another model, silently */
            static const char *const ple[] = {"per_layer_token_embd.weight", "per_layer_model_proj.weight",
                                              "per_layer_proj_norm.weight"};
            for (int i = 0; i < 3; i++)
                if (pb_gguf_find_tensor(g, ple[i]))
                    problem(c, PB_ERR_FORMAT, ple[i],
                            "present but key 'gemma4.embedding_length_per_layer_input' is 0 or missing");
        }
    }
    char name[96];
#define T(suffix, ne0, ne1, mat, opt)                                                                                  \
    (snprintf(name, sizeof name, "blk.%d." suffix ".weight", il), check_one(c, g, name, ne0, ne1, mat, opt))
    for (int il = 0; il < hp->n_layer; il++) {
        pb_layer_w w = {0};
        int64_t hd = hp->head_dim_l[il], F = hp->n_ff_l[il];
        int64_t q_dim = (int64_t)hp->n_head * hd, kv_dim = (int64_t)hp->n_head_kv_l[il] * hd;
        bool own_kv = hp->kv_src[il] == il, g4 = hp->arch == PB_ARCH_GEMMA4;
        w.wq.t = T("attn_q", d, q_dim, true, false);
        if (own_kv) {
            w.wk.t = T("attn_k", d, kv_dim, true, false);
            w.wv.t = T("attn_v", d, kv_dim, true, g4); /* Gemma 4 k_eq_v: absent, V = raw K */
        }
        w.wo.t = T("attn_output", q_dim, d, true, false);
        w.gate.t = T("ffn_gate", d, F, true, false);
        w.up.t = T("ffn_up", d, F, true, false);
        w.down.t = T("ffn_down", F, d, true, false);
        T("attn_norm", d, 1, false, false);
        T("ffn_norm", d, 1, false, false);
        if (hp->has_post_norms) {
            T("post_attention_norm", d, 1, false, false);
            T("post_ffw_norm", d, 1, false, false);
        }
        if (hp->has_qk_norm) {
            T("attn_q_norm", hd, 1, false, false);
            if (own_kv) T("attn_k_norm", hd, 1, false, false);
        }
        if (g4) bind_gemma4_layer(g, hp, c, il, &w);
        if (m) {
            pb_wmat *ls[] = {&w.wq, &w.wk, &w.wv, &w.wo, &w.gate, &w.up, &w.down};
            for (int i = 0; i < 7; i++) ls[i]->data = ls[i]->t ? ls[i]->t->data : NULL;
            m->layers[il] = w;
        }
    }
#undef T
    return c->first;
}

pb_status pb_arch_check_tensors(const pb_gguf *g, const pb_hparams *hp,
                                void (*report)(void *user, const char *tensor, const char *problem), void *user) {
    checker c = {report, user, PB_OK};
    return bind_tensors(g, hp, &c, NULL);
}

// --- fingerprint: 256-bit hash, four 64-bit lanes -----------------------------------------------------

typedef struct {
    uint64_t h[4];
} fp_hash;

static uint64_t mix64(uint64_t x) { /* splitmix64 finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void fp_init(fp_hash *f) {
    for (int i = 0; i < 4; i++) f->h[i] = 0xcbf29ce484222325ULL ^ mix64((uint64_t)i + 1);
}

static void fp_bytes(fp_hash *f, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++)
        for (int l = 0; l < 4; l++) f->h[l] = (f->h[l] ^ (p[i] + (uint64_t)l * 131u)) * 0x100000001b3ULL;
}

static void fp_u64(fp_hash *f, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    fp_bytes(f, b, 8);
}

static void fp_final(fp_hash *f, uint8_t out[32]) {
    uint64_t a = f->h[0], b = f->h[1], c = f->h[2], d = f->h[3];
    for (int r = 0; r < 2; r++) { /* cross-lane avalanche */
        a = mix64(a ^ d);
        b = mix64(b ^ a);
        c = mix64(c ^ b);
        d = mix64(d ^ c);
    }
    uint64_t v[4] = {a, b, c, d};
    for (int l = 0; l < 4; l++)
        for (int i = 0; i < 8; i++) out[l * 8 + i] = (uint8_t)(v[l] >> (8 * i));
}

/* hparams (field by field, so padding never enters) + tensor table + up to 3 x 1 KiB of every tensor. */
static void fingerprint(const pb_model *m, uint8_t out[32]) {
    const pb_hparams *hp = &m->hp;
    fp_hash f;
    fp_init(&f);
    int64_t ints[] = {hp->arch, hp->n_layer, hp->n_embd,      hp->n_head,         hp->n_head_kv,   hp->head_dim,
                      hp->n_ff, hp->n_vocab, hp->n_ctx_train, hp->sliding_window, hp->has_qk_norm, hp->has_post_norms};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) fp_u64(&f, (uint64_t)ints[i]);
    float fl[] = {hp->norm_eps,     hp->rope_base,     hp->rope_base_local, hp->rope_scale,
                  hp->attn_softcap, hp->final_softcap, hp->query_scale};
    fp_bytes(&f, fl, sizeof fl);
    fp_bytes(&f, hp->swa_layer, (size_t)hp->n_layer);
    int64_t nt = pb_gguf_n_tensors(m->g);
    for (int64_t i = 0; i < nt; i++) {
        const pb_gguf_tensor *t = pb_gguf_tensor_at(m->g, i);
        fp_bytes(&f, t->name, strlen(t->name) + 1);
        fp_u64(&f, (uint64_t)t->type);
        for (int k = 0; k < 4; k++) fp_u64(&f, (uint64_t)t->ne[k]);
        fp_u64(&f, t->nbytes);
        const uint8_t *p = t->data;
        size_t chunk = 1024;
        if (t->nbytes <= 3 * chunk) {
            fp_bytes(&f, p, t->nbytes);
        } else {
            fp_bytes(&f, p, chunk);
            fp_bytes(&f, p + t->nbytes / 2, chunk);
            fp_bytes(&f, p + t->nbytes - chunk, chunk);
        }
    }
    fp_final(&f, out);
}

// --- open / close -------------------------------------------------------------------------------------

pb_model_params pb_model_default_params(void) {
    pb_model_params p;
    memset(&p, 0, sizeof p);
    p.n_threads = 0;
    p.use_mmap = true;
    p.mem_limit = 0;
    p.check_memory = true;
    p.repack = true;
    p.gpu = -1; /* auto: the GPU when one is usable (a build with CUDA), else the CPU */
    return p;
}

static const char *ftype_name(uint32_t ft) {
    switch (ft) { /* llama.cpp's LLAMA_FTYPE numbering */
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K_S";
    case 12: return "Q3_K_M";
    case 13: return "Q3_K_L";
    case 14: return "Q4_K_S";
    case 15: return "Q4_K_M";
    case 16: return "Q5_K_S";
    case 17: return "Q5_K_M";
    case 18: return "Q6_K";
    case 32: return "BF16";
    }
    return NULL;
}

static void fill_info(pb_model *m) {
    pb_model_info *in = &m->info;
    const pb_hparams *hp = &m->hp;
    memset(in, 0, sizeof *in);
    snprintf(in->arch, sizeof in->arch, "%s", arch_name(hp->arch));
    pb_gguf_str s;
    if (pb_gguf_get_str(m->g, "general.name", &s) == PB_OK)
        snprintf(in->name, sizeof in->name, "%.*s", (int)(s.len > 127 ? 127 : s.len), s.ptr);
    in->n_layer = hp->n_layer;
    in->n_embd = hp->n_embd;
    in->n_head = hp->n_head;
    in->n_head_kv = hp->n_head_kv;
    in->head_dim = hp->head_dim;
    in->n_ff = hp->n_ff;
    in->n_vocab = hp->n_vocab;
    in->n_ctx_train = hp->n_ctx_train;
    in->sliding_window = hp->sliding_window;
    int64_t nt = pb_gguf_n_tensors(m->g);
    int64_t count[PB_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < nt; i++) {
        const pb_gguf_tensor *t = pb_gguf_tensor_at(m->g, i);
        in->n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        in->weight_bytes += t->nbytes;
        if (t->ne[1] > 1 && t->type >= 0 && t->type < PB_TYPE_COUNT) count[t->type] += t->ne[0] * t->ne[1];
    }
    uint32_t ft;
    const char *fn = pb_gguf_get_u32(m->g, "general.file_type", &ft) == PB_OK ? ftype_name(ft) : NULL;
    if (!fn) { /* best effort: the type holding most matrix elements */
        int best = 0;
        for (int t = 1; t < PB_TYPE_COUNT; t++)
            if (count[t] > count[best]) best = t;
        fn = pb_type_name(best);
    }
    snprintf(in->file_type, sizeof in->file_type, "%s", fn);
    fingerprint(m, in->fingerprint);
}

/* Copies a norm vector (any readable type) to float32. */
static void copy_norm(const pb_gguf_tensor *t, float *dst) {
    pb_kernels_type(t->type)->to_float(t->data, dst, t->ne[0]);
}

/* Copies one norm-like vector when present (NULL otherwise); advances *p. Only names bind_tensors checked (shape,
 * type). A value that is not finite sets *bad (the first only): a NaN gain or layer scale opens fine and then turns
 * every logit into NaN, which Gemma 2/4's soft-cap hides as an answer of token 0. */
static float *norm_opt(pb_model *m, const char *name, float **p, pb_status *bad) {
    const pb_gguf_tensor *t = pb_gguf_find_tensor(m->g, name);
    if (!t) return NULL;
    float *dst = *p;
    copy_norm(t, dst);
    for (int64_t i = 0; i < t->ne[0] && *bad == PB_OK; i++)
        if (!isfinite(dst[i]))
            *bad = pb_error(PB_ERR_FORMAT, "model: tensor '%s'[%lld] = %g is not finite", name, (long long)i,
                            (double)dst[i]);
    *p += t->ne[0] * t->ne[1] * t->ne[2];
    return dst;
}

static pb_status copy_norms(pb_model *m) {
    const pb_hparams *hp = &m->hp;
    int64_t d = hp->n_embd, P = hp->n_embd_per_layer;
    /* an upper bound: every optional vector of a layer counted (checked shapes: d, hd, E or 1 values) */
    int64_t per_layer = 9 * d + 2 * PB_MAX_HEAD_DIM + hp->n_expert + 1;
    int64_t total = d + P + 2 * PB_MAX_HEAD_DIM + per_layer * hp->n_layer;
    m->norm_mem = pb_malloc(sizeof(float) * (size_t)total);
    if (!m->norm_mem) return PB_ERR_NOMEM;
    float *p = m->norm_mem;
    m->ones = p;
    for (int i = 0; i < PB_MAX_HEAD_DIM; i++) p[i] = 1.0f;
    p += PB_MAX_HEAD_DIM;
    pb_status bad = PB_OK;
    m->output_norm = norm_opt(m, "output_norm.weight", &p, &bad);
    if (P > 0) m->ple_proj_norm = norm_opt(m, "per_layer_proj_norm.weight", &p, &bad); /* else unchecked, unused */
    char name[96];
    for (int il = 0; il < hp->n_layer; il++) {
        pb_layer_w *w = &m->layers[il];
#define NORM(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), norm_opt(m, name, &p, &bad))
        w->attn_norm = NORM("attn_norm.weight");
        w->ffn_norm = NORM("ffn_norm.weight");
        if (hp->has_post_norms) {
            w->post_attn_norm = NORM("post_attention_norm.weight");
            w->post_ffw_norm = NORM("post_ffw_norm.weight");
        }
        if (hp->has_qk_norm) {
            w->q_norm = NORM("attn_q_norm.weight");
            w->k_norm = hp->kv_src[il] == il ? NORM("attn_k_norm.weight") : NULL;
        }
        w->out_scale = 1.0f;
        if (hp->arch == PB_ARCH_GEMMA4) {
            const float *sc = NORM("layer_output_scale.weight");
            if (sc) w->out_scale = *sc;
            if (hp->n_embd_per_layer > 0) w->ple_post_norm = NORM("post_norm.weight");
            if (w->gate_inp.t) {
                w->router_scale = NORM("ffn_gate_inp.scale");
                w->expert_scale = NORM("ffn_down_exps.scale");
                w->pre_ffw_norm_2 = NORM("pre_ffw_norm_2.weight");
                w->post_ffw_norm_1 = NORM("post_ffw_norm_1.weight");
                w->post_ffw_norm_2 = NORM("post_ffw_norm_2.weight");
            }
        }
#undef NORM
    }
    PB_ASSERT(p <= m->norm_mem + total);
    return bad;
}

typedef struct {
    const pb_gguf_tensor *t;
    uint8_t *dst;
    bool pack; /* else a plain copy */
} pack_job;

static void pack_worker(void *ctx, int ith, int nth) {
    const pack_job *j = ctx;
    int64_t lo, hi;
    if (!j->pack) {
        pb_split((int64_t)j->t->nbytes, ith, nth, &lo, &hi);
        if (lo < hi) memcpy(j->dst + lo, (const uint8_t *)j->t->data + lo, (size_t)(hi - lo));
        return;
    }
    pb_split(j->t->ne[1] / PB_PACK_ROWS, ith, nth, &lo, &hi);
    if (lo < hi) (void)pb_pack_groups(j->t->type, j->t->data, j->dst, j->t->ne[0], j->t->ne[1], lo, hi);
}

/* Repacks every Q4_0/Q8_0/Q4_K/Q6_K matrix the CPU has packed kernels for (kernels/matmul.h) and, where the OS
 * has transparent huge pages, copies the other matrices as they are. A mapped file: with a packed-weights cache
 * (params.pack_cache_dir) holding a valid copy, those matrices become views into that file (huge pages where the
 * OS maps file pages so) and nothing is repacked; otherwise into one anonymous buffer, in parallel, each
 * tensor's file pages dropped from this process as soon as it is copied, so the weights are resident once, and
 * the copied matrices are then written to the cache for the next open. A heap copy: packed in place, nothing
 * else copied. */
static pb_status pack_weights(pb_model *m, const char *path) {
    pb_wmat *all[2 + 7 * PB_MAX_LAYERS], *cm[2 + 7 * PB_MAX_LAYERS];
    bool cpk[2 + 7 * PB_MAX_LAYERS];
    int n = 0, n_c = 0;
    all[n++] = &m->tok_embd;
    if (m->output.t != m->tok_embd.t) all[n++] = &m->output;
    for (int il = 0; il < m->hp.n_layer; il++) {
        pb_layer_w *w = &m->layers[il];
        pb_wmat *ls[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->gate, &w->up, &w->down};
        for (int i = 0; i < 7; i++)
            if (ls[i]->t) all[n++] = ls[i]; /* Gemma 4: no K/V on shared layers, no V on k_eq_v layers */
    }
    /* With huge pages, the other matrices are copied too: decode streams every weight byte per token, and
     * 2 MiB pages spare the TLB misses of 4 KiB file pages (measured ~10% faster decode on the 2B model). */
    bool copy_all = m->map.mapped && pb_huge_pages_available() && !getenv("PB_NO_HUGE");
    const char *cache_dir = m->params.pack_cache_dir;
    size_t total = 0;
    for (int i = 0; i < n; i++) { /* the copied matrices: the anonymous buffer's, or the cache file's */
        bool pk = pb_pack_supported(all[i]->t->type, all[i]->t->ne[0], all[i]->t->ne[1]);
        if (!pk && !copy_all) continue;
        total += PB_PAD(all[i]->t->nbytes, 64);
        cpk[n_c] = pk;
        cm[n_c++] = all[i];
    }
    if (total == 0) return PB_OK;
    pb_status s = PB_OK;
    if (!m->map.mapped) { /* heap copy: writable, pack in place */
        for (int i = 0; i < n && s == PB_OK; i++) {
            const pb_gguf_tensor *t = all[i]->t;
            if (!pb_pack_supported(t->type, t->ne[0], t->ne[1])) continue;
            if ((s = pb_pack_rows(t->type, (void *)t->data, t->ne[0], t->ne[1])) == PB_OK) all[i]->packed = true;
        }
    } else if (cache_dir && pb_pack_cache_load(m, cache_dir, path, cm, cpk, n_c) == PB_OK) {
        /* the copied matrices are views into the cache file */
    } else {
        uint8_t *buf = pb_big_alloc(total);
        if (!buf) return PB_OK; /* no memory for a copy: the file layout still works, only slower */
        m->packed_mem = buf;
        m->packed_size = total;
        pb_pool *pool = NULL;
        int nth = PB_MAX(pb_model_default_threads(m), pb_cpu_physical_cores()); /* a one-off: all cores */
        if (nth > 1 && pb_pool_new(nth, &pool) != PB_OK) pool = NULL;
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            const pb_gguf_tensor *t = all[i]->t;
            bool pk = pb_pack_supported(t->type, t->ne[0], t->ne[1]);
            if (!pk && !copy_all) continue;
            pack_job j = {t, buf + off, pk};
            if (pool)
                pb_pool_run(pool, pack_worker, &j);
            else
                pack_worker(&j, 0, 1);
            all[i]->data = buf + off;
            all[i]->packed = pk;
            off += PB_PAD(t->nbytes, 64);
            pb_map_release(&m->map, t->data, t->nbytes);
        }
        pb_pool_free(pool);
        if (cache_dir && m->params.pack_cache_background)
            pb_pack_cache_store_background(m, cache_dir, path, cm, cpk, n_c);
        else if (cache_dir)
            pb_pack_cache_store(m, cache_dir, path, cm, cpk, n_c);
    }
    for (int i = 0; i < n; i++) m->n_packed += all[i]->packed;
    if (m->output.t == m->tok_embd.t) m->output = m->tok_embd;
    return s;
}

pb_status pb_model_open(const char *path, const pb_model_params *params, pb_model **out) {
    if (!out) return pb_error(PB_ERR_INVALID_ARG, "pb_model_open: out is NULL");
    *out = NULL;
    if (!path) return pb_error(PB_ERR_INVALID_ARG, "pb_model_open: path is NULL");
    const pb_model_params p = params ? *params : pb_model_default_params();
    if (p.n_threads < 0 || p.n_threads > 256) /* a session's pool takes at most 256 */
        return pb_error(PB_ERR_INVALID_ARG, "pb_model_open: n_threads %d out of range (0..256)", p.n_threads);
    if (p.gpu < -1 || p.gpu > 1)
        return pb_error(PB_ERR_INVALID_ARG, "pb_model_open: gpu %d is not -1 (auto), 0 (CPU) or 1 (GPU required)",
                        p.gpu);
    pb_model *m = pb_calloc(1, sizeof *m);
    if (!m) return PB_ERR_NOMEM;
    m->params = p;
    pb_status s = pb_map_open(path, m->params.use_mmap, &m->map);
    if (s) {
        free(m);
        return s;
    }
    if ((s = pb_gguf_open_memory(m->map.data, m->map.size, &m->g))) goto fail;
    if ((s = pb_hparams_from_gguf(m->g, &m->hp))) goto fail;
    m->layers = pb_calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        s = PB_ERR_NOMEM;
        goto fail;
    }
    checker c = {NULL, NULL, PB_OK};
    if ((s = bind_tensors(m->g, &m->hp, &c, m))) goto fail;
    fill_info(m);
    if (m->params.check_memory) {
        /* Weights-only admission (the engine's pb_estimate_memory adds KV and scratch per session). */
        size_t avail = m->params.mem_limit ? m->params.mem_limit : pb_mem_available();
        if (avail && m->info.weight_bytes > avail) {
            s = pb_error(PB_ERR_MEMORY_LIMIT, "model: weights need %zu MiB but only %zu MiB are available%s",
                         m->info.weight_bytes >> 20, avail >> 20, m->params.mem_limit ? " (mem_limit)" : "");
            goto fail;
        }
    }
    if ((s = copy_norms(m))) goto fail;
    pb_rope_inv_freq(m->rope_inv_global, m->hp.hd_full, m->hp.rope_base, m->hp.rope_scale);
    pb_rope_inv_freq(m->rope_inv_local, m->hp.hd_swa, m->hp.rope_base_local, 1.0f);
    const pb_gguf_tensor *rf = m->hp.arch == PB_ARCH_GEMMA4 ? pb_gguf_find_tensor(m->g, "rope_freqs.weight") : NULL;
    if (rf) { /* llama.cpp freq factors of the full layers: angle / factor. Gemma 4's proportional RoPE writes 1 for
               * the rotated pairs and 1e30 for the others (HF: inverse frequency 0), so those become exactly 0. */
        float ff[PB_MAX_HEAD_DIM / 2];
        copy_norm(rf, ff);
        for (int i = 0; i < m->hp.hd_full / 2; i++)
            if (!(ff[i] > 0.0f)) {
                s = pb_error(PB_ERR_FORMAT, "model: tensor 'rope_freqs.weight'[%d] = %g is not a positive factor", i,
                             (double)ff[i]);
                goto fail;
            }
        for (int i = 0; i < m->hp.hd_full / 2; i++)
            m->rope_inv_global[i] = ff[i] >= 1e29f ? 0.0f : m->rope_inv_global[i] / ff[i];
    }
    /* h0 = E[tok] * sqrt(d) with the float32 sqrt(d): what HF computes in a float32 run and what llama.cpp
     * uses. (HF in bf16 rounds the factor to bf16 -- 48.0 for d = 2304, exact; 45.25 for 2048, -0.01%;
     * 34.0 for 1152, +0.17% -- a difference of the checkpoint dtype, not of the model.) */
    m->embd_scale = (float)sqrt((double)m->hp.n_embd);
    if ((s = pb_model_gpu_attach(m))) goto fail; /* params.gpu: weights uploaded once (model/gpu.c) */
    if (!m->gpu && m->params.repack && (s = pack_weights(m, path))) goto fail; /* the GPU reads the file's rows */
    m->info.n_repacked = m->n_packed;
    m->params.pack_cache_dir = NULL; /* the caller's string: only used during open */
    if ((s = pb_vocab_from_gguf(m->g, &m->vocab))) goto fail;
    *out = m;
    return PB_OK;
fail:
    pb_error_prefix(s, "%s: ", path);
    pb_model_close(m);
    return s;
}

static void model_destroy(pb_model *m) {
    pb_pack_cache_wait(m); /* the writer reads packed_mem */
    pb_model_gpu_detach(m);
    pb_vocab_free(m->vocab);
    pb_big_free(m->packed_mem, m->packed_size);
    pb_map_close(&m->cache_map);
    free(m->norm_mem);
    free(m->layers);
    pb_gguf_close(m->g);
    pb_map_close(&m->map);
    free(m);
}

void pb_model_close(pb_model *m) {
    if (!m) return;
    /* The model must outlive its sessions and batches. Closed too early (an app's teardown in the wrong order, a
     * piece callback), it is not pulled from under them: the last of them to be freed closes it. */
    unsigned prev = atomic_fetch_or(&m->users, PB_MODEL_CLOSED);
    if (prev == 0) {
        model_destroy(m);
    } else if (prev & PB_MODEL_CLOSED) {
        pb_log(2,
               "pb_model_close: the model was closed already (it is closed with the last of its %u users, sessions "
               "and batches); this call did nothing",
               prev & ~PB_MODEL_CLOSED);
    } else {
        pb_log(2,
               "pb_model_close: the model still has %u user%s (sessions and batches); it is closed with the last of "
               "them",
               prev, prev == 1 ? "" : "s");
    }
}

pb_status pb_model_retain(pb_model *m, const char *fn) {
    unsigned prev = atomic_fetch_add(&m->users, 1);
    if (prev & PB_MODEL_CLOSED) {
        pb_model_release(m);
        return pb_error(PB_ERR_INVALID_ARG,
                        "%s: the model was closed (pb_model_close); it stays only until its sessions are freed", fn);
    }
    return PB_OK;
}

void pb_model_release(pb_model *m) {
    if (atomic_fetch_sub(&m->users, 1) == (PB_MODEL_CLOSED | 1)) model_destroy(m);
}

bool pb_model_pack_cache_busy(const pb_model *m) { return m && pb_pack_cache_busy(m); }

void pb_model_pack_cache_wait(pb_model *m) {
    if (m) pb_pack_cache_wait(m);
}

pb_status pb_model_get_info(const pb_model *m, pb_model_info *out) {
    if (!m || !out) return pb_error(PB_ERR_INVALID_ARG, "pb_model_get_info: %s is NULL", m ? "out" : "model");
    *out = m->info;
    return PB_OK;
}

const pb_vocab *pb_model_vocab(const pb_model *m) { return m ? m->vocab : NULL; }
const pb_hparams *pb_model_hparams(const pb_model *m) { return &m->hp; }
const pb_gguf *pb_model_gguf(const pb_model *m) { return m->g; }

int pb_model_default_threads(const pb_model *m) {
    if (m && m->params.n_threads > 0) return m->params.n_threads;
    int n = pb_cpu_physical_cores();
    return n > 0 ? n : 1;
}
