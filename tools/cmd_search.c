/* cmd_search.c -- `pocketbrain search`: ranked chunks for a query (BM25; with --embed-model also vectors,
 * fused by reciprocal rank), as text or JSON. */
#include "cli.h"
#include "cli_common.h"
#include "cli_store.h"
#include "library.h"
#include "store/store.h"
#include "store/store_embed.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "pocketbrain search --db KB.sqlite \"query\" [-k N] [--per-doc N] [--json] [--embed-model M.gguf]\n"
    "  Shows the k best chunks (default 5) with scores and sources (file:line), at most --per-doc chunks\n"
    "  of one document (default 1; 0 = no limit). A query that starts with '-' goes after --.";

/* One line of at most max bytes (NUL included) from text, whitespace collapsed, "..." when cut. */
static void snippet(const char *text, size_t max, char *out) {
    size_t o = 0;
    bool sp = false, cut = false;
    for (const char *p = text; *p; p++) {
        bool ws = *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r';
        if (ws) {
            sp = o > 0;
            continue;
        }
        if (o + 2 + 4 > max) { /* room for a space, this byte, "..." and the NUL */
            cut = true;
            break;
        }
        if (sp) out[o++] = ' ';
        sp = false;
        out[o++] = *p;
    }
    if (cut) {
        while (o && ((unsigned char)out[o - 1] & 0xc0) == 0x80) o--; /* keep UTF-8 whole */
        if (o && (unsigned char)out[o - 1] >= 0xc0) o--;
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = 0;
}

PB_CMD(search) {
    const char *db = NULL, *query = NULL, *embed = NULL;
    long k = 5, per_doc = 1;
    bool json = false, ended = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("search", usage, argc, argv, &i, name, alias, val))
        const int op = cli_operand(a, &ended); /* after "--" every argument, a query starting with '-' too */
        if (op < 0) continue;
        if (op) {
            if (query) return cli_usage_error("search", usage, "one query only (quote it): unexpected '%s'", a);
            query = a;
        } else if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            puts(usage);
            return 0;
        } else if (FLAG("--db", NULL, &v) != 0) {
            if (r < 0) return 2;
            db = v;
        } else if (FLAG("--top", "-k", &v) != 0) {
            if (r < 0 || !cli_parse_int("search", a, v, 1, 1000, &k)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--per-doc", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int("search", a, v, 0, 1000, &per_doc)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--json", NULL, NULL) != 0) {
            if (r < 0) return 2;
            json = true;
        } else if (FLAG("--embed-model", NULL, &v) != 0) {
            if (r < 0) return 2;
            if (!(embed = cli_model_arg("search", v))) return 1;
        } else
            return cli_usage_error("search", usage, "unknown option '%s'", a);
#undef FLAG
    }
    if (!db) return cli_usage_error("search", usage, "--db KB.sqlite is required");
    if (!query) return cli_usage_error("search", usage, "no query");
    pb_store *st = cli_store_open_existing("search", db, "pocketbrain ingest --db FILE PATH...");
    if (!st) return 1;
    pb_status s;
    pb_store_hit *hits = NULL;
    int n = 0;
    s = pb_store_search_bm25(st, query, (int)k, (int)per_doc, &hits, &n);
    if (!s && embed) {
        pb_store_hit *vh = NULL;
        int nv = 0;
        s = pb_store_embed_search(st, embed, query, (int)k, &vh, &nv);
        if (!s)
            s = pb_store_fuse_rrf(hits, n, vh, nv, 60, (int)k, &hits, &n);
        else
            pb_store_hits_free(hits, n), hits = NULL, n = 0;
    }
    if (!s) s = pb_store_hits_check(st, hits, n); /* a stat of each shown file: changed or gone since ingest */
    if (s) {
        pb_store_hits_free(hits, n);
        pb_store_close(st);
        return cli_fail("search", s, "search");
    }
    if (json) {
        cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "hits");
        cJSON_AddStringToObject(root, "query", query);
        cJSON_AddStringToObject(root, "ranking", embed ? "rrf(bm25, vector)" : "bm25");
        for (int i = 0; i < n; i++) {
            cJSON *h = cJSON_CreateObject();
            char loc[4200];
            pb_store_format_location(hits[i].path, hits[i].line_start, hits[i].line_end, hits[i].page, loc, sizeof loc);
            cJSON_AddNumberToObject(h, "rank", i + 1);
            cJSON_AddNumberToObject(h, "score", hits[i].score);
            cJSON_AddStringToObject(h, "path", hits[i].path);
            cJSON_AddStringToObject(h, "location", loc);
            cJSON_AddStringToObject(h, "file_state", pb_store_doc_state_name(hits[i].state));
            cJSON_AddNumberToObject(h, "line_start", (double)hits[i].line_start);
            cJSON_AddNumberToObject(h, "line_end", (double)hits[i].line_end);
            cJSON_AddNumberToObject(h, "page", hits[i].page);
            cJSON_AddStringToObject(h, "title", hits[i].title);
            cJSON_AddStringToObject(h, "heading", hits[i].heading);
            cJSON_AddNumberToObject(h, "chunk_id", (double)hits[i].chunk_id);
            cJSON_AddNumberToObject(h, "n_tokens", (double)hits[i].n_tokens);
            cJSON_AddStringToObject(h, "text", hits[i].text);
            cJSON_AddItemToArray(arr, h);
        }
        cli_json_print(root, false);
    } else {
        if (n == 0) printf("no results for \"%s\"\n", query);
        for (int i = 0; i < n; i++) {
            char loc[4200], snip[240];
            pb_store_format_location(hits[i].path, hits[i].line_start, hits[i].line_end, hits[i].page, loc, sizeof loc);
            snippet(hits[i].text, sizeof snip, snip);
            printf("%d. [%.3f] %s%s%s\n", i + 1, hits[i].score, loc, hits[i].state ? "  -- " : "",
                   pb_store_doc_state_text(hits[i].state));
            if (!pb_store_heading_repeats(hits[i].heading, hits[i].text)) printf("   %s\n", hits[i].heading);
            printf("   %s\n", snip);
        }
        size_t n_shown = n > 0 ? (size_t)n : 0;
        const char **paths = calloc(n_shown + 1, sizeof *paths);
        pb_store_doc_state *states = calloc(n_shown + 1, sizeof *states);
        for (int i = 0; paths && states && i < n; i++) paths[i] = hits[i].path, states[i] = hits[i].state;
        if (paths && states) cli_store_stale_note("search", db, paths, states, n);
        free(paths);
        free(states);
    }
    pb_store_hits_free(hits, n);
    pb_store_close(st);
    return 0;
}
