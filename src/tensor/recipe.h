/* recipe.h -- llama.cpp's quantization mixes (Q4_K_M, Q8_0, ...): the file type ids and which ggml type
 * each tensor gets (docs q4_k_m-recipe.md). Pure decisions on names and shapes: no I/O, no math. */
#ifndef PB_RECIPE_H
#define PB_RECIPE_H

#include "tensor/types.h"

/* llama_ftype values stored in general.file_type. */
enum {
    PB_FTYPE_ALL_F32 = 0,
    PB_FTYPE_F16 = 1,
    PB_FTYPE_Q4_0 = 2,
    PB_FTYPE_Q4_1 = 3,
    PB_FTYPE_Q8_0 = 7,
    PB_FTYPE_Q5_0 = 8,
    PB_FTYPE_Q5_1 = 9,
    PB_FTYPE_Q2_K = 10,
    PB_FTYPE_Q3_K_S = 11,
    PB_FTYPE_Q3_K_M = 12,
    PB_FTYPE_Q3_K_L = 13,
    PB_FTYPE_Q4_K_S = 14,
    PB_FTYPE_Q4_K_M = 15,
    PB_FTYPE_Q5_K_S = 16,
    PB_FTYPE_Q5_K_M = 17,
    PB_FTYPE_Q6_K = 18,
    PB_FTYPE_BF16 = 32,
};

/* Mix name ("Q4_K_M", "q8_0", "f16"; case-insensitive) -> ftype, or -1 when unknown. */
int pb_recipe_ftype_from_name(const char *mix);
/* Canonical upper-case name of a supported ftype ("Q4_K_M"), or NULL. */
const char *pb_recipe_ftype_name(int ftype);
/* Comma-separated list of the supported mix names, for usage messages. */
const char *pb_recipe_mix_list(void);
/* The mix's base ggml type (Q4_K_M -> Q4_K, F16 -> F16, ALL_F32 -> F32), or -1. */
int pb_recipe_default_type(int ftype);

/* True when llama-quantize would touch this tensor at all: the name ends in "weight", it has >= 2
 * dimensions, it is not a norm ("_norm.weight") and not one of the never-quantized small tensors. */
bool pb_recipe_is_quantizable(const char *name, int n_dims);

/* Per-model state of the recipe (counters advance as tensors are typed, in llama.cpp's order:
 * non-layer tensors first, then by layer number, then by name -- see pb_recipe_order_cmp). */
typedef struct pb_recipe {
    int ftype;
    int default_type;
    bool has_output;    /* a tensor named exactly output.weight exists (else token_embd is the output) */
    int n_gqa;          /* n_head / n_head_kv (1 when unknown) */
    int n_attention_wv; /* number of attn_v / attn_qkv weights */
    int n_ffn_down;     /* number of ffn_down weights */
    int i_attention_wv; /* counters */
    int i_ffn_down;
} pb_recipe;

/* Initializes r for a mix; the caller then sets has_output, n_gqa, n_attention_wv, n_ffn_down (e.g. with
 * pb_recipe_count). PB_ERR_INVALID_ARG for an unknown ftype. */
pb_status pb_recipe_init(pb_recipe *r, int ftype);
/* Adds one tensor name to the model-level counts (has_output, n_attention_wv, n_ffn_down). */
void pb_recipe_count(pb_recipe *r, const char *name);

/* The type of a quantizable tensor (pb_recipe_is_quantizable true) with row length ne0, following
 * llama_tensor_get_type for non-imatrix mixes, including the fallbacks when ne0 is not a multiple of the
 * chosen block size (Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0, Q2_K/Q3_K->Q4_0 as newer llama.cpp does; the
 * Feb-2025 tree used IQ4_NL there, which we cannot write), then F16 if even that does not divide ne0.
 * For F32/F16/BF16 mixes every such tensor gets the base type. Call once per tensor, in order. */
int pb_recipe_tensor_type(pb_recipe *r, const char *name, int64_t ne0);

/* llama.cpp's tensor order (non-layer first, then layer number, then byte-wise name) as a qsort-style
 * comparison of two tensor names. */
int pb_recipe_order_cmp(const char *a, const char *b);

#endif
