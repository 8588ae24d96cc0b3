/* store_faq.c -- the FAQ fallback: question/answer pairs in the knowledge-base file, imported from JSONL or
 * TSV, matched by BM25, and the marked fallback answer that ask/run/serve return when generation fails. */
#include "json/json.h"
#include "store/store_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static pb_status need_v3(pb_store *st) {
    if (st->version < 3) return pb_error(PB_ERR_UNSUPPORTED, "store '%s': the FAQ needs schema version 3", st->path);
    return PB_OK;
}

static bool blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n') return false;
    return true;
}

pb_status pb_store_faq_add(pb_store *st, const char *question, const char *answer, int64_t *id) {
    pb_status s = need_v3(st);
    if (s) return s;
    if (!question || blank(question)) return pb_error(PB_ERR_INVALID_ARG, "faq: empty question");
    if (!answer || blank(answer)) return pb_error(PB_ERR_INVALID_ARG, "faq: empty answer");
    if (pb_store_check_text((const uint8_t *)question, strlen(question)) ||
        pb_store_check_text((const uint8_t *)answer, strlen(answer)))
        return pb_error_prefix(PB_ERR_INVALID_ARG, "faq: ");
    sqlite3_stmt *q;
    s = pb_store_prepare(st,
                         "INSERT INTO faq(question, answer, added) VALUES (?1, ?2, ?3)"
                         " ON CONFLICT(question) DO UPDATE SET answer = excluded.answer",
                         &q);
    if (s) return s;
    sqlite3_bind_text(q, 1, question, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, answer, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, (sqlite3_int64)time(NULL));
    if (sqlite3_step(q) != SQLITE_DONE) s = pb_store_sql_error(st, "faq add");
    sqlite3_finalize(q);
    if (!s && id) {
        if ((s = pb_store_prepare(st, "SELECT id FROM faq WHERE question = ?", &q))) return s;
        sqlite3_bind_text(q, 1, question, -1, SQLITE_STATIC);
        *id = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
        sqlite3_finalize(q);
    }
    return s;
}

/* One JSONL line -> question/answer (copies in *q, *a). Only whitespace may follow the object: cJSON alone stops at
 * the end of the first value, so '{"q": "..", "a": ".."} junk' was imported. */
static pb_status parse_jsonl(const char *line, char **q, char **a) {
    size_t len = strlen(line), at;
    bool trailing;
    cJSON *j = pb_json_parse_one(line, len, &at, &trailing);
    if (trailing) return pb_error(PB_ERR_FORMAT, "more text after the JSON object (at column %zu)", at + 1);
    if (!j && pb_json_too_deep(line, len, at))
        return pb_error(PB_ERR_FORMAT, "nests arrays or objects more than %d levels deep (at column %zu)",
                        CJSON_NESTING_LIMIT, at + 1);
    if (!j) return pb_error(PB_ERR_FORMAT, "not a JSON object");
    /* cJSON keeps a string only up to a NUL: the question or answer would be cut short without a word */
    if (pb_json_has_nul_escape(line, len)) {
        cJSON_Delete(j);
        return pb_error(PB_ERR_FORMAT, "holds a NUL character (\\u0000), which a question or answer cannot");
    }
    pb_status s = PB_OK;
    const cJSON *jq = cJSON_GetObjectItemCaseSensitive(j, "question");
    const cJSON *ja = cJSON_GetObjectItemCaseSensitive(j, "answer");
    if (!jq) jq = cJSON_GetObjectItemCaseSensitive(j, "q");
    if (!ja) ja = cJSON_GetObjectItemCaseSensitive(j, "a");
    if (!cJSON_IsObject(j))
        s = pb_error(PB_ERR_FORMAT, "not a JSON object");
    else if (!cJSON_IsString(jq))
        s = pb_error(PB_ERR_FORMAT, "no string \"question\" (or \"q\")");
    else if (!cJSON_IsString(ja))
        s = pb_error(PB_ERR_FORMAT, "no string \"answer\" (or \"a\")");
    else {
        *q = pb_strdup(jq->valuestring);
        *a = pb_strdup(ja->valuestring);
        if (!*q || !*a) s = PB_ERR_NOMEM;
    }
    cJSON_Delete(j);
    return s;
}

pb_status pb_store_faq_import(pb_store *st, const char *path, int64_t *n_added) {
    *n_added = 0;
    pb_status s = need_v3(st);
    if (s) return s;
    const char *dot = strrchr(path, '.');
    bool jsonl = dot && (!strcasecmp(dot, ".jsonl") || !strcasecmp(dot, ".json") || !strcasecmp(dot, ".ndjson"));
    bool tsv = dot && (!strcasecmp(dot, ".tsv") || !strcasecmp(dot, ".tab"));
    if (!jsonl && !tsv) return pb_error(PB_ERR_INVALID_ARG, "faq import '%s': expected a .jsonl or .tsv file", path);
    char *data;
    size_t len;
    if ((s = pb_read_file(path, &data, &len))) return s;
    if ((s = pb_store_check_text((const uint8_t *)data, len))) {
        free(data);
        return pb_error_prefix(PB_ERR_FORMAT, "faq import '%s': ", path);
    }
    if ((s = pb_store_begin(st))) {
        free(data);
        return s;
    }
    int64_t line_no = 0, n = 0;
    char *line = data;
    while (line && *line && !s) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        line_no++;
        size_t ll = strlen(line);
        if (ll && line[ll - 1] == '\r') line[--ll] = 0;
        if (!blank(line) && !(tsv && line[0] == '#')) {
            char *q = NULL, *a = NULL;
            if (jsonl) {
                s = parse_jsonl(line, &q, &a);
            } else {
                char *tab = strchr(line, '\t');
                if (!tab)
                    s = pb_error(PB_ERR_FORMAT, "no TAB between question and answer");
                else {
                    *tab = 0;
                    q = pb_strdup(line);
                    a = pb_strdup(tab + 1);
                    if (!q || !a) s = PB_ERR_NOMEM;
                }
            }
            if (!s) s = pb_store_faq_add(st, q, a, NULL);
            if (s)
                pb_error_prefix(s, "faq import '%s' line %lld: ", path, (long long)line_no);
            else
                n++;
            free(q);
            free(a);
        }
        line = nl ? nl + 1 : NULL;
    }
    free(data);
    if (s) {
        if (s == PB_ERR_INVALID_ARG) s = PB_ERR_FORMAT; /* a bad line is a bad file */
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", pb_last_error());
        pb_store_rollback(st);
        return pb_error(s, "%s", keep);
    }
    if ((s = pb_store_commit(st))) {
        pb_store_rollback(st);
        return s;
    }
    *n_added = n;
    return PB_OK;
}

pb_status pb_store_faq_list(pb_store *st, bool (*fn)(void *user, int64_t id, const char *q, const char *a),
                            void *user) {
    pb_status s = need_v3(st);
    if (s) return s;
    sqlite3_stmt *q;
    if ((s = pb_store_prepare(st, "SELECT id, question, answer FROM faq ORDER BY id", &q))) return s;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        if (!fn(user, sqlite3_column_int64(q, 0), (const char *)sqlite3_column_text(q, 1),
                (const char *)sqlite3_column_text(q, 2))) {
            rc = SQLITE_DONE;
            break;
        }
    if (rc != SQLITE_DONE) s = pb_store_sql_error(st, "faq list");
    sqlite3_finalize(q);
    return s;
}

void pb_store_faq_hit_free(pb_store_faq_hit *m) {
    if (!m) return;
    free(m->question);
    free(m->answer);
    memset(m, 0, sizeof *m);
}

pb_status pb_store_faq_match(pb_store *st, const char *question, pb_store_faq_hit *out) {
    memset(out, 0, sizeof *out);
    pb_status s = need_v3(st);
    if (s) return s;
    char fts[4096];
    int n_terms;
    if ((s = pb_store_fts_query(question, fts, sizeof fts, &n_terms))) return s;
    if (n_terms == 0) return pb_error(PB_ERR_NOT_FOUND, "faq: the question has no words to match");
    sqlite3_stmt *q;
    s = pb_store_prepare(st,
                         "SELECT f.rowid, -f.rank, faq.question, faq.answer FROM faq_fts f JOIN faq ON faq.id = f.rowid"
                         " WHERE faq_fts MATCH ?1 AND f.rank MATCH 'bm25(3.0, 1.0)' ORDER BY f.rank LIMIT 1",
                         &q);
    if (s) return s;
    sqlite3_bind_text(q, 1, fts, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        out->id = sqlite3_column_int64(q, 0);
        out->score = sqlite3_column_double(q, 1);
        out->question = pb_store_col_dup_utf8(q, 2);
        out->answer = pb_store_col_dup_utf8(q, 3);
        if (!out->question || !out->answer) {
            pb_store_faq_hit_free(out);
            s = PB_ERR_NOMEM;
        }
    } else if (rc == SQLITE_DONE) {
        s = pb_error(PB_ERR_NOT_FOUND, "faq: no entry matches the question");
    } else {
        s = pb_store_sql_error(st, "faq match");
    }
    sqlite3_finalize(q);
    return s;
}

pb_status pb_store_faq_fallback(pb_store *st, const char *question, const char *reason, char **text) {
    *text = NULL;
    pb_store_faq_hit m;
    pb_status s = pb_store_faq_match(st, question, &m);
    if (s) return s;
    const char *r = reason && *reason ? reason : "no answer from the model";
    size_t n = strlen(r) + strlen(m.answer) + strlen(m.question) + 96;
    *text = pb_malloc(n);
    if (*text)
        snprintf(*text, n, "[fallback: %s; FAQ match, score %.2f]\n%s\n(FAQ: %s)", r, m.score, m.answer, m.question);
    pb_store_faq_hit_free(&m);
    return *text ? PB_OK : PB_ERR_NOMEM;
}
