/* hf_vocab.h -- Hugging Face tokenizer.json (+ tokenizer_config.json) -> the GGUF tokenizer.* keys of a Gemma
 * (SentencePiece "llama") vocabulary, through cJSON. Used by `tokenize --vocab tokenizer.json` and `convert`. */
#ifndef PB_HF_VOCAB_H
#define PB_HF_VOCAB_H

#include "gguf/gguf.h"
#include "pocketbrain.h"

/* The arrays as tokenizer.ggml.* stores them. Token types are pb_tok_type values (tokenizer/vocab.h). */
typedef struct hf_vocab {
    uint32_t n;
    char **tokens; /* n NUL-terminated strings (owned) */
    float *scores;
    int32_t *types;
    int32_t bos, eos, unk, pad; /* -1 when the tokenizer names none */
    bool add_bos, add_eos, add_space_prefix;
    char *chat_template; /* NULL when tokenizer_config.json has none */
    /* BPE merges "left right" in rank order (owned). Written (tokenizer.ggml.model "gemma4") when bpe_merges is
     * set: a Gemma 4 layout (the <|turn> control token) or a caller's choice (convert of a gemma4 model). */
    char **merges;
    uint32_t n_merges;
    bool bpe_merges;
} hf_vocab;

/* Loads tokenizer_json (a BPE model with byte_fallback, as GemmaTokenizerFast writes it) and tokenizer_config
 * (NULL: "tokenizer_config.json" in the same folder, optional). Rules (docs/tokenizer-notes.md):
 *  - ids 0..n-1 from model.vocab and added_tokens (n = largest id + 1; holes become "[PAD<i>]", UNUSED);
 *  - scores encode HF merge priority: the piece made by merge rank r scores -r; pieces no merge makes score
 *    -(n_merges + id). SentencePiece BPE by score then gives HF's merge order;
 *  - types: <0xNN> BYTE; added tokens CONTROL when special or when they look special (<pad>, <mask>, <2mass>,
 *    [@BOS@], <|...|>, <unused...>), else USER_DEFINED (text kept as in tokenizer.json, U+2581 included);
 *    the unk token UNKNOWN unless it is an added token; the rest NORMAL;
 *  - bos/eos/unk/pad from tokenizer_config (else <bos>/<eos>/<unk>/<pad>), add_bos/add_eos from it (default
 *    true/false), add_space_prefix from a Prepend("▁") normalizer (false for Gemma), chat_template from it.
 * Errors: PB_ERR_IO / PB_ERR_NOT_FOUND (file), PB_ERR_FORMAT (JSON or structure, the message names the field),
 * PB_ERR_UNSUPPORTED (a model type other than BPE). */
pb_status hf_vocab_load(const char *tokenizer_json, const char *tokenizer_config, hf_vocab **out);
void hf_vocab_free(hf_vocab *v);

/* Appends "[PAD<i>]" tokens (score -1000, UNUSED) up to n tokens; no-op when v already has n or more. */
pb_status hf_vocab_pad(hf_vocab *v, uint32_t n);

/* Writes tokenizer.ggml.{model,pre,tokens,scores,token_type,bos/eos/unknown/padding_token_id,add_bos_token,
 * add_eos_token,add_space_prefix} and tokenizer.chat_template (when present) into w. */
pb_status hf_vocab_write(const hf_vocab *v, pb_gguf_writer *w);

/* hv written to an in-memory GGUF and read back with pb_vocab_from_gguf (the same path as a model file). */
pb_status hf_vocab_to_vocab(const hf_vocab *hv, pb_vocab **out);
/* A tokenizer vocabulary straight from tokenizer.json: load, write to an in-memory GGUF, pb_vocab_from_gguf. */
pb_status hf_vocab_open(const char *tokenizer_json, const char *tokenizer_config, pb_vocab **out);
/* path ending in ".json": hf_vocab_open (tokenizer_config.json beside it); anything else: a GGUF (pb_vocab_open). */
pb_status hf_vocab_open_any(const char *path, pb_vocab **out);

#endif
