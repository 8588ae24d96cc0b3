/* dispatch.c -- the one place that chooses kernels: the kernels' copy of the type table (vec_dot, the activation
 * quantizers, F16 reads), the matmul tiles and the attention primitives, from pb_cpu_features(), once, at the first
 * pb_kernels_ready() (every entry point of this room calls it). The tensor room's table stays the plain reference. */
#include "kernels/kernels.h"
#include "tensor/ops.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

/* without SIMD kernels: the tensor room's plain C (so PB_CPU=scalar computes exactly as ops.c does) */
static float (*dot_f32)(const float *, const float *, int64_t) = pb_vec_dot;
static void (*mad_f32)(float *, const float *, float, int64_t) = pb_vec_mad;

static uint64_t stream_read_c(const void *p, size_t n) {
    const uint64_t *q = p;
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i + 2 <= n / 8; i += 2) a += q[i], b += q[i + 1];
    return a + b;
}

static uint64_t (*stream_read)(const void *, size_t) = stream_read_c;
static void (*geglu)(float *, const float *, int64_t) = pb_geglu;

void pb_kernels_geglu(float *gate, const float *up, int64_t n) {
    pb_kernels_ready();
    geglu(gate, up, n);
}

static float att_exp_c(float *s, int64_t n, float cap, float *mx) {
    if (cap > 0.0f)
        for (int64_t i = 0; i < n; i++) s[i] = tanhf(s[i] / cap) * cap;
    float m = *mx, sum = 0.0f;
    for (int64_t i = 0; i < n; i++) m = s[i] > m ? s[i] : m;
    *mx = m;
    for (int64_t i = 0; i < n; i++) sum += (s[i] = expf(s[i] - m));
    return sum;
}
static float (*att_exp)(float *, int64_t, float, float *) = att_exp_c;

float pb_kernels_att_exp(float *s, int64_t n, float cap, float *mx) {
    pb_kernels_ready();
    return att_exp(s, n, cap, mx);
}

static void (*softcap)(float *, int64_t, float) = pb_softcap;
void pb_kernels_softcap(float *x, int64_t n, float cap) {
    pb_kernels_ready();
    softcap(x, n, cap);
}

uint64_t pb_kernels_stream_read(const void *p, size_t n) {
    pb_kernels_ready();
    return stream_read(p, n);
}

float pb_kernels_dot_f32(const float *a, const float *b, int64_t n) {
    pb_kernels_ready();
    return dot_f32(a, b, n);
}
void pb_kernels_mad_f32(float *y, const float *x, float a, int64_t n) {
    pb_kernels_ready();
    mad_f32(y, x, a, n);
}

static void mad_f32_rows_c(float *y, const float *x, size_t ldx, const float *a, int nk, int64_t n) {
    for (int k = 0; k < nk; k++) mad_f32(y, x + k * ldx, a[k], n);
}
static void (*mad_f32_rows)(float *, const float *, size_t, const float *, int, int64_t) = mad_f32_rows_c;
void pb_kernels_mad_f32_rows(float *y, const float *x, size_t ldx, const float *a, int nk, int64_t n) {
    pb_kernels_ready();
    mad_f32_rows(y, x, ldx, a, nk, n);
}

static void dot_f32_tile_c(const float *const *q, int nq, const float *k, size_t ldk, int nk, int64_t n, float *s,
                           size_t lds) {
    for (int a = 0; a < nq; a++)
        for (int b = 0; b < nk; b++) s[(size_t)a * lds + b] = dot_f32(q[a], k + (size_t)b * ldk, n);
}
static void mad_f32_tile_c(float *const *y, const float *c, const float *const *a, int ny, const float *x, size_t ldx,
                           int nk, int64_t n) {
    for (int j = 0; j < ny; j++) {
        for (int64_t i = 0; i < n; i++) y[j][i] *= c[j];
        mad_f32_rows(y[j], x, ldx, a[j], nk, n);
    }
}
static void (*dot_f32_tile)(const float *const *, int, const float *, size_t, int, int64_t, float *,
                            size_t) = dot_f32_tile_c;
static void (*mad_f32_tile)(float *const *, const float *, const float *const *, int, const float *, size_t, int,
                            int64_t) = mad_f32_tile_c;
void pb_kernels_dot_f32_tile(const float *const *q, int nq, const float *k, size_t ldk, int nk, int64_t n, float *s,
                             size_t lds) {
    pb_kernels_ready();
    dot_f32_tile(q, nq, k, ldk, nk, n, s, lds);
}
void pb_kernels_mad_f32_tile(float *const *y, const float *c, const float *const *a, int ny, const float *x, size_t ldx,
                             int nk, int64_t n) {
    pb_kernels_ready();
    mad_f32_tile(y, c, a, ny, x, ldx, nk, n);
}

/* without fused fp16 kernels: convert, then the float ones (the same values, so the same results) */
static float dot_f16_c(const float *a, const uint16_t *h, int64_t n) {
    float x[PB_KERNELS_F16_ROW_MAX];
    PB_ASSERT(n <= PB_KERNELS_F16_ROW_MAX);
    pb_kernels_type(PB_TYPE_F16)->to_float(h, x, n);
    return dot_f32(a, x, n);
}
static void mad_f16_c(float *y, const uint16_t *h, float a, int64_t n) {
    float x[PB_KERNELS_F16_ROW_MAX];
    PB_ASSERT(n <= PB_KERNELS_F16_ROW_MAX);
    pb_kernels_type(PB_TYPE_F16)->to_float(h, x, n);
    mad_f32(y, x, a, n);
}
static float (*dot_f16)(const float *, const uint16_t *, int64_t) = dot_f16_c;
static void (*mad_f16)(float *, const uint16_t *, float, int64_t) = mad_f16_c;
float pb_kernels_dot_f16(const float *a, const uint16_t *h, int64_t n) {
    pb_kernels_ready();
    return dot_f16(a, h, n);
}
void pb_kernels_mad_f16(float *y, const uint16_t *h, float a, int64_t n) {
    pb_kernels_ready();
    mad_f16(y, h, a, n);
}

/* without fp16 tiles: each row converted once, then the float dot / mad per query row or state */
static void dot_f16_tile_c(const float *const *q, int nq, const uint16_t *k, size_t ldk, int nk, int64_t n, float *s,
                           size_t lds) {
    float x[PB_KERNELS_F16_ROW_MAX];
    PB_ASSERT(n <= PB_KERNELS_F16_ROW_MAX);
    for (int b = 0; b < nk; b++) {
        pb_kernels_type(PB_TYPE_F16)->to_float(k + (size_t)b * ldk, x, n);
        for (int a = 0; a < nq; a++) s[(size_t)a * lds + b] = dot_f32(q[a], x, n);
    }
}
static void mad_f16_tile_c(float *const *y, const float *c, const float *const *a, int ny, const uint16_t *x,
                           size_t ldx, int nk, int64_t n) {
    float v[PB_KERNELS_F16_ROW_MAX];
    PB_ASSERT(n <= PB_KERNELS_F16_ROW_MAX);
    for (int j = 0; j < ny; j++)
        for (int64_t i = 0; i < n; i++) y[j][i] *= c[j];
    for (int k = 0; k < nk; k++) {
        pb_kernels_type(PB_TYPE_F16)->to_float(x + (size_t)k * ldx, v, n);
        for (int j = 0; j < ny; j++) mad_f32(y[j], v, a[j][k], n);
    }
}
static void (*dot_f16_tile)(const float *const *, int, const uint16_t *, size_t, int, int64_t, float *,
                            size_t) = dot_f16_tile_c;
static void (*mad_f16_tile)(float *const *, const float *, const float *const *, int, const uint16_t *, size_t, int,
                            int64_t) = mad_f16_tile_c;
void pb_kernels_dot_f16_tile(const float *const *q, int nq, const uint16_t *k, size_t ldk, int nk, int64_t n, float *s,
                             size_t lds) {
    pb_kernels_ready();
    dot_f16_tile(q, nq, k, ldk, nk, n, s, lds);
}
void pb_kernels_mad_f16_tile(float *const *y, const float *c, const float *const *a, int ny, const uint16_t *x,
                             size_t ldx, int nk, int64_t n) {
    pb_kernels_ready();
    mad_f16_tile(y, c, a, ny, x, ldx, nk, n);
}

/* The kernels' copy of the type table: the tensor room's rows (formats, reference conversions) with vec_dot and the
 * ISA's conversions and quantizers filled in. */
static pb_type_traits ktab[PB_TYPE_COUNT];

static void kernels_init(void) {
    pb_type_traits *table = ktab;
    const int n = PB_TYPE_COUNT;
    for (int i = 0; i < n; i++) table[i] = *pb_type_get(i);
    pb_kernels_fill_ref(table, n);
    pb_gemm_fn gemm[PB_TYPE_COUNT] = {0};
    unsigned f = pb_cpu_features();
    (void)f;
#if defined(__x86_64__)
    const unsigned avx2 = PB_CPU_AVX2 | PB_CPU_FMA | PB_CPU_F16C;
    const unsigned avx512 =
        avx2 | PB_CPU_AVX512F | PB_CPU_AVX512BW | PB_CPU_AVX512VL | PB_CPU_AVX512DQ | PB_CPU_AVX512VNNI;
    if ((f & avx512) == avx512) {
        pb_kernels_fill_avx512(table, n, gemm);
        /* Packed tiles (kernels/matmul.h): Q4_0, Q8_0, Q4_K, Q6_K. Measured on Zen 5 (bench/kernels, CPU time,
         * 1 thread): prefill 400-480 GOP/s (Q4_0, Q8_0), 470-550 (Q4_K), 370-420 (Q6_K) against 250 for the
         * row tiles; decode at the read roofline. PB_NO_PACK=1: no packing; PB_NO_PACK_K=1: row tiles for
         * K-quants. */
        if (!getenv("PB_NO_PACK")) {
            pb_matmul_set_packed(PB_TYPE_Q4_0, pb_gemm_packed_q4_0_avx512);
            pb_matmul_set_packed(PB_TYPE_Q8_0, pb_gemm_packed_q8_0_avx512);
            if (!getenv("PB_NO_PACK_K")) {
                pb_matmul_set_packed(PB_TYPE_Q4_K, pb_gemm_packed_q4_K_avx512);
                pb_matmul_set_packed(PB_TYPE_Q6_K, pb_gemm_packed_q6_K_avx512);
            }
        }
        dot_f32 = pb_dot_f32_avx512, mad_f32 = pb_mad_f32_avx512, stream_read = pb_stream_read_avx512;
        mad_f32_rows = pb_mad_f32_rows_avx512, dot_f16 = pb_dot_f16_avx512, mad_f16 = pb_mad_f16_avx512;
        geglu = pb_geglu_avx512, att_exp = pb_att_exp_avx512, softcap = pb_softcap_avx512;
        dot_f32_tile = pb_dot_f32_tile_avx512, mad_f32_tile = pb_mad_f32_tile_avx512;
        dot_f16_tile = pb_dot_f16_tile_avx512, mad_f16_tile = pb_mad_f16_tile_avx512;
    } else if ((f & avx2) == avx2) {
        pb_kernels_fill_avx2(table, n, gemm);
        if (!getenv("PB_NO_PACK")) {
            pb_matmul_set_packed(PB_TYPE_Q4_0, pb_gemm_packed_q4_0_avx2);
            pb_matmul_set_packed(PB_TYPE_Q8_0, pb_gemm_packed_q8_0_avx2);
        }
        dot_f32 = pb_dot_f32_avx2, mad_f32 = pb_mad_f32_avx2, stream_read = pb_stream_read_avx2;
        mad_f32_rows = pb_mad_f32_rows_avx2, dot_f16 = pb_dot_f16_avx2, mad_f16 = pb_mad_f16_avx2;
        geglu = pb_geglu_avx2, att_exp = pb_att_exp_avx2, softcap = pb_softcap_avx2;
    }
#elif defined(__aarch64__)
    if (f & PB_CPU_DOTPROD) {
        pb_kernels_fill_neon(table, n, gemm);
        if (!getenv("PB_NO_PACK")) {
            /* FEAT_I8MM (HWCAP2_I8MM; PB_CPU=dotprod turns it off): USMMLA tiles for prompts, sdot for one token */
            const bool mm = f & PB_CPU_I8MM;
            pb_matmul_set_packed(PB_TYPE_Q4_0, mm ? pb_gemm_packed_q4_0_i8mm : pb_gemm_packed_q4_0_neon);
            pb_matmul_set_packed(PB_TYPE_Q8_0, mm ? pb_gemm_packed_q8_0_i8mm : pb_gemm_packed_q8_0_neon);
            if (!getenv("PB_NO_PACK_K")) {
                pb_matmul_set_packed(PB_TYPE_Q4_K, mm ? pb_gemm_packed_q4_K_i8mm : pb_gemm_packed_q4_K_neon);
                pb_matmul_set_packed(PB_TYPE_Q6_K, mm ? pb_gemm_packed_q6_K_i8mm : pb_gemm_packed_q6_K_neon);
            }
        }
        dot_f32 = pb_dot_f32_neon, mad_f32 = pb_mad_f32_neon, stream_read = pb_stream_read_neon;
        dot_f16_tile = pb_dot_f16_tile_neon, mad_f16_tile = pb_mad_f16_tile_neon;
        geglu = pb_geglu_neon, att_exp = pb_att_exp_neon, softcap = pb_softcap_neon;
    }
#endif
    for (int i = 0; i < PB_TYPE_COUNT; i++) pb_matmul_set_gemm(i, gemm[i]);
}

/* 0 = not yet, 1 = someone is choosing, 2 = ready. */
static atomic_int kernels_state;

void pb_kernels_ready(void) {
    if (atomic_load_explicit(&kernels_state, memory_order_acquire) == 2) return;
    int expect = 0;
    if (atomic_compare_exchange_strong(&kernels_state, &expect, 1)) {
        kernels_init();
        atomic_store_explicit(&kernels_state, 2, memory_order_release);
        return;
    }
    while (atomic_load_explicit(&kernels_state, memory_order_acquire) != 2) {
    }
}

const pb_type_traits *pb_kernels_type(int type) {
    pb_kernels_ready();
    if (type < 0 || type >= PB_TYPE_COUNT) return pb_type_get(type);
    return &ktab[type];
}

/* Name of the family pb_kernels_ready picks ("avx512", "avx2", "neon", "scalar"), for benches and logs. */
const char *pb_kernels_isa(void) {
    unsigned f = pb_cpu_features();
    (void)f;
#if defined(__x86_64__)
    const unsigned avx2 = PB_CPU_AVX2 | PB_CPU_FMA | PB_CPU_F16C;
    const unsigned avx512 =
        avx2 | PB_CPU_AVX512F | PB_CPU_AVX512BW | PB_CPU_AVX512VL | PB_CPU_AVX512DQ | PB_CPU_AVX512VNNI;
    if ((f & avx512) == avx512) return "avx512";
    if ((f & avx2) == avx2) return "avx2";
#elif defined(__aarch64__)
    if (f & PB_CPU_DOTPROD) return "neon";
#endif
    return "scalar";
}
