/* arm_tokens.c -- the smallest token driver for bench/arm_compare.sh: opens a model, prefills N random
 * tokens in one call, then decodes M tokens one at a time; every forward pass is one call of pb_forward,
 * the function the armcount plugin brackets (sym=pb_forward). Links the core library only, so it
 * cross-builds static for ARM64 without the CLI's system libraries. Not a test; prints one line.
 * Usage: arm_tokens MODEL.gguf N_PROMPT N_GEN [THREADS] */
#include <pocketbrain.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf N_PROMPT N_GEN [THREADS]\n", argv[0]);
        return 2;
    }
    const int np = atoi(argv[2]), ng = atoi(argv[3]), nth = argc > 4 ? atoi(argv[4]) : 1;
    if (np < 1 || np > 4096 || ng < 0 || ng > 4096 || nth < 1) {
        fprintf(stderr, "arm_tokens: N_PROMPT 1..4096, N_GEN 0..4096, THREADS >= 1\n");
        return 2;
    }
    pb_model *m = NULL;
    pb_session *s = NULL;
    if (pb_model_open(argv[1], NULL, &m) != PB_OK) {
        fprintf(stderr, "arm_tokens: %s: %s\n", argv[1], pb_last_error());
        return 1;
    }
    pb_model_info info;
    pb_model_get_info(m, &info);
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = np + ng + 16;
    sp.n_threads = nth;
    sp.n_batch = np; /* the whole prompt in one forward pass, as llama-bench's ppN */
    int rc = 1;
    int32_t *ids = malloc(sizeof *ids * (size_t)(np > 0 ? np : 1));
    if (!ids || pb_session_new(m, &sp, &s) != PB_OK) {
        fprintf(stderr, "arm_tokens: session: %s\n", pb_last_error());
        goto done;
    }
    uint32_t x = 12345; /* random ids as llama-bench uses, away from the special tokens */
    for (int i = 0; i < np; i++)
        ids[i] = 1000 + (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % (info.n_vocab - 1000);
    if (pb_session_prefill(s, ids, np) != PB_OK) goto fail;
    for (int i = 0; i < ng; i++) {
        int32_t t = 1000 + (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % (info.n_vocab - 1000);
        if (pb_session_prefill(s, &t, 1) != PB_OK) goto fail;
    }
    printf("arm_tokens: %s pp%d tg%d threads %d repacked %d weight_bytes %zu\n", info.file_type, np, ng, nth,
           info.n_repacked, info.weight_bytes);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "arm_tokens: forward: %s\n", pb_last_error());
done:
    free(ids);
    pb_session_free(s);
    pb_model_close(m);
    return rc;
}
