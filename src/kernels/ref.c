/* ref.c -- scalar reference dot products for every weight type against its activation type: the
 * executable spec (quant-formats.md §4). Integer inner sums, float32 accumulation per block. No ISA code. */
#include "kernels/kernels.h"
#include "tensor/quant.h"

#include <string.h>

#define QK   32
#define QK_K PB_QK_K

/* ---- float weights against f32 activations (double accumulation) ----------------------------- */

void pb_vec_dot_f32_f32_ref(int64_t n, float *s, const void *x, const void *y) {
    const float *a = x, *b = y;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)a[i] * (double)b[i];
    *s = (float)sum;
}

void pb_vec_dot_f16_f32_ref(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *a = x;
    const float *b = y;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)pb_fp16_to_fp32(a[i]) * (double)b[i];
    *s = (float)sum;
}

void pb_vec_dot_bf16_f32_ref(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *a = x;
    const float *b = y;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)pb_bf16_to_fp32(a[i]) * (double)b[i];
    *s = (float)sum;
}

/* ---- 32-element formats ---------------------------------------------------------------------- */

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

void pb_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q4_0 *a = x;
    const pb_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j];
            isum += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        }
        sum += (float)isum * (pb_fp16_to_fp32(a[i].d) * pb_fp16_to_fp32(b[i].d));
    }
    *s = sum;
}

/* Q4_1 against Q8_0: d_w*d_a*sum(q_w*q_a) + m_w*d_a*sum(q_a). We use Q8_0 rather than ggml's Q8_1 so
 * the min term uses the exact integer sum of the activation quants instead of Q8_1's fp16-rounded
 * s = fp16(d_a*sum q_a), which costs up to ~1e-3 relative error when the block minimum is large. */
void pb_vec_dot_q4_1_q8_0_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q4_1 *a = x;
    const pb_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        int isum = 0, asum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (a[i].qs[j] & 0xF) * b[i].qs[j];
            isum += (a[i].qs[j] >> 4) * b[i].qs[j + 16];
            asum += b[i].qs[j] + b[i].qs[j + 16];
        }
        const float da = pb_fp16_to_fp32(b[i].d);
        sum += (float)isum * (pb_fp16_to_fp32(a[i].d) * da) + pb_fp16_to_fp32(a[i].m) * (da * (float)asum);
    }
    *s = sum;
}

void pb_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q5_0 *a = x;
    const pb_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        const uint32_t qh = load_u32(a[i].qh);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = ((a[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4)) - 16;
            int q1 = ((a[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - 16;
            isum += q0 * b[i].qs[j] + q1 * b[i].qs[j + 16];
        }
        sum += (float)isum * (pb_fp16_to_fp32(a[i].d) * pb_fp16_to_fp32(b[i].d));
    }
    *s = sum;
}

/* Q5_1 against Q8_0: as Q4_1 with 5-bit quants. */
void pb_vec_dot_q5_1_q8_0_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q5_1 *a = x;
    const pb_block_q8_0 *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        const uint32_t qh = load_u32(a[i].qh);
        int isum = 0, asum = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (a[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int q1 = (a[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            isum += q0 * b[i].qs[j] + q1 * b[i].qs[j + 16];
            asum += b[i].qs[j] + b[i].qs[j + 16];
        }
        const float da = pb_fp16_to_fp32(b[i].d);
        sum += (float)isum * (pb_fp16_to_fp32(a[i].d) * da) + pb_fp16_to_fp32(a[i].m) * (da * (float)asum);
    }
    *s = sum;
}

void pb_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q8_0 *a = x, *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        int isum = 0;
        for (int j = 0; j < QK; j++) isum += a[i].qs[j] * b[i].qs[j];
        sum += (float)isum * (pb_fp16_to_fp32(a[i].d) * pb_fp16_to_fp32(b[i].d));
    }
    *s = sum;
}

void pb_vec_dot_q8_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q8_1 *a = x, *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        int isum = 0;
        for (int j = 0; j < QK; j++) isum += a[i].qs[j] * b[i].qs[j];
        sum += (float)isum * (pb_fp16_to_fp32(a[i].d) * pb_fp16_to_fp32(b[i].d));
    }
    *s = sum;
}

/* ---- K-quants against Q8_K ------------------------------------------------------------------- */

/* Q2_K: d_a*d_w*sum_s lo(sc_s)*sum(q*a) - d_a*dmin_w*sum_s hi(sc_s)*bsum_s. */
void pb_vec_dot_q2_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q2_K *a = x;
    const pb_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int summ = 0, isum = 0;
        for (int g = 0; g < 16; g++) summ += (a[i].scales[g] >> 4) * b[i].bsums[g];
        const int8_t *q8 = b[i].qs;
        int is = 0;
        for (int half = 0; half < 2; half++) {
            const uint8_t *q2 = a[i].qs + 32 * half;
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++, q8 += 16) {
                    int sub = 0;
                    for (int l = 0; l < 16; l++) sub += ((q2[16 * k + l] >> shift) & 3) * q8[l];
                    isum += (a[i].scales[is++] & 0xF) * sub;
                }
            }
        }
        const float d = b[i].d * pb_fp16_to_fp32(a[i].d), dmin = b[i].d * pb_fp16_to_fp32(a[i].dmin);
        sum += d * (float)isum - dmin * (float)summ;
    }
    *s = sum;
}

/* Q3_K: d_a*d_w*sum_s sc_s*sum(q3*a), q3 = low2 - (hbit ? 0 : 4). */
void pb_vec_dot_q3_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q3_K *a = x;
    const pb_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = b[i].qs;
        int isum = 0, is = 0;
        uint8_t m = 1;
        for (int half = 0; half < 2; half++) {
            const uint8_t *q3 = a[i].qs + 32 * half;
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int k = 0; k < 2; k++, q8 += 16) {
                    /* low2*a minus 4*a where the high bit is clear. Written as two sums on purpose: GCC 12 with
                     * -mavx512vnni mis-vectorizes the single form ((low2 - 4*!h) * a) into an unsigned-by-signed
                     * byte dot product (wrong sign), seen with NATIVE=1 on a VNNI CPU. */
                    int sub = 0, neg = 0;
                    for (int l = 0; l < 16; l++) {
                        sub += ((q3[16 * k + l] >> shift) & 3) * q8[l];
                        neg += (a[i].hmask[16 * k + l] & m) ? 0 : q8[l];
                    }
                    sub -= 4 * neg;
                    isum += pb_quant_scale_q3(is++, a[i].scales) * sub;
                }
            }
        }
        sum += b[i].d * pb_fp16_to_fp32(a[i].d) * (float)isum;
    }
    *s = sum;
}

/* Q4_K: d_a*d_w*sum_j sc_j*sum(q*a) - d_a*dmin_w*sum_j m_j*(bsum_2j + bsum_2j+1). */
void pb_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q4_K *a = x;
    const pb_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = b[i].qs;
        int isum = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            pb_quant_scale_min_k4(j, a[i].scales, &sc, &m);
            const uint8_t *q4 = a[i].qs + 32 * (j / 2);
            const int shift = (j & 1) * 4;
            int sub = 0;
            for (int l = 0; l < 32; l++) sub += ((q4[l] >> shift) & 0xF) * q8[32 * j + l];
            isum += sc * sub;
            summ += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        const float d = b[i].d * pb_fp16_to_fp32(a[i].d), dmin = b[i].d * pb_fp16_to_fp32(a[i].dmin);
        sum += d * (float)isum - dmin * (float)summ;
    }
    *s = sum;
}

void pb_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q5_K *a = x;
    const pb_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = b[i].qs;
        int isum = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            pb_quant_scale_min_k4(j, a[i].scales, &sc, &m);
            const uint8_t *q4 = a[i].qs + 32 * (j / 2);
            const int shift = (j & 1) * 4;
            int sub = 0;
            for (int l = 0; l < 32; l++) {
                int q = ((q4[l] >> shift) & 0xF) | (((a[i].qh[l] >> j) & 1) << 4);
                sub += q * q8[32 * j + l];
            }
            isum += sc * sub;
            summ += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        const float d = b[i].d * pb_fp16_to_fp32(a[i].d), dmin = b[i].d * pb_fp16_to_fp32(a[i].dmin);
        sum += d * (float)isum - dmin * (float)summ;
    }
    *s = sum;
}

/* Q6_K: d_a*d_w*sum_s scales_s*sum(q6*a), q6 in -32..31. */
void pb_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q6_K *a = x;
    const pb_block_q8_K *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            const int8_t *sc = a[i].scales + 8 * h, *q8 = b[i].qs + 128 * h;
            for (int g = 0; g < 4; g++) { /* 32-value groups g: low/high nibble of ql[0..31] or ql[32..63] */
                const uint8_t *lb = ql + 32 * (g & 1);
                const int shift = (g >> 1) * 4;
                for (int k = 0; k < 2; k++) {
                    int sub = 0;
                    for (int l = 16 * k; l < 16 * k + 16; l++) {
                        int q = (((lb[l] >> shift) & 0xF) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
                        sub += q * q8[32 * g + l];
                    }
                    isum += sc[2 * g + k] * sub;
                }
            }
        }
        sum += b[i].d * pb_fp16_to_fp32(a[i].d) * (float)isum;
    }
    *s = sum;
}

void pb_vec_dot_q8_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y) {
    const pb_block_q8_K *a = x, *b = y;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int j = 0; j < QK_K; j++) isum += a[i].qs[j] * b[i].qs[j];
        sum += a[i].d * b[i].d * (float)isum;
    }
    *s = sum;
}

void pb_kernels_fill_ref(pb_type_traits *t, int n) {
    PB_ASSERT(n >= PB_TYPE_COUNT);
    t[PB_TYPE_F32].vec_dot = pb_vec_dot_f32_f32_ref;
    t[PB_TYPE_F16].vec_dot = pb_vec_dot_f16_f32_ref;
    t[PB_TYPE_BF16].vec_dot = pb_vec_dot_bf16_f32_ref;
    t[PB_TYPE_Q4_0].vec_dot = pb_vec_dot_q4_0_q8_0_ref;
    t[PB_TYPE_Q4_1].vec_dot = pb_vec_dot_q4_1_q8_0_ref;
    t[PB_TYPE_Q5_0].vec_dot = pb_vec_dot_q5_0_q8_0_ref;
    t[PB_TYPE_Q5_1].vec_dot = pb_vec_dot_q5_1_q8_0_ref;
    t[PB_TYPE_Q8_0].vec_dot = pb_vec_dot_q8_0_q8_0_ref;
    t[PB_TYPE_Q8_1].vec_dot = pb_vec_dot_q8_1_q8_1_ref;
    t[PB_TYPE_Q2_K].vec_dot = pb_vec_dot_q2_K_q8_K_ref;
    t[PB_TYPE_Q3_K].vec_dot = pb_vec_dot_q3_K_q8_K_ref;
    t[PB_TYPE_Q4_K].vec_dot = pb_vec_dot_q4_K_q8_K_ref;
    t[PB_TYPE_Q5_K].vec_dot = pb_vec_dot_q5_K_q8_K_ref;
    t[PB_TYPE_Q6_K].vec_dot = pb_vec_dot_q6_K_q8_K_ref;
    t[PB_TYPE_Q8_K].vec_dot = pb_vec_dot_q8_K_q8_K_ref;
}
