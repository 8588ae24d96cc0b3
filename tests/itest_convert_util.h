/* itest_convert_util.h -- test helpers for the convert/safetensors tests: a small safetensors writer
 * (cJSON header, 8-byte padded, contiguous data), temp dirs, and running the CLI. Test code only. */
#ifndef PB_ITEST_CONVERT_UTIL_H
#define PB_ITEST_CONVERT_UTIL_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct stw_entry {
    char name[128];
    char dtype[16];
    int n_dims;
    int64_t shape[4];
    void *data;
    size_t nbytes;
} stw_entry;

typedef struct stw {
    stw_entry *e;
    int n, cap;
} stw;

/* Adds a tensor (data copied). */
static inline void stw_add(stw *w, const char *name, const char *dtype, int n_dims, const int64_t *shape,
                           const void *data, size_t nbytes) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->e = realloc(w->e, (size_t)w->cap * sizeof *w->e);
    }
    stw_entry *e = &w->e[w->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->dtype, sizeof e->dtype, "%s", dtype);
    e->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++) e->shape[i] = shape[i];
    e->data = malloc(nbytes ? nbytes : 1);
    memcpy(e->data, data, nbytes);
    e->nbytes = nbytes;
}

static inline void stw_free(stw *w) {
    for (int i = 0; i < w->n; i++) free(w->e[i].data);
    free(w->e);
    memset(w, 0, sizeof *w);
}

/* Writes entries [lo, hi) as one safetensors file. Returns 0 on success. */
static inline int stw_write_range(const stw *w, int lo, int hi, const char *path) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    for (int i = lo; i < hi; i++) {
        const stw_entry *e = &w->e[i];
        cJSON *t = cJSON_AddObjectToObject(root, e->name);
        cJSON_AddStringToObject(t, "dtype", e->dtype);
        cJSON *sh = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < e->n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e->shape[d]));
        cJSON *of = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + e->nbytes)));
        off += e->nbytes;
    }
    char *js = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t hl = strlen(js), padded = (hl + 7) & ~(size_t)7;
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(js);
        return -1;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(padded >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(js, 1, hl, f);
    for (size_t i = hl; i < padded; i++) fputc(' ', f);
    for (int i = lo; i < hi; i++) fwrite(w->e[i].data, 1, w->e[i].nbytes, f);
    free(js);
    return fclose(f) == 0 ? 0 : -1;
}

/* Writes all entries into n_shards files "model-0000k-of-0000n.safetensors" in dir plus
 * model.safetensors.index.json (n_shards > 1), or dir/model.safetensors (n_shards == 1). */
static inline int stw_write_dir(const stw *w, const char *dir, int n_shards) {
    char path[1024];
    if (n_shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return stw_write_range(w, 0, w->n, path);
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddObjectToObject(root, "metadata");
    cJSON *wm = cJSON_AddObjectToObject(root, "weight_map");
    for (int k = 0; k < n_shards; k++) {
        int lo = k * w->n / n_shards, hi = (k + 1) * w->n / n_shards;
        char fname[64];
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        if (stw_write_range(w, lo, hi, path) != 0) return -1;
        for (int i = lo; i < hi; i++) cJSON_AddStringToObject(wm, w->e[i].name, fname);
    }
    char *js = cJSON_Print(root);
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(js, f);
    free(js);
    return fclose(f);
}

/* Writes text to dir/name. */
static inline int write_text(const char *dir, const char *name, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* Copies a file. */
static inline int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    if (!b) {
        if (a) fclose(a);
        return -1;
    }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    return fclose(b);
}

/* A fresh temp directory under $TMPDIR (or /tmp); caller removes it with rm_rf. */
static const char *make_tmpdir(const char *tag) {
    static char buf[8][512];
    static int slot;
    char *p = buf[slot++ & 7];
    const char *base = getenv("TMPDIR");
    snprintf(p, 512, "%s/pb-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    return mkdtemp(p);
}

static inline void rm_rf(const char *dir) {
    if (!dir) return;
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "# could not remove %s\n", dir);
}

/* Runs the CLI with args (a shell fragment); stderr+stdout go to log. Returns the exit status. */
static inline int run_cli(const char *args, const char *log) {
    const char *bin = getenv("PB_BIN");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >'%s' 2>&1", bin && *bin ? bin : "build/pocketbrain", args, log);
    int rc = system(cmd);
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

/* True when file path contains needle. */
static inline int file_contains(const char *path, const char *needle) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

static inline void print_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) printf("#   %s", line);
    fclose(f);
}

#endif
