/* store_tok.c -- token counting with a model's tokenizer (pb_tokenize) for chunk sizes and prompt budgets. */
#include "store/store.h"

#include <stdlib.h>

void pb_store_counter_init(pb_store_counter *c, const pb_vocab *v) {
    c->vocab = v;
    c->ids = NULL;
    c->cap = 0;
}

void pb_store_counter_deinit(pb_store_counter *c) {
    free(c->ids);
    c->ids = NULL;
    c->cap = 0;
}

int64_t pb_store_counter_fn(void *user, const char *text, size_t len) {
    pb_store_counter *c = user;
    if (!c->vocab) return pb_store_estimate_tokens(text, len);
    for (int attempt = 0; attempt < 2; attempt++) {
        int64_t n = 0;
        pb_status s = pb_tokenize(c->vocab, text, len, 0, c->ids, c->cap, &n);
        if (s == PB_OK) return n;
        if (s != PB_ERR_INVALID_ARG || n <= c->cap) break;
        int64_t nc = n + n / 2 + 64;
        int32_t *ni = realloc(c->ids, (size_t)nc * sizeof *ni);
        if (!ni) break;
        c->ids = ni;
        c->cap = nc;
    }
    /* the tokenizer refused the text: the estimate keeps chunking going (sizes are advisory) */
    return pb_store_estimate_tokens(text, len);
}
