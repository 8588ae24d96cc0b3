/* cli_store.h -- CLI helpers shared by the commands that use a knowledge base (ask, search, serve, ingest, faq). */
#ifndef PB_CLI_STORE_H
#define PB_CLI_STORE_H

#include "store/store.h"

/* Opens an existing knowledge base (or FAQ) database read-only (pb_store_open_readonly: works in a read-only
 * place; search, ask and serve never write it). A missing file is an error naming the path and how to create
 * it, never a silently created empty database; any other failure (permission, I/O, a corrupt or foreign
 * file) is reported as what it is. Prints the message; returns NULL on failure. A file that had to be read at an
 * older schema (it could not be upgraded: a symlink, read-only, locked) opens, with one note on stderr naming it,
 * what that schema lacks and the command that upgrades it (create_hint, run where the file is writable). */
pb_store *cli_store_open_existing(const char *cmd, const char *path, const char *create_hint);
/* Prints a store failure for the database at path once: the store's messages already name the file, so the path
 * is put in front only when the message lacks it. Returns 1. */
int cli_store_fail(const char *cmd, pb_status s, const char *path);
/* After a list of sources (search, ask): when any of the n shown is PB_DOC_CHANGED or PB_DOC_GONE, one note on stderr
 * saying what the marks mean and the ingest command, ready to paste, that brings those files up to date in the
 * knowledge base at db (with --prune when a file is gone, which removes its entry). paths[i] and states[i] belong
 * together; a path listed twice is named once. */
void cli_store_stale_note(const char *cmd, const char *db, const char *const *paths, const pb_store_doc_state *states,
                          int n);

#endif
