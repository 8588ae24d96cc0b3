/* api_tour.c -- docs/API.md's "Follow one token" as a program: admission, open, two chat turns, save; then the
 * saved session is loaded back to show what the snippet promised. The lines between the doc marks are the doc's
 * code block (tests/example_check.sh compares them, so the doc cannot drift from code that compiles and runs).
 * Usage: api_tour MODEL.gguf [question]   (the question is ignored: the snippet asks its own; writes chat.pbs) */
#include <pocketbrain.h>

#include <stdio.h>
#include <string.h>

typedef struct answer {
    size_t bytes;
    int pieces;
} answer;

/* Streams each piece (whole UTF-8 characters) to stdout; returning false would stop the answer. */
static bool on_piece(const char *piece, size_t len, void *user) {
    answer *a = user;
    a->bytes += len;
    a->pieces++;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}

static int fail(const char *what) {
    fprintf(stderr, "api_tour: %s: %s\n", what, pb_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [question]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    answer ans = {0, 0};
    void *user = &ans;
    pb_gen_stats stats;

    /* clang-format off */
    /* docs/API.md "Follow one token" */
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = 0;                                         /* the default: min(the model's, 4096) */
    pb_session_admit(path, &sp, 0, /*fit=*/true, NULL);   /* memory check, may lower n_ctx / KV type */
    pb_model *m;   pb_model_open(path, NULL, &m);         /* GGUF -> hparams -> weight views (mmap) */
    pb_session *s; pb_session_new(m, &sp, &s);            /* KV cache + scratch, sized once */
    pb_gen_params gp = pb_gen_default_params();           /* "balanced" preset */
    gp.max_tokens = 256;                                  /* 0 (the default): until a stop or a full context */
    pb_session_chat(s, "Be brief.", "What is a harbor?", &gp, on_piece, user, &stats);
    pb_session_chat(s, NULL, "And a lighthouse?", &gp, on_piece, user, &stats); /* only this turn is prefilled */
    pb_session_save(s, "chat.pbs");                       /* resume later with pb_session_load */
    pb_session_free(s); pb_model_close(m);
    /* end of docs/API.md "Follow one token" */
    /* clang-format on */
    printf("\n");

    /* What the snippet promised, checked: the second turn prefilled only itself, and chat.pbs resumes both. */
    pb_model *m2 = NULL;
    pb_session *s2 = NULL;
    if (pb_model_open(path, NULL, &m2) != PB_OK) return fail("open");
    if (pb_session_new(m2, &sp, &s2) != PB_OK || pb_session_load(s2, "chat.pbs") != PB_OK) {
        pb_model_close(m2);
        return fail("load chat.pbs");
    }
    int64_t n_past = pb_session_n_past(s2);
    int turns = pb_session_n_turns(s2);
    pb_session_free(s2);
    pb_model_close(m2);
    fprintf(stderr,
            "[%d pieces, %zu bytes; 2nd turn: %lld prompt tokens, %lld generated; chat.pbs: %d turns, %lld "
            "tokens]\n",
            ans.pieces, ans.bytes, (long long)stats.n_prompt, (long long)stats.n_generated, turns, (long long)n_past);
    if (turns != 2 || ans.pieces == 0 || stats.n_prompt <= 0 || stats.n_prompt >= n_past - stats.n_generated) {
        fprintf(stderr, "api_tour: not what docs/API.md says\n");
        return 1;
    }
    return 0;
}
