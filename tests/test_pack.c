/* test_pack.c -- packed (row-interleaved) Q4_0 / Q8_0 / Q4_K / Q6_K matrices: packing is lossless (every row reads back
 * byte-identical), the SIMD packed tiles equal the scalar spec bit for bit, pb_matmul_packed equals the
 * spec for any token count and thread count, and agrees with the unpacked pb_matmul to float rounding. */
#include "base/base.h"
#include "kernels/kernels.h"
#include "pb_test.h"
#include "kernels/matmul.h"
#include "tensor/quant.h"

#include <math.h>

static uint64_t rng = 0x243F6A8885A308D3ull;
static float nrand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    double u = ((rng >> 11) + 0.5) / 9007199254740992.0;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    double v = (rng >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* y = the scalar spec over a packed matrix (activations quantized and summed the way pb_matmul_packed does) */
static void run_tiles(int type, pb_gemm_packed_fn fn, int nt_max, const uint8_t *wp, int64_t K, int64_t N,
                      const float *x, int ntok, float *y);
static void spec(int type, const uint8_t *wp, int64_t K, int64_t N, const float *x, int ntok, float *y) {
    pb_gemm_packed_fn fn = type == PB_TYPE_Q4_0   ? pb_gemm_packed_q4_0_ref
                           : type == PB_TYPE_Q8_0 ? pb_gemm_packed_q8_0_ref
                           : type == PB_TYPE_Q4_K ? pb_gemm_packed_q4_K_ref
                                                  : pb_gemm_packed_q6_K_ref;
    run_tiles(type, fn, 1, wp, K, N, x, ntok, y);
}

/* y = a packed tile kernel over the whole matrix, nt_max tokens per call (activations and meta as
 * pb_matmul_packed makes them) */
static void run_tiles(int type, pb_gemm_packed_fn fn, int nt_max, const uint8_t *wp, int64_t K, int64_t N,
                      const float *x, int ntok, float *y) {
    const int at = pb_type_get(type)->vec_dot_type;
    int64_t nb = K / pb_type_get(at)->blck;
    size_t a_row = pb_row_size(at, K);
    uint8_t *act = malloc(a_row * (size_t)ntok);
    pb_pack_ameta *meta = malloc(sizeof *meta * (size_t)(nb * ntok));
    for (int t = 0; t < ntok; t++) {
        pb_type_get(at)->from_float(x + t * K, act + (size_t)t * a_row, K);
        if (at != PB_TYPE_Q8_0) continue; /* the Q4_K spec reads its sums from the Q8_K blocks */
        const pb_block_q8_0 *a = (const pb_block_q8_0 *)(const void *)(act + (size_t)t * a_row);
        for (int64_t b = 0; b < nb; b++) {
            int s = 0;
            for (int i = 0; i < 32; i++) s += a[b].qs[i];
            meta[t * nb + b].bias = -(type == PB_TYPE_Q4_0 ? 8 : 128) * s;
            meta[t * nb + b].d = pb_fp16_to_fp32(a[b].d);
        }
    }
    size_t g_size = pb_row_size(type, K) * PB_PACK_ROWS;
    for (int t = 0; t < ntok; t += nt_max) {
        int nt = ntok - t < nt_max ? ntok - t : nt_max;
        fn(K, wp, N / PB_PACK_ROWS, g_size, act + (size_t)t * a_row, a_row, meta + t * nb, nt, y + t * N, N);
    }
    free(act);
    free(meta);
}

static void test_type(int type, int64_t K, int64_t N, pb_pool *pool) {
    const char *tn = pb_type_name(type);
    size_t row = pb_row_size(type, K), bytes = row * (size_t)N;
    float *wf = malloc(sizeof(float) * (size_t)(K * N));
    for (int64_t i = 0; i < K * N; i++) wf[i] = nrand() * (i % 97 == 0 ? 4.0f : 1.0f);
    uint8_t *w = malloc(bytes), *wp = malloc(bytes);
    for (int64_t r = 0; r < N; r++) pb_type_get(type)->from_float(wf + r * K, w + (size_t)r * row, K);
    if (type == PB_TYPE_Q8_0) { /* extreme bytes: -128 and 127 must survive the +128 offset */
        pb_block_q8_0 *b = (pb_block_q8_0 *)(void *)w;
        b[0].qs[0] = -128, b[0].qs[1] = 127;
    }
    memcpy(wp, w, bytes);
    CHECK(pb_pack_rows(type, wp, K, N) == PB_OK, "%s %lldx%lld packs", tn, (long long)N, (long long)K);
    CHECK(memcmp(w, wp, bytes) != 0 || N == 0, "%s packed layout differs from the file layout", tn);
    int bad = 0;
    uint8_t *rb = malloc(row);
    for (int64_t r = 0; r < N; r++) {
        pb_pack_read_row(type, wp, K, r, rb);
        bad += memcmp(rb, w + (size_t)r * row, row) != 0;
    }
    CHECK(bad == 0, "%s %lldx%lld: every row reads back byte-identical (%d differ)", tn, (long long)N, (long long)K,
          bad);

    const int NT = 19;
    float *x = malloc(sizeof(float) * (size_t)(K * NT));
    for (int64_t i = 0; i < K * NT; i++) x[i] = nrand() * (i % 5 == 0 ? 3.0f : 1.0f);
    float *ys = malloc(sizeof(float) * (size_t)(N * NT)), *yp = malloc(sizeof(float) * (size_t)(N * NT)),
          *yu = malloc(sizeof(float) * (size_t)(N * NT));
    spec(type, wp, K, N, x, NT, ys);
    void *scratch = malloc(pb_matmul_scratch_size(type, K, NT) + 64);
    if (pb_pack_supported(type, K, N)) {
        for (int nt = 1; nt <= NT; nt += (nt < 9 ? 1 : 5)) {
            for (int th = 0; th < 2; th++) {
                memset(yp, 0, sizeof(float) * (size_t)(N * NT));
                pb_status s = pb_matmul_packed(wp, type, K, N, x, nt, yp, scratch, th ? pool : NULL);
                CHECK(s == PB_OK && memcmp(yp, ys, sizeof(float) * (size_t)(N * nt)) == 0,
                      "%s %lldx%lld n_tok %d %s: %s tiles bit-identical to the scalar spec", tn, (long long)N,
                      (long long)K, nt, th ? "2 threads" : "1 thread", pb_kernels_isa());
            }
        }
    } else {
        NOTE("no packed %s kernel on this CPU (%s): spec-only checks", tn, pb_kernels_isa());
    }
#if defined(__x86_64__)
    /* the AVX2 family's packed tiles, called directly (the dispatch picks AVX-512 where it can) */
    const unsigned avx2 = PB_CPU_AVX2 | PB_CPU_FMA | PB_CPU_F16C;
    if ((pb_cpu_features() & avx2) == avx2 && (type == PB_TYPE_Q4_0 || type == PB_TYPE_Q8_0))
        for (int ntm = 1; ntm <= PB_GEMM_NT; ntm += 3) {
            memset(yp, 0, sizeof(float) * (size_t)(N * NT));
            run_tiles(type, type == PB_TYPE_Q4_0 ? pb_gemm_packed_q4_0_avx2 : pb_gemm_packed_q8_0_avx2, ntm, wp, K, N,
                      x, NT, yp);
            CHECK(memcmp(yp, ys, sizeof(float) * (size_t)(N * NT)) == 0,
                  "%s %lldx%lld, %d tokens per tile: avx2 packed tiles bit-identical to the scalar spec", tn,
                  (long long)N, (long long)K, ntm);
        }
#elif defined(__aarch64__)
    /* the NEON packed tiles called directly over all groups at once (pb_matmul_packed may pass fewer) */
    const pb_gemm_packed_fn neon = type == PB_TYPE_Q4_0   ? pb_gemm_packed_q4_0_neon
                                   : type == PB_TYPE_Q8_0 ? pb_gemm_packed_q8_0_neon
                                   : type == PB_TYPE_Q4_K ? pb_gemm_packed_q4_K_neon
                                                          : pb_gemm_packed_q6_K_neon;
    if (neon && (pb_cpu_features() & PB_CPU_DOTPROD))
        for (int ntm = 1; ntm <= PB_GEMM_NT; ntm++) {
            memset(yp, 0, sizeof(float) * (size_t)(N * NT));
            run_tiles(type, neon, ntm, wp, K, N, x, NT, yp);
            CHECK(memcmp(yp, ys, sizeof(float) * (size_t)(N * NT)) == 0,
                  "%s %lldx%lld, %d tokens per tile, %lld groups: neon packed tiles bit-identical to the scalar spec",
                  tn, (long long)N, (long long)K, ntm, (long long)(N / PB_PACK_ROWS));
        }
    /* the i8mm (USMMLA) tiles, where the CPU has FEAT_I8MM (qemu -cpu max does), also called directly */
    const pb_gemm_packed_fn i8mm = type == PB_TYPE_Q4_0   ? pb_gemm_packed_q4_0_i8mm
                                   : type == PB_TYPE_Q8_0 ? pb_gemm_packed_q8_0_i8mm
                                   : type == PB_TYPE_Q4_K ? pb_gemm_packed_q4_K_i8mm
                                                          : pb_gemm_packed_q6_K_i8mm;
    if (i8mm && (pb_cpu_features() & PB_CPU_I8MM))
        for (int ntm = 1; ntm <= PB_GEMM_NT; ntm++) {
            memset(yp, 0, sizeof(float) * (size_t)(N * NT));
            run_tiles(type, i8mm, ntm, wp, K, N, x, NT, yp);
            CHECK(memcmp(yp, ys, sizeof(float) * (size_t)(N * NT)) == 0,
                  "%s %lldx%lld, %d tokens per tile, %lld groups: i8mm packed tiles bit-identical to the scalar spec",
                  tn, (long long)N, (long long)K, ntm, (long long)(N / PB_PACK_ROWS));
        }
    else if (i8mm)
        NOTE("%s: no i8mm on this CPU, USMMLA tiles not run", tn);
#endif
    /* against the unpacked matmul: same integer sums, float order differs */
    CHECK(pb_matmul(w, type, K, N, x, NT, yu, scratch, pool) == PB_OK, "%s unpacked matmul runs", tn);
    double worst = 0;
    for (int t = 0; t < NT; t++)
        for (int64_t r = 0; r < N; r++) {
            double mag = 0;
            for (int64_t k = 0; k < K; k++) mag += fabs((double)wf[r * K + k] * (double)x[t * K + k]);
            double e = fabs((double)ys[t * N + r] - (double)yu[t * N + r]) / (mag + 1e-30);
            if (e > worst) worst = e;
        }
    CHECK(worst < 1e-5, "%s %lldx%lld: packed spec within %.2g of the unpacked matmul (relative to sum|w*x|)", tn,
          (long long)N, (long long)K, worst);
    free(wf), free(w), free(wp), free(rb), free(x), free(ys), free(yp), free(yu), free(scratch);
}

int main(void) {
    unsetenv("PB_NO_PACK_K"); /* the packed K-quant tiles are dispatched (AVX-512) and tested */
    pb_pool *pool = NULL;
    CHECK(pb_pool_new(2, &pool) == PB_OK, "pool of 2 threads");
    const int types[] = {PB_TYPE_Q4_0, PB_TYPE_Q8_0};
    const int64_t shapes[][2] = {{32, 16}, {64, 48}, {2304, 32}, {96, 160}, {416, 32}}; /* 416: 8 + 4 + 1 blocks */
    for (int i = 0; i < 2; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            test_type(types[i], shapes[s][0], shapes[s][1], pool);
    const int64_t kshapes[][2] = {{256, 16}, {512, 48}, {2304, 32}, {256, 528}}; /* 33 groups: odd, > 32 */
    for (size_t s = 0; s < sizeof kshapes / sizeof kshapes[0]; s++) {
        test_type(PB_TYPE_Q4_K, kshapes[s][0], kshapes[s][1], pool);
        test_type(PB_TYPE_Q6_K, kshapes[s][0], kshapes[s][1], pool);
    }
    /* shapes that do not pack are refused, nothing written */
    uint8_t buf[34 * 8] = {0};
    CHECK(pb_pack_rows(PB_TYPE_Q8_0, buf, 32, 8) == PB_ERR_INVALID_ARG, "8 rows do not pack: %s", pb_last_error());
    CHECK(pb_pack_rows(PB_TYPE_Q5_K, buf, 256, 16) == PB_ERR_INVALID_ARG, "q5_K does not pack");
    CHECK(!pb_pack_supported(PB_TYPE_Q8_0, 32, 24), "24 rows: not supported");
    float y[16];
    CHECK(pb_matmul_packed(buf, PB_TYPE_Q8_0, 32, 8, y, 1, y, buf, NULL) != PB_OK, "matmul_packed refuses 8 rows");
    pb_pool_free(pool);
    TEST_DONE();
}
