/* cmd_pull.c -- `pocketbrain pull REF`: catalog name, hf:OWNER/REPO/FILE[@REV] or URL -> a checked model in
 * the library. Resolves the reference and the library name, holds the model's lock, runs tools/fetch.c,
 * opens the result as a model (the `info` checks) and only then renames it into place. */
#include "base/base.h"
#include "catalog.h"
#include "cli.h"
#include "fetch.h"
#include "gguf/gguf.h"
#include "library.h"
#include "model/model.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const usage =
    "pocketbrain pull REF [--name NAME] [--sha256 HEX] [--token TOKEN] [--insecure] [--quiet] [--force]\n"
    "                     [--retries N] [--timeout SEC]\n"
    "       pocketbrain pull --list\n"
    "  REF            a catalog name, NAME or NAME:QUANT (see --list), hf:OWNER/REPO/FILE.gguf[@REVISION],\n"
    "                 or an https:// URL (http:// only for loopback addresses or with --insecure)\n"
    "  --list         print the catalog\n"
    "  --name NAME    the name in the library (default: NAME:QUANT for catalog models, else the file name)\n"
    "  --sha256 HEX   expected SHA-256 of the file (64 hex digits); overrides the catalog and the hub\n"
    "  --token TOKEN  Hugging Face token for gated models (default: $HF_TOKEN)\n"
    "  --insecure     allow plain http:// to hosts other than loopback\n"
    "  --quiet        no progress output\n"
    "  --force        download again even when the library has the model\n"
    "  --retries N    retries after timeouts, lost connections and 5xx answers (default 5)\n"
    "  --timeout SEC  give up an attempt after SEC seconds without a byte (default 30)\n"
    "environment: PB_MODELS (library directory), PB_HF_ENDPOINT (hub mirror, default https://huggingface.co),\n"
    "             HF_TOKEN, PB_PULL_BACKOFF_MS (first retry wait, default 1000)\n"
    "exit status: 0 ok, 1 failure (nothing left at the target), 2 usage, 130 interrupted by Ctrl-C, 143 by SIGTERM\n"
    "             (the partial download is kept for the next pull)";

/* Ctrl-C or kill: the download stops, the .part kept for the next pull to resume. Ctrl-C then exits 130; SIGTERM ends
 * the command by that signal (143 to a shell), as ingest, chat, quantize and convert do (it gave 130, Ctrl-C's). */
static volatile sig_atomic_t stop_sig;
static void on_signal(int sig) {
    stop_sig = sig;
    fetch_interrupt();
}

/* What a REF resolves to. */
typedef struct source {
    char url[2048];
    char name[LIB_NAME_MAX + 1]; /* default library name */
    char sha256[65];             /* pinned by the catalog, or "" */
    char license[256];
    bool hub;
} source;

/* Library name from a file name: the stem, other characters as '-'. */
static void name_from_file(const char *file, char *out, size_t cap) {
    const char *b = strrchr(file, '/');
    b = b ? b + 1 : file;
    size_t n = strcspn(b, "?#");
    if (n > 5 && strncasecmp(b + n - 5, ".gguf", 5) == 0) n -= 5;
    if (n >= cap) n = cap - 1;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        out[i] = isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-' ? c : '-';
    }
    out[n] = 0;
    while (out[0] == '.' || out[0] == '-') memmove(out, out + 1, strlen(out));
}

/* Characters allowed in hub paths (no spaces, quotes, '..' traversal is rejected separately). */
static bool path_chars_ok(const char *s) {
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || strchr("._-/+", *s))) return false;
    return true;
}

static const char *endpoint(void) {
    const char *e = getenv("PB_HF_ENDPOINT");
    return e && *e ? e : "https://huggingface.co";
}

/* Resolves REF. false after printing why. */
static bool resolve(const char *ref, source *s) {
    memset(s, 0, sizeof *s);
    const char *ep = endpoint();
    size_t el = strlen(ep);
    while (el > 0 && ep[el - 1] == '/') el--;
    if (strncmp(ref, "hf:", 3) == 0) {
        char path[1024], rev[128] = "main";
        snprintf(path, sizeof path, "%s", ref + 3);
        char *at = strrchr(path, '@');
        if (at) {
            *at = 0;
            snprintf(rev, sizeof rev, "%s", at + 1);
        }
        const char *s1 = strchr(path, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
        if (!s2 || !s2[1] || path[0] == '/' || strstr(path, "..") || strstr(path, "//") || !path_chars_ok(path) ||
            !rev[0] || !path_chars_ok(rev) || strstr(rev, "..")) {
            cli_err("pull", "'%s' is not hf:OWNER/REPO/FILE.gguf[@REVISION]", ref);
            return false;
        }
        snprintf(s->url, sizeof s->url, "%.*s/%.*s/resolve/%s/%s", (int)el, ep, (int)(s2 - path), path, rev, s2 + 1);
        name_from_file(s2 + 1, s->name, sizeof s->name);
        s->hub = true;
    } else if (strncmp(ref, "https://", 8) == 0 || strncmp(ref, "http://", 7) == 0) {
        if (strlen(ref) >= sizeof s->url || strpbrk(ref, " \t\r\n")) {
            cli_err("pull", "bad URL '%s'", ref);
            return false;
        }
        snprintf(s->url, sizeof s->url, "%s", ref);
        name_from_file(ref + (ref[4] == 's' ? 8 : 7), s->name, sizeof s->name);
        s->hub = strncmp(ref, ep, el) == 0 && (ref[el] == '/' || ref[el] == 0);
    } else {
        catalog_hit h;
        char why[512];
        int r = catalog_find(ref, &h, why, sizeof why);
        if (r < 0) {
            cli_err("pull", "%s", why);
            return false;
        }
        if (r == 0) {
            cli_err("pull",
                    "'%s' is not in the catalog (pocketbrain pull --list); give hf:OWNER/REPO/FILE.gguf or an https:// "
                    "URL",
                    ref);
            return false;
        }
        snprintf(s->url, sizeof s->url, "%.*s/%s/resolve/main/%s", (int)el, ep, h.repo, h.file);
        snprintf(s->name, sizeof s->name, "%.96s:%.31s", h.name, h.quant);
        snprintf(s->sha256, sizeof s->sha256, "%s", h.sha256);
        snprintf(s->license, sizeof s->license, "%s", h.license);
        s->hub = true;
    }
    return true;
}

/* The `info` checks on the downloaded file: GGUF structure, hyperparameters, every tensor the architecture
 * needs. Returns 0 ok, 1 broken (why filled), 2 well-formed but an architecture this build does not run. */
static int check_model(const char *path, char *why, size_t cap) {
    pb_gguf *g;
    pb_status s = pb_gguf_open(path, &g);
    if (s) {
        snprintf(why, cap, "%s", pb_last_error()[0] ? pb_last_error() : pb_status_name(s));
        return 1;
    }
    pb_hparams hp;
    memset(&hp, 0, sizeof hp);
    int rc = 0;
    if ((s = pb_hparams_from_gguf(g, &hp)) != PB_OK)
        rc = s == PB_ERR_UNSUPPORTED ? 2 : 1;
    else if ((s = pb_arch_check_tensors(g, &hp, NULL, NULL)) != PB_OK)
        rc = 1;
    if (rc) snprintf(why, cap, "%s", pb_last_error()[0] ? pb_last_error() : pb_status_name(s));
    pb_gguf_close(g);
    return rc;
}

static void lowercase(char *s) {
    for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

static bool is_hex64(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return n == 64;
}

PB_CMD(pull) {
    const char *ref = NULL, *name = NULL, *sha = NULL, *token = getenv("HF_TOKEN");
    bool insecure = false, quiet = false, force = false, list = false;
    long retries = 5, timeout = 30, backoff = 1000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("pull", usage, argc, argv, &i, name, alias, val))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            printf("usage: %s\n", usage);
            return 0;
        } else if (FLAG("--list", NULL, NULL) != 0) {
            if (r < 0) return 2;
            list = true;
        } else if (FLAG("--name", NULL, &v) != 0) {
            if (r < 0) return 2;
            name = v;
        } else if (FLAG("--sha256", NULL, &v) != 0) {
            if (r < 0) return 2;
            sha = v;
        } else if (FLAG("--token", NULL, &v) != 0) {
            if (r < 0) return 2;
            token = v;
        } else if (FLAG("--retries", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int("pull", a, v, 0, 100, &retries)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--timeout", NULL, &v) != 0) {
            if (r < 0 || !cli_parse_int("pull", a, v, 1, 3600, &timeout)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--insecure", NULL, NULL) != 0) {
            if (r < 0) return 2;
            insecure = true;
        } else if (FLAG("--quiet", "-q", NULL) != 0) {
            if (r < 0) return 2;
            quiet = true;
        } else if (FLAG("--force", NULL, NULL) != 0) {
            if (r < 0) return 2;
            force = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("pull", usage, "unknown flag '%s'", a);
        } else if (!ref) {
            ref = a;
        } else {
            return cli_usage_error("pull", usage, "unexpected argument '%s' (one model at a time)", a);
        }
#undef FLAG
    }
    if (list) {
        char why[512];
        if (!catalog_print(stdout, why, sizeof why)) {
            cli_err("pull", "%s", why);
            return 1;
        }
        return 0;
    }
    if (!ref) return cli_usage_error("pull", usage, "missing REF (a catalog name, hf:... or https://...)");
    const char *env_backoff = getenv("PB_PULL_BACKOFF_MS");
    if (env_backoff && *env_backoff && !cli_parse_int("pull", "PB_PULL_BACKOFF_MS", env_backoff, 0, 60000, &backoff))
        return 2;
    char want[65] = "";
    if (sha) {
        if (!is_hex64(sha)) return cli_usage_error("pull", usage, "--sha256 expects 64 hex digits, got '%s'", sha);
        snprintf(want, sizeof want, "%s", sha);
        lowercase(want);
    }
    source src;
    if (!resolve(ref, &src)) return 1;
    if (strncmp(src.url, "http://", 7) == 0 && !insecure && !fetch_is_loopback(src.url)) {
        cli_err("pull", "refusing plain http:// to '%s' (only loopback addresses); use https:// or --insecure",
                src.url);
        return 1;
    }
    if (name) snprintf(src.name, sizeof src.name, "%s", name);
    if (!lib_name_ok(src.name))
        return cli_usage_error("pull", usage, "'%s' is not a usable library name (1..%d of A-Z a-z 0-9 . _ : -)",
                               src.name, LIB_NAME_MAX);
    if (!want[0] && src.sha256[0]) snprintf(want, sizeof want, "%s", src.sha256);
    if (!lib_ensure_dir("pull")) return 1;

    /* one pull per model at a time: a second one waits, then finds the model there (or resumes the part) */
    int lock = lib_lock(src.name, false);
    if (lock == -2) {
        if (!quiet) fprintf(stderr, "pocketbrain pull: another pull of %s is running; waiting for it\n", src.name);
        lock = lib_lock(src.name, true);
    }
    if (lock < 0) {
        cli_err("pull", "cannot lock %s in %s: %s", src.name, lib_dir(), strerror(errno));
        return 1;
    }
    int rc = 1;
    char target[PATH_MAX], part[PATH_MAX], state[PATH_MAX], err[1024], why[1024];
    if (!lib_path(src.name, ".gguf", target, sizeof target) || !lib_path(src.name, ".gguf.part", part, sizeof part) ||
        !lib_path(src.name, ".gguf.part.json", state, sizeof state)) {
        cli_err("pull", "the library path is too long");
        goto done;
    }
    lib_entry e;
    if (!force && lib_get(src.name, &e)) {
        bool same = strcmp(e.source, src.url) == 0 && (!want[0] || strcmp(e.sha256, want) == 0);
        if (same && e.pulled_size && e.pulled_size != e.size) { /* truncated or overwritten since: fetch again */
            fprintf(stderr,
                    "pocketbrain pull: %s in the library is damaged (%llu bytes, %llu when it was pulled); "
                    "downloading it again\n",
                    src.name, (unsigned long long)e.size, (unsigned long long)e.pulled_size);
        } else {
            if (same && !quiet)
                printf("%s is already in the library (%s); 'pocketbrain verify %s' re-checks its sha256, --force "
                       "downloads it again\n",
                       src.name, e.file, src.name);
            else if (!same)
                cli_err("pull", "the library already has a model named %s (from %s); pick another --name, or --force",
                        src.name, e.source[0] ? e.source : "a file put there by hand");
            rc = same ? 0 : 1;
            goto done;
        }
    }

    /* a link, directory or device at the model's name is refused before the download, not after it (checked again
     * before the rename) */
    if (pb_output_check(target) != PB_OK) {
        cli_err("pull", "%s", pb_last_error());
        goto done;
    }
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    fetch_opts fo = {.url = src.url,
                     .token = src.hub ? token : NULL,
                     .allow_http = insecure || fetch_is_loopback(src.url),
                     .insecure = insecure,
                     .hub = src.hub,
                     .part = part,
                     .state = state,
                     .pinned_sha = want[0] ? want : NULL,
                     .pinned_by = sha ? "--sha256" : "the catalog",
                     .retries = (int)retries,
                     .backoff_ms = backoff,
                     .stall_s = timeout,
                     .quiet = quiet,
                     .label = src.name};
    if (!quiet) fprintf(stderr, "pulling %s from %s\n", src.name, src.url);
    fetch_result fr;
    int f = fetch_file(&fo, &fr, err, sizeof err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (f != FETCH_OK) {
        cli_err("pull", "%s: %s", src.name, err);
        rc = f == FETCH_INTERRUPTED ? 130 : 1;
        goto done;
    }

    /* the `info` checks before the model is declared ready */
    int chk = check_model(part, why, sizeof why);
    if (chk == 1) {
        cli_err("pull", "%s: the downloaded file is not a usable model (%s); discarded", src.name, why);
        unlink(part);
        unlink(state);
        goto done;
    }
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "%s", src.name);
    snprintf(e.file, sizeof e.file, "%s", target);
    lib_probe(part, &e, why, sizeof why);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(e.pulled_at, sizeof e.pulled_at, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(e.sha256, sizeof e.sha256, "%s", fr.sha256);
    snprintf(e.verified_by, sizeof e.verified_by, "%s", fr.verified_by[0] ? fr.verified_by : "none");
    snprintf(e.source, sizeof e.source, "%s", src.url);
    /* the model file is renamed into place: only over nothing or a regular file (never a link or device) */
    if (pb_output_check(target) != PB_OK) {
        cli_err("pull", "%s", pb_last_error());
        goto done;
    }
    if (!lib_write_manifest(&e)) {
        cli_err("pull", "cannot write the manifest of %s in %s: %s", src.name, lib_dir(), pb_last_error());
        goto done;
    }
    if (rename(part, target) != 0) {
        cli_err("pull", "cannot put %s into the library (%s): %s", src.name, target, strerror(errno));
        goto done;
    }
    pb_sync_dir_of(target); /* the rename itself durable */
    unlink(state);
    printf("pulled %s: %s (%.1f MiB, %s %s, context %d)\n", src.name, target, (double)e.size / (1024.0 * 1024.0),
           e.arch[0] ? e.arch : "?", e.quant[0] ? e.quant : "?", e.n_ctx);
    printf("sha256 %s (%s)\n", fr.sha256,
           fr.verified_by[0] ? fr.verified_by : "not verified: the server published no digest; pin one with --sha256");
    if (src.license[0]) printf("license: %s\n", src.license);
    if (chk == 2)
        cli_err("pull", "warning: %s is a valid GGUF, but this pocketbrain cannot run it yet: %s", src.name, why);
    else if (!quiet)
        printf("try it: pocketbrain chat -m %s\n", src.name);
    rc = 0;
done:
    lib_unlock(lock);
    if (rc == 130 && stop_sig == SIGTERM) { /* said and kept: now end as the signal would have */
        cli_flush_stdout();
        signal(SIGTERM, SIG_DFL);
        raise(SIGTERM);
    }
    return rc;
}
