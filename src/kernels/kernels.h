/* kernels.h -- dot-product kernels of the kernels room, one family per ISA file; dispatch.c picks them.
 * All share pb_vec_dot_fn's signature: *s = sum_i x[i]*y[i] over n elements (n % blck == 0), x in the
 * weight type, y in its vec_dot_type (tensor/types.h). Quantized inner sums are exact integers.
 * Activation formats: F32 for F32/F16/BF16 weights (no rounding of activations, unlike ggml's F16/BF16
 * activations), Q8_0 for all 32-element types including Q4_1/Q5_1 (ggml uses Q8_1 there; see ref.c),
 * Q8_K for the K-quants. Q8_1 weights (never in model files) also dot against Q8_1. */
#ifndef PB_KERNELS_H
#define PB_KERNELS_H

#include "kernels/matmul.h"
#include "tensor/types.h"

/* ---- ref.c: portable scalar C, the executable spec every ISA version is tested against ---- */
void pb_vec_dot_f32_f32_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_f16_f32_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_bf16_f32_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q4_1_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q5_1_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q8_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q2_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q3_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void pb_vec_dot_q8_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);

/* ---- ISA families (x86_kern.h via x86_avx2.c / x86_avx512.c, arm_neon.c), same signatures as ref.c.
 * gemm tiles: y[t*ldy + r] = dot(weight row r, activation row t), r < nr, t < nt <= PB_GEMM_NT, each
 * bit-identical to the same family's vec_dot. Quantizers: bit-identical to the tensor room's. ---- */
#define PB_KERNEL_FAMILY(sfx)                                                                                          \
    void pb_vec_dot_f32_f32_##sfx(int64_t n, float *s, const void *x, const void *y);                                  \
    void pb_vec_dot_f16_f32_##sfx(int64_t n, float *s, const void *x, const void *y);                                  \
    void pb_vec_dot_bf16_f32_##sfx(int64_t n, float *s, const void *x, const void *y);                                 \
    void pb_vec_dot_q4_0_q8_0_##sfx(int64_t n, float *s, const void *x, const void *y);                                \
    void pb_vec_dot_q8_0_q8_0_##sfx(int64_t n, float *s, const void *x, const void *y);                                \
    void pb_vec_dot_q4_K_q8_K_##sfx(int64_t n, float *s, const void *x, const void *y);                                \
    void pb_vec_dot_q5_K_q8_K_##sfx(int64_t n, float *s, const void *x, const void *y);                                \
    void pb_vec_dot_q6_K_q8_K_##sfx(int64_t n, float *s, const void *x, const void *y);                                \
    void pb_gemm_q4_0_q8_0_##sfx(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row,      \
                                 int nt, float *y, int64_t ldy);                                                       \
    void pb_gemm_q8_0_q8_0_##sfx(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row,      \
                                 int nt, float *y, int64_t ldy);                                                       \
    void pb_gemm_q4_K_q8_K_##sfx(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row,      \
                                 int nt, float *y, int64_t ldy);                                                       \
    void pb_gemm_q5_K_q8_K_##sfx(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row,      \
                                 int nt, float *y, int64_t ldy);                                                       \
    void pb_gemm_q6_K_q8_K_##sfx(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row,      \
                                 int nt, float *y, int64_t ldy);                                                       \
    void pb_vec_dot_q4_1_q8_0_##sfx(int64_t n, float *s, const void *x, const void *y);                                \
    void pb_vec_dot_q5_0_q8_0_##sfx(int64_t n, float *s, const void *x, const void *y);                                \
    void pb_vec_dot_q5_1_q8_0_##sfx(int64_t n, float *s, const void *x, const void *y);                                \
    void pb_vec_dot_q2_K_q8_K_##sfx(int64_t n, float *s, const void *x, const void *y);                                \
    void pb_vec_dot_q3_K_q8_K_##sfx(int64_t n, float *s, const void *x, const void *y);                                \
    void pb_gemm_q4_1_q8_0_##sfx(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row,      \
                                 int nt, float *y, int64_t ldy);                                                       \
    void pb_gemm_q5_0_q8_0_##sfx(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row,      \
                                 int nt, float *y, int64_t ldy);                                                       \
    void pb_gemm_q5_1_q8_0_##sfx(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row,      \
                                 int nt, float *y, int64_t ldy);                                                       \
    void pb_gemm_q2_K_q8_K_##sfx(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row,      \
                                 int nt, float *y, int64_t ldy);                                                       \
    void pb_gemm_q3_K_q8_K_##sfx(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row,      \
                                 int nt, float *y, int64_t ldy);                                                       \
    void pb_f16_to_f32_##sfx(const void *src, float *dst, int64_t n);                                                  \
    void pb_f32_to_f16_##sfx(const float *src, void *dst, int64_t n);                                                  \
    float pb_dot_f32_##sfx(const float *a, const float *b, int64_t n);                                                 \
    uint64_t pb_stream_read_##sfx(const void *p, size_t n);                                                            \
    void pb_geglu_##sfx(float *gate, const float *up, int64_t n);                                                      \
    float pb_att_exp_##sfx(float *s, int64_t n, float cap, float *mx);                                                 \
    void pb_softcap_##sfx(float *s, int64_t n, float cap);                                                             \
    void pb_mad_f32_##sfx(float *y, const float *x, float a, int64_t n);                                               \
    void pb_quant_q8_0_##sfx(const float *x, void *dst, int64_t n);                                                    \
    void pb_quant_q8_K_##sfx(const float *x, void *dst, int64_t n);                                                    \
    void pb_kernels_fill_##sfx(pb_type_traits *t, int n, pb_gemm_fn *gemm)

/* Packed (row-interleaved) Q4_0 / Q8_0 / Q4_K / Q6_K tiles (pb_gemm_packed_fn, layout in kernels/matmul.h): the scalar
 * spec (ref_pack.c), the AVX-512 VNNI version (x86_pack.h) and the AVX2 one (x86_pack2.h), bit-identical. */
void pb_gemm_packed_q4_0_ref(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                             const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q8_0_ref(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                             const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q4_K_ref(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                             const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q6_K_ref(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                             const void *meta, int nt, float *y, int64_t ldy);
#if defined(__aarch64__)
void pb_gemm_packed_q4_0_neon(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q8_0_neon(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q4_K_neon(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q6_K_neon(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy);
/* arm_i8mm.c: USMMLA tiles (call only where pb_cpu_features() has PB_CPU_I8MM); one token goes to _neon */
void pb_gemm_packed_q4_0_i8mm(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q8_0_i8mm(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q4_K_i8mm(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q6_K_i8mm(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy);
#endif
#if defined(__x86_64__)
void pb_gemm_packed_q4_0_avx2(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q8_0_avx2(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                              const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q4_0_avx512(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                                const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q8_0_avx512(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                                const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q4_K_avx512(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                                const void *meta, int nt, float *y, int64_t ldy);
void pb_gemm_packed_q6_K_avx512(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                                const void *meta, int nt, float *y, int64_t ldy);
#endif

#if defined(__x86_64__)
PB_KERNEL_FAMILY(avx2);
PB_KERNEL_FAMILY(avx512);
/* x86 only (NEON uses dispatch.c's loops over pb_mad_f32_neon; its fused fp16 tiles are declared below) */
#define PB_X86_ATT(sfx)                                                                                                \
    void pb_mad_f32_rows_##sfx(float *y, const float *x, size_t ldx, const float *a, int nk, int64_t n);               \
    float pb_dot_f16_##sfx(const float *a, const uint16_t *h, int64_t n);                                              \
    void pb_mad_f16_##sfx(float *y, const uint16_t *h, float a, int64_t n)
PB_X86_ATT(avx2);
PB_X86_ATT(avx512);
void pb_dot_f32_tile_avx512(const float *const *q, int nq, const float *k, size_t ldk, int nk, int64_t n, float *s,
                            size_t lds);
void pb_mad_f32_tile_avx512(float *const *y, const float *c, const float *const *a, int ny, const float *x, size_t ldx,
                            int nk, int64_t n);
void pb_dot_f16_tile_avx512(const float *const *q, int nq, const uint16_t *k, size_t ldk, int nk, int64_t n, float *s,
                            size_t lds);
void pb_mad_f16_tile_avx512(float *const *y, const float *c, const float *const *a, int ny, const uint16_t *x,
                            size_t ldx, int nk, int64_t n);
#elif defined(__aarch64__)
PB_KERNEL_FAMILY(neon);
/* fused fp16 attention tiles (arm_neon.c): the contracts of pb_kernels_dot_f16_tile / mad_f16_tile */
void pb_dot_f16_tile_neon(const float *const *q, int nq, const uint16_t *k, size_t ldk, int nk, int64_t n, float *s,
                          size_t lds);
void pb_mad_f16_tile_neon(float *const *y, const float *c, const float *const *a, int ny, const uint16_t *x, size_t ldx,
                          int nk, int64_t n);
#endif

/* Chooses the kernels for pb_cpu_features() once (thread-safe; every pb_kernels_* / pb_matmul* entry calls it). */
void pb_kernels_ready(void);
/* The type's traits as the kernels run them: the tensor room's row (tensor/types.h) with vec_dot set and the ISA's
 * to_float / from_float where it has faster ones (bit-identical to the reference). Out-of-range ids: the unknown
 * row. Use this, not pb_type_get(), wherever vec_dot is called or conversion speed matters. */
const pb_type_traits *pb_kernels_type(int type);

/* Fills vec_dot of every row of table with the ref kernels (dispatch.c uses it as the base layer,
 * then overrides with ISA versions). Exposed so tests can compare an ISA table against ref. */
void pb_kernels_fill_ref(pb_type_traits *table, int n);

/* Attention primitives over float32 rows, SIMD where the CPU has it (picked once by pb_kernels_ready(), which
 * each of them calls). dot: sum a[i]*b[i] with float accumulators in
 * a fixed order (the same on every call, so results do not depend on batching). mad: y[i] += a * x[i]. */
float pb_kernels_dot_f32(const float *a, const float *b, int64_t n);
void pb_kernels_mad_f32(float *y, const float *x, float a, int64_t n);
/* y += a[k] * x[k*ldx ..] for k = 0..nk-1 in that order: bit-identical to nk pb_kernels_mad_f32 calls (the
 * accumulation of attention values over a chunk of keys, y touched once per slice on AVX2/AVX-512). */
void pb_kernels_mad_f32_rows(float *y, const float *x, size_t ldx, const float *a, int nk, int64_t n);
/* Prefill attention over a chunk of keys for several query rows at once. dot tile: s[i*lds + j] =
 * pb_kernels_dot_f32(q[i], k + j*ldk, n); mad tile: for each j < ny, y[j][i] *= c[j] (the online softmax's
 * rescale), then pb_kernels_mad_f32_rows(y[j], x, ldx, a[j], nk, n). Both bit-identical to those calls (so prefill
 * still equals decode); on AVX-512 register-blocked, so a key or value slice loaded once serves several query rows. */
void pb_kernels_dot_f32_tile(const float *const *q, int nq, const float *k, size_t ldk, int nk, int64_t n, float *s,
                             size_t lds);
void pb_kernels_mad_f32_tile(float *const *y, const float *c, const float *const *a, int ny, const float *x, size_t ldx,
                             int nk, int64_t n);
/* The same two over fp16 rows (decode over an F16 KV cache; n <= PB_KERNELS_F16_ROW_MAX): bit-identical to
 * converting the rows to float32 first. */
void pb_kernels_dot_f16_tile(const float *const *q, int nq, const uint16_t *k, size_t ldk, int nk, int64_t n, float *s,
                             size_t lds);
void pb_kernels_mad_f16_tile(float *const *y, const float *c, const float *const *a, int ny, const uint16_t *x,
                             size_t ldx, int nk, int64_t n);
/* dot and mad whose second operand is an fp16 row of n <= PB_KERNELS_F16_ROW_MAX values: bit-identical to
 * converting the row to float32 and calling pb_kernels_dot_f32 / pb_kernels_mad_f32 (decode attention over an
 * F16 KV cache, without the conversion buffer's round trip). */
#define PB_KERNELS_F16_ROW_MAX 1024
float pb_kernels_dot_f16(const float *a, const uint16_t *h, int64_t n);
void pb_kernels_mad_f16(float *y, const uint16_t *h, float a, int64_t n);

/* Gemma's GeGLU in place: gate[i] = gelu_tanh(gate[i]) * up[i]; SIMD on x86 and NEON (exp-based form of
 * the same function, a few ulps from tensor/ops.c's pb_geglu, which the scalar build uses). */
void pb_kernels_geglu(float *gate, const float *up, int64_t n);

/* Attention weights of a chunk of n key scores, in place: when cap > 0 the Gemma 2 soft-cap
 * s = cap * tanh(s / cap) first; then *mx = max(*mx, max s) and s = exp(s - *mx); returns sum s.
 * SIMD exp on x86 and NEON (~2 ulp); plain tanhf/expf elsewhere. Deterministic for a given n. */
float pb_kernels_att_exp(float *s, int64_t n, float cap, float *mx);

/* Gemma 2 soft-cap in place, x = cap * tanh(x / cap) (final logits); SIMD tanh on x86 and NEON (~2 ulp, the
 * same as pb_kernels_att_exp's), tensor/ops.c's pb_softcap elsewhere. */
void pb_kernels_softcap(float *x, int64_t n, float cap);

/* Reads n bytes as fast as this CPU's vectors allow (benches: the bandwidth roofline); returns a checksum. */
uint64_t pb_kernels_stream_read(const void *p, size_t n);

/* Name of the kernel family dispatch.c picked for this CPU: "avx512", "avx2", "neon" or "scalar". */
const char *pb_kernels_isa(void);

#endif
