/* utf8.h -- strict UTF-8 helpers for the tokenizer (RFC 3629: no overlongs, no surrogates, <= U+10FFFF) and the
 * repair of text for outputs that must be UTF-8 (JSON). */
#ifndef PB_TOKENIZER_UTF8_H
#define PB_TOKENIZER_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the valid UTF-8 character at s[0..n), or 0 when s does not start with one
 * (invalid lead byte, bad continuation, overlong form, surrogate, > U+10FFFF, or truncated). */
static inline int pb_utf8_char_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if ((size_t)len > n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

/* 1 when s[0..n) (n >= 1, shorter than the full character) could still become a valid character once more
 * bytes arrive; 0 when it is already invalid. */
static inline int pb_utf8_is_prefix(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if (n >= len) return 0;
    if (n >= 2 && (s[1] < lo || s[1] > hi)) return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return 1;
}

/* 1 when all of s[0..n) is valid UTF-8. */
static inline int pb_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int l = pb_utf8_char_len(s + i, n - i);
        if (!l) return 0;
        i += (size_t)l;
    }
    return 1;
}

/* in[0..n) made valid UTF-8 for outputs that must be (JSON): each run of bytes that is not a character (at most
 * the longest valid start of one) becomes one U+FFFD. out needs PB_UTF8_REPAIR_CAP(n) bytes and is NUL-terminated;
 * returns its length. Generated text needs no repair (pb_detok_stream emits whole characters); names and metadata
 * read from files and URLs do. */
#define PB_UTF8_REPAIR_CAP(n) (3 * (size_t)(n) + 1)
size_t pb_utf8_repair(const char *in, size_t n, char *out);

#endif
