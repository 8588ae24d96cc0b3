/* kb_bench.c -- knowledge-base benchmark (not a test): ingest throughput (MB/s) of synthetic Markdown whose
 * words are drawn from the evaluation corpus (each document from one man page, so topic words cluster as in
 * real text), then BM25 search latency p50/p95 over ~100k chunks with the evaluation questions as queries.
 * --search-only reuses the database of an earlier run in --dir. Usage:
 * kb_bench [--chunks N] [--queries N] [--dir TMPDIR] */
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CORPUS    "tests/data/kb/corpus"
#define QUESTIONS "tests/data/kb/questions.tsv"

/* ---- word lists of the corpus pages: each synthetic document draws its words from one page, so topic
 * words cluster as in real documents (the corpus's term statistics, scaled up) ---- */
typedef struct {
    char **w;
    int64_t n;
} page_words;

typedef struct {
    page_words *p;
    int n;
} corpus;

static void load_corpus(corpus *c) {
    FILE *ls = popen("ls " CORPUS "/*.md", "r");
    char path[1024];
    while (ls && fgets(path, sizeof path, ls)) {
        path[strcspn(path, "\n")] = 0;
        char *text;
        size_t len;
        if (pb_read_file(path, &text, &len)) continue;
        page_words pw = {NULL, 0};
        int64_t cap = 0;
        const char *sep = " \t\n\r.,;:()[]{}\"'`*<>|/=#";
        for (char *p = strtok(text, sep); p; p = strtok(NULL, sep)) {
            if (strlen(p) < 2 || strlen(p) > 24) continue;
            if (pw.n == cap) {
                cap = cap ? cap * 2 : 1024;
                pw.w = realloc(pw.w, (size_t)cap * sizeof *pw.w);
            }
            pw.w[pw.n++] = strdup(p);
        }
        free(text);
        if (pw.n < 50) continue;
        c->p = realloc(c->p, (size_t)(c->n + 1) * sizeof *c->p);
        c->p[c->n++] = pw;
    }
    if (ls) pclose(ls);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) { /* splitmix64: reproducible data */
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const char *sample(const page_words *p) { return p->w[next_u64() % (uint64_t)p->n]; }

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    long want_chunks = 100000, n_queries = 1000;
    const char *dir = "/tmp/pb_kb_bench";
    bool search_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--chunks") && i + 1 < argc)
            want_chunks = atol(argv[++i]);
        else if (!strcmp(argv[i], "--queries") && i + 1 < argc)
            n_queries = atol(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--search-only"))
            search_only = true;
        else {
            fprintf(stderr,
                    "usage: kb_bench [--chunks N] [--queries N] [--dir TMPDIR] [--search-only] (from the repo root)\n");
            return 2;
        }
    }
    corpus v = {0};
    load_corpus(&v);
    if (v.n == 0) {
        fprintf(stderr, "kb_bench: no words under %s (run from the repo root)\n", CORPUS);
        return 1;
    }
    char docs[1100], db[1100], cmd[1200];
    snprintf(docs, sizeof docs, "%s/docs", dir);
    snprintf(db, sizeof db, "%s/kb.sqlite", dir);
    pb_store *st;
    pb_ingest_stats is = {0};
    if (search_only) {
        if (access(db, F_OK) != 0 || pb_store_open(db, &st)) {
            fprintf(stderr, "kb_bench: no database from an earlier run at %s\n", db);
            return 1;
        }
        pb_store_query_int(st, "SELECT count(*) FROM chunks", &is.n_chunks);
        goto queries;
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, docs);
    if (system(cmd) != 0) return 1;
    /* Documents of 8 sections x 2 paragraphs x ~60 words: ~8-9 chunks of <= 200 estimated tokens each. */
    long n_docs = want_chunks / 8 + 1;
    size_t bytes = 0;
    double t0 = pb_time_ms();
    char *buf = malloc(1 << 16);
    for (long d = 0; d < n_docs; d++) {
        const page_words *pg = &v.p[next_u64() % (uint64_t)v.n];
        size_t o = (size_t)snprintf(buf, 1 << 16, "# Document %ld about %s\n\n", d, sample(pg));
        for (int s = 0; s < 8; s++) {
            o += (size_t)snprintf(buf + o, (1 << 16) - o, "## %s %s\n\n", sample(pg), sample(pg));
            for (int p = 0; p < 2; p++) {
                int words = 40 + (int)(next_u64() % 40);
                for (int w = 0; w < words; w++) o += (size_t)snprintf(buf + o, (1 << 16) - o, "%s ", sample(pg));
                buf[o - 1] = '.';
                o += (size_t)snprintf(buf + o, (1 << 16) - o, "\n\n");
            }
        }
        char path[1300];
        snprintf(path, sizeof path, "%s/d%03ld/%06ld.md", docs, d / 1000, d);
        if (d % 1000 == 0) {
            char sub[1200];
            snprintf(sub, sizeof sub, "%s/d%03ld", docs, d / 1000);
            mkdir(sub, 0755);
        }
        FILE *f = fopen(path, "wb");
        if (!f) {
            fprintf(stderr, "kb_bench: %s: %s\n", path, strerror(errno));
            return 1;
        }
        fwrite(buf, 1, o, f);
        fclose(f);
        bytes += o;
    }
    free(buf);
    printf("generated %ld documents, %.1f MB in %.1f s\n", n_docs, (double)bytes / 1e6, (pb_time_ms() - t0) / 1000);

    if (pb_store_open(db, &st)) {
        fprintf(stderr, "kb_bench: %s\n", pb_last_error());
        return 1;
    }
    pb_ingest_params ip = pb_ingest_default_params();
    const char *paths[] = {docs};
    double c0 = cpu_ms();
    if (pb_store_ingest(st, paths, 1, &ip, &is)) {
        fprintf(stderr, "kb_bench: ingest: %s\n", pb_last_error());
        return 1;
    }
    double c1 = cpu_ms();
    printf("ingest: %lld files, %lld chunks, %.1f MB in %.1f s wall = %.2f MB/s (%.1f s CPU = %.2f MB/s per core;"
           " on-disk WAL database, token counts estimated)\n",
           (long long)is.added, (long long)is.n_chunks, (double)is.bytes / 1e6, is.ms / 1000,
           (double)is.bytes / 1e6 / (is.ms / 1000), (c1 - c0) / 1000, (double)is.bytes / 1e6 / ((c1 - c0) / 1000));
    pb_ingest_stats is2;
    pb_store_ingest(st, paths, 1, &ip, &is2);
    printf("re-ingest (all unchanged, hashed): %.1f MB in %.1f s = %.1f MB/s\n", (double)is2.bytes / 1e6, is2.ms / 1000,
           (double)is2.bytes / 1e6 / (is2.ms / 1000));

queries:;
    /* queries: the evaluation questions, round robin */
    char *qs[512];
    int nq = 0;
    FILE *qf = fopen(QUESTIONS, "r");
    char line[2048];
    while (qf && nq < 512 && fgets(line, sizeof line, qf)) {
        if (line[0] == '#' || !strchr(line, '\t')) continue;
        line[strcspn(line, "\r\n")] = 0;
        qs[nq++] = strdup(strchr(line, '\t') + 1);
    }
    if (qf) fclose(qf);
    if (nq == 0) return 1;
    double *lat = malloc((size_t)n_queries * sizeof *lat), *cpu = malloc((size_t)n_queries * sizeof *cpu);
    int64_t total_hits = 0;
    for (int w = 0; w < 20; w++) { /* warm the page cache */
        pb_store_hit *h;
        int n;
        if (!pb_store_search_bm25(st, qs[w % nq], 5, 1, &h, &n)) pb_store_hits_free(h, n);
    }
    for (long i = 0; i < n_queries; i++) {
        pb_store_hit *h;
        int n;
        double t = pb_time_ms(), tc = cpu_ms();
        if (pb_store_search_bm25(st, qs[i % nq], 5, 1, &h, &n)) {
            fprintf(stderr, "kb_bench: search: %s\n", pb_last_error());
            return 1;
        }
        lat[i] = pb_time_ms() - t;
        cpu[i] = cpu_ms() - tc;
        total_hits += n;
        pb_store_hits_free(h, n);
    }
    qsort(lat, (size_t)n_queries, sizeof *lat, cmp_double);
    qsort(cpu, (size_t)n_queries, sizeof *cpu, cmp_double);
    double sum = 0;
    for (long i = 0; i < n_queries; i++) sum += lat[i];
    printf("search (BM25, k=5, one chunk per document) over %lld chunks, %ld queries: p50 %.2f ms, p95 %.2f ms,"
           " max %.2f ms, mean %.2f ms (%.1f hits/query)\n",
           (long long)is.n_chunks, n_queries, lat[n_queries / 2], lat[(n_queries * 95) / 100], lat[n_queries - 1],
           sum / (double)n_queries, (double)total_hits / (double)n_queries);
    printf("search CPU time per query: p50 %.2f ms, p95 %.2f ms (wall minus CPU = waiting for a core or the disk)\n",
           cpu[n_queries / 2], cpu[(n_queries * 95) / 100]);
    printf("target p95 < 50 ms (wall): %s\n", lat[(n_queries * 95) / 100] < 50 ? "met" : "NOT met");
    pb_store_close(st);
    free(lat);
    free(cpu);
    for (int i = 0; i < nq; i++) free(qs[i]);
    return 0;
}
