/* encode.c -- text -> ids: special-token split, then SentencePiece BPE by piece score with byte fallback. No I/O.
 *
 * The algorithm (see docs/tokenizer-notes.md for the sources and where HF and llama.cpp differ):
 *  1. Scan the raw bytes left to right; at each position take the longest USER_DEFINED piece (always) or
 *     CONTROL/UNKNOWN piece (with PB_TOK_PARSE_SPECIAL) spelled there (leftmost-longest, as HF `tokenizers`
 *     splits added tokens). The text between matches is a raw fragment.
 *  2. Each raw fragment: ' ' -> U+2581 (plus one leading U+2581 when add_space_prefix says so), split into
 *     UTF-8 characters (an invalid byte is a character of its own), then repeatedly merge the adjacent pair
 *     whose concatenation is the best-scoring piece (ties: leftmost). Only pairs of two known pieces merge.
 *  3. A character that is not a piece becomes its byte-fallback tokens <0xNN> (or <unk> if one is missing).
 * Gemma 4 vocabularies (tokenizer.ggml.model "gemma4") carry BPE merges: step 2 then merges the adjacent pair of
 * lowest merge rank (HF `tokenizers` BPE; ties leftmost), the rest is the same.
 */
#include "tokenizer/utf8.h"
#include "tokenizer/vocab_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct sym {
    int32_t start, len; /* bytes in the normalized buffer; len 0 = merged away */
    int32_t prev, next;
    int32_t id; /* piece id, or -1 (not a piece: byte fallback) */
} sym;

typedef struct cand {
    float score;
    int32_t left, right, size, id;
} cand;

typedef struct enc {
    const pb_vocab *v;
    int32_t *ids;
    int64_t cap, n;
    char *norm; /* normalized fragment */
    sym *syms;
    cand *heap; /* sized for the longest word so far: 3 entries per symbol (n-1 pairs + 2 per merge) */
    int64_t n_heap, heap_cap;
} enc;

static inline void emit(enc *e, int32_t id) {
    if (e->n < e->cap) e->ids[e->n] = id;
    e->n++;
}

static inline bool mergeable_type(uint8_t t) {
    return t == PB_TOK_NORMAL || t == PB_TOK_USER_DEFINED || t == PB_TOK_BYTE;
}

/* a ranks before b: higher score, then the leftmost pair */
static inline bool better(const cand *a, const cand *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(enc *e, cand c) {
    int64_t i = e->n_heap++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!better(&c, &e->heap[p])) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = c;
}

static cand heap_pop(enc *e) {
    cand top = e->heap[0], last = e->heap[--e->n_heap];
    int64_t i = 0, n = e->n_heap;
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *mc = &last;
        if (l < n && better(&e->heap[l], mc)) m = l, mc = &e->heap[l];
        if (r < n && better(&e->heap[r], mc)) m = r;
        if (m == i) break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (n > 0) e->heap[i] = last;
    return top;
}

static void try_pair(enc *e, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const sym *a = &e->syms[l], *b = &e->syms[r];
    if (a->id < 0 || b->id < 0) return;
    int32_t size = a->len + b->len;
    float score = 0.0f;
    if (e->v->merge_mask) { /* BPE with merges (Gemma 4): the pair's rank, lowest first */
        int32_t rank = pb_vocab_merge_rank(e->v, a->id, b->id);
        if (rank < 0) return;
        score = -(float)rank;
    }
    int32_t id = pb_vocab_lookup(e->v, e->norm + a->start, (size_t)size);
    if (id < 0 || !mergeable_type(e->v->type[id])) return;
    if (!e->v->merge_mask) score = e->v->score[id];
    heap_push(e, (cand){score, l, r, size, id});
}

/* True when symbol i starts a new word: it is U+2581 and the character before it is not, and no piece joins
 * that character's last byte to a U+2581. */
static bool is_cut(const enc *e, int32_t i) {
    const sym *s = &e->syms[i], *p = &e->syms[i - 1];
    const uint8_t *t = (const uint8_t *)e->norm;
    if (s->len != 3 || t[s->start] != 0xE2 || t[s->start + 1] != 0x96 || t[s->start + 2] != 0x81) return false;
    if (p->len == 3 && t[p->start] == 0xE2 && t[p->start + 1] == 0x96 && t[p->start + 2] == 0x81) return false;
    return !e->v->joins_space[t[p->start + p->len - 1]];
}

/* BPE over symbols [w0, w1): best-scoring pair first, ties to the left. */
static pb_status merge_word(enc *e, int32_t w0, int32_t w1) {
    int64_t need = 3 * (int64_t)(w1 - w0);
    if (need > e->heap_cap) {
        cand *h = realloc(e->heap, (size_t)need * sizeof *h);
        if (!h) return pb_error(PB_ERR_NOMEM, "tokenize: out of memory for a word of %d characters", w1 - w0);
        e->heap = h;
        e->heap_cap = need;
    }
    e->n_heap = 0;
    for (int32_t i = w0; i + 1 < w1; i++) try_pair(e, i, i + 1);
    while (e->n_heap > 0) {
        cand c = heap_pop(e);
        sym *a = &e->syms[c.left], *b = &e->syms[c.right];
        if (a->len == 0 || b->len == 0 || a->next != c.right || a->len + b->len != c.size) continue; /* stale */
        a->len = c.size;
        a->id = c.id;
        a->next = b->next;
        if (b->next >= 0) e->syms[b->next].prev = c.left;
        b->len = 0;
        try_pair(e, a->prev, c.left);
        try_pair(e, c.left, a->next);
    }
    return PB_OK;
}

static pb_status emit_bytes(enc *e, const char *s, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        int32_t id = e->v->byte_tok[(uint8_t)s[i]];
        if (id < 0) id = e->v->unk;
        if (id < 0)
            return pb_error(PB_ERR_UNSUPPORTED, "tokenize: vocabulary has no byte token for 0x%02X and no <unk>",
                            (uint8_t)s[i]);
        emit(e, id);
    }
    return PB_OK;
}

static pb_status encode_fragment(enc *e, const char *text, size_t len, bool space_prefix) {
    /* normalize: U+2581 for every space */
    size_t nn = 0;
    if (space_prefix) {
        memcpy(e->norm, "\xE2\x96\x81", 3);
        nn = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(e->norm + nn, "\xE2\x96\x81", 3);
            nn += 3;
        } else
            e->norm[nn++] = text[i];
    }
    if (nn == 0) return PB_OK;
    /* one symbol per character */
    int32_t ns = 0;
    for (size_t i = 0; i < nn;) {
        int cl = pb_utf8_char_len((const uint8_t *)e->norm + i, nn - i);
        if (cl == 0) cl = 1;
        sym *s = &e->syms[ns];
        s->start = (int32_t)i;
        s->len = cl;
        s->prev = ns - 1;
        s->next = ns + 1;
        s->id = pb_vocab_lookup(e->v, e->norm + i, (size_t)cl);
        if (s->id >= 0 && !mergeable_type(e->v->type[s->id])) s->id = -1;
        ns++;
        i += (size_t)cl;
    }
    e->syms[ns - 1].next = -1;
    /* Merge word by word: a word ends before a U+2581 that follows a character no piece joins to a U+2581
     * (vocab.c find_space_joins), so no merge can cross the cut and the result equals one global pass. */
    for (int32_t w0 = 0; w0 < ns;) {
        int32_t w1 = w0 + 1;
        while (w1 < ns && !is_cut(e, w1)) w1++;
        e->syms[w0].prev = -1;
        e->syms[w1 - 1].next = -1;
        pb_status st = merge_word(e, w0, w1);
        if (st != PB_OK) return st;
        w0 = w1;
    }
    for (int32_t i = 0; i < ns; i++) {
        const sym *s = &e->syms[i];
        if (s->len == 0) continue; /* merged into its left neighbour */
        if (s->id >= 0)
            emit(e, s->id);
        else {
            pb_status st = emit_bytes(e, e->norm + s->start, s->len);
            if (st != PB_OK) return st;
        }
    }
    return PB_OK;
}

pb_status pb_tokenize(const pb_vocab *v, const char *text, size_t len, int flags, int32_t *ids, int64_t cap,
                      int64_t *n_out) {
    if (!n_out) return pb_error(PB_ERR_INVALID_ARG, "pb_tokenize: n_out is NULL");
    *n_out = 0;
    if (!v) return pb_error(PB_ERR_INVALID_ARG, "pb_tokenize: vocab is NULL");
    if (!text && len) return pb_error(PB_ERR_INVALID_ARG, "pb_tokenize: text is NULL with len %zu", len);
    if (cap < 0) return pb_error(PB_ERR_INVALID_ARG, "pb_tokenize: cap %lld is negative", (long long)cap);
    if (!ids && cap > 0) return pb_error(PB_ERR_INVALID_ARG, "pb_tokenize: ids is NULL with cap %lld", (long long)cap);
    if (flags & ~(PB_TOK_ADD_BOS | PB_TOK_PARSE_SPECIAL | PB_TOK_CHAT_TEXT)) /* a newer caller's flag: not ignored */
        return pb_error(PB_ERR_INVALID_ARG, "pb_tokenize: flags 0x%x has unknown bits", (unsigned)flags);
    if (len > (size_t)INT32_MAX / 4)
        return pb_error(PB_ERR_INVALID_ARG, "pb_tokenize: text of %zu bytes is too long (max %d)", len, INT32_MAX / 4);
    enc e = {.v = v, .ids = ids, .cap = cap};
    bool parse_special = (flags & PB_TOK_PARSE_SPECIAL) != 0;
    pb_status st = PB_OK;
    if (len > 0) {
        e.norm = malloc(3 * len + 3);                /* every byte a space -> U+2581, plus a space prefix */
        e.syms = malloc((len + 1) * sizeof *e.syms); /* at most one character per input byte, plus the prefix */
        if (!e.norm || !e.syms) {
            st = pb_error(PB_ERR_NOMEM, "tokenize: out of memory for %zu bytes of text", len);
            goto done;
        }
    }
    if ((flags & PB_TOK_ADD_BOS) && v->add_bos && v->bos >= 0) emit(&e, v->bos);

    size_t frag = 0;
    bool after_special = true; /* llama.cpp: the space prefix goes before the first fragment and after specials */
    for (size_t pos = 0; pos < len;) {
        size_t mlen = 0;
        int32_t id = -1;
        if (pb_vocab_special_may_start(v, (uint8_t)text[pos], parse_special))
            id = pb_vocab_match_special(v, text + pos, len - pos, parse_special, &mlen);
        if (id >= 0 && (flags & PB_TOK_CHAT_TEXT) && pb_vocab_is_chat_marker(v, id)) id = -1; /* typed, not made */
        if (id < 0) {
            pos++;
            continue;
        }
        if (pos > frag) {
            st = encode_fragment(&e, text + frag, pos - frag, v->add_space_prefix && after_special);
            if (st != PB_OK) goto done;
        }
        emit(&e, id);
        after_special = true;
        pos += mlen;
        frag = pos;
    }
    if (len > frag) {
        st = encode_fragment(&e, text + frag, len - frag, v->add_space_prefix && after_special);
        if (st != PB_OK) goto done;
    }
    if ((flags & PB_TOK_ADD_BOS) && v->add_eos && v->eos >= 0) emit(&e, v->eos);
    *n_out = e.n;
    if (e.n > cap)
        st = pb_error(PB_ERR_INVALID_ARG, "tokenize: %lld tokens do not fit in %lld", (long long)e.n, (long long)cap);
done:
    free(e.norm);
    free(e.syms);
    free(e.heap);
    return st;
}
