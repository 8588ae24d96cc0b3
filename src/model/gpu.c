/* gpu.c -- the model room's side of the GPU seam: describes a loaded model to the backend (cuda/pb_cuda.h) in
 * host pointers, attaches a session's KV cache, and runs pb_forward's tokens there. Without CUDA the backend is
 * src/cuda/stub.c and every call reports "built without CUDA". */
#include "model/gpu.h"
#include "cuda/pb_cuda.h"
#include "tensor/types.h"

#include <stdio.h>
#include <stdlib.h>

static pb_cu_mat cmat(const pb_wmat *w) {
    if (!w->t) return (pb_cu_mat){NULL, 0, 0, 0}; /* Gemma 4: no K/V on KV-shared layers, no V on k_eq_v ones */
    pb_cu_mat c = {w->t->data, w->t->type, w->t->ne[0], w->t->ne[1]}; /* the file's rows (never repacked ones) */
    return c;
}

/* Refuses what the GPU step does not run (Gemma 4 MoE layers) by name: gpu = 1 fails, auto leaves the model on the
 * CPU with the reason in info.gpu_note. Returns true when the model may go to the GPU. */
static bool gpu_runs(pb_model *m, pb_status *st) {
    *st = PB_OK;
    for (int il = 0; il < m->hp.n_layer; il++) {
        if (!m->layers[il].gate_inp.t) continue;
        char why[160];
        snprintf(why, sizeof why, "the GPU backend does not run Gemma 4 MoE layers (blk.%d.ffn_gate_inp, %d experts)",
                 il, m->hp.n_expert);
        if (m->params.gpu > 0) *st = pb_error(PB_ERR_UNSUPPORTED, "gpu: %s", why);
        snprintf(m->info.gpu_note, sizeof m->info.gpu_note, "%s; the model runs on the CPU", why);
        return false;
    }
    return true;
}

static pb_cu_layer layer_desc(const pb_model *m, int il) {
    const pb_hparams *hp = &m->hp;
    const pb_layer_w *w = &m->layers[il];
    return (pb_cu_layer){
        cmat(&w->wq),        cmat(&w->wk),   cmat(&w->wv),   cmat(&w->wo),           cmat(&w->gate),
        cmat(&w->up),        cmat(&w->down), w->attn_norm,   w->post_attn_norm,      w->ffn_norm,
        w->post_ffw_norm,    w->q_norm,      w->k_norm,      hp->swa_layer[il] != 0, hp->head_dim_l[il],
        hp->n_head_kv_l[il], hp->n_ff_l[il], hp->kv_src[il], cmat(&w->inp_gate),     cmat(&w->proj),
        w->ple_post_norm,    w->out_scale};
}

pb_status pb_model_gpu_attach(pb_model *m) {
    if (m->params.gpu == 0) return PB_OK;
    const pb_hparams *hp = &m->hp;
    pb_status rs;
    if (!gpu_runs(m, &rs)) return rs;
    pb_cu_layer *ls = pb_calloc((size_t)hp->n_layer, sizeof *ls);
    if (!ls) return PB_ERR_NOMEM;
    for (int il = 0; il < hp->n_layer; il++) ls[il] = layer_desc(m, il);
    const bool g4 = hp->arch == PB_ARCH_GEMMA4;
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
                    ls,
                    g4,
                    hp->hd_swa,
                    hp->hd_full,
                    g4 && hp->has_v_norm,
                    hp->n_embd_per_layer,
                    cmat(&m->ple_tok),
                    cmat(&m->ple_proj),
                    m->ple_proj_norm};
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
            pb_cu_kv_download(kv->gpu, il, kv->k[il], kv->v[il], kv->row_b[il] * (size_t)kv->cap[il], err, sizeof err);
        if (st) return pb_error((pb_status)st, "gpu: %s", err);
    }
    return PB_OK;
}

pb_status pb_kv_gpu_push(pb_kv_cache *kv) {
    if (!kv->gpu) return PB_OK;
    char err[320];
    for (int il = 0; il < kv->n_layer; il++) {
        int st =
            pb_cu_kv_upload(kv->gpu, il, kv->k[il], kv->v[il], kv->row_b[il] * (size_t)kv->cap[il], err, sizeof err);
        if (st) return pb_error((pb_status)st, "gpu: %s", err);
    }
    return PB_OK;
}
