/* gpu_parity.c -- GPU backend checks on a CUDA machine (make CUDA=1 gpu-tests; scripts/gpu_check.sh runs it).
 * For each GGUF model given:
 *  - the GPU's float path (PB_CUDA_FLOAT=1: float32 dots on dequantized rows) against the CPU's exact mode, the
 *    same numerics up to summation order: logits within TOL of the range, top-1 identical at every position;
 *  - the GPU's default path (quantized weights dotted with int8 activations, as the CPU's default path) against
 *    the CPU's exact mode: no further off than 2.5 x the CPU default path's own distance from it (+ TOL of the
 *    range), top-1 agreeing at least as often as the CPU's, less 4 positions of 96. Not the CPU default path
 *    itself: int8 rounding is discontinuous, so the first activation that lands one step apart (a float sum in
 *    another order) sends both sides' later quantizations apart and their distance grows to the int8 noise;
 *  - prefill at once (the chunked mat-mat path, src/cuda/prefill.cuh) against token by token (the decode step's
 *    graph), bit for bit on both paths: all 96 tokens in one call, and in calls of 37 (chunks that start with keys
 *    already in the cache, sliding-window rings of 32 wrapped inside a chunk, token tiles cut short); and session
 *    state saved on the GPU and loaded on the CPU (and the reverse) continuing alike (float path vs exact mode,
 *    within TOL).
 *  - greedy sampling on the GPU: the device argmax kernel against pb_sampler's greedy pick on random vocabularies
 *    (ties, NaN, +-inf, +-0), pb_forward_top's pick and pulled logits against pb_forward's at every position, and
 *    a greedy session (argmax on the device) against one whose zero bias makes it pull the logits;
 *  - sparse sampling on the GPU: the device top-M kernel against a full sort on random vocabularies (ids and raw
 *    values bit for bit, gathered values too), and sampled sessions (top-k, top-p, min-p, penalties, bias) reading
 *    the best logits from the device against the same sessions pulling every logit (PB_CUDA_TOPK=0).
 * Gemma 4 files run the same checks after a note of the geometry (their prompts take the chunked path,
 * pf_enqueue_g4, so "at once = token by token" compares it with the token steps: per-layer head dims, KV sharing,
 * k_eq_v, V norm, PLE, layer scale, the wide attention form on head_dim > 256; their batches of 3 rows and more run
 * the same chunk over the batch's rows table, so the batch checks compare it with each row's one-token step), plus a
 * prompt of 600 tokens (two chunks, past a sliding window of 512) at once, in calls of 200 and token by token
 * (check_long) and batches of 1-4 rows whose positions cross the sliding window (check_batch_window; PB_PAR_LONG=1
 * runs both on every model); a Gemma 4 MoE file is only checked to be refused by name with gpu = 1 and to fall back
 * with gpu = -1.
 * Not part of `make test` (CI has no GPU).
 *   gpu_parity MODEL.gguf [TOKENS.bin] ...   (a .bin after a model: its int32 token ids, else random ids) */
#include "pb_test.h"
#include "topk_ref.h"

#include "cuda/pb_cuda.h"
#include "engine/engine.h"
#include "model/kv_impl.h"
#include "model/model.h"
#include "sampler/sampler.h"

#include <math.h>
#include <time.h>
#include <pocketbrain.h>

enum { NT = 96 };

/* Relative tolerance: max |gpu - cpu| <= TOL * (max - min of the CPU logits) where both sides compute float32
 * dots on the same dequantized weights (only the summation order differs, for every weight type alike). */
#define TOL 1e-3

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Runs toks in calls of batch tokens, all logits into out; hid (may be NULL): the last token's final hidden row. */
static pb_status run_all(const pb_model *m, const int32_t *toks, int n, int batch, bool exact, float *out, float *hid) {
    const pb_hparams *hp = pb_model_hparams(m);
    pb_kv_cache *kv = NULL;
    pb_forward_ctx *fc = NULL;
    pb_status s;
    if ((s = pb_kv_new(m, n, PB_KV_F16, &kv)) || (s = pb_forward_ctx_new_kv(m, batch, kv, &fc))) goto done;
    pb_forward_set_exact(fc, exact);
    for (int i = 0; i < n && !s; i += batch) {
        int c = n - i < batch ? n - i : batch;
        s = pb_forward(m, kv, fc, NULL, toks + i, c, out + (size_t)i * hp->n_vocab, true, NULL);
        if (!s && hid && i + c == n)
            memcpy(hid, pb_forward_hidden(fc) + (size_t)(c - 1) * hp->n_embd, sizeof(float) * (size_t)hp->n_embd);
    }
done:
    pb_forward_ctx_free(fc);
    pb_kv_free(kv);
    return s;
}

typedef struct {
    double md, mean;
    int top1, ties; /* same argmax; another argmax whose logit in a is within tie of a's best */
} cmp;

/* b against a (n rows of V logits). */
static cmp compare(const float *a, const float *b, int n, int V, double tie) {
    cmp r = {0, 0, 0, 0};
    for (size_t i = 0; i < (size_t)n * V; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        r.md = fmax(r.md, d), r.mean += d;
    }
    r.mean /= (double)n * V;
    for (int t = 0; t < n; t++) {
        const float *x = a + (size_t)t * V, *y = b + (size_t)t * V;
        int ia = argmax(x, V), ib = argmax(y, V);
        if (ia == ib)
            r.top1++;
        else if (fabs((double)x[ia] - (double)x[ib]) <= tie)
            r.ties++;
    }
    return r;
}

/* The cache's state (what a session file holds) written on `from` after n tokens and read into a fresh cache of
 * `to`; then both run the same 8 more tokens and their logits must agree within TOL of the range (the CPU side in
 * exact mode; a cache that did not arrive gives the logits of another context, off by about the range). */
static void state_cross(const pb_model *from, const pb_model *to, const int32_t *toks, int n, int V, const char *what) {
    pb_kv_cache *ka = NULL, *kb = NULL;
    pb_forward_ctx *fa = NULL, *fb = NULL;
    void *buf = NULL;
    size_t len = 0;
    double md = 0, lo = INFINITY, hi = -INFINITY;
    int agree = 0;
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    pb_status st = pb_kv_new(from, 128, PB_KV_F16, &ka);
    if (!st) st = pb_kv_new(to, 128, PB_KV_F16, &kb);
    if (!st) st = pb_forward_ctx_new_kv(from, n, ka, &fa);
    if (!st) st = pb_forward_ctx_new_kv(to, n, kb, &fb);
    if (!st) {
        pb_forward_set_exact(fa, !ka->gpu); /* the CPU side exact, the GPU's float path (gf) as it is */
        pb_forward_set_exact(fb, !kb->gpu);
        st = pb_forward(from, ka, fa, NULL, toks, n, la, false, NULL);
    }
    if (!st && !(buf = malloc(len = pb_kv_state_size(ka)))) st = PB_ERR_NOMEM;
    if (!st) st = pb_kv_state_write(ka, buf, len, &len);
    if (!st) st = pb_kv_state_read(kb, buf, len);
    for (int i = 0; i < 8 && !st; i++) {
        if ((st = pb_forward(from, ka, fa, NULL, toks + n + i, 1, la, false, NULL)) ||
            (st = pb_forward(to, kb, fb, NULL, toks + n + i, 1, lb, false, NULL)))
            break;
        for (int k = 0; k < V; k++) {
            md = fmax(md, fabs((double)la[k] - (double)lb[k]));
            lo = fmin(lo, (double)la[k]), hi = fmax(hi, (double)la[k]);
        }
        agree += argmax(la, V) == argmax(lb, V);
    }
    if (md > TOL * (hi - lo) || agree < 8)
        NOTE("%s: after loading, max|d| %.3g of range %.3g, top-1 %d/8", what, md, hi - lo, agree);
    CHECK(st == PB_OK && md <= TOL * (hi - lo) && agree >= 7,
          "%s: cache state after %d tokens gives the same next logits (%s)", what, n,
          st ? pb_last_error() : "8 tokens");
    free(buf), free(la), free(lb);
    pb_forward_ctx_free(fa), pb_forward_ctx_free(fb);
    pb_kv_free(ka), pb_kv_free(kb);
}

/* The GPU's float-path logits lf and default-path logits lg against the CPU's exact lc (the CPU default path's ld
 * gives the int8 bound); n rows of V. */
static void check_logits(const float *lc, const float *ld, const float *lg, const float *lf, int n, int V) {
    const size_t nv = (size_t)n * V;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < nv; i++) lo = fmin(lo, (double)lc[i]), hi = fmax(hi, (double)lc[i]);
    const double range = hi - lo;
    const cmp fr = compare(lc, lf, n, V, TOL * range);
    NOTE("GPU float path vs CPU exact: max|d| %.3g  mean|d| %.3g  range %.3g  top-1 %d/%d (+%d ties)", fr.md, fr.mean,
         range, fr.top1, n, fr.ties);
    CHECK(fr.md <= TOL * range, "GPU float path logits within %.0e of the range of the CPU's exact (max|d| %.3g)", TOL,
          fr.md);
    CHECK(fr.top1 + fr.ties == n && fr.top1 >= n - 1,
          "GPU float path: top-1 identical at every position (%d/%d, %d ties)", fr.top1, n, fr.ties);
    const cmp c = compare(lc, ld, n, V, TOL * range);
    const double bound = 2.5 * c.md + TOL * range;
    const cmp gc = compare(lc, lg, n, V, bound), cc = compare(lc, ld, n, V, bound), gd = compare(ld, lg, n, V, 0);
    NOTE("vs CPU exact: GPU default path max|d| %.3g mean|d| %.3g top-1 %d/%d (+%d ties); CPU default path max|d| "
         "%.3g mean|d| %.3g top-1 %d (+%d); GPU default vs CPU default max|d| %.3g mean|d| %.3g top-1 %d",
         gc.md, gc.mean, gc.top1, n, gc.ties, cc.md, cc.mean, cc.top1, cc.ties, gd.md, gd.mean, gd.top1);
    CHECK(gc.md <= bound,
          "GPU default path within 2.5x the CPU default path's distance from exact (+%.0e of the "
          "range): max|d| %.3g <= %.3g",
          TOL, gc.md, bound);
    CHECK(gc.top1 + gc.ties + 4 >= cc.top1 + cc.ties,
          "GPU default path top-1 agrees with exact (%d+%d of %d) about "
          "as often as the CPU default path's (%d+%d)",
          gc.top1, gc.ties, n, cc.top1, cc.ties);
}

/* The sampler's greedy pick of x[0..n) (temperature 0: the fast path over the logits as given). */
static int32_t greedy(const float *x, int n) {
    pb_sampler *sg = NULL;
    if (pb_sampler_new(n, &sg) != PB_OK) return -3;
    pb_sampler_params q = pb_sampler_default_params();
    q.temperature = 0;
    pb_sampler_start(sg, &q);
    int32_t t = pb_sampler_sample(sg, x, NULL, 0);
    pb_sampler_free(sg);
    return t;
}

/* The device argmax kernel (pb_cu_argmax_check) against the sampler on random vocabularies: sizes around the kernel's
 * 4096-value blocks and a Gemma vocabulary, values drawn from a few (ties everywhere), NaN, +-inf and +-0. */
static void check_argmax_kernel(pb_cu_ctx *c) {
    const float vals[] = {-INFINITY, -3.0f, 0.0f, -0.0f, 1.5f, 2.0f, 2.0f, NAN, INFINITY};
    float *l = malloc(sizeof(float) * (1 << 20));
    uint64_t r = 0x9e3779b97f4a7c15ull;
    int bad = 0, runs = 0;
    for (int it = 0; it < 240 && l; it++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int n = it < 100   ? 1 + (int)(r % 300)
                : it < 200 ? 4000 + (int)(r % 9000)
                : it < 236 ? 256000 - (int)(r % 3)
                           : (1 << 20) - (int)(r % 5000);
        const int nval = it % 3 == 0 ? 8 : it % 3 == 1 ? 7 : 2; /* with NaN / with +-0, 2, 1.5 / only -inf and -3 */
        for (int i = 0; i < n; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            l[i] = vals[(r >> 11) % (uint64_t)nval];
        }
        if (it % 5 == 0) l[(r >> 20) % (uint64_t)n] = 5.0f; /* a lone winner */
        if (it % 11 == 0)
            for (int i = 0; i < n; i++) l[i] = NAN; /* nothing to pick: -1 */
        if (it % 13 == 0)
            for (int i = 0; i < n; i++) l[i] = (float)((i * 7919) % 1013) * (i % 2 ? 1.0f : -1.0f); /* distinct-ish */
        int32_t got = -5, want = greedy(l, n);
        pb_cu_argmax_check(c, l, n, &got, NULL, 0);
        if (got != want) {
            if (bad < 3) NOTE("argmax of %d values: device %d, sampler %d", n, (int)got, (int)want);
            bad++;
        }
        runs++;
    }
    CHECK(bad == 0 && runs == 240,
          "device argmax = the sampler's greedy pick on %d random vocabularies (1..300, 4k-13k, 256k, 1M values; ties, "
          "NaN, +-inf, +-0): %d differ",
          runs, bad);
    free(l);
}

/* The device top-M kernel (pb_cu_top_check) against topk_ref's full sort on random vocabularies as above, M random
 * in 1..128 (at most n), up to 128 gathered ids: the ids in order, their raw values and the gathered values bit for
 * bit (NaN payloads and -0 included). */
static void check_topk_kernel(pb_cu_ctx *c) {
    const float vals[] = {-INFINITY, -3.0f, 0.0f, -0.0f, 1.5f, 2.0f, 2.0f, NAN, INFINITY};
    const int N = 1 << 20;
    float *l = malloc(sizeof(float) * N), rv[128], gv[128], gw[128];
    uint64_t *keys = malloc(sizeof(uint64_t) * N);
    int32_t ri[128], g[128];
    uint64_t r = 0x2545f4914f6cdd1dull;
    int bad = 0, runs = 0;
    for (int it = 0; it < 240 && l && keys; it++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int n = it < 100   ? 1 + (int)(r % 300)
                : it < 200 ? 4000 + (int)(r % 9000)
                : it < 236 ? 256000 - (int)(r % 3)
                           : N - (int)(r % 5000);
        const int nval = it % 3 == 0 ? 8 : it % 3 == 1 ? 7 : 2;
        for (int i = 0; i < n; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            l[i] = it % 4 == 3 ? (float)(int)((r >> 11) % 2001) * 0.01f - 10.0f : vals[(r >> 11) % (uint64_t)nval];
        }
        if (it % 5 == 0) l[(r >> 20) % (uint64_t)n] = 5.0f;
        if (it % 11 == 0)
            for (int i = 0; i < n; i++) l[i] = NAN;
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int m = 1 + (int)(r % 128), ng = (int)((r >> 8) % 129);
        if (it % 7 == 0) m = 128;
        if (m > n) m = n;
        for (int i = 0; i < ng; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            g[i] = (int32_t)((r >> 11) % (uint64_t)n);
        }
        topk_ref(l, n, m, keys, ri, rv);
        int32_t di[128];
        float dv[128];
        int rc = pb_cu_top_check(c, l, n, m, g, ng, di, dv, gv, NULL, 0);
        for (int i = 0; i < ng; i++) gw[i] = l[g[i]];
        const bool ok = rc == 0 && memcmp(di, ri, sizeof(int32_t) * (size_t)m) == 0 &&
                        memcmp(dv, rv, sizeof(float) * (size_t)m) == 0 &&
                        memcmp(gv, gw, sizeof(float) * (size_t)ng) == 0;
        if (!ok) {
            if (bad < 3)
                NOTE("top %d of %d values (%d gathered): rc %d, first id device %d, reference %d", m, n, ng, rc,
                     rc ? -1 : (int)di[0], (int)ri[0]);
            bad++;
        }
        runs++;
    }
    CHECK(bad == 0 && runs == 240,
          "device top-M = a full sort's first M (ids, raw values, gathered values bit for bit) on %d random "
          "vocabularies (1..300, 4k-13k, 256k, 1M values; M 1..128; ties, NaN, +-inf, +-0): %d differ",
          runs, bad);
    int32_t one = 0;
    float x1 = 1.0f, o;
    CHECK(pb_cu_top_check(c, &x1, 1, 2, NULL, 0, &one, &o, &o, NULL, 0) != 0 &&
              pb_cu_top_check(c, &x1, 1, 1, (const int32_t[]){1}, 1, &one, &o, &o, NULL, 0) != 0 &&
              pb_cu_top_check(c, &x1, 1, 129, NULL, 0, &one, &o, &o, NULL, 0) != 0,
          "device top-M refuses M > n, M > 128 and a gathered id outside the values");
    free(l), free(keys);
}

/* Sampled sessions on the GPU: each preset-like sampler below draws the same tokens reading the best logits from the
 * device (pb_forward_logits_top) as pulling every logit to the CPU sampler (a session made under PB_CUDA_TOPK=0). */
static void check_sampled(pb_model *gm, const int32_t *toks) {
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 128;
    const int32_t bid[] = {3, 7, 11};
    const float bval[] = {2.0f, -INFINITY, 0.5f};
    for (int k = 0; k < 4; k++) {
        pb_session *sa = NULL, *sb = NULL;
        pb_status st = pb_session_new(gm, &sp, &sa);
        setenv("PB_CUDA_TOPK", "0", 1);
        if (!st) st = pb_session_new(gm, &sp, &sb);
        unsetenv("PB_CUDA_TOPK");
        pb_gen_params gp = pb_gen_default_params();
        gp.max_tokens = 40;
        gp.stop_at_eos = false;
        gp.sampler.seed = 1000 + (uint64_t)k;
        if (k == 0) gp.sampler.temperature = 1.0f, gp.sampler.top_k = 40, gp.sampler.top_p = 1.0f;
        if (k == 1) gp.sampler.temperature = 0.8f, gp.sampler.top_k = 64, gp.sampler.top_p = 0.9f;
        if (k == 2) { /* penalties and a bias: their ids gathered from the device */
            gp.sampler.temperature = 1.3f, gp.sampler.top_k = 20, gp.sampler.repeat_penalty = 1.3f;
            gp.sampler.presence_penalty = 0.5f, gp.sampler.frequency_penalty = 0.3f, gp.sampler.penalty_last_n = 32;
            gp.sampler.bias_ids = bid, gp.sampler.bias_values = bval, gp.sampler.n_bias = 3;
        }
        if (k == 3) gp.sampler.temperature = 2.0f, gp.sampler.top_k = 100, gp.sampler.min_p = 0.0f; /* flat */
        pb_status s1 = st ? st : pb_session_generate(sa, toks, 8, &gp, NULL, NULL, NULL);
        pb_status s2 = st ? st : pb_session_generate(sb, toks, 8, &gp, NULL, NULL, NULL);
        CHECK(s1 == PB_OK && s2 == PB_OK && sa->logits_dev == pb_sampler_top_ok(sa->smp) && !sb->logits_dev &&
                  sa->n_past == sb->n_past && sa->pending == sb->pending &&
                  memcmp(sa->tokens, sb->tokens, sizeof(int32_t) * (size_t)sa->n_past) == 0,
              "sampled session %d (temperature %.1f, top-k %d%s): the device's best logits draw the tokens the pulled "
              "logits draw (%lld positions) %s",
              k, (double)gp.sampler.temperature, gp.sampler.top_k, k == 2 ? ", penalties, bias" : "",
              sa ? (long long)sa->n_past : 0LL, s1 || s2 ? pb_last_error() : "");
        pb_session_free(sa), pb_session_free(sb);
    }
}

/* pb_forward_top against pb_forward on the int8 path, position by position: the pick is the sampler's greedy pick of
 * pb_forward's logits and the pulled logits are those logits bit for bit; then a greedy session against one whose
 * zero bias (the same distribution) sends it through the pulled logits and the CPU sampler. */
static void check_top(const pb_model *gm, const int32_t *toks, int n, int V) {
    pb_kv_cache *ka = NULL, *kb = NULL;
    pb_forward_ctx *fa = NULL, *fb = NULL;
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    pb_status st = PB_OK;
    if ((st = pb_kv_new(gm, n, PB_KV_F16, &ka)) || (st = pb_forward_ctx_new_kv(gm, 1, ka, &fa)) ||
        (st = pb_kv_new(gm, n, PB_KV_F16, &kb)) || (st = pb_forward_ctx_new_kv(gm, 1, kb, &fb)))
        goto done;
    CHECK(pb_forward_has_top(kb), "a GPU cache offers the argmax on the device");
    static bool kernel_done;
    if (!kernel_done) check_argmax_kernel(kb->gpu), check_topk_kernel(kb->gpu), kernel_done = true;
    int pick_bad = 0, logit_bad = 0;
    for (int t = 0; t < n && !st; t++) {
        int32_t top = -5;
        if ((st = pb_forward(gm, ka, fa, NULL, toks + t, 1, la, false, NULL)) ||
            (st = pb_forward_top(gm, kb, fb, toks + t, 1, &top)) || (st = pb_forward_pull_logits(kb, lb)))
            break;
        pick_bad += top != greedy(la, V);
        logit_bad += memcmp(la, lb, sizeof(float) * V) != 0;
    }
    CHECK(st == PB_OK && pick_bad == 0 && logit_bad == 0,
          "pb_forward_top at %d positions: the sampler's greedy pick of pb_forward's logits (%d differ), pulled logits "
          "bit for bit (%d differ) %s",
          n, pick_bad, logit_bad, st ? pb_last_error() : "");
    if (!st) { /* the whole prompt in one call: the prefill path (prefill.cuh) ends in the device argmax too */
        pb_kv_cache *kc = NULL;
        pb_forward_ctx *fcn = NULL;
        int32_t top = -5;
        pb_status s2 = pb_kv_new(gm, n, PB_KV_F16, &kc);
        if (!s2) s2 = pb_forward_ctx_new_kv(gm, n, kc, &fcn);
        if (!s2) s2 = pb_forward_top(gm, kc, fcn, toks, n, &top);
        if (!s2) s2 = pb_forward_pull_logits(kc, lb);
        CHECK(s2 == PB_OK && top == greedy(la, V) && memcmp(la, lb, sizeof(float) * V) == 0,
              "pb_forward_top over a %d-token prompt at once: the last position's pick (%d) and pulled logits as "
              "token by token %s",
              n, (int)top, s2 ? pb_last_error() : "");
        pb_forward_ctx_free(fcn);
        pb_kv_free(kc);
    }
done:
    CHECK(st == PB_OK, "pb_forward_top setup: %s", st ? pb_last_error() : "ok");
    pb_forward_ctx_free(fa), pb_forward_ctx_free(fb);
    pb_kv_free(ka), pb_kv_free(kb);

    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 128;
    /* sb pulls every logit (its zero bias, and PB_CUDA_TOPK=0: no top-K on the device); sc's zero bias takes the
     * top-K path (the argmax cannot see a bias), a greedy pick from the best 2 logits and the gathered one */
    pb_session *sa = NULL, *sb = NULL, *sc = NULL;
    st = pb_session_new((pb_model *)gm, &sp, &sa);
    setenv("PB_CUDA_TOPK", "0", 1);
    if (!st) st = pb_session_new((pb_model *)gm, &sp, &sb);
    unsetenv("PB_CUDA_TOPK");
    if (!st) st = pb_session_new((pb_model *)gm, &sp, &sc);
    if (st) {
        CHECK(0, "GPU sessions: %s", pb_last_error());
    } else {
        pb_gen_params ga = pb_gen_default_params(), gb;
        ga.sampler.temperature = 0;
        ga.max_tokens = 24;
        ga.stop_at_eos = false;
        gb = ga;
        int32_t zid[] = {0};
        float zb[] = {0.0f};
        gb.sampler.bias_ids = zid, gb.sampler.bias_values = zb, gb.sampler.n_bias = 1;
        pb_status s1 = pb_session_generate(sa, toks, 8, &ga, NULL, NULL, NULL);
        pb_status s2 = pb_session_generate(sb, toks, 8, &gb, NULL, NULL, NULL);
        pb_status s3 = pb_session_generate(sc, toks, 8, &gb, NULL, NULL, NULL);
        CHECK(s1 == PB_OK && s2 == PB_OK && s3 == PB_OK, "greedy sessions generate (%s)",
              s1 || s2 || s3 ? pb_last_error() : "ok");
        CHECK(sa->logits_dev && !sb->logits_dev && sc->logits_dev,
              "the greedy sessions left their logits on the device (argmax; biased: top-K), the one without the "
              "device top-K not");
        const float *pa = pb_session_logits(sa), *pbl = pb_session_logits(sb);
        CHECK(sa->n_past == sb->n_past && sa->pending == sb->pending &&
                  memcmp(sa->tokens, sb->tokens, sizeof(int32_t) * (size_t)sa->n_past) == 0,
              "greedy session with the device argmax = with the CPU sampler on pulled logits (%lld tokens)",
              (long long)sa->n_past);
        CHECK(sc->n_past == sb->n_past && sc->pending == sb->pending &&
                  memcmp(sc->tokens, sb->tokens, sizeof(int32_t) * (size_t)sc->n_past) == 0,
              "biased greedy session with the device top-K = with the CPU sampler on pulled logits (%lld tokens)",
              (long long)sc->n_past);
        CHECK(pa && pbl && memcmp(pa, pbl, sizeof(float) * V) == 0,
              "pb_session_logits after a greedy generate: the device's logits, pulled");
    }
    pb_session_free(sc);
    pb_session_free(sa), pb_session_free(sb);
    free(la), free(lb);
}

/* b (prefill at once) against a (token by token), n rows of V: the same bits; the distance and top-1 agreement are
 * noted when not. */
static void same_bits(const float *a, const float *b, int n, int V, const char *what) {
    const int same = memcmp(a, b, sizeof(float) * (size_t)n * V) == 0;
    if (!same) {
        const cmp r = compare(a, b, n, V, 0);
        NOTE("%s: max|d| %.3g mean|d| %.3g top-1 %d/%d", what, r.md, r.mean, r.top1, n);
    }
    CHECK(same, "%s = token by token (bit for bit)", what);
}

/* Whether pb_cu_forward_batch runs n rows of gm as one batched step (batch.cuh's bt_usable and pf_usable, reading
 * the same switches: PB_CUDA_BATCH=0, PB_CUDA_PREFILL=0, PB_CUDA_G4_BATCH=0 on Gemma 4, PB_CUDA_FUSE=1 at open, fewer
 * rows than PB_CUDA_BATCH_MIN (default 3), n_embd past k_add_norm's one-block form of 4 x 1024) or each row its own
 * one-token step; the checks count the batched steps (pb_cu_batch_steps), so a batch check cannot pass by never
 * reaching the batched step (a batch scratch that does not fit fails them too). */
static bool env_is(const char *name, int v) {
    const char *e = getenv(name);
    return e && atoi(e) == v;
}
static bool batch_expected(const pb_model *gm, int n) {
    const pb_hparams *hp = pb_model_hparams(gm);
    if (env_is("PB_CUDA_BATCH", 0) || env_is("PB_CUDA_PREFILL", 0) || env_is("PB_CUDA_FUSE", 1)) return false;
    if (hp->arch == PB_ARCH_GEMMA4 && env_is("PB_CUDA_G4_BATCH", 0)) return false;
    const char *m = getenv("PB_CUDA_BATCH_MIN");
    const int mn = m && atoi(m) >= 1 ? atoi(m) : 3;
    return n >= mn && hp->n_embd <= 4 * 1024;
}

/* Layers whose device K/V of caches ka[i] and kb[i] (i < k) differ in any byte (or could not be downloaded). */
static int kv_layers_differ(pb_kv_cache *const *ka, pb_kv_cache *const *kb, int k) {
    int bad = 0;
    for (int i = 0; i < k; i++)
        for (int il = 0; il < ka[i]->n_layer; il++) {
            if (!ka[i]->kvd[il]) continue;
            const size_t b = (size_t)ka[i]->cap[il] * ka[i]->row_b[il];
            uint8_t *x = malloc(4 * b);
            char e[256];
            if (!x || pb_cu_kv_download(ka[i]->gpu, il, x, x + b, b, e, sizeof e) ||
                pb_cu_kv_download(kb[i]->gpu, il, x + 2 * b, x + 3 * b, b, e, sizeof e))
                bad++;
            else
                bad += memcmp(x, x + 2 * b, 2 * b) != 0;
            free(x);
        }
    return bad;
}

/* pb_cu_forward_batch (src/cuda/batch.cuh) against one-token steps: k sequences prefilled to different lengths
 * (past the tiny models' sliding windows: rings wrapped), then 16 batched steps with rows leaving and joining,
 * against twin sequences stepped alone: logits (returned and downloaded) and top bit for bit, the KV caches alike
 * afterwards; argument errors (n = 0, n > 64, a context twice, a full context) change nothing. */
enum { BK_MAX = 33, BSTEPS = 16, BCTX = 128 };
static void check_batch(const pb_model *gm, const int32_t *toks, int V) {
    static const int ks[] = {1, 2, 3, 8, 33};
    float *lb = malloc(sizeof(float) * (size_t)V * BK_MAX), *l1 = malloc(sizeof(float) * V),
          *ld = malloc(sizeof(float) * V);
    const char *kenv = getenv("PB_PAR_BATCH_K"); /* one batch size only (sanitizer runs) */
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int k = ks[ki];
        if (kenv && atoi(kenv) != k) continue;
        pb_kv_cache *ka[BK_MAX] = {0}, *kb[BK_MAX] = {0};
        pb_forward_ctx *fa[BK_MAX] = {0}, *fb[BK_MAX] = {0};
        int pos[BK_MAX], nctx[BK_MAX];
        pb_status st = PB_OK;
        for (int i = 0; i < k && !st; i++) {
            const int len = 5 + (i * 29 + k * 7) % 80; /* 5..84: rings of 32 wrapped for most */
            pos[i] = len;
            /* at 8 sequences every other context is longer: other key splits (18, not 16) and cache sizes a row */
            nctx[i] = k == 8 && i % 2 ? 2304 : BCTX;
            if ((st = pb_kv_new(gm, nctx[i], PB_KV_F16, &ka[i])) ||
                (st = pb_forward_ctx_new_kv(gm, len, ka[i], &fa[i])) ||
                (st = pb_kv_new(gm, nctx[i], PB_KV_F16, &kb[i])) ||
                (st = pb_forward_ctx_new_kv(gm, len, kb[i], &fb[i])))
                break;
            const int32_t *tt = toks + (i % 8);
            if ((st = pb_forward(gm, ka[i], fa[i], NULL, tt, len, l1, false, NULL)) ||
                (st = pb_forward(gm, kb[i], fb[i], NULL, tt, len, l1, false, NULL)))
                break;
        }
        if (st) {
            NOTE("batch of %d: setup failed (%s): skipped", k, pb_last_error());
            goto next;
        }
        int bad_l = 0, bad_d = 0, bad_t = 0, rows = 0, fails = 0;
        long want_b = 0; /* calls that should run as one batched step */
        const long b0 = pb_cu_batch_steps(ka[0]->gpu);
        for (int s = 0; s < BSTEPS; s++) {
            pb_cu_ctx *cs[BK_MAX];
            int bp[BK_MAX], idx[BK_MAX], n = 0;
            int32_t bt[BK_MAX], top[BK_MAX];
            for (int i = 0; i < k; i++) /* rows leave and join: row i sits out steps where (i + s) % 4 == 3 */
                if (k == 1 || (i + s) % 4 != 3) {
                    idx[n] = i, cs[n] = ka[i]->gpu, bp[n] = pos[i], bt[n] = toks[(i * 7 + s * 3) % NT];
                    n++;
                }
            const int want_l = s % 2 == 0, want_t = s % 3 != 2;
            char e[256] = "";
            if (pb_cu_forward_batch(cs, bp, bt, n, want_l ? lb : NULL, want_t ? top : NULL, e, sizeof e)) {
                if (fails++ < 2) NOTE("batch of %d at step %d: %s", n, s, e);
                continue;
            }
            want_b += batch_expected(gm, n);
            for (int r = 0; r < n; r++) {
                const int i = idx[r];
                int32_t t1 = -5;
                pb_cu_ctx *c1 = kb[i]->gpu;
                if (pb_cu_forward_argmax(c1, pos[i], &bt[r], 1, &t1, NULL, e, sizeof e) ||
                    pb_cu_logits_download(c1, l1, e, sizeof e) || pb_cu_logits_download(cs[r], ld, e, sizeof e)) {
                    fails++;
                    continue;
                }
                if (want_t) bad_t += top[r] != t1;
                if (want_l) bad_l += memcmp(lb + (size_t)r * V, l1, sizeof(float) * V) != 0;
                bad_d += memcmp(ld, l1, sizeof(float) * V) != 0;
                pos[i]++, rows++;
            }
        }
        CHECK(fails == 0 && bad_l == 0 && bad_d == 0 && bad_t == 0,
              "pb_cu_forward_batch, %d sequences, %d steps (%d rows): = one-token steps bit for bit (logits %d, "
              "downloaded %d, top %d differ; %d calls failed)",
              k, BSTEPS, rows, bad_l, bad_d, bad_t, fails);
        {
            const long got_b = pb_cu_batch_steps(ka[0]->gpu) - b0;
            CHECK(got_b == want_b,
                  "pb_cu_forward_batch, %d sequences: %ld of %d calls ran as one batched step (%ld "
                  "expected: the rest each row's own step)",
                  k, got_b, BSTEPS - fails, want_b);
        }
        { /* the caches afterwards */
            const int kv_bad = kv_layers_differ(ka, kb, k);
            CHECK(kv_bad == 0, "pb_cu_forward_batch, %d sequences: KV caches = the one-token steps' (%d layers differ)",
                  k, kv_bad);
        }
        if (k >= 2) { /* argument errors change nothing */
            pb_cu_ctx *cs[PB_CU_BATCH_MAX + 1];
            int bp[PB_CU_BATCH_MAX + 1];
            int32_t bt[PB_CU_BATCH_MAX + 1], top[PB_CU_BATCH_MAX + 1];
            for (int i = 0; i <= PB_CU_BATCH_MAX; i++) cs[i] = ka[i % k]->gpu, bp[i] = pos[i % k], bt[i] = toks[i % NT];
            const size_t b = (size_t)ka[0]->cap[0] * ka[0]->row_b[0];
            uint8_t *x = malloc(4 * b);
            char e[256];
            int ok = x && !pb_cu_kv_download(ka[0]->gpu, 0, x, x + b, b, e, sizeof e) &&
                     !pb_cu_logits_download(ka[0]->gpu, l1, e, sizeof e);
            int refused = 0;
            refused += pb_cu_forward_batch(cs, bp, bt, 0, lb, top, e, sizeof e) != 0;
            refused += pb_cu_forward_batch(cs, bp, bt, PB_CU_BATCH_MAX + 1, NULL, top, e, sizeof e) != 0;
            cs[1] = cs[0];
            refused += pb_cu_forward_batch(cs, bp, bt, 2, lb, top, e, sizeof e) != 0;
            cs[1] = ka[1]->gpu;
            bp[1] = nctx[1]; /* full */
            refused += pb_cu_forward_batch(cs, bp, bt, 2, lb, top, e, sizeof e) != 0;
            ok = ok && !pb_cu_kv_download(ka[0]->gpu, 0, x + 2 * b, x + 3 * b, b, e, sizeof e) &&
                 !pb_cu_logits_download(ka[0]->gpu, ld, e, sizeof e) && memcmp(x, x + 2 * b, 2 * b) == 0 &&
                 memcmp(l1, ld, sizeof(float) * V) == 0;
            CHECK(ok && refused == 4,
                  "pb_cu_forward_batch refuses n = 0, n = 65, a context twice, a full context "
                  "(%d of 4) and changes nothing",
                  refused);
            free(x);
        }
    next:
        for (int i = 0; i < k; i++) {
            pb_forward_ctx_free(fa[i]), pb_forward_ctx_free(fb[i]);
            pb_kv_free(ka[i]), pb_kv_free(kb[i]);
        }
    }
    free(lb), free(l1), free(ld);
}

/* A context freed and another made (likely at the freed one's host address, with other caches) between two batched
 * steps of three rows: the second step = the rows' one-token steps alone, bit for bit (the batch's cache tables must
 * not keep the freed context's pointers). */
static void check_batch_reuse(const pb_model *gm, const int32_t *toks, int V) {
    enum { R = 3, L0 = 8 };
    pb_kv_cache *ka[R + 1] = {0}, *kb[R + 1] = {0};
    pb_forward_ctx *fa[R + 1] = {0}, *fb[R + 1] = {0};
    float *l1 = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V * R);
    pb_status st = PB_OK;
    int bad = 0, fails = 0;
    char e[256] = "";
    for (int i = 0; i < R && !st; i++) {
        if ((st = pb_kv_new(gm, 128, PB_KV_F16, &ka[i])) || (st = pb_forward_ctx_new_kv(gm, L0, ka[i], &fa[i])) ||
            (st = pb_kv_new(gm, 128, PB_KV_F16, &kb[i])) || (st = pb_forward_ctx_new_kv(gm, L0, kb[i], &fb[i])))
            break;
        if ((st = pb_forward(gm, ka[i], fa[i], NULL, toks + i, L0, l1, false, NULL)) ||
            (st = pb_forward(gm, kb[i], fb[i], NULL, toks + i, L0, l1, false, NULL)))
            break;
    }
    if (st) {
        NOTE("batch reuse: setup failed (%s): skipped", pb_last_error());
        goto done;
    }
    const long b0 = pb_cu_batch_steps(ka[0]->gpu);
    for (int s = 0; s < 2; s++) {
        if (s == 1) { /* row 1 goes, row R (made now, likely at its host address, twice as long) takes its place */
            pb_forward_ctx_free(fa[1]), pb_kv_free(ka[1]);
            fa[1] = NULL, ka[1] = NULL;
            if (pb_kv_new(gm, 256, PB_KV_F16, &ka[R]) || pb_forward_ctx_new_kv(gm, L0, ka[R], &fa[R]) ||
                pb_kv_new(gm, 256, PB_KV_F16, &kb[R]) || pb_forward_ctx_new_kv(gm, L0, kb[R], &fb[R]) ||
                pb_forward(gm, ka[R], fa[R], NULL, toks + 5, L0, l1, false, NULL) ||
                pb_forward(gm, kb[R], fb[R], NULL, toks + 5, L0, l1, false, NULL)) {
                fails++;
                break;
            }
        }
        const int rows[R] = {0, s == 0 ? 1 : R, 2};
        pb_cu_ctx *cs[R];
        int bp[R];
        int32_t bt[R], top[R];
        for (int r = 0; r < R; r++) cs[r] = ka[rows[r]]->gpu, bp[r] = L0 + s - (rows[r] == R), bt[r] = toks[9 + r + s];
        if (pb_cu_forward_batch(cs, bp, bt, R, lb, top, e, sizeof e)) {
            NOTE("batch reuse, step %d: %s", s, e);
            fails++;
            continue;
        }
        for (int r = 0; r < R; r++) {
            int32_t t1 = -5;
            if (pb_cu_forward_argmax(kb[rows[r]]->gpu, bp[r], &bt[r], 1, &t1, NULL, e, sizeof e) ||
                pb_cu_logits_download(kb[rows[r]]->gpu, l1, e, sizeof e)) {
                fails++;
                continue;
            }
            bad += top[r] != t1 || memcmp(lb + (size_t)r * V, l1, sizeof(float) * V) != 0;
        }
    }
    CHECK(fails == 0 && bad == 0,
          "pb_cu_forward_batch after a context is freed and another made: = one-token steps bit for bit "
          "(%d rows differ, %d calls failed)",
          bad, fails);
    CHECK(pb_cu_batch_steps(ka[0]->gpu) - b0 == (batch_expected(gm, R) ? 2 : 0),
          "pb_cu_forward_batch after a context is freed: %ld of 2 calls ran as one batched step (%d expected)",
          pb_cu_batch_steps(ka[0]->gpu) - b0, batch_expected(gm, R) ? 2 : 0);
done:
    for (int i = 0; i <= R; i++) {
        pb_forward_ctx_free(fa[i]), pb_forward_ctx_free(fb[i]);
        pb_kv_free(ka[i]), pb_kv_free(kb[i]);
    }
    free(l1), free(lb);
}

/* Rows whose positions cross the sliding window (Gemma 4 files; PB_PAR_LONG=1 any model with a window): WB_R
 * contexts prefilled to W - 3, W - 1, W + 1, W + 3 tokens (W the window; rings of min(W, n_ctx) rows; every other
 * context of 2,304 positions, other key splits and cache sizes in one batch), then WB_STEPS batched steps of 4, 2 and
 * 1 rows with PB_CUDA_BATCH_MIN=1 (so one and two rows take the batched step too), against twin contexts stepped
 * alone: logits (returned and downloaded) and top bit for bit, the caches afterwards, and the batched steps counted. */
enum { WB_R = 4, WB_STEPS = 8 };
static void check_batch_window(const pb_model *gm, int V) {
    const pb_hparams *hp = pb_model_hparams(gm);
    const int W = hp->sliding_window;
    if (W < 4) {
        NOTE("batch across the window: no sliding window: skipped");
        return;
    }
    const int nt = W + 3 + WB_STEPS;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)nt);
    float *lb = malloc(sizeof(float) * (size_t)V * WB_R), *l1 = malloc(sizeof(float) * (size_t)V),
          *ld = malloc(sizeof(float) * (size_t)V);
    pb_kv_cache *ka[WB_R] = {0}, *kb[WB_R] = {0};
    pb_forward_ctx *fa[WB_R] = {0}, *fb[WB_R] = {0};
    int pos[WB_R];
    pb_status st = toks && lb && l1 && ld ? PB_OK : PB_ERR_NOMEM;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int i = 0; toks && i < nt; i++) { /* random ids (xorshift) */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        toks[i] = (int32_t)(r % (uint64_t)V);
    }
    for (int i = 0; i < WB_R && !st; i++) {
        const int len = W - 3 + 2 * i, nctx = i % 2 ? (W + 2 * WB_STEPS > 2304 ? W + 2 * WB_STEPS : 2304) : W + 16;
        pos[i] = len;
        if ((st = pb_kv_new(gm, nctx, PB_KV_F16, &ka[i])) || (st = pb_forward_ctx_new_kv(gm, len, ka[i], &fa[i])) ||
            (st = pb_kv_new(gm, nctx, PB_KV_F16, &kb[i])) || (st = pb_forward_ctx_new_kv(gm, len, kb[i], &fb[i])) ||
            (st = pb_forward(gm, ka[i], fa[i], NULL, toks, len, l1, false, NULL)) ||
            (st = pb_forward(gm, kb[i], fb[i], NULL, toks, len, l1, false, NULL)))
            break;
    }
    CHECK(st == PB_OK, "batch across the window: %d contexts prefilled to %d..%d tokens (%s)", 2 * WB_R, W - 3, W + 3,
          st ? pb_last_error() : "ok");
    if (st) goto done;
    {
        const char *old = getenv("PB_CUDA_BATCH_MIN");
        char keep[32] = "";
        if (old) snprintf(keep, sizeof keep, "%s", old);
        setenv("PB_CUDA_BATCH_MIN", "1", 1);
        int bad_l = 0, bad_d = 0, bad_t = 0, rows = 0, fails = 0;
        long want_b = 0;
        const long b0 = pb_cu_batch_steps(ka[0]->gpu);
        char e[256] = "";
        for (int s = 0; s < WB_STEPS; s++) {
            /* all four rows; rows 0 and 2 (different positions, the same n_ctx); row 1 or 3 alone */
            const int n = s % 3 == 0 ? WB_R : s % 3 == 1 ? 2 : 1;
            pb_cu_ctx *cs[WB_R];
            int bp[WB_R], idx[WB_R];
            int32_t bt[WB_R], top[WB_R];
            for (int j = 0; j < n; j++) {
                const int i = n == WB_R ? j : n == 2 ? 2 * j : 1 + 2 * (s % 2);
                idx[j] = i, cs[j] = ka[i]->gpu, bp[j] = pos[i], bt[j] = toks[(pos[i] + 5 * s) % nt];
            }
            if (pb_cu_forward_batch(cs, bp, bt, n, lb, top, e, sizeof e)) {
                if (fails++ < 2) NOTE("batch across the window, %d rows at step %d: %s", n, s, e);
                continue;
            }
            want_b += batch_expected(gm, n);
            for (int j = 0; j < n; j++) {
                const int i = idx[j];
                int32_t t1 = -5;
                if (pb_cu_forward_argmax(kb[i]->gpu, pos[i], &bt[j], 1, &t1, NULL, e, sizeof e) ||
                    pb_cu_logits_download(kb[i]->gpu, l1, e, sizeof e) ||
                    pb_cu_logits_download(ka[i]->gpu, ld, e, sizeof e)) {
                    fails++;
                    continue;
                }
                bad_t += top[j] != t1;
                bad_l += memcmp(lb + (size_t)j * V, l1, sizeof(float) * V) != 0;
                bad_d += memcmp(ld, l1, sizeof(float) * V) != 0;
                pos[i]++, rows++;
            }
        }
        const long got_b = pb_cu_batch_steps(ka[0]->gpu) - b0;
        if (old)
            setenv("PB_CUDA_BATCH_MIN", keep, 1);
        else
            unsetenv("PB_CUDA_BATCH_MIN");
        int hi = 0;
        for (int i = 0; i < WB_R; i++) hi = pos[i] - 1 > hi ? pos[i] - 1 : hi;
        CHECK(fails == 0 && bad_l == 0 && bad_d == 0 && bad_t == 0,
              "pb_cu_forward_batch across the sliding window (%d): %d rows at positions %d..%d = one-token steps bit "
              "for bit (logits %d, downloaded %d, top %d differ; %d calls failed)",
              W, rows, W - 3, hi, bad_l, bad_d, bad_t, fails);
        CHECK(got_b == want_b,
              "pb_cu_forward_batch across the sliding window: %ld of %d calls ran as one batched step (%ld expected)",
              got_b, WB_STEPS, want_b);
    }
    { /* the caches afterwards */
        const int kv_bad = kv_layers_differ(ka, kb, WB_R);
        CHECK(kv_bad == 0,
              "pb_cu_forward_batch across the sliding window: KV caches = the one-token steps' (%d layers "
              "differ)",
              kv_bad);
    }
done:
    for (int i = 0; i < WB_R; i++) {
        pb_forward_ctx_free(fa[i]), pb_forward_ctx_free(fb[i]);
        pb_kv_free(ka[i]), pb_kv_free(kb[i]);
    }
    free(toks), free(lb), free(l1), free(ld);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* gpu_parity --batch-bench MODEL: aggregate decode tok/s of pb_cu_forward_batch (top only) at n = 1, 2, 4, 8, 16, 32,
 * 64 against the same n contexts stepped one token at a time (pb_cu_forward_argmax), 64-token prompts, 32 steps. */
static int batch_bench(const char *path) {
    pb_model_params gp = pb_model_default_params();
    gp.gpu = 1;
    pb_model *gm = NULL;
    if (pb_model_open(path, &gp, &gm)) {
        printf("batch bench: %s\n", pb_last_error());
        return 1;
    }
    enum { BN = 64, PL = 64, ST = 32 };
    static const int ns[] = {1, 2, 4, 8, 16, 32, 64};
    pb_kv_cache *kv[BN] = {0};
    pb_forward_ctx *fc[BN] = {0};
    int32_t toks[PL];
    for (int i = 0; i < PL; i++) toks[i] = 100 + i * 37;
    float *l = malloc(sizeof(float) * (size_t)pb_model_hparams(gm)->n_vocab);
    for (int i = 0; i < BN; i++)
        if (pb_kv_new(gm, 1024, PB_KV_F16, &kv[i]) || pb_forward_ctx_new_kv(gm, PL, kv[i], &fc[i]) ||
            pb_forward(gm, kv[i], fc[i], NULL, toks, PL, l, false, NULL)) {
            printf("batch bench setup: %s\n", pb_last_error());
            return 1;
        }
    pb_cu_ctx *cs[BN];
    int pos[BN];
    int32_t tk[BN], top[BN];
    char e[256];
    for (int i = 0; i < BN; i++) cs[i] = kv[i]->gpu, tk[i] = 7;
    int base = PL;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni];
        for (int i = 0; i < n; i++) pos[i] = base;
        pb_cu_forward_batch(cs, pos, tk, n, NULL, top, e, sizeof e); /* warm: graphs */
        for (int i = 0; i < n; i++) pos[i]++;
        double t0 = now_s();
        for (int s = 0; s < ST; s++) {
            for (int i = 0; i < n; i++)
                if (pb_cu_forward_argmax(cs[i], pos[i] + s, &tk[i], 1, &top[i], NULL, e, sizeof e)) printf("%s\n", e);
        }
        double t1 = now_s();
        for (int i = 0; i < n; i++) pos[i] += ST;
        for (int s = 0; s < ST; s++) {
            if (pb_cu_forward_batch(cs, pos, tk, n, NULL, top, e, sizeof e)) printf("%s\n", e);
            for (int i = 0; i < n; i++) pos[i]++;
        }
        double t2 = now_s();
        printf("batch bench n=%2d: one-token steps %8.1f tok/s, pb_cu_forward_batch %8.1f tok/s (x%.2f)\n", n,
               n * ST / (t1 - t0), n * ST / (t2 - t1), (t1 - t0) / (t2 - t1));
        base += 1 + 2 * ST;
    }
    for (int i = 0; i < BN; i++) pb_forward_ctx_free(fc[i]), pb_kv_free(kv[i]);
    free(l);
    pb_model_close(gm);
    return 0;
}

/* A prompt past one prefill chunk (PF_NC = 512 tokens) and past a 512-token sliding window (Gemma 4 E2B, Gemma 3
 * 270m / 1b; the tiny models' windows of 8-32 wrap many times): LONG_N tokens at once (chunks of 512 and 88), in
 * calls of 200 (a chunk whose ring wraps over keys of the same chunk) and token by token; the last prompt token's
 * logits, those of LONG_MORE one-token steps after it and the session state afterwards (every cache row, pulled from
 * the device), bit for bit. GPU only: no CPU run of the long prompt. */
enum { LONG_N = 600, LONG_MORE = 8 };
static void check_long(const pb_model *gm, int V) {
    static const int calls[] = {LONG_N, 200, 1};
    int32_t toks[LONG_N + LONG_MORE];
    uint64_t r = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < LONG_N + LONG_MORE; i++) { /* random ids (xorshift) */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        toks[i] = (int32_t)(r % (uint64_t)V);
    }
    float *lg[3] = {NULL, NULL, NULL};
    void *state[3] = {NULL, NULL, NULL};
    size_t slen[3] = {0, 0, 0};
    pb_status st = PB_OK;
    for (int k = 0; k < 3 && !st; k++) {
        pb_kv_cache *kv = NULL;
        pb_forward_ctx *fc = NULL;
        if (!(lg[k] = malloc(sizeof(float) * (size_t)V * (1 + LONG_MORE)))) st = PB_ERR_NOMEM;
        if (!st) st = pb_kv_new(gm, LONG_N + LONG_MORE, PB_KV_F16, &kv);
        if (!st) st = pb_forward_ctx_new_kv(gm, calls[k], kv, &fc);
        for (int i = 0; i < LONG_N && !st; i += calls[k]) {
            const int c = LONG_N - i < calls[k] ? LONG_N - i : calls[k];
            st = pb_forward(gm, kv, fc, NULL, toks + i, c, lg[k], false, NULL);
        }
        for (int i = 0; i < LONG_MORE && !st; i++)
            st = pb_forward(gm, kv, fc, NULL, toks + LONG_N + i, 1, lg[k] + (size_t)(1 + i) * V, false, NULL);
        if (!st && !(state[k] = malloc(slen[k] = pb_kv_state_size(kv)))) st = PB_ERR_NOMEM;
        if (!st) st = pb_kv_state_write(kv, state[k], slen[k], &slen[k]);
        pb_forward_ctx_free(fc);
        pb_kv_free(kv);
    }
    CHECK(st == PB_OK, "GPU forward of a %d-token prompt at once, in calls of 200 and token by token (%s)", LONG_N,
          st ? pb_last_error() : "ok");
    if (!st) {
        same_bits(lg[2], lg[0], 1 + LONG_MORE, V, "GPU prefill of 600 tokens at once (chunks of 512 + 88), 8 steps on");
        same_bits(lg[2], lg[1], 1 + LONG_MORE, V, "GPU prefill of 600 tokens in calls of 200, 8 steps on");
        CHECK(slen[0] == slen[2] && slen[1] == slen[2] && memcmp(state[0], state[2], slen[2]) == 0 &&
                  memcmp(state[1], state[2], slen[2]) == 0,
              "GPU prefill of 600 tokens at once / in calls of 200: the cache afterwards = token by token (%zu / %zu / "
              "%zu bytes of state)",
              slen[0], slen[1], slen[2]);
    }
    for (int k = 0; k < 3; k++) free(lg[k]), free(state[k]);
}

/* Rings holding rows beyond their window (pb_kv_new_ring: the cache of a Gemma 4 session that drops its thoughts) on
 * the GPU, where the device rings then hold cap = window + extra rows (slot pos % cap) while the attention still sees
 * the window: a plain cache and two with RX_A / RX_B extra rows, fed the same 3 x window + RX_A tokens in calls of 37
 * and then one-token steps, give the same logits bit for bit; going back extra + 1 positions needs no re-read and the
 * re-fed tokens give the same logits again, extra + 2 is refused; a batched step of the three (per-row caps) gives
 * one row's logits three times. Models without sliding-window layers: nothing to check. */
enum { RX_A = 24, RX_B = 5, RX_STEPS = 4 };
static void check_ring_extra(const pb_model *gm, int V) {
    const pb_hparams *hp = pb_model_hparams(gm);
    bool swa = false;
    for (int il = 0; il < hp->n_layer; il++) swa = swa || hp->swa_layer[il];
    if (hp->sliding_window <= 0 || !swa) return;
    const int W = hp->sliding_window, L = 3 * W + RX_A, T = L + RX_STEPS, N = T + 8;
    const int extra[3] = {0, RX_A, RX_B};
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(T + 1));
    float *lg[3] = {NULL, NULL, NULL}, *lr = malloc(sizeof(float) * (size_t)V * (RX_A + 1));
    pb_kv_cache *kv[3] = {NULL, NULL, NULL};
    pb_forward_ctx *fc[3] = {NULL, NULL, NULL};
    pb_status st = toks && lr ? PB_OK : PB_ERR_NOMEM;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int i = 0; toks && i <= T; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        toks[i] = (int32_t)(r % (uint64_t)V);
    }
    for (int k = 0; k < 3 && !st; k++) {
        if (!(lg[k] = malloc(sizeof(float) * (size_t)V * T))) st = PB_ERR_NOMEM;
        if (!st) st = pb_kv_new_ring(gm, N, PB_KV_F16, extra[k], &kv[k]);
        if (!st) st = pb_forward_ctx_new_kv(gm, 37, kv[k], &fc[k]);
        for (int i = 0; i < L && !st; i += 37)
            st = pb_forward(gm, kv[k], fc[k], NULL, toks + i, L - i < 37 ? L - i : 37, lg[k] + (size_t)i * V, true,
                            NULL);
        for (int i = L; i < T && !st; i++)
            st = pb_forward(gm, kv[k], fc[k], NULL, toks + i, 1, lg[k] + (size_t)i * V, false, NULL);
    }
    CHECK(st == PB_OK, "GPU caches with 0 / %d / %d ring rows beyond the window %d: %d tokens (%s)", RX_A, RX_B, W, T,
          st ? pb_last_error() : "ok");
    if (!st) {
        same_bits(lg[0], lg[1], T, V, "GPU ring with 24 extra rows: calls of 37, then steps");
        same_bits(lg[0], lg[2], T, V, "GPU ring with 5 extra rows: calls of 37, then steps");
        for (int k = 1; k < 3; k++) {
            const int back = extra[k] + 1;
            pb_status s1 = pb_kv_truncate(kv[k], T - back - 1), s2 = pb_kv_truncate(kv[k], T - back), s3 = PB_OK;
            if (!s2) s3 = pb_forward(gm, kv[k], fc[k], NULL, toks + T - back, back, lr, true, NULL);
            CHECK(s1 == PB_ERR_INVALID_ARG && !s2 && !s3 && pb_kv_n_past(kv[k]) == T &&
                      memcmp(lr, lg[0] + (size_t)(T - back) * V, sizeof(float) * (size_t)V * back) == 0,
                  "GPU ring with %d extra rows: back %d refused, back %d re-fed gives the same logits (%s)", extra[k],
                  back + 1, back, s3 ? pb_last_error() : "ok");
        }
        pb_cu_ctx *cs[3] = {kv[0]->gpu, kv[1]->gpu, kv[2]->gpu};
        int pos[3] = {T, T, T};
        int32_t bt[3] = {toks[T], toks[T], toks[T]}, top[3] = {-1, -2, -3};
        float *lb = malloc(sizeof(float) * (size_t)V * 3);
        char e[256] = "";
        const int bs = lb ? pb_cu_forward_batch(cs, pos, bt, 3, lb, top, e, sizeof e) : -1;
        CHECK(bs == 0 && !memcmp(lb, lb + V, sizeof(float) * V) && !memcmp(lb, lb + 2 * (size_t)V, sizeof(float) * V) &&
                  top[0] == top[1] && top[0] == top[2],
              "GPU batched step of the three caches (rings of %d, %d, %d rows): one row's logits thrice (%s)", W,
              W + RX_A, W + RX_B, bs ? e : "ok");
        free(lb);
    }
    for (int k = 0; k < 3; k++) pb_forward_ctx_free(fc[k]), pb_kv_free(kv[k]), free(lg[k]);
    free(toks), free(lr);
}

/* A Gemma 4 model's geometry (what its GPU step exercises), noted; true for a MoE model, whose refusal by name
 * (gpu = 1) and fallback to the CPU (gpu = -1) are then checked instead of the GPU runs. */
static bool gemma4_note(const char *path, const pb_model *cm) {
    const pb_hparams *hp = pb_model_hparams(cm);
    if (hp->arch != PB_ARCH_GEMMA4) return false;
    int shared = 0, keqv = 0, wide = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        shared += hp->kv_src[il] != il;
        keqv += hp->kv_src[il] == il && !cm->layers[il].wv.t; /* no attn_v: V is the raw K projection */
        wide += hp->head_dim_l[il] > 256;
    }
    NOTE("gemma4: %d layers, head_dim swa %d / full %d (%d layers on the wide attention form), %d KV-shared, PLE %d, "
         "MoE experts %d, %d k_eq_v layers",
         hp->n_layer, hp->hd_swa, hp->hd_full, wide, shared, hp->n_embd_per_layer, hp->n_expert, keqv);
    if (hp->n_expert == 0) return false;
    pb_model_params p = pb_model_default_params();
    pb_model *m = NULL;
    p.gpu = 1;
    pb_status st = pb_model_open(path, &p, &m);
    CHECK(st == PB_ERR_UNSUPPORTED && !m && strstr(pb_last_error(), "MoE"), "gemma4 MoE, gpu = 1: refused by name (%s)",
          pb_last_error());
    pb_model_close(m);
    m = NULL;
    p.gpu = -1;
    st = pb_model_open(path, &p, &m);
    pb_model_info info = {0};
    if (!st) pb_model_get_info(m, &info);
    CHECK(st == PB_OK && !info.gpu && strstr(info.gpu_note, "MoE"), "gemma4 MoE, gpu = -1: on the CPU (note '%s')",
          info.gpu_note);
    pb_model_close(m);
    return true;
}

static void check_model(const char *path, const char *tok_path) {
    NOTE("model %s", path);
    pb_model_params cp = pb_model_default_params(), gp = pb_model_default_params();
    cp.gpu = 0;
    gp.gpu = 1;
    pb_model *cm = NULL, *gm = NULL;
    pb_status st = pb_model_open(path, &cp, &cm);
    CHECK(st == PB_OK, "open on the CPU: %s", st ? pb_last_error() : path);
    if (st) return;
    if (gemma4_note(path, cm)) {
        pb_model_close(cm);
        return;
    }
    st = pb_model_open(path, &gp, &gm);
    CHECK(st == PB_OK, "open on the GPU: %s", st ? pb_last_error() : path);
    if (st) {
        pb_model_close(cm);
        return;
    }
    pb_model *gf = NULL; /* the same file on the GPU's float path */
    setenv("PB_CUDA_FLOAT", "1", 1);
    st = pb_model_open(path, &gp, &gf);
    unsetenv("PB_CUDA_FLOAT");
    CHECK(st == PB_OK, "open on the GPU, float path: %s", st ? pb_last_error() : path);
    pb_model_info info;
    pb_model_get_info(gm, &info);
    CHECK(info.gpu && info.gpu_name[0], "model info says GPU (%s), %s", info.gpu_name, info.file_type);
    const pb_hparams *hp = pb_model_hparams(cm);
    int V = hp->n_vocab, n = NT;
    int32_t toks[NT];
    FILE *f = tok_path ? fopen(tok_path, "rb") : NULL;
    size_t got = f ? fread(toks, sizeof(int32_t), NT, f) : 0;
    if (f) fclose(f);
    uint64_t r = 88172645463325252ull;
    for (size_t i = got; i < NT; i++) { /* random ids (xorshift) where the file has none */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        toks[i] = (int32_t)(r % (uint64_t)V);
    }
    /* PB_PAR_ONLY "batch": only the batch checks (sanitizer runs); "gpu": GPU only (full-size models): prefill at
       once, in calls of 37 and token by token bit for bit, then the batch checks; no CPU run; "state": only the
       session state's GPU <-> CPU round trips and the refusals (KV type, exact mode): the checks at the end of a full
       run, which a large model's run (the synth E2B's) did not reach within its time limit */
    const char *only = getenv("PB_PAR_ONLY"), *lenv = getenv("PB_PAR_LONG");
    const size_t nv = (size_t)n * V;
    const bool long_on = hp->arch == PB_ARCH_GEMMA4 || (lenv && atoi(lenv) == 1); /* check_long, check_batch_window */
    if (only && strcmp(only, "gpu") == 0) {
        float *a = malloc(sizeof(float) * nv), *b = malloc(sizeof(float) * nv), *t = malloc(sizeof(float) * nv);
        pb_status s1 = run_all(gm, toks, n, n, false, a, NULL), s2 = run_all(gm, toks, n, 37, false, b, NULL),
                  s3 = run_all(gm, toks, n, 1, false, t, NULL);
        CHECK(!s1 && !s2 && !s3, "GPU forward, prefill at once, in calls of 37 and token by token (%s)",
              s1 || s2 || s3 ? pb_last_error() : "ok");
        if (!s1 && !s2 && !s3) {
            same_bits(t, a, n, V, "GPU prefill at once (96 tokens)");
            same_bits(t, b, n, V, "GPU prefill in calls of 37 tokens");
        }
        free(a), free(b), free(t);
        if (long_on) check_long(gm, V);
        check_ring_extra(gm, V);
    }
    if (only && (strcmp(only, "batch") == 0 || strcmp(only, "gpu") == 0)) {
        check_batch(gm, toks, V);
        check_batch_reuse(gm, toks, V);
        if (long_on) check_batch_window(gm, V);
        pb_model_close(gf), pb_model_close(gm), pb_model_close(cm);
        return;
    }
    const bool state_only = only && strcmp(only, "state") == 0;
    if (state_only) goto state;
    float *lc = malloc(sizeof(float) * nv), *ld = malloc(sizeof(float) * nv), *lg = malloc(sizeof(float) * nv),
          *l1 = malloc(sizeof(float) * nv), *lf = malloc(sizeof(float) * nv), *lp = malloc(sizeof(float) * nv),
          *lf1 = malloc(sizeof(float) * nv), *hg = malloc(sizeof(float) * (size_t)hp->n_embd),
          *h1 = malloc(sizeof(float) * (size_t)hp->n_embd);
    st = run_all(cm, toks, n, 16, true, lc, NULL);
    pb_status sd = run_all(cm, toks, n, 16, false, ld, NULL);
    CHECK(st == PB_OK && sd == PB_OK, "CPU forward, exact and default");
    pb_status s1 = run_all(gm, toks, n, n, false, lg, hg), s2 = run_all(gm, toks, n, 1, false, l1, h1);
    CHECK(s1 == PB_OK && s2 == PB_OK, "GPU forward, prefill at once and token by token (%s)",
          s1 || s2 ? pb_last_error() : "ok");
    pb_status sf = gf ? run_all(gf, toks, n, n, false, lf, NULL) : PB_ERR_INTERNAL;
    CHECK(sf == PB_OK, "GPU forward, float path (%s)", sf ? pb_last_error() : "ok");
    pb_status s3 = run_all(gm, toks, n, 37, false, lp, NULL);
    pb_status s4 = gf ? run_all(gf, toks, n, 1, false, lf1, NULL) : PB_ERR_INTERNAL;
    CHECK(s3 == PB_OK && s4 == PB_OK, "GPU forward, calls of 37 tokens and float path token by token (%s)",
          s3 || s4 ? pb_last_error() : "ok");
    if (!st && !sd && !s1 && !s2 && !sf) {
        check_logits(lc, ld, lg, lf, n, V);
        same_bits(l1, lg, n, V, "GPU prefill at once (96 tokens)");
        CHECK(memcmp(hg, h1, sizeof(float) * (size_t)hp->n_embd) == 0,
              "GPU prefill at once: the last token's final hidden row = token by token (bit for bit)");
    }
    if (!s2 && !s3) same_bits(l1, lp, n, V, "GPU prefill in calls of 37 tokens");
    if (!sf && !s4) same_bits(lf1, lf, n, V, "GPU float path prefill at once");
    free(lc), free(ld), free(lg), free(l1), free(lf), free(lp), free(lf1), free(hg), free(h1);
    if (long_on) check_long(gm, V);
    check_ring_extra(gm, V);
    check_top(gm, toks, 32, V);
    check_sampled(gm, toks);
    check_batch(gm, toks, V);
    check_batch_reuse(gm, toks, V);
    if (long_on) check_batch_window(gm, V);
state:
    if (gf) {
        state_cross(gf, cm, toks, 40, V, "GPU -> CPU");
        state_cross(cm, gf, toks, 40, V, "CPU -> GPU");
    }
    bool hd32 = true; /* (q8_0 rows need every layer's head_dim % 32 == 0 anyway) */
    for (int il = 0; il < hp->n_layer; il++) hd32 = hd32 && hp->head_dim_l[il] % 32 == 0;
    if (hd32) {
        pb_session_params sp = pb_session_default_params();
        sp.n_ctx = 64;
        sp.kv_type = PB_KV_Q8_0;
        pb_session *s = NULL;
        st = pb_session_new(gm, &sp, &s);
        CHECK(st == PB_ERR_UNSUPPORTED && strstr(pb_last_error(), "f16"), "GPU session refuses a q8_0 KV cache: %s",
              pb_last_error());
        pb_session_free(s);
    }
    { /* exact mode (float32 on dequantized rows) is the CPU's: a GPU cache refuses it instead of running int8 */
        pb_kv_cache *kx = NULL;
        pb_forward_ctx *fx = NULL;
        float *lx = malloc((size_t)V * sizeof(float));
        if (lx && !pb_kv_new(gm, 8, PB_KV_F16, &kx) && !pb_forward_ctx_new_kv(gm, 1, kx, &fx)) {
            pb_forward_set_exact(fx, true);
            st = pb_forward(gm, kx, fx, NULL, toks, 1, lx, false, NULL);
            CHECK(st == PB_ERR_UNSUPPORTED && strstr(pb_last_error(), "exact") && pb_kv_n_past(kx) == 0,
                  "a GPU cache refuses exact mode, changing nothing: %s", pb_last_error());
            int32_t tx = -1;
            st = pb_forward_top(gm, kx, fx, toks, 1, &tx);
            CHECK(st == PB_ERR_UNSUPPORTED && strstr(pb_last_error(), "exact") && pb_kv_n_past(kx) == 0,
                  "... through pb_forward_top too: %s", pb_last_error());
        } else {
            CHECK(0, "exact-mode check: setting up");
        }
        pb_forward_ctx_free(fx);
        pb_kv_free(kx);
        free(lx);
    }
    pb_model_close(gf);
    pb_model_close(gm);
    pb_model_close(cm);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_parity MODEL.gguf [TOKENS.bin] ...\n");
        return 2;
    }
    if (argc == 3 && strcmp(argv[1], "--batch-bench") == 0) return batch_bench(argv[2]);
    for (int i = 1; i < argc; i++) {
        const char *tok = i + 1 < argc && strstr(argv[i + 1], ".bin") ? argv[i + 1] : NULL;
        check_model(argv[i], tok);
        if (tok) i++;
    }
    printf("%d failed\n", pbt_failures);
    return pbt_failures != 0;
}
