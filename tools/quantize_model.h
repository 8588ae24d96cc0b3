/* quantize_model.h -- re-type every tensor of a GGUF by a llama.cpp mix (Q4_K_M, Q8_0, F16, ...) and write
 * the result atomically. Library-style (returns pb_status, never prints); used by `pocketbrain quantize`
 * and `pocketbrain convert --type`. */
#ifndef PB_QUANTIZE_MODEL_H
#define PB_QUANTIZE_MODEL_H

#include "base/base.h"

typedef struct cli_quantize_params {
    const char *in_path;   /* source GGUF */
    const char *out_path;  /* destination; written as <out>.tmp.<pid> then renamed (no partial file) */
    const char *mix;       /* "Q4_K_M", "q8_0", "f16", ... (pb_recipe_mix_list) */
    int n_threads;         /* 0 = physical cores */
    bool allow_requantize; /* allow quantized sources to be re-quantized (F32/F16/BF16 targets never need it) */
    /* optional: called after each tensor with bytes of output done / total (from the writer thread) */
    void (*progress)(void *user, double done, double total);
    void *progress_user;
} cli_quantize_params;

typedef struct cli_quantize_stats {
    int64_t n_tensors;          /* in the output */
    int64_t n_converted;        /* re-typed (the rest copied byte for byte) */
    int64_t n_by_type[64];      /* output tensors per ggml type id (ids >= 64 not counted) */
    size_t in_bytes, out_bytes; /* tensor data bytes */
    double seconds;
} cli_quantize_stats;

/* Quantizes p->in_path to p->out_path. Copies every metadata key (except split.* keys), sets
 * general.file_type (u32, the llama ftype) and general.quantization_version = 2, writes tensors in
 * llama.cpp's order. Errors: PB_ERR_INVALID_ARG (unknown mix), PB_ERR_IO/FORMAT (input), PB_ERR_UNSUPPORTED
 * (a tensor type we cannot read, or a quantized source to re-quantize without allow_requantize), PB_ERR_FORMAT for
 * non-finite weights (the message names tensor and row). No output file exists after an error.
 * stats may be NULL. */
pb_status cli_quantize_model(const cli_quantize_params *p, cli_quantize_stats *stats);

/* Convenience wrapper for other commands (e.g. `convert --type q4_k_m` on a freshly written F16/F32 GGUF):
 * 0 on success; -1 with a one-line message in err. Quantized sources are refused (use cli_quantize_model
 * with allow_requantize for that). When progress is true a bar is drawn on stderr if it is a terminal. */
int cli_quantize_file(const char *in, const char *out, const char *mix, int n_threads, bool progress, char *err,
                      size_t errlen);

#endif
