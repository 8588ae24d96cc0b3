/* kernels.h -- dot-product kernels of the kernels room, one family per ISA file; dispatch.c picks them.
 * All share pb_vec_dot_fn's signature: *s = sum_i x[i]*y[i] over n elements (n % blck == 0), x in the
 * weight type, y in its vec_dot_type (tensor/types.h). Quantized inner sums are exact integers.
 * Activation formats: F32 for F32/F16/BF16 weights (no rounding of activations, unlike ggml's F16/BF16
 * activations), Q8_0 for all 32-element types including Q4_1/Q5_1 (ggml uses Q8_1 there; see ref.c),
 * Q8_K for the K-quants. Q8_1 weights (never in model files) also dot against Q8_1. */
#ifndef PB_KERNELS_H
#define PB_KERNELS_H

#include "tensor/types.h"

/* ---- ref.c: portable scalar C, the executable spec every ISA version is tested against ---- */
void pb_vec_dot_f32_f32_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_f16_f32_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_bf16_f32_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q4_1_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q5_1_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q8_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q2_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q3_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q8_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);

/* Fills vec_dot of every row of table with the ref kernels (dispatch.c uses it as the base layer,
 * then overrides with ISA versions). Exposed so tests can compare an ISA table against ref. */
void pb_kernels_fill_ref(pb_type_traits *table, int n);

#endif
