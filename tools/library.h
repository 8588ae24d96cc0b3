/* library.h -- the model library of the CLI: where pulled models live ($PB_MODELS, else
 * $XDG_DATA_HOME/pocketbrain/models, else ~/.local/share/pocketbrain/models; ~ is $HOME, else the account's
 * home), their manifests, per-model locks, and resolving `-m NAME` to a file. No network here (tools/fetch.c
 * downloads). */
#ifndef PB_LIBRARY_H
#define PB_LIBRARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LIB_NAME_MAX 128

/* The library directory (thread-local storage, valid until the next call on the thread; not created). */
const char *lib_dir(void);
/* Creates the library directory (and its parents). false with a message on stderr naming cmd. */
bool lib_ensure_dir(const char *cmd);

/* A name is 1..128 bytes of [A-Za-z0-9._:-], not starting with '.' or '-'. */
bool lib_name_ok(const char *name);
/* "<dir>/<name><suffix>" into buf; false when it does not fit. */
bool lib_path(const char *name, const char *suffix, char *buf, size_t cap);

/* What `models` shows about one model; read from its manifest (<name>.json), or from the GGUF itself
 * for a file put into the library by hand. */
typedef struct lib_entry {
    char name[LIB_NAME_MAX + 1];
    char file[4096];
    uint64_t size;        /* of the file now */
    uint64_t pulled_size; /* recorded in the manifest at pull time; 0 when unknown */
    char arch[32], quant[32];
    int n_ctx;
    char pulled_at[32]; /* "2026-12-02T01:57:05Z" or "" */
    char sha256[65];    /* "" when unknown */
    char verified_by[32];
    char source[2048];
} lib_entry;

/* Reads the GGUF facts (arch, quant, n_ctx, size) of path into e. false with the reason in why. */
bool lib_probe(const char *path, lib_entry *e, char *why, size_t cap);
/* Writes <name>.json atomically (tmp + rename). false with errno set. */
bool lib_write_manifest(const lib_entry *e);
/* Fills e for a library name; false when <name>.gguf is not there. */
bool lib_get(const char *name, lib_entry *e);

/* Every model in the library, sorted by name (malloc'd array, *n entries; free() it). NULL + *n = 0 when
 * the directory does not exist or is empty. */
lib_entry *lib_list(int *n);
/* Every model file of the library, sorted by name: fn(user, name, file) once per <name>.gguf with a valid name that is
 * a regular file (through a link too), as lib_list has them, without reading a manifest or a GGUF header (a server
 * rescanning the library needs the names and files only). Nothing when the directory does not exist. */
void lib_each_file(void (*fn)(void *user, const char *name, const char *file), void *user);
/* A value that changes whenever the library directory's entries may have changed (a model pulled, removed,
 * renamed): its device, inode, modification and change times folded together; 1 when it does not exist. 0 (not
 * known: list again) while those times are less than 2 s old, since a change within the same timestamp tick as a
 * listing would leave them as they were. */
uint64_t lib_dir_stamp(void);
/* true when the library directory is readable or does not exist yet (an empty library); false with a message
 * naming cmd, the directory and the reason when it is something else (a file, unreadable). */
bool lib_dir_usable(const char *cmd);

/* Per-model lock (flock on "<dir>/.<name>.lock"): wait = block until free, else fail at once. Returns the
 * descriptor (>= 0), -1 on error (errno), -2 when busy and !wait. lib_unlock(-1) is a no-op. */
int lib_lock(const char *name, bool wait);
void lib_unlock(int fd);

/* true when arg names a model of the library, filling e: arg has no '/' and is no existing file (a folder of that
 * name, such as the Hugging Face checkout convert reads, does not hide the model), and is a library name or a catalog
 * name without quantization whose default quantization is in the library ("gemma-2-2b-it" -> "...:q4_k_m"). */
bool lib_resolve(const char *arg, lib_entry *e);
/* Resolves a `-m` argument: an existing file path is returned as is; otherwise a library name (or a
 * catalog name without quantization: its default one; see lib_resolve) gives the library file. When nothing matches,
 * prints "pocketbrain <cmd>: ..." naming both places looked at and returns NULL. The result is static storage that
 * stays valid for the next 7 calls (one command resolves at most a few model arguments). */
const char *cli_model_arg(const char *cmd, const char *arg);

#endif
