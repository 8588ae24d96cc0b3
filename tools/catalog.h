/* catalog.h -- the pull catalog (models/catalog.json, built into the binary; $PB_CATALOG reads another
 * file): catalog names and quantizations -> a Hugging Face repo and file. No network here. */
#ifndef PB_CATALOG_H
#define PB_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct catalog_hit {
    char name[128];  /* "gemma-2-2b-it" */
    char quant[32];  /* "q4_k_m" (lower case) */
    char repo[256];  /* "bartowski/gemma-2-2b-it-GGUF" */
    char file[256];  /* "gemma-2-2b-it-Q4_K_M.gguf" */
    char size[32];   /* approximate, "1.7 GB", or "" */
    char sha256[65]; /* expected digest (lower-case hex) or "" when the catalog does not list one */
    char license[256];
} catalog_hit;

/* Looks up "NAME" (its default quantization) or "NAME:QUANT" (case-insensitive quant). Returns 1 when
 * found, 0 when NAME is not in the catalog, -1 when NAME is there but not QUANT or the catalog cannot be
 * read (why says which, listing the quantizations there are). */
int catalog_find(const char *ref, catalog_hit *out, char *why, size_t cap);

/* Prints the catalog as a table (pull --list). false when it cannot be read (message in why). */
bool catalog_print(FILE *f, char *why, size_t cap);

#endif
