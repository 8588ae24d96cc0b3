/* server.c -- OpenAI-compatible HTTP API (chat/completions, SSE streaming), slots + bounded queue, metrics,
 * web UI assets. The only file that includes microhttpd.h. Generation itself is the engine's. */
#include "server/server.h"
#include "base/base.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* generated from web/ by scripts/embed_web.sh */
typedef struct {
    const char *name;
    const unsigned char *data;
    size_t len;
} pb_web_asset;
extern const pb_web_asset pb_web_assets[];

/* ---- metrics ------------------------------------------------------------------------------------ */

#define N_TTFT_BUCKETS 9
#define N_TPS_BUCKETS  8
static const double ttft_bounds[N_TTFT_BUCKETS] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double tps_bounds[N_TPS_BUCKETS] = {1, 2, 5, 10, 20, 50, 100, 200};

typedef struct metrics {
    pthread_mutex_t mu;
    uint64_t req_by_code[6]; /* 1xx..5xx by first digit, [0] unused */
    uint64_t req_chat, req_completions, req_other;
    uint64_t tokens_prompt, tokens_prompt_reused, tokens_generated;
    uint64_t cancelled, rejected, fallbacks;
    uint64_t ttft_hist[N_TTFT_BUCKETS + 1];
    double ttft_sum;
    uint64_t ttft_count;
    uint64_t tps_hist[N_TPS_BUCKETS + 1];
    double tps_sum;
    uint64_t tps_count;
} metrics;

static void hist_add(uint64_t *h, const double *bounds, int n, double v) {
    int i = 0;
    while (i < n && v > bounds[i]) i++;
    h[i]++;
}

/* ---- jobs and slots ------------------------------------------------------------------------------ */

typedef enum { JOB_CHAT, JOB_COMPLETION } job_kind;

typedef struct slot slot;

typedef struct job {
    job_kind kind;
    bool stream;
    bool include_usage;
    int32_t *prompt;
    int64_t n_prompt;
    pb_gen_params gen;
    char **stop;
    int n_stop;
    char id[48];
    long long created;
    char *sources_json; /* knowledge-base citations, or NULL */
    char *question;     /* last user message, for the FAQ fallback */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *out; /* stream: pending SSE bytes; non-stream: the answer text */
    size_t out_len, out_cap, out_sent;
    int64_t n_pieces;
    bool started, done, cancelled, fell_back;
    pb_status status;
    char err[512];
    pb_gen_stats stats;
    double t_enqueue, t_first;
    int refs;
    struct pb_server *srv;
    slot *running_on;
    struct job *next;
} job;

struct slot {
    struct pb_server *srv;
    int index;
    pb_session *session;
    pthread_t thread;
    job *job; /* assigned work */
    bool busy;
};

struct pb_server {
    pb_model *model;
    const pb_vocab *vocab;
    pb_server_params p;
    char *host, *api_key, *model_id;
    struct MHD_Daemon *daemon;
    int port;
    slot *slots;
    int n_slots;
    pthread_mutex_t mu; /* queue + slot assignment */
    pthread_cond_t cv;  /* slots wait here */
    job *queue_head, *queue_tail;
    int n_queued;
    bool stopping;
    metrics m;
    atomic_ullong id_counter;
    atomic_int n_in_flight; /* requests between their first handler call and MHD's completion notice */
    atomic_bool halt;       /* set by pb_server_stop: running generations end at their next token */
};

static void job_release(job *j) {
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->stop);
    free(j->prompt);
    free(j->out);
    free(j->sources_json);
    free(j->question);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Appends bytes to the job's output; caller holds j->mu. */
static bool job_append(job *j, const char *s, size_t n) {
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

/* SSE event with a JSON payload (takes ownership of obj). Caller holds j->mu. */
static void job_event(job *j, cJSON *obj) {
    char *txt = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!txt) return;
    job_append(j, "data: ", 6);
    job_append(j, txt, strlen(txt));
    job_append(j, "\n\n", 2);
    free(txt);
}

static cJSON *chunk_base(const job *j, const char *model_id) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->kind == JOB_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", model_id);
    return o;
}

static cJSON *stream_chunk(const job *j, const char *model_id, const char *content, size_t len, bool role,
                           const char *finish) {
    cJSON *o = chunk_base(j, model_id);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    char *text = NULL;
    if (content) {
        text = malloc(len + 1);
        if (text) {
            memcpy(text, content, len);
            text[len] = 0;
        }
    }
    if (j->kind == JOB_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (text) cJSON_AddStringToObject(d, "content", text);
    } else {
        cJSON_AddStringToObject(c, "text", text ? text : "");
    }
    free(text);
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    return o;
}

static const char *finish_reason(const pb_gen_stats *st) {
    switch (st->stop_reason) {
    case 1:
    case 5: return "length";
    default: return "stop";
    }
}

static cJSON *usage_obj(const job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)j->stats.n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_prompt + j->stats.n_generated));
    return u;
}

/* ---- the slot worker ------------------------------------------------------------------------------ */

static bool faq_fallback(job *j, char *buf, size_t cap);
static void use_fallback_locked(job *j, const char *answer);

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
            bool found = faq_fallback(j, ans, sizeof ans);
            pthread_mutex_lock(&j->mu);
            if (!j->fell_back && found) use_fallback_locked(j, ans);
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
        job_event(j, stream_chunk(j, srv->model_id, piece, len, false, NULL));
    else
        job_append(j, piece, len);
    /* halt: a job that was only about to start when the server stopped (the engine clears a cancel left
     * from before a call, so pb_session_cancel alone can miss it) ends at its first token */
    bool keep = !j->cancelled && !j->fell_back && !atomic_load(&srv->halt);
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
    if (pb_session_truncate(sl->session, keep) != PB_OK) {
        keep = 0;
        pb_session_truncate(sl->session, 0);
    }
    pb_gen_stats st;
    memset(&st, 0, sizeof st);
    pb_status s = pb_session_generate(sl->session, j->prompt + keep, j->n_prompt - keep, &j->gen, on_piece, j, &st);

    pthread_mutex_lock(&srv->m.mu);
    srv->m.tokens_prompt += (uint64_t)(j->n_prompt - keep);
    srv->m.tokens_prompt_reused += (uint64_t)keep;
    srv->m.tokens_generated += (uint64_t)st.n_generated;
    if (st.n_generated > 0 && st.t_first_token_ms > 0) {
        double ttft = (pb_time_ms() - j->t_enqueue) / 1000.0;
        if (j->t_first > 0) ttft = (j->t_first - j->t_enqueue) / 1000.0;
        hist_add(srv->m.ttft_hist, ttft_bounds, N_TTFT_BUCKETS, ttft);
        srv->m.ttft_sum += ttft;
        srv->m.ttft_count++;
    }
    if (st.n_generated > 1 && st.t_generate_ms > 0) {
        double tps = (double)st.n_generated / (st.t_generate_ms / 1000.0);
        hist_add(srv->m.tps_hist, tps_bounds, N_TPS_BUCKETS, tps);
        srv->m.tps_sum += tps;
        srv->m.tps_count++;
    }
    if (s == PB_ERR_CANCELLED || j->cancelled) srv->m.cancelled++;
    pthread_mutex_unlock(&srv->m.mu);

    /* No token at all (an end of turn first) and past the first-token deadline: the FAQ answer, judged here
     * like on_piece does, so the outcome does not depend on whether a waiter looked before the job ended. */
    pthread_mutex_lock(&j->mu);
    bool late = s == PB_OK && srv->p.fallback_after > 0 && j->n_pieces == 0 && !j->fell_back && !j->cancelled &&
                pb_time_ms() - j->t_enqueue >= srv->p.fallback_after * 1000.0;
    pthread_mutex_unlock(&j->mu);
    char ans[4096];
    bool found = late && faq_fallback(j, ans, sizeof ans);
    pthread_mutex_lock(&j->mu);
    if (found && !j->fell_back) use_fallback_locked(j, ans);
    j->stats = st;
    j->stats.n_prompt = j->n_prompt;
    j->status = s;
    if (s != PB_OK && s != PB_ERR_CANCELLED) snprintf(j->err, sizeof j->err, "%s", pb_last_error());
    if (j->stream && !j->fell_back) {
        if (s == PB_OK || s == PB_ERR_CANCELLED) {
            /* halt, not stopping: stopping belongs to srv->mu, which this thread does not hold here */
            cJSON *fin =
                stream_chunk(j, srv->model_id, NULL, 0, false, atomic_load(&srv->halt) ? "stop" : finish_reason(&st));
            if (j->include_usage) cJSON_AddItemToObject(fin, "usage", usage_obj(j));
            job_event(j, fin);
        } else {
            cJSON *e = cJSON_CreateObject();
            cJSON *eo = cJSON_AddObjectToObject(e, "error");
            cJSON_AddStringToObject(eo, "message", j->err);
            cJSON_AddStringToObject(eo, "type", "server_error");
            job_event(j, e);
        }
        job_append(j, "data: [DONE]\n\n", 14);
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

static void *slot_main(void *arg) {
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
        job_release(j);
        pthread_mutex_lock(&srv->mu);
        sl->job = NULL;
        sl->busy = false;
        dispatch_locked(srv);
    }
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

static void job_cancel(job *j) {
    pb_server *srv = j->srv;
    pthread_mutex_lock(&srv->mu);
    pthread_mutex_lock(&j->mu);
    j->cancelled = true;
    if (j->running_on) pb_session_cancel(j->running_on->session);
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_unlock(&srv->mu);
}

/* ---- HTTP helpers ---------------------------------------------------------------------------------- */

typedef struct request {
    char *body;
    size_t len, cap;
    bool too_large;
    bool responded;
} request;

static enum MHD_Result send_text(pb_server *srv, struct MHD_Connection *c, unsigned code, const char *ctype,
                                 const char *text, size_t len, bool copy) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)text, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    pthread_mutex_lock(&srv->m.mu);
    if (code / 100 < 6) srv->m.req_by_code[code / 100]++;
    pthread_mutex_unlock(&srv->m.mu);
    return ret;
}

static enum MHD_Result send_json(pb_server *srv, struct MHD_Connection *c, unsigned code, cJSON *obj) {
    char *txt = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!txt) return MHD_NO;
    enum MHD_Result r = send_text(srv, c, code, "application/json", txt, strlen(txt), true);
    free(txt);
    return r;
}

/* OpenAI-style error: {"error": {"message", "type", "param", "code"}}. */
static enum MHD_Result send_error(pb_server *srv, struct MHD_Connection *c, unsigned code, const char *type,
                                  const char *param, const char *errcode, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static enum MHD_Result send_error(pb_server *srv, struct MHD_Connection *c, unsigned code, const char *type,
                                  const char *param, const char *errcode, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (errcode)
        cJSON_AddStringToObject(e, "code", errcode);
    else
        cJSON_AddNullToObject(e, "code");
    return send_json(srv, c, code, o);
}

static bool auth_ok(pb_server *srv, struct MHD_Connection *c) {
    if (!srv->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(srv->api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned)(h[i] ^ srv->api_key[i]); /* constant time */
    return diff == 0;
}

/* ---- request parsing -------------------------------------------------------------------------------- */

typedef struct parse_err {
    char msg[512];
    const char *param;
    const char *code;
} parse_err;

static bool perr(parse_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool perr(parse_err *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->param = param;
    return false;
}

static bool get_number(cJSON *root, const char *key, double lo, double hi, double *out, parse_err *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v)) return perr(e, key, "'%s' must be a number", key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return perr(e, key, "'%s' must be between %g and %g, got %g", key, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return true;
}

static bool get_int(cJSON *root, const char *key, double lo, double hi, int64_t *out, parse_err *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble)
        return perr(e, key, "'%s' must be an integer", key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return perr(e, key, "'%s' must be between %.0f and %.0f, got %.0f", key, lo, hi, v->valuedouble);
    *out = (int64_t)v->valuedouble;
    return true;
}

/* Message content: a string, or an array of {"type":"text","text":...} parts (joined). malloc'd. */
static char *content_text(cJSON *content) {
    if (cJSON_IsString(content)) return pb_strdup(content->valuestring);
    if (!cJSON_IsArray(content)) return NULL;
    size_t n = 0;
    cJSON *part;
    cJSON_ArrayForEach(part, content) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsString(t) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "text") != 0) return NULL;
        n += strlen(t->valuestring);
    }
    char *s = malloc(n + 1), *p = s;
    if (!s) return NULL;
    cJSON_ArrayForEach(part, content) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t l = strlen(t);
        memcpy(p, t, l);
        p += l;
    }
    *p = 0;
    return s;
}

/* Fills the sampling/stop parameters shared by both routes. */
static bool parse_gen(pb_server *srv, cJSON *root, job *j, parse_err *e) {
    j->gen = pb_gen_default_params();
    cJSON *preset = cJSON_GetObjectItemCaseSensitive(root, "preset");
    if (preset && !cJSON_IsNull(preset)) {
        pb_preset pr;
        if (!cJSON_IsString(preset) || pb_preset_from_name(preset->valuestring, &pr) != PB_OK)
            return perr(e, "preset", "'preset' must be one of precise, balanced, creative, code");
        j->gen.sampler = pb_sampler_preset(pr);
    }
    double d;
    int64_t i;
    d = j->gen.sampler.temperature;
    if (!get_number(root, "temperature", 0, 2, &d, e)) return false;
    j->gen.sampler.temperature = (float)d;
    d = j->gen.sampler.top_p;
    if (!get_number(root, "top_p", 0, 1, &d, e)) return false;
    j->gen.sampler.top_p = (float)d;
    d = j->gen.sampler.min_p;
    if (!get_number(root, "min_p", 0, 1, &d, e)) return false;
    j->gen.sampler.min_p = (float)d;
    d = j->gen.sampler.presence_penalty;
    if (!get_number(root, "presence_penalty", -2, 2, &d, e)) return false;
    j->gen.sampler.presence_penalty = (float)d;
    d = j->gen.sampler.frequency_penalty;
    if (!get_number(root, "frequency_penalty", -2, 2, &d, e)) return false;
    j->gen.sampler.frequency_penalty = (float)d;
    i = j->gen.sampler.top_k;
    if (!get_int(root, "top_k", 0, 1e6, &i, e)) return false;
    j->gen.sampler.top_k = (int)i;
    i = -1;
    if (!get_int(root, "seed", -9.2e18, 9.2e18, &i, e)) return false;
    if (i != -1)
        j->gen.sampler.seed = (uint64_t)i;
    else
        j->gen.sampler.seed = (uint64_t)pb_time_ns() ^ atomic_fetch_add(&srv->id_counter, 1) * 0x9E3779B97F4A7C15ull;
    i = srv->p.max_tokens_cap < 256 ? srv->p.max_tokens_cap : 256; /* default when the request names none */
    if (!get_int(root, "max_tokens", 1, srv->p.max_tokens_cap, &i, e)) return false;
    if (!get_int(root, "max_completion_tokens", 1, srv->p.max_tokens_cap, &i, e)) return false;
    j->gen.max_tokens = (int)i;
    i = 1;
    if (!get_int(root, "n", 1, 1, &i, e)) return false;
    cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (stream && !cJSON_IsNull(stream)) {
        if (!cJSON_IsBool(stream)) return perr(e, "stream", "'stream' must be a boolean");
        j->stream = cJSON_IsTrue(stream);
    }
    cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && cJSON_IsObject(so))
        j->include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
    cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (stop && !cJSON_IsNull(stop)) {
        int n = cJSON_IsString(stop) ? 1 : cJSON_IsArray(stop) ? cJSON_GetArraySize(stop) : -1;
        if (n < 0 || n > 4) return perr(e, "stop", "'stop' must be a string or an array of at most 4 strings");
        j->stop = calloc((size_t)(n ? n : 1), sizeof(char *));
        if (!j->stop) return perr(e, NULL, "out of memory");
        for (int k = 0; k < n; k++) {
            cJSON *s = cJSON_IsString(stop) ? stop : cJSON_GetArrayItem(stop, k);
            if (!cJSON_IsString(s) || !s->valuestring[0])
                return perr(e, "stop", "'stop' entries must be non-empty strings");
            j->stop[j->n_stop++] = pb_strdup(s->valuestring);
        }
        j->gen.stop = (const char *const *)j->stop;
        j->gen.n_stop = j->n_stop;
    }
    return true;
}

/* Tokenizes into j->prompt (grows the buffer as pb_tokenize asks). */
static bool tokenize_into(job *j, const pb_model *m, const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs,
                          const char *text, parse_err *e) {
    int64_t cap = 1024, n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(j->prompt);
        j->prompt = malloc((size_t)cap * sizeof(int32_t));
        if (!j->prompt) return perr(e, NULL, "out of memory");
        pb_status s = msgs ? pb_chat_tokenize(m, msgs, n_msgs, true, j->prompt, cap, &n)
                           : pb_tokenize(v, text, strlen(text), PB_TOK_ADD_BOS, j->prompt, cap, &n);
        if (s == PB_OK) {
            j->n_prompt = n;
            return true;
        }
        if (n <= cap) return perr(e, NULL, "cannot tokenize the prompt: %s", pb_last_error());
        cap = n;
    }
    return perr(e, NULL, "cannot tokenize the prompt");
}

static job *job_new(pb_server *srv, job_kind kind) {
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

static bool parse_chat(pb_server *srv, cJSON *root, job *j, parse_err *e) {
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!msgs) return perr(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return perr(e, "messages", "'messages' must be a non-empty array");
    int n = cJSON_GetArraySize(msgs);
    if (n > 1000) return perr(e, "messages", "too many messages (%d, at most 1000)", n);
    pb_chat_msg *cm = calloc((size_t)n, sizeof *cm);
    char **texts = calloc((size_t)n, sizeof *texts);
    bool ok = cm && texts;
    int k = 0, last_user = -1;
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (!ok) break;
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            ok = perr(e, "messages", "messages[%d] must be an object with a string 'role'", k);
            break;
        }
        const char *r = role->valuestring;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "model") &&
            strcmp(r, "developer")) {
            ok = perr(e, "messages", "messages[%d].role '%.40s' is not one of system, user, assistant", k, r);
            break;
        }
        texts[k] = content_text(content);
        if (!texts[k]) {
            ok = perr(e, "messages", "messages[%d].content must be a string or an array of text parts", k);
            break;
        }
        cm[k].role = strcmp(r, "developer") == 0 ? "system" : r;
        cm[k].content = texts[k];
        if (strcmp(r, "user") == 0) last_user = k;
        k++;
    }
    if (ok && last_user >= 0) j->question = pb_strdup(texts[last_user]);
    /* "use my documents": ground the last user message in the knowledge base. */
    cJSON *use_docs = cJSON_GetObjectItemCaseSensitive(root, "use_documents");
    if (ok && use_docs && !cJSON_IsNull(use_docs)) {
        if (!cJSON_IsBool(use_docs))
            ok = perr(e, "use_documents", "'use_documents' must be a boolean");
        else if (cJSON_IsTrue(use_docs)) {
            char *prompt = NULL, *sources = NULL;
            if (last_user < 0)
                ok = perr(e, "messages", "'use_documents' needs a user message");
            else if (!srv->p.hooks.kb_prompt ||
                     !srv->p.hooks.kb_prompt(srv->p.hooks.kb_user, texts[last_user], &prompt, &sources)) {
                ok = perr(e, "use_documents", "no knowledge base is configured on this server (serve --db KB)");
            } else {
                free(texts[last_user]);
                texts[last_user] = prompt;
                cm[last_user].content = prompt;
                j->sources_json = sources;
            }
        }
    }
    if (ok) ok = parse_gen(srv, root, j, e);
    if (ok) ok = tokenize_into(j, srv->model, srv->vocab, cm, k, NULL, e);
    for (int i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    free(cm);
    return ok;
}

static bool parse_completion(pb_server *srv, cJSON *root, job *j, parse_err *e) {
    cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) == 1) prompt = cJSON_GetArrayItem(prompt, 0);
    if (!cJSON_IsString(prompt)) return perr(e, "prompt", "'prompt' must be a string");
    if (!parse_gen(srv, root, j, e)) return false;
    j->question = pb_strdup(prompt->valuestring);
    return tokenize_into(j, srv->model, srv->vocab, NULL, 0, prompt->valuestring, e);
}

/* ---- streaming response ------------------------------------------------------------------------------ */

static bool faq_fallback(job *j, char *buf, size_t cap) {
    pb_server *srv = j->srv;
    if (!srv->p.hooks.faq_match || !j->question) return false;
    return srv->p.hooks.faq_match(srv->p.hooks.faq_user, j->question, buf, cap);
}

/* Marks the job as answered by the FAQ (caller holds j->mu) and queues the answer. */
static void use_fallback_locked(job *j, const char *answer) {
    pb_server *srv = j->srv;
    j->fell_back = true;
    char text[4400];
    snprintf(text, sizeof text, "[FAQ fallback] %s", answer);
    if (j->stream) {
        cJSON *c = stream_chunk(j, srv->model_id, text, strlen(text), true, "stop");
        cJSON_AddStringToObject(c, "pocketbrain_fallback", "faq");
        job_event(j, c);
        job_append(j, "data: [DONE]\n\n", 14);
    } else {
        j->out_len = 0;
        job_append(j, text, strlen(text));
    }
    pthread_mutex_lock(&srv->m.mu);
    srv->m.fallbacks++;
    pthread_mutex_unlock(&srv->m.mu);
}

/* Applies the FAQ fallback when no token came within fallback_after seconds, else waits up to ms for the
 * job to make progress. Caller holds j->mu and loops. */
static void wait_job_locked(job *j, int ms) {
    pb_server *srv = j->srv;
    if (!j->fell_back && !j->done && j->n_pieces == 0 && srv->p.fallback_after > 0 &&
        pb_time_ms() - j->t_enqueue >= srv->p.fallback_after * 1000.0) {
        char ans[4096];
        pthread_mutex_unlock(&j->mu);
        bool found = faq_fallback(j, ans, sizeof ans);
        pthread_mutex_lock(&j->mu);
        if (found && !j->fell_back && j->n_pieces == 0 && !j->done) {
            use_fallback_locked(j, ans);
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

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    double t0 = pb_time_ms();
    while (j->out_sent == j->out_len && !j->done && !(j->fell_back)) {
        wait_job_locked(j, 200);
        if (j->out_sent == j->out_len && !j->done && pb_time_ms() - t0 > 5000) {
            /* keep-alive comment: also detects a vanished client while the job is queued */
            job_append(j, ": keep-alive\n\n", 14);
            break;
        }
    }
    size_t avail = j->out_len - j->out_sent;
    if (avail == 0 && (j->done || j->fell_back)) {
        pthread_mutex_unlock(&j->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = avail < max ? avail : max;
    memcpy(buf, j->out + j->out_sent, n);
    j->out_sent += n;
    pthread_mutex_unlock(&j->mu);
    return (ssize_t)n;
}

/* Called by MHD when the stream ends or the client goes away: a vanished client cancels at once. */
static void stream_free(void *cls) {
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    bool unfinished = !j->done;
    pthread_mutex_unlock(&j->mu);
    if (unfinished) job_cancel(j);
    job_release(j);
}

/* ---- routes ------------------------------------------------------------------------------------------- */

static enum MHD_Result enqueue(pb_server *srv, struct MHD_Connection *c, job *j) {
    pthread_mutex_lock(&srv->mu);
    if (srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        job_release(j);
        return send_error(srv, c, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    }
    int busy = 0;
    for (int i = 0; i < srv->n_slots; i++) busy += srv->slots[i].busy;
    if (busy == srv->n_slots && srv->n_queued >= srv->p.queue_max) {
        pthread_mutex_unlock(&srv->mu);
        pthread_mutex_lock(&srv->m.mu);
        srv->m.rejected++;
        pthread_mutex_unlock(&srv->m.mu);
        job_release(j);
        return send_error(srv, c, 429, "rate_limit_error", NULL, "queue_full",
                          "all %d slots are busy and %d requests are waiting; try again later", srv->n_slots,
                          srv->p.queue_max);
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

    if (j->stream) {
        pthread_mutex_lock(&j->mu);
        cJSON *first = stream_chunk(j, srv->model_id, j->kind == JOB_CHAT ? "" : NULL, 0, true, NULL);
        if (j->sources_json) cJSON_AddItemToObject(first, "sources", cJSON_Parse(j->sources_json));
        job_event(j, first);
        pthread_mutex_unlock(&j->mu);
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, j, stream_free);
        if (!r) {
            job_cancel(j);
            job_release(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        pthread_mutex_lock(&srv->m.mu);
        srv->m.req_by_code[2]++;
        pthread_mutex_unlock(&srv->m.mu);
        return ret;
    }

    /* non-stream: wait here (thread per connection) */
    pthread_mutex_lock(&j->mu);
    while (!j->done && !j->fell_back) wait_job_locked(j, 200);
    if (!j->fell_back && j->status != PB_OK && j->status != PB_ERR_CANCELLED) {
        char text[4096];
        pthread_mutex_unlock(&j->mu);
        bool found = faq_fallback(j, text, sizeof text);
        pthread_mutex_lock(&j->mu);
        if (found) use_fallback_locked(j, text);
    }
    enum MHD_Result ret;
    if (!j->fell_back && j->status != PB_OK && j->status != PB_ERR_CANCELLED) {
        char err[512];
        snprintf(err, sizeof err, "%s", j->err);
        bool ctx = j->status == PB_ERR_CONTEXT_FULL;
        pthread_mutex_unlock(&j->mu);
        ret = send_error(srv, c, ctx ? 400 : 500, ctx ? "invalid_request_error" : "server_error", NULL,
                         ctx ? "context_length_exceeded" : NULL, "generation failed: %s", err);
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", j->id);
        cJSON_AddStringToObject(o, "object", j->kind == JOB_CHAT ? "chat.completion" : "text_completion");
        cJSON_AddNumberToObject(o, "created", (double)j->created);
        cJSON_AddStringToObject(o, "model", srv->model_id);
        cJSON *choices = cJSON_AddArrayToObject(o, "choices");
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, ch);
        cJSON_AddNumberToObject(ch, "index", 0);
        if (j->kind == JOB_CHAT) {
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddStringToObject(msg, "content", j->out ? j->out : "");
        } else {
            cJSON_AddStringToObject(ch, "text", j->out ? j->out : "");
        }
        cJSON_AddStringToObject(ch, "finish_reason", j->fell_back ? "stop" : finish_reason(&j->stats));
        cJSON_AddItemToObject(o, "usage", usage_obj(j));
        if (j->fell_back) cJSON_AddStringToObject(o, "pocketbrain_fallback", "faq");
        if (j->sources_json) cJSON_AddItemToObject(o, "sources", cJSON_Parse(j->sources_json));
        pthread_mutex_unlock(&j->mu);
        ret = send_json(srv, c, 200, o);
    }
    job_release(j);
    return ret;
}

static enum MHD_Result route_generate(pb_server *srv, struct MHD_Connection *c, request *rq, job_kind kind) {
    pthread_mutex_lock(&srv->m.mu);
    if (kind == JOB_CHAT)
        srv->m.req_chat++;
    else
        srv->m.req_completions++;
    pthread_mutex_unlock(&srv->m.mu);
    cJSON *root = cJSON_ParseWithLength(rq->body ? rq->body : "", rq->len);
    if (!root)
        return send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_json", "request body is not valid JSON");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_json",
                          "request body must be a JSON object");
    }
    job *j = job_new(srv, kind);
    if (!j) {
        cJSON_Delete(root);
        return send_error(srv, c, 500, "server_error", NULL, NULL, "out of memory");
    }
    parse_err e;
    memset(&e, 0, sizeof e);
    bool ok = kind == JOB_CHAT ? parse_chat(srv, root, j, &e) : parse_completion(srv, root, j, &e);
    cJSON_Delete(root);
    if (!ok) {
        job_release(j);
        return send_error(srv, c, 400, "invalid_request_error", e.param, e.code, "%s", e.msg);
    }
    if (j->n_prompt + 1 > srv->p.n_ctx) {
        int64_t n = j->n_prompt;
        job_release(j);
        return send_error(srv, c, 400, "invalid_request_error", "messages", "context_length_exceeded",
                          "the prompt has %lld tokens; this server's context is %d tokens", (long long)n, srv->p.n_ctx);
    }
    return enqueue(srv, c, j);
}

static enum MHD_Result route_tokenize(pb_server *srv, struct MHD_Connection *c, request *rq) {
    cJSON *root = cJSON_ParseWithLength(rq->body ? rq->body : "", rq->len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_json",
                          "request body must be a JSON object");
    }
    cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
    if (!cJSON_IsString(content)) {
        cJSON_Delete(root);
        return send_error(srv, c, 400, "invalid_request_error", "content", NULL, "'content' must be a string");
    }
    int64_t n = 0;
    const char *t = content->valuestring;
    pb_status s = pb_tokenize(srv->vocab, t, strlen(t), 0, NULL, 0, &n);
    cJSON_Delete(root);
    if (s != PB_OK && s != PB_ERR_INVALID_ARG)
        return send_error(srv, c, 500, "server_error", NULL, NULL, "tokenize failed: %s", pb_last_error());
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)n);
    return send_json(srv, c, 200, o);
}

static enum MHD_Result route_models(pb_server *srv, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON *mo = cJSON_CreateObject();
    cJSON_AddStringToObject(mo, "id", srv->model_id);
    cJSON_AddStringToObject(mo, "object", "model");
    cJSON_AddNumberToObject(mo, "created", 0);
    cJSON_AddStringToObject(mo, "owned_by", "pocketbrain");
    cJSON_AddItemToArray(data, mo);
    return send_json(srv, c, 200, o);
}

static enum MHD_Result route_metrics(pb_server *srv, struct MHD_Connection *c) {
    char *buf = malloc(16384);
    if (!buf) return MHD_NO;
    size_t n = 0, cap = 16384;
#define P(...) n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__)
    pthread_mutex_lock(&srv->mu);
    int queued = srv->n_queued, busy = 0;
    for (int i = 0; i < srv->n_slots; i++) busy += srv->slots[i].busy;
    pthread_mutex_unlock(&srv->mu);
    pthread_mutex_lock(&srv->m.mu);
    metrics *m = &srv->m;
    P("# HELP pocketbrain_requests_total HTTP responses by status class.\n# TYPE pocketbrain_requests_total counter\n");
    for (int k = 1; k < 6; k++)
        P("pocketbrain_requests_total{code=\"%dxx\"} %llu\n", k, (unsigned long long)m->req_by_code[k]);
    P("# TYPE pocketbrain_route_requests_total counter\n");
    P("pocketbrain_route_requests_total{route=\"/v1/chat/completions\"} %llu\n", (unsigned long long)m->req_chat);
    P("pocketbrain_route_requests_total{route=\"/v1/completions\"} %llu\n", (unsigned long long)m->req_completions);
    P("# TYPE pocketbrain_prompt_tokens_total counter\npocketbrain_prompt_tokens_total %llu\n",
      (unsigned long long)m->tokens_prompt);
    P("# HELP pocketbrain_prompt_tokens_reused_total Prompt tokens served from a slot's cached prefix.\n"
      "# TYPE pocketbrain_prompt_tokens_reused_total counter\npocketbrain_prompt_tokens_reused_total %llu\n",
      (unsigned long long)m->tokens_prompt_reused);
    P("# TYPE pocketbrain_generated_tokens_total counter\npocketbrain_generated_tokens_total %llu\n",
      (unsigned long long)m->tokens_generated);
    P("# TYPE pocketbrain_requests_cancelled_total counter\npocketbrain_requests_cancelled_total %llu\n",
      (unsigned long long)m->cancelled);
    P("# TYPE pocketbrain_requests_rejected_total counter\npocketbrain_requests_rejected_total %llu\n",
      (unsigned long long)m->rejected);
    P("# TYPE pocketbrain_fallbacks_total counter\npocketbrain_fallbacks_total %llu\n",
      (unsigned long long)m->fallbacks);
    P("# TYPE pocketbrain_queue_depth gauge\npocketbrain_queue_depth %d\n", queued);
    P("# TYPE pocketbrain_slots_busy gauge\npocketbrain_slots_busy %d\n", busy);
    P("# TYPE pocketbrain_slots_total gauge\npocketbrain_slots_total %d\n", srv->n_slots);
    P("# HELP pocketbrain_ttft_seconds Time from request to first token.\n# TYPE pocketbrain_ttft_seconds histogram\n");
    uint64_t cum = 0;
    for (int k = 0; k < N_TTFT_BUCKETS; k++) {
        cum += m->ttft_hist[k];
        P("pocketbrain_ttft_seconds_bucket{le=\"%g\"} %llu\n", ttft_bounds[k], (unsigned long long)cum);
    }
    cum += m->ttft_hist[N_TTFT_BUCKETS];
    P("pocketbrain_ttft_seconds_bucket{le=\"+Inf\"} %llu\npocketbrain_ttft_seconds_sum "
      "%g\npocketbrain_ttft_seconds_count %llu\n",
      (unsigned long long)cum, m->ttft_sum, (unsigned long long)m->ttft_count);
    P("# HELP pocketbrain_decode_tokens_per_second Decode speed per request.\n"
      "# TYPE pocketbrain_decode_tokens_per_second histogram\n");
    cum = 0;
    for (int k = 0; k < N_TPS_BUCKETS; k++) {
        cum += m->tps_hist[k];
        P("pocketbrain_decode_tokens_per_second_bucket{le=\"%g\"} %llu\n", tps_bounds[k], (unsigned long long)cum);
    }
    cum += m->tps_hist[N_TPS_BUCKETS];
    P("pocketbrain_decode_tokens_per_second_bucket{le=\"+Inf\"} %llu\npocketbrain_decode_tokens_per_second_sum %g\n"
      "pocketbrain_decode_tokens_per_second_count %llu\n",
      (unsigned long long)cum, m->tps_sum, (unsigned long long)m->tps_count);
    pthread_mutex_unlock(&srv->m.mu);
    P("# TYPE pocketbrain_resident_memory_bytes gauge\npocketbrain_resident_memory_bytes %zu\n", pb_current_rss());
    P("# HELP pocketbrain_thermal_level Thermal governor level per slot (0 cool, 1 warm, 2 hot).\n"
      "# TYPE pocketbrain_thermal_level gauge\n# TYPE pocketbrain_thermal_celsius gauge\n"
      "# TYPE pocketbrain_threads gauge\n");
    for (int i = 0; i < srv->n_slots; i++) {
        pb_thermal_state th;
        pb_session_thermal(srv->slots[i].session, &th);
        P("pocketbrain_thermal_level{slot=\"%d\"} %d\n", i, th.enabled ? th.level : 0);
        P("pocketbrain_thermal_celsius{slot=\"%d\"} %.1f\n", i, (double)th.temp_c);
        P("pocketbrain_threads{slot=\"%d\"} %d\n", i, th.n_threads);
    }
#undef P
    if (n >= cap) n = cap - 1;
    enum MHD_Result r = send_text(srv, c, 200, "text/plain; version=0.0.4", buf, n, true);
    free(buf);
    return r;
}

/* GET /stats: per-slot state as JSON (busy, tokens cached, thermal governor). */
static enum MHD_Result route_stats(pb_server *srv, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON *slots = cJSON_AddArrayToObject(o, "slots");
    pthread_mutex_lock(&srv->mu);
    cJSON_AddNumberToObject(o, "queue_depth", srv->n_queued);
    for (int i = 0; i < srv->n_slots; i++) {
        slot *sl = &srv->slots[i];
        cJSON *so = cJSON_CreateObject();
        cJSON_AddNumberToObject(so, "slot", i);
        cJSON_AddBoolToObject(so, "busy", sl->busy);
        if (!sl->busy) cJSON_AddNumberToObject(so, "n_past", (double)pb_session_n_past(sl->session));
        pb_thermal_state th;
        pb_session_thermal(sl->session, &th);
        cJSON *t = cJSON_AddObjectToObject(so, "thermal");
        cJSON_AddBoolToObject(t, "enabled", th.enabled);
        cJSON_AddNumberToObject(t, "temp_c", (double)th.temp_c);
        cJSON_AddNumberToObject(t, "level", th.level);
        cJSON_AddNumberToObject(t, "n_threads", th.n_threads);
        cJSON_AddNumberToObject(t, "n_threads_max", th.n_threads_max);
        cJSON_AddNumberToObject(t, "pause_ms", th.pause_ms);
        cJSON_AddNumberToObject(t, "n_throttled", (double)th.n_throttled);
        cJSON_AddItemToArray(slots, so);
    }
    pthread_mutex_unlock(&srv->mu);
    return send_json(srv, c, 200, o);
}

static const char *mime_of(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot) return "application/octet-stream";
    if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
    return "application/octet-stream";
}

static enum MHD_Result route_static(pb_server *srv, struct MHD_Connection *c, const char *url) {
    const char *want = strcmp(url, "/") == 0 ? "/index.html" : url;
    for (const pb_web_asset *a = pb_web_assets; a->name; a++) {
        if (strcmp(a->name, want) == 0) {
            struct MHD_Response *r = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
            if (!r) return MHD_NO;
            MHD_add_response_header(r, "Content-Type", mime_of(a->name));
            MHD_add_response_header(r, "Content-Security-Policy",
                                    "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:");
            MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
            enum MHD_Result ret = MHD_queue_response(c, 200, r);
            MHD_destroy_response(r);
            pthread_mutex_lock(&srv->m.mu);
            srv->m.req_by_code[2]++;
            pthread_mutex_unlock(&srv->m.mu);
            return ret;
        }
    }
    return send_error(srv, c, 404, "invalid_request_error", NULL, "not_found", "no route for GET %.200s", url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    pb_server *srv = cls;
    request *rq = *con_cls;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        *con_cls = rq;
        atomic_fetch_add(&srv->n_in_flight, 1);
        return MHD_YES;
    }
    if (*upload_size > 0) { /* body chunk */
        if (!rq->too_large) {
            if (rq->len + *upload_size > srv->p.max_body) {
                rq->too_large = true;
                free(rq->body);
                rq->body = NULL;
                rq->len = rq->cap = 0;
            } else {
                if (rq->len + *upload_size + 1 > rq->cap) {
                    size_t cap = rq->cap ? rq->cap : 4096;
                    while (cap < rq->len + *upload_size + 1) cap *= 2;
                    char *nb = realloc(rq->body, cap);
                    if (!nb) return MHD_NO;
                    rq->body = nb;
                    rq->cap = cap;
                }
                memcpy(rq->body + rq->len, upload, *upload_size);
                rq->len += *upload_size;
                rq->body[rq->len] = 0;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    bool is_get = strcmp(method, "GET") == 0, is_post = strcmp(method, "POST") == 0;
    if (rq->too_large)
        return send_error(srv, c, 413, "invalid_request_error", NULL, "request_too_large",
                          "request body is larger than %zu bytes", srv->p.max_body);
    bool api = strncmp(url, "/v1/", 4) == 0 || strcmp(url, "/tokenize") == 0;
    if (api && !auth_ok(srv, c))
        return send_error(srv, c, 401, "invalid_request_error", NULL, "invalid_api_key",
                          "missing or wrong API key (send 'Authorization: Bearer KEY')");
    if (strcmp(url, "/v1/chat/completions") == 0 || strcmp(url, "/v1/completions") == 0 ||
        strcmp(url, "/tokenize") == 0) {
        if (!is_post)
            return send_error(srv, c, 405, "invalid_request_error", NULL, "method_not_allowed", "%s needs POST", url);
        if (strcmp(url, "/tokenize") == 0) return route_tokenize(srv, c, rq);
        return route_generate(srv, c, rq, strcmp(url, "/v1/chat/completions") == 0 ? JOB_CHAT : JOB_COMPLETION);
    }
    if (!is_get)
        return send_error(srv, c, strncmp(url, "/v1/", 4) == 0 ? 404 : 405, "invalid_request_error", NULL, "not_found",
                          "no route for %.10s %.200s", method, url);
    if (strcmp(url, "/v1/models") == 0) return route_models(srv, c);
    if (strcmp(url, "/health") == 0) {
        pthread_mutex_lock(&srv->mu);
        bool stopping = srv->stopping;
        pthread_mutex_unlock(&srv->mu);
        const char *body = stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}";
        return send_text(srv, c, stopping ? 503 : 200, "application/json", body, strlen(body), false);
    }
    if (strcmp(url, "/metrics") == 0) return route_metrics(srv, c);
    if (strcmp(url, "/stats") == 0) return route_stats(srv, c);
    return route_static(srv, c, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    pb_server *srv = cls;
    (void)c;
    (void)toe;
    request *rq = *con_cls;
    if (!rq) return;
    free(rq->body);
    free(rq);
    *con_cls = NULL;
    atomic_fetch_sub(&srv->n_in_flight, 1);
}

/* ---- lifecycle ---------------------------------------------------------------------------------------- */

pb_server_params pb_server_default_params(void) {
    pb_server_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.n_parallel = 1;
    p.queue_max = 16;
    p.max_body = 1 << 20;
    p.max_tokens_cap = 2048;
    p.n_ctx = 2048;
    p.model_id = "pocketbrain";
    return p;
}

pb_status pb_server_start(pb_model *m, const pb_server_params *params, pb_server **out) {
    *out = NULL;
    pb_server *srv = calloc(1, sizeof *srv);
    if (!srv) return pb_error(PB_ERR_NOMEM, "server: out of memory");
    srv->p = params ? *params : pb_server_default_params();
    if (srv->p.n_parallel < 1 || srv->p.n_parallel > 64) {
        int n = srv->p.n_parallel;
        free(srv);
        return pb_error(PB_ERR_INVALID_ARG, "server: --parallel must be in [1, 64], got %d", n);
    }
    srv->model = m;
    srv->vocab = pb_model_vocab(m);
    srv->host = pb_strdup(srv->p.host ? srv->p.host : "127.0.0.1");
    srv->api_key = srv->p.api_key && *srv->p.api_key ? pb_strdup(srv->p.api_key) : NULL;
    srv->model_id = pb_strdup(srv->p.model_id ? srv->p.model_id : "pocketbrain");
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    pthread_mutex_init(&srv->m.mu, NULL);
    srv->n_slots = srv->p.n_parallel;
    srv->slots = calloc((size_t)srv->n_slots, sizeof(slot));
    pb_status s = srv->slots ? PB_OK : pb_error(PB_ERR_NOMEM, "server: out of memory");
    int started = 0;
    for (int i = 0; s == PB_OK && i < srv->n_slots; i++) {
        slot *sl = &srv->slots[i];
        sl->srv = srv;
        sl->index = i;
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = srv->p.n_ctx;
        sp.n_threads = srv->p.n_threads;
        sp.thermal = srv->p.thermal;
        s = pb_session_new(m, &sp, &sl->session);
        if (s != PB_OK) break;
        if (pthread_create(&sl->thread, NULL, slot_main, sl) != 0) {
            s = pb_error(PB_ERR_INTERNAL, "server: cannot start slot thread");
            break;
        }
        started++;
    }
    if (s == PB_OK) {
        struct sockaddr_in addr;
        memset(&addr, 0, sizeof addr);
        addr.sin_family = AF_INET;
        addr.sin_port = htons((uint16_t)srv->p.port);
        if (inet_pton(AF_INET, srv->host, &addr.sin_addr) != 1) {
            s = pb_error(PB_ERR_INVALID_ARG, "server: --host '%s' is not an IPv4 address", srv->host);
        } else {
            srv->daemon = MHD_start_daemon(
                MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                (uint16_t)srv->p.port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                MHD_OPTION_CONNECTION_LIMIT, (unsigned)512, MHD_OPTION_END);
            if (!srv->daemon)
                s = pb_error(PB_ERR_IO, "server: cannot listen on %s:%d (%s)", srv->host, srv->p.port,
                             errno ? strerror(errno) : "address in use?");
        }
    }
    if (s != PB_OK) {
        pthread_mutex_lock(&srv->mu);
        srv->stopping = true;
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
        for (int i = 0; i < started; i++) pthread_join(srv->slots[i].thread, NULL);
        for (int i = 0; srv->slots && i < srv->n_slots; i++) pb_session_free(srv->slots[i].session);
        free(srv->slots);
        free(srv->host);
        free(srv->api_key);
        free(srv->model_id);
        free(srv);
        return s;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : srv->p.port;
    *out = srv;
    return PB_OK;
}

int pb_server_port(const pb_server *s) { return s ? s->port : 0; }

void pb_server_stop(pb_server *srv) {
    if (!srv) return;
    pthread_mutex_lock(&srv->mu);
    srv->stopping = true;
    /* queued jobs end now; running ones are cancelled and their streams get a final event */
    for (job *j = srv->queue_head; j;) {
        job *next = j->next;
        pthread_mutex_lock(&j->mu);
        j->cancelled = true;
        j->status = PB_ERR_CANCELLED;
        if (j->stream) {
            cJSON *e = cJSON_CreateObject();
            cJSON *eo = cJSON_AddObjectToObject(e, "error");
            cJSON_AddStringToObject(eo, "message", "the server is shutting down");
            cJSON_AddStringToObject(eo, "type", "server_error");
            job_event(j, e);
            job_append(j, "data: [DONE]\n\n", 14);
        }
        j->done = true;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        job_release(j); /* the worker's reference it will never take */
        j = next;
    }
    srv->queue_head = srv->queue_tail = NULL;
    srv->n_queued = 0;
    atomic_store(&srv->halt, true);
    for (int i = 0; i < srv->n_slots; i++)
        if (srv->slots[i].busy) pb_session_cancel(srv->slots[i].session);
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
    for (int i = 0; i < srv->n_slots; i++) pthread_join(srv->slots[i].thread, NULL);
    /* Let the responses in flight (streams ending with their final event, answers of cancelled jobs) reach
     * their clients before the daemon closes the connections: waited for by request, not by connection, so an
     * idle keep-alive connection costs nothing and a slow machine gets up to 10 s, not a fixed moment. */
    if (srv->daemon) {
        MHD_quiesce_daemon(srv->daemon);
        for (int k = 0; k < 200 && atomic_load(&srv->n_in_flight) > 0; k++) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
        MHD_stop_daemon(srv->daemon);
    }
    for (int i = 0; i < srv->n_slots; i++) pb_session_free(srv->slots[i].session);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    pthread_mutex_destroy(&srv->m.mu);
    free(srv->slots);
    free(srv->host);
    free(srv->api_key);
    free(srv->model_id);
    free(srv);
}
