/* store_chunk.c -- extracted text -> token-bounded chunks that follow headings and paragraphs, with
 * overlap, heading paths and source positions (bytes, lines, pages). No database or I/O here. */
#include "store/store.h"
#include "tokenizer/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

size_t pb_store_cjk_len(const char *t, size_t n) {
    const uint8_t *u = (const uint8_t *)t;
    if (n < 3 || u[0] < 0xE0) return 0; /* every such character takes 3 or 4 bytes */
    const int len = pb_utf8_char_len(u, n);
    if (len < 3) return 0;
    const uint32_t cp = len == 3 ? ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3Fu)
                                 : ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
                                       ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3Fu);
    const bool cjk = (cp >= 0x2E80 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7AF) ||
                     (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFF00 && cp <= 0xFFEF) ||
                     (cp >= 0x20000 && cp <= 0x3FFFF);
    return cjk ? (size_t)len : 0;
}

/* Bytes of the CJK character that starts at t[i] (before b), or 0. Each such character is a word of its own here
 * (a token or more for any tokenizer): counted by whitespace, a page of Chinese was one "word" of 2 tokens and one
 * chunk. */
static size_t cjk_len(const char *t, size_t i, size_t b) { return pb_store_cjk_len(t + i, b - i); }

/* The start of the character that ends at t[i - 1] (its lead byte), not before a. */
static size_t char_start(const char *t, size_t a, size_t i) {
    size_t l = i - 1;
    while (l > a && ((unsigned char)t[l] & 0xC0) == 0x80) l--;
    return l;
}

/* The end of the word that starts at t[i] (not whitespace), at most b: one CJK character, or a run of other
 * characters up to whitespace or a CJK character. */
static size_t word_end(const char *t, size_t i, size_t b) {
    size_t k = cjk_len(t, i, b);
    if (k) return i + k;
    while (i < b && !is_ws(t[i]) && !cjk_len(t, i, b)) i++;
    return i;
}

int64_t pb_store_estimate_tokens(const char *text, size_t len) {
    int64_t words = 0, cjk = 0;
    bool in = false;
    for (size_t i = 0; i < len; i++) {
        size_t k = cjk_len(text, i, len);
        if (k) { /* a token of its own */
            cjk++;
            in = false;
            i += k - 1;
            continue;
        }
        bool w = !is_ws(text[i]);
        if (w && !in) words++;
        in = w;
    }
    /* ceil(words * 1.3) in integers, and a token a CJK character */
    return (words * 13 + 9) / 10 + cjk;
}

int64_t pb_store_estimate_count_fn(void *user, const char *text, size_t len) {
    (void)user;
    return pb_store_estimate_tokens(text, len);
}

pb_chunk_params pb_chunk_default_params(void) {
    pb_chunk_params p = {0};
    p.target_tokens = 200;
    p.overlap_tokens = 40;
    return p;
}

void pb_store_chunks_free(pb_store_chunk *c, int64_t n) {
    if (!c) return;
    for (int64_t i = 0; i < n; i++) {
        free(c[i].heading);
        free(c[i].text);
    }
    free(c);
}

/* ---- units: headings and paragraph pieces ------------------------------------------------------ */

typedef struct {
    size_t a, b; /* text range [a, b) */
    int level;   /* 1..6 heading, 0 paragraph piece, PAGE_BREAK */
    int64_t n_tokens;
} unit;

typedef struct {
    const pb_extracted *e;
    const pb_chunk_params *p;
    unit *u;
    size_t n, cap;
    bool oom;
} units;

static int64_t count(const pb_chunk_params *p, const char *t, size_t n) {
    return p->count ? p->count(p->count_user, t, n) : pb_store_estimate_tokens(t, n);
}

static void add_unit(units *us, size_t a, size_t b, int level) {
    const char *t = us->e->text;
    while (a < b && is_ws(t[a])) a++;
    while (b > a && is_ws(t[b - 1])) b--;
    if (a == b || us->oom) return;
    if (us->n == us->cap) {
        size_t nc = us->cap ? us->cap * 2 : 64;
        unit *nu = realloc(us->u, nc * sizeof *nu);
        if (!nu) {
            us->oom = true;
            return;
        }
        us->u = nu;
        us->cap = nc;
    }
    us->u[us->n++] = (unit){a, b, level, count(us->p, t + a, b - a)};
}

#define PAGE_BREAK 7 /* unit level of a forced chunk boundary (no text) */

static void add_break(units *us, size_t at) {
    if (us->oom) return;
    if (us->n == us->cap) {
        size_t nc = us->cap ? us->cap * 2 : 64;
        unit *nu = realloc(us->u, nc * sizeof *nu);
        if (!nu) {
            us->oom = true;
            return;
        }
        us->u = nu;
        us->cap = nc;
    }
    us->u[us->n++] = (unit){at, at, PAGE_BREAK, 0};
}

/* End of the sentence or line that starts at a (exclusive), at most b. CJK full stops (。！？；, U+3002, U+FF01,
 * U+FF1F, U+FF1B) end a sentence without a space after them. */
static size_t sentence_end(const char *t, size_t a, size_t b) {
    for (size_t i = a; i < b; i++) {
        if (t[i] == '\n') return i + 1;
        if ((t[i] == '.' || t[i] == '?' || t[i] == '!' || t[i] == ';') && (i + 1 == b || is_ws(t[i + 1]))) return i + 1;
        if (i + 2 < b && (memcmp(t + i, "\xE3\x80\x82", 3) == 0 || memcmp(t + i, "\xEF\xBC\x81", 3) == 0 ||
                          memcmp(t + i, "\xEF\xBC\x9F", 3) == 0 || memcmp(t + i, "\xEF\xBC\x9B", 3) == 0))
            return i + 3;
    }
    return b;
}

/* The end of the n-th word from a (exclusive), at most b. */
static size_t words_end(const char *t, size_t a, size_t b, int64_t n) {
    size_t i = a;
    for (int64_t w = 0; w < n && i < b; w++) {
        while (i < b && is_ws(t[i])) i++;
        if (i < b) i = word_end(t, i, b);
    }
    return i;
}

/* Adds a paragraph, split into pieces of at most target tokens at sentence, then word boundaries. */
static void add_paragraph(units *us, size_t a, size_t b) {
    const char *t = us->e->text;
    int64_t target = us->p->target_tokens;
    if (count(us->p, t + a, b - a) <= target) {
        add_unit(us, a, b, 0);
        return;
    }
    size_t start = a;
    while (start < b) {
        /* A piece never holds more than target words (every word is at least one token, for the estimate and for
         * a tokenizer), so the search for its end looks no further than 2 * target + 16 words: looking to the end
         * of the paragraph made a paragraph without sentence ends quadratic (a 19 MB one-line file: > 10 min). */
        size_t lim = words_end(t, start, b, target < INT64_MAX / 4 ? 2 * target + 16 : INT64_MAX);
        size_t end = start, best = start;
        while (end < lim) {
            size_t next = sentence_end(t, end, lim);
            if (count(us->p, t + start, next - start) > target) break;
            best = end = next;
        }
        if (best == start) { /* one sentence is too long: cut at word boundaries */
            size_t i = start;
            while (i < lim) {
                size_t j = i;
                while (j < lim && is_ws(t[j])) j++;
                if (j < lim) j = word_end(t, j, lim);
                if (best > start && count(us->p, t + start, j - start) > target) break;
                best = i = j;
            }
        }
        add_unit(us, start, best, 0);
        start = best;
    }
}

/* ATX heading "## Text" (up to 3 leading spaces): level, and the text range. */
static int heading_level(const char *t, size_t a, size_t b, size_t *ta, size_t *tb) {
    size_t i = a;
    while (i < b && i - a < 3 && t[i] == ' ') i++;
    int level = 0;
    while (i < b && t[i] == '#' && level < 7) level++, i++;
    if (level == 0 || level > 6 || (i < b && t[i] != ' ' && t[i] != '\t')) return 0;
    while (i < b && is_ws(t[i])) i++;
    size_t e = b;
    while (e > i && (is_ws(t[e - 1]) || t[e - 1] == '#')) e--;
    if (e == i) return 0;
    *ta = i;
    *tb = e;
    return level;
}

static void split_units(units *us) {
    const pb_extracted *e = us->e;
    const char *t = e->text;
    bool headings = e->kind == PB_DOC_MARKDOWN || e->kind == PB_DOC_HTML;
    bool fence = false;
    size_t para = (size_t)-1, i = 0;
    int next_page = 1; /* PDF: every page starts a new chunk, so a citation names one page */
    while (i < e->len) {
        if (e->page_off && next_page < e->n_pages && i >= e->page_off[next_page]) {
            if (para != (size_t)-1) add_paragraph(us, para, i);
            para = (size_t)-1;
            add_break(us, i);
            while (next_page < e->n_pages && i >= e->page_off[next_page]) next_page++;
        }
        size_t le = i;
        while (le < e->len && t[le] != '\n') le++;
        size_t k = i;
        while (k < le && (t[k] == ' ' || t[k] == '\t' || t[k] == '\r')) k++;
        bool blank = k == le;
        size_t ha, hb;
        int level = 0;
        if (headings && le - k >= 3 && (memcmp(t + k, "```", 3) == 0 || memcmp(t + k, "~~~", 3) == 0))
            fence = !fence;
        else if (headings && !fence)
            level = heading_level(t, i, le, &ha, &hb);
        if (blank || level) {
            if (para != (size_t)-1) add_paragraph(us, para, i);
            para = (size_t)-1;
            if (level) add_unit(us, i, le, level);
        } else if (para == (size_t)-1) {
            para = i;
        }
        i = le < e->len ? le + 1 : le;
    }
    if (para != (size_t)-1) add_paragraph(us, para, e->len);
}

/* ---- positions --------------------------------------------------------------------------------- */

typedef struct {
    size_t *starts; /* byte offset of each line start in the coordinate space */
    size_t n;
} lines;

static bool lines_init(lines *l, const char *s, size_t n) {
    size_t cnt = 1;
    for (size_t i = 0; i < n; i++) cnt += s[i] == '\n';
    l->starts = malloc(cnt * sizeof *l->starts);
    if (!l->starts) return false;
    l->n = 0;
    l->starts[l->n++] = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\n') l->starts[l->n++] = i + 1;
    return true;
}

/* 1-based line containing byte off. */
static int64_t line_of(const lines *l, size_t off) {
    size_t lo = 0, hi = l->n;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (l->starts[mid] <= off)
            lo = mid;
        else
            hi = mid;
    }
    return (int64_t)lo + 1;
}

/* ---- packing ----------------------------------------------------------------------------------- */

typedef struct {
    const pb_extracted *e;
    const pb_chunk_params *p;
    lines ln;
    pb_store_chunk *c;
    int64_t n, cap;
    bool oom;
    const char *title;
    size_t stack_a[7], stack_b[7]; /* current heading text of each level (0 = none) */
} packer;

static char *heading_path(packer *pk) {
    size_t tl = strlen(pk->title), len = tl;
    for (int l = 1; l <= 6; l++)
        if (pk->stack_b[l] > pk->stack_a[l]) len += 3 + pk->stack_b[l] - pk->stack_a[l];
    char *h = malloc(len + 1);
    if (!h) return NULL;
    memcpy(h, pk->title, tl);
    size_t o = tl;
    for (int l = 1; l <= 6; l++) {
        size_t a = pk->stack_a[l], b = pk->stack_b[l];
        if (b <= a) continue;
        /* a leading "# Title" that repeats the document title is not repeated in the path */
        if (o == tl && b - a == tl && memcmp(pk->e->text + a, pk->title, tl) == 0) continue;
        if (o) memcpy(h + o, " > ", 3), o += 3;
        memcpy(h + o, pk->e->text + a, b - a);
        o += b - a;
    }
    h[o] = 0;
    return h;
}

static void emit(packer *pk, size_t a, size_t b) {
    const pb_extracted *e = pk->e;
    while (a < b && is_ws(e->text[a])) a++;
    while (b > a && is_ws(e->text[b - 1])) b--;
    if (a == b || pk->oom) return;
    if (pk->n == pk->cap) {
        int64_t nc = pk->cap ? pk->cap * 2 : 16;
        pb_store_chunk *ncs = realloc(pk->c, (size_t)nc * sizeof *ncs);
        if (!ncs) {
            pk->oom = true;
            return;
        }
        pk->c = ncs;
        pk->cap = nc;
    }
    pb_store_chunk *c = &pk->c[pk->n];
    memset(c, 0, sizeof *c);
    c->text = malloc(b - a + 1);
    c->heading = heading_path(pk);
    if (!c->text || !c->heading) {
        free(c->text);
        free(c->heading);
        pk->oom = true;
        return;
    }
    memcpy(c->text, e->text + a, b - a);
    c->text[b - a] = 0;
    c->n_tokens = count(pk->p, c->text, b - a);
    size_t sa = e->src_off ? e->src_off[a] : a, sb = e->src_off ? e->src_off[b - 1] + 1 : b;
    if (sb < sa) sb = sa;
    c->byte_start = sa;
    c->byte_end = sb;
    c->line_start = line_of(&pk->ln, sa);
    c->line_end = line_of(&pk->ln, sb > sa ? sb - 1 : sa);
    if (e->page_off)
        for (int pg = 0; pg < e->n_pages; pg++)
            if (e->page_off[pg] <= a) c->page = pg + 1;
    pk->n++;
}

/* Start of the overlap for a chunk that follows [a, b): back from b by about overlap tokens of whole words
 * (estimated at 1.3 tokens per word), never before a. */
static size_t overlap_start(const packer *pk, size_t a, size_t b) {
    const char *t = pk->e->text;
    int64_t want = pk->p->overlap_tokens;
    if (want <= 0) return b;
    size_t i = b;
    int64_t words = 0, cjk = 0;
    while (i > a && (words * 13 + 9) / 10 + cjk < want) {
        while (i > a && is_ws(t[i - 1])) i--;
        if (i == a) break;
        /* the word that ends at i: one CJK character, or other characters back to whitespace or a CJK one */
        size_t l = char_start(t, a, i);
        if (cjk_len(t, l, i)) {
            i = l, cjk++;
            continue;
        }
        while (i > a && !is_ws(t[i - 1]) && !cjk_len(t, l = char_start(t, a, i), i)) i = l;
        words++;
    }
    return i;
}

pb_status pb_store_chunk_doc(const pb_extracted *e, const char *title, const pb_chunk_params *p, pb_store_chunk **out,
                             int64_t *n_out) {
    *out = NULL;
    *n_out = 0;
    pb_chunk_params dp = pb_chunk_default_params();
    if (!p) p = &dp;
    if (p->target_tokens < 16 || p->overlap_tokens < 0 || p->overlap_tokens >= p->target_tokens)
        return pb_error(PB_ERR_INVALID_ARG,
                        "chunk: target %lld tokens / overlap %lld tokens (need target >= 16,"
                        " 0 <= overlap < target)",
                        (long long)p->target_tokens, (long long)p->overlap_tokens);
    units us = {e, p, NULL, 0, 0, false};
    split_units(&us);
    packer pk = {0};
    pk.e = e;
    pk.p = p;
    pk.title = title ? title : "";
    bool ok = us.oom ? false : e->src ? lines_init(&pk.ln, e->src, e->src_len) : lines_init(&pk.ln, e->text, e->len);
    if (!ok) {
        free(us.u);
        return pb_error(PB_ERR_NOMEM, "chunk: out of memory");
    }
    bool have = false;
    size_t cs = 0, ce = 0;
    int64_t ctoks = 0, n_para = 0;
    for (size_t i = 0; i < us.n; i++) {
        unit *u = &us.u[i];
        if (u->level == PAGE_BREAK) {
            if (have) emit(&pk, cs, ce);
            have = false;
            continue;
        }
        if (u->level) {
            if (have) emit(&pk, cs, ce);
            /* the new heading replaces its level and clears deeper ones */
            size_t ta = u->a, tb = u->b;
            heading_level(e->text, u->a, u->b, &ta, &tb);
            pk.stack_a[u->level] = ta;
            pk.stack_b[u->level] = tb;
            for (int l = u->level + 1; l <= 6; l++) pk.stack_a[l] = pk.stack_b[l] = 0;
            have = true;
            cs = u->a;
            ce = u->b;
            ctoks = u->n_tokens;
            n_para = 0;
            continue;
        }
        if (have && n_para > 0 && ctoks + u->n_tokens > p->target_tokens) {
            emit(&pk, cs, ce);
            size_t os = overlap_start(&pk, cs, ce);
            cs = os < u->a ? os : u->a;
            ctoks = os < ce ? count(p, e->text + os, ce - os) : 0;
            n_para = 0;
        } else if (!have) {
            cs = u->a;
            ctoks = 0;
            have = true;
        }
        ce = u->b;
        ctoks += u->n_tokens;
        n_para++;
    }
    if (have) emit(&pk, cs, ce);
    free(us.u);
    free(pk.ln.starts);
    if (pk.oom) {
        pb_store_chunks_free(pk.c, pk.n);
        return pb_error(PB_ERR_NOMEM, "chunk: out of memory");
    }
    *out = pk.c;
    *n_out = pk.n;
    return PB_OK;
}
