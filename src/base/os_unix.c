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

/* Opens path for reading only if it is a regular file. O_NONBLOCK on the open: a FIFO named as a model or
 * session file would otherwise block open() until some writer came (info, run -m, chat --session hung);
 * cleared again once fstat says regular (it means nothing for regular files on Linux, but not everywhere).
 * Returns the fd, or -1 with the error set: "cannot open" or "not a regular file". */
static int open_regular(const char *path, struct stat *st) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        pb_error(PB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        pb_error(PB_ERR_IO, "'%s' is not a regular file", path);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

pb_status pb_map_open(const char *path, bool use_mmap, pb_map *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    int fd = open_regular(path, &st);
    if (fd < 0) return PB_ERR_IO;
    size_t size = (size_t)st.st_size;
    out->dev = (uint64_t)st.st_dev;
    out->ino = (uint64_t)st.st_ino;
    out->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
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
            int err = errno;
            pb_aligned_free(buf);
            close(fd);
            if (r == 0) /* the file shrank since fstat: a writer truncated it (editor, log rotation) */
                return pb_error(PB_ERR_IO, "'%s' changed while being read (it shrank to %zu of %zu bytes)", path, got,
                                size);
            return pb_error(PB_ERR_IO, "cannot read '%s': %s", path, strerror(err));
        }
        got += (size_t)r;
    }
    close(fd);
    out->data = buf;
    out->size = size;
    return PB_OK;
}

pb_status pb_mkdirs(const char *dir) {
    if (!dir || !*dir) return pb_error(PB_ERR_INVALID_ARG, "empty directory name");
    char *p = pb_strdup(dir);
    if (!p) return PB_ERR_NOMEM;
    pb_status s = PB_OK;
    for (char *c = p + 1;; c++) { /* each prefix ending at a '/', then the whole path */
        if (*c != '/' && *c != 0) continue;
        char keep = *c;
        *c = 0;
        struct stat st;
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            s = pb_error(PB_ERR_IO, "cannot create directory '%s': %s", p, strerror(errno));
        else if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
            s = pb_error(PB_ERR_IO, "'%s' is not a directory", p);
        *c = keep;
        if (s || keep == 0) break;
    }
    free(p);
    return s;
}

char *pb_realpath(const char *path) { return path ? realpath(path, NULL) : NULL; }

pb_status pb_map_open_huge(const char *path, pb_map *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    int fd = open_regular(path, &st);
    if (fd < 0) return PB_ERR_IO;
    if (st.st_size == 0) {
        close(fd);
        return pb_error(PB_ERR_IO, "'%s' is an empty file", path);
    }
    size_t size = (size_t)st.st_size, A = (size_t)2 << 20;
    /* reserve size + 2 MiB, map the file at the first 2 MiB boundary inside, give the rest back */
    uint8_t *r = mmap(NULL, size + A, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *p = MAP_FAILED;
    if (r != MAP_FAILED) {
        uint8_t *a = (uint8_t *)PB_PAD((uintptr_t)r, A);
        p = mmap(a, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
        if (p == MAP_FAILED) {
            munmap(r, size + A);
        } else {
            if (a > r) munmap(r, (size_t)(a - r));
            size_t tail_at = PB_PAD(size, (size_t)sysconf(_SC_PAGESIZE));
            if (r + size + A > a + tail_at) munmap(a + tail_at, (size_t)(r + size + A - (a + tail_at)));
        }
    }
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) return pb_error(PB_ERR_IO, "cannot map '%s': %s", path, strerror(err));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, size, MADV_HUGEPAGE); /* page faults read 2 MiB folios and map them whole */
#endif
    out->data = p;
    out->size = size;
    out->mapped = true;
    out->dev = (uint64_t)st.st_dev;
    out->ino = (uint64_t)st.st_ino;
    out->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
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

static void *big_map(size_t n, bool huge) {
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
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    (void)madvise(a, keep, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE); /* NOHUGEPAGE: THP "always" too */
#else
    (void)huge;
#endif
    return a;
}

void *pb_big_alloc(size_t n) { return big_map(n, true); }

void *pb_big_alloc_lazy(size_t n) { return big_map(n, false); }

#if defined(__linux__) && !defined(MADV_COLLAPSE)
#define MADV_COLLAPSE 25 /* Linux 6.1 (uapi asm-generic/mman-common.h); older kernels answer EINVAL */
#endif

void pb_big_huge(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    if (!p) return;
    size_t len = PB_PAD(n ? n : 1, BIG_ALIGN);
    (void)madvise(p, len, MADV_HUGEPAGE);
#ifdef MADV_COLLAPSE
    (void)madvise(p, len, MADV_COLLAPSE); /* the 2 MiB ranges already touched, now, not when khugepaged passes */
#endif
#else
    (void)p;
    (void)n;
#endif
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
        errno = 0;
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f), e = errno;
    fclose(f);
    if (!buf) return pb_error(PB_ERR_NOMEM, "out of memory reading '%s'", path);
    if (err) { /* a directory (EISDIR), an I/O error */
        free(buf);
        return pb_error(PB_ERR_IO, "cannot read '%s': %s", path, strerror(e ? e : EIO));
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

/* 16 hex digits from the OS's random source: the temp name cannot be guessed ahead (O_EXCL makes a
 * guessed one fail anyway; the randomness keeps a planted name from blocking every attempt). */
static void random_hex(char out[17]) {
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0;
        close(fd);
    }
    static uint64_t counter;
    v ^= pb_time_ns() * 0x9E3779B97F4A7C15ull ^ ((uint64_t)getpid() << 32) ^
         __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0xBF58476D1CE4E5B9ull;
    for (int i = 0; i < 16; i++) out[i] = "0123456789abcdef"[(v >> (i * 4)) & 15];
    out[16] = 0;
}

/* The directory part of path ("." when it has none), for the directory fsync after the rename. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return pb_strdup(".");
    if (slash == path) return pb_strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = pb_malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = 0;
    }
    return d;
}

/* What an existing target is, in words, when it is not a plain file (NULL for a regular file). */
static const char *non_regular_kind(mode_t m) {
    if (S_ISREG(m)) return NULL;
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

pb_status pb_output_check(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return PB_OK;
        return pb_error(PB_ERR_IO, "cannot check output '%s': %s", path, strerror(errno));
    }
    const char *kind = non_regular_kind(st.st_mode);
    if (kind)
        return pb_error(PB_ERR_IO, "output '%s' is %s: refusing to replace it (name a regular file%s)", path, kind,
                        S_ISLNK(st.st_mode) ? ", e.g. the file the link points to" : "");
    return PB_OK;
}

pb_status pb_sync_dir_of(const char *path) {
    pb_status s = PB_OK;
    char *dir = dir_of(path);
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
        if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS)
            s = pb_error(PB_ERR_IO, "cannot sync directory '%s': %s", dir, strerror(errno));
        close(dfd);
    }
    free(dir);
    return s;
}

pb_status pb_atomic_open(const char *path, pb_atomic_file *out) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (!path || !*path) return pb_error(PB_ERR_INVALID_ARG, "empty output path");
    pb_status s = pb_output_check(path);
    if (s) return s;
    struct stat old;
    bool keep_mode = lstat(path, &old) == 0; /* a replaced file keeps its permission bits */
    size_t n = strlen(path) + 64;
    out->path = pb_strdup(path);
    out->tmp_path = pb_malloc(n);
    if (!out->path || !out->tmp_path) {
        free(out->path);
        free(out->tmp_path);
        out->path = out->tmp_path = NULL;
        return PB_ERR_NOMEM;
    }
    int err = EEXIST;
    for (int attempt = 0; attempt < 16 && out->fd < 0 && err == EEXIST; attempt++) {
        char rnd[17];
        random_hex(rnd);
        snprintf(out->tmp_path, n, "%s.tmp.%s", path, rnd);
        tmp_register(out->tmp_path); /* before open(): a signal right after it still finds the file to remove */
        /* O_EXCL: never reuse or follow anything already at the name (a planted file or symlink). */
        out->fd = open(out->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        err = errno;
        if (out->fd < 0) tmp_unregister(out->tmp_path);
    }
    if (out->fd < 0) {
        s = pb_error(PB_ERR_IO, "cannot create a temporary file beside '%s': %s", path, strerror(err));
        free(out->path);
        free(out->tmp_path);
        out->path = out->tmp_path = NULL;
        return s;
    }
    if (keep_mode) (void)fchmod(out->fd, old.st_mode & 07777);
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
    /* The target may have changed kind since open (a FIFO or link put there meanwhile): check again. */
    if (s == PB_OK) s = pb_output_check(f->path);
    if (s == PB_OK && rename(f->tmp_path, f->path) != 0)
        s = pb_error(PB_ERR_IO, "cannot rename '%s' to '%s': %s", f->tmp_path, f->path, strerror(errno));
    if (s != PB_OK) unlink(f->tmp_path);
    if (s == PB_OK) s = pb_sync_dir_of(f->path); /* make the rename itself durable: sync the directory entry */
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

void pb_file_drop_cache(const char *path) {
#ifdef POSIX_FADV_DONTNEED
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC); /* a FIFO: no wait for a writer */
    if (fd < 0) return;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
#else
    (void)path;
#endif
}
