/* server_http.c -- the HTTP transport: libmicrohttpd's request callbacks, routing, the API key check and the
 * response helpers every route uses. Routes themselves live in server_openai.c, server_metrics.c, server_ui.c. */
#include "base/base.h"
#include "server/server_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    pb_server_guard_headers(srv, c, r);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    pb_server_count_response(srv, code);
    return ret;
}

void pb_server_json_repair(cJSON *node) {
    for (cJSON *c = node ? node->child : NULL; c; c = c->next) {
        if (cJSON_IsString(c) && c->valuestring) {
            size_t n = strlen(c->valuestring);
            if (pb_utf8_valid((const uint8_t *)c->valuestring, n)) continue;
            char *fixed = malloc(PB_UTF8_REPAIR_CAP(n));
            if (!fixed) continue;
            pb_utf8_repair(c->valuestring, n, fixed);
            cJSON_free(c->valuestring);
            c->valuestring = fixed; /* cJSON frees it with free(): the server installs no other hooks */
        } else if (cJSON_IsArray(c) || cJSON_IsObject(c)) {
            pb_server_json_repair(c);
        }
    }
}

enum MHD_Result pb_server_send_json(pb_server *srv, struct MHD_Connection *c, unsigned code, cJSON *obj) {
    pb_server_json_repair(obj);
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
    /* the scheme is case-insensitive (RFC 9110 11.1): "bearer KEY" from some clients is the same credential */
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    size_t a = strlen(h), b = strlen(srv->api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned)(h[i] ^ srv->api_key[i]); /* constant time */
    return diff == 0;
}

/* 405 with the Allow header the client needs. */
static enum MHD_Result send_405(pb_server *srv, struct MHD_Connection *c, const char *allow, const char *method,
                                const char *url) {
    /* through cJSON: the method is the client's text (quotes, bytes that are not UTF-8) */
    char text[300];
    snprintf(text, sizeof text, "%.10s is not allowed on this route; use %s", method, allow);
    (void)url;
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", text);
    cJSON_AddStringToObject(e, "type", "invalid_request_error");
    cJSON_AddNullToObject(e, "param");
    cJSON_AddStringToObject(e, "code", "method_not_allowed");
    pb_server_json_repair(o);
    char *msg = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!msg) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(msg), msg, MHD_RESPMEM_MUST_COPY);
    free(msg);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Allow", allow);
    pb_server_guard_headers(srv, c, r);
    enum MHD_Result ret = MHD_queue_response(c, 405, r);
    MHD_destroy_response(r);
    pb_server_count_response(srv, 405);
    return ret;
}

/* 204 for an allowed CORS preflight (the guard already refused origins --cors does not name). */
static enum MHD_Result send_preflight(pb_server *srv, struct MHD_Connection *c, const char *allow) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Allow", allow);
    pb_server_guard_headers(srv, c, r);
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    pb_server_count_response(srv, 204);
    return ret;
}

/* GET /health: {"status"}; with the model name and whether a knowledge base is there for a caller the API key
 * admits (the web UI shows both). */
static enum MHD_Result route_health(pb_server *srv, struct MHD_Connection *c, bool authed) {
    char model[256];
    pthread_mutex_lock(&srv->mu); /* model_id changes under srv->mu when a request loads another model */
    bool stopping = srv->stopping;
    snprintf(model, sizeof model, "%s", srv->model_id ? srv->model_id : "");
    pthread_mutex_unlock(&srv->mu);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", stopping ? "stopping" : "ok");
    if (authed) {
        cJSON_AddStringToObject(o, "model", model);
        cJSON_AddBoolToObject(o, "knowledge_base", srv->p.hooks.kb_prompt != NULL);
    }
    return pb_server_send_json(srv, c, stopping ? 503 : 200, o);
}

enum MHD_Result pb_server_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                     const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    pb_server *srv = cls;
    request *rq = *con_cls;
    if (!rq) { /* the headers are complete */
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        *con_cls = rq;
        rq->t_start = pb_time_ms();
        snprintf(rq->method, sizeof rq->method, "%s", method);
        snprintf(rq->path, sizeof rq->path, "%s", url);
        atomic_fetch_add(&srv->n_in_flight, 1);
        pb_server_conn_busy(srv, c);
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
    char why[400];
    unsigned refused = pb_server_guard_check(srv, c, why, sizeof why);
    if (refused) return pb_server_send_error(srv, c, refused, "invalid_request_error", NULL, "forbidden", "%s", why);
    /* HEAD is GET without the body (MHD drops it) */
    bool is_get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0, is_post = strcmp(method, "POST") == 0;
    bool is_options = strcmp(method, "OPTIONS") == 0;
    if (rq->too_large)
        return pb_server_send_error(srv, c, 413, "invalid_request_error", NULL, "request_too_large",
                                    "request body is larger than %zu bytes", srv->p.max_body);
    bool post_route = strcmp(url, "/v1/chat/completions") == 0 || strcmp(url, "/v1/completions") == 0 ||
                      strcmp(url, "/tokenize") == 0;
    bool model_route = strncmp(url, "/v1/models/", 11) == 0 && url[11]; /* GET /v1/models/ID (retrieve) */
    bool get_route = strcmp(url, "/v1/models") == 0 || model_route || strcmp(url, "/health") == 0 ||
                     strcmp(url, "/metrics") == 0 || strcmp(url, "/stats") == 0 ||
                     (strncmp(url, "/v1/", 4) != 0 && pb_server_static_exists(url));
    /* a preflight only where a route answers: OPTIONS of a path that does not exist is a 404, as GET of it is */
    if (is_options && !post_route && !get_route)
        return pb_server_send_error(srv, c, 404, "invalid_request_error", NULL, "not_found",
                                    "no route for %.10s %.200s", method, url);
    if (is_options) return send_preflight(srv, c, post_route ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
    bool authed = auth_ok(srv, c);
    /* /metrics and /stats tell what is asked and how busy the server is: behind the key like the API */
    bool keyed = strncmp(url, "/v1/", 4) == 0 || strcmp(url, "/tokenize") == 0 || strcmp(url, "/metrics") == 0 ||
                 strcmp(url, "/stats") == 0;
    if (keyed && !authed)
        return pb_server_send_error(srv, c, 401, "invalid_request_error", NULL, "invalid_api_key",
                                    "missing or wrong API key (send 'Authorization: Bearer KEY')");
    if (post_route) {
        if (!is_post) return send_405(srv, c, "POST, OPTIONS", method, url);
        if (strcmp(url, "/tokenize") == 0) return pb_server_route_tokenize(srv, c, rq);
        return pb_server_route_generate(srv, c, rq,
                                        strcmp(url, "/v1/chat/completions") == 0 ? JOB_CHAT : JOB_COMPLETION);
    }
    if (!is_get) {
        /* 405 only where GET answers: another method on a path that does not exist is a 404, as GET of it is */
        if (!get_route)
            return pb_server_send_error(srv, c, 404, "invalid_request_error", NULL, "not_found",
                                        "no route for %.10s %.200s", method, url);
        return send_405(srv, c, "GET, HEAD, OPTIONS", method, url);
    }
    if (strcmp(url, "/v1/models") == 0) return pb_server_route_models(srv, c);
    if (model_route) return pb_server_route_model(srv, c, url + 11);
    if (strcmp(url, "/health") == 0) return route_health(srv, c, authed);
    if (strcmp(url, "/metrics") == 0) return pb_server_route_metrics(srv, c);
    if (strcmp(url, "/stats") == 0) return pb_server_route_stats(srv, c);
    return pb_server_route_static(srv, c, url);
}

/* Copies s into out (cap bytes) with control bytes (below 0x20, DEL) as '?'. */
static void printable(const char *s, char *out, size_t cap) {
    size_t k = 0;
    for (; *s && k + 1 < cap; s++) out[k++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
    out[k] = 0;
}

/* "127.0.0.1 POST /v1/chat/completions 200 12+16 tokens 0.532 s" */
static void log_request(pb_server *srv, struct MHD_Connection *c, request *rq) {
    char addr[64] = "?";
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, addr, sizeof addr);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, addr, sizeof addr);
    }
    const union MHD_ConnectionInfo *si = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
    unsigned status = si ? si->http_status : 0;
    char tokens[64] = "";
    if (rq->job) {
        pthread_mutex_lock(&rq->job->mu);
        snprintf(tokens, sizeof tokens, " %lld+%lld tokens", (long long)rq->job->n_prompt,
                 (long long)rq->job->stats.n_generated);
        pthread_mutex_unlock(&rq->job->mu);
    }
    /* the method and path as sent, made printable: a log line never carries control bytes (a method is any token
     * libmicrohttpd reads up to the space, escape sequences included) */
    char method[sizeof rq->method], path[sizeof rq->path];
    printable(rq->method, method, sizeof method);
    printable(rq->path, path, sizeof path);
    char line[512];
    snprintf(line, sizeof line, "%s %s %s %u%s %.3f s", addr, method, path, status, tokens,
             (pb_time_ms() - rq->t_start) / 1000.0);
    srv->p.log(srv->p.log_user, line);
}

void pb_server_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    pb_server *srv = cls;
    (void)toe;
    request *rq = *con_cls;
    if (!rq) return;
    if (srv->p.log) log_request(srv, c, rq);
    if (rq->job) pb_server_job_release(rq->job);
    free(rq->body);
    free(rq);
    *con_cls = NULL;
    pb_server_conn_idle(srv, c);
    atomic_fetch_sub(&srv->n_in_flight, 1);
}
