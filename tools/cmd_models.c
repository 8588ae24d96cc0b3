/* cmd_models.c -- `pocketbrain models` (list the library) and `pocketbrain rm NAME...` (remove from it). */
#include "cli.h"
#include "cli_common.h"
#include "library.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const models_usage = "pocketbrain models [--json]\n"
                                        "  lists the model library ($PB_MODELS, $XDG_DATA_HOME/pocketbrain/models or\n"
                                        "  ~/.local/share/pocketbrain/models): name, file, size, architecture,\n"
                                        "  quantization, training context, when it was pulled";

static const char *const rm_usage =
    "pocketbrain rm [--] NAME...\n"
    "  removes models from the library (the file, its manifest and any partial download)";

PB_CMD(models) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        int r;
        if ((r = cli_flag("models", models_usage, argc, argv, &i, "--help", "-h", NULL)) != 0) {
            if (r < 0) return 2;
            printf("usage: %s\n", models_usage);
            return 0;
        } else if ((r = cli_flag("models", models_usage, argc, argv, &i, "--json", NULL, NULL)) != 0) {
            if (r < 0) return 2;
            json = true;
        } else {
            return cli_usage_error("models", models_usage, "unexpected argument '%s'", argv[i]);
        }
    }
    if (!lib_dir_usable("models")) return 1;
    int n;
    lib_entry *v = lib_list(&n);
    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "library", lib_dir());
        cJSON *arr = cJSON_AddArrayToObject(root, "models");
        for (int i = 0; i < n; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", v[i].name);
            cJSON_AddStringToObject(o, "file", v[i].file);
            cJSON_AddNumberToObject(o, "size", (double)v[i].size);
            cJSON_AddStringToObject(o, "architecture", v[i].arch);
            cJSON_AddStringToObject(o, "quantization", v[i].quant);
            cJSON_AddNumberToObject(o, "context", v[i].n_ctx);
            cJSON_AddStringToObject(o, "pulled_at", v[i].pulled_at);
            cJSON_AddStringToObject(o, "sha256", v[i].sha256);
            cJSON_AddStringToObject(o, "source", v[i].source);
            cJSON_AddItemToArray(arr, o);
        }
        cli_json_print(root, true);
    } else if (n == 0) {
        printf("no models in %s yet; get one with: pocketbrain pull gemma-2-2b-it\n", lib_dir());
    } else {
        printf("%-28s %-36s %10s  %-8s %-8s %7s  %s\n", "NAME", "FILE", "SIZE", "ARCH", "QUANT", "CONTEXT", "PULLED");
        for (int i = 0; i < n; i++) {
            const char *b = strrchr(v[i].file, '/');
            char size[32];
            double s = (double)v[i].size;
            if (s >= 1024.0 * 1024 * 1024)
                snprintf(size, sizeof size, "%.2f GiB", s / (1024.0 * 1024 * 1024));
            else
                snprintf(size, sizeof size, "%.1f MiB", s / (1024.0 * 1024));
            printf("%-28s %-36s %10s  %-8s %-8s %7d  %s\n", v[i].name, b ? b + 1 : v[i].file, size,
                   v[i].arch[0] ? v[i].arch : "?", v[i].quant[0] ? v[i].quant : "?", v[i].n_ctx,
                   v[i].pulled_at[0] ? v[i].pulled_at : "?");
        }
        printf("(library: %s)\n", lib_dir());
    }
    free(v);
    return 0;
}

PB_CMD(rm) {
    /* every option is read before anything is removed: `rm a --help` prints the help and removes nothing, and a
     * mistyped flag is refused, not taken for a model's name; names after `--` may start with '-' */
    int n_names = 0, end = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            n_names += argc - i - 1;
            end = i;
            break;
        }
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: %s\n", rm_usage);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1])
            return cli_usage_error("rm", rm_usage, "unknown flag '%s' (nothing was removed)", argv[i]);
        n_names++;
    }
    if (n_names == 0) return cli_usage_error("rm", rm_usage, "missing NAME (see pocketbrain models)");
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (i == end) continue; /* the `--` itself */
        const char *name = argv[i];
        char path[PATH_MAX], part[PATH_MAX];
        lib_entry e;
        bool have = lib_get(name, &e);
        bool has_part = lib_name_ok(name) && lib_path(name, ".gguf.part", part, sizeof part) && access(part, F_OK) == 0;
        if (!have && !has_part) {
            cli_err("rm", "no model named '%s' in %s (see pocketbrain models)", name, lib_dir());
            rc = 1;
            continue;
        }
        int lock = lib_lock(name, false);
        if (lock < 0) {
            if (lock == -2)
                cli_err("rm", "%s is being pulled right now; try again when that finishes", name);
            else
                cli_err("rm", "cannot lock %s: %s", name, strerror(errno));
            rc = 1;
            continue;
        }
        /* the model's packed-weights cache (as large as the model) goes with it; its name needs the model's real
         * path, so it is found before the model is unlinked */
        char cache[PATH_MAX] = "";
        const char *cdir = cli_pack_cache_dir();
        if (have && cdir &&
            !(lib_path(name, ".gguf", path, sizeof path) &&
              pb_pack_cache_file(cdir, path, cache, sizeof cache) == PB_OK))
            cache[0] = 0;
        static const char *const suffixes[] = {".gguf", ".json", ".gguf.part", ".gguf.part.json"};
        bool bad = false;
        for (size_t k = 0; k < sizeof suffixes / sizeof suffixes[0]; k++)
            if (lib_path(name, suffixes[k], path, sizeof path) && unlink(path) != 0 && errno != ENOENT) {
                cli_err("rm", "cannot remove '%s': %s", path, strerror(errno));
                bad = true;
            }
        if (!bad && cache[0] && unlink(cache) != 0 && errno != ENOENT) {
            cli_err("rm", "cannot remove the packed-weights cache '%s': %s", cache, strerror(errno));
            bad = true;
        }
        lib_unlock(lock);
        if (bad)
            rc = 1;
        else
            printf("removed %s\n", name);
    }
    return rc;
}
