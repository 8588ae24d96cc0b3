/* itest_store.c -- knowledge-base store tests on an in-memory and an on-disk database: schema migration,
 * re-ingest after edit/delete, kill -9 crash safety, malformed input, extraction, chunking, safe queries,
 * prompt/citation building and the FAQ fallback. */
#include "pb_test.h"
#include "store/store.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

static void write_file(const char *rel, const void *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    FILE *f = fopen(path, "wb");
    if (!f) {
        printf("not ok - cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    fwrite(data, 1, n, f);
    fclose(f);
}
static void write_str(const char *rel, const char *s) { write_file(rel, s, strlen(s)); }

static char *path_of(const char *rel) {
    static char buf[4][512];
    static int slot;
    char *p = buf[slot++ & 3];
    snprintf(p, 512, "%s/%s", tmpdir, rel);
    return p;
}

/* A small valid PDF with one text line per page (xref offsets computed). */
static size_t make_pdf(char *out, size_t cap, const char *const *pages, int n_pages) {
    size_t off[32], o = 0;
    int n_obj = 4 + 2 * n_pages; /* 0 free, 1 catalog, 2 pages, 2 per page, font */
    o += (size_t)snprintf(out + o, cap - o, "%%PDF-1.4\n");
    off[1] = o;
    o += (size_t)snprintf(out + o, cap - o, "1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n");
    off[2] = o;
    o += (size_t)snprintf(out + o, cap - o, "2 0 obj << /Type /Pages /Kids [");
    for (int i = 0; i < n_pages; i++) o += (size_t)snprintf(out + o, cap - o, "%d 0 R ", 3 + 2 * i);
    o += (size_t)snprintf(out + o, cap - o, "] /Count %d >> endobj\n", n_pages);
    int font = n_obj - 1;
    for (int i = 0; i < n_pages; i++) {
        char content[512];
        int cl = snprintf(content, sizeof content, "BT /F1 18 Tf 72 700 Td (%s) Tj ET", pages[i]);
        off[3 + 2 * i] = o;
        o += (size_t)snprintf(out + o, cap - o,
                              "%d 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
                              " /Resources << /Font << /F1 %d 0 R >> >> >> endobj\n",
                              3 + 2 * i, 4 + 2 * i, font);
        off[4 + 2 * i] = o;
        o += (size_t)snprintf(out + o, cap - o, "%d 0 obj << /Length %d >> stream\n%s\nendstream endobj\n", 4 + 2 * i,
                              cl, content);
    }
    off[font] = o;
    o += (size_t)snprintf(out + o, cap - o, "%d 0 obj << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> endobj\n",
                          font);
    size_t xref = o;
    o += (size_t)snprintf(out + o, cap - o, "xref\n0 %d\n0000000000 65535 f \n", n_obj);
    for (int i = 1; i < n_obj; i++) o += (size_t)snprintf(out + o, cap - o, "%010zu 00000 n \n", off[i]);
    o += (size_t)snprintf(out + o, cap - o, "trailer << /Size %d /Root 1 0 R >>\nstartxref\n%zu\n%%%%EOF\n", n_obj,
                          xref);
    return o;
}

/* ---- events captured from ingest ---- */
typedef struct {
    char skipped[16][512];
    int n_skipped, n_removed;
    int sleep_us; /* crash test: slow the child down so that the kill lands mid-ingest */
} events;

static void on_event(void *user, pb_ingest_event ev, const char *path, const char *detail, size_t done, size_t total) {
    events *e = user;
    if (ev == PB_INGEST_SKIPPED && e->n_skipped < 16) {
        const char *slash = strrchr(path, '/');
        snprintf(e->skipped[e->n_skipped++], 512, "%s: %s", slash ? slash + 1 : path, detail ? detail : "");
    }
    if (ev == PB_INGEST_REMOVED) e->n_removed++;
    if (ev == PB_INGEST_PROGRESS && e->sleep_us) usleep((useconds_t)e->sleep_us);
}

static bool skipped_with(const events *e, const char *file, const char *words) {
    for (int i = 0; i < e->n_skipped; i++)
        if (strncmp(e->skipped[i], file, strlen(file)) == 0 && strstr(e->skipped[i], words)) return true;
    return false;
}

static int64_t count_q(pb_store *st, const char *sql) {
    int64_t v = -1;
    if (pb_store_query_int(st, sql, &v)) NOTE("query failed: %s", pb_last_error());
    return v;
}

static int search_n(pb_store *st, const char *q, char *top_path, size_t cap) {
    pb_store_hit *h;
    int n;
    if (pb_store_search_bm25(st, q, 5, 0, &h, &n)) {
        NOTE("search '%s' failed: %s", q, pb_last_error());
        return -1;
    }
    if (top_path && cap) {
        top_path[0] = 0;
        if (n) snprintf(top_path, cap, "%s", strrchr(h[0].path, '/') ? strrchr(h[0].path, '/') + 1 : h[0].path);
    }
    pb_store_hits_free(h, n);
    return n;
}

/* ---- migration -------------------------------------------------------------------------------- */

static void test_migration(const char *dbpath, const char *label) {
    pb_store *st;
    CHECK(pb_store_open_at_version(dbpath, 1, &st) == PB_OK, "%s: create schema v1", label);
    if (!st) return;
    CHECK(pb_store_schema_version(st) == 1, "%s: user_version 1", label);
    CHECK(pb_store_exec(st, "INSERT INTO documents(id, path, hash, mtime, size) VALUES (1, '/old/wombat.txt',"
                            " 'abc', 5, 10);"
                            "INSERT INTO chunks(doc_id, seq, byte_start, byte_end, text) VALUES (1, 0, 0, 40,"
                            " 'Wombats dig burrows with their strong claws');") == PB_OK,
          "%s: v1 rows written", label);
    bool is_disk = strcmp(dbpath, ":memory:") != 0;
    if (is_disk) { /* the real path: an old file opened by a newer build */
        pb_store_close(st);
        CHECK(pb_store_open(dbpath, &st) == PB_OK, "%s: reopen migrates (%s)", label, pb_last_error());
        if (!st) return;
    } else {
        CHECK(pb_store_migrate(st) == PB_OK, "%s: migrate in place (%s)", label, pb_last_error());
    }
    CHECK(pb_store_schema_version(st) == PB_STORE_SCHEMA_VERSION, "%s: now at version %d", label,
          PB_STORE_SCHEMA_VERSION);
    CHECK(count_q(st, "PRAGMA user_version") == PB_STORE_SCHEMA_VERSION, "%s: PRAGMA user_version updated", label);
    CHECK(count_q(st, "SELECT count(*) FROM chunks") == 1, "%s: v1 chunk kept", label);
    char top[256];
    /* 'digging' only matches 'dig' through the porter stemmer that version 2 added: the FTS was rebuilt */
    CHECK(search_n(st, "digging wombat", top, sizeof top) == 1 && strcmp(top, "wombat.txt") == 0,
          "%s: migrated chunk found through the rebuilt (stemmed) FTS index", label);
    CHECK(count_q(st, "SELECT count(*) FROM documents WHERE hash = ''") == 1, "%s: v1 document marked for re-chunking",
          label);
    CHECK(count_q(st, "SELECT count(*) FROM faq") == 0, "%s: v3 faq table exists", label);
    bool ok;
    char msg[256];
    CHECK(pb_store_integrity(st, &ok, msg, sizeof msg) == PB_OK && ok, "%s: integrity after migration", label);
    pb_store_close(st);
}

static void test_open_errors(void) {
    pb_store *st;
    write_str("notadb.sqlite", "this is a text file, not a database at all, long enough to have a header....");
    pb_status s = pb_store_open(path_of("notadb.sqlite"), &st);
    CHECK(s == PB_ERR_FORMAT && strstr(pb_last_error(), "not a"), "text file as --db -> PB_ERR_FORMAT (%s)",
          pb_last_error());
    CHECK(pb_store_open(path_of("future.sqlite"), &st) == PB_OK, "create future.sqlite");
    pb_store_exec(st, "PRAGMA user_version = 99");
    pb_store_close(st);
    s = pb_store_open(path_of("future.sqlite"), &st);
    CHECK(s == PB_ERR_UNSUPPORTED && strstr(pb_last_error(), "99"), "newer schema refused (%s)", pb_last_error());
}

/* ---- extraction and chunking -------------------------------------------------------------------- */

static void test_html(void) {
    const char *html = "<!DOCTYPE html><html><head><title>Caf&eacute; &amp; Tea</title>"
                       "<style>body{color:red}</style><script>document.write('<p>evil</p>')</script></head>"
                       "<body><h1>Menu</h1><p>Espresso&nbsp;costs 2&euro; &lt;cheap&gt; &#x263A; &#65;</p>"
                       "<!-- <p>commented</p> --><h2>Hours</h2><ul><li>Mon</li><li>Tue</li></ul>"
                       "<p>unterminated <b attr='a>b'>bold</b> 3 < 4</p><h3>Broken";
    pb_extracted e;
    CHECK(pb_store_html_to_text(html, strlen(html), &e) == PB_OK, "html: stripped");
    CHECK(strcmp(e.title, "Caf\xc3\xa9 & Tea") == 0, "html: title with entities '%s'", e.title);
    CHECK(!strstr(e.text, "evil") && !strstr(e.text, "color") && !strstr(e.text, "commented"),
          "html: script/style/comments dropped");
    CHECK(strstr(e.text, "Espresso costs 2\xe2\x82\xac <cheap> \xe2\x98\xba A") != NULL, "html: entities decoded");
    CHECK(strstr(e.text, "# Menu") && strstr(e.text, "## Hours"), "html: headings become # lines");
    CHECK(strstr(e.text, "- Mon\n- Tue") != NULL, "html: list items on their own lines");
    CHECK(strstr(e.text, "bold 3 < 4") != NULL, "html: quoted '>' in attribute and a bare '<' survive");
    bool map_ok = e.src_off != NULL;
    const char *esp = strstr(e.text, "Espresso");
    if (map_ok && esp) map_ok = strncmp(html + e.src_off[esp - e.text], "Espresso", 8) == 0;
    CHECK(map_ok, "html: source map points back at the source bytes");
    pb_store_chunk *c;
    int64_t n;
    CHECK(pb_store_chunk_doc(&e, e.title, NULL, &c, &n) == PB_OK && n >= 2, "html: chunked (%lld)", (long long)n);
    bool hp = false;
    for (int64_t i = 0; i < n; i++) hp |= strcmp(c[i].heading, "Caf\xc3\xa9 & Tea > Menu > Hours") == 0;
    CHECK(hp, "html: heading path Title > Menu > Hours");
    pb_store_chunks_free(c, n);
    pb_store_extracted_free(&e);
}

static void test_chunking(void) {
    /* Markdown with a long section: splits at paragraphs with overlap; lines and headings tracked. */
    char md[20000];
    size_t o = (size_t)snprintf(md, sizeof md, "# Handbook\n\nIntro line.\n\n## Long section\n\n");
    for (int p = 0; p < 30; p++)
        o +=
            (size_t)snprintf(md + o, sizeof md - o,
                             "Paragraph %d talks about topic%d with several words to fill the chunk nicely.\n\n", p, p);
    o += (size_t)snprintf(md + o, sizeof md - o, "```\n# not a heading inside a fence\n```\n\n### Deep\n\nEnd.\n");
    pb_extracted e;
    CHECK(pb_store_extract("x.md", PB_DOC_MARKDOWN, (const uint8_t *)md, o, &e) == PB_OK, "md: extracted");
    CHECK(strcmp(e.title, "Handbook") == 0, "md: title from first heading");
    pb_chunk_params p = pb_chunk_default_params();
    p.target_tokens = 60;
    p.overlap_tokens = 12;
    pb_store_chunk *c;
    int64_t n;
    CHECK(pb_store_chunk_doc(&e, e.title, &p, &c, &n) == PB_OK, "md: chunked");
    bool sizes = true, overlap = false, lines = true, fence = true;
    for (int64_t i = 0; i < n; i++) {
        sizes &= c[i].n_tokens <= p.target_tokens + 20;
        if (i > 0 && c[i].byte_start < c[i - 1].byte_end && strcmp(c[i].heading, c[i - 1].heading) == 0) overlap = true;
        /* line numbers agree with the bytes */
        int64_t l = 1;
        for (size_t k = 0; k < c[i].byte_start; k++) l += md[k] == '\n';
        lines &= l == c[i].line_start && c[i].line_end >= c[i].line_start;
        lines &= strncmp(md + c[i].byte_start, c[i].text, strlen(c[i].text)) == 0;
        fence &= strstr(c[i].heading, "not a heading") == NULL;
    }
    CHECK(n >= 8, "md: long section split (%lld chunks)", (long long)n);
    CHECK(sizes, "md: chunks stay near the token target");
    CHECK(overlap, "md: consecutive chunks of a section overlap");
    CHECK(lines, "md: byte offsets and line numbers match the source");
    CHECK(fence, "md: '#' inside a code fence is not a heading");
    CHECK(strcmp(c[n - 1].heading, "Handbook > Long section > Deep") == 0, "md: heading path '%s'", c[n - 1].heading);
    CHECK(strcmp(c[1].heading, "Handbook > Long section") == 0, "md: heading path does not repeat the title");
    pb_store_chunks_free(c, n);
    pb_store_extracted_free(&e);
    CHECK(pb_store_estimate_tokens("one two  three\n four", 20) == 6, "estimate: ceil(4 words * 1.3) = 6");
    CHECK(pb_store_estimate_tokens("", 0) == 0, "estimate: empty = 0");
}

/* A counter that adds up the bytes it is asked to count (the default estimate underneath). */
static int64_t count_bytes(void *user, const char *t, size_t n) {
    *(uint64_t *)user += n;
    return pb_store_estimate_tokens(t, n);
}

/* A paragraph without sentence ends (a one-line log, minified text) is split in time linear in its length: the
 * search for each piece's end counted to the end of the paragraph, so a 19 MB one-line file took over ten minutes
 * to ingest. The bytes handed to the counter now stay a bounded multiple of the text's length. */
static void test_chunk_one_line(void) {
    const int n_words = 400000;
    size_t cap = (size_t)n_words * 8 + 1, o = 0;
    char *txt = malloc(cap);
    if (!txt) {
        CHECK(0, "one line: out of memory");
        return;
    }
    for (int i = 0; i < n_words; i++) o += (size_t)snprintf(txt + o, cap - o, "w%d ", i % 9973);
    pb_extracted e;
    CHECK(pb_store_extract("log.txt", PB_DOC_TEXT, (const uint8_t *)txt, o, &e) == PB_OK, "one line: extracted");
    pb_chunk_params p = pb_chunk_default_params();
    uint64_t counted = 0;
    p.count = count_bytes;
    p.count_user = &counted;
    pb_store_chunk *c;
    int64_t n;
    CHECK(pb_store_chunk_doc(&e, e.title, &p, &c, &n) == PB_OK && n > 1000, "one line: chunked (%lld chunks)",
          (long long)n);
    bool sizes = true, covered = true;
    for (int64_t i = 0; i < n; i++) {
        sizes &= c[i].n_tokens <= p.target_tokens + p.overlap_tokens; /* a piece plus the overlap before it */
        if (i > 0) covered &= c[i].byte_start <= c[i - 1].byte_end;   /* no gap between consecutive chunks */
    }
    covered &= n > 0 && c[0].byte_start == 0 && c[n - 1].byte_end + 1 >= o;
    CHECK(sizes, "one line: every chunk within the token target");
    CHECK(covered, "one line: the chunks cover the whole text");
    CHECK(counted < (uint64_t)o * 400, "one line: %.0f bytes counted per byte of text (linear: under 400)",
          (double)counted / (double)o);
    pb_store_chunks_free(c, n);
    pb_store_extracted_free(&e);
    free(txt);
}

/* Text without spaces between words (Chinese, Japanese): every CJK character counts as a word of its own, so such a
 * paragraph is cut into pieces within the token target, at character boundaries, sentence ends (。) first; counted by
 * whitespace it was one "word" of 2 tokens and one chunk of the whole page. */
static void test_chunk_cjk(void) {
    const char *sent = "\xE6\x88\x91\xE4\xBB\xAC\xE4\xBB\x8A\xE5\xA4\xA9\xE5\xAD\xA6\xE4\xB9\xA0"
                       "\xE4\xB8\xAD\xE6\x96\x87"; /* 我们今天学习中文: 8 characters */
    for (int stops = 0; stops < 2; stops++) {
        size_t cap = 400 * 32 + 1, o = 0;
        char *txt = malloc(cap);
        if (!txt) {
            CHECK(0, "cjk: out of memory");
            return;
        }
        for (int i = 0; i < 400; i++) { /* 3,200 characters in one paragraph, with or without full stops */
            o += (size_t)snprintf(txt + o, cap - o, "%s%s", sent, stops ? "\xE3\x80\x82" : "");
        }
        CHECK(pb_store_estimate_tokens(sent, strlen(sent)) == 8, "cjk: 8 characters estimated as 8 tokens (%lld)",
              (long long)pb_store_estimate_tokens(sent, strlen(sent)));
        pb_extracted e;
        CHECK(pb_store_extract("zh.txt", PB_DOC_TEXT, (const uint8_t *)txt, o, &e) == PB_OK, "cjk: extracted");
        pb_chunk_params p = pb_chunk_default_params();
        pb_store_chunk *c;
        int64_t n;
        CHECK(pb_store_chunk_doc(&e, e.title, &p, &c, &n) == PB_OK && n >= 16,
              "cjk%s: 3,200 characters in %lld chunks (at least 16)", stops ? " with full stops" : "", (long long)n);
        bool sizes = true, whole = true, covered = true;
        for (int64_t i = 0; i < n; i++) {
            sizes &= c[i].n_tokens <= p.target_tokens + p.overlap_tokens;
            /* every character of this text is 3 bytes long */
            whole &= c[i].text && ((unsigned char)c[i].text[0] & 0xC0) != 0x80 && c[i].byte_start % 3 == 0 &&
                     c[i].byte_end % 3 == 0;
            if (i > 0) covered &= c[i].byte_start <= c[i - 1].byte_end;
        }
        covered &= n > 0 && c[0].byte_start == 0 && c[n - 1].byte_end + 1 >= o;
        CHECK(sizes, "cjk%s: every chunk within the token target", stops ? " with full stops" : "");
        CHECK(whole, "cjk%s: chunks start and end at character boundaries", stops ? " with full stops" : "");
        CHECK(covered, "cjk%s: the chunks cover the whole text", stops ? " with full stops" : "");
        pb_store_chunks_free(c, n);
        pb_store_extracted_free(&e);
        free(txt);
    }
}

static void test_query_safety(pb_store *st) {
    const char *evil[] = {"\"unbalanced",
                          "NEAR(a b)",
                          "title:secret",
                          "a* OR ^b",
                          "AND OR NOT",
                          "(((",
                          "col : - + {}",
                          "x\" OR \"y",
                          "\xe2\x80\x9cquoted\xe2\x80\x9d",
                          "-"};
    for (size_t i = 0; i < sizeof evil / sizeof evil[0]; i++) {
        pb_store_hit *h;
        int n;
        pb_status s = pb_store_search_bm25(st, evil[i], 5, 0, &h, &n);
        CHECK(s == PB_OK, "fts: user text '%s' is never FTS5 syntax (%s)", evil[i], s ? pb_last_error() : "ok");
        if (!s) pb_store_hits_free(h, n);
    }
    char q[256];
    int nt;
    pb_store_fts_query("How do I use NEAR(\"x\") and col:val?", q, sizeof q, &nt);
    CHECK(strcmp(q, "\"near\" OR \"x\" OR \"col\" OR \"val\"") == 0 && nt == 4, "fts: query '%s'", q);
    pb_store_fts_query("the of and", q, sizeof q, &nt);
    CHECK(nt == 3, "fts: only stop words -> they are kept (%d terms)", nt);
    /* CJK runs become overlapping pairs (the index has a token per character); punctuation separates them */
    pb_store_fts_query("学习中文。カナ、日 Café汉字test", q, sizeof q, &nt);
    const char *want = "\"学习\" OR \"习中\" OR \"中文\" OR \"カナ\" OR \"日\" OR \"café\" OR \"汉字\" OR \"test\"";
    CHECK(strcmp(q, want) == 0 && nt == 8, "fts: CJK query '%s'", q);
}

/* ---- ingest: edit, delete, malformed, PDF --------------------------------------------------------- */

static void test_reingest(pb_store *st, const char *label) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/docs_%s", tmpdir, label);
    mkdir(dir, 0755);
    char rel[600];
#define DOC(name) (snprintf(rel, sizeof rel, "docs_%s/%s", label, name), rel)
    write_str(DOC("alpha.md"), "# Alpha\n\nThe platypus lays eggs.\n\n## More\n\nIt lives in Australia.\n");
    write_str(DOC("beta.txt"), "Beta notes: the narwhal has a long tusk.\n");
    write_str(DOC("gamma.html"), "<html><title>Gamma</title><body><p>The axolotl regrows limbs.</p></body></html>");
    char pdf[4096];
    const char *pages[] = {"Page one mentions the pangolin", "Page two mentions the okapi"};
    size_t pl = make_pdf(pdf, sizeof pdf, pages, 2);
    write_file(DOC("delta.pdf"), pdf, pl);
    /* malformed: binary with NUL, bad UTF-8, damaged PDF, HTML that is binary, empty */
    unsigned char bin[256];
    for (int i = 0; i < 256; i++) bin[i] = (unsigned char)(i * 7);
    write_file(DOC("bin.txt"), bin, sizeof bin);
    write_str(DOC("latin1.md"), "caf\xe9 au lait\n"); /* not UTF-8: converted from Windows-1252 */
    write_str(DOC("bogus.html"), "<meta charset=\"x-no-such\"><p>caf\xe9</p>"); /* a charset iconv lacks */
    write_str(DOC("broken.pdf"), "%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >>\ngarbage without xref\n");
    write_file(DOC("nul.html"), "<html>\0<body>x</body>", 21);
    write_str(DOC("empty.txt"), "");
    write_str(DOC("ignored.bin"), "not a document extension: walked past");
    events ev = {0};
    pb_ingest_params p = pb_ingest_default_params();
    p.on_event = on_event;
    p.user = &ev;
    pb_ingest_stats s1;
    const char *paths[] = {dir};
    CHECK(pb_store_ingest(st, paths, 1, &p, &s1) == PB_OK, "%s: ingest ok (%s)", label, pb_last_error());
    CHECK(s1.added == 5 && s1.skipped == 5, "%s: 5 added, 5 skipped (got %lld, %lld)", label, (long long)s1.added,
          (long long)s1.skipped);
    for (int i = 0; i < ev.n_skipped; i++) NOTE("%s", ev.skipped[i]);
    CHECK(skipped_with(&ev, "bin.txt", "binary"), "%s: binary file skipped with a clear message", label);
    CHECK(skipped_with(&ev, "bogus.html", "charset 'x-no-such' is unknown"), "%s: unknown declared charset named",
          label);
    CHECK(skipped_with(&ev, "broken.pdf", "PDF"), "%s: malformed PDF skipped with poppler's reason", label);
    CHECK(skipped_with(&ev, "nul.html", "NUL byte at offset 6"), "%s: malformed HTML skipped", label);
    CHECK(skipped_with(&ev, "empty.txt", "empty"), "%s: empty file skipped", label);
    char top[256];
    CHECK(search_n(st, "café", top, sizeof top) == 1 && strcmp(top, "latin1.md") == 0,
          "%s: Latin-1 text converted to UTF-8 and searchable", label);
    CHECK(search_n(st, "okapi", top, sizeof top) == 1 && strcmp(top, "delta.pdf") == 0, "%s: PDF text searchable",
          label);
    pb_store_hit *h;
    int n;
    pb_store_search_bm25(st, "okapi", 1, 0, &h, &n);
    CHECK(n == 1 && h[0].page == 2, "%s: PDF hit on page 2 (%d)", label, n ? h[0].page : -1);
    pb_store_hits_free(h, n);
    pb_store_search_bm25(st, "Australia", 1, 0, &h, &n);
    CHECK(n == 1 && h[0].line_start == 5 && strcmp(h[0].heading, "Alpha > More") == 0,
          "%s: markdown hit at line 5 under 'Alpha > More'", label);
    pb_store_hits_free(h, n);

    /* unchanged re-run */
    pb_ingest_stats s2;
    ev.n_skipped = 0;
    pb_store_ingest(st, paths, 1, &p, &s2);
    CHECK(s2.unchanged == 5 && s2.added == 0 && s2.updated == 0, "%s: re-run skips unchanged files by hash", label);
    /* edit one, delete one */
    write_str(DOC("beta.txt"), "Beta notes, edited: the narwhal is now a dugong.\n");
    remove(path_of(DOC("gamma.html")));
    pb_ingest_stats s3;
    pb_store_ingest(st, paths, 1, &p, &s3);
    CHECK(s3.updated == 1 && s3.unchanged == 3 && s3.removed == 0, "%s: edit -> 1 updated (no prune: nothing removed)",
          label);
    CHECK(search_n(st, "dugong", top, sizeof top) == 1 && strcmp(top, "beta.txt") == 0, "%s: edited text found", label);
    CHECK(search_n(st, "tusk", NULL, 0) == 0, "%s: old text of the edited file gone", label);
    CHECK(search_n(st, "axolotl", NULL, 0) == 1, "%s: deleted file still there without --prune", label);
    p.prune = true;
    ev.n_removed = 0;
    pb_ingest_stats s4;
    pb_store_ingest(st, paths, 1, &p, &s4);
    CHECK(s4.removed == 1 && ev.n_removed == 1, "%s: --prune removes the deleted file", label);
    CHECK(search_n(st, "axolotl", NULL, 0) == 0, "%s: deleted file's chunks gone from FTS", label);
    CHECK(count_q(st, "SELECT count(*) FROM documents") == 4, "%s: 4 documents left", label);
    CHECK(count_q(st, "SELECT count(*) FROM chunks WHERE doc_id NOT IN (SELECT id FROM documents)") == 0,
          "%s: no orphan chunks", label);
    CHECK(pb_store_exec(st, "INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')") == PB_OK,
          "%s: FTS index consistent with chunks", label);
    /* a named file that is gone, with --prune: its document is removed */
    remove(path_of(DOC("beta.txt")));
    const char *gone[] = {path_of(DOC("beta.txt"))};
    pb_ingest_stats s5;
    pb_store_ingest(st, gone, 1, &p, &s5);
    CHECK(s5.removed == 1 && count_q(st, "SELECT count(*) FROM documents") == 3, "%s: prune of a named gone file",
          label);
    test_query_safety(st);
#undef DOC
}

/* ---- crash safety --------------------------------------------------------------------------------- */

static void test_crash(void) {
    const int N = 600;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/many", tmpdir);
    mkdir(dir, 0755);
    for (int i = 0; i < N; i++) {
        char rel[64], body[4096];
        size_t o = (size_t)snprintf(body, sizeof body, "# Note %d\n\n", i);
        for (int k = 0; k < 30; k++)
            o += (size_t)snprintf(body + o, sizeof body - o, "Line %d of note %d about item%d and item%d.\n", k, i, i,
                                  (i * 31 + k) % 997);
        snprintf(rel, sizeof rel, "many/n%04d.md", i);
        write_file(rel, body, o);
    }
    const char *db = path_of("crash.sqlite");
    char ready[1024];
    snprintf(ready, sizeof ready, "%s.ready", db);
    unlink(ready);
    const char *paths[] = {dir};
    pid_t pid = fork();
    if (pid == 0) {
        pb_store *st;
        if (pb_store_open(db, &st)) _exit(2);
        /* the parent reads the database only once it exists with its schema (opening it while this process
         * creates it could make this open fail, or the parent's) */
        FILE *rf = fopen(ready, "w");
        if (rf) fclose(rf);
        events ev = {0};
        ev.sleep_us = 2000;
        pb_ingest_params p = pb_ingest_default_params();
        p.batch_files = 7; /* many small transactions: the kill lands between or inside them */
        p.on_event = on_event;
        p.user = &ev;
        pb_ingest_stats s;
        pb_store_ingest(st, paths, 1, &p, &s);
        pb_store_close(st);
        _exit(0);
    }
    /* wait until some batches are committed, then kill -9 */
    int64_t seen = 0;
    for (int t = 0; t < 5000 && seen < 50; t++) {
        usleep(2000);
        pb_store *ro;
        if (access(ready, F_OK) == 0 && pb_store_open(db, &ro) == PB_OK) {
            pb_store_query_int(ro, "SELECT count(*) FROM documents", &seen);
            pb_store_close(ro);
        }
    }
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "crash: child killed by SIGKILL mid-ingest");
    pb_store *st;
    CHECK(pb_store_open(db, &st) == PB_OK, "crash: database opens after kill -9 (%s)", pb_last_error());
    if (!st) return;
    bool ok;
    char msg[256];
    CHECK(pb_store_integrity(st, &ok, msg, sizeof msg) == PB_OK && ok, "crash: PRAGMA integrity_check = %s", msg);
    int64_t docs = count_q(st, "SELECT count(*) FROM documents");
    NOTE("crash: %lld of %d documents committed when killed", (long long)docs, N);
    CHECK(docs > 0 && docs < N, "crash: killed mid-ingest (%lld of %d committed)", (long long)docs, N);
    CHECK(count_q(st, "SELECT count(*) FROM documents d WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.doc_id ="
                      " d.id)") == 0,
          "crash: no document without its chunks");
    CHECK(pb_store_exec(st, "INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')") == PB_OK,
          "crash: FTS index consistent");
    pb_ingest_stats s;
    pb_ingest_params p = pb_ingest_default_params();
    CHECK(pb_store_ingest(st, paths, 1, &p, &s) == PB_OK, "crash: re-run completes");
    CHECK(s.unchanged == docs && s.added == N - docs, "crash: re-run resumes (%lld unchanged, %lld added)",
          (long long)s.unchanged, (long long)s.added);
    CHECK(count_q(st, "SELECT count(*) FROM documents") == N, "crash: right document count %d", N);
    CHECK(search_n(st, "item599", NULL, 0) >= 1, "crash: the last file is searchable");
    pb_store_close(st);
}

/* ---- prompt + citations ---------------------------------------------------------------------------- */

static void test_prompt(void) {
    pb_store_hit hits[3];
    memset(hits, 0, sizeof hits);
    const char *texts[] = {"The quokka lives on Rottnest Island.", "Quokkas are marsupials about cat sized.",
                           "A very long third source. "};
    char long_text[8000] = {0};
    for (int i = 0; i < 200; i++) strcat(long_text, "filler words here ");
    for (int i = 0; i < 3; i++) {
        hits[i].chunk_id = 10 + i;
        hits[i].path = (char *)(i == 0 ? "/kb/island.md" : i == 1 ? "/kb/animals.txt" : "/kb/long.pdf");
        hits[i].title = (char *)"T";
        hits[i].heading = (char *)(i == 0 ? "Island > Fauna" : "Animals");
        hits[i].text = (char *)(i == 2 ? long_text : texts[i]);
        hits[i].line_start = 3 + i;
        hits[i].line_end = 4 + i;
        hits[i].page = i == 2 ? 7 : 0;
    }
    pb_store_prompt pr;
    CHECK(pb_store_prompt_build("Where do quokkas live?", hits, 3, 4096, NULL, NULL, &pr) == PB_OK, "prompt: built");
    CHECK(pr.n_cites == 3 && pr.cites[0].num == 1 && strcmp(pr.cites[1].path, "/kb/animals.txt") == 0 &&
              pr.cites[2].page == 7,
          "prompt: citation table maps [n] to files");
    CHECK(strstr(pr.text, "[1] (island.md:3-4) Island > Fauna\nThe quokka lives") != NULL,
          "prompt: numbered source with location");
    CHECK(strstr(pr.text, "Question: Where do quokkas live?") != NULL, "prompt: question last");
    pb_store_prompt_free(&pr);
    { /* a heading the chunk's text opens with (a text file's first line, a Markdown "# Title") is not said twice */
        pb_store_hit h2[2];
        memset(h2, 0, sizeof h2);
        h2[0].path = (char *)"/kb/notes.txt", h2[0].title = (char *)"The harbor is calm.";
        h2[0].heading = (char *)"The harbor is calm.", h2[0].text = (char *)"The harbor is calm.\nShips rest here.";
        h2[1].path = (char *)"/kb/guide.md", h2[1].title = (char *)"Guide", h2[1].heading = (char *)"Guide";
        h2[1].text = (char *)"# Guide\n\nRead this first.";
        h2[0].line_start = h2[0].line_end = 1, h2[1].line_start = 1, h2[1].line_end = 3;
        CHECK(pb_store_prompt_build("Calm?", h2, 2, 4096, NULL, NULL, &pr) == PB_OK &&
                  strstr(pr.text, "[1] (notes.txt:1)\nThe harbor is calm.\nShips") != NULL &&
                  strstr(pr.text, "[2] (guide.md:1-3)\n# Guide\n") != NULL,
              "prompt: a heading the text opens with is left out of the source line");
        pb_store_prompt_free(&pr);
        CHECK(pb_store_heading_repeats("Guide", "  ## Guide ##\nx") && pb_store_heading_repeats("A b", "A b") &&
                  !pb_store_heading_repeats("Harbor", "Harbor is calm") &&
                  !pb_store_heading_repeats("Island > Fauna", "## Fauna\nquokkas") &&
                  !pb_store_heading_repeats("tag", "#tag\nx") && !pb_store_heading_repeats("", "x") &&
                  !pb_store_heading_repeats("Guide", "Guidebook\n"),
              "heading_repeats: whole first lines only (a '# ' marker allowed, a prefix or a '#tag' not)");
    }
    /* a budget that fits two sources and part of the third */
    int64_t base = pb_store_estimate_tokens("x", 1);
    (void)base;
    CHECK(pb_store_prompt_build("Where do quokkas live?", hits, 3, 250, NULL, NULL, &pr) == PB_OK, "prompt: small");
    CHECK(pr.n_cites == 3 && pr.n_truncated == 1 && pr.n_tokens <= 250, "prompt: third source cut to fit (%lld tok)",
          (long long)pr.n_tokens);
    pb_store_prompt_free(&pr);
    CHECK(pb_store_prompt_build("Where?", hits, 3, 20, NULL, NULL, &pr) == PB_ERR_CONTEXT_FULL,
          "prompt: budget below the instructions -> CONTEXT_FULL");
    { /* a source without spaces (Chinese) is cut between characters to fit, not dropped (it was: no space to cut at) */
        char zh[3 * 300 + 1] = {0};
        for (int i = 0; i < 300; i++) memcpy(zh + 3 * i, "\xE4\xB8\xAD", 3); /* 中 x 300 */
        pb_store_hit hz = hits[0];
        hz.text = zh;
        CHECK(pb_store_prompt_build("Where?", &hz, 1, 200, NULL, NULL, &pr) == PB_OK && pr.n_cites == 1 &&
                  pr.n_truncated == 1 && pr.n_tokens <= 200 && strstr(pr.text, "\xE4\xB8\xAD\xE4\xB8\xAD ...") != NULL,
              "prompt: a source without spaces is cut between characters (%d sources, %lld tokens)", pr.n_cites,
              (long long)pr.n_tokens);
        pb_store_prompt_free(&pr);
    }
    bool used[4];
    int bad;
    int n = pb_store_cites_used("Rottnest [1]. Marsupial [2, 3][9] and [see 4] [1-2] arr[0]", 4, used, &bad);
    CHECK(n == 3 && used[0] && used[1] && used[2] && !used[3] && bad == 2, "cites: parsed %d used, %d invalid", n, bad);
}

/* ---- FAQ --------------------------------------------------------------------------------------------- */

static void test_faq(pb_store *st, const char *label) {
    int64_t id;
    CHECK(pb_store_faq_add(st, "How do I reset my password?", "Open Settings > Account > Reset.", &id) == PB_OK,
          "%s: faq add", label);
    CHECK(pb_store_faq_add(st, "What are the opening hours?", "9 to 5 on weekdays.", NULL) == PB_OK, "%s: faq add 2",
          label);
    write_str("faq.jsonl", "{\"question\": \"Where is the office?\", \"answer\": \"Main street 1.\"}\n"
                           "{\"q\": \"Can I bring my dog?\", \"a\": \"Only small dogs.\"}\n\n");
    int64_t n;
    CHECK(pb_store_faq_import(st, path_of("faq.jsonl"), &n) == PB_OK && n == 2, "%s: jsonl import", label);
    write_str("faq.tsv", "# comment\nIs parking free?\tYes, behind the building.\n");
    CHECK(pb_store_faq_import(st, path_of("faq.tsv"), &n) == PB_OK && n == 1, "%s: tsv import", label);
    write_str("bad.jsonl", "{\"question\": \"ok?\", \"answer\": \"fine\"}\n{\"question\": 5}\n");
    int64_t before = count_q(st, "SELECT count(*) FROM faq");
    pb_status s = pb_store_faq_import(st, path_of("bad.jsonl"), &n);
    CHECK(s == PB_ERR_FORMAT && strstr(pb_last_error(), "line 2"), "%s: bad jsonl names line 2 (%s)", label,
          pb_last_error());
    CHECK(count_q(st, "SELECT count(*) FROM faq") == before, "%s: a bad import adds nothing", label);
    pb_store_faq_hit m;
    CHECK(pb_store_faq_match(st, "i forgot my password, how to reset it", &m) == PB_OK &&
              strstr(m.answer, "Reset") != NULL,
          "%s: faq match by BM25", label);
    pb_store_faq_hit_free(&m);
    CHECK(pb_store_faq_match(st, "quantum chromodynamics", &m) == PB_ERR_NOT_FOUND, "%s: no match -> NOT_FOUND", label);
    char *fb;
    CHECK(pb_store_faq_fallback(st, "when are you open", "no token within 5 s", &fb) == PB_OK &&
              strncmp(fb, "[fallback: no token within 5 s; FAQ match", 41) == 0 && strstr(fb, "9 to 5"),
          "%s: fallback text is marked", label);
    free(fb);
    CHECK(pb_store_faq_add(st, "How do I reset my password?", "New answer.", NULL) == PB_OK &&
              pb_store_faq_match(st, "reset password", &m) == PB_OK && strcmp(m.answer, "New answer.") == 0,
          "%s: re-adding a question replaces its answer (FTS updated)", label);
    pb_store_faq_hit_free(&m);
}

/* ---- CJK search ------------------------------------------------------------------------------------ */

/* Text without spaces between words: FTS5's unicode61 tokenizer alone kept a run of CJK characters as one token,
 * so a word inside the run (中文 in 我们今天在图书馆学习中文语法) was never found. */
#define ZH_TEXT "我们今天在图书馆学习中文语法，然后喝茶。\n"
#define JA_TEXT "私は東京で日本語を勉強しています。カタカナとひらがなも毎日練習します。\n"
#define KO_TEXT "저는 서울에서 한국어를 공부합니다.\n"
#define EN_TEXT "The old runner runs along the river every morning; Café汉字test mixes scripts.\n"

static void write_cjk_docs(const char *sub) {
    char dir[512], rel[600];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, sub);
    mkdir(dir, 0755);
    snprintf(rel, sizeof rel, "%s/zh.txt", sub);
    write_str(rel, ZH_TEXT);
    snprintf(rel, sizeof rel, "%s/ja.txt", sub);
    write_str(rel, JA_TEXT);
    snprintf(rel, sizeof rel, "%s/ko.txt", sub);
    write_str(rel, KO_TEXT);
    snprintf(rel, sizeof rel, "%s/en.txt", sub);
    write_str(rel, EN_TEXT);
}

static pb_status ingest_dir(pb_store *st, const char *sub) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, sub);
    const char *paths[] = {dir};
    pb_ingest_params p = pb_ingest_default_params();
    pb_ingest_stats s;
    return pb_store_ingest(st, paths, 1, &p, &s);
}

/* The CJK searches every store must answer; 'how' says which scorer ran (FTS5 below 50 chunks, C above). */
static void check_cjk_hits(pb_store *st, const char *label, const char *how) {
    static const struct {
        const char *q, *doc;
    } want[] = {
        {"中文", "zh.txt"},           /* 2 Han characters inside a 13-character run */
        {"图书馆", "zh.txt"},         /* 3 inside the same run */
        {"日本語", "ja.txt"},         /* kanji between kana: で日本語を */
        {"ひらがな", "ja.txt"},       /* hiragana */
        {"カタカナ", "ja.txt"},       /* katakana */
        {"한국어", "ko.txt"},         /* Hangul syllables with a particle attached: 한국어를 */
        {"running", "en.txt"},        /* porter still stems English: runs, runner -> run */
        {"cafe", "en.txt"},           /* diacritics still removed next to CJK: Café汉字test */
        {"test", "en.txt"},           /* Latin after CJK in one unicode61 token */
        {"我想学习中文。", "zh.txt"}, /* a question without spaces: its pairs 我想 想学 学习 习中 中文, OR-ranked */
    };
    char top[256];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int n = search_n(st, want[i].q, top, sizeof top);
        CHECK(n == 1 && strcmp(top, want[i].doc) == 0, "%s cjk (%s): '%s' finds %s only (%d hits, top '%s')", label,
              how, want[i].q, want[i].doc, n, n > 0 ? top : "");
    }
    /* adjacent characters are a phrase: 中 and 国 both occur, never as 中国 */
    CHECK(search_n(st, "中国", NULL, 0) == 0, "%s cjk (%s): '中国' (not in the text) finds nothing", label, how);
}

static void test_cjk_search(const char *dbpath, const char *label) {
    pb_store *st;
    CHECK(pb_store_open(dbpath, &st) == PB_OK, "%s cjk: open (%s)", label, pb_last_error());
    if (!st) return;
    char sub[64];
    snprintf(sub, sizeof sub, "cjk_%s", label);
    write_cjk_docs(sub);
    CHECK(ingest_dir(st, sub) == PB_OK, "%s cjk: ingest zh/ja/ko/en (%s)", label, pb_last_error());
    check_cjk_hits(st, label, "FTS5 ranks");
    /* the characters' byte offsets point at them in the text: FTS5's highlight() reads them */
    CHECK(count_q(st, "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH '\"学习中文\"' AND"
                      " instr(highlight(chunks_fts, 1, '[', ']'), '在图书馆[学习中文]语法') > 0") == 1,
          "%s cjk: highlight() brackets exactly 学习中文 (offsets right)", label);
    CHECK(count_q(st, "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'test' AND"
                      " instr(highlight(chunks_fts, 1, '[', ']'), 'Café汉字[test] mixes') > 0") == 1,
          "%s cjk: highlight() brackets exactly the Latin run after CJK", label);
    /* 60 more chunks: searches now go through the C scorer and its query stemming table (pb_stem) */
    char rel[600];
    snprintf(rel, sizeof rel, "%s/filler", sub);
    mkdir(path_of(rel), 0755);
    for (int i = 0; i < 60; i++) {
        char body[128];
        snprintf(rel, sizeof rel, "%s/filler/f%02d.txt", sub, i);
        snprintf(body, sizeof body, "Filler note %d about item%d and the weather.\n", i, i);
        write_str(rel, body);
    }
    CHECK(ingest_dir(st, sub) == PB_OK, "%s cjk: ingest filler (%s)", label, pb_last_error());
    CHECK(count_q(st, "SELECT count(*) FROM chunks") >= 50, "%s cjk: 50+ chunks", label);
    check_cjk_hits(st, label, "C scorer");
    int64_t id = 0;
    pb_store_faq_hit m;
    CHECK(pb_store_faq_add(st, "如何重置我的密码？", "打开设置，然后选择账户。", &id) == PB_OK, "%s cjk: faq add",
          label);
    CHECK(pb_store_faq_match(st, "重置密码", &m) == PB_OK && strstr(m.answer, "账户") != NULL,
          "%s cjk: the FAQ finds 重置密码 inside 如何重置我的密码", label);
    if (m.answer) pb_store_faq_hit_free(&m);
    CHECK(pb_store_exec(st, "INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check');"
                            "INSERT INTO faq_fts(faq_fts) VALUES ('integrity-check')") == PB_OK,
          "%s cjk: FTS indexes consistent (%s)", label, pb_last_error());
    pb_store_close(st);
    if (strcmp(dbpath, ":memory:") == 0) return;
    /* a reader opens its own connection: the tokenizer is registered there too */
    CHECK(pb_store_open_readonly(dbpath, &st) == PB_OK, "%s cjk: open read-only (%s)", label, pb_last_error());
    if (!st) return;
    char top[256];
    CHECK(search_n(st, "中文", top, sizeof top) == 1 && strcmp(top, "zh.txt") == 0,
          "%s cjk: read-only connection finds '中文' in zh.txt", label);
    pb_store_close(st);
}

/* A knowledge base written at schema version 3 (unicode61 alone) is upgraded on open: the FTS indexes are
 * rebuilt with the CJK tokenizer, nothing is lost, and the CJK words in it are found. */
static void test_cjk_upgrade(void) {
    const char *db = path_of("cjk_v3.sqlite");
    pb_store *st;
    CHECK(pb_store_open_at_version(db, 3, &st) == PB_OK, "cjk upgrade: create schema v3 (%s)", pb_last_error());
    if (!st) return;
    write_cjk_docs("cjk_v3");
    CHECK(ingest_dir(st, "cjk_v3") == PB_OK, "cjk upgrade: v3 ingest (%s)", pb_last_error());
    CHECK(pb_store_faq_add(st, "如何重置我的密码？", "打开设置，然后选择账户。", NULL) == PB_OK,
          "cjk upgrade: v3 faq add");
    int64_t n_chunks = count_q(st, "SELECT count(*) FROM chunks");
    pb_store_close(st);
    CHECK(pb_store_open(db, &st) == PB_OK, "cjk upgrade: reopen migrates (%s)", pb_last_error());
    if (!st) return;
    CHECK(PB_STORE_SCHEMA_VERSION >= 4 && pb_store_schema_version(st) == PB_STORE_SCHEMA_VERSION,
          "cjk upgrade: now at version %d (this build: %d, CJK search needs 4)", pb_store_schema_version(st),
          PB_STORE_SCHEMA_VERSION);
    CHECK(count_q(st, "SELECT count(*) FROM chunks") == n_chunks && n_chunks >= 4 &&
              count_q(st, "SELECT count(*) FROM documents WHERE hash <> ''") == 4 &&
              count_q(st, "SELECT count(*) FROM faq") == 1,
          "cjk upgrade: documents, chunks (%lld) and the FAQ kept, nothing marked for re-chunking",
          (long long)n_chunks);
    CHECK(count_q(st, "SELECT count(*) FROM sqlite_master WHERE name IN ('chunks_fts', 'faq_fts') AND sql LIKE"
                      " '%tokenize=''pb_cjk porter unicode61 remove_diacritics 2''%'") == 2,
          "cjk upgrade: chunks_fts and faq_fts use the pb_cjk tokenizer");
    char top[256];
    CHECK(search_n(st, "中文", top, sizeof top) == 1 && strcmp(top, "zh.txt") == 0,
          "cjk upgrade: '中文' found in zh.txt after the upgrade");
    CHECK(search_n(st, "한국어", top, sizeof top) == 1 && strcmp(top, "ko.txt") == 0,
          "cjk upgrade: '한국어' found in ko.txt after the upgrade");
    CHECK(search_n(st, "running", top, sizeof top) == 1 && strcmp(top, "en.txt") == 0,
          "cjk upgrade: 'running' still stemmed after the upgrade");
    pb_store_faq_hit m;
    CHECK(pb_store_faq_match(st, "重置密码", &m) == PB_OK, "cjk upgrade: the FAQ index was rebuilt too");
    if (m.answer) pb_store_faq_hit_free(&m);
    /* the triggers were recreated with the tables: a new document and a deletion reach the index */
    write_str("cjk_v3/new.txt", "新しい文書です。\n");
    CHECK(ingest_dir(st, "cjk_v3") == PB_OK && search_n(st, "文書", NULL, 0) == 1,
          "cjk upgrade: a document ingested after the upgrade is found");
    bool ok;
    char msg[256];
    CHECK(pb_store_integrity(st, &ok, msg, sizeof msg) == PB_OK && ok &&
              pb_store_exec(st, "INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check');"
                                "INSERT INTO faq_fts(faq_fts) VALUES ('integrity-check')") == PB_OK,
          "cjk upgrade: integrity after migration");
    pb_store_close(st);
}

/* A knowledge base from the previous build (schema 3) opened read-only, as search, ask and serve open it: upgraded
 * where the file is writable (before 2026-12-06 refused until an ingest ran), read as it is where another writer
 * holds the lock (English search works, the version says 3). */
static void test_readonly_upgrade(void) {
    const char *db = path_of("ro_v3.sqlite");
    pb_store *st = NULL, *lock = NULL;
    CHECK(pb_store_open_at_version(db, 3, &st) == PB_OK, "read-only upgrade: create schema v3 (%s)", pb_last_error());
    if (!st) return;
    write_cjk_docs("ro_v3");
    CHECK(ingest_dir(st, "ro_v3") == PB_OK, "read-only upgrade: v3 ingest (%s)", pb_last_error());
    pb_store_close(st);
    char top[256];
    /* another writer holds the write lock: the upgrade waits its busy timeout, then the file is read at v3 */
    CHECK(pb_store_open_at_version(db, 3, &lock) == PB_OK && pb_store_begin(lock) == PB_OK,
          "read-only upgrade: a writer holds the lock (%s)", pb_last_error());
    st = NULL;
    CHECK(pb_store_open_readonly(db, &st) == PB_OK, "read-only upgrade: locked: opened as it is (%s)", pb_last_error());
    if (st) {
        CHECK(pb_store_schema_version(st) == 3, "read-only upgrade: locked: still version %d (3)",
              pb_store_schema_version(st));
        /* why it was not upgraded is kept (it was dropped: the CLI could only guess) */
        const char *why = pb_store_upgrade_error(st);
        CHECK(why && strstr(why, "schema upgrade 3 -> 4") && strstr(why, "locked"),
              "read-only upgrade: locked: the upgrade's error is kept (%s)", why ? why : "NULL");
        CHECK(search_n(st, "running", top, sizeof top) == 1 && strcmp(top, "en.txt") == 0,
              "read-only upgrade: locked: 'running' found at v3");
        pb_store_close(st);
    }
    if (lock) {
        pb_store_rollback(lock);
        pb_store_close(lock);
    }
    st = NULL;
    CHECK(pb_store_open_readonly(db, &st) == PB_OK, "read-only upgrade: opened (%s)", pb_last_error());
    if (!st) return;
    CHECK(pb_store_schema_version(st) == PB_STORE_SCHEMA_VERSION, "read-only upgrade: now at version %d (%d)",
          pb_store_schema_version(st), PB_STORE_SCHEMA_VERSION);
    CHECK(search_n(st, "中文", top, sizeof top) == 1 && strcmp(top, "zh.txt") == 0,
          "read-only upgrade: '中文' found in zh.txt");
    CHECK(pb_store_upgrade_error(st) == NULL, "read-only upgrade: upgraded: no upgrade error");
    pb_store_close(st);
}

/* Every failed upgrade of a read-only open says why: schema 3 through a symlink (the writer refuses it) is read as
 * it is with the reason kept; schema 2 is upgraded where writable (it was refused as "needs write access" without a
 * try) and, through a symlink, refused naming the reason (it was a generic "needs write access"). */
static void test_readonly_upgrade_errors(void) {
    pb_store *st = NULL;
    const char *v3 = path_of("rou_v3.sqlite"), *v3l = path_of("rou_v3_link.sqlite");
    CHECK(pb_store_open_at_version(v3, 3, &st) == PB_OK, "upgrade errors: create schema v3 (%s)", pb_last_error());
    pb_store_close(st);
    CHECK(symlink("rou_v3.sqlite", v3l) == 0, "upgrade errors: symlink to v3");
    st = NULL;
    CHECK(pb_store_open_readonly(v3l, &st) == PB_OK, "upgrade errors: v3 through a symlink opens (%s)",
          pb_last_error());
    if (st) {
        const char *why = pb_store_upgrade_error(st);
        CHECK(pb_store_schema_version(st) == 3 && why && strstr(why, "symbolic link"),
              "upgrade errors: v3 through a symlink: read at v%d, why kept (%s)", pb_store_schema_version(st),
              why ? why : "NULL");
        pb_store_close(st);
    }
    const char *v2 = path_of("rou_v2.sqlite"), *v2l = path_of("rou_v2_link.sqlite");
    st = NULL;
    CHECK(pb_store_open_at_version(v2, 2, &st) == PB_OK, "upgrade errors: create schema v2 (%s)", pb_last_error());
    pb_store_close(st);
    CHECK(symlink("rou_v2.sqlite", v2l) == 0, "upgrade errors: symlink to v2");
    st = NULL;
    pb_status s = pb_store_open_readonly(v2l, &st);
    CHECK(s == PB_ERR_UNSUPPORTED && !st && strstr(pb_last_error(), "schema version 2") &&
              strstr(pb_last_error(), "symbolic link"),
          "upgrade errors: v2 through a symlink: refused naming the schema and why (%d: %s)", s, pb_last_error());
    st = NULL;
    CHECK(pb_store_open_readonly(v2, &st) == PB_OK && st && pb_store_schema_version(st) == PB_STORE_SCHEMA_VERSION,
          "upgrade errors: v2, writable: upgraded by the read-only open (%s)", pb_last_error());
    pb_store_close(st);
}

static void run_on(const char *dbpath, const char *label) {
    pb_store *st;
    CHECK(pb_store_open(dbpath, &st) == PB_OK, "%s: open (%s)", label, pb_last_error());
    if (!st) return;
    int64_t wal = 0;
    if (strcmp(dbpath, ":memory:") != 0) {
        pb_store_query_int(st, "SELECT journal_mode = 'wal' FROM pragma_journal_mode", &wal);
        CHECK(wal == 1, "%s: WAL journal", label);
    }
    test_reingest(st, label);
    test_faq(st, label);
    pb_store_close(st);
}

/* A document truncated while ingest reads it (an editor saving in place, log rotation): the file is skipped
 * with a message or ingested whole from what was read, never a SIGBUS, and the files after it are ingested.
 * The parent truncates b_big.txt as soon as the child reports a.txt done, i.e. while b_big.txt is read. */
typedef struct {
    int fd;
} shrink_ctx;

static void shrink_event(void *user, pb_ingest_event ev, const char *path, const char *detail, size_t done,
                         size_t total) {
    (void)detail, (void)done, (void)total;
    shrink_ctx *c = user;
    if (ev == PB_INGEST_SKIPPED) printf("# skipped %s: %s\n", path, detail ? detail : "");
    if (ev == PB_INGEST_PROGRESS && strstr(path, "/a.txt") && c->fd >= 0) {
        char b = 1;
        if (write(c->fd, &b, 1) != 1) c->fd = -1;
    }
}

static void test_shrinking_file(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/shrink", tmpdir);
    mkdir(dir, 0755);
    write_str("shrink/a.txt", "The first file is small and ordinary.\n");
    write_str("shrink/c.txt", "The last file mentions a zebra so it can be found.\n");
    size_t big = (size_t)96 << 20; /* large enough that hashing and checking it takes a while */
    char *text = malloc(big);
    if (!text) return;
    for (size_t i = 0; i < big; i++) text[i] = "lorem ipsum dolor sit amet\n"[i % 27];
    text[big - 1] = 0; /* a NUL at the very end: checked in full, then skipped fast as binary */
    write_file("shrink/b_big.txt", text, big);
    free(text);
    int pfd[2];
    if (pipe(pfd) != 0) return;
    char db[600];
    snprintf(db, sizeof db, "%s/shrink.sqlite", tmpdir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        pb_store *st = NULL;
        if (pb_store_open(db, &st)) _exit(3);
        pb_ingest_params p = pb_ingest_default_params();
        shrink_ctx c = {pfd[1]};
        p.on_event = shrink_event;
        p.user = &c;
        pb_ingest_stats s;
        const char *paths[] = {dir};
        pb_status rc = pb_store_ingest(st, paths, 1, &p, &s);
        pb_store_close(st);
        _exit(rc == PB_OK && s.added >= 2 ? 0 : 4);
    }
    close(pfd[1]);
    char b;
    if (read(pfd[0], &b, 1) == 1) {
        usleep(10000); /* the child has opened b_big.txt and is reading it */
        char big_path[600];
        snprintf(big_path, sizeof big_path, "%s/b_big.txt", dir);
        if (truncate(big_path, 100) != 0) NOTE("truncate: %s", strerror(errno));
    }
    close(pfd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(!WIFSIGNALED(st), "shrinking file: ingest is not killed by a signal (%s)",
          WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exited");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "shrinking file: ingest goes on and adds the other files (status %d)",
          st);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pb_itest_store.%d", (int)getpid());
    mkdir(tmpdir, 0755);
    test_html();
    test_chunking();
    test_chunk_one_line();
    test_chunk_cjk();
    test_prompt();
    test_migration(":memory:", "memory");
    test_migration(path_of("old.sqlite"), "disk");
    test_open_errors();
    run_on(":memory:", "memory");
    run_on(path_of("kb.sqlite"), "disk");
    test_cjk_search(":memory:", "memory");
    test_cjk_search(path_of("cjk.sqlite"), "disk");
    test_cjk_upgrade();
    test_readonly_upgrade();
    test_readonly_upgrade_errors();
    test_crash();
    test_shrinking_file();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (!getenv("KEEP") && pbt_failures == 0 && system(cmd) != 0) NOTE("could not remove %s", tmpdir);
    TEST_DONE();
}
