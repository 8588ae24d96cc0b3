/* batch.c -- continuous batching: the decode steps of sessions of one model that generate at the same time run as
 * one pb_forward_batch (the weights read once for all). A rendezvous without a thread of its own: the first member
 * to submit its token leads the step, on its own pool. No math here; nothing is allocated per token. */
#include "engine/engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The leader's wait for the members still missing: a quarter of the recent step time, so a member that is late
 * (a slow client behind its callback, a thermal pause) costs the others at most ~25% of a step, within
 * [0.25, 2] ms: above the spread of members that are merely sampling (greedy: microseconds; top-k/top-p over a
 * 256k vocabulary: a fraction of a millisecond), and never more than 2 ms of anyone's time per token. */
#define WAIT_MIN_MS 0.25
#define WAIT_MAX_MS 2.0
#define WAIT_SHARE  0.25
#define N_HIST      7

struct pb_batch {
    pb_model *model;
    int max;
    int32_t n_vocab;
    bool gpu; /* the model runs on the GPU: logits stay there (pb_forward_pull_logits) */
    pthread_mutex_t mu;
    pthread_cond_t lead; /* the forming step's leader: an arrival, a member ending its loop, the running step's end */
    pthread_cond_t done; /* members: the result of their step is in */
    int n_members;       /* sessions created with this batch */
    bool orphaned;       /* pb_batch_free came while sessions still used it: the last of them to leave frees it */
    int n_decoding;      /* of them, inside their sampling loop */
    pb_session **group;  /* [max] the forming step, in order of arrival: group[0] leads it */
    int n_group;
    bool running;     /* a step runs (one at a time) */
    double step_ewma; /* ms: recent step time, for the wait bound (0: none yet) */
    /* the running step (its leader owns these outside the lock) */
    pb_session **run;   /* [max] */
    pb_kv_cache **kvs;  /* [max] */
    int32_t *toks;      /* [max] */
    int32_t *top;       /* [max] greedy picks (GPU) */
    float *logits;      /* [max][n_vocab] (CPU) */
    pb_forward_ctx *fc; /* n_batch = max: a step is never split; sized for the widest KV row, so any kv_type */
    pb_batch_stats stats;
};

static void lock(const pb_batch *b) { pthread_mutex_lock((pthread_mutex_t *)&b->mu); }
static void unlock(const pb_batch *b) { pthread_mutex_unlock((pthread_mutex_t *)&b->mu); }

pb_status pb_batch_new(pb_model *m, int max_sessions, pb_batch **out) {
    if (!out) return pb_error(PB_ERR_INVALID_ARG, "pb_batch_new: out is NULL");
    *out = NULL;
    if (!m) return pb_error(PB_ERR_INVALID_ARG, "pb_batch_new: model is NULL");
    if (max_sessions < 1 || max_sessions > PB_BATCH_MAX_SESSIONS)
        return pb_error(PB_ERR_INVALID_ARG, "pb_batch_new: max_sessions %d out of range (1..%d)", max_sessions,
                        PB_BATCH_MAX_SESSIONS);
    pb_status st = pb_model_retain(m, "pb_batch_new"); /* released by batch_destroy */
    if (st != PB_OK) return st;
    pb_batch *b = pb_calloc(1, sizeof *b);
    if (!b) {
        pb_model_release(m);
        return pb_error(PB_ERR_NOMEM, "batch: out of memory");
    }
    b->model = m;
    b->max = max_sessions;
    b->n_vocab = pb_model_hparams(m)->n_vocab;
    pb_model_info info;
    b->gpu = pb_model_get_info(m, &info) == PB_OK && info.gpu;
    b->stats.max_sessions = max_sessions;
    size_t n = (size_t)max_sessions;
    b->group = pb_calloc(n, sizeof *b->group);
    b->run = pb_calloc(n, sizeof *b->run);
    b->kvs = pb_calloc(n, sizeof *b->kvs);
    b->toks = pb_calloc(n, sizeof *b->toks);
    b->top = pb_calloc(n, sizeof *b->top);
    if (!b->gpu) b->logits = pb_malloc(n * (size_t)b->n_vocab * sizeof(float));
    if (!b->group || !b->run || !b->kvs || !b->toks || !b->top || (!b->gpu && !b->logits))
        st = pb_error(PB_ERR_NOMEM, "batch: out of memory for %d sessions", max_sessions);
    if (st == PB_OK) st = pb_forward_ctx_new(m, max_sessions, &b->fc);
    if (st != PB_OK) {
        pb_forward_ctx_free(b->fc);
        free(b->group), free(b->run), free(b->kvs), free(b->toks), free(b->top), free(b->logits);
        free(b);
        pb_model_release(m);
        return st;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the leader's bounded wait */
    pthread_cond_init(&b->lead, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&b->done, NULL);
    *out = b;
    return PB_OK;
}

static void batch_destroy(pb_batch *b) {
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->lead);
    pthread_cond_destroy(&b->done);
    pb_forward_ctx_free(b->fc);
    free(b->group), free(b->run), free(b->kvs), free(b->toks), free(b->top), free(b->logits);
    pb_model *m = b->model;
    free(b);
    pb_model_release(m);
}

void pb_batch_free(pb_batch *b) {
    if (!b) return;
    /* The batch must outlive its sessions. Freed too early (an app's teardown in the wrong order), it is not pulled
     * from under them, nor is the process aborted: it stays theirs and the last of them to leave frees it. */
    lock(b);
    int n = b->n_members;
    if (n > 0) b->orphaned = true;
    unlock(b);
    if (n == 0)
        batch_destroy(b);
    else
        pb_log(2, "pb_batch_free: %d sessions still use the batch; it is freed with the last of them", n);
}

void pb_batch_get_stats(const pb_batch *b, pb_batch_stats *out) {
    if (!out) return;
    if (!b) {
        memset(out, 0, sizeof *out);
        return;
    }
    lock(b);
    *out = b->stats;
    out->n_sessions = b->n_members;
    out->n_decoding = b->n_decoding;
    unlock(b);
}

/* ---- membership ------------------------------------------------------------------------------------- */

/* "'gemma-2-2b-it' (gemma2 Q4_K_M)": how an error names a model. */
static void model_label(const pb_model *m, char *buf, size_t cap) {
    pb_model_info info;
    if (pb_model_get_info(m, &info) != PB_OK) {
        snprintf(buf, cap, "?");
        return;
    }
    snprintf(buf, cap, "'%.100s' (%s %s)", info.name[0] ? info.name : "unnamed", info.arch, info.file_type);
}

pb_status pb_engine_batch_join(pb_session *s, pb_batch *b) {
    if (b->model != s->model) {
        char mine[200], theirs[200];
        model_label(s->model, mine, sizeof mine);
        model_label(b->model, theirs, sizeof theirs);
        return pb_error(PB_ERR_INVALID_ARG,
                        "session: the batch serves sessions of model %s, not of model %s%s (one batch per model)",
                        theirs, mine, strcmp(mine, theirs) == 0 ? ", another pb_model_open of it" : "");
    }
    lock(b);
    if (b->n_members >= b->max) {
        int max = b->max;
        unlock(b);
        return pb_error(PB_ERR_INVALID_ARG, "session: the batch is full (%d sessions, its max_sessions)", max);
    }
    b->n_members++;
    unlock(b);
    s->batch = b;
    return PB_OK;
}

void pb_engine_batch_leave(pb_session *s) {
    pb_batch *b = s->batch;
    if (!b) return;
    lock(b);
    b->n_members--;
    bool last = b->orphaned && b->n_members == 0;
    unlock(b);
    s->batch = NULL;
    if (last) batch_destroy(b); /* pb_batch_free was called before this session was freed */
}

void pb_engine_batch_begin(pb_session *s) {
    pb_batch *b = s->batch;
    lock(b);
    b->n_decoding++;
    unlock(b);
}

void pb_engine_batch_end(pb_session *s) {
    pb_batch *b = s->batch;
    lock(b);
    b->n_decoding--;
    if (b->n_group > 0) pthread_cond_broadcast(&b->lead); /* the step may be complete without this one */
    unlock(b);
}

/* ---- a step ------------------------------------------------------------------------------------------ */

static bool cancelled(const pb_session *s) { return pb_engine_cancelled(s); }

static int hist_bucket(int n) {
    int k = 0;
    while (k < N_HIST - 1 && (1 << k) < n) k++;
    return k; /* 1, 2, 3-4, 5-8, ... */
}

/* Runs the taken step (lock not held): b->run[0..n) fed their pending tokens, each member's status set. */
static void step(pb_batch *b, pb_session *leader, int n) {
    pb_status st;
    if (n == 1) {
        /* alone: the session's own path (its scratch, pool and cancel; the GPU argmax where its sampler is greedy) */
        st = pb_engine_feed_pending(b->run[0], NULL);
    } else {
        for (int i = 0; i < n; i++) {
            b->kvs[i] = b->run[i]->kv;
            b->toks[i] = b->run[i]->pending;
        }
        const bool top = b->gpu && pb_forward_has_top(b->kvs[0]);
        st = pb_forward_batch(b->model, b->kvs, b->fc, leader->pool, b->toks, n, b->gpu ? NULL : b->logits,
                              top ? b->top : NULL);
        for (int i = 0; i < n && st == PB_OK; i++) { /* what pb_engine_feed leaves after one token */
            pb_session *s = b->run[i];
            s->tokens[s->n_past++] = b->toks[i];
            s->has_logits = true;
            s->pending = -1;
            if (!b->gpu) {
                memcpy(s->logits, b->logits + (size_t)i * (size_t)b->n_vocab, (size_t)b->n_vocab * sizeof(float));
                s->logits_dev = false;
            } else if (top) { /* left on the device: the greedy pick here (pb_engine_sample reads the rest) */
                s->dev_top = b->top[i];
                s->logits_dev = true;
            } else {
                pb_status ps = pb_forward_pull_logits(s->kv, s->logits);
                s->logits_dev = false;
                s->bt_status = ps;
                if (ps != PB_OK) snprintf(s->bt_msg, sizeof s->bt_msg, "%s", pb_last_error());
                continue;
            }
            s->bt_status = PB_OK;
        }
    }
    for (int i = 0; i < n; i++) {
        if (st == PB_OK && n > 1) continue; /* set above */
        b->run[i]->bt_status = st;
        if (st != PB_OK) snprintf(b->run[i]->bt_msg, sizeof b->run[i]->bt_msg, "%s", pb_last_error());
    }
}

/* Leads the forming step (lock held, returns with it held): waits for the running step to end, then for the other
 * decoding members (bounded), takes the group, runs it and wakes its members. */
static void lead(pb_batch *b, pb_session *self) {
    while (b->running) pthread_cond_wait(&b->lead, &b->mu);
    double t_wait = pb_time_ms();
    if (b->n_group < b->n_decoding) {
        double bound = b->step_ewma > 0 ? WAIT_SHARE * b->step_ewma : WAIT_MAX_MS;
        bound = bound < WAIT_MIN_MS ? WAIT_MIN_MS : bound > WAIT_MAX_MS ? WAIT_MAX_MS : bound;
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        long long ns = (long long)dl.tv_nsec + (long long)(bound * 1e6);
        dl.tv_sec += (time_t)(ns / 1000000000LL);
        dl.tv_nsec = (long)(ns % 1000000000LL);
        while (b->n_group < b->n_decoding)
            if (pthread_cond_timedwait(&b->lead, &b->mu, &dl) == ETIMEDOUT) break;
    }
    double t0 = pb_time_ms();
    b->stats.wait_ms += t0 - t_wait;
    /* take the group; a member cancelled meanwhile leaves with its token not fed, as a cancelled decode alone */
    int n = 0;
    bool dropped = false;
    for (int i = 0; i < b->n_group; i++) {
        pb_session *s = b->group[i];
        if (cancelled(s)) {
            s->bt_status = PB_ERR_CANCELLED;
            snprintf(s->bt_msg, sizeof s->bt_msg, "session: cancelled after 0 of 1 tokens (waiting for a batch)");
            s->bt_done = true;
            dropped = true;
        } else {
            b->run[n++] = s;
        }
    }
    b->n_group = 0;
    if (dropped) pthread_cond_broadcast(&b->done);
    if (n == 0) return;
    b->running = true;
    unlock(b);
    step(b, self, n);
    double t = pb_time_ms() - t0;
    lock(b);
    b->running = false;
    for (int i = 0; i < n; i++) b->run[i]->bt_done = true;
    b->step_ewma = b->step_ewma > 0 ? 0.8 * b->step_ewma + 0.2 * t : t;
    b->stats.n_steps++;
    b->stats.n_tokens += n;
    b->stats.step_ms += t;
    if (n > b->stats.max_size) b->stats.max_size = n;
    b->stats.size_hist[hist_bucket(n)]++;
    pthread_cond_broadcast(&b->done);
    pthread_cond_broadcast(&b->lead); /* the next step's leader may be waiting for this one's end */
}

pb_status pb_engine_batch_feed(pb_session *s) {
    if (s->pending < 0) return PB_OK;
    PB_ASSERT(s->n_past < s->n_ctx);
    if (pb_kv_n_past(s->kv) != s->n_past)
        return pb_error(PB_ERR_INTERNAL, "session: KV holds %d positions, the session %lld (reset the session)",
                        pb_kv_n_past(s->kv), (long long)s->n_past);
    pb_thermal_tick(&s->thermal, s->pool, false);
    pb_batch *b = s->batch;
    lock(b);
    s->bt_done = false;
    int seat = b->n_group++;
    PB_ASSERT(seat < b->max);
    b->group[seat] = s;
    if (seat == 0) {
        lead(b, s);
    } else if (b->n_group >= b->n_decoding) {
        pthread_cond_broadcast(&b->lead);
    }
    while (!s->bt_done) pthread_cond_wait(&b->done, &b->mu);
    pb_status st = s->bt_status;
    unlock(b);
    return st == PB_OK ? PB_OK : pb_error(st, "%s", s->bt_msg);
}
