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
#include "kernels/matmul.h"
#include "tensor/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define CAT2(a, b) a##b
#define CAT(a, b)  CAT2(a, b)
#define FN(name)   CAT(name, X86_SFX)
#define INLINE     static inline __attribute__((always_inline))
#define PB_UNROLL  _Pragma("GCC unroll 16")
/* decode streams weights once: ask for the block a few KiB ahead so several misses are in flight */
#ifndef PF_ROW_BYTES
#define PF_ROW_BYTES 4096
#endif
#define PREFETCH_AHEAD(p, bytes)                                                                                       \
    do {                                                                                                               \
        const char *pf_ = (const char *)(p) + PF_ROW_BYTES;                                                            \
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

#if defined(__AVX512BW__) && defined(__AVX512VL__)
/* k4_scales with vector ops: the 12 scale bytes (read as 16: the block goes on) -> scales in bytes 0..7, mins
 * in bytes 8..15. A gathers (b0-3, b8-11, b4-7, b8-11), B the bytes whose top 2 bits are the high bits
 * (b0-3 under the scales' high half, b4-7 under the mins'); the mins' high half takes A's high nibbles. */
INLINE __m128i k4_scmn(const uint8_t *q) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)q);
    const __m128i A = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i B = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i hi2 = _mm_and_si128(_mm_srli_epi16(B, 2), _mm_set1_epi8(0x30));
    const __m128i X = _mm_blend_epi32(A, _mm_srli_epi16(A, 4), 0x8);
    const __m128i mask = _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f);
    return _mm_or_si128(_mm_and_si128(X, mask), hi2);
}

/* AVX-512 build: 64 values (sub-blocks 2j and 2j+1) per 512-bit vector: the 32 bytes of chunk j broadcast to
 * both halves, low nibbles kept in the low half and high nibbles in the high half; scales as 16-bit words
 * picked by a byte shuffle; two independent int32 chains per block (exact, so the order does not matter). */
INLINE void q4k_row(int64_t nb, const pb_block_q4_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m512 acc[PB_GEMM_NT];
    PB_UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    /* mins as 16 words, m_j twice (madd with the 16 bsums), from bytes 8..15 of k4_scmn's vector */
    const __m256i mins_ctl = _mm256_setr_epi8(8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1, 12, -1, 12,
                                              -1, 13, -1, 13, -1, 14, -1, 14, -1, 15, -1, 15, -1);
    __m512i ctl[4]; /* word = scale byte 2j (low half) or 2j + 1 (high half), zero-extended */
    PB_UNROLL for (int j = 0; j < 4; j++) ctl[j] =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(0x8000 | (2 * j)))),
                           _mm256_set1_epi16((short)(0x8000 | (2 * j + 1))), 1);
    for (int64_t b = 0; b < nb; b++) {
        PREFETCH_AHEAD(&w[b], (int)sizeof w[b]);
        const __m128i scmn = k4_scmn(w[b].scales);
        const __m512i scb = _mm512_broadcast_i32x4(scmn);
        __m512i q[4], s16[4];
        PB_UNROLL for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_broadcast_i64x4(loadu(w[b].qs + 32 * j));
            q[j] = _mm512_and_si512(_mm512_srlv_epi16(v, shr), m4);
            s16[j] = _mm512_shuffle_epi8(scb, ctl[j]);
        }
        const __m256i mins = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(scmn), mins_ctl);
        const __m512 dw = _mm512_set1_ps(h2f(w[b].d)), dmw = _mm512_set1_ps(h2f(w[b].dmin));
        PB_UNROLL for (int t = 0; t < NT; t++) { /* acc += d_a * (d_w * sum - dmin_w * mins term) */
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            __m512i i0 = _mm512_madd_epi16(_mm512_maddubs_epi16(q[0], _mm512_loadu_si512(x->qs)), s16[0]);
            __m512i i1 = _mm512_madd_epi16(_mm512_maddubs_epi16(q[1], _mm512_loadu_si512(x->qs + 64)), s16[1]);
            i0 = _mm512_dpwssd_epi32(i0, _mm512_maddubs_epi16(q[2], _mm512_loadu_si512(x->qs + 128)), s16[2]);
            i1 = _mm512_dpwssd_epi32(i1, _mm512_maddubs_epi16(q[3], _mm512_loadu_si512(x->qs + 192)), s16[3]);
            const __m256i ms = _mm256_madd_epi16(loadu(x->bsums), mins);
            const __m512 v = _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)), dw,
                                             _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(ms)), dmw));
            acc[t] = _mm512_fmadd_ps(v, _mm512_set1_ps(x->d), acc[t]);
        }
    }
    PB_UNROLL for (int t = 0; t < NT; t++) y[t * ldy] = _mm512_reduce_add_ps(acc[t]);
}
#else
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
#endif

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

// --- Q4_1 / Q5_0 / Q5_1 x Q8_0 --------------------------------------------------------------------------

/* The three are unpacked to unsigned bytes u (Q4_1: 0..15, Q5_0 / Q5_1: 0..31), so one u8 x s8 dot serves
 * all: Q4_1 / Q5_1 add m * d_a * sum(a) (the activation form of ref.c), Q5_0 takes sum(u a) - 16 sum(a),
 * exact in int32. sum(a) is one more dot per token and block, shared by the R weight rows of a group. The
 * AVX-512 build has a Q5_0 kernel of its own (below). */
enum { Q1_Q41, Q1_Q50, Q1_Q51 };

/* 32 nibbles in element order: low nibbles are elements 0..15, high nibbles 16..31 */
INLINE __m256i nib32(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
}

/* 0x10 in byte e where bit e of the little-endian u32 at qh is set (the 5th bit of Q5_0 / Q5_1) */
#if defined(__AVX512BW__) && defined(__AVX512VL__)
INLINE __m256i hbit32(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    return _mm256_maskz_mov_epi8(h, _mm256_set1_epi8(0x10));
}
#else
INLINE __m256i hbit32(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i sel = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}
#endif

/* the fp16 pair d, m (adjacent in Q4_1 / Q5_1 blocks) converted at once and broadcast to 8 lanes each */
INLINE void dm_vec(const uint16_t *dm, __m256 *d, __m256 *m) {
    uint32_t v;
    memcpy(&v, dm, 4);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)v));
    *d = _mm256_broadcastss_ps(f), *m = _mm256_broadcastss_ps(_mm_movehdup_ps(f));
}

/* block b of the row at w (kind: Q1_*): its quants as unsigned bytes, its d and (Q4_1 / Q5_1) m */
INLINE __m256i q1_unpack(const uint8_t *w, int64_t b, int kind, __m256 *d, __m256 *m) {
    if (kind == Q1_Q41) {
        const pb_block_q4_1 *x = (const pb_block_q4_1 *)w + b;
        dm_vec(&x->d, d, m);
        return nib32(x->qs);
    }
    if (kind == Q1_Q50) {
        const pb_block_q5_0 *x = (const pb_block_q5_0 *)w + b;
        *d = dvec(x->d), *m = _mm256_setzero_ps();
        return _mm256_or_si256(nib32(x->qs), hbit32(x->qh));
    }
    const pb_block_q5_1 *x = (const pb_block_q5_1 *)w + b;
    dm_vec(&x->d, d, m);
    return _mm256_or_si256(nib32(x->qs), hbit32(x->qh));
}

/* R weight rows (R <= 4, w_row bytes apart) x NT tokens. Each row's float steps are the same whatever R is,
 * so a tile equals the vec_dot (R = NT = 1) bit for bit. */
INLINE void q1_rows(int64_t nb, const uint8_t *w0, size_t w_row, int R, int kind, const void *a, size_t a_row, float *y,
                    int64_t ldy, int NT) {
    __m256 acc[4][PB_GEMM_NT];
    PB_UNROLL for (int r = 0; r < R; r++) PB_UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi8(1);
    const size_t bsz = kind == Q1_Q41   ? sizeof(pb_block_q4_1)
                       : kind == Q1_Q50 ? sizeof(pb_block_q5_0)
                                        : sizeof(pb_block_q5_1);
    for (int64_t b = 0; b < nb; b++) {
        __m256i wu[4];
        __m256 dw[4], mw[4];
        PB_UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *wr = w0 + (size_t)r * w_row;
            if ((b & 1) == 0) PREFETCH_AHEAD(wr + (size_t)b * bsz, 64);
            wu[r] = q1_unpack(wr, b, kind, &dw[r], &mw[r]);
        }
        PB_UNROLL for (int t = 0; t < NT; t++) {
            const pb_block_q8_0 *x = Q80(a, a_row, t, b);
            const __m256i xv = loadu(x->qs);
            const __m256 dx = dvec(x->d);
            const __m256i sa = dot_us(ones, xv);
            const __m256 sad = _mm256_mul_ps(_mm256_cvtepi32_ps(sa), dx); /* d_a sum(a), per lane */
            PB_UNROLL for (int r = 0; r < R; r++) {
                __m256i is = dot_us(wu[r], xv);
                if (kind == Q1_Q50) is = _mm256_sub_epi32(is, _mm256_slli_epi32(sa, 4));
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw[r], dx), acc[r][t]);
                if (kind != Q1_Q50) acc[r][t] = _mm256_fmadd_ps(sad, mw[r], acc[r][t]);
            }
        }
    }
    PB_UNROLL for (int r = 0; r < R; r++) PB_UNROLL for (int t = 0; t < NT; t++) y[t * ldy + r] = hsum8(acc[r][t]);
}

/* rows in groups of R: decode 1 (one weight stream), else 4 (sum(a) and the activation loads shared by more
 * rows; measured faster than 2 even where the accumulators no longer fit the 16 registers of AVX2) */
#define Q1_R(NT) ((NT) == 1 ? 1 : 4)

#define Q1_BODY(kind, w, a, y, NT)                                                                                     \
    {                                                                                                                  \
        const int R_ = Q1_R(NT);                                                                                       \
        int64_t r = 0;                                                                                                 \
        for (; r + R_ <= nr; r += R_)                                                                                  \
            q1_rows(nb, (const uint8_t *)(w) + (size_t)r * w_row, w_row, R_, kind, a, a_row, (y) + r, ldy, NT);        \
        for (; r < nr; r++)                                                                                            \
            q1_rows(nb, (const uint8_t *)(w) + (size_t)r * w_row, w_row, 1, kind, a, a_row, (y) + r, ldy, NT);         \
    }

void FN(pb_gemm_q4_1_q8_0_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(Q1_BODY, Q1_Q41, w, a, y)
}
void FN(pb_vec_dot_q4_1_q8_0_)(int64_t n, float *s, const void *x, const void *y) {
    q1_rows(n / 32, x, 0, 1, Q1_Q41, y, 0, s, 0, 1);
}
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
/* Q5_0 with AVX-512 VNNI (the main type of Gemma 3 1B's Q4_K_M files): two blocks per 512-bit vector, weights
 * as signed bytes u - 16, activations made unsigned once per token and pair and shared by the R rows (the bias
 * trick of Q0_ROWS). A lone last block runs with a zero second half. */

/* fp16 scales of two blocks, 8 lanes each */
INLINE __m512 d2vec(uint16_t d0, uint16_t d1) {
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)d0 | (uint32_t)d1 << 16)));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(f));
}

/* weights of blocks w[0] and (two) w[1] in element order, u - 16; zero in the second half when !two */
INLINE __m512i q50z_w(const pb_block_q5_0 *w, bool two) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m128i v1 = two ? _mm_loadu_si128((const __m128i *)w[1].qs) : _mm_setzero_si128();
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)w[0].qs)), v1, 1);
    const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    /* [lo 0 | lo 1] and [hi 0 | hi 1] -> lo 0, hi 0, lo 1, hi 1 */
    const __m512i z = _mm512_permutex2var_epi64(_mm512_castsi256_si512(lo), _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0),
                                                _mm512_castsi256_si512(hi));
    uint32_t h0, h1 = 0;
    memcpy(&h0, w[0].qh, 4);
    if (two) memcpy(&h1, w[1].qh, 4);
    const __m512i hb = _mm512_maskz_mov_epi8(_cvtu64_mask64((uint64_t)h0 | (uint64_t)h1 << 32), _mm512_set1_epi8(0x10));
    const __m512i q = _mm512_sub_epi8(_mm512_or_si512(z, hb), _mm512_set1_epi8(16));
    return two ? q : _mm512_maskz_mov_epi8((__mmask64)0xFFFFFFFFu, q);
}

/* blocks b (and b + 1 when two) of R rows x NT tokens into acc */
INLINE void q50z_step(int64_t b, bool two, const uint8_t *w0, size_t w_row, int R, const void *a, size_t a_row,
                      __m512 acc[4][PB_GEMM_NT], int NT) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512i wv[4], c0[4];
    __m512 dw[4];
    PB_UNROLL for (int r = 0; r < R; r++) {
        const pb_block_q5_0 *wb = (const pb_block_q5_0 *)(w0 + (size_t)r * w_row) + b;
        PREFETCH_AHEAD(wb, 64);
        wv[r] = q50z_w(wb, two);
        c0[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wv[r]));
        dw[r] = d2vec(wb[0].d, two ? wb[1].d : 0);
    }
    PB_UNROLL for (int t = 0; t < NT; t++) {
        const pb_block_q8_0 *x = Q80(a, a_row, t, b);
        const __m256i x1 = two ? loadu(x[1].qs) : _mm256_setzero_si256();
        const __m512i xu = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(loadu(x[0].qs)), x1, 1), bias);
        const __m512 dx = d2vec(x[0].d, two ? x[1].d : 0);
        PB_UNROLL for (int r = 0; r < R; r++) {
            const __m512i is = _mm512_dpbusd_epi32(c0[r], xu, wv[r]);
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw[r], dx), acc[r][t]);
        }
    }
}

INLINE void q50_rows(int64_t nb, const uint8_t *w0, size_t w_row, int R, const void *a, size_t a_row, float *y,
                     int64_t ldy, int NT) {
    __m512 acc[4][PB_GEMM_NT];
    PB_UNROLL for (int r = 0; r < R; r++) PB_UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) q50z_step(b, true, w0, w_row, R, a, a_row, acc, NT);
    if (b < nb) q50z_step(b, false, w0, w_row, R, a, a_row, acc, NT);
    PB_UNROLL for (int r = 0; r < R; r++) PB_UNROLL for (int t = 0; t < NT; t++) y[t * ldy + r] =
        _mm512_reduce_add_ps(acc[r][t]);
}

void FN(pb_gemm_q5_0_q8_0_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(Q0_BODY, q50_rows, w, a, y)
}
void FN(pb_vec_dot_q5_0_q8_0_)(int64_t n, float *s, const void *x, const void *y) {
    q50_rows(n / 32, x, 0, 1, y, 0, s, 0, 1);
}
#else
void FN(pb_gemm_q5_0_q8_0_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(Q1_BODY, Q1_Q50, w, a, y)
}
void FN(pb_vec_dot_q5_0_q8_0_)(int64_t n, float *s, const void *x, const void *y) {
    q1_rows(n / 32, x, 0, 1, Q1_Q50, y, 0, s, 0, 1);
}
#endif
void FN(pb_gemm_q5_1_q8_0_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    TILE_SWITCH(Q1_BODY, Q1_Q51, w, a, y)
}
void FN(pb_vec_dot_q5_1_q8_0_)(int64_t n, float *s, const void *x, const void *y) {
    q1_rows(n / 32, x, 0, 1, Q1_Q51, y, 0, s, 0, 1);
}

// --- Q2_K / Q3_K x Q8_K ---------------------------------------------------------------------------------

/* Sixteen 8-bit scales (one per 16 values) as the 16-bit multipliers of dot_us_sc: s16[k] holds scale 2k in
 * the low 128-bit lane and 2k+1 in the high one, matching a 32-value vector of activations 32k..32k+31. */
INLINE void pair_scales(__m128i sc8, bool is_signed, __m256i s16[8]) {
    const __m256i bb = _mm256_broadcastsi128_si256(sc8);
    /* words 0xII80: byte 0x80 shuffles to zero, byte II picks scale II into the word's high byte */
    __m256i ctl = _mm256_set_m128i(_mm_set1_epi16(0x0180), _mm_set1_epi16(0x0080));
    PB_UNROLL for (int k = 0; k < 8; k++) {
        const __m256i v = _mm256_shuffle_epi8(bb, ctl);
        s16[k] = is_signed ? _mm256_srai_epi16(v, 8) : _mm256_srli_epi16(v, 8);
        ctl = _mm256_add_epi16(ctl, _mm256_set1_epi16(0x0200));
    }
}

/* the sixteen 6-bit Q3_K scales minus 32, as int8 (layout: quant-formats.md §2, Q3_K) */
INLINE __m128i q3k_scales(const uint8_t *s) {
    uint32_t a0, a1, a2;
    memcpy(&a0, s, 4);
    memcpy(&a1, s + 4, 4);
    memcpy(&a2, s + 8, 4);
    const uint32_t lo = 0x0f0f0f0fu, hi = 0x03030303u;
    const uint32_t s0 = (a0 & lo) | ((a2 & hi) << 4), s1 = (a1 & lo) | (((a2 >> 2) & hi) << 4);
    const uint32_t s2 = ((a0 >> 4) & lo) | (((a2 >> 4) & hi) << 4), s3 = ((a1 >> 4) & lo) | (((a2 >> 6) & hi) << 4);
    return _mm_sub_epi8(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0), _mm_set1_epi8(32));
}

#if defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
/* AVX-512 build: 64 values (two 32-value groups, four 16-value scales) per 512-bit vector, as q6k_row.
 * Vector p holds the 32-value groups j = 2p (low half) and 2p + 1 (high half), activations 64p..64p+63. */

/* the scales of vector p per word of its maddubs result: word 8k + l (k < 4) sums activations of the 16-value
 * group 4p + k. scw: the 16 scales as int16 in its low 256 bits. */
INLINE __m512i k23_scale_words(__m512i scw, int p) {
    const __m512i ixq = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0,
                                         0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(ixq, _mm512_set1_epi16((short)(4 * p))), scw);
}

/* 2-bit fields of qs[32h..32h+31] for vectors p = 2h (groups 0, 1: shifts 0, 2) and 2h + 1 (shifts 4, 6) */
INLINE void k23_low2(const uint8_t *qs, __m512i q[4]) {
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i sh0 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    const __m512i sh1 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    PB_UNROLL for (int h = 0; h < 2; h++) {
        const __m512i v = _mm512_broadcast_i64x4(loadu(qs + 32 * h));
        q[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(v, sh0), m3);
        q[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(v, sh1), m3);
    }
}

/* sum over the block of scale_s * q * a, 16 int32 lanes */
INLINE __m512i k23_dot(const __m512i q[4], const __m512i s16[4], const int8_t *xq) {
    __m512i is = _mm512_madd_epi16(_mm512_maddubs_epi16(q[0], _mm512_loadu_si512(xq)), s16[0]);
    PB_UNROLL for (int p = 1; p < 4; p++) is =
        _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(q[p], _mm512_loadu_si512(xq + 64 * p)), s16[p]);
    return is;
}

INLINE void q2k_row(int64_t nb, const pb_block_q2_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m512 acc[PB_GEMM_NT];
    PB_UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        PREFETCH_AHEAD(&w[b], (int)sizeof w[b]);
        __m512i q[4], s16[4];
        k23_low2(w[b].qs, q);
        const __m128i sb = _mm_loadu_si128((const __m128i *)w[b].scales);
        const __m512i scw = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sb, m4)));
        PB_UNROLL for (int p = 0; p < 4; p++) s16[p] = k23_scale_words(scw, p);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), m4));
        const float d = h2f(w[b].d), dmin = h2f(w[b].dmin);
        PB_UNROLL for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            const __m512i is = k23_dot(q, s16, x->qs);
            const __m256i ms = _mm256_madd_epi16(loadu(x->bsums), mins);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * x->d), acc[t]);
            acc[t] =
                _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(ms)), _mm512_set1_ps(dmin * x->d), acc[t]);
        }
    }
    PB_UNROLL for (int t = 0; t < NT; t++) y[t * ldy] = _mm512_reduce_add_ps(acc[t]);
}

INLINE void q3k_row(int64_t nb, const pb_block_q3_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m512 acc[PB_GEMM_NT];
    PB_UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    const __m512i four = _mm512_set1_epi8(4);
    for (int64_t b = 0; b < nb; b++) {
        PREFETCH_AHEAD(&w[b], (int)sizeof w[b]);
        __m512i q[4], s16[4];
        k23_low2(w[b].qs, q);
        /* + 4 where the high bit is set: bit j of hmask[l] for group j = 2p (low half) / 2p + 1 (high half) */
        const __m512i hm = _mm512_broadcast_i64x4(loadu(w[b].hmask));
        PB_UNROLL for (int p = 0; p < 4; p++) {
            const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * p))),
                                                   _mm256_set1_epi8((char)(1 << (2 * p + 1))), 1);
            q[p] = _mm512_mask_add_epi8(q[p], _mm512_test_epi8_mask(hm, bit), q[p], four);
        }
        const __m128i sc8 = q3k_scales(w[b].scales);
        const __m256i sc_all = _mm256_cvtepi8_epi16(sc8);
        PB_UNROLL for (int p = 0; p < 4; p++) s16[p] = k23_scale_words(_mm512_castsi256_si512(sc_all), p);
        const float d = h2f(w[b].d);
        PB_UNROLL for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            __m512i is = k23_dot(q, s16, x->qs);
            const __m256i off = _mm256_madd_epi16(loadu(x->bsums), sc_all);
            is = _mm512_sub_epi32(is, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 2)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * x->d), acc[t]);
        }
    }
    PB_UNROLL for (int t = 0; t < NT; t++) y[t * ldy] = _mm512_reduce_add_ps(acc[t]);
}
#else
/* Q2_K: q in 0..3; vector j = 4h + g is bits 2g..2g+1 of qs[32h..32h+31] = activations 32j..32j+31. The mins
 * (high nibbles) meet the 16 bsums in one madd. */
INLINE void q2k_row(int64_t nb, const pb_block_q2_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m256 acc[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        PREFETCH_AHEAD(&w[b], (int)sizeof w[b]);
        __m256i q[8], s16[8];
        PB_UNROLL for (int h = 0; h < 2; h++) {
            const __m256i v = loadu(w[b].qs + 32 * h);
            PB_UNROLL for (int g = 0; g < 4; g++) q[4 * h + g] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * g), m3);
        }
        const __m128i sb = _mm_loadu_si128((const __m128i *)w[b].scales);
        pair_scales(_mm_and_si128(sb, m4), false, s16);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), m4));
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

/* Q3_K: u = low2 + 4 hbit in 0..7 (the quant plus 4), the -4 taken out as sum_s sc_s * 4 * bsum_s; vector
 * j (activations 32j..) has its high bits in bit j of hmask[0..31]. */
INLINE void q3k_row(int64_t nb, const pb_block_q3_K *w, const void *a, size_t a_row, float *y, int64_t ldy, int NT) {
    __m256 acc[PB_GEMM_NT];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    for (int64_t b = 0; b < nb; b++) {
        PREFETCH_AHEAD(&w[b], (int)sizeof w[b]);
        __m256i q[8], s16[8];
        const __m256i hm = loadu(w[b].hmask);
        PB_UNROLL for (int h = 0; h < 2; h++) {
            const __m256i v = loadu(w[b].qs + 32 * h);
            PB_UNROLL for (int g = 0; g < 4; g++) {
                const int j = 4 * h + g; /* bit j of each hmask byte moved to bit 2 */
                const __m256i hb = j >= 2 ? _mm256_srli_epi16(hm, j - 2) : _mm256_slli_epi16(hm, 2 - j);
                q[j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 2 * g), m3), _mm256_and_si256(hb, four));
            }
        }
        const __m128i sc8 = q3k_scales(w[b].scales);
        pair_scales(sc8, true, s16);
        const __m256i sc_all = _mm256_cvtepi8_epi16(sc8);
        const float d = h2f(w[b].d);
        for (int t = 0; t < NT; t++) {
            const pb_block_q8_K *x = Q8K(a, a_row, t, b);
            __m256i is = dot_us_sc(q[0], loadu(x->qs), s16[0]);
            PB_UNROLL for (int j = 1; j < 8; j++) is = acc_us_sc(is, q[j], loadu(x->qs + 32 * j), s16[j]);
            __m256i off = _mm256_madd_epi16(loadu(x->bsums), sc_all);
            is = _mm256_sub_epi32(is, _mm256_slli_epi32(off, 2));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(d * x->d), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) y[t * ldy] = hsum8(acc[t]);
}

#endif

#define Q2K_BODY(w, a, y, NT)                                                                                          \
    for (int64_t r = 0; r < nr; r++)                                                                                   \
    q2k_row(nb, (const pb_block_q2_K *)((const uint8_t *)(w) + (size_t)r * w_row), a, a_row, (y) + r, ldy, NT)

void FN(pb_gemm_q2_K_q8_K_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / PB_QK_K;
    TILE_SWITCH(Q2K_BODY, w, a, y)
}

void FN(pb_vec_dot_q2_K_q8_K_)(int64_t n, float *s, const void *x, const void *y) {
    q2k_row(n / PB_QK_K, x, y, 0, s, 0, 1);
}

#define Q3K_BODY(w, a, y, NT)                                                                                          \
    for (int64_t r = 0; r < nr; r++)                                                                                   \
    q3k_row(nb, (const pb_block_q3_K *)((const uint8_t *)(w) + (size_t)r * w_row), a, a_row, (y) + r, ldy, NT)

void FN(pb_gemm_q3_K_q8_K_)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                            float *y, int64_t ldy) {
    const int64_t nb = n / PB_QK_K;
    TILE_SWITCH(Q3K_BODY, w, a, y)
}

void FN(pb_vec_dot_q3_K_q8_K_)(int64_t n, float *s, const void *x, const void *y) {
    q3k_row(n / PB_QK_K, x, y, 0, s, 0, 1);
}

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

/* Rows of floats as they are, or of fp16 converted exactly: the float dot / mad below and their fp16
 * versions share one body, so both give the same sums bit for bit. */
INLINE __m256 ld8_f32(const float *p, int64_t i) { return _mm256_loadu_ps(p + i); }
INLINE __m256 ld8_f16(const uint16_t *p, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + i)));
}
INLINE float at_f32(const float *p, int64_t i) { return p[i]; }
INLINE float at_f16(const uint16_t *p, int64_t i) { return h2f(p[i]); }
#if defined(__AVX512F__)
INLINE __m512 ld16_f32(const float *p, int64_t i) { return _mm512_loadu_ps(p + i); }
INLINE __m512 ld16_f16(const uint16_t *p, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + i)));
}
/* Sum of 16 lanes as ((v[8+i] + v[i]) for i < 8, then the upper 4 + lower 4, then lanes 0+2 and 1+3, then
 * those two): the order GCC's _mm512_reduce_add_ps uses, spelled out so that it does not depend on the
 * compiler and so that dot_tile_sum8 below can reduce 8 rows at once in the same order. */
INLINE float hsum16(__m512 v) {
    const __m256 t3 =
        _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), _mm512_castps512_ps256(v));
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_permute_ps(t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_movehdup_ps(t8));
}
/* AVX-512 build: 32 values per step in two 16-lane accumulators (attention rows of 256: 8 steps) */
#define ROW_DOT(w, v, K, n, sum)                                                                                       \
    float sum;                                                                                                         \
    int64_t i_ = 0;                                                                                                    \
    {                                                                                                                  \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();                                                 \
        for (; i_ + 32 <= (n); i_ += 32) {                                                                             \
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps((w) + i_), ld16_##K((v), i_), acc0);                                \
            acc1 = _mm512_fmadd_ps(_mm512_loadu_ps((w) + i_ + 16), ld16_##K((v), i_ + 16), acc1);                      \
        }                                                                                                              \
        sum = hsum16(_mm512_add_ps(acc0, acc1));                                                                       \
    }                                                                                                                  \
    for (; i_ < (n); i_++) sum += (w)[i_] * at_##K((v), i_);
#else
#define ROW_DOT(w, v, K, n, sum)                                                                                       \
    float sum;                                                                                                         \
    int64_t i_ = 0;                                                                                                    \
    {                                                                                                                  \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                                                 \
        for (; i_ + 16 <= (n); i_ += 16) {                                                                             \
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps((w) + i_), ld8_##K((v), i_), acc0);                                 \
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps((w) + i_ + 8), ld8_##K((v), i_ + 8), acc1);                         \
        }                                                                                                              \
        sum = hsum8(_mm256_add_ps(acc0, acc1));                                                                        \
    }                                                                                                                  \
    for (; i_ < (n); i_++) sum += (w)[i_] * at_##K((v), i_);
#endif

/* y += a * x, x a row of kind K */
#if defined(__AVX512F__)
#define ROW_MAD16(y, x, K, a, n, i)                                                                                    \
    for (const __m512 av16 = _mm512_set1_ps(a); (i) + 16 <= (n); (i) += 16)                                            \
        _mm512_storeu_ps((y) + (i), _mm512_fmadd_ps(av16, ld16_##K((x), (i)), _mm512_loadu_ps((y) + (i))));
#else
#define ROW_MAD16(y, x, K, a, n, i)
#endif
#define ROW_MAD(y, x, K, a, n)                                                                                         \
    int64_t i_ = 0;                                                                                                    \
    ROW_MAD16(y, x, K, a, n, i_)                                                                                       \
    for (const __m256 av = _mm256_set1_ps(a); i_ + 8 <= (n); i_ += 8)                                                  \
        _mm256_storeu_ps((y) + i_, _mm256_fmadd_ps(av, ld8_##K((x), i_), _mm256_loadu_ps((y) + i_)));                  \
    for (; i_ < (n); i_++) (y)[i_] += (a)*at_##K((x), i_);

void FN(pb_vec_dot_f32_f32_)(int64_t n, float *s, const void *x, const void *y) {
    const float *w = x, *v = y;
    ROW_DOT(w, v, f32, n, sum)
    *s = sum;
}

/* attention primitives over float rows (forward.c): dot and y += a*x */
float FN(pb_dot_f32_)(const float *a, const float *b, int64_t n) {
    float s;
    FN(pb_vec_dot_f32_f32_)(n, &s, a, b);
    return s;
}

void FN(pb_mad_f32_)(float *y, const float *x, float a, int64_t n) { ROW_MAD(y, x, f32, a, n) }

/* The same two on an fp16 row (KV cache, decode): the row converted exactly on the fly, so each equals
 * converting it to float first and calling the float version, bit for bit, without the round trip. */
float FN(pb_dot_f16_)(const float *a, const uint16_t *h, int64_t n) {
    ROW_DOT(a, h, f16, n, sum)
    return sum;
}

void FN(pb_mad_f16_)(float *y, const uint16_t *h, float a, int64_t n) { ROW_MAD(y, h, f16, a, n) }

/* y += a[k] * x[k] for rows k = 0..nk-1 (ldx floats apart) in that order: per element the same fused
 * multiply-adds as nk calls of pb_mad_f32_, bit for bit, with y loaded and stored once per slice. */
void FN(pb_mad_f32_rows_)(float *y, const float *x, size_t ldx, const float *a, int nk, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        __m512 acc = _mm512_loadu_ps(y + i);
        for (int k = 0; k < nk; k++) acc = _mm512_fmadd_ps(_mm512_set1_ps(a[k]), _mm512_loadu_ps(x + k * ldx + i), acc);
        _mm512_storeu_ps(y + i, acc);
    }
#endif
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_loadu_ps(y + i);
        for (int k = 0; k < nk; k++) acc = _mm256_fmadd_ps(_mm256_set1_ps(a[k]), _mm256_loadu_ps(x + k * ldx + i), acc);
        _mm256_storeu_ps(y + i, acc);
    }
    for (; i < n; i++)
        for (int k = 0; k < nk; k++) y[i] += a[k] * x[k * ldx + i];
}

#if defined(__AVX512F__)
/* hsum16 of 8 vectors at once, the same additions per vector (v[p] -> out[p]): halves of 256, of 128, lanes
 * 0+2 / 1+3, then the last pair, each step adding two or four vectors' parts in one instruction. */
INLINE void dot_tile_sum8(const __m512 v[8], float out[8]) {
    __m512 z[4], w[2];
    PB_UNROLL for (int p = 0; p < 4; p++) z[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE),
                                                               _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44));
    PB_UNROLL for (int p = 0; p < 2; p++) w[p] =
        _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * p], z[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)),
                      _mm512_shuffle_f32x4(z[2 * p], z[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)));
    const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 f = _mm512_add_ps(e, _mm512_permute_ps(e, _MM_SHUFFLE(2, 3, 0, 1)));
    /* lane 4k: vector k, lane 4k + 2: vector 4 + k */
    const __m512 g = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0), f);
    _mm256_storeu_ps(out, _mm512_castps512_ps256(g));
}

/* Scores of a block of NQ query rows x NK key rows: per pair the two 16-lane chains and the reduction of
 * ROW_DOT (n a multiple of 32), so each equals pb_dot_f32_ of the pair bit for bit; the key and query
 * slices loaded once serve NQ x NK fused multiply-adds instead of one. */
INLINE void dot_tile_blk(const float *const *q, const void *k, size_t ldk, int64_t n, float *s, size_t lds,
                         const int NQ, const int NK, const int F16) {
    __m512 acc0[4][2], acc1[4][2];
    PB_UNROLL for (int a = 0; a < NQ; a++) PB_UNROLL for (int b = 0; b < NK; b++) acc0[a][b] = acc1[a][b] =
        _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 32) {
        __m512 k0[2], k1[2];
        PB_UNROLL for (int b = 0; b < NK; b++) {
            k0[b] = F16 ? ld16_f16((const uint16_t *)k + (size_t)b * ldk, i)
                        : ld16_f32((const float *)k + (size_t)b * ldk, i);
            k1[b] = F16 ? ld16_f16((const uint16_t *)k + (size_t)b * ldk, i + 16)
                        : ld16_f32((const float *)k + (size_t)b * ldk, i + 16);
        }
        PB_UNROLL for (int a = 0; a < NQ; a++) {
            __m512 q0 = _mm512_loadu_ps(q[a] + i), q1 = _mm512_loadu_ps(q[a] + i + 16);
            __asm__("" : "+v"(q0), "+v"(q1)); /* in registers: GCC would otherwise load them once per key */
            PB_UNROLL for (int b = 0; b < NK; b++) {
                acc0[a][b] = _mm512_fmadd_ps(q0, k0[b], acc0[a][b]);
                acc1[a][b] = _mm512_fmadd_ps(q1, k1[b], acc1[a][b]);
            }
        }
    }
    if (NQ == 4 && NK == 2) {
        __m512 v[8];
        float out[8];
        PB_UNROLL for (int p = 0; p < 8; p++) v[p] = _mm512_add_ps(acc0[p / 2][p % 2], acc1[p / 2][p % 2]);
        dot_tile_sum8(v, out);
        PB_UNROLL for (int p = 0; p < 8; p++) s[(size_t)(p / 2) * lds + p % 2] = out[p];
        return;
    }
    PB_UNROLL for (int a = 0; a < NQ; a++) PB_UNROLL for (int b = 0; b < NK; b++) s[(size_t)a * lds + b] =
        hsum16(_mm512_add_ps(acc0[a][b], acc1[a][b]));
}

/* s[i*lds + j] = the dot of q[i] and key row j (ldk values apart; fp16 rows when F16), bit for bit as
 * pb_dot_f32_ / pb_dot_f16_ give it, in blocks of 4 queries x 2 keys. */
INLINE void dot_tile(const float *const *q, int nq, const void *k, size_t ldk, int nk, int64_t n, float *s, size_t lds,
                     const int F16) {
    if (n % 32) {
        for (int a = 0; a < nq; a++)
            for (int b = 0; b < nk; b++)
                s[(size_t)a * lds + b] = F16 ? FN(pb_dot_f16_)(q[a], (const uint16_t *)k + (size_t)b * ldk, n)
                                             : FN(pb_dot_f32_)(q[a], (const float *)k + (size_t)b * ldk, n);
        return;
    }
    for (int a = 0; a < nq; a += 4) {
        const int na = PB_MIN(4, nq - a);
        for (int b = 0; b < nk; b += 2) {
            const void *kb = F16 ? (const void *)((const uint16_t *)k + (size_t)b * ldk)
                                 : (const void *)((const float *)k + (size_t)b * ldk);
            float *sb = s + (size_t)a * lds + b;
            switch ((na - 1) * 2 + PB_MIN(2, nk - b) - 1) {
            case 0: dot_tile_blk(q + a, kb, ldk, n, sb, lds, 1, 1, F16); break;
            case 1: dot_tile_blk(q + a, kb, ldk, n, sb, lds, 1, 2, F16); break;
            case 2: dot_tile_blk(q + a, kb, ldk, n, sb, lds, 2, 1, F16); break;
            case 3: dot_tile_blk(q + a, kb, ldk, n, sb, lds, 2, 2, F16); break;
            case 4: dot_tile_blk(q + a, kb, ldk, n, sb, lds, 3, 1, F16); break;
            case 5: dot_tile_blk(q + a, kb, ldk, n, sb, lds, 3, 2, F16); break;
            case 6: dot_tile_blk(q + a, kb, ldk, n, sb, lds, 4, 1, F16); break;
            default: dot_tile_blk(q + a, kb, ldk, n, sb, lds, 4, 2, F16); break;
            }
        }
    }
}

void FN(pb_dot_f32_tile_)(const float *const *q, int nq, const float *k, size_t ldk, int nk, int64_t n, float *s,
                          size_t lds) {
    dot_tile(q, nq, k, ldk, nk, n, s, lds, 0);
}

void FN(pb_dot_f16_tile_)(const float *const *q, int nq, const uint16_t *k, size_t ldk, int nk, int64_t n, float *s,
                          size_t lds) {
    dot_tile(q, nq, k, ldk, nk, n, s, lds, 1);
}

/* NY states x NV 16-value slices of y[j] = y[j] * c[j] + sum a[j][k] * x[k], keys in order: per element the
 * multiply of pb_vec_scale and the chain of pb_mad_f32_rows_, bit for bit; a key's slices are loaded once for
 * NY states. */
INLINE void mad_tile_blk(float *const *y, const float *c, const float *const *a, const void *x, size_t ldx, int nk,
                         int64_t i, const int NY, const int NV, const int F16) {
    __m512 acc[4][4];
    PB_UNROLL for (int j = 0; j < NY; j++) PB_UNROLL for (int v = 0; v < NV; v++) acc[j][v] =
        _mm512_mul_ps(_mm512_loadu_ps(y[j] + i + 16 * v), _mm512_set1_ps(c[j]));
    for (int k = 0; k < nk; k++) {
        __m512 xv[4];
        PB_UNROLL for (int v = 0; v < NV; v++) xv[v] = F16 ? ld16_f16((const uint16_t *)x + (size_t)k * ldx, i + 16 * v)
                                                           : ld16_f32((const float *)x + (size_t)k * ldx, i + 16 * v);
        PB_UNROLL for (int j = 0; j < NY; j++) {
            const __m512 av = _mm512_set1_ps(a[j][k]);
            PB_UNROLL for (int v = 0; v < NV; v++) acc[j][v] = _mm512_fmadd_ps(av, xv[v], acc[j][v]);
        }
    }
    PB_UNROLL for (int j = 0; j < NY; j++) PB_UNROLL for (int v = 0; v < NV; v++)
        _mm512_storeu_ps(y[j] + i + 16 * v, acc[j][v]);
}

/* y[j] *= c[j], then y[j] += a[j][k] * row k for k < nk in order (rows ldx values apart; fp16 when F16), for
 * j < ny: bit for bit pb_mad_f32_rows_ (or one pb_mad_f16_ per row), in blocks of 4 states x 64 values. */
INLINE void mad_tile(float *const *y, const float *c, const float *const *a, int ny, const void *x, size_t ldx, int nk,
                     int64_t n, const int F16) {
    const int64_t n16 = n / 16 * 16;
    for (int j = 0; j < ny; j += 4) {
        const int nj = PB_MIN(4, ny - j);
        int64_t i = 0;
        for (; i + 64 <= n16; i += 64) switch (nj) {
            case 1: mad_tile_blk(y + j, c + j, a + j, x, ldx, nk, i, 1, 4, F16); break;
            case 2: mad_tile_blk(y + j, c + j, a + j, x, ldx, nk, i, 2, 4, F16); break;
            case 3: mad_tile_blk(y + j, c + j, a + j, x, ldx, nk, i, 3, 4, F16); break;
            default: mad_tile_blk(y + j, c + j, a + j, x, ldx, nk, i, 4, 4, F16); break;
            }
        for (; i < n16; i += 16) switch (nj) {
            case 1: mad_tile_blk(y + j, c + j, a + j, x, ldx, nk, i, 1, 1, F16); break;
            case 2: mad_tile_blk(y + j, c + j, a + j, x, ldx, nk, i, 2, 1, F16); break;
            case 3: mad_tile_blk(y + j, c + j, a + j, x, ldx, nk, i, 3, 1, F16); break;
            default: mad_tile_blk(y + j, c + j, a + j, x, ldx, nk, i, 4, 1, F16); break;
            }
        for (int jj = j; jj < j + nj && n16 < n; jj++) {
            for (int64_t e = n16; e < n; e++) y[jj][e] *= c[jj];
            if (F16)
                for (int k = 0; k < nk; k++)
                    FN(pb_mad_f16_)(y[jj] + n16, (const uint16_t *)x + (size_t)k * ldx + n16, a[jj][k], n - n16);
            else
                FN(pb_mad_f32_rows_)(y[jj] + n16, (const float *)x + n16, ldx, a[jj], nk, n - n16);
        }
    }
}

void FN(pb_mad_f32_tile_)(float *const *y, const float *c, const float *const *a, int ny, const float *x, size_t ldx,
                          int nk, int64_t n) {
    mad_tile(y, c, a, ny, x, ldx, nk, n, 0);
}

void FN(pb_mad_f16_tile_)(float *const *y, const float *c, const float *const *a, int ny, const uint16_t *x, size_t ldx,
                          int nk, int64_t n) {
    mad_tile(y, c, a, ny, x, ldx, nk, n, 1);
}
#endif

/* exp(z) for z clamped to [-87, 88]: Cody-Waite reduction by ln2, degree-6 polynomial on |r| <= ln2/2
 * (relative error ~2 ulp), scaled by 2^n through the exponent bits. NaN stays NaN: max/min_ps return their second
 * operand when one is NaN, so z goes second (as first it became -87, exp ~0: attention over NaN scores gave every
 * key the same weight and finite garbage, and a soft-capped NaN logit -cap, where expf and NEON give NaN). */
INLINE __m256 exp256(__m256 z) {
    z = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), z));
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

/* Attention scores of one key chunk: optional soft-cap s = cap * tanh(s / cap), then the max into *mx
 * (max of *mx and the chunk), then s = exp(s - max); returns the sum. tanh(u) = 1 - 2 / (1 + exp(2u)),
 * and for |u| < 1/8 (where that form cancels) its odd Taylor series to u^9 (error < 1e-11). */
INLINE __m256 tanh256(__m256 u) {
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    __m256 big = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(one, exp256(_mm256_add_ps(u, u)))));
    __m256 u2 = _mm256_mul_ps(u, u), p = _mm256_set1_ps(62.0f / 2835.0f);
    p = _mm256_fmadd_ps(p, u2, _mm256_set1_ps(-17.0f / 315.0f));
    p = _mm256_fmadd_ps(p, u2, _mm256_set1_ps(2.0f / 15.0f));
    p = _mm256_fmadd_ps(p, u2, _mm256_set1_ps(-1.0f / 3.0f));
    p = _mm256_mul_ps(u, _mm256_fmadd_ps(p, u2, one));
    __m256 small = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), u), _mm256_set1_ps(0.125f), _CMP_LT_OQ);
    return _mm256_blendv_ps(big, p, small);
}

/* Gemma 2 soft-cap in place: s = cap * tanh(s / cap) (attention scores, final logits). */
void FN(pb_softcap_)(float *s, int64_t n, float cap) {
    const __m256 cv = _mm256_set1_ps(cap);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(s + i, _mm256_mul_ps(cv, tanh256(_mm256_div_ps(_mm256_loadu_ps(s + i), cv))));
    for (; i < n; i++) s[i] = tanhf(s[i] / cap) * cap;
}

float FN(pb_att_exp_)(float *s, int64_t n, float cap, float *mx) {
    if (cap > 0.0f) FN(pb_softcap_)(s, n, cap);
    float m = *mx;
    for (int64_t i = 0; i < n; i++) m = s[i] > m ? s[i] : m;
    *mx = m;
    const __m256 mv = _mm256_set1_ps(m);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
        _mm256_storeu_ps(s + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float sum = hsum8(acc);
    for (; i < n; i++) sum += (s[i] = expf(s[i] - m));
    return sum;
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
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(h + i))));
#endif
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++) dst[i] = h2f(h[i]);
}

/* fp32 -> fp16 with round-to-nearest-even (KV cache stores): vcvtps2ph rounds as pb_fp32_to_fp16 does for
 * every non-NaN value; a vector holding a NaN goes through the scalar (it returns one fixed quiet NaN). */
void FN(pb_f32_to_f16_)(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(src + i);
        if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) {
            for (int k = 0; k < 16; k++) h[i + k] = pb_fp32_to_fp16(src[i + k]);
            continue;
        }
        _mm256_storeu_si256((__m256i *)(void *)(h + i),
                            _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
#endif
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(src + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int k = 0; k < 8; k++) h[i + k] = pb_fp32_to_fp16(src[i + k]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) h[i] = pb_fp32_to_fp16(src[i]);
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
    t[PB_TYPE_F16].from_float = FN(pb_f32_to_f16_);
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
    t[PB_TYPE_Q4_1].vec_dot = FN(pb_vec_dot_q4_1_q8_0_);
    t[PB_TYPE_Q5_0].vec_dot = FN(pb_vec_dot_q5_0_q8_0_);
    t[PB_TYPE_Q5_1].vec_dot = FN(pb_vec_dot_q5_1_q8_0_);
    t[PB_TYPE_Q2_K].vec_dot = FN(pb_vec_dot_q2_K_q8_K_);
    t[PB_TYPE_Q3_K].vec_dot = FN(pb_vec_dot_q3_K_q8_K_);
    gemm[PB_TYPE_Q4_1] = FN(pb_gemm_q4_1_q8_0_);
    gemm[PB_TYPE_Q5_0] = FN(pb_gemm_q5_0_q8_0_);
    gemm[PB_TYPE_Q5_1] = FN(pb_gemm_q5_1_q8_0_);
    gemm[PB_TYPE_Q2_K] = FN(pb_gemm_q2_K_q8_K_);
    gemm[PB_TYPE_Q3_K] = FN(pb_gemm_q3_K_q8_K_);
}
