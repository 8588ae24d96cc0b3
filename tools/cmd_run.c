/* cmd_run.c -- `pocketbrain run`: one prompt (argument, file or stdin) in, the answer streamed to stdout
 * (chat template by default, --raw for plain completion, --json for text + counts + timings). */
#include "cli_common.h"
#include "base/base.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const usage = "pocketbrain run [-m MODEL] (-p TEXT | -f FILE | < stdin) [--raw] [--json] [-v] "
                                 "[options]   (pocketbrain run --help for all options)";

static const char *const help =
    "pocketbrain run -- generate an answer to one prompt, streamed to stdout\n\n"
    "usage: pocketbrain run [-m MODEL] (-p TEXT | -f FILE | < stdin) [options]\n\n"
    "prompt:\n"
    "  -p, --prompt TEXT      the prompt\n"
    "  -f, --file FILE        read the prompt from FILE (- = stdin); without -p/-f stdin is read\n"
    "  --raw                  plain completion: no chat template, the text is continued as is\n"
    "  --json                 print one JSON object: text, token counts, timings, stop reason (with --think:\n"
    "                         also thinking, the thought channel)\n"
    "  -v, --verbose          print token counts and speeds on stderr\n";

static pb_session *volatile g_session;
static volatile sig_atomic_t g_interrupted; /* a Ctrl-C came: the close does not wait for the cache write */

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    if (g_session) pb_session_cancel(g_session); /* async-signal-safe: one atomic store */
}

typedef struct out_buf {
    char *s;
    size_t n, cap;
    bool json, ends_nl;
} out_buf;

static bool on_piece(const char *p, size_t n, void *user) {
    out_buf *o = user;
    if (n == 0) return true;
    o->ends_nl = p[n - 1] == '\n';
    if (!o->json) /* stdout full or gone: generating on is wasted (main says what failed) */
        return fwrite(p, 1, n, stdout) == n && cli_flush_stdout();
    if (o->n + n + 1 > o->cap) {
        size_t c = (o->cap ? o->cap * 2 : 4096) + n;
        char *b = realloc(o->s, c);
        if (!b) return false;
        o->s = b;
        o->cap = c;
    }
    memcpy(o->s + o->n, p, n);
    o->n += n;
    o->s[o->n] = 0;
    return true;
}

static char *read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *b = realloc(buf, cap *= 2);
        if (!b) free(buf);
        buf = b;
    }
    if (buf && ferror(f)) { /* a directory (EISDIR), an I/O error: not an empty prompt */
        int e = errno;
        free(buf);
        errno = e ? e : EIO;
        return NULL;
    }
    if (!buf) return NULL;
    buf[n] = 0;
    *len = n;
    return buf;
}

PB_CMD(run) {
    cli_opts o;
    cli_opts_init(&o);
    const char *prompt = NULL, *file = NULL;
    bool raw = false, json = false, verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_opts_parse(&o, "run", usage, argc, argv, &i);
        if (r == 2) return 2;
        if (r == 1) continue;
        const char *v = NULL;
#define FLAG(name, alias, val) (r = cli_flag("run", usage, argc, argv, &i, name, alias, val))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            printf("%s\n%s\n", help, cli_opts_help);
            return 0;
        } else if (FLAG("--prompt", "-p", &v) != 0) {
            if (r < 0) return 2;
            prompt = v;
        } else if (FLAG("--file", "-f", &v) != 0) {
            if (r < 0) return 2;
            file = v;
        } else if (FLAG("--raw", NULL, NULL) != 0) {
            if (r < 0) return 2;
            raw = true;
        } else if (FLAG("--json", NULL, NULL) != 0) {
            if (r < 0) return 2;
            json = true;
        } else if (FLAG("--verbose", "-v", NULL) != 0) {
            if (r < 0) return 2;
            verbose = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("run", usage, "unknown flag '%s'", a);
        } else {
            return cli_usage_error("run", usage, "unexpected argument '%s' (give the prompt with -p)", a);
        }
#undef FLAG
    }
    if (prompt && file) return cli_usage_error("run", usage, "-p and -f are exclusive");
    /* a common flag that only chat uses was taken here and changed nothing */
    if (o.keep_thinking)
        return cli_usage_error("run", usage, "--keep-thinking is chat's (run answers one turn: no thought to keep)");
    char *text = NULL;
    size_t len = 0;
    if (prompt) {
        text = strdup(prompt);
        len = strlen(prompt);
    } else if (file && strcmp(file, "-") != 0) {
        if (pb_read_file(file, &text, &len) != PB_OK) { /* names the open or read error (a directory: EISDIR) */
            cli_err("run", "prompt file: %s", pb_last_error());
            return 1;
        }
    } else {
        if (!file && isatty(0)) return cli_usage_error("run", usage, "no prompt: use -p TEXT, -f FILE or a pipe");
        errno = 0;
        text = read_stream(stdin, &len);
        if (!text) {
            cli_err("run", "cannot read the prompt on stdin: %s", strerror(errno ? errno : ENOMEM));
            return 1;
        }
    }
    if (!text) {
        cli_err("run", "cannot read the prompt");
        return 1;
    }
    char what[300];
    if (prompt)
        snprintf(what, sizeof what, "the prompt");
    else if (file && strcmp(file, "-") != 0)
        snprintf(what, sizeof what, "prompt file '%s'", file);
    else
        snprintf(what, sizeof what, "the prompt on stdin");
    if (!cli_check_text("run", what, text, len)) {
        free(text);
        return 1;
    }
    if (!raw) /* chat turns do not need the trailing newline of a piped prompt */
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) text[--len] = 0;
    if (len == 0) {
        free(text);
        cli_err("run", "the prompt is empty");
        return 1;
    }

    pb_model *m;
    pb_session *s;
    double load_ms = 0;
    int rc = cli_open("run", &o, &m, &s, &load_ms);
    if (rc) {
        free(text);
        return rc;
    }
    g_session = s;
    signal(SIGINT, on_sigint);

    pb_gen_params gp = cli_opts_gen(&o);
    out_buf out = {NULL, 0, 0, json, true};
    out_buf thought = {NULL, 0, 0, true, true}; /* --json --think: the thought channel, as "thinking" */
    if (json && o.think) {
        gp.thought_cb = on_piece;
        gp.thought_user = &thought;
    }
    pb_gen_stats gs;
    memset(&gs, 0, sizeof gs);
    pb_status st;
    if (raw) {
        const pb_vocab *v = pb_model_vocab(m);
        int64_t n = 0, cap = (int64_t)len + 16;
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        st = ids ? pb_tokenize(v, text, len, PB_TOK_ADD_BOS, ids, cap, &n) : PB_ERR_NOMEM;
        if (st == PB_ERR_INVALID_ARG && n > cap) { /* more tokens than bytes + 16 (byte tokens): n says how many */
            int32_t *more = realloc(ids, (size_t)n * sizeof *ids);
            st = more ? pb_tokenize(v, text, len, PB_TOK_ADD_BOS, more, cap = n, &n) : PB_ERR_NOMEM;
            ids = more ? more : ids;
        }
        if (st == PB_OK)
            st = pb_session_generate(s, ids, n, &gp, on_piece, &out, &gs);
        else
            gs.stop_reason = PB_STOP_ERROR;
        free(ids);
    } else {
        st = pb_session_chat(s, o.system, text, &gp, on_piece, &out, &gs);
    }
    g_session = NULL;
    rc = 0;
    if (st == PB_ERR_CANCELLED)
        rc = 130;
    else if (st != PB_OK)
        rc = 1;
    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "text", out.s ? out.s : "");
        if (o.think) cJSON_AddStringToObject(root, "thinking", thought.s ? thought.s : "");
        cJSON_AddNumberToObject(root, "n_prompt", (double)gs.n_prompt);
        cJSON_AddNumberToObject(root, "n_generated", (double)gs.n_generated);
        cJSON_AddStringToObject(root, "stop_reason", pb_stop_reason_name(gs.stop_reason));
        cJSON_AddNumberToObject(root, "t_load_ms", load_ms);
        cJSON_AddNumberToObject(root, "t_prefill_ms", gs.t_prefill_ms);
        cJSON_AddNumberToObject(root, "t_first_token_ms", gs.t_first_token_ms);
        cJSON_AddNumberToObject(root, "t_generate_ms", gs.t_generate_ms);
        cJSON_AddNumberToObject(root, "prefill_tok_s",
                                gs.t_prefill_ms > 0 ? (double)gs.n_prompt * 1000.0 / gs.t_prefill_ms : 0);
        cJSON_AddNumberToObject(root, "decode_tok_s",
                                gs.t_generate_ms > 0 ? (double)gs.n_generated * 1000.0 / gs.t_generate_ms : 0);
        cJSON_AddNumberToObject(root, "n_ctx", (double)pb_session_n_ctx(s));
        if (st != PB_OK) cJSON_AddStringToObject(root, "error", pb_last_error());
        cli_json_print(root, false);
    } else if (!out.ends_nl) {
        putchar('\n');
    }
    cli_flush_stdout();
    pb_model_info mi;
    if (st == PB_ERR_CONTEXT_FULL && pb_model_get_info(m, &mi) == PB_OK) { /* the library's text says no remedy */
        /* a prompt the context cannot hold: --context-shift drops only older tokens, so it cannot help (it was
         * advised, even when it was on) */
        if (o.context_shift || strstr(pb_last_error(), "turn alone") || strstr(pb_last_error(), "new tokens > n_ctx"))
            cli_err("run", "%s -- shorten the prompt, or raise -c (this model allows up to %d)", pb_last_error(),
                    mi.n_ctx_train);
        else
            cli_err("run", "%s -- raise -c (this model allows up to %d), or use --context-shift", pb_last_error(),
                    mi.n_ctx_train);
    } else if (st != PB_OK && st != PB_ERR_CANCELLED)
        cli_fail("run", st, "generation failed");
    if (st == PB_ERR_CANCELLED) cli_err("run", "interrupted");
    if (verbose)
        fprintf(stderr,
                "[load %.0f ms | prompt %lld tok, %.1f tok/s | answer %lld tok, %.1f tok/s | first token %.0f ms | "
                "stop: %s]\n",
                load_ms, (long long)gs.n_prompt,
                gs.t_prefill_ms > 0 ? (double)gs.n_prompt * 1000.0 / gs.t_prefill_ms : 0.0, (long long)gs.n_generated,
                gs.t_generate_ms > 0 ? (double)gs.n_generated * 1000.0 / gs.t_generate_ms : 0.0, gs.t_first_token_ms,
                pb_stop_reason_name(gs.stop_reason));
    pb_model_info pi;
    if (verbose) cli_wait_pack_cache("run", m, g_interrupted != 0); /* its outcome, not "writing" */
    if (verbose && pb_model_get_info(m, &pi) == PB_OK && pi.pack_cache_note[0])
        fprintf(stderr, "[pack cache: %s]\n", pi.pack_cache_note);
    free(out.s);
    free(thought.s);
    free(text);
    pb_session_free(s);
    cli_close_model("run", m, g_interrupted != 0);
    return rc;
}
