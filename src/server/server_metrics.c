/* server_metrics.c -- Prometheus text at /metrics and per-slot JSON at /stats (and the batch's counters). Counters are
 * updated where things happen (responses in server_http.c, generations in server_slots.c); this file only adds and
 * prints. */
#include "base/base.h"
#include "server/server_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- metrics ------------------------------------------------------------------------------------ */

static const double ttft_bounds[N_TTFT_BUCKETS] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double tps_bounds[N_TPS_BUCKETS] = {1, 2, 5, 10, 20, 50, 100, 200};

static void hist_add(uint64_t *h, const double *bounds, int n, double v) {
    int i = 0;
    while (i < n && v > bounds[i]) i++;
    h[i]++;
}

void pb_server_metrics_add_gen(pb_server *srv, double ttft_s, double tps) {
    if (ttft_s >= 0) {
        hist_add(srv->m.ttft_hist, ttft_bounds, N_TTFT_BUCKETS, ttft_s);
        srv->m.ttft_sum += ttft_s;
        srv->m.ttft_count++;
    }
    if (tps >= 0) {
        hist_add(srv->m.tps_hist, tps_bounds, N_TPS_BUCKETS, tps);
        srv->m.tps_sum += tps;
        srv->m.tps_count++;
    }
}

/* ---- continuous batching ------------------------------------------------------------------------- */

static void stats_add(pb_batch_stats *to, const pb_batch_stats *a) {
    to->n_steps += a->n_steps;
    to->n_tokens += a->n_tokens;
    if (a->max_size > to->max_size) to->max_size = a->max_size;
    for (int k = 0; k < 7; k++) to->size_hist[k] += a->size_hist[k];
    to->wait_ms += a->wait_ms;
    to->step_ms += a->step_ms;
}

void pb_server_batch_stats(pb_server *srv, pb_batch_stats *out) {
    *out = srv->batch_prev;
    if (!srv->batch) return;
    pb_batch_stats cur;
    pb_batch_get_stats(srv->batch, &cur);
    stats_add(out, &cur);
    out->max_sessions = cur.max_sessions;
    out->n_sessions = cur.n_sessions;
    out->n_decoding = cur.n_decoding;
}

void pb_server_batch_retire(pb_server *srv) {
    if (!srv->batch) return;
    pb_batch_stats cur;
    pb_batch_get_stats(srv->batch, &cur);
    stats_add(&srv->batch_prev, &cur);
}

enum MHD_Result pb_server_route_metrics(pb_server *srv, struct MHD_Connection *c) {
    char *buf = malloc(16384);
    if (!buf) return MHD_NO;
    size_t n = 0, cap = 16384;
#define P(...) n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__)
    /* the slots' thermal states are read under srv->mu, as /stats does: a model switch swaps the sessions under it
     * and frees the old ones after it (read after the unlock, a session could be freed mid-read) */
    pb_thermal_state *th = calloc((size_t)srv->n_slots, sizeof *th);
    if (!th) {
        free(buf);
        return MHD_NO;
    }
    pthread_mutex_lock(&srv->mu);
    int queued = srv->n_queued, busy = 0;
    for (int i = 0; i < srv->n_slots; i++) busy += srv->slots[i].busy;
    for (int i = 0; i < srv->n_slots; i++) pb_session_thermal(srv->slots[i].session, &th[i]);
    pb_batch_stats bs;
    pb_server_batch_stats(srv, &bs);
    bool batching = srv->batch != NULL;
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
    P("# HELP pocketbrain_prompt_tokens_reread_total Prompt tokens of a slot's cached prefix computed again: the "
      "prefix "
      "reached back past what a sliding-window layer still held.\n"
      "# TYPE pocketbrain_prompt_tokens_reread_total counter\npocketbrain_prompt_tokens_reread_total %llu\n",
      (unsigned long long)m->tokens_prompt_reread);
    P("# TYPE pocketbrain_generated_tokens_total counter\npocketbrain_generated_tokens_total %llu\n",
      (unsigned long long)m->tokens_generated);
    P("# TYPE pocketbrain_requests_cancelled_total counter\npocketbrain_requests_cancelled_total %llu\n",
      (unsigned long long)m->cancelled);
    P("# HELP pocketbrain_write_stalls_total Connections reset because their client took no bytes for --write-timeout "
      "(a stream nobody reads).\n"
      "# TYPE pocketbrain_write_stalls_total counter\npocketbrain_write_stalls_total %llu\n",
      (unsigned long long)m->write_stalls);
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
    P("# HELP pocketbrain_batch_enabled The slots decode together in one step (continuous batching).\n"
      "# TYPE pocketbrain_batch_enabled gauge\npocketbrain_batch_enabled %d\n",
      batching ? 1 : 0);
    P("# HELP pocketbrain_batch_size Sessions per batched decode step (sum: tokens fed, count: steps).\n"
      "# TYPE pocketbrain_batch_size histogram\n");
    static const int size_bounds[7] = {1, 2, 4, 8, 16, 32, 64};
    int64_t bcum = 0;
    for (int k = 0; k < 7; k++) {
        bcum += bs.size_hist[k];
        P("pocketbrain_batch_size_bucket{le=\"%d\"} %lld\n", size_bounds[k], (long long)bcum);
    }
    P("pocketbrain_batch_size_bucket{le=\"+Inf\"} %lld\npocketbrain_batch_size_sum %lld\n"
      "pocketbrain_batch_size_count %lld\n",
      (long long)bcum, (long long)bs.n_tokens, (long long)bs.n_steps);
    P("# TYPE pocketbrain_batch_size_max gauge\npocketbrain_batch_size_max %d\n", bs.max_size);
    P("# HELP pocketbrain_batch_wait_seconds_total Time step leaders waited for the other slots' tokens.\n"
      "# TYPE pocketbrain_batch_wait_seconds_total counter\npocketbrain_batch_wait_seconds_total %g\n",
      bs.wait_ms / 1e3);
    P("# TYPE pocketbrain_resident_memory_bytes gauge\npocketbrain_resident_memory_bytes %zu\n", pb_current_rss());
    P("# HELP pocketbrain_thermal_level Thermal governor level per slot (0 cool, 1 warm, 2 hot).\n"
      "# TYPE pocketbrain_thermal_level gauge\n# TYPE pocketbrain_thermal_celsius gauge\n"
      "# TYPE pocketbrain_threads gauge\n");
    for (int i = 0; i < srv->n_slots; i++) {
        P("pocketbrain_thermal_level{slot=\"%d\"} %d\n", i, th[i].enabled ? th[i].level : 0);
        P("pocketbrain_thermal_celsius{slot=\"%d\"} %.1f\n", i, (double)th[i].temp_c);
        P("pocketbrain_threads{slot=\"%d\"} %d\n", i, th[i].n_threads);
    }
    free(th);
#undef P
    if (n >= cap) n = cap - 1;
    enum MHD_Result r = pb_server_send_text(srv, c, 200, "text/plain; version=0.0.4", buf, n, true);
    free(buf);
    return r;
}

/* GET /stats: per-slot state as JSON (busy, tokens cached, thermal governor). */
enum MHD_Result pb_server_route_stats(pb_server *srv, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON *slots = cJSON_AddArrayToObject(o, "slots");
    pthread_mutex_lock(&srv->mu);
    cJSON_AddNumberToObject(o, "queue_depth", srv->n_queued);
    pb_batch_stats bs;
    pb_server_batch_stats(srv, &bs);
    cJSON *bo = cJSON_AddObjectToObject(o, "batch");
    cJSON_AddBoolToObject(bo, "enabled", srv->batch != NULL);
    cJSON_AddNumberToObject(bo, "steps", (double)bs.n_steps);
    cJSON_AddNumberToObject(bo, "tokens", (double)bs.n_tokens);
    cJSON_AddNumberToObject(bo, "mean_size", bs.n_steps ? (double)bs.n_tokens / (double)bs.n_steps : 0.0);
    cJSON_AddNumberToObject(bo, "max_size", bs.max_size);
    cJSON_AddNumberToObject(bo, "decoding", bs.n_decoding);
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
    return pb_server_send_json(srv, c, 200, o);
}
