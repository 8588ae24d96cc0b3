/* store_ingest.c -- walks files and directories and brings the knowledge base up to date: new files added,
 * changed ones (by SHA-256) replaced, unchanged ones skipped, gone ones pruned; committed in batches. */
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_DOC_BYTES ((size_t)256 << 20) /* larger files are skipped, not read */

pb_ingest_params pb_ingest_default_params(void) {
    pb_ingest_params p;
    memset(&p, 0, sizeof p);
    p.chunk = pb_chunk_default_params();
    p.batch_bytes = (size_t)16 << 20;
    p.batch_files = 512;
    return p;
}

typedef struct {
    char *path;
    size_t size;
    int64_t mtime;
    bool named;      /* given on the command line: tried even with an unknown extension */
    int bad_errno;   /* not a file: a folder that could not be listed, or an entry that could not be examined
                      * (errno): reported, and neither it nor what is under it is pruned */
    bool bad_folder; /* ... the first of the two */
} file_ent;

typedef struct {
    file_ent *f;
    size_t n, cap;
    size_t total;
    size_t n_unreadable;
    bool oom;
} file_list;

static void list_add(file_list *l, const char *path, const struct stat *sb, bool named) {
    if (l->oom) return;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 256;
        file_ent *nf = realloc(l->f, nc * sizeof *nf);
        if (!nf) {
            l->oom = true;
            return;
        }
        l->f = nf;
        l->cap = nc;
    }
    char *p = pb_strdup(path);
    if (!p) {
        l->oom = true;
        return;
    }
    l->f[l->n++] = (file_ent){p, (size_t)sb->st_size, (int64_t)sb->st_mtime, named, 0, false};
    l->total += (size_t)sb->st_size;
}

/* A folder that opendir() refused, or an entry lstat() refused: listed so that the ingest says so (and --prune keeps
 * it and what is under it). */
static void list_add_unreadable(file_list *l, const char *path, int err, bool folder) {
    struct stat none = {0};
    size_t n = l->n;
    list_add(l, path, &none, false);
    if (l->n == n) return;
    l->f[n].bad_folder = folder;
    l->f[n].bad_errno = err ? err : EIO;
    l->n_unreadable++;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct {
    const char *path;
    size_t i;
} list_key;

static int cmp_key(const void *a, const void *b) {
    const list_key *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : x->i < y->i ? -1 : x->i > y->i;
}

/* A file reached twice (named and inside a named folder, a folder named twice, a link beside its target) is one
 * document, read once: the first place keeps it, named if either was. */
static void list_dedup(file_list *l) {
    if (l->n < 2 || l->oom) return;
    list_key *k = pb_malloc(l->n * sizeof *k);
    if (!k) return; /* then the second visit finds it unchanged */
    for (size_t i = 0; i < l->n; i++) k[i] = (list_key){l->f[i].path, i};
    qsort(k, l->n, sizeof *k, cmp_key);
    for (size_t a = 0, b; a < l->n; a = b) {
        for (b = a + 1; b < l->n && strcmp(k[a].path, k[b].path) == 0; b++) {
            file_ent *keep = &l->f[k[a].i], *drop = &l->f[k[b].i];
            keep->named |= drop->named;
            l->total -= drop->size;
            if (drop->bad_errno) l->n_unreadable--;
            free(drop->path);
            drop->path = NULL;
        }
    }
    free(k);
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->f[i].path) l->f[n++] = l->f[i];
    l->n = n;
}

/* A walked file is taken for its extension, or without one when it sniffs as text (ingest_file). */
static bool ingestable(const char *path) {
    bool known;
    pb_store_kind_from_path(path, &known);
    return known || pb_store_path_has_no_extension(path);
}

/* Recursive walk in name order; hidden entries and symlinked directories are not followed. */
static void walk(file_list *l, const char *dir, int depth) {
    if (depth > 64) return;
    DIR *d = opendir(dir);
    if (!d) {
        list_add_unreadable(l, dir, errno, true);
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                l->oom = true;
                break;
            }
            names = nn;
        }
        if (!(names[n] = pb_strdup(de->d_name))) {
            l->oom = true;
            break;
        }
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_name);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) < (int)sizeof path) {
            struct stat sb, lsb;
            const int lr = lstat(path, &lsb);
            if (lr != 0 && errno != ENOENT) { /* a folder listed but not searchable (r without x) */
                list_add_unreadable(l, path, errno, false);
            } else if (lr == 0 && stat(path, &sb) == 0) {
                if (S_ISDIR(sb.st_mode)) {
                    if (!S_ISLNK(lsb.st_mode)) walk(l, path, depth + 1);
                } else if (S_ISREG(sb.st_mode) && ingestable(path)) {
                    /* a link to a file is the file: its canonical path, as for a file named on the command line
                     * (stored under the link's name it was a second copy of a document, both cited) */
                    char *real = S_ISLNK(lsb.st_mode) ? pb_realpath(path) : NULL;
                    list_add(l, real && ingestable(real) ? real : path, &sb, false);
                    free(real);
                }
            }
        }
        free(names[i]);
    }
    free(names);
}

/* The canonical absolute path of a named path, as documents are stored. One that no longer exists (a folder deleted,
 * named to --prune it) is resolved component by component: each one that exists through realpath (symbolic links
 * followed), the rest as written with "." and "" dropped and ".." taking one back. cwd + '/' + path unresolved kept
 * "./old", "a/../old", "old/" and a link in the path, matched no stored document and so pruned nothing. */
static char *absolute(const char *path) {
    char buf[PATH_MAX], res[PATH_MAX] = "", full[PATH_MAX * 2];
    if (realpath(path, buf)) return pb_strdup(buf);
    if (path[0] == '/')
        snprintf(full, sizeof full, "%s", path);
    else if (getcwd(buf, sizeof buf))
        snprintf(full, sizeof full, "%s/%s", buf, path);
    else
        return pb_strdup(path);
    size_t rl = 0;
    for (char *save = NULL, *c = strtok_r(full, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, ".")) continue;
        if (!strcmp(c, "..")) {
            while (rl > 0 && res[rl - 1] != '/') rl--;
            rl = rl > 0 ? rl - 1 : 0;
            res[rl] = 0;
            continue;
        }
        if (rl + 1 + strlen(c) >= sizeof res) return pb_strdup(path);
        rl += (size_t)snprintf(res + rl, sizeof res - rl, "/%s", c);
        if (realpath(res, buf)) { /* "/" itself is kept as "" (the next component adds its own slash) */
            snprintf(res, sizeof res, "%s", strcmp(buf, "/") ? buf : "");
            rl = strlen(res);
        }
    }
    return pb_strdup(rl ? res : "/");
}

static void event(const pb_ingest_params *p, pb_ingest_event ev, const char *path, const char *detail, size_t done,
                  size_t total) {
    if (p->on_event) p->on_event(p->user, ev, path, detail, done, total);
}

static void on_pruned(void *user, const char *path, const char *why) {
    const pb_ingest_params *p = user;
    event(p, PB_INGEST_REMOVED, path, why, 0, 0);
}

typedef struct {
    const pb_ingest_params *p;
    pb_ingest_stats *stats;
} moved_ctx;

static void on_moved(void *user, const char *old_path, const char *new_path) {
    moved_ctx *m = user;
    size_t n = strlen(new_path) + 16;
    char *msg = pb_malloc(n);
    if (msg) snprintf(msg, n, "moved to '%s'", new_path);
    m->stats->removed++;
    event(m->p, PB_INGEST_REMOVED, old_path, msg ? msg : "moved", 0, 0);
    free(msg);
}

/* Before each commit: the documents this batch wrote replace their old entries under a name that is gone. */
static pb_status prune_moved(pb_store *st, const pb_ingest_params *p, pb_ingest_stats *stats) {
    moved_ctx m = {p, stats};
    int64_t n = 0;
    return pb_store_prune_moved(st, on_moved, &m, &n);
}

/* Decompresses a gzip file (zlib) into a heap buffer of at most MAX_DOC_BYTES. PB_ERR_FORMAT naming the
 * problem for a damaged or oversized stream. */
static pb_status gunzip(const uint8_t *in, size_t n, uint8_t **out, size_t *out_len) {
    *out = NULL;
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return pb_error(PB_ERR_NOMEM, "gzip: cannot start zlib");
    size_t cap = n * 4 + 4096, len = 0;
    uint8_t *buf = NULL;
    int rc = Z_OK;
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)(n > UINT32_MAX ? UINT32_MAX : n);
    while (rc != Z_STREAM_END) {
        if (len == cap || !buf) {
            if (buf) cap *= 2;
            if (cap > MAX_DOC_BYTES + 1) cap = MAX_DOC_BYTES + 1;
            if (len >= cap) {
                inflateEnd(&z);
                free(buf);
                return pb_error(PB_ERR_FORMAT, "gzip: more than %zu bytes when decompressed (the limit)",
                                MAX_DOC_BYTES);
            }
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                inflateEnd(&z);
                free(buf);
                return pb_error(PB_ERR_NOMEM, "gzip: out of memory");
            }
            buf = nb;
        }
        z.next_out = buf + len;
        z.avail_out = (uInt)(cap - len);
        rc = inflate(&z, Z_NO_FLUSH);
        len = cap - z.avail_out;
        if (rc == Z_STREAM_END) break;
        if (rc != Z_OK || (z.avail_in == 0 && z.avail_out != 0)) {
            const char *why = rc == Z_DATA_ERROR ? (z.msg ? z.msg : "damaged data") : "truncated stream";
            inflateEnd(&z);
            free(buf);
            return pb_error(PB_ERR_FORMAT, "gzip: %s", why);
        }
    }
    inflateEnd(&z);
    *out = buf;
    *out_len = len;
    return PB_OK;
}

/* Brings one file up to date. Returns PB_OK for every per-file outcome (reported as events); an error
 * status only when the database fails. *changed is set when the database was written. */
static pb_status ingest_file(pb_store *st, const file_ent *f, const pb_ingest_params *p, pb_ingest_stats *stats,
                             bool *changed) {
    *changed = false;
    if (f->bad_errno) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: %s%s", f->bad_folder ? "cannot read folder" : "cannot examine it",
                 strerror(f->bad_errno),
                 !p->prune       ? ""
                 : f->bad_folder ? " (documents under it are kept)"
                                 : " (kept in the knowledge base)");
        stats->skipped++;
        event(p, PB_INGEST_SKIPPED, f->path, msg, 0, 0);
        if (!p->prune) return PB_OK;
        pb_status s = pb_store_seen_add(st, f->path); /* the entry itself, if it is a document */
        return s ? s : pb_store_seen_add_under(st, f->path);
    }
    if (p->prune) {
        pb_status s = pb_store_seen_add(st, f->path);
        if (s) return s;
    }
    if (f->size > MAX_DOC_BYTES) {
        char msg[96];
        snprintf(msg, sizeof msg, "too large (%zu bytes; the limit is %zu)", f->size, MAX_DOC_BYTES);
        stats->skipped++;
        event(p, PB_INGEST_SKIPPED, f->path, msg, 0, 0);
        return PB_OK;
    }
    if (f->size == 0) {
        stats->skipped++;
        event(p, PB_INGEST_SKIPPED, f->path, "empty file", 0, 0);
        return PB_OK;
    }
    /* read(), not mmap: a document truncated while we read it (an editor saving in place, log rotation)
     * must be a skipped file with a message, not a SIGBUS that kills the whole ingest */
    pb_map m;
    if (pb_map_open(f->path, false, &m)) {
        stats->skipped++;
        event(p, PB_INGEST_SKIPPED, f->path, pb_last_error(), 0, 0);
        return PB_OK;
    }
    stats->bytes += m.size;
    char hash[65];
    pb_status s = pb_store_sha256_hex(m.data, m.size, hash);
    pb_store_doc_info old;
    pb_status ls = s ? s : pb_store_doc_lookup(st, f->path, &old);
    if (ls && ls != PB_ERR_NOT_FOUND) {
        pb_map_close(&m);
        return ls;
    }
    bool exists = ls == PB_OK;
    if (exists && strcmp(old.hash, hash) == 0) {
        if (old.mtime != f->mtime) {
            s = pb_store_doc_touch(st, old.id, f->mtime);
            *changed = true;
        }
        pb_map_close(&m);
        stats->unchanged++;
        event(p, PB_INGEST_UNCHANGED, f->path, NULL, 0, 0);
        return s;
    }
    bool known;
    pb_doc_kind kind = pb_store_kind_from_path(f->path, &known);
    pb_extracted ex;
    const uint8_t *data = m.data;
    size_t size = m.size;
    uint8_t *plain = NULL;
    size_t nl = strlen(f->path);
    if (nl > 3 && !strcasecmp(f->path + nl - 3, ".gz")) {
        if (gunzip(m.data, m.size, &plain, &size)) {
            pb_map_close(&m);
            stats->skipped++;
            event(p, PB_INGEST_SKIPPED, f->path, pb_last_error(), 0, 0);
            return PB_OK;
        }
        data = plain;
    }
    pb_status es = pb_store_extract(f->path, kind, data, size, &ex);
    if (es && !known && !f->named && pb_store_path_has_no_extension(f->path))
        pb_error_prefix(es, "no extension, sniffed as not text: ");
    if (es) {
        free(plain);
        pb_map_close(&m);
        stats->skipped++;
        event(p, PB_INGEST_SKIPPED, f->path, pb_last_error(), 0, 0);
        return PB_OK;
    }
    pb_store_chunk *chunks = NULL;
    int64_t n_chunks = 0;
    s = pb_store_chunk_doc(&ex, ex.title, &p->chunk, &chunks, &n_chunks);
    if (s == PB_OK) {
        pb_store_doc doc = {f->path, hash, f->mtime, (int64_t)m.size, ex.title};
        s = pb_store_doc_put(st, &doc, chunks, n_chunks, NULL);
        if (s == PB_OK) s = pb_store_added_note(st, f->path, hash);
        if (s == PB_OK) {
            *changed = true;
            stats->n_chunks += n_chunks;
            if (exists)
                stats->updated++;
            else
                stats->added++;
            char msg[64];
            snprintf(msg, sizeof msg, "%lld chunks", (long long)n_chunks);
            event(p, exists ? PB_INGEST_UPDATED : PB_INGEST_ADDED, f->path, msg, 0, 0);
        }
    } else if (s != PB_ERR_NOMEM) {
        stats->skipped++;
        event(p, PB_INGEST_SKIPPED, f->path, pb_last_error(), 0, 0);
        s = PB_OK;
    }
    pb_store_chunks_free(chunks, n_chunks);
    pb_store_extracted_free(&ex);
    free(plain);
    pb_map_close(&m);
    return s;
}

pb_status pb_store_ingest(pb_store *st, const char *const *paths, int n_paths, const pb_ingest_params *params,
                          pb_ingest_stats *stats) {
    pb_ingest_params dp = pb_ingest_default_params();
    const pb_ingest_params *p = params ? params : &dp;
    memset(stats, 0, sizeof *stats);
    double t0 = pb_time_ms();
    file_list l = {0};
    char **roots = pb_calloc(n_paths > 0 ? (size_t)n_paths : 1, sizeof *roots);
    if (!roots) return PB_ERR_NOMEM;
    int n_roots = 0;
    pb_status s = PB_OK;
    for (int i = 0; i < n_paths && !s; i++) {
        char *abs = absolute(paths[i]);
        if (!abs) {
            s = PB_ERR_NOMEM;
            break;
        }
        roots[n_roots++] = abs;
        struct stat sb;
        if (stat(abs, &sb) != 0) {
            stats->skipped++;
            event(p, PB_INGEST_SKIPPED, paths[i],
                  p->prune ? "no such file or directory (documents under it are pruned)" : "no such file or directory",
                  0, 0);
        } else if (S_ISDIR(sb.st_mode)) {
            walk(&l, abs, 0);
        } else if (S_ISREG(sb.st_mode)) {
            list_add(&l, abs, &sb, true);
        } else {
            stats->skipped++;
            event(p, PB_INGEST_SKIPPED, paths[i], "not a regular file or directory", 0, 0);
        }
    }
    if (!s && l.oom) s = pb_error(PB_ERR_NOMEM, "ingest: out of memory listing files");
    list_dedup(&l);
    stats->n_files = (int64_t)(l.n - l.n_unreadable);
    if (!s && p->prune) s = pb_store_seen_reset(st);
    size_t done = 0, batch_bytes = 0;
    int batch_files = 0;
    bool in_tx = false;
    for (size_t i = 0; i < l.n && !s; i++) {
        if (p->cancel && *p->cancel) {
            s = pb_error(PB_ERR_CANCELLED, "ingest: cancelled after %zu of %zu files", i, l.n);
            break;
        }
        if (!in_tx) {
            if ((s = pb_store_begin(st))) break;
            in_tx = true;
        }
        bool changed;
        s = ingest_file(st, &l.f[i], p, stats, &changed);
        if (s) break;
        done += l.f[i].size;
        if (changed) {
            batch_files++;
            batch_bytes += l.f[i].size;
        }
        /* A batch is one transaction: a kill -9 loses at most the current batch, never half a document. */
        if (batch_files >= p->batch_files || batch_bytes >= p->batch_bytes) {
            if ((s = prune_moved(st, p, stats)) || (s = pb_store_commit(st))) break;
            in_tx = false;
            batch_files = 0;
            batch_bytes = 0;
        }
        event(p, PB_INGEST_PROGRESS, l.f[i].path, NULL, done, l.total);
    }
    if (in_tx && (s == PB_OK || s == PB_ERR_CANCELLED)) {
        /* the last batch's moved files, before --prune would call them gone (a cancel keeps its message: success
         * sets none) */
        pb_status ms = prune_moved(st, p, stats);
        if (ms) s = ms;
    }
    if (!s && p->prune) {
        if (!in_tx && !(s = pb_store_begin(st))) in_tx = true;
        int64_t removed = 0;
        if (!s) s = pb_store_prune_unseen(st, (const char *const *)roots, n_roots, on_pruned, (void *)p, &removed);
        stats->removed += removed;
    }
    if (in_tx) {
        /* cancellation keeps what was done; a database error rolls the current batch back */
        if (s == PB_OK || s == PB_ERR_CANCELLED) {
            pb_status cs = pb_store_commit(st);
            if (cs) {
                pb_store_rollback(st);
                s = cs;
            }
        } else {
            char keep[1024];
            snprintf(keep, sizeof keep, "%s", pb_last_error());
            pb_store_rollback(st);
            pb_error(s, "%s", keep);
        }
    }
    for (size_t i = 0; i < l.n; i++) free(l.f[i].path);
    free(l.f);
    for (int i = 0; i < n_roots; i++) free(roots[i]);
    free(roots);
    stats->ms = pb_time_ms() - t0;
    return s;
}
