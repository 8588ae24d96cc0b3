/* cmd_ask.c -- `pocketbrain ask`: retrieve chunks from a knowledge base, fit them into the model's context,
 * generate an answer grounded in them with numbered citations, and fall back to the FAQ when generation
 * fails or is too slow. Retrieval, prompt and citation logic live in src/store; this file wires the model. */
#include "cli.h"
#include "cli_common.h"
#include "library.h"
#include "cli_common.h"
#include "cli_store.h"
#include "gguf/gguf.h"
#include "store/store.h"
#include "store/store_embed.h"
#include "tokenizer/vocab.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
    "pocketbrain ask --db KB.sqlite [-m MODEL.gguf] \"question\" [-k N] [--ctx N] [--max-tokens N]\n"
    "                       [--json] [--dry-run] [--faq FAQ.sqlite] [--fallback-after SECONDS]\n"
    "                       [--preset precise|balanced|creative|code] [--seed N] [--embed-model M.gguf]\n"
    "  Answers from the k best chunks (default 6) with citations [n] mapped to files and lines. Without -m\n"
    "  the default model is used. The context is --ctx (default 4096) or the model's trained context when\n"
    "  smaller; the answer gets --max-tokens (default: a quarter of the context, at most 512), the chat\n"
    "  markers what they take, and the sources all the rest (as many of the k as fit; the last may be cut).\n"
    "  When generation fails, or no token arrives within --fallback-after seconds (default 60, 0 = never),\n"
    "  the best FAQ match (from --faq, else from KB itself) is printed, marked as a fallback.\n"
    "  --dry-run prints the prompt and the citation table without generating: tokens are counted with the\n"
    "  model's tokenizer (its vocabulary only is read) and the budget is the one a real run would use.";

/* ---- context budget ------------------------------------------------------------------------------ */

/* The trained context of a GGUF model read from its metadata (no weights loaded); 0 when unknown. */
static int gguf_ctx_train(const char *path) {
    pb_gguf *g = NULL;
    if (pb_gguf_open(path, &g)) return 0;
    pb_gguf_str arch;
    uint32_t v = 0;
    char key[96];
    if (pb_gguf_get_str(g, "general.architecture", &arch) == PB_OK && arch.len < 64) {
        snprintf(key, sizeof key, "%.*s.context_length", (int)arch.len, arch.ptr);
        if (pb_gguf_get_u32(g, key, &v)) v = 0;
    }
    pb_gguf_close(g);
    return v > (uint32_t)INT32_MAX ? 0 : (int)v;
}

/* Exact tokens of the prompt as the session will see it: the user turn with its chat markers and the
 * opening of the model's turn (what pb_session_chat feeds). -1 when it cannot be counted. */
static int64_t chat_tokens(const pb_vocab *v, const char *user_text) {
    if (!v) return -1;
    pb_chat_msg msg = {"user", user_text};
    int64_t n = 0;
    pb_status s = pb_chat_tokenize_vocab(v, &msg, 1, true, NULL, 0, &n); /* cap 0: counts only */
    return s == PB_OK || (s == PB_ERR_INVALID_ARG && n > 0) ? n : -1;
}

/* ---- generation with a first-token watchdog ---------------------------------------------------- */

typedef struct {
    pb_session *session;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool first_token, done, fired;
    double seconds;
    /* answer text */
    char *text;
    size_t len, cap;
    bool stream; /* print pieces as they come */
} gen_ctx;

static void *watchdog(void *arg) {
    gen_ctx *g = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double whole = (double)(long)g->seconds;
    until.tv_sec += (time_t)whole;
    until.tv_nsec += (long)((g->seconds - whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&g->mu);
    while (!g->first_token && !g->done) {
        if (pthread_cond_timedwait(&g->cv, &g->mu, &until) != 0) {
            if (!g->first_token && !g->done) {
                g->fired = true;
                pb_session_cancel(g->session);
            }
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static bool on_piece(const char *piece, size_t len, void *user) {
    gen_ctx *g = user;
    pthread_mutex_lock(&g->mu);
    if (!g->first_token) {
        g->first_token = true;
        pthread_cond_signal(&g->cv);
    }
    bool fired = g->fired;
    pthread_mutex_unlock(&g->mu);
    if (fired) return false;
    if (g->len + len + 1 > g->cap) {
        size_t nc = g->cap ? g->cap * 2 : 4096;
        while (nc < g->len + len + 1) nc *= 2;
        char *nt = realloc(g->text, nc);
        if (!nt) return false;
        g->text = nt;
        g->cap = nc;
    }
    memcpy(g->text + g->len, piece, len);
    g->len += len;
    g->text[g->len] = 0;
    if (g->stream) {
        fwrite(piece, 1, len, stdout);
        cli_flush_stdout();
    }
    return true;
}

/* ---- output ------------------------------------------------------------------------------------ */

/* The sources table; a file changed or gone since it was ingested is marked, and one note on stderr says how to
 * bring it up to date. */
static void print_sources(const char *db, const pb_store_prompt *pr, const bool *used, int n_used) {
    printf("\n\nSources%s:\n", n_used ? "" : " (retrieved; the answer cited none)");
    const char **paths = calloc((size_t)pr->n_cites + 1, sizeof *paths);
    pb_store_doc_state *states = calloc((size_t)pr->n_cites + 1, sizeof *states);
    int n_shown = 0;
    for (int i = 0; i < pr->n_cites; i++) {
        if (n_used && !used[i]) continue;
        const pb_store_citation *c = &pr->cites[i];
        char loc[4200];
        pb_store_format_location(c->path, c->line_start, c->line_end, c->page, loc, sizeof loc);
        printf("[%d] %s  (%s)%s%s\n", c->num, loc, c->heading, c->state ? "  -- " : "",
               pb_store_doc_state_text(c->state));
        if (paths && states) paths[n_shown] = c->path, states[n_shown++] = c->state;
    }
    cli_flush_stdout(); /* the table before the note under it */
    if (paths && states) cli_store_stale_note("ask", db, paths, states, n_shown);
    free(paths);
    free(states);
}

static cJSON *json_cites(const pb_store_prompt *pr, const bool *used) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < pr->n_cites; i++) {
        const pb_store_citation *c = &pr->cites[i];
        char loc[4200];
        pb_store_format_location(c->path, c->line_start, c->line_end, c->page, loc, sizeof loc);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "n", c->num);
        cJSON_AddStringToObject(o, "path", c->path);
        cJSON_AddStringToObject(o, "location", loc);
        cJSON_AddStringToObject(o, "file_state", pb_store_doc_state_name(c->state));
        cJSON_AddNumberToObject(o, "line_start", (double)c->line_start);
        cJSON_AddNumberToObject(o, "line_end", (double)c->line_end);
        cJSON_AddNumberToObject(o, "page", c->page);
        cJSON_AddStringToObject(o, "heading", c->heading);
        cJSON_AddNumberToObject(o, "chunk_id", (double)c->chunk_id);
        cJSON_AddBoolToObject(o, "cited", used ? used[i] : false);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static void json_print(cJSON *o) { cli_json_print(o, false); }

/* Prints the FAQ fallback; returns the exit status (0 answered, 1 nothing to fall back on). */
static int fallback(const char *faq_db, pb_store *kb, const char *question, const char *reason, bool json,
                    const pb_store_prompt *pr) {
    pb_store *faq = kb;
    if (faq_db && !(faq = cli_store_open_existing("ask", faq_db, "pocketbrain faq --db FILE add|import")))
        faq = NULL; /* the message is printed; the answer below says there was nothing to fall back on */
    char *text = NULL;
    pb_status s = faq ? pb_store_faq_fallback(faq, question, reason, &text) : PB_ERR_NOT_FOUND;
    if (faq && faq != kb) pb_store_close(faq);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "question", question);
        cJSON_AddBoolToObject(o, "fallback", true);
        cJSON_AddStringToObject(o, "fallback_reason", reason);
        if (text)
            cJSON_AddStringToObject(o, "answer", text);
        else
            cJSON_AddNullToObject(o, "answer");
        if (pr) cJSON_AddItemToObject(o, "citations", json_cites(pr, NULL));
        json_print(o);
    } else if (text) {
        printf("%s\n", text);
    }
    free(text);
    if (s) {
        cli_err("ask", "%s, and the FAQ has no match for the question", reason);
        return 1;
    }
    return 0;
}

PB_CMD(ask) {
    const char *db = NULL, *model_path = NULL, *question = NULL, *faq_db = NULL, *preset = NULL, *embed = NULL;
    long k = 6, n_ctx = 4096, max_tokens = 512;
    uint64_t seed = 0;
    bool seed_given = false;
    double fallback_after = 60;
    bool json = false, dry = false, max_tokens_given = false;
    bool ended = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("ask", usage, argc, argv, &i, name, alias, val))
        const int op = cli_operand(a, &ended); /* after "--" every argument, a question starting with '-' too */
        if (op < 0) continue;
        if (op) {
            if (question) return cli_usage_error("ask", usage, "one question only (quote it): unexpected '%s'", a);
            question = a;
        } else if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            puts(usage);
            return 0;
        } else if (FLAG("--db", NULL, &v) != 0) {
            if (r < 0) return 2;
            db = v;
        } else if (FLAG("--model", "-m", &v) != 0) {
            if (r < 0) return 2;
            if (!(model_path = cli_model_arg("ask", v))) return 1;
        } else if (FLAG("--faq", NULL, &v) != 0) {
            if (r < 0) return 2;
            faq_db = v;
        } else if (FLAG("--preset", NULL, &v) != 0) {
            if (r < 0) return 2;
            preset = v;
        } else if (FLAG("--embed-model", NULL, &v) != 0) {
            if (r < 0) return 2;
            if (!(embed = cli_model_arg("ask", v))) return 1;
        } else if (FLAG("-k", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int("ask", a, v, 1, 100, &k)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--ctx", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int("ask", a, v, 256, 1 << 20, &n_ctx)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--max-tokens", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int("ask", a, v, 16, 1 << 16, &max_tokens))
                return r < 0 ? 2 : cli_usage_line(usage);
            max_tokens_given = true;
        } else if (FLAG("--seed", NULL, &v) != 0) { /* run's range: 0..2^64-1 (it was 0..2^31-1 here) */
            if (r < 0 || !cli_parse_u64("ask", a, v, &seed)) return r < 0 ? 2 : cli_usage_line(usage);
            seed_given = true;
        } else if (FLAG("--fallback-after", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_float("ask", a, v, 0, 86400, &fallback_after))
                return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--json", NULL, NULL) != 0) {
            if (r < 0) return 2;
            json = true;
        } else if (FLAG("--dry-run", NULL, NULL) != 0) {
            if (r < 0) return 2;
            dry = true;
        } else
            return cli_usage_error("ask", usage, "unknown option '%s'", a);
#undef FLAG
    }
    if (!db) return cli_usage_error("ask", usage, "--db KB.sqlite is required");
    if (!question) return cli_usage_error("ask", usage, "no question");
    pb_sampler_params sp = pb_sampler_preset(PB_PRESET_PRECISE);
    if (preset) {
        pb_preset pr;
        if (pb_preset_from_name(preset, &pr)) return cli_usage_error("ask", usage, "unknown preset '%s'", preset);
        sp = pb_sampler_preset(pr);
    }
    if (seed_given) sp.seed = seed;
    pb_store *st = cli_store_open_existing("ask", db, "pocketbrain ingest --db FILE PATH...");
    if (!st) return 1;
    pb_status s;

    /* 1. retrieve (two chunks per document at most: neighbours add context, one file cannot crowd out
     *    the others) */
    pb_store_hit *hits = NULL;
    int n_hits = 0;
    s = pb_store_search_bm25(st, question, (int)k, 2, &hits, &n_hits);
    if (!s && embed) {
        pb_store_hit *vh = NULL;
        int nv = 0;
        s = pb_store_embed_search(st, embed, question, (int)k, &vh, &nv);
        if (!s)
            s = pb_store_fuse_rrf(hits, n_hits, vh, nv, 60, (int)k, &hits, &n_hits);
        else
            pb_store_hits_free(hits, n_hits), hits = NULL, n_hits = 0;
    }
    if (!s) s = pb_store_hits_check(st, hits, n_hits); /* the sources' files: changed or gone since ingest */
    if (s) {
        pb_store_hits_free(hits, n_hits);
        pb_store_close(st);
        return cli_fail("ask", s, "search");
    }

    /* 2. the model (its tokenizer counts the budget; a dry run reads only its vocabulary and metadata) */
    pb_model *model = NULL;
    pb_vocab *dry_vocab = NULL;
    char reason[1200] = "";
    if (!model_path) model_path = cli_default_model();
    int ctx_train = 0;
    if (!model_path) {
        if (!dry) snprintf(reason, sizeof reason, "no model (give -m MODEL.gguf or set PB_MODEL)");
    } else if (dry) {
        if (pb_vocab_open(model_path, &dry_vocab) == PB_OK)
            ctx_train = gguf_ctx_train(model_path);
        else
            cli_err("ask", "note: no tokenizer from '%s' (%s): counting with the estimate", model_path,
                    pb_last_error());
    } else {
        pb_model_params mp = pb_model_default_params();
        mp.pack_cache_dir = cli_pack_cache_dir();
        mp.pack_cache_background = true;
        if ((s = pb_model_open(model_path, &mp, &model)))
            snprintf(reason, sizeof reason, "model '%s' failed to load: %s", model_path, pb_last_error());
        else {
            pb_model_info info;
            if (pb_model_get_info(model, &info) == PB_OK) ctx_train = info.n_ctx_train;
        }
    }
    const pb_vocab *vocab = model ? pb_model_vocab(model) : dry_vocab;
    if (ctx_train > 0 && ctx_train < n_ctx) n_ctx = ctx_train;
    /* The answer's share: as asked, else a quarter of the context (at most 512, at least 16). */
    if (!max_tokens_given) max_tokens = PB_MAX(16, PB_MIN(512, n_ctx / 4));
    int64_t overhead = chat_tokens(vocab, "");
    if (overhead < 0) overhead = 64; /* no tokenizer: markers and slack, estimated */
    int64_t budget = n_ctx - max_tokens - overhead;
    if (budget < 64 && !reason[0]) {
        pb_store_hits_free(hits, n_hits);
        pb_vocab_free(dry_vocab);
        pb_model_close(model);
        pb_store_close(st);
        return cli_usage_error("ask", usage,
                               "--max-tokens %ld leaves %lld tokens for the question and sources in a context of %ld"
                               " (%lld go to chat markers); lower --max-tokens or raise --ctx",
                               max_tokens, (long long)PB_MAX(budget, 0), n_ctx, (long long)overhead);
    }
    pb_store_counter counter;
    pb_store_counter_init(&counter, vocab);
    pb_store_prompt pr;
    memset(&pr, 0, sizeof pr);
    int64_t prompt_tokens = -1;
    /* Pieces are counted one by one; the whole prompt can tokenize a little differently, so check the
     * exact total and shrink the budget by any excess (a couple of rounds at most). */
    for (int round = 0; round < 4 && !reason[0]; round++) {
        pb_store_prompt_free(&pr);
        memset(&pr, 0, sizeof pr);
        if (budget < 64 ||
            (s = pb_store_prompt_build(question, hits, n_hits, budget, pb_store_counter_fn, &counter, &pr))) {
            snprintf(reason, sizeof reason, "the question does not fit the context of %ld tokens: %s", n_ctx,
                     budget < 64 ? "no room left" : pb_last_error());
            break;
        }
        prompt_tokens = chat_tokens(vocab, pr.text);
        if (prompt_tokens < 0) {
            prompt_tokens = pr.n_tokens + overhead;
            break;
        }
        int64_t excess = prompt_tokens + max_tokens - n_ctx;
        if (excess <= 0) break;
        budget -= excess + 8;
    }
    pb_store_hits_free(hits, n_hits);
    hits = NULL;
    int rc = 0;
    if (dry) {
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "question", question);
            cJSON_AddStringToObject(o, "prompt", pr.text ? pr.text : "");
            cJSON_AddNumberToObject(o, "prompt_tokens", (double)prompt_tokens);
            cJSON_AddStringToObject(o, "counted_by", vocab ? "tokenizer" : "estimate");
            cJSON_AddNumberToObject(o, "n_ctx", (double)n_ctx);
            cJSON_AddNumberToObject(o, "max_tokens", (double)max_tokens);
            cJSON_AddNumberToObject(o, "sources", pr.n_cites);
            cJSON_AddItemToObject(o, "citations", json_cites(&pr, NULL));
            json_print(o);
        } else {
            printf("%s\n(%lld prompt tokens by %s, with chat markers; context %ld = prompt budget %lld + "
                   "markers %lld + answer %ld; %d source(s))",
                   pr.text ? pr.text : "", (long long)prompt_tokens,
                   vocab ? "the model's tokenizer" : "the estimate ceil(words*1.3)", n_ctx, (long long)budget,
                   (long long)overhead, max_tokens, pr.n_cites);
            print_sources(db, &pr, NULL, 0);
        }
        rc = reason[0] ? 1 : 0;
        if (reason[0]) cli_err("ask", "%s", reason);
        goto done;
    }
    if (reason[0]) {
        rc = fallback(faq_db, st, question, reason, json, pr.text ? &pr : NULL);
        goto done;
    }
    if (pr.n_cites == 0) {
        /* nothing retrieved (or no room for it): the model would only guess; the FAQ may still know */
        rc = fallback(faq_db, st, question,
                      n_hits ? "no room for any source in the context (raise --ctx or lower --max-tokens)"
                             : "no document in the knowledge base matches the question",
                      json, NULL);
        goto done;
    }

    /* 3. generate, with the first-token watchdog */
    pb_session_params spar = pb_session_default_params();
    spar.n_ctx = (int)n_ctx;
    pb_session *session = NULL;
    if ((s = pb_session_new(model, &spar, &session))) {
        snprintf(reason, sizeof reason, "%s", cli_last_error_as("session"));
        rc = fallback(faq_db, st, question, reason, json, &pr);
        goto done;
    }
    gen_ctx g;
    memset(&g, 0, sizeof g);
    g.session = session;
    g.seconds = fallback_after;
    g.stream = !json;
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    pthread_t wd;
    bool have_wd = fallback_after > 0 && pthread_create(&wd, NULL, watchdog, &g) == 0;
    pb_gen_params gp = pb_gen_default_params();
    gp.sampler = sp;
    gp.max_tokens = (int)max_tokens;
    pb_gen_stats stats;
    memset(&stats, 0, sizeof stats);
    s = pb_session_chat(session, NULL, pr.text, &gp, on_piece, &g, &stats);
    pthread_mutex_lock(&g.mu);
    g.done = true;
    pthread_cond_signal(&g.cv);
    pthread_mutex_unlock(&g.mu);
    if (have_wd) pthread_join(wd, NULL);
    if (g.fired) {
        snprintf(reason, sizeof reason, "no token from the model within %g s", fallback_after);
    } else if (s) {
        snprintf(reason, sizeof reason, "generation failed: %s", pb_last_error());
    } else if (g.len == 0) {
        snprintf(reason, sizeof reason, "the model gave an empty answer");
    }
    bool *used = calloc((size_t)pr.n_cites + 1, sizeof *used);
    int n_invalid = 0, n_used = used && g.text ? pb_store_cites_used(g.text, pr.n_cites, used, &n_invalid) : 0;
    if (reason[0] && g.len == 0) {
        rc = fallback(faq_db, st, question, reason, json, &pr);
    } else if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "question", question);
        cJSON_AddStringToObject(o, "answer", g.text ? g.text : "");
        cJSON_AddBoolToObject(o, "fallback", false);
        if (reason[0]) cJSON_AddStringToObject(o, "error", reason);
        cJSON_AddItemToObject(o, "citations", json_cites(&pr, used));
        cJSON_AddNumberToObject(o, "invalid_citations", n_invalid);
        cJSON_AddNumberToObject(o, "prompt_tokens", (double)stats.n_prompt);
        cJSON_AddNumberToObject(o, "generated_tokens", (double)stats.n_generated);
        cJSON_AddNumberToObject(o, "first_token_ms", stats.t_first_token_ms);
        cJSON_AddStringToObject(o, "stop_reason", pb_stop_reason_name(stats.stop_reason));
        json_print(o);
        rc = reason[0] ? 1 : 0;
    } else {
        if (reason[0]) printf("\n[%s]", reason);
        print_sources(db, &pr, used, n_used);
        if (n_invalid) printf("(the answer also cited %d number(s) that match no source)\n", n_invalid);
        rc = reason[0] ? 1 : 0;
    }
    free(used);
    free(g.text);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
    pb_session_free(session);
done:
    pb_store_prompt_free(&pr);
    pb_store_counter_deinit(&counter);
    pb_vocab_free(dry_vocab);
    pb_model_close(model);
    pb_store_close(st);
    return rc;
}
