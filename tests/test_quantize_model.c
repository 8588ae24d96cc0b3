/* test_quantize_model.c -- `quantize` on the peer tiny Gemma 2 F16 model vs the files llama-quantize made from
 * it: per-tensor type, shape and order; bytes for the legacy types; RMSE ratio for the K-quants; recipe unit
 * checks on gemma-2-2b's layer count. Links tools/quantize_model.c directly (the CLI's library part). */
#include "../tools/quantize_model.c"

#include "pb_test.h"
#include "tensor/recipe.h"

#include <sys/stat.h>

/* The CLI provides these; this test draws no progress bar. */
void cli_progress_init(cli_progress *p, const char *label) { memset(p, 0, sizeof *p), p->label = label; }
void cli_progress_update(cli_progress *p, double done, double total) { (void)p, (void)done, (void)total; }
void cli_progress_done(cli_progress *p) { (void)p; }

/* ---- recipe on gemma-2-2b shapes (n_layer 26), q4_k_m-recipe.md §4 worked example ---------------- */
static void test_recipe_2b(void) {
    pb_recipe r;
    CHECK(pb_recipe_init(&r, PB_FTYPE_Q4_K_M) == PB_OK, "recipe init Q4_K_M");
    const char *per_layer[] = {"attn_k",       "attn_norm", "attn_output", "attn_q", "attn_v",
                               "ffn_down",     "ffn_gate",  "ffn_norm",    "ffn_up", "post_attention_norm",
                               "post_ffw_norm"};
    char name[64];
    for (int il = 0; il < 26; il++)
        for (int k = 0; k < 11; k++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", il, per_layer[k]);
            pb_recipe_count(&r, name);
        }
    pb_recipe_count(&r, "token_embd.weight");
    pb_recipe_count(&r, "output_norm.weight");
    int counts[64] = {0}, q6_layers_v = 0;
    counts[pb_recipe_tensor_type(&r, "token_embd.weight", 2304)]++;
    for (int il = 0; il < 26; il++)
        for (int k = 0; k < 11; k++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", il, per_layer[k]);
            int64_t ne0 = strcmp(per_layer[k], "ffn_down") == 0      ? 9216
                          : strcmp(per_layer[k], "attn_output") == 0 ? 2048
                                                                     : 2304;
            if (!pb_recipe_is_quantizable(name, strstr(name, "norm") ? 1 : 2)) {
                counts[0]++;
                continue;
            }
            int t = pb_recipe_tensor_type(&r, name, ne0);
            counts[t]++;
            if (strcmp(per_layer[k], "attn_v") == 0 && t == PB_TYPE_Q6_K) q6_layers_v++;
        }
    counts[0]++; /* output_norm */
    CHECK(counts[PB_TYPE_Q6_K] == 27 && counts[PB_TYPE_Q4_K] == 156 && counts[0] == 105 && q6_layers_v == 13,
          "gemma-2-2b Q4_K_M: Q6_K %d (27), Q4_K %d (156), F32 %d (105)", counts[PB_TYPE_Q6_K], counts[PB_TYPE_Q4_K],
          counts[0]);
    CHECK(pb_recipe_order_cmp("token_embd.weight", "blk.0.attn_k.weight") < 0 &&
              pb_recipe_order_cmp("blk.2.ffn_up.weight", "blk.10.attn_k.weight") < 0 &&
              pb_recipe_order_cmp("blk.3.attn_v.weight", "blk.3.attn_q.weight") > 0,
          "llama.cpp tensor order: non-layer first, numeric layers, names within a layer");
    CHECK(pb_recipe_ftype_from_name("q4_k_m") == 15 && pb_recipe_ftype_from_name("Q8_0") == 7 &&
              pb_recipe_ftype_from_name("bf16") == 32 && pb_recipe_ftype_from_name("q4_k_x") == -1,
          "mix names");
    /* Gemma 3 1B (n_embd 1152) fallbacks, §5 */
    pb_recipe_init(&r, PB_FTYPE_Q4_K_M);
    pb_recipe_count(&r, "token_embd.weight");
    r.n_attention_wv = r.n_ffn_down = 26;
    CHECK(pb_recipe_tensor_type(&r, "token_embd.weight", 1152) == PB_TYPE_Q8_0 &&
              pb_recipe_tensor_type(&r, "blk.0.attn_q.weight", 1152) == PB_TYPE_Q5_0 &&
              pb_recipe_tensor_type(&r, "blk.0.attn_v.weight", 1152) == PB_TYPE_Q8_0 &&
              pb_recipe_tensor_type(&r, "blk.0.ffn_down.weight", 6912) == PB_TYPE_Q6_K &&
              pb_recipe_tensor_type(&r, "blk.1.attn_output.weight", 1024) == PB_TYPE_Q4_K,
          "Gemma 3 1B fallbacks: token_embd Q8_0, attn_q Q5_0, attn_v Q6_K->Q8_0, ffn_down/attn_output keep K");
    pb_recipe_init(&r, PB_FTYPE_Q4_0);
    pb_recipe_count(&r, "token_embd.weight");
    CHECK(pb_recipe_tensor_type(&r, "token_embd.weight", 640) == PB_TYPE_Q8_0 &&
              pb_recipe_tensor_type(&r, "token_embd.weight", 2304) == PB_TYPE_Q6_K,
          "Q4_0 mix: token_embd Q6_K, or Q8_0 when ne0 %% 256 != 0 (Gemma 3 270M)");
}

/* Other mixes on the tiny model's shapes (n_layer 26, attn_output rows of 128 fall back): type counts as
 * llama-quantize's files list them (fixture README / metrics.json), with IQ4_NL -> Q4_0 for Q2_K/Q3_K
 * fallbacks (we cannot write IQ4_NL; newer llama.cpp picks Q4_0 too), and Q4_K_S by q4_k_m-recipe.md §4. */
static void test_recipe_tiny_counts(void) {
    static const struct {
        const char *mix;
        int want[4][2]; /* {type, count} */
    } cases[] = {
        {"Q2_K", {{PB_TYPE_Q2_K, 104}, {PB_TYPE_Q3_K, 52}, {PB_TYPE_Q4_0, 26}, {PB_TYPE_Q6_K, 1}}},
        {"Q3_K_M", {{PB_TYPE_Q3_K, 104}, {PB_TYPE_Q4_K, 49}, {PB_TYPE_Q5_0, 26}, {PB_TYPE_Q5_K, 3}}},
        {"Q4_K_S", {{PB_TYPE_Q4_K, 149}, {PB_TYPE_Q5_K, 7}, {PB_TYPE_Q5_0, 26}, {PB_TYPE_Q6_K, 1}}},
        {"Q3_K_L", {{PB_TYPE_Q3_K, 104}, {PB_TYPE_Q5_K, 52}, {PB_TYPE_Q5_1, 26}, {PB_TYPE_Q6_K, 1}}},
    };
    const char *per_layer[] = {"attn_k",       "attn_norm", "attn_output", "attn_q", "attn_v",
                               "ffn_down",     "ffn_gate",  "ffn_norm",    "ffn_up", "post_attention_norm",
                               "post_ffw_norm"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pb_recipe r;
        pb_recipe_init(&r, pb_recipe_ftype_from_name(cases[c].mix));
        r.n_gqa = 2;
        char name[64];
        for (int il = 0; il < 26; il++)
            for (int k = 0; k < 11; k++) {
                snprintf(name, sizeof name, "blk.%d.%s.weight", il, per_layer[k]);
                pb_recipe_count(&r, name);
            }
        int counts[64] = {0};
        counts[pb_recipe_tensor_type(&r, "token_embd.weight", 256)]++;
        for (int il = 0; il < 26; il++)
            for (int k = 0; k < 11; k++) {
                snprintf(name, sizeof name, "blk.%d.%s.weight", il, per_layer[k]);
                if (!pb_recipe_is_quantizable(name, 2)) continue;
                int64_t ne0 = strcmp(per_layer[k], "ffn_down") == 0      ? 512
                              : strcmp(per_layer[k], "attn_output") == 0 ? 128
                                                                         : 256;
                counts[pb_recipe_tensor_type(&r, name, ne0)]++;
            }
        bool ok = true;
        for (int k = 0; k < 4; k++) ok &= counts[cases[c].want[k][0]] == cases[c].want[k][1];
        CHECK(ok, "%s on the tiny Gemma 2: %s %d, %s %d, %s %d, %s %d", cases[c].mix, pb_type_name(cases[c].want[0][0]),
              counts[cases[c].want[0][0]], pb_type_name(cases[c].want[1][0]), counts[cases[c].want[1][0]],
              pb_type_name(cases[c].want[2][0]), counts[cases[c].want[2][0]], pb_type_name(cases[c].want[3][0]),
              counts[cases[c].want[3][0]]);
    }
}

/* ---- against llama-quantize's files ------------------------------------------------------------ */

static double sq_err(const pb_gguf_tensor *t, const float *ref, int64_t n, float *tmp) {
    pb_type_get(t->type)->to_float(t->data, tmp, n);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)tmp[i] - (double)ref[i]) * ((double)tmp[i] - (double)ref[i]);
    return s;
}

static void compare_mix(const char *src_path, const char *mix, const char *ref_file) {
    const char *ref_path = pbt_fixture(ref_file);
    if (!ref_path) return;
    char out[256];
    snprintf(out, sizeof out, "build-test-quantize-%s-%d.gguf", mix, (int)getpid());
    cli_quantize_params p = {.in_path = src_path, .out_path = out, .mix = mix, .n_threads = 2};
    cli_quantize_stats st;
    pb_status s = cli_quantize_model(&p, &st);
    CHECK(s == PB_OK, "quantize F16 -> %s: %s (%.2fs, %lld tensors converted)", mix, s ? pb_last_error() : "ok",
          st.seconds, (long long)st.n_converted);
    if (s) return;
    pb_gguf *ours = NULL, *ref = NULL, *src = NULL;
    if (pb_gguf_open(out, &ours) || pb_gguf_open(ref_path, &ref) || pb_gguf_open(src_path, &src)) {
        CHECK(0, "open outputs: %s", pb_last_error());
        goto done;
    }
    int64_t n = pb_gguf_n_tensors(ref);
    CHECK(pb_gguf_n_tensors(ours) == n, "%s: %lld tensors (llama.cpp %lld)", mix, (long long)pb_gguf_n_tensors(ours),
          (long long)n);
    int type_bad = 0, order_bad = 0;
    int64_t blocks[64] = {0}, blocks_same[64] = {0}, tensors_same[64] = {0}, tensors[64] = {0};
    double err_ours[64] = {0}, err_ref[64] = {0};
    float *f_src = NULL, *tmp = NULL;
    size_t cap = 0;
    for (int64_t i = 0; i < n; i++) {
        const pb_gguf_tensor *tr = pb_gguf_tensor_at(ref, i);
        const pb_gguf_tensor *to = pb_gguf_find_tensor(ours, tr->name);
        const pb_gguf_tensor *ts = pb_gguf_find_tensor(src, tr->name);
        if (!to || !ts) {
            type_bad++;
            continue;
        }
        if (i < pb_gguf_n_tensors(ours) && strcmp(pb_gguf_tensor_at(ours, i)->name, tr->name) != 0) order_bad++;
        if (to->type != tr->type || to->n_dims != tr->n_dims || memcmp(to->ne, tr->ne, sizeof to->ne) != 0) {
            if (type_bad < 5)
                NOTE("%s: %s is %s, llama.cpp %s", mix, tr->name, pb_type_name(to->type), pb_type_name(tr->type));
            type_bad++;
            continue;
        }
        const pb_type_traits *tt = pb_type_get(tr->type);
        int ty = tr->type;
        tensors[ty]++;
        tensors_same[ty] += to->nbytes == tr->nbytes && memcmp(to->data, tr->data, tr->nbytes) == 0;
        int64_t nb = (int64_t)(tr->nbytes / tt->type_size);
        blocks[ty] += nb;
        for (int64_t b = 0; b < nb; b++)
            blocks_same[ty] += memcmp((const uint8_t *)to->data + b * tt->type_size,
                                      (const uint8_t *)tr->data + b * tt->type_size, tt->type_size) == 0;
        if (ts->type != tr->type) { /* converted: error against the F16 source */
            int64_t ne = tr->ne[0] * tr->ne[1] * tr->ne[2] * tr->ne[3];
            if ((size_t)ne > cap) {
                cap = (size_t)ne;
                f_src = realloc(f_src, cap * sizeof(float));
                tmp = realloc(tmp, cap * sizeof(float));
            }
            pb_type_get(ts->type)->to_float(ts->data, f_src, ne);
            err_ours[ty] += sq_err(to, f_src, ne, tmp);
            err_ref[ty] += sq_err(tr, f_src, ne, tmp);
        }
    }
    free(f_src);
    free(tmp);
    CHECK(type_bad == 0, "%s: every tensor's name, type and shape match llama.cpp's file", mix);
    CHECK(order_bad == 0, "%s: tensor order matches llama.cpp's", mix);
    for (int ty = 0; ty < 64; ty++) {
        if (!tensors[ty] || ty == PB_TYPE_F32) continue;
        const char *tn = pb_type_name(ty);
        NOTE("%s %-5s: %lld tensors (%lld byte-identical), blocks identical %lld/%lld, rmse ratio ours/llama.cpp %.5f",
             mix, tn, (long long)tensors[ty], (long long)tensors_same[ty], (long long)blocks_same[ty],
             (long long)blocks[ty], err_ref[ty] > 0 ? sqrt(err_ours[ty] / err_ref[ty]) : 1.0);
        if (ty == PB_TYPE_Q8_0 || ty == PB_TYPE_Q5_1) {
            CHECK(blocks_same[ty] == blocks[ty], "%s %s: all %lld blocks byte-identical to llama.cpp", mix, tn,
                  (long long)blocks[ty]);
        } else if (ty == PB_TYPE_Q4_0 || ty == PB_TYPE_Q5_0) {
            /* only FMA-sensitive blocks may differ (fixture README: ~0.03%) */
            CHECK(blocks[ty] - blocks_same[ty] <= blocks[ty] / 1000,
                  "%s %s: %lld of %lld blocks differ (FMA-sensitive ties)", mix, tn,
                  (long long)(blocks[ty] - blocks_same[ty]), (long long)blocks[ty]);
        } else {
            double ratio = err_ref[ty] > 0 ? sqrt(err_ours[ty] / err_ref[ty]) : 1.0;
            CHECK(ratio <= 1.02, "%s %s: rmse ratio vs llama.cpp %.5f <= 1.02 (%lld/%lld blocks byte-identical)", mix,
                  tn, ratio, (long long)blocks_same[ty], (long long)blocks[ty]);
            /* the algorithm is llama.cpp's: nearly every block must come out the same (float evaluation
             * order could in principle flip a few) */
            CHECK(blocks_same[ty] * 100 >= blocks[ty] * 99, "%s %s: %lld/%lld blocks byte-identical (>= 99%%)", mix, tn,
                  (long long)blocks_same[ty], (long long)blocks[ty]);
        }
    }
    uint32_t ft = 0, qv = 0, ft_ref = 1;
    pb_gguf_get_u32(ours, "general.file_type", &ft);
    pb_gguf_get_u32(ref, "general.file_type", &ft_ref);
    pb_gguf_get_u32(ours, "general.quantization_version", &qv);
    CHECK(ft == ft_ref && qv == 2, "%s: general.file_type %u (llama.cpp %u), quantization_version %u", mix, ft, ft_ref,
          qv);
    int kv_missing = 0;
    for (int64_t i = 0; i < pb_gguf_n_kv(ref); i++)
        if (pb_gguf_find_key(ours, pb_gguf_kv_key(ref, i)) < 0) kv_missing++;
    CHECK(kv_missing == 0 && pb_gguf_n_kv(ours) == pb_gguf_n_kv(ref), "%s: same %lld metadata keys as llama.cpp's file",
          mix, (long long)pb_gguf_n_kv(ref));
    /* the whole file: metadata, order, alignment, padding and data */
    if (pb_gguf_file_size(ours) == pb_gguf_file_size(ref)) {
        pb_map ma, mb;
        if (pb_map_open(out, true, &ma) == PB_OK) {
            if (pb_map_open(ref_path, true, &mb) == PB_OK) {
                CHECK(ma.size == mb.size && memcmp(ma.data, mb.data, ma.size) == 0,
                      "%s: output file byte-identical to llama-quantize's (%zu bytes)", mix, ma.size);
                pb_map_close(&mb);
            }
            pb_map_close(&ma);
        }
    } else {
        CHECK(0, "%s: output file size %zu, llama-quantize's %zu", mix, pb_gguf_file_size(ours),
              pb_gguf_file_size(ref));
    }
done:
    pb_gguf_close(ours);
    pb_gguf_close(ref);
    pb_gguf_close(src);
    unlink(out);
}

static void test_errors(const char *src) {
    struct stat stt;
    cli_quantize_params p = {.in_path = src, .out_path = "build-test-qerr.gguf", .mix = "q4_k_x", .n_threads = 1};
    CHECK(cli_quantize_model(&p, NULL) == PB_ERR_INVALID_ARG && strstr(pb_last_error(), "q4_k_x") &&
              stat(p.out_path, &stt) != 0,
          "bad mix: '%s', no file", pb_last_error());
    p.mix = "q8_0";
    p.in_path = "no-such-file.gguf";
    CHECK(cli_quantize_model(&p, NULL) != PB_OK && strstr(pb_last_error(), "no-such-file.gguf") &&
              stat(p.out_path, &stt) != 0,
          "missing input: '%s', no file", pb_last_error());
    p.in_path = src;
    p.out_path = "/nonexistent-dir/out.gguf";
    CHECK(cli_quantize_model(&p, NULL) == PB_ERR_IO && strstr(pb_last_error(), "/nonexistent-dir"),
          "bad output dir: '%s'", pb_last_error());
    char err[512] = "";
    CHECK(cli_quantize_file(src, "build-test-qerr.gguf", "nope", 1, false, err, sizeof err) == -1 &&
              strstr(err, "nope") && stat("build-test-qerr.gguf", &stt) != 0,
          "cli_quantize_file reports '%s'", err);
    err[0] = 0;
    CHECK(cli_quantize_file(src, "build-test-qok.gguf", "Q8_0", 2, false, err, sizeof err) == 0 &&
              stat("build-test-qok.gguf", &stt) == 0 && stt.st_size == 14905856,
          "cli_quantize_file writes a Q8_0 file of llama.cpp's size (%s)", err[0] ? err : "ok");
    unlink("build-test-qok.gguf");
}

/* Requantize rules: re-quantizing a Q8_0 source needs allow_requantize; F32 dequantizes without it. */
static void test_requantize(const char *q8) {
    struct stat stt;
    cli_quantize_params p = {.in_path = q8, .out_path = "build-test-qreq.gguf", .mix = "q4_0", .n_threads = 2};
    CHECK(cli_quantize_model(&p, NULL) == PB_ERR_UNSUPPORTED && strstr(pb_last_error(), "--allow-requantize") &&
              stat(p.out_path, &stt) != 0,
          "quantized source refused without --allow-requantize: '%s'", pb_last_error());
    p.mix = "f32"; /* dequantizing needs no flag */
    cli_quantize_stats st;
    pb_status s = cli_quantize_model(&p, &st);
    CHECK(s == PB_OK && st.n_by_type[PB_TYPE_F32] == st.n_tensors,
          "F32 mix dequantizes every tensor without --allow-requantize (%lld/%lld F32)",
          (long long)st.n_by_type[PB_TYPE_F32], (long long)st.n_tensors);
    pb_gguf *a = NULL, *b = NULL;
    if (pb_gguf_open(p.out_path, &a) == PB_OK && pb_gguf_open(q8, &b) == PB_OK) {
        const pb_gguf_tensor *ta = pb_gguf_find_tensor(a, "blk.3.ffn_up.weight"),
                             *tb = pb_gguf_find_tensor(b, "blk.3.ffn_up.weight");
        int64_t ne = tb->ne[0] * tb->ne[1];
        float *f = malloc((size_t)ne * 4);
        pb_type_get(tb->type)->to_float(tb->data, f, ne);
        CHECK(ta->type == PB_TYPE_F32 && memcmp(ta->data, f, (size_t)ne * 4) == 0,
              "F32 output equals the dequantized Q8_0 tensor");
        free(f);
    }
    pb_gguf_close(a);
    pb_gguf_close(b);
    unlink(p.out_path);
    p.mix = "q4_k_m";
    p.allow_requantize = true;
    s = cli_quantize_model(&p, &st);
    CHECK(s == PB_OK && st.n_by_type[PB_TYPE_Q4_K] == 130 && st.n_by_type[PB_TYPE_Q6_K] == 27 &&
              st.n_by_type[PB_TYPE_Q5_0] == 26 && st.n_by_type[PB_TYPE_F32] == 105,
          "Q8_0 -> Q4_K_M with --allow-requantize: the Q4_K_M recipe (%s)", s ? pb_last_error() : "ok");
    unlink(p.out_path);
}

int main(void) {
    test_recipe_2b();
    test_recipe_tiny_counts();
    const char *src = pbt_fixture("model/gemma2-tiny-v.f16.gguf");
    if (src) {
        test_errors(src);
        compare_mix(src, "q8_0", "model/gemma2-tiny-v.q8_0.gguf");
        compare_mix(src, "q4_0", "model/gemma2-tiny-v.q4_0.gguf");
        compare_mix(src, "q4_k_m", "model/gemma2-tiny-v.q4_k_m.gguf");
        compare_mix(src, "q5_k_m", "model/gemma2-tiny-v.q5_k_m.gguf");
        compare_mix(src, "q6_k", "model/gemma2-tiny-v.q6_k.gguf");
    }
    const char *q8 = pbt_fixture("model/gemma2-tiny-v.q8_0.gguf");
    if (q8) test_requantize(q8);
    TEST_DONE();
}
