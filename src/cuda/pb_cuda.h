/* pb_cuda.h -- the seam between the model room (C11) and the CUDA backend (src/cuda/backend.cu, CUDA C++).
 * Plain C declarations only (no CUDA types): the model room describes the model in host pointers, the backend
 * uploads it once and runs token steps. A build without CUDA links src/cuda/stub.c, whose functions report
 * "built without CUDA". Functions return a pb_status value (0 = ok) and write a message into err on failure;
 * they never print and never exit. */
#ifndef PB_CUDA_H
#define PB_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A GGUF weight matrix as the file holds it: N rows of K values of GGUF type `type`, row-major. */
typedef struct pb_cu_mat {
    const void *data;
    int type;
    int64_t K, N;
} pb_cu_mat;

typedef struct pb_cu_layer {
    pb_cu_mat wq, wk, wv, wo, gate, up, down; /* Gemma 4: wk, wv data NULL on KV-shared layers, wv on k_eq_v ones */
    const float *attn_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm; /* [d]; post norms NULL on Gemma 1 */
    const float *q_norm, *k_norm; /* [head_dim]; NULL unless Gemma 3/4 (k_norm NULL on KV-shared layers) */
    int swa;                      /* sliding-window layer */
    /* Gemma 4 (desc.gemma4 set; else ignored): this layer's head dim, kv heads and MLP width, the layer whose cache
     * it reads (kv_src == own index: its own; another: a KV-shared layer, q only), the PLE block (inp_gate [d, P],
     * proj [P, d], ple_post_norm [d]; data NULL where the model has no PLE) and the layer output scale (1: none) */
    int head_dim, n_head_kv, n_ff, kv_src;
    pb_cu_mat inp_gate, proj;
    const float *ple_post_norm;
    float out_scale;
} pb_cu_layer;

typedef struct pb_cu_desc {
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, sliding_window; /* Gemma 4: the layer maxima */
    float norm_eps, attn_softcap, final_softcap, query_scale, embd_scale;
    /* [head_dim / 2] for Gemma 1-3; Gemma 4: rope_inv_global [hd_full / 2] (full layers, rope_freqs applied),
     * rope_inv_local [hd_swa / 2] (sliding layers) */
    const float *rope_inv_global, *rope_inv_local;
    pb_cu_mat tok_embd, output; /* output may equal tok_embd (tied) */
    const float *output_norm;   /* [d] */
    const pb_cu_layer *layers;  /* [n_layer] */
    /* Gemma 4 (0 / NULL before it): per-layer geometry in the layers, hd_swa / hd_full the head dims of sliding /
     * full layers, v_norm: V heads RMS-normed without weights where the cache row is written; PLE of width P
     * (n_embd_per_layer, 0: none): ple_tok the token table [L*P, n_vocab] (uploaded in its GGUF type), ple_proj the
     * model projection [d, L*P], ple_proj_norm [P] */
    int gemma4, hd_swa, hd_full, v_norm, n_embd_per_layer;
    pb_cu_mat ple_tok, ple_proj;
    const float *ple_proj_norm;
} pb_cu_desc;

typedef struct pb_cu_model pb_cu_model;
typedef struct pb_cu_ctx pb_cu_ctx;

/* 1 when a CUDA device is usable (writes the reason into why when not). */
int pb_cu_available(char *why, size_t cap);
/* Uploads every weight once (after checking free GPU memory); the host data may be unmapped afterwards only
 * by closing the model. Unsupported tensor types are refused by name (PB_ERR_UNSUPPORTED). */
int pb_cu_model_open(const pb_cu_desc *d, pb_cu_model **out, char *err, size_t cap);
void pb_cu_model_free(pb_cu_model *g);
size_t pb_cu_model_bytes(const pb_cu_model *g);      /* device bytes of the weights */
const char *pb_cu_device_name(const pb_cu_model *g); /* "NVIDIA H200" */

/* A session's GPU state: the F16 KV cache (layer il: K then V, [n_head_kv][cap[il]][head_dim] halves, the
 * host cache's head-major layout), scratch, and the captured token-step graphs. cap[il] rows per layer. */
int pb_cu_ctx_new(pb_cu_model *g, int n_ctx, const int *cap, pb_cu_ctx **out, char *err, size_t errcap);
void pb_cu_ctx_free(pb_cu_ctx *c);
size_t pb_cu_ctx_bytes(const pb_cu_ctx *c);
/* Runs tokens[0..n) at positions pos.. (one token step each). logits: the last token's n_vocab floats, or
 * n rows when all_logits; hidden (may be NULL): n rows of n_embd floats, the final-normed state of each token.
 * cancel (may be NULL) is polled between tokens: then PB_ERR_CANCELLED (8) with *n_done tokens already
 * written into the cache (ring slots overwritten: the caller must not keep the cache as it was). */
int pb_cu_forward(pb_cu_ctx *c, int pos, const int32_t *tokens, int n, float *logits, float *hidden, int all_logits,
                  const volatile int *cancel, int *n_done, char *err, size_t cap);
/* Greedy sampling on the device: 1 when pb_cu_forward_argmax is usable (PB_CUDA_ARGMAX=0 at ctx_new turns it off,
 * for A/B runs). pb_cu_forward_argmax runs tokens as pb_cu_forward does, but the last token's logits stay on the
 * device and *top gets their argmax (the lowest id of the largest logit, NaN never winning, -1 when none exceeds
 * -inf: pb_sampler's greedy pick), 4 bytes back instead of n_vocab floats. pb_cu_logits_download copies the logits
 * of the last output step (valid until the next one). pb_cu_argmax_check (tests): *top = the device argmax of the
 * host values x[0..n), 1 <= n <= 2^20, through the same kernel. */
int pb_cu_has_argmax(const pb_cu_ctx *c);
int pb_cu_forward_argmax(pb_cu_ctx *c, int pos, const int32_t *tokens, int n, int32_t *top, float *hidden, char *err,
                         size_t cap);
int pb_cu_logits_download(pb_cu_ctx *c, float *logits, char *err, size_t cap);
int pb_cu_argmax_check(pb_cu_ctx *c, const float *x, int n, int32_t *top, char *err, size_t cap);
/* Sparse sampling on the device: 1 when pb_cu_logits_top is usable (PB_CUDA_TOPK=0 at ctx_new turns it off, for
 * A/B runs). pb_cu_logits_top: of the logits the last output step left on the device, ids / vals[0..m) the m best
 * in pb_sampler's canonical order (value descending, id ascending, NaN as -inf, -0 as +0; vals the raw logits) and
 * gvals[i] the raw logit of gather[i] (ng ids), 1 <= m <= 128, m <= n_vocab, 0 <= ng <= 128: 1.5 KiB back instead of
 * n_vocab floats. pb_cu_top_check (tests): the same of the host values x[0..n), 1 <= n <= 2^20, m <= n. */
int pb_cu_has_logits_top(const pb_cu_ctx *c);
int pb_cu_logits_top(pb_cu_ctx *c, int m, const int32_t *gather, int ng, int32_t *ids, float *vals, float *gvals,
                     char *err, size_t cap);
int pb_cu_top_check(pb_cu_ctx *c, const float *x, int n, int m, const int32_t *gather, int ng, int32_t *ids,
                    float *vals, float *gvals, char *err, size_t cap);
/* Batched decode (continuous batching in the server, pb_forward_batch): one step for n sequences at once, 1 <= n <=
 * PB_CU_BATCH_MAX, token tokens[i] at position pos[i] of context cs[i] (n distinct contexts of one model). Each row's
 * result has the bits of a one-token pb_cu_forward_argmax / pb_cu_forward of that token alone on its context: the
 * K/V rows land in cs[i]'s cache, the logits of row i stay in cs[i]'s device logits buffer (pb_cu_logits_download
 * (cs[i]) fetches them, as after a one-token step), top (may be NULL) gets each row's device argmax (the greedy
 * rule above) and logits (may be NULL) gets the n rows of n_vocab floats on the host. Nothing is changed on an
 * argument error. */
enum { PB_CU_BATCH_MAX = 64 };
int pb_cu_forward_batch(pb_cu_ctx *const *cs, const int *pos, const int32_t *tokens, int n, float *logits, int32_t *top,
                        char *err, size_t cap);
/* Tests: how many pb_cu_forward_batch calls of c's model ran as one batched step (the rest ran each row's own
 * one-token step: one or two rows, a switch, no room for the batch scratch). */
long pb_cu_batch_steps(const pb_cu_ctx *c);
/* Copies layer il's K and V rows (bytes each) between the device cache and host buffers. */
int pb_cu_kv_download(pb_cu_ctx *c, int il, void *k, void *v, size_t bytes, char *err, size_t cap);
int pb_cu_kv_upload(pb_cu_ctx *c, int il, const void *k, const void *v, size_t bytes, char *err, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
