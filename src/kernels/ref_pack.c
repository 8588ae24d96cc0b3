/* ref_pack.c -- scalar reference tiles for packed (row-interleaved) Q4_0 / Q8_0 / Q4_K / Q6_K matrices (layout in
 * kernels/matmul.h): the executable spec the SIMD versions must match bit for bit. */
#include "kernels/kernels.h"
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

/* Weight byte i (0..31) of row lane r in packed block bp, as the unsigned stored value u. */
static inline int q40_u(const uint8_t *q, int r, int i) {
    int k = i % 16;
    uint8_t v = q[((k / 4) * PB_PACK_ROWS + r) * 4 + k % 4];
    return i < 16 ? (v & 0x0F) : (v >> 4);
}
static inline int q80_u(const uint8_t *q, int r, int i) { return q[((i / 4) * PB_PACK_ROWS + r) * 4 + i % 4]; }

static void packed_ref(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                       const pb_pack_ameta *meta, int nt, float *y, int64_t ldy, bool q4) { /* Q4_0, Q8_0 */
    const int64_t nb = K / 32;
    const size_t bsz = (q4 ? sizeof(pb_block_q4_0) : sizeof(pb_block_q8_0)) * PB_PACK_ROWS;
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = (const uint8_t *)w + (size_t)g * g_size;
        for (int t = 0; t < nt; t++) {
            const pb_block_q8_0 *x = (const pb_block_q8_0 *)(const void *)((const uint8_t *)a + (size_t)t * a_row);
            for (int r = 0; r < PB_PACK_ROWS; r++) {
                float acc = 0;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *bp = gp + (size_t)b * bsz, *q = bp + 2 * PB_PACK_ROWS;
                    int32_t isum = meta[t * nb + b].bias;
                    for (int i = 0; i < 32; i++) isum += (q4 ? q40_u(q, r, i) : q80_u(q, r, i)) * x[b].qs[i];
                    uint16_t dh;
                    memcpy(&dh, bp + 2 * r, 2);
                    acc = fmaf((float)isum, pb_fp16_to_fp32(dh) * meta[t * nb + b].d, acc);
                }
                y[t * ldy + g * PB_PACK_ROWS + r] = acc;
            }
        }
    }
}

void pb_gemm_packed_q4_0_ref(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                             const void *meta, int nt, float *y, int64_t ldy) {
    packed_ref(K, w, ng, g_size, a, a_row, meta, nt, y, ldy, true);
}

void pb_gemm_packed_q8_0_ref(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                             const void *meta, int nt, float *y, int64_t ldy) {
    packed_ref(K, w, ng, g_size, a, a_row, meta, nt, y, ldy, false);
}

/* Q4_K: per super-block, sub-block sums s = sum_j fmaf(isum_j, d_w * sc_j, s) (j = 0..7 in order), then
 * acc = fmaf(s, a.d, acc) and acc = fmaf(imin, -(dmin_w * a.d), acc), imin = sum_j m_j * bs_j exactly. */
void pb_gemm_packed_q4_K_ref(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                             const void *meta, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / PB_QK_K;
    const size_t bsz = sizeof(pb_block_q4_K) * PB_PACK_ROWS;
    (void)meta; /* the spec reads a.d and the bsums from the Q8_K blocks themselves */
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = (const uint8_t *)w + (size_t)g * g_size;
        for (int t = 0; t < nt; t++) {
            const pb_block_q8_K *x = (const pb_block_q8_K *)(const void *)((const uint8_t *)a + (size_t)t * a_row);
            for (int r = 0; r < PB_PACK_ROWS; r++) {
                float acc = 0;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *bp = gp + (size_t)b * bsz, *cols = bp + 4 * PB_PACK_ROWS;
                    uint8_t scales[12], qs[128];
                    for (int c = 0; c < 3; c++) memcpy(scales + 4 * c, cols + (c * PB_PACK_ROWS + r) * 4, 4);
                    for (int c = 0; c < 32; c++) memcpy(qs + 4 * c, cols + ((3 + c) * PB_PACK_ROWS + r) * 4, 4);
                    uint16_t dh, mh;
                    memcpy(&dh, bp + 2 * r, 2);
                    memcpy(&mh, bp + 2 * (PB_PACK_ROWS + r), 2);
                    const float dw = pb_fp16_to_fp32(dh), dmw = pb_fp16_to_fp32(mh);
                    float s = 0;
                    int32_t imin = 0;
                    for (int j = 0; j < 8; j++) {
                        uint8_t sc, mn;
                        pb_quant_scale_min_k4(j, scales, &sc, &mn);
                        int32_t isum = 0;
                        for (int l = 0; l < 32; l++)
                            isum += ((qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0xF) * x[b].qs[32 * j + l];
                        s = fmaf((float)isum, dw * (float)sc, s);
                        imin += mn * (int32_t)(x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
                    }
                    acc = fmaf(s, x[b].d, acc);
                    acc = fmaf((float)imin, -(dmw * x[b].d), acc);
                }
                y[t * ldy + g * PB_PACK_ROWS + r] = acc;
            }
        }
    }
}

/* Q6_K: u = 6-bit value (0..63, stored), per 16-value sub-block j (0..15 in order) isum_j = sum u*a -
 * 32 * bsums[j], s = fmaf(isum_j, d_w * sc_j, s); then acc = fmaf(s, a.d, acc). */
void pb_gemm_packed_q6_K_ref(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                             const void *meta, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / PB_QK_K;
    const size_t bsz = sizeof(pb_block_q6_K) * PB_PACK_ROWS;
    (void)meta; /* the spec reads the bsums from the Q8_K blocks themselves */
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = (const uint8_t *)w + (size_t)g * g_size;
        for (int t = 0; t < nt; t++) {
            const pb_block_q8_K *x = (const pb_block_q8_K *)(const void *)((const uint8_t *)a + (size_t)t * a_row);
            for (int r = 0; r < PB_PACK_ROWS; r++) {
                float acc = 0;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *bp = gp + (size_t)b * bsz, *cols = bp + 2 * PB_PACK_ROWS;
                    uint8_t blk[208]; /* ql[128] qh[64] scales[16] of row r */
                    for (int c = 0; c < 52; c++) memcpy(blk + 4 * c, cols + (c * PB_PACK_ROWS + r) * 4, 4);
                    const uint8_t *ql = blk, *qh = blk + 128;
                    const int8_t *sc = (const int8_t *)(blk + 192);
                    uint16_t dh;
                    memcpy(&dh, bp + 2 * r, 2);
                    const float dw = pb_fp16_to_fp32(dh);
                    float s = 0;
                    for (int j = 0; j < 16; j++) {
                        int32_t isum = -32 * x[b].bsums[j];
                        for (int e = 16 * j; e < 16 * j + 16; e++) {
                            int h = e / 128, gq = (e % 128) / 32, l = e % 32;
                            int u = ((ql[64 * h + 32 * (gq & 1) + l] >> (4 * (gq >> 1))) & 0xF) |
                                    (((qh[32 * h + l] >> (2 * gq)) & 3) << 4);
                            isum += u * x[b].qs[e];
                        }
                        s = fmaf((float)isum, dw * (float)sc[j], s);
                    }
                    acc = fmaf(s, x[b].d, acc);
                }
                y[t * ldy + g * PB_PACK_ROWS + r] = acc;
            }
        }
    }
}
