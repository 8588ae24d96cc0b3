/* server_slots.c -- jobs, the bounded queue and the slot workers that run them on their sessions: prefix reuse,
 * cancellation, the FAQ fallback. No HTTP and no JSON parsing here (answers are shaped by server_sse.c). */
#include "base/base.h"
#include "server/server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void pb_server_job_release(job *j) {
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    if (j->holds_model) pb_server_model_release(j->srv);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->stop);
    free(j->bias_ids);
    free(j->bias_values);
    free(j->prompt);
    free(j->out);
    free(j->sources_json);
    free(j->question);
    for (int i = 0; j->texts && i < j->n_msgs; i++) free(j->texts[i]);
    free(j->texts);
    free(j->msgs);
    free(j->text);
    free(j->thought);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Appends bytes to the job's output; caller holds j->mu. */
bool pb_server_job_append(job *j, const char *s, size_t n) {
    if (j->out_len + n + 1 > j->out_cap) {
        size_t cap = j->out_cap ? j->out_cap * 2 : 4096;
        while (cap < j->out_len + n + 1) cap *= 2;
        char *nb = realloc(j->out, cap);
        if (!nb) return false;
        j->out = nb;
        j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, s, n);
    j->out_len += n;
    j->out[j->out_len] = 0;
    return true;
}

/* ---- the slot worker ------------------------------------------------------------------------------ */

static bool on_piece(const char *piece, size_t len, void *user) {
    job *j = user;
    pb_server *srv = j->srv;
    /* The first-token deadline is judged here, where the first token arrives, so a waiter that was not
     * scheduled in time cannot let a late token through. */
    if (srv->p.fallback_after > 0) {
        pthread_mutex_lock(&j->mu);
        bool late = j->n_pieces == 0 && !j->fell_back && pb_time_ms() - j->t_enqueue >= srv->p.fallback_after * 1000.0;
        pthread_mutex_unlock(&j->mu);
        if (late) {
            char ans[4096];
            bool found = pb_server_faq_fallback(j, ans, sizeof ans);
            pthread_mutex_lock(&j->mu);
            if (!j->fell_back && found) pb_server_use_fallback_locked(j, ans);
            bool fell = j->fell_back;
            if (fell) pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
            if (fell) return false;
        }
    }
    pthread_mutex_lock(&j->mu);
    if (j->n_pieces == 0) j->t_first = pb_time_ms();
    j->n_pieces++;
    if (j->stream)
        pb_server_sse_event(j, pb_server_sse_chunk(j, srv->model_id, piece, len, false, NULL));
    else
        pb_server_job_append(j, piece, len);
    /* halt: a job that was only about to start when the server stopped (the engine clears a cancel left
     * from before a call, so pb_session_cancel alone can miss it) ends at its first token */
    bool keep = !j->cancelled && !j->fell_back && !atomic_load(&srv->halt);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return keep;
}

/* The thought channel (Gemma 4 thinking): a stream sends it as delta.reasoning_content, a whole answer keeps it for
 * message.reasoning_content. */
static bool on_thought(const char *piece, size_t len, void *user) {
    job *j = user;
    pthread_mutex_lock(&j->mu);
    bool ok = true;
    if (j->stream) {
        pb_server_sse_event(j, pb_server_sse_reasoning_chunk(j, j->srv->model_id, piece, len));
    } else if (j->thought_len + len + 1 > j->thought_cap) {
        size_t cap = j->thought_cap ? j->thought_cap * 2 : 1024;
        while (cap < j->thought_len + len + 1) cap *= 2;
        char *nb = realloc(j->thought, cap);
        ok = nb != NULL;
        if (nb) j->thought = nb, j->thought_cap = cap;
    }
    if (!j->stream && ok) {
        memcpy(j->thought + j->thought_len, piece, len);
        j->thought_len += len;
        j->thought[j->thought_len] = 0;
    }
    bool keep = ok && !j->cancelled && !j->fell_back && !atomic_load(&j->srv->halt);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return keep;
}

static int64_t common_prefix(const int32_t *a, int64_t na, const int32_t *b, int64_t nb) {
    int64_t n = 0;
    while (n < na && n < nb && a[n] == b[n]) n++;
    return n;
}

static void run_job(slot *sl, job *j) {
    pb_server *srv = sl->srv;
    /* Prefix reuse: keep the longest common prefix of what the session holds, feed only the rest. At
     * least one token is fed so there are fresh logits to sample from. */
    int64_t n_have = 0;
    const int32_t *have = pb_session_tokens(sl->session, &n_have);
    int64_t keep = have ? common_prefix(have, n_have, j->prompt, j->n_prompt) : 0;
    if (keep >= j->n_prompt) keep = j->n_prompt - 1;
    if (keep < 0) keep = 0;
    /* going back where a sliding-window ring no longer holds the positions re-reads the kept prefix (the session
     * counts it): those tokens were computed again, not reused */
    pb_session_totals t0, t1;
    pb_session_get_totals(sl->session, &t0);
    if (pb_session_truncate(sl->session, keep) != PB_OK) {
        keep = 0;
        pb_session_truncate(sl->session, 0);
    }
    pb_session_get_totals(sl->session, &t1);
    int64_t reread = t1.n_reprefilled - t0.n_reprefilled;
    reread = reread < 0 ? 0 : reread > keep ? keep : reread;
    pb_gen_stats st;
    memset(&st, 0, sizeof st);
    j->gen.thought_cb = on_thought;
    j->gen.thought_user = j;
    pb_status s = pb_session_generate(sl->session, j->prompt + keep, j->n_prompt - keep, &j->gen, on_piece, j, &st);
    /* The prompt fitted (checked before queueing), so a full context here came while answering: the answer so
     * far is the result, finished by "length" as OpenAI reports it, not an error after the work is done. */
    if (s == PB_ERR_CONTEXT_FULL && st.n_generated > 0) {
        pb_error_clear();
        s = PB_OK;
        st.stop_reason = PB_STOP_CONTEXT_FULL;
    }

    pthread_mutex_lock(&srv->m.mu);
    srv->m.tokens_prompt += (uint64_t)(j->n_prompt - keep + reread);
    srv->m.tokens_prompt_reused += (uint64_t)(keep - reread);
    srv->m.tokens_prompt_reread += (uint64_t)reread;
    srv->m.tokens_generated += (uint64_t)st.n_generated;
    double ttft = -1, tps = -1;
    if (st.n_generated > 0 && st.t_first_token_ms > 0)
        ttft = ((j->t_first > 0 ? j->t_first : pb_time_ms()) - j->t_enqueue) / 1000.0;
    if (st.n_generated > 1 && st.t_generate_ms > 0) tps = (double)st.n_generated / (st.t_generate_ms / 1000.0);
    pb_server_metrics_add_gen(srv, ttft, tps);
    if (s == PB_ERR_CANCELLED || j->cancelled) srv->m.cancelled++;
    pthread_mutex_unlock(&srv->m.mu);

    /* No token at all (an end of turn first) and past the first-token deadline: the FAQ answer, judged here
     * like on_piece does, so the outcome does not depend on whether a waiter looked before the job ended. */
    pthread_mutex_lock(&j->mu);
    bool late = s == PB_OK && srv->p.fallback_after > 0 && j->n_pieces == 0 && !j->fell_back && !j->cancelled &&
                pb_time_ms() - j->t_enqueue >= srv->p.fallback_after * 1000.0;
    pthread_mutex_unlock(&j->mu);
    char ans[4096];
    bool found = late && pb_server_faq_fallback(j, ans, sizeof ans);
    pthread_mutex_lock(&j->mu);
    if (found && !j->fell_back) pb_server_use_fallback_locked(j, ans);
    j->stats = st;
    j->stats.n_prompt = j->n_prompt;
    j->status = s;
    if (s != PB_OK && s != PB_ERR_CANCELLED) snprintf(j->err, sizeof j->err, "%s", pb_last_error());
    /* Cut short by the server's stop (halt, not stopping: stopping belongs to srv->mu, which this thread does not
     * hold here): no "stop" calls it a whole answer. A stream ends with the error a queued one gets, a whole answer
     * is a 503 (pb_server_stop's shut_down); a job that ended on its own before the cancel reached it is answered
     * as usual. */
    const bool cut =
        !j->fell_back && atomic_load(&srv->halt) &&
        (s == PB_ERR_CANCELLED || st.stop_reason == PB_STOP_CALLBACK || st.stop_reason == PB_STOP_CANCELLED);
    if (cut) j->shut_down = true;
    if (j->stream && !j->fell_back) {
        if (cut) {
            pb_server_sse_event(
                j, pb_server_sse_error("the server is shutting down: this answer was cut short", "shutting_down"));
        } else if (s == PB_OK || s == PB_ERR_CANCELLED) {
            cJSON *fin = pb_server_sse_chunk(j, srv->model_id, NULL, 0, false, pb_server_finish_reason(&st));
            pb_server_sse_event(j, fin);
            /* as OpenAI sends it: the usage in a chunk of its own, after the finish, with empty choices */
            if (j->include_usage) pb_server_sse_event(j, pb_server_sse_usage_chunk(j, srv->model_id));
        } else {
            pb_server_sse_event(j, pb_server_sse_error(j->err, NULL));
        }
        pb_server_job_append(j, "data: [DONE]\n\n", 14);
    }
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Picks the queued job for a free slot; prefers the free slot whose cached tokens share the longest
 * prefix with the head job (multi-turn conversations land where their history is). Holds srv->mu. */
static void dispatch_locked(pb_server *srv) {
    while (srv->queue_head) {
        job *j = srv->queue_head;
        slot *best = NULL;
        int64_t best_len = -1;
        for (int i = 0; i < srv->n_slots; i++) {
            slot *sl = &srv->slots[i];
            if (sl->busy) continue;
            int64_t n_have = 0;
            const int32_t *have = pb_session_tokens(sl->session, &n_have);
            int64_t c = have ? common_prefix(have, n_have, j->prompt, j->n_prompt) : 0;
            if (c > best_len) {
                best_len = c;
                best = sl;
            }
        }
        if (!best) return;
        srv->queue_head = j->next;
        if (!srv->queue_head) srv->queue_tail = NULL;
        srv->n_queued--;
        j->next = NULL;
        best->job = j;
        best->busy = true;
        pthread_mutex_lock(&j->mu);
        j->running_on = best;
        j->started = true;
        pthread_mutex_unlock(&j->mu);
        pthread_cond_broadcast(&srv->cv);
    }
}

void *pb_server_slot_main(void *arg) {
    slot *sl = arg;
    pb_server *srv = sl->srv;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        while (!sl->job && !srv->stopping) pthread_cond_wait(&srv->cv, &srv->mu);
        if (!sl->job && srv->stopping) break;
        job *j = sl->job;
        pthread_mutex_unlock(&srv->mu);
        bool skip;
        pthread_mutex_lock(&j->mu);
        skip = j->cancelled;
        pthread_mutex_unlock(&j->mu);
        if (!skip)
            run_job(sl, j);
        else {
            pthread_mutex_lock(&j->mu);
            j->status = PB_ERR_CANCELLED;
            j->done = true;
            pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
        }
        pthread_mutex_lock(&j->mu);
        j->running_on = NULL;
        pthread_mutex_unlock(&j->mu);
        pb_server_job_release(j);
        pthread_mutex_lock(&srv->mu);
        sl->job = NULL;
        sl->busy = false;
        dispatch_locked(srv);
    }
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

void pb_server_job_cancel(job *j) {
    pb_server *srv = j->srv;
    bool unqueued = false;
    pthread_mutex_lock(&srv->mu);
    /* A job still waiting in the queue leaves it now: an abandoned request must not hold a queue place (and
     * make others get 429) until a slot frees up. */
    for (job **pp = &srv->queue_head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
        if (*pp != j) continue;
        *pp = j->next;
        if (srv->queue_tail == j) srv->queue_tail = prev;
        j->next = NULL;
        srv->n_queued--;
        unqueued = true;
        break;
    }
    pthread_mutex_lock(&j->mu);
    j->cancelled = true;
    if (j->running_on) pb_session_cancel(j->running_on->session);
    if (unqueued) {
        j->status = PB_ERR_CANCELLED;
        j->done = true;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_unlock(&srv->mu);
    if (unqueued) {
        pthread_mutex_lock(&srv->m.mu);
        srv->m.cancelled++;
        pthread_mutex_unlock(&srv->m.mu);
        pb_server_job_release(j); /* the worker's reference it will never take */
    }
}

job *pb_server_job_new(pb_server *srv, job_kind kind) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->kind = kind;
    j->srv = srv;
    j->refs = 1;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    unsigned long long k = atomic_fetch_add(&srv->id_counter, 1);
    snprintf(j->id, sizeof j->id, "%s-%llx%04llx", kind == JOB_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), k & 0xffff);
    j->created = (long long)time(NULL);
    return j;
}

/* ---- streaming response ------------------------------------------------------------------------------ */

bool pb_server_faq_fallback(job *j, char *buf, size_t cap) {
    pb_server *srv = j->srv;
    if (!srv->p.hooks.faq_match || !j->question) return false;
    return srv->p.hooks.faq_match(srv->p.hooks.faq_user, j->question, buf, cap);
}

/* Marks the job as answered by the FAQ (caller holds j->mu) and queues the answer. */
void pb_server_use_fallback_locked(job *j, const char *answer) {
    pb_server *srv = j->srv;
    j->fell_back = true;
    char text[4400];
    snprintf(text, sizeof text, "[FAQ fallback] %s", answer);
    if (j->stream) {
        cJSON *c = pb_server_sse_chunk(j, srv->model_id, text, strlen(text), true, "stop");
        cJSON_AddStringToObject(c, "pocketbrain_fallback", "faq");
        pb_server_sse_event(j, c);
        pb_server_job_append(j, "data: [DONE]\n\n", 14);
    } else {
        j->out_len = 0;
        pb_server_job_append(j, text, strlen(text));
    }
    pthread_mutex_lock(&srv->m.mu);
    srv->m.fallbacks++;
    pthread_mutex_unlock(&srv->m.mu);
}

/* Applies the FAQ fallback when no token came within fallback_after seconds, else waits up to ms for the
 * job to make progress. Caller holds j->mu and loops. */
void pb_server_job_wait_locked(job *j, int ms) {
    pb_server *srv = j->srv;
    if (!j->fell_back && !j->done && j->n_pieces == 0 && srv->p.fallback_after > 0 &&
        pb_time_ms() - j->t_enqueue >= srv->p.fallback_after * 1000.0) {
        char ans[4096];
        pthread_mutex_unlock(&j->mu);
        bool found = pb_server_faq_fallback(j, ans, sizeof ans);
        pthread_mutex_lock(&j->mu);
        if (found && !j->fell_back && j->n_pieces == 0 && !j->done) {
            pb_server_use_fallback_locked(j, ans);
            if (j->running_on) pb_session_cancel(j->running_on->session);
            j->cancelled = true;
            return;
        }
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* wake early enough to apply the fallback on time */
    if (srv->p.fallback_after > 0 && j->n_pieces == 0) {
        double left = srv->p.fallback_after * 1000.0 - (pb_time_ms() - j->t_enqueue);
        if (left > 0 && left < ms) ms = (int)left + 1;
    }
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

unsigned pb_server_queue_reserve(pb_server *srv) {
    pthread_mutex_lock(&srv->mu);
    if (srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        return 503;
    }
    int busy = 0;
    for (int i = 0; i < srv->n_slots; i++) busy += srv->slots[i].busy;
    int waiting = srv->n_queued + srv->n_reserved;
    /* free slots take requests at once; beyond them the queue holds queue_max */
    if (waiting >= (srv->n_slots - busy) + srv->p.queue_max) {
        pthread_mutex_unlock(&srv->mu);
        pthread_mutex_lock(&srv->m.mu);
        srv->m.rejected++;
        pthread_mutex_unlock(&srv->m.mu);
        return 429;
    }
    srv->n_reserved++;
    pthread_mutex_unlock(&srv->mu);
    return 0;
}

void pb_server_queue_unreserve(pb_server *srv) {
    pthread_mutex_lock(&srv->mu);
    srv->n_reserved--;
    pthread_mutex_unlock(&srv->mu);
}

unsigned pb_server_queue_push(pb_server *srv, job *j) {
    pthread_mutex_lock(&srv->mu);
    srv->n_reserved--;
    if (srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        return 503;
    }
    j->t_enqueue = pb_time_ms();
    j->refs++; /* the worker's reference */
    if (srv->queue_tail)
        srv->queue_tail->next = j;
    else
        srv->queue_head = j;
    srv->queue_tail = j;
    srv->n_queued++;
    dispatch_locked(srv);
    pthread_mutex_unlock(&srv->mu);
    return 0;
}
