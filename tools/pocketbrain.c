/* pocketbrain.c -- CLI entry: dispatches `pocketbrain <command>` to tools/cmd_<command>.c. */
#include "cli.h"
#include "base/base.h"
#include "library.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Commands are weak symbols: a command exists once its cmd_<name>.c is linked in. */
#define X(name, help) int cmd_##name(int argc, char **argv) __attribute__((weak));
#define COMMANDS                                                                                                       \
    X(run, "generate an answer to one prompt, streamed to stdout")                                                     \
    X(chat, "interactive multi-turn chat (REPL)")                                                                      \
    X(serve, "OpenAI-compatible HTTP server with a web chat UI")                                                       \
    X(bench, "measure load time, prefill and decode speed")                                                            \
    X(info, "show a GGUF model's metadata, tensors and memory needs")                                                  \
    X(quantize, "convert a GGUF to another weight format (Q4_K_M, Q8_0, ...)")                                         \
    X(convert, "convert a Hugging Face model folder to GGUF")                                                          \
    X(verify, "check a file's SHA-256 and GGUF structure")                                                             \
    X(synth, "make a random-weight model with real shapes (for benchmarks)")                                           \
    X(logits, "write the logits of every position of a token sequence")                                                \
    X(perplexity, "perplexity of a model on a text file")                                                              \
    X(tokenize, "text to token ids")                                                                                   \
    X(detokenize, "token ids to text")                                                                                 \
    X(ingest, "add documents to a knowledge base")                                                                     \
    X(search, "search a knowledge base")                                                                               \
    X(ask, "answer a question from a knowledge base, with citations")                                                  \
    X(faq, "manage the FAQ fallback (add, import, list, match)")                                                       \
    X(pull, "download a model into the library (catalog name, hf:OWNER/REPO/FILE, URL)")                               \
    X(models, "list the models in the library")                                                                        \
    X(rm, "remove a model from the library")
COMMANDS
#undef X

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

#define X(name, help) {#name, cmd_##name, help},
static const command commands[] = {COMMANDS};
#undef X

static void print_help(FILE *f) {
    fprintf(f, "pocketbrain %s -- a private, offline LLM engine for Gemma models\n\n", pb_version());
    fprintf(f, "usage: pocketbrain <command> [options]   (pocketbrain help <command> for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].fn) fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\na long flag takes its value as --flag VALUE or --flag=VALUE, a short one as -f VALUE only\n");
}

/* A mapped input (a model, a GGUF being quantized) that shrinks under us faults on the next read of a
 * dropped page. Say so plainly instead of dying with a bare "Bus error", remove our temp files, then
 * end by the same signal (exit status 128 + 7) so callers still see what happened. */
static void on_sigbus(int sig) {
    static const char msg[] =
        "pocketbrain: a file mapped in memory (the model or another input) was truncated or rewritten in place "
        "while in use (SIGBUS); stopping. Replace such files by writing a new one and renaming it over the old.\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    pb_atomic_cleanup_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

static int stdout_errno; /* the first failed flush of stdout's errno (cli_flush_stdout) */

bool cli_flush_stdout(void) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return true;
    if (!stdout_errno) stdout_errno = errno ? errno : EIO;
    return false;
}

/* What was written to stdout must have reached it: stdio reports a full disk, a closed descriptor or a broken
 * device only when the buffer is flushed, after the command returned 0 (`run -p ... > answer.txt` on a full disk
 * exited 0 with the answer lost). Checked here once for every command; a command that already failed keeps its
 * own message and status. */
static int finish_stdout(const char *cmd, int rc) {
    if (cli_flush_stdout() || rc != 0) return rc;
    fprintf(stderr, "pocketbrain%s%s: cannot write the output to stdout: %s\n", cmd ? " " : "", cmd ? cmd : "",
            strerror(stdout_errno));
    return 1;
}

/* A standard descriptor the caller closed (`2>&-`, `>&-`, `<&-`) is the lowest free number: the next file opened
 * took it, so stderr lines, the answer, or stdin's reads went to whatever file that was (`run -v 2>&-` wrote its stats
 * line into the packed-weights cache being written, committed damaged). /dev/null holds such a number, opened the
 * other way round, so that its reads and writes still fail with EBADF as on the closed descriptor. */
static void hold_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        /* the lowest free number: fd itself, the ones below it are open by now */
        int n = open("/dev/null", (fd == 0 ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
        if (n > fd) close(n);
    }
}

static int run_main(int argc, char **argv);

int main(int argc, char **argv) {
    hold_std_fds();
    int rc = run_main(argc, argv);
    return finish_stdout(argc >= 2 && argv[1][0] != '-' ? argv[1] : NULL, rc);
}

static int run_main(int argc, char **argv) {
    signal(SIGBUS, on_sigbus);
    /* for every command from the start: opening a model may write the packed-weights cache (a temp file as large
     * as the weights), which a Ctrl-C, kill or closed terminal used to leave behind in ~/.cache for good;
     * commands that handle SIGINT themselves (run, chat, ingest, pull, serve) install theirs later */
    cli_install_cleanup_handlers();
    if (argc < 2) {
        print_help(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "help") == 0 && argc >= 3) { /* `pocketbrain help CMD` = `pocketbrain CMD --help` */
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            if (commands[i].fn && strcmp(commands[i].name, argv[2]) == 0) {
                static char help_flag[] = "--help";
                char *args[] = {argv[2], help_flag, NULL};
                return commands[i].fn(2, args);
            }
        fprintf(stderr, "pocketbrain help: unknown command '%s' (try 'pocketbrain --help')\n", argv[2]);
        return 2;
    }
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        print_help(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("pocketbrain %s (ABI %d)\n", pb_version(), pb_abi_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].fn && strcmp(commands[i].name, name) == 0) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "pocketbrain: unknown command '%s' (try 'pocketbrain --help')\n", name);
    return 2;
}

/* ---- helpers shared by commands ---------------------------------------------------------------- */

void cli_err(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pocketbrain %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_fail(const char *cmd, pb_status s, const char *what) {
    const char *e = pb_last_error();
    size_t n = strlen(what);
    if (e[0] && strncmp(e, what, n) == 0 && e[n] == ':') { /* the library already says what: "m.gguf: m.gguf: ..." */
        fprintf(stderr, "pocketbrain %s: %s\n", cmd, e);
        return 1;
    }
    /* "cannot create session" + "session: n_ctx ..." -> "cannot create session: n_ctx ...", not "session: session:" */
    const char *last = strrchr(what, ' ');
    last = last ? last + 1 : what;
    size_t l = strlen(last);
    if (l && strncmp(e, last, l) == 0 && e[l] == ':' && e[l + 1] == ' ') e += l + 2;
    fprintf(stderr, "pocketbrain %s: %s: %s\n", cmd, what, e[0] ? e : pb_status_name(s));
    return 1;
}

const char *cli_last_error_as(const char *prefix) {
    static char buf[1200];
    const char *e = pb_last_error();
    size_t n = strlen(prefix);
    if (strncmp(e, prefix, n) == 0 && e[n] == ':') return e;
    snprintf(buf, sizeof buf, "%s: %s", prefix, e);
    return buf;
}

int cli_usage_line(const char *usage) {
    fprintf(stderr, "usage: %s\n", usage);
    return 2;
}

int cli_flag(const char *cmd, const char *usage, int argc, char **argv, int *i, const char *name, const char *alias,
             const char **val) {
    const char *a = argv[*i];
    for (const char *nm = name; nm; nm = nm == name ? alias : NULL) {
        size_t n = strlen(nm);
        if (strncmp(a, nm, n) != 0) continue;
        if (nm[1] != '-' && (a[n] == '=' || (a[n] >= '0' && a[n] <= '9'))) {
            /* "-n=5", "-n5": a short flag with something attached (no flag name has a digit, so this is no other
             * flag). It was "unknown flag '-n=5'" for a flag the command has: say what the form is instead */
            if (val)
                cli_usage_error(cmd, usage, "%s takes its value as the next argument ('%s %s'), got '%s'", nm, nm,
                                a + n + (a[n] == '='), a);
            else
                cli_usage_error(cmd, usage, "%s takes no value (got '%s')", nm, a);
            return -1;
        }
        if (a[n] != 0 && !(a[n] == '=' && nm[1] == '-')) continue;
        if (a[n] == '=') { /* "--name=VALUE": a long name only ("-c=5" was refused above) */
            if (val) {
                *val = a + n + 1;
                return 1;
            }
            cli_usage_error(cmd, usage, "%s takes no value (got '%s')", nm, a);
            return -1;
        }
        if (!val) return 1;
        if (*i + 1 >= argc) {
            cli_usage_error(cmd, usage, "%s needs a value", a);
            return -1;
        }
        *val = argv[++*i];
        return 1;
    }
    return 0;
}

int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pocketbrain %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nusage: %s\n", usage);
    va_end(ap);
    return 2;
}

/* strtol / strtoull / strtod accept leading blanks and a sign where a flag's value must be plain: the value
 * has to start with a digit (or '-' then a digit where negatives are allowed, or '.' for a number). strtod reads
 * hexadecimal too: `--temp 0x10` was 16, `--top-p 0x1p-1` 0.5, while the integer flags refuse 0x10. */
static bool plain_number(const char *s, bool neg_ok) {
    if (!s || !*s || strpbrk(s, "xX")) return false;
    if (*s == '-' && neg_ok) s++;
    return (*s >= '0' && *s <= '9') || (*s == '.' && s[1] >= '0' && s[1] <= '9');
}

/* A flag as given ("--ctx=abc") named in a message without its value ("--ctx"): the value is quoted after it. */
#define FLAG_NAME(flag) (int)strcspn(flag, "="), flag

bool cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long v = plain_number(s, lo < 0) ? strtol(s, &end, 10) : 0;
    if (!end || *end || errno || v < lo || v > hi) {
        cli_err(cmd, "%.*s expects an integer in [%ld, %ld], got '%s'", FLAG_NAME(flag), lo, hi, s ? s : "(nothing)");
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = plain_number(s, false) ? strtoull(s, &end, 10) : 0;
    if (!end || *end || errno || strchr(s, '.')) { /* ERANGE: above 2^64-1 */
        cli_err(cmd, "%.*s expects an integer in [0, 18446744073709551615], got '%s'", FLAG_NAME(flag),
                s ? s : "(nothing)");
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

bool cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double v = plain_number(s, true) ? strtod(s, &end) : 0;
    if (!end || *end || errno || !(v >= lo && v <= hi)) {
        cli_err(cmd, "%.*s expects a number in [%g, %g], got '%s'", FLAG_NAME(flag), lo, hi, s ? s : "(nothing)");
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_size(const char *cmd, const char *flag, const char *s, size_t *out) {
    char *end;
    errno = 0;
    double v = plain_number(s, false) ? strtod(s, &end) : -1;
    if (v >= 0 && !errno) {
        double mul = 1;
        switch (*end) {
        case 'k':
        case 'K':
            mul = 1024.0;
            end++;
            break;
        case 'm':
        case 'M':
            mul = 1024.0 * 1024;
            end++;
            break;
        case 'g':
        case 'G':
            mul = 1024.0 * 1024 * 1024;
            end++;
            break;
        case 't':
        case 'T':
            mul = 1024.0 * 1024 * 1024 * 1024;
            end++;
            break;
        default: break;
        }
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
        if (*end == 0 && v * mul < 1.8e19) {
            *out = (size_t)(v * mul);
            return true;
        }
    }
    cli_err(cmd, "%.*s expects a size such as 512M or 4G, got '%s'", FLAG_NAME(flag), s ? s : "(nothing)");
    return false;
}

bool cli_parse_int_list(const char *cmd, const char *flag, const char *s, long lo, long hi, int *out, int max, int *n) {
    *n = 0;
    for (const char *p = s ? s : "";;) {
        const char *e = p;
        long v = 0;
        while (*e >= '0' && *e <= '9' && v <= hi) v = v * 10 + (*e++ - '0');
        if (e == p || (*e && *e != ',') || v < lo || v > hi || *n >= max) { /* empty, sign, blank, range, count */
            cli_err(cmd, "%.*s expects a list like 1,8,32 (integers in [%ld, %ld], at most %d), got '%s'",
                    FLAG_NAME(flag), lo, hi, max, s ? s : "(nothing)");
            return false;
        }
        out[(*n)++] = (int)v;
        if (!*e) return true;
        p = e + 1;
    }
}

bool cli_parse_id(const char *s, int32_t *out, const char **end) {
    int64_t v = 0;
    const char *p = s;
    while (*p >= '0' && *p <= '9' && v <= INT32_MAX) v = v * 10 + (*p++ - '0');
    if (end) *end = p;
    if (p == s || v > INT32_MAX || (*p >= '0' && *p <= '9')) return false;
    *out = (int32_t)v;
    return true;
}

bool cli_is_option(const char *arg) { return arg[0] == '-' && arg[1] && strcmp(arg, "--") != 0; }

int cli_operand(const char *arg, bool *ended) {
    if (*ended) return 1;
    if (!strcmp(arg, "--")) {
        *ended = true;
        return -1;
    }
    return !cli_is_option(arg);
}

void cli_progress_init(cli_progress *p, const char *label) {
    p->label = label;
    p->t_start = pb_time_ms();
    p->last_pct = -1;
    p->tty = isatty(2);
}

void cli_progress_update(cli_progress *p, double done, double total) {
    if (!p->tty || total <= 0) return;
    int pct = (int)(100.0 * done / total);
    if (pct == p->last_pct) return;
    p->last_pct = pct;
    int w = 30, fill = pct * w / 100;
    double el = (pb_time_ms() - p->t_start) / 1000.0;
    double eta = done > 0 ? el * (total - done) / done : 0;
    fprintf(stderr, "\r%s [", p->label);
    for (int i = 0; i < w; i++) fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %3d%%  %.1fs elapsed, ~%.0fs left ", pct, el, eta);
    fflush(stderr);
}

void cli_progress_done(cli_progress *p) {
    if (p->tty && p->last_pct >= 0) fprintf(stderr, "\n");
}

const char *cli_default_model(void) {
    static char path[PATH_MAX + 32];
    const char *env = getenv("PB_MODEL");
    if (env && *env) { /* a path, or a library name as -m takes it (PB_MODEL=gemma-2-2b-it after a pull) */
        static lib_entry e;
        return lib_resolve(env, &e) ? e.file : env;
    }
    /* next to the binary: <repo>/build/pocketbrain -> <repo>/models/default.gguf */
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        for (int up = 0; up < 3; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = 0;
            snprintf(path, sizeof path, "%s/models/default.gguf", exe);
            if (access(path, R_OK) == 0) return path;
        }
    }
    if (access("models/default.gguf", R_OK) == 0) return "models/default.gguf";
    return NULL;
}

static void on_signal(int sig) {
    pb_atomic_cleanup_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

void cli_install_cleanup_handlers(void) {
    /* every signal whose default ends the process: Ctrl-C, kill, a closed terminal or ssh session (SIGHUP), a
     * progress line into a closed pipe (SIGPIPE), the file size limit (SIGXFSZ), Ctrl-\ (SIGQUIT). SIGHUP and
     * SIGPIPE used to end quantize / convert / logits with their temp file (a partial model) left behind. */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    static const int sigs[] = {SIGHUP, SIGPIPE, SIGXFSZ, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* one that arrived ignored stays ignored: nohup's SIGHUP, a shell's SIGQUIT for background jobs */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        signal(sigs[i], on_signal);
    }
}
