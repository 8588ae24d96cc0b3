/* types.h -- ggml tensor type ids, block geometry, and the per-type traits table (one row per type). */
#ifndef PB_TYPES_H
#define PB_TYPES_H

#include "base/base.h"

typedef enum pb_type {
    PB_TYPE_F32 = 0,
    PB_TYPE_F16 = 1,
    PB_TYPE_Q4_0 = 2,
    PB_TYPE_Q4_1 = 3,
    PB_TYPE_Q5_0 = 6,
    PB_TYPE_Q5_1 = 7,
    PB_TYPE_Q8_0 = 8,
    PB_TYPE_Q8_1 = 9,
    PB_TYPE_Q2_K = 10,
    PB_TYPE_Q3_K = 11,
    PB_TYPE_Q4_K = 12,
    PB_TYPE_Q5_K = 13,
    PB_TYPE_Q6_K = 14,
    PB_TYPE_Q8_K = 15,
    PB_TYPE_IQ2_XXS = 16,
    PB_TYPE_IQ2_XS = 17,
    PB_TYPE_IQ3_XXS = 18,
    PB_TYPE_IQ1_S = 19,
    PB_TYPE_IQ4_NL = 20,
    PB_TYPE_IQ3_S = 21,
    PB_TYPE_IQ2_S = 22,
    PB_TYPE_IQ4_XS = 23,
    PB_TYPE_I8 = 24,
    PB_TYPE_I16 = 25,
    PB_TYPE_I32 = 26,
    PB_TYPE_I64 = 27,
    PB_TYPE_F64 = 28,
    PB_TYPE_IQ1_M = 29,
    PB_TYPE_BF16 = 30,
    PB_TYPE_TQ1_0 = 34,
    PB_TYPE_TQ2_0 = 35,
    PB_TYPE_COUNT = 39
} pb_type;

#define PB_QK_K 256

/* Dot product of n elements: *s = sum x[i]*y[i], x of the weight type, y of its vec_dot_type. */
typedef void (*pb_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
typedef void (*pb_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*pb_from_float_fn)(const float *src, void *dst, int64_t n);

typedef struct pb_type_traits {
    const char *name;            /* "q4_K" as ggml names it */
    int64_t blck;                /* elements per block; 0 = unknown/removed id */
    size_t type_size;            /* bytes per block */
    bool supported;              /* we can read (dequantize) it */
    bool quantizable;            /* we can write it (from_float): every supported type */
    pb_to_float_fn to_float;     /* dequantize n elements (n % blck == 0) */
    pb_from_float_fn from_float; /* reference quantizer, n % blck == 0 */
    pb_type vec_dot_type;        /* the activation type vec_dot expects: F32 for F32/F16/BF16 weights, Q8_0 for
                                    the 32-element types (also Q4_1/Q5_1, where ggml uses Q8_1), Q8_K for the
                                    K-quants; the kernels room documents why (kernels/kernels.h) */
    pb_vec_dot_fn vec_dot;       /* NULL in this room's table (pb_type_get); the kernels room's copy
                                    (kernels/kernels.h: pb_kernels_type) holds the best ISA version, with the
                                    ISA's to_float / from_float where it has them (bit-identical) */
} pb_type_traits;

/* Traits of a type id; for ids out of range returns a row with blck == 0 and name "unknown". */
const pb_type_traits *pb_type_get(int type);
/* Name of a type id ("q4_K", or "type#N" for unknown ids). */
const char *pb_type_name(int type);
/* Parses "q4_k"/"Q4_K"/"f16"... -> id; -1 if unknown. */
int pb_type_from_name(const char *name);
/* Bytes of one row of ne0 elements; 0 when the id is unknown/removed, ne0 < 0, ne0 % blck != 0 or the
 * size overflows (so file-derived shapes can be checked with it). */
size_t pb_row_size(int type, int64_t ne0);
/* PB_OK when we can read type; else PB_ERR_UNSUPPORTED with "type iq2_xxs is not supported" (or
 * "tensor type id 4 is unknown ..."). */
pb_status pb_type_check_supported(int type);

/* fp16/bf16 conversion (round-to-nearest-even, as ggml). */
float pb_fp16_to_fp32(uint16_t h);
uint16_t pb_fp32_to_fp16(float f);
float pb_bf16_to_fp32(uint16_t h);
uint16_t pb_fp32_to_bf16(float f);

#endif
