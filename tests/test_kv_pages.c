/* test_kv_pages.c -- a short prompt touches few pages of a large K/V cache: the cache starts on 4 KiB pages
 * (pb_big_alloc_lazy), so the first prefill after open does not zero a 2 MiB huge page per head and layer. */
#include "forward_common.h"

#include "base/base.h"
#include "model/kv_impl.h"

#include <sys/mman.h>
#include <unistd.h>

/* Resident bytes of [p, p+n) (mincore; anonymous pages never touched are not resident). */
static size_t resident(const void *p, size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), np = (n + pg - 1) / pg, r = 0;
    unsigned char *v = malloc(np);
    if (!v || mincore((void *)p, np * pg, v) != 0) {
        free(v);
        return (size_t)-1;
    }
    for (size_t i = 0; i < np; i++) r += v[i] & 1;
    free(v);
    return r * pg;
}

int main(void) {
    const char *path = pbt_fixture("model/gemma2-tiny-v.q4_k_m.gguf");
    int32_t toks[NT];
    if (!path || !read_tokens(toks)) TEST_DONE();
    pb_model *m = NULL;
    pb_kv_cache *kv = NULL;
    pb_forward_ctx *fc = NULL;
    const int n_ctx = 32768, n = 8; /* F32 rows: each head's region spans several MiB */
    bool ok = pb_model_open(path, NULL, &m) == PB_OK && pb_kv_new(m, n_ctx, PB_KV_F32, &kv) == PB_OK &&
              pb_forward_ctx_new(m, n, &fc) == PB_OK;
    CHECK(ok, "setup (%s)", pb_last_error());
    if (!ok) TEST_DONE();
    float *logits = malloc(sizeof(float) * (size_t)pb_model_hparams(m)->n_vocab);
    CHECK(resident(kv->mem, kv->bytes) == 0, "a new K/V cache of %zu MiB holds no pages", kv->bytes >> 20);
    CHECK(pb_forward(m, kv, fc, NULL, toks, n, logits, false, NULL) == PB_OK, "prefill %d tokens", n);
    /* n rows of each head of each layer's K and V: one or two 4 KiB pages each (a huge page would be 2 MiB) */
    const pb_hparams *hp = pb_model_hparams(m);
    size_t heads = 0;
    for (int il = 0; il < hp->n_layer; il++) heads += 2 * (size_t)(kv->kvd[il] / kv->hdl[il]);
    size_t got = resident(kv->mem, kv->bytes), bound = heads * 2 * 4096;
    CHECK(got != (size_t)-1 && got <= bound, "after an %d-token prefill %zu KiB of the cache are resident (<= %zu KiB)",
          n, got >> 10, bound >> 10);
    if (!pb_huge_pages_available()) NOTE("no transparent huge pages here: the check above cannot tell 2 MiB pages");
    CHECK(kv->huge_at == PB_KV_HUGE_AT, "huge pages not asked for yet at n_past %d", kv->n_past);
    /* a long context asks for them (and merges the touched ranges) once, and the forward goes on */
    bool fine = true;
    while (fine && kv->n_past < PB_KV_HUGE_AT)
        fine = pb_forward(m, kv, fc, NULL, toks + kv->n_past % (NT - n), n, logits, false, NULL) == PB_OK;
    CHECK(fine && kv->huge_at == 0x7fffffff && isfinite(logits[0]), "huge pages asked for at n_past %d", kv->n_past);
    free(logits);
    pb_forward_ctx_free(fc);
    pb_kv_free(kv);
    pb_model_close(m);
    TEST_DONE();
}
