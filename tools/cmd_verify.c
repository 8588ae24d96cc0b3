/* cmd_verify.c -- `pocketbrain verify FILE|NAME [--sha256 HEX]`: streamed SHA-256 (OpenSSL EVP) + GGUF check; a
 * library name is checked against the digest its manifest recorded at pull time. */
#include "cli.h"
#include "gguf/gguf.h"
#include "library.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const usage =
    "pocketbrain verify FILE|NAME [--sha256 HEX] [--hash-only]\n"
    "  NAME          a model in the library (pocketbrain models): checked against the sha256 of its manifest\n"
    "  --sha256 HEX  expected SHA-256 (64 hex digits); the file must match it\n"
    "  --hash-only   only hash the file (for files that are not GGUF)\n"
    "prints the file's SHA-256 and checks the GGUF structure: header, metadata, tensor infos, every tensor's\n"
    "data inside the file. exit status: 0 ok, 1 mismatch / malformed / unreadable, 2 usage";

/* Streams the file through SHA-256 in 4 MiB reads (constant memory for multi-GB files). */
static int sha256_file(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_err("verify", "cannot open '%s': %s", path, strerror(errno));
        return 1;
    }
    struct stat st;
    double total = fstat(fileno(f), &st) == 0 ? (double)st.st_size : 0;
    size_t cap = 4u << 20;
    unsigned char *buf = malloc(cap);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int rc = 0;
    if (!buf || !ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        cli_err("verify", "cannot set up SHA-256 (out of memory?)");
        rc = 1;
    }
    cli_progress prog;
    cli_progress_init(&prog, "sha256");
    double done = 0;
    while (!rc) {
        size_t n = fread(buf, 1, cap, f);
        if (n > 0 && EVP_DigestUpdate(ctx, buf, n) != 1) rc = 1;
        done += (double)n;
        cli_progress_update(&prog, done, total);
        if (n < cap) {
            if (ferror(f)) {
                cli_err("verify", "cannot read '%s': %s", path, strerror(errno));
                rc = 1;
            }
            break;
        }
    }
    cli_progress_done(&prog);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (!rc && (EVP_DigestFinal_ex(ctx, md, &md_len) != 1 || md_len != 32)) {
        cli_err("verify", "SHA-256 failed");
        rc = 1;
    }
    if (!rc)
        for (unsigned i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(ctx);
    free(buf);
    fclose(f);
    return rc;
}

static bool is_hex64(const char *s) {
    if (strlen(s) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return true;
}

PB_CMD(verify) {
    const char *path = NULL, *want = NULL;
    bool hash_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r;
#define FLAG(name, alias, val) (r = cli_flag("verify", usage, argc, argv, &i, name, alias, val))
        if (FLAG("--help", "-h", NULL) != 0) {
            if (r < 0) return 2;
            printf("usage: %s\n", usage);
            return 0;
        } else if (FLAG("--sha256", NULL, &want) != 0) {
            if (r < 0) return 2;
            if (!is_hex64(want))
                return cli_usage_error("verify", usage, "--sha256 expects 64 hex digits, got '%s'", want);
        } else if (FLAG("--hash-only", NULL, NULL) != 0) {
            if (r < 0) return 2;
            hash_only = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("verify", usage, "unknown flag '%s'", a);
        } else if (!path) {
            path = a;
        } else {
            return cli_usage_error("verify", usage, "unexpected argument '%s' (one file only)", a);
        }
#undef FLAG
    }
    if (!path) return cli_usage_error("verify", usage, "missing FILE");

    struct stat st;
    lib_entry e;
    static char want_lib[65];
    if (lib_resolve(path, &e)) { /* a library name, or a catalog name as -m takes it */
        path = e.file;
        if (!want && e.sha256[0]) {
            snprintf(want_lib, sizeof want_lib, "%s", e.sha256);
            want = want_lib;
            printf("library: %s, expected sha256 from its manifest (%s)\n", e.name,
                   e.verified_by[0] ? e.verified_by : "recorded at pull time");
        }
    }
    if (stat(path, &st) != 0) {
        cli_err("verify", "cannot open '%s': %s", path, strerror(errno));
        return 1;
    }
    if (!S_ISREG(st.st_mode)) {
        cli_err("verify", "'%s' is not a regular file", path);
        return 1;
    }
    int rc = 0;
    /* structure first: it is fast (metadata only) and names the broken field */
    if (!hash_only) {
        pb_gguf *g;
        pb_status s = pb_gguf_open(path, &g);
        if (s) {
            printf("gguf:   MALFORMED: %s\n", pb_last_error());
            cli_fail("verify", s, "GGUF structure check failed");
            if (strstr(pb_last_error(), "bad magic"))
                cli_err("verify", "'%s' is not a GGUF file; use --hash-only to only hash it", path);
            rc = 1;
        } else {
            size_t bytes = 0;
            for (int64_t i = 0; i < pb_gguf_n_tensors(g); i++) bytes += pb_gguf_tensor_at(g, i)->nbytes;
            printf("gguf:   ok: v%u, %lld keys, %lld tensors, %zu bytes of tensor data inside the file%s\n",
                   pb_gguf_version(g), (long long)pb_gguf_n_kv(g), (long long)pb_gguf_n_tensors(g), bytes,
                   pb_gguf_layout_contiguous(g) ? "" : " (offsets not in llama.cpp's contiguous layout)");
            pb_gguf_close(g);
        }
    }
    char hex[65] = {0};
    if (sha256_file(path, hex)) return 1;
    printf("sha256: %s  %s\n", hex, path);
    if (want) {
        char low[65];
        for (int i = 0; i < 64; i++) low[i] = (char)tolower((unsigned char)want[i]);
        low[64] = 0;
        if (strcmp(low, hex) == 0) {
            printf("sha256: matches the expected value\n");
        } else {
            printf("sha256: MISMATCH (expected %s)\n", low);
            cli_err("verify", "'%s': SHA-256 mismatch (got %s, expected %s)", path, hex, low);
            rc = 1;
        }
    }
    return rc;
}
