/* server_openai.c -- the OpenAI-compatible JSON API: request parsing and validation, chat/completions answers,
 * /tokenize, /v1/models. Queueing is server_slots.c's, streaming server_sse.c's. */
#include "base/base.h"
#include "server/server_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *pb_server_finish_reason(const pb_gen_stats *st) {
    switch (st->stop_reason) {
    case 1:
    case 5: return "length";
    default: return "stop";
    }
}

cJSON *pb_server_usage_obj(const job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)j->stats.n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_prompt + j->stats.n_generated));
    return u;
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

/* Waits for a non-streaming job and sends its answer (or its error); drops the caller's reference. */
static enum MHD_Result respond_whole(pb_server *srv, struct MHD_Connection *c, job *j) {
    /* non-stream: wait here (thread per connection) */
    pthread_mutex_lock(&j->mu);
    while (!j->done && !j->fell_back) pb_server_job_wait_locked(j, 200);
    if (!j->fell_back && j->status != PB_OK && j->status != PB_ERR_CANCELLED) {
        char text[4096];
        pthread_mutex_unlock(&j->mu);
        bool found = pb_server_faq_fallback(j, text, sizeof text);
        pthread_mutex_lock(&j->mu);
        if (found) pb_server_use_fallback_locked(j, text);
    }
    enum MHD_Result ret;
    if (!j->fell_back && j->status != PB_OK && j->status != PB_ERR_CANCELLED) {
        char err[512];
        snprintf(err, sizeof err, "%s", j->err);
        bool ctx = j->status == PB_ERR_CONTEXT_FULL;
        pthread_mutex_unlock(&j->mu);
        ret = pb_server_send_error(srv, c, ctx ? 400 : 500, ctx ? "invalid_request_error" : "server_error", NULL,
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
        cJSON_AddStringToObject(ch, "finish_reason", j->fell_back ? "stop" : pb_server_finish_reason(&j->stats));
        cJSON_AddItemToObject(o, "usage", pb_server_usage_obj(j));
        if (j->fell_back) cJSON_AddStringToObject(o, "pocketbrain_fallback", "faq");
        if (j->sources_json) cJSON_AddItemToObject(o, "sources", cJSON_Parse(j->sources_json));
        pthread_mutex_unlock(&j->mu);
        ret = pb_server_send_json(srv, c, 200, o);
    }
    pb_server_job_release(j);
    return ret;
}

enum MHD_Result pb_server_route_generate(pb_server *srv, struct MHD_Connection *c, request *rq, job_kind kind) {
    pthread_mutex_lock(&srv->m.mu);
    if (kind == JOB_CHAT)
        srv->m.req_chat++;
    else
        srv->m.req_completions++;
    pthread_mutex_unlock(&srv->m.mu);
    cJSON *root = cJSON_ParseWithLength(rq->body ? rq->body : "", rq->len);
    if (!root)
        return pb_server_send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_json",
                                    "request body is not valid JSON");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_json",
                                    "request body must be a JSON object");
    }
    /* the model named in the request is loaded (or this waits for it) before its prompt is tokenized */
    cJSON *mf = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (mf && !cJSON_IsNull(mf) && !cJSON_IsString(mf)) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", "model", NULL, "'model' must be a string");
    }
    char merr[512];
    unsigned refused_model =
        pb_server_model_acquire(srv, cJSON_IsString(mf) ? mf->valuestring : NULL, merr, sizeof merr);
    if (refused_model) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, refused_model,
                                    refused_model == 404 ? "invalid_request_error" : "server_error",
                                    refused_model == 404 ? "model" : NULL,
                                    refused_model == 404   ? "model_not_found"
                                    : refused_model == 503 ? "shutting_down"
                                                           : "model_load_failed",
                                    "%s", merr);
    }
    job *j = pb_server_job_new(srv, kind);
    if (!j) {
        pb_server_model_release(srv);
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 500, "server_error", NULL, NULL, "out of memory");
    }
    j->holds_model = true;
    parse_err e;
    memset(&e, 0, sizeof e);
    bool ok = kind == JOB_CHAT ? parse_chat(srv, root, j, &e) : parse_completion(srv, root, j, &e);
    cJSON_Delete(root);
    if (!ok) {
        pb_server_job_release(j);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", e.param, e.code, "%s", e.msg);
    }
    if (j->n_prompt + 1 > srv->n_ctx) {
        int64_t n = j->n_prompt;
        pb_server_job_release(j);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", "messages", "context_length_exceeded",
                                    "the prompt has %lld tokens; this server's context is %d tokens", (long long)n,
                                    srv->n_ctx);
    }
    unsigned refused = pb_server_queue_push(srv, j);
    if (refused) {
        pb_server_job_release(j);
        if (refused == 503)
            return pb_server_send_error(srv, c, 503, "server_error", NULL, "shutting_down",
                                        "the server is shutting down");
        return pb_server_send_error(srv, c, 429, "rate_limit_error", NULL, "queue_full",
                                    "all %d slots are busy and %d requests are waiting; try again later", srv->n_slots,
                                    srv->p.queue_max);
    }
    return j->stream ? pb_server_sse_respond(srv, c, j) : respond_whole(srv, c, j);
}

enum MHD_Result pb_server_route_tokenize(pb_server *srv, struct MHD_Connection *c, request *rq) {
    cJSON *root = cJSON_ParseWithLength(rq->body ? rq->body : "", rq->len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_json",
                                    "request body must be a JSON object");
    }
    cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
    if (!cJSON_IsString(content)) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", "content", NULL,
                                    "'content' must be a string");
    }
    int64_t n = 0;
    const char *t = content->valuestring;
    char merr[512];
    unsigned refused = pb_server_model_acquire(srv, NULL, merr, sizeof merr);
    if (refused) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, refused, "server_error", NULL, NULL, "%s", merr);
    }
    pb_status s = pb_tokenize(srv->vocab, t, strlen(t), 0, NULL, 0, &n);
    pb_server_model_release(srv);
    cJSON_Delete(root);
    if (s != PB_OK && s != PB_ERR_INVALID_ARG)
        return pb_server_send_error(srv, c, 500, "server_error", NULL, NULL, "tokenize failed: %s", pb_last_error());
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)n);
    return pb_server_send_json(srv, c, 200, o);
}
