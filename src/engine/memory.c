/* memory.c -- memory estimate (weights + KV + scratch) from a GGUF header, and admission against the
 * memory available (MemAvailable, cgroup v1/v2, or an explicit limit). Touches no weights. */
#include "engine/engine.h"

#include <stdio.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

static size_t kv_row_bytes(int64_t n, pb_kv_type type) {
    switch (type) {
    case PB_KV_F32: return (size_t)n * 4;
    case PB_KV_Q8_0: return (size_t)((n + 31) / 32) * 34; /* 32 int8 + one f16 scale per block */
    case PB_KV_F16: break;
    }
    return (size_t)n * 2;
}

int pb_engine_kv_layer_cells(const pb_hparams *hp, int il, int n_ctx, int ring_extra) {
    if (hp->sliding_window > 0 && hp->swa_layer[il] && hp->sliding_window + (int64_t)ring_extra < n_ctx)
        return hp->sliding_window + ring_extra;
    return n_ctx;
}

/* Bytes of one position's K and V in layer il (0 for a Gemma 4 KV-shared layer). */
static size_t kv_pos_bytes(const pb_hparams *hp, int il, pb_kv_type type) {
    /* per layer: Gemma 4 head dims and KV heads differ, KV-shared layers hold nothing */
    int64_t width = hp->kv_src[il] == il ? (int64_t)hp->n_head_kv_l[il] * hp->head_dim_l[il] : 0;
    return 2 * kv_row_bytes(width, type); /* K and V */
}

size_t pb_engine_kv_layer_bytes(const pb_hparams *hp, int il, int n_ctx, pb_kv_type type, int ring_extra) {
    return (size_t)pb_engine_kv_layer_cells(hp, il, n_ctx, ring_extra) * kv_pos_bytes(hp, il, type);
}

size_t pb_engine_kv_estimate(const pb_hparams *hp, int n_ctx, pb_kv_type type, int ring_extra) {
    size_t total = 0;
    for (int il = 0; il < hp->n_layer; il++) total += pb_engine_kv_layer_bytes(hp, il, n_ctx, type, ring_extra);
    return total;
}

int pb_engine_ring_extra(const pb_hparams *hp, const pb_session_params *p) {
    const int asked = p->ring_extra > 0 ? p->ring_extra : 0;
    /* thinking exists on Gemma 4 alone (pb_session_new refuses it elsewhere) */
    if (!p->think || p->keep_thoughts || hp->arch != PB_ARCH_GEMMA4 || hp->sliding_window <= 0) return asked;
    size_t row = 0; /* one position's bytes over every ring layer */
    for (int il = 0; il < hp->n_layer; il++)
        if (hp->swa_layer[il]) row += kv_pos_bytes(hp, il, p->kv_type);
    if (row == 0) return asked;
    size_t budget = PB_MAX((size_t)64 << 20, row * (size_t)hp->sliding_window);
    return PB_MAX(asked, (int)PB_MIN((size_t)PB_THINK_RING_EXTRA, budget / row));
}

size_t pb_engine_scratch_estimate(const pb_hparams *hp, int n_ctx, int n_batch) {
    size_t nb = (size_t)n_batch, d = (size_t)hp->n_embd, f = (size_t)hp->n_ff;
    size_t q = (size_t)hp->n_head * hp->head_dim, kv = (size_t)hp->n_head_kv * hp->head_dim;
    /* forward buffers per token (residual, normed, q, k, v, attention out, projection, FFN gate/up,
     * hidden, RoPE tables) + quantized activations for the matmuls (<= 2 bytes per value) */
    size_t widest = PB_MAX(PB_MAX(d, f), q);
    size_t act = nb * ((5 * d + 2 * q + 2 * kv + 2 * f + 2 * (size_t)hp->head_dim) * 4 + widest * 2);
    /* sliding-window layers stash the chunk's K/V rows (attention is online: no n_ctx-sized scores) */
    int n_swa = 0;
    for (int il = 0; il < hp->n_layer; il++) n_swa += hp->sliding_window > 0 && hp->swa_layer[il];
    size_t stash = (size_t)n_swa * 2 * nb * kv * 4;
    size_t tiles = pb_forward_tiles_bytes(hp, n_ctx, n_batch);          /* prefill attention: K/V rows as floats */
    size_t logits = 2 * (size_t)hp->n_vocab * 4;                        /* forward's + the session's */
    act += nb * (size_t)hp->n_layer * (size_t)hp->n_embd_per_layer * 4; /* Gemma 4 per-layer inputs */
    size_t session = pb_sampler_bytes(hp->n_vocab) + (size_t)n_ctx * 8 + PB_STOP_BUF_CAP;
    return act + stash + tiles + logits + session + (4u << 20); /* + thread stacks, tables, slack */
}

pb_status pb_engine_resolve_n_ctx(const pb_hparams *hp, int requested, int *n_ctx) {
    int c = requested > 0 ? requested : (hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    *n_ctx = c;
    if (requested < 0 || c < 2) /* the default from a model's context_length of 1 too, named as such */
        return pb_error(PB_ERR_INVALID_ARG, "n_ctx %d%s is too small (at least 2)", requested ? requested : c,
                        requested ? "" : " (the model's context_length)");
    if (hp->n_ctx_train > 0 && c > hp->n_ctx_train)
        return pb_error(PB_ERR_INVALID_ARG, "n_ctx %d exceeds the model's training context %d", c, hp->n_ctx_train);
    return PB_OK;
}

/* The n_ctx and n_batch pb_session_new would use; refuses an n_ctx it would refuse (same message). */
static pb_status resolve(const pb_hparams *hp, const pb_session_params *p, int *n_ctx, int *n_batch) {
    pb_status st = pb_engine_resolve_n_ctx(hp, p->n_ctx, n_ctx);
    if (st != PB_OK) return st;
    int b = p->n_batch > 0 ? p->n_batch : PB_DEFAULT_N_BATCH;
    if (b > *n_ctx) b = *n_ctx;
    *n_batch = b;
    return PB_OK;
}

static size_t total_for(const pb_hparams *hp, size_t weights, int n_ctx, int n_batch, pb_kv_type type, int extra) {
    return weights + pb_engine_kv_estimate(hp, n_ctx, type, extra) +
           pb_engine_scratch_estimate(hp, n_ctx, n_batch < n_ctx ? n_batch : n_ctx);
}

/* Largest n_ctx in [1, limit] whose total fits in avail (0 if none). The total grows with n_ctx. */
static int max_fit(const pb_hparams *hp, size_t weights, int n_batch, pb_kv_type type, int extra, size_t avail,
                   int limit) {
    if (total_for(hp, weights, 1, n_batch, type, extra) > avail) return 0;
    int lo = 1, hi = limit;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (total_for(hp, weights, mid, n_batch, type, extra) <= avail)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The estimate for a session of params p at n_ctx with a KV cache of type (p's, or the one --fit chose). */
static void fill(pb_mem_estimate *e, const pb_hparams *hp, size_t weights, int n_ctx, int n_batch, pb_kv_type type,
                 const pb_session_params *p, size_t avail) {
    pb_session_params pt = *p;
    pt.kv_type = type;
    int extra = pb_engine_ring_extra(hp, &pt);
    e->weights = weights;
    e->kv = pb_engine_kv_estimate(hp, n_ctx, type, extra);
    e->scratch = pb_engine_scratch_estimate(hp, n_ctx, n_batch);
    e->total = e->weights + e->kv + e->scratch;
    e->available = avail;
    e->n_ctx = n_ctx;
    e->kv_type = type;
    int limit = hp->n_ctx_train > 0 ? hp->n_ctx_train : n_ctx;
    e->max_n_ctx = max_fit(hp, weights, n_batch, type, extra, avail, limit);
}

static pb_status open_header(const char *path, pb_gguf **g, pb_hparams *hp, size_t *weights) {
    pb_status st = pb_gguf_open(path, g);
    if (st != PB_OK) return st;
    st = pb_hparams_from_gguf(*g, hp);
    if (st != PB_OK) {
        pb_gguf_close(*g);
        *g = NULL;
        return st;
    }
    size_t w = 0;
    for (int64_t i = 0; i < pb_gguf_n_tensors(*g); i++) w += pb_gguf_tensor_at(*g, i)->nbytes;
    *weights = w;
    return PB_OK;
}

/* What pb_session_new would refuse before it reads the model (n_ctx against the model: resolve()). */
static pb_status check_params(const char *fn, const pb_session_params *p) {
    if (p->n_ctx < 0) return pb_error(PB_ERR_INVALID_ARG, "%s: n_ctx %d is negative", fn, p->n_ctx);
    if (p->n_batch < 0) return pb_error(PB_ERR_INVALID_ARG, "%s: n_batch %d is negative", fn, p->n_batch);
    if (p->kv_type != PB_KV_F16 && p->kv_type != PB_KV_Q8_0 && p->kv_type != PB_KV_F32)
        return pb_error(PB_ERR_INVALID_ARG, "%s: unknown kv_type %d", fn, (int)p->kv_type);
    if (p->ring_extra < 0 || p->ring_extra > (1 << 24))
        return pb_error(PB_ERR_INVALID_ARG, "%s: ring_extra %d is outside 0..16777216", fn, p->ring_extra);
    return PB_OK;
}

pb_status pb_estimate_memory(const char *model_path, const pb_session_params *params, size_t mem_limit,
                             pb_mem_estimate *out) {
    if (!model_path || !out)
        return pb_error(PB_ERR_INVALID_ARG, "pb_estimate_memory: %s is NULL", !out ? "out" : "model_path");
    memset(out, 0, sizeof *out);
    pb_session_params p = params ? *params : pb_session_default_params();
    pb_status st = check_params("pb_estimate_memory", &p);
    if (st != PB_OK) return st;
    pb_gguf *g;
    pb_hparams hp;
    size_t weights;
    st = open_header(model_path, &g, &hp, &weights);
    if (st != PB_OK) return st;
    int n_ctx, n_batch;
    pb_gguf_close(g);
    if ((st = resolve(&hp, &p, &n_ctx, &n_batch)) != PB_OK) return st;
    fill(out, &hp, weights, n_ctx, n_batch, p.kv_type, &p, mem_limit > 0 ? mem_limit : pb_mem_available());
    return PB_OK;
}

static const char *kv_name(pb_kv_type t) { return t == PB_KV_Q8_0 ? "q8_0" : t == PB_KV_F32 ? "f32" : "f16"; }

pb_status pb_session_admit(const char *model_path, pb_session_params *params, size_t mem_limit, bool fit,
                           pb_mem_estimate *out) {
    if (!model_path || !params)
        return pb_error(PB_ERR_INVALID_ARG, "pb_session_admit: %s is NULL", !params ? "params" : "model_path");
    pb_mem_estimate local, *e = out ? out : &local;
    memset(e, 0, sizeof *e);
    pb_status st = check_params("pb_session_admit", params);
    if (st != PB_OK) return st;
    pb_gguf *g;
    pb_hparams hp;
    size_t weights;
    st = open_header(model_path, &g, &hp, &weights);
    if (st != PB_OK) return st;
    pb_gguf_close(g);
    size_t avail = mem_limit > 0 ? mem_limit : pb_mem_available();
    int n_ctx, n_batch;
    if ((st = resolve(&hp, params, &n_ctx, &n_batch)) != PB_OK) return st;
    fill(e, &hp, weights, n_ctx, n_batch, params->kv_type, params, avail);
    if (avail == 0) return PB_OK; /* unknown: nothing to compare with */
    if (e->total <= avail) return PB_OK;
    if (!fit && e->max_n_ctx < 1) /* no context at all fits: "use --ctx 0" (the default context) was no advice */
        return pb_error(PB_ERR_MEMORY_LIMIT,
                        "needs %.0f MiB (weights %.0f + KV %.0f for n_ctx %d %s + scratch %.0f) but %.0f MiB are "
                        "available: the weights and scratch alone do not fit, at any n_ctx (use a smaller model or "
                        "quantization, or free memory / raise the limit)",
                        (double)e->total / MIB, (double)e->weights / MIB, (double)e->kv / MIB, n_ctx,
                        kv_name(params->kv_type), (double)e->scratch / MIB, (double)avail / MIB);
    if (!fit)
        return pb_error(PB_ERR_MEMORY_LIMIT,
                        "needs %.0f MiB (weights %.0f + KV %.0f for n_ctx %d %s + scratch %.0f) but %.0f MiB are "
                        "available; the largest n_ctx that fits is %d (use --ctx %d, a q8_0 KV cache, or --fit)",
                        (double)e->total / MIB, (double)e->weights / MIB, (double)e->kv / MIB, n_ctx,
                        kv_name(params->kv_type), (double)e->scratch / MIB, (double)avail / MIB, e->max_n_ctx,
                        e->max_n_ctx);
    /* fit: a Q8_0 cache first (about half the KV bytes, little quality loss), then a shorter context */
    pb_kv_type type = params->kv_type;
    if (type != PB_KV_Q8_0) {
        fill(e, &hp, weights, n_ctx, n_batch, PB_KV_Q8_0, params, avail);
        type = PB_KV_Q8_0;
    }
    int ctx = n_ctx;
    if (e->total > avail) {
        ctx = e->max_n_ctx >= 256 ? e->max_n_ctx / 256 * 256 : e->max_n_ctx;
        int min_ctx = hp.n_ctx_train > 0 && hp.n_ctx_train < 256 ? hp.n_ctx_train : 256;
        if (ctx < min_ctx) {
            return pb_error(PB_ERR_MEMORY_LIMIT,
                            "does not fit even with --fit: weights %.0f MiB + KV and scratch for n_ctx %d need more "
                            "than the %.0f MiB available (largest n_ctx with a q8_0 KV cache: %d)",
                            (double)weights / MIB, min_ctx, (double)avail / MIB, e->max_n_ctx);
        }
        fill(e, &hp, weights, ctx, n_batch < ctx ? n_batch : ctx, type, params, avail);
    }
    e->adjusted = true;
    params->kv_type = type;
    params->n_ctx = ctx;
    if (params->n_batch > ctx) params->n_batch = ctx;
    return PB_OK;
}
