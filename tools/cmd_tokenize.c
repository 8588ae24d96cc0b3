/* cmd_tokenize.c -- `pocketbrain tokenize`: text to token ids with a GGUF's or a tokenizer.json's vocabulary. */
#include "cli.h"
#include "library.h"
#include "hf_vocab.h"
#include "json/json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const usage =
    "pocketbrain tokenize [--ids] [--no-bos] [--special] [--vocab MODEL.gguf|tokenizer.json] [--jsonl] TEXT | -\n"
    "  TEXT       the text to tokenize; - reads it from stdin (all bytes, no newline stripped)\n"
    "  --vocab V  vocabulary (also -m V): a GGUF model or a library name (tokenizer.* keys), or a Hugging Face\n"
    "             tokenizer.json (tokenizer_config.json beside it is read too); default: the default model\n"
    "  --ids      print one JSON array of ids instead of \"id<TAB>piece\" lines\n"
    "  --no-bos   do not prepend <bos>\n"
    "  --special  recognize control-token text such as <start_of_turn> in the input\n"
    "  --jsonl    input lines are JSON strings; print one JSON array of ids per line\n"
    "pieces are printed as stored (U+2581 for spaces) with \\n \\t \\r \\\\ and \\xNN escapes\n"
    "exit status: 0 ok, 1 unreadable vocabulary or input, 2 usage";

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    errno = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *b = realloc(buf, cap *= 2);
        if (!b) free(buf);
        buf = b;
    }
    if (buf && ferror(f)) { /* a directory (EISDIR), an I/O error */
        int e = errno;
        free(buf);
        errno = e ? e : EIO;
        return NULL;
    }
    *len = n;
    return buf;
}

static void print_piece(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\n')
            fputs("\\n", stdout);
        else if (*p == '\t')
            fputs("\\t", stdout);
        else if (*p == '\r')
            fputs("\\r", stdout);
        else if (*p == '\\')
            fputs("\\\\", stdout);
        else if (*p < 0x20 || *p == 0x7f)
            printf("\\x%02X", *p);
        else
            putchar(*p);
    }
}

static void print_ids(const int32_t *ids, int64_t n) {
    putchar('[');
    for (int64_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    puts("]");
}

/* Tokenizes text into a growing buffer. */
static pb_status tok(const pb_vocab *v, const char *text, size_t len, int flags, int32_t **ids, int64_t *cap,
                     int64_t *n) {
    pb_status st = pb_tokenize(v, text, len, flags, *ids, *cap, n);
    if (st == PB_ERR_INVALID_ARG && *n > *cap) {
        int32_t *b = realloc(*ids, (size_t)*n * sizeof *b);
        if (!b) return pb_error(PB_ERR_NOMEM, "out of memory for %lld ids", (long long)*n);
        *ids = b;
        *cap = *n;
        st = pb_tokenize(v, text, len, flags, *ids, *cap, n);
    }
    return st;
}

static int run_jsonl(const pb_vocab *v, const char *input, size_t len, int flags) {
    int32_t *ids = NULL;
    int64_t cap = 0, n = 0;
    int rc = 0;
    long line_no = 0;
    for (size_t pos = 0; pos < len;) {
        const char *line = input + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - line) : len - pos;
        pos += ll + 1;
        line_no++;
        if (ll == 0 || (ll == 1 && line[0] == '\r')) continue;
        /* a raw NUL inside the string: cJSON keeps it, its C string ends there, the rest was dropped without a word */
        const char *nul = memchr(line, 0, ll);
        if (nul) {
            cli_err("tokenize", "--jsonl line %ld contains a NUL byte (at column %zu): it is not text", line_no,
                    (size_t)(nul - line) + 1);
            rc = 1;
            break;
        }
        size_t at;
        bool trailing;
        cJSON *j = pb_json_parse_one(line, ll, &at, &trailing);
        if (trailing) { /* '"hello" junk' is refused, not tokenized as "hello" */
            cli_err("tokenize", "--jsonl line %ld: more text after the JSON string (at column %zu)", line_no, at + 1);
            rc = 1;
            break;
        }
        if (!cJSON_IsString(j)) {
            cli_err("tokenize", "--jsonl line %ld is not a JSON string", line_no);
            cJSON_Delete(j);
            rc = 1;
            break;
        }
        /* cJSON strings are NUL-terminated: a \u0000 escape would silently cut the text */
        if (pb_json_has_nul_escape(line, ll)) {
            cli_err("tokenize", "--jsonl line %ld contains \\u0000, which is not supported", line_no);
            cJSON_Delete(j);
            rc = 1;
            break;
        }
        pb_status st = tok(v, j->valuestring, strlen(j->valuestring), flags, &ids, &cap, &n);
        cJSON_Delete(j);
        if (st != PB_OK) {
            rc = cli_fail("tokenize", st, "text");
            break;
        }
        print_ids(ids, n);
    }
    free(ids);
    return rc;
}

PB_CMD(tokenize) {
    bool as_ids = false, jsonl = false;
    int flags = PB_TOK_ADD_BOS;
    const char *vocab_path = NULL, *text = NULL;
    bool ended = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("tokenize", usage, argc, argv, &i, name, alias, val))
        const int op = cli_operand(a, &ended); /* after "--" every argument, a text starting with '-' too */
        if (op < 0) continue;
        if (op) {
            if (text) return cli_usage_error("tokenize", usage, "one TEXT argument expected (quote it), got '%s'", a);
            text = a;
        } else if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            puts(usage);
            return 0;
        } else if (FLAG("--ids", NULL, NULL) != 0) {
            if (r < 0) return 2;
            as_ids = true;
        } else if (FLAG("--no-bos", NULL, NULL) != 0) {
            if (r < 0) return 2;
            flags &= ~PB_TOK_ADD_BOS;
        } else if (FLAG("--special", NULL, NULL) != 0) {
            if (r < 0) return 2;
            flags |= PB_TOK_PARSE_SPECIAL;
        } else if (FLAG("--jsonl", NULL, NULL) != 0) {
            if (r < 0) return 2;
            jsonl = true;
        } else if (FLAG("--vocab", NULL, &v) != 0 || FLAG("--model", "-m", &v) != 0) {
            if (r < 0) return 2;
            if (!(vocab_path = cli_model_arg("tokenize", v))) return 1;
        } else
            return cli_usage_error("tokenize", usage, "unknown option '%s'", a);
#undef FLAG
    }
    if (!text) return cli_usage_error("tokenize", usage, "no TEXT given (use - to read stdin)");
    if (!vocab_path) vocab_path = cli_default_model();
    if (!vocab_path)
        return cli_usage_error("tokenize", usage, "no --vocab given and no default model found (set PB_MODEL)");

    pb_vocab *v;
    pb_status st = hf_vocab_open_any(vocab_path, &v);
    if (st != PB_OK) return cli_fail("tokenize", st, "vocabulary");

    char *input = NULL;
    size_t len;
    if (!strcmp(text, "-")) {
        input = read_all(stdin, &len);
        if (!input) {
            pb_vocab_free(v);
            cli_err("tokenize", "cannot read the text on stdin: %s", strerror(errno ? errno : ENOMEM));
            return 1;
        }
        text = input;
    } else
        len = strlen(text);

    int rc = 0;
    if (jsonl)
        rc = run_jsonl(v, text, len, flags);
    else {
        int32_t *ids = NULL;
        int64_t cap = 0, n = 0;
        st = tok(v, text, len, flags, &ids, &cap, &n);
        if (st != PB_OK)
            rc = cli_fail("tokenize", st, "text");
        else if (as_ids)
            print_ids(ids, n);
        else
            for (int64_t i = 0; i < n; i++) {
                printf("%d\t", ids[i]);
                print_piece(pb_vocab_piece(v, ids[i]));
                putchar('\n');
            }
        free(ids);
    }
    free(input);
    pb_vocab_free(v);
    return rc; /* a write error on stdout: main() says it and exits 1 */
}
