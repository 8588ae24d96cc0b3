/* gguf.h -- internal API of the gguf room: validated read-only view of a GGUF v2/v3 file, and a writer.
 * The reader treats the file as untrusted: every count, length, dimension, type id and offset is
 * bounds- and overflow-checked; failures return PB_ERR_FORMAT with a message naming field and offset. */
#ifndef PB_GGUF_H
#define PB_GGUF_H

#include "base/base.h"

typedef enum pb_gguf_vtype {
    PB_GGUF_UINT8 = 0,
    PB_GGUF_INT8 = 1,
    PB_GGUF_UINT16 = 2,
    PB_GGUF_INT16 = 3,
    PB_GGUF_UINT32 = 4,
    PB_GGUF_INT32 = 5,
    PB_GGUF_FLOAT32 = 6,
    PB_GGUF_BOOL = 7,
    PB_GGUF_STRING = 8,
    PB_GGUF_ARRAY = 9,
    PB_GGUF_UINT64 = 10,
    PB_GGUF_INT64 = 11,
    PB_GGUF_FLOAT64 = 12,
    PB_GGUF_VTYPE_COUNT = 13
} pb_gguf_vtype;

typedef struct pb_gguf pb_gguf;

/* A string inside the file (not NUL-terminated). */
typedef struct pb_gguf_str {
    const char *ptr;
    uint64_t len;
} pb_gguf_str;

typedef struct pb_gguf_tensor {
    const char *name; /* NUL-terminated copy */
    int type;         /* ggml type id (see tensor/types.h) */
    int n_dims;       /* as stored (1..4) */
    int64_t ne[4];    /* ne[0] fastest; missing dims are 1 */
    uint64_t offset;  /* relative to the data section */
    size_t nbytes;
    const void *data; /* points into the mapping */
} pb_gguf_tensor;

/* Reader policy (what "valid" means here; stricter than the prose spec where ggml is stricter):
 *  - magic "GGUF", version 2 or 3 (little-endian only); counts bounded by the file size.
 *  - value types 0..12; arrays of arrays are rejected (as ggml); empty arrays are accepted.
 *    BOOL: any non-zero byte reads as true (as ggml).
 *  - keys and tensor names unique, without NUL bytes; tensor names < 64 bytes.
 *  - general.alignment, when present, is UINT32 and a power of two (default 32).
 *  - tensors: n_dims 1..4, every ne >= 1 (zero dims are rejected), ne[0] a multiple of the block
 *    size, byte size without overflow. Type ids with a non-zero block size in the traits table are
 *    accepted structurally, including IQ* / TQ* / I8..I64 / F64 that the engine cannot compute with:
 *    the model loader rejects those (PB_ERR_UNSUPPORTED). Removed ids (block size 0) and ids >= 39
 *    are format errors.
 *  - data: offset a multiple of the alignment, [offset, offset + nbytes) inside the file, no two
 *    tensors overlapping. Gaps and any order are accepted (llama.cpp itself requires the contiguous
 *    padded layout; pb_gguf_layout_contiguous() tells whether a file has it).
 * Errors: PB_ERR_FORMAT "gguf: <kv/tensor i 'name'>: <problem> at offset <N>" (pb_gguf_open prefixes
 * the path), PB_ERR_IO when the file cannot be read, PB_ERR_NOMEM. All accessors are thread-safe
 * (the handle is immutable after open). */

/* Opens and validates path (mmap). */
pb_status pb_gguf_open(const char *path, pb_gguf **out);
/* Validates a buffer already in memory (not copied: it must outlive the pb_gguf). For fuzzing/tests. */
pb_status pb_gguf_open_memory(const void *data, size_t size, pb_gguf **out);
void pb_gguf_close(pb_gguf *g);

uint32_t pb_gguf_version(const pb_gguf *g);
size_t pb_gguf_alignment(const pb_gguf *g);
size_t pb_gguf_data_offset(const pb_gguf *g); /* absolute file offset of the data section */
size_t pb_gguf_file_size(const pb_gguf *g);
/* Start of the mapped file (the bytes that every pointer handed out points into). */
const void *pb_gguf_base(const pb_gguf *g);
/* True when tensor offsets follow llama.cpp's layout: in file order, each offset = previous offset +
 * PAD(previous nbytes, alignment), the first 0. */
bool pb_gguf_layout_contiguous(const pb_gguf *g);

/* "UINT32", "STRING", ... ("INVALID" for ids >= 13); bytes of one fixed-size value (0 for STRING,
 * ARRAY and invalid ids). */
const char *pb_gguf_vtype_name(pb_gguf_vtype t);
size_t pb_gguf_vtype_size(pb_gguf_vtype t);

/* ---- metadata ---- */
int64_t pb_gguf_n_kv(const pb_gguf *g);
const char *pb_gguf_kv_key(const pb_gguf *g, int64_t i); /* NUL-terminated */
pb_gguf_vtype pb_gguf_kv_type(const pb_gguf *g, int64_t i);
int64_t pb_gguf_find_key(const pb_gguf *g, const char *key); /* index or -1 */

/* Typed getters. PB_ERR_NOT_FOUND when the key is absent (no error text set, so callers can apply
 * defaults); PB_ERR_FORMAT with a message when present with an incompatible type or out of range.
 * Integer getters accept any integer type whose value fits; float getters accept F32/F64. */
pb_status pb_gguf_get_u32(const pb_gguf *g, const char *key, uint32_t *out);
pb_status pb_gguf_get_i64(const pb_gguf *g, const char *key, int64_t *out);
pb_status pb_gguf_get_f32(const pb_gguf *g, const char *key, float *out);
pb_status pb_gguf_get_bool(const pb_gguf *g, const char *key, bool *out);
pb_status pb_gguf_get_str(const pb_gguf *g, const char *key, pb_gguf_str *out);

/* Arrays: element type and count. For non-string arrays *data points at the packed little-endian
 * elements in the file (may be unaligned: read with memcpy). */
pb_status pb_gguf_get_arr(const pb_gguf *g, const char *key, pb_gguf_vtype *elem_type, uint64_t *n, const void **data);
/* Element i of a string array (by key index from pb_gguf_find_key). O(1). */
pb_status pb_gguf_get_arr_str(const pb_gguf *g, int64_t kv_index, uint64_t i, pb_gguf_str *out);

/* Generic access for printing/copying: the raw value of KV i (for arrays: elem type + count). */
typedef struct pb_gguf_value {
    pb_gguf_vtype type;
    union {
        uint64_t u;
        int64_t i;
        double f;
        bool b;
        pb_gguf_str s;
    } v;                     /* scalar types */
    pb_gguf_vtype elem_type; /* arrays */
    uint64_t n;              /* arrays */
    const void *data;        /* arrays of non-strings */
} pb_gguf_value;
pb_status pb_gguf_kv_value(const pb_gguf *g, int64_t i, pb_gguf_value *out);

/* ---- tensors ---- */
int64_t pb_gguf_n_tensors(const pb_gguf *g);
const pb_gguf_tensor *pb_gguf_tensor_at(const pb_gguf *g, int64_t i);
const pb_gguf_tensor *pb_gguf_find_tensor(const pb_gguf *g, const char *name); /* NULL if absent */

/* ---- writer ---------------------------------------------------------------------------------- */
/* Produces files llama.cpp accepts: version 3, no duplicate keys, no nested/empty arrays, contiguous
 * padded tensor layout, names <= 63 bytes, zero padding (after the tensor infos only when there are
 * tensors; after every tensor, the last included). Output is atomic (temp + rename). Not thread-safe:
 * one writer per thread. Errors: PB_ERR_INVALID_ARG for a rule broken by the caller (message names the
 * key/tensor), PB_ERR_IO, PB_ERR_NOMEM, or whatever a fill callback returned. */
typedef struct pb_gguf_writer pb_gguf_writer;

pb_gguf_writer *pb_gguf_writer_new(void);
void pb_gguf_writer_free(pb_gguf_writer *w);

/* Setting an existing key replaces its value (order of first insertion is kept). */
pb_status pb_gguf_set_u8(pb_gguf_writer *w, const char *key, uint8_t v);
pb_status pb_gguf_set_i8(pb_gguf_writer *w, const char *key, int8_t v);
pb_status pb_gguf_set_u16(pb_gguf_writer *w, const char *key, uint16_t v);
pb_status pb_gguf_set_i16(pb_gguf_writer *w, const char *key, int16_t v);
pb_status pb_gguf_set_u32(pb_gguf_writer *w, const char *key, uint32_t v);
pb_status pb_gguf_set_i32(pb_gguf_writer *w, const char *key, int32_t v);
pb_status pb_gguf_set_u64(pb_gguf_writer *w, const char *key, uint64_t v);
pb_status pb_gguf_set_i64(pb_gguf_writer *w, const char *key, int64_t v);
pb_status pb_gguf_set_f32(pb_gguf_writer *w, const char *key, float v);
pb_status pb_gguf_set_f64(pb_gguf_writer *w, const char *key, double v);
pb_status pb_gguf_set_bool(pb_gguf_writer *w, const char *key, bool v);
pb_status pb_gguf_set_str(pb_gguf_writer *w, const char *key, const char *s);
pb_status pb_gguf_set_strn(pb_gguf_writer *w, const char *key, const char *s, size_t len);
/* Array of fixed-size elements (elem_type not STRING/ARRAY), copied. n must be > 0. */
pb_status pb_gguf_set_arr(pb_gguf_writer *w, const char *key, pb_gguf_vtype elem_type, const void *data, uint64_t n);
/* Array of strings, copied; lens may be NULL (then strlen). */
pb_status pb_gguf_set_arr_str(pb_gguf_writer *w, const char *key, const char *const *strs, const size_t *lens,
                              uint64_t n);
/* Copies KV i of src (any type) under the same key. An empty array is skipped (PB_OK, key not written),
 * as llama.cpp's writers never emit one; a key the writer refuses (empty) gives PB_ERR_INVALID_ARG. */
pb_status pb_gguf_copy_kv(pb_gguf_writer *w, const pb_gguf *src, int64_t i);
pb_status pb_gguf_remove_key(pb_gguf_writer *w, const char *key);

/* Adds a tensor. data (nbytes of the type/shape) is borrowed and must stay valid until write; or pass
 * data == NULL and a fill callback, which is called during write to produce the bytes into dst. */
typedef pb_status (*pb_gguf_fill_fn)(void *user, int64_t tensor_index, void *dst, size_t nbytes);
pb_status pb_gguf_add_tensor(pb_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                             const void *data);
void pb_gguf_writer_set_fill(pb_gguf_writer *w, pb_gguf_fill_fn fn, void *user);
/* Progress callback during write: done/total tensor bytes. */
typedef void (*pb_gguf_progress_fn)(void *user, size_t done, size_t total);
void pb_gguf_writer_set_progress(pb_gguf_writer *w, pb_gguf_progress_fn fn, void *user);

/* Writes the file atomically. On any error (including a fill callback's) no file is left. */
pb_status pb_gguf_write(pb_gguf_writer *w, const char *path);
/* Writes to a memory buffer (malloc'd, free with free()). For tests. */
pb_status pb_gguf_write_memory(pb_gguf_writer *w, void **out, size_t *len);

#endif
