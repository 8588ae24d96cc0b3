/* quant_bench.c -- throughput of dequantize, reference quantize and vec_dot per weight type (not a test).
 * Usage: quant_bench [MiB-of-f32-per-type (default 16)]. Prints MB/s of f32 values produced/consumed and
 * GB/s of weight bytes read by vec_dot; set PB_CPU=scalar|avx2|avx512 to pin the dispatched kernels. */
#include "kernels/kernels.h"
#include "tensor/types.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng = 0x853C49E6748FEA9Bull;
static float nrand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    double u1 = (double)(rng >> 11) * (1.0 / 9007199254740992.0) + 1e-300;
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    double u2 = (double)(rng >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Seconds per call of op(ctx), repeated until at least 300 ms have passed. */
typedef struct job {
    const pb_type_traits *t;
    const float *x;
    float *y;
    void *q;
    const void *act;
    int64_t n;
    float s;
} job;
static void do_quant(job *j) { j->t->from_float(j->x, j->q, j->n); }
static void do_dequant(job *j) { j->t->to_float(j->q, j->y, j->n); }
static void do_dot(job *j) { j->t->vec_dot(j->n, &j->s, j->q, j->act); }
static double time_op(void (*op)(job *), job *j) {
    double t0 = pb_time_ms(), el;
    int reps = 0;
    do {
        op(j);
        reps++;
    } while ((el = pb_time_ms() - t0) < 300);
    return el / 1000.0 / reps;
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 16;
    if (mib < 1 || mib > 4096) {
        fprintf(stderr, "usage: quant_bench [MiB of f32 per type, 1..4096]\n");
        return 2;
    }
    const int64_t n = (int64_t)mib * 1024 * 1024 / 4 / 256 * 256;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    void *q = malloc((size_t)n * 4), *a = malloc((size_t)n * 2);
    if (!x || !y || !q || !a) {
        fprintf(stderr, "quant_bench: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < n; i++) x[i] = nrand();
    const int types[] = {PB_TYPE_F32,  PB_TYPE_F16,  PB_TYPE_BF16, PB_TYPE_Q4_0, PB_TYPE_Q4_1,
                         PB_TYPE_Q5_0, PB_TYPE_Q5_1, PB_TYPE_Q8_0, PB_TYPE_Q2_K, PB_TYPE_Q3_K,
                         PB_TYPE_Q4_K, PB_TYPE_Q5_K, PB_TYPE_Q6_K, PB_TYPE_Q8_K};
    printf("quant_bench: %lld values (%.0f MB f32) per type, cpu features 0x%x, single thread\n", (long long)n,
           (double)n * 4 / 1e6, pb_cpu_features());
    printf("%-6s %8s %14s %14s %14s %12s\n", "type", "bits/w", "quantize MB/s", "dequant MB/s", "vec_dot GB/s",
           "rmse N(0,1)");
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const pb_type_traits *t = pb_kernels_type(types[k]);
        job j = {.t = t, .x = x, .y = y, .q = q, .act = x, .n = n};
        double tq = time_op(do_quant, &j);
        double td = time_op(do_dequant, &j);
        double err = 0;
        for (int64_t i = 0; i < n; i++) err += ((double)y[i] - (double)x[i]) * ((double)y[i] - (double)x[i]);
        double gbs = 0;
        if (t->vec_dot && types[k] != PB_TYPE_Q8_K) {
            const pb_type_traits *at = pb_kernels_type(t->vec_dot_type);
            if (t->vec_dot_type != PB_TYPE_F32) {
                at->from_float(x, a, n);
                j.act = a;
            }
            double tv = time_op(do_dot, &j);
            gbs = (double)pb_row_size(types[k], n) / tv / 1e9;
            if (!isfinite(j.s)) printf("# %s vec_dot gave %f\n", t->name, (double)j.s);
        }
        printf("%-6s %8.3f %14.0f %14.0f %14.2f %12.5f\n", t->name, 8.0 * (double)t->type_size / (double)t->blck,
               (double)n * 4 / tq / 1e6, (double)n * 4 / td / 1e6, gbs, sqrt(err / (double)n));
    }
    free(x), free(y), free(q), free(a);
    return 0;
}
