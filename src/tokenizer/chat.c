/* chat.c -- chat messages -> Gemma turns (Gemma 1-3 <start_of_turn>, Gemma 4 <|turn> and its thinking system turn),
 * as prompt text or as ids (markers as control tokens; text between them never makes a marker token). */
#include "tokenizer/vocab_impl.h"

#include <stdlib.h>
#include <string.h>

/* The turn logic writes through a sink: text pieces and control markers. */
typedef struct sink {
    const pb_vocab *v;
    bool tokens; /* false: render markers as text into buf; true: ids */
    /* text mode */
    char *buf;
    size_t cap, n;
    /* token mode: text pending since the last marker, tokenized as plain text at the next marker */
    int32_t *ids;
    int64_t id_cap, n_ids;
    pb_status st;
} sink;

static void put(sink *o, const char *s, size_t n) {
    if (o->n + n < o->cap) memcpy(o->buf + o->n, s, n);
    o->n += n;
}

static void flush_text(sink *o) {
    if (!o->tokens || o->n == 0 || o->st != PB_OK) return;
    int64_t got = 0, room = o->n_ids < o->id_cap ? o->id_cap - o->n_ids : 0;
    pb_status st = pb_tokenize(o->v, o->buf, o->n, PB_TOK_CHAT_TEXT, room ? o->ids + o->n_ids : NULL, room, &got);
    if (st != PB_OK && got <= room) o->st = st; /* a real failure, not just "does not fit" */
    o->n_ids += got;
    o->n = 0;
}

static void marker(sink *o, const char *name) {
    if (!o->tokens) {
        put(o, name, strlen(name));
        return;
    }
    flush_text(o);
    int32_t id = pb_vocab_lookup(o->v, name, strlen(name));
    if (id < 0 && o->st == PB_OK) o->st = pb_error(PB_ERR_UNSUPPORTED, "chat: the vocabulary has no %s token", name);
    if (o->n_ids < o->id_cap) o->ids[o->n_ids] = id;
    o->n_ids++;
}

static void text(sink *o, const char *s) { put(o, s, strlen(s)); }

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* content trimmed of ASCII whitespace, as the Gemma template's `| trim` and llama.cpp do */
static void trimmed(sink *o, const char *s) {
    size_t n = strlen(s), a = 0;
    while (a < n && is_ws(s[a])) a++;
    while (n > a && is_ws(s[n - 1])) n--;
    put(o, s + a, n - a);
}

static const char *open_marker(const sink *o) {
    return o->v->chat_kind == PB_CHAT_GEMMA4 ? "<|turn>" : "<start_of_turn>";
}
static const char *close_marker(const sink *o) {
    return o->v->chat_kind == PB_CHAT_GEMMA4 ? "<turn|>" : "<end_of_turn>";
}

static void turn(sink *o, const char *role, const char *prefix, const char *content) {
    marker(o, open_marker(o));
    text(o, role);
    text(o, "\n");
    if (prefix) {
        trimmed(o, prefix);
        text(o, "\n\n");
    }
    trimmed(o, content);
    marker(o, close_marker(o));
    text(o, "\n");
}

/* Gemma 4 thinking: "<|turn>system\n<|think|>{system}<turn|>\n" (Google's Gemma 4 prompt-formatting guide: the
 * <|think|> token at the start of the system prompt turns thinking on; the system text may be empty). */
static void think_turn(sink *o, const char *content) {
    marker(o, open_marker(o));
    text(o, "system\n");
    marker(o, "<|think|>");
    trimmed(o, content ? content : "");
    marker(o, close_marker(o));
    text(o, "\n");
}

static pb_status check_msgs(const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs, bool think) {
    if (v->chat_kind != PB_CHAT_GEMMA && v->chat_kind != PB_CHAT_GEMMA4)
        return pb_error(PB_ERR_UNSUPPORTED, "chat: the vocabulary has no <start_of_turn>/<end_of_turn> and its chat "
                                            "template is not a Gemma template");
    if (think && (v->chat_kind != PB_CHAT_GEMMA4 || pb_vocab_lookup(v, "<|think|>", 9) < 0))
        return pb_error(PB_ERR_UNSUPPORTED, "chat: thinking needs a Gemma 4 vocabulary (with <|think|>)");
    for (int i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return pb_error(PB_ERR_INVALID_ARG, "chat: message %d has no %s", i, msgs[i].role ? "content" : "role");
        const char *r = msgs[i].role;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "model"))
            return pb_error(PB_ERR_INVALID_ARG,
                            "chat: message %d has role '%s' (want system, user, assistant or model)", i, r);
    }
    return PB_OK;
}

static void format(sink *o, const pb_chat_msg *msgs, int n_msgs, bool add_generation_prompt, bool think) {
    const char *pending_system = NULL; /* waits for the next user turn */
    int first = 0;
    if (think) { /* the first system message carries <|think|>; without one, a system turn of its own */
        bool sys0 = n_msgs > 0 && strcmp(msgs[0].role, "system") == 0;
        think_turn(o, sys0 ? msgs[0].content : NULL);
        first = sys0 ? 1 : 0;
    }
    for (int i = first; i < n_msgs; i++) {
        const char *r = msgs[i].role;
        if (strcmp(r, "system") == 0 && o->v->chat_kind == PB_CHAT_GEMMA4) { /* Gemma 4 has a system turn */
            turn(o, "system", NULL, msgs[i].content);
            continue;
        }
        if (strcmp(r, "system") == 0) {
            if (pending_system) turn(o, "user", NULL, pending_system); /* two in a row: the first stands alone */
            pending_system = msgs[i].content;
            continue;
        }
        bool user = strcmp(r, "user") == 0;
        if (!user && pending_system) { /* system right before a model turn: a user turn of its own */
            turn(o, "user", NULL, pending_system);
            pending_system = NULL;
        }
        turn(o, user ? "user" : "model", user ? pending_system : NULL, msgs[i].content);
        if (user) pending_system = NULL;
    }
    if (pending_system) turn(o, "user", NULL, pending_system);
    if (add_generation_prompt) {
        marker(o, open_marker(o));
        text(o, "model\n");
    }
}

pb_status pb_chat_format_vocab(const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs, bool add_generation_prompt,
                               char *buf, size_t cap, size_t *len_out) {
    pb_chat_opts opts = {.add_generation_prompt = add_generation_prompt};
    return pb_chat_format_vocab_opts("pb_chat_format", v, msgs, n_msgs, &opts, buf, cap, len_out);
}

/* The arguments both directions share, each named in the error. */
static pb_status check_args(const char *fn, const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs,
                            const pb_chat_opts *opts) {
    if (!v) return pb_error(PB_ERR_INVALID_ARG, "%s: vocab is NULL", fn);
    if (n_msgs < 0) return pb_error(PB_ERR_INVALID_ARG, "%s: n_msgs %d is negative", fn, n_msgs);
    if (!msgs && n_msgs) return pb_error(PB_ERR_INVALID_ARG, "%s: msgs is NULL with n_msgs %d", fn, n_msgs);
    if (!opts) return pb_error(PB_ERR_INVALID_ARG, "%s: opts is NULL", fn);
    return PB_OK;
}

pb_status pb_chat_format_vocab_opts(const char *fn, const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs,
                                    const pb_chat_opts *opts, char *buf, size_t cap, size_t *len_out) {
    if (!len_out) return pb_error(PB_ERR_INVALID_ARG, "%s: len_out is NULL", fn);
    *len_out = 0;
    pb_status st = check_args(fn, v, msgs, n_msgs, opts);
    if (st != PB_OK) return st;
    if (!buf && cap) return pb_error(PB_ERR_INVALID_ARG, "%s: buf is NULL with cap %zu", fn, cap);
    st = check_msgs(v, msgs, n_msgs, opts->think);
    if (st != PB_OK) return st;
    sink o = {.v = v, .buf = buf, .cap = cap};
    format(&o, msgs, n_msgs, opts->add_generation_prompt, opts->think);
    *len_out = o.n;
    if (o.n >= cap) {
        if (cap) buf[cap - 1] = 0;
        return pb_error(PB_ERR_INVALID_ARG, "%s: %zu bytes (+ NUL) do not fit in cap %zu", fn, o.n, cap);
    }
    buf[o.n] = 0;
    return PB_OK;
}

pb_status pb_chat_tokenize_vocab(const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs, bool add_generation_prompt,
                                 int32_t *ids, int64_t cap, int64_t *n_out) {
    pb_chat_opts opts = {.add_generation_prompt = add_generation_prompt};
    return pb_chat_tokenize_vocab_opts("pb_chat_tokenize", v, msgs, n_msgs, &opts, ids, cap, n_out);
}

pb_status pb_chat_tokenize_vocab_opts(const char *fn, const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs,
                                      const pb_chat_opts *opts, int32_t *ids, int64_t cap, int64_t *n_out) {
    if (!n_out) return pb_error(PB_ERR_INVALID_ARG, "%s: n_out is NULL", fn);
    *n_out = 0;
    pb_status st = check_args(fn, v, msgs, n_msgs, opts);
    if (st != PB_OK) return st;
    if (cap < 0) return pb_error(PB_ERR_INVALID_ARG, "%s: cap %lld is negative", fn, (long long)cap);
    if (!ids && cap) return pb_error(PB_ERR_INVALID_ARG, "%s: ids is NULL with cap %lld", fn, (long long)cap);
    st = check_msgs(v, msgs, n_msgs, opts->think);
    if (st != PB_OK) return st;
    /* text between two markers is at most the longest content + system + role; size it from the total */
    size_t total = 64;
    for (int i = 0; i < n_msgs; i++) total += strlen(msgs[i].content) + 16;
    sink o = {.v = v, .tokens = true, .cap = total, .ids = ids, .id_cap = cap};
    o.buf = malloc(total);
    if (!o.buf) return pb_error(PB_ERR_NOMEM, "chat: out of memory");
    if (v->add_bos && v->bos >= 0) {
        if (cap > 0) ids[0] = v->bos;
        o.n_ids = 1;
    }
    format(&o, msgs, n_msgs, opts->add_generation_prompt, opts->think);
    flush_text(&o);
    free(o.buf);
    *n_out = o.n_ids;
    if (o.st != PB_OK) return o.st;
    if (o.n_ids > cap)
        return pb_error(PB_ERR_INVALID_ARG, "%s: %lld tokens do not fit in cap %lld", fn, (long long)o.n_ids,
                        (long long)cap);
    return PB_OK;
}
