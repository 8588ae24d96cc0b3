/* test_sampler.c -- sampler chain on synthetic logits: distributions (statistical checks with fixed
 * seeds), top-k/top-p/min-p/temperature, penalties and their window, logit bias, presets, PRNG. */
#include "alloc_count.h"
#include "pb_test.h"
#include "sampler/sampler.h"
#include "topk_ref.h"

#include <math.h>

#define N_TRIALS 200000

static pb_sampler_params plain(void) {
    pb_sampler_params p = pb_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

/* Draws N_TRIALS tokens and compares their frequencies with expect[] (which sums to 1): every id
 * within 5 standard deviations, and a chi-square below a loose bound. Returns the worst z. */
static double check_dist(pb_sampler *s, const float *logits, int n, const double *expect, const int32_t *recent,
                         int n_recent, const char *what) {
    static long count[64];
    memset(count, 0, sizeof count);
    for (int i = 0; i < N_TRIALS; i++) {
        int32_t t = pb_sampler_sample(s, logits, recent, n_recent);
        if (t < 0 || t >= n) {
            CHECK(0, "%s: sampled id %d is outside [0, %d)", what, (int)t, n);
            return 1e9;
        }
        count[t]++;
    }
    double worst = 0, chi2 = 0;
    int dof = 0, bad_zero = 0;
    for (int i = 0; i < n; i++) {
        double e = expect[i] * N_TRIALS;
        if (expect[i] == 0) {
            bad_zero += count[i] != 0;
            continue;
        }
        double sd = sqrt(N_TRIALS * expect[i] * (1 - expect[i]));
        double z = fabs((double)count[i] - e) / (sd > 0 ? sd : 1);
        if (z > worst) worst = z;
        chi2 += ((double)count[i] - e) * ((double)count[i] - e) / e;
        dof++;
    }
    CHECK(bad_zero == 0, "%s: tokens with probability 0 never drawn (%d were)", what, bad_zero);
    CHECK(worst < 5.0, "%s: every frequency within 5 sd of its probability (worst z %.2f)", what, worst);
    /* chi-square with dof-1 degrees of freedom: mean dof-1, sd sqrt(2(dof-1)); allow mean + 6 sd */
    double bound = (dof - 1) + 6 * sqrt(2.0 * (dof > 1 ? dof - 1 : 1)) + 1;
    CHECK(chi2 < bound, "%s: chi-square %.1f < %.1f (%d classes)", what, chi2, bound, dof);
    return worst;
}

static void softmax(const float *l, int n, float temp, double *out) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) mx = (double)l[i] > mx ? (double)l[i] : mx;
    for (int i = 0; i < n; i++) sum += out[i] = exp(((double)l[i] - mx) / (double)temp);
    for (int i = 0; i < n; i++) out[i] /= sum;
}

static void renorm(double *p, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += p[i];
    for (int i = 0; i < n; i++) p[i] /= s;
}

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y); /* descending */
}

int main(void) {
    enum { N = 12 };
    /* a fixed distribution with distinct probabilities */
    const double probs[N] = {0.30, 0.20, 0.15, 0.10, 0.08, 0.06, 0.04, 0.03, 0.02, 0.012, 0.005, 0.003};
    float logits[N];
    for (int i = 0; i < N; i++) logits[i] = (float)log(probs[i]) + 3.0f; /* shift: softmax ignores it */
    double e[N];

    pb_sampler *s;
    CHECK(pb_sampler_new(N, &s) == PB_OK, "sampler_new(12)");
    CHECK(pb_sampler_bytes(N) > 0, "sampler_bytes");

    /* plain sampling reproduces the softmax */
    pb_sampler_params p = plain();
    CHECK(pb_sampler_start(s, &p) == PB_OK, "start plain");
    softmax(logits, N, 1.0f, e);
    check_dist(s, logits, N, e, NULL, 0, "T=1");

    /* temperature 0.5 squares the probabilities */
    p.temperature = 0.5f;
    pb_sampler_start(s, &p);
    softmax(logits, N, 0.5f, e);
    check_dist(s, logits, N, e, NULL, 0, "T=0.5");

    /* top-k 3: the three best, renormalized */
    p = plain();
    p.top_k = 3;
    pb_sampler_start(s, &p);
    softmax(logits, N, 1.0f, e);
    for (int i = 3; i < N; i++) e[i] = 0;
    renorm(e, N);
    check_dist(s, logits, N, e, NULL, 0, "top-k 3");

    /* top-p 0.6: 0.30 + 0.20 = 0.50 < 0.6, + 0.15 = 0.65 >= 0.6 -> ids 0..2 */
    p = plain();
    p.top_p = 0.6f;
    pb_sampler_start(s, &p);
    softmax(logits, N, 1.0f, e);
    for (int i = 3; i < N; i++) e[i] = 0;
    renorm(e, N);
    check_dist(s, logits, N, e, NULL, 0, "top-p 0.6");

    /* top-p 0.9: cumulative 0.30 .50 .65 .75 .83 .89 .93 -> ids 0..6 */
    p.top_p = 0.9f;
    pb_sampler_start(s, &p);
    softmax(logits, N, 1.0f, e);
    for (int i = 7; i < N; i++) e[i] = 0;
    renorm(e, N);
    check_dist(s, logits, N, e, NULL, 0, "top-p 0.9");

    /* min-p 0.25: keep p >= 0.075 -> ids 0..4 */
    p = plain();
    p.min_p = 0.25f;
    pb_sampler_start(s, &p);
    softmax(logits, N, 1.0f, e);
    for (int i = 5; i < N; i++) e[i] = 0;
    renorm(e, N);
    check_dist(s, logits, N, e, NULL, 0, "min-p 0.25");

    /* the chain: T 0.7, then min-p 0.1, then top-p 0.8 (computed independently here) */
    p = plain();
    p.temperature = 0.7f;
    p.min_p = 0.1f;
    p.top_p = 0.8f;
    pb_sampler_start(s, &p);
    softmax(logits, N, 0.7f, e);
    {
        double pmax = e[0];
        for (int i = 0; i < N; i++)
            if (e[i] < 0.1 * pmax) e[i] = 0;
        renorm(e, N);
        double acc = 0;
        int keep = N;
        for (int i = 0; i < N; i++) { /* already in descending order */
            acc += e[i];
            if (acc >= 0.8 - 1e-9) {
                keep = i + 1;
                break;
            }
        }
        for (int i = keep; i < N; i++) e[i] = 0;
        renorm(e, N);
        NOTE("chain keeps %d tokens", keep);
    }
    check_dist(s, logits, N, e, NULL, 0, "T 0.7 + min-p 0.1 + top-p 0.8");

    /* penalties: frequency 0.5 and presence 0.3 on a window holding id 0 twice and id 1 once */
    p = plain();
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.3f;
    p.penalty_last_n = 4; /* of {9, 5, 0, 1, 99, 0}: the last 4 are 0, 1, 99 (outside the vocab), 0 */
    pb_sampler_start(s, &p);
    {
        float pl[N];
        memcpy(pl, logits, sizeof pl);
        pl[0] -= 2 * 0.5f + 0.3f; /* window {0, 1, 99, 0}: id 0 twice */
        pl[1] -= 1 * 0.5f + 0.3f;
        softmax(pl, N, 1.0f, e);
    }
    const int32_t win[] = {9, 5, 0, 1, 99, 0};
    check_dist(s, logits, N, e, win, 6, "frequency + presence penalties, window 4");

    /* repetition penalty (llama.cpp rule: positive logits divided, negative multiplied) */
    {
        float l2[4] = {2.0f, 1.9f, -1.0f, -1.05f};
        pb_sampler *s4;
        pb_sampler_new(4, &s4);
        pb_sampler_params g = plain();
        g.temperature = 0;
        pb_sampler_start(s4, &g);
        CHECK(pb_sampler_sample(s4, l2, NULL, 0) == 0, "greedy picks the argmax");
        g.repeat_penalty = 1.2f;
        g.penalty_last_n = 64;
        pb_sampler_start(s4, &g);
        int32_t r0[] = {0};
        CHECK(pb_sampler_sample(s4, l2, r0, 1) == 1, "repeat penalty 1.2: 2.0/1.2 < 1.9 -> id 1");
        float l3[4] = {-3.0f, -1.0f, -1.1f, -5.0f};
        int32_t r1[] = {1};
        CHECK(pb_sampler_sample(s4, l3, r1, 1) == 2, "repeat penalty multiplies a negative logit: -1.2 < -1.1");
        int32_t r2[] = {0, 3, 3, 3};
        g.penalty_last_n = 3; /* id 0 is outside the window */
        pb_sampler_start(s4, &g);
        CHECK(pb_sampler_sample(s4, l2, r2, 4) == 0, "tokens outside penalty_last_n are not penalized");
        g.penalty_last_n = 0;
        pb_sampler_start(s4, &g);
        CHECK(pb_sampler_sample(s4, l2, r0, 1) == 0, "penalty_last_n 0 disables the penalties");
        /* greedy ties: lowest id */
        float tie[4] = {1.0f, 3.0f, 3.0f, 0.0f};
        g = plain();
        g.temperature = 0;
        pb_sampler_start(s4, &g);
        CHECK(pb_sampler_sample(s4, tie, NULL, 0) == 1, "greedy tie -> lowest id");
        /* logit bias: ban the best, force the worst */
        int32_t bid[] = {1, 2};
        float bval[] = {-INFINITY, -INFINITY};
        g.bias_ids = bid;
        g.bias_values = bval;
        g.n_bias = 2;
        pb_sampler_start(s4, &g);
        CHECK(pb_sampler_sample(s4, tie, NULL, 0) == 0, "bias -inf bans tokens 1 and 2");
        int32_t fid[] = {3};
        float fval[] = {10.0f};
        g = plain();
        g.bias_ids = fid;
        g.bias_values = fval;
        g.n_bias = 1;
        g.top_k = 1;
        pb_sampler_start(s4, &g);
        CHECK(pb_sampler_sample(s4, tie, NULL, 0) == 3, "bias +10 makes token 3 the only top-k 1 choice");
        /* all banned -> -1 */
        int32_t all[] = {0, 1, 2, 3};
        float ninf[] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        g = plain();
        g.bias_ids = all;
        g.bias_values = ninf;
        g.n_bias = 4;
        pb_sampler_start(s4, &g);
        CHECK(pb_sampler_sample(s4, tie, NULL, 0) == -1, "every token banned -> -1");
        /* NaN logits never win */
        float nanl[4] = {NAN, 0.5f, NAN, 0.1f};
        g = plain();
        g.temperature = 0;
        pb_sampler_start(s4, &g);
        CHECK(pb_sampler_sample(s4, nanl, NULL, 0) == 1, "NaN logits are treated as -inf");
        /* +inf (a +inf bias) takes all the mass, shared by the +inf tokens; a temperature whose inverse overflows
         * still draws the best token (both once read before the candidates: nothing survived min-p) */
        int32_t pid[] = {0, 3};
        float pinf[] = {INFINITY, INFINITY};
        g = plain();
        g.temperature = 0.8f, g.min_p = 0.05f, g.top_p = 0.9f;
        g.bias_ids = pid, g.bias_values = pinf, g.n_bias = 2;
        pb_sampler_start(s4, &g);
        int seen0 = 0, seen3 = 0, other = 0;
        for (int i = 0; i < 400; i++) {
            const int32_t t = pb_sampler_sample(s4, tie, NULL, 0);
            seen0 += t == 0, seen3 += t == 3, other += t != 0 && t != 3;
        }
        CHECK(other == 0 && seen0 > 100 && seen3 > 100, "+inf bias on 0 and 3: only they are drawn (%d, %d, %d other)",
              seen0, seen3, other);
        g = plain();
        g.temperature = 1e-40f, g.min_p = 0.05f;
        pb_sampler_start(s4, &g);
        other = 0;
        const float l4[4] = {0.0f, 1.0f, 3.0f, 0.5f};
        for (int i = 0; i < 50; i++) other += pb_sampler_sample(s4, l4, NULL, 0) != 2;
        CHECK(other == 0, "temperature 1e-40 (1/T overflows): the argmax every time (%d other)", other);
        /* NaN in every mode of the chain (greedy, temperature, top-k, top-p, min-p, a penalty, a bias): never drawn,
         * all-NaN -> -1 (never token 0), a +inf logit takes all the mass, a -inf bias still bans (the forward pass
         * refuses NaN logits, model/forward.c; this is the sampler's own floor) */
        {
            const float mixed[6] = {NAN, 0.5f, NAN, 0.1f, -INFINITY, 0.3f}, nans[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
            const float pinf_l[6] = {NAN, 0.5f, 1.0f, INFINITY, NAN, 0.2f};
            int32_t ban[] = {1}, rec[] = {1, 3};
            float ban_v[] = {-INFINITY};
            int wrong = 0, not_none = 0, not_inf = 0, modes = 0;
            pb_sampler *s6;
            CHECK(pb_sampler_new(6, &s6) == PB_OK, "a 6-token sampler");
            for (int mode = 0; mode < 7; mode++, modes++) {
                g = plain();
                if (mode == 0) g.temperature = 0;
                if (mode == 2) g.top_k = 2;
                if (mode == 3) g.top_p = 0.5f;
                if (mode == 4) g.min_p = 0.5f;
                if (mode == 5) g.repeat_penalty = 1.3f, g.frequency_penalty = 0.5f;
                if (mode == 6) g.bias_ids = ban, g.bias_values = ban_v, g.n_bias = 1;
                pb_sampler_start(s6, &g);
                for (int i = 0; i < 60; i++) {
                    const int32_t t = pb_sampler_sample(s6, mixed, rec, 2);
                    wrong += t != 1 && t != 3 && t != 5;
                    wrong += mode == 6 && t == 1; /* banned */
                    wrong += mode == 0 && t != 1; /* greedy: the best finite one */
                    not_none += pb_sampler_sample(s6, nans, rec, 2) != -1;
                    not_inf += pb_sampler_sample(s6, pinf_l, rec, 2) != 3;
                }
            }
            CHECK(wrong == 0 && not_none == 0 && not_inf == 0,
                  "%d sampler modes with NaN / inf logits: NaN never drawn, -inf bias bans (%d wrong), all NaN -> -1 "
                  "(%d not), +inf wins (%d not)",
                  modes, wrong, not_none, not_inf);
            pb_sampler_free(s6);
        }
        /* invalid params */
        g = plain();
        g.top_p = 0;
        CHECK(pb_sampler_start(s4, &g) == PB_ERR_INVALID_ARG && strstr(pb_last_error(), "top_p"),
              "top_p 0 rejected naming the field: %s", pb_last_error());
        g = plain();
        int32_t badid[] = {4};
        g.bias_ids = badid;
        g.bias_values = fval;
        g.n_bias = 1;
        CHECK(pb_sampler_start(s4, &g) == PB_ERR_INVALID_ARG, "bias id outside the vocabulary rejected: %s",
              pb_last_error());
        g = plain();
        g.temperature = -1;
        CHECK(pb_sampler_params_check(&g, 4) == PB_ERR_INVALID_ARG, "negative temperature rejected");
        pb_sampler_free(s4);
    }

    /* determinism: same seed -> same draws; another seed -> other draws */
    {
        int32_t a[500], b[500], c[500];
        p = plain();
        p.seed = 77;
        pb_sampler_start(s, &p);
        for (int i = 0; i < 500; i++) a[i] = pb_sampler_sample(s, logits, NULL, 0);
        pb_sampler_start(s, &p);
        for (int i = 0; i < 500; i++) b[i] = pb_sampler_sample(s, logits, NULL, 0);
        p.seed = 78;
        pb_sampler_start(s, &p);
        for (int i = 0; i < 500; i++) c[i] = pb_sampler_sample(s, logits, NULL, 0);
        CHECK(memcmp(a, b, sizeof a) == 0, "same seed -> the same 500 tokens");
        CHECK(memcmp(a, c, sizeof a) != 0, "another seed -> other tokens");
        pb_rng r1, r2;
        pb_rng_seed(&r1, 1);
        pb_rng_seed(&r2, 1);
        uint64_t x = pb_rng_next(&r1);
        CHECK(x == pb_rng_next(&r2) && x != pb_rng_next(&r1), "rng: seeded streams repeat and advance");
        double u = 0;
        int in = 1;
        for (int i = 0; i < 10000; i++) {
            double v = pb_rng_uniform(&r1);
            in &= v >= 0 && v < 1;
            u += v;
        }
        CHECK(in && fabs(u / 10000 - 0.5) < 0.02, "rng: uniform in [0,1), mean %.4f", u / 10000);
    }

    /* presets */
    {
        pb_sampler_params q = pb_sampler_preset(PB_PRESET_PRECISE);
        CHECK(q.temperature == 0.35f && q.top_p == 0.8f, "precise: T 0.35 top-p 0.8");
        q = pb_sampler_preset(PB_PRESET_BALANCED);
        CHECK(q.temperature == 0.6f && q.top_p == 0.9f, "balanced: T 0.6 top-p 0.9");
        q = pb_sampler_preset(PB_PRESET_CREATIVE);
        CHECK(q.temperature == 0.9f && q.top_p == 0.95f, "creative: T 0.9 top-p 0.95");
        q = pb_sampler_preset(PB_PRESET_CODE);
        CHECK(q.temperature == 0.2f && q.top_p == 0.6f, "code: T 0.2 top-p 0.6");
        pb_sampler_params d = pb_sampler_default_params();
        CHECK(d.temperature == 0.6f && d.top_p == 0.9f, "default = balanced");
        pb_preset pr;
        int names_ok = 1;
        for (int i = 0; i < 4; i++)
            names_ok &= pb_preset_from_name(pb_preset_name((pb_preset)i), &pr) == PB_OK && pr == (pb_preset)i;
        CHECK(names_ok, "preset names round-trip");
        CHECK(pb_preset_from_name("wild", &pr) == PB_ERR_INVALID_ARG && strstr(pb_last_error(), "wild"),
              "unknown preset rejected: %s", pb_last_error());
        for (int i = 0; i < 4; i++) {
            q = pb_sampler_preset((pb_preset)i);
            CHECK(pb_sampler_params_check(&q, 100) == PB_OK, "preset %s passes the checks",
                  pb_preset_name((pb_preset)i));
        }
    }
    pb_sampler_free(s);

    /* greedy = the lowest id of the largest non-NaN value (-1 when none exceeds -inf), on random sizes around the
     * 64-value blocks of the scan, with ties, NaN and infinities placed anywhere; without and with a bias (the copy
     * path) */
    {
        pb_rng r;
        pb_rng_seed(&r, 11);
        const float vals[] = {-INFINITY, -3.0f, 0.0f, 1.5f, 2.0f, 2.0f, NAN, INFINITY};
        float *l = malloc(70000 * sizeof(float));
        int bad = 0, runs = 0;
        for (int it = 0; it < 600; it++) {
            int32_t V =
                it < 500 ? 1 + (int32_t)(pb_rng_uniform(&r) * 300) : 60000 + (int32_t)(pb_rng_uniform(&r) * 9000);
            const int nval = it % 3 == 0 ? 7 : it % 3 == 1 ? 6 : 2; /* with +inf / without / only -inf and -3 */
            for (int32_t i = 0; i < V; i++) l[i] = vals[(int)(pb_rng_uniform(&r) * nval)];
            if (it % 5 == 0) l[(int32_t)(pb_rng_uniform(&r) * V)] = 5.0f; /* a lone winner somewhere */
            if (it % 7 == 0)
                for (int32_t i = 0; i < V; i++) l[i] = NAN; /* nothing to pick */
            int32_t want = -1;
            float bv = -INFINITY;
            for (int32_t i = 0; i < V; i++)
                if (!isnan(l[i]) && l[i] > bv) bv = l[i], want = i;
            pb_sampler *sg;
            if (pb_sampler_new(V, &sg) != PB_OK) {
                bad++;
                continue;
            }
            pb_sampler_params q = plain();
            q.temperature = 0;
            pb_sampler_start(sg, &q);
            int32_t got = pb_sampler_sample(sg, l, NULL, 0);
            int32_t zero_id[] = {0};
            float zero_bias[] = {0.0f};
            q.bias_ids = zero_id, q.bias_values = zero_bias, q.n_bias = 1; /* a bias of 0: same answer, copy path */
            pb_sampler_start(sg, &q);
            int32_t got2 = pb_sampler_sample(sg, l, NULL, 0);
            if (got != want || got2 != want) {
                if (bad < 3) fprintf(stderr, "# V %d: want %d, got %d / %d\n", (int)V, (int)want, (int)got, (int)got2);
                bad++;
            }
            runs++;
            pb_sampler_free(sg);
        }
        CHECK(bad == 0 && runs == 600,
              "greedy = lowest id of the largest value on %d random vocabularies (ties, NaN, "
              "+-inf, sizes 1..300 and 60k-69k), with and without a bias: %d differ",
              runs, bad);
        free(l);
    }

    /* greedy_only: true exactly when sampling is a plain argmax whatever the history (the engine then takes the
     * GPU's argmax instead of the logits) */
    {
        pb_sampler *sg;
        CHECK(pb_sampler_new(50, &sg) == PB_OK, "sampler for greedy_only");
        int32_t id0[] = {3};
        float b0[] = {0.0f};
        struct {
            float temp, rep, pres, freq;
            int last_n, n_bias;
            bool want;
        } cases[] = {{0, 1, 0, 0, 64, 0, true},        {0.5f, 1, 0, 0, 64, 0, false}, {0, 1, 0, 0, 64, 1, false},
                     {0, 1.1f, 0, 0, 64, 0, false},    {0, 1, 0.5f, 0, 64, 0, false}, {0, 1, 0, 0.5f, 64, 0, false},
                     {0, 1.1f, 0.5f, 0.5f, 0, 0, true}};
        int wrong = 0;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            pb_sampler_params q = plain();
            q.temperature = cases[i].temp;
            q.repeat_penalty = cases[i].rep;
            q.presence_penalty = cases[i].pres;
            q.frequency_penalty = cases[i].freq;
            q.penalty_last_n = cases[i].last_n;
            if (cases[i].n_bias) q.bias_ids = id0, q.bias_values = b0, q.n_bias = 1;
            if (pb_sampler_start(sg, &q) != PB_OK || pb_sampler_greedy_only(sg) != cases[i].want) {
                fprintf(stderr, "# greedy_only case %zu: want %d\n", i, (int)cases[i].want);
                wrong++;
            }
        }
        CHECK(wrong == 0, "greedy_only: only temperature 0 without bias or an applicable penalty (%d wrong)", wrong);
        pb_sampler_free(sg);
    }

    /* sparse sampling (a GPU's top-M, pb_sampler_sample_top) = the full chain, token for token: random logits with
     * ties, +-0, NaN, +-inf; random temperature (0 too), top-k, min-p, top-p, bias (+-inf too) and penalties; two
     * samplers on one seed, so every draw must also take the same PRNG step */
    {
        const int32_t V = 3000;
        pb_sampler *sf, *ss;
        CHECK(pb_sampler_new(V, &sf) == PB_OK && pb_sampler_new(V, &ss) == PB_OK, "samplers for the sparse check");
        float *l = malloc((size_t)V * sizeof(float)), gv[PB_SAMPLER_TOP_MAX], tv[PB_SAMPLER_TOP_MAX];
        uint64_t *keys = malloc((size_t)V * sizeof(uint64_t));
        int32_t gi[PB_SAMPLER_TOP_MAX], ti[PB_SAMPLER_TOP_MAX], recent[200], bid[12];
        float bval[12];
        pb_rng r;
        pb_rng_seed(&r, 99);
        int draws = 0, differ = 0, sparse_used = 0, refused = 0;
        for (int round = 0; round < 300; round++) {
            const int kind = round % 4; /* 0: smooth, 1: coarse ties, 2: NaN/inf/-0 sprinkled, 3: few finite */
            for (int32_t i = 0; i < V; i++) {
                double u = pb_rng_uniform(&r);
                float v = kind == 1 ? (float)floor(u * 6.0) : (float)(u * 10.0 - 5.0);
                if (kind == 2) {
                    double z = pb_rng_uniform(&r);
                    v = z < 0.02 ? NAN : z < 0.04 ? -INFINITY : z < 0.06 ? -0.0f : z < 0.08 ? 0.0f : v;
                }
                if (kind == 3) v = pb_rng_uniform(&r) < 0.995 ? -INFINITY : v;
                l[i] = v;
            }
            pb_sampler_params q = pb_sampler_default_params();
            q.seed = 1000 + (uint64_t)round;
            q.temperature = round % 5 == 0 ? 0.0f : (float)(0.2 + 1.5 * pb_rng_uniform(&r));
            q.top_k = 1 + (int)(pb_rng_uniform(&r) * 60);
            q.min_p = round % 3 == 0 ? 0.0f : (float)(0.2 * pb_rng_uniform(&r));
            q.top_p = round % 2 ? 1.0f : (float)(0.3 + 0.7 * pb_rng_uniform(&r));
            q.n_bias = (int)(pb_rng_uniform(&r) * 5);
            for (int i = 0; i < q.n_bias; i++) {
                double z = pb_rng_uniform(&r);
                bid[i] = (int32_t)(pb_rng_uniform(&r) * V);
                bval[i] = z < 0.15 ? -INFINITY : z < 0.3 ? INFINITY : (float)(z * 12.0 - 4.0);
            }
            if (q.n_bias > 1) bid[1] = bid[0]; /* a repeated id: its biases add up */
            if (kind == 3 && q.n_bias > 0)     /* -inf + inf: NaN, which must count as -inf as the logits' own NaN do */
                l[0] = -INFINITY, bid[q.n_bias - 1] = 0, bval[q.n_bias - 1] = INFINITY;
            q.bias_ids = bid, q.bias_values = bval;
            if (round % 3 == 1) q.repeat_penalty = 1.3f, q.frequency_penalty = 0.2f, q.presence_penalty = 0.4f;
            q.penalty_last_n = round % 6 == 1 ? 0 : 16 + (int)(pb_rng_uniform(&r) * 40);
            int n_recent = (int)(pb_rng_uniform(&r) * 200);
            for (int i = 0; i < n_recent; i++) /* a few repeats and one id outside the vocabulary */
                recent[i] = i == 3 ? V + 7 : (int32_t)(pb_rng_uniform(&r) * (i % 2 ? 40 : V));
            if (pb_sampler_start(sf, &q) != PB_OK || pb_sampler_start(ss, &q) != PB_OK) {
                CHECK(0, "sparse check: start round %d", round);
                break;
            }
            if (!pb_sampler_top_ok(ss)) refused++;
            for (int d = 0; d < 20; d++) {
                int32_t ng = 0, m = pb_sampler_top_need(ss, recent, n_recent, gi, &ng);
                int32_t want = pb_sampler_sample(sf, l, recent, n_recent), got;
                if (m > 0) {
                    topk_ref(l, V, m, keys, ti, tv);
                    for (int32_t i = 0; i < ng; i++) gv[i] = l[gi[i]];
                    got = pb_sampler_sample_top(ss, ti, tv, m, gi, gv, ng, recent, n_recent);
                    sparse_used++;
                } else {
                    got = pb_sampler_sample(ss, l, recent, n_recent);
                }
                draws++;
                if (got != want) {
                    if (differ < 3)
                        fprintf(stderr, "# sparse round %d draw %d: full %d, sparse %d (m %d, ng %d)\n", round, d,
                                (int)want, (int)got, (int)m, (int)ng);
                    differ++;
                }
                if (n_recent > 0) recent[n_recent - 1] = want; /* the history moves on */
            }
        }
        CHECK(differ == 0 && sparse_used > draws * 3 / 4,
              "sparse sampling from the top-M = the full chain: %d draws, %d differ (%d through the sparse path, %d "
              "rounds refused)",
              draws, differ, sparse_used, refused);
        /* the bounds: top_k 0 (every logit) and a window past PB_SAMPLER_TOP_MAX need the full logits */
        pb_sampler_params q = pb_sampler_default_params();
        int32_t ng;
        q.top_k = 0;
        pb_sampler_start(ss, &q);
        bool full_k = !pb_sampler_top_ok(ss) && pb_sampler_top_need(ss, recent, 50, gi, &ng) == 0;
        q = pb_sampler_default_params();
        q.repeat_penalty = 1.1f, q.penalty_last_n = 200;
        pb_sampler_start(ss, &q);
        for (int i = 0; i < 200; i++) recent[i] = i * 7;
        bool full_w = !pb_sampler_top_ok(ss) && pb_sampler_top_need(ss, recent, 200, gi, &ng) == 0;
        bool short_w = pb_sampler_top_need(ss, recent, 30, gi, &ng) == 40 + 30 && ng == 30;
        CHECK(full_k && full_w && short_w,
              "top_need: 0 for top_k 0 and for 200 distinct penalised ids, top_k + 30 for a 30-token history");
        free(l);
        free(keys);
        pb_sampler_free(sf);
        pb_sampler_free(ss);
    }

    /* a Gemma-sized vocabulary: top-p without top-k must agree with a full sort */
    {
        const int32_t V = 256000;
        float *big = malloc((size_t)V * sizeof(float));
        pb_rng r;
        pb_rng_seed(&r, 5);
        for (int32_t i = 0; i < V; i++) big[i] = (float)(pb_rng_uniform(&r) * 8.0);
        pb_sampler *sb;
        CHECK(pb_sampler_new(V, &sb) == PB_OK, "sampler_new(256000)");
        pb_sampler_params q = plain();
        q.top_p = 0.5f;
        q.min_p = 0;
        pb_sampler_start(sb, &q);
        /* reference nucleus by a full sort of the probabilities */
        double *pr = malloc((size_t)V * sizeof(double)), mx = 8, sum = 0;
        for (int32_t i = 0; i < V; i++) sum += pr[i] = exp((double)big[i] - mx);
        float *sorted = malloc((size_t)V * sizeof(float));
        memcpy(sorted, big, (size_t)V * sizeof(float));
        /* threshold logit: the smallest logit inside the nucleus */
        qsort(sorted, (size_t)V, sizeof(float), cmpf);
        double acc = 0;
        float thr = sorted[0];
        for (int32_t i = 0; i < V; i++) {
            acc += exp((double)sorted[i] - mx) / sum;
            if (acc >= 0.5) {
                thr = sorted[i];
                break;
            }
        }
        int outside = 0;
        double t0 = pb_time_ms();
        for (int i = 0; i < 200; i++) {
            int32_t t = pb_sampler_sample(sb, big, NULL, 0);
            outside += t < 0 || big[t] < thr;
        }
        double ms = (pb_time_ms() - t0) / 200;
        CHECK(outside == 0, "256k vocab, top-p 0.5: all 200 draws inside the exact nucleus (%d outside)", outside);
        NOTE("256k vocab top-p sampling: %.3f ms per token", ms);
        q = pb_sampler_preset(PB_PRESET_BALANCED);
        pb_sampler_start(sb, &q);
        t0 = pb_time_ms();
        for (int i = 0; i < 200; i++) pb_sampler_sample(sb, big, NULL, 0);
        NOTE("256k vocab balanced preset: %.3f ms per token", (pb_time_ms() - t0) / 200);
#if COUNT_ALLOCS
        /* nothing allocated per token, also when the kept candidates are many (glibc's qsort mallocs its buffer
         * above 1 KiB: 128 candidates); the full path with top-k 1000 and 50000, the sparse path with 1000 */
        static int32_t tid[1000];
        static float tv[1000];
        long extra = 0;
        for (int k = 0; k < 3; k++) {
            q = plain();
            q.top_k = k == 1 ? 50000 : 1000, q.top_p = 0.95f, q.min_p = 0.0f, q.temperature = 5.0f;
            pb_sampler_start(sb, &q);
            if (k == 2) /* the sparse path's input: the 1000 best ids */
                for (int i = 0; i < 1000; i++) tid[i] = i, tv[i] = big[i] + 100.0f;
            const long a0 = __atomic_load_n(&n_allocs, __ATOMIC_RELAXED);
            for (int i = 0; i < 20; i++)
                if (k < 2)
                    pb_sampler_sample(sb, big, NULL, 0);
                else
                    pb_sampler_sample_top(sb, tid, tv, 1000, NULL, NULL, 0, NULL, 0);
            extra += __atomic_load_n(&n_allocs, __ATOMIC_RELAXED) - a0;
        }
        CHECK(extra == 0, "top-k 1000 / 50000 and the sparse path over 1000 ids: 60 draws allocate nothing (%ld)",
              extra);
#endif
        free(pr);
        free(sorted);
        free(big);
        pb_sampler_free(sb);
    }
    TEST_DONE();
}
