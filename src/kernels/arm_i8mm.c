/* arm_i8mm.c -- ARM64 int8 matrix-multiply (FEAT_I8MM: USMMLA) tiles for packed Q4_0 / Q8_0 / Q4_K / Q6_K matrices
 * (layout in kernels/matmul.h), for prompts (2..8 tokens a call); one token goes to the sdot tiles of arm_neon.c.
 * Built with +i8mm and called only where HWCAP2_I8MM says the CPU has it (dispatch.c). One USMMLA multiplies a
 * 2 x 8 block of unsigned weights (2 rows: two packed 4-byte columns zipped) by a 2 x 8 block of signed
 * activations (2 tokens), so it does the work of two sdot-by-lane. Per lane the float sequence is the scalar
 * spec's (ref_pack.c), so the results are bit-identical to it and to the sdot tiles. */
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "tensor/quant.h"

#include <arm_neon.h>

#define AI_INLINE static inline __attribute__((always_inline))
#define AI_UNROLL _Pragma("GCC unroll 8")

/* ---- Q4_0 / Q8_0 ------------------------------------------------------------------------------------------
 * A call's activations are rearranged once per chunk of AI_CB blocks into token pairs: per block and pair,
 * 4 vectors [t0 k..k+7 | t1 k..k+7] (k = 0, 8, 16, 24), then [bias0 bias1 bias0 bias1] and [d0 d1 d0 d1].
 * Results of a quarter (4 rows) and a pair sit in two vectors [r0t0 r0t1 r1t0 r1t1], [r2t0 r2t1 r3t0 r3t1];
 * the weights are used unsigned (Q4_0 nibbles, Q8_0 bytes + 128) with the meta's bias -o * sum a, as the
 * spec's isum = bias + sum u * a. */
#define AI_CB 32

typedef struct ai_pair {
    int8x16_t x[4];
    int32x4_t bias[2]; /* twice: the two accumulators of a pair start from it, loaded with d in one ld1 */
    float32x4_t d;
} ai_pair;

/* A pair's 7 vectors in 4 instructions (ldp q with immediate offsets; GCC emits single loads plus address
 * arithmetic, and copies of the bias): the two accumulators start as the bias copies themselves. */
AI_INLINE void ai_load_pair(const ai_pair *p, int8x16_t x[4], int32x4_t *b0, int32x4_t *b1, float32x4_t *d) {
    int8x16_t x0, x1, x2, x3;
    int32x4_t c0, c1;
    float32x4_t dd;
    __asm__("ldp %q0, %q1, [%7]\n\t"
            "ldp %q2, %q3, [%7, #32]\n\t"
            "ldp %q4, %q5, [%7, #64]\n\t"
            "ldr %q6, [%7, #96]"
            : "=w"(x0), "=w"(x1), "=w"(x2), "=w"(x3), "=w"(c0), "=w"(c1), "=w"(dd)
            : "r"(p), "m"(*p));
    x[0] = x0, x[1] = x1, x[2] = x2, x[3] = x3, *b0 = c0, *b1 = c1, *d = dd;
}

/* y rows of tokens t0, t1 (4 lanes each, rows 4qv..4qv+3) <-> the two pair-layout vectors */
AI_INLINE void ai_load_y(const float *y0, const float *y1, float32x4_t *p0, float32x4_t *p1) {
    const float32x4_t a = vld1q_f32(y0), b = vld1q_f32(y1);
    *p0 = vzip1q_f32(a, b);
    *p1 = vzip2q_f32(a, b);
}
AI_INLINE void ai_store_y(float *y0, float *y1, float32x4_t p0, float32x4_t p1) {
    vst1q_f32(y0, vuzp1q_f32(p0, p1));
    vst1q_f32(y1, vuzp2q_f32(p0, p1));
}

AI_INLINE void ai_prep_q8_0(ai_pair *xp, const uint8_t *a, size_t a_row, const pb_pack_ameta *meta, int64_t nb,
                            int64_t b0, int cb, int np) {
    for (int b = 0; b < cb; b++)
        for (int p = 0; p < np; p++) {
            const pb_block_q8_0 *x0 = (const pb_block_q8_0 *)(const void *)(a + (size_t)(2 * p) * a_row) + b0 + b;
            const pb_block_q8_0 *x1 = (const pb_block_q8_0 *)(const void *)(a + (size_t)(2 * p + 1) * a_row) + b0 + b;
            const int64x2_t l0 = vreinterpretq_s64_s8(vld1q_s8(x0->qs)),
                            h0 = vreinterpretq_s64_s8(vld1q_s8(x0->qs + 16));
            const int64x2_t l1 = vreinterpretq_s64_s8(vld1q_s8(x1->qs)),
                            h1 = vreinterpretq_s64_s8(vld1q_s8(x1->qs + 16));
            ai_pair *o = &xp[b * 4 + p];
            o->x[0] = vreinterpretq_s8_s64(vzip1q_s64(l0, l1));
            o->x[1] = vreinterpretq_s8_s64(vzip2q_s64(l0, l1));
            o->x[2] = vreinterpretq_s8_s64(vzip1q_s64(h0, h1));
            o->x[3] = vreinterpretq_s8_s64(vzip2q_s64(h0, h1));
            const int32x2_t m0 = vld1_s32((const int32_t *)(const void *)&meta[(2 * p) * nb + b0 + b]);
            const int32x2_t m1 = vld1_s32((const int32_t *)(const void *)&meta[(2 * p + 1) * nb + b0 + b]);
            const int32x2_t bb = vzip1_s32(m0, m1), dd = vzip2_s32(m0, m1);
            o->bias[0] = o->bias[1] = vcombine_s32(bb, bb);
            o->d = vreinterpretq_f32_s32(vcombine_s32(dd, dd));
        }
}

/* the 8 weight operands of quarter qv of a packed block: w[2 kg + rp], kg = k group (8 values), rp = row pair */
AI_INLINE void ai_weights_q4_0(const uint8_t *q, int qv, uint8x16_t w[8]) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    AI_UNROLL for (int c = 0; c < 4; c += 2) { /* columns c, c+1: low nibbles k 4c..4c+7, high 16+4c.. */
        const uint32x4_t c0 = vreinterpretq_u32_u8(vld1q_u8(q + 64 * c + 16 * qv)),
                         c1 = vreinterpretq_u32_u8(vld1q_u8(q + 64 * (c + 1) + 16 * qv));
        const uint8x16_t z0 = vreinterpretq_u8_u32(vzip1q_u32(c0, c1)), z1 = vreinterpretq_u8_u32(vzip2q_u32(c0, c1));
        w[2 * (c / 2) + 0] = vandq_u8(z0, m4);
        w[2 * (c / 2) + 1] = vandq_u8(z1, m4);
        w[2 * (c / 2 + 2) + 0] = vshrq_n_u8(z0, 4);
        w[2 * (c / 2 + 2) + 1] = vshrq_n_u8(z1, 4);
    }
}
AI_INLINE void ai_weights_q8_0(const uint8_t *q, int qv, uint8x16_t w[8]) {
    AI_UNROLL for (int c = 0; c < 8; c += 2) {
        const uint32x4_t c0 = vreinterpretq_u32_u8(vld1q_u8(q + 64 * c + 16 * qv)),
                         c1 = vreinterpretq_u32_u8(vld1q_u8(q + 64 * (c + 1) + 16 * qv));
        w[c] = vreinterpretq_u8_u32(vzip1q_u32(c0, c1));
        w[c + 1] = vreinterpretq_u8_u32(vzip2q_u32(c0, c1));
    }
}

AI_INLINE void ai_tile(int64_t K, const uint8_t *w, int64_t ng, size_t g_size, const uint8_t *a, size_t a_row,
                       const pb_pack_ameta *meta, const int NP, float *y, int64_t ldy, const bool q8) {
    const int64_t nb = K / 32;
    const size_t bsz = (q8 ? 34 : 18) * PB_PACK_ROWS;
    ai_pair xp[AI_CB * 4];
    for (int64_t b0 = 0; b0 < nb; b0 += AI_CB) {
        const int cb = nb - b0 < AI_CB ? (int)(nb - b0) : AI_CB;
        ai_prep_q8_0(xp, a, a_row, meta, nb, b0, cb, NP);
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *gp = w + (size_t)g * g_size + (size_t)b0 * bsz;
            for (int qv = 0; qv < 4; qv++) {
                float32x4_t acc[4][2];
                AI_UNROLL for (int p = 0; p < NP; p++) {
                    float *y0 = y + (2 * p) * ldy + g * PB_PACK_ROWS + 4 * qv;
                    if (b0)
                        ai_load_y(y0, y0 + ldy, &acc[p][0], &acc[p][1]);
                    else
                        acc[p][0] = acc[p][1] = vdupq_n_f32(0.0f);
                }
                for (int b = 0; b < cb; b++) {
                    const uint8_t *bp = gp + (size_t)b * bsz;
                    uint8x16_t wv[8];
                    if (q8)
                        ai_weights_q8_0(bp + 2 * PB_PACK_ROWS, qv, wv);
                    else
                        ai_weights_q4_0(bp + 2 * PB_PACK_ROWS, qv, wv);
                    const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 8 * qv)));
                    const float32x4_t dw0 = vzip1q_f32(dw, dw), dw1 = vzip2q_f32(dw, dw); /* [dw0 dw0 dw1 dw1] .. */
                    const ai_pair *xb = &xp[b * 4];
                    AI_UNROLL for (int p = 0; p < NP; p++) {
                        int8x16_t xx[4];
                        int32x4_t i0, i1;
                        float32x4_t d;
                        ai_load_pair(&xb[p], xx, &i0, &i1, &d);
                        AI_UNROLL for (int kg = 0; kg < 4; kg++) {
                            i0 = vusmmlaq_s32(i0, wv[2 * kg], xx[kg]);
                            i1 = vusmmlaq_s32(i1, wv[2 * kg + 1], xx[kg]);
                        }
                        acc[p][0] = vfmaq_f32(acc[p][0], vcvtq_f32_s32(i0), vmulq_f32(dw0, d));
                        acc[p][1] = vfmaq_f32(acc[p][1], vcvtq_f32_s32(i1), vmulq_f32(dw1, d));
                    }
                }
                AI_UNROLL for (int p = 0; p < NP; p++) {
                    float *y0 = y + (2 * p) * ldy + g * PB_PACK_ROWS + 4 * qv;
                    ai_store_y(y0, y0 + ldy, acc[p][0], acc[p][1]);
                }
            }
        }
    }
}

#define AI_SWITCH(Q8)                                                                                                  \
    switch (np) {                                                                                                      \
    case 0: break;                                                                                                     \
    case 1: ai_tile(K, w, ng, g_size, a, a_row, meta, 1, y, ldy, Q8); break;                                           \
    case 2: ai_tile(K, w, ng, g_size, a, a_row, meta, 2, y, ldy, Q8); break;                                           \
    case 3: ai_tile(K, w, ng, g_size, a, a_row, meta, 3, y, ldy, Q8); break;                                           \
    default: ai_tile(K, w, ng, g_size, a, a_row, meta, 4, y, ldy, Q8); break;                                          \
    }

void pb_gemm_packed_q4_0_i8mm(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy) {
    const int np = nt / 2;
    AI_SWITCH(false)
    if (nt & 1) /* the odd token: the one-token sdot tile */
        pb_gemm_packed_q4_0_neon(K, w, ng, g_size, (const uint8_t *)a + (size_t)(nt - 1) * a_row, a_row,
                                 (const pb_pack_ameta *)meta + (nt - 1) * (K / 32), 1, y + (nt - 1) * ldy, ldy);
}

void pb_gemm_packed_q8_0_i8mm(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy) {
    const int np = nt / 2;
    AI_SWITCH(true)
    if (nt & 1)
        pb_gemm_packed_q8_0_neon(K, w, ng, g_size, (const uint8_t *)a + (size_t)(nt - 1) * a_row, a_row,
                                 (const pb_pack_ameta *)meta + (nt - 1) * (K / 32), 1, y + (nt - 1) * ldy, ldy);
}

/* ---- Q4_K -------------------------------------------------------------------------------------------------
 * Activations of a call rearranged once per chunk of AK_KB super-blocks: per super-block and token pair,
 * x[j][m] = [t0 values 32j+8m..+7 | t1 the same] for sub-block j and k group m, the 6-bit mins' partners
 * bh/bl (bs_j = 64 bh_j + bl_j, as in the sdot tile: bytes 0..7 of t0 then t1) and [d0 d1 d0 d1]. A quarter's
 * sub-block sums for 2 pairs at a time (16 int32 accumulators would not fit with 4); per lane the float
 * sequence is the spec's: s = fma(isum_j, d_w * sc_j, s) for j in order, acc = fma(s, a.d, acc),
 * acc = fma(imin, -(dmin_w * a.d), acc). */
#define AK_KB        4
#define AK_Q4K_BLOCK (144 * PB_PACK_ROWS)

typedef struct ak_pair {
    int8x16_t x[8][4];
    int8x16_t bh, bl;
    float32x4_t d;
} ak_pair;

/* bs_j = bsums[2j] + bsums[2j+1] split as 64 * (bs_j >> 6) + (bs_j & 63): bytes 0..7 and 8..15 */
AI_INLINE int8x16_t ak_bsplit(const pb_block_q8_K *x) {
    const int16x8_t bs = vpaddq_s16(vld1q_s16(x->bsums), vld1q_s16(x->bsums + 8));
    return vcombine_s8(vmovn_s16(vshrq_n_s16(bs, 6)), vmovn_s16(vandq_s16(bs, vdupq_n_s16(63))));
}

/* byte i (0..3) of each 32-bit lane, as float */
AI_INLINE float32x4_t ak_byte_f(uint32x4_t v, int i) {
    switch (i) {
    case 0: return vcvtq_f32_u32(vshrq_n_u32(vshlq_n_u32(v, 24), 24));
    case 1: return vcvtq_f32_u32(vshrq_n_u32(vshlq_n_u32(v, 16), 24));
    case 2: return vcvtq_f32_u32(vshrq_n_u32(vshlq_n_u32(v, 8), 24));
    default: return vcvtq_f32_u32(vshrq_n_u32(v, 24));
    }
}

static void ak_prep(ak_pair *xp, const uint8_t *a, size_t a_row, int64_t b0, int kb, int np) {
    for (int b = 0; b < kb; b++)
        for (int p = 0; p < np; p++) {
            const pb_block_q8_K *x0 = (const pb_block_q8_K *)(const void *)(a + (size_t)(2 * p) * a_row) + b0 + b;
            const pb_block_q8_K *x1 = (const pb_block_q8_K *)(const void *)(a + (size_t)(2 * p + 1) * a_row) + b0 + b;
            ak_pair *o = &xp[b * 4 + p];
            for (int j = 0; j < 8; j++)
                for (int h = 0; h < 2; h++) {
                    const int64x2_t u = vreinterpretq_s64_s8(vld1q_s8(x0->qs + 32 * j + 16 * h)),
                                    v = vreinterpretq_s64_s8(vld1q_s8(x1->qs + 32 * j + 16 * h));
                    o->x[j][2 * h] = vreinterpretq_s8_s64(vzip1q_s64(u, v));
                    o->x[j][2 * h + 1] = vreinterpretq_s8_s64(vzip2q_s64(u, v));
                }
            const int64x2_t s0 = vreinterpretq_s64_s8(ak_bsplit(x0)), s1 = vreinterpretq_s64_s8(ak_bsplit(x1));
            o->bh = vreinterpretq_s8_s64(vzip1q_s64(s0, s1));
            o->bl = vreinterpretq_s8_s64(vzip2q_s64(s0, s1));
            const float dd[4] = {x0->d, x1->d, x0->d, x1->d};
            o->d = vld1q_f32(dd);
        }
}

/* pairs p0..p0+NP-1 (NP 1 or 2) of super-blocks b0..b0+kb-1 (prepared in xp) over ng groups */
AI_INLINE void ak_tile(const uint8_t *w, int64_t ng, size_t g_size, const ak_pair *xp, int64_t b0, int kb, int p0,
                       float *y, int64_t ldy, const int NP) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t g = 0; g < ng; g++) {
        for (int qv = 0; qv < 4; qv++) {
            float32x4_t acc[4][2];
            AI_UNROLL for (int q = 0; q < NP; q++) {
                float *y0 = y + (2 * (p0 + q)) * ldy + g * PB_PACK_ROWS + 4 * qv;
                if (b0)
                    ai_load_y(y0, y0 + ldy, &acc[q][0], &acc[q][1]);
                else
                    acc[q][0] = acc[q][1] = vdupq_n_f32(0.0f);
            }
            for (int b = 0; b < kb; b++) {
                const uint8_t *bp = w + (size_t)g * g_size + (size_t)(b0 + b) * AK_Q4K_BLOCK;
                const uint8_t *qs = bp + 256 + 16 * qv, *sc = bp + 64 + 16 * qv;
                const ak_pair *X = &xp[b * 4 + p0];
                /* scales and mins of the 4 rows, one byte per lane (pb_quant_scale_min_k4's arithmetic) */
                const uint8x16_t w0 = vld1q_u8(sc), w1 = vld1q_u8(sc + 64), w2 = vld1q_u8(sc + 128);
                const uint32x4_t S0 = vreinterpretq_u32_u8(vshrq_n_u8(vshlq_n_u8(w0, 2), 2)),
                                 S1 = vreinterpretq_u32_u8(vsliq_n_u8(w2, vshrq_n_u8(w0, 6), 4)),
                                 M0 = vreinterpretq_u32_u8(vshrq_n_u8(vshlq_n_u8(w1, 2), 2)),
                                 M1 = vreinterpretq_u32_u8(vsliq_n_u8(vshrq_n_u8(w2, 4), vshrq_n_u8(w1, 6), 4));
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 8 * qv)));
                float32x4_t s[4][2];
                AI_UNROLL for (int q = 0; q < NP; q++) s[q][0] = s[q][1] = vdupq_n_f32(0.0f);
                AI_UNROLL for (int p = 0; p < 4; p++) { /* sub-blocks 2p (low nibbles) and 2p+1 (high) */
                    const uint32x4_t Sp = p < 2 ? S0 : S1;
                    AI_UNROLL for (int hh = 0; hh < 2; hh++) { /* sub-block j = 2p + hh */
                        int32x4_t is[4][2];
                        AI_UNROLL for (int q = 0; q < NP; q++) is[q][0] = is[q][1] = vdupq_n_s32(0);
                        AI_UNROLL for (int m = 0; m < 4; m++) {
                            const uint32x4_t c0 = vreinterpretq_u32_u8(vld1q_u8(qs + 64 * (8 * p + 2 * m))),
                                             c1 = vreinterpretq_u32_u8(vld1q_u8(qs + 64 * (8 * p + 2 * m + 1)));
                            const uint8x16_t z0 = vreinterpretq_u8_u32(vzip1q_u32(c0, c1)),
                                             z1 = vreinterpretq_u8_u32(vzip2q_u32(c0, c1));
                            const uint8x16_t o0 = hh ? vshrq_n_u8(z0, 4) : vandq_u8(z0, m4),
                                             o1 = hh ? vshrq_n_u8(z1, 4) : vandq_u8(z1, m4);
                            AI_UNROLL for (int q = 0; q < NP; q++) {
                                const int8x16_t xj = X[q].x[2 * p + hh][m];
                                is[q][0] = vusmmlaq_s32(is[q][0], o0, xj);
                                is[q][1] = vusmmlaq_s32(is[q][1], o1, xj);
                            }
                        }
                        const float32x4_t f = vmulq_f32(dw, ak_byte_f(Sp, (2 * p + hh) % 4));
                        const float32x4_t f0 = vzip1q_f32(f, f), f1 = vzip2q_f32(f, f);
                        AI_UNROLL for (int q = 0; q < NP; q++) {
                            s[q][0] = vfmaq_f32(s[q][0], vcvtq_f32_s32(is[q][0]), f0);
                            s[q][1] = vfmaq_f32(s[q][1], vcvtq_f32_s32(is[q][1]), f1);
                        }
                    }
                }
                const uint8x16_t mz0 = vreinterpretq_u8_u32(vzip1q_u32(M0, M1)),
                                 mz1 = vreinterpretq_u8_u32(vzip2q_u32(M0, M1));
                const float32x4_t dmw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 32 + 8 * qv)));
                const float32x4_t dm0 = vzip1q_f32(dmw, dmw), dm1 = vzip2q_f32(dmw, dmw);
                AI_UNROLL for (int q = 0; q < NP; q++) {
                    const int32x4_t z = vdupq_n_s32(0);
                    const int32x4_t i0 = vaddq_s32(vshlq_n_s32(vusmmlaq_s32(z, mz0, X[q].bh), 6),
                                                   vusmmlaq_s32(z, mz0, X[q].bl)),
                                    i1 = vaddq_s32(vshlq_n_s32(vusmmlaq_s32(z, mz1, X[q].bh), 6),
                                                   vusmmlaq_s32(z, mz1, X[q].bl));
                    acc[q][0] = vfmaq_f32(acc[q][0], s[q][0], X[q].d);
                    acc[q][1] = vfmaq_f32(acc[q][1], s[q][1], X[q].d);
                    acc[q][0] = vfmaq_f32(acc[q][0], vcvtq_f32_s32(i0), vnegq_f32(vmulq_f32(dm0, X[q].d)));
                    acc[q][1] = vfmaq_f32(acc[q][1], vcvtq_f32_s32(i1), vnegq_f32(vmulq_f32(dm1, X[q].d)));
                }
            }
            AI_UNROLL for (int q = 0; q < NP; q++) {
                float *y0 = y + (2 * (p0 + q)) * ldy + g * PB_PACK_ROWS + 4 * qv;
                ai_store_y(y0, y0 + ldy, acc[q][0], acc[q][1]);
            }
        }
    }
}

void pb_gemm_packed_q4_K_i8mm(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / PB_QK_K;
    const int np = nt / 2;
    if (np > 0) {
        ak_pair xp[AK_KB * 4];
        for (int64_t b0 = 0; b0 < nb; b0 += AK_KB) {
            const int kb = nb - b0 < AK_KB ? (int)(nb - b0) : AK_KB;
            ak_prep(xp, a, a_row, b0, kb, np);
            switch (np) {
            case 1: ak_tile(w, ng, g_size, xp, b0, kb, 0, y, ldy, 1); break;
            case 2: ak_tile(w, ng, g_size, xp, b0, kb, 0, y, ldy, 2); break;
            case 3: ak_tile(w, ng, g_size, xp, b0, kb, 0, y, ldy, 3); break;
            default: ak_tile(w, ng, g_size, xp, b0, kb, 0, y, ldy, 4); break;
            }
        }
    }
    if (nt & 1) /* the odd token: the sdot tile (it reads no meta) */
        pb_gemm_packed_q4_K_neon(K, w, ng, g_size, (const uint8_t *)a + (size_t)(nt - 1) * a_row, a_row, meta, 1,
                                 y + (nt - 1) * ldy, ldy);
}

/* ---- Q6_K -------------------------------------------------------------------------------------------------
 * Activations per chunk of AK_KB super-blocks and token pair: x[j][kg] = [t0 values 16j+8kg..+7 | t1 the
 * same] for the 16 sub-blocks j, the spec's offset term [-32 bsums0[j], -32 bsums1[j], ..] as each sub-block
 * sum's start, and [d0 d1 d0 d1]. A sub-block's weights are rebuilt for it alone (ql nibble + 2 qh bits, as
 * the sdot tile does for a chunk), so the 16 sums finish in the spec's order with 8 int32 accumulators live
 * for 4 pairs; the unsigned 6-bit values meet the signed activations in USMMLA. */
#define AK_Q6K_BLOCK (210 * PB_PACK_ROWS)

typedef struct a6_pair {
    int8x16_t x[16][2];
    int32x4_t bias[16];
    float32x4_t d;
} a6_pair;

static void a6_prep(a6_pair *xp, const uint8_t *a, size_t a_row, int64_t b0, int kb, int np) {
    for (int b = 0; b < kb; b++)
        for (int p = 0; p < np; p++) {
            const pb_block_q8_K *x0 = (const pb_block_q8_K *)(const void *)(a + (size_t)(2 * p) * a_row) + b0 + b;
            const pb_block_q8_K *x1 = (const pb_block_q8_K *)(const void *)(a + (size_t)(2 * p + 1) * a_row) + b0 + b;
            a6_pair *o = &xp[b * 4 + p];
            for (int j = 0; j < 16; j++) {
                const int64x2_t u = vreinterpretq_s64_s8(vld1q_s8(x0->qs + 16 * j)),
                                v = vreinterpretq_s64_s8(vld1q_s8(x1->qs + 16 * j));
                o->x[j][0] = vreinterpretq_s8_s64(vzip1q_s64(u, v));
                o->x[j][1] = vreinterpretq_s8_s64(vzip2q_s64(u, v));
                const int32_t c0 = -32 * x0->bsums[j], c1 = -32 * x1->bsums[j];
                const int32_t bb[4] = {c0, c1, c0, c1};
                o->bias[j] = vld1q_s32(bb);
            }
            const float dd[4] = {x0->d, x1->d, x0->d, x1->d};
            o->d = vld1q_f32(dd);
        }
}

/* unsigned 6-bit weights of chunk gq from its ql nibbles L and qh bits H (the packed bytes, zipped) */
AI_INLINE uint8x16_t a6_u(uint8x16_t L, uint8x16_t H, int gq) {
    const uint8x16_t k3f = vdupq_n_u8(0x3F), k30 = vdupq_n_u8(0x30);
    switch (gq) {
    case 0: return vandq_u8(vsliq_n_u8(L, H, 4), k3f);
    case 1: return vandq_u8(vsliq_n_u8(L, vshrq_n_u8(H, 2), 4), k3f);
    case 2: return vsriq_n_u8(vandq_u8(H, k30), L, 4);
    default: return vsriq_n_u8(vandq_u8(vshrq_n_u8(H, 2), k30), L, 4);
    }
}

/* signed scale byte j % 4 of each row lane, as float */
AI_INLINE float32x4_t a6_sc(int32x4_t S, int i) {
    switch (i) {
    case 0: return vcvtq_f32_s32(vshrq_n_s32(vshlq_n_s32(S, 24), 24));
    case 1: return vcvtq_f32_s32(vshrq_n_s32(vshlq_n_s32(S, 16), 24));
    case 2: return vcvtq_f32_s32(vshrq_n_s32(vshlq_n_s32(S, 8), 24));
    default: return vcvtq_f32_s32(vshrq_n_s32(S, 24));
    }
}

AI_INLINE void a6_tile(const uint8_t *w, int64_t ng, size_t g_size, const a6_pair *xp, int64_t b0, int kb, float *y,
                       int64_t ldy, const int NP) {
    for (int64_t g = 0; g < ng; g++) {
        for (int qv = 0; qv < 4; qv++) {
            for (int b = 0; b < kb; b++) {
                const uint8_t *bp = w + (size_t)g * g_size + (size_t)(b0 + b) * AK_Q6K_BLOCK;
                const uint8_t *cols = bp + 32 + 16 * qv;
                const a6_pair *X = &xp[b * 4];
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(bp + 8 * qv)));
                float32x4_t s[4][2];
                AI_UNROLL for (int q = 0; q < NP; q++) s[q][0] = s[q][1] = vdupq_n_f32(0.0f);
                /* j = 8h + 2gq + mh in order (h not unrolled: half the code, the same count) */
                _Pragma("GCC unroll 1") for (int h = 0; h < 2; h++) AI_UNROLL for (int jj = 0; jj < 8; jj++) {
                    const int gq = jj / 2, mh = jj % 2, j = 8 * h + jj;
                    /* GCC would keep the columns shared by chunks gq and gq + 2 live across sub-blocks and spill
                     * the sums instead (1.07x the instructions): an empty asm hides that the pointer is the same */
                    const uint8_t *cp = cols;
                    __asm__ volatile("" : "+r"(cp));
                    int32x4_t is[4][2];
                    AI_UNROLL for (int q = 0; q < NP; q++) is[q][0] = is[q][1] = X[q].bias[j];
                    AI_UNROLL for (int kg = 0; kg < 2; kg++) { /* values l = 16 mh + 8 kg .. +7 of chunk gq */
                        const int c = 4 * mh + 2 * kg, lc = 16 * h + 8 * (gq & 1) + c, hc = 32 + 8 * h + c;
                        const uint32x4_t l0 = vreinterpretq_u32_u8(vld1q_u8(cp + 64 * lc)),
                                         l1 = vreinterpretq_u32_u8(vld1q_u8(cp + 64 * (lc + 1))),
                                         h0 = vreinterpretq_u32_u8(vld1q_u8(cp + 64 * hc)),
                                         h1 = vreinterpretq_u32_u8(vld1q_u8(cp + 64 * (hc + 1)));
                        const uint8x16_t u0 = a6_u(vreinterpretq_u8_u32(vzip1q_u32(l0, l1)),
                                                   vreinterpretq_u8_u32(vzip1q_u32(h0, h1)), gq),
                                         u1 = a6_u(vreinterpretq_u8_u32(vzip2q_u32(l0, l1)),
                                                   vreinterpretq_u8_u32(vzip2q_u32(h0, h1)), gq);
                        AI_UNROLL for (int q = 0; q < NP; q++) {
                            is[q][0] = vusmmlaq_s32(is[q][0], u0, X[q].x[j][kg]);
                            is[q][1] = vusmmlaq_s32(is[q][1], u1, X[q].x[j][kg]);
                        }
                    }
                    const float32x4_t f =
                        vmulq_f32(dw, a6_sc(vreinterpretq_s32_u8(vld1q_u8(cp + 64 * (48 + j / 4))), jj % 4));
                    const float32x4_t f0 = vzip1q_f32(f, f), f1 = vzip2q_f32(f, f);
                    AI_UNROLL for (int q = 0; q < NP; q++) {
                        s[q][0] = vfmaq_f32(s[q][0], vcvtq_f32_s32(is[q][0]), f0);
                        s[q][1] = vfmaq_f32(s[q][1], vcvtq_f32_s32(is[q][1]), f1);
                    }
                }
                AI_UNROLL for (int q = 0; q < NP; q++) { /* a lane's running sum waits in y between super-blocks */
                    float32x4_t acc0, acc1;
                    float *y0 = y + (2 * q) * ldy + g * PB_PACK_ROWS + 4 * qv;
                    if (b0 + b)
                        ai_load_y(y0, y0 + ldy, &acc0, &acc1);
                    else
                        acc0 = acc1 = vdupq_n_f32(0.0f);
                    ai_store_y(y0, y0 + ldy, vfmaq_f32(acc0, s[q][0], X[q].d), vfmaq_f32(acc1, s[q][1], X[q].d));
                }
            }
        }
    }
}

void pb_gemm_packed_q6_K_i8mm(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / PB_QK_K;
    const int np = nt / 2;
    if (np > 0) {
        a6_pair xp[AK_KB * 4];
        for (int64_t b0 = 0; b0 < nb; b0 += AK_KB) {
            const int kb = nb - b0 < AK_KB ? (int)(nb - b0) : AK_KB;
            a6_prep(xp, a, a_row, b0, kb, np);
            switch (np) {
            case 1: a6_tile(w, ng, g_size, xp, b0, kb, y, ldy, 1); break;
            case 2: a6_tile(w, ng, g_size, xp, b0, kb, y, ldy, 2); break;
            case 3: a6_tile(w, ng, g_size, xp, b0, kb, y, ldy, 3); break;
            default: a6_tile(w, ng, g_size, xp, b0, kb, y, ldy, 4); break;
            }
        }
    }
    if (nt & 1) /* the odd token: the sdot tile */
        pb_gemm_packed_q6_K_neon(K, w, ng, g_size, (const uint8_t *)a + (size_t)(nt - 1) * a_row, a_row, meta, 1,
                                 y + (nt - 1) * ldy, ldy);
}
