/* cmd_chat.c -- `pocketbrain chat`: interactive multi-turn chat (libedit line editing), answers streamed
 * as they are generated, slash commands, Ctrl-C stops the answer (not the program), --session resumes. */
#include "base/base.h"
#include "cli_common.h"

#include <editline/readline.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const usage =
    "pocketbrain chat [-m MODEL] [--session FILE] [options]   (pocketbrain chat --help for all options)";

static const char *const help = "pocketbrain chat -- interactive multi-turn chat\n\n"
                                "usage: pocketbrain chat [-m MODEL] [--session FILE] [options]\n\n"
                                "  --session FILE         resume the conversation saved in FILE (if it exists) and\n"
                                "                         save it there on exit; resuming needs no re-prefill\n"
                                "  --no-stats             do not print token counts after each answer\n\n"
                                "in the chat:\n"
                                "  Ctrl-C stops the current answer; Ctrl-D or /quit leaves\n";

static const char *const commands_help =
    "  /reset          forget the conversation (keeps the system prompt)\n"
    "  /undo           take the last question and its answer out of the conversation\n"
    "  /retry          answer the last question again (a new answer: sampling, or another preset)\n"
    "  /system TEXT    set the system prompt and start over\n"
    "  /preset NAME    precise | balanced | creative | code\n"
    "  /save FILE      save the conversation (tokens + KV cache)\n"
    "  /load FILE      load a saved conversation\n"
    "  /stats          context use, token counts, speeds, sampling, thermal state\n"
    "  /help           this list\n"
    "  /quit           leave (also /exit, Ctrl-D)";

/* pb_last_error() after a failed pb_session_load / pb_session_save, starting with what ("session load" / "session
 * save") and naming the file once: the library puts "session load 'FILE': " before what it found in a file, not
 * before a file it could not open ("cannot open 'FILE': ..."), so a failing /load read otherwise than /save and
 * --session did. The text lives until the next call. */
static const char *session_error(const char *what, const char *path) {
    static char buf[1600], quoted[1100];
    const char *e = pb_last_error();
    size_t n = strlen(what);
    if (strncmp(e, what, n) == 0 && (e[n] == ' ' || e[n] == ':')) return e;
    snprintf(quoted, sizeof quoted, "'%s'", path);
    if (strstr(e, quoted))
        snprintf(buf, sizeof buf, "%s: %s", what, e);
    else
        snprintf(buf, sizeof buf, "%s '%s': %s", what, path, e);
    return buf;
}

static pb_session *volatile g_session;
static volatile sig_atomic_t g_generating, g_interrupted, g_hangup;

static void on_sigint(int sig) {
    (void)sig;
    if (g_generating && g_session)
        pb_session_cancel(g_session); /* one atomic store: signal-safe */
    else
        g_interrupted = 1;
}

/* SIGHUP (the terminal or ssh session closed), SIGTERM and SIGPIPE (stdout a pipe whose reader left: `chat | tee`,
 * `| head`): stop the answer, leave the loop, save --session, then end by the signal. They used to end the process
 * at once: the conversation since the last save was lost. */
static void on_hangup(int sig) {
    g_hangup = sig;
    if (g_generating && g_session) pb_session_cancel(g_session);
}

static void set_hangup(void) {
    static const int sigs[] = {SIGHUP, SIGTERM, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa, old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue; /* nohup; EPIPE then */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_hangup; /* no SA_RESTART: a read waiting for the next line returns */
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

typedef struct chat {
    cli_opts o;
    pb_model *m;
    pb_session *s;
    char *system;
    bool tty, stats, ends_nl;
    pb_gen_stats last;
    const char *session_file;
    char *last_text;  /* the last question typed in this run (/retry), NULL before one or after /undo, /reset, /load */
    bool last_in;     /* its turn is in the conversation (not when its prompt could not be fed: context full, Ctrl-C) */
    uint64_t n_retry; /* /retry of that question so far: each samples with seed + n_retry, so it gives a new answer */
    int n_failed;     /* /save and /load commands that failed: a piped chat then exits 1 (a script's save was lost) */
} chat;

static bool on_piece(const char *p, size_t n, void *user) {
    chat *c = user;
    if (n) c->ends_nl = p[n - 1] == '\n';
    fwrite(p, 1, n, stdout);
    cli_flush_stdout(); /* typewriter: each piece as soon as it exists */
    return true;
}

/* libedit reads keys through this: SIGINT is installed without SA_RESTART while the prompt waits, so a
 * Ctrl-C interrupts read(); the line is then ended here ('\n') and read_line drops it. libedit's own
 * reader would retry the read and leave the flag set for the next Ctrl-D to trip over. */
static int getc_interruptible(FILE *f) {
    unsigned char ch;
    for (;;) {
        ssize_t n = read(fileno(f ? f : stdin), &ch, 1);
        if (n == 1) return ch;
        if (n == 0) return EOF;
        if (errno != EINTR || g_hangup) return EOF;
        if (g_interrupted) return '\n';
    }
}

static void set_sigint(bool restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* *len: the line's bytes, a NUL among them too (a piped line with one was cut there without a word) */
static char *read_line(chat *c, size_t *len) {
    if (c->tty) {
        for (;;) {
            g_interrupted = 0;
            set_sigint(false);
            char *l = readline("> ");
            set_sigint(true);
            if (l) *len = strlen(l);
            if (!g_interrupted) return l; /* a line, or NULL for Ctrl-D */
            free(l);                      /* Ctrl-C at the prompt: drop the line, say how to leave */
            printf("[Ctrl-C: line dropped; Ctrl-D or /quit leaves the chat]\n");
        }
    }
    /* a whole line however long: a fixed buffer cut a piped line of 64 KiB or more into several turns */
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = -1;
    if (g_hangup || (n = getline(&line, &cap, stdin)) < 0 || g_hangup) {
        free(line);
        return NULL;
    }
    *len = (size_t)n;
    return line;
}

static void trim(char *s, size_t *len) {
    size_t n = *len;
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
    *len = n;
}

static void print_stats(chat *c) {
    pb_session_totals t;
    pb_session_get_totals(c->s, &t);
    pb_sampler_params sp = cli_opts_sampler(&c->o);
    pb_thermal_state th;
    pb_session_thermal(c->s, &th);
    const pb_gen_stats *g = &c->last;
    printf("context:  %lld / %lld tokens, %d turns%s\n", (long long)pb_session_n_past(c->s),
           (long long)pb_session_n_ctx(c->s), pb_session_n_turns(c->s),
           c->o.context_shift ? " (context shift on)" : "");
    printf("totals:   %lld prompt tokens prefilled, %lld generated, %lld re-prefilled, %lld shifts, %d answers\n",
           (long long)t.n_prefilled, (long long)t.n_generated, (long long)t.n_reprefilled, (long long)t.n_shifts,
           t.n_calls);
    if (g->n_generated || g->n_prompt)
        printf("last:     prompt %lld tok in %.0f ms (%.1f tok/s), answer %lld tok in %.0f ms (%.1f tok/s), first "
               "token %.0f ms, stop: %s\n",
               (long long)g->n_prompt, g->t_prefill_ms,
               g->t_prefill_ms > 0 ? (double)g->n_prompt * 1000.0 / g->t_prefill_ms : 0.0, (long long)g->n_generated,
               g->t_generate_ms, g->t_generate_ms > 0 ? (double)g->n_generated * 1000.0 / g->t_generate_ms : 0.0,
               g->t_first_token_ms, pb_stop_reason_name(g->stop_reason));
    printf("sampling: preset %s, temp %.2f, top-k %d, top-p %.2f, min-p %.2f, repeat %.2f, seed %llu\n",
           pb_preset_name(c->o.preset), (double)sp.temperature, sp.top_k, (double)sp.top_p, (double)sp.min_p,
           (double)sp.repeat_penalty, (unsigned long long)sp.seed);
    if (th.enabled)
        printf("thermal:  %.1f C (%s), level %d (%s), %d of %d threads, pause %d ms, %lld tokens throttled\n",
               (double)th.temp_c, th.source, th.level,
               th.level == 0   ? "cool"
               : th.level == 1 ? "warm"
                               : "hot",
               th.n_threads, th.n_threads_max, th.pause_ms, (long long)th.n_throttled);
    else
        printf("thermal:  off\n");
    printf("system:   %s\n", c->system && *c->system ? c->system : "(none)");
}

/* Returns false when the chat should end. */
static void turn(chat *c, const char *text, bool retry);

static void forget_last(chat *c) {
    free(c->last_text);
    c->last_text = NULL;
}

static bool command(chat *c, char *line) {
    char *arg = strchr(line, ' ');
    if (arg) {
        *arg++ = 0;
        while (*arg == ' ') arg++;
    }
    if (strcmp(line, "/quit") == 0 || strcmp(line, "/exit") == 0) return false;
    if (strcmp(line, "/help") == 0) {
        printf("%s\n", commands_help);
    } else if (strcmp(line, "/reset") == 0) {
        pb_session_truncate(c->s, 0);
        forget_last(c);
        printf("[conversation reset]\n");
    } else if (strcmp(line, "/undo") == 0 || strcmp(line, "/retry") == 0) {
        const bool retry = line[1] == 'r';
        pb_session_totals t0, t1;
        pb_session_get_totals(c->s, &t0);
        if (retry && !c->last_text)
            printf("[nothing to retry: no question asked since the chat started, /undo, /load or /reset]\n");
        else if (retry && !c->last_in) { /* nothing of it to take out: undoing would take the exchange before */
            char *text = c->last_text;
            c->last_text = NULL;
            turn(c, text, true);
            free(text);
        } else if (pb_session_n_turns(c->s) == 0)
            printf("[nothing to %s: the conversation is empty]\n", retry ? "retry" : "undo");
        else if (pb_session_pop_turn(c->s) != PB_OK)
            printf("[%s failed: %s]\n", retry ? "retry" : "undo", pb_last_error());
        else {
            pb_session_get_totals(c->s, &t1);
            if (t1.n_reprefilled > t0.n_reprefilled)
                printf("[%lld tokens of the conversation read again]\n",
                       (long long)(t1.n_reprefilled - t0.n_reprefilled));
            if (retry) {
                char *text = c->last_text;
                c->last_text = NULL;
                turn(c, text, true); /* remembers it again */
                free(text);
            } else {
                forget_last(c);
                printf("[last exchange removed: %d turn%s left]\n", pb_session_n_turns(c->s),
                       pb_session_n_turns(c->s) == 1 ? "" : "s");
            }
        }
    } else if (strcmp(line, "/system") == 0) {
        free(c->system);
        c->system = arg && *arg ? strdup(arg) : NULL;
        pb_session_truncate(c->s, 0);
        forget_last(c);
        printf("[system prompt %s; conversation reset]\n", c->system ? "set" : "cleared");
    } else if (strcmp(line, "/preset") == 0) {
        pb_preset p;
        if (!arg || pb_preset_from_name(arg, &p) != PB_OK) {
            printf("[unknown preset '%s': precise, balanced, creative or code]\n", arg ? arg : "");
        } else {
            c->o.preset = p;
            c->o.has_temp = c->o.has_top_k = c->o.has_top_p = c->o.has_min_p = false; /* the preset's values */
            pb_sampler_params sp = cli_opts_sampler(&c->o);
            printf("[preset %s: temp %.2f, top-p %.2f]\n", arg, (double)sp.temperature, (double)sp.top_p);
        }
    } else if (strcmp(line, "/save") == 0) {
        if (!arg || !*arg)
            printf("[usage: /save FILE]\n");
        else if (pb_session_save(c->s, arg) != PB_OK) {
            printf("[save failed: %s]\n", session_error("session save", arg));
            c->n_failed++;
        } else
            printf("[saved %lld tokens to %s]\n", (long long)pb_session_n_past(c->s), arg);
    } else if (strcmp(line, "/load") == 0) {
        if (!arg || !*arg)
            printf("[usage: /load FILE]\n");
        else if (pb_session_load(c->s, arg) != PB_OK) {
            printf("[load failed: %s]\n", session_error("session load", arg));
            c->n_failed++;
        } else {
            forget_last(c);
            printf("[loaded %lld tokens, %d turns from %s]\n", (long long)pb_session_n_past(c->s),
                   pb_session_n_turns(c->s), arg);
        }
    } else if (strcmp(line, "/stats") == 0) {
        print_stats(c);
    } else {
        printf("[unknown command %s; /help lists them]\n", line);
    }
    return true;
}

static void turn(chat *c, const char *text, bool retry) {
    free(c->last_text);
    c->last_text = strdup(text); /* NULL on no memory: /retry then says there is nothing to retry */
    pb_gen_params gp = cli_opts_gen(&c->o);
    /* every call seeds the sampler afresh (same seed -> same text), so /retry with the same seed would sample the
     * same answer again; the seed moves on by one per retry instead (greedy needs none: it has one answer) */
    c->n_retry = retry ? c->n_retry + 1 : 0;
    if (c->n_retry && gp.sampler.temperature > 0.0f && gp.sampler.seed != PB_SEED_RANDOM) {
        gp.sampler.seed += c->n_retry;
        if (gp.sampler.seed == PB_SEED_RANDOM) gp.sampler.seed = 0; /* wrapped onto "from the clock" */
        printf("[retry %llu: seed %llu]\n", (unsigned long long)c->n_retry, (unsigned long long)gp.sampler.seed);
    }
    c->ends_nl = true;
    const int n_turns = pb_session_n_turns(c->s);
    g_generating = 1;
    pb_status st = pb_session_chat(c->s, c->system, text, &gp, on_piece, c, &c->last);
    g_generating = 0;
    /* a turn whose prompt could not be fed left the context as before it; one record more, or a shift (the records
     * renumbered) and an answer begun, says it went in */
    c->last_in =
        pb_session_n_turns(c->s) == n_turns + 1 || (c->last.n_shifts > 0 && (st == PB_OK || c->last.n_generated > 0));
    if (!c->ends_nl) printf("\n");
    if (st == PB_ERR_CANCELLED)
        printf("[stopped]\n");
    else if (st == PB_ERR_CONTEXT_FULL && (c->o.context_shift || strstr(pb_last_error(), "turn alone")))
        /* a turn the context cannot hold beside its head (BOS, system prompt): /reset keeps the head and
         * --context-shift drops only older turns, so neither helps (both were advised) */
        printf("[%s -- write a shorter message, or restart with a larger -c]\n", pb_last_error());
    else if (st == PB_ERR_CONTEXT_FULL) /* the library's text starts "context full: " */
        printf("[%s -- /reset starts over; or restart with a larger -c or with --context-shift]\n", pb_last_error());
    else if (st != PB_OK)
        printf("[error: %s]\n", pb_last_error());
    if (c->stats) {
        const pb_gen_stats *g = &c->last;
        printf("%s[prompt %lld tok, answer %lld tok, %.1f tok/s%s]%s\n", c->tty ? "\033[2m" : "",
               (long long)g->n_prompt, (long long)g->n_generated,
               g->t_generate_ms > 0 ? (double)g->n_generated * 1000.0 / g->t_generate_ms : 0.0,
               g->n_shifts ? ", context shifted" : "", c->tty ? "\033[0m" : "");
    }
    cli_flush_stdout();
}

PB_CMD(chat) {
    chat c;
    memset(&c, 0, sizeof c);
    cli_opts_init(&c.o);
    c.stats = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_opts_parse(&c.o, "chat", usage, argc, argv, &i);
        if (r == 2) return 2;
        if (r == 1) continue;
        const char *v = NULL;
        if ((r = cli_flag("chat", usage, argc, argv, &i, "--help", "-h", NULL)) != 0) {
            if (r < 0) return 2;
            printf("%s%s\n\n%s\n", help, commands_help, cli_opts_help);
            return 0;
        } else if ((r = cli_flag("chat", usage, argc, argv, &i, "--session", NULL, &v)) != 0) {
            if (r < 0) return 2;
            c.session_file = v;
        } else if ((r = cli_flag("chat", usage, argc, argv, &i, "--no-stats", NULL, NULL)) != 0) {
            if (r < 0) return 2;
            c.stats = false;
        } else if (a[0] == '-') {
            return cli_usage_error("chat", usage, "unknown flag '%s'", a);
        } else {
            return cli_usage_error("chat", usage, "unexpected argument '%s'", a);
        }
    }
    if (c.session_file) { /* the conversation is saved there at exit: find out now that it cannot be (a missing or
                           * read-only directory, a directory or link at the name), not after an hour of chat */
        pb_atomic_file probe;
        if (pb_atomic_open(c.session_file, &probe) != PB_OK) {
            cli_err("chat", "--session: %s; the conversation could not be saved there", pb_last_error());
            return 1;
        }
        pb_atomic_abort(&probe);
    }
    /* /undo and /retry go back a turn: rows beyond the sliding windows make that free for a turn of up to 512
     * tokens once the conversation passed a window (gemma-2-2b, f16: 27 MiB; counted by the memory check) */
    c.o.ring_extra = CLI_CHAT_RING_EXTRA;
    int rc = cli_open("chat", &c.o, &c.m, &c.s, NULL);
    if (rc) return rc;
    c.system = c.o.system ? strdup(c.o.system) : NULL;
    c.tty = isatty(0) && isatty(1);
    struct stat st;
    if (c.session_file && stat(c.session_file, &st) == 0) {
        if (pb_session_load(c.s, c.session_file) != PB_OK) {
            cli_err("chat", "cannot resume: %s (the file is left as it is)",
                    session_error("session load", c.session_file));
            pb_session_free(c.s);
            pb_model_close(c.m);
            free(c.system);
            return 1;
        }
        printf("[resumed %s: %lld tokens, %d turns]\n", c.session_file, (long long)pb_session_n_past(c.s),
               pb_session_n_turns(c.s));
    }
    g_session = c.s;
    set_sigint(true);
    set_hangup();
    if (c.tty) {
        rl_catch_signals = 0; /* our handler decides what Ctrl-C means */
        rl_getc_function = getc_interruptible;
        printf("pocketbrain chat -- /help for commands, Ctrl-C stops an answer, Ctrl-D leaves\n");
    }
    for (;;) {
        size_t len = 0;
        char *line = read_line(&c, &len);
        if (!line) break;
        trim(line, &len);
        if (!len) {
            free(line);
            continue;
        }
        if (c.tty) add_history(line);
        if (!cli_check_text("chat", "this line", line, len)) {
            free(line);
            continue;
        }
        bool go = true;
        if (line[0] == '/')
            go = command(&c, line);
        else
            turn(&c, line, false);
        free(line);
        if (!go || g_hangup) break;
    }
    if (c.tty) printf("\n");
    rc = 0;
    if (!c.tty && c.n_failed) { /* said at the command on stdout; a script reads the status (it exited 0) */
        cli_err("chat", "%d /save or /load command%s failed (see the output)", c.n_failed, c.n_failed == 1 ? "" : "s");
        rc = 1;
    }
    if (c.session_file) {
        if (pb_session_save(c.s, c.session_file) != PB_OK) {
            cli_err("chat", "cannot save the session: %s", session_error("session save", c.session_file));
            rc = 1;
        } else {
            printf("[saved %s]\n", c.session_file);
        }
    }
    g_session = NULL;
    pb_session_free(c.s);
    cli_close_model("chat", c.m, false);
    free(c.system);
    free(c.last_text);
    if (g_hangup) { /* saved (or said why not): now end as the signal would have */
        fflush(NULL);
        signal((int)g_hangup, SIG_DFL);
        raise((int)g_hangup);
    }
    return rc;
}
