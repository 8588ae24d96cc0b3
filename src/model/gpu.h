/* gpu.h -- the model room's narrow hook into the GPU backend (src/cuda, through cuda/pb_cuda.h): a model opened
 * with pb_model_params.gpu runs its sessions' forward passes there. Private to the model room. */
#ifndef PB_MODEL_GPU_H
#define PB_MODEL_GPU_H

#include "model/kv_impl.h"

/* Uploads the model's weights when params.gpu asks for it: gpu > 0 fails when no GPU is usable, gpu < 0 (auto)
 * falls back to the CPU quietly (m->gpu stays NULL). */
pb_status pb_model_gpu_attach(pb_model *m);
void pb_model_gpu_detach(pb_model *m);
/* Gives a new KV cache its GPU twin when the model runs on the GPU (F16 caches only). */
pb_status pb_kv_gpu_attach(const pb_model *m, pb_kv_cache *kv);
/* pb_forward on the GPU: tokens at kv->n_past.., logits (last or all rows), hidden rows (n x n_embd). Does not
 * advance kv->n_past (the caller does on success). */
pb_status pb_gpu_forward(pb_kv_cache *kv, const int32_t *tokens, int n, float *logits, bool all_logits, float *hidden);
/* The greedy argmax on the device (model.h: pb_forward_top): whether this cache's backend offers it, the forward
 * that returns it (logits left on the device), and the copy of those logits. */
bool pb_gpu_has_top(const pb_kv_cache *kv);
pb_status pb_gpu_forward_top(pb_kv_cache *kv, const int32_t *tokens, int n, int32_t *top, float *hidden);
pb_status pb_gpu_pull_logits(pb_kv_cache *kv, float *logits);
/* The best m of those device logits and the gathered ids' logits (model.h: pb_forward_logits_top). */
bool pb_gpu_has_logits_top(const pb_kv_cache *kv);
pb_status pb_gpu_logits_top(pb_kv_cache *kv, int m, const int32_t *gather, int ng, int32_t *ids, float *vals,
                            float *gvals);
/* pb_forward_batch on the GPU: token tokens[i] at kvs[i]->n_past of each (GPU) cache, through pb_cu_forward_batch;
 * logits / top may be NULL. Does not advance n_past (the caller does on success). */
pb_status pb_gpu_forward_batch(pb_kv_cache *const *kvs, const int32_t *tokens, int n, float *logits, int32_t *top);
/* Copies the device cache into the host cache's rows (before serializing) / the host rows back (after). */
pb_status pb_kv_gpu_pull(const pb_kv_cache *kv);
pb_status pb_kv_gpu_push(pb_kv_cache *kv);

#endif
