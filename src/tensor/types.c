/* types.c -- the per-type traits table (ids 0..38), names, row sizes and fp16/bf16 conversion. No kernels. */
#include "tensor/types.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The fp16 rounding trick below needs its multiply and add rounded separately: no FMA contraction. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* ---- fp16 / bf16 ----------------------------------------------------------------------------- */

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Branch-free conversions in float arithmetic (the technique of M. Dukhan's FP16 library, which ggml's
 * software path also uses); exact for fp16 -> fp32 and round-to-nearest-even for fp32 -> fp16 under the
 * default rounding mode. Both are checked exhaustively in tests/test_quant.c. */
float pb_fp16_to_fp32(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w; /* exponent and mantissa, sign shifted out */
    /* normal (and inf/nan): move exponent+mantissa into place, rebias by 2^-112 via a multiply */
    const float normalized = f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    /* subnormal: mantissa as the low bits of 0.5's significand, minus 0.5 */
    const float denormalized = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t r = two_w < (1u << 27) ? f32_bits(denormalized) : f32_bits(normalized);
    return f32_from_bits(sign | r);
}

uint16_t pb_fp32_to_fp16(float f) {
    /* scale so that the float rounding of the addition below does fp16's rounding (RNE), with overflow
     * to inf coming out of the first multiply */
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

float pb_bf16_to_fp32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t pb_fp32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040); /* quiet NaN */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

/* ---- scalar formats -------------------------------------------------------------------------- */

static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
static void f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = pb_fp16_to_fp32(s[i]);
}
static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = pb_fp32_to_fp16(src[i]);
}
static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = pb_bf16_to_fp32(s[i]);
}
static void bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = pb_fp32_to_bf16(src[i]);
}

/* ---- the table ------------------------------------------------------------------------------- */

/* name, blck, type_size, supported, quantizable, to_float, from_float, vec_dot_type (vec_dot: NULL here; the kernels'
 * copy, pb_kernels_type(), has it) */
#define ROW(nm, bl, ts, sup, qz, tf, ff, vdt)                                                                          \
    { nm, bl, ts, sup, qz, tf, ff, vdt, NULL }
#define NOSUP(nm, bl, ts) ROW(nm, bl, ts, false, false, NULL, NULL, PB_TYPE_F32)

static const pb_type_traits table[PB_TYPE_COUNT] = {
    [PB_TYPE_F32] = ROW("f32", 1, 4, true, true, f32_to_float, f32_from_float, PB_TYPE_F32),
    [PB_TYPE_F16] = ROW("f16", 1, 2, true, true, f16_to_float, f16_from_float, PB_TYPE_F32),
    [PB_TYPE_Q4_0] = ROW("q4_0", 32, 18, true, true, pb_dequant_q4_0, pb_quant_q4_0, PB_TYPE_Q8_0),
    [PB_TYPE_Q4_1] = ROW("q4_1", 32, 20, true, true, pb_dequant_q4_1, pb_quant_q4_1, PB_TYPE_Q8_0),
    [4] = NOSUP("q4_2", 0, 0),
    [5] = NOSUP("q4_3", 0, 0),
    [PB_TYPE_Q5_0] = ROW("q5_0", 32, 22, true, true, pb_dequant_q5_0, pb_quant_q5_0, PB_TYPE_Q8_0),
    [PB_TYPE_Q5_1] = ROW("q5_1", 32, 24, true, true, pb_dequant_q5_1, pb_quant_q5_1, PB_TYPE_Q8_0),
    [PB_TYPE_Q8_0] = ROW("q8_0", 32, 34, true, true, pb_dequant_q8_0, pb_quant_q8_0, PB_TYPE_Q8_0),
    [PB_TYPE_Q8_1] = ROW("q8_1", 32, 36, true, true, pb_dequant_q8_1, pb_quant_q8_1, PB_TYPE_Q8_1),
    [PB_TYPE_Q2_K] = ROW("q2_K", 256, 84, true, true, pb_dequant_q2_K, pb_quant_q2_K, PB_TYPE_Q8_K),
    [PB_TYPE_Q3_K] = ROW("q3_K", 256, 110, true, true, pb_dequant_q3_K, pb_quant_q3_K, PB_TYPE_Q8_K),
    [PB_TYPE_Q4_K] = ROW("q4_K", 256, 144, true, true, pb_dequant_q4_K, pb_quant_q4_K, PB_TYPE_Q8_K),
    [PB_TYPE_Q5_K] = ROW("q5_K", 256, 176, true, true, pb_dequant_q5_K, pb_quant_q5_K, PB_TYPE_Q8_K),
    [PB_TYPE_Q6_K] = ROW("q6_K", 256, 210, true, true, pb_dequant_q6_K, pb_quant_q6_K, PB_TYPE_Q8_K),
    [PB_TYPE_Q8_K] = ROW("q8_K", 256, 292, true, true, pb_dequant_q8_K, pb_quant_q8_K, PB_TYPE_Q8_K),
    [PB_TYPE_IQ2_XXS] = NOSUP("iq2_xxs", 256, 66),
    [PB_TYPE_IQ2_XS] = NOSUP("iq2_xs", 256, 74),
    [PB_TYPE_IQ3_XXS] = NOSUP("iq3_xxs", 256, 98),
    [PB_TYPE_IQ1_S] = NOSUP("iq1_s", 256, 50),
    [PB_TYPE_IQ4_NL] = NOSUP("iq4_nl", 32, 18),
    [PB_TYPE_IQ3_S] = NOSUP("iq3_s", 256, 110),
    [PB_TYPE_IQ2_S] = NOSUP("iq2_s", 256, 82),
    [PB_TYPE_IQ4_XS] = NOSUP("iq4_xs", 256, 136),
    [PB_TYPE_I8] = NOSUP("i8", 1, 1),
    [PB_TYPE_I16] = NOSUP("i16", 1, 2),
    [PB_TYPE_I32] = NOSUP("i32", 1, 4),
    [PB_TYPE_I64] = NOSUP("i64", 1, 8),
    [PB_TYPE_F64] = NOSUP("f64", 1, 8),
    [PB_TYPE_IQ1_M] = NOSUP("iq1_m", 256, 56),
    [PB_TYPE_BF16] = ROW("bf16", 1, 2, true, true, bf16_to_float, bf16_from_float, PB_TYPE_F32),
    [31] = NOSUP("q4_0_4_4", 0, 0),
    [32] = NOSUP("q4_0_4_8", 0, 0),
    [33] = NOSUP("q4_0_8_8", 0, 0),
    [PB_TYPE_TQ1_0] = NOSUP("tq1_0", 256, 54),
    [PB_TYPE_TQ2_0] = NOSUP("tq2_0", 256, 66),
    [36] = NOSUP("iq4_nl_4_4", 0, 0),
    [37] = NOSUP("iq4_nl_4_8", 0, 0),
    [38] = NOSUP("iq4_nl_8_8", 0, 0),
};

static const pb_type_traits unknown_row = NOSUP("unknown", 0, 0);

const pb_type_traits *pb_type_get(int type) {
    if (type < 0 || type >= PB_TYPE_COUNT) return &unknown_row;
    return &table[type];
}

const char *pb_type_name(int type) {
    static _Thread_local char buf[24];
    if (type >= 0 && type < PB_TYPE_COUNT) return table[type].name;
    snprintf(buf, sizeof buf, "type#%d", type);
    return buf;
}

int pb_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < PB_TYPE_COUNT; i++) {
        if (table[i].blck == 0) continue;
        if (strcasecmp(name, table[i].name) == 0) return i;
    }
    return -1;
}

size_t pb_row_size(int type, int64_t ne0) {
    if (type < 0 || type >= PB_TYPE_COUNT || ne0 < 0) return 0;
    const pb_type_traits *t = &table[type];
    if (t->blck == 0 || ne0 % t->blck != 0) return 0;
    size_t out;
    if (!pb_mul_ok((size_t)(ne0 / t->blck), t->type_size, &out)) return 0;
    return out;
}

pb_status pb_type_check_supported(int type) {
    if (type < 0 || type >= PB_TYPE_COUNT || table[type].blck == 0)
        return pb_error(PB_ERR_UNSUPPORTED, "tensor type id %d is unknown or removed from the format", type);
    if (!table[type].supported) return pb_error(PB_ERR_UNSUPPORTED, "type %s is not supported", table[type].name);
    return PB_OK;
}
