/* store_fts.c -- the pb_cjk FTS5 tokenizer (a CJK character is a token) and its registration on each store
 * connection. No schema or queries here. */
#include "store/store_internal.h"

#include <stdlib.h>

/* FTS5's unicode61 tokenizer keeps a run of letters without spaces as one token, and Chinese and Japanese put no
 * spaces between words (Korean attaches particles to them): "我们今天学习中文" was one token, so "中文" was never
 * found. pb_cjk wraps a parent tokenizer ('pb_cjk porter unicode61 remove_diacritics 2': the arguments name the
 * parent and its arguments) and cuts the text before the parent sees it: every CJK character (pb_store_cjk_len:
 * Han, kana, Hangul syllables, fullwidth forms) is tokenized alone, the runs between them whole. Cutting the text
 * rather than the parent's tokens keeps the offsets exact (unicode61 folds and drops characters, porter rewrites
 * endings, so a token's text does not map back to bytes) and lets the parent fold each character as before
 * (fullwidth Ａ still matches ａ; CJK punctuation stays a separator).
 *
 * Single characters, not bigrams: FTS5 reads a quoted query word "中文" as the phrase 中 then 文, so a word of
 * any length matches exactly where its characters stand together, with one posting per character (bigrams
 * double the index and need the same split on the query side to match anything). */

typedef struct {
    fts5_tokenizer parent;      /* the parent's methods */
    Fts5Tokenizer *parent_inst; /* the parent made with the arguments after its name */
} cjk_tokenizer;

/* Passes the parent's tokens of one piece on, their offsets moved from the piece to the whole text. */
typedef struct {
    void *ctx;
    int (*emit)(void *ctx, int tflags, const char *token, int n_token, int start, int end);
    int base; /* offset of the piece in the text */
} cjk_piece;

static int piece_token(void *user, int tflags, const char *token, int n_token, int start, int end) {
    cjk_piece *p = user;
    return p->emit(p->ctx, tflags, token, n_token, p->base + start, p->base + end);
}

static int cjk_create(void *user, const char **argv, int argc, Fts5Tokenizer **out) {
    fts5_api *api = user;
    *out = NULL;
    cjk_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return SQLITE_NOMEM;
    void *parent_user = NULL;
    const char *parent = argc > 0 ? argv[0] : "unicode61";
    int rc = api->xFindTokenizer(api, parent, &parent_user, &t->parent);
    if (rc == SQLITE_OK)
        rc = t->parent.xCreate(parent_user, argc > 0 ? argv + 1 : NULL, argc > 0 ? argc - 1 : 0, &t->parent_inst);
    if (rc != SQLITE_OK) {
        free(t);
        return rc;
    }
    *out = (Fts5Tokenizer *)t;
    return SQLITE_OK;
}

static void cjk_delete(Fts5Tokenizer *tok) {
    cjk_tokenizer *t = (cjk_tokenizer *)tok;
    if (!t) return;
    if (t->parent_inst) t->parent.xDelete(t->parent_inst);
    free(t);
}

static int cjk_tokenize(Fts5Tokenizer *tok, void *ctx, int flags, const char *text, int n_text,
                        int (*emit)(void *ctx, int tflags, const char *token, int n_token, int start, int end)) {
    cjk_tokenizer *t = (cjk_tokenizer *)tok;
    cjk_piece p = {ctx, emit, 0};
    int run = 0, i = 0; /* run: start of the bytes not yet tokenized (no CJK in run..i) */
    while (i < n_text) {
        size_t k = (unsigned char)text[i] >= 0xE0 ? pb_store_cjk_len(text + i, (size_t)(n_text - i)) : 0;
        if (!k) { /* lead bytes >= 0xE0 are never continuation bytes: stepping by bytes is safe */
            i++;
            continue;
        }
        int rc;
        if (i > run) {
            p.base = run;
            if ((rc = t->parent.xTokenize(t->parent_inst, &p, flags, text + run, i - run, piece_token)) != SQLITE_OK)
                return rc;
        }
        p.base = i;
        if ((rc = t->parent.xTokenize(t->parent_inst, &p, flags, text + i, (int)k, piece_token)) != SQLITE_OK)
            return rc;
        i += (int)k;
        run = i;
    }
    if (n_text > run) {
        p.base = run;
        return t->parent.xTokenize(t->parent_inst, &p, flags, text + run, n_text - run, piece_token);
    }
    return SQLITE_OK;
}

pb_status pb_store_fts_register(pb_store *st) {
    /* the documented way to reach FTS5's API: SELECT fts5(?1) with a pointer bound as "fts5_api_ptr" */
    fts5_api *api = NULL;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(st->db, "SELECT fts5(?1)", -1, &q, NULL) != SQLITE_OK)
        return pb_store_sql_error(st, "this SQLite has no FTS5 (needed for search)");
    sqlite3_bind_pointer(q, 1, (void *)&api, "fts5_api_ptr", NULL);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return pb_store_sql_error(st, "looking up FTS5");
    if (!api || api->iVersion < 2)
        return pb_error(PB_ERR_UNSUPPORTED, "store '%s': this SQLite's FTS5 API (version %d) is too old", st->path,
                        api ? api->iVersion : 0);
    static fts5_tokenizer methods = {cjk_create, cjk_delete, cjk_tokenize};
    if ((rc = api->xCreateTokenizer(api, "pb_cjk", api, &methods, NULL)) != SQLITE_OK)
        return pb_error(rc == SQLITE_NOMEM ? PB_ERR_NOMEM : PB_ERR_INTERNAL,
                        "store '%s': cannot register the pb_cjk FTS5 tokenizer: %s", st->path, sqlite3_errstr(rc));
    return PB_OK;
}
