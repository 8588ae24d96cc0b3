/* decode.c -- ids -> text: piece rendering, whole-text detokenize and the streaming UTF-8-safe detokenizer. */
#include "tokenizer/utf8.h"
#include "tokenizer/vocab_impl.h"

#include <stdlib.h>
#include <string.h>

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Renders one piece into out (room for pb_vocab_len_(id) bytes is enough: U+2581 -> ' ' only shrinks).
 * NORMAL/USER_DEFINED: U+2581 -> space; BYTE: the byte; CONTROL/UNKNOWN/UNUSED: raw text when special,
 * else nothing. Returns the byte count. */
static size_t render_piece(const pb_vocab *v, int32_t id, bool special, char *out) {
    const char *s = pb_vocab_text_(v, id);
    size_t n = pb_vocab_len_(v, id);
    switch (v->type[id]) {
    case PB_TOK_BYTE: {
        if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && hexval(s[3]) >= 0 &&
            hexval(s[4]) >= 0) {
            out[0] = (char)(hexval(s[3]) * 16 + hexval(s[4]));
            return 1;
        }
        memcpy(out, s, n); /* a BYTE token that is not <0xNN>: print it as text */
        return n;
    }
    case PB_TOK_NORMAL:
    case PB_TOK_USER_DEFINED:
    case PB_TOK_UNDEFINED: {
        size_t o = 0;
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && (uint8_t)s[i] == 0xE2 && (uint8_t)s[i + 1] == 0x96 && (uint8_t)s[i + 2] == 0x81) {
                out[o++] = ' ';
                i += 3;
            } else
                out[o++] = s[i++];
        }
        return o;
    }
    default:
        if (!special) return 0;
        memcpy(out, s, n);
        return n;
    }
}

pb_status pb_detokenize(const pb_vocab *v, const int32_t *ids, int64_t n, bool render_special, char *buf, size_t cap,
                        size_t *len_out) {
    if (!len_out) return pb_error(PB_ERR_INVALID_ARG, "pb_detokenize: len_out is NULL");
    *len_out = 0;
    if (!v) return pb_error(PB_ERR_INVALID_ARG, "pb_detokenize: vocab is NULL");
    if (n < 0) return pb_error(PB_ERR_INVALID_ARG, "pb_detokenize: n %lld is negative", (long long)n);
    if (!ids && n) return pb_error(PB_ERR_INVALID_ARG, "pb_detokenize: ids is NULL with n %lld", (long long)n);
    if (!buf && cap) return pb_error(PB_ERR_INVALID_ARG, "pb_detokenize: buf is NULL with cap %zu", cap);
    size_t total = 0;
    char tmp[512];
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= v->n)
            return pb_error(PB_ERR_INVALID_ARG,
                            "pb_detokenize: id %d at position %lld is outside the vocabulary (0..%d)", id, (long long)i,
                            v->n - 1);
        size_t plen = pb_vocab_len_(v, id);
        char *dst = total + plen <= cap ? buf + total : NULL;
        char *heap = NULL;
        if (!dst) {
            if (plen <= sizeof tmp)
                dst = tmp;
            else if (!(dst = heap = malloc(plen)))
                return pb_error(PB_ERR_NOMEM, "detokenize: out of memory");
        }
        size_t k = render_piece(v, id, render_special, dst);
        if (dst != buf + total && total + k < cap) memcpy(buf + total, dst, k); /* rendered piece shrank to fit */
        free(heap);
        total += k;
    }
    *len_out = total;
    if (total >= cap) {
        if (cap) buf[cap - 1] = 0;
        return pb_error(PB_ERR_INVALID_ARG, "detokenize: %zu bytes (+ NUL) do not fit in %zu", total, cap);
    }
    buf[total] = 0;
    return PB_OK;
}

/* ---- streaming ------------------------------------------------------------------------------------ */

struct pb_detok_stream {
    const pb_vocab *v;
    uint8_t held[4]; /* start of an incomplete UTF-8 character */
    int n_held;
    char *out; /* output buffer, grown only when a piece is larger than any before */
    size_t cap;
    char *piece;
    size_t piece_cap;
};

pb_status pb_detok_stream_new(const pb_vocab *v, pb_detok_stream **out) {
    if (!out) return pb_error(PB_ERR_INVALID_ARG, "pb_detok_stream_new: out is NULL");
    *out = NULL;
    if (!v) return pb_error(PB_ERR_INVALID_ARG, "pb_detok_stream_new: vocab is NULL");
    pb_detok_stream *s = pb_calloc(1, sizeof *s);
    if (!s) return PB_ERR_NOMEM;
    s->v = v;
    s->cap = s->piece_cap = 256;
    s->out = pb_malloc(s->cap);
    s->piece = pb_malloc(s->piece_cap);
    if (!s->out || !s->piece) {
        pb_detok_stream_free(s);
        return PB_ERR_NOMEM;
    }
    *out = s;
    return PB_OK;
}

void pb_detok_stream_free(pb_detok_stream *s) {
    if (!s) return;
    free(s->out);
    free(s->piece);
    free(s);
}

static bool grow(char **p, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t c = *cap * 2 > need ? *cap * 2 : need;
    char *q = realloc(*p, c);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static size_t put_fffd(char *o) {
    memcpy(o, "\xEF\xBF\xBD", 3);
    return 3;
}

/* The NULL checks of push and flush, each argument named. */
static pb_status check_stream_args(const char *fn, const pb_detok_stream *s, const char **out, const size_t *out_len) {
    if (!s) return pb_error(PB_ERR_INVALID_ARG, "%s: stream is NULL", fn);
    if (!out) return pb_error(PB_ERR_INVALID_ARG, "%s: out is NULL", fn);
    if (!out_len) return pb_error(PB_ERR_INVALID_ARG, "%s: out_len is NULL", fn);
    return PB_OK;
}

pb_status pb_detok_stream_push(pb_detok_stream *s, int32_t id, const char **out, size_t *out_len) {
    pb_status st = check_stream_args("pb_detok_stream_push", s, out, out_len);
    if (st != PB_OK) return st;
    *out = s->out;
    *out_len = 0;
    if (id < 0 || id >= s->v->n)
        return pb_error(PB_ERR_INVALID_ARG, "pb_detok_stream_push: id %d is outside the vocabulary (0..%d)", id,
                        s->v->n - 1);
    size_t plen = pb_vocab_len_(s->v, id);
    /* worst case: every byte (held + piece) becomes U+FFFD */
    if (!grow(&s->piece, &s->piece_cap, plen + 4) || !grow(&s->out, &s->cap, 3 * (plen + 4)))
        return pb_error(PB_ERR_NOMEM, "detok_stream: out of memory");
    memcpy(s->piece, s->held, (size_t)s->n_held);
    size_t n = (size_t)s->n_held + render_piece(s->v, id, false, s->piece + s->n_held);
    s->n_held = 0;
    const uint8_t *p = (const uint8_t *)s->piece;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int cl = pb_utf8_char_len(p + i, n - i);
        if (cl > 0) {
            memcpy(s->out + o, p + i, (size_t)cl);
            o += (size_t)cl;
            i += (size_t)cl;
        } else if (pb_utf8_is_prefix(p + i, n - i)) { /* incomplete at the end: hold it */
            s->n_held = (int)(n - i);
            memcpy(s->held, p + i, n - i);
            break;
        } else {
            o += put_fffd(s->out + o);
            i++;
        }
    }
    *out = s->out; /* after grow(): the buffer may have moved */
    *out_len = o;
    return PB_OK;
}

pb_status pb_detok_stream_flush(pb_detok_stream *s, const char **out, size_t *out_len) {
    pb_status st = check_stream_args("pb_detok_stream_flush", s, out, out_len);
    if (st != PB_OK) return st;
    size_t o = 0;
    for (int i = 0; i < s->n_held; i++) o += put_fffd(s->out + o);
    s->n_held = 0;
    *out = s->out;
    *out_len = o;
    return PB_OK;
}
