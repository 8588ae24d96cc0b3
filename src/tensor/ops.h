/* ops.h -- row operations over float arrays for the forward pass: norms, RoPE, softmax, activations.
 * No matmul (kernels/matmul.h) and no allocation here; every function works in place or on caller buffers. */
#ifndef PB_OPS_H
#define PB_OPS_H

#include "base/base.h"

/* Gemma/LLaMA RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w (w == NULL: no gain). Sum of squares in double,
 * the rest in float32 as HF does. y may alias x. n > 0. */
void pb_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* RoPE inverse frequencies for head_dim hd (hd/2 values), HF's float32 recipe:
 * inv[i] = 1 / base^(2i/hd), then divided by the linear scaling factor (scale 1 = none). */
void pb_rope_inv_freq(float *inv, int hd, float base, float scale);
/* cos/sin of the angles pos * inv[i] for i < half (angle product in float32, like HF). */
void pb_rope_angles(float *cosv, float *sinv, const float *inv, int half, int64_t pos);
/* NeoX / rotate-half RoPE on n_head vectors of length hd stored back to back: pairs (i, i + hd/2). */
void pb_rope_neox(float *x, int n_head, int hd, const float *cosv, const float *sinv);

/* Softmax in place (float32, max subtracted; -INFINITY entries get 0). n > 0 with one finite entry. */
void pb_softmax(float *x, int64_t n);
/* tanh-approximated GELU, HF "gelu_pytorch_tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
float pb_gelu_tanh1(float x);
void pb_gelu_tanh(float *x, int64_t n);
/* GeGLU: gate[i] = gelu(gate[i]) * up[i]. */
void pb_geglu(float *gate, const float *up, int64_t n);
/* Soft-capping: x = cap * tanh(x / cap) (Gemma 2: attention cap 50, final logits cap 30). */
void pb_softcap(float *x, int64_t n, float cap);

/* Small vector helpers. */
void pb_vec_add(float *y, const float *x, int64_t n);          /* y += x      */
void pb_vec_scale(float *x, int64_t n, float s);               /* x *= s      */
void pb_vec_mad(float *y, const float *x, float a, int64_t n); /* y += a * x  */
float pb_vec_dot(const float *a, const float *b, int64_t n);   /* sum a*b (float accumulators) */
/* The index of the first x[i] that is not below lim in magnitude (NaN, +-inf, or |x[i]| >= lim), -1 when there is
 * none: lim INFINITY finds the first value that is not finite. One pass without a branch per value (~30 us for 256k
 * floats, a vocabulary of logits). */
int64_t pb_vec_first_over(const float *x, int64_t n, float lim);

#endif
