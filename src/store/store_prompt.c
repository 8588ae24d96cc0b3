/* store_prompt.c -- retrieved chunks -> a grounded prompt with numbered sources that fits a token budget,
 * the citation table behind the numbers, and the parser that finds which [n] an answer cited. */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char instructions[] =
    "Answer the question using only the numbered sources below. After each statement, cite the source it comes "
    "from with its number in square brackets, like [1] or [2]. If the sources do not contain the answer, say that "
    "you do not know. Do not use any other knowledge.\n\nSources:\n\n";

typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->len + n + 1) nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static int64_t count(pb_store_count_fn fn, void *user, const char *t, size_t n) {
    return fn ? fn(user, t, n) : pb_store_estimate_tokens(t, n);
}

void pb_store_prompt_free(pb_store_prompt *p) {
    if (!p) return;
    free(p->text);
    for (int i = 0; i < p->n_cites; i++) {
        free(p->cites[i].path);
        free(p->cites[i].title);
        free(p->cites[i].heading);
    }
    free(p->cites);
    memset(p, 0, sizeof *p);
}

/* "[n] (name:lines) heading\n" (the heading left out where the text opens with it) -- the file name only: the full path
 * is in the citation table. */
static void source_header(sbuf *b, int num, const pb_store_hit *h) {
    const char *slash = strrchr(h->path, '/');
    char loc[512], head[64];
    pb_store_format_location(slash ? slash + 1 : h->path, h->line_start, h->line_end, h->page, loc, sizeof loc);
    snprintf(head, sizeof head, "[%d] (", num);
    sb_str(b, head);
    sb_str(b, loc);
    sb_str(b, ")");
    if (!pb_store_heading_repeats(h->heading, h->text)) { /* a heading the text opens with is not said twice */
        sb_str(b, " ");
        sb_str(b, h->heading);
    }
    sb_str(b, "\n");
}

pb_status pb_store_prompt_build(const char *question, const pb_store_hit *hits, int n_hits, int64_t budget_tokens,
                                pb_store_count_fn cnt, void *user, pb_store_prompt *out) {
    memset(out, 0, sizeof *out);
    sbuf tail = {0}, b = {0};
    sb_str(&tail, "Question: ");
    sb_str(&tail, question);
    sb_str(&tail, "\n");
    sb_str(&b, instructions);
    if (tail.oom || b.oom) {
        free(tail.s);
        free(b.s);
        return pb_error(PB_ERR_NOMEM, "prompt: out of memory");
    }
    int64_t used = count(cnt, user, b.s, b.len) + count(cnt, user, tail.s, tail.len);
    if (used > budget_tokens) {
        free(tail.s);
        free(b.s);
        return pb_error(PB_ERR_CONTEXT_FULL,
                        "prompt: the instructions and the question need %lld tokens, the budget is"
                        " %lld",
                        (long long)used, (long long)budget_tokens);
    }
    out->cites = pb_calloc(n_hits > 0 ? (size_t)n_hits : 1, sizeof *out->cites);
    if (!out->cites) {
        free(tail.s);
        free(b.s);
        return PB_ERR_NOMEM;
    }
    for (int i = 0; i < n_hits; i++) {
        const pb_store_hit *h = &hits[i];
        int num = out->n_cites + 1;
        sbuf e = {0};
        source_header(&e, num, h);
        size_t head_len = e.len;
        sb_str(&e, h->text);
        sb_str(&e, "\n\n");
        if (e.oom) {
            free(e.s);
            b.oom = true;
            break;
        }
        int64_t t = count(cnt, user, e.s, e.len);
        bool cut = false;
        if (used + t > budget_tokens) {
            /* Cut at a word boundary: the longest prefix that fits (binary search over the text). */
            int64_t room = budget_tokens - used;
            if (room < 32 + count(cnt, user, e.s, head_len)) {
                free(e.s);
                break;
            }
            size_t tl = strlen(h->text), lo = 0, hi = tl;
            while (hi - lo > 1) {
                size_t mid = (lo + hi) / 2;
                while (mid > lo && h->text[mid] != ' ' && h->text[mid] != '\n') mid--;
                if (mid == lo) { /* no space in [lo, mid] (Chinese, Japanese, a long URL): cut between characters (a
                                  * source without spaces was dropped whole) */
                    mid = (lo + hi) / 2;
                    while (mid > lo && ((unsigned char)h->text[mid] & 0xC0) == 0x80) mid--;
                }
                if (mid == lo) break;
                e.len = head_len;
                sb_add(&e, h->text, mid);
                sb_str(&e, " ...\n\n");
                if (count(cnt, user, e.s, e.len) <= room)
                    lo = mid;
                else
                    hi = mid;
            }
            if (lo == 0) {
                free(e.s);
                break;
            }
            e.len = head_len;
            sb_add(&e, h->text, lo);
            sb_str(&e, " ...\n\n");
            t = count(cnt, user, e.s, e.len);
            cut = true;
        }
        sb_add(&b, e.s, e.len);
        free(e.s);
        used += t;
        pb_store_citation *c = &out->cites[out->n_cites++];
        c->num = num;
        c->chunk_id = h->chunk_id;
        c->path = pb_strdup(h->path);
        c->title = pb_strdup(h->title);
        c->heading = pb_strdup(h->heading);
        c->line_start = h->line_start;
        c->line_end = h->line_end;
        c->page = h->page;
        c->state = h->state;
        if (!c->path || !c->title || !c->heading) b.oom = true;
        if (cut) {
            out->n_truncated++;
            break;
        }
    }
    sb_add(&b, tail.s, tail.len);
    free(tail.s);
    if (b.oom) {
        free(b.s);
        pb_store_prompt_free(out);
        return pb_error(PB_ERR_NOMEM, "prompt: out of memory");
    }
    out->text = b.s;
    out->n_tokens = count(cnt, user, b.s, b.len);
    return PB_OK;
}

int pb_store_cites_used(const char *answer, int n_cites, bool *used, int *n_invalid) {
    int found = 0, bad = 0;
    for (int i = 0; i < n_cites; i++) used[i] = false;
    for (const char *p = answer; (p = strchr(p, '[')); p++) {
        /* accept "[3]", "[1, 2]", "[1][2]", "[2-4]"; anything else inside brackets is not a citation */
        const char *q = p + 1;
        long nums[64];
        int nn = 0;
        bool ok = true;
        while (ok) {
            while (*q == ' ') q++;
            if (*q < '0' || *q > '9') {
                ok = false;
                break;
            }
            long a = 0;
            while (*q >= '0' && *q <= '9' && a < 100000) a = a * 10 + (*q++ - '0');
            long z = a;
            while (*q == ' ') q++;
            if (*q == '-' || (unsigned char)*q == 0xe2) { /* '-' or an en dash (E2 80 93) */
                q += *q == '-' ? 1 : (q[1] && q[2] ? 3 : 1);
                while (*q == ' ') q++;
                z = 0;
                if (*q < '0' || *q > '9') {
                    ok = false;
                    break;
                }
                while (*q >= '0' && *q <= '9' && z < 100000) z = z * 10 + (*q++ - '0');
                while (*q == ' ') q++;
            }
            for (long v = a; v <= z && v - a < 64 && nn < 64; v++) nums[nn++] = v;
            if (*q == ',' || *q == ';') {
                q++;
                continue;
            }
            if (*q == ']') break;
            ok = false;
        }
        if (!ok || nn == 0) continue;
        for (int i = 0; i < nn; i++) {
            if (nums[i] >= 1 && nums[i] <= n_cites) {
                if (!used[nums[i] - 1]) found++;
                used[nums[i] - 1] = true;
            } else {
                bad++;
            }
        }
    }
    if (n_invalid) *n_invalid = bad;
    return found;
}
