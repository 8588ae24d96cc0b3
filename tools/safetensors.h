/* safetensors.h -- read-only, validated view of Hugging Face safetensors weights: one file or a sharded
 * set named by model.safetensors.index.json. Headers are untrusted input; nothing here prints. */
#ifndef PB_SAFETENSORS_H
#define PB_SAFETENSORS_H

#include "base/base.h"

#define PB_ST_MAX_DIMS 8
/* The safetensors reference library refuses headers above 100 MB; so do we. */
#define PB_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

typedef enum pb_st_dtype {
    PB_ST_F32 = 0,
    PB_ST_F16,
    PB_ST_BF16,
    /* Valid in a header (sizes known) but not convertible here. */
    PB_ST_F64,
    PB_ST_I64,
    PB_ST_U64,
    PB_ST_I32,
    PB_ST_U32,
    PB_ST_I16,
    PB_ST_U16,
    PB_ST_I8,
    PB_ST_U8,
    PB_ST_BOOL,
    PB_ST_F8_E4M3,
    PB_ST_F8_E5M2,
    PB_ST_DTYPE_COUNT
} pb_st_dtype;

typedef struct pb_st_tensor {
    const char *name; /* NUL-terminated, owned by the model */
    pb_st_dtype dtype;
    int n_dims;                    /* 0 (scalar) .. PB_ST_MAX_DIMS */
    int64_t shape[PB_ST_MAX_DIMS]; /* PyTorch order: shape[n_dims-1] is contiguous */
    int64_t n_elements;
    size_t nbytes;
    const void *data; /* points into the shard's mapping */
    int shard;        /* index of the file it came from */
} pb_st_tensor;

typedef struct pb_st_model pb_st_model;

/* Opens weights at path, which is one of:
 *   - a directory: uses model.safetensors.index.json if present, else model.safetensors, else the only
 *     *.safetensors file in it (several without an index is an error);
 *   - a *.safetensors file;
 *   - a *.index.json file (shard names must be plain file names in the same directory).
 * Every shard is mapped read-only and its header validated: length bounds, JSON object, known dtype,
 * non-negative integer shape, data_offsets inside the data section with end - begin == elements * dtype
 * size, no two tensors overlapping, no duplicate names (also across shards), and every index entry
 * present in the shard it names. Errors: PB_ERR_IO / PB_ERR_NOT_FOUND / PB_ERR_FORMAT with a message
 * naming the file and the tensor or byte offset. */
pb_status pb_st_open(const char *path, pb_st_model **out);

/* Validates one safetensors image already in memory (borrowed; must outlive the model). label names it
 * in error messages. For tests and fuzzing. */
pb_status pb_st_open_memory(const void *data, size_t size, const char *label, pb_st_model **out);

void pb_st_close(pb_st_model *m);

int64_t pb_st_n_tensors(const pb_st_model *m);
/* Tensors in ascending name order. */
const pb_st_tensor *pb_st_tensor_at(const pb_st_model *m, int64_t i);
const pb_st_tensor *pb_st_find(const pb_st_model *m, const char *name); /* NULL if absent */
int pb_st_n_shards(const pb_st_model *m);
const char *pb_st_shard_path(const pb_st_model *m, int shard);

const char *pb_st_dtype_name(pb_st_dtype t); /* "BF16" */
size_t pb_st_dtype_size(pb_st_dtype t);
bool pb_st_dtype_is_float(pb_st_dtype t); /* F32, F16, BF16: what pb_st_read_f32 converts */

/* Converts elements [first, first + n) of t (flat, row-major) to float32 into dst. Thread-safe.
 * PB_ERR_UNSUPPORTED for dtypes other than F32/F16/BF16; PB_ERR_INVALID_ARG for a range outside t. */
pb_status pb_st_read_f32(const pb_st_tensor *t, int64_t first, int64_t n, float *dst);

#endif
