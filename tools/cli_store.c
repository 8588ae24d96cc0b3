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
