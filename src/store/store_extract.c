/* store_extract.c -- document bytes -> plain UTF-8 text + title: text/Markdown as-is, a tolerant HTML
 * stripper (with a map back to source offsets), PDF through poppler-glib. No database code here. */
#include "store/store.h"

#include <errno.h>
#include <iconv.h>
#include <poppler.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <strings.h>

void pb_store_extracted_free(pb_extracted *e) {
    if (!e) return;
    free(e->text);
    free(e->title);
    free(e->src_off);
    free(e->page_off);
    free(e->converted);
    memset(e, 0, sizeof *e);
}

pb_doc_kind pb_store_kind_from_path(const char *path, bool *known) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char inner[256];
    size_t bl = strlen(base);
    if (bl > 3 && bl - 3 < sizeof inner && !strcasecmp(base + bl - 3, ".gz")) { /* "notes.md.gz": kind of "notes.md" */
        memcpy(inner, base, bl - 3);
        inner[bl - 3] = 0;
        base = inner;
    }
    const char *dot = strrchr(base, '.');
    *known = true;
    if (dot) {
        const char *x = dot + 1;
        if (!strcasecmp(x, "md") || !strcasecmp(x, "markdown") || !strcasecmp(x, "mdown")) return PB_DOC_MARKDOWN;
        if (!strcasecmp(x, "html") || !strcasecmp(x, "htm") || !strcasecmp(x, "xhtml")) return PB_DOC_HTML;
        if (!strcasecmp(x, "pdf")) return PB_DOC_PDF;
        if (!strcasecmp(x, "txt") || !strcasecmp(x, "text") || !strcasecmp(x, "rst") || !strcasecmp(x, "org"))
            return PB_DOC_TEXT;
    }
    *known = false;
    return PB_DOC_TEXT;
}

bool pb_store_path_has_no_extension(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t bl = strlen(base);
    const char *dot = strchr(base, '.');
    return !dot || (bl > 3 && !strcasecmp(base + bl - 3, ".gz") && dot == base + bl - 3);
}

/* ---- text checks ------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when invalid (overlongs, surrogates, > U+10FFFF). */
static int utf8_len(const uint8_t *p, size_t n) {
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    int len;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0)
        len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0)
        len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0)
        len = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

pb_status pb_store_check_text(const uint8_t *data, size_t size) {
    size_t n_ctrl = 0;
    for (size_t i = 0; i < size;) {
        uint8_t c = data[i];
        if (c == 0) return pb_error(PB_ERR_FORMAT, "binary file (NUL byte at offset %zu)", i);
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' && c != 0x1b) n_ctrl++;
        int l = utf8_len(data + i, size - i);
        if (!l) return pb_error(PB_ERR_FORMAT, "not UTF-8 text (invalid byte 0x%02x at offset %zu)", c, i);
        i += (size_t)l;
    }
    if (n_ctrl > 16 && n_ctrl * 100 > size)
        return pb_error(PB_ERR_FORMAT, "binary file (%zu control characters in %zu bytes)", n_ctrl, size);
    return PB_OK;
}

char *pb_store_utf8_dup(const char *s) {
    if (!s) s = "";
    size_t n = strlen(s);
    char *o = pb_malloc(n * 3 + 1), *w = o; /* each bad byte becomes U+FFFD (3 bytes) */
    if (!o) return NULL;
    for (size_t i = 0; i < n;) {
        int l = utf8_len((const uint8_t *)s + i, n - i);
        if (l) {
            memcpy(w, s + i, (size_t)l);
            w += l;
            i += (size_t)l;
        } else {
            memcpy(w, "\xef\xbf\xbd", 3);
            w += 3;
            i++;
        }
    }
    *w = 0;
    return o;
}

/* ---- growable output with a source map -------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t *src;
    size_t len, cap;
    bool oom;
} outbuf;

static void out_byte(outbuf *o, char c, size_t src) {
    if (o->oom) return;
    if (o->len + 2 > o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 4096;
        char *nb = realloc(o->buf, nc);
        if (nb) o->buf = nb;
        size_t *ns = realloc(o->src, nc * sizeof *ns);
        if (ns) o->src = ns;
        if (!nb || !ns) {
            o->oom = true;
            return;
        }
        o->cap = nc;
    }
    o->buf[o->len] = c;
    o->src[o->len] = src;
    o->len++;
}

static void out_utf8(outbuf *o, uint32_t cp, size_t src) {
    if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) cp = 0xfffd;
    if (cp < 0x80)
        out_byte(o, (char)cp, src);
    else if (cp < 0x800) {
        out_byte(o, (char)(0xc0 | (cp >> 6)), src);
        out_byte(o, (char)(0x80 | (cp & 0x3f)), src);
    } else if (cp < 0x10000) {
        out_byte(o, (char)(0xe0 | (cp >> 12)), src);
        out_byte(o, (char)(0x80 | ((cp >> 6) & 0x3f)), src);
        out_byte(o, (char)(0x80 | (cp & 0x3f)), src);
    } else {
        out_byte(o, (char)(0xf0 | (cp >> 18)), src);
        out_byte(o, (char)(0x80 | ((cp >> 12) & 0x3f)), src);
        out_byte(o, (char)(0x80 | ((cp >> 6) & 0x3f)), src);
        out_byte(o, (char)(0x80 | (cp & 0x3f)), src);
    }
}

/* Number of newlines at the end of the output (spaces ignored), and whether it ends in a space. */
static int trailing_newlines(const outbuf *o) {
    int n = 0;
    for (size_t i = o->len; i > 0; i--) {
        char c = o->buf[i - 1];
        if (c == '\n')
            n++;
        else if (c != ' ')
            break;
    }
    return o->len == 0 ? 2 : n;
}

/* Ensures at least n (1 or 2) line breaks end the output, dropping trailing spaces first. */
static void out_break(outbuf *o, int n, size_t src) {
    while (o->len && o->buf[o->len - 1] == ' ') o->len--;
    for (int have = trailing_newlines(o); have < n; have++) out_byte(o, '\n', src);
}

/* Collapsed whitespace: one space, never at the start of a line. */
static void out_space(outbuf *o, size_t src) {
    if (o->len == 0) return;
    char last = o->buf[o->len - 1];
    if (last != ' ' && last != '\n') out_byte(o, ' ', src);
}

/* ---- HTML -------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    uint32_t cp;
} entity;

/* The named entities that show up in ordinary documents; unknown ones stay literal. */
static const entity entities[] = {
    {"amp", '&'},      {"lt", '<'},        {"gt", '>'},       {"quot", '"'},     {"apos", '\''},     {"nbsp", 0xa0},
    {"copy", 0xa9},    {"reg", 0xae},      {"trade", 0x2122}, {"mdash", 0x2014}, {"ndash", 0x2013},  {"hellip", 0x2026},
    {"lsquo", 0x2018}, {"rsquo", 0x2019},  {"ldquo", 0x201c}, {"rdquo", 0x201d}, {"laquo", 0xab},    {"raquo", 0xbb},
    {"bull", 0x2022},  {"middot", 0xb7},   {"deg", 0xb0},     {"plusmn", 0xb1},  {"times", 0xd7},    {"divide", 0xf7},
    {"euro", 0x20ac},  {"pound", 0xa3},    {"yen", 0xa5},     {"cent", 0xa2},    {"sect", 0xa7},     {"para", 0xb6},
    {"eacute", 0xe9},  {"egrave", 0xe8},   {"ecirc", 0xea},   {"aacute", 0xe1},  {"agrave", 0xe0},   {"acirc", 0xe2},
    {"auml", 0xe4},    {"ouml", 0xf6},     {"uuml", 0xfc},    {"Auml", 0xc4},    {"Ouml", 0xd6},     {"Uuml", 0xdc},
    {"szlig", 0xdf},   {"ccedil", 0xe7},   {"ntilde", 0xf1},  {"oacute", 0xf3},  {"iacute", 0xed},   {"uacute", 0xfa},
    {"larr", 0x2190},  {"rarr", 0x2192},   {"uarr", 0x2191},  {"darr", 0x2193},  {"le", 0x2264},     {"ge", 0x2265},
    {"ne", 0x2260},    {"shy", 0xad},      {"zwj", 0x200d},   {"zwnj", 0x200c},  {"thinsp", 0x2009}, {"ensp", 0x2002},
    {"emsp", 0x2003},  {"hearts", 0x2665}, {"micro", 0xb5},   {"frac12", 0xbd},  {"iexcl", 0xa1},    {"iquest", 0xbf},
};

/* Decodes the entity at s[0] == '&' (n bytes available). Returns bytes consumed (0 = not an entity). */
static size_t decode_entity(const char *s, size_t n, uint32_t *cp) {
    size_t i = 1;
    if (i < n && s[i] == '#') {
        i++;
        int base = 10;
        if (i < n && (s[i] == 'x' || s[i] == 'X')) base = 16, i++;
        uint32_t v = 0;
        size_t start = i;
        while (i < n && i - start < 8) {
            char c = s[i];
            int d = c >= '0' && c <= '9'                 ? c - '0'
                    : base == 16 && c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : base == 16 && c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                         : -1;
            if (d < 0) break;
            v = v * (uint32_t)base + (uint32_t)d;
            i++;
        }
        if (i == start || i >= n || s[i] != ';') return 0;
        *cp = v;
        return i + 1;
    }
    size_t start = i;
    while (i < n && i - start < 10 &&
           ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9')))
        i++;
    if (i == start || i >= n || s[i] != ';') return 0;
    for (size_t k = 0; k < sizeof entities / sizeof entities[0]; k++)
        if (strlen(entities[k].name) == i - start && memcmp(entities[k].name, s + start, i - start) == 0) {
            *cp = entities[k].cp;
            return i + 1;
        }
    return 0;
}

static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Case-insensitive search for needle in s[from, n). Returns its offset or n. */
static size_t find_ci(const char *s, size_t n, size_t from, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = from; i + m <= n; i++)
        if (strncasecmp(s + i, needle, m) == 0) return i;
    return n;
}

static bool name_in(const char *name, const char *const *list) {
    for (; *list; list++)
        if (strcmp(name, *list) == 0) return true;
    return false;
}

static const char *const block_tags[] = {
    "p",          "div",     "section", "article", "header", "footer",   "nav",    "aside",      "main",
    "blockquote", "pre",     "ul",      "ol",      "dl",     "dt",       "dd",     "table",      "thead",
    "tbody",      "tfoot",   "tr",      "hr",      "form",   "fieldset", "figure", "figcaption", "address",
    "details",    "summary", "caption", "body",    "html",   "center",   "menu",   NULL};
static const char *const raw_tags[] = {"script", "style", "noscript", "template", "textarea", "svg", "math", NULL};

/* Appends text s[a, b) with entity decoding; whitespace collapses unless pre. */
static void html_text(outbuf *o, const char *s, size_t a, size_t b, bool pre) {
    for (size_t i = a; i < b;) {
        char c = s[i];
        if (c == '&') {
            uint32_t cp;
            size_t used = decode_entity(s + i, b - i, &cp);
            if (used) {
                if (cp == 0xa0)
                    out_space(o, i); /* nbsp reads as a space for search */
                else
                    out_utf8(o, cp, i);
                i += used;
                continue;
            }
        }
        if (is_space(c)) {
            if (pre && c == '\n')
                out_byte(o, '\n', i);
            else if (pre && c != '\r')
                out_byte(o, ' ', i);
            else if (!pre)
                out_space(o, i);
            i++;
            continue;
        }
        out_byte(o, c, i);
        i++;
    }
}

/* Collapses whitespace of a decoded fragment into a fresh string (for <title>). */
static char *html_fragment(const char *s, size_t a, size_t b) {
    outbuf t = {0};
    html_text(&t, s, a, b, false);
    while (t.len && t.buf[t.len - 1] == ' ') t.len--;
    char *r = malloc(t.len + 1);
    if (r) {
        if (t.len) memcpy(r, t.buf, t.len);
        r[t.len] = 0;
    }
    free(t.buf);
    free(t.src);
    return r;
}

pb_status pb_store_html_to_text(const char *s, size_t n, pb_extracted *out) {
    memset(out, 0, sizeof *out);
    out->kind = PB_DOC_HTML;
    outbuf o = {0};
    char *title = NULL, *h1 = NULL;
    size_t h1_start = 0;
    int in_heading = 0, pre = 0;
    size_t i = 0, text_start = 0;
    while (i < n) {
        if (s[i] != '<') {
            i++;
            continue;
        }
        /* a '<' not followed by a tag start is text */
        char c1 = i + 1 < n ? s[i + 1] : 0;
        if (!(is_alpha(c1) || c1 == '/' || c1 == '!' || c1 == '?')) {
            i++;
            continue;
        }
        html_text(&o, s, text_start, i, pre > 0);
        size_t tag = i;
        if (n - i >= 4 && memcmp(s + i, "<!--", 4) == 0) { /* comment */
            size_t e = i + 4;
            while (e + 3 <= n && memcmp(s + e, "-->", 3) != 0) e++;
            i = e + 3 <= n ? e + 3 : n;
            text_start = i;
            continue;
        }
        if (n - i >= 9 && memcmp(s + i, "<![CDATA[", 9) == 0) {
            size_t e = i + 9;
            while (e + 3 <= n && memcmp(s + e, "]]>", 3) != 0) e++;
            for (size_t k = i + 9; k < e && k < n; k++) out_byte(&o, s[k], k);
            i = e + 3 <= n ? e + 3 : n;
            text_start = i;
            continue;
        }
        /* tag name */
        size_t p = i + 1;
        bool closing = false;
        if (p < n && s[p] == '/') closing = true, p++;
        char name[16];
        size_t nl = 0;
        while (p < n && (is_alpha(s[p]) || (s[p] >= '0' && s[p] <= '9') || s[p] == '-' || s[p] == ':')) {
            if (nl < sizeof name - 1) name[nl++] = (char)((s[p] >= 'A' && s[p] <= 'Z') ? s[p] + 32 : s[p]);
            p++;
        }
        name[nl] = 0;
        /* end of tag, skipping quoted attribute values; an unterminated tag ends the document */
        char q = 0;
        while (p < n && (q || s[p] != '>')) {
            if (q && s[p] == q)
                q = 0;
            else if (!q && (s[p] == '"' || s[p] == '\'') && p > 0 && (s[p - 1] == '=' || is_space(s[p - 1])))
                q = s[p];
            p++;
        }
        i = p < n ? p + 1 : n;
        text_start = i;
        if (!nl) continue; /* <!DOCTYPE>, <?xml?>, </> */
        if (!closing && name_in(name, raw_tags)) {
            char endtag[24];
            snprintf(endtag, sizeof endtag, "</%s", name);
            size_t e = find_ci(s, n, i, endtag);
            size_t gt = e;
            while (gt < n && s[gt] != '>') gt++;
            i = gt < n ? gt + 1 : n;
            text_start = i;
            continue;
        }
        if (!closing && strcmp(name, "title") == 0) {
            size_t e = find_ci(s, n, i, "</title");
            if (!title) title = html_fragment(s, i, e);
            size_t gt = e;
            while (gt < n && s[gt] != '>') gt++;
            i = gt < n ? gt + 1 : n;
            text_start = i;
            continue;
        }
        if (nl == 2 && name[0] == 'h' && name[1] >= '1' && name[1] <= '6') {
            int level = name[1] - '0';
            if (!closing) {
                out_break(&o, 2, tag);
                for (int k = 0; k < level; k++) out_byte(&o, '#', tag);
                out_byte(&o, ' ', tag);
                in_heading = level;
                h1_start = o.len;
            } else if (in_heading) {
                if (in_heading == 1 && !h1 && o.len > h1_start) {
                    h1 = malloc(o.len - h1_start + 1);
                    if (h1) {
                        memcpy(h1, o.buf + h1_start, o.len - h1_start);
                        h1[o.len - h1_start] = 0;
                    }
                }
                in_heading = 0;
                out_break(&o, 2, tag);
            }
            continue;
        }
        if (in_heading) continue; /* inline markup inside a heading; keep it on one line */
        if (strcmp(name, "br") == 0)
            out_break(&o, 1, tag);
        else if (strcmp(name, "li") == 0 && !closing) {
            out_break(&o, 1, tag);
            out_byte(&o, '-', tag);
            out_byte(&o, ' ', tag);
        } else if (strcmp(name, "td") == 0 || strcmp(name, "th") == 0)
            out_space(&o, tag);
        else if (strcmp(name, "pre") == 0) {
            pre += closing ? (pre > 0 ? -1 : 0) : 1;
            out_break(&o, 2, tag);
        } else if (name_in(name, block_tags))
            out_break(&o, 2, tag);
    }
    html_text(&o, s, text_start, n, pre > 0);
    while (o.len && (o.buf[o.len - 1] == ' ' || o.buf[o.len - 1] == '\n')) o.len--;
    out_byte(&o, 0, n);
    if (o.oom) {
        free(o.buf);
        free(o.src);
        free(title);
        free(h1);
        return pb_error(PB_ERR_NOMEM, "html: out of memory");
    }
    o.len--; /* the NUL is not text, but its src entry (= n) ends the map */
    out->text = o.buf;
    out->src_off = o.src;
    out->len = o.len;
    out->src = s;
    out->src_len = n;
    out->title = title && *title ? title : h1 ? h1 : pb_strdup("");
    if (out->title == title)
        free(h1);
    else
        free(title);
    if (!out->title) {
        pb_store_extracted_free(out);
        return PB_ERR_NOMEM;
    }
    return PB_OK;
}

/* ---- titles for text and Markdown -------------------------------------------------------------- */

static char *first_line_title(const char *t, size_t n, bool markdown) {
    /* Markdown: the first ATX heading; otherwise (and as fallback) the first non-empty line. */
    for (int pass = markdown ? 0 : 1; pass < 2; pass++) {
        size_t i = 0;
        while (i < n) {
            size_t e = i;
            while (e < n && t[e] != '\n') e++;
            size_t a = i, b = e;
            if (pass == 0) {
                if (t[a] == '#') {
                    while (a < b && t[a] == '#') a++;
                    if (a < b && t[a] == ' ') {
                        while (a < b && is_space(t[a])) a++;
                        while (b > a && (is_space(t[b - 1]) || t[b - 1] == '#')) b--;
                        if (b > a) goto found;
                    }
                }
            } else {
                while (a < b && (is_space(t[a]) || t[a] == '#')) a++;
                while (b > a && is_space(t[b - 1])) b--;
                if (b > a) goto found;
            }
            i = e + 1;
            continue;
        found:
            if (b - a > 120) {
                b = a + 120;
                while (b > a && ((unsigned char)t[b] & 0xc0) == 0x80) b--; /* keep UTF-8 whole */
            }
            char *r = malloc(b - a + 1);
            if (r) {
                memcpy(r, t + a, b - a);
                r[b - a] = 0;
            }
            return r;
        }
    }
    return pb_strdup("");
}

static char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return pb_strdup(s ? s + 1 : path);
}

/* ---- PDF --------------------------------------------------------------------------------------- */

static pb_status extract_pdf(const char *path, const uint8_t *data, size_t size, pb_extracted *out) {
    if (size < 5 || memcmp(data, "%PDF-", 5) != 0) return pb_error(PB_ERR_FORMAT, "not a PDF (no %%PDF- header)");
    GError *err = NULL;
    GBytes *bytes = g_bytes_new_static(data, size);
    PopplerDocument *doc = poppler_document_new_from_bytes(bytes, NULL, &err);
    if (!doc) {
        pb_status s = pb_error(PB_ERR_FORMAT, "unreadable PDF: %s", err ? err->message : "poppler failed");
        if (err) g_error_free(err);
        g_bytes_unref(bytes);
        return s;
    }
    int n_pages = poppler_document_get_n_pages(doc);
    outbuf o = {0};
    out->page_off = calloc(n_pages > 0 ? (size_t)n_pages : 1, sizeof *out->page_off);
    out->n_pages = n_pages;
    for (int i = 0; i < n_pages && out->page_off; i++) {
        if (i) out_break(&o, 2, o.len);
        out->page_off[i] = o.len;
        PopplerPage *pg = poppler_document_get_page(doc, i);
        if (!pg) continue;
        char *t = poppler_page_get_text(pg);
        if (t) {
            size_t tl = strlen(t);
            for (size_t k = 0; k < tl;) {
                int l = utf8_len((const uint8_t *)t + k, tl - k);
                if (!l) { /* poppler should give UTF-8; never trust it blindly */
                    out_utf8(&o, 0xfffd, o.len);
                    k++;
                    continue;
                }
                if (t[k] == '\f')
                    out_byte(&o, '\n', o.len);
                else
                    for (int m = 0; m < l; m++) out_byte(&o, t[k + (size_t)m], o.len);
                k += (size_t)l;
            }
            g_free(t);
        }
        g_object_unref(pg);
    }
    char *title = poppler_document_get_title(doc);
    g_object_unref(doc);
    g_bytes_unref(bytes);
    out_byte(&o, 0, o.len);
    if (o.oom || !out->page_off) {
        g_free(title);
        free(o.buf);
        free(o.src);
        return pb_error(PB_ERR_NOMEM, "pdf: out of memory");
    }
    free(o.src); /* PDF offsets are text offsets; the page map gives the location */
    out->text = o.buf;
    out->len = o.len - 1;
    if (title && *title)
        out->title = pb_strdup(title);
    else
        out->title = base_name(path);
    g_free(title);
    size_t k = 0;
    while (k < out->len && is_space(out->text[k])) k++;
    if (k == out->len)
        return pb_error(PB_ERR_FORMAT, "PDF has no extractable text (%d pages; scanned images?)", n_pages);
    return out->title ? PB_OK : PB_ERR_NOMEM;
}

/* ---- other charsets ------------------------------------------------------------------------------ */

static bool is_utf8(const uint8_t *d, size_t n) {
    for (size_t i = 0; i < n;) {
        int l = utf8_len(d + i, n - i);
        if (!l) return false;
        i += (size_t)l;
    }
    return true;
}

/* The charset an HTML file declares in its first 4 KiB (<meta charset=X> or content="...; charset=X"). */
static bool html_charset(const uint8_t *d, size_t n, char *out, size_t cap) {
    size_t lim = n < 4096 ? n : 4096;
    for (size_t i = 0; i + 8 <= lim; i++) {
        if (strncasecmp((const char *)d + i, "charset=", 8) != 0) continue;
        size_t j = i + 8, k = 0;
        while (j < lim && (d[j] == '"' || d[j] == '\'' || d[j] == ' ')) j++;
        while (j < lim && k + 1 < cap && (isalnum(d[j]) || d[j] == '-' || d[j] == '_' || d[j] == ':' || d[j] == '.'))
            out[k++] = (char)d[j++];
        out[k] = 0;
        return k > 0;
    }
    return false;
}

/* Converts n bytes from charset to UTF-8 with iconv (glibc). Heap string (NUL-terminated) or NULL with
 * pb_error set: an unknown charset, or bytes that are not valid in it. */
static char *to_utf8(const uint8_t *d, size_t n, const char *charset, size_t *out_len) {
    iconv_t cd = iconv_open("UTF-8", charset);
    if (cd == (iconv_t)-1) {
        pb_error(PB_ERR_FORMAT, "not UTF-8, and the declared charset '%s' is unknown", charset);
        return NULL;
    }
    size_t cap = n * 4 + 16;
    char *out = malloc(cap);
    if (!out) {
        iconv_close(cd);
        pb_error(PB_ERR_NOMEM, "extract: out of memory converting %zu bytes", n);
        return NULL;
    }
    char *in = (char *)d, *w = out;
    size_t in_left = n, out_left = cap - 1;
    size_t r = iconv(cd, &in, &in_left, &w, &out_left);
    int err = errno;
    iconv_close(cd);
    if (r == (size_t)-1) {
        free(out);
        pb_error(PB_ERR_FORMAT, "not valid %s text (byte 0x%02x at offset %zu: %s)", charset, (unsigned)*(uint8_t *)in,
                 (size_t)(in - (char *)d), strerror(err));
        return NULL;
    }
    *w = 0;
    *out_len = (size_t)(w - out);
    return out;
}

/* ---- entry ------------------------------------------------------------------------------------- */

pb_status pb_store_extract(const char *path, pb_doc_kind kind, const uint8_t *data, size_t size, pb_extracted *out) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    pb_status s;
    if (kind == PB_DOC_PDF) {
        s = extract_pdf(path, data, size, out);
        if (s) pb_store_extracted_free(out);
        return s;
    }
    /* Not UTF-8 (and not binary): convert from the charset HTML declares, else from Windows-1252 (which
     * covers ISO-8859-1's text); Latin-1 as the last resort maps every byte. Line numbers stay those of the
     * file; byte offsets are then offsets in the UTF-8 conversion. */
    if (!memchr(data, 0, size) && !is_utf8(data, size)) {
        char cs[40] = "";
        size_t clen = 0;
        char *conv = NULL;
        if (kind == PB_DOC_HTML && html_charset(data, size, cs, sizeof cs) && strcasecmp(cs, "utf-8") &&
            strcasecmp(cs, "utf8")) {
            if (!(conv = to_utf8(data, size, cs, &clen))) return pb_error_prefix(PB_ERR_FORMAT, "HTML: ");
        } else {
            snprintf(cs, sizeof cs, "WINDOWS-1252");
            if (!(conv = to_utf8(data, size, cs, &clen))) {
                snprintf(cs, sizeof cs, "ISO-8859-1");
                if (!(conv = to_utf8(data, size, cs, &clen))) return PB_ERR_FORMAT;
            }
        }
        s = pb_store_extract(path, kind, (const uint8_t *)conv, clen, out);
        if (s) {
            free(conv);
            return pb_error_prefix(s, "(converted from %s) ", cs);
        }
        out->converted = conv; /* src may point into it */
        snprintf(out->charset, sizeof out->charset, "%s", cs);
        return PB_OK;
    }
    if ((s = pb_store_check_text(data, size))) return s;
    if (kind == PB_DOC_HTML) {
        if ((s = pb_store_html_to_text((const char *)data, size, out))) return s;
    } else {
        out->text = malloc(size + 1);
        if (!out->text) return pb_error(PB_ERR_NOMEM, "extract: out of memory (%zu bytes)", size);
        memcpy(out->text, data, size);
        out->text[size] = 0;
        out->len = size;
        out->src = (const char *)data;
        out->src_len = size;
        out->title = first_line_title(out->text, size, kind == PB_DOC_MARKDOWN);
        if (!out->title) {
            pb_store_extracted_free(out);
            return PB_ERR_NOMEM;
        }
    }
    size_t k = 0;
    while (k < out->len && is_space(out->text[k])) k++;
    if (k == out->len) {
        pb_store_extracted_free(out);
        return pb_error(PB_ERR_FORMAT, "no text");
    }
    if (!out->title[0]) {
        free(out->title);
        out->title = base_name(path);
        if (!out->title) {
            pb_store_extracted_free(out);
            return PB_ERR_NOMEM;
        }
    }
    return PB_OK;
}
