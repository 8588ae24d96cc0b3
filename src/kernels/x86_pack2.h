/* x86_pack2.h -- AVX2 tiles for packed (row-interleaved) Q4_0 / Q8_0 matrices (layout in kernels/matmul.h);
 * included only by x86_avx2.c. A 16-row group is two ymm halves (rows 0-7, 8-15); without VNNI the byte
 * dot products are maddubs + madd. Lane for lane the same integers and the same float sequence as
 * ref_pack.c, hence bit-identical to it. */
#include "kernels/kernels.h"
#include "tensor/quant.h"

#include <immintrin.h>

#define P2_INLINE static inline __attribute__((always_inline))
#define P2_UNROLL _Pragma("GCC unroll 16")

/* The 8 dwords of 32 activation bytes, each broadcast to all 8 lanes (128-bit broadcast loads and in-lane
 * shuffles: cheaper than a vpbroadcastd from memory per dword on Zen 5). */
P2_INLINE void p2_bcast8(const int8_t *p, __m256i b[8]) {
    const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
    const __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p + 16)));
    b[0] = _mm256_shuffle_epi32(lo, 0x00);
    b[1] = _mm256_shuffle_epi32(lo, 0x55);
    b[2] = _mm256_shuffle_epi32(lo, 0xAA);
    b[3] = _mm256_shuffle_epi32(lo, 0xFF);
    b[4] = _mm256_shuffle_epi32(hi, 0x00);
    b[5] = _mm256_shuffle_epi32(hi, 0x55);
    b[6] = _mm256_shuffle_epi32(hi, 0xAA);
    b[7] = _mm256_shuffle_epi32(hi, 0xFF);
}

/* Q4_0: u (0..15) times a: 8 maddubs pairs of at most 2*15*127 each add up to at most 30480, so they are
 * summed in int16 before one madd to int32 (exact). Start value: the activation's -8 * sum(a) term. */
#define P2_TILE_Q40(NT)                                                                                                \
    for (int64_t g = 0; g < ng; g++) {                                                                                 \
        const uint8_t *gp = (const uint8_t *)w + (size_t)g * g_size;                                                   \
        __m256 acc[2][NT];                                                                                             \
        for (int t = 0; t < (NT); t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();                                    \
        for (int64_t b = 0; b < nb; b++) {                                                                             \
            const uint8_t *bp = gp + (size_t)b * 18 * PB_PACK_ROWS, *q = bp + 32;                                      \
            if ((NT) <= 2)                                                                                             \
                for (int o = 0; o < 18 * PB_PACK_ROWS; o += 64)                                                        \
                    _mm_prefetch((const char *)bp + 3072 + o, _MM_HINT_T0);                                            \
            P2_UNROLL for (int h = 0; h < 2; h++) {                                                                    \
                const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(bp + 16 * h)));      \
                const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);                                \
                __m256i v[8];                                                                                          \
                P2_UNROLL for (int j = 0; j < 4; j++) {                                                                \
                    __m256i p = _mm256_loadu_si256((const __m256i *)(const void *)(q + 64 * j + 32 * h));              \
                    v[j] = _mm256_and_si256(p, m4);                                                                    \
                    v[j + 4] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);                                          \
                }                                                                                                      \
                for (int t = 0; t < (NT); t++) {                                                                       \
                    const pb_block_q8_0 *x =                                                                           \
                        (const pb_block_q8_0 *)(const void *)((const uint8_t *)a + (size_t)t * a_row) + b;             \
                    const pb_pack_ameta *m = &meta[t * nb + b];                                                        \
                    __m256i xb[8];                                                                                     \
                    p2_bcast8(x->qs, xb);                                                                              \
                    __m256i s16 = _mm256_maddubs_epi16(v[0], xb[0]);                                                   \
                    P2_UNROLL for (int k = 1; k < 8; k++) s16 =                                                        \
                        _mm256_add_epi16(s16, _mm256_maddubs_epi16(v[k], xb[k]));                                      \
                    __m256i is = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(m->bias));           \
                    const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(m->d));                                         \
                    acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sc, acc[h][t]);                                \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        for (int t = 0; t < (NT); t++) {                                                                               \
            _mm256_storeu_ps(y + t * ldy + g * PB_PACK_ROWS, acc[0][t]);                                               \
            _mm256_storeu_ps(y + t * ldy + g * PB_PACK_ROWS + 8, acc[1][t]);                                           \
        }                                                                                                              \
    }

/* Q8_0: stored u = w + 128; the signed w (u ^ 0x80) with the sign trick: |w| (<= 128) times a carrying w's
 * sign, each maddubs pair at most 2*128*127 (exact in int16), madd to int32 per 4 bytes. That is sum w*a
 * directly, the same integer as the spec's sum u*a - 128 sum a. */
#define P2_TILE_Q80(NT)                                                                                                \
    for (int64_t g = 0; g < ng; g++) {                                                                                 \
        const uint8_t *gp = (const uint8_t *)w + (size_t)g * g_size;                                                   \
        __m256 acc[2][NT];                                                                                             \
        for (int t = 0; t < (NT); t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();                                    \
        for (int64_t b = 0; b < nb; b++) {                                                                             \
            const uint8_t *bp = gp + (size_t)b * 34 * PB_PACK_ROWS, *q = bp + 32;                                      \
            if ((NT) <= 2)                                                                                             \
                for (int o = 0; o < 34 * PB_PACK_ROWS; o += 64)                                                        \
                    _mm_prefetch((const char *)bp + 4352 + o, _MM_HINT_T0);                                            \
            P2_UNROLL for (int h = 0; h < 2; h++) {                                                                    \
                const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(bp + 16 * h)));      \
                const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);                        \
                __m256i ws[8], wa[8];                                                                                  \
                P2_UNROLL for (int k = 0; k < 8; k++) {                                                                \
                    ws[k] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(q + 64 * k + 32 * h)), \
                                             flip);                                                                    \
                    wa[k] = _mm256_abs_epi8(ws[k]);                                                                    \
                }                                                                                                      \
                for (int t = 0; t < (NT); t++) {                                                                       \
                    const pb_block_q8_0 *x =                                                                           \
                        (const pb_block_q8_0 *)(const void *)((const uint8_t *)a + (size_t)t * a_row) + b;             \
                    const pb_pack_ameta *m = &meta[t * nb + b];                                                        \
                    __m256i is = _mm256_setzero_si256(), xb[8];                                                        \
                    p2_bcast8(x->qs, xb);                                                                              \
                    P2_UNROLL for (int k = 0; k < 8; k++) {                                                            \
                        __m256i sa = _mm256_sign_epi8(xb[k], ws[k]);                                                   \
                        is = _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_maddubs_epi16(wa[k], sa), ones));           \
                    }                                                                                                  \
                    const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(m->d));                                         \
                    acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sc, acc[h][t]);                                \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        for (int t = 0; t < (NT); t++) {                                                                               \
            _mm256_storeu_ps(y + t * ldy + g * PB_PACK_ROWS, acc[0][t]);                                               \
            _mm256_storeu_ps(y + t * ldy + g * PB_PACK_ROWS + 8, acc[1][t]);                                           \
        }                                                                                                              \
    }

#define P2_SWITCH(TILE)                                                                                                \
    switch (nt) {                                                                                                      \
    case 1: TILE(1) break;                                                                                             \
    case 2: TILE(2) break;                                                                                             \
    case 3: TILE(3) break;                                                                                             \
    case 4: TILE(4) break;                                                                                             \
    case 5: TILE(5) break;                                                                                             \
    case 6: TILE(6) break;                                                                                             \
    case 7: TILE(7) break;                                                                                             \
    default: TILE(8) break;                                                                                            \
    }

void pb_gemm_packed_q4_0_avx2(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta_, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / 32;
    const pb_pack_ameta *meta = meta_;
    P2_SWITCH(P2_TILE_Q40)
}

void pb_gemm_packed_q8_0_avx2(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta_, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / 32;
    const pb_pack_ameta *meta = meta_;
    P2_SWITCH(P2_TILE_Q80)
}
