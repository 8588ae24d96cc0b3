/* bench_parallel.c -- `pocketbrain bench --parallel N,...`: the aggregate decode speed of N streams of one model
 * decoding at once, through one pb_batch (continuous batching) and each alone, side by side, so the gain shows. */
#include "bench_parallel.h"
#include "base/base.h"
#include "cli.h"
#include "cli_common.h"
#include "kernels/kernels.h"
#include "sampler/sampler.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct stream_job {
    pb_session *s;
    int n_g;
    const pb_preset *sample; /* NULL: greedy */
    pthread_barrier_t *go;
    pb_status st;
    char err[256];
    double tok_s, t_end;
} stream_job;

/* One stream's decode: n_g forwards after the prompt (the first token comes from the prompt's logits). */
static void *stream_main(void *arg) {
    stream_job *j = arg;
    pthread_barrier_wait(j->go);
    pb_gen_params gp = pb_gen_default_params();
    if (j->sample)
        gp.sampler = pb_sampler_preset(*j->sample);
    else
        gp.sampler.temperature = 0;
    gp.stop_at_eos = false;
    gp.max_tokens = j->n_g + 1;
    pb_gen_stats gs;
    j->st = pb_session_generate(j->s, NULL, 0, &gp, NULL, NULL, &gs);
    j->t_end = pb_time_ms();
    if (j->st != PB_OK) snprintf(j->err, sizeof j->err, "%s", pb_last_error());
    j->tok_s = gs.t_generate_ms > 0 ? (double)j->n_g * 1000.0 / gs.t_generate_ms : 0;
    return NULL;
}

typedef struct mode_result {
    double agg;      /* tok/s of all streams together (median over reps) */
    double p50, p99; /* per-stream tok/s: the median, and the speed 99% of the streams reached */
    double mean_batch;
    double wait_ms; /* leaders' rendezvous wait per step */
} mode_result;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Value at quantile q of the sorted v[n] (nearest rank). */
static double quantile(const double *v, int n, double q) {
    int k = (int)(q * (double)(n - 1) + 0.5);
    return n > 0 ? v[k < 0 ? 0 : k >= n ? n - 1 : k] : 0;
}

typedef struct cfg {
    int threads, n_p, n_g, reps;
    pb_kv_type kv;
    const pb_preset *sample;
} cfg;

/* n streams, batched or alone: prefill (not timed), then reps of all decoding at once. */
static int run_mode(pb_model *m, int n, bool batched, const cfg *c, mode_result *out) {
    memset(out, 0, sizeof *out);
    pb_batch *b = NULL;
    pb_status st = batched ? pb_batch_new(m, n, &b) : PB_OK;
    if (st != PB_OK) return cli_fail("bench", st, "cannot create the batch");
    pb_session **ss = calloc((size_t)n, sizeof *ss);
    stream_job *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    double *rates = calloc((size_t)n * (size_t)c->reps, sizeof *rates), *aggs = calloc((size_t)c->reps, sizeof *aggs);
    int n_p = c->n_p > 0 ? c->n_p : 1;
    int32_t *ids = malloc((size_t)n_p * sizeof *ids);
    int rc = 0;
    if (!ss || !jobs || !th || !rates || !aggs || !ids) {
        rc = cli_fail("bench", PB_ERR_NOMEM, "out of memory");
        goto done;
    }
    const pb_vocab *v = pb_model_vocab(m);
    int32_t n_vocab = pb_vocab_size(v), bos = pb_vocab_bos(v);
    pb_session_params sp = pb_session_default_params();
    sp.n_threads = c->threads;
    sp.kv_type = c->kv;
    sp.n_ctx = (n_p + c->n_g + 2 + 255) / 256 * 256;
    pb_model_info info;
    if (pb_model_get_info(m, &info) == PB_OK && info.n_ctx_train >= n_p + c->n_g + 2 && sp.n_ctx > info.n_ctx_train)
        sp.n_ctx = info.n_ctx_train;
    sp.n_batch = n_p < 128 ? n_p : 128; /* prefill is not timed: a smaller scratch for many sessions */
    sp.batch = b;
    for (int i = 0; i < n; i++) {
        if ((st = pb_session_new(m, &sp, &ss[i])) != PB_OK) {
            rc = cli_fail("bench", st, "cannot create a session");
            goto done;
        }
        pb_rng rng; /* the same prompt for stream i in both modes */
        pb_rng_seed(&rng, 1234 + (uint64_t)i);
        for (int k = 0; k < n_p; k++) ids[k] = (int32_t)(pb_rng_next(&rng) % (uint64_t)n_vocab);
        if (bos >= 0) ids[0] = bos;
        if ((st = pb_session_prefill(ss[i], ids, n_p)) != PB_OK) {
            rc = cli_fail("bench", st, "prefill failed");
            goto done;
        }
    }
    for (int r = 0; r < c->reps && !rc; r++) {
        for (int i = 0; i < n && r > 0; i++)
            if ((st = pb_session_truncate(ss[i], n_p)) != PB_OK) {
                rc = cli_fail("bench", st, "cannot go back to the prompt");
                goto done;
            }
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, (unsigned)n + 1);
        for (int i = 0; i < n; i++) {
            jobs[i] = (stream_job){.s = ss[i], .n_g = c->n_g, .sample = c->sample, .go = &go};
            if (pthread_create(&th[i], NULL, stream_main, &jobs[i]) != 0) {
                cli_err("bench", "cannot start a thread");
                exit(1); /* the barrier would wait forever for it */
            }
        }
        pthread_barrier_wait(&go);
        double t0 = pb_time_ms(), t_end = t0;
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
            if (jobs[i].t_end > t_end) t_end = jobs[i].t_end;
            rates[r * n + i] = jobs[i].tok_s;
            if (jobs[i].st != PB_OK && !rc) {
                cli_err("bench", "stream %d: %s", i, jobs[i].err);
                rc = 1;
            }
        }
        pthread_barrier_destroy(&go);
        aggs[r] = t_end > t0 ? (double)n * c->n_g * 1000.0 / (t_end - t0) : 0;
    }
    if (!rc) {
        qsort(aggs, (size_t)c->reps, sizeof *aggs, cmp_d);
        qsort(rates, (size_t)n * (size_t)c->reps, sizeof *rates, cmp_d);
        int k = n * c->reps;
        out->agg = quantile(aggs, c->reps, 0.5);
        out->p50 = quantile(rates, k, 0.5);
        out->p99 = quantile(rates, k, 0.01); /* the slow tail: 99% of the streams were at least this fast */
        out->mean_batch = 1;
        if (b) {
            pb_batch_stats bs;
            pb_batch_get_stats(b, &bs);
            out->mean_batch = bs.n_steps ? (double)bs.n_tokens / (double)bs.n_steps : 0;
            out->wait_ms = bs.n_steps ? bs.wait_ms / (double)bs.n_steps : 0;
        }
    }
done:
    for (int i = 0; ss && i < n; i++) pb_session_free(ss[i]);
    pb_batch_free(b);
    free(ss), free(jobs), free(th), free(rates), free(aggs), free(ids);
    return rc;
}

static void load_avg(char *buf, size_t cap) {
    snprintf(buf, cap, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return;
    double a, b, c;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(buf, cap, "%.2f %.2f %.2f", a, b, c);
    fclose(f);
}

int bench_parallel(const char *path, const int *ns, int n_ns, int threads, int gpu, int n_p, int n_g, int reps,
                   pb_kv_type kv, const pb_preset *sample, const char *cache_dir, bool json) {
    char load_before[64], load_after[64];
    load_avg(load_before, sizeof load_before);
    pb_model_params mp = pb_model_default_params();
    mp.n_threads = threads;
    mp.gpu = gpu;
    mp.pack_cache_dir = cache_dir;
    pb_model *m;
    pb_status st = pb_model_open(path, &mp, &m);
    if (st != PB_OK) return cli_fail("bench", st, "cannot open model");
    pb_model_info info;
    pb_model_get_info(m, &info);
    cfg c = {threads, n_p, n_g, reps, kv, sample};
    mode_result res[2][16];
    int rc = 0;
    for (int k = 0; k < n_ns && !rc; k++) {
        rc = run_mode(m, ns[k], true, &c, &res[0][k]);
        if (!rc) rc = run_mode(m, ns[k], false, &c, &res[1][k]);
    }
    pb_model_close(m);
    if (rc) return rc;
    load_avg(load_after, sizeof load_after);
    char mname[200], who[80];
    snprintf(mname, sizeof mname, "%s %s", info.arch, info.file_type);
    if (info.gpu)
        snprintf(who, sizeof who, "%s", info.gpu_name);
    else
        snprintf(who, sizeof who, "%d", threads);
    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "model", path);
        cJSON_AddStringToObject(root, "model_type", mname);
        cJSON_AddNumberToObject(root, "model_bytes", (double)info.weight_bytes);
        cJSON_AddStringToObject(root, "backend", info.gpu ? "cuda" : "cpu");
        if (info.gpu) cJSON_AddStringToObject(root, "gpu", info.gpu_name);
        cJSON_AddNumberToObject(root, "threads", threads);
        cJSON_AddNumberToObject(root, "n_prompt", n_p);
        cJSON_AddNumberToObject(root, "n_gen", n_g);
        cJSON_AddNumberToObject(root, "reps", reps);
        cJSON_AddStringToObject(root, "kv_type", cli_kv_name(kv));
        cJSON_AddStringToObject(root, "sample", sample ? pb_preset_name(*sample) : "greedy");
        cJSON_AddStringToObject(root, "kernels", pb_kernels_isa());
        cJSON_AddStringToObject(root, "load_avg_before", load_before);
        cJSON_AddStringToObject(root, "load_avg_after", load_after);
        cJSON *runs = cJSON_AddArrayToObject(root, "parallel");
        for (int k = 0; k < n_ns; k++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "streams", ns[k]);
            const char *names[2] = {"batched", "alone"};
            for (int j = 0; j < 2; j++) {
                const mode_result *r = &res[j][k];
                cJSON *t = cJSON_AddObjectToObject(o, names[j]);
                cJSON_AddNumberToObject(t, "aggregate_tok_s", r->agg);
                cJSON_AddNumberToObject(t, "stream_tok_s_p50", r->p50);
                cJSON_AddNumberToObject(t, "stream_tok_s_p99", r->p99);
                if (j == 0) {
                    cJSON_AddNumberToObject(t, "mean_batch", r->mean_batch);
                    cJSON_AddNumberToObject(t, "wait_ms_per_step", r->wait_ms);
                }
            }
            cJSON_AddNumberToObject(o, "gain", res[1][k].agg > 0 ? res[0][k].agg / res[1][k].agg : 0);
            cJSON_AddItemToArray(runs, o);
        }
        cli_json_print(root, true);
        return 0;
    }
    printf("| model | threads / GPU | streams | decode | aggregate t/s | per-stream t/s p50 | p99 | mean batch | gain "
           "|\n");
    printf("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < n_ns; k++)
        for (int j = 0; j < 2; j++) {
            const mode_result *r = &res[j][k];
            char mb[32] = "-", gain[32] = "-";
            if (j == 0) {
                snprintf(mb, sizeof mb, "%.2f", r->mean_batch);
                snprintf(gain, sizeof gain, "%.2fx", res[1][k].agg > 0 ? r->agg / res[1][k].agg : 0);
            }
            printf("| %s | %s | %d | %s | %.2f | %.2f | %.2f | %s | %s |\n", mname, who, ns[k], j ? "alone" : "batched",
                   r->agg, r->p50, r->p99, mb, gain);
        }
    printf(
        "\nEach stream: a %d-token prompt (random ids, not timed), then %d decode steps (%s), all streams at once on "
        "their own threads (%d each); aggregate = all tokens / wall time, median of %d; p99 = 99%% of the streams were "
        "at least this fast; gain = batched / alone. Load average before %s, after %s. pocketbrain %s; kernels %s\n",
        n_p > 0 ? n_p : 1, n_g, sample ? pb_preset_name(*sample) : "greedy", threads, reps, load_before, load_after,
        pb_version(), pb_kernels_isa());
    return 0;
}
