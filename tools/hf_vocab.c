/* hf_vocab.c -- reads a Hugging Face tokenizer.json/tokenizer_config.json (cJSON) into GGUF tokenizer.* arrays. */
#include "hf_vocab.h"
#include "base/base.h"
#include "json/json.h"
#include "tokenizer/vocab.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a small string -> id map over the token array (cJSON object lookups are linear) ---------------- */

typedef struct smap {
    int32_t *slot;
    uint64_t mask;
    char **keys;
} smap;

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static pb_status smap_build(smap *m, char **keys, uint32_t n) {
    uint64_t size = 16;
    while (size < 2 * (uint64_t)n) size <<= 1;
    m->slot = malloc(size * sizeof *m->slot);
    if (!m->slot) return pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
    memset(m->slot, 0xff, size * sizeof *m->slot);
    m->mask = size - 1;
    m->keys = keys;
    for (uint32_t id = 0; id < n; id++) {
        if (!keys[id]) continue;
        uint64_t i = fnv(keys[id], strlen(keys[id])) & m->mask;
        while (m->slot[i] >= 0) {
            if (strcmp(keys[m->slot[i]], keys[id]) == 0) break;
            i = (i + 1) & m->mask;
        }
        if (m->slot[i] < 0) m->slot[i] = (int32_t)id;
    }
    return PB_OK;
}

static int32_t smap_get(const smap *m, const char *s, size_t n) {
    for (uint64_t i = fnv(s, n) & m->mask; m->slot[i] >= 0; i = (i + 1) & m->mask) {
        const char *k = m->keys[m->slot[i]];
        if (strncmp(k, s, n) == 0 && k[n] == 0) return m->slot[i];
    }
    return -1;
}

/* ---- helpers ------------------------------------------------------------------------------------------- */

static pb_status read_json(const char *path, cJSON **out) {
    *out = NULL;
    if (access(path, R_OK) != 0)
        return pb_error(errno == ENOENT ? PB_ERR_NOT_FOUND : PB_ERR_IO, "hf_vocab: cannot read '%s': %s", path,
                        strerror(errno));
    char *text;
    size_t len;
    pb_status st = pb_read_file(path, &text, &len);
    if (st != PB_OK) return st;
    size_t at;
    bool trailing;
    *out = pb_json_parse_one(text, len, &at, &trailing);
    if (!*out) {
        const bool deep = !trailing && pb_json_too_deep(text, len, at);
        free(text);
        if (trailing)
            return pb_error(PB_ERR_FORMAT,
                            "hf_vocab: '%s' is not valid JSON: more text after the JSON value (at byte %zu)", path, at);
        if (deep)
            return pb_error(PB_ERR_FORMAT,
                            "hf_vocab: '%s' nests arrays or objects more than %d levels deep (at byte %zu)", path,
                            CJSON_NESTING_LIMIT, at);
        return pb_error(PB_ERR_FORMAT, "hf_vocab: '%s' is not valid JSON (near byte %zu)", path, at);
    }
    free(text);
    return PB_OK;
}

/* "content" of a token given as a string or as {"content": ...} */
static const char *token_text(const cJSON *t) {
    if (cJSON_IsString(t)) return t->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(t, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

/* convert_hf_to_gguf.py's does_token_look_special rule */
static bool looks_special(const char *t) {
    if (!strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") || !strcmp(t, "[@BOS@]")) return true;
    if (!strncmp(t, "<|", 2) && ends_with(t, "|>") && strlen(t) >= 4) return true;
    if (!strncmp(t, "<\xEF\xBD\x9C", 4) && ends_with(t, "\xEF\xBD\x9C>") && strlen(t) >= 8) return true;
    if (!strncmp(t, "<unused", 7) && ends_with(t, ">")) return true;
    return false;
}

static bool is_byte_piece(const char *t) {
    return strlen(t) == 6 && t[0] == '<' && t[1] == '0' && t[2] == 'x' && t[5] == '>' &&
           strchr("0123456789ABCDEFabcdef", t[3]) && strchr("0123456789ABCDEFabcdef", t[4]) && t[3] && t[4];
}

static bool has_prepend_space(const cJSON *norm) {
    if (!norm) return false;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(norm, "type");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "Prepend")) return true;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(norm, "normalizers"), *it;
    cJSON_ArrayForEach(it, list) if (has_prepend_space(it)) return true;
    return false;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* ---- load ------------------------------------------------------------------------------------------------ */

static pb_status set_token(hf_vocab *v, int64_t id, const char *text, const char *path) {
    if (id < 0 || id >= (int64_t)v->n)
        return pb_error(PB_ERR_FORMAT, "hf_vocab: %s: token id %lld out of range", path, (long long)id);
    free(v->tokens[id]);
    v->tokens[id] = xstrdup(text);
    return v->tokens[id] ? PB_OK : pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
}

static pb_status load_config(hf_vocab *v, const smap *m, const char *path, bool must_exist) {
    cJSON *cfg;
    if (!must_exist && access(path, F_OK) != 0) return PB_OK;
    pb_status st = read_json(path, &cfg);
    if (st != PB_OK) return st;
    struct {
        const char *key;
        int32_t *id;
    } ids[] = {{"bos_token", &v->bos}, {"eos_token", &v->eos}, {"unk_token", &v->unk}, {"pad_token", &v->pad}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, ids[i].key);
        const char *s = t ? token_text(t) : NULL;
        if (!s) continue;
        int32_t id = smap_get(m, s, strlen(s));
        if (id < 0) {
            cJSON_Delete(cfg);
            return pb_error(PB_ERR_FORMAT, "hf_vocab: %s: %s '%s' is not a token of tokenizer.json", path, ids[i].key,
                            s);
        }
        *ids[i].id = id;
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    if (cJSON_IsBool(b)) v->add_bos = cJSON_IsTrue(b);
    b = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
    if (cJSON_IsBool(b)) v->add_eos = cJSON_IsTrue(b);
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), *it;
    const char *ts = cJSON_IsString(tmpl) ? tmpl->valuestring : NULL;
    const cJSON *tlist = cJSON_IsArray(tmpl) ? tmpl : NULL;
    cJSON_ArrayForEach(it, tlist) { /* [{"name": "default", "template": ...}] */
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "template");
        if (cJSON_IsString(t) && (!ts || (cJSON_IsString(name) && !strcmp(name->valuestring, "default"))))
            ts = t->valuestring;
    }
    if (ts && !(v->chat_template = xstrdup(ts))) st = pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
    cJSON_Delete(cfg);
    return st;
}

static pb_status load(hf_vocab *v, const cJSON *root, const char *path, const char *cfg_path, bool cfg_explicit) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(model)) return pb_error(PB_ERR_FORMAT, "hf_vocab: %s: no \"model\" object", path);
    if (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE"))
        return pb_error(PB_ERR_UNSUPPORTED, "hf_vocab: %s: model.type %s is not supported (want BPE, as Gemma)", path,
                        cJSON_IsString(mtype) ? mtype->valuestring : "(missing)");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab)) return pb_error(PB_ERR_FORMAT, "hf_vocab: %s: model.vocab is not an object", path);
    if (merges && !cJSON_IsArray(merges))
        return pb_error(PB_ERR_FORMAT, "hf_vocab: %s: model.merges is not an array", path);
    if (added && !cJSON_IsArray(added))
        return pb_error(PB_ERR_FORMAT, "hf_vocab: %s: added_tokens is not an array", path);

    /* size: largest id + 1 */
    int64_t max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 16777216.0 ||
            it->valuedouble != (double)it->valueint)
            return pb_error(PB_ERR_FORMAT, "hf_vocab: %s: model.vocab[\"%.40s\"] is not a token id", path, it->string);
        if (it->valueint > max_id) max_id = it->valueint;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 16777216.0 ||
            id->valuedouble != (double)id->valueint || !token_text(it)) /* 1.5 was token 1 */
            return pb_error(PB_ERR_FORMAT, "hf_vocab: %s: an added_tokens entry has no valid id/content", path);
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (max_id < 0) return pb_error(PB_ERR_FORMAT, "hf_vocab: %s: the vocabulary is empty", path);
    v->n = (uint32_t)max_id + 1;
    v->tokens = calloc(v->n, sizeof *v->tokens);
    v->scores = calloc(v->n, sizeof *v->scores);
    v->types = calloc(v->n, sizeof *v->types);
    if (!v->tokens || !v->scores || !v->types) return pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
    pb_status st;
    cJSON_ArrayForEach(it, vocab) if ((st = set_token(v, it->valueint, it->string, path)) != PB_OK) return st;
    cJSON_ArrayForEach(it, added) {
        if ((st = set_token(v, cJSON_GetObjectItemCaseSensitive(it, "id")->valueint, token_text(it), path)) != PB_OK)
            return st;
    }
    for (uint32_t i = 0; i < v->n; i++) {
        v->types[i] = PB_TOK_NORMAL;
        if (!v->tokens[i]) { /* a hole in the id range */
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%u]", i);
            if (!(v->tokens[i] = xstrdup(pad))) return pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
            v->types[i] = PB_TOK_UNUSED;
        } else if (is_byte_piece(v->tokens[i]))
            v->types[i] = PB_TOK_BYTE;
    }

    smap m = {0};
    if ((st = smap_build(&m, v->tokens, v->n)) != PB_OK) return st;
    /* scores from merge ranks: the first merge that makes a piece gives its priority */
    int64_t n_merges = merges ? cJSON_GetArraySize(merges) : 0;
    bool *seen = calloc(v->n, 1);
    if (!seen) {
        free(m.slot);
        return pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
    }
    char *cat = NULL;
    size_t cat_cap = 0;
    int64_t r = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(it)) {
            a = it->valuestring;
            const char *sp = strchr(a, ' ');
            if (!sp) goto bad_merge;
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
                   cJSON_IsString(it->child->next)) {
            a = it->child->valuestring;
            b = it->child->next->valuestring;
            la = strlen(a);
            lb = strlen(b);
        } else
            goto bad_merge;
        if (la + lb + 1 > cat_cap) {
            cat_cap = 2 * (la + lb + 1);
            char *c = realloc(cat, cat_cap);
            if (!c) {
                st = pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
                goto out;
            }
            cat = c;
        }
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        if (!v->merges) v->merges = calloc((size_t)n_merges, sizeof *v->merges);
        char *ms = malloc(la + lb + 2);
        if (!v->merges || !ms) {
            free(ms);
            st = pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
            goto out;
        }
        memcpy(ms, a, la);
        ms[la] = ' ';
        memcpy(ms + la + 1, b, lb);
        ms[la + lb + 1] = 0;
        v->merges[v->n_merges++] = ms;
        int32_t id = smap_get(&m, cat, la + lb);
        if (id >= 0 && !seen[id]) {
            seen[id] = true;
            v->scores[id] = -(float)r;
        }
        r++;
        continue;
    bad_merge:
        st = pb_error(PB_ERR_FORMAT, "hf_vocab: %s: model.merges[%lld] is not \"a b\" or [a, b]", path, (long long)r);
        goto out;
    }
    for (uint32_t i = 0; i < v->n; i++)
        if (!seen[i]) v->scores[i] = -(float)(n_merges + (int64_t)i);

    /* added tokens: CONTROL when special or looking special, else USER_DEFINED (text unchanged) */
    cJSON_ArrayForEach(it, added) {
        int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "special");
        v->types[id] = (cJSON_IsTrue(sp) || looks_special(token_text(it))) ? PB_TOK_CONTROL : PB_TOK_USER_DEFINED;
    }

    v->bpe_merges = smap_get(&m, "<|turn>", 7) >= 0; /* Gemma 4 vocabulary layout */
    v->bos = smap_get(&m, "<bos>", 5);
    v->eos = smap_get(&m, "<eos>", 5);
    v->unk = smap_get(&m, "<unk>", 5);
    v->pad = smap_get(&m, "<pad>", 5);
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(unk)) v->unk = smap_get(&m, unk->valuestring, strlen(unk->valuestring));
    v->add_bos = true;
    v->add_eos = false;
    v->add_space_prefix = has_prepend_space(cJSON_GetObjectItemCaseSensitive(root, "normalizer"));
    if ((st = load_config(v, &m, cfg_path, cfg_explicit)) != PB_OK) goto out;
    if (v->unk >= 0 && v->types[v->unk] == PB_TOK_NORMAL) v->types[v->unk] = PB_TOK_UNKNOWN;
out:
    free(cat);
    free(seen);
    free(m.slot);
    return st;
}

pb_status hf_vocab_load(const char *tokenizer_json, const char *tokenizer_config, hf_vocab **out) {
    if (!tokenizer_json || !out) return pb_error(PB_ERR_INVALID_ARG, "hf_vocab: NULL argument");
    *out = NULL;
    hf_vocab *v = calloc(1, sizeof *v);
    if (!v) return pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
    v->bos = v->eos = v->unk = v->pad = -1;
    char cfg[4096];
    if (tokenizer_config)
        snprintf(cfg, sizeof cfg, "%s", tokenizer_config);
    else {
        const char *slash = strrchr(tokenizer_json, '/');
        int dir = slash ? (int)(slash - tokenizer_json + 1) : 0;
        snprintf(cfg, sizeof cfg, "%.*stokenizer_config.json", dir, tokenizer_json);
    }
    cJSON *root;
    pb_status st = read_json(tokenizer_json, &root);
    if (st == PB_OK) {
        st = load(v, root, tokenizer_json, cfg, tokenizer_config != NULL);
        cJSON_Delete(root);
    }
    if (st != PB_OK) {
        hf_vocab_free(v);
        return st;
    }
    *out = v;
    return PB_OK;
}

void hf_vocab_free(hf_vocab *v) {
    if (!v) return;
    for (uint32_t i = 0; v->tokens && i < v->n; i++) free(v->tokens[i]);
    free(v->tokens);
    free(v->scores);
    free(v->types);
    free(v->chat_template);
    for (uint32_t i = 0; v->merges && i < v->n_merges; i++) free(v->merges[i]);
    free(v->merges);
    free(v);
}

pb_status hf_vocab_pad(hf_vocab *v, uint32_t n) {
    if (!v) return pb_error(PB_ERR_INVALID_ARG, "hf_vocab: NULL argument");
    if (n <= v->n) return PB_OK;
    char **t = realloc(v->tokens, n * sizeof *t);
    if (t) v->tokens = t;
    float *s = realloc(v->scores, n * sizeof *s);
    if (s) v->scores = s;
    int32_t *ty = realloc(v->types, n * sizeof *ty);
    if (ty) v->types = ty;
    if (!t || !s || !ty) return pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
    for (uint32_t i = v->n; i < n; i++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%u]", i);
        if (!(v->tokens[i] = xstrdup(pad))) {
            v->n = i;
            return pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
        }
        v->scores[i] = -1000.0f;
        v->types[i] = PB_TOK_UNUSED;
    }
    v->n = n;
    return PB_OK;
}

pb_status hf_vocab_write(const hf_vocab *v, pb_gguf_writer *w) {
    if (!v || !w) return pb_error(PB_ERR_INVALID_ARG, "hf_vocab: NULL argument");
    pb_status st;
#define TRY(x)                                                                                                         \
    if ((st = (x)) != PB_OK) return st
    TRY(pb_gguf_set_str(w, "tokenizer.ggml.model", v->bpe_merges ? "gemma4" : "llama"));
    TRY(pb_gguf_set_str(w, "tokenizer.ggml.pre", v->bpe_merges ? "gemma4" : "default"));
    TRY(pb_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, NULL, v->n));
    TRY(pb_gguf_set_arr(w, "tokenizer.ggml.scores", PB_GGUF_FLOAT32, v->scores, v->n));
    TRY(pb_gguf_set_arr(w, "tokenizer.ggml.token_type", PB_GGUF_INT32, v->types, v->n));
    if (v->bos >= 0) TRY(pb_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos));
    if (v->eos >= 0) TRY(pb_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos));
    if (v->unk >= 0) TRY(pb_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk));
    if (v->pad >= 0) TRY(pb_gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad));
    TRY(pb_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos));
    TRY(pb_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos));
    TRY(pb_gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix));
    if (v->chat_template) TRY(pb_gguf_set_str(w, "tokenizer.chat_template", v->chat_template));
    if (v->bpe_merges)
        TRY(pb_gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, NULL, v->n_merges));
#undef TRY
    return PB_OK;
}

pb_status hf_vocab_to_vocab(const hf_vocab *hv, pb_vocab **out) {
    if (!hv || !out) return pb_error(PB_ERR_INVALID_ARG, "hf_vocab: NULL argument");
    *out = NULL;
    pb_status st = PB_OK;
    pb_gguf_writer *w = pb_gguf_writer_new();
    void *mem = NULL;
    size_t len = 0;
    pb_gguf *g = NULL;
    if (!w) st = pb_error(PB_ERR_NOMEM, "hf_vocab: out of memory");
    if (st == PB_OK) st = hf_vocab_write(hv, w);
    if (st == PB_OK) st = pb_gguf_write_memory(w, &mem, &len);
    if (st == PB_OK) st = pb_gguf_open_memory(mem, len, &g);
    if (st == PB_OK) st = pb_vocab_from_gguf(g, out);
    pb_gguf_close(g);
    free(mem);
    pb_gguf_writer_free(w);
    return st;
}

pb_status hf_vocab_open(const char *tokenizer_json, const char *tokenizer_config, pb_vocab **out) {
    if (!out) return pb_error(PB_ERR_INVALID_ARG, "hf_vocab: NULL argument");
    *out = NULL;
    hf_vocab *hv;
    pb_status st = hf_vocab_load(tokenizer_json, tokenizer_config, &hv);
    if (st == PB_OK) st = hf_vocab_to_vocab(hv, out);
    hf_vocab_free(hv);
    return st;
}

pb_status hf_vocab_open_any(const char *path, pb_vocab **out) {
    if (!path || !out) return pb_error(PB_ERR_INVALID_ARG, "vocab: NULL argument");
    size_t n = strlen(path);
    if (n >= 5 && strcmp(path + n - 5, ".json") == 0) return hf_vocab_open(path, NULL, out);
    return pb_vocab_open(path, out);
}
