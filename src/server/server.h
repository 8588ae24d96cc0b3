/* server.h -- the HTTP server room: OpenAI-compatible API + web UI over libmicrohttpd. Not in the core lib. */
#ifndef PB_SERVER_H
#define PB_SERVER_H

#include "pocketbrain.h"

struct cJSON;
/* Replaces every string value in the tree that is not valid UTF-8 by its repair (U+FFFD for bad bytes), so no JSON
 * the server or the CLI prints carries raw bytes (a URL's %FF, a model file's name, GGUF metadata). */
void pb_server_json_repair(struct cJSON *node);

typedef struct pb_server pb_server;

/* Optional answer sources the CLI wires in (the server room does not include sqlite3.h). */
typedef struct pb_server_hooks {
    /* FAQ fallback: best answer for a question; returns true and fills buf when one is found. */
    bool (*faq_match)(void *user, const char *question, char *buf, size_t cap);
    void *faq_user;
    /* Knowledge base: builds a grounded prompt for the question (prompt_out, malloc'd) and a JSON array
     * of sources (sources_json_out, malloc'd; cJSON text). Returns false when no KB is configured. */
    /* budget_tokens: what the instructions, the sources and the question may take (the slot's context less the
     * answer's max_tokens and the rest of the conversation) */
    bool (*kb_prompt)(void *user, const char *question, int64_t budget_tokens, char **prompt_out,
                      char **sources_json_out);
    void *kb_user;
    /* What /health says about those databases ("knowledge_base_note") and a request that could not use one is told:
     * true with a note in buf when a file is not the one being read (deleted, replaced by an unreadable file). May be
     * NULL. */
    bool (*kb_status)(void *user, char *buf, size_t cap);
    void *status_user;
} pb_server_hooks;

/* A model requests may name in their "model" field (the CLI's model library). */
typedef struct pb_server_model {
    const char *name; /* shown in /v1/models, matched exactly */
    const char *path; /* GGUF file the server opens when a request names it */
} pb_server_model;

typedef struct pb_server_params {
    const char *host;      /* bind address: IPv4, IPv6 or a name such as "localhost"; default "127.0.0.1" */
    int port;              /* default 8080; 0 = any free port (see pb_server_port) */
    int n_parallel;        /* slots = sessions generating at once (default 1) */
    int queue_max;         /* requests waiting beyond the slots before 429 (default 16) */
    const char *api_key;   /* when set, "Authorization: Bearer KEY" is required on /v1/, /tokenize, /metrics, /stats */
    size_t max_body;       /* bytes of a request body (default 1 MiB) */
    int max_tokens_cap;    /* upper bound for max_tokens (default 2048) */
    int n_ctx;             /* context per slot (default 2048) */
    int n_threads;         /* forward threads per slot (0 = model default) */
    const char *model_id;  /* name shown in /v1/models */
    double fallback_after; /* seconds without a first token before the FAQ answer is used (0 = off) */
    const char *thermal;   /* thermal governor of every slot: NULL/"off", "auto" or a file (pb_session_params) */
    bool ctx_auto;         /* n_ctx is a cap: each model gets min(n_ctx, its training context) */
    /* Models requests may name; models[0] is the one given to pb_server_start (its path may be NULL). One is
     * loaded at a time: a request naming another waits for the running ones, then the server swaps models
     * (the one given to pb_server_start stays open, it is the caller's). A name not listed is a 404. With
     * n_models 0 the list is just model_id. The strings are copied. */
    const pb_server_model *models;
    int n_models;
    /* Optional: lists the models requests may name now (the CLI rescans its library), calling add once per
     * model; the server copies the strings. Called for GET /v1/models and when a request names a model the
     * server does not know, so models pulled or removed while it runs are seen; the model given to
     * pb_server_start and the loaded one stay listed (the loaded one serves from memory even when its file
     * was removed). NULL: the list above is fixed. Called from request threads, one call at a time. */
    void (*list_models)(void *user, void (*add)(void *ctx, const char *name, const char *path), void *ctx);
    /* Optional, with list_models: a value that changes whenever what list_models lists may have changed (the CLI: the
     * library directory's identity and times); 0 = not known. The server lists again only when it differs from the
     * value of its last listing (or is 0), so a request naming a model nobody has costs a call of this, not a
     * rescan of the library. NULL: every occasion above lists again. Called like list_models. */
    unsigned long long (*list_stamp)(void *user);
    void *list_user;
    /* Who may talk to the server. Requests whose Host header is not an address the server listens on (or
     * "localhost" when it listens on loopback) are refused with 403, so a web page cannot reach it through DNS
     * rebinding; allow_hosts adds names (comma-separated, "*" = any). Browser cross-origin requests (an Origin
     * other than the server's own, or Sec-Fetch-Site cross-site) are refused unless cors names that origin
     * (comma-separated, "*" = any), which then also gets the CORS response headers. */
    const char *allow_hosts;
    const char *cors;
    int max_connections;     /* open connections in all (default 512) */
    int max_conn_per_client; /* open connections per client address (default 64) */
    double header_timeout;   /* seconds a connection may take to send a request's line and headers, counted from
                                its connect or the previous response (default 10) */
    double idle_timeout;     /* seconds without a byte before a connection is closed (default 120); also the
                                longest a request waits for the model it names (then 503 model_busy; 0: 120 s) */
    double write_timeout;    /* seconds a connection may keep bytes waiting that its client takes none of (its TCP
                                receive window full: a stream nobody reads) before it is reset, its generation
                                cancelled and its slot freed (default 30; 0 = off: the generation then runs to its
                                end, the kernel's socket buffers taking megabytes of a stream nobody reads) */
    /* One line per request (method, path, status, tokens, time), e.g. to stderr; NULL = no log. */
    void (*log)(void *user, const char *line);
    void *log_user;
    pb_server_hooks hooks;
    /* models the server opens on request: pb_model_params.pack_cache_dir (NULL = none) */
    const char *pack_cache_dir;
    /* Continuous batching (default true): with n_parallel > 1 the slots' sessions share one pb_batch, so the
     * requests generating at once decode their tokens in one forward step (the same answers, more tokens per
     * second in all). A switch to another model makes the batch anew. false: each slot decodes alone. */
    bool batch;
    /* Memory admission of every model the server opens for a request (pb_server_admit's, run before the open): the
     * weights once plus n_parallel slots, each a session of the model's n_ctx (KV + scratch), against mem_limit
     * (bytes; 0 = the memory available: MemAvailable, cgroup limits). A model that does not fit is not loaded: the
     * request gets the reason. With fit, such a model gets the largest n_ctx, a multiple of 256, at which its slots
     * fit instead (a refusal only when not even 256 does). */
    size_t mem_limit;
    bool fit;
    /* Where every model the server opens runs (pb_model_params.gpu): -1 the GPU when one is usable (default), 1 the
     * GPU or a refusal, 0 the CPU. */
    int gpu;
    /* The slots' context for the model given to pb_server_start when pb_server_admit (fit) chose one below n_ctx;
     * 0 = n_ctx. n_ctx stays the cap of the models loaded later. */
    int n_ctx_first;
} pb_server_params;

pb_server_params pb_server_default_params(void);

/* What a memory admission estimated for one model's slots (bytes). */
typedef struct pb_server_mem {
    size_t weights;     /* the model's tensor bytes, counted once (0: in memory already, the caller's model reloaded) */
    size_t kv, scratch; /* of one slot's session at n_ctx */
    size_t other;       /* the model given to pb_server_start, open beside this one (counted under a mem_limit) */
    size_t total;       /* weights + n_slots x (kv + scratch) + other */
    size_t available;   /* mem_limit, or what was detected (0: unknown, nothing was compared) */
    int n_slots, n_ctx; /* the slots and their context (n_ctx after ctx_auto and fit) */
    int n_ctx_asked;    /* n_ctx before fit */
    bool adjusted;      /* fit lowered n_ctx */
} pb_server_mem;

/* Memory admission of the server's slots for the model at model_path, before it is opened (call it before
 * pb_model_open: the weights are counted once, against the memory available before they are mapped). Reads the
 * GGUF header only. The slots: p->n_parallel sessions of p->n_ctx (with p->ctx_auto at most the model's training
 * context), each with its KV cache and scratch (pb_estimate_memory), beside the weights, against p->mem_limit or
 * the memory available. PB_ERR_MEMORY_LIMIT when they do not fit, with a message giving the numbers (MiB), how
 * many slots fit at this n_ctx and the n_ctx at which all of them do ("... (use -np 6 or -c 768, or --fit)").
 * With p->fit it instead sets p->n_ctx_first to the largest n_ctx, a multiple of 256, at which they fit (out->
 * adjusted), and fails only when not even 256 does. Other errors (no such file, not a model, an n_ctx the model
 * refuses) are the estimate's: pb_model_open and pb_server_start say them too. out may be NULL. */
pb_status pb_server_admit(const char *model_path, pb_server_params *p, pb_server_mem *out);

/* Starts listening and the slot workers. The model must outlive the server; models[1..] the server opens
 * and closes itself (each after its memory admission). The slots of the model given here are not checked against
 * the memory: that is pb_server_admit's job, before the caller opens it. */
pb_status pb_server_start(pb_model *m, const pb_server_params *p, pb_server **out);
/* The port actually bound. */
int pb_server_port(const pb_server *s);
/* Graceful stop: no new requests; in-flight streams get a final event; workers joined. Accepts NULL. */
void pb_server_stop(pb_server *s);

/* Rows a slot's sliding-window rings keep beyond the window (pb_session_params.ring_extra): a conversation sent back
 * whose last answer tokenizes otherwise than the ids the model sampled (the text is the same) differs from the slot's
 * context inside that answer; going back there, once the conversation passed the window, read the whole prefix
 * again. 512 covers an answer of up to that many tokens (Gemma 2 2B, f16: 27 MiB a slot). */
#define PB_SERVER_RING_EXTRA 512

#endif
