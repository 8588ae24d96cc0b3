/* cmd_synth.c -- `pocketbrain synth`: a random-weight Gemma GGUF with the exact shapes, metadata and
 * per-tensor types of a released model, for benchmarks and tests. Weights are made and quantized one
 * tensor (and a few rows) at a time: memory stays near the largest quantized tensor. */
#include "cli.h"
#include "convert_arch.h"
#include "convert_vocab.h"

#include "base/base.h"
#include "gguf/gguf.h"
#include "tensor/recipe.h"
#include "tensor/types.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *usage =
    "pocketbrain synth --arch gemma|gemma2|gemma3|gemma4 --size SIZE --type f32|f16|bf16|q8_0|MIX -o FILE\n"
    "                  [--vocab tokenizer.json] [--seed N] [--threads N] [--name NAME] [--print-table]\n"
    "  sizes: gemma 2b 7b tiny; gemma2 2b 9b 27b tiny; gemma3 270m 1b 4b tiny tiny-gqa2; gemma4 e2b e4b tiny\n"
    "  --vocab uses a real Hugging Face tokenizer (tokenizer_config.json next to it); else a synthetic one.\n"
    "  --print-table prints the tensor table (name, type, shape, bytes) and writes nothing.";

/* ---- random weights -------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

typedef struct synth {
    cv_hparams hp;
    cv_tensor *plan;
    int *types;
    int n_plan;
    uint64_t seed;
    pb_pool *pool;
    cli_progress progress;
} synth;

/* Standard deviation per tensor: 1/sqrt(fan_in) for matrices (keeps activations O(1) through the
 * layers), 0.03 for the embedding (x sqrt(n_embd) at the input), and norms 1 + N(0, 0.1) as GGUF
 * stores them. */
static float tensor_std(const cv_tensor *t) {
    if (t->kind == CV_EMBD) return 0.03f;
    if (t->kind == CV_NORM || t->kind == CV_VEC) return 0.1f;
    return 1.0f / sqrtf((float)t->ne[0]);
}

/* Row r of tensor ti depends only on (seed, tensor name, r): thread count and order do not matter.
 * Values: Irwin-Hall sum of four 16-bit uniforms (close to normal), with one value in 512 scaled x4 so
 * the distribution has the heavier tails of trained weights (which is what block quantizers feel). */
static pb_status synth_rows(void *user, int64_t ti, int64_t r0, int64_t r1, float *buf) {
    synth *sy = user;
    const cv_tensor *t = &sy->plan[ti];
    const int64_t ne0 = t->ne[0];
    float std = tensor_std(t);
    float bias = t->kind == CV_NORM || t->kind == CV_VEC ? 1.0f : 0.0f;
    if (t->kind == CV_VEC && (strstr(t->name, "attn_q_norm") || strstr(t->name, "attn_k_norm"))) {
        /* Gemma 4 attends with scale 1: its q / k norm gains carry the 1/sqrt(head_dim) (trained models learn it).
         * With gains near 1 a score is ~N(0, head_dim), every softmax one-hot, and the model so ill-conditioned
         * that rounding the weights to f16 moved the tiny model's logits by 9% of their range (Gemma 3's: 0.07%):
         * gains head_dim^-1/4 each give N(0, 1) scores. */
        bias = powf((float)t->ne[0], -0.25f);
        std *= bias;
    }
    /* Irwin-Hall n=4 of U(0, 65536) has sd 65536*sqrt(1/3); the x4 tail adds 15/512 to the variance. */
    const float scale = std / (65536.0f * 0.57735027f * sqrtf(1.0f + 15.0f / 512.0f));
    if (t->kind == CV_GEN) { /* Gemma 4 rope_freqs: what the converter writes */
        cv_gemma4_gen(&sy->hp, t, r0, r1, buf);
        return PB_OK;
    }
    const uint64_t base = sy->seed * 0xD1B54A32D192ED03ull ^ fnv1a(t->name);
    for (int64_t r = r0; r < r1; r++) {
        uint64_t st = base ^ ((uint64_t)r * 0x9E3779B97F4A7C15ull);
        splitmix64(&st);
        float *row = buf + (r - r0) * ne0;
        for (int64_t i = 0; i < ne0; i++) {
            uint64_t x = splitmix64(&st);
            int32_t sum = (int32_t)(x & 0xffff) + (int32_t)((x >> 16) & 0xffff) + (int32_t)((x >> 32) & 0xffff) +
                          (int32_t)(x >> 48) - 2 * 65535;
            float v = (float)sum * scale;
            if ((x & 0x1ff0000000000ull) == 0) v *= 4.0f; /* 9 bits: 1 in 512 */
            row[i] = bias + v;
        }
    }
    return PB_OK;
}

static pb_status synth_fill(void *user, int64_t ti, void *dst, size_t nbytes) {
    synth *sy = user;
    return cv_fill_tensor(sy->pool, &sy->plan[ti], sy->types[ti], synth_rows, sy, ti, dst, nbytes);
}

static void synth_progress(void *user, size_t done, size_t total) {
    synth *sy = user;
    cli_progress_update(&sy->progress, (double)done, (double)total);
}

/* ---- command --------------------------------------------------------------------------------- */

static int parse_arch(const char *s, cv_arch *out) {
    for (int a = CV_GEMMA; a <= CV_GEMMA4; a++)
        if (strcmp(s, cv_arch_name((cv_arch)a)) == 0) {
            *out = (cv_arch)a;
            return 1;
        }
    return 0;
}

static void print_table(const synth *sy, const char *type_name, uint32_t file_type) {
    size_t total = 0;
    printf("# synth %s %s: %d tensors, n_vocab %u, general.file_type %u\n", cv_arch_name(sy->hp.arch), type_name,
           sy->n_plan, sy->hp.n_vocab, file_type);
    for (int i = 0; i < sy->n_plan; i++) {
        const cv_tensor *t = &sy->plan[i];
        size_t nb = pb_row_size(sy->types[i], t->ne[0]) * (size_t)t->ne[1] * (size_t)t->ne[2];
        total += nb;
        if (t->n_dims == 1)
            printf("%s\t%s\t[%lld]\t%zu\n", t->name, pb_type_name(sy->types[i]), (long long)t->ne[0], nb);
        else if (t->n_dims == 2)
            printf("%s\t%s\t[%lld, %lld]\t%zu\n", t->name, pb_type_name(sy->types[i]), (long long)t->ne[0],
                   (long long)t->ne[1], nb);
        else
            printf("%s\t%s\t[%lld, %lld, %lld]\t%zu\n", t->name, pb_type_name(sy->types[i]), (long long)t->ne[0],
                   (long long)t->ne[1], (long long)t->ne[2], nb);
    }
    printf("# tensor data %zu bytes (%.3f GB)\n", total, (double)total / 1e9);
}

typedef struct synth_opts {
    const char *arch_s, *size, *type_name, *out_path, *vocab_path, *name;
    long seed, n_threads;
    bool table_only;
    cv_arch arch;
} synth_opts;

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, synth_opts *o) {
    memset(o, 0, sizeof *o);
    o->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("synth", usage, argc, argv, &i, name, alias, val))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            printf("usage: %s\n", usage);
            return 0;
        } else if (FLAG("--print-table", "--dry-run", NULL) != 0) {
            if (r < 0) return 2;
            o->table_only = true;
        } else if (FLAG("--arch", NULL, &o->arch_s) != 0 || FLAG("--size", NULL, &o->size) != 0 ||
                   FLAG("--type", NULL, &o->type_name) != 0 || FLAG("--output", "-o", &o->out_path) != 0 ||
                   FLAG("--vocab", NULL, &o->vocab_path) != 0 || FLAG("--name", NULL, &o->name) != 0) {
            if (r < 0) return 2;
        } else if (FLAG("--seed", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int("synth", a, v, 0, 2147483647L, &o->seed))
                return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--threads", "-t", &v) != 0) {
            if (r < 0 || !cli_parse_int("synth", a, v, 1, 256, &o->n_threads)) return r < 0 ? 2 : cli_usage_line(usage);
        } else {
            return cli_usage_error("synth", usage, "unknown argument '%s'", a);
        }
#undef FLAG
    }
    if (!o->arch_s || !parse_arch(o->arch_s, &o->arch))
        return cli_usage_error("synth", usage, "--arch must be gemma, gemma2, gemma3 or gemma4 (got '%s')",
                               o->arch_s ? o->arch_s : "nothing");
    if (!o->size)
        return cli_usage_error("synth", usage, "--size is required (%s: %s)", o->arch_s, cv_preset_names(o->arch));
    if (!o->type_name) return cli_usage_error("synth", usage, "--type is required");
    int t;
    uint32_t ft;
    if (!cv_outtype_parse(o->type_name, &t, &ft) && pb_recipe_ftype_from_name(o->type_name) < 0)
        return cli_usage_error("synth", usage, "unknown --type '%s' (f32, f16, bf16, q8_0 or a mix: %s)", o->type_name,
                               pb_recipe_mix_list());
    if (!o->out_path && !o->table_only) return cli_usage_error("synth", usage, "-o FILE is required");
    return -1;
}

/* The real tokenizer (--vocab tokenizer.json, tokenizer_config.json from its folder) padded to the preset's
 * size for Gemma 1/2, or a synthetic vocabulary of exactly that size. */
static pb_status load_vocab(synth *sy, const synth_opts *o, cv_vocab **vocab) {
    if (!o->vocab_path) return cv_vocab_synthetic(&sy->hp, vocab);
    /* a folder holds tokenizer.json; a file is read itself (FILE.json used to stand for the tokenizer.json beside
     * it: another file, or none, was read instead of the one named) */
    struct stat st;
    pb_status s = stat(o->vocab_path, &st) == 0 && S_ISDIR(st.st_mode)
                      ? cv_vocab_load(o->vocab_path, &sy->hp, vocab)
                      : cv_vocab_load_file(o->vocab_path, &sy->hp, vocab);
    if (s != PB_OK) return s;
    uint32_t n_tok = cv_vocab_size(*vocab);
    if (n_tok < sy->hp.n_vocab && sy->hp.arch != CV_GEMMA3) return cv_vocab_pad(*vocab, sy->hp.n_vocab);
    if (n_tok > sy->hp.n_vocab) { /* as convert: entries past the embedding rows are dropped */
        cli_err("synth", "note: dropping %u tokenizer entries with ids >= %u (first: '%s')", n_tok - sy->hp.n_vocab,
                sy->hp.n_vocab, (*vocab)->tokens[sy->hp.n_vocab]);
        cv_vocab_truncate(*vocab, sy->hp.n_vocab);
        return PB_OK;
    }
    if (n_tok != sy->hp.n_vocab) {
        cli_err("synth", "note: the tokenizer has %u tokens; %s %s has %u, using %u", n_tok, o->arch_s, o->size,
                sy->hp.n_vocab, n_tok);
        sy->hp.n_vocab = n_tok;
    }
    return PB_OK;
}

static pb_status synth_write(synth *sy, const synth_opts *o, const cv_vocab *vocab, uint32_t file_type) {
    char name[256];
    if (o->name)
        snprintf(name, sizeof name, "%s", o->name);
    else
        snprintf(name, sizeof name, "synthetic %s %s (seed %ld)", o->arch_s, o->size, o->seed);
    pb_gguf_writer *w = pb_gguf_writer_new();
    if (!w) return pb_error(PB_ERR_NOMEM, "out of memory");
    pb_status s = cv_write_arch_kv(w, &sy->hp, name, file_type);
    if (s == PB_OK) s = cv_vocab_write(vocab, w, &sy->hp);
    if (s == PB_OK) s = pb_gguf_set_u32(w, "general.quantization_version", 2);
    for (int i = 0; i < sy->n_plan && s == PB_OK; i++)
        s = pb_gguf_add_tensor(w, sy->plan[i].name, sy->types[i], sy->plan[i].n_dims, sy->plan[i].ne, NULL);
    if (s == PB_OK) s = pb_pool_new(o->n_threads ? (int)o->n_threads : pb_cpu_physical_cores(), &sy->pool);
    if (s == PB_OK) {
        pb_gguf_writer_set_fill(w, synth_fill, sy);
        cli_progress_init(&sy->progress, "synth");
        pb_gguf_writer_set_progress(w, synth_progress, sy);
        s = pb_gguf_write(w, o->out_path);
        cli_progress_done(&sy->progress);
    }
    pb_gguf_writer_free(w);
    return s;
}

PB_CMD(synth) {
    synth_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    synth sy;
    memset(&sy, 0, sizeof sy);
    sy.seed = (uint64_t)o.seed;
    if (cv_hparams_preset(o.arch, o.size, &sy.hp) != PB_OK) /* --size not one of --arch's: a usage error */
        return cli_usage_error("synth", usage, "%s", pb_last_error());
    cli_install_cleanup_handlers();
    cv_vocab *vocab = NULL;
    uint32_t file_type = 0;
    double t0 = pb_time_ms();
    pb_status s = load_vocab(&sy, &o, &vocab);
    if (s == PB_OK) {
        sy.n_plan = cv_tensor_plan(&sy.hp, NULL);
        sy.plan = calloc((size_t)sy.n_plan, sizeof *sy.plan);
        sy.types = calloc((size_t)sy.n_plan, sizeof *sy.types);
        if (!sy.plan || !sy.types) s = pb_error(PB_ERR_NOMEM, "out of memory");
    }
    if (s == PB_OK) {
        cv_tensor_plan(&sy.hp, sy.plan);
        s = cv_pick_types(o.type_name, &sy.hp, sy.plan, sy.n_plan, sy.types, &file_type);
    }
    if (s == PB_OK && o.table_only) {
        print_table(&sy, o.type_name, file_type);
        rc = 0;
    } else if (s == PB_OK && (s = synth_write(&sy, &o, vocab, file_type)) == PB_OK) {
        fprintf(stderr, "pocketbrain synth: wrote %s (%s %s, %s, %d tensors, %u tokens) in %.1f s, peak RSS %.0f MB\n",
                o.out_path, o.arch_s, o.size, o.type_name, sy.n_plan, sy.hp.n_vocab, (pb_time_ms() - t0) / 1000.0,
                (double)pb_peak_rss() / 1e6);
        rc = 0;
    } else {
        rc = cli_fail("synth", s, o.out_path ? o.out_path : o.arch_s);
    }
    pb_pool_free(sy.pool);
    cv_vocab_free(vocab);
    free(sy.plan);
    free(sy.types);
    return rc;
}
