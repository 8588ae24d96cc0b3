/* cli_store.c -- opens knowledge-base files for the CLI commands, refusing missing ones with a clear message. */
#include "cli_store.h"
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

pb_store *cli_store_open_existing(const char *cmd, const char *path, const char *create_hint) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT)
            cli_err(cmd, "no knowledge base at '%s' (create it with %s)", path, create_hint);
        else /* e.g. a folder we may not enter: say so, it is not "missing" */
            cli_err(cmd, "cannot open knowledge base '%s': %s", path, strerror(errno));
        return NULL;
    }
    pb_store *st = NULL;
    pb_status s = pb_store_open_readonly(path, &st);
    if (s != PB_OK) {
        cli_store_fail(cmd, s, path);
        return NULL;
    }
    /* pb_store_open_readonly upgrades an older file where it can; where not (opened through a symlink, which the
     * writer refuses, read-only media, another writer holding the lock, a step that failed) it reads schema 3 as it
     * is, keeps the upgrade's error, and only the CLI may say so (it used to guess the reason from a list). The text
     * names what schema 4 adds: revisit it when the schema moves on. */
    _Static_assert(PB_STORE_SCHEMA_VERSION == 4, "the note below names what schema 4 adds");
    if (pb_store_schema_version(st) < PB_STORE_SCHEMA_VERSION) {
        const char *why = pb_store_upgrade_error(st);
        cli_err(cmd,
                "note: '%s' is at knowledge-base schema %d (this build: %d) and could not be upgraded here (%s): "
                "words inside Chinese, Japanese or Korean text without spaces are not found; `%s` on the file "
                "itself, where it is writable, upgrades it",
                path, pb_store_schema_version(st), PB_STORE_SCHEMA_VERSION, why ? why : "no reason given", create_hint);
    }
    return st;
}

int cli_store_fail(const char *cmd, pb_status s, const char *path) {
    /* the store's messages name the file ("store 'kb.sqlite': ..."): not a second time in front of them */
    if (strstr(pb_last_error(), path)) {
        cli_err(cmd, "%s", pb_last_error());
        return 1;
    }
    return cli_fail(cmd, s, path);
}

/* Appends s to the command line in b, in single quotes when the shell would read anything in it ('\'' for a quote). */
static void shell_word(char *b, size_t cap, const char *s) {
    size_t o = strlen(b);
    bool plain = *s != 0;
    for (const char *p = s; *p && plain; p++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@%=", *p) != NULL;
    o += (size_t)snprintf(b + o, o < cap ? cap - o : 0, " %s", plain ? s : "'");
    for (const char *p = s; !plain && *p && o < cap; p++)
        o += (size_t)snprintf(b + o, cap - o, *p == '\'' ? "'\\''" : "%c", *p);
    if (!plain && o < cap) snprintf(b + o, cap - o, "'");
}

void cli_store_stale_note(const char *cmd, const char *db, const char *const *paths, const pb_store_doc_state *states,
                          int n) {
    int n_changed = 0, n_gone = 0;
    size_t cap = 256 + strlen(db) * 4;
    for (int i = 0; i < n; i++) {
        bool again = false;
        for (int j = 0; j < i && !again; j++) again = states[j] != PB_DOC_SAME && strcmp(paths[j], paths[i]) == 0;
        if (states[i] == PB_DOC_SAME || again) continue;
        n_changed += states[i] == PB_DOC_CHANGED;
        n_gone += states[i] == PB_DOC_GONE;
        cap += strlen(paths[i]) * 4 + 3;
    }
    if (n_changed + n_gone == 0) return;
    char *line = calloc(1, cap);
    if (!line) return;
    strcpy(line, "pocketbrain ingest --db");
    shell_word(line, cap, db);
    if (n_gone) strcat(line, " --prune");
    for (int i = 0; i < n; i++) {
        bool again = false;
        for (int j = 0; j < i && !again; j++) again = states[j] != PB_DOC_SAME && strcmp(paths[j], paths[i]) == 0;
        if (states[i] != PB_DOC_SAME && !again) shell_word(line, cap, paths[i]);
    }
    char what[256] = "";
    if (n_changed)
        snprintf(what, sizeof what, "%d file%s changed since ingest (the text shown is what it held then)", n_changed,
                 n_changed > 1 ? "s" : "");
    if (n_gone)
        snprintf(what + strlen(what), sizeof what - strlen(what), "%s%d file%s gone", n_changed ? ", " : "", n_gone,
                 n_gone > 1 ? "s are" : " is");
    cli_err(cmd, "note: %s: `%s` updates the knowledge base%s", what, line,
            n_gone ? " (a file moved elsewhere: ingest it at its new place)" : "");
    free(line);
}
