/* matmul.c -- generic quantized matrix-vector/matrix product over the traits table (correct first:
 * quantize activations once, then one vec_dot per (row, token)). ISA speed lives in the kernels. */
#include "tensor/matmul.h"

size_t pb_matmul_scratch_size(int type, int64_t K, int64_t n_tok) {
    const pb_type_traits *t = pb_type_get(type);
    if (!t->supported || t->blck == 0 || K <= 0 || n_tok <= 0 || K % t->blck != 0) return 0;
    if (t->vec_dot_type == PB_TYPE_F32) return 0;
    size_t row = pb_row_size(t->vec_dot_type, K), out;
    if (row == 0 || !pb_mul_ok(row, (size_t)n_tok, &out)) return 0;
    return out;
}

static pb_gemm_fn gemm_table[PB_TYPE_COUNT];

void pb_matmul_set_gemm(int type, pb_gemm_fn fn) {
    if (type >= 0 && type < PB_TYPE_COUNT) gemm_table[type] = fn;
}

/* Weight rows per tile pass: their bytes stay in L1/L2 while every chunk of PB_GEMM_NT tokens goes by. */
#define MM_ROW_BLOCK 16

typedef struct mm_ctx {
    const pb_type_traits *wt, *at;
    pb_gemm_fn gemm;
    const uint8_t *w;
    size_t w_row, a_row;
    int64_t K, N, n_tok;
    const float *x;
    const uint8_t *act; /* x itself for float weights */
    uint8_t *scratch;
    float *y;
} mm_ctx;

static void quantize_rows(void *arg, int ith, int nth) {
    mm_ctx *c = arg;
    int64_t lo, hi;
    pb_split(c->n_tok, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) c->at->from_float(c->x + t * c->K, c->scratch + (size_t)t * c->a_row, c->K);
}

static void dot_rows(void *arg, int ith, int nth) {
    mm_ctx *c = arg;
    int64_t lo, hi;
    pb_split(c->N, ith, nth, &lo, &hi);
    if (c->gemm) { /* tiles: MM_ROW_BLOCK rows x PB_GEMM_NT tokens, weight unpacking shared by the tokens */
        for (int64_t r0 = lo; r0 < hi; r0 += MM_ROW_BLOCK) {
            int64_t nr = PB_MIN(MM_ROW_BLOCK, hi - r0);
            for (int64_t t0 = 0; t0 < c->n_tok; t0 += PB_GEMM_NT) {
                int nt = (int)PB_MIN(PB_GEMM_NT, c->n_tok - t0);
                c->gemm(c->K, c->w + (size_t)r0 * c->w_row, c->w_row, nr, c->act + (size_t)t0 * c->a_row, c->a_row, nt,
                        c->y + t0 * c->N + r0, c->N);
            }
        }
        return;
    }
    pb_vec_dot_fn dot = c->wt->vec_dot;
    for (int64_t r = lo; r < hi; r++) {
        const uint8_t *wr = c->w + (size_t)r * c->w_row;
        for (int64_t t = 0; t < c->n_tok; t++) dot(c->K, &c->y[t * c->N + r], wr, c->act + (size_t)t * c->a_row);
    }
}

pb_status pb_matmul(const void *w, int type, int64_t K, int64_t N, const float *x, int64_t n_tok, float *y,
                    void *act_scratch, pb_pool *pool) {
    const pb_type_traits *wt = pb_type_get(type);
    if (!wt->supported || !wt->vec_dot)
        return pb_error(PB_ERR_UNSUPPORTED, "matmul: type %s is not supported", wt->name);
    if (K <= 0 || N < 0 || n_tok < 0 || K % wt->blck != 0)
        return pb_error(PB_ERR_INVALID_ARG, "matmul: bad shape K=%lld N=%lld n_tok=%lld for %s", (long long)K,
                        (long long)N, (long long)n_tok, wt->name);
    if (N == 0 || n_tok == 0) return PB_OK;
    mm_ctx c = {.wt = wt,
                .at = pb_type_get(wt->vec_dot_type),
                .w = w,
                .w_row = pb_row_size(type, K),
                .K = K,
                .N = N,
                .n_tok = n_tok,
                .x = x,
                .y = y};
    c.gemm = wt->vec_dot_type != PB_TYPE_F32 ? gemm_table[type] : NULL;
    c.a_row = pb_row_size(wt->vec_dot_type, K);
    if (wt->vec_dot_type == PB_TYPE_F32) {
        c.act = (const uint8_t *)x;
    } else {
        if (!act_scratch) return pb_error(PB_ERR_INVALID_ARG, "matmul: %s weights need activation scratch", wt->name);
        c.scratch = act_scratch;
        c.act = act_scratch;
        if (pool && n_tok > 1)
            pb_pool_run(pool, quantize_rows, &c);
        else
            quantize_rows(&c, 0, 1);
    }
    if (pool)
        pb_pool_run(pool, dot_rows, &c);
    else
        dot_rows(&c, 0, 1);
    return PB_OK;
}
