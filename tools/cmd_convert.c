/* cmd_convert.c -- `pocketbrain convert`: a Hugging Face Gemma folder (config.json, safetensors,
 * tokenizer.json) to a GGUF file with llama.cpp's names, keys and conventions. Streams tensor by tensor. */
#include "cli.h"
#include "convert_arch.h"
#include "convert_vocab.h"
#include "safetensors.h"

#include "base/base.h"
#include "gguf/gguf.h"
#include "json/json.h"
#include "tensor/recipe.h"
#include "tensor/types.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *usage = "pocketbrain convert HF_DIR OUT.gguf [--type f32|f16|bf16|q8_0|MIX] [--threads N] "
                           "[--name NAME]\n"
                           "  MIX is any `pocketbrain quantize` mix (q4_k_m, q4_k_s, q5_k_m, q6_k, q4_0, ...).\n"
                           "  Default --type f16; norms and 1-D tensors stay F32 as in llama.cpp's converter.";

/* ---- the conversion job ---------------------------------------------------------------------- */

typedef struct conv {
    const char *dir;
    cJSON *config;
    cv_vocab *vocab;
    uint32_t file_type;
    cv_hparams hp;
    const char *prefix; /* HF tensor name prefix that holds embed_tokens.weight */
    pb_st_model *st;
    cv_tensor *plan;
    int n_plan;
    const pb_st_tensor **src; /* per plan entry */
    int *types;               /* per plan entry */
    pb_pool *pool;
    cli_progress progress;
} conv;

static void on_warn(void *user, const char *msg) {
    (void)user;
    cli_err("convert", "warning: %s", msg);
}

static pb_status read_config(const char *dir, cJSON **out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (access(path, R_OK) != 0)
        return pb_error(PB_ERR_NOT_FOUND, "%s not found (is HF_DIR a Hugging Face model folder?)", path);
    char *text = NULL;
    size_t len = 0;
    pb_status s = pb_read_file(path, &text, &len);
    if (s != PB_OK) return s;
    size_t at;
    bool trailing;
    *out = pb_json_parse_one(text, len, &at, &trailing);
    const bool deep = !*out && !trailing && pb_json_too_deep(text, len, at);
    free(text);
    if (trailing)
        return pb_error(PB_ERR_FORMAT, "%s is not valid JSON: more text after the JSON value (at byte %zu)", path, at);
    if (deep)
        return pb_error(PB_ERR_FORMAT, "%s nests arrays or objects more than %d levels deep (at byte %zu)", path,
                        CJSON_NESTING_LIMIT, at);
    if (!*out) return pb_error(PB_ERR_FORMAT, "%s is not valid JSON (near byte %zu)", path, at);
    return PB_OK;
}

static void shape_str(char *buf, size_t n, const int64_t *shape, int nd) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Finds the prefix under which the text model's tensors live. */
static pb_status find_prefix(conv *c) {
    static const char *const prefixes[] = {"model.", "language_model.model.", "model.language_model.", ""};
    char name[256];
    snprintf(name, sizeof name, "%sembed_tokens.weight", c->prefix);
    if (pb_st_find(c->st, name)) return PB_OK;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", prefixes[i]);
        if (pb_st_find(c->st, name)) {
            c->prefix = prefixes[i];
            return PB_OK;
        }
    }
    return pb_error(PB_ERR_NOT_FOUND, "missing tensor '%sembed_tokens.weight' in the safetensors of %s", c->prefix,
                    c->dir);
}

/* Binds every planned tensor to its safetensors source and checks dtype and shape. */
static pb_status bind_tensors(conv *c) {
    char name[256], got[96], want[96];
    for (int i = 0; i < c->n_plan; i++) {
        const cv_tensor *t = &c->plan[i];
        if (t->kind == CV_GEN) continue; /* made here (Gemma 4 rope_freqs) */
        snprintf(name, sizeof name, "%s%s", c->prefix, t->hf);
        const pb_st_tensor *s = pb_st_find(c->st, name);
        if (!s) return pb_error(PB_ERR_NOT_FOUND, "missing tensor '%s' (for %s)", name, t->name);
        if (!pb_st_dtype_is_float(s->dtype))
            return pb_error(PB_ERR_UNSUPPORTED, "tensor '%s' has dtype %s (F32, F16 or BF16 expected)", name,
                            pb_st_dtype_name(s->dtype));
        /* HF shapes are [out, in] for matrices ([expert, out, in] for Gemma 4 experts): the reverse of GGUF ne. */
        int64_t exp[3];
        bool ok = s->n_dims == t->n_dims;
        for (int k = 0; k < t->n_dims; k++) {
            exp[k] = t->ne[t->n_dims - 1 - k];
            ok = ok && s->shape[k] == exp[k];
        }
        if (t->kind == CV_EMBD) /* rows beyond the vocabulary may be trimmed (Gemma 3) */
            ok = s->n_dims == 2 && s->shape[0] >= exp[0] && s->shape[1] == exp[1];
        if (!ok) {
            shape_str(got, sizeof got, s->shape, s->n_dims);
            shape_str(want, sizeof want, exp, t->n_dims);
            return pb_error(PB_ERR_FORMAT, "tensor '%s' has shape %s, config.json implies %s", name, got, want);
        }
        c->src[i] = s;
    }
    /* Text-model tensors nothing maps to (e.g. more layers than config.json says) are worth a warning;
     * lm_head (tied) and other towers of a multimodal checkpoint are expected. */
    size_t plen = strlen(c->prefix);
    int64_t unused = 0;
    const char *first = NULL;
    for (int64_t i = 0; i < pb_st_n_tensors(c->st); i++) {
        const pb_st_tensor *t = pb_st_tensor_at(c->st, i);
        if (strncmp(t->name, c->prefix, plen) != 0) continue;
        bool used = false;
        for (int k = 0; k < c->n_plan && !used; k++) used = c->src[k] == t;
        if (!used && !first) first = t->name;
        unused += !used;
    }
    if (unused) cli_err("convert", "warning: %lld tensor(s) not converted, e.g. '%s'", (long long)unused, first);
    return PB_OK;
}

/* Rows of one output tensor as float32: the safetensors values, plus 1 for norms (Gemma RMSNorm stores w
 * and computes x * (1 + w); GGUF files hold 1 + w). */
static pb_status conv_rows(void *user, int64_t ti, int64_t r0, int64_t r1, float *buf) {
    conv *c = user;
    const cv_tensor *t = &c->plan[ti];
    int64_t n = (r1 - r0) * t->ne[0];
    if (t->kind == CV_GEN) {
        cv_gemma4_gen(&c->hp, t, r0, r1, buf);
        return PB_OK;
    }
    pb_status s = pb_st_read_f32(c->src[ti], r0 * t->ne[0], n, buf);
    if (s != PB_OK) return s;
    /* llama.cpp's converter adds in the tensor's torch dtype: f32 for F32/BF16 sources (BF16 is upcast
     * first), f16 for F16 sources, i.e. the sum is rounded to f16 there. */
    if (t->kind == CV_NORM && c->src[ti]->dtype == PB_ST_F16)
        for (int64_t i = 0; i < n; i++) buf[i] = pb_fp16_to_fp32(pb_fp32_to_fp16(buf[i] + 1.0f));
    else if (t->kind == CV_NORM)
        for (int64_t i = 0; i < n; i++) buf[i] += 1.0f;
    return PB_OK;
}

static pb_status conv_fill(void *user, int64_t ti, void *dst, size_t nbytes) {
    conv *c = user;
    return cv_fill_tensor(c->pool, &c->plan[ti], c->types[ti], conv_rows, c, ti, dst, nbytes);
}

static void conv_progress(void *user, size_t done, size_t total) {
    conv *c = user;
    cli_progress_update(&c->progress, (double)done, (double)total);
}

/* ---- command --------------------------------------------------------------------------------- */

typedef struct conv_opts {
    const char *in_dir, *out_path, *type_name, *name;
    long n_threads;
} conv_opts;

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, conv_opts *o) {
    memset(o, 0, sizeof *o);
    o->type_name = "f16";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("convert", usage, argc, argv, &i, name, alias, val))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            printf("usage: %s\n", usage);
            return 0;
        } else if (FLAG("--type", "--outtype", &v) != 0) {
            if (r < 0) return 2;
            o->type_name = v;
        } else if (FLAG("--threads", "-t", &v) != 0) {
            if (r < 0 || !cli_parse_int("convert", a, v, 1, 256, &o->n_threads))
                return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--name", NULL, &v) != 0) {
            if (r < 0) return 2;
            o->name = v;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("convert", usage, "unknown option '%s'", a);
        } else if (!o->in_dir) {
            o->in_dir = a;
        } else if (!o->out_path) {
            o->out_path = a;
        } else {
            return cli_usage_error("convert", usage, "unexpected argument '%s'", a);
        }
#undef FLAG
    }
    if (!o->in_dir || !o->out_path) return cli_usage_error("convert", usage, "HF_DIR and OUT.gguf are required");
    int t;
    uint32_t ft;
    if (!cv_outtype_parse(o->type_name, &t, &ft) && pb_recipe_ftype_from_name(o->type_name) < 0)
        return cli_usage_error("convert", usage, "unknown --type '%s' (f32, f16, bf16, q8_0 or a mix: %s)",
                               o->type_name, pb_recipe_mix_list());
    return -1;
}

/* Matches the vocabulary to the embedding rows: Gemma 3 trims padding rows to the tokenizer (llama.cpp's
 * converter); Gemma 1/2 pad the vocabulary with [PADn] entries up to vocab_size instead. */
static pb_status size_vocab(conv *c) {
    char en[256];
    snprintf(en, sizeof en, "%sembed_tokens.weight", c->prefix);
    const pb_st_tensor *e = pb_st_find(c->st, en);
    uint32_t n_tok = cv_vocab_size(c->vocab);
    if (e->n_dims != 2) return pb_error(PB_ERR_FORMAT, "tensor '%s' has %d dimensions, expected 2", en, e->n_dims);
    if (c->hp.arch != CV_GEMMA3 && e->shape[0] != (int64_t)c->hp.n_vocab)
        return pb_error(PB_ERR_FORMAT, "tensor '%s' has %lld rows but config.json vocab_size is %u", en,
                        (long long)e->shape[0], c->hp.n_vocab);
    if ((int64_t)n_tok > e->shape[0]) {
        /* Entries past the embedding (e.g. Gemma 3's <image_soft_token> in a text-only checkpoint) cannot be
         * embedded; llama.cpp's converter ignores them too. */
        cli_err("convert", "note: dropping %lld tokenizer entries with ids >= %lld (first: '%s')",
                (long long)(n_tok - e->shape[0]), (long long)e->shape[0], c->vocab->tokens[e->shape[0]]);
        cv_vocab_truncate(c->vocab, (uint32_t)e->shape[0]);
        n_tok = (uint32_t)e->shape[0];
    }
    if (c->hp.arch == CV_GEMMA3) {
        c->hp.n_vocab = n_tok;
        return PB_OK;
    }
    c->hp.n_vocab = (uint32_t)e->shape[0];
    return cv_vocab_pad(c->vocab, c->hp.n_vocab);
}

/* config.json -> hparams, safetensors -> bound tensors, tokenizer -> vocabulary, --type -> types. */
static pb_status conv_prepare(conv *c, const conv_opts *o) {
    pb_status s;
    if ((s = read_config(o->in_dir, &c->config)) != PB_OK) return s;
    if ((s = cv_hparams_from_config(c->config, &c->hp, &c->prefix, on_warn, NULL)) != PB_OK) return s;
    if ((s = pb_st_open(o->in_dir, &c->st)) != PB_OK) return s;
    if ((s = find_prefix(c)) != PB_OK) return s;
    /* Vocabulary first: it decides how many embedding rows are kept. */
    if ((s = cv_vocab_load(o->in_dir, &c->hp, &c->vocab)) != PB_OK) return s;
    if ((s = size_vocab(c)) != PB_OK) return s;
    c->n_plan = cv_tensor_plan(&c->hp, NULL);
    c->plan = calloc((size_t)c->n_plan, sizeof *c->plan);
    c->src = calloc((size_t)c->n_plan, sizeof *c->src);
    c->types = calloc((size_t)c->n_plan, sizeof *c->types);
    if (!c->plan || !c->src || !c->types) return pb_error(PB_ERR_NOMEM, "out of memory");
    cv_tensor_plan(&c->hp, c->plan);
    if ((s = bind_tensors(c)) != PB_OK) return s;
    return cv_pick_types(o->type_name, &c->hp, c->plan, c->n_plan, c->types, &c->file_type);
}

/* Metadata, then every tensor through the fill callback; atomic (no file on error). */
static pb_status conv_write(conv *c, const conv_opts *o) {
    char name[256];
    if (o->name) {
        snprintf(name, sizeof name, "%s", o->name);
    } else { /* the folder's name, as llama.cpp's converter derives it */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", o->in_dir);
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
        const char *slash = strrchr(dir, '/');
        snprintf(name, sizeof name, "%s", slash ? slash + 1 : dir);
    }
    pb_gguf_writer *w = pb_gguf_writer_new();
    if (!w) return pb_error(PB_ERR_NOMEM, "out of memory");
    pb_status s = cv_write_arch_kv(w, &c->hp, name, c->file_type);
    if (s == PB_OK) s = cv_vocab_write(c->vocab, w, &c->hp);
    if (s == PB_OK) s = pb_gguf_set_u32(w, "general.quantization_version", 2);
    for (int i = 0; i < c->n_plan && s == PB_OK; i++)
        s = pb_gguf_add_tensor(w, c->plan[i].name, c->types[i], c->plan[i].n_dims, c->plan[i].ne, NULL);
    if (s == PB_OK) s = pb_pool_new(o->n_threads ? (int)o->n_threads : pb_cpu_physical_cores(), &c->pool);
    if (s == PB_OK) {
        pb_gguf_writer_set_fill(w, conv_fill, c);
        cli_progress_init(&c->progress, "convert");
        pb_gguf_writer_set_progress(w, conv_progress, c);
        s = pb_gguf_write(w, o->out_path);
        cli_progress_done(&c->progress);
    }
    pb_gguf_writer_free(w);
    return s;
}

PB_CMD(convert) {
    conv_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    cli_install_cleanup_handlers();
    conv c;
    memset(&c, 0, sizeof c);
    c.dir = o.in_dir;
    double t0 = pb_time_ms();
    pb_status s = conv_prepare(&c, &o);
    if (s == PB_OK) s = conv_write(&c, &o);
    if (s == PB_OK) {
        fprintf(stderr, "pocketbrain convert: wrote %s (%s, %s, %d tensors, %u tokens) in %.1f s, peak RSS %.0f MB\n",
                o.out_path, cv_arch_name(c.hp.arch), o.type_name, c.n_plan, c.hp.n_vocab, (pb_time_ms() - t0) / 1000.0,
                (double)pb_peak_rss() / 1e6);
        rc = 0;
    } else {
        rc = cli_fail("convert", s, o.in_dir);
    }
    pb_pool_free(c.pool);
    cv_vocab_free(c.vocab);
    pb_st_close(c.st);
    cJSON_Delete(c.config);
    free(c.plan);
    free(c.src);
    free(c.types);
    return rc;
}
