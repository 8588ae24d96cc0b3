/* fuzz_gguf.c -- libFuzzer target: pb_gguf_open_memory on any bytes, every accessor, a writer round trip, and the
 * model's header checks (hparams, per-arch tensor check). corpus: tests/data/gguf/ (gemma4_*: micro Gemma 4 files) */
#include "gguf/gguf.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink;

static void touch_kvs(const pb_gguf *g) {
    for (int64_t i = 0; i < pb_gguf_n_kv(g); i++) {
        const char *key = pb_gguf_kv_key(g, i);
        if (pb_gguf_find_key(g, key) != i) abort(); /* keys are unique: lookup finds this one */
        pb_gguf_value v;
        if (pb_gguf_kv_value(g, i, &v) != PB_OK || v.type != pb_gguf_kv_type(g, i)) abort();
        uint32_t u32;
        int64_t i64;
        float f;
        bool b;
        pb_gguf_str s;
        pb_gguf_vtype et;
        uint64_t n;
        const void *d;
        pb_gguf_get_u32(g, key, &u32);
        pb_gguf_get_i64(g, key, &i64);
        pb_gguf_get_f32(g, key, &f);
        pb_gguf_get_bool(g, key, &b);
        if (pb_gguf_get_str(g, key, &s) == PB_OK && s.len) sink += (uint8_t)s.ptr[s.len - 1];
        if (pb_gguf_get_arr(g, key, &et, &n, &d) == PB_OK && n) {
            if (et == PB_GGUF_STRING) {
                for (uint64_t j = 0; j < n; j++)
                    if (pb_gguf_get_arr_str(g, i, j, &s) != PB_OK)
                        abort();
                    else if (s.len)
                        sink += (uint8_t)s.ptr[s.len - 1];
                if (pb_gguf_get_arr_str(g, i, n, &s) == PB_OK) abort();
            } else {
                sink += ((const uint8_t *)d)[n * pb_gguf_vtype_size(et) - 1];
            }
        }
    }
}

static void touch_tensors(const pb_gguf *g) {
    const uint8_t *base = pb_gguf_base(g), *end = base + pb_gguf_file_size(g);
    for (int64_t i = 0; i < pb_gguf_n_tensors(g); i++) {
        const pb_gguf_tensor *t = pb_gguf_tensor_at(g, i);
        const uint8_t *p = t->data;
        if (pb_gguf_find_tensor(g, t->name) != t) abort();
        if (p < base || p + t->nbytes > end || t->nbytes == 0) abort();
        sink += p[0] + p[t->nbytes - 1];
    }
    sink += pb_gguf_layout_contiguous(g);
}

/* What the reader accepts, the writer can copy (unless a name/key breaks a writer-only rule), and the copy reads back.
 */
static void round_trip(const pb_gguf *g) {
    pb_gguf_writer *w = pb_gguf_writer_new();
    if (!w) return;
    bool ok = true;
    for (int64_t i = 0; ok && i < pb_gguf_n_kv(g); i++) ok = pb_gguf_copy_kv(w, g, i) == PB_OK;
    for (int64_t i = 0; ok && i < pb_gguf_n_tensors(g); i++) {
        const pb_gguf_tensor *t = pb_gguf_tensor_at(g, i);
        ok = pb_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) == PB_OK;
    }
    void *buf = NULL;
    size_t len = 0;
    if (ok) {
        if (pb_gguf_write_memory(w, &buf, &len) != PB_OK) abort();
        pb_gguf *h;
        if (pb_gguf_open_memory(buf, len, &h) != PB_OK) {
            fprintf(stderr, "re-read of the writer's output failed: %s\n", pb_last_error());
            abort();
        }
        if (pb_gguf_n_tensors(h) != pb_gguf_n_tensors(g) || !pb_gguf_layout_contiguous(h)) abort();
        for (int64_t i = 0; i < pb_gguf_n_tensors(h); i++)
            if (memcmp(pb_gguf_tensor_at(h, i)->data, pb_gguf_tensor_at(g, i)->data, pb_gguf_tensor_at(g, i)->nbytes))
                abort();
        pb_gguf_close(h);
        free(buf);
    }
    pb_gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pb_gguf *g;
    pb_status s = pb_gguf_open_memory(data, size, &g);
    if (s != PB_OK) {
        if (s != PB_ERR_FORMAT && s != PB_ERR_NOMEM) abort();
        if (strncmp(pb_last_error(), "gguf: ", 6) != 0) abort(); /* every rejection names itself */
        return 0;
    }
    touch_kvs(g);
    touch_tensors(g);
    round_trip(g);
    /* what pb_model_open checks before it binds weights: refusals only, never a crash */
    pb_hparams hp;
    if (pb_hparams_from_gguf(g, &hp) == PB_OK) sink += pb_arch_check_tensors(g, &hp, NULL, NULL) == PB_OK;
    pb_gguf_close(g);
    return 0;
}
