/* test_pack_model.c -- models with repacked (row-interleaved) weights: the peer Q4_0 / Q8_0 files open with
 * their matrices repacked whether mapped or read into memory, give bit-identical logits both ways (prefill
 * at once and token by token), agree with the unpacked path to rounding noise, and keep the weights
 * resident once (RSS after open within the file size + slack). */
#include "base/base.h"
#include "pb_test.h"
#include "pocketbrain.h"

#include <math.h>

static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* logits of the last token after prefilling ids (all at once, or one by one) */
static float *run(pb_model *m, const int32_t *ids, int n, bool one_by_one, int *n_vocab) {
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 64;
    sp.n_threads = 2;
    pb_session *s;
    if (pb_session_new(m, &sp, &s) != PB_OK) return NULL;
    pb_model_info in;
    pb_model_get_info(m, &in);
    int32_t v[64];
    for (int i = 0; i < n && i < 64; i++) v[i] = ids[i] % in.n_vocab;
    ids = v;
    pb_status st = PB_OK;
    if (one_by_one)
        for (int i = 0; i < n && st == PB_OK; i++) st = pb_session_prefill(s, ids + i, 1);
    else
        st = pb_session_prefill(s, ids, n);
    *n_vocab = in.n_vocab;
    float *out = NULL;
    if (st == PB_OK) {
        out = malloc(sizeof(float) * (size_t)in.n_vocab);
        memcpy(out, pb_session_logits(s), sizeof(float) * (size_t)in.n_vocab);
    }
    pb_session_free(s);
    return out;
}

static void check_file(const char *rel) {
    const char *path = pbt_fixture(rel);
    if (!path) return;
    const int32_t ids[] = {2, 651, 6037, 576, 4844, 603, 235248, 108, 1, 17, 99, 1000, 5};
    const int n = (int)(sizeof ids / sizeof ids[0]);
    pb_model_params p = pb_model_default_params();
    pb_model *mm = NULL, *mh = NULL, *mu = NULL;
    /* one open and close first, so one-time costs (kernel tables, thread stacks, a sanitizer's caches) are
     * not counted as the weights' */
    if (pb_model_open(path, &p, &mm) == PB_OK) pb_model_close(mm);
    mm = NULL;
    size_t rss0 = rss_bytes();
    CHECK(pb_model_open(path, &p, &mm) == PB_OK, "%s: opens mapped", rel);
    size_t rss1 = rss_bytes();
    p.use_mmap = false;
    CHECK(pb_model_open(path, &p, &mh) == PB_OK, "%s: opens read into memory", rel);
    p.use_mmap = true;
    p.repack = false;
    CHECK(pb_model_open(path, &p, &mu) == PB_OK, "%s: opens without repacking", rel);
    if (!mm || !mh || !mu) goto done;
    pb_model_info im, ih, iu;
    pb_model_get_info(mm, &im), pb_model_get_info(mh, &ih), pb_model_get_info(mu, &iu);
    CHECK(im.n_repacked > 0 && im.n_repacked == ih.n_repacked && iu.n_repacked == 0,
          "%s: %d matrices repacked mapped, %d in memory, %d with repack off", rel, im.n_repacked, ih.n_repacked,
          iu.n_repacked);
    CHECK(memcmp(im.fingerprint, iu.fingerprint, 32) == 0, "%s: the fingerprint is the file's, not the layout's", rel);
    size_t grew = rss1 > rss0 ? rss1 - rss0 : 0;
    CHECK(grew <= im.weight_bytes + (8u << 20), "%s: RSS grew %zu KiB on a repacking open (weights %zu KiB)", rel,
          grew >> 10, im.weight_bytes >> 10);
    int V = 0;
    float *a = run(mm, ids, n, false, &V), *b = run(mm, ids, n, true, &V), *c = run(mh, ids, n, false, &V),
          *u = run(mu, ids, n, false, &V);
    CHECK(a && b && c && u, "%s: all four runs produce logits", rel);
    if (a && b && c && u) {
        CHECK(memcmp(a, b, sizeof(float) * (size_t)V) == 0, "%s: prefill at once = token by token (bit-identical)",
              rel);
        CHECK(memcmp(a, c, sizeof(float) * (size_t)V) == 0, "%s: mapped = read into memory (bit-identical)", rel);
        double worst = 0, scale = 0, mean = 0;
        for (int i = 0; i < V; i++) {
            worst = fmax(worst, fabs((double)a[i] - (double)u[i]));
            scale = fmax(scale, fabs((double)u[i]));
            mean += fabs((double)a[i] - (double)u[i]) / V;
        }
        /* Not bit-identical: the float order per block differs, and int8 activation rounding amplifies such
         * differences through the layers (the int8 path alone is ~0.11 mean|d| from exact on these files).
         * A layout bug would be of the logits' own size; accuracy vs HF is test_forward's job (packed). */
        CHECK(mean <= 0.01 * scale && worst <= 0.05 * scale,
              "%s: repacked vs unpacked mean|d| %.3g, max|d| %.3g: rounding-sized for logits of scale %.3g", rel, mean,
              worst, scale);
    }
    free(a), free(b), free(c), free(u);
done:
    pb_model_close(mm);
    pb_model_close(mh);
    pb_model_close(mu);
}

int main(void) {
    check_file("model/gemma2-tiny-v.q8_0.gguf");
    check_file("model/gemma2-tiny-v.q4_0.gguf");
    TEST_DONE();
}
