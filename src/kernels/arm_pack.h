/* arm_pack.h -- ARM64 NEON (dotprod) tiles for packed (row-interleaved) Q4_0 / Q8_0 matrices (layout in
 * kernels/matmul.h); included only by arm_neon.c. A 16-row group is 4 quarters of 4 rows; one sdot by lane
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

/* One token: a chunk of CB blocks' activations (2 CB vectors) and their scales stay in registers while every
 * group's weights stream by, each weight byte loaded once; a lane's running sum waits in y between chunks (16
 * bytes per quarter and chunk). Per lane the float sequence is AP_TILE's. q8: Q8_0 weights, else Q4_0. */
AP_INLINE void ap_t1_chunk(const uint8_t *w, int64_t ng, size_t g_size, const pb_block_q8_0 *x,
                           const pb_pack_ameta *meta, int64_t b0, float *y, const int CB, const bool q8) {
    const size_t bsz = (q8 ? 34 : 18) * PB_PACK_ROWS;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), eight = vdupq_n_u8(8), flip = vdupq_n_u8(0x80);
    int8x16_t A[16];
    float32x4_t D[2];
    AP_UNROLL for (int i = 0; i < CB; i++) A[2 * i] = vld1q_s8(x[b0 + i].qs),
                                                 A[2 * i + 1] = vld1q_s8(x[b0 + i].qs + 16);
    AP_UNROLL for (int i = 0; i < CB; i += 4) {
        if (CB - i >= 4)
            D[i / 4] = vld2q_f32((const float *)(const void *)(meta + b0 + i)).val[1];
        else
            D[i / 4] = vld1q_dup_f32(&meta[b0 + i].d);
    }
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = w + (size_t)g * g_size + (size_t)b0 * bsz;
        for (int qv = 0; qv < 4; qv++) {
            /* GCC hoists the by-lane multiplies' broadcasts of D out of the loops and spills them (1.06x bytes):
             * an empty asm that "changes" D keeps them in the loop, as one fmul by element each. */
            AP_UNROLL for (int i = 0; i < CB; i += 4) __asm__("" : "+w"(D[i / 4]));
            float *yp = y + g * PB_PACK_ROWS + 4 * qv;
            float32x4_t acc = b0 ? vld1q_f32(yp) : vdupq_n_f32(0.0f);
            AP_UNROLL for (int i = 0; i < CB; i++) {
                const uint8_t *bp = gp + (size_t)i * bsz, *q = bp + 2 * PB_PACK_ROWS + 16 * qv;
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 8 * qv)));
                int32x4_t is = vdupq_n_s32(0), is2 = vdupq_n_s32(0);
                /* lanes must be literal constants for clang: one macro per column */
#define AP_T1_Q8(k)                                                                                                    \
    is = vdotq_laneq_s32(is, vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + 64 * (k)), flip)), A[2 * i], k);                \
    is2 = vdotq_laneq_s32(is2, vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + 64 * ((k) + 4)), flip)), A[2 * i + 1], k)
#define AP_T1_Q4(k)                                                                                                    \
    do {                                                                                                               \
        const uint8x16_t p_ = vld1q_u8(q + 64 * (k));                                                                  \
        is = vdotq_laneq_s32(is, vreinterpretq_s8_u8(vsubq_u8(vandq_u8(p_, m4), eight)), A[2 * i], k);                 \
        is2 = vdotq_laneq_s32(is2, vreinterpretq_s8_u8(vsubq_u8(vshrq_n_u8(p_, 4), eight)), A[2 * i + 1], k);          \
    } while (0)
                if (q8) {
                    AP_T1_Q8(0);
                    AP_T1_Q8(1);
                    AP_T1_Q8(2);
                    AP_T1_Q8(3);
                } else {
                    AP_T1_Q4(0);
                    AP_T1_Q4(1);
                    AP_T1_Q4(2);
                    AP_T1_Q4(3);
                }
#undef AP_T1_Q8
#undef AP_T1_Q4
                float32x4_t sc;
                switch (i % 4) { /* dw * a.d, the lane a constant */
                case 0: sc = vmulq_laneq_f32(dw, D[i / 4], 0); break;
                case 1: sc = vmulq_laneq_f32(dw, D[i / 4], 1); break;
                case 2: sc = vmulq_laneq_f32(dw, D[i / 4], 2); break;
                default: sc = vmulq_laneq_f32(dw, D[i / 4], 3); break;
                }
                acc = vfmaq_f32(acc, vcvtq_f32_s32(vaddq_s32(is, is2)), sc);
            }
            vst1q_f32(yp, acc);
        }
    }
}

static void ap_t1(int64_t nb, const void *w, int64_t ng, size_t g_size, const void *a, const pb_pack_ameta *meta,
                  float *y, bool q8) {
    const pb_block_q8_0 *x = a;
    int64_t b = 0;
    if (q8) {
        for (; b + 8 <= nb; b += 8) ap_t1_chunk(w, ng, g_size, x, meta, b, y, 8, true);
        for (; b + 4 <= nb; b += 4) ap_t1_chunk(w, ng, g_size, x, meta, b, y, 4, true);
        for (; b < nb; b++) ap_t1_chunk(w, ng, g_size, x, meta, b, y, 1, true);
    } else {
        for (; b + 8 <= nb; b += 8) ap_t1_chunk(w, ng, g_size, x, meta, b, y, 8, false);
        for (; b + 4 <= nb; b += 4) ap_t1_chunk(w, ng, g_size, x, meta, b, y, 4, false);
        for (; b < nb; b++) ap_t1_chunk(w, ng, g_size, x, meta, b, y, 1, false);
    }
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
    if (nt == 1) {
        ap_t1(nb, w, ng, g_size, a_all, meta_all, y_all, false);
        return;
    }
    AP_SWITCH(ap_unpack_q4_0, 18 * PB_PACK_ROWS)
}

void pb_gemm_packed_q8_0_neon(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a_all, size_t a_row,
                              const void *meta_, int nt, float *y_all, int64_t ldy) {
    const int64_t nb = K / 32;
    const pb_pack_ameta *meta_all = meta_;
    if (nt == 1) {
        ap_t1(nb, w, ng, g_size, a_all, meta_all, y_all, true);
        return;
    }
    AP_SWITCH(ap_unpack_q8_0, 34 * PB_PACK_ROWS)
}

/* ---- K-quants: Q4_K, Q6_K ---------------------------------------------------------------------------------
 * The super-block loop is outermost and the ng groups of the call inside it: one token's Q8_K block (256
 * bytes) is loaded once per call and stays in registers while every group's weights stream by, and each
 * lane's running sum is kept in y between super-blocks (16 bytes per 576 bytes of weights). Per lane the
 * float sequence is the spec's (ref_pack.c): s = fma(isum_j, d_w * sc_j, s) for j in order, then
 * acc = fma(s, a.d, acc) and, for Q4_K, acc = fma(imin, -(dmin_w * a.d), acc). */

/* Byte i (0..3) of each 32-bit lane, as float. */
AP_INLINE float32x4_t ak_byte_f(uint32x4_t v, int i) {
    const uint32x4_t ff = vdupq_n_u32(0xff);
    switch (i) {
    case 0: return vcvtq_f32_u32(vandq_u32(v, ff));
    case 1: return vcvtq_f32_u32(vandq_u32(vshrq_n_u32(v, 8), ff));
    case 2: return vcvtq_f32_u32(vandq_u32(vshrq_n_u32(v, 16), ff));
    default: return vcvtq_f32_u32(vshrq_n_u32(v, 24));
    }
}

/* The eight 32-value activation sums bs_j = bsums[2j] + bsums[2j+1] (|bs_j| <= 4096) split as
 * bs_j = 64 * bh_j + bl_j with bh_j = bs_j >> 6 (-64..63) in bytes 0..7 and bl_j = bs_j & 63 in bytes
 * 8..15, so that the 6-bit mins (bytes of the packed mins words) meet them in sdot: ak_imin. */
AP_INLINE int8x16_t ak_bsplit(const pb_block_q8_K *x) {
    const int16x8_t bs = vpaddq_s16(vld1q_s16(x->bsums), vld1q_s16(x->bsums + 8));
    return vcombine_s8(vmovn_s16(vshrq_n_s16(bs, 6)), vmovn_s16(vandq_s16(bs, vdupq_n_s16(63))));
}

/* imin = sum_j m_j * bs_j per row lane, exactly: mlo holds m_0..m_3 of each row, mhi m_4..m_7. */
AP_INLINE int32x4_t ak_imin(uint32x4_t mlo, uint32x4_t mhi, int8x16_t bsp) {
    const int8x16_t l4 = vreinterpretq_s8_u32(mlo), h4 = vreinterpretq_s8_u32(mhi);
    int32x4_t h = vdotq_laneq_s32(vdupq_n_s32(0), l4, bsp, 0);
    h = vdotq_laneq_s32(h, h4, bsp, 1);
    int32x4_t l = vdotq_laneq_s32(vdupq_n_s32(0), l4, bsp, 2);
    l = vdotq_laneq_s32(l, h4, bsp, 3);
    return vaddq_s32(vshlq_n_s32(h, 6), l);
}

#define AK_Q4K_BLOCK (144 * PB_PACK_ROWS)

/* Scales and mins of the 4 rows of quarter qv, lane-wise (the byte arithmetic of pb_quant_scale_min_k4):
 * s[0] = sc_0..3, s[1] = sc_4..7, m[0] = m_0..3, m[1] = m_4..7, one byte each. */
AP_INLINE void ak_q4k_scales(const uint8_t *bp, int qv, uint32x4_t s[2], uint32x4_t m[2]) {
    const uint8_t *sc = bp + 64 + 16 * qv;
    const uint32x4_t w0 = vreinterpretq_u32_u8(vld1q_u8(sc)), w1 = vreinterpretq_u32_u8(vld1q_u8(sc + 64)),
                     w2 = vreinterpretq_u32_u8(vld1q_u8(sc + 128));
    const uint32x4_t k3f = vdupq_n_u32(0x3f3f3f3f), k0f = vdupq_n_u32(0x0f0f0f0f), k30 = vdupq_n_u32(0x30303030);
    s[0] = vandq_u32(w0, k3f);
    s[1] = vorrq_u32(vandq_u32(w2, k0f), vandq_u32(vshrq_n_u32(w0, 2), k30));
    m[0] = vandq_u32(w1, k3f);
    m[1] = vorrq_u32(vandq_u32(vshrq_n_u32(w2, 4), k0f), vandq_u32(vshrq_n_u32(w1, 2), k30));
}

/* One column k of sub-block pair p: low nibbles belong to sub-block 2p (activation vector ae), high ones
 * to 2p+1 (ao); lane k % 4 of the activation vector holds the 4 matching bytes. */
#define AK_Q4K_COL(k, ae, ao)                                                                                          \
    do {                                                                                                               \
        const uint8x16_t c_ = vld1q_u8(qs + 64 * (8 * p + (k)));                                                       \
        ie = vdotq_laneq_s32(ie, vreinterpretq_s8_u8(vandq_u8(c_, m4)), ae, (k) % 4);                                  \
        io = vdotq_laneq_s32(io, vreinterpretq_s8_u8(vshrq_n_u8(c_, 4)), ao, (k) % 4);                                 \
    } while (0)

/* One token: the 16 activation vectors of super-block b stay in registers across all groups. */
static void ak_q4k_t1(int64_t nb, const uint8_t *w, int64_t ng, size_t g_size, const pb_block_q8_K *x, float *y) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t A[16];
        AP_UNROLL for (int i = 0; i < 16; i++) A[i] = vld1q_s8(x[b].qs + 16 * i);
        const int8x16_t bsp = ak_bsplit(&x[b]);
        const float d = x[b].d;
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *bp = w + (size_t)g * g_size + (size_t)b * AK_Q4K_BLOCK;
            for (int qv = 0; qv < 4; qv++) {
                const uint8_t *qs = bp + 256 + 16 * qv;
                uint32x4_t S[2], M[2];
                ak_q4k_scales(bp, qv, S, M);
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 8 * qv)));
                float32x4_t s = vdupq_n_f32(0.0f);
                AP_UNROLL for (int p = 0; p < 4; p++) {
                    int32x4_t ie = vdupq_n_s32(0), io = vdupq_n_s32(0);
                    AK_Q4K_COL(0, A[4 * p], A[4 * p + 2]);
                    AK_Q4K_COL(1, A[4 * p], A[4 * p + 2]);
                    AK_Q4K_COL(2, A[4 * p], A[4 * p + 2]);
                    AK_Q4K_COL(3, A[4 * p], A[4 * p + 2]);
                    AK_Q4K_COL(4, A[4 * p + 1], A[4 * p + 3]);
                    AK_Q4K_COL(5, A[4 * p + 1], A[4 * p + 3]);
                    AK_Q4K_COL(6, A[4 * p + 1], A[4 * p + 3]);
                    AK_Q4K_COL(7, A[4 * p + 1], A[4 * p + 3]);
                    s = vfmaq_f32(s, vcvtq_f32_s32(ie), vmulq_f32(dw, ak_byte_f(S[p / 2], (2 * p) % 4)));
                    s = vfmaq_f32(s, vcvtq_f32_s32(io), vmulq_f32(dw, ak_byte_f(S[p / 2], (2 * p + 1) % 4)));
                }
                float *yp = y + g * PB_PACK_ROWS + 4 * qv;
                float32x4_t acc = b ? vld1q_f32(yp) : vdupq_n_f32(0.0f);
                acc = vfmaq_n_f32(acc, s, d);
                const float32x4_t dmw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 32 + 8 * qv)));
                acc = vfmaq_f32(acc, vcvtq_f32_s32(ak_imin(M[0], M[1], bsp)), vnegq_f32(vmulq_n_f32(dmw, d)));
                vst1q_f32(yp, acc);
            }
        }
    }
}

/* NT tokens (2..4): a quarter's sub-block pair is unpacked once (16 vectors) for all tokens; activations
 * are re-read from L1 per quarter. */
#define AK_Q4K_TOK(k, ae, ao)                                                                                          \
    do {                                                                                                               \
        ie = vdotq_laneq_s32(ie, lo[k], ae, (k) % 4);                                                                  \
        io = vdotq_laneq_s32(io, hi[k], ao, (k) % 4);                                                                  \
    } while (0)

AP_INLINE void ak_q4k_tn(int64_t nb, const uint8_t *w, int64_t ng, size_t g_size, const uint8_t *a, size_t a_row,
                         float *y, int64_t ldy, const int NT) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t bsp[4];
        float d[4];
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = (const pb_block_q8_K *)(const void *)(a + (size_t)t * a_row) + b;
            bsp[t] = ak_bsplit(x);
            d[t] = x->d;
        }
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *bp = w + (size_t)g * g_size + (size_t)b * AK_Q4K_BLOCK;
            for (int qv = 0; qv < 4; qv++) {
                const uint8_t *qs = bp + 256 + 16 * qv;
                uint32x4_t S[2], M[2];
                ak_q4k_scales(bp, qv, S, M);
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 8 * qv)));
                float32x4_t s[4];
                AP_UNROLL for (int t = 0; t < NT; t++) s[t] = vdupq_n_f32(0.0f);
                AP_UNROLL for (int p = 0; p < 4; p++) {
                    int8x16_t lo[8], hi[8];
                    AP_UNROLL for (int k = 0; k < 8; k++) {
                        const uint8x16_t c = vld1q_u8(qs + 64 * (8 * p + k));
                        lo[k] = vreinterpretq_s8_u8(vandq_u8(c, m4));
                        hi[k] = vreinterpretq_s8_u8(vshrq_n_u8(c, 4));
                    }
                    const float32x4_t fe = vmulq_f32(dw, ak_byte_f(S[p / 2], (2 * p) % 4));
                    const float32x4_t fo = vmulq_f32(dw, ak_byte_f(S[p / 2], (2 * p + 1) % 4));
                    AP_UNROLL for (int t = 0; t < NT; t++) {
                        const int8_t *xq = ((const pb_block_q8_K *)(const void *)(a + (size_t)t * a_row) + b)->qs;
                        const int8x16_t e0 = vld1q_s8(xq + 64 * p), e1 = vld1q_s8(xq + 64 * p + 16);
                        const int8x16_t o0 = vld1q_s8(xq + 64 * p + 32), o1 = vld1q_s8(xq + 64 * p + 48);
                        int32x4_t ie = vdupq_n_s32(0), io = vdupq_n_s32(0);
                        AK_Q4K_TOK(0, e0, o0);
                        AK_Q4K_TOK(1, e0, o0);
                        AK_Q4K_TOK(2, e0, o0);
                        AK_Q4K_TOK(3, e0, o0);
                        AK_Q4K_TOK(4, e1, o1);
                        AK_Q4K_TOK(5, e1, o1);
                        AK_Q4K_TOK(6, e1, o1);
                        AK_Q4K_TOK(7, e1, o1);
                        s[t] = vfmaq_f32(s[t], vcvtq_f32_s32(ie), fe);
                        s[t] = vfmaq_f32(s[t], vcvtq_f32_s32(io), fo);
                    }
                }
                const float32x4_t dmw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 32 + 8 * qv)));
                AP_UNROLL for (int t = 0; t < NT; t++) {
                    float *yp = y + t * ldy + g * PB_PACK_ROWS + 4 * qv;
                    float32x4_t acc = b ? vld1q_f32(yp) : vdupq_n_f32(0.0f);
                    acc = vfmaq_n_f32(acc, s[t], d[t]);
                    acc = vfmaq_f32(acc, vcvtq_f32_s32(ak_imin(M[0], M[1], bsp[t])), vnegq_f32(vmulq_n_f32(dmw, d[t])));
                    vst1q_f32(yp, acc);
                }
            }
        }
    }
}

void pb_gemm_packed_q4_K_neon(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / PB_QK_K;
    const uint8_t *a8 = a;
    (void)meta; /* the mins sums and a.d come from the Q8_K blocks, as in the spec */
    int t0 = 0;
    for (; t0 + 4 <= nt; t0 += 4) ak_q4k_tn(nb, w, ng, g_size, a8 + (size_t)t0 * a_row, a_row, y + t0 * ldy, ldy, 4);
    switch (nt - t0) {
    case 3: ak_q4k_tn(nb, w, ng, g_size, a8 + (size_t)t0 * a_row, a_row, y + t0 * ldy, ldy, 3); break;
    case 2: ak_q4k_tn(nb, w, ng, g_size, a8 + (size_t)t0 * a_row, a_row, y + t0 * ldy, ldy, 2); break;
    case 1:
        ak_q4k_t1(nb, w, ng, g_size, (const pb_block_q8_K *)(const void *)(a8 + (size_t)t0 * a_row), y + t0 * ldy);
        break;
    default: break;
    }
}

#define AK_Q6K_BLOCK (210 * PB_PACK_ROWS)

/* Signed 6-bit weights (u - 32, so that sdot gives the spec's isum_j = sum u*a - 32 * bsums[j] directly)
 * of chunk gq (0..3) of half h, column k, for the quarter whose columns start at cols: ql nibble
 * (ql column 16h + 8(gq & 1) + k, high nibble when gq >= 2) and qh bits 2gq..2gq+1 (column 32 + 8h + k). */
AP_INLINE int8x16_t ak_q6k_u(const uint8_t *cols, int h, int gq, int k) {
    const uint8x16_t L = vld1q_u8(cols + 64 * (16 * h + 8 * (gq & 1) + k)), H = vld1q_u8(cols + 64 * (32 + 8 * h + k));
    const uint8x16_t k3f = vdupq_n_u8(0x3F), k30 = vdupq_n_u8(0x30);
    uint8x16_t u;
    switch (gq) {
    case 0: u = vandq_u8(vsliq_n_u8(L, H, 4), k3f); break;
    case 1: u = vandq_u8(vsliq_n_u8(L, vshrq_n_u8(H, 2), 4), k3f); break;
    case 2: u = vsriq_n_u8(vandq_u8(H, k30), L, 4); break;
    default: u = vsriq_n_u8(vshrq_n_u8(H, 2), L, 4); break;
    }
    return vsubq_s8(vreinterpretq_s8_u8(u), vdupq_n_s8(32));
}

/* Signed scale j of each row lane of quarter qv as float times dw (the spec's d_w * sc_j). */
AP_INLINE float32x4_t ak_q6k_fsc(const uint8_t *cols, int j, float32x4_t dw) {
    const int32x4_t S = vreinterpretq_s32_u8(vld1q_u8(cols + 64 * (48 + j / 4)));
    int32x4_t v;
    switch (j % 4) {
    case 0: v = vshrq_n_s32(vshlq_n_s32(S, 24), 24); break;
    case 1: v = vshrq_n_s32(vshlq_n_s32(S, 16), 24); break;
    case 2: v = vshrq_n_s32(vshlq_n_s32(S, 8), 24); break;
    default: v = vshrq_n_s32(S, 24); break;
    }
    return vmulq_f32(dw, vcvtq_f32_s32(v));
}

/* One token. The 16 activation vectors of super-block b stay in registers while every group's weights stream
 * by; a weight column is loaded once and gives the 4 chunks' values, so each weight byte is loaded once. Per
 * quarter the two halves run one after the other (8 sub-block accumulators each, folded into the lane's
 * float sum s in sub-block order, s staying in a register between them); a lane's total waits in y between
 * super-blocks (16 bytes per 840 bytes of weights). 16 activations + 8 accumulators + s, dw, 2 constants and
 * 3 temporaries: 31 of the 32 vector registers (per half, with the sums kept in memory between halves, this
 * tile loaded 1.051x the weight bytes; now ~1.02x). The high 2 bits of chunks 2 and 3 come from vsri on H
 * itself and the 0x3f mask (no 0x30 constant). */
static void ak_q6k_t1(int64_t nb, const uint8_t *w, int64_t ng, size_t g_size, const pb_block_q8_K *x, float *y) {
    const uint8x16_t k3f = vdupq_n_u8(0x3F);
    const int8x16_t k32 = vdupq_n_s8(32);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t A[16];
        AP_UNROLL for (int i = 0; i < 16; i++) A[i] = vld1q_s8(x[b].qs + 16 * i);
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *bp = w + (size_t)g * g_size + (size_t)b * AK_Q6K_BLOCK;
            for (int qv = 0; qv < 4; qv++) {
                const uint8_t *cols = bp + 32 + 16 * qv;
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 8 * qv)));
                float32x4_t s = vdupq_n_f32(0.0f);
                AP_UNROLL for (int h = 0; h < 2; h++) {
                    int32x4_t is[8]; /* is[2 gq + kh]: sub-block j = 8h + 2gq + kh */
                    AP_UNROLL for (int i = 0; i < 8; i++) is[i] = vdupq_n_s32(0);
/* column k: elements 4k..4k+3 of each chunk (k literal: clang wants constant lanes); L0 (chunks 0 and 2) is
 * done before L1 (chunks 1 and 3) is loaded, so that 3 temporaries are live at a time */
#define AK_Q6K_T1COL(k)                                                                                                \
    do {                                                                                                               \
        const int kh = (k) / 4;                                                                                        \
        const uint8x16_t H = vld1q_u8(cols + 64 * (32 + 8 * h + (k))), L0 = vld1q_u8(cols + 64 * (16 * h + (k)));      \
        is[0 + kh] =                                                                                                   \
            vdotq_laneq_s32(is[0 + kh], vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vsliq_n_u8(L0, H, 4), k3f)), k32),       \
                            A[8 * h + 0 + kh], (k) % 4);                                                               \
        is[4 + kh] =                                                                                                   \
            vdotq_laneq_s32(is[4 + kh], vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vsriq_n_u8(H, L0, 4), k3f)), k32),       \
                            A[8 * h + 4 + kh], (k) % 4);                                                               \
        const uint8x16_t H2 = vshrq_n_u8(H, 2), L1 = vld1q_u8(cols + 64 * (16 * h + 8 + (k)));                         \
        is[2 + kh] =                                                                                                   \
            vdotq_laneq_s32(is[2 + kh], vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vsliq_n_u8(L1, H2, 4), k3f)), k32),      \
                            A[8 * h + 2 + kh], (k) % 4);                                                               \
        is[6 + kh] =                                                                                                   \
            vdotq_laneq_s32(is[6 + kh], vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vsriq_n_u8(H2, L1, 4), k3f)), k32),      \
                            A[8 * h + 6 + kh], (k) % 4);                                                               \
    } while (0)
                    AK_Q6K_T1COL(0);
                    AK_Q6K_T1COL(1);
                    AK_Q6K_T1COL(2);
                    AK_Q6K_T1COL(3);
                    AK_Q6K_T1COL(4);
                    AK_Q6K_T1COL(5);
                    AK_Q6K_T1COL(6);
                    AK_Q6K_T1COL(7);
#undef AK_Q6K_T1COL
                    AP_UNROLL for (int j = 0; j < 8; j++) s =
                        vfmaq_f32(s, vcvtq_f32_s32(is[j]), ak_q6k_fsc(cols, 8 * h + j, dw));
                }
                /* a.d: 4 bytes loaded here, where a register is free again (GCC kept its broadcast on the stack
                 * across the loops: 16 bytes per quarter); the empty asm keeps the load from being hoisted */
                const float *dp = &x[b].d;
                __asm__("" : "+r"(dp));
                float *yp = y + g * PB_PACK_ROWS + 4 * qv;
                vst1q_f32(yp, vfmaq_f32(b ? vld1q_f32(yp) : vdupq_n_f32(0.0f), s, vld1q_dup_f32(dp)));
            }
        }
    }
}

/* NT tokens (2..8): a 32-value chunk of a quarter is rebuilt once (8 vectors) for all tokens. */
AP_INLINE void ak_q6k_tn(int64_t nb, const uint8_t *w, int64_t ng, size_t g_size, const uint8_t *a, size_t a_row,
                         float *y, int64_t ldy, const int NT) {
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *bp = w + (size_t)g * g_size + (size_t)b * AK_Q6K_BLOCK;
            for (int qv = 0; qv < 4; qv++) {
                const uint8_t *cols = bp + 32 + 16 * qv;
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 8 * qv)));
                float32x4_t s[8];
                AP_UNROLL for (int t = 0; t < NT; t++) s[t] = vdupq_n_f32(0.0f);
                for (int c = 0; c < 8; c++) {
                    const int h = c / 4, gq = c % 4;
                    int8x16_t v[8];
                    switch (gq) { /* constant shifts per case */
                    case 0: AP_UNROLL for (int k = 0; k < 8; k++) v[k] = ak_q6k_u(cols, h, 0, k); break;
                    case 1: AP_UNROLL for (int k = 0; k < 8; k++) v[k] = ak_q6k_u(cols, h, 1, k); break;
                    case 2: AP_UNROLL for (int k = 0; k < 8; k++) v[k] = ak_q6k_u(cols, h, 2, k); break;
                    default: AP_UNROLL for (int k = 0; k < 8; k++) v[k] = ak_q6k_u(cols, h, 3, k); break;
                    }
                    const int32x4_t S = vreinterpretq_s32_u8(vld1q_u8(cols + 64 * (48 + c / 2)));
                    const int32x4_t sc0 =
                        (c & 1) ? vshrq_n_s32(vshlq_n_s32(S, 8), 24) : vshrq_n_s32(vshlq_n_s32(S, 24), 24);
                    const int32x4_t sc1 = (c & 1) ? vshrq_n_s32(S, 24) : vshrq_n_s32(vshlq_n_s32(S, 16), 24);
                    const float32x4_t f0 = vmulq_f32(dw, vcvtq_f32_s32(sc0)), f1 = vmulq_f32(dw, vcvtq_f32_s32(sc1));
                    AP_UNROLL for (int t = 0; t < NT; t++) {
                        const int8_t *xq =
                            ((const pb_block_q8_K *)(const void *)(a + (size_t)t * a_row) + b)->qs + 32 * c;
                        const int8x16_t a0 = vld1q_s8(xq), a1 = vld1q_s8(xq + 16);
                        int32x4_t i0 = vdupq_n_s32(0), i1 = vdupq_n_s32(0);
                        i0 = vdotq_laneq_s32(i0, v[0], a0, 0);
                        i0 = vdotq_laneq_s32(i0, v[1], a0, 1);
                        i0 = vdotq_laneq_s32(i0, v[2], a0, 2);
                        i0 = vdotq_laneq_s32(i0, v[3], a0, 3);
                        i1 = vdotq_laneq_s32(i1, v[4], a1, 0);
                        i1 = vdotq_laneq_s32(i1, v[5], a1, 1);
                        i1 = vdotq_laneq_s32(i1, v[6], a1, 2);
                        i1 = vdotq_laneq_s32(i1, v[7], a1, 3);
                        s[t] = vfmaq_f32(s[t], vcvtq_f32_s32(i0), f0);
                        s[t] = vfmaq_f32(s[t], vcvtq_f32_s32(i1), f1);
                    }
                }
                AP_UNROLL for (int t = 0; t < NT; t++) {
                    float *yp = y + t * ldy + g * PB_PACK_ROWS + 4 * qv;
                    const float d = ((const pb_block_q8_K *)(const void *)(a + (size_t)t * a_row) + b)->d;
                    vst1q_f32(yp, vfmaq_n_f32(b ? vld1q_f32(yp) : vdupq_n_f32(0.0f), s[t], d));
                }
            }
        }
    }
}

void pb_gemm_packed_q6_K_neon(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / PB_QK_K;
    const uint8_t *a8 = a;
    (void)meta; /* the -32 offset is folded into the weights (u - 32), as exact as the spec's bsums term */
    switch (nt) {
    case 1: ak_q6k_t1(nb, w, ng, g_size, a, y); break;
    case 2: ak_q6k_tn(nb, w, ng, g_size, a8, a_row, y, ldy, 2); break;
    case 3: ak_q6k_tn(nb, w, ng, g_size, a8, a_row, y, ldy, 3); break;
    case 4: ak_q6k_tn(nb, w, ng, g_size, a8, a_row, y, ldy, 4); break;
    case 5: ak_q6k_tn(nb, w, ng, g_size, a8, a_row, y, ldy, 5); break;
    case 6: ak_q6k_tn(nb, w, ng, g_size, a8, a_row, y, ldy, 6); break;
    case 7: ak_q6k_tn(nb, w, ng, g_size, a8, a_row, y, ldy, 7); break;
    default: ak_q6k_tn(nb, w, ng, g_size, a8, a_row, y, ldy, 8); break;
    }
}
