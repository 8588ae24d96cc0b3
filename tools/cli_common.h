/* cli_common.h -- flags shared by run, chat and bench (model, threads, context, sampling, memory,
 * thermal), model + session opening with memory admission, and the memory report of `info --mem`. */
#ifndef PB_CLI_COMMON_H
#define PB_CLI_COMMON_H

#include "cli.h"

#define CLI_MAX_STOP 16
/* -c / --ctx range of every command that opens a session (and of `info --mem -c`); the model's training
 * context caps it further (pb_session_new and the estimates refuse the same values). */
#define CLI_MIN_CTX 16
#define CLI_MAX_CTX (1 << 20)

/* Rows chat's sliding-window rings keep beyond the window: /undo and /retry go back a turn of up to that many tokens
 * without reading the context again (info --mem counts them). */
#define CLI_CHAT_RING_EXTRA 512

typedef struct cli_opts {
    const char *model; /* -m; NULL = cli_default_model() */
    int n_threads;     /* -t; 0 = physical cores */
    int n_ctx;         /* -c; 0 = min(model, 4096) */
    int n_batch;       /* -b */
    pb_preset preset;  /* --preset */
    /* explicit sampling overrides (applied over the preset) */
    bool has_temp, has_top_k, has_top_p, has_min_p, has_rep, has_pres, has_freq, has_last_n, has_seed;
    double temp, top_p, min_p, rep, pres, freq;
    long top_k, last_n;
    uint64_t seed;
    const char *system;  /* --system */
    pb_kv_type kv_type;  /* --kv-type f16|q8_0|f32 */
    size_t mem_limit;    /* --mem-limit; 0 = detect */
    bool fit;            /* --fit */
    const char *thermal; /* --thermal auto|off|PATH */
    bool context_shift;  /* --context-shift */
    bool warmup;         /* --warmup */
    int gpu;             /* --gpu 1 / --no-gpu 0; -1 = the GPU when usable */
    bool no_pack_cache;  /* --no-pack-cache */
    int max_tokens;      /* -n */
    const char *stop[CLI_MAX_STOP];
    int n_stop;         /* --stop (repeatable) */
    bool think;         /* --think: Gemma 4 thinking system turn */
    bool show_thinking; /* --show-thinking: the thought channel to stderr (default: not printed) */
    bool keep_thinking; /* --keep-thinking: earlier turns' thoughts stay in the context */
    int ring_extra;     /* pb_session_params.ring_extra (no flag: chat sets it, CLI_CHAT_RING_EXTRA) */
} cli_opts;

void cli_opts_init(cli_opts *o);

/* Tries argv[*i] as a common flag ("--temp 0.5" or "--temp=0.5"); advances *i past its value.
 * Returns 1 when consumed, 0 when it is not a common flag, 2 after printing a usage error. */
int cli_opts_parse(cli_opts *o, const char *cmd, const char *usage, int argc, char **argv, int *i);

/* Text given to the model (prompts, files, system prompt, stop strings) must be UTF-8 without NUL bytes:
 * true when text[0..len) is, else false after printing "<what> is not valid UTF-8 (byte N ...)". */
bool cli_check_text(const char *cmd, const char *what, const char *text, size_t len);

/* The packed-weights cache directory of the CLI: $XDG_CACHE_HOME/pocketbrain, else $HOME/.cache/pocketbrain
 * (NULL when neither is set, or when $PB_PACK_CACHE is "off"). */
const char *cli_pack_cache_dir(void);

/* The help text of the common flags (for --help). */
extern const char *const cli_opts_help;

/* The preset with the explicit overrides applied. */
pb_sampler_params cli_opts_sampler(const cli_opts *o);
/* Session params from the flags. */
pb_session_params cli_opts_session(const cli_opts *o);
/* Generation params: sampler, max tokens, stop strings. */
pb_gen_params cli_opts_gen(const cli_opts *o);

/* Resolves the model path (-m or the default model), runs memory admission (refusal with the numbers,
 * or --fit adjustments announced on stderr), opens the model and creates the session. Returns 0, or
 * the exit status to return (1; the message is printed). load_ms (may be NULL) gets the time taken. */
int cli_open(const char *cmd, const cli_opts *o, pb_model **m, pb_session **s, double *load_ms);
/* Closes a model cli_open opened; when its packed-weights cache is still being written (a model's first run), says
 * so on a terminal, since the process waits for it before it ends, unless interrupted (a Ctrl-C already came): then
 * the process ends at once by SIGINT, the half-written cache file removed, as a Ctrl-C during the write does. */
void cli_close_model(const char *cmd, pb_model *m, bool interrupted);
/* cli_close_model's wait alone (the model stays open; pb_model_info then says how the write ended). */
void cli_wait_pack_cache(const char *cmd, pb_model *m, bool interrupted);

/* `info --mem`: prints the memory estimate for n_ctx / KV type against the memory available. */
typedef struct cli_mem_opts {
    bool on;
    int n_ctx;
    pb_kv_type kv_type;
    size_t mem_limit;
    bool think;        /* --think: a session that drops its Gemma 4 thoughts (its rings hold more rows) */
    const char *given; /* the first of -c, --kv-type, --mem-limit, --think seen (they only mean something with --mem) */
} cli_mem_opts;
/* Parses --mem, -c/--ctx N, --kv-type T, --mem-limit S, --think for info. Same return values as cli_opts_parse. */
int cli_mem_parse(cli_mem_opts *o, const char *cmd, const char *usage, int argc, char **argv, int *i);
/* Both return false when the estimate was refused (n_ctx beyond the model's training context, unreadable
 * file): the same n_ctx that `run -c` would refuse; the reason is in the output. */
bool cli_mem_print(const char *path, const cli_mem_opts *o);
/* Adds a "memory" object to a cJSON object (passed as void * so this header needs no cJSON). */
bool cli_mem_json(const char *path, const cli_mem_opts *o, void *cjson_object);
/* Prints a cJSON tree (pretty or on one line) + newline to stdout and deletes it. Every string in it that is not
 * valid UTF-8 (generated text cut inside a character, a file name, GGUF metadata) is repaired first (U+FFFD), so the
 * output always parses as JSON. False when out of memory. */
bool cli_json_print(void *cjson_object, bool pretty);

/* Names: "f16" / "q8_0" / "f32". */
const char *cli_kv_name(pb_kv_type t);
/* --kv-type's value of every command: f16, q8_0 (or q8), f32; false after a message naming the flag. */
bool cli_parse_kv(const char *cmd, const char *s, pb_kv_type *out);

#endif
