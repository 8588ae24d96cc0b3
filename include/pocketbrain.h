/* pocketbrain.h -- the one public header of libpocketbrain: opaque handles, status codes, params, callbacks.
 *
 * Data flow, top to bottom (follow one token):
 *   pb_model_open (GGUF -> hparams -> weight views, vocab)
 *   -> pb_session_new (KV cache + scratch sized once)
 *   -> pb_session_chat (or pb_tokenize -> pb_session_prefill / pb_session_generate)
 *   -> loop { forward -> sampler -> piece -> callback(piece) returns false to stop }
 *
 * Conventions:
 *   - Every function that can fail returns pb_status; PB_OK is 0. The detail is a thread-local text
 *     read with pb_last_error() (valid until the next failing call on the same thread).
 *   - The library never prints and never calls exit(). Logging, if wanted, goes to pb_set_log().
 *   - Destroyers (_close/_free) accept NULL.
 *   - Misuse never crashes, prints or exits: a NULL handle, out pointer, buffer or string, a negative or
 *     out-of-range count, size, id or enum gives PB_ERR_INVALID_ARG (or the fitting code) with a
 *     pb_last_error() naming the function and the argument ("pb_session_prefill: ids is NULL with n 3").
 *     Getters given NULL return 0 (counts, sizes), -1 (token ids), NULL (pointers), false; void calls given
 *     a NULL handle or out pointer do nothing (an out struct with a NULL handle is zeroed). docs/API.md, "Misuse".
 *   - A pb_model is immutable after open and may be shared by any number of sessions and threads.
 *     A pb_session is used by one thread at a time, except pb_session_cancel() and pb_session_thermal(), callable
 *     from any while it works (and pb_session_free, see there). A call on a
 *     session while another runs on it -- from that call's piece callback, or from another thread -- is refused
 *     with PB_ERR_INVALID_ARG naming both calls, the session unchanged (see pb_piece_fn for what a callback may
 *     call). Teardown in the wrong order is survived: see pb_model_close and pb_session_free.
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

#define PB_VERSION_MAJOR  0
#define PB_VERSION_MINOR  1
#define PB_VERSION_PATCH  0
#define PB_VERSION_STRING "0.1.0"
#define PB_ABI_VERSION    5

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

/* Optional log sink (level 0 debug .. 3 error). NULL restores the default: no output. Thread-safe; the sink is
 * called on whichever thread logs (it may call pb_set_log itself). */
typedef void (*pb_log_fn)(int level, const char *msg, void *user);
void pb_set_log(pb_log_fn fn, void *user);

/* ---- model ----------------------------------------------------------------------------------- */

typedef struct pb_model pb_model;

typedef struct pb_model_params {
    int n_threads;     /* threads used by sessions of this model by default; 0 = physical cores */
    bool use_mmap;     /* map the file (default true); false reads it into memory                */
    size_t mem_limit;  /* bytes the process may use; 0 = detect (MemAvailable, cgroup limits)     */
    bool check_memory; /* refuse to open when weights alone do not fit (default true)            */
    bool repack;       /* interleave Q4_0/Q8_0/Q4_K/Q6_K matrix rows at open for the CPU's packed
                          kernels (default true; where they exist: x86 AVX-512 VNNI, AVX2 for Q4_0/Q8_0,
                          ARM64 dotprod). Without pack_cache_dir the repacked pages are this process's
                          own copy, not file cache pages (on iOS: dirty memory, counted against the
                          jetsam limit); with it they are clean pages of the cache file. */
    int gpu;           /* -1 (default): run on the GPU when one is usable, else the CPU; 0: CPU only;
                          1: GPU required (open fails with the reason, e.g. "built without CUDA").
                          On the GPU: weights uploaded once, F16 KV cache in GPU memory (kv_type f16 only). */
    /* Packed-weights cache (docs/ARCHITECTURE.md "Packed-weights cache"): NULL (default) = none. Else a directory
     * (created when missing, 0700) keeping one file per model path, "<model file name without .gguf>-<16 hex>.pbpack"
     * (the name cut at 40 bytes), about the size of the model file: the first open repacks and writes it
     * (atomically: temp file, fsync, rename); later opens map it read-only instead of repacking -- open in a fraction
     * of a second, and the weights are clean file pages the OS can drop under pressure instead of this process's
     * dirty memory. A stale (the model file's size, inode or mtime changed), truncated, foreign or corrupt file
     * (header hash, size, and the first and last 16 rows of every matrix compared with the model) is rebuilt; a
     * directory that cannot be written only costs the repack (pb_model_info.pack_cache_note says why). Used with
     * use_mmap and repack on the CPU only. Read during pb_model_open only: the string may be freed after. Like the
     * model file, the cache file must not be truncated in place while a model using it is open (SIGBUS); replacing
     * it by rename is safe. */
    const char *pack_cache_dir;
    /* With pack_cache_dir: write a new cache file on a thread of its own instead of inside pb_model_open, so the
     * model is usable at once (the first open of a 2B model waited ~7 s here for its 1.6 GB write); the write then
     * shares the CPU and the disk with the first tokens. pb_model_info.pack_cache says PB_PACK_CACHE_WRITING until
     * pb_model_pack_cache_wait (or pb_model_close, which waits for it). Default false. */
    bool pack_cache_background;
} pb_model_params;

pb_model_params pb_model_default_params(void);

/* Opens a GGUF model (architectures gemma, gemma2, gemma3, gemma4). The file is untrusted: any malformed
 * field gives PB_ERR_FORMAT, an unknown architecture or tensor type PB_ERR_UNSUPPORTED.
 * With use_mmap (the default) the file stays mapped while the model is open. Replacing it by rename
 * (how pocketbrain writes files) is safe: the open model keeps the old file. Truncating or rewriting it
 * IN PLACE while open is not: the next read of a dropped page raises SIGBUS and the process ends (never
 * a silently wrong answer; the CLI prints why). use_mmap false reads the whole file at open and is
 * immune. tests/test_model_truncate.c checks all three. params NULL: defaults; n_threads outside 0..256 or gpu
 * other than -1 / 0 / 1: PB_ERR_INVALID_ARG. */
pb_status pb_model_open(const char *path, const pb_model_params *params, pb_model **out);
/* The model must outlive its sessions and batches. Closed before them (a teardown in the wrong order, a piece
 * callback), it is only marked closed, with a warning to pb_set_log's sink: they keep working, the last of them to be
 * freed closes it, and pb_session_new / pb_batch_new on it are refused (PB_ERR_INVALID_ARG, "the model was closed").
 * A second close meanwhile does nothing (a warning). A model already closed for good cannot be detected. */
void pb_model_close(pb_model *m);

typedef struct pb_model_info {
    char arch[32];  /* "gemma2" */
    char name[128]; /* general.name or "" */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int n_ctx_train;         /* context length the model was trained for */
    int sliding_window;      /* 0 when the model has no sliding-window layers */
    int64_t n_params;        /* parameter count */
    size_t weight_bytes;     /* bytes of tensor data */
    char file_type[32];      /* "Q4_K_M", "F16", ... (best effort) */
    uint8_t fingerprint[32]; /* identity of the weights + hparams (used by session files) */
    int n_repacked;          /* weight matrices repacked at open for this CPU's packed kernels */
    bool gpu;                /* the model runs on the GPU */
    char gpu_name[64];       /* its device ("NVIDIA H200") when gpu */
    char gpu_note[192];      /* why gpu = -1 (auto) stayed on the CPU, or "" */
    /* pb_pack_cache_state: what params.pack_cache_dir did at this open, and in words the cache file mapped or
     * written, why an existing one was rebuilt, or why none could be written */
    int pack_cache;
    char pack_cache_note[320];
} pb_model_info;

typedef enum pb_pack_cache_state {
    PB_PACK_CACHE_OFF = 0,     /* no cache: pack_cache_dir NULL, nothing to repack, use_mmap off, or the GPU */
    PB_PACK_CACHE_HIT = 1,     /* the weight copies were mapped from the cache file: nothing repacked */
    PB_PACK_CACHE_WRITTEN = 2, /* repacked, and the cache file written for the next open */
    PB_PACK_CACHE_FAILED = 3,  /* repacked; the cache could not be written (pack_cache_note says why) */
    PB_PACK_CACHE_WRITING = 4  /* repacked; the cache file is being written in the background (pack_cache_background) */
} pb_pack_cache_state;

/* A background write of the packed-weights cache (params.pack_cache_background): busy is true while it runs;
 * wait returns when it has ended and puts its outcome (WRITTEN or FAILED, with the note) into pb_model_info.
 * Both are no-ops for a model without one. Call wait from the thread that owns the model, not while another
 * thread calls pb_model_get_info on it; pb_model_close waits by itself. */
bool pb_model_pack_cache_busy(const pb_model *m);
void pb_model_pack_cache_wait(pb_model *m);

/* The file that pb_model_open would use as the packed-weights cache of the model at model_path under dir
 * (params.pack_cache_dir), so a tool that deletes a model can delete its cache too. Written into buf (cap bytes,
 * NUL-terminated); the file may not exist. PB_ERR_INVALID_ARG for NULL arguments or a buf too small. */
pb_status pb_pack_cache_file(const char *dir, const char *model_path, char *buf, size_t cap);

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
    PB_TOK_ADD_BOS = 1,       /* prepend BOS if the vocabulary says so (tokenizer.ggml.add_bos_token) */
    PB_TOK_PARSE_SPECIAL = 2, /* recognize control-token text such as <start_of_turn> in the input */
    /* text of a chat message: the chat template's markers (<|turn>, <turn|>, <|think|>, <|channel>, <channel|>,
     * <start_of_turn>, <end_of_turn>, <bos>, <eos>) stay plain text even where the vocabulary types them
     * USER_DEFINED (always matched otherwise, as llama.cpp's converter types <|channel> in small vocabularies) */
    PB_TOK_CHAT_TEXT = 4
} pb_tokenize_flags;

/* Tokenizes len bytes of text into ids[cap]. *n_out gets the number of tokens; when it exceeds cap,
 * returns PB_ERR_INVALID_ARG and *n_out says how many are needed. Invalid UTF-8 is encoded byte by
 * byte through byte-fallback tokens (never dropped). flags: pb_tokenize_flags; any other bit is
 * PB_ERR_INVALID_ARG (never ignored). Thread-safe. */
pb_status pb_tokenize(const pb_vocab *v, const char *text, size_t len, int flags, int32_t *ids, int64_t cap,
                      int64_t *n_out);

/* Detokenizes n ids into buf[cap] (NUL-terminated); *len_out gets the byte length (excluding NUL).
 * When the text does not fit, returns PB_ERR_INVALID_ARG with *len_out = bytes needed.
 * Control tokens (BOS, EOS, turn markers) are rendered only when render_special is true. */
pb_status pb_detokenize(const pb_vocab *v, const int32_t *ids, int64_t n, bool render_special, char *buf, size_t cap,
                        size_t *len_out);

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
pb_status pb_chat_format(const pb_model *m, const pb_chat_msg *msgs, int n_msgs, bool add_generation_prompt, char *buf,
                         size_t cap, size_t *len_out);

/* Formats and tokenizes a conversation in one step (BOS first): turn markers become control tokens
 * while message text is tokenized as plain text, so a user who types "<start_of_turn>" cannot inject a
 * turn. Same result as tokenizing pb_chat_format's text with PB_TOK_PARSE_SPECIAL when the messages
 * contain no control-token text. *n_out and cap behave as in pb_tokenize. */
pb_status pb_chat_tokenize(const pb_model *m, const pb_chat_msg *msgs, int n_msgs, bool add_generation_prompt,
                           int32_t *ids, int64_t cap, int64_t *n_out);

/* Options of the _opts variants (the plain functions above are these with think = false). */
typedef struct pb_chat_opts {
    bool add_generation_prompt; /* append the opening of the model's turn */
    /* Gemma 4 thinking: the conversation opens with a system turn that starts with the <|think|> control token
     * ("<|turn>system\n<|think|>{system}<turn|>\n", the system text empty when there is no system message);
     * the model then writes "<|channel>thought\n{reasoning}<channel|>" before its answer (see
     * pb_gen_params.thought_cb). PB_ERR_UNSUPPORTED for a vocabulary without <|think|> (Gemma 1-3). */
    bool think;
} pb_chat_opts;
pb_status pb_chat_format_opts(const pb_model *m, const pb_chat_msg *msgs, int n_msgs, const pb_chat_opts *opts,
                              char *buf, size_t cap, size_t *len_out);
pb_status pb_chat_tokenize_opts(const pb_model *m, const pb_chat_msg *msgs, int n_msgs, const pb_chat_opts *opts,
                                int32_t *ids, int64_t cap, int64_t *n_out);

/* ---- sampling -------------------------------------------------------------------------------- */

/* The sampler chain, applied in this order to the logits of the last position:
 *   logit bias -> repetition / presence / frequency penalties (over the last penalty_last_n tokens of
 *   the context) -> temperature 0: argmax (lowest id on ties), done -> top-k -> temperature ->
 *   softmax -> min-p (drop p < min_p * p_max) -> top-p (smallest set of most likely tokens whose mass
 *   reaches top_p) -> one draw from the seeded PRNG (xoshiro256**).
 * The PRNG is seeded from seed at the start of every pb_session_generate / pb_session_chat call, so
 * the same context, prompt and params always give the same tokens (also after save/load). */
#define PB_SEED_RANDOM UINT64_MAX /* seed: pick one from the clock at each call */

typedef struct pb_sampler_params {
    float temperature;       /* 0 = greedy */
    int top_k;               /* 0 = off */
    float top_p;             /* 1 = off */
    float min_p;             /* 0 = off */
    float repeat_penalty;    /* 1 = off (multiplicative, llama.cpp style: logit > 0 ? l/p : l*p) */
    float presence_penalty;  /* 0 = off (OpenAI style: l -= presence if the token occurred) */
    float frequency_penalty; /* 0 = off (l -= frequency * occurrences) */
    int penalty_last_n;      /* window of recent context tokens the penalties look at (default 64) */
    uint64_t seed;           /* same seed and settings -> same tokens; PB_SEED_RANDOM = from the clock */
    const int32_t *bias_ids; /* logit bias: ids and values added to the logits, n_bias entries (borrowed;
                                -INFINITY bans a token). Ids outside the vocabulary are an error. */
    const float *bias_values;
    int n_bias;
} pb_sampler_params;

/* Presets are starting points, not tuned truths; every field can be overridden afterwards.
 *   precise  T 0.35 top-p 0.80     balanced T 0.60 top-p 0.90 (the default)
 *   creative T 0.90 top-p 0.95     code     T 0.20 top-p 0.60
 * All presets: top-k 40, min-p 0.05, repeat_penalty 1.0 (off), penalty_last_n 64, seed 42. */
typedef enum pb_preset { PB_PRESET_PRECISE, PB_PRESET_BALANCED, PB_PRESET_CREATIVE, PB_PRESET_CODE } pb_preset;

pb_sampler_params pb_sampler_default_params(void); /* = balanced */
pb_sampler_params pb_sampler_preset(pb_preset p);  /* an unknown value gives balanced */
/* "precise" | "balanced" | "creative" | "code" -> preset; PB_ERR_INVALID_ARG otherwise. */
pb_status pb_preset_from_name(const char *name, pb_preset *out);
/* The name of a preset ("balanced"); "?" for an unknown value. */
const char *pb_preset_name(pb_preset p);
/* Checks every field (ranges, bias ids against n_vocab when n_vocab > 0); PB_ERR_INVALID_ARG naming
 * the field otherwise. Called by generate; exposed so front ends can reject a request early. */
pb_status pb_sampler_params_check(const pb_sampler_params *p, int32_t n_vocab);

/* ---- session --------------------------------------------------------------------------------- */

typedef struct pb_session pb_session;

/* Continuous batching: sessions of one model that generate at the same time (one thread each, as a server's
 * slots) feed their next tokens in ONE forward step, so the weights are read once for all of them (decode is
 * memory-bound: the aggregate tok/s grows with the batch; Gemma 1-4 on the CPU, Gemma 1-3 on the GPU). A session joins
 * a batch at creation (pb_session_params.batch) and leaves it when freed. Only decoding is batched: prompts are
 * prefilled by each session alone. How a step forms: a session counts as decoding from the start of its generate/chat
 * call's sampling loop to its end. When it has its next token, it submits it and waits. The first to submit leads: it
 * runs the step on its own threads as soon as every decoding member has submitted, or after a short wait (a quarter of
 * the recent step time, 0.25..2 ms) so that a member that is slow between tokens (its piece callback waits for a slow
 * client, a thermal pause) never holds up the others; the late one joins the next step. One step runs at a time.
 * Results: a batched session's tokens and text are exactly those of the same session run alone (each row of the
 * step has the bits of a one-token forward of that session; seeded sampling stays seeded). A session cancelled
 * before its step starts leaves it with its token not fed (as a cancelled decode alone); a step that has started
 * runs to its end. A failed step gives every member of it the error (its own status and pb_last_error text).
 * Thread-safety: the batch is shared by its sessions' threads; each session is still used by one thread at a
 * time. The batch must outlive its sessions. */
typedef struct pb_batch pb_batch;

#define PB_BATCH_MAX_SESSIONS 64 /* the most sessions one batch takes */

/* A batch for up to max_sessions (1..PB_BATCH_MAX_SESSIONS) sessions of model m, which must outlive it. Every
 * buffer of a step (forward scratch for max_sessions tokens, their logits) is allocated here, never per token.
 * Errors: PB_ERR_INVALID_ARG (NULL, max_sessions out of range), PB_ERR_NOMEM. */
pb_status pb_batch_new(pb_model *m, int max_sessions, pb_batch **out);
/* Frees a batch no session uses any more. Freeing one that sessions still use is a bug, but survived: the batch
 * stays theirs (they keep decoding) and the last of them to be freed frees it; a warning goes to pb_set_log. */
void pb_batch_free(pb_batch *b);

typedef struct pb_batch_stats {
    int max_sessions;     /* as created */
    int n_sessions;       /* sessions using the batch now */
    int n_decoding;       /* of them, in their sampling loop now */
    int64_t n_steps;      /* decode steps run */
    int64_t n_tokens;     /* tokens those steps fed: n_tokens / n_steps is the mean batch size */
    int max_size;         /* the largest step */
    int64_t size_hist[7]; /* steps of 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64 sessions */
    double wait_ms;       /* time leaders waited for the other members (the rendezvous' cost) */
    double step_ms;       /* time spent in the steps */
} pb_batch_stats;
/* A consistent snapshot of the counters (since pb_batch_new). Thread-safe. */
void pb_batch_get_stats(const pb_batch *b, pb_batch_stats *out);

typedef enum pb_kv_type { PB_KV_F16 = 0, PB_KV_Q8_0 = 1, PB_KV_F32 = 2 } pb_kv_type;
/* What happens when the context window is full:
 *   PB_CTX_ERROR (default): the call fails with PB_ERR_CONTEXT_FULL; nothing is dropped.
 *   PB_CTX_SHIFT: the oldest whole turns are dropped while the system prompt (the head of the first
 *   chat turn) is kept, then the kept tokens are re-prefilled at their new positions. Outside chat
 *   turns (plain prefill / generate) the oldest half of the tokens after BOS is dropped, never a token
 *   the running generate call sampled. When even that cannot make room (one turn longer than the
 *   window; a plain generate whose own output fills it) the call fails with PB_ERR_CONTEXT_FULL.
 * Text is never truncated silently: each shift is counted in pb_gen_stats.n_shifts. */
typedef enum pb_ctx_policy { PB_CTX_ERROR = 0, PB_CTX_SHIFT = 1 } pb_ctx_policy;

typedef struct pb_session_params {
    int n_ctx;                /* context length in tokens; 0 = min(model's, 4096); above the model's training
                                 context (pb_model_info.n_ctx_train): PB_ERR_INVALID_ARG */
    int n_threads;            /* 0 = the model's default */
    int n_batch;              /* prefill chunk size (default 256: scratch ~0.2 MB a token on a 2B) */
    pb_kv_type kv_type;       /* default F16 */
    pb_ctx_policy ctx_policy; /* full context: error (default) or shift (keep system, drop oldest turns) */
    bool warmup;              /* run a one-token decode at creation so the first answer is not cold */
    /* Thermal governor (see pb_thermal_state): NULL or "off" = off (default); "auto" = the hottest
     * /sys/class/thermal/thermal_zone<N>/temp; anything else = path of a file holding millidegrees C. */
    const char *thermal;
    float thermal_warm_c;       /* at or above: half the threads (default 75) */
    float thermal_hot_c;        /* at or above: one thread and a pause between tokens (default 85) */
    float thermal_hysteresis_c; /* a level is left only below its threshold minus this (default 5) */
    int thermal_pause_ms;       /* pause between tokens when hot (default 100) */
    int thermal_interval_ms;    /* re-read the temperature at most this often (default 1000; 0 = every token) */
    /* Gemma 4 thinking: pb_session_chat opens the conversation with "<|turn>system\n<|think|>{system}<turn|>\n"
     * (as pb_chat_opts.think). pb_session_new refuses it (PB_ERR_UNSUPPORTED) without <|think|> in the vocabulary. */
    bool think;
    /* Continuous batching (see pb_batch): NULL (default) = this session decodes alone; else a batch of the same
     * model that this session joins (pb_session_new refuses a batch of another model, or a full one, with
     * PB_ERR_INVALID_ARG naming why). Borrowed: the batch must outlive the session. */
    pb_batch *batch;
    /* Gemma 4 thinking (ABI 4): a chat turn's thought (the "<|channel>thought\n...<channel|>" the model wrote before
     * its answer) leaves the context when the next pb_session_chat turn starts, as Google's Gemma 4 guide asks of a
     * conversation's history (the answer stays; the context then holds the ids the chat template writes for the same
     * messages). Dropping it re-reads the answer after it. Such a session's sliding-window layers keep up to 2,048
     * rows beyond the window (counted by pb_estimate_memory / pb_session_admit), so that this needs no re-read of the
     * context; a longer thought and answer, once the conversation has passed the window, re-read the whole context.
     * true keeps thoughts in the context (default false). */
    bool keep_thoughts;
    /* ABI 5: rows the KV cache's sliding-window layers keep beyond their window (0 = automatic: none, or for a
     * session that drops its Gemma 4 thoughts up to 2,048 within max(64 MiB, the rings' bytes)). Going back by up to
     * that many positions -- a thought cut out, a regenerated or edited answer, a server's prefix reuse when the
     * history differs in its last answer -- then reads nothing again; further back, once the conversation passed
     * the window, the whole context is read again. The attention still sees the window alone. Counted by
     * pb_estimate_memory / pb_session_admit; at most n_ctx in all. PB_ERR_INVALID_ARG when negative or above 2^24. */
    int ring_extra;
} pb_session_params;

pb_session_params pb_session_default_params(void);

/* Creates a session: KV cache, forward scratch, sampler scratch, token history and thread pool, all
 * sized once from params and the model (nothing is allocated per token afterwards). The model must
 * outlive the session. Errors: PB_ERR_INVALID_ARG (a field out of range, named), PB_ERR_NOMEM,
 * PB_ERR_NOT_FOUND (a thermal file that cannot be read). */
pb_status pb_session_new(pb_model *m, const pb_session_params *params, pb_session **out);
/* Freeing a session while a call runs on it (from that call's piece callback, or another thread) stops the call
 * soon (it returns PB_ERR_CANCELLED, "stopped by pb_session_free") and frees the session as the call returns; other
 * calls on it meanwhile are refused ("being freed"), a second free does nothing (a warning to pb_set_log's sink).
 * Releases the session's hold on its model (see pb_model_close). A session already freed cannot be detected. */
void pb_session_free(pb_session *s);

/* Feeds tokens at the end of the session's context (they are not sampled). All or nothing with
 * PB_CTX_ERROR: PB_ERR_CONTEXT_FULL when they do not fit, before anything is fed. An id outside the
 * vocabulary: PB_ERR_INVALID_ARG before anything changes (no shift, the pending token not fed). On PB_ERR_CANCELLED
 * the tokens of the chunks already processed stay in the context (pb_session_n_past tells). */
pb_status pb_session_prefill(pb_session *s, const int32_t *ids, int64_t n);
/* Logits of the last position fed (n_vocab floats, owned by the session, valid until the next call). */
const float *pb_session_logits(const pb_session *s);
/* Number of tokens in the context (fed to the model). A token sampled last but not yet fed (the one
 * that ended a generation) is fed at the start of the next prefill/generate/chat call. */
int64_t pb_session_n_past(const pb_session *s);
/* The context length this session was created with. */
int64_t pb_session_n_ctx(const pb_session *s);
/* The tokens now in the context (pb_session_n_past of them, owned by the session, valid until the next
 * call that changes the session). Used for prefix reuse: compare with a new prompt, pb_session_truncate
 * to the common prefix, then feed only the rest (pb_session_reuse_prefix does both). */
const int32_t *pb_session_tokens(const pb_session *s, int64_t *n);
/* Forgets everything after the first n tokens (0 = reset; chat turns after n are forgotten too).
 * When a sliding-window layer no longer holds what the kept prefix needs, the kept tokens are
 * re-prefilled (so this may take time, and may return PB_ERR_CANCELLED). */
pb_status pb_session_truncate(pb_session *s, int64_t n);
/* Keeps the longest common prefix of the context and ids[0..n) and drops the rest of the context;
 * *n_kept = how many leading ids are already in the context (feed ids + *n_kept next). n < 0:
 * PB_ERR_INVALID_ARG, the context kept. */
pb_status pb_session_reuse_prefix(pb_session *s, const int32_t *ids, int64_t n, int64_t *n_kept);
/* Thread-safe and async-signal-safe: asks the running prefill/generate/chat to stop soon with
 * PB_ERR_CANCELLED. Each call that starts work clears a cancel left from before. */
void pb_session_cancel(pb_session *s);

/* Streaming callback: piece is whole UTF-8 characters (len bytes, not NUL-terminated).
 * Return false to stop generation (not an error). It runs on the calling thread between two tokens; on the same
 * session it may call pb_session_cancel, pb_session_free (see there), pb_session_save / state_size / state_write
 * (the state then holds the tokens so far) and the getters; the calls that change the session (prefill, generate,
 * chat, truncate, reuse_prefix, pop_turn, load, state_read) are refused with PB_ERR_INVALID_ARG ("the session is
 * busy"), the generation going on undisturbed. Any call on other sessions and models is fine. */
typedef bool (*pb_piece_fn)(const char *piece, size_t len, void *user);

typedef struct pb_gen_params {
    pb_sampler_params sampler;
    int max_tokens;          /* 0 = until a stop or the context is full */
    const char *const *stop; /* stop strings (borrowed), n_stop entries (each 1..256 bytes); never
                                emitted, found across token boundaries; text that only looked
                                like the start of a stop string is released once it is not */
    int n_stop;
    const int32_t *stop_tokens; /* extra token ids that end generation (borrowed), not emitted */
    int n_stop_tokens;
    bool stop_at_eos; /* stop on <eos> / <end_of_turn> (default true) */
    /* Gemma 4's thought channel ("<|channel>thought\n...<channel|>", written when thinking is on): its text goes
     * to thought_cb (NULL: dropped), never to the piece callback, and stop strings do not look at it. Returning
     * false stops generation as the piece callback does. */
    pb_piece_fn thought_cb;
    void *thought_user;
} pb_gen_params;

pb_gen_params pb_gen_default_params(void); /* balanced sampler, no limit, no stop strings */
/* Checks every field as generation will (sampler ranges, stop strings 1..256 bytes, stop tokens and bias ids
 * against n_vocab when n_vocab > 0); PB_ERR_INVALID_ARG naming the field. For servers validating requests. */
pb_status pb_gen_params_check(const pb_gen_params *p, int32_t n_vocab);

typedef enum pb_stop_reason {
    PB_STOP_EOS = 0,          /* <eos>, <end_of_turn> or a stop token */
    PB_STOP_MAX_TOKENS = 1,   /* max_tokens sampled */
    PB_STOP_STRING = 2,       /* a stop string appeared */
    PB_STOP_CALLBACK = 3,     /* the piece callback returned false */
    PB_STOP_CANCELLED = 4,    /* pb_session_cancel (the call returns PB_ERR_CANCELLED) */
    PB_STOP_CONTEXT_FULL = 5, /* no room left (the call returns PB_ERR_CONTEXT_FULL) */
    PB_STOP_ERROR = 6         /* any other failure (the status says which) */
} pb_stop_reason;
/* "eos", "max_tokens", "stop", "callback", "cancelled", "context_full", "error". */
const char *pb_stop_reason_name(int reason);

typedef struct pb_gen_stats {
    int64_t n_prompt;    /* new prompt tokens prefilled by this call (never the reused history) */
    int64_t n_generated; /* tokens sampled */
    double t_prefill_ms, t_generate_ms, t_first_token_ms; /* first token: from the call's start */
    int stop_reason;                                      /* pb_stop_reason */
    int n_shifts;                                         /* context shifts done by this call (PB_CTX_SHIFT) */
    int64_t n_reprefilled;                                /* kept tokens fed again after shifts */
} pb_gen_stats;

/* Prefills prompt (may be empty) then samples until a stop, streaming pieces to cb (may be NULL).
 * stats (may be NULL) is filled also when the call fails. Returns PB_OK for every normal stop
 * (eos, max_tokens, stop string, callback), PB_ERR_CANCELLED, PB_ERR_CONTEXT_FULL (policy error, or
 * shift could not make room), PB_ERR_INVALID_ARG for bad params. The text streamed so far stays in
 * the context in every case. */
pb_status pb_session_generate(pb_session *s, const int32_t *prompt, int64_t n_prompt, const pb_gen_params *params,
                              pb_piece_fn cb, void *user, pb_gen_stats *stats);

/* One chat turn with the model's turn markers: closes the previous model turn, adds
 * "<start_of_turn>user\n{user_text}<end_of_turn>\n<start_of_turn>model\n" and generates the answer.
 * Only this turn is prefilled: the history already in the KV cache is reused (stats->n_prompt counts
 * the new tokens only). system (may be NULL) is used when the session is empty: it is folded into the
 * first user turn as Gemma expects ("{system}\n\n{user_text}") and is what PB_CTX_SHIFT keeps.
 * Marker text typed by the user is tokenized as plain text (no turn injection). Errors as in
 * pb_session_generate; when the turn's prompt cannot be fed, the context is left as before the call. */
pb_status pb_session_chat(pb_session *s, const char *system, const char *user_text, const pb_gen_params *params,
                          pb_piece_fn cb, void *user, pb_gen_stats *stats);
/* Number of chat turns in the context (0 for an empty session or a plain-generate one). */
int pb_session_n_turns(const pb_session *s);
/* Takes the last chat turn (the user's text and the answer to it) out of the context, which then ends as it did
 * after the answer before it (after the first turn: empty, or the tokens fed before it by pb_session_prefill /
 * pb_session_generate or a load): a chat's "undo", and with pb_session_chat of the same text its "retry". Going
 * back past what the sliding-window layers still hold reads the rest of the context again
 * (pb_session_totals.n_reprefilled; pb_session_params.ring_extra rows make a turn shorter than them free).
 * PB_ERR_INVALID_ARG when the context holds no chat turn (the session unchanged). */
pb_status pb_session_pop_turn(pb_session *s);

/* Totals over the session's life (reset by pb_session_truncate(s, 0) or a load). */
typedef struct pb_session_totals {
    int64_t n_prefilled;   /* tokens fed as prompts (new turns, prefill calls) */
    int64_t n_reprefilled; /* tokens fed again after context shifts or truncation of ring layers */
    int64_t n_generated;   /* tokens sampled */
    int64_t n_shifts;      /* context shifts */
    int n_calls;           /* generate/chat calls */
} pb_session_totals;
void pb_session_get_totals(const pb_session *s, pb_session_totals *out); /* s NULL: zeros; out NULL: nothing */

/* State save/restore: the conversation (tokens, chat turns, the pending token) and the KV cache,
 * bound to the model's fingerprint. File layout: a versioned header (magic "PBSESSN1", version,
 * fingerprint, n_ctx, KV type, counts, payload size, 64-bit checksum of the payload), then the payload.
 * pb_session_save writes atomically (temp file + rename): a failed save never touches an existing file.
 * pb_session_load and pb_session_state_read check everything before changing the session:
 * PB_ERR_FORMAT for a damaged/truncated file or checksum error, PB_ERR_MISMATCH for another model,
 * another KV type, or more tokens than this session's n_ctx; the session is unchanged on error. */
pb_status pb_session_save(const pb_session *s, const char *path);
pb_status pb_session_load(pb_session *s, const char *path);
pb_status pb_session_state_size(const pb_session *s, size_t *out); /* exact bytes state_write needs */
pb_status pb_session_state_write(const pb_session *s, void *buf, size_t cap, size_t *len_out);
pb_status pb_session_state_read(pb_session *s, const void *buf, size_t len);

/* ---- thermal governor ------------------------------------------------------------------------ */

/* Between tokens the governor reads the temperature (at most every thermal_interval_ms):
 *   level 0 (cool): all threads, no pause;  level 1 (warm, >= thermal_warm_c): half the threads;
 *   level 2 (hot, >= thermal_hot_c): one thread and thermal_pause_ms between tokens.
 * A level is left when the temperature falls below its threshold minus thermal_hysteresis_c. */
typedef struct pb_thermal_state {
    bool enabled;
    float temp_c;        /* last reading in degrees C (0 before the first) */
    int level;           /* 0 cool, 1 warm, 2 hot */
    int n_threads;       /* threads used now */
    int n_threads_max;   /* threads the session was created with */
    int pause_ms;        /* pause inserted between tokens now */
    int64_t n_throttled; /* tokens generated while level > 0 */
    char source[256];    /* the file read ("auto": the hottest zone at the last reading) */
} pb_thermal_state;

/* Safe to call from any thread while the session generates (fields are read atomically one by one).
 * s NULL: zeros; out NULL: nothing. */
void pb_session_thermal(const pb_session *s, pb_thermal_state *out);

/* ---- memory ---------------------------------------------------------------------------------- */

typedef struct pb_mem_estimate {
    size_t weights, kv, scratch, total; /* bytes (total = weights + kv + scratch) */
    size_t available;                   /* what admission compares with (mem_limit or detected) */
    int max_n_ctx;                      /* largest n_ctx that would fit with this KV type (0 if none) */
    int n_ctx;                          /* the n_ctx estimated (0 in params resolved) */
    pb_kv_type kv_type;                 /* the KV type estimated */
    bool adjusted;                      /* pb_session_admit with fit changed n_ctx or kv_type */
} pb_mem_estimate;

/* Estimates the memory a session with these params would need, reading only the GGUF header (no
 * weights are touched): weights = tensor bytes; kv = K and V for n_ctx positions (sliding-window
 * layers: the window only) in the KV type; scratch = forward buffers for n_batch tokens, logits and
 * the sampler. available = mem_limit when > 0, else what the system says is available (MemAvailable
 * and cgroup v1/v2 limits; 0 where there is no /proc/meminfo, as on iOS: pass mem_limit there).
 * params may be NULL (defaults); a negative n_ctx / n_batch, an n_ctx above the model's training
 * context or an unknown kv_type is PB_ERR_INVALID_ARG, as pb_session_new refuses it. */
pb_status pb_estimate_memory(const char *model_path, const pb_session_params *params, size_t mem_limit,
                             pb_mem_estimate *out);

/* Admission: estimates as above and returns PB_ERR_MEMORY_LIMIT when total > available, with a message
 * giving the numbers (MiB) and the largest n_ctx that would fit. With fit = true it instead adapts
 * params: first a Q8_0 KV cache (when F16/F32 was asked), then the largest fitting n_ctx (a multiple
 * of 256 when >= 256), sets out->adjusted and still fails when not even n_ctx 256 (or the weights)
 * fit. With available 0 (mem_limit 0 and nothing detected) nothing is compared: PB_OK, params
 * unchanged. out may be NULL. */
pb_status pb_session_admit(const char *model_path, pb_session_params *params, size_t mem_limit, bool fit,
                           pb_mem_estimate *out);

#ifdef __cplusplus
}
#endif
#endif
