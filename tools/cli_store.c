/* cli_store.c -- opens knowledge-base files for the CLI commands, refusing missing ones with a clear message. */
#include "cli_store.h"
#include "cli.h"

#include <errno.h>
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
