/* test_forward_alloc.c -- proves the forward pass allocates nothing per call: counts malloc/calloc/realloc/
 * posix_memalign (interposed here, forwarding to glibc) while prefilling and decoding with a thread pool. */
#include "forward_common.h"

#include "base/base.h"

#include <stdatomic.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__GLIBC__)
#define PB_NO_INTERPOSE 1
#endif

#ifndef PB_NO_INTERPOSE
static atomic_int counting, n_alloc;

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t c, size_t n);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t a, size_t n);

void *malloc(size_t n) {
    if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
    return __libc_malloc(n);
}
void *calloc(size_t c, size_t n) {
    if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
    return __libc_calloc(c, n);
}
void *realloc(void *p, size_t n) {
    if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
    return __libc_realloc(p, n);
}
int posix_memalign(void **out, size_t a, size_t n) {
    if (atomic_load(&counting)) atomic_fetch_add(&n_alloc, 1);
    *out = __libc_memalign(a, n);
    return *out ? 0 : 12; /* ENOMEM */
}
#endif

int main(void) {
#ifdef PB_NO_INTERPOSE
    NOTE("skip: allocation counting needs glibc without sanitizers");
    CHECK(1, "allocation test skipped in this build");
    TEST_DONE();
#else
    const char *path = pbt_fixture("model/gemma2-tiny-v.q4_k_m.gguf");
    int32_t toks[NT];
    if (!path || !read_tokens(toks)) TEST_DONE();
    pb_model *m = NULL;
    pb_kv_cache *kv = NULL;
    pb_forward_ctx *fc = NULL;
    pb_pool *pool = NULL;
    bool ok = pb_model_open(path, NULL, &m) == PB_OK && pb_kv_new(m, NT, PB_KV_Q8_0, &kv) == PB_OK &&
              pb_forward_ctx_new(m, 48, &fc) == PB_OK && pb_pool_new(2, &pool) == PB_OK;
    CHECK(ok, "setup (%s)", pb_last_error());
    if (!ok) TEST_DONE();
    float *logits = malloc(sizeof(float) * 48 * 4096);
    /* warm-up call (first use of the pool may start threads lazily) */
    CHECK(pb_forward(m, kv, fc, pool, toks, 8, logits, true, NULL) == PB_OK, "warm-up");
    /* the counter sees the library's allocations (else this test could not fail) */
    atomic_store(&counting, 1);
    void *probe = pb_malloc(16);
    atomic_store(&counting, 0);
    CHECK(atomic_load(&n_alloc) == 1, "interposed malloc counts the library's pb_malloc");
    free(probe);
    atomic_store(&n_alloc, 0);
    atomic_store(&counting, 1);
    pb_status s = pb_forward(m, kv, fc, pool, toks + 8, 40, logits, true, NULL); /* prefill past the window */
    for (int t = 48; t < 100 && s == PB_OK; t++) s = pb_forward(m, kv, fc, pool, toks + t, 1, logits, false, NULL);
    atomic_store(&counting, 0);
    CHECK(s == PB_OK, "prefill 40 + decode 52 tokens");
    CHECK(atomic_load(&n_alloc) == 0, "no allocation during 53 forward calls (counted %d)", atomic_load(&n_alloc));
    free(logits);
    pb_pool_free(pool);
    pb_forward_ctx_free(fc);
    pb_kv_free(kv);
    pb_model_close(m);
    TEST_DONE();
#endif
}
