/* server.c -- the server's lifecycle: slots and their sessions, the libmicrohttpd daemon, graceful stop. The
 * room's other files (server_internal.h lists them) do the transport, queue, API, streaming and UI. */
#include "base/base.h"
#include "server/server_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The bind address: an IPv4 or IPv6 literal, or a name ("localhost") resolved to its first address. */
static pb_status resolve_host(const char *host, int port, struct sockaddr_storage *out) {
    memset(out, 0, sizeof *out);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_ADDRCONFIG;
    const char *h = host;
    char buf[256];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof buf) { /* "[::1]" */
        memcpy(buf, host + 1, n - 2);
        buf[n - 2] = 0;
        h = buf;
    }
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(h, portstr, &hints, &res);
    if (rc == EAI_ADDRFAMILY || rc == EAI_NONAME) { /* e.g. "::1" on a host without a configured IPv6 address */
        hints.ai_flags = AI_PASSIVE;
        rc = getaddrinfo(h, portstr, &hints, &res);
    }
    if (rc != 0 || !res)
        return pb_error(PB_ERR_INVALID_ARG, "server: --host '%s' is not an address or a known name (%s)", host,
                        gai_strerror(rc));
    /* a name with both families (localhost): the IPv4 one, which every client reaches */
    struct addrinfo *pick = res;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
    if (pick->ai_addrlen > sizeof *out || (pick->ai_family != AF_INET && pick->ai_family != AF_INET6)) {
        freeaddrinfo(res);
        return pb_error(PB_ERR_INVALID_ARG, "server: --host '%s' has no IPv4 or IPv6 address", host);
    }
    memcpy(out, pick->ai_addr, pick->ai_addrlen);
    freeaddrinfo(res);
    return PB_OK;
}

/* libmicrohttpd's own messages ("Failed to send ..." when a client leaves mid-stream): to the request log, made
 * printable (they quote the client's URL), or nowhere. MHD_USE_ERROR_LOG alone printed them on stderr, --quiet or not:
 * the server room prints nothing itself. */
static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    pb_server *srv = cls;
    if (!srv->p.log) return;
    char line[512] = "http: ";
    size_t k = strlen(line);
    vsnprintf(line + k, sizeof line - k, fmt, ap);
    size_t n = strlen(line);
    while (n > k && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    for (size_t i = k; i < n; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f) line[i] = '?';
    srv->p.log(srv->p.log_user, line);
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
    p.max_connections = 512;
    p.max_conn_per_client = 64;
    p.gpu = -1;
    p.header_timeout = 10;
    p.idle_timeout = 120;
    p.write_timeout = 30;
    p.batch = true;
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
    srv->host = pb_strdup(srv->p.host ? srv->p.host : "127.0.0.1");
    srv->api_key = srv->p.api_key && *srv->p.api_key ? pb_strdup(srv->p.api_key) : NULL;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    pthread_mutex_init(&srv->m.mu, NULL);
    pthread_mutex_init(&srv->conn_mu, NULL);
    pthread_mutex_init(&srv->tok_mu, NULL);
    srv->n_slots = srv->p.n_parallel;
    srv->slots = calloc((size_t)srv->n_slots, sizeof(slot));
    pb_status s = srv->slots ? pb_server_models_init(srv, m) : pb_error(PB_ERR_NOMEM, "server: out of memory");
    if (s == PB_OK && srv->p.batch && srv->n_slots > 1) s = pb_batch_new(m, srv->n_slots, &srv->batch);
    int started = 0;
    for (int i = 0; s == PB_OK && i < srv->n_slots; i++) {
        slot *sl = &srv->slots[i];
        sl->srv = srv;
        sl->index = i;
        pb_session_params sp = pb_server_slot_params(&srv->p, m, srv->n_ctx, srv->batch);
        s = pb_session_new(m, &sp, &sl->session);
        if (s != PB_OK) break;
        if (pthread_create(&sl->thread, NULL, pb_server_slot_main, sl) != 0) {
            s = pb_error(PB_ERR_INTERNAL, "server: cannot start slot thread");
            break;
        }
        started++;
    }
    struct sockaddr_storage addr;
    if (s == PB_OK) s = resolve_host(srv->host, srv->p.port, &addr);
    if (s == PB_OK) s = pb_server_guard_init(srv, (struct sockaddr *)&addr);
    if (s == PB_OK) s = pb_server_watchdog_start(srv);
    if (s == PB_OK) {
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
        if (addr.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
        srv->daemon = MHD_start_daemon(
            flags, (uint16_t)srv->p.port, NULL, NULL, pb_server_on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
            srv, MHD_OPTION_URI_LOG_CALLBACK, pb_server_uri_log, srv, MHD_OPTION_UNESCAPE_CALLBACK, pb_server_unescape,
            srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, pb_server_on_completed,
            srv, MHD_OPTION_NOTIFY_CONNECTION, pb_server_on_connection, srv, MHD_OPTION_CONNECTION_TIMEOUT,
            (unsigned)(srv->p.idle_timeout > 0 ? srv->p.idle_timeout : 0), MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)(srv->p.max_connections > 0 ? srv->p.max_connections : 512), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned)(srv->p.max_conn_per_client > 0 ? srv->p.max_conn_per_client : 0), MHD_OPTION_END);
        if (!srv->daemon)
            s = pb_error(PB_ERR_IO, "server: cannot listen on %s port %d (%s)", srv->host, srv->p.port,
                         errno ? strerror(errno) : "address in use?");
    }
    if (s != PB_OK) {
        pthread_mutex_lock(&srv->mu);
        srv->stopping = true;
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
        for (int i = 0; i < started; i++) pthread_join(srv->slots[i].thread, NULL);
        for (int i = 0; srv->slots && i < srv->n_slots; i++) pb_session_free(srv->slots[i].session);
        pb_batch_free(srv->batch);
        pb_server_watchdog_stop(srv);
        pb_server_guard_deinit(srv);
        pthread_mutex_destroy(&srv->conn_mu);
        pthread_mutex_destroy(&srv->tok_mu);
        pb_server_models_free(srv);
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
    pb_server_models_close(srv);
    pthread_mutex_lock(&srv->mu);
    srv->stopping = true;
    /* queued jobs end now; running ones are cancelled and their streams get a final event */
    for (job *j = srv->queue_head; j;) {
        job *next = j->next;
        pthread_mutex_lock(&j->mu);
        j->cancelled = true;
        j->shut_down = true; /* a waiting non-stream request answers 503, as a stream gets its error event */
        j->status = PB_ERR_CANCELLED;
        if (j->stream) {
            pb_server_sse_event(j, pb_server_sse_error("the server is shutting down", "shutting_down"));
            pb_server_job_append(j, "data: [DONE]\n\n", 14);
        }
        j->done = true;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        pb_server_job_release(j); /* the worker's reference it will never take */
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
    pb_server_watchdog_stop(srv);
    pb_server_guard_deinit(srv);
    pthread_mutex_destroy(&srv->conn_mu);
    pthread_mutex_destroy(&srv->tok_mu);
    for (int i = 0; i < srv->n_slots; i++) pb_session_free(srv->slots[i].session);
    pb_batch_free(srv->batch); /* after its sessions */
    pb_server_models_free(srv);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    pthread_mutex_destroy(&srv->m.mu);
    free(srv->slots);
    free(srv->host);
    free(srv->api_key);
    free(srv->model_id);
    free(srv);
}
