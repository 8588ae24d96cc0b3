/* cli_store.c -- opens knowledge-base files for the CLI commands, refusing missing ones with a clear message. */
#include "cli_store.h"
#include "cli.h"

#include <unistd.h>

pb_store *cli_store_open_existing(const char *cmd, const char *path, const char *create_hint) {
    if (access(path, F_OK) != 0) {
        cli_err(cmd, "no knowledge base at '%s' (create it with %s)", path, create_hint);
        return NULL;
    }
    pb_store *st = NULL;
    pb_status s = pb_store_open(path, &st);
    if (s != PB_OK) {
        cli_fail(cmd, s, path);
        return NULL;
    }
    return st;
}
