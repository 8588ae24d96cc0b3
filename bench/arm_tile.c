/* arm_tile.c -- one packed matmul tile call for the armcount plugin (sym=arm_tile_run): random weights of
 * TYPE (K x N, packed), NT quantized activation rows, one call of the tile the dispatch picked for this CPU
 * (PB_CPU=dotprod narrows it to the sdot tiles). Prints the weight and activation bytes so the bytes the
 * plugin counts can be set against them. Core library only (cross-builds static). Not a test.
 * Usage: arm_tile q4_0|q8_0|q4_K|q6_K K N NT */
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

int main(int argc, char **argv) {
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
