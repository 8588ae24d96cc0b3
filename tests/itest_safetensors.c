/* itest_safetensors.c -- tools/safetensors.c: valid single/sharded files, dtype conversion, and the
 * untrusted-header checks (length, JSON, dtype, shape, offsets, overlap, duplicates, shard names). */
#include "pb_test.h"

#include "../tools/safetensors.c" /* tools/ objects are not in the test link; compile the unit in */

#include "itest_convert_util.h"

/* [u64 header length][header][data] in a malloc'd buffer. */
static uint8_t *image(const char *header, const void *data, size_t data_len, size_t *size) {
    size_t hl = strlen(header);
    *size = 8 + hl + data_len;
    uint8_t *b = malloc(*size);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    if (data_len) memcpy(b + 8 + hl, data, data_len);
    return b;
}

/* Opens header+data from memory; returns the status and leaves the message in pb_last_error(). */
static pb_status try_header(const char *header, size_t data_len) {
    static uint8_t zeros[4096];
    size_t size;
    uint8_t *b = image(header, zeros, data_len, &size);
    pb_st_model *m = NULL;
    pb_status s = pb_st_open_memory(b, size, "t.safetensors", &m);
    pb_st_close(m);
    free(b);
    return s;
}

static void expect_bad(const char *what, const char *header, size_t data_len, const char *needle) {
    pb_error_clear();
    pb_status s = try_header(header, data_len);
    const char *e = pb_last_error();
    CHECK(s == PB_ERR_FORMAT && strstr(e, needle) && strstr(e, "t.safetensors"), "rejects %s: \"%s\"", what, e);
}

static void test_valid(void) {
    /* F32 [2,3] = 0..5, F16 [2] = {1, -2.5}, BF16 [3] = {1.5, -0, 3}, I32 [1] */
    uint8_t data[24 + 4 + 6 + 4];
    float f[6] = {0, 1, 2, 3, 4, 5};
    uint16_t h[2] = {0x3C00, 0xC100}, bf[3] = {0x3FC0, 0x8000, 0x4040};
    int32_t i32 = 7;
    memcpy(data, f, 24);
    memcpy(data + 24, h, 4);
    memcpy(data + 28, bf, 6);
    memcpy(data + 34, &i32, 4);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[28,34]},"
                      "\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
                      "\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[34,38]}}   ";
    size_t size;
    uint8_t *b = image(hdr, data, sizeof data, &size);
    pb_st_model *m = NULL;
    pb_status s = pb_st_open_memory(b, size, "valid", &m);
    CHECK(s == PB_OK, "valid header with metadata and trailing spaces opens (%s)", pb_last_error());
    if (s != PB_OK) {
        free(b);
        return;
    }
    CHECK(pb_st_n_tensors(m) == 4, "4 tensors (metadata is not one)");
    CHECK(strcmp(pb_st_tensor_at(m, 0)->name, "a") == 0 && strcmp(pb_st_tensor_at(m, 3)->name, "w") == 0,
          "tensors sorted by name");
    const pb_st_tensor *w = pb_st_find(m, "w");
    CHECK(w && w->n_dims == 2 && w->shape[0] == 2 && w->shape[1] == 3 && w->n_elements == 6 && w->nbytes == 24,
          "F32 [2,3] shape and size");
    CHECK(pb_st_find(m, "zz") == NULL && pb_st_find(m, "__metadata__") == NULL, "absent names are not found");
    float out[6] = {0};
    CHECK(w && pb_st_read_f32(w, 2, 3, out) == PB_OK && out[0] == 2 && out[2] == 4, "F32 element range read");
    const pb_st_tensor *a = pb_st_find(m, "a"), *bt = pb_st_find(m, "b"), *it = pb_st_find(m, "i");
    CHECK(a && pb_st_read_f32(a, 0, 2, out) == PB_OK && out[0] == 1.0f && out[1] == -2.5f, "F16 to f32");
    CHECK(bt && pb_st_read_f32(bt, 0, 3, out) == PB_OK && out[0] == 1.5f && out[1] == 0 && out[2] == 3.0f,
          "BF16 to f32");
    CHECK(it && pb_st_read_f32(it, 0, 1, out) == PB_ERR_UNSUPPORTED && strstr(pb_last_error(), "I32"),
          "I32 is parsed but not converted: %s", pb_last_error());
    CHECK(a && pb_st_read_f32(a, 1, 2, out) == PB_ERR_INVALID_ARG, "read past the tensor is refused");
    pb_st_close(m);
    free(b);
}

static void test_scalar(void) {
    /* A 0-dim tensor has one element (4 bytes for F32); an empty span for it is refused. */
    const char *hdr = "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                      "\"z\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[4,4]}}";
    pb_error_clear();
    CHECK(try_header(hdr, 4) == PB_OK, "scalar and zero-size tensors accepted (%s)", pb_last_error());
    expect_bad("a scalar with an empty span", "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}}", 0,
               "needs 4 bytes");
}

static void test_malformed(void) {
    uint8_t tiny[5] = {1, 2, 3, 4, 5};
    pb_st_model *m = NULL;
    pb_error_clear();
    CHECK(pb_st_open_memory(tiny, sizeof tiny, "t.safetensors", &m) == PB_ERR_FORMAT &&
              strstr(pb_last_error(), "too small"),
          "rejects a 5-byte file: \"%s\"", pb_last_error());
    /* header length larger than the file */
    uint8_t big[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    pb_error_clear();
    CHECK(pb_st_open_memory(big, sizeof big, "t.safetensors", &m) == PB_ERR_FORMAT &&
              strstr(pb_last_error(), "header length 4294967295"),
          "rejects a header length past the end: \"%s\"", pb_last_error());
    uint8_t huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
    pb_error_clear();
    CHECK(pb_st_open_memory(huge, sizeof huge, "t.safetensors", &m) == PB_ERR_FORMAT,
          "rejects a header length near 2^63: \"%s\"", pb_last_error());
    uint8_t zero[10] = {0};
    pb_error_clear();
    CHECK(pb_st_open_memory(zero, sizeof zero, "t.safetensors", &m) == PB_ERR_FORMAT, "rejects header length 0");

    expect_bad("non-JSON", "{\"a\": {\"dtype\": F32", 0, "not valid JSON");
    expect_bad("a header that is not an object", "[1, 2, 3]", 0, "does not start with '{'");
    expect_bad("text after the JSON", "{}   x", 0, "unexpected bytes after");
    expect_bad("an unknown dtype", "{\"a\":{\"dtype\":\"F12\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               "unknown dtype 'F12'");
    expect_bad("a missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype");
    expect_bad("offsets past the end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
               "past the end");
    expect_bad("offsets far past the end",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1e15,1000000000000004]}}", 8, "past the end");
    expect_bad("a span that does not match shape x dtype",
               "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 6 bytes");
    expect_bad("overlapping tensors",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, "overlap");
    expect_bad("identical spans",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
               8, "overlap");
    expect_bad("backwards offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8, "backwards");
    expect_bad("a negative dimension", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
               "shape[0]");
    expect_bad("a fractional dimension", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
               "shape[0]");
    expect_bad("a string dimension", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4,
               "shape[0]");
    expect_bad("an element count overflow",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
               "overflow");
    expect_bad("9 dimensions", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
               "dimensions");
    expect_bad("three data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
               "data_offsets");
    expect_bad("negative data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8,
               "data_offsets");
    expect_bad("an entry that is not an object", "{\"a\":[1,2]}", 0, "not a JSON object");
    expect_bad("__metadata__ that is not an object", "{\"__metadata__\":3}", 0, "__metadata__");
    expect_bad("a duplicate name",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "appears twice");
}

/* Every truncation and many byte flips of a valid file must fail cleanly or open; never crash. */
static void test_mutations(void) {
    const char *hdr = "{\"x\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                      "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    uint8_t data[12] = {0};
    size_t size;
    uint8_t *b = image(hdr, data, sizeof data, &size);
    int ok = 0, bad = 0, weird = 0;
    for (size_t n = 0; n <= size; n++) {
        pb_st_model *m = NULL;
        pb_status s = pb_st_open_memory(b, n, "trunc", &m);
        if (s == PB_OK)
            ok++;
        else if (s == PB_ERR_FORMAT)
            bad++;
        else
            weird++;
        pb_st_close(m);
    }
    CHECK(ok == 1 && weird == 0 && bad == (int)size, "truncations: only the full file opens (%d ok, %d bad)", ok, bad);
    uint32_t x = 12345;
    int opened = 0;
    weird = 0;
    for (int it = 0; it < 20000; it++) {
        uint8_t *c = malloc(size);
        memcpy(c, b, size);
        for (int k = 0; k < 3; k++) {
            x = x * 1664525u + 1013904223u;
            size_t at = (x >> 8) % size;
            x = x * 1664525u + 1013904223u;
            c[at] = (uint8_t)(x >> 24);
        }
        pb_st_model *m = NULL;
        pb_status s = pb_st_open_memory(c, size, "flip", &m);
        if (s == PB_OK) {
            opened++;
            /* whatever opened must be internally consistent */
            for (int64_t i = 0; i < pb_st_n_tensors(m); i++) {
                const pb_st_tensor *t = pb_st_tensor_at(m, i);
                const uint8_t *p = t->data;
                if (t->nbytes && (p < c + 8 || p + t->nbytes > c + size)) weird++;
            }
        } else if (s != PB_ERR_FORMAT) {
            weird++;
        }
        pb_st_close(m);
        free(c);
    }
    CHECK(weird == 0, "20000 random byte flips: every result is PB_ERR_FORMAT or in-bounds (%d opened)", opened);
    free(b);
}

static stw sample(void) {
    stw w = {0};
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t s23[2] = {2, 3}, s6[1] = {6};
    stw_add(&w, "model.a", "F32", 2, s23, v, sizeof v);
    stw_add(&w, "model.b", "F32", 1, s6, v, sizeof v);
    stw_add(&w, "model.c", "F32", 1, s6, v, sizeof v);
    stw_add(&w, "model.d", "F32", 2, s23, v, sizeof v);
    return w;
}

static void test_files(void) {
    const char *dir = make_tmpdir("st");
    char p[1024], q[1024];
    stw w = sample();
    pb_st_model *m = NULL;

    /* single file, through the directory and through the file path */
    CHECK(stw_write_dir(&w, dir, 1) == 0, "wrote model.safetensors");
    CHECK(pb_st_open(dir, &m) == PB_OK && pb_st_n_tensors(m) == 4 && pb_st_n_shards(m) == 1,
          "directory with model.safetensors opens (%s)", pb_last_error());
    pb_st_close(m);
    m = NULL;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK(pb_st_open(p, &m) == PB_OK && pb_st_find(m, "model.d"), "file path opens");
    const pb_st_tensor *t = m ? pb_st_find(m, "model.d") : NULL;
    float out[6];
    CHECK(t && pb_st_read_f32(t, 0, 6, out) == PB_OK && out[5] == 6, "data read from the mapping");
    pb_st_close(m);
    m = NULL;
    /* another *.safetensors besides model.safetensors: model.safetensors wins; without it two is an error */
    snprintf(q, sizeof q, "%s/other.safetensors", dir);
    copy_file(p, q);
    CHECK(pb_st_open(dir, &m) == PB_OK, "model.safetensors preferred over other files");
    pb_st_close(m);
    m = NULL;
    unlink(p);
    snprintf(p, sizeof p, "%s/third.safetensors", dir);
    copy_file(q, p);
    pb_error_clear();
    CHECK(pb_st_open(dir, &m) == PB_ERR_FORMAT && strstr(pb_last_error(), "no model.safetensors.index.json"),
          "two safetensors without an index: \"%s\"", pb_last_error());
    unlink(p);
    CHECK(pb_st_open(dir, &m) == PB_OK && pb_st_n_tensors(m) == 4, "a single differently named file is used");
    pb_st_close(m);
    m = NULL;
    unlink(q);
    pb_error_clear();
    CHECK(pb_st_open(dir, &m) == PB_ERR_NOT_FOUND && strstr(pb_last_error(), "no safetensors"), "empty folder: \"%s\"",
          pb_last_error());

    /* sharded */
    CHECK(stw_write_dir(&w, dir, 3) == 0, "wrote 3 shards + index");
    pb_error_clear();
    CHECK(pb_st_open(dir, &m) == PB_OK && pb_st_n_tensors(m) == 4 && pb_st_n_shards(m) == 3,
          "sharded folder opens with 3 shards (%s)", pb_last_error());
    t = m ? pb_st_find(m, "model.c") : NULL;
    CHECK(t && t->shard == 2 && pb_st_read_f32(t, 0, 6, out) == PB_OK && out[0] == 1, "tensor from the third shard");
    pb_st_close(m);
    m = NULL;
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    CHECK(pb_st_open(p, &m) == PB_OK && pb_st_n_tensors(m) == 4, "index path opens");
    pb_st_close(m);
    m = NULL;
    /* text after the index's object is refused (cJSON alone stopped at the object's end and opened the model) */
    char *idx = NULL;
    size_t idx_len = 0;
    if (pb_read_file(p, &idx, &idx_len) == PB_OK) {
        FILE *f = fopen(p, "ab");
        if (f) {
            fputs(" junk\n", f);
            fclose(f);
        }
        pb_error_clear();
        CHECK(pb_st_open(dir, &m) == PB_ERR_FORMAT && strstr(pb_last_error(), "more text after the JSON value"),
              "index with text after its object: \"%s\"", pb_last_error());
        pb_st_close(m);
        m = NULL;
        write_text(dir, "model.safetensors.index.json", idx);
        free(idx);
    } else
        CHECK(0, "read back the index: %s", pb_last_error());
    CHECK(pb_st_open(dir, &m) == PB_OK && pb_st_n_tensors(m) == 4, "the index restored opens again");
    pb_st_close(m);
    m = NULL;

    /* index problems */
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"model.a\":\"../model-00001-of-00003.safetensors\"}}");
    pb_error_clear();
    CHECK(pb_st_open(dir, &m) == PB_ERR_FORMAT && strstr(pb_last_error(), "plain file name"),
          "index shard with a path is refused: \"%s\"", pb_last_error());
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"model.a\":\"model-00002-of-00003.safetensors\"}}");
    pb_error_clear();
    CHECK(pb_st_open(dir, &m) == PB_ERR_FORMAT && strstr(pb_last_error(), "'model.a' is listed in"),
          "index entry not in its shard: \"%s\"", pb_last_error());
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"model.a\":\"missing.safetensors\"}}");
    pb_error_clear();
    CHECK(pb_st_open(dir, &m) == PB_ERR_IO && strstr(pb_last_error(), "missing.safetensors"),
          "index naming a missing shard: \"%s\"", pb_last_error());
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":[]}");
    pb_error_clear();
    CHECK(pb_st_open(dir, &m) == PB_ERR_FORMAT && strstr(pb_last_error(), "weight_map"),
          "index without weight_map object: \"%s\"", pb_last_error());
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"model.a\":");
    pb_error_clear();
    CHECK(pb_st_open(dir, &m) == PB_ERR_FORMAT && strstr(pb_last_error(), "not valid JSON"),
          "index that is not JSON: \"%s\"", pb_last_error());
    /* the same tensor in two shards */
    snprintf(p, sizeof p, "%s/model-00001-of-00003.safetensors", dir);
    snprintf(q, sizeof q, "%s/model-00003-of-00003.safetensors", dir);
    copy_file(p, q);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"model.a\":\"model-00001-of-00003.safetensors\","
               "\"model.b\":\"model-00003-of-00003.safetensors\"}}");
    pb_error_clear();
    CHECK(pb_st_open(dir, &m) == PB_ERR_FORMAT && strstr(pb_last_error(), "is in both"), "tensor in two shards: \"%s\"",
          pb_last_error());
    /* a truncated shard */
    copy_file(p, q);
    if (truncate(q, 20) != 0) NOTE("truncate failed");
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"model.a\":\"model-00003-of-00003.safetensors\"}}");
    pb_error_clear();
    CHECK(pb_st_open(dir, &m) == PB_ERR_FORMAT && strstr(pb_last_error(), "model-00003-of-00003.safetensors"),
          "truncated shard names its file: \"%s\"", pb_last_error());
    pb_error_clear();
    CHECK(pb_st_open("/nonexistent/pb", &m) == PB_ERR_NOT_FOUND, "missing path: \"%s\"", pb_last_error());
    stw_free(&w);
    rm_rf(dir);
}

int main(void) {
    test_valid();
    test_scalar();
    test_malformed();
    test_mutations();
    test_files();
    TEST_DONE();
}
