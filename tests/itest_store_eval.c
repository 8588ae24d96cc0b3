/* itest_store_eval.c -- retrieval quality on the committed evaluation set: ingests tests/data/kb/corpus
 * (Linux man-pages, see tests/data/kb/LICENSES.tsv) and asks the hand-written tests/data/kb/questions.tsv;
 * BM25 recall@5 (an answer document among the top 5 results, one chunk per document as `search` shows
 * them) must be >= 0.85. */
#include "pb_test.h"
#include "store/store.h"

#define CORPUS "tests/data/kb/corpus"
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
    CHECK(pb_store_ingest(st, paths, 1, &p, &s) == PB_OK, "ingest the corpus (%s)", pb_last_error());
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
    CHECK(n_q >= 60, "at least 60 questions (%d)", n_q);
    double recall = n_q ? (double)hit5 / n_q : 0;
    NOTE("BM25 recall@1 = %.3f, recall@5 = %.3f, MRR@5 = %.3f over %d questions", n_q ? (double)hit1 / n_q : 0.0,
         recall, n_q ? mrr / n_q : 0.0, n_q);
    CHECK(recall >= 0.85, "BM25 recall@5 = %.3f >= 0.85", recall);
    pb_store_close(st);
    TEST_DONE();
}
