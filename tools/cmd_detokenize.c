/* cmd_detokenize.c -- `pocketbrain detokenize`: token ids (arguments or stdin) back to text, byte-exact. */
#include "cli.h"
#include "cli_common.h"
#include "library.h"
#include "hf_vocab.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const usage =
    "pocketbrain detokenize [--vocab MODEL.gguf|tokenizer.json] [--special] IDS... | -\n"
    "  IDS        token ids as arguments; - reads them from stdin (separated by spaces, commas, newlines;\n"
    "             a JSON array such as the output of `tokenize --ids` works)\n"
    "  --vocab V  vocabulary (also -m V): a GGUF model or library name, or a Hugging Face tokenizer.json;\n"
    "             default: the default model\n"
    "  --special  render control tokens (<bos>, <start_of_turn>, ...); by default they print nothing\n"
    "the text is written as raw bytes, without a trailing newline\n"
    "exit status: 0 ok, 1 unreadable vocabulary or an id outside it, 2 usage";

typedef struct idbuf {
    int32_t *ids;
    int64_t n, cap;
    char last; /* the last thing parse_ids read: 0 nothing, 'i' an id, ',' '[' ']' */
} idbuf;

static bool push(idbuf *b, long v) {
    if (b->n == b->cap) {
        int64_t c = b->cap ? 2 * b->cap : 256;
        int32_t *p = realloc(b->ids, (size_t)c * sizeof *p);
        if (!p) return false;
        b->ids = p;
        b->cap = c;
    }
    b->ids[b->n++] = (int32_t)v;
    return true;
}

/* Parses ids from s into b: plain decimal digits, separated by whitespace and at most one comma, in [ ] or not (the
 * output of `tokenize --ids`, also split over arguments: "[4521," "2134]"). strtol took "+5", "-0" and 99999999999
 * wrapped to an int32 as ids, and "1,,2" passed as "1,2" (an id missing from a script's list). */
static bool parse_ids(const char *s, idbuf *b) {
    while (*s) {
        const char c = *s;
        if (isspace((unsigned char)c) || c == '[') {
            if (c == '[') b->last = '[';
            s++;
            continue;
        }
        if ((c == ',' && b->last != 'i') || (c == ']' && b->last == ',')) {
            cli_err("detokenize", "an empty item in the id list at '%.20s'", s);
            return false;
        }
        if (c == ',' || c == ']') {
            b->last = c;
            s++;
            continue;
        }
        int32_t v;
        const char *end;
        if (!cli_parse_id(s, &v, &end) || (*end && !isspace((unsigned char)*end) && *end != ',' && *end != ']')) {
            cli_err("detokenize", "'%.20s' is not a token id (an id is plain decimal digits, at most %d)", s,
                    INT32_MAX);
            return false;
        }
        if (!push(b, v)) {
            cli_err("detokenize", "out of memory");
            return false;
        }
        b->last = 'i';
        s = end;
    }
    return true;
}

/* The end of an id list: "1," lost the id after its comma. */
static bool ids_end(const idbuf *b) {
    if (b->last != ',') return true;
    cli_err("detokenize", "the id list ends with a comma (an id missing after it)");
    return false;
}

/* Reads stdin whole and parses its ids into b: 0, or 1 after saying what is wrong. */
static int read_stdin_ids(idbuf *b) {
    size_t cap = 1 << 16, n = 0;
    errno = 0;
    char *in = malloc(cap + 1);
    while (in) {
        n += fread(in + n, 1, cap - n, stdin);
        if (n < cap) break;
        char *p = realloc(in, (cap *= 2) + 1);
        if (!p) free(in);
        in = p;
    }
    if (in && ferror(stdin)) { /* a directory (EISDIR), an I/O error: not "no ids" */
        int e = errno;
        free(in);
        cli_err("detokenize", "cannot read the ids on stdin: %s", strerror(e ? e : EIO));
        return 1;
    }
    if (!in) {
        cli_err("detokenize", "cannot read stdin: out of memory");
        return 1;
    }
    in[n] = 0;
    /* parse_ids stops at a NUL: the ids after one were dropped without a word */
    bool ok = cli_check_text("detokenize", "stdin", in, n) && parse_ids(in, b) && ids_end(b);
    free(in);
    return ok ? 0 : 1;
}

PB_CMD(detokenize) {
    const char *vocab_path = NULL;
    bool special = false;
    int64_t stdin_at = -1; /* where stdin's ids go among the arguments' ("-" read after the flags are checked) */
    idbuf b = {0};
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("detokenize", usage, argc, argv, &i, name, alias, val))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) {
                rc = 2;
            } else {
                puts(usage);
                free(b.ids);
                return 0;
            }
        } else if (FLAG("--special", NULL, NULL) != 0) {
            rc = r < 0 ? 2 : 0;
            special = true;
        } else if (FLAG("--vocab", NULL, &v) != 0 || FLAG("--model", "-m", &v) != 0) {
            if (r < 0)
                rc = 2;
            else if (!(vocab_path = cli_model_arg("detokenize", v))) {
                free(b.ids);
                return 1;
            }
        } else if (!strcmp(a, "-")) {
            if (stdin_at >= 0) rc = cli_usage_error("detokenize", usage, "- (stdin) given twice");
            stdin_at = b.n;
        } else if (a[0] == '-' && !isdigit((unsigned char)a[1]))
            rc = cli_usage_error("detokenize", usage, "unknown option '%s'", a);
        else if (!parse_ids(a, &b))
            rc = cli_usage_line(usage); /* an argument that is no id list: a usage error like the others */
#undef FLAG
        if (rc) {
            free(b.ids);
            return rc;
        }
    }
    if (!ids_end(&b)) {
        free(b.ids);
        return cli_usage_line(usage);
    }
    if (stdin_at >= 0) { /* in its place: `detokenize 2 -` puts 2 first (stdin's ids used to follow every argument's) */
        idbuf in = {0}, all = {0};
        int r = read_stdin_ids(&in);
        for (int64_t k = 0; r == 0 && k < b.n + in.n; k++) {
            int32_t id = k < stdin_at ? b.ids[k] : k < stdin_at + in.n ? in.ids[k - stdin_at] : b.ids[k - in.n];
            if (!push(&all, id)) {
                cli_err("detokenize", "out of memory");
                r = 1;
            }
        }
        free(in.ids);
        free(b.ids);
        b = all;
        if (r) {
            free(b.ids);
            return r;
        }
    } else if (b.n == 0) {
        free(b.ids);
        return cli_usage_error("detokenize", usage, "no ids given (use - to read stdin)");
    }
    if (!vocab_path) vocab_path = cli_default_model();
    if (!vocab_path) {
        free(b.ids);
        return cli_usage_error("detokenize", usage, "no --vocab given and no default model found (set PB_MODEL)");
    }
    pb_vocab *v;
    pb_status st = hf_vocab_open_any(vocab_path, &v);
    if (st != PB_OK) {
        free(b.ids);
        return cli_fail("detokenize", st, "vocabulary");
    }
    size_t len = 0;
    char one[1], *text = one;
    st = pb_detokenize(v, b.ids, b.n, special, one, sizeof one, &len);
    if (st == PB_ERR_INVALID_ARG && len > 0) { /* did not fit: len is the size needed */
        text = malloc(len + 1);
        st = text ? pb_detokenize(v, b.ids, b.n, special, text, len + 1, &len) : PB_ERR_NOMEM;
    }
    if (st != PB_OK)
        rc = cli_fail("detokenize", st, "ids");
    else if (len && fwrite(text, 1, len, stdout) != len) {
        cli_err("detokenize", "write error on stdout");
        rc = 1;
    }
    if (text != one) free(text);
    free(b.ids);
    pb_vocab_free(v);
    return rc;
}
