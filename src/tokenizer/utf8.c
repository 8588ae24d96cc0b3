/* utf8.c -- repair of text into valid UTF-8 for outputs that must be UTF-8 (see utf8.h). */
#include "tokenizer/utf8.h"

#include <string.h>

size_t pb_utf8_repair(const char *in, size_t n, char *out) {
    size_t w = 0, i = 0;
    while (i < n) {
        const uint8_t *p = (const uint8_t *)in + i;
        size_t rem = n - i;
        int l = pb_utf8_char_len(p, rem);
        if (l) {
            memcpy(out + w, p, (size_t)l);
            w += (size_t)l;
            i += (size_t)l;
            continue;
        }
        size_t k = 1; /* the longest valid start of a character: one U+FFFD for all of it */
        while (k < rem && k < 3 && pb_utf8_is_prefix(p, k + 1)) k++;
        memcpy(out + w, "\xef\xbf\xbd", 3);
        w += 3;
        i += k;
    }
    out[w] = 0;
    return w;
}
