/* convert_vocab.h -- the tokenizer.* part of a converted or synthetic Gemma GGUF: loads a Hugging Face
 * tokenizer (through tools/hf_vocab) or builds a synthetic SentencePiece-style vocabulary, pads it as
 * llama.cpp's converter does, and writes the keys. */
#ifndef PB_CONVERT_VOCAB_H
#define PB_CONVERT_VOCAB_H

#include "convert_arch.h"
#include "hf_vocab.h"

/* The token arrays and special ids, as hf_vocab holds them (hf_vocab_free-compatible allocation). */
typedef hf_vocab cv_vocab;

/* Loads tokenizer.json + tokenizer_config.json from dir (hf_vocab). PB_ERR_NOT_FOUND / PB_ERR_FORMAT with
 * the file name when they are missing or malformed. */
pb_status cv_vocab_load(const char *dir, const cv_hparams *hp, cv_vocab **out);
/* The same from a tokenizer.json named by its path (any file name; tokenizer_config.json beside it). */
pb_status cv_vocab_load_file(const char *tokenizer_json, const cv_hparams *hp, cv_vocab **out);

/* A synthetic vocabulary of exactly n_vocab tokens for hp's arch: Gemma's special tokens at their real
 * ids (pad 0, eos 1, bos 2, unk 3, <start_of_turn>/<end_of_turn> at 106/107, or 105/106 for gemma3),
 * the 256 byte tokens, printable ASCII and generated letter pieces; the Gemma chat template. */
pb_status cv_vocab_synthetic(const cv_hparams *hp, cv_vocab **out);

uint32_t cv_vocab_size(const cv_vocab *v);
/* Appends "[PAD<i>]" tokens (score -1000, type UNUSED) up to n (llama.cpp: vocab_size from config.json
 * beyond the tokenizer's pieces). No-op when the vocabulary already has n or more tokens. */
pb_status cv_vocab_pad(cv_vocab *v, uint32_t n);
/* Drops tokens with ids >= n (llama.cpp's converter ignores tokenizer entries beyond vocab_size, e.g.
 * Gemma 3's <image_soft_token> 262144 in a 262144-row model). Special ids beyond n are unset. */
void cv_vocab_truncate(cv_vocab *v, uint32_t n);
/* Writes tokenizer.ggml.* and tokenizer.chat_template (hf_vocab_write), plus Gemma 1's eot_token_id. */
pb_status cv_vocab_write(const cv_vocab *v, pb_gguf_writer *w, const cv_hparams *hp);
void cv_vocab_free(cv_vocab *v);

#endif
