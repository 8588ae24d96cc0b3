/* serve_kb.c -- connects `serve --db/--faq` to the knowledge-hub store: grounded prompts with sources and
 * the FAQ fallback, behind the server's plain-C hooks (the server room never sees sqlite3.h). */
#include "cli.h"
#include "cli_store.h"
#include "server/server.h"
#include "store/store.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool cli_kb_hooks(const char *db_path, const char *faq_path, const pb_model *m, pb_server_hooks *hooks);

/* One database the server reads (--db or --faq). The path is looked at before each use: a file deleted, re-created by
 * an ingest or replaced by a rename (a backup restored) while the server runs is another file there, which the open
 * connection never sees (it keeps reading the old inode). */
typedef struct kb_file {
    const char *path; /* as given */
    pb_store *st;     /* NULL while the file at path cannot be read */
    dev_t dev;        /* the file st reads */
    ino_t ino;
    char note[1400]; /* what /health and a failed request say while st is not the file at path; "" when it is */
} kb_file;

typedef struct kb_ctx {
    pthread_mutex_t mu; /* one SQLite connection per database, used by one request at a time */
    kb_file kb, faq;
    pb_store_counter counter;
} kb_ctx;

static kb_ctx ctx = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Sets f->note, and says it in the log when it is news (not once per request). */
static void set_note(kb_file *f, const char *note) {
    if (strcmp(f->note, note) == 0) return;
    snprintf(f->note, sizeof f->note, "%s", note);
    if (*note) cli_err("serve", "note: %s", note);
}

/* Makes f->st the file now at f->path (under ctx.mu): one stat() per request; a new file is opened, the old connection
 * closed first (a WAL database's -shm index has the path's name, and one process must not hold it for two files). A
 * file that is gone keeps the one read so far, until another is there (an ingest re-creating it takes a while). */
static void refresh(kb_file *f) {
    struct stat sb;
    char note[sizeof f->note];
    if (stat(f->path, &sb) != 0) {
        snprintf(note, sizeof note, "'%s' is gone (%s): %s, until a new one is there", f->path, strerror(errno),
                 f->st ? "answering from the one read before" : "nothing to answer from");
        set_note(f, note);
        return;
    }
    if (f->st && sb.st_dev == f->dev && sb.st_ino == f->ino) {
        set_note(f, "");
        return;
    }
    bool had = f->st != NULL;
    pb_store_close(f->st);
    f->st = NULL;
    if (pb_store_open_readonly(f->path, &f->st) != PB_OK) {
        /* the store's messages name the file ("store 'kb.sqlite': not a knowledge base ..."): not twice */
        if (strstr(pb_last_error(), f->path))
            snprintf(note, sizeof note, "replaced by a file that cannot be read: %s", pb_last_error());
        else
            snprintf(note, sizeof note, "'%s' was replaced by a file that cannot be read: %s", f->path,
                     pb_last_error());
        set_note(f, note);
        return;
    }
    f->dev = sb.st_dev;
    f->ino = sb.st_ino;
    f->note[0] = 0;
    if (had) cli_err("serve", "note: '%s' was replaced by another file: reading the new one", f->path);
}

static bool kb_prompt(void *user, const char *question, int64_t budget, char **prompt_out, char **sources_out) {
    kb_ctx *c = user;
    *prompt_out = *sources_out = NULL;
    pthread_mutex_lock(&c->mu);
    refresh(&c->kb);
    if (!c->kb.st) {
        pthread_mutex_unlock(&c->mu);
        return false;
    }
    pb_store_hit *hits = NULL;
    int n_hits = 0;
    bool ok = pb_store_search_bm25(c->kb.st, question, 5, 1, &hits, &n_hits) == PB_OK;
    /* the sources' files: a stat each, so that a citation of text the file no longer has is marked */
    if (ok) ok = pb_store_hits_check(c->kb.st, hits, n_hits) == PB_OK;
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
        cJSON_AddStringToObject(o, "file_state", pb_store_doc_state_name(ct->state));
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
    pthread_mutex_lock(&c->mu);
    refresh(&c->faq);
    pb_store_faq_hit hit;
    memset(&hit, 0, sizeof hit);
    bool ok = c->faq.st && pb_store_faq_match(c->faq.st, question, &hit) == PB_OK;
    if (ok) snprintf(buf, cap, "%s", hit.answer);
    pb_store_faq_hit_free(&hit);
    pthread_mutex_unlock(&c->mu);
    return ok;
}

/* /health: the notes of the databases whose file is not the one read (gone, or replaced by an unreadable one). */
static bool kb_status(void *user, char *buf, size_t cap) {
    kb_ctx *c = user;
    pthread_mutex_lock(&c->mu);
    if (c->kb.path) refresh(&c->kb);
    if (c->faq.path) refresh(&c->faq);
    snprintf(buf, cap, "%s%s%s", c->kb.note, c->kb.note[0] && c->faq.note[0] ? "; " : "", c->faq.note);
    pthread_mutex_unlock(&c->mu);
    return buf[0] != 0;
}

/* Opens f at start-up (a failure there is the command's error) and records which file it is. */
static bool open_file(kb_file *f, const char *path, const char *hint) {
    struct stat sb;
    f->path = path;
    if (stat(path, &sb) == 0) f->dev = sb.st_dev, f->ino = sb.st_ino;
    return (f->st = cli_store_open_existing("serve", path, hint)) != NULL;
}

bool cli_kb_hooks(const char *db_path, const char *faq_path, const pb_model *m, pb_server_hooks *hooks) {
    if (db_path) {
        if (!open_file(&ctx.kb, db_path, "pocketbrain ingest --db FILE PATH...")) return false;
        pb_store_counter_init(&ctx.counter, pb_model_vocab(m));
        hooks->kb_prompt = kb_prompt;
        hooks->kb_user = &ctx;
    }
    if (faq_path) {
        if (!open_file(&ctx.faq, faq_path, "pocketbrain faq --db FILE add|import")) return false;
        hooks->faq_match = faq_match;
        hooks->faq_user = &ctx;
    }
    hooks->kb_status = kb_status;
    hooks->status_user = &ctx;
    return true;
}
