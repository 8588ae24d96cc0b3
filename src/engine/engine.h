/* engine.h -- internal API of the engine room: the session struct shared by its files, the stop-string
 * matcher, the thermal governor and the memory formulas. Not for other rooms (they use pocketbrain.h). */
#ifndef PB_ENGINE_H
#define PB_ENGINE_H

#include "base/base.h"
#include "model/model.h"
#include "sampler/sampler.h"

#include <stdatomic.h>

/* ---- stop strings ------------------------------------------------------------------------------ */

#define PB_STOP_MAX_LEN    256  /* bytes of one stop string */
#define PB_STOP_BUF_CAP    4096 /* held-back text buffer (>= 2 * PB_STOP_MAX_LEN) */
#define PB_DEFAULT_N_BATCH 256  /* prefill chunk: forward scratch ~0.16 MB a token on a 2B (gate/up, stash...) */

/* Streams text to cb while holding back any tail that could be the start of a stop string. The
 * buffer is caller-owned (sized once with the session); nothing is allocated. */
typedef struct pb_stopper {
    const char *const *stop;
    int n_stop;
    char *buf;
    size_t cap, n;
    pb_piece_fn cb;
    void *user;
    bool hit_stop;     /* a stop string was found (text from it on is dropped) */
    bool hit_callback; /* cb returned false */
} pb_stopper;

/* Checks stop strings: each non-NULL, 1..PB_STOP_MAX_LEN bytes. PB_ERR_INVALID_ARG otherwise. */
pb_status pb_stopper_check(const char *const *stop, int n_stop);
void pb_stopper_init(pb_stopper *st, char *buf, size_t cap, const char *const *stop, int n_stop, pb_piece_fn cb,
                     void *user);
/* Adds text (whole UTF-8 characters). Returns false once generation must end (hit_stop/hit_callback). */
bool pb_stopper_push(pb_stopper *st, const char *text, size_t len);
/* End of generation without a stop string: releases the held text. Returns false if cb said stop. */
bool pb_stopper_flush(pb_stopper *st);

/* Gemma 4's thought channel in the sampled ids: "<|channel>" {name}"\n" {thought} "<channel|>". Markers carry no
 * text; the name line is dropped; the thought goes to cb (NULL: dropped); text outside the channel is the answer. */
typedef struct pb_channel {
    int32_t open, close; /* ids of <|channel> / <channel|> (-1: the vocabulary has none) */
    int state;           /* 0 answer, 1 the channel's name line, 2 thought */
    pb_piece_fn cb;
    void *user;
} pb_channel;
void pb_channel_init(pb_channel *c, int32_t open, int32_t close, pb_piece_fn cb, void *user);
/* True when id is a channel marker (consumed; the state changes). */
bool pb_channel_marker(pb_channel *c, int32_t id);
/* True while text belongs to the channel (pass it to pb_channel_push, not to the answer). */
static inline bool pb_channel_inside(const pb_channel *c) { return c->state != 0; }
/* Text of a token inside the channel. Returns false when cb asked to stop. */
bool pb_channel_push(pb_channel *c, const char *text, size_t len);

/* ---- thermal governor -------------------------------------------------------------------------- */

#define PB_THERMAL_MAX_ZONES 32

typedef struct pb_thermal {
    bool enabled;
    int n_paths;
    char paths[PB_THERMAL_MAX_ZONES][160];
    float warm_c, hot_c, hyst_c;
    int pause_cfg_ms, interval_ms;
    int n_max;
    double t_last_ms; /* last reading (pb_time_ms), < 0 = never */
    /* read from other threads through pb_session_thermal */
    atomic_int temp_mc, level, n_threads, pause_ms, source;
    atomic_llong n_throttled;
} pb_thermal;

/* Sets up the governor from the session params ("off"/NULL, "auto", or a file path). An explicit path
 * that cannot be read gives PB_ERR_NOT_FOUND; "auto" without zones leaves the governor disabled. */
pb_status pb_thermal_init(pb_thermal *t, const pb_session_params *p, int n_threads_max);
/* Called between tokens (and prefill chunks): re-reads the temperature when interval_ms has passed,
 * moves between levels with hysteresis, caps the pool's threads. Returns the pause (ms) to take now. */
int pb_thermal_tick(pb_thermal *t, pb_pool *pool, bool counting_token);
void pb_thermal_get(const pb_thermal *t, pb_thermal_state *out);

/* ---- memory formulas (memory.c) ---------------------------------------------------------------- */

/* The n_ctx a session gets for a requested one (0 = min(n_ctx_train, 4096)): PB_ERR_INVALID_ARG below 2 or
 * above the model's training context. pb_session_new and the estimates share it, so they agree. */
pb_status pb_engine_resolve_n_ctx(const pb_hparams *hp, int requested, int *n_ctx);
/* Rows a session's ring layers hold beyond their window (pb_kv_new_ring's ring_extra): the params' ring_extra, or
 * more for a session that drops its Gemma 4 thoughts. A session that drops its
 * Gemma 4 thoughts (think set, keep_thoughts not) keeps up to PB_THINK_RING_EXTRA more, so that cutting a turn's
 * thought and answer of up to that many tokens out of a context longer than the window re-reads no context; the
 * extra rows' bytes are kept to at most max(64 MiB, the rings' own bytes) (E2B, f16: 2,048 rows, 24 MiB; a model whose
 * rings are larger than that gets at most as many extra rows as its window). 0 for every other session. */
#define PB_THINK_RING_EXTRA 2048
int pb_engine_ring_extra(const pb_hparams *hp, const pb_session_params *p);
/* Bytes of K+V for n_ctx positions (sliding-window layers hold min(window + ring_extra, n_ctx)). */
size_t pb_engine_kv_estimate(const pb_hparams *hp, int n_ctx, pb_kv_type type, int ring_extra);
/* The same for layer il alone (0 for a Gemma 4 KV-shared layer: it reads layer kv_src[il]'s cache), and the
 * positions (cells) that layer keeps. pb_engine_kv_estimate is their sum over the layers. */
size_t pb_engine_kv_layer_bytes(const pb_hparams *hp, int il, int n_ctx, pb_kv_type type, int ring_extra);
int pb_engine_kv_layer_cells(const pb_hparams *hp, int il, int n_ctx, int ring_extra);
/* Bytes of a session's buffers besides the KV: forward scratch for n_batch tokens, logits, sampler,
 * token history. An upper bound of what pb_session_new allocates. */
size_t pb_engine_scratch_estimate(const pb_hparams *hp, int n_ctx, int n_batch);

/* ---- the session ------------------------------------------------------------------------------- */

typedef struct pb_turn {
    int64_t start;   /* first token of the turn (closing of the previous model turn) */
    int64_t content; /* first token of the user's text */
} pb_turn;

struct pb_session {
    pb_model *model;
    const pb_hparams *hp;
    const pb_vocab *vocab;
    pb_session_params params;
    int32_t n_vocab;
    int n_ctx, n_batch, n_threads;
    int32_t bos, eos, eot, sot;    /* special ids (-1 when absent); sot = <start_of_turn> (Gemma 4: <|turn>) */
    bool turn_system;              /* Gemma 4: the system prompt is a turn of its own */
    int32_t think_id;              /* <|think|> (-1: none); used when params.think */
    int ring_extra;                /* rows the KV rings hold beyond their windows (pb_engine_ring_extra) */
    bool restoring;                /* kv_keep reads kept tokens again: pb_engine_feed ignores cancel */
    int32_t chan_open, chan_close; /* <|channel> / <channel|> (-1: none): the thought channel */

    pb_kv_cache *kv;
    pb_forward_ctx *fc;
    pb_pool *pool;
    pb_sampler *smp;
    pb_detok_stream *detok;

    float *logits; /* [n_vocab] of the last position fed */
    bool has_logits;
    /* decoding with the logits on the GPU: while dev_sample (the started sampler is a plain argmax,
     * pb_sampler_greedy_only, or samples from the best few logits, pb_sampler_top_ok) and the cache can
     * (pb_forward_has_top), a feed leaves the logits on the device (logits_dev: s->logits is stale until pulled) and
     * keeps their argmax in dev_top; a sampled pick then reads the best few logits from the device
     * (pb_forward_logits_top into top_ids / top_vals, the bias and penalty ids' logits into gather_vals) */
    bool dev_sample, logits_dev;
    int32_t dev_top;
    int32_t top_ids[PB_SAMPLER_TOP_MAX], gather[PB_SAMPLER_TOP_MAX];
    float top_vals[PB_SAMPLER_TOP_MAX], gather_vals[PB_SAMPLER_TOP_MAX];
    int32_t *tokens; /* [n_ctx] the context */
    int64_t n_past;
    int32_t pending; /* sampled last, not yet fed; -1 none */

    int64_t n_keep; /* chat head (BOS + first user-turn opening + system): kept by shifts */
    pb_turn *turns; /* [cap_turns] */
    int n_turns, cap_turns;

    int32_t *tmp;   /* [n_ctx] scratch for a turn's ids */
    char *stop_buf; /* [PB_STOP_BUF_CAP] */

    volatile int cancel;
    /* the public call running on this session (pb_engine_enter): PB_SESSION_BUSY while one runs, | PB_SESSION_FREEING
     * once pb_session_free came during it (the call frees the session as it returns); busy_tag is the running
     * thread's pb_thread_tag, busy_fn the call's name (both for the refusal of another call) */
    atomic_uint busy;
    atomic_uintptr_t busy_tag;
    _Atomic(const char *) busy_fn;
    pb_session_totals totals;
    pb_thermal thermal;

    /* continuous batching (batch.c): the batch this session decodes in (params.batch, NULL = alone) and its seat
     * in a step: written by the step's leader, read by this session once bt_done is set (under the batch's lock) */
    pb_batch *batch;
    bool bt_done;
    pb_status bt_status;
    char bt_msg[256]; /* the error text of a failed step, for this session's thread */
};

#define PB_SESSION_BUSY    1u
#define PB_SESSION_FREEING 2u

/* ---- one call at a time ------------------------------------------------------------------------- */

/* The running call is asked to stop: pb_session_cancel, or pb_session_free during it (that flag is never cleared, so
 * a call that clears an old cancel as it starts still stops). Checked between tokens and prompt chunks. */
static inline bool pb_engine_cancelled(const pb_session *s) {
    return __atomic_load_n(&s->cancel, __ATOMIC_ACQUIRE) != 0 ||
           (atomic_load((atomic_uint *)&s->busy) & PB_SESSION_FREEING) != 0;
}

/* Every public call that uses a session's state runs between pb_engine_enter and pb_engine_leave. A call that would
 * change the session (prefill, generate, chat, truncate, reuse_prefix, pop_turn, load, state_read) while another runs
 * on it -- from that call's own piece callback, or from another thread -- is refused: PB_ERR_INVALID_ARG naming both
 * calls, the session unchanged. A call that only reads it (reading: save, state_size, state_write) is let through
 * from the running call's own callback, where the session is between two tokens; from another thread it is refused
 * too. *entered says whether this call marked the session (pass it to pb_engine_leave). */
pb_status pb_engine_enter(pb_session *s, const char *fn, bool reading, bool *entered);
/* Ends the call entered (nothing when !entered) and returns status; a session whose pb_session_free came during the
 * call is freed here (status PB_ERR_CANCELLED then says so). s must not be used after it. */
pb_status pb_engine_leave(pb_session *s, bool entered, pb_status status);

/* ---- continuous batching (batch.c) -------------------------------------------------------------- */

/* Joins / leaves s->batch (at pb_session_new / pb_session_free). Join refuses a batch of another model or a full
 * one (PB_ERR_INVALID_ARG). */
pb_status pb_engine_batch_join(pb_session *s, pb_batch *b);
void pb_engine_batch_leave(pb_session *s);
/* The sampling loop starts / ends: s counts as decoding in between (a step's leader waits for it). */
void pb_engine_batch_begin(pb_session *s);
void pb_engine_batch_end(pb_session *s);
/* Feeds the pending token (room must exist) in a step shared with the other decoding members: the same state
 * afterwards as pb_engine_feed_pending. */
pb_status pb_engine_batch_feed(pb_session *s);

/* PB_ERR_INVALID_ARG "<fn>: token .. at index .. is outside the vocabulary" unless every id is in 0..n_vocab-1. The
 * public calls check their ids with it before anything changes (a shift, the pending token); feed checks again. */
pb_status pb_engine_check_ids(const pb_session *s, const char *fn, const int32_t *ids, int64_t n);
/* A public call's prompt ids[0..n) (pb_session_prefill, pb_session_generate), checked before anything changes, each
 * fault named with the call's argument names: n negative or ids NULL (PB_ERR_INVALID_ARG), n past n_ctx
 * (PB_ERR_CONTEXT_FULL, before ids[] is read: n may be anything), an id outside the vocabulary. */
pb_status pb_engine_check_prompt(const pb_session *s, const char *fn, const char *ids_name, const char *n_name,
                                 const int32_t *ids, int64_t n);
/* Feeds n ids (n_past + n <= n_ctx is the caller's duty) in n_batch chunks. *counter += tokens fed. */
pb_status pb_engine_feed(pb_session *s, const int32_t *ids, int64_t n, int64_t *counter);
/* Feeds the pending token, if any (room must exist). */
pb_status pb_engine_feed_pending(pb_session *s, int64_t *counter);
/* Makes room for need more tokens: nothing (fits), PB_ERR_CONTEXT_FULL (policy error), or a shift that
 * drops whole old turns (never tokens at or after protect). stats may be NULL. need <= n_ctx is the caller's
 * duty (the public calls refuse more first), so the sums here cannot overflow. */
pb_status pb_engine_make_room(pb_session *s, int64_t need, int64_t protect, pb_gen_stats *stats);
/* Forgets turn records that are no longer wholly inside the context. */
void pb_engine_fix_turns(pb_session *s);
/* Appends a turn record (grows the array: once per turn, never per token). */
pb_status pb_engine_add_turn(pb_session *s, int64_t start, int64_t content);
/* Keeps the first n tokens (drops the pending token); re-feeds them when a ring layer cannot keep them. */
pb_status pb_engine_keep(pb_session *s, int64_t n, int64_t *reprefilled);
/* Keeps tokens [0, n - 1) and makes token n - 1 pending again (sampled, not fed): where a chat turn began after
 * feeding the answer before it's last token (pb_session_pop_turn, a turn whose prompt failed), so the next turn closes
 * the model turn once. Re-reads as pb_engine_keep (into totals.n_reprefilled). */
pb_status pb_engine_keep_pending(pb_session *s, int64_t n);
/* *tok = the next token from the last position's logits by the started sampler (where the logits stayed on the GPU:
 * its argmax for a plain argmax, the best few logits read from it for a sampler that needs only those, else the
 * logits pulled first); -1 when every token has probability
 * 0. Fails only when a pull from the GPU fails. */
pb_status pb_engine_sample(pb_session *s, int32_t *tok);
/* Makes sure logits of the last position exist (re-runs the last token after a truncation or load). */
pb_status pb_engine_refresh_logits(pb_session *s);
/* Resets to an empty context (tokens, turns, pending, logits, KV). */
pb_status pb_engine_reset(pb_session *s);

#endif
