/* arm_tile.c -- one packed matmul tile call for the armcount plugin (sym=arm_tile_run): random weights of
 * TYPE (K x N, packed), NT quantized activation rows, one call of the tile the dispatch picked for this CPU
 * (PB_CPU=dotprod narrows it to the sdot tiles). Prints the weight and activation bytes so the bytes the
 * plugin counts can be set against them. Core library only (cross-builds static). Not a test.
 * Usage: arm_tile q4_0|q8_0|q4_K|q6_K K N NT
 *        arm_tile att NQ NK HD: one decode attention step's fp16 tiles instead (sym=arm_att_run): NQ query rows
 *        (a GQA group) against NK fp16 K rows of HD values (pb_kernels_dot_f16_tile), then their weights over NK
 *        fp16 V rows into NQ states (pb_kernels_mad_f16_tile); prints kv_bytes, the K and V bytes.
 *        arm_tile mm q5_0|q4_0|q8_0|q4_K|q6_K K N NT: pb_matmul over a plain (not packed) matrix, activation
 *        quantization included (sym=arm_mm_run): the row tiles, for types without a packed one (Q5_0).
 *        arm_tile pair q4_0|q4_K K N: one token through two packed N x K matrices combined by a pair function
 *        (pb_matmul_group, as the FFN's gate/up; sym=arm_pair_run), activation quantization included. */
#include "base/base.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "tensor/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the one counted call (kept out of line so that sym= brackets exactly the tile) */
__attribute__((noinline)) void arm_tile_run(pb_gemm_packed_fn fn, int64_t K, const void *w, int64_t ng, size_t g_size,
                                            const void *a, size_t a_row, const void *meta, int nt, float *y,
                                            int64_t ldy);
__attribute__((noinline)) void arm_tile_run(pb_gemm_packed_fn fn, int64_t K, const void *w, int64_t ng, size_t g_size,
                                            const void *a, size_t a_row, const void *meta, int nt, float *y,
                                            int64_t ldy) {
    fn(K, w, ng, g_size, a, a_row, meta, nt, y, ldy);
}

__attribute__((noinline)) void arm_att_run(const float *const *q, float *const *st, const float *const *ar, int nq,
                                           const uint16_t *k, const uint16_t *v, int nk, int hd, float *s);
__attribute__((noinline)) void arm_att_run(const float *const *q, float *const *st, const float *const *ar, int nq,
                                           const uint16_t *k, const uint16_t *v, int nk, int hd, float *s) {
    static const float c[8] = {0.5f, 0.25f, 1.0f, 0.75f, 0.5f, 0.25f, 1.0f, 0.75f};
    pb_kernels_dot_f16_tile(q, nq, k, (size_t)hd, nk, hd, s, (size_t)nk);
    pb_kernels_mad_f16_tile(st, c, ar, nq, v, (size_t)hd, nk, hd);
}

static int att_main(int nq, int nk, int hd) {
    if (nq < 1 || nq > 8 || nk < 1 || nk > 4096 || hd < 1 || hd > PB_KERNELS_F16_ROW_MAX) {
        fprintf(stderr, "arm_tile att: NQ 1..8, NK 1..4096, HD 1..%d\n", PB_KERNELS_F16_ROW_MAX);
        return 2;
    }
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)nk * (size_t)hd),
             *v = malloc(sizeof(uint16_t) * (size_t)nk * (size_t)hd);
    float *q = malloc(sizeof(float) * (size_t)(nq * hd)), *st = malloc(sizeof(float) * (size_t)(nq * hd));
    float *s = malloc(sizeof(float) * (size_t)nq * (size_t)nk);
    if (!k || !v || !q || !st || !s) return 1;
    pb_kernels_ready(); /* the dispatch installs the kernels (before the counted region) */
    uint32_t r = 7;
#define ATT_RAND() ((float)((r = r * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f)
    for (int64_t i = 0; i < (int64_t)nk * hd; i++)
        k[i] = pb_fp32_to_fp16(ATT_RAND()), v[i] = pb_fp32_to_fp16(ATT_RAND());
    for (int i = 0; i < nq * hd; i++) q[i] = ATT_RAND(), st[i] = ATT_RAND();
    for (int64_t i = 0; i < (int64_t)nq * nk; i++) s[i] = ATT_RAND();
#undef ATT_RAND
    const float *qr[8], *ar[8];
    float *sr[8];
    for (int i = 0; i < nq; i++) qr[i] = q + i * hd, sr[i] = st + i * hd, ar[i] = s + (size_t)i * (size_t)nk;
    arm_att_run(qr, sr, ar, nq, k, v, nk, hd, s);
    double sum = 0;
    for (int i = 0; i < nq * hd; i++) sum += (double)st[i];
    printf("arm_tile: %s att nq %d nk %d hd %d kv_bytes %zu checksum %.6g\n", pb_kernels_isa(), nq, nk, hd,
           2 * sizeof(uint16_t) * (size_t)nk * (size_t)hd, sum);
    free(k), free(v), free(q), free(st), free(s);
    return 0;
}

__attribute__((noinline)) pb_status arm_mm_run(const void *w, int type, int64_t K, int64_t N, const float *x, int nt,
                                               float *y, void *scratch);
__attribute__((noinline)) pb_status arm_mm_run(const void *w, int type, int64_t K, int64_t N, const float *x, int nt,
                                               float *y, void *scratch) {
    return pb_matmul(w, type, K, N, x, nt, y, scratch, NULL);
}

static int mm_main(const char *name, int64_t K, int64_t N, int nt) {
    const int type = strcmp(name, "q5_0") == 0   ? PB_TYPE_Q5_0
                     : strcmp(name, "q4_0") == 0 ? PB_TYPE_Q4_0
                     : strcmp(name, "q8_0") == 0 ? PB_TYPE_Q8_0
                     : strcmp(name, "q4_K") == 0 ? PB_TYPE_Q4_K
                     : strcmp(name, "q6_K") == 0 ? PB_TYPE_Q6_K
                                                 : -1;
    if (type < 0 || K <= 0 || N <= 0 || K % pb_type_get(type)->blck || nt < 1 || nt > 64) {
        fprintf(stderr, "arm_tile mm: q5_0|q4_0|q8_0|q4_K|q6_K, K a multiple of the block size, NT 1..64\n");
        return 2;
    }
    const size_t row = pb_row_size(type, K), ss = pb_matmul_scratch_size(type, K, nt);
    float *wf = malloc(sizeof(float) * (size_t)K), *x = malloc(sizeof(float) * (size_t)(K * nt));
    float *y = malloc(sizeof(float) * (size_t)(N * nt));
    uint8_t *w = malloc(row * (size_t)N);
    void *scratch = malloc(ss);
    if (!wf || !x || !y || !w || !scratch) return 1;
    uint32_t s = 3;
    for (int64_t r = 0; r < N; r++) {
        for (int64_t k = 0; k < K; k++) wf[k] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
        pb_type_get(type)->from_float(wf, w + (size_t)r * row, K);
    }
    for (int64_t i = 0; i < K * nt; i++) x[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    if (arm_mm_run(w, type, K, N, x, nt, y, scratch) != PB_OK) return 1;
    double sum = 0;
    for (int64_t i = 0; i < N * nt; i++) sum += (double)y[i];
    printf("arm_tile: %s mm %s K %lld N %lld nt %d weight_bytes %zu checksum %.6g\n", pb_kernels_isa(), name,
           (long long)K, (long long)N, nt, row * (size_t)N, sum);
    free(wf), free(x), free(y), free(w), free(scratch);
    return 0;
}

/* a pair function that reads both results, as GeGLU does (the bytes are what is counted, not its math) */
static void pair_mul(float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] *= b[i];
}

__attribute__((noinline)) pb_status arm_pair_run(const pb_mm_op *ops, int64_t K, const float *x, void *scratch);
__attribute__((noinline)) pb_status arm_pair_run(const pb_mm_op *ops, int64_t K, const float *x, void *scratch) {
    return pb_matmul_group(ops, 2, K, x, 1, NULL, pair_mul, scratch, NULL);
}

/* one token through a packed gate/up pair (pb_matmul_group with a pair function), quantization included */
static int pair_main(const char *name, int64_t K, int64_t N) {
    const int type = strcmp(name, "q4_0") == 0 ? PB_TYPE_Q4_0 : strcmp(name, "q4_K") == 0 ? PB_TYPE_Q4_K : -1;
    if (type < 0 || !pb_pack_supported(type, K, N)) {
        fprintf(stderr, "arm_tile pair: q4_0|q4_K, a shape with a packed tile on this CPU (%s)\n", pb_kernels_isa());
        return 2;
    }
    const size_t row = pb_row_size(type, K);
    pb_mm_op ops[2];
    float *wf = malloc(sizeof(float) * (size_t)K), *x = malloc(sizeof(float) * (size_t)K);
    if (!wf || !x) return 1;
    uint32_t s = 5;
    for (int m = 0; m < 2; m++) {
        uint8_t *w = malloc(row * (size_t)N);
        float *y = malloc(sizeof(float) * (size_t)N);
        if (!w || !y) return 1;
        for (int64_t r = 0; r < N; r++) {
            for (int64_t k = 0; k < K; k++) wf[k] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
            pb_type_get(type)->from_float(wf, w + (size_t)r * row, K);
        }
        if (pb_pack_rows(type, w, K, N) != PB_OK) return 1;
        ops[m] = (pb_mm_op){.w = w, .type = type, .N = N, .packed = true, .y = y};
    }
    for (int64_t k = 0; k < K; k++) x[k] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    void *scratch = malloc(pb_matmul_group_scratch_size(ops, 2, K, 1));
    if (!scratch || arm_pair_run(ops, K, x, scratch) != PB_OK) return 1;
    double sum = 0;
    for (int64_t i = 0; i < N; i++) sum += (double)ops[0].y[i];
    printf("arm_tile: %s pair %s K %lld N %lld weight_bytes %zu checksum %.6g\n", pb_kernels_isa(), name, (long long)K,
           (long long)N, 2 * row * (size_t)N, sum);
    for (int m = 0; m < 2; m++) free((void *)ops[m].w), free(ops[m].y);
    free(wf), free(x), free(scratch);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "pair") == 0) return pair_main(argv[2], atoll(argv[3]), atoll(argv[4]));
    if (argc == 5 && strcmp(argv[1], "att") == 0) return att_main(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
    if (argc == 6 && strcmp(argv[1], "mm") == 0) return mm_main(argv[2], atoll(argv[3]), atoll(argv[4]), atoi(argv[5]));
    if (argc < 5) {
        fprintf(stderr, "usage: %s q4_0|q8_0|q4_K|q6_K K N NT\n", argv[0]);
        return 2;
    }
    const int type = strcmp(argv[1], "q4_0") == 0   ? PB_TYPE_Q4_0
                     : strcmp(argv[1], "q8_0") == 0 ? PB_TYPE_Q8_0
                     : strcmp(argv[1], "q4_K") == 0 ? PB_TYPE_Q4_K
                     : strcmp(argv[1], "q6_K") == 0 ? PB_TYPE_Q6_K
                                                    : -1;
    const int64_t K = atoll(argv[2]), N = atoll(argv[3]);
    const int nt = atoi(argv[4]);
    if (type < 0 || nt < 1 || nt > PB_GEMM_NT || !pb_pack_supported(type, K, N)) {
        fprintf(stderr, "arm_tile: unsupported type/shape or no packed tile on this CPU (%s)\n", pb_kernels_isa());
        return 2;
    }
    const pb_gemm_packed_fn fn = pb_matmul_get_packed(type);
    const int at = pb_type_get(type)->vec_dot_type;
    const int64_t nb = K / pb_type_get(at)->blck;
    const size_t row = pb_row_size(type, K), a_row = pb_row_size(at, K);
    float *wf = malloc(sizeof(float) * (size_t)K), *x = malloc(sizeof(float) * (size_t)K);
    uint8_t *w = malloc(row * (size_t)N), *act = malloc(a_row * (size_t)nt);
    pb_pack_kmeta *meta = calloc((size_t)(nb * nt), sizeof *meta); /* large enough for either meta */
    float *y = malloc(sizeof(float) * (size_t)(N * nt));
    if (!wf || !x || !w || !act || !meta || !y) return 1;
    uint32_t s = 1;
    for (int64_t r = 0; r < N; r++) {
        for (int64_t k = 0; k < K; k++) wf[k] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
        pb_type_get(type)->from_float(wf, w + (size_t)r * row, K);
    }
    if (pb_pack_rows(type, w, K, N) != PB_OK) return 1;
    pb_pack_ameta *am = (pb_pack_ameta *)(void *)meta;
    for (int t = 0; t < nt; t++) {
        for (int64_t k = 0; k < K; k++) x[k] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
        pb_type_get(at)->from_float(x, act + (size_t)t * a_row, K);
        if (at != PB_TYPE_Q8_0) continue;
        const pb_block_q8_0 *q = (const pb_block_q8_0 *)(const void *)(act + (size_t)t * a_row);
        for (int64_t b = 0; b < nb; b++) {
            int32_t sum = 0;
            for (int i = 0; i < 32; i++) sum += q[b].qs[i];
            am[t * nb + b].bias = -(type == PB_TYPE_Q4_0 ? 8 : 128) * sum;
            am[t * nb + b].d = pb_fp16_to_fp32(q[b].d);
        }
    }
    arm_tile_run(fn, K, w, N / PB_PACK_ROWS, row * PB_PACK_ROWS, act, a_row, meta, nt, y, N);
    double sum = 0;
    for (int64_t i = 0; i < N * nt; i++) sum += (double)y[i];
    printf("arm_tile: %s %s K %lld N %lld nt %d weight_bytes %zu act_bytes %zu y_bytes %zu checksum %.6g\n",
           pb_kernels_isa(), argv[1], (long long)K, (long long)N, nt, row * (size_t)N, a_row * (size_t)nt,
           sizeof(float) * (size_t)(N * nt), sum);
    free(wf), free(x), free(w), free(act), free(meta), free(y);
    return 0;
}
