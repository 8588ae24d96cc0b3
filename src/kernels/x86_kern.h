/* x86_kern.h -- x86 SIMD kernels written once with 256-bit intrinsics, compiled twice: by x86_avx2.c
 * (AVX2+FMA+F16C) and by x86_avx512.c (adds AVX-512VL/BW/VNNI: vpdpbusd, 32 ymm registers, 512-bit
 * activation quantizers). Only those two files include it; each defines X86_SFX (_avx2 / _avx512).
 *
 * Every weight type has one "tile" kernel: nr weight rows x nt activation rows (nt <= PB_GEMM_NT). A
 * super-block of one weight row is unpacked once into registers and then used for all nt tokens, which
 * is what makes prefill compute-bound instead of unpack-bound. The vec_dot of a type is the same tile
 * with nr = nt = 1, so a matmul result is bit-identical to the per-row vec_dot (tests rely on it).
 * Integer inner sums are exact; float accumulation is per super-block (or block) into 8 lanes. */
#include "kernels/kernels.h"
#include "tensor/matmul.h"
#include "tensor/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define CAT2(a, b) a##b
#define CAT(a, b)  CAT2(a, b)
#define FN(name)   CAT(name, X86_SFX)
#define INLINE     static inline __attribute__((always_inline))
#define PB_UNROLL  _Pragma("GCC unroll 16")
/* decode streams weights once: ask for the block ~1 KiB ahead so several misses are in flight */
#define PREFETCH_AHEAD(p, bytes)                                                                                       \
    do {                                                                                                               \
        const char *pf_ = (const char *)(p) + 4096;                                                                    \
        for (int o_ = 0; o_ < (bytes); o_ += 64) _mm_prefetch(pf_ + o_, _MM_HINT_T0);                                  \
    } while (0)

// --- helpers ---------------------------------------------------------------------------------------------

INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* sum over groups of 4 bytes of u8 * s8 -> 8 x int32. Both forms are exact while every pair of products
 * fits int16 (maddubs saturates): true for all callers (|u| <= 127 or u <= 63 with |s| <= 128). */
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
INLINE __m256i dot_us(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
#else
INLINE __m256i dot_us(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#endif

/* sum over 16-value halves, each scaled by an int16: madd(maddubs(u, s), sc16) -> 8 x int32 */
INLINE __m256i dot_us_sc(__m256i u, __m256i s, __m256i sc16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc16);
}

/* acc + dot_us_sc(u, s, sc16); with AVX-512 VNNI the madd and the add fuse into one vpdpwssd */
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
INLINE __m256i acc_us_sc(__m256i acc, __m256i u, __m256i s, __m256i sc16) {
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), sc16);
}
#else
INLINE __m256i acc_us_sc(__m256i acc, __m256i u, __m256i s, __m256i sc16) {
    return _mm256_add_epi32(acc, dot_us_sc(u, s, sc16));
}
#endif

INLINE __m256i loadu(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

#define Q8K(a, a_row, t, b) ((const pb_block_q8_K *)((const uint8_t *)(a) + (size_t)(t) * (a_row)) + (b))
#define Q80(a, a_row, t, b) ((const pb_block_q8_0 *)((const uint8_t *)(a) + (size_t)(t) * (a_row)) + (b))

/* Expands a tile body over nt = 1..PB_GEMM_NT so every specialization keeps its accumulators in registers. */
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

// --- Q4_K x Q8_K ----------------------------------------------------------------------------------------

/* The 8 six-bit scales and mins of a Q4_K/Q5_K block (layout: quant-formats.md §2, Q4_K). */
INLINE void k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t w0, w1, w2;
    memcpy(&w0, q, 4);
    memcpy(&w1, q + 4, 4);
    memcpy(&w2, q + 8, 4);
    uint32_t s_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
    uint32_t s_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
    uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    memcpy(sc, &s_lo, 4);
    memcpy(sc + 4, &s_hi, 4);
    memcpy(mn, &m_lo, 4);
    memcpy(mn + 4, &m_hi, 4);
}

/* mins m_j as 16 int16 (each twice) so madd with the 16 bsums gives m_j * (bsum_2j + bsum_2j+1) */
INLINE __m256i k4_mins16(const uint8_t mn[8]) {
    __m128i m = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn));
    return _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
}

INLINE void q4k_row(int64_t nb, const pb_block_q4_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m256 acc[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        PREFETCH_AHEAD(&w[b], (int)sizeof w[b]);
        uint8_t sc[8], mn[8];
        k4_scales(w[b].scales, sc, mn);
        __m256i q[8], s16[8];
        PB_UNROLL for (int i = 0; i < 4; i++) {
            __m256i v = loadu(w[b].qs + 32 * i);
            q[2 * i] = _mm256_and_si256(v, m4);
            q[2 * i + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        PB_UNROLL for (int j = 0; j < 8; j++) s16[j] = _mm256_set1_epi16(sc[j]);
        const __m256i mins = k4_mins16(mn);
        const float d = h2f(w[b].d), dmin = h2f(w[b].dmin);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            __m256i is = dot_us_sc(q[0], loadu(x->qs), s16[0]);
            PB_UNROLL for (int j = 1; j < 8; j++) is = acc_us_sc(is, q[j], loadu(x->qs + 32 * j), s16[j]);
            __m256i ms = _mm256_madd_epi16(loadu(x->bsums), mins);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(d * x->d), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(dmin * x->d), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = hsum8(acc[t]);
}

#define Q4K_BODY(w, a, y, NT)                                                                                          \
    for (int64_t r = 0; r < nr; r++)                                                                                   \
    q4k_row(nb, (const pb_block_q4_K *)((const uint8_t *)(w) + (size_t)r * w_row), a, a_row, (y) + r, ldy, NT)

void FN(pb_gemm_q4_K_q8_K_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / PB_QK_K;
    TILE_SWITCH(Q4K_BODY, w, a, y)
}

void FN(pb_vec_dot_q4_K_q8_K_)(int64_t n, float *s, const void *x, const void *y) {
    q4k_row(n / PB_QK_K, x, y, 0, s, 0, 1);
}

// --- Q5_K x Q8_K ----------------------------------------------------------------------------------------

INLINE void q5k_row(int64_t nb, const pb_block_q5_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m256 acc[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < nb; b++) {
        PREFETCH_AHEAD(&w[b], (int)sizeof w[b]);
        uint8_t sc[8], mn[8];
        k4_scales(w[b].scales, sc, mn);
        __m256i q[8], s16[8];
        const __m256i hv = loadu(w[b].qh);
        PB_UNROLL for (int i = 0; i < 4; i++) {
            __m256i v = loadu(w[b].qs + 32 * i);
            __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hv, 2 * i), one);
            __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hv, 2 * i + 1), one);
            q[2 * i] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(h0, 4));
            q[2 * i + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_slli_epi16(h1, 4));
        }
        PB_UNROLL for (int j = 0; j < 8; j++) s16[j] = _mm256_set1_epi16(sc[j]);
        const __m256i mins = k4_mins16(mn);
        const float d = h2f(w[b].d), dmin = h2f(w[b].dmin);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            __m256i is = dot_us_sc(q[0], loadu(x->qs), s16[0]);
            PB_UNROLL for (int j = 1; j < 8; j++) is = acc_us_sc(is, q[j], loadu(x->qs + 32 * j), s16[j]);
            __m256i ms = _mm256_madd_epi16(loadu(x->bsums), mins);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(d * x->d), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(dmin * x->d), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = hsum8(acc[t]);
}

#define Q5K_BODY(w, a, y, NT)                                                                                          \
    for (int64_t r = 0; r < nr; r++)                                                                                   \
    q5k_row(nb, (const pb_block_q5_K *)((const uint8_t *)(w) + (size_t)r * w_row), a, a_row, (y) + r, ldy, NT)

void FN(pb_gemm_q5_K_q8_K_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / PB_QK_K;
    TILE_SWITCH(Q5K_BODY, w, a, y)
}

void FN(pb_vec_dot_q5_K_q8_K_)(int64_t n, float *s, const void *x, const void *y) {
    q5k_row(n / PB_QK_K, x, y, 0, s, 0, 1);
}

// --- Q6_K x Q8_K ----------------------------------------------------------------------------------------

#if defined(__AVX512BW__) && defined(__AVX512VL__)
/* AVX-512 build: 64 values (two 32-value groups, four 16-value scales) per 512-bit vector */
INLINE void q6k_row(int64_t nb, const pb_block_q6_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m512 acc[PB_GEMM_NT];
    PB_UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* per-half shift counts: groups g0/g1 take qh bits 0-1 / 2-3 (<<4, <<2), g2/g3 bits 4-5 / 6-7 (>>0, >>2) */
    const __m512i shl01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr23 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    /* word p*32 + 8k + l picks scale 4p + k */
    const __m512i ixq = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0,
                                         0, 0, 0, 0, 0, 0);
    for (int64_t b = 0; b < nb; b++) {
        PREFETCH_AHEAD(&w[b], (int)sizeof w[b]);
        const __m256i sc_all = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[b].scales));
        const __m512i scw = _mm512_castsi256_si512(sc_all);
        __m512i q[4], s16[4];
        PB_UNROLL for (int h = 0; h < 2; h++) {
            const __m512i l = _mm512_loadu_si512(w[b].ql + 64 * h);
            const __m512i hv = _mm512_broadcast_i64x4(loadu(w[b].qh + 32 * h));
            q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(hv, shl01), m30));
            q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                           _mm512_and_si512(_mm512_srlv_epi16(hv, shr23), m30));
        }
        PB_UNROLL for (int p = 0; p < 4; p++) s16[p] =
            _mm512_permutexvar_epi16(_mm512_add_epi16(ixq, _mm512_set1_epi16((short)(4 * p))), scw);
        const float d = h2f(w[b].d);
        PB_UNROLL for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            __m512i is = _mm512_madd_epi16(_mm512_maddubs_epi16(q[0], _mm512_loadu_si512(x->qs)), s16[0]);
            PB_UNROLL for (int p = 1; p < 4; p++) is =
                _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(q[p], _mm512_loadu_si512(x->qs + 64 * p)), s16[p]);
            __m256i off = _mm256_madd_epi16(loadu(x->bsums), sc_all);
            is = _mm512_sub_epi32(is, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * x->d), acc[t]);
        }
    }
    PB_UNROLL for (int t = 0; t < NT; t++) y[t * ldy] = _mm512_reduce_add_ps(acc[t]);
}
#else
INLINE void q6k_row(int64_t nb, const pb_block_q6_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m256 acc[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int64_t b = 0; b < nb; b++) {
        PREFETCH_AHEAD(&w[b], (int)sizeof w[b]);
        __m256i q[8], s16[8];
        PB_UNROLL for (int h = 0; h < 2; h++) { /* q6 + 32 in 0..63; group g of half h <-> activations 128h + 32g */
            const __m256i l0 = loadu(w[b].ql + 64 * h), l1 = loadu(w[b].ql + 64 * h + 32), hv = loadu(w[b].qh + 32 * h);
            q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hv, 4), m30));
            q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hv, 2), m30));
            q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hv, m30));
            q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(hv, 2), m30));
        }
        const int8_t *sc = w[b].scales;
        PB_UNROLL for (int k = 0; k < 8; k++) s16[k] =
            _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
        const __m256i sc_all = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        const float d = h2f(w[b].d);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            __m256i is = dot_us_sc(q[0], loadu(x->qs), s16[0]);
            PB_UNROLL for (int k = 1; k < 8; k++) is = acc_us_sc(is, q[k], loadu(x->qs + 32 * k), s16[k]);
            /* the -32 offset: sum_s sc_s * 32 * bsum_s */
            __m256i off = _mm256_madd_epi16(loadu(x->bsums), sc_all);
            is = _mm256_sub_epi32(is, _mm256_slli_epi32(off, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(d * x->d), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = hsum8(acc[t]);
}
#endif

#define Q6K_BODY(w, a, y, NT)                                                                                          \
    for (int64_t r = 0; r < nr; r++)                                                                                   \
    q6k_row(nb, (const pb_block_q6_K *)((const uint8_t *)(w) + (size_t)r * w_row), a, a_row, (y) + r, ldy, NT)

void FN(pb_gemm_q6_K_q8_K_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / PB_QK_K;
    TILE_SWITCH(Q6K_BODY, w, a, y)
}

void FN(pb_vec_dot_q6_K_q8_K_)(int64_t n, float *s, const void *x, const void *y) {
    q6k_row(n / PB_QK_K, x, y, 0, s, 0, 1);
}

// --- Q4_0 / Q8_0 x Q8_0 ---------------------------------------------------------------------------------

/* fp16 scale broadcast to 8 float lanes */
INLINE __m256 dvec(uint16_t h) { return _mm256_cvtph_ps(_mm_set1_epi16((short)h)); }

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
/* VNNI build: weights as signed bytes w (Q4_0: q - 8), activations made unsigned once per block and token
 * (a + 128, shared by R weight rows): sum w a = sum w (a + 128) - 128 sum w, where the -128 sum w lanes
 * are vpdpbusd's start value, computed once per weight block and shared by all tokens. Exact in int32. */
INLINE __m256i q40_w(const pb_block_q4_0 *b) {
    const __m128i v = _mm_loadu_si128((const __m128i *)b->qs), m4 = _mm_set1_epi8(0x0F);
    return _mm256_sub_epi8(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4)),
                           _mm256_set1_epi8(8));
}
INLINE __m256i q80_w(const pb_block_q8_0 *b) { return loadu(b->qs); }

#define Q0_ROWS(name, blk_t, wfn)                                                                                      \
    INLINE void name(int64_t nb, const uint8_t *w0, size_t w_row, int R, const void *a, size_t a_row, float *y,        \
                     int64_t ldy, int NT) {                                                                            \
        __m256 acc[4][PB_GEMM_NT];                                                                                     \
        PB_UNROLL for (int r = 0; r < R; r++) PB_UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();  \
        const __m256i bias = _mm256_set1_epi8((char)0x80);                                                             \
        for (int64_t b = 0; b < nb; b++) {                                                                             \
            __m256i wv[4], c0[4];                                                                                      \
            __m256 dw[4];                                                                                              \
            PB_UNROLL for (int r = 0; r < R; r++) {                                                                    \
                const blk_t *wb = (const blk_t *)(w0 + (size_t)r * w_row) + b;                                         \
                if ((b & 1) == 0) PREFETCH_AHEAD(wb, 64);                                                              \
                wv[r] = wfn(wb);                                                                                       \
                c0[r] = _mm256_sub_epi32(_mm256_setzero_si256(),                                                       \
                                         _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias, wv[r]));                    \
                dw[r] = dvec(wb->d);                                                                                   \
            }                                                                                                          \
            PB_UNROLL for (int t = 0; t < NT; t++) {                                                                   \
                const pb_block_q8_0 *x = Q80(a, a_row, t, b);                                                          \
                const __m256i xu = _mm256_xor_si256(loadu(x->qs), bias);                                               \
                const __m256 dx = dvec(x->d);                                                                          \
                PB_UNROLL for (int r = 0; r < R; r++) {                                                                \
                    __m256i is = _mm256_dpbusd_epi32(c0[r], xu, wv[r]);                                                \
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw[r], dx), acc[r][t]);          \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        PB_UNROLL for (int r = 0; r < R; r++) PB_UNROLL for (int t = 0; t < NT; t++) y[t * ldy + r] =                  \
            hsum8(acc[r][t]);                                                                                          \
    }

Q0_ROWS(q40_rows, pb_block_q4_0, q40_w)
Q0_ROWS(q80_rows, pb_block_q8_0, q80_w)

/* rows in groups of R (decode: 1, one weight stream; up to 4 tokens: 4; else 2: at most 16 accumulators) */
#define Q0_BODY(rows, w, a, y, NT)                                                                                     \
    {                                                                                                                  \
        const int R_ = (NT) == 1 ? 1 : (NT) <= 4 ? 4 : 2;                                                              \
        int64_t r = 0;                                                                                                 \
        for (; r + R_ <= nr; r += R_)                                                                                  \
            rows(nb, (const uint8_t *)(w) + (size_t)r * w_row, w_row, R_, a, a_row, (y) + r, ldy, NT);                 \
        for (; r < nr; r++) rows(nb, (const uint8_t *)(w) + (size_t)r * w_row, w_row, 1, a, a_row, (y) + r, ldy, NT);  \
    }

void FN(pb_gemm_q4_0_q8_0_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(Q0_BODY, q40_rows, w, a, y)
}
void FN(pb_vec_dot_q4_0_q8_0_)(int64_t n, float *s, const void *x, const void *y) {
    q40_rows(n / 32, x, 0, 1, y, 0, s, 0, 1);
}
void FN(pb_gemm_q8_0_q8_0_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(Q0_BODY, q80_rows, w, a, y)
}
void FN(pb_vec_dot_q8_0_q8_0_)(int64_t n, float *s, const void *x, const void *y) {
    q80_rows(n / 32, x, 0, 1, y, 0, s, 0, 1);
}
#else
/* Q4_0: q - 8 in -8..7 with the sign trick (|q-8| unsigned times a carrying q-8's sign), unpacked once per
 * block for all tokens; the scales multiply as fp16 -> fp32 vectors (no scalar round trip). */

INLINE void q40_row(int64_t nb, const pb_block_q4_0 *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m256 acc[PB_GEMM_NT];
    PB_UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < nb; b++) {
        if ((b & 1) == 0) PREFETCH_AHEAD(&w[b], 64);
        const __m128i v = _mm_loadu_si128((const __m128i *)w[b].qs);
        const __m256i q =
            _mm256_sub_epi8(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4)), eight);
        const __m256i u = _mm256_sign_epi8(q, q);
        const __m256 d = dvec(w[b].d);
        PB_UNROLL for (int t = 0; t < NT; t++) {
            const pb_block_q8_0 *x = Q80(a, a_row, t, b);
            __m256i is = dot_us(u, _mm256_sign_epi8(loadu(x->qs), q));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(d, dvec(x->d)), acc[t]);
        }
    }
    PB_UNROLL for (int t = 0; t < NT; t++) y[t * ldy] = hsum8(acc[t]);
}

#define Q40_BODY(w, a, y, NT)                                                                                          \
    for (int64_t r = 0; r < nr; r++)                                                                                   \
    q40_row(nb, (const pb_block_q4_0 *)((const uint8_t *)(w) + (size_t)r * w_row), a, a_row, (y) + r, ldy, NT)

void FN(pb_gemm_q4_0_q8_0_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(Q40_BODY, w, a, y)
}

void FN(pb_vec_dot_q4_0_q8_0_)(int64_t n, float *s, const void *x, const void *y) { q40_row(n / 32, x, y, 0, s, 0, 1); }

/* Q8_0: sign trick, |w| unsigned times a carrying w's sign (exact for |w| <= 127, as quantizers write). */
INLINE void q80_row(int64_t nb, const pb_block_q8_0 *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m256 acc[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if ((b & 1) == 0) PREFETCH_AHEAD(&w[b], 64);
        const __m256i wv = loadu(w[b].qs);
        const __m256i u = _mm256_sign_epi8(wv, wv);
        const __m256 d = dvec(w[b].d);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_0 *x = Q80(a, a_row, t, b);
            __m256i is = dot_us(u, _mm256_sign_epi8(loadu(x->qs), wv));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(d, dvec(x->d)), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = hsum8(acc[t]);
}

#define Q80_BODY(w, a, y, NT)                                                                                          \
    for (int64_t r = 0; r < nr; r++)                                                                                   \
    q80_row(nb, (const pb_block_q8_0 *)((const uint8_t *)(w) + (size_t)r * w_row), a, a_row, (y) + r, ldy, NT)

void FN(pb_gemm_q8_0_q8_0_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(Q80_BODY, w, a, y)
}

void FN(pb_vec_dot_q8_0_q8_0_)(int64_t n, float *s, const void *x, const void *y) { q80_row(n / 32, x, y, 0, s, 0, 1); }
#endif

// --- F16 / BF16 / F32 weights x F32 activations ---------------------------------------------------------

/* Float weights: the float accumulation order differs from ref.c (which sums in double); results agree to
 * float rounding. Tails (n % 8) are summed in scalar. */
void FN(pb_vec_dot_f16_f32_)(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *w = x;
    const float *v = y;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 =
            _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i))), _mm256_loadu_ps(v + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8))),
                               _mm256_loadu_ps(v + i + 8), acc1);
    }
    float sum = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += h2f(w[i]) * v[i];
    *s = sum;
}

void FN(pb_vec_dot_bf16_f32_)(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *w = x;
    const float *v = y;
    __m256 acc0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i e = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i)));
        acc0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(e, 16)), _mm256_loadu_ps(v + i), acc0);
    }
    float sum = hsum8(acc0);
    for (; i < n; i++) sum += pb_bf16_to_fp32(w[i]) * v[i];
    *s = sum;
}

void FN(pb_vec_dot_f32_f32_)(int64_t n, float *s, const void *x, const void *y) {
    const float *w = x, *v = y;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(v + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(v + i + 8), acc1);
    }
    float sum = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) sum += w[i] * v[i];
    *s = sum;
}

/* attention primitives over float rows (forward.c): dot and y += a*x */
float FN(pb_dot_f32_)(const float *a, const float *b, int64_t n) {
    float s;
    FN(pb_vec_dot_f32_f32_)(n, &s, a, b);
    return s;
}

void FN(pb_mad_f32_)(float *y, const float *x, float a, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* exp(z) for z clamped to [-87, 88]: Cody-Waite reduction by ln2, degree-6 polynomial on |r| <= ln2/2
 * (relative error ~2 ulp), scaled by 2^n through the exponent bits. */
INLINE __m256 exp256(__m256 z) {
    z = _mm256_min_ps(_mm256_max_ps(z, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(z, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), z);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* gate[i] = gelu_tanh(gate[i]) * up[i] (Gemma's GeGLU), with 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)),
 * u = sqrt(2/pi) (x + 0.044715 x^3). Agrees with tensor/ops.c's tanhf form to a few float ulps. */
void FN(pb_geglu_)(float *gate, const float *up, int64_t n) {
    const __m256 k2 = _mm256_set1_ps(-2.0f * 0.7978845608028654f), c = _mm256_set1_ps(0.044715f),
                 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(gate + i);
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        __m256 z = _mm256_mul_ps(k2, _mm256_fmadd_ps(c, x3, x));
        __m256 g = _mm256_div_ps(x, _mm256_add_ps(one, exp256(z)));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++)
        gate[i] = gate[i] /
                  (1.0f + expf(-2.0f * 0.7978845608028654f * (gate[i] + 0.044715f * gate[i] * gate[i] * gate[i]))) *
                  up[i];
}

/* Streaming read of n bytes (n % 128 == 0 read, the rest ignored) for the benches' bandwidth roofline:
 * several independent vector loads in flight, no stores. Returns a checksum so it cannot be elided. */
uint64_t FN(pb_stream_read_)(const void *p, size_t n) {
    const uint8_t *b = p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, loadu(b + i));
        a1 = _mm256_add_epi64(a1, loadu(b + i + 32));
        a2 = _mm256_add_epi64(a2, loadu(b + i + 64));
        a3 = _mm256_add_epi64(a3, loadu(b + i + 96));
    }
    __m256i t = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t o[4];
    _mm256_storeu_si256((__m256i *)o, t);
    return o[0] + o[1] + o[2] + o[3];
}

/* fp16 -> fp32 is exact, so this replaces the table's scalar to_float bit for bit (KV cache reads). */
void FN(pb_f16_to_f32_)(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++) dst[i] = h2f(h[i]);
}

// --- activation quantizers (bit-identical to the reference ones in tensor/, so they can replace them) ---

/* lanes of x*0: NaN exactly where x is inf or NaN; OR-ed over a block, any set exponent bit means
 * "not all finite" and the block goes to the reference quantizer (which defines those cases). */
INLINE bool all_finite(__m256 nonfin) {
    return _mm256_testz_si256(_mm256_castps_si256(nonfin), _mm256_castps_si256(_mm256_set1_ps(INFINITY)));
}

INLINE __m256 absps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

INLINE float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 32 int32 (4 vectors, element order) -> 32 int8, saturating (callers clamp to +-127 first) */
INLINE __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i abcd = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

INLINE __m256i clamp127(__m256i v) {
    return _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
}

/* Q8_K as pb_quant_q8_K: max = first value of largest |x|, iscale = -127/max, q = nearest-even(iscale*x)
 * (vcvtps2dq under the default rounding mode is round-half-even, as the reference's 1.5*2^23 trick). */
void FN(pb_quant_q8_K_)(const float *x, void *dst, int64_t n) {
    pb_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / PB_QK_K; i++, x += PB_QK_K) {
        __m256 mx = _mm256_setzero_ps(), nf = _mm256_setzero_ps();
        for (int j = 0; j < PB_QK_K; j += 8) {
            __m256 v = _mm256_loadu_ps(x + j);
            mx = _mm256_max_ps(mx, absps(v));
            nf = _mm256_or_ps(nf, _mm256_mul_ps(v, _mm256_setzero_ps()));
        }
        if (!all_finite(nf)) {
            pb_quant_q8_K(x, &y[i], PB_QK_K);
            continue;
        }
        const float amax = hmax8(mx);
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0;
        for (int j = 0; j < PB_QK_K; j += 8) {
            int m = _mm256_movemask_ps(_mm256_cmp_ps(absps(_mm256_loadu_ps(x + j)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (m) {
                first = j + __builtin_ctz((unsigned)m);
                break;
            }
        }
        const float iscale = -127.0f / x[first];
        const __m256 is = _mm256_set1_ps(iscale);
        for (int j = 0; j < PB_QK_K; j += 32) {
            __m256i q[4];
            PB_UNROLL for (int k = 0; k < 4; k++) q[k] =
                clamp127(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + j + 8 * k))));
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), pack32(q[0], q[1], q[2], q[3]));
        }
        for (int g = 0; g < 16; g++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(y[i].qs + 16 * g));
            __m128i s = _mm_sad_epu8(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)), _mm_setzero_si128());
            y[i].bsums[g] = (int16_t)(_mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128);
        }
        y[i].d = 1.0f / iscale;
    }
}

/* Q8_0 as pb_quant_q8_0: d = amax/127, id = 1/d, q = roundf(x*id) (half away from zero, done exactly:
 * truncate, then step away from zero where the exact remainder is >= 0.5). */
void FN(pb_quant_q8_0_)(const float *x, void *dst, int64_t n) {
    pb_block_q8_0 *y = dst;
    const __m256 half = _mm256_set1_ps(0.5f), sgn = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        __m256 v[4], mx = _mm256_setzero_ps(), nf = _mm256_setzero_ps();
        PB_UNROLL for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            mx = _mm256_max_ps(mx, absps(v[k]));
            nf = _mm256_or_ps(nf, _mm256_mul_ps(v[k], _mm256_setzero_ps()));
        }
        if (!all_finite(nf)) {
            pb_quant_q8_0(x, &y[i], 32);
            continue;
        }
        const float d = hmax8(mx) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pb_fp32_to_fp16(d);
        __m256i q[4];
        PB_UNROLL for (int k = 0; k < 4; k++) {
            __m256 t = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
            __m256 tr = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            __m256 up = _mm256_cmp_ps(absps(_mm256_sub_ps(t, tr)), half, _CMP_GE_OQ);
            __m256 step = _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(t, sgn)));
            q[k] = clamp127(_mm256_cvttps_epi32(_mm256_add_ps(tr, step)));
        }
        _mm256_storeu_si256((__m256i *)y[i].qs, pack32(q[0], q[1], q[2], q[3]));
    }
}

// --- the table ------------------------------------------------------------------------------------------

/* Overrides the ref entries of t with this ISA's kernels; gemm[type] gets the tile kernels. */
void FN(pb_kernels_fill_)(pb_type_traits *t, int n, pb_gemm_fn *gemm) {
    PB_ASSERT(n >= PB_TYPE_COUNT);
    t[PB_TYPE_F32].vec_dot = FN(pb_vec_dot_f32_f32_);
    t[PB_TYPE_F16].vec_dot = FN(pb_vec_dot_f16_f32_);
    t[PB_TYPE_BF16].vec_dot = FN(pb_vec_dot_bf16_f32_);
    t[PB_TYPE_F16].to_float = FN(pb_f16_to_f32_);
    t[PB_TYPE_Q4_0].vec_dot = FN(pb_vec_dot_q4_0_q8_0_);
    t[PB_TYPE_Q8_0].vec_dot = FN(pb_vec_dot_q8_0_q8_0_);
    t[PB_TYPE_Q4_K].vec_dot = FN(pb_vec_dot_q4_K_q8_K_);
    t[PB_TYPE_Q5_K].vec_dot = FN(pb_vec_dot_q5_K_q8_K_);
    t[PB_TYPE_Q6_K].vec_dot = FN(pb_vec_dot_q6_K_q8_K_);
    t[PB_TYPE_Q8_0].from_float = FN(pb_quant_q8_0_);
    t[PB_TYPE_Q8_K].from_float = FN(pb_quant_q8_K_);
    gemm[PB_TYPE_Q4_0] = FN(pb_gemm_q4_0_q8_0_);
    gemm[PB_TYPE_Q8_0] = FN(pb_gemm_q8_0_q8_0_);
    gemm[PB_TYPE_Q4_K] = FN(pb_gemm_q4_K_q8_K_);
    gemm[PB_TYPE_Q5_K] = FN(pb_gemm_q5_K_q8_K_);
    gemm[PB_TYPE_Q6_K] = FN(pb_gemm_q6_K_q8_K_);
}
