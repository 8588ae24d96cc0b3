/* matmul.h -- y = W x for a weight matrix in any supported type: activations quantized once, rows split
 * across the thread pool. Nothing is allocated inside (callers size act_scratch once). */
#ifndef PB_MATMUL_H
#define PB_MATMUL_H

#include "tensor/types.h"

/* Tile kernel of the kernels room: y[t*ldy + r] = dot(weight row r, activation row t) for r < nr and
 * t < nt (1 <= nt <= PB_GEMM_NT); w rows w_row bytes apart, activation rows (vec_dot_type) a_row bytes
 * apart. Each result must be bit-identical to the type's vec_dot on the same two rows. */
#define PB_GEMM_NT 8
typedef void (*pb_gemm_fn)(int64_t n, const void *w, size_t w_row, int64_t nr, const void *a, size_t a_row, int nt,
                           float *y, int64_t ldy);

/* Installs the tile kernel pb_matmul uses for `type` (NULL: one vec_dot per row and token). Called only by
 * kernels/dispatch.c inside pb_kernels_init, which runs once before any pb_type_get() returns. */
void pb_matmul_set_gemm(int type, pb_gemm_fn fn);

/* Bytes of act_scratch that pb_matmul needs for n_tok activation rows of K values against weights of
 * `type`: n_tok rows of vec_dot_type(type) (0 for F32/F16/BF16 weights, which read x directly).
 * Returns 0 too for unsupported types or K not a multiple of the block size (pb_matmul then fails). */
size_t pb_matmul_scratch_size(int type, int64_t K, int64_t n_tok);

/* y[t*N + r] = sum_k W[r][k] * x[t*K + k] for t < n_tok, r < N.
 * w: N rows of K elements of `type`, row-major as in GGUF (row r starts at r * pb_row_size(type, K)).
 * x: n_tok rows of K floats; y: n_tok rows of N floats (must not alias x or w).
 * act_scratch: at least pb_matmul_scratch_size(type, K, n_tok) bytes (may be NULL when that is 0).
 * pool: may be NULL (runs on the calling thread); activation rows and then weight rows are split
 * evenly over its threads. Deterministic: the result does not depend on the number of threads.
 * Errors: PB_ERR_UNSUPPORTED for types without a dot kernel, PB_ERR_INVALID_ARG for K % blck != 0 or
 * negative sizes. Thread safety: reentrant; concurrent calls need separate scratch and pools. */
pb_status pb_matmul(const void *w, int type, int64_t K, int64_t N, const float *x, int64_t n_tok, float *y,
                    void *act_scratch, pb_pool *pool);

#endif
