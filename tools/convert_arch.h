/* convert_arch.h -- what a Gemma GGUF looks like, shared by `convert` (HF -> GGUF) and `synth` (random
 * weights): hyperparameters, the tensor table in llama.cpp's names/shapes/order, the {arch}.* metadata
 * keys as llama.cpp's convert_hf_to_gguf.py writes them, and the converter's output-type rules.
 * Facts: shared/docs/gemma-architecture.md §5-§7, q4_k_m-recipe.md §2 and §7. */
#ifndef PB_CONVERT_ARCH_H
#define PB_CONVERT_ARCH_H

#include "base/base.h"
#include "gguf/gguf.h"

#include <cjson/cJSON.h>

typedef enum cv_arch { CV_GEMMA = 1, CV_GEMMA2 = 2, CV_GEMMA3 = 3, CV_GEMMA4 = 4 } cv_arch;

/* Layers a model may have: the engine's limit (src/model PB_MAX_LAYERS). */
#define CV_MAX_LAYERS 256

typedef struct cv_hparams {
    cv_arch arch;
    uint32_t n_ctx_train; /* {arch}.context_length */
    uint32_t n_embd;      /* d */
    uint32_t n_layer;
    uint32_t n_ff;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim; /* key_length = value_length */
    uint32_t n_vocab;  /* rows of token_embd in the output */
    float rms_eps;
    uint32_t sliding_window; /* gemma2, gemma3 */
    float attn_softcap;      /* gemma2 */
    float final_softcap;     /* gemma2 */
    float rope_base;         /* gemma3 (global layers) */
    float rope_scale_linear; /* gemma3: linear rope scaling factor, 0 = none */
    /* gemma4 (convert_gemma4.c): head_dim is the sliding layers', head_dim_full the full layers' */
    uint32_t head_dim_full, n_head_kv_full; /* n_head_kv_full 0: as n_head_kv (scalar head_count_kv key) */
    uint32_t n_kv_shared, n_embd_per_layer;
    bool double_wide, k_eq_v;
    uint32_t n_expert, n_expert_used, n_ff_exp; /* MoE block (enable_moe_block); n_expert 0: none */
    float rope_base_swa, rope_partial;          /* sliding theta; rotated fraction of the full layers' pairs */
    uint8_t swa[CV_MAX_LAYERS];                 /* layer il is sliding */
} cv_hparams;

/* "gemma" / "gemma2" / "gemma3". */
const char *cv_arch_name(cv_arch a);

/* Reads hyperparameters from a parsed config.json (architectures + model_type; for
 * Gemma3ForConditionalGeneration the text_config), with llama.cpp's converter defaults where a key
 * may be absent. n_vocab is set from vocab_size (the caller may trim it to the tokenizer). *prefix gets
 * the HF tensor name prefix guess ("model." or, for multimodal Gemma 3, "language_model.model."; the
 * caller re-checks against the weights). Errors: PB_ERR_UNSUPPORTED (architecture, rope type, softcap
 * on gemma3, layer pattern llama.cpp would not reproduce), PB_ERR_FORMAT (missing or bad field, with
 * its name). warn (may be NULL) receives non-fatal notes. */
typedef void (*cv_warn_fn)(void *user, const char *msg);
pb_status cv_hparams_from_config(const cJSON *config, cv_hparams *hp, const char **prefix, cv_warn_fn warn, void *user);

/* Named presets with the exact shapes of released models ("2b", "9b", "27b", "tiny", ...) for synth.
 * PB_ERR_NOT_FOUND with the list of sizes when unknown. */
pb_status cv_hparams_preset(cv_arch arch, const char *size, cv_hparams *hp);
/* Comma-separated size names of an arch, for usage text. */
const char *cv_preset_names(cv_arch arch);

/* CV_VEC: a vector stored as is (Gemma 4 norms, layer scales); CV_GEN: made by the converter (rope_freqs). */
typedef enum cv_kind { CV_EMBD, CV_NORM, CV_MAT, CV_VEC, CV_GEN } cv_kind;

typedef struct cv_tensor {
    char name[64]; /* GGUF name, e.g. "blk.3.attn_q.weight" */
    char hf[80];   /* HF name under the text-model prefix, e.g. "layers.3.self_attn.q_proj.weight" */
    int n_dims;    /* 1, 2, or 3 (Gemma 4 experts: [ne0, ne1, n_expert]) */
    int64_t ne[3]; /* GGUF order: ne[0] contiguous (= HF shape[n_dims - 1]); unused dims 1 */
    int layer;     /* -1 for token_embd / output_norm */
    cv_kind kind;
} cv_tensor;

/* Fills the tensor table in llama.cpp's file order (non-layer tensors by name, then layers numerically,
 * by name within a layer) and returns the count. out may be NULL to count; else it has room for it. */
int cv_tensor_plan(const cv_hparams *hp, cv_tensor *out);

/* Writes general.architecture/type/name and every {arch}.* key llama.cpp's converter writes for this
 * arch, plus general.file_type. */
pb_status cv_write_arch_kv(pb_gguf_writer *w, const cv_hparams *hp, const char *name, uint32_t file_type);

/* Converter output types (convert_hf_to_gguf.py --outtype): "f32", "f16", "bf16", "q8_0".
 * Returns the ggml type id and llama_ftype through the pointers, false if name is not one of them. */
bool cv_outtype_parse(const char *name, int *type, uint32_t *file_type);
/* Type of tensor t for a converter out type: 1-D and norms F32; others the out type, except that Q8_0
 * falls back to F16 when ne[0] is not a multiple of 32 (gguf-py's QuantError path). */
int cv_outtype_for(const cv_tensor *t, int out_type);

/* Types of every tensor of plan for a llama-quantize mix name ("q4_k_m", ...), following the quantize
 * recipe of tools/quantize_model (so `convert --type MIX` and `synth --type MIX` give the same table as
 * `quantize`). PB_ERR_INVALID_ARG with the known names when mix is unknown. */
pb_status cv_mix_types(const char *mix, const cv_hparams *hp, const cv_tensor *plan, int n, int *types,
                       uint32_t *file_type);

/* f32/f16/bf16/q8_0 by the converter rules, anything else as a quantize mix. */
pb_status cv_pick_types(const char *type_name, const cv_hparams *hp, const cv_tensor *plan, int n, int *types,
                        uint32_t *file_type);

/* ---- producing tensor data ----------------------------------------------------------------------- */

/* Produces float32 rows [r0, r1) of tensor ti (each t->ne[0] values, row-major; ne[1] x ne[2] rows) into buf. Called
 * from several pool threads at once, with disjoint row ranges. */
typedef pb_status (*cv_rows_fn)(void *user, int64_t ti, int64_t r0, int64_t r1, float *buf);

/* Fills dst (nbytes = rows x row size of type) with tensor ti converted/quantized to type, row chunks
 * spread over pool's threads (pool may be NULL: one thread). Memory: a few rows of float32 per thread,
 * never the whole tensor in float32. Output is independent of the thread count. */
pb_status cv_fill_tensor(pb_pool *pool, const cv_tensor *t, int type, cv_rows_fn rows, void *user, int64_t ti,
                         void *dst, size_t nbytes);

/* ---- Gemma 4 (convert_gemma4.c) ----------------------------------------------------------------- */
/* Gemma 4 fields of config.json's (text_)config c into hp (the common ones are read already), the MoE block's
 * expert count, top-k and expert width included. */
pb_status cv_gemma4_config(const cJSON *c, cv_hparams *hp, cv_warn_fn warn, void *user);
/* Tensor table as llama.cpp's converter writes it (KV-shared layers without attn_k/attn_v/attn_k_norm, k_eq_v
 * full layers without attn_v, MoE layers with the router, expert and extra norm tensors); out NULL: count. */
int cv_gemma4_plan(const cv_hparams *hp, cv_tensor *out);

/* Fills one planned tensor: GGUF name, HF name, layer (-1: none), kind, shape (ne1 0: a vector). Shared by the
 * Gemma 1-3 and Gemma 4 plans. */
void cv_tensor_set(cv_tensor *t, const char *name, const char *hf, int layer, cv_kind kind, int64_t ne0, int64_t ne1);
/* qsort comparator: plans are sorted by GGUF name (llama.cpp's order). */
int cv_tensor_by_name(const void *a, const void *b);
/* gemma4.* keys (after general.*). */
pb_status cv_gemma4_write_kv(pb_gguf_writer *w, const cv_hparams *hp);
/* Values of a CV_GEN tensor (rope_freqs: 1 for the rotated pairs, 1e30 for the others), rows r0..r1. */
void cv_gemma4_gen(const cv_hparams *hp, const cv_tensor *t, int64_t r0, int64_t r1, float *buf);

#endif
