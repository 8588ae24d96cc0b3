/* itest_convert.c -- `pocketbrain convert` end to end: rebuilds the HF folder of the peer llama.cpp model
 * (gemma2-tiny-v) from its F16 GGUF, converts it back with our CLI and compares keys, types, tensor tables and
 * bytes with llama.cpp's own files (f16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k); converts the transformers-made
 * tiny models of tests/data/model; checks the error paths (missing config/tensor, bad shapes, malformed
 * safetensors, unsupported architecture) leave no output file. */
#include "pb_test.h"

#include "base/base.h"
#include "gguf/gguf.h"
#include "tensor/types.h"

#include "itest_convert_util.h"

#include <dirent.h>
#include <math.h>

#define PEER "model/gemma2-tiny-v"

static char logf_[1024];

/* ---- GGUF comparison ----------------------------------------------------------------------------- */

static bool kv_value_equal(const pb_gguf *a, int64_t ia, const pb_gguf *b, int64_t ib) {
    pb_gguf_value va, vb;
    pb_gguf_kv_value(a, ia, &va);
    pb_gguf_kv_value(b, ib, &vb);
    if (va.type != vb.type) return false;
    switch (va.type) {
    case PB_GGUF_STRING: return va.v.s.len == vb.v.s.len && memcmp(va.v.s.ptr, vb.v.s.ptr, va.v.s.len) == 0;
    case PB_GGUF_ARRAY:
        if (va.elem_type != vb.elem_type || va.n != vb.n) return false;
        if (va.elem_type == PB_GGUF_STRING) {
            for (uint64_t i = 0; i < va.n; i++) {
                pb_gguf_str sa, sb;
                pb_gguf_get_arr_str(a, ia, i, &sa);
                pb_gguf_get_arr_str(b, ib, i, &sb);
                if (sa.len != sb.len || memcmp(sa.ptr, sb.ptr, sa.len) != 0) return false;
            }
            return true;
        }
        return memcmp(va.data, vb.data, va.n * pb_gguf_vtype_size(va.elem_type)) == 0;
    case PB_GGUF_FLOAT32:
    case PB_GGUF_FLOAT64: return va.v.f == vb.v.f;
    case PB_GGUF_BOOL: return va.v.b == vb.v.b;
    default: return va.v.u == vb.v.u;
    }
}

static bool skip_key(const char *k, const char *const *skip) {
    for (; skip && *skip; skip++)
        if (strcmp(k, *skip) == 0) return true;
    return false;
}

/* Same key set and types (minus skip); values equal for keys not in novalue. */
static void compare_kv(const char *what, const pb_gguf *ours, const pb_gguf *ref, const char *const *skip,
                       const char *const *novalue) {
    int missing = 0, extra = 0, types = 0, values = 0;
    for (int64_t i = 0; i < pb_gguf_n_kv(ref); i++) {
        const char *k = pb_gguf_kv_key(ref, i);
        if (skip_key(k, skip)) continue;
        int64_t j = pb_gguf_find_key(ours, k);
        if (j < 0) {
            if (missing++ < 5) NOTE("%s: missing key %s", what, k);
            continue;
        }
        pb_gguf_value va, vb;
        pb_gguf_kv_value(ref, i, &va);
        pb_gguf_kv_value(ours, j, &vb);
        if (va.type != vb.type || (va.type == PB_GGUF_ARRAY && va.elem_type != vb.elem_type)) {
            if (types++ < 5)
                NOTE("%s: key %s has type %s, llama.cpp %s", what, k, pb_gguf_vtype_name(vb.type),
                     pb_gguf_vtype_name(va.type));
            continue;
        }
        if (!skip_key(k, novalue) && !kv_value_equal(ours, j, ref, i))
            if (values++ < 5) NOTE("%s: key %s differs in value", what, k);
    }
    for (int64_t j = 0; j < pb_gguf_n_kv(ours); j++) {
        const char *k = pb_gguf_kv_key(ours, j);
        if (!skip_key(k, skip) && pb_gguf_find_key(ref, k) < 0)
            if (extra++ < 5) NOTE("%s: extra key %s", what, k);
    }
    CHECK(missing == 0 && extra == 0, "%s: same metadata key set as llama.cpp's file (%d missing, %d extra)", what,
          missing, extra);
    CHECK(types == 0, "%s: every key has llama.cpp's value type (%d differ)", what, types);
    CHECK(values == 0, "%s: metadata values equal llama.cpp's (%d differ)", what, values);
}

/* Same tensors in the same order with the same types, shapes and offsets; bytes equal if want_bytes. */
static void compare_tensors(const char *what, const pb_gguf *ours, const pb_gguf *ref, bool want_bytes) {
    int64_t n = pb_gguf_n_tensors(ref);
    int table = 0, bytes = 0;
    CHECK(pb_gguf_n_tensors(ours) == n, "%s: %lld tensors (llama.cpp %lld)", what, (long long)pb_gguf_n_tensors(ours),
          (long long)n);
    for (int64_t i = 0; i < n && i < pb_gguf_n_tensors(ours); i++) {
        const pb_gguf_tensor *a = pb_gguf_tensor_at(ours, i), *b = pb_gguf_tensor_at(ref, i);
        bool same = strcmp(a->name, b->name) == 0 && a->type == b->type && a->offset == b->offset;
        for (int d = 0; d < 4; d++) same = same && a->ne[d] == b->ne[d];
        if (!same) {
            if (table++ < 5)
                NOTE("%s: tensor %lld is %s %s [%lld,%lld] @%llu, llama.cpp %s %s [%lld,%lld] @%llu", what,
                     (long long)i, a->name, pb_type_name(a->type), (long long)a->ne[0], (long long)a->ne[1],
                     (unsigned long long)a->offset, b->name, pb_type_name(b->type), (long long)b->ne[0],
                     (long long)b->ne[1], (unsigned long long)b->offset);
            continue;
        }
        if (want_bytes && memcmp(a->data, b->data, a->nbytes) != 0)
            if (bytes++ < 5) NOTE("%s: tensor %s (%s) bytes differ", what, a->name, pb_type_name(a->type));
    }
    CHECK(table == 0, "%s: tensor names, order, types, shapes and offsets equal llama.cpp's (%d differ)", what, table);
    if (want_bytes) CHECK(bytes == 0, "%s: tensor data identical to llama.cpp's (%d tensors differ)", what, bytes);
}

/* ---- rebuilding the HF folder of the peer model -------------------------------------------------- */

/* GGUF -> HF names for Gemma 2 (written here independently of tools/convert_arch.c). */
static bool hf_name(const char *g, char *out, size_t n) {
    static const char *const map[][2] = {
        {"attn_norm", "input_layernorm"},
        {"attn_q", "self_attn.q_proj"},
        {"attn_k", "self_attn.k_proj"},
        {"attn_v", "self_attn.v_proj"},
        {"attn_output", "self_attn.o_proj"},
        {"post_attention_norm", "post_attention_layernorm"},
        {"ffn_norm", "pre_feedforward_layernorm"},
        {"post_ffw_norm", "post_feedforward_layernorm"},
        {"ffn_gate", "mlp.gate_proj"},
        {"ffn_up", "mlp.up_proj"},
        {"ffn_down", "mlp.down_proj"},
    };
    if (strcmp(g, "token_embd.weight") == 0) return snprintf(out, n, "model.embed_tokens.weight") > 0;
    if (strcmp(g, "output_norm.weight") == 0) return snprintf(out, n, "model.norm.weight") > 0;
    int il;
    char part[64];
    if (sscanf(g, "blk.%d.%63[a-z_].weight", &il, part) != 2) return false;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(part, map[i][0]) == 0) return snprintf(out, n, "model.layers.%d.%s.weight", il, map[i][1]) > 0;
    return false;
}

typedef enum { AS_F32, AS_F16_NORMS_F32, AS_BF16, AS_F16 } st_dtype_mode;

/* Writes the peer model's weights as HF safetensors (norms as w = g - 1, as HF stores them). */
static bool build_hf_dir(const pb_gguf *g, const char *dir, st_dtype_mode mode, int n_shards) {
    stw w = {0};
    for (int64_t i = 0; i < pb_gguf_n_tensors(g); i++) {
        const pb_gguf_tensor *t = pb_gguf_tensor_at(g, i);
        char hn[128];
        if (!hf_name(t->name, hn, sizeof hn)) return false;
        int64_t n = t->ne[0] * t->ne[1];
        float *f = malloc((size_t)n * sizeof *f);
        pb_type_get(t->type)->to_float(t->data, f, n);
        bool norm = t->n_dims == 1;
        if (norm)
            for (int64_t k = 0; k < n; k++) f[k] -= 1.0f;
        int64_t shape[2] = {t->ne[1], t->ne[0]};
        int nd = norm ? 1 : 2;
        if (nd == 1) shape[0] = t->ne[0];
        if (mode == AS_F32 || (mode == AS_F16_NORMS_F32 && norm)) {
            stw_add(&w, hn, "F32", nd, shape, f, (size_t)n * 4);
        } else {
            uint16_t *h = malloc((size_t)n * 2);
            for (int64_t k = 0; k < n; k++) h[k] = mode == AS_BF16 ? pb_fp32_to_bf16(f[k]) : pb_fp32_to_fp16(f[k]);
            stw_add(&w, hn, mode == AS_BF16 ? "BF16" : "F16", nd, shape, h, (size_t)n * 2);
            free(h);
        }
        free(f);
    }
    char from[1024], to[1024];
    bool ok = stw_write_dir(&w, dir, n_shards) == 0;
    const char *files[] = {"config.json", "tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 3 && ok; i++) {
        snprintf(from, sizeof from, "%s", pbt_fixture("model/hf/config.json"));
        char *slash = strrchr(from, '/');
        snprintf(slash + 1, sizeof from - (size_t)(slash + 1 - from), "%s", files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        ok = copy_file(from, to) == 0;
    }
    stw_free(&w);
    return ok;
}

static pb_gguf *open_or_null(const char *path) {
    pb_gguf *g = NULL;
    if (pb_gguf_open(path, &g) != PB_OK) {
        NOTE("cannot open %s: %s", path, pb_last_error());
        return NULL;
    }
    return g;
}

static int convert(const char *dir, const char *out, const char *type) {
    char args[2048];
    snprintf(args, sizeof args, "convert '%s' '%s' --type %s --threads 2", dir, out, type);
    int rc = run_cli(args, logf_);
    if (rc != 0) print_file(logf_);
    return rc;
}

static void test_peer(const char *tmp) {
    const char *fx = pbt_fixture(PEER ".f16.gguf");
    if (!fx || !pbt_fixture("model/hf/config.json")) return;
    char f16_path[1024]; /* pbt_fixture's buffers are reused */
    snprintf(f16_path, sizeof f16_path, "%s", fx);
    pb_gguf *ref = open_or_null(f16_path);
    if (!ref) return;
    char dir_a[1024], dir_b[1024], dir_c[1024], out[1024];
    snprintf(dir_a, sizeof dir_a, "%s/gemma2-tiny-v", tmp);
    snprintf(dir_b, sizeof dir_b, "%s/sharded", tmp);
    snprintf(dir_c, sizeof dir_c, "%s/bf16", tmp);
    mkdir(dir_a, 0755);
    mkdir(dir_b, 0755);
    mkdir(dir_c, 0755);
    CHECK(build_hf_dir(ref, dir_a, AS_F16_NORMS_F32, 1), "rebuilt the peer model as an HF folder (F16 + F32 norms)");
    CHECK(build_hf_dir(ref, dir_b, AS_F32, 3), "rebuilt it as 3 F32 shards + model.safetensors.index.json");
    CHECK(build_hf_dir(ref, dir_c, AS_BF16, 1), "rebuilt it as BF16");

    /* Keys llama.cpp's file has that a conversion cannot know; scores are hf_vocab's merge-rank encoding
     * (tokenizer.json has no SentencePiece scores). */
    static const char *const skip[] = {"general.description", NULL};
    static const char *const novalue[] = {"general.name", "tokenizer.ggml.scores", NULL};

    /* F16 from the single-file folder: everything equal to llama.cpp's F16 file. */
    snprintf(out, sizeof out, "%s/a.f16.gguf", tmp);
    double t0 = pb_time_ms();
    CHECK(convert(dir_a, out, "f16") == 0, "convert gemma2-tiny-v --type f16");
    NOTE("convert f16 of the 26-layer tiny model: %.0f ms", pb_time_ms() - t0);
    pb_gguf *g = open_or_null(out);
    if (g) {
        compare_kv("f16", g, ref, skip, novalue);
        compare_tensors("f16", g, ref, true);
        pb_gguf_str name;
        CHECK(pb_gguf_get_str(g, "general.name", &name) == PB_OK && name.len == 13 &&
                  memcmp(name.ptr, "gemma2-tiny-v", 13) == 0,
              "general.name defaults to the folder name");
        /* tokens equal (checked with the other values above); report how many scores follow SentencePiece */
        pb_gguf_value sa, sb;
        pb_gguf_kv_value(g, pb_gguf_find_key(g, "tokenizer.ggml.scores"), &sa);
        pb_gguf_kv_value(ref, pb_gguf_find_key(ref, "tokenizer.ggml.scores"), &sb);
        int same = 0;
        for (uint64_t i = 0; i < sa.n && i < sb.n; i++)
            same += memcmp((const float *)sa.data + i, (const float *)sb.data + i, 4) == 0;
        NOTE("tokenizer.ggml.scores equal to the SentencePiece scores for %d of %llu tokens", same,
             (unsigned long long)sa.n);
        pb_gguf_close(g);
    }
    /* The converted vocabulary tokenizes like llama.cpp's (scores differ in encoding, not in order). */
    pb_vocab *va = NULL, *vb = NULL;
    if (pb_vocab_open(out, &va) == PB_OK && pb_vocab_open(f16_path, &vb) == PB_OK) {
        static const char *const texts[] = {
            "Hello world! How are you today?",
            "<start_of_turn>user\nWrite a poem about the sea.<end_of_turn>\n<start_of_turn>model\n",
            "    indented code:\n\tfor (int i = 0; i < n; i++) { x += y[i]; }\n",
            "Ünïcödé façade — naïve café, 日本語のテキスト, emoji 🙂🚀",
            "numbers 1234567890 and 3.14159, url https://example.com/a?b=c",
            "many     spaces          and\n\n\nnewlines",
            "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX.",
        };
        int same = 0, n_texts = (int)(sizeof texts / sizeof texts[0]);
        for (int i = 0; i < n_texts; i++) {
            int32_t ia[512], ib[512];
            int64_t na = 0, nb = 0;
            int fl = PB_TOK_ADD_BOS | PB_TOK_PARSE_SPECIAL;
            if (pb_tokenize(va, texts[i], strlen(texts[i]), fl, ia, 512, &na) == PB_OK &&
                pb_tokenize(vb, texts[i], strlen(texts[i]), fl, ib, 512, &nb) == PB_OK && na == nb &&
                memcmp(ia, ib, (size_t)na * 4) == 0)
                same++;
            else
                NOTE("text %d tokenizes differently (%lld vs %lld tokens)", i, (long long)na, (long long)nb);
        }
        CHECK(same == n_texts, "converted vocabulary tokenizes %d/%d sample texts like llama.cpp's file", same,
              n_texts);
    } else {
        CHECK(0, "tokenizer loads the converted and the llama.cpp vocabulary (%s)", pb_last_error());
    }
    pb_vocab_free(va);
    pb_vocab_free(vb);

    /* Sharded F32 source, each mix against llama-quantize's file of the same F32 model. */
    static const char *const mixes[][2] = {{"q8_0", ".q8_0.gguf"},
                                           {"q4_k_m", ".q4_k_m.gguf"},
                                           {"q4_0", ".q4_0.gguf"},
                                           {"q5_k_m", ".q5_k_m.gguf"},
                                           {"q6_k", ".q6_k.gguf"}};
    for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
        char rel[64];
        snprintf(rel, sizeof rel, PEER "%s", mixes[m][1]);
        const char *rp = pbt_fixture(rel);
        if (!rp) continue;
        char rpath[1024];
        snprintf(rpath, sizeof rpath, "%s", rp);
        snprintf(out, sizeof out, "%s/b%s", tmp, mixes[m][1]);
        t0 = pb_time_ms();
        CHECK(convert(m == 1 ? dir_a : dir_b, out, mixes[m][0]) == 0, "convert %s folder --type %s",
              m == 1 ? "F16" : "sharded F32", mixes[m][0]);
        NOTE("convert %s: %.0f ms", mixes[m][0], pb_time_ms() - t0);
        pb_gguf *q = open_or_null(out), *r = open_or_null(rpath);
        if (q && r) {
            compare_kv(mixes[m][0], q, r, skip, novalue);
            compare_tensors(mixes[m][0], q, r, true);
        }
        pb_gguf_close(q);
        pb_gguf_close(r);
    }

    /* BF16 source -> F32: matrices are exactly bf16(x); norms are bf16(g - 1) + 1 computed in f32. */
    snprintf(out, sizeof out, "%s/c.f32.gguf", tmp);
    CHECK(convert(dir_c, out, "f32") == 0, "convert the BF16 folder --type f32");
    g = open_or_null(out);
    if (g) {
        int bad = 0, checked = 0;
        for (int64_t i = 0; i < pb_gguf_n_tensors(ref); i++) {
            const pb_gguf_tensor *r = pb_gguf_tensor_at(ref, i);
            const pb_gguf_tensor *t = pb_gguf_find_tensor(g, r->name);
            if (!t || t->type != PB_TYPE_F32) {
                bad++;
                continue;
            }
            int64_t n = r->ne[0] * r->ne[1];
            float *f = malloc((size_t)n * 4);
            pb_type_get(r->type)->to_float(r->data, f, n);
            const float *o = t->data;
            for (int64_t k = 0; k < n; k++) {
                float want = r->n_dims == 1 ? pb_bf16_to_fp32(pb_fp32_to_bf16(f[k] - 1.0f)) + 1.0f
                                            : pb_bf16_to_fp32(pb_fp32_to_bf16(f[k]));
                if (memcmp(&want, &o[k], 4) != 0) bad++;
                checked++;
            }
            free(f);
        }
        CHECK(bad == 0 && checked > 7000000, "BF16 -> F32: %d of %d values exact (norms + 1 in f32)", checked - bad,
              checked);
        pb_gguf_close(g);
    }
    /* All-F16 source (norms too): llama.cpp adds the 1 in f16, so norms are f16(f16(g - 1) + 1). */
    char dir_d[1024];
    snprintf(dir_d, sizeof dir_d, "%s/f16all", tmp);
    mkdir(dir_d, 0755);
    CHECK(build_hf_dir(ref, dir_d, AS_F16, 1), "rebuilt it all F16, norms included");
    snprintf(out, sizeof out, "%s/d.f32.gguf", tmp);
    CHECK(convert(dir_d, out, "f32") == 0, "convert the all-F16 folder --type f32");
    g = open_or_null(out);
    if (g) {
        int bad = 0, checked = 0;
        for (int64_t i = 0; i < pb_gguf_n_tensors(ref); i++) {
            const pb_gguf_tensor *r = pb_gguf_tensor_at(ref, i), *t = pb_gguf_find_tensor(g, r->name);
            if (r->n_dims != 1) continue;
            const float *o = t ? t->data : NULL, *gv = r->data;
            for (int64_t k = 0; k < r->ne[0]; k++, checked++) {
                float want = pb_fp16_to_fp32(pb_fp32_to_fp16(pb_fp16_to_fp32(pb_fp32_to_fp16(gv[k] - 1.0f)) + 1.0f));
                bad += !o || memcmp(&want, &o[k], 4) != 0;
            }
        }
        CHECK(bad == 0 && checked == 105 * 256, "F16 norms: %d of %d values are f16(w + 1) as llama.cpp computes them",
              checked - bad, checked);
        pb_gguf_close(g);
    }

    snprintf(out, sizeof out, "%s/c.bf16.gguf", tmp);
    CHECK(convert(dir_c, out, "bf16") == 0, "convert the BF16 folder --type bf16");
    g = open_or_null(out);
    if (g) {
        const pb_gguf_tensor *e = pb_gguf_find_tensor(g, "token_embd.weight"),
                             *nm = pb_gguf_find_tensor(g, "blk.3.ffn_norm.weight");
        CHECK(e && e->type == PB_TYPE_BF16 && nm && nm->type == PB_TYPE_F32, "bf16 output: matrices BF16, norms F32");
        uint32_t ft = 0;
        CHECK(pb_gguf_get_u32(g, "general.file_type", &ft) == PB_OK && ft == 32, "bf16 output: general.file_type 32");
        pb_gguf_close(g);
    }
    pb_gguf_close(ref);
}

/* ---- the transformers-made tiny models ----------------------------------------------------------- */

static bool u32_is(const pb_gguf *g, const char *k, uint32_t want) {
    uint32_t v = 0;
    return pb_gguf_get_u32(g, k, &v) == PB_OK && v == want;
}
static bool f32_is(const pb_gguf *g, const char *k, float want) {
    float v = 0;
    return pb_gguf_get_f32(g, k, &v) == PB_OK && v == want;
}

/* Reads a bf16 HF tensor straight from the safetensors file (by scanning its header with cJSON). */
static float *read_hf_bf16(const char *st_path, const char *name, int64_t *n_out) {
    FILE *f = fopen(st_path, "rb");
    if (!f) return NULL;
    uint64_t hl = 0;
    uint8_t b8[8];
    if (fread(b8, 1, 8, f) != 8) {
        fclose(f);
        return NULL;
    }
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b8[i];
    char *h = malloc(hl + 1);
    if (fread(h, 1, hl, f) != hl) hl = 0;
    h[hl] = 0;
    cJSON *root = cJSON_Parse(h);
    free(h);
    cJSON *e = cJSON_GetObjectItem(root, name);
    float *out = NULL;
    if (e && strcmp(cJSON_GetObjectItem(e, "dtype")->valuestring, "BF16") == 0) {
        cJSON *of = cJSON_GetObjectItem(e, "data_offsets");
        long b = (long)cJSON_GetArrayItem(of, 0)->valuedouble, en = (long)cJSON_GetArrayItem(of, 1)->valuedouble;
        int64_t n = (en - b) / 2;
        uint16_t *raw = malloc((size_t)(en - b));
        fseek(f, (long)(8 + hl + (uint64_t)b), SEEK_SET);
        if (fread(raw, 1, (size_t)(en - b), f) == (size_t)(en - b)) {
            out = malloc((size_t)n * 4);
            for (int64_t i = 0; i < n; i++) out[i] = pb_bf16_to_fp32(raw[i]);
            *n_out = n;
        }
        free(raw);
    }
    cJSON_Delete(root);
    fclose(f);
    return out;
}

static void test_tiny_models(const char *tmp) {
    static const struct {
        const char *arch;
        int n_layer, per_layer, d, hd, hkv;
    } m[] = {{"gemma", 3, 9, 32, 16, 1}, {"gemma2", 4, 11, 32, 12, 2}, {"gemma3", 7, 13, 48, 20, 1}};
    for (size_t i = 0; i < 3; i++) {
        char dir[512], out[1024], key[128], st[600];
        snprintf(dir, sizeof dir, "tests/data/model/%s", m[i].arch);
        if (access(dir, R_OK) != 0) {
            NOTE("skip: %s not present", dir);
            continue;
        }
        snprintf(out, sizeof out, "%s/%s.f16.gguf", tmp, m[i].arch);
        CHECK(convert(dir, out, "f16") == 0, "convert %s (transformers-made, bf16) --type f16", dir);
        pb_gguf *g = open_or_null(out);
        if (!g) continue;
        pb_gguf_str s;
        CHECK(pb_gguf_get_str(g, "general.architecture", &s) == PB_OK && s.len == strlen(m[i].arch) &&
                  memcmp(s.ptr, m[i].arch, s.len) == 0,
              "%s: general.architecture", m[i].arch);
        CHECK(pb_gguf_n_tensors(g) == 2 + m[i].n_layer * m[i].per_layer, "%s: %d tensors", m[i].arch,
              2 + m[i].n_layer * m[i].per_layer);
        snprintf(key, sizeof key, "%s.block_count", m[i].arch);
        bool ok = u32_is(g, key, (uint32_t)m[i].n_layer);
        snprintf(key, sizeof key, "%s.embedding_length", m[i].arch);
        ok = ok && u32_is(g, key, (uint32_t)m[i].d);
        snprintf(key, sizeof key, "%s.attention.key_length", m[i].arch);
        ok = ok && u32_is(g, key, (uint32_t)m[i].hd);
        snprintf(key, sizeof key, "%s.attention.head_count_kv", m[i].arch);
        ok = ok && u32_is(g, key, (uint32_t)m[i].hkv);
        snprintf(key, sizeof key, "%s.context_length", m[i].arch);
        ok = ok && u32_is(g, key, 512);
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", m[i].arch);
        ok = ok && f32_is(g, key, 1e-6f);
        CHECK(ok, "%s: block_count, embedding_length, key_length, head_count_kv, context_length, eps from config.json",
              m[i].arch);
        if (strcmp(m[i].arch, "gemma") == 0) {
            CHECK(u32_is(g, "tokenizer.ggml.eot_token_id", 107),
                  "gemma: tokenizer.ggml.eot_token_id 107 (<end_of_turn>)");
            CHECK(pb_gguf_find_key(g, "gemma.attention.sliding_window") < 0 &&
                      pb_gguf_find_key(g, "gemma.rope.freq_base") < 0,
                  "gemma: no sliding window / rope keys");
        } else if (strcmp(m[i].arch, "gemma2") == 0) {
            CHECK(u32_is(g, "gemma2.attention.sliding_window", 8) && f32_is(g, "gemma2.attn_logit_softcapping", 50) &&
                      f32_is(g, "gemma2.final_logit_softcapping", 30) &&
                      pb_gguf_find_key(g, "gemma2.rope.freq_base") < 0,
                  "gemma2: window 8, softcaps 50/30, no rope key");
        } else {
            pb_gguf_str rt;
            CHECK(u32_is(g, "gemma3.attention.sliding_window", 8) && f32_is(g, "gemma3.rope.freq_base", 1e6f) &&
                      f32_is(g, "gemma3.rope.scaling.factor", 8) &&
                      pb_gguf_get_str(g, "gemma3.rope.scaling.type", &rt) == PB_OK && rt.len == 6 &&
                      memcmp(rt.ptr, "linear", 6) == 0 && pb_gguf_find_key(g, "gemma3.attn_logit_softcapping") < 0,
                  "gemma3: window 8, rope base 1e6, linear x8 scaling, no softcap keys");
            const pb_gguf_tensor *qn = pb_gguf_find_tensor(g, "blk.5.attn_q_norm.weight");
            CHECK(qn && qn->ne[0] == 20 && qn->type == PB_TYPE_F32, "gemma3: attn_q_norm [20] F32");
        }
        /* values: a norm is 1 + w (f32), a matrix is the bf16 value as f16 (exact: |x| well inside f16) */
        snprintf(st, sizeof st, "%s/model.safetensors", dir);
        int64_t n = 0;
        const char *norm_hf = strcmp(m[i].arch, "gemma") == 0 ? "model.layers.1.post_attention_layernorm.weight"
                                                              : "model.layers.1.pre_feedforward_layernorm.weight";
        float *w = read_hf_bf16(st, norm_hf, &n);
        const pb_gguf_tensor *t = pb_gguf_find_tensor(g, "blk.1.ffn_norm.weight");
        int bad = 0;
        for (int64_t k = 0; w && t && k < n; k++) bad += ((const float *)t->data)[k] != w[k] + 1.0f;
        CHECK(w && t && t->type == PB_TYPE_F32 && n == m[i].d && bad == 0, "%s: blk.1.ffn_norm = 1 + %s", m[i].arch,
              norm_hf);
        free(w);
        w = read_hf_bf16(st, "model.layers.0.self_attn.q_proj.weight", &n);
        t = pb_gguf_find_tensor(g, "blk.0.attn_q.weight");
        bad = 0;
        for (int64_t k = 0; w && t && k < n; k++) bad += pb_fp16_to_fp32(((const uint16_t *)t->data)[k]) != w[k];
        CHECK(w && t && t->type == PB_TYPE_F16 && n == t->ne[0] * t->ne[1] && bad == 0,
              "%s: blk.0.attn_q = q_proj, row-major [%lld, %lld]", m[i].arch, t ? (long long)t->ne[0] : 0LL,
              t ? (long long)t->ne[1] : 0LL);
        free(w);
        pb_gguf_close(g);

        /* q8_0: rows of 32 values quantize, others (48, 20*3=60) fall back to F16 as gguf-py does */
        snprintf(out, sizeof out, "%s/%s.q8_0.gguf", tmp, m[i].arch);
        CHECK(convert(dir, out, "q8_0") == 0, "convert %s --type q8_0", m[i].arch);
        g = open_or_null(out);
        if (g) {
            int wrong = 0;
            for (int64_t k = 0; k < pb_gguf_n_tensors(g); k++) {
                t = pb_gguf_tensor_at(g, k);
                int want = t->n_dims == 1 ? PB_TYPE_F32 : t->ne[0] % 32 ? PB_TYPE_F16 : PB_TYPE_Q8_0;
                wrong += t->type != want;
            }
            CHECK(wrong == 0, "%s q8_0: norms F32, rows %% 32 Q8_0, the others F16 (%d wrong)", m[i].arch, wrong);
            pb_gguf_close(g);
        }
    }
}

/* Gemma3ForConditionalGeneration: text weights under language_model.model., a vision tensor to ignore,
 * embedding rows beyond the tokenizer trimmed. Must equal the plain Gemma3ForCausalLM conversion. */
static void test_multimodal(const char *tmp) {
    const char *src = "tests/data/model/gemma3";
    if (access(src, R_OK) != 0) return;
    char dir[1024], path[1200], out_a[1024], out_b[1024];
    snprintf(dir, sizeof dir, "%s/mm", tmp);
    mkdir(dir, 0755);
    pb_map map;
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    if (pb_map_open(path, true, &map) != PB_OK) return;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | map.data[i];
    cJSON *h = cJSON_ParseWithLength((const char *)map.data + 8, hl);
    stw w = {0};
    for (cJSON *e = h->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        cJSON *sh = cJSON_GetObjectItem(e, "shape"), *of = cJSON_GetObjectItem(e, "data_offsets");
        int64_t shape[4];
        int nd = cJSON_GetArraySize(sh);
        for (int d = 0; d < nd; d++) shape[d] = (int64_t)cJSON_GetArrayItem(sh, d)->valuedouble;
        size_t b = (size_t)cJSON_GetArrayItem(of, 0)->valuedouble, en = (size_t)cJSON_GetArrayItem(of, 1)->valuedouble;
        const uint8_t *data = map.data + 8 + hl + b;
        char name[160];
        snprintf(name, sizeof name, "language_model.%s", e->string);
        if (strcmp(e->string, "model.embed_tokens.weight") == 0) { /* 64 extra rows (image tokens) */
            size_t row = (size_t)shape[1] * 2, extra = 64 * row;
            uint8_t *big = calloc(1, en - b + extra);
            memcpy(big, data, en - b);
            memset(big + (en - b), 0x3f, extra);
            shape[0] += 64;
            stw_add(&w, name, cJSON_GetObjectItem(e, "dtype")->valuestring, nd, shape, big, en - b + extra);
            free(big);
        } else {
            stw_add(&w, name, cJSON_GetObjectItem(e, "dtype")->valuestring, nd, shape, data, en - b);
        }
    }
    float vt[4] = {1, 2, 3, 4};
    int64_t vs[2] = {2, 2};
    stw_add(&w, "vision_tower.vision_model.embeddings.patch_embedding.weight", "F32", 2, vs, vt, sizeof vt);
    stw_write_dir(&w, dir, 2);
    stw_free(&w);
    cJSON_Delete(h);
    pb_map_close(&map);

    char *cfg_text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/config.json", src);
    pb_read_file(path, &cfg_text, &len);
    cJSON *text = cJSON_Parse(cfg_text);
    free(cfg_text);
    cJSON_DeleteItemFromObject(text, "architectures");
    cJSON_ReplaceItemInObject(text, "vocab_size", cJSON_CreateNumber(4096 + 64));
    cJSON *root = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("Gemma3ForConditionalGeneration"));
    cJSON_AddStringToObject(root, "model_type", "gemma3");
    cJSON_AddItemToObject(root, "text_config", text);
    cJSON *vision = cJSON_AddObjectToObject(root, "vision_config");
    cJSON_AddStringToObject(vision, "model_type", "siglip_vision_model");
    char *js = cJSON_Print(root);
    write_text(dir, "config.json", js);
    free(js);
    cJSON_Delete(root);
    for (int i = 0; i < 2; i++) {
        const char *fn = i ? "tokenizer_config.json" : "tokenizer.json";
        char a[1200], b[1200];
        snprintf(a, sizeof a, "%s/%s", src, fn);
        snprintf(b, sizeof b, "%s/%s", dir, fn);
        copy_file(a, b);
    }
    snprintf(out_a, sizeof out_a, "%s/mm.gguf", tmp);
    snprintf(out_b, sizeof out_b, "%s/text.gguf", tmp);
    CHECK(convert(dir, out_a, "f32") == 0,
          "convert Gemma3ForConditionalGeneration (2 shards, vision tensor, 64 extra rows)");
    CHECK(convert(src, out_b, "f32") == 0, "convert the same text model as Gemma3ForCausalLM");
    pb_gguf *a = open_or_null(out_a), *b = open_or_null(out_b);
    if (a && b) {
        static const char *const skip[] = {"general.name", NULL};
        compare_kv("multimodal vs text", a, b, skip, NULL);
        compare_tensors("multimodal vs text", a, b, true);
        const pb_gguf_tensor *e = pb_gguf_find_tensor(a, "token_embd.weight");
        CHECK(e && e->ne[1] == 4096, "token_embd trimmed to the 4096 tokenizer entries");
    }
    pb_gguf_close(a);
    pb_gguf_close(b);
}

/* ---- errors ---------------------------------------------------------------------------------------- */

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

/* Runs convert on dir, expects exit code rc_want, a message containing needle, and no file in outdir. */
static void expect_fail(const char *what, const char *dir, const char *extra, int rc_want, const char *needle) {
    const char *outdir = make_tmpdir("cvout");
    char args[2048];
    snprintf(args, sizeof args, "convert '%s' '%s/out.gguf' %s", dir, outdir, extra ? extra : "");
    int rc = run_cli(args, logf_);
    bool has = file_contains(logf_, needle);
    CHECK(rc == rc_want && has && count_entries(outdir) == 0, "%s: exit %d, says \"%s\", leaves no file", what, rc,
          needle);
    if (!has || rc != rc_want) print_file(logf_);
    rm_rf(outdir);
}

static const char *i32_tensor; /* tiny_folder writes this tensor as I32 */
static int tiny_rows = 4096;   /* embedding rows and vocab_size of tiny_folder */

/* A minimal gemma2 folder: 1 layer, n_embd 32, vocab from the peer tokenizer (4096). */
static void tiny_folder(const char *dir, const char *config_edit, const char *drop, const char *wrong_shape) {
    stw w = {0};
    const int d = 32, ff = 64, hq = 2 * 16, hkv = 16, V = tiny_rows;
    static float buf[4096 * 32];
    for (int i = 0; i < 4096 * 32; i++) buf[i] = (float)((i * 7919) % 200 - 100) / 1000.0f;
    struct {
        const char *name;
        int64_t s0, s1;
    } t[] = {{"model.embed_tokens.weight", V, d},
             {"model.norm.weight", d, 0},
             {"model.layers.0.input_layernorm.weight", d, 0},
             {"model.layers.0.self_attn.q_proj.weight", hq, d},
             {"model.layers.0.self_attn.k_proj.weight", hkv, d},
             {"model.layers.0.self_attn.v_proj.weight", hkv, d},
             {"model.layers.0.self_attn.o_proj.weight", d, hq},
             {"model.layers.0.post_attention_layernorm.weight", d, 0},
             {"model.layers.0.pre_feedforward_layernorm.weight", d, 0},
             {"model.layers.0.post_feedforward_layernorm.weight", d, 0},
             {"model.layers.0.mlp.gate_proj.weight", ff, d},
             {"model.layers.0.mlp.up_proj.weight", ff, d},
             {"model.layers.0.mlp.down_proj.weight", d, ff}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (drop && strcmp(t[i].name, drop) == 0) continue;
        int64_t shape[2] = {t[i].s0, t[i].s1};
        if (wrong_shape && strcmp(t[i].name, wrong_shape) == 0) {
            shape[0] = t[i].s1;
            shape[1] = t[i].s0;
        }
        int nd = t[i].s1 ? 2 : 1;
        bool as_i32 = i32_tensor && strcmp(t[i].name, i32_tensor) == 0;
        stw_add(&w, t[i].name, as_i32 ? "I32" : "F32", nd, shape, buf, (size_t)(t[i].s0 * (t[i].s1 ? t[i].s1 : 1)) * 4);
    }
    stw_write_dir(&w, dir, 1);
    stw_free(&w);
    char cfg[2048];
    /* edits come first: cJSON returns the first of duplicate keys */
    snprintf(cfg, sizeof cfg,
             "{%s \"architectures\": [\"Gemma2ForCausalLM\"], \"model_type\": \"gemma2\", \"vocab_size\": %d, "
             "\"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
             "\"num_key_value_heads\": 1, \"head_dim\": 16, \"max_position_embeddings\": 1024, "
             "\"rms_norm_eps\": 1e-6, \"sliding_window\": 16}",
             config_edit ? config_edit : "", V, d, ff);
    write_text(dir, "config.json", cfg);
    char a[1200], b[1200];
    const char *tj = pbt_fixture("model/hf/tokenizer.json");
    if (tj) {
        snprintf(b, sizeof b, "%s/tokenizer.json", dir);
        copy_file(tj, b);
        snprintf(a, sizeof a, "%s", tj);
        strcpy(strrchr(a, '/'), "/tokenizer_config.json");
        snprintf(b, sizeof b, "%s/tokenizer_config.json", dir);
        copy_file(a, b);
    }
}

static void test_errors(const char *tmp) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/err", tmp);
    mkdir(dir, 0755);
    tiny_folder(dir, NULL, NULL, NULL);
    const char *ok_out = make_tmpdir("cvok");
    snprintf(path, sizeof path, "'%s' '%s/ok.gguf'", dir, ok_out);
    char args[2048];
    snprintf(args, sizeof args, "convert %s", path);
    CHECK(run_cli(args, logf_) == 0, "the minimal 1-layer folder converts");
    rm_rf(ok_out);

    expect_fail("unknown --type", dir, "--type q9_z", 2, "q9_z");
    expect_fail("--threads 0", dir, "--threads 0", 2, "--threads");
    expect_fail("--threads without a value", dir, "--threads", 2, "--threads needs a value"); /* was: exit 2, silent */
    snprintf(path, sizeof path, "%s/nothing-here", tmp);
    mkdir(path, 0755);
    expect_fail("missing config.json", path, NULL, 1, "config.json not found");

    /* text after config.json's object is refused (cJSON alone stopped at the object's end and converted) */
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "ab");
    if (cf) {
        fputs(" junk\n", cf);
        fclose(cf);
    }
    expect_fail("config.json with text after its object", dir, NULL, 1, "more text after the JSON value");

    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(dir, "config.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\"}");
    expect_fail("unsupported architecture", dir, NULL, 1, "unsupported architecture 'LlamaForCausalLM'");
    write_text(dir, "config.json", "{\"architectures\": [\"Gemma2ForCausalLM\"], \"model_type\": ");
    expect_fail("config.json that is not JSON", dir, NULL, 1, "config.json is not valid JSON");
    /* valid JSON nested past cJSON's 1000 levels: said as such (it said "not valid JSON") */
    {
        char deep[2100];
        memset(deep, '[', 1001), memset(deep + 1001, ']', 1001), deep[2002] = 0;
        char cfg[2200];
        snprintf(cfg, sizeof cfg, "{\"architectures\": [\"Gemma2ForCausalLM\"], \"x\": %s}", deep);
        write_text(dir, "config.json", cfg);
        expect_fail("config.json nested 1001 levels deep", dir, NULL, 1,
                    "config.json nests arrays or objects more than 1000 levels deep");
    }
    write_text(dir, "config.json", "{\"architectures\": [\"Gemma2ForCausalLM\"], \"hidden_size\": 32}");
    expect_fail("config.json without num_hidden_layers", dir, NULL, 1, "missing integer 'num_hidden_layers'");

    /* a garbled layer count: the tensor plan's int size overflowed (UB; "out of memory"), a million layers took
     * 2 GB and 14 s before a missing tensor was noticed */
    tiny_folder(dir, "\"num_hidden_layers\": 2000000000,", NULL, NULL);
    expect_fail("num_hidden_layers beyond the engine's 256", dir, NULL, 1,
                "num_hidden_layers 2000000000 is more than the 256 layers supported");
    tiny_folder(dir, "\"layer_types\": [\"full_attention\"],", NULL, NULL);
    expect_fail("a layer pattern llama.cpp would not reproduce", dir, NULL, 1, "layer_types[0]");
    tiny_folder(dir, "\"rope_theta\": 500000,", NULL, NULL);
    expect_fail("gemma2 with another rope base", dir, NULL, 1, "rope_theta 500000");
    tiny_folder(dir, "\"tie_word_embeddings\": false,", NULL, NULL);
    expect_fail("untied embeddings", dir, NULL, 1, "tie_word_embeddings");

    tiny_folder(dir, NULL, "model.layers.0.mlp.up_proj.weight", NULL);
    expect_fail("missing tensor", dir, NULL, 1, "missing tensor 'model.layers.0.mlp.up_proj.weight'");
    tiny_folder(dir, NULL, NULL, "model.layers.0.mlp.down_proj.weight");
    expect_fail("shape mismatch", dir, NULL, 1,
                "tensor 'model.layers.0.mlp.down_proj.weight' has shape [64, 32], config.json implies [32, 64]");
    tiny_folder(dir, "\"num_attention_heads\": 4,", NULL, NULL);
    expect_fail("config heads that contradict the weights", dir, NULL, 1, "config.json implies [32, 64]");

    tiny_folder(dir, "\"vocab_size\": 4000,", NULL, NULL);
    expect_fail("vocab_size that contradicts the embedding", dir, NULL, 1,
                "'model.embed_tokens.weight' has 4096 rows but config.json vocab_size is 4000");

    /* more tokenizer entries than embedding rows: the extra ids are dropped, as llama.cpp does */
    tiny_rows = 4000;
    tiny_folder(dir, NULL, NULL, NULL);
    tiny_rows = 4096;
    {
        const char *od = make_tmpdir("cvtr");
        char out[600];
        snprintf(out, sizeof out, "%s/t.gguf", od);
        snprintf(args, sizeof args, "convert '%s' '%s'", dir, out);
        int rc = run_cli(args, logf_);
        pb_gguf *g = NULL;
        int64_t ki = -1;
        pb_gguf_value v = {0};
        if (rc == 0 && pb_gguf_open(out, &g) == PB_OK && (ki = pb_gguf_find_key(g, "tokenizer.ggml.tokens")) >= 0)
            pb_gguf_kv_value(g, ki, &v);
        const pb_gguf_tensor *e = g ? pb_gguf_find_tensor(g, "token_embd.weight") : NULL;
        CHECK(rc == 0 && v.n == 4000 && e && e->ne[1] == 4000 && file_contains(logf_, "dropping 96 tokenizer entries"),
              "4096-entry tokenizer on 4000 rows: 96 entries dropped, 4000 tokens and rows");
        pb_gguf_close(g);
        rm_rf(od);
    }

    /* malformed safetensors through the CLI: overlapping tensors */
    tiny_folder(dir, NULL, NULL, NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *bad = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
    FILE *f = fopen(path, "wb");
    uint64_t hl = strlen(bad);
    fwrite(&hl, 8, 1, f);
    fputs(bad, f);
    for (int i = 0; i < 12; i++) fputc(0, f);
    fclose(f);
    expect_fail("overlapping safetensors tensors", dir, NULL, 1, "model.safetensors: tensors 'a' and 'b' overlap");
    f = fopen(path, "wb");
    hl = 1000;
    fwrite(&hl, 8, 1, f);
    fputs("{}", f);
    fclose(f);
    expect_fail("safetensors header length past the end", dir, NULL, 1, "header length 1000 does not fit");
    unlink(path);
    expect_fail("no weights", dir, NULL, 1, "no safetensors weights");

    /* an I32 tensor where a weight is expected */
    tiny_folder(dir, NULL, NULL, NULL);
    i32_tensor = "model.layers.0.mlp.up_proj.weight";
    tiny_folder(dir, NULL, NULL, NULL);
    i32_tensor = NULL;
    expect_fail("an I32 weight", dir, NULL, 1, "'model.layers.0.mlp.up_proj.weight' has dtype I32");

    /* vocabulary problems */
    tiny_folder(dir, NULL, NULL, NULL);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    expect_fail("missing tokenizer.json", dir, NULL, 1, "tokenizer.json");
}

int main(void) {
    char tmp[512]; /* make_tmpdir's buffers are reused */
    const char *t = make_tmpdir("convert");
    if (!t) {
        CHECK(0, "create a temp directory");
        TEST_DONE();
    }
    snprintf(tmp, sizeof tmp, "%s", t);
    snprintf(logf_, sizeof logf_, "%s/cli.log", tmp);
    test_peer(tmp);
    test_tiny_models(tmp);
    test_multimodal(tmp);
    test_errors(tmp);
    rm_rf(tmp);
    TEST_DONE();
}
