/* test_convert_ref.c -- tiny random Gemma 1/2/3 HF models (tests/data/model/<arch>, made by
 * tools/reference/make_tiny_models.py with transformers): `$PB_BIN convert` to F32, then our logits vs
 * transformers float32 at every position, prefill at once == chunked == token by token, and `pocketbrain logits`. */
#include "forward_common.h"

#include <sys/stat.h>
#include <sys/wait.h>

enum { NTOK = 40, NV = 4096 };

static int sh(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* Feeds toks in chunks, F32 or F16 KV, into out[NTOK * V]. */
static pb_status feed(const pb_model *m, const int32_t *toks, int batch, pb_kv_type kt, float *out) {
    return run(m, toks, NTOK, batch, kt, 2, out);
}

static cmp cmpn(const float *a, const float *b) { return compare(a, b, NTOK, NV); }

static void test_arch(const char *bin, const char *arch) {
    char dir[256], gguf[256], cmd[1024], path[512];
    snprintf(dir, sizeof dir, "tests/data/model/%s", arch);
    snprintf(gguf, sizeof gguf, "/tmp/pb_convert_ref_%d_%s.gguf", (int)getpid(), arch);
    snprintf(cmd, sizeof cmd, "%s convert %s %s --type f32 >/dev/null 2>&1", bin, dir, gguf);
    int rc = sh(cmd);
    CHECK(rc == 0 && exists(gguf), "%s: pocketbrain convert --type f32 (rc %d)", arch, rc);
    pb_model *m = NULL;
    if (rc != 0 || pb_model_open(gguf, NULL, &m) != PB_OK) {
        CHECK(0, "%s: converted model opens (%s)", arch, pb_last_error());
        remove(gguf);
        return;
    }
    const pb_hparams *hp = pb_model_hparams(m);
    if (strcmp(arch, "gemma") == 0)
        CHECK(hp->arch == PB_ARCH_GEMMA && hp->n_head == 4 && hp->n_head_kv == 1 && hp->head_dim == 16,
              "gemma: MQA 4/1 heads of 16");
    if (strcmp(arch, "gemma2") == 0)
        CHECK(hp->arch == PB_ARCH_GEMMA2 && hp->n_head_kv == 2 && hp->head_dim == 12 && hp->sliding_window == 8,
              "gemma2: GQA 4/2, head_dim 12, window 8");
    if (strcmp(arch, "gemma3") == 0)
        CHECK(hp->arch == PB_ARCH_GEMMA3 && hp->n_layer == 7 && hp->head_dim == 20 && hp->sliding_window == 8 &&
                  hp->rope_base == 1e6f && hp->rope_base_local == 1e4f && hp->rope_scale == 8.0f && hp->swa_layer[4] &&
                  !hp->swa_layer[5] && hp->swa_layer[6],
              "gemma3: 7 layers (layer 5 global), rope 1e6 x1/8 global / 1e4 local, window 8");

    int32_t toks[NTOK];
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    FILE *f = fopen(path, "rb");
    CHECK(f && fread(toks, 4, NTOK, f) == NTOK, "%s: tokens.bin", arch);
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/logits.f32.f32", dir);
    float *hf = read_f32(path, (size_t)NTOK * NV);
    snprintf(path, sizeof path, "%s/logits.f64.f32", dir);
    float *hf64 = read_f32(path, (size_t)NTOK * NV);
    size_t n = (size_t)NTOK * NV;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4), *h16 = malloc(n * 4);
    bool ok = hf && hf64 && feed(m, toks, NTOK, PB_KV_F32, a) == PB_OK && feed(m, toks, 7, PB_KV_F32, b) == PB_OK &&
              feed(m, toks, 1, PB_KV_F32, c) == PB_OK && feed(m, toks, NTOK, PB_KV_F16, h16) == PB_OK;
    CHECK(ok, "%s: reference files read, forward runs (%s)", arch, pb_last_error());
    if (ok) {
        float lo = hf[0], hi = hf[0];
        for (size_t i = 0; i < n; i++) {
            lo = hf[i] < lo ? hf[i] : lo;
            hi = hf[i] > hi ? hf[i] : hi;
        }
        double range = (double)hi - (double)lo;
        cmp vs32 = cmpn(a, hf), vs64 = cmpn(a, hf64), hf3264 = cmpn(hf, hf64), ab = cmpn(a, b), ac = cmpn(a, c),
            k16 = cmpn(h16, hf);
        NOTE("== %s (logit range %.1f)", arch, range);
        NOTE("ours vs HF f32           max|d| %.3g (%.2g of range)  mean|d| %.3g  top-1 %d/%d", vs32.max,
             vs32.max / range, vs32.mean, vs32.top1, NTOK);
        NOTE("ours vs HF f64           max|d| %.3g  mean|d| %.3g  top-1 %d/%d", vs64.max, vs64.mean, vs64.top1, NTOK);
        NOTE("HF f32 vs HF f64         max|d| %.3g  mean|d| %.3g", hf3264.max, hf3264.mean);
        NOTE("ours F16 KV vs HF f32    max|d| %.3g  mean|d| %.3g  top-1 %d/%d", k16.max, k16.mean, k16.top1, NTOK);
        NOTE("batch vs chunks of 7 %.3g, batch vs token by token %.3g", ab.max, ac.max);
        CHECK(vs32.max <= 1e-3 * range, "%s: max|dlogit| %.3g <= 1e-3 x range vs transformers f32", arch, vs32.max);
        CHECK(vs32.top1 == NTOK, "%s: top-1 identical at all %d positions", arch, NTOK);
        CHECK(ab.max <= 1e-5 * range && ac.max <= 1e-5 * range,
              "%s: prefill at once == chunks of 7 == token by token (window 8 < 40 tokens)", arch);
    }

    /* the CLI: same numbers as the library, atomic output, clear failures */
    char out[256], bad[256];
    snprintf(out, sizeof out, "/tmp/pb_convert_ref_%d_%s.f32", (int)getpid(), arch);
    snprintf(cmd, sizeof cmd,
             "%s logits -m %s --tokens %s/tokens.bin -o %s --batch 7 --kv-type f32 --threads 2 2>/dev/null", bin, gguf,
             dir, out);
    rc = sh(cmd);
    float *cli = rc == 0 ? read_f32(out, n) : NULL;
    CHECK(cli && ok && cmpn(cli, a).max == 0.0, "%s: pocketbrain logits writes the same [%d, %d] floats", arch, NTOK,
          NV);
    free(cli);
    remove(out);
    snprintf(bad, sizeof bad, "/tmp/pb_convert_ref_%d_bad.bin", (int)getpid());
    int32_t badtok[2] = {2, 999999};
    f = fopen(bad, "wb");
    if (f) {
        fwrite(badtok, 4, 2, f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "%s logits -m %s --tokens %s -o %s 2>/dev/null", bin, gguf, bad, out);
    rc = sh(cmd);
    CHECK(rc != 0 && !exists(out), "%s: out-of-vocabulary id -> exit %d, no output file", arch, rc);
    snprintf(cmd, sizeof cmd, "%s logits -m %s --tokens %s/tokens.bin -o %s --kv-type f8 2>/dev/null", bin, gguf, dir,
             out);
    rc = sh(cmd);
    CHECK(rc == 2 && !exists(out), "%s: bad --kv-type is a usage error (exit %d)", arch, rc);
    remove(bad);
    free(a);
    free(b);
    free(c);
    free(h16);
    free(hf);
    free(hf64);
    pb_model_close(m);
    remove(gguf);
}

int main(void) {
    const char *bin = getenv("PB_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        const char *ci = getenv("CI");
        if (ci && strcmp(ci, "true") == 0)
            CHECK(0, "PB_BIN (%s) is not an executable pocketbrain", bin ? bin : "unset");
        else
            NOTE("skip: PB_BIN not set (run through tests/run.sh)");
        TEST_DONE();
    }
    const char *archs[] = {"gemma", "gemma2", "gemma3"};
    for (int i = 0; i < 3; i++) test_arch(bin, archs[i]);
    TEST_DONE();
}
