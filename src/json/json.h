/* json.h -- JSON text checks that cJSON leaves to its callers, shared by the store, the server and the CLI. Header-only
 * (cJSON + libc): no core room includes it, so libpocketbrain never depends on cJSON (tests/test_layering.sh). */
#ifndef PB_JSON_H
#define PB_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* True when text[at..len) starts with a \u escape whose four characters are not all hex digits ("\u12G4"). */
static inline bool pb_json_bad_u_escape_at(const char *text, size_t len, size_t at) {
    if (at + 1 >= len || text[at] != '\\' || text[at + 1] != 'u') return false;
    for (size_t k = at + 2; k < at + 6; k++) {
        const char ch = k < len ? text[k] : 0;
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F'))) return true;
    }
    return false;
}

/* The offset of the first \u escape in text[0..len) that is not followed by four hex digits, outside an escaped
 * backslash ("\\u12G4" is text); len when there is none. cJSON reads such an escape as U+0000, so the string it is in
 * ended there without a word ("hi \uZZZZ and the rest" was "hi "). */
static inline size_t pb_json_find_bad_u_escape(const char *text, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (text[i] != '\\') continue;
        if (pb_json_bad_u_escape_at(text, len, i)) return i;
        i++; /* the escaped character never starts an escape */
    }
    return len;
}

/* Parses text[0..len) as one JSON value followed by nothing but JSON whitespace (space, TAB, LF, CR): cJSON alone
 * stops after the first value and ignores whatever follows it ('"hello" junk' was read as "hello"). Returns the value
 * (the caller cJSON_Deletes it), or NULL with *at set to the byte offset where the trouble starts and *trailing set to
 * true when the value itself parsed but more text follows it (false: the text is not valid JSON). A NUL byte after
 * the value counts as more text. A \u escape without four hex digits is not valid JSON (cJSON took it as a NUL that
 * cut its string short): NULL, *at at its backslash (pb_json_bad_u_escape_at says so). */
static inline cJSON *pb_json_parse_one(const char *text, size_t len, size_t *at, bool *trailing) {
    const char *end = NULL;
    *at = 0;
    *trailing = false;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        *at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return NULL;
    }
    size_t i = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) i++;
    if (i < len) {
        cJSON_Delete(root);
        *at = i;
        *trailing = true;
        return NULL;
    }
    const size_t bad = pb_json_find_bad_u_escape(text, i);
    if (bad < i) {
        cJSON_Delete(root);
        *at = bad;
        return NULL;
    }
    return root;
}

/* After pb_json_parse_one failed at byte at: true when it stopped at a \u escape of half a UTF-16 surrogate pair
 * without the other half ("\ud800" alone). The JSON grammar allows it (RFC 8259 8.2), but it names no Unicode
 * character and cJSON refuses it: callers say so instead of "not valid JSON". */
static inline bool pb_json_lone_surrogate(const char *text, size_t len, size_t at) {
    if (at + 6 > len || text[at] != '\\' || text[at + 1] != 'u' || pb_json_bad_u_escape_at(text, len, at)) return false;
    const char d = text[at + 2], e = text[at + 3];
    return (d == 'd' || d == 'D') && ((e >= '8' && e <= '9') || (e >= 'a' && e <= 'f') || (e >= 'A' && e <= 'F'));
}

/* After pb_json_parse_one failed at byte at (not for trailing text): true when it stopped at an array or object opened
 * CJSON_NESTING_LIMIT levels deep, i.e. the text may be valid JSON that cJSON will not nest so deep, which callers
 * say instead of "not valid JSON". Counts the brackets before at outside strings. */
static inline bool pb_json_too_deep(const char *text, size_t len, size_t at) {
    if (at >= len || (text[at] != '[' && text[at] != '{')) return false;
    long depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < at; i++) {
        const char ch = text[i];
        if (in_str && ch == '\\')
            i++; /* the escaped character ends no string */
        else if (ch == '"')
            in_str = !in_str;
        else if (!in_str)
            depth += ch == '[' || ch == '{' ? 1 : ch == ']' || ch == '}' ? -1 : 0;
    }
    return !in_str && depth >= CJSON_NESTING_LIMIT;
}

/* True when the JSON text text[0..len) holds a \u0000 escape outside an escaped backslash ("\\u0000" is the text
 * backslash-u-0-0-0-0, no NUL). cJSON keeps a string only up to a NUL, so such a string would be cut short without a
 * word: callers refuse it. */
static inline bool pb_json_has_nul_escape(const char *text, size_t len) {
    for (size_t i = 0; i + 5 < len; i++) {
        if (text[i] != '\\') continue;
        if (text[i + 1] == 'u' && text[i + 2] == '0' && text[i + 3] == '0' && text[i + 4] == '0' && text[i + 5] == '0')
            return true;
        i++; /* the escaped character never starts an escape */
    }
    return false;
}

#endif
