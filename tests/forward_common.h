/* forward_common.h -- helpers shared by the forward tests: compare logits, read float files, run a model in chunks. */
#ifndef PB_FORWARD_COMMON_H
#define PB_FORWARD_COMMON_H

#include "pb_test.h"

#include "model/model.h"

#include <math.h>

enum { NT = 128 };

typedef struct {
    double max, mean;
    int top1; /* positions whose argmax agrees */
} cmp;

static inline int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static inline cmp compare(const float *a, const float *b, int n_tok, int V) {
    cmp c = {0, 0, 0};
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < V; i++) {
            double d = fabs((double)a[(size_t)t * V + i] - (double)b[(size_t)t * V + i]);
            c.max = d > c.max ? d : c.max;
            c.mean += d;
        }
        c.top1 += argmax(a + (size_t)t * V, V) == argmax(b + (size_t)t * V, V);
    }
    c.mean /= (double)n_tok * V;
    return c;
}

static inline float *read_f32(const char *path, size_t n) {
    if (!path) return NULL;
    FILE *f = fopen(path, "rb");
    float *p = malloc(n * sizeof(float));
    size_t got = f ? fread(p, sizeof(float), n, f) : 0;
    if (f) fclose(f);
    if (got != n) {
        free(p);
        return NULL;
    }
    return p;
}

/* Feeds n tokens in chunks of `batch` into a fresh cache; out gets every position's logits. */
static inline pb_status run_ex(const pb_model *m, const int32_t *toks, int n, int batch, pb_kv_type kt, int threads,
                               bool exact, float *out) {
    const pb_hparams *hp = pb_model_hparams(m);
    pb_kv_cache *kv = NULL;
    pb_forward_ctx *fc = NULL;
    pb_pool *pool = NULL;
    pb_status s;
    if ((s = pb_kv_new(m, n, kt, &kv)) || (s = pb_forward_ctx_new(m, batch, &fc))) goto done;
    pb_forward_set_exact(fc, exact);
    if (threads > 1 && (s = pb_pool_new(threads, &pool))) goto done;
    for (int i = 0; i < n && !s; i += batch) {
        int c = n - i < batch ? n - i : batch;
        s = pb_forward(m, kv, fc, pool, toks + i, c, out + (size_t)i * hp->n_vocab, true, NULL);
    }
done:
    pb_pool_free(pool);
    pb_forward_ctx_free(fc);
    pb_kv_free(kv);
    return s;
}

static inline void report(const char *what, cmp c) {
    NOTE("%-34s max|d| %.4g  mean|d| %.4g  top-1 %d/%d", what, c.max, c.mean, c.top1, NT);
}

static inline pb_status run(const pb_model *m, const int32_t *toks, int n, int batch, pb_kv_type kt, int threads,
                            float *out) {
    return run_ex(m, toks, n, batch, kt, threads, false, out);
}

/* Reads the peer tokens (128 int32). */
static inline int read_tokens(int32_t *toks) {
    const char *tp = pbt_fixture("model/tokens.bin");
    FILE *f = tp ? fopen(tp, "rb") : NULL;
    int ok = f && fread(toks, 4, NT, f) == NT;
    if (f) fclose(f);
    return ok;
}

#endif
