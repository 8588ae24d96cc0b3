/* quant_k.c -- dequantize + reference quantizers (no importance matrix) of the 256-element K-quants
 * Q2_K Q3_K Q4_K Q5_K Q6_K and the Q8_K activation format (quant-formats.md §2, §3). Scalar C only. */
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

#define QK_K          PB_QK_K
#define GROUP_MAX_EPS 1e-15f

/* Bit-exactness with ggml (built without FMA) needs every a*b+c rounded twice: no contraction here. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* Round half to even via the 1.5*2^23 trick (valid for |f| <= 4194303); ggml's nearest_int. */
static inline int nearest_int(float f) {
    union {
        float f;
        int32_t i;
    } u = {.f = f + 12582912.0f};
    return (u.i & 0x007FFFFF) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- dequantize ------------------------------------------------------------------------------ */

void pb_dequant_q2_K(const void *src, float *y, int64_t n) {
    const pb_block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pb_fp16_to_fp32(b[i].d), dmin = pb_fp16_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++) { /* two 16-value sub-blocks per (half, shift) */
                    uint8_t sc = b[i].scales[is++];
                    const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[16 * k + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void pb_dequant_q3_K(const void *src, float *y, int64_t n) {
    const pb_block_q3_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pb_fp16_to_fp32(b[i].d);
        const uint8_t *q = b[i].qs;
        int is = 0;
        uint8_t m = 1;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int k = 0; k < 2; k++) {
                    const float dl = d * (float)pb_quant_scale_q3(is++, b[i].scales);
                    for (int l = 0; l < 16; l++) {
                        int ql = (q[16 * k + l] >> shift) & 3;
                        int hb = (b[i].hmask[16 * k + l] & m) ? 0 : 4;
                        *y++ = dl * (float)(ql - hb);
                    }
                }
            }
        }
    }
}

void pb_dequant_q4_K(const void *src, float *y, int64_t n) {
    const pb_block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pb_fp16_to_fp32(b[i].d), dmin = pb_fp16_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, m;
            pb_quant_scale_min_k4(j, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            pb_quant_scale_min_k4(j + 1, b[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void pb_dequant_q5_K(const void *src, float *y, int64_t n) {
    const pb_block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pb_fp16_to_fp32(b[i].d), dmin = pb_fp16_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs, *qh = b[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 8; j += 2, q += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            pb_quant_scale_min_k4(j, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            pb_quant_scale_min_k4(j + 1, b[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((q[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((q[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        }
    }
}

void pb_dequant_q6_K(const void *src, float *y, int64_t n) {
    const pb_block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pb_fp16_to_fp32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void pb_dequant_q8_K(const void *src, float *y, int64_t n) {
    const pb_block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++) *y++ = b[i].d * (float)b[i].qs[j];
}

/* ---- fitting helpers (§3.1 - §3.3) ----------------------------------------------------------- */

/* Asymmetric fit x ~ scale*L + min with L in [0, nmax], min <= 0, weights w, for NS independent sub-blocks
 * of N values at once (sub-block s at x + s*N). The error is squared (or absolute when use_mad). Tries
 * nstep+1 inverse scales around nmax/(max-min) and a weighted least-squares refit for each, keeping the
 * best (ggml's make_qkx2_quants). The sub-blocks run in lockstep over transposed copies so the compiler
 * can put them in SIMD lanes; each lane performs exactly the scalar algorithm's float operations in the
 * same order, so results are bit-identical to the one-sub-block-at-a-time formulation (and to
 * llama-quantize: tests/test_quantize_model.c). Outputs: scale[s], the_min[s] = -min (>= 0), L[s*N + i]. */
#define QKX2_MAX_NS 16
#define QKX2_MAX_N  32
static inline __attribute__((always_inline)) void make_qkx2_quants(const int NS, const int N, int nmax, const float *x,
                                                                   const float *w, uint8_t *L, float *scale_out,
                                                                   float *the_min, float rmin, float rdelta, int nstep,
                                                                   bool use_mad) {
    float xt[QKX2_MAX_N][QKX2_MAX_NS], wt[QKX2_MAX_N][QKX2_MAX_NS];
    float La[QKX2_MAX_N][QKX2_MAX_NS]; /* a trial's quants, as floats: one lane width */
    float mn[QKX2_MAX_NS], mx[QKX2_MAX_NS], sum_w[QKX2_MAX_NS], sum_x[QKX2_MAX_NS], scale[QKX2_MAX_NS],
        best[QKX2_MAX_NS], iscale[QKX2_MAX_NS];
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < N; i++) xt[i][s] = x[s * N + i], wt[i][s] = w[s * N + i];
    for (int s = 0; s < NS; s++) {
        mn[s] = mx[s] = xt[0][s];
        sum_w[s] = wt[0][s];
        sum_x[s] = sum_w[s] * xt[0][s];
    }
    for (int i = 1; i < N; i++) {
        for (int s = 0; s < NS; s++) {
            const float v = xt[i][s];
            mn[s] = v < mn[s] ? v : mn[s];
            mx[s] = v > mx[s] ? v : mx[s];
            sum_w[s] += wt[i][s];
            sum_x[s] += wt[i][s] * v;
        }
    }
    bool flat[QKX2_MAX_NS];
    float flat_min[QKX2_MAX_NS];
    for (int s = 0; s < NS; s++) {
        mn[s] = mn[s] > 0 ? 0 : mn[s];
        flat[s] = mx[s] == mn[s];
        flat_min[s] = mn[s];
        iscale[s] = (float)nmax / (mx[s] - mn[s]); /* flat lanes (max == min) are fixed up at the end */
        scale[s] = 1.0f / iscale[s];
        best[s] = 0;
    }
    /* The accepted L of each lane is not copied per trial: it is recomputed at the end from the inverse
     * scale and min that produced it (same operations, same values). */
    float L_iscale[QKX2_MAX_NS], L_min[QKX2_MAX_NS];
    for (int s = 0; s < NS; s++) L_iscale[s] = iscale[s], L_min[s] = mn[s];
    for (int i = 0; i < N; i++) {
        for (int s = 0; s < NS; s++) {
            const float l = (float)clampi(nearest_int(iscale[s] * (xt[i][s] - mn[s])), 0, nmax);
            float diff = scale[s] * l + mn[s] - xt[i][s];
            diff = use_mad ? fabsf(diff) : diff * diff;
            best[s] += wt[i][s] * diff;
        }
    }
    for (int is = 0; nstep >= 1 && is <= nstep; is++) {
        float sum_l[QKX2_MAX_NS], sum_l2[QKX2_MAX_NS], sum_xl[QKX2_MAX_NS], ts[QKX2_MAX_NS], tm[QKX2_MAX_NS],
            err[QKX2_MAX_NS];
        int32_t ok[QKX2_MAX_NS]; /* lane masks as 32-bit ints, the float lanes' width, so selects vectorize */
        for (int s = 0; s < NS; s++) {
            iscale[s] = (rmin + rdelta * (float)is + (float)nmax) / (mx[s] - mn[s]);
            sum_l[s] = sum_l2[s] = sum_xl[s] = err[s] = 0;
        }
        for (int i = 0; i < N; i++) {
            for (int s = 0; s < NS; s++) {
                const float l = (float)clampi(nearest_int(iscale[s] * (xt[i][s] - mn[s])), 0, nmax);
                La[i][s] = l;
                const float wl = wt[i][s] * l;
                sum_l[s] += wl;
                sum_l2[s] += wl * l;
                sum_xl[s] += wl * xt[i][s];
            }
        }
        for (int s = 0; s < NS; s++) {
            const float D = sum_w[s] * sum_l2[s] - sum_l[s] * sum_l[s];
            ok[s] = D > 0;
            float this_scale = (sum_w[s] * sum_xl[s] - sum_x[s] * sum_l[s]) / D;
            float this_min = (sum_l2[s] * sum_x[s] - sum_l[s] * sum_xl[s]) / D;
            const bool pos = this_min > 0;
            ts[s] = pos ? sum_xl[s] / sum_l2[s] : this_scale;
            tm[s] = pos ? 0 : this_min;
        }
        for (int i = 0; i < N; i++) {
            for (int s = 0; s < NS; s++) {
                float diff = ts[s] * La[i][s] + tm[s] - xt[i][s];
                diff = use_mad ? fabsf(diff) : diff * diff;
                err[s] += wt[i][s] * diff;
            }
        }
        for (int s = 0; s < NS; s++) {
            ok[s] = ok[s] && err[s] < best[s];
            best[s] = ok[s] ? err[s] : best[s];
            scale[s] = ok[s] ? ts[s] : scale[s];
            L_iscale[s] = ok[s] ? iscale[s] : L_iscale[s];
            L_min[s] = ok[s] ? mn[s] : L_min[s];
            mn[s] = ok[s] ? tm[s] : mn[s];
        }
    }
    for (int s = 0; s < NS; s++) {
        if (flat[s]) { /* every L = 0, scale 0, min as clamped */
            scale_out[s] = 0;
            the_min[s] = -flat_min[s];
            memset(L + s * N, 0, (size_t)N);
            continue;
        }
        scale_out[s] = scale[s];
        the_min[s] = -mn[s];
        for (int i = 0; i < N; i++)
            L[s * N + i] = (uint8_t)clampi(nearest_int(L_iscale[s] * (xt[i][s] - L_min[s])), 0, nmax);
    }
}

/* Signed value with the largest magnitude (first wins) and the magnitude. */
static inline float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax) {
            amax = a;
            max = x[i];
        }
    }
    *amax_out = amax;
    return max;
}

/* Symmetric fit x ~ scale*l, l in [-nmax, nmax-1], weights x^2 (rmse_type 1, the only one Q6_K uses), for the
 * 16 sub-blocks of 16 values of a Q6_K super-block at once: starts at -nmax/max (max = signed value of
 * largest magnitude) and tries 18 inverse scales around it (ggml's make_qx_quants). Lanes run the scalar
 * algorithm's float operations in its order, so results are bit-identical to one sub-block at a time.
 * Stores L = l + nmax and scale[s]. */
#define QX_NS 16
#define QX_N  16
static void make_qx_quants_q6(int nmax, const float *x, uint8_t *L, float *scale_out) {
    float xt[QX_N][QX_NS], mx[QX_NS], amax[QX_NS], iscale[QX_NS], sumlx[QX_NS], suml2[QX_NS], scale[QX_NS], best[QX_NS],
        L_iscale[QX_NS];
    for (int s = 0; s < QX_NS; s++)
        for (int i = 0; i < QX_N; i++) xt[i][s] = x[s * QX_N + i];
    for (int s = 0; s < QX_NS; s++) mx[s] = amax[s] = 0;
    for (int i = 0; i < QX_N; i++) {
        for (int s = 0; s < QX_NS; s++) {
            const float a = fabsf(xt[i][s]);
            const int32_t gt = a > amax[s];
            amax[s] = gt ? a : amax[s];
            mx[s] = gt ? xt[i][s] : mx[s];
        }
    }
    for (int s = 0; s < QX_NS; s++) {
        iscale[s] = -(float)nmax / mx[s]; /* all-zero lanes are fixed up at the end */
        sumlx[s] = suml2[s] = 0;
    }
    for (int i = 0; i < QX_N; i++) {
        for (int s = 0; s < QX_NS; s++) {
            const float l = (float)clampi(nearest_int(iscale[s] * xt[i][s]), -nmax, nmax - 1);
            const float w = xt[i][s] * xt[i][s];
            sumlx[s] += w * xt[i][s] * l;
            suml2[s] += w * l * l;
        }
    }
    for (int s = 0; s < QX_NS; s++) {
        scale[s] = suml2[s] != 0 ? sumlx[s] / suml2[s] : 0.0f;
        best[s] = scale[s] * sumlx[s];
        L_iscale[s] = iscale[s];
    }
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        for (int s = 0; s < QX_NS; s++) {
            iscale[s] = -((float)nmax + 0.1f * (float)is) / mx[s];
            sumlx[s] = suml2[s] = 0;
        }
        for (int i = 0; i < QX_N; i++) {
            for (int s = 0; s < QX_NS; s++) {
                const float l = (float)clampi(nearest_int(iscale[s] * xt[i][s]), -nmax, nmax - 1);
                const float w = xt[i][s] * xt[i][s];
                sumlx[s] += w * xt[i][s] * l;
                suml2[s] += w * l * l;
            }
        }
        for (int s = 0; s < QX_NS; s++) {
            const int32_t ok = suml2[s] > 0 && sumlx[s] * sumlx[s] > best[s] * suml2[s];
            const float sc = sumlx[s] / suml2[s];
            L_iscale[s] = ok ? iscale[s] : L_iscale[s];
            scale[s] = ok ? sc : scale[s];
            best[s] = ok ? sc * sumlx[s] : best[s];
        }
    }
    for (int s = 0; s < QX_NS; s++) {
        if (amax[s] < GROUP_MAX_EPS) {
            memset(L + s * QX_N, 0, QX_N);
            scale_out[s] = 0;
            continue;
        }
        scale_out[s] = scale[s];
        for (int i = 0; i < QX_N; i++)
            L[s * QX_N + i] = (uint8_t)(nmax + clampi(nearest_int(L_iscale[s] * xt[i][s]), -nmax, nmax - 1));
    }
}

/* Symmetric fit for Q3_K: start from l = round(-nmax/max * x), then up to 5 passes of coordinate
 * descent on the x^2-weighted error. Stores L = l + nmax; returns scale. */
static float make_q3_quants(int n, int nmax, const float *x, uint8_t *L) {
    float amax, max = signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -(float)nmax / max;
    int8_t l8[QK_K];
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        l8[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)l8[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)l8[i] * (float)l8[i];
                int new_l = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != l8[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        l8[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (uint8_t)(l8[i] + nmax);
    return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

/* 2-bit packing shared by Q2_K and Q3_K: byte l of half h holds values l, l+32, l+64, l+96. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *p = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(p[0] | (p[32] << 2) | (p[64] << 4) | (p[96] << 6));
        }
}

/* ---- reference quantizers -------------------------------------------------------------------- */

void pb_quant_q2_K(const float *x, void *dst, int64_t n) {
    pb_block_q2_K *y = dst;
    uint8_t L[QK_K];
    float w[QK_K], mins[16], scales[16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int l = 0; l < QK_K; l++) w[l] = fabsf(x[l]);
        make_qkx2_quants(16, 16, 3, x, w, L, scales, mins, -0.5f, 0.1f, 15, true);
        for (int j = 0; j < 16; j++) {
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = 15.0f / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)clampi(nearest_int(iscale * scales[j]), 0, 15);
            y[i].d = pb_fp32_to_fp16(max_scale / 15.0f);
        } else {
            memset(y[i].scales, 0, 16);
            y[i].d = pb_fp32_to_fp16(0.0f);
        }
        if (max_min > 0) {
            float iscale = 15.0f / max_min;
            for (int j = 0; j < 16; j++) y[i].scales[j] |= (uint8_t)(clampi(nearest_int(iscale * mins[j]), 0, 15) << 4);
            y[i].dmin = pb_fp32_to_fp16(max_min / 15.0f);
        } else {
            y[i].dmin = pb_fp32_to_fp16(0.0f);
        }
        const float d = pb_fp16_to_fp32(y[i].d), dmin = pb_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < 16; j++) {
            const float dd = d * (float)(y[i].scales[j] & 0xF);
            if (dd == 0) continue; /* keep the first fit's L */
            const float dm = dmin * (float)(y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)clampi(nearest_int((x[16 * j + l] + dm) / dd), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

void pb_quant_q3_K(const float *x, void *dst, int64_t n) {
    pb_block_q3_K *y = dst;
    uint8_t L[QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            float a = fabsf(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale != 0) {
            float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = clampi(nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8)
                    y[i].scales[j] = (uint8_t)(l & 0xF);
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = pb_fp32_to_fp16(1.0f / iscale);
        } else {
            y[i].d = pb_fp32_to_fp16(0.0f);
        }
        const float d = pb_fp16_to_fp32(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float dd = d * (float)pb_quant_scale_q3(j, y[i].scales);
            if (dd == 0) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)(clampi(nearest_int(x[16 * j + l] / dd), -4, 3) + 4);
        }
        memset(y[i].hmask, 0, 32);
        for (int e = 0; e < QK_K; e++) {
            if (L[e] > 3) {
                y[i].hmask[e % 32] |= (uint8_t)(1u << (e / 32));
                L[e] -= 4;
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

/* Shared part of Q4_K and Q5_K: per-32 fits, 6-bit scales/mins, re-quantization into L (0..nmax). */
static void quant_k_scales_mins(const float *x, int nmax, float rmin, int nstep, uint8_t *L, uint8_t packed[12],
                                uint16_t *d_out, uint16_t *dmin_out) {
    float w[QK_K], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; l++) w[32 * j + l] = av_x + fabsf(xs[l]);
    }
    if (nmax == 15)
        make_qkx2_quants(8, 32, 15, x, w, L, scales, mins, rmin, 0.1f, nstep, false);
    else
        make_qkx2_quants(8, 32, 31, x, w, L, scales, mins, rmin, 0.1f, nstep, false);
    for (int j = 0; j < 8; j++) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    memset(packed, 0, 12);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)clampi(nearest_int(inv_scale * scales[j]), 0, 63);
        uint8_t lm = (uint8_t)clampi(nearest_int(inv_min * mins[j]), 0, 63);
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = pb_fp32_to_fp16(max_scale / 63.0f);
    *dmin_out = pb_fp32_to_fp16(max_min / 63.0f);
    const float d = pb_fp16_to_fp32(*d_out), dmin = pb_fp16_to_fp32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        pb_quant_scale_min_k4(j, packed, &sc, &m);
        const float dd = d * (float)sc;
        if (dd == 0) continue;
        const float dm = dmin * (float)m;
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clampi(nearest_int((x[32 * j + l] + dm) / dd), 0, nmax);
    }
}

void pb_quant_q4_K(const float *x, void *dst, int64_t n) {
    pb_block_q4_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quant_k_scales_mins(x, 15, -1.0f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

void pb_quant_q5_K(const float *x, void *dst, int64_t n) {
    pb_block_q5_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quant_k_scales_mins(x, 31, -0.5f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        memset(y[i].qh, 0, 32);
        for (int c = 0; c < 4; c++) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[64 * c + j], l2 = L[64 * c + 32 + j];
                if (l1 > 15) {
                    l1 -= 16;
                    y[i].qh[j] |= (uint8_t)(1u << (2 * c));
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y[i].qh[j] |= (uint8_t)(1u << (2 * c + 1));
                }
                y[i].qs[32 * c + j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

void pb_quant_q6_K(const float *x, void *dst, int64_t n) {
    pb_block_q6_K *y = dst;
    uint8_t L[QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs = 0;
        make_qx_quants_q6(32, x, L, scales);
        for (int ib = 0; ib < 16; ib++) {
            float a = fabsf(scales[ib]);
            if (a > max_abs) {
                max_abs = a;
                max_scale = scales[ib];
            }
        }
        if (max_abs < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        y[i].d = pb_fp32_to_fp16(1.0f / iscale);
        for (int ib = 0; ib < 16; ib++) y[i].scales[ib] = (int8_t)clampi(nearest_int(iscale * scales[ib]), -128, 127);
        const float d = pb_fp16_to_fp32(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float dd = d * (float)y[i].scales[j];
            if (dd == 0) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)(clampi(nearest_int(x[16 * j + l] / dd), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            const uint8_t *Lh = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                  ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

/* Q8_K: d = max/-127 (max = signed value of largest magnitude), q = min(127, round_half_even(x/d)),
 * bsums = sums of 16. All-zero input gives d = 0, q = 0, bsums = 0; a block holding NaN or inf d = NaN, q = 0,
 * bsums = 0, so every dot product with it is NaN (a NaN was skipped by the max and quantized to some int8: a value
 * that is not finite turned into plain numbers the forward pass could not tell from others, model/forward.c). */
void pb_quant_q8_K(const float *x, void *dst, int64_t n) {
    pb_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        bool finite = true;
        for (int j = 0; j < QK_K; j++) finite &= isfinite(x[j]) != 0;
        float amax, max = signed_absmax(x, QK_K, &amax);
        if (amax == 0 || !finite) {
            memset(&y[i], 0, sizeof y[i]);
            if (!finite) y[i].d = NAN;
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) y[i].qs[j] = (int8_t)clampi(nearest_int(iscale * x[j]), -127, 127);
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}
