/* bench_cold.h -- `bench --cold`: process start -> first token in fresh processes (tools/bench_cold.c). */
#ifndef PB_BENCH_COLD_H
#define PB_BENCH_COLD_H

#include <stdbool.h>

/* Runs reps fresh processes per thread count, the model file (and every file of cache_dir, the packed-weights
 * cache; NULL = none) evicted from the page cache before each; with a cache, one untimed process first makes
 * sure it is written. Prints a Markdown table (or JSON). Returns 0 or an exit status. */
int bench_cold(const char *path, const int *threads, int n_threads, int reps, bool json, const char *cache_dir);
/* The child's side (`bench --cold-child PATH THREADS FD CACHE_DIR|-`): open, session, 24-token prefill + one
 * token; writes "open_ms first_token_ms pack_cache_state\n" to out_fd. Returns the exit status. */
int bench_cold_child(const char *path, int threads, int out_fd, const char *cache_dir);

#endif
