/* server_sse.c -- server-sent events: OpenAI stream chunks and the reader MHD pulls a stream's bytes through
 * (keep-alives, a vanished client cancels its job). No request parsing here. */
#include "base/base.h"
#include "server/server_internal.h"

#include <stdlib.h>
#include <string.h>

void pb_server_sse_event(job *j, cJSON *obj) {
    pb_server_json_repair(obj);
    char *txt = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!txt) return;
    pb_server_job_append(j, "data: ", 6);
    pb_server_job_append(j, txt, strlen(txt));
    pb_server_job_append(j, "\n\n", 2);
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

cJSON *pb_server_sse_chunk(const job *j, const char *model_id, const char *content, size_t len, bool role,
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

cJSON *pb_server_sse_reasoning_chunk(const job *j, const char *model_id, const char *text, size_t len) {
    cJSON *o = chunk_base(j, model_id);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    char *t = malloc(len + 1);
    if (t) {
        memcpy(t, text, len);
        t[len] = 0;
    }
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    cJSON_AddStringToObject(d, "reasoning_content", t ? t : "");
    free(t);
    cJSON_AddNullToObject(c, "finish_reason");
    return o;
}

cJSON *pb_server_sse_error(const char *message, const char *code) {
    cJSON *e = cJSON_CreateObject();
    cJSON *eo = cJSON_AddObjectToObject(e, "error");
    cJSON_AddStringToObject(eo, "message", message);
    cJSON_AddStringToObject(eo, "type", "server_error");
    if (code) cJSON_AddStringToObject(eo, "code", code);
    return e;
}

cJSON *pb_server_sse_usage_chunk(const job *j, const char *model_id) {
    cJSON *o = chunk_base(j, model_id);
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", pb_server_usage_obj(j));
    return o;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    double t0 = pb_time_ms();
    while (j->out_sent == j->out_len && !j->done && !(j->fell_back)) {
        pb_server_job_wait_locked(j, 200);
        if (j->out_sent == j->out_len && !j->done && pb_time_ms() - t0 > 5000) {
            /* keep-alive comment: also detects a vanished client while the job is queued */
            pb_server_job_append(j, ": keep-alive\n\n", 14);
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
    if (unfinished) pb_server_job_cancel(j);
    pb_server_job_release(j);
}

enum MHD_Result pb_server_sse_respond(pb_server *srv, struct MHD_Connection *c, job *j) {
    pthread_mutex_lock(&j->mu);
    cJSON *first = pb_server_sse_chunk(j, srv->model_id, j->kind == JOB_CHAT ? "" : NULL, 0, true, NULL);
    if (j->sources_json) cJSON_AddItemToObject(first, "sources", cJSON_Parse(j->sources_json));
    pb_server_sse_event(j, first);
    pthread_mutex_unlock(&j->mu);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, j, stream_free);
    if (!r) {
        pb_server_job_cancel(j);
        pb_server_job_release(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    pb_server_guard_headers(srv, c, r);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    pb_server_count_response(srv, 200);
    return ret;
}
