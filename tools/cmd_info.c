/* cmd_info.c -- `pocketbrain info MODEL.gguf`: metadata, hparams, tokenizer, tensor table, arch check. */
#include "cli.h"
#include "cli_common.h"
#include "library.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tensor/types.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static cli_mem_opts mem_opts; /* --mem -c N (engine room: tools/cli_common.c) */
static bool mem_refused;      /* --mem -c N that `run -c N` would refuse too: exit 1 */

static const char *const usage =
    "pocketbrain info MODEL.gguf|NAME [--json] [--kv] [--tensors]\n"
    "  --json     machine-readable output (one JSON object on stdout)\n"
    "  --kv       every metadata key with its type and value (arrays: count + first items)\n"
    "  --tensors  the tensor table (name, type, shape, bytes, offset)\n"
    "  --mem      memory estimate: weights + KV + scratch vs available (with -c N, --kv-type T, --mem-limit S;\n"
    "             --think: of a chat that thinks and drops its thoughts, whose sliding-window rings keep more rows)\n"
    "exit status: 0 ok, 1 unreadable/malformed file or failed architecture check, 2 usage";

/* llama.cpp's llama_ftype values (general.file_type) -> names. */
const char *cli_ftype_name(uint32_t ft) {
    static const char *const names[] = {
        [0] = "F32",     [1] = "F16",     [2] = "Q4_0",     [3] = "Q4_1",    [7] = "Q8_0",     [8] = "Q5_0",
        [9] = "Q5_1",    [10] = "Q2_K",   [11] = "Q3_K_S",  [12] = "Q3_K_M", [13] = "Q3_K_L",  [14] = "Q4_K_S",
        [15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M",  [18] = "Q6_K",   [19] = "IQ2_XXS", [20] = "IQ2_XS",
        [21] = "Q2_K_S", [22] = "IQ3_XS", [23] = "IQ3_XXS", [24] = "IQ1_S",  [25] = "IQ4_NL",  [26] = "IQ3_S",
        [27] = "IQ3_M",  [28] = "IQ2_S",  [29] = "IQ2_M",   [30] = "IQ4_XS", [31] = "IQ1_M",   [32] = "BF16",
        [36] = "TQ1_0",  [37] = "TQ2_0",
    };
    return ft < sizeof names / sizeof names[0] && names[ft] ? names[ft] : "unknown";
}

/* ---- text helpers ------------------------------------------------------------------------------- */

/* Copies a file string into dst as valid UTF-8 without control characters (escaped as \n, \xNN or U+FFFD),
 * at most max source bytes ("..." appended when cut). dst must hold 4*max+8 bytes. */
static void clean_str(char *dst, const char *s, uint64_t len, size_t max) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = len > max ? max : (size_t)len, j = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = k > 0 && i + k <= n;
        for (size_t m = 1; ok && m < k; m++) ok = (p[i + m] & 0xC0) == 0x80;
        if (ok && k == 1 && c < 0x20) {
            j += (size_t)sprintf(dst + j, c == '\n' ? "\\n" : c == '\t' ? "\\t" : "\\x%02x", c);
            i++;
        } else if (ok) {
            memcpy(dst + j, p + i, k);
            j += k;
            i += k;
        } else { /* invalid byte: U+FFFD */
            memcpy(dst + j, "\xEF\xBF\xBD", 3);
            j += 3;
            i++;
        }
    }
    if (len > max) memcpy(dst + j, "...", 3), j += 3;
    dst[j] = 0;
}

static bool is_signed_type(pb_gguf_vtype t) {
    return t == PB_GGUF_INT8 || t == PB_GGUF_INT16 || t == PB_GGUF_INT32 || t == PB_GGUF_INT64;
}

/* One element of a fixed-size array as a value. */
static void arr_elem(const pb_gguf_value *a, uint64_t i, pb_gguf_value *out) {
    size_t es = pb_gguf_vtype_size(a->elem_type);
    const uint8_t *p = (const uint8_t *)a->data + i * es;
    memset(out, 0, sizeof *out);
    out->type = a->elem_type;
    uint64_t u = 0;
    for (size_t k = 0; k < es; k++) u |= (uint64_t)p[k] << (8 * k);
    switch (a->elem_type) {
    case PB_GGUF_INT8: out->v.i = (int8_t)u; break;
    case PB_GGUF_INT16: out->v.i = (int16_t)u; break;
    case PB_GGUF_INT32: out->v.i = (int32_t)u; break;
    case PB_GGUF_INT64: out->v.i = (int64_t)u; break;
    case PB_GGUF_BOOL: out->v.b = u != 0; break;
    case PB_GGUF_FLOAT32: {
        uint32_t b = (uint32_t)u;
        float f;
        memcpy(&f, &b, 4);
        out->v.f = f;
        break;
    }
    case PB_GGUF_FLOAT64: memcpy(&out->v.f, &u, 8); break;
    default: out->v.u = u; break;
    }
}

/* Scalar value as text. */
static void scalar_text(const pb_gguf_value *v, char *buf, size_t cap) {
    switch (v->type) {
    case PB_GGUF_BOOL: snprintf(buf, cap, "%s", v->v.b ? "true" : "false"); break;
    case PB_GGUF_FLOAT32: /* shortest text that reads back as the same float */
        for (int prec = 6; prec <= 9; prec++) {
            snprintf(buf, cap, "%.*g", prec, v->v.f);
            if ((float)strtod(buf, NULL) == (float)v->v.f) break;
        }
        break;
    case PB_GGUF_FLOAT64:
        for (int prec = 6; prec <= 17; prec++) {
            snprintf(buf, cap, "%.*g", prec, v->v.f);
            if (strtod(buf, NULL) == v->v.f) break;
        }
        break;
    case PB_GGUF_STRING: {
        char *tmp = malloc(4 * 200 + 8);
        if (tmp) clean_str(tmp, v->v.s.ptr, v->v.s.len, 200);
        snprintf(buf, cap, "\"%s\"", tmp ? tmp : "");
        free(tmp);
        break;
    }
    default:
        if (is_signed_type(v->type))
            snprintf(buf, cap, "%lld", (long long)v->v.i);
        else
            snprintf(buf, cap, "%llu", (unsigned long long)v->v.u);
    }
}

/* Value of KV i as text (arrays: TYPE[n] = [first items]). */
static void value_text(const pb_gguf *g, int64_t i, char *buf, size_t cap) {
    pb_gguf_value v;
    pb_gguf_kv_value(g, i, &v);
    if (v.type != PB_GGUF_ARRAY) {
        scalar_text(&v, buf, cap);
        return;
    }
    size_t j = (size_t)snprintf(buf, cap, "%s[%llu] = [", pb_gguf_vtype_name(v.elem_type), (unsigned long long)v.n);
    for (uint64_t k = 0; k < v.n && k < 8 && j < cap; k++) {
        char item[256];
        pb_gguf_value e;
        if (v.elem_type == PB_GGUF_STRING) {
            memset(&e, 0, sizeof e);
            e.type = PB_GGUF_STRING;
            pb_gguf_get_arr_str(g, i, k, &e.v.s);
            if (e.v.s.len > 40) e.v.s.len = 40;
        } else {
            arr_elem(&v, k, &e);
        }
        scalar_text(&e, item, sizeof item);
        j += (size_t)snprintf(buf + j, cap - j, "%s%s", k ? ", " : "", item);
    }
    if (j < cap) snprintf(buf + j, cap - j, "%s]", v.n > 8 ? ", ..." : "");
}

/* ---- JSON helpers ------------------------------------------------------------------------------- */

static cJSON *json_scalar(const pb_gguf_value *v) {
    switch (v->type) {
    case PB_GGUF_BOOL: return cJSON_CreateBool(v->v.b);
    case PB_GGUF_FLOAT32: { /* the shortest decimal of the float, so 1e-6f prints as 1e-06 */
        char b[64];
        scalar_text(v, b, sizeof b);
        return cJSON_CreateNumber(strtod(b, NULL));
    }
    case PB_GGUF_FLOAT64: return cJSON_CreateNumber(v->v.f);
    case PB_GGUF_STRING: {
        size_t max = 1 << 20;
        char *tmp = malloc(4 * (v->v.s.len < max ? (size_t)v->v.s.len : max) + 8);
        if (!tmp) return cJSON_CreateNull();
        clean_str(tmp, v->v.s.ptr, v->v.s.len, max);
        cJSON *s = cJSON_CreateString(tmp);
        free(tmp);
        return s;
    }
    default: {
        /* integers beyond 2^53 do not survive a JSON double: give them as strings */
        if (is_signed_type(v->type)) {
            if (v->v.i > (1ll << 53) || v->v.i < -(1ll << 53)) {
                char b[32];
                snprintf(b, sizeof b, "%lld", (long long)v->v.i);
                return cJSON_CreateString(b);
            }
            return cJSON_CreateNumber((double)v->v.i);
        }
        if (v->v.u > (1ull << 53)) {
            char b[32];
            snprintf(b, sizeof b, "%llu", (unsigned long long)v->v.u);
            return cJSON_CreateString(b);
        }
        return cJSON_CreateNumber((double)v->v.u);
    }
    }
}

static cJSON *json_value(const pb_gguf *g, int64_t i) {
    pb_gguf_value v;
    pb_gguf_kv_value(g, i, &v);
    if (v.type != PB_GGUF_ARRAY) return json_scalar(&v);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "elem_type", pb_gguf_vtype_name(v.elem_type));
    cJSON_AddNumberToObject(o, "n", (double)v.n);
    cJSON *head = cJSON_AddArrayToObject(o, "head");
    for (uint64_t k = 0; k < v.n && k < 8; k++) {
        pb_gguf_value e;
        if (v.elem_type == PB_GGUF_STRING) {
            memset(&e, 0, sizeof e);
            e.type = PB_GGUF_STRING;
            pb_gguf_get_arr_str(g, i, k, &e.v.s);
        } else {
            arr_elem(&v, k, &e);
        }
        cJSON_AddItemToArray(head, json_scalar(&e));
    }
    return o;
}

static void shape_text(const pb_gguf_tensor *t, char *buf, size_t cap) {
    size_t j = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->n_dims && j < cap; d++)
        j += (size_t)snprintf(buf + j, cap - j, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    if (j < cap) snprintf(buf + j, cap - j, "]");
}

/* ---- architecture check ------------------------------------------------------------------------- */

typedef struct problems {
    cJSON *list; /* [{tensor, problem}] */
    int n;
} problems;

static void on_problem(void *user, const char *tensor, const char *problem) {
    problems *p = user;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tensor", tensor ? tensor : "");
    cJSON_AddStringToObject(o, "problem", problem ? problem : "");
    cJSON_AddItemToArray(p->list, o);
    p->n++;
}

/* Runs the model room's check. *status: "ok", "failed" or "skipped"; *detail: why (owned by caller). */
static void arch_check(const pb_gguf *g, problems *pr, const char **status, char *detail, size_t cap) {
    pb_hparams hp;
    memset(&hp, 0, sizeof hp);
    pb_status s = pb_hparams_from_gguf(g, &hp);
    if (s) { /* a gemma file whose header run / serve refuse fails; only another kind of GGUF is skipped */
        *status = hp.arch ? "failed" : "skipped";
        snprintf(detail, cap, "%s", pb_last_error()[0] ? pb_last_error() : pb_status_name(s));
        return;
    }
    s = pb_arch_check_tensors(g, &hp, on_problem, pr);
    *status = s ? "failed" : "ok";
    snprintf(detail, cap, "%s", s ? pb_last_error() : "");
}

/* ---- the command -------------------------------------------------------------------------------- */

/* Everything the two output formats show, gathered once. */
typedef struct summary {
    const char *path;
    const pb_gguf *g;
    int64_t n_params;
    size_t bytes;
    int per_type[PB_TYPE_COUNT];
    bool has_arch, has_name, has_ft, has_tok_model, has_vocab;
    char arch[128], name[4 * 128 + 8], tok_model[4 * 32 + 8];
    char prefix[160]; /* "<arch>." */
    size_t plen;
    uint32_t ft;
    uint64_t n_vocab;
    problems pr;
    const char *check_status; /* "ok", "failed", "skipped" */
    char check_detail[1024];
} summary;

static const char *const tok_ids[] = {"bos", "eos", "eot", "unknown", "padding"};

static void gather(const pb_gguf *g, const char *path, summary *S) {
    memset(S, 0, sizeof *S);
    S->path = path;
    S->g = g;
    for (int64_t i = 0; i < pb_gguf_n_tensors(g); i++) {
        const pb_gguf_tensor *t = pb_gguf_tensor_at(g, i);
        S->n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        S->bytes += t->nbytes;
        S->per_type[t->type]++;
    }
    pb_gguf_str arch = {"", 0}, name = {"", 0}, tok = {"", 0};
    S->has_arch = pb_gguf_get_str(g, "general.architecture", &arch) == PB_OK;
    S->has_name = pb_gguf_get_str(g, "general.name", &name) == PB_OK && name.len;
    S->has_tok_model = pb_gguf_get_str(g, "tokenizer.ggml.model", &tok) == PB_OK;
    clean_str(S->arch, arch.ptr, arch.len, 24);
    clean_str(S->name, name.ptr, name.len, 128);
    clean_str(S->tok_model, tok.ptr, tok.len, 32);
    S->has_ft = pb_gguf_get_u32(g, "general.file_type", &S->ft) == PB_OK;
    snprintf(S->prefix, sizeof S->prefix, "%s.", S->arch);
    S->plen = strlen(S->prefix);
    pb_gguf_vtype et;
    S->has_vocab = pb_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &S->n_vocab, NULL) == PB_OK;
    S->pr.list = cJSON_CreateArray();
    arch_check(g, &S->pr, &S->check_status, S->check_detail, sizeof S->check_detail);
}

/* True for "<arch>.*" keys: the hyperparameters. */
static bool is_hparam(const summary *S, int64_t i) {
    return S->plen > 1 && strncmp(pb_gguf_kv_key(S->g, i), S->prefix, S->plen) == 0;
}

static double bits_per_weight(const summary *S) {
    return S->n_params ? 8.0 * (double)S->bytes / (double)S->n_params : 0.0;
}

static int print_json(summary *S, bool kv, bool tensors) {
    const pb_gguf *g = S->g;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "file", S->path);
    cJSON_AddNumberToObject(root, "file_size", (double)pb_gguf_file_size(g));
    cJSON_AddNumberToObject(root, "version", pb_gguf_version(g));
    cJSON_AddNumberToObject(root, "alignment", (double)pb_gguf_alignment(g));
    cJSON_AddNumberToObject(root, "data_offset", (double)pb_gguf_data_offset(g));
    cJSON_AddBoolToObject(root, "llama_cpp_layout", pb_gguf_layout_contiguous(g));
    cJSON_AddStringToObject(root, "architecture", S->arch);
    cJSON_AddStringToObject(root, "name", S->name);
    if (S->has_ft) {
        cJSON *f = cJSON_AddObjectToObject(root, "file_type");
        cJSON_AddNumberToObject(f, "id", S->ft);
        cJSON_AddStringToObject(f, "name", cli_ftype_name(S->ft));
    }
    cJSON *hp = cJSON_AddObjectToObject(root, "hparams");
    for (int64_t i = 0; i < pb_gguf_n_kv(g); i++)
        if (is_hparam(S, i) && pb_gguf_kv_type(g, i) != PB_GGUF_ARRAY)
            cJSON_AddItemToObject(hp, pb_gguf_kv_key(g, i) + S->plen, json_value(g, i));
    cJSON *tk = cJSON_AddObjectToObject(root, "tokenizer");
    cJSON_AddStringToObject(tk, "model", S->tok_model);
    if (S->has_vocab) cJSON_AddNumberToObject(tk, "n_vocab", (double)S->n_vocab);
    for (size_t k = 0; k < sizeof tok_ids / sizeof tok_ids[0]; k++) {
        char key[64], jk[64];
        uint32_t id;
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", tok_ids[k]);
        snprintf(jk, sizeof jk, "%s_token_id", tok_ids[k]);
        if (pb_gguf_get_u32(g, key, &id) == PB_OK) cJSON_AddNumberToObject(tk, jk, id);
    }
    cJSON_AddBoolToObject(tk, "chat_template", pb_gguf_find_key(g, "tokenizer.chat_template") >= 0);
    cJSON_AddNumberToObject(root, "n_kv", (double)pb_gguf_n_kv(g));
    cJSON_AddNumberToObject(root, "n_tensors", (double)pb_gguf_n_tensors(g));
    cJSON_AddNumberToObject(root, "n_params", (double)S->n_params);
    cJSON_AddNumberToObject(root, "tensor_bytes", (double)S->bytes);
    cJSON_AddNumberToObject(root, "bits_per_weight", bits_per_weight(S));
    cJSON *ty = cJSON_AddObjectToObject(root, "tensor_types");
    for (int t = 0; t < PB_TYPE_COUNT; t++)
        if (S->per_type[t]) cJSON_AddNumberToObject(ty, pb_type_name(t), S->per_type[t]);
    cJSON *ck = cJSON_AddObjectToObject(root, "arch_check");
    cJSON_AddStringToObject(ck, "status", S->check_status);
    if (S->check_detail[0]) cJSON_AddStringToObject(ck, "detail", S->check_detail);
    cJSON_AddItemReferenceToObject(ck, "problems", S->pr.list);
    mem_refused = !cli_mem_json(S->path, &mem_opts, root);
    if (kv) {
        cJSON *kvo = cJSON_AddObjectToObject(root, "kv");
        for (int64_t i = 0; i < pb_gguf_n_kv(g); i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "type", pb_gguf_vtype_name(pb_gguf_kv_type(g, i)));
            cJSON_AddItemToObject(e, "value", json_value(g, i));
            cJSON_AddItemToObject(kvo, pb_gguf_kv_key(g, i), e);
        }
    }
    if (tensors) {
        cJSON *ta = cJSON_AddArrayToObject(root, "tensors");
        for (int64_t i = 0; i < pb_gguf_n_tensors(g); i++) {
            const pb_gguf_tensor *t = pb_gguf_tensor_at(g, i);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", t->name);
            cJSON_AddStringToObject(o, "type", pb_type_name(t->type));
            cJSON *sh = cJSON_AddArrayToObject(o, "shape");
            for (int d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->ne[d]));
            cJSON_AddNumberToObject(o, "bytes", (double)t->nbytes);
            cJSON_AddNumberToObject(o, "offset", (double)(pb_gguf_data_offset(g) + t->offset));
            cJSON_AddItemToArray(ta, o);
        }
    }
    if (!cli_json_print(root, true)) {
        cli_err("info", "out of memory printing JSON");
        return 1;
    }
    return 0;
}

static void print_check(const summary *S) {
    if (strcmp(S->check_status, "ok") == 0) {
        printf("arch check:    ok (every tensor %s needs is present with the right shape and a supported type)\n",
               S->arch);
    } else if (strcmp(S->check_status, "failed") == 0 && S->pr.n == 0) { /* the hyperparameters */
        printf("arch check:    FAILED (%s)\n", S->check_detail);
    } else if (strcmp(S->check_status, "failed") == 0) {
        printf("arch check:    FAILED (%d problems)\n", S->pr.n);
        for (int k = 0; k < cJSON_GetArraySize(S->pr.list); k++) {
            cJSON *o = cJSON_GetArrayItem(S->pr.list, k);
            printf("  %s: %s\n", cJSON_GetStringValue(cJSON_GetObjectItem(o, "tensor")),
                   cJSON_GetStringValue(cJSON_GetObjectItem(o, "problem")));
        }
    } else {
        printf("arch check:    skipped (%s)\n", S->check_detail);
    }
}

static void print_text(const summary *S, bool kv, bool tensors) {
    const pb_gguf *g = S->g;
    printf("file:          %s (%.2f MiB)\n", S->path, (double)pb_gguf_file_size(g) / (1 << 20));
    printf("format:        GGUF v%u, %lld keys, %lld tensors, alignment %zu, data at offset %zu%s\n",
           pb_gguf_version(g), (long long)pb_gguf_n_kv(g), (long long)pb_gguf_n_tensors(g), pb_gguf_alignment(g),
           pb_gguf_data_offset(g), pb_gguf_layout_contiguous(g) ? "" : " (not llama.cpp's contiguous layout)");
    printf("architecture:  %s\n", S->has_arch ? S->arch : "(general.architecture missing)");
    if (S->has_name) printf("name:          %s\n", S->name);
    if (S->has_ft) printf("file type:     %s (%u)\n", cli_ftype_name(S->ft), S->ft);
    printf("hyperparameters:\n");
    for (int64_t i = 0; i < pb_gguf_n_kv(g); i++) {
        if (!is_hparam(S, i)) continue;
        char val[1024];
        value_text(g, i, val, sizeof val);
        printf("  %-36s %s\n", pb_gguf_kv_key(g, i) + S->plen, val);
    }
    printf("tokenizer:     %s", S->has_tok_model ? S->tok_model : "(none)");
    if (S->has_vocab) printf(", %llu tokens", (unsigned long long)S->n_vocab);
    for (size_t k = 0; k < sizeof tok_ids / sizeof tok_ids[0]; k++) {
        char key[64];
        uint32_t id;
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", tok_ids[k]);
        if (pb_gguf_get_u32(g, key, &id) == PB_OK) printf(", %s %u", tok_ids[k], id);
    }
    printf("%s\n", pb_gguf_find_key(g, "tokenizer.chat_template") >= 0 ? ", chat template" : "");
    printf("parameters:    %lld (%.2f M)\n", (long long)S->n_params, (double)S->n_params / 1e6);
    printf("tensor data:   %zu bytes (%.2f MiB), %.3f bits per weight\n", S->bytes, (double)S->bytes / (1 << 20),
           bits_per_weight(S));
    printf("tensor types: ");
    for (int t = 0; t < PB_TYPE_COUNT; t++)
        if (S->per_type[t]) printf(" %s %d", pb_type_name(t), S->per_type[t]);
    printf("\n");
    mem_refused = !cli_mem_print(S->path, &mem_opts);
    print_check(S);
    if (kv) {
        printf("\nmetadata:\n");
        for (int64_t i = 0; i < pb_gguf_n_kv(g); i++) {
            char val[1024];
            value_text(g, i, val, sizeof val);
            printf("  %-44s %-8s %s\n", pb_gguf_kv_key(g, i), pb_gguf_vtype_name(pb_gguf_kv_type(g, i)), val);
        }
    }
    if (tensors) {
        printf("\n  %4s  %-44s %-8s %-22s %12s %12s\n", "#", "name", "type", "shape", "bytes", "offset");
        for (int64_t i = 0; i < pb_gguf_n_tensors(g); i++) {
            const pb_gguf_tensor *t = pb_gguf_tensor_at(g, i);
            char shape[96];
            shape_text(t, shape, sizeof shape);
            printf("  %4lld  %-44s %-8s %-22s %12zu %12zu\n", (long long)i, t->name, pb_type_name(t->type), shape,
                   t->nbytes, pb_gguf_data_offset(g) + (size_t)t->offset);
        }
    }
}

PB_CMD(info) {
    const char *path = NULL;
    bool json = false, kv = false, tensors = false;
    /* --mem -c N (memory estimate for a context size) is the engine room's: its branch goes before the
     * unknown-flag check below, its output where print_text/print_json say "memory". */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int mr = cli_mem_parse(&mem_opts, "info", usage, argc, argv, &i);
        if (mr == 2) return 2;
        if (mr == 1) continue;
#define FLAG(name, alias) (mr = cli_flag("info", usage, argc, argv, &i, name, alias, NULL))
        if (FLAG("--help", "-h") != 0) {
            if (mr < 0) return 2;
            printf("usage: %s\n", usage);
            return 0;
        } else if (FLAG("--json", NULL) != 0) {
            if (mr < 0) return 2;
            json = true;
        } else if (FLAG("--kv", NULL) != 0) {
            if (mr < 0) return 2;
            kv = true;
        } else if (FLAG("--tensors", NULL) != 0) {
            if (mr < 0) return 2;
            tensors = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("info", usage, "unknown flag '%s'", a);
        } else if (!path) {
            path = a;
        } else {
            return cli_usage_error("info", usage, "unexpected argument '%s' (one model file only)", a);
        }
#undef FLAG
    }
    if (!path) return cli_usage_error("info", usage, "missing MODEL.gguf");
    /* without --mem they changed nothing, and `info M -c 64` exited 0 as if it had */
    if (mem_opts.given && !mem_opts.on)
        return cli_usage_error("info", usage, "%s only applies to the memory estimate: add --mem", mem_opts.given);
    if (!(path = cli_model_arg("info", path))) return 1;

    pb_gguf *g;
    pb_status s = pb_gguf_open(path, &g);
    if (s) return cli_fail("info", s, "cannot read model");
    summary S;
    gather(g, path, &S);
    int rc = json ? print_json(&S, kv, tensors) : (print_text(&S, kv, tensors), 0);
    if (mem_refused) rc = 1;
    if (strcmp(S.check_status, "failed") == 0) {
        rc = 1;
        if (!json)
            cli_err("info", "'%s' does not pass the %s %s check", path, S.arch, S.pr.n ? "tensor" : "hyperparameter");
    }
    cJSON_Delete(S.pr.list);
    pb_gguf_close(g);
    return rc;
}
