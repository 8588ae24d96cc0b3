/* test_kernels.c -- every ISA kernel family this CPU can run (avx2, avx512 / neon) against the scalar
 * reference kernels of ref.c: vec_dot per type on random rows of 1..several blocks, the gemm tiles
 * (bit-identical to the family's vec_dot for nr rows x nt = 1..8 tokens), pb_matmul with n_tok 1..9,
 * and the activation quantizers / F16 reads that must equal the tensor room's bit for bit. */
#include "pb_test.h"

#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "tensor/ops.h"
#include "tensor/quant.h"
#include "tensor/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float nrand(void) {
    double u = urand() + 1e-12, v = urand();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

typedef void (*fill_fn)(pb_type_traits *t, int n, pb_gemm_fn *gemm);
typedef struct family {
    const char *name;
    fill_fn fill;
    unsigned need; /* pb_cpu_features bits */
} family;

static const family families[] = {
#if defined(__x86_64__)
    {"avx2", pb_kernels_fill_avx2, PB_CPU_AVX2 | PB_CPU_FMA | PB_CPU_F16C},
    {"avx512", pb_kernels_fill_avx512,
     PB_CPU_AVX2 | PB_CPU_FMA | PB_CPU_F16C | PB_CPU_AVX512F | PB_CPU_AVX512BW | PB_CPU_AVX512VL | PB_CPU_AVX512DQ |
         PB_CPU_AVX512VNNI},
#elif defined(__aarch64__)
    {"neon", pb_kernels_fill_neon, PB_CPU_NEON | PB_CPU_DOTPROD},
#endif
    {NULL, NULL, 0}};

static const int wtypes[] = {PB_TYPE_Q4_K, PB_TYPE_Q6_K, PB_TYPE_Q4_0, PB_TYPE_Q8_0, PB_TYPE_Q5_K,
                             PB_TYPE_Q2_K, PB_TYPE_Q3_K, PB_TYPE_Q4_1, PB_TYPE_Q5_0, PB_TYPE_Q5_1,
                             PB_TYPE_F16,  PB_TYPE_BF16, PB_TYPE_F32};
#define N_WTYPES (int)(sizeof wtypes / sizeof wtypes[0])

static pb_type_traits ref_tab[PB_TYPE_COUNT], isa_tab[PB_TYPE_COUNT];

/* Random weight rows quantized with the reference quantizer; some rows scaled to stress the scales. */
static void make_rows(int type, int64_t K, int nrows, uint8_t *W, float *tmp) {
    const pb_type_traits *t = pb_type_get(type);
    size_t row = pb_row_size(type, K);
    for (int r = 0; r < nrows; r++) {
        float scale = r % 3 == 0 ? 1.0f : r % 3 == 1 ? 0.01f : 40.0f;
        for (int64_t k = 0; k < K; k++) tmp[k] = nrand() * scale + (r % 4 == 3 ? 0.5f * scale : 0.0f);
        t->from_float(tmp, W + row * (size_t)r, K);
    }
}

/* Activation rows in the vec_dot_type (reference quantizer), or raw floats. */
static void make_acts(int type, int64_t K, int ntok, uint8_t *A, float *X) {
    const pb_type_traits *t = pb_type_get(type);
    for (int64_t i = 0; i < K * ntok; i++) X[i] = nrand() * (i % 7 == 0 ? 3.0f : 1.0f);
    if (t->vec_dot_type == PB_TYPE_F32) {
        memcpy(A, X, (size_t)(K * ntok) * 4);
        return;
    }
    size_t arow = pb_row_size(t->vec_dot_type, K);
    const pb_type_traits *at = pb_type_get(t->vec_dot_type);
    for (int tk = 0; tk < ntok; tk++) {
        /* reference quantizer straight from the tensor room, not the (maybe overridden) table entry */
        if (t->vec_dot_type == PB_TYPE_Q8_K)
            pb_quant_q8_K(X + tk * K, A + arow * (size_t)tk, K);
        else if (t->vec_dot_type == PB_TYPE_Q8_0)
            pb_quant_q8_0(X + tk * K, A + arow * (size_t)tk, K);
        else
            at->from_float(X + tk * K, A + arow * (size_t)tk, K);
    }
}

/* Sum |w_k * a_k| in double, the scale of the rounding error a float accumulation may have. */
static double magnitude(int type, int64_t K, const uint8_t *w, const uint8_t *a, float *wd, float *ad) {
    const pb_type_traits *t = pb_type_get(type);
    t->to_float(w, wd, K);
    if (t->vec_dot_type == PB_TYPE_F32)
        memcpy(ad, a, (size_t)K * 4);
    else
        pb_type_get(t->vec_dot_type)->to_float(a, ad, K);
    double m = 0;
    for (int64_t k = 0; k < K; k++) m += fabs((double)wd[k] * (double)ad[k]);
    return m;
}

/* Offsets of the fp16 scale fields in a block of type (-1 ends), for blocks of random bytes. */
static void scale_fields(int type, int off[3]) {
    off[0] = off[1] = off[2] = -1;
    switch (type) {
    case PB_TYPE_Q4_1:
    case PB_TYPE_Q5_1:
    case PB_TYPE_Q4_K:
    case PB_TYPE_Q5_K: off[0] = 0, off[1] = 2; break;
    case PB_TYPE_Q2_K: off[0] = 80, off[1] = 82; break;
    case PB_TYPE_Q3_K: off[0] = 108; break;
    case PB_TYPE_Q6_K: off[0] = 208; break;
    default: off[0] = 0; break; /* Q4_0, Q5_0, Q8_0 */
    }
}

/* Weight blocks of random bytes (every bit pattern of quants, high bits and packed scales, including ones the
 * quantizers never write) with finite random fp16 scales and mins of both signs, against the ref kernels. */
static void test_random_bits(const family *f, const pb_gemm_fn *gemm) {
    enum { NB = 5, ROWS = 40 };
    int n_types = 0, n_cases = 0, n_bad = 0, same_tile = 0, tile_cases = 0;
    for (int ti = 0; ti < N_WTYPES; ti++) {
        const int type = wtypes[ti];
        const pb_type_traits *t = pb_type_get(type);
        if (t->vec_dot_type == PB_TYPE_F32 || isa_tab[type].vec_dot == ref_tab[type].vec_dot) continue;
        n_types++;
        const int64_t K = t->blck * NB;
        const size_t row = pb_row_size(type, K), arow = pb_row_size(t->vec_dot_type, K);
        uint8_t *W = malloc(row * ROWS), *A = malloc(arow * 2);
        float *X = malloc((size_t)K * 2 * 4), *wd = malloc((size_t)K * 4), *ad = malloc((size_t)K * 4);
        int off[3];
        scale_fields(type, off);
        for (size_t i = 0; i < row * ROWS; i++) W[i] = (uint8_t)(urand() * 256);
        for (int r = 0; r < ROWS; r++)
            for (int b = 0; b < NB; b++) {
                uint8_t *blk = W + row * (size_t)r + (size_t)b * t->type_size;
                for (int k = 0; k < 3 && off[k] >= 0; k++) {
                    uint16_t h = pb_fp32_to_fp16((float)((urand() - 0.5) * 0.2));
                    memcpy(blk + off[k], &h, 2);
                }
                if (type == PB_TYPE_Q8_0) /* quants in -127..127, as the contract (kernels.h) says */
                    for (int k = 2; k < 34; k++)
                        if (blk[k] == 0x80) blk[k] = 0x81;
            }
        make_acts(type, K, 2, A, X);
        for (int r = 0; r < ROWS; r++)
            for (int tk = 0; tk < 2; tk++) {
                const uint8_t *w = W + row * (size_t)r, *a = A + arow * (size_t)tk;
                float got, want;
                isa_tab[type].vec_dot(K, &got, w, a);
                ref_tab[type].vec_dot(K, &want, w, a);
                double e = fabs((double)got - (double)want) / (magnitude(type, K, w, a, wd, ad) + 1e-30);
                n_bad += !(e < 1e-5);
                n_cases++;
            }
        if (gemm[type]) {
            float Y[ROWS * 2];
            gemm[type](K, W, row, ROWS, A, arow, 2, Y, ROWS);
            for (int tk = 0; tk < 2; tk++)
                for (int r = 0; r < ROWS; r++) {
                    float v;
                    isa_tab[type].vec_dot(K, &v, W + row * (size_t)r, A + arow * (size_t)tk);
                    same_tile += memcmp(&v, &Y[tk * ROWS + r], 4) == 0;
                    tile_cases++;
                }
        }
        free(W), free(A), free(X), free(wd), free(ad);
    }
    CHECK(n_bad == 0 && n_cases > 0, "%s random-bit weight blocks (%d types): %d of %d dots off ref by >= 1e-5",
          f->name, n_types, n_bad, n_cases);
    CHECK(same_tile == tile_cases, "%s random-bit weight blocks: tiles bit-identical to vec_dot %d/%d", f->name,
          same_tile, tile_cases);
}

/* F16 stores (KV cache): the ISA from_float against pb_fp32_to_fp16 bit for bit: every fp16 value and its
 * neighbours half an ulp away (ties), random bit patterns (NaN, inf, subnormals, overflow), odd lengths */
static void test_f16_store(const family *f) {
    const int n = 65536 * 4 + 200003;
    float *x = malloc(sizeof(float) * (size_t)n);
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    uint32_t s = 12345;
    for (int i = 0; i < 65536; i++) {
        float v = pb_fp16_to_fp32((uint16_t)i);
        uint32_t b;
        memcpy(&b, &v, 4);
        uint32_t nb[4] = {b, b + 0x1000u, b - 0x1000u, b + 0xFFFu}; /* value, tie above, tie below, just below */
        for (int k = 0; k < 4; k++) memcpy(&x[4 * i + k], &nb[k], 4);
    }
    for (int i = 65536 * 4; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t b = s;
        if (i % 3 == 0) b = (b & 0x807FFFFFu) | ((uint32_t)(100 + (s >> 27)) << 23); /* near the fp16 range */
        memcpy(&x[i], &b, 4);
    }
    int bad = 0, lens[] = {n, 1, 7, 8, 15, 16, 17, 33};
    for (int li = 0; li < 8; li++) {
        int len = lens[li], off = li ? 65536 * 3 + li : 0;
        memset(h, 0xAB, sizeof(uint16_t) * (size_t)n);
        isa_tab[PB_TYPE_F16].from_float(x + off, h, len);
        for (int i = 0; i < len; i++) bad += h[i] != pb_fp32_to_fp16(x[off + i]);
        bad += len < n && h[len] != 0xABAB; /* nothing written past n */
    }
    CHECK(bad == 0,
          "%s f16 from_float equals pb_fp32_to_fp16 (all fp16 values and ties, random bits, NaN, odd "
          "lengths): %d differ",
          f->name, bad);
    free(x), free(h);
}

static void test_family(const family *f) {
    pb_gemm_fn gemm[PB_TYPE_COUNT] = {0};
    for (int i = 0; i < PB_TYPE_COUNT; i++) ref_tab[i] = isa_tab[i] = *pb_type_get(i);
    pb_kernels_fill_ref(ref_tab, PB_TYPE_COUNT);
    pb_kernels_fill_ref(isa_tab, PB_TYPE_COUNT);
    f->fill(isa_tab, PB_TYPE_COUNT, gemm);
    enum { MAXB = 7, NR = 19, NT = 9 };
    for (int ti = 0; ti < N_WTYPES; ti++) {
        const int type = wtypes[ti];
        const pb_type_traits *t = pb_type_get(type);
        const int64_t blk = t->blck == 1 ? 32 : t->blck;
        const bool overridden = isa_tab[type].vec_dot != ref_tab[type].vec_dot;
        int cases = 0, same_gemm = 0, gemm_cases = 0;
        double worst = 0;
        /* 32-value blocks up to 10: one-token tiles take chunks of 8, 4 and 1 blocks (arm_neon.c's Q5_0) */
        for (int nb = 1; nb <= (t->blck == 256 ? MAXB : 10); nb += (t->blck == 256 ? 2 : 3)) {
            /* float weights also get lengths that are not a multiple of 8/16 (SIMD tails) */
            int64_t K = blk * nb + (t->blck == 1 ? nb % 3 : 0);
            size_t row = pb_row_size(type, K);
            size_t arow = t->vec_dot_type == PB_TYPE_F32 ? (size_t)K * 4 : pb_row_size(t->vec_dot_type, K);
            uint8_t *W = malloc(row * NR), *A = malloc(arow * NT);
            float *X = malloc((size_t)(K * NT) * 4), *tmp = malloc((size_t)K * 4), *ad = malloc((size_t)K * 4);
            float *Y = malloc(sizeof(float) * NR * NT);
            make_rows(type, K, NR, W, tmp);
            make_acts(type, K, NT, A, X);
            for (int r = 0; r < NR; r++) {
                for (int tk = 0; tk < NT; tk++) {
                    const uint8_t *w = W + row * (size_t)r, *a = A + arow * (size_t)tk;
                    float got, want;
                    isa_tab[type].vec_dot(K, &got, w, a);
                    ref_tab[type].vec_dot(K, &want, w, a);
                    double e = fabs((double)got - (double)want) / (magnitude(type, K, w, a, tmp, ad) + 1e-30);
                    if (!(e <= worst)) worst = e; /* NaN counts as worst */
                    cases++;
                }
            }
            if (gemm[type]) {
                for (int nt = 1; nt <= PB_GEMM_NT; nt++) {
                    for (int nr = 1; nr <= NR; nr += 6) {
                        for (int i = 0; i < NR * NT; i++) Y[i] = NAN;
                        gemm[type](K, W, row, nr, A, arow, nt, Y, NR);
                        for (int tk = 0; tk < nt; tk++)
                            for (int r = 0; r < nr; r++) {
                                float v;
                                isa_tab[type].vec_dot(K, &v, W + row * (size_t)r, A + arow * (size_t)tk);
                                same_gemm += memcmp(&v, &Y[tk * NR + r], 4) == 0;
                                gemm_cases++;
                            }
                        /* nothing outside the tile written */
                        int outside = 0;
                        for (int tk = 0; tk < NT; tk++)
                            for (int r = 0; r < NR; r++)
                                if ((tk >= nt || r >= nr) && !isnan(Y[tk * NR + r])) outside++;
                        same_gemm -= outside;
                    }
                }
            }
            free(W), free(A), free(X), free(tmp), free(ad), free(Y);
        }
        CHECK(worst < 1e-5, "%s %s vec_dot%s vs ref over %d cases (K = 1..%d blocks): worst |diff|/sum|w*a| %.1e",
              f->name, t->name, overridden ? "" : " (ref itself)", cases, t->blck == 256 ? MAXB : 10, worst);
        if (gemm[type])
            CHECK(same_gemm == gemm_cases, "%s %s gemm tiles bit-identical to vec_dot: %d/%d (nr 1..19, nt 1..8)",
                  f->name, t->name, same_gemm, gemm_cases);
    }
    /* every quantized weight type has this family's own vec_dot and tile (none left on the scalar ref) */
    int n_quant = 0, n_simd = 0;
    for (int ti = 0; ti < N_WTYPES; ti++) {
        if (pb_type_get(wtypes[ti])->vec_dot_type == PB_TYPE_F32) continue;
        n_quant++;
        n_simd += gemm[wtypes[ti]] != NULL && isa_tab[wtypes[ti]].vec_dot != ref_tab[wtypes[ti]].vec_dot;
    }
    CHECK(n_simd == n_quant, "%s: %d of %d quantized weight types have their own vec_dot and gemm tile", f->name,
          n_simd, n_quant);

    test_random_bits(f, gemm);

    /* activation quantizers: bit-identical to the tensor room's reference, including ties and odd blocks */
    for (int qi = 0; qi < 2; qi++) {
        int qt = qi ? PB_TYPE_Q8_K : PB_TYPE_Q8_0;
        int64_t K = qi ? 256 * 12 : 32 * 40;
        size_t rs = pb_row_size(qt, K);
        float *x = malloc((size_t)K * 4);
        uint8_t *r1 = malloc(rs), *r2 = malloc(rs);
        int same = 0, rounds = 60;
        for (int round = 0; round < rounds; round++) {
            int64_t bl = qi ? 256 : 32;
            for (int64_t i = 0; i < K; i++) x[i] = nrand() * (float)(1 + round % 5);
            for (int64_t b = 0; b < K / bl; b++) { /* special blocks */
                float *xb = x + b * bl;
                switch ((b + round) % 8) {
                case 0: /* exact ties: values k+0.5 of the quantization step */
                    xb[0] = 127.0f;
                    for (int64_t i = 1; i < bl; i++) xb[i] = (float)((int)(urand() * 250) - 125) + 0.5f;
                    break;
                case 1: memset(xb, 0, (size_t)bl * 4); break; /* all zero */
                case 2: xb[bl / 2] = NAN; break;
                case 3: xb[3] = INFINITY; break;
                case 4: /* the same |max| with both signs: the first one decides the sign (Q8_K) */
                    xb[5] = -9.0f, xb[9] = 9.0f;
                    break;
                case 5: xb[bl - 1] = 1e-39f, xb[0] = 1e-38f; break; /* tiny, subnormal */
                default: break;
                }
            }
            if (qi) {
                pb_quant_q8_K(x, r1, K);
            } else {
                pb_quant_q8_0(x, r1, K);
            }
            isa_tab[qt].from_float(x, r2, K);
            same += memcmp(r1, r2, rs) == 0;
        }
        CHECK(same == rounds, "%s %s activation quantizer bit-identical to the reference: %d/%d rows", f->name,
              qi ? "q8_K" : "q8_0", same, rounds);
        /* a block holding NaN or inf: scale NaN (values 0), so a product with it is NaN, never plain numbers (Q8_0's
         * fmaxf skipped the NaN, Q8_K made the block zeros: NaN activations turned into a finite wrong answer) */
        int nan_scale = 0, blocks = 0;
        for (int64_t b = 0; b < 4; b++) {
            for (int64_t i = 0; i < K; i++) x[i] = nrand();
            const int64_t bl = qi ? 256 : 32;
            x[b * bl + 7] = b % 2 ? INFINITY : b == 2 ? -NAN : NAN;
            isa_tab[qt].from_float(x, r2, K);
            float *dq = malloc((size_t)K * 4);
            ref_tab[qt].to_float(r2, dq, K);
            int n_nan = 0;
            for (int64_t i = 0; i < K; i++) n_nan += isnan(dq[i]) != 0;
            nan_scale += n_nan == bl && isnan(dq[b * bl]) && !isnan(dq[((b + 1) % (K / bl)) * bl]);
            blocks++;
            free(dq);
        }
        CHECK(nan_scale == blocks,
              "%s %s activation quantizer: a block with NaN or inf dequantizes to NaN (scale NaN), the others "
              "finite: %d/%d",
              f->name, qi ? "q8_K" : "q8_0", nan_scale, blocks);
        free(x), free(r1), free(r2);
    }

    /* F16 reads (KV cache): all 65536 values, bit for bit */
    {
        uint16_t *h = malloc(65536 * 2 + 6);
        float *o = malloc(65539 * 4);
        for (int i = 0; i < 65536 + 3; i++) h[i] = (uint16_t)(i * 40503u);
        for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
        isa_tab[PB_TYPE_F16].to_float(h, o, 65539);
        int bad = 0;
        for (int i = 0; i < 65539; i++) {
            float want = pb_fp16_to_fp32(h[i]);
            bad += memcmp(&want, &o[i], 4) != 0;
        }
        CHECK(bad == 0, "%s f16 to_float equals pb_fp16_to_fp32 for all 65536 values (+3 tail): %d differ", f->name,
              bad);
        free(h), free(o);
    }
    test_f16_store(f);
}

/* the dispatched attention/FFN helpers against plain C: dot, mad, GeGLU (exp form vs ops.c's tanhf form) */
static void test_helpers(void) {
    enum { N = 9219 }; /* odd length: SIMD tails */
    float *a = malloc(N * 4), *b = malloc(N * 4), *g1 = malloc(N * 4), *g2 = malloc(N * 4);
    for (int i = 0; i < N; i++) a[i] = nrand() * 4.0f, b[i] = nrand();
    a[0] = 30.0f, a[1] = -30.0f, a[2] = 0.0f, a[3] = -1e-30f, a[4] = 100.0f, a[5] = -100.0f;
    double dot = 0, mag = 0;
    for (int i = 0; i < N; i++) dot += (double)a[i] * (double)b[i], mag += fabs((double)a[i] * (double)b[i]);
    float got = pb_kernels_dot_f32(a, b, N);
    CHECK(fabs((double)got - dot) <= 1e-6 * mag, "pb_kernels_dot_f32 (n = %d): |err| %.2e of sum|a*b| %.2e", N,
          fabs((double)got - dot), mag);
    memcpy(g1, b, N * 4);
    pb_kernels_mad_f32(g1, a, 0.37f, N);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += fabsf(g1[i] - (b[i] + 0.37f * a[i])) > 1e-6f * (fabsf(b[i]) + fabsf(a[i]));
    CHECK(bad == 0, "pb_kernels_mad_f32: %d of %d values off", bad, N);
    /* fp16 second operand (decode attention over an F16 cache): equal to converting first, bit for bit */
    {
        uint16_t hrow[1024];
        float conv[1024];
        int diff = 0;
        for (int n = 1; n <= 1024; n += (n < 70 ? 1 : 97)) {
            for (int i = 0; i < n; i++) hrow[i] = pb_fp32_to_fp16(nrand() * 3.0f);
            pb_type_get(PB_TYPE_F16)->to_float(hrow, conv, n);
            float d1 = pb_kernels_dot_f16(a, hrow, n), d2 = pb_kernels_dot_f32(a, conv, n);
            diff += memcmp(&d1, &d2, 4) != 0;
            memcpy(g1, b, (size_t)n * 4), memcpy(g2, b, (size_t)n * 4);
            pb_kernels_mad_f16(g1, hrow, -0.61f, n);
            pb_kernels_mad_f32(g2, conv, -0.61f, n);
            diff += memcmp(g1, g2, (size_t)n * 4) != 0;
        }
        CHECK(diff == 0,
              "pb_kernels_dot_f16 / mad_f16 equal convert-then-dot_f32 / mad_f32 bit for bit (n 1..1024): %d "
              "cases differ",
              diff);
    }
    /* mad over rows (attention values of a chunk of keys): bit-identical to one mad per row, in order */
    for (int n = 1, diff = 0; n <= 264; n += (n < 40 ? 1 : 37)) {
        for (int nk = 1; nk <= 33; nk += 8) {
            float w[33];
            for (int k = 0; k < nk; k++) w[k] = nrand();
            memcpy(g1, b, (size_t)n * 4), memcpy(g2, b, (size_t)n * 4);
            pb_kernels_mad_f32_rows(g1, a, (size_t)n + 3, w, nk, n);
            for (int k = 0; k < nk; k++) pb_kernels_mad_f32(g2, a + (size_t)k * (size_t)(n + 3), w[k], n);
            diff += memcmp(g1, g2, (size_t)n * 4) != 0;
        }
        if (n + (n < 40 ? 1 : 37) > 264)
            CHECK(diff == 0,
                  "pb_kernels_mad_f32_rows equals a pb_kernels_mad_f32 per row, bit for bit (n 1..264, 1..33 "
                  "rows): %d cases differ",
                  diff);
    }
    /* prefill attention tiles: scores of several query rows x keys, values of several states (with the online
     * softmax's rescale), each bit-identical to the per-row dot / rescale + mad rows (so prefill == decode) */
    {
        enum { NQ = 13, NKEY = 7 };
        const float *qp[NQ], *ap[NQ];
        float *yp[NQ], s1[NQ * NKEY], cs[NQ], ys1[NQ * 300], ys2[NQ * 300];
        int diff = 0, diff16 = 0, cases = 0;
        for (int n = 1; n <= 300; n += (n < 70 ? 1 : 29)) {
            for (int nq = 1; nq <= NQ; nq += (nq < 9 ? 1 : 4)) {
                int nk = 1 + (n + nq) % NKEY;
                for (int i = 0; i < nq; i++) qp[i] = a + (size_t)i * 311 + (size_t)(n % 5);
                pb_kernels_dot_f32_tile(qp, nq, b + 17, (size_t)n + 5, nk, n, s1, NKEY);
                for (int i = 0; i < nq; i++)
                    for (int k = 0; k < nk; k++) {
                        float d = pb_kernels_dot_f32(qp[i], b + 17 + (size_t)k * (size_t)(n + 5), n);
                        diff += memcmp(&d, &s1[i * NKEY + k], 4) != 0;
                    }
                for (int i = 0; i < nq; i++) {
                    ap[i] = b + 1000 + (size_t)i * 40, yp[i] = ys1 + (size_t)i * 300;
                    cs[i] = i % 3 == 0 ? 1.0f : i % 3 == 1 ? 0.0f : expf(-nrand() * nrand());
                    memcpy(yp[i], a + 5000 + (size_t)i * 300, (size_t)n * 4);
                    memcpy(ys2 + (size_t)i * 300, yp[i], (size_t)n * 4);
                }
                pb_kernels_mad_f32_tile(yp, cs, ap, nq, a + 9, (size_t)n + 2, nk, n);
                for (int i = 0; i < nq; i++) {
                    pb_vec_scale(ys2 + (size_t)i * 300, n, cs[i]);
                    pb_kernels_mad_f32_rows(ys2 + (size_t)i * 300, a + 9, (size_t)n + 2, ap[i], nk, n);
                    diff += memcmp(ys1 + (size_t)i * 300, ys2 + (size_t)i * 300, (size_t)n * 4) != 0;
                }
                /* fp16 rows (decode over an F16 cache): equal to converting them first */
                enum { LD = 301 };
                static uint16_t kh[NKEY * LD];
                static float kc[NKEY * LD];
                for (int i = 0; i < nk * LD; i++) kh[i] = pb_fp32_to_fp16(nrand() * 2.0f);
                pb_type_get(PB_TYPE_F16)->to_float(kh, kc, nk * LD);
                float s2[NQ * NKEY];
                pb_kernels_dot_f16_tile(qp, nq, kh, LD, nk, n, s1, NKEY);
                pb_kernels_dot_f32_tile(qp, nq, kc, LD, nk, n, s2, NKEY);
                for (int i = 0; i < nq; i++) diff16 += memcmp(s1 + i * NKEY, s2 + i * NKEY, (size_t)nk * 4) != 0;
                for (int i = 0; i < nq; i++) {
                    memcpy(ys1 + (size_t)i * 300, a + 5000 + (size_t)i * 300, (size_t)n * 4);
                    memcpy(ys2 + (size_t)i * 300, a + 5000 + (size_t)i * 300, (size_t)n * 4);
                }
                pb_kernels_mad_f16_tile(yp, cs, ap, nq, kh, LD, nk, n);
                for (int i = 0; i < nq; i++) yp[i] = ys2 + (size_t)i * 300;
                pb_kernels_mad_f32_tile(yp, cs, ap, nq, kc, LD, nk, n);
                for (int i = 0; i < nq; i++) {
                    yp[i] = ys1 + (size_t)i * 300;
                    diff16 += memcmp(ys1 + (size_t)i * 300, ys2 + (size_t)i * 300, (size_t)n * 4) != 0;
                }
                cases++;
            }
        }
        CHECK(diff == 0,
              "pb_kernels_dot_f32_tile / mad_f32_tile equal per-row dot_f32 / vec_scale + mad_f32_rows bit for bit "
              "(%d cases, n 1..300, 1..13 rows, 1..7 keys): %d differ",
              cases, diff);
        CHECK(diff16 == 0,
              "pb_kernels_dot_f16_tile / mad_f16_tile on fp16 rows equal the float tiles on the converted "
              "rows, bit for bit (%d cases): %d differ",
              cases, diff16);
    }
    memcpy(g1, a, N * 4);
    memcpy(g2, a, N * 4);
    pb_geglu(g1, b, N);
    pb_kernels_geglu(g2, b, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double e = fabs((double)g1[i] - (double)g2[i]) / (fabs((double)a[i] * (double)b[i]) + 1e-30);
        if (!(e <= worst)) worst = e;
    }
    CHECK(worst < 2e-6, "pb_kernels_geglu (%s) vs ops.c pb_geglu: worst |diff|/|x*up| %.1e", pb_kernels_isa(), worst);
    /* attention weights of a key chunk: soft-cap 50 (and none), running max, exp(s - max), sum; against
     * tanh/exp in double. Scores span the soft-cap's small-argument and saturated ranges. */
    for (int capped = 0; capped < 2; capped++)
        for (int n = 1; n <= 37; n += 6) {
            float s[40], ref[40], mx = capped ? 3.0f : -INFINITY, mref = mx;
            for (int i = 0; i < n; i++) s[i] = nrand() * (i % 5 == 0 ? 0.05f : i % 5 == 1 ? 80.0f : 6.0f);
            double sum = 0;
            for (int i = 0; i < n; i++) {
                ref[i] = capped ? (float)(50.0 * tanh((double)s[i] / 50.0)) : s[i];
                mref = ref[i] > mref ? ref[i] : mref;
            }
            for (int i = 0; i < n; i++) sum += exp((double)ref[i] - (double)mref);
            float sg = pb_kernels_att_exp(s, n, capped ? 50.0f : 0.0f, &mx);
            /* a weight inherits the float rounding of its score and of the max (2 ulps each, relative ~2.4e-7 of
             * their size: scores near the soft-cap of 50 round by ~4e-6), then exp's own error */
            double we = 0, over = 0;
            for (int i = 0; i < n; i++) {
                double w = exp((double)ref[i] - (double)mref), e = fabs((double)s[i] - w);
                we = fmax(we, e);
                over = fmax(over, e - (2e-6 + w * 2.4e-7 * (fabs((double)ref[i]) + fabs((double)mref))));
            }
            CHECK(fabs((double)mx - (double)mref) <= 2e-6 * fabs((double)mref) + 1e-6 && over <= 0 &&
                      fabs((double)sg - sum) <= 2e-6 * sum,
                  "pb_kernels_att_exp (%s) n %d cap %s: max %g (ref %g), weights off by %.1e, sum %g (ref %g)",
                  pb_kernels_isa(), n, capped ? "50" : "none", (double)mx, (double)mref, we, (double)sg, sum);
        }
    /* final-logit soft-cap 30 over a vocabulary-sized row: against tanh in double, relative and near 0 */
    {
        const int V = 4099;
        float *l = malloc(sizeof(float) * V), *l0 = malloc(sizeof(float) * V);
        for (int i = 0; i < V; i++) l0[i] = l[i] = nrand() * (i % 3 == 0 ? 0.01f : i % 3 == 1 ? 60.0f : 8.0f);
        pb_kernels_softcap(l, V, 30.0f);
        double we = 0;
        for (int i = 0; i < V; i++) {
            double r = 30.0 * tanh((double)l0[i] / 30.0);
            we = fmax(we, fabs((double)l[i] - r) / (fabs(r) + 1e-30));
        }
        CHECK(we < 2e-6, "pb_kernels_softcap (%s) cap 30, %d logits: worst relative error %.1e", pb_kernels_isa(), V,
              we);
        free(l), free(l0);
    }
    /* NaN stays NaN through the exp-based kernels, in the vector lanes as in the scalar tail: the clamp of their exp
     * made a soft-capped NaN -cap (a NaN logit row answered token 0), an attention over NaN scores weigh every key
     * alike (finite garbage), and a NaN GeGLU gate finite */
    {
        enum { NN = 21 }; /* 16 vector lanes (also on NEON) and a scalar tail of 5 */
        float l[NN], sc[NN], gt[NN], up[NN], mx = -INFINITY;
        for (int i = 0; i < NN; i++) l[i] = sc[i] = gt[i] = nrand(), up[i] = 1.0f;
        l[3] = sc[3] = gt[3] = NAN, l[19] = sc[19] = gt[19] = NAN;
        pb_kernels_softcap(l, NN, 30.0f);
        float sum = pb_kernels_att_exp(sc, NN, 50.0f, &mx);
        pb_kernels_geglu(gt, up, NN);
        int kept = 0, finite = 0;
        for (int i = 0; i < NN; i++) {
            const bool nan_in = i == 3 || i == 19;
            kept += nan_in && isnan(l[i]) && isnan(sc[i]) && isnan(gt[i]);
            finite += !nan_in && isfinite(l[i]) && isfinite(sc[i]) && isfinite(gt[i]);
        }
        CHECK(kept == 2 && finite == NN - 2 && isnan(sum) && isfinite(mx),
              "NaN in, NaN out (%s): softcap, att_exp (sum %g) and geglu keep NaN lanes NaN, the others finite (%d/2 "
              "NaN, %d/%d finite)",
              pb_kernels_isa(), (double)sum, kept, finite, NN - 2);
    }
    free(a), free(b), free(g1), free(g2);
}

/* pb_matmul with the dispatched table: n_tok 1..9 (tiles of 8 plus tails), several thread counts. */
static void test_matmul_dispatched(void) {
    pb_pool *p2 = NULL;
    CHECK(pb_pool_new(2, &p2) == PB_OK, "pool of 2 threads");
    const int types[] = {PB_TYPE_Q4_K, PB_TYPE_Q6_K, PB_TYPE_Q4_0, PB_TYPE_Q8_0, PB_TYPE_Q5_K,
                         PB_TYPE_Q3_K, PB_TYPE_Q2_K, PB_TYPE_Q4_1, PB_TYPE_Q5_0, PB_TYPE_Q5_1};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int type = types[ti];
        const pb_type_traits *t = pb_kernels_type(type);
        int64_t K = t->blck * 3, N = 45;
        size_t row = pb_row_size(type, K), arow = pb_row_size(t->vec_dot_type, K);
        uint8_t *W = malloc(row * (size_t)N), *xa = malloc(arow);
        float *tmp = malloc((size_t)K * 4), *x = malloc((size_t)K * 9 * 4), *y = malloc((size_t)N * 9 * 4);
        void *scratch = malloc(pb_matmul_scratch_size(type, K, 9));
        make_rows(type, K, (int)N, W, tmp);
        for (int64_t i = 0; i < K * 9; i++) x[i] = nrand();
        int same = 0, total = 0, ok = 1;
        for (int nt = 1; nt <= 9; nt++) {
            ok &= pb_matmul(W, type, K, N, x, nt, y, scratch, p2) == PB_OK;
            for (int tk = 0; tk < nt; tk++) {
                t = pb_kernels_type(type);
                pb_kernels_type(t->vec_dot_type)->from_float(x + tk * K, xa, K);
                for (int64_t r = 0; r < N; r++) {
                    float v;
                    t->vec_dot(K, &v, W + row * (size_t)r, xa);
                    same += v == y[tk * N + r];
                    total++;
                }
            }
        }
        CHECK(ok && same == total, "%s pb_matmul (2 threads, n_tok 1..9) == dispatched vec_dot: %d/%d", t->name, same,
              total);
        free(W), free(xa), free(tmp), free(x), free(y), free(scratch);
    }
    pb_pool_free(p2);
}

int main(void) {
    unsigned f = pb_cpu_features();
    NOTE("dispatched kernel family: %s (PB_CPU=%s)", pb_kernels_isa(), getenv("PB_CPU") ? getenv("PB_CPU") : "");
    int ran = 0;
    for (const family *fam = families; fam->name; fam++) {
        if ((f & fam->need) != fam->need) {
            NOTE("%s kernels skipped: this CPU (or PB_CPU) lacks them", fam->name);
            continue;
        }
        test_family(fam);
        ran++;
    }
    /* the scalar family always runs (ref against itself is trivial, so only the matmul path is checked) */
    test_matmul_dispatched();
    test_helpers();
    CHECK(ran > 0 || getenv("PB_CPU") || !families[0].name, "at least one ISA family ran (%d)", ran);
    TEST_DONE();
}
