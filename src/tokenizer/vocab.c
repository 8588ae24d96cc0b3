/* vocab.c -- loads a SentencePiece vocabulary from GGUF tokenizer.* keys into one arena + hash tables. No encoding. */
#include "tokenizer/vocab_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ------------------------------------------------------------------------------ */

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xHH>" -> 0..255, else -1. */
static int parse_byte_piece(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Reads an optional token-id key; ids outside [0, n) are ignored (as llama.cpp does). */
static pb_status get_id(const pb_gguf *g, const char *key, int32_t n, int32_t *out) {
    uint32_t u;
    pb_status st = pb_gguf_get_u32(g, key, &u);
    if (st == PB_ERR_NOT_FOUND) return PB_OK;
    if (st != PB_OK) return st;
    if (u < (uint32_t)n) *out = (int32_t)u;
    return PB_OK;
}

static pb_status get_flag(const pb_gguf *g, const char *key, bool *out) {
    pb_status st = pb_gguf_get_bool(g, key, out);
    return st == PB_ERR_NOT_FOUND ? PB_OK : st;
}

/* ---- building ------------------------------------------------------------------------------------ */

static pb_status copy_texts(pb_vocab *v, const pb_gguf *g, int64_t ki, uint64_t n) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        pb_gguf_str s;
        pb_status st = pb_gguf_get_arr_str(g, ki, i, &s);
        if (st != PB_OK) return st;
        total += s.len + 1;
        if (total >= UINT32_MAX) return pb_error(PB_ERR_FORMAT, "vocab: tokenizer.ggml.tokens texts exceed 4 GiB");
    }
    v->text = pb_malloc((size_t)total);
    if (!v->text) return PB_ERR_NOMEM;
    uint32_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        pb_gguf_str s;
        pb_gguf_get_arr_str(g, ki, i, &s);
        v->off[i] = pos;
        if (s.len) memcpy(v->text + pos, s.ptr, s.len);
        pos += (uint32_t)s.len;
        v->text[pos++] = 0;
    }
    v->off[n] = pos;
    return PB_OK;
}

static pb_status read_scores_types(pb_vocab *v, const pb_gguf *g) {
    pb_gguf_vtype et;
    uint64_t cnt;
    const void *data;
    pb_status st = pb_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &cnt, &data);
    if (st == PB_OK) {
        if (et != PB_GGUF_FLOAT32 || cnt != (uint64_t)v->n)
            return pb_error(PB_ERR_FORMAT, "vocab: tokenizer.ggml.scores has %llu elements of type %d, want %d float32",
                            (unsigned long long)cnt, (int)et, v->n);
        for (int32_t i = 0; i < v->n; i++) {
            float f;
            memcpy(&f, (const char *)data + 4 * (size_t)i, 4);
            v->score[i] = isnan(f) ? -INFINITY : f;
        }
    } else if (st != PB_ERR_NOT_FOUND)
        return st;

    st = pb_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &cnt, &data);
    if (st == PB_OK) {
        if ((et != PB_GGUF_INT32 && et != PB_GGUF_UINT32) || cnt != (uint64_t)v->n)
            return pb_error(PB_ERR_FORMAT,
                            "vocab: tokenizer.ggml.token_type has %llu elements of type %d, want %d int32",
                            (unsigned long long)cnt, (int)et, v->n);
        for (int32_t i = 0; i < v->n; i++) {
            int32_t t;
            memcpy(&t, (const char *)data + 4 * (size_t)i, 4);
            if (t < 0 || t > PB_TOK_BYTE)
                return pb_error(PB_ERR_FORMAT, "vocab: tokenizer.ggml.token_type[%d] = %d is not a token type (0..6)",
                                i, t);
            v->type[i] = (uint8_t)t;
        }
    } else if (st != PB_ERR_NOT_FOUND)
        return st;
    else {
        for (int32_t i = 0; i < v->n; i++)
            v->type[i] = parse_byte_piece(pb_vocab_text_(v, i), pb_vocab_len_(v, i)) >= 0 ? PB_TOK_BYTE : PB_TOK_NORMAL;
    }
    return PB_OK;
}

static pb_status build_hash(pb_vocab *v) {
    uint64_t size = pow2_at_least(2 * (uint64_t)v->n);
    v->slot = pb_malloc(size * sizeof *v->slot);
    v->slot_hash = pb_malloc(size * sizeof *v->slot_hash);
    if (!v->slot || !v->slot_hash) return PB_ERR_NOMEM;
    memset(v->slot, 0xff, size * sizeof *v->slot);
    v->mask = size - 1;
    for (int32_t id = 0; id < v->n; id++) {
        const char *s = pb_vocab_text_(v, id);
        size_t n = pb_vocab_len_(v, id);
        if (n == 0) continue; /* an empty piece can never be produced from text */
        uint64_t h = pb_tok_hash(s, n);
        uint32_t hh = (uint32_t)(h >> 32);
        uint64_t i = h & v->mask;
        for (;; i = (i + 1) & v->mask) {
            int32_t o = v->slot[i];
            if (o < 0) break;
            if (v->slot_hash[i] == hh && pb_vocab_len_(v, o) == n && memcmp(pb_vocab_text_(v, o), s, n) == 0)
                goto next; /* duplicate text: the first id keeps it */
        }
        v->slot[i] = id;
        v->slot_hash[i] = hh;
    next:;
    }
    return PB_OK;
}

/* Marks the bytes that end a non-U+2581 character directly followed by U+2581 inside some piece. */
static void find_space_joins(pb_vocab *v) {
    for (int32_t id = 0; id < v->n; id++) {
        const uint8_t *s = (const uint8_t *)pb_vocab_text_(v, id);
        size_t n = pb_vocab_len_(v, id);
        for (size_t i = 1; i + 3 <= n; i++) {
            if (s[i] != 0xE2 || s[i + 1] != 0x96 || s[i + 2] != 0x81) continue;
            bool prev_is_space = i >= 3 && s[i - 3] == 0xE2 && s[i - 2] == 0x96 && s[i - 1] == 0x81;
            if (!prev_is_space) v->joins_space[s[i - 1]] = 1;
        }
    }
}

static uint8_t special_bit(uint8_t type) {
    if (type == PB_TOK_USER_DEFINED) return 1;
    if (type == PB_TOK_CONTROL || type == PB_TOK_UNKNOWN) return 2;
    return 0;
}

/* Every prefix of every special piece, so the matcher can stop as soon as no special piece can follow. */
static pb_status build_prefixes(pb_vocab *v) {
    uint64_t total = 0;
    for (int32_t id = 0; id < v->n; id++)
        if (special_bit(v->type[id])) total += pb_vocab_len_(v, id);
    uint64_t size = pow2_at_least(2 * total + 2);
    v->pre_tok = pb_malloc(size * sizeof *v->pre_tok);
    v->pre_len = pb_malloc(size * sizeof *v->pre_len);
    v->pre_flags = pb_calloc(size, 1);
    if (!v->pre_tok || !v->pre_len || !v->pre_flags) return PB_ERR_NOMEM;
    memset(v->pre_tok, 0xff, size * sizeof *v->pre_tok);
    v->pre_mask = size - 1;
    for (int32_t id = 0; id < v->n; id++) {
        uint8_t bit = special_bit(v->type[id]);
        size_t n = pb_vocab_len_(v, id);
        if (!bit || n == 0) continue;
        const char *s = pb_vocab_text_(v, id);
        v->first_byte[(uint8_t)s[0]] |= bit;
        for (size_t l = 1; l <= n; l++) {
            uint64_t i = pb_tok_hash(s, l) & v->pre_mask;
            for (;; i = (i + 1) & v->pre_mask) {
                int32_t o = v->pre_tok[i];
                if (o < 0) {
                    v->pre_tok[i] = id;
                    v->pre_len[i] = (uint32_t)l;
                    v->pre_flags[i] = bit;
                    break;
                }
                if (v->pre_len[i] == l && memcmp(pb_vocab_text_(v, o), s, l) == 0) {
                    v->pre_flags[i] |= bit;
                    break;
                }
            }
        }
    }
    return PB_OK;
}

static void add_eog(pb_vocab *v, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return;
    if (v->n_eog < PB_VOCAB_MAX_EOG) v->eog[v->n_eog++] = id;
}

static int32_t find_cstr(const pb_vocab *v, const char *s) { return pb_vocab_lookup(v, s, strlen(s)); }

static pb_status read_specials(pb_vocab *v, const pb_gguf *g) {
    v->bos = find_cstr(v, "<bos>");
    v->eos = find_cstr(v, "<eos>");
    v->unk = find_cstr(v, "<unk>");
    v->pad = find_cstr(v, "<pad>");
    v->eot = -1;
    pb_status st;
    if ((st = get_id(g, "tokenizer.ggml.bos_token_id", v->n, &v->bos)) != PB_OK) return st;
    if ((st = get_id(g, "tokenizer.ggml.eos_token_id", v->n, &v->eos)) != PB_OK) return st;
    if ((st = get_id(g, "tokenizer.ggml.unknown_token_id", v->n, &v->unk)) != PB_OK) return st;
    if ((st = get_id(g, "tokenizer.ggml.padding_token_id", v->n, &v->pad)) != PB_OK) return st;
    if ((st = get_id(g, "tokenizer.ggml.eot_token_id", v->n, &v->eot)) != PB_OK) return st;
    if (v->eot < 0) v->eot = find_cstr(v, "<end_of_turn>");
    if (v->eot < 0) v->eot = find_cstr(v, "<turn|>"); /* Gemma 4 */

    /* llama.cpp's SPM defaults, then the keys; Gemma never adds a space prefix (converter writes false,
     * files converted before July 2024 lack the key). */
    pb_gguf_str arch = {0};
    if (pb_gguf_get_str(g, "general.architecture", &arch) == PB_OK) {
        size_t n = arch.len < sizeof v->arch - 1 ? (size_t)arch.len : sizeof v->arch - 1;
        memcpy(v->arch, arch.ptr, n);
        v->arch[n] = 0;
    }
    v->add_bos = true;
    v->add_eos = false;
    v->add_space_prefix = strncmp(v->arch, "gemma", 5) != 0 && v->arch[0] != 0;
    if ((st = get_flag(g, "tokenizer.ggml.add_bos_token", &v->add_bos)) != PB_OK) return st;
    if ((st = get_flag(g, "tokenizer.ggml.add_eos_token", &v->add_eos)) != PB_OK) return st;
    if ((st = get_flag(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix)) != PB_OK) return st;

    add_eog(v, v->eos);
    add_eog(v, v->eot);
    static const char *const eog_texts[] = {
        "<end_of_turn>", "<eos>", "<|eot_id|>", "<|im_end|>", "<|end|>", "<turn|>" /* Gemma 4 */, "<|endoftext|>"};
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        int32_t id = find_cstr(v, eog_texts[i]);
        if (id >= 0 && (v->type[id] == PB_TOK_CONTROL || v->type[id] == PB_TOK_USER_DEFINED)) add_eog(v, id);
    }

    for (int b = 0; b < 256; b++) v->byte_tok[b] = -1;
    for (int32_t id = 0; id < v->n; id++) {
        if (v->type[id] != PB_TOK_BYTE) continue;
        int b = parse_byte_piece(pb_vocab_text_(v, id), pb_vocab_len_(v, id));
        if (b >= 0 && v->byte_tok[b] < 0) v->byte_tok[b] = id;
    }
    for (int b = 0; b < 256; b++) /* e.g. Gemma 2's tokenizer.json has "\t" (226) instead of <0x09> */
        if (v->byte_tok[b] < 0) {
            char c = (char)b;
            v->byte_tok[b] = pb_vocab_lookup(v, &c, 1);
        }

    pb_gguf_str tmpl = {0};
    st = pb_gguf_get_str(g, "tokenizer.chat_template", &tmpl);
    if (st != PB_OK && st != PB_ERR_NOT_FOUND) return st;
    v->chat_template = pb_malloc((size_t)tmpl.len + 1);
    if (!v->chat_template) return PB_ERR_NOMEM;
    if (tmpl.len) memcpy(v->chat_template, tmpl.ptr, tmpl.len);
    v->chat_template[tmpl.len] = 0;
    bool has_turns = find_cstr(v, "<start_of_turn>") >= 0 && find_cstr(v, "<end_of_turn>") >= 0;
    if (find_cstr(v, "<|turn>") >= 0 && find_cstr(v, "<turn|>") >= 0)
        v->chat_kind = PB_CHAT_GEMMA4; /* Gemma 4 vocabulary: its turn markers, whatever the template says */
    else if (strstr(v->chat_template, "<start_of_turn>"))
        v->chat_kind = PB_CHAT_GEMMA;
    else if (has_turns)
        v->chat_kind = PB_CHAT_GEMMA; /* unknown or missing template, Gemma vocabulary */
    else
        v->chat_kind = PB_CHAT_NONE;
    return PB_OK;
}

/* tokenizer.ggml.merges ("left right", rank = index) into the pair table. A merge naming an unknown piece or
 * whose result is not a piece can never apply and is skipped (as HF's BPE, which looks the result up). */
static pb_status read_merges(pb_vocab *v, const pb_gguf *g) {
    int64_t ki = pb_gguf_find_key(g, "tokenizer.ggml.merges");
    if (ki < 0) return pb_error(PB_ERR_FORMAT, "vocab: tokenizer.ggml.model 'gemma4' needs tokenizer.ggml.merges");
    pb_gguf_vtype et;
    uint64_t n;
    const void *data;
    pb_status st = pb_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &data);
    if (st != PB_OK) return st;
    if (et != PB_GGUF_STRING || n >= (uint64_t)INT32_MAX)
        return pb_error(PB_ERR_FORMAT, "vocab: tokenizer.ggml.merges is not a string array");
    uint64_t cap = 16;
    while (cap < 2 * n + 2) cap <<= 1;
    v->merge_key = pb_calloc(cap, sizeof *v->merge_key);
    v->merge_rank = pb_malloc(cap * sizeof *v->merge_rank);
    if (!v->merge_key || !v->merge_rank) return PB_ERR_NOMEM;
    v->merge_mask = cap - 1;
    for (uint64_t r = 0; r < n; r++) {
        pb_gguf_str m;
        if ((st = pb_gguf_get_arr_str(g, ki, r, &m)) != PB_OK) return st;
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp)
            return pb_error(PB_ERR_FORMAT, "vocab: tokenizer.ggml.merges[%llu] is not \"left right\"",
                            (unsigned long long)r);
        size_t la = (size_t)(sp - m.ptr), lb = m.len - la - 1;
        int32_t a = pb_vocab_lookup(v, m.ptr, la), b = lb ? pb_vocab_lookup(v, sp + 1, lb) : -1;
        if (a < 0 || b < 0) continue;
        uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
        uint64_t i = (key * 0x9E3779B97F4A7C15ULL) >> 20 & v->merge_mask;
        while (v->merge_key[i] != 0 && v->merge_key[i] != key) i = (i + 1) & v->merge_mask;
        if (v->merge_key[i] == key) continue; /* a repeated pair keeps its first (best) rank */
        v->merge_key[i] = key;
        v->merge_rank[i] = (int32_t)r;
        v->n_merges++;
    }
    return PB_OK;
}

pb_status pb_vocab_from_gguf(const pb_gguf *g, pb_vocab **out) {
    if (!g || !out) return pb_error(PB_ERR_INVALID_ARG, "vocab: NULL argument");
    *out = NULL;
    pb_gguf_str model;
    pb_status st = pb_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (st == PB_ERR_NOT_FOUND) return pb_error(PB_ERR_NOT_FOUND, "vocab: no tokenizer.ggml.model key in the file");
    if (st != PB_OK) return st;
    bool gemma4 = model.len == 6 && memcmp(model.ptr, "gemma4", 6) == 0; /* BPE pieces with merges */
    if (!gemma4 && (model.len != 5 || memcmp(model.ptr, "llama", 5) != 0))
        return pb_error(PB_ERR_UNSUPPORTED,
                        "vocab: tokenizer.ggml.model '%.*s' is not supported (want 'llama' or 'gemma4')",
                        (int)PB_MIN(model.len, 64), model.ptr);
    int64_t ki = pb_gguf_find_key(g, "tokenizer.ggml.tokens");
    if (ki < 0) return pb_error(PB_ERR_NOT_FOUND, "vocab: no tokenizer.ggml.tokens array in the file");
    pb_gguf_vtype et;
    uint64_t n;
    const void *data;
    if ((st = pb_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data)) != PB_OK) return st;
    if (et != PB_GGUF_STRING) return pb_error(PB_ERR_FORMAT, "vocab: tokenizer.ggml.tokens is not a string array");
    if (n == 0 || n >= (uint64_t)INT32_MAX)
        return pb_error(PB_ERR_FORMAT, "vocab: tokenizer.ggml.tokens has %llu entries", (unsigned long long)n);

    pb_vocab *v = pb_calloc(1, sizeof *v);
    if (!v) return PB_ERR_NOMEM;
    v->n = (int32_t)n;
    v->off = pb_malloc((n + 1) * sizeof *v->off);
    v->score = pb_calloc(n, sizeof *v->score);
    v->type = pb_malloc(n);
    if (!v->off || !v->score || !v->type) {
        st = PB_ERR_NOMEM;
        goto fail;
    }
    if ((st = copy_texts(v, g, ki, n)) != PB_OK) goto fail;
    if ((st = read_scores_types(v, g)) != PB_OK) goto fail;
    if ((st = build_hash(v)) != PB_OK) goto fail;
    if ((st = build_prefixes(v)) != PB_OK) goto fail;
    find_space_joins(v);
    if (gemma4 && (st = read_merges(v, g)) != PB_OK) goto fail;
    if ((st = read_specials(v, g)) != PB_OK) goto fail;
    *out = v;
    return PB_OK;
fail:
    pb_vocab_free(v);
    return st;
}

pb_status pb_vocab_open(const char *gguf_path, pb_vocab **out) {
    if (!out) return pb_error(PB_ERR_INVALID_ARG, "pb_vocab_open: out is NULL");
    *out = NULL;
    if (!gguf_path) return pb_error(PB_ERR_INVALID_ARG, "pb_vocab_open: gguf_path is NULL");
    pb_gguf *g;
    pb_status st = pb_gguf_open(gguf_path, &g);
    if (st != PB_OK) return st;
    st = pb_vocab_from_gguf(g, out);
    pb_gguf_close(g);
    if (st != PB_OK) pb_error_prefix(st, "%s: ", gguf_path);
    return st;
}

void pb_vocab_free(pb_vocab *v) {
    if (!v) return;
    free(v->text);
    free(v->off);
    free(v->score);
    free(v->type);
    free(v->slot);
    free(v->slot_hash);
    free(v->pre_tok);
    free(v->pre_len);
    free(v->pre_flags);
    free(v->chat_template);
    free(v->merge_key);
    free(v->merge_rank);
    free(v);
}

/* ---- accessors ----------------------------------------------------------------------------------- */

int32_t pb_vocab_size(const pb_vocab *v) { return v ? v->n : 0; }
int32_t pb_vocab_bos(const pb_vocab *v) { return v ? v->bos : -1; }
int32_t pb_vocab_eos(const pb_vocab *v) { return v ? v->eos : -1; }
int32_t pb_vocab_eot(const pb_vocab *v) { return v ? v->eot : -1; }
int32_t pb_vocab_unk(const pb_vocab *v) { return v->unk; }
int32_t pb_vocab_pad(const pb_vocab *v) { return v->pad; }
bool pb_vocab_add_bos(const pb_vocab *v) { return v->add_bos; }
bool pb_vocab_add_space_prefix(const pb_vocab *v) { return v->add_space_prefix; }
int32_t pb_vocab_byte_token(const pb_vocab *v, uint8_t b) { return v->byte_tok[b]; }
const char *pb_vocab_chat_template(const pb_vocab *v) { return v->chat_template; }
pb_chat_kind pb_vocab_chat_kind(const pb_vocab *v) { return v->chat_kind; }

int32_t pb_vocab_find(const pb_vocab *v, const char *text, size_t len) {
    if (!v || (!text && len)) return -1;
    if (len == 0) return -1;
    return pb_vocab_lookup(v, text, len);
}

const char *pb_vocab_piece(const pb_vocab *v, int32_t id) {
    if (!v || id < 0 || id >= v->n) return NULL;
    return pb_vocab_text_(v, id);
}

size_t pb_vocab_piece_len(const pb_vocab *v, int32_t id) {
    PB_ASSERT(id >= 0 && id < v->n);
    return pb_vocab_len_(v, id);
}

pb_tok_type pb_vocab_type(const pb_vocab *v, int32_t id) {
    PB_ASSERT(id >= 0 && id < v->n);
    return (pb_tok_type)v->type[id];
}

float pb_vocab_score(const pb_vocab *v, int32_t id) {
    PB_ASSERT(id >= 0 && id < v->n);
    return v->score[id];
}

bool pb_vocab_is_eog(const pb_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return true;
    return false;
}

bool pb_vocab_special_may_start(const pb_vocab *v, uint8_t c, bool parse_special) {
    return (v->first_byte[c] & (parse_special ? 3 : 1)) != 0;
}

bool pb_vocab_is_chat_marker(const pb_vocab *v, int32_t id) {
    static const char *const markers[] = {"<|turn>",         "<turn|>",       "<|think|>", "<|channel>", "<channel|>",
                                          "<start_of_turn>", "<end_of_turn>", "<bos>",     "<eos>"};
    if (!v || id < 0 || id >= v->n) return false;
    const char *t = pb_vocab_text_(v, id);
    for (size_t i = 0; i < sizeof markers / sizeof markers[0]; i++)
        if (strcmp(t, markers[i]) == 0) return true;
    return id == v->bos || id == v->eos || id == v->eot;
}

int32_t pb_vocab_match_special(const pb_vocab *v, const char *text, size_t len, bool parse_special, size_t *mlen) {
    uint8_t want = parse_special ? 3 : 1;
    int32_t best = -1;
    for (size_t l = 1; l <= len; l++) {
        uint64_t i = pb_tok_hash(text, l) & v->pre_mask;
        uint8_t flags = 0;
        for (;; i = (i + 1) & v->pre_mask) {
            int32_t o = v->pre_tok[i];
            if (o < 0) break;
            if (v->pre_len[i] == l && memcmp(pb_vocab_text_(v, o), text, l) == 0) {
                flags = v->pre_flags[i];
                break;
            }
        }
        if (!(flags & want)) break;
        int32_t id = pb_vocab_lookup(v, text, l);
        if (id >= 0 && (special_bit(v->type[id]) & want)) {
            best = id;
            *mlen = l;
        }
    }
    return best;
}
