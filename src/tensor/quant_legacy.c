/* quant_legacy.c -- dequantize + reference quantizers of the 32-element formats Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1.
 * Plain float32 arithmetic in ggml's evaluation order (quant-formats.md §1); no ISA code here. */
#include "tensor/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define QK 32

/* Bit-exactness with ggml needs every a*b+c rounded twice: no fused multiply-add contraction here. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* (int)v truncated toward zero and clamped to [0, hi]; NaN -> 0. For the "+ 8.5f then (int8_t)" rule
 * of the reference quantizers, whose finite inputs already lie in [0, hi + 1.5). */
static inline int trunc_clamp(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* x*id + c rounded twice (product to float, then the sum), as llama-quantize computes it: ggml's reference
 * quantizers live in ggml-base, which is built without FMA, and the peer model files confirm it. gguf-py
 * (and an FMA-contracting build) rounds once; the two differ only when x*id lands within an ulp of a
 * k+0.5 boundary (quant-formats.md §1 "FMA caveat"). Contraction is off for this file (see top). */
static inline float mul_add_twice(float x, float id, float c) {
    float p = x * id;
    return p + c;
}

/* Signed value with the largest magnitude (the first one wins), and that magnitude. */
static inline float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (amax < a) {
            amax = a;
            max = x[j];
        }
    }
    *amax_out = amax;
    return max;
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- dequantize ------------------------------------------------------------------------------ */

void pb_dequant_q4_0(const void *src, float *dst, int64_t n) {
    const pb_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = pb_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((b[i].qs[j] & 0xF) - 8) * d;
            dst[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void pb_dequant_q4_1(const void *src, float *dst, int64_t n) {
    const pb_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = pb_fp16_to_fp32(b[i].d), m = pb_fp16_to_fp32(b[i].m);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(b[i].qs[j] & 0xF) * d + m;
            dst[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

void pb_dequant_q5_0(const void *src, float *dst, int64_t n) {
    const pb_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = pb_fp16_to_fp32(b[i].d);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = (float)(((b[i].qs[j] & 0xF) | h0) - 16) * d;
            dst[j + 16] = (float)(((b[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void pb_dequant_q5_1(const void *src, float *dst, int64_t n) {
    const pb_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = pb_fp16_to_fp32(b[i].d), m = pb_fp16_to_fp32(b[i].m);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = (float)((b[i].qs[j] & 0xF) | h0) * d + m;
            dst[j + 16] = (float)((b[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void pb_dequant_q8_0(const void *src, float *dst, int64_t n) {
    const pb_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = pb_fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

void pb_dequant_q8_1(const void *src, float *dst, int64_t n) {
    const pb_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = pb_fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

/* ---- reference quantizers -------------------------------------------------------------------- */

/* Q4_0: d = max/-8 (max = signed value of largest magnitude), q = min(15, trunc(x/d + 8.5)). */
void pb_quant_q4_0(const float *x, void *dst, int64_t n) {
    pb_block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float amax, max = signed_absmax(x, QK, &amax);
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pb_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = trunc_clamp(mul_add_twice(x[j], id, 8.5f), 15);
            int q1 = trunc_clamp(mul_add_twice(x[j + 16], id, 8.5f), 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Q4_1: d = (max - min)/15, m = min, q = min(15, trunc((x - min)/d + 0.5)). */
void pb_quant_q4_1(const float *x, void *dst, int64_t n) {
    pb_block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pb_fp32_to_fp16(d);
        y[i].m = pb_fp32_to_fp16(min);
        for (int j = 0; j < 16; j++) {
            int q0 = trunc_clamp(mul_add_twice(x[j] - min, id, 0.5f), 15);
            int q1 = trunc_clamp(mul_add_twice(x[j + 16] - min, id, 0.5f), 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Q5_0: d = max/-16, q = min(31, trunc(x/d + 16.5)); bit 4 of element j goes to qh bit j. */
void pb_quant_q5_0(const float *x, void *dst, int64_t n) {
    pb_block_q5_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float amax, max = signed_absmax(x, QK, &amax);
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pb_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = trunc_clamp(mul_add_twice(x[j], id, 16.5f), 31);
            int q1 = trunc_clamp(mul_add_twice(x[j + 16], id, 16.5f), 31);
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* Q5_1: d = (max - min)/31, m = min, q = trunc((x - min)/d + 0.5) (0..31). */
void pb_quant_q5_1(const float *x, void *dst, int64_t n) {
    pb_block_q5_1 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pb_fp32_to_fp16(d);
        y[i].m = pb_fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = trunc_clamp(mul_add_twice(x[j] - min, id, 0.5f), 31);
            int q1 = trunc_clamp(mul_add_twice(x[j + 16] - min, id, 0.5f), 31);
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* roundf of a value in [-127, 127] (NaN -> 0). */
static inline int8_t round_q8(float v) {
    if (!(v == v)) return 0;
    float r = roundf(v);
    if (r > 127.0f) r = 127.0f;
    if (r < -127.0f) r = -127.0f;
    return (int8_t)r;
}

/* Whether x[0..QK) holds NaN or +-inf. Such a block quantizes to scale NaN and values 0, so every dot product with it
 * is NaN: a value that is not finite never turns into plain numbers (ggml's fmaxf skips a NaN, and x*id of it became
 * some int8), and the forward pass can tell (model/forward.c). */
static inline bool block_not_finite(const float *x) {
    bool bad = false;
    for (int j = 0; j < QK; j++) bad |= !isfinite(x[j]);
    return bad;
}

/* Q8_0: d = amax/127, q = roundf(x/d) (half away from zero); a block with NaN or inf: d NaN, q 0. */
void pb_quant_q8_0(const float *x, void *dst, int64_t n) {
    pb_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        if (block_not_finite(x)) {
            y[i].d = 0x7E00; /* fp16 NaN */
            memset(y[i].qs, 0, sizeof y[i].qs);
            continue;
        }
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pb_fp32_to_fp16(d);
        for (int j = 0; j < QK; j++) y[i].qs[j] = round_q8(x[j] * id);
    }
}

/* Q8_1: as Q8_0 plus s = fp16(d * sum(q)) with the float32 d (d and s NaN for a block with NaN or inf). */
void pb_quant_q8_1(const float *x, void *dst, int64_t n) {
    pb_block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        if (block_not_finite(x)) {
            y[i].d = y[i].s = 0x7E00;
            memset(y[i].qs, 0, sizeof y[i].qs);
            continue;
        }
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pb_fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            y[i].qs[j] = round_q8(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = pb_fp32_to_fp16((float)sum * d);
    }
}
