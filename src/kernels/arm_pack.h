/* arm_pack.h -- ARM64 NEON (dotprod) tiles for packed (row-interleaved) Q4_0 / Q8_0 matrices (layout in
 * tensor/matmul.h); included only by arm_neon.c. A 16-row group is 4 quarters of 4 rows; one sdot by lane
 * (vdotq_laneq_s32) adds 4 weights x 4 activation bytes for each of 4 rows. Weights are made signed (Q4_0:
 * u - 8, Q8_0: u ^ 0x80), so the integer sums equal the spec's sum u*a - o*sum a; the float sequence per
 * lane is the spec's, hence bit-identical to ref_pack.c. Checked under qemu; speed not measured here. */
#include "kernels/kernels.h"
#include "tensor/quant.h"

#include <arm_neon.h>

#define AP_INLINE static inline __attribute__((always_inline))

#define AP_UNROLL _Pragma("GCC unroll 8")

/* Weights of quarter qv (rows 4qv..4qv+3) of packed block q: v[k] = column k (8 columns of 4 bytes). */
AP_INLINE void ap_unpack_q4_0(const uint8_t *q, int qv, int8x16_t v[8]) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), eight = vdupq_n_u8(8);
    AP_UNROLL for (int j = 0; j < 4; j++) {
        uint8x16_t p = vld1q_u8(q + 64 * j + 16 * qv);
        v[j] = vreinterpretq_s8_u8(vsubq_u8(vandq_u8(p, m4), eight));
        v[j + 4] = vreinterpretq_s8_u8(vsubq_u8(vshrq_n_u8(p, 4), eight));
    }
}

AP_INLINE void ap_unpack_q8_0(const uint8_t *q, int qv, int8x16_t v[8]) {
    const uint8x16_t flip = vdupq_n_u8(0x80);
    AP_UNROLL for (int k = 0; k < 8; k++) v[k] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + 64 * k + 16 * qv), flip));
}

/* One quarter (4 rows) of the group at a time over all blocks, so only NT accumulators are live: with the
 * quarters inside the block loop, 4 x NT accumulators and the weights did not fit the 32 registers and GCC
 * kept them on the stack (a load or store per sdot). Loops over columns and tokens are unrolled; the 8 sdot
 * of a token run as two chains. Each lane still sums its blocks in order, as the spec does. */
#define AP_TILE(UNPACK, BSZ, NT)                                                                                       \
    for (int64_t g = 0; g < ng; g++) {                                                                                 \
        const uint8_t *gp = (const uint8_t *)w + (size_t)g * g_size;                                                   \
        for (int qv = 0; qv < 4; qv++) {                                                                               \
            float32x4_t acc[NT];                                                                                       \
            AP_UNROLL for (int t = 0; t < (NT); t++) acc[t] = vdupq_n_f32(0.0f);                                       \
            for (int64_t b = 0; b < nb; b++) {                                                                         \
                const uint8_t *bp = gp + (size_t)b * (BSZ);                                                            \
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 8 * qv)));                        \
                int8x16_t v[8];                                                                                        \
                UNPACK(bp + 2 * PB_PACK_ROWS, qv, v);                                                                  \
                AP_UNROLL for (int t = 0; t < (NT); t++) {                                                             \
                    const pb_block_q8_0 *x =                                                                           \
                        (const pb_block_q8_0 *)(const void *)((const uint8_t *)a + (size_t)t * a_row) + b;             \
                    const int8x16_t a0 = vld1q_s8(x->qs), a1 = vld1q_s8(x->qs + 16);                                   \
                    int32x4_t is = vdupq_n_s32(0), is2 = vdupq_n_s32(0);                                               \
                    is = vdotq_laneq_s32(is, v[0], a0, 0);                                                             \
                    is2 = vdotq_laneq_s32(is2, v[1], a0, 1);                                                           \
                    is = vdotq_laneq_s32(is, v[2], a0, 2);                                                             \
                    is2 = vdotq_laneq_s32(is2, v[3], a0, 3);                                                           \
                    is = vdotq_laneq_s32(is, v[4], a1, 0);                                                             \
                    is2 = vdotq_laneq_s32(is2, v[5], a1, 1);                                                           \
                    is = vdotq_laneq_s32(is, v[6], a1, 2);                                                             \
                    is2 = vdotq_laneq_s32(is2, v[7], a1, 3);                                                           \
                    const float32x4_t sc = vmulq_n_f32(dw, meta[t * nb + b].d);                                        \
                    acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(vaddq_s32(is, is2)), sc);                                 \
                }                                                                                                      \
            }                                                                                                          \
            AP_UNROLL for (int t = 0; t < (NT); t++) vst1q_f32(y + t * ldy + g * PB_PACK_ROWS + 4 * qv, acc[t]);       \
        }                                                                                                              \
    }

/* up to 8 tokens per pass: 8 accumulators + 8 weight vectors + 2 activation vectors + temporaries */
#define AP_SWITCH(UNPACK, BSZ)                                                                                         \
    for (int t0 = 0; t0 < nt; t0 += 8) {                                                                               \
        const int n_ = nt - t0 < 8 ? nt - t0 : 8;                                                                      \
        const void *a = (const uint8_t *)a_all + (size_t)t0 * a_row;                                                   \
        const pb_pack_ameta *meta = meta_all + t0 * nb;                                                                \
        float *y = y_all + t0 * ldy;                                                                                   \
        switch (n_) {                                                                                                  \
        case 1: AP_TILE(UNPACK, BSZ, 1) break;                                                                         \
        case 2: AP_TILE(UNPACK, BSZ, 2) break;                                                                         \
        case 3: AP_TILE(UNPACK, BSZ, 3) break;                                                                         \
        case 4: AP_TILE(UNPACK, BSZ, 4) break;                                                                         \
        case 5: AP_TILE(UNPACK, BSZ, 5) break;                                                                         \
        case 6: AP_TILE(UNPACK, BSZ, 6) break;                                                                         \
        case 7: AP_TILE(UNPACK, BSZ, 7) break;                                                                         \
        default: AP_TILE(UNPACK, BSZ, 8) break;                                                                        \
        }                                                                                                              \
    }

void pb_gemm_packed_q4_0_neon(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a_all, size_t a_row,
                              const void *meta_, int nt, float *y_all, int64_t ldy) {
    const int64_t nb = K / 32;
    const pb_pack_ameta *meta_all = meta_;
    AP_SWITCH(ap_unpack_q4_0, 18 * PB_PACK_ROWS)
}

void pb_gemm_packed_q8_0_neon(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a_all, size_t a_row,
                              const void *meta_, int nt, float *y_all, int64_t ldy) {
    const int64_t nb = K / 32;
    const pb_pack_ameta *meta_all = meta_;
    AP_SWITCH(ap_unpack_q8_0, 34 * PB_PACK_ROWS)
}
