/* sampler.h -- internal API of the sampler room: logits in, token out. Scratch sized once from n_vocab. */
#ifndef PB_SAMPLER_H
#define PB_SAMPLER_H

#include "base/base.h"

typedef struct pb_sampler pb_sampler;

/* Allocates the scratch for a vocabulary of n_vocab tokens (all later calls allocate nothing). */
pb_status pb_sampler_new(int32_t n_vocab, pb_sampler **out);
void pb_sampler_free(pb_sampler *s);
/* Bytes pb_sampler_new allocates for n_vocab (for memory estimates). */
size_t pb_sampler_bytes(int32_t n_vocab);

/* Starts a generation: checks p (PB_ERR_INVALID_ARG naming the field) and seeds the PRNG from p->seed
 * (PB_SEED_RANDOM: from the clock). p and its bias arrays are borrowed until the next start. */
pb_status pb_sampler_start(pb_sampler *s, const pb_sampler_params *p);

/* Samples one token from logits (n_vocab floats, not modified). recent[0..n_recent) are the context's
 * latest tokens (the penalties look at the last penalty_last_n of them; ids outside the vocabulary
 * are ignored). Returns the token, or -1 when every token has probability 0 (all banned / NaN). */
int32_t pb_sampler_sample(pb_sampler *s, const float *logits, const int32_t *recent, int64_t n_recent);

/* True when the started parameters make pb_sampler_sample a plain greedy argmax of the logits as given, whatever
 * the history (temperature 0, no bias, no penalty that can apply): the lowest id of the largest logit, NaN never
 * winning, -1 when no logit exceeds -inf. A caller may then take that argmax from elsewhere (the GPU's). */
bool pb_sampler_greedy_only(const pb_sampler *s);

/* Sparse sampling, for logits that stay on a GPU: the same token as pb_sampler_sample from the best few logits.
 * pb_sampler_top_ok: whether the started parameters allow it for any history (top_k > 0 or greedy, and top_k + the
 * bias ids + the penalty window within PB_SAMPLER_TOP_MAX). pb_sampler_top_need: M, how many of the best logits
 * this history needs (0: every logit), with gather[0..*n_gather) (room for PB_SAMPLER_TOP_MAX) the distinct ids whose
 * logits bias or penalties change. pb_sampler_sample_top: the token pb_sampler_sample would draw (the same PRNG
 * step), given the M best logits top_ids / top_vals in the order (value descending, id ascending; NaN counting as
 * -inf, -0 as +0) and the gathered ids' logits gather_vals. Allocates nothing. */
enum { PB_SAMPLER_TOP_MAX = 128 };
bool pb_sampler_top_ok(const pb_sampler *s);
int32_t pb_sampler_top_need(pb_sampler *s, const int32_t *recent, int64_t n_recent, int32_t *gather, int32_t *n_gather);
int32_t pb_sampler_sample_top(pb_sampler *s, const int32_t *top_ids, const float *top_vals, int32_t m,
                              const int32_t *gather, const float *gather_vals, int32_t ng, const int32_t *recent,
                              int64_t n_recent);

/* The PRNG alone (xoshiro256**, seeded through splitmix64), for tests and reproducible tools. */
typedef struct pb_rng {
    uint64_t s[4];
} pb_rng;
void pb_rng_seed(pb_rng *r, uint64_t seed);
uint64_t pb_rng_next(pb_rng *r);
double pb_rng_uniform(pb_rng *r); /* [0, 1), 53 random bits */

#endif
