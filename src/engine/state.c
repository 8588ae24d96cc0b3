/* state.c -- session state save/restore (files and memory buffers): versioned header, model
 * fingerprint, 64-bit checksum, tokens + chat turns + logits + KV. Checks everything before changing
 * the session. Files are written atomically (pb_atomic_*). */
#include "engine/engine.h"

#include <stdlib.h>
#include <string.h>

/* Layout (little-endian, as every supported CPU is):
 *   header, 128 bytes:
 *     0 magic "PBSESSN1"   8 u32 version   12 u32 header bytes (128)   16 u8[32] model fingerprint
 *    48 i32 n_ctx (informational)   52 i32 kv_type   56 i64 n_past   64 i32 n_turns   68 i32 pending
 *    72 i64 n_keep   80 u64 kv bytes   88 u64 payload bytes   96 u64 checksum   104 i32 n_vocab
 *   108 u32 flags (bit 0: logits present)   112..127 zero
 *   payload: tokens i32[n_past] | turns (i64 start, i64 content)[n_turns] | logits f32[n_vocab] (if flag)
 *            | KV state (pb_kv_state_write)
 *   checksum: over the header (checksum field as 0) and the payload. */
#define MAGIC   "PBSESSN1"
#define VERSION 1u
#define HDR     128

static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* A fast 64-bit checksum (four multiply-rotate lanes, then a final mix); catches damage, not attacks. */
static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

typedef struct sum64 {
    uint64_t lane[4];
    uint64_t total;
    uint8_t tail[32];
    size_t n_tail;
} sum64;

static void sum_init(sum64 *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < 4; i++) c->lane[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
}

static void sum_block(sum64 *c, const uint8_t *p) {
    for (int i = 0; i < 4; i++) {
        uint64_t w = rd64(p + 8 * i) * 0x87c37b91114253d5ull;
        w = (w << 31) | (w >> 33);
        c->lane[i] = ((c->lane[i] ^ w) * 0x4cf5ad432745937full);
        c->lane[i] = (c->lane[i] << 27) | (c->lane[i] >> 37);
    }
}

static void sum_add(sum64 *c, const void *data, size_t n) {
    const uint8_t *p = data;
    c->total += n;
    if (c->n_tail) {
        size_t k = 32 - c->n_tail < n ? 32 - c->n_tail : n;
        memcpy(c->tail + c->n_tail, p, k);
        c->n_tail += k, p += k, n -= k;
        if (c->n_tail < 32) return;
        sum_block(c, c->tail);
        c->n_tail = 0;
    }
    for (; n >= 32; p += 32, n -= 32) sum_block(c, p);
    memcpy(c->tail, p, n);
    c->n_tail = n;
}

static uint64_t sum_end(sum64 *c) {
    memset(c->tail + c->n_tail, 0, 32 - c->n_tail);
    sum_block(c, c->tail);
    uint64_t h = c->total;
    for (int i = 0; i < 4; i++) h = mix(h ^ c->lane[i]) + 0x9e3779b97f4a7c15ull;
    return h;
}

/* ---- writing -------------------------------------------------------------------------------------- */

static size_t payload_size(const pb_session *s, size_t kv_bytes) {
    return (size_t)s->n_past * 4 + (size_t)s->n_turns * 16 + (s->has_logits ? (size_t)s->n_vocab * 4 : 0) + kv_bytes;
}

pb_status pb_session_state_size(const pb_session *s, size_t *out) {
    if (!s || !out) return pb_error(PB_ERR_INVALID_ARG, "pb_session_state_size: %s is NULL", !s ? "session" : "out");
    bool in; /* the session is const to the caller; only its call guard changes */
    pb_status st = pb_engine_enter((pb_session *)s, "pb_session_state_size", true, &in);
    if (st != PB_OK) return st;
    *out = HDR + payload_size(s, pb_kv_state_size(s->kv));
    return pb_engine_leave((pb_session *)s, in, PB_OK);
}

static pb_status state_write(const pb_session *s, void *buf, size_t cap, size_t *len_out) {
    if (!buf && cap) return pb_error(PB_ERR_INVALID_ARG, "pb_session_state_write: buf is NULL with cap %zu", cap);
    size_t kv_bytes = pb_kv_state_size(s->kv), need = HDR + payload_size(s, kv_bytes);
    if (len_out) *len_out = need;
    if (cap < need)
        return pb_error(PB_ERR_INVALID_ARG, "pb_session_state_write: the state needs %zu bytes, cap is %zu", need, cap);
    pb_model_info info;
    pb_status st = pb_model_get_info(s->model, &info);
    if (st != PB_OK) return st;
    uint8_t *h = buf, *p = h + HDR;
    memset(h, 0, HDR);
    memcpy(h, MAGIC, 8);
    wr32(h + 8, VERSION);
    wr32(h + 12, HDR);
    memcpy(h + 16, info.fingerprint, 32);
    wr32(h + 48, (uint32_t)s->n_ctx);
    wr32(h + 52, (uint32_t)s->params.kv_type);
    wr64(h + 56, (uint64_t)s->n_past);
    wr32(h + 64, (uint32_t)s->n_turns);
    wr32(h + 68, (uint32_t)s->pending);
    wr64(h + 72, (uint64_t)s->n_keep);
    wr64(h + 80, kv_bytes);
    wr64(h + 88, need - HDR);
    wr32(h + 104, (uint32_t)s->n_vocab);
    wr32(h + 108, s->has_logits ? 1u : 0u);
    memcpy(p, s->tokens, (size_t)s->n_past * 4);
    p += (size_t)s->n_past * 4;
    for (int i = 0; i < s->n_turns; i++, p += 16) {
        wr64(p, (uint64_t)s->turns[i].start);
        wr64(p + 8, (uint64_t)s->turns[i].content);
    }
    if (s->has_logits) {
        if (s->logits_dev && (st = pb_forward_pull_logits(s->kv, s->logits)) != PB_OK) return st; /* on the GPU */
        memcpy(p, s->logits, (size_t)s->n_vocab * 4);
        p += (size_t)s->n_vocab * 4;
    }
    size_t got = 0;
    st = pb_kv_state_write(s->kv, p, kv_bytes, &got);
    if (st != PB_OK) return st;
    if (got != kv_bytes)
        return pb_error(PB_ERR_INTERNAL, "session state: KV wrote %zu bytes, announced %zu", got, kv_bytes);
    sum64 c;
    sum_init(&c);
    sum_add(&c, h, need);
    wr64(h + 96, sum_end(&c));
    return PB_OK;
}

pb_status pb_session_state_write(const pb_session *s, void *buf, size_t cap, size_t *len_out) {
    if (!s) return pb_error(PB_ERR_INVALID_ARG, "pb_session_state_write: session is NULL");
    bool in;
    pb_status st = pb_engine_enter((pb_session *)s, "pb_session_state_write", true, &in);
    return st != PB_OK ? st : pb_engine_leave((pb_session *)s, in, state_write(s, buf, cap, len_out));
}

static pb_status save(const pb_session *s, const char *path) {
    size_t n = HDR + payload_size(s, pb_kv_state_size(s->kv));
    void *buf = pb_malloc(n);
    if (!buf) return PB_ERR_NOMEM;
    pb_status st = state_write(s, buf, n, &n);
    if (st == PB_OK) {
        pb_atomic_file f;
        st = pb_atomic_open(path, &f);
        if (st == PB_OK) {
            st = pb_atomic_write(&f, buf, n);
            if (st == PB_OK)
                st = pb_atomic_commit(&f);
            else
                pb_atomic_abort(&f);
        }
    }
    free(buf);
    if (st != PB_OK) pb_error_prefix(st, "session save '%s': ", path);
    return st;
}

pb_status pb_session_save(const pb_session *s, const char *path) {
    if (!s || !path) return pb_error(PB_ERR_INVALID_ARG, "pb_session_save: %s is NULL", !s ? "session" : "path");
    bool in;
    pb_status st = pb_engine_enter((pb_session *)s, "pb_session_save", true, &in);
    return st != PB_OK ? st : pb_engine_leave((pb_session *)s, in, save(s, path));
}

/* ---- reading -------------------------------------------------------------------------------------- */

static const char *kv_name(uint32_t t) {
    return t == PB_KV_Q8_0 ? "q8_0" : t == PB_KV_F32 ? "f32" : t == PB_KV_F16 ? "f16" : "?";
}

static pb_status state_read(pb_session *s, const void *buf, size_t len) {
    if (!buf && len) return pb_error(PB_ERR_INVALID_ARG, "pb_session_state_read: buf is NULL with len %zu", len);
    const uint8_t *h = buf;
    if (len < HDR || memcmp(h, MAGIC, 8) != 0)
        return pb_error(PB_ERR_FORMAT, "not a pocketbrain session file (bad magic or shorter than %d bytes)", HDR);
    uint32_t version = rd32(h + 8), hdr = rd32(h + 12);
    if (version != VERSION || hdr != HDR)
        return pb_error(PB_ERR_FORMAT, "session file version %u (header %u bytes) is not supported (expected %u)",
                        version, hdr, VERSION);
    uint64_t payload = rd64(h + 88);
    if (payload != len - HDR)
        return pb_error(PB_ERR_FORMAT, "session file is truncated or padded: header says %llu payload bytes, found %zu",
                        (unsigned long long)payload, len - HDR);
    /* checksum before trusting any count */
    sum64 c;
    sum_init(&c);
    uint8_t hcopy[HDR];
    memcpy(hcopy, h, HDR);
    wr64(hcopy + 96, 0);
    sum_add(&c, hcopy, HDR);
    sum_add(&c, h + HDR, len - HDR);
    if (sum_end(&c) != rd64(h + 96)) return pb_error(PB_ERR_FORMAT, "session file is damaged: checksum mismatch");

    pb_model_info info;
    pb_status st = pb_model_get_info(s->model, &info);
    if (st != PB_OK) return st;
    if (memcmp(info.fingerprint, h + 16, 32) != 0)
        return pb_error(PB_ERR_MISMATCH, "session file was saved with another model (fingerprint differs)");
    uint32_t kv_type = rd32(h + 52);
    if (kv_type != (uint32_t)s->params.kv_type)
        return pb_error(PB_ERR_MISMATCH, "session file has a %s KV cache, this session uses %s", kv_name(kv_type),
                        kv_name((uint32_t)s->params.kv_type));
    uint64_t n_past = rd64(h + 56), n_keep = rd64(h + 72), kv_bytes = rd64(h + 80);
    uint32_t n_turns = rd32(h + 64), n_vocab = rd32(h + 104), flags = rd32(h + 108);
    int32_t pending = (int32_t)rd32(h + 68);
    if (n_vocab != (uint32_t)s->n_vocab)
        return pb_error(PB_ERR_MISMATCH, "session file has n_vocab %u, the model %d", n_vocab, (int)s->n_vocab);
    if (n_past > (uint64_t)s->n_ctx || (n_past == (uint64_t)s->n_ctx && pending >= 0))
        return pb_error(PB_ERR_MISMATCH, "session file holds %llu tokens, more than this session's n_ctx %d",
                        (unsigned long long)n_past, s->n_ctx);
    if (n_turns > n_past || n_keep > n_past || pending < -1 || pending >= s->n_vocab || (flags & ~1u))
        return pb_error(PB_ERR_FORMAT, "session file header is inconsistent (turns %u, keep %llu, pending %d)", n_turns,
                        (unsigned long long)n_keep, (int)pending);
    size_t expect = (size_t)n_past * 4 + (size_t)n_turns * 16 + ((flags & 1) ? (size_t)n_vocab * 4 : 0) + kv_bytes;
    if (kv_bytes > payload || expect != payload)
        return pb_error(PB_ERR_FORMAT, "session file sizes disagree: payload %llu, parts %zu",
                        (unsigned long long)payload, expect);
    const uint8_t *p = h + HDR;
    const uint8_t *toks = p, *turns = p + n_past * 4, *logits = turns + (size_t)n_turns * 16;
    const uint8_t *kv = logits + ((flags & 1) ? (size_t)n_vocab * 4 : 0);
    for (uint64_t i = 0; i < n_past; i++) {
        int32_t t = (int32_t)rd32(toks + 4 * i);
        if (t < 0 || t >= s->n_vocab)
            return pb_error(PB_ERR_FORMAT, "session file: token %d at %llu is outside the vocabulary", (int)t,
                            (unsigned long long)i);
    }
    int64_t prev = (int64_t)n_keep;
    for (uint32_t i = 0; i < n_turns; i++) {
        int64_t a = (int64_t)rd64(turns + 16 * i), b = (int64_t)rd64(turns + 16 * i + 8);
        if (a < prev || b < a || b > (int64_t)n_past)
            return pb_error(PB_ERR_FORMAT, "session file: chat turn %u (%lld, %lld) is out of order", i, (long long)a,
                            (long long)b);
        prev = b;
    }
    /* the KV part too (its own header, every layer's rows), so that nothing below fails on the file's bytes */
    st = pb_kv_state_check(s->kv, kv, kv_bytes, (int)n_past);
    if (st != PB_OK) return pb_error_prefix(st, "session file KV state rejected: ");
    /* room for the turn list before touching anything */
    if ((int)n_turns > s->cap_turns) {
        pb_turn *t = realloc(s->turns, (size_t)n_turns * sizeof *t);
        if (!t) return pb_error(PB_ERR_NOMEM, "session load: out of memory for %u turns", n_turns);
        s->turns = t;
        s->cap_turns = (int)n_turns;
    }

    st = pb_kv_state_read(s->kv, kv, kv_bytes);
    if (st != PB_OK) {
        pb_engine_reset(s);
        return pb_error_prefix(st, "session file KV state rejected (session reset): ");
    }
    if (pb_kv_n_past(s->kv) != (int)n_past) {
        pb_engine_reset(s);
        return pb_error(PB_ERR_FORMAT,
                        "session file: KV state holds %d positions, the header says %llu (session reset)",
                        pb_kv_n_past(s->kv), (unsigned long long)n_past);
    }
    memcpy(s->tokens, toks, (size_t)n_past * 4);
    s->n_past = (int64_t)n_past;
    s->n_turns = (int)n_turns;
    for (uint32_t i = 0; i < n_turns; i++) {
        s->turns[i].start = (int64_t)rd64(turns + 16 * i);
        s->turns[i].content = (int64_t)rd64(turns + 16 * i + 8);
    }
    s->n_keep = (int64_t)n_keep;
    s->pending = pending;
    s->has_logits = (flags & 1) != 0;
    s->logits_dev = false;
    if (s->has_logits) memcpy(s->logits, logits, (size_t)n_vocab * 4);
    memset(&s->totals, 0, sizeof s->totals);
    return PB_OK;
}

pb_status pb_session_state_read(pb_session *s, const void *buf, size_t len) {
    if (!s) return pb_error(PB_ERR_INVALID_ARG, "pb_session_state_read: session is NULL");
    bool in;
    pb_status st = pb_engine_enter(s, "pb_session_state_read", false, &in);
    return st != PB_OK ? st : pb_engine_leave(s, in, state_read(s, buf, len));
}

static pb_status load(pb_session *s, const char *path) {
    pb_map m;
    pb_status st = pb_map_open(path, true, &m);
    if (st != PB_OK) return st;
    st = state_read(s, m.data, m.size);
    pb_map_close(&m);
    if (st != PB_OK) pb_error_prefix(st, "session load '%s': ", path);
    return st;
}

pb_status pb_session_load(pb_session *s, const char *path) {
    if (!s || !path) return pb_error(PB_ERR_INVALID_ARG, "pb_session_load: %s is NULL", !s ? "session" : "path");
    bool in;
    pb_status st = pb_engine_enter(s, "pb_session_load", false, &in);
    return st != PB_OK ? st : pb_engine_leave(s, in, load(s, path));
}
