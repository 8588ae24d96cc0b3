/* cmd_perplexity.c -- `pocketbrain perplexity`: perplexity of a model on a text file, optionally the KL divergence
 * from a reference model's distribution. Chunking rule (mirrored by tools/train/train.py):
 *   the text is tokenized with control-token parsing and no BOS; it is cut into floor(n / ctx) non-overlapping
 *   chunks of ctx tokens; each chunk is fed as [BOS] + chunk[0 .. ctx-2], so position p predicts chunk[p];
 *   only the second half (p = ctx/2 .. ctx-1) of each chunk is scored, so every scored token sees >= ctx/2 tokens
 *   of context. ppl = exp(mean NLL). */
#include "cli.h"
#include "cli_common.h"
#include "library.h"

#include "base/base.h"
#include "model/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *usage =
    "pocketbrain perplexity -m MODEL -f TEXT [--ctx N] [--batch N] [--chunks N] [--threads N]\n"
    "                       [--kv-type f16|q8_0|f32] [--kl-base LOGITS.f32 | --kl-model OTHER.gguf]\n"
    "                       [--save-logits OUT.f32] [--json]\n"
    "  TEXT is tokenized with control-token parsing (<start_of_turn> etc.), no BOS, and cut into non-overlapping\n"
    "  chunks of --ctx tokens (default 256). Each chunk is fed as <bos> + its first ctx-1 tokens; the second half\n"
    "  of every chunk is scored. --chunks N uses only the first N chunks.\n"
    "  --kl-model OTHER.gguf  also runs OTHER (the reference) and reports KL(OTHER || MODEL) and top-1 agreement.\n"
    "  --save-logits OUT.f32  writes MODEL's float32 logits of every scored position ([scored][n_vocab]);\n"
    "  --kl-base LOGITS.f32   reads such a file as the reference instead of running a second model.\n"
    "  --json                 prints one JSON object instead of text.";

typedef struct runner {
    pb_model *m;
    pb_kv_cache *kv;
    pb_forward_ctx *fc;
    float *logits; /* [batch][n_vocab] */
} runner;

static void runner_free(runner *r) {
    free(r->logits);
    pb_forward_ctx_free(r->fc);
    pb_kv_free(r->kv);
    pb_model_close(r->m);
}

static int runner_open(runner *r, const char *path, int ctx, int nb, pb_kv_type kt) {
    pb_status s = pb_model_open(path, NULL, &r->m);
    if (s) return cli_fail("perplexity", s, path);
    if ((s = pb_kv_new(r->m, ctx, kt, &r->kv)) || (s = pb_forward_ctx_new(r->m, nb, &r->fc)))
        return cli_fail("perplexity", s, "setting up the forward pass");
    r->logits = malloc(sizeof(float) * (size_t)nb * (size_t)pb_model_hparams(r->m)->n_vocab);
    if (!r->logits) {
        cli_err("perplexity", "out of memory for %d rows of logits", nb);
        return 1;
    }
    return 0;
}

/* log-softmax normalizer of one row, in double: log(sum(exp(x - max))) + max. */
static double log_norm(const float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - (double)mx);
    return log(sum) + (double)mx;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* KL(p || q) for rows of logits a (p) and b (q). */
static double kl_rows(const float *a, const float *b, int n) {
    double la = log_norm(a, n), lb = log_norm(b, n), kl = 0;
    for (int i = 0; i < n; i++) {
        double lpa = (double)a[i] - la, lpb = (double)b[i] - lb;
        kl += exp(lpa) * (lpa - lpb);
    }
    return kl < 0 ? 0 : kl; /* rounding can give -1e-12 */
}

typedef struct stats {
    double nll_sum, nll_sq, kl_sum, kl_max;
    int64_t scored, top1_same;
} stats;

PB_CMD(perplexity) {
    const char *model = NULL, *text_path = NULL, *kl_base = NULL, *kl_model = NULL, *save_path = NULL;
    pb_kv_type kt = PB_KV_F16;
    long ctx = 256, batch = 0, threads = 0, max_chunks = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("perplexity", usage, argc, argv, &i, name, alias, val))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            printf("%s\n", usage);
            return 0;
        } else if (FLAG("--json", NULL, NULL) != 0) {
            if (r < 0) return 2;
            json = true;
        } else if (FLAG("--model", "-m", &v) != 0) {
            if (r < 0) return 2;
            if (!(model = cli_model_arg("perplexity", v))) return 1;
        } else if (FLAG("--file", "-f", &v) != 0) {
            if (r < 0) return 2;
            text_path = v;
        } else if (FLAG("--kl-base", NULL, &v) != 0) {
            if (r < 0) return 2;
            kl_base = v;
        } else if (FLAG("--kl-model", NULL, &v) != 0) {
            if (r < 0) return 2;
            if (!(kl_model = cli_model_arg("perplexity", v))) return 1;
        } else if (FLAG("--save-logits", NULL, &v) != 0) {
            if (r < 0) return 2;
            save_path = v;
        } else if (FLAG("--kv-type", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_kv("perplexity", v, &kt)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--ctx", "-c", &v) != 0) {
            if (r < 0 || !cli_parse_int("perplexity", a, v, 4, 1 << 20, &ctx)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--batch", "-b", &v) != 0) {
            if (r < 0 || !cli_parse_int("perplexity", a, v, 1, 1 << 20, &batch))
                return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--chunks", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int("perplexity", a, v, 1, 1L << 30, &max_chunks))
                return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--threads", "-t", &v) != 0) {
            if (r < 0 || !cli_parse_int("perplexity", a, v, 0, 1024, &threads))
                return r < 0 ? 2 : cli_usage_line(usage);
        } else
            return cli_usage_error("perplexity", usage, "unknown option '%s'", a);
#undef FLAG
    }
    if (!model || !text_path) return cli_usage_error("perplexity", usage, "-m MODEL and -f TEXT are required");
    if (kl_base && kl_model) return cli_usage_error("perplexity", usage, "use either --kl-base or --kl-model");
    if (ctx % 2) return cli_usage_error("perplexity", usage, "--ctx must be even (got %ld)", ctx);
    int nb = (int)(batch > 0 ? PB_MIN(batch, ctx) : ctx);
    cli_install_cleanup_handlers();

    int rc = 1;
    runner r = {0}, ref = {0};
    pb_pool *pool = NULL;
    char *text = NULL;
    size_t text_len = 0;
    int32_t *toks = NULL, *inp = NULL;
    float *base_row = NULL;
    FILE *base_f = NULL;
    pb_atomic_file af = {-1, NULL, NULL};
    bool af_open = false;
    stats st = {0};
    pb_status s;

    if (runner_open(&r, model, (int)ctx, nb, kt)) goto done;
    const pb_hparams *hp = pb_model_hparams(r.m);
    const int n_vocab = hp->n_vocab;
    if (kl_model) {
        if (runner_open(&ref, kl_model, (int)ctx, nb, kt)) goto done;
        if (pb_model_hparams(ref.m)->n_vocab != n_vocab) {
            cli_err("perplexity", "%s has %d tokens in its vocabulary, %s has %d: KL needs the same vocabulary",
                    kl_model, pb_model_hparams(ref.m)->n_vocab, model, n_vocab);
            goto done;
        }
    }
    int nth = threads > 0 ? (int)threads : pb_model_default_threads(r.m);
    if ((s = pb_pool_new(nth, &pool))) {
        rc = cli_fail("perplexity", s, "starting threads");
        goto done;
    }

    if ((s = pb_read_file(text_path, &text, &text_len))) {
        rc = cli_fail("perplexity", s, "reading the text");
        goto done;
    }
    const pb_vocab *voc = pb_model_vocab(r.m);
    int64_t n_tok = 0;
    toks = malloc(sizeof(int32_t) * (text_len + 1));
    if (!toks) {
        cli_err("perplexity", "out of memory for %zu tokens", text_len + 1);
        goto done;
    }
    s = pb_tokenize(voc, text, text_len, PB_TOK_PARSE_SPECIAL, toks, (int64_t)text_len + 1, &n_tok);
    if (s == PB_ERR_INVALID_ARG && n_tok > (int64_t)text_len + 1) { /* more tokens than bytes (a tiny vocabulary) */
        int32_t *more = realloc(toks, sizeof(int32_t) * (size_t)n_tok);
        if (!more) {
            cli_err("perplexity", "out of memory for %lld tokens", (long long)n_tok);
            goto done;
        }
        toks = more;
        s = pb_tokenize(voc, text, text_len, PB_TOK_PARSE_SPECIAL, toks, n_tok, &n_tok);
    }
    if (s) {
        rc = cli_fail("perplexity", s, "tokenizing the text");
        goto done;
    }
    int64_t n_chunks = n_tok / ctx;
    if (max_chunks > 0 && max_chunks < n_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) {
        cli_err("perplexity", "%s has %lld tokens, fewer than one chunk of --ctx %ld", text_path, (long long)n_tok,
                ctx);
        goto done;
    }
    const int first = (int)(ctx / 2);
    const int64_t n_scored = n_chunks * (ctx - first);
    if (ctx > hp->n_ctx_train && hp->n_ctx_train > 0)
        fprintf(stderr, "perplexity: note: --ctx %ld is longer than the model's training context %d\n", ctx,
                hp->n_ctx_train);

    if (kl_base) {
        /* a regular file only: a FIFO blocked the open for ever, a directory "had" 2^63 bytes by fseek/ftell and
         * failed with "short read" after the first chunk's work */
        struct stat kst;
        if (stat(kl_base, &kst) != 0) {
            cli_err("perplexity", "--kl-base %s: %s", kl_base, strerror(errno));
            goto done;
        }
        if (!S_ISREG(kst.st_mode)) {
            cli_err("perplexity", "--kl-base %s: not a regular file", kl_base);
            goto done;
        }
        base_f = fopen(kl_base, "rb");
        if (!base_f) {
            cli_err("perplexity", "cannot open --kl-base %s: %s", kl_base, strerror(errno));
            goto done;
        }
        long long have = (long long)kst.st_size;
        long long want = (long long)n_scored * n_vocab * 4;
        if (have < want) {
            cli_err("perplexity",
                    "--kl-base %s has %lld bytes; %lld chunks x %d scored positions x %d logits need %lld "
                    "(was it saved with the same --ctx and text?)",
                    kl_base, have, (long long)n_chunks, (int)(ctx - first), n_vocab, want);
            goto done;
        }
        base_row = malloc(sizeof(float) * (size_t)n_vocab);
        if (!base_row) goto done;
    }
    if (save_path) {
        if ((s = pb_atomic_open(save_path, &af))) {
            rc = cli_fail("perplexity", s, "creating --save-logits");
            goto done;
        }
        af_open = true;
    }

    inp = malloc(sizeof(int32_t) * (size_t)ctx);
    if (!inp) goto done;
    cli_progress prog;
    cli_progress_init(&prog, "perplexity");
    double t0 = pb_time_ms();
    const int32_t bos = pb_vocab_bos(voc);
    for (int64_t c = 0; c < n_chunks; c++) {
        const int32_t *chunk = toks + c * ctx;
        inp[0] = bos;
        memcpy(inp + 1, chunk, sizeof(int32_t) * (size_t)(ctx - 1));
        if ((s = pb_kv_truncate(r.kv, 0)) || (ref.kv && (s = pb_kv_truncate(ref.kv, 0)))) {
            rc = cli_fail("perplexity", s, "resetting the cache");
            goto done;
        }
        for (int p0 = 0; p0 < ctx; p0 += nb) {
            int n = (int)PB_MIN((long)nb, ctx - p0);
            if ((s = pb_forward(r.m, r.kv, r.fc, pool, inp + p0, n, r.logits, true, NULL)) ||
                (ref.m && (s = pb_forward(ref.m, ref.kv, ref.fc, pool, inp + p0, n, ref.logits, true, NULL)))) {
                rc = cli_fail("perplexity", s, "forward pass");
                goto done;
            }
            for (int j = 0; j < n; j++) {
                int p = p0 + j;
                if (p < first) continue;
                const float *row = r.logits + (size_t)j * n_vocab;
                double nll = log_norm(row, n_vocab) - (double)row[chunk[p]];
                st.nll_sum += nll;
                st.nll_sq += nll * nll;
                st.scored++;
                if (af_open && (s = pb_atomic_write(&af, row, sizeof(float) * (size_t)n_vocab))) {
                    rc = cli_fail("perplexity", s, "writing --save-logits");
                    goto done;
                }
                const float *base = NULL;
                if (ref.m) base = ref.logits + (size_t)j * n_vocab;
                if (base_f) {
                    if (fread(base_row, sizeof(float), (size_t)n_vocab, base_f) != (size_t)n_vocab) {
                        cli_err("perplexity", "--kl-base %s: short read", kl_base);
                        goto done;
                    }
                    base = base_row;
                }
                if (base) {
                    double kl = kl_rows(base, row, n_vocab);
                    st.kl_sum += kl;
                    if (kl > st.kl_max) st.kl_max = kl;
                    st.top1_same += argmax(base, n_vocab) == argmax(row, n_vocab);
                }
            }
        }
        cli_progress_update(&prog, (double)(c + 1), (double)n_chunks);
    }
    cli_progress_done(&prog);
    if (af_open) {
        af_open = false;
        if ((s = pb_atomic_commit(&af))) {
            rc = cli_fail("perplexity", s, "finishing --save-logits");
            goto done;
        }
    }
    double secs = (pb_time_ms() - t0) / 1000.0;
    double mean = st.nll_sum / (double)st.scored;
    double var = st.nll_sq / (double)st.scored - mean * mean;
    double ppl = exp(mean);
    double ppl_err = ppl * sqrt(var > 0 ? var / (double)st.scored : 0);
    bool has_kl = ref.m || base_f;
    if (json) {
        printf("{\"ppl\": %.6f, \"ppl_stderr\": %.6f, \"mean_nll\": %.8f, \"text_tokens\": %lld, \"ctx\": %ld, "
               "\"chunks\": %lld, \"scored\": %lld, \"seconds\": %.3f",
               ppl, ppl_err, mean, (long long)n_tok, ctx, (long long)n_chunks, (long long)st.scored, secs);
        if (has_kl)
            printf(", \"kl_mean\": %.8f, \"kl_max\": %.6f, \"top1_agree\": %.6f", st.kl_sum / (double)st.scored,
                   st.kl_max, (double)st.top1_same / (double)st.scored);
        printf("}\n");
    } else {
        printf("perplexity: %.4f +/- %.4f\n", ppl, ppl_err);
        printf("  %s on %s: %lld tokens; ctx %ld, %lld chunks, %lld tokens scored (second half of each chunk); "
               "%.1f s\n",
               model, text_path, (long long)n_tok, ctx, (long long)n_chunks, (long long)st.scored, secs);
        if (has_kl)
            printf("  KL(reference || model): mean %.6f, max %.4f; top-1 agreement %.2f%%\n",
                   st.kl_sum / (double)st.scored, st.kl_max, 100.0 * (double)st.top1_same / (double)st.scored);
    }
    rc = 0;
done:
    if (af_open) pb_atomic_abort(&af);
    if (base_f) fclose(base_f);
    free(base_row);
    free(inp);
    free(toks);
    free(text);
    pb_pool_free(pool);
    runner_free(&ref);
    runner_free(&r);
    return rc;
}
