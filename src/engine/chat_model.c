/* chat_model.c -- pb_chat_format / pb_chat_tokenize for a model: the vocabulary versions applied to the model's
 * vocabulary. In the engine room (above model and tokenizer), so the tokenizer room never calls the model room. */
#include "tokenizer/vocab.h"

static pb_status model_vocab(const char *fn, const pb_model *m, const pb_vocab **v) {
    if (!m) return pb_error(PB_ERR_INVALID_ARG, "%s: model is NULL", fn);
    *v = pb_model_vocab(m);
    return *v ? PB_OK : pb_error(PB_ERR_NOT_FOUND, "chat: the model has no vocabulary");
}

pb_status pb_chat_format(const pb_model *m, const pb_chat_msg *msgs, int n_msgs, bool add_generation_prompt, char *buf,
                         size_t cap, size_t *len_out) {
    const pb_vocab *v;
    pb_status st = model_vocab("pb_chat_format", m, &v);
    return st ? st : pb_chat_format_vocab(v, msgs, n_msgs, add_generation_prompt, buf, cap, len_out);
}

pb_status pb_chat_tokenize(const pb_model *m, const pb_chat_msg *msgs, int n_msgs, bool add_generation_prompt,
                           int32_t *ids, int64_t cap, int64_t *n_out) {
    const pb_vocab *v;
    pb_status st = model_vocab("pb_chat_tokenize", m, &v);
    return st ? st : pb_chat_tokenize_vocab(v, msgs, n_msgs, add_generation_prompt, ids, cap, n_out);
}

pb_status pb_chat_format_opts(const pb_model *m, const pb_chat_msg *msgs, int n_msgs, const pb_chat_opts *opts,
                              char *buf, size_t cap, size_t *len_out) {
    const pb_vocab *v;
    pb_status st = model_vocab("pb_chat_format_opts", m, &v);
    return st ? st : pb_chat_format_vocab_opts("pb_chat_format_opts", v, msgs, n_msgs, opts, buf, cap, len_out);
}

pb_status pb_chat_tokenize_opts(const pb_model *m, const pb_chat_msg *msgs, int n_msgs, const pb_chat_opts *opts,
                                int32_t *ids, int64_t cap, int64_t *n_out) {
    const pb_vocab *v;
    pb_status st = model_vocab("pb_chat_tokenize_opts", m, &v);
    return st ? st : pb_chat_tokenize_vocab_opts("pb_chat_tokenize_opts", v, msgs, n_msgs, opts, ids, cap, n_out);
}
