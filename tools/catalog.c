/* catalog.c -- reads the pull catalog (JSON built in from models/catalog.json, or $PB_CATALOG) with cJSON.
 * Lookup and listing only; tools/cmd_pull.c decides what to download. */
#include "catalog.h"
#include "json/json.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

extern const char pb_catalog_json[]; /* generated from models/catalog.json by the Makefile */

/* The parsed catalog, or NULL with why filled. Caller deletes it. */
static cJSON *load(char *why, size_t cap) {
    const char *path = getenv("PB_CATALOG");
    char *text = NULL;
    size_t text_len = 0;
    if (path && *path) {
        FILE *f = fopen(path, "rb");
        long n = -1;
        if (f && fseek(f, 0, SEEK_END) == 0) n = ftell(f);
        if (!f || n < 0 || n > (16 << 20) || fseek(f, 0, SEEK_SET) != 0 || !(text = malloc((size_t)n + 1)) ||
            fread(text, 1, (size_t)n, f) != (size_t)n) {
            snprintf(why, cap, "cannot read the catalog '%s' ($PB_CATALOG)", path);
            if (f) fclose(f);
            free(text);
            return NULL;
        }
        fclose(f);
        text[n] = 0;
        text_len = (size_t)n;
    }
    const char *json = text ? text : pb_catalog_json;
    size_t at;
    bool trailing;
    cJSON *root = pb_json_parse_one(json, text ? text_len : strlen(json), &at, &trailing);
    free(text);
    if (trailing) {
        snprintf(why, cap, "the catalog%s%s is not valid JSON: more text after the JSON value (at byte %zu)",
                 path ? " " : "", path ? path : "", at);
        return NULL;
    }
    if (!root || !cJSON_IsArray(cJSON_GetObjectItem(root, "models"))) {
        snprintf(why, cap, "the catalog%s%s is not valid JSON with a \"models\" array", path ? " " : "",
                 path ? path : "");
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static const char *str(const cJSON *o, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, key));
    return s ? s : "";
}

static void lower(char *dst, const char *src, size_t cap) {
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++) dst[i] = (char)tolower((unsigned char)src[i]);
    dst[i] = 0;
}

int catalog_find(const char *ref, catalog_hit *out, char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    char name[128], quant[32] = "";
    const char *colon = strchr(ref, ':');
    size_t nl = colon ? (size_t)(colon - ref) : strlen(ref);
    if (nl == 0 || nl >= sizeof name || (colon && strlen(colon + 1) >= sizeof quant)) return 0;
    memcpy(name, ref, nl);
    name[nl] = 0;
    if (colon) lower(quant, colon + 1, sizeof quant);
    cJSON *root = load(why, cap);
    if (!root) return -1;
    int rc = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(root, "models")) {
        if (strcasecmp(str(m, "name"), name) != 0) continue;
        if (!quant[0]) lower(quant, str(m, "default"), sizeof quant);
        const cJSON *f;
        char have[512] = "";
        rc = -1;
        cJSON_ArrayForEach(f, cJSON_GetObjectItem(m, "files")) {
            size_t hl = strlen(have);
            snprintf(have + hl, sizeof have - hl, "%s%s", hl ? ", " : "", str(f, "quant"));
            if (rc == 1 || strcasecmp(str(f, "quant"), quant) != 0) continue;
            snprintf(out->name, sizeof out->name, "%s", str(m, "name"));
            lower(out->quant, str(f, "quant"), sizeof out->quant);
            snprintf(out->repo, sizeof out->repo, "%s", str(m, "repo"));
            snprintf(out->file, sizeof out->file, "%s", str(f, "file"));
            snprintf(out->size, sizeof out->size, "%s", str(f, "size"));
            lower(out->sha256, str(f, "sha256"), sizeof out->sha256);
            snprintf(out->license, sizeof out->license, "%s", str(m, "license"));
            rc = out->repo[0] && out->file[0] ? 1 : -1;
        }
        if (rc != 1) snprintf(why, cap, "the catalog has %s as %s, not as '%s'", name, have, quant);
        break;
    }
    cJSON_Delete(root);
    return rc;
}

bool catalog_print(FILE *fp, char *why, size_t cap) {
    cJSON *root = load(why, cap);
    if (!root) return false;
    fprintf(fp, "%-32s %-8s %-8s %s\n", "NAME", "SIZE", "SHA256", "SOURCE (hf repo / file)");
    const cJSON *m, *f;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(root, "models")) {
        cJSON_ArrayForEach(f, cJSON_GetObjectItem(m, "files")) {
            char ref[200], q[32];
            lower(q, str(f, "quant"), sizeof q);
            bool def = strcasecmp(q, str(m, "default")) == 0;
            snprintf(ref, sizeof ref, "%s:%s%s", str(m, "name"), q, def ? " *" : "");
            fprintf(fp, "%-32s %-8s %-8s %s/%s\n", ref, str(f, "size")[0] ? str(f, "size") : "?",
                    str(f, "sha256")[0] ? "pinned" : "hub", str(m, "repo"), str(f, "file"));
        }
        fprintf(fp, "  %s; license: %s\n", str(m, "description"), str(m, "license"));
    }
    fprintf(fp, "* = the default quantization (pull NAME). SHA256 'hub': checked against the digest the hub "
                "publishes.\n");
    cJSON_Delete(root);
    return true;
}
