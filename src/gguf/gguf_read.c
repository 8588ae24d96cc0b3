/* gguf_read.c -- validating GGUF v2/v3 reader (mmap or memory buffer); untrusted input, never asserts on it. */
#include "gguf/gguf.h"
#include "tensor/types.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the parsed file ------------------------------------------------------------------------- */

typedef struct kvrec {
    const char *key; /* NUL-terminated copy (arena) */
    size_t key_off;  /* file offset of the key's bytes */
    size_t key_len;
    pb_gguf_vtype type;
    size_t val_off;          /* file offset of the value (just after the u32 type) */
    pb_gguf_vtype elem_type; /* arrays */
    uint64_t n;              /* arrays: element count */
    size_t data_off;         /* arrays: file offset of the first element */
    size_t *str_off;         /* string arrays: file offset of each element's u64 length */
} kvrec;

typedef struct tinfo {
    size_t name_off; /* file offset of the name bytes */
    size_t name_len;
    size_t info_off;     /* file offset of the tensor-info record */
    size_t offset_field; /* file offset of the u64 offset field */
} tinfo;

struct pb_gguf {
    pb_map map; /* owned when opened from a path */
    const uint8_t *base;
    size_t size;
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    int64_t n_kv;
    kvrec *kv;
    size_t kv_cap; /* records allocated (grows while parsing) */
    int64_t n_tensors;
    pb_gguf_tensor *t;
    tinfo *ti;
    char *arena;               /* keys and tensor names, NUL-terminated */
    int64_t *kv_hash, *t_hash; /* open addressing tables of indices, -1 = empty */
    size_t kv_hcap, t_hcap;
};

/* ---- byte cursor with error context ---------------------------------------------------------- */

typedef struct cur {
    const uint8_t *b;
    size_t size, pos;
    char ctx[160]; /* "kv 3 'general.name'" or "tensor 2 'blk.0.attn_q.weight'": prefix of messages */
} cur;

/* Printable copy of up to 60 bytes of a name from the file (for messages only). */
static void printable(char *dst, size_t cap, const uint8_t *s, size_t len) {
    size_t j = 0;
    for (size_t i = 0; i < len && j + 4 < cap; i++) {
        if (i == 60) {
            memcpy(dst + j, "...", 3);
            j += 3;
            break;
        }
        dst[j++] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    }
    dst[j] = 0;
}

static pb_status bad(const cur *c, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static pb_status bad(const cur *c, size_t off, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pb_error(PB_ERR_FORMAT, "gguf: %s%s%s at offset %zu", c->ctx, c->ctx[0] ? ": " : "", msg, off);
}

static size_t left(const cur *c) { return c->size - c->pos; }

static pb_status need(const cur *c, size_t n, const char *field) {
    if (n <= left(c)) return PB_OK;
    return bad(c, c->pos, "%s truncated (needs %zu bytes, %zu left, file size %zu)", field, n, left(c), c->size);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static pb_status rd_u32(cur *c, const char *field, uint32_t *v) {
    pb_status s = need(c, 4, field);
    if (s) return s;
    *v = le32(c->b + c->pos);
    c->pos += 4;
    return PB_OK;
}

static pb_status rd_u64(cur *c, const char *field, uint64_t *v) {
    pb_status s = need(c, 8, field);
    if (s) return s;
    *v = le64(c->b + c->pos);
    c->pos += 8;
    return PB_OK;
}

/* Reads a GGUF string header and skips its bytes: *off = file offset of the bytes. */
static pb_status rd_str(cur *c, const char *field, size_t *off, size_t *len) {
    size_t at = c->pos;
    uint64_t n;
    pb_status s = rd_u64(c, field, &n);
    if (s) return s;
    if (n > left(c))
        return bad(c, at, "%s length %llu exceeds the %zu bytes left in the file (size %zu)", field,
                   (unsigned long long)n, left(c), c->size);
    *off = c->pos;
    *len = (size_t)n;
    c->pos += (size_t)n;
    return PB_OK;
}

/* ---- value types ----------------------------------------------------------------------------- */

static const size_t vsize[PB_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const vname[PB_GGUF_VTYPE_COUNT] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                                       "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                                       "UINT64", "INT64",   "FLOAT64"};

const char *pb_gguf_vtype_name(pb_gguf_vtype t) { return ((unsigned)t < PB_GGUF_VTYPE_COUNT) ? vname[t] : "INVALID"; }

size_t pb_gguf_vtype_size(pb_gguf_vtype t) { return ((unsigned)t < PB_GGUF_VTYPE_COUNT) ? vsize[t] : 0; }

/* ---- hashing ----------------------------------------------------------------------------------- */

static uint64_t fnv1a(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static size_t hash_cap(int64_t n) {
    size_t cap = 16;
    while (cap < (size_t)n * 2) cap *= 2;
    return cap;
}

static int64_t hash_find(const int64_t *tab, size_t cap, const char *name, const char *(*get)(const pb_gguf *, int64_t),
                         const pb_gguf *g) {
    if (!tab) return -1;
    size_t n = strlen(name), mask = cap - 1;
    for (size_t h = (size_t)fnv1a(name, n) & mask;; h = (h + 1) & mask) {
        int64_t i = tab[h];
        if (i < 0) return -1;
        if (strcmp(get(g, i), name) == 0) return i;
    }
}

static const char *kv_name(const pb_gguf *g, int64_t i) { return g->kv[i].key; }
static const char *t_name(const pb_gguf *g, int64_t i) { return g->t[i].name; }

/* Adds entry i to the table; returns the earlier index with the same name, or -1. */
static int64_t hash_add(int64_t *tab, size_t cap, int64_t i, const char *(*get)(const pb_gguf *, int64_t),
                        const pb_gguf *g) {
    const char *name = get(g, i);
    size_t mask = cap - 1;
    for (size_t h = (size_t)fnv1a(name, strlen(name)) & mask;; h = (h + 1) & mask) {
        int64_t j = tab[h];
        if (j < 0) {
            tab[h] = i;
            return -1;
        }
        if (strcmp(get(g, j), name) == 0) return j;
    }
}

/* ---- parsing ----------------------------------------------------------------------------------- */

static void set_ctx_named(cur *c, const char *what, int64_t i, const uint8_t *name, size_t len) {
    char pn[80];
    printable(pn, sizeof pn, name, len);
    snprintf(c->ctx, sizeof c->ctx, "%s %lld '%s'", what, (long long)i, pn);
}

static pb_status parse_header(cur *c, pb_gguf *g, uint64_t *n_tensors, uint64_t *n_kv) {
    pb_status s = need(c, 4, "magic");
    if (s) return s;
    if (memcmp(c->b, "GGUF", 4) != 0) {
        char m[16];
        printable(m, sizeof m, c->b, 4);
        return bad(c, 0, "bad magic '%s' (bytes %02x %02x %02x %02x), expected 'GGUF'", m, c->b[0], c->b[1], c->b[2],
                   c->b[3]);
    }
    c->pos = 4;
    if ((s = rd_u32(c, "version", &g->version))) return s;
    if (g->version != 2 && g->version != 3) {
        if (g->version == 1)
            return bad(c, 4, "unsupported version 1 (GGUF v1 is no longer supported; expected 2 or 3)");
        if ((g->version & 0xffff) == 0)
            return bad(c, 4, "unsupported version %u (looks like a big-endian file; only little-endian is supported)",
                       g->version);
        return bad(c, 4, "unsupported version %u (expected 2 or 3)", g->version);
    }
    size_t at = c->pos;
    if ((s = rd_u64(c, "tensor_count", n_tensors))) return s;
    /* Each tensor-info record takes at least 32 bytes (empty name, 1 dim); each KV at least 13. */
    if (*n_tensors > (uint64_t)(c->size / 32))
        return bad(c, at, "tensor_count %llu is more than a file of %zu bytes can hold", (unsigned long long)*n_tensors,
                   c->size);
    at = c->pos;
    if ((s = rd_u64(c, "kv_count", n_kv))) return s;
    if (*n_kv > (uint64_t)(c->size / 13))
        return bad(c, at, "kv_count %llu is more than a file of %zu bytes can hold", (unsigned long long)*n_kv,
                   c->size);
    return PB_OK;
}

/* Grows *arr (zeroed elements) so that index i is valid; capacity doubles up to max. Records are
 * allocated as they are parsed, so a huge claimed count in a short file costs no memory. */
static pb_status grow(void **arr, size_t *cap, size_t i, size_t elem, size_t max) {
    if (i < *cap) return PB_OK;
    size_t nc = *cap ? *cap * 2 : 64;
    if (nc > max) nc = max;
    void *p = realloc(*arr, nc * elem);
    if (!p) return pb_error(PB_ERR_NOMEM, "gguf: out of memory for %zu records", nc);
    memset((char *)p + *cap * elem, 0, (nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return PB_OK;
}

static pb_status parse_array(cur *c, kvrec *kv) {
    uint32_t et;
    size_t at = c->pos;
    pb_status s = rd_u32(c, "array element type", &et);
    if (s) return s;
    if (et == PB_GGUF_ARRAY) return bad(c, at, "nested arrays are not supported (array element type ARRAY)");
    if (et >= PB_GGUF_VTYPE_COUNT) return bad(c, at, "unknown array element type %u", et);
    kv->elem_type = (pb_gguf_vtype)et;
    at = c->pos;
    if ((s = rd_u64(c, "array count", &kv->n))) return s;
    kv->data_off = c->pos;
    if (et != PB_GGUF_STRING) {
        size_t es = vsize[et];
        if (kv->n > left(c) / es)
            return bad(c, at,
                       "array count %llu of %s (%zu bytes each) exceeds the %zu bytes left in the file (size %zu)",
                       (unsigned long long)kv->n, vname[et], es, left(c), c->size);
        c->pos += (size_t)kv->n * es;
        return PB_OK;
    }
    /* Strings: each takes >= 8 bytes, which bounds the index allocation by the file size. */
    if (kv->n > left(c) / 8)
        return bad(c, at, "array count %llu of STRING exceeds the %zu bytes left in the file (size %zu)",
                   (unsigned long long)kv->n, left(c), c->size);
    kv->str_off = pb_malloc((size_t)kv->n * sizeof *kv->str_off + 1);
    if (!kv->str_off) return PB_ERR_NOMEM;
    const uint8_t *b = c->b;
    size_t pos = c->pos, size = c->size;
    for (uint64_t j = 0; j < kv->n; j++) {
        if (size - pos < 8) {
            c->pos = pos;
            return bad(c, pos, "array element %llu length truncated (needs 8 bytes, %zu left, file size %zu)",
                       (unsigned long long)j, size - pos, size);
        }
        uint64_t len = le64(b + pos);
        if (len > size - pos - 8)
            return bad(c, pos,
                       "array element %llu string length %llu exceeds the %zu bytes left in the file (size %zu)",
                       (unsigned long long)j, (unsigned long long)len, size - pos - 8, size);
        kv->str_off[j] = pos;
        pos += 8 + (size_t)len;
    }
    c->pos = pos;
    return PB_OK;
}

static pb_status parse_kvs(cur *c, pb_gguf *g) {
    for (int64_t i = 0; i < g->n_kv; i++) {
        pb_status s = grow((void **)&g->kv, &g->kv_cap, (size_t)i, sizeof *g->kv, (size_t)g->n_kv);
        if (s) return s;
        kvrec *kv = &g->kv[i];
        snprintf(c->ctx, sizeof c->ctx, "kv %lld", (long long)i);
        size_t at = c->pos;
        if ((s = rd_str(c, "key", &kv->key_off, &kv->key_len))) return s;
        if (memchr(c->b + kv->key_off, 0, kv->key_len)) return bad(c, at, "key contains a NUL byte");
        set_ctx_named(c, "kv", i, c->b + kv->key_off, kv->key_len);
        uint32_t t;
        at = c->pos;
        if ((s = rd_u32(c, "value type", &t))) return s;
        if (t >= PB_GGUF_VTYPE_COUNT) return bad(c, at, "unknown value type %u", t);
        kv->type = (pb_gguf_vtype)t;
        kv->val_off = c->pos;
        if (t == PB_GGUF_STRING) {
            size_t off, len;
            if ((s = rd_str(c, "string value", &off, &len))) return s;
        } else if (t == PB_GGUF_ARRAY) {
            if ((s = parse_array(c, kv))) return s;
        } else {
            if ((s = need(c, vsize[t], "value"))) return s;
            c->pos += vsize[t];
        }
    }
    c->ctx[0] = 0;
    return PB_OK;
}

static pb_status parse_tensor_infos(cur *c, pb_gguf *g) {
    size_t cap_t = 0, cap_ti = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        pb_status s = grow((void **)&g->t, &cap_t, (size_t)i, sizeof *g->t, (size_t)g->n_tensors);
        if (!s) s = grow((void **)&g->ti, &cap_ti, (size_t)i, sizeof *g->ti, (size_t)g->n_tensors);
        if (s) return s;
        pb_gguf_tensor *t = &g->t[i];
        tinfo *ti = &g->ti[i];
        snprintf(c->ctx, sizeof c->ctx, "tensor %lld", (long long)i);
        ti->info_off = c->pos;
        if ((s = rd_str(c, "name", &ti->name_off, &ti->name_len))) return s;
        if (ti->name_len >= 64) {
            set_ctx_named(c, "tensor", i, c->b + ti->name_off, ti->name_len);
            return bad(c, ti->info_off, "name length %zu >= 64 bytes (GGML_MAX_NAME)", ti->name_len);
        }
        if (memchr(c->b + ti->name_off, 0, ti->name_len)) return bad(c, ti->info_off, "name contains a NUL byte");
        set_ctx_named(c, "tensor", i, c->b + ti->name_off, ti->name_len);
        uint32_t nd;
        size_t at = c->pos;
        if ((s = rd_u32(c, "n_dims", &nd))) return s;
        if (nd < 1 || nd > 4) return bad(c, at, "n_dims %u out of range 1..4", nd);
        t->n_dims = (int)nd;
        for (int j = 0; j < 4; j++) t->ne[j] = 1;
        for (int j = 0; j < (int)nd; j++) {
            uint64_t v;
            char field[16];
            snprintf(field, sizeof field, "ne[%d]", j);
            at = c->pos;
            if ((s = rd_u64(c, field, &v))) return s;
            if (v == 0) return bad(c, at, "ne[%d] is 0 (empty tensors are not allowed)", j);
            if (v > (uint64_t)INT64_MAX) return bad(c, at, "ne[%d] = %lld is negative", j, (long long)v);
            t->ne[j] = (int64_t)v;
        }
        uint32_t type;
        at = c->pos;
        if ((s = rd_u32(c, "type", &type))) return s;
        const pb_type_traits *tr = type < PB_TYPE_COUNT ? pb_type_get((int)type) : NULL;
        if (!tr || tr->blck <= 0 || tr->type_size == 0)
            return bad(c, at, "unknown tensor type id %u%s", type,
                       type < PB_TYPE_COUNT ? " (removed from the format)" : "");
        t->type = (int)type;
        if (t->ne[0] % tr->blck != 0)
            return bad(c, at, "ne[0] = %lld is not a multiple of the %s block size %lld", (long long)t->ne[0], tr->name,
                       (long long)tr->blck);
        int64_t nel = t->ne[0];
        size_t row = (size_t)(t->ne[0] / tr->blck), nbytes;
        bool ok = pb_mul_ok(row, tr->type_size, &row);
        nbytes = row;
        for (int j = 1; j < 4; j++) {
            ok = ok && !__builtin_mul_overflow(nel, t->ne[j], &nel);
            ok = ok && pb_mul_ok(nbytes, (size_t)t->ne[j], &nbytes);
        }
        if (!ok)
            return bad(c, ti->info_off, "size overflows (ne = [%lld, %lld, %lld, %lld])", (long long)t->ne[0],
                       (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
        t->nbytes = nbytes;
        ti->offset_field = c->pos;
        if ((s = rd_u64(c, "offset", &t->offset))) return s;
    }
    c->ctx[0] = 0;
    return PB_OK;
}

/* Copies keys and names into one arena and builds the lookup tables; rejects duplicates. */
static pb_status build_names(cur *c, pb_gguf *g) {
    size_t total = 1;
    for (int64_t i = 0; i < g->n_kv; i++) total += g->kv[i].key_len + 1;
    for (int64_t i = 0; i < g->n_tensors; i++) total += g->ti[i].name_len + 1;
    g->arena = pb_malloc(total);
    g->kv_hcap = hash_cap(g->n_kv);
    g->t_hcap = hash_cap(g->n_tensors);
    g->kv_hash = pb_malloc(g->kv_hcap * sizeof *g->kv_hash);
    g->t_hash = pb_malloc(g->t_hcap * sizeof *g->t_hash);
    if (!g->arena || !g->kv_hash || !g->t_hash) return PB_ERR_NOMEM;
    memset(g->kv_hash, 0xff, g->kv_hcap * sizeof *g->kv_hash);
    memset(g->t_hash, 0xff, g->t_hcap * sizeof *g->t_hash);
    char *p = g->arena;
    for (int64_t i = 0; i < g->n_kv; i++) {
        kvrec *kv = &g->kv[i];
        memcpy(p, c->b + kv->key_off, kv->key_len);
        p[kv->key_len] = 0;
        kv->key = p;
        p += kv->key_len + 1;
        int64_t j = hash_add(g->kv_hash, g->kv_hcap, i, kv_name, g);
        if (j >= 0) {
            set_ctx_named(c, "kv", i, c->b + kv->key_off, kv->key_len);
            return bad(c, kv->key_off - 8, "duplicate key (first defined by kv %lld)", (long long)j);
        }
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        tinfo *ti = &g->ti[i];
        memcpy(p, c->b + ti->name_off, ti->name_len);
        p[ti->name_len] = 0;
        g->t[i].name = p;
        p += ti->name_len + 1;
        int64_t j = hash_add(g->t_hash, g->t_hcap, i, t_name, g);
        if (j >= 0) {
            set_ctx_named(c, "tensor", i, c->b + ti->name_off, ti->name_len);
            return bad(c, ti->info_off, "duplicate tensor name (first used by tensor %lld)", (long long)j);
        }
    }
    c->ctx[0] = 0;
    return PB_OK;
}

static pb_status read_alignment(cur *c, pb_gguf *g) {
    g->alignment = 32;
    int64_t i = pb_gguf_find_key(g, "general.alignment");
    if (i < 0) return PB_OK;
    const kvrec *kv = &g->kv[i];
    set_ctx_named(c, "kv", i, c->b + kv->key_off, kv->key_len);
    if (kv->type != PB_GGUF_UINT32)
        return bad(c, kv->val_off - 4, "general.alignment has type %s, must be UINT32", vname[kv->type]);
    uint32_t a = le32(c->b + kv->val_off);
    if (a == 0 || (a & (a - 1)) != 0) return bad(c, kv->val_off, "general.alignment %u is not a power of two", a);
    g->alignment = a;
    c->ctx[0] = 0;
    return PB_OK;
}

typedef struct span {
    uint64_t off;
    int64_t i;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : (x->i > y->i) - (x->i < y->i);
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

static pb_status place_tensors(cur *c, pb_gguf *g) {
    size_t end_infos = c->pos;
    if (!pb_add_ok(end_infos, g->alignment - 1, &g->data_offset))
        return bad(c, end_infos, "data section offset overflows (alignment %zu)", g->alignment);
    g->data_offset = PB_PAD(end_infos, g->alignment);
    if (g->n_tensors == 0) return PB_OK;
    if (g->data_offset > g->size)
        return bad(c, end_infos, "data section starts at %zu, past end of file (size %zu)", g->data_offset, g->size);
    size_t avail = g->size - g->data_offset;
    span *sp = pb_malloc((size_t)g->n_tensors * sizeof *sp);
    if (!sp) return PB_ERR_NOMEM;
    pb_status s = PB_OK;
    for (int64_t i = 0; i < g->n_tensors && !s; i++) {
        pb_gguf_tensor *t = &g->t[i];
        const tinfo *ti = &g->ti[i];
        set_ctx_named(c, "tensor", i, c->b + ti->name_off, ti->name_len);
        uint64_t a = sat_add(g->data_offset, t->offset), e = sat_add(a, t->nbytes);
        if (t->offset % g->alignment != 0)
            s = bad(c, ti->offset_field, "offset %llu is not a multiple of the alignment %zu",
                    (unsigned long long)t->offset, g->alignment);
        else if ((t->offset > avail || t->nbytes > avail - t->offset) && e == UINT64_MAX)
            s = bad(c, ti->offset_field, "offset %llu (+%zu bytes) past end of file (size %zu)",
                    (unsigned long long)t->offset, t->nbytes, g->size);
        else if (t->offset > avail || t->nbytes > avail - t->offset)
            s = bad(c, ti->offset_field, "data [%llu, %llu) past end of file (size %zu)", (unsigned long long)a,
                    (unsigned long long)e, g->size);
        else {
            t->data = c->b + g->data_offset + t->offset;
            sp[i].off = t->offset;
            sp[i].i = i;
        }
    }
    if (!s) {
        qsort(sp, (size_t)g->n_tensors, sizeof *sp, span_cmp);
        for (int64_t k = 1; k < g->n_tensors; k++) {
            const pb_gguf_tensor *p = &g->t[sp[k - 1].i], *t = &g->t[sp[k].i];
            if (p->offset + p->nbytes > t->offset) {
                int64_t i = sp[k].i;
                const tinfo *ti = &g->ti[i];
                set_ctx_named(c, "tensor", i, c->b + ti->name_off, ti->name_len);
                s = bad(c, ti->offset_field, "data [%zu, %zu) overlaps tensor %lld '%s' [%zu, %zu)",
                        g->data_offset + (size_t)t->offset, g->data_offset + (size_t)t->offset + t->nbytes,
                        (long long)sp[k - 1].i, p->name, g->data_offset + (size_t)p->offset,
                        g->data_offset + (size_t)p->offset + p->nbytes);
                break;
            }
        }
    }
    free(sp);
    c->ctx[0] = 0;
    return s;
}

static pb_status parse(pb_gguf *g) {
    cur c = {.b = g->base, .size = g->size, .pos = 0, .ctx = ""};
    uint64_t n_tensors, n_kv;
    pb_status s = parse_header(&c, g, &n_tensors, &n_kv);
    if (s) return s;
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    if ((s = parse_kvs(&c, g))) return s;
    if ((s = parse_tensor_infos(&c, g))) return s;
    if ((s = build_names(&c, g))) return s;
    if ((s = read_alignment(&c, g))) return s;
    return place_tensors(&c, g);
}

/* ---- open / close ------------------------------------------------------------------------------ */

static pb_status open_common(pb_gguf *g, pb_gguf **out) {
    pb_status s = parse(g);
    if (s) {
        pb_gguf_close(g);
        return s;
    }
    free(g->ti); /* only needed for messages while parsing */
    g->ti = NULL;
    *out = g;
    return PB_OK;
}

pb_status pb_gguf_open_memory(const void *data, size_t size, pb_gguf **out) {
    *out = NULL;
    pb_gguf *g = pb_calloc(1, sizeof *g);
    if (!g) return PB_ERR_NOMEM;
    g->base = data ? data : (const uint8_t *)"";
    g->size = data ? size : 0;
    return open_common(g, out);
}

pb_status pb_gguf_open(const char *path, pb_gguf **out) {
    *out = NULL;
    pb_gguf *g = pb_calloc(1, sizeof *g);
    if (!g) return PB_ERR_NOMEM;
    pb_status s = pb_map_open(path, true, &g->map);
    if (s) {
        free(g);
        return s;
    }
    g->base = g->map.data;
    g->size = g->map.size;
    s = open_common(g, out);
    if (s) return pb_error_prefix(s, "'%s': ", path);
    return PB_OK;
}

void pb_gguf_close(pb_gguf *g) {
    if (!g) return;
    for (size_t i = 0; i < g->kv_cap; i++) free(g->kv[i].str_off);
    free(g->kv);
    free(g->t);
    free(g->ti);
    free(g->arena);
    free(g->kv_hash);
    free(g->t_hash);
    pb_map_close(&g->map);
    free(g);
}

uint32_t pb_gguf_version(const pb_gguf *g) { return g->version; }
size_t pb_gguf_alignment(const pb_gguf *g) { return g->alignment; }
size_t pb_gguf_data_offset(const pb_gguf *g) { return g->data_offset; }
size_t pb_gguf_file_size(const pb_gguf *g) { return g->size; }
const void *pb_gguf_base(const pb_gguf *g) { return g->base; }

/* ---- metadata access ----------------------------------------------------------------------------- */

int64_t pb_gguf_n_kv(const pb_gguf *g) { return g->n_kv; }

const char *pb_gguf_kv_key(const pb_gguf *g, int64_t i) { return (i >= 0 && i < g->n_kv) ? g->kv[i].key : NULL; }

pb_gguf_vtype pb_gguf_kv_type(const pb_gguf *g, int64_t i) {
    return (i >= 0 && i < g->n_kv) ? g->kv[i].type : PB_GGUF_VTYPE_COUNT;
}

int64_t pb_gguf_find_key(const pb_gguf *g, const char *key) {
    if (!g || !key) return -1;
    return hash_find(g->kv_hash, g->kv_hcap, key, kv_name, g);
}

static bool is_int(pb_gguf_vtype t) {
    return t == PB_GGUF_UINT8 || t == PB_GGUF_INT8 || t == PB_GGUF_UINT16 || t == PB_GGUF_INT16 ||
           t == PB_GGUF_UINT32 || t == PB_GGUF_INT32 || t == PB_GGUF_UINT64 || t == PB_GGUF_INT64;
}

/* Reads a scalar of type t at p (t not STRING/ARRAY) into the value union. */
static void scalar_at(const uint8_t *p, pb_gguf_vtype t, pb_gguf_value *v) {
    switch (t) {
    case PB_GGUF_UINT8: v->v.u = p[0]; break;
    case PB_GGUF_INT8: v->v.i = (int8_t)p[0]; break;
    case PB_GGUF_UINT16: v->v.u = (uint16_t)(p[0] | p[1] << 8); break;
    case PB_GGUF_INT16: v->v.i = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case PB_GGUF_UINT32: v->v.u = le32(p); break;
    case PB_GGUF_INT32: v->v.i = (int32_t)le32(p); break;
    case PB_GGUF_UINT64: v->v.u = le64(p); break;
    case PB_GGUF_INT64: v->v.i = (int64_t)le64(p); break;
    case PB_GGUF_BOOL: v->v.b = p[0] != 0; break;
    case PB_GGUF_FLOAT32: {
        uint32_t bits = le32(p);
        float f;
        memcpy(&f, &bits, 4);
        v->v.f = (double)f;
        break;
    }
    case PB_GGUF_FLOAT64: {
        uint64_t bits = le64(p);
        memcpy(&v->v.f, &bits, 8);
        break;
    }
    default: break;
    }
}

pb_status pb_gguf_kv_value(const pb_gguf *g, int64_t i, pb_gguf_value *out) {
    memset(out, 0, sizeof *out);
    if (i < 0 || i >= g->n_kv) return pb_error(PB_ERR_INVALID_ARG, "gguf: kv index %lld out of range", (long long)i);
    const kvrec *kv = &g->kv[i];
    const uint8_t *p = g->base + kv->val_off;
    out->type = kv->type;
    if (kv->type == PB_GGUF_STRING) {
        out->v.s.len = le64(p);
        out->v.s.ptr = (const char *)p + 8;
    } else if (kv->type == PB_GGUF_ARRAY) {
        out->elem_type = kv->elem_type;
        out->n = kv->n;
        out->data = g->base + kv->data_off;
    } else {
        scalar_at(p, kv->type, out);
    }
    return PB_OK;
}

static pb_status lookup(const pb_gguf *g, const char *key, pb_gguf_value *v) {
    int64_t i = pb_gguf_find_key(g, key);
    if (i < 0) return PB_ERR_NOT_FOUND;
    return pb_gguf_kv_value(g, i, v);
}

static pb_status wrong_type(const char *key, pb_gguf_vtype t, const char *want) {
    return pb_error(PB_ERR_FORMAT, "gguf: key '%s' has type %s, expected %s", key, pb_gguf_vtype_name(t), want);
}

/* Integer value of an integer-typed KV as a signed/unsigned pair: *neg set when the value is < 0. */
static pb_status int_of(const pb_gguf *g, const char *key, bool *neg, uint64_t *mag, int64_t *sv) {
    pb_gguf_value v;
    pb_status s = lookup(g, key, &v);
    if (s) return s;
    if (!is_int(v.type)) return wrong_type(key, v.type, "an integer");
    bool is_signed =
        v.type == PB_GGUF_INT8 || v.type == PB_GGUF_INT16 || v.type == PB_GGUF_INT32 || v.type == PB_GGUF_INT64;
    *neg = is_signed && v.v.i < 0;
    *mag = is_signed ? (uint64_t)v.v.i : v.v.u;
    *sv = is_signed ? v.v.i : (int64_t)v.v.u;
    return PB_OK;
}

pb_status pb_gguf_get_u32(const pb_gguf *g, const char *key, uint32_t *out) {
    bool neg;
    uint64_t u;
    int64_t sv;
    pb_status s = int_of(g, key, &neg, &u, &sv);
    if (s) return s;
    if (neg || u > UINT32_MAX)
        return pb_error(PB_ERR_FORMAT, "gguf: key '%s' value %s%llu out of range for uint32", key, neg ? "-" : "",
                        neg ? (unsigned long long)(-(sv + 1)) + 1 : (unsigned long long)u);
    *out = (uint32_t)u;
    return PB_OK;
}

pb_status pb_gguf_get_i64(const pb_gguf *g, const char *key, int64_t *out) {
    bool neg;
    uint64_t u;
    int64_t sv;
    pb_status s = int_of(g, key, &neg, &u, &sv);
    if (s) return s;
    if (!neg && u > (uint64_t)INT64_MAX)
        return pb_error(PB_ERR_FORMAT, "gguf: key '%s' value %llu out of range for int64", key, (unsigned long long)u);
    *out = neg ? sv : (int64_t)u;
    return PB_OK;
}

pb_status pb_gguf_get_f32(const pb_gguf *g, const char *key, float *out) {
    pb_gguf_value v;
    pb_status s = lookup(g, key, &v);
    if (s) return s;
    if (v.type != PB_GGUF_FLOAT32 && v.type != PB_GGUF_FLOAT64) return wrong_type(key, v.type, "FLOAT32 or FLOAT64");
    if (isfinite(v.v.f) && fabs(v.v.f) > (double)3.4028234663852886e38f)
        return pb_error(PB_ERR_FORMAT, "gguf: key '%s' value %g out of range for float32", key, v.v.f);
    *out = (float)v.v.f;
    return PB_OK;
}

pb_status pb_gguf_get_bool(const pb_gguf *g, const char *key, bool *out) {
    pb_gguf_value v;
    pb_status s = lookup(g, key, &v);
    if (s) return s;
    if (v.type != PB_GGUF_BOOL) return wrong_type(key, v.type, "BOOL");
    *out = v.v.b;
    return PB_OK;
}

pb_status pb_gguf_get_str(const pb_gguf *g, const char *key, pb_gguf_str *out) {
    pb_gguf_value v;
    pb_status s = lookup(g, key, &v);
    if (s) return s;
    if (v.type != PB_GGUF_STRING) return wrong_type(key, v.type, "STRING");
    *out = v.v.s;
    return PB_OK;
}

pb_status pb_gguf_get_arr(const pb_gguf *g, const char *key, pb_gguf_vtype *elem_type, uint64_t *n, const void **data) {
    pb_gguf_value v;
    pb_status s = lookup(g, key, &v);
    if (s) return s;
    if (v.type != PB_GGUF_ARRAY) return wrong_type(key, v.type, "ARRAY");
    if (elem_type) *elem_type = v.elem_type;
    if (n) *n = v.n;
    if (data) *data = v.data;
    return PB_OK;
}

pb_status pb_gguf_get_arr_str(const pb_gguf *g, int64_t kv_index, uint64_t i, pb_gguf_str *out) {
    if (kv_index < 0 || kv_index >= g->n_kv)
        return pb_error(PB_ERR_INVALID_ARG, "gguf: kv index %lld out of range", (long long)kv_index);
    const kvrec *kv = &g->kv[kv_index];
    if (kv->type != PB_GGUF_ARRAY || kv->elem_type != PB_GGUF_STRING)
        return pb_error(PB_ERR_INVALID_ARG, "gguf: key '%s' is not a string array", kv->key);
    if (i >= kv->n)
        return pb_error(PB_ERR_INVALID_ARG, "gguf: key '%s': index %llu out of range (%llu elements)", kv->key,
                        (unsigned long long)i, (unsigned long long)kv->n);
    const uint8_t *p = g->base + kv->str_off[i];
    out->len = le64(p);
    out->ptr = (const char *)p + 8;
    return PB_OK;
}

/* ---- tensors ------------------------------------------------------------------------------------- */

int64_t pb_gguf_n_tensors(const pb_gguf *g) { return g->n_tensors; }

const pb_gguf_tensor *pb_gguf_tensor_at(const pb_gguf *g, int64_t i) {
    return (i >= 0 && i < g->n_tensors) ? &g->t[i] : NULL;
}

const pb_gguf_tensor *pb_gguf_find_tensor(const pb_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    int64_t i = hash_find(g->t_hash, g->t_hcap, name, t_name, g);
    return i >= 0 ? &g->t[i] : NULL;
}

bool pb_gguf_layout_contiguous(const pb_gguf *g) {
    uint64_t want = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        if (g->t[i].offset != want) return false;
        want += PB_PAD(g->t[i].nbytes, g->alignment);
    }
    return true;
}
