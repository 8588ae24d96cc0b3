/* test_quant.c -- type table, fp16/bf16, dequantization goldens and reference quantizers vs the peer fixtures. */
#include "gguf/gguf.h"
#include "pb_test.h"
#include "tensor/quant.h"
#include "kernels/kernels.h"
#include "tensor/types.h"

#include <math.h>
#include <stdint.h>

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- table ----------------------------------------------------------------------------------- */

static void test_table(void) {
    static const struct {
        int id;
        const char *name;
        int64_t blck;
        size_t size;
    } want[] = {{0, "f32", 1, 4},         {1, "f16", 1, 2},         {2, "q4_0", 32, 18},      {3, "q4_1", 32, 20},
                {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},      {8, "q8_0", 32, 34},      {9, "q8_1", 32, 36},
                {10, "q2_K", 256, 84},    {11, "q3_K", 256, 110},   {12, "q4_K", 256, 144},   {13, "q5_K", 256, 176},
                {14, "q6_K", 256, 210},   {15, "q8_K", 256, 292},   {16, "iq2_xxs", 256, 66}, {17, "iq2_xs", 256, 74},
                {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},   {20, "iq4_nl", 32, 18},   {21, "iq3_s", 256, 110},
                {22, "iq2_s", 256, 82},   {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},         {25, "i16", 1, 2},
                {26, "i32", 1, 4},        {27, "i64", 1, 8},        {28, "f64", 1, 8},        {29, "iq1_m", 256, 56},
                {30, "bf16", 1, 2},       {34, "tq1_0", 256, 54},   {35, "tq2_0", 256, 66}};
    int bad = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const pb_type_traits *t = pb_type_get(want[i].id);
        if (strcmp(t->name, want[i].name) != 0 || t->blck != want[i].blck || t->type_size != want[i].size) {
            NOTE("type %d: got %s %lld %zu", want[i].id, t->name, (long long)t->blck, t->type_size);
            bad++;
        }
        if (pb_type_from_name(want[i].name) != want[i].id) bad++;
    }
    CHECK(bad == 0, "geometry, names and name lookup of %zu type ids", sizeof want / sizeof want[0]);
    int removed[] = {4, 5, 31, 32, 33, 36, 37, 38};
    bad = 0;
    for (int i = 0; i < 8; i++) bad += pb_type_get(removed[i])->blck != 0 || pb_row_size(removed[i], 256) != 0;
    CHECK(bad == 0, "removed ids 4 5 31-33 36-38 have no geometry");
    CHECK(pb_type_get(-1)->blck == 0 && pb_type_get(39)->blck == 0 && strcmp(pb_type_get(99)->name, "unknown") == 0,
          "out-of-range ids give the unknown row");
    CHECK(strcmp(pb_type_name(77), "type#77") == 0, "pb_type_name of an unknown id");
    CHECK(pb_type_from_name("Q4_K") == 12 && pb_type_from_name("BF16") == 30 && pb_type_from_name("q9_9") == -1,
          "pb_type_from_name is case-insensitive and rejects unknown names");
    CHECK(pb_row_size(PB_TYPE_Q4_K, 2304) == 9 * 144 && pb_row_size(PB_TYPE_Q4_K, 1152) == 0 &&
              pb_row_size(PB_TYPE_F16, 7) == 14 && pb_row_size(PB_TYPE_Q8_0, -32) == 0 &&
              pb_row_size(PB_TYPE_F32, INT64_MAX) == 0,
          "pb_row_size: multiples, non-multiples, negative, overflow");
    CHECK(pb_type_check_supported(PB_TYPE_IQ2_XXS) == PB_ERR_UNSUPPORTED &&
              strcmp(pb_last_error(), "type iq2_xxs is not supported") == 0,
          "iq2_xxs is recognized and refused: '%s'", pb_last_error());
    CHECK(pb_type_check_supported(PB_TYPE_TQ1_0) == PB_ERR_UNSUPPORTED && strstr(pb_last_error(), "tq1_0"),
          "tq1_0 refused by name");
    CHECK(pb_type_check_supported(4) == PB_ERR_UNSUPPORTED && strstr(pb_last_error(), "id 4"), "removed id 4 refused");
    int sup[] = {0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 30};
    bad = 0;
    for (int i = 0; i < 13; i++) {
        const pb_type_traits *t = pb_kernels_type(sup[i]);
        bad += pb_type_check_supported(sup[i]) != PB_OK || !t->to_float || !t->from_float || !t->vec_dot;
        const pb_type_traits *a = pb_type_get(t->vec_dot_type);
        bad += !a->from_float;
    }
    CHECK(bad == 0, "13 weight types have to_float, from_float, vec_dot and a quantizable vec_dot_type");
    CHECK(pb_type_get(PB_TYPE_Q4_K)->vec_dot_type == PB_TYPE_Q8_K &&
              pb_type_get(PB_TYPE_Q4_0)->vec_dot_type == PB_TYPE_Q8_0 &&
              pb_type_get(PB_TYPE_Q5_1)->vec_dot_type == PB_TYPE_Q8_0 &&
              pb_type_get(PB_TYPE_F16)->vec_dot_type == PB_TYPE_F32,
          "vec_dot_type: K-quants Q8_K, Q4_0 Q8_0, Q5_1 Q8_0, F16 F32");
}

/* ---- fp16 / bf16 ----------------------------------------------------------------------------- */

static void test_fp16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = pb_fp16_to_fp32((uint16_t)h);
        bool nan = ((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF);
        if (nan) {
            bad +=
                !isnan(f) || (pb_fp32_to_fp16(f) & 0x7FFF) != 0x7E00 || (pb_fp32_to_fp16(f) & 0x8000) != (h & 0x8000);
        } else {
            bad += pb_fp32_to_fp16(f) != h;
        }
    }
    CHECK(bad == 0, "fp16 -> fp32 -> fp16 is the identity for all 65536 halves (NaN -> 0x7E00 keeping sign)");
    /* Round to nearest even at every midpoint between consecutive positive finite halves. */
    bad = 0;
    for (uint32_t h = 0; h < 0x7BFF; h++) {
        float a = pb_fp16_to_fp32((uint16_t)h), b = pb_fp16_to_fp32((uint16_t)(h + 1));
        float mid = (a + b) * 0.5f; /* exact: 12 significant bits */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        bad += pb_fp32_to_fp16(mid) != even;
        bad += pb_fp32_to_fp16(bitsf(fbits(mid) - 1)) != h;
        bad += pb_fp32_to_fp16(bitsf(fbits(mid) + 1)) != h + 1;
        bad += pb_fp32_to_fp16(-mid) != (even | 0x8000);
    }
    CHECK(bad == 0, "fp32 -> fp16 rounds half to even at all 31743 midpoints (and 1 ulp either side)");
    CHECK(pb_fp32_to_fp16(65519.996f) == 0x7BFF && pb_fp32_to_fp16(65520.0f) == 0x7C00 &&
              pb_fp32_to_fp16(1e30f) == 0x7C00 && pb_fp32_to_fp16(-INFINITY) == 0xFC00 &&
              pb_fp32_to_fp16(bitsf(0x33000000u)) == 0 && pb_fp32_to_fp16(bitsf(0x33000001u)) == 1,
          "fp16 overflow to inf at 65520, smallest subnormal rounding");
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = pb_bf16_to_fp32((uint16_t)h);
        if (isnan(f)) continue;
        bad += pb_fp32_to_bf16(f) != h;
        if ((h & 0x7F80) != 0x7F80 && (h & 0x7FFF) != 0x7F7F) {
            uint32_t mid = ((uint32_t)h << 16) | 0x8000u;
            bad += pb_fp32_to_bf16(bitsf(mid)) != ((h & 1) ? h + 1 : h);
        }
    }
    CHECK(bad == 0 && pb_fp32_to_bf16(NAN) == (uint16_t)((fbits(NAN) >> 16) | 0x40),
          "bf16 round trip, ties to even, quiet NaN");
}

/* ---- fixtures -------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    int type;
} qtypes[] = {{"q4_0", 2},  {"q4_1", 3},  {"q5_0", 6},  {"q5_1", 7},  {"q8_0", 8},
              {"q2_k", 10}, {"q3_k", 11}, {"q4_k", 12}, {"q5_k", 13}, {"q6_k", 14}};

static const pb_gguf_tensor *want_tensor(pb_gguf *g, const char *prefix, const char *suffix) {
    char name[64];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    const pb_gguf_tensor *t = pb_gguf_find_tensor(g, name);
    if (!t) CHECK(0, "fixture tensor %s present", name);
    return t;
}

/* Dequantizes blocks with the table and compares with want bit for bit. */
static void check_dequant(const pb_gguf_tensor *blocks, const pb_gguf_tensor *want, const char *what) {
    if (!blocks || !want) return;
    int64_t n = blocks->ne[0] * blocks->ne[1];
    const pb_type_traits *t = pb_type_get(blocks->type);
    float *out = malloc((size_t)n * sizeof(float));
    t->to_float(blocks->data, out, n);
    int64_t diff = 0;
    const float *w = want->data;
    for (int64_t i = 0; i < n; i++) diff += fbits(out[i]) != fbits(w[i]);
    CHECK(diff == 0 && want->ne[0] * want->ne[1] == n, "%s %s: %lld/%lld values bit-exact", t->name, what,
          (long long)(n - diff), (long long)n);
    free(out);
}

static void test_dequant_goldens(pb_gguf *g) {
    for (size_t i = 0; i < sizeof qtypes / sizeof qtypes[0]; i++) {
        const pb_gguf_tensor *b = want_tensor(g, qtypes[i].name, "blocks");
        CHECK(b && b->type == qtypes[i].type, "%s.blocks has type id %d", qtypes[i].name, qtypes[i].type);
        check_dequant(b, want_tensor(g, qtypes[i].name, "dequant"), "dequant (random blocks)");
        check_dequant(want_tensor(g, qtypes[i].name, "edge_blocks"), want_tensor(g, qtypes[i].name, "edge_dequant"),
                      "dequant (edge blocks)");
    }
    check_dequant(want_tensor(g, "f16", "blocks"), want_tensor(g, "f16", "dequant"), "to_float");
    check_dequant(want_tensor(g, "bf16", "blocks"), want_tensor(g, "bf16", "dequant"), "to_float");
}

/* Quantizes quant.input with the legacy reference quantizers and compares bytes with quant_ref (row 13
 * may match quant_ggml instead: the FMA-sensitive blocks). */
static void test_quantize_legacy(pb_gguf *g) {
    const pb_gguf_tensor *in = pb_gguf_find_tensor(g, "quant.input");
    CHECK(in && in->type == PB_TYPE_F32 && in->ne[0] == 512 && in->ne[1] == 16, "quant.input is F32 [512,16]");
    if (!in) return;
    const char *names[] = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1"};
    const int types[] = {8, 2, 3, 6, 7};
    for (int k = 0; k < 5; k++) {
        const pb_gguf_tensor *ref = want_tensor(g, names[k], "quant_ref");
        if (!ref) continue;
        char nm[64];
        snprintf(nm, sizeof nm, "%s.quant_ggml", names[k]);
        const pb_gguf_tensor *alt = pb_gguf_find_tensor(g, nm);
        const pb_type_traits *t = pb_type_get(types[k]);
        size_t row = pb_row_size(types[k], 512);
        uint8_t *out = malloc(row * 16);
        for (int r = 0; r < 16; r++) t->from_float((const float *)in->data + 512 * r, out + row * (size_t)r, 512);
        int nblk = 16 * 16, same_ref = 0, same_alt = 0, same_either = 0;
        for (int b = 0; b < nblk; b++) {
            size_t off = (size_t)b * t->type_size;
            bool r1 = memcmp(out + off, (const uint8_t *)ref->data + off, t->type_size) == 0;
            bool r2 = alt && memcmp(out + off, (const uint8_t *)alt->data + off, t->type_size) == 0;
            same_ref += r1;
            same_alt += r2;
            same_either += r1 || (r2 && b / 16 == 13);
        }
        CHECK(same_either == nblk,
              "%s quantize: %d/%d blocks byte-identical to the reference (%d = gguf-py/FMA, %d = "
              "ggml no-FMA%s)",
              t->name, same_either, nblk, same_ref, same_alt, alt ? "" : " n/a");
        free(out);
    }
}

/* ---- K-quant round trip ---------------------------------------------------------------------- */

static double rmse(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)a[i] - (double)b[i]) * ((double)a[i] - (double)b[i]);
    return sqrt(s / (double)n);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand(void) { return (float)(sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand())); }

/* Naive baseline: symmetric absmax scale per 16/32 values with the same number of levels, round to
 * nearest (what a quantizer with no search would do). The K-quant search must beat it. */
static double naive_rmse(const float *x, int64_t n, int group, int levels) {
    double s = 0;
    for (int64_t i = 0; i < n; i += group) {
        float amax = 0;
        for (int j = 0; j < group; j++) amax = fmaxf(amax, fabsf(x[i + j]));
        float d = amax / (float)(levels / 2);
        for (int j = 0; j < group; j++) {
            float q = d > 0 ? roundf(x[i + j] / d) : 0;
            if (q > levels / 2 - 1) q = (float)(levels / 2 - 1);
            if (q < -(levels / 2)) q = (float)-(levels / 2);
            double e = (double)(q * d) - (double)x[i + j];
            s += e * e;
        }
    }
    return sqrt(s / (double)n);
}

static void test_roundtrip(pb_gguf *g) {
    enum { N = 256 * 64 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *q = malloc(N * 2);
    for (int i = 0; i < N; i++) x[i] = nrand();
    static const struct {
        int type;
        double max_rel;    /* RMSE / std bound for N(0,1) data */
        int group, levels; /* naive baseline with the same bits per value */
    } cases[] = {{PB_TYPE_Q8_0, 0.006, 0, 0}, {PB_TYPE_Q6_K, 0.020, 16, 64}, {PB_TYPE_Q5_K, 0.040, 32, 32},
                 {PB_TYPE_Q5_0, 0.060, 0, 0}, {PB_TYPE_Q5_1, 0.060, 0, 0},   {PB_TYPE_Q4_K, 0.080, 32, 16},
                 {PB_TYPE_Q4_0, 0.120, 0, 0}, {PB_TYPE_Q4_1, 0.120, 0, 0},   {PB_TYPE_Q3_K, 0.200, 16, 8},
                 {PB_TYPE_Q2_K, 0.400, 16, 4}};
    double prev = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const pb_type_traits *t = pb_type_get(cases[c].type);
        t->from_float(x, q, N);
        t->to_float(q, y, N);
        double e = rmse(x, y, N);
        CHECK(e < cases[c].max_rel, "%s round trip on N(0,1): rmse %.5f < %.3f", t->name, e, cases[c].max_rel);
        if (cases[c].group) {
            double nb = naive_rmse(x, N, cases[c].group, cases[c].levels);
            CHECK(e < nb, "%s beats naive absmax rounding with the same levels: %.5f < %.5f", t->name, e, nb);
        }
        (void)prev;
    }
    /* Re-quantizing the dequantized values of a legacy type gives the same bytes (fixed point). */
    int types[] = {PB_TYPE_Q8_0, PB_TYPE_Q4_0, PB_TYPE_Q5_0, PB_TYPE_Q6_K, PB_TYPE_Q3_K};
    for (int k = 0; k < 5; k++) {
        const pb_type_traits *t = pb_type_get(types[k]);
        uint8_t *q2 = malloc(N * 2);
        t->from_float(x, q, N);
        t->to_float(q, y, N);
        t->from_float(y, q2, N);
        size_t nb = pb_row_size(types[k], N);
        size_t same = 0;
        for (size_t b = 0; b < nb / t->type_size; b++)
            same += memcmp(q + b * t->type_size, q2 + b * t->type_size, t->type_size) == 0;
        NOTE("%s requantize of its own output: %zu/%zu blocks identical", t->name, same, nb / t->type_size);
        if (types[k] == PB_TYPE_Q8_0 || types[k] == PB_TYPE_Q4_0 || types[k] == PB_TYPE_Q5_0)
            CHECK(same == nb / t->type_size, "%s quantize(dequantize(q)) == q for all %zu blocks", t->name,
                  nb / t->type_size);
        free(q2);
    }
    /* Fixture rows (zeros, constants, spikes, tiny/huge scales): finite results, zeros stay zero. */
    const pb_gguf_tensor *in = g ? pb_gguf_find_tensor(g, "quant.input") : NULL;
    if (in) {
        const float *xi = in->data;
        for (int k = 0; k < 10; k++) {
            const pb_type_traits *t = pb_type_get(qtypes[k].type);
            int bad = 0;
            double worst = 0;
            for (int r = 0; r < 16; r++) {
                const float *row = xi + 512 * r;
                t->from_float(row, q, 512);
                t->to_float(q, y, 512);
                double s2 = 0;
                for (int i = 0; i < 512; i++) {
                    bad += !isfinite(y[i]);
                    s2 += (double)row[i] * (double)row[i];
                    if (r == 6) bad += y[i] != 0.0f;
                }
                double rel = s2 > 0 ? rmse(row, y, 512) / sqrt(s2 / 512) : 0;
                if (r != 11 && r != 8 && r != 9 && rel > worst) worst = rel;
            }
            CHECK(bad == 0 && worst < 0.6, "%s on the 16 fixture rows: all finite, zero row exact, worst rel rmse %.4f",
                  t->name, worst);
        }
    }
    free(x);
    free(y);
    free(q);
}

/* Q8_K activation quantizer: bsums equal the sums of qs, d = max/-127, zero blocks are zero. */
static void test_q8_k(void) {
    float x[512];
    for (int i = 0; i < 256; i++) x[i] = nrand();
    for (int i = 256; i < 512; i++) x[i] = 0;
    pb_block_q8_K b[2];
    pb_quant_q8_K(x, b, 512);
    int bad = 0;
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += b[0].qs[16 * g + l];
        bad += s != b[0].bsums[g] || b[1].bsums[g] != 0;
    }
    float amax = 0;
    for (int i = 0; i < 256; i++) amax = fmaxf(amax, fabsf(x[i]));
    CHECK(bad == 0 && b[1].d == 0 && fabsf(fabsf(b[0].d) - amax / 127) < 1e-6f * amax, "q8_K bsums, scale, zero block");
}

int main(void) {
    test_table();
    test_fp16();
    test_q8_k();
    pb_gguf *g = NULL;
    const char *path = pbt_fixture("quant/quant_vectors.gguf");
    if (path) {
        pb_status s = pb_gguf_open(path, &g);
        CHECK(s == PB_OK, "open quant_vectors.gguf: %s", s ? pb_last_error() : "ok");
    }
    if (g) {
        test_dequant_goldens(g);
        test_quantize_legacy(g);
    }
    test_roundtrip(g);
    pb_gguf_close(g);
    TEST_DONE();
}
