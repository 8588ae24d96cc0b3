/* topk_ref.h -- the reference of a GPU's top-M of the logits (pb_sampler_sample_top's input), for the tests: the M
 * best ids in the order value descending, id ascending, NaN counting as -inf and -0 as +0, by a full sort. */
#ifndef PB_TOPK_REF_H
#define PB_TOPK_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the order as one unsigned key: larger = better (the value's bits made monotonic, then the id reversed) */
static inline uint64_t topk_ref_key(float v, int32_t id) {
    if (v != v) v = -INFINITY;
    if (v == 0.0f) v = 0.0f;
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)u << 32) | (uint32_t) ~(uint32_t)id;
}

static int topk_ref_cmp(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y); /* descending */
}

/* ids[0..m) / vals[0..m) (the raw values x[id]) of the m best of x[0..n); keys: scratch of n uint64. */
static inline void topk_ref(const float *x, int32_t n, int32_t m, uint64_t *keys, int32_t *ids, float *vals) {
    for (int32_t i = 0; i < n; i++) keys[i] = topk_ref_key(x[i], i);
    qsort(keys, (size_t)n, sizeof *keys, topk_ref_cmp);
    for (int32_t i = 0; i < m; i++) {
        ids[i] = (int32_t) ~(uint32_t)keys[i];
        vals[i] = x[ids[i]];
    }
}

#endif
