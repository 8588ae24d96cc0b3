/* convert_gemma4.c -- Gemma 4 text models for `convert`: config.json fields, the GGUF tensor table and the
 * gemma4.* keys with llama.cpp's names (convert_hf_to_gguf.py Gemma4Model). No weights are touched here. */
#include "convert_arch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pb_status num(const cJSON *o, const char *key, double def, double lo, double hi, double *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) {
        if (isnan(def)) return pb_error(PB_ERR_FORMAT, "config.json: missing number '%s'", key);
        *out = def;
        return PB_OK;
    }
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= lo && j->valuedouble <= hi))
        return pb_error(PB_ERR_FORMAT, "config.json: '%s' must be a number in [%g, %g]", key, lo, hi);
    *out = j->valuedouble;
    return PB_OK;
}

/* A count: num() and a whole number (2.5 was truncated to 2). */
static pb_status inum(const cJSON *o, const char *key, double def, double lo, double hi, double *out) {
    pb_status s = num(o, key, def, lo, hi, out);
    if (s == PB_OK && *out != floor(*out))
        s = pb_error(PB_ERR_FORMAT, "config.json: '%s' must be an integer in [%g, %g]", key, lo, hi);
    return s;
}

/* A required MoE count under key (or its alias when key is absent). */
static pb_status moe_num(const cJSON *c, const char *key, const char *alias, double lo, double hi, uint32_t *out) {
    double v;
    const char *k = cJSON_GetObjectItemCaseSensitive(c, key) ? key : alias;
    pb_status s = inum(c, k, NAN, lo, hi, &v);
    if (s == PB_OK) *out = (uint32_t)v;
    return s;
}

static bool flag(const cJSON *o, const char *key) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key)); }

/* A value of the first full-attention layer in per_layer_config ({"4": {"head_dim": 512}}) in *out, 0 when
 * absent. Each entry's name must be a layer index and its value (when there) an integer in [1, 1024]: atoi took
 * "4x" for layer 4 and the cast truncated 32.5 to 32. */
static pb_status full_layer_value(const cJSON *c, const cv_hparams *hp, const char *key, uint32_t *out) {
    const cJSON *plc = cJSON_GetObjectItemCaseSensitive(c, "per_layer_config");
    const cJSON *e;
    *out = 0;
    if (plc && !cJSON_IsNull(plc) && !cJSON_IsObject(plc))
        return pb_error(PB_ERR_FORMAT, "config.json: 'per_layer_config' must be an object");
    cJSON_ArrayForEach(e, plc) {
        const char *k = e->string ? e->string : "";
        uint32_t il = 0;
        bool ok = *k != 0 && strlen(k) <= 3;
        for (const char *p = k; ok && *p; p++) ok = *p >= '0' && *p <= '9', il = il * 10 + (uint32_t)(*p - '0');
        if (!ok || il >= hp->n_layer)
            return pb_error(PB_ERR_FORMAT, "config.json: per_layer_config key '%.40s' is not a layer index below %u", k,
                            hp->n_layer);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
        if (!v || cJSON_IsNull(v)) continue;
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1 && v->valuedouble <= 1024) ||
            v->valuedouble != floor(v->valuedouble))
            return pb_error(PB_ERR_FORMAT, "config.json: 'per_layer_config.%s.%s' must be an integer in [1, 1024]", k,
                            key);
        if (!hp->swa[il] && !*out) *out = (uint32_t)v->valuedouble;
    }
    return PB_OK;
}

pb_status cv_gemma4_config(const cJSON *c, cv_hparams *hp, cv_warn_fn warn, void *user) {
    (void)warn, (void)user;
    if (hp->n_layer > CV_MAX_LAYERS) /* cv_hparams_from_config refuses it first */
        return pb_error(PB_ERR_UNSUPPORTED, "config.json: %u layers (at most %d)", hp->n_layer, CV_MAX_LAYERS);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c, "layer_types");
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != (int)hp->n_layer)
        return pb_error(PB_ERR_FORMAT, "config.json: 'layer_types' must list %u layers", hp->n_layer);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const cJSON *e = cJSON_GetArrayItem(lt, (int)il);
        if (!cJSON_IsString(e)) return pb_error(PB_ERR_FORMAT, "config.json: layer_types[%u] is not a string", il);
        hp->swa[il] = strcmp(e->valuestring, "sliding_attention") == 0;
        if (!hp->swa[il] && strcmp(e->valuestring, "full_attention") != 0)
            return pb_error(PB_ERR_UNSUPPORTED, "config.json: layer_types[%u] '%s'", il, e->valuestring);
    }
    double v;
    pb_status s;
    if ((s = inum(c, "sliding_window", NAN, 1, 1 << 24, &v))) return s;
    hp->sliding_window = (uint32_t)v;
    if ((s = num(c, "final_logit_softcapping", 30.0, 0, 1e6, &v))) return s;
    hp->final_softcap = (float)v;
    if ((s = inum(c, "num_kv_shared_layers", 0, 0, hp->n_layer - 1, &v))) return s;
    hp->n_kv_shared = (uint32_t)v;
    if ((s = inum(c, "hidden_size_per_layer_input", 0, 0, 1 << 16, &v))) return s;
    hp->n_embd_per_layer = (uint32_t)v;
    if (hp->n_embd_per_layer) {
        if ((s = inum(c, "vocab_size_per_layer_input", hp->n_vocab, 1, 1 << 24, &v))) return s;
        if ((uint32_t)v != hp->n_vocab)
            return pb_error(PB_ERR_UNSUPPORTED, "config.json: vocab_size_per_layer_input %g differs from vocab_size %u",
                            v, hp->n_vocab);
    }
    hp->n_expert = hp->n_expert_used = hp->n_ff_exp = 0;
    if (flag(c, "enable_moe_block")) { /* transformers' names first, then the aliases configs also carry */
        if ((s = moe_num(c, "num_experts", "num_local_experts", 1, 1024, &hp->n_expert))) return s;
        if ((s = moe_num(c, "top_k_experts", "num_experts_per_tok", 1, hp->n_expert, &hp->n_expert_used))) return s;
        if ((s = moe_num(c, "moe_intermediate_size", "expert_intermediate_size", 1, 1 << 20, &hp->n_ff_exp))) return s;
    }
    hp->double_wide = flag(c, "use_double_wide_mlp");
    hp->k_eq_v = flag(c, "attention_k_eq_v");
    hp->head_dim_full = 0;
    if ((s = inum(c, "global_head_dim", 0, 0, 1024, &v))) return s;
    if (v > 0)
        hp->head_dim_full = (uint32_t)v;
    else if ((s = full_layer_value(c, hp, "head_dim", &hp->head_dim_full)))
        return s;
    if (!hp->head_dim_full) hp->head_dim_full = hp->head_dim;
    if ((s = inum(c, "num_global_key_value_heads", 0, 0, 1024, &v))) return s;
    if (v > 0)
        hp->n_head_kv_full = (uint32_t)v;
    else if ((s = full_layer_value(c, hp, "num_key_value_heads", &hp->n_head_kv_full)))
        return s;
    if (hp->n_head_kv_full && hp->n_head % hp->n_head_kv_full)
        return pb_error(PB_ERR_FORMAT,
                        "config.json: num_attention_heads %u is not a multiple of the full layers' "
                        "%u key/value heads",
                        hp->n_head, hp->n_head_kv_full);
    /* rope_parameters: {"sliding_attention": {rope_theta}, "full_attention": {proportional, partial, theta}} */
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
    if ((s = num(rs, "rope_theta", 10000.0, 1, 1e12, &v))) return s;
    hp->rope_base_swa = (float)v;
    if ((s = num(rf, "rope_theta", 1000000.0, 1, 1e12, &v))) return s;
    hp->rope_base = (float)v;
    if ((s = num(rf, "partial_rotary_factor", 1.0, 0, 1, &v))) return s;
    hp->rope_partial = (float)v;
    if ((s = num(rf, "factor", 1.0, 1, 1, &v))) return s; /* scaled proportional RoPE: not in released models */
    const char *rt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rf, "rope_type"));
    if (rt && strcmp(rt, "proportional") != 0 && strcmp(rt, "default") != 0)
        return pb_error(PB_ERR_UNSUPPORTED, "config.json: full-attention rope_type '%s'", rt);
    uint32_t first_shared = hp->n_layer - hp->n_kv_shared;
    for (uint32_t il = first_shared; il < hp->n_layer; il++) { /* every shared layer needs an earlier producer */
        bool found = false;
        for (uint32_t j = 0; j < first_shared && !found; j++) found = hp->swa[j] == hp->swa[il];
        if (!found)
            return pb_error(PB_ERR_FORMAT,
                            "config.json: num_kv_shared_layers %u: layer %u has no earlier layer of "
                            "its type",
                            hp->n_kv_shared, il);
    }
    return PB_OK;
}

/* Makes a planned matrix one of n_expert stacked matrices (t NULL: counting pass). */
static void expert_dims(cv_tensor *t, int64_t n_expert) {
    if (!t) return;
    t->n_dims = 3;
    t->ne[2] = n_expert;
}

int cv_gemma4_plan(const cv_hparams *hp, cv_tensor *out) {
    cv_tensor tmp;
    int n = 0;
    const int64_t d = hp->n_embd, P = hp->n_embd_per_layer, L = hp->n_layer;
    const uint32_t first_shared = hp->n_layer - hp->n_kv_shared;
#define ADD(...) (cv_tensor_set(out ? &out[n] : &tmp, __VA_ARGS__), n++)
    ADD("output_norm.weight", "norm.weight", -1, CV_VEC, d, 0);
    ADD("rope_freqs.weight", "", -1, CV_GEN, hp->head_dim_full / 2, 0);
    ADD("token_embd.weight", "embed_tokens.weight", -1, CV_EMBD, d, hp->n_vocab);
    if (P) {
        ADD("per_layer_model_proj.weight", "per_layer_model_projection.weight", -1, CV_MAT, d, L * P);
        ADD("per_layer_proj_norm.weight", "per_layer_projection_norm.weight", -1, CV_VEC, P, 0);
        ADD("per_layer_token_embd.weight", "embed_tokens_per_layer.weight", -1, CV_MAT, L * P, hp->n_vocab);
    }
    if (out)
        qsort(out, (size_t)n, sizeof *out, cv_tensor_by_name); /* non-layer tensors by name, as llama.cpp's order */
    for (int il = 0; il < (int)hp->n_layer; il++) {
        int first = n;
        char g[64], h[80];
        bool swa = hp->swa[il], own = (uint32_t)il < first_shared;
        int64_t hd = swa ? hp->head_dim : hp->head_dim_full;
        int64_t hkv = swa || !hp->n_head_kv_full ? hp->n_head_kv : hp->n_head_kv_full;
        int64_t q = (int64_t)hp->n_head * hd, kv = hkv * hd;
        int64_t ff = hp->double_wide && !own ? 2 * (int64_t)hp->n_ff : hp->n_ff;
#define LT(gname, hname, kind, ne0, ne1)                                                                               \
    do {                                                                                                               \
        snprintf(g, sizeof g, "blk.%d." gname, il);                                                                    \
        snprintf(h, sizeof h, "layers.%d." hname, il);                                                                 \
        ADD(g, h, il, kind, ne0, ne1);                                                                                 \
    } while (0)
        LT("attn_norm.weight", "input_layernorm.weight", CV_VEC, d, 0);
        LT("attn_q.weight", "self_attn.q_proj.weight", CV_MAT, d, q);
        LT("attn_q_norm.weight", "self_attn.q_norm.weight", CV_VEC, hd, 0);
        if (own) {
            LT("attn_k.weight", "self_attn.k_proj.weight", CV_MAT, d, kv);
            LT("attn_k_norm.weight", "self_attn.k_norm.weight", CV_VEC, hd, 0);
            if (!(hp->k_eq_v && !swa)) LT("attn_v.weight", "self_attn.v_proj.weight", CV_MAT, d, kv);
        }
        LT("attn_output.weight", "self_attn.o_proj.weight", CV_MAT, q, d);
        LT("post_attention_norm.weight", "post_attention_layernorm.weight", CV_VEC, d, 0);
        LT("ffn_norm.weight", "pre_feedforward_layernorm.weight", CV_VEC, d, 0);
        LT("ffn_gate.weight", "mlp.gate_proj.weight", CV_MAT, d, ff);
        LT("ffn_up.weight", "mlp.up_proj.weight", CV_MAT, d, ff);
        LT("ffn_down.weight", "mlp.down_proj.weight", CV_MAT, ff, d);
        LT("post_ffw_norm.weight", "post_feedforward_layernorm.weight", CV_VEC, d, 0);
        LT("layer_output_scale.weight", "layer_scalar", CV_VEC, 1, 0);
        if (hp->n_expert) { /* the MoE block beside the dense MLP; every value stored as is */
            const int64_t E = hp->n_expert, I = hp->n_ff_exp;
            LT("ffn_gate_inp.weight", "router.proj.weight", CV_MAT, d, E);
            LT("ffn_gate_inp.scale", "router.scale", CV_VEC, d, 0);
            LT("ffn_down_exps.scale", "router.per_expert_scale", CV_VEC, E, 0);
            LT("pre_ffw_norm_2.weight", "pre_feedforward_layernorm_2.weight", CV_VEC, d, 0);
            LT("post_ffw_norm_1.weight", "post_feedforward_layernorm_1.weight", CV_VEC, d, 0);
            LT("post_ffw_norm_2.weight", "post_feedforward_layernorm_2.weight", CV_VEC, d, 0);
            /* HF [E, 2I, d] (gate rows then up rows) and [E, d, I]: GGUF [d, 2I, E] and [I, d, E] */
            LT("ffn_gate_up_exps.weight", "experts.gate_up_proj", CV_MAT, d, 2 * I);
            expert_dims(out ? &out[n - 1] : NULL, E);
            LT("ffn_down_exps.weight", "experts.down_proj", CV_MAT, I, d);
            expert_dims(out ? &out[n - 1] : NULL, E);
        }
        if (P) {
            LT("inp_gate.weight", "per_layer_input_gate.weight", CV_MAT, d, P);
            LT("proj.weight", "per_layer_projection.weight", CV_MAT, P, d);
            LT("post_norm.weight", "post_per_layer_input_norm.weight", CV_VEC, d, 0);
        }
#undef LT
        if (out) qsort(out + first, (size_t)(n - first), sizeof *out, cv_tensor_by_name);
    }
#undef ADD
    return n;
}

pb_status cv_gemma4_write_kv(pb_gguf_writer *w, const cv_hparams *hp) {
    pb_status s = PB_OK;
    uint32_t L = hp->n_layer, first_shared = L - hp->n_kv_shared, arr[CV_MAX_LAYERS];
    uint8_t swa[CV_MAX_LAYERS];
#define U32(key, v)                                                                                                    \
    if (s == PB_OK) s = pb_gguf_set_u32(w, "gemma4." key, (v))
#define F32(key, v)                                                                                                    \
    if (s == PB_OK) s = pb_gguf_set_f32(w, "gemma4." key, (v))
#define ARR(key, t, p)                                                                                                 \
    if (s == PB_OK) s = pb_gguf_set_arr(w, "gemma4." key, t, p, L)
    U32("context_length", hp->n_ctx_train);
    U32("embedding_length", hp->n_embd);
    U32("block_count", L);
    if (hp->double_wide) {
        for (uint32_t il = 0; il < L; il++) arr[il] = il < first_shared ? hp->n_ff : 2 * hp->n_ff;
        ARR("feed_forward_length", PB_GGUF_UINT32, arr);
    } else {
        U32("feed_forward_length", hp->n_ff);
    }
    U32("attention.head_count", hp->n_head);
    F32("attention.layer_norm_rms_epsilon", hp->rms_eps);
    if (hp->n_expert) {
        U32("expert_count", hp->n_expert);
        U32("expert_used_count", hp->n_expert_used);
    }
    U32("attention.key_length", hp->head_dim_full);
    U32("attention.value_length", hp->head_dim_full);
    F32("rope.freq_base", hp->rope_base);
    F32("rope.freq_base_swa", hp->rope_base_swa);
    F32("final_logit_softcapping", hp->final_softcap);
    U32("attention.sliding_window", hp->sliding_window);
    if (hp->n_head_kv_full) {
        for (uint32_t il = 0; il < L; il++) arr[il] = hp->swa[il] ? hp->n_head_kv : hp->n_head_kv_full;
        ARR("attention.head_count_kv", PB_GGUF_UINT32, arr);
    } else {
        U32("attention.head_count_kv", hp->n_head_kv);
    }
    U32("attention.shared_kv_layers", hp->n_kv_shared);
    U32("embedding_length_per_layer_input", hp->n_embd_per_layer);
    for (uint32_t il = 0; il < L; il++) swa[il] = hp->swa[il] ? 1 : 0;
    ARR("attention.sliding_window_pattern", PB_GGUF_BOOL, swa);
    U32("attention.key_length_swa", hp->head_dim);
    U32("attention.value_length_swa", hp->head_dim);
    if (hp->n_expert) U32("expert_feed_forward_length", hp->n_ff_exp);
    U32("rope.dimension_count", hp->head_dim_full);
    U32("rope.dimension_count_swa", hp->head_dim);
#undef U32
#undef F32
#undef ARR
    return s;
}

void cv_gemma4_gen(const cv_hparams *hp, const cv_tensor *t, int64_t r0, int64_t r1, float *buf) {
    /* llama.cpp's converter: n_rot = int(hd_full * partial / 2) pairs rotate (factor 1), the others get 1e30 */
    int64_t n_rot = (int64_t)(hp->head_dim_full * hp->rope_partial / 2);
    for (int64_t r = r0; r < r1; r++)
        for (int64_t i = 0; i < t->ne[0]; i++) buf[(r - r0) * t->ne[0] + i] = i < n_rot ? 1.0f : 1e30f;
}
