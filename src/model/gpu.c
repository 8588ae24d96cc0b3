/* gpu.c -- the model room's side of the GPU seam: describes a loaded model to the backend (cuda/pb_cuda.h) in
 * host pointers, attaches a session's KV cache, and runs pb_forward's tokens there. Without CUDA the backend is
 * src/cuda/stub.c and every call reports "built without CUDA". */
#include "model/gpu.h"
#include "cuda/pb_cuda.h"
#include "tensor/types.h"

#include <stdio.h>
#include <stdlib.h>

static pb_cu_mat cmat(const pb_wmat *w) {
    pb_cu_mat c = {w->t->data, w->t->type, w->t->ne[0], w->t->ne[1]}; /* the file's rows (never repacked ones) */
    return c;
}

pb_status pb_model_gpu_attach(pb_model *m) {
    if (m->params.gpu == 0) return PB_OK;
    const pb_hparams *hp = &m->hp;
    if (hp->arch == PB_ARCH_GEMMA4) { /* per-layer geometry, PLE, KV sharing and MoE are CPU-only so far */
        static const char why[] = "the GPU backend runs Gemma 1/2/3; Gemma 4 runs on the CPU";
        if (m->params.gpu > 0) return pb_error(PB_ERR_UNSUPPORTED, "gpu: %s", why);
        snprintf(m->info.gpu_note, sizeof m->info.gpu_note, "%s", why);
        return PB_OK;
    }
    pb_cu_layer *ls = pb_calloc((size_t)hp->n_layer, sizeof *ls);
    if (!ls) return PB_ERR_NOMEM;
    for (int il = 0; il < hp->n_layer; il++) {
        const pb_layer_w *w = &m->layers[il];
        ls[il] = (pb_cu_layer){cmat(&w->wq),     cmat(&w->wk),   cmat(&w->wv), cmat(&w->wo),          cmat(&w->gate),
                               cmat(&w->up),     cmat(&w->down), w->attn_norm, w->post_attn_norm,     w->ffn_norm,
                               w->post_ffw_norm, w->q_norm,      w->k_norm,    hp->swa_layer[il] != 0};
    }
    pb_cu_desc d = {hp->n_layer,
                    hp->n_embd,
                    hp->n_head,
                    hp->n_head_kv,
                    hp->head_dim,
                    hp->n_ff,
                    hp->n_vocab,
                    hp->sliding_window,
                    hp->norm_eps,
                    hp->attn_softcap,
                    hp->final_softcap,
                    hp->query_scale,
                    m->embd_scale,
                    m->rope_inv_global,
                    m->rope_inv_local,
                    cmat(&m->tok_embd),
                    cmat(&m->output),
                    m->output_norm,
                    ls};
    char err[320];
    struct pb_cu_model *g = NULL;
    int st = pb_cu_model_open(&d, &g, err, sizeof err);
    free(ls);
    if (st) {
        if (m->params.gpu > 0) return pb_error((pb_status)st, "gpu: %s", err);
        snprintf(m->info.gpu_note, sizeof m->info.gpu_note, "%.180s", err); /* auto: the CPU runs it */
        return PB_OK;
    }
    m->gpu = g;
    m->info.gpu = true;
    snprintf(m->info.gpu_name, sizeof m->info.gpu_name, "%s", pb_cu_device_name(g));
    return PB_OK;
}

void pb_model_gpu_detach(pb_model *m) {
    pb_cu_model_free(m->gpu);
    m->gpu = NULL;
}

pb_status pb_kv_gpu_attach(const pb_model *m, pb_kv_cache *kv) {
    if (!m->gpu) return PB_OK;
    if (kv->st != PB_TYPE_F16)
        return pb_error(PB_ERR_UNSUPPORTED, "gpu: the GPU KV cache is f16 only (asked for %s; use --no-gpu for it)",
                        pb_type_name(kv->st));
    char err[320];
    int st = pb_cu_ctx_new(m->gpu, kv->n_ctx, kv->cap, &kv->gpu, err, sizeof err);
    return st ? pb_error((pb_status)st, "gpu: %s", err) : PB_OK;
}

pb_status pb_gpu_forward(pb_kv_cache *kv, const int32_t *tokens, int n, float *logits, bool all_logits, float *hidden) {
    char err[320];
    int done = 0;
    /* no cancel inside: a ring slot written by a token is gone, so a call runs to its end (the session polls
     * cancel between its chunks) and the cache stays as the CPU contract says */
    int st = pb_cu_forward(kv->gpu, kv->n_past, tokens, n, logits, hidden, all_logits, NULL, &done, err, sizeof err);
    return st ? pb_error((pb_status)st, "gpu: %s", err) : PB_OK;
}

bool pb_gpu_has_top(const pb_kv_cache *kv) { return kv->gpu && pb_cu_has_argmax(kv->gpu); }

pb_status pb_gpu_forward_top(pb_kv_cache *kv, const int32_t *tokens, int n, int32_t *top, float *hidden) {
    char err[320];
    int st = pb_cu_forward_argmax(kv->gpu, kv->n_past, tokens, n, top, hidden, err, sizeof err);
    return st ? pb_error((pb_status)st, "gpu: %s", err) : PB_OK;
}

bool pb_gpu_has_logits_top(const pb_kv_cache *kv) { return kv->gpu && pb_cu_has_logits_top(kv->gpu); }

pb_status pb_gpu_logits_top(pb_kv_cache *kv, int m, const int32_t *gather, int ng, int32_t *ids, float *vals,
                            float *gvals) {
    char err[320];
    int st = pb_cu_logits_top(kv->gpu, m, gather, ng, ids, vals, gvals, err, sizeof err);
    return st ? pb_error((pb_status)st, "gpu: %s", err) : PB_OK;
}

pb_status pb_gpu_forward_batch(pb_kv_cache *const *kvs, const int32_t *tokens, int n, float *logits, int32_t *top) {
    char err[320];
    pb_cu_ctx *cs[PB_CU_BATCH_MAX];
    int pos[PB_CU_BATCH_MAX];
    if (n < 1 || n > PB_CU_BATCH_MAX)
        return pb_error(PB_ERR_INVALID_ARG, "gpu: batch of %d sequences (1..%d)", n, (int)PB_CU_BATCH_MAX);
    for (int i = 0; i < n; i++) {
        cs[i] = kvs[i]->gpu;
        pos[i] = kvs[i]->n_past;
    }
    int st = pb_cu_forward_batch(cs, pos, tokens, n, logits, top, err, sizeof err);
    return st ? pb_error((pb_status)st, "gpu: %s", err) : PB_OK;
}

pb_status pb_gpu_pull_logits(pb_kv_cache *kv, float *logits) {
    char err[320];
    int st = pb_cu_logits_download(kv->gpu, logits, err, sizeof err);
    return st ? pb_error((pb_status)st, "gpu: %s", err) : PB_OK;
}

pb_status pb_kv_gpu_pull(const pb_kv_cache *kv) {
    if (!kv->gpu) return PB_OK;
    char err[320];
    for (int il = 0; il < kv->n_layer; il++) {
        int st =
            pb_cu_kv_download(kv->gpu, il, kv->k[il], kv->v[il], kv->row_bytes * (size_t)kv->cap[il], err, sizeof err);
        if (st) return pb_error((pb_status)st, "gpu: %s", err);
    }
    return PB_OK;
}

pb_status pb_kv_gpu_push(pb_kv_cache *kv) {
    if (!kv->gpu) return PB_OK;
    char err[320];
    for (int il = 0; il < kv->n_layer; il++) {
        int st =
            pb_cu_kv_upload(kv->gpu, il, kv->k[il], kv->v[il], kv->row_bytes * (size_t)kv->cap[il], err, sizeof err);
        if (st) return pb_error((pb_status)st, "gpu: %s", err);
    }
    return PB_OK;
}
