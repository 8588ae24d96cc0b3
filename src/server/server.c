/* server.c -- the server's lifecycle: slots and their sessions, the libmicrohttpd daemon, graceful stop. The
 * room's other files (server_internal.h lists them) do the transport, queue, API, streaming and UI. */
#include "base/base.h"
#include "server/server_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    srv->host = pb_strdup(srv->p.host ? srv->p.host : "127.0.0.1");
    srv->api_key = srv->p.api_key && *srv->p.api_key ? pb_strdup(srv->p.api_key) : NULL;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    pthread_mutex_init(&srv->m.mu, NULL);
    srv->n_slots = srv->p.n_parallel;
    srv->slots = calloc((size_t)srv->n_slots, sizeof(slot));
    pb_status s = srv->slots ? pb_server_models_init(srv, m) : pb_error(PB_ERR_NOMEM, "server: out of memory");
    int started = 0;
    for (int i = 0; s == PB_OK && i < srv->n_slots; i++) {
        slot *sl = &srv->slots[i];
        sl->srv = srv;
        sl->index = i;
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = srv->n_ctx;
        sp.n_threads = srv->p.n_threads;
        sp.thermal = srv->p.thermal;
        s = pb_session_new(m, &sp, &sl->session);
        if (s != PB_OK) break;
        if (pthread_create(&sl->thread, NULL, pb_server_slot_main, sl) != 0) {
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
            srv->daemon =
                MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                                 (uint16_t)srv->p.port, NULL, NULL, pb_server_on_request, srv, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, pb_server_on_completed, srv,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)512, MHD_OPTION_END);
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
        j->status = PB_ERR_CANCELLED;
        if (j->stream) {
            cJSON *e = cJSON_CreateObject();
            cJSON *eo = cJSON_AddObjectToObject(e, "error");
            cJSON_AddStringToObject(eo, "message", "the server is shutting down");
            cJSON_AddStringToObject(eo, "type", "server_error");
            pb_server_sse_event(j, e);
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
    for (int i = 0; i < srv->n_slots; i++) pb_session_free(srv->slots[i].session);
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
