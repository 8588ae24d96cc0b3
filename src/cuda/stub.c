/* stub.c -- the CUDA seam (cuda/pb_cuda.h) in a build without CUDA (plain `make`): no device is usable, and
 * every entry point reports "built without CUDA" through the normal status path. `make CUDA=1` links
 * src/cuda/backend.cu instead. */
#include "cuda/pb_cuda.h"

#include <stdio.h>

enum { ST_UNSUPPORTED = 4 };

static int no_cuda(char *err, size_t cap) {
    if (err && cap) snprintf(err, cap, "this pocketbrain was built without CUDA (rebuild with make CUDA=1)");
    return ST_UNSUPPORTED;
}

int pb_cu_available(char *why, size_t cap) {
    no_cuda(why, cap);
    return 0;
}
int pb_cu_model_open(const pb_cu_desc *d, pb_cu_model **out, char *err, size_t cap) {
    (void)d;
    *out = NULL;
    return no_cuda(err, cap);
}
void pb_cu_model_free(pb_cu_model *g) { (void)g; }
size_t pb_cu_model_bytes(const pb_cu_model *g) { return (void)g, 0; }
const char *pb_cu_device_name(const pb_cu_model *g) { return (void)g, ""; }
int pb_cu_ctx_new(pb_cu_model *g, int n_ctx, const int *cap_in, pb_cu_ctx **out, char *err, size_t cap) {
    (void)g, (void)n_ctx, (void)cap_in;
    *out = NULL;
    return no_cuda(err, cap);
}
void pb_cu_ctx_free(pb_cu_ctx *c) { (void)c; }
size_t pb_cu_ctx_bytes(const pb_cu_ctx *c) { return (void)c, 0; }
int pb_cu_forward(pb_cu_ctx *c, int pos, const int32_t *tokens, int n, float *logits, float *hidden, int all_logits,
                  const volatile int *cancel, int *n_done, char *err, size_t cap) {
    (void)c, (void)pos, (void)tokens, (void)n, (void)logits, (void)hidden, (void)all_logits, (void)cancel;
    *n_done = 0;
    return no_cuda(err, cap);
}
int pb_cu_kv_download(pb_cu_ctx *c, int il, void *k, void *v, size_t bytes, char *err, size_t cap) {
    (void)c, (void)il, (void)k, (void)v, (void)bytes;
    return no_cuda(err, cap);
}
int pb_cu_kv_upload(pb_cu_ctx *c, int il, const void *k, const void *v, size_t bytes, char *err, size_t cap) {
    (void)c, (void)il, (void)k, (void)v, (void)bytes;
    return no_cuda(err, cap);
}
int pb_cu_has_argmax(const pb_cu_ctx *c) { return (void)c, 0; }
int pb_cu_forward_argmax(pb_cu_ctx *c, int pos, const int32_t *tokens, int n, int32_t *top, float *hidden, char *err,
                         size_t cap) {
    (void)c, (void)pos, (void)tokens, (void)n, (void)top, (void)hidden;
    return no_cuda(err, cap);
}
int pb_cu_logits_download(pb_cu_ctx *c, float *logits, char *err, size_t cap) {
    (void)c, (void)logits;
    return no_cuda(err, cap);
}
int pb_cu_argmax_check(pb_cu_ctx *c, const float *x, int n, int32_t *top, char *err, size_t cap) {
    (void)c, (void)x, (void)n, (void)top;
    return no_cuda(err, cap);
}
int pb_cu_forward_batch(pb_cu_ctx *const *cs, const int *pos, const int32_t *tokens, int n, float *logits, int32_t *top,
                        char *err, size_t cap) {
    (void)cs, (void)pos, (void)tokens, (void)n, (void)logits, (void)top;
    return no_cuda(err, cap);
}
long pb_cu_batch_steps(const pb_cu_ctx *c) { return (void)c, 0; }
int pb_cu_has_logits_top(const pb_cu_ctx *c) { return (void)c, 0; }
int pb_cu_logits_top(pb_cu_ctx *c, int m, const int32_t *gather, int ng, int32_t *ids, float *vals, float *gvals,
                     char *err, size_t cap) {
    (void)c, (void)m, (void)gather, (void)ng, (void)ids, (void)vals, (void)gvals;
    return no_cuda(err, cap);
}
int pb_cu_top_check(pb_cu_ctx *c, const float *x, int n, int m, const int32_t *gather, int ng, int32_t *ids,
                    float *vals, float *gvals, char *err, size_t cap) {
    (void)c, (void)x, (void)n, (void)m, (void)gather, (void)ng, (void)ids, (void)vals, (void)gvals;
    return no_cuda(err, cap);
}
