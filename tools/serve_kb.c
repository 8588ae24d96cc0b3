/* serve_kb.c -- connects `serve --db/--faq` to the knowledge-hub store: grounded prompts with sources and
 * the FAQ fallback, behind the server's plain-C hooks (the server room never sees sqlite3.h). */
#include "cli.h"
#include "cli_store.h"
#include "server/server.h"
#include "store/store.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

bool cli_kb_hooks(const char *db_path, const char *faq_path, const pb_model *m, pb_server_hooks *hooks);

typedef struct kb_ctx {
    pthread_mutex_t mu; /* one SQLite connection per database, used by one request at a time */
    pb_store *kb, *faq;
    pb_store_counter counter;
} kb_ctx;

static kb_ctx ctx = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool kb_prompt(void *user, const char *question, int64_t budget, char **prompt_out, char **sources_out) {
    kb_ctx *c = user;
    *prompt_out = *sources_out = NULL;
    if (!c->kb) return false;
    pthread_mutex_lock(&c->mu);
    pb_store_hit *hits = NULL;
    int n_hits = 0;
    bool ok = pb_store_search_bm25(c->kb, question, 5, 1, &hits, &n_hits) == PB_OK;
    pb_store_prompt pr;
    memset(&pr, 0, sizeof pr);
    if (ok) ok = pb_store_prompt_build(question, hits, n_hits, budget, pb_store_counter_fn, &c->counter, &pr) == PB_OK;
    pb_store_hits_free(hits, n_hits);
    pthread_mutex_unlock(&c->mu);
    if (!ok) return false;
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < pr.n_cites; i++) {
        const pb_store_citation *ct = &pr.cites[i];
        char loc[1200];
        pb_store_format_location(ct->path, ct->line_start, ct->line_end, ct->page, loc, sizeof loc);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "num", ct->num);
        cJSON_AddStringToObject(o, "source", ct->path ? ct->path : "");
        cJSON_AddStringToObject(o, "location", loc);
        cJSON_AddStringToObject(o, "title", ct->title ? ct->title : "");
        cJSON_AddItemToArray(arr, o);
    }
    *sources_out = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    *prompt_out = pr.text;
    pr.text = NULL;
    pb_store_prompt_free(&pr);
    return *prompt_out != NULL;
}

static bool faq_match(void *user, const char *question, char *buf, size_t cap) {
    kb_ctx *c = user;
    if (!c->faq) return false;
    pthread_mutex_lock(&c->mu);
    pb_store_faq_hit hit;
    memset(&hit, 0, sizeof hit);
    bool ok = pb_store_faq_match(c->faq, question, &hit) == PB_OK;
    if (ok) snprintf(buf, cap, "%s", hit.answer);
    pb_store_faq_hit_free(&hit);
    pthread_mutex_unlock(&c->mu);
    return ok;
}

bool cli_kb_hooks(const char *db_path, const char *faq_path, const pb_model *m, pb_server_hooks *hooks) {
    if (db_path) {
        if (!(ctx.kb = cli_store_open_existing("serve", db_path, "pocketbrain ingest --db FILE PATH..."))) return false;
        pb_store_counter_init(&ctx.counter, pb_model_vocab(m));
        hooks->kb_prompt = kb_prompt;
        hooks->kb_user = &ctx;
    }
    if (faq_path) {
        if (!(ctx.faq = cli_store_open_existing("serve", faq_path, "pocketbrain faq --db FILE add|import")))
            return false;
        hooks->faq_match = faq_match;
        hooks->faq_user = &ctx;
    }
    return true;
}
