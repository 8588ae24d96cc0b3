/* itest_store_eval.c -- retrieval quality on the committed evaluation set: ingests tests/data/kb/corpus
 * (Linux man-pages, see tests/data/kb/LICENSES.tsv) and asks the hand-written tests/data/kb/questions.tsv;
 * BM25 recall@5 (an answer document among the top 5 results, one chunk per document as `search` shows
 * them) must be >= 0.85. */
#include "pb_test.h"
#include "store/store.h"

#include <math.h>

#define CORPUS    "tests/data/kb/corpus"
#define QUESTIONS "tests/data/kb/questions.tsv"

static const char *base(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* true when name is one of the comma-separated docs */
static bool expected(const char *docs, const char *name) {
    size_t n = strlen(name);
    for (const char *p = docs; *p;) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (l == n && strncmp(p, name, n) == 0) return true;
        if (!c) break;
        p = c + 1;
    }
    return false;
}

int main(void) {
    pb_store *st;
    CHECK(pb_store_open(":memory:", &st) == PB_OK, "open in-memory knowledge base");
    if (!st) TEST_DONE();
    pb_ingest_params p = pb_ingest_default_params();
    pb_ingest_stats s;
    const char *paths[] = {CORPUS};
    pb_status is = pb_store_ingest(st, paths, 1, &p, &s);
    CHECK(is == PB_OK, "ingest the corpus (%s)", is ? pb_last_error() : "ok");
    NOTE("corpus: %lld documents, %lld chunks, %.2f MB in %.0f ms", (long long)s.added, (long long)s.n_chunks,
         (double)s.bytes / 1e6, s.ms);
    CHECK(s.added >= 300 && s.skipped == 0, "corpus has >= 300 documents (%lld), none skipped", (long long)s.added);
    FILE *f = fopen(QUESTIONS, "r");
    CHECK(f != NULL, "open %s", QUESTIONS);
    if (!f) TEST_DONE();
    char line[2048];
    int n_q = 0, hit5 = 0, hit1 = 0;
    double mrr = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\r\n")] = 0;
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        *tab = 0;
        const char *docs = line, *q = tab + 1;
        pb_store_hit *h;
        int n;
        if (pb_store_search_bm25(st, q, 5, 1, &h, &n)) {
            CHECK(0, "search failed for '%s': %s", q, pb_last_error());
            continue;
        }
        n_q++;
        int rank = 0;
        for (int i = 0; i < n && !rank; i++)
            if (expected(docs, base(h[i].path))) rank = i + 1;
        if (rank) {
            hit5++;
            hit1 += rank == 1;
            mrr += 1.0 / rank;
        } else {
            NOTE("miss: %s | %s | top: %s, %s, %s", docs, q, n > 0 ? base(h[0].path) : "-",
                 n > 1 ? base(h[1].path) : "-", n > 2 ? base(h[2].path) : "-");
        }
        pb_store_hits_free(h, n);
    }
    fclose(f);
    /* the C scorer must rank exactly like FTS5's bm25() */
    f = fopen(QUESTIONS, "r");
    int n_same = 0, n_cmp = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (line[0] == '#' || !tab) continue;
        line[strcspn(line, "\r\n")] = 0;
        pb_store_hit *a, *b;
        int na, nb;
        if (pb_store_search_bm25(st, tab + 1, 10, 0, &a, &na) || pb_store_search_bm25_fts(st, tab + 1, 10, 0, &b, &nb))
            continue;
        bool same = na == nb;
        for (int i = 0; same && i < na; i++)
            same = fabs(a[i].score - b[i].score) <= 1e-9 * fabs(b[i].score) + 1e-12 &&
                   (a[i].chunk_id == b[i].chunk_id || a[i].score == b[i].score);
        n_same += same;
        n_cmp++;
        if (!same && na && nb)
            NOTE("ranking differs for '%s': %lld %.6f vs %lld %.6f", tab + 1, (long long)a[0].chunk_id, a[0].score,
                 (long long)b[0].chunk_id, b[0].score);
        pb_store_hits_free(a, na);
        pb_store_hits_free(b, nb);
    }
    if (f) fclose(f);
    CHECK(n_cmp > 0 && n_same == n_cmp, "C BM25 = FTS5 bm25(): same top 10 and scores for %d/%d questions", n_same,
          n_cmp);
    CHECK(n_q >= 60, "at least 60 questions (%d)", n_q);
    double recall = n_q ? (double)hit5 / n_q : 0;
    NOTE("BM25 recall@1 = %.3f, recall@5 = %.3f, MRR@5 = %.3f over %d questions", n_q ? (double)hit1 / n_q : 0.0,
         recall, n_q ? mrr / n_q : 0.0, n_q);
    CHECK(recall >= 0.85, "BM25 recall@5 = %.3f >= 0.85", recall);
    pb_store_close(st);
    TEST_DONE();
}
