/* simple.c -- the smallest complete use of libpocketbrain: open a model, create a session, ask one
 * question and stream the answer. Uses only the public header. Usage: simple MODEL.gguf "question" */
#include <pocketbrain.h>

#include <stdio.h>

/* Called with each piece of the answer (whole UTF-8 characters). Return false to stop early. */
static bool print_piece(const char *piece, size_t len, void *user) {
    (void)user;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf \"question\"\n", argv[0]);
        return 2;
    }
    const char *model_path = argv[1], *question = argv[2];

    /* 1. Check that a session fits in memory (weights + KV cache + scratch). */
    pb_session_params sp = pb_session_default_params(); /* n_ctx: min(model's, 4096) */
    pb_mem_estimate est;
    if (pb_session_admit(model_path, &sp, 0, true, &est) != PB_OK) {
        fprintf(stderr, "does not fit: %s\n", pb_last_error());
        return 1;
    }

    /* 2. Open the model (weights are memory-mapped) and a session (KV cache sized once). */
    pb_model *model = NULL;
    pb_status st = pb_model_open(model_path, NULL, &model);
    if (st != PB_OK) {
        fprintf(stderr, "cannot open %s: %s\n", model_path, pb_last_error());
        return 1;
    }
    pb_session *session = NULL;
    st = pb_session_new(model, &sp, &session);
    if (st != PB_OK) {
        fprintf(stderr, "cannot create a session: %s\n", pb_last_error());
        pb_model_close(model);
        return 1;
    }

    /* 3. One chat turn: the model's turn markers are added, the answer is streamed. */
    pb_gen_params gp = pb_gen_default_params(); /* the "balanced" preset */
    gp.max_tokens = 64;
    pb_gen_stats stats;
    st = pb_session_chat(session, "Answer in one or two sentences.", question, &gp, print_piece, NULL, &stats);
    printf("\n");
    if (st != PB_OK)
        fprintf(stderr, "generation failed: %s\n", pb_last_error());
    else
        fprintf(stderr, "[%lld prompt tokens, %lld generated, stop: %s]\n", (long long)stats.n_prompt,
                (long long)stats.n_generated, pb_stop_reason_name(stats.stop_reason));

    pb_session_free(session);
    pb_model_close(model);
    return st == PB_OK ? 0 : 1;
}
