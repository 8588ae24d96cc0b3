/* cmd_faq.c -- `pocketbrain faq`: manage the FAQ fallback pairs (add, import, list) and test matching. */
#include "cli.h"
#include "cli_common.h"
#include "cli_store.h"
#include "store/store.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "pocketbrain faq --db FAQ.sqlite add \"QUESTION\" \"ANSWER\"\n"
    "       pocketbrain faq --db FAQ.sqlite import FILE.jsonl|FILE.tsv\n"
    "       pocketbrain faq --db FAQ.sqlite list [--json]\n"
    "       pocketbrain faq --db FAQ.sqlite match \"question\" [--json]\n"
    "  JSONL lines: {\"question\": ..., \"answer\": ...}; TSV lines: question<TAB>answer. The FAQ answers `ask`\n"
    "  (marked as a fallback) when generation fails or is too slow.";

typedef struct {
    bool json;
    cJSON *arr;
} list_ctx;

static bool print_pair(void *user, int64_t id, const char *q, const char *a) {
    list_ctx *c = user;
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", (double)id);
        cJSON_AddStringToObject(o, "question", q);
        cJSON_AddStringToObject(o, "answer", a);
        cJSON_AddItemToArray(c->arr, o);
    } else {
        printf("%lld\t%s\t%s\n", (long long)id, q, a);
    }
    return true;
}

/* Removes a database this command created (and SQLite's files beside it). */
static void remove_new_db(const char *db) {
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    char path[4200];
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (snprintf(path, sizeof path, "%s%s", db, suffixes[i]) < (int)sizeof path) unlink(path);
}

/* A database error names the file ("store 'kb.sqlite': faq add: database is locked"): said once, without the action
 * in front ("faq: add: store ...: faq add: ..."); another (the import file's line) keeps it. */
static int faq_fail(pb_status s, const char *db, const char *what) {
    return strstr(pb_last_error(), db) ? cli_store_fail("faq", s, db) : cli_fail("faq", s, what);
}

PB_CMD(faq) {
    const char *db = NULL;
    const char *pos[4] = {0};
    int n_pos = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r = 0;
        if ((r = cli_flag("faq", usage, argc, argv, &i, "--help", "-h", NULL)) != 0) {
            if (r < 0) return 2;
            puts(usage);
            return 0;
        } else if ((r = cli_flag("faq", usage, argc, argv, &i, "--db", NULL, &v)) != 0) {
            if (r < 0) return 2;
            db = v;
        } else if ((r = cli_flag("faq", usage, argc, argv, &i, "--json", NULL, NULL)) != 0) {
            if (r < 0) return 2;
            json = true;
        } else if (!strcmp(a, "--")) { /* the end of the options: a question or answer may start with '-' */
            while (++i < argc && n_pos < 4) pos[n_pos++] = argv[i];
            if (i < argc) return cli_usage_error("faq", usage, "too many arguments");
        } else if (a[0] == '-' && a[1] == '-' && n_pos == 0)
            return cli_usage_error("faq", usage, "unknown option '%s'", a);
        else if (n_pos < 4)
            pos[n_pos++] = a;
        else
            return cli_usage_error("faq", usage, "too many arguments");
    }
    if (!db) return cli_usage_error("faq", usage, "--db FAQ.sqlite is required");
    if (n_pos == 0) return cli_usage_error("faq", usage, "missing action (add, import, list, match)");
    const char *act = pos[0];
    int need = !strcmp(act, "add")                               ? 3
               : !strcmp(act, "import") || !strcmp(act, "match") ? 2
               : !strcmp(act, "list")                            ? 1
                                                                 : 0;
    if (!need) return cli_usage_error("faq", usage, "unknown action '%s'", act);
    if (n_pos != need) return cli_usage_error("faq", usage, "'%s' takes %d argument(s)", act, need - 1);
    pb_store *st = NULL;
    pb_status s = PB_OK;
    struct stat sb;
    bool created = false; /* add / import made the database: when they fail, it goes again (no empty one left) */
    if (!strcmp(act, "list") || !strcmp(act, "match")) { /* reading: never create (or write) the database */
        if (!(st = cli_store_open_existing("faq", db, "pocketbrain faq --db FILE add|import"))) return 1;
    } else {
        created = lstat(db, &sb) != 0 && errno == ENOENT;
        if ((s = pb_store_open(db, &st))) return cli_store_fail("faq", s, db);
    }
    int rc = 0;
    if (!strcmp(act, "add")) {
        int64_t id;
        if ((s = pb_store_faq_add(st, pos[1], pos[2], &id)))
            rc = faq_fail(s, db, "add");
        else
            printf("added FAQ #%lld\n", (long long)id);
    } else if (!strcmp(act, "import")) {
        int64_t n;
        if ((s = pb_store_faq_import(st, pos[1], &n)))
            rc = faq_fail(s, db, "import");
        else
            printf("imported %lld FAQ pairs from %s\n", (long long)n, pos[1]);
    } else if (!strcmp(act, "list")) {
        list_ctx c = {json, json ? cJSON_CreateArray() : NULL};
        if ((s = pb_store_faq_list(st, print_pair, &c)))
            rc = faq_fail(s, db, "list");
        else if (json) {
            cli_json_print(c.arr, false);
            c.arr = NULL;
        }
        cJSON_Delete(c.arr);
    } else {
        pb_store_faq_hit m;
        s = pb_store_faq_match(st, pos[1], &m);
        if (s == PB_ERR_NOT_FOUND) {
            cli_err("faq", "no FAQ entry matches \"%s\"", pos[1]);
            rc = 1;
        } else if (s) {
            rc = faq_fail(s, db, "match");
        } else {
            if (json) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "id", (double)m.id);
                cJSON_AddNumberToObject(o, "score", m.score);
                cJSON_AddStringToObject(o, "question", m.question);
                cJSON_AddStringToObject(o, "answer", m.answer);
                cli_json_print(o, false);
            } else {
                printf("#%lld [%.3f] %s\n%s\n", (long long)m.id, m.score, m.question, m.answer);
            }
            pb_store_faq_hit_free(&m);
        }
    }
    pb_store_close(st);
    if (rc && created) remove_new_db(db);
    return rc;
}
