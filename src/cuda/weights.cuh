// weights.cuh -- device layouts of the GGUF weight types and the per-lane dot products the mat-vec kernel is
// built from. A matrix lives as two arrays: q (the quantized bytes of each block, 4-byte aligned) and m (each
// block's scales as floats where the file's fp16 sits at an odd offset). Q4_K and Q5_K blocks keep the file
// layout (144 / 176 bytes, 16-byte aligned); Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q6_K are split at upload so the
// quants can be read 4/8/16 bytes at a time. The values are the file's, bit for bit.
#pragma once

#include <cuda_fp16.h>
#include <stdint.h>

enum {
    T_F32 = 0,
    T_F16 = 1,
    T_Q4_0 = 2,
    T_Q4_1 = 3,
    T_Q5_0 = 6,
    T_Q5_1 = 7,
    T_Q8_0 = 8,
    T_Q4_K = 12,
    T_Q5_K = 13,
    T_Q6_K = 14,
    T_BF16 = 30,
    T_SCALAR = 100 /* + F32/F16/BF16: rows whose length is not a multiple of 8 (element by element) */
};

// Values per block, device q bytes and m bytes per block, lane units per block (one unit = one lane's work).
struct wlayout {
    int blk, qb, mb, units;
};

static inline __host__ __device__ wlayout layout_of(int type) {
    switch (type) {
    case T_F32: return {8, 32, 0, 1};
    case T_F16: return {8, 16, 0, 1};
    case T_BF16: return {8, 16, 0, 1};
    case T_F32 + T_SCALAR: return {1, 4, 0, 1};
    case T_F16 + T_SCALAR: return {1, 2, 0, 1};
    case T_BF16 + T_SCALAR: return {1, 2, 0, 1};
    case T_Q4_0: return {32, 16, 4, 1};
    case T_Q4_1: return {32, 16, 8, 1};
    case T_Q5_0: return {32, 16, 8, 1};
    case T_Q5_1: return {32, 16, 12, 1};
    case T_Q8_0: return {32, 32, 4, 1};
    case T_Q4_K: return {256, 144, 0, 16};
    case T_Q5_K: return {256, 176, 0, 16};
    case T_Q6_K: return {256, 192, 20, 16};
    }
    return {0, 0, 0, 0};
}

// Lane units a block on the int8 path (unit_dot8): the K-quants with wide units read 16 weight bytes a lane.
static inline __host__ __device__ int units8_of(int type) {
    return type == T_Q4_K ? 8 : type == T_Q6_K ? 4 : layout_of(type).units;
}

// Small unsigned integer (< 2^23) to float without the conversion unit: two full-rate ALU operations.
static __device__ __forceinline__ float u2f(uint32_t u) { return __int_as_float(0x4B000000u | u) - 8388608.0f; }

static __device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

// dot of 8 nibbles (4 bits at shift sh of each byte of w0 | w1) with x[0..8)
static __device__ __forceinline__ float nib8(uint32_t w0, uint32_t w1, int sh, const float *x) {
    const float4 a = *(const float4 *)x, b = *(const float4 *)(x + 4);
    return u2f((w0 >> sh) & 15) * a.x + u2f((w0 >> (sh + 8)) & 15) * a.y + u2f((w0 >> (sh + 16)) & 15) * a.z +
           u2f((w0 >> (sh + 24)) & 15) * a.w + u2f((w1 >> sh) & 15) * b.x + u2f((w1 >> (sh + 8)) & 15) * b.y +
           u2f((w1 >> (sh + 16)) & 15) * b.z + u2f((w1 >> (sh + 24)) & 15) * b.w;
}

static __device__ __forceinline__ float sum8(const float *x) {
    const float4 a = *(const float4 *)x, b = *(const float4 *)(x + 4);
    return ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w));
}

static __device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int &sc, int &m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// One lane's unit u of a row (q, m: the row's bytes; x: the row's activations, 16-byte aligned).
template <int T>
static __device__ __forceinline__ float unit_dot(const uint8_t *q, const uint8_t *m, int u, const float *x);

template <> __device__ __forceinline__ float unit_dot<T_F32>(const uint8_t *q, const uint8_t *, int u, const float *x) {
    const float4 w0 = ((const float4 *)q)[2 * u], w1 = ((const float4 *)q)[2 * u + 1];
    const float4 a = ((const float4 *)x)[2 * u], b = ((const float4 *)x)[2 * u + 1];
    return w0.x * a.x + w0.y * a.y + w0.z * a.z + w0.w * a.w + w1.x * b.x + w1.y * b.y + w1.z * b.z + w1.w * b.w;
}

template <> __device__ __forceinline__ float unit_dot<T_F16>(const uint8_t *q, const uint8_t *, int u, const float *x) {
    const uint4 w = ((const uint4 *)q)[u];
    const float4 a = ((const float4 *)x)[2 * u], b = ((const float4 *)x)[2 * u + 1];
    const float2 p0 = __half22float2(*(const __half2 *)&w.x), p1 = __half22float2(*(const __half2 *)&w.y);
    const float2 p2 = __half22float2(*(const __half2 *)&w.z), p3 = __half22float2(*(const __half2 *)&w.w);
    return p0.x * a.x + p0.y * a.y + p1.x * a.z + p1.y * a.w + p2.x * b.x + p2.y * b.y + p3.x * b.z + p3.y * b.w;
}

template <>
__device__ __forceinline__ float unit_dot<T_BF16>(const uint8_t *q, const uint8_t *, int u, const float *x) {
    const uint4 w = ((const uint4 *)q)[u];
    const float4 a = ((const float4 *)x)[2 * u], b = ((const float4 *)x)[2 * u + 1];
    return __uint_as_float(w.x << 16) * a.x + __uint_as_float(w.x & 0xFFFF0000u) * a.y +
           __uint_as_float(w.y << 16) * a.z + __uint_as_float(w.y & 0xFFFF0000u) * a.w +
           __uint_as_float(w.z << 16) * b.x + __uint_as_float(w.z & 0xFFFF0000u) * b.y +
           __uint_as_float(w.w << 16) * b.z + __uint_as_float(w.w & 0xFFFF0000u) * b.w;
}

template <>
__device__ __forceinline__ float unit_dot<T_F32 + T_SCALAR>(const uint8_t *q, const uint8_t *, int u, const float *x) {
    return ((const float *)q)[u] * x[u];
}
template <>
__device__ __forceinline__ float unit_dot<T_F16 + T_SCALAR>(const uint8_t *q, const uint8_t *, int u, const float *x) {
    return __half2float(((const __half *)q)[u]) * x[u];
}
template <>
__device__ __forceinline__ float unit_dot<T_BF16 + T_SCALAR>(const uint8_t *q, const uint8_t *, int u, const float *x) {
    return bf2f(((const uint16_t *)q)[u]) * x[u];
}

// Legacy 32-value blocks: one lane per block. qs byte i: low nibble = element i, high = element i + 16.
template <>
__device__ __forceinline__ float unit_dot<T_Q4_0>(const uint8_t *q, const uint8_t *m, int u, const float *x) {
    const uint4 w = ((const uint4 *)q)[u];
    const float d = ((const float *)m)[u];
    const float *xb = x + 32 * u;
    float s =
        nib8(w.x, w.y, 0, xb) + nib8(w.z, w.w, 0, xb + 8) + nib8(w.x, w.y, 4, xb + 16) + nib8(w.z, w.w, 4, xb + 24);
    float sx = sum8(xb) + sum8(xb + 8) + sum8(xb + 16) + sum8(xb + 24);
    return d * (s - 8.0f * sx);
}

template <>
__device__ __forceinline__ float unit_dot<T_Q4_1>(const uint8_t *q, const uint8_t *m, int u, const float *x) {
    const uint4 w = ((const uint4 *)q)[u];
    const float2 dm = ((const float2 *)m)[u];
    const float *xb = x + 32 * u;
    float s =
        nib8(w.x, w.y, 0, xb) + nib8(w.z, w.w, 0, xb + 8) + nib8(w.x, w.y, 4, xb + 16) + nib8(w.z, w.w, 4, xb + 24);
    float sx = sum8(xb) + sum8(xb + 8) + sum8(xb + 16) + sum8(xb + 24);
    return dm.x * s + dm.y * sx;
}

// 5-bit: the 5th bit of element e is bit e of qh.
static __device__ __forceinline__ float q5_dot(uint4 w, uint32_t qh, const float *xb) {
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        uint32_t byte = (ws[i >> 2] >> (8 * (i & 3))) & 0xFF;
        s += u2f((byte & 15) | (((qh >> i) & 1) << 4)) * xb[i];
        s += u2f((byte >> 4) | (((qh >> (i + 16)) & 1) << 4)) * xb[i + 16];
    }
    return s;
}

template <>
__device__ __forceinline__ float unit_dot<T_Q5_0>(const uint8_t *q, const uint8_t *m, int u, const float *x) {
    const uint4 w = ((const uint4 *)q)[u];
    const float d = ((const float *)m)[2 * u];
    const uint32_t qh = ((const uint32_t *)m)[2 * u + 1];
    const float *xb = x + 32 * u;
    float sx = sum8(xb) + sum8(xb + 8) + sum8(xb + 16) + sum8(xb + 24);
    return d * (q5_dot(w, qh, xb) - 16.0f * sx);
}

template <>
__device__ __forceinline__ float unit_dot<T_Q5_1>(const uint8_t *q, const uint8_t *m, int u, const float *x) {
    const uint4 w = ((const uint4 *)q)[u];
    const float d = ((const float *)m)[3 * u], mn = ((const float *)m)[3 * u + 1];
    const uint32_t qh = ((const uint32_t *)m)[3 * u + 2];
    const float *xb = x + 32 * u;
    float sx = sum8(xb) + sum8(xb + 8) + sum8(xb + 16) + sum8(xb + 24);
    return d * q5_dot(w, qh, xb) + mn * sx;
}

template <>
__device__ __forceinline__ float unit_dot<T_Q8_0>(const uint8_t *q, const uint8_t *m, int u, const float *x) {
    const uint4 w0 = ((const uint4 *)q)[2 * u], w1 = ((const uint4 *)q)[2 * u + 1];
    const float d = ((const float *)m)[u];
    const uint32_t ws[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
    const float *xb = x + 32 * u;
    float s = 0.0f, sx = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float4 a = *(const float4 *)(xb + 4 * i);
        const uint32_t b = ws[i] ^ 0x80808080u; /* int8 + 128 as unsigned bytes */
        s += u2f(b & 0xFF) * a.x + u2f((b >> 8) & 0xFF) * a.y + u2f((b >> 16) & 0xFF) * a.z + u2f(b >> 24) * a.w;
        sx += (a.x + a.y) + (a.z + a.w);
    }
    return d * (s - 128.0f * sx);
}

// K-quants: 16 lanes per 256-value super-block. Q4_K/Q5_K unit i: 64-value chunk j = i / 4, bytes 8 (i % 4) ..
// of its 32 qs bytes (low nibbles: values 64j + 8(i%4) + 0..7, scale 2j; high: + 32, scale 2j + 1).
template <>
__device__ __forceinline__ float unit_dot<T_Q4_K>(const uint8_t *q, const uint8_t *, int u, const float *x) {
    const int b = u >> 4, i = u & 15, j = i >> 2, l8 = i & 3;
    const uint8_t *blk = q + (size_t)b * 144;
    const float2 dd = __half22float2(*(const __half2 *)blk);
    const uint2 w = *(const uint2 *)(blk + 16 + 32 * j + 8 * l8);
    int sc0, m0, sc1, m1;
    scale_min_k4(2 * j, blk + 4, sc0, m0);
    scale_min_k4(2 * j + 1, blk + 4, sc1, m1);
    const float *x0 = x + 256 * b + 64 * j + 8 * l8, *x1 = x0 + 32;
    return dd.x * ((float)sc0 * nib8(w.x, w.y, 0, x0) + (float)sc1 * nib8(w.x, w.y, 4, x1)) -
           dd.y * ((float)m0 * sum8(x0) + (float)m1 * sum8(x1));
}

template <>
__device__ __forceinline__ float unit_dot<T_Q5_K>(const uint8_t *q, const uint8_t *, int u, const float *x) {
    const int b = u >> 4, i = u & 15, j = i >> 2, l8 = i & 3;
    const uint8_t *blk = q + (size_t)b * 176;
    const float2 dd = __half22float2(*(const __half2 *)blk);
    const uint2 w = *(const uint2 *)(blk + 48 + 32 * j + 8 * l8);
    const uint2 h = *(const uint2 *)(blk + 16 + 8 * l8);
    int sc0, m0, sc1, m1;
    scale_min_k4(2 * j, blk + 4, sc0, m0);
    scale_min_k4(2 * j + 1, blk + 4, sc1, m1);
    const float *x0 = x + 256 * b + 64 * j + 8 * l8, *x1 = x0 + 32;
    const uint32_t ws[2] = {w.x, w.y}, hs[2] = {h.x, h.y};
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        uint32_t byte = (ws[k >> 2] >> (8 * (k & 3))) & 0xFF, hb = (hs[k >> 2] >> (8 * (k & 3))) & 0xFF;
        s0 += u2f((byte & 15) | (((hb >> (2 * j)) & 1) << 4)) * x0[k];
        s1 += u2f((byte >> 4) | (((hb >> (2 * j + 1)) & 1) << 4)) * x1[k];
    }
    return dd.x * ((float)sc0 * s0 + (float)sc1 * s1) - dd.y * ((float)m0 * sum8(x0) + (float)m1 * sum8(x1));
}

// Q6_K unit i: half h = i / 8 (128 values), l = 4 (i % 8): ql[l..l+3], ql[l+32..], qh[l..] give values
// 128h + l + {0, 32, 64, 96} + 0..3 with scales 8h + l/16 + {0, 2, 4, 6}.
template <>
__device__ __forceinline__ float unit_dot<T_Q6_K>(const uint8_t *q, const uint8_t *m, int u, const float *x) {
    const int b = u >> 4, i = u & 15, h = i >> 3, l = 4 * (i & 7);
    const uint8_t *qb = q + (size_t)b * 192;
    const uint32_t a = *(const uint32_t *)(qb + 64 * h + l), c = *(const uint32_t *)(qb + 64 * h + 32 + l);
    const uint32_t hh = *(const uint32_t *)(qb + 128 + 32 * h + l);
    const int8_t *sc = (const int8_t *)(m + (size_t)b * 20) + 8 * h + (l >> 4);
    const float d = *(const float *)(m + (size_t)b * 20 + 16);
    const float *xb = x + 256 * b + 128 * h + l;
    const float4 x0 = *(const float4 *)xb, x1 = *(const float4 *)(xb + 32), x2 = *(const float4 *)(xb + 64),
                 x3 = *(const float4 *)(xb + 96);
    const float xa0[4] = {x0.x, x0.y, x0.z, x0.w}, xa1[4] = {x1.x, x1.y, x1.z, x1.w};
    const float xa2[4] = {x2.x, x2.y, x2.z, x2.w}, xa3[4] = {x3.x, x3.y, x3.z, x3.w};
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t ak = (a >> (8 * k)) & 0xFF, ck = (c >> (8 * k)) & 0xFF, hk = (hh >> (8 * k)) & 0xFF;
        s0 += u2f((ak & 15) | ((hk & 3) << 4)) * xa0[k];
        s1 += u2f((ck & 15) | (((hk >> 2) & 3) << 4)) * xa1[k];
        s2 += u2f((ak >> 4) | (((hk >> 4) & 3) << 4)) * xa2[k];
        s3 += u2f((ck >> 4) | (((hk >> 6) & 3) << 4)) * xa3[k];
    }
    const float t0 = (x0.x + x0.y) + (x0.z + x0.w), t1 = (x1.x + x1.y) + (x1.z + x1.w);
    const float t2 = (x2.x + x2.y) + (x2.z + x2.w), t3 = (x3.x + x3.y) + (x3.z + x3.w);
    return d * ((float)sc[0] * (s0 - 32.0f * t0) + (float)sc[2] * (s1 - 32.0f * t1) + (float)sc[4] * (s2 - 32.0f * t2) +
                (float)sc[6] * (s3 - 32.0f * t3));
}

// ---- int8 path: the activations quantized as the CPU's default path does (q8_0 blocks of 32 for the legacy
// types, q8_K blocks of 256 for the K-quants), dotted with the weights' integers by dp4a (4 byte products a
// instruction); scales applied per block in float. See k_quant in backend.cu for the activation format.
struct qact {
    const int8_t *q0; // q8_0 values (K)
    const float *d0;  // q8_0 scales (K / 32), the fp16 scale as float
    const int8_t *qK; // q8_K values (K, whole 256-blocks only)
    const float *dK;  // q8_K scales (K / 256)
};

static __device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }

// 4 bits of b (bit i -> byte i) as 0x10 in each byte.
static __device__ __forceinline__ int bits4_x10(uint32_t b) {
    return (int)(((b & 15u) * 0x00204081u & 0x01010101u) << 4);
}

// The types whose unit_dot8 is split into a weight half and an activation half: unit_load8 reads the unit's weight
// bytes (quants and block scales, as loaded: no arithmetic on them yet) into a few registers, unit_dot8_loaded dots
// them with the activations. unit_dot8 of these types is the two in turn (one arithmetic definition), so a mat-vec
// may issue a unit's weight loads early (before it waits for its input: weights never depend on the previous
// kernel) and get the same bits. Q4_1, Q5_1 and Q5_K keep their one-piece unit_dot8 below.
template <int T> struct wunit8;
template <int T> struct has_load8 {
    static constexpr bool value = T == T_Q4_0 || T == T_Q5_0 || T == T_Q8_0 || T == T_Q4_K || T == T_Q6_K;
};

template <int T> static __device__ __forceinline__ wunit8<T> unit_load8(const uint8_t *q, const uint8_t *m, int u);
template <int T> static __device__ __forceinline__ float unit_dot8_loaded(const wunit8<T> &w, int u, const qact &x);

template <int T>
static __device__ __forceinline__ float unit_dot8(const uint8_t *q, const uint8_t *m, int u, const qact &x) {
    return unit_dot8_loaded<T>(unit_load8<T>(q, m, u), u, x);
}

// legacy blocks: qs byte i = element i (low nibble) and i + 16 (high); activations as 8 ints.
static __device__ __forceinline__ void load_q8_32(const int8_t *q0, int u, int a[8]) {
    const int4 a0 = ((const int4 *)q0)[2 * u], a1 = ((const int4 *)q0)[2 * u + 1];
    a[0] = a0.x, a[1] = a0.y, a[2] = a0.z, a[3] = a0.w, a[4] = a1.x, a[5] = a1.y, a[6] = a1.z, a[7] = a1.w;
}

static __device__ __forceinline__ int nib_dot32(uint4 w, const int a[8]) {
    const int ws[4] = {(int)w.x, (int)w.y, (int)w.z, (int)w.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s = dp4a(ws[i] & 0x0F0F0F0F, a[i], s);
        s = dp4a((ws[i] >> 4) & 0x0F0F0F0F, a[i + 4], s);
    }
    return s;
}

static __device__ __forceinline__ int nib5_dot32(uint4 w, uint32_t qh, const int a[8]) {
    const int ws[4] = {(int)w.x, (int)w.y, (int)w.z, (int)w.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s = dp4a((ws[i] & 0x0F0F0F0F) | bits4_x10(qh >> (4 * i)), a[i], s);
        s = dp4a(((ws[i] >> 4) & 0x0F0F0F0F) | bits4_x10(qh >> (16 + 4 * i)), a[i + 4], s);
    }
    return s;
}

static __device__ __forceinline__ int sum_q8_32(const int a[8]) {
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) s = dp4a(0x01010101, a[i], s);
    return s;
}

template <> struct wunit8<T_Q4_0> {
    uint4 w;
    float d;
};
template <> __device__ __forceinline__ wunit8<T_Q4_0> unit_load8<T_Q4_0>(const uint8_t *q, const uint8_t *m, int u) {
    return {((const uint4 *)q)[u], ((const float *)m)[u]};
}
template <> __device__ __forceinline__ float unit_dot8_loaded<T_Q4_0>(const wunit8<T_Q4_0> &w, int u, const qact &x) {
    int a[8];
    load_q8_32(x.q0, u, a);
    return w.d * x.d0[u] * (float)(nib_dot32(w.w, a) - 8 * sum_q8_32(a));
}

template <>
__device__ __forceinline__ float unit_dot8<T_Q4_1>(const uint8_t *q, const uint8_t *m, int u, const qact &x) {
    const uint4 w = ((const uint4 *)q)[u];
    const float2 dm = ((const float2 *)m)[u];
    int a[8];
    load_q8_32(x.q0, u, a);
    return x.d0[u] * (dm.x * (float)nib_dot32(w, a) + dm.y * (float)sum_q8_32(a));
}

template <> struct wunit8<T_Q5_0> {
    uint4 w;
    float d;
    uint32_t qh;
};
template <> __device__ __forceinline__ wunit8<T_Q5_0> unit_load8<T_Q5_0>(const uint8_t *q, const uint8_t *m, int u) {
    return {((const uint4 *)q)[u], ((const float *)m)[2 * u], ((const uint32_t *)m)[2 * u + 1]};
}
template <> __device__ __forceinline__ float unit_dot8_loaded<T_Q5_0>(const wunit8<T_Q5_0> &w, int u, const qact &x) {
    int a[8];
    load_q8_32(x.q0, u, a);
    return w.d * x.d0[u] * (float)(nib5_dot32(w.w, w.qh, a) - 16 * sum_q8_32(a));
}

template <>
__device__ __forceinline__ float unit_dot8<T_Q5_1>(const uint8_t *q, const uint8_t *m, int u, const qact &x) {
    const uint4 w = ((const uint4 *)q)[u];
    const float d = ((const float *)m)[3 * u], mn = ((const float *)m)[3 * u + 1];
    const uint32_t qh = ((const uint32_t *)m)[3 * u + 2];
    int a[8];
    load_q8_32(x.q0, u, a);
    return x.d0[u] * (d * (float)nib5_dot32(w, qh, a) + mn * (float)sum_q8_32(a));
}

template <> struct wunit8<T_Q8_0> {
    int4 w0, w1;
    float d;
};
template <> __device__ __forceinline__ wunit8<T_Q8_0> unit_load8<T_Q8_0>(const uint8_t *q, const uint8_t *m, int u) {
    return {((const int4 *)q)[2 * u], ((const int4 *)q)[2 * u + 1], ((const float *)m)[u]};
}
template <> __device__ __forceinline__ float unit_dot8_loaded<T_Q8_0>(const wunit8<T_Q8_0> &w, int u, const qact &x) {
    int a[8];
    load_q8_32(x.q0, u, a);
    int s = dp4a(w.w0.x, a[0], 0);
    s = dp4a(w.w0.y, a[1], s), s = dp4a(w.w0.z, a[2], s), s = dp4a(w.w0.w, a[3], s);
    s = dp4a(w.w1.x, a[4], s), s = dp4a(w.w1.y, a[5], s), s = dp4a(w.w1.z, a[6], s), s = dp4a(w.w1.w, a[7], s);
    return w.d * x.d0[u] * (float)s;
}

// K-quants on the int8 path: wide units, one 16-byte load of weight quants a lane (units8_of: 8 a Q4_K block,
// 4 a Q6_K block; Q5_K keeps the 16 units of unit_dot). Q4_K unit i of block b: 64-value chunk j = i / 2, qs bytes
// 16 (i % 2) .. + 15 of the chunk's 32: low nibbles values 64j + 16(i%2) + 0..15 (scale 2j), high ones + 32 (scale
// 2j + 1). The block's first 16 bytes (d, dmin, the 12 packed 6-bit scales and mins) come in one load too.
template <> struct wunit8<T_Q4_K> {
    uint4 hd, w; // the block's d, dmin and packed scales/mins; the unit's 16 bytes of quants
};
template <> __device__ __forceinline__ wunit8<T_Q4_K> unit_load8<T_Q4_K>(const uint8_t *q, const uint8_t *, int u) {
    const int b = u >> 3, i = u & 7, j = i >> 1, hf = i & 1;
    const uint8_t *blk = q + (size_t)b * 144;
    return {*(const uint4 *)blk, *(const uint4 *)(blk + 16 + 32 * j + 16 * hf)};
}
template <> __device__ __forceinline__ float unit_dot8_loaded<T_Q4_K>(const wunit8<T_Q4_K> &wu, int u, const qact &x) {
    const int b = u >> 3, i = u & 7, j = i >> 1, hf = i & 1;
    const uint4 hd = wu.hd, w = wu.w;
    const float2 dd = __half22float2(*(const __half2 *)&hd.x);
    // the scales/mins of sub-blocks 0..3 (j < 2) or 4..7 (j >= 2), one byte each (scale_min_k4, 4 at once)
    const uint32_t S = j < 2 ? hd.y & 0x3F3F3F3Fu : (hd.w & 0x0F0F0F0Fu) | ((hd.y >> 2) & 0x30303030u);
    const uint32_t Mn = j < 2 ? hd.z & 0x3F3F3F3Fu : ((hd.w >> 4) & 0x0F0F0F0Fu) | ((hd.z >> 2) & 0x30303030u);
    const int k0 = 16 * (j & 1); /* byte (2j) & 3 and (2j + 1) & 3, as bit shifts */
    const int sc0 = (S >> k0) & 0xFF, sc1 = (S >> (k0 + 8)) & 0xFF, m0 = (Mn >> k0) & 0xFF,
              m1 = (Mn >> (k0 + 8)) & 0xFF;
    const int8_t *a = x.qK + 256 * b + 64 * j + 16 * hf;
    const int4 a0 = *(const int4 *)a, a1 = *(const int4 *)(a + 32);
    int i0 = dp4a((int)(w.x & 0x0F0F0F0Fu), a0.x, 0);
    i0 = dp4a((int)(w.y & 0x0F0F0F0Fu), a0.y, i0);
    i0 = dp4a((int)(w.z & 0x0F0F0F0Fu), a0.z, i0);
    i0 = dp4a((int)(w.w & 0x0F0F0F0Fu), a0.w, i0);
    int i1 = dp4a((int)((w.x >> 4) & 0x0F0F0F0Fu), a1.x, 0);
    i1 = dp4a((int)((w.y >> 4) & 0x0F0F0F0Fu), a1.y, i1);
    i1 = dp4a((int)((w.z >> 4) & 0x0F0F0F0Fu), a1.z, i1);
    i1 = dp4a((int)((w.w >> 4) & 0x0F0F0F0Fu), a1.w, i1);
    const int s0 = dp4a(0x01010101, a0.w, dp4a(0x01010101, a0.z, dp4a(0x01010101, a0.y, dp4a(0x01010101, a0.x, 0))));
    const int s1 = dp4a(0x01010101, a1.w, dp4a(0x01010101, a1.z, dp4a(0x01010101, a1.y, dp4a(0x01010101, a1.x, 0))));
    return x.dK[b] * (dd.x * (float)(sc0 * i0 + sc1 * i1) - dd.y * (float)(m0 * s0 + m1 * s1));
}

// Q5_K: the units of unit_dot (16 a block: values 64j + 8(i%4) + 0..7, scale 2j, and + 32, scale 2j + 1; j = i / 4).
template <>
__device__ __forceinline__ float unit_dot8<T_Q5_K>(const uint8_t *q, const uint8_t *, int u, const qact &x) {
    const int b = u >> 4, i = u & 15, j = i >> 2, l8 = i & 3;
    const uint8_t *blk = q + (size_t)b * 176;
    const float2 dd = __half22float2(*(const __half2 *)blk);
    const uint2 w = *(const uint2 *)(blk + 48 + 32 * j + 8 * l8);
    const uint2 h = *(const uint2 *)(blk + 16 + 8 * l8);
    int sc0, m0, sc1, m1;
    scale_min_k4(2 * j, blk + 4, sc0, m0);
    scale_min_k4(2 * j + 1, blk + 4, sc1, m1);
    const int8_t *a = x.qK + 256 * b + 64 * j + 8 * l8;
    const int2 a0 = *(const int2 *)a, a1 = *(const int2 *)(a + 32);
    const uint32_t l0x = (w.x & 0x0F0F0F0Fu) | (((h.x >> (2 * j)) & 0x01010101u) << 4);
    const uint32_t l0y = (w.y & 0x0F0F0F0Fu) | (((h.y >> (2 * j)) & 0x01010101u) << 4);
    const uint32_t l1x = ((w.x >> 4) & 0x0F0F0F0Fu) | (((h.x >> (2 * j + 1)) & 0x01010101u) << 4);
    const uint32_t l1y = ((w.y >> 4) & 0x0F0F0F0Fu) | (((h.y >> (2 * j + 1)) & 0x01010101u) << 4);
    const int i0 = dp4a((int)l0y, a0.y, dp4a((int)l0x, a0.x, 0));
    const int i1 = dp4a((int)l1y, a1.y, dp4a((int)l1x, a1.x, 0));
    const int s0 = dp4a(0x01010101, a0.y, dp4a(0x01010101, a0.x, 0));
    const int s1 = dp4a(0x01010101, a1.y, dp4a(0x01010101, a1.x, 0));
    return x.dK[b] * (dd.x * (float)(sc0 * i0 + sc1 * i1) - dd.y * (float)(m0 * s0 + m1 * s1));
}

// Q6_K wide unit i (4 a block): half h = i / 2 (128 values), l = 16 (i % 2): ql[64h + l ..+16], ql[64h + 32 + l
// ..+16] and qh[32h + l ..+16] (three 16-byte loads) give values 128h + l + {0, 32, 64, 96} + 0..15 with scales
// 8h + l/16 + {0, 2, 4, 6}.
template <> struct wunit8<T_Q6_K> {
    uint4 A, C, Hh;    // ql, ql + 32, qh of the unit
    uint32_t sw0, sw1; // the 8 int8 scales of the unit's half
    float d;
};
template <> __device__ __forceinline__ wunit8<T_Q6_K> unit_load8<T_Q6_K>(const uint8_t *q, const uint8_t *m, int u) {
    const int b = u >> 2, i = u & 3, h = i >> 1, l = 16 * (i & 1);
    const uint8_t *qb = q + (size_t)b * 192, *mb = m + (size_t)b * 20;
    return {*(const uint4 *)(qb + 64 * h + l),       *(const uint4 *)(qb + 64 * h + 32 + l),
            *(const uint4 *)(qb + 128 + 32 * h + l), *(const uint32_t *)(mb + 8 * h),
            *(const uint32_t *)(mb + 8 * h + 4),     *(const float *)(mb + 16)};
}
template <> __device__ __forceinline__ float unit_dot8_loaded<T_Q6_K>(const wunit8<T_Q6_K> &wu, int u, const qact &x) {
    const int b = u >> 2, i = u & 3, h = i >> 1, l = 16 * (i & 1);
    const uint4 A = wu.A, C = wu.C, Hh = wu.Hh;
    const uint32_t sw0 = wu.sw0, sw1 = wu.sw1;
    const float d = wu.d;
    const int o = 8 * (l >> 4);
    const int sc0 = (int)(int8_t)(sw0 >> o), sc2 = (int)(int8_t)(sw0 >> (o + 16));
    const int sc4 = (int)(int8_t)(sw1 >> o), sc6 = (int)(int8_t)(sw1 >> (o + 16));
    const int8_t *xa = x.qK + 256 * b + 128 * h + l;
    const int4 X0 = *(const int4 *)xa, X1 = *(const int4 *)(xa + 32), X2 = *(const int4 *)(xa + 64),
               X3 = *(const int4 *)(xa + 96);
    const uint32_t aw[4] = {A.x, A.y, A.z, A.w}, cw[4] = {C.x, C.y, C.z, C.w}, hw[4] = {Hh.x, Hh.y, Hh.z, Hh.w};
    const int x0[4] = {X0.x, X0.y, X0.z, X0.w}, x1[4] = {X1.x, X1.y, X1.z, X1.w};
    const int x2[4] = {X2.x, X2.y, X2.z, X2.w}, x3[4] = {X3.x, X3.y, X3.z, X3.w};
    int i0 = 0, i1 = 0, i2 = 0, i3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        i0 = dp4a((int)((aw[k] & 0x0F0F0F0Fu) | ((hw[k] & 0x03030303u) << 4)), x0[k], i0);
        i1 = dp4a((int)((cw[k] & 0x0F0F0F0Fu) | (((hw[k] >> 2) & 0x03030303u) << 4)), x1[k], i1);
        i2 = dp4a((int)(((aw[k] >> 4) & 0x0F0F0F0Fu) | (((hw[k] >> 4) & 0x03030303u) << 4)), x2[k], i2);
        i3 = dp4a((int)(((cw[k] >> 4) & 0x0F0F0F0Fu) | (((hw[k] >> 6) & 0x03030303u) << 4)), x3[k], i3);
        t0 = dp4a(0x01010101, x0[k], t0);
        t1 = dp4a(0x01010101, x1[k], t1);
        t2 = dp4a(0x01010101, x2[k], t2);
        t3 = dp4a(0x01010101, x3[k], t3);
    }
    return x.dK[b] * d *
           (float)(sc0 * (i0 - 32 * t0) + sc2 * (i1 - 32 * t1) + sc4 * (i2 - 32 * t2) + sc6 * (i3 - 32 * t3));
}

// Element k of a row as float (embedding rows; not a hot path).
static __device__ float deq_elem(int type, const uint8_t *q, const uint8_t *m, int64_t k) {
    switch (type) {
    case T_F32:
    case T_F32 + T_SCALAR: return ((const float *)q)[k];
    case T_F16:
    case T_F16 + T_SCALAR: return __half2float(((const __half *)q)[k]);
    case T_BF16:
    case T_BF16 + T_SCALAR: return bf2f(((const uint16_t *)q)[k]);
    default: break;
    }
    const int64_t b = type == T_Q4_K || type == T_Q5_K || type == T_Q6_K ? k / 256 : k / 32;
    const int r = (int)(type == T_Q4_K || type == T_Q5_K || type == T_Q6_K ? k % 256 : k % 32);
    switch (type) {
    case T_Q4_0:
    case T_Q4_1:
    case T_Q5_0:
    case T_Q5_1: {
        const uint8_t byte = q[b * 16 + (r & 15)];
        int v = r < 16 ? byte & 15 : byte >> 4;
        if (type == T_Q4_0) return (float)(v - 8) * ((const float *)m)[b];
        if (type == T_Q4_1) return (float)v * ((const float *)m)[2 * b] + ((const float *)m)[2 * b + 1];
        const float *mf = (const float *)m;
        if (type == T_Q5_0) {
            v |= (int)((((const uint32_t *)m)[2 * b + 1] >> r) & 1) << 4;
            return (float)(v - 16) * mf[2 * b];
        }
        v |= (int)((((const uint32_t *)m)[3 * b + 2] >> r) & 1) << 4;
        return (float)v * mf[3 * b] + mf[3 * b + 1];
    }
    case T_Q8_0: return (float)((const int8_t *)q)[b * 32 + r] * ((const float *)m)[b];
    case T_Q4_K:
    case T_Q5_K: {
        const int j = r / 64, hi = (r % 64) >= 32, l = r % 32;
        const uint8_t *blk = q + b * (type == T_Q4_K ? 144 : 176);
        const float2 dd = __half22float2(*(const __half2 *)blk);
        int sc, mn;
        scale_min_k4(2 * j + hi, blk + 4, sc, mn);
        const uint8_t byte = blk[(type == T_Q4_K ? 16 : 48) + 32 * j + l];
        int v = hi ? byte >> 4 : byte & 15;
        if (type == T_Q5_K) v |= ((blk[16 + l] >> (2 * j + hi)) & 1) << 4;
        return dd.x * (float)sc * (float)v - dd.y * (float)mn;
    }
    case T_Q6_K: {
        const int h = r / 128, rr = r % 128, qu = rr / 32, l = rr % 32;
        const uint8_t *qb = q + b * 192, *ql = qb + 64 * h, *qh = qb + 128 + 32 * h;
        const int8_t *sc = (const int8_t *)(m + b * 20) + 8 * h + l / 16;
        const float d = *(const float *)(m + b * 20 + 16);
        const uint8_t lo = qu & 1 ? ql[l + 32] : ql[l];
        int v = (qu >= 2 ? lo >> 4 : lo & 15) | (((qh[l] >> (2 * qu)) & 3) << 4);
        return d * (float)sc[2 * qu] * (float)(v - 32);
    }
    }
    return 0.0f;
}
