/* x86_pack.h -- AVX-512 VNNI tiles for packed (row-interleaved) Q4_0 / Q8_0 matrices (layout in
 * kernels/matmul.h); included only by x86_avx512.c. One zmm holds 4 weights of each of 16 rows, so a
 * vpdpbusd against 4 broadcast activation bytes adds one partial dot product per row lane, and the
 * per-block float step (cvt, scale, fma) serves 16 rows at once. Lane for lane the same sequence as
 * ref_pack.c, hence bit-identical to it. */
#include "kernels/kernels.h"
#include "tensor/quant.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define PK_INLINE static inline __attribute__((always_inline))
#define PK_UNROLL _Pragma("GCC unroll 16")
/* decode prefetch distance: bytes ahead for Q4_0/Q8_0 groups, blocks ahead for the K-quant ones */
#ifndef PK_PF_BYTES
#define PK_PF_BYTES 3072
#endif
#ifndef PK_PF_KBLOCKS
#define PK_PF_KBLOCKS 2
#endif

/* The 8 dwords of 32 activation bytes, each broadcast to all 16 lanes. Written as plain dword broadcasts so
 * GCC folds each into its vpdpbusd as an embedded {1to16} memory operand: a load, no shuffle. (Zen 5: a
 * vpdpbusd chain fed this way runs at the register-only peak, ~900 GOP/s per core, where two 128-bit
 * broadcasts + vpshufd reached ~750; tiles: Q4_0 530 -> 570, Q4_K 463 -> 585 GOP/s. mulps/fmadd share the
 * vpdpbusd pipes and loads run 2 per cycle: the per-block float step and the loads bound the tiles.) */
typedef int32_t pk_i32u __attribute__((may_alias, aligned(1)));
PK_INLINE void pk_bcast8(const int8_t *p, __m512i b[8]) {
    PK_UNROLL for (int k = 0; k < 8; k++) b[k] = _mm512_set1_epi32(((const pk_i32u *)(const void *)p)[k]);
}

/* A token block's meta {bias, d} as one 8-byte broadcast (lanes bias, d, bias, d, ...), split by in-lane
 * shuffles: the tile is bound by loads as much as by the vpdpbusd/FMA pipes (8 activation broadcasts + 2 meta
 * + the weights per 8 vpdpbusd), and shuffles run on other pipes. Q4_0 tile +5% over two 4-byte broadcasts. */
_Static_assert(sizeof(pb_pack_ameta) == 8 && offsetof(pb_pack_ameta, d) == 4,
               "pk_meta_pair reads {bias, d} as 8 bytes");
PK_INLINE __m512i pk_meta_pair(const pb_pack_ameta *m) {
    long long v;
    memcpy(&v, m, sizeof v);
    return _mm512_set1_epi64(v);
}

/* Q4_0: four 64-byte loads, low and high nibbles -> 8 vectors of unsigned 0..15 */
PK_INLINE void pk_unpack_q4_0(const uint8_t *q, __m512i v[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    PK_UNROLL for (int j = 0; j < 4; j++) {
        __m512i p = _mm512_loadu_si512((const void *)(q + 64 * j));
        v[j] = _mm512_and_si512(p, m4);
        v[j + 4] = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
    }
}

/* Q8_0: stored + 128, already unsigned: eight 64-byte loads */
PK_INLINE void pk_unpack_q8_0(const uint8_t *q, __m512i v[8]) {
    PK_UNROLL for (int k = 0; k < 8; k++) v[k] = _mm512_loadu_si512((const void *)(q + 64 * k));
}

#define PK_TILE(UNPACK, BSZ, NT)                                                                                       \
    for (int64_t g = 0; g < ng; g++) {                                                                                 \
        const uint8_t *gp = (const uint8_t *)w + (size_t)g * g_size;                                                   \
        __m512 acc[NT];                                                                                                \
        PK_UNROLL for (int t = 0; t < (NT); t++) acc[t] = _mm512_setzero_ps();                                         \
        for (int64_t b = 0; b < nb; b++) {                                                                             \
            const uint8_t *bp = gp + (size_t)b * (BSZ);                                                                \
            if ((NT) <= 2)                                                                                             \
                for (int o = 0; o < (BSZ); o += 64) _mm_prefetch((const char *)bp + PK_PF_BYTES + o, _MM_HINT_T0);     \
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)bp));                  \
            __m512i v[8];                                                                                              \
            UNPACK(bp + 2 * PB_PACK_ROWS, v);                                                                          \
            PK_UNROLL for (int t = 0; t < (NT); t++) {                                                                 \
                const pb_block_q8_0 *x =                                                                               \
                    (const pb_block_q8_0 *)(const void *)((const uint8_t *)a + (size_t)t * a_row) + b;                 \
                const pb_pack_ameta *m = &meta[t * nb + b];                                                            \
                const __m512i bd = pk_meta_pair(m);                                                                    \
                __m512i is = _mm512_shuffle_epi32(bd, _MM_PERM_AAAA), is2 = _mm512_setzero_si512(); /* bias; exact */  \
                __m512i xb[8];                                                                                         \
                pk_bcast8(x->qs, xb);                                                                                  \
                PK_UNROLL for (int k = 0; k < 4; k++) is = _mm512_dpbusd_epi32(is, v[k], xb[k]);                       \
                PK_UNROLL for (int k = 4; k < 8; k++) is2 = _mm512_dpbusd_epi32(is2, v[k], xb[k]);                     \
                is = _mm512_add_epi32(is, is2);                                                                        \
                const __m512 sc = _mm512_mul_ps(dw, _mm512_castsi512_ps(_mm512_shuffle_epi32(bd, _MM_PERM_BBBB)));     \
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), sc, acc[t]);                                          \
            }                                                                                                          \
        }                                                                                                              \
        PK_UNROLL for (int t = 0; t < (NT); t++) _mm512_storeu_ps(y + t * ldy + g * PB_PACK_ROWS, acc[t]);             \
    }

#define PK_SWITCH(TILE, ...)                                                                                           \
    switch (nt) {                                                                                                      \
    case 1: TILE(__VA_ARGS__, 1) break;                                                                                \
    case 2: TILE(__VA_ARGS__, 2) break;                                                                                \
    case 3: TILE(__VA_ARGS__, 3) break;                                                                                \
    case 4: TILE(__VA_ARGS__, 4) break;                                                                                \
    case 5: TILE(__VA_ARGS__, 5) break;                                                                                \
    case 6: TILE(__VA_ARGS__, 6) break;                                                                                \
    case 7: TILE(__VA_ARGS__, 7) break;                                                                                \
    default: TILE(__VA_ARGS__, 8) break;                                                                               \
    }

void pb_gemm_packed_q4_0_avx512(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                                const void *meta_, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / 32;
    const pb_pack_ameta *meta = meta_;
    PK_SWITCH(PK_TILE, pk_unpack_q4_0, 18 * PB_PACK_ROWS)
}

void pb_gemm_packed_q8_0_avx512(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                                const void *meta_, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / 32;
    const pb_pack_ameta *meta = meta_;
    PK_SWITCH(PK_TILE, pk_unpack_q8_0, 34 * PB_PACK_ROWS)
}

/* K-quant tiles take PK_KNT tokens at a time (two float accumulators per token live across a block; with the
 * broadcasts folded into vpdpbusd, 8 tokens still fit the 32 registers: Q6_K 364 -> 467 GOP/s over 4). */
#define PK_KNT 8
#define PK_KSWITCH(FN, N)                                                                                              \
    switch (N) {                                                                                                       \
    case 1: FN(nb, w, ng, g_size, a_t, a_row, m_t, y_t, ldy, 1); break;                                                \
    case 2: FN(nb, w, ng, g_size, a_t, a_row, m_t, y_t, ldy, 2); break;                                                \
    case 3: FN(nb, w, ng, g_size, a_t, a_row, m_t, y_t, ldy, 3); break;                                                \
    case 4: FN(nb, w, ng, g_size, a_t, a_row, m_t, y_t, ldy, 4); break;                                                \
    case 5: FN(nb, w, ng, g_size, a_t, a_row, m_t, y_t, ldy, 5); break;                                                \
    case 6: FN(nb, w, ng, g_size, a_t, a_row, m_t, y_t, ldy, 6); break;                                                \
    case 7: FN(nb, w, ng, g_size, a_t, a_row, m_t, y_t, ldy, 7); break;                                                \
    default: FN(nb, w, ng, g_size, a_t, a_row, m_t, y_t, ldy, 8); break;                                               \
    }
#define PK_KARGS                                                                                                       \
    int64_t nb, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row, const pb_pack_kmeta *meta,      \
        float *y, int64_t ldy, const int NT

/* Q4_K: the 6-bit scales and mins of 16 rows unpacked lane-wise with k4_scales' dword arithmetic; per
 * sub-block j, 8 vpdpbusd give 16 row sums, scaled in float by d_w * sc_j (shared by the tokens); the
 * mins term is 4 vpdpwssd of (m_j, m_j') int16 pairs against the activation's paired 32-value sums. */
#define PK_TILE_Q4K(NT)                                                                                                \
    for (int64_t g = 0; g < ng; g++) {                                                                                 \
        const uint8_t *gp = (const uint8_t *)w + (size_t)g * g_size;                                                   \
        PK_UNROLL for (int t = 0; t < (NT); t++) acc[t] = _mm512_setzero_ps();                                         \
        for (int64_t b = 0; b < nb; b++) {                                                                             \
            const uint8_t *bp = gp + (size_t)b * 144 * PB_PACK_ROWS, *sc = bp + 64, *qs = bp + 64 + 192;               \
            if ((NT) <= 2)                                                                                             \
                for (int o = 0; o < 144 * PB_PACK_ROWS; o += 64)                                                       \
                    _mm_prefetch((const char *)bp + PK_PF_KBLOCKS * 144 * PB_PACK_ROWS + o, _MM_HINT_T0);              \
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)bp));                  \
            const __m512 dmw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(bp + 32)));          \
            const __m512i w0 = _mm512_loadu_si512((const void *)sc), w1 = _mm512_loadu_si512((const void *)(sc + 64)), \
                          w2 = _mm512_loadu_si512((const void *)(sc + 128));                                           \
            const __m512i k3f = _mm512_set1_epi32(0x3f3f3f3f), k0f = _mm512_set1_epi32(0x0f0f0f0f),                    \
                          k30 = _mm512_set1_epi32(0x30303030), kff = _mm512_set1_epi32(0xff),                          \
                          k00ff = _mm512_set1_epi32(0x00ff00ff);                                                       \
            const __m512i s_lo = _mm512_and_si512(w0, k3f);                                                            \
            const __m512i s_hi =                                                                                       \
                _mm512_or_si512(_mm512_and_si512(w2, k0f), _mm512_and_si512(_mm512_srli_epi32(w0, 2), k30));           \
            const __m512i m_lo = _mm512_and_si512(w1, k3f);                                                            \
            const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), k0f),                      \
                                                 _mm512_and_si512(_mm512_srli_epi32(w1, 2), k30));                     \
            PK_UNROLL for (int t = 0; t < (NT); t++) s[t] = _mm512_setzero_ps();                                       \
            PK_UNROLL for (int j = 0; j < 8; j++) {                                                                    \
                const __m512i scv = _mm512_and_si512(_mm512_srli_epi32(j < 4 ? s_lo : s_hi, 8 * (j & 3)), kff);        \
                const __m512 fsc = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(scv));                                         \
                __m512i v[8];                                                                                          \
                PK_UNROLL for (int k = 0; k < 8; k++) {                                                                \
                    __m512i p = _mm512_loadu_si512((const void *)(qs + 64 * (8 * (j / 2) + k)));                       \
                    v[k] = _mm512_and_si512((j & 1) ? _mm512_srli_epi16(p, 4) : p, _mm512_set1_epi8(0x0F));            \
                }                                                                                                      \
                PK_UNROLL for (int t = 0; t < (NT); t++) {                                                             \
                    const pb_block_q8_K *x =                                                                           \
                        (const pb_block_q8_K *)(const void *)((const uint8_t *)a + (size_t)t * a_row) + b;             \
                    __m512i is = _mm512_setzero_si512(), is2 = _mm512_setzero_si512(), xb[8];                          \
                    pk_bcast8(x->qs + 32 * j, xb);                                                                     \
                    PK_UNROLL for (int k = 0; k < 4; k++) is = _mm512_dpbusd_epi32(is, v[k], xb[k]);                   \
                    PK_UNROLL for (int k = 4; k < 8; k++) is2 = _mm512_dpbusd_epi32(is2, v[k], xb[k]);                 \
                    is = _mm512_add_epi32(is, is2);                                                                    \
                    s[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), fsc, s[t]);                                         \
                }                                                                                                      \
            }                                                                                                          \
            const __m512i mp0 = _mm512_and_si512(m_lo, k00ff),                                                         \
                          mp1 = _mm512_and_si512(_mm512_srli_epi32(m_lo, 8), k00ff),                                   \
                          mp2 = _mm512_and_si512(m_hi, k00ff),                                                         \
                          mp3 = _mm512_and_si512(_mm512_srli_epi32(m_hi, 8), k00ff);                                   \
            PK_UNROLL for (int t = 0; t < (NT); t++) {                                                                 \
                const pb_pack_kmeta *m = &meta[t * nb + b];                                                            \
                __m512i im = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mp0, _mm512_set1_epi32((int)m->mp[0]));       \
                im = _mm512_dpwssd_epi32(im, mp1, _mm512_set1_epi32((int)m->mp[1]));                                   \
                im = _mm512_dpwssd_epi32(im, mp2, _mm512_set1_epi32((int)m->mp[2]));                                   \
                im = _mm512_dpwssd_epi32(im, mp3, _mm512_set1_epi32((int)m->mp[3]));                                   \
                const __m512 da = _mm512_set1_ps(m->d);                                                                \
                acc[t] = _mm512_fmadd_ps(s[t], da, acc[t]);                                                            \
                const __m512 nmin = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(dmw, da)),  \
                                                                         _mm512_set1_epi32((int)0x80000000u)));        \
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), nmin, acc[t]);                                        \
            }                                                                                                          \
        }                                                                                                              \
        PK_UNROLL for (int t = 0; t < (NT); t++) _mm512_storeu_ps(y + t * ldy + g * PB_PACK_ROWS, acc[t]);             \
    }

PK_INLINE void pk_q4k(PK_KARGS) {
    __m512 acc[PK_KNT], s[PK_KNT];
    PK_TILE_Q4K(NT)
}

void pb_gemm_packed_q4_K_avx512(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                                const void *meta_, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / PB_QK_K;
    const pb_pack_kmeta *meta = meta_;
    for (int t0 = 0; t0 < nt; t0 += PK_KNT) { /* at most PK_KNT tokens at once: accumulators stay in registers */
        const int n = nt - t0 < PK_KNT ? nt - t0 : PK_KNT;
        const void *a_t = (const uint8_t *)a + (size_t)t0 * a_row;
        const pb_pack_kmeta *m_t = meta + t0 * nb;
        float *y_t = y + t0 * ldy;
        PK_KSWITCH(pk_q4k, n)
    }
}

/* Q6_K: per 32-value chunk, 6-bit values rebuilt from the ql nibble and the qh 2-bit field of 16 rows at
 * once (8 vectors, shared by the tokens); two 16-value sub-blocks of 4 vpdpbusd each start from the
 * activation's -32 * bsums term and are scaled in float by d_w * sc_j. */
#define PK_TILE_Q6K(NT)                                                                                                \
    for (int64_t g = 0; g < ng; g++) {                                                                                 \
        const uint8_t *gp = (const uint8_t *)w + (size_t)g * g_size;                                                   \
        PK_UNROLL for (int t = 0; t < (NT); t++) acc[t] = _mm512_setzero_ps();                                         \
        for (int64_t b = 0; b < nb; b++) {                                                                             \
            const uint8_t *bp = gp + (size_t)b * 210 * PB_PACK_ROWS, *cols = bp + 32;                                  \
            if ((NT) <= 2)                                                                                             \
                for (int o = 0; o < 210 * PB_PACK_ROWS; o += 64)                                                       \
                    _mm_prefetch((const char *)bp + PK_PF_KBLOCKS * 210 * PB_PACK_ROWS + o, _MM_HINT_T0);              \
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)bp));                  \
            const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);                                  \
            PK_UNROLL for (int t = 0; t < (NT); t++) s[t] = _mm512_setzero_ps();                                       \
            PK_UNROLL for (int c = 0; c < 8; c++) {                                                                    \
                const int h = c / 4, gq = c % 4;                                                                       \
                const __m512i S = _mm512_loadu_si512((const void *)(cols + 64 * (48 + c / 2)));                        \
                const int i0 = (2 * c) % 4;                                                                            \
                const __m512 fsc0 =                                                                                    \
                    _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(S, 24 - 8 * i0), 24)));   \
                const __m512 fsc1 =                                                                                    \
                    _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(S, 16 - 8 * i0), 24)));   \
                __m512i v[8];                                                                                          \
                PK_UNROLL for (int k = 0; k < 8; k++) {                                                                \
                    __m512i L = _mm512_loadu_si512((const void *)(cols + 64 * (16 * h + 8 * (gq & 1) + k)));           \
                    __m512i H = _mm512_loadu_si512((const void *)(cols + 64 * (32 + 8 * h + k)));                      \
                    __m512i lo = _mm512_and_si512((gq >> 1) ? _mm512_srli_epi16(L, 4) : L, m0f);                       \
                    __m512i hi = gq == 0   ? _mm512_slli_epi16(H, 4)                                                   \
                                 : gq == 1 ? _mm512_slli_epi16(H, 2)                                                   \
                                 : gq == 2 ? H                                                                         \
                                           : _mm512_srli_epi16(H, 2);                                                  \
                    v[k] = _mm512_or_si512(lo, _mm512_and_si512(hi, m30));                                             \
                }                                                                                                      \
                PK_UNROLL for (int t = 0; t < (NT); t++) {                                                             \
                    const pb_block_q8_K *x =                                                                           \
                        (const pb_block_q8_K *)(const void *)((const uint8_t *)a + (size_t)t * a_row) + b;             \
                    const pb_pack_kmeta *m = &meta[t * nb + b];                                                        \
                    __m512i i0v = _mm512_set1_epi32(m->off[2 * c]), i1v = _mm512_set1_epi32(m->off[2 * c + 1]);        \
                    __m512i xb[8];                                                                                     \
                    pk_bcast8(x->qs + 32 * c, xb);                                                                     \
                    PK_UNROLL for (int k = 0; k < 4; k++) i0v = _mm512_dpbusd_epi32(i0v, v[k], xb[k]);                 \
                    PK_UNROLL for (int k = 4; k < 8; k++) i1v = _mm512_dpbusd_epi32(i1v, v[k], xb[k]);                 \
                    s[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0v), fsc0, s[t]);                                       \
                    s[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1v), fsc1, s[t]);                                       \
                }                                                                                                      \
            }                                                                                                          \
            PK_UNROLL for (int t = 0; t < (NT); t++) acc[t] =                                                          \
                _mm512_fmadd_ps(s[t], _mm512_set1_ps(meta[t * nb + b].d), acc[t]);                                     \
        }                                                                                                              \
        PK_UNROLL for (int t = 0; t < (NT); t++) _mm512_storeu_ps(y + t * ldy + g * PB_PACK_ROWS, acc[t]);             \
    }

PK_INLINE void pk_q6k(PK_KARGS) {
    __m512 acc[PK_KNT], s[PK_KNT];
    PK_TILE_Q6K(NT)
}

void pb_gemm_packed_q6_K_avx512(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                                const void *meta_, int nt, float *y, int64_t ldy) {
    const int64_t nb = K / PB_QK_K;
    const pb_pack_kmeta *meta = meta_;
    for (int t0 = 0; t0 < nt; t0 += PK_KNT) { /* at most PK_KNT tokens at once: accumulators stay in registers */
        const int n = nt - t0 < PK_KNT ? nt - t0 : PK_KNT;
        const void *a_t = (const uint8_t *)a + (size_t)t0 * a_row;
        const pb_pack_kmeta *m_t = meta + t0 * nb;
        float *y_t = y + t0 * ldy;
        PK_KSWITCH(pk_q6k, n)
    }
}
