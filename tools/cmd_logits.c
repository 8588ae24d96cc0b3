/* cmd_logits.c -- `pocketbrain logits`: float32 logits of every position of an int32 token file (for comparisons
 * with reference implementations). Output is atomic: temp file + rename, nothing left on failure. */
#include "cli.h"
#include "cli_common.h"
#include "library.h"

#include "base/base.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *usage =
    "pocketbrain logits -m MODEL --tokens IDS.bin -o OUT.f32 [--batch N] [--threads N] [--kv-type f16|q8_0|f32]\n"
    "                   [--exact]\n"
    "  IDS.bin: int32 little-endian token ids. OUT.f32: float32 [n_tokens, n_vocab], row-major.\n"
    "  --batch N feeds the prompt N tokens per forward pass (default 512; 1 = token by token).\n"
    "  --exact: float32 matmuls on dequantized weight rows (reference numerics) instead of quantized activations.";

static int read_ids(const char *path, int32_t **ids, int *n) {
    char *buf = NULL;
    size_t len = 0;
    pb_status s = pb_read_file(path, &buf, &len);
    if (s) return cli_fail("logits", s, "reading --tokens");
    if (len == 0 || len % 4 != 0 || len / 4 > (1u << 24)) {
        cli_err("logits", "%s: %zu bytes is not a non-empty list of int32 token ids", path, len);
        free(buf);
        return 1;
    }
    *n = (int)(len / 4);
    *ids = malloc(len);
    if (!*ids) {
        free(buf);
        cli_err("logits", "out of memory");
        return 1;
    }
    memcpy(*ids, buf, len); /* little-endian host */
    free(buf);
    return 0;
}

PB_CMD(logits) {
    const char *model = NULL, *tok_path = NULL, *out_path = NULL;
    pb_kv_type kt = PB_KV_F16;
    long batch = 512, threads = 0;
    bool exact = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("logits", usage, argc, argv, &i, name, alias, val))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            printf("%s\n", usage);
            return 0;
        } else if (FLAG("--exact", NULL, NULL) != 0) {
            if (r < 0) return 2;
            exact = true;
        } else if (FLAG("--model", "-m", &v) != 0) {
            if (r < 0) return 2;
            if (!(model = cli_model_arg("logits", v))) return 1;
        } else if (FLAG("--tokens", NULL, &v) != 0) {
            if (r < 0) return 2;
            tok_path = v;
        } else if (FLAG("--output", "-o", &v) != 0) {
            if (r < 0) return 2;
            out_path = v;
        } else if (FLAG("--kv-type", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_kv("logits", v, &kt)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--batch", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int("logits", a, v, 1, 65536, &batch)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--threads", "-t", &v) != 0) {
            if (r < 0 || !cli_parse_int("logits", a, v, 0, 1024, &threads)) return r < 0 ? 2 : cli_usage_line(usage);
        } else
            return cli_usage_error("logits", usage, "unknown option '%s'", a);
#undef FLAG
    }
    if (!model || !tok_path || !out_path) return cli_usage_error("logits", usage, "-m, --tokens and -o are required");
    cli_install_cleanup_handlers();
    int32_t *ids = NULL;
    int n = 0;
    if (read_ids(tok_path, &ids, &n)) return 1;
    int rc = 1;
    pb_model *m = NULL;
    pb_kv_cache *kv = NULL;
    pb_forward_ctx *fc = NULL;
    pb_pool *pool = NULL;
    float *logits = NULL;
    pb_atomic_file af = {-1, NULL, NULL};
    bool open_out = false;
    pb_model_params mp = pb_model_default_params();
    if (exact) mp.gpu = 0; /* exact mode is the CPU's (a GPU cache refuses it) */
    pb_status s = pb_model_open(model, &mp, &m);
    if (s) {
        rc = cli_fail("logits", s, "opening the model");
        goto done;
    }
    const pb_hparams *hp = pb_model_hparams(m);
    int nb = (int)PB_MIN(batch, (long)n);
    int nth = threads > 0 ? (int)threads : pb_model_default_threads(m);
    if ((s = pb_kv_new(m, n, kt, &kv)) || (s = pb_forward_ctx_new(m, nb, &fc)) || (s = pb_pool_new(nth, &pool))) {
        rc = cli_fail("logits", s, "setting up");
        goto done;
    }
    pb_forward_set_exact(fc, exact);
    logits = malloc(sizeof(float) * (size_t)nb * (size_t)hp->n_vocab);
    if (!logits) {
        cli_err("logits", "out of memory for %d x %d logits", nb, hp->n_vocab);
        goto done;
    }
    if ((s = pb_atomic_open(out_path, &af))) {
        rc = cli_fail("logits", s, "creating the output");
        goto done;
    }
    open_out = true;
    double t0 = pb_time_ms();
    for (int i = 0; i < n; i += nb) {
        int c = PB_MIN(nb, n - i);
        if ((s = pb_forward(m, kv, fc, pool, ids + i, c, logits, true, NULL))) {
            rc = cli_fail("logits", s, "forward pass");
            goto done;
        }
        if ((s = pb_atomic_write(&af, logits, sizeof(float) * (size_t)c * (size_t)hp->n_vocab))) {
            rc = cli_fail("logits", s, "writing the output");
            goto done;
        }
    }
    if ((s = pb_atomic_commit(&af))) {
        open_out = false;
        rc = cli_fail("logits", s, "finishing the output");
        goto done;
    }
    open_out = false;
    fprintf(stderr, "logits: %d tokens x %d vocab -> %s (batch %d, %d threads, kv %s%s, %.0f ms)\n", n, hp->n_vocab,
            out_path, nb, nth, cli_kv_name(kt), exact ? ", exact" : "", pb_time_ms() - t0);
    rc = 0;
done:
    if (open_out) pb_atomic_abort(&af);
    free(logits);
    pb_pool_free(pool);
    pb_forward_ctx_free(fc);
    pb_kv_free(kv);
    pb_model_close(m);
    free(ids);
    return rc;
}
