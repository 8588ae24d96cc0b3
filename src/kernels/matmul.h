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
 * kernels/dispatch.c while it chooses the kernels (pb_kernels_ready), before any matmul entry returns. */
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

/* ---- packed (row-interleaved) weights ------------------------------------------------------------
 * A Q4_0, Q8_0, Q4_K or Q6_K matrix whose N is a multiple of PB_PACK_ROWS can be repacked (same size) so that
 * one 512-bit vector holds 4 weight bytes of each of 16 rows: a byte dot product then leaves one row per
 * int32 lane and the per-block float step is shared by 16 rows. Group g (rows 16g .. 16g+15) takes the
 * bytes of those rows, block after block; a packed block is the 16 row blocks with every field stored
 * "by column": for a 4-byte column c of a field, its bytes for rows 0..15 side by side ([c][16][4]).
 *   Q4_0 (18 B/row):  d[16] fp16, then qs as 4 columns (byte 4c+i: elements 4c+i low, 16+4c+i high)
 *   Q8_0 (34 B/row):  d[16] fp16, then qs + 128 (unsigned) as 8 columns
 *   Q4_K (144 B/row): d[16], dmin[16] fp16, scales as 3 columns, qs as 32 columns
 *   Q6_K (210 B/row): d[16] fp16, then ql as 32, qh as 16, scales as 4 columns
 * Weights are kept as stored, unsigned u with an offset where the format has one (Q4_0: 8, Q8_0: 128):
 * sum w*a = sum u*a - o*sum a, the second term from the activation meta below. */
#define PB_PACK_ROWS 16

/* Per activation block, filled by pb_matmul_packed. Q8_0 activations (Q4_0, Q8_0 weights): the offset
 * term -o * sum(a.qs) and a.d as float. Q8_K activations (K-quants): for Q4_K's mins the eight 32-value
 * sums bs_j = bsums[2j] + bsums[2j+1] as int16 pairs (bs0|bs2<<16, bs1|bs3<<16, bs4|bs6<<16,
 * bs5|bs7<<16); for Q6_K's -32 offset off_j = -32 * bsums[j]; and a.d. */
typedef struct pb_pack_ameta {
    int32_t bias;
    float d;
} pb_pack_ameta;
typedef struct pb_pack_kmeta {
    uint32_t mp[4];
    int32_t off[16];
    float d;
} pb_pack_kmeta;

/* Packed tile of the kernels room, for each of ng groups (g_size bytes apart, K columns) and t < nt <=
 * PB_GEMM_NT, writes y[t*ldy + 16g + r]. meta: the activation meta of token t's blocks at meta + t*nb
 * (nb = K / block size). Each lane computes exactly the sequence of the scalar spec (kernels/ref_pack.c),
 * so every ISA version is bit-identical to it. */
typedef void (*pb_gemm_packed_fn)(int64_t K, const void *w, int64_t ng, size_t g_size, const void *a, size_t a_row,
                                  const void *meta, int nt, float *y, int64_t ldy);

/* Installs the packed tile for `type` (kernels/dispatch.c only; NULL = no packing for this type). */
void pb_matmul_set_packed(int type, pb_gemm_packed_fn fn);

/* The packed tile the dispatch installed for `type` (NULL: none), for benches and tests. */
pb_gemm_packed_fn pb_matmul_get_packed(int type);

/* True when this CPU has a packed kernel for `type` and the shape packs (N % 16 == 0, K % 32 == 0). */
bool pb_pack_supported(int type, int64_t K, int64_t N);

/* Repacks N rows of K elements of `type` in place (w: pb_row_size(type, K) * N bytes). Needs only a
 * 16-row scratch of its own. PB_ERR_INVALID_ARG when the shape does not pack, PB_ERR_NOMEM. */
pb_status pb_pack_rows(int type, void *w, int64_t K, int64_t N);

/* Packs row groups [g0, g1) of src (file layout) into the same byte range of dst (no overlap allowed):
 * threads can share a matrix by groups. PB_ERR_INVALID_ARG when the shape does not pack. */
pb_status pb_pack_groups(int type, const void *src, void *dst, int64_t K, int64_t N, int64_t g0, int64_t g1);

/* Writes row r of a packed matrix in the file layout (pb_row_size(type, K) bytes) to dst. */
void pb_pack_read_row(int type, const void *w, int64_t K, int64_t r, void *dst);
/* Row r of a packed matrix dequantized to K floats (as to_float on the file row would give). */
void pb_pack_read_row_float(int type, const void *w, int64_t K, int64_t r, float *dst);

/* pb_matmul for a packed matrix (same contract; the scratch size is pb_matmul_scratch_size's). */
pb_status pb_matmul_packed(const void *w, int type, int64_t K, int64_t N, const float *x, int64_t n_tok, float *y,
                           void *act_scratch, pb_pool *pool);

/* ---- groups: several matrices over the same input rows -----------------------------------------------
 * One matrix of a group: N rows of K elements of `type` (packed: repacked by pb_pack_rows/pb_pack_groups),
 * results to y (n_tok rows of N floats). */
#define PB_MM_MAX_OPS 4
typedef struct pb_mm_op {
    const void *w;
    int type;
    int64_t N;
    bool packed;
    float *y;
} pb_mm_op;

/* Optional RMSNorm of the input rows, fused with their quantization: out = RMSNorm(x; w, eps) per token
 * (pb_rmsnorm, also written to out, n_tok rows of K floats) and the matrices read out. */
typedef struct pb_mm_norm {
    const float *w;
    float eps;
    float *out;
} pb_mm_norm;

/* Combines two results row segment by row segment: a[i] = f(a[i], b[i]) for i < n (GeGLU). */
typedef void (*pb_mm_pair_fn)(float *a, const float *b, int64_t n);

/* ops[i].y = W_i . x for every matrix of the group (1..PB_MM_MAX_OPS, same K). x is normed (when norm) and
 * quantized once per activation format the group needs; then one pool run computes all rows, split by
 * their bytes. With pair (n_ops == 2, same N): ops[0].y = pair(ops[0].y, ops[1].y), applied to each
 * 16-row segment of each token as soon as both are computed (ops[1].y keeps the second result). Each
 * output is bit-identical to pb_matmul / pb_matmul_packed of that matrix on the same (normed) rows, so
 * results do not depend on grouping or thread count. act_scratch: pb_matmul_group_scratch_size bytes,
 * 4-byte aligned. Errors as pb_matmul's. */
pb_status pb_matmul_group(const pb_mm_op *ops, int n_ops, int64_t K, const float *x, int64_t n_tok,
                          const pb_mm_norm *norm, pb_mm_pair_fn pair, void *act_scratch, pb_pool *pool);
size_t pb_matmul_group_scratch_size(const pb_mm_op *ops, int n_ops, int64_t K, int64_t n_tok);

#endif
