/* os_unix.c -- POSIX files: mmap views, whole-file reads, atomic temp+rename output, clocks, memory. */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

pb_status pb_map_open(const char *path, bool use_mmap, pb_map *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pb_error(PB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return pb_error(PB_ERR_IO, "'%s' is not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size == 0) {
        close(fd);
        out->data = (const uint8_t *)"";
        return PB_OK;
    }
    if (use_mmap) {
        void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED) {
            close(fd);
            out->data = p;
            out->size = size;
            out->mapped = true;
            return PB_OK;
        }
    }
    uint8_t *buf = pb_aligned_alloc(size);
    if (!buf) {
        close(fd);
        return PB_ERR_NOMEM;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            pb_aligned_free(buf);
            close(fd);
            return pb_error(PB_ERR_IO, "cannot read '%s': %s", path, r < 0 ? strerror(errno) : "short read");
        }
        got += (size_t)r;
    }
    close(fd);
    out->data = buf;
    out->size = size;
    return PB_OK;
}

void pb_map_release(const pb_map *m, const void *p, size_t n) {
    if (!m->mapped || n == 0) return;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1),
              e = ((uintptr_t)p + n) & ~((uintptr_t)pg - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_DONTNEED);
}

#define BIG_ALIGN ((size_t)2 << 20)

void *pb_big_alloc(size_t n) {
    size_t len = PB_PAD(n ? n : 1, BIG_ALIGN) + BIG_ALIGN;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        pb_error(PB_ERR_NOMEM, "out of memory mapping %zu bytes", n);
        return NULL;
    }
    uint8_t *a = (uint8_t *)PB_PAD((uintptr_t)p, BIG_ALIGN); /* trim to a 2 MiB boundary: huge pages fit */
    if (a > p) munmap(p, (size_t)(a - p));
    size_t keep = PB_PAD(n ? n : 1, BIG_ALIGN);
    if ((size_t)(p + len - (a + keep)) > 0) munmap(a + keep, (size_t)(p + len - (a + keep)));
#ifdef MADV_HUGEPAGE
    (void)madvise(a, keep, MADV_HUGEPAGE);
#endif
    return a;
}

bool pb_huge_pages_available(void) {
    static int state = -1; /* -1 unknown, 0 no, 1 yes */
    int st = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (st >= 0) return st == 1;
    char buf[128] = {0};
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
        fclose(f);
    }
    st = strstr(buf, "[always]") || strstr(buf, "[madvise]") ? 1 : 0;
    __atomic_store_n(&state, st, __ATOMIC_RELAXED);
    return st == 1;
}

void pb_big_free(void *p, size_t n) {
    if (p) munmap(p, PB_PAD(n ? n : 1, BIG_ALIGN));
}

void pb_map_close(pb_map *m) {
    if (!m || !m->data) return;
    if (m->mapped)
        munmap((void *)m->data, m->size);
    else if (m->size)
        pb_aligned_free((void *)m->data);
    memset(m, 0, sizeof *m);
}

pb_status pb_read_file(const char *path, char **out, size_t *len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return pb_error(PB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return pb_error(PB_ERR_NOMEM, "out of memory reading '%s'", path);
    if (err) {
        free(buf);
        return pb_error(PB_ERR_IO, "cannot read '%s'", path);
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return PB_OK;
}

/* ---- atomic output ---------------------------------------------------------------------------- */

#define MAX_OPEN_TMP 16
static char open_tmp[MAX_OPEN_TMP][4096]; /* fixed storage: readable from a signal handler */
static volatile int open_tmp_used[MAX_OPEN_TMP];

static void tmp_register(const char *p) {
    for (int i = 0; i < MAX_OPEN_TMP; i++) {
        if (!open_tmp_used[i]) {
            snprintf(open_tmp[i], sizeof open_tmp[i], "%s", p);
            open_tmp_used[i] = 1;
            return;
        }
    }
}

static void tmp_unregister(const char *p) {
    for (int i = 0; i < MAX_OPEN_TMP; i++)
        if (open_tmp_used[i] && strcmp(open_tmp[i], p) == 0) open_tmp_used[i] = 0;
}

void pb_atomic_cleanup_all(void) {
    for (int i = 0; i < MAX_OPEN_TMP; i++)
        if (open_tmp_used[i]) unlink(open_tmp[i]);
}

pb_status pb_atomic_open(const char *path, pb_atomic_file *out) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    size_t n = strlen(path) + 64;
    out->path = pb_strdup(path);
    out->tmp_path = pb_malloc(n);
    if (!out->path || !out->tmp_path) {
        free(out->path);
        free(out->tmp_path);
        return PB_ERR_NOMEM;
    }
    snprintf(out->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    tmp_register(out->tmp_path); /* before open(): a signal right after it still finds the file to remove */
    out->fd = open(out->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out->fd < 0) {
        pb_status s = pb_error(PB_ERR_IO, "cannot create '%s': %s", out->tmp_path, strerror(errno));
        tmp_unregister(out->tmp_path);
        free(out->path);
        free(out->tmp_path);
        out->path = out->tmp_path = NULL;
        return s;
    }
    return PB_OK;
}

pb_status pb_atomic_write(pb_atomic_file *f, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return pb_error(PB_ERR_IO, "cannot write '%s': %s", f->tmp_path, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    return PB_OK;
}

pb_status pb_atomic_commit(pb_atomic_file *f) {
    pb_status s = PB_OK;
    if (fsync(f->fd) != 0) s = pb_error(PB_ERR_IO, "cannot sync '%s': %s", f->tmp_path, strerror(errno));
    if (close(f->fd) != 0 && s == PB_OK) s = pb_error(PB_ERR_IO, "cannot close '%s': %s", f->tmp_path, strerror(errno));
    f->fd = -1;
    if (s == PB_OK && rename(f->tmp_path, f->path) != 0)
        s = pb_error(PB_ERR_IO, "cannot rename '%s' to '%s': %s", f->tmp_path, f->path, strerror(errno));
    if (s != PB_OK) unlink(f->tmp_path);
    tmp_unregister(f->tmp_path);
    free(f->path);
    free(f->tmp_path);
    f->path = f->tmp_path = NULL;
    return s;
}

void pb_atomic_abort(pb_atomic_file *f) {
    if (!f || !f->tmp_path) return;
    if (f->fd >= 0) close(f->fd);
    unlink(f->tmp_path);
    tmp_unregister(f->tmp_path);
    free(f->path);
    free(f->tmp_path);
    f->path = f->tmp_path = NULL;
    f->fd = -1;
}

/* ---- clocks ----------------------------------------------------------------------------------- */

uint64_t pb_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double pb_time_ms(void) { return (double)pb_time_ns() / 1e6; }

/* ---- memory ----------------------------------------------------------------------------------- */

static size_t read_u64_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = {0};
    size_t v = 0;
    if (fgets(buf, sizeof buf, f) && buf[0] >= '0' && buf[0] <= '9') v = (size_t)strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

static size_t meminfo_field(const char *field) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t v = 0, n = strlen(field);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = (size_t)strtoull(line + n + 1, NULL, 10) * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

size_t pb_mem_available(void) {
    size_t avail = meminfo_field("MemAvailable");
    /* cgroup v2 */
    size_t lim = read_u64_file("/sys/fs/cgroup/memory.max");
    size_t use = read_u64_file("/sys/fs/cgroup/memory.current");
    if (lim == 0) { /* cgroup v1 */
        lim = read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
        use = read_u64_file("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    }
    if (lim > 0 && lim < ((size_t)1 << 60)) {
        size_t room = lim > use ? lim - use : 0;
        if (avail == 0 || room < avail) avail = room;
    }
    return avail;
}

size_t pb_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024;
}

size_t pb_current_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long pages = 0, rss = 0;
    int n = fscanf(f, "%lu %lu", &pages, &rss);
    fclose(f);
    return n == 2 ? (size_t)rss * (size_t)sysconf(_SC_PAGESIZE) : 0;
}
