/* bench_cold.h -- `bench --cold`: process start -> first token in fresh processes (tools/bench_cold.c). */
#ifndef PB_BENCH_COLD_H
#define PB_BENCH_COLD_H

#include <stdbool.h>

/* Runs reps fresh processes per thread count, the model file evicted from the page cache before each;
 * prints a Markdown table (or JSON). Returns 0 or an exit status. */
int bench_cold(const char *path, const int *threads, int n_threads, int reps, bool json);
/* The child's side (`bench --cold-child PATH THREADS FD`): open, session, 24-token prefill + one token;
 * writes "open_ms first_token_ms\n" to out_fd. Returns the exit status. */
int bench_cold_child(const char *path, int threads, int out_fd);

#endif
