/* safetensors.c -- validated reader of Hugging Face safetensors files and sharded index sets (cJSON for
 * the untrusted headers, mmap for the data). Converts F32/F16/BF16 to float32; writes nothing. */
#include "safetensors.h"

#include "json/json.h"
#include "tensor/types.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct pb_st_model {
    pb_map *maps;       /* one per shard (unused for memory images) */
    char **shard_paths; /* one per shard */
    int n_shards;
    pb_st_tensor *t; /* sorted by name */
    int64_t n, cap;
};

/* ---- dtypes ---------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} dtypes[PB_ST_DTYPE_COUNT] = {
    [PB_ST_F32] = {"F32", 4},   [PB_ST_F16] = {"F16", 2},         [PB_ST_BF16] = {"BF16", 2},
    [PB_ST_F64] = {"F64", 8},   [PB_ST_I64] = {"I64", 8},         [PB_ST_U64] = {"U64", 8},
    [PB_ST_I32] = {"I32", 4},   [PB_ST_U32] = {"U32", 4},         [PB_ST_I16] = {"I16", 2},
    [PB_ST_U16] = {"U16", 2},   [PB_ST_I8] = {"I8", 1},           [PB_ST_U8] = {"U8", 1},
    [PB_ST_BOOL] = {"BOOL", 1}, [PB_ST_F8_E4M3] = {"F8_E4M3", 1}, [PB_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *pb_st_dtype_name(pb_st_dtype t) { return (unsigned)t < PB_ST_DTYPE_COUNT ? dtypes[t].name : "?"; }
size_t pb_st_dtype_size(pb_st_dtype t) { return (unsigned)t < PB_ST_DTYPE_COUNT ? dtypes[t].size : 0; }
bool pb_st_dtype_is_float(pb_st_dtype t) { return t == PB_ST_F32 || t == PB_ST_F16 || t == PB_ST_BF16; }

static int dtype_from_name(const char *s) {
    for (int i = 0; i < PB_ST_DTYPE_COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0) return i;
    return -1;
}

/* ---- model bookkeeping ----------------------------------------------------------------------- */

void pb_st_close(pb_st_model *m) {
    if (!m) return;
    for (int64_t i = 0; i < m->n; i++) free((char *)m->t[i].name);
    free(m->t);
    for (int i = 0; i < m->n_shards; i++) {
        if (m->maps) pb_map_close(&m->maps[i]);
        free(m->shard_paths[i]);
    }
    free(m->maps);
    free(m->shard_paths);
    free(m);
}

static pb_status add_shard(pb_st_model *m, const char *path) {
    char **p = realloc(m->shard_paths, (size_t)(m->n_shards + 1) * sizeof *p);
    if (!p) return pb_error(PB_ERR_NOMEM, "safetensors: out of memory");
    m->shard_paths = p;
    pb_map *mp = realloc(m->maps, (size_t)(m->n_shards + 1) * sizeof *mp);
    if (!mp) return pb_error(PB_ERR_NOMEM, "safetensors: out of memory");
    m->maps = mp;
    memset(&m->maps[m->n_shards], 0, sizeof *mp);
    m->shard_paths[m->n_shards] = pb_strdup(path);
    if (!m->shard_paths[m->n_shards]) return PB_ERR_NOMEM;
    m->n_shards++;
    return PB_OK;
}

static pb_st_tensor *push_tensor(pb_st_model *m) {
    if (m->n == m->cap) {
        int64_t cap = m->cap ? m->cap * 2 : 256;
        pb_st_tensor *t = realloc(m->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        m->t = t;
        m->cap = cap;
    }
    pb_st_tensor *t = &m->t[m->n++];
    memset(t, 0, sizeof *t);
    return t;
}

/* ---- one shard's header ---------------------------------------------------------------------- */

/* A JSON number that is an exact non-negative integer below 2^53 (doubles are exact up to there). */
static bool json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v)) return false;
    *out = (uint64_t)v;
    return true;
}

typedef struct span {
    uint64_t begin, end;
    int64_t idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static pb_status parse_entry(pb_st_model *m, const cJSON *e, const uint8_t *data, uint64_t data_size, const char *label,
                             int shard) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", label, name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd)) return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': missing string \"dtype\"", label, name);
    int dt = dtype_from_name(jd->valuestring);
    if (dt < 0) return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", label, name, jd->valuestring);
    if (!cJSON_IsArray(js)) return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': missing array \"shape\"", label, name);
    int nd = cJSON_GetArraySize(js);
    if (nd > PB_ST_MAX_DIMS)
        return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': %d dimensions (at most %d)", label, name, nd, PB_ST_MAX_DIMS);
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" must be [begin, end]", label, name);

    pb_st_tensor *t = push_tensor(m);
    if (!t) return pb_error(PB_ERR_NOMEM, "safetensors: out of memory");
    t->name = pb_strdup(name);
    if (!t->name) return PB_ERR_NOMEM;
    t->dtype = (pb_st_dtype)dt;
    t->n_dims = nd;
    t->shard = shard;
    uint64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (!json_uint(cJSON_GetArrayItem(js, i), &d) || d > INT64_MAX)
            return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", label, name, i);
        if (d && numel > UINT64_MAX / d)
            return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': element count overflows", label, name);
        numel *= d;
        t->shape[i] = (int64_t)d;
    }
    uint64_t begin, end;
    if (!json_uint(cJSON_GetArrayItem(jo, 0), &begin) || !json_uint(cJSON_GetArrayItem(jo, 1), &end))
        return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers", label, name);
    if (numel > (uint64_t)INT64_MAX / 8)
        return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': element count overflows", label, name);
    uint64_t nbytes = numel * dtypes[dt].size;
    if (begin > end)
        return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] run backwards", label, name,
                        (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return pb_error(PB_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets end %llu is past the end of the data (%llu bytes)", label, name,
                        (unsigned long long)end, (unsigned long long)data_size);
    if (end - begin != nbytes)
        return pb_error(PB_ERR_FORMAT, "%s: tensor '%s': data_offsets span %llu bytes but shape x %s needs %llu bytes",
                        label, name, (unsigned long long)(end - begin), dtypes[dt].name, (unsigned long long)nbytes);
    t->n_elements = (int64_t)numel;
    t->nbytes = (size_t)nbytes;
    t->data = data + begin;
    return PB_OK;
}

/* Parses the header of the image [data, data + size) and appends its tensors to m. */
static pb_status parse_shard(pb_st_model *m, const uint8_t *data, size_t size, const char *label, int shard) {
    if (size < 8)
        return pb_error(PB_ERR_FORMAT, "%s: file is %zu bytes, too small for a safetensors header", label, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
    if (hlen < 2 || hlen > size - 8)
        return pb_error(PB_ERR_FORMAT, "%s: header length %llu does not fit in the file (%zu bytes)", label,
                        (unsigned long long)hlen, size);
    if (hlen > PB_ST_MAX_HEADER)
        return pb_error(PB_ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit", label,
                        (unsigned long long)hlen, (unsigned long long)PB_ST_MAX_HEADER);
    const char *hdr = (const char *)data + 8;
    if (hdr[0] != '{') return pb_error(PB_ERR_FORMAT, "%s: header does not start with '{' (not JSON)", label);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!root) {
        size_t at = end && end >= hdr && end <= hdr + hlen ? (size_t)(end - hdr) : 0;
        return pb_error(PB_ERR_FORMAT, "%s: header is not valid JSON (error near header byte %zu, file offset %zu)",
                        label, at, at + 8);
    }
    pb_status s = PB_OK;
    /* The reference writer pads the header with spaces; anything else after the object is an error. */
    for (const char *p = end; p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = pb_error(PB_ERR_FORMAT, "%s: unexpected bytes after the JSON header at file offset %zu", label,
                         (size_t)(p - hdr) + 8);
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        s = pb_error(PB_ERR_FORMAT, "%s: header is not a JSON object", label);
        goto done;
    }
    const uint8_t *base = data + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    int64_t first = m->n;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!e->string) {
            s = pb_error(PB_ERR_FORMAT, "%s: header entry without a name", label);
            goto done;
        }
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) {
                s = pb_error(PB_ERR_FORMAT, "%s: \"__metadata__\" is not an object", label);
                goto done;
            }
            continue;
        }
        if ((s = parse_entry(m, e, base, data_size, label, shard)) != PB_OK) goto done;
    }
    /* No two tensors may share bytes (zero-size tensors own none). */
    int64_t n = m->n - first, k = 0;
    span *sp = n ? malloc((size_t)n * sizeof *sp) : NULL;
    if (n && !sp) {
        s = pb_error(PB_ERR_NOMEM, "safetensors: out of memory");
        goto done;
    }
    for (int64_t i = first; i < m->n; i++) {
        if (!m->t[i].nbytes) continue;
        uint64_t b = (uint64_t)((const uint8_t *)m->t[i].data - base);
        sp[k++] = (span){b, b + m->t[i].nbytes, i};
    }
    qsort(sp, (size_t)k, sizeof *sp, span_cmp);
    for (int64_t i = 1; i < k; i++)
        if (sp[i].begin < sp[i - 1].end) {
            s = pb_error(PB_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap (data_offsets %llu..%llu and %llu..%llu)",
                         label, m->t[sp[i - 1].idx].name, m->t[sp[i].idx].name, (unsigned long long)sp[i - 1].begin,
                         (unsigned long long)sp[i - 1].end, (unsigned long long)sp[i].begin,
                         (unsigned long long)sp[i].end);
            break;
        }
    free(sp);
done:
    cJSON_Delete(root);
    return s;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(((const pb_st_tensor *)a)->name, ((const pb_st_tensor *)b)->name);
}

/* Sorts by name and rejects duplicates (within or across shards). */
static pb_status finish(pb_st_model *m) {
    if (m->n) qsort(m->t, (size_t)m->n, sizeof *m->t, name_cmp);
    for (int64_t i = 1; i < m->n; i++)
        if (strcmp(m->t[i - 1].name, m->t[i].name) == 0) {
            int a = m->t[i - 1].shard, b = m->t[i].shard;
            if (a == b)
                return pb_error(PB_ERR_FORMAT, "%s: tensor '%s' appears twice", m->shard_paths[a], m->t[i].name);
            return pb_error(PB_ERR_FORMAT, "tensor '%s' is in both %s and %s", m->t[i].name, m->shard_paths[a],
                            m->shard_paths[b]);
        }
    return PB_OK;
}

/* ---- opening --------------------------------------------------------------------------------- */

pb_status pb_st_open_memory(const void *data, size_t size, const char *label, pb_st_model **out) {
    *out = NULL;
    pb_st_model *m = calloc(1, sizeof *m);
    if (!m) return pb_error(PB_ERR_NOMEM, "safetensors: out of memory");
    pb_status s = add_shard(m, label);
    if (s == PB_OK) s = parse_shard(m, data, size, label, 0);
    if (s == PB_OK) s = finish(m);
    if (s != PB_OK) {
        pb_st_close(m);
        return s;
    }
    *out = m;
    return PB_OK;
}

static pb_status open_file(pb_st_model *m, const char *path) {
    pb_status s = add_shard(m, path);
    if (s != PB_OK) return s;
    int k = m->n_shards - 1;
    if ((s = pb_map_open(path, true, &m->maps[k])) != PB_OK) return s;
    return parse_shard(m, m->maps[k].data, m->maps[k].size, path, k);
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static pb_status open_index(pb_st_model *m, const char *index_path) {
    char *text = NULL;
    size_t len = 0;
    pb_status s = pb_read_file(index_path, &text, &len);
    if (s != PB_OK) return s;
    size_t at;
    bool trailing;
    cJSON *root = pb_json_parse_one(text, len, &at, &trailing);
    const bool deep = !root && !trailing && pb_json_too_deep(text, len, at);
    free(text);
    if (trailing)
        return pb_error(PB_ERR_FORMAT, "%s: not valid JSON: more text after the JSON value (at byte %zu)", index_path,
                        at);
    if (deep)
        return pb_error(PB_ERR_FORMAT, "%s: nests arrays or objects more than %d levels deep (at byte %zu)", index_path,
                        CJSON_NESTING_LIMIT, at);
    if (!root) return pb_error(PB_ERR_FORMAT, "%s: not valid JSON (near byte %zu)", index_path, at);
    char *dir = pb_strdup(index_path);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (!dir) {
        cJSON_Delete(root);
        return PB_ERR_NOMEM;
    }
    if (slash)
        *slash = 0;
    else
        strcpy(dir, ".");
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm) || !wm->child) {
        s = pb_error(PB_ERR_FORMAT, "%s: missing or empty object \"weight_map\"", index_path);
        goto done;
    }
    /* Open each distinct shard once, in order of first mention. */
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !e->string) {
            s = pb_error(PB_ERR_FORMAT, "%s: weight_map entry '%s' is not a file name", index_path,
                         e->string ? e->string : "?");
            goto done;
        }
        const char *f = e->valuestring;
        if (!*f || f[0] == '.' || strchr(f, '/') || strchr(f, '\\')) {
            s = pb_error(PB_ERR_FORMAT, "%s: shard name '%.64s' (tensor '%s') must be a plain file name", index_path, f,
                         e->string);
            goto done;
        }
        char *p = join(dir, f);
        if (!p) {
            s = PB_ERR_NOMEM;
            goto done;
        }
        bool seen = false;
        for (int i = 0; i < m->n_shards && !seen; i++) seen = strcmp(m->shard_paths[i], p) == 0;
        if (!seen) s = open_file(m, p);
        free(p);
        if (s != PB_OK) goto done;
    }
    if ((s = finish(m)) != PB_OK) goto done;
    /* Every entry must be in the shard it names. */
    for (const cJSON *e = wm->child; e; e = e->next) {
        const pb_st_tensor *t = pb_st_find(m, e->string);
        char *p = join(dir, e->valuestring);
        if (!p) {
            s = PB_ERR_NOMEM;
            goto done;
        }
        bool ok = t && strcmp(m->shard_paths[t->shard], p) == 0;
        free(p);
        if (!ok) {
            s = pb_error(PB_ERR_FORMAT, "%s: tensor '%s' is listed in %s but is not in that file", index_path,
                         e->string, e->valuestring);
            goto done;
        }
    }
done:
    free(dir);
    cJSON_Delete(root);
    return s;
}

static pb_status open_dir(pb_st_model *m, const char *dir) {
    pb_status s;
    char *p = join(dir, "model.safetensors.index.json");
    if (!p) return PB_ERR_NOMEM;
    if (is_file(p)) {
        s = open_index(m, p);
        free(p);
        return s;
    }
    free(p);
    if (!(p = join(dir, "model.safetensors"))) return PB_ERR_NOMEM;
    if (is_file(p)) {
        s = open_file(m, p);
        free(p);
        return s == PB_OK ? finish(m) : s;
    }
    free(p);
    DIR *d = opendir(dir);
    if (!d) return pb_error(PB_ERR_IO, "cannot open directory '%s'", dir);
    char *only = NULL;
    int count = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' || !ends_with(de->d_name, ".safetensors")) continue;
        if (count++ == 0) only = join(dir, de->d_name);
    }
    closedir(d);
    if (count == 0) {
        free(only);
        return pb_error(PB_ERR_NOT_FOUND,
                        "no safetensors weights in '%s' (model.safetensors or model.safetensors.index.json; "
                        "pytorch_model.bin is not supported)",
                        dir);
    }
    if (count > 1) {
        free(only);
        return pb_error(PB_ERR_FORMAT, "'%s' has %d .safetensors files but no model.safetensors.index.json", dir,
                        count);
    }
    if (!only) return PB_ERR_NOMEM;
    s = open_file(m, only);
    free(only);
    return s == PB_OK ? finish(m) : s;
}

pb_status pb_st_open(const char *path, pb_st_model **out) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return pb_error(PB_ERR_NOT_FOUND, "safetensors: '%s' does not exist", path);
    pb_st_model *m = calloc(1, sizeof *m);
    if (!m) return pb_error(PB_ERR_NOMEM, "safetensors: out of memory");
    pb_status s;
    if (S_ISDIR(st.st_mode))
        s = open_dir(m, path);
    else if (ends_with(path, ".json"))
        s = open_index(m, path);
    else if ((s = open_file(m, path)) == PB_OK)
        s = finish(m);
    if (s != PB_OK) {
        pb_st_close(m);
        return s;
    }
    *out = m;
    return PB_OK;
}

/* ---- access ---------------------------------------------------------------------------------- */

int64_t pb_st_n_tensors(const pb_st_model *m) { return m->n; }
const pb_st_tensor *pb_st_tensor_at(const pb_st_model *m, int64_t i) { return i >= 0 && i < m->n ? &m->t[i] : NULL; }
int pb_st_n_shards(const pb_st_model *m) { return m->n_shards; }
const char *pb_st_shard_path(const pb_st_model *m, int shard) {
    return shard >= 0 && shard < m->n_shards ? m->shard_paths[shard] : NULL;
}

const pb_st_tensor *pb_st_find(const pb_st_model *m, const char *name) {
    int64_t lo = 0, hi = m->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->t[mid].name, name);
        if (c == 0) return &m->t[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

pb_status pb_st_read_f32(const pb_st_tensor *t, int64_t first, int64_t n, float *dst) {
    if (first < 0 || n < 0 || first > t->n_elements || n > t->n_elements - first)
        return pb_error(PB_ERR_INVALID_ARG, "safetensors: range %lld+%lld outside tensor '%s'", (long long)first,
                        (long long)n, t->name);
    const uint8_t *src = (const uint8_t *)t->data + (size_t)first * dtypes[t->dtype].size;
    switch (t->dtype) {
    case PB_ST_F32: memcpy(dst, src, (size_t)n * 4); return PB_OK;
    case PB_ST_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = pb_fp16_to_fp32(h);
        }
        return PB_OK;
    case PB_ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = pb_bf16_to_fp32(h);
        }
        return PB_OK;
    default:
        return pb_error(PB_ERR_UNSUPPORTED, "safetensors: tensor '%s' has dtype %s (only F32, F16 and BF16 convert)",
                        t->name, dtypes[t->dtype].name);
    }
}
