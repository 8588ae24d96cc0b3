/* quantize_model.c -- GGUF -> GGUF re-typing by a llama.cpp mix: recipe per tensor, row-parallel conversion
 * inside the writer's fill callback (so only one output tensor is in memory), atomic output. */
#include "quantize_model.h"

#include "cli.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "tensor/recipe.h"
#include "tensor/types.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_PER_CHUNK 16

typedef struct job {
    const pb_gguf_tensor *src;
    int type;     /* output type */
    bool convert; /* false: copied as is */
} job;

typedef struct qctx {
    job *jobs; /* in output order */
    int64_t n_jobs;
    pb_pool *pool;
    float **f32; /* per thread: ROWS_PER_CHUNK * max_ne0 floats */
    /* current tensor, for the workers */
    const job *cur;
    uint8_t *dst;
    int64_t bad_row;   /* first row with a non-finite value, or -1 (per tensor) */
    int64_t *bad_rows; /* per thread */
} qctx;

static void convert_rows(void *arg, int ith, int nth) {
    qctx *c = arg;
    const pb_gguf_tensor *t = c->cur->src;
    const int64_t ne0 = t->ne[0], nrows = t->ne[1] * t->ne[2] * t->ne[3];
    const pb_type_traits *in = pb_kernels_type(t->type), *out = pb_kernels_type(c->cur->type);
    const size_t in_row = pb_row_size(t->type, ne0), out_row = pb_row_size(c->cur->type, ne0);
    int64_t lo, hi;
    pb_split(nrows, ith, nth, &lo, &hi);
    float *buf = c->f32[ith];
    c->bad_rows[ith] = -1;
    for (int64_t r = lo; r < hi; r += ROWS_PER_CHUNK) {
        int64_t n = PB_MIN(ROWS_PER_CHUNK, hi - r);
        in->to_float((const uint8_t *)t->data + (size_t)r * in_row, buf, n * ne0);
        for (int64_t i = 0; i < n * ne0; i++) {
            if (!isfinite(buf[i])) {
                c->bad_rows[ith] = r + i / ne0;
                return;
            }
        }
        /* from_float works per block, so converting n rows at once equals n single-row calls */
        out->from_float(buf, c->dst + (size_t)r * out_row, n * ne0);
    }
}

static pb_status fill(void *user, int64_t ti, void *dst, size_t nbytes) {
    qctx *c = user;
    const job *j = &c->jobs[ti];
    PB_ASSERT(j->convert);
    c->cur = j;
    c->dst = dst;
    pb_pool_run(c->pool, convert_rows, c);
    for (int i = 0; i < pb_pool_size(c->pool); i++) {
        if (c->bad_rows[i] >= 0)
            return pb_error(PB_ERR_FORMAT, "quantize: tensor '%s' row %lld has a NaN or infinite value", j->src->name,
                            (long long)c->bad_rows[i]);
    }
    (void)nbytes;
    return PB_OK;
}

static void on_progress(void *user, size_t done, size_t total) {
    const cli_quantize_params *p = user;
    if (p->progress) p->progress(p->progress_user, (double)done, (double)total);
}

static int order_cmp(const void *a, const void *b) {
    const job *x = a, *y = b;
    return pb_recipe_order_cmp(x->src->name, y->src->name);
}

static void recipe_hparams(pb_recipe *r, const pb_gguf *g) {
    pb_gguf_str arch;
    if (pb_gguf_get_str(g, "general.architecture", &arch) != PB_OK || arch.len > 64) return;
    char key[128];
    uint32_t nh = 0, nkv = 0;
    snprintf(key, sizeof key, "%.*s.attention.head_count", (int)arch.len, arch.ptr);
    if (pb_gguf_get_u32(g, key, &nh) != PB_OK) nh = 0;
    snprintf(key, sizeof key, "%.*s.attention.head_count_kv", (int)arch.len, arch.ptr);
    if (pb_gguf_get_u32(g, key, &nkv) != PB_OK) nkv = nh;
    pb_error_clear();
    if (nh > 0 && nkv > 0) r->n_gqa = (int)(nh / nkv);
}

/* Lists the tensors in llama.cpp's order and decides each one's output type; errors (unreadable types,
 * quantized sources without allow_requantize) come out here, before any work. */
static pb_status plan_jobs(const cli_quantize_params *p, const pb_gguf *g, int ftype, qctx *c, int64_t *max_ne0) {
    pb_recipe r;
    pb_status s = pb_recipe_init(&r, ftype);
    if (s) return s;
    recipe_hparams(&r, g);
    c->n_jobs = pb_gguf_n_tensors(g);
    c->jobs = pb_calloc((size_t)(c->n_jobs ? c->n_jobs : 1), sizeof(job));
    if (!c->jobs) return PB_ERR_NOMEM;
    for (int64_t i = 0; i < c->n_jobs; i++) {
        c->jobs[i].src = pb_gguf_tensor_at(g, i);
        pb_recipe_count(&r, c->jobs[i].src->name);
    }
    qsort(c->jobs, (size_t)c->n_jobs, sizeof(job), order_cmp);
    *max_ne0 = 1;
    for (int64_t i = 0; i < c->n_jobs; i++) {
        job *j = &c->jobs[i];
        const pb_gguf_tensor *t = j->src;
        j->type = t->type;
        if (pb_recipe_is_quantizable(t->name, t->n_dims)) j->type = pb_recipe_tensor_type(&r, t->name, t->ne[0]);
        j->convert = j->type != t->type;
        if (!j->convert) continue;
        if ((s = pb_type_check_supported(t->type))) return pb_error_prefix(s, "quantize: tensor '%s': ", t->name);
        /* dequantizing to a float type loses nothing more; re-quantizing does and needs the flag */
        bool src_float = t->type == PB_TYPE_F32 || t->type == PB_TYPE_F16 || t->type == PB_TYPE_BF16;
        bool dst_float = j->type == PB_TYPE_F32 || j->type == PB_TYPE_F16 || j->type == PB_TYPE_BF16;
        if (!src_float && !dst_float && !p->allow_requantize)
            return pb_error(PB_ERR_UNSUPPORTED,
                            "quantize: tensor '%s' is already quantized (%s); pass --allow-requantize to re-quantize "
                            "it (quality loss)",
                            t->name, pb_type_name(t->type));
        if (pb_row_size(j->type, t->ne[0]) == 0)
            return pb_error(PB_ERR_UNSUPPORTED, "quantize: tensor '%s' rows of %lld do not fit type %s", t->name,
                            (long long)t->ne[0], pb_type_name(j->type));
        if (t->ne[0] > *max_ne0) *max_ne0 = t->ne[0];
    }
    return PB_OK;
}

/* The pool and one f32 conversion buffer per thread. */
static pb_status make_workers(const cli_quantize_params *p, int64_t max_ne0, qctx *c) {
    int nth = p->n_threads > 0 ? p->n_threads : pb_cpu_physical_cores();
    if (nth < 1) nth = 1;
    pb_status s = pb_pool_new(nth, &c->pool);
    if (s) return s;
    c->f32 = pb_calloc((size_t)nth, sizeof(float *));
    c->bad_rows = pb_calloc((size_t)nth, sizeof(int64_t));
    if (!c->f32 || !c->bad_rows) return PB_ERR_NOMEM;
    for (int i = 0; i < nth; i++)
        if (!(c->f32[i] = pb_malloc((size_t)max_ne0 * ROWS_PER_CHUNK * sizeof(float)))) return PB_ERR_NOMEM;
    return PB_OK;
}

/* Metadata (all keys but split.*, then file_type and quantization_version) and the tensor table. */
static pb_status describe_output(pb_gguf_writer *w, const pb_gguf *g, int ftype, const qctx *c,
                                 cli_quantize_stats *st) {
    pb_status s;
    for (int64_t i = 0; i < pb_gguf_n_kv(g); i++) {
        if (strncmp(pb_gguf_kv_key(g, i), "split.", 6) == 0) continue;
        if ((s = pb_gguf_copy_kv(w, g, i))) return s;
    }
    if ((s = pb_gguf_set_u32(w, "general.quantization_version", 2)) ||
        (s = pb_gguf_set_u32(w, "general.file_type", (uint32_t)ftype)))
        return s;
    for (int64_t i = 0; i < c->n_jobs; i++) {
        const job *j = &c->jobs[i];
        const pb_gguf_tensor *t = j->src;
        if ((s = pb_gguf_add_tensor(w, t->name, j->type, t->n_dims, t->ne, j->convert ? NULL : t->data))) return s;
        st->n_tensors++;
        st->n_converted += j->convert;
        if (j->type < 64) st->n_by_type[j->type]++;
        st->in_bytes += t->nbytes;
        st->out_bytes += pb_row_size(j->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
    }
    return PB_OK;
}

pb_status cli_quantize_model(const cli_quantize_params *p, cli_quantize_stats *stats) {
    double t0 = pb_time_ms();
    cli_quantize_stats st;
    memset(&st, 0, sizeof st);
    const int ftype = pb_recipe_ftype_from_name(p->mix);
    if (ftype < 0)
        return pb_error(PB_ERR_INVALID_ARG, "unknown quantization mix '%s' (expected one of: %s)", p->mix ? p->mix : "",
                        pb_recipe_mix_list());
    pb_gguf *g = NULL;
    pb_gguf_writer *w = NULL;
    qctx c;
    memset(&c, 0, sizeof c);
    int64_t max_ne0 = 1;
    pb_status s = pb_gguf_open(p->in_path, &g);
    if (s) {
        if (!strstr(pb_last_error(), p->in_path)) pb_error_prefix(s, "%s: ", p->in_path);
        goto done;
    }
    if ((s = plan_jobs(p, g, ftype, &c, &max_ne0)) || (s = make_workers(p, max_ne0, &c))) goto done;
    if (!(w = pb_gguf_writer_new())) {
        s = PB_ERR_NOMEM;
        goto done;
    }
    if ((s = describe_output(w, g, ftype, &c, &st))) goto done;
    pb_gguf_writer_set_fill(w, fill, &c);
    pb_gguf_writer_set_progress(w, on_progress, (void *)p);
    s = pb_gguf_write(w, p->out_path);
    if (s && !strstr(pb_last_error(), p->out_path)) pb_error_prefix(s, "%s: ", p->out_path);

done:
    pb_gguf_writer_free(w);
    if (c.f32)
        for (int i = 0; i < (c.pool ? pb_pool_size(c.pool) : 0); i++) free(c.f32[i]);
    free(c.f32);
    free(c.bad_rows);
    free(c.jobs);
    pb_pool_free(c.pool);
    pb_gguf_close(g);
    st.seconds = (pb_time_ms() - t0) / 1000.0;
    if (stats) *stats = st;
    return s;
}

static void bar(void *user, double done, double total) { cli_progress_update(user, done, total); }

int cli_quantize_file(const char *in, const char *out, const char *mix, int n_threads, bool progress, char *err,
                      size_t errlen) {
    cli_progress pr;
    cli_progress_init(&pr, "quantize");
    cli_quantize_params p = {.in_path = in,
                             .out_path = out,
                             .mix = mix,
                             .n_threads = n_threads,
                             .progress = progress ? bar : NULL,
                             .progress_user = &pr};
    pb_status s = cli_quantize_model(&p, NULL);
    if (progress) cli_progress_done(&pr);
    if (s) {
        if (err && errlen) snprintf(err, errlen, "%s", pb_last_error());
        return -1;
    }
    return 0;
}
