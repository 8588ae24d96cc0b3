/* ops.c -- row operations over float arrays (norms, RoPE, softmax, GELU, soft-capping). No matmul, no malloc. */
#include "tensor/ops.h"

#include <math.h>

void pb_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    /* four partial sums: one chain of dependent double adds took ~2.5 us per 2304-wide row (2% of a prefill) */
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)x[i] * (double)x[i];
        s1 += (double)x[i + 1] * (double)x[i + 1];
        s2 += (double)x[i + 2] * (double)x[i + 2];
        s3 += (double)x[i + 3] * (double)x[i + 3];
    }
    for (; i < n; i++) s0 += (double)x[i] * (double)x[i];
    double ss = (s0 + s1) + (s2 + s3);
    /* HF: x * torch.rsqrt(mean(x^2) + eps), then * weight (Gemma: weight already holds 1 + w in GGUF). */
    float mean = (float)(ss / (double)n);
    float r = 1.0f / sqrtf(mean + eps);
    if (w) {
        for (i = 0; i < n; i++) y[i] = (x[i] * r) * w[i];
    } else {
        for (i = 0; i < n; i++) y[i] = x[i] * r;
    }
}

void pb_rope_inv_freq(float *inv, int hd, float base, float scale) {
    /* HF _compute_default_rope_parameters: 1.0 / (base ** (arange(0, hd, 2).float() / hd)) in float32;
     * linear scaling divides inv_freq by the factor. */
    for (int i = 0; i < hd / 2; i++) {
        float e = (float)(2 * i) / (float)hd;
        float p = (float)pow((double)base, (double)e);
        inv[i] = (1.0f / p) / scale;
    }
}

void pb_rope_angles(float *cosv, float *sinv, const float *inv, int half, int64_t pos) {
    float p = (float)pos;
    for (int i = 0; i < half; i++) {
        float th = p * inv[i];
        cosv[i] = cosf(th);
        sinv[i] = sinf(th);
    }
}

void pb_rope_neox(float *x, int n_head, int hd, const float *cosv, const float *sinv) {
    int half = hd / 2;
    for (int h = 0; h < n_head; h++) {
        float *v = x + (int64_t)h * hd;
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            /* q*cos + rotate_half(q)*sin with rotate_half(q) = (-q2, q1) */
            v[i] = a * cosv[i] - b * sinv[i];
            v[i + half] = b * cosv[i] + a * sinv[i];
        }
    }
}

void pb_softmax(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float e = x[i] == -INFINITY ? 0.0f : expf(x[i] - mx);
        x[i] = e;
        sum += (double)e;
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

float pb_gelu_tanh1(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

void pb_gelu_tanh(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = pb_gelu_tanh1(x[i]);
}

void pb_geglu(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = pb_gelu_tanh1(gate[i]) * up[i];
}

void pb_softcap(float *x, int64_t n, float cap) {
    /* HF: logits / cap -> tanh -> * cap */
    for (int64_t i = 0; i < n; i++) x[i] = tanhf(x[i] / cap) * cap;
}

void pb_vec_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void pb_vec_scale(float *x, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void pb_vec_mad(float *y, const float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

float pb_vec_dot(const float *a, const float *b, int64_t n) {
    /* 8 independent float accumulators: vectorizable and a fixed, thread-count-independent order. */
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

int64_t pb_vec_first_over(const float *x, int64_t n, float lim) {
    /* blocks of 64 whose compares are OR-ed without a branch (vector masks), then a plain search from the block that
     * holds one; !(|x| < lim) is true for NaN too */
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        int over = 0;
        for (int k = 0; k < 64; k++) over |= !(fabsf(x[i + k]) < lim);
        if (over) break;
    }
    for (; i < n; i++)
        if (!(fabsf(x[i]) < lim)) return i;
    return -1;
}
