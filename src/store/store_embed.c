/* store_embed.c -- embeddings from a Gemma model's final hidden states (mean pooling), written to and searched
 * in the knowledge base. The only store file that reaches into src/model. */
#include "store/store_embed.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pb_embedder {
    pb_model *model;
    const pb_vocab *vocab;
    pb_kv_cache *kv;
    pb_forward_ctx *fc;
    pb_pool *pool;
    int max_tokens, dim;
    int32_t *ids;  /* max_tokens */
    float *logits; /* n_vocab (pb_forward always writes the last row's logits) */
    double *acc;   /* dim */
    char name[192];
};

void pb_embedder_free(pb_embedder *e) {
    if (!e) return;
    pb_forward_ctx_free(e->fc);
    pb_kv_free(e->kv);
    pb_pool_free(e->pool);
    pb_model_close(e->model);
    free(e->ids);
    free(e->logits);
    free(e->acc);
    free(e);
}

pb_status pb_embedder_open(const char *model_path, int max_tokens, int n_threads, pb_embedder **out) {
    *out = NULL;
    if (max_tokens < 8 || max_tokens > 8192) return pb_error(PB_ERR_INVALID_ARG, "embed: max_tokens %d", max_tokens);
    pb_embedder *e = pb_calloc(1, sizeof *e);
    if (!e) return PB_ERR_NOMEM;
    pb_model_params mp = pb_model_default_params();
    pb_status s = pb_model_open(model_path, &mp, &e->model);
    if (s) goto fail;
    pb_model_info info;
    if ((s = pb_model_get_info(e->model, &info))) goto fail;
    e->vocab = pb_model_vocab(e->model);
    e->dim = info.n_embd;
    e->max_tokens = max_tokens;
    if ((s = pb_kv_new(e->model, max_tokens, PB_KV_F32, &e->kv)) ||
        (s = pb_forward_ctx_new(e->model, max_tokens, &e->fc)) ||
        (s = pb_pool_new(n_threads > 0 ? n_threads : pb_model_default_threads(e->model), &e->pool)))
        goto fail;
    e->ids = pb_malloc((size_t)max_tokens * sizeof *e->ids);
    e->logits = pb_malloc((size_t)info.n_vocab * sizeof *e->logits);
    e->acc = pb_malloc((size_t)e->dim * sizeof *e->acc);
    if (!e->ids || !e->logits || !e->acc) {
        s = PB_ERR_NOMEM;
        goto fail;
    }
    const char *slash = strrchr(model_path, '/');
    snprintf(e->name, sizeof e->name, "%.150s#%02x%02x%02x%02x", slash ? slash + 1 : model_path, info.fingerprint[0],
             info.fingerprint[1], info.fingerprint[2], info.fingerprint[3]);
    *out = e;
    return PB_OK;
fail:
    pb_embedder_free(e);
    return pb_error_prefix(s, "embed model '%s': ", model_path);
}

int pb_embedder_dim(const pb_embedder *e) { return e->dim; }
const char *pb_embedder_name(const pb_embedder *e) { return e->name; }

pb_status pb_embedder_embed(pb_embedder *e, const char *text, size_t len, float *vec) {
    int64_t n = 0;
    pb_status s = pb_tokenize(e->vocab, text, len, PB_TOK_ADD_BOS, e->ids, e->max_tokens, &n);
    if (s == PB_ERR_INVALID_ARG && n > e->max_tokens) {
        /* too long: embed the first max_tokens tokens of a prefix that fits (~4 bytes per token) */
        size_t cut = PB_MIN(len, (size_t)e->max_tokens * 3);
        do {
            s = pb_tokenize(e->vocab, text, cut, PB_TOK_ADD_BOS, e->ids, e->max_tokens, &n);
            cut = cut * 3 / 4;
        } while (s == PB_ERR_INVALID_ARG && n > e->max_tokens && cut > 0);
    }
    if (s) return s;
    if (n <= 0) return pb_error(PB_ERR_INVALID_ARG, "embed: empty text");
    if ((s = pb_kv_truncate(e->kv, 0))) return s;
    if ((s = pb_forward(e->model, e->kv, e->fc, e->pool, e->ids, (int)n, e->logits, false, NULL))) return s;
    const float *h = pb_forward_hidden(e->fc);
    for (int i = 0; i < e->dim; i++) e->acc[i] = 0;
    for (int64_t t = 0; t < n; t++)
        for (int i = 0; i < e->dim; i++) e->acc[i] += (double)h[t * e->dim + i];
    double norm = 0;
    for (int i = 0; i < e->dim; i++) {
        e->acc[i] /= (double)n;
        norm += e->acc[i] * e->acc[i];
    }
    norm = norm > 0 ? 1.0 / __builtin_sqrt(norm) : 0;
    for (int i = 0; i < e->dim; i++) vec[i] = (float)(e->acc[i] * norm);
    return PB_OK;
}

#define EMBED_BATCH 32 /* vectors written per transaction */

typedef struct {
    pb_store *st;
    pb_embedder *e;
    float *vecs; /* EMBED_BATCH vectors of dim floats, computed outside any transaction */
    int64_t ids[EMBED_BATCH];
    int n;
    pb_status s;
    int64_t done;
    bool stopped;
    bool (*progress)(void *, int64_t);
    void *user;
} embed_job;

/* Writes the vectors computed so far in one short transaction. The write lock is held for the inserts only, never
 * while the model runs: held across 32 embeddings, and taken again right after each commit, it kept every other
 * writer (faq add, a second ingest) out until its 10 s busy timeout ran out ("database is locked"). */
static pb_status flush(embed_job *j) {
    if (j->n == 0) return PB_OK;
    pb_status s = pb_store_begin(j->st);
    for (int i = 0; i < j->n && !s; i++)
        s = pb_store_embedding_put(j->st, j->ids[i], pb_embedder_name(j->e), j->vecs + (size_t)i * (size_t)j->e->dim,
                                   j->e->dim);
    if (!s) s = pb_store_commit(j->st);
    if (s)
        pb_store_rollback(j->st);
    else
        j->done += j->n;
    j->n = 0;
    return s;
}

static bool embed_one(void *user, int64_t chunk_id, const char *text) {
    embed_job *j = user;
    if ((j->s = pb_embedder_embed(j->e, text, strlen(text), j->vecs + (size_t)j->n * (size_t)j->e->dim))) return false;
    j->ids[j->n++] = chunk_id;
    if (j->n == EMBED_BATCH && (j->s = flush(j))) return false;
    if (j->progress && !j->progress(j->user, j->done + j->n)) {
        j->stopped = true;
        return false;
    }
    return true;
}

pb_status pb_store_embed_missing(pb_store *st, pb_embedder *e, bool (*progress)(void *user, int64_t done), void *user,
                                 int64_t *n_done) {
    embed_job j = {.st = st, .e = e, .progress = progress, .user = user};
    j.vecs = pb_malloc((size_t)EMBED_BATCH * (size_t)e->dim * sizeof(float));
    *n_done = 0;
    if (!j.vecs) return PB_ERR_NOMEM;
    pb_status s = pb_store_chunks_without_embedding(st, pb_embedder_name(e), embed_one, &j);
    if (!s) s = j.s;
    if (!s) s = flush(&j); /* the last, partial batch; also when stopped: what was computed is kept */
    free(j.vecs);
    *n_done = j.done;
    if (!s && j.stopped)
        s = pb_error(PB_ERR_CANCELLED, "embeddings: stopped after %lld vectors (they are kept)", (long long)j.done);
    return s;
}

pb_status pb_store_embed_search(pb_store *st, const char *model_path, const char *query, int k, pb_store_hit **out,
                                int *n_out) {
    *out = NULL;
    *n_out = 0;
    pb_embedder *e;
    pb_status s = pb_embedder_open(model_path, 512, 0, &e);
    if (s) return s;
    float *v = pb_malloc((size_t)e->dim * sizeof *v);
    if (!v) s = PB_ERR_NOMEM;
    if (!s) s = pb_embedder_embed(e, query, strlen(query), v);
    if (!s) s = pb_store_search_vec(st, pb_embedder_name(e), v, e->dim, k, out, n_out);
    free(v);
    pb_embedder_free(e);
    return s;
}
