/* test_api_reentry.c -- the public API called back from a piece callback, from several threads and in the wrong
 * order of teardown: what an app embedding the library does by accident (docs/API.md, "Callbacks, threads and
 * teardown"). Each scenario runs in a child process, so a crash or a sanitizer report fails that scenario alone. Only
 * the public header. Run under ASan + UBSan and TSan too. */
#include "pb_test.h"
#include "pocketbrain.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>

static const char *model_path;
static char dir[64];

/* ---- the harness: one scenario in a child ---------------------------------------------------------------------- */

/* Runs fn in a child; its CHECK lines go to our stdout. A child that crashed, hung or ended without its checks (a
 * sanitizer's report exits 1) is one failed check here. */
static void scenario(const char *name, void (*fn)(void)) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(120);
        fn();
        fflush(stdout);
        exit(pbt_failures ? 3 : 0); /* exit, not _exit: a sanitizer's leak check and TSan's status run at exit */
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid) {
        CHECK(0, "%s: fork / wait failed", name);
        return;
    }
    if (WIFSIGNALED(ws))
        CHECK(0, "%s: the child ended by signal %d (%s)", name, WTERMSIG(ws), strsignal(WTERMSIG(ws)));
    else if (WEXITSTATUS(ws) == 3)
        pbt_failures++; /* its own checks said why */
    else
        CHECK(WEXITSTATUS(ws) == 0, "%s: the scenario's process exits 0 (got %d: a sanitizer's report above says why)",
              name, WEXITSTATUS(ws));
}

static pb_model *open_model(void) {
    pb_model_params mp = pb_model_default_params();
    mp.n_threads = 1;
    pb_model *m = NULL;
    if (pb_model_open(model_path, &mp, &m) != PB_OK) NOTE("open: %s", pb_last_error());
    return m;
}

static pb_session *new_session(pb_model *m) {
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    pb_session *s = NULL;
    if (pb_session_new(m, &sp, &s) != PB_OK) NOTE("session_new: %s", pb_last_error());
    return s;
}

static pb_gen_params greedy(int max_tokens) {
    pb_gen_params gp = pb_gen_default_params();
    gp.sampler.temperature = 0;
    gp.max_tokens = max_tokens;
    gp.stop_at_eos = false; /* every run samples max_tokens: the same length each time */
    return gp;
}

static bool same_tokens(const pb_session *a, const pb_session *b) {
    int64_t na = 0, nb = 0;
    const int32_t *ta = pb_session_tokens(a, &na), *tb = pb_session_tokens(b, &nb);
    return na == nb && na > 0 && memcmp(ta, tb, (size_t)na * sizeof *ta) == 0;
}

static char logged[1024];
static void on_log(int level, const char *msg, void *user) {
    (void)level, (void)user;
    snprintf(logged, sizeof logged, "%s", msg);
}

#define QUESTION "What is a harbor?"

/* ---- calls from inside the piece callback ---------------------------------------------------------------------- */

enum inner {
    IN_GENERATE,
    IN_CHAT,
    IN_PREFILL,
    IN_TRUNCATE,
    IN_REUSE,
    IN_POP,
    IN_LOAD,
    IN_STATE_READ,
    IN_WRITING, /* the calls above change the session: refused; those below read it: allowed */
    IN_SAVE,
    IN_STATE_SIZE,
    IN_STATE_WRITE,
    IN_GETTERS,
    IN_COUNT
};
static const char *const inner_name[IN_COUNT] = {
    "pb_session_generate", "pb_session_chat",         "pb_session_prefill",
    "pb_session_truncate", "pb_session_reuse_prefix", "pb_session_pop_turn",
    "pb_session_load",     "pb_session_state_read",   "",
    "pb_session_save",     "pb_session_state_size",   "pb_session_state_write",
    "the getters"};

typedef struct reentry {
    pb_session *s;
    pb_model *m;
    int what;      /* enum inner, or the lifecycle scenarios' own codes */
    int n_calls;   /* pieces seen */
    int at;        /* the piece at which the inner call is made */
    pb_status st;  /* what the inner call returned */
    char msg[512]; /* pb_last_error() right after it */
    bool freed;
} reentry;

static char state_buf[1 << 20];
static size_t state_len;

static bool inner_cb(const char *piece, size_t len, void *user) {
    (void)piece, (void)len;
    reentry *r = user;
    if (r->n_calls++ != r->at) return true;
    pb_gen_params gp = greedy(3);
    int32_t ids[2] = {2, 100};
    int64_t kept = 0;
    size_t n = 0;
    char path[128];
    snprintf(path, sizeof path, "%s/inner.pbs", dir);
    switch (r->what) {
    case IN_GENERATE: r->st = pb_session_generate(r->s, ids, 2, &gp, NULL, NULL, NULL); break;
    case IN_CHAT: r->st = pb_session_chat(r->s, NULL, "hi", &gp, NULL, NULL, NULL); break;
    case IN_PREFILL: r->st = pb_session_prefill(r->s, ids, 2); break;
    case IN_TRUNCATE: r->st = pb_session_truncate(r->s, 0); break;
    case IN_REUSE: r->st = pb_session_reuse_prefix(r->s, ids, 2, &kept); break;
    case IN_POP: r->st = pb_session_pop_turn(r->s); break;
    case IN_LOAD:
        snprintf(path, sizeof path, "%s/before.pbs", dir);
        r->st = pb_session_load(r->s, path);
        break;
    case IN_STATE_READ: r->st = pb_session_state_read(r->s, state_buf, state_len); break;
    case IN_SAVE: r->st = pb_session_save(r->s, path); break;
    case IN_STATE_SIZE: r->st = pb_session_state_size(r->s, &n); break;
    case IN_STATE_WRITE:
        r->st = pb_session_state_write(r->s, state_buf, sizeof state_buf, &n);
        state_len = n;
        break;
    case IN_GETTERS:
        r->st = pb_session_n_past(r->s) > 0 && pb_session_logits(r->s) && pb_session_n_turns(r->s) == 1
                    ? PB_OK
                    : PB_ERR_INTERNAL;
        break;
    }
    snprintf(r->msg, sizeof r->msg, "%s", pb_last_error());
    return true;
}

static void test_reentry(void) {
    pb_model *m = open_model();
    pb_session *ref = m ? new_session(m) : NULL;
    if (!ref) {
        CHECK(0, "re-entry: a model and a session");
        return;
    }
    pb_gen_params gp = greedy(12);
    /* the undisturbed answer, and a saved state to load from the callback */
    CHECK(pb_session_chat(ref, NULL, QUESTION, &gp, NULL, NULL, NULL) == PB_OK, "re-entry: the reference answer: %s",
          pb_last_error());
    {
        pb_session *b = new_session(m);
        char path[128];
        snprintf(path, sizeof path, "%s/before.pbs", dir);
        pb_gen_params g2 = greedy(4);
        if (b && pb_session_chat(b, NULL, "Other", &g2, NULL, NULL, NULL) == PB_OK) {
            pb_session_save(b, path);
            pb_session_state_write(b, state_buf, sizeof state_buf, &state_len);
        }
        pb_session_free(b);
    }
    for (int w = 0; w < IN_COUNT; w++) {
        if (w == IN_WRITING) continue;
        pb_session *s = new_session(m);
        reentry r = {.s = s, .m = m, .what = w, .at = 2, .st = (pb_status)-1};
        pb_gen_stats stats;
        pb_status st = pb_session_chat(s, NULL, QUESTION, &gp, inner_cb, &r, &stats);
        const bool writing = w < IN_WRITING;
        if (writing)
            CHECK(r.st == PB_ERR_INVALID_ARG && strstr(r.msg, inner_name[w]) && strstr(r.msg, "busy") &&
                      strstr(r.msg, "pb_session_chat"),
                  "re-entry: %s from the piece callback of pb_session_chat -> PB_ERR_INVALID_ARG naming both calls "
                  "(got %s: \"%.200s\")",
                  inner_name[w], pb_status_name(r.st), r.msg);
        else
            CHECK(r.st == PB_OK, "re-entry: %s from the piece callback works (got %s: \"%.200s\")", inner_name[w],
                  pb_status_name(r.st), r.msg);
        CHECK(st == PB_OK && stats.n_generated == 12 && same_tokens(s, ref),
              "re-entry: after %s from the callback the answer is the undisturbed one (%s, %lld tokens)", inner_name[w],
              pb_status_name(st), (long long)stats.n_generated);
        pb_gen_params g2 = greedy(3);
        st = pb_session_chat(s, NULL, "And a lighthouse?", &g2, NULL, NULL, NULL);
        CHECK(st == PB_OK && pb_session_n_turns(s) == 2, "re-entry: after %s the session takes the next turn (%s)",
              inner_name[w], pb_last_error());
        pb_session_free(s);
    }
    /* a saved state from inside the callback is the state between two tokens: it loads and goes on as the original */
    {
        pb_session *s = new_session(m), *t = new_session(m);
        reentry r = {.s = s, .what = IN_STATE_WRITE, .at = 5, .st = (pb_status)-1};
        pb_session_chat(s, NULL, QUESTION, &gp, inner_cb, &r, NULL);
        CHECK(r.st == PB_OK && pb_session_state_read(t, state_buf, state_len) == PB_OK && pb_session_n_past(t) > 0 &&
                  pb_session_n_past(t) < pb_session_n_past(s),
              "re-entry: a state written from the callback loads (n_past %lld of %lld): %s",
              (long long)pb_session_n_past(t), (long long)pb_session_n_past(s), pb_last_error());
        pb_session_free(s);
        pb_session_free(t);
    }
    pb_session_free(ref);
    pb_model_close(m);
}

/* pb_session_cancel from the callback stops the call; the session goes on. */
static bool cancel_cb(const char *piece, size_t len, void *user) {
    (void)piece, (void)len;
    reentry *r = user;
    if (r->n_calls++ == r->at) pb_session_cancel(r->s);
    return true;
}

static void test_cancel_inside(void) {
    pb_model *m = open_model();
    pb_session *s = m ? new_session(m) : NULL;
    if (!s) {
        CHECK(0, "cancel inside: a session");
        return;
    }
    pb_gen_params gp = greedy(12);
    reentry r = {.s = s, .at = 3};
    pb_gen_stats stats;
    pb_status st = pb_session_chat(s, NULL, QUESTION, &gp, cancel_cb, &r, &stats);
    CHECK(st == PB_ERR_CANCELLED && stats.stop_reason == PB_STOP_CANCELLED && stats.n_generated < 12,
          "cancel inside: pb_session_cancel from the callback -> PB_ERR_CANCELLED after that token (%s, %lld)",
          pb_status_name(st), (long long)stats.n_generated);
    CHECK(pb_session_chat(s, NULL, "More?", &gp, NULL, NULL, NULL) == PB_OK, "cancel inside: the next turn runs: %s",
          pb_last_error());
    pb_session_free(s);
    pb_model_close(m);
}

/* ---- freeing from inside the callback -------------------------------------------------------------------------- */

static bool free_cb(const char *piece, size_t len, void *user) {
    (void)piece, (void)len;
    reentry *r = user;
    if (r->n_calls++ != r->at) return true;
    if (r->what == 0 || r->what == 1) {
        pb_session_free(r->s);
        r->freed = true;
        if (r->what == 1) pb_session_free(r->s); /* twice: the second finds it being freed */
        int32_t id = 2;
        r->st = pb_session_prefill(r->s, &id, 1);
        snprintf(r->msg, sizeof r->msg, "%s", pb_last_error());
    } else {
        pb_model_close(r->m);
        pb_session *s2 = NULL;
        r->st = pb_session_new(r->m, NULL, &s2);
        snprintf(r->msg, sizeof r->msg, "%s", pb_last_error());
    }
    return true;
}

static void test_free_inside(void) {
    pb_model *m = open_model();
    if (!m) {
        CHECK(0, "free inside: a model");
        return;
    }
    pb_set_log(on_log, NULL);
    pb_gen_params gp = greedy(12);
    for (int twice = 0; twice < 2; twice++) {
        pb_session *s = new_session(m);
        reentry r = {.s = s, .m = m, .what = twice, .at = 2};
        logged[0] = 0;
        pb_gen_stats stats;
        pb_status st = pb_session_chat(s, NULL, QUESTION, &gp, free_cb, &r, &stats);
        CHECK(st == PB_ERR_CANCELLED && strstr(pb_last_error(), "pb_session_free") &&
                  stats.stop_reason == PB_STOP_CANCELLED && stats.n_generated < 12,
              "free inside%s: pb_session_free from the callback stops the call (PB_ERR_CANCELLED naming it, after "
              "that token) and frees the session as it returns (got %s: \"%s\", %lld tokens)",
              twice ? " (twice)" : "", pb_status_name(st), pb_last_error(), (long long)stats.n_generated);
        CHECK(r.st == PB_ERR_INVALID_ARG && strstr(r.msg, "being freed"),
              "free inside%s: a call on the freed session from the same callback is refused (got %s: \"%s\")",
              twice ? " (twice)" : "", pb_status_name(r.st), r.msg);
        if (twice)
            CHECK(strstr(logged, "pb_session_free") && strstr(logged, "already"),
                  "free inside: the second pb_session_free did nothing, said so to the log sink (\"%s\")", logged);
    }
    /* a member of a batch: it leaves the batch as it is freed, at the end of its call */
    pb_batch *b = NULL;
    if (pb_batch_new(m, 2, &b) == PB_OK) {
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = 256;
        sp.n_threads = 1;
        sp.batch = b;
        pb_session *s = NULL;
        pb_session_new(m, &sp, &s);
        reentry r = {.s = s, .m = m, .what = 0, .at = 2};
        pb_status st = pb_session_chat(s, NULL, QUESTION, &gp, free_cb, &r, NULL);
        pb_batch_stats bs;
        pb_batch_get_stats(b, &bs);
        CHECK(st == PB_ERR_CANCELLED && bs.n_sessions == 0 && bs.n_decoding == 0,
              "free inside: a batch member freed from its callback has left the batch when the call returns (%s, %d "
              "members)",
              pb_status_name(st), bs.n_sessions);
        logged[0] = 0;
        pb_batch_free(b);
        CHECK(!logged[0], "free inside: the batch is then freed at once, no warning (\"%s\")", logged);
    } else {
        CHECK(0, "free inside: a batch: %s", pb_last_error());
    }
    pb_set_log(NULL, NULL);
    pb_model_close(m);
}

static void test_model_close_inside(void) {
    pb_model *m = open_model();
    pb_session *ref = m ? new_session(m) : NULL, *s = m ? new_session(m) : NULL;
    if (!s || !ref) {
        CHECK(0, "model close inside: sessions");
        return;
    }
    pb_set_log(on_log, NULL);
    pb_gen_params gp = greedy(12);
    pb_session_chat(ref, NULL, QUESTION, &gp, NULL, NULL, NULL);
    pb_session_free(ref);
    reentry r = {.s = s, .m = m, .what = 2, .at = 2};
    pb_status st = pb_session_chat(s, NULL, QUESTION, &gp, free_cb, &r, NULL);
    CHECK(st == PB_OK, "model close inside: pb_model_close from the callback: the answer goes on (%s)",
          pb_last_error());
    CHECK(strstr(logged, "pb_model_close") && strstr(logged, "still has 1 user "),
          "model close inside: the log sink was told the model closes with its last session (\"%s\")", logged);
    CHECK(r.st == PB_ERR_INVALID_ARG && strstr(r.msg, "pb_session_new") && strstr(r.msg, "closed"),
          "model close inside: a new session of the closed model is refused (got %s: \"%s\")", pb_status_name(r.st),
          r.msg);
    CHECK(pb_session_chat(s, NULL, "And a lighthouse?", &gp, NULL, NULL, NULL) == PB_OK,
          "model close inside: the session still answers: %s", pb_last_error());
    pb_session_free(s); /* closes the model */
    pb_set_log(NULL, NULL);
}

/* ---- teardown in the wrong order ------------------------------------------------------------------------------- */

static void test_model_closed_first(void) {
    pb_model *m = open_model();
    pb_session *ref = m ? new_session(m) : NULL, *s = m ? new_session(m) : NULL;
    pb_batch *b = NULL;
    if (!s || !ref || pb_batch_new(m, 2, &b) != PB_OK) {
        CHECK(0, "model closed first: sessions and a batch");
        return;
    }
    pb_set_log(on_log, NULL);
    pb_gen_params gp = greedy(12);
    pb_session_chat(ref, NULL, QUESTION, &gp, NULL, NULL, NULL);
    pb_session_chat(s, NULL, QUESTION, &gp, NULL, NULL, NULL);
    pb_model_close(m);
    CHECK(strstr(logged, "3 users"), "model closed first: the log sink heard of its 3 users (\"%s\")", logged);
    pb_gen_params g2 = greedy(6);
    pb_status st1 = pb_session_chat(s, NULL, "And a lighthouse?", &g2, NULL, NULL, NULL);
    pb_status st2 = pb_session_chat(ref, NULL, "And a lighthouse?", &g2, NULL, NULL, NULL);
    CHECK(st1 == PB_OK && st2 == PB_OK && same_tokens(s, ref),
          "model closed first: its sessions still answer, as before (%s)", pb_last_error());
    pb_session *s2 = NULL;
    pb_status st = pb_session_new(m, NULL, &s2);
    CHECK(st == PB_ERR_INVALID_ARG && !s2 && strstr(pb_last_error(), "closed"),
          "model closed first: pb_session_new on it is refused (%s: \"%s\")", pb_status_name(st), pb_last_error());
    pb_batch *b2 = NULL;
    st = pb_batch_new(m, 2, &b2);
    CHECK(st == PB_ERR_INVALID_ARG && !b2 && strstr(pb_last_error(), "closed"),
          "model closed first: pb_batch_new on it is refused (%s: \"%s\")", pb_status_name(st), pb_last_error());
    logged[0] = 0;
    pb_model_close(m);
    CHECK(strstr(logged, "already"), "model closed first: a second pb_model_close does nothing, said so (\"%s\")",
          logged);
    pb_session_free(s);
    pb_batch_free(b);
    pb_session_free(ref); /* the last user: the model closes here (ASan: no leak, no use after free) */
    pb_set_log(NULL, NULL);
}

/* ---- threads --------------------------------------------------------------------------------------------------- */

static pb_model *shared_model;

typedef struct job {
    const char *text;
    int32_t toks[256];
    int64_t n;
    pb_status st;
} job;

static void *own_session(void *arg) {
    job *j = arg;
    pb_session *s = new_session(shared_model);
    pb_gen_params gp = pb_gen_default_params(); /* seeded sampling, not greedy */
    gp.sampler.seed = 42;
    gp.max_tokens = 16;
    gp.stop_at_eos = false;
    j->st = s ? pb_session_chat(s, "Be brief.", j->text, &gp, NULL, NULL, NULL) : PB_ERR_INTERNAL;
    const int32_t *t = pb_session_tokens(s, &j->n);
    if (j->n > 256) j->n = 256;
    if (t) memcpy(j->toks, t, (size_t)j->n * sizeof *t);
    pb_session_free(s);
    return NULL;
}

static void test_threads_own_sessions(void) {
    shared_model = open_model();
    if (!shared_model) {
        CHECK(0, "threads: a model");
        return;
    }
    job seq[3] = {{.text = QUESTION}, {.text = "Name a color."}, {.text = "Count to five."}};
    job par[3] = {{.text = QUESTION}, {.text = "Name a color."}, {.text = "Count to five."}};
    for (int i = 0; i < 3; i++) own_session(&seq[i]);
    pthread_t th[3];
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, own_session, &par[i]);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++)
        CHECK(par[i].st == PB_OK && par[i].n == seq[i].n && par[i].n > 0 &&
                  memcmp(par[i].toks, seq[i].toks, (size_t)seq[i].n * sizeof(int32_t)) == 0,
              "threads: session %d on a shared model in its own thread gives the sequential tokens (%lld / %lld)", i,
              (long long)par[i].n, (long long)seq[i].n);
    pb_model_close(shared_model);
}

/* One session, two threads: A answers; B tries calls while A is inside its callback (deterministic overlap). */
typedef struct duo {
    pb_session *s;
    atomic_int a_inside, b_done;
    pb_status b_prefill, b_save, a_status;
    char b_prefill_msg[512], b_save_msg[512], a_msg[512];
    int pieces;
    bool b_frees;
} duo;

static bool duo_cb(const char *piece, size_t len, void *user) {
    (void)piece, (void)len;
    duo *d = user;
    if (d->pieces++ == 2) {
        atomic_store(&d->a_inside, 1);
        while (!atomic_load(&d->b_done)) usleep(1000);
    }
    return true;
}

static void *duo_a(void *arg) {
    duo *d = arg;
    pb_gen_params gp = greedy(8);
    d->a_status = pb_session_chat(d->s, NULL, QUESTION, &gp, duo_cb, d, NULL);
    snprintf(d->a_msg, sizeof d->a_msg, "%s", pb_last_error());
    return NULL;
}

static void *duo_b(void *arg) {
    duo *d = arg;
    while (!atomic_load(&d->a_inside)) usleep(1000);
    int32_t ids[2] = {2, 100};
    d->b_prefill = pb_session_prefill(d->s, ids, 2);
    snprintf(d->b_prefill_msg, sizeof d->b_prefill_msg, "%s", pb_last_error());
    char path[128];
    snprintf(path, sizeof path, "%s/b.pbs", dir);
    d->b_save = pb_session_save(d->s, path);
    snprintf(d->b_save_msg, sizeof d->b_save_msg, "%s", pb_last_error());
    if (d->b_frees) pb_session_free(d->s); /* A's call frees it as it returns */
    atomic_store(&d->b_done, 1);
    return NULL;
}

static void test_threads_one_session(void) {
    pb_model *m = open_model();
    pb_session *ref = m ? new_session(m) : NULL;
    if (!ref) {
        CHECK(0, "one session, two threads: a model");
        return;
    }
    pb_gen_params gp = greedy(8);
    pb_session_chat(ref, NULL, QUESTION, &gp, NULL, NULL, NULL);
    for (int frees = 0; frees < 2; frees++) {
        duo *d = calloc(1, sizeof *d);
        d->s = new_session(m);
        d->b_frees = frees;
        pthread_t a, b;
        pthread_create(&a, NULL, duo_a, d);
        pthread_create(&b, NULL, duo_b, d);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        if (!frees) {
            CHECK(d->b_prefill == PB_ERR_INVALID_ARG && strstr(d->b_prefill_msg, "busy") &&
                      strstr(d->b_prefill_msg, "another thread") && strstr(d->b_prefill_msg, "pb_session_chat"),
                  "one session, two threads: pb_session_prefill while pb_session_chat runs in another thread is "
                  "refused naming both (got %s: \"%s\")",
                  pb_status_name(d->b_prefill), d->b_prefill_msg);
            CHECK(d->b_save == PB_ERR_INVALID_ARG && strstr(d->b_save_msg, "another thread"),
                  "one session, two threads: pb_session_save from another thread while it answers is refused (got "
                  "%s: \"%s\")",
                  pb_status_name(d->b_save), d->b_save_msg);
            CHECK(d->a_status == PB_OK && same_tokens(d->s, ref),
                  "one session, two threads: the running answer is undisturbed (%s)", d->a_msg);
            pb_session_free(d->s);
        } else {
            CHECK(d->a_status == PB_ERR_CANCELLED && strstr(d->a_msg, "pb_session_free"),
                  "one session, two threads: pb_session_free from another thread stops the answer and frees the "
                  "session when it returns (got %s: \"%s\")",
                  pb_status_name(d->a_status), d->a_msg);
        }
        free(d);
    }
    pb_session_free(ref);
    pb_model_close(m);
}

/* pb_session_cancel from another thread while a generation runs without a limit. */
typedef struct canceller {
    pb_session *s;
    atomic_int pieces;
} canceller;

static bool count_cb(const char *piece, size_t len, void *user) {
    (void)piece, (void)len;
    atomic_fetch_add(&((canceller *)user)->pieces, 1);
    return true;
}

static void *cancel_thread(void *arg) {
    canceller *c = arg;
    while (atomic_load(&c->pieces) < 5) usleep(500);
    pb_session_cancel(c->s);
    return NULL;
}

static void test_cancel_thread(void) {
    pb_model *m = open_model();
    pb_session *s = m ? new_session(m) : NULL;
    if (!s) {
        CHECK(0, "cancel from a thread: a session");
        return;
    }
    canceller c = {.s = s};
    pthread_t t;
    pthread_create(&t, NULL, cancel_thread, &c);
    pb_gen_params gp = greedy(0); /* no limit: only the cancel (or a full context) ends it */
    pb_gen_stats stats;
    pb_status st = pb_session_chat(s, NULL, QUESTION, &gp, count_cb, &c, &stats);
    pthread_join(t, NULL);
    CHECK(st == PB_ERR_CANCELLED && stats.stop_reason == PB_STOP_CANCELLED && stats.n_generated >= 5 &&
              pb_session_n_past(s) < pb_session_n_ctx(s),
          "cancel from a thread: the answer stops with PB_ERR_CANCELLED (%s, %lld tokens)", pb_last_error(),
          (long long)stats.n_generated);
    pb_gen_params g2 = greedy(3);
    CHECK(pb_session_chat(s, NULL, "More?", &g2, NULL, NULL, NULL) == PB_OK,
          "cancel from a thread: the next turn runs: %s", pb_last_error());
    pb_session_free(s);
    pb_model_close(m);
}

/* pb_last_error is per thread: an error in one thread does not show in another. */
static void *error_thread(void *arg) {
    char *out = arg;
    pb_session_prefill(NULL, NULL, 0);
    snprintf(out, 512, "%s", pb_last_error());
    return NULL;
}

static void test_error_per_thread(void) {
    pb_model *m = open_model();
    pb_session *s = m ? new_session(m) : NULL;
    if (!s) {
        CHECK(0, "errors per thread: a session");
        return;
    }
    CHECK(pb_session_truncate(s, 5) == PB_ERR_INVALID_ARG, "errors per thread: an error on the main thread");
    char mine[512], theirs[512];
    snprintf(mine, sizeof mine, "%s", pb_last_error());
    pthread_t t;
    pthread_create(&t, NULL, error_thread, theirs);
    pthread_join(t, NULL);
    CHECK(strstr(mine, "pb_session_truncate") && strcmp(pb_last_error(), mine) == 0 &&
              strstr(theirs, "pb_session_prefill"),
          "errors per thread: each thread keeps its own pb_last_error (\"%s\" / \"%s\")", pb_last_error(), theirs);
    pb_session_free(s);
    pb_model_close(m);
}

/* pb_set_log on one thread while another logs (a model closed before its session warns): the sink is read and set
 * under a lock (TSan saw a data race on it). The sink may also set itself from inside. */
static atomic_int n_logged;
static void counting_log(int level, const char *msg, void *user) {
    (void)level, (void)msg;
    atomic_fetch_add(&n_logged, 1);
    pb_set_log(counting_log, user); /* a sink that sets the sink: no deadlock */
}

static void *closer_thread(void *arg) {
    pb_model_close(arg); /* its session is alive: a warning to the sink */
    return NULL;
}

static void test_log_sink_threads(void) {
    pb_model *m = open_model();
    pb_session *s = m ? new_session(m) : NULL;
    if (!s) {
        CHECK(0, "log sink: a session");
        return;
    }
    pb_set_log(counting_log, NULL);
    pthread_t t;
    pthread_create(&t, NULL, closer_thread, m);
    for (int i = 0; i < 1000; i++) pb_set_log(counting_log, NULL);
    pthread_join(t, NULL);
    CHECK(atomic_load(&n_logged) == 1, "log sink: set on one thread while another logs: the warning came once (%d)",
          atomic_load(&n_logged));
    pb_session_free(s);
    pb_set_log(NULL, NULL);
}

int main(void) {
    model_path = pbt_fixture("model/gemma2-tiny-v.q8_0.gguf");
    if (!model_path) TEST_DONE();
    snprintf(dir, sizeof dir, "/tmp/pb_reentry_XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    scenario("calls from the piece callback", test_reentry);
    scenario("cancel from the piece callback", test_cancel_inside);
    scenario("pb_session_free from the piece callback", test_free_inside);
    scenario("pb_model_close from the piece callback", test_model_close_inside);
    scenario("pb_model_close before its sessions and batch", test_model_closed_first);
    scenario("sessions of one model on threads", test_threads_own_sessions);
    scenario("one session on two threads", test_threads_one_session);
    scenario("pb_session_cancel from another thread", test_cancel_thread);
    scenario("pb_last_error per thread", test_error_per_thread);
    scenario("pb_set_log while another thread logs", test_log_sink_threads);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) NOTE("could not remove %s", dir);
    TEST_DONE();
}
