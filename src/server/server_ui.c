/* server_ui.c -- the web chat UI: serves the web/ files embedded at build time (scripts/embed_web.sh). */
#include "server/server_internal.h"

#include <string.h>

/* generated from web/ by scripts/embed_web.sh */
typedef struct {
    const char *name;
    const unsigned char *data;
    size_t len;
} pb_web_asset;
extern const pb_web_asset pb_web_assets[];
static const char *mime_of(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot) return "application/octet-stream";
    if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (!strcmp(dot, ".svg")) return "image/svg+xml";
    return "application/octet-stream";
}

/* The asset served at url, or NULL. */
static const pb_web_asset *asset_of(const char *url) {
    /* browsers ask for /favicon.ico on their own (before or without reading the page's icon link) */
    const char *want = strcmp(url, "/") == 0 ? "/index.html" : strcmp(url, "/favicon.ico") == 0 ? "/favicon.svg" : url;
    for (const pb_web_asset *a = pb_web_assets; a->name; a++)
        if (strcmp(a->name, want) == 0) return a;
    return NULL;
}

bool pb_server_static_exists(const char *url) { return asset_of(url) != NULL; }

enum MHD_Result pb_server_route_static(pb_server *srv, struct MHD_Connection *c, const char *url) {
    const pb_web_asset *a = asset_of(url);
    if (!a)
        return pb_server_send_error(srv, c, 404, "invalid_request_error", NULL, "not_found", "no route for GET %.200s",
                                    url);
    struct MHD_Response *r = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", mime_of(a->name));
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:");
    pb_server_guard_headers(srv, c, r);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    pb_server_count_response(srv, 200);
    return ret;
}
