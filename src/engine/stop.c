/* stop.c -- stop strings over a token stream: found across token boundaries, never emitted, and text
 * held back only while it could still be the start of a stop string; Gemma 4's thought channel split from the
 * answer. No allocation. */
#include "engine/engine.h"

#include <string.h>

pb_status pb_stopper_check(const char *const *stop, int n_stop) {
    if (n_stop < 0 || (n_stop > 0 && !stop))
        return pb_error(PB_ERR_INVALID_ARG, "stop: n_stop %d without strings", n_stop);
    for (int i = 0; i < n_stop; i++) {
        if (!stop[i]) return pb_error(PB_ERR_INVALID_ARG, "stop: string %d is NULL", i);
        size_t n = strlen(stop[i]);
        if (n == 0 || n > PB_STOP_MAX_LEN)
            return pb_error(PB_ERR_INVALID_ARG, "stop: string %d has %zu bytes (1..%d allowed)", i, n, PB_STOP_MAX_LEN);
    }
    return PB_OK;
}

void pb_stopper_init(pb_stopper *st, char *buf, size_t cap, const char *const *stop, int n_stop, pb_piece_fn cb,
                     void *user) {
    PB_ASSERT(cap >= 2 * PB_STOP_MAX_LEN);
    memset(st, 0, sizeof *st);
    st->stop = stop;
    st->n_stop = n_stop;
    st->buf = buf;
    st->cap = cap;
    st->cb = cb;
    st->user = user;
}

static bool emit(pb_stopper *st, const char *p, size_t n) {
    if (n == 0 || !st->cb) return true;
    if (!st->cb(p, n, st->user)) {
        st->hit_callback = true;
        return false;
    }
    return true;
}

/* Earliest position of any stop string in buf[0..n), or n when none. */
static size_t find_stop(const pb_stopper *st) {
    size_t best = st->n;
    for (int i = 0; i < st->n_stop; i++) {
        size_t m = strlen(st->stop[i]);
        for (size_t pos = 0; pos + m <= st->n && pos < best; pos++) {
            if (memcmp(st->buf + pos, st->stop[i], m) == 0) {
                best = pos;
                break;
            }
        }
    }
    return best;
}

/* Longest suffix of buf[0..n) that is a proper prefix of some stop string. */
static size_t held_suffix(const pb_stopper *st) {
    size_t best = 0;
    for (int i = 0; i < st->n_stop; i++) {
        size_t m = strlen(st->stop[i]);
        size_t l = m - 1 < st->n ? m - 1 : st->n;
        for (; l > best; l--) {
            if (memcmp(st->buf + st->n - l, st->stop[i], l) == 0) {
                best = l;
                break;
            }
        }
    }
    return best;
}

bool pb_stopper_push(pb_stopper *st, const char *text, size_t len) {
    if (st->hit_stop || st->hit_callback) return false;
    if (st->n_stop == 0) return emit(st, text, len);
    while (len > 0) {
        /* held text is < PB_STOP_MAX_LEN bytes, so there is always room for a chunk */
        size_t room = st->cap - st->n, k = len < room ? len : room;
        if (k < len) /* split at a character start so emitted text stays whole UTF-8 */
            while (k > 1 && ((unsigned char)text[k] & 0xC0) == 0x80) k--;
        memcpy(st->buf + st->n, text, k);
        st->n += k;
        text += k;
        len -= k;
        size_t pos = find_stop(st);
        if (pos < st->n) {
            st->hit_stop = true;
            emit(st, st->buf, pos);
            st->n = 0;
            return false;
        }
        size_t keep = held_suffix(st), out = st->n - keep;
        bool ok = emit(st, st->buf, out);
        memmove(st->buf, st->buf + out, keep);
        st->n = keep;
        if (!ok) return false;
    }
    return true;
}

bool pb_stopper_flush(pb_stopper *st) {
    if (st->hit_stop || st->hit_callback) return !st->hit_callback;
    bool ok = emit(st, st->buf, st->n);
    st->n = 0;
    return ok;
}

/* ---- thought channel ----------------------------------------------------------------------------- */

void pb_channel_init(pb_channel *c, int32_t open, int32_t close, pb_piece_fn cb, void *user) {
    c->open = open;
    c->close = close;
    c->state = 0;
    c->cb = cb;
    c->user = user;
}

bool pb_channel_marker(pb_channel *c, int32_t id) {
    if (id < 0) return false;
    if (id == c->open) {
        c->state = 1;
        return true;
    }
    if (id == c->close) {
        c->state = 0;
        return true;
    }
    return false;
}

bool pb_channel_push(pb_channel *c, const char *text, size_t len) {
    if (c->state == 1) { /* the channel's name ("thought"): up to and including its newline */
        const char *nl = memchr(text, '\n', len);
        if (!nl) return true;
        len -= (size_t)(nl + 1 - text);
        text = nl + 1;
        c->state = 2;
    }
    if (len == 0 || !c->cb) return true;
    return c->cb(text, len, c->user);
}
