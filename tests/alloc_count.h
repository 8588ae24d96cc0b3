/* alloc_count.h -- a counting allocator for the tests that check nothing is allocated per token: malloc & co.
 * count into n_allocs and call glibc's own; off (COUNT_ALLOCS 0) under sanitizers, which own malloc. Include it
 * in one test file only (it defines malloc). alloc_count_skip_libraries(): from then on, calls made from shared
 * libraries other than libc (the CUDA driver, libstdc++: pools of their own that grow when they like) count into
 * n_allocs_skipped instead; the test's own code, the library linked into it and libc's (qsort's buffer) still
 * count. */
#ifndef PB_TESTS_ALLOC_COUNT_H
#define PB_TESTS_ALLOC_COUNT_H

#include <stddef.h>
#include <stdint.h>

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
static volatile long n_allocs, n_allocs_skipped;
#include <link.h>
#include <string.h>
static uintptr_t ac_lo[64], ac_hi[64];
static volatile int ac_n;
static int ac_phdr(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size, (void)data;
    const char *n = info->dlpi_name;
    if (!n || !*n || strstr(n, "/libc.so")) return 0; /* the executable itself, libc */
    for (int i = 0; i < info->dlpi_phnum && ac_n < 64; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD && (info->dlpi_phdr[i].p_flags & PF_X)) {
            ac_lo[ac_n] = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            ac_hi[ac_n] = ac_lo[ac_n] + info->dlpi_phdr[i].p_memsz;
            ac_n++;
        }
    return 0;
}
static inline void alloc_count_skip_libraries(void) {
    ac_n = 0;
    dl_iterate_phdr(ac_phdr, NULL);
}
static inline void ac_count(const void *caller) {
    const uintptr_t a = (uintptr_t)caller;
    for (int i = 0; i < ac_n; i++)
        if (a >= ac_lo[i] && a < ac_hi[i]) {
            __atomic_add_fetch(&n_allocs_skipped, 1, __ATOMIC_RELAXED);
            return;
        }
    __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
}
void *malloc(size_t n);
void *calloc(size_t a, size_t b);
void *realloc(void *p, size_t n);
int posix_memalign(void **p, size_t al, size_t n);
void *aligned_alloc(size_t al, size_t n);
void *malloc(size_t n) {
    ac_count(__builtin_return_address(0));
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    ac_count(__builtin_return_address(0));
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    ac_count(__builtin_return_address(0));
    return __libc_realloc(p, n);
}
int posix_memalign(void **p, size_t al, size_t n) {
    ac_count(__builtin_return_address(0));
    *p = __libc_memalign(al, n);
    return *p ? 0 : 12;
}
void *aligned_alloc(size_t al, size_t n) {
    ac_count(__builtin_return_address(0));
    return __libc_memalign(al, n);
}
#endif

#endif
