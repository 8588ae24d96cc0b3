/* forward_batch_tmp.c -- TEMPORARY stand-in for pb_forward_batch (model.h) on branch h-a2: one one-token pb_forward
 * (or pb_forward_top) per cache, so the engine's batcher and its tests run before the real batched pass lands.
 * Same contract and results, none of the speed (the weights are read once per cache). Dropped at the merge. */
#include "model/model.h"

pb_status pb_forward_batch(const pb_model *m, pb_kv_cache *const *kvs, pb_forward_ctx *fc, pb_pool *pool,
                           const int32_t *tokens, int n, float *logits, int32_t *top) {
    if (!m || !kvs || !fc || !tokens) return pb_error(PB_ERR_INVALID_ARG, "forward: NULL argument");
    if (n < 1 || n > PB_FORWARD_BATCH_MAX)
        return pb_error(PB_ERR_INVALID_ARG, "forward: batch of %d sequences (1..%d)", n, PB_FORWARD_BATCH_MAX);
    const int32_t n_vocab = pb_model_hparams(m)->n_vocab;
    bool gpu = pb_forward_has_top(kvs[0]);
    for (int i = 0; i < n; i++) { /* every check before anything changes */
        if (!kvs[i]) return pb_error(PB_ERR_INVALID_ARG, "forward: NULL cache at row %d", i);
        if (pb_forward_has_top(kvs[i]) != gpu)
            return pb_error(PB_ERR_INVALID_ARG, "forward: a batch mixes CPU and GPU caches");
        for (int j = 0; j < i; j++)
            if (kvs[j] == kvs[i]) return pb_error(PB_ERR_INVALID_ARG, "forward: cache of row %d is also row %d", i, j);
        if (pb_kv_n_past(kvs[i]) + 1 > pb_kv_n_ctx(kvs[i]))
            return pb_error(PB_ERR_CONTEXT_FULL, "forward: context of row %d full (n_ctx %d)", i, pb_kv_n_ctx(kvs[i]));
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return pb_error(PB_ERR_INVALID_ARG, "forward: token %d at row %d is outside the vocabulary (0..%d)",
                            tokens[i], i, n_vocab - 1);
    }
    if (top && !gpu) return pb_error(PB_ERR_UNSUPPORTED, "forward: the argmax alone is computed only by a GPU cache");
    if (!logits && !top) return pb_error(PB_ERR_INVALID_ARG, "forward: (stand-in) needs logits or top");
    for (int i = 0; i < n; i++) {
        float *row = logits ? logits + (size_t)i * (size_t)n_vocab : NULL;
        pb_status st = top ? pb_forward_top(m, kvs[i], fc, tokens + i, 1, top + i)
                           : pb_forward(m, kvs[i], fc, pool, tokens + i, 1, row, false, NULL);
        if (st == PB_OK && top && row) st = pb_forward_pull_logits(kvs[i], row);
        if (st != PB_OK) { /* a failure changes no cache: give back the rows already appended */
            for (int j = 0; j < i; j++) pb_kv_truncate(kvs[j], pb_kv_n_past(kvs[j]) - 1);
            return st;
        }
    }
    return PB_OK;
}
