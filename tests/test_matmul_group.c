/* test_matmul_group.c -- pb_matmul_group: matrices of mixed types (packed and plain, quantized and float)
 * over the same rows give, bit for bit, what one pb_matmul / pb_matmul_packed per matrix gives on the
 * RMS-normed rows, for any token and thread count; the fused norm writes pb_rmsnorm's rows; a pair group
 * (GeGLU) equals gelu(gate) * up of the separate products; the scratch size is enough; bad groups are refused. */
#include "base/base.h"
#include "kernels/kernels.h"
#include "pb_test.h"
#include "kernels/matmul.h"
#include "tensor/ops.h"
#include "tensor/quant.h"

#include <math.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A random N x K matrix of `type` (quantized from floats), packed in place when asked and possible. */
static void *make_matrix(int type, int64_t K, int64_t N, bool pack) {
    size_t row = pb_row_size(type, K);
    uint8_t *w = malloc(row * (size_t)N);
    float *f = malloc(sizeof(float) * (size_t)K);
    for (int64_t r = 0; r < N; r++) {
        for (int64_t i = 0; i < K; i++) f[i] = urand() * 0.5f;
        pb_type_get(type)->from_float(f, w + (size_t)r * row, K);
    }
    free(f);
    if (pack && pb_pack_rows(type, w, K, N) != PB_OK) {
        free(w);
        return NULL;
    }
    return w;
}

/* One product alone, the way the model ran it before groups. */
static pb_status single(const pb_mm_op *op, int64_t K, const float *x, int nt, float *y, pb_pool *pool) {
    void *scr = malloc(pb_matmul_scratch_size(op->type, K, nt) + 8);
    pb_status s = op->packed ? pb_matmul_packed(op->w, op->type, K, op->N, x, nt, y, scr, pool)
                             : pb_matmul(op->w, op->type, K, op->N, x, nt, y, scr, pool);
    free(scr);
    return s;
}

#define CANARY 0xA5

static void test_mixed(pb_pool *p2, pb_pool *p3) {
    const int64_t K = 512;
    /* packed Q4_0 and Q8_0 where this CPU has tiles; plain Q6_K, Q4_K; F16 with a height not a multiple of 16 */
    struct {
        int type;
        int64_t N;
        bool pack;
    } spec[] = {{PB_TYPE_Q4_0, 64, true}, {PB_TYPE_Q6_K, 48, false}, {PB_TYPE_F16, 40, false},
                {PB_TYPE_Q8_0, 32, true}, {PB_TYPE_Q4_K, 16, false}, {PB_TYPE_Q5_0, 24, false}};
    const int n_spec = (int)(sizeof spec / sizeof spec[0]);
    pb_mm_op all[6];
    for (int i = 0; i < n_spec; i++) {
        bool pack = spec[i].pack && pb_pack_supported(spec[i].type, K, spec[i].N);
        all[i] = (pb_mm_op){
            .w = make_matrix(spec[i].type, K, spec[i].N, pack), .type = spec[i].type, .N = spec[i].N, .packed = pack};
    }
    const int NT = 40;
    float *x = malloc(sizeof(float) * K * NT), *xn = malloc(sizeof(float) * K * NT),
          *xn2 = malloc(sizeof(float) * K * NT), *nw = malloc(sizeof(float) * K);
    for (int64_t i = 0; i < K * NT; i++) x[i] = urand() * 3.0f;
    for (int64_t i = 0; i < K; i++) nw[i] = 1.0f + urand() * 0.5f;
    /* groups: the first four, the last three, each one alone */
    int starts[] = {0, 3, 0, 1, 2, 3, 4, 5}, counts[] = {4, 3, 1, 1, 1, 1, 1, 1};
    int toks[] = {1, 2, 9, 40};
    int same = 0, total = 0, norm_same = 0, norm_total = 0, canary_ok = 1, runs_ok = 1;
    for (int gi = 0; gi < 8; gi++) {
        pb_mm_op *ops = all + starts[gi];
        int n = counts[gi];
        for (int ti = 0; ti < 4; ti++) {
            int nt = toks[ti];
            size_t ss = pb_matmul_group_scratch_size(ops, n, K, nt);
            uint8_t *scr = malloc(ss + 64);
            for (int withnorm = 0; withnorm < 2; withnorm++)
                for (int th = 0; th < 3; th++) {
                    pb_pool *pool = th == 0 ? NULL : th == 1 ? p2 : p3;
                    float *ys[PB_MM_MAX_OPS];
                    for (int i = 0; i < n; i++) ys[i] = ops[i].y = calloc((size_t)(nt * ops[i].N), sizeof(float));
                    memset(scr, CANARY, ss + 64);
                    pb_mm_norm nm = {.w = nw, .eps = 1e-6f, .out = xn2};
                    runs_ok &= pb_matmul_group(ops, n, K, x, nt, withnorm ? &nm : NULL, NULL, scr, pool) == PB_OK;
                    for (size_t b = ss; b < ss + 64; b++) canary_ok &= scr[b] == CANARY;
                    const float *in = x;
                    if (withnorm) {
                        for (int t = 0; t < nt; t++) pb_rmsnorm(xn + t * K, x + t * K, nw, K, 1e-6f);
                        norm_total++;
                        norm_same += memcmp(xn, xn2, sizeof(float) * (size_t)(K * nt)) == 0;
                        in = xn;
                    }
                    for (int i = 0; i < n; i++) {
                        float *ref = malloc(sizeof(float) * (size_t)(nt * ops[i].N));
                        runs_ok &= single(&ops[i], K, in, nt, ref, pool) == PB_OK;
                        total++;
                        same += memcmp(ref, ys[i], sizeof(float) * (size_t)(nt * ops[i].N)) == 0;
                        free(ref);
                        free(ys[i]);
                    }
                }
            free(scr);
        }
    }
    CHECK(runs_ok, "mixed groups (packed Q4_0/Q8_0 where the CPU has tiles, Q6_K, F16, Q4_K, Q5_0) run");
    CHECK(same == total, "group outputs == one pb_matmul(_packed) per matrix, bit for bit: %d/%d", same, total);
    CHECK(norm_same == norm_total, "fused norm rows == pb_rmsnorm rows: %d/%d", norm_same, norm_total);
    CHECK(canary_ok, "groups write nothing past pb_matmul_group_scratch_size");
    for (int i = 0; i < n_spec; i++) free((void *)all[i].w);
    free(x);
    free(xn);
    free(xn2);
    free(nw);
}

/* gate/up pair with GeGLU: y0 = gelu(gate) * up, y1 = up, as the separate products then pb_kernels_geglu. */
static void test_pair(pb_pool *p2, pb_pool *p3) {
    const int64_t K = 256;
    int types[][2] = {{PB_TYPE_Q4_K, PB_TYPE_Q4_K},
                      {PB_TYPE_Q4_0, PB_TYPE_Q4_0},
                      {PB_TYPE_Q6_K, PB_TYPE_Q4_K},
                      {PB_TYPE_Q8_0, PB_TYPE_F32},
                      {PB_TYPE_Q5_0, PB_TYPE_Q5_0}}; /* plain-row tiles: one token takes all the units at once */
    int64_t Ns[] = {96, 40};
    int toks[] = {1, 5, 17};
    int same = 0, total = 0, close = 0, ctotal = 0, runs_ok = 1;
    float *x = malloc(sizeof(float) * K * 17);
    for (int64_t i = 0; i < K * 17; i++) x[i] = urand() * 2.0f;
    for (int ty = 0; ty < 5; ty++)
        for (int ni = 0; ni < 2; ni++) {
            int64_t N = Ns[ni];
            pb_mm_op ops[2];
            for (int i = 0; i < 2; i++) {
                bool pack = pb_pack_supported(types[ty][i], K, N);
                ops[i] = (pb_mm_op){
                    .w = make_matrix(types[ty][i], K, N, pack), .type = types[ty][i], .N = N, .packed = pack};
            }
            for (int ti = 0; ti < 3; ti++)
                for (int th = 0; th < 3; th++) {
                    int nt = toks[ti];
                    pb_pool *pool = th == 0 ? NULL : th == 1 ? p2 : p3;
                    float *g = malloc(sizeof(float) * N * nt), *u = malloc(sizeof(float) * N * nt);
                    float *rg = malloc(sizeof(float) * N * nt), *ru = malloc(sizeof(float) * N * nt);
                    ops[0].y = g;
                    ops[1].y = u;
                    void *scr = malloc(pb_matmul_group_scratch_size(ops, 2, K, nt));
                    runs_ok &= pb_matmul_group(ops, 2, K, x, nt, NULL, pb_kernels_geglu, scr, pool) == PB_OK;
                    runs_ok &=
                        single(&ops[0], K, x, nt, rg, NULL) == PB_OK && single(&ops[1], K, x, nt, ru, NULL) == PB_OK;
                    bool up_same = memcmp(u, ru, sizeof(float) * N * nt) == 0;
                    if (N % 16 == 0) { /* whole SIMD segments: the same operations as one pass over each row */
                        for (int t = 0; t < nt; t++) pb_kernels_geglu(rg + t * N, ru + t * N, N);
                        total++;
                        same += up_same && memcmp(g, rg, sizeof(float) * N * nt) == 0;
                    } else { /* a partial last segment takes the scalar tail: within float rounding */
                        for (int t = 0; t < nt; t++) pb_geglu(rg + t * N, ru + t * N, N);
                        int ok = up_same;
                        for (int64_t i = 0; i < N * nt; i++) ok &= fabsf(g[i] - rg[i]) <= 1e-5f * (1.0f + fabsf(rg[i]));
                        ctotal++;
                        close += ok;
                    }
                    free(scr);
                    free(g);
                    free(u);
                    free(rg);
                    free(ru);
                }
            for (int i = 0; i < 2; i++) free((void *)ops[i].w);
        }
    free(x);
    CHECK(runs_ok, "GeGLU pair groups run");
    CHECK(same == total, "pair group, heights of whole 16-row units: gelu(gate)*up bit for bit: %d/%d", same, total);
    CHECK(close == ctotal, "pair group, partial last unit: within 1e-5 of gelu(gate)*up: %d/%d", close, ctotal);
}

static void test_errors(void) {
    float y[64] = {0}, x[256] = {0};
    uint8_t scr[4096];
    void *w = make_matrix(PB_TYPE_Q8_0, 256, 16, false);
    pb_mm_op op = {.w = w, .type = PB_TYPE_Q8_0, .N = 16, .y = y};
    pb_mm_op five[5] = {op, op, op, op, op};
    CHECK(pb_matmul_group(five, 0, 256, x, 1, NULL, NULL, scr, NULL) == PB_ERR_INVALID_ARG, "group of 0 refused");
    CHECK(pb_matmul_group(five, 5, 256, x, 1, NULL, NULL, scr, NULL) == PB_ERR_INVALID_ARG &&
              strstr(pb_last_error(), "group"),
          "group of 5 refused: %s", pb_last_error());
    CHECK(pb_matmul_group(five, 3, 256, x, 1, NULL, pb_kernels_geglu, scr, NULL) == PB_ERR_INVALID_ARG,
          "pair of 3 matrices refused: %s", pb_last_error());
    pb_mm_op two[2] = {op, op};
    two[1].N = 8;
    CHECK(pb_matmul_group(two, 2, 256, x, 1, NULL, pb_kernels_geglu, scr, NULL) == PB_ERR_INVALID_ARG,
          "pair of different heights refused");
    pb_mm_op bad = op;
    bad.type = PB_TYPE_IQ2_XXS;
    CHECK(pb_matmul_group(&bad, 1, 256, x, 1, NULL, NULL, scr, NULL) == PB_ERR_UNSUPPORTED, "IQ2_XXS refused: %s",
          pb_last_error());
    CHECK(pb_matmul_group(&op, 1, 100, x, 1, NULL, NULL, scr, NULL) == PB_ERR_INVALID_ARG, "K %% 32 != 0 refused");
    CHECK(pb_matmul_group(&op, 1, 256, x, 1, NULL, NULL, NULL, NULL) == PB_ERR_INVALID_ARG &&
              strstr(pb_last_error(), "scratch"),
          "quantized weights without scratch refused: %s", pb_last_error());
    pb_mm_op pk = op;
    pk.packed = true;
    pk.N = 8;
    CHECK(pb_matmul_group(&pk, 1, 256, x, 1, NULL, NULL, scr, NULL) == PB_ERR_INVALID_ARG,
          "packed with 8 rows refused: %s", pb_last_error());
    CHECK(pb_matmul_group(&op, 1, 256, x, 0, NULL, NULL, scr, NULL) == PB_OK, "0 tokens is a no-op");
    free(w);
}

int main(void) {
    pb_pool *p2 = NULL, *p3 = NULL;
    if (pb_pool_new(2, &p2) || pb_pool_new(3, &p3)) return 1;
    NOTE("kernels: %s", pb_kernels_isa());
    test_mixed(p2, p3);
    test_pair(p2, p3);
    test_errors();
    pb_pool_free(p2);
    pb_pool_free(p3);
    return pbt_failures != 0;
}
