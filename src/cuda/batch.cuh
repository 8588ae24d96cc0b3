// batch.cuh -- pb_cu_forward_batch: one decode step for n sequences at once (continuous batching), included by
// backend.cu after prefill.cuh. First correct step: each row runs its context's own one-token graph (graph_arg /
// graph_full, so its bits are the one-token step's by construction) on that context's stream, all rows enqueued
// before any is waited for, so the n steps overlap on the device; a batched mat-mat over the rows (k_pf_mm) with
// per-row attention is the next step (docs/CUDA.md, "Batched decode").

extern "C" int pb_cu_forward_batch(pb_cu_ctx *const *cs, const int *pos, const int32_t *tokens, int n, float *logits,
                                   int32_t *top, char *err, size_t cap) {
    if (!cs || !pos || !tokens || n < 1 || n > PB_CU_BATCH_MAX)
        return fail(err, cap, ST_INVALID, "cuda: a batch of %d rows (1..%d)", n, (int)PB_CU_BATCH_MAX);
    for (int i = 0; i < n; i++) {
        const pb_cu_ctx *c = cs[i];
        if (!c) return fail(err, cap, ST_INVALID, "cuda: batch row %d has no context", i);
        if (c->g != cs[0]->g) return fail(err, cap, ST_INVALID, "cuda: batch row %d is of another model", i);
        for (int j = 0; j < i; j++)
            if (cs[j] == c) return fail(err, cap, ST_INVALID, "cuda: batch rows %d and %d share a context", j, i);
        if (pos[i] < 0 || pos[i] >= c->n_ctx)
            return fail(err, cap, ST_INVALID, "cuda: batch row %d at position %d of a %d-position context", i, pos[i],
                        c->n_ctx);
        if (tokens[i] < 0 || tokens[i] >= c->g->hp.n_vocab)
            return fail(err, cap, ST_INVALID, "cuda: batch row %d: token %d of %d", i, (int)tokens[i],
                        c->g->hp.n_vocab);
        if (top && c->no_argmax)
            return fail(err, cap, ST_INVALID, "cuda: the argmax on the device is off (PB_CUDA_ARGMAX=0)");
    }
    int st;
    for (int i = 0; i < n; i++) { // graphs and argmax scratch, made once a context (before any row runs)
        pb_cu_ctx *c = cs[i];
        if (top && (st = argmax_ready(c, err, cap))) return st;
        if (!top && !c->graph_full && (st = capture(c, true, &c->graph_full, err, cap))) return st;
        CU(cudaStreamSynchronize(c->stream)); // its pinned staging is free
    }
    const size_t V = (size_t)cs[0]->g->hp.n_vocab;
    for (int i = 0; i < n; i++) {
        pb_cu_ctx *c = cs[i];
        c->h_params[0] = tokens[i];
        c->h_params[1] = pos[i];
        CU(cudaMemcpyAsync(c->params, c->h_params, 2 * sizeof(int), cudaMemcpyHostToDevice, c->stream));
        CU(cudaGraphLaunch(top ? c->graph_arg : c->graph_full, c->stream));
        if (top) CU(cudaMemcpyAsync(c->h_am, c->am_out, sizeof(int), cudaMemcpyDeviceToHost, c->stream));
        if (logits) CU(cudaMemcpyAsync(c->h_logits, c->logits, V * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
    }
    for (int i = 0; i < n; i++) {
        pb_cu_ctx *c = cs[i];
        CU(cudaStreamSynchronize(c->stream));
        if (top) top[i] = *c->h_am;
        if (logits) memcpy(logits + (size_t)i * V, c->h_logits, V * sizeof(float));
    }
    CU(cudaGetLastError());
    return ST_OK;
}
