/* test_engine_batch.c -- continuous batching (pb_batch) on the tiny peer model: sessions sharing a batch, started at
 * different times, of different lengths, greedy and seeded top-k/top-p, plain generate and chat, give exactly the
 * tokens and text of each session run alone; the steps really hold several sessions; a member cancelled mid-way
 * leaves cleanly; a member whose callback sleeps does not hold the others up (the bounded wait); sessions of
 * another model and a full batch are refused; nothing is allocated per token. Also run under ThreadSanitizer. */
#include "pb_test.h"
#include "pocketbrain.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "alloc_count.h"

#define MAX_STREAMS 8
#define MAX_TOKS    1024

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One stream: what to run and what came out. */
typedef struct stream {
    /* the job */
    const char *text; /* chat: the user text; else the prompt text */
    bool chat;
    bool seeded; /* top-k 40, top-p 0.9, T 0.8, seed 100 + index; else greedy */
    int max_tokens;
    int delay_ms;  /* start this long after the others */
    int sleep_ms;  /* the callback sleeps this long at each piece (a slow client) */
    int cancel_at; /* > 0: another thread cancels the session once this many pieces came */
    pb_session *s; /* set by the runner */
    int index;
    /* the result */
    char out[8192];
    size_t n_out;
    int pieces; /* atomic */
    pb_status st;
    pb_gen_stats gs;
    int32_t toks[MAX_TOKS];
    int64_t n_toks;
    double t_end;
    char err[256];
} stream;

static bool on_piece(const char *p, size_t n, void *user) {
    stream *r = user;
    if (r->n_out + n < sizeof r->out) {
        memcpy(r->out + r->n_out, p, n);
        r->n_out += n;
        r->out[r->n_out] = 0;
    }
    __atomic_add_fetch(&r->pieces, 1, __ATOMIC_RELEASE);
    if (r->sleep_ms) sleep_ms(r->sleep_ms);
    return true;
}

static pb_gen_params gen_of(const stream *r) {
    pb_gen_params gp = pb_gen_default_params();
    gp.max_tokens = r->max_tokens;
    if (r->seeded) {
        gp.sampler.temperature = 0.8f;
        gp.sampler.top_k = 40;
        gp.sampler.top_p = 0.9f;
        gp.sampler.min_p = 0;
        gp.sampler.seed = 100 + (uint64_t)r->index;
    } else {
        gp.sampler.temperature = 0;
    }
    return gp;
}

/* Runs the stream's job on r->s (the calling thread). */
static void run_job(pb_model *m, stream *r) {
    pb_gen_params gp = gen_of(r);
    r->n_out = 0;
    r->out[0] = 0;
    __atomic_store_n(&r->pieces, 0, __ATOMIC_RELEASE);
    if (r->chat) {
        r->st = pb_session_chat(r->s, "Answer in a few words.", r->text, &gp, on_piece, r, &r->gs);
    } else {
        int32_t ids[256];
        int64_t n = 0;
        pb_tokenize(pb_model_vocab(m), r->text, strlen(r->text), PB_TOK_ADD_BOS, ids, 256, &n);
        r->st = pb_session_generate(r->s, ids, n, &gp, on_piece, r, &r->gs);
    }
    snprintf(r->err, sizeof r->err, "%s", r->st == PB_OK ? "" : pb_last_error());
    int64_t n;
    const int32_t *t = pb_session_tokens(r->s, &n);
    r->n_toks = n < MAX_TOKS ? n : MAX_TOKS;
    memcpy(r->toks, t, (size_t)r->n_toks * sizeof *t);
    r->t_end = now_ms();
}

typedef struct runner {
    pb_model *m;
    stream *r;
    volatile int *go;
} runner;

static void *run_thread(void *arg) {
    runner *x = arg;
    while (!__atomic_load_n(x->go, __ATOMIC_ACQUIRE)) sleep_ms(1);
    if (x->r->delay_ms) sleep_ms(x->r->delay_ms);
    run_job(x->m, x->r);
    return NULL;
}

typedef struct canceller {
    stream *r;
    volatile int *go;
} canceller;

static void *cancel_thread(void *arg) {
    canceller *c = arg;
    while (!__atomic_load_n(c->go, __ATOMIC_ACQUIRE)) sleep_ms(1);
    while (__atomic_load_n(&c->r->pieces, __ATOMIC_ACQUIRE) < c->r->cancel_at) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    pb_session_cancel(c->r->s);
    return NULL;
}

static pb_session *new_session(pb_model *m, pb_batch *b) {
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 512;
    sp.n_threads = 1;
    sp.batch = b;
    pb_session *s = NULL;
    if (pb_session_new(m, &sp, &s) != PB_OK) NOTE("session_new: %s", pb_last_error());
    return s;
}

/* Runs streams[0..n) each alone (the reference, into ref[]), then all at once on sessions sharing one batch. */
static void run_both(pb_model *m, stream *st, stream *ref, int n, pb_batch_stats *bs) {
    for (int i = 0; i < n; i++) {
        ref[i] = st[i];
        ref[i].index = st[i].index = i;
        ref[i].sleep_ms = 0;
        ref[i].cancel_at = 0;
        ref[i].s = new_session(m, NULL);
        run_job(m, &ref[i]);
        pb_session_free(ref[i].s);
        ref[i].s = NULL;
    }
    pb_batch *b = NULL;
    CHECK(pb_batch_new(m, n, &b) == PB_OK, "batch for %d sessions: %s", n, pb_last_error());
    pthread_t th[MAX_STREAMS], ct[MAX_STREAMS];
    runner rn[MAX_STREAMS];
    canceller cn[MAX_STREAMS];
    volatile int go = 0;
    for (int i = 0; i < n; i++) {
        st[i].s = new_session(m, b);
        rn[i] = (runner){m, &st[i], &go};
        pthread_create(&th[i], NULL, run_thread, &rn[i]);
        if (st[i].cancel_at > 0) {
            cn[i] = (canceller){&st[i], &go};
            pthread_create(&ct[i], NULL, cancel_thread, &cn[i]);
        }
    }
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (st[i].cancel_at > 0) pthread_join(ct[i], NULL);
    }
    pb_batch_get_stats(b, bs);
    for (int i = 0; i < n; i++) pb_session_free(st[i].s), st[i].s = NULL;
    pb_batch_free(b);
}

static bool same(const stream *a, const stream *b) {
    return a->st == b->st && a->n_out == b->n_out && memcmp(a->out, b->out, a->n_out) == 0 && a->n_toks == b->n_toks &&
           memcmp(a->toks, b->toks, (size_t)a->n_toks * sizeof a->toks[0]) == 0 &&
           a->gs.n_generated == b->gs.n_generated && a->gs.stop_reason == b->gs.stop_reason;
}

static int64_t fed_in_decode(const stream *st, int n) {
    int64_t k = 0; /* each sampled token but the last is fed by a decode step */
    for (int i = 0; i < n; i++) k += st[i].gs.n_generated > 0 ? st[i].gs.n_generated - 1 : 0;
    return k;
}

int main(void) {
    const char *path = pbt_fixture("model/gemma2-tiny-v.q8_0.gguf");
    if (!path) TEST_DONE();
    pb_model *m;
    pb_model_params mp = pb_model_default_params();
    mp.n_threads = 1;
    CHECK(pb_model_open(path, &mp, &m) == PB_OK, "open the peer model: %s", pb_last_error());
    pb_model_info mi; /* the GPU where one is usable (a CUDA build on a GPU machine: scripts/gpu_check.sh) */
    if (pb_model_get_info(m, &mi) == PB_OK) NOTE("sessions run on %s", mi.gpu ? mi.gpu_name : "the CPU");
    static stream st[MAX_STREAMS], ref[MAX_STREAMS];
    pb_batch_stats bs;

    /* ---- 1. eight streams: different starts and lengths, greedy and seeded, generate and chat ---- */
    {
        const char *texts[MAX_STREAMS] = {
            "The harbor at dawn", "What is a lighthouse?",  "Once upon a time, in a small village",
            "Name three colors.", "The ship sailed",        "Why is the sea salty?",
            "A list of fruits:",  "Tell me about the moon."};
        memset(st, 0, sizeof st);
        for (int i = 0; i < MAX_STREAMS; i++) {
            st[i].text = texts[i];
            st[i].chat = i % 2 == 1;
            st[i].seeded = (i / 2) % 2 == 1;
            st[i].max_tokens = 12 + 9 * i;
            st[i].delay_ms = (i * 7) % 23;
        }
        run_both(m, st, ref, MAX_STREAMS, &bs);
        for (int i = 0; i < MAX_STREAMS; i++)
            CHECK(same(&st[i], &ref[i]),
                  "stream %d (%s, %s, %d tokens, +%d ms): batched = alone (%lld tokens in context, %d generated, "
                  "\"%.40s\" vs \"%.40s\") %s",
                  i, st[i].chat ? "chat" : "generate", st[i].seeded ? "seeded top-k/top-p" : "greedy", st[i].max_tokens,
                  st[i].delay_ms, (long long)st[i].n_toks, (int)st[i].gs.n_generated, st[i].out, ref[i].out, st[i].err);
        CHECK(bs.n_tokens == fed_in_decode(st, MAX_STREAMS) && bs.n_steps > 0 && bs.n_steps < bs.n_tokens,
              "the batch fed every decode token (%lld = %lld) in fewer steps (%lld)", (long long)bs.n_tokens,
              (long long)fed_in_decode(st, MAX_STREAMS), (long long)bs.n_steps);
        CHECK(bs.max_size >= 2, "steps held several sessions: max %d, mean %.2f; sizes 1:%lld 2:%lld 3-4:%lld 5-8:%lld",
              bs.max_size, (double)bs.n_tokens / (double)(bs.n_steps ? bs.n_steps : 1), (long long)bs.size_hist[0],
              (long long)bs.size_hist[1], (long long)bs.size_hist[2], (long long)bs.size_hist[3]);
        CHECK(bs.n_sessions == MAX_STREAMS && bs.n_decoding == 0 && bs.max_sessions == MAX_STREAMS,
              "stats: %d sessions, %d decoding at the end", bs.n_sessions, bs.n_decoding);
    }

    /* ---- 2. a member cancelled mid-way leaves cleanly; the others are unchanged ---- */
    {
        memset(st, 0, sizeof st);
        const char *texts[4] = {"The river flows", "Describe a forest.", "Numbers: one, two,", "Say hello."};
        for (int i = 0; i < 4; i++) {
            st[i].text = texts[i];
            st[i].chat = i % 2 == 1;
            st[i].seeded = i == 2;
            st[i].max_tokens = 60;
        }
        st[1].cancel_at = 4;
        run_both(m, st, ref, 4, &bs);
        for (int i = 0; i < 4; i++) {
            if (i == 1) continue;
            CHECK(same(&st[i], &ref[i]), "cancel test: stream %d batched = alone", i);
        }
        stream *c = &st[1], *r = &ref[1];
        CHECK(c->st == PB_ERR_CANCELLED && c->gs.stop_reason == PB_STOP_CANCELLED,
              "the cancelled member ends with "
              "PB_ERR_CANCELLED (%s) after %d pieces",
              c->err, c->pieces);
        CHECK(c->n_toks <= r->n_toks && memcmp(c->toks, r->toks, (size_t)c->n_toks * sizeof c->toks[0]) == 0 &&
                  c->n_out <= r->n_out && memcmp(c->out, r->out, c->n_out) == 0 && c->gs.n_generated >= 4,
              "its context (%lld tokens) and text (%zu bytes) are a prefix of the run alone (%lld, %zu)",
              (long long)c->n_toks, c->n_out, (long long)r->n_toks, r->n_out);
        CHECK(bs.n_decoding == 0, "nobody counts as decoding afterwards");
    }

    /* ---- 3. a slow consumer (its callback sleeps a piece) does not stall the others ---- */
    {
        memset(st, 0, sizeof st);
        const char *texts[3] = {"The slow one", "A fast story about cats", "A fast story about dogs"};
        for (int i = 0; i < 3; i++) {
            st[i].text = texts[i];
            st[i].max_tokens = i == 0 ? 15 : 60;
        }
        /* the sleep: 30 tokens' time alone (at least 40 ms), so that the slow stream's 15 pieces outlast the fast
         * ones' 60 tokens even when 3 threads share 2 busy cores or run under a sanitizer; held in lock-step (an
         * unbounded wait) the fast ones would need the slow one's 15 sleeps first and finish after it */
        st[1].s = new_session(m, NULL);
        run_job(m, &st[1]);
        double per_tok = st[1].gs.t_generate_ms / (double)(st[1].gs.n_generated ? st[1].gs.n_generated : 1);
        pb_session_free(st[1].s);
        st[1].s = NULL;
        st[0].sleep_ms = (int)(30 * per_tok) > 40 ? (int)(30 * per_tok) : 40;
        run_both(m, st, ref, 3, &bs);
        for (int i = 0; i < 3; i++) CHECK(same(&st[i], &ref[i]), "slow-consumer test: stream %d batched = alone", i);
        CHECK(st[1].t_end < st[0].t_end && st[2].t_end < st[0].t_end,
              "the fast members (60 tokens) finished %.0f / %.0f ms before the slow one (15 tokens, %d ms each; "
              "%.2f ms a token alone)",
              st[0].t_end - st[1].t_end, st[0].t_end - st[2].t_end, st[0].sleep_ms, per_tok);
        NOTE("slow-consumer run: %lld steps, mean %.2f, leaders waited %.1f ms in all", (long long)bs.n_steps,
             (double)bs.n_tokens / (double)(bs.n_steps ? bs.n_steps : 1), bs.wait_ms);
    }

    /* ---- 4. refusals: another model, a full batch, bad sizes ---- */
    {
        pb_batch *b = NULL;
        CHECK(pb_batch_new(m, 0, &b) == PB_ERR_INVALID_ARG && !b, "max_sessions 0 refused");
        CHECK(pb_batch_new(m, PB_BATCH_MAX_SESSIONS + 1, &b) == PB_ERR_INVALID_ARG && !b, "max_sessions 65 refused");
        CHECK(pb_batch_new(NULL, 2, &b) == PB_ERR_INVALID_ARG, "NULL model refused");
        CHECK(pb_batch_new(m, 1, &b) == PB_OK, "a batch of one");
        pb_session_params sp = pb_session_default_params();
        CHECK(sp.batch == NULL, "sessions decode alone by default");
        sp.n_ctx = 256;
        sp.batch = b;
        pb_session *a = NULL, *c = NULL;
        CHECK(pb_session_new(m, &sp, &a) == PB_OK, "first session joins");
        CHECK(pb_session_new(m, &sp, &c) == PB_ERR_INVALID_ARG && !c && strstr(pb_last_error(), "full"),
              "a second one is refused: %s", pb_last_error());
        const char *p2 = pbt_fixture("model/gemma2-tiny-v.q4_0.gguf");
        if (p2) {
            pb_model *m2;
            CHECK(pb_model_open(p2, &mp, &m2) == PB_OK, "open another model");
            pb_session_free(a);
            a = NULL;
            pb_status s2 = pb_session_new(m2, &sp, &c);
            CHECK(s2 == PB_ERR_INVALID_ARG && !c && strstr(pb_last_error(), "batch serves sessions of model"),
                  "a session of another model is refused: %s", pb_last_error());
            pb_model_close(m2);
        }
        pb_batch_stats z;
        pb_batch_get_stats(b, &z);
        CHECK(z.n_sessions == (a ? 1 : 0), "the refused sessions never joined (%d sessions)", z.n_sessions);
        pb_session_free(a);
        pb_batch_free(b);
    }

#if COUNT_ALLOCS
    /* ---- 5. nothing allocated per token: two batched streams of 8 and of 40 tokens allocate the same, after a
     * first run of 40 (not counted) made what a backend makes once a shape. Calls from shared libraries other
     * than libc are not counted: on the GPU the driver's own pools grow when they like (one allocation more or
     * less between such runs, measured on the H200); ours, the CUDA runtime's (linked in) and libc's count ---- */
    {
        alloc_count_skip_libraries(); /* the driver is loaded by now */
        long counts[3], skipped[3];
        for (int k = 0; k < 3; k++) {
            memset(st, 0, sizeof st);
            st[0].text = "Counting allocations";
            st[1].text = "Counting allocations too";
            st[0].max_tokens = st[1].max_tokens = k == 1 ? 8 : 40;
            pb_batch *b;
            pb_batch_new(m, 2, &b);
            for (int i = 0; i < 2; i++) st[i].s = new_session(m, b), st[i].index = i;
            runner rn[2];
            pthread_t th[2];
            volatile int go = 1;
            long a0 = __atomic_load_n(&n_allocs, __ATOMIC_RELAXED),
                 s0 = __atomic_load_n(&n_allocs_skipped, __ATOMIC_RELAXED);
            for (int i = 0; i < 2; i++)
                rn[i] = (runner){m, &st[i], &go}, pthread_create(&th[i], NULL, run_thread, &rn[i]);
            for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
            counts[k] = __atomic_load_n(&n_allocs, __ATOMIC_RELAXED) - a0,
            skipped[k] = __atomic_load_n(&n_allocs_skipped, __ATOMIC_RELAXED) - s0;
            for (int i = 0; i < 2; i++) pb_session_free(st[i].s);
            pb_batch_free(b);
        }
        CHECK(counts[1] == counts[2], "allocations for 2 x 8 tokens %ld = for 2 x 40 tokens %ld", counts[1], counts[2]);
        NOTE("allocations from other shared libraries (not counted): %ld, %ld, %ld", skipped[0], skipped[1],
             skipped[2]);
    }
#endif
    pb_model_close(m);
    TEST_DONE();
}
