/* base.h -- internal foundation shared by every room: errors, asserts, files/mmap, time, threads, CPU. */
#ifndef PB_BASE_H
#define PB_BASE_H

#include "pocketbrain.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- errors ---------------------------------------------------------------------------------- */

/* Records a thread-local message for pb_last_error() and returns s, so callers can write
 * `return pb_error(PB_ERR_FORMAT, "gguf: tensor '%s' offset past end of file", name);` */
pb_status pb_error(pb_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current message: "convert: " + previous text, unless it already starts with the prefix.
 * Returns s. */
pb_status pb_error_prefix(pb_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pb_error_clear(void);
/* A nonzero number that tells the calling thread from every other thread alive now (the address of a thread-local):
 * how the engine knows a call on a busy session came from its own callback rather than from another thread. */
uintptr_t pb_thread_tag(void);

/* Programmer bugs only (never for bytes from files or the network). Always on. */
void pb_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define PB_ASSERT(x) ((x) ? (void)0 : pb_assert_fail(#x, __FILE__, __LINE__))

void pb_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Overflow-checked size arithmetic: false on overflow. */
static inline bool pb_mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool pb_add_ok(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

#define PB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PB_MAX(a, b) ((a) > (b) ? (a) : (b))
/* A hint to fetch the cache line at p (no effect on results). Note: GCC counts it as no side effect, so a
 * function doing nothing but prefetches is found "pure" and its calls dropped: keep such helpers inlined. */
#if defined(__GNUC__)
#define PB_PREFETCH(p) __builtin_prefetch(p)
#else
#define PB_PREFETCH(p) ((void)(p))
#endif
#define PB_PAD(x, n) (((x) + (n)-1) & ~((size_t)(n)-1))

/* ---- allocation -----------------------------------------------------------------------------  */
/* malloc/calloc that set PB_ERR_NOMEM text on failure (return NULL). Aligned memory is 64-byte. */
void *pb_malloc(size_t n);
void *pb_calloc(size_t count, size_t size);
void *pb_aligned_alloc(size_t n); /* free with pb_aligned_free */
void pb_aligned_free(void *p);
char *pb_strdup(const char *s);

/* ---- files (os_unix.c) ----------------------------------------------------------------------- */

typedef struct pb_map {
    const uint8_t *data; /* read-only view of the whole file */
    size_t size;
    bool mapped; /* true: munmap on close; false: heap copy */
    /* the opened file's identity (fstat of the descriptor that was mapped or read): device, inode,
     * modification time in ns; a file replaced or rewritten since gets other values */
    uint64_t dev, ino, mtime_ns;
} pb_map;

/* Maps a file read-only (falls back to reading it when mmap is unavailable or use_mmap is false).
 * A mapping reflects the file: if another program truncates it while mapped, reading a page past the new
 * end raises SIGBUS in the reader (POSIX). Inputs that may change under us (documents) are read with
 * use_mmap false: a file that shrinks during the read gives PB_ERR_IO "changed while being read". */
pb_status pb_map_open(const char *path, bool use_mmap, pb_map *out);
void pb_map_close(pb_map *m);
/* Maps a non-empty file read-only at a 2 MiB-aligned address and asks for transparent huge pages on it (Linux:
 * page faults then read 2 MiB folios and map them as huge pages where the file system has large folios). For
 * files read whole and often (the packed-weights cache); never falls back to reading. Close with pb_map_close. */
pb_status pb_map_open_huge(const char *path, pb_map *out);
/* Drops the whole pages inside [p, p+n) of a mapped file from this process's memory (the next access
 * reads them from the file again). No-op for heap copies. */
void pb_map_release(const pb_map *m, const void *p, size_t n);
/* Large long-lived buffers (repacked weights): anonymous pages, 2 MiB aligned, transparent huge pages
 * asked for where the OS has them. NULL + pb_error on failure. Free with pb_big_free(p, n). */
void *pb_big_alloc(size_t n);
/* Like pb_big_alloc, but 4 KiB pages until pb_big_huge(p, n) asks for huge pages: for a buffer filled a
 * little at a time (the K/V cache), whose first touch should zero 4 KiB, not 2 MiB per region touched. */
void *pb_big_alloc_lazy(size_t n);
/* Asks for transparent huge pages on a pb_big_alloc_lazy buffer from now on: untouched 2 MiB ranges get
 * them at first touch, touched ones are merged now where the kernel can (Linux 6.1 MADV_COLLAPSE; else
 * later, by khugepaged). No-op where the OS has none. */
void pb_big_huge(void *p, size_t n);
void pb_big_free(void *p, size_t n);
/* True when the OS gives pb_big_alloc transparent huge pages (Linux THP "always" or "madvise"). */
bool pb_huge_pages_available(void);

/* Creates directory dir and its missing parents (mode 0700 & ~umask for new ones). PB_ERR_IO naming the
 * part that failed (read-only file system, permission, a file in the way). */
pb_status pb_mkdirs(const char *dir);
/* The absolute, symlink-free form of an existing path (free with free()), or NULL. */
char *pb_realpath(const char *path);

/* Reads a whole file into a NUL-terminated heap buffer (free with free()). */
pb_status pb_read_file(const char *path, char **out, size_t *len);

/* Atomic file output, the one way any part of pocketbrain writes a file. pb_atomic_open refuses a
 * target that exists and is not a regular file (a symbolic link, device, FIFO, directory, socket: the
 * message says which) and creates "<path>.tmp.<16 random hex>" beside it with O_EXCL | O_NOFOLLOW (an
 * existing or planted name is never reused or followed); a replaced file keeps its permission bits,
 * a new one gets 0666 & ~umask. pb_atomic_commit fsyncs the file, checks the target again, renames
 * the temp file over it and fsyncs the directory. pb_atomic_abort removes the temp file. A crashed or
 * failed writer never leaves a partial file at path. */
typedef struct pb_atomic_file {
    int fd;
    char *path;
    char *tmp_path;
} pb_atomic_file;

pb_status pb_atomic_open(const char *path, pb_atomic_file *out);
/* PB_OK when path does not exist or is a regular file (not followed: a symlink fails); otherwise
 * PB_ERR_IO naming what is there. For outputs not written through pb_atomic_* (a database). */
pb_status pb_output_check(const char *path);
pb_status pb_atomic_write(pb_atomic_file *f, const void *data, size_t n);
/* fsyncs the directory that holds path (after a rename into it; filesystems that cannot are not an error). */
pb_status pb_sync_dir_of(const char *path);
pb_status pb_atomic_commit(pb_atomic_file *f);
/* Asks the OS to drop the (clean) page-cache pages of the file at path (posix_fadvise DONTNEED; a no-op where there
 * is none). For a file written once and mapped later: a written file's cached pages are small folios, which a later
 * mapping cannot map as huge pages; read back from storage they come in 2 MiB folios under MADV_HUGEPAGE. */
void pb_file_drop_cache(const char *path);
void pb_atomic_abort(pb_atomic_file *f);
/* Removes every temp file still open in this process (called from SIGINT/SIGTERM handlers by tools;
 * async-signal-safe: uses only unlink()). */
void pb_atomic_cleanup_all(void);

/* Monotonic time in nanoseconds / milliseconds. */
uint64_t pb_time_ns(void);
double pb_time_ms(void);

/* Memory: bytes available to this process (min of MemAvailable and cgroup v1/v2 limit - usage);
 * 0 when unknown. Peak resident set size of this process in bytes (0 when unknown). */
size_t pb_mem_available(void);
size_t pb_peak_rss(void);
size_t pb_current_rss(void);

/* ---- CPU features (cpu.c) -------------------------------------------------------------------- */

enum {
    PB_CPU_AVX2 = 1 << 0,
    PB_CPU_FMA = 1 << 1,
    PB_CPU_F16C = 1 << 2,
    PB_CPU_AVX512F = 1 << 3,
    PB_CPU_AVX512BW = 1 << 4,
    PB_CPU_AVX512VL = 1 << 5,
    PB_CPU_AVX512VNNI = 1 << 6,
    PB_CPU_AVX512DQ = 1 << 7,
    PB_CPU_NEON = 1 << 8,
    PB_CPU_DOTPROD = 1 << 9,
    PB_CPU_I8MM = 1 << 10, /* ARMv8.6 int8 matrix multiply (SMMLA) */
};
/* Detected once; PB_CPU env var ("scalar", "avx2", "dotprod") can restrict it for tests/benches. */
unsigned pb_cpu_features(void);
int pb_cpu_physical_cores(void);

/* ---- thread pool (pool.c, the only <pthread.h> user besides the engine's batcher) -------------- */

typedef struct pb_pool pb_pool;
/* fn is called once for each ith in [0, nth) with the same ctx; pb_pool_run returns when all done.
 * The calling thread takes part as ith 0. Other parts run on whichever thread is free -- the caller too,
 * when a worker is asleep or descheduled (a busy machine) -- so key scratch by ith, never by thread.
 * nth never depends on load, so results are the same however the parts were shared out. One caller at
 * a time per pool; fn must not run jobs on its own pool. */
typedef void (*pb_pool_fn)(void *ctx, int ith, int nth);

pb_status pb_pool_new(int n_threads, pb_pool **out);
void pb_pool_free(pb_pool *p);
int pb_pool_size(const pb_pool *p);
void pb_pool_run(pb_pool *p, pb_pool_fn fn, void *ctx);
/* Runs with only the first n threads (1 <= n <= size); used by the thermal governor. */
void pb_pool_run_n(pb_pool *p, int n, pb_pool_fn fn, void *ctx);
/* Caps the threads pb_pool_run uses from now on (1..size; out-of-range values are clamped); the
 * thermal governor lowers it when the CPU is hot. Thread-safe. pb_pool_limit reads the cap. */
void pb_pool_set_limit(pb_pool *p, int n);
int pb_pool_limit(const pb_pool *p);

/* One-off background work (pool.c): fn(arg) on a thread of its own; pb_thread_join waits for it and frees it
 * (NULL: nothing). Used for the packed-weights cache write (pack_cache.c). */
typedef struct pb_thread pb_thread;
pb_status pb_thread_start(void (*fn)(void *), void *arg, pb_thread **out);
void pb_thread_join(pb_thread *t);

/* Splits [0, n) evenly: the range of part ith of nth. */
static inline void pb_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = (n + nth - 1) / nth;
    *lo = per * ith;
    *hi = *lo + per;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

#endif
