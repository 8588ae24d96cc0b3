/* server_http.c -- the HTTP transport: libmicrohttpd's request callbacks, the request framing checks (what MHD takes
 * but leaves ambiguous), routing, the API key check and the response helpers every route uses. Routes themselves live
 * in server_openai.c, server_metrics.c, server_ui.c. */
#include "base/base.h"
#include "server/server_internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Copies s into out (cap bytes) with control bytes (below 0x20, DEL) as '?'. */
static void printable(const char *s, char *out, size_t cap) {
    size_t k = 0;
    for (; *s && k + 1 < cap; s++) out[k++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
    out[k] = 0;
}

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

/* A JSON error (message through cJSON: it may hold the client's text) with one more header: 405's Allow, a refusal's
 * Connection: close. */
static enum MHD_Result send_error_hdr(pb_server *srv, struct MHD_Connection *c, unsigned code, const char *errcode,
                                      const char *text, const char *hname, const char *hval) {
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", text);
    cJSON_AddStringToObject(e, "type", code >= 500 ? "server_error" : "invalid_request_error");
    cJSON_AddNullToObject(e, "param");
    cJSON_AddStringToObject(e, "code", errcode);
    pb_server_json_repair(o);
    char *msg = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!msg) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(msg), msg, MHD_RESPMEM_MUST_COPY);
    free(msg);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, hname, hval);
    pb_server_guard_headers(srv, c, r);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    pb_server_count_response(srv, code);
    return ret;
}

/* 405 with the Allow header the client needs. */
static enum MHD_Result send_405(pb_server *srv, struct MHD_Connection *c, const char *allow, const char *method,
                                const char *url) {
    char text[300];
    snprintf(text, sizeof text, "%.10s is not allowed on this route; use %s", method, allow);
    (void)url;
    return send_error_hdr(srv, c, 405, "method_not_allowed", text, "Allow", allow);
}

/* 204 for OPTIONS: Allow, and for an origin --cors names the CORS preflight headers with the same methods (the guard
 * already refused origins --cors does not name). */
static enum MHD_Result send_preflight(pb_server *srv, struct MHD_Connection *c, const char *allow) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Allow", allow);
    pb_server_guard_headers(srv, c, r);
    pb_server_guard_preflight(srv, c, r, allow);
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    pb_server_count_response(srv, 204);
    return ret;
}

/* ---- request framing ---------------------------------------------------------------------------------- */

static int hexval(char ch) {
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

void *pb_server_uri_log(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)cls;
    conn *cn = pb_server_conn_of(c);
    if (!cn) return NULL;
    bool slash = false;
    for (const char *p = uri ? uri : ""; *p && *p != '?' && !slash; p++)
        slash = p[0] == '%' && p[1] == '2' && (p[2] == 'F' || p[2] == 'f');
    cn->slash_in_target = slash;
    return NULL; /* the request's context stays NULL until pb_server_on_request's first call */
}

size_t pb_server_unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls;
    char *w = s;
    for (const char *r = s; *r;) {
        int hi = r[0] == '%' ? hexval(r[1]) : -1, lo = hi >= 0 ? hexval(r[2]) : -1;
        if (lo < 0) { /* not an escape: kept as it is, as MHD_http_unescape keeps it */
            *w++ = *r++;
        } else if (hi == 0 && lo == 0) {
            conn *cn = pb_server_conn_of(c);
            if (cn) cn->nul_in_target = true;
            memmove(w, r, 3), w += 3, r += 3;
        } else {
            *w++ = (char)(hi * 16 + lo), r += 3;
        }
    }
    *w = 0;
    return (size_t)(w - s);
}

/* Header fields that may appear once: a second one makes the request mean two things (which Host the Host check
 * read, which Content-Length framed the body), and a proxy in front may read the other one (request smuggling). */
static const char *const single_fields[] = {"Host",   "Content-Length", "Transfer-Encoding", "Authorization",
                                            "Origin", "Content-Type",   "Sec-Fetch-Site"};
#define N_SINGLE (sizeof single_fields / sizeof *single_fields)

typedef struct field_scan {
    int count[N_SINGLE];
    char bad_name[64]; /* a field name that is not an HTTP token ("Host " before its colon) */
} field_scan;

/* RFC 9110 5.1: a field name is a token (tchar: letters, digits, !#$%&'*+-.^_`|~). */
static bool is_token(const char *k) {
    if (!*k) return false;
    for (; *k; k++)
        if (!(isalnum((unsigned char)*k) || strchr("!#$%&'*+-.^_`|~", *k))) return false;
    return true;
}

static enum MHD_Result scan_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind, (void)value;
    field_scan *fs = cls;
    if (!is_token(key) && !fs->bad_name[0]) printable(key, fs->bad_name, sizeof fs->bad_name);
    for (size_t i = 0; i < N_SINGLE; i++)
        if (strcasecmp(key, single_fields[i]) == 0) fs->count[i]++;
    return MHD_YES;
}

/* The request line and headers checked for what libmicrohttpd accepts but leaves ambiguous (RFC 9112): 0 when fine,
 * else the status (400; 501 for a transfer coding it does not do) with why and code filled. */
static unsigned framing_check(struct MHD_Connection *c, const char *version, char *why, size_t cap, const char **code) {
    field_scan fs;
    memset(&fs, 0, sizeof fs);
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_field, &fs);
    *code = "bad_request";
    conn *cn = pb_server_conn_of(c);
    bool nul = cn && cn->nul_in_target, slash = cn && cn->slash_in_target;
    if (cn) cn->nul_in_target = cn->slash_in_target = false; /* the next request on the connection starts clean */
    if (nul) {
        snprintf(why, cap, "the request target holds %%00 (a NUL byte), which no path or query may contain");
        return 400;
    }
    if (slash) {
        snprintf(why, cap,
                 "the request path holds %%2F, an encoded '/': decoded it would name another path (/v1%%2Fmodels "
                 "routed as /v1/models), so it is refused; send '/' itself");
        return 400;
    }
    if (fs.bad_name[0]) {
        snprintf(why, cap, "header field name '%s' is not a token (whitespace before the colon?)", fs.bad_name);
        return 400;
    }
    for (size_t i = 0; i < N_SINGLE; i++)
        if (fs.count[i] > 1) {
            snprintf(why, cap, "the request has %d %s headers; it may have one (which one counts is ambiguous)",
                     fs.count[i], single_fields[i]);
            return 400;
        }
    /* HTTP/1.1 (and 1.x later, which MHD reads as 1.1) needs a Host; HTTP/1.0 may go without */
    if (fs.count[0] == 0 && strcmp(version, MHD_HTTP_VERSION_1_0) != 0) {
        snprintf(why, cap, "an %.16s request needs a Host header", version);
        return 400;
    }
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
    if (te && fs.count[1]) {
        snprintf(why, cap,
                 "the request has both Content-Length and Transfer-Encoding; send one (which frames the "
                 "body is ambiguous)");
        return 400;
    }
    if (te) { /* the body's length is known only when chunked is the last coding (RFC 9112 6.3) */
        size_t n = strlen(te);
        while (n && (te[n - 1] == ' ' || te[n - 1] == '\t')) n--;
        size_t b = n;
        while (b && te[b - 1] != ',' && te[b - 1] != ' ' && te[b - 1] != '\t') b--;
        char shown[64];
        printable(te, shown, sizeof shown);
        if (n - b != 7 || strncasecmp(te + b, "chunked", 7) != 0) {
            snprintf(why, cap, "Transfer-Encoding '%s' does not end in chunked: the body's length is unknown", shown);
            return 400;
        }
        const char *p = te;
        while (*p == ' ' || *p == '\t') p++;
        if (p != te + b) {
            snprintf(why, cap, "Transfer-Encoding '%s' is not supported (only chunked)", shown);
            *code = "not_implemented";
            return 501;
        }
    }
    return 0;
}

/* A refusal of the request as sent, before its body is read: the JSON error, and the connection closed after it
 * (whatever follows on it cannot be framed with confidence). */
static enum MHD_Result send_refusal(pb_server *srv, struct MHD_Connection *c, unsigned code, const char *errcode,
                                    const char *msg) {
    return send_error_hdr(srv, c, code, errcode, msg, "Connection", "close");
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
        char note[2048];
        if (srv->p.hooks.kb_status && srv->p.hooks.kb_status(srv->p.hooks.status_user, note, sizeof note))
            cJSON_AddStringToObject(o, "knowledge_base_note", note);
    }
    return pb_server_send_json(srv, c, stopping ? 503 : 200, o);
}

/* The methods a route answers (its Allow header; a CORS preflight's Access-Control-Allow-Methods), or NULL when url is
 * no route. "*" is OPTIONS * (RFC 9110 9.3.7: the server in general): every method the server answers somewhere. */
static const char *route_methods(const char *url) {
    if (strcmp(url, "*") == 0) return "GET, HEAD, POST, OPTIONS";
    if (strcmp(url, "/v1/chat/completions") == 0 || strcmp(url, "/v1/completions") == 0 ||
        strcmp(url, "/tokenize") == 0)
        return "POST, OPTIONS";
    bool model_route = strncmp(url, "/v1/models/", 11) == 0 && url[11]; /* GET /v1/models/ID (retrieve) */
    if (strcmp(url, "/v1/models") == 0 || model_route || strcmp(url, "/health") == 0 || strcmp(url, "/metrics") == 0 ||
        strcmp(url, "/stats") == 0 || (strncmp(url, "/v1/", 4) != 0 && pb_server_static_exists(url)))
        return "GET, HEAD, OPTIONS"; /* HEAD is GET without the body (MHD drops it) */
    return NULL;
}

/* What is decided from the request line and headers alone, before the body is read (an unauthorized or misrouted
 * request never makes the server buffer up to max_body): the Host / Origin guard (403), the routes (404, 405), OPTIONS
 * (answered here), the API key (401). True with *ret set when the request was answered; false when it goes on to its
 * route once its body is in. */
static bool answer_before_body(pb_server *srv, struct MHD_Connection *c, const char *url, const char *method,
                               enum MHD_Result *ret) {
    char why[400];
    unsigned refused = pb_server_guard_check(srv, c, why, sizeof why);
    if (refused) {
        *ret = pb_server_send_error(srv, c, refused, "invalid_request_error", NULL, "forbidden", "%s", why);
        return true;
    }
    bool is_options = strcmp(method, "OPTIONS") == 0;
    /* 405 only where GET answers: another method (OPTIONS too) on a path that does not exist is a 404, as GET of it
     * is */
    const char *allow = route_methods(url);
    if (!allow) {
        *ret = pb_server_send_error(srv, c, 404, "invalid_request_error", NULL, "not_found",
                                    "no route for %.10s %.200s", method, url);
        return true;
    }
    if (strcmp(url, "*") == 0) { /* the asterisk form is for OPTIONS only (RFC 9112 3.2.4) */
        if (is_options)
            *ret = send_preflight(srv, c, allow);
        else
            *ret = pb_server_send_error(srv, c, 400, "invalid_request_error", NULL, "bad_request",
                                        "the request target '*' is only for OPTIONS (it asks about the server in "
                                        "general); %.10s needs a path",
                                        method);
        return true;
    }
    bool post_route = strncmp(allow, "POST", 4) == 0;
    bool model_route = strncmp(url, "/v1/models/", 11) == 0 && url[11];
    bool authed = auth_ok(srv, c);
    if (is_options) {
        /* /v1/models/ID of a model not in the library: 404, as its GET. Said only to a caller the key admits (or with
         * no key): a preflight carries no credentials, and a 204 / 404 there would list the library to anyone. */
        if (model_route && (authed || !srv->api_key) && !pb_server_model_listed(srv, url + 11))
            *ret = pb_server_send_model_404(srv, c, url + 11);
        else
            *ret = send_preflight(srv, c, allow);
        return true;
    }
    /* /metrics and /stats tell what is asked and how busy the server is: behind the key like the API */
    bool keyed = strncmp(url, "/v1/", 4) == 0 || strcmp(url, "/tokenize") == 0 || strcmp(url, "/metrics") == 0 ||
                 strcmp(url, "/stats") == 0;
    if (keyed && !authed) {
        *ret = pb_server_send_error(srv, c, 401, "invalid_request_error", NULL, "invalid_api_key",
                                    "missing or wrong API key (send 'Authorization: Bearer KEY')");
        return true;
    }
    bool is_get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0, is_post = strcmp(method, "POST") == 0;
    if (post_route ? is_post : is_get) return false;
    *ret = send_405(srv, c, allow, method, url);
    return true;
}

/* A body follows the headers: a Content-Length other than 0, or a Transfer-Encoding (framing_check let only
 * chunked through). */
static bool body_coming(struct MHD_Connection *c) {
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    return (cl && strcmp(cl, "0") != 0) || MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
}

enum MHD_Result pb_server_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                     const char *version, const char *upload, size_t *upload_size, void **con_cls) {
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
        /* the request as libmicrohttpd framed it, refused before its body is read when that framing is ambiguous */
        char why[300];
        const char *code;
        unsigned bad = framing_check(c, version, why, sizeof why, &code);
        enum MHD_Result ret = MHD_YES;
        if (bad) {
            ret = send_refusal(srv, c, bad, code, why);
            rq->responded = true;
        } else if (body_coming(c)) {
            /* answered now, the body is not read: libmicrohttpd then closes the connection, so a request without one
             * is answered at the usual time (its connection stays open) */
            rq->responded = answer_before_body(srv, c, url, method, &ret);
            rq->checked = !rq->responded;
        }
        return ret;
    }
    if (rq->responded) { /* answered early: what follows is not read as a body */
        *upload_size = 0;
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
    enum MHD_Result ret;
    if (!rq->checked && answer_before_body(srv, c, url, method, &ret)) return ret;
    if (rq->too_large)
        return pb_server_send_error(srv, c, 413, "invalid_request_error", NULL, "request_too_large",
                                    "request body is larger than %zu bytes", srv->p.max_body);
    bool authed = auth_ok(srv, c);
    if (strcmp(url, "/tokenize") == 0) return pb_server_route_tokenize(srv, c, rq);
    if (strcmp(url, "/v1/chat/completions") == 0) return pb_server_route_generate(srv, c, rq, JOB_CHAT);
    if (strcmp(url, "/v1/completions") == 0) return pb_server_route_generate(srv, c, rq, JOB_COMPLETION);
    if (strcmp(url, "/v1/models") == 0) return pb_server_route_models(srv, c);
    if (strncmp(url, "/v1/models/", 11) == 0) return pb_server_route_model(srv, c, url + 11);
    if (strcmp(url, "/health") == 0) return route_health(srv, c, authed);
    if (strcmp(url, "/metrics") == 0) return pb_server_route_metrics(srv, c);
    if (strcmp(url, "/stats") == 0) return pb_server_route_stats(srv, c);
    return pb_server_route_static(srv, c, url);
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
    bool running = false; /* its generation still runs (a stream whose connection ends first) */
    if (rq->job) {
        pthread_mutex_lock(&rq->job->mu);
        running = !rq->job->done;
        /* the stats come when the generation ends; until then the pieces sent (a piece per token, but for a
         * character's bytes held back) */
        snprintf(tokens, sizeof tokens, " %lld+%lld tokens", (long long)rq->job->n_prompt,
                 (long long)(running ? rq->job->n_pieces : rq->job->stats.n_generated));
        pthread_mutex_unlock(&rq->job->mu);
    }
    char stall[128] = "";
    if (pb_server_conn_stalled(srv, c))
        snprintf(stall, sizeof stall, " (reset: the client took no bytes for %g s%s)", srv->p.write_timeout,
                 running ? "; its generation cancelled" : "");
    /* the method and path as sent, made printable: a log line never carries control bytes (a method is any token
     * libmicrohttpd reads up to the space, escape sequences included) */
    char method[sizeof rq->method], path[sizeof rq->path];
    printable(rq->method, method, sizeof method);
    printable(rq->path, path, sizeof path);
    char line[512];
    snprintf(line, sizeof line, "%s %s %s %u%s %.3f s%s", addr, method, path, status, tokens,
             (pb_time_ms() - rq->t_start) / 1000.0, stall);
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
