/* pocketbrain.h -- the one public header of libpocketbrain: opaque handles, status codes, params, callbacks.
 *
 * Data flow, top to bottom (follow one token):
 *   pb_model_open (GGUF -> hparams -> weight views, vocab)
 *   -> pb_session_new (KV cache + scratch sized once)
 *   -> pb_tokenize -> pb_session_prefill
 *   -> loop { pb_session_next -> sampler -> piece -> callback(piece) returns false to stop }
 *
 * Conventions:
 *   - Every function that can fail returns pb_status; PB_OK is 0. The detail is a thread-local text
 *     read with pb_last_error() (valid until the next failing call on the same thread).
 *   - The library never prints and never calls exit(). Logging, if wanted, goes to pb_set_log().
 *   - Destroyers (_close/_free) accept NULL.
 *   - A pb_model is immutable after open and may be shared by any number of sessions and threads.
 *     A pb_session is used by one thread at a time, except pb_session_cancel(), callable from any.
 *   - Tokens are int32_t, byte sizes size_t, element counts int64_t.
 *
 * ABI: PB_ABI_VERSION changes whenever a struct layout or a signature changes. Params structs are
 * obtained from *_default_params() and may gain fields at the end in a new ABI version; fields are
 * never reordered within one ABI version.
 */
#ifndef POCKETBRAIN_H
#define POCKETBRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PB_VERSION_MAJOR 0
#define PB_VERSION_MINOR 1
#define PB_VERSION_PATCH 0
#define PB_VERSION_STRING "0.1.0"
#define PB_ABI_VERSION 1

/* ---- status ---------------------------------------------------------------------------------- */

typedef enum pb_status {
    PB_OK = 0,
    PB_ERR_INVALID_ARG = 1,   /* a caller passed a bad value (NULL, out of range, bad flag)       */
    PB_ERR_IO = 2,            /* open/read/write/rename failed                                     */
    PB_ERR_FORMAT = 3,        /* a file or request is malformed (the message names field/offset)  */
    PB_ERR_UNSUPPORTED = 4,   /* well-formed but not supported (architecture, tensor type)         */
    PB_ERR_NOMEM = 5,         /* allocation failed                                                 */
    PB_ERR_NOT_FOUND = 6,     /* a key, tensor, token or file does not exist                       */
    PB_ERR_CONTEXT_FULL = 7,  /* the session's context window is full (policy: error)             */
    PB_ERR_CANCELLED = 8,     /* pb_session_cancel() or a callback stopped the work                */
    PB_ERR_MISMATCH = 9,      /* checksum / fingerprint / version mismatch                         */
    PB_ERR_MEMORY_LIMIT = 10, /* admission refused: the model + KV would not fit in memory         */
    PB_ERR_INTERNAL = 11,     /* a bug: please report                                              */
} pb_status;

/* Thread-local description of the last failure on this thread ("" if none). Never NULL. */
const char *pb_last_error(void);
/* Short constant name of a status ("PB_ERR_FORMAT"). */
const char *pb_status_name(pb_status s);

/* Runtime version ("0.1.0") and ABI version, to compare with the macros at build time. */
const char *pb_version(void);
int pb_abi_version(void);

/* Optional log sink (level 0 debug .. 3 error). NULL restores the default: no output. */
typedef void (*pb_log_fn)(int level, const char *msg, void *user);
void pb_set_log(pb_log_fn fn, void *user);

/* ---- model ----------------------------------------------------------------------------------- */

typedef struct pb_model pb_model;

typedef struct pb_model_params {
    int n_threads;    /* threads used by sessions of this model by default; 0 = physical cores */
    bool use_mmap;    /* map the file (default true); false reads it into memory                */
    size_t mem_limit; /* bytes the process may use; 0 = detect (MemAvailable, cgroup limits)     */
    bool check_memory; /* refuse to open when weights alone do not fit (default true)            */
} pb_model_params;

pb_model_params pb_model_default_params(void);

/* Opens a GGUF model (architectures gemma, gemma2, gemma3). The file is untrusted: any malformed
 * field gives PB_ERR_FORMAT, an unknown architecture or tensor type PB_ERR_UNSUPPORTED. */
pb_status pb_model_open(const char *path, const pb_model_params *params, pb_model **out);
void pb_model_close(pb_model *m);

typedef struct pb_model_info {
    char arch[32];         /* "gemma2" */
    char name[128];        /* general.name or "" */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int n_ctx_train;       /* context length the model was trained for */
    int sliding_window;    /* 0 when the model has no sliding-window layers */
    int64_t n_params;      /* parameter count */
    size_t weight_bytes;   /* bytes of tensor data */
    char file_type[32];    /* "Q4_K_M", "F16", ... (best effort) */
    uint8_t fingerprint[32]; /* identity of the weights + hparams (used by session files) */
} pb_model_info;

pb_status pb_model_get_info(const pb_model *m, pb_model_info *out);

/* ---- tokenizer ------------------------------------------------------------------------------- */

typedef struct pb_vocab pb_vocab;

/* The model's vocabulary (owned by the model). */
const pb_vocab *pb_model_vocab(const pb_model *m);
/* A vocabulary alone, from a GGUF file's tokenizer.* keys (no weights needed). */
pb_status pb_vocab_open(const char *gguf_path, pb_vocab **out);
void pb_vocab_free(pb_vocab *v);

int32_t pb_vocab_size(const pb_vocab *v);
int32_t pb_vocab_bos(const pb_vocab *v);
int32_t pb_vocab_eos(const pb_vocab *v);
int32_t pb_vocab_eot(const pb_vocab *v); /* <end_of_turn>, or -1 */
/* Id of a token by its exact text, or -1. */
int32_t pb_vocab_find(const pb_vocab *v, const char *text, size_t len);
/* Text of one token as stored in the vocabulary (U+2581 spaces, <0xNN> byte tokens); NUL-terminated. */
const char *pb_vocab_piece(const pb_vocab *v, int32_t id);

typedef enum pb_tokenize_flags {
    PB_TOK_ADD_BOS = 1,      /* prepend BOS if the vocabulary says so (tokenizer.ggml.add_bos_token) */
    PB_TOK_PARSE_SPECIAL = 2 /* recognize control-token text such as <start_of_turn> in the input */
} pb_tokenize_flags;

/* Tokenizes len bytes of text into ids[cap]. *n_out gets the number of tokens; when it exceeds cap,
 * returns PB_ERR_INVALID_ARG and *n_out says how many are needed. Invalid UTF-8 is encoded byte by
 * byte through byte-fallback tokens (never dropped). Thread-safe. */
pb_status pb_tokenize(const pb_vocab *v, const char *text, size_t len, int flags, int32_t *ids,
                      int64_t cap, int64_t *n_out);

/* Detokenizes n ids into buf[cap] (NUL-terminated); *len_out gets the byte length (excluding NUL).
 * When the text does not fit, returns PB_ERR_INVALID_ARG with *len_out = bytes needed.
 * Control tokens (BOS, EOS, turn markers) are rendered only when render_special is true. */
pb_status pb_detokenize(const pb_vocab *v, const int32_t *ids, int64_t n, bool render_special,
                        char *buf, size_t cap, size_t *len_out);

/* Streaming detokenizer: feed ids one by one, get back only whole UTF-8 characters. */
typedef struct pb_detok_stream pb_detok_stream;
pb_status pb_detok_stream_new(const pb_vocab *v, pb_detok_stream **out);
void pb_detok_stream_free(pb_detok_stream *s);
/* Appends the piece of id; writes the bytes that now form complete UTF-8 characters to out, out_len
 * (pointer valid until the next call). */
pb_status pb_detok_stream_push(pb_detok_stream *s, int32_t id, const char **out, size_t *out_len);
/* Flushes what is held back at the end (an incomplete sequence is emitted as U+FFFD per byte). */
pb_status pb_detok_stream_flush(pb_detok_stream *s, const char **out, size_t *out_len);

/* Chat formatting (Gemma turn markers). A system message is folded into the first user turn. */
typedef struct pb_chat_msg {
    const char *role; /* "system", "user", "assistant" ("model" accepted) */
    const char *content;
} pb_chat_msg;

/* Formats messages as the model's prompt text; add_generation_prompt appends the opening of the
 * model's turn. Writes a NUL-terminated string into buf[cap]; *len_out as in pb_detokenize. */
pb_status pb_chat_format(const pb_model *m, const pb_chat_msg *msgs, int n_msgs,
                         bool add_generation_prompt, char *buf, size_t cap, size_t *len_out);

/* ---- sampling -------------------------------------------------------------------------------- */

typedef struct pb_sampler_params {
    float temperature;       /* 0 = greedy */
    int top_k;               /* 0 = off */
    float top_p;             /* 1 = off */
    float min_p;             /* 0 = off */
    float repeat_penalty;    /* 1 = off (multiplicative, llama.cpp style) */
    float presence_penalty;  /* 0 = off (OpenAI style) */
    float frequency_penalty; /* 0 = off */
    int penalty_last_n;      /* window of recent tokens the penalties look at (default 64) */
    uint64_t seed;           /* same seed and settings -> same tokens */
    const int32_t *bias_ids; /* logit bias: ids and values, n_bias entries (borrowed) */
    const float *bias_values;
    int n_bias;
} pb_sampler_params;

typedef enum pb_preset { PB_PRESET_PRECISE, PB_PRESET_BALANCED, PB_PRESET_CREATIVE, PB_PRESET_CODE } pb_preset;

pb_sampler_params pb_sampler_default_params(void); /* = balanced */
pb_sampler_params pb_sampler_preset(pb_preset p);
/* "precise" | "balanced" | "creative" | "code" -> preset; PB_ERR_INVALID_ARG otherwise. */
pb_status pb_preset_from_name(const char *name, pb_preset *out);

/* ---- session --------------------------------------------------------------------------------- */

typedef struct pb_session pb_session;

typedef enum pb_kv_type { PB_KV_F16 = 0, PB_KV_Q8_0 = 1, PB_KV_F32 = 2 } pb_kv_type;
typedef enum pb_ctx_policy { PB_CTX_ERROR = 0, PB_CTX_SHIFT = 1 } pb_ctx_policy;

typedef struct pb_session_params {
    int n_ctx;              /* context length in tokens; 0 = min(model's, 4096) */
    int n_threads;          /* 0 = the model's default */
    int n_batch;            /* prefill chunk size (default 512) */
    pb_kv_type kv_type;     /* default F16 */
    pb_ctx_policy ctx_policy; /* full context: error (default) or shift (keep system, drop oldest turns) */
    bool warmup;            /* run a tiny decode at creation so the first answer is not cold */
} pb_session_params;

pb_session_params pb_session_default_params(void);

pb_status pb_session_new(pb_model *m, const pb_session_params *params, pb_session **out);
void pb_session_free(pb_session *s);

/* Feeds tokens at the end of the session's context (they are not sampled). */
pb_status pb_session_prefill(pb_session *s, const int32_t *ids, int64_t n);
/* Logits of the last position fed (n_vocab floats, owned by the session, valid until the next call). */
const float *pb_session_logits(const pb_session *s);
/* Number of tokens in the context. */
int64_t pb_session_n_past(const pb_session *s);
/* Forgets everything after the first n tokens (0 = reset). */
pb_status pb_session_truncate(pb_session *s, int64_t n);
/* Thread-safe: asks the running prefill/generate to stop soon with PB_ERR_CANCELLED. */
void pb_session_cancel(pb_session *s);

/* Streaming callback: piece is whole UTF-8 characters (len bytes, not NUL-terminated).
 * Return false to stop generation (not an error). */
typedef bool (*pb_piece_fn)(const char *piece, size_t len, void *user);

typedef struct pb_gen_params {
    pb_sampler_params sampler;
    int max_tokens;            /* 0 = until a stop or the context is full */
    const char *const *stop;   /* stop strings (borrowed), n_stop entries; never emitted */
    int n_stop;
    bool stop_at_eos;          /* stop on <eos> / <end_of_turn> (default true) */
} pb_gen_params;

pb_gen_params pb_gen_default_params(void);

typedef struct pb_gen_stats {
    int64_t n_prompt;         /* tokens prefilled by this call */
    int64_t n_generated;      /* tokens sampled */
    double t_prefill_ms, t_generate_ms, t_first_token_ms;
    int stop_reason;          /* 0 eos, 1 max_tokens, 2 stop string, 3 callback, 4 cancelled, 5 context full */
} pb_gen_stats;

/* Prefills prompt (may be empty) then samples until a stop, streaming pieces to cb. */
pb_status pb_session_generate(pb_session *s, const int32_t *prompt, int64_t n_prompt,
                              const pb_gen_params *params, pb_piece_fn cb, void *user,
                              pb_gen_stats *stats);

/* State save/restore: the whole conversation (tokens + KV), bound to the model's fingerprint. */
pb_status pb_session_save(const pb_session *s, const char *path); /* atomic: temp file + rename */
pb_status pb_session_load(pb_session *s, const char *path);
pb_status pb_session_state_size(const pb_session *s, size_t *out);
pb_status pb_session_state_write(const pb_session *s, void *buf, size_t cap, size_t *len_out);
pb_status pb_session_state_read(pb_session *s, const void *buf, size_t len);

/* ---- memory ---------------------------------------------------------------------------------- */

typedef struct pb_mem_estimate {
    size_t weights, kv, scratch, total; /* bytes */
    size_t available;                    /* what admission compares with */
    int max_n_ctx;                       /* largest n_ctx that would fit (0 if none) */
} pb_mem_estimate;

/* Estimates the memory a session with these params would need, without loading weights. */
pb_status pb_estimate_memory(const char *model_path, const pb_session_params *params,
                             size_t mem_limit, pb_mem_estimate *out);

#ifdef __cplusplus
}
#endif
#endif
