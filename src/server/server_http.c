/* server_http.c -- the HTTP transport: libmicrohttpd's request callbacks, routing, the API key check and the
 * response helpers every route uses. Routes themselves live in server_openai.c, server_metrics.c, server_ui.c. */
#include "base/base.h"
#include "server/server_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pb_server_count_response(pb_server *srv, unsigned code) {
    pthread_mutex_lock(&srv->m.mu);
    if (code / 100 >= 1 && code / 100 < 6) srv->m.req_by_code[code / 100]++;
    pthread_mutex_unlock(&srv->m.mu);
}

enum MHD_Result pb_server_send_text(pb_server *srv, struct MHD_Connection *c, unsigned code, const char *ctype,
                                    const char *text, size_t len, bool copy) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)text, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    pb_server_count_response(srv, code);
    return ret;
}

enum MHD_Result pb_server_send_json(pb_server *srv, struct MHD_Connection *c, unsigned code, cJSON *obj) {
    char *txt = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!txt) return MHD_NO;
    enum MHD_Result r = pb_server_send_text(srv, c, code, "application/json", txt, strlen(txt), true);
    free(txt);
    return r;
}

enum MHD_Result pb_server_send_error(pb_server *srv, struct MHD_Connection *c, unsigned code, const char *type,
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
    return pb_server_send_json(srv, c, code, o);
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

enum MHD_Result pb_server_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
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
        return pb_server_send_error(srv, c, 413, "invalid_request_error", NULL, "request_too_large",
                                    "request body is larger than %zu bytes", srv->p.max_body);
    bool api = strncmp(url, "/v1/", 4) == 0 || strcmp(url, "/tokenize") == 0;
    if (api && !auth_ok(srv, c))
        return pb_server_send_error(srv, c, 401, "invalid_request_error", NULL, "invalid_api_key",
                                    "missing or wrong API key (send 'Authorization: Bearer KEY')");
    if (strcmp(url, "/v1/chat/completions") == 0 || strcmp(url, "/v1/completions") == 0 ||
        strcmp(url, "/tokenize") == 0) {
        if (!is_post)
            return pb_server_send_error(srv, c, 405, "invalid_request_error", NULL, "method_not_allowed",
                                        "%s needs POST", url);
        if (strcmp(url, "/tokenize") == 0) return pb_server_route_tokenize(srv, c, rq);
        return pb_server_route_generate(srv, c, rq,
                                        strcmp(url, "/v1/chat/completions") == 0 ? JOB_CHAT : JOB_COMPLETION);
    }
    if (!is_get)
        return pb_server_send_error(srv, c, strncmp(url, "/v1/", 4) == 0 ? 404 : 405, "invalid_request_error", NULL,
                                    "not_found", "no route for %.10s %.200s", method, url);
    if (strcmp(url, "/v1/models") == 0) return pb_server_route_models(srv, c);
    if (strcmp(url, "/health") == 0) {
        pthread_mutex_lock(&srv->mu);
        bool stopping = srv->stopping;
        pthread_mutex_unlock(&srv->mu);
        const char *body = stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}";
        return pb_server_send_text(srv, c, stopping ? 503 : 200, "application/json", body, strlen(body), false);
    }
    if (strcmp(url, "/metrics") == 0) return pb_server_route_metrics(srv, c);
    if (strcmp(url, "/stats") == 0) return pb_server_route_stats(srv, c);
    return pb_server_route_static(srv, c, url);
}

void pb_server_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
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
