/* test_gguf_malformed.c -- handcrafted broken GGUFs: each fails with PB_ERR_FORMAT naming the defect.
 * Cases are built in memory with a tiny byte writer. The same bytes are the fuzz seed corpus in
 * tests/data/gguf/: `test_gguf_malformed --write-corpus tests/data/gguf` regenerates it; a normal run checks it is in
 * sync. */
#include "gguf/gguf.h"
#include "pb_test.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>

/* ---- byte writer ---------------------------------------------------------------------------------- */

typedef struct bw {
    uint8_t p[4096];
    size_t len;
    size_t cut; /* when non-zero: the file is truncated to this length */
} bw;

static void raw(bw *b, const void *src, size_t n) {
    if (b->len + n > sizeof b->p) abort();
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void u8(bw *b, uint8_t v) { raw(b, &v, 1); }
static void u32(bw *b, uint32_t v) {
    for (int i = 0; i < 4; i++) u8(b, (uint8_t)(v >> (8 * i)));
}
static void u64(bw *b, uint64_t v) {
    u32(b, (uint32_t)v);
    u32(b, (uint32_t)(v >> 32));
}
static void str(bw *b, const char *s) {
    u64(b, strlen(s));
    raw(b, s, strlen(s));
}
static void zeros(bw *b, size_t n) {
    while (n--) u8(b, 0);
}
static void pad(bw *b, size_t a) {
    while (b->len % a) u8(b, 0);
}
/* Truncate the file `extra` bytes after the current position. */
static void cut_here(bw *b, size_t extra) { b->cut = b->len + extra; }

static void hdr(bw *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    raw(b, "GGUF", 4);
    u32(b, version);
    u64(b, n_tensors);
    u64(b, n_kv);
}
static void kv_u32(bw *b, const char *k, uint32_t v) {
    str(b, k);
    u32(b, PB_GGUF_UINT32);
    u32(b, v);
}
static void kv_str(bw *b, const char *k, const char *v) {
    str(b, k);
    u32(b, PB_GGUF_STRING);
    str(b, v);
}
static void tinfo(bw *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    str(b, name);
    u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) u64(b, ne[i]);
    u32(b, type);
    u64(b, off);
}
/* Two F32 tensors "a" and "b" of 8 elements (32 bytes) at offsets 0 and 32. */
static void two_tensors(bw *b) {
    tinfo(b, "a", 1, (uint64_t[]){8}, 0, 0);
    tinfo(b, "b", 1, (uint64_t[]){8}, 0, 32);
    pad(b, 32);
    zeros(b, 64);
}
static void arch(bw *b) { kv_str(b, "general.architecture", "test"); }

/* ---- cases ------------------------------------------------------------------------------------------ */

static void valid_min(bw *b) {
    hdr(b, 3, 2, 1);
    arch(b);
    two_tensors(b);
}
static void valid_v2(bw *b) {
    hdr(b, 2, 0, 1);
    arch(b);
    pad(b, 32);
}
static void valid_all_values(bw *b) {
    hdr(b, 3, 1, 15);
    str(b, "t.u8"), u32(b, 0), u8(b, 200);
    str(b, "t.i8"), u32(b, 1), u8(b, 0x80);
    str(b, "t.u16"), u32(b, 2), u8(b, 1), u8(b, 2);
    str(b, "t.i16"), u32(b, 3), u8(b, 0xff), u8(b, 0xff);
    str(b, "t.u32"), u32(b, 4), u32(b, 123456);
    str(b, "t.i32"), u32(b, 5), u32(b, (uint32_t)-5);
    str(b, "t.f32"), u32(b, 6), u32(b, 0x3fc00000);
    str(b, "t.bool"), u32(b, 7), u8(b, 1);
    str(b, "t.str"), u32(b, 8), str(b, "hello");
    str(b, "t.arr_str"), u32(b, 9), u32(b, 8), u64(b, 3), str(b, "x"), str(b, ""), str(b, "zz");
    str(b, "t.u64"), u32(b, 10), u64(b, 1ull << 40);
    str(b, "t.i64"), u32(b, 11), u64(b, (uint64_t)-7);
    str(b, "t.f64"), u32(b, 12), u64(b, 0x3ff8000000000000ull);
    str(b, "t.arr_u16"), u32(b, 9), u32(b, 2), u64(b, 2), u8(b, 1), u8(b, 0), u8(b, 2), u8(b, 0);
    kv_u32(b, "general.alignment", 64);
    tinfo(b, "q", 2, (uint64_t[]){32, 2}, 2 /* q4_0 */, 0);
    pad(b, 64);
    zeros(b, 36);
}
/* Found by fuzzing: valid, but a naive writer copying it pads the header to 2 GiB. */
static void valid_huge_alignment(bw *b) {
    hdr(b, 3, 0, 1);
    kv_u32(b, "general.alignment", 1u << 31);
}
static void bad_magic(bw *b) {
    raw(b, "GGUX", 4);
    u32(b, 3), u64(b, 0), u64(b, 0);
}
static void empty_file(bw *b) { (void)b; }
static void version_0(bw *b) { hdr(b, 0, 0, 0); }
static void version_1(bw *b) { hdr(b, 1, 0, 0); }
static void version_4(bw *b) { hdr(b, 4, 0, 0); }
static void version_big_endian(bw *b) { hdr(b, 0x03000000u, 0, 0); }
static void trunc_magic(bw *b) { raw(b, "GGU", 3); }
static void trunc_version(bw *b) { raw(b, "GGUF\3\0", 6); }
static void trunc_tensor_count(bw *b) {
    raw(b, "GGUF", 4);
    u32(b, 3);
    u32(b, 0);
}
static void trunc_kv_count(bw *b) {
    raw(b, "GGUF", 4);
    u32(b, 3);
    u64(b, 0);
    u8(b, 1);
}
static void absurd_tensor_count(bw *b) {
    hdr(b, 3, 1ull << 63, 0);
    zeros(b, 64);
}
static void absurd_kv_count(bw *b) {
    hdr(b, 3, 0, UINT64_MAX);
    zeros(b, 64);
}
static void trunc_key_len(bw *b) {
    hdr(b, 3, 0, 1);
    u32(b, 7);
}
static void trunc_key(bw *b) {
    hdr(b, 3, 0, 1);
    u64(b, 20);
    raw(b, "general", 7);
}
static void key_len_max(bw *b) {
    hdr(b, 3, 0, 1);
    u64(b, UINT64_MAX);
    raw(b, "general.architecture", 20);
}
static void key_nul(bw *b) {
    hdr(b, 3, 0, 1);
    u64(b, 3);
    raw(b, "a\0b", 3);
    u32(b, PB_GGUF_UINT8);
    u8(b, 1);
}
static void trunc_value_type(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "general.x");
    u8(b, 4);
}
static void unknown_value_type(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "general.x");
    u32(b, 13);
    u32(b, 0);
}
static void trunc_value(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "general.x");
    u32(b, PB_GGUF_UINT64);
    u32(b, 1);
}
static void trunc_string_value(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "general.name");
    u32(b, PB_GGUF_STRING);
    u64(b, 10);
    raw(b, "abc", 3);
}
static void string_len_max(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "general.name");
    u32(b, PB_GGUF_STRING);
    u64(b, UINT64_MAX);
    raw(b, "abcdefgh", 8);
}
static void trunc_array_header(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "t.arr");
    u32(b, PB_GGUF_ARRAY);
    u32(b, PB_GGUF_UINT32);
    u32(b, 5);
}
static void trunc_array(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "t.arr");
    u32(b, PB_GGUF_ARRAY);
    u32(b, PB_GGUF_UINT32);
    u64(b, 10);
    zeros(b, 8);
}
static void array_count_max(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "t.arr");
    u32(b, PB_GGUF_ARRAY);
    u32(b, PB_GGUF_UINT64);
    u64(b, UINT64_MAX);
    zeros(b, 16);
}
static void string_array_absurd(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "tokenizer.ggml.tokens");
    u32(b, PB_GGUF_ARRAY);
    u32(b, PB_GGUF_STRING);
    u64(b, 1ull << 62);
    str(b, "a");
}
static void trunc_string_array(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "tokenizer.ggml.tokens");
    u32(b, PB_GGUF_ARRAY);
    u32(b, PB_GGUF_STRING);
    u64(b, 2);
    str(b, "a");
    u64(b, 5);
    raw(b, "bc", 2);
}
static void string_array_elem_len_max(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "tokenizer.ggml.tokens");
    u32(b, PB_GGUF_ARRAY);
    u32(b, PB_GGUF_STRING);
    u64(b, 2);
    str(b, "a");
    u64(b, UINT64_MAX);
    zeros(b, 8);
}
static void nested_array(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "t.nested");
    u32(b, PB_GGUF_ARRAY);
    u32(b, PB_GGUF_ARRAY);
    u64(b, 1);
    u32(b, PB_GGUF_UINT8);
    u64(b, 1);
    u8(b, 0);
}
static void unknown_array_type(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "t.arr");
    u32(b, PB_GGUF_ARRAY);
    u32(b, 99);
    u64(b, 1);
    u32(b, 0);
}
static void duplicate_key(bw *b) {
    hdr(b, 3, 0, 3);
    arch(b);
    kv_u32(b, "test.block_count", 2);
    kv_u32(b, "test.block_count", 3);
}
static void alignment_type(bw *b) {
    hdr(b, 3, 0, 1);
    str(b, "general.alignment");
    u32(b, PB_GGUF_UINT64);
    u64(b, 32);
}
static void alignment_zero(bw *b) {
    hdr(b, 3, 0, 1);
    kv_u32(b, "general.alignment", 0);
}
static void alignment_not_pow2(bw *b) {
    hdr(b, 3, 2, 2);
    arch(b);
    kv_u32(b, "general.alignment", 48);
    two_tensors(b);
}
static void trunc_tensor_name(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    u64(b, 19);
    raw(b, "token_embd", 10);
}
static void name_too_long(bw *b) {
    char name[65];
    memset(name, 'n', 64);
    name[64] = 0;
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, name, 1, (uint64_t[]){8}, 0, 0);
    pad(b, 32);
    zeros(b, 32);
}
static void trunc_n_dims(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    str(b, "a");
    u8(b, 2);
}
static void n_dims_5(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 5, (uint64_t[]){8, 1, 1, 1, 1}, 0, 0);
    pad(b, 32);
    zeros(b, 32);
}
static void n_dims_0(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 0, NULL, 0, 0);
    pad(b, 32);
    zeros(b, 32);
}
static void trunc_ne(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    str(b, "blk.0.attn_q.weight");
    u32(b, 2);
    u64(b, 8);
    u32(b, 8);
}
static void zero_dim(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 2, (uint64_t[]){8, 0}, 0, 0);
    pad(b, 32);
    zeros(b, 32);
}
static void negative_dim(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 1, (uint64_t[]){(uint64_t)-8}, 0, 0);
    pad(b, 32);
    zeros(b, 32);
}
static void dims_overflow(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 4, (uint64_t[]){1ull << 32, 1ull << 32, 1ull << 32, 2}, 0, 0);
    pad(b, 32);
    zeros(b, 32);
}
static void bytes_overflow(bw *b) { /* element count fits int64, byte count does not fit size_t */
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 2, (uint64_t[]){1ull << 31, 1ull << 31}, 0, 0);
    pad(b, 32);
    zeros(b, 32);
}
static void trunc_type(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    str(b, "a");
    u32(b, 1);
    u64(b, 8);
    u8(b, 0);
}
static void unknown_tensor_type(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 1, (uint64_t[]){256}, 39, 0);
    pad(b, 32);
    zeros(b, 1024);
}
static void removed_tensor_type(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 1, (uint64_t[]){32}, 4, 0);
    pad(b, 32);
    zeros(b, 32);
}
static void removed_tensor_type_31(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 1, (uint64_t[]){32}, 31, 0);
    pad(b, 32);
    zeros(b, 32);
}
static void block_mismatch(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "blk.0.ffn_up.weight", 2, (uint64_t[]){16, 2}, 2 /* q4_0 */, 0);
    pad(b, 32);
    zeros(b, 64);
}
static void trunc_offset(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    str(b, "a");
    u32(b, 1);
    u64(b, 8);
    u32(b, 0);
    u32(b, 0);
}
static void offset_unaligned(bw *b) {
    hdr(b, 3, 2, 1);
    arch(b);
    tinfo(b, "a", 1, (uint64_t[]){8}, 0, 0);
    tinfo(b, "b", 1, (uint64_t[]){8}, 0, 36);
    pad(b, 32);
    zeros(b, 96);
}
static void offset_overlap(bw *b) {
    hdr(b, 3, 2, 1);
    arch(b);
    tinfo(b, "a", 1, (uint64_t[]){16}, 0, 0);
    tinfo(b, "b", 1, (uint64_t[]){8}, 0, 32);
    pad(b, 32);
    zeros(b, 96);
}
static void offset_same(bw *b) {
    hdr(b, 3, 2, 1);
    arch(b);
    tinfo(b, "a", 1, (uint64_t[]){8}, 0, 0);
    tinfo(b, "b", 1, (uint64_t[]){8}, 0, 0);
    pad(b, 32);
    zeros(b, 64);
}
static void offset_past_eof(bw *b) {
    hdr(b, 3, 2, 1);
    arch(b);
    tinfo(b, "a", 1, (uint64_t[]){8}, 0, 0);
    tinfo(b, "b", 1, (uint64_t[]){8}, 0, 64);
    pad(b, 32);
    zeros(b, 64);
}
static void offset_wraps(bw *b) {
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 1, (uint64_t[]){8}, 0, UINT64_MAX - 31);
    pad(b, 32);
    zeros(b, 32);
}
static void trunc_data(bw *b) {
    valid_min(b);
    b->cut = b->len - 1;
}
static void trunc_padding(bw *b) { /* the file ends inside the padding before the data section */
    hdr(b, 3, 1, 1);
    arch(b);
    tinfo(b, "a", 1, (uint64_t[]){8}, 0, 0);
    cut_here(b, 1);
    pad(b, 32);
}
static void duplicate_tensor(bw *b) {
    hdr(b, 3, 2, 1);
    arch(b);
    tinfo(b, "blk.0.attn_q.weight", 1, (uint64_t[]){8}, 0, 0);
    tinfo(b, "blk.0.attn_q.weight", 1, (uint64_t[]){8}, 0, 32);
    pad(b, 32);
    zeros(b, 64);
}

typedef struct tcase {
    const char *name;
    void (*build)(bw *);
    const char *expect; /* NULL: a valid file */
} tcase;

static const tcase cases[] = {
    {"valid_min", valid_min, NULL},
    {"valid_v2", valid_v2, NULL},
    {"valid_all_values", valid_all_values, NULL},
    {"valid_huge_alignment", valid_huge_alignment, NULL},
    {"empty_file", empty_file, "magic truncated"},
    {"bad_magic", bad_magic, "bad magic 'GGUX'"},
    {"version_0", version_0, "unsupported version 0"},
    {"version_1", version_1, "unsupported version 1"},
    {"version_4", version_4, "unsupported version 4"},
    {"version_big_endian", version_big_endian, "big-endian"},
    {"trunc_magic", trunc_magic, "magic truncated"},
    {"trunc_version", trunc_version, "version truncated"},
    {"trunc_tensor_count", trunc_tensor_count, "tensor_count truncated"},
    {"trunc_kv_count", trunc_kv_count, "kv_count truncated"},
    {"absurd_tensor_count", absurd_tensor_count, "tensor_count 9223372036854775808 is more than"},
    {"absurd_kv_count", absurd_kv_count, "kv_count 18446744073709551615 is more than"},
    {"trunc_key_len", trunc_key_len, "kv 0: key truncated"},
    {"trunc_key", trunc_key, "kv 0: key length 20 exceeds"},
    {"key_len_max", key_len_max, "key length 18446744073709551615 exceeds"},
    {"key_nul", key_nul, "key contains a NUL byte"},
    {"trunc_value_type", trunc_value_type, "kv 0 'general.x': value type truncated"},
    {"unknown_value_type", unknown_value_type, "kv 0 'general.x': unknown value type 13"},
    {"trunc_value", trunc_value, "kv 0 'general.x': value truncated"},
    {"trunc_string_value", trunc_string_value, "string value length 10 exceeds"},
    {"string_len_max", string_len_max, "string value length 18446744073709551615 exceeds"},
    {"trunc_array_header", trunc_array_header, "array count truncated"},
    {"trunc_array", trunc_array, "array count 10 of UINT32"},
    {"array_count_max", array_count_max, "array count 18446744073709551615 of UINT64"},
    {"string_array_absurd", string_array_absurd, "array count 4611686018427387904 of STRING"},
    {"trunc_string_array", trunc_string_array, "array element 1 string length 5 exceeds"},
    {"string_array_elem_len_max", string_array_elem_len_max, "array element 1 string length 18446744073709551615"},
    {"nested_array", nested_array, "nested arrays are not supported"},
    {"unknown_array_type", unknown_array_type, "unknown array element type 99"},
    {"duplicate_key", duplicate_key, "kv 2 'test.block_count': duplicate key (first defined by kv 1)"},
    {"alignment_type", alignment_type, "general.alignment has type UINT64, must be UINT32"},
    {"alignment_zero", alignment_zero, "general.alignment 0 is not a power of two"},
    {"alignment_not_pow2", alignment_not_pow2, "general.alignment 48 is not a power of two"},
    {"trunc_tensor_name", trunc_tensor_name, "tensor 0: name length 19 exceeds"},
    {"name_too_long", name_too_long, "name length 64 >= 64 bytes"},
    {"trunc_n_dims", trunc_n_dims, "tensor 0 'a': n_dims truncated"},
    {"n_dims_5", n_dims_5, "n_dims 5 out of range 1..4"},
    {"n_dims_0", n_dims_0, "n_dims 0 out of range 1..4"},
    {"trunc_ne", trunc_ne, "tensor 0 'blk.0.attn_q.weight': ne[1] truncated"},
    {"zero_dim", zero_dim, "ne[1] is 0"},
    {"negative_dim", negative_dim, "ne[0] = -8 is negative"},
    {"dims_overflow", dims_overflow, "size overflows"},
    {"bytes_overflow", bytes_overflow, "size overflows"},
    {"trunc_type", trunc_type, "type truncated"},
    {"unknown_tensor_type", unknown_tensor_type, "unknown tensor type id 39"},
    {"removed_tensor_type", removed_tensor_type, "unknown tensor type id 4 (removed"},
    {"removed_tensor_type_31", removed_tensor_type_31, "unknown tensor type id 31 (removed"},
    {"block_mismatch", block_mismatch, "ne[0] = 16 is not a multiple of the q4_0 block size 32"},
    {"trunc_offset", trunc_offset, "tensor 0 'a': offset truncated"},
    {"offset_unaligned", offset_unaligned, "tensor 1 'b': offset 36 is not a multiple of the alignment 32"},
    {"offset_overlap", offset_overlap, "tensor 1 'b': data [192, 224) overlaps tensor 0 'a' [160, 224)"},
    {"offset_same", offset_same, "overlaps tensor 0 'a'"},
    {"offset_past_eof", offset_past_eof, "tensor 1 'b': data [224, 256) past end of file (size 224)"},
    {"offset_wraps", offset_wraps, "offset 18446744073709551584 (+32 bytes) past end of file (size 160)"},
    {"trunc_data", trunc_data, "tensor 1 'b': data [192, 224) past end of file (size 223)"},
    {"trunc_padding", trunc_padding, "data section starts at 128, past end of file (size 102)"},
    {"duplicate_tensor", duplicate_tensor, "tensor 1 'blk.0.attn_q.weight': duplicate tensor name"},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static size_t build(const tcase *c, bw *b) {
    memset(b, 0, sizeof *b);
    c->build(b);
    return b->cut ? b->cut : b->len;
}

/* Opens and, when it succeeds, touches every accessor (what the fuzzer does too). */
static pb_status open_and_touch(const void *p, size_t n) {
    pb_gguf *g;
    pb_status s = pb_gguf_open_memory(p, n, &g);
    if (s) return s;
    volatile size_t sink = 0;
    for (int64_t i = 0; i < pb_gguf_n_kv(g); i++) {
        pb_gguf_value v;
        pb_gguf_kv_value(g, i, &v);
        sink += strlen(pb_gguf_kv_key(g, i));
        if (v.type == PB_GGUF_ARRAY && v.elem_type == PB_GGUF_STRING)
            for (uint64_t j = 0; j < v.n; j++) {
                pb_gguf_str st;
                if (pb_gguf_get_arr_str(g, i, j, &st) == PB_OK && st.len) sink += (uint8_t)st.ptr[st.len - 1];
            }
    }
    for (int64_t i = 0; i < pb_gguf_n_tensors(g); i++) {
        const pb_gguf_tensor *t = pb_gguf_tensor_at(g, i);
        sink += ((const uint8_t *)t->data)[t->nbytes - 1];
        if (pb_gguf_find_tensor(g, t->name) != t) sink = 0, s = PB_ERR_INTERNAL;
    }
    (void)sink;
    pb_gguf_close(g);
    return s;
}

static int write_corpus(const char *dir) {
    mkdir(dir, 0755);
    for (size_t i = 0; i < N_CASES; i++) {
        bw b;
        size_t n = build(&cases[i], &b);
        char path[512];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, cases[i].name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(b.p, 1, n, f) != n || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
    }
    printf("wrote %zu files to %s\n", N_CASES, dir);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) return write_corpus(argv[2]);
    const char *corpus = "tests/data/gguf";
    int n_bad = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        const tcase *c = &cases[i];
        bw b;
        size_t n = build(c, &b);
        pb_gguf *g = NULL;
        pb_error_clear();
        pb_status s = pb_gguf_open_memory(b.p, n, &g);
        if (!c->expect) {
            CHECK(s == PB_OK && g, "%s opens (%s)", c->name, pb_last_error());
            CHECK(open_and_touch(b.p, n) == PB_OK, "%s: every accessor works", c->name);
        } else {
            n_bad++;
            const char *e = pb_last_error();
            CHECK(s == PB_ERR_FORMAT && !g && strstr(e, c->expect) && strncmp(e, "gguf: ", 6) == 0 &&
                      strstr(e, " at offset "),
                  "%s -> %s: \"%s\" (want \"%s\")", c->name, pb_status_name(s), e, c->expect);
        }
        pb_gguf_close(g);
        /* the committed seed corpus holds exactly these bytes */
        char path[512];
        snprintf(path, sizeof path, "%s/%s.gguf", corpus, c->name);
        FILE *f = fopen(path, "rb");
        uint8_t disk[sizeof b.p + 1];
        size_t got = f ? fread(disk, 1, sizeof disk, f) : 0;
        if (f) fclose(f);
        CHECK(f && got == n && memcmp(disk, b.p, n) == 0, "corpus file %s is in sync (regenerate with --write-corpus)",
              path);
    }
    CHECK(n_bad >= 25, "%d malformed cases", n_bad);

    /* Every prefix of a valid file that cuts into its tensor data or metadata fails cleanly. */
    {
        bw b;
        size_t n = build(&cases[2], &b); /* valid_all_values: data ends at the last byte */
        int ok = 1;
        for (size_t k = 0; k < n; k++) {
            pb_gguf *g = NULL;
            pb_status s = pb_gguf_open_memory(b.p, k, &g);
            if (s != PB_ERR_FORMAT || g || !strstr(pb_last_error(), "gguf: ")) {
                ok = 0;
                NOTE("prefix %zu: %s %s", k, pb_status_name(s), pb_last_error());
            }
            pb_gguf_close(g);
        }
        CHECK(ok, "all %zu truncations of valid_all_values fail with PB_ERR_FORMAT", n);
        /* Every single-byte change either fails cleanly or opens with working accessors. */
        int crashes = 0, opened = 0;
        static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x20, 0x09};
        for (size_t k = 0; k < n; k++)
            for (size_t v = 0; v < sizeof vals; v++) {
                uint8_t save = b.p[k];
                b.p[k] = vals[v];
                pb_status s = open_and_touch(b.p, n);
                if (s == PB_OK)
                    opened++;
                else if (s != PB_ERR_FORMAT)
                    crashes++;
                b.p[k] = save;
            }
        CHECK(crashes == 0, "byte mutations of valid_all_values: only PB_OK or PB_ERR_FORMAT (%d opened)", opened);
    }

    /* Everything in the corpus directory (including cases found by fuzzing) is handled without a crash. */
    DIR *d = opendir(corpus);
    int n_files = 0, bad_status = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", corpus, e->d_name);
        pb_gguf *g = NULL;
        pb_status s = pb_gguf_open(path, &g);
        if (s == PB_OK) {
            pb_gguf_close(g);
            FILE *f = fopen(path, "rb");
            static uint8_t buf[1 << 20];
            size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
            if (f) fclose(f);
            s = open_and_touch(buf, n);
        }
        if (s != PB_OK && s != PB_ERR_FORMAT) {
            bad_status++;
            NOTE("%s: %s %s", path, pb_status_name(s), pb_last_error());
        }
        n_files++;
    }
    if (d) closedir(d);
    CHECK(n_files >= (int)N_CASES && bad_status == 0, "%d corpus files open or fail with PB_ERR_FORMAT", n_files);
    TEST_DONE();
}
