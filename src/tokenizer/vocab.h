/* vocab.h -- internal API of the tokenizer room: the SentencePiece vocabulary built from GGUF tokenizer.* keys,
 * its token types, end-of-generation ids and the chat formatter that works from a vocabulary alone. */
#ifndef PB_TOKENIZER_VOCAB_H
#define PB_TOKENIZER_VOCAB_H

#include "base/base.h"
#include "gguf/gguf.h"

/* tokenizer.ggml.token_type values (as llama.cpp writes them). */
typedef enum pb_tok_type {
    PB_TOK_UNDEFINED = 0,
    PB_TOK_NORMAL = 1,       /* ordinary piece, U+2581 = space                              */
    PB_TOK_UNKNOWN = 2,      /* <unk>                                                        */
    PB_TOK_CONTROL = 3,      /* <bos>, <start_of_turn>...: matched only with PARSE_SPECIAL   */
    PB_TOK_USER_DEFINED = 4, /* always split out of the raw text first, printed verbatim     */
    PB_TOK_UNUSED = 5,
    PB_TOK_BYTE = 6, /* <0xNN> byte-fallback piece                                  */
} pb_tok_type;

/* PB_CHAT_GEMMA4: <|turn>role\n...<turn|>\n turns, system messages as their own turn. */
typedef enum pb_chat_kind { PB_CHAT_NONE = 0, PB_CHAT_GEMMA = 1, PB_CHAT_GEMMA4 = 2 } pb_chat_kind;

/* Builds a vocabulary from g's tokenizer.* keys (tokenizer.ggml.model "llama", i.e. SentencePiece merging by
 * score, or "gemma4": BPE merging by the rank of tokenizer.ggml.merges).
 * Everything is copied: g may be closed afterwards. Errors: PB_ERR_NOT_FOUND (no tokenizer.ggml.tokens),
 * PB_ERR_UNSUPPORTED (another tokenizer model), PB_ERR_FORMAT (array types/lengths disagree),
 * PB_ERR_NOMEM. One text arena, a few flat arrays and two open-addressing hash tables: no per-token malloc. */
pb_status pb_vocab_from_gguf(const pb_gguf *g, pb_vocab **out);

/* Token type (pb_tok_type) and SentencePiece score of id; id must be in range (PB_ASSERT). */
pb_tok_type pb_vocab_type(const pb_vocab *v, int32_t id);
float pb_vocab_score(const pb_vocab *v, int32_t id);
/* Byte length of the stored piece text (the text itself: pb_vocab_piece). */
size_t pb_vocab_piece_len(const pb_vocab *v, int32_t id);
int32_t pb_vocab_unk(const pb_vocab *v); /* -1 when none */
int32_t pb_vocab_pad(const pb_vocab *v); /* -1 when none */
bool pb_vocab_add_bos(const pb_vocab *v);
bool pb_vocab_add_space_prefix(const pb_vocab *v);
/* Id of the byte-fallback token for byte b (<0xNN>, else the one-byte piece), or -1. */
int32_t pb_vocab_byte_token(const pb_vocab *v, uint8_t b);
/* True for ids that end generation: eos, eot and every token spelled <end_of_turn>/<eos>/<|eot_id|>/... */
bool pb_vocab_is_eog(const pb_vocab *v, int32_t id);
/* tokenizer.chat_template text ("" when absent) and the chat format chosen from it. */
const char *pb_vocab_chat_template(const pb_vocab *v);
pb_chat_kind pb_vocab_chat_kind(const pb_vocab *v);

/* Special-token matcher used by the encoder: the longest USER_DEFINED (always) or CONTROL/UNKNOWN (when
 * parse_special) token that starts at text[0..len). Returns its id and *mlen, or -1. */
int32_t pb_vocab_match_special(const pb_vocab *v, const char *text, size_t len, bool parse_special, size_t *mlen);
/* Quick filter: false when no special token can start with byte c. */
bool pb_vocab_special_may_start(const pb_vocab *v, uint8_t c, bool parse_special);

/* Formats a chat (see pb_chat_format in pocketbrain.h) from the vocabulary: Gemma turn markers
 *   <start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n{...}<end_of_turn>\n
 * Contents are trimmed of ASCII whitespace; "assistant" and "model" are the model role; system messages are
 * folded into the next user turn (system + "\n\n" + user). No <bos> is written: tokenize the result with
 * PB_TOK_ADD_BOS | PB_TOK_PARSE_SPECIAL. PB_ERR_INVALID_ARG for an unknown role or NULL content,
 * PB_ERR_UNSUPPORTED when the vocabulary has no Gemma turn tokens, PB_ERR_INVALID_ARG with *len_out = bytes
 * needed when buf[cap] is too small. */
pb_status pb_chat_format_vocab(const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs, bool add_generation_prompt,
                               char *buf, size_t cap, size_t *len_out);
/* The same conversation as ids (see pb_chat_tokenize): <bos> when add_bos_token, markers as their control ids,
 * text between markers tokenized without PB_TOK_PARSE_SPECIAL. *n_out / cap as in pb_tokenize. */
pb_status pb_chat_tokenize_vocab(const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs, bool add_generation_prompt,
                                 int32_t *ids, int64_t cap, int64_t *n_out);
/* The same with pb_chat_opts (thinking system turn). fn names the public call in argument errors
 * ("pb_chat_format_opts: msgs is NULL with n_msgs 2"). */
pb_status pb_chat_format_vocab_opts(const char *fn, const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs,
                                    const pb_chat_opts *opts, char *buf, size_t cap, size_t *len_out);
pb_status pb_chat_tokenize_vocab_opts(const char *fn, const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs,
                                      const pb_chat_opts *opts, int32_t *ids, int64_t cap, int64_t *n_out);
/* True when id is one of the chat template's markers (PB_TOK_CHAT_TEXT keeps their text plain). */
bool pb_vocab_is_chat_marker(const pb_vocab *v, int32_t id);

#endif
