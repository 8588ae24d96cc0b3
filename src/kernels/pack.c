/* pack.c -- row-interleaved ("packed") Q4_0 / Q8_0 / Q4_K / Q6_K matrices: repacking (out of place, by row groups, or
 * in place) and its inverse for one row (layout in matmul.h). Pure byte shuffling; the kernels room reads it. */
#include "kernels/matmul.h"
#include "tensor/quant.h"

#include <stdlib.h>
#include <string.h>

/* Field geometry of a packed type: block bytes, elements per block, and the by-column fields after the
 * fp16 rows (byte offset in the row block, 4-byte columns, XOR applied to each column). */
typedef struct {
    size_t bs;
    int64_t blck;
    int n_f16;      /* fp16 fields (d; Q4_K: d, dmin), packed first as [field][16] */
    size_t f16_off; /* their offset in the row block */
    int n_col;      /* 4-byte columns, packed after them */
    size_t col_off; /* offset of the first column in the row block */
    uint32_t flip;
} pk_geom;

static bool geom(int type, pk_geom *g) {
    switch (type) {
    case PB_TYPE_Q4_0: *g = (pk_geom){sizeof(pb_block_q4_0), 32, 1, 0, 4, 2, 0}; return true;
    case PB_TYPE_Q8_0: *g = (pk_geom){sizeof(pb_block_q8_0), 32, 1, 0, 8, 2, 0x80808080u}; return true;
    case PB_TYPE_Q4_K: *g = (pk_geom){sizeof(pb_block_q4_K), PB_QK_K, 2, 0, 35, 4, 0}; return true;   /* 3 + 32 */
    case PB_TYPE_Q6_K: *g = (pk_geom){sizeof(pb_block_q6_K), PB_QK_K, 1, 208, 52, 0, 0}; return true; /* 32+16+4 */
    default: return false;
    }
}

static bool packable(int type, int64_t K, int64_t N) {
    pk_geom g;
    return geom(type, &g) && K > 0 && K % g.blck == 0 && N > 0 && N % PB_PACK_ROWS == 0;
}

/* One group: 16 rows `row` bytes apart at src -> packed blocks at dst (must not overlap). */
static void pack_group(int type, const uint8_t *src, size_t row, int64_t nb, uint8_t *dst) {
    pk_geom ge = {0};
    geom(type, &ge);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = dst + (size_t)b * ge.bs * PB_PACK_ROWS;
        for (int r = 0; r < PB_PACK_ROWS; r++) {
            const uint8_t *rb = src + (size_t)r * row + (size_t)b * ge.bs;
            for (int f = 0; f < ge.n_f16; f++) memcpy(o + (f * PB_PACK_ROWS + r) * 2, rb + ge.f16_off + 2 * f, 2);
            const uint8_t *cols = rb + ge.col_off;
            uint8_t *q = o + 2 * ge.n_f16 * PB_PACK_ROWS;
            for (int k = 0; k < ge.n_col; k++) {
                uint32_t v;
                memcpy(&v, cols + 4 * k, 4);
                v ^= ge.flip;
                memcpy(q + ((size_t)k * PB_PACK_ROWS + (size_t)r) * 4, &v, 4);
            }
        }
    }
}

pb_status pb_pack_groups(int type, const void *src, void *dst, int64_t K, int64_t N, int64_t g0, int64_t g1) {
    if (!src || !dst || !packable(type, K, N) || g0 < 0 || g1 > N / PB_PACK_ROWS || g0 > g1)
        return pb_error(PB_ERR_INVALID_ARG,
                        "pack: %s matrix of %lld x %lld does not pack (Q4_0/Q8_0/Q4_K/Q6_K, rows %% %d)",
                        pb_type_name(type), (long long)N, (long long)K, PB_PACK_ROWS);
    const size_t row = pb_row_size(type, K), gsz = row * PB_PACK_ROWS;
    for (int64_t g = g0; g < g1; g++)
        pack_group(type, (const uint8_t *)src + (size_t)g * gsz, row, K / pb_type_get(type)->blck,
                   (uint8_t *)dst + (size_t)g * gsz);
    return PB_OK;
}

pb_status pb_pack_rows(int type, void *w, int64_t K, int64_t N) {
    if (!w || !packable(type, K, N))
        return pb_error(PB_ERR_INVALID_ARG,
                        "pack: %s matrix of %lld x %lld does not pack (Q4_0/Q8_0/Q4_K/Q6_K, rows %% %d)",
                        pb_type_name(type), (long long)N, (long long)K, PB_PACK_ROWS);
    const size_t row = pb_row_size(type, K), gsz = row * PB_PACK_ROWS;
    uint8_t *tmp = pb_malloc(gsz);
    if (!tmp) return pb_error(PB_ERR_NOMEM, "pack: no memory for a %zu-byte scratch", gsz);
    for (int64_t g = 0; g < N / PB_PACK_ROWS; g++) {
        uint8_t *gp = (uint8_t *)w + (size_t)g * gsz;
        memcpy(tmp, gp, gsz);
        pack_group(type, tmp, row, K / pb_type_get(type)->blck, gp);
    }
    free(tmp);
    return PB_OK;
}

/* Block b of row r of a packed matrix, in the file layout. */
static void read_block(int type, const void *w, int64_t K, int64_t r, int64_t b, void *dst) {
    pk_geom ge = {0};
    geom(type, &ge);
    const size_t row = pb_row_size(type, K);
    const int lane = (int)(r % PB_PACK_ROWS);
    const uint8_t *src =
        (const uint8_t *)w + (size_t)(r / PB_PACK_ROWS) * PB_PACK_ROWS * row + (size_t)b * ge.bs * PB_PACK_ROWS;
    uint8_t *o = dst;
    for (int f = 0; f < ge.n_f16; f++) memcpy(o + ge.f16_off + 2 * f, src + (f * PB_PACK_ROWS + lane) * 2, 2);
    const uint8_t *q = src + 2 * ge.n_f16 * PB_PACK_ROWS;
    for (int k = 0; k < ge.n_col; k++) {
        uint32_t v;
        memcpy(&v, q + ((size_t)k * PB_PACK_ROWS + (size_t)lane) * 4, 4);
        v ^= ge.flip;
        memcpy(o + ge.col_off + 4 * k, &v, 4);
    }
}

void pb_pack_read_row(int type, const void *w, int64_t K, int64_t r, void *dst) {
    pk_geom ge = {0};
    geom(type, &ge);
    for (int64_t b = 0; b < K / ge.blck; b++) read_block(type, w, K, r, b, (uint8_t *)dst + (size_t)b * ge.bs);
}

void pb_pack_read_row_float(int type, const void *w, int64_t K, int64_t r, float *dst) {
    const pb_type_traits *tr = pb_type_get(type);
    union {
        pb_block_q4_0 q4;
        pb_block_q8_0 q8;
        pb_block_q4_K q4k;
        pb_block_q6_K q6k;
    } blk;
    pk_geom ge = {0};
    geom(type, &ge);
    for (int64_t b = 0; b < K / ge.blck; b++) {
        read_block(type, w, K, r, b, &blk);
        tr->to_float(&blk, dst + b * ge.blck, ge.blck);
    }
}
