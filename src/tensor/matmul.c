/* matmul.c -- generic quantized matrix-vector/matrix product over the traits table (correct first:
 * quantize activations once, then one vec_dot per (row, token)). ISA speed lives in the kernels. */
#include "tensor/matmul.h"
#include "tensor/quant.h"

size_t pb_matmul_scratch_size(int type, int64_t K, int64_t n_tok) {
    const pb_type_traits *t = pb_type_get(type);
    if (!t->supported || t->blck == 0 || K <= 0 || n_tok <= 0 || K % t->blck != 0) return 0;
    if (t->vec_dot_type == PB_TYPE_F32) return 0;
    size_t row = pb_row_size(t->vec_dot_type, K), out;
    /* the packed path's activation meta */
    if (t->vec_dot_type == PB_TYPE_Q8_0) row += (size_t)(K / 32) * sizeof(pb_pack_ameta);
    if (t->vec_dot_type == PB_TYPE_Q8_K) row += (size_t)(K / PB_QK_K) * sizeof(pb_pack_kmeta);
    if (row == 0 || !pb_mul_ok(row, (size_t)n_tok, &out)) return 0;
    return out;
}

static pb_gemm_packed_fn packed_table[PB_TYPE_COUNT];

void pb_matmul_set_packed(int type, pb_gemm_packed_fn fn) {
    if (type >= 0 && type < PB_TYPE_COUNT) packed_table[type] = fn;
}

bool pb_pack_supported(int type, int64_t K, int64_t N) {
    (void)pb_type_get(0); /* the dispatch installs the kernels */
    return type >= 0 && type < PB_TYPE_COUNT && packed_table[type] && K > 0 && K % pb_type_get(type)->blck == 0 &&
           N > 0 && N % PB_PACK_ROWS == 0;
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

// --- packed matrices ---------------------------------------------------------------------------------

typedef struct pk_ctx {
    pb_gemm_packed_fn fn;
    const pb_type_traits *at;
    const uint8_t *w;
    size_t g_size, a_row, m_size;
    int64_t K, N, n_tok, nb;
    int32_t offset; /* Q8_0 activations: o of the stored weights, sum w a = sum u a - o sum a */
    const float *x;
    uint8_t *act, *meta;
    float *y;
} pk_ctx;

static void pk_quantize(void *arg, int ith, int nth) {
    pk_ctx *c = arg;
    int64_t lo, hi;
    pb_split(c->n_tok, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        void *a = c->act + (size_t)t * c->a_row;
        c->at->from_float(c->x + t * c->K, a, c->K);
        if (c->at == pb_type_get(PB_TYPE_Q8_0)) {
            const pb_block_q8_0 *q = a;
            pb_pack_ameta *m = (pb_pack_ameta *)(void *)c->meta + t * c->nb;
            for (int64_t b = 0; b < c->nb; b++) {
                int32_t sum = 0;
                for (int i = 0; i < 32; i++) sum += q[b].qs[i];
                m[b].bias = -c->offset * sum;
                m[b].d = pb_fp16_to_fp32(q[b].d);
            }
        } else {
            const pb_block_q8_K *q = a;
            pb_pack_kmeta *m = (pb_pack_kmeta *)(void *)c->meta + t * c->nb;
            for (int64_t b = 0; b < c->nb; b++) {
                uint16_t bs[8];
                for (int j = 0; j < 8; j++) bs[j] = (uint16_t)(q[b].bsums[2 * j] + q[b].bsums[2 * j + 1]);
                m[b].mp[0] = bs[0] | (uint32_t)bs[2] << 16;
                m[b].mp[1] = bs[1] | (uint32_t)bs[3] << 16;
                m[b].mp[2] = bs[4] | (uint32_t)bs[6] << 16;
                m[b].mp[3] = bs[5] | (uint32_t)bs[7] << 16;
                for (int j = 0; j < 16; j++) m[b].off[j] = -32 * q[b].bsums[j];
                m[b].d = q[b].d;
            }
        }
    }
}

/* Token chunks small enough that their activations stay in L2 while the row groups stream by. */
#define PK_L2_BYTES (768u * 1024u)

static void pk_dot(void *arg, int ith, int nth) {
    pk_ctx *c = arg;
    int64_t lo, hi;
    pb_split(c->N / PB_PACK_ROWS, ith, nth, &lo, &hi);
    int64_t tc = (int64_t)(PK_L2_BYTES / c->a_row) / PB_GEMM_NT * PB_GEMM_NT;
    if (tc < PB_GEMM_NT) tc = PB_GEMM_NT;
    for (int64_t c0 = 0; c0 < c->n_tok; c0 += tc) {
        int64_t c1 = PB_MIN(c->n_tok, c0 + tc);
        for (int64_t g = lo; g < hi; g++)
            for (int64_t t0 = c0; t0 < c1; t0 += PB_GEMM_NT) {
                int nt = (int)PB_MIN(PB_GEMM_NT, c1 - t0);
                c->fn(c->K, c->w + (size_t)g * c->g_size, 1, c->g_size, c->act + (size_t)t0 * c->a_row, c->a_row,
                      c->meta + (size_t)t0 * (size_t)c->nb * c->m_size, nt, c->y + t0 * c->N + g * PB_PACK_ROWS, c->N);
            }
    }
}

pb_status pb_matmul_packed(const void *w, int type, int64_t K, int64_t N, const float *x, int64_t n_tok, float *y,
                           void *act_scratch, pb_pool *pool) {
    if (!pb_pack_supported(type, K, N))
        return pb_error(PB_ERR_INVALID_ARG, "matmul: no packed %s kernel for %lld x %lld", pb_type_name(type),
                        (long long)N, (long long)K);
    if (n_tok < 0) return pb_error(PB_ERR_INVALID_ARG, "matmul: negative token count");
    if (n_tok == 0) return PB_OK;
    if (!act_scratch)
        return pb_error(PB_ERR_INVALID_ARG, "matmul: packed %s needs activation scratch", pb_type_name(type));
    const int at = pb_type_get(type)->vec_dot_type;
    pk_ctx c = {.fn = packed_table[type],
                .at = pb_type_get(at),
                .w = w,
                .g_size = pb_row_size(type, K) * PB_PACK_ROWS,
                .a_row = pb_row_size(at, K),
                .m_size = at == PB_TYPE_Q8_0 ? sizeof(pb_pack_ameta) : sizeof(pb_pack_kmeta),
                .K = K,
                .N = N,
                .n_tok = n_tok,
                .nb = K / pb_type_get(at)->blck,
                .offset = type == PB_TYPE_Q4_0   ? 8
                          : type == PB_TYPE_Q8_0 ? 128
                                                 : 0,
                .x = x,
                .meta = act_scratch, /* first (caller's alignment), then the activation rows */
                .y = y};
    if ((uintptr_t)act_scratch % 4)
        return pb_error(PB_ERR_INVALID_ARG, "matmul: activation scratch not 4-byte aligned");
    c.act = (uint8_t *)act_scratch + (size_t)n_tok * (size_t)c.nb * c.m_size;
    if (pool && n_tok > 1)
        pb_pool_run(pool, pk_quantize, &c);
    else
        pk_quantize(&c, 0, 1);
    if (pool)
        pb_pool_run(pool, pk_dot, &c);
    else
        pk_dot(&c, 0, 1);
    return PB_OK;
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
