/* generate.c -- the generation loop (sample -> piece -> stop rules -> callback; a batch member feeds its tokens
 * through the batch), plain generate and chat turns with Gemma's turn markers. Nothing is allocated per token. */
#include "engine/engine.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

pb_gen_params pb_gen_default_params(void) {
    pb_gen_params p;
    memset(&p, 0, sizeof p);
    p.sampler = pb_sampler_default_params();
    p.max_tokens = 0;
    p.stop_at_eos = true;
    return p;
}

const char *pb_stop_reason_name(int reason) {
    static const char *const names[] = {"eos", "max_tokens", "stop", "callback", "cancelled", "context_full", "error"};
    return reason >= 0 && reason <= PB_STOP_ERROR ? names[reason] : "?";
}

pb_status pb_gen_params_check(const pb_gen_params *gp, int32_t n_vocab) {
    if (!gp) return pb_error(PB_ERR_INVALID_ARG, "pb_gen_params_check: params is NULL");
    if (gp->max_tokens < 0) return pb_error(PB_ERR_INVALID_ARG, "generate: max_tokens %d is negative", gp->max_tokens);
    if (gp->n_stop_tokens < 0 || (gp->n_stop_tokens > 0 && !gp->stop_tokens))
        return pb_error(PB_ERR_INVALID_ARG, "generate: n_stop_tokens %d without stop_tokens", gp->n_stop_tokens);
    for (int i = 0; i < gp->n_stop_tokens; i++)
        if (gp->stop_tokens[i] < 0 || (n_vocab > 0 && gp->stop_tokens[i] >= n_vocab))
            return pb_error(PB_ERR_INVALID_ARG, "generate: stop token %d is outside the vocabulary",
                            (int)gp->stop_tokens[i]);
    pb_status st = pb_stopper_check(gp->stop, gp->n_stop);
    if (st != PB_OK) return st;
    return pb_sampler_params_check(&gp->sampler, n_vocab);
}

static pb_status check_gen(const pb_session *s, const pb_gen_params *gp) { return pb_gen_params_check(gp, s->n_vocab); }

static bool is_end(const pb_session *s, const pb_gen_params *gp, int32_t t) {
    if (gp->stop_at_eos && t >= 0 && (t == s->eos || t == s->eot)) return true;
    for (int i = 0; i < gp->n_stop_tokens; i++)
        if (gp->stop_tokens[i] == t) return true;
    return false;
}

static bool cancelled(pb_session *s) { return pb_engine_cancelled(s); }

/* Sleeps ms milliseconds in short slices so a cancel is not kept waiting. */
static void pause_ms(pb_session *s, int ms) {
    while (ms > 0 && !cancelled(s)) {
        int step = ms < 20 ? ms : 20;
        struct timespec ts = {0, (long)step * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !cancelled(s)) {
        }
        ms -= step;
    }
}

static void set_reason(pb_gen_stats *st, pb_status status) {
    st->stop_reason = status == PB_ERR_CANCELLED      ? PB_STOP_CANCELLED
                      : status == PB_ERR_CONTEXT_FULL ? PB_STOP_CONTEXT_FULL
                                                      : PB_STOP_ERROR;
}

/* Samples until a stop. protect: tokens from there on are never dropped by a context shift. */
static pb_status decode_loop(pb_session *s, const pb_gen_params *gp, pb_piece_fn cb, void *user, pb_gen_stats *st,
                             int64_t protect, double t0) {
    double t_start = pb_time_ms();
    pb_stopper stopper;
    pb_stopper_init(&stopper, s->stop_buf, PB_STOP_BUF_CAP, gp->stop, gp->n_stop, cb, user);
    pb_channel chan;
    pb_channel_init(&chan, s->chan_open, s->chan_close, gp->thought_cb, gp->thought_user);
    pb_status status = PB_OK;
    bool ended = false; /* a stop that makes held text obsolete (stop string, callback) */
    st->stop_reason = PB_STOP_EOS;
    if (s->batch) pb_engine_batch_begin(s); /* decoding: a step of the batch waits for this session's token */
    for (;;) {
        if (cancelled(s)) {
            status = pb_error(PB_ERR_CANCELLED, "generate: cancelled after %lld tokens", (long long)st->n_generated);
            break;
        }
        if (gp->max_tokens > 0 && st->n_generated >= gp->max_tokens) {
            st->stop_reason = PB_STOP_MAX_TOKENS;
            break;
        }
        if (s->pending >= 0) {
            int64_t before = s->n_past;
            status = pb_engine_make_room(s, 0, protect, st);
            /* a shift moved the kept tokens down: so did the first one this call sampled (plain generate; a chat
             * turn's start is taken from its record below). A stale protect let the next shift drop them. */
            if (s->n_turns == 0 && s->n_past < before) protect -= before - s->n_past;
            if (status == PB_OK) status = s->batch ? pb_engine_batch_feed(s) : pb_engine_feed_pending(s, NULL);
            if (status != PB_OK) break;
            if (s->n_turns > 0 && protect > s->turns[s->n_turns - 1].content)
                protect = s->turns[s->n_turns - 1].content; /* moved down by a shift */
        }
        int pause = pb_thermal_tick(&s->thermal, s->pool, true);
        if (pause > 0) pause_ms(s, pause);
        int32_t tok;
        if ((status = pb_engine_sample(s, &tok)) != PB_OK) break;
        if (tok < 0) {
            status = pb_error(PB_ERR_INVALID_ARG, "generate: every token has probability 0 (all banned by the bias?)");
            break;
        }
        if (st->n_generated++ == 0) st->t_first_token_ms = pb_time_ms() - t0;
        s->totals.n_generated++;
        s->pending = tok;
        if (is_end(s, gp, tok)) {
            st->stop_reason = PB_STOP_EOS;
            break;
        }
        if (pb_channel_marker(&chan, tok)) continue; /* <|channel> / <channel|>: no text either way */
        const char *piece;
        size_t len;
        status = pb_detok_stream_push(s->detok, tok, &piece, &len);
        if (status != PB_OK) break;
        if (pb_channel_inside(&chan)) { /* the thought: never the answer, never a stop string */
            if (!pb_channel_push(&chan, piece, len)) {
                st->stop_reason = PB_STOP_CALLBACK;
                ended = true;
                break;
            }
            continue;
        }
        if (!pb_stopper_push(&stopper, piece, len)) {
            st->stop_reason = stopper.hit_stop ? PB_STOP_STRING : PB_STOP_CALLBACK;
            ended = true;
            break;
        }
    }
    if (s->batch) pb_engine_batch_end(s);
    const char *rest = "";
    size_t rest_len = 0;
    bool flushed = pb_detok_stream_flush(s->detok, &rest, &rest_len) == PB_OK;
    if (flushed && !ended && pb_channel_inside(&chan)) {
        pb_channel_push(&chan, rest, rest_len); /* ended inside the channel (a limit): the tail is thought */
        rest_len = 0;
    }
    if (flushed && !ended) {
        if (!pb_stopper_push(&stopper, rest, rest_len)) ended = true;
        if (stopper.hit_stop && status == PB_OK) st->stop_reason = PB_STOP_STRING;
    }
    if (!ended && !pb_stopper_flush(&stopper) && status == PB_OK) st->stop_reason = PB_STOP_CALLBACK;
    if (status != PB_OK) set_reason(st, status);
    st->t_generate_ms = pb_time_ms() - t_start;
    return status;
}

static void begin(pb_session *s, pb_gen_stats *st) {
    memset(st, 0, sizeof *st);
    __atomic_store_n(&s->cancel, 0, __ATOMIC_RELEASE);
    s->totals.n_calls++;
}

static pb_status generate(pb_session *s, const int32_t *prompt, int64_t n_prompt, const pb_gen_params *params,
                          pb_piece_fn cb, void *user, pb_gen_stats *st) {
    pb_status status = pb_engine_check_prompt(s, "pb_session_generate", "prompt", "n_prompt", prompt, n_prompt);
    if (status != PB_OK) return status;
    if (!params) return pb_error(PB_ERR_INVALID_ARG, "pb_session_generate: params is NULL");
    if ((status = check_gen(s, params)) != PB_OK) return status;
    double t0 = pb_time_ms();
    begin(s, st);
    status = pb_sampler_start(s->smp, &params->sampler);
    s->dev_sample = status == PB_OK && (pb_sampler_greedy_only(s->smp) || pb_sampler_top_ok(s->smp));
    if (status == PB_OK) status = pb_engine_make_room(s, n_prompt, s->n_past, st);
    if (status == PB_OK) status = pb_engine_feed_pending(s, NULL);
    if (status == PB_OK) status = pb_engine_feed(s, prompt, n_prompt, &st->n_prompt);
    s->totals.n_prefilled += st->n_prompt;
    if (status == PB_OK) status = pb_engine_refresh_logits(s);
    st->t_prefill_ms = pb_time_ms() - t0;
    if (status != PB_OK) {
        set_reason(st, status);
        return status;
    }
    return decode_loop(s, params, cb, user, st, s->n_past, t0);
}

pb_status pb_session_generate(pb_session *s, const int32_t *prompt, int64_t n_prompt, const pb_gen_params *params,
                              pb_piece_fn cb, void *user, pb_gen_stats *stats) {
    pb_gen_stats local, *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    st->stop_reason = PB_STOP_ERROR;
    if (!s) return pb_error(PB_ERR_INVALID_ARG, "pb_session_generate: session is NULL");
    bool in;
    pb_status status = pb_engine_enter(s, "pb_session_generate", false, &in);
    return status != PB_OK ? status : pb_engine_leave(s, in, generate(s, prompt, n_prompt, params, cb, user, st));
}

/* ---- chat turns -------------------------------------------------------------------------------- */

/* Appends the tokens of text (plain text: marker text typed by a user stays text) to s->tmp. */
static pb_status put_text(pb_session *s, const char *text, int64_t *n) {
    size_t len = strlen(text);
    if (len == 0) return PB_OK;
    int64_t got = 0, cap = s->n_ctx - *n;
    pb_status st = pb_tokenize(s->vocab, text, len, PB_TOK_CHAT_TEXT, s->tmp + *n, cap, &got);
    if (st == PB_ERR_INVALID_ARG && got > cap)
        return pb_error(PB_ERR_CONTEXT_FULL, "context full: the turn alone is longer than n_ctx %d tokens", s->n_ctx);
    if (st != PB_OK) return st;
    *n += got;
    return PB_OK;
}

static pb_status put_id(pb_session *s, int32_t id, int64_t *n) {
    if (*n >= s->n_ctx)
        return pb_error(PB_ERR_CONTEXT_FULL, "context full: the turn alone is longer than n_ctx %d tokens", s->n_ctx);
    s->tmp[(*n)++] = id;
    return PB_OK;
}

/* Gemma 4: the last model turn's thought leaves the context before the next turn (pb_session_params.keep_thoughts).
 * The context is cut back to where the turn's first channel opened and the answer's ids (outside every channel,
 * markers left out) are fed again, so it holds what the chat template writes for a history of answers; a pending
 * <turn|> stays pending (the turn is closed as without a thought). The re-fed ids count as re-prefilled. */
static pb_status drop_thought(pb_session *s, pb_gen_stats *st) {
    if (s->params.keep_thoughts || s->chan_open < 0 || s->n_turns == 0) return PB_OK;
    int64_t open = -1;
    for (int64_t i = s->turns[s->n_turns - 1].content; i < s->n_past && open < 0; i++)
        if (s->tokens[i] == s->chan_open) open = i;
    if (open < 0) return PB_OK;
    int64_t n = 0;
    bool inside = false;
    for (int64_t i = open; i < s->n_past; i++) {
        int32_t t = s->tokens[i];
        if (t == s->chan_open || t == s->chan_close)
            inside = t == s->chan_open;
        else if (!inside)
            s->tmp[n++] = t;
    }
    int32_t pend = s->pending; /* sampled, not fed: answer text unless it ends the turn or falls in a channel */
    if (pend >= 0 && !inside && pend != s->eot && pend != s->chan_open && pend != s->chan_close) s->tmp[n++] = pend;
    int64_t re = 0;
    pb_status status = pb_engine_keep(s, open, &re); /* also drops the pending token */
    if (status == PB_OK) status = pb_engine_feed(s, s->tmp, n, &re);
    if (status == PB_OK && pend == s->eot) s->pending = pend;
    st->n_reprefilled += re;
    s->totals.n_reprefilled += re;
    return status;
}

static pb_status chat(pb_session *s, const char *system, const char *user_text, const pb_gen_params *params,
                      pb_piece_fn cb, void *user, pb_gen_stats *st) {
    if (!params) return pb_error(PB_ERR_INVALID_ARG, "pb_session_chat: params is NULL");
    pb_status status = check_gen(s, params);
    if (status != PB_OK) return status;
    if (s->sot < 0 || s->eot < 0)
        return pb_error(PB_ERR_UNSUPPORTED,
                        "chat: the vocabulary has no <start_of_turn>/<end_of_turn> (or <|turn>/<turn|>) tokens");
    double t0 = pb_time_ms();
    begin(s, st);
    status = pb_sampler_start(s->smp, &params->sampler);
    s->dev_sample = status == PB_OK && (pb_sampler_greedy_only(s->smp) || pb_sampler_top_ok(s->smp));
    if (status != PB_OK) goto fail;

    /* The turn's ids: [open] then [content]. A first turn opens with BOS + the user-turn opening (+ the
     * system prompt): that head is what shifts keep. Later turns open by closing the model's turn. */
    bool first = s->n_past == 0 && s->pending < 0;
    int64_t n = 0, n_open;
    if (first) {
        if (s->bos >= 0 && (status = put_id(s, s->bos, &n)) != PB_OK) goto fail;
        bool think = s->params.think && s->think_id >= 0;
        if (s->turn_system && ((system && *system) || think)) {
            /* Gemma 4: <|turn>system\n{system}<turn|>\n; thinking: <|think|> first (the system text may be empty) */
            if ((status = put_id(s, s->sot, &n)) != PB_OK || (status = put_text(s, "system\n", &n)) != PB_OK ||
                (think && (status = put_id(s, s->think_id, &n)) != PB_OK) ||
                (status = put_text(s, system ? system : "", &n)) != PB_OK ||
                (status = put_id(s, s->eot, &n)) != PB_OK || (status = put_text(s, "\n", &n)) != PB_OK)
                goto fail;
            system = NULL;
        }
        if ((status = put_id(s, s->sot, &n)) != PB_OK || (status = put_text(s, "user\n", &n)) != PB_OK) goto fail;
        if (system && *system) {
            if ((status = put_text(s, system, &n)) != PB_OK || (status = put_text(s, "\n\n", &n)) != PB_OK) goto fail;
        }
    } else {
        if ((status = drop_thought(s, st)) != PB_OK) goto fail;
        if (s->pending != s->eot && (status = put_id(s, s->eot, &n)) != PB_OK) goto fail;
        if ((status = put_text(s, "\n", &n)) != PB_OK || (status = put_id(s, s->sot, &n)) != PB_OK ||
            (status = put_text(s, "user\n", &n)) != PB_OK)
            goto fail;
    }
    n_open = n;
    if ((status = put_text(s, user_text, &n)) != PB_OK || (status = put_id(s, s->eot, &n)) != PB_OK ||
        (status = put_text(s, "\n", &n)) != PB_OK || (status = put_id(s, s->sot, &n)) != PB_OK ||
        (status = put_text(s, "model\n", &n)) != PB_OK)
        goto fail;

    int64_t off = 0; /* where in tmp feeding starts */
    if (!first) {
        status = pb_engine_make_room(s, n, s->n_past, st);
        if (status == PB_ERR_CONTEXT_FULL && s->params.ctx_policy == PB_CTX_SHIFT && s->n_keep > 0 &&
            s->n_keep + (n - n_open) < s->n_ctx) {
            /* dropping every earlier turn: the new text follows the head directly */
            pb_error_clear();
            int64_t re = 0;
            status = pb_engine_keep(s, s->n_keep, &re);
            st->n_reprefilled += re;
            s->totals.n_reprefilled += re;
            s->n_turns = 0;
            s->totals.n_shifts++;
            st->n_shifts++;
            off = n_open;
        }
        if (status != PB_OK) goto fail;
    }
    const bool fed_pending = s->pending >= 0; /* the last answer's last sampled token, fed by this turn */
    if ((status = pb_engine_feed_pending(s, NULL)) != PB_OK) goto fail;
    int64_t turn_start = s->n_past;
    status = pb_engine_feed(s, s->tmp + off, n - off, &st->n_prompt);
    s->totals.n_prefilled += st->n_prompt;
    if (status != PB_OK) {
        /* leave the context as before the turn, that token pending again (fed, the next turn closed the model turn
         * a second time), keeping the error text of the failure */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", pb_last_error());
        if ((fed_pending ? pb_engine_keep_pending(s, turn_start)
                         : pb_engine_keep(s, turn_start, &s->totals.n_reprefilled)) != PB_OK)
            pb_engine_reset(s);
        pb_engine_fix_turns(s);
        pb_error(status, "%s", msg);
        goto fail;
    }
    if (first) {
        s->n_keep = n_open;
        status = pb_engine_add_turn(s, n_open, n_open);
    } else if (off > 0) {
        status = pb_engine_add_turn(s, turn_start, turn_start);
    } else {
        status = pb_engine_add_turn(s, turn_start, turn_start + n_open);
    }
    st->t_prefill_ms = pb_time_ms() - t0;
    if (status != PB_OK) goto fail;
    return decode_loop(s, params, cb, user, st, s->turns[s->n_turns - 1].content, t0);
fail:
    st->t_prefill_ms = pb_time_ms() - t0;
    set_reason(st, status);
    return status;
}

pb_status pb_session_chat(pb_session *s, const char *system, const char *user_text, const pb_gen_params *params,
                          pb_piece_fn cb, void *user, pb_gen_stats *stats) {
    pb_gen_stats local, *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    st->stop_reason = PB_STOP_ERROR;
    if (!s || !user_text)
        return pb_error(PB_ERR_INVALID_ARG, "pb_session_chat: %s is NULL", !s ? "session" : "user_text");
    bool in;
    pb_status status = pb_engine_enter(s, "pb_session_chat", false, &in);
    return status != PB_OK ? status : pb_engine_leave(s, in, chat(s, system, user_text, params, cb, user, st));
}
