/* model.h -- internal API of the model room: hparams, weight views, KV cache, and the forward pass.
 * Contract between the model room (forward) and the engine room (sessions, generation). */
#ifndef PB_MODEL_H
#define PB_MODEL_H

#include "base/base.h"
#include "gguf/gguf.h"

typedef enum pb_arch { PB_ARCH_GEMMA = 1, PB_ARCH_GEMMA2 = 2, PB_ARCH_GEMMA3 = 3, PB_ARCH_GEMMA4 = 4 } pb_arch;

typedef struct pb_hparams {
    pb_arch arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train;
    float norm_eps;
    float rope_base;       /* global layers */
    float rope_base_local; /* sliding-window layers (Gemma 3: 10000) */
    float rope_scale;      /* linear scaling factor for global layers (1 = none) */
    float attn_softcap;    /* 0 = off (Gemma 2: 50) */
    float final_softcap;   /* 0 = off (Gemma 2: 30) */
    float query_scale;     /* attention score multiplier (applied to q.k as HF does): query_pre_attn_scalar^-0.5;
                              1/sqrt(head_dim), or llama.cpp's 27B rule 1/sqrt(n_embd/n_head) */
    int sliding_window;    /* 0 = none */
    /* layer il uses the sliding window when swa_layer[il] != 0 */
    uint8_t swa_layer[256];
    bool has_qk_norm;    /* Gemma 3/4 */
    bool has_post_norms; /* Gemma 2/3/4: post-attention and post-FFN norms */
    /* Per-layer geometry (filled for every arch; Gemma 1-3 repeat the scalars above, which are the maxima over
     * layers and size the scratch). Gemma 4: sliding layers hd_swa, full layers hd_full. */
    int16_t head_dim_l[256]; /* head dim of layer il (q, k, v and the q/k norms) */
    int16_t n_head_kv_l[256];
    int32_t n_ff_l[256];  /* dense MLP width of layer il (Gemma 4 E2B: doubled on the KV-shared layers) */
    int16_t kv_src[256];  /* layer whose K/V cache layer il attends to: il itself, or (Gemma 4 KV sharing) the last
                             layer of its type below n_layer - n_kv_shared */
    int hd_swa, hd_full;  /* head dims of sliding / full layers (equal before Gemma 4) */
    int n_kv_shared;      /* Gemma 4: the last n layers compute no K/V */
    bool has_v_norm;      /* Gemma 4: weightless RMSNorm of V heads */
    int n_embd_per_layer; /* Gemma 4 PLE width P (0 = none) */
    int n_expert, n_expert_used, n_ff_exp; /* Gemma 4 MoE block (0 = none) */
} pb_hparams;

/* Reads hyperparameters from metadata (llama.cpp's defaults where keys are absent). On failure hp->arch is still
 * set when general.architecture names a supported architecture (0 when it does not): a malformed model, not
 * another kind of file. */
pb_status pb_hparams_from_gguf(const pb_gguf *g, pb_hparams *hp);

/* Checks that every tensor the architecture needs is present with the right shape and a supported
 * type. Calls report(user, tensor_name, problem) for each problem (it may be NULL) and returns
 * PB_ERR_FORMAT/PB_ERR_UNSUPPORTED (with the first problem as error text) if any. */
pb_status pb_arch_check_tensors(const pb_gguf *g, const pb_hparams *hp,
                                void (*report)(void *user, const char *tensor, const char *problem), void *user);

/* ---- KV cache: per session. Sliding-window layers keep a window-sized ring. ---- */
typedef struct pb_kv_cache pb_kv_cache;

pb_status pb_kv_new(const pb_model *m, int n_ctx, pb_kv_type type, pb_kv_cache **out);
/* pb_kv_new whose ring layers hold ring_extra rows more than their window (at most n_ctx in all): going back by up to
 * ring_extra + 1 positions then needs no re-prefill (a Gemma 4 thought dropped after a long context). The attention
 * still sees only the window. */
pb_status pb_kv_new_ring(const pb_model *m, int n_ctx, pb_kv_type type, int ring_extra, pb_kv_cache **out);
void pb_kv_free(pb_kv_cache *kv);
size_t pb_kv_bytes(const pb_kv_cache *kv); /* bytes allocated for K and V */
int pb_kv_n_past(const pb_kv_cache *kv);   /* positions stored so far */
int pb_kv_n_ctx(const pb_kv_cache *kv);
/* Forgets positions >= n. Fails with PB_ERR_INVALID_ARG when a ring layer no longer holds what it
 * would need: a ring keeps the last cap = min(window + ring_extra, n_ctx) positions, so going back is possible only
 * while max(0, n - window + 1) >= n_past - cap, i.e. n >= n_past - ring_extra - 1 once n_past > cap (and not before
 * the oldest row a session state read gave it); n = 0 (reset) always works. The caller must otherwise reset and
 * re-prefill. */
pb_status pb_kv_truncate(pb_kv_cache *kv, int n);
/* Serialized state (positions + K/V rows actually in use), for session files. Format: "PBKV", version,
 * cache type, n_layer, kv_dim, n_past, then per layer the first position, the row count and the rows.
 * Reading checks everything before touching the cache: PB_ERR_FORMAT (truncated/garbled),
 * PB_ERR_MISMATCH (another cache type or model shape), PB_ERR_CONTEXT_FULL (n_past > this n_ctx).
 * pb_kv_state_check is that check alone (the cache untouched); with n_past >= 0 the state must hold exactly
 * n_past positions (PB_ERR_FORMAT otherwise), so a caller can validate a whole file before changing anything. */
size_t pb_kv_state_size(const pb_kv_cache *kv);
pb_status pb_kv_state_write(const pb_kv_cache *kv, void *buf, size_t cap, size_t *len_out);
pb_status pb_kv_state_check(const pb_kv_cache *kv, const void *buf, size_t len, int n_past);
pb_status pb_kv_state_read(pb_kv_cache *kv, const void *buf, size_t len);

/* ---- forward pass ---- */
/* Scratch sized once for up to n_batch tokens: activations, RoPE angles, pb_matmul's activation buffer
 * and, for each sliding-window layer, a stash of the batch's new K/V rows (2 * n_batch * kv_dim floats)
 * that are moved into the ring only when the whole call succeeded. Thread-compatible: one call at a time. */
typedef struct pb_forward_ctx pb_forward_ctx;

pb_status pb_forward_ctx_new(const pb_model *m, int n_batch, pb_forward_ctx **out);
/* Bytes a context reserves for prefill attention tiles (float K/V rows of one key block per thread slot; only
 * the pool's threads touch theirs): part of the scratch, for memory estimates. */
size_t pb_forward_tiles_bytes(const pb_hparams *hp, int n_ctx, int n_batch);
/* The same, with the stash sized for kv's row type (F16: half of the F32-sized one); the context then
 * refuses a KV cache with wider rows. */
pb_status pb_forward_ctx_new_kv(const pb_model *m, int n_batch, const pb_kv_cache *kv, pb_forward_ctx **out);
void pb_forward_ctx_free(pb_forward_ctx *fc);
size_t pb_forward_ctx_bytes(const pb_forward_ctx *fc);
/* Exact mode (default off): matmuls in float32 on weight rows dequantized one at a time per thread, the
 * numerics of a float64 reference up to float32 rounding, instead of pb_matmul's quantized activations
 * (llama.cpp-style Q8 activations: faster, but ~1 logit of noise on quantized models). The weights stay
 * quantized in memory. For validation and `pocketbrain logits --exact`. */
void pb_forward_set_exact(pb_forward_ctx *fc, bool exact);

/* Runs n (1..n_batch) tokens at positions n_past..n_past+n-1, appending their K/V to kv.
 * logits: n_vocab floats for the last token, or n*n_vocab (row-major) when all_logits.
 * Token ids outside 0..n_vocab-1 give PB_ERR_INVALID_ARG. pool may be NULL (calling thread only); matmuls
 * split rows and attention splits (token, head) pairs over it. The result of a token does not depend on
 * how the prompt is split into calls nor on the thread count (bit-identical).
 * Returns PB_ERR_CONTEXT_FULL if n_past + n > n_ctx (nothing is changed then).
 * cancel (may be NULL) is polled between layers; when it becomes non-zero returns PB_ERR_CANCELLED
 * and the KV is left as it was before the call. A model whose K/V rows or logits come out NaN or inf (NaN or inf in
 * its weights) gives PB_ERR_FORMAT, K/V values past what kv's type stores (F16: 65504) PB_ERR_UNSUPPORTED, the message
 * naming the position; the KV is left as it was then too. Allocates nothing. */
pb_status pb_forward(const pb_model *m, pb_kv_cache *kv, pb_forward_ctx *fc, pb_pool *pool, const int32_t *tokens,
                     int n, float *logits, bool all_logits, const volatile int *cancel);

/* Greedy decoding with the argmax on the GPU. pb_forward_has_top: kv runs on the GPU and its backend can return
 * the argmax of the logits (4 bytes back instead of n_vocab floats). pb_forward_top: pb_forward (without a pool or
 * cancel: a GPU call runs to its end) whose last token's logits stay on the device while *top gets their greedy
 * pick, pb_sampler's rule: the lowest id of the largest logit, NaN never winning, -1 when none exceeds -inf;
 * PB_ERR_UNSUPPORTED where !pb_forward_has_top(kv). pb_forward_pull_logits copies those logits into
 * logits[n_vocab] (the last output step's, until the next forward on kv). The CPU path is untouched by both. */
bool pb_forward_has_top(const pb_kv_cache *kv);
pb_status pb_forward_top(const pb_model *m, pb_kv_cache *kv, pb_forward_ctx *fc, const int32_t *tokens, int n,
                         int32_t *top);
pb_status pb_forward_pull_logits(pb_kv_cache *kv, float *logits);
/* Sparse sampling with the logits on the GPU (pb_sampler_sample_top's input). pb_forward_has_logits_top: kv runs on
 * the GPU and its backend can select from the logits there. pb_forward_logits_top: of the logits a pb_forward_top /
 * pb_forward_batch left on the device, ids / vals[0..m) the m best (1 <= m <= PB_SAMPLER_TOP_MAX, m <= n_vocab) in
 * pb_sampler's canonical order (value descending, id ascending, NaN as -inf, -0 as +0; vals the raw logits) and
 * gvals[0..ng) the raw logits of gather[0..ng) (ng <= PB_SAMPLER_TOP_MAX); PB_ERR_UNSUPPORTED for a CPU cache. */
bool pb_forward_has_logits_top(const pb_kv_cache *kv);
pb_status pb_forward_logits_top(pb_kv_cache *kv, int m, const int32_t *gather, int ng, int32_t *ids, float *vals,
                                float *gvals);

/* Batched decode: one step for n independent sequences (1..PB_FORWARD_BATCH_MAX), tokens[i] appended at position
 * pb_kv_n_past(kvs[i]) of cache kvs[i] (n distinct caches of model m, all on the CPU or all on the GPU; fc is any
 * scratch of m whose n_batch >= n). The weights are read once for the n tokens; each sequence attends only to its
 * own cache. Row i's result has the bits of a one-token pb_forward of tokens[i] on kvs[i] alone (CPU: any pool;
 * GPU: as pb_forward_top / pb_forward on that cache, its logits left on the device for pb_forward_pull_logits).
 * logits (may be NULL on the GPU): n rows of n_vocab floats, row i for sequence i. top (GPU only, may be NULL):
 * each row's greedy pick as pb_forward_top gives it; PB_ERR_UNSUPPORTED for CPU caches. Every check (arguments,
 * context full, token ids, one cache twice) is made before anything changes; a failure changes no cache. No pool
 * cancel: the step runs to its end. Values pb_forward refuses (NaN or inf, K/V past the cache type) fail the step as
 * there; logits left on the device are not checked. Allocates nothing. */
enum { PB_FORWARD_BATCH_MAX = 64 };
pb_status pb_forward_batch(const pb_model *m, pb_kv_cache *const *kvs, pb_forward_ctx *fc, pb_pool *pool,
                           const int32_t *tokens, int n, float *logits, int32_t *top);

/* The model's users (the engine's sessions and batches): retain at creation, release when freed. pb_model_close of a
 * model that still has users only marks it closed (a warning to pb_set_log's sink) and the release of its last user
 * closes it, so an app that closes the model first (or from a piece callback) frees nothing under a session. Retain
 * of a model already closed: PB_ERR_INVALID_ARG "<fn>: the model was closed (pb_model_close) ...". Thread-safe. */
pb_status pb_model_retain(pb_model *m, const char *fn);
void pb_model_release(pb_model *m);

/* Accessors the engine needs. */
const pb_hparams *pb_model_hparams(const pb_model *m);
const pb_gguf *pb_model_gguf(const pb_model *m);
int pb_model_default_threads(const pb_model *m);

/* Final hidden state (after the output norm) of the last n tokens of the previous pb_forward call,
 * n_embd floats each; used for embeddings (mean pooling). Valid until the next call. */
const float *pb_forward_hidden(const pb_forward_ctx *fc);

#endif
