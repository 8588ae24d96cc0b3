/* fuzz_tokenizer.c -- libFuzzer target: encode arbitrary bytes, decode, stream, chat-format; round trips must hold.
 * corpus: tests/data/tokenizer_fuzz/ */
#include "gguf/gguf.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define U   "\xE2\x96\x81"
#define U10 U U U U U U U U U U

/* A small Gemma-like vocabulary built once: specials, user-defined whitespace/HTML pieces, 256 byte tokens,
 * ASCII letters and a few merges with competing scores. */
static pb_vocab *vocab(void) {
    static pb_vocab *v;
    if (v) return v;
    static const char *const fixed[] = {"<pad>",  "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "\n\n",
                                        "\n\n\n", "<h1>",  "<h1>x", "\t\t"};
    static const char *const merged[] = {
        U,       U U,   U U U, "th",  "he",       "the",
        U "the", "in",  "ing", "an",  "and",      "ab",
        "bc",    "abc", "12",  "123", "\xC3\xA9", "\xE4\xB8\x96",
        "<s",    "<st", "ar",  "tar", "start",    U10 U10 U10 U10 U10 U10 U10 U10 U10 U10};
    enum { NF = sizeof fixed / sizeof fixed[0], NM = sizeof merged / sizeof merged[0], NA = 95 };
    enum { N = NF + 256 + NA + NM };
    static char bytes[256][8], ascii[NA][2];
    const char *tok[N];
    float score[N];
    int32_t type[N];
    int k = 0;
    for (int i = 0; i < NF; i++, k++) tok[k] = fixed[i], score[k] = 0, type[k] = i < 4 ? 3 : i < 6 ? 3 : 4;
    for (int b = 0; b < 256; b++, k++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tok[k] = bytes[b], score[k] = 0, type[k] = 6;
    }
    for (int i = 0; i < NA; i++, k++) {
        ascii[i][0] = (char)(i == 0 ? '\n' : 32 + i); /* '\n' and '!'..'~' (space is U+2581) */
        tok[k] = ascii[i], score[k] = -100, type[k] = 1;
    }
    for (int i = 0; i < NM; i++, k++) tok[k] = merged[i], score[k] = -(float)((i * 7) % NM), type[k] = 1;
    pb_gguf_writer *w = pb_gguf_writer_new();
    pb_gguf_set_str(w, "general.architecture", "gemma2");
    pb_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    pb_gguf_set_arr_str(w, "tokenizer.ggml.tokens", tok, NULL, N);
    pb_gguf_set_arr(w, "tokenizer.ggml.scores", PB_GGUF_FLOAT32, score, N);
    pb_gguf_set_arr(w, "tokenizer.ggml.token_type", PB_GGUF_INT32, type, N);
    pb_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
    pb_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 1);
    void *mem = NULL;
    size_t len = 0;
    pb_gguf *g = NULL;
    if (pb_gguf_write_memory(w, &mem, &len) != PB_OK || pb_gguf_open_memory(mem, len, &g) != PB_OK ||
        pb_vocab_from_gguf(g, &v) != PB_OK)
        abort();
    pb_gguf_close(g);
    free(mem);
    pb_gguf_writer_free(w);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pb_vocab *v = vocab();
    if (size == 0) return 0;
    int flags = data[0] & 3; /* first byte picks ADD_BOS / PARSE_SPECIAL */
    const char *text = (const char *)data + 1;
    size_t n = size - 1;

    int64_t need = 0;
    pb_status st = pb_tokenize(v, text, n, flags, NULL, 0, &need);
    if (st != PB_OK && st != PB_ERR_INVALID_ARG) abort();
    int32_t *ids = malloc((size_t)(need ? need : 1) * sizeof *ids);
    int64_t got = 0;
    if (!ids || pb_tokenize(v, text, n, flags, ids, need, &got) != PB_OK || got != need) abort();
    for (int64_t i = 0; i < got; i++)
        if (ids[i] < 0 || ids[i] >= pb_vocab_size(v)) abort();

    /* decode(encode(x)) == x byte-exactly, for any bytes without a literal U+2581 (which decodes to a space) */
    int64_t skip = (flags & PB_TOK_ADD_BOS) && got > 0 ? 1 : 0;
    size_t cap = 4 * n + 64, len = 0;
    char *buf = malloc(cap);
    if (!buf || pb_detokenize(v, ids + skip, got - skip, true, buf, cap, &len) != PB_OK) abort();
    bool has_u2581 = memmem(text, n, U, 3) != NULL;
    if (!has_u2581 && (len != n || memcmp(buf, text, n) != 0)) abort();

    /* streaming: valid UTF-8 in, the same bytes out; always valid UTF-8 out, nothing lost */
    pb_detok_stream *s;
    if (pb_detok_stream_new(v, &s) != PB_OK) abort();
    char *cat = malloc(3 * (len + 4) + 64);
    size_t cn = 0;
    for (int64_t i = skip; i < got; i++) {
        const char *p;
        size_t k;
        if (pb_detok_stream_push(s, ids[i], &p, &k) != PB_OK) abort();
        memcpy(cat + cn, p, k);
        cn += k;
    }
    const char *p;
    size_t k;
    if (pb_detok_stream_flush(s, &p, &k) != PB_OK) abort();
    memcpy(cat + cn, p, k);
    cn += k;
    if (!pb_utf8_valid((const uint8_t *)cat, cn)) abort();
    if (!(flags & PB_TOK_PARSE_SPECIAL) && !has_u2581 && pb_utf8_valid(data + 1, n) &&
        (cn != n || memcmp(cat, text, n)))
        abort();
    pb_detok_stream_free(s);

    /* chat: the input as a user message (NUL-terminated copy) */
    char *msg = malloc(n + 1);
    memcpy(msg, text, n);
    msg[n] = 0;
    pb_chat_msg m[] = {{"system", "sys"}, {"user", msg}};
    size_t clen;
    st = pb_chat_format_vocab(v, m, 2, true, NULL, 0, &clen);
    char *cbuf = malloc(clen + 1);
    if (st != PB_ERR_INVALID_ARG || pb_chat_format_vocab(v, m, 2, true, cbuf, clen + 1, &clen) != PB_OK) abort();
    int64_t nc = 0;
    st = pb_chat_tokenize_vocab(v, m, 2, true, NULL, 0, &nc);
    if (st != PB_ERR_INVALID_ARG || nc < 5) abort();

    free(cbuf);
    free(msg);
    free(cat);
    free(buf);
    free(ids);
    return 0;
}
