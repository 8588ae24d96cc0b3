/* pack_cache.c -- the packed-weights cache: a model's repacked matrices written once to a file named after the
 * model's path, checked against the model file's identity, and mapped read-only on later opens instead of
 * repacking. No packing math (kernels/pack.c) and no choice of which matrices pack (model.c). */
#include "model/model_impl.h"
#include "kernels/matmul.h"
#include "tensor/types.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* File layout (host byte order; the endian field refuses a file from another byte order):
 *   [0, 2 MiB)                    pc_header, zero padded
 *   [2 MiB, 2 MiB + data_bytes)   the matrices in plan order (repacked, or as in the model file), each padded
 *                                 to 64 bytes
 * The data starts at 2 MiB so that, mapped at a 2 MiB-aligned address, the page cache's 2 MiB folios can be
 * mapped as huge pages (pb_map_open_huge): decode walks every weight byte per token, and on 4 KiB pages it ran
 * 2-3x slower here (TLB misses; docs/PERFORMANCE.md). The plan (which matrices, in which order, their types,
 * shapes and packed flags) is not stored: it follows from the model and this CPU's packed kernels, and its
 * hash must match. Bump PC_LAYOUT when kernels/pack.c's layout or this format changes. */
#define PC_MAGIC    "PBPACK\r\n"
#define PC_LAYOUT   2u
#define PC_ENDIAN   0x01020304u
#define PC_DATA_OFF ((size_t)2 << 20)

typedef struct {
    char magic[8];
    uint32_t layout, endian;
    uint64_t model_size, model_dev, model_ino, model_mtime_ns;
    uint8_t fingerprint[32];
    uint64_t plan_hash, n_mats, data_off, data_bytes;
    uint64_t header_hash; /* of every byte above */
} pc_header;

_Static_assert(sizeof(pc_header) <= PC_DATA_OFF, "header fits its page");

static uint64_t fnv(uint64_t h, const void *p, size_t n) { /* FNV-1a 64: an identity check, not security */
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define FNV0 0xcbf29ce484222325ull

static uint64_t plan_hash(pb_wmat *const *mats, const bool *pk, int n, size_t *bytes) {
    uint64_t h = fnv(FNV0, &(uint32_t){PC_LAYOUT}, 4);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const pb_gguf_tensor *t = mats[i]->t;
        int64_t v[6] = {t->type, t->ne[0], t->ne[1], t->ne[2], (int64_t)t->nbytes, pk[i]};
        h = fnv(h, t->name, strlen(t->name) + 1);
        h = fnv(h, v, sizeof v);
        total += PB_PAD(t->nbytes, 64);
    }
    *bytes = total;
    return h;
}

static void note(pb_model *m, int state, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(pb_model *m, int state, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->info.pack_cache_note, sizeof m->info.pack_cache_note, fmt, ap);
    va_end(ap);
    m->info.pack_cache = state;
}

/* dir/<model file name without .gguf, at most 40 bytes>-<hash of the model's real path>.pbpack */
static char *cache_path(const char *dir, const char *model_path) {
    char *real = pb_realpath(model_path);
    const char *key = real ? real : model_path;
    uint64_t h = fnv(FNV0, key, strlen(key));
    const char *base = strrchr(key, '/');
    base = base ? base + 1 : key;
    size_t bl = strlen(base);
    if (bl > 5 && strcmp(base + bl - 5, ".gguf") == 0) bl -= 5;
    if (bl > 40) bl = 40;
    size_t cap = strlen(dir) + bl + 40;
    char *p = pb_malloc(cap);
    if (p) snprintf(p, cap, "%s/%.*s-%016llx.pbpack", dir, (int)bl, base, (unsigned long long)h);
    free(real);
    return p;
}

pb_status pb_pack_cache_file(const char *dir, const char *model_path, char *buf, size_t cap) {
    if (!dir) return pb_error(PB_ERR_INVALID_ARG, "pb_pack_cache_file: dir is NULL");
    if (!model_path) return pb_error(PB_ERR_INVALID_ARG, "pb_pack_cache_file: model_path is NULL");
    if (!buf) return pb_error(PB_ERR_INVALID_ARG, "pb_pack_cache_file: buf is NULL");
    char *p = cache_path(dir, model_path);
    if (!p) return PB_ERR_NOMEM;
    size_t n = strlen(p);
    pb_status st = PB_OK;
    if (n >= cap)
        st = pb_error(PB_ERR_INVALID_ARG, "pb_pack_cache_file: the name needs %zu bytes, cap is %zu", n + 1, cap);
    else
        memcpy(buf, p, n + 1);
    free(p);
    return st;
}

static void fill_header(const pb_model *m, uint64_t plan, int n, size_t bytes, pc_header *h) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, PC_MAGIC, 8);
    h->layout = PC_LAYOUT;
    h->endian = PC_ENDIAN;
    h->model_size = m->map.size;
    h->model_dev = m->map.dev;
    h->model_ino = m->map.ino;
    h->model_mtime_ns = m->map.mtime_ns;
    memcpy(h->fingerprint, m->info.fingerprint, 32);
    h->plan_hash = plan;
    h->n_mats = (uint64_t)n;
    h->data_off = PC_DATA_OFF;
    h->data_bytes = bytes;
    h->header_hash = fnv(FNV0, h, offsetof(pc_header, header_hash));
}

/* Repacks (or copies) the first and the last 16-row group of every matrix from the model file and compares
 * them with the cache's bytes: catches a file zeroed, cut or written by another packing without reading all of
 * it (damage elsewhere in the data is not seen: docs/ARCHITECTURE.md). */
static bool spot_check(pb_wmat *const *mats, const bool *pk, int n, const uint8_t *data, const char **bad) {
    size_t cap = 0;
    for (int i = 0; i < n; i++) cap = PB_MAX(cap, pb_row_size(mats[i]->t->type, mats[i]->t->ne[0]) * PB_PACK_ROWS);
    uint8_t *tmp = pb_malloc(cap ? cap : 1);
    if (!tmp) return false;
    bool ok = true;
    size_t off = 0;
    for (int i = 0; i < n && ok; i++) {
        const pb_gguf_tensor *t = mats[i]->t;
        size_t gsz = pb_row_size(t->type, t->ne[0]) * PB_PACK_ROWS;
        if (gsz > t->nbytes) gsz = t->nbytes;
        size_t at[2] = {0, t->nbytes - gsz}; /* packed: N % 16 == 0, so the last group starts there too */
        for (int k = 0; k < 2 && ok; k++) {
            const uint8_t *src = (const uint8_t *)t->data + at[k];
            if (pk[i])
                ok = pb_pack_groups(t->type, src, tmp, t->ne[0], PB_PACK_ROWS, 0, 1) == PB_OK &&
                     memcmp(tmp, data + off + at[k], gsz) == 0;
            else
                ok = memcmp(src, data + off + at[k], gsz) == 0;
        }
        if (!ok) *bad = t->name;
        off += PB_PAD(t->nbytes, 64);
    }
    free(tmp);
    return ok;
}

pb_status pb_pack_cache_load(pb_model *m, const char *dir, const char *model_path, pb_wmat *const *mats, const bool *pk,
                             int n) {
    char *path = cache_path(dir, model_path);
    if (!path) return PB_ERR_NOMEM;
    size_t bytes = 0;
    uint64_t plan = plan_hash(mats, pk, n, &bytes);
    pc_header want, have;
    fill_header(m, plan, n, bytes, &want);
    pb_map cm;
    const char *why = NULL, *bad = NULL;
    if (pb_map_open_huge(path, &cm) != PB_OK) {
        note(m, PB_PACK_CACHE_OFF, "no cache file '%s' yet", path);
        free(path);
        return PB_ERR_NOT_FOUND;
    }
    if (!cm.mapped || cm.size < PC_DATA_OFF)
        why = "truncated (shorter than its header)";
    else {
        memcpy(&have, cm.data, sizeof have);
        if (memcmp(have.magic, PC_MAGIC, 8) != 0 || have.endian != PC_ENDIAN)
            why = "not a pocketbrain cache file of this byte order";
        else if (have.header_hash != fnv(FNV0, &have, offsetof(pc_header, header_hash)))
            why = "corrupt header";
        else if (have.layout != PC_LAYOUT)
            why = "written for another packed layout version";
        else if (have.model_size != want.model_size || have.model_dev != want.model_dev ||
                 have.model_ino != want.model_ino || have.model_mtime_ns != want.model_mtime_ns ||
                 memcmp(have.fingerprint, want.fingerprint, 32) != 0)
            why = "stale (the model file changed since it was written)";
        else if (have.plan_hash != want.plan_hash || have.n_mats != want.n_mats || have.data_bytes != want.data_bytes ||
                 have.data_off != PC_DATA_OFF)
            why = "written for other packed kernels (another CPU or build)";
        else if (cm.size != PC_DATA_OFF + bytes)
            why = "truncated or padded (its size does not match its header)";
        else if (!spot_check(mats, pk, n, cm.data + PC_DATA_OFF, &bad))
            why = "corrupt data";
    }
    if (why) {
        if (bad)
            note(m, PB_PACK_CACHE_OFF, "cache file '%s' is %s (tensor '%s'): rebuilt", path, why, bad);
        else
            note(m, PB_PACK_CACHE_OFF, "cache file '%s' is %s: rebuilt", path, why);
        pb_map_close(&cm);
        free(path);
        return PB_ERR_FORMAT;
    }
    size_t off = PC_DATA_OFF;
    for (int i = 0; i < n; i++) {
        mats[i]->data = cm.data + off;
        mats[i]->packed = pk[i];
        off += PB_PAD(mats[i]->t->nbytes, 64);
    }
    m->cache_map = cm;
    note(m, PB_PACK_CACHE_HIT, "mapped %s (%.0f MiB)", path, (double)bytes / (1024.0 * 1024.0));
    free(path);
    return PB_OK;
}

/* One write of the cache file: what it writes (a snapshot of the matrices' bytes and sizes, taken on the opening
 * thread) and its outcome, which only pb_pack_cache_wait / store copy into m->info (so pb_model_get_info never
 * reads what a writer thread is writing). */
struct pb_pc_job {
    char *path;
    pc_header h;
    int n;
    const void **data;
    size_t *nbytes, bytes;
    char prev[sizeof(((pb_model_info *)0)->pack_cache_note)]; /* why the load missed */
    int state;                                                /* outcome: PB_PACK_CACHE_WRITTEN or _FAILED */
    char note[sizeof(((pb_model_info *)0)->pack_cache_note)];
    atomic_int done;
};

static void job_free(struct pb_pc_job *j) {
    if (!j) return;
    free(j->path);
    free(j->data);
    free(j->nbytes);
    free(j);
}

static struct pb_pc_job *job_new(pb_model *m, const char *dir, const char *model_path, pb_wmat *const *mats,
                                 const bool *pk, int n) {
    pb_error_clear(); /* a failure below names itself; none names "out of memory" */
    struct pb_pc_job *j = pb_calloc(1, sizeof *j);
    if (!j) return NULL;
    j->path = cache_path(dir, model_path);
    j->data = pb_calloc((size_t)(n > 0 ? n : 1), sizeof *j->data);
    j->nbytes = pb_calloc((size_t)(n > 0 ? n : 1), sizeof *j->nbytes);
    if (!j->path || !j->data || !j->nbytes || pb_mkdirs(dir) != PB_OK) {
        job_free(j);
        return NULL;
    }
    snprintf(j->prev, sizeof j->prev, "%s", m->info.pack_cache_note);
    uint64_t plan = plan_hash(mats, pk, n, &j->bytes); /* before fill_header reads bytes */
    fill_header(m, plan, n, j->bytes, &j->h);
    j->n = n;
    for (int i = 0; i < n; i++) j->data[i] = mats[i]->data, j->nbytes[i] = mats[i]->t->nbytes;
    return j;
}

/* Appends src to the string in dst (cap bytes), cut to fit. */
static void append(char *dst, size_t cap, const char *src) {
    size_t w = strlen(dst), n = strlen(src);
    if (w + 1 >= cap) return;
    if (n > cap - 1 - w) n = cap - 1 - w;
    memcpy(dst + w, src, n);
    dst[w + n] = 0;
}

/* The write itself: thread-safe (touches only the job and the file system). */
static void job_run(void *arg) {
    struct pb_pc_job *j = arg;
    static const uint8_t zeros[PC_DATA_OFF]; /* never written: the zero page, not 2 MiB of memory */
    pb_atomic_file f;
    pb_status s = pb_atomic_open(j->path, &f);
    if (s == PB_OK) {
        s = pb_atomic_write(&f, &j->h, sizeof j->h);
        if (s == PB_OK) s = pb_atomic_write(&f, zeros, PC_DATA_OFF - sizeof j->h);
        for (int i = 0; i < j->n && s == PB_OK; i++) {
            size_t nb = j->nbytes[i];
            s = pb_atomic_write(&f, j->data[i], nb);
            if (s == PB_OK && PB_PAD(nb, 64) > nb) s = pb_atomic_write(&f, zeros, PB_PAD(nb, 64) - nb);
        }
        if (s == PB_OK)
            s = pb_atomic_commit(&f);
        else
            pb_atomic_abort(&f);
    }
    /* the written pages sit in the page cache as small folios, which the next open's mapping could not map as huge
     * pages (measured: 79% huge, decode ~10% slower than the anonymous copy); dropped, the next open reads the file
     * back in 2 MiB folios (95% huge) */
    if (s == PB_OK) {
        pb_file_drop_cache(j->path);
        j->state = PB_PACK_CACHE_WRITTEN;
        snprintf(j->note, sizeof j->note, "wrote %s (%.0f MiB)", j->path, (double)j->bytes / (1024.0 * 1024.0));
        if (j->prev[0]) { /* why the load missed, as much as fits */
            append(j->note, sizeof j->note, "; before: ");
            append(j->note, sizeof j->note, j->prev);
        }
    } else {
        j->state = PB_PACK_CACHE_FAILED;
        snprintf(j->note, sizeof j->note, "not written (%.200s); weights repacked in memory", pb_last_error());
    }
    atomic_store(&j->done, 1);
}

static void job_finish(pb_model *m, struct pb_pc_job *j) {
    note(m, j->state, "%s", j->note);
    job_free(j);
}

void pb_pack_cache_store(pb_model *m, const char *dir, const char *model_path, pb_wmat *const *mats, const bool *pk,
                         int n) {
    struct pb_pc_job *j = job_new(m, dir, model_path, mats, pk, n);
    if (!j) {
        note(m, PB_PACK_CACHE_FAILED, "not written (%.200s); weights repacked in memory",
             pb_last_error()[0] ? pb_last_error() : "out of memory");
        return;
    }
    job_run(j);
    job_finish(m, j);
}

void pb_pack_cache_store_background(pb_model *m, const char *dir, const char *model_path, pb_wmat *const *mats,
                                    const bool *pk, int n) {
    struct pb_pc_job *j = job_new(m, dir, model_path, mats, pk, n);
    if (!j) {
        note(m, PB_PACK_CACHE_FAILED, "not written (%.200s); weights repacked in memory",
             pb_last_error()[0] ? pb_last_error() : "out of memory");
        return;
    }
    if (pb_thread_start(job_run, j, &m->pc_thread) != PB_OK) { /* no thread: write it now */
        job_run(j);
        job_finish(m, j);
        return;
    }
    m->pc_job = j;
    note(m, PB_PACK_CACHE_WRITING, "writing %s (%.0f MiB) in the background", j->path,
         (double)j->bytes / (1024.0 * 1024.0));
}

void pb_pack_cache_wait(pb_model *m) {
    if (!m->pc_thread) return;
    pb_thread_join(m->pc_thread);
    m->pc_thread = NULL;
    job_finish(m, m->pc_job);
    m->pc_job = NULL;
}

bool pb_pack_cache_busy(const pb_model *m) { return m->pc_job && !atomic_load(&m->pc_job->done); }
