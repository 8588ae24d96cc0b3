/* matmul.c -- quantized matrix products over the traits table. One engine, pb_matmul_group: the input rows
 * are quantized once per activation format the group's matrices need (RMS-normed in the same pass when
 * asked), then the rows of every matrix are split over the pool in one run, 16-row units weighed by their
 * bytes, each unit a tile call (packed groups, plain-row tiles or one vec_dot per row and token); pair
 * groups (GeGLU) combine gate and up rows while they are in cache. pb_matmul / pb_matmul_packed are one-matrix
 * groups. ISA speed lives in the kernels. */
#include "kernels/matmul.h"
#include "kernels/kernels.h"
#include "tensor/ops.h"
#include "tensor/quant.h"

static pb_gemm_packed_fn packed_table[PB_TYPE_COUNT];

void pb_matmul_set_packed(int type, pb_gemm_packed_fn fn) {
    if (type >= 0 && type < PB_TYPE_COUNT) packed_table[type] = fn;
}

bool pb_pack_supported(int type, int64_t K, int64_t N) {
    pb_kernels_ready(); /* the dispatch installs the kernels */
    return type >= 0 && type < PB_TYPE_COUNT && packed_table[type] && K > 0 && K % pb_type_get(type)->blck == 0 &&
           N > 0 && N % PB_PACK_ROWS == 0;
}

pb_gemm_packed_fn pb_matmul_get_packed(int type) {
    pb_kernels_ready();
    return type >= 0 && type < PB_TYPE_COUNT ? packed_table[type] : NULL;
}

static pb_gemm_fn gemm_table[PB_TYPE_COUNT];

void pb_matmul_set_gemm(int type, pb_gemm_fn fn) {
    if (type >= 0 && type < PB_TYPE_COUNT) gemm_table[type] = fn;
}

/* Bytes of activation meta per block for an activation type (what the packed tiles read). */
static size_t meta_size(int at) {
    return at == PB_TYPE_Q8_0 ? sizeof(pb_pack_ameta) : at == PB_TYPE_Q8_K ? sizeof(pb_pack_kmeta) : 0;
}

size_t pb_matmul_scratch_size(int type, int64_t K, int64_t n_tok) {
    const pb_type_traits *t = pb_type_get(type);
    if (!t->supported || t->blck == 0 || K <= 0 || n_tok <= 0 || K % t->blck != 0) return 0;
    if (t->vec_dot_type == PB_TYPE_F32) return 0;
    const pb_type_traits *at = pb_type_get(t->vec_dot_type);
    size_t row = pb_row_size(t->vec_dot_type, K) + (size_t)(K / at->blck) * meta_size(t->vec_dot_type), out;
    if (row == 0 || !pb_mul_ok(row, (size_t)n_tok, &out) || out > SIZE_MAX - 8) return 0;
    return PB_PAD(out, 8);
}

size_t pb_matmul_group_scratch_size(const pb_mm_op *ops, int n_ops, int64_t K, int64_t n_tok) {
    size_t total = 0;
    for (int i = 0; ops && i < n_ops; i++) {
        size_t s = pb_matmul_scratch_size(ops[i].type, K, n_tok);
        if (total > SIZE_MAX - s) return 0;
        total += s;
    }
    return total;
}

// --- the group engine --------------------------------------------------------------------------------------

/* Rows per unit of work: a packed group, or a block of plain rows whose bytes stay in cache while a chunk of
 * tokens goes by. */
#define MM_UNIT PB_PACK_ROWS
/* Units of a gate/up pair taken together by packed tiles: 128 rows of both stay in cache for pair(). */
#define MM_PAIR_UNITS 8

/* Token chunks: small enough that their activations stay in L2 while the rows stream by. */
#define PK_L2_BYTES (768u * 1024u)

enum { MK_F32, MK_ROWS, MK_AMETA, MK_KMETA }; /* activation formats: floats, quantized rows, + packed meta */

typedef struct mm_fmt {
    int kind, at;
    int32_t offset; /* MK_AMETA: o of the stored weights, sum w a = sum u a - o sum a */
    size_t a_row, m_size;
    int64_t nb;
    uint8_t *meta;
    const uint8_t *act;
} mm_fmt;

typedef struct mm_rt {
    const pb_mm_op *op;
    const pb_type_traits *wt;
    pb_gemm_fn gemm;
    pb_gemm_packed_fn pk;
    size_t w_row;
    const mm_fmt *f;
    int64_t u0, nu, tc; /* first unit, units, tokens per chunk */
    int64_t c0, ucost;  /* bytes of the units before this matrix, bytes of one unit */
} mm_rt;

typedef struct mm_group {
    mm_rt m[PB_MM_MAX_OPS];
    mm_fmt f[PB_MM_MAX_OPS];
    int n_m, n_f;
    pb_mm_pair_fn pair;
    int64_t K, n_tok, n_units, cost;
    const float *x;
    const pb_mm_norm *norm;
} mm_group;

static void quantize_token(const mm_group *g, int64_t t) {
    int64_t K = g->K;
    const float *src = g->x + t * K;
    if (g->norm) {
        pb_rmsnorm(g->norm->out + t * K, src, g->norm->w, K, g->norm->eps);
        src = g->norm->out + t * K;
    }
    for (int i = 0; i < g->n_f; i++) {
        const mm_fmt *f = &g->f[i];
        if (f->kind == MK_F32) continue;
        void *a = (uint8_t *)f->act + (size_t)t * f->a_row;
        pb_kernels_type(f->at)->from_float(src, a, K);
        if (f->kind == MK_AMETA) {
            const pb_block_q8_0 *q = a;
            pb_pack_ameta *m = (pb_pack_ameta *)(void *)f->meta + t * f->nb;
            for (int64_t b = 0; b < f->nb; b++) {
                int32_t sum = 0;
                for (int j = 0; j < 32; j++) sum += q[b].qs[j];
                m[b].bias = -f->offset * sum;
                m[b].d = pb_fp16_to_fp32(q[b].d);
            }
        } else if (f->kind == MK_KMETA) {
            const pb_block_q8_K *q = a;
            pb_pack_kmeta *m = (pb_pack_kmeta *)(void *)f->meta + t * f->nb;
            for (int64_t b = 0; b < f->nb; b++) {
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

static void quantize_worker(void *arg, int ith, int nth) {
    const mm_group *g = arg;
    int64_t lo, hi;
    pb_split(g->n_tok, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) quantize_token(g, t);
}

/* Rows of unit u (relative to the matrix) for tokens [t0, t1). */
static void run_unit(const mm_group *g, const mm_rt *r, int64_t u, int64_t t0, int64_t t1) {
    const pb_mm_op *op = r->op;
    const mm_fmt *f = r->f;
    int64_t r0 = u * MM_UNIT, nr = PB_MIN(MM_UNIT, op->N - r0);
    const uint8_t *w = (const uint8_t *)op->w + (size_t)r0 * r->w_row;
    for (int64_t ts = t0; ts < t1; ts += PB_GEMM_NT) {
        int nt = (int)PB_MIN(PB_GEMM_NT, t1 - ts);
        const uint8_t *a = f->act + (size_t)ts * f->a_row;
        float *y = op->y + ts * op->N + r0;
        if (r->pk)
            r->pk(g->K, w, 1, r->w_row * MM_UNIT, a, f->a_row, f->meta + (size_t)ts * (size_t)f->nb * f->m_size, nt, y,
                  op->N);
        else if (r->gemm)
            r->gemm(g->K, w, r->w_row, nr, a, f->a_row, nt, y, op->N);
        else
            for (int64_t i = 0; i < nr; i++)
                for (int t = 0; t < nt; t++)
                    r->wt->vec_dot(g->K, &y[t * op->N + i], w + (size_t)i * r->w_row, a + (size_t)t * f->a_row);
    }
}

/* Units [u, u + nu) of one matrix for tokens [t0, t1). With at most PB_GEMM_NT tokens (decode) a packed
 * tile takes them in one call, so it can keep a token's activation block in registers while all their
 * rows stream by: each weight byte is loaded once and the activations once per call instead of once per
 * 16 rows. With more tokens, a few units per call for each chunk of PB_GEMM_NT tokens: their rows stay in
 * cache across the chunks. */
static void run_units(const mm_group *g, const mm_rt *r, int64_t u, int64_t nu, int64_t t0, int64_t t1) {
    if (!r->pk) {
        if (t1 - t0 == 1 && r->gemm) { /* one token: one tile call over all the rows (contiguous in a plain matrix), so
                                        * a tile can keep the token's activations in registers while they stream by */
            const pb_mm_op *op = r->op;
            const int64_t r0 = u * MM_UNIT, nr = PB_MIN(nu * MM_UNIT, op->N - r0);
            r->gemm(g->K, (const uint8_t *)op->w + (size_t)r0 * r->w_row, r->w_row, nr,
                    r->f->act + (size_t)t0 * r->f->a_row, r->f->a_row, 1, op->y + t0 * op->N + r0, op->N);
            return;
        }
        for (int64_t i = 0; i < nu; i++) run_unit(g, r, u + i, t0, t1);
        return;
    }
    const pb_mm_op *op = r->op;
    const mm_fmt *f = r->f;
    if (t1 - t0 > PB_GEMM_NT) {
        /* a few units (at most ~256 KB of rows, which stay in cache across the token chunks) per tile call:
         * tiles that rearrange a chunk's activations (the ARM i8mm ones) do it once per call, not per unit */
        const int64_t per = PB_MAX(1, PB_MIN(MM_PAIR_UNITS, (int64_t)(262144 / (r->w_row * MM_UNIT))));
        for (int64_t i = 0; i < nu; i += per) {
            const int64_t n = PB_MIN(per, nu - i);
            const uint8_t *w = (const uint8_t *)op->w + (size_t)((u + i) * MM_UNIT) * r->w_row;
            for (int64_t ts = t0; ts < t1; ts += PB_GEMM_NT) {
                int nt = (int)PB_MIN(PB_GEMM_NT, t1 - ts);
                r->pk(g->K, w, n, r->w_row * MM_UNIT, f->act + (size_t)ts * f->a_row, f->a_row,
                      f->meta + (size_t)ts * (size_t)f->nb * f->m_size, nt, op->y + ts * op->N + (u + i) * MM_UNIT,
                      op->N);
            }
        }
        return;
    }
    const uint8_t *w = (const uint8_t *)op->w + (size_t)(u * MM_UNIT) * r->w_row;
    for (int64_t ts = t0; ts < t1; ts += PB_GEMM_NT) {
        int nt = (int)PB_MIN(PB_GEMM_NT, t1 - ts);
        r->pk(g->K, w, nu, r->w_row * MM_UNIT, f->act + (size_t)ts * f->a_row, f->a_row,
              f->meta + (size_t)ts * (size_t)f->nb * f->m_size, nt, op->y + ts * op->N + u * MM_UNIT, op->N);
    }
}

/* First unit whose bytes start at or after `cost` (units of one matrix weigh the same). */
static int64_t unit_at(const mm_group *g, int64_t cost) {
    for (int i = 0; i < (g->pair ? 1 : g->n_m); i++) {
        const mm_rt *r = &g->m[i];
        if (cost < r->c0 + r->nu * r->ucost) {
            int64_t k = cost <= r->c0 ? 0 : (cost - r->c0 + r->ucost - 1) / r->ucost;
            return r->u0 + PB_MIN(k, r->nu);
        }
    }
    return g->n_units;
}

static void dot_worker(void *arg, int ith, int nth) {
    const mm_group *g = arg;
    int64_t lo = unit_at(g, g->cost * ith / nth), hi = unit_at(g, g->cost * (ith + 1) / nth);
    if (g->pair) { /* both matrices' rows of a unit for a chunk of tokens, then y0 = pair(y0, y1) while in cache */
        const mm_rt *gr = &g->m[0], *ur = &g->m[1];
        int64_t tc = PB_MIN(gr->tc, ur->tc), N = gr->op->N;
        for (int64_t c0 = 0; c0 < g->n_tok; c0 += tc) {
            int64_t c1 = PB_MIN(g->n_tok, c0 + tc);
            /* one token: all the units at once (one tile call per matrix, run_units), so the tile keeps the
             * token's activations in registers over all the rows (packed or plain; per MM_PAIR_UNITS, a packed
             * Q4_K / Q4_0 pair re-read them per 128 rows: +1.6-1.8% of its weight bytes) */
            const bool one = c1 - c0 == 1 && ((gr->pk && ur->pk) || (gr->gemm && ur->gemm));
            const int64_t step = one ? hi - lo : gr->pk && ur->pk ? MM_PAIR_UNITS : 1;
            for (int64_t u = lo; u < hi; u += step) {
                const int64_t nu = PB_MIN(step, hi - u);
                run_units(g, gr, u, nu, c0, c1);
                run_units(g, ur, u, nu, c0, c1);
                int64_t r0 = u * MM_UNIT, nr = PB_MIN(nu * MM_UNIT, N - r0);
                for (int64_t t = c0; t < c1; t++) g->pair(gr->op->y + t * N + r0, ur->op->y + t * N + r0, nr);
            }
        }
        return;
    }
    for (int i = 0; i < g->n_m; i++) {
        const mm_rt *r = &g->m[i];
        int64_t a = PB_MAX(lo, r->u0), b = PB_MIN(hi, r->u0 + r->nu);
        for (int64_t c0 = 0; a < b && c0 < g->n_tok; c0 += r->tc) {
            int64_t c1 = PB_MIN(g->n_tok, c0 + r->tc);
            run_units(g, r, a - r->u0, b - a, c0, c1);
        }
    }
}

pb_status pb_matmul_group(const pb_mm_op *ops, int n_ops, int64_t K, const float *x, int64_t n_tok,
                          const pb_mm_norm *norm, pb_mm_pair_fn pair, void *act_scratch, pb_pool *pool) {
    if (!ops || n_ops < 1 || n_ops > PB_MM_MAX_OPS)
        return pb_error(PB_ERR_INVALID_ARG, "matmul: %d matrices in a group (1..%d)", n_ops, PB_MM_MAX_OPS);
    if (K <= 0 || n_tok < 0)
        return pb_error(PB_ERR_INVALID_ARG, "matmul: bad shape K=%lld n_tok=%lld", (long long)K, (long long)n_tok);
    if (pair && (n_ops != 2 || ops[0].N != ops[1].N))
        return pb_error(PB_ERR_INVALID_ARG, "matmul: a pair group is two matrices of the same height");
    if (n_tok == 0) return PB_OK;
    if (!x || (norm && !norm->out)) return pb_error(PB_ERR_INVALID_ARG, "matmul: NULL input rows");
    mm_group g = {.n_m = n_ops, .pair = pair, .K = K, .n_tok = n_tok, .x = x, .norm = norm};
    size_t used = 0;
    for (int i = 0; i < n_ops; i++) {
        const pb_mm_op *op = &ops[i];
        const pb_type_traits *wt = pb_kernels_type(op->type);
        if (!wt->supported || !wt->vec_dot)
            return pb_error(PB_ERR_UNSUPPORTED, "matmul: type %s is not supported", wt->name);
        if (K % wt->blck != 0 || op->N < 0)
            return pb_error(PB_ERR_INVALID_ARG, "matmul: bad shape K=%lld N=%lld for %s", (long long)K,
                            (long long)op->N, wt->name);
        if (op->packed && !pb_pack_supported(op->type, K, op->N))
            return pb_error(PB_ERR_INVALID_ARG, "matmul: no packed %s kernel for %lld x %lld", wt->name,
                            (long long)op->N, (long long)K);
        if (op->N > 0 && (!op->w || !op->y)) return pb_error(PB_ERR_INVALID_ARG, "matmul: NULL weights or output");
        /* the activation format this matrix reads; matrices that read the same one share it */
        mm_fmt want = {.kind = MK_ROWS, .at = wt->vec_dot_type};
        if (wt->vec_dot_type == PB_TYPE_F32)
            want.kind = MK_F32;
        else if (op->packed && wt->vec_dot_type == PB_TYPE_Q8_0)
            want = (mm_fmt){.kind = MK_AMETA, .at = PB_TYPE_Q8_0, .offset = op->type == PB_TYPE_Q4_0 ? 8 : 128};
        else if (op->packed)
            want.kind = MK_KMETA;
        int fi = 0;
        while (fi < g.n_f && !(g.f[fi].kind == want.kind && g.f[fi].at == want.at && g.f[fi].offset == want.offset))
            fi++;
        if (fi == g.n_f) { /* a new format: its meta, then its rows, in the scratch */
            mm_fmt *f = &g.f[g.n_f++];
            *f = want;
            f->a_row = pb_row_size(f->at, K);
            if (f->kind == MK_F32) {
                f->act = (const uint8_t *)(norm ? norm->out : x);
            } else {
                if (!act_scratch || (uintptr_t)act_scratch % 4)
                    return pb_error(PB_ERR_INVALID_ARG, "matmul: %s weights need 4-byte aligned activation scratch",
                                    wt->name);
                f->nb = K / pb_type_get(f->at)->blck;
                f->m_size = f->kind == MK_ROWS ? 0 : meta_size(f->at);
                f->meta = (uint8_t *)act_scratch + used;
                f->act = f->meta + (size_t)n_tok * (size_t)f->nb * f->m_size;
                used += PB_PAD((size_t)n_tok * ((size_t)f->nb * f->m_size + f->a_row), 8);
            }
        }
        mm_rt *r = &g.m[i];
        *r = (mm_rt){.op = op, .wt = wt, .w_row = pb_row_size(op->type, K), .f = &g.f[fi]};
        r->pk = op->packed ? packed_table[op->type] : NULL;
        r->gemm = !op->packed && wt->vec_dot_type != PB_TYPE_F32 ? gemm_table[op->type] : NULL;
        r->nu = (op->N + MM_UNIT - 1) / MM_UNIT;
        r->u0 = g.n_units;
        r->ucost = (int64_t)r->w_row * MM_UNIT;
        r->c0 = g.cost;
        /* token chunks whose activations stay in L2 while the units' rows go by (each chunk re-reads the rows:
         * a few times per prefill, against activations streamed from L3 for every unit without chunks) */
        int64_t tc = (int64_t)(PK_L2_BYTES / r->f->a_row) / PB_GEMM_NT * PB_GEMM_NT;
        r->tc = PB_MAX(tc, PB_GEMM_NT);
        g.n_units += pair && i == 1 ? 0 : r->nu;
        g.cost += r->nu * r->ucost;
    }
    if (g.n_units == 0) return PB_OK;
    if (pool && n_tok > 1)
        pb_pool_run(pool, quantize_worker, &g);
    else
        quantize_worker(&g, 0, 1);
    if (pair) { /* units are the first matrix's; each also does the second's rows: weigh a unit as both */
        g.m[0].ucost += g.m[1].ucost;
        g.cost = g.m[0].nu * g.m[0].ucost;
    }
    if (pool)
        pb_pool_run(pool, dot_worker, &g);
    else
        dot_worker(&g, 0, 1);
    return PB_OK;
}

pb_status pb_matmul_packed(const void *w, int type, int64_t K, int64_t N, const float *x, int64_t n_tok, float *y,
                           void *act_scratch, pb_pool *pool) {
    if (!pb_pack_supported(type, K, N))
        return pb_error(PB_ERR_INVALID_ARG, "matmul: no packed %s kernel for %lld x %lld", pb_type_name(type),
                        (long long)N, (long long)K);
    if (n_tok < 0) return pb_error(PB_ERR_INVALID_ARG, "matmul: negative token count");
    if (n_tok > 0 && !act_scratch)
        return pb_error(PB_ERR_INVALID_ARG, "matmul: packed %s needs activation scratch", pb_type_name(type));
    pb_mm_op op = {.w = w, .type = type, .N = N, .packed = true, .y = y};
    return pb_matmul_group(&op, 1, K, x, n_tok, NULL, NULL, act_scratch, pool);
}

pb_status pb_matmul(const void *w, int type, int64_t K, int64_t N, const float *x, int64_t n_tok, float *y,
                    void *act_scratch, pb_pool *pool) {
    const pb_type_traits *wt = pb_kernels_type(type);
    if (!wt->supported || !wt->vec_dot)
        return pb_error(PB_ERR_UNSUPPORTED, "matmul: type %s is not supported", wt->name);
    if (K <= 0 || N < 0 || n_tok < 0 || K % wt->blck != 0)
        return pb_error(PB_ERR_INVALID_ARG, "matmul: bad shape K=%lld N=%lld n_tok=%lld for %s", (long long)K,
                        (long long)N, (long long)n_tok, wt->name);
    if (N == 0 || n_tok == 0) return PB_OK;
    pb_mm_op op = {.w = w, .type = type, .N = N, .packed = false, .y = y};
    return pb_matmul_group(&op, 1, K, x, n_tok, NULL, NULL, act_scratch, pool);
}
