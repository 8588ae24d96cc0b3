/* gguf_write.c -- GGUF v3 writer llama.cpp accepts: unique keys, no nested/empty arrays, padded layout. */
#include "gguf/gguf.h"
#include "tensor/types.h"

#include <stdlib.h>
#include <string.h>

#define MAX_KEY_LEN 65535
#define OUT_BUF     (1u << 20)

typedef struct wkv {
    char *key;
    pb_gguf_vtype type;
    uint8_t *val; /* serialized: u32 type, then the value encoding */
    size_t val_len;
} wkv;

typedef struct wtensor {
    char *name;
    int type;
    int n_dims;
    int64_t ne[4];
    size_t nbytes;
    uint64_t offset;
    const void *data; /* borrowed; NULL = produced by the fill callback */
} wtensor;

struct pb_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    pb_gguf_fill_fn fill;
    void *fill_user;
    pb_gguf_progress_fn progress;
    void *progress_user;
};

pb_gguf_writer *pb_gguf_writer_new(void) { return pb_calloc(1, sizeof(pb_gguf_writer)); }

void pb_gguf_writer_free(pb_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* ---- serialized values ---------------------------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->cap - b->len < n) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc - b->len < n) {
            if (nc > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            nc *= 2;
        }
        uint8_t *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_u32(buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void put_u64(buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(buf *b, const char *s, size_t len) {
    put_u64(b, len);
    put(b, s, len);
}

static pb_status check_key(const char *key) {
    if (!key) return pb_error(PB_ERR_INVALID_ARG, "gguf writer: key is NULL");
    size_t n = strlen(key);
    if (n == 0 || n > MAX_KEY_LEN)
        return pb_error(PB_ERR_INVALID_ARG, "gguf writer: key length %zu out of range 1..%d", n, MAX_KEY_LEN);
    return PB_OK;
}

static int64_t find_kv(const pb_gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) return (int64_t)i;
    return -1;
}

/* Stores key = serialized value b (takes ownership of b->p in every case). */
static pb_status store(pb_gguf_writer *w, const char *key, pb_gguf_vtype type, buf *b) {
    pb_status s = check_key(key);
    if (!s && b->oom) s = pb_error(PB_ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
    if (!s && strcmp(key, "general.alignment") == 0) {
        uint32_t a = 0;
        if (type == PB_GGUF_UINT32) a = (uint32_t)(b->p[4] | b->p[5] << 8 | b->p[6] << 16 | (uint32_t)b->p[7] << 24);
        if (type != PB_GGUF_UINT32)
            s = pb_error(PB_ERR_INVALID_ARG, "gguf writer: general.alignment must be UINT32, got %s",
                         pb_gguf_vtype_name(type));
        else if (a == 0 || (a & (a - 1)) != 0)
            s = pb_error(PB_ERR_INVALID_ARG, "gguf writer: general.alignment %u is not a power of two", a);
    }
    if (s) {
        free(b->p);
        return s;
    }
    int64_t i = find_kv(w, key);
    if (i >= 0) { /* replace, keeping the position of first insertion */
        free(w->kv[i].val);
        w->kv[i].type = type;
        w->kv[i].val = b->p;
        w->kv[i].val_len = b->len;
        return PB_OK;
    }
    if (w->n_kv == w->cap_kv) {
        size_t nc = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *nk = realloc(w->kv, nc * sizeof *nk);
        if (!nk) {
            free(b->p);
            return pb_error(PB_ERR_NOMEM, "gguf writer: out of memory");
        }
        w->kv = nk;
        w->cap_kv = nc;
    }
    char *k = pb_strdup(key);
    if (!k) {
        free(b->p);
        return PB_ERR_NOMEM;
    }
    w->kv[w->n_kv++] = (wkv){k, type, b->p, b->len};
    return PB_OK;
}

static pb_status set_scalar(pb_gguf_writer *w, const char *key, pb_gguf_vtype t, uint64_t bits) {
    buf b = {0};
    put_u32(&b, t);
    size_t n = pb_gguf_vtype_size(t);
    for (size_t i = 0; i < n; i++) {
        uint8_t x = (uint8_t)(bits >> (8 * i));
        put(&b, &x, 1);
    }
    return store(w, key, t, &b);
}

pb_status pb_gguf_set_u8(pb_gguf_writer *w, const char *key, uint8_t v) { return set_scalar(w, key, PB_GGUF_UINT8, v); }
pb_status pb_gguf_set_i8(pb_gguf_writer *w, const char *key, int8_t v) {
    return set_scalar(w, key, PB_GGUF_INT8, (uint8_t)v);
}
pb_status pb_gguf_set_u16(pb_gguf_writer *w, const char *key, uint16_t v) {
    return set_scalar(w, key, PB_GGUF_UINT16, v);
}
pb_status pb_gguf_set_i16(pb_gguf_writer *w, const char *key, int16_t v) {
    return set_scalar(w, key, PB_GGUF_INT16, (uint16_t)v);
}
pb_status pb_gguf_set_u32(pb_gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, PB_GGUF_UINT32, v);
}
pb_status pb_gguf_set_i32(pb_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, PB_GGUF_INT32, (uint32_t)v);
}
pb_status pb_gguf_set_u64(pb_gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, PB_GGUF_UINT64, v);
}
pb_status pb_gguf_set_i64(pb_gguf_writer *w, const char *key, int64_t v) {
    return set_scalar(w, key, PB_GGUF_INT64, (uint64_t)v);
}
pb_status pb_gguf_set_f32(pb_gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return set_scalar(w, key, PB_GGUF_FLOAT32, bits);
}
pb_status pb_gguf_set_f64(pb_gguf_writer *w, const char *key, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    return set_scalar(w, key, PB_GGUF_FLOAT64, bits);
}
pb_status pb_gguf_set_bool(pb_gguf_writer *w, const char *key, bool v) {
    return set_scalar(w, key, PB_GGUF_BOOL, v ? 1 : 0);
}

pb_status pb_gguf_set_strn(pb_gguf_writer *w, const char *key, const char *s, size_t len) {
    if (!s && len) return pb_error(PB_ERR_INVALID_ARG, "gguf writer: key '%s': string is NULL", key ? key : "");
    buf b = {0};
    put_u32(&b, PB_GGUF_STRING);
    put_str(&b, s ? s : "", len);
    return store(w, key, PB_GGUF_STRING, &b);
}

pb_status pb_gguf_set_str(pb_gguf_writer *w, const char *key, const char *s) {
    if (!s) return pb_error(PB_ERR_INVALID_ARG, "gguf writer: key '%s': string is NULL", key ? key : "");
    return pb_gguf_set_strn(w, key, s, strlen(s));
}

/* Host-order elements -> little-endian bytes (BOOL normalized to 0/1). */
static void put_elems(buf *b, pb_gguf_vtype t, const void *data, uint64_t n) {
    size_t es = pb_gguf_vtype_size(t);
    const uint8_t *p = data;
    if (t == PB_GGUF_BOOL) {
        for (uint64_t i = 0; i < n; i++) {
            uint8_t x = p[i] != 0;
            put(b, &x, 1);
        }
        return;
    }
    /* The project's targets are little-endian (x86-64, ARM64): host order is file order. */
    size_t bytes;
    if (!pb_mul_ok((size_t)n, es, &bytes)) {
        b->oom = true;
        return;
    }
    put(b, p, bytes);
}

pb_status pb_gguf_set_arr(pb_gguf_writer *w, const char *key, pb_gguf_vtype elem_type, const void *data, uint64_t n) {
    if ((unsigned)elem_type >= PB_GGUF_VTYPE_COUNT || elem_type == PB_GGUF_STRING || elem_type == PB_GGUF_ARRAY)
        return pb_error(PB_ERR_INVALID_ARG, "gguf writer: key '%s': array element type %s not allowed here",
                        key ? key : "", pb_gguf_vtype_name(elem_type));
    if (n == 0 || !data)
        return pb_error(PB_ERR_INVALID_ARG, "gguf writer: key '%s': empty arrays cannot be written", key ? key : "");
    buf b = {0};
    put_u32(&b, PB_GGUF_ARRAY);
    put_u32(&b, elem_type);
    put_u64(&b, n);
    put_elems(&b, elem_type, data, n);
    return store(w, key, PB_GGUF_ARRAY, &b);
}

pb_status pb_gguf_set_arr_str(pb_gguf_writer *w, const char *key, const char *const *strs, const size_t *lens,
                              uint64_t n) {
    if (n == 0 || !strs)
        return pb_error(PB_ERR_INVALID_ARG, "gguf writer: key '%s': empty arrays cannot be written", key ? key : "");
    buf b = {0};
    put_u32(&b, PB_GGUF_ARRAY);
    put_u32(&b, PB_GGUF_STRING);
    put_u64(&b, n);
    for (uint64_t i = 0; i < n; i++) {
        size_t len = lens ? lens[i] : (strs[i] ? strlen(strs[i]) : 0);
        if (!strs[i] && len) {
            free(b.p);
            return pb_error(PB_ERR_INVALID_ARG, "gguf writer: key '%s': string %llu is NULL", key ? key : "",
                            (unsigned long long)i);
        }
        put_str(&b, strs[i] ? strs[i] : "", len);
    }
    return store(w, key, PB_GGUF_ARRAY, &b);
}

pb_status pb_gguf_copy_kv(pb_gguf_writer *w, const pb_gguf *src, int64_t i) {
    pb_gguf_value v;
    pb_status s = pb_gguf_kv_value(src, i, &v);
    if (s) return s;
    const char *key = pb_gguf_kv_key(src, i);
    switch (v.type) {
    case PB_GGUF_STRING: return pb_gguf_set_strn(w, key, v.v.s.ptr, (size_t)v.v.s.len);
    case PB_GGUF_BOOL: return pb_gguf_set_bool(w, key, v.v.b);
    case PB_GGUF_FLOAT32: return pb_gguf_set_f32(w, key, (float)v.v.f);
    case PB_GGUF_FLOAT64: return pb_gguf_set_f64(w, key, v.v.f);
    case PB_GGUF_ARRAY: break;
    default: {
        bool sgn =
            v.type == PB_GGUF_INT8 || v.type == PB_GGUF_INT16 || v.type == PB_GGUF_INT32 || v.type == PB_GGUF_INT64;
        return set_scalar(w, key, v.type, sgn ? (uint64_t)v.v.i : v.v.u);
    }
    }
    if (v.n == 0) return PB_OK; /* llama.cpp's writers never emit empty arrays: the key is dropped */
    if (v.elem_type != PB_GGUF_STRING) return pb_gguf_set_arr(w, key, v.elem_type, v.data, v.n);
    buf b = {0};
    put_u32(&b, PB_GGUF_ARRAY);
    put_u32(&b, PB_GGUF_STRING);
    put_u64(&b, v.n);
    for (uint64_t j = 0; j < v.n; j++) {
        pb_gguf_str str;
        if ((s = pb_gguf_get_arr_str(src, i, j, &str))) {
            free(b.p);
            return s;
        }
        put_str(&b, str.ptr, (size_t)str.len);
    }
    return store(w, key, PB_GGUF_ARRAY, &b);
}

pb_status pb_gguf_remove_key(pb_gguf_writer *w, const char *key) {
    int64_t i = key ? find_kv(w, key) : -1;
    if (i < 0) return pb_error(PB_ERR_NOT_FOUND, "gguf writer: no key '%s'", key ? key : "(null)");
    free(w->kv[i].key);
    free(w->kv[i].val);
    memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - (size_t)i - 1) * sizeof *w->kv);
    w->n_kv--;
    return PB_OK;
}

/* ---- tensors ------------------------------------------------------------------------------------ */

pb_status pb_gguf_add_tensor(pb_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                             const void *data) {
    if (!name) return pb_error(PB_ERR_INVALID_ARG, "gguf writer: tensor name is NULL");
    size_t len = strlen(name);
    if (len == 0 || len > 63)
        return pb_error(PB_ERR_INVALID_ARG, "gguf writer: tensor '%s': name length %zu out of range 1..63", name, len);
    const pb_type_traits *tr = pb_type_get(type);
    if (tr->blck <= 0 || tr->type_size == 0)
        return pb_error(PB_ERR_INVALID_ARG, "gguf writer: tensor '%s': unknown tensor type id %d", name, type);
    if (n_dims < 1 || n_dims > 4 || !ne)
        return pb_error(PB_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %d out of range 1..4", name, n_dims);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data};
    size_t nbytes = 0;
    bool ok = true;
    int64_t nel = 1;
    for (int j = 0; j < n_dims; j++) {
        if (ne[j] < 1)
            return pb_error(PB_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[%d] = %lld must be >= 1", name, j,
                            (long long)ne[j]);
        t.ne[j] = ne[j];
        ok = ok && !__builtin_mul_overflow(nel, ne[j], &nel);
    }
    if (t.ne[0] % tr->blck != 0)
        return pb_error(PB_ERR_INVALID_ARG,
                        "gguf writer: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %lld", name,
                        (long long)t.ne[0], tr->name, (long long)tr->blck);
    ok = ok && pb_mul_ok((size_t)(t.ne[0] / tr->blck), tr->type_size, &nbytes);
    for (int j = 1; j < 4; j++) ok = ok && pb_mul_ok(nbytes, (size_t)t.ne[j], &nbytes);
    if (!ok) return pb_error(PB_ERR_INVALID_ARG, "gguf writer: tensor '%s': size overflows", name);
    t.nbytes = nbytes;
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return pb_error(PB_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
    if (w->n_t == w->cap_t) {
        size_t nc = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *nt = realloc(w->t, nc * sizeof *nt);
        if (!nt) return pb_error(PB_ERR_NOMEM, "gguf writer: out of memory");
        w->t = nt;
        w->cap_t = nc;
    }
    if (!(t.name = pb_strdup(name))) return PB_ERR_NOMEM;
    w->t[w->n_t++] = t;
    return PB_OK;
}

void pb_gguf_writer_set_fill(pb_gguf_writer *w, pb_gguf_fill_fn fn, void *user) {
    w->fill = fn;
    w->fill_user = user;
}

void pb_gguf_writer_set_progress(pb_gguf_writer *w, pb_gguf_progress_fn fn, void *user) {
    w->progress = fn;
    w->progress_user = user;
}

/* ---- output --------------------------------------------------------------------------------------- */

/* Where bytes go: a growing memory image, or an atomic file through a staging buffer. */
typedef struct sink {
    pb_atomic_file *af;
    buf b;
    size_t total; /* bytes emitted so far */
} sink;

static pb_status flush(sink *k) {
    if (!k->af || k->b.len == 0) return PB_OK;
    pb_status s = pb_atomic_write(k->af, k->b.p, k->b.len);
    k->b.len = 0;
    return s;
}

static pb_status emit(sink *k, const void *p, size_t n) {
    k->total += n;
    if (k->af && n >= OUT_BUF) { /* large blobs go straight to the file */
        pb_status s = flush(k);
        return s ? s : pb_atomic_write(k->af, p, n);
    }
    put(&k->b, p, n);
    if (k->b.oom) return pb_error(PB_ERR_NOMEM, "gguf writer: out of memory");
    return (k->af && k->b.len >= OUT_BUF) ? flush(k) : PB_OK;
}

static pb_status emit_zeros(sink *k, size_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t m = PB_MIN(n, sizeof zeros);
        pb_status s = emit(k, zeros, m);
        if (s) return s;
        n -= m;
    }
    return PB_OK;
}

static size_t writer_alignment(const pb_gguf_writer *w) {
    int64_t i = find_kv(w, "general.alignment");
    if (i < 0) return 32;
    const uint8_t *p = w->kv[i].val + 4; /* validated UINT32 power of two by store() */
    return (size_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
}

static pb_status write_all(pb_gguf_writer *w, sink *k) {
    size_t align = writer_alignment(w);
    buf h = {0};
    put(&h, "GGUF", 4);
    put_u32(&h, 3);
    put_u64(&h, w->n_t);
    put_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&h, w->kv[i].key, strlen(w->kv[i].key));
        put(&h, w->kv[i].val, w->kv[i].val_len);
    }
    uint64_t off = 0;
    size_t total_data = 0, max_fill = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        if (!t->data && !w->fill) {
            free(h.p);
            return pb_error(PB_ERR_INVALID_ARG, "gguf writer: tensor '%s' has no data and no fill callback", t->name);
        }
        if (!t->data) max_fill = PB_MAX(max_fill, t->nbytes);
        t->offset = off;
        put_str(&h, t->name, strlen(t->name));
        put_u32(&h, (uint32_t)t->n_dims);
        for (int j = 0; j < t->n_dims; j++) put_u64(&h, (uint64_t)t->ne[j]);
        put_u32(&h, (uint32_t)t->type);
        put_u64(&h, off);
        off += PB_PAD(t->nbytes, align);
        total_data += t->nbytes;
    }
    if (h.oom) {
        free(h.p);
        return pb_error(PB_ERR_NOMEM, "gguf writer: out of memory");
    }
    size_t hdr = h.len;
    pb_status s = emit(k, h.p, h.len);
    free(h.p);
    /* Padding before the data section. With no tensors there is nothing to align, and a huge (valid)
     * general.alignment must not turn a tiny metadata-only file into gigabytes of zeros. */
    if (!s && w->n_t) s = emit_zeros(k, PB_PAD(hdr, align) - hdr);
    if (!k->af && !s) { /* memory image: reserve the whole size once */
        size_t need = k->total + (size_t)off;
        if (need > k->b.cap) {
            uint8_t *np = realloc(k->b.p, need);
            if (!np) return pb_error(PB_ERR_NOMEM, "gguf writer: out of memory for a %zu-byte image", need);
            k->b.p = np;
            k->b.cap = need;
        }
    }
    uint8_t *scratch = NULL;
    if (!s && max_fill && k->af && !(scratch = pb_aligned_alloc(max_fill))) s = PB_ERR_NOMEM;
    size_t done = 0;
    for (size_t i = 0; i < w->n_t && !s; i++) {
        wtensor *t = &w->t[i];
        if (!t->data) pb_error_clear();
        if (t->data) {
            s = emit(k, t->data, t->nbytes);
        } else if (!k->af) { /* fill straight into the image */
            s = w->fill(w->fill_user, (int64_t)i, k->b.p + k->b.len, t->nbytes);
            k->b.len += t->nbytes;
            k->total += t->nbytes;
        } else {
            s = w->fill(w->fill_user, (int64_t)i, scratch, t->nbytes);
            if (!s) s = emit(k, scratch, t->nbytes);
        }
        if (s && !t->data && !pb_last_error()[0]) pb_error(s, "gguf writer: fill callback failed");
        if (s && !t->data) pb_error_prefix(s, "gguf writer: tensor '%s': ", t->name);
        if (!s) s = emit_zeros(k, PB_PAD(t->nbytes, align) - t->nbytes);
        done += t->nbytes;
        if (!s && w->progress) w->progress(w->progress_user, done, total_data);
    }
    pb_aligned_free(scratch);
    if (!s) s = flush(k);
    return s;
}

pb_status pb_gguf_write(pb_gguf_writer *w, const char *path) {
    pb_atomic_file af;
    pb_status s = pb_atomic_open(path, &af);
    if (s) return s;
    sink k = {.af = &af};
    s = write_all(w, &k);
    free(k.b.p);
    if (s) {
        pb_atomic_abort(&af);
        return s;
    }
    return pb_atomic_commit(&af);
}

pb_status pb_gguf_write_memory(pb_gguf_writer *w, void **out, size_t *len) {
    *out = NULL;
    *len = 0;
    sink k = {0};
    pb_status s = write_all(w, &k);
    if (s) {
        free(k.b.p);
        return s;
    }
    *out = k.b.p ? k.b.p : malloc(1);
    *len = k.total;
    return *out ? PB_OK : pb_error(PB_ERR_NOMEM, "gguf writer: out of memory");
}
