/* cmd_ingest.c -- `pocketbrain ingest`: add files and folders to a knowledge base (src/store does the work;
 * this file parses flags, prints per-file messages, the progress bar and the summary). */
#include "cli.h"
#include "cli_store.h"
#include "library.h"
#include "store/store.h"
#include "store/store_embed.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "pocketbrain ingest --db KB.sqlite PATH... [--prune] [--vocab MODEL.gguf | -m MODEL.gguf]\n"
    "                          [--chunk-tokens N] [--overlap N] [--embed-model M.gguf] [-v] [-q]\n"
    "  Adds text (.txt .md .rst), HTML and PDF files (folders are walked) to KB.sqlite; files without an\n"
    "  extension (README, NEWS) when they are text; FILE.gz decompressed. Text in another charset is\n"
    "  converted to UTF-8 (HTML: the declared charset; else Windows-1252). A missing PATH with no database\n"
    "  yet is an error and creates none. Unchanged files are skipped by SHA-256, changed ones replaced, a\n"
    "  renamed or moved one replaces its old entry; --prune removes documents under PATH whose files are\n"
    "  gone. Token counts use MODEL's tokenizer when given, else ceil(words * 1.3). --embed-model also\n"
    "  stores a vector per chunk (mean-pooled hidden states of M) for `search --embed-model M`.\n"
    "  Exit status: 0 all done, 3 done but some files were skipped (see messages), 1 error, 2 usage; Ctrl-C,\n"
    "  SIGTERM or SIGHUP stop after the current file (committed): exit 130 for Ctrl-C, else ended by that\n"
    "  signal (143, 129).";

typedef struct {
    cli_progress bar;
    bool verbose, quiet, bar_drawn;
} ingest_ui;

/* Ctrl-C, kill (SIGTERM) and a closed terminal (SIGHUP) stop the ingest after the current file (committed) or the
 * embedding after the current vectors. Ctrl-C then exits 130, as run and pull do; SIGTERM and SIGHUP end the command by
 * that signal (143, 129 to a shell), as chat, quantize and convert do: SIGTERM used to give 130, Ctrl-C's, and a
 * service manager or script could not tell a kill from a user's Ctrl-C. A second signal leaves at once (the WAL keeps
 * the last committed batch). */
static volatile int cancel_flag;
static volatile sig_atomic_t stop_sig;
static void on_stop(int sig) {
    if (cancel_flag) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_sig = sig;
    cancel_flag = 1;
}

static void catch_stops(void) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* nohup's ignored SIGHUP stays ignored */
    if (sigaction(SIGHUP, NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(SIGHUP, &sa, NULL);
}

static const char *stop_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "Ctrl-C"; }

static bool embed_progress(void *user, int64_t done) {
    (void)user;
    (void)done;
    return !cancel_flag;
}

static void clear_bar(ingest_ui *ui) {
    if (ui->bar.tty && ui->bar.last_pct >= 0) {
        fputs("\r\033[K", stderr);
        ui->bar.last_pct = -1; /* redraw on the next update */
    }
}

static void on_event(void *user, pb_ingest_event ev, const char *path, const char *detail, size_t done, size_t total) {
    ingest_ui *ui = user;
    switch (ev) {
    case PB_INGEST_PROGRESS:
        if (!ui->quiet) cli_progress_update(&ui->bar, (double)done, (double)total);
        return;
    case PB_INGEST_SKIPPED:
        clear_bar(ui);
        fprintf(stderr, "pocketbrain ingest: skipped %s: %s\n", path, detail ? detail : "");
        return;
    case PB_INGEST_REMOVED:
        clear_bar(ui);
        if (!ui->quiet) fprintf(stderr, "pocketbrain ingest: removed %s (%s)\n", path, detail ? detail : "");
        return;
    case PB_INGEST_ADDED:
    case PB_INGEST_UPDATED:
    case PB_INGEST_UNCHANGED:
        if (ui->verbose) {
            clear_bar(ui);
            fprintf(stderr, "pocketbrain ingest: %s %s%s%s\n",
                    ev == PB_INGEST_ADDED     ? "added"
                    : ev == PB_INGEST_UPDATED ? "updated"
                                              : "unchanged",
                    path, detail ? ": " : "", detail ? detail : "");
        }
        return;
    }
}

PB_CMD(ingest) {
    const char *db = NULL, *vocab_path = NULL, *embed = NULL;
    const char **paths = calloc((size_t)argc + 1, sizeof *paths);
    int n_paths = 0;
    pb_ingest_params p = pb_ingest_default_params();
    ingest_ui ui = {0};
    if (!paths) return cli_fail("ingest", PB_ERR_NOMEM, "memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        const char *val = NULL;
        int r;
#define FLAG(name, alias, vp) (r = cli_flag("ingest", usage, argc, argv, &i, name, alias, vp))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) goto flag_fail;
            puts(usage);
            free(paths);
            return 0;
        } else if (FLAG("--db", NULL, &val) != 0) {
            if (r < 0) goto flag_fail;
            db = val;
        } else if (FLAG("--vocab", NULL, &val) != 0 || FLAG("--model", "-m", &val) != 0) {
            if (r < 0) goto flag_fail;
            if (!(vocab_path = cli_model_arg("ingest", val))) {
                free(paths);
                return 1;
            }
        } else if (FLAG("--prune", NULL, NULL) != 0) {
            if (r < 0) goto flag_fail;
            p.prune = true;
        } else if (FLAG("--embed-model", NULL, &val) != 0) {
            if (r < 0) goto flag_fail;
            if (!(embed = cli_model_arg("ingest", val))) {
                free(paths);
                return 1;
            }
        } else if (FLAG("--verbose", "-v", NULL) != 0) {
            if (r < 0) goto flag_fail;
            ui.verbose = true;
        } else if (FLAG("--quiet", "-q", NULL) != 0) {
            if (r < 0) goto flag_fail;
            ui.quiet = true;
        } else if (FLAG("--chunk-tokens", NULL, &val) != 0) {
            if (r < 0) goto flag_fail;
            if (!cli_parse_int("ingest", a, val, 16, 8192, &v)) goto usage_fail;
            p.chunk.target_tokens = v;
        } else if (FLAG("--overlap", NULL, &val) != 0) {
            if (r < 0) goto flag_fail;
            if (!cli_parse_int("ingest", a, val, 0, 4096, &v)) goto usage_fail;
            p.chunk.overlap_tokens = v;
        } else if (!strcmp(a, "--")) { /* the end of the options: every later argument is a PATH */
            while (++i < argc) paths[n_paths++] = argv[i];
        } else if (a[0] == '-' && a[1]) {
            free(paths);
            return cli_usage_error("ingest", usage, "unknown option '%s'", a);
        } else
            paths[n_paths++] = a;
#undef FLAG
    }
    if (!db) {
        free(paths);
        return cli_usage_error("ingest", usage, "--db KB.sqlite is required");
    }
    if (n_paths == 0) {
        free(paths);
        return cli_usage_error("ingest", usage, "no PATH to ingest");
    }
    if (p.chunk.overlap_tokens >= p.chunk.target_tokens) {
        free(paths);
        return cli_usage_error("ingest", usage, "--overlap must be smaller than --chunk-tokens");
    }
    /* A typo must not leave an empty knowledge base behind: with no database yet and not one named path
     * that could be ingested (a file or a folder: a FIFO, device or socket is skipped), stop before creating
     * anything. */
    struct stat dsb;
    if (lstat(db, &dsb) != 0 && errno == ENOENT) {
        int n_there = 0, err = ENOENT;
        for (int i = 0; i < n_paths; i++) {
            struct stat psb;
            if (stat(paths[i], &psb) != 0) continue;
            if (S_ISREG(psb.st_mode) || S_ISDIR(psb.st_mode))
                n_there++;
            else
                err = 0;
        }
        if (n_there == 0) {
            cli_err("ingest", "%s: %s; nothing to ingest, no database created", paths[0],
                    err ? strerror(err) : "not a regular file or folder");
            free(paths);
            return 1;
        }
    }
    pb_vocab *vocab = NULL;
    pb_store_counter counter;
    if (vocab_path) {
        pb_status s = pb_vocab_open(vocab_path, &vocab);
        if (s) {
            free(paths);
            return cli_fail("ingest", s, "tokenizer");
        }
    }
    pb_store_counter_init(&counter, vocab);
    p.chunk.count = pb_store_counter_fn;
    p.chunk.count_user = &counter;
    pb_store *st = NULL;
    pb_status s = pb_store_open(db, &st);
    if (s) {
        pb_vocab_free(vocab);
        free(paths);
        return cli_store_fail("ingest", s, db);
    }
    char how[600];
    if (vocab_path)
        snprintf(how, sizeof how, "tokenizer of %s", vocab_path);
    else
        snprintf(how, sizeof how, "estimate ceil(words*1.3)");
    pb_store_meta_set(st, "token_counts", how);
    catch_stops();
    p.cancel = &cancel_flag;
    p.on_event = on_event;
    p.user = &ui;
    cli_progress_init(&ui.bar, "ingest");
    pb_ingest_stats stats;
    s = pb_store_ingest(st, paths, n_paths, &p, &stats);
    if (!ui.quiet) cli_progress_done(&ui.bar);
    int rc = 0;
    if (s && s != PB_ERR_CANCELLED) {
        /* a database error mid-way (a full disk, a file size limit): the batches committed before it are in the
         * file, and the next run skips them by hash. Said once, the file named once ("ingest: ingest: store ...") */
        cli_err("ingest", "%s; the files committed before it are kept: run the same ingest again to finish",
                pb_last_error());
        rc = 1;
    } else {
        double mb = (double)stats.bytes / 1e6, sec = stats.ms / 1000.0;
        char why[96] = "";
        if (s == PB_ERR_CANCELLED) /* said with -q too: the knowledge base is not up to date */
            snprintf(why, sizeof why,
                     "interrupted by %s (committed work is kept; re-run to resume): ", stop_name(stop_sig));
        if (!ui.quiet || stats.skipped || s == PB_ERR_CANCELLED)
            printf("%s%lld files: %lld added, %lld updated, %lld unchanged, %lld skipped, %lld removed; %lld chunks;"
                   " %.1f MB in %.2f s (%.1f MB/s)\n",
                   why, (long long)stats.n_files, (long long)stats.added, (long long)stats.updated,
                   (long long)stats.unchanged, (long long)stats.skipped, (long long)stats.removed,
                   (long long)stats.n_chunks, mb, sec, sec > 0 ? mb / sec : 0.0);
        if (s == PB_ERR_CANCELLED)
            rc = 130;
        else if (stats.skipped)
            rc = 3;
    }
    if (embed && (rc == 0 || rc == 3)) {
        pb_embedder *e;
        int64_t n_emb = 0;
        double t0 = pb_time_ms();
        if ((s = pb_embedder_open(embed, 512, 0, &e)))
            rc = cli_fail("ingest", s, "embedding model");
        else {
            s = pb_store_embed_missing(st, e, embed_progress, NULL, &n_emb);
            if (s == PB_ERR_CANCELLED) { /* Ctrl-C or kill: the first one stops here too, not only a second */
                printf("interrupted by %s (the vectors made are kept; re-run to resume): ", stop_name(stop_sig));
                rc = 130;
            } else if (s) {
                rc = cli_fail("ingest", s, "embeddings");
            }
            if (!ui.quiet || s == PB_ERR_CANCELLED)
                printf("embedded %lld chunks with %s in %.1f s\n", (long long)n_emb, pb_embedder_name(e),
                       (pb_time_ms() - t0) / 1000.0);
            pb_embedder_free(e);
        }
    }
    pb_store_close(st);
    pb_store_counter_deinit(&counter);
    pb_vocab_free(vocab);
    free(paths);
    if (rc == 130 && stop_sig && stop_sig != SIGINT) { /* committed and said: now end as the signal would have */
        cli_flush_stdout();
        signal((int)stop_sig, SIG_DFL);
        raise((int)stop_sig);
    }
    return rc;
usage_fail: /* the value's parser said what is wrong: the usage line is left */
    fprintf(stderr, "usage: %s\n", usage);
flag_fail: /* cli_flag said it, usage line included */
    free(paths);
    return 2;
}
