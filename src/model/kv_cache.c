/* kv_cache.c -- per-session K/V storage (F16/Q8_0/F32), ring layout for sliding-window layers. No math here.
 *
 * Layout: layer il holds cap rows of K and cap rows of V, one row = n_head_kv * head_dim values of the cache
 * type. Full-attention layers: cap = n_ctx, row of position t at slot t. Sliding-window layers (window W):
 * cap = min(n_ctx, W), row of position t at slot t % cap -- the query at p only sees keys p-W < t <= p, so the
 * W most recent positions are all a decode step needs (the new token's own row comes from the forward's
 * stash, see forward.c). */
#include "cuda/pb_cuda.h"
#include "model/gpu.h"
#include "model/kv_impl.h"
#include "tensor/types.h"

#include <stdlib.h>
#include <string.h>

static int storage_type(pb_kv_type t) {
    switch (t) {
    case PB_KV_F16: return PB_TYPE_F16;
    case PB_KV_Q8_0: return PB_TYPE_Q8_0;
    case PB_KV_F32: return PB_TYPE_F32;
    }
    return -1;
}

pb_status pb_kv_new(const pb_model *m, int n_ctx, pb_kv_type type, pb_kv_cache **out) {
    return pb_kv_new_ring(m, n_ctx, type, 0, out);
}

pb_status pb_kv_new_ring(const pb_model *m, int n_ctx, pb_kv_type type, int ring_extra, pb_kv_cache **out) {
    if (!m || !out) return pb_error(PB_ERR_INVALID_ARG, "kv: NULL model or out");
    if (ring_extra < 0 || ring_extra > (1 << 24))
        return pb_error(PB_ERR_INVALID_ARG, "kv: ring_extra %d out of range", ring_extra);
    *out = NULL;
    const pb_hparams *hp = pb_model_hparams(m);
    int st = storage_type(type);
    if (st < 0) return pb_error(PB_ERR_INVALID_ARG, "kv: unknown cache type %d", (int)type);
    if (n_ctx < 1 || n_ctx > (1 << 24)) return pb_error(PB_ERR_INVALID_ARG, "kv: n_ctx %d out of range", n_ctx);
    const pb_type_traits *tr = pb_type_get(st);
    for (int il = 0; il < hp->n_layer; il++)
        if (hp->head_dim_l[il] % tr->blck != 0)
            return pb_error(PB_ERR_UNSUPPORTED, "kv: cache type %s needs head_dim %% %lld == 0 (head_dim %d)", tr->name,
                            (long long)tr->blck, hp->head_dim_l[il]);
    pb_kv_cache *kv = pb_calloc(1, sizeof *kv);
    if (!kv) return PB_ERR_NOMEM;
    kv->type = type;
    kv->st = st;
    kv->n_ctx = n_ctx;
    kv->n_layer = hp->n_layer;
    kv->kv_dim = hp->n_head_kv * hp->head_dim;
    kv->head_dim = hp->head_dim;
    kv->row_bytes = pb_row_size(st, kv->kv_dim);
    kv->window = hp->sliding_window;
    kv->attn_block = PB_MAX(128, (n_ctx + PB_ATT_MAX_BLOCKS - 1) / PB_ATT_MAX_BLOCKS);
    size_t total = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        bool own = hp->kv_src[il] == il; /* Gemma 4 KV-shared layers hold nothing */
        kv->hdl[il] = hp->head_dim_l[il];
        kv->kvd[il] = own ? hp->n_head_kv_l[il] * hp->head_dim_l[il] : 0;
        kv->row_b[il] = pb_row_size(st, kv->kvd[il]);
        kv->head_b[il] = pb_row_size(st, hp->head_dim_l[il]);
        kv->ring[il] = own && hp->swa_layer[il] != 0;
        kv->win[il] = !own ? 0 : kv->ring[il] ? PB_MIN(n_ctx, hp->sliding_window) : n_ctx;
        kv->cap[il] = !own ? 0 : kv->ring[il] ? PB_MIN(n_ctx, hp->sliding_window + ring_extra) : n_ctx;
        size_t b;
        if (!pb_mul_ok(kv->row_b[il], (size_t)kv->cap[il] * 2, &b) || !pb_add_ok(total, b, &total)) {
            free(kv);
            return pb_error(PB_ERR_NOMEM, "kv: size overflow");
        }
    }
    kv->mem = pb_big_alloc_lazy(total ? total : 64); /* huge pages later: pb_kv_grown */
    if (!kv->mem) {
        free(kv);
        return pb_error(PB_ERR_NOMEM, "kv: cannot allocate %zu MiB for the K/V cache", total >> 20);
    }
    kv->bytes = total;
    kv->huge_at = PB_KV_HUGE_AT;
    uint8_t *p = kv->mem;
    for (int il = 0; il < hp->n_layer; il++) {
        kv->k[il] = p;
        p += kv->row_b[il] * (size_t)kv->cap[il];
        kv->v[il] = p;
        p += kv->row_b[il] * (size_t)kv->cap[il];
    }
    pb_status s = pb_kv_gpu_attach(m, kv);
    if (s) {
        pb_kv_free(kv);
        return s;
    }
    *out = kv;
    return PB_OK;
}

void pb_kv_free(pb_kv_cache *kv) {
    if (!kv) return;
    pb_cu_ctx_free(kv->gpu);
    pb_big_free(kv->mem, kv->bytes ? kv->bytes : 64);
    free(kv);
}

size_t pb_kv_bytes(const pb_kv_cache *kv) { return kv ? kv->bytes : 0; }
int pb_kv_n_past(const pb_kv_cache *kv) { return kv ? kv->n_past : 0; }
int pb_kv_n_ctx(const pb_kv_cache *kv) { return kv ? kv->n_ctx : 0; }

/* Oldest position whose row a layer still holds when n_past positions were written. */
static int first_held(const pb_kv_cache *kv, int il, int n_past) { return PB_MAX(kv->held0[il], n_past - kv->cap[il]); }

pb_status pb_kv_truncate(pb_kv_cache *kv, int n) {
    if (!kv) return pb_error(PB_ERR_INVALID_ARG, "kv: NULL cache");
    if (n < 0 || n > kv->n_past)
        return pb_error(PB_ERR_INVALID_ARG, "kv: cannot truncate to %d (n_past %d)", n, kv->n_past);
    for (int il = 0; il < kv->n_layer; il++) {
        if (!kv->ring[il]) continue;
        /* the next query (position n) needs keys n-W+1 .. n-1 */
        int need = PB_MAX(0, n - kv->window + 1);
        if (n > 0 && need < first_held(kv, il, kv->n_past))
            return pb_error(PB_ERR_INVALID_ARG,
                            "kv: cannot truncate to %d: sliding-window layer %d only holds positions %d..%d "
                            "(reset and prefill again)",
                            n, il, first_held(kv, il, kv->n_past), kv->n_past - 1);
    }
    kv->n_past = n;
    if (n == 0) memset(kv->held0, 0, sizeof kv->held0);
    return PB_OK;
}

// --- state (session files) ---------------------------------------------------------------------------
/* Format (little-endian): "PBKV", u32 version 1, u32 storage type, u32 n_layer, u32 kv_dim, u32 n_past,
 * then per layer: u32 first position p0, u32 row count r, K rows p0..p0+r-1, then V rows (in position order). */

#define KV_MAGIC "PBKV"
#define KV_HDR   24

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int held_rows(const pb_kv_cache *kv, int il) { return kv->n_past - first_held(kv, il, kv->n_past); }

size_t pb_kv_state_size(const pb_kv_cache *kv) {
    if (!kv) return 0;
    size_t n = KV_HDR;
    for (int il = 0; il < kv->n_layer; il++) n += 8 + 2 * kv->row_b[il] * (size_t)held_rows(kv, il);
    return n;
}

pb_status pb_kv_state_write(const pb_kv_cache *kv, void *buf, size_t cap, size_t *len_out) {
    if (!kv || !buf) return pb_error(PB_ERR_INVALID_ARG, "kv: NULL cache or buffer");
    size_t need = pb_kv_state_size(kv);
    if (len_out) *len_out = need;
    if (cap < need) return pb_error(PB_ERR_INVALID_ARG, "kv: state needs %zu bytes, buffer has %zu", need, cap);
    pb_status s = pb_kv_gpu_pull(kv); /* a GPU cache's rows into the host rows first */
    if (s) return s;
    uint8_t *p = buf;
    memcpy(p, KV_MAGIC, 4);
    put_u32(p + 4, 1);
    put_u32(p + 8, (uint32_t)kv->st);
    put_u32(p + 12, (uint32_t)kv->n_layer);
    put_u32(p + 16, (uint32_t)kv->kv_dim);
    put_u32(p + 20, (uint32_t)kv->n_past);
    p += KV_HDR;
    for (int il = 0; il < kv->n_layer; il++) {
        int p0 = first_held(kv, il, kv->n_past), r = held_rows(kv, il);
        put_u32(p, (uint32_t)p0);
        put_u32(p + 4, (uint32_t)r);
        p += 8;
        for (int w = 0; w < 2; w++) {
            const uint8_t *base = w ? kv->v[il] : kv->k[il];
            for (int t = p0; t < p0 + r; t++) /* a position's row: its kv heads in order */
                for (int g = 0; g < kv->kvd[il] / kv->hdl[il]; g++) {
                    memcpy(p, pb_kv_head_row(kv, (uint8_t *)base, il, g, t % kv->cap[il]), kv->head_b[il]);
                    p += kv->head_b[il];
                }
        }
    }
    return PB_OK;
}

pb_status pb_kv_state_check(const pb_kv_cache *kv, const void *buf, size_t len, int n_past) {
    if (!kv || !buf) return pb_error(PB_ERR_INVALID_ARG, "kv: NULL cache or buffer");
    const uint8_t *p = buf, *end = p + len;
    if (len < KV_HDR || memcmp(p, KV_MAGIC, 4) != 0) return pb_error(PB_ERR_FORMAT, "kv: state has no PBKV header");
    if (get_u32(p + 4) != 1) return pb_error(PB_ERR_FORMAT, "kv: state version %u is not 1", get_u32(p + 4));
    uint32_t st = get_u32(p + 8), nl = get_u32(p + 12), kd = get_u32(p + 16), np = get_u32(p + 20);
    if (st != (uint32_t)kv->st)
        return pb_error(PB_ERR_MISMATCH, "kv: state cache type %s differs from this session's %s",
                        pb_type_name((int)st), pb_type_name(kv->st));
    if (nl != (uint32_t)kv->n_layer || kd != (uint32_t)kv->kv_dim)
        return pb_error(PB_ERR_MISMATCH, "kv: state shape (%u layers, kv dim %u) differs from the model's (%d, %d)", nl,
                        kd, kv->n_layer, kv->kv_dim);
    if (n_past >= 0 && np != (uint32_t)n_past)
        return pb_error(PB_ERR_FORMAT, "kv: state holds %u positions, expected %d", np, n_past);
    if (np > (uint32_t)kv->n_ctx)
        return pb_error(PB_ERR_CONTEXT_FULL, "kv: state holds %u positions, n_ctx is %d", np, kv->n_ctx);
    const uint8_t *q = p + KV_HDR;
    for (int il = 0; il < kv->n_layer; il++) {
        if ((size_t)(end - q) < 8) return pb_error(PB_ERR_FORMAT, "kv: state truncated at layer %d", il);
        uint32_t p0 = get_u32(q), r = get_u32(q + 4);
        int want0 = PB_MAX(0, (int)np - kv->win[il]); /* the rows the window needs; a longer ring may hold more */
        if (p0 + (uint64_t)r != np || (int)p0 > want0)
            return pb_error(PB_ERR_FORMAT, "kv: state layer %d holds rows %u..+%u, expected up to position %u", il, p0,
                            r, np);
        q += 8;
        size_t b = 2 * kv->row_b[il] * (size_t)r;
        if ((size_t)(end - q) < b) return pb_error(PB_ERR_FORMAT, "kv: state truncated in layer %d rows", il);
        q += b;
    }
    if (q != end) return pb_error(PB_ERR_FORMAT, "kv: %zu trailing bytes in state", (size_t)(end - q));
    return PB_OK;
}

pb_status pb_kv_state_read(pb_kv_cache *kv, const void *buf, size_t len) {
    pb_status s = pb_kv_state_check(kv, buf, len, -1); /* everything before touching the cache */
    if (s != PB_OK) return s;
    const uint8_t *p = (const uint8_t *)buf + KV_HDR;
    uint32_t np = get_u32((const uint8_t *)buf + 20);
    for (int il = 0; il < kv->n_layer; il++) {
        uint32_t p0 = get_u32(p), r = get_u32(p + 4);
        p += 8;
        for (int w = 0; w < 2; w++) {
            uint8_t *base = w ? kv->v[il] : kv->k[il];
            for (uint32_t t = p0; t < p0 + r; t++) {
                /* rows older than this cache's ring keeps are skipped (they are not needed) */
                if ((int)t >= (int)np - kv->cap[il])
                    for (int g = 0; g < kv->kvd[il] / kv->hdl[il]; g++)
                        memcpy(pb_kv_head_row(kv, base, il, g, (int)(t % (uint32_t)kv->cap[il])),
                               p + (size_t)g * kv->head_b[il], kv->head_b[il]);
                p += kv->row_b[il];
            }
        }
    }
    p = (const uint8_t *)buf + KV_HDR;
    for (int il = 0; il < kv->n_layer; il++) { /* rows before p0 were not in the file */
        uint32_t p0 = get_u32(p), r = get_u32(p + 4);
        kv->held0[il] = (int)p0;
        p += 8 + 2 * kv->row_b[il] * (size_t)r;
    }
    kv->n_past = (int)np;
    pb_kv_grown(kv);
    return pb_kv_gpu_push(kv);
}
