// backend.cu -- the CUDA backend: weights uploaded once in their GGUF formats, an F16 KV cache in GPU memory
// (sliding-window layers as rings, the host cache's layout), and a token step of fused kernels captured once
// as a CUDA graph: embed + norm, per layer q/k/v mat-vec, q/k norm + RoPE + KV write, split-key attention,
// merge, output mat-vec, post-norm + residual + next norm, gate/up mat-vec + GeGLU, down mat-vec, ..., the
// output mat-vec with the final soft-cap. Only logits come back to the host. See docs/CUDA.md.
#include "cuda/pb_cuda.h"
#include "cuda/weights.cuh"

#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    ST_OK = 0,
    ST_INVALID = 1,
    ST_UNSUPPORTED = 4,
    ST_NOMEM = 5,
    ST_CANCELLED = 8,
    ST_MEMLIMIT = 10,
    ST_INTERNAL = 11
};

#define MAX_LAYERS 256
#define MAX_REP    8  // query heads per kv head the attention kernel holds
#define MAX_EPL    8  // head_dim / 32 values per lane (head_dim <= 256)
#define WIDE_EPL   16 // Gemma 4's wide attention form: head_dim <= 512 (E2B's full layers) ...
#define WIDE_REP   4  // ... with 4 query heads a block (a kv head's heads over gridDim.z blocks)
#define MAX_SPLITS 64 // key splits of one attention row
#define AKV_DEFAULT 8 // key rows a k_attn_cl warp keeps in flight through shared memory (pb_cu_model.akv)

namespace cg = cooperative_groups;
#define MV_WARPS   4  // warps per mat-vec block (32 x MV_WARPS / sw rows a block)

static int fail(char *err, size_t cap, int st, const char *fmt, ...) {
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return st;
}

#define CU(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            return fail(err, cap, e_ == cudaErrorMemoryAllocation ? ST_NOMEM : ST_INTERNAL, "cuda: %s: %s", #call,     \
                        cudaGetErrorString(e_));                                                                       \
    } while (0)

// ---- device matrices ---------------------------------------------------------------------------------------

struct dmat {
    int type;         // device type (T_SCALAR added for F* rows not a multiple of 8)
    int K, N, nunits; // nunits: lane units a row on the float path (unit_dot)
    int nunits8;      // lane units a row on the int8 path (unit_dot8: wider for Q4_K / Q6_K)
    int sw;           // lanes a row in its mat-vec (4 .. 32: a warp takes 32 / sw rows; 64: a row over 2 warps;
                      // set_ahead)
    int ahead;        // rows of this matrix's mat-vec resident at once (blocks an SM x SMs x rows a block; 0: unknown)
    size_t qrow, mrow;
    uint8_t *q, *m;
};

struct pb_cu_layer_d {
    dmat wq, wk, wv, wo, gate, up, down; // Gemma 4: wk / wv with N = 0 where the layer has none (KV-shared, k_eq_v)
    float *attn_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm, *q_norm, *k_norm;
    int swa;
    // Gemma 4 (pb_cu_model.g4): head dim, kv heads, the layer whose cache it reads, the PLE block (N = 0: none) and
    // its post norm, the layer output scale
    int hd, hkv, kv_src;
    dmat inp_gate, proj;
    float *ple_post_norm;
    float out_scale;
};

// Device arrays of a model: per layer up to 2 x 9 matrix parts (q, m) and 7 norms; the embeddings, output, PLE and
// RoPE tables besides.
#define MEM_MAX (25 * MAX_LAYERS + 16)

struct pb_cu_model {
    pb_cu_desc hp; // scalars only (pointers inside are the host's)
    pb_cu_layer_d layers[MAX_LAYERS];
    dmat tok_embd, output;
    float *output_norm, *rope_g, *rope_l;
    // Gemma 4 (enqueue_step_g4): g4 set, the PLE token table (GGUF type, one row read a step) and model projection
    // (N = 0: no PLE), the projection's chunk norm [P]
    int g4;
    dmat ple_tok, ple_proj;
    float *ple_proj_norm;
    // Quantized weights dotted with int8 activations (dp4a), as the CPU's default path, when int8 (the model has
    // quantized matrices and PB_CUDA_FLOAT=1 was not set at open: that keeps the float32 dots on dequantized
    // weights, the CPU's exact mode). need0 / needK: some matrix takes q8_0 / q8_K activations.
    int int8, need0, needK;
    // Programmatic dependent launch (PB_CUDA_PDL=1 at open): each kernel of the step lets the next one start
    // before it ends; the next waits (griddepcontrol.wait) before touching activations, and a mat-vec meanwhile
    // prefetches its weight rows into L2. Off by default until measured (docs/CUDA.md).
    int pdl;
    // Tuning switches read at open, for A/B runs on the device: PB_CUDA_SW=4|8|16|32|64 (lanes a row in every
    // mat-vec; default: chosen per matrix), PB_CUDA_PF=1|2 (L2 prefetch of each warp's weight rows before it waits
    // for its input; 2: also the row one wave ahead; default 0: none, measured faster with the wide units in run 9),
    // PB_CUDA_FUSE=1 (the residual add + norm after the o and down mat-vecs in the mat-vec's last block instead of
    // its own k_add_norm launch: measured 8% slower in run 9, the one block's tail longer than the launch it saves),
    // PB_CUDA_WIDE=0 (no rows over several warps: see choose_sw).
    int sw_force, pf, fuse, wide;
    // PB_CUDA_PRO=0: the mat-vecs load their lanes' first weight units after waiting for their input (pdl_wait), as
    // before 2026-12-05; default on: before it (row_part_w; the same bits either way; tg128 +5% on an H100)
    int pro;
    // PB_CUDA_MQ=0: the attention merge leaves its output's int8 forms to a k_quant; PB_CUDA_GQ=0: the GeGLU
    // mat-vec's groups likewise (A/B and fault isolation runs)
    int no_mq, no_gq;
    // PB_CUDA_MMA=0: the prompt path's and the batched step's mat-mats on dp4a only (mma.cuh off); PB_CUDA_MMA_MIN=n:
    // tensor cores only for chunks of at least n tokens (default 8: a batched step of 4 rows measured 727 tok/s with
    // them, 1,179 without; 8 rows 1,351 / 1,334; 32 rows 3,011 / 2,208); PB_CUDA_MMA_KS=1|4: every launch's split of
    // the lane slots over a block's warps (default: mq_ks's choice)
    int mma, mma_min, mma_ks;
    int normt; // PB_CUDA_NORMT=128..1024: threads of the one-block norm kernels (0: 1024 where d >= 1024)
    // Diagnostics only (wrong logits; timing runs on the device, docs/CUDA.md "Where a token step's time goes"):
    // PB_CUDA_SKIP=mask leaves launches out of Gemma 1-3's token step (1 the add + norms, 2 the attention, 4 q/k/v,
    // 8 o, 16 gate+up, 32 down, 64 the output mat-vec), PB_CUDA_EMPTY=1 launches an empty kernel of the same grid
    // in place of each of the step's kernels (the floor of its dependent launches).
    int skip, empty;
    // PB_CUDA_ADIAG=mask (k_attn of Gemma 1-3: 1 returns after its wait, 2 reads no keys, 4 no merge of the splits;
    // A/B of the 2026-12-05 changes, the same bits: 32 no key rows before the wait, 64 pos's row from the cache, 128
    // no L1 prefetch of k / v): diagnostics and A/B runs
    int adiag;
    int akv; // key rows a k_attn_cl warp keeps in flight through shared memory (cp.async; PB_CUDA_AKV=0|4|8, 0: the
             // two register rows of before, A/B; the same bits either way)
    int pf_spb;   // PB_CUDA_PF_SPB: key splits a prompt-path attention block takes in turn (1-16; default 4)
    int arep_max; // PB_CUDA_AREP=8: Gemma 1-3's attention (token step and prompt path) sized for 8 query heads (A/B)
    int n_sm;     // multiprocessors of device 0
    int smem_optin; // the most dynamic shared memory a block may opt into (k_pf_mma's attribute, set to this alone)
    // The batched decode step's scratch (batch.cuh: PB_CU_BATCH_MAX rows, made at the first batch of >= 2 rows) and
    // the lock that gives it to one pb_cu_forward_batch call at a time.
    struct bt_bufs *bt;
    int bt_failed; // the scratch did not fit: batches run row by row
    long bt_steps; // batched steps run (pb_cu_batch_steps, for the tests), under bt_mu
    pthread_mutex_t bt_mu;
    void *mem[MEM_MAX]; // every device array of the weights (model_alloc refuses past MEM_MAX)
    int n_mem;
    size_t bytes;
    char name[256];
};

static const char *type_name(int t) {
    switch (t) {
    case T_F32: return "F32";
    case T_F16: return "F16";
    case T_BF16: return "BF16";
    case T_Q4_0: return "Q4_0";
    case T_Q4_1: return "Q4_1";
    case T_Q5_0: return "Q5_0";
    case T_Q5_1: return "Q5_1";
    case T_Q8_0: return "Q8_0";
    case T_Q4_K: return "Q4_K";
    case T_Q5_K: return "Q5_K";
    case T_Q6_K: return "Q6_K";
    }
    return NULL;
}

// File bytes of one block of GGUF type t (values per block in *blk).
static size_t file_block(int t, int *blk) {
    switch (t) {
    case T_F32: *blk = 1; return 4;
    case T_F16:
    case T_BF16: *blk = 1; return 2;
    case T_Q4_0: *blk = 32; return 18;
    case T_Q4_1: *blk = 32; return 20;
    case T_Q5_0: *blk = 32; return 22;
    case T_Q5_1: *blk = 32; return 24;
    case T_Q8_0: *blk = 32; return 34;
    case T_Q4_K: *blk = 256; return 144;
    case T_Q5_K: *blk = 256; return 176;
    case T_Q6_K: *blk = 256; return 210;
    }
    *blk = 0;
    return 0;
}

static float h2f_host(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Splits one file block into its device q and m parts (see weights.cuh).
static void split_block(int t, const uint8_t *src, uint8_t *q, uint8_t *m) {
    uint16_t h16;
    float f;
    switch (t) {
    case T_Q4_0:
    case T_Q8_0:
        memcpy(&h16, src, 2);
        f = h2f_host(h16);
        memcpy(m, &f, 4);
        memcpy(q, src + 2, t == T_Q4_0 ? 16 : 32);
        return;
    case T_Q4_1:
        for (int i = 0; i < 2; i++) {
            memcpy(&h16, src + 2 * i, 2);
            f = h2f_host(h16);
            memcpy(m + 4 * i, &f, 4);
        }
        memcpy(q, src + 4, 16);
        return;
    case T_Q5_0:
        memcpy(&h16, src, 2);
        f = h2f_host(h16);
        memcpy(m, &f, 4);
        memcpy(m + 4, src + 2, 4);
        memcpy(q, src + 6, 16);
        return;
    case T_Q5_1:
        for (int i = 0; i < 2; i++) {
            memcpy(&h16, src + 2 * i, 2);
            f = h2f_host(h16);
            memcpy(m + 4 * i, &f, 4);
        }
        memcpy(m + 8, src + 4, 4);
        memcpy(q, src + 8, 16);
        return;
    case T_Q6_K:
        memcpy(q, src, 192);
        memcpy(m, src + 192, 16);
        memcpy(&h16, src + 208, 2);
        f = h2f_host(h16);
        memcpy(m + 16, &f, 4);
        return;
    }
}

static int model_alloc(pb_cu_model *g, void **p, size_t n, char *err, size_t cap) {
    *p = NULL;
    if (n == 0) return ST_OK;
    if (g->n_mem >= MEM_MAX)
        return fail(err, cap, ST_INTERNAL, "cuda: more than %d device arrays for one model", (int)MEM_MAX);
    CU(cudaMalloc(p, n));
    g->mem[g->n_mem++] = *p;
    g->bytes += n;
    return ST_OK;
}

static int upload_floats(pb_cu_model *g, float **dst, const float *src, size_t n, char *err, size_t cap) {
    *dst = NULL;
    if (!src) return ST_OK;
    int st = model_alloc(g, (void **)dst, n * sizeof(float), err, cap);
    if (st) return st;
    CU(cudaMemcpy(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
    return ST_OK;
}

static int upload_mat(pb_cu_model *g, dmat *d, const pb_cu_mat *s, const char *what, char *err, size_t cap) {
    memset(d, 0, sizeof *d);
    if (!s->data) return ST_OK; // absent (Gemma 4: K/V of a KV-shared layer, V of a k_eq_v layer, no PLE): N = 0
    if (!type_name(s->type))
        return fail(err, cap, ST_UNSUPPORTED,
                    "cuda: %s has tensor type id %d, which the GPU backend does not support "
                    "(F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K)",
                    what, s->type);
    int fblk;
    size_t fbytes = file_block(s->type, &fblk);
    if (s->K % fblk) return fail(err, cap, ST_UNSUPPORTED, "cuda: %s row of %lld values", what, (long long)s->K);
    int t = s->type;
    if ((t == T_F32 || t == T_F16 || t == T_BF16) && s->K % 8) t += T_SCALAR;
    wlayout L = layout_of(t);
    int64_t nb = s->K / L.blk;
    d->type = t;
    d->K = (int)s->K;
    d->N = (int)s->N;
    d->nunits = (int)(nb * L.units);
    d->nunits8 = (int)(nb * units8_of(t));
    d->qrow = (size_t)nb * L.qb;
    d->mrow = (size_t)nb * L.mb;
    int st;
    if ((st = model_alloc(g, (void **)&d->q, d->qrow * (size_t)s->N, err, cap))) return st;
    if ((st = model_alloc(g, (void **)&d->m, d->mrow * (size_t)s->N, err, cap))) return st;
    const uint8_t *src = (const uint8_t *)s->data;
    size_t frow = (size_t)(s->K / fblk) * fbytes;
    if (L.mb == 0) { // the file layout as is
        CU(cudaMemcpy(d->q, src, frow * (size_t)s->N, cudaMemcpyHostToDevice));
        return ST_OK;
    }
    // split rows in chunks through a host staging buffer
    const int64_t rows_per = 4096;
    uint8_t *hq = (uint8_t *)malloc(d->qrow * rows_per), *hm = (uint8_t *)malloc(d->mrow * rows_per);
    if (!hq || !hm) {
        free(hq);
        free(hm);
        return fail(err, cap, ST_NOMEM, "cuda: no host memory to stage %s", what);
    }
    int fblocks = (int)(s->K / fblk);
    for (int64_t r0 = 0; r0 < s->N; r0 += rows_per) {
        int64_t nr = s->N - r0 < rows_per ? s->N - r0 : rows_per;
        for (int64_t r = 0; r < nr; r++)
            for (int b = 0; b < fblocks; b++)
                split_block(s->type, src + (size_t)(r0 + r) * frow + (size_t)b * fbytes,
                            hq + (size_t)r * d->qrow + (size_t)b * L.qb, hm + (size_t)r * d->mrow + (size_t)b * L.mb);
        cudaError_t e1 = cudaMemcpy(d->q + (size_t)r0 * d->qrow, hq, d->qrow * (size_t)nr, cudaMemcpyHostToDevice);
        cudaError_t e2 = cudaMemcpy(d->m + (size_t)r0 * d->mrow, hm, d->mrow * (size_t)nr, cudaMemcpyHostToDevice);
        if (e1 != cudaSuccess || e2 != cudaSuccess) {
            free(hq);
            free(hm);
            return fail(err, cap, ST_INTERNAL, "cuda: upload of %s: %s", what,
                        cudaGetErrorString(e1 != cudaSuccess ? e1 : e2));
        }
    }
    free(hq);
    free(hm);
    return ST_OK;
}

static size_t device_bytes(const pb_cu_mat *s) {
    if (!s->data) return 0;
    int fblk;
    size_t fb = file_block(s->type, &fblk);
    if (!fb) return 0;
    return (size_t)(s->K / fblk) * (fb + 4) * (size_t)s->N; /* split layouts may add up to 4 bytes a block */
}

extern "C" int pb_cu_available(char *why, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why && cap)
            snprintf(why, cap, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    return 1;
}

static void bt_free(struct bt_bufs *b);

extern "C" void pb_cu_model_free(pb_cu_model *g) {
    if (!g) return;
    bt_free(g->bt);
    pthread_mutex_destroy(&g->bt_mu);
    for (int i = 0; i < g->n_mem; i++) cudaFree(g->mem[i]);
    free(g);
}

#define MV_MATS (9 * MAX_LAYERS + 2)

// Every matrix a mat-vec of the step reads (absent ones, N = 0, left out): the output, each layer's q, k, v, o, gate,
// up, down and (Gemma 4 PLE) inp_gate and proj, the PLE model projection; gg[i]: read by the GeGLU kernel (gate, up).
static int mv_mats(pb_cu_model *g, dmat **all, bool *gg) {
    int na = 0;
    gg[na] = false, all[na++] = &g->output; /* tied: a copy of tok_embd's description (k_embed ignores ahead) */
    for (int il = 0; il < g->hp.n_layer; il++) {
        pb_cu_layer_d *t = &g->layers[il];
        dmat *ms[] = {&t->wq, &t->wk, &t->wv, &t->wo, &t->gate, &t->up, &t->down, &t->inp_gate, &t->proj};
        for (int i = 0; i < 9; i++)
            if (ms[i]->N > 0) gg[na] = i == 4 || i == 5, all[na++] = ms[i];
    }
    if (g->ple_proj.N > 0) gg[na] = false, all[na++] = &g->ple_proj;
    return na;
}

// Which activation formats the matrices need and whether the int8 path runs (see pb_cu_model.int8).
static void choose_path(pb_cu_model *g) {
    const char *fl = getenv("PB_CUDA_FLOAT");
    dmat *all[MV_MATS];
    bool gg[MV_MATS];
    const int na = mv_mats(g, all, gg);
    for (int i = 0; i < na; i++) {
        const int t = all[i]->type;
        if (t == T_Q4_0 || t == T_Q4_1 || t == T_Q5_0 || t == T_Q5_1 || t == T_Q8_0) g->need0 = 1;
        if (t == T_Q4_K || t == T_Q5_K || t == T_Q6_K) g->needK = 1;
    }
    g->int8 = (g->need0 || g->needK) && !(fl && atoi(fl) == 1);
}

static void set_ahead(pb_cu_model *g);

// Gemma 4's geometry against what the step takes: each layer's head dim even and <= 32 x WIDE_EPL (the wide
// attention form past 32 x MAX_EPL), at most MAX_REP query heads a kv head, a KV-shared layer reading an earlier
// layer of its own kind with its head dim and kv heads.
static int check_g4(const pb_cu_desc *d, char *err, size_t cap) {
    for (int il = 0; il < d->n_layer; il++) {
        const pb_cu_layer *L = &d->layers[il];
        if (L->head_dim < 2 || L->head_dim > 32 * WIDE_EPL || L->head_dim % 2)
            return fail(err, cap, ST_UNSUPPORTED,
                        "cuda: layer %d head_dim %d (the GPU attention takes even sizes up "
                        "to %d)",
                        il, L->head_dim, 32 * WIDE_EPL);
        if (L->n_head_kv < 1 || d->n_head % L->n_head_kv || d->n_head / L->n_head_kv > MAX_REP)
            return fail(err, cap, ST_UNSUPPORTED,
                        "cuda: layer %d: %d query heads over %d kv heads (at most %d a kv head)", il, d->n_head,
                        L->n_head_kv, MAX_REP);
        const int src = L->kv_src;
        if (src < 0 || src > il ||
            (src < il && (d->layers[src].head_dim != L->head_dim || d->layers[src].n_head_kv != L->n_head_kv ||
                          d->layers[src].swa != L->swa || d->layers[src].kv_src != src)))
            return fail(err, cap, ST_UNSUPPORTED, "cuda: layer %d reads the KV cache of layer %d, of another shape", il,
                        src);
        if (src == il && !L->wk.data)
            return fail(err, cap, ST_UNSUPPORTED, "cuda: layer %d computes K/V but has no attn_k", il);
        if (d->n_embd_per_layer > 0 && (!L->inp_gate.data || !L->proj.data || !L->ple_post_norm))
            return fail(err, cap, ST_UNSUPPORTED, "cuda: layer %d lacks its per-layer-input block", il);
    }
    if (d->n_embd_per_layer > 0 && (!d->ple_tok.data || !d->ple_proj.data || !d->ple_proj_norm))
        return fail(err, cap, ST_UNSUPPORTED, "cuda: per-layer inputs without their token table or projection");
    return ST_OK;
}

// Device bytes of Gemma 4's arrays besides the seven matrices a layer (PLE matrices and norms, the token table).
static size_t g4_bytes(const pb_cu_desc *d) {
    if (!d->gemma4) return 0;
    size_t n = device_bytes(&d->ple_tok) + device_bytes(&d->ple_proj) + (size_t)d->n_embd_per_layer * 4;
    for (int il = 0; il < d->n_layer; il++) {
        const pb_cu_layer *L = &d->layers[il];
        n += device_bytes(&L->inp_gate) + device_bytes(&L->proj) + (size_t)d->n_embd * 4 * 5 +
             (size_t)L->head_dim * 4 * 2;
    }
    return n + (size_t)(d->hd_full + d->hd_swa) * 2;
}

// Gemma 4's per-layer arrays of layer il (geometry, PLE block) into t.
static int upload_g4_layer(pb_cu_model *g, const pb_cu_layer *s, pb_cu_layer_d *t, int il, char *err, size_t cap) {
    char what[64];
    int st;
    t->hd = s->head_dim, t->hkv = s->n_head_kv, t->kv_src = s->kv_src, t->out_scale = s->out_scale;
    snprintf(what, sizeof what, "blk.%d.inp_gate", il);
    if ((st = upload_mat(g, &t->inp_gate, &s->inp_gate, what, err, cap))) return st;
    snprintf(what, sizeof what, "blk.%d.proj", il);
    if ((st = upload_mat(g, &t->proj, &s->proj, what, err, cap))) return st;
    return upload_floats(g, &t->ple_post_norm, s->ple_post_norm, (size_t)g->hp.n_embd, err, cap);
}

// Gemma 4's model-wide arrays: the PLE token table and projection, the projection's norm.
static int upload_g4_model(pb_cu_model *g, const pb_cu_desc *d, char *err, size_t cap) {
    int st;
    g->g4 = 1;
    if ((st = upload_mat(g, &g->ple_tok, &d->ple_tok, "per_layer_token_embd", err, cap))) return st;
    if ((st = upload_mat(g, &g->ple_proj, &d->ple_proj, "per_layer_model_proj", err, cap))) return st;
    return upload_floats(g, &g->ple_proj_norm, d->ple_proj_norm, (size_t)d->n_embd_per_layer, err, cap);
}

extern "C" int pb_cu_model_open(const pb_cu_desc *d, pb_cu_model **out, char *err, size_t cap) {
    *out = NULL;
    if (!pb_cu_available(err, cap)) return ST_UNSUPPORTED;
    if (d->n_layer > MAX_LAYERS)
        return fail(err, cap, ST_UNSUPPORTED, "cuda: %d layers (at most %d)", d->n_layer, MAX_LAYERS);
    if (d->gemma4) {
        // PB_CUDA_GEMMA4=0 keeps Gemma 4 on the CPU (A/B, fault isolation); its parity runs passed on 2026-12-05
        const char *g4on = getenv("PB_CUDA_GEMMA4");
        if (g4on && atoi(g4on) == 0)
            return fail(err, cap, ST_UNSUPPORTED, "cuda: Gemma 4 on the GPU is turned off (PB_CUDA_GEMMA4=0)");
        const int st0 = check_g4(d, err, cap);
        if (st0) return st0;
    } else if (d->head_dim > 32 * MAX_EPL || d->head_dim % 2)
        return fail(err, cap, ST_UNSUPPORTED, "cuda: head_dim %d (the GPU attention takes even sizes up to %d)",
                    d->head_dim, 32 * MAX_EPL);
    if (d->n_head % d->n_head_kv || d->n_head / d->n_head_kv > MAX_REP)
        return fail(err, cap, ST_UNSUPPORTED, "cuda: %d query heads per kv head (at most %d)", d->n_head / d->n_head_kv,
                    MAX_REP);
    // admission: every matrix's device bytes against the free device memory, with 256 MiB kept free
    size_t need = device_bytes(&d->tok_embd) + (d->output.data != d->tok_embd.data ? device_bytes(&d->output) : 0);
    for (int il = 0; il < d->n_layer; il++) {
        const pb_cu_layer *L = &d->layers[il];
        const pb_cu_mat *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (int i = 0; i < 7; i++) need += device_bytes(ms[i]);
    }
    need += g4_bytes(d); // Gemma 4: PLE table and matrices, per-layer norms
    size_t fr = 0, tot = 0;
    CU(cudaSetDevice(0));
    CU(cudaMemGetInfo(&fr, &tot));
    if (need + ((size_t)256 << 20) > fr)
        return fail(err, cap, ST_MEMLIMIT, "cuda: the weights need %zu MiB of GPU memory but only %zu MiB are free",
                    need >> 20, fr >> 20);
    pb_cu_model *g = (pb_cu_model *)calloc(1, sizeof *g);
    if (!g) return fail(err, cap, ST_NOMEM, "cuda: out of host memory");
    pthread_mutex_init(&g->bt_mu, NULL);
    g->hp = *d;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        snprintf(g->name, sizeof g->name, "%s", prop.name);
        g->n_sm = prop.multiProcessorCount;
        g->smem_optin = (int)prop.sharedMemPerBlockOptin;
    }
    int st = ST_OK;
    char what[64];
    int hd = d->head_dim;
    if ((st = upload_mat(g, &g->tok_embd, &d->tok_embd, "token_embd", err, cap))) goto bad;
    if (d->output.data == d->tok_embd.data)
        g->output = g->tok_embd;
    else if ((st = upload_mat(g, &g->output, &d->output, "output", err, cap)))
        goto bad;
    if ((st = upload_floats(g, &g->output_norm, d->output_norm, (size_t)d->n_embd, err, cap))) goto bad;
    // Gemma 4: each table sized by its own layers' head dim (hd_full, hd_swa)
    if ((st = upload_floats(g, &g->rope_g, d->rope_inv_global, (size_t)(d->gemma4 ? d->hd_full : hd) / 2, err, cap)))
        goto bad;
    if ((st = upload_floats(g, &g->rope_l, d->rope_inv_local, (size_t)(d->gemma4 ? d->hd_swa : hd) / 2, err, cap)))
        goto bad;
    if (d->gemma4 && (st = upload_g4_model(g, d, err, cap))) goto bad;
    for (int il = 0; il < d->n_layer; il++) {
        const pb_cu_layer *s = &d->layers[il];
        pb_cu_layer_d *t = &g->layers[il];
        const pb_cu_mat *ms[] = {&s->wq, &s->wk, &s->wv, &s->wo, &s->gate, &s->up, &s->down};
        dmat *md[] = {&t->wq, &t->wk, &t->wv, &t->wo, &t->gate, &t->up, &t->down};
        static const char *nm[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; i < 7; i++) {
            snprintf(what, sizeof what, "blk.%d.%s", il, nm[i]);
            if ((st = upload_mat(g, md[i], ms[i], what, err, cap))) goto bad;
        }
        size_t dd = (size_t)d->n_embd;
        if ((st = upload_floats(g, &t->attn_norm, s->attn_norm, dd, err, cap))) goto bad;
        if ((st = upload_floats(g, &t->post_attn_norm, s->post_attn_norm, dd, err, cap))) goto bad;
        if ((st = upload_floats(g, &t->ffn_norm, s->ffn_norm, dd, err, cap))) goto bad;
        if ((st = upload_floats(g, &t->post_ffw_norm, s->post_ffw_norm, dd, err, cap))) goto bad;
        const size_t hdl = (size_t)(d->gemma4 ? s->head_dim : hd); /* Gemma 4: the layer's own head dim */
        if ((st = upload_floats(g, &t->q_norm, s->q_norm, hdl, err, cap))) goto bad;
        if ((st = upload_floats(g, &t->k_norm, s->k_norm, hdl, err, cap))) goto bad;
        t->swa = s->swa;
        if (d->gemma4 && (st = upload_g4_layer(g, s, t, il, err, cap))) goto bad;
    }
    choose_path(g);
    {
        const char *pdl = getenv("PB_CUDA_PDL"), *sw = getenv("PB_CUDA_SW"), *pf = getenv("PB_CUDA_PF"),
                   *fu = getenv("PB_CUDA_FUSE"), *wi = getenv("PB_CUDA_WIDE");
        g->pdl = !(pdl && atoi(pdl) == 0); // on by default since run 10 (+3% once the host no longer waited)
        g->sw_force = sw ? atoi(sw) : 0;
        if (g->sw_force != 4 && g->sw_force != 8 && g->sw_force != 16 && g->sw_force != 32 && g->sw_force != 64)
            g->sw_force = 0;
        g->pf = pf ? atoi(pf) : 0;
        if (g->pf != 1 && g->pf != 2) g->pf = 0;
        g->fuse = fu && atoi(fu) == 1;
        g->wide = !(wi && atoi(wi) == 0);
        const char *pr = getenv("PB_CUDA_PRO");
        g->pro = !(pr && atoi(pr) == 0);
        const char *mq = getenv("PB_CUDA_MQ"), *gq = getenv("PB_CUDA_GQ");
        g->no_mq = mq && atoi(mq) == 0;
        g->no_gq = gq && atoi(gq) == 0;
        const char *mm = getenv("PB_CUDA_MMA"), *mn = getenv("PB_CUDA_MMA_MIN");
        g->mma = !(mm && atoi(mm) == 0);
        g->mma_min = mn && atoi(mn) > 0 ? atoi(mn) : 8;
        const char *mk = getenv("PB_CUDA_MMA_KS");
        g->mma_ks = mk ? atoi(mk) : 0;
        const char *nt = getenv("PB_CUDA_NORMT");
        g->normt = nt ? atoi(nt) : 0;
        if (g->normt < 128 || g->normt > 1024 || g->normt % 32) g->normt = 0;
        const char *sk = getenv("PB_CUDA_SKIP"), *em = getenv("PB_CUDA_EMPTY");
        g->skip = sk ? atoi(sk) : 0;
        g->empty = em && atoi(em) == 1;
        const char *ad = getenv("PB_CUDA_ADIAG");
        g->adiag = ad ? atoi(ad) : 0;
        const char *ak = getenv("PB_CUDA_AKV");
        g->akv = ak ? atoi(ak) : AKV_DEFAULT;
        if (g->akv != 0 && g->akv != 4 && g->akv != 8) g->akv = AKV_DEFAULT;
        const char *ar = getenv("PB_CUDA_AREP");
        g->arep_max = ar && atoi(ar) == 8;
        const char *sp = getenv("PB_CUDA_PF_SPB");
        g->pf_spb = sp ? atoi(sp) : 4;
        if (g->pf_spb < 1 || g->pf_spb > 16) g->pf_spb = 4;
    }
    set_ahead(g);
    g->hp.layers = NULL;
    // the uploads' DMA has landed before any token step reads it: a synchronous cudaMemcpy from pageable memory
    // may return first, and the steps' non-blocking streams are not ordered after the legacy stream
    if (cudaDeviceSynchronize() != cudaSuccess) {
        st = fail(err, cap, ST_INTERNAL, "cuda: the weight upload failed: %s", cudaGetErrorString(cudaGetLastError()));
        goto bad;
    }
    *out = g;
    return ST_OK;
bad:
    pb_cu_model_free(g);
    return st;
}

extern "C" size_t pb_cu_model_bytes(const pb_cu_model *g) { return g ? g->bytes : 0; }
extern "C" const char *pb_cu_device_name(const pb_cu_model *g) { return g ? g->name : ""; }

// ---- kernels -----------------------------------------------------------------------------------------------

// Where an activation vector's int8 forms go (q0 / qK NULL: that form is not wanted).
struct qout {
    int8_t *q0, *qK;
    float *d0, *dK;
};

struct mv_args {
    dmat mat[3];
    float *y[3];
    int n_mat, geglu, int8, pdl;
    int sw;  // lanes a row (mat[0].sw): thread t of a block takes row t / sw, its units t % sw, t % sw + sw, ...
    int pf;  // L2 prefetch of the weight rows: 0 none, 1 each warp's own rows, 2 also the rows one wave ahead
    int pro; // int8 path, types with unit_load8: each lane's first MV_PRO units loaded before pdl_wait (row_part_w)
    float softcap;
    const float *x;
    qact xa;  // x quantized (int8 path)
    qout yq;  // GeGLU: y's int8 forms, made by the last block of each group of qgroup rows (q0 / qK NULL: none)
    int *cnt; // GeGLU with yq: blocks done per group (zero between launches: the last block resets its group's)
    int qgroup;
    // The residual add + norm after this mat-vec (nx NULL: none), done by the block that finishes last (a counter
    // in ncnt, zero between launches): nx += [RMSNorm(y_0; npost)] y_0, nxn = RMSNorm(nx; nnext), nxn's int8
    // forms into nq, as k_add_norm does.
    float *nx, *nxn;
    const float *npost, *nnext;
    int nd;
    float neps;
    qout nq;
    int *ncnt;
};

static __device__ void quant_act(const float *x, int K, const qout &o, int gw, int nw);
static __device__ void norm_tail(const mv_args &a);

// ---- mat-vec: sw lanes a row (4 .. 64: a warp takes 32 / sw rows, or a row spans 2 warps) ------------------------
// Lane l of a row's group takes units l, l + sw, ... of its row in that order, then the group sums by shuffles
// (and, where a row spans several warps, the warps' sums in warp order through shared memory: row_total).
// sw is chosen per matrix so that a row's units fill the lanes (set_ahead: a Q4_K row of 2304 values has 72 wide
// units, 16 lanes a row; a Q6_K row of 2304, 36, 8 lanes). Each kernel is instantiated per weight type and path (no
// switch over types in the loop): the one generic kernel that switched over every type and both paths compiled to
// a real call with a 224-byte stack frame and 90 registers (ptxas -v, 2026-12-02), at most 5 blocks an SM.

// Programmatic dependent launch (PTX griddepcontrol, sm_90): no-ops in a kernel launched without the attribute.
// pdl_start: the next kernel of the stream may start once every block of this one has run it; pdl_wait: wait
// until the previous kernel has finished and its writes are visible (every kernel calls it before it reads or
// writes activations, so each one still ends after the one before it).
static __device__ __forceinline__ void pdl_start() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
static __device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Weight bytes of one row into L2, one request a 32-byte sector, by the row's sw lanes (weights are never written:
// safe before pdl_wait). Requests without registers: the loop's later units then find L2 instead of waiting a
// DRAM round trip a batch.
static __device__ __forceinline__ void prefetch_row(const dmat &M, int row, int sl, int sw) {
    const uint8_t *q = M.q + (size_t)row * M.qrow, *m = M.m + (size_t)row * M.mrow;
    for (size_t o = (size_t)sl * 32; o < M.qrow; o += 32 * (size_t)sw)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(q + o));
    for (size_t o = (size_t)sl * 32; o < M.mrow; o += 32 * (size_t)sw)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(m + o));
}

// This row and, for a matrix of more rows than are resident at once, the row one wave ahead (the row the lanes in
// this slot take next), so the next wave starts on L2 hits.
static __device__ __forceinline__ void prefetch_rows(const dmat &M, int row, int sl, int sw, int pf) {
    prefetch_row(M, row, sl, sw);
    if (pf == 2 && M.ahead > 0 && row + M.ahead < M.N) prefetch_row(M, row + M.ahead, sl, sw);
}

// One lane's part of row `row` (its units sl, sl + sw, ...); group_sum adds the sw lanes' parts.
template <int T, bool I8>
static __device__ __forceinline__ float row_part(const dmat &M, int row, const float *x, const qact &xa, int sl,
                                                 int sw) {
    const uint8_t *q = M.q + (size_t)row * M.qrow, *m = M.m + (size_t)row * M.mrow;
    float acc = 0.0f;
    if constexpr (I8) {
#pragma unroll 4
        for (int u = sl; u < M.nunits8; u += sw) acc += unit_dot8<T>(q, m, u, xa);
    } else {
#pragma unroll 4
        for (int u = sl; u < M.nunits; u += sw) acc += unit_dot<T>(q, m, u, x);
    }
    return acc;
}

// Sum over each group of sw lanes (every lane of the warp calls it; each gets its group's sum).
static __device__ __forceinline__ float group_sum(float v, int sw) {
    for (int o = (sw < 32 ? sw : 32) >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The row's sum of the parts v of its sw lanes, valid in the row's first thread (t % sw == 0): group_sum, then for
// sw > 32 the row's warps' sums added in warp order (the same order every launch). Every thread of the block calls
// it (a barrier inside for sw > 32); sh: MV_WARPS floats of shared memory.
static __device__ __forceinline__ float row_total(float v, int sw, float *sh) {
    v = group_sum(v, sw);
    if (sw <= 32) return v;
    const int w = threadIdx.x >> 5, wpr = sw >> 5;
    __syncthreads(); /* sh free again (an earlier call's readers are done) */
    if ((threadIdx.x & 31) == 0) sh[w] = v;
    __syncthreads();
    if (w % wpr == 0) {
        v = sh[w];
        for (int i = 1; i < wpr; i++) v += sh[w + i];
    }
    return v;
}

// One lane's parts of rows `row` of two matrices of the same type and shape (gate, up) in one loop, so the loads of
// both are in flight together.
template <int T, bool I8>
static __device__ __forceinline__ void row_part2(const dmat &M0, const dmat &M1, int row, const float *x,
                                                 const qact &xa, int sl, int sw, float &r0, float &r1) {
    const uint8_t *q0 = M0.q + (size_t)row * M0.qrow, *m0 = M0.m + (size_t)row * M0.mrow;
    const uint8_t *q1 = M1.q + (size_t)row * M1.qrow, *m1 = M1.m + (size_t)row * M1.mrow;
    float a0 = 0.0f, a1 = 0.0f;
    if constexpr (I8) {
#pragma unroll 2
        for (int u = sl; u < M0.nunits8; u += sw) {
            a0 += unit_dot8<T>(q0, m0, u, xa);
            a1 += unit_dot8<T>(q1, m1, u, xa);
        }
    } else {
#pragma unroll 2
        for (int u = sl; u < M0.nunits; u += sw) {
            a0 += unit_dot<T>(q0, m0, u, x);
            a1 += unit_dot<T>(q1, m1, u, x);
        }
    }
    r0 = a0, r1 = a1;
}

// Weight units a lane loads before it waits for its input: MV_PRO of its row in k_mv (row_part_w; a Q4_K row of
// 2304 values at 16 lanes a row is 4-5 units a lane, so about half of them), MV_PRO_G of each of gate and up in
// k_mv_geglu (row_part2_w: two units in flight as well). ptxas (-Xptxas -v, 2026-12-05): k_mv Q4_K 48 registers
// with an 8-byte spill before -> 56 without; Q4_K + Q6_K v 62 -> 64; Q6_K 64, Q4_0 / Q5_0 / Q8_0 56 unchanged;
// k_mv_geglu Q4_K 51 -> 50, Q6_K 64 with a 4-byte spill -> 64 without. Two units a matrix in the GeGLU took it to 63
// (Q4_K: 8 blocks an SM instead of 9, so gate+up's 1,152 blocks no longer fit one wave of 132 SMs) and 96 (Q6_K).
#define MV_PRO   2
#define MV_PRO_G 1

// row_part, with the pdl_wait before the activations are touched: where the path and type allow (int8, unit_load8)
// and pro is set, lane sl's first MV_PRO units are loaded before pdl_wait (weights never depend on the previous
// kernel), then dotted after it; the same units in the same order into the same float, so the same bits. pro 0:
// the same peeled loop with pdl_wait first (the order of loads before 2026-12-05).
template <int T, bool I8>
static __device__ __forceinline__ float row_part_w(const dmat &M, int row, const float *x, const qact &xa, int sl,
                                                   int sw, int pro) {
    if constexpr (I8 && has_load8<T>::value) {
        const uint8_t *q = M.q + (size_t)row * M.qrow, *m = M.m + (size_t)row * M.mrow;
        const int n = M.nunits8;
        wunit8<T> w[MV_PRO];
        if (!pro) pdl_wait();
#pragma unroll
        for (int k = 0; k < MV_PRO; k++)
            if (sl + k * sw < n) w[k] = unit_load8<T>(q, m, sl + k * sw);
        if (pro) pdl_wait();
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < MV_PRO; k++)
            if (sl + k * sw < n) acc += unit_dot8_loaded<T>(w[k], sl + k * sw, xa);
#pragma unroll 4
        for (int u = sl + MV_PRO * sw; u < n; u += sw) acc += unit_dot8<T>(q, m, u, xa);
        return acc;
    } else {
        pdl_wait();
        return row_part<T, I8>(M, row, x, xa, sl, sw);
    }
}

// row_part2 with the pdl_wait, as row_part_w: both matrices' first MV_PRO_G units of the lane loaded before it.
template <int T, bool I8>
static __device__ __forceinline__ void row_part2_w(const dmat &M0, const dmat &M1, int row, const float *x,
                                                   const qact &xa, int sl, int sw, int pro, float &r0, float &r1) {
    if constexpr (I8 && has_load8<T>::value) {
        const uint8_t *q0 = M0.q + (size_t)row * M0.qrow, *m0 = M0.m + (size_t)row * M0.mrow;
        const uint8_t *q1 = M1.q + (size_t)row * M1.qrow, *m1 = M1.m + (size_t)row * M1.mrow;
        const int n = M0.nunits8;
        wunit8<T> w0[MV_PRO_G], w1[MV_PRO_G];
        if (!pro) pdl_wait();
#pragma unroll
        for (int k = 0; k < MV_PRO_G; k++)
            if (sl + k * sw < n) {
                w0[k] = unit_load8<T>(q0, m0, sl + k * sw);
                w1[k] = unit_load8<T>(q1, m1, sl + k * sw);
            }
        if (pro) pdl_wait();
        float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int k = 0; k < MV_PRO_G; k++)
            if (sl + k * sw < n) {
                a0 += unit_dot8_loaded<T>(w0[k], sl + k * sw, xa);
                a1 += unit_dot8_loaded<T>(w1[k], sl + k * sw, xa);
            }
#pragma unroll 2
        for (int u = sl + MV_PRO_G * sw; u < n; u += sw) {
            a0 += unit_dot8<T>(q0, m0, u, xa);
            a1 += unit_dot8<T>(q1, m1, u, xa);
        }
        r0 = a0, r1 = a1;
    } else {
        pdl_wait();
        row_part2<T, I8>(M0, M1, row, x, xa, sl, sw, r0, r1);
    }
}

static __device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// y_i = W_i x for up to three matrices, rows of each in turn: mat[0] and mat[1] of type TA, mat[2] of type TB
// (q, k, v: Q4_K_M files keep v in Q6_K in some layers); an optional soft-cap on the results; with a.nx set, the
// residual add + norm after it (norm_tail, in the block that finishes last).
template <int TA, int TB, bool I8> __global__ void __launch_bounds__(32 * MV_WARPS) k_mv(const mv_args a) {
    __shared__ int last;
    __shared__ float wsum[MV_WARPS];
    const int sw = a.sw, sl = threadIdx.x % sw;
    const int row0 = blockIdx.x * (32 * MV_WARPS / sw) + threadIdx.x / sw;
    pdl_start();
    if (a.pf) {
        const int r1 = row0 - a.mat[0].N, r2 = r1 - (a.n_mat > 1 ? a.mat[1].N : 0);
        if (row0 < a.mat[0].N) {
            if (a.n_mat == 1)
                prefetch_rows(a.mat[0], row0, sl, sw, a.pf);
            else
                prefetch_row(a.mat[0], row0, sl, sw);
        } else if (a.n_mat > 1 && r1 < a.mat[1].N)
            prefetch_row(a.mat[1], r1, sl, sw);
        else if (a.n_mat > 2 && r2 < a.mat[2].N)
            prefetch_row(a.mat[2], r2, sl, sw);
    }
    float s = 0.0f, *y = NULL; /* each branch waits for the input (pdl_wait) after its first weight loads */
    int row = row0;
    if (row < a.mat[0].N) {
        s = row_part_w<TA, I8>(a.mat[0], row, a.x, a.xa, sl, sw, a.pro);
        y = a.y[0];
    } else if (a.n_mat > 1 && (row -= a.mat[0].N) < a.mat[1].N) {
        s = row_part_w<TA, I8>(a.mat[1], row, a.x, a.xa, sl, sw, a.pro);
        y = a.y[1];
    } else if (a.n_mat > 2 && (row -= a.mat[1].N) < a.mat[2].N) {
        s = row_part_w<TB, I8>(a.mat[2], row, a.x, a.xa, sl, sw, a.pro);
        y = a.y[2];
    } else
        pdl_wait();
    s = row_total(s, sw, wsum);
    if (y && sl == 0) y[row] = a.softcap > 0.0f ? tanhf(s / a.softcap) * a.softcap : s;
    if (!a.nx) return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(a.ncnt, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    norm_tail(a);
    if (threadIdx.x == 0) *a.ncnt = 0;
}

// y_0 = gelu(W_0 x) * (W_1 x), both matrices of type T.
// With a.yq set (the caller checks N % qgroup == 0, qgroup 256 where q8_K is wanted, else 32, and qgroup >= the rows
// of a block) the block that finishes a group of qgroup rows last quantizes it as k_quant would (quant_act on the
// same values: the same bits), so no k_quant launch follows: each block's writes are fenced before it counts
// itself in its group (the threadfence-reduction pattern), and the last one reads the group through L2 (__ldcg)
// into shared memory.
template <int T, bool I8> __global__ void __launch_bounds__(32 * MV_WARPS) k_mv_geglu(const mv_args a) {
    __shared__ float ys[256], wsum[MV_WARPS];
    __shared__ int last;
    const int sw = a.sw, sl = threadIdx.x % sw, rb = 32 * MV_WARPS / sw;
    const int row = blockIdx.x * rb + threadIdx.x / sw;
    pdl_start();
    if (a.pf && row < a.mat[0].N) {
        prefetch_rows(a.mat[0], row, sl, sw, a.pf);
        prefetch_rows(a.mat[1], row, sl, sw, a.pf);
    }
    float g = 0.0f, u = 0.0f; /* pdl_wait inside row_part2_w, after the lane's first weight loads */
    if (row < a.mat[0].N)
        row_part2_w<T, I8>(a.mat[0], a.mat[1], row, a.x, a.xa, sl, sw, a.pro, g, u);
    else
        pdl_wait();
    g = row_total(g, sw, wsum);
    u = row_total(u, sw, wsum);
    if (row < a.mat[0].N && sl == 0) a.y[0][row] = gelu_tanh(g) * u;
    if (!a.yq.q0 && !a.yq.qK) return;
    __threadfence();
    __syncthreads();
    const int G = a.qgroup, grp = (int)(blockIdx.x * rb) / G;
    if (threadIdx.x == 0) last = atomicAdd(&a.cnt[grp], 1) == G / rb - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int i = threadIdx.x; i < G; i += blockDim.x) ys[i] = __ldcg(a.y[0] + (size_t)grp * G + i);
    __syncthreads();
    qout o;
    o.q0 = a.yq.q0 ? a.yq.q0 + (size_t)grp * G : NULL;
    o.qK = a.yq.qK ? a.yq.qK + (size_t)grp * G : NULL;
    o.d0 = a.yq.d0 + (size_t)grp * (G / 32);
    o.dK = a.yq.dK + (size_t)grp * (G / 256);
    quant_act(ys, G, o, (int)(threadIdx.x >> 5), MV_WARPS);
    if (threadIdx.x == 0) a.cnt[grp] = 0;
}

// y = gelu(y) * u elementwise: the GeGLU of gate and up matrices of two types, each run by k_mv.
__global__ void k_geglu(float *y, const float *u, int n) {
    pdl_start();
    pdl_wait();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = gelu_tanh(y[i]) * u[i];
}

typedef void (*mv_kernel)(mv_args);

// The kernel for (ta, tb, path): plain (k_mv) or GeGLU (k_mv_geglu, ta == tb); NULL where none is instantiated.
static mv_kernel mv_pick(int ta, int tb, bool i8, bool geglu) {
#define MV_SAME(T)                                                                                                     \
    case T:                                                                                                            \
        if (tb != T) return NULL;                                                                                      \
        return geglu ? (i8 ? (mv_kernel)k_mv_geglu<T, true> : (mv_kernel)k_mv_geglu<T, false>)                         \
                     : (i8 ? (mv_kernel)k_mv<T, T, true> : (mv_kernel)k_mv<T, T, false>);
#define MV_FLOAT(T)                                                                                                    \
    case T:                                                                                                            \
        if (tb != T) return NULL; /* F32/F16/BF16: the float path on either path */                                    \
        return geglu ? (mv_kernel)k_mv_geglu<T, false> : (mv_kernel)k_mv<T, T, false>;
    if (!geglu && ta != tb) { // the mixes llama-quantize writes (attn_v in Q6_K)
        if (ta == T_Q4_K && tb == T_Q6_K) return i8 ? k_mv<T_Q4_K, T_Q6_K, true> : k_mv<T_Q4_K, T_Q6_K, false>;
        if (ta == T_Q5_K && tb == T_Q6_K) return i8 ? k_mv<T_Q5_K, T_Q6_K, true> : k_mv<T_Q5_K, T_Q6_K, false>;
        return NULL;
    }
    switch (ta) {
        MV_FLOAT(T_F32)
        MV_FLOAT(T_F16)
        MV_FLOAT(T_BF16)
        MV_FLOAT(T_F32 + T_SCALAR)
        MV_FLOAT(T_F16 + T_SCALAR)
        MV_FLOAT(T_BF16 + T_SCALAR)
        MV_SAME(T_Q4_0)
        MV_SAME(T_Q4_1)
        MV_SAME(T_Q5_0)
        MV_SAME(T_Q5_1)
        MV_SAME(T_Q8_0)
        MV_SAME(T_Q4_K)
        MV_SAME(T_Q5_K)
        MV_SAME(T_Q6_K)
    }
    return NULL;
#undef MV_SAME
#undef MV_FLOAT
}

// Lanes a row for a row of nunits units: the widest group (32, 16, 8, 4 lanes) whose last round of units still
// keeps >= 85% of its lanes busy (a Q4_K row of 2304 on the int8 path: 72 units, 16 lanes in 5 rounds, 90%; 32
// lanes would take 3 rounds at 75%), else the one that keeps the most busy.
// Then, where the matrix has too few rows to fill the chip with warps (fewer than 24 an SM) and a lane would take
// more than 2 units a row, the row is spread over 2 warps (sw 64: a Q4_K ffn_down of 2304 rows of 9216 values, 288
// units: 4.5 a lane in 4608 warps instead of 9 in 2304), unless wide is 0. Not over 4 warps (sw 128): forced with
// PB_CUDA_SW=128 in run 9, the Gemma 3 270m Q4_K_M model's int8 logits came out different from run to run (prefill
// at once != token by token in 3 of 3 parity runs, 0 of 3 at 64 and 32; cause not found), so 128 is refused.
static int choose_sw(int nunits, int N, int n_sm, int force, int wide) {
    if (force) return force;
    int best = 32;
    double be = 0.0;
    for (int sw = 32; sw >= 4; sw >>= 1) {
        const int rounds = (nunits + sw - 1) / sw;
        const double e = (double)nunits / ((double)rounds * sw);
        if (e >= 0.85) {
            best = sw;
            break;
        }
        if (e > be) be = e, best = sw;
    }
    while (wide && best < 64 && (double)N * best / 32.0 < 24.0 * n_sm && nunits > 2 * best) best *= 2;
    return best;
}

// dmat.sw (choose_sw, on the units of the path its kernel takes) and dmat.ahead of every matrix: resident blocks of
// its kernel an SM (the occupancy calculator) x SMs x rows a block. The output and the single-matrix launches take
// the plain kernel, gate and up the GeGLU one; a matrix in a launch of several only prefetches its own rows (ahead
// unused) and runs with the first matrix's sw. Not called during a graph capture.
static void set_ahead(pb_cu_model *g) {
    dmat *all[MV_MATS];
    bool gg[MV_MATS];
    const int na = mv_mats(g, all, gg);
    for (int i = 0; i < na; i++) {
        dmat *d = all[i];
        const bool fl = d->type == T_F32 || d->type == T_F16 || d->type == T_BF16 || d->type >= T_SCALAR;
        d->sw =
            choose_sw(g->int8 && !fl ? d->nunits8 : d->nunits, d->N, g->n_sm > 0 ? g->n_sm : 132, g->sw_force, g->wide);
        const mv_kernel k = mv_pick(d->type, d->type, g->int8 != 0, gg[i]);
        int nb = 0;
        d->ahead = 0;
        if (k && g->n_sm > 0 && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, 32 * MV_WARPS, 0) == cudaSuccess)
            d->ahead = nb * g->n_sm * (32 * MV_WARPS / d->sw);
    }
    cudaGetLastError(); /* a failed query leaves ahead at 0 (own-row prefetch only); clear its error */
}

// Block-wide sum in double (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
static __device__ double block_sum(double v, double *sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[w] = v;
    __syncthreads();
    // the warps' sums added in warp order from 0.0, as before; for a whole 1024-thread block unrolled, so the 32
    // shared-memory loads are in flight together and only the additions wait on each other (the same bits)
    double t = 0.0;
    if (nw == 32) {
        double v32[32];
#pragma unroll
        for (int i = 0; i < 32; i++) v32[i] = sh[i];
#pragma unroll
        for (int i = 0; i < 32; i++) t += v32[i];
        return t;
    }
    for (int i = 0; i < nw; i++) t += sh[i];
    return t;
}

// 1 / RMS of x[0..n) (+ eps): thread t sums values t, t + nt, ... in double (nt = blockDim.x; NT > 0: only the first
// NT threads take values, nt = NT, and the other warps add 0.0 after theirs: the bits of an NT-thread block).
template <int NT = 0> static __device__ float rms_factor(const float *x, int n, float eps, double *sh) {
    double ss = 0.0;
    if (!NT || threadIdx.x < (unsigned)NT)
        for (int i = threadIdx.x; i < n; i += NT ? NT : blockDim.x) ss += (double)x[i] * (double)x[i];
    ss = block_sum(ss, sh);
    return 1.0f / sqrtf((float)(ss / (double)n) + eps);
}

// The CPU's pb_quant_q8_0 (d = amax / 127 stored as fp16, q = roundf(x / d) with the float32 d) and
// pb_quant_q8_K (d = max / -127 with max the first value of largest magnitude, q = round-half-even(x * -127 /
// max)) of x[0..K), bit for bit: warp gw of nw takes 32-blocks gw, gw + nw, ... and 256-blocks likewise.
static __device__ void quant_act(const float *x, int K, const qout &o, int gw, int nw) {
    const int lane = threadIdx.x & 31;
    for (int b = gw; o.q0 && b < K / 32; b += nw) {
        const float v = x[32 * b + lane];
        float amax = fabsf(v);
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, s));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        float r = roundf(__fmul_rn(v, id));
        r = !(r == r) ? 0.0f : fminf(127.0f, fmaxf(-127.0f, r));
        o.q0[32 * b + lane] = (int8_t)r;
        if (lane == 0) o.d0[b] = __half2float(__float2half_rn(d));
    }
    for (int c = gw; o.qK && c < K / 256; c += nw) {
        const float *xc = x + 256 * c;
        float am = 0.0f;
        int ix = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float a = fabsf(xc[8 * lane + k]);
            if (a > am) am = a, ix = 8 * lane + k;
        }
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) {
            const float a2 = __shfl_xor_sync(0xffffffffu, am, s);
            const int i2 = __shfl_xor_sync(0xffffffffu, ix, s);
            if (a2 > am || (a2 == am && i2 < ix)) am = a2, ix = i2;
        }
        const float iscale = am == 0.0f ? 0.0f : -127.0f / xc[ix];
        uint32_t pk[2] = {0u, 0u}; /* the lane's 8 values in one 8-byte store (qK is 8-byte aligned) */
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float f = __fadd_rn(__fmul_rn(iscale, xc[8 * lane + k]), 12582912.0f);
            const int n = (__float_as_int(f) & 0x007FFFFF) - 0x00400000;
            pk[k >> 2] |= (uint32_t)(uint8_t)(int8_t)(n < -127 ? -127 : n > 127 ? 127 : n) << (8 * (k & 3));
        }
        *(uint2 *)(o.qK + 256 * c + 8 * lane) = make_uint2(pk[0], pk[1]);
        if (lane == 0) o.dK[c] = am == 0.0f ? 0.0f : 1.0f / iscale;
    }
}

// Quantizes x[0..K) (see quant_act); any grid of 32-thread multiples.
__global__ void k_quant(const float *x, int K, const qout o) {
    pdl_start();
    pdl_wait();
    quant_act(x, K, o, (int)(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)),
              (int)(gridDim.x * (blockDim.x >> 5)));
}

// The residual add + norm of a mat-vec's last block (mv_args.nx): k_add_norm's loop form over any block size, with
// the mat-vec's output y_0 read through L2 (__ldcg: the grid's other blocks wrote it). Each thread loads TAIL_B
// values of a pass before it uses any (one L2 round trip per TAIL_B x blockDim values, not one per value: the
// plain loop form made the tail ~15 us in run 9's first try).
#define TAIL_B 8
static __device__ void norm_tail(const mv_args &a) {
    __shared__ double sh[32];
    const float *o = a.y[0];
    const int d = a.nd, t = threadIdx.x, bd = blockDim.x;
    float r = 1.0f;
    if (a.npost) {
        double ss = 0.0;
        for (int i0 = t; i0 < d; i0 += TAIL_B * bd) {
            float v[TAIL_B];
#pragma unroll
            for (int k = 0; k < TAIL_B; k++) v[k] = i0 + k * bd < d ? __ldcg(o + i0 + k * bd) : 0.0f;
#pragma unroll
            for (int k = 0; k < TAIL_B; k++) ss += (double)v[k] * (double)v[k];
        }
        ss = block_sum(ss, sh);
        r = 1.0f / sqrtf((float)(ss / (double)d) + a.neps);
    }
    double ss = 0.0;
    for (int i0 = t; i0 < d; i0 += TAIL_B * bd) {
        float v[TAIL_B], xv[TAIL_B], pw[TAIL_B];
#pragma unroll
        for (int k = 0; k < TAIL_B; k++) {
            const int i = i0 + k * bd;
            const bool in = i < d;
            v[k] = in ? __ldcg(o + i) : 0.0f;
            xv[k] = in ? a.nx[i] : 0.0f;
            pw[k] = in && a.npost ? a.npost[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < TAIL_B; k++) {
            const int i = i0 + k * bd;
            xv[k] += a.npost ? (v[k] * r) * pw[k] : v[k];
            if (i < d) a.nx[i] = xv[k];
            ss += (double)xv[k] * (double)xv[k];
        }
    }
    ss = block_sum(ss, sh);
    const float rn = 1.0f / sqrtf((float)(ss / (double)d) + a.neps);
    for (int i0 = t; i0 < d; i0 += TAIL_B * bd) {
        float xv[TAIL_B], nw[TAIL_B];
#pragma unroll
        for (int k = 0; k < TAIL_B; k++) {
            const int i = i0 + k * bd;
            xv[k] = i < d ? a.nx[i] : 0.0f; /* this thread's own writes above */
            nw[k] = i < d ? a.nnext[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < TAIL_B; k++)
            if (i0 + k * bd < d) a.nxn[i0 + k * bd] = (xv[k] * rn) * nw[k];
    }
    if (a.nq.q0 || a.nq.qK) {
        __syncthreads(); // this block's nxn values, written by its other threads, are visible after the barrier
        quant_act(a.nxn, d, a.nq, t >> 5, bd >> 5);
    }
}

#define NORM_NPT 4 // values a thread holds in registers in k_add_norm (d <= 4 x 1024)

// x += [RMSNorm(o; post_w)] o (skipped when o is NULL); xn = RMSNorm(x; next_w), then xn quantized into the forms
// qo asks for (q0 / qK set). One block. Where d <= NORM_NPT x blockDim.x every thread first loads all of its
// values of o, x and both weights at once (one memory round trip instead of one a phase) and keeps them in
// registers, and the quantization reads xn from shared memory; the sums run in the same order as the loop form
// below (the same bits). The norm weights never change: they are requested before the wait (2026-12-05: their
// DRAM round trip off the step's chain; the weight streams of the mat-vecs evict them from L2 every token).
__global__ void k_add_norm(float *x, const float *o, const float *post_w, const float *next_w, float *xn, int d,
                           float eps, const qout qo) {
    __shared__ double sh[32];
    __shared__ float xs[NORM_NPT * 1024];
    pdl_start();
    const int t = threadIdx.x, bd = blockDim.x;
    if (d <= NORM_NPT * bd) {
        float ov[NORM_NPT], xv[NORM_NPT], pw[NORM_NPT], nw[NORM_NPT];
#pragma unroll
        for (int k = 0; k < NORM_NPT; k++) {
            const int i = t + k * bd;
            const bool in = i < d;
            pw[k] = in && post_w ? post_w[i] : 0.0f;
            nw[k] = in ? next_w[i] : 0.0f;
        }
        pdl_wait();
#pragma unroll
        for (int k = 0; k < NORM_NPT; k++) {
            const int i = t + k * bd;
            const bool in = i < d;
            ov[k] = in && o ? o[i] : 0.0f;
            xv[k] = in ? x[i] : 0.0f;
        }
        if (o) {
            float r = 1.0f;
            if (post_w) {
                double ss = 0.0;
#pragma unroll
                for (int k = 0; k < NORM_NPT; k++)
                    if (t + k * bd < d) ss += (double)ov[k] * (double)ov[k];
                ss = block_sum(ss, sh);
                r = 1.0f / sqrtf((float)(ss / (double)d) + eps);
            }
#pragma unroll
            for (int k = 0; k < NORM_NPT; k++)
                if (t + k * bd < d) {
                    xv[k] += post_w ? (ov[k] * r) * pw[k] : ov[k];
                    x[t + k * bd] = xv[k];
                }
        }
        double ss = 0.0;
#pragma unroll
        for (int k = 0; k < NORM_NPT; k++)
            if (t + k * bd < d) ss += (double)xv[k] * (double)xv[k];
        ss = block_sum(ss, sh);
        const float r = 1.0f / sqrtf((float)(ss / (double)d) + eps);
#pragma unroll
        for (int k = 0; k < NORM_NPT; k++)
            if (t + k * bd < d) {
                const float v = (xv[k] * r) * nw[k];
                xn[t + k * bd] = v;
                xs[t + k * bd] = v;
            }
        if (qo.q0 || qo.qK) {
            __syncthreads();
            quant_act(xs, d, qo, t >> 5, bd >> 5);
        }
        return;
    }
    pdl_wait();
    if (o) {
        float r = post_w ? rms_factor(o, d, eps, sh) : 1.0f;
        for (int i = t; i < d; i += bd) x[i] += post_w ? (o[i] * r) * post_w[i] : o[i];
        __syncthreads();
    }
    float r = rms_factor(x, d, eps, sh);
    for (int i = t; i < d; i += bd) xn[i] = (x[i] * r) * next_w[i];
    if (qo.q0 || qo.qK) {
        __syncthreads();
        quant_act(xn, d, qo, t >> 5, bd >> 5);
    }
}

// x = E[token] * scale; xn = RMSNorm(x; w). One block.
__global__ void k_embed(const dmat E, const int *params, float scale, float *x, const float *w, float *xn, int d,
                        float eps, const qout qo) {
    __shared__ double sh[32];
    pdl_start();
    pdl_wait();
    const int tok = params[0];
    const uint8_t *q = E.q + (size_t)tok * E.qrow, *m = E.m + (size_t)tok * E.mrow;
    for (int i = threadIdx.x; i < d; i += blockDim.x) x[i] = deq_elem(E.type, q, m, i) * scale;
    __syncthreads();
    float r = rms_factor(x, d, eps, sh);
    for (int i = threadIdx.x; i < d; i += blockDim.x) xn[i] = (x[i] * r) * w[i];
    if (qo.q0 || qo.qK) {
        __syncthreads();
        quant_act(xn, d, qo, (int)(threadIdx.x >> 5), (int)(blockDim.x >> 5));
    }
}

// Gemma 4's residual tail (forward.c block(): after the MLP, after the PLE block): x += [RMSNorm(o; post_w)] o, then
// x *= scale (the layer output scale where it applies, else 1); then with next_w xn = RMSNorm(x; next_w) and xn's
// int8 forms into qo (the next layer's input), without it x's own int8 forms into qo (the PLE gate's input: it reads
// x, not a normed row). One block, any d (the loop form of k_add_norm); the prompt path's k_pf_g4_add runs the same
// code per token (g4_add_row), with the same block size: the same bits.
static __device__ __forceinline__ void g4_add_row(float *x, const float *o, const float *post_w, float scale,
                                                  const float *next_w, float *xn, int d, float eps, const qout &qo,
                                                  double *sh) {
    const int t = threadIdx.x, bd = blockDim.x;
    const float r = post_w ? rms_factor(o, d, eps, sh) : 1.0f;
    for (int i = t; i < d; i += bd) {
        float xv = x[i] + (post_w ? (o[i] * r) * post_w[i] : o[i]);
        if (scale != 1.0f) xv *= scale;
        x[i] = xv;
    }
    __syncthreads(); // x: this block's writes, read by every thread below
    const float *qx = x;
    if (next_w) {
        const float rn = rms_factor(x, d, eps, sh);
        for (int i = t; i < d; i += bd) xn[i] = (x[i] * rn) * next_w[i];
        __syncthreads();
        qx = xn;
    }
    if (qo.q0 || qo.qK) quant_act(qx, d, qo, t >> 5, bd >> 5);
}

__global__ void k_g4_add(float *x, const float *o, const float *post_w, float scale, const float *next_w, float *xn,
                         int d, float eps, const qout qo) {
    __shared__ double sh[32];
    pdl_start();
    pdl_wait();
    g4_add_row(x, o, post_w, scale, next_w, xn, d, eps, qo, sh);
}

// Gemma 4's per-layer inputs (forward.c ple_inputs) of token tok, chunk l (layer l) of its projection c [P], which
// holds the model projection of the scaled embedding: c[i] = (RMSNorm(c * ps; w)[i] + E[tok][l P + i] * ts) * r2
// (ps = d^-0.5, ts = sqrt(P), r2 = 2^-0.5, computed on the host as the CPU does). One block (k_ple_in, and per token
// k_pf_ple_in with the same block size).
static __device__ __forceinline__ void ple_in_chunk(float *c, const dmat &E, int tok, int l, const float *w, int P,
                                                    float ps, float ts, float r2, float eps, double *sh) {
    for (int i = threadIdx.x; i < P; i += blockDim.x) c[i] *= ps;
    __syncthreads();
    const float r = rms_factor(c, P, eps, sh);
    const uint8_t *q = E.q + (size_t)tok * E.qrow, *m = E.m + (size_t)tok * E.mrow;
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        c[i] = ((c[i] * r) * w[i] + deq_elem(E.type, q, m, (int64_t)l * P + i) * ts) * r2;
}

// The step's token's per-layer inputs, chunk blockIdx.x of pli [n_layer x P] (ple_in_chunk).
__global__ void k_ple_in(float *pli, const dmat E, const int *params, const float *w, int P, float ps, float ts,
                         float r2, float eps) {
    __shared__ double sh[32];
    pdl_start();
    pdl_wait();
    ple_in_chunk(pli + (size_t)blockIdx.x * P, E, params[0], (int)blockIdx.x, w, P, ps, ts, r2, eps, sh);
}

// One head of hd values at src: [RMSNorm with weights nw (Gemma 3 q/k norm)], then RoPE (NeoX halves) at position p
// with inverse frequencies inv, into out (shared memory); buf: hd floats of shared scratch. Every thread of the
// block calls it; it ends with a barrier. NT: the RMS's sums as an NT-thread block's (rms_factor; 0: this block's).
template <int NT = 0>
static __device__ void rope_head(const float *src, const float *nw, const float *inv, int hd, float p, float eps,
                                 float *buf, double *sh, float *out) {
    for (int i = threadIdx.x; i < hd; i += blockDim.x) buf[i] = src[i];
    __syncthreads();
    if (nw) {
        float r = rms_factor<NT>(buf, hd, eps, sh);
        for (int i = threadIdx.x; i < hd; i += blockDim.x) buf[i] = (buf[i] * r) * nw[i];
        __syncthreads();
    }
    const int half = hd / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float th = p * inv[i], a = buf[i], bb = buf[i + half];
        float s, c;
        sincosf(th, &s, &c);
        out[i] = a * c - bb * s;
        out[i + half] = bb * c + a * s;
    }
    __syncthreads();
}

// att[h] = merge of the S split states of query head h = g * n_rep + r, for query heads rlo .. rhi - 1 of kv head g
// (all n_rep of them but in k_attn_cl, a head a block), divided by the softmax sum (one block, blockDim.x a multiple
// of 32; wt and Ls in shared memory). ld(r, s, e) reads value e of head r's state of split s ({max, sum, sum of exp
// * v}). Warp w finds head rlo + w's common max and each split's weight; then every thread merges its values, each
// value's sum over the splits in split order whatever the block size or the place the states are read from. With
// qo set (the caller checks that a head holds whole quantization blocks: hd % 32 for q8_0, hd % 256 for q8_K) the
// block then quantizes the heads' values as k_quant would over the whole of att (quant_act: the same bits), the
// warps shared out among the heads, reading the values from as ((rhi - rlo) x hd floats of shared memory the merge
// fills beside att: no round trip through L2 for values the block just wrote).
template <class LD>
static __device__ __forceinline__ void merge_heads_t(const LD &ld, float *att, int g, int n_rep, int hd, int S,
                                                     const qout &qo, float (*wt)[MAX_SPLITS], float *Ls, float *as,
                                                     int rlo, int rhi) {
    const int w = threadIdx.x >> 5, nw = blockDim.x >> 5, lane = threadIdx.x & 31;
    for (int r = rlo + w; r < rhi; r += nw) {
        // each lane's splits' max and sum in one round trip (S <= MAX_SPLITS = 64: 2 a lane)
        float mv[MAX_SPLITS / 32], lv[MAX_SPLITS / 32];
#pragma unroll
        for (int j = 0; j < MAX_SPLITS / 32; j++) {
            const int s = lane + 32 * j;
            mv[j] = s < S ? ld(r, s, 0) : -INFINITY;
            lv[j] = s < S ? ld(r, s, 1) : 0.0f;
        }
        float M = -INFINITY;
#pragma unroll
        for (int j = 0; j < MAX_SPLITS / 32; j++) M = fmaxf(M, mv[j]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        float L = 0.0f;
#pragma unroll
        for (int j = 0; j < MAX_SPLITS / 32; j++) {
            const int s = lane + 32 * j;
            if (s >= S) break;
            const float wgt = mv[j] == -INFINITY ? 0.0f : expf(mv[j] - M);
            wt[r][s] = wgt;
            L += lv[j] * wgt;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
        if (lane == 0) Ls[r] = L;
    }
    __syncthreads();
    // (2026-12-05: loading each value's 16 splits at once, 4 or 2 values a thread, measured 15% slower tg128 on an
    // H100, 505 against 599 tok/s: this loop stays)
    for (int idx = threadIdx.x; idx < (rhi - rlo) * hd; idx += blockDim.x) {
        const int r = rlo + idx / hd, e = idx % hd;
        float acc = 0.0f;
#pragma unroll 8
        for (int s = 0; s < S; s++) acc += ld(r, s, 2 + e) * wt[r][s];
        const float v = acc / Ls[r];
        att[((size_t)g * n_rep + r) * hd + e] = v;
        as[idx] = v;
    }
    if (!qo.q0 && !qo.qK) return;
    __syncthreads(); // this block's att values (as: shared), written by its other threads, are visible after it
    const int nh = rhi - rlo, wph = nw >= nh ? nw / nh : 1; /* warps a head */
    for (int r0 = 0; r0 < nh; r0 += nw / wph) {
        const int r = r0 + w / wph, h = g * n_rep + rlo + r;
        if (r >= nh || w / wph >= nw / wph) continue;
        qout o;
        o.q0 = qo.q0 ? qo.q0 + (size_t)h * hd : NULL;
        o.qK = qo.qK ? qo.qK + (size_t)h * hd : NULL;
        o.d0 = qo.d0 + (size_t)h * (hd / 32);
        o.dK = qo.dK + (size_t)h * (hd / 256);
        quant_act(as + (size_t)r * hd, hd, o, w % wph, wph); // the values just written, from shared memory
    }
}

// merge_heads_t over states in part[((g * S + s) * n_rep + r) * (hd + 2)], written by other blocks of this kernel
// (read through L2: __ldcg), all n_rep heads of kv head g in one block.
static __device__ void merge_heads(const float *part, float *att, int g, int n_rep, int hd, int S, const qout &qo,
                                   float (*wt)[MAX_SPLITS], float *Ls, float *as) {
    const size_t st = (size_t)n_rep * (hd + 2);
    auto ld = [&](int r, int s, int e) {
        return __ldcg(part + ((size_t)g * S * n_rep + r) * (hd + 2) + s * st + e);
    };
    merge_heads_t(ld, att, g, n_rep, hd, S, qo, wt, Ls, as, 0, n_rep);
}

// n heads of hd values at src (RoPE, NeoX halves, at position p with inverse frequencies inv) into out[r] (shared
// memory), all heads' pairs at once; for models without a q/k norm (rope_head does the norm first). Ends with a
// barrier.
static __device__ void rope_heads(const float *src, const float *inv, int hd, int n, float p,
                                  float (*out)[32 * MAX_EPL]) {
    const int half = hd / 2;
    for (int idx = threadIdx.x; idx < n * half; idx += blockDim.x) {
        const int r = idx / half, i = idx % half;
        const float th = p * inv[i], a = src[(size_t)r * hd + i], bb = src[(size_t)r * hd + i + half];
        float sn, c;
        sincosf(th, &sn, &c);
        out[r][i] = a * c - bb * sn;
        out[r][i + half] = bb * c + a * sn;
    }
    __syncthreads();
}

// One key row (kv, vv: this lane's EPL values of it) into the online softmax of the block's nr query heads: the
// score (this lane's products, then the warp's xor tree), Gemma 2's soft-cap, the running max, sum and values. k_attn
// and k_pf_attn share it (the prompt path's bits are the token step's).
template <int EPL, int REP>
static __device__ __forceinline__ void split_key(const float (&qr)[REP][EPL], const float (&kv)[EPL],
                                                 const float (&vv)[EPL], int nr, float scale, float softcap,
                                                 float (&mx)[REP], float (&l)[REP], float (&acc)[REP][EPL]) {
#pragma unroll
    for (int r = 0; r < REP; r++) {
        if (r >= nr) break;
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++) d += qr[r][i] * kv[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        float sc = d * scale;
        if (softcap > 0.0f) sc = tanhf(sc / softcap) * softcap;
        const float mn = fmaxf(mx[r], sc), c = expf(mx[r] - mn), p = expf(sc - mn);
        mx[r] = mn;
        l[r] = l[r] * c + p;
#pragma unroll
        for (int i = 0; i < EPL; i++) acc[r][i] = acc[r][i] * c + p * vv[i];
    }
}

// The 4 warps' states of one split (each warp's mx, l, acc) merged into the split's rows at prow (row r of the
// block's heads at prow + r (hd + 2): {max, sum, sum of exp * v}), through shared memory sm, wM, wW: every thread of
// the block calls it (its barriers are the block's); NT = 0: the block is the split's, NT = 128: each 128 threads
// of the block write a split of their own, each with its own sm, wM, wW (k_attn_cl); the caller syncs before sm is
// written again.
template <int EPL, int REP, int NT = 0>
static __device__ __forceinline__ void split_write(float (*sm)[REP][2 + 32 * EPL], float *wM, float (*wW)[4],
                                                   const float (&mx)[REP], const float (&l)[REP],
                                                   const float (&acc)[REP][EPL], int nr, int hd, float *prow) {
    const unsigned tid = NT ? threadIdx.x % NT : threadIdx.x, nt = NT ? NT : blockDim.x;
    const int lane = tid & 31, w = tid >> 5;
#pragma unroll
    for (int r = 0; r < REP; r++) {
        if (r >= nr) break;
        if (lane == 0) {
            sm[w][r][0] = mx[r];
            sm[w][r][1] = l[r];
        }
#pragma unroll
        for (int i = 0; i < EPL; i++)
            if (lane + 32 * i < hd) sm[w][r][2 + lane + 32 * i] = acc[r][i];
    }
    __syncthreads();
    if (tid < nr) { /* each head's common max and the 4 warps' weights, once */
        const int r = tid;
        float M = -INFINITY;
        for (int ww = 0; ww < 4; ww++) M = fmaxf(M, sm[ww][r][0]);
        wM[r] = M;
        for (int ww = 0; ww < 4; ww++) wW[r][ww] = sm[ww][r][0] != -INFINITY ? expf(sm[ww][r][0] - M) : 0.0f;
    }
    __syncthreads();
    for (int idx = tid; idx < nr * (hd + 2); idx += nt) {
        const int r = idx / (hd + 2), e = idx % (hd + 2);
        const float M = wM[r];
        float out;
        if (e == 0)
            out = M;
        else if (M == -INFINITY)
            out = 0.0f;
        else {
            out = 0.0f;
            for (int ww = 0; ww < 4; ww++)
                if (sm[ww][r][0] != -INFINITY) out += sm[ww][r][e] * wW[r][ww];
        }
        prow[(size_t)r * (hd + 2) + e] = out;
    }
}

// One key row's K and V (F16 at kr / vr) into this lane's EPL values of each (0 past hd).
template <int EPL>
static __device__ __forceinline__ void kv_row(float (&kv)[EPL], float (&vv)[EPL], const __half *kr, const __half *vr,
                                              int lane, int hd) {
#pragma unroll
    for (int i = 0; i < EPL; i++) {
        const int e = lane + 32 * i;
        kv[i] = e < hd ? __half2float(kr[e]) : 0.0f;
        vv[i] = e < hd ? __half2float(vr[e]) : 0.0f;
    }
}

// pos's roped key (ks) and its value (vs; G4 with vnorm: times rv, V's RMS factor) as F16 into the cache row kd /
// vd and into kh / vh (the block's copy of what it wrote, read back by its own split); the block's threads share
// the row, then sync.
template <bool G4>
static __device__ __forceinline__ void store_pos_row(const float *ks, const float *vs, float rv, int vnorm, __half *kd,
                                                     __half *vd, __half *kh, __half *vh, int hd) {
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        const __half kb = __float2half_rn(ks[i]);
        __half vb;
        if constexpr (G4)
            vb = __float2half_rn(vnorm ? vs[i] * rv : vs[i]);
        else
            vb = __float2half_rn(vs[i]);
        kd[i] = kb, vd[i] = vb;
        kh[i] = kb, vh[i] = vb;
    }
    __syncthreads(); // kh / vh, written by the block's other threads, are visible after the barrier
}

// One split's key walk for a warp (k_attn's and k_attn_cl's): the nr roped query heads from qs into registers, then
// keys k0 + wl, k0 + wl + 4, ... up to k1, two rows in flight a step (latency, not bandwidth, bounds decode), into the
// warp's online softmax (split_key). load_row(j, key) fills kv[j] / vv[j]; the rows of key kf were requested before
// the wait where pre0 (slot 0) / pre1 (slot 1, key kf + 4 or kf).
template <int EPL, int REP, class LR>
static __device__ __forceinline__ void split_walk(const LR &load_row, const float (&kv)[2][EPL],
                                                  const float (&vv)[2][EPL], const float (*qs)[32 * EPL], int nr,
                                                  int hd, int k0, int k1, int wl, int kf, bool pre0, bool pre1,
                                                  float scale, float softcap, float (&mx)[REP], float (&l)[REP],
                                                  float (&acc)[REP][EPL]) {
    const int lane = threadIdx.x & 31;
    float qr[REP][EPL];
#pragma unroll
    for (int r = 0; r < REP; r++) {
        mx[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            const int e = lane + 32 * i;
            qr[r][i] = r < nr && e < hd ? qs[r][e] : 0.0f;
            acc[r][i] = 0.0f;
        }
    }
    for (int k = k0 + wl; k <= k1; k += 8) {
        const bool two = k + 4 <= k1;
        if (k != kf || !pre0) load_row(0, k);
        if (k != kf || !pre1) load_row(1, two ? k + 4 : k);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            if (j == 1 && !two) break;
            split_key<EPL, REP>(qr, kv[j], vv[j], nr, scale, softcap, mx, l, acc);
        }
    }
}

// 16 bytes from global to shared memory without a register (cp.async, L2 only), its group's end, and the wait until
// at most N of this thread's groups are still in flight.
static __device__ __forceinline__ void cp16(void *sdst, const void *gsrc) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(gsrc) : "memory");
}
static __device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// split_walk with the key rows streamed through shared memory (k_attn_cl's D > 0 form): the warp's keys kf, kf + 4,
// ... (nkw of them) were requested D rows ahead by issue(t) (row t into slot t % D of rb, one group a row, rows
// 0..D-1 before the wait), so D rows are in flight while a key is summed, not two; pos's row (the block's own
// copy) comes through load_pos. The same keys in the same order into the same split_key: split_walk's bits.
template <int EPL, int REP, int D, class IS, class LP>
static __device__ __forceinline__ void split_walk_cp(const IS &issue, const LP &load_pos, const __half *rb,
                                                     const float (*qs)[32 * EPL], int nr, int hd, int kf, int nkw,
                                                     int pos, bool own, float scale, float softcap,
                                                     float (&mx)[REP], float (&l)[REP], float (&acc)[REP][EPL]) {
    const int lane = threadIdx.x & 31;
    float qr[REP][EPL];
#pragma unroll
    for (int r = 0; r < REP; r++) {
        mx[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            const int e = lane + 32 * i;
            qr[r][i] = r < nr && e < hd ? qs[r][e] : 0.0f;
            acc[r][i] = 0.0f;
        }
    }
    float kv[EPL], vv[EPL];
    for (int t = 0; t < nkw; t++) {
        cp_wait<D - 1>(); // row t is in (this lane's part); the warp's barrier shows every lane's
        __syncwarp();
        const int kk = kf + 4 * t;
        if (own && kk == pos)
            load_pos(kv, vv);
        else {
            const __half *sk = rb + (size_t)(t % D) * 64 * EPL;
#pragma unroll
            for (int i = 0; i < EPL; i++) {
                const int e = lane + 32 * i;
                kv[i] = e < hd ? __half2float(sk[e]) : 0.0f;
                vv[i] = e < hd ? __half2float(sk[32 * EPL + e]) : 0.0f;
            }
        }
        __syncwarp(); // every lane has read slot t % D before row t + D is copied into it
        issue(t + D);
        split_key<EPL, REP>(qr, kv, vv, nr, scale, softcap, mx, l, acc);
    }
}

// Attention of one kv head's n_rep query heads over one split of the visible keys (flash-decoding): each warp
// walks keys warp, warp + 4, ... with an online softmax; the 4 warps' states are merged into
// part[((g * S + s) * n_rep + r) * (hd + 2)] = {max, sum, sum of exp * v}. Each block first ropes its n_rep query
// heads from the q/k/v mat-vec's q (rope_head, Gemma 3 q norm), and the block whose split holds pos ropes kv head
// g's key and writes it and the value, as F16, into the position's slot before it reads the keys (no other split
// reads that slot: pos % cap is a position outside every window). The last of kv head g's S blocks to
// finish (a counter a kv head in cnt, zero between launches: that block resets it; threadfence-reduction style)
// then merges the head's n_rep query heads into att (merge_head, with its int8 forms where qo is set).
// Template: EPL values a lane (head_dim <= 32 EPL), REP query heads a block. Gemma 1-3 run k_attn<MAX_EPL, MAX_REP,
// false>, the code as it was before the template (the same bits and order). G4 (Gemma 4, decided per layer on the
// host): a block takes query heads blockIdx.z * REP.. of its kv head (gridDim.z = ceil(n_rep / REP); the counter
// waits for all S x gridDim.z blocks of the kv head), every q head goes through rope_head (q norm when qn is set),
// k NULL: a KV-shared layer (nothing written; kc / vc are its producer's cache), v may be the raw K projection
// (k_eq_v), vnorm: V's weightless RMS norm before it is written (every z block of the split that holds pos writes the
// same row, so each one reads its own write).
template <int EPL, int REP, bool G4>
__global__ void __launch_bounds__(128)
    k_attn(const float *q, const float *k, const float *v, __half *kc, __half *vc, const float *qn, const float *kn,
           const float *inv, float eps, float *part, const int *params, int n_rep, int hd, int cap, int ring,
           int window, float scale, float softcap, float *att, const qout qo, int *cnt, int vnorm, int dbg) {
    __shared__ float sm[4][REP][2 + 32 * EPL];
    __shared__ float qs[REP][32 * EPL], rbuf[32 * EPL], ks[1][32 * EPL];
    __shared__ double rsh[32];
    __shared__ float wt[MAX_REP][MAX_SPLITS], Ls[MAX_REP], wM[REP], wW[REP][4];
    __shared__ int last;
    pdl_start();
    const int g = blockIdx.x, s = blockIdx.y, S = gridDim.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    // pos was written before the step began, and the rows of the keys below it by earlier steps (only k_attn of this
    // layer writes its cache, pos's row in this launch): each warp requests its first two keys' rows before the
    // wait, unless one of them is pos; the same values as loaded after it (2026-12-05: a round trip off the chain)
    const int pos = params[1], lo = window > 0 ? max(0, pos - window + 1) : 0, nk = pos - lo + 1;
    const int per = (nk + S - 1) / S, k0 = lo + s * per, k1 = (dbg & 2) ? k0 - 1 : min(pos, k0 + per - 1);
    const bool own = s == (pos - lo) / per && (!G4 || k); // this split holds pos and this launch writes its row
    // pos's K / V row as written to the cache, in the block that writes it: rbuf's bytes (the RoPE's scratch, free
    // once the key is roped; the wide form has no room for more static shared memory)
    __half *kh = (__half *)rbuf, *vh = kh + 32 * EPL;
    float kv[2][EPL], vv[2][EPL];
    // key kk's row into kv[j] / vv[j]; pos's from shared memory in the block that wrote it (the bytes it wrote to
    // the cache)
    auto load_row = [&](int j, int kk) {
        const int sl = ring ? kk % cap : kk;
        const bool sh = own && kk == pos && !(dbg & 64);
        kv_row<EPL>(kv[j], vv[j], sh ? kh : kc + ((size_t)g * cap + sl) * hd,
                    sh ? vh : vc + ((size_t)g * cap + sl) * hd, lane, hd);
    };
    // the warp's first two keys (kf2 = kf where it has one): each row but pos's requested before the wait
    const int kf = k0 + w, kf2 = kf + 4 <= k1 ? kf + 4 : kf;
    const bool pre0 = !(dbg & 32) && kf <= k1 && kf != pos, pre1 = !(dbg & 32) && kf <= k1 && kf2 != pos;
    if (pre0) load_row(0, kf);
    if (pre1) load_row(1, kf2);
    pdl_wait();
    if (dbg & 1) return; // a diagnostic (pb_cu_model.adiag): wrong results, timing only
    if (own &&
        !(dbg &
          128)) { // the rows of k and v this block ropes and writes below, into L1 while the query heads are roped
        const float *src = threadIdx.x < 64 ? k + (size_t)g * hd : v + (size_t)g * hd;
        const int o = 32 * (threadIdx.x & 63);
        if (threadIdx.x < 128 && o < hd) asm volatile("prefetch.global.L1 [%0];" ::"l"(src + o));
    }
    const int r0 = G4 ? (int)blockIdx.z * REP : 0, nr = G4 ? min(REP, n_rep - r0) : n_rep; // this block's heads
    if constexpr (G4) {
        for (int r = 0; r < nr; r++)
            rope_head(q + ((size_t)g * n_rep + r0 + r) * hd, qn, inv, hd, (float)pos, eps, rbuf, rsh, qs[r]);
    } else if (qn)
        for (int r = 0; r < n_rep; r++)
            rope_head(q + ((size_t)g * n_rep + r) * hd, qn, inv, hd, (float)pos, eps, rbuf, rsh, qs[r]);
    else
        rope_heads(q + (size_t)g * n_rep * hd, inv, hd, n_rep, (float)pos, qs);
    if (own) { // this split holds pos: kv head g's row of this position first
        const int slot = ring ? pos % cap : pos;
        float rv = 1.0f;
        if constexpr (G4) {
            rope_head(k + (size_t)g * hd, kn, inv, hd, (float)pos, eps, rbuf, rsh, ks[0]);
            if (vnorm) rv = rms_factor(v + (size_t)g * hd, hd, eps, rsh);
        } else if (kn)
            rope_head(k + (size_t)g * hd, kn, inv, hd, (float)pos, eps, rbuf, rsh, ks[0]);
        else
            rope_heads(k + (size_t)g * hd, inv, hd, 1, (float)pos, ks);
        store_pos_row<G4>(ks[0], v + (size_t)g * hd, rv, vnorm, kc + ((size_t)g * cap + slot) * hd,
                          vc + ((size_t)g * cap + slot) * hd, kh, vh, hd);
    }
    float acc[REP][EPL], mx[REP], l[REP];
    split_walk<EPL, REP>(load_row, kv, vv, qs, nr, hd, k0, k1, w, kf, pre0, pre1, scale, softcap, mx, l, acc);
    split_write<EPL, REP>(sm, wM, wW, mx, l, acc, nr, hd, part + (((size_t)g * S + s) * n_rep + r0) * (hd + 2));
    __threadfence();
    __syncthreads();
    const int nblk = G4 ? S * (int)gridDim.z : S; // blocks of kv head g
    if (threadIdx.x == 0) last = atomicAdd(&cnt[g], 1) == nblk - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    // sm: free again (every thread is past it); it holds n_rep x hd floats in every instantiated form
    if (!(dbg & 4)) merge_heads(part, att, g, n_rep, hd, S, qo, wt, Ls, &sm[0][0][0]);
    if (threadIdx.x == 0) cnt[g] = 0;
}

// k_attn of Gemma 1-3 with the key splits' merge inside a thread-block cluster (Hopper): the C blocks of kv head g
// form one cluster (grid Hkv x C, cluster 1 x C) and block c runs splits c P .. c P + P - 1 side by side, 128
// threads a split (S = C P; the q / k norms' sums as a 128-thread block's: rope_head<128>), each as k_attn's block
// of that split would; the splits' states stay in the block's shared memory, and after a
// cluster barrier block r (r < n_rep) merges query head r, reading every block's states through distributed shared
// memory: no states through L2, no fence, no counter, no last block, and the merge spread over n_rep blocks. The
// same bits as k_attn: each split's keys, order and per-warp softmax are k_attn's (split_key, split_write), and the
// merge is merge_heads_t's, only its loads come from the cluster. A block whose splits hold no key writes their
// empty states ({-inf, 0, ...}, what a pass over no keys gives) without roping.
template <int EPL, int REP, int P, int D>
__global__ void __launch_bounds__(128 * P)
    k_attn_cl(const float *q, const float *k, const float *v, __half *kc, __half *vc, const float *qn,
              const float *kn, const float *inv, float eps, const int *params, int n_rep, int hd, int cap, int ring,
              int window, float scale, float softcap, float *att, const qout qo, int S, int dbg) {
    __shared__ float sm[P][4][REP][2 + 32 * EPL];
    __shared__ float qs[REP][32 * EPL], rbuf[32 * EPL], ks[1][32 * EPL];
    __shared__ double rsh[32];
    __shared__ float wt[MAX_REP][MAX_SPLITS], Ls[MAX_REP], wM[P][REP], wW[P][REP][4];
    __shared__ float st[P * REP * (2 + 32 * EPL)]; // the splits' states: split j, head r at (j n_rep + r) (hd + 2)
    __shared__ const float *sp[MAX_SPLITS];       // the merging block's view of split s's states (its head's row)
    pdl_start();
    cg::cluster_group cl = cg::this_cluster();
    const int g = blockIdx.x, c = (int)cl.block_rank(), lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int j = w >> 2, wl = w & 3, s = c * P + j; // this warp's split and its warp index in it
    const int pos = params[1], lo = window > 0 ? max(0, pos - window + 1) : 0, nk = pos - lo + 1;
    const int per = (nk + S - 1) / S, ps = (pos - lo) / per; // ps: the split that holds pos
    const bool own = ps >= c * P && ps < c * P + P, has = lo + c * P * per <= pos; // the block's splits
    const int k0 = lo + s * per, k1 = (dbg & 2) ? k0 - 1 : min(pos, k0 + per - 1);
    const size_t srow = (size_t)n_rep * (hd + 2); // one split's states
    __half *kh = (__half *)rbuf, *vh = kh + 32 * EPL;
    float kv[2][EPL], vv[2][EPL];
    auto load_row = [&](int jj, int kk) { // k_attn's
        const int sl = ring ? kk % cap : kk;
        const bool sh = own && kk == pos && !(dbg & 64);
        kv_row<EPL>(kv[jj], vv[jj], sh ? kh : kc + ((size_t)g * cap + sl) * hd,
                    sh ? vh : vc + ((size_t)g * cap + sl) * hd, lane, hd);
    };
    // the warp's first two keys, requested before the wait (k_attn's); in the D form its first D rows, into the
    // warp's ring of D slots in dynamic shared memory (K row, then V row; 32 EPL halves each): rows below pos were
    // written by earlier steps, pos's own is never copied (the block's copy in kh / vh, or, under dbg 64, the cache
    // row read after this block wrote it)
    const int kf = k0 + wl, kf2 = kf + 4 <= k1 ? kf + 4 : kf;
    const int nkw = kf <= k1 ? (k1 - kf) / 4 + 1 : 0; // the warp's keys
    extern __shared__ __align__(16) unsigned char akv_sm[];
    __half *rb = (__half *)akv_sm + (size_t)w * (D > 0 ? D : 1) * 64 * EPL;
    auto issue = [&](int t) {
        if (t < nkw) {
            const int kk = kf + 4 * t, o = 8 * lane;
            if (kk != pos && o < hd) {
                const size_t row = ((size_t)g * cap + (ring ? kk % cap : kk)) * hd;
                __half *dst = rb + (size_t)(t % (D > 0 ? D : 1)) * 64 * EPL;
                cp16(dst + o, kc + row + o);
                cp16(dst + 32 * EPL + o, vc + row + o);
            }
        }
        cp_commit();
    };
    const bool pre0 = D == 0 && !(dbg & 32) && kf <= k1 && kf != pos,
               pre1 = D == 0 && !(dbg & 32) && kf <= k1 && kf2 != pos;
    if (pre0) load_row(0, kf);
    if (pre1) load_row(1, kf2);
    if constexpr (D > 0)
        for (int t = 0; t < D; t++) issue(t);
    if (has && !(dbg & 128)) { // the RoPE's inverse frequencies and the q / k norm weights (constants) into L1
        const int nl = (hd / 2 + 31) / 32, t = threadIdx.x;
        if (t < nl) asm volatile("prefetch.global.L1 [%0];" ::"l"(inv + 32 * t));
        const float *nwp = t < 32 ? qn : kn;
        if (t < 64 && nwp && (t & 31) < (hd + 31) / 32)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(nwp + 32 * (t & 31)));
    }
    pdl_wait();
    if (dbg & 1) { // a diagnostic (pb_cu_model.adiag): wrong results, timing only (every block returns)
        if constexpr (D > 0) cp_wait<0>(); // no copy may land after the block is gone
        return;
    }
    if (!has) {
        for (int idx = threadIdx.x; idx < P * (int)srow; idx += blockDim.x)
            st[idx] = idx % (hd + 2) == 0 ? -INFINITY : 0.0f;
    } else {
        if (own && !(dbg & 128)) {
            const float *src = threadIdx.x < 64 ? k + (size_t)g * hd : v + (size_t)g * hd;
            const int o = 32 * (threadIdx.x & 63);
            if (threadIdx.x < 128 && o < hd) asm volatile("prefetch.global.L1 [%0];" ::"l"(src + o));
        }
        constexpr int RT = P > 1 ? 128 : 0; // the q / k norms' sums as k_attn's 128-thread block's
        if (qn)
            for (int r = 0; r < n_rep; r++)
                rope_head<RT>(q + ((size_t)g * n_rep + r) * hd, qn, inv, hd, (float)pos, eps, rbuf, rsh, qs[r]);
        else
            rope_heads(q + (size_t)g * n_rep * hd, inv, hd, n_rep, (float)pos, qs);
        if (own) { // k_attn's row write of this position
            const int slot = ring ? pos % cap : pos;
            if (kn)
                rope_head<RT>(k + (size_t)g * hd, kn, inv, hd, (float)pos, eps, rbuf, rsh, ks[0]);
            else
                rope_heads(k + (size_t)g * hd, inv, hd, 1, (float)pos, ks);
            store_pos_row<false>(ks[0], v + (size_t)g * hd, 1.0f, 0, kc + ((size_t)g * cap + slot) * hd,
                                 vc + ((size_t)g * cap + slot) * hd, kh, vh, hd);
        }
        float acc[REP][EPL], mx[REP], l[REP];
        if constexpr (D > 0) {
            auto load_pos = [&](float (&kr)[EPL], float (&vr)[EPL]) { // pos's row: load_row's choice of source
                const int sl = ring ? pos % cap : pos;
                const bool sh = !(dbg & 64);
                kv_row<EPL>(kr, vr, sh ? kh : kc + ((size_t)g * cap + sl) * hd,
                            sh ? vh : vc + ((size_t)g * cap + sl) * hd, lane, hd);
            };
            split_walk_cp<EPL, REP, D>(issue, load_pos, rb, qs, n_rep, hd, kf, nkw, pos, own, scale, softcap, mx, l,
                                       acc);
        } else
            split_walk<EPL, REP>(load_row, kv, vv, qs, n_rep, hd, k0, k1, wl, kf, pre0, pre1, scale, softcap, mx, l,
                                 acc);
        split_write<EPL, REP, 128>(sm[j], wM[j], wW[j], mx, l, acc, n_rep, hd, st + j * srow);
    }
    const int r = c; // the query head this block merges (r < n_rep)
    if (r < n_rep && threadIdx.x < S) { // split s's row of head r, in the shared memory of block s / P
        const int s2 = threadIdx.x;
        sp[s2] = cl.map_shared_rank(st, s2 / P) + (s2 % P) * srow + (size_t)r * (hd + 2);
    }
    cl.sync(); // every block's states are written (and sp)
    if (r < n_rep && !(dbg & 4)) {
        auto ld = [&](int, int s2, int e) { return sp[s2][e]; };
        merge_heads_t(ld, att, g, n_rep, hd, S, qo, wt, Ls, &sm[0][0][0][0], r, r + 1);
    }
    cl.sync(); // no block leaves while another may still read its shared memory
}

typedef void (*attn_cl_fn)(const float *, const float *, const float *, __half *, __half *, const float *,
                           const float *, const float *, float, const int *, int, int, int, int, int, float, float,
                           float *, const qout, int, int);

// k_attn_cl's form for n_rep query heads a kv head, P splits a block and D key rows in flight a warp through shared
// memory (0: two in registers; NULL: none instantiated).
template <int D>
static attn_cl_fn attn_cl_kernel_d(int n_rep, int P) {
    if (n_rep <= 2)
        return P == 1   ? k_attn_cl<MAX_EPL, 2, 1, D>
               : P == 2 ? k_attn_cl<MAX_EPL, 2, 2, D>
               : P == 4 ? k_attn_cl<MAX_EPL, 2, 4, D>
                        : NULL;
    return P == 1 ? k_attn_cl<MAX_EPL, 4, 1, D> : NULL; // (4 query heads, 2 splits a block: past 48 KB of shared memory)
}
static attn_cl_fn attn_cl_kernel(int n_rep, int P, int D) {
    return D == 8   ? attn_cl_kernel_d<8>(n_rep, P)
           : D == 4 ? attn_cl_kernel_d<4>(n_rep, P)
                    : attn_cl_kernel_d<0>(n_rep, P);
}

// The dynamic shared memory of k_attn_cl's D form with P splits a block: each warp's ring of D K + V rows.
static size_t attn_cl_smem(int P, int D) { return (size_t)4 * P * D * 64 * MAX_EPL * sizeof(__half); }

// k_attn_cl's cluster size C for S key splits of a Gemma 1-3 step (0: k_attn; S / C splits a block): 16 blocks a
// kv head (a non-portable size, opted into) or else 8, the first that divides S into 1, 2 or 4 splits a block with
// a form for the model's query heads a kv head (2 query heads, Gemma 2 and Gemma 3 from 4b: 16, 32 or 64 splits,
// 32 or 64 by pb_cu_ctx_new's rule; 4 query heads: 16 splits, n_ctx up to 2,175 by k_attn's rule), a block for
// each query head to merge, and that the device can place (cudaOccupancyMaxActiveClusters). PB_CUDA_CL=0 | 8 | 16
// (read at context creation) turns it off or asks for one size (A/B runs). Any refusal leaves k_attn (the same bits).
// *akv (in: the model's PB_CUDA_AKV rows, out: the form's) falls back to 0 where the D form has no place (head_dim
// not a multiple of 8, or its shared memory refused).
static int choose_cl(const pb_cu_model *g, int S, int n_rep, int hd, int *akv) {
    const char *e = getenv("PB_CUDA_CL");
    const int want = e ? atoi(e) : -1;
    if (want == 0 || g->g4 || g->arep_max || n_rep > 4 || hd > 32 * MAX_EPL) return 0;
    // a model with a q / k norm (Gemma 3) takes the forms of several splits a block too since their parity run
    // (2026-12-06, H100: rope_head<128> / rms_factor<128> at 32 and 64 splits on the tiny-gqa2 files, 2,491 / 0
    // each; gemma-3-4b tg128 +8% at 32 splits, +13.5% at 64);
    // PB_CUDA_CL_QK=0 keeps it to one split a block (A/B)
    const char *qe = getenv("PB_CUDA_CL_QK");
    const bool qk = (g->layers[0].q_norm || g->layers[0].k_norm) && qe && atoi(qe) == 0;
    const cudaError_t before = cudaPeekAtLastError(); // an earlier error stays for its own check
    const int d0 = hd % 8 == 0 ? *akv : 0;
    for (int D = d0;; D = 0) {
        for (int C = 16; C >= 8; C /= 2) {
            const int p = S / C;
            attn_cl_fn k = S % C ? NULL : attn_cl_kernel(n_rep, p, D);
            if ((want > 0 && C != want) || !k || n_rep > C || (qk && p > 1)) continue;
            if (C > 8 && cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
                continue;
            const size_t dyn = D ? attn_cl_smem(p, D) : 0;
            if (dyn && cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn) != cudaSuccess)
                continue;
            cudaLaunchAttribute at[1] = {};
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = 1, at[0].val.clusterDim.y = C, at[0].val.clusterDim.z = 1;
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(g->hp.n_head_kv, C);
            cfg.blockDim = dim3(128 * p);
            cfg.dynamicSmemBytes = dyn;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            int n = 0;
            if (cudaOccupancyMaxActiveClusters(&n, (void *)k, &cfg) == cudaSuccess && n >= 1) {
                if (before == cudaSuccess) cudaGetLastError(); // a refused size tried first leaves no error behind
                *akv = D;
                return C;
            }
        }
        if (D == 0) break;
    }
    if (before == cudaSuccess) cudaGetLastError(); // only this function's errors are cleared
    *akv = 0;
    return 0;
}

// ---- greedy argmax of the logits on the device -------------------------------------------------------------

#define AM_T         256       // threads of a k_argmax block
#define AM_PER       16        // values a thread (AM_T x AM_PER a block)
#define AM_MAX_CHECK (1 << 20) // the most values pb_cu_argmax_check takes

// The better of (v, i) and (bv, bi) in pb_sampler's greedy order: the larger value, the lower id on equal values.
// NaN never wins (every compare with it is false); an id stays -1 only while the value is -inf (a value enters only
// when it exceeds the current one, which starts at -inf), so two equal values are both -1 or both real ids.
static __device__ __forceinline__ void am_take(float &bv, int &bi, float v, int i) {
    if (v > bv || (v == bv && (unsigned)i < (unsigned)bi)) bv = v, bi = i;
}

static __device__ void am_block(float &bv, int &bi, float *shv, int *shi) {
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_down_sync(0xffffffffu, bv, o);
        const int i = __shfl_down_sync(0xffffffffu, bi, o);
        am_take(bv, bi, v, i);
    }
    const int w = threadIdx.x / 32, nw = blockDim.x / 32;
    if ((threadIdx.x & 31) == 0) shv[w] = bv, shi[w] = bi;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int k = 1; k < nw; k++) am_take(bv, bi, shv[k], shi[k]);
}

// out[0] = the lowest id of the largest of x[0..n) (NaN never wins; -1 when none exceeds -inf): pb_sampler's greedy
// pick. Each block reduces AM_T x AM_PER values (a thread its values in ascending order, a strict > keeping the
// first), the last block to finish (a counter, zero between launches) reduces the blocks' picks. A grid of y rows
// (a batched step) does this for rows of n values: row y's picks, counter and result at its own offsets.
__global__ void __launch_bounds__(AM_T) k_argmax(const float *x, int n, float *pv, int *pi, int *cnt, int *out) {
    __shared__ float shv[AM_T / 32];
    __shared__ int shi[AM_T / 32];
    __shared__ bool last;
    x += (size_t)blockIdx.y * n, pv += blockIdx.y * gridDim.x, pi += blockIdx.y * gridDim.x;
    cnt += blockIdx.y, out += blockIdx.y;
    float bv = -INFINITY;
    int bi = -1;
    const int base = blockIdx.x * AM_T * AM_PER + threadIdx.x;
    float v[AM_PER];
#pragma unroll
    for (int j = 0; j < AM_PER; j++) v[j] = base + j * AM_T < n ? x[base + j * AM_T] : -INFINITY;
#pragma unroll
    for (int j = 0; j < AM_PER; j++)
        if (v[j] > bv) bv = v[j], bi = base + j * AM_T;
    am_block(bv, bi, shv, shi);
    if (threadIdx.x == 0) {
        pv[blockIdx.x] = bv;
        pi[blockIdx.x] = bi;
        __threadfence();
        last = atomicAdd(cnt, 1) == (int)gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    bv = -INFINITY, bi = -1;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += AM_T) am_take(bv, bi, __ldcg(pv + b), __ldcg(pi + b));
    __syncthreads(); // shv / shi are reused
    am_block(bv, bi, shv, shi);
    if (threadIdx.x == 0) {
        out[0] = bi;
        cnt[0] = 0;
    }
}

static int am_blocks(int n) { return (n + AM_T * AM_PER - 1) / (AM_T * AM_PER); }

// ---- a session's context -------------------------------------------------------------------------------------

struct pb_cu_ctx {
    pb_cu_model *g;
    int n_ctx, S, max_tok;
    int cap[MAX_LAYERS];
    __half *kc[MAX_LAYERS], *vc[MAX_LAYERS];
    size_t kv_bytes[MAX_LAYERS]; // bytes of K (and of V) of a layer
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *logits, *part, *hid, *up, *gcnt_mem, *acnt_mem, *ncnt_mem;
    int *gcnt;                    // k_mv_geglu's blocks done per group of rows (gcnt_mem; zero between launches)
    int *acnt;                    // k_attn's blocks done per kv head (acnt_mem; zero between launches)
    int cl;                       // k_attn_cl's cluster size (blocks a kv head; 0: k_attn): S / cl splits a block
    int akv;                      // k_attn_cl's key rows in flight a warp through shared memory (0: two in registers)
    int *ncnt;                    // blocks done of a mat-vec with the add + norm in its last block (ncnt_mem)
    float *aq0, *ad0, *aqK, *adK; // the current mat-vec input's int8 forms (qout; aq0/aqK hold int8_t)
    // The GeGLU output's int8 forms, made by the GeGLU mat-vec's blocks while others of that launch still read its
    // input's forms in aq0 / aqK: a buffer of their own (qout_geglu), read by the down mat-vec.
    float *gq0, *gd0, *gqK, *gdK;
    float *pli, *ple_g; // Gemma 4 PLE: the step's per-layer inputs [n_layer x P], a layer's gate [P] (0 bytes: none)
    int *params, *all_params; // device: {token, pos}; all tokens of a call
    int *h_params;            // pinned host staging of all_params
    float *h_logits;          // pinned host logits
    cudaStream_t stream;
    cudaGraphExec_t graph_full, graph_body;
    void *mem;
    size_t bytes;
    // greedy argmax on the device (pb_cu_forward_argmax): graph_full + k_argmax; its scratch (block picks, counter,
    // result) and the pinned result, made at the first such call; no_argmax: PB_CUDA_ARGMAX=0 (A/B runs)
    cudaGraphExec_t graph_arg;
    void *am_mem;
    float *am_v;
    int *am_i, *am_cnt, *am_out, *h_am, *am_want;
    int no_argmax;
    // sparse sampling on the device (pb_cu_logits_top, topk.cuh): the blocks' key lists, counter, result and its
    // pinned copy, made at the first call; no_topk: PB_CUDA_TOPK=0 (A/B runs: sampled decode pulls the logits)
    void *tk_mem;
    unsigned long long *tk_part;
    int *tk_cnt, *tk_out, *h_tk;
    int no_topk;
    struct pf_bufs *pf; // prefill scratch (prefill.cuh), made at the first prompt of several tokens
};

static void pf_free(struct pf_bufs *p);
static void bt_forget(const pb_cu_ctx *c);

extern "C" void pb_cu_ctx_free(pb_cu_ctx *c) {
    if (!c) return;
    bt_forget(c);
    pf_free(c->pf);
    if (c->graph_full) cudaGraphExecDestroy(c->graph_full);
    if (c->graph_body) cudaGraphExecDestroy(c->graph_body);
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->mem) cudaFree(c->mem);
    if (c->h_params) cudaFreeHost(c->h_params);
    if (c->h_logits) cudaFreeHost(c->h_logits);
    if (c->graph_arg) cudaGraphExecDestroy(c->graph_arg);
    if (c->am_mem) cudaFree(c->am_mem);
    if (c->h_am) cudaFreeHost(c->h_am);
    if (c->tk_mem) cudaFree(c->tk_mem);
    if (c->h_tk) cudaFreeHost(c->h_tk);
    free(c);
}

extern "C" size_t pb_cu_ctx_bytes(const pb_cu_ctx *c) { return c ? c->bytes : 0; }

extern "C" int pb_cu_ctx_new(pb_cu_model *g, int n_ctx, const int *cap_in, pb_cu_ctx **out, char *err, size_t cap) {
    *out = NULL;
    const pb_cu_desc *hp = &g->hp;
    pb_cu_ctx *c = (pb_cu_ctx *)calloc(1, sizeof *c);
    if (!c) return fail(err, cap, ST_NOMEM, "cuda: out of host memory");
    c->g = g;
    c->n_ctx = n_ctx;
    c->max_tok = 512; /* tokens per staged chunk (hidden rows kept on the device) */
    /* key splits per attention row. k_attn (its splits merged through L2, where more splits cost more): n_ctx / 128
     * in 16..64, enough blocks to keep the chip busy at short contexts too. The cluster form (k_attn_cl) takes 32
     * splits up to n_ctx 1,024 and 64 above, where the model has one: measured 2026-12-07 on an H100 (gemma-2-2b
     * Q4_K_M, the cp.async key rows), tg128 at depth 0 680 / 690 / 676 tok/s with 16 / 32 / 64 splits and at depth
     * 2,048 503 / 558 with 32 / 64 (docs/CUDA.md "Decode at depth"); every path of the context uses c->S, so the
     * bits stay one context's */
    const int n_rep_i = hp->n_head / hp->n_head_kv;
    c->S = n_ctx / 128 < 16 ? 16 : n_ctx / 128 > MAX_SPLITS ? MAX_SPLITS : n_ctx / 128;
    const char *sp = getenv("PB_CUDA_SPLITS"); /* tuning switch (A/B runs): key splits a kv head, 1..64 */
    if (sp && atoi(sp) >= 1 && atoi(sp) <= MAX_SPLITS) c->S = atoi(sp);
    c->akv = g->akv;
    const int deep = n_ctx > 1024 ? 64 : 32;
    c->cl = sp ? 0 : choose_cl(g, deep, n_rep_i, hp->head_dim, &c->akv);
    if (c->cl)
        c->S = deep;
    else {
        c->akv = g->akv;
        c->cl = choose_cl(g, c->S, n_rep_i, hp->head_dim, &c->akv);
    }
    const size_t hd = (size_t)hp->head_dim, kvd = (size_t)hp->n_head_kv * hd, qd = (size_t)hp->n_head * hd;
    const size_t n_rep = (size_t)(hp->n_head / hp->n_head_kv);
    size_t kmax = (size_t)hp->n_embd > qd ? (size_t)hp->n_embd : qd;
    if ((size_t)hp->n_ff > kmax) kmax = (size_t)hp->n_ff;
    const size_t P = g->g4 ? (size_t)hp->n_embd_per_layer : 0; /* Gemma 4 PLE width (scalars: the layer maxima) */
    if (P > kmax) kmax = P;
    size_t fl[] = {(size_t)hp->n_embd,
                   (size_t)hp->n_embd,
                   qd,
                   kvd,
                   kvd,
                   qd,
                   (size_t)hp->n_embd,
                   (size_t)hp->n_ff,
                   (size_t)hp->n_vocab,
                   (size_t)hp->n_head_kv * (size_t)c->S * n_rep * (hd + 2),
                   (size_t)c->max_tok * (size_t)hp->n_embd,
                   kmax / 4 + 1,
                   kmax / 32 + 1,
                   kmax / 4 + 1,
                   kmax / 256 + 1,
                   (size_t)hp->n_ff,
                   (size_t)hp->n_ff / 32 + 1,
                   (size_t)hp->n_head_kv + 1,
                   1,
                   (size_t)hp->n_ff / 4 + 1,
                   (size_t)hp->n_ff / 32 + 1,
                   (size_t)hp->n_ff / 4 + 1,
                   (size_t)hp->n_ff / 256 + 1,
                   (size_t)hp->n_layer * P,
                   P};
    size_t total = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        c->cap[il] = cap_in[il];
        /* the host cache's rows: Gemma 4 layers of their own width (none on KV-shared layers: cap 0) */
        const size_t kvl = g->g4 ? (size_t)g->layers[il].hkv * (size_t)g->layers[il].hd : kvd;
        c->kv_bytes[il] = (size_t)cap_in[il] * kvl * sizeof(__half);
        total += 2 * ((c->kv_bytes[il] + 255) / 256 * 256);
    }
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) total += (fl[i] * sizeof(float) + 255) / 256 * 256;
    total += 256 + (size_t)c->max_tok * 2 * sizeof(int) + 256;
    size_t fr = 0, tot = 0;
    cudaError_t e = cudaMemGetInfo(&fr, &tot);
    if (e != cudaSuccess) {
        free(c);
        return fail(err, cap, ST_INTERNAL, "cuda: cudaMemGetInfo: %s", cudaGetErrorString(e));
    }
    if (total + ((size_t)128 << 20) > fr) {
        free(c);
        return fail(err, cap, ST_MEMLIMIT,
                    "cuda: the KV cache and scratch of %d positions need %zu MiB of GPU memory "
                    "but only %zu MiB are free",
                    n_ctx, total >> 20, fr >> 20);
    }
    int st = ST_OK;
    uint8_t *p;
#define CT(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            st = fail(err, cap, e_ == cudaErrorMemoryAllocation ? ST_MEMLIMIT : ST_INTERNAL, "cuda: %s: %s", #call,    \
                      cudaGetErrorString(e_));                                                                         \
            goto bad;                                                                                                  \
        }                                                                                                              \
    } while (0)
    CT(cudaMalloc(&c->mem, total));
    c->bytes = total;
    CT(cudaMemset(c->mem, 0, total));
    p = (uint8_t *)c->mem;
    for (int il = 0; il < hp->n_layer; il++) {
        c->kc[il] = (__half *)p;
        p += (c->kv_bytes[il] + 255) / 256 * 256;
        c->vc[il] = (__half *)p;
        p += (c->kv_bytes[il] + 255) / 256 * 256;
    }
    {
        float **bufs[] = {&c->x,    &c->xn,     &c->q,        &c->k,        &c->v,        &c->att, &c->o,
                          &c->gate, &c->logits, &c->part,     &c->hid,      &c->aq0,      &c->ad0, &c->aqK,
                          &c->adK,  &c->up,     &c->gcnt_mem, &c->acnt_mem, &c->ncnt_mem, &c->gq0, &c->gd0,
                          &c->gqK,  &c->gdK,    &c->pli,      &c->ple_g};
        for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
            *bufs[i] = (float *)p;
            p += (fl[i] * sizeof(float) + 255) / 256 * 256;
        }
    }
    c->gcnt = (int *)c->gcnt_mem;
    c->acnt = (int *)c->acnt_mem;
    c->ncnt = (int *)c->ncnt_mem;
    c->params = (int *)p;
    p += 256;
    c->all_params = (int *)p;
    CT(cudaMallocHost(&c->h_params, (size_t)c->max_tok * 2 * sizeof(int)));
    CT(cudaMallocHost(&c->h_logits, (size_t)hp->n_vocab * sizeof(float)));
    CT(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    {
        const char *am = getenv("PB_CUDA_ARGMAX"); /* tuning switch (A/B runs): 0 = logits to the host sampler */
        c->no_argmax = am && atoi(am) == 0;
        const char *tk = getenv("PB_CUDA_TOPK"); /* tuning switch (A/B runs): 0 = sampled decode pulls the logits */
        c->no_topk = tk && atoi(tk) == 0;
    }
    *out = c;
    return ST_OK;
bad:
    pb_cu_ctx_free(c);
    return st;
#undef CT
}

static qout qout_of(const pb_cu_ctx *c) {
    qout o;
    o.q0 = c->g->int8 && c->g->need0 ? (int8_t *)c->aq0 : NULL;
    o.qK = c->g->int8 && c->g->needK ? (int8_t *)c->aqK : NULL;
    o.d0 = c->ad0;
    o.dK = c->adK;
    return o;
}

// Where the GeGLU mat-vec's groups put its output's int8 forms (see pb_cu_ctx.gq0).
static qout qout_geglu(const pb_cu_ctx *c) {
    qout o = qout_of(c);
    o.q0 = o.q0 ? (int8_t *)c->gq0 : NULL;
    o.qK = o.qK ? (int8_t *)c->gqK : NULL;
    o.d0 = c->gd0;
    o.dK = c->gdK;
    return o;
}

// One mat-vec on x (whose int8 forms are in the context's buffers when the model is on the int8 path).
static mv_args mv1(const pb_cu_ctx *c, const dmat &a, float *ya, const float *x) {
    mv_args m;
    memset(&m, 0, sizeof m);
    m.mat[0] = a;
    m.y[0] = ya;
    m.n_mat = 1;
    m.x = x;
    m.int8 = c->g->int8;
    m.pdl = c->g->pdl;
    m.pf = c->g->pf;
    m.pro = c->g->pro;
    m.xa.q0 = (const int8_t *)c->aq0;
    m.xa.d0 = c->ad0;
    m.xa.qK = (const int8_t *)c->aqK;
    m.xa.dK = c->adK;
    return m;
}

// PB_CUDA_EMPTY=1 (a diagnostic, pb_cu_model.empty): set while such a model's token step is captured; launch_k
// then launches k_nop with the kernel's grid instead of the kernel.
static thread_local bool tl_empty = false;
__global__ void k_nop() {
    pdl_start();
    pdl_wait();
}

// Launches kernel k on stream s, with the programmatic-dependent-launch attribute when pdl (see pb_cu_model.pdl).
template <typename... P, typename... A>
static void launch_k(bool pdl, void (*k)(P...), dim3 grid, dim3 block, cudaStream_t s, A... args) {
    if (tl_empty) {
        tl_empty = false;
        launch_k(pdl, k_nop, grid, block, s);
        tl_empty = true;
        return;
    }
    if (!pdl) {
        k<<<grid, block, 0, s>>>(args...);
        return;
    }
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, k, args...); /* errors surface at the end of the graph capture */
}

// launch_k for a kernel of clusters of 1 x C x 1 blocks of `threads` (k_attn_cl), with PDL as launch_k.
template <typename... P, typename... A>
static void launch_cl(bool pdl, void (*k)(P...), dim3 grid, int threads, int C, size_t smem, cudaStream_t s,
                      A... args) {
    if (tl_empty) {
        tl_empty = false;
        launch_k(pdl, k_nop, grid, threads, s);
        tl_empty = true;
        return;
    }
    cudaLaunchAttribute at[2] = {};
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 1, at[0].val.clusterDim.y = C, at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 2 : 1;
    cudaLaunchKernelEx(&cfg, k, args...); /* errors surface at the end of the graph capture */
}

// The int8 forms of x[0..K) (one warp per 32 values; nothing when the float path is chosen).
static void launch_quant(const pb_cu_ctx *c, const float *x, int K, cudaStream_t s) {
    if (!c->g->int8 || K < 32) return;
    const int warps = K / 32, nb = (warps + 3) / 4;
    launch_k(c->g->pdl, k_quant, nb, 128, s, x, K, qout_of(c));
}

// y_i = W_i x (or the GeGLU) by the kernel of the matrices' types: one launch where one is instantiated for the
// mix, else one launch a matrix (a GeGLU of two types: up into tmp, then k_geglu).
static void launch_mv(const mv_args &a0, float *tmp, cudaStream_t s) {
    mv_args a = a0;
    a.sw = a.mat[0].sw ? a.mat[0].sw : 32;
    const bool i8 = a.int8 != 0, pdl = a.pdl != 0;
    const int rb = 32 * MV_WARPS / a.sw; /* rows a block */
    const int ta = a.mat[0].type;
    mv_kernel k = NULL;
    int rows = a.mat[0].N;
    if (a.geglu)
        k = a.mat[1].type == ta ? mv_pick(ta, ta, i8, true) : NULL;
    else if (a.n_mat == 1 || a.mat[1].type == ta) {
        k = mv_pick(ta, a.n_mat > 2 ? a.mat[2].type : ta, i8, false);
        for (int i = 1; i < a.n_mat; i++) rows += a.mat[i].N;
    }
    if (k) {
        launch_k(pdl, k, (rows + rb - 1) / rb, 32 * MV_WARPS, s, a);
        return;
    }
    for (int i = 0; i < a.n_mat; i++) {
        mv_args b = a;
        b.mat[0] = a.mat[i];
        b.y[0] = a.geglu && i == 1 ? tmp : a.y[i];
        b.n_mat = 1;
        b.geglu = 0;
        b.sw = b.mat[0].sw ? b.mat[0].sw : 32;
        b.nx = NULL; /* a fused add + norm only where one launch runs (enqueue_step asks for it with n_mat 1) */
        k = mv_pick(b.mat[0].type, b.mat[0].type, i8, false); /* every uploaded type has its kernel */
        const int rbb = 32 * MV_WARPS / b.sw;
        launch_k(pdl, k, (b.mat[0].N + rbb - 1) / rbb, 32 * MV_WARPS, s, b);
    }
    if (a.geglu) launch_k(pdl, k_geglu, (a.mat[0].N + 255) / 256, 256, s, a.y[0], (const float *)tmp, a.mat[0].N);
    if (a.geglu && (a.yq.q0 || a.yq.qK)) // the fused quantization asked for, done apart here
        launch_k(pdl, k_quant, (a.mat[0].N / 32 + 3) / 4, 128, s, (const float *)a.y[0], a.mat[0].N, a.yq);
}

// Layer L's GeGLU mat-vec (gate and up at width F, on xn, into c->gate) in *gu and the down mat-vec on its output
// (into c->o) in *dn. Where the types and F allow (the returned value), the GeGLU's last block of each group of rows
// quantizes the group (q8_K groups of 256, else q8_0 of 32) into buffers of its own, gq0 / gqK (the launch's other
// blocks may still be reading its input's forms in aq0 / aqK), which down reads; else a k_quant of c->gate must run
// between the two. Gemma 1-3's step and Gemma 4's alike.
static bool ffn_args(const pb_cu_ctx *c, const pb_cu_layer_d *L, int F, mv_args *gu, mv_args *dn) {
    *gu = mv1(c, L->gate, c->gate, c->xn);
    gu->mat[1] = L->up;
    gu->n_mat = 2;
    gu->geglu = 1;
    const qout gq = qout_of(c);
    const int G = gq.qK ? 256 : 32;
    const bool qfuse = !c->g->no_gq && (gq.q0 || gq.qK) && F % G == 0 && G % (32 * MV_WARPS / L->gate.sw) == 0;
    *dn = mv1(c, L->down, c->o, c->gate);
    if (qfuse) {
        gu->yq = qout_geglu(c), gu->cnt = c->gcnt, gu->qgroup = G;
        dn->xa = qact{(const int8_t *)c->gq0, c->gd0, (const int8_t *)c->gqK, c->gdK};
    }
    return qfuse;
}

// The mat-vec m (one matrix, into c->o), then x += [RMSNorm(o; post_w)] o and xn = RMSNorm(x; next_w) with xn's int8
// forms: as k_add_norm after it, or in the mat-vec's last block (mv_args.nx) where PB_CUDA_FUSE=1.
// mvbit: the mat-vec's bit of pb_cu_model.skip (a diagnostic; 0 for Gemma 4's step).
static void add_norm(pb_cu_ctx *c, mv_args m, const float *post_w, const float *next_w, int nt, cudaStream_t s,
                     int mvbit = 0) {
    const pb_cu_model *g = c->g;
    if (!g->fuse) {
        if (!(g->skip & mvbit)) launch_mv(m, c->up, s);
        if (!(mvbit && (g->skip & 1)))
            launch_k(g->pdl != 0, k_add_norm, 1, nt, s, c->x, (const float *)c->o, post_w, next_w, c->xn, g->hp.n_embd,
                     g->hp.norm_eps, qout_of(c));
        return;
    }
    m.nx = c->x;
    m.nxn = c->xn;
    m.npost = post_w;
    m.nnext = next_w;
    m.nd = g->hp.n_embd;
    m.neps = g->hp.norm_eps;
    m.nq = qout_of(c);
    m.ncnt = c->ncnt;
    launch_mv(m, c->up, s);
}

// ---- Gemma 4's token step (the CPU's forward.c block(), ple_inputs(), ple_block()) ----------------------------------

// The per-layer inputs of the step's token into c->pli (after k_embed: x the scaled embedding, xn its norm with xn's
// int8 forms): x's int8 forms, the projection, k_ple_in, then xn's forms again for the first layer's q/k/v.
static void enqueue_ple_in(pb_cu_ctx *c, cudaStream_t s) {
    const pb_cu_model *g = c->g;
    const pb_cu_desc *hp = &g->hp;
    const int P = hp->n_embd_per_layer, d = hp->n_embd;
    launch_quant(c, c->x, d, s);
    launch_mv(mv1(c, g->ple_proj, c->pli, c->x), c->up, s);
    const float ps = 1.0f / sqrtf((float)d), ts = sqrtf((float)P), r2 = 1.0f / sqrtf(2.0f);
    launch_k(g->pdl != 0, k_ple_in, hp->n_layer, 128, s, c->pli, g->ple_tok, (const int *)c->params,
             (const float *)g->ple_proj_norm, P, ps, ts, r2, hp->norm_eps);
    launch_quant(c, c->xn, d, s);
}

// Layer il's attention: q (and k, v where it has its own cache; V = the raw K on k_eq_v layers) then k_attn over
// the cache of kv_src, the narrow form for head_dim <= 256, the wide one (WIDE_REP heads a block) above.
static void enqueue_attn_g4(pb_cu_ctx *c, int il, cudaStream_t s) {
    const pb_cu_model *g = c->g;
    const pb_cu_desc *hp = &g->hp;
    const pb_cu_layer_d *L = &g->layers[il];
    const int hd = L->hd, hkv = L->hkv, n_rep = hp->n_head / hkv, src = L->kv_src;
    const bool own = src == il, keqv = own && L->wv.N == 0;
    mv_args a = mv1(c, L->wq, c->q, c->xn);
    if (own) {
        a.mat[1] = L->wk, a.y[1] = c->k, a.n_mat = 2;
        if (!keqv) a.mat[2] = L->wv, a.y[2] = c->v, a.n_mat = 3;
    }
    launch_mv(a, c->up, s);
    qout mq = qout_of(c);
    const bool fuse = !g->no_mq && (!mq.q0 || hd % 32 == 0) && (!mq.qK || hd % 256 == 0);
    if (!fuse) mq.q0 = NULL, mq.qK = NULL;
    const pb_cu_layer_d *Ls = &g->layers[src];
    const float *k = own ? c->k : NULL, *v = keqv ? c->k : c->v, *kn = own ? L->k_norm : NULL;
    const float *inv = L->swa ? g->rope_l : g->rope_g;
    const int ring = Ls->swa ? 1 : 0, win = L->swa ? hp->sliding_window : 0;
    if (hd <= 32 * MAX_EPL)
        launch_k(g->pdl != 0, k_attn<MAX_EPL, MAX_REP, true>, dim3(hkv, c->S, 1), 128, s, (const float *)c->q, k, v,
                 c->kc[src], c->vc[src], (const float *)L->q_norm, kn, inv, hp->norm_eps, c->part,
                 (const int *)c->params, n_rep, hd, c->cap[src], ring, win, hp->query_scale, hp->attn_softcap, c->att,
                 mq, c->acnt, g->hp.v_norm, g->adiag & 224);
    else
        launch_k(g->pdl != 0, k_attn<WIDE_EPL, WIDE_REP, true>, dim3(hkv, c->S, (n_rep + WIDE_REP - 1) / WIDE_REP), 128,
                 s, (const float *)c->q, k, v, c->kc[src], c->vc[src], (const float *)L->q_norm, kn, inv, hp->norm_eps,
                 c->part, (const int *)c->params, n_rep, hd, c->cap[src], ring, win, hp->query_scale, hp->attn_softcap,
                 c->att, mq, c->acnt, g->hp.v_norm, g->adiag & 224);
    if (!fuse) launch_quant(c, c->att, hp->n_head * hd, s);
}

// Layer il after the attention: o + post-attention norm + residual + pre-FFN norm, the GeGLU and down mat-vecs, the
// post-FFN norm and residual, the PLE block (gelu(inp_gate x) * pli[il], proj, its post norm, residual), the layer
// output scale, the next norm (k_g4_add).
static void enqueue_ffn_g4(pb_cu_ctx *c, int il, int nt, cudaStream_t s) {
    const pb_cu_model *g = c->g;
    const pb_cu_desc *hp = &g->hp;
    const pb_cu_layer_d *L = &g->layers[il];
    const bool pdl = g->pdl != 0;
    const int d = hp->n_embd, P = hp->n_embd_per_layer, F = L->gate.N;
    add_norm(c, mv1(c, L->wo, c->o, c->att), L->post_attn_norm, L->ffn_norm, nt, s);
    mv_args gu, dn;
    const bool qfuse = ffn_args(c, L, F, &gu, &dn);
    launch_mv(gu, c->up, s);
    if (!qfuse) launch_quant(c, c->gate, F, s);
    launch_mv(dn, c->up, s);
    const float *next = il + 1 < hp->n_layer ? g->layers[il + 1].attn_norm : g->output_norm;
    const float *post = L->post_ffw_norm;
    if (L->inp_gate.N > 0) {
        launch_k(pdl, k_g4_add, 1, nt, s, c->x, (const float *)c->o, post, 1.0f, (const float *)NULL, c->xn, d,
                 hp->norm_eps, qout_of(c));
        launch_mv(mv1(c, L->inp_gate, c->ple_g, c->x), c->up, s);
        launch_k(pdl, k_geglu, (P + 255) / 256, 256, s, c->ple_g, (const float *)c->pli + (size_t)il * P, P);
        launch_quant(c, c->ple_g, P, s);
        launch_mv(mv1(c, L->proj, c->o, c->ple_g), c->up, s);
        post = L->ple_post_norm;
    }
    launch_k(pdl, k_g4_add, 1, nt, s, c->x, (const float *)c->o, post, L->out_scale, next, c->xn, d, hp->norm_eps,
             qout_of(c));
}

static void enqueue_step_g4(pb_cu_ctx *c, bool with_output, int nt) {
    const pb_cu_model *g = c->g;
    const pb_cu_desc *hp = &g->hp;
    cudaStream_t s = c->stream;
    launch_k(g->pdl != 0, k_embed, 1, nt, s, g->tok_embd, (const int *)c->params, hp->embd_scale, c->x,
             (const float *)g->layers[0].attn_norm, c->xn, hp->n_embd, hp->norm_eps, qout_of(c));
    if (hp->n_embd_per_layer > 0) enqueue_ple_in(c, s);
    for (int il = 0; il < hp->n_layer; il++) {
        enqueue_attn_g4(c, il, s);
        enqueue_ffn_g4(c, il, nt, s);
    }
    if (with_output) {
        mv_args a = mv1(c, g->output, c->logits, c->xn);
        a.softcap = hp->final_softcap;
        launch_mv(a, c->up, s);
    }
}

// Enqueues one token step (params already in c->params); with_output adds the output mat-vec.
static void enqueue_step(pb_cu_ctx *c, bool with_output) {
    const pb_cu_model *g = c->g;
    const pb_cu_desc *hp = &g->hp;
    cudaStream_t s = c->stream;
    const int d = hp->n_embd, H = hp->n_head, Hkv = hp->n_head_kv, hd = hp->head_dim, n_rep = H / Hkv;
    int nt = d >= 1024 ? 1024 : (d + 31) / 32 * 32;          /* 256 measured slower (13.5 vs 7.9 us a norm, run 5) */
    if (g->normt && d <= NORM_NPT * g->normt) nt = g->normt; /* PB_CUDA_NORMT (A/B runs) */
    if (g->g4) { /* Gemma 4: per-layer geometry, KV sharing, PLE (a step of its own; Gemma 1-3 below unchanged) */
        enqueue_step_g4(c, with_output, nt);
        return;
    }
    const bool pdl = g->pdl != 0;
    launch_k(pdl, k_embed, 1, nt, s, g->tok_embd, (const int *)c->params, hp->embd_scale, c->x,
             (const float *)g->layers[0].attn_norm, c->xn, d, hp->norm_eps, qout_of(c));
    for (int il = 0; il < hp->n_layer; il++) {
        const pb_cu_layer_d *L = &g->layers[il];
        mv_args a = mv1(c, L->wq, c->q, c->xn);
        a.mat[1] = L->wk;
        a.y[1] = c->k;
        a.mat[2] = L->wv;
        a.y[2] = c->v;
        a.n_mat = 3;
        if (!(g->skip & 4)) launch_mv(a, c->up, s);
        const int ring = L->swa ? 1 : 0; /* slot = pos % cap (cap = min(window, n_ctx)), as the host cache */
        // the merge (in k_attn's last block of each kv head) quantizes att itself where each head holds whole
        // q8_0 / q8_K blocks (Gemma 2/3: head_dim 256)
        qout mq = qout_of(c);
        const bool fuse = !g->no_mq && (!mq.q0 || hd % 32 == 0) && (!mq.qK || hd % 256 == 0);
        if (!fuse) mq.q0 = NULL, mq.qK = NULL;
        // query heads a block sized to the model's (the same sums: each head's are its own; fewer registers); the
        // splits' merge in a cluster where choose_cl found one (k_attn_cl: the same bits)
        if (g->skip & 2) {
        } else if (c->cl) {
            launch_cl(pdl, attn_cl_kernel(n_rep, c->S / c->cl, c->akv), dim3(Hkv, c->cl), 128 * (c->S / c->cl), c->cl,
                      c->akv ? attn_cl_smem(c->S / c->cl, c->akv) : 0, s,
                      (const float *)c->q, (const float *)c->k,
                      (const float *)c->v, c->kc[il], c->vc[il], (const float *)L->q_norm, (const float *)L->k_norm,
                      (const float *)(L->swa ? g->rope_l : g->rope_g), hp->norm_eps, (const int *)c->params, n_rep,
                      hd, c->cap[il], ring, L->swa ? hp->sliding_window : 0, hp->query_scale, hp->attn_softcap,
                      c->att, mq, c->S, g->adiag);
        } else {
            void (*ka)(const float *, const float *, const float *, __half *, __half *, const float *, const float *,
                       const float *, float, float *, const int *, int, int, int, int, int, float, float, float *,
                       const qout, int *, int, int) = g->arep_max  ? k_attn<MAX_EPL, MAX_REP, false>
                                                      : n_rep <= 2 ? k_attn<MAX_EPL, 2, false>
                                                      : n_rep <= 4 ? k_attn<MAX_EPL, 4, false>
                                                                   : k_attn<MAX_EPL, MAX_REP, false>;
            launch_k(pdl, ka, dim3(Hkv, c->S), 128, s, (const float *)c->q, (const float *)c->k, (const float *)c->v,
                     c->kc[il], c->vc[il], (const float *)L->q_norm, (const float *)L->k_norm,
                     (const float *)(L->swa ? g->rope_l : g->rope_g), hp->norm_eps, c->part, (const int *)c->params,
                     n_rep, hd, c->cap[il], ring, L->swa ? hp->sliding_window : 0, hp->query_scale, hp->attn_softcap,
                     c->att, mq, c->acnt, 0, g->adiag);
        }
        if (!fuse) launch_quant(c, c->att, H * hd, s);
        add_norm(c, mv1(c, L->wo, c->o, c->att), L->post_attn_norm, L->ffn_norm, nt, s, 8);
        mv_args gu, dn;
        const bool qfuse = ffn_args(c, L, hp->n_ff, &gu, &dn);
        if (!(g->skip & 16)) launch_mv(gu, c->up, s);
        if (!qfuse) launch_quant(c, c->gate, hp->n_ff, s);
        const float *next = il + 1 < hp->n_layer ? g->layers[il + 1].attn_norm : g->output_norm;
        add_norm(c, dn, L->post_ffw_norm, next, nt, s, 32);
    }
    if (with_output && !(g->skip & 64)) {
        mv_args a = mv1(c, g->output, c->logits, c->xn);
        a.softcap = hp->final_softcap;
        launch_mv(a, c->up, s);
    }
}

// The argmax of the logits into c->am_out (after the output mat-vec).
static void enqueue_argmax(pb_cu_ctx *c, const float *x, int n) {
    k_argmax<<<am_blocks(n), AM_T, 0, c->stream>>>(x, n, c->am_v, c->am_i, c->am_cnt, c->am_out);
}

static int capture(pb_cu_ctx *c, bool with_output, cudaGraphExec_t *out, char *err, size_t cap) {
    cudaGraph_t graph;
    CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    tl_empty = c->g->empty != 0;
    enqueue_step(c, with_output);
    tl_empty = false;
    if (out == &c->graph_arg) enqueue_argmax(c, c->logits, c->g->hp.n_vocab);
    CU(cudaStreamEndCapture(c->stream, &graph));
    cudaError_t e = cudaGraphInstantiate(out, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) return fail(err, cap, ST_INTERNAL, "cuda: graph instantiate: %s", cudaGetErrorString(e));
    return ST_OK;
}

#include "cuda/prefill.cuh"

extern "C" int pb_cu_forward(pb_cu_ctx *c, int pos, const int32_t *tokens, int n, float *logits, float *hidden,
                             int all_logits, const volatile int *cancel, int *n_done, char *err, size_t cap) {
    *n_done = 0;
    const pb_cu_desc *hp = &c->g->hp;
    int st;
    // a prompt: chunks of tokens at once (prefill.cuh), unless its scratch does not fit (then token steps)
    if (n > 1 && pf_usable(c, false) && (c->pf || pf_alloc(c, PF_NC, c->S, &c->pf, err, cap) == ST_OK))
        return pf_forward(c, pos, tokens, n, logits, hidden, all_logits, cancel, n_done, err, cap);
    if (!c->graph_full && (st = capture(c, true, &c->graph_full, err, cap))) return st;
    if (!c->graph_body && (st = capture(c, false, &c->graph_body, err, cap))) return st;
    const size_t V = (size_t)hp->n_vocab;
    for (int t0 = 0; t0 < n; t0 += c->max_tok) {
        const int m = n - t0 < c->max_tok ? n - t0 : c->max_tok;
        CU(cudaStreamSynchronize(c->stream)); // the staging buffer is free again
        for (int i = 0; i < m; i++) {
            c->h_params[2 * i] = tokens[t0 + i];
            c->h_params[2 * i + 1] = pos + t0 + i;
        }
        CU(cudaMemcpyAsync(c->all_params, c->h_params, (size_t)m * 2 * sizeof(int), cudaMemcpyHostToDevice, c->stream));
        for (int i = 0; i < m; i++) {
            const int t = t0 + i;
            if (cancel && *cancel) {
                CU(cudaStreamSynchronize(c->stream));
                return fail(err, cap, ST_CANCELLED, "cuda: cancelled after %d tokens", t);
            }
            const bool out = all_logits || t == n - 1;
            CU(cudaMemcpyAsync(c->params, c->all_params + 2 * i, 2 * sizeof(int), cudaMemcpyDeviceToDevice, c->stream));
            const bool am = out && c->am_want; // pb_cu_forward_argmax: the argmax, the logits stay here
            CU(cudaGraphLaunch(am ? c->graph_arg : out ? c->graph_full : c->graph_body, c->stream));
            if (hidden)
                CU(cudaMemcpyAsync(c->hid + (size_t)i * hp->n_embd, c->xn, (size_t)hp->n_embd * sizeof(float),
                                   cudaMemcpyDeviceToDevice, c->stream));
            if (am) {
                CU(cudaMemcpyAsync(c->h_am, c->am_out, sizeof(int), cudaMemcpyDeviceToHost, c->stream));
                CU(cudaStreamSynchronize(c->stream));
                *c->am_want = *c->h_am;
            } else if (out) {
                CU(cudaMemcpyAsync(c->h_logits, c->logits, V * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
                CU(cudaStreamSynchronize(c->stream));
                memcpy(logits + (all_logits ? (size_t)t * V : 0), c->h_logits, V * sizeof(float));
            }
            *n_done = t + 1;
        }
        if (hidden) {
            CU(cudaMemcpyAsync(hidden + (size_t)t0 * hp->n_embd, c->hid, (size_t)m * hp->n_embd * sizeof(float),
                               cudaMemcpyDeviceToHost, c->stream));
            CU(cudaStreamSynchronize(c->stream));
        }
    }
    CU(cudaStreamSynchronize(c->stream));
    CU(cudaGetLastError());
    return ST_OK;
}

// The argmax scratch and graph (once a context).
static int argmax_ready(pb_cu_ctx *c, char *err, size_t cap) {
    if (c->graph_arg) return ST_OK;
    const int nv = c->g->hp.n_vocab, nb = am_blocks(nv > AM_MAX_CHECK ? nv : AM_MAX_CHECK); // the test hook's too
    if (!c->am_mem) {
        CU(cudaMalloc(&c->am_mem, (size_t)nb * 8 + 256));
        CU(cudaMemset(c->am_mem, 0, (size_t)nb * 8 + 256));
        c->am_v = (float *)c->am_mem;
        c->am_i = (int *)(c->am_v + nb);
        c->am_cnt = c->am_i + nb;
        c->am_out = c->am_cnt + 32;
    }
    if (!c->h_am) CU(cudaMallocHost(&c->h_am, sizeof(int)));
    int st = capture(c, true, &c->graph_arg, err, cap);
    if (st && c->graph_arg) cudaGraphExecDestroy(c->graph_arg), c->graph_arg = NULL;
    return st;
}

extern "C" int pb_cu_has_argmax(const pb_cu_ctx *c) { return c && !c->no_argmax; }

extern "C" int pb_cu_forward_argmax(pb_cu_ctx *c, int pos, const int32_t *tokens, int n, int32_t *top, float *hidden,
                                    char *err, size_t cap) {
    if (c->no_argmax) return fail(err, cap, ST_INVALID, "cuda: the argmax on the device is off (PB_CUDA_ARGMAX=0)");
    int st = argmax_ready(c, err, cap), done = 0;
    if (st) return st;
    int got = -1;
    c->am_want = &got;
    st = pb_cu_forward(c, pos, tokens, n, NULL, hidden, 0, NULL, &done, err, cap);
    c->am_want = NULL;
    if (!st) *top = got;
    return st;
}

extern "C" int pb_cu_logits_download(pb_cu_ctx *c, float *logits, char *err, size_t cap) {
    CU(cudaStreamSynchronize(c->stream));
    CU(cudaMemcpy(logits, c->logits, (size_t)c->g->hp.n_vocab * sizeof(float), cudaMemcpyDeviceToHost));
    return ST_OK;
}

extern "C" int pb_cu_argmax_check(pb_cu_ctx *c, const float *x, int n, int32_t *top, char *err, size_t cap) {
    if (n < 1 || n > AM_MAX_CHECK) return fail(err, cap, ST_INVALID, "cuda: argmax check of %d values", n);
    int st = argmax_ready(c, err, cap);
    if (st) return st;
    float *d = NULL; // a test hook: its own buffer (allocated per call), so the logits stay as they were
    CU(cudaMalloc(&d, (size_t)n * sizeof(float)));
    // on the context's stream: a synchronous cudaMemcpy from pageable memory may return before its DMA lands, and
    // the (non-blocking) stream is not ordered after the legacy one (the first run read stale values at 256k)
    cudaError_t e = cudaMemcpyAsync(d, x, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) {
        enqueue_argmax(c, d, n);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(c->h_am, c->am_out, sizeof(int), cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    cudaFree(d);
    if (e != cudaSuccess) return fail(err, cap, ST_INTERNAL, "cuda: argmax check: %s", cudaGetErrorString(e));
    *top = *c->h_am;
    return ST_OK;
}

#include "cuda/topk.cuh"
#include "cuda/batch.cuh"

extern "C" int pb_cu_kv_download(pb_cu_ctx *c, int il, void *k, void *v, size_t bytes, char *err, size_t cap) {
    if (bytes > c->kv_bytes[il])
        return fail(err, cap, ST_INVALID, "cuda: layer %d KV holds %zu bytes", il, c->kv_bytes[il]);
    CU(cudaStreamSynchronize(c->stream));
    CU(cudaMemcpy(k, c->kc[il], bytes, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(v, c->vc[il], bytes, cudaMemcpyDeviceToHost));
    return ST_OK;
}

extern "C" int pb_cu_kv_upload(pb_cu_ctx *c, int il, const void *k, const void *v, size_t bytes, char *err,
                               size_t cap) {
    if (bytes > c->kv_bytes[il])
        return fail(err, cap, ST_INVALID, "cuda: layer %d KV holds %zu bytes", il, c->kv_bytes[il]);
    // on the context's stream, then waited for: a synchronous cudaMemcpy from pageable memory may return before its
    // DMA lands, and the token steps' non-blocking stream is not ordered after the legacy stream it would use
    CU(cudaMemcpyAsync(c->kc[il], k, bytes, cudaMemcpyHostToDevice, c->stream));
    CU(cudaMemcpyAsync(c->vc[il], v, bytes, cudaMemcpyHostToDevice, c->stream));
    CU(cudaStreamSynchronize(c->stream));
    return ST_OK;
}
