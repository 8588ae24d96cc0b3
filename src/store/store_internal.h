/* store_internal.h -- private to the .c files of src/store: the pb_store struct and SQLite helpers (the one place
 * <sqlite3.h> is included). Never include this from tools/ or tests/; use store.h. */
#ifndef PB_STORE_INTERNAL_H
#define PB_STORE_INTERNAL_H

#include "store/store.h"

#include <sqlite3.h>

/* The tokenizer chain of the FTS5 indexes since schema 4 (migrate_v4 in store_db.c spells it out: a migration never
 * changes) and of the query-word table in store_search.c, which must split query words exactly as the index split
 * the text: pb_cjk cuts out CJK characters, porter stems English, unicode61 folds case and diacritics. */
#define PB_STORE_FTS_TOKENIZE "pb_cjk porter unicode61 remove_diacritics 2"

struct pb_store {
    sqlite3 *db;
    char *path;
    int version;           /* PRAGMA user_version as last read or migrated */
    bool readonly;         /* opened by pb_store_open_readonly */
    char *upgrade_error;   /* read-only open below PB_STORE_SCHEMA_VERSION: why the upgrade failed
                              (pb_store_upgrade_error) */
    bool wal;              /* this writer put the database in WAL mode (pb_store_close puts it back) */
    sqlite3_stmt *put_doc; /* cached: hot in ingest */
    sqlite3_stmt *put_chunk;
    bool vocab_ready;        /* temp fts5vocab tables for query-term statistics exist */
    int64_t n_chunks_cached; /* chunk count for term statistics; -1 = unknown (reset by every write) */
    int64_t data_version;    /* PRAGMA data_version when the statistics were last checked: another connection's
                                commit (an ingest while serve runs) changes it, and the caches below are dropped */
    /* C BM25 scorer: row lengths (tokens over all FTS columns) indexed by rowid, and a score array of the
     * same size (all zero between searches); dropped by writes */
    uint32_t *ds_len;
    double *ds_score;
    int64_t ds_n, ds_max;
    double ds_avg;
    bool ds_valid;
};

/* Forgets cached statistics after a write (chunk count, row lengths). */
static inline void pb_store_invalidate(pb_store *st) {
    st->n_chunks_cached = -1;
    st->ds_valid = false;
}

/* pb_error() with SQLite's message: "store '<path>': <what>: <sqlite message>". */
pb_status pb_store_sql_error(pb_store *st, const char *what);
pb_status pb_store_prepare(pb_store *st, const char *sql, sqlite3_stmt **out);
/* Copy of a text column ("" for NULL); NULL only when out of memory. */
char *pb_store_col_dup(sqlite3_stmt *q, int col);
/* The same, made valid UTF-8 (pb_store_utf8_dup): for paths, titles and headings that reach output. */
char *pb_store_col_dup_utf8(sqlite3_stmt *q, int col);

/* Registers the pb_cjk FTS5 tokenizer (store_fts.c) on the store's connection; needed before any statement
 * touches chunks_fts or faq_fts (schema >= 4), so every open does it. An error (no FTS5, an FTS5 API too old)
 * is returned, never a crash. */
pb_status pb_store_fts_register(pb_store *st);

uint16_t pb_store_f32_to_f16(float f);
float pb_store_f16_to_f32(uint16_t h);

#endif
