/* vocab_impl.h -- layout of pb_vocab shared by the tokenizer room's files only (vocab.c, encode.c, decode.c). */
#ifndef PB_TOKENIZER_VOCAB_IMPL_H
#define PB_TOKENIZER_VOCAB_IMPL_H

#include "tokenizer/vocab.h"

#include <string.h>

#define PB_VOCAB_MAX_EOG 8

struct pb_vocab {
    int32_t n;     /* number of tokens */
    char *text;    /* arena: every piece, NUL-terminated, back to back */
    uint32_t *off; /* n + 1 offsets into text; piece i = text[off[i] .. off[i+1]-1) */
    float *score;  /* n scores (NaN from a file is stored as -inf) */
    uint8_t *type; /* n pb_tok_type values */
    /* text -> id: open addressing, linear probing; slot = id or -1 */
    int32_t *slot;
    uint32_t *slot_hash; /* high 32 bits of each slot's hash, to skip most memcmp */
    uint64_t mask;
    /* prefixes of USER_DEFINED / CONTROL / UNKNOWN pieces: (token, len) with kind bits */
    int32_t *pre_tok;
    uint32_t *pre_len;
    uint8_t *pre_flags; /* 1 prefix of a user-defined, 2 prefix of a control/unknown piece */
    uint64_t pre_mask;
    uint8_t first_byte[256]; /* same bits for the first byte */
    int32_t byte_tok[256];
    /* joins_space[b]: some piece holds a character ending in byte b right before a U+2581 (b not part of a
     * U+2581). Where that is false, no merge can cross "X|▁" and the encoder splits the text there. */
    uint8_t joins_space[256];
    /* BPE merges (tokenizer.ggml.model "gemma4"): pair (left id, right id) -> rank, open addressing; empty
     * (merge_mask 0) for SentencePiece vocabularies, which merge by piece score */
    uint64_t *merge_key; /* (left << 32 | right) + 1; 0 = empty slot */
    int32_t *merge_rank;
    uint64_t merge_mask;
    int32_t n_merges;
    int32_t bos, eos, eot, unk, pad;
    int32_t eog[PB_VOCAB_MAX_EOG];
    int n_eog;
    bool add_bos, add_eos, add_space_prefix;
    pb_chat_kind chat_kind;
    char *chat_template;
    char arch[32];
};

/* Rank of the merge of pieces a and b, or -1. */
static inline int32_t pb_vocab_merge_rank(const struct pb_vocab *v, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (uint64_t i = (key * 0x9E3779B97F4A7C15ULL) >> 20 & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        if (v->merge_key[i] == key) return v->merge_rank[i];
        if (v->merge_key[i] == 0) return -1;
    }
}

static inline uint64_t pb_tok_hash(const char *s, size_t n) {
    /* 64-bit multiply-xorshift over 8-byte words; good enough spread for short pieces. */
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)(uint8_t)s[i] << (8 * i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 32;
    return h;
}

static inline const char *pb_vocab_text_(const pb_vocab *v, int32_t id) { return v->text + v->off[id]; }
static inline size_t pb_vocab_len_(const pb_vocab *v, int32_t id) { return v->off[id + 1] - v->off[id] - 1; }

/* Id of the piece spelled s[0..n), or -1. */
static inline int32_t pb_vocab_lookup(const pb_vocab *v, const char *s, size_t n) {
    uint64_t h = pb_tok_hash(s, n);
    uint32_t hh = (uint32_t)(h >> 32);
    for (uint64_t i = h & v->mask;; i = (i + 1) & v->mask) {
        int32_t id = v->slot[i];
        if (id < 0) return -1;
        if (v->slot_hash[i] == hh && pb_vocab_len_(v, id) == n && memcmp(pb_vocab_text_(v, id), s, n) == 0) return id;
    }
}

#endif
