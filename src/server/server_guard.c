/* server_guard.c -- who may talk to the server and for how long: the Host check (DNS rebinding), the Origin /
 * Sec-Fetch-Site check and CORS headers (cross-site requests from pages the user visits), the per-connection
 * header deadline (slow clients), the write stall (a client that takes no bytes), and noticing a client that went
 * away. No routes here. */
#include "base/base.h"
#include "server/server_internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#ifdef __linux__
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_acked / tcpi_notsent_bytes (glibc's lacks them) */
#endif
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* ---- Host and Origin ------------------------------------------------------------------------------- */

static void lower(char *s) {
    for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

pb_status pb_server_guard_init(pb_server *srv, const struct sockaddr *bound) {
    if (bound->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)bound;
        memcpy(srv->bound_addr, &a->sin6_addr, 16);
        srv->bound_family = AF_INET6;
        srv->bound_any = IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr);
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)bound;
        memcpy(srv->bound_addr, &a->sin_addr, 4);
        srv->bound_family = AF_INET;
        srv->bound_any = a->sin_addr.s_addr == htonl(INADDR_ANY);
    }
    const char *list = srv->p.allow_hosts ? srv->p.allow_hosts : "";
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        while (n && isspace((unsigned char)*p)) p++, n--;
        while (n && isspace((unsigned char)p[n - 1])) n--;
        if (n == 1 && *p == '*') {
            srv->allow_any_host = true;
        } else if (n > 0) {
            if (n > 253) return pb_error(PB_ERR_INVALID_ARG, "server: --allow-host name longer than 253 bytes");
            char **nl = realloc(srv->allow_hosts, (size_t)(srv->n_allow_hosts + 1) * sizeof *nl);
            if (!nl) return pb_error(PB_ERR_NOMEM, "server: out of memory");
            srv->allow_hosts = nl;
            char *h = malloc(n + 1);
            if (!h) return pb_error(PB_ERR_NOMEM, "server: out of memory");
            memcpy(h, p, n);
            h[n] = 0;
            lower(h);
            srv->allow_hosts[srv->n_allow_hosts++] = h;
        }
        p += n;
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    if (srv->p.cors && *srv->p.cors) srv->cors = pb_strdup(srv->p.cors);
    return PB_OK;
}

void pb_server_guard_deinit(pb_server *srv) {
    for (int i = 0; i < srv->n_allow_hosts; i++) free(srv->allow_hosts[i]);
    free(srv->allow_hosts);
    free(srv->cors);
}

/* Splits "name:port", "[v6]:port", "name" into the host part (lower case, brackets dropped). False when it does
 * not look like a host. */
static bool host_part(const char *h, char *out, size_t cap) {
    size_t n;
    if (*h == '[') {
        const char *e = strchr(h, ']');
        if (!e) return false;
        h++;
        n = (size_t)(e - h);
    } else {
        const char *e = strchr(h, ':');
        n = e ? (size_t)(e - h) : strlen(h);
    }
    if (n == 0 || n >= cap) return false;
    memcpy(out, h, n);
    out[n] = 0;
    lower(out);
    return true;
}

static bool is_loopback_addr(int family, const unsigned char *a) {
    if (family == AF_INET) return a[0] == 127;
    static const unsigned char v6_loop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return memcmp(a, v6_loop, 16) == 0;
}

/* A Host the server may be addressed by: an allowed name, an IP literal of an address it listens on (any IP literal
 * when it listens on all of them: a rebinding attack needs a name), or "localhost" when it listens on loopback. */
static bool host_ok(pb_server *srv, const char *host_header) {
    if (srv->allow_any_host) return true;
    char h[256];
    if (!host_part(host_header, h, sizeof h)) return false;
    for (int i = 0; i < srv->n_allow_hosts; i++)
        if (strcmp(h, srv->allow_hosts[i]) == 0) return true;
    unsigned char a[16];
    if (inet_pton(AF_INET, h, a) == 1)
        return srv->bound_any || (srv->bound_family == AF_INET && memcmp(a, srv->bound_addr, 4) == 0);
    if (inet_pton(AF_INET6, h, a) == 1)
        return srv->bound_any || (srv->bound_family == AF_INET6 && memcmp(a, srv->bound_addr, 16) == 0);
    if (strcmp(h, "localhost") == 0 || (strlen(h) > 10 && strcmp(h + strlen(h) - 10, ".localhost") == 0))
        return srv->bound_any || is_loopback_addr(srv->bound_family, srv->bound_addr);
    return false;
}

/* The origin is listed in --cors (exact match, or "*"). */
static bool cors_allows(const pb_server *srv, const char *origin) {
    if (!srv->cors || !origin) return false;
    size_t n = strlen(origin);
    for (const char *p = srv->cors; *p;) {
        while (*p == ',' || *p == ' ') p++;
        const char *e = p;
        while (*e && *e != ',' && *e != ' ') e++;
        if ((e - p == 1 && *p == '*') || ((size_t)(e - p) == n && strncmp(p, origin, n) == 0)) return true;
        p = e;
    }
    return false;
}

/* Same origin: "http://" + the Host header (the page was served by this server under that name). */
static bool same_origin(const char *origin, const char *host) {
    return host && strncmp(origin, "http://", 7) == 0 && strcasecmp(origin + 7, host) == 0;
}

unsigned pb_server_guard_check(pb_server *srv, struct MHD_Connection *c, char *msg, size_t cap) {
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (host && !host_ok(srv, host)) {
        snprintf(msg, cap,
                 "Host '%.100s' is not an address this server listens on (a DNS rebinding attempt?); start the server "
                 "with --allow-host NAME to allow a name",
                 host);
        return 403;
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && !same_origin(origin, host) && !cors_allows(srv, origin)) {
        snprintf(msg, cap,
                 "cross-origin request from '%.100s' refused; start the server with --cors ORIGIN to let a web page "
                 "from that origin use it",
                 origin);
        return 403;
    }
    /* A no-cors request (an <img> or a form) carries no Origin; browsers mark it cross-site. */
    const char *site = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-Fetch-Site");
    if (!origin && site && (strcmp(site, "cross-site") == 0 || strcmp(site, "same-site") == 0) && !srv->cors) {
        snprintf(msg, cap, "cross-site request refused; start the server with --cors ORIGIN to allow one");
        return 403;
    }
    return 0;
}

void pb_server_guard_headers(pb_server *srv, struct MHD_Connection *c, struct MHD_Response *r) {
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && cors_allows(srv, origin)) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(r, "Vary", "Origin");
    }
}

void pb_server_guard_preflight(pb_server *srv, struct MHD_Connection *c, struct MHD_Response *r, const char *methods) {
    /* a browser reads these from the preflight only (Fetch standard, CORS-preflight fetch) */
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && cors_allows(srv, origin)) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
}

/* ---- connections: the header deadline ------------------------------------------------------------------ */

void pb_server_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe) {
    pb_server *srv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn *cn = calloc(1, sizeof *cn);
        if (!cn || !ci) {
            free(cn);
            *socket_context = NULL;
            return;
        }
        cn->fd = ci->connect_fd;
        cn->deadline = pb_time_ms() + srv->p.header_timeout * 1000.0;
        pthread_mutex_lock(&srv->conn_mu);
        cn->next = srv->conns;
        if (srv->conns) srv->conns->prev = cn;
        srv->conns = cn;
        pthread_mutex_unlock(&srv->conn_mu);
        *socket_context = cn;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn *cn = *socket_context;
        if (!cn) return;
        /* unlinked under conn_mu before MHD closes the fd, so the watchdog never touches a reused descriptor */
        pthread_mutex_lock(&srv->conn_mu);
        if (cn->prev)
            cn->prev->next = cn->next;
        else
            srv->conns = cn->next;
        if (cn->next) cn->next->prev = cn->prev;
        pthread_mutex_unlock(&srv->conn_mu);
        free(cn);
        *socket_context = NULL;
    }
}

conn *pb_server_conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (conn *)ci->socket_context : NULL;
}

static void set_deadline(pb_server *srv, struct MHD_Connection *c, double deadline) {
    conn *cn = pb_server_conn_of(c);
    if (!cn) return;
    pthread_mutex_lock(&srv->conn_mu);
    cn->deadline = deadline;
    pthread_mutex_unlock(&srv->conn_mu);
}

void pb_server_conn_busy(pb_server *srv, struct MHD_Connection *c) { set_deadline(srv, c, 0); }

void pb_server_conn_idle(pb_server *srv, struct MHD_Connection *c) {
    set_deadline(srv, c, pb_time_ms() + srv->p.header_timeout * 1000.0);
}

bool pb_server_conn_stalled(pb_server *srv, struct MHD_Connection *c) {
    conn *cn = pb_server_conn_of(c);
    if (!cn) return false;
    pthread_mutex_lock(&srv->conn_mu);
    bool stalled = cn->stalled;
    pthread_mutex_unlock(&srv->conn_mu);
    return stalled;
}

/* True when bytes wait for the client of cn (sent and not acknowledged, or not sent: its receive window is full) and it
 * acknowledged none for write_timeout. conn_mu held. The kernel's counters, not MHD's writes: its socket buffers take
 * megabytes (tcp_wmem) before a write blocks, so a stream nobody reads never looks stuck to MHD until then. */
static bool write_stalled(pb_server *srv, conn *cn, double now) {
#ifndef __linux__
    (void)srv, (void)cn, (void)now;
    return false; /* no TCP_INFO counters to read: only --idle-timeout there */
#else
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(cn->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_notsent_bytes) + sizeof ti.tcpi_notsent_bytes)
        return false; /* a kernel before 4.6 does not say: only --idle-timeout then */
    bool waiting = ti.tcpi_unacked > 0 || ti.tcpi_notsent_bytes > 0;
    if (!waiting || cn->progress_at == 0 || ti.tcpi_bytes_acked != cn->acked) {
        cn->acked = ti.tcpi_bytes_acked;
        cn->progress_at = now;
        return false;
    }
    return now - cn->progress_at > srv->p.write_timeout * 1000.0;
#endif
}

/* Four times a second: closes (shuts down; MHD then closes) every connection past its header deadline, and resets
 * every one whose client took no bytes for write_timeout: MHD's next write fails, the response ends and a stream's
 * generation is cancelled (stream_free), freeing its slot. */
static void *watchdog_main(void *arg) {
    pb_server *srv = arg;
    while (!atomic_load(&srv->watchdog_stop)) {
        struct timespec ts = {0, 250 * 1000000L};
        nanosleep(&ts, NULL);
        double now = pb_time_ms();
        int n_stalled = 0;
        pthread_mutex_lock(&srv->conn_mu);
        for (conn *cn = srv->conns; cn; cn = cn->next) {
            if (srv->p.header_timeout > 0 && cn->deadline > 0 && now > cn->deadline) {
                shutdown(cn->fd, SHUT_RDWR);
                cn->deadline = 0;
            } else if (srv->p.write_timeout > 0 && !cn->stalled && write_stalled(srv, cn, now)) {
                /* an abortive close (RST at MHD's close): the bytes queued for a client that takes none are dropped,
                 * not kept by the kernel for minutes of zero-window probes */
                struct linger lg = {1, 0};
                setsockopt(cn->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
                shutdown(cn->fd, SHUT_RDWR);
                cn->stalled = true;
                n_stalled++;
            }
        }
        pthread_mutex_unlock(&srv->conn_mu);
        if (n_stalled) {
            pthread_mutex_lock(&srv->m.mu);
            srv->m.write_stalls += (uint64_t)n_stalled;
            pthread_mutex_unlock(&srv->m.mu);
        }
    }
    return NULL;
}

pb_status pb_server_watchdog_start(pb_server *srv) {
    if (srv->p.header_timeout <= 0 && srv->p.write_timeout <= 0) return PB_OK;
    if (pthread_create(&srv->watchdog, NULL, watchdog_main, srv) != 0)
        return pb_error(PB_ERR_INTERNAL, "server: cannot start the connection watchdog");
    srv->watchdog_started = true;
    return PB_OK;
}

void pb_server_watchdog_stop(pb_server *srv) {
    if (!srv->watchdog_started) return;
    atomic_store(&srv->watchdog_stop, true);
    pthread_join(srv->watchdog, NULL);
    srv->watchdog_started = false;
}

/* ---- a client that went away ------------------------------------------------------------------------ */

bool pb_server_client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0) return false;
    if (pfd.revents & (POLLERR | POLLHUP | POLLRDHUP)) return true;
    if (pfd.revents & POLLIN) {
        char b;
        ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0; /* EOF; bytes (a pipelined request) mean the client is still there */
    }
    return false;
}
