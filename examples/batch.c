/* batch.c -- docs/API.md's "Continuous batching" as a program: four sessions of one model in one pb_batch, each
 * answering on a thread of its own, so their decode steps are shared. The lines between the doc marks are the doc's
 * code block, whose line that is only an ellipsis comment stands for the lines here that run the threads
 * (tests/example_check.sh compares them). Usage: batch MODEL.gguf "question" */
#include <pocketbrain.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct job {
    pb_session *s;
    const char *question;
    char text[2048];
    size_t len;
    pb_status st;
    pb_gen_stats stats;
} job;

static bool keep_piece(const char *piece, size_t len, void *user) {
    job *j = user;
    if (j->len + len < sizeof j->text) {
        memcpy(j->text + j->len, piece, len);
        j->len += len;
        j->text[j->len] = 0;
    }
    return true;
}

/* One thread per session: a session is used by one thread at a time; the batch is shared. */
static void *answer(void *arg) {
    job *j = arg;
    pb_gen_params gp = pb_gen_default_params();
    gp.max_tokens = 48;
    j->st = pb_session_chat(j->s, "Answer in one sentence.", j->question, &gp, keep_piece, j, &j->stats);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf \"question\"\n", argv[0]);
        return 2;
    }
    pb_model *model = NULL;
    if (pb_model_open(argv[1], NULL, &model) != PB_OK) {
        fprintf(stderr, "batch: cannot open %s: %s\n", argv[1], pb_last_error());
        return 1;
    }
    job jobs[4];
    memset(jobs, 0, sizeof jobs);
    pthread_t threads[4];
    int failed = 0;

    /* clang-format off */
    /* docs/API.md "Continuous batching" */
    pb_batch *b;
    pb_batch_new(model, 4, &b);              /* up to 4 sessions; every step buffer sized here */
    pb_session_params sp = pb_session_default_params();
    sp.batch = b;                            /* NULL (the default): the session decodes alone */
    pb_session *s[4];
    for (int i = 0; i < 4; i++)
        pb_session_new(model, &sp, &s[i]);   /* each then runs pb_session_chat on a thread of its own */
    /* clang-format on */
    for (int i = 0; i < 4; i++) {
        jobs[i].s = s[i];
        jobs[i].question = argv[2];
        if (pthread_create(&threads[i], NULL, answer, &jobs[i]) != 0) jobs[i].s = NULL;
    }
    for (int i = 0; i < 4; i++) {
        if (jobs[i].s) pthread_join(threads[i], NULL);
        if (!jobs[i].s || jobs[i].st != PB_OK) failed++;
    }
    pb_batch_stats bs;
    pb_batch_get_stats(b, &bs);
    /* clang-format off */
    for (int i = 0; i < 4; i++)
        pb_session_free(s[i]);               /* the sessions first: the batch must outlive them */
    pb_batch_free(b);
    /* end of docs/API.md "Continuous batching" */
    /* clang-format on */
    pb_model_close(model);

    printf("%s\n", jobs[0].text);
    fprintf(stderr, "[4 sessions: %d failed; %lld steps fed %lld tokens, largest step %d]\n", failed,
            (long long)bs.n_steps, (long long)bs.n_tokens, bs.max_size);
    return failed == 0 && bs.n_tokens > 0 ? 0 : 1;
}
