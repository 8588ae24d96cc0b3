/* store.h -- internal API of the store room: the SQLite knowledge base (documents, chunks, FTS5, embeddings,
 * FAQ), text extraction, chunking, retrieval and prompt/citation building. No <sqlite3.h> here: only the
 * store's .c files include it. Linked into the CLI and the server, never into libpocketbrain.
 *
 * Data flow: file bytes -> pb_store_extract (text + source map) -> pb_store_chunk_doc (heading-aware chunks
 * with byte/line positions and token counts) -> pb_store_doc_put (one transaction per batch) -> FTS5 index
 * -> pb_store_search_bm25 (safe quoted query) -> pb_store_prompt_build (context budget, numbered sources)
 * -> generation -> pb_store_cites_used (which [n] the answer cited).
 *
 * Threading: a pb_store is used by one thread at a time. Every function returns pb_status with the
 * detail in pb_last_error(); nothing prints. */
#ifndef PB_STORE_H
#define PB_STORE_H

#include "base/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Schema versions (PRAGMA user_version). 1: documents + chunks + plain FTS5; 2: titles, line numbers,
 * heading paths, token counts, stemmed FTS5; 3: meta, embeddings, FAQ; 4: FTS5 indexes with the pb_cjk
 * tokenizer (a CJK character is a token). Older files are migrated on open. */
#define PB_STORE_SCHEMA_VERSION 4
/* The oldest schema pb_store_open_readonly reads without upgrading it (where it cannot write the file): 3, whose
 * search and FAQ work as in 4 but for CJK words inside runs without spaces. */
#define PB_STORE_MIN_READ_VERSION 3
#define PB_STORE_APP_ID           0x50424b42 /* 'PBKB' in PRAGMA application_id */

typedef struct pb_store pb_store;

/* Counts the tokens of len bytes of text (a tokenizer, or the estimate below). */
typedef int64_t (*pb_store_count_fn)(void *user, const char *text, size_t len);

/* Documented fallback when no tokenizer is given: ceil(words * 1.3), a word being a maximal run of
 * non-space bytes. Gemma's SentencePiece vocabulary gives about 1.2-1.4 tokens per English word. */
int64_t pb_store_estimate_tokens(const char *text, size_t len);
int64_t pb_store_estimate_count_fn(void *user, const char *text, size_t len); /* adapter, user unused */

/* Bytes (3 or 4) of the CJK character that starts t[0..n), or 0 when none does: ideographs (U+2E80-U+9FFF with
 * kana, Bopomofo and CJK punctuation, U+F900-U+FAFF, U+20000-U+3FFFF), Hangul syllables (U+AC00-U+D7AF) and
 * fullwidth / halfwidth forms (U+FF00-U+FFEF). Such text puts no spaces between words, so chunking counts each
 * such character as a word and the full-text index makes it a token of its own (store_fts.c). */
size_t pb_store_cjk_len(const char *t, size_t n);

/* A pb_store_count_fn backed by a model's tokenizer (store_tok.c). The counter keeps one id buffer that
 * grows as needed; not thread-safe. With vocab NULL it falls back to the estimate. */
typedef struct pb_store_counter {
    const pb_vocab *vocab; /* borrowed */
    int32_t *ids;
    int64_t cap;
} pb_store_counter;
void pb_store_counter_init(pb_store_counter *c, const pb_vocab *v);
void pb_store_counter_deinit(pb_store_counter *c);
int64_t pb_store_counter_fn(void *user /* pb_store_counter* */, const char *text, size_t len);

/* ---- database (store_db.c) ---------------------------------------------------------------------- */

/* Opens or creates a knowledge base; path ":memory:" gives an in-memory one. WAL journal, foreign keys
 * on, synchronous=NORMAL. An older schema is migrated in place (one transaction per step); a newer one
 * or a file that is not a pocketbrain database gives PB_ERR_UNSUPPORTED / PB_ERR_FORMAT. A path that is a symbolic
 * link, FIFO, device or folder is refused (PB_ERR_IO naming it; a link with where it leads): a knowledge base is
 * written only under its own name. */
pb_status pb_store_open(const char *path, pb_store **out);
/* Opens an existing knowledge base for reading (search, ask, serve): never creates it, and the handle never
 * writes, so it works in a read-only folder or file system (a WAL file whose folder allows no -shm index is
 * read as immutable). The one write: a file at an older schema (1 and up) is first upgraded as pb_store_open would,
 * where it is writable; where it cannot be (opened through a symlink, read-only, locked by a writer, a failed step),
 * schema PB_STORE_MIN_READ_VERSION and later are read as they are (pb_store_schema_version tells, and
 * pb_store_upgrade_error why), older ones give PB_ERR_UNSUPPORTED naming why as well. An empty database
 * (schema 0) is PB_ERR_UNSUPPORTED and never written; a newer schema than this build's PB_ERR_UNSUPPORTED naming both;
 * other open errors are SQLite's own message (permission, I/O, corrupt). */
pb_status pb_store_open_readonly(const char *path, pb_store **out);
/* Why a store that pb_store_open_readonly opened below PB_STORE_SCHEMA_VERSION could not be upgraded, in a reader's
 * words, without "store 'FILE': " in front: "it is a symbolic link to '/abs/kb.sqlite', and ...", "the file is
 * read-only to this user (...)", "its folder is ...", "it is on a read-only file system", else the upgrade's own error
 * naming its step ("another program is writing it (schema upgrade 3 -> 4: database is locked)", "the upgrade failed:
 * ..."); NULL when it is at the current schema. Lives as long as st. */
const char *pb_store_upgrade_error(const pb_store *st);
/* Test hook: creates (or opens without migrating) a database at an older schema version 1..current. */
pb_status pb_store_open_at_version(const char *path, int version, pb_store **out);
/* Migrates an open store up to PB_STORE_SCHEMA_VERSION (pb_store_open does this itself). */
pb_status pb_store_migrate(pb_store *st);
void pb_store_close(pb_store *st);
int pb_store_schema_version(pb_store *st);
const char *pb_store_path(const pb_store *st);

/* Transactions (BEGIN IMMEDIATE / COMMIT / ROLLBACK). rollback never fails. */
pb_status pb_store_begin(pb_store *st);
pb_status pb_store_commit(pb_store *st);
void pb_store_rollback(pb_store *st);

/* Runs PRAGMA integrity_check; ok is true when it says "ok" (msg gets the first line otherwise). */
pb_status pb_store_integrity(pb_store *st, bool *ok, char *msg, size_t cap);
/* Test/diagnostic hook: runs SQL that returns nothing (several statements allowed). */
pb_status pb_store_exec(pb_store *st, const char *sql);
/* Test/diagnostic hook: first column of the first row of a query as an integer (0 when no row). */
pb_status pb_store_query_int(pb_store *st, const char *sql, int64_t *out);

typedef struct pb_store_stats {
    int64_t n_docs, n_chunks, n_embeddings, n_faq;
    int64_t text_bytes; /* sum of chunk text sizes */
} pb_store_stats;
pb_status pb_store_get_stats(pb_store *st, pb_store_stats *out);

/* Key/value metadata (schema >= 3): e.g. "tokenizer" = how chunk token counts were made. */
pb_status pb_store_meta_set(pb_store *st, const char *key, const char *value);
/* Copies the value into buf[cap]; PB_ERR_NOT_FOUND when the key is absent. */
pb_status pb_store_meta_get(pb_store *st, const char *key, char *buf, size_t cap);

/* ---- documents and chunks (store_db.c) ---------------------------------------------------------- */

typedef struct pb_store_chunk {
    size_t byte_start, byte_end;  /* position in the source file (HTML: mapped back; PDF: extracted text) */
    int64_t line_start, line_end; /* 1-based lines of the same coordinates (inclusive) */
    int page;                     /* PDF page (1-based), 0 for other formats */
    int64_t n_tokens;
    char *heading; /* heading path "Title > Section > Subsection" (owned) */
    char *text;    /* chunk text as extracted (owned) */
} pb_store_chunk;

typedef struct pb_store_doc {
    const char *path; /* canonical absolute path: the document's identity */
    const char *hash; /* SHA-256 of the file bytes, 64 lowercase hex digits */
    int64_t mtime;    /* seconds since the epoch */
    int64_t size;     /* bytes */
    const char *title;
} pb_store_doc;

typedef struct pb_store_doc_info {
    int64_t id;
    char hash[65];
    int64_t mtime, size;
} pb_store_doc_info;

/* Looks a document up by path: PB_OK, or PB_ERR_NOT_FOUND. */
pb_status pb_store_doc_lookup(pb_store *st, const char *path, pb_store_doc_info *out);
/* Inserts a document with its chunks, replacing any document with the same path (and its chunks and
 * embeddings). Call inside a transaction for atomicity across several documents. */
pb_status pb_store_doc_put(pb_store *st, const pb_store_doc *doc, const pb_store_chunk *chunks, int64_t n_chunks,
                           int64_t *doc_id);
/* Updates the mtime of an unchanged document. */
pb_status pb_store_doc_touch(pb_store *st, int64_t doc_id, int64_t mtime);
/* Removes a document (chunks, FTS rows and embeddings too). PB_ERR_NOT_FOUND when absent. */
pb_status pb_store_doc_delete(pb_store *st, const char *path);

/* Whether a document's file is still the one ingest read: a citation quotes the text stored then. */
typedef enum pb_store_doc_state {
    PB_DOC_SAME = 0,    /* size and mtime as recorded (or only the mtime moved and the SHA-256 is the same); also when
                           it cannot be told (the file unreadable to this user, the entry gone meanwhile) */
    PB_DOC_CHANGED = 1, /* another size, or another mtime and other bytes: the cited lines may hold other text now */
    PB_DOC_GONE = 2,    /* no file at the path any more (deleted, moved away, a folder now) */
} pb_store_doc_state;

/* The state of document doc_id's file, from one stat() against the size and mtime (seconds) ingest recorded. Only a
 * file whose mtime moved while its size did not is read, to compare its SHA-256 (a `touch`, a copy back, an editor
 * that saved without a change), and only up to PB_STORE_STATE_HASH_MAX bytes: a larger one is taken as CHANGED. An
 * edit that keeps the size within the second of the recorded mtime is not seen. Errors are SQLite's. */
#define PB_STORE_STATE_HASH_MAX ((int64_t)16 << 20)
pb_status pb_store_doc_state_of(pb_store *st, int64_t doc_id, pb_store_doc_state *out);
/* "changed since ingest", "file is gone", or "" for PB_DOC_SAME: the words every front end shows. */
const char *pb_store_doc_state_text(pb_store_doc_state s);
/* The JSON value: "unchanged", "changed", "gone". */
const char *pb_store_doc_state_name(pb_store_doc_state s);

/* Prune support: paths seen during this run are recorded in a temporary table; pb_store_prune_unseen
 * removes every document at or under one of the roots that was not seen and whose file is gone (or is a link to a
 * file seen under its own name), calling on_removed(path, why); an unseen file that is still there is kept. */
pb_status pb_store_seen_reset(pb_store *st);
pb_status pb_store_seen_add(pb_store *st, const char *path);
/* Marks every document under folder dir as seen (a folder that could not be read keeps its documents). */
pb_status pb_store_seen_add_under(pb_store *st, const char *dir);
pb_status pb_store_prune_unseen(pb_store *st, const char *const *roots, int n_roots,
                                void (*on_removed)(void *user, const char *path, const char *why), void *user,
                                int64_t *n_removed);
/* Moved files: every document written during a run is noted with its hash (a temporary table, emptied by
 * pb_store_prune_moved). pb_store_prune_moved removes each other document with one of those hashes whose file is gone
 * (lstat: no such file) or that is the same file under another name (a symbolic link, its path's realpath the noted
 * one), calling on_moved(old path, new path): a file renamed or moved and ingested again (or a knowledge base whose
 * folder moved) replaces its old entry instead of leaving it beside the new one, cited under a path that no longer
 * opens. The bytes are the same, so nothing is lost. Call it inside the transaction that wrote the documents. */
pb_status pb_store_added_note(pb_store *st, const char *path, const char *hash);
pb_status pb_store_prune_moved(pb_store *st, void (*on_moved)(void *user, const char *old_path, const char *new_path),
                               void *user, int64_t *n_removed);

/* ---- SHA-256 (store_db.c, OpenSSL) -------------------------------------------------------------- */
/* hex gets 64 lowercase hex digits + NUL. */
pb_status pb_store_sha256_hex(const void *data, size_t len, char hex[65]);

/* ---- extraction (store_extract.c) --------------------------------------------------------------- */

/* A heap copy of s (NULL = "") that is valid UTF-8: each byte that is not part of a valid sequence
 * becomes U+FFFD. For text shown or sent as JSON that may hold raw file-name bytes. NULL on no memory. */
char *pb_store_utf8_dup(const char *s);

typedef enum pb_doc_kind { PB_DOC_TEXT = 0, PB_DOC_MARKDOWN = 1, PB_DOC_HTML = 2, PB_DOC_PDF = 3 } pb_doc_kind;

typedef struct pb_extracted {
    pb_doc_kind kind;
    char *text; /* UTF-8, NUL-terminated; Markdown-style "# " lines mark headings for HTML */
    size_t len;
    char *title;      /* best-effort title ("" when none) */
    size_t *src_off;  /* when non-NULL (HTML): source byte offset of each text byte, len + 1 entries */
    size_t *page_off; /* when non-NULL (PDF): text offset where each page starts, n_pages entries */
    int n_pages;
    const char *src; /* borrowed: the source bytes positions refer to (line numbers); NULL for PDF */
    size_t src_len;
    char *converted;  /* owned: the UTF-8 conversion src points to when the file was in another charset */
    char charset[40]; /* the charset converted from ("" when the file was UTF-8) */
} pb_extracted;

/* Kind from the file name's extension (.md .markdown -> MARKDOWN, .html .htm .xhtml -> HTML, .pdf -> PDF,
 * .txt .text .rst and anything else -> TEXT). known is false when the extension is not a document one. */
pb_doc_kind pb_store_kind_from_path(const char *path, bool *known);
/* True when the file name has no extension (README, NEWS, copyright; also NEWS.gz): ingest sniffs such
 * files found in folders and takes them when their bytes are text. A ".gz" suffix is looked through by
 * both functions ("notes.md.gz" is Markdown, gunzipped by ingest). */
bool pb_store_path_has_no_extension(const char *path);
/* Extracts text from file bytes. A file that is not a document (NUL bytes, invalid UTF-8, a PDF poppler
 * cannot read, no text at all) gives PB_ERR_FORMAT with a reason naming the offset or the parser's words. */
pb_status pb_store_extract(const char *path, pb_doc_kind kind, const uint8_t *data, size_t size, pb_extracted *out);
/* The tolerant HTML stripper on its own: drops tags, comments, <script>/<style>/<noscript>/<template>
 * contents; decodes entities; block elements become line breaks; <h1>-<h6> become "# " heading lines;
 * fills src_off. */
pb_status pb_store_html_to_text(const char *html, size_t len, pb_extracted *out);
/* Checks that bytes are text: no NUL, valid UTF-8 (BOM allowed). PB_ERR_FORMAT naming the offset. */
pb_status pb_store_check_text(const uint8_t *data, size_t size);
void pb_store_extracted_free(pb_extracted *e);

/* ---- chunking (store_chunk.c) ------------------------------------------------------------------- */

typedef struct pb_chunk_params {
    int64_t target_tokens;   /* a chunk is closed before it would exceed this (default 200) */
    int64_t overlap_tokens;  /* a split inside a section repeats about this many tokens (default 40) */
    pb_store_count_fn count; /* NULL: pb_store_estimate_tokens */
    void *count_user;
} pb_chunk_params;

pb_chunk_params pb_chunk_default_params(void);

/* Splits extracted text into chunks that follow headings and paragraphs: every heading starts a chunk;
 * a section longer than target_tokens is split at paragraph (then sentence, then word) boundaries with
 * overlap_tokens of overlap. Positions are mapped to the source through e->src_off / e->page_off.
 * *out is an array of *n_out chunks (free with pb_store_chunks_free). Empty text gives 0 chunks. */
pb_status pb_store_chunk_doc(const pb_extracted *e, const char *title, const pb_chunk_params *p, pb_store_chunk **out,
                             int64_t *n_out);
void pb_store_chunks_free(pb_store_chunk *c, int64_t n);

/* ---- ingest (store_ingest.c) -------------------------------------------------------------------- */

typedef enum pb_ingest_event {
    PB_INGEST_ADDED,     /* new document */
    PB_INGEST_UPDATED,   /* content changed: replaced */
    PB_INGEST_UNCHANGED, /* same SHA-256: skipped */
    PB_INGEST_SKIPPED,   /* not ingestable (detail says why) */
    PB_INGEST_REMOVED,   /* --prune: file gone; or moved (detail: "moved to 'NEW'") */
    PB_INGEST_PROGRESS,  /* bytes_done / bytes_total advanced (path may be NULL) */
} pb_ingest_event;

typedef void (*pb_ingest_fn)(void *user, pb_ingest_event ev, const char *path, const char *detail, size_t bytes_done,
                             size_t bytes_total);

typedef struct pb_ingest_params {
    pb_chunk_params chunk;
    bool prune;            /* remove documents under the given paths whose files are gone */
    size_t batch_bytes;    /* commit after this many source bytes (default 16 MiB) */
    int batch_files;       /* ... or this many changed files (default 512) */
    pb_ingest_fn on_event; /* may be NULL */
    void *user;
    const volatile int *cancel; /* when non-zero: stop after the current file (committed), PB_ERR_CANCELLED */
} pb_ingest_params;

pb_ingest_params pb_ingest_default_params(void);

typedef struct pb_ingest_stats {
    int64_t n_files; /* document files found */
    int64_t added, updated, unchanged, skipped, removed;
    int64_t n_chunks; /* chunks written */
    size_t bytes;     /* source bytes read */
    double ms;
} pb_ingest_stats;

/* Ingests files and directories (walked recursively, hidden entries and unknown extensions ignored;
 * a file named explicitly is always tried). Per-file problems are events, not errors: the call fails
 * only when the database fails or a named path does not exist. Documents are committed in batches, so a
 * killed run leaves a consistent database and the next run skips what was committed. */
pb_status pb_store_ingest(pb_store *st, const char *const *paths, int n_paths, const pb_ingest_params *p,
                          pb_ingest_stats *stats);

/* ---- retrieval (store_search.c) ----------------------------------------------------------------- */

/* Builds an FTS5 MATCH expression from user text that FTS5 can never read as syntax: words (letters,
 * digits, '_', and any non-ASCII bytes) are lowercased, stop words dropped (unless nothing else is left),
 * duplicates removed, each put in double quotes and joined with OR. At most 32 terms. *n_terms = 0 (and
 * buf = "") when the text has no word. PB_ERR_INVALID_ARG when buf is too small. */
pb_status pb_store_fts_query(const char *text, char *buf, size_t cap, int *n_terms);

typedef struct pb_store_hit {
    int64_t chunk_id, doc_id;
    double score; /* BM25: -bm25() (higher is better); vector: cosine; fused: RRF sum */
    char *path, *title, *heading, *text;
    int64_t line_start, line_end;
    size_t byte_start, byte_end;
    int page;
    int64_t n_tokens;
    pb_store_doc_state state; /* PB_DOC_SAME until pb_store_hits_check */
} pb_store_hit;

/* The k best chunks for a query by BM25 (heading column weighted 2, text 1). At most max_per_doc chunks of
 * one document are kept (0 = no limit), so that the list shows distinct sources. 0 hits is not an error. */
pb_status pb_store_search_bm25(pb_store *st, const char *query, int k, int max_per_doc, pb_store_hit **out, int *n_out);
/* The same ranking computed by FTS5's own bm25() (slower on large bases: a B-tree lookup per matching row).
 * pb_store_search_bm25 scores single-word terms itself from fts5vocab postings and falls back to this for
 * phrases; kept as the reference the tests compare with. */
pb_status pb_store_search_bm25_fts(pb_store *st, const char *query, int k, int max_per_doc, pb_store_hit **out,
                                   int *n_out);
/* The k chunks whose stored embeddings (for model name) have the highest cosine similarity with q. */
pb_status pb_store_search_vec(pb_store *st, const char *model, const float *q, int dim, int k, pb_store_hit **out,
                              int *n_out);
/* Reciprocal rank fusion (score = sum 1/(rrf_k + rank), rank from 1) of two ranked lists into k hits. The
 * inputs are consumed (freed); *out is new. */
pb_status pb_store_fuse_rrf(pb_store_hit *a, int na, pb_store_hit *b, int nb, int rrf_k, int k, pb_store_hit **out,
                            int *n_out);
void pb_store_hits_free(pb_store_hit *h, int n);
/* Fills each hit's state (pb_store_doc_state_of, once per document): for the few hits a front end shows or cites, not
 * for the ranking. */
pb_status pb_store_hits_check(pb_store *st, pb_store_hit *h, int n);

/* "path:12-30", "path:12", or "path (p. 3)". */
void pb_store_format_location(const char *path, int64_t line_start, int64_t line_end, int page, char *buf, size_t cap);
/* True when a chunk's text begins with its whole heading as its first line (a plain text file's first line is its
 * title, a Markdown chunk may open with its own "# Heading"): the heading then says nothing the text does not, and
 * the prompt and search output leave it out. */
bool pb_store_heading_repeats(const char *heading, const char *text);

/* ---- embeddings (store_db.c) -------------------------------------------------------------------- */

/* Stores a float16 copy of vec (dim floats) for a chunk, replacing an older one. */
pb_status pb_store_embedding_put(pb_store *st, int64_t chunk_id, const char *model, const float *vec, int dim);
/* Calls fn for each chunk that has no embedding for model yet (id and text), in id order. fn returns false
 * to stop. */
pb_status pb_store_chunks_without_embedding(pb_store *st, const char *model,
                                            bool (*fn)(void *user, int64_t chunk_id, const char *text), void *user);

/* ---- prompt and citations (store_prompt.c) ------------------------------------------------------ */

typedef struct pb_store_citation {
    int num; /* 1-based, as printed "[num]" */
    int64_t chunk_id;
    char *path, *title, *heading;
    int64_t line_start, line_end;
    int page;
    pb_store_doc_state state; /* the hit's (pb_store_hits_check) */
} pb_store_citation;

typedef struct pb_store_prompt {
    char *text; /* the user message: instructions, numbered sources, question (owned) */
    pb_store_citation *cites;
    int n_cites;
    int64_t n_tokens; /* tokens of text by the count function */
    int n_truncated;  /* sources cut short to fit the budget */
} pb_store_prompt;

/* Fits hits (best first) into budget_tokens as numbered sources "[n] (location) heading\ntext" followed
 * by the question, with an instruction to answer only from them and to cite [n]. A hit that does not fit
 * whole is cut at a word boundary when at least 32 tokens remain, otherwise left out (with all after it).
 * PB_ERR_CONTEXT_FULL when not even the instructions and the question fit. */
pb_status pb_store_prompt_build(const char *question, const pb_store_hit *hits, int n_hits, int64_t budget_tokens,
                                pb_store_count_fn count, void *count_user, pb_store_prompt *out);
void pb_store_prompt_free(pb_store_prompt *p);
/* Marks used[i] (i = num - 1, n_cites entries) for every "[num]" / "[num, num]" the answer cites.
 * Returns how many distinct valid citations were found; numbers outside 1..n_cites are counted in
 * *n_invalid (may be NULL). */
int pb_store_cites_used(const char *answer, int n_cites, bool *used, int *n_invalid);

/* ---- FAQ fallback (store_faq.c) ----------------------------------------------------------------- */

/* Adds (or replaces the answer of) a question. */
pb_status pb_store_faq_add(pb_store *st, const char *question, const char *answer, int64_t *id);
/* Imports a .jsonl file (objects with "question"/"answer" or "q"/"a") or a .tsv file (question TAB answer
 * per line; '#' comment lines and blank lines ignored). All or nothing: the first bad line gives
 * PB_ERR_FORMAT naming the file and line, and nothing is added. */
pb_status pb_store_faq_import(pb_store *st, const char *path, int64_t *n_added);
/* Calls fn for each pair in id order; fn returns false to stop. */
pb_status pb_store_faq_list(pb_store *st, bool (*fn)(void *user, int64_t id, const char *q, const char *a), void *user);

typedef struct pb_store_faq_hit {
    int64_t id;
    double score; /* -bm25(), question column weighted 3, answer 1 */
    char *question, *answer;
} pb_store_faq_hit;

/* Best FAQ pair for a question by BM25; PB_ERR_NOT_FOUND when no pair shares a word with it. */
pb_status pb_store_faq_match(pb_store *st, const char *question, pb_store_faq_hit *out);
void pb_store_faq_hit_free(pb_store_faq_hit *m);
/* The fallback answer for callers (ask, run, server) whose generation failed or timed out: the best match,
 * formatted as "[fallback: <reason>; FAQ match, score S]\n<answer>\n(FAQ: <question>)" in *text (free()).
 * PB_ERR_NOT_FOUND when the FAQ has nothing for the question. */
pb_status pb_store_faq_fallback(pb_store *st, const char *question, const char *reason, char **text);

#endif
