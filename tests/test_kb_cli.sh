#!/bin/sh
# test_kb_cli.sh -- the knowledge-hub CLI end to end: ingest (exit codes, per-file messages, re-ingest, prune),
# search (text/JSON, hostile queries), faq (add/import/list/match), ask (citation table via --dry-run, FAQ
# fallback on a missing model and on a first-token timeout, and a real answer when models/default.gguf exists).
BIN=${PB_BIN:-build/pocketbrain}
T=$(mktemp -d /tmp/pb_kb_cli.XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; fails=$((fails + 1)); }
check() { if [ "$1" = 0 ]; then ok "$2"; else nok "$2"; fi; }

# a small knowledge base: 40 pages of the evaluation corpus + edge cases
mkdir -p "$T/docs/sub"
ls tests/data/kb/corpus/*.md | head -40 | while read -r f; do cp "$f" "$T/docs/"; done
cp tests/data/kb/corpus/sched_setaffinity.2.md tests/data/kb/corpus/pipe.7.md "$T/docs/"
printf '<html><title>Tea</title><body><h1>Green tea</h1><p>Steep green tea at 80&deg;C for two minutes.</p></body></html>' > "$T/docs/sub/tea.html"
head -c 2048 /dev/urandom > "$T/docs/sub/random.txt"
printf '%%PDF-1.4\nnot really a pdf\n' > "$T/docs/sub/fake.pdf"

"$BIN" ingest --db "$T/kb.sqlite" "$T/docs" >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 3 ] && echo 0)" "ingest with bad files exits 3 (got $rc)"
grep -q "skipped $T/docs/sub/random.txt: " "$T/err"; check $? "per-file message for the binary file"
grep -q "skipped $T/docs/sub/fake.pdf: .*PDF" "$T/err"; check $? "per-file message for the malformed PDF"
grep -q "2 skipped" "$T/out"; check $? "summary counts 2 skipped"
n_added=$(sed -n 's/.*: \([0-9]*\) added.*/\1/p' "$T/out")
check "$([ "$n_added" -ge 40 ] && echo 0)" "documents added ($n_added)"

"$BIN" search --db "$T/kb.sqlite" "steep green tea temperature" >"$T/out"; rc=$?
check $rc "search exits 0"
grep -q "tea.html:1" "$T/out"; check $? "search shows file:line of the HTML hit"
# a knowledge base at rest is one file: ingest leaves it out of WAL mode, so the readers that follow (search,
# a read-only folder) leave no -wal / -shm files beside it (they did after every search)
ls "$T"/kb.sqlite-* >/dev/null 2>&1; check "$([ $? != 0 ] && echo 0)" "no -wal / -shm beside the database after ingest + search: $(ls "$T")"
"$BIN" search --db "$T/kb.sqlite" "bind a thread to particular processors" --json -k 3 >"$T/out"
grep -q '"rank":[123],[^}]*sched_setaffinity.2.md' "$T/out"; check $? "search --json finds sched_setaffinity in the top 3"
n=$(grep -o '"path":"[^"]*sched_setaffinity.2.md"' "$T/out" | wc -l)
check "$([ "$n" = 1 ] && echo 0)" "one chunk per document by default ($n)"
n=$(grep -o '"rank":' "$T/out" | wc -l); check "$([ "$n" = 3 ] && echo 0)" "-k 3 gives 3 hits ($n)"
for q in '"' 'NEAR(a b' 'x AND (y OR' '*' 'title:x' "'; DROP TABLE chunks; --"; do
  "$BIN" search --db "$T/kb.sqlite" "$q" >/dev/null 2>"$T/err"; rc=$?
  check $rc "hostile query '$q' is plain text (exit $rc)"
done
# text without spaces (Chinese, Japanese; Korean attaches particles): a word inside a run is found (FTS5's unicode61
# alone kept the run as one token, so these found nothing)
mkdir -p "$T/cjk"
printf '我们今天在图书馆学习中文语法。\n' >"$T/cjk/zh.txt"
printf '私は東京で日本語を勉強しています。\n' >"$T/cjk/ja.txt"
printf '저는 서울에서 한국어를 공부합니다.\n' >"$T/cjk/ko.txt"
printf 'The runner runs along the river.\n' >"$T/cjk/en.txt"
"$BIN" ingest --db "$T/cjk.sqlite" "$T/cjk" >/dev/null 2>"$T/err"; rc=$?
for qd in 中文:zh.txt 日本語:ja.txt 한국어:ko.txt running:en.txt; do
  q=${qd%%:*}; d=${qd#*:}
  "$BIN" search --db "$T/cjk.sqlite" "$q" --json >"$T/out" 2>&1
  n=$(grep -o '"rank":' "$T/out" | wc -l)
  check "$([ $rc = 0 ] && [ "$n" = 1 ] && grep -q "\"path\":\"[^\"]*/$d\"" "$T/out" && echo 0)" "search '$q' finds $d only ($n hits)"
done
# a knowledge base from before schema 4: ingest, then taken back to schema 3 with python3's sqlite3 (the 3 -> 4
# migration only recreated both FTS5 indexes with pb_cjk: the same tables without it, rebuilt). Opened through a
# symlink, which the writer refuses, it cannot be upgraded and is read as it is: the command works, and says once on
# stderr what is missing and how to upgrade (it said nothing); a writable file is upgraded silently.
to_v3() { python3 - "$1" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.executescript("PRAGMA writable_schema=ON; UPDATE sqlite_master SET sql = replace(sql, 'pb_cjk ', '')"
                 " WHERE name IN ('chunks_fts', 'faq_fts'); PRAGMA writable_schema=OFF; PRAGMA user_version=3;")
db.close()
db = sqlite3.connect(sys.argv[1], isolation_level=None)  # a fresh connection reads the edited schema
db.executescript("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild'); INSERT INTO faq_fts(faq_fts) VALUES ('rebuild');")
sys.exit(0 if db.execute("PRAGMA integrity_check").fetchone()[0] == "ok" else 1)
PY
}
schema_of() { python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("PRAGMA user_version").fetchone()[0])' "$1"; }
"$BIN" ingest --db "$T/v3.sqlite" "$T/cjk" >/dev/null 2>&1 && to_v3 "$T/v3.sqlite"; rc=$?
check "$([ $rc = 0 ] && [ "$(schema_of "$T/v3.sqlite")" = 3 ] && echo 0)" "a schema-3 knowledge base made (rc $rc)"
ln -s v3.sqlite "$T/v3-link.sqlite"
note="pocketbrain search: note: '$T/v3-link.sqlite' is at knowledge-base schema 3 (this build: 4) and could not be upgraded here"
"$BIN" search --db "$T/v3-link.sqlite" running --json >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 0 ] && python3 -c 'import json,sys; h=json.load(open(sys.argv[1]))["hits"]; sys.exit(0 if len(h) == 1 and h[0]["path"].endswith("/en.txt") else 1)' "$T/out" && echo 0)" \
  "schema 3 through a symlink: search exits 0, its JSON on stdout as ever (rc $rc $(head -c 150 "$T/out"))"
check "$([ "$(grep -c . "$T/err")" = 1 ] && grep -qF "$note" "$T/err" && grep -q 'Chinese, Japanese or Korean text without spaces are not found' "$T/err" && grep -q '`pocketbrain ingest --db FILE PATH...` on the file itself, where it is writable, upgrades it' "$T/err" && echo 0)" \
  "schema 3 through a symlink: one note on stderr naming the file, schema 3, what is missing and ingest --db ($(cat "$T/err"))"
check "$([ "$(schema_of "$T/v3.sqlite")" = 3 ] && echo 0)" "schema 3 through a symlink: the file is left at schema 3"
# the note says why the upgrade failed, in a reader's words: the link and the file it leads to (it said the writer's
# "output '...' is a symbolic link: refusing to replace it (name a regular file ...)", a file search never writes)
RT=$(cd "$T" && pwd -P)
why_link="it is a symbolic link to '$RT/v3.sqlite', and a knowledge base is upgraded only under its own name"
check "$(grep -qF "$note ($why_link): words inside" "$T/err" && ! grep -q "output '\|refusing to replace" "$T/err" && echo 0)" \
  "schema 3 through a symlink: the note says why in a reader's words, naming the file it leads to ($(cat "$T/err"))"
"$BIN" ask --db "$T/v3-link.sqlite" --dry-run "running" >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 0 ] && grep -q en.txt "$T/out" && [ "$(grep -c "note: '$T/v3-link.sqlite' is at knowledge-base schema 3" "$T/err")" = 1 ] && grep -qF "($why_link)" "$T/err" && echo 0)" \
  "schema 3 through a symlink: ask --dry-run exits 0 with the one note too (rc $rc $(head -c 300 "$T/err"))"
# every command that opens a knowledge base says it in its own words: serve --db as search (a reader); ingest and faq
# add (writers) refuse the link naming the file it leads to, not as an "output" they would "replace"
SM=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
[ -f "$SM" ] || SM=models/default.gguf
if [ -f "$SM" ]; then
  timeout 60 "$BIN" serve --db "$T/v3-link.sqlite" -m "$SM" --port 0 -t 1 >"$T/sout" 2>"$T/err" & spid=$!
  i=0; while [ $i -lt 200 ] && ! grep -q "listening on" "$T/err"; do sleep 0.1; i=$((i + 1)); done
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  check "$(grep -q "listening on" "$T/err" && grep -qF "pocketbrain serve: note: '$T/v3-link.sqlite' is at knowledge-base schema 3 (this build: 4) and could not be upgraded here ($why_link)" "$T/err" && ! grep -q "output '\|refusing to replace" "$T/err" && echo 0)" \
    "schema 3 through a symlink: serve --db starts with the same note ($(head -c 400 "$T/err"))"
else nok "no model for serve --db ($SM)"; fi
for c in "ingest --db $T/v3-link.sqlite $T/cjk" "faq --db $T/v3-link.sqlite add q a"; do
  "$BIN" $c >/dev/null 2>"$T/err"; rc=$?
  check "$([ $rc = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -qF "store '$T/v3-link.sqlite': a symbolic link to '$RT/v3.sqlite': a knowledge base is written only under its own name" "$T/err" && ! grep -q "output '\|refusing to replace" "$T/err" && echo 0)" \
    "${c%% *} through a symlink: refused in one line naming the file it leads to (rc $rc $(cat "$T/err"))"
done
# schema 2 (below what is read as it is) through a symlink: refused, the reason in the same words
cp "$T/v3.sqlite" "$T/v2.sqlite" && python3 - "$T/v2.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)  # 3 -> 2: what migrate_v3 added goes again
db.executescript("DROP TRIGGER faq_ai; DROP TRIGGER faq_ad; DROP TRIGGER faq_au; DROP TABLE faq_fts; DROP TABLE faq;"
                 " DROP TABLE embeddings; DROP TABLE meta; PRAGMA user_version=2;")
PY
ln -s v2.sqlite "$T/v2-link.sqlite"
"$BIN" search --db "$T/v2-link.sqlite" running >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 1 ] && [ "$(schema_of "$T/v2.sqlite")" = 2 ] && grep -qF "schema version 2 must be upgraded to 4 to be read, and it could not be upgraded here: it is a symbolic link to '$RT/v2.sqlite'" "$T/err" && ! grep -q "output '\|refusing to replace" "$T/err" && echo 0)" \
  "schema 2 through a symlink: search refuses it naming the link's file, in a reader's words (rc $rc $(cat "$T/err"))"
# read-only: the file, or its folder (the upgrade's journal goes there), not writable to this user: said so (it was
# SQLite's "attempt to write a readonly database"); root writes anyway, so these run as nobody
as_user() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
chmod 755 "$T"; cp "$BIN" "$T/pb" && chmod 755 "$T/pb"
mkdir "$T/rof" "$T/rod"
cp "$T/v3.sqlite" "$T/rof/kb.sqlite"; chmod 444 "$T/rof/kb.sqlite"
cp "$T/v3.sqlite" "$T/rod/kb.sqlite"; ln "$T/rod/kb.sqlite" "$T/rod/hard.sqlite"; chmod 666 "$T/rod/kb.sqlite"; chmod 555 "$T/rod"
for fw in "rof/kb.sqlite:this user may not write the file" \
  "rod/hard.sqlite:this user may not write in its folder, where an upgrade writes its journal file"; do
  f=${fw%%:*}; w=${fw#*:}
  as_user "$T/pb" search --db "$T/$f" running >"$T/out" 2>"$T/err"; rc=$?
  check "$([ $rc = 0 ] && grep -q en.txt "$T/out" && grep -qF "note: '$T/$f' is at knowledge-base schema 3 (this build: 4) and could not be upgraded here ($w)" "$T/err" && ! grep -q "readonly database" "$T/err" && echo 0)" \
    "schema 3, $w: search reads it and says so (rc $rc $(cat "$T/err"))"
done
chmod 755 "$T/rod"
# a hard link is the file itself: upgraded where it is writable, both names with it
"$BIN" search --db "$T/rod/hard.sqlite" running >/dev/null 2>"$T/err"; rc=$?
check "$([ $rc = 0 ] && [ ! -s "$T/err" ] && [ "$(schema_of "$T/rod/kb.sqlite")" = 4 ] && echo 0)" \
  "schema 3 through a writable hard link: upgraded without a note (rc $rc $(cat "$T/err"))"
"$BIN" search --db "$T/v3.sqlite" 中文 --json >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 0 ] && [ ! -s "$T/err" ] && [ "$(schema_of "$T/v3.sqlite")" = 4 ] && grep -q '"path":"[^"]*/zh.txt"' "$T/out" && echo 0)" \
  "schema 3, writable: search upgrades it to 4 without a note and finds '中文' (rc $rc, stderr: $(head -c 300 "$T/err"))"
# a knowledge base from a newer build: refused naming both schemas, never written
cp "$T/v3.sqlite" "$T/v9.sqlite" && python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("PRAGMA user_version=9"); c.commit()' "$T/v9.sqlite"
"$BIN" search --db "$T/v9.sqlite" running >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 1 ] && grep -q "schema version 9 is newer than this build's 4" "$T/err" && [ "$(schema_of "$T/v9.sqlite")" = 9 ] && echo 0)" \
  "schema 9 (a newer build's): search exits 1 naming both schemas (rc $rc $(head -c 200 "$T/err"))"
"$BIN" search --db "$T/kb.sqlite" >/dev/null 2>&1; check "$([ $? = 2 ] && echo 0)" "search without a query: usage error 2"
# `--` ends the options: a query, question, path or FAQ text that starts with '-' (it was "unknown option")
"$BIN" search --db "$T/kb.sqlite" -- "-steep green tea" >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 0 ] && grep -q tea.html "$T/out" && echo 0)" "search -- '-steep green tea': a query after -- (rc $rc $(head -c 150 "$T/err"))"
"$BIN" ask --db "$T/kb.sqlite" --dry-run -- "-how do I steep green tea?" >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 0 ] && grep -q tea.html "$T/out" && echo 0)" "ask -- '-how ...': a question after -- (rc $rc $(head -c 150 "$T/err"))"
# every argument after -- is an operand (POSIX), not only the next one: a flag after it is a second query, refused
"$BIN" search --db "$T/kb.sqlite" -- "-steep" --json >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 2 ] && grep -q "one query only (quote it): unexpected '--json'" "$T/err" && echo 0)" "search -- -steep --json: --json is an operand after -- (rc $rc $(head -c 150 "$T/err"))"
"$BIN" ask --db "$T/kb.sqlite" --dry-run -- "-q" --json >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 2 ] && grep -q "one question only (quote it): unexpected '--json'" "$T/err" && echo 0)" "ask -- -q --json: --json is an operand after -- (rc $rc $(head -c 150 "$T/err"))"
"$BIN" tokenize --vocab models/default.gguf -- -x --ids >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 2 ] && grep -q "one TEXT argument expected (quote it), got '--ids'" "$T/err" && echo 0)" "tokenize -- -x --ids: --ids is an operand after -- (rc $rc $(head -c 150 "$T/err"))"
mkdir -p "$T/dash"; printf 'Walruses haul out on sea ice to rest.\n' >"$T/dash/-walrus.txt"
BINA=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
(cd "$T/dash" && "$BINA" ingest --db ../dash.sqlite -- -walrus.txt >/dev/null 2>"$T/err"); rc=$?
"$BIN" search --db "$T/dash.sqlite" "walruses haul out" >"$T/out" 2>&1
check "$([ $rc = 0 ] && grep -q -- '-walrus.txt' "$T/out" && echo 0)" "ingest -- -walrus.txt: a path after -- (rc $rc $(head -c 150 "$T/err"))"
"$BIN" faq --db "$T/dash-faq.sqlite" -- add "-5 degrees?" "-Cold." >/dev/null 2>"$T/err"; rc=$?
check "$([ $rc = 0 ] && "$BIN" faq --db "$T/dash-faq.sqlite" list | grep -q -- '-Cold' && echo 0)" \
  "faq -- add '-5 degrees?' '-Cold.': arguments after -- (rc $rc $(head -c 150 "$T/err"))"
"$BIN" search --db "$T/none.sqlite" "x" >/dev/null 2>"$T/err"; rc=$?
check "$([ $rc = 1 ] && grep -q 'no knowledge base' "$T/err" && echo 0)" "search on a missing KB: clear error"
"$BIN" search --db tests/data/kb/questions.tsv "x" >/dev/null 2>"$T/err"; rc=$?
check "$([ $rc = 1 ] && grep -q 'not a' "$T/err" && echo 0)" "a text file as --db is refused: $(cat "$T/err")"

# re-ingest: unchanged, edit, delete + prune
"$BIN" ingest --db "$T/kb.sqlite" "$T/docs" >"$T/out" 2>/dev/null
grep -q " 0 added, 0 updated, $n_added unchanged" "$T/out"; check $? "re-ingest skips unchanged files"
printf '<html><title>Tea</title><body><p>Oolong is partly oxidised.</p></body></html>' > "$T/docs/sub/tea.html"
rm "$T/docs/pipe.7.md" "$T/docs/sub/random.txt" "$T/docs/sub/fake.pdf"
"$BIN" ingest --db "$T/kb.sqlite" "$T/docs" --prune >"$T/out" 2>"$T/err"; rc=$?
check $rc "ingest --prune exits 0 when nothing is skipped"
grep -q "1 updated.* 1 removed" "$T/out"; check $? "edit -> updated, delete -> removed: $(cat "$T/out")"
"$BIN" search --db "$T/kb.sqlite" "oolong oxidised" | grep -q "tea.html"; check $? "edited text searchable"
"$BIN" search --db "$T/kb.sqlite" "steep green" | grep -q "tea.html"; check "$([ $? != 0 ] && echo 0)" "old text gone"
"$BIN" search --db "$T/kb.sqlite" "pipe capacity atomic writes" | grep -q "pipe.7.md"
check "$([ $? != 0 ] && echo 0)" "pruned file gone from search"

# a knowledge base kept for months: files renamed, moved, linked and folders deleted, named in whatever form. Each
# document is stored once under its file's real path, and what the user still has is never pruned.
L="$T/life"; ABIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN"); mkdir -p "$L/notes/old" "$L/archive" "$L/notes/.private"
printf '# Plans\n\nThe quokka migration starts in spring.\n' >"$L/notes/plans.md"
printf '# Recipes\n\nKnead the zabaglione dough twice.\n' >"$L/notes/recipes.md"
printf 'The capybara log entry.\n' >"$L/notes/field.log"
printf '# Secret\n\nThe wombat password hint.\n' >"$L/notes/.private/hint.md"
printf '# Old\n\nThe narwhal memo.\n' >"$L/notes/old/memo.md"
"$BIN" ingest --db "$L/kb.sqlite" -q "$L/notes" "$L/notes/field.log" "$L/notes/.private/hint.md" >/dev/null 2>&1
docs() { python3 -c 'import sqlite3,sys; print(" ".join(r[0].rsplit("/",2)[-2]+"/"+r[0].rsplit("/",1)[1] for r in sqlite3.connect(sys.argv[1]).execute("SELECT path FROM documents ORDER BY path")))' "$L/kb.sqlite"; }
check "$([ "$(docs | wc -w)" = 5 ] && echo 0)" "lifecycle: 5 documents to start with: $(docs)"
mv "$L/notes/plans.md" "$L/notes/plans-2027.md"
"$BIN" ingest --db "$L/kb.sqlite" "$L/notes" >"$T/out" 2>"$T/err"
grep -q "removed $L/notes/plans.md (moved to '$L/notes/plans-2027.md')" "$T/err" && grep -q "1 added, .* 1 removed" "$T/out"
check $? "a renamed file replaces its old entry without --prune: $(cat "$T/out" "$T/err")"
"$BIN" search --db "$L/kb.sqlite" quokka --per-doc 0 >"$T/out"
check "$([ "$(grep -c '^[0-9]*\. ' "$T/out")" = 1 ] && grep -q "$L/notes/plans-2027.md:1-3" "$T/out" && echo 0)" "the renamed file is found once, at its new path: $(cat "$T/out")"
mv "$L/notes/recipes.md" "$L/archive/"
"$BIN" ingest --db "$L/kb.sqlite" "$L/archive" >"$T/out" 2>"$T/err"
grep -q "removed $L/notes/recipes.md (moved to '$L/archive/recipes.md')" "$T/err"; check $? "a file moved to another folder, that folder ingested: the old entry goes"
cp "$L/archive/recipes.md" "$L/notes/recipes-copy.md"
"$BIN" ingest --db "$L/kb.sqlite" "$L/notes" >"$T/out" 2>"$T/err"
n=$("$BIN" search --db "$L/kb.sqlite" zabaglione --per-doc 0 | grep -c '^[0-9]*\. ')
check "$([ "$n" = 2 ] && echo 0)" "a copy beside a file still there is a document of its own ($n hits)"
ln -s ../archive/recipes.md "$L/notes/recipes-link.md"; ln -s notes "$L/notes-link"
"$BIN" ingest --db "$L/kb.sqlite" "$L/notes" "$L/notes-link/recipes-link.md" >"$T/out" 2>"$T/err"
n=$("$BIN" search --db "$L/kb.sqlite" zabaglione --per-doc 0 | grep -c '^[0-9]*\. ')
check "$([ "$n" = 2 ] && grep -q " 0 added" "$T/out" && echo 0)" "a link to a file, walked or named, is that file: no third copy ($n hits; $(cat "$T/out"))"
(cd "$L/notes" && "$ABIN" ingest --db ../kb.sqlite . ../notes-link plans-2027.md) >"$T/out" 2>"$T/err"
grep -q "^4 files: 0 added, 0 updated, 4 unchanged" "$T/out"; check $? "the same folder from another directory, through a link and a file in it named too: each file once: $(cat "$T/out")"
rm -r "$L/notes/old"
(cd "$L/archive" && "$ABIN" ingest --db ../kb.sqlite --prune ../notes-link/old/) >"$T/out" 2>"$T/err"
grep -q "removed $L/notes/old/memo.md (file is gone)" "$T/err"; check $? "--prune of a deleted folder named by a relative path through a link removes its documents: $(cat "$T/err")"
"$BIN" ingest --db "$L/kb.sqlite" --prune "$L/notes" >"$T/out" 2>"$T/err"
check "$(docs | grep -q 'notes/field.log' && docs | grep -q '.private/hint.md' && echo 0)" "--prune of the folder keeps files named before that its walk skips (notes.log, a hidden folder): $(cat "$T/err")"

# citations of files edited or deleted since they were ingested say so (the text shown is what the file held then, and
# the user opening the path found other text or nothing): a stat per source, a SHA-256 only when the mtime alone moved
F="$T/fresh"; mkdir -p "$F"
printf '# Ocelot\n\nThe ocelot roams the pampas at night.\n' >"$F/edited.md"
printf '# Ocelot kin\n\nAn ocelot cousin, the margay, climbs trees.\n' >"$F/deleted.md"
printf '# Ocelot diet\n\nThe ocelot eats rodents and birds.\n' >"$F/touched.md"
printf '# Ocelot range\n\nOcelot range: Texas to Argentina.\n' >"$F/samesize.md"
"$BIN" ingest --db "$F/kb.sqlite" -q "$F" >/dev/null 2>&1
printf '# Ocelot\n\nRewritten: nothing about cats here any more.\n' >"$F/edited.md"
rm "$F/deleted.md"
touch -d 2001-01-01 "$F/touched.md"                                        # the mtime alone: same bytes
printf '# Ocelot range\n\nOcelot range: Mexico to Paraguay.\n' >"$F/samesize.md" # same size, other bytes
touch -d 2001-01-01 "$F/samesize.md"
"$BIN" search --db "$F/kb.sqlite" ocelot -k 10 --json >"$T/out"
st=$(python3 -c 'import json,sys; print(" ".join(h["path"].rsplit("/",1)[1]+"="+h["file_state"] for h in sorted(json.load(open(sys.argv[1]))["hits"], key=lambda h: h["path"])))' "$T/out" 2>&1)
check "$([ "$st" = "deleted.md=gone edited.md=changed samesize.md=changed touched.md=unchanged" ] && echo 0)" "search --json: each hit's file_state against the file now: $st"
"$BIN" search --db "$F/kb.sqlite" ocelot -k 10 >"$T/out" 2>"$T/err"
check "$(grep -q "edited.md:1-3  -- changed since ingest$" "$T/out" && grep -q "deleted.md:1-3  -- file is gone$" "$T/out" &&
  grep -q "touched.md:1-3$" "$T/out" && grep -q "note: 2 files changed since ingest .*, 1 file is gone: \`pocketbrain ingest --db $F/kb.sqlite --prune " "$T/err" && echo 0)" \
  "search marks a changed and a deleted file and says the ingest that updates them: $(cat "$T/out" "$T/err")"
"$BIN" ask --db "$F/kb.sqlite" --dry-run "ocelot" -k 10 >"$T/out" 2>"$T/err"
check "$(grep -q "^\[[0-9]\] $F/edited.md:1-3  (Ocelot)  -- changed since ingest$" "$T/out" && grep -q "^\[[0-9]\] $F/deleted.md:1-3  (Ocelot kin)  -- file is gone$" "$T/out" &&
  grep -q "note: .* file is gone: .pocketbrain ingest" "$T/err" && echo 0)" "ask marks its sources the same way: $(tail -5 "$T/out") $(cat "$T/err")"
"$BIN" ask --db "$F/kb.sqlite" --dry-run --json "ocelot" -k 10 | grep -q '"path":"[^"]*/deleted.md","location":"[^"]*","file_state":"gone"'
check $? "ask --json: the citation's file_state"
cmd=$(sed -n 's/.*`pocketbrain \(ingest [^`]*\)`.*/\1/p' "$T/err")
"$BIN" $cmd >/dev/null 2>&1; "$BIN" search --db "$F/kb.sqlite" ocelot -k 10 >"$T/out" 2>"$T/err"
check "$([ -n "$cmd" ] && ! grep -q -- ' -- ' "$T/out" && [ ! -s "$T/err" ] && echo 0)" "the suggested ingest ($cmd) leaves nothing marked: $(cat "$T/out" "$T/err")"

# SIGTERM (a kill, a service stopped) and SIGHUP (the terminal closed) stop an ingest like Ctrl-C: the current file
# committed, the "interrupted" line said with -q too; then the command ends by the signal (143, 129), not with Ctrl-C's
# 130 (SIGTERM gave 130, and -q printed nothing at all)
S="$T/sig"; mkdir -p "$S"
for i in 1 2 3 4 5 6 7 8; do mkdir "$S/c$i"; cp tests/data/kb/corpus/*.md "$S/c$i/"; done
for sig in TERM:143 INT:130 HUP:129; do
  rm -f "$S/kb.sqlite"*
  "$BIN" ingest --db "$S/kb.sqlite" -q "$S" >"$T/out" 2>"$T/err" & ipid=$!
  i=0; while [ ! -s "$S/kb.sqlite" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done; sleep 0.3
  kill -"${sig%:*}" $ipid; wait $ipid; rc=$?
  name=$([ "${sig%:*}" = INT ] && echo Ctrl-C || echo "SIG${sig%:*}")
  check "$([ $rc = "${sig#*:}" ] && grep -q "^interrupted by $name (committed work is kept; re-run to resume): 2544 files" "$T/out" && echo 0)" \
    "ingest -q stopped by SIG${sig%:*}: exit $rc (want ${sig#*:}), the interrupted line: $(cat "$T/out" "$T/err")"
done
ok=$(python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute("PRAGMA integrity_check").fetchone()[0], c.execute("SELECT count(*) FROM documents WHERE id NOT IN (SELECT doc_id FROM chunks)").fetchone()[0])' "$S/kb.sqlite")
check "$([ "$ok" = "ok 0" ] && echo 0)" "after SIGHUP the knowledge base is whole: $ok"

# faq
"$BIN" faq --db "$T/kb.sqlite" add "How do I reset my password?" "Use Settings, then Account, then Reset." >/dev/null
check $? "faq add"
printf '{"question": "What are the opening hours?", "answer": "Nine to five on weekdays."}\n' > "$T/faq.jsonl"
printf 'Is parking free?\tYes, behind the building.\n' > "$T/faq.tsv"
"$BIN" faq --db "$T/kb.sqlite" import "$T/faq.jsonl" | grep -q "imported 1"; check $? "faq import jsonl"
"$BIN" faq --db "$T/kb.sqlite" import "$T/faq.tsv" | grep -q "imported 1"; check $? "faq import tsv"
printf 'no tab here\n' > "$T/bad.tsv"
"$BIN" faq --db "$T/kb.sqlite" import "$T/bad.tsv" 2>"$T/err" >/dev/null; rc=$?
check "$([ $rc = 1 ] && grep -q 'line 1' "$T/err" && echo 0)" "bad FAQ file: error names the line"
n=$("$BIN" faq --db "$T/kb.sqlite" list | wc -l); check "$([ "$n" = 3 ] && echo 0)" "faq list shows 3 ($n)"
"$BIN" faq --db "$T/kb.sqlite" match "when are you open" --json | grep -q '"answer":"Nine to five'
check $? "faq match"

# ask: the citation table (no model needed)
"$BIN" ask --db "$T/kb.sqlite" --dry-run --json "How can I bind a process to particular CPUs?" >"$T/out"; rc=$?
check $rc "ask --dry-run exits 0"
grep -q '"n":1,"path":"[^"]*sched_setaffinity.2.md","location":"[^"]*sched_setaffinity.2.md:[0-9]' "$T/out"
check $? "citation [1] maps to sched_setaffinity.2.md with a line location"
grep -q '\[1\] (sched_setaffinity.2.md:[0-9-]*)' "$T/out"; check $? "the prompt numbers the source [1] with its location"
# ask: fallbacks
"$BIN" ask --db "$T/kb.sqlite" -m "$T/missing.gguf" "what time do you open?" >"$T/out" 2>"$T/err"; rc=$?
check "$([ $rc = 0 ] && head -1 "$T/out" | grep -q '^\[fallback: model .* failed to load' && echo 0)" \
  "missing model -> FAQ answer marked as a fallback"
grep -q "Nine to five" "$T/out"; check $? "fallback carries the FAQ answer"
"$BIN" ask --db "$T/kb.sqlite" -m "$T/missing.gguf" "quantum chromodynamics lattice" >/dev/null 2>"$T/err"; rc=$?
check "$([ $rc = 1 ] && grep -q 'FAQ has no match' "$T/err" && echo 0)" "no model and no FAQ match -> exit 1"
TINY=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
if [ -f "$TINY" ]; then
  "$BIN" ask --db "$T/kb.sqlite" -m "$TINY" --ctx 2048 --max-tokens 64 -k 2 --fallback-after 0.05 --json "is parking free next to the pipe?" >"$T/out" 2>&1
  grep -q '"fallback":true,"fallback_reason":"no token from the model within 0.05 s","answer":"\[fallback: no token' "$T/out"
  check $? "no first token within --fallback-after -> marked FAQ fallback"
else
  echo "# skip: $TINY not found (first-token timeout fallback not exercised)"
  [ "$CI" = true ] && nok "fixture $TINY missing under CI"
fi

# ask with the real default model: the citation numbers must map to the retrieved documents (the model's
# prose, and whether it chooses to cite, is not what this checks)
if [ -f models/default.gguf ]; then
  "$BIN" ask --db "$T/kb.sqlite" -m models/default.gguf -k 3 --ctx 2048 --max-tokens 96 --fallback-after 0 --json \
    "How can I bind a process to particular CPUs?" >"$T/out" 2>"$T/err"; rc=$?
  check $rc "ask with models/default.gguf answers (exit $rc)"
  grep -q '"fallback":false' "$T/out"; check $? "a generated answer, not a fallback"
  grep -q '"answer":"[^"]' "$T/out"; check $? "the answer is not empty"
  grep -q '"citations":\[{"n":1,"path":"[^"]*sched_setaffinity.2.md","location":"[^"]*sched_setaffinity.2.md:[0-9]' "$T/out"
  check $? "[1] maps to sched_setaffinity.2.md with its line range"
  # every source flagged as cited is cited as [n] in the answer text, and the others are not
  answer=$(sed -n 's/.*"answer":"\(.*\)","fallback".*/\1/p' "$T/out")
  consistent=0
  for n in $(grep -o '"n":[0-9]*' "$T/out" | cut -d: -f2); do
    flagged=$(grep -c "\"n\":$n,[^}]*\"cited\":true" "$T/out")
    if printf '%s' "$answer" | grep -q "\[\([0-9, -]*[, ]\)\?$n\([, -][0-9, -]*\)\?\]"; then inans=1; else inans=0; fi
    [ "$flagged" = "$inans" ] || consistent=1
  done
  check $consistent "the cited flags agree with the [n] in the answer"
  echo "# default model: $(grep -o '"invalid_citations":[0-9]*' "$T/out"), cited: $(grep -o '"cited":true' "$T/out" | wc -l)"
  # ingest --embed-model runs the model for minutes: another writer meanwhile gets in (the write lock was held across
  # every 32 embeddings and taken again at once: faq add failed with "database is locked" after its 10 s), and the
  # first Ctrl-C stops it with the vectors made so far kept (it was ignored until a second one)
  "$BIN" ingest -q --db "$T/emb.sqlite" tests/data/kb/corpus >/dev/null 2>&1 # 4,520 chunks: minutes of embedding
  "$BIN" ingest --db "$T/emb.sqlite" --embed-model models/default.gguf tests/data/kb/corpus >"$T/eout" 2>"$T/eerr" & epid=$!
  sleep 2
  s0=$(date +%s); "$BIN" faq --db "$T/emb.sqlite" add "Is the canteen open?" "Until two." >/dev/null 2>"$T/err"; rc=$?; s1=$(date +%s)
  check "$([ $rc = 0 ] && [ $((s1 - s0)) -lt 9 ] && echo 0)" "faq add while ingest --embed-model runs: done in $((s1 - s0)) s (rc $rc $(cat "$T/err"))"
  kill -INT $epid; i=0
  while kill -0 $epid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  kill -KILL $epid 2>/dev/null; wait $epid; rc=$?
  n=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM embeddings").fetchone()[0])' "$T/emb.sqlite")
  check "$([ $rc = 130 ] && [ "$n" -gt 0 ] && grep -q "^interrupted by Ctrl-C (the vectors made are kept" "$T/eout" && echo 0)" \
    "one Ctrl-C stops the embedding within 10 s, exit 130, the $n vectors made kept (rc $rc $(cat "$T/eout" "$T/eerr"))"
else
  echo "# skip: models/default.gguf not present: ask with a real model not run"
fi
[ $fails = 0 ]
