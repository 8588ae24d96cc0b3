/* store_db.c -- the knowledge base's SQLite file: open, WAL, versioned schema + migrations, documents,
 * chunks, embeddings, metadata. No text processing here. */
#include "store/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- schema ------------------------------------------------------------------------------------ */

/* Version 1: the first layout (kept so that old files can be created by tests and migrated). */
static const char schema_v1[] =
    "PRAGMA application_id = 1346521922;" /* 0x50424b42 */
    "CREATE TABLE documents(id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, hash TEXT NOT NULL,"
    " mtime INTEGER NOT NULL, size INTEGER NOT NULL);"
    "CREATE TABLE chunks(id INTEGER PRIMARY KEY, doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
    " seq INTEGER NOT NULL, byte_start INTEGER NOT NULL, byte_end INTEGER NOT NULL, text TEXT NOT NULL);"
    "CREATE INDEX chunks_doc ON chunks(doc_id);"
    "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id');"
    "CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN"
    " INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text); END;"
    "CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN"
    " INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); END;";

/* 1 -> 2: positions, titles, heading paths, token counts; FTS5 gains the heading column and the porter
 * stemmer, so it is rebuilt. Version-1 chunks have no line numbers: their documents get an empty hash so
 * the next ingest re-chunks them (search keeps working meanwhile). */
static const char migrate_v2[] =
    "ALTER TABLE documents ADD COLUMN title TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE chunks ADD COLUMN line_start INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE chunks ADD COLUMN line_end INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE chunks ADD COLUMN page INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE chunks ADD COLUMN heading TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE chunks ADD COLUMN n_tokens INTEGER NOT NULL DEFAULT 0;"
    "DROP TRIGGER chunks_ai; DROP TRIGGER chunks_ad; DROP TABLE chunks_fts;"
    "CREATE VIRTUAL TABLE chunks_fts USING fts5(heading, text, content='chunks', content_rowid='id',"
    " tokenize='porter unicode61 remove_diacritics 2');"
    "CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN"
    " INSERT INTO chunks_fts(rowid, heading, text) VALUES (new.id, new.heading, new.text); END;"
    "CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN"
    " INSERT INTO chunks_fts(chunks_fts, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text); END;"
    "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');"
    "UPDATE documents SET hash = '';";

/* 2 -> 3: metadata, float16 embeddings, the FAQ with its own FTS5 index. */
static const char migrate_v3[] =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE embeddings(chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,"
    " model TEXT NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL);"
    "CREATE INDEX embeddings_model ON embeddings(model);"
    "CREATE TABLE faq(id INTEGER PRIMARY KEY, question TEXT NOT NULL UNIQUE, answer TEXT NOT NULL,"
    " added INTEGER NOT NULL);"
    "CREATE VIRTUAL TABLE faq_fts USING fts5(question, answer, content='faq', content_rowid='id',"
    " tokenize='porter unicode61 remove_diacritics 2');"
    "CREATE TRIGGER faq_ai AFTER INSERT ON faq BEGIN"
    " INSERT INTO faq_fts(rowid, question, answer) VALUES (new.id, new.question, new.answer); END;"
    "CREATE TRIGGER faq_ad AFTER DELETE ON faq BEGIN"
    " INSERT INTO faq_fts(faq_fts, rowid, question, answer) VALUES ('delete', old.id, old.question, old.answer); END;"
    "CREATE TRIGGER faq_au AFTER UPDATE ON faq BEGIN"
    " INSERT INTO faq_fts(faq_fts, rowid, question, answer) VALUES ('delete', old.id, old.question, old.answer);"
    " INSERT INTO faq_fts(rowid, question, answer) VALUES (new.id, new.question, new.answer); END;";

/* 3 -> 4: both FTS5 indexes get the pb_cjk tokenizer (store_fts.c: each CJK character a token, so a Chinese or
 * Japanese word inside a run without spaces is found; other text is tokenized as before). An external-content
 * index is rebuilt from its table, so nothing is re-chunked; the triggers belong to chunks and faq, survive the
 * drop and write to the new tables by name. */
static const char migrate_v4[] =
    "DROP TABLE chunks_fts;"
    "CREATE VIRTUAL TABLE chunks_fts USING fts5(heading, text, content='chunks', content_rowid='id',"
    " tokenize='pb_cjk porter unicode61 remove_diacritics 2');"
    "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');"
    "DROP TABLE faq_fts;"
    "CREATE VIRTUAL TABLE faq_fts USING fts5(question, answer, content='faq', content_rowid='id',"
    " tokenize='pb_cjk porter unicode61 remove_diacritics 2');"
    "INSERT INTO faq_fts(faq_fts) VALUES ('rebuild');";

static const char *const steps[PB_STORE_SCHEMA_VERSION] = {schema_v1, migrate_v2, migrate_v3, migrate_v4};

/* ---- helpers ----------------------------------------------------------------------------------- */

/* What "database is locked" means to the user, after SQLite's words: another writer kept the file past the busy
 * timeout (or, with the file not yet in WAL mode, held a lock that cannot be waited for). "" for other errors. */
static const char *busy_hint(pb_store *st) {
    int rc = sqlite3_errcode(st->db);
    return rc == SQLITE_BUSY || rc == SQLITE_LOCKED
               ? " (another program is writing this knowledge base; try again when it has finished)"
               : "";
}

pb_status pb_store_sql_error(pb_store *st, const char *what) {
    int rc = sqlite3_errcode(st->db);
    pb_status s = PB_ERR_IO;
    if (rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT) s = PB_ERR_FORMAT;
    if (rc == SQLITE_NOMEM) s = PB_ERR_NOMEM;
    return pb_error(s, "store '%s': %s: %s%s", st->path, what, sqlite3_errmsg(st->db), busy_hint(st));
}

pb_status pb_store_exec(pb_store *st, const char *sql) {
    char *msg = NULL;
    if (sqlite3_strnicmp(sql, "SELECT", 6) != 0) pb_store_invalidate(st);
    if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        pb_status s = pb_error(sqlite3_errcode(st->db) == SQLITE_NOTADB ? PB_ERR_FORMAT : PB_ERR_IO, "store '%s': %s%s",
                               st->path, msg ? msg : sqlite3_errmsg(st->db), busy_hint(st));
        sqlite3_free(msg);
        return s;
    }
    return PB_OK;
}

pb_status pb_store_prepare(pb_store *st, const char *sql, sqlite3_stmt **out) {
    if (sqlite3_prepare_v2(st->db, sql, -1, out, NULL) != SQLITE_OK) return pb_store_sql_error(st, "prepare");
    return PB_OK;
}

pb_status pb_store_query_int(pb_store *st, const char *sql, int64_t *out) {
    sqlite3_stmt *q;
    pb_status s = pb_store_prepare(st, sql, &q);
    if (s) return s;
    *out = 0;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(q, 0);
    else if (rc != SQLITE_DONE)
        s = pb_store_sql_error(st, "query");
    sqlite3_finalize(q);
    return s;
}

char *pb_store_col_dup(sqlite3_stmt *q, int col) {
    const unsigned char *t = sqlite3_column_text(q, col);
    return pb_strdup(t ? (const char *)t : "");
}

char *pb_store_col_dup_utf8(sqlite3_stmt *q, int col) {
    return pb_store_utf8_dup((const char *)sqlite3_column_text(q, col));
}

/* ---- open / migrate ---------------------------------------------------------------------------- */

/* "file:" URI of path for SQLite (percent-escapes what a URI gives meaning to), with ?immutable=1: the
 * read-only fallback for a WAL database whose folder allows no -shm file. Heap string or NULL. */
static char *immutable_uri(const char *path) {
    size_t n = strlen(path), cap = n * 3 + 32;
    char *u = pb_malloc(cap), *o = u;
    if (!u) return NULL;
    o += sprintf(o, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (*p == '%' || *p == '?' || *p == '#' || *p < 0x21 || *p >= 0x7f)
            o += sprintf(o, "%%%02X", *p);
        else
            *o++ = (char)*p;
    }
    strcpy(o, "?immutable=1");
    return u;
}

/* "a symbolic link to '<where it leads>'" into buf when path is a symbolic link (its target made absolute and
 * symlink-free where it exists, else as the link says); false when path is no link. */
static bool link_text(const char *path, char *buf, size_t cap) {
    struct stat sb;
    if (lstat(path, &sb) != 0 || !S_ISLNK(sb.st_mode)) return false;
    char *real = pb_realpath(path), raw[1024];
    ssize_t n = real ? 0 : readlink(path, raw, sizeof raw - 1);
    raw[n > 0 ? n : 0] = 0;
    snprintf(buf, cap, "a symbolic link to '%s'", real ? real : raw);
    free(real);
    return true;
}

/* A knowledge base about to be created: its file is made here first (O_EXCL: this process is its creator), and a -wal
 * or -shm already at its name is removed. They belong to a file deleted or renamed away (SQLite names them after the
 * path), perhaps still open in a `serve`: the new file shared that -shm index with the old one, whose connection
 * kept it in use, and the ingest's checkpoint failed as "database disk image is malformed", leaving its writes in a
 * -wal that the next file put at that name (a backup restored) was read through. The old connection keeps the index it
 * has mapped. */
static void create_fresh(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return; /* there already (another writer made it meanwhile), or SQLite will say why not */
    close(fd);
    static const char *const ext[] = {"-wal", "-shm"};
    for (size_t i = 0; i < 2; i++) {
        char *side = pb_malloc(strlen(path) + 5);
        if (!side) return;
        sprintf(side, "%s%s", path, ext[i]);
        unlink(side);
        free(side);
    }
}

static pb_status open_db(const char *path, bool readonly, pb_store **out) {
    *out = NULL;
    if (!path || !*path) return pb_error(PB_ERR_INVALID_ARG, "store: empty database path");
    if (!readonly && strcmp(path, ":memory:") != 0) {
        /* the database is an output too: never turn a device, FIFO or symlink into a database. A link is refused in
         * a knowledge base's words: it is written in place, never replaced, so pb_output_check's "output 'F' is a
         * symbolic link: refusing to replace it" misled ingest, faq add and the upgrade of search, ask and serve */
        char lt[1200];
        if (link_text(path, lt, sizeof lt))
            return pb_error(PB_ERR_IO,
                            "store '%s': %s: a knowledge base is written only under its own name (name that "
                            "file instead)",
                            path, lt);
        pb_status s = pb_output_check(path);
        if (s) return pb_error_prefix(s, "store: ");
        struct stat sb;
        if (lstat(path, &sb) != 0 && errno == ENOENT) create_fresh(path);
    }
    pb_store *st = pb_calloc(1, sizeof *st);
    if (!st) return PB_ERR_NOMEM;
    st->path = pb_strdup(path);
    if (!st->path) {
        free(st);
        return PB_ERR_NOMEM;
    }
    st->readonly = readonly;
    int flags = readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    int rc = sqlite3_open_v2(path, &st->db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        pb_status s = pb_error(PB_ERR_IO, "store '%s': cannot open: %s", path,
                               st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
        pb_store_close(st);
        return s;
    }
    sqlite3_busy_timeout(st->db, 10000);
    sqlite3_extended_result_codes(st->db, 0);
    /* Reading the application id is the first real access: a non-SQLite file fails here. */
    int64_t app = 0;
    pb_status s = pb_store_query_int(st, "PRAGMA application_id", &app);
    int first_rc = s ? sqlite3_errcode(st->db) : SQLITE_OK;
    if (s && readonly && (first_rc == SQLITE_CANTOPEN || first_rc == SQLITE_READONLY)) {
        /* A WAL database in a folder we cannot write: SQLite cannot create the -shm index. Read the
         * file as immutable (no locking; fine for a knowledge base nobody is writing meanwhile). */
        char *uri = immutable_uri(path);
        sqlite3_close_v2(st->db);
        st->db = NULL;
        rc = uri ? sqlite3_open_v2(uri, &st->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL)
                 : SQLITE_NOMEM;
        free(uri);
        if (rc != SQLITE_OK) {
            s = pb_error(PB_ERR_IO, "store '%s': cannot open read-only: %s", path,
                         st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
            pb_store_close(st);
            return s;
        }
        sqlite3_extended_result_codes(st->db, 0);
        s = pb_store_query_int(st, "PRAGMA application_id", &app);
    }
    if (s) {
        int code = sqlite3_errcode(st->db);
        if (code ==
            SQLITE_NOTADB) /* said once, in words: not "...not an SQLite database): ... file is not a database" */
            s = pb_error(PB_ERR_FORMAT, "store '%s': not a knowledge base (not an SQLite database)", path);
        pb_store_close(st);
        return s;
    }
    if (app != 0 && app != PB_STORE_APP_ID) {
        pb_store_close(st);
        return pb_error(PB_ERR_FORMAT, "store '%s': not a pocketbrain knowledge base (application_id %lld)", path,
                        (long long)app);
    }
    /* before any statement reads an FTS5 table (the migrations and every search do) */
    if ((s = pb_store_fts_register(st))) {
        pb_store_close(st);
        return s;
    }
    int64_t ver = 0, n_tables = 0;
    if ((s = pb_store_query_int(st, "PRAGMA user_version", &ver)) ||
        (s = pb_store_query_int(st, "SELECT count(*) FROM sqlite_master", &n_tables))) {
        pb_store_close(st);
        return s;
    }
    if (app == 0 && n_tables > 0) {
        pb_store_close(st);
        return pb_error(PB_ERR_FORMAT, "store '%s': an SQLite database of another program (no pocketbrain id)", path);
    }
    if (ver > PB_STORE_SCHEMA_VERSION) {
        pb_store_close(st);
        return pb_error(PB_ERR_UNSUPPORTED, "store '%s': schema version %lld is newer than this build's %d", path,
                        (long long)ver, PB_STORE_SCHEMA_VERSION);
    }
    st->version = (int)ver;
    st->n_chunks_cached = -1;
    if (readonly) {
        /* an older schema is for pb_store_open_readonly to upgrade or refuse; an empty database is never written */
        if (ver == 0) {
            pb_store_close(st);
            return pb_error(PB_ERR_UNSUPPORTED,
                            "store '%s': an empty database, not a knowledge base yet (fill it with ingest)", path);
        }
        if ((s = pb_store_exec(st, "PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY;"))) {
            pb_store_close(st);
            return s;
        }
        *out = st;
        return PB_OK;
    }
    /* WAL: readers never block the writer, and a killed writer leaves the last committed state. */
    if ((s = pb_store_exec(st, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"
                               " PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY;"))) {
        pb_store_close(st);
        return s;
    }
    st->wal = true;
    *out = st;
    return PB_OK;
}

/* The error text after "store '<path>': " (or "store: "), where the file is already named by the caller. */
static const char *after_store_prefix(const char *e, const char *path) {
    size_t n = strlen(path);
    if (strncmp(e, "store '", 7) == 0 && strncmp(e + 7, path, n) == 0 && strncmp(e + 7 + n, "': ", 3) == 0)
        return e + 7 + n + 3;
    return strncmp(e, "store: ", 7) == 0 ? e + 7 : e;
}

/* Every error of a migration step says which step, once: "store 'F': schema upgrade 3 -> 4: database is locked"
 * (the lock, the user_version read and the commit said only "store 'F': database is locked"). */
static pb_status step_error(pb_store *st, pb_status s, int next) {
    char why[1024];
    snprintf(why, sizeof why, "%s", after_store_prefix(pb_last_error(), st->path));
    return pb_error(s, "store '%s': schema upgrade %d -> %d: %s", st->path, next - 1, next, why);
}

static pb_status migrate_to(pb_store *st, int target) {
    while (st->version < target) {
        int next = st->version + 1;
        char sql[64];
        pb_status s = pb_store_begin(st);
        if (s) return step_error(st, s, next);
        /* another connection may have migrated while we waited for the write lock */
        int64_t now = 0;
        if ((s = pb_store_query_int(st, "PRAGMA user_version", &now))) {
            pb_store_rollback(st);
            return step_error(st, s, next);
        }
        if (now >= next) {
            pb_store_rollback(st);
            st->version = (int)now;
            continue;
        }
        if ((s = pb_store_exec(st, steps[next - 1]))) {
            pb_store_rollback(st);
            return step_error(st, s, next);
        }
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", next);
        if ((s = pb_store_exec(st, sql)) || (s = pb_store_commit(st))) {
            pb_store_rollback(st);
            return step_error(st, s, next);
        }
        st->version = next;
    }
    return PB_OK;
}

pb_status pb_store_migrate(pb_store *st) { return migrate_to(st, PB_STORE_SCHEMA_VERSION); }

pb_status pb_store_open(const char *path, pb_store **out) {
    pb_status s = open_db(path, false, out);
    if (s) return s;
    if ((s = pb_store_migrate(*out))) {
        pb_store_close(*out);
        *out = NULL;
    }
    return s;
}

/* Why the upgrade of a read-only open failed, in a reader's words: search, ask and serve asked to read, so the writer's
 * own error ("output 'F' is a symbolic link: refusing to replace it", SQLite's "attempt to write a readonly database")
 * spoke of outputs and writes they never asked for. The cause is looked up on the file (a link, the file or its folder
 * not writable, a read-only file system); a lock or another failure keeps the upgrade's own error, which names the
 * step. werr: that error without its "store 'F': ". */
static void reader_why(const char *path, const char *werr, char *why, size_t cap) {
    char lt[1200], dir[4096];
    if (link_text(path, lt, sizeof lt)) {
        snprintf(why, cap, "it is %.900s, and a knowledge base is upgraded only under its own name", lt);
        return;
    }
    if (access(path, W_OK) != 0) {
        if (errno == EROFS)
            snprintf(why, cap, "it is on a read-only file system");
        else if (errno == EACCES)
            snprintf(why, cap, "this user may not write the file");
        else
            snprintf(why, cap, "the file cannot be written: %s", strerror(errno));
        return;
    }
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    if (access(dir, W_OK) != 0) {
        snprintf(why, cap, "%s, where an upgrade writes its journal file",
                 errno == EROFS ? "its folder is on a read-only file system" : "this user may not write in its folder");
        return;
    }
    const char *hint = strstr(werr, " (another program is writing"); /* busy_hint's: said here in front */
    if (strstr(werr, "database is locked"))
        snprintf(why, cap, "another program is writing it (%.*s)", hint ? (int)(hint - werr) : (int)strlen(werr), werr);
    else
        snprintf(why, cap, "the upgrade failed: %s", werr);
}

pb_status pb_store_open_readonly(const char *path, pb_store **out) {
    pb_status s = open_db(path, true, out);
    if (s || (*out)->version >= PB_STORE_SCHEMA_VERSION) return s;
    /* A knowledge base from an earlier build: upgraded here where it is writable, as the next ingest would (each step
     * one transaction), so search and ask work the same after an update. Where it cannot be (a symlink, read-only
     * media, another writer holding the lock, a step that fails) schema 3 and up is read as it is: everything works
     * but what the newer schema adds (4: CJK words inside runs without spaces), and the upgrade's error is kept for
     * pb_store_upgrade_error. It used to be dropped: the caller could only guess why, and schema 1 and 2 were refused
     * as "needs write access" without an upgrade tried, writable or not. */
    pb_store_close(*out);
    *out = NULL;
    pb_store *w = NULL;
    char why[1024] = "";
    if ((s = pb_store_open(path, &w)) == PB_OK)
        pb_store_close(w);
    else
        reader_why(path, after_store_prefix(pb_last_error(), path), why, sizeof why);
    if ((s = open_db(path, true, out))) return s;
    pb_store *st = *out;
    if (st->version >= PB_STORE_SCHEMA_VERSION) return PB_OK; /* upgraded meanwhile (here or by another writer) */
    if (!why[0]) snprintf(why, sizeof why, "another program took it back to schema %d", st->version);
    if (st->version < PB_STORE_MIN_READ_VERSION) {
        const int v = st->version;
        pb_store_close(st);
        *out = NULL;
        return pb_error(PB_ERR_UNSUPPORTED,
                        "store '%s': schema version %d must be upgraded to %d to be read, and it could not be "
                        "upgraded here: %s (run `pocketbrain ingest --db` on the file itself where it is writable)",
                        path, v, PB_STORE_SCHEMA_VERSION, why);
    }
    if (!(st->upgrade_error = pb_strdup(why))) {
        pb_store_close(st);
        *out = NULL;
        return PB_ERR_NOMEM;
    }
    return PB_OK;
}

const char *pb_store_upgrade_error(const pb_store *st) { return st ? st->upgrade_error : NULL; }

pb_status pb_store_open_at_version(const char *path, int version, pb_store **out) {
    if (version < 1 || version > PB_STORE_SCHEMA_VERSION)
        return pb_error(PB_ERR_INVALID_ARG, "store: no schema version %d", version);
    pb_status s = open_db(path, false, out);
    if (s) return s;
    if ((*out)->version > version) {
        pb_store_close(*out);
        *out = NULL;
        return pb_error(PB_ERR_INVALID_ARG, "store '%s': already at schema version > %d", path, version);
    }
    if ((s = migrate_to(*out, version))) {
        pb_store_close(*out);
        *out = NULL;
    }
    return s;
}

void pb_store_close(pb_store *st) {
    if (!st) return;
    if (st->put_doc) sqlite3_finalize(st->put_doc);
    if (st->put_chunk) sqlite3_finalize(st->put_chunk);
    free(st->ds_len);
    free(st->ds_score);
    if (st->db && st->wal) {
        /* WAL while a writer works (readers never block it); back to a plain rollback-journal file at rest, so
         * the readers that follow (search, ask, a read-only folder) leave no -wal / -shm files beside the
         * database (a read-only connection cannot checkpoint them away). With another connection still open the
         * switch fails at once (no busy wait) and the database simply stays in WAL mode. Its -wal file is emptied
         * first all the same (a reader mid-search is waited for, briefly): SQLite pairs a -wal with whatever database
         * file has its name, so a backup renamed over the file, or a file deleted and made anew, while `serve` held
         * the old one open, was read through the old file's frames (the restored backup showed, and at the next
         * checkpoint became, the knowledge base it replaced). */
        sqlite3_busy_timeout(st->db, 500);
        sqlite3_exec(st->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
        sqlite3_busy_timeout(st->db, 0);
        sqlite3_exec(st->db, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL);
    }
    if (st->db) sqlite3_close_v2(st->db);
    free(st->upgrade_error);
    free(st->path);
    free(st);
}

int pb_store_schema_version(pb_store *st) { return st->version; }
const char *pb_store_path(const pb_store *st) { return st->path; }

pb_status pb_store_begin(pb_store *st) { return pb_store_exec(st, "BEGIN IMMEDIATE"); }
pb_status pb_store_commit(pb_store *st) { return pb_store_exec(st, "COMMIT"); }
void pb_store_rollback(pb_store *st) {
    if (!sqlite3_get_autocommit(st->db)) sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

pb_status pb_store_integrity(pb_store *st, bool *ok, char *msg, size_t cap) {
    sqlite3_stmt *q;
    pb_status s = pb_store_prepare(st, "PRAGMA integrity_check", &q);
    if (s) return s;
    *ok = false;
    if (cap) msg[0] = 0;
    if (sqlite3_step(q) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(q, 0);
        *ok = t && strcmp(t, "ok") == 0;
        if (cap) snprintf(msg, cap, "%s", t ? t : "");
    } else {
        s = pb_store_sql_error(st, "integrity_check");
    }
    sqlite3_finalize(q);
    return s;
}

pb_status pb_store_get_stats(pb_store *st, pb_store_stats *out) {
    memset(out, 0, sizeof *out);
    pb_status s;
    if ((s = pb_store_query_int(st, "SELECT count(*) FROM documents", &out->n_docs)) ||
        (s = pb_store_query_int(st, "SELECT count(*) FROM chunks", &out->n_chunks)) ||
        (s = pb_store_query_int(st, "SELECT coalesce(sum(length(CAST(text AS BLOB))),0) FROM chunks",
                                &out->text_bytes)))
        return s;
    if (st->version >= 3) {
        if ((s = pb_store_query_int(st, "SELECT count(*) FROM embeddings", &out->n_embeddings)) ||
            (s = pb_store_query_int(st, "SELECT count(*) FROM faq", &out->n_faq)))
            return s;
    }
    return PB_OK;
}

pb_status pb_store_meta_set(pb_store *st, const char *key, const char *value) {
    sqlite3_stmt *q;
    pb_status s = pb_store_prepare(st, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", &q);
    if (s) return s;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, value, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) s = pb_store_sql_error(st, "meta set");
    sqlite3_finalize(q);
    return s;
}

pb_status pb_store_meta_get(pb_store *st, const char *key, char *buf, size_t cap) {
    sqlite3_stmt *q;
    pb_status s = pb_store_prepare(st, "SELECT value FROM meta WHERE key = ?", &q);
    if (s) return s;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        snprintf(buf, cap, "%s", (const char *)sqlite3_column_text(q, 0));
    else if (rc == SQLITE_DONE)
        s = pb_error(PB_ERR_NOT_FOUND, "store: no meta key '%s'", key);
    else
        s = pb_store_sql_error(st, "meta get");
    sqlite3_finalize(q);
    return s;
}

/* ---- documents --------------------------------------------------------------------------------- */

pb_status pb_store_doc_lookup(pb_store *st, const char *path, pb_store_doc_info *out) {
    sqlite3_stmt *q;
    pb_status s = pb_store_prepare(st, "SELECT id, hash, mtime, size FROM documents WHERE path = ?", &q);
    if (s) return s;
    sqlite3_bind_text(q, 1, path, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        out->id = sqlite3_column_int64(q, 0);
        snprintf(out->hash, sizeof out->hash, "%s", (const char *)sqlite3_column_text(q, 1));
        out->mtime = sqlite3_column_int64(q, 2);
        out->size = sqlite3_column_int64(q, 3);
    } else if (rc == SQLITE_DONE) {
        s = pb_error(PB_ERR_NOT_FOUND, "store: no document '%s'", path);
    } else {
        s = pb_store_sql_error(st, "document lookup");
    }
    sqlite3_finalize(q);
    return s;
}

static pb_status delete_doc_id(pb_store *st, int64_t id) {
    char sql[256];
    pb_store_invalidate(st);
    pb_status s;
    if (st->version >= 3) {
        snprintf(sql, sizeof sql,
                 "DELETE FROM embeddings WHERE chunk_id IN (SELECT id FROM chunks WHERE doc_id = %lld)", (long long)id);
        if ((s = pb_store_exec(st, sql))) return s;
    }
    snprintf(sql, sizeof sql, "DELETE FROM chunks WHERE doc_id = %lld; DELETE FROM documents WHERE id = %lld",
             (long long)id, (long long)id);
    return pb_store_exec(st, sql);
}

pb_status pb_store_doc_delete(pb_store *st, const char *path) {
    pb_store_doc_info info;
    pb_status s = pb_store_doc_lookup(st, path, &info);
    if (s) return s;
    return delete_doc_id(st, info.id);
}

/* Only the few cited files are looked at, per query: a stat each, and a read only when the mtime alone moved. */
pb_status pb_store_doc_state_of(pb_store *st, int64_t doc_id, pb_store_doc_state *out) {
    *out = PB_DOC_SAME;
    sqlite3_stmt *q;
    pb_status s = pb_store_prepare(st, "SELECT path, hash, mtime, size FROM documents WHERE id = ?", &q);
    if (s) return s;
    sqlite3_bind_int64(q, 1, doc_id);
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) { /* replaced or removed by an ingest since the search: nothing to tell */
        s = rc == SQLITE_DONE ? PB_OK : pb_store_sql_error(st, "document state");
        sqlite3_finalize(q);
        return s;
    }
    /* the path as stored, raw bytes (the hit's copy has U+FFFD for a name that is not UTF-8) */
    const char *path = (const char *)sqlite3_column_text(q, 0), *hash = (const char *)sqlite3_column_text(q, 1);
    int64_t mtime = sqlite3_column_int64(q, 2), size = sqlite3_column_int64(q, 3);
    struct stat sb;
    if (!path || stat(path, &sb) != 0) {
        if (path && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)) *out = PB_DOC_GONE;
    } else if (!S_ISREG(sb.st_mode)) {
        *out = PB_DOC_GONE;
    } else if ((int64_t)sb.st_size != size) {
        *out = PB_DOC_CHANGED;
    } else if ((int64_t)sb.st_mtime != mtime) {
        /* touched, or edited to the same size: the bytes tell (what ingest itself compares) */
        pb_map m;
        char now[65];
        if (size > PB_STORE_STATE_HASH_MAX || pb_map_open(path, false, &m) != PB_OK)
            *out = PB_DOC_CHANGED;
        else {
            if (pb_store_sha256_hex(m.data, m.size, now) != PB_OK || !hash || strcmp(now, hash) != 0)
                *out = PB_DOC_CHANGED;
            pb_map_close(&m);
        }
    }
    sqlite3_finalize(q);
    return PB_OK;
}

const char *pb_store_doc_state_text(pb_store_doc_state s) {
    return s == PB_DOC_CHANGED ? "changed since ingest" : s == PB_DOC_GONE ? "file is gone" : "";
}

const char *pb_store_doc_state_name(pb_store_doc_state s) {
    return s == PB_DOC_CHANGED ? "changed" : s == PB_DOC_GONE ? "gone" : "unchanged";
}

pb_status pb_store_doc_touch(pb_store *st, int64_t doc_id, int64_t mtime) {
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE documents SET mtime = %lld WHERE id = %lld", (long long)mtime, (long long)doc_id);
    return pb_store_exec(st, sql);
}

pb_status pb_store_doc_put(pb_store *st, const pb_store_doc *doc, const pb_store_chunk *chunks, int64_t n_chunks,
                           int64_t *doc_id) {
    if (st->version < 2) return pb_error(PB_ERR_UNSUPPORTED, "store: writing needs schema version >= 2");
    pb_store_doc_info old;
    pb_status s = pb_store_doc_lookup(st, doc->path, &old);
    if (s == PB_OK) {
        if ((s = delete_doc_id(st, old.id))) return s;
    } else if (s != PB_ERR_NOT_FOUND) {
        return s;
    }
    if (!st->put_doc &&
        (s = pb_store_prepare(st, "INSERT INTO documents(path, hash, mtime, size, title) VALUES (?,?,?,?,?)",
                              &st->put_doc)))
        return s;
    if (!st->put_chunk &&
        (s = pb_store_prepare(st,
                              "INSERT INTO chunks(doc_id, seq, byte_start, byte_end, text, line_start, line_end, page,"
                              " heading, n_tokens) VALUES (?,?,?,?,?,?,?,?,?,?)",
                              &st->put_chunk)))
        return s;
    sqlite3_stmt *q = st->put_doc;
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, doc->path, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, doc->hash, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, doc->mtime);
    sqlite3_bind_int64(q, 4, doc->size);
    sqlite3_bind_text(q, 5, doc->title ? doc->title : "", -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) return pb_store_sql_error(st, "insert document");
    int64_t id = sqlite3_last_insert_rowid(st->db);
    q = st->put_chunk;
    for (int64_t i = 0; i < n_chunks; i++) {
        const pb_store_chunk *c = &chunks[i];
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, id);
        sqlite3_bind_int64(q, 2, i);
        sqlite3_bind_int64(q, 3, (sqlite3_int64)c->byte_start);
        sqlite3_bind_int64(q, 4, (sqlite3_int64)c->byte_end);
        sqlite3_bind_text(q, 5, c->text, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 6, c->line_start);
        sqlite3_bind_int64(q, 7, c->line_end);
        sqlite3_bind_int(q, 8, c->page);
        sqlite3_bind_text(q, 9, c->heading ? c->heading : "", -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 10, c->n_tokens);
        if (sqlite3_step(q) != SQLITE_DONE) return pb_store_sql_error(st, "insert chunk");
    }
    if (doc_id) *doc_id = id;
    pb_store_invalidate(st);
    return PB_OK;
}

/* ---- prune ------------------------------------------------------------------------------------- */

pb_status pb_store_seen_reset(pb_store *st) {
    return pb_store_exec(st, "CREATE TEMP TABLE IF NOT EXISTS seen(path TEXT PRIMARY KEY); DELETE FROM temp.seen;");
}

pb_status pb_store_seen_add(pb_store *st, const char *path) {
    sqlite3_stmt *q;
    pb_status s = pb_store_prepare(st, "INSERT OR IGNORE INTO temp.seen(path) VALUES (?)", &q);
    if (s) return s;
    sqlite3_bind_text(q, 1, path, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) s = pb_store_sql_error(st, "seen");
    sqlite3_finalize(q);
    return s;
}

pb_status pb_store_seen_add_under(pb_store *st, const char *dir) {
    size_t dl = strlen(dir);
    char *prefix = pb_malloc(dl + 2);
    if (!prefix) return PB_ERR_NOMEM;
    memcpy(prefix, dir, dl);
    prefix[dl] = '/';
    prefix[dl + 1] = 0;
    sqlite3_stmt *q;
    pb_status s = pb_store_prepare(st,
                                   "INSERT OR IGNORE INTO temp.seen(path) SELECT path FROM documents"
                                   " WHERE substr(path, 1, length(?1)) = ?1",
                                   &q);
    if (!s) {
        sqlite3_bind_text(q, 1, prefix, -1, SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE) s = pb_store_sql_error(st, "seen");
        sqlite3_finalize(q);
    }
    free(prefix);
    return s;
}

/* Whether a document the walk did not see is gone: its path leads to no file (or to a folder now), or it is a link
 * whose file was seen under its own name (why says which). A file still there is kept: one named on an earlier command
 * line with an extension the walk does not take (notes.log), or in a hidden folder, was removed as "file is gone". */
static bool unseen_gone(pb_store *st, const char *path, char *why, size_t cap) {
    struct stat sb, lsb;
    if (stat(path, &sb) != 0) {
        snprintf(why, cap, "file is gone");
        return errno == ENOENT || errno == ENOTDIR;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(why, cap, "file is gone");
        return true;
    }
    if (lstat(path, &lsb) != 0 || !S_ISLNK(lsb.st_mode)) return false;
    char *real = pb_realpath(path);
    sqlite3_stmt *q;
    bool seen = false;
    if (real && pb_store_prepare(st, "SELECT 1 FROM temp.seen WHERE path = ?", &q) == PB_OK) {
        sqlite3_bind_text(q, 1, real, -1, SQLITE_STATIC);
        seen = sqlite3_step(q) == SQLITE_ROW;
        sqlite3_finalize(q);
    }
    if (seen) snprintf(why, cap, "a link to '%s', which is kept under that name", real);
    free(real);
    return seen;
}

pb_status pb_store_prune_unseen(pb_store *st, const char *const *roots, int n_roots,
                                void (*on_removed)(void *user, const char *path, const char *why), void *user,
                                int64_t *n_removed) {
    *n_removed = 0;
    for (int r = 0; r < n_roots; r++) {
        /* "under root": equal, or root + '/' as a prefix (compared with substr, not LIKE/GLOB, so that
         * '%', '_', '*' in names mean nothing). */
        sqlite3_stmt *q;
        pb_status s = pb_store_prepare(st,
                                       "SELECT id, path FROM documents WHERE (path = ?1 OR substr(path, 1, length(?2))"
                                       " = ?2) AND path NOT IN (SELECT path FROM temp.seen)",
                                       &q);
        if (s) return s;
        char *prefix = pb_malloc(strlen(roots[r]) + 2);
        if (!prefix) {
            sqlite3_finalize(q);
            return PB_ERR_NOMEM;
        }
        size_t rl = strlen(roots[r]);
        memcpy(prefix, roots[r], rl);
        if (rl && prefix[rl - 1] == '/')
            prefix[rl] = 0;
        else
            prefix[rl] = '/', prefix[rl + 1] = 0;
        sqlite3_bind_text(q, 1, roots[r], -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, prefix, -1, SQLITE_STATIC);
        int64_t *ids = NULL;
        char **paths = NULL;
        int64_t n = 0, cap = 0;
        int rc;
        while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                int64_t *ni = realloc(ids, (size_t)cap * sizeof *ids);
                char **np = realloc(paths, (size_t)cap * sizeof *paths);
                if (ni) ids = ni;
                if (np) paths = np;
                if (!ni || !np) {
                    rc = SQLITE_NOMEM;
                    break;
                }
            }
            ids[n] = sqlite3_column_int64(q, 0);
            paths[n] = pb_store_col_dup(q, 1);
            n++;
        }
        if (rc != SQLITE_DONE)
            s = rc == SQLITE_NOMEM ? pb_error(PB_ERR_NOMEM, "store: out of memory") : pb_store_sql_error(st, "prune");
        sqlite3_finalize(q);
        free(prefix);
        for (int64_t i = 0; i < n; i++) {
            char why[1200];
            bool gone = !paths[i] || unseen_gone(st, paths[i], why, sizeof why);
            if (!s && gone) s = delete_doc_id(st, ids[i]);
            if (!s && gone) {
                (*n_removed)++;
                if (on_removed) on_removed(user, paths[i] ? paths[i] : "", why);
            }
            free(paths[i]);
        }
        free(ids);
        free(paths);
        if (s) return s;
    }
    return PB_OK;
}

/* ---- moved files ------------------------------------------------------------------------------- */

pb_status pb_store_added_note(pb_store *st, const char *path, const char *hash) {
    pb_status s = pb_store_exec(st, "CREATE TEMP TABLE IF NOT EXISTS added(path TEXT PRIMARY KEY, hash TEXT NOT NULL);"
                                    "CREATE INDEX IF NOT EXISTS temp.added_hash ON added(hash);");
    if (s) return s;
    sqlite3_stmt *q;
    if ((s = pb_store_prepare(st, "INSERT OR REPLACE INTO temp.added(path, hash) VALUES (?, ?)", &q))) return s;
    sqlite3_bind_text(q, 1, path, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, hash, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_DONE) s = pb_store_sql_error(st, "note document");
    sqlite3_finalize(q);
    return s;
}

/* Whether the document at old_path is the file now at new_path under an old name: gone, or a link to it. */
static bool moved_from(const char *old_path, const char *new_path) {
    struct stat sb;
    if (lstat(old_path, &sb) != 0) return errno == ENOENT || errno == ENOTDIR;
    char *real = pb_realpath(old_path);
    bool same = real && strcmp(real, new_path) == 0;
    free(real);
    return same;
}

pb_status pb_store_prune_moved(pb_store *st, void (*on_moved)(void *user, const char *old_path, const char *new_path),
                               void *user, int64_t *n_removed) {
    *n_removed = 0;
    int64_t n_noted = 0;
    pb_status s = pb_store_query_int(st, "SELECT count(*) FROM sqlite_temp_master WHERE name = 'added'", &n_noted);
    if (s || n_noted == 0) return s; /* nothing written in this run */
    /* one pass over documents per batch (there is no index on hash), probing the few noted hashes */
    sqlite3_stmt *q;
    if ((s = pb_store_prepare(st,
                              "SELECT d.id, d.path, a.path FROM documents d JOIN temp.added a ON a.hash = d.hash"
                              " WHERE d.path != a.path AND d.hash != '' ORDER BY d.id",
                              &q)))
        return s;
    int64_t *ids = NULL, n = 0, cap = 0;
    char **olds = NULL, **news = NULL;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (n > 0 && ids[n - 1] == sqlite3_column_int64(q, 0)) continue; /* moved to two names: removed once */
        char *o = pb_store_col_dup(q, 1), *w = pb_store_col_dup(q, 2);
        if (o && w && !moved_from(o, w)) { /* a copy that is still there: two documents */
            free(o);
            free(w);
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *ni = realloc(ids, (size_t)cap * sizeof *ids);
            if (ni) ids = ni;
            char **no = ni ? realloc(olds, (size_t)cap * sizeof *olds) : NULL;
            if (no) olds = no;
            char **nw = no ? realloc(news, (size_t)cap * sizeof *news) : NULL;
            if (nw) news = nw;
            if (!nw) {
                free(o);
                free(w);
                rc = SQLITE_NOMEM;
                break;
            }
        }
        ids[n] = sqlite3_column_int64(q, 0);
        olds[n] = o;
        news[n] = w;
        n++;
        if (!o || !w) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    if (rc != SQLITE_DONE)
        s = rc == SQLITE_NOMEM ? pb_error(PB_ERR_NOMEM, "store: out of memory") : pb_store_sql_error(st, "moved files");
    sqlite3_finalize(q);
    for (int64_t i = 0; i < n; i++) {
        if (!s) s = delete_doc_id(st, ids[i]);
        if (!s) {
            (*n_removed)++;
            if (on_moved) on_moved(user, olds[i], news[i]);
        }
        free(olds[i]);
        free(news[i]);
    }
    free(ids);
    free(olds);
    free(news);
    return s ? s : pb_store_exec(st, "DELETE FROM temp.added");
}

/* ---- embeddings -------------------------------------------------------------------------------- */

/* IEEE binary16 conversion (round to nearest even), portable C. */
uint16_t pb_store_f32_to_f16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {f};
    uint32_t x = v.u, sign = (x >> 16) & 0x8000u;
    uint32_t e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
    int32_t ne = (int32_t)e - 127 + 15;
    if (ne >= 0x1f) return (uint16_t)(sign | 0x7c00u);
    if (ne <= 0) {
        if (ne < -10) return (uint16_t)sign;
        m |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - ne);
        uint32_t half = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)ne << 10) | (m >> 13);
    uint32_t rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;
    return (uint16_t)half;
}

float pb_store_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        if (m == 0)
            x = sign;
        else {
            e = 127 - 15 + 1;
            while (!(m & 0x400u)) {
                m <<= 1;
                e--;
            }
            x = sign | (e << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e - 15 + 127) << 23) | (m << 13);
    }
    union {
        uint32_t u;
        float f;
    } v = {x};
    return v.f;
}

pb_status pb_store_embedding_put(pb_store *st, int64_t chunk_id, const char *model, const float *vec, int dim) {
    if (st->version < 3) return pb_error(PB_ERR_UNSUPPORTED, "store: embeddings need schema version 3");
    if (dim <= 0 || dim > 65536) return pb_error(PB_ERR_INVALID_ARG, "store: embedding dim %d", dim);
    uint16_t *h = pb_malloc((size_t)dim * sizeof *h);
    if (!h) return PB_ERR_NOMEM;
    for (int i = 0; i < dim; i++) h[i] = pb_store_f32_to_f16(vec[i]);
    sqlite3_stmt *q;
    pb_status s =
        /* a chunk another writer replaced since its vector was computed (embedding runs outside a transaction) gets
         * none: its successor is embedded by the next run */
        pb_store_prepare(st,
                         "INSERT OR REPLACE INTO embeddings(chunk_id, model, dim, vec) SELECT ?1, ?2, ?3, ?4"
                         " WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?1)",
                         &q);
    if (!s) {
        sqlite3_bind_int64(q, 1, chunk_id);
        sqlite3_bind_text(q, 2, model, -1, SQLITE_STATIC);
        sqlite3_bind_int(q, 3, dim);
        sqlite3_bind_blob(q, 4, h, dim * (int)sizeof *h, SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE) s = pb_store_sql_error(st, "insert embedding");
        sqlite3_finalize(q);
    }
    free(h);
    return s;
}

pb_status pb_store_chunks_without_embedding(pb_store *st, const char *model,
                                            bool (*fn)(void *user, int64_t chunk_id, const char *text), void *user) {
    if (st->version < 3) return pb_error(PB_ERR_UNSUPPORTED, "store: embeddings need schema version 3");
    sqlite3_stmt *q;
    pb_status s = pb_store_prepare(st,
                                   "SELECT c.id, c.text FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM embeddings e"
                                   " WHERE e.chunk_id = c.id AND e.model = ?) ORDER BY c.id",
                                   &q);
    if (s) return s;
    sqlite3_bind_text(q, 1, model, -1, SQLITE_STATIC);
    /* Collect ids first: fn may write embeddings while we would otherwise still be reading. */
    int64_t *ids = NULL, n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            int64_t *ni = realloc(ids, (size_t)cap * sizeof *ids);
            if (!ni) {
                rc = SQLITE_NOMEM;
                break;
            }
            ids = ni;
        }
        ids[n++] = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        free(ids);
        return rc == SQLITE_NOMEM ? pb_error(PB_ERR_NOMEM, "store: out of memory")
                                  : pb_store_sql_error(st, "chunks without embedding");
    }
    if ((s = pb_store_prepare(st, "SELECT text FROM chunks WHERE id = ?", &q))) {
        free(ids);
        return s;
    }
    for (int64_t i = 0; i < n && !s; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, ids[i]);
        if (sqlite3_step(q) != SQLITE_ROW) continue;
        /* no read transaction open while fn runs: its writes (a batch of vectors) then wait out another writer's lock
         * as any write does; begun on top of this statement's read snapshot they failed at once with "database is
         * locked" whenever another process had committed or was checkpointing meanwhile (SQLite does not wait when a
         * reader asks to become the writer) */
        char *text = pb_store_col_dup(q, 0);
        sqlite3_reset(q);
        if (!text) {
            s = pb_error(PB_ERR_NOMEM, "store: out of memory");
            break;
        }
        bool go = fn(user, ids[i], text);
        free(text);
        if (!go) break;
    }
    sqlite3_finalize(q);
    free(ids);
    return s;
}

/* ---- SHA-256 ----------------------------------------------------------------------------------- */

pb_status pb_store_sha256_hex(const void *data, size_t len, char hex[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!EVP_Digest(data, len, md, &n, EVP_sha256(), NULL) || n != 32)
        return pb_error(PB_ERR_INTERNAL, "store: OpenSSL SHA-256 failed");
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = 0;
    return PB_OK;
}
