/* library.c -- the model library: directory, manifests (<name>.json beside <name>.gguf), per-model locks,
 * `-m NAME` resolution. Reads GGUF metadata only (never the weights); no network. */
#include "library.h"
#include "base/base.h"
#include "catalog.h"
#include "cli.h"
#include "gguf/gguf.h"
#include "model/model.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *lib_dir(void) {
    static _Thread_local char dir[PATH_MAX]; /* per thread: the server rescans the library from request threads */
    const char *env = getenv("PB_MODELS"), *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (!home || !*home) { /* HOME unset (cron, systemd, env -i): the account's home, never "." -- a library
                            * relative to the working directory moved with it (pull into one, run from another) */
        const struct passwd *pw = getpwuid(getuid());
        home = pw && pw->pw_dir && pw->pw_dir[0] == '/' ? pw->pw_dir : "/";
    }
    if (env && *env)
        snprintf(dir, sizeof dir, "%s", env);
    else if (xdg && xdg[0] == '/') /* the XDG spec: a relative value is invalid and ignored */
        snprintf(dir, sizeof dir, "%s/pocketbrain/models", xdg);
    else
        snprintf(dir, sizeof dir, "%s/.local/share/pocketbrain/models", home);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
    return dir;
}

bool lib_ensure_dir(const char *cmd) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", lib_dir());
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == 0) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                cli_err(cmd, "cannot create the model library '%s': %s", p, strerror(errno));
                return false;
            }
            *s = c;
            if (!c) break;
        }
    }
    return true;
}

bool lib_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > LIB_NAME_MAX || name[0] == '.' || name[0] == '-') return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == ':' || c == '-'))
            return false;
    }
    return true;
}

bool lib_path(const char *name, const char *suffix, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s/%s%s", lib_dir(), name, suffix);
    return n > 0 && (size_t)n < cap;
}

bool lib_probe(const char *path, lib_entry *e, char *why, size_t cap) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, cap, "%s", strerror(errno));
        return false;
    }
    e->size = (uint64_t)st.st_size;
    pb_gguf *g;
    pb_status s = pb_gguf_open(path, &g);
    if (s) {
        snprintf(why, cap, "%s", pb_last_error()[0] ? pb_last_error() : pb_status_name(s));
        return false;
    }
    pb_gguf_str arch = {"", 0};
    uint32_t ft;
    if (pb_gguf_get_str(g, "general.architecture", &arch) == PB_OK)
        snprintf(e->arch, sizeof e->arch, "%.*s", (int)(arch.len < 31 ? arch.len : 31), arch.ptr);
    if (pb_gguf_get_u32(g, "general.file_type", &ft) == PB_OK)
        snprintf(e->quant, sizeof e->quant, "%s", cli_ftype_name(ft));
    pb_hparams hp;
    memset(&hp, 0, sizeof hp);
    if (pb_hparams_from_gguf(g, &hp) == PB_OK) e->n_ctx = hp.n_ctx_train;
    pb_gguf_close(g);
    return true;
}

static void put_str(cJSON *o, const char *k, const char *v) {
    if (v && *v) cJSON_AddStringToObject(o, k, v);
}

bool lib_write_manifest(const lib_entry *e) {
    cJSON *o = cJSON_CreateObject();
    put_str(o, "name", e->name);
    put_str(o, "file", e->file);
    cJSON_AddNumberToObject(o, "size", (double)e->size);
    put_str(o, "architecture", e->arch);
    put_str(o, "quantization", e->quant);
    if (e->n_ctx) cJSON_AddNumberToObject(o, "context", e->n_ctx);
    put_str(o, "pulled_at", e->pulled_at);
    put_str(o, "sha256", e->sha256);
    put_str(o, "sha256_checked_against", e->verified_by);
    put_str(o, "source", e->source);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    char path[PATH_MAX];
    bool ok = text && lib_path(e->name, ".json", path, sizeof path);
    pb_atomic_file f;
    if (ok && pb_atomic_open(path, &f) == PB_OK) { /* random O_EXCL temp name; a link or device there is refused */
        ok = pb_atomic_write(&f, text, strlen(text)) == PB_OK && pb_atomic_write(&f, "\n", 1) == PB_OK;
        if (ok)
            ok = pb_atomic_commit(&f) == PB_OK;
        else
            pb_atomic_abort(&f);
    } else {
        ok = false;
    }
    free(text);
    return ok;
}

/* Manifest fields over whatever lib_probe found. */
static void read_manifest(const char *name, lib_entry *e) {
    char path[PATH_MAX];
    if (!lib_path(name, ".json", path, sizeof path)) return;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *o = cJSON_Parse(buf);
    if (!o) return;
#define GET(key, field)                                                                                                \
    do {                                                                                                               \
        const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(o, key));                                             \
        if (v) snprintf(e->field, sizeof e->field, "%s", v);                                                           \
    } while (0)
    GET("architecture", arch);
    GET("quantization", quant);
    GET("pulled_at", pulled_at);
    GET("sha256", sha256);
    GET("sha256_checked_against", verified_by);
    GET("source", source);
#undef GET
    /* numbers as pull wrote them: whole and in range, else left unknown (the file itself then says its context); a
     * hand-edited 1e30 was cast to uint64_t (undefined behaviour) and -5 shown as the context */
    const cJSON *c = cJSON_GetObjectItem(o, "context");
    if (cJSON_IsNumber(c) && c->valuedouble >= 1 && c->valuedouble <= 2147483647.0 &&
        c->valuedouble == (double)(int)c->valuedouble)
        e->n_ctx = (int)c->valuedouble;
    const cJSON *sz = cJSON_GetObjectItem(o, "size");
    if (cJSON_IsNumber(sz) && sz->valuedouble >= 1 && sz->valuedouble <= 9007199254740992.0 &&
        sz->valuedouble == (double)(uint64_t)sz->valuedouble)
        e->pulled_size = (uint64_t)sz->valuedouble;
    cJSON_Delete(o);
}

bool lib_get(const char *name, lib_entry *e) {
    memset(e, 0, sizeof *e);
    if (!lib_name_ok(name) || !lib_path(name, ".gguf", e->file, sizeof e->file)) return false;
    struct stat st;
    if (stat(e->file, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    snprintf(e->name, sizeof e->name, "%s", name);
    e->size = (uint64_t)st.st_size;
    char mpath[PATH_MAX];
    if (lib_path(name, ".json", mpath, sizeof mpath) && access(mpath, R_OK) == 0) {
        read_manifest(name, e);
        if (e->n_ctx <= 0 || !e->arch[0] || !e->quant[0]) { /* what the manifest lacks (or garbled): the file's own */
            lib_entry g;
            char why[256];
            memset(&g, 0, sizeof g);
            if (lib_probe(e->file, &g, why, sizeof why)) {
                if (e->n_ctx <= 0) e->n_ctx = g.n_ctx;
                if (!e->arch[0]) snprintf(e->arch, sizeof e->arch, "%s", g.arch);
                if (!e->quant[0]) snprintf(e->quant, sizeof e->quant, "%s", g.quant);
            }
        }
    } else { /* put here by hand: what the file says, and its time as "pulled" */
        char why[256];
        lib_probe(e->file, e, why, sizeof why);
        struct tm tm;
        gmtime_r(&st.st_mtime, &tm);
        strftime(e->pulled_at, sizeof e->pulled_at, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    return true;
}

bool lib_dir_usable(const char *cmd) {
    const char *dir = lib_dir();
    DIR *d = opendir(dir);
    if (d) {
        closedir(d);
        return true;
    }
    if (errno == ENOENT) return true; /* no library yet: empty */
    cli_err(cmd, "cannot read the model library '%s': %s%s", dir, strerror(errno),
            getenv("PB_MODELS") && *getenv("PB_MODELS") ? " (set by $PB_MODELS)" : "");
    return false;
}

static int by_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void lib_each_file(void (*fn)(void *user, const char *name, const char *file), void *user) {
    DIR *d = opendir(lib_dir());
    if (!d) return;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l <= 5 || strcmp(de->d_name + l - 5, ".gguf") != 0 || l - 5 > LIB_NAME_MAX) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nv = realloc(names, cap * sizeof *nv);
            if (!nv) break;
            names = nv;
        }
        if (!(names[n] = malloc(l - 4))) break;
        memcpy(names[n], de->d_name, l - 5);
        names[n++][l - 5] = 0;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_str);
    char file[PATH_MAX];
    struct stat st;
    for (size_t i = 0; i < n; i++) {
        if (lib_name_ok(names[i]) && lib_path(names[i], ".gguf", file, sizeof file) && stat(file, &st) == 0 &&
            S_ISREG(st.st_mode))
            fn(user, names[i], file);
        free(names[i]);
    }
    free(names);
}

typedef struct list_acc {
    lib_entry *v;
    int n, cap;
    bool full; /* out of memory: the entries so far */
} list_acc;

static void list_add(void *user, const char *name, const char *file) {
    (void)file;
    list_acc *a = user;
    if (a->full) return;
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 16;
        lib_entry *nv = realloc(a->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            a->full = true;
            return;
        }
        a->v = nv, a->cap = cap;
    }
    if (lib_get(name, &a->v[a->n])) a->n++;
}

/* lib_each_file's models (sorted by name), each as lib_get reads it. */
lib_entry *lib_list(int *n) {
    list_acc a = {NULL, 0, 0, false};
    lib_each_file(list_add, &a);
    *n = a.n;
    return a.v;
}

uint64_t lib_dir_stamp(void) {
    struct stat st;
    if (stat(lib_dir(), &st) != 0) return 1;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const struct timespec *t = st.st_ctim.tv_sec > st.st_mtim.tv_sec ? &st.st_ctim : &st.st_mtim;
    double age = (double)(now.tv_sec - t->tv_sec) + (double)(now.tv_nsec - t->tv_nsec) / 1e9;
    if (age < 2.0) return 0; /* racy: a listing in the same tick as a change sees times that stay as they are */
    const uint64_t f[6] = {(uint64_t)st.st_dev,          (uint64_t)st.st_ino,         (uint64_t)st.st_mtim.tv_sec,
                           (uint64_t)st.st_mtim.tv_nsec, (uint64_t)st.st_ctim.tv_sec, (uint64_t)st.st_ctim.tv_nsec};
    uint64_t h = 14695981039346656037ull; /* FNV-1a over the fields' bytes */
    for (int i = 0; i < 6; i++)
        for (int b = 0; b < 8; b++) h = (h ^ ((f[i] >> (8 * b)) & 0xff)) * 1099511628211ull;
    return h < 2 ? h + 2 : h; /* 0 and 1 have their own meanings */
}

int lib_lock(const char *name, bool wait) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/.%s.lock", lib_dir(), name) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644); /* never through a planted link */
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno == EWOULDBLOCK && !wait) {
        close(fd);
        return -2;
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
    }
    return fd;
}

void lib_unlock(int fd) {
    if (fd >= 0) close(fd); /* closing the last descriptor releases the flock */
}

bool lib_resolve(const char *arg, lib_entry *e) {
    struct stat st;
    /* a folder does not hide a model: "./gemma-2-2b-it" is the Hugging Face checkout that convert reads */
    if (!arg || strchr(arg, '/') || (stat(arg, &st) == 0 && !S_ISDIR(st.st_mode))) return false;
    if (lib_get(arg, e)) return true;
    catalog_hit h;
    char why[512], tagged[LIB_NAME_MAX + 40];
    if (strchr(arg, ':') || catalog_find(arg, &h, why, sizeof why) != 1) return false;
    snprintf(tagged, sizeof tagged, "%s:%s", h.name, h.quant); /* "gemma-2-2b-it" -> "gemma-2-2b-it:q4_k_m" */
    return lib_get(tagged, e);
}

const char *cli_model_arg(const char *cmd, const char *arg) {
    /* a buffer per call: a command resolves several models (perplexity -m A --kl-model B, ask -m A
     * --embed-model B), and each result must outlive the next call */
    static char paths[8][PATH_MAX];
    static unsigned next;
    char *path = paths[next++ % 8];
    const size_t cap = sizeof paths[0];
    struct stat st;
    if (!arg) return NULL;
    lib_entry e;
    if (lib_resolve(arg, &e)) {
        snprintf(path, cap, "%s", e.file);
        return path;
    }
    if (stat(arg, &st) == 0 || strchr(arg, '/')) return arg; /* a path (a missing one or a folder fails at open) */
    catalog_hit h;
    char why[512];
    cli_err(cmd, "model '%s' is neither a file nor a model in the library (%s); see 'pocketbrain models'%s", arg,
            lib_dir(), catalog_find(arg, &h, why, sizeof why) == 1 ? ", or get it with 'pocketbrain pull'" : "");
    return NULL;
}
