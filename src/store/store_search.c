/* store_search.c -- retrieval: safe FTS5 query building, BM25 search, brute-force cosine search over
 * float16 embeddings, reciprocal rank fusion. Reads the database only. */
#include "store/store_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- query building ---------------------------------------------------------------------------- */

/* Words that carry no topic; dropped from queries so that OR-ranking is not dominated by them. */
static const char *const stop_words[] = {
    "a",     "about", "after", "all",   "also",  "am",    "an",    "and",   "any",   "are",   "as",    "at",
    "be",    "been",  "being", "but",   "by",    "can",   "could", "did",   "do",    "does",  "doing", "for",
    "from",  "get",   "gets",  "had",   "has",   "have",  "having", "he",   "her",   "here",  "him",   "his",
    "how",   "i",     "if",    "in",    "into",  "is",    "it",    "its",   "just",  "me",    "might", "more",
    "most",  "much",  "must",  "my",    "no",    "not",   "of",    "on",    "one",   "or",    "other", "our",
    "out",   "over",  "own",   "shall", "she",   "should", "so",   "some",  "such",  "than",  "that",  "the",
    "their", "them",  "then",  "there", "these", "they",  "this",  "those", "to",    "too",   "up",    "us",
    "use",   "used",  "using", "very",  "was",   "way",   "we",    "were",  "what",  "when",  "where", "which",
    "while", "who",   "whom",  "why",   "will",  "with",  "would", "you",   "your",  "yours", "want",  "need",
    "tell",  "know",  "there", "s",     "t",     NULL};

static bool is_stop(const char *w) {
    for (const char *const *s = stop_words; *s; s++)
        if (strcmp(*s, w) == 0) return true;
    return false;
}

static bool word_byte(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c >= 0x80;
}

#define MAX_TERMS 32
#define MAX_WORD 64

pb_status pb_store_fts_query(const char *text, char *buf, size_t cap, int *n_terms) {
    char words[MAX_TERMS * 2][MAX_WORD];
    bool stop[MAX_TERMS * 2];
    int n = 0, n_content = 0;
    *n_terms = 0;
    if (cap) buf[0] = 0;
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    while (*s && n < MAX_TERMS * 2) {
        while (*s && !word_byte(*s)) s++;
        size_t len = 0;
        char w[MAX_WORD];
        while (*s && word_byte(*s)) {
            if (len < MAX_WORD - 1) w[len++] = (char)(*s >= 'A' && *s <= 'Z' ? *s + 32 : *s);
            s++;
        }
        if (!len) break;
        /* a word cut at MAX_WORD must not end inside a UTF-8 sequence */
        size_t j = len;
        while (j > 0 && ((unsigned char)w[j - 1] & 0xc0) == 0x80) j--;
        if (j > 0 && (unsigned char)w[j - 1] >= 0xc0) {
            unsigned char lead = (unsigned char)w[j - 1];
            size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
            if (len - (j - 1) < want) len = j - 1;
        }
        if (!len) continue;
        w[len] = 0;
        bool dup = false;
        for (int i = 0; i < n; i++) dup |= strcmp(words[i], w) == 0;
        if (dup) continue;
        memcpy(words[n], w, len + 1);
        stop[n] = is_stop(w);
        n_content += !stop[n];
        n++;
    }
    size_t o = 0;
    int used = 0;
    for (int i = 0; i < n && used < MAX_TERMS; i++) {
        if (n_content > 0 && stop[i]) continue;
        size_t need = strlen(words[i]) + 2 + (used ? 4 : 0) + 1;
        if (o + need > cap) return pb_error(PB_ERR_INVALID_ARG, "fts query: buffer of %zu bytes too small", cap);
        o += (size_t)snprintf(buf + o, cap - o, "%s\"%s\"", used ? " OR " : "", words[i]);
        used++;
    }
    *n_terms = used;
    return PB_OK;
}

/* ---- hits -------------------------------------------------------------------------------------- */

void pb_store_hits_free(pb_store_hit *h, int n) {
    if (!h) return;
    for (int i = 0; i < n; i++) {
        free(h[i].path);
        free(h[i].title);
        free(h[i].heading);
        free(h[i].text);
    }
    free(h);
}

#define HIT_COLS                                                                                                      \
    "c.id, c.doc_id, d.path, d.title, c.heading, c.text, c.line_start, c.line_end, c.byte_start, c.byte_end, c.page," \
    " c.n_tokens"

/* Fills a hit from columns first..first+11 laid out as HIT_COLS. false when out of memory. */
static bool read_hit(sqlite3_stmt *q, int first, pb_store_hit *h) {
    memset(h, 0, sizeof *h);
    h->chunk_id = sqlite3_column_int64(q, first + 0);
    h->doc_id = sqlite3_column_int64(q, first + 1);
    h->path = pb_store_col_dup(q, first + 2);
    h->title = pb_store_col_dup(q, first + 3);
    h->heading = pb_store_col_dup(q, first + 4);
    h->text = pb_store_col_dup(q, first + 5);
    h->line_start = sqlite3_column_int64(q, first + 6);
    h->line_end = sqlite3_column_int64(q, first + 7);
    h->byte_start = (size_t)sqlite3_column_int64(q, first + 8);
    h->byte_end = (size_t)sqlite3_column_int64(q, first + 9);
    h->page = sqlite3_column_int(q, first + 10);
    h->n_tokens = sqlite3_column_int64(q, first + 11);
    return h->path && h->title && h->heading && h->text;
}

pb_status pb_store_search_bm25(pb_store *st, const char *query, int k, int max_per_doc, pb_store_hit **out,
                                int *n_out) {
    *out = NULL;
    *n_out = 0;
    if (k <= 0) return pb_error(PB_ERR_INVALID_ARG, "search: k = %d", k);
    char fts[MAX_TERMS * (MAX_WORD + 8) + 16];
    int n_terms;
    pb_status s = pb_store_fts_query(query, fts, sizeof fts, &n_terms);
    if (s || n_terms == 0) return s;
    sqlite3_stmt *q;
    /* The inner query lets FTS5 pick the top k by rank before any join. */
    s = pb_store_prepare(st,
                         "SELECT f.score, " HIT_COLS " FROM (SELECT rowid, -rank AS score FROM chunks_fts"
                         " WHERE chunks_fts MATCH ?1 AND rank MATCH 'bm25(2.0, 1.0)' ORDER BY rank LIMIT ?2) f"
                         " JOIN chunks c ON c.id = f.rowid JOIN documents d ON d.id = c.doc_id ORDER BY f.score DESC",
                         &q);
    if (s) return s;
    /* With a per-document cap, more candidates are ranked so that k distinct-enough hits remain. */
    int n_cand = max_per_doc > 0 ? k * 8 + 32 : k;
    sqlite3_bind_text(q, 1, fts, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 2, n_cand);
    pb_store_hit *h = pb_calloc((size_t)k, sizeof *h);
    if (!h) {
        sqlite3_finalize(q);
        return PB_ERR_NOMEM;
    }
    int n = 0, rc = SQLITE_DONE;
    while (n < k && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (max_per_doc > 0) {
            int64_t doc = sqlite3_column_int64(q, 2);
            int same = 0;
            for (int i = 0; i < n; i++) same += h[i].doc_id == doc;
            if (same >= max_per_doc) continue;
        }
        bool ok = read_hit(q, 1, &h[n]);
        h[n].score = sqlite3_column_double(q, 0);
        n++;
        if (!ok) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    if (n < k && rc != SQLITE_DONE && rc != SQLITE_ROW)
        s = rc == SQLITE_NOMEM ? pb_error(PB_ERR_NOMEM, "search: out of memory") : pb_store_sql_error(st, "search");
    sqlite3_finalize(q);
    if (s) {
        pb_store_hits_free(h, n);
        return s;
    }
    *out = h;
    *n_out = n;
    return PB_OK;
}

/* ---- vectors ----------------------------------------------------------------------------------- */

pb_status pb_store_search_vec(pb_store *st, const char *model, const float *qv, int dim, int k, pb_store_hit **out,
                              int *n_out) {
    *out = NULL;
    *n_out = 0;
    if (k <= 0 || dim <= 0) return pb_error(PB_ERR_INVALID_ARG, "vector search: k = %d, dim = %d", k, dim);
    if (st->version < 3) return pb_error(PB_ERR_UNSUPPORTED, "store: embeddings need schema version 3");
    double qn = 0;
    for (int i = 0; i < dim; i++) qn += (double)qv[i] * (double)qv[i];
    qn = sqrt(qn);
    if (qn == 0) return PB_OK;
    int64_t *ids = pb_calloc((size_t)k, sizeof *ids);
    double *best = pb_calloc((size_t)k, sizeof *best);
    if (!ids || !best) {
        free(ids);
        free(best);
        return PB_ERR_NOMEM;
    }
    sqlite3_stmt *q;
    pb_status s = pb_store_prepare(st, "SELECT chunk_id, dim, vec FROM embeddings WHERE model = ?", &q);
    if (s) {
        free(ids);
        free(best);
        return s;
    }
    sqlite3_bind_text(q, 1, model, -1, SQLITE_STATIC);
    int n = 0, rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int d = sqlite3_column_int(q, 1);
        const uint16_t *v = sqlite3_column_blob(q, 2);
        if (d != dim || !v || sqlite3_column_bytes(q, 2) != dim * 2) continue; /* another model's width */
        double dot = 0, vn = 0;
        for (int i = 0; i < dim; i++) {
            float x = pb_store_f16_to_f32(v[i]);
            dot += (double)x * (double)qv[i];
            vn += (double)x * (double)x;
        }
        double cos = vn > 0 ? dot / (qn * sqrt(vn)) : 0;
        /* insertion into the sorted top-k */
        int pos = n < k ? n : k;
        if (pos == k && cos <= best[k - 1]) continue;
        while (pos > 0 && best[pos - 1] < cos) {
            if (pos < k) best[pos] = best[pos - 1], ids[pos] = ids[pos - 1];
            pos--;
        }
        best[pos] = cos;
        ids[pos] = sqlite3_column_int64(q, 0);
        if (n < k) n++;
    }
    if (rc != SQLITE_DONE) s = pb_store_sql_error(st, "vector search");
    sqlite3_finalize(q);
    pb_store_hit *h = NULL;
    int nh = 0;
    if (!s && n > 0 && !(s = pb_store_prepare(st, "SELECT " HIT_COLS " FROM chunks c JOIN documents d ON d.id ="
                                                  " c.doc_id WHERE c.id = ?",
                                              &q))) {
        h = pb_calloc((size_t)n, sizeof *h);
        for (int i = 0; h && i < n; i++) {
            sqlite3_reset(q);
            sqlite3_bind_int64(q, 1, ids[i]);
            if (sqlite3_step(q) != SQLITE_ROW) continue;
            bool ok = read_hit(q, 0, &h[nh]);
            h[nh++].score = best[i];
            if (!ok) {
                s = pb_error(PB_ERR_NOMEM, "vector search: out of memory");
                break;
            }
        }
        if (!h) s = PB_ERR_NOMEM;
        sqlite3_finalize(q);
    }
    free(ids);
    free(best);
    if (s) {
        pb_store_hits_free(h, nh);
        return s;
    }
    *out = h;
    *n_out = nh;
    return PB_OK;
}

/* ---- fusion ------------------------------------------------------------------------------------ */

static int cmp_score_desc(const void *a, const void *b) {
    const pb_store_hit *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->chunk_id < y->chunk_id ? -1 : x->chunk_id > y->chunk_id;
}

pb_status pb_store_fuse_rrf(pb_store_hit *a, int na, pb_store_hit *b, int nb, int rrf_k, int k, pb_store_hit **out,
                            int *n_out) {
    *out = NULL;
    *n_out = 0;
    pb_store_hit *all = pb_calloc((size_t)(na + nb) + 1, sizeof *all);
    if (!all) {
        pb_store_hits_free(a, na);
        pb_store_hits_free(b, nb);
        return PB_ERR_NOMEM;
    }
    int n = 0;
    for (int list = 0; list < 2; list++) {
        pb_store_hit *h = list ? b : a;
        int nh = list ? nb : na;
        for (int r = 0; r < nh; r++) {
            double sc = 1.0 / (double)(rrf_k + r + 1);
            int j = 0;
            while (j < n && all[j].chunk_id != h[r].chunk_id) j++;
            if (j < n) {
                all[j].score += sc;
                free(h[r].path);
                free(h[r].title);
                free(h[r].heading);
                free(h[r].text);
            } else {
                all[n] = h[r];
                all[n++].score = sc;
            }
        }
    }
    free(a);
    free(b);
    qsort(all, (size_t)n, sizeof *all, cmp_score_desc);
    if (n > k) {
        for (int i = k; i < n; i++) {
            free(all[i].path);
            free(all[i].title);
            free(all[i].heading);
            free(all[i].text);
        }
        n = k;
    }
    *out = all;
    *n_out = n;
    return PB_OK;
}

void pb_store_format_location(const char *path, int64_t line_start, int64_t line_end, int page, char *buf,
                              size_t cap) {
    if (page > 0) snprintf(buf, cap, "%s (p. %d)", path, page);
    else if (line_start <= 0) snprintf(buf, cap, "%s", path);
    else if (line_end > line_start) snprintf(buf, cap, "%s:%lld-%lld", path, (long long)line_start, (long long)line_end);
    else snprintf(buf, cap, "%s:%lld", path, (long long)line_start);
}
