/* bench_parallel.h -- `bench --parallel N,...`: N streams decoding at once, batched and alone (bench_parallel.c). */
#ifndef PB_BENCH_PARALLEL_H
#define PB_BENCH_PARALLEL_H

#include "pocketbrain.h"

#include <stdbool.h>

/* For each count in ns[0..n_ns): that many sessions of one model (threads each), each prefilled with an n_p-token
 * random prompt (not timed), then all decoding n_g tokens (at least 1: cmd_bench refuses -n 0) at once on their own
 * threads, once through one pb_batch and once each alone; reps repetitions. Prints a Markdown table (or JSON) of
 * aggregate decode tok/s, per-stream tok/s p50 / p99 and the mean batch size. sample: the preset the streams sample
 * with (NULL: greedy). Returns 0 or an exit status. */
int bench_parallel(const char *path, const int *ns, int n_ns, int threads, int gpu, int n_p, int n_g, int reps,
                   pb_kv_type kv, const pb_preset *sample, const char *cache_dir, bool json);

#endif
