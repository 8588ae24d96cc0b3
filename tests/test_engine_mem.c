/* test_engine_mem.c -- memory estimate (weights + KV + scratch from the GGUF header) against what a
 * real session allocates, and admission: refusal with the numbers, --fit lowering n_ctx / KV type. */
#include "engine/engine.h"
#include "pb_test.h"

#include <sys/stat.h>

int main(void) {
    const char *path = pbt_fixture("model/gemma2-tiny-v.q8_0.gguf");
    if (!path) TEST_DONE();
    struct stat st;
    stat(path, &st);
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 1024;
    pb_mem_estimate e;
    CHECK(pb_estimate_memory(path, &sp, 0, &e) == PB_OK, "estimate: %s", pb_last_error());
    CHECK(e.weights > (size_t)st.st_size * 9 / 10 && e.weights <= (size_t)st.st_size,
          "weights %zu bytes ~ file size %lld", e.weights, (long long)st.st_size);
    CHECK(e.total == e.weights + e.kv + e.scratch && e.n_ctx == 1024 && e.kv_type == PB_KV_F16, "total = sum of parts");
    CHECK(e.available > 0 && e.max_n_ctx > 0, "available %zu MiB detected, max n_ctx %d", e.available >> 20,
          e.max_n_ctx);

    /* the estimate against a real session */
    pb_model *m;
    CHECK(pb_model_open(path, NULL, &m) == PB_OK, "open model");
    pb_kv_type types[] = {PB_KV_F16, PB_KV_Q8_0, PB_KV_F32};
    int ctxs[] = {16, 1024, 8192};
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) {
            sp.n_ctx = ctxs[j];
            sp.kv_type = types[i];
            sp.n_threads = 1;
            pb_estimate_memory(path, &sp, 0, &e);
            pb_session *s;
            if (pb_session_new(m, &sp, &s) != PB_OK) {
                CHECK(0, "session n_ctx %d: %s", ctxs[j], pb_last_error());
                continue;
            }
            size_t kv = pb_kv_bytes(s->kv), fc = pb_forward_ctx_bytes(s->fc);
            CHECK(e.kv == kv, "kv estimate = allocated KV (%zu) for type %d, n_ctx %d", kv, (int)types[i], ctxs[j]);
            CHECK(e.scratch >= fc && e.scratch < fc + (16u << 20) + fc,
                  "scratch estimate %zu bounds the forward scratch %zu (n_ctx %d)", e.scratch, fc, ctxs[j]);
            pb_session_free(s);
        }
    }
    /* thinking (Gemma 4 only): a session that drops its thoughts keeps ring rows beyond the window, and the estimate
     * counts them; on this Gemma 2 file think changes nothing in the estimate */
    sp = pb_session_default_params();
    sp.n_ctx = 4096;
    pb_mem_estimate e0, e1;
    pb_estimate_memory(path, &sp, 0, &e0);
    sp.think = true;
    pb_estimate_memory(path, &sp, 0, &e1);
    CHECK(e0.kv == e1.kv && e0.kv > 0, "think on Gemma 2: the same KV estimate (%zu, %zu)", e0.kv, e1.kv);
    pb_model *m4 = NULL;
    const char *g4 = "tests/data/model/gemma4_e2b/llama.f32.gguf";
    CHECK(pb_model_open(g4, NULL, &m4) == PB_OK, "open %s: %s", g4, pb_last_error());
    for (int j = 0; m4 && j < 6; j++) {
        sp = pb_session_default_params();
        sp.n_ctx = j % 3 == 0 ? 16 : j % 3 == 1 ? 100 : 512;
        sp.think = j >= 3;
        sp.n_threads = 1;
        pb_estimate_memory(g4, &sp, 0, &e);
        pb_session *s4 = NULL;
        if (pb_session_new(m4, &sp, &s4) != PB_OK) {
            CHECK(0, "gemma4 session n_ctx %d: %s", sp.n_ctx, pb_last_error());
            continue;
        }
        const pb_hparams *hp4 = pb_model_hparams(m4);
        int want = sp.think ? PB_MIN(sp.n_ctx, hp4->sliding_window + PB_THINK_RING_EXTRA)
                            : PB_MIN(sp.n_ctx, hp4->sliding_window);
        CHECK(e.kv == pb_kv_bytes(s4->kv) && s4->kv &&
                  pb_engine_kv_layer_cells(hp4, 0, sp.n_ctx, s4->ring_extra) == want,
              "gemma4 n_ctx %d%s: kv estimate = allocated KV (%zu), sliding layers hold %d rows", sp.n_ctx,
              sp.think ? " thinking" : "", pb_kv_bytes(s4->kv), want);
        pb_session_free(s4);
    }
    pb_model_close(m4);
    /* ring_extra (ABI 5): the rings keep that many rows more, the estimate counts them, and going back that far
     * after the conversation passed the window reads nothing again (without it: the whole context) */
    for (int x = 0; x < 2; x++) {
        sp = pb_session_default_params();
        sp.n_ctx = 1024;
        sp.n_threads = 1;
        sp.ring_extra = x ? 64 : 0;
        pb_estimate_memory(path, &sp, 0, &e);
        pb_session *s = NULL;
        if (pb_session_new(m, &sp, &s) != PB_OK) {
            CHECK(0, "session ring_extra %d: %s", sp.ring_extra, pb_last_error());
            continue;
        }
        const int W = pb_model_hparams(m)->sliding_window, n = W * 3;
        int32_t ids[512];
        for (int i = 0; i < n && i < 512; i++) ids[i] = 10 + (i * 7) % 200;
        pb_session_totals t0, t1;
        bool ok = n <= 512 && pb_session_prefill(s, ids, n) == PB_OK;
        pb_session_get_totals(s, &t0);
        ok = ok && pb_session_truncate(s, n - 40) == PB_OK;
        pb_session_get_totals(s, &t1);
        const int64_t re = t1.n_reprefilled - t0.n_reprefilled;
        CHECK(ok && e.kv == pb_kv_bytes(s->kv) && (x ? re == 0 : re == n - 40),
              "ring_extra %d: kv estimate = allocated (%zu); back 40 of %d tokens (window %d) re-reads %lld",
              sp.ring_extra, pb_kv_bytes(s->kv), n, W, (long long)re);
        pb_session_free(s);
    }
    pb_model_close(m);

    /* admission refused under a limit, with the numbers and the largest n_ctx that fits */
    sp = pb_session_default_params();
    sp.n_ctx = 8192;
    pb_estimate_memory(path, &sp, 0, &e);
    size_t need8k = e.total;
    sp.n_ctx = 1024;
    pb_estimate_memory(path, &sp, 0, &e);
    size_t limit = (e.total + need8k) / 2; /* between n_ctx 1024 and 8192 */
    sp.n_ctx = 8192;
    pb_session_params req = sp;
    pb_status s = pb_session_admit(path, &req, limit, false, &e);
    CHECK(s == PB_ERR_MEMORY_LIMIT && strstr(pb_last_error(), "MiB") && strstr(pb_last_error(), "largest n_ctx"),
          "n_ctx 8192 over the limit is refused: %s", pb_last_error());
    CHECK(req.n_ctx == 8192 && e.max_n_ctx > 1024 && e.max_n_ctx < 8192, "refusal leaves params alone; max n_ctx %d",
          e.max_n_ctx);
    /* the reported maximum really is the boundary */
    pb_session_params at = sp;
    at.n_ctx = e.max_n_ctx;
    pb_mem_estimate e2;
    pb_estimate_memory(path, &at, limit, &e2);
    CHECK(e2.total <= limit, "n_ctx %d fits", e.max_n_ctx);
    at.n_ctx = e.max_n_ctx + 1;
    pb_estimate_memory(path, &at, limit, &e2);
    CHECK(e2.total > limit, "n_ctx %d does not", e.max_n_ctx + 1);

    /* --fit: Q8_0 KV first, then a shorter context */
    req = sp;
    s = pb_session_admit(path, &req, limit, true, &e);
    CHECK(s == PB_OK && e.adjusted && req.kv_type == PB_KV_Q8_0 && e.total <= limit,
          "fit: q8_0 KV, n_ctx %d, %zu <= %zu bytes", req.n_ctx, e.total, limit);
    CHECK(req.n_ctx % 256 == 0 && req.n_ctx >= 256 && req.n_ctx <= 8192, "fit: n_ctx %d is a multiple of 256",
          req.n_ctx);
    /* a limit that Q8_0 at 8192 exceeds: n_ctx is lowered */
    at = sp;
    at.kv_type = PB_KV_Q8_0;
    at.n_ctx = 2048;
    pb_estimate_memory(path, &at, 0, &e2);
    req = sp;
    s = pb_session_admit(path, &req, e2.total + 1000, true, &e);
    CHECK(s == PB_OK && e.adjusted && req.kv_type == PB_KV_Q8_0 && req.n_ctx == 2048 && e.total <= e2.total + 1000,
          "fit under a tighter limit: q8_0 KV and n_ctx lowered to %d", req.n_ctx);
    /* a limit that even the weights exceed */
    req = sp;
    s = pb_session_admit(path, &req, e.weights / 2, true, &e);
    CHECK(s == PB_ERR_MEMORY_LIMIT && strstr(pb_last_error(), "even with --fit"), "weights alone over the limit: %s",
          pb_last_error());
    /* enough memory: admitted unchanged */
    req = sp;
    s = pb_session_admit(path, &req, (size_t)64 << 30, true, &e);
    CHECK(s == PB_OK && !e.adjusted && req.n_ctx == 8192 && req.kv_type == PB_KV_F16, "64 GiB: admitted as asked");
    CHECK(pb_estimate_memory("/nonexistent.gguf", NULL, 0, &e) == PB_ERR_IO, "missing model file -> PB_ERR_IO");
    /* the default n_ctx of a model trained on 1 position: its own number, not the request's 0 ("n_ctx 0 ...") */
    pb_hparams hp1 = {.n_ctx_train = 1};
    int c1 = 0;
    CHECK(pb_engine_resolve_n_ctx(&hp1, 0, &c1) == PB_ERR_INVALID_ARG &&
              strcmp(pb_last_error(), "n_ctx 1 (the model's context_length) is too small (at least 2)") == 0,
          "context_length 1: %s", pb_last_error());
    TEST_DONE();
}
