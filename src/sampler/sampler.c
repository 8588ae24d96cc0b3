/* sampler.c -- the sampler chain (bias, penalties, top-k, temperature, min-p, top-p), presets and the
 * seeded PRNG. Logits in, token out; allocates only in pb_sampler_new. */
#include "sampler/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- PRNG: xoshiro256** (Blackman & Vigna, 2018), state filled by splitmix64 -------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void pb_rng_seed(pb_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

uint64_t pb_rng_next(pb_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double pb_rng_uniform(pb_rng *r) { return (double)(pb_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* ---- presets and params -------------------------------------------------------------------------- */

static pb_sampler_params preset(float temperature, float top_p) {
    pb_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = temperature;
    p.top_k = 40;
    p.top_p = top_p;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = 42;
    return p;
}

pb_sampler_params pb_sampler_preset(pb_preset p) {
    switch (p) {
    case PB_PRESET_PRECISE: return preset(0.35f, 0.80f);
    case PB_PRESET_BALANCED: return preset(0.60f, 0.90f);
    case PB_PRESET_CREATIVE: return preset(0.90f, 0.95f);
    case PB_PRESET_CODE: return preset(0.20f, 0.60f);
    }
    return preset(0.60f, 0.90f);
}

pb_sampler_params pb_sampler_default_params(void) { return pb_sampler_preset(PB_PRESET_BALANCED); }

static const char *const preset_names[] = {"precise", "balanced", "creative", "code"};

pb_status pb_preset_from_name(const char *name, pb_preset *out) {
    if (!name || !out) return pb_error(PB_ERR_INVALID_ARG, "pb_preset_from_name: %s is NULL", !out ? "out" : "name");
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, preset_names[i]) == 0) {
            *out = (pb_preset)i;
            return PB_OK;
        }
    }
    return pb_error(PB_ERR_INVALID_ARG, "unknown preset '%s' (expected precise, balanced, creative or code)", name);
}

const char *pb_preset_name(pb_preset p) { return (unsigned)p < 4 ? preset_names[p] : "?"; }

pb_status pb_sampler_params_check(const pb_sampler_params *p, int32_t n_vocab) {
    if (!p) return pb_error(PB_ERR_INVALID_ARG, "pb_sampler_params_check: params is NULL");
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f))
        return pb_error(PB_ERR_INVALID_ARG, "sampler: temperature %g is outside [0, 100]", (double)p->temperature);
    if (p->top_k < 0) return pb_error(PB_ERR_INVALID_ARG, "sampler: top_k %d is negative", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return pb_error(PB_ERR_INVALID_ARG, "sampler: top_p %g is outside (0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return pb_error(PB_ERR_INVALID_ARG, "sampler: min_p %g is outside [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f && p->repeat_penalty <= 100.0f))
        return pb_error(PB_ERR_INVALID_ARG, "sampler: repeat_penalty %g is outside (0, 100]",
                        (double)p->repeat_penalty);
    if (!(fabsf(p->presence_penalty) <= 100.0f))
        return pb_error(PB_ERR_INVALID_ARG, "sampler: presence_penalty %g is outside [-100, 100]",
                        (double)p->presence_penalty);
    if (!(fabsf(p->frequency_penalty) <= 100.0f))
        return pb_error(PB_ERR_INVALID_ARG, "sampler: frequency_penalty %g is outside [-100, 100]",
                        (double)p->frequency_penalty);
    if (p->penalty_last_n < 0)
        return pb_error(PB_ERR_INVALID_ARG, "sampler: penalty_last_n %d is negative", p->penalty_last_n);
    if (p->n_bias < 0 || (p->n_bias > 0 && (!p->bias_ids || !p->bias_values)))
        return pb_error(PB_ERR_INVALID_ARG, "sampler: n_bias %d without bias_ids/bias_values", p->n_bias);
    for (int i = 0; i < p->n_bias; i++) {
        if (p->bias_ids[i] < 0 || (n_vocab > 0 && p->bias_ids[i] >= n_vocab))
            return pb_error(PB_ERR_INVALID_ARG, "sampler: logit bias token %d is outside the vocabulary (0..%d)",
                            (int)p->bias_ids[i], (int)n_vocab - 1);
        if (isnan(p->bias_values[i]))
            return pb_error(PB_ERR_INVALID_ARG, "sampler: logit bias of token %d is NaN", (int)p->bias_ids[i]);
    }
    return PB_OK;
}

/* ---- the chain ----------------------------------------------------------------------------------- */

typedef struct cand {
    float v; /* logit, then unnormalized probability */
    int32_t id;
} cand;

struct pb_sampler {
    int32_t n_vocab;
    float *work;     /* [n_vocab] logits after bias and penalties */
    cand *cands;     /* [n_vocab] candidates */
    uint16_t *count; /* [n_vocab] occurrences in the penalty window (zero between calls) */
    pb_sampler_params p;
    pb_rng rng;
};

size_t pb_sampler_bytes(int32_t n_vocab) {
    return sizeof(pb_sampler) + (size_t)n_vocab * (sizeof(float) + sizeof(cand) + sizeof(uint16_t));
}

pb_status pb_sampler_new(int32_t n_vocab, pb_sampler **out) {
    *out = NULL;
    if (n_vocab <= 0) return pb_error(PB_ERR_INVALID_ARG, "sampler: n_vocab %d must be positive", (int)n_vocab);
    pb_sampler *s = pb_calloc(1, sizeof *s);
    if (!s) return PB_ERR_NOMEM;
    s->n_vocab = n_vocab;
    s->work = pb_malloc((size_t)n_vocab * sizeof(float));
    s->cands = pb_malloc((size_t)n_vocab * sizeof(cand));
    s->count = pb_calloc((size_t)n_vocab, sizeof(uint16_t));
    if (!s->work || !s->cands || !s->count) {
        pb_sampler_free(s);
        return PB_ERR_NOMEM;
    }
    s->p = pb_sampler_default_params();
    pb_rng_seed(&s->rng, s->p.seed);
    *out = s;
    return PB_OK;
}

void pb_sampler_free(pb_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->cands);
    free(s->count);
    free(s);
}

pb_status pb_sampler_start(pb_sampler *s, const pb_sampler_params *p) {
    pb_status st = pb_sampler_params_check(p, s->n_vocab);
    if (st != PB_OK) return st;
    s->p = *p;
    uint64_t seed = p->seed;
    if (seed == PB_SEED_RANDOM) seed = pb_time_ns() ^ ((uint64_t)(uintptr_t)s << 16);
    pb_rng_seed(&s->rng, seed);
    return PB_OK;
}

/* whether the penalties can change anything, whatever the history */
static bool penalties_set(const pb_sampler_params *p) {
    return (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) &&
           p->penalty_last_n != 0;
}

/* whether apply_penalties changes anything for this history */
static bool penalties_on(const pb_sampler_params *p, const int32_t *recent, int64_t n_recent) {
    return penalties_set(p) && n_recent > 0 && recent;
}

bool pb_sampler_greedy_only(const pb_sampler *s) {
    const pb_sampler_params *p = &s->p;
    return p->temperature <= 0.0f && p->n_bias == 0 && !penalties_set(p);
}

static void apply_penalties(pb_sampler *s, const int32_t *recent, int64_t n_recent) {
    const pb_sampler_params *p = &s->p;
    if (!penalties_on(p, recent, n_recent)) return;
    int64_t lo = n_recent > p->penalty_last_n ? n_recent - p->penalty_last_n : 0;
    for (int64_t i = lo; i < n_recent; i++) {
        int32_t t = recent[i];
        if (t >= 0 && t < s->n_vocab && s->count[t] < UINT16_MAX) s->count[t]++;
    }
    /* each distinct token once: apply when its count is non-zero, then clear the count */
    for (int64_t i = lo; i < n_recent; i++) {
        int32_t t = recent[i];
        if (t < 0 || t >= s->n_vocab || s->count[t] == 0) continue;
        float l = s->work[t];
        if (p->repeat_penalty != 1.0f) l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= (float)s->count[t] * p->frequency_penalty + p->presence_penalty;
        s->work[t] = l;
        s->count[t] = 0;
    }
}

/* Descending by value, then ascending id: a total order, so the result never depends on the sort. */
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

static inline bool cand_less(cand a, cand b) { return a.v < b.v || (a.v == b.v && a.id > b.id); }

/* Puts x into the hole j of the min-heap c[0..m) (root = the worst by cand_less), sifting down. */
static void cand_sift(cand *c, int32_t m, int32_t j, cand x) {
    for (;;) {
        int32_t l = 2 * j + 1, r = l + 1, w = j;
        cand cw = x;
        if (l < m && cand_less(c[l], cw)) w = l, cw = c[l];
        if (r < m && cand_less(c[r], cw)) w = r;
        if (w == j) break;
        c[j] = c[w];
        j = w;
    }
    c[j] = x;
}

/* Keeps the k best of work[] in c[0..k) with a min-heap (root = worst kept). Returns k. */
static int32_t select_top_k(const float *work, int32_t n, int32_t k, cand *c) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        cand x = {work[i], i};
        if (m < k) {
            int32_t j = m++;
            while (j > 0 && cand_less(x, c[(j - 1) / 2])) {
                c[j] = c[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            c[j] = x;
        } else if (cand_less(c[0], x)) {
            cand_sift(c, m, 0, x);
        }
    }
    return m;
}

/* c[0..n) into the canonical order (cand_cmp: best first) in place, by heapsort: no allocation, which qsort does
 * not promise (glibc's mallocs its merge buffer above 1 KiB) and a token step must not do. heap: c already is a
 * min-heap (select_top_k's). The order is total, so any correct sort gives these bytes. */
static void cand_sort(cand *c, int32_t n, bool heap) {
    if (!heap)
        for (int32_t j = n / 2 - 1; j >= 0; j--) cand_sift(c, n, j, c[j]);
    for (int32_t e = n - 1; e > 0; e--) { /* the worst left to the end */
        const cand x = c[e];
        c[e] = c[0];
        cand_sift(c, e, 0, x);
    }
}

/* Reorders c[0..n) so that c[0..k) is the smallest set of best candidates whose mass reaches need,
 * and returns k. Quickselect on mass (expected O(n)): a Gemma vocabulary with a flat distribution
 * would otherwise need a sort of ~10^5 candidates per token. Deterministic: pivots are chosen by
 * position and the order (value, id) is total. */
static int32_t nucleus(cand *c, int32_t n, double need) {
    int32_t lo = 0, hi = n;
    double before = 0.0; /* mass of c[0..lo), all inside the nucleus */
    while (hi - lo > 32) {
        /* median of three as pivot, moved to hi-1 */
        int32_t a = lo, b = lo + (hi - lo) / 2, d = hi - 1, piv;
        if (cand_cmp(&c[a], &c[b]) < 0)
            piv = cand_cmp(&c[b], &c[d]) < 0 ? b : (cand_cmp(&c[a], &c[d]) < 0 ? d : a);
        else
            piv = cand_cmp(&c[a], &c[d]) < 0 ? a : (cand_cmp(&c[b], &c[d]) < 0 ? d : b);
        cand t = c[piv];
        c[piv] = c[hi - 1];
        c[hi - 1] = t;
        int32_t m = lo;
        double upper = 0.0;
        for (int32_t i = lo; i < hi - 1; i++) {
            if (cand_cmp(&c[i], &t) < 0) { /* better than the pivot */
                cand x = c[i];
                c[i] = c[m];
                c[m++] = x;
                upper += (double)x.v;
            }
        }
        c[hi - 1] = c[m];
        c[m] = t;
        if (before + upper >= need) {
            hi = m;
        } else if (before + upper + (double)t.v >= need) {
            return m + 1;
        } else {
            before += upper + (double)t.v;
            lo = m + 1;
        }
    }
    cand_sort(c + lo, hi - lo, false);
    for (int32_t i = lo; i < hi; i++) {
        before += (double)c[i].v;
        if (before >= need) return i + 1;
    }
    return hi > 0 ? hi : 1;
}

/* Greedy: the lowest id of the largest value, -1 when no value exceeds -inf. NaN never wins (a > b is false for it),
 * so NaN logits count as -inf without a pass to map them. Blocks of 64: each block's maximum in 8 independent lanes
 * (no branch on the data, so the compiler keeps them in vector registers), one compare a block, then the first id
 * holding the maximum inside the block that first reached it (a strictly larger block maximum moves it, an equal one
 * does not: lowest id on ties). 12x faster than the one-pass argmax after a copy and a NaN pass on 256k logits. */
static int32_t argmax_lowest(const float *w, int32_t n) {
    float bv = -INFINITY;
    int32_t at = -1, i = 0;
    for (; i + 64 <= n; i += 64) {
        float m[8];
        for (int k = 0; k < 8; k++) m[k] = -INFINITY;
        for (int j = 0; j < 64; j += 8)
            for (int k = 0; k < 8; k++) m[k] = w[i + j + k] > m[k] ? w[i + j + k] : m[k];
        float b = m[0];
        for (int k = 1; k < 8; k++) b = m[k] > b ? m[k] : b;
        if (b > bv) bv = b, at = i;
    }
    for (; i < n; i++)
        if (w[i] > bv) bv = w[i], at = i;
    if (at < 0) return -1;
    for (i = at; i < n; i++)
        if (w[i] == bv) return i;
    return -1;
}

/* The chain after top-k (temperature, min-p, top-p, the draw) over c[0..nc), which the caller put in the canonical
 * order (cand_cmp) whenever it kept a subset, so the full and the sparse paths see the same candidates in the same
 * order and draw the same token. */
static int32_t sample_chain(pb_sampler *s, cand *c, int32_t nc) {
    const pb_sampler_params *p = &s->p;
    float mx = -INFINITY;
    for (int32_t i = 0; i < nc; i++) mx = c[i].v > mx ? c[i].v : mx;
    if (mx == -INFINITY) return -1;

    /* temperature + softmax (unnormalized: relative to the best token, which gets 1). A +inf logit (a +inf bias)
     * takes all the mass, shared among the +inf ones; the best gets exactly 1 even when 1 / temperature overflows,
     * so min-p keeps at least one candidate. */
    const float inv_t = 1.0f / p->temperature;
    double sum = 0.0;
    for (int32_t i = 0; i < nc; i++) {
        const float d = c[i].v - mx;
        c[i].v = mx == INFINITY ? (c[i].v == INFINITY ? 1.0f : 0.0f) : d == 0.0f ? 1.0f : expf(d * inv_t);
        sum += (double)c[i].v;
    }

    /* min-p: drop p < min_p * p_max; p_max is 1 in these units */
    if (p->min_p > 0.0f) {
        int32_t m = 0;
        sum = 0.0;
        for (int32_t i = 0; i < nc; i++)
            if (c[i].v >= p->min_p) sum += (double)c[i].v, c[m++] = c[i];
        nc = m;
    }

    /* top-p: tokens with p < (1 - top_p) / nc cannot be in the nucleus (together they weigh less than
     * 1 - top_p, and every kept token outweighs each of them), so only the rest needs sorting. */
    if (p->top_p < 1.0f && nc > 1) {
        double cut = (1.0 - (double)p->top_p) * sum / (double)nc;
        int32_t m = 0;
        for (int32_t i = 0; i < nc; i++)
            if ((double)c[i].v >= cut) c[m++] = c[i];
        nc = m;
        nc = nucleus(c, nc, (double)p->top_p * sum);
        sum = 0.0;
        for (int32_t i = 0; i < nc; i++) sum += (double)c[i].v;
    }

    double u = pb_rng_uniform(&s->rng) * sum, acc = 0.0;
    for (int32_t i = 0; i < nc; i++) {
        acc += (double)c[i].v;
        if (u < acc) return c[i].id;
    }
    return c[nc - 1].id; /* rounding: u landed on the total */
}

/* Bias ids (and through them penalised ones) may hold NaN after the additions (-inf + inf): -inf, as the copy maps
 * the logits' own NaN, so the candidates' order stays total. */
static void unnan_bias(pb_sampler *s) {
    const pb_sampler_params *p = &s->p;
    for (int i = 0; i < p->n_bias; i++) {
        float *w = &s->work[p->bias_ids[i]];
        if (*w != *w) *w = -INFINITY;
    }
}

int32_t pb_sampler_sample(pb_sampler *s, const float *logits, const int32_t *recent, int64_t n_recent) {
    const pb_sampler_params *p = &s->p;
    const int32_t n = s->n_vocab;
    /* greedy over the logits as given: nothing to change, so no copy (a GPU step waits on this: 256k logits) */
    if (p->temperature <= 0.0f && p->n_bias == 0 && !penalties_on(p, recent, n_recent)) return argmax_lowest(logits, n);

    float *w = s->work;
    for (int32_t i = 0; i < n; i++) { /* the copy maps NaN to -inf in the same pass */
        const float v = logits[i];
        w[i] = v != v ? -INFINITY : v;
    }
    for (int i = 0; i < p->n_bias; i++) w[p->bias_ids[i]] += p->bias_values[i];
    apply_penalties(s, recent, n_recent);
    unnan_bias(s);

    if (p->temperature <= 0.0f) return argmax_lowest(w, n); /* greedy: argmax, lowest id on ties */

    cand *c = s->cands;
    int32_t nc;
    if (p->top_k > 0 && p->top_k < n) {
        nc = select_top_k(w, n, p->top_k, c);
        cand_sort(c, nc, true); /* the canonical order (pb_sampler_sample_top's) */
    } else {
        for (int32_t i = 0; i < n; i++) c[i].v = w[i], c[i].id = i;
        nc = n;
    }
    return sample_chain(s, c, nc);
}

/* ---- sparse sampling: the best logits only (a GPU's top-M) ------------------------------------- */

/* the tokens sampled among: top_k, or 1 for greedy; 0 when every logit takes part */
static int32_t top_base(const pb_sampler *s) {
    const pb_sampler_params *p = &s->p;
    if (p->temperature <= 0.0f) return 1;
    return p->top_k > 0 && p->top_k < s->n_vocab ? p->top_k : 0;
}

bool pb_sampler_top_ok(const pb_sampler *s) {
    const pb_sampler_params *p = &s->p;
    const int64_t base = top_base(s), win = penalties_set(p) ? p->penalty_last_n : 0;
    return base > 0 && base + p->n_bias + win <= PB_SAMPLER_TOP_MAX && base + p->n_bias + win < s->n_vocab;
}

int32_t pb_sampler_top_need(pb_sampler *s, const int32_t *recent, int64_t n_recent, int32_t *gather,
                            int32_t *n_gather) {
    const pb_sampler_params *p = &s->p;
    const int32_t base = top_base(s);
    *n_gather = 0;
    if (base == 0) return 0;
    /* the distinct ids bias or penalties change, marked in count[] (zero again before returning) */
    int32_t ng = 0;
    bool over = false;
    for (int i = 0; i < p->n_bias && !over; i++) {
        const int32_t t = p->bias_ids[i];
        if (s->count[t]) continue;
        if (ng == PB_SAMPLER_TOP_MAX)
            over = true;
        else
            s->count[t] = 1, gather[ng++] = t;
    }
    if (penalties_on(p, recent, n_recent)) {
        int64_t lo = n_recent > p->penalty_last_n ? n_recent - p->penalty_last_n : 0;
        for (int64_t i = lo; i < n_recent && !over; i++) {
            const int32_t t = recent[i];
            if (t < 0 || t >= s->n_vocab || s->count[t]) continue;
            if (ng == PB_SAMPLER_TOP_MAX)
                over = true;
            else
                s->count[t] = 1, gather[ng++] = t;
        }
    }
    for (int32_t i = 0; i < ng; i++) s->count[gather[i]] = 0;
    const int64_t m = (int64_t)base + ng;
    if (over || m > PB_SAMPLER_TOP_MAX || m >= s->n_vocab) return 0;
    *n_gather = ng;
    return (int32_t)m;
}

int32_t pb_sampler_sample_top(pb_sampler *s, const int32_t *top_ids, const float *top_vals, int32_t m,
                              const int32_t *gather, const float *gather_vals, int32_t ng, const int32_t *recent,
                              int64_t n_recent) {
    const pb_sampler_params *p = &s->p;
    const int32_t n = s->n_vocab;
    float *w = s->work;
    cand *c = s->cands;
    int32_t nc = 0;
    /* S = the top ids, then the gathered ones not among them (count[] marks members, cleared below) */
    for (int32_t k = 0; k < m + ng; k++) {
        const int32_t t = k < m ? top_ids[k] : gather[k - m];
        const float v = k < m ? top_vals[k] : gather_vals[k - m];
        if (t < 0 || t >= n || s->count[t]) continue;
        s->count[t] = 1;
        w[t] = v != v ? -INFINITY : v;
        c[nc++].id = t;
    }
    for (int32_t i = 0; i < nc; i++) s->count[c[i].id] = 0;
    for (int i = 0; i < p->n_bias; i++) w[p->bias_ids[i]] += p->bias_values[i];
    apply_penalties(s, recent, n_recent);
    unnan_bias(s);
    for (int32_t i = 0; i < nc; i++) c[i].v = w[c[i].id];
    cand_sort(c, nc, false);
    if (p->temperature <= 0.0f) return nc > 0 && c[0].v > -INFINITY ? c[0].id : -1; /* greedy */
    return sample_chain(s, c, nc < p->top_k ? nc : p->top_k);
}
