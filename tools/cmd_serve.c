/* cmd_serve.c -- `pocketbrain serve`: OpenAI-compatible HTTP server + web UI until SIGINT/SIGTERM. */
#include "cli.h"
#include "cli_common.h"
#include "library.h"
#include "server/server.h"

#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

static const char *USAGE =
    "pocketbrain serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--parallel N] [--no-batch] [--queue N]\n"
    "                  [--api-key KEY] [--ctx N] [--threads N] [--max-body BYTES] [--max-tokens N]\n"
    "                  [--fallback-after SEC] [--db KB.sqlite] [--faq FAQ.sqlite] [--thermal auto|off|FILE]\n"
    "                  [--allow-host NAMES] [--cors ORIGINS] [--max-conn N] [--max-conn-per-client N]\n"
    "                  [--header-timeout SEC] [--idle-timeout SEC] [--write-timeout SEC]\n"
    "                  [--mem-limit SIZE] [--fit] [--gpu|--no-gpu] [--no-pack-cache] [--quiet]";

static const char *HELP =
    "\nServes POST /v1/chat/completions, POST /v1/completions, GET /v1/models and /v1/models/ID (OpenAI-compatible),\n"
    "POST /tokenize, GET /health, GET /metrics (Prometheus), GET /stats and the web chat UI at /.\n"
    "HEAD works where GET does.\n"
    "\n"
    "Model and generation:\n"
    "  -m, --model FILE|NAME   GGUF model, a path or a library name (default: $PB_MODEL, else models/default.gguf\n"
    "                          beside the binary). GET /v1/models lists it and the model library ($PB_MODELS);\n"
    "                          a request's \"model\" loads that model (one at a time; an unknown name -> 404)\n"
    "  -c, --ctx N             context per slot in tokens (default: 2048, or the model's training context if smaller)\n"
    "  -t, --threads N         threads per slot (default: the physical cores)\n"
    "  -np, --parallel N       slots = requests generating at once, 1..64 (default 1); each has its own context.\n"
    "                          The slots decode together: one forward step feeds the next token of every\n"
    "                          generating request (continuous batching: the same answers, the weights read\n"
    "                          once per step for all)\n"
    "  --no-batch              each slot decodes alone (the behaviour before batching; for comparison)\n"
    "  --queue N               requests waiting for a slot before 429 (default 16)\n"
    "  --max-tokens N          the largest max_tokens a request may ask for (default 2048; 256 when it names none)\n"
    "  --max-body BYTES        largest request body, K/M suffixes (default 1M); larger -> 413\n"
    "  --thermal auto|off|FILE thermal governor of every slot (default off)\n"
    "  --db KB.sqlite          knowledge base for \"use_documents\" (the UI's \"Use my documents\"; default none)\n"
    "  --faq FAQ.sqlite        FAQ answers used when the model fails or is late (default none)\n"
    "  --fallback-after SEC    use the FAQ answer when no token came within SEC seconds (default 0 = off)\n"
    "  --no-pack-cache         repack weights at every model open (default: map the packed-weights cache in\n"
    "                          $XDG_CACHE_HOME/pocketbrain, else ~/.cache/pocketbrain; PB_PACK_CACHE=off: no cache)\n"
    "  --gpu / --no-gpu        run every model on the GPU (refused when none is usable) / on the CPU (default: the\n"
    "                          GPU when this build has CUDA and one is usable)\n"
    "\n"
    "Memory (checked before a model is loaded: at start, and for a model a request names):\n"
    "  --mem-limit SIZE        memory the weights and every slot's KV cache and scratch may use, K/M/G suffixes\n"
    "                          (default: detected, MemAvailable or the cgroup limit). When the slots do not fit,\n"
    "                          serve exits 1 saying how many slots, or which --ctx for all of them, would; a model\n"
    "                          a request names is not loaded and the request gets a 500 saying the same\n"
    "  --fit                   when the slots do not fit, lower --ctx (a multiple of 256) until all of them do\n"
    "                          (default off: refuse)\n";

/* The rest of the help (one literal of it passed the 4,095 characters C99 compilers must take). */
static const char *HELP_NET =
    "\n"
    "Network and access:\n"
    "  --host ADDR             bind address: IPv4, IPv6 (::1) or a name such as localhost (default 127.0.0.1,\n"
    "                          loopback only); 0.0.0.0 or :: listens on every interface\n"
    "  --port N                TCP port, 0 = any free one (printed as 'listening PORT'; default 8080)\n"
    "  --api-key KEY           require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /metrics and /stats\n"
    "                          (default none). /health and the UI's files stay open: the UI asks for the key.\n"
    "  --allow-host NAMES      extra Host names accepted, comma-separated, '*' = any (default none). Requests\n"
    "                          whose Host is not an address the server listens on (or localhost on loopback)\n"
    "                          get 403: this stops DNS rebinding, a web page reaching the server by a name.\n"
    "  --cors ORIGINS          web origins (e.g. http://localhost:3000, '*' = any) whose pages may call the API\n"
    "                          from a browser (default none: cross-origin browser requests get 403)\n"
    "\n"
    "Limits against slow or greedy clients:\n"
    "  --max-conn N            open connections in all (default 512)\n"
    "  --max-conn-per-client N open connections per client address (default 64); more are refused at once\n"
    "  --header-timeout SEC    time a connection has to send a request's line and headers, counted from its\n"
    "                          connect or its previous response (default 10); then it is closed\n"
    "  --idle-timeout SEC      a connection silent this long is closed (default 120)\n"
    "  --write-timeout SEC     a response whose client takes none of its bytes this long (a stream nobody reads:\n"
    "                          the socket's buffers full) is cut off, its generation cancelled, its slot freed\n"
    "                          (default 30)\n"
    "\n"
    "Output:\n"
    "  -q, --quiet             no request log (default: one line per request on stderr: client, method, path,\n"
    "                          status, prompt+generated tokens, seconds)\n";

/* The request log: one line per request on stderr. */
static void log_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "pocketbrain serve: %s\n", line);
}

/* Filled by the knowledge-hub room when it is linked in (weak: the server runs without it). */
bool cli_kb_hooks(const char *db_path, const char *faq_path, const pb_model *m, pb_server_hooks *hooks)
    __attribute__((weak));

/* params.list_models: the library as it is now, less the file the server was started with (user: its
 * realpath), so models pulled or removed while the server runs are seen. Names and files only: no manifest or GGUF
 * header is read (lib_list's work, 0.35 s for 2,000 models, was done for every request naming an unknown model). */
typedef struct list_ctx {
    const char *started;
    void (*add)(void *ctx, const char *name, const char *path);
    void *ctx;
} list_ctx;

static void list_one(void *user, const char *name, const char *file) {
    const list_ctx *l = user;
    char real[PATH_MAX];
    if (!realpath(file, real) || strcmp(real, l->started) != 0) l->add(l->ctx, name, file);
}

static void list_library(void *user, void (*add)(void *ctx, const char *name, const char *path), void *ctx) {
    list_ctx l = {user, add, ctx};
    lib_each_file(list_one, &l);
}

/* params.list_stamp: the server lists the library again only when this changed. */
static unsigned long long library_stamp(void *user) {
    (void)user;
    return lib_dir_stamp();
}

int cmd_serve(int argc, char **argv) {
    const char *cmd = "serve", *model = NULL, *db = NULL, *faq = NULL;
    pb_server_params p = pb_server_default_params();
    long v;
    double d;
    bool ctx_given = false, quiet = false, no_pack_cache = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        int r;
#define FLAG(name, alias, v) (r = cli_flag(cmd, USAGE, argc, argv, &i, name, alias, v))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            printf("usage: %s\n%s%s", USAGE, HELP, HELP_NET);
            return 0;
        } else if (FLAG("--model", "-m", &val) != 0) {
            if (r < 0) return 2;
            if (!(model = cli_model_arg(cmd, val))) return 1;
        } else if (FLAG("--host", NULL, &val) != 0) {
            if (r < 0) return 2;
            p.host = val;
        } else if (FLAG("--port", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_int(cmd, a, val, 0, 65535, &v)) return cli_usage_line(USAGE);
            p.port = (int)v;
        } else if (FLAG("--parallel", "-np", &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_int(cmd, a, val, 1, 64, &v)) return cli_usage_line(USAGE);
            p.n_parallel = (int)v;
        } else if (FLAG("--no-batch", NULL, NULL) != 0) {
            if (r < 0) return 2;
            p.batch = false;
        } else if (FLAG("--queue", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_int(cmd, a, val, 0, 100000, &v)) return cli_usage_line(USAGE);
            p.queue_max = (int)v;
        } else if (FLAG("--api-key", NULL, &val) != 0) {
            if (r < 0) return 2;
            /* an empty key turned authentication off without a word (`--api-key "$KEY"` with KEY unset) */
            if (!*val)
                return cli_usage_error(cmd, USAGE, "--api-key is empty (leave the option out to serve without a key)");
            p.api_key = val;
        } else if (FLAG("--ctx", "-c", &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_int(cmd, a, val, 16, 1 << 20, &v)) return cli_usage_line(USAGE);
            p.n_ctx = (int)v;
            ctx_given = true;
        } else if (FLAG("--no-pack-cache", NULL, NULL) != 0) {
            if (r < 0) return 2;
            no_pack_cache = true;
        } else if (FLAG("--gpu", "--no-gpu", NULL) != 0) {
            if (r < 0) return 2;
            p.gpu = a[2] == 'g';
        } else if (FLAG("--mem-limit", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_size(cmd, a, val, &p.mem_limit)) return cli_usage_line(USAGE);
            if (p.mem_limit == 0) return cli_usage_error(cmd, USAGE, "--mem-limit must be above 0");
        } else if (FLAG("--fit", NULL, NULL) != 0) {
            if (r < 0) return 2;
            p.fit = true;
        } else if (FLAG("--threads", "-t", &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_int(cmd, a, val, 1, 256, &v)) return cli_usage_line(USAGE);
            p.n_threads = (int)v;
        } else if (FLAG("--max-body", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_size(cmd, a, val, &p.max_body)) return cli_usage_line(USAGE);
        } else if (FLAG("--max-tokens", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_int(cmd, a, val, 1, 1 << 20, &v)) return cli_usage_line(USAGE);
            p.max_tokens_cap = (int)v;
        } else if (FLAG("--fallback-after", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_float(cmd, a, val, 0, 3600, &d)) return cli_usage_line(USAGE);
            p.fallback_after = d;
        } else if (FLAG("--thermal", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!*val) return cli_usage_error(cmd, USAGE, "--thermal needs auto, off or a file path");
            p.thermal = val;
        } else if (FLAG("--allow-host", NULL, &val) != 0) {
            if (r < 0) return 2;
            p.allow_hosts = val;
        } else if (FLAG("--cors", NULL, &val) != 0) {
            if (r < 0) return 2;
            p.cors = val;
        } else if (FLAG("--max-conn", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_int(cmd, a, val, 1, 100000, &v)) return cli_usage_line(USAGE);
            p.max_connections = (int)v;
        } else if (FLAG("--max-conn-per-client", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_int(cmd, a, val, 1, 100000, &v)) return cli_usage_line(USAGE);
            p.max_conn_per_client = (int)v;
        } else if (FLAG("--header-timeout", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_float(cmd, a, val, 0.1, 3600, &d)) return cli_usage_line(USAGE);
            p.header_timeout = d;
        } else if (FLAG("--idle-timeout", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_float(cmd, a, val, 1, 86400, &d)) return cli_usage_line(USAGE);
            p.idle_timeout = d;
        } else if (FLAG("--write-timeout", NULL, &val) != 0) {
            if (r < 0) return 2;
            if (!cli_parse_float(cmd, a, val, 1, 86400, &d)) return cli_usage_line(USAGE);
            p.write_timeout = d;
        } else if (FLAG("--quiet", "-q", NULL) != 0) {
            if (r < 0) return 2;
            quiet = true;
        } else if (FLAG("--db", NULL, &val) != 0) {
            if (r < 0) return 2;
            db = val;
        } else if (FLAG("--faq", NULL, &val) != 0) {
            if (r < 0) return 2;
            faq = val;
        } else {
            return cli_usage_error(cmd, USAGE, "unknown option '%s'", a);
        }
#undef FLAG
    }
    if (!model) model = cli_default_model();
    if (!model) return cli_usage_error(cmd, USAGE, "no model: pass -m MODEL.gguf");

    /* the slots before the model: every slot is a session with its own KV cache and scratch, untouched pages until
     * its context fills, so a server started with too many slots ran fine until the OOM killer came (the weights
     * are counted here, before they are mapped: pb_server_admit) */
    p.ctx_auto = !ctx_given; /* default: 2048 or each model's training context, whichever is smaller */
    pb_server_mem mem;
    pb_status s = pb_server_admit(model, &p, &mem);
    if (s == PB_ERR_MEMORY_LIMIT) {
        cli_err(cmd, "%s: %s", model, pb_last_error());
        return 1;
    }
    /* another error (no such file, not a model, an n_ctx it refuses): the open or the server start says it */
    if (s == PB_OK && mem.adjusted) {
        char slots[48] = "the slot";
        if (mem.n_slots > 1) snprintf(slots, sizeof slots, "each of the %d slots", mem.n_slots);
        cli_err(cmd, "--fit: n_ctx %d for %s (%d asked; %.0f MiB of %.0f MiB available)", mem.n_ctx, slots,
                mem.n_ctx_asked, (double)mem.total / MIB, (double)mem.available / MIB);
    }
    pb_model_params mp = pb_model_default_params();
    if (p.n_threads) mp.n_threads = p.n_threads;
    mp.mem_limit = p.mem_limit;
    mp.gpu = p.gpu;
    mp.pack_cache_dir = p.pack_cache_dir = no_pack_cache ? NULL : cli_pack_cache_dir();
    mp.pack_cache_background = true; /* serving starts before the cache file is written */
    pb_model *m = NULL;
    s = pb_model_open(model, &mp, &m);
    if (s != PB_OK) return cli_fail(cmd, s, model);
    /* the model library: requests may name any of its models ("model"); the one started with comes first,
     * named as in the library when it is a library file, else by its file name */
    static char id[LIB_NAME_MAX + 1];
    const char *base = strrchr(model, '/');
    snprintf(id, sizeof id, "%s", base ? base + 1 : model);
    int n_lib = 0;
    lib_entry *lib = lib_list(&n_lib);
    static char real[PATH_MAX];
    char li[PATH_MAX];
    if (!realpath(model, real)) snprintf(real, sizeof real, "%s", model);
    for (int i = 0; i < n_lib; i++) /* same file: marked by an empty path, left out of the list below */
        if (realpath(lib[i].file, li) && strcmp(li, real) == 0) {
            snprintf(id, sizeof id, "%s", lib[i].name);
            lib[i].file[0] = 0;
        }
    p.model_id = id;
    pb_server_model *list = calloc((size_t)n_lib + 1, sizeof *list);
    if (!list) {
        free(lib);
        pb_model_close(m);
        cli_err(cmd, "out of memory");
        return 1;
    }
    list[0] = (pb_server_model){p.model_id, model};
    p.n_models = 1;
    for (int i = 0; i < n_lib; i++)
        if (lib[i].file[0]) list[p.n_models++] = (pb_server_model){lib[i].name, lib[i].file};
    p.models = list;
    p.list_models = list_library;
    p.list_stamp = library_stamp;
    p.list_user = real;
    if ((db || faq)) {
        if (!cli_kb_hooks || !cli_kb_hooks(db, faq, m, &p.hooks)) { /* cli_kb_hooks said why */
            if (!cli_kb_hooks) cli_err(cmd, "this build cannot use a knowledge base / FAQ database (--db/--faq)");
            free(list);
            free(lib);
            pb_model_close(m);
            return 1;
        }
    }
    if (!quiet) p.log = log_line;
    /* Every connection is a thread; by default glibc gives threads malloc arenas of their own, each keeping the
     * peak of the large requests it once held (1 MB bodies, their tokenization). Two shared arenas let freed
     * memory serve the next request. Generation allocates nothing per token, so the contention is negligible. */
    mallopt(M_ARENA_MAX, 2);
    /* SIGINT/SIGTERM are blocked from here on, in this thread and in every thread the server starts (they
     * inherit the mask), and taken by sigwait() below: a stop request can neither slip in between a check
     * and a pause() nor land on a worker thread while this one sleeps on. */
    sigset_t stop_sigs;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
    pb_server *srv = NULL;
    s = pb_server_start(m, &p, &srv);
    free(list); /* the server copied the names and paths */
    free(lib);
    if (s != PB_OK) {
        pb_model_close(m);
        return cli_fail(cmd, s, "cannot start the server");
    }
    signal(SIGPIPE, SIG_IGN);
    bool v6 = strchr(p.host, ':') && p.host[0] != '[';
    fprintf(stderr,
            "pocketbrain serve: listening on http://%s%s%s:%d/ (model %s, %d slot%s%s, %d more in the library %s)\n",
            v6 ? "[" : "", p.host, v6 ? "]" : "", pb_server_port(srv), p.model_id, p.n_parallel,
            p.n_parallel == 1 ? "" : "s",
            p.n_parallel == 1 ? ""
            : p.batch         ? " decoding in one batch"
                              : " each alone",
            p.n_models - 1, lib_dir());
    printf("listening %d\n", pb_server_port(srv));
    cli_flush_stdout();
    int sig = 0;
    while (sigwait(&stop_sigs, &sig) != 0) {
    }
    fprintf(stderr, "pocketbrain serve: shutting down\n");
    pb_server_stop(srv);
    pb_model_close(m);
    return 0;
}
