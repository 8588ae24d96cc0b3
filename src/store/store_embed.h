/* store_embed.h -- text embeddings for the knowledge base: mean-pooled final hidden states of a Gemma model
 * (src/model's pb_forward + pb_forward_hidden), stored as float16 and searched by cosine. */
#ifndef PB_STORE_EMBED_H
#define PB_STORE_EMBED_H

#include "store/store.h"

typedef struct pb_embedder pb_embedder;

/* Opens a model for embedding (n_ctx = max_tokens; longer texts are cut to their first max_tokens). */
pb_status pb_embedder_open(const char *model_path, int max_tokens, int n_threads, pb_embedder **out);
void pb_embedder_free(pb_embedder *e);
int pb_embedder_dim(const pb_embedder *e);
/* Name stored with each vector: the model file's base name + its weight fingerprint prefix. */
const char *pb_embedder_name(const pb_embedder *e);
/* vec gets dim floats: the mean over the text's tokens (BOS included) of the final normed hidden state,
 * L2-normalized. Allocates nothing per call beyond what open sized. */
pb_status pb_embedder_embed(pb_embedder *e, const char *text, size_t len, float *vec);

/* Embeds every chunk that has no vector for this model yet. progress(user, done) after each vector may be NULL;
 * returning false stops: the vectors made so far are written and PB_ERR_CANCELLED returned. Vectors are computed
 * outside any transaction and written 32 at a time in short ones, so other writers are not locked out meanwhile. */
pb_status pb_store_embed_missing(pb_store *st, pb_embedder *e, bool (*progress)(void *user, int64_t done), void *user,
                                 int64_t *n_done);
/* BM25-independent vector search for a query string with the model at model_path. */
pb_status pb_store_embed_search(pb_store *st, const char *model_path, const char *query, int k, pb_store_hit **out,
                                int *n_out);

#endif
