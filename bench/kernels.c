/* kernels.c -- kernel benchmark: per weight type and kernel family (scalar ref, avx2, avx512 / neon), the
 * decode matrix-vector speed in GB/s of weights against the streaming-read bandwidth measured in the same
 * run (the roofline), and the prefill tile speed in GOP/s (2 ops per multiply-add).
 * Usage: build/bench/kernels [-t THREADS] [-m MiB_of_weights] [-T prefill_tokens] [-r reps] [-b] [-c] [types...]
 *   -b: only measure the streaming-read bandwidth and print "bandwidth_gbs N" (bench/compare.sh uses it)
 *   -c: time with process CPU time instead of wall time (loaded machines; meaningful with -t 1)
 * Not a test: numbers depend on the machine and its load. */
#include "base/base.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "tensor/quant.h"
#include "tensor/types.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*fill_fn)(pb_type_traits *t, int n, pb_gemm_fn *gemm);
typedef struct family {
    const char *name;
    fill_fn fill; /* NULL: ref only */
    unsigned need;
} family;

static const family families[] = {
    {"scalar", NULL, 0},
#if defined(__x86_64__)
    {"avx2", pb_kernels_fill_avx2, PB_CPU_AVX2 | PB_CPU_FMA | PB_CPU_F16C},
    {"avx512", pb_kernels_fill_avx512,
     PB_CPU_AVX2 | PB_CPU_FMA | PB_CPU_F16C | PB_CPU_AVX512F | PB_CPU_AVX512BW | PB_CPU_AVX512VL | PB_CPU_AVX512DQ |
         PB_CPU_AVX512VNNI},
#elif defined(__aarch64__)
    {"neon", pb_kernels_fill_neon, PB_CPU_NEON | PB_CPU_DOTPROD},
#endif
};

// --- streaming read bandwidth ----------------------------------------------------------------------------

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sink[64];
} bw_job;

static void bw_worker(void *ctx, int ith, int nth) {
    bw_job *j = ctx;
    int64_t lo, hi;
    pb_split((int64_t)j->n, ith, nth, &lo, &hi);
    j->sink[ith & 63] = pb_kernels_stream_read(j->p + lo, (size_t)(hi - lo) * 8);
}

static void empty_job(void *ctx, int ith, int nth) { (void)ctx, (void)ith, (void)nth; }

/* A pool job whose parts each take a fixed time: shows the hand-off cost a real decode job pays, and how
 * many parts the workers ran (a pool may let the caller run parts its workers have not picked up). */
typedef struct {
    uint64_t part_ns;
    const int *caller_mark; /* address of the calling thread's marker */
    atomic_int on_workers;  /* parts run by another thread */
    atomic_int parts;
} timed_job;
static _Thread_local int thread_mark;
static void timed_part(void *ctx, int ith, int nth) {
    timed_job *j = ctx;
    uint64_t t0 = pb_time_ns();
    while (pb_time_ns() - t0 < j->part_ns) {
    }
    if (&thread_mark != j->caller_mark) atomic_fetch_add(&j->on_workers, 1);
    atomic_fetch_add(&j->parts, 1);
}

/* -c: process CPU time instead of wall time (a loaded machine steals the core; with -t 1 the CPU time is
 * what the kernel itself took, though caches and memory are still shared) */
static int use_cpu_time;
static double now_ms(void) {
    if (!use_cpu_time) return pb_time_ms();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* GB/s of a streaming read over `bytes` (buffer touched first, so pages are resident). */
static double stream_read(pb_pool *pool, const uint8_t *buf, size_t bytes, int reps) {
    bw_job j = {(const uint64_t *)buf, bytes / 8, {0}};
    double t[32];
    for (int r = 0; r < reps; r++) {
        double t0 = now_ms();
        pb_pool_run(pool, bw_worker, &j);
        t[r] = now_ms() - t0;
    }
    return (double)bytes / (median(t, reps) * 1e6);
}

// --- matmul with a given family's kernels (pb_matmul's tiles, without its token chunks) --------------------

typedef struct {
    pb_vec_dot_fn dot;
    pb_gemm_fn gemm;
    const uint8_t *w, *a;
    size_t w_row, a_row;
    int64_t K, N, T;
    float *y;
} mm_job;

static void mm_worker(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    int64_t lo, hi;
    pb_split(j->N, ith, nth, &lo, &hi);
    if (j->gemm) {
        for (int64_t r0 = lo; r0 < hi; r0 += 16) {
            int64_t nr = PB_MIN(16, hi - r0);
            for (int64_t t0 = 0; t0 < j->T; t0 += PB_GEMM_NT) {
                int nt = (int)PB_MIN(PB_GEMM_NT, j->T - t0);
                j->gemm(j->K, j->w + (size_t)r0 * j->w_row, j->w_row, nr, j->a + (size_t)t0 * j->a_row, j->a_row, nt,
                        j->y + t0 * j->N + r0, j->N);
            }
        }
        return;
    }
    for (int64_t r = lo; r < hi; r++)
        for (int64_t t = 0; t < j->T; t++)
            j->dot(j->K, &j->y[t * j->N + r], j->w + (size_t)r * j->w_row, j->a + (size_t)t * j->a_row);
}

static double run_mm(pb_pool *pool, mm_job *j, int reps) {
    double t[32];
    pb_pool_run(pool, mm_worker, j); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = now_ms();
        pb_pool_run(pool, mm_worker, j);
        t[r] = now_ms() - t0;
    }
    return median(t, reps);
}

int main(int argc, char **argv) {
    int threads = 1, reps = 5, T = 64, bw_only = 0;
    double mib = 256;
    int types[PB_TYPE_COUNT], n_types = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-t") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "-m") == 0 && i + 1 < argc)
            mib = atof(argv[++i]);
        else if (strcmp(argv[i], "-T") == 0 && i + 1 < argc)
            T = atoi(argv[++i]);
        else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "-b") == 0)
            bw_only = 1;
        else if (strcmp(argv[i], "-c") == 0)
            use_cpu_time = 1;
        else if (pb_type_from_name(argv[i]) >= 0 && n_types < PB_TYPE_COUNT)
            types[n_types++] = pb_type_from_name(argv[i]);
        else {
            fprintf(stderr, "usage: kernels [-t THREADS] [-m MiB] [-T prefill_tokens] [-r reps] [-b] [-c] [type...]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 31 || threads < 1 || T < 1 || mib < 1) {
        fprintf(stderr, "kernels: bad arguments\n");
        return 2;
    }
    if (n_types == 0) {
        const int def[] = {PB_TYPE_Q4_K, PB_TYPE_Q6_K, PB_TYPE_Q4_0, PB_TYPE_Q8_0, PB_TYPE_Q5_K, PB_TYPE_Q3_K,
                           PB_TYPE_Q2_K, PB_TYPE_Q4_1, PB_TYPE_Q5_0, PB_TYPE_Q5_1, PB_TYPE_F16};
        for (size_t i = 0; i < sizeof def / sizeof def[0]; i++) types[n_types++] = def[i];
    }
    pb_pool *pool = NULL;
    if (pb_pool_new(threads, &pool) != PB_OK) return 1;
    const int64_t K = 2304; /* gemma-2-2b n_embd */
    size_t bytes = (size_t)(mib * 1048576.0);
    uint8_t *buf = pb_aligned_alloc(bytes + 4096);
    if (!buf) return 1;
    memset(buf, 1, bytes);
    double bw = stream_read(pool, buf, bytes, reps);
    if (bw_only) {
        printf("bandwidth_gbs %.2f\n", bw);
        pb_aligned_free(buf);
        pb_pool_free(pool);
        return 0;
    }
    printf("# kernels bench: %d thread(s), %.0f MiB of weights per matrix, K = %lld, prefill tile of %d tokens, "
           "dispatched family %s\n",
           threads, mib, (long long)K, T, pb_kernels_isa());
    printf("# streaming read bandwidth (roofline): %.1f GB/s\n", bw);
    {
        const int jobs = 20000; /* decode runs ~200-300 pool jobs per token */
        double t0 = pb_time_ms();
        for (int i = 0; i < jobs; i++) pb_pool_run(pool, empty_job, NULL);
        printf("# thread pool: %.2f us per pb_pool_run of an empty job (%d threads)\n",
               (pb_time_ms() - t0) * 1000.0 / jobs, threads);
        timed_job tj = {.part_ns = 5000, .caller_mark = &thread_mark};
        t0 = pb_time_ms();
        for (int i = 0; i < jobs / 4; i++) pb_pool_run(pool, timed_part, &tj);
        int parts = atomic_load(&tj.parts), on_workers = atomic_load(&tj.on_workers);
        printf("# thread pool: %.2f us per pb_pool_run of %d parts of 5 us each (ideal 5, all on one thread %d); "
               "%.0f%% of parts ran on workers\n",
               (pb_time_ms() - t0) * 1000.0 / (jobs / 4), pb_pool_limit(pool), 5 * pb_pool_limit(pool),
               parts ? 100.0 * on_workers / parts : 0.0);
    }
    printf("| type | family | decode GB/s | %% of roofline | decode GOP/s | prefill GOP/s |\n");
    printf("|------|--------|------------:|--------------:|-------------:|--------------:|\n");
    unsigned f = pb_cpu_features();
    float *x = malloc(sizeof(float) * (size_t)K * (size_t)T);
    for (int64_t i = 0; i < K * T; i++) x[i] = (float)sin((double)i * 0.37) * 2.0f;
    for (int ti = 0; ti < n_types; ti++) {
        int type = types[ti];
        const pb_type_traits *t = pb_type_get(type);
        if (!t->supported || t->blck == 0 || K % t->blck) continue;
        size_t w_row = pb_row_size(type, K);
        int64_t N = (int64_t)(bytes / w_row);
        /* weights: random bytes are valid blocks for the integer formats; fp16 scales kept finite and small */
        uint8_t *w = buf;
        float *tmp = malloc(sizeof(float) * (size_t)K);
        for (int64_t r = 0; r < PB_MIN(N, 64); r++) {
            for (int64_t k = 0; k < K; k++) tmp[k] = (float)sin((double)(r * K + k) * 0.013) * 0.05f;
            t->from_float(tmp, w + (size_t)r * w_row, K);
        }
        for (int64_t r = 64; r < N; r++) memcpy(w + (size_t)r * w_row, w + (size_t)(r % 64) * w_row, w_row);
        free(tmp);
        bool fl = t->vec_dot_type == PB_TYPE_F32;
        size_t a_row = fl ? (size_t)K * 4 : pb_row_size(t->vec_dot_type, K);
        uint8_t *a = malloc(a_row * (size_t)T);
        for (int tk = 0; tk < T; tk++) {
            if (fl)
                memcpy(a + a_row * (size_t)tk, x + tk * K, (size_t)K * 4);
            else
                pb_type_get(t->vec_dot_type)->from_float(x + tk * K, a + a_row * (size_t)tk, K);
        }
        float *y = malloc(sizeof(float) * (size_t)N * (size_t)T);
        for (size_t fi = 0; fi < sizeof families / sizeof families[0]; fi++) {
            const family *fam = &families[fi];
            if ((f & fam->need) != fam->need) continue;
            pb_type_traits tab[PB_TYPE_COUNT];
            pb_gemm_fn gemm[PB_TYPE_COUNT] = {0};
            for (int i = 0; i < PB_TYPE_COUNT; i++) tab[i] = *pb_type_get(i);
            pb_kernels_fill_ref(tab, PB_TYPE_COUNT);
            pb_type_traits ref[PB_TYPE_COUNT];
            memcpy(ref, tab, sizeof ref);
            if (fam->fill) fam->fill(tab, PB_TYPE_COUNT, gemm);
            if (fam->fill && tab[type].vec_dot == ref[type].vec_dot) continue; /* no kernel of its own */
            /* decode: the whole matrix (beyond the caches) against one token */
            mm_job j = {tab[type].vec_dot, gemm[type], w, a, w_row, a_row, K, N, 1, y};
            int64_t Nd = N;
            if (!fam->fill) j.N = Nd = PB_MAX(1, N / 8); /* the scalar ref is slow: an eighth of the rows */
            double ms = run_mm(pool, &j, reps);
            double gbs = (double)Nd * (double)w_row / (ms * 1e6), gops = 2.0 * (double)K * (double)Nd / (ms * 1e6);
            /* prefill: T tokens on a 2304 x 2048 matrix (L2/L3-resident weights) */
            mm_job jp = {tab[type].vec_dot, gemm[type], w, a, w_row, a_row, K, PB_MIN(N, 2048), T, y};
            double msp = run_mm(pool, &jp, reps);
            double gopp = 2.0 * (double)K * (double)jp.N * (double)T / (msp * 1e6);
            printf("| %s | %s | %.1f | %.0f%% | %.1f | %.1f |\n", t->name, fam->name, gbs, 100.0 * gbs / bw, gops,
                   gopp);
            fflush(stdout);
        }
        int64_t Np = N / PB_PACK_ROWS * PB_PACK_ROWS;
        if (pb_pack_supported(type, K, Np) && pb_pack_rows(type, w, K, Np) == PB_OK) {
            /* the packed path as the model runs it: pb_matmul_packed (activation quantization included) */
            void *scr = pb_aligned_alloc(pb_matmul_scratch_size(type, K, T));
            double td[32], tp[32];
            int64_t Npp = PB_MIN(Np, 2048);
            pb_matmul_packed(w, type, K, Np, x, 1, y, scr, pool);
            for (int r = 0; r < reps; r++) {
                double t0 = now_ms();
                pb_matmul_packed(w, type, K, Np, x, 1, y, scr, pool);
                td[r] = now_ms() - t0;
                t0 = now_ms();
                pb_matmul_packed(w, type, K, Npp, x, T, y, scr, pool);
                tp[r] = now_ms() - t0;
            }
            double ms = median(td, reps), msp = median(tp, reps);
            double gbs = (double)Np * (double)w_row / (ms * 1e6), gops = 2.0 * (double)K * (double)Np / (ms * 1e6);
            double gopp = 2.0 * (double)K * (double)Npp * (double)T / (msp * 1e6);
            printf("| %s | packed-%s | %.1f | %.0f%% | %.1f | %.1f |\n", t->name, pb_kernels_isa(), gbs,
                   100.0 * gbs / bw, gops, gopp);
            fflush(stdout);
            pb_aligned_free(scr);
        }
        free(a), free(y);
    }
    free(x);
    pb_aligned_free(buf);
    pb_pool_free(pool);
    return 0;
}
