/* server_models.c -- the models requests may name: which one is loaded, swapping to another when a request
 * names it (one loaded at a time: the running jobs finish first, new ones wait), the memory admission of a model's
 * slots before it is opened (pb_server_admit), and GET /v1/models. No HTTP parsing here; the routes call
 * pb_server_model_acquire / _release around their use of the model. */
#include "base/base.h"
#include "server/server_internal.h"
#include "tokenizer/utf8.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

pb_session_params pb_server_slot_params(const pb_server_params *p, const pb_model *m, int n_ctx, pb_batch *batch) {
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = p->n_threads;
    sp.thermal = p->thermal;
    sp.batch = batch;
    sp.think = !m || pb_vocab_find(pb_model_vocab(m), "<|think|>", 9) >= 0;
    sp.ring_extra = PB_SERVER_RING_EXTRA;
    return sp;
}

pb_status pb_server_models_init(pb_server *srv, pb_model *m) {
    pthread_mutex_init(&srv->model_mu, NULL);
    pthread_cond_init(&srv->model_cv, NULL);
    const char *id = srv->p.model_id ? srv->p.model_id : "pocketbrain";
    int n = srv->p.n_models > 0 ? srv->p.n_models : 1;
    srv->lib = calloc((size_t)n, sizeof *srv->lib);
    if (!srv->lib) return pb_error(PB_ERR_NOMEM, "server: out of memory");
    srv->n_lib = n;
    for (int i = 0; i < n; i++) {
        const pb_server_model *src = srv->p.n_models > 0 ? &srv->p.models[i] : NULL;
        srv->lib[i].name = pb_strdup(src && src->name ? src->name : id);
        srv->lib[i].path = src && src->path ? pb_strdup(src->path) : NULL;
        if (!srv->lib[i].name || (src && src->path && !srv->lib[i].path))
            return pb_error(PB_ERR_NOMEM, "server: out of memory");
    }
    srv->caller_model = m;
    srv->model = m;
    srv->vocab = pb_model_vocab(m);
    srv->model_id = pb_strdup(srv->lib[0].name);
    srv->cur = 0;
    srv->n_ctx = srv->p.n_ctx_first > 0 ? srv->p.n_ctx_first : srv->p.n_ctx; /* pb_server_admit's fit */
    pb_model_info info;
    bool have_info = pb_model_get_info(m, &info) == PB_OK;
    if (srv->p.ctx_auto && have_info && info.n_ctx_train > 0 && info.n_ctx_train < srv->n_ctx)
        srv->n_ctx = info.n_ctx_train;
    srv->caller_weights = have_info ? info.weight_bytes : 0;
    return srv->model_id ? PB_OK : pb_error(PB_ERR_NOMEM, "server: out of memory");
}

/* ---- rescanning the list (params.list_models) ---------------------------------------------------------- */

typedef struct lib_build {
    pb_server_model *v;
    int n, cap;
    bool oom;
} lib_build;

static void lib_add(void *ctx, const char *name, const char *path) {
    lib_build *b = ctx;
    if (b->oom || !name || !*name || !path) return;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->v[i].name, name) == 0) return; /* the first of a name wins (entry 0: the caller's) */
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        pb_server_model *v = realloc(b->v, (size_t)cap * sizeof *v);
        if (!v) {
            b->oom = true;
            return;
        }
        b->v = v, b->cap = cap;
    }
    char *n = pb_strdup(name), *p = pb_strdup(path);
    if (!n || !p) {
        free(n), free(p);
        b->oom = true;
        return;
    }
    b->v[b->n++] = (pb_server_model){n, p};
}

static void lib_free(pb_server_model *v, int n) {
    for (int i = 0; v && i < n; i++) free((char *)v[i].name), free((char *)v[i].path);
    free(v);
}

/* Replaces lib[] with entry 0 + what list_models lists now (+ the loaded model when it is no longer listed), unless
 * list_stamp says nothing changed since the last listing. Called with model_mu held and no switch running: switch_to
 * reads lib[] without the lock. On failure the old list stays. */
static void refresh(pb_server *srv) {
    if (!srv->p.list_models || srv->switching) return;
    unsigned long long stamp = srv->p.list_stamp ? srv->p.list_stamp(srv->p.list_user) : 0;
    if (stamp && stamp == srv->lib_stamp) return;
    srv->lib_stamp = 0; /* until this listing is in */
    lib_build b = {0};
    lib_add(&b, srv->lib[0].name, srv->lib[0].path ? srv->lib[0].path : "");
    if (b.oom) {
        lib_free(b.v, b.n);
        return;
    }
    if (!srv->lib[0].path) free((char *)b.v[0].path), b.v[0].path = NULL;
    srv->p.list_models(srv->p.list_user, lib_add, &b);
    if (srv->cur > 0) lib_add(&b, srv->lib[srv->cur].name, srv->lib[srv->cur].path);
    if (b.oom) {
        lib_free(b.v, b.n);
        return;
    }
    int cur = -1;
    for (int i = 0; srv->cur >= 0 && i < b.n && cur < 0; i++)
        if (strcmp(b.v[i].name, srv->lib[srv->cur].name) == 0) cur = i;
    lib_free(srv->lib, srv->n_lib);
    srv->lib = b.v;
    srv->n_lib = b.n;
    srv->cur = cur;
    srv->lib_stamp = stamp;
}

/* Index of the model a request names, or -1 with err filled (404). Called with model_mu held. */
static int find_model(pb_server *srv, const char *name, char *err, size_t cap) {
    for (int i = 0; i < srv->n_lib; i++)
        if (strcmp(srv->lib[i].name, name) == 0) return i;
    /* a name without its quantization ("gemma-2-2b-it") means the one "gemma-2-2b-it:QUANT" in the library,
     * as -m does on the command line; several quantizations of it make the short name ambiguous */
    size_t nl = strlen(name);
    int n_tagged = 0, tagged = -1;
    for (int i = 0; !strchr(name, ':') && i < srv->n_lib; i++)
        if (strncmp(srv->lib[i].name, name, nl) == 0 && srv->lib[i].name[nl] == ':') n_tagged++, tagged = i;
    if (n_tagged == 1) return tagged;
    if (n_tagged > 1)
        snprintf(err, cap,
                 "model '%.200s' is ambiguous: the library has %d quantizations of it; name one as "
                 "'%.200s:QUANT' (GET /v1/models lists them)",
                 name, n_tagged, name);
    else
        snprintf(err, cap, "model '%.200s' is not available on this server (GET /v1/models lists the models it serves)",
                 name);
    return -1;
}

/* ---- memory admission ---------------------------------------------------------------------------------- */

#define MIB (1024.0 * 1024.0)

/* One model's slots against the memory: what admit() is asked. */
typedef struct admission {
    const char *path; /* the model's GGUF file (only its header is read) */
    int n_slots;      /* sessions, each of n_ctx */
    int n_ctx;        /* asked; with ctx_auto a cap, the model's training context the other */
    bool ctx_auto, fit;
    size_t mem_limit; /* 0 = the memory available now (pb_estimate_memory detects it) */
    bool resident;    /* the model is open already: the caller's, loaded again after another */
    size_t other;     /* weights of the caller's model, which stays open beside this one */
} admission;

static const char *kv_name(pb_kv_type t) { return t == PB_KV_Q8_0 ? "q8_0" : t == PB_KV_F32 ? "f32" : "f16"; }

/* The largest n_ctx (a multiple of 256 from 256 on, as pb_session_admit's fit) at which one session of sp's model
 * needs at most budget bytes of KV and scratch; 0 when none does. pb_estimate_memory's max_n_ctx answers it with a
 * limit of the weights + budget. */
static int ctx_within(const char *path, const pb_session_params *sp, size_t weights, size_t budget) {
    pb_mem_estimate e;
    if (budget == 0 || pb_estimate_memory(path, sp, weights + budget, &e) != PB_OK) return 0;
    return e.max_n_ctx >= 256 ? e.max_n_ctx / 256 * 256 : e.max_n_ctx;
}

/* "6 slots fit" / "1 slot fits" */
static const char *slots_word(int n) { return n == 1 ? "slot" : "slots"; }

/* "all 8" / "both" */
static const char *all_of(int n, char *buf, size_t cap) {
    if (n == 2) return "both";
    snprintf(buf, cap, "all %d", n);
    return buf;
}

/* The weights + n_slots x (KV + scratch) of a.path against the memory; fills m. See pb_server_admit.
 *
 * What the weights count for depends on when the check runs, because MemAvailable (and a cgroup's room) is
 * measured now:
 * - Before the model is opened (pb_server_admit at start, a library model a request names): in full. Pages of the
 *   file that sit in the page cache count as available there and are the pages the mapping will use: one count.
 *   After the open they would not be comparable: the repacked matrices (anonymous memory) are then missing from
 *   MemAvailable already, and counting the weights again would refuse servers that fit.
 * - The caller's model loaded again after another (it stayed open all along): not counted, the slots alone are
 *   compared. Its anonymous copies are already missing from MemAvailable; its file-backed pages (the model file or
 *   the packed-weights cache mapped) MemAvailable still counts as reclaimable cache, so for a model that maps its
 *   weights this is optimistic by the pages the slots' KV would then evict (re-read from the file, not an OOM).
 * - With a mem_limit the limit is a budget for what the server holds: the weights always count, and so do those
 *   of the caller's model while another model is loaded beside it (a.other).
 * The batch the slots share (pb_batch_new: n_slots rows of activations and logits, about 1 MiB a slot for a 256k
 * vocabulary) has no term of its own: each session's scratch estimate carries 4 MiB of slack. */
static pb_status admit(const admission *a, pb_server_mem *m) {
    memset(m, 0, sizeof *m);
    m->n_slots = a->n_slots;
    /* the slots' sessions, before the open (think assumed: a Gemma 4 model's rings with their extra rows) */
    const pb_server_params dp = pb_server_default_params();
    pb_session_params sp = pb_server_slot_params(&dp, NULL, 0, NULL);
    pb_mem_estimate e;
    /* max_n_ctx is capped by the model's training context: with no limit to speak of, it is that context */
    pb_status s = pb_estimate_memory(a->path, &sp, SIZE_MAX, &e);
    if (s != PB_OK) return s;
    int n_train = e.max_n_ctx;
    sp.n_ctx = a->ctx_auto && n_train > 0 && n_train < a->n_ctx ? n_train : a->n_ctx;
    if ((s = pb_estimate_memory(a->path, &sp, a->mem_limit, &e)) != PB_OK) return s;
    size_t weights = a->resident && !a->mem_limit ? 0 : e.weights;
    size_t fixed = weights + (a->mem_limit ? a->other : 0);
    size_t per = e.kv + e.scratch, avail = e.available;
    m->weights = weights;
    m->other = fixed - weights;
    m->kv = e.kv;
    m->scratch = e.scratch;
    m->total = fixed + (size_t)a->n_slots * per;
    m->available = avail;
    m->n_ctx = m->n_ctx_asked = sp.n_ctx;
    if (avail == 0 || m->total <= avail) return PB_OK; /* 0: unknown, nothing to compare with */
    /* how many slots fit at this n_ctx, and at which n_ctx all of them do */
    size_t room = avail > fixed ? avail - fixed : 0;
    int k = per > 0 ? (int)PB_MIN(room / per, (size_t)a->n_slots) : 0;
    int c_all = ctx_within(a->path, &sp, e.weights, room / (size_t)a->n_slots);
    int min_ctx = n_train > 0 && n_train < 256 ? n_train : 256;
    if (a->fit && c_all >= min_ctx) {
        sp.n_ctx = c_all;
        if ((s = pb_estimate_memory(a->path, &sp, a->mem_limit, &e)) != PB_OK) return s;
        m->kv = e.kv;
        m->scratch = e.scratch;
        m->total = fixed + (size_t)a->n_slots * (e.kv + e.scratch);
        m->n_ctx = c_all;
        m->adjusted = true;
        return PB_OK;
    }
    char need[320], other[64] = "";
    const char *kv = kv_name(sp.kv_type);
    if (m->other) snprintf(other, sizeof other, " + the model started with %.0f", (double)m->other / MIB);
    if (a->resident && !a->mem_limit)
        snprintf(need, sizeof need,
                 "needs %.0f MiB for %d %s x (KV %.0f for n_ctx %d %s + scratch %.0f) beside the weights in memory, "
                 "but %.0f MiB are available",
                 (double)m->total / MIB, a->n_slots, slots_word(a->n_slots), (double)e.kv / MIB, sp.n_ctx, kv,
                 (double)e.scratch / MIB, (double)avail / MIB);
    else
        snprintf(need, sizeof need,
                 "needs %.0f MiB (weights %.0f + %d %s x (KV %.0f for n_ctx %d %s + scratch %.0f)%s) but %.0f MiB "
                 "are available%s",
                 (double)m->total / MIB, (double)weights / MIB, a->n_slots, slots_word(a->n_slots), (double)e.kv / MIB,
                 sp.n_ctx, kv, (double)e.scratch / MIB, other, (double)avail / MIB,
                 a->mem_limit ? " (--mem-limit)" : "");
    const char *fit = a->fit ? ", even with --fit" : "";
    int n = a->n_slots;
    char all_buf[24];
    const char *all = all_of(n, all_buf, sizeof all_buf);
    if (k >= 1 && c_all >= min_ctx) /* not with fit: it took c_all above */
        return pb_error(PB_ERR_MEMORY_LIMIT,
                        "not enough memory for %d %s: %s; %d %s fit%s at n_ctx %d, or %s at n_ctx %d (use -np %d or "
                        "-c %d, or --fit)",
                        n, slots_word(n), need, k, slots_word(k), k == 1 ? "s" : "", sp.n_ctx, all, c_all, k, c_all);
    if (k >= 1)
        return pb_error(PB_ERR_MEMORY_LIMIT,
                        "not enough memory for %d %s%s: %s; %d %s fit%s at n_ctx %d, %s at no n_ctx of %d or more (use "
                        "-np %d)",
                        n, slots_word(n), fit, need, k, slots_word(k), k == 1 ? "s" : "", sp.n_ctx, all, min_ctx, k);
    if (c_all >= min_ctx && n == 1)
        return pb_error(PB_ERR_MEMORY_LIMIT,
                        "not enough memory for 1 slot: %s; it fits at n_ctx %d (use -c %d or --fit)", need, c_all,
                        c_all);
    if (c_all >= min_ctx)
        return pb_error(PB_ERR_MEMORY_LIMIT,
                        "not enough memory for %d slots: %s; not one slot fits at n_ctx %d, %s do at n_ctx %d (use -c "
                        "%d or --fit)",
                        n, need, sp.n_ctx, all, c_all, c_all);
    int c_one = n > 1 ? ctx_within(a->path, &sp, e.weights, room) : 0; /* n 1: c_all */
    if (c_one >= min_ctx)
        return pb_error(PB_ERR_MEMORY_LIMIT,
                        "not enough memory for %d slots%s: %s; one slot fits at n_ctx %d, %s at no n_ctx of %d or more "
                        "(use -np 1 -c %d)",
                        n, fit, need, c_one, all, min_ctx, c_one);
    char none[64];
    if (room == 0)
        snprintf(none, sizeof none, "the weights alone do not fit");
    else
        snprintf(none, sizeof none, "not even one slot of n_ctx %d fits", min_ctx);
    return pb_error(PB_ERR_MEMORY_LIMIT,
                    "not enough memory for %d %s%s: %s; %s (use a smaller model or quantization, or free memory / "
                    "raise the limit)",
                    n, slots_word(n), fit, need, none);
}

pb_status pb_server_admit(const char *model_path, pb_server_params *p, pb_server_mem *out) {
    pb_server_mem local, *m = out ? out : &local;
    memset(m, 0, sizeof *m);
    if (!model_path || !p)
        return pb_error(PB_ERR_INVALID_ARG, "pb_server_admit: %s is NULL", !p ? "params" : "model_path");
    if (p->n_parallel < 1 || p->n_parallel > 64)
        return pb_error(PB_ERR_INVALID_ARG, "server: --parallel must be in [1, 64], got %d", p->n_parallel);
    admission a = {model_path, p->n_parallel, p->n_ctx, p->ctx_auto, p->fit, p->mem_limit, false, 0};
    pb_status s = admit(&a, m);
    if (s == PB_OK && m->adjusted) p->n_ctx_first = m->n_ctx;
    return s;
}

/* Opens lib[idx] (the caller's model for its own entry), the slots' batch (params.batch) and sessions for every
 * slot; *m_out, *batch_out and sess (n_slots) get them. The memory admission runs first, before the open: a model
 * whose slots do not fit is not opened (PB_ERR_MEMORY_LIMIT, the request is told why). */
static pb_status load(pb_server *srv, int idx, pb_model **m_out, pb_batch **batch_out, pb_session **sess,
                      int *n_ctx_out) {
    pb_model *m = NULL;
    pb_status s = PB_OK;
    bool caller = idx == 0 && srv->caller_model;
    if (!caller && !srv->lib[idx].path)
        return pb_error(PB_ERR_NOT_FOUND, "server: no file for model '%s'", srv->lib[idx].name);
    pb_server_mem mem;
    bool admitted = false;
    if (srv->lib[idx].path) { /* the caller's model may have none (a library user's): nothing to estimate from */
        admission a = {srv->lib[idx].path, srv->n_slots,     srv->p.n_ctx, srv->p.ctx_auto,
                       srv->p.fit,         srv->p.mem_limit, caller,       caller ? 0 : srv->caller_weights};
        s = admit(&a, &mem);
        if (s == PB_ERR_MEMORY_LIMIT) return s;
        admitted = s == PB_OK; /* another error (not a model, an n_ctx it refuses): the open below says it */
        s = PB_OK;
        if (admitted && mem.adjusted && srv->p.log) {
            char line[256];
            snprintf(line, sizeof line, "model '%.100s': --fit: n_ctx %d for %s (%d asked; %.0f MiB of %.0f MiB)",
                     srv->lib[idx].name, mem.n_ctx, mem.n_slots == 1 ? "its slot" : "each of its slots",
                     mem.n_ctx_asked, (double)mem.total / MIB, (double)mem.available / MIB);
            srv->p.log(srv->p.log_user, line);
        }
    }
    if (caller) {
        m = srv->caller_model;
    } else {
        pb_model_params mp = pb_model_default_params();
        if (srv->p.n_threads) mp.n_threads = srv->p.n_threads;
        mp.mem_limit = srv->p.mem_limit;
        mp.gpu = srv->p.gpu;
        mp.pack_cache_dir = srv->p.pack_cache_dir;
        mp.pack_cache_background = true; /* a model swap answers before its cache file is written */
        if ((s = pb_model_open(srv->lib[idx].path, &mp, &m)) != PB_OK) return s;
    }
    int n_ctx = caller && srv->p.n_ctx_first > 0 ? srv->p.n_ctx_first : srv->p.n_ctx;
    pb_model_info info;
    if (admitted)
        n_ctx = mem.n_ctx; /* ctx_auto and fit applied */
    else if (srv->p.ctx_auto && pb_model_get_info(m, &info) == PB_OK && info.n_ctx_train > 0 &&
             info.n_ctx_train < n_ctx)
        n_ctx = info.n_ctx_train;
    pb_batch *batch = NULL; /* the sessions of this model decode together */
    if (srv->p.batch && srv->n_slots > 1) s = pb_batch_new(m, srv->n_slots, &batch);
    for (int i = 0; i < srv->n_slots && s == PB_OK; i++) {
        pb_session_params sp = pb_server_slot_params(&srv->p, m, n_ctx, batch);
        s = pb_session_new(m, &sp, &sess[i]);
    }
    if (s != PB_OK) {
        for (int i = 0; i < srv->n_slots; i++) pb_session_free(sess[i]), sess[i] = NULL;
        pb_batch_free(batch);
        if (m != srv->caller_model) pb_model_close(m);
        return s;
    }
    *m_out = m;
    *batch_out = batch;
    *n_ctx_out = n_ctx;
    return PB_OK;
}

/* Swaps the loaded model for lib[idx]. Called with switching set and no user of the current model, so no job
 * runs on the slots' sessions and none is queued. The current model is closed before the next one opens (one
 * in memory at a time); when the next one fails, the previous one is loaded again. */
static pb_status switch_to(pb_server *srv, int idx, char *err, size_t cap) {
    pb_session **sess = calloc((size_t)srv->n_slots, sizeof *sess);
    if (!sess) return pb_error(PB_ERR_NOMEM, "server: out of memory");
    pthread_mutex_lock(&srv->mu);
    for (int i = 0; i < srv->n_slots; i++) {
        sess[i] = srv->slots[i].session;
        srv->slots[i].session = NULL;
    }
    srv->vocab = NULL; /* readers take srv->mu; the model behind it is closed below */
    pb_batch *old_batch = srv->batch;
    pb_server_batch_retire(srv); /* its counters stay in /metrics */
    srv->batch = NULL;
    pthread_mutex_unlock(&srv->mu);
    for (int i = 0; i < srv->n_slots; i++) pb_session_free(sess[i]), sess[i] = NULL;
    pb_batch_free(old_batch); /* after its sessions, before its model */
    int prev = srv->cur;
    if (srv->model && srv->model != srv->caller_model) pb_model_close(srv->model);
    srv->model = NULL;
    pb_model *m = NULL;
    pb_batch *batch = NULL;
    int n_ctx = 0;
    pb_status s = load(srv, idx, &m, &batch, sess, &n_ctx);
    if (s != PB_OK) {
        snprintf(err, cap, "cannot load model '%s': %s", srv->lib[idx].name, pb_last_error());
        idx = prev;
        if (prev < 0 || load(srv, prev, &m, &batch, sess, &n_ctx) != PB_OK) idx = -1;
    }
    char *id = idx >= 0 ? pb_strdup(srv->lib[idx].name) : NULL;
    pthread_mutex_lock(&srv->mu);
    for (int i = 0; i < srv->n_slots; i++) srv->slots[i].session = idx >= 0 ? sess[i] : NULL;
    srv->model = idx >= 0 ? m : NULL;
    srv->batch = idx >= 0 ? batch : NULL;
    srv->vocab = idx >= 0 ? pb_model_vocab(m) : NULL;
    free(srv->model_id);
    srv->model_id = id;
    if (idx >= 0) srv->n_ctx = n_ctx;
    pthread_mutex_unlock(&srv->mu);
    free(sess);
    pthread_mutex_lock(&srv->model_mu);
    srv->cur = idx;
    pthread_mutex_unlock(&srv->model_mu);
    return s;
}

/* Waits up to 200 ms for model_cv (model_mu held). */
static void nap(pb_server *srv) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&srv->model_cv, &srv->model_mu, &ts);
}

/* Seconds a request waits for its model (the running jobs of another one, a switch by another request): the idle
 * timeout, as long as a client is left without a byte otherwise; 120 s when that is off. */
static double wait_limit_s(const pb_server *srv) { return srv->p.idle_timeout > 0 ? srv->p.idle_timeout : 120; }

/* Before each wait of pb_server_model_acquire (model_mu held): 0 to wait on; 499 when the client left (nobody is
 * there to answer, and a waiting request holds back every new request of the loaded model: model_waiting), 503 past
 * the deadline, with err and code filled. want: the model the request waits for. */
static unsigned give_up(pb_server *srv, struct MHD_Connection *c, double deadline, const char *want, char *err,
                        size_t cap, const char **code) {
    if (c && pb_server_client_gone(c)) {
        snprintf(err, cap, "the request was cancelled: the client closed its side of the connection");
        *code = "client_closed_request";
        return 499;
    }
    if (pb_time_ms() < deadline) return 0;
    const char *loaded = srv->cur >= 0 ? srv->lib[srv->cur].name : "";
    if (srv->switching)
        snprintf(err, cap,
                 "model '%.200s' was not ready within %.0f s: the server is still switching models; try again later",
                 want, wait_limit_s(srv));
    else if (strcmp(want, loaded) != 0)
        snprintf(err, cap,
                 "model '%.200s' could not be loaded within %.0f s: requests for the loaded model '%.200s' are still "
                 "running (one model is loaded at a time); try again later",
                 want, wait_limit_s(srv), loaded);
    else
        snprintf(err, cap,
                 "model '%.200s' was not free within %.0f s: a request for another model is waiting to replace it; try "
                 "again later",
                 want, wait_limit_s(srv));
    *code = "model_busy";
    return 503;
}

unsigned pb_server_model_acquire(pb_server *srv, const char *name, struct MHD_Connection *c, char *err, size_t cap,
                                 const char **code) {
    bool rescanned = false;
    const double deadline = pb_time_ms() + wait_limit_s(srv) * 1000.0;
    *code = NULL;
    pthread_mutex_lock(&srv->model_mu);
    for (;;) {
        if (srv->models_closed) {
            pthread_mutex_unlock(&srv->model_mu);
            snprintf(err, cap, "the server is shutting down");
            *code = "shutting_down";
            return 503;
        }
        /* by name on every pass: a rescan by another request may have moved the entries */
        int want = -1;
        if (name && *name && (want = find_model(srv, name, err, cap)) < 0) {
            if (!srv->p.list_models || rescanned) {
                pthread_mutex_unlock(&srv->model_mu);
                *code = "model_not_found";
                return 404;
            }
            if (srv->switching) { /* lib[] is in use: rescan after the switch */
                unsigned stop = give_up(srv, c, deadline, name, err, cap, code);
                if (stop) {
                    pthread_mutex_unlock(&srv->model_mu);
                    return stop;
                }
                nap(srv);
                continue;
            }
            refresh(srv); /* not known yet: pulled after the server started? */
            rescanned = true;
            continue;
        }
        int target = want >= 0 ? want : srv->cur >= 0 ? srv->cur : 0;
        if (!srv->switching && target == srv->cur && srv->model_waiting == 0) {
            srv->model_users++;
            pthread_mutex_unlock(&srv->model_mu);
            return 0;
        }
        if (!srv->switching && target != srv->cur && srv->model_users == 0) {
            if (srv->p.list_models && !rescanned) { /* load what the library holds now (a removed file: 404) */
                refresh(srv);
                rescanned = true;
                continue;
            }
            srv->switching = true;
            pthread_mutex_unlock(&srv->model_mu);
            pb_status s = switch_to(srv, target, err, cap);
            pthread_mutex_lock(&srv->model_mu);
            srv->switching = false;
            pthread_cond_broadcast(&srv->model_cv);
            if (s != PB_OK) {
                pthread_mutex_unlock(&srv->model_mu);
                *code = "model_load_failed";
                return 500;
            }
            continue;
        }
        /* wait for the running jobs of the loaded model (or a switch) to finish */
        unsigned stop = give_up(srv, c, deadline, srv->lib[target].name, err, cap, code);
        if (stop) {
            pthread_mutex_unlock(&srv->model_mu);
            return stop;
        }
        bool other = target != srv->cur;
        if (other) srv->model_waiting++;
        nap(srv);
        if (other) srv->model_waiting--;
    }
}

void pb_server_model_release(pb_server *srv) {
    pthread_mutex_lock(&srv->model_mu);
    if (--srv->model_users == 0) pthread_cond_broadcast(&srv->model_cv);
    pthread_mutex_unlock(&srv->model_mu);
}

void pb_server_models_close(pb_server *srv) {
    pthread_mutex_lock(&srv->model_mu);
    srv->models_closed = true;
    pthread_cond_broadcast(&srv->model_cv);
    while (srv->switching) pthread_cond_wait(&srv->model_cv, &srv->model_mu);
    pthread_mutex_unlock(&srv->model_mu);
}

void pb_server_models_free(pb_server *srv) {
    if (!srv->lib) return; /* pb_server_models_init did not run */
    if (srv->model && srv->model != srv->caller_model) pb_model_close(srv->model);
    srv->model = NULL;
    for (int i = 0; srv->lib && i < srv->n_lib; i++) {
        free((char *)srv->lib[i].name);
        free((char *)srv->lib[i].path);
    }
    free(srv->lib);
    srv->lib = NULL;
    pthread_mutex_destroy(&srv->model_mu);
    pthread_cond_destroy(&srv->model_cv);
}

/* The OpenAI model object of library entry i (model_mu held). */
static cJSON *model_object(const pb_server *srv, int i) {
    cJSON *mo = cJSON_CreateObject();
    cJSON_AddStringToObject(mo, "id", srv->lib[i].name);
    cJSON_AddStringToObject(mo, "object", "model");
    cJSON_AddNumberToObject(mo, "created", 0);
    cJSON_AddStringToObject(mo, "owned_by", "pocketbrain");
    cJSON_AddBoolToObject(mo, "loaded", i == srv->cur && !srv->switching);
    return mo;
}

enum MHD_Result pb_server_route_models(pb_server *srv, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    pthread_mutex_lock(&srv->model_mu);
    refresh(srv); /* models pulled or removed since the last look (skipped while a switch runs) */
    for (int i = 0; i < srv->n_lib; i++) cJSON_AddItemToArray(data, model_object(srv, i));
    pthread_mutex_unlock(&srv->model_mu);
    return pb_server_send_json(srv, c, 200, o);
}

bool pb_server_model_listed(pb_server *srv, const char *id) {
    bool found = false;
    pthread_mutex_lock(&srv->model_mu);
    refresh(srv);
    for (int i = 0; i < srv->n_lib && !found; i++) found = strcmp(srv->lib[i].name, id) == 0;
    pthread_mutex_unlock(&srv->model_mu);
    return found;
}

enum MHD_Result pb_server_route_model(pb_server *srv, struct MHD_Connection *c, const char *id) {
    pthread_mutex_lock(&srv->model_mu);
    refresh(srv);
    cJSON *mo = NULL;
    for (int i = 0; i < srv->n_lib && !mo; i++)
        if (strcmp(srv->lib[i].name, id) == 0) mo = model_object(srv, i);
    pthread_mutex_unlock(&srv->model_mu);
    if (mo) return pb_server_send_json(srv, c, 200, mo);
    return pb_server_send_model_404(srv, c, id);
}

enum MHD_Result pb_server_send_model_404(pb_server *srv, struct MHD_Connection *c, const char *id) {
    /* the id comes from the path: named only when it is printable UTF-8 of a sane length */
    bool show = strlen(id) <= 200 && pb_utf8_valid((const uint8_t *)id, strlen(id));
    for (const char *p = id; show && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) show = false;
    return pb_server_send_error(
        srv, c, 404, "invalid_request_error", "model", "model_not_found",
        "model '%s' is not available on this server (GET /v1/models lists the models it serves)",
        show ? id : "(unprintable)");
}
