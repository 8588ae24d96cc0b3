/* forward.c -- the Gemma 1/2/3 forward pass over a batch of tokens, with the session's KV cache.
 * Reads like the papers: embed -> N x (norm, attention, [post-norm], residual, norm, GeGLU, [post-norm],
 * residual) -> norm -> tied output. Versions differ only by flags in pb_hparams. Nothing is allocated per
 * call: every buffer lives in pb_forward_ctx (sized for n_batch tokens) or in the KV cache. */
#include "kernels/kernels.h"
#include "model/gpu.h"
#include "model/kv_impl.h"
#include "kernels/matmul.h"
#include "tensor/ops.h"
#include "tensor/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// --- scratch ---------------------------------------------------------------------------------------------

struct pb_forward_ctx {
    const pb_model *m;
    int n_batch;
    int n_last;                           /* rows in hidden from the last call */
    bool exact;                           /* float32 matmuls on dequantized rows (pb_forward_set_exact) */
    float *wrow;                          /* [PB_FWD_MAX_THREADS, max_K] dequantized weight rows (exact mode) */
    float *x;                             /* [n_batch, d]     residual stream            */
    float *xn;                            /* [n_batch, d]     normed input of a block    */
    float *q;                             /* [n_batch, H*hd]  queries                    */
    float *k, *v;                         /* [n_batch, Hkv*hd] new keys / values         */
    float *att;                           /* [n_batch, H*hd]  attention output per head  */
    float *o;                             /* [n_batch, d]     block output (shares xn's memory) */
    float *gate, *up;                     /* [n_batch, F]     GeGLU branches             */
    float *hidden;                        /* [n_batch, d]     after the output norm      */
    float *cos_g, *sin_g, *cos_l, *sin_l; /* [n_batch, hd/2] RoPE angles, global / local layers */
    uint8_t *stash;                       /* [n_swa_layers][2][n_batch] rows of new K/V for ring layers */
    size_t stash_row;                     /* bytes a stash row holds (a KV cache's row_bytes must fit) */
    size_t stash_layer;                   /* bytes per ring layer */
    int stash_t0; /* the stash row of this call's first token: 0, or row t of a batched step (each row its own) */
    int swa_slot[PB_MAX_LAYERS]; /* index of a ring layer's stash, -1 for full layers */
    float *part;                 /* attention states: max(2 n_batch, PB_ATT_MAX_BLOCKS + 1) x H x (hd + 2) floats */
    float *attkv;                /* prefill: [PB_FWD_MAX_THREADS][2][att_bcap][hd] float K/V rows of one key block */
    int att_bcap;                /* key block size that scratch holds (0: no tiles, n_batch 1) */
    void *act;                   /* pb_matmul activation scratch */
    /* Gemma 4 (NULL when unused) */
    float *pli;                   /* [n_batch, L*P] per-layer inputs of the batch */
    float *ple_g, *ple_u;         /* [n_batch, P] PLE gate and the layer's slice of pli */
    float *ple_row;               /* [L*P] one row of the PLE table */
    float *moe_out;               /* [n_batch, d] experts' output */
    float *moe_y, *moe_p, *moe_h; /* [d] router / expert input, [E] router probabilities, [2 I + d] expert rows */
    void *mem;
    size_t bytes;
};

static size_t fsize(int64_t n) { return PB_PAD((size_t)n * sizeof(float), 64); }

static pb_status ctx_new(const pb_model *m, int n_batch, size_t stash_row, int att_bcap, pb_forward_ctx **out);

pb_status pb_forward_ctx_new(const pb_model *m, int n_batch, pb_forward_ctx **out) {
    if (!m) return pb_error(PB_ERR_INVALID_ARG, "forward: NULL model or out");
    return ctx_new(m, n_batch, (size_t)m->hp.n_head_kv * (size_t)m->hp.head_dim * sizeof(float), 128, out);
}

pb_status pb_forward_ctx_new_kv(const pb_model *m, int n_batch, const pb_kv_cache *kv, pb_forward_ctx **out) {
    if (!m || !kv) return pb_error(PB_ERR_INVALID_ARG, "forward: NULL model or KV cache");
    return ctx_new(m, n_batch, kv->row_bytes, kv->attn_block, out);
}

size_t pb_forward_tiles_bytes(const pb_hparams *hp, int n_ctx, int n_batch) {
    if (n_batch <= 1) return 0;
    int bcap = PB_MAX(128, (n_ctx + PB_ATT_MAX_BLOCKS - 1) / PB_ATT_MAX_BLOCKS); /* kv_cache.c's attn_block */
    return (size_t)PB_FWD_MAX_THREADS * 2 * (size_t)bcap * (size_t)hp->head_dim * sizeof(float) + 64;
}

static pb_status ctx_new(const pb_model *m, int n_batch, size_t stash_row, int att_bcap, pb_forward_ctx **out) {
    if (!m || !out) return pb_error(PB_ERR_INVALID_ARG, "forward: NULL model or out");
    *out = NULL;
    if (n_batch < 1 || n_batch > 65536)
        return pb_error(PB_ERR_INVALID_ARG, "forward: n_batch %d out of range", n_batch);
    const pb_hparams *hp = &m->hp;
    int64_t B = n_batch, d = hp->n_embd, hd = hp->head_dim, F = hp->n_ff;
    int64_t q_dim = (int64_t)hp->n_head * hd, kv_dim = (int64_t)hp->n_head_kv * hd;
    int64_t P = hp->n_embd_per_layer, LP = (int64_t)hp->n_layer * P;
    pb_forward_ctx *fc = pb_calloc(1, sizeof *fc);
    if (!fc) return PB_ERR_NOMEM;
    fc->m = m;
    fc->n_batch = n_batch;
    if (n_batch == 1) att_bcap = 0; /* decode only: no token tiles */
    int n_swa = 0;
    for (int il = 0; il < hp->n_layer; il++)
        fc->swa_slot[il] = hp->swa_layer[il] && hp->kv_src[il] == il ? n_swa++ : -1;
    fc->stash_row = stash_row;
    fc->stash_layer = PB_PAD(2 * (size_t)B * stash_row, 64);
    /* activation scratch: the largest any matrix of the model needs */
    size_t act = pb_matmul_scratch_size(m->output.t->type, m->output.t->ne[0], B);
    for (int il = 0; il < hp->n_layer; il++) {
        const pb_layer_w *w = &m->layers[il];
        const pb_gguf_tensor *ts[] = {w->wq.t,        w->wk.t,     w->wv.t,   w->wo.t,       w->gate.t,
                                      w->up.t,        w->down.t,   w->proj.t, w->inp_gate.t, w->gate_inp.t,
                                      w->exp_gate_up, w->exp_gate, w->exp_up, w->exp_down,   m->ple_proj.t};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            if (ts[i]) act = PB_MAX(act, pb_matmul_scratch_size(ts[i]->type, ts[i]->ne[0], B));
        /* fused groups over the normed rows: q, k, v and gate, up */
        pb_mm_op qkv[] = {{.type = w->wq.t->type},
                          {.type = (w->wk.t ? w->wk.t : w->wq.t)->type},
                          {.type = (w->wv.t ? w->wv.t : w->wq.t)->type}};
        pb_mm_op gu[] = {{.type = w->gate.t->type}, {.type = w->up.t->type}};
        act = PB_MAX(act, pb_matmul_group_scratch_size(qkv, 3, d, B));
        act = PB_MAX(act, pb_matmul_group_scratch_size(gu, 2, d, B));
    }
    size_t sizes[] = {fsize(B * d),
                      fsize(B * d),
                      fsize(B * q_dim),
                      fsize(B * kv_dim),
                      fsize(B * kv_dim),
                      fsize(B * q_dim),
                      fsize(B * F),
                      fsize(B * F),
                      fsize(B * d),
                      fsize(B * hd / 2) * 4,
                      fsize(1) + PB_PAD(act, 64),
                      fsize((int64_t)PB_FWD_MAX_THREADS * PB_MAX(PB_MAX(d, F), q_dim)),
                      fc->stash_layer * (size_t)n_swa,
                      fsize((int64_t)PB_MAX(2 * B, PB_ATT_MAX_BLOCKS + 1) * hp->n_head * (hd + 2)),
                      fsize((int64_t)PB_FWD_MAX_THREADS * 2 * att_bcap * hd),
                      fsize(B * LP),
                      fsize(B * P),
                      fsize(B * P),
                      fsize(LP),
                      hp->n_expert ? fsize(B * d) : 0,
                      hp->n_expert ? fsize(d) : 0,
                      hp->n_expert ? fsize(hp->n_expert) : 0,
                      hp->n_expert ? fsize(2 * (int64_t)hp->n_ff_exp + d) : 0};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += sizes[i];
    fc->mem = pb_aligned_alloc(total);
    if (!fc->mem) {
        free(fc);
        return pb_error(PB_ERR_NOMEM, "forward: cannot allocate %zu MiB of scratch", total >> 20);
    }
    fc->bytes = total;
    uint8_t *p = fc->mem;
    float **bufs[] = {&fc->x, &fc->xn, &fc->q, &fc->k, &fc->v, &fc->att, &fc->gate, &fc->up, &fc->hidden};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        *bufs[i] = (float *)p;
        p += sizes[i];
    }
    fc->o = fc->xn; /* never live at once: xn is read by q/k/v and gate/up before o is written */
    size_t rs = fsize(B * hd / 2);
    fc->cos_g = (float *)p;
    fc->sin_g = (float *)(p + rs);
    fc->cos_l = (float *)(p + 2 * rs);
    fc->sin_l = (float *)(p + 3 * rs);
    p += 4 * rs;
    fc->act = p;
    p += fsize(1) + PB_PAD(act, 64);
    fc->wrow = (float *)p;
    p += fsize((int64_t)PB_FWD_MAX_THREADS * PB_MAX(PB_MAX(d, F), q_dim));
    fc->stash = p;
    p += fc->stash_layer * (size_t)n_swa;
    fc->part = (float *)p;
    p += sizes[sizeof sizes / sizeof sizes[0] - 10];
    fc->attkv = (float *)p; /* pages of parts that never run stay untouched */
    fc->att_bcap = att_bcap;
    size_t n_sizes = sizeof sizes / sizeof sizes[0];
    p += sizes[n_sizes - 9];
    float **g4[] = {&fc->pli, &fc->ple_g, &fc->ple_u, &fc->ple_row, &fc->moe_out, &fc->moe_y, &fc->moe_p, &fc->moe_h};
    for (size_t i = 0; i < 8; i++) {
        *g4[i] = sizes[n_sizes - 8 + i] ? (float *)p : NULL;
        p += sizes[n_sizes - 8 + i];
    }
    *out = fc;
    return PB_OK;
}

void pb_forward_ctx_free(pb_forward_ctx *fc) {
    if (!fc) return;
    pb_aligned_free(fc->mem);
    free(fc);
}

size_t pb_forward_ctx_bytes(const pb_forward_ctx *fc) { return fc ? fc->bytes : 0; }
const float *pb_forward_hidden(const pb_forward_ctx *fc) { return fc->hidden; }

// --- helpers ---------------------------------------------------------------------------------------------

void pb_forward_set_exact(pb_forward_ctx *fc, bool exact) { fc->exact = exact; }

/* Row r of a weight matrix as floats (packed rows are gathered back block by block; nothing allocated). */
static void row_to_float(const pb_wmat *w, int64_t r, float *dst) {
    const pb_gguf_tensor *t = w->t;
    int64_t K = t->ne[0];
    if (w->packed)
        pb_pack_read_row_float(t->type, w->data, K, r, dst);
    else
        pb_kernels_type(t->type)->to_float((const uint8_t *)w->data + (size_t)r * pb_row_size(t->type, K), dst, K);
}

typedef struct {
    const pb_wmat *w;
    const float *x;
    float *y, *wrow;
    int n;
} exact_job;

/* Exact mode: each weight row is dequantized once into this thread's buffer and dotted in float32 with
 * every token's activations (no activation quantization; never more than one row per thread in float). */
static void exact_worker(void *ctx, int ith, int nth) {
    const exact_job *j = ctx;
    int64_t K = j->w->t->ne[0], N = j->w->t->ne[1], lo, hi;
    float *wr = j->wrow + (size_t)ith * (size_t)K;
    pb_split(N, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        row_to_float(j->w, r, wr);
        for (int t = 0; t < j->n; t++) j->y[t * N + r] = pb_vec_dot(wr, j->x + t * K, K);
    }
}

/* y[n, N] = x[n, K] . W^T for a GGUF matrix W of ne [K, N] (quantized weights used in place). */
static pb_status linear(pb_forward_ctx *fc, pb_pool *pool, const pb_wmat *w, const float *x, int n, float *y) {
    const pb_gguf_tensor *t = w->t;
    if (!fc->exact && w->packed) return pb_matmul_packed(w->data, t->type, t->ne[0], t->ne[1], x, n, y, fc->act, pool);
    if (!fc->exact) return pb_matmul(w->data, t->type, t->ne[0], t->ne[1], x, n, y, fc->act, pool);
    exact_job j = {w, x, y, fc->wrow, n};
    if (pool)
        pb_pool_run_n(pool, PB_MIN(pb_pool_size(pool), PB_FWD_MAX_THREADS), exact_worker, &j);
    else
        exact_worker(&j, 0, 1);
    return PB_OK;
}

/* Row-wise RMSNorm of n rows of width d. */
static void norm_rows(float *y, const float *x, const float *w, int n, int64_t d, float eps) {
    for (int t = 0; t < n; t++) pb_rmsnorm(y + t * d, x + t * d, w, d, eps);
}

/* ys[i] = W_i . RMSNorm(x; norm_w) for matrices over the same normed rows (then ys[0] = pair(ys[0], ys[1])
 * when pair is set). Fused: one pass norms and quantizes each token, one pool run does every matrix's rows;
 * fc->xn receives the normed rows either way. Exact mode: the same steps one at a time in float32. */
static pb_status normed_group(pb_forward_ctx *fc, pb_pool *pool, const float *norm_w, const pb_wmat *const *ws,
                              float *const *ys, int n_ops, pb_mm_pair_fn pair, int n) {
    const pb_hparams *hp = &fc->m->hp;
    int64_t d = hp->n_embd;
    if (fc->exact) {
        norm_rows(fc->xn, fc->x, norm_w, n, d, hp->norm_eps);
        for (int i = 0; i < n_ops; i++) {
            pb_status s = linear(fc, pool, ws[i], fc->xn, n, ys[i]);
            if (s) return s;
        }
        if (pair) pair(ys[0], ys[1], (int64_t)n * ws[0]->t->ne[1]);
        return PB_OK;
    }
    pb_mm_op ops[PB_MM_MAX_OPS];
    for (int i = 0; i < n_ops; i++)
        ops[i] = (pb_mm_op){
            .w = ws[i]->data, .type = ws[i]->t->type, .N = ws[i]->t->ne[1], .packed = ws[i]->packed, .y = ys[i]};
    pb_mm_norm nm = {.w = norm_w, .eps = hp->norm_eps, .out = fc->xn};
    return pb_matmul_group(ops, n_ops, d, fc->x, n, &nm, pair, fc->act, pool);
}

static void run_pool(pb_pool *pool, pb_pool_fn fn, void *ctx) {
    if (pool)
        pb_pool_run(pool, fn, ctx);
    else
        fn(ctx, 0, 1);
}

// --- attention -----------------------------------------------------------------------------------------

typedef struct {
    const pb_model *m;
    const pb_kv_cache *kv;
    pb_forward_ctx *fc;
    int il, n, n_past;                /* il: the layer whose cache is read (Gemma 4 KV sharing: the producer) */
    int hd, hkv;                      /* head dim and kv heads of that cache (the query layer has the same) */
    const uint8_t *stash_k, *stash_v; /* ring layers: rows of positions n_past.. (else NULL) */
} attn_job;

/* Row of kv head g at position t (a new position of a ring layer lives in the stash, position-major, until
 * commit; the cache is head-major, kv_impl.h). */
static const uint8_t *kv_head(const attn_job *j, uint8_t *cache, const uint8_t *stash, int t, int g) {
    const pb_kv_cache *kv = j->kv;
    if (stash && t >= j->n_past)
        return stash + (size_t)(t - j->n_past) * kv->row_b[j->il] + (size_t)g * kv->head_b[j->il];
    return pb_kv_head_row(kv, cache, j->il, g, kv->ring[j->il] ? t % kv->cap[j->il] : t);
}

/* Attention state of the n_rep query heads sharing one kv head, over some keys: per head
 * [max score, sum of exp(score - max), sum of exp(score - max) * v (hd values)] = ST(hd) floats. */
#define ST(hd) ((hd) + 2)

/* Keys per chunk of att_block: scores of a chunk are soft-capped and exponentiated together (SIMD). */
#define ATT_CHUNK 32

/* Fresh states of n_rep heads: max -inf, sum 0, accumulated values 0. */
static void att_state_init(float *st, int n_rep, int hd) {
    for (int r = 0; r < n_rep; r++) {
        float *x = st + r * ST(hd);
        x[0] = -INFINITY;
        x[1] = 0.0f;
        memset(x + 2, 0, sizeof(float) * (size_t)hd);
    }
}

/* One head's chunk of cn raw scores s (q . k) into softmax weights: scaled, Gemma 2 soft-capped (50),
 * exp(s - max) against the state x's running max; updates x's max and sum and returns the factor its
 * accumulated values must be scaled by first (1.0f when the max did not grow; 0 on the first chunk).
 * Shared by decode (att_block) and prefill (att_tile_block), which must agree bit for bit. */
static float att_chunk_weights(const pb_hparams *hp, float *x, float *s, int cn) {
    for (int i = 0; i < cn; i++) s[i] *= hp->query_scale; /* HF: (q @ k^T) * qpas^-0.5 */
    float mx = x[0], sum = pb_kernels_att_exp(s, cn, hp->attn_softcap, &mx), c = 1.0f;
    if (mx > x[0]) {
        c = expf(x[0] - mx);
        x[1] *= c;
        x[0] = mx;
    }
    x[1] += sum;
    return c;
}

/* Keys t..end of kv head g that lie at one stride (cache rows up to a ring's wrap or to the stash, or stash rows):
 * returns how many, *ld = their stride in bytes. */
static int kv_run(const attn_job *j, int t, int end, size_t *ld) {
    const pb_kv_cache *kv = j->kv;
    if (j->stash_k && t >= j->n_past) {
        *ld = kv->row_b[j->il];
        return end - t + 1;
    }
    int last = end;
    if (j->stash_k) last = PB_MIN(last, j->n_past - 1);
    if (kv->ring[j->il]) last = PB_MIN(last, t + (kv->cap[j->il] - 1 - t % kv->cap[j->il]));
    *ld = kv->head_b[j->il];
    return last - t + 1;
}

/* Asks for kv head g's rows of keys a..b (a hint; nothing if a > b). Always inlined: see PB_PREFETCH. */
static inline __attribute__((always_inline)) void prefetch_keys(const attn_job *j, uint8_t *cache, const uint8_t *stash,
                                                                int a, int b, int g) {
    for (int t = a, m; t <= b; t += m) {
        size_t ld;
        m = kv_run(j, t, b, &ld);
        const uint8_t *p = kv_head(j, cache, stash, t, g);
        for (size_t o = 0; o < (size_t)(m - 1) * ld + j->kv->head_b[j->il]; o += 64) PB_PREFETCH(p + o);
    }
}

/* Fresh state over keys k0..k1 (online softmax, one pass, no score buffer beyond a chunk). Keys go in chunks:
 * the n_rep query heads of the group (GQA) get their scores of a chunk together (each K row read once for
 * all of them), soft-capped, max-shifted and exponentiated together, then the chunk's V rows are added to
 * their states (each V row read once; the rescale for a new max folded into the same pass on an F16 cache).
 * Chunks start at k0, so the result depends only on (k0, k1): prefill (att_tile_block, the same operations
 * per head) and decode agree bit for bit. */
static void att_block(const attn_job *j, int t, int g, int k0, int k1, float *st) {
    const pb_hparams *hp = &j->m->hp;
    const pb_kv_cache *kv = j->kv;
    int hd = j->hd, n_rep = hp->n_head / j->hkv;
    const float *q = j->fc->q + ((int64_t)t * hp->n_head + (int64_t)g * n_rep) * hd; /* [n_rep, hd] */
    pb_to_float_fn to_f = pb_kernels_type(kv->st)->to_float;
    float kb[PB_MAX_HEAD_DIM], vb[PB_MAX_HEAD_DIM], sc[PB_MAX_GQA][ATT_CHUNK], cr[PB_MAX_GQA], ones[PB_MAX_GQA];
    const float *qr[PB_MAX_GQA], *ar[PB_MAX_GQA];
    float *yr[PB_MAX_GQA];
    const bool f16 = kv->st == PB_TYPE_F16 && hd <= PB_KERNELS_F16_ROW_MAX;
    att_state_init(st, n_rep, hd);
    for (int r = 0; r < n_rep; r++) qr[r] = q + r * hd, yr[r] = st + r * ST(hd) + 2, ones[r] = 1.0f;
    for (int c0 = k0; c0 <= k1; c0 += ATT_CHUNK) {
        int cn = PB_MIN(ATT_CHUNK, k1 - c0 + 1);
        if (f16) { /* F16 cache: rows converted inside the dot tile, the same values */
            /* requested ahead: this chunk's V rows and the next chunk's K rows (the first chunk's K too); the
             * hardware alone leaves decode waiting on them (2k context, 1 thread: ~12 -> ~14 tok/s) */
            if (c0 == k0) prefetch_keys(j, kv->k[j->il], j->stash_k, c0, c0 + cn - 1, g);
            prefetch_keys(j, kv->k[j->il], j->stash_k, c0 + ATT_CHUNK, PB_MIN(k1, c0 + 2 * ATT_CHUNK - 1), g);
            prefetch_keys(j, kv->v[j->il], j->stash_v, c0, c0 + cn - 1, g);
            for (int i = 0, m; i < cn; i += m) {
                size_t ld;
                m = kv_run(j, c0 + i, c0 + cn - 1, &ld);
                const uint16_t *kh = (const uint16_t *)(const void *)kv_head(j, kv->k[j->il], j->stash_k, c0 + i, g);
                pb_kernels_dot_f16_tile(qr, n_rep, kh, ld / 2, m, hd, &sc[0][i], ATT_CHUNK);
            }
        } else {
            for (int i = 0; i < cn; i++) {
                to_f(kv_head(j, kv->k[j->il], j->stash_k, c0 + i, g), kb, hd);
                for (int r = 0; r < n_rep; r++) sc[r][i] = pb_kernels_dot_f32(q + r * hd, kb, hd);
            }
        }
        for (int r = 0; r < n_rep; r++) cr[r] = att_chunk_weights(hp, st + r * ST(hd), sc[r], cn);
        if (f16) {
            for (int i = 0, m; i < cn; i += m) {
                size_t ld;
                m = kv_run(j, c0 + i, c0 + cn - 1, &ld);
                const uint16_t *vh = (const uint16_t *)(const void *)kv_head(j, kv->v[j->il], j->stash_v, c0 + i, g);
                for (int r = 0; r < n_rep; r++) ar[r] = sc[r] + i;
                pb_kernels_mad_f16_tile(yr, i == 0 ? cr : ones, ar, n_rep, vh, ld / 2, m, hd);
            }
            continue;
        }
        for (int r = 0; r < n_rep; r++) pb_vec_scale(yr[r], hd, cr[r]);
        for (int i = 0; i < cn; i++) {
            to_f(kv_head(j, kv->v[j->il], j->stash_v, c0 + i, g), vb, hd);
            for (int r = 0; r < n_rep; r++) pb_kernels_mad_f32(yr[r], vb, sc[r][i], hd);
        }
    }
}

/* dst = dst (+) src for n_rep head states (first: copy). Always applied in block order. */
static void att_merge(float *dst, const float *src, int n_rep, int hd, bool first) {
    if (first) {
        memcpy(dst, src, sizeof(float) * (size_t)(n_rep * ST(hd)));
        return;
    }
    for (int r = 0; r < n_rep; r++) {
        float *a = dst + r * ST(hd);
        const float *b = src + r * ST(hd);
        float mx = a[0] > b[0] ? a[0] : b[0];
        float ca = expf(a[0] - mx), cb = expf(b[0] - mx);
        a[0] = mx;
        a[1] = a[1] * ca + b[1] * cb;
        for (int i = 0; i < hd; i++) a[2 + i] = a[2 + i] * ca + b[2 + i] * cb;
    }
}

/* softmax . V = (sum of exp * v) / (sum of exp), into att rows of the group's query heads. */
static void att_finish(const attn_job *j, int t, int g, const float *st) {
    const pb_hparams *hp = &j->m->hp;
    int hd = j->hd, n_rep = hp->n_head / j->hkv;
    float *out = j->fc->att + ((int64_t)t * hp->n_head + (int64_t)g * n_rep) * hd;
    for (int r = 0; r < n_rep; r++) {
        const float *x = st + r * ST(hd);
        float inv = 1.0f / x[1];
        for (int i = 0; i < hd; i++) out[r * hd + i] = x[2 + i] * inv;
    }
}

/* Keys visible from token t (p = n_past + t): p-W < key <= p on sliding-window layers, key <= p otherwise.
 * They are cut into blocks at multiples of kv->attn_block (absolute positions), the unit of parallel work
 * in decode; prefill walks the same blocks in the same order, so both give bit-identical results. */
static void key_range(const attn_job *j, int t, int *lo, int *hi) {
    const pb_hparams *hp = &j->m->hp;
    int p = j->n_past + t;
    *lo = hp->swa_layer[j->il] ? PB_MAX(0, p - hp->sliding_window + 1) : 0;
    *hi = p;
}

/* Prefill: one task per (token, kv head), blocks walked in order. */
static void att_rows_worker(void *ctx, int ith, int nth) {
    const attn_job *j = ctx;
    const pb_hparams *hp = &j->m->hp;
    int Hkv = j->hkv, hd = j->hd, n_rep = hp->n_head / Hkv, B = j->kv->attn_block;
    size_t slot = (size_t)n_rep * ST(hd);
    int64_t lo, hi;
    pb_split((int64_t)j->n * Hkv, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int t = (int)(i / Hkv), g = (int)(i % Hkv), k0, k1;
        float *run = j->fc->part + (size_t)i * 2 * slot, *tmp = run + slot;
        key_range(j, t, &k0, &k1);
        for (int b0 = k0; b0 <= k1; b0 = (b0 / B + 1) * B) {
            att_block(j, t, g, b0, PB_MIN(k1, (b0 / B + 1) * B - 1), tmp);
            att_merge(run, tmp, n_rep, hd, b0 == k0);
        }
        att_finish(j, t, g, run);
    }
}

/* Prefill with float rows shared: one task per (tile of ATT_QT tokens, kv head). Each key block the tile sees
 * is converted to float once (into this part's scratch) and read by every token of the tile, instead of once
 * per token; each token still runs its own blocks in order, so results equal att_rows_worker's. */
#define ATT_QT 64
/* Tokens t0..t1-1 of a tile over their keys in the block at b0 (float rows kf/vf from row base), into their
 * running states: the steps of att_block + att_merge per token, with the tokens that start at the same key
 * walked together chunk by chunk, so each K/V slice loaded serves all their query heads (dot / mad tiles).
 * Per token the same operations in the same order: results equal att_block's bit for bit. */
#define ATT_ROWS 64 /* query rows (tokens x n_rep) walked together, >= PB_MAX_GQA */
static void att_tile_block(const attn_job *j, int g, int t0, int t1, int b0, const float *kf, const float *vf,
                           int base) {
    const pb_hparams *hp = &j->m->hp;
    int Hkv = j->hkv, hd = j->hd, n_rep = hp->n_head / Hkv, B = j->kv->attn_block;
    size_t slot = (size_t)n_rep * ST(hd);
    int per = ATT_ROWS / n_rep; /* tokens per walk */
    int ka[ATT_QT], kb[ATT_QT], k0s[ATT_QT];
    bool done[ATT_QT];
    float sc[ATT_ROWS][ATT_CHUNK], cr[ATT_ROWS];
    const float *qr[ATT_ROWS], *ar[ATT_ROWS];
    float *yr[ATT_ROWS];
    int tok[ATT_QT];
    for (int t = t0; t < t1; t++) {
        int k0, k1;
        key_range(j, t, &k0, &k1);
        ka[t - t0] = PB_MAX(k0, b0), kb[t - t0] = PB_MIN(k1, b0 + B - 1), k0s[t - t0] = k0;
        done[t - t0] = ka[t - t0] > kb[t - t0];
    }
    for (int first = 0; first < t1 - t0; first++) {
        if (done[first]) continue;
        /* a walk: up to `per` tokens whose keys here start at ka[first] */
        int nt = 0, a = ka[first], bmax = a;
        for (int u = first; u < t1 - t0 && nt < per; u++)
            if (!done[u] && ka[u] == a) {
                tok[nt++] = u, done[u] = true;
                bmax = PB_MAX(bmax, kb[u]);
            }
        for (int u = 0; u < nt; u++) /* their tmp states */
            att_state_init(j->fc->part + ((size_t)(t0 + tok[u]) * Hkv + g) * 2 * slot + slot, n_rep, hd);
        for (int c0 = a; c0 <= bmax; c0 += ATT_CHUNK) {
            int cmax = PB_MIN(ATT_CHUNK, bmax - c0 + 1), nq = 0;
            for (int u = 0; u < nt; u++) {
                if (kb[tok[u]] < c0) continue; /* its keys ended before this chunk */
                const float *q = j->fc->q + ((int64_t)(t0 + tok[u]) * hp->n_head + (int64_t)g * n_rep) * hd;
                for (int r = 0; r < n_rep; r++) qr[nq + r] = q + r * hd;
                nq += n_rep;
            }
            const float *krow = kf + (size_t)(c0 - base) * (size_t)hd, *vrow = vf + (size_t)(c0 - base) * (size_t)hd;
            pb_kernels_dot_f32_tile(qr, nq, krow, (size_t)hd, cmax, hd, &sc[0][0], ATT_CHUNK);
            int row = 0, nfull = 0;
            for (int u = 0; u < nt; u++) {
                if (kb[tok[u]] < c0) continue;
                int cn = PB_MIN(ATT_CHUNK, kb[tok[u]] - c0 + 1);
                float *st = j->fc->part + ((size_t)(t0 + tok[u]) * Hkv + g) * 2 * slot + slot;
                for (int r = 0; r < n_rep; r++, row++) {
                    float *x = st + r * ST(hd), c = att_chunk_weights(hp, x, sc[row], cn);
                    if (cn == cmax) { /* full chunk: values together, the rescale inside the mad tile */
                        yr[nfull] = x + 2, ar[nfull] = sc[row], cr[nfull] = c;
                        nfull++;
                    } else {
                        pb_vec_scale(x + 2, hd, c);
                        pb_kernels_mad_f32_rows(x + 2, vrow, (size_t)hd, sc[row], cn, hd);
                    }
                }
            }
            pb_kernels_mad_f32_tile(yr, cr, ar, nfull, vrow, (size_t)hd, cmax, hd);
        }
        for (int u = 0; u < nt; u++) {
            float *run = j->fc->part + ((size_t)(t0 + tok[u]) * Hkv + g) * 2 * slot;
            att_merge(run, run + slot, n_rep, hd, a == k0s[tok[u]]);
        }
    }
}

static void att_tiles_worker(void *ctx, int ith, int nth) {
    const attn_job *j = ctx;
    const pb_hparams *hp = &j->m->hp;
    const pb_kv_cache *kv = j->kv;
    int Hkv = j->hkv, hd = j->hd, n_rep = hp->n_head / Hkv, B = kv->attn_block;
    size_t slot = (size_t)n_rep * ST(hd);
    pb_to_float_fn to_f = pb_kernels_type(kv->st)->to_float;
    float *kf = j->fc->attkv + (size_t)ith * 2 * (size_t)j->fc->att_bcap * (size_t)hd;
    float *vf = kf + (size_t)j->fc->att_bcap * (size_t)hd;
    int n_tiles = (j->n + ATT_QT - 1) / ATT_QT;
    int64_t lo, hi;
    pb_split((int64_t)n_tiles * Hkv, ith, nth, &lo, &hi);
    for (int64_t task = lo; task < hi; task++) {
        int g = (int)(task % Hkv), t0 = (int)(task / Hkv) * ATT_QT, t1 = PB_MIN(j->n, t0 + ATT_QT), kmin, kmax, k0, k1;
        key_range(j, t0, &kmin, &k1);
        key_range(j, t1 - 1, &k0, &kmax);
        for (int b0 = kmin / B * B; b0 <= kmax; b0 += B) {
            int r0 = PB_MAX(b0, kmin), r1 = PB_MIN(b0 + B - 1, kmax); /* keys of this block the tile reads */
            for (int r = r0; r <= r1; r++) {
                to_f(kv_head(j, kv->k[j->il], j->stash_k, r, g), kf + (size_t)(r - r0) * (size_t)hd, hd);
                to_f(kv_head(j, kv->v[j->il], j->stash_v, r, g), vf + (size_t)(r - r0) * (size_t)hd, hd);
            }
            att_tile_block(j, g, t0, t1, b0, kf, vf, r0);
        }
        for (int t = t0; t < t1; t++) att_finish(j, t, g, j->fc->part + ((size_t)t * Hkv + g) * 2 * slot);
    }
}

/* Decode (one token): one task per (kv head, block), merged afterwards in block order. */
static void att_blocks_worker(void *ctx, int ith, int nth) {
    const attn_job *j = ctx;
    const pb_hparams *hp = &j->m->hp;
    int Hkv = j->hkv, hd = j->hd, n_rep = hp->n_head / Hkv, B = j->kv->attn_block;
    size_t slot = (size_t)n_rep * ST(hd);
    int k0, k1;
    key_range(j, 0, &k0, &k1);
    int nb = k1 / B - k0 / B + 1;
    int64_t lo, hi;
    pb_split((int64_t)nb * Hkv, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int g = (int)(i / nb), b = (int)(i % nb);
        int b0 = b == 0 ? k0 : (k0 / B + b) * B, b1 = PB_MIN(k1, (k0 / B + b + 1) * B - 1);
        att_block(j, 0, g, b0, b1, j->fc->part + (size_t)i * slot);
    }
}

static void attend(attn_job *j, pb_pool *pool) {
    const pb_hparams *hp = &j->m->hp;
    int nth = pool ? pb_pool_size(pool) : 1;
    int B = j->kv->attn_block, k0, k1;
    key_range(j, 0, &k0, &k1);
    int nb = k1 / B - k0 / B + 1;
    if (j->n > 1 && j->kv->attn_block <= j->fc->att_bcap) { /* prefill, float rows shared by token tiles */
        if (pool)
            pb_pool_run_n(pool, PB_MIN(pb_pool_size(pool), PB_FWD_MAX_THREADS), att_tiles_worker, j);
        else
            att_tiles_worker(j, 0, 1);
        return;
    }
    if (j->n > 1 || nb == 1 || j->hkv >= nth) {
        run_pool(pool, att_rows_worker, j);
        return;
    }
    run_pool(pool, att_blocks_worker, j);
    int Hkv = j->hkv, hd = j->hd, n_rep = hp->n_head / Hkv;
    size_t slot = (size_t)n_rep * ST(hd);
    float *run = j->fc->part + (size_t)nb * Hkv * slot;
    for (int g = 0; g < Hkv; g++) {
        for (int b = 0; b < nb; b++) att_merge(run, j->fc->part + ((size_t)g * nb + b) * slot, n_rep, hd, b == 0);
        att_finish(j, 0, g, run);
    }
}

// --- values the model should never produce -------------------------------------------------------------------

/* The largest magnitude a KV cache of type st stores: F16 rounds 65520 and above to inf, Q8_0 keeps amax / 127 as an
 * F16 scale; F32 anything finite. */
static float kv_type_max(int st) {
    return st == PB_TYPE_F16 ? 65520.0f : st == PB_TYPE_Q8_0 ? 65504.0f * 127.0f : INFINITY;
}

/* Refuses this call's new K/V rows of layer il (n rows of kv_dim at fc->k / fc->v) holding a value that is not finite
 * or that the cache type cannot store, before any is written: an inf or NaN key in the cache drops out of every later
 * softmax or takes it over, a silent wrong answer for the rest of the context (an F16 cache turned 1e5 into inf). */
static pb_status check_kv_rows(const pb_kv_cache *kv, const pb_forward_ctx *fc, int il, int n, int64_t kv_dim) {
    const float lim = kv_type_max(kv->st);
    for (int w = 0; w < 2; w++) {
        const float *x = w ? fc->v : fc->k;
        int64_t i = pb_vec_first_over(x, n * kv_dim, lim);
        if (i < 0) continue;
        int pos = kv->n_past + (int)(i / kv_dim);
        if (!isfinite(x[i]))
            return pb_error(PB_ERR_FORMAT,
                            "forward: the model produced a non-finite %s (%g) at position %d in layer %d: NaN or inf "
                            "in its weights (this layer's or an earlier one's), or an overflow?",
                            w ? "value" : "key", (double)x[i], pos, il);
        return pb_error(PB_ERR_UNSUPPORTED,
                        "forward: layer %d's %s at position %d is %g, beyond the %g the %s KV cache stores (an f32 KV "
                        "cache holds it: --kv-type f32)",
                        il, w ? "value" : "key", pos, (double)x[i], (double)lim, pb_type_name(kv->st));
    }
    return PB_OK;
}

/* Refuses rows x cols values at x (row r the token at position pos0 + r) holding NaN or inf, naming the first: what
 * the final hidden state or the logits are for a model with NaN or inf in a matrix. Greedy argmax skips NaN, Gemma 2's
 * soft-cap turned it into -30, a quantized product into 0: an answer of token 0, or "all banned". Called before the
 * call's K/V rows are committed, so a refused call leaves the cache as it was. */
static pb_status check_finite(const float *x, int rows, int64_t cols, int pos0, const char *what) {
    int64_t i = pb_vec_first_over(x, (int64_t)rows * cols, INFINITY);
    if (i < 0) return PB_OK;
    return pb_error(PB_ERR_FORMAT,
                    "forward: the model produced non-finite %s at position %d (%g at index %lld): NaN or inf in its "
                    "weights, or an overflow?",
                    what, pos0 + (int)(i / cols), (double)x[i], (long long)(i % cols));
}

/* A GPU argmax of -1 (model/gpu.h): no logit above -inf, so all of them NaN (the model's logits are never -inf). */
static pb_status no_logit(int pos) {
    return pb_error(PB_ERR_FORMAT,
                    "forward: the model produced non-finite logits at position %d (none above -inf: NaN): NaN or inf "
                    "in its weights, or an overflow?",
                    pos);
}

// --- one transformer block -----------------------------------------------------------------------------

/* Appends this block's new K/V rows (converted to the cache type; refused when one does not fit it: check_kv_rows) and
 * runs attention for n tokens. A Gemma 4 KV-shared layer appends nothing and reads its producer's cache (and the
 * producer's stash of this call). */
static pb_status attention(const pb_model *m, pb_kv_cache *kv, pb_forward_ctx *fc, pb_pool *pool, int il, int n) {
    int src = m->hp.kv_src[il];
    int64_t kv_dim = kv->kvd[src];
    int hd = kv->hdl[src];
    pb_from_float_fn from_f = pb_kernels_type(kv->st)->from_float;
    attn_job j = {m, kv, fc, src, n, kv->n_past, hd, (int)(kv_dim / hd), NULL, NULL};
    size_t rb = kv->row_b[src];
    if (src == il) {
        pb_status s = check_kv_rows(kv, fc, il, n, kv_dim);
        if (s) return s;
    }
    if (fc->swa_slot[src] >= 0 && kv->n_past + n > kv->cap[src]) {
        /* ring layer that wraps in this call: keep new rows aside (position-major) until the whole call
         * succeeded (they would overwrite live positions); a ring not yet full takes them in place, in slots
         * nobody reads */
        uint8_t *dk = fc->stash + fc->stash_layer * (size_t)fc->swa_slot[src];
        uint8_t *dv = dk + (size_t)fc->n_batch * rb;
        dk += (size_t)fc->stash_t0 * rb, dv += (size_t)fc->stash_t0 * rb;
        j.stash_k = dk;
        j.stash_v = dv;
        if (src == il)
            for (int t = 0; t < n; t++) {
                from_f(fc->k + t * kv_dim, dk + (size_t)t * rb, kv_dim);
                from_f(fc->v + t * kv_dim, dv + (size_t)t * rb, kv_dim);
            }
    } else if (src == il) { /* full layer or ring with room: positions >= n_past are free, write in place */
        for (int g = 0; g < kv_dim / hd; g++)
            for (int t = 0; t < n; t++) {
                from_f(fc->k + t * kv_dim + g * hd, pb_kv_head_row(kv, kv->k[il], il, g, kv->n_past + t), hd);
                from_f(fc->v + t * kv_dim + g * hd, pb_kv_head_row(kv, kv->v[il], il, g, kv->n_past + t), hd);
            }
    }
    attend(&j, pool);
    return PB_OK;
}

/* A [K, N] slice of a 3-D expert tensor [K, N, E] as a weight matrix (file layout, never packed). */
static pb_wmat expert_slice(const pb_gguf_tensor *t, int e, pb_gguf_tensor *view) {
    *view = *t;
    view->ne[2] = 1;
    view->nbytes = pb_row_size(t->type, t->ne[0]) * (size_t)t->ne[1];
    view->data = (const uint8_t *)t->data + view->nbytes * (size_t)e;
    return (pb_wmat){view, view->data, false};
}

/* Gemma 4 MoE block for n tokens: out[t] = sum over the top-k experts of w_e * down_e(gelu(gate_e y) * up_e y),
 * y = RMSNorm(x; pre_ffw_norm_2). Router (HF Gemma4TextRouter): z = rms0(x) * scale * d^-0.5, softmax over all
 * experts, top-k, renormalised, times per_expert_scale. One token at a time (experts differ per token). */
static pb_status moe(pb_forward_ctx *fc, pb_pool *pool, const pb_layer_w *w, int n, float *out) {
    const pb_hparams *hp = &fc->m->hp;
    int64_t d = hp->n_embd, E = hp->n_expert, I = hp->n_ff_exp, K = hp->n_expert_used;
    float inv_sqrt_d = 1.0f / sqrtf((float)d);
    pb_status s;
    for (int t = 0; t < n; t++) {
        const float *x = fc->x + t * d;
        float *z = fc->moe_y, *p = fc->moe_p, *o = out + t * d;
        pb_rmsnorm(z, x, w->router_scale, d, hp->norm_eps);
        pb_vec_scale(z, d, inv_sqrt_d);
        if ((s = linear(fc, pool, &w->gate_inp, z, 1, p))) return s;
        float mx = p[0], sum = 0.0f;
        for (int e = 1; e < E; e++) mx = PB_MAX(mx, p[e]);
        for (int e = 0; e < E; e++) sum += (p[e] = expf(p[e] - mx));
        for (int e = 0; e < E; e++) p[e] /= sum;
        int idx[PB_MAX_EXPERT_USED];
        float wt[PB_MAX_EXPERT_USED], wsum = 0.0f;
        for (int k = 0; k < K; k++) { /* top-k, ties to the lower index as torch.topk */
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool used = false;
                for (int q = 0; q < k; q++) used |= idx[q] == e;
                if (!used && (best < 0 || p[e] > p[best])) best = e;
            }
            idx[k] = best, wt[k] = p[best], wsum += p[best];
        }
        pb_rmsnorm(z, x, w->pre_ffw_norm_2, d, hp->norm_eps);
        memset(o, 0, sizeof(float) * (size_t)d);
        for (int k = 0; k < K; k++) {
            int e = idx[k];
            float we = wt[k] / wsum * (w->expert_scale ? w->expert_scale[e] : 1.0f);
            pb_gguf_tensor v1, v2;
            float *gt = fc->moe_h, *up = fc->moe_h + I, *y = fc->moe_h + 2 * I;
            if (w->exp_gate_up) { /* rows 0..I-1 gate, I..2I-1 up */
                pb_wmat gu = expert_slice(w->exp_gate_up, e, &v1);
                if ((s = linear(fc, pool, &gu, z, 1, gt))) return s;
            } else {
                pb_wmat gm = expert_slice(w->exp_gate, e, &v1), um = expert_slice(w->exp_up, e, &v2);
                if ((s = linear(fc, pool, &gm, z, 1, gt)) || (s = linear(fc, pool, &um, z, 1, up))) return s;
            }
            pb_kernels_geglu(gt, up, I);
            pb_wmat dm = expert_slice(w->exp_down, e, &v1);
            if ((s = linear(fc, pool, &dm, gt, 1, y))) return s;
            for (int64_t i = 0; i < d; i++) o[i] += we * y[i];
        }
    }
    return PB_OK;
}

/* Gemma 4 per-layer input of layer il after the FFN: x += RMSNorm(W_proj (gelu(W_gate x) * pli[il]); post_norm). */
static pb_status ple_block(pb_forward_ctx *fc, pb_pool *pool, const pb_layer_w *w, int il, int n) {
    const pb_hparams *hp = &fc->m->hp;
    int64_t d = hp->n_embd, P = hp->n_embd_per_layer, LP = (int64_t)hp->n_layer * P;
    pb_status s;
    if ((s = linear(fc, pool, &w->inp_gate, fc->x, n, fc->ple_g))) return s; /* [n, P] */
    for (int t = 0; t < n; t++) memcpy(fc->ple_u + t * P, fc->pli + t * LP + il * P, sizeof(float) * (size_t)P);
    pb_kernels_geglu(fc->ple_g, fc->ple_u, (int64_t)n * P);
    if ((s = linear(fc, pool, &w->proj, fc->ple_g, n, fc->o))) return s; /* [n, d] */
    norm_rows(fc->o, fc->o, w->ple_post_norm, n, d, hp->norm_eps);
    pb_vec_add(fc->x, fc->o, n * d);
    return PB_OK;
}

/* Moves the stashed rows of ring layer il (n new positions at kv->n_past..) into their slots; only the last cap rows
 * matter. Nothing to do for a full layer or a ring that had room (written in place). */
static void commit_ring_layer(pb_kv_cache *kv, const pb_forward_ctx *fc, int il, int n) {
    if (fc->swa_slot[il] < 0 || kv->n_past + n <= kv->cap[il]) return;
    const uint8_t *sk = fc->stash + fc->stash_layer * (size_t)fc->swa_slot[il];
    const uint8_t *sv = sk + (size_t)fc->n_batch * kv->row_b[il];
    sk += (size_t)fc->stash_t0 * kv->row_b[il], sv += (size_t)fc->stash_t0 * kv->row_b[il];
    int cap = kv->cap[il];
    for (int t = PB_MAX(0, n - cap); t < n; t++)
        for (int g = 0; g < kv->kvd[il] / kv->hdl[il]; g++) {
            size_t o = (size_t)t * kv->row_b[il] + (size_t)g * kv->head_b[il];
            memcpy(pb_kv_head_row(kv, kv->k[il], il, g, (kv->n_past + t) % cap), sk + o, kv->head_b[il]);
            memcpy(pb_kv_head_row(kv, kv->v[il], il, g, (kv->n_past + t) % cap), sv + o, kv->head_b[il]);
        }
}

/* Batched decode (pb_forward_batch): row t of the n rows is one token of its own sequence, attending to kvs[t] alone:
 * attention() of that row as a one-token call (the scratch rows offset to row t; on a ring layer that wraps, its new
 * K/V row kept in stash row t, where a Gemma 4 KV-shared layer of the same row finds it), the stash committed per row
 * after the last layer (batch_cpu), as pb_forward commits after its last layer. Each row thus does what a one-token
 * pb_forward does. */
static pb_status attention_rows(const pb_model *m, pb_kv_cache *const *kvs, pb_forward_ctx *fc, pb_pool *pool, int il,
                                int n) {
    const pb_hparams *hp = &m->hp;
    int64_t hd = hp->head_dim_l[il], q_dim = (int64_t)hp->n_head * hd, kv_dim = (int64_t)hp->n_head_kv_l[il] * hd;
    float *q = fc->q, *k = fc->k, *v = fc->v, *att = fc->att;
    pb_status s = PB_OK;
    for (int t = 0; t < n && s == PB_OK; t++) {
        pb_kv_cache *kv = kvs[t];
        fc->q = q + t * q_dim, fc->k = k + t * kv_dim, fc->v = v + t * kv_dim, fc->att = att + t * q_dim;
        fc->stash_t0 = t;
        s = attention(m, kv, fc, pool, il, 1);
    }
    fc->stash_t0 = 0;
    fc->q = q, fc->k = k, fc->v = v, fc->att = att;
    return s;
}

static pb_status block(const pb_model *m, pb_kv_cache *kv, pb_kv_cache *const *kvs, pb_forward_ctx *fc, pb_pool *pool,
                       int il, int n) {
    const pb_hparams *hp = &m->hp;
    const pb_layer_w *w = &m->layers[il];
    int hkv = hp->n_head_kv_l[il];
    int64_t d = hp->n_embd, hd = hp->head_dim_l[il];
    int64_t q_dim = (int64_t)hp->n_head * hd, kv_dim = (int64_t)hkv * hd;
    float eps = hp->norm_eps;
    bool own_kv = hp->kv_src[il] == il;
    pb_status s;

    /* --- attention: h = RMSNorm(x; attn_norm); q,k,v = Wq h, Wk h, Wv h (Gemma 4: q only on KV-shared layers; V
     * = the raw K projection on k_eq_v layers) --- */
    const pb_wmat *qkv[] = {&w->wq, &w->wk, &w->wv};
    float *qkv_y[] = {fc->q, fc->k, fc->v}; /* [n, H*hd], [n, Hkv*hd], [n, Hkv*hd] */
    int n_ops = !own_kv ? 1 : w->wv.t ? 3 : 2;
    if ((s = normed_group(fc, pool, w->attn_norm, qkv, qkv_y, n_ops, NULL, n))) return s;
    if (own_kv && !w->wv.t) memcpy(fc->v, fc->k, sizeof(float) * (size_t)(n * kv_dim));
    if (hp->has_qk_norm) { /* Gemma 3/4: per-head RMSNorm of q and k, before RoPE */
        norm_rows(fc->q, fc->q, w->q_norm, n * hp->n_head, hd, eps);
        if (own_kv) norm_rows(fc->k, fc->k, w->k_norm, n * hkv, hd, eps);
    }
    if (own_kv && hp->has_v_norm) norm_rows(fc->v, fc->v, m->ones, n * hkv, hd, eps); /* Gemma 4: weightless */
    bool local = hp->swa_layer[il] != 0;
    const float *cs = local ? fc->cos_l : fc->cos_g, *sn = local ? fc->sin_l : fc->sin_g;
    int64_t half = (local ? hp->hd_swa : hp->hd_full) / 2; /* row stride of the angle tables */
    for (int t = 0; t < n; t++) {                          /* RoPE (NeoX halves) at position n_past + t */
        pb_rope_neox(fc->q + t * q_dim, hp->n_head, (int)hd, cs + t * half, sn + t * half);
        if (own_kv) pb_rope_neox(fc->k + t * kv_dim, hkv, (int)hd, cs + t * half, sn + t * half);
    }
    /* att: [n, H*hd]; batched decode: each row its own sequence */
    if ((s = kvs ? attention_rows(m, kvs, fc, pool, il, n) : attention(m, kv, fc, pool, il, n))) return s;
    if ((s = linear(fc, pool, &w->wo, fc->att, n, fc->o))) return s; /* o: [n, d] */
    if (w->post_attn_norm) norm_rows(fc->o, fc->o, w->post_attn_norm, n, d, eps);
    pb_vec_add(fc->x, fc->o, n * d);

    /* --- MLP: x += [post-norm] W_down (gelu(W_gate h) * W_up h), h = RMSNorm(x; ffn_norm); Gemma 4 MoE layers add
     * the experts' output, each branch with its own post-norm, before the shared post-norm --- */
    if (w->gate_inp.t && (s = moe(fc, pool, w, n, fc->moe_out))) return s; /* reads x before the MLP changes it */
    const pb_wmat *gu[] = {&w->gate, &w->up};
    float *gu_y[] = {fc->gate, fc->up}; /* [n, F]; gate becomes gelu(gate) * up (SIMD, kernels room) */
    if ((s = normed_group(fc, pool, w->ffn_norm, gu, gu_y, 2, pb_kernels_geglu, n))) return s;
    if ((s = linear(fc, pool, &w->down, fc->gate, n, fc->o))) return s; /* [n, d] */
    if (w->gate_inp.t) {
        norm_rows(fc->o, fc->o, w->post_ffw_norm_1, n, d, eps);
        norm_rows(fc->moe_out, fc->moe_out, w->post_ffw_norm_2, n, d, eps);
        pb_vec_add(fc->o, fc->moe_out, n * d);
    }
    if (w->post_ffw_norm) norm_rows(fc->o, fc->o, w->post_ffw_norm, n, d, eps);
    pb_vec_add(fc->x, fc->o, n * d);
    if (w->inp_gate.t && (s = ple_block(fc, pool, w, il, n))) return s;
    if (w->out_scale != 1.0f) pb_vec_scale(fc->x, n * d, w->out_scale); /* Gemma 4 layer_scalar */
    return PB_OK;
}

/* Gemma 4 per-layer inputs of the n tokens (HF get_per_layer_inputs + project_per_layer_inputs):
 * pli[t][l] = (RMSNorm(W_plmp x0[t] * d^-0.5 over each P-chunk; proj_norm) + E_ple[tok][l] * sqrt(P)) * 2^-0.5.
 * x0 is the scaled main embedding (fc->x on entry). Only the n rows of the PLE table are read. */
static pb_status ple_inputs(const pb_model *m, pb_forward_ctx *fc, pb_pool *pool, const int32_t *tokens, int n) {
    const pb_hparams *hp = &m->hp;
    int64_t P = hp->n_embd_per_layer, LP = (int64_t)hp->n_layer * P;
    pb_status s = linear(fc, pool, &m->ple_proj, fc->x, n, fc->pli); /* [n, L*P] */
    if (s) return s;
    float ps = 1.0f / sqrtf((float)hp->n_embd), ts = sqrtf((float)P), r2 = 1.0f / sqrtf(2.0f);
    for (int t = 0; t < n; t++) {
        float *c = fc->pli + t * LP;
        pb_vec_scale(c, LP, ps);
        norm_rows(c, c, m->ple_proj_norm, hp->n_layer, P, hp->norm_eps);
        row_to_float(&m->ple_tok, tokens[t], fc->ple_row);
        for (int64_t i = 0; i < LP; i++) c[i] = (c[i] + fc->ple_row[i] * ts) * r2;
    }
    return PB_OK;
}

// --- the whole pass ---------------------------------------------------------------------------------------

/* Moves the stashed rows of ring layers into their slots (only the last cap rows matter). */
static void commit_rings(pb_kv_cache *kv, const pb_forward_ctx *fc, int n) {
    for (int il = 0; il < kv->n_layer; il++) commit_ring_layer(kv, fc, il, n);
}

static pb_status check_args(const pb_model *m, pb_kv_cache *kv, pb_forward_ctx *fc, const int32_t *tokens, int n) {
    if (fc->m != m) return pb_error(PB_ERR_INVALID_ARG, "forward: scratch was made for another model");
    const pb_hparams *hp = &m->hp;
    if (kv->n_layer != hp->n_layer || kv->kv_dim != hp->n_head_kv * hp->head_dim)
        return pb_error(PB_ERR_INVALID_ARG, "forward: KV cache was made for another model");
    if (kv->row_bytes > fc->stash_row)
        return pb_error(PB_ERR_INVALID_ARG, "forward: scratch was sized for a narrower KV type");
    if (n < 1 || n > fc->n_batch)
        return pb_error(PB_ERR_INVALID_ARG, "forward: %d tokens (batch holds 1..%d)", n, fc->n_batch);
    if (kv->n_past + n > kv->n_ctx)
        return pb_error(PB_ERR_CONTEXT_FULL, "forward: context full (%d + %d tokens > n_ctx %d)", kv->n_past, n,
                        kv->n_ctx);
    if (kv->gpu && fc->exact) /* every GPU entry (forward, forward_top, forward_batch) comes through here */
        return pb_error(PB_ERR_UNSUPPORTED, "forward: exact mode (float32 on dequantized rows) runs on the CPU "
                                            "only; open the model with gpu = 0");
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab)
            return pb_error(PB_ERR_INVALID_ARG, "forward: token %d at index %d is outside the vocabulary (0..%d)",
                            tokens[t], t, hp->n_vocab - 1);
    return PB_OK;
}

bool pb_forward_has_top(const pb_kv_cache *kv) { return kv && kv->gpu && pb_gpu_has_top(kv); }

pb_status pb_forward_top(const pb_model *m, pb_kv_cache *kv, pb_forward_ctx *fc, const int32_t *tokens, int n,
                         int32_t *top) {
    if (!m || !kv || !fc || !tokens || !top) return pb_error(PB_ERR_INVALID_ARG, "forward: NULL argument");
    if (!pb_forward_has_top(kv))
        return pb_error(PB_ERR_UNSUPPORTED, "forward: the argmax alone is computed only by a GPU cache");
    pb_status s = check_args(m, kv, fc, tokens, n);
    if (s) return s;
    if ((s = pb_gpu_forward_top(kv, tokens, n, top, fc->hidden))) return s;
    /* what the host sees of the step: the final hidden state, and the device argmax, -1 only when no logit exceeds
     * -inf (all NaN) */
    if ((s = check_finite(fc->hidden, n, m->hp.n_embd, kv->n_past, "hidden state"))) return s;
    if (*top < 0) return no_logit(kv->n_past + n - 1);
    kv->n_past += n;
    fc->n_last = n;
    return PB_OK;
}

pb_status pb_forward_pull_logits(pb_kv_cache *kv, float *logits) {
    if (!kv || !logits) return pb_error(PB_ERR_INVALID_ARG, "forward: NULL argument");
    if (!kv->gpu) return pb_error(PB_ERR_UNSUPPORTED, "forward: no logits wait on a GPU for a CPU cache");
    return pb_gpu_pull_logits(kv, logits);
}

bool pb_forward_has_logits_top(const pb_kv_cache *kv) { return kv && kv->gpu && pb_gpu_has_logits_top(kv); }

pb_status pb_forward_logits_top(pb_kv_cache *kv, int m, const int32_t *gather, int ng, int32_t *ids, float *vals,
                                float *gvals) {
    if (!kv || !ids || !vals || (ng > 0 && (!gather || !gvals)))
        return pb_error(PB_ERR_INVALID_ARG, "forward: NULL argument");
    if (!pb_forward_has_logits_top(kv))
        return pb_error(PB_ERR_UNSUPPORTED, "forward: the top logits alone are selected only by a GPU cache");
    return pb_gpu_logits_top(kv, m, gather, ng, ids, vals, gvals);
}

pb_status pb_forward(const pb_model *m, pb_kv_cache *kv, pb_forward_ctx *fc, pb_pool *pool, const int32_t *tokens,
                     int n, float *logits, bool all_logits, const volatile int *cancel) {
    if (!m || !kv || !fc || !tokens || !logits) return pb_error(PB_ERR_INVALID_ARG, "forward: NULL argument");
    pb_status cs = check_args(m, kv, fc, tokens, n);
    if (cs) return cs;
    const pb_hparams *hp = &m->hp;
    if (kv->gpu) { /* the model runs on the GPU (model/gpu.c): the same pass there (a prompt in chunks at once) */
        pb_status s = pb_gpu_forward(kv, tokens, n, logits, all_logits, fc->hidden);
        if (s) return s;
        int rows = all_logits ? n : 1;
        if ((s = check_finite(logits, rows, hp->n_vocab, kv->n_past + n - rows, "logits"))) return s;
        kv->n_past += n;
        fc->n_last = n;
        return PB_OK;
    }
    int64_t d = hp->n_embd, half_g = hp->hd_full / 2, half_l = hp->hd_swa / 2;

    /* x = E[tok] * sqrt(d) */
    for (int t = 0; t < n; t++) {
        row_to_float(&m->tok_embd, tokens[t], fc->x + t * d);
        pb_vec_scale(fc->x + t * d, d, m->embd_scale);
    }
    for (int t = 0; t < n; t++) { /* RoPE angles of each position, for global and local layers */
        pb_rope_angles(fc->cos_g + t * half_g, fc->sin_g + t * half_g, m->rope_inv_global, (int)half_g, kv->n_past + t);
        pb_rope_angles(fc->cos_l + t * half_l, fc->sin_l + t * half_l, m->rope_inv_local, (int)half_l, kv->n_past + t);
    }
    if (hp->n_embd_per_layer > 0) {
        pb_status s = ple_inputs(m, fc, pool, tokens, n);
        if (s) return s;
    }

    for (int il = 0; il < hp->n_layer; il++) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
            return pb_error(PB_ERR_CANCELLED, "forward: cancelled at layer %d", il);
        pb_status s = block(m, kv, NULL, fc, pool, il, n);
        if (s) return s;
    }

    /* logits = E . RMSNorm(x; output_norm) [, 30 tanh(./30) on Gemma 2], checked before the soft-cap (which hid a NaN)
     * and before the cache takes the new positions */
    norm_rows(fc->hidden, fc->x, m->output_norm, n, d, hp->norm_eps);
    fc->n_last = n;
    int first = all_logits ? 0 : n - 1, rows = n - first;
    pb_status s = linear(fc, pool, &m->output, fc->hidden + first * d, rows, logits);
    if (s || (s = check_finite(logits, rows, hp->n_vocab, kv->n_past + first, "logits"))) return s;
    if (hp->final_softcap > 0.0f) pb_kernels_softcap(logits, (int64_t)rows * hp->n_vocab, hp->final_softcap);
    commit_rings(kv, fc, n);
    kv->n_past += n;
    pb_kv_grown(kv);
    return PB_OK;
}

/* The CPU's batched decode step: pb_forward's pass over n rows, the matrices read once for all of them, with each
 * row's RoPE angles at its own cache's position and its attention over its own cache (attention_rows); Gemma 4's
 * per-layer inputs and experts are per token already; its KV-shared layers read their producer's new row from the
 * row's own stash row, committed after the last layer. */
static pb_status batch_cpu(const pb_model *m, pb_kv_cache *const *kvs, pb_forward_ctx *fc, pb_pool *pool,
                           const int32_t *tokens, int n, float *logits) {
    const pb_hparams *hp = &m->hp;
    int64_t d = hp->n_embd, half_g = hp->hd_full / 2, half_l = hp->hd_swa / 2;
    for (int t = 0; t < n; t++) {
        row_to_float(&m->tok_embd, tokens[t], fc->x + t * d);
        pb_vec_scale(fc->x + t * d, d, m->embd_scale);
        int p = kvs[t]->n_past;
        pb_rope_angles(fc->cos_g + t * half_g, fc->sin_g + t * half_g, m->rope_inv_global, (int)half_g, p);
        pb_rope_angles(fc->cos_l + t * half_l, fc->sin_l + t * half_l, m->rope_inv_local, (int)half_l, p);
    }
    if (hp->n_embd_per_layer > 0) {
        pb_status s = ple_inputs(m, fc, pool, tokens, n);
        if (s) return s;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        pb_status s = block(m, kvs[0], kvs, fc, pool, il, n);
        if (s) return s;
    }
    norm_rows(fc->hidden, fc->x, m->output_norm, n, d, hp->norm_eps);
    fc->n_last = n;
    pb_status s = linear(fc, pool, &m->output, fc->hidden, n, logits);
    for (int t = 0; t < n && s == PB_OK; t++) /* as pb_forward's, each row at its own position */
        s = check_finite(logits + (size_t)t * hp->n_vocab, 1, hp->n_vocab, kvs[t]->n_past, "logits");
    if (s) return s;
    if (hp->final_softcap > 0.0f) pb_kernels_softcap(logits, (int64_t)n * hp->n_vocab, hp->final_softcap);
    for (int t = 0; t < n; t++) {
        fc->stash_t0 = t;
        commit_rings(kvs[t], fc, 1);
    }
    fc->stash_t0 = 0;
    for (int t = 0; t < n; t++) {
        kvs[t]->n_past++;
        pb_kv_grown(kvs[t]);
    }
    return PB_OK;
}

/* Batched decode (model.h): everything checked up front, then on the CPU batch_cpu (a single row: pb_forward), on the
 * GPU pb_gpu_forward_batch. fc->hidden / pb_forward_hidden is not defined after a batch on the GPU. */
pb_status pb_forward_batch(const pb_model *m, pb_kv_cache *const *kvs, pb_forward_ctx *fc, pb_pool *pool,
                           const int32_t *tokens, int n, float *logits, int32_t *top) {
    if (!m || !kvs || !fc || !tokens) return pb_error(PB_ERR_INVALID_ARG, "forward_batch: NULL argument");
    if (n < 1 || n > PB_FORWARD_BATCH_MAX || n > fc->n_batch)
        return pb_error(PB_ERR_INVALID_ARG, "forward_batch: %d sequences (1..%d, scratch holds %d)", n,
                        (int)PB_FORWARD_BATCH_MAX, fc->n_batch);
    for (int i = 0; i < n; i++)
        if (!kvs[i]) return pb_error(PB_ERR_INVALID_ARG, "forward_batch: cache %d is NULL", i);
    bool gpu = kvs[0]->gpu != NULL;
    for (int i = 0; i < n; i++) {
        if ((kvs[i]->gpu != NULL) != gpu)
            return pb_error(PB_ERR_INVALID_ARG, "forward_batch: cache %d is on another backend than cache 0", i);
        for (int j = 0; j < i; j++)
            if (kvs[j] == kvs[i])
                return pb_error(PB_ERR_INVALID_ARG, "forward_batch: caches %d and %d are the same", j, i);
        pb_status s = check_args(m, kvs[i], fc, tokens + i, 1);
        if (s == PB_ERR_CONTEXT_FULL)
            return pb_error(PB_ERR_CONTEXT_FULL, "forward_batch: cache %d is full (n_past %d, n_ctx %d)", i,
                            kvs[i]->n_past, kvs[i]->n_ctx);
        if (s) return s;
    }
    if (!gpu) {
        if (top) return pb_error(PB_ERR_UNSUPPORTED, "forward_batch: the argmax alone is computed only by a GPU cache");
        if (!logits) return pb_error(PB_ERR_INVALID_ARG, "forward_batch: NULL logits");
        const pb_hparams *hp = &m->hp;
        if (n == 1) { /* a single row: pb_forward itself */
            for (int i = 0; i < n; i++) {
                pb_status s =
                    pb_forward(m, kvs[i], fc, pool, tokens + i, 1, logits + (size_t)i * hp->n_vocab, false, NULL);
                if (s) return s;
            }
            return PB_OK;
        }
        return batch_cpu(m, kvs, fc, pool, tokens, n, logits);
    }
    pb_status s = pb_gpu_forward_batch(kvs, tokens, n, logits, top);
    /* as pb_forward_top / pb_forward check theirs (logits left on the device: not checked) */
    for (int i = 0; i < n && s == PB_OK; i++) {
        if (top && top[i] < 0)
            s = no_logit(kvs[i]->n_past);
        else if (!top && logits)
            s = check_finite(logits + (size_t)i * m->hp.n_vocab, 1, m->hp.n_vocab, kvs[i]->n_past, "logits");
    }
    if (s) return s;
    for (int i = 0; i < n; i++) kvs[i]->n_past++;
    fc->n_last = 1;
    return PB_OK;
}
