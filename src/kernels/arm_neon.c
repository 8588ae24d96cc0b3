/* arm_neon.c -- ARM64 kernels: NEON + dotprod (sdot), built with -march=armv8.2-a+dotprod+fp16 (Makefile
 * ISA_FLAGS). Only dispatch.c calls into here, and only when pb_cpu_features() reports dotprod.
 *
 * Same shape as the x86 family (x86_kern.h): one tile kernel per type (nr weight rows x nt <= PB_GEMM_NT
 * tokens, a weight block unpacked once for all tokens), vec_dot = the tile with nr = nt = 1. Integer
 * inner sums are exact and each block's float step is written as in ref.c, so results equal ref.c's. */
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "tensor/quant.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#define INLINE  static inline __attribute__((always_inline))
#define UNROLL8 _Pragma("GCC unroll 8")

#define Q8K(a, a_row, t, b) ((const pb_block_q8_K *)((const uint8_t *)(a) + (size_t)(t) * (a_row)) + (b))
#define Q80(a, a_row, t, b) ((const pb_block_q8_0 *)((const uint8_t *)(a) + (size_t)(t) * (a_row)) + (b))

#define TILE_SWITCH(body, ...)                                                                                         \
    switch (nt) {                                                                                                      \
    case 1: body(__VA_ARGS__, 1); break;                                                                               \
    case 2: body(__VA_ARGS__, 2); break;                                                                               \
    case 3: body(__VA_ARGS__, 3); break;                                                                               \
    case 4: body(__VA_ARGS__, 4); break;                                                                               \
    case 5: body(__VA_ARGS__, 5); break;                                                                               \
    case 6: body(__VA_ARGS__, 6); break;                                                                               \
    case 7: body(__VA_ARGS__, 7); break;                                                                               \
    default: body(__VA_ARGS__, 8); break;                                                                              \
    }

#define ROWS_BODY(rowfn, blk_t, w, a, y, NT)                                                                           \
    for (int64_t r = 0; r < nr; r++)                                                                                   \
    rowfn(nb, (const blk_t *)((const uint8_t *)(w) + (size_t)r * w_row), a, a_row, (y) + r, ldy, NT)

INLINE float h2f(uint16_t h) {
    float16x4_t v = vreinterpret_f16_u16(vdup_n_u16(h));
    return vgetq_lane_f32(vcvt_f32_f16(v), 0);
}

INLINE int32x4_t dot16(int8x16_t w, const int8_t *a) { return vdotq_s32(vdupq_n_s32(0), w, vld1q_s8(a)); }

// --- Q4_K / Q5_K x Q8_K ---------------------------------------------------------------------------------

INLINE void k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 8; j++) pb_quant_scale_min_k4(j, q, &sc[j], &mn[j]);
}

/* m_j * (bsum_2j + bsum_2j+1) summed over j */
INLINE int32_t k4_minsum(const pb_block_q8_K *x, int16x8_t mins) {
    int16x8_t pair = vpaddq_s16(vld1q_s16(x->bsums), vld1q_s16(x->bsums + 8));
    int32x4_t p = vmull_s16(vget_low_s16(pair), vget_low_s16(mins));
    p = vmlal_s16(p, vget_high_s16(pair), vget_high_s16(mins));
    return vaddvq_s32(p);
}

/* q[16]: the 256 weights of a block as 16 vectors of 16 values (0..31), in activation order */
INLINE void k45_row(int64_t nb, const void *wv, bool five, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    float sum[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) sum[t] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), one = vdupq_n_u8(1);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *scales, *qs, *qh = NULL;
        uint16_t dh, dminh;
        if (five) {
            const pb_block_q5_K *w = (const pb_block_q5_K *)wv + b;
            scales = w->scales, qs = w->qs, qh = w->qh, dh = w->d, dminh = w->dmin;
        } else {
            const pb_block_q4_K *w = (const pb_block_q4_K *)wv + b;
            scales = w->scales, qs = w->qs, dh = w->d, dminh = w->dmin;
        }
        uint8_t sc[8], mn[8];
        k4_scales(scales, sc, mn);
        int8x16_t q[16];
        for (int i = 0; i < 4; i++) {
            for (int k = 0; k < 2; k++) {
                uint8x16_t v = vld1q_u8(qs + 32 * i + 16 * k);
                uint8x16_t lo = vandq_u8(v, m4), hi = vshrq_n_u8(v, 4);
                if (five) {
                    uint8x16_t h = vld1q_u8(qh + 16 * k);
                    lo = vorrq_u8(lo, vshlq_n_u8(vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(-2 * i))), one), 4));
                    hi = vorrq_u8(hi, vshlq_n_u8(vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(-2 * i - 1))), one), 4));
                }
                q[4 * i + k] = vreinterpretq_s8_u8(lo);
                q[4 * i + 2 + k] = vreinterpretq_s8_u8(hi);
            }
        }
        const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
        const float dw = h2f(dh), dminw = h2f(dminh);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            int32x4_t is = vdupq_n_s32(0);
            for (int j = 0; j < 8; j++) {
                int32x4_t p = vdotq_s32(dot16(q[2 * j], x->qs + 32 * j), q[2 * j + 1], vld1q_s8(x->qs + 32 * j + 16));
                is = vmlaq_n_s32(is, p, sc[j]);
            }
            const int isum = vaddvq_s32(is), summ = k4_minsum(x, mins);
            const float d = x->d * dw, dmin = x->d * dminw;
            sum[t] += d * (float)isum - dmin * (float)summ;
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = sum[t];
}

INLINE void q4k_row(int64_t nb, const pb_block_q4_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    k45_row(nb, w, false, a, a_row, y, ldy, NT);
}
INLINE void q5k_row(int64_t nb, const pb_block_q5_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    k45_row(nb, w, true, a, a_row, y, ldy, NT);
}

void pb_gemm_q4_K_q8_K_neon(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / PB_QK_K;
    TILE_SWITCH(ROWS_BODY, q4k_row, pb_block_q4_K, w, a, y)
}
void pb_vec_dot_q4_K_q8_K_neon(int64_t n, float *s, const void *x, const void *y) {
    q4k_row(n / PB_QK_K, x, y, 0, s, 0, 1);
}
void pb_gemm_q5_K_q8_K_neon(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / PB_QK_K;
    TILE_SWITCH(ROWS_BODY, q5k_row, pb_block_q5_K, w, a, y)
}
void pb_vec_dot_q5_K_q8_K_neon(int64_t n, float *s, const void *x, const void *y) {
    q5k_row(n / PB_QK_K, x, y, 0, s, 0, 1);
}

// --- Q6_K x Q8_K ----------------------------------------------------------------------------------------

INLINE void q6k_row(int64_t nb, const pb_block_q6_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    float sum[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) sum[t] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m30 = vdupq_n_u8(0x30);
    const int8x16_t off = vdupq_n_s8(32);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t q[16]; /* 16-value sub-blocks in activation order, values -32..31 */
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 2; k++) {
                uint8x16_t l0 = vld1q_u8(w[b].ql + 64 * h + 16 * k), l1 = vld1q_u8(w[b].ql + 64 * h + 32 + 16 * k);
                uint8x16_t hv = vld1q_u8(w[b].qh + 32 * h + 16 * k);
                uint8x16_t g0 = vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hv, 4), m30));
                uint8x16_t g1 = vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hv, 2), m30));
                uint8x16_t g2 = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hv, m30));
                uint8x16_t g3 = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hv, 2), m30));
                q[8 * h + 0 + k] = vsubq_s8(vreinterpretq_s8_u8(g0), off);
                q[8 * h + 2 + k] = vsubq_s8(vreinterpretq_s8_u8(g1), off);
                q[8 * h + 4 + k] = vsubq_s8(vreinterpretq_s8_u8(g2), off);
                q[8 * h + 6 + k] = vsubq_s8(vreinterpretq_s8_u8(g3), off);
            }
        }
        const int8_t *sc = w[b].scales;
        const float dw = h2f(w[b].d);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            int32x4_t is = vdupq_n_s32(0);
            for (int s = 0; s < 16; s++) is = vmlaq_n_s32(is, dot16(q[s], x->qs + 16 * s), sc[s]);
            sum[t] += x->d * dw * (float)vaddvq_s32(is);
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = sum[t];
}

void pb_gemm_q6_K_q8_K_neon(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / PB_QK_K;
    TILE_SWITCH(ROWS_BODY, q6k_row, pb_block_q6_K, w, a, y)
}
void pb_vec_dot_q6_K_q8_K_neon(int64_t n, float *s, const void *x, const void *y) {
    q6k_row(n / PB_QK_K, x, y, 0, s, 0, 1);
}

// --- Q4_0 / Q8_0 x Q8_0 ---------------------------------------------------------------------------------

INLINE void q40_row(int64_t nb, const pb_block_q4_0 *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    float sum[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) sum[t] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    for (int64_t b = 0; b < nb; b++) {
        const uint8x16_t v = vld1q_u8(w[b].qs);
        const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, m4)), eight);
        const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
        const float dw = h2f(w[b].d);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_0 *x = Q80(a, a_row, t, b);
            int32x4_t p = vdotq_s32(dot16(lo, x->qs), hi, vld1q_s8(x->qs + 16));
            sum[t] += (float)vaddvq_s32(p) * (dw * h2f(x->d));
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = sum[t];
}

INLINE void q80_row(int64_t nb, const pb_block_q8_0 *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    float sum[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) sum[t] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8x16_t lo = vld1q_s8(w[b].qs), hi = vld1q_s8(w[b].qs + 16);
        const float dw = h2f(w[b].d);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_0 *x = Q80(a, a_row, t, b);
            int32x4_t p = vdotq_s32(dot16(lo, x->qs), hi, vld1q_s8(x->qs + 16));
            sum[t] += (float)vaddvq_s32(p) * (dw * h2f(x->d));
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = sum[t];
}

void pb_gemm_q4_0_q8_0_neon(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(ROWS_BODY, q40_row, pb_block_q4_0, w, a, y)
}
void pb_vec_dot_q4_0_q8_0_neon(int64_t n, float *s, const void *x, const void *y) { q40_row(n / 32, x, y, 0, s, 0, 1); }
void pb_gemm_q8_0_q8_0_neon(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(ROWS_BODY, q80_row, pb_block_q8_0, w, a, y)
}
void pb_vec_dot_q8_0_q8_0_neon(int64_t n, float *s, const void *x, const void *y) { q80_row(n / 32, x, y, 0, s, 0, 1); }

// --- Q4_1 / Q5_0 / Q5_1 x Q8_0 --------------------------------------------------------------------------

enum { Q1_Q41, Q1_Q50, Q1_Q51 };

/* 0x10 in byte e of lo (e < 16) / hi (e - 16) where bit e of qh is set: the 5th bit of Q5_0 / Q5_1 */
static const uint8_t hbits_tab[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
INLINE void hbits32b(const uint8_t *qhp, uint8x16_t bit, uint8x16_t *lo, uint8x16_t *hi) {
    const uint8x16_t b4 = vdupq_n_u8(0x10);
    *lo = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qhp[0]), vdup_n_u8(qhp[1])), bit), b4);
    *hi = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qhp[2]), vdup_n_u8(qhp[3])), bit), b4);
}
INLINE void hbits32(const uint8_t *qhp, uint8x16_t *lo, uint8x16_t *hi) {
    const uint8x16_t bit = vld1q_u8(hbits_tab), b4 = vdupq_n_u8(0x10);
    *lo = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qhp[0]), vdup_n_u8(qhp[1])), bit), b4);
    *hi = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qhp[2]), vdup_n_u8(qhp[3])), bit), b4);
}

/* Quants of elements 0..15 (lo) and 16..31 (hi): Q4_1 / Q5_1 unsigned (0..15 / 0..31), Q5_0 minus 16. The
 * float step is ref.c's: isum * (d_w * d_a) (+ m_w * (d_a * asum) for Q4_1 / Q5_1). */
INLINE void q1_row(int64_t nb, const uint8_t *w, int kind, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    float sum[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) sum[t] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t ones = vdupq_n_s8(1);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *qs, *qh = NULL;
        uint16_t dh, mh = 0;
        if (kind == Q1_Q41) {
            const pb_block_q4_1 *x = (const pb_block_q4_1 *)w + b;
            qs = x->qs, dh = x->d, mh = x->m;
        } else if (kind == Q1_Q50) {
            const pb_block_q5_0 *x = (const pb_block_q5_0 *)w + b;
            qs = x->qs, qh = x->qh, dh = x->d;
        } else {
            const pb_block_q5_1 *x = (const pb_block_q5_1 *)w + b;
            qs = x->qs, qh = x->qh, dh = x->d, mh = x->m;
        }
        const uint8x16_t v = vld1q_u8(qs);
        uint8x16_t ulo = vandq_u8(v, m4), uhi = vshrq_n_u8(v, 4);
        if (kind != Q1_Q41) {
            uint8x16_t hlo, hhi;
            hbits32(qh, &hlo, &hhi);
            ulo = vorrq_u8(ulo, hlo), uhi = vorrq_u8(uhi, hhi);
        }
        int8x16_t lo = vreinterpretq_s8_u8(ulo), hi = vreinterpretq_s8_u8(uhi);
        if (kind == Q1_Q50) lo = vsubq_s8(lo, vdupq_n_s8(16)), hi = vsubq_s8(hi, vdupq_n_s8(16));
        const float dw = h2f(dh), mw = kind == Q1_Q50 ? 0.0f : h2f(mh);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_0 *x = Q80(a, a_row, t, b);
            const int8x16_t a0 = vld1q_s8(x->qs), a1 = vld1q_s8(x->qs + 16);
            const int isum = vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, a0), hi, a1));
            const float da = h2f(x->d);
            if (kind == Q1_Q50) {
                sum[t] += (float)isum * (dw * da);
            } else {
                const int asum = vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), ones, a0), ones, a1));
                sum[t] += (float)isum * (dw * da) + mw * (da * (float)asum);
            }
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = sum[t];
}

INLINE void q41_row(int64_t nb, const pb_block_q4_1 *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    q1_row(nb, (const uint8_t *)w, Q1_Q41, a, a_row, y, ldy, NT);
}
INLINE void q50_row(int64_t nb, const pb_block_q5_0 *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    q1_row(nb, (const uint8_t *)w, Q1_Q50, a, a_row, y, ldy, NT);
}
INLINE void q51_row(int64_t nb, const pb_block_q5_1 *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    q1_row(nb, (const uint8_t *)w, Q1_Q51, a, a_row, y, ldy, NT);
}

void pb_gemm_q4_1_q8_0_neon(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(ROWS_BODY, q41_row, pb_block_q4_1, w, a, y)
}
void pb_vec_dot_q4_1_q8_0_neon(int64_t n, float *s, const void *x, const void *y) { q41_row(n / 32, x, y, 0, s, 0, 1); }
/* Q5_0, one token (decode): a chunk of CB activation blocks (2 CB vectors, their scales in D) stays in registers
 * while the rows' blocks stream by, so each weight byte is loaded once and the activations once per chunk, not
 * once per row (Q5_0 has no packed tile: gemma-3's 1152-column matrices). A row's running sum waits in y between
 * chunks (4 bytes per row and chunk). Per row the float sequence is q1_row's. */
INLINE void q50_t1_chunk(const uint8_t *w, size_t w_row, int64_t nr, const pb_block_q8_0 *x, int64_t b0, float *y,
                         const int CB) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t s16 = vdupq_n_s8(16);
    const uint8x16_t bit = vld1q_u8(hbits_tab);
    int8x16_t A[16];
    /* plain floats, not the lanes of two vectors: clang (Apple's, the NDK's) wants a lane index that is a constant
     * expression, and i % 4 is one only after unrolling, which GCC does first and clang does not */
    float D[8];
    UNROLL8 for (int i = 0; i < CB; i++) A[2 * i] = vld1q_s8(x[b0 + i].qs), A[2 * i + 1] = vld1q_s8(x[b0 + i].qs + 16);
    UNROLL8 for (int i = 0; i < CB; i++) D[i] = h2f(x[b0 + i].d);
    for (int64_t r = 0; r < nr; r++) {
        const pb_block_q5_0 *wb = (const pb_block_q5_0 *)(const void *)(w + (size_t)r * w_row) + b0;
        float sum = b0 ? y[r] : 0.0f;
        UNROLL8 for (int i = 0; i < CB; i++) {
            const uint8x16_t v = vld1q_u8(wb[i].qs);
            uint8x16_t hlo, hhi;
            hbits32b(wb[i].qh, bit, &hlo, &hhi);
            const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, m4), hlo)), s16);
            const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v, 4), hhi)), s16);
            const int isum = vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, A[2 * i]), hi, A[2 * i + 1]));
            const float dw = h2f(wb[i].d), da = D[i];
            sum += (float)isum * (dw * da);
        }
        y[r] = sum;
    }
}

void pb_gemm_q5_0_q8_0_neon(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    if (nt == 1) {
        const uint8_t *w8 = w;
        int64_t b = 0;
        for (; b + 8 <= nb; b += 8) q50_t1_chunk(w8, w_row, nr, a, b, y, 8);
        for (; b + 4 <= nb; b += 4) q50_t1_chunk(w8, w_row, nr, a, b, y, 4);
        for (; b < nb; b++) q50_t1_chunk(w8, w_row, nr, a, b, y, 1);
        return;
    }
    TILE_SWITCH(ROWS_BODY, q50_row, pb_block_q5_0, w, a, y)
}
void pb_vec_dot_q5_0_q8_0_neon(int64_t n, float *s, const void *x, const void *y) { q50_row(n / 32, x, y, 0, s, 0, 1); }
void pb_gemm_q5_1_q8_0_neon(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(ROWS_BODY, q51_row, pb_block_q5_1, w, a, y)
}
void pb_vec_dot_q5_1_q8_0_neon(int64_t n, float *s, const void *x, const void *y) { q51_row(n / 32, x, y, 0, s, 0, 1); }

// --- Q2_K / Q3_K x Q8_K ---------------------------------------------------------------------------------

/* Q2_K: q[s] = the 16 quants (0..3) of sub-block s = 8h + 2g + k: bits 2g..2g+1 of qs[32h + 16k ..]. */
INLINE void q2k_row(int64_t nb, const pb_block_q2_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    float sum[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) sum[t] = 0.0f;
    const uint8x16_t m3 = vdupq_n_u8(3), m4 = vdupq_n_u8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t q[16];
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 2; k++) {
                const uint8x16_t v = vld1q_u8(w[b].qs + 32 * h + 16 * k);
                for (int g = 0; g < 4; g++)
                    q[8 * h + 2 * g + k] = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)(-2 * g))), m3));
            }
        }
        const uint8x16_t sb = vld1q_u8(w[b].scales);
        uint8_t sc[16];
        vst1q_u8(sc, vandq_u8(sb, m4));
        const uint8x16_t mn = vshrq_n_u8(sb, 4);
        const int16x8_t mn0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn)));
        const int16x8_t mn1 = vreinterpretq_s16_u16(vmovl_high_u8(mn));
        const float dw = h2f(w[b].d), dminw = h2f(w[b].dmin);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            int32x4_t is = vdupq_n_s32(0);
            for (int s = 0; s < 16; s++) is = vmlaq_n_s32(is, dot16(q[s], x->qs + 16 * s), sc[s]);
            const int16x8_t b0 = vld1q_s16(x->bsums), b1 = vld1q_s16(x->bsums + 8);
            int32x4_t ms = vmull_s16(vget_low_s16(b0), vget_low_s16(mn0));
            ms = vmlal_s16(ms, vget_high_s16(b0), vget_high_s16(mn0));
            ms = vmlal_s16(ms, vget_low_s16(b1), vget_low_s16(mn1));
            ms = vmlal_s16(ms, vget_high_s16(b1), vget_high_s16(mn1));
            const int isum = vaddvq_s32(is), summ = vaddvq_s32(ms);
            const float d = x->d * dw, dmin = x->d * dminw;
            sum[t] += d * (float)isum - dmin * (float)summ;
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = sum[t];
}

void pb_gemm_q2_K_q8_K_neon(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / PB_QK_K;
    TILE_SWITCH(ROWS_BODY, q2k_row, pb_block_q2_K, w, a, y)
}
void pb_vec_dot_q2_K_q8_K_neon(int64_t n, float *s, const void *x, const void *y) {
    q2k_row(n / PB_QK_K, x, y, 0, s, 0, 1);
}

/* the sixteen 6-bit Q3_K scales minus 32 (layout: quant-formats.md §2, Q3_K) */
INLINE void q3k_scales(const uint8_t *s, int8_t sc[16]) {
    uint32_t a0, a1, a2;
    memcpy(&a0, s, 4);
    memcpy(&a1, s + 4, 4);
    memcpy(&a2, s + 8, 4);
    const uint32_t lo = 0x0f0f0f0fu, hi = 0x03030303u;
    const uint32_t u[4] = {(a0 & lo) | ((a2 & hi) << 4), (a1 & lo) | (((a2 >> 2) & hi) << 4),
                           ((a0 >> 4) & lo) | (((a2 >> 4) & hi) << 4), ((a1 >> 4) & lo) | (((a2 >> 6) & hi) << 4)};
    uint8_t b[16];
    memcpy(b, u, 16);
    vst1q_s8(sc, vsubq_s8(vreinterpretq_s8_u8(vld1q_u8(b)), vdupq_n_s8(32)));
}

/* Q3_K: q[s] = low2 + 4 hbit - 4 (-4..3) of sub-block s = 2j + k, j = 4h + g: low2 as Q2_K, the high bit is
 * bit j of hmask[16k + l]. */
INLINE void q3k_row(int64_t nb, const pb_block_q3_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    float sum[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) sum[t] = 0.0f;
    const uint8x16_t m3 = vdupq_n_u8(3), b2 = vdupq_n_u8(4);
    const int8x16_t four = vdupq_n_s8(4);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t q[16];
        const uint8x16_t hm[2] = {vld1q_u8(w[b].hmask), vld1q_u8(w[b].hmask + 16)};
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 2; k++) {
                const uint8x16_t v = vld1q_u8(w[b].qs + 32 * h + 16 * k);
                for (int g = 0; g < 4; g++) {
                    const int j = 4 * h + g;
                    uint8x16_t low = vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)(-2 * g))), m3);
                    uint8x16_t hb = vandq_u8(vshlq_u8(hm[k], vdupq_n_s8((int8_t)(2 - j))), b2);
                    q[2 * j + k] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, hb)), four);
                }
            }
        }
        int8_t sc[16];
        q3k_scales(w[b].scales, sc);
        const float dw = h2f(w[b].d);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            int32x4_t is = vdupq_n_s32(0);
            for (int s = 0; s < 16; s++) is = vmlaq_n_s32(is, dot16(q[s], x->qs + 16 * s), sc[s]);
            sum[t] += x->d * dw * (float)vaddvq_s32(is);
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = sum[t];
}

void pb_gemm_q3_K_q8_K_neon(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / PB_QK_K;
    TILE_SWITCH(ROWS_BODY, q3k_row, pb_block_q3_K, w, a, y)
}
void pb_vec_dot_q3_K_q8_K_neon(int64_t n, float *s, const void *x, const void *y) {
    q3k_row(n / PB_QK_K, x, y, 0, s, 0, 1);
}

// --- float weights --------------------------------------------------------------------------------------

void pb_vec_dot_f32_f32_neon(int64_t n, float *s, const void *x, const void *y) {
    const float *w = x, *v = y;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        a0 = vfmaq_f32(a0, vld1q_f32(w + i), vld1q_f32(v + i));
        a1 = vfmaq_f32(a1, vld1q_f32(w + i + 4), vld1q_f32(v + i + 4));
    }
    float sum = vaddvq_f32(vaddq_f32(a0, a1));
    for (; i < n; i++) sum += w[i] * v[i];
    *s = sum;
}

void pb_vec_dot_f16_f32_neon(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *w = x;
    const float *v = y;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(w + i));
        a0 = vfmaq_f32(a0, vcvt_f32_f16(vget_low_f16(h)), vld1q_f32(v + i));
        a1 = vfmaq_f32(a1, vcvt_high_f32_f16(h), vld1q_f32(v + i + 4));
    }
    float sum = vaddvq_f32(vaddq_f32(a0, a1));
    for (; i < n; i++) sum += h2f(w[i]) * v[i];
    *s = sum;
}

void pb_vec_dot_bf16_f32_neon(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *w = x;
    const float *v = y;
    float32x4_t a0 = vdupq_n_f32(0);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t f = vreinterpretq_f32_u32(vshlq_n_u32(vmovl_u16(vld1_u16(w + i)), 16));
        a0 = vfmaq_f32(a0, f, vld1q_f32(v + i));
    }
    float sum = vaddvq_f32(a0);
    for (; i < n; i++) sum += pb_bf16_to_fp32(w[i]) * v[i];
    *s = sum;
}

float pb_dot_f32_neon(const float *a, const float *b, int64_t n) {
    float s;
    pb_vec_dot_f32_f32_neon(n, &s, a, b);
    return s;
}

void pb_mad_f32_neon(float *y, const float *x, float a, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++) y[i] += a * x[i];
}

/* ---- attention over an fp16 KV cache -------------------------------------------------------------------
 * Fused versions of dispatch.c's convert-then-float tiles: each K or V row is read once, as fp16, and
 * converted in registers; no float copy goes through memory. Bit-identical to those tiles: per query row and
 * key the dot keeps pb_vec_dot_f32_f32_neon's two accumulators, reduction and scalar tail; per value the mad
 * is pb_mad_f32_neon's fma (scalar tail y += a * x), keys in order, after the rescale y *= c. */

#define F16_UNROLL _Pragma("GCC unroll 8")

/* QB query rows x KB keys: each 8-value step loads the QB query slices once for KB keys and each key's
 * fp16 slice once for the QB rows (2 QB KB accumulators live) */
INLINE void f16_dot_blk(const float *const *q, const uint16_t *k, size_t ldk, int64_t n, float *s, size_t lds,
                        const int QB, const int KB) {
    float32x4_t a0[4][4], a1[4][4];
    F16_UNROLL for (int r = 0; r < QB; r++) F16_UNROLL for (int b = 0; b < KB; b++) a0[r][b] = a1[r][b] =
        vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t kl[4], kh[4];
        F16_UNROLL for (int b = 0; b < KB; b++) {
            const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(k + (size_t)b * ldk + i));
            kl[b] = vcvt_f32_f16(vget_low_f16(h));
            kh[b] = vcvt_high_f32_f16(h);
        }
        F16_UNROLL for (int r = 0; r < QB; r++) {
            const float32x4_t ql = vld1q_f32(q[r] + i), qh = vld1q_f32(q[r] + i + 4);
            F16_UNROLL for (int b = 0; b < KB; b++) {
                a0[r][b] = vfmaq_f32(a0[r][b], ql, kl[b]);
                a1[r][b] = vfmaq_f32(a1[r][b], qh, kh[b]);
            }
        }
    }
    F16_UNROLL for (int r = 0; r < QB; r++) F16_UNROLL for (int b = 0; b < KB; b++) {
        float sum = vaddvq_f32(vaddq_f32(a0[r][b], a1[r][b]));
        for (int64_t j = i; j < n; j++) sum += q[r][j] * h2f(k[(size_t)b * ldk + j]);
        s[(size_t)r * lds + b] = sum;
    }
}

/* keys in blocks of 4 (2 when 3 or 4 query rows share them: 16 accumulators at most), query rows by up to 4 */
#define F16_DOT_KEYS(QB)                                                                                               \
    do {                                                                                                               \
        const int kb_ = (QB) <= 2 ? 4 : 2;                                                                             \
        int b = 0;                                                                                                     \
        if (kb_ == 4)                                                                                                  \
            for (; b + 4 <= nk; b += 4)                                                                                \
                f16_dot_blk(q + r0, k + (size_t)b * ldk, ldk, n, s + r0 * lds + b, lds, QB, 4);                        \
        for (; b + 2 <= nk; b += 2) f16_dot_blk(q + r0, k + (size_t)b * ldk, ldk, n, s + r0 * lds + b, lds, QB, 2);    \
        for (; b < nk; b++) f16_dot_blk(q + r0, k + (size_t)b * ldk, ldk, n, s + r0 * lds + b, lds, QB, 1);            \
    } while (0)

void pb_dot_f16_tile_neon(const float *const *q, int nq, const uint16_t *k, size_t ldk, int nk, int64_t n, float *s,
                          size_t lds) {
    for (int r0 = 0; r0 < nq;) {
        switch (nq - r0) {
        case 1:
            F16_DOT_KEYS(1);
            r0 += 1;
            break;
        case 2:
            F16_DOT_KEYS(2);
            r0 += 2;
            break;
        case 3:
            F16_DOT_KEYS(3);
            r0 += 3;
            break;
        default:
            F16_DOT_KEYS(4);
            r0 += 4;
            break;
        }
    }
}
#undef F16_DOT_KEYS

/* JB state rows, one slice of 4 VB values each: rescaled, then every key's fp16 value slice added in order
 * (JB VB <= 16 accumulators live; a key's weights a[j][k] are loaded once per slice) */
INLINE void f16_mad_blk(float *const *y, const float *c, const float *const *a, const uint16_t *x, size_t ldx, int nk,
                        int64_t i0, const int JB, const int VB) {
    float32x4_t acc[4][8];
    F16_UNROLL for (int j = 0; j < JB; j++) F16_UNROLL for (int v = 0; v < VB; v++) acc[j][v] =
        vmulq_n_f32(vld1q_f32(y[j] + i0 + 4 * v), c[j]);
    for (int kk = 0; kk < nk; kk++) {
        float32x4_t xv[8];
        F16_UNROLL for (int v = 0; v < VB; v += 2) {
            if (VB - v >= 2) {
                const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(x + (size_t)kk * ldx + i0 + 4 * v));
                xv[v] = vcvt_f32_f16(vget_low_f16(h));
                xv[v + 1] = vcvt_high_f32_f16(h);
            } else {
                xv[v] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + (size_t)kk * ldx + i0 + 4 * v)));
            }
        }
        F16_UNROLL for (int j = 0; j < JB; j++) {
            const float w = a[j][kk];
            F16_UNROLL for (int v = 0; v < VB; v++) acc[j][v] = vfmaq_n_f32(acc[j][v], xv[v], w);
        }
    }
    F16_UNROLL for (int j = 0; j < JB; j++) F16_UNROLL for (int v = 0; v < VB; v++)
        vst1q_f32(y[j] + i0 + 4 * v, acc[j][v]);
}

#define F16_MAD_ROWS(JB)                                                                                               \
    do {                                                                                                               \
        int64_t i = 0;                                                                                                 \
        if ((JB) <= 2)                                                                                                 \
            for (; i + 32 <= n; i += 32) f16_mad_blk(y + j0, c + j0, a + j0, x, ldx, nk, i, JB, 8);                    \
        for (; i + 16 <= n; i += 16) f16_mad_blk(y + j0, c + j0, a + j0, x, ldx, nk, i, JB, 4);                        \
        for (; i + 4 <= n; i += 4) f16_mad_blk(y + j0, c + j0, a + j0, x, ldx, nk, i, JB, 1);                          \
        for (int j = j0; j < j0 + (JB); j++)                                                                           \
            for (int64_t e = i; e < n; e++) {                                                                          \
                float v = y[j][e] * c[j];                                                                              \
                for (int kk = 0; kk < nk; kk++) v += a[j][kk] * h2f(x[(size_t)kk * ldx + e]);                          \
                y[j][e] = v;                                                                                           \
            }                                                                                                          \
    } while (0)

void pb_mad_f16_tile_neon(float *const *y, const float *c, const float *const *a, int ny, const uint16_t *x, size_t ldx,
                          int nk, int64_t n) {
    for (int j0 = 0; j0 < ny;) {
        switch (ny - j0) {
        case 1:
            F16_MAD_ROWS(1);
            j0 += 1;
            break;
        case 2:
            F16_MAD_ROWS(2);
            j0 += 2;
            break;
        case 3:
            F16_MAD_ROWS(3);
            j0 += 3;
            break;
        default:
            F16_MAD_ROWS(4);
            j0 += 4;
            break;
        }
    }
}
#undef F16_MAD_ROWS

/* ---- GeGLU, soft-cap, attention weights: x86_kern.h's exp-based forms on 4 lanes ---------------------------
 * exp(z) = 2^n * p(r), n = round(z log2 e), r = z - n ln 2 (ln 2 in two parts), p Taylor to r^6; clamped to
 * [-87, 88]. Agrees with expf to ~2 ulp; deterministic for a given n (the lanes do not mix). */
INLINE float32x4_t exp4(float32x4_t z) {
    z = vminq_f32(vmaxq_f32(z, vdupq_n_f32(-87.0f)), vdupq_n_f32(88.0f));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(z, 1.44269504088896341f));
    float32x4_t r = vfmsq_f32(z, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 720.0f);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

/* gate = gelu_tanh(gate) * up with 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3):
 * a few float ulps from tensor/ops.c's tanhf form (glibc's tanhf is one call per value) */
void pb_geglu_neon(float *gate, const float *up, int64_t n) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t x = vld1q_f32(gate + i), x3 = vmulq_f32(vmulq_f32(x, x), x);
        const float32x4_t z = vmulq_n_f32(vfmaq_n_f32(x, x3, 0.044715f), -2.0f * 0.7978845608028654f);
        vst1q_f32(gate + i, vmulq_f32(vdivq_f32(x, vaddq_f32(one, exp4(z))), vld1q_f32(up + i)));
    }
    for (; i < n; i++)
        gate[i] = gate[i] /
                  (1.0f + expf(-2.0f * 0.7978845608028654f * (gate[i] + 0.044715f * gate[i] * gate[i] * gate[i]))) *
                  up[i];
}

/* tanh(u) = 1 - 2 / (1 + exp(2u)); for |u| < 1/8 (where that cancels) the odd Taylor series to u^9 */
INLINE float32x4_t tanh4(float32x4_t u) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t big = vsubq_f32(one, vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(one, exp4(vaddq_f32(u, u)))));
    const float32x4_t u2 = vmulq_f32(u, u);
    float32x4_t p = vdupq_n_f32(62.0f / 2835.0f);
    p = vfmaq_f32(vdupq_n_f32(-17.0f / 315.0f), p, u2);
    p = vfmaq_f32(vdupq_n_f32(2.0f / 15.0f), p, u2);
    p = vfmaq_f32(vdupq_n_f32(-1.0f / 3.0f), p, u2);
    p = vmulq_f32(u, vfmaq_f32(one, p, u2));
    return vbslq_f32(vcaltq_f32(u, vdupq_n_f32(0.125f)), p, big);
}

/* Gemma 2 soft-cap in place: s = cap * tanh(s / cap) (attention scores, final logits) */
void pb_softcap_neon(float *s, int64_t n, float cap) {
    const float32x4_t cv = vdupq_n_f32(cap);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(s + i, vmulq_f32(cv, tanh4(vdivq_f32(vld1q_f32(s + i), cv))));
    for (; i < n; i++) s[i] = tanhf(s[i] / cap) * cap;
}

float pb_att_exp_neon(float *s, int64_t n, float cap, float *mx) {
    if (cap > 0.0f) pb_softcap_neon(s, n, cap);
    float m = *mx;
    for (int64_t i = 0; i < n; i++) m = s[i] > m ? s[i] : m;
    *mx = m;
    const float32x4_t mv = vdupq_n_f32(m);
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t e = exp4(vsubq_f32(vld1q_f32(s + i), mv));
        vst1q_f32(s + i, e);
        acc = vaddq_f32(acc, e);
    }
    float sum = vaddvq_f32(acc);
    for (; i < n; i++) sum += (s[i] = expf(s[i] - m));
    return sum;
}

uint64_t pb_stream_read_neon(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64x2_t a0 = vdupq_n_u64(0), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        a0 = vaddq_u64(a0, vld1q_u64((const uint64_t *)(b + i)));
        a1 = vaddq_u64(a1, vld1q_u64((const uint64_t *)(b + i + 16)));
        a2 = vaddq_u64(a2, vld1q_u64((const uint64_t *)(b + i + 32)));
        a3 = vaddq_u64(a3, vld1q_u64((const uint64_t *)(b + i + 48)));
    }
    return vaddvq_u64(vaddq_u64(vaddq_u64(a0, a1), vaddq_u64(a2, a3)));
}

void pb_f16_to_f32_neon(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h + i))));
    for (; i < n; i++) dst[i] = h2f(h[i]);
}

/* fp32 -> fp16 (KV cache stores): FCVTN rounds to nearest even as pb_fp32_to_fp16 does for every non-NaN
 * value; a vector holding a NaN goes through the scalar (it returns one fixed quiet NaN). */
void pb_f32_to_f16_neon(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(src + i);
        if (vminvq_u32(vceqq_f32(v, v)) == 0) { /* some lane is NaN */
            for (int k = 0; k < 4; k++) h[i + k] = pb_fp32_to_fp16(src[i + k]);
            continue;
        }
        vst1_u16(h + i, vreinterpret_u16_f16(vcvt_f16_f32(v)));
    }
    for (; i < n; i++) h[i] = pb_fp32_to_fp16(src[i]);
}

// --- activation quantizers (bit-identical to the tensor room's) ------------------------------------------

/* true when all n values are finite (x*0 is NaN exactly for inf/NaN) */
INLINE bool finite_block(const float *x, int n) {
    uint32x4_t bad = vdupq_n_u32(0);
    for (int j = 0; j < n; j += 4) {
        float32x4_t z = vmulq_n_f32(vld1q_f32(x + j), 0.0f);
        bad = vorrq_u32(bad, vmvnq_u32(vceqq_f32(z, z)));
    }
    return vmaxvq_u32(bad) == 0;
}

/* Q8_K: max = first value of largest |x|; q = round-half-even(iscale*x) (vcvtnq), as pb_quant_q8_K */
void pb_quant_q8_K_neon(const float *x, void *dst, int64_t n) {
    pb_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / PB_QK_K; i++, x += PB_QK_K) {
        if (!finite_block(x, PB_QK_K)) {
            pb_quant_q8_K(x, &y[i], PB_QK_K);
            continue;
        }
        float32x4_t mx = vdupq_n_f32(0);
        for (int j = 0; j < PB_QK_K; j += 4) mx = vmaxq_f32(mx, vabsq_f32(vld1q_f32(x + j)));
        const float amax = vmaxvq_f32(mx);
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0;
        while (fabsf(x[first]) != amax) first++;
        const float iscale = -127.0f / x[first];
        for (int j = 0; j < PB_QK_K; j += 8) {
            int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j), iscale));
            int32x4_t b = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4), iscale));
            a = vmaxq_s32(vminq_s32(a, vdupq_n_s32(127)), vdupq_n_s32(-127));
            b = vmaxq_s32(vminq_s32(b, vdupq_n_s32(127)), vdupq_n_s32(-127));
            int16x8_t h = vcombine_s16(vmovn_s32(a), vmovn_s32(b));
            vst1_s8(y[i].qs + j, vmovn_s16(h));
        }
        for (int g = 0; g < 16; g++) y[i].bsums[g] = (int16_t)vaddlvq_s8(vld1q_s8(y[i].qs + 16 * g));
        y[i].d = 1.0f / iscale;
    }
}

/* Q8_0: d = amax/127, q = roundf(x/d) (vcvtaq: nearest, ties away from zero), as pb_quant_q8_0 */
void pb_quant_q8_0_neon(const float *x, void *dst, int64_t n) {
    pb_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        if (!finite_block(x, 32)) {
            pb_quant_q8_0(x, &y[i], 32);
            continue;
        }
        float32x4_t mx = vdupq_n_f32(0);
        for (int j = 0; j < 32; j += 4) mx = vmaxq_f32(mx, vabsq_f32(vld1q_f32(x + j)));
        const float d = vmaxvq_f32(mx) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pb_fp32_to_fp16(d);
        for (int j = 0; j < 32; j += 8) {
            int32x4_t a = vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + j), id));
            int32x4_t b = vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4), id));
            a = vmaxq_s32(vminq_s32(a, vdupq_n_s32(127)), vdupq_n_s32(-127));
            b = vmaxq_s32(vminq_s32(b, vdupq_n_s32(127)), vdupq_n_s32(-127));
            vst1_s8(y[i].qs + j, vmovn_s16(vcombine_s16(vmovn_s32(a), vmovn_s32(b))));
        }
    }
}

// --- the table ------------------------------------------------------------------------------------------

void pb_kernels_fill_neon(pb_type_traits *t, int n, pb_gemm_fn *gemm) {
    PB_ASSERT(n >= PB_TYPE_COUNT);
    t[PB_TYPE_F32].vec_dot = pb_vec_dot_f32_f32_neon;
    t[PB_TYPE_F16].vec_dot = pb_vec_dot_f16_f32_neon;
    t[PB_TYPE_BF16].vec_dot = pb_vec_dot_bf16_f32_neon;
    t[PB_TYPE_F16].to_float = pb_f16_to_f32_neon;
    t[PB_TYPE_F16].from_float = pb_f32_to_f16_neon;
    t[PB_TYPE_Q4_0].vec_dot = pb_vec_dot_q4_0_q8_0_neon;
    t[PB_TYPE_Q8_0].vec_dot = pb_vec_dot_q8_0_q8_0_neon;
    t[PB_TYPE_Q4_K].vec_dot = pb_vec_dot_q4_K_q8_K_neon;
    t[PB_TYPE_Q5_K].vec_dot = pb_vec_dot_q5_K_q8_K_neon;
    t[PB_TYPE_Q6_K].vec_dot = pb_vec_dot_q6_K_q8_K_neon;
    t[PB_TYPE_Q8_0].from_float = pb_quant_q8_0_neon;
    t[PB_TYPE_Q8_K].from_float = pb_quant_q8_K_neon;
    gemm[PB_TYPE_Q4_0] = pb_gemm_q4_0_q8_0_neon;
    gemm[PB_TYPE_Q8_0] = pb_gemm_q8_0_q8_0_neon;
    gemm[PB_TYPE_Q4_K] = pb_gemm_q4_K_q8_K_neon;
    gemm[PB_TYPE_Q5_K] = pb_gemm_q5_K_q8_K_neon;
    gemm[PB_TYPE_Q6_K] = pb_gemm_q6_K_q8_K_neon;
    t[PB_TYPE_Q4_1].vec_dot = pb_vec_dot_q4_1_q8_0_neon;
    t[PB_TYPE_Q5_0].vec_dot = pb_vec_dot_q5_0_q8_0_neon;
    t[PB_TYPE_Q5_1].vec_dot = pb_vec_dot_q5_1_q8_0_neon;
    t[PB_TYPE_Q2_K].vec_dot = pb_vec_dot_q2_K_q8_K_neon;
    t[PB_TYPE_Q3_K].vec_dot = pb_vec_dot_q3_K_q8_K_neon;
    gemm[PB_TYPE_Q4_1] = pb_gemm_q4_1_q8_0_neon;
    gemm[PB_TYPE_Q5_0] = pb_gemm_q5_0_q8_0_neon;
    gemm[PB_TYPE_Q5_1] = pb_gemm_q5_1_q8_0_neon;
    gemm[PB_TYPE_Q2_K] = pb_gemm_q2_K_q8_K_neon;
    gemm[PB_TYPE_Q3_K] = pb_gemm_q3_K_q8_K_neon;
}
#include "kernels/arm_pack.h"
