/* model_impl.h -- private layout of pb_model shared by model.c, kv_cache.c and forward.c. Not for other rooms. */
#ifndef PB_MODEL_IMPL_H
#define PB_MODEL_IMPL_H

#include "model/model.h"

#include <stdatomic.h>

#define PB_MAX_LAYERS      256
#define PB_MAX_HEAD_DIM    512
#define PB_FWD_MAX_THREADS 64  /* threads a forward pass uses at most in exact mode */
#define PB_MAX_GQA         64  /* query heads per kv head */
#define PB_ATT_MAX_BLOCKS  256 /* key blocks per attention row (decode splits work over them) */
#define PB_MAX_EXPERT_USED 64  /* Gemma 4 MoE: experts a token is routed to (26B-A4B: 8) */

/* A weight matrix: its GGUF tensor and the bytes kernels read: t->data (the file layout) or, when open()
 * repacked the rows for the packed kernels (kernels/matmul.h), the model's packed copy. */
typedef struct pb_wmat {
    const pb_gguf_tensor *t;
    const void *data;
    bool packed;
} pb_wmat;

/* Weight views of one transformer block (ne fastest first). */
typedef struct pb_layer_w {
    pb_wmat wq;   /* attn_q      [d, H*hd]   */
    pb_wmat wk;   /* attn_k      [d, Hkv*hd] */
    pb_wmat wv;   /* attn_v      [d, Hkv*hd] */
    pb_wmat wo;   /* attn_output [H*hd, d]   */
    pb_wmat gate; /* ffn_gate    [d, F]      */
    pb_wmat up;   /* ffn_up      [d, F]      */
    pb_wmat down; /* ffn_down    [F, d]      */
    /* norm gains as float32 copies (GGUF stores 1 + w_HF; used as is) */
    float *attn_norm;       /* [d]  HF input_layernorm */
    float *post_attn_norm;  /* [d]  Gemma 2/3 post_attention_layernorm, else NULL */
    float *ffn_norm;        /* [d]  Gemma 1 post_attention_layernorm / Gemma 2/3 pre_feedforward_layernorm */
    float *post_ffw_norm;   /* [d]  Gemma 2/3 post_feedforward_layernorm, else NULL */
    float *q_norm, *k_norm; /* [hd] Gemma 3/4 per-head q/k norms, else NULL (k_norm: NULL on KV-shared layers) */
    /* Gemma 4 (wk.t / wv.t NULL: KV-shared layer / V = raw K projection, attention_k_eq_v) */
    float out_scale;      /* layer_output_scale: multiplies the whole hidden state (1 when absent) */
    pb_wmat inp_gate;     /* PLE inp_gate [d, P] */
    pb_wmat proj;         /* PLE proj     [P, d] */
    float *ple_post_norm; /* [d] PLE post_norm, else NULL */
    /* MoE block (gate_inp.t NULL: none) */
    pb_wmat gate_inp;                                          /* ffn_gate_inp [d, E] router */
    const pb_gguf_tensor *exp_gate_up;                         /* ffn_gate_up_exps [d, 2I, E] (or NULL: split below) */
    const pb_gguf_tensor *exp_gate, *exp_up;                   /* ffn_gate_exps / ffn_up_exps [d, I, E] */
    const pb_gguf_tensor *exp_down;                            /* ffn_down_exps [I, d, E] */
    float *router_scale;                                       /* [d] ffn_gate_inp.scale */
    float *expert_scale;                                       /* [E] ffn_down_exps.scale (NULL: 1) */
    float *pre_ffw_norm_2, *post_ffw_norm_1, *post_ffw_norm_2; /* [d] */
} pb_layer_w;

struct pb_model {
    pb_map map;
    pb_gguf *g;
    pb_hparams hp;
    pb_model_params params;
    pb_wmat tok_embd; /* [d, V] */
    pb_wmat output;   /* [d, V]: output.weight, or tok_embd when tied */
    int n_packed;     /* matrices repacked at open */
    void *packed_mem; /* their packed copies (pb_big_alloc; NULL when packed in place) */
    size_t packed_size;
    pb_map cache_map; /* the packed-weights cache file when the packed matrices are views into it (pack_cache.c) */
    struct pb_pc_job *pc_job; /* a packed-weights cache write on pc_thread (params.pack_cache_background), else NULL */
    pb_thread *pc_thread;
    float *output_norm; /* [d] */
    pb_layer_w *layers; /* [n_layer] */
    float *norm_mem;    /* one block holding every norm copy */
    /* Gemma 4 per-layer embeddings (PLE): the table stays mapped, one row read per token */
    pb_wmat ple_tok;      /* per_layer_token_embd [L*P, V] */
    pb_wmat ple_proj;     /* per_layer_model_proj [d, L*P] */
    float *ple_proj_norm; /* [P] */
    float *ones;          /* [PB_MAX_HEAD_DIM] gains of the weightless V norm */
    float rope_inv_global[PB_MAX_HEAD_DIM / 2];
    float rope_inv_local[PB_MAX_HEAD_DIM / 2];
    float embd_scale; /* sqrt(n_embd) in float32 (HF f32 run) */
    pb_vocab *vocab;
    pb_model_info info;
    struct pb_cu_model *gpu; /* weights on the GPU (model/gpu.c), else NULL */
    /* sessions and batches using the model (pb_model_retain), | PB_MODEL_CLOSED once pb_model_close came: the model
     * is destroyed when both hold (by pb_model_close, or by the pb_model_release of its last user) */
    atomic_uint users;
};
#define PB_MODEL_CLOSED 0x80000000u

/* pack_cache.c: the packed-weights cache of the matrices mats[0..n), in this order, pk[i] telling which are
 * repacked (the others are plain copies). load: PB_OK when a valid cache file was mapped (each mat's data points
 * into it, packed = pk[i]); otherwise nothing changes and m->info.pack_cache_note says why. store: writes the
 * mats (already packed / copied) atomically; m->info.pack_cache says whether it worked. */
pb_status pb_pack_cache_load(pb_model *m, const char *dir, const char *model_path, pb_wmat *const *mats, const bool *pk,
                             int n);
void pb_pack_cache_store(pb_model *m, const char *dir, const char *model_path, pb_wmat *const *mats, const bool *pk,
                         int n);
/* pb_pack_cache_store on a thread of its own (m->pc_thread): the matrices' bytes must stay as they are until
 * pb_pack_cache_wait; m->info says PB_PACK_CACHE_WRITING meanwhile. Without a thread it writes before it returns. */
void pb_pack_cache_store_background(pb_model *m, const char *dir, const char *model_path, pb_wmat *const *mats,
                                    const bool *pk, int n);
/* Joins a background write (if any) and puts its outcome into m->info; pb_pack_cache_busy: it is still writing. */
void pb_pack_cache_wait(pb_model *m);
bool pb_pack_cache_busy(const pb_model *m);

#endif
