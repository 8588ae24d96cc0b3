/* cmd_bench.c -- `pocketbrain bench`: load time, time to first token, prefill (ppN) and decode (tgN) speed,
 * peak RSS and KV bytes per thread count; median/min/max over repetitions; Markdown table or --json. --cold and
 * --parallel live in bench_cold.c and bench_parallel.c. */
#include "base/base.h"
#include "bench_cold.h"
#include "bench_parallel.h"
#include "cli_common.h"
#include "library.h"
#include "kernels/kernels.h"
#include "sampler/sampler.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char *const usage =
    "pocketbrain bench [-m MODEL] [-t 1,2,...] [-p 512] [-n 128] [-d 0] [-b N] [-r 5] [--kv-type T]\n"
    "                  [--gpu|--no-gpu] [--cold] [--ttft-prompt 32] [--sample greedy] [--parallel 1,8,32]\n"
    "                  [--no-pack-cache] [--json]";

static const char *const help =
    "pocketbrain bench -- measure load time, time to first token, prefill and decode speed\n\n"
    "usage: pocketbrain bench [-m MODEL] [-t 1,2,...] [-p 512] [-n 128] [-d 0] [-b N] [-r 5] [--kv-type T]\n"
    "                         [--gpu|--no-gpu] [--cold] [--ttft-prompt 32] [--sample greedy] [--parallel 1,8,32]\n"
    "                         [--no-pack-cache] [--json]\n\n"
    "  -m, --model FILE   GGUF model (default: models/default.gguf)\n"
    "  -t, --threads L    comma-separated thread counts (default: physical cores)\n"
    "  -p, --n-prompt N   prompt tokens of the prefill test ppN (default 512; 0 = skip)\n"
    "  -n, --n-gen N      tokens of the decode test tgN (default 128; 0 = skip)\n"
    "  -d, --depth N      run ppN and tgN after N tokens already in the context (default 0): the speed\n"
    "                     of a long conversation or document, where attention reads N more keys\n"
    "  -b, --batch N      prompt tokens a forward call takes at most (the session's n_batch; default 256): ppN\n"
    "                     runs in chunks of it (llama-bench's -b)\n"
    "  -r, --reps N       repetitions; median, min and max are reported (default 5)\n"
    "  --kv-type T        KV cache type f16 (default), q8_0, f32\n"
    "  --ttft-prompt N    prompt tokens of the time-to-first-token test (default 32; e.g. 2000 for a long prompt)\n"
    "  --sample P         how tokens are picked: greedy (default) or a sampling preset (precise, balanced,\n"
    "                     creative, code: top-k 40, top-p, min-p, seed 42), for the speed of sampled decoding\n"
    "                     (tgN, and each stream of --parallel)\n"
    "  --cold             cold start instead: process start -> first token of a 24-token prompt, each\n"
    "                     repetition a fresh process with the model file evicted from the page cache\n"
    "                     (default context, as run uses; -p, -n, -d, -b, --ttft-prompt, --kv-type, --sample,\n"
    "                     --gpu and --parallel are refused with it)\n"
    "  --gpu, --no-gpu    run on the GPU (fail when none is usable) / on the CPU; default: the GPU when usable\n"
    "  --parallel L       continuous batching instead: for each count N of the list (1..64), N sessions each\n"
    "                     prefill a -p token prompt, then all decode -n tokens at once on their own threads\n"
    "                     (-t's first value each), once through one batch and once each alone; reports the\n"
    "                     aggregate decode tok/s, per-stream tok/s p50 / p99 and the gain of batching\n"
    "                     (-d, -b and --ttft-prompt are refused with it)\n"
    "  --no-pack-cache    repack the weights at every open instead of mapping the packed-weights cache\n"
    "                     ($XDG_CACHE_HOME/pocketbrain, else ~/.cache/pocketbrain; written by the first open)\n"
    "  --json             one JSON object instead of Markdown tables\n\n"
    "Tests use random token ids (as llama-bench does). ttft: a 32-token prompt (--ttft-prompt), prefill + first\n"
    "token.\n"
    "tgN: N decode steps after a one-token prompt, or after the N-token context of --depth (end-of-sequence\n"
    "tokens do not stop it). With --depth the tests are named \"ppN @ dD\" and \"tgN @ dD\" (llama-bench's -d).";

#define MAX_T 16
#define MAX_R 100

typedef struct triple {
    double med, min, max;
} triple;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static triple summarize(double *v, int n) {
    triple t = {0, 0, 0};
    if (n <= 0) return t;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    t.min = v[0];
    t.max = v[n - 1];
    t.med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return t;
}

typedef struct result {
    int threads;
    double load_ms;
    int n_repacked;
    triple ttft_ms, pp, tg;
    size_t rss, kv;
    int n_ctx, n_batch;
    bool gpu; /* ran on the GPU */
    char gpu_name[64];
} result;

static void random_ids(pb_rng *r, int32_t *ids, int n, int32_t bos, int32_t n_vocab) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(pb_rng_next(r) % (uint64_t)n_vocab);
    if (n > 0 && bos >= 0) ids[0] = bos;
}

/* One thread count: load, then reps of ttft, ppN, tgN. Returns 0 or an exit status. */
static int bench_one(const char *path, int threads, int gpu, const pb_preset *sample, int n_p, int n_g, int depth,
                     int reps, int n_ttft, pb_kv_type kv, int n_batch, const char *cache_dir, result *res) {
    memset(res, 0, sizeof *res);
    res->threads = threads;
    pb_session_params sp = pb_session_default_params();
    sp.n_threads = threads;
    sp.kv_type = kv;
    int need = PB_MAX(depth + PB_MAX(PB_MAX(n_p, n_g + 2), 33), n_ttft + 1);
    sp.n_ctx = (need + 255) / 256 * 256;
    sp.n_batch = n_batch; /* 0: the session default, as users get it (pp512 runs in chunks of it) */
    res->n_ctx = sp.n_ctx;
    double t0 = pb_time_ms();
    pb_model *m;
    pb_model_params mp = pb_model_default_params();
    mp.n_threads = threads;
    mp.gpu = gpu;
    mp.pack_cache_dir = cache_dir;
    pb_status st = pb_model_open(path, &mp, &m);
    if (st != PB_OK) return cli_fail("bench", st, "cannot open model");
    pb_model_info info; /* a small model: its own training context, when the tests fit in it */
    if (pb_model_get_info(m, &info) == PB_OK && info.n_ctx_train >= need && sp.n_ctx > info.n_ctx_train)
        res->n_ctx = sp.n_ctx = info.n_ctx_train;
    res->n_batch = PB_MIN(n_batch > 0 ? n_batch : pb_session_default_params().n_batch, sp.n_ctx);
    pb_session *s;
    if ((st = pb_session_new(m, &sp, &s)) != PB_OK) {
        pb_model_close(m);
        return cli_fail("bench", st, "cannot create session");
    }
    res->load_ms = pb_time_ms() - t0;
    pb_model_info mi;
    if (pb_model_get_info(m, &mi) == PB_OK) {
        res->n_repacked = mi.n_repacked;
        res->gpu = mi.gpu;
        snprintf(res->gpu_name, sizeof res->gpu_name, "%s", mi.gpu_name);
    }
    pb_mem_estimate e;
    if (pb_estimate_memory(path, &sp, 0, &e) == PB_OK) res->kv = e.kv;

    const pb_vocab *v = pb_model_vocab(m);
    int32_t n_vocab = pb_vocab_size(v), bos = pb_vocab_bos(v);
    int32_t *ids = malloc((size_t)PB_MAX(n_p, n_ttft) * sizeof *ids),
            *ctx = malloc((size_t)PB_MAX(depth, 1) * sizeof *ctx);
    if (!ids || !ctx) {
        free(ids), free(ctx);
        pb_session_free(s);
        pb_model_close(m);
        return cli_fail("bench", PB_ERR_NOMEM, "out of memory");
    }
    pb_rng rng;
    pb_rng_seed(&rng, 1234);
    pb_gen_params gp = pb_gen_default_params();
    if (sample)
        gp.sampler = pb_sampler_preset(*sample);
    else
        gp.sampler.temperature = 0;
    gp.stop_at_eos = false;
    double ttft[MAX_R], pp[MAX_R], tg[MAX_R];
    pb_gen_stats gs;
    int rc = 0;
    for (int r = 0; r < reps && !rc; r++) {
        /* time to first token: an n_ttft-token prompt (32 by default), prefill + one sampled token */
        pb_session_truncate(s, 0);
        random_ids(&rng, ids, n_ttft, bos, n_vocab);
        gp.max_tokens = 1;
        if ((st = pb_session_generate(s, ids, n_ttft, &gp, NULL, NULL, &gs)) != PB_OK) rc = 1;
        ttft[r] = gs.t_first_token_ms;
        if (n_p > 0 && !rc) {
            pb_session_truncate(s, 0);
            if (depth > 0) { /* the context first, not timed */
                random_ids(&rng, ctx, depth, bos, n_vocab);
                if ((st = pb_session_prefill(s, ctx, depth)) != PB_OK) rc = 1;
            }
            random_ids(&rng, ids, n_p, depth > 0 ? -1 : bos, n_vocab);
            double t = pb_time_ms();
            if (!rc && (st = pb_session_prefill(s, ids, n_p)) != PB_OK) rc = 1;
            pp[r] = (double)n_p * 1000.0 / (pb_time_ms() - t);
        }
        if (n_g > 0 && !rc) {
            pb_session_truncate(s, 0);
            int np = PB_MAX(depth, 1); /* the prompt: one token, or the --depth context (not timed) */
            random_ids(&rng, ctx, np, bos, n_vocab);
            gp.max_tokens = n_g + 1; /* n_g forwards: the first token comes from the prompt's logits */
            if ((st = pb_session_generate(s, ctx, np, &gp, NULL, NULL, &gs)) != PB_OK) rc = 1;
            tg[r] = (double)n_g * 1000.0 / gs.t_generate_ms;
        }
    }
    if (rc) cli_fail("bench", st, "benchmark run failed");
    res->ttft_ms = summarize(ttft, reps);
    if (n_p > 0) res->pp = summarize(pp, reps);
    if (n_g > 0) res->tg = summarize(tg, reps);
    res->rss = pb_peak_rss();
    free(ids);
    free(ctx);
    pb_session_free(s);
    pb_model_close(m);
    return rc;
}

PB_CMD(bench) {
    const char *model = NULL;
    int threads[MAX_T], n_threads = 0;
    long n_p = 512, n_g = 128, depth = 0, reps = 5, n_ttft = 32, n_batch = 0;
    bool json = false, cold = false;
    int par[MAX_T], n_par = 0;
    if (argc == 6 && strcmp(argv[1], "--cold-child") == 0) { /* bench --cold's fresh process */
        long t, fd;
        if (!cli_parse_int("bench", "threads", argv[3], 1, 256, &t) ||
            !cli_parse_int("bench", "fd", argv[4], 0, 1 << 20, &fd))
            return 2;
        return bench_cold_child(argv[2], (int)t, (int)fd, strcmp(argv[5], "-") == 0 ? NULL : argv[5]);
    }
    bool pack_cache = true;
    int gpu = -1;
    pb_preset preset;
    const pb_preset *sample = NULL; /* NULL: greedy */
    pb_kv_type kv = PB_KV_F16;
    /* the first flag given that --cold / --parallel would not use: refused with them, not ignored without a word */
    const char *not_cold = NULL, *not_par = NULL;
#define NOT_COLD(name) (not_cold = not_cold ? not_cold : (name))
#define NOT_PAR(name)  (not_par = not_par ? not_par : (name))
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("bench", usage, argc, argv, &i, name, alias, val))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            printf("%s\n", help);
            return 0;
        } else if (FLAG("--json", NULL, NULL) != 0) {
            if (r < 0) return 2;
            json = true;
        } else if (FLAG("--cold", NULL, NULL) != 0) {
            if (r < 0) return 2;
            cold = true;
        } else if (FLAG("--no-pack-cache", NULL, NULL) != 0) {
            if (r < 0) return 2;
            pack_cache = false;
        } else if (FLAG("--gpu", "--no-gpu", NULL) != 0) {
            if (r < 0) return 2;
            gpu = a[2] == 'g';
            NOT_COLD(gpu ? "--gpu" : "--no-gpu");
        } else if (FLAG("--model", "-m", &v) != 0) {
            if (r < 0) return 2;
            if (!(model = cli_model_arg("bench", v))) return 1;
        } else if (FLAG("--threads", "-t", &v) != 0) {
            if (r < 0 || !cli_parse_int_list("bench", a, v, 1, 256, threads, MAX_T, &n_threads))
                return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--parallel", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int_list("bench", a, v, 1, PB_BATCH_MAX_SESSIONS, par, MAX_T, &n_par))
                return r < 0 ? 2 : cli_usage_line(usage);
            NOT_COLD("--parallel");
        } else if (FLAG("--n-prompt", "-p", &v) != 0) {
            if (r < 0 || !cli_parse_int("bench", a, v, 0, 65536, &n_p)) return r < 0 ? 2 : cli_usage_line(usage);
            NOT_COLD("-p");
        } else if (FLAG("--n-gen", "-n", &v) != 0) {
            if (r < 0 || !cli_parse_int("bench", a, v, 0, 65536, &n_g)) return r < 0 ? 2 : cli_usage_line(usage);
            NOT_COLD("-n");
        } else if (FLAG("--depth", "-d", &v) != 0) {
            if (r < 0 || !cli_parse_int("bench", a, v, 0, 65536, &depth)) return r < 0 ? 2 : cli_usage_line(usage);
            NOT_COLD("-d");
            NOT_PAR("-d");
        } else if (FLAG("--batch", "-b", &v) != 0) {
            if (r < 0 || !cli_parse_int("bench", a, v, 1, 65536, &n_batch)) return r < 0 ? 2 : cli_usage_line(usage);
            NOT_COLD("-b"); /* they size their own sessions */
            NOT_PAR("-b");
        } else if (FLAG("--ttft-prompt", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int("bench", a, v, 1, 65536, &n_ttft)) return r < 0 ? 2 : cli_usage_line(usage);
            NOT_COLD("--ttft-prompt");
            NOT_PAR("--ttft-prompt");
        } else if (FLAG("--sample", NULL, &v) != 0) {
            if (r < 0) return 2;
            if (strcmp(v, "greedy") == 0)
                sample = NULL;
            else if (pb_preset_from_name(v, &preset) == PB_OK)
                sample = &preset;
            else
                return cli_usage_error("bench", usage,
                                       "--sample expects greedy, precise, balanced, creative or code, got '%s'", v);
            NOT_COLD("--sample");
        } else if (FLAG("--reps", "-r", &v) != 0) {
            if (r < 0 || !cli_parse_int("bench", a, v, 1, MAX_R, &reps)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--kv-type", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_kv("bench", v, &kv)) return r < 0 ? 2 : cli_usage_line(usage);
            NOT_COLD("--kv-type");
        } else {
            return cli_usage_error("bench", usage, "unknown flag '%s'", a);
        }
#undef FLAG
#undef NOT_COLD
#undef NOT_PAR
    }
    /* --cold runs one greedy token after a 24-token prompt in fresh processes with run's defaults; --parallel sizes
     * its own sessions and decodes from a -p prompt: what they do not use is refused (it was ignored) */
    if (cold && not_cold)
        return cli_usage_error("bench", usage, "%s is not taken with --cold (its one token is greedy, after a %s)",
                               not_cold, "24-token prompt, with run's defaults");
    if (n_par > 0 && not_par) return cli_usage_error("bench", usage, "%s is not taken with --parallel", not_par);
    if (n_par > 0 && n_g < 1)
        return cli_usage_error("bench", usage, "--parallel measures decoding: -n must be at least 1");
    const char *path = model ? model : cli_default_model();
    if (!path) {
        cli_err("bench", "no model: pass -m MODEL.gguf");
        return 1;
    }
    if (n_threads == 0) threads[n_threads++] = pb_cpu_physical_cores();
    const char *cache_dir = pack_cache ? cli_pack_cache_dir() : NULL;
    if (cold) return bench_cold(path, threads, n_threads, (int)reps, json, cache_dir);
    if (n_par > 0)
        return bench_parallel(path, par, n_par, threads[0], gpu, (int)n_p, (int)n_g, (int)reps, kv, sample, cache_dir,
                              json);

    pb_model_info info;
    {
        pb_model *m;
        pb_model_params ip = pb_model_default_params();
        ip.repack = false; /* metadata only */
        ip.gpu = 0;
        pb_status st = pb_model_open(path, &ip, &m);
        if (st != PB_OK) return cli_fail("bench", st, "cannot open model");
        pb_model_get_info(m, &info);
        pb_model_close(m);
    }
    result res[MAX_T];
    for (int k = 0; k < n_threads; k++) {
        int rc = bench_one(path, threads[k], gpu, sample, (int)n_p, (int)n_g, (int)depth, (int)reps, (int)n_ttft, kv,
                           (int)n_batch, cache_dir, &res[k]);
        if (rc) return rc;
    }
    char pp_name[32], tg_name[32], mname[200];
    snprintf(pp_name, sizeof pp_name, depth ? "pp%ld @ d%ld" : "pp%ld", n_p, depth);
    snprintf(tg_name, sizeof tg_name, depth ? "tg%ld @ d%ld" : "tg%ld", n_g, depth);
    snprintf(mname, sizeof mname, "%s %s", info.arch, info.file_type);

    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "model", path);
        cJSON_AddStringToObject(root, "model_type", mname);
        cJSON_AddNumberToObject(root, "model_bytes", (double)info.weight_bytes);
        cJSON_AddNumberToObject(root, "n_params", (double)info.n_params);
        cJSON_AddNumberToObject(root, "reps", (double)reps);
        cJSON_AddNumberToObject(root, "depth", (double)depth);
        cJSON_AddNumberToObject(root, "ttft_prompt", (double)n_ttft);
        cJSON_AddStringToObject(root, "kv_type", cli_kv_name(kv));
        cJSON_AddStringToObject(root, "sample", sample ? pb_preset_name(*sample) : "greedy");
        cJSON_AddStringToObject(root, "kernels", pb_kernels_isa());
        cJSON_AddNumberToObject(root, "repacked", n_threads ? res[0].n_repacked : 0);
        cJSON *runs = cJSON_AddArrayToObject(root, "runs");
        for (int k = 0; k < n_threads; k++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "threads", res[k].threads);
            cJSON_AddStringToObject(o, "backend", res[k].gpu ? "cuda" : "cpu");
            if (res[k].gpu) cJSON_AddStringToObject(o, "gpu", res[k].gpu_name);
            cJSON_AddNumberToObject(o, "load_ms", res[k].load_ms);
            const char *names[3] = {"ttft_ms", pp_name, tg_name};
            const triple *vals[3] = {&res[k].ttft_ms, &res[k].pp, &res[k].tg};
            for (int j = 0; j < 3; j++) {
                if ((j == 1 && n_p == 0) || (j == 2 && n_g == 0)) continue;
                cJSON *t = cJSON_AddObjectToObject(o, names[j]);
                cJSON_AddNumberToObject(t, "median", vals[j]->med);
                cJSON_AddNumberToObject(t, "min", vals[j]->min);
                cJSON_AddNumberToObject(t, "max", vals[j]->max);
                if (j) cJSON_AddStringToObject(t, "unit", "tok/s");
            }
            cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)res[k].rss);
            cJSON_AddNumberToObject(o, "kv_bytes", (double)res[k].kv);
            cJSON_AddNumberToObject(o, "n_ctx", res[k].n_ctx);
            cJSON_AddNumberToObject(o, "n_batch", res[k].n_batch);
            cJSON_AddItemToArray(runs, o);
        }
        cli_json_print(root, true);
        return 0;
    }
    printf("| model | size | params | threads / GPU | test | t/s (median) | min | max |\n");
    printf("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n");
    for (int k = 0; k < n_threads; k++) {
        for (int j = 0; j < 2; j++) {
            if ((j == 0 && n_p == 0) || (j == 1 && n_g == 0)) continue;
            const triple *t = j ? &res[k].tg : &res[k].pp;
            char who[80];
            if (res[k].gpu)
                snprintf(who, sizeof who, "%s", res[k].gpu_name);
            else
                snprintf(who, sizeof who, "%d", res[k].threads);
            printf("| %s | %.2f MiB | %.2f M | %s | %s | %.2f | %.2f | %.2f |\n", mname,
                   (double)info.weight_bytes / (1 << 20), (double)info.n_params / 1e6, who, j ? tg_name : pp_name,
                   t->med, t->min, t->max);
        }
    }
    printf("\n| threads | load ms | ttft ms (%ld-token prompt, median) | min | max | peak RSS MiB | KV MiB (n_ctx) |\n",
           n_ttft);
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < n_threads; k++)
        printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f (%d, %s) |\n", res[k].threads, res[k].load_ms,
               res[k].ttft_ms.med, res[k].ttft_ms.min, res[k].ttft_ms.max, (double)res[k].rss / (1 << 20),
               (double)res[k].kv / (1 << 20), res[k].n_ctx, cli_kv_name(kv));
    printf("\n%ld repetitions; random token ids; decode %s; pocketbrain %s; kernels %s; %d weight matrices "
           "repacked\n",
           reps, sample ? pb_preset_name(*sample) : "greedy", pb_version(), pb_kernels_isa(),
           n_threads ? res[0].n_repacked : 0);
    return 0;
}
