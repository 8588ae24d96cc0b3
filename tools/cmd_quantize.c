/* cmd_quantize.c -- `pocketbrain quantize IN.gguf OUT.gguf MIX`: re-type a GGUF by a llama.cpp mix. */
#include "cli.h"
#include "library.h"
#include "quantize_model.h"
#include "tensor/recipe.h"
#include "tensor/types.h"

#include <stdlib.h>
#include <string.h>

static const char *usage = "pocketbrain quantize IN.gguf|NAME OUT.gguf MIX [--threads N] [--allow-requantize]";

static void print_help(void) {
    printf("usage: %s\n\n"
           "Writes OUT.gguf with every weight re-typed as llama.cpp's llama-quantize does for MIX (same per-tensor\n"
           "choices, no importance matrix). Norms and 1-D tensors are copied; metadata is copied and\n"
           "general.file_type / general.quantization_version are set. The output appears only when complete.\n\n"
           "MIX: %s\n"
           "  (F16, BF16 and F32 convert every matrix to that type, dequantizing quantized ones; no flag needed.)\n\n"
           "options:\n"
           "  --threads N          worker threads (default: physical cores)\n"
           "  --allow-requantize   re-quantize tensors that are already quantized (quality loss)\n",
           usage, pb_recipe_mix_list());
}

static void bar(void *user, double done, double total) { cli_progress_update(user, done, total); }

PB_CMD(quantize) {
    const char *pos[3] = {0};
    int npos = 0;
    long threads = 0;
    bool requant = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r;
#define FLAG(name, alias, val) (r = cli_flag("quantize", usage, argc, argv, &i, name, alias, val))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            print_help();
            return 0;
        } else if (FLAG("--threads", "-t", &v) != 0) {
            if (r < 0 || !cli_parse_int("quantize", a, v, 1, 256, &threads)) return r < 0 ? 2 : cli_usage_line(usage);
        } else if (FLAG("--allow-requantize", NULL, NULL) != 0) {
            if (r < 0) return 2;
            requant = true;
        } else if (a[0] == '-' && a[1] != 0) {
            return cli_usage_error("quantize", usage, "unknown option '%s'", a);
        } else if (npos < 3) {
            pos[npos++] = a;
        } else {
            return cli_usage_error("quantize", usage, "unexpected argument '%s'", a);
        }
#undef FLAG
    }
    if (npos < 3) return cli_usage_error("quantize", usage, "expected IN.gguf OUT.gguf MIX");
    if (pb_recipe_ftype_from_name(pos[2]) < 0)
        return cli_usage_error("quantize", usage, "unknown mix '%s' (expected one of: %s)", pos[2],
                               pb_recipe_mix_list());

    const char *in = cli_model_arg("quantize", pos[0]); /* a path or a library name */
    if (!in) return 1;

    cli_install_cleanup_handlers();
    cli_progress pr;
    cli_progress_init(&pr, "quantize");
    cli_quantize_params p = {.in_path = in,
                             .out_path = pos[1],
                             .mix = pos[2],
                             .n_threads = (int)threads,
                             .allow_requantize = requant,
                             .progress = bar,
                             .progress_user = &pr};
    cli_quantize_stats st;
    pb_status s = cli_quantize_model(&p, &st);
    cli_progress_done(&pr);
    if (s) return cli_fail("quantize", s, "failed");
    fprintf(stderr, "quantize: %s -> %s (%s): %lld tensors, %lld converted, %.1f MB -> %.1f MB in %.1fs\n", pos[0],
            pos[1], pb_recipe_ftype_name(pb_recipe_ftype_from_name(pos[2])), (long long)st.n_tensors,
            (long long)st.n_converted, (double)st.in_bytes / 1e6, (double)st.out_bytes / 1e6, st.seconds);
    for (int t = 0; t < 64; t++)
        if (st.n_by_type[t]) fprintf(stderr, "  %-6s %lld\n", pb_type_name(t), (long long)st.n_by_type[t]);
    return 0;
}
