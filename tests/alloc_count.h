/* alloc_count.h -- a counting allocator for the tests that check nothing is allocated per token: malloc & co.
 * count into n_allocs and call glibc's own; off (COUNT_ALLOCS 0) under sanitizers, which own malloc. Include it
 * in one test file only (it defines malloc). */
#ifndef PB_TESTS_ALLOC_COUNT_H
#define PB_TESTS_ALLOC_COUNT_H

#include <stddef.h>

/* ---- counting allocator (glibc; not under sanitizers, which own malloc) ---------------------- */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COUNT_ALLOCS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define COUNT_ALLOCS 0
#endif
#endif
#ifndef COUNT_ALLOCS
#define COUNT_ALLOCS 1
#endif

#if COUNT_ALLOCS
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static volatile long n_allocs;
void *malloc(size_t n);
void *calloc(size_t a, size_t b);
void *realloc(void *p, size_t n);
int posix_memalign(void **p, size_t al, size_t n);
void *aligned_alloc(size_t al, size_t n);
void *malloc(size_t n) {
    __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    return __libc_realloc(p, n);
}
int posix_memalign(void **p, size_t al, size_t n) {
    __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    *p = __libc_memalign(al, n);
    return *p ? 0 : 12;
}
void *aligned_alloc(size_t al, size_t n) {
    __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    return __libc_memalign(al, n);
}
#endif

#endif
