/* test_engine_session.c -- sessions on the tiny peer model: chat prefix reuse (prefilled-token counter),
 * context full (error) and shift, cancellation from another thread, stop strings over real tokens,
 * seeded determinism, no allocation per token, thermal governor in a session. */
#include "engine/engine.h"
#include "pb_test.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "alloc_count.h"

typedef struct text {
    char s[8192];
    size_t n;
    int pieces;
    volatile int *flag; /* set to 1 after 3 pieces (cancel test) */
    size_t bounds[512]; /* byte offsets where pieces ended */
    int n_bounds;
} text;

static bool collect(const char *p, size_t n, void *user) {
    text *t = user;
    if (t->n + n < sizeof t->s) {
        memcpy(t->s + t->n, p, n);
        t->n += n;
        t->s[t->n] = 0;
        if (t->n_bounds < 512) t->bounds[t->n_bounds++] = t->n;
    }
    if (++t->pieces >= 3 && t->flag) __atomic_store_n(t->flag, 1, __ATOMIC_RELEASE);
    return true;
}

static pb_session *new_session(pb_model *m, int n_ctx, pb_ctx_policy pol) {
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = 1;
    sp.ctx_policy = pol;
    pb_session *s = NULL;
    pb_status st = pb_session_new(m, &sp, &s);
    if (st != PB_OK) NOTE("session_new: %s", pb_last_error());
    return s;
}

static pb_gen_params greedy(int max_tokens) {
    pb_gen_params gp = pb_gen_default_params();
    gp.sampler.temperature = 0;
    gp.max_tokens = max_tokens;
    return gp;
}

static float max_diff(const float *a, const float *b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

/* ---- cancellation thread ---- */
typedef struct canceller {
    pb_session *s;
    volatile int *go;   /* wait for it */
    volatile int *done; /* keep cancelling until it is set (prefill case) */
    int repeat;
    int delay_ms; /* wait this long after go */
    int gap_us;   /* between repeated cancels (0: 2 ms) */
    int64_t past; /* > 0: first wait until the session holds this many tokens */
} canceller;

static void *cancel_thread(void *arg) {
    canceller *c = arg;
    while (c->go && !__atomic_load_n(c->go, __ATOMIC_ACQUIRE)) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    struct timespec d = {c->delay_ms / 1000, (long)(c->delay_ms % 1000) * 1000000L};
    if (c->delay_ms) nanosleep(&d, NULL);
    while (c->past > 0 && __atomic_load_n(&c->s->n_past, __ATOMIC_ACQUIRE) < c->past) {
        struct timespec ts = {0, 10000};
        nanosleep(&ts, NULL);
    }
    do {
        pb_session_cancel(c->s);
        struct timespec ts = {0, c->gap_us ? 1000L * c->gap_us : 2000000L};
        nanosleep(&ts, NULL);
    } while (c->repeat && !__atomic_load_n(c->done, __ATOMIC_ACQUIRE));
    return NULL;
}

int main(void) {
    const char *path = pbt_fixture("model/gemma2-tiny-v.q8_0.gguf");
    if (!path) TEST_DONE();
    pb_model *m;
    pb_model_params mp = pb_model_default_params();
    CHECK(pb_model_open(path, &mp, &m) == PB_OK, "open the peer model: %s", pb_last_error());
    const int V = pb_model_hparams(m)->n_vocab;
    pb_gen_stats gs;
    text t;

    /* ---- 1. chat reuses the KV cache: only the new turn is prefilled ---- */
    {
        pb_session *a = new_session(m, 512, PB_CTX_ERROR);
        pb_gen_params gp = greedy(8);
        memset(&t, 0, sizeof t);
        CHECK(pb_session_chat(a, "Answer briefly.", "What is a harbor?", &gp, collect, &t, &gs) == PB_OK, "turn 1: %s",
              pb_last_error());
        int64_t p1 = gs.n_prompt, np1 = pb_session_n_past(a);
        CHECK(gs.n_generated == 8 && gs.stop_reason == PB_STOP_MAX_TOKENS && np1 == p1 + 7 && a->pending >= 0,
              "turn 1: context = prompt %lld + 7 generated tokens (the 8th is pending)", (long long)p1);
        CHECK(pb_session_n_turns(a) == 1, "one turn recorded");
        CHECK(pb_session_chat(a, NULL, "And a lighthouse?", &gp, collect, &t, &gs) == PB_OK, "turn 2: %s",
              pb_last_error());
        int64_t p2 = gs.n_prompt, np2 = pb_session_n_past(a);
        CHECK(np2 == np1 + 1 + p2 + 7,
              "turn 2 fed only the pending token + its own %lld tokens + 7 generated (context %lld -> %lld)",
              (long long)p2, (long long)np1, (long long)np2);
        CHECK(p2 < np1 && p2 > 5, "turn 2 prefilled %lld tokens, fewer than the %lld of history", (long long)p2,
              (long long)np1);
        pb_session_totals tot;
        pb_session_get_totals(a, &tot);
        CHECK(tot.n_prefilled == p1 + p2 && tot.n_reprefilled == 0 && tot.n_generated == 16 && tot.n_calls == 2,
              "session totals: prefilled %lld = %lld + %lld, reprefilled %lld", (long long)tot.n_prefilled,
              (long long)p1, (long long)p2, (long long)tot.n_reprefilled);
        /* the reused cache gives the logits a fresh session computes over the whole history */
        int64_t n;
        const int32_t *toks = pb_session_tokens(a, &n);
        pb_session *b = new_session(m, 512, PB_CTX_ERROR);
        CHECK(pb_session_prefill(b, toks, n) == PB_OK, "fresh session prefills the %lld tokens", (long long)n);
        float d = max_diff(pb_session_logits(a), pb_session_logits(b), V);
        CHECK(d < 2e-3f, "logits after incremental turns match a one-shot prefill (max diff %.2e)", (double)d);
        /* turn markers: the context ends with <start_of_turn>model\n, turn 2 opened with <end_of_turn> */
        int32_t sot = pb_vocab_find(pb_model_vocab(m), "<start_of_turn>", 15);
        int32_t eot = pb_vocab_eot(pb_model_vocab(m));
        int found_eot = 0, n_sot = 0;
        for (int64_t i = np1; i < n; i++) found_eot += toks[i] == eot;
        for (int64_t i = 0; i < n; i++) n_sot += toks[i] == sot;
        CHECK(toks[0] == pb_vocab_bos(pb_model_vocab(m)) && found_eot >= 2 && n_sot == 4,
              "context: BOS, 4 <start_of_turn>, turn 2 closes the model turn (eot %d, sot %d)", found_eot, n_sot);
        /* prefix reuse for a front end that resends the conversation */
        int64_t kept;
        int32_t *copy = malloc((size_t)n * sizeof *copy);
        memcpy(copy, toks, (size_t)n * sizeof *copy);
        copy[n - 3] = (copy[n - 3] + 1) % V;
        pb_status rs = pb_session_reuse_prefix(b, copy, n, &kept);
        CHECK(rs == PB_OK && kept == n - 3 && pb_session_n_past(b) == n - 3,
              "reuse_prefix keeps the common %lld tokens", (long long)kept);
        free(copy);
        /* truncate + same continuation gives the same greedy tokens */
        pb_session_free(b);
        pb_session_free(a);
    }

    /* ---- 2. full context: an error by default, never a silent truncation ---- */
    {
        pb_session *s = new_session(m, 80, PB_CTX_ERROR);
        pb_gen_params gp = greedy(0);
        memset(&t, 0, sizeof t);
        pb_status st = pb_session_chat(s, NULL, "Tell me a long story about ships.", &gp, collect, &t, &gs);
        CHECK(st == PB_ERR_CONTEXT_FULL && gs.stop_reason == PB_STOP_CONTEXT_FULL &&
                  strstr(pb_last_error(), "context full"),
              "generating past n_ctx 80 -> PB_ERR_CONTEXT_FULL: %s", pb_last_error());
        CHECK(pb_session_n_past(s) == 80 && gs.n_generated > 0, "context filled to 80 with %lld tokens generated",
              (long long)gs.n_generated);
        int64_t before = pb_session_n_past(s);
        st = pb_session_chat(s, NULL, "More?", &gp, collect, &t, &gs);
        CHECK(st == PB_ERR_CONTEXT_FULL && pb_session_n_past(s) == before && gs.n_prompt == 0,
              "a turn that does not fit is refused before anything is fed");
        int32_t ids[90];
        for (int i = 0; i < 90; i++) ids[i] = 100 + i;
        pb_session_truncate(s, 0);
        CHECK(pb_session_prefill(s, ids, 90) == PB_ERR_CONTEXT_FULL && pb_session_n_past(s) == 0,
              "prefill of 90 tokens into n_ctx 80 is refused whole");
        pb_session_free(s);
    }

    /* ---- 3. context shift keeps the system prompt and drops the oldest turns ---- */
    {
        pb_session *s = new_session(m, 160, PB_CTX_SHIFT);
        pb_gen_params gp = greedy(20);
        const char *qs[] = {"First question about boats?", "Second, about trains?", "Third: planes?",
                            "Fourth: bicycles?",           "Fifth: rockets?",       "Sixth: submarines?"};
        int32_t head[64];
        int64_t n_head = 0, shifts = 0;
        int ok = 1;
        for (int i = 0; i < 6; i++) {
            memset(&t, 0, sizeof t);
            pb_status st = pb_session_chat(s, "SYSTEM: you are a travel guide.", qs[i], &gp, collect, &t, &gs);
            ok &= st == PB_OK;
            if (st != PB_OK) NOTE("turn %d: %s", i, pb_last_error());
            shifts += gs.n_shifts;
            if (i == 0) {
                n_head = s->n_keep;
                memcpy(head, s->tokens, (size_t)n_head * sizeof(int32_t));
            }
        }
        pb_session_totals tot;
        pb_session_get_totals(s, &tot);
        CHECK(ok && shifts > 0 && tot.n_shifts == shifts, "6 turns in n_ctx 160 succeed with %lld shifts",
              (long long)shifts);
        CHECK(s->n_keep == n_head && memcmp(s->tokens, head, (size_t)n_head * sizeof(int32_t)) == 0 && n_head > 5,
              "the head (BOS + system prompt, %lld tokens) is kept", (long long)n_head);
        CHECK(pb_session_n_turns(s) < 6 && pb_session_n_turns(s) >= 1 && tot.n_reprefilled > 0,
              "older turns dropped (%d left), kept tokens re-prefilled (%lld)", pb_session_n_turns(s),
              (long long)tot.n_reprefilled);
        /* the shifted context is consistent: same logits as a fresh prefill of its tokens */
        int64_t n;
        const int32_t *toks = pb_session_tokens(s, &n);
        pb_session *b = new_session(m, 160, PB_CTX_ERROR);
        pb_session_prefill(b, toks, n);
        float d = max_diff(pb_session_logits(s), pb_session_logits(b), V);
        CHECK(d < 2e-3f, "after shifts the KV matches a fresh prefill of the kept tokens (max diff %.2e)", (double)d);
        pb_session_free(b);
        /* a single turn longer than the window cannot be shifted away */
        static char longq[4000];
        memset(longq, 0, sizeof longq);
        for (int i = 0; i < 150; i++) strcat(longq, "ship ");
        pb_status st = pb_session_chat(s, NULL, longq, &gp, collect, &t, &gs);
        CHECK(st == PB_ERR_CONTEXT_FULL, "a turn longer than the context -> PB_ERR_CONTEXT_FULL: %s", pb_last_error());
        /* plain generate with SHIFT drops the oldest half after BOS */
        pb_session_truncate(s, 0);
        int32_t ids[150];
        ids[0] = pb_vocab_bos(pb_model_vocab(m));
        for (int i = 1; i < 150; i++) ids[i] = 200 + i;
        gp = greedy(30);
        st = pb_session_generate(s, ids, 150, &gp, NULL, NULL, &gs);
        CHECK(st == PB_OK && gs.n_shifts >= 1 && gs.n_generated == 30 && s->tokens[0] == ids[0],
              "plain generate past n_ctx shifts (%d) and keeps BOS: %s", gs.n_shifts, pb_last_error());
        /* the tokens a plain generate sampled are never dropped by its own shifts (pocketbrain.h, PB_CTX_SHIFT: the
         * current turn is kept), also after the first shift moved them down: 100 tokens of history, a 2-token
         * prompt, then more than the context can hold. Was: the second shift dropped the prompt and the first
         * sampled tokens (the protected position was not moved with them) and the call went on. */
        pb_session_truncate(s, 0);
        pb_session_prefill(s, ids, 100);
        const int32_t prompt2[2] = {3000, 3001};
        gp = greedy(400);
        gp.stop_at_eos = false;
        st = pb_session_generate(s, prompt2, 2, &gp, NULL, NULL, &gs);
        int64_t n_in = 0, at = -1;
        const int32_t *in = pb_session_tokens(s, &n_in);
        for (int64_t i = 0; i + 1 < n_in; i++)
            if (in[i] == prompt2[0] && in[i + 1] == prompt2[1]) at = i;
        CHECK(st == PB_ERR_CONTEXT_FULL && gs.n_shifts == 1 && at > 0 && n_in - (at + 2) == gs.n_generated - 1,
              "plain generate with PB_CTX_SHIFT keeps its prompt and all it sampled (prompt at %lld, %lld after it, "
              "%lld sampled, %d shifts): %s",
              (long long)at, (long long)(n_in - at - 2), (long long)gs.n_generated, gs.n_shifts, pb_last_error());
        pb_session_free(s);
    }

    /* ---- 4. cancellation from another thread ---- */
    {
        pb_session *s = new_session(m, 1024, PB_CTX_ERROR);
        volatile int go = 0, done = 0;
        memset(&t, 0, sizeof t);
        t.flag = &go;
        canceller c = {s, &go, &done, 0, 0, 0, 0};
        pthread_t th;
        pthread_create(&th, NULL, cancel_thread, &c);
        pb_gen_params gp = greedy(0);
        double t0 = pb_time_ms();
        pb_status st = pb_session_chat(s, NULL, "Count forever.", &gp, collect, &t, &gs);
        pthread_join(th, NULL);
        CHECK(st == PB_ERR_CANCELLED && gs.stop_reason == PB_STOP_CANCELLED && gs.n_generated >= 3 &&
                  gs.n_generated < 900,
              "cancel from another thread stops generation (%lld tokens, %.0f ms)", (long long)gs.n_generated,
              pb_time_ms() - t0);
        /* the session stays usable: the cancelled answer is in the context, the next turn works */
        gp.max_tokens = 3;
        CHECK(pb_session_chat(s, NULL, "Next.", &gp, NULL, NULL, &gs) == PB_OK && gs.n_generated == 3,
              "after a cancel the next turn runs normally");
        /* cancel during a long prefill (small batches): the context stays consistent */
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = 1024;
        sp.n_batch = 8;
        sp.n_threads = 1;
        pb_session *p;
        pb_session_new(m, &sp, &p);
        int32_t ids[800];
        for (int i = 0; i < 800; i++) ids[i] = 300 + i % 500;
        go = 1;
        done = 0;
        canceller c2 = {p, &go, &done, 1,
                        5, 0,   0}; /* early: an idle machine prefills 800 tiny-model tokens in ~150 ms */
        pthread_create(&th, NULL, cancel_thread, &c2);
        st = pb_session_prefill(p, ids, 800);
        __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
        CHECK(st == PB_ERR_CANCELLED && pb_session_n_past(p) < 800 && pb_session_n_past(p) % 8 == 0 &&
                  pb_kv_n_past(p->kv) == (int)pb_session_n_past(p),
              "cancel during prefill: stopped at %lld of 800, KV consistent (%s, kv %d)",
              (long long)pb_session_n_past(p), pb_status_name(st), pb_kv_n_past(p->kv));
        pb_session_free(p);
        pb_session_free(s);
    }

    /* ---- 5. stop strings over real tokens; seeded determinism ---- */
    {
        pb_session *s = new_session(m, 256, PB_CTX_ERROR);
        pb_gen_params gp = greedy(24);
        text full;
        memset(&full, 0, sizeof full);
        pb_session_chat(s, NULL, "Say something.", &gp, collect, &full, &gs);
        NOTE("greedy answer: '%s'", full.s);
        /* a stop string across a piece boundary: two characters each side of one in the middle */
        char stop[32] = {0};
        for (int i = full.n_bounds / 2; i < full.n_bounds && !stop[0]; i++) {
            size_t b = full.bounds[i], lo = b, hi = b;
            for (int c = 0; c < 2 && lo > 0; c++) do
                    lo--;
                while (lo > 0 && ((unsigned char)full.s[lo] & 0xC0) == 0x80);
            for (int c = 0; c < 2 && hi < full.n; c++) do
                    hi++;
                while (hi < full.n && ((unsigned char)full.s[hi] & 0xC0) == 0x80);
            if (b - lo >= 2 && hi - b >= 2 && hi - lo < sizeof stop) memcpy(stop, full.s + lo, hi - lo);
        }
        CHECK(stop[0] != 0, "found a piece boundary for the stop string");
        char *first = strstr(full.s, stop);
        pb_session_truncate(s, 0);
        const char *stops[] = {stop};
        gp.stop = stops;
        gp.n_stop = 1;
        memset(&t, 0, sizeof t);
        pb_status st = pb_session_chat(s, NULL, "Say something.", &gp, collect, &t, &gs);
        CHECK(st == PB_OK && gs.stop_reason == PB_STOP_STRING && first && t.n == (size_t)(first - full.s) &&
                  memcmp(t.s, full.s, t.n) == 0,
              "stop string '%s' ends the answer, text before it emitted exactly (%zu bytes)", stop, t.n);
        CHECK(!strstr(t.s, stop), "the stop string is never emitted");
        /* same seed -> same text; another seed -> (almost surely) another text */
        pb_gen_params sp = pb_gen_default_params();
        sp.sampler.temperature = 1.0f;
        sp.sampler.top_k = 0;
        sp.sampler.top_p = 1.0f;
        sp.sampler.min_p = 0;
        sp.max_tokens = 16;
        sp.sampler.seed = 99;
        text r1, r2, r3;
        memset(&r1, 0, sizeof r1);
        memset(&r2, 0, sizeof r2);
        memset(&r3, 0, sizeof r3);
        pb_session_truncate(s, 0);
        pb_session_chat(s, NULL, "Hi", &sp, collect, &r1, &gs);
        pb_session_truncate(s, 0);
        pb_session_chat(s, NULL, "Hi", &sp, collect, &r2, &gs);
        sp.sampler.seed = 100;
        pb_session_truncate(s, 0);
        pb_session_chat(s, NULL, "Hi", &sp, collect, &r3, &gs);
        CHECK(r1.n > 0 && strcmp(r1.s, r2.s) == 0, "same seed, same settings -> same text");
        CHECK(strcmp(r1.s, r3.s) != 0, "another seed -> another text");
        /* max_tokens, callback stop, stop token */
        pb_session_truncate(s, 0);
        pb_gen_params g1 = greedy(5);
        pb_session_chat(s, NULL, "Hi", &g1, NULL, NULL, &gs);
        CHECK(gs.n_generated == 5 && gs.stop_reason == PB_STOP_MAX_TOKENS && gs.t_first_token_ms > 0,
              "max_tokens 5 -> 5 tokens, first token after %.1f ms", gs.t_first_token_ms);
        pb_session_truncate(s, 0);
        int32_t first_tok = -1;
        g1 = greedy(1);
        pb_session_chat(s, NULL, "Hi", &g1, NULL, NULL, &gs);
        first_tok = s->pending;
        pb_session_truncate(s, 0);
        g1 = greedy(10);
        g1.stop_tokens = &first_tok;
        g1.n_stop_tokens = 1;
        memset(&t, 0, sizeof t);
        pb_session_chat(s, NULL, "Hi", &g1, collect, &t, &gs);
        CHECK(gs.stop_reason == PB_STOP_EOS && gs.n_generated == 1 && t.n == 0,
              "a stop token ends generation and is not emitted");
        g1.n_stop_tokens = 0;
        g1.sampler.top_p = 2;
        CHECK(pb_session_chat(s, NULL, "Hi", &g1, NULL, NULL, &gs) == PB_ERR_INVALID_ARG,
              "invalid sampler params are rejected: %s", pb_last_error());
        pb_session_free(s);
    }

    /* ---- 6. nothing is allocated per token ---- */
#if COUNT_ALLOCS
    {
        pb_session *s = new_session(m, 256, PB_CTX_ERROR);
        pb_gen_params gp = pb_gen_default_params(); /* balanced preset: top-k, top-p, min-p */
        gp.max_tokens = 40;
        const char *stops[] = {"zzzz-never"};
        gp.stop = stops;
        gp.n_stop = 1;
        pb_session_chat(s, NULL, "Warm up.", &gp, NULL, NULL, &gs); /* first use may size buffers */
        int32_t ids[4] = {100, 101, 102, 103};
        pb_session_prefill(s, ids, 4);
        long a0 = n_allocs;
        pb_status st = pb_session_generate(s, NULL, 0, &gp, NULL, NULL, &gs);
        long a1 = n_allocs;
        CHECK(st == PB_OK && gs.n_generated == 40, "generated 40 tokens");
        CHECK(a1 - a0 == 0, "no allocation during 40 generated tokens (%ld allocations)", a1 - a0);
        pb_session_free(s);
    }
#else
    NOTE("allocation count skipped under a sanitizer");
#endif

    /* ---- 7. thermal governor in a session (fake zone file) ---- */
    {
        char tp[] = "/tmp/pb_thermal_sess_XXXXXX";
        int fd = mkstemp(tp);
        if (write(fd, "95000\n", 6) != 6) NOTE("write failed");
        close(fd);
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = 128;
        sp.n_threads = 2;
        sp.thermal = tp;
        sp.thermal_interval_ms = 0;
        sp.thermal_pause_ms = 20;
        pb_session *s;
        CHECK(pb_session_new(m, &sp, &s) == PB_OK, "session with a thermal file");
        pb_gen_params gp = greedy(5);
        double t0 = pb_time_ms();
        pb_session_chat(s, NULL, "Hot?", &gp, NULL, NULL, &gs);
        double ms = pb_time_ms() - t0;
        pb_thermal_state ts;
        pb_session_thermal(s, &ts);
        CHECK(ts.enabled && ts.level == 2 && ts.n_threads == 1 && pb_pool_limit(s->pool) == 1 && ts.n_throttled == 5,
              "95 C: one thread, %lld throttled tokens", (long long)ts.n_throttled);
        CHECK(gs.t_generate_ms >= 5 * 20 - 1, "pauses inserted between tokens (%.0f ms for 5 tokens, total %.0f)",
              gs.t_generate_ms, ms);
        fd = open(tp, O_WRONLY | O_TRUNC);
        if (write(fd, "40000\n", 6) != 6) NOTE("write failed");
        close(fd);
        pb_session_chat(s, NULL, "Cool?", &gp, NULL, NULL, &gs);
        pb_session_thermal(s, &ts);
        CHECK(ts.level == 0 && ts.n_threads == 2 && pb_pool_limit(s->pool) == 2 && ts.pause_ms == 0,
              "40 C: both threads back, no pause");
        pb_session_free(s);
        unlink(tp);
        sp.thermal = "/nonexistent/zone";
        CHECK(pb_session_new(m, &sp, &s) == PB_ERR_NOT_FOUND && s == NULL, "unreadable thermal file -> error");
    }

    /* ---- 8. argument checks ---- */
    {
        pb_session_params sp = pb_session_default_params();
        pb_session *s;
        sp.n_ctx = 1 << 20;
        CHECK(pb_session_new(m, &sp, &s) == PB_ERR_INVALID_ARG && strstr(pb_last_error(), "n_ctx"),
              "n_ctx beyond training length rejected: %s", pb_last_error());
        sp = pb_session_default_params();
        sp.warmup = true;
        sp.n_ctx = 64;
        CHECK(pb_session_new(m, &sp, &s) == PB_OK && pb_session_n_past(s) == 0, "warmup leaves an empty context");
        pb_gen_params g1 = greedy(1);
        CHECK(pb_session_generate(s, NULL, 0, &g1, NULL, NULL, &gs) == PB_ERR_INVALID_ARG &&
                  strstr(pb_last_error(), "empty"),
              "generate on an empty context without prompt is refused: %s", pb_last_error());
        CHECK(pb_session_truncate(s, 5) == PB_ERR_INVALID_ARG, "truncate beyond n_past refused");
        CHECK(strcmp(pb_stop_reason_name(PB_STOP_STRING), "stop") == 0 &&
                  strcmp(pb_stop_reason_name(PB_STOP_CANCELLED), "cancelled") == 0,
              "stop reason names");
        pb_session_free(s);
        pb_session_free(NULL);
    }

    /* ---- pb_session_pop_turn: undo, and retry (pop + the same text): the same context and answer again; past
     * the window (32) a pop re-reads nothing with ring_extra rows, the whole context before the turn without ---- */
    for (int x = 0; x < 2; x++) {
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = 512;
        sp.n_threads = 1;
        sp.ring_extra = x ? 64 : 0;
        pb_session *s = NULL;
        CHECK(pb_session_new(m, &sp, &s) == PB_OK, "session ring_extra %d", sp.ring_extra);
        if (!s) continue;
        CHECK(pb_session_pop_turn(s) == PB_ERR_INVALID_ARG && strstr(pb_last_error(), "no chat turn"),
              "pop_turn of an empty session refused: %s", pb_last_error());
        pb_gen_params gp = greedy(12);
        text t1, t2, t3;
        memset(&t1, 0, sizeof t1), memset(&t2, 0, sizeof t2), memset(&t3, 0, sizeof t3);
        bool ok = pb_session_chat(s, NULL, "What is a harbor, and why do ships need one in a storm?", &gp, collect, &t1,
                                  &gs) == PB_OK;
        const int64_t n1 = pb_session_n_past(s);
        ok = ok && pb_session_chat(s, NULL, "And a lighthouse?", &gp, collect, &t2, &gs) == PB_OK;
        int64_t n2 = 0;
        const int32_t *k2 = pb_session_tokens(s, &n2);
        int32_t *before = malloc(sizeof(int32_t) * (size_t)(n2 > 0 ? n2 : 1));
        if (k2 && before) memcpy(before, k2, sizeof(int32_t) * (size_t)n2);
        pb_session_totals a0, a1;
        pb_session_get_totals(s, &a0);
        ok = ok && pb_session_pop_turn(s) == PB_OK;
        pb_session_get_totals(s, &a1);
        const int64_t re = a1.n_reprefilled - a0.n_reprefilled;
        CHECK(ok && pb_session_n_turns(s) == 1 && pb_session_n_past(s) == n1 && n1 > 40 && (x ? re == 0 : re == n1),
              "ring_extra %d: pop_turn back to the first answer (%lld tokens, window 32) re-reads %lld", sp.ring_extra,
              (long long)n1, (long long)re);
        ok = ok && pb_session_chat(s, NULL, "And a lighthouse?", &gp, collect, &t3, &gs) == PB_OK;
        int64_t n3 = 0;
        const int32_t *k3 = pb_session_tokens(s, &n3);
        CHECK(ok && !strcmp(t2.s, t3.s) && n3 == n2 && before && !memcmp(k3, before, sizeof(int32_t) * (size_t)n2) &&
                  pb_session_n_turns(s) == 2,
              "retry (pop + the same text): the same answer [%s] and context (%lld tokens)", t3.s, (long long)n3);
        CHECK(pb_session_pop_turn(s) == PB_OK && pb_session_pop_turn(s) == PB_OK && pb_session_n_past(s) == 0 &&
                  pb_session_n_turns(s) == 0 && pb_session_pop_turn(s) == PB_ERR_INVALID_ARG,
              "popping both turns empties the context; a third pop is refused");
        memset(&t3, 0, sizeof t3);
        CHECK(pb_session_chat(s, NULL, "What is a harbor, and why do ships need one in a storm?", &gp, collect, &t3,
                              &gs) == PB_OK &&
                  !strcmp(t1.s, t3.s) && pb_session_n_past(s) == n1,
              "after popping the first turn it is asked anew: the same answer");
        free(before);
        pb_session_free(s);
    }
    { /* after context shifts (the turn list renumbered): pop + the same text answers as before */
        pb_session *s = new_session(m, 128, PB_CTX_SHIFT);
        pb_gen_params gp = greedy(12);
        text a, b;
        int64_t shifts = 0;
        bool ok = s != NULL;
        for (int i = 0; ok && i < 6; i++) {
            memset(&a, 0, sizeof a);
            ok = pb_session_chat(s, NULL, "Tell me about harbors and ships.", &gp, collect, &a, &gs) == PB_OK;
            shifts += gs.n_shifts;
        }
        const int nt = ok ? pb_session_n_turns(s) : 0;
        const int64_t np = pb_session_n_past(s);
        memset(&b, 0, sizeof b);
        ok = ok && shifts > 0 && nt >= 1 && pb_session_pop_turn(s) == PB_OK && pb_session_n_turns(s) == nt - 1 &&
             pb_session_chat(s, NULL, "Tell me about harbors and ships.", &gp, collect, &b, &gs) == PB_OK;
        CHECK(ok && !strcmp(a.s, b.s) && pb_session_n_past(s) == np && pb_session_n_turns(s) == nt,
              "pop_turn after %lld context shifts (%d turns): retry gives the same answer and context",
              (long long)shifts, nt);
        pb_session_free(s);
    }
    { /* a chat after tokens fed without one (a document prefilled): popping its only turn keeps them (was: the
       * whole context emptied, as for a first turn) */
        pb_session *s = new_session(m, 512, PB_CTX_ERROR);
        pb_gen_params gp = greedy(8);
        int32_t ids[40];
        for (int i = 0; i < 40; i++) ids[i] = 300 + i;
        bool ok = s && pb_session_prefill(s, ids, 40) == PB_OK &&
                  pb_session_chat(s, NULL, "What was that about?", &gp, NULL, NULL, &gs) == PB_OK &&
                  pb_session_n_turns(s) == 1 && pb_session_pop_turn(s) == PB_OK;
        int64_t n = 0;
        const int32_t *k = s ? pb_session_tokens(s, &n) : NULL;
        CHECK(ok && n == 39 && !memcmp(k, ids, 39 * sizeof *ids) && s->pending == ids[39] && pb_session_n_turns(s) == 0,
              "pop_turn of a chat turn after a prefill keeps the prefill (%lld tokens, 40 with the pending one)",
              (long long)n);
        pb_session_free(s);
    }
    { /* a turn cancelled while its prompt is read leaves the context as before it: the answer before's end of turn
       * pending again, so the next turn (a retry) closes the model turn once (was: fed, then closed a second time);
       * the first turn passes the window (32), so going back reads the context again, and the canceller keeps
       * cancelling while it does: that read must not stop (it failed, and the whole conversation was reset) */
        int32_t eot_bias[1];
        float bias_val[1] = {100.0f};
        char longq[1200] = "";
        for (int i = 0; i < 40; i++) strcat(longq, "harbor ship ");
        int64_t n_ref = 0;
        int32_t ref[256];
        for (int x = 0; x < 2; x++) {
            pb_session_params sp = pb_session_default_params();
            sp.n_ctx = 1024;
            sp.n_batch = 8;
            sp.n_threads = 1;
            pb_session *s = NULL;
            pb_session_new(m, &sp, &s);
            if (!s) break;
            eot_bias[0] = s->eot;
            pb_gen_params ge = greedy(8), gp = greedy(8);
            ge.sampler.bias_ids = eot_bias; /* the first answer ends with its end of turn */
            ge.sampler.bias_values = bias_val;
            ge.sampler.n_bias = 1;
            pb_status st = pb_session_chat(
                s, NULL, "Hello there, who are you, and what do you know about harbors and the ships in them?", &ge,
                NULL, NULL, &gs);
            if (x) {
                volatile int go = 1, done = 0;
                /* from 2 chunks into the prompt (so going back reads the context again), every 20 us */
                canceller c = {s, &go, &done, 1, 0, 20, pb_session_n_past(s) + 17};
                pthread_t th;
                pthread_create(&th, NULL, cancel_thread, &c);
                pb_status sc = pb_session_chat(s, NULL, longq, &gp, NULL, NULL, &gs);
                __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
                pthread_join(th, NULL);
                CHECK(sc == PB_ERR_CANCELLED && gs.n_generated == 0 && pb_session_n_turns(s) == 1 &&
                          s->pending == s->eot,
                      "a turn cancelled in its prompt: 1 turn, the end of turn pending (%s, pending %d)",
                      pb_status_name(sc), (int)s->pending);
            }
            st = st == PB_OK ? pb_session_chat(s, NULL, "Why?", &gp, NULL, NULL, &gs) : st;
            int64_t n = 0;
            const int32_t *k = pb_session_tokens(s, &n);
            if (!x && st == PB_OK && n <= 256) memcpy(ref, k, (size_t)n * sizeof *ref), n_ref = n;
            if (x)
                CHECK(st == PB_OK && n_ref > 0 && n == n_ref && !memcmp(k, ref, (size_t)n * sizeof *ref),
                      "after a turn cancelled in its prompt the next turn's context is the uninterrupted one (%lld "
                      "tokens, %lld)",
                      (long long)n, (long long)n_ref);
            pb_session_free(s);
        }
    }
    CHECK(pb_session_pop_turn(NULL) == PB_ERR_INVALID_ARG && strstr(pb_last_error(), "pb_session_pop_turn"),
          "pop_turn(NULL): %s", pb_last_error());
    pb_model_close(m);
    TEST_DONE();
}
