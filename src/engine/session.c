/* session.c -- sessions: creation (everything sized once), feeding tokens in chunks, truncation, prefix
 * reuse, context shifts, cancellation, totals. Sampling and streaming live in generate.c. */
#include "engine/engine.h"

#include <stdlib.h>
#include <string.h>

pb_session_params pb_session_default_params(void) {
    pb_session_params p;
    memset(&p, 0, sizeof p);
    p.n_ctx = 0;
    p.n_threads = 0;
    p.n_batch = PB_DEFAULT_N_BATCH;
    p.kv_type = PB_KV_F16;
    p.ctx_policy = PB_CTX_ERROR;
    p.warmup = false;
    p.thermal = NULL;
    p.thermal_warm_c = 75.0f;
    p.thermal_hot_c = 85.0f;
    p.thermal_hysteresis_c = 5.0f;
    p.thermal_pause_ms = 100;
    p.thermal_interval_ms = 1000;
    return p;
}

static int32_t find_special(const pb_vocab *v, const char *text) { return pb_vocab_find(v, text, strlen(text)); }

pb_status pb_session_new(pb_model *m, const pb_session_params *params, pb_session **out) {
    if (!out) return pb_error(PB_ERR_INVALID_ARG, "pb_session_new: out is NULL");
    *out = NULL;
    if (!m) return pb_error(PB_ERR_INVALID_ARG, "pb_session_new: model is NULL");
    pb_session_params p = params ? *params : pb_session_default_params();
    const pb_hparams *hp = pb_model_hparams(m);
    int n_ctx;
    if (pb_engine_resolve_n_ctx(hp, p.n_ctx, &n_ctx) != PB_OK) return pb_error_prefix(PB_ERR_INVALID_ARG, "session: ");
    if (p.n_batch < 0 || p.n_threads < 0 || p.n_threads > 256)
        return pb_error(PB_ERR_INVALID_ARG, "session: n_batch %d / n_threads %d out of range", p.n_batch, p.n_threads);
    if (p.kv_type != PB_KV_F16 && p.kv_type != PB_KV_Q8_0 && p.kv_type != PB_KV_F32)
        return pb_error(PB_ERR_INVALID_ARG, "session: unknown kv_type %d", (int)p.kv_type);
    if (p.ctx_policy != PB_CTX_ERROR && p.ctx_policy != PB_CTX_SHIFT)
        return pb_error(PB_ERR_INVALID_ARG, "session: unknown ctx_policy %d", (int)p.ctx_policy);
    if (p.ring_extra < 0 || p.ring_extra > (1 << 24))
        return pb_error(PB_ERR_INVALID_ARG, "session: ring_extra %d is outside 0..16777216", p.ring_extra);
    int n_batch = p.n_batch > 0 ? p.n_batch : PB_DEFAULT_N_BATCH;
    if (n_batch > n_ctx) n_batch = n_ctx;

    pb_status st = pb_model_retain(m, "pb_session_new"); /* released by the session's destruction */
    if (st != PB_OK) return st;
    pb_session *s = pb_calloc(1, sizeof *s);
    if (!s) {
        pb_model_release(m);
        return PB_ERR_NOMEM;
    }
    s->model = m;
    s->hp = hp;
    s->vocab = pb_model_vocab(m);
    s->params = p;
    s->params.thermal = NULL; /* borrowed string: not kept */
    s->params.batch = NULL;   /* s->batch once joined */
    s->n_vocab = hp->n_vocab;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->n_threads = p.n_threads > 0 ? p.n_threads : pb_model_default_threads(m);
    if (s->n_threads < 1) s->n_threads = 1;
    s->pending = -1;
    s->bos = pb_vocab_bos(s->vocab);
    s->eos = pb_vocab_eos(s->vocab);
    s->eot = pb_vocab_eot(s->vocab);
    s->sot = find_special(s->vocab, "<start_of_turn>");
    s->turn_system = false;
    if (s->sot < 0 && (s->sot = find_special(s->vocab, "<|turn>")) >= 0) /* Gemma 4: eot is <turn|> (vocab.c) */
        s->turn_system = true;
    s->think_id = s->turn_system ? find_special(s->vocab, "<|think|>") : -1;
    s->chan_open = find_special(s->vocab, "<|channel>");
    s->chan_close = find_special(s->vocab, "<channel|>");
    if (s->chan_open < 0 || s->chan_close < 0) s->chan_open = s->chan_close = -1;

    if (p.batch && (st = pb_engine_batch_join(s, p.batch)) != PB_OK) goto fail;
    if (p.think && s->think_id < 0) {
        st = pb_error(PB_ERR_UNSUPPORTED, "session: thinking needs a Gemma 4 vocabulary (with <|turn> and <|think|>)");
        goto fail;
    }
    s->ring_extra = pb_engine_ring_extra(pb_model_hparams(m), &p);
    if ((st = pb_kv_new_ring(m, n_ctx, p.kv_type, s->ring_extra, &s->kv)) != PB_OK) goto fail;
    if ((st = pb_forward_ctx_new_kv(m, n_batch, s->kv, &s->fc)) != PB_OK) goto fail;
    if ((st = pb_pool_new(s->n_threads, &s->pool)) != PB_OK) goto fail;
    if ((st = pb_sampler_new(s->n_vocab, &s->smp)) != PB_OK) goto fail;
    if ((st = pb_detok_stream_new(s->vocab, &s->detok)) != PB_OK) goto fail;
    if ((st = pb_thermal_init(&s->thermal, &p, s->n_threads)) != PB_OK) goto fail;
    s->logits = pb_malloc((size_t)s->n_vocab * sizeof(float));
    s->tokens = pb_malloc((size_t)n_ctx * sizeof(int32_t));
    s->tmp = pb_malloc((size_t)n_ctx * sizeof(int32_t));
    s->stop_buf = pb_malloc(PB_STOP_BUF_CAP);
    if (!s->logits || !s->tokens || !s->tmp || !s->stop_buf) {
        st = PB_ERR_NOMEM;
        goto fail;
    }
    if (p.warmup) { /* one decode touches every weight page and wakes the threads; then forget it */
        int32_t t = s->bos >= 0 ? s->bos : 0;
        if ((st = pb_engine_feed(s, &t, 1, NULL)) != PB_OK) goto fail;
        pb_engine_reset(s);
    }
    *out = s;
    return PB_OK;
fail:
    pb_session_free(s);
    return st;
}

static void session_destroy(pb_session *s) {
    pb_engine_batch_leave(s);
    pb_kv_free(s->kv);
    pb_forward_ctx_free(s->fc);
    pb_pool_free(s->pool);
    pb_sampler_free(s->smp);
    pb_detok_stream_free(s->detok);
    free(s->logits);
    free(s->tokens);
    free(s->tmp);
    free(s->stop_buf);
    free(s->turns);
    pb_model *m = s->model;
    free(s);
    pb_model_release(m); /* closes the model if pb_model_close came before and this was its last user */
}

void pb_session_free(pb_session *s) {
    if (!s) return;
    /* Freed while a call runs on it (from that call's piece callback, or another thread): the call stops soon, as
     * cancelled (pb_engine_cancelled reads the flag set below, which no call clears; the cancel also stops a forward
     * within a layer), and frees the session as it returns (pb_engine_leave). The cancel goes first: once the flag is
     * set, the call may end and free the session at any moment. */
    __atomic_store_n(&s->cancel, 1, __ATOMIC_RELEASE);
    unsigned cur = atomic_load(&s->busy);
    for (;;) {
        if (cur & PB_SESSION_FREEING) { /* a second free while the first waits for the call: nothing to do */
            const char *fn = atomic_load(&s->busy_fn);
            pb_log(2, "pb_session_free: the session is being freed already (when %s returns); this call did nothing",
                   fn ? fn : "the call running on it");
            return;
        }
        if (atomic_compare_exchange_weak(&s->busy, &cur, cur | PB_SESSION_FREEING)) break;
    }
    if (cur == 0) session_destroy(s);
}

/* ---- one call at a time ---------------------------------------------------------------------- */

pb_status pb_engine_enter(pb_session *s, const char *fn, bool reading, bool *entered) {
    *entered = false;
    unsigned cur = 0;
    if (atomic_compare_exchange_strong(&s->busy, &cur, PB_SESSION_BUSY)) {
        atomic_store(&s->busy_tag, pb_thread_tag());
        atomic_store(&s->busy_fn, fn);
        *entered = true;
        return PB_OK;
    }
    /* busy_tag is the running call's thread, or 0 for a moment after its start: never this thread's tag unless this
     * thread runs that call (pb_engine_leave clears it before the session is free again) */
    const bool own = atomic_load(&s->busy_tag) == pb_thread_tag();
    if (own && reading && !(cur & PB_SESSION_FREEING)) return PB_OK; /* from its callback: between two tokens */
    const char *run = atomic_load(&s->busy_fn);
    if (!run) run = "another call";
    if (cur & PB_SESSION_FREEING)
        return pb_error(PB_ERR_INVALID_ARG, "%s: the session is being freed (pb_session_free came while %s ran on it)",
                        fn, run);
    if (own)
        return pb_error(PB_ERR_INVALID_ARG,
                        "%s: the session is busy: called from inside %s on it (a piece callback), where only "
                        "pb_session_cancel, _free, _save, _state_size, _state_write and the getters may be called",
                        fn, run);
    return pb_error(PB_ERR_INVALID_ARG,
                    "%s: the session is busy: %s runs on it in another thread (a session is used by one thread at a "
                    "time)",
                    fn, run);
}

pb_status pb_engine_leave(pb_session *s, bool entered, pb_status status) {
    if (!entered) return status;
    const char *fn = atomic_load(&s->busy_fn);
    atomic_store(&s->busy_fn, NULL);
    atomic_store(&s->busy_tag, 0);
    unsigned cur = PB_SESSION_BUSY;
    if (atomic_compare_exchange_strong(&s->busy, &cur, 0)) return status;
    session_destroy(s); /* pb_session_free came during the call */
    if (status == PB_ERR_CANCELLED)
        status = pb_error(PB_ERR_CANCELLED, "%s: stopped by pb_session_free during the call; the session is freed",
                          fn ? fn : "session");
    return status;
}

/* ---- feeding --------------------------------------------------------------------------------- */

pb_status pb_engine_check_ids(const pb_session *s, const char *fn, const int32_t *ids, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return pb_error(PB_ERR_INVALID_ARG, "%s: token %d at index %lld is outside the vocabulary (0..%d)", fn,
                            (int)ids[i], (long long)i, (int)s->n_vocab - 1);
    return PB_OK;
}

pb_status pb_engine_check_prompt(const pb_session *s, const char *fn, const char *ids_name, const char *n_name,
                                 const int32_t *ids, int64_t n) {
    if (n < 0) return pb_error(PB_ERR_INVALID_ARG, "%s: %s %lld is negative", fn, n_name, (long long)n);
    if (n > 0 && !ids)
        return pb_error(PB_ERR_INVALID_ARG, "%s: %s is NULL with %s %lld", fn, ids_name, n_name, (long long)n);
    if (n > s->n_ctx)
        return pb_error(PB_ERR_CONTEXT_FULL, "context full: %lld new tokens > n_ctx %d", (long long)n, s->n_ctx);
    return pb_engine_check_ids(s, fn, ids, n);
}

pb_status pb_engine_feed(pb_session *s, const int32_t *ids, int64_t n, int64_t *counter) {
    PB_ASSERT(s->n_past + n <= s->n_ctx);
    if (pb_kv_n_past(s->kv) != s->n_past)
        return pb_error(PB_ERR_INTERNAL, "session: KV holds %d positions, the session %lld (reset the session)",
                        pb_kv_n_past(s->kv), (long long)s->n_past);
    if (pb_engine_check_ids(s, "session", ids, n) != PB_OK) return PB_ERR_INVALID_ARG;
    int64_t done = 0;
    while (done < n) {
        if (!s->restoring && pb_engine_cancelled(s))
            return pb_error(PB_ERR_CANCELLED, "session: cancelled after %lld of %lld tokens", (long long)done,
                            (long long)n);
        pb_thermal_tick(&s->thermal, s->pool, false);
        int chunk = (int)(n - done < s->n_batch ? n - done : s->n_batch);
        const bool top = s->dev_sample && pb_forward_has_top(s->kv);
        pb_status st = top ? pb_forward_top(s->model, s->kv, s->fc, ids + done, chunk, &s->dev_top)
                           : pb_forward(s->model, s->kv, s->fc, s->pool, ids + done, chunk, s->logits, false,
                                        s->restoring ? NULL : &s->cancel);
        if (st != PB_OK) return st;
        s->logits_dev = top;
        /* ids may already sit at this place of the history (re-prefill after a shift) */
        if (s->tokens + s->n_past != ids + done)
            memmove(s->tokens + s->n_past, ids + done, (size_t)chunk * sizeof(int32_t));
        s->n_past += chunk;
        s->has_logits = true;
        done += chunk;
        if (counter) *counter += chunk;
    }
    return PB_OK;
}

pb_status pb_engine_feed_pending(pb_session *s, int64_t *counter) {
    if (s->pending < 0) return PB_OK;
    int32_t t = s->pending;
    pb_status st = pb_engine_feed(s, &t, 1, counter);
    if (st == PB_OK) s->pending = -1;
    return st;
}

/* Empties the KV cache. Truncating to 0 needs no ring rows, but a KV layer may still refuse it; then
 * the cache is made anew (an allocation, but at a reset, never per token). */
static pb_status kv_reset(pb_session *s) {
    if (pb_kv_truncate(s->kv, 0) == PB_OK) return PB_OK;
    pb_error_clear();
    pb_kv_cache *kv;
    pb_status st = pb_kv_new_ring(s->model, s->n_ctx, s->params.kv_type, s->ring_extra, &kv);
    if (st != PB_OK) return st;
    pb_kv_free(s->kv);
    s->kv = kv;
    return PB_OK;
}

pb_status pb_engine_reset(pb_session *s) {
    pb_status st = kv_reset(s);
    s->n_past = 0;
    s->pending = -1;
    s->has_logits = false;
    s->n_keep = 0;
    s->n_turns = 0;
    return st;
}

void pb_engine_fix_turns(pb_session *s) {
    while (s->n_turns > 0 && s->turns[s->n_turns - 1].content > s->n_past) s->n_turns--;
    if (s->n_keep > s->n_past) {
        s->n_keep = 0;
        s->n_turns = 0;
    }
}

pb_status pb_engine_add_turn(pb_session *s, int64_t start, int64_t content) {
    if (s->n_turns == s->cap_turns) {
        int cap = s->cap_turns ? 2 * s->cap_turns : 16;
        pb_turn *t = realloc(s->turns, (size_t)cap * sizeof *t);
        if (!t) return pb_error(PB_ERR_NOMEM, "session: out of memory for the turn list");
        s->turns = t;
        s->cap_turns = cap;
    }
    s->turns[s->n_turns].start = start;
    s->turns[s->n_turns].content = content;
    s->n_turns++;
    return PB_OK;
}

/* Keeps tokens [0, n) in the KV cache; when a ring layer cannot give them back, re-feeds them. */
static pb_status kv_keep(pb_session *s, int64_t n, int64_t *reprefilled) {
    s->pending = -1;
    if (n == s->n_past) return PB_OK;
    s->has_logits = false;
    if (pb_kv_truncate(s->kv, (int)n) == PB_OK) {
        s->n_past = n;
        return PB_OK;
    }
    pb_error_clear();
    pb_status st = kv_reset(s);
    s->n_past = 0;
    if (st != PB_OK) return st;
    /* the tokens kept are the caller's conversation: reading them again is a repair, which a cancel (Ctrl-C twice,
     * a cancel that stopped the call going back) must not cut short -- it emptied the context before */
    s->restoring = true;
    st = pb_engine_feed(s, s->tokens, n, reprefilled);
    s->restoring = false;
    return st;
}

pb_status pb_engine_keep(pb_session *s, int64_t n, int64_t *reprefilled) { return kv_keep(s, n, reprefilled); }

pb_status pb_engine_keep_pending(pb_session *s, int64_t n) {
    const int32_t last = s->tokens[n - 1];
    pb_status st = kv_keep(s, n - 1, &s->totals.n_reprefilled);
    if (st == PB_OK) s->pending = last;
    return st;
}

pb_status pb_engine_refresh_logits(pb_session *s) {
    if (s->has_logits) return PB_OK;
    if (s->n_past == 0)
        return pb_error(PB_ERR_INVALID_ARG, "session: the context is empty: give a prompt to start from");
    int32_t last = s->tokens[s->n_past - 1];
    pb_status st = kv_keep(s, s->n_past - 1, &s->totals.n_reprefilled);
    if (st == PB_OK) st = pb_engine_feed(s, &last, 1, &s->totals.n_reprefilled);
    return st;
}

static pb_status truncate_to(pb_session *s, int64_t n) {
    if (n < 0 || n > s->n_past)
        return pb_error(PB_ERR_INVALID_ARG,
                        "pb_session_truncate: n %lld is outside 0..%lld (the tokens in the context)", (long long)n,
                        (long long)s->n_past);
    __atomic_store_n(&s->cancel, 0, __ATOMIC_RELEASE);
    if (n == 0) {
        memset(&s->totals, 0, sizeof s->totals);
        return pb_engine_reset(s);
    }
    pb_status st = kv_keep(s, n, &s->totals.n_reprefilled);
    pb_engine_fix_turns(s);
    return st;
}

pb_status pb_session_truncate(pb_session *s, int64_t n) {
    if (!s) return pb_error(PB_ERR_INVALID_ARG, "pb_session_truncate: session is NULL");
    bool in;
    pb_status st = pb_engine_enter(s, "pb_session_truncate", false, &in);
    return st != PB_OK ? st : pb_engine_leave(s, in, truncate_to(s, n));
}

static pb_status reuse_prefix(pb_session *s, const int32_t *ids, int64_t n, int64_t *n_kept) {
    if (n < 0) /* not "nothing in common": that would drop the whole context */
        return pb_error(PB_ERR_INVALID_ARG, "pb_session_reuse_prefix: n %lld is negative", (long long)n);
    if (n > 0 && !ids)
        return pb_error(PB_ERR_INVALID_ARG, "pb_session_reuse_prefix: ids is NULL with n %lld", (long long)n);
    int64_t k = 0;
    while (k < n && k < s->n_past && s->tokens[k] == ids[k]) k++;
    /* keep at least one token to re-feed so that fresh logits come out of the remainder */
    if (k == n && k > 0) k--;
    *n_kept = k;
    if (k == s->n_past && s->pending < 0) return PB_OK;
    __atomic_store_n(&s->cancel, 0, __ATOMIC_RELEASE);
    pb_status st = k == 0 ? pb_engine_reset(s) : kv_keep(s, k, &s->totals.n_reprefilled);
    pb_engine_fix_turns(s);
    if (st != PB_OK) *n_kept = s->n_past;
    return st;
}

pb_status pb_session_reuse_prefix(pb_session *s, const int32_t *ids, int64_t n, int64_t *n_kept) {
    if (!s || !n_kept)
        return pb_error(PB_ERR_INVALID_ARG, "pb_session_reuse_prefix: %s is NULL", !s ? "session" : "n_kept");
    bool in;
    pb_status st = pb_engine_enter(s, "pb_session_reuse_prefix", false, &in);
    return st != PB_OK ? st : pb_engine_leave(s, in, reuse_prefix(s, ids, n, n_kept));
}

/* ---- context shifts -------------------------------------------------------------------------- */

/* Drops tokens [head, drop_end), moves the rest down and re-feeds it at its new positions. */
static pb_status shift(pb_session *s, int64_t head, int64_t drop_end, pb_gen_stats *stats) {
    int64_t tail = s->n_past - drop_end, delta = drop_end - head;
    int32_t pending = s->pending;
    memmove(s->tokens + head, s->tokens + drop_end, (size_t)tail * sizeof(int32_t));
    int64_t re = 0;
    pb_status st = kv_keep(s, head, &re); /* usually just a truncation */
    if (st == PB_OK) st = pb_engine_feed(s, s->tokens + head, tail, &re);
    s->pending = pending;
    /* turn records: those wholly dropped go, the rest move down by delta */
    int j = 0;
    while (j < s->n_turns && s->turns[j].content < drop_end) j++;
    if (j > 0) memmove(s->turns, s->turns + j, (size_t)(s->n_turns - j) * sizeof *s->turns); /* none: turns NULL */
    s->n_turns -= j;
    for (int i = 0; i < s->n_turns; i++) {
        s->turns[i].start -= delta;
        s->turns[i].content -= delta;
        if (s->turns[i].start < head) s->turns[i].start = head;
    }
    pb_engine_fix_turns(s);
    s->totals.n_reprefilled += re;
    s->totals.n_shifts++;
    if (stats) {
        stats->n_shifts++;
        stats->n_reprefilled += re;
    }
    return st;
}

pb_status pb_engine_make_room(pb_session *s, int64_t need, int64_t protect, pb_gen_stats *stats) {
    int64_t used = s->n_past + (s->pending >= 0 ? 1 : 0);
    if (used + need <= s->n_ctx) return PB_OK;
    if (s->params.ctx_policy != PB_CTX_SHIFT)
        return pb_error(PB_ERR_CONTEXT_FULL,
                        "context full: %lld tokens in the context + %lld new > n_ctx %d", /* callers say what to do */
                        (long long)used, (long long)need, s->n_ctx);
    int64_t head = s->n_keep;
    if (head == 0 && s->n_past > 0 && s->tokens[0] == s->bos) head = 1;
    if (s->n_turns > 0) {
        /* keep from the content of turn j: the head ends with a user-turn opening, so that is valid */
        for (int j = 1; j < s->n_turns; j++) {
            int64_t drop_end = s->turns[j].content;
            if (drop_end > protect) break;
            if (used - (drop_end - head) + need <= s->n_ctx) return shift(s, head, drop_end, stats);
        }
    } else if (s->n_past > head) {
        int64_t over = used + need - s->n_ctx, half = (s->n_past - head) / 2;
        int64_t drop_end = head + (over > half ? over : half);
        if (drop_end <= protect && drop_end <= s->n_past) return shift(s, head, drop_end, stats);
    }
    return pb_error(PB_ERR_CONTEXT_FULL,
                    "context full: %lld tokens in the context + %lld new > n_ctx %d, and dropping the older turns "
                    "(the system prompt and the current turn are kept) does not make enough room",
                    (long long)used, (long long)need, s->n_ctx);
}

static pb_status prefill(pb_session *s, const int32_t *ids, int64_t n) {
    pb_status st = pb_engine_check_prompt(s, "pb_session_prefill", "ids", "n", ids, n); /* before a shift */
    if (st != PB_OK) return st;
    __atomic_store_n(&s->cancel, 0, __ATOMIC_RELEASE);
    st = pb_engine_make_room(s, n, s->n_past, NULL);
    if (st == PB_OK) st = pb_engine_feed_pending(s, NULL);
    int64_t fed = 0;
    if (st == PB_OK) st = pb_engine_feed(s, ids, n, &fed);
    s->totals.n_prefilled += fed;
    return st;
}

pb_status pb_session_prefill(pb_session *s, const int32_t *ids, int64_t n) {
    if (!s) return pb_error(PB_ERR_INVALID_ARG, "pb_session_prefill: session is NULL");
    bool in;
    pb_status st = pb_engine_enter(s, "pb_session_prefill", false, &in);
    return st != PB_OK ? st : pb_engine_leave(s, in, prefill(s, ids, n));
}

/* ---- accessors ------------------------------------------------------------------------------- */

const float *pb_session_logits(const pb_session *s) {
    if (!s || !s->has_logits) return NULL;
    /* logits left on the GPU by a greedy feed: copied on each ask (s is const here, so the flag stays; the device
     * copy is valid until the next feed, which resets it) */
    if (s->logits_dev && pb_forward_pull_logits(s->kv, s->logits) != PB_OK) return NULL;
    return s->logits;
}

pb_status pb_engine_sample(pb_session *s, int32_t *tok) {
    if (s->has_logits && s->logits_dev) {
        if (pb_sampler_greedy_only(s->smp)) {
            *tok = s->dev_top;
            return PB_OK;
        }
        /* sampled: the best few logits (and the bias / penalty ids') from the device, where the backend can */
        int32_t ng = 0, m = pb_forward_has_logits_top(s->kv)
                                ? pb_sampler_top_need(s->smp, s->tokens, s->n_past, s->gather, &ng)
                                : 0;
        if (m > 0) {
            pb_status st = pb_forward_logits_top(s->kv, m, s->gather, ng, s->top_ids, s->top_vals, s->gather_vals);
            if (st != PB_OK) return st;
            *tok = pb_sampler_sample_top(s->smp, s->top_ids, s->top_vals, m, s->gather, s->gather_vals, ng, s->tokens,
                                         s->n_past);
            return PB_OK;
        }
        pb_status st = pb_forward_pull_logits(s->kv, s->logits);
        if (st != PB_OK) return st;
        s->logits_dev = false;
    }
    *tok = pb_sampler_sample(s->smp, s->logits, s->tokens, s->n_past);
    return PB_OK;
}

int64_t pb_session_n_past(const pb_session *s) { return s ? s->n_past : 0; }
int64_t pb_session_n_ctx(const pb_session *s) { return s ? s->n_ctx : 0; }
int pb_session_n_turns(const pb_session *s) { return s ? s->n_turns : 0; }

static pb_status pop_turn(pb_session *s) {
    if (s->n_turns == 0) return pb_error(PB_ERR_INVALID_ARG, "pb_session_pop_turn: the context holds no chat turn");
    __atomic_store_n(&s->cancel, 0, __ATOMIC_RELEASE);
    const int64_t at = s->turns[s->n_turns - 1].start;
    /* the first turn (it begins at the chat head): the head with it; a first turn after tokens fed without a chat
     * (pb_session_prefill, pb_session_generate, a loaded plain context) keeps them */
    if (at <= s->n_keep || at < 1 || at > s->n_past) return pb_engine_reset(s);
    /* The turn began by feeding the answer before it's last sampled token (its end of turn, or the token a limit
     * cut it at) when that was pending: the context goes back to before that token, pending again, as the answer
     * left it. */
    s->n_turns--;
    pb_status st = pb_engine_keep_pending(s, at);
    pb_engine_fix_turns(s);
    return st;
}

pb_status pb_session_pop_turn(pb_session *s) {
    if (!s) return pb_error(PB_ERR_INVALID_ARG, "pb_session_pop_turn: session is NULL");
    bool in;
    pb_status st = pb_engine_enter(s, "pb_session_pop_turn", false, &in);
    return st != PB_OK ? st : pb_engine_leave(s, in, pop_turn(s));
}

const int32_t *pb_session_tokens(const pb_session *s, int64_t *n) {
    if (n) *n = s ? s->n_past : 0;
    return s ? s->tokens : NULL;
}

void pb_session_cancel(pb_session *s) {
    if (s) __atomic_store_n(&s->cancel, 1, __ATOMIC_RELEASE);
}

void pb_session_get_totals(const pb_session *s, pb_session_totals *out) {
    if (!out) return;
    if (s)
        *out = s->totals;
    else
        memset(out, 0, sizeof *out);
}

void pb_session_thermal(const pb_session *s, pb_thermal_state *out) {
    if (!out) return;
    if (s)
        pb_thermal_get(&s->thermal, out);
    else
        memset(out, 0, sizeof *out);
}
