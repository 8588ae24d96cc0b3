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
    "a",     "about", "after", "all",   "also",  "am",     "an",     "and",   "any",  "are",   "as",    "at",
    "be",    "been",  "being", "but",   "by",    "can",    "could",  "did",   "do",   "does",  "doing", "for",
    "from",  "get",   "gets",  "had",   "has",   "have",   "having", "he",    "her",  "here",  "him",   "his",
    "how",   "i",     "if",    "in",    "into",  "is",     "it",     "its",   "just", "me",    "might", "more",
    "most",  "much",  "must",  "my",    "no",    "not",    "of",     "on",    "one",  "or",    "other", "our",
    "out",   "over",  "own",   "shall", "she",   "should", "so",     "some",  "such", "than",  "that",  "the",
    "their", "them",  "then",  "there", "these", "they",   "this",   "those", "to",   "too",   "up",    "us",
    "use",   "used",  "using", "very",  "was",   "way",    "we",     "were",  "what", "when",  "where", "which",
    "while", "who",   "whom",  "why",   "will",  "with",   "would",  "you",   "your", "yours", "want",  "need",
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
#define MAX_WORD  64

typedef struct {
    char w[MAX_TERMS][MAX_WORD];
    int n;
} terms;

/* Bytes of the CJK character at s (NUL-terminated), 0 when none starts there or it is CJK punctuation. */
static size_t cjk_char(const unsigned char *s) {
    return pb_store_cjk_len((const char *)s, strnlen((const char *)s, 4));
}

/* CJK punctuation separates words, as it does for FTS5's unicode61: U+3000-U+303F but the letters 々 〆 〇, and the
 * fullwidth forms of ASCII punctuation. Bytes of the punctuation character at s, or 0. */
static size_t cjk_punct(const unsigned char *s) {
    if (cjk_char(s) != 3) return 0;
    uint32_t cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3Fu);
    bool p = (cp >= 0x3000 && cp <= 0x303F && (cp < 0x3005 || cp > 0x3007)) || (cp >= 0xFF01 && cp <= 0xFF0F) ||
             (cp >= 0xFF1A && cp <= 0xFF20) || (cp >= 0xFF3B && cp <= 0xFF40) || (cp >= 0xFF5B && cp <= 0xFF65);
    return p ? 3 : 0;
}

/* Words of the user's text: lowercased, deduplicated, stop words dropped unless nothing else is left.
 * Chinese and Japanese put no spaces between words and the index holds one token per CJK character (store_fts.c),
 * so a run of CJK characters becomes its overlapping pairs ("学习中文" -> 学习 习中 中文; a lone character stays
 * one): each pair is a two-character phrase, and OR-ranking them finds the words of a question written without
 * spaces wherever they stand, as for English words. */
static void extract_terms(const char *text, terms *t) {
    char words[MAX_TERMS * 2][MAX_WORD];
    bool stop[MAX_TERMS * 2];
    int n = 0, n_content = 0;
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    while (*s && n < MAX_TERMS * 2) {
        for (size_t p;;) {
            if (*s && !word_byte(*s))
                s++;
            else if (*s && (p = cjk_punct(s)) > 0)
                s += p;
            else
                break;
        }
        size_t len = 0, k;
        char w[MAX_WORD];
        if ((k = cjk_char(s)) > 0) {
            memcpy(w, s, k);
            len = k;
            s += k;
            size_t k2 = cjk_punct(s) ? 0 : cjk_char(s);
            if (k2) { /* a pair; the next pair starts at its second character unless that one ends the run */
                memcpy(w + k, s, k2);
                len += k2;
                if (!cjk_char(s + k2) || cjk_punct(s + k2)) s += k2;
            }
        } else {
            while (*s && word_byte(*s) && !cjk_char(s)) {
                if (len < MAX_WORD - 1) w[len++] = (char)(*s >= 'A' && *s <= 'Z' ? *s + 32 : *s);
                s++;
            }
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
    t->n = 0;
    for (int i = 0; i < n && t->n < MAX_TERMS; i++)
        if (!(n_content > 0 && stop[i])) memcpy(t->w[t->n++], words[i], MAX_WORD);
}

/* Each kept term in double quotes (FTS5 reads the inside as a plain phrase), joined with OR. */
static pb_status build_query(const terms *t, const bool *keep, char *buf, size_t cap, int *n_terms) {
    size_t o = 0;
    int used = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; i < t->n; i++) {
        if (keep && !keep[i]) continue;
        size_t need = strlen(t->w[i]) + 2 + (used ? 4 : 0) + 1;
        if (o + need > cap) return pb_error(PB_ERR_INVALID_ARG, "fts query: buffer of %zu bytes too small", cap);
        o += (size_t)snprintf(buf + o, cap - o, "%s\"%s\"", used ? " OR " : "", t->w[i]);
        used++;
    }
    *n_terms = used;
    return PB_OK;
}

pb_status pb_store_fts_query(const char *text, char *buf, size_t cap, int *n_terms) {
    terms t;
    extract_terms(text, &t);
    return build_query(&t, NULL, buf, cap, n_terms);
}

/* Terms that occur in more than this share of the chunks are dropped from BM25 queries: their IDF is
 * below ln(7/3) ~ 0.85 (topical terms score 5-10), yet each costs a scan of a posting list that covers
 * a third of the index -- the main cost of a search on a large knowledge base. */
#define COMMON_SHARE 0.30

typedef struct {
    bool keep[MAX_TERMS];
    char stem[MAX_TERMS][MAX_WORD * 2]; /* FTS5's token for a single-token word */
    int n_stems[MAX_TERMS];             /* tokens per word (2+: a phrase such as get_current_dir_name) */
    int64_t df[MAX_TERMS];              /* chunks containing the token (single-token words) */
    bool have;                          /* statistics were looked up */
} term_stats;

/* Drops the cached chunk count and row lengths when another connection committed since they were read: this
 * connection's own writes drop them at once (pb_store_invalidate), but a long-lived reader (serve --db) never saw an
 * ingest that ran beside it, so the C scorer ignored every chunk added since (ids past its cached row lengths): a new
 * or edited document was not found until a restart. PRAGMA data_version changes exactly on others' commits. */
static pb_status forget_if_changed(pb_store *st) {
    int64_t v = 0;
    pb_status s = pb_store_query_int(st, "PRAGMA data_version", &v);
    if (s) return s;
    if (v != st->data_version) {
        pb_store_invalidate(st);
        st->data_version = v;
    }
    return PB_OK;
}

/* Document frequencies come from fts5vocab; query words are stemmed by FTS5 itself (a scratch FTS5 table
 * with the same tokenizer), so the lookup sees exactly the indexed terms. Marks common terms as dropped. */
static pb_status get_term_stats(pb_store *st, const terms *t, term_stats *ts) {
    memset(ts, 0, sizeof *ts);
    for (int i = 0; i < t->n; i++) ts->keep[i] = true;
    pb_status s;
    if (!st->vocab_ready) {
        if ((s = pb_store_exec(st, "CREATE VIRTUAL TABLE IF NOT EXISTS temp.pb_chunks_vocab USING"
                                   " fts5vocab(main, chunks_fts, 'row');"
                                   "CREATE VIRTUAL TABLE IF NOT EXISTS temp.pb_chunks_inst USING"
                                   " fts5vocab(main, chunks_fts, 'instance');"
                                   "CREATE VIRTUAL TABLE IF NOT EXISTS temp.pb_stem USING"
                                   " fts5(w, tokenize='" PB_STORE_FTS_TOKENIZE "');"
                                   "CREATE VIRTUAL TABLE IF NOT EXISTS temp.pb_stem_v USING"
                                   " fts5vocab(temp, pb_stem, 'instance');")))
            return s;
        st->vocab_ready = true;
    }
    if ((s = forget_if_changed(st))) return s;
    if (st->n_chunks_cached < 0 && (s = pb_store_query_int(st, "SELECT count(*) FROM chunks", &st->n_chunks_cached)))
        return s;
    if (st->n_chunks_cached < 50) return PB_OK; /* small bases: FTS5 ranks them fast enough */
    sqlite3_stmt *ins = NULL, *stems = NULL, *df = NULL;
    sqlite3_stmt *del = NULL;
    if ((s = pb_store_prepare(st, "DELETE FROM temp.pb_stem", &del))) return s;
    int drc = sqlite3_step(del);
    sqlite3_finalize(del);
    if (drc != SQLITE_DONE) return pb_store_sql_error(st, "reset query stems");
    if ((s = pb_store_prepare(st, "INSERT INTO temp.pb_stem(rowid, w) VALUES (?, ?)", &ins)) ||
        (s = pb_store_prepare(st, "SELECT doc, term FROM temp.pb_stem_v", &stems)) ||
        (s = pb_store_prepare(st, "SELECT doc FROM temp.pb_chunks_vocab WHERE term = ?", &df)))
        goto out;
    for (int i = 0; i < t->n; i++) {
        sqlite3_reset(ins);
        sqlite3_bind_int(ins, 1, i);
        sqlite3_bind_text(ins, 2, t->w[i], -1, SQLITE_STATIC);
        if (sqlite3_step(ins) != SQLITE_DONE) {
            s = pb_store_sql_error(st, "stem query terms");
            goto out;
        }
    }
    while (sqlite3_step(stems) == SQLITE_ROW) {
        int i = sqlite3_column_int(stems, 0);
        if (i < 0 || i >= t->n) continue;
        if (ts->n_stems[i]++ > 0) continue;
        snprintf(ts->stem[i], sizeof ts->stem[i], "%s", (const char *)sqlite3_column_text(stems, 1));
        sqlite3_reset(df);
        sqlite3_bind_text(df, 1, ts->stem[i], -1, SQLITE_STATIC);
        ts->df[i] = sqlite3_step(df) == SQLITE_ROW ? sqlite3_column_int64(df, 0) : 0;
    }
    /* only single-token words are dropped, and the rarest term always stays */
    int rarest = -1;
    for (int i = 0; i < t->n; i++)
        if (ts->n_stems[i] == 1 && (rarest < 0 || ts->df[i] < ts->df[rarest])) rarest = i;
    for (int i = 0; i < t->n; i++)
        ts->keep[i] =
            !(ts->n_stems[i] == 1 && (double)ts->df[i] > COMMON_SHARE * (double)st->n_chunks_cached) || i == rarest;
    ts->have = true;
out:
    sqlite3_finalize(ins);
    sqlite3_finalize(stems);
    sqlite3_finalize(df);
    return s;
}

/* ---- BM25 in C over fts5vocab postings ---------------------------------------------------------- */

/* FTS5's bm25() looks up each matching row's length in a B-tree, which dominates a search that matches
 * thousands of rows. The same formula is computed here from the 'instance' postings of each term and a
 * cached copy of the row lengths. As in FTS5 (fts5_aux.c, documented in the FTS5 manual):
 *   score = sum over terms of idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * D / avgD)),
 *   idf = ln((N - n + 0.5) / (n + 0.5)) (1e-6 when <= 0), tf = sum over columns of weight * hits,
 *   D = the row's token count over all columns, k1 = 1.2, b = 0.75.
 * tests/itest_store_eval.c checks that both give the same ranking. */

/* SQLite varint (FTS5 stores the %_docsize column sizes this way). 0 when malformed. */
static int get_varint(const uint8_t *p, const uint8_t *end, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 9 && p + i < end; i++) {
        if (i == 8) {
            *v = (x << 8) | p[i];
            return 9;
        }
        x = (x << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

/* Row lengths indexed by rowid (chunk ids are dense: INTEGER PRIMARY KEY), plus a score array of the same
 * size that searches reuse. PB_ERR_UNSUPPORTED when the ids are too sparse for that (then FTS5 ranks). */
static pb_status load_docsize(pb_store *st) {
    if (st->ds_valid) return PB_OK;
    free(st->ds_len);
    free(st->ds_score);
    st->ds_len = NULL;
    st->ds_score = NULL;
    st->ds_n = st->ds_max = 0;
    int64_t n = 0, max = 0;
    pb_status s;
    if ((s = pb_store_query_int(st, "SELECT count(*) FROM chunks_fts_docsize", &n)) ||
        (s = pb_store_query_int(st, "SELECT coalesce(max(id), 0) FROM chunks_fts_docsize", &max)))
        return s;
    if (max > 4 * n + (1 << 20) || max >= ((int64_t)1 << 28))
        return pb_error(PB_ERR_UNSUPPORTED, "store: chunk ids too sparse for the C scorer (%lld rows, max id %lld)",
                        (long long)n, (long long)max);
    st->ds_len = pb_calloc((size_t)max + 1, sizeof *st->ds_len);
    st->ds_score = pb_calloc((size_t)max + 1, sizeof *st->ds_score);
    if (!st->ds_len || !st->ds_score) return PB_ERR_NOMEM;
    sqlite3_stmt *q;
    if ((s = pb_store_prepare(st, "SELECT id, sz FROM chunks_fts_docsize", &q))) return s;
    double total = 0;
    int64_t i = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(q, 0);
        const uint8_t *p = sqlite3_column_blob(q, 1), *end = p + sqlite3_column_bytes(q, 1);
        uint64_t len = 0, v;
        int used;
        while (p && p < end && (used = get_varint(p, end, &v)) > 0) len += v, p += used;
        if (id < 1 || id > max) continue;
        st->ds_len[id] = (uint32_t)PB_MIN(len, UINT32_MAX);
        total += (double)len;
        i++;
    }
    sqlite3_finalize(q);
    st->ds_n = i;
    st->ds_max = max;
    st->ds_avg = i ? total / (double)i : 1;
    st->ds_valid = true;
    return PB_OK;
}

typedef struct {
    int64_t id;
    double score;
} cand;

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The n_cand best rows for the kept single-token terms; *out is sorted by score (best first). */
static pb_status bm25_c(pb_store *st, const terms *t, const term_stats *ts, int n_cand, cand **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    pb_status s = load_docsize(st);
    if (s) return s;
    double N = (double)st->ds_n, avg = st->ds_avg > 0 ? st->ds_avg : 1;
    const double k1 = 1.2, b = 0.75;
    size_t total = 1;
    for (int i = 0; i < t->n; i++)
        if (ts->keep[i]) total += (size_t)ts->df[i];
    int64_t *touched = pb_malloc(total * sizeof *touched); /* rows with a score, to read and reset */
    if (!touched) return PB_ERR_NOMEM;
    size_t n_touched = 0;
    double *score = st->ds_score;
    sqlite3_stmt *q;
    if ((s = pb_store_prepare(st, "SELECT doc, col FROM temp.pb_chunks_inst WHERE term = ?", &q))) {
        free(touched);
        return s;
    }
    for (int i = 0; i < t->n; i++) {
        if (!ts->keep[i]) continue;
        double nh = (double)ts->df[i];
        double idf = log((N - nh + 0.5) / (nh + 0.5));
        if (idf <= 0) idf = 1e-6;
        sqlite3_reset(q);
        sqlite3_bind_text(q, 1, ts->stem[i], -1, SQLITE_STATIC);
        int64_t doc = 0;
        double tf = 0;
        for (bool more = true; more;) {
            more = sqlite3_step(q) == SQLITE_ROW;
            int64_t d = more ? sqlite3_column_int64(q, 0) : -1;
            if (d != doc && doc >= 1 && doc <= st->ds_max && tf > 0) {
                double D = st->ds_len[doc] ? (double)st->ds_len[doc] : avg;
                if (score[doc] == 0 && n_touched < total) touched[n_touched++] = doc;
                score[doc] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * D / avg));
                tf = 0;
            }
            if (!more) break;
            if (d != doc) tf = 0;
            doc = d;
            const unsigned char *col = sqlite3_column_text(q, 1);
            tf += col && col[0] == 'h' ? 2.0 : 1.0; /* heading weight 2, text 1 */
        }
    }
    sqlite3_finalize(q);
    /* the n_cand best through a min-heap (the root is the weakest kept), then sort those few */
    cand *heap = pb_malloc((size_t)n_cand * sizeof *heap);
    int n = 0;
    for (size_t i = 0; heap && i < n_touched; i++) {
        cand c = {touched[i], score[touched[i]]};
        if (n < n_cand) {
            int j = n++;
            while (j > 0 && cmp_cand(&heap[(j - 1) / 2], &c) < 0) { /* parent better than c: move it down */
                heap[j] = heap[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            heap[j] = c;
        } else if (cmp_cand(&c, &heap[0]) < 0) { /* c beats the weakest */
            int j = 0;
            for (;;) {
                int l = 2 * j + 1, r = l + 1, w = j;
                const cand *wc = &c;
                if (l < n && cmp_cand(&heap[l], wc) > 0) w = l, wc = &heap[l];
                if (r < n && cmp_cand(&heap[r], wc) > 0) w = r;
                if (w == j) break;
                heap[j] = heap[w];
                j = w;
            }
            heap[j] = c;
        }
    }
    for (size_t i = 0; i < n_touched; i++) score[touched[i]] = 0; /* ready for the next search */
    free(touched);
    if (!heap) return PB_ERR_NOMEM;
    qsort(heap, (size_t)n, sizeof *heap, cmp_cand);
    *n_out = n;
    *out = heap;
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

pb_status pb_store_hits_check(pb_store *st, pb_store_hit *h, int n) {
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < i && h[j].doc_id != h[i].doc_id) j++;
        if (j < i) {
            h[i].state = h[j].state;
            continue;
        }
        pb_status s = pb_store_doc_state_of(st, h[i].doc_id, &h[i].state);
        if (s) return s;
    }
    return PB_OK;
}

#define HIT_COLS                                                                                                       \
    "c.id, c.doc_id, d.path, d.title, c.heading, c.text, c.line_start, c.line_end, c.byte_start, c.byte_end, c.page,"  \
    " c.n_tokens"

/* Fills a hit from columns first..first+11 laid out as HIT_COLS. false when out of memory. */
static bool read_hit(sqlite3_stmt *q, int first, pb_store_hit *h) {
    memset(h, 0, sizeof *h);
    h->chunk_id = sqlite3_column_int64(q, first + 0);
    h->doc_id = sqlite3_column_int64(q, first + 1);
    h->path = pb_store_col_dup_utf8(q, first + 2);
    h->title = pb_store_col_dup_utf8(q, first + 3);
    h->heading = pb_store_col_dup_utf8(q, first + 4);
    h->text = pb_store_col_dup(q, first + 5);
    h->line_start = sqlite3_column_int64(q, first + 6);
    h->line_end = sqlite3_column_int64(q, first + 7);
    h->byte_start = (size_t)sqlite3_column_int64(q, first + 8);
    h->byte_end = (size_t)sqlite3_column_int64(q, first + 9);
    h->page = sqlite3_column_int(q, first + 10);
    h->n_tokens = sqlite3_column_int64(q, first + 11);
    return h->path && h->title && h->heading && h->text;
}

/* The FTS5-ranked candidates (score, then HIT_COLS), best first. */
static pb_status search_fts(pb_store *st, const char *fts, int n_cand, sqlite3_stmt **out) {
    /* The inner query lets FTS5 pick the top candidates by rank before any join. */
    pb_status s = pb_store_prepare(st,
                                   "SELECT f.score, " HIT_COLS " FROM (SELECT rowid, -rank AS score FROM chunks_fts"
                                   " WHERE chunks_fts MATCH ?1 AND rank MATCH 'bm25(2.0, 1.0)' ORDER BY rank LIMIT"
                                   " ?2) f JOIN chunks c ON c.id = f.rowid JOIN documents d ON d.id = c.doc_id"
                                   " ORDER BY f.score DESC",
                                   out);
    if (s) return s;
    sqlite3_bind_text(*out, 1, fts, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(*out, 2, n_cand);
    return PB_OK;
}

/* Whether a hit of document doc may join the n hits so far (at most max_per_doc per document). */
static bool take(pb_store_hit *h, int n, int64_t doc, int max_per_doc) {
    if (max_per_doc <= 0) return true;
    int same = 0;
    for (int i = 0; i < n; i++) same += h[i].doc_id == doc;
    return same < max_per_doc;
}

static pb_status search_impl(pb_store *st, const char *query, int k, int max_per_doc, bool use_c, pb_store_hit **out,
                             int *n_out) {
    *out = NULL;
    *n_out = 0;
    if (k <= 0) return pb_error(PB_ERR_INVALID_ARG, "search: k = %d", k);
    char fts[MAX_TERMS * (MAX_WORD + 8) + 16];
    int n_terms;
    terms t;
    term_stats ts;
    extract_terms(query, &t);
    pb_status s = get_term_stats(st, &t, &ts);
    if (!s) s = build_query(&t, ts.keep, fts, sizeof fts, &n_terms);
    if (s || n_terms == 0) return s;
    /* the C scorer handles single-token terms; a phrase (get_current_dir_name) goes through FTS5 */
    bool c_path = use_c && ts.have;
    for (int i = 0; i < t.n && c_path; i++)
        if (ts.keep[i] && ts.n_stems[i] != 1) c_path = false;
    /* With a per-document cap, more candidates are ranked so that k distinct-enough hits remain. */
    int n_cand = max_per_doc > 0 ? k * 8 + 32 : k;
    pb_store_hit *h = pb_calloc((size_t)k, sizeof *h);
    if (!h) return PB_ERR_NOMEM;
    int n = 0;
    sqlite3_stmt *q = NULL;
    if (c_path) {
        cand *c;
        int nc;
        if ((s = bm25_c(st, &t, &ts, n_cand, &c, &nc))) {
            if (s != PB_ERR_UNSUPPORTED) {
                free(h);
                return s;
            }
            free(h);
            return search_impl(st, query, k, max_per_doc, false, out, n_out);
        }
        s = pb_store_prepare(st, "SELECT " HIT_COLS " FROM chunks c JOIN documents d ON d.id = c.doc_id WHERE c.id = ?",
                             &q);
        for (int i = 0; !s && i < nc && n < k; i++) {
            sqlite3_reset(q);
            sqlite3_bind_int64(q, 1, c[i].id);
            if (sqlite3_step(q) != SQLITE_ROW || !take(h, n, sqlite3_column_int64(q, 1), max_per_doc)) continue;
            bool ok = read_hit(q, 0, &h[n]);
            h[n++].score = c[i].score;
            if (!ok) s = pb_error(PB_ERR_NOMEM, "search: out of memory");
        }
        free(c);
    } else if (!(s = search_fts(st, fts, n_cand, &q))) {
        int rc;
        while (n < k && (rc = sqlite3_step(q)) == SQLITE_ROW) {
            if (!take(h, n, sqlite3_column_int64(q, 2), max_per_doc)) continue;
            bool ok = read_hit(q, 1, &h[n]);
            h[n++].score = sqlite3_column_double(q, 0);
            if (!ok) {
                s = pb_error(PB_ERR_NOMEM, "search: out of memory");
                break;
            }
        }
        if (!s && n < k && rc != SQLITE_DONE) s = pb_store_sql_error(st, "search");
    }
    sqlite3_finalize(q);
    if (s) {
        pb_store_hits_free(h, n);
        return s;
    }
    *out = h;
    *n_out = n;
    return PB_OK;
}

pb_status pb_store_search_bm25(pb_store *st, const char *query, int k, int max_per_doc, pb_store_hit **out,
                               int *n_out) {
    return search_impl(st, query, k, max_per_doc, true, out, n_out);
}

pb_status pb_store_search_bm25_fts(pb_store *st, const char *query, int k, int max_per_doc, pb_store_hit **out,
                                   int *n_out) {
    return search_impl(st, query, k, max_per_doc, false, out, n_out);
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
    if (!s && n > 0 &&
        !(s = pb_store_prepare(st,
                               "SELECT " HIT_COLS " FROM chunks c JOIN documents d ON d.id ="
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

bool pb_store_heading_repeats(const char *heading, const char *text) {
    if (!heading || !text || !heading[0]) return false;
    while (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r') text++;
    const char *t = text;
    int hashes = 0;
    while (*t == '#' && hashes < 6) t++, hashes++;
    if (hashes && (*t == ' ' || *t == '\t'))
        while (*t == ' ' || *t == '\t') t++;
    else
        t = text; /* "#tag" is text, not a heading marker */
    size_t n = strlen(heading);
    if (strncmp(t, heading, n) != 0) return false;
    t += n;
    while (*t == ' ' || *t == '\t' || *t == '#') t++; /* trailing spaces, closing "##" */
    return *t == 0 || *t == '\n' || *t == '\r';
}

void pb_store_format_location(const char *path, int64_t line_start, int64_t line_end, int page, char *buf, size_t cap) {
    if (page > 0)
        snprintf(buf, cap, "%s (p. %d)", path, page);
    else if (line_start <= 0)
        snprintf(buf, cap, "%s", path);
    else if (line_end > line_start)
        snprintf(buf, cap, "%s:%lld-%lld", path, (long long)line_start, (long long)line_end);
    else
        snprintf(buf, cap, "%s:%lld", path, (long long)line_start);
}
