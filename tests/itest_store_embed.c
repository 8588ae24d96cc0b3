/* itest_store_embed.c -- vector retrieval: embeddings from the tiny Gemma 2 fixture (mean-pooled final hidden
 * states), float16 storage, cosine search and reciprocal rank fusion with BM25. */
#include "pb_test.h"
#include "store/store_embed.h"

#include <math.h>

int main(void) {
    const char *model = pbt_fixture("model/gemma2-tiny-v.q8_0.gguf");
    if (!model) {
        CHECK(1, "skip: tiny model fixture not present");
        TEST_DONE();
    }
    pb_embedder *e;
    CHECK(pb_embedder_open(model, 64, 2, &e) == PB_OK, "embedder opens (%s)", pb_last_error());
    if (!e) TEST_DONE();
    int dim = pb_embedder_dim(e);
    CHECK(dim == 256, "dim = n_embd = %d", dim);
    float *a = malloc(sizeof(float) * (size_t)dim), *b = malloc(sizeof(float) * (size_t)dim);
    const char *t1 = "Tomatoes need full sun and regular watering.";
    CHECK(pb_embedder_embed(e, t1, strlen(t1), a) == PB_OK, "embed text");
    CHECK(pb_embedder_embed(e, t1, strlen(t1), b) == PB_OK, "embed again");
    double norm = 0, diff = 0;
    for (int i = 0; i < dim; i++) {
        norm += (double)a[i] * (double)a[i];
        diff += fabs((double)a[i] - (double)b[i]);
    }
    CHECK(fabs(norm - 1.0) < 1e-4, "vector is L2-normalized (%.6f)", norm);
    CHECK(diff == 0, "deterministic: same text, same vector");
    /* a long text is cut to max_tokens instead of failing */
    char longt[8000] = {0};
    for (int i = 0; i < 300; i++) strcat(longt, "word ");
    CHECK(pb_embedder_embed(e, longt, strlen(longt), b) == PB_OK, "text longer than max_tokens is cut, not refused");

    pb_store *st;
    CHECK(pb_store_open(":memory:", &st) == PB_OK, "open store");
    const char *texts[] = {t1, "A starter is flour and water fermented by wild yeast.",
                           "Chain lubrication every 300 km keeps a bicycle quiet."};
    pb_store_chunk ch[3];
    memset(ch, 0, sizeof ch);
    for (int i = 0; i < 3; i++) {
        ch[i].text = (char *)texts[i];
        ch[i].heading = (char *)"H";
        ch[i].line_start = ch[i].line_end = i + 1;
    }
    pb_store_doc d = {"/kb/a.md", "0000", 1, 10, "A"};
    CHECK(pb_store_doc_put(st, &d, ch, 3, NULL) == PB_OK, "doc with 3 chunks");
    int64_t n;
    CHECK(pb_store_embed_missing(st, e, NULL, NULL, &n) == PB_OK && n == 3, "3 chunks embedded");
    CHECK(pb_store_embed_missing(st, e, NULL, NULL, &n) == PB_OK && n == 0, "second pass: nothing missing");
    pb_store_hit *h;
    int nh;
    CHECK(pb_embedder_embed(e, texts[1], strlen(texts[1]), a) == PB_OK, "embed a chunk's text as the query");
    CHECK(pb_store_search_vec(st, pb_embedder_name(e), a, dim, 3, &h, &nh) == PB_OK && nh == 3, "vector search");
    if (nh == 3) {
        CHECK(strcmp(h[0].text, texts[1]) == 0 && h[0].score > 0.999, "its own chunk first, cosine %.5f (f16)",
              h[0].score);
        CHECK(h[0].score >= h[1].score && h[1].score >= h[2].score, "ranked by cosine");
    }
    pb_store_hit *bm;
    int nb;
    CHECK(pb_store_search_bm25(st, "bicycle chain", 3, 0, &bm, &nb) == PB_OK && nb == 1, "bm25: one hit");
    pb_store_hit *f;
    int nf;
    CHECK(pb_store_fuse_rrf(bm, nb, h, nh, 60, 3, &f, &nf) == PB_OK && nf == 3, "rrf fuses to 3");
    /* the bicycle chunk is 1st in BM25 and 2nd or 3rd by vectors: its fused score is the highest */
    CHECK(nf == 3 && strstr(f[0].text, "bicycle") && f[0].score > f[1].score, "rrf top: %s", nf ? f[0].text : "-");
    pb_store_hits_free(f, nf);
    CHECK(pb_store_doc_delete(st, "/kb/a.md") == PB_OK, "delete the document");
    int64_t left = -1;
    pb_store_query_int(st, "SELECT count(*) FROM embeddings", &left);
    CHECK(left == 0, "its embeddings are gone too");
    pb_store_close(st);
    free(a);
    free(b);
    pb_embedder_free(e);
    TEST_DONE();
}
