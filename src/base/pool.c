/* pool.c -- a fixed thread pool: workers spin briefly then sleep on a condition variable. */
#include "base/base.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

struct pb_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    pthread_cond_t cv_done;
    /* current job */
    pb_pool_fn fn;
    void *ctx;
    int nth;
    atomic_uint_fast64_t generation; /* bumped per job */
    atomic_int pending;              /* workers still running the job */
    atomic_int limit;                /* threads pb_pool_run uses (thermal governor); 0 = all */
    bool stop;
};

typedef struct {
    pb_pool *p;
    int ith;
} worker_arg;

static void *worker(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    pb_pool *p = wa.p;
    uint64_t seen = 0;
    for (;;) {
        /* spin a little: decode jobs come back-to-back every few microseconds */
        uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        for (int spin = 0; g == seen && spin < 20000; spin++) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
            g = atomic_load_explicit(&p->generation, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->generation)) == seen && !p->stop) pthread_cond_wait(&p->cv_work, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (p->stop) return NULL;
        seen = g;
        if (wa.ith < p->nth) p->fn(p->ctx, wa.ith, p->nth);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

pb_status pb_pool_new(int n_threads, pb_pool **out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 256) return pb_error(PB_ERR_INVALID_ARG, "thread count %d is too large", n_threads);
    pb_pool *p = pb_calloc(1, sizeof *p);
    if (!p) return PB_ERR_NOMEM;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (n_threads > 1) {
        p->threads = pb_calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!p->threads) {
            free(p);
            return PB_ERR_NOMEM;
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa ||
                pthread_create(&p->threads[i - 1], NULL, worker, wa ? (wa->p = p, wa->ith = i, wa) : NULL) != 0) {
                free(wa);
                p->n = i; /* only i-1 workers exist */
                pb_pool_free(p);
                return pb_error(PB_ERR_NOMEM, "cannot start thread %d", i);
            }
        }
    }
    *out = p;
    return PB_OK;
}

void pb_pool_free(pb_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    free(p->threads);
    free(p);
}

int pb_pool_size(const pb_pool *p) { return p ? p->n : 1; }

void pb_pool_run_n(pb_pool *p, int n, pb_pool_fn fn, void *ctx) {
    if (!p || p->n == 1 || n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    if (n > p->n) n = p->n;
    p->fn = fn;
    p->ctx = ctx;
    p->nth = n;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, n);
    for (int spin = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && spin < 200000; spin++) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

void pb_pool_set_limit(pb_pool *p, int n) {
    if (!p) return;
    atomic_store(&p->limit, n < 1 ? 1 : n > p->n ? p->n : n);
}

int pb_pool_limit(const pb_pool *p) {
    if (!p) return 1;
    int l = atomic_load(&((pb_pool *)p)->limit);
    return l > 0 ? l : p->n;
}

void pb_pool_run(pb_pool *p, pb_pool_fn fn, void *ctx) { pb_pool_run_n(p, pb_pool_limit(p), fn, ctx); }
