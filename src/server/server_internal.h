/* server_internal.h -- the server room's shared types (jobs, slots, the server) and the functions its files call
 * across each other. Not installed; nothing outside src/server includes it. One job per file:
 *   server.c          lifecycle: start (slots, daemon), stop, defaults
 *   server_http.c     transport: the MHD callbacks, request framing checks, routing, auth, response helpers, the
 *                     request log
 *   server_guard.c    who may talk to us: Host / Origin checks (DNS rebinding, CORS), connection limits and the
 *                     header deadline, noticing a client that went away
 *   server_slots.c    jobs, the bounded queue, slot workers, cancellation, the FAQ fallback
 *   server_openai.c   OpenAI JSON: request parsing + validation, the generate/tokenize/models routes
 *   server_sse.c      server-sent events: stream chunks, the stream reader
 *   server_metrics.c  /metrics and /stats
 *   server_ui.c       the embedded web UI assets
 *   server_models.c   the model library: which model is loaded, swapping models, /v1/models; the memory admission
 *                     of a model's slots (pb_server_admit) */
#ifndef PB_SERVER_INTERNAL_H
#define PB_SERVER_INTERNAL_H

#include "server/server.h"
#include "tokenizer/utf8.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- metrics ------------------------------------------------------------------------------------ */

#define N_TTFT_BUCKETS 9
#define N_TPS_BUCKETS  8

typedef struct metrics {
    pthread_mutex_t mu;
    uint64_t req_by_code[6]; /* 1xx..5xx by first digit, [0] unused */
    uint64_t req_chat, req_completions, req_other;
    uint64_t tokens_prompt, tokens_prompt_reused, tokens_generated;
    uint64_t tokens_prompt_reread; /* of tokens_prompt: a kept prefix computed again (a ring could not go back) */
    uint64_t cancelled, rejected, fallbacks;
    uint64_t write_stalls; /* connections reset by the watchdog: their client took no bytes for write_timeout */
    uint64_t ttft_hist[N_TTFT_BUCKETS + 1];
    double ttft_sum;
    uint64_t ttft_count;
    uint64_t tps_hist[N_TPS_BUCKETS + 1];
    double tps_sum;
    uint64_t tps_count;
} metrics;

/* ---- jobs and slots ------------------------------------------------------------------------------ */

typedef enum { JOB_CHAT, JOB_COMPLETION } job_kind;

typedef struct slot slot;

typedef struct job {
    job_kind kind;
    bool stream;
    bool include_usage;
    int32_t *prompt;
    int64_t n_prompt;
    pb_gen_params gen;
    char **stop;
    int n_stop;
    int32_t *bias_ids; /* "logit_bias", for gen.sampler (owned) */
    float *bias_values;
    char id[48];
    long long created;
    char *sources_json; /* knowledge-base citations, or NULL */
    /* the prompt as parsed, tokenized only once the job holds a queue place (pb_server_queue_reserve) */
    pb_chat_msg *msgs; /* chat: n_msgs messages; contents point into texts */
    char **texts;
    int n_msgs, last_user;
    char *text; /* completion: the prompt text */
    bool use_documents;
    bool think;    /* chat: Gemma 4 thinking system turn ("think": true or chat_template_kwargs.enable_thinking) */
    char *thought; /* non-stream: the thought channel's text (reasoning_content), or NULL */
    size_t thought_len, thought_cap;
    char *question; /* last user message, for the FAQ fallback */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *out; /* stream: pending SSE bytes; non-stream: the answer text */
    size_t out_len, out_cap, out_sent;
    int64_t n_pieces;
    bool started, done, cancelled, fell_back;
    bool shut_down; /* dropped from the queue by pb_server_stop */
    pb_status status;
    char err[512];
    pb_gen_stats stats;
    double t_enqueue, t_first;
    int refs;
    struct pb_server *srv;
    bool holds_model; /* counted in srv->model_users until the job is freed */
    slot *running_on;
    struct job *next;
} job;

struct slot {
    struct pb_server *srv;
    int index;
    pb_session *session;
    pthread_t thread;
    job *job; /* assigned work */
    bool busy;
};

/* One TCP connection (MHD's socket context): its fd, when its request headers must be complete, and whether its client
 * takes the bytes sent to it (the watchdog's write stall check; those fields under conn_mu). */
typedef struct conn {
    int fd;
    double deadline;      /* ms (pb_time_ms); 0 = none (a request is being served) */
    bool nul_in_target;   /* the request line's target held %00 (pb_server_unescape); read by its request */
    bool slash_in_target; /* its path held %2F (pb_server_uri_log); read by its request */
    uint64_t acked;       /* bytes the client acknowledged (TCP_INFO) when progress_at was set */
    double progress_at;   /* ms: the client last took bytes, or none waited for it; 0 = not looked at yet */
    bool stalled;         /* reset by the watchdog: no byte taken for write_timeout */
    struct conn *prev, *next;
} conn;

struct pb_server {
    pb_model *model;
    const pb_vocab *vocab;
    pb_server_params p;
    char *host, *api_key, *model_id;
    struct MHD_Daemon *daemon;
    int port;
    slot *slots;
    int n_slots;
    pthread_mutex_t mu; /* queue + slot assignment */
    pthread_cond_t cv;  /* slots wait here */
    job *queue_head, *queue_tail;
    int n_queued;
    int n_reserved;         /* queue places held by requests still building their prompt */
    pthread_mutex_t tok_mu; /* /tokenize counts one text at a time */
    bool stopping;
    metrics m;
    atomic_ullong id_counter;
    atomic_int n_in_flight; /* requests between their first handler call and MHD's completion notice */
    atomic_bool halt;       /* set by pb_server_stop: running generations end at their next token */
    /* model library (server_models.c): model, vocab, model_id and the slots' sessions change only while
     * switching, when no job holds the model */
    pb_batch *batch;           /* shared by the slots' sessions (params.batch, n_slots > 1); NULL: each alone */
    pb_batch_stats batch_prev; /* counters of the batches of models loaded before (a switch makes a new one) */
    pb_server_model *lib;      /* names and paths (copies) */
    int n_lib;
    unsigned long long lib_stamp; /* params.list_stamp of the listing in lib (0: none, or not known) */
    int cur;                      /* index of the loaded model in lib, -1 when none is */
    pb_model *caller_model;       /* the model given to pb_server_start: never closed here */
    size_t caller_weights;        /* its tensor bytes (memory admission of the others under a mem_limit) */
    int n_ctx;                    /* context of each slot for the loaded model */
    pthread_mutex_t model_mu;
    pthread_cond_t model_cv;
    int model_users;   /* jobs (and /tokenize calls) using the loaded model */
    int model_waiting; /* requests waiting for another model: new users of this one wait behind them */
    bool switching, models_closed;

    /* server_guard.c */
    char **allow_hosts; /* extra Host names (--allow-host), lower case */
    int n_allow_hosts;
    bool allow_any_host; /* --allow-host '*' */
    char *cors;          /* --cors ORIGIN (or "*"), NULL = same-origin only */
    unsigned char bound_addr[16];
    int bound_family; /* AF_INET / AF_INET6 */
    bool bound_any;   /* 0.0.0.0 or :: */
    pthread_mutex_t conn_mu;
    conn *conns;
    pthread_t watchdog;
    bool watchdog_started;
    atomic_bool watchdog_stop;
};

/* One HTTP request's state between MHD callbacks (the body as it arrives). */
typedef struct request {
    char *body;
    size_t len, cap;
    bool too_large;
    bool responded;  /* answered at the first call, before the body: nothing more is read or routed */
    bool checked;    /* route, method, Host / Origin and API key checked at the first call (a body follows) */
    double t_start;  /* ms, for the request log */
    char method[12]; /* for the request log */
    char path[160];
    job *job; /* the generation this request ran (a reference), for the log's token counts */
} request;

/* ---- server_slots.c ----------------------------------------------------------------------------- */

/* A new job with one reference (the caller's); NULL when out of memory. */
job *pb_server_job_new(pb_server *srv, job_kind kind);
/* Drops one reference; the last frees the job. */
void pb_server_job_release(job *j);
/* Appends bytes to the job's output; caller holds j->mu. False when out of memory. */
bool pb_server_job_append(job *j, const char *s, size_t n);
/* Marks the job cancelled and stops its generation if one runs. Takes srv->mu and j->mu. */
void pb_server_job_cancel(job *j);
/* Takes a queue place before a request's prompt is built and tokenized, so that work and its memory are bounded by
 * slots + queue, not by connections. Returns 0, or the HTTP status to refuse with: 503 when the server is stopping,
 * 429 when every slot is busy and the queue (with the places taken) is full. */
unsigned pb_server_queue_reserve(pb_server *srv);
/* Gives back a place taken by pb_server_queue_reserve that will not be used. */
void pb_server_queue_unreserve(pb_server *srv);
/* Queues the job on the place it reserved (the worker takes its own reference). 0, or 503 when the server stopped
 * meanwhile (the place is given back). */
unsigned pb_server_queue_push(pb_server *srv, job *j);
/* Applies the FAQ fallback when no token came within fallback_after seconds, else waits up to ms for the job to
 * make progress. Caller holds j->mu and loops. */
void pb_server_job_wait_locked(job *j, int ms);
/* The FAQ answer for the job's question; false when none or no FAQ is configured. */
bool pb_server_faq_fallback(job *j, char *buf, size_t cap);
/* Marks the job as answered by the FAQ (caller holds j->mu) and queues the answer. */
void pb_server_use_fallback_locked(job *j, const char *answer);
/* The slot worker thread (arg: slot*). */
void *pb_server_slot_main(void *arg);

/* ---- server_sse.c ------------------------------------------------------------------------------- */

/* SSE event with a JSON payload (takes ownership of obj). Caller holds j->mu. */
void pb_server_sse_event(job *j, cJSON *obj);
/* A chunk object: chat delta (with the role when role is set) or completion text; finish NULL = null. */
cJSON *pb_server_sse_chunk(const job *j, const char *model_id, const char *content, size_t len, bool role,
                           const char *finish);
/* A chat chunk whose delta is {"reasoning_content": text} (the thought channel of a Gemma 4 thinking answer). */
cJSON *pb_server_sse_reasoning_chunk(const job *j, const char *model_id, const char *text, size_t len);
/* A stream's error event {"error": {message, type "server_error", code (left out when NULL)}}. */
cJSON *pb_server_sse_error(const char *message, const char *code);
/* The stream_options.include_usage chunk: empty choices and the usage. */
cJSON *pb_server_sse_usage_chunk(const job *j, const char *model_id);
/* Queues the 200 event-stream response of a queued job; takes over the caller's job reference. */
enum MHD_Result pb_server_sse_respond(pb_server *srv, struct MHD_Connection *c, job *j);

/* ---- server_openai.c ---------------------------------------------------------------------------- */

/* "stop" or "length" from the engine's stop reason. */
const char *pb_server_finish_reason(const pb_gen_stats *st);
/* {"prompt_tokens", "completion_tokens", "total_tokens"} of a finished job. */
cJSON *pb_server_usage_obj(const job *j);
/* POST /v1/chat/completions and /v1/completions. */
enum MHD_Result pb_server_route_generate(pb_server *srv, struct MHD_Connection *c, request *rq, job_kind kind);
/* POST /tokenize: {"content"} -> {"count"}. */
enum MHD_Result pb_server_route_tokenize(pb_server *srv, struct MHD_Connection *c, request *rq);

/* ---- server_models.c ---------------------------------------------------------------------------- */

/* Copies the model list and sets the loaded model (lib[0] = m) and n_ctx. */
pb_status pb_server_models_init(pb_server *srv, pb_model *m);
/* The session parameters of a slot of model m (NULL: for the memory estimate, before the model is open): the
 * server's n_ctx, threads and thermal governor, the batch; on a model that can think (Gemma 4: <|think|> in its
 * vocabulary; assumed before it is open) think, so the slot's rings keep rows beyond the window
 * (pb_engine_ring_extra): the thought of an answer, which the history a client sends back lacks, is then cut out of
 * the slot's context without re-reading it (the server builds prompts itself: think changes nothing else); and
 * ring_extra PB_SERVER_RING_EXTRA on every model. */
pb_session_params pb_server_slot_params(const pb_server_params *p, const pb_model *m, int n_ctx, pb_batch *batch);
/* PB_SERVER_RING_EXTRA: server/server.h (info --mem counts it too) */
/* Makes the model called name (NULL or "" = the loaded one) the loaded one and counts the caller as its
 * user; waits for the running jobs of another model first, at most params.idle_timeout (120 s when 0), and only while
 * the client of c is there (c NULL: not watched). Returns 0, or the HTTP status to refuse with, err saying why and
 * *code the error code: 404 unknown name (model_not_found), 503 stopping (shutting_down), 503 not loaded or free in
 * time (model_busy), 499 the client left (client_closed_request), 500 the model failed to load (model_load_failed).
 * Callers check the request first: a switch is work a refused request must not cause. */
unsigned pb_server_model_acquire(pb_server *srv, const char *name, struct MHD_Connection *c, char *err, size_t cap,
                                 const char **code);
/* Ends one use counted by pb_server_model_acquire. */
void pb_server_model_release(pb_server *srv);
/* Waits for a switch in progress and refuses new ones (pb_server_stop, before the sessions go). */
void pb_server_models_close(pb_server *srv);
/* Frees the list and closes a model the server opened itself. */
void pb_server_models_free(pb_server *srv);
/* GET /v1/models: every model requests may name, with the loaded one marked. */
enum MHD_Result pb_server_route_models(pb_server *srv, struct MHD_Connection *c);
/* True when id is the exact name of a library entry, as GET /v1/models/ID matches it (the list refreshed first when
 * the library changed). */
bool pb_server_model_listed(pb_server *srv, const char *id);
/* GET /v1/models/ID: the model object of library entry ID, or 404 model_not_found. */
enum MHD_Result pb_server_route_model(pb_server *srv, struct MHD_Connection *c, const char *id);
/* That 404 (the id shown only when it is printable UTF-8). */
enum MHD_Result pb_server_send_model_404(pb_server *srv, struct MHD_Connection *c, const char *id);

/* ---- server_metrics.c --------------------------------------------------------------------------- */

/* The batch counters since the server started (the current batch's + those of models loaded before). Caller holds
 * srv->mu. */
void pb_server_batch_stats(pb_server *srv, pb_batch_stats *out);
/* Adds a batch's counters to batch_prev before it is freed (a model switch). Caller holds srv->mu. */
void pb_server_batch_retire(pb_server *srv);

/* Adds one finished generation's timings to the histograms; caller holds srv->m.mu. */
void pb_server_metrics_add_gen(pb_server *srv, double ttft_s, double tps);
enum MHD_Result pb_server_route_metrics(pb_server *srv, struct MHD_Connection *c);
enum MHD_Result pb_server_route_stats(pb_server *srv, struct MHD_Connection *c);

/* ---- server_ui.c -------------------------------------------------------------------------------- */

/* GET of a web UI asset ("/" is index.html); 404 JSON for anything else. */
enum MHD_Result pb_server_route_static(pb_server *srv, struct MHD_Connection *c, const char *url);
/* True when url names a web UI asset (the 405-or-404 choice for another method). */
bool pb_server_static_exists(const char *url);

/* ---- server_guard.c ----------------------------------------------------------------------------- */

/* Reads --allow-host / --cors / the bound address into the server. PB_ERR_INVALID_ARG for a bad list. */
pb_status pb_server_guard_init(pb_server *srv, const struct sockaddr *bound);
void pb_server_guard_deinit(pb_server *srv);
/* 0 when the request's Host and Origin are acceptable, else 403 with the reason in msg. */
unsigned pb_server_guard_check(pb_server *srv, struct MHD_Connection *c, char *msg, size_t cap);
/* Headers every response carries: nosniff, and Access-Control-Allow-Origin when the request's Origin is allowed by
 * --cors. */
void pb_server_guard_headers(pb_server *srv, struct MHD_Connection *c, struct MHD_Response *r);
/* A preflight's CORS headers when the request's Origin is allowed by --cors: Access-Control-Allow-Methods (methods: the
 * route's own), -Allow-Headers, -Max-Age. */
void pb_server_guard_preflight(pb_server *srv, struct MHD_Connection *c, struct MHD_Response *r, const char *methods);
/* MHD's connection notice: tracks each connection for the header deadline. */
void pb_server_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe);
/* True when the watchdog reset the connection because its client took no bytes for write_timeout. */
bool pb_server_conn_stalled(pb_server *srv, struct MHD_Connection *c);
/* The request's headers arrived (deadline off) / the response is done (the next request's deadline starts). */
void pb_server_conn_busy(pb_server *srv, struct MHD_Connection *c);
void pb_server_conn_idle(pb_server *srv, struct MHD_Connection *c);
/* Starts / stops the thread that closes connections past their header deadline and resets those whose client takes no
 * bytes for write_timeout. */
pb_status pb_server_watchdog_start(pb_server *srv);
void pb_server_watchdog_stop(pb_server *srv);
/* True when the client closed its side of the connection (checked without reading its bytes). */
bool pb_server_client_gone(struct MHD_Connection *c);
/* The connection's state (pb_server_on_connection's), or NULL when it has none. */
conn *pb_server_conn_of(struct MHD_Connection *c);

/* ---- server_http.c ------------------------------------------------------------------------------ */

/* Queues a response with the given body (copied when copy) and counts it in the metrics. */
enum MHD_Result pb_server_send_text(pb_server *srv, struct MHD_Connection *c, unsigned code, const char *ctype,
                                    const char *text, size_t len, bool copy);
/* Queues cJSON text (takes ownership of obj). */
enum MHD_Result pb_server_send_json(pb_server *srv, struct MHD_Connection *c, unsigned code, cJSON *obj);
/* OpenAI-style error: {"error": {"message", "type", "param", "code"}}. */
enum MHD_Result pb_server_send_error(pb_server *srv, struct MHD_Connection *c, unsigned code, const char *type,
                                     const char *param, const char *errcode, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* Counts a response in the by-status metrics. */
void pb_server_count_response(pb_server *srv, unsigned code);
/* The MHD access handler and completion notice (registered by pb_server_start). */
enum MHD_Result pb_server_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                     const char *version, const char *upload, size_t *upload_size, void **con_cls);
void pb_server_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);
/* MHD's unescaper of the request target (MHD_OPTION_UNESCAPE_CALLBACK): %HH decoded as MHD does, except %00, which is
 * left as it is and marks the connection (conn.nul_in_target) so the request is refused: decoded, the NUL would cut
 * the path ("/health%00.js" read as "/health"). */
size_t pb_server_unescape(void *cls, struct MHD_Connection *c, char *s);
/* MHD's URI log callback (MHD_OPTION_URI_LOG_CALLBACK), called with the request target as sent, before it is split and
 * unescaped: marks the connection (conn.slash_in_target) when the path (not the query) holds %2F, so the request is
 * refused: decoded, "/v1%2Fmodels" would route as "/v1/models". Returns NULL (the request's context). */
void *pb_server_uri_log(void *cls, const char *uri, struct MHD_Connection *c);

#endif
