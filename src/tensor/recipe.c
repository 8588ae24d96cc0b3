/* recipe.c -- per-tensor type choice of llama.cpp's quantization mixes (q4_k_m-recipe.md). Decisions only. */
#include "tensor/recipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    int ftype;
    int type;
} mixes[] = {
    {"Q4_0", PB_FTYPE_Q4_0, PB_TYPE_Q4_0},     {"Q4_1", PB_FTYPE_Q4_1, PB_TYPE_Q4_1},
    {"Q5_0", PB_FTYPE_Q5_0, PB_TYPE_Q5_0},     {"Q5_1", PB_FTYPE_Q5_1, PB_TYPE_Q5_1},
    {"Q8_0", PB_FTYPE_Q8_0, PB_TYPE_Q8_0},     {"Q2_K", PB_FTYPE_Q2_K, PB_TYPE_Q2_K},
    {"Q3_K_S", PB_FTYPE_Q3_K_S, PB_TYPE_Q3_K}, {"Q3_K_M", PB_FTYPE_Q3_K_M, PB_TYPE_Q3_K},
    {"Q3_K_L", PB_FTYPE_Q3_K_L, PB_TYPE_Q3_K}, {"Q4_K_S", PB_FTYPE_Q4_K_S, PB_TYPE_Q4_K},
    {"Q4_K_M", PB_FTYPE_Q4_K_M, PB_TYPE_Q4_K}, {"Q5_K_S", PB_FTYPE_Q5_K_S, PB_TYPE_Q5_K},
    {"Q5_K_M", PB_FTYPE_Q5_K_M, PB_TYPE_Q5_K}, {"Q6_K", PB_FTYPE_Q6_K, PB_TYPE_Q6_K},
    {"F16", PB_FTYPE_F16, PB_TYPE_F16},        {"BF16", PB_FTYPE_BF16, PB_TYPE_BF16},
    {"F32", PB_FTYPE_ALL_F32, PB_TYPE_F32},
};
#define N_MIXES (int)(sizeof mixes / sizeof mixes[0])

int pb_recipe_ftype_from_name(const char *mix) {
    if (!mix) return -1;
    for (int i = 0; i < N_MIXES; i++)
        if (strcasecmp(mix, mixes[i].name) == 0) return mixes[i].ftype;
    if (strcasecmp(mix, "Q3_K") == 0) return PB_FTYPE_Q3_K_M; /* llama-quantize aliases */
    if (strcasecmp(mix, "Q4_K") == 0) return PB_FTYPE_Q4_K_M;
    if (strcasecmp(mix, "Q5_K") == 0) return PB_FTYPE_Q5_K_M;
    return -1;
}

const char *pb_recipe_ftype_name(int ftype) {
    for (int i = 0; i < N_MIXES; i++)
        if (mixes[i].ftype == ftype) return mixes[i].name;
    return NULL;
}

const char *pb_recipe_mix_list(void) {
    return "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, F16, "
           "BF16, F32";
}

int pb_recipe_default_type(int ftype) {
    for (int i = 0; i < N_MIXES; i++)
        if (mixes[i].ftype == ftype) return mixes[i].type;
    return -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

bool pb_recipe_is_quantizable(const char *name, int n_dims) {
    if (!ends_with(name, "weight") || n_dims < 2) return false;
    if (strstr(name, "_norm.weight")) return false;
    /* llama-quantize's never-quantized tensors (none exist in Gemma, kept for other GGUFs) */
    static const char *const skip[] = {
        "ffn_gate_inp.weight",        "pos_embd.weight",          "token_types.weight",
        "ssm_conv1d.weight",          "time_mix_first.weight",    "time_mix_w1.weight",
        "time_mix_w2.weight",         "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight", "attn_rel_b.weight",        "per_layer_model_proj.weight" /* Gemma 4 PLE */};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (strstr(name, skip[i])) return false;
    return true;
}

pb_status pb_recipe_init(pb_recipe *r, int ftype) {
    memset(r, 0, sizeof *r);
    r->ftype = ftype;
    r->default_type = pb_recipe_default_type(ftype);
    r->n_gqa = 1;
    if (r->default_type < 0) return pb_error(PB_ERR_INVALID_ARG, "quantize: unknown file type %d", ftype);
    return PB_OK;
}

void pb_recipe_count(pb_recipe *r, const char *name) {
    if (strcmp(name, "output.weight") == 0) r->has_output = true;
    if (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight")) r->n_attention_wv++;
    if (strstr(name, "ffn_down")) r->n_ffn_down++;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third in between. */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int fallback(int type, int64_t ne0) {
    int fb;
    switch (type) {
    case PB_TYPE_Q4_K: fb = PB_TYPE_Q5_0; break;
    case PB_TYPE_Q5_K: fb = PB_TYPE_Q5_1; break;
    case PB_TYPE_Q6_K: fb = PB_TYPE_Q8_0; break;
    case PB_TYPE_Q2_K:
    case PB_TYPE_Q3_K: fb = PB_TYPE_Q4_0; break;
    default: fb = type; break;
    }
    if (ne0 % pb_type_get(fb)->blck != 0) fb = PB_TYPE_F16;
    return fb;
}

/* Mix-specific choice before the shape fallback (llama_tensor_get_type, no imatrix, Gemma-relevant
 * rules; Falcon/MoE/70B/IQ-mix rules cannot fire for the mixes we write and are left out). */
static int choose(pb_recipe *r, const char *name, int64_t ne0) {
    const int ft = r->ftype;
    int t = r->default_type;
    /* tied models: the token embeddings (Gemma 4: also the per-layer table, llama.cpp's TOKEN_EMBD category) take
     * the output tensor's type */
    const bool is_output =
        strcmp(name, "output.weight") == 0 || (!r->has_output && (strcmp(name, "token_embd.weight") == 0 ||
                                                                  strcmp(name, "per_layer_token_embd.weight") == 0));
    if (is_output) {
        if (ne0 % pb_type_get(t)->blck != 0) return PB_TYPE_Q8_0;
        return t != PB_TYPE_Q8_0 ? PB_TYPE_Q6_K : t;
    }
    if (strstr(name, "attn_v.weight")) {
        const int i = r->i_attention_wv++, n = r->n_attention_wv;
        if (ft == PB_FTYPE_Q2_K)
            t = r->n_gqa >= 4 ? PB_TYPE_Q4_K : PB_TYPE_Q3_K;
        else if (ft == PB_FTYPE_Q3_K_M)
            t = i < 2 ? PB_TYPE_Q5_K : PB_TYPE_Q4_K;
        else if (ft == PB_FTYPE_Q3_K_L)
            t = PB_TYPE_Q5_K;
        else if ((ft == PB_FTYPE_Q4_K_M || ft == PB_FTYPE_Q5_K_M) && use_more_bits(i, n))
            t = PB_TYPE_Q6_K;
        else if (ft == PB_FTYPE_Q4_K_S && i < 4)
            t = PB_TYPE_Q5_K;
        return t;
    }
    if (strstr(name, "ffn_down")) {
        const int i = r->i_ffn_down++, n = r->n_ffn_down;
        if (ft == PB_FTYPE_Q2_K)
            t = PB_TYPE_Q3_K;
        else if (ft == PB_FTYPE_Q3_K_M)
            t = i < n / 16 ? PB_TYPE_Q5_K : PB_TYPE_Q4_K; /* non-Falcon */
        else if (ft == PB_FTYPE_Q3_K_L)
            t = PB_TYPE_Q5_K;
        else if ((ft == PB_FTYPE_Q4_K_M || ft == PB_FTYPE_Q5_K_M) && use_more_bits(i, n))
            t = PB_TYPE_Q6_K;
        else if (ft == PB_FTYPE_Q4_K_S && i < n / 8)
            t = PB_TYPE_Q5_K;
        return t;
    }
    if (strstr(name, "attn_output.weight")) {
        if (ft == PB_FTYPE_Q2_K)
            t = PB_TYPE_Q3_K;
        else if (ft == PB_FTYPE_Q3_K_M)
            t = PB_TYPE_Q4_K;
        else if (ft == PB_FTYPE_Q3_K_L)
            t = PB_TYPE_Q5_K;
        return t;
    }
    return t;
}

int pb_recipe_tensor_type(pb_recipe *r, const char *name, int64_t ne0) {
    const int base = r->default_type;
    if (base == PB_TYPE_F32 || base == PB_TYPE_F16 || base == PB_TYPE_BF16) return base;
    int t = choose(r, name, ne0);
    if (ne0 % pb_type_get(t)->blck != 0) t = fallback(t, ne0);
    return t;
}

/* Layer number of "blk.N." names, -1 for the others. */
static long layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    return (end != name + 4 && *end == '.') ? v : -1;
}

int pb_recipe_order_cmp(const char *a, const char *b) {
    long la = layer_of(a), lb = layer_of(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}
