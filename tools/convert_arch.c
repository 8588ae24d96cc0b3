/* convert_arch.c -- Gemma 1/2/3 hyperparameters (from config.json or presets), the GGUF tensor table and
 * the {arch}.* metadata exactly as llama.cpp's converter writes them. No weights are touched here. */
#include "convert_arch.h"

#include "kernels/kernels.h"
#include "tensor/recipe.h"
#include "tensor/types.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *cv_arch_name(cv_arch a) {
    switch (a) {
    case CV_GEMMA: return "gemma";
    case CV_GEMMA2: return "gemma2";
    case CV_GEMMA3: return "gemma3";
    case CV_GEMMA4: return "gemma4";
    }
    return "?";
}

/* ---- config.json ----------------------------------------------------------------------------- */

static const struct {
    const char *hf;
    cv_arch arch;
    bool multimodal;
} archs[] = {
    {"GemmaForCausalLM", CV_GEMMA, false},   {"Gemma2ForCausalLM", CV_GEMMA2, false},
    {"Gemma3ForCausalLM", CV_GEMMA3, false}, {"Gemma3ForConditionalGeneration", CV_GEMMA3, true},
    {"Gemma4ForCausalLM", CV_GEMMA4, false}, {"Gemma4ForConditionalGeneration", CV_GEMMA4, true},
};

static const struct {
    const char *model_type;
    cv_arch arch;
} model_types[] = {{"gemma", CV_GEMMA},   {"gemma2", CV_GEMMA2},      {"gemma3_text", CV_GEMMA3},
                   {"gemma3", CV_GEMMA3}, {"gemma4_text", CV_GEMMA4}, {"gemma4", CV_GEMMA4}};

static void warnf(cv_warn_fn warn, void *user, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void warnf(cv_warn_fn warn, void *user, const char *fmt, ...) {
    if (!warn) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    warn(user, buf);
}

/* Positive integer field; def == 0 means required. */
static pb_status get_u32(const cJSON *o, const char *key, uint32_t def, uint32_t *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) {
        if (!def) return pb_error(PB_ERR_FORMAT, "config.json: missing integer '%s'", key);
        *out = def;
        return PB_OK;
    }
    double v = cJSON_IsNumber(j) ? j->valuedouble : -1;
    if (!(v >= 1 && v <= 4294967295.0) || v != floor(v))
        return pb_error(PB_ERR_FORMAT, "config.json: '%s' must be a positive integer", key);
    *out = (uint32_t)v;
    return PB_OK;
}

static pb_status get_f32(const cJSON *o, const char *key, float def, bool required, float *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) {
        if (required) return pb_error(PB_ERR_FORMAT, "config.json: missing number '%s'", key);
        *out = def;
        return PB_OK;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || j->valuedouble <= 0)
        return pb_error(PB_ERR_FORMAT, "config.json: '%s' must be a positive number", key);
    *out = (float)j->valuedouble;
    return PB_OK;
}

static const char *get_str(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* layer_types must be what llama.cpp implies for the arch (it stores no per-layer pattern). */
static pb_status check_layer_types(const cJSON *c, const cv_hparams *hp) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c, "layer_types");
    if (!lt || cJSON_IsNull(lt)) return PB_OK;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != (int)hp->n_layer)
        return pb_error(PB_ERR_FORMAT, "config.json: 'layer_types' must list %u layers", hp->n_layer);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const cJSON *e = cJSON_GetArrayItem(lt, (int)il);
        if (!cJSON_IsString(e)) return pb_error(PB_ERR_FORMAT, "config.json: layer_types[%u] is not a string", il);
        bool want_swa = hp->arch == CV_GEMMA2 ? il % 2 == 0 : hp->arch == CV_GEMMA3 ? il % 6 != 5 : false;
        const char *want = want_swa ? "sliding_attention" : "full_attention";
        if (strcmp(e->valuestring, want) != 0)
            return pb_error(PB_ERR_UNSUPPORTED,
                            "config.json: layer_types[%u] is '%s' but %s GGUF files imply '%s' (llama.cpp stores no "
                            "per-layer pattern)",
                            il, e->valuestring, cv_arch_name(hp->arch), want);
    }
    return PB_OK;
}

/* One rope description (legacy rope_scaling or a rope_parameters entry): type default or linear. */
static pb_status rope_kind(const cJSON *r, const char *what, float *linear) {
    *linear = 0;
    if (!r || cJSON_IsNull(r)) return PB_OK;
    if (!cJSON_IsObject(r)) return pb_error(PB_ERR_FORMAT, "config.json: '%s' is not an object", what);
    const char *t = get_str(r, "rope_type");
    if (!t) t = get_str(r, "type");
    if (!t || strcmp(t, "default") == 0) return PB_OK;
    if (strcmp(t, "linear") != 0)
        return pb_error(PB_ERR_UNSUPPORTED, "config.json: %s rope_type '%s' is not supported (default or linear)", what,
                        t);
    return get_f32(r, "factor", 0, true, linear);
}

static pb_status gemma3_rope(const cJSON *c, cv_hparams *hp) {
    pb_status s;
    float local_base = 10000, local_linear = 0;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    if (cJSON_IsObject(rp)) { /* transformers 5 */
        const cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
        const cJSON *slide = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
        if (!full) full = rp;
        if ((s = get_f32(full, "rope_theta", 1000000.0f, false, &hp->rope_base)) != PB_OK) return s;
        if ((s = rope_kind(full, "rope_parameters.full_attention", &hp->rope_scale_linear)) != PB_OK) return s;
        if (cJSON_IsObject(slide)) {
            if ((s = get_f32(slide, "rope_theta", 10000.0f, false, &local_base)) != PB_OK) return s;
            if ((s = rope_kind(slide, "rope_parameters.sliding_attention", &local_linear)) != PB_OK) return s;
        }
    } else {
        if ((s = get_f32(c, "rope_theta", 1000000.0f, false, &hp->rope_base)) != PB_OK) return s;
        if ((s = rope_kind(cJSON_GetObjectItemCaseSensitive(c, "rope_scaling"), "rope_scaling",
                           &hp->rope_scale_linear)) != PB_OK)
            return s;
        if ((s = get_f32(c, "rope_local_base_freq", 10000.0f, false, &local_base)) != PB_OK) return s;
    }
    if (local_base != 10000.0f || local_linear != 0)
        return pb_error(PB_ERR_UNSUPPORTED,
                        "config.json: sliding-layer rope base %g (scale %g): gemma3 GGUF files imply base 10000 "
                        "without scaling",
                        (double)local_base, (double)local_linear);
    return PB_OK;
}

/* Sets hp->arch from architectures[0] / model_type; *text gets the object holding the text model's fields
 * (config itself, or text_config of a multimodal checkpoint). */
static pb_status detect_arch(const cJSON *config, cv_hparams *hp, const cJSON **text, const char **prefix) {
    const cJSON *c = config;
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(config, "architectures");
    const char *model_type = get_str(config, "model_type");
    bool found = false;
    if (cJSON_IsArray(al) && cJSON_GetArraySize(al) > 0) {
        const cJSON *a0 = cJSON_GetArrayItem(al, 0);
        const char *a = cJSON_IsString(a0) ? a0->valuestring : "?";
        for (size_t i = 0; i < sizeof archs / sizeof archs[0] && !found; i++)
            if (strcmp(a, archs[i].hf) == 0) {
                hp->arch = archs[i].arch;
                found = true;
                if (archs[i].multimodal) {
                    c = cJSON_GetObjectItemCaseSensitive(config, "text_config");
                    if (!cJSON_IsObject(c))
                        return pb_error(PB_ERR_FORMAT, "config.json: %s without an object 'text_config'", a);
                    *prefix = archs[i].arch == CV_GEMMA4 ? "model.language_model." : "language_model.model.";
                    model_type = get_str(c, "model_type");
                }
            }
        if (!found)
            return pb_error(PB_ERR_UNSUPPORTED,
                            "config.json: unsupported architecture '%s' (supported: GemmaForCausalLM, "
                            "Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Gemma4ForCausalLM, "
                            "Gemma4ForConditionalGeneration)",
                            a);
    }
    if (model_type) {
        int mt = 0;
        for (size_t i = 0; i < sizeof model_types / sizeof model_types[0]; i++)
            if (strcmp(model_type, model_types[i].model_type) == 0) mt = (int)model_types[i].arch;
        if (!mt)
            return pb_error(PB_ERR_UNSUPPORTED,
                            "config.json: unsupported model_type '%s' (supported: gemma, gemma2, gemma3, gemma3_text, "
                            "gemma4, gemma4_text)",
                            model_type);
        if (found && (cv_arch)mt != hp->arch)
            return pb_error(PB_ERR_FORMAT, "config.json: model_type '%s' contradicts the architecture (%s)", model_type,
                            cv_arch_name(hp->arch));
        hp->arch = (cv_arch)mt;
        found = true;
    }
    if (!found) return pb_error(PB_ERR_FORMAT, "config.json: neither 'architectures' nor 'model_type' is given");
    *text = c;
    return PB_OK;
}

/* Keys that only some versions have: softcaps, sliding window, rope, layer pattern, query scale. */
static pb_status arch_specific(const cJSON *c, cv_hparams *hp, cv_warn_fn warn, void *user) {
    pb_status s;
    if (hp->arch == CV_GEMMA4) return cv_gemma4_config(c, hp, warn, user);
    bool g3 = hp->arch == CV_GEMMA3;
    const char *act = get_str(c, "hidden_activation");
    if (act && strcmp(act, "gelu_pytorch_tanh") != 0 && strcmp(act, "gelu_tanh") != 0)
        warnf(warn, user, "hidden_activation '%s': GGUF Gemma models always use tanh-approximated GELU", act);

    if (hp->arch == CV_GEMMA2) {
        if ((s = get_u32(c, "sliding_window", 4096, &hp->sliding_window)) != PB_OK) return s;
        if ((s = get_f32(c, "attn_logit_softcapping", 50.0f, false, &hp->attn_softcap)) != PB_OK) return s;
        if ((s = get_f32(c, "final_logit_softcapping", 30.0f, false, &hp->final_softcap)) != PB_OK) return s;
    }
    if (hp->arch == CV_GEMMA || hp->arch == CV_GEMMA2) {
        /* No rope key is written for gemma/gemma2; llama.cpp uses 10000. */
        float theta = 10000;
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
        if ((s = get_f32(cJSON_IsObject(rp) ? rp : c, "rope_theta", 10000.0f, false, &theta)) != PB_OK) return s;
        float lin = 0;
        if ((s = rope_kind(cJSON_IsObject(rp) ? rp : cJSON_GetObjectItemCaseSensitive(c, "rope_scaling"), "rope",
                           &lin)) != PB_OK)
            return s;
        if (theta != 10000.0f || lin != 0)
            return pb_error(PB_ERR_UNSUPPORTED,
                            "config.json: rope_theta %g%s: %s GGUF files have no rope keys and imply 10000",
                            (double)theta, lin != 0 ? " with scaling" : "", cv_arch_name(hp->arch));
    }
    if (g3) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "attn_logit_softcapping");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "final_logit_softcapping");
        if ((a && !cJSON_IsNull(a)) || (f && !cJSON_IsNull(f)))
            return pb_error(PB_ERR_UNSUPPORTED, "config.json: gemma3 with logit softcapping is not supported");
        if ((s = get_u32(c, "sliding_window", 0, &hp->sliding_window)) != PB_OK) return s;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(c, "sliding_window_pattern");
        if (cJSON_IsNumber(pat) && pat->valuedouble != 6)
            return pb_error(PB_ERR_UNSUPPORTED, "config.json: sliding_window_pattern %g (gemma3 GGUF files imply 6)",
                            pat->valuedouble);
        if ((s = gemma3_rope(c, hp)) != PB_OK) return s;
    }
    if ((s = check_layer_types(c, hp)) != PB_OK) return s;

    if (hp->arch != CV_GEMMA) {
        /* llama.cpp scales q by 1/sqrt(head_dim), or 1/sqrt(n_embd/n_head) for the 27B models. */
        bool big = (hp->arch == CV_GEMMA2 && hp->n_layer == 46) || (hp->arch == CV_GEMMA3 && hp->n_layer == 62);
        double want = big ? (double)hp->n_embd / hp->n_head : hp->head_dim;
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(c, "query_pre_attn_scalar");
        if (cJSON_IsNumber(q) && q->valuedouble != want)
            warnf(warn, user,
                  "query_pre_attn_scalar %g differs from the %g that llama.cpp infers for this shape; attention will "
                  "be scaled differently from the original model",
                  q->valuedouble, want);
    }
    return PB_OK;
}

pb_status cv_hparams_from_config(const cJSON *config, cv_hparams *hp, const char **prefix, cv_warn_fn warn,
                                 void *user) {
    memset(hp, 0, sizeof *hp);
    *prefix = "model.";
    if (!cJSON_IsObject(config)) return pb_error(PB_ERR_FORMAT, "config.json: not a JSON object");
    const cJSON *c = NULL;
    pb_status s = detect_arch(config, hp, &c, prefix);
    if (s != PB_OK) return s;
    bool g3 = hp->arch == CV_GEMMA3;
    /* Required everywhere; gemma3 text_config fields default as in the converter / HF. */
    if ((s = get_u32(c, "hidden_size", 0, &hp->n_embd)) != PB_OK) return s;
    if ((s = get_u32(c, "num_hidden_layers", 0, &hp->n_layer)) != PB_OK) return s;
    /* the tensor plan holds ~13 entries a layer: a garbled count overflowed its int size or took gigabytes */
    if (hp->n_layer > CV_MAX_LAYERS)
        return pb_error(PB_ERR_UNSUPPORTED, "config.json: num_hidden_layers %u is more than the %d layers supported",
                        hp->n_layer, CV_MAX_LAYERS);
    if ((s = get_u32(c, "intermediate_size", 0, &hp->n_ff)) != PB_OK) return s;
    if ((s = get_u32(c, "num_attention_heads", g3 ? 8 : 0, &hp->n_head)) != PB_OK) return s;
    if ((s = get_u32(c, "num_key_value_heads", g3 ? 4 : hp->n_head, &hp->n_head_kv)) != PB_OK) return s;
    if ((s = get_u32(c, "head_dim", g3 ? 256 : 0, &hp->head_dim)) != PB_OK) return s;
    if ((s = get_u32(c, "max_position_embeddings", g3 ? 131072 : 0, &hp->n_ctx_train)) != PB_OK) return s;
    if ((s = get_u32(c, "vocab_size", g3 ? 262208 : 0, &hp->n_vocab)) != PB_OK) return s;
    if ((s = get_f32(c, "rms_norm_eps", 1e-6f, !g3, &hp->rms_eps)) != PB_OK) return s;
    if (hp->n_head % hp->n_head_kv)
        return pb_error(PB_ERR_FORMAT,
                        "config.json: num_attention_heads %u is not a multiple of num_key_value_heads %u", hp->n_head,
                        hp->n_head_kv);
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings");
    if (!tie) tie = cJSON_GetObjectItemCaseSensitive(config, "tie_word_embeddings");
    if (cJSON_IsFalse(tie))
        return pb_error(PB_ERR_UNSUPPORTED, "config.json: tie_word_embeddings is false; Gemma GGUF files use the "
                                            "token embedding as the output matrix");
    return arch_specific(c, hp, warn, user);
}

/* ---- presets (shapes of released checkpoints; gemma-architecture.md §7) ------------------------ */

typedef struct preset {
    cv_arch arch;
    const char *size;
    uint32_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx, window;
    float rope_base, rope_linear;
} preset;

static const preset presets[] = {
    /* gemma-1.1-2b, gemma-7b */
    {CV_GEMMA, "2b", 18, 2048, 16384, 8, 1, 256, 256000, 8192, 0, 0, 0},
    {CV_GEMMA, "7b", 28, 3072, 24576, 16, 16, 256, 256000, 8192, 0, 0, 0},
    {CV_GEMMA, "tiny", 4, 256, 512, 2, 1, 64, 4096, 8192, 0, 0, 0},
    /* gemma-2-2b, 9b, 27b; "tiny" = the shapes of the peer llama.cpp fixture gemma2-tiny-v */
    {CV_GEMMA2, "2b", 26, 2304, 9216, 8, 4, 256, 256000, 8192, 4096, 0, 0},
    {CV_GEMMA2, "9b", 42, 3584, 14336, 16, 8, 256, 256000, 8192, 4096, 0, 0},
    {CV_GEMMA2, "27b", 46, 4608, 36864, 32, 16, 128, 256000, 8192, 4096, 0, 0},
    {CV_GEMMA2, "tiny", 26, 256, 512, 2, 1, 64, 4096, 8192, 32, 0, 0},
    /* gemma-3-270m, 1b, 4b (text part; the 4B vocabulary as trimmed by the converter) */
    {CV_GEMMA3, "270m", 18, 640, 2048, 4, 1, 256, 262144, 32768, 512, 1000000, 0},
    {CV_GEMMA3, "1b", 26, 1152, 6912, 4, 1, 256, 262144, 32768, 512, 1000000, 0},
    {CV_GEMMA3, "4b", 34, 2560, 10240, 8, 4, 256, 262144, 131072, 1024, 1000000, 8},
    {CV_GEMMA3, "tiny", 6, 256, 512, 4, 1, 64, 4096, 8192, 32, 1000000, 0},
    /* tiny with 2 query heads a kv head, as Gemma 3 from 4b: the GPU tests' q / k norm in attention blocks of several
     * key splits (docs/CUDA.md "The splits' merge in a thread-block cluster") */
    {CV_GEMMA3, "tiny-gqa2", 6, 256, 512, 4, 2, 64, 4096, 8192, 32, 1000000, 0},
};

/* Gemma 4 E2B / E4B text models (shared/docs/gemma4-architecture.md §4): layer pattern, KV sharing, PLE. */
static bool gemma4_preset(const char *size, cv_hparams *hp) {
    static const struct {
        const char *size;
        uint32_t n_layer, n_embd, n_ff, n_head, n_head_kv, hd, hd_full, n_shared, P, period, window, n_vocab;
        bool double_wide;
    } g4[] = {
        {"e2b", 35, 1536, 6144, 8, 1, 256, 512, 20, 256, 5, 512, 262144, true},
        {"e4b", 42, 2560, 10240, 8, 2, 256, 512, 18, 256, 6, 512, 262144, false},
        {"tiny", 10, 256, 512, 4, 1, 64, 128, 4, 32, 5, 32, 4096, true},
    };
    for (size_t i = 0; i < sizeof g4 / sizeof g4[0]; i++) {
        if (strcmp(g4[i].size, size) != 0) continue;
        hp->arch = CV_GEMMA4;
        hp->n_layer = g4[i].n_layer;
        hp->n_embd = g4[i].n_embd;
        hp->n_ff = g4[i].n_ff;
        hp->n_head = g4[i].n_head;
        hp->n_head_kv = g4[i].n_head_kv;
        hp->head_dim = g4[i].hd;
        hp->head_dim_full = g4[i].hd_full;
        hp->n_kv_shared = g4[i].n_shared;
        hp->n_embd_per_layer = g4[i].P;
        hp->double_wide = g4[i].double_wide;
        hp->sliding_window = g4[i].window;
        hp->n_vocab = g4[i].n_vocab;
        hp->n_ctx_train = 131072;
        hp->rms_eps = 1e-6f;
        hp->final_softcap = 30.0f;
        hp->rope_base = 1000000.0f;
        hp->rope_base_swa = 10000.0f;
        hp->rope_partial = 0.25f;
        for (uint32_t il = 0; il < hp->n_layer; il++) hp->swa[il] = il % g4[i].period != g4[i].period - 1;
        hp->swa[hp->n_layer - 1] = 0; /* the last layer is always full */
        return true;
    }
    return false;
}

pb_status cv_hparams_preset(cv_arch arch, const char *size, cv_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    if (arch == CV_GEMMA4) {
        if (gemma4_preset(size, hp)) return PB_OK;
        return pb_error(PB_ERR_NOT_FOUND, "no gemma4 size '%s' (known: %s)", size, cv_preset_names(arch));
    }
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const preset *p = &presets[i];
        if (p->arch != arch || strcmp(p->size, size) != 0) continue;
        hp->arch = arch;
        hp->n_layer = p->n_layer;
        hp->n_embd = p->n_embd;
        hp->n_ff = p->n_ff;
        hp->n_head = p->n_head;
        hp->n_head_kv = p->n_head_kv;
        hp->head_dim = p->head_dim;
        hp->n_vocab = p->n_vocab;
        hp->n_ctx_train = p->n_ctx;
        hp->rms_eps = 1e-6f;
        hp->sliding_window = p->window;
        if (arch == CV_GEMMA2) {
            hp->attn_softcap = 50.0f;
            hp->final_softcap = 30.0f;
        }
        hp->rope_base = p->rope_base;
        hp->rope_scale_linear = p->rope_linear;
        return PB_OK;
    }
    return pb_error(PB_ERR_NOT_FOUND, "no %s size '%s' (known: %s)", cv_arch_name(arch), size, cv_preset_names(arch));
}

const char *cv_preset_names(cv_arch arch) {
    switch (arch) {
    case CV_GEMMA: return "2b, 7b, tiny";
    case CV_GEMMA2: return "2b, 9b, 27b, tiny";
    case CV_GEMMA3: return "270m, 1b, 4b, tiny, tiny-gqa2";
    case CV_GEMMA4: return "e2b, e4b, tiny";
    }
    return "";
}

/* ---- tensor table ---------------------------------------------------------------------------- */

void cv_tensor_set(cv_tensor *t, const char *name, const char *hf, int layer, cv_kind kind, int64_t ne0, int64_t ne1) {
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->hf, sizeof t->hf, "%s", hf);
    t->layer = layer;
    t->kind = kind;
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = 1;
}

int cv_tensor_by_name(const void *a, const void *b) {
    return strcmp(((const cv_tensor *)a)->name, ((const cv_tensor *)b)->name);
}

int cv_tensor_plan(const cv_hparams *hp, cv_tensor *out) {
    if (hp->arch == CV_GEMMA4) return cv_gemma4_plan(hp, out);
    const int per_layer = hp->arch == CV_GEMMA ? 9 : hp->arch == CV_GEMMA2 ? 11 : 13;
    const int total = 2 + per_layer * (int)hp->n_layer;
    if (!out) return total;
    const int64_t d = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t ff = hp->n_ff;
    cv_tensor *t = out;
    cv_tensor_set(t++, "output_norm.weight", "norm.weight", -1, CV_NORM, d, 0);
    cv_tensor_set(t++, "token_embd.weight", "embed_tokens.weight", -1, CV_EMBD, d, hp->n_vocab);
    for (int il = 0; il < (int)hp->n_layer; il++) {
        cv_tensor *first = t;
        char g[64], h[80];
#define L(gname, hname, kind, ne0, ne1)                                                                                \
    do {                                                                                                               \
        snprintf(g, sizeof g, "blk.%d." gname ".weight", il);                                                          \
        snprintf(h, sizeof h, "layers.%d." hname ".weight", il);                                                       \
        cv_tensor_set(t++, g, h, il, kind, ne0, ne1);                                                                  \
    } while (0)
        L("attn_norm", "input_layernorm", CV_NORM, d, 0);
        L("attn_q", "self_attn.q_proj", CV_MAT, d, q);
        L("attn_k", "self_attn.k_proj", CV_MAT, d, kv);
        L("attn_v", "self_attn.v_proj", CV_MAT, d, kv);
        L("attn_output", "self_attn.o_proj", CV_MAT, q, d);
        L("ffn_gate", "mlp.gate_proj", CV_MAT, d, ff);
        L("ffn_up", "mlp.up_proj", CV_MAT, d, ff);
        L("ffn_down", "mlp.down_proj", CV_MAT, ff, d);
        if (hp->arch == CV_GEMMA) {
            L("ffn_norm", "post_attention_layernorm", CV_NORM, d, 0);
        } else {
            L("post_attention_norm", "post_attention_layernorm", CV_NORM, d, 0);
            L("ffn_norm", "pre_feedforward_layernorm", CV_NORM, d, 0);
            L("post_ffw_norm", "post_feedforward_layernorm", CV_NORM, d, 0);
        }
        if (hp->arch == CV_GEMMA3) {
            L("attn_q_norm", "self_attn.q_norm", CV_NORM, hp->head_dim, 0);
            L("attn_k_norm", "self_attn.k_norm", CV_NORM, hp->head_dim, 0);
        }
#undef L
        qsort(first, (size_t)(t - first), sizeof *first, cv_tensor_by_name);
    }
    PB_ASSERT(t - out == total);
    return total;
}

/* ---- metadata -------------------------------------------------------------------------------- */

pb_status cv_write_arch_kv(pb_gguf_writer *w, const cv_hparams *hp, const char *name, uint32_t file_type) {
    const char *a = cv_arch_name(hp->arch);
    char k[96];
    pb_status s = PB_OK;
#define U32(key, v)                                                                                                    \
    do {                                                                                                               \
        snprintf(k, sizeof k, "%s." key, a);                                                                           \
        if (s == PB_OK) s = pb_gguf_set_u32(w, k, (v));                                                                \
    } while (0)
#define F32(key, v)                                                                                                    \
    do {                                                                                                               \
        snprintf(k, sizeof k, "%s." key, a);                                                                           \
        if (s == PB_OK) s = pb_gguf_set_f32(w, k, (v));                                                                \
    } while (0)
    s = pb_gguf_set_str(w, "general.architecture", a);
    if (s == PB_OK) s = pb_gguf_set_str(w, "general.type", "model");
    if (s == PB_OK && name && *name) s = pb_gguf_set_str(w, "general.name", name);
    if (hp->arch == CV_GEMMA4) {
        if (s == PB_OK) s = cv_gemma4_write_kv(w, hp);
        if (s == PB_OK) s = pb_gguf_set_u32(w, "general.file_type", file_type);
        return s;
    }
    /* Key order as convert_hf_to_gguf.py's set_gguf_parameters for each arch. */
    U32("context_length", hp->n_ctx_train);
    U32("embedding_length", hp->n_embd);
    U32("block_count", hp->n_layer);
    U32("feed_forward_length", hp->n_ff);
    U32("attention.head_count", hp->n_head);
    if (hp->arch != CV_GEMMA3) U32("attention.head_count_kv", hp->n_head_kv);
    F32("attention.layer_norm_rms_epsilon", hp->rms_eps);
    U32("attention.key_length", hp->head_dim);
    U32("attention.value_length", hp->head_dim);
    if (s == PB_OK) s = pb_gguf_set_u32(w, "general.file_type", file_type);
    if (hp->arch == CV_GEMMA2) {
        F32("attn_logit_softcapping", hp->attn_softcap);
        F32("final_logit_softcapping", hp->final_softcap);
        U32("attention.sliding_window", hp->sliding_window);
    }
    if (hp->arch == CV_GEMMA3) {
        F32("rope.freq_base", hp->rope_base);
        U32("attention.sliding_window", hp->sliding_window);
        U32("attention.head_count_kv", hp->n_head_kv);
        if (hp->rope_scale_linear != 0) {
            snprintf(k, sizeof k, "%s.rope.scaling.type", a);
            if (s == PB_OK) s = pb_gguf_set_str(w, k, "linear");
            F32("rope.scaling.factor", hp->rope_scale_linear);
        }
    }
#undef U32
#undef F32
    return s;
}

/* ---- converter output types ------------------------------------------------------------------ */

bool cv_outtype_parse(const char *name, int *type, uint32_t *file_type) {
    static const struct {
        const char *name;
        int type;
        uint32_t ftype;
    } t[] = {{"f32", PB_TYPE_F32, 0}, {"f16", PB_TYPE_F16, 1}, {"bf16", PB_TYPE_BF16, 32}, {"q8_0", PB_TYPE_Q8_0, 7}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcasecmp(name, t[i].name) == 0) {
            *type = t[i].type;
            *file_type = t[i].ftype;
            return true;
        }
    return false;
}

int cv_outtype_for(const cv_tensor *t, int out_type) {
    if (t->n_dims < 2 || t->kind == CV_NORM) return PB_TYPE_F32;
    /* convert_hf_to_gguf.py keeps the MoE router (FFN_GATE_INP) in float32 for every out type */
    if (strstr(t->name, "ffn_gate_inp.weight")) return PB_TYPE_F32;
    if (out_type == PB_TYPE_Q8_0 && t->ne[0] % 32 != 0) return PB_TYPE_F16;
    return out_type;
}

/* ---- producing tensor data ------------------------------------------------------------------- */

typedef struct fill_job {
    const cv_tensor *t;
    int type;
    cv_rows_fn rows;
    void *user;
    int64_t ti, chunk;
    size_t row_bytes;
    uint8_t *dst;
    float *scratch; /* chunk rows of ne[0] floats per thread */
    pb_status status[64];
    char err[64][256];
} fill_job;

static void fill_worker(void *ctx, int ith, int nth) {
    fill_job *j = ctx;
    const int64_t ne0 = j->t->ne[0], n_rows = j->t->ne[1] * j->t->ne[2];
    const pb_type_traits *tr = pb_kernels_type(j->type);
    float *buf = j->scratch + (size_t)ith * (size_t)j->chunk * (size_t)ne0;
    int64_t lo, hi;
    pb_split(n_rows, ith, nth, &lo, &hi);
    j->status[ith] = PB_OK;
    for (int64_t r = lo; r < hi; r += j->chunk) {
        int64_t r1 = PB_MIN(hi, r + j->chunk);
        pb_status s = j->rows(j->user, j->ti, r, r1, buf);
        if (s != PB_OK) {
            j->status[ith] = s;
            snprintf(j->err[ith], sizeof j->err[ith], "%s", pb_last_error());
            return;
        }
        for (int64_t i = r; i < r1; i++)
            tr->from_float(buf + (size_t)(i - r) * (size_t)ne0, j->dst + (size_t)i * j->row_bytes, ne0);
    }
}

pb_status cv_fill_tensor(pb_pool *pool, const cv_tensor *t, int type, cv_rows_fn rows, void *user, int64_t ti,
                         void *dst, size_t nbytes) {
    const pb_type_traits *tr = pb_kernels_type(type);
    size_t row_bytes = pb_row_size(type, t->ne[0]);
    if (!tr->from_float || !row_bytes)
        return pb_error(PB_ERR_UNSUPPORTED, "cannot write tensor '%s' (%lld values per row) as %s", t->name,
                        (long long)t->ne[0], pb_type_name(type));
    size_t n_rows = (size_t)t->ne[1] * (size_t)t->ne[2];
    if (row_bytes * n_rows != nbytes)
        return pb_error(PB_ERR_INTERNAL, "tensor '%s': %zu bytes expected, writer gave %zu", t->name,
                        row_bytes * n_rows, nbytes);
    int nth = pool ? pb_pool_size(pool) : 1;
    if (nth > 64) nth = 64;
    /* About 1 MiB of float32 per thread and chunk; at least one row. */
    int64_t chunk = PB_MAX((int64_t)1, (int64_t)(262144 / t->ne[0]));
    fill_job *j = calloc(1, sizeof *j);
    if (!j) return pb_error(PB_ERR_NOMEM, "out of memory");
    j->scratch = malloc((size_t)nth * (size_t)chunk * (size_t)t->ne[0] * sizeof(float));
    if (!j->scratch) {
        free(j);
        return pb_error(PB_ERR_NOMEM, "out of memory for %d x %lld rows of tensor '%s'", nth, (long long)chunk,
                        t->name);
    }
    j->t = t;
    j->type = type;
    j->rows = rows;
    j->user = user;
    j->ti = ti;
    j->chunk = chunk;
    j->row_bytes = row_bytes;
    j->dst = dst;
    if (pool && nth > 1)
        pb_pool_run_n(pool, nth, fill_worker, j);
    else
        fill_worker(j, 0, 1);
    pb_status s = PB_OK;
    for (int i = 0; i < nth && s == PB_OK; i++)
        if (j->status[i] != PB_OK) s = pb_error(j->status[i], "%s", j->err[i]);
    free(j->scratch);
    free(j);
    return s;
}

/* ---- quantization mixes ---------------------------------------------------------------------- */

pb_status cv_mix_types(const char *mix, const cv_hparams *hp, const cv_tensor *plan, int n, int *types,
                       uint32_t *file_type) {
    int ft = pb_recipe_ftype_from_name(mix);
    if (ft < 0)
        return pb_error(PB_ERR_INVALID_ARG, "unknown --type '%s' (f32, f16, bf16, q8_0 or a mix: %s)", mix,
                        pb_recipe_mix_list());
    pb_recipe r;
    pb_status s = pb_recipe_init(&r, ft);
    if (s != PB_OK) return s;
    r.n_gqa = (int)(hp->n_head / hp->n_head_kv);
    for (int i = 0; i < n; i++) pb_recipe_count(&r, plan[i].name);
    /* plan is already in llama.cpp's order, which the recipe's counters rely on. */
    for (int i = 0; i < n; i++) {
        if (i > 0) PB_ASSERT(pb_recipe_order_cmp(plan[i - 1].name, plan[i].name) < 0);
        types[i] = pb_recipe_is_quantizable(plan[i].name, plan[i].n_dims)
                       ? pb_recipe_tensor_type(&r, plan[i].name, plan[i].ne[0])
                       : cv_outtype_for(&plan[i], PB_TYPE_F32);
    }
    *file_type = (uint32_t)ft;
    return PB_OK;
}

pb_status cv_pick_types(const char *type_name, const cv_hparams *hp, const cv_tensor *plan, int n, int *types,
                        uint32_t *file_type) {
    int out_type;
    if (cv_outtype_parse(type_name, &out_type, file_type)) {
        for (int i = 0; i < n; i++) types[i] = cv_outtype_for(&plan[i], out_type);
        return PB_OK;
    }
    return cv_mix_types(type_name, hp, plan, n, types, file_type);
}
