/* cli_common.c -- shared flags of run/chat/bench, model + session opening with memory admission, and
 * the `info --mem` report. Prints and exits only through its callers' return codes. */
#include "cli_common.h"
#include "library.h"
#include "base/base.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "server/server.h"
#include "tensor/types.h"
#include "tokenizer/utf8.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

const char *const cli_opts_help =
    "model and context:\n"
    "  -m, --model FILE|NAME  GGUF model file or library name (default: $PB_MODEL, else models/default.gguf)\n"
    "  -t, --threads N        threads (default: physical cores)\n"
    "  -c, --ctx N            context length in tokens (default: min(model, 4096))\n"
    "  -b, --batch N          prefill chunk size (default 512)\n"
    "  --kv-type T            KV cache type: f16 (default), q8_0, f32\n"
    "  --context-shift        when the context is full, drop the oldest turns (keeps the system prompt)\n"
    "                         instead of stopping with an error\n"
    "  --warmup               run one token at start so the first answer is not cold\n"
    "  --gpu, --no-gpu        run on the GPU (fail when none is usable) / on the CPU (default: GPU when usable)\n"
    "  --no-pack-cache        repack the weights at open, without reading or writing the packed-weights cache\n"
    "                         ($XDG_CACHE_HOME/pocketbrain, else ~/.cache/pocketbrain; PB_PACK_CACHE=off: same)\n"
    "memory and heat:\n"
    "  --mem-limit SIZE       memory the model + KV may use (e.g. 2G; default: detected)\n"
    "  --fit                  when it does not fit, use a q8_0 KV cache and/or a shorter context\n"
    "  --thermal MODE         auto (hottest /sys/class/thermal zone), off (default), or a file with\n"
    "                         millidegrees C: when hot, fewer threads and pauses between tokens\n"
    "sampling (a preset, then any field overridden):\n"
    "  --preset NAME          precise (T 0.35, top-p 0.8), balanced (T 0.6, top-p 0.9, default),\n"
    "                         creative (T 0.9, top-p 0.95), code (T 0.2, top-p 0.6)\n"
    "  --temp T               temperature (0 = greedy)\n"
    "  --top-k N              keep the N most likely tokens (0 = off; presets: 40)\n"
    "  --top-p P              nucleus mass (1 = off)\n"
    "  --min-p P              drop tokens below P times the best one (presets: 0.05)\n"
    "  --repeat-penalty R     llama.cpp-style repetition penalty (1 = off)\n"
    "  --presence-penalty X   OpenAI-style presence penalty (0 = off)\n"
    "  --frequency-penalty X  OpenAI-style frequency penalty (0 = off)\n"
    "  --repeat-last-n N      tokens the penalties look back over (default 64)\n"
    "  --seed N               random seed (same seed and settings -> same text; default 42)\n"
    "  -n, --max-tokens N     stop after N tokens (0 = until the model stops)\n"
    "  --stop TEXT            stop string, never printed (repeatable)\n"
    "  --system TEXT          system prompt\n"
    "  --think                Gemma 4: turn thinking on (<|think|> in the system turn); the model's reasoning\n"
    "                         (its thought channel) is not printed, only the answer\n"
    "  --show-thinking        print the thought channel to stderr as it streams\n"
    "  --keep-thinking        chat only: keep each turn's thought in the context for the next turns (by default\n"
    "                         it leaves when the next turn starts, as Google's Gemma 4 guide asks)";

const char *cli_pack_cache_dir(void) {
    static char dir[4096];
    const char *off = getenv("PB_PACK_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (off && strcmp(off, "off") == 0) return NULL;
    int n;
    if (xdg && xdg[0] == '/') /* the XDG spec: a relative value is invalid and ignored */
        n = snprintf(dir, sizeof dir, "%s/pocketbrain", xdg);
    else if (home && home[0])
        n = snprintf(dir, sizeof dir, "%s/.cache/pocketbrain", home);
    else
        return NULL;
    return n > 0 && (size_t)n < sizeof dir ? dir : NULL;
}

void cli_opts_init(cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->preset = PB_PRESET_BALANCED;
    o->kv_type = PB_KV_F16;
    o->n_batch = 512;
    o->gpu = -1;
}

const char *cli_kv_name(pb_kv_type t) { return t == PB_KV_Q8_0 ? "q8_0" : t == PB_KV_F32 ? "f32" : "f16"; }

bool cli_parse_kv(const char *cmd, const char *s, pb_kv_type *out) {
    if (strcmp(s, "f16") == 0)
        *out = PB_KV_F16;
    else if (strcmp(s, "q8_0") == 0 || strcmp(s, "q8") == 0)
        *out = PB_KV_Q8_0;
    else if (strcmp(s, "f32") == 0)
        *out = PB_KV_F32;
    else {
        cli_err(cmd, "--kv-type expects f16, q8_0 or f32, got '%s'", s);
        return false;
    }
    return true;
}

int cli_opts_parse(cli_opts *o, const char *cmd, const char *usage, int argc, char **argv, int *i) {
    const char *v = NULL, *a = argv[*i];
    long l;
    int r;
#define VALUE(lng, shrt) (r = cli_flag(cmd, usage, argc, argv, i, lng, shrt, &v))
#define SWITCH(lng, alt) (r = cli_flag(cmd, usage, argc, argv, i, lng, alt, NULL))
/* the value's parser (or cli_flag) already said what is wrong: only the usage line is left to print */
#define BAD() return (r < 0 ? 2 : cli_usage_line(usage))
    if (SWITCH("--gpu", "--no-gpu") != 0) {
        if (r < 0) return 2;
        o->gpu = a[2] == 'g';
    } else if (SWITCH("--no-pack-cache", NULL) != 0) {
        if (r < 0) return 2;
        o->no_pack_cache = true;
    } else if (VALUE("--model", "-m") != 0) {
        if (r < 0) return 2;
        o->model = v;
    } else if (VALUE("--threads", "-t") != 0) {
        if (r < 0 || !cli_parse_int(cmd, a, v, 1, 256, &l)) BAD();
        o->n_threads = (int)l;
    } else if (VALUE("--ctx", "-c") != 0) {
        if (r < 0 || !cli_parse_int(cmd, a, v, CLI_MIN_CTX, CLI_MAX_CTX, &l)) BAD();
        o->n_ctx = (int)l;
    } else if (VALUE("--batch", "-b") != 0) {
        if (r < 0 || !cli_parse_int(cmd, a, v, 1, 65536, &l)) BAD();
        o->n_batch = (int)l;
    } else if (VALUE("--preset", NULL) != 0) {
        if (r < 0) return 2;
        if (pb_preset_from_name(v, &o->preset) != PB_OK)
            return cli_usage_error(cmd, usage, "--preset: %s", pb_last_error());
    } else if (VALUE("--temp", NULL) != 0) {
        if (r < 0 || !cli_parse_float(cmd, a, v, 0, 100, &o->temp)) BAD();
        o->has_temp = true;
    } else if (VALUE("--top-k", NULL) != 0) {
        if (r < 0 || !cli_parse_int(cmd, a, v, 0, 1 << 30, &o->top_k)) BAD();
        o->has_top_k = true;
    } else if (VALUE("--top-p", NULL) != 0) {
        if (r < 0 || !cli_parse_float(cmd, a, v, 1e-6, 1, &o->top_p)) BAD();
        o->has_top_p = true;
    } else if (VALUE("--min-p", NULL) != 0) {
        if (r < 0 || !cli_parse_float(cmd, a, v, 0, 1, &o->min_p)) BAD();
        o->has_min_p = true;
    } else if (VALUE("--repeat-penalty", NULL) != 0) {
        if (r < 0 || !cli_parse_float(cmd, a, v, 1e-3, 100, &o->rep)) BAD();
        o->has_rep = true;
    } else if (VALUE("--presence-penalty", NULL) != 0) {
        if (r < 0 || !cli_parse_float(cmd, a, v, -100, 100, &o->pres)) BAD();
        o->has_pres = true;
    } else if (VALUE("--frequency-penalty", NULL) != 0) {
        if (r < 0 || !cli_parse_float(cmd, a, v, -100, 100, &o->freq)) BAD();
        o->has_freq = true;
    } else if (VALUE("--repeat-last-n", NULL) != 0) {
        if (r < 0 || !cli_parse_int(cmd, a, v, 0, 1 << 20, &o->last_n)) BAD();
        o->has_last_n = true;
    } else if (VALUE("--seed", "-s") != 0) {
        if (r < 0 || !cli_parse_u64(cmd, a, v, &o->seed)) BAD();
        o->has_seed = true;
    } else if (VALUE("--max-tokens", "-n") != 0) {
        if (r < 0 || !cli_parse_int(cmd, a, v, 0, 1 << 24, &l)) BAD();
        o->max_tokens = (int)l;
    } else if (VALUE("--stop", NULL) != 0) {
        if (r < 0) return 2;
        if (o->n_stop >= CLI_MAX_STOP) return cli_usage_error(cmd, usage, "at most %d --stop strings", CLI_MAX_STOP);
        if (!*v || strlen(v) > 256) return cli_usage_error(cmd, usage, "--stop needs 1..256 bytes");
        if (!cli_check_text(cmd, "--stop", v, strlen(v))) BAD();
        o->stop[o->n_stop++] = v;
    } else if (VALUE("--system", NULL) != 0) {
        if (r < 0 || !cli_check_text(cmd, "--system", v, strlen(v))) BAD();
        o->system = v;
    } else if (VALUE("--kv-type", NULL) != 0) {
        if (r < 0 || !cli_parse_kv(cmd, v, &o->kv_type)) BAD();
    } else if (VALUE("--mem-limit", NULL) != 0) {
        if (r < 0 || !cli_parse_size(cmd, a, v, &o->mem_limit)) BAD();
        if (o->mem_limit == 0) return cli_usage_error(cmd, usage, "--mem-limit must be above 0");
    } else if (VALUE("--thermal", NULL) != 0) {
        if (r < 0) BAD();
        if (!*v) return cli_usage_error(cmd, usage, "--thermal needs auto, off or a file path");
        o->thermal = v;
    } else if (SWITCH("--fit", NULL) != 0) {
        if (r < 0) return 2;
        o->fit = true;
    } else if (SWITCH("--context-shift", NULL) != 0) {
        if (r < 0) return 2;
        o->context_shift = true;
    } else if (SWITCH("--warmup", NULL) != 0) {
        if (r < 0) return 2;
        o->warmup = true;
    } else if (SWITCH("--think", NULL) != 0) {
        if (r < 0) return 2;
        o->think = true;
    } else if (SWITCH("--show-thinking", NULL) != 0) {
        if (r < 0) return 2;
        o->show_thinking = true;
    } else if (SWITCH("--keep-thinking", NULL) != 0) {
        if (r < 0) return 2;
        o->keep_thinking = true;
    } else {
        return 0;
    }
    return 1;
#undef VALUE
#undef SWITCH
#undef BAD
}

bool cli_check_text(const char *cmd, const char *what, const char *text, size_t len) {
    const uint8_t *u = (const uint8_t *)text;
    for (size_t i = 0; i < len;) {
        int l = u[i] ? pb_utf8_char_len(u + i, len - i) : 0;
        if (!l) {
            if (u[i] == 0)
                cli_err(cmd, "%s contains a NUL byte at byte %zu: it is not text", what, i);
            else
                cli_err(cmd,
                        "%s is not valid UTF-8 (byte %zu is 0x%02x): convert it first, e.g. "
                        "iconv -f WINDOWS-1252 -t UTF-8",
                        what, i, u[i]);
            return false;
        }
        i += (size_t)l;
    }
    return true;
}

pb_sampler_params cli_opts_sampler(const cli_opts *o) {
    pb_sampler_params p = pb_sampler_preset(o->preset);
    if (o->has_temp) p.temperature = (float)o->temp;
    if (o->has_top_k) p.top_k = (int)o->top_k;
    if (o->has_top_p) p.top_p = (float)o->top_p;
    if (o->has_min_p) p.min_p = (float)o->min_p;
    if (o->has_rep) p.repeat_penalty = (float)o->rep;
    if (o->has_pres) p.presence_penalty = (float)o->pres;
    if (o->has_freq) p.frequency_penalty = (float)o->freq;
    if (o->has_last_n) p.penalty_last_n = (int)o->last_n;
    if (o->has_seed) p.seed = o->seed;
    return p;
}

pb_session_params cli_opts_session(const cli_opts *o) {
    pb_session_params p = pb_session_default_params();
    p.n_ctx = o->n_ctx;
    p.n_threads = o->n_threads;
    p.n_batch = o->n_batch;
    p.kv_type = o->kv_type;
    p.ctx_policy = o->context_shift ? PB_CTX_SHIFT : PB_CTX_ERROR;
    p.warmup = o->warmup;
    p.thermal = o->thermal;
    p.think = o->think;
    p.keep_thoughts = o->keep_thinking;
    p.ring_extra = o->ring_extra;
    return p;
}

/* --show-thinking: the thought channel streams to stderr (stdout keeps the answer alone). */
static bool thought_to_stderr(const char *piece, size_t len, void *user) {
    (void)user;
    fwrite(piece, 1, len, stderr);
    fflush(stderr);
    return true;
}

pb_gen_params cli_opts_gen(const cli_opts *o) {
    pb_gen_params g = pb_gen_default_params();
    g.sampler = cli_opts_sampler(o);
    g.max_tokens = o->max_tokens;
    g.stop = o->n_stop ? o->stop : NULL;
    g.n_stop = o->n_stop;
    if (o->show_thinking) g.thought_cb = thought_to_stderr;
    return g;
}

void cli_close_model(const char *cmd, pb_model *m, bool interrupted) {
    cli_wait_pack_cache(cmd, m, interrupted);
    pb_model_close(m);
}

void cli_wait_pack_cache(const char *cmd, pb_model *m, bool interrupted) {
    if (pb_model_pack_cache_busy(m)) {
        /* the command's own SIGINT handler (cancel a generation) has nothing left to cancel: Ctrl-C, kill or a
         * closed terminal during the wait ends the process and removes the half-written cache file */
        cli_install_cleanup_handlers();
        if (interrupted) raise(SIGINT);
        if (isatty(2))
            cli_err(cmd, "first run of this model: finishing its packed-weights cache (later starts take a fraction "
                         "of a second; Ctrl-C skips it)...");
    }
    pb_model_pack_cache_wait(m);
}

int cli_open(const char *cmd, const cli_opts *o, pb_model **m, pb_session **s, double *load_ms) {
    *m = NULL;
    *s = NULL;
    const char *path = o->model ? cli_model_arg(cmd, o->model) : cli_default_model();
    if (o->model && !path) return 1;
    if (!path) {
        cli_err(cmd, "no model: pass -m MODEL.gguf (models/default.gguf was not found and $PB_MODEL is not set)");
        return 1;
    }
    pb_session_params sp = cli_opts_session(o);
    pb_mem_estimate e;
    pb_status st = pb_session_admit(path, &sp, o->mem_limit, o->fit, &e);
    if (st == PB_ERR_MEMORY_LIMIT) {
        cli_err(cmd, "not enough memory for '%s': %s", path, pb_last_error());
        return 1;
    }
    /* the file was read; an option is what it refuses ("n_ctx 8192 exceeds the model's training context 512") */
    if (st == PB_ERR_INVALID_ARG) return cli_fail(cmd, st, "cannot use these options with this model");
    if (st != PB_OK) return cli_fail(cmd, st, "cannot read model");
    if (e.adjusted)
        cli_err(cmd, "--fit: using a %s KV cache and n_ctx %d (%.0f MiB of %.0f MiB available)",
                cli_kv_name(sp.kv_type), sp.n_ctx, (double)e.total / MIB, (double)e.available / MIB);
    double t0 = pb_time_ms();
    pb_model_params mp = pb_model_default_params();
    mp.n_threads = o->n_threads;
    mp.mem_limit = o->mem_limit;
    mp.gpu = o->gpu;
    mp.pack_cache_dir = o->no_pack_cache ? NULL : cli_pack_cache_dir();
    mp.pack_cache_background = true; /* the first answer does not wait for the cache file (cli_close_model) */
    if ((st = pb_model_open(path, &mp, m)) != PB_OK) return cli_fail(cmd, st, "cannot open model");
    if ((st = pb_session_new(*m, &sp, s)) != PB_OK) {
        pb_model_close(*m);
        *m = NULL;
        return cli_fail(cmd, st, "cannot create session");
    }
    if (load_ms) *load_ms = pb_time_ms() - t0;
    return 0;
}

/* ---- info --mem --------------------------------------------------------------------------------- */

int cli_mem_parse(cli_mem_opts *o, const char *cmd, const char *usage, int argc, char **argv, int *i) {
    const char *v, *a = argv[*i];
    long l;
    int r;
    if ((r = cli_flag(cmd, usage, argc, argv, i, "--mem", NULL, NULL)) != 0) {
        if (r < 0) return 2;
        o->on = true;
        return 1;
    }
    if ((r = cli_flag(cmd, usage, argc, argv, i, "--think", NULL, NULL)) != 0) {
        if (r < 0) return 2;
        o->think = true;
        if (!o->given) o->given = a;
        return 1;
    }
    if ((r = cli_flag(cmd, usage, argc, argv, i, "--ctx", "-c", &v)) != 0) {
        if (r < 0) return 2;
        if (!o->given) o->given = a;
        if (!cli_parse_int(cmd, a, v, CLI_MIN_CTX, CLI_MAX_CTX, &l)) return cli_usage_line(usage);
        o->n_ctx = (int)l;
        return 1;
    }
    if ((r = cli_flag(cmd, usage, argc, argv, i, "--kv-type", NULL, &v)) != 0) {
        if (r < 0) return 2;
        if (!cli_parse_kv(cmd, v, &o->kv_type)) return cli_usage_line(usage);
        if (!o->given) o->given = a;
        return 1;
    }
    if ((r = cli_flag(cmd, usage, argc, argv, i, "--mem-limit", NULL, &v)) != 0) {
        if (r < 0) return 2;
        if (!cli_parse_size(cmd, a, v, &o->mem_limit)) return cli_usage_line(usage);
        /* as run's: 0 was taken as "detect" here, an explicit limit silently ignored */
        if (o->mem_limit == 0) return cli_usage_error(cmd, usage, "--mem-limit must be above 0");
        if (!o->given) o->given = a;
        return 1;
    }
    return 0;
}

static pb_session_params mem_session(const cli_mem_opts *o) {
    pb_session_params sp = pb_session_default_params();
    sp.n_ctx = o->n_ctx;
    sp.kv_type = o->kv_type;
    sp.think = o->think;
    return sp;
}

/* The estimate, its largest n_ctx no more than -c takes: the library caps it by the model's training context alone
 * (2^24 in a header), and "largest n_ctx that fits: 16777216" was advice -c refuses. */
static bool estimate(const char *path, const cli_mem_opts *o, pb_mem_estimate *e) {
    pb_session_params sp = mem_session(o);
    if (pb_estimate_memory(path, &sp, o->mem_limit, e) != PB_OK) return false;
    if (e->max_n_ctx > CLI_MAX_CTX) e->max_n_ctx = CLI_MAX_CTX;
    return true;
}

/* Gemma 4: KV per layer (head dims, KV heads and windows differ by layer; KV-shared layers hold none) and the PLE
 * table, which is mapped and read one row per layer and token (never streamed whole). Text to stdout, or into
 * the JSON object mj when it is not NULL. Other archs: nothing. */
static void mem_layers(const char *path, const cli_mem_opts *o, const pb_mem_estimate *e, cJSON *mj) {
    pb_gguf *g = NULL;
    pb_hparams hp;
    if (pb_gguf_open(path, &g) != PB_OK) return;
    if (pb_hparams_from_gguf(g, &hp) != PB_OK || hp.arch != PB_ARCH_GEMMA4) {
        pb_gguf_close(g);
        return;
    }
    const pb_gguf_tensor *ple = pb_gguf_find_tensor(g, "per_layer_token_embd.weight");
    size_t ple_bytes = ple ? ple->nbytes : 0;
    cJSON *arr = mj ? cJSON_AddArrayToObject(mj, "layers") : NULL;
    if (mj) cJSON_AddNumberToObject(mj, "ple_table", (double)ple_bytes);
    if (!mj && ple)
        printf("               PLE table per_layer_token_embd.weight: %zu bytes (%.1f MiB, %s) of the weights: mapped, "
               "one row per layer read per token, not streamed\n",
               ple_bytes, (double)ple_bytes / MIB, pb_type_name(ple->type));
    if (!mj) printf("KV by layer:   layer  type     head_dim  kv_heads  cells     KV bytes\n");
    pb_session_params sp = mem_session(o);
    sp.kv_type = e->kv_type;
    const int extra = pb_engine_ring_extra(&hp, &sp);
    for (int il = 0; il < hp.n_layer; il++) {
        size_t b = pb_engine_kv_layer_bytes(&hp, il, e->n_ctx, e->kv_type, extra);
        int cells = pb_engine_kv_layer_cells(&hp, il, e->n_ctx, extra), src = hp.kv_src[il];
        const char *type = hp.swa_layer[il] ? "sliding" : "full";
        if (mj) {
            cJSON *l = cJSON_CreateObject();
            cJSON_AddNumberToObject(l, "layer", il);
            cJSON_AddStringToObject(l, "type", type);
            cJSON_AddNumberToObject(l, "head_dim", hp.head_dim_l[il]);
            cJSON_AddNumberToObject(l, "kv_heads", hp.n_head_kv_l[il]);
            cJSON_AddNumberToObject(l, "kv_bytes", (double)b);
            if (src != il) cJSON_AddNumberToObject(l, "shared_with", src);
            cJSON_AddItemToArray(arr, l);
        } else if (src != il) {
            printf("               %5d  %-7s  %8d  %8d  %5s  %11zu  shared with layer %d\n", il, type,
                   hp.head_dim_l[il], hp.n_head_kv_l[il], "-", b, src);
        } else {
            printf("               %5d  %-7s  %8d  %8d  %5d  %11zu\n", il, type, hp.head_dim_l[il], hp.n_head_kv_l[il],
                   cells, b);
        }
    }
    if (!mj) printf("%15s%-43s%11zu\n", "", "total", e->kv);
    pb_gguf_close(g);
}

#define MEM_CHAT_RING_EXTRA (CLI_CHAT_RING_EXTRA > PB_SERVER_RING_EXTRA ? CLI_CHAT_RING_EXTRA : PB_SERVER_RING_EXTRA)

/* The KV of a chat or server session at the estimate's n_ctx: their sliding-window rings keep CLI_CHAT_RING_EXTRA /
 * PB_SERVER_RING_EXTRA more rows (/undo, /retry, a conversation sent back), which their own admission counts and the
 * plain estimate above does not. 0 where that changes nothing (no ring shorter than the context). */
static size_t kv_chat_serve(const char *path, const cli_mem_opts *o, const pb_mem_estimate *e) {
    pb_gguf *g = NULL;
    pb_hparams hp;
    size_t kv = 0;
    if (pb_gguf_open(path, &g) != PB_OK) return 0;
    if (pb_hparams_from_gguf(g, &hp) == PB_OK) {
        pb_session_params sp = mem_session(o);
        sp.kv_type = e->kv_type;
        sp.ring_extra = MEM_CHAT_RING_EXTRA;
        kv = pb_engine_kv_estimate(&hp, e->n_ctx, e->kv_type, pb_engine_ring_extra(&hp, &sp));
    }
    pb_gguf_close(g);
    return kv > e->kv ? kv : 0;
}

bool cli_mem_print(const char *path, const cli_mem_opts *o) {
    pb_mem_estimate e;
    if (!o->on) return true;
    if (!estimate(path, o, &e)) {
        printf("memory:        refused: %s\n", pb_last_error());
        return false;
    }
    printf("memory:        n_ctx %d, %s KV: weights %.1f MiB + KV %.1f MiB + scratch %.1f MiB = %.1f MiB\n", e.n_ctx,
           cli_kv_name(e.kv_type), (double)e.weights / MIB, (double)e.kv / MIB, (double)e.scratch / MIB,
           (double)e.total / MIB);
    printf("               available %.1f MiB (%s): %s; largest n_ctx that fits: %d%s\n", (double)e.available / MIB,
           o->mem_limit ? "--mem-limit" : "MemAvailable/cgroup", e.total <= e.available ? "fits" : "does NOT fit",
           e.max_n_ctx, e.max_n_ctx == CLI_MAX_CTX ? " (the most -c takes)" : "");
    const size_t kc = kv_chat_serve(path, o, &e);
    if (kc) {
        const size_t tot = e.total - e.kv + kc;
        printf(
            "               chat / serve: KV %.1f MiB (%d more rows in each sliding-window ring, for /undo, /retry and "
            "conversations sent back) = %.1f MiB a session: %s\n",
            (double)kc / MIB, MEM_CHAT_RING_EXTRA, (double)tot / MIB, tot <= e.available ? "fits" : "does NOT fit");
    }
    mem_layers(path, o, &e, NULL);
    return true;
}

bool cli_mem_json(const char *path, const cli_mem_opts *o, void *cjson_object) {
    pb_mem_estimate e;
    if (!o->on) return true;
    cJSON *m = cJSON_AddObjectToObject((cJSON *)cjson_object, "memory");
    if (!estimate(path, o, &e)) {
        cJSON_AddStringToObject(m, "error", pb_last_error());
        return false;
    }
    cJSON_AddNumberToObject(m, "n_ctx", e.n_ctx);
    cJSON_AddStringToObject(m, "kv_type", cli_kv_name(e.kv_type));
    cJSON_AddNumberToObject(m, "weights", (double)e.weights);
    cJSON_AddNumberToObject(m, "kv", (double)e.kv);
    cJSON_AddNumberToObject(m, "scratch", (double)e.scratch);
    cJSON_AddNumberToObject(m, "total", (double)e.total);
    cJSON_AddNumberToObject(m, "available", (double)e.available);
    cJSON_AddBoolToObject(m, "fits", e.total <= e.available);
    cJSON_AddNumberToObject(m, "max_n_ctx", e.max_n_ctx);
    const size_t kc = kv_chat_serve(path, o, &e);
    cJSON_AddNumberToObject(m, "kv_chat_serve", (double)(kc ? kc : e.kv)); /* a chat or server session's KV */
    cJSON_AddNumberToObject(m, "total_chat_serve", (double)(e.total - e.kv + (kc ? kc : e.kv)));
    mem_layers(path, o, &e, m);
    return true;
}

bool cli_json_print(void *cjson_object, bool pretty) {
    cJSON *o = cjson_object;
    pb_server_json_repair(o);
    char *t = pretty ? cJSON_Print(o) : cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!t) return false;
    puts(t);
    free(t);
    return true;
}
