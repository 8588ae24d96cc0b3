/* kv_impl.h -- private layout of pb_kv_cache shared by kv_cache.c and forward.c. Not for other rooms. */
#ifndef PB_KV_IMPL_H
#define PB_KV_IMPL_H

#include "model/model_impl.h"

struct pb_kv_cache {
    pb_kv_type type;
    int st; /* storage type id (PB_TYPE_F16 / Q8_0 / F32) */
    int n_ctx, n_past, n_layer;
    int kv_dim, head_dim, window; /* kv_dim, head_dim: the widest layer's (Gemma 4 layers differ) */
    size_t row_bytes;             /* bytes of the widest layer's row (the forward's stash is sized by it) */
    int kvd[PB_MAX_LAYERS];       /* layer il: n_head_kv * head_dim values per position (0: KV-shared layer) */
    int hdl[PB_MAX_LAYERS];       /* layer il: head dim */
    size_t row_b[PB_MAX_LAYERS];  /* layer il: bytes of one position's row */
    size_t head_b[PB_MAX_LAYERS]; /* layer il: bytes of one kv head inside a row */
    int attn_block;               /* keys per attention block: max(128, ceil(n_ctx / PB_ATT_MAX_BLOCKS)) */
    bool ring[PB_MAX_LAYERS];     /* sliding-window layer: ring of cap rows */
    int cap[PB_MAX_LAYERS];       /* rows held per layer: n_ctx, or a ring's min(n_ctx, window + ring_extra) */
    int win[PB_MAX_LAYERS];       /* rows the next query needs at most: n_ctx, or a ring's min(n_ctx, window) */
    int held0[PB_MAX_LAYERS];     /* oldest position with a row (a state read of fewer rows than cap sets it) */
    uint8_t *k[PB_MAX_LAYERS];    /* [n_head_kv][cap][head_bytes]: one kv head's rows are contiguous (see below) */
    uint8_t *v[PB_MAX_LAYERS];
    void *mem;
    size_t bytes;
    struct pb_cu_ctx *gpu; /* the device twin of this cache when the model runs on the GPU (model/gpu.c), else NULL */
    int huge_at;           /* n_past from which mem asks for huge pages (pb_kv_grown); INT_MAX once asked */
};

/* Positions written before the K/V cache asks for huge pages. Until then it has 4 KiB pages: a short
 * prompt touches one page per head and layer instead of zeroing a 2 MiB huge page for each (on the 2B
 * model 208 of them, 416 MiB, paid by the first prefill after open). */
#define PB_KV_HUGE_AT 1024

/* Called after n_past grew: asks for huge pages once it reaches huge_at (decode then walks more rows; the
 * touched ranges are merged into huge pages then, a one-off copy of a few hundred MiB at most). */
static inline void pb_kv_grown(struct pb_kv_cache *kv) {
    if (kv->n_past < kv->huge_at) return;
    pb_big_huge(kv->mem, kv->bytes ? kv->bytes : 64);
    kv->huge_at = 0x7fffffff;
}

/* Row of kv head g in cache slot `slot` of layer il (base: kv->k[il] or kv->v[il]). Head-major, so attention,
 * which walks one head's keys in position order, reads a contiguous stream the hardware prefetches; with
 * position-major rows it read head_b out of every row_b, and decode at 2k context ran at 2-3 GB/s. */
static inline uint8_t *pb_kv_head_row(const struct pb_kv_cache *kv, uint8_t *base, int il, int g, int slot) {
    return base + ((size_t)g * (size_t)kv->cap[il] + (size_t)slot) * kv->head_b[il];
}

#endif
