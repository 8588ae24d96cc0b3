/* convert_vocab.c -- tokenizer.* keys for converted (tools/hf_vocab) and synthetic Gemma vocabularies,
 * with llama.cpp's padding rule and key set (tokenizer.md §1). Holds strings only; no tokenizing. */
#include "convert_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_BYTE = 6 }; /* llama_token_type values */

void cv_vocab_free(cv_vocab *v) { hf_vocab_free(v); }
uint32_t cv_vocab_size(const cv_vocab *v) { return v->n; }
pb_status cv_vocab_pad(cv_vocab *v, uint32_t n) { return hf_vocab_pad(v, n); }

void cv_vocab_truncate(cv_vocab *v, uint32_t n) {
    for (uint32_t i = n; i < v->n; i++) free(v->tokens[i]);
    if (n < v->n) v->n = n;
    int32_t *ids[] = {&v->bos, &v->eos, &v->unk, &v->pad};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (*ids[i] >= (int32_t)v->n) *ids[i] = -1;
}

pb_status cv_vocab_write(const cv_vocab *v, pb_gguf_writer *w, const cv_hparams *hp) {
    pb_status s = hf_vocab_write(v, w);
    /* Gemma 1's converter also names <end_of_turn> as EOT (id 107). */
    if (s == PB_OK && hp->arch == CV_GEMMA && v->n > 107 && strcmp(v->tokens[107], "<end_of_turn>") == 0)
        s = pb_gguf_set_u32(w, "tokenizer.ggml.eot_token_id", 107);
    return s;
}

/* Appends one token; v has room for it (allocated up front). */
static pb_status push(cv_vocab *v, const char *text, size_t len, float score, int32_t type) {
    char *t = malloc(len + 1);
    if (!t) return pb_error(PB_ERR_NOMEM, "vocabulary: out of memory");
    memcpy(t, text, len);
    t[len] = 0;
    v->tokens[v->n] = t;
    v->scores[v->n] = score;
    v->types[v->n] = type;
    v->n++;
    return PB_OK;
}

/* ---- synthetic ------------------------------------------------------------------------------- */

/* Gemma 2's template (google/gemma-2-2b-it tokenizer_config.json); Gemma 3's folds a system message into
 * the first user turn. */
static const char *const tmpl_gemma2 =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";
static const char *const tmpl_gemma3 =
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] "
    "+ '\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = \"\" -%}"
    "{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}{{ raise_exception(\"Conversation roles "
    "must alternate user/assistant/user/assistant/...\") }}{%- endif -%}{%- if (message['role'] == 'assistant') "
    "-%}{%- set role = \"model\" -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}"
    "{{'<start_of_turn>model\n'}}{%- endif -%}";

pb_status cv_vocab_synthetic(const cv_hparams *hp, cv_vocab **out) {
    *out = NULL;
    const uint32_t n = hp->n_vocab;
    const uint32_t sot = hp->arch == CV_GEMMA3 ? 105 : 106; /* <start_of_turn>; <end_of_turn> follows */
    if (n < sot + 2 + 256 + 95)
        return pb_error(PB_ERR_INVALID_ARG, "synthetic vocabulary needs at least %u tokens, got %u", sot + 2 + 256 + 95,
                        n);
    cv_vocab *v = calloc(1, sizeof *v);
    if (!v) return pb_error(PB_ERR_NOMEM, "vocabulary: out of memory");
    v->tokens = calloc(n, sizeof *v->tokens);
    v->scores = calloc(n, sizeof *v->scores);
    v->types = calloc(n, sizeof *v->types);
    pb_status s = v->tokens && v->scores && v->types ? PB_OK : pb_error(PB_ERR_NOMEM, "vocabulary: out of memory");
    char buf[64];
    static const char *const first[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<2mass>", "[@BOS@]"};
    uint32_t n_first = hp->arch == CV_GEMMA3 ? 5 : 7;
    for (uint32_t i = 0; i < n_first && s == PB_OK; i++) s = push(v, first[i], strlen(first[i]), -1000.0f, TT_CONTROL);
    for (uint32_t u = 0; v->n < sot && s == PB_OK; u++) {
        int len = snprintf(buf, sizeof buf, "<unused%u>", u);
        s = push(v, buf, (size_t)len, -1000.0f, TT_CONTROL);
    }
    if (s == PB_OK) s = push(v, "<start_of_turn>", 15, -1000.0f, TT_CONTROL);
    if (s == PB_OK) s = push(v, "<end_of_turn>", 13, -1000.0f, TT_CONTROL);
    for (int b = 0; b < 256 && s == PB_OK; b++) {
        int len = snprintf(buf, sizeof buf, "<0x%02X>", b);
        s = push(v, buf, (size_t)len, 0.0f, TT_BYTE);
    }
    /* Normal pieces, most likely first: the SentencePiece space mark, printable ASCII, then letter strings
     * of growing length with and without the space mark, so text always merges into something. */
    float score = -1.0f;
    if (s == PB_OK) s = push(v, "\xe2\x96\x81", 3, score--, TT_NORMAL);
    for (int ch = 0x21; ch < 0x7f && s == PB_OK; ch++) {
        buf[0] = (char)ch;
        s = push(v, buf, 1, score--, TT_NORMAL);
    }
    for (int len = 1; s == PB_OK && v->n < n && len <= 6; len++) {
        long combos = 1;
        for (int i = 0; i < len; i++) combos *= 26;
        for (long k = 0; k < combos && s == PB_OK && v->n < n; k++) {
            char piece[16];
            long x = k;
            for (int i = len - 1; i >= 0; i--, x /= 26) piece[i] = (char)('a' + x % 26);
            memcpy(buf, "\xe2\x96\x81", 3);
            memcpy(buf + 3, piece, (size_t)len);
            s = push(v, buf, (size_t)len + 3, score--, TT_NORMAL);
            if (s == PB_OK && len > 1 && v->n < n) s = push(v, piece, (size_t)len, score--, TT_NORMAL);
        }
    }
    v->bos = 2;
    v->eos = 1;
    v->unk = 3;
    v->pad = 0;
    v->add_bos = true;
    v->add_eos = false;
    v->add_space_prefix = false;
    if (s == PB_OK) {
        v->chat_template = pb_strdup(hp->arch == CV_GEMMA3 ? tmpl_gemma3 : tmpl_gemma2);
        if (!v->chat_template) s = PB_ERR_NOMEM;
    }
    if (s == PB_OK && v->n != n) s = pb_error(PB_ERR_INTERNAL, "synthetic vocabulary: %u of %u tokens", v->n, n);
    if (s != PB_OK) {
        cv_vocab_free(v);
        return s;
    }
    *out = v;
    return PB_OK;
}

/* ---- from Hugging Face files ----------------------------------------------------------------- */

pb_status cv_vocab_load(const char *dir, const cv_hparams *hp, cv_vocab **out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return cv_vocab_load_file(path, hp, out);
}

pb_status cv_vocab_load_file(const char *path, const cv_hparams *hp, cv_vocab **out) {
    pb_status s = hf_vocab_load(path, NULL, out);
    if (s != PB_OK) {
        if (s != PB_ERR_NOMEM && !strstr(pb_last_error(), "tokenizer") && !strstr(pb_last_error(), path))
            pb_error_prefix(s, "%s: ", path);
        return s;
    }
    /* llama.cpp's converter stores USER_DEFINED pieces with every U+2581 turned into a plain space
     * (tokenizer.md §1 step 4): Gemma's whitespace-run tokens hold real spaces in GGUF files. */
    cv_vocab *v = *out;
    if (hp->arch == CV_GEMMA4) v->bpe_merges = true; /* llama.cpp's "gemma4" tokenizer: BPE with merges */
    for (uint32_t i = 0; i < v->n; i++) {
        if (v->types[i] != TT_USER_DEFINED) continue;
        char *src = v->tokens[i], *dst = v->tokens[i];
        while (*src) {
            if ((unsigned char)src[0] == 0xE2 && (unsigned char)src[1] == 0x96 && (unsigned char)src[2] == 0x81) {
                *dst++ = ' ';
                src += 3;
            } else {
                *dst++ = *src++;
            }
        }
        *dst = 0;
    }
    return PB_OK;
}
