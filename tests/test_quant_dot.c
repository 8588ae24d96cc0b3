/* test_quant_dot.c -- every weight type's vec_dot (as dispatched, and the ref kernel) against a float dot of
 * the dequantized operands, and pb_matmul against a naive loop with pools of 1 and 2 threads. */
#include "kernels/kernels.h"
#include "pb_test.h"
#include "kernels/matmul.h"
#include "tensor/quant.h"
#include "tensor/types.h"

#include <math.h>

static uint64_t rng = 0x243F6A8885A308D3ull;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand(void) { return (float)(sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand())); }

static const int wtypes[] = {PB_TYPE_F32,  PB_TYPE_F16,  PB_TYPE_BF16, PB_TYPE_Q4_0, PB_TYPE_Q4_1,
                             PB_TYPE_Q5_0, PB_TYPE_Q5_1, PB_TYPE_Q8_0, PB_TYPE_Q2_K, PB_TYPE_Q3_K,
                             PB_TYPE_Q4_K, PB_TYPE_Q5_K, PB_TYPE_Q6_K};
#define N_WTYPES (int)(sizeof wtypes / sizeof wtypes[0])

/* Activation operand as the kernel sees it: quantized with from_float of vec_dot_type (or f32). */
static void *make_act(const pb_type_traits *w, const float *x, int64_t K, float *deq) {
    const pb_type_traits *a = pb_kernels_type(w->vec_dot_type);
    void *buf = malloc(pb_row_size(w->vec_dot_type, K));
    a->from_float(x, buf, K);
    a->to_float(buf, deq, K);
    return buf;
}

static void test_vec_dot(void) {
    pb_type_traits ref[PB_TYPE_COUNT];
    memcpy(ref, pb_kernels_type(0), sizeof ref); /* row 0 is the start of the table */
    pb_kernels_fill_ref(ref, PB_TYPE_COUNT);
    const int mults[] = {1, 3, 7, 13};
    for (int ti = 0; ti < N_WTYPES; ti++) {
        const pb_type_traits *t = pb_kernels_type(wtypes[ti]);
        int64_t blck = t->blck == 1 ? 32 : t->blck;
        double worst = 0, worst_ref = 0;
        int n_cases = 0, ref_same = 0;
        for (int mi = 0; mi < 4; mi++) {
            int64_t K = blck * mults[mi] + (t->blck == 1 ? 5 : 0); /* odd lengths for float types */
            for (int rows = 0; rows < 3; rows++) {
                float *w = malloc((size_t)K * 4), *x = malloc((size_t)K * 4), *wd = malloc((size_t)K * 4),
                      *xd = malloc((size_t)K * 4);
                float scale = rows == 0 ? 1.0f : rows == 1 ? 0.01f : 30.0f;
                for (int64_t k = 0; k < K; k++) {
                    w[k] = scale * nrand() + (rows == 2 ? 0.3f * scale : 0.0f); /* offset exercises the mins */
                    x[k] = nrand();
                }
                void *wq = malloc(pb_row_size(wtypes[ti], K));
                t->from_float(w, wq, K);
                t->to_float(wq, wd, K);
                void *xq = make_act(t, x, K, xd);
                double want = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    want += (double)wd[k] * (double)xd[k];
                    mag += fabs((double)wd[k] * (double)xd[k]);
                }
                float got = 0, got_ref = 0;
                t->vec_dot(K, &got, wq, xq);
                ref[wtypes[ti]].vec_dot(K, &got_ref, wq, xq);
                double err = fabs((double)got - want) / (mag + 1e-30);
                double err_ref = fabs((double)got_ref - want) / (mag + 1e-30);
                if (err > worst) worst = err;
                if (err_ref > worst_ref) worst_ref = err_ref;
                ref_same += got == got_ref;
                n_cases++;
                free(w), free(x), free(wd), free(xd), free(wq), free(xq);
            }
        }
        CHECK(worst_ref < 2e-6, "%s ref vec_dot vs dequantized float dot over %d cases: worst rel err %.2e", t->name,
              n_cases, worst_ref);
        CHECK(worst < 2e-6, "%s dispatched vec_dot (%d/%d equal to ref): worst rel err %.2e", t->name, ref_same,
              n_cases, worst);
    }
}

/* End-to-end accuracy: quantized dots vs the exact dots of the original (unquantized) N(0,1) values, RMS
 * over 48 rows. For independent errors the expected RMS of (dot error)/sqrt(K) is sqrt(ew^2 + ea^2), with
 * ew, ea the per-value RMSE of the weight and activation formats on N(0,1) data (measured by test_quant's
 * round trip); allow 1.5x. */
static void test_dot_accuracy(void) {
    enum { K = 2304, R = 48 };
    static float w[R][K], x[K];
    for (int k = 0; k < K; k++) x[k] = nrand();
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++) w[r][k] = nrand();
    static const struct {
        int type;
        double ew;
    } cases[] = {{PB_TYPE_F32, 0},      {PB_TYPE_F16, 0.00021}, {PB_TYPE_BF16, 0.0017}, {PB_TYPE_Q4_0, 0.086},
                 {PB_TYPE_Q4_1, 0.078}, {PB_TYPE_Q5_0, 0.043},  {PB_TYPE_Q5_1, 0.038},  {PB_TYPE_Q8_0, 0.0054},
                 {PB_TYPE_Q2_K, 0.297}, {PB_TYPE_Q3_K, 0.151},  {PB_TYPE_Q4_K, 0.0714}, {PB_TYPE_Q5_K, 0.0361},
                 {PB_TYPE_Q6_K, 0.0177}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const pb_type_traits *t = pb_kernels_type(cases[c].type);
        void *wq = malloc(pb_row_size(cases[c].type, K)), *xq = malloc(pb_row_size(t->vec_dot_type, K));
        const void *xa = x;
        double ea = 0;
        if (t->vec_dot_type != PB_TYPE_F32) {
            pb_kernels_type(t->vec_dot_type)->from_float(x, xq, K);
            xa = xq;
            ea = t->vec_dot_type == PB_TYPE_Q8_K ? 0.0070 : 0.0054;
        }
        double se = 0;
        for (int r = 0; r < R; r++) {
            double exact = 0;
            for (int k = 0; k < K; k++) exact += (double)w[r][k] * (double)x[k];
            t->from_float(w[r], wq, K);
            float got;
            t->vec_dot(K, &got, wq, xa);
            se += ((double)got - exact) * ((double)got - exact);
        }
        double rms = sqrt(se / R) / sqrt((double)K), want = sqrt(cases[c].ew * cases[c].ew + ea * ea);
        CHECK(rms <= 1.5 * want + 1e-6, "%s dot of N(0,1) rows of %d: rms |err|/sqrt(K) = %.5f (expected ~%.5f)",
              t->name, K, rms, want);
        free(wq), free(xq);
    }
}

static void test_matmul(void) {
    pb_pool *p1 = NULL, *p2 = NULL;
    CHECK(pb_pool_new(1, &p1) == PB_OK && pb_pool_new(2, &p2) == PB_OK, "pools of 1 and 2 threads");
    for (int ti = 0; ti < N_WTYPES; ti++) {
        const pb_type_traits *t = pb_kernels_type(wtypes[ti]);
        int64_t K = (t->blck == 1 ? 32 : t->blck) * 3, N = 37, T = 5;
        size_t row = pb_row_size(wtypes[ti], K);
        uint8_t *W = malloc(row * (size_t)N);
        float *wf = malloc((size_t)K * 4), *x = malloc((size_t)(K * T) * 4);
        for (int64_t r = 0; r < N; r++) {
            for (int64_t k = 0; k < K; k++) wf[k] = nrand();
            t->from_float(wf, W + row * (size_t)r, K);
        }
        for (int64_t i = 0; i < K * T; i++) x[i] = nrand();
        size_t ss = pb_matmul_scratch_size(wtypes[ti], K, T);
        CHECK((ss == 0) == (t->vec_dot_type == PB_TYPE_F32) &&
                  (ss == 0 ||
                   ss == PB_PAD((size_t)T *
                                    (pb_row_size(t->vec_dot_type, K) +
                                     (t->vec_dot_type == PB_TYPE_Q8_0   ? (size_t)(K / 32) * sizeof(pb_pack_ameta)
                                      : t->vec_dot_type == PB_TYPE_Q8_K ? (size_t)(K / 256) * sizeof(pb_pack_kmeta)
                                                                        : 0)),
                                8)),
              "%s scratch size %zu", t->name, ss);
        void *scratch = ss ? malloc(ss) : NULL;
        float *y0 = malloc((size_t)(N * T) * 4), *y1 = malloc((size_t)(N * T) * 4), *y2 = malloc((size_t)(N * T) * 4);
        pb_status s0 = pb_matmul(W, wtypes[ti], K, N, x, T, y0, scratch, NULL);
        pb_status s1 = pb_matmul(W, wtypes[ti], K, N, x, T, y1, scratch, p1);
        pb_status s2 = pb_matmul(W, wtypes[ti], K, N, x, T, y2, scratch, p2);
        CHECK(s0 == PB_OK && s1 == PB_OK && s2 == PB_OK, "%s matmul runs", t->name);
        CHECK(memcmp(y0, y1, (size_t)(N * T) * 4) == 0 && memcmp(y0, y2, (size_t)(N * T) * 4) == 0,
              "%s matmul identical with no pool, 1 and 2 threads", t->name);
        /* naive: activation row quantized on its own, then one dot per (token, row); and a float64 check */
        const pb_type_traits *at = pb_kernels_type(t->vec_dot_type);
        size_t arow = pb_row_size(t->vec_dot_type, K);
        uint8_t *xa = malloc(arow);
        float *wd = malloc((size_t)K * 4), *xd = malloc((size_t)K * 4);
        int same = 0;
        double worst = 0;
        for (int64_t tk = 0; tk < T; tk++) {
            at->from_float(x + tk * K, xa, K);
            at->to_float(xa, xd, K);
            for (int64_t r = 0; r < N; r++) {
                float v;
                t->vec_dot(K, &v, W + row * (size_t)r, xa);
                same += v == y2[tk * N + r];
                t->to_float(W + row * (size_t)r, wd, K);
                double d = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    d += (double)wd[k] * (double)xd[k];
                    mag += fabs((double)wd[k] * (double)xd[k]);
                }
                double e = fabs(d - (double)y2[tk * N + r]) / mag;
                if (e > worst) worst = e;
            }
        }
        CHECK(same == N * T && worst < 2e-6, "%s matmul == naive per-row dots (%d/%lld), rel err vs float64 %.1e",
              t->name, same, (long long)(N * T), worst);
        free(W), free(wf), free(x), free(scratch), free(y0), free(y1), free(y2), free(xa), free(wd), free(xd);
    }
    float y[4];
    CHECK(pb_matmul(NULL, PB_TYPE_IQ2_XXS, 256, 1, NULL, 1, y, NULL, NULL) == PB_ERR_UNSUPPORTED &&
              strstr(pb_last_error(), "iq2_xxs"),
          "matmul refuses iq2_xxs: %s", pb_last_error());
    CHECK(pb_matmul(NULL, PB_TYPE_Q4_K, 100, 1, NULL, 1, y, NULL, NULL) == PB_ERR_INVALID_ARG,
          "matmul refuses K not a multiple of 256 for q4_K");
    pb_pool_free(p1);
    pb_pool_free(p2);
}

/* Dispatched quantizers / converters (ISA versions may replace the table's) == the tensor room's reference,
 * byte for byte, on random data, exact rounding ties, zeros, spikes and huge/tiny scales. */
static void test_table_quantizers(void) {
    enum { N = 256 * 24 };
    static float x[N];
    static uint8_t a[N * 2], b[N * 2];
    for (int i = 0; i < N; i++) {
        int blk = i / 256;
        float g = nrand();
        x[i] = blk % 6 == 0   ? g
               : blk % 6 == 1 ? (float)((int)(g * 8)) * 0.5f /* exact halves: rounding ties */
               : blk % 6 == 2 ? 0.0f
               : blk % 6 == 3 ? (i % 97 == 0 ? 50.0f : g * 1e-3f)
               : blk % 6 == 4 ? g * 3e4f
                              : (float)(i % 255 - 127); /* integers: ties after scaling by 127/amax */
    }
    struct {
        int type;
        void (*ref)(const float *, void *, int64_t);
    } q[] = {{PB_TYPE_Q8_0, pb_quant_q8_0}, {PB_TYPE_Q8_K, pb_quant_q8_K}, {PB_TYPE_Q8_1, pb_quant_q8_1},
             {PB_TYPE_Q4_0, pb_quant_q4_0}, {PB_TYPE_Q4_K, pb_quant_q4_K}, {PB_TYPE_Q6_K, pb_quant_q6_K}};
    for (size_t k = 0; k < sizeof q / sizeof q[0]; k++) {
        const pb_type_traits *t = pb_kernels_type(q[k].type);
        size_t nb = pb_row_size(q[k].type, N);
        memset(a, 0xAA, nb), memset(b, 0x55, nb);
        t->from_float(x, a, N);
        q[k].ref(x, b, N);
        CHECK(memcmp(a, b, nb) == 0, "%s: dispatched from_float == reference quantizer (%zu bytes)", t->name, nb);
    }
    static uint16_t h[N];
    static float f1[N], f2[N];
    for (int i = 0; i < N; i++) h[i] = (uint16_t)(i * 11 + (i >> 3));
    pb_kernels_type(PB_TYPE_F16)->to_float(h, f1, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        f2[i] = pb_fp16_to_fp32(h[i]);
        uint32_t u1, u2;
        memcpy(&u1, &f1[i], 4), memcpy(&u2, &f2[i], 4);
        bad += u1 != u2;
    }
    CHECK(bad == 0, "f16 dispatched to_float == pb_fp16_to_fp32 on %d bit patterns", N);
    pb_kernels_type(PB_TYPE_F16)->from_float(x, h, N);
    bad = 0;
    for (int i = 0; i < N; i++) bad += h[i] != pb_fp32_to_fp16(x[i]);
    CHECK(bad == 0, "f16 dispatched from_float == pb_fp32_to_fp16");
}

int main(void) {
    test_table_quantizers();
    test_vec_dot();
    test_dot_accuracy();
    test_matmul();
    TEST_DONE();
}
