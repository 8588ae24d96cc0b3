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

/* The PRNG alone (xoshiro256**, seeded through splitmix64), for tests and reproducible tools. */
typedef struct pb_rng {
    uint64_t s[4];
} pb_rng;
void pb_rng_seed(pb_rng *r, uint64_t seed);
uint64_t pb_rng_next(pb_rng *r);
double pb_rng_uniform(pb_rng *r); /* [0, 1), 53 random bits */

#endif
