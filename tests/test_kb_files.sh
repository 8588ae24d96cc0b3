#!/bin/sh
# test_kb_files.sh -- knowledge-base files in hard places: a KB in a read-only place is searchable, database errors
# are named as such, a missing ingest path creates no database, odd inputs (charsets, no extension, .gz, non-UTF-8
# file names) are ingested or skipped honestly, and every --json output parses.
BIN=${PB_BIN:-build/pocketbrain}
T=$(mktemp -d /tmp/pb_kb_files.XXXXXX)
trap 'chmod -R u+rwx "$T" 2>/dev/null; rm -rf "$T"' EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
chk() { if [ "$1" = 0 ]; then ok "$2"; else nok "$2"; fi; }
# root ignores file permissions: run the read-only cases as nobody (the binary and KB are world-readable)
as_user() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
chmod 755 "$T"
cp "$BIN" "$T/pb" && chmod 755 "$T/pb"
PB="$T/pb"

# ---- read-only knowledge base (issue 18 item 4) ----
mkdir "$T/ro" "$T/src"
cp tests/data/kb/corpus/sched_setaffinity.2.md tests/data/kb/corpus/pipe.7.md "$T/src/"
"$PB" ingest -q --db "$T/ro/kb.sqlite" "$T/src" >/dev/null 2>&1
chmod 555 "$T/ro"; chmod 444 "$T/ro/kb.sqlite"
as_user "$PB" search --db "$T/ro/kb.sqlite" "CPU affinity mask" >"$T/out" 2>"$T/err"; rc=$?
chk "$([ $rc = 0 ] && grep -q sched_setaffinity "$T/out" && echo 0)" "search a KB in a read-only folder (rc=$rc $(cat "$T/err"))"
as_user "$PB" ask --db "$T/ro/kb.sqlite" --dry-run --json -m "$T/none.gguf" "CPU affinity mask" >"$T/out" 2>"$T/err"; rc=$?
chk "$([ $rc = 0 ] && grep -q sched_setaffinity "$T/out" && echo 0)" "ask --dry-run on a read-only KB (rc=$rc $(cat "$T/err"))"
chk "$([ "$(ls -A "$T/ro")" = kb.sqlite ] && echo 0)" "nothing written beside the read-only KB ($(ls -A "$T/ro" | tr '\n' ' '))"
mkdir "$T/locked"; cp "$T/ro/kb.sqlite" "$T/locked/"; chmod 700 "$T/locked"
[ "$(id -u)" = 0 ] || chmod 000 "$T/locked"
as_user "$PB" search --db "$T/locked/kb.sqlite" "affinity" >/dev/null 2>"$T/err"; rc=$?
chk "$([ $rc = 1 ] && grep -q "Permission denied" "$T/err" && ! grep -q "no knowledge base" "$T/err" && echo 0)" \
  "an unreadable KB is a permission error, not 'no knowledge base' ($(cat "$T/err"))"
chmod 700 "$T/locked"
head -c 8192 /dev/urandom >"$T/junk.sqlite"
"$PB" search --db "$T/junk.sqlite" "affinity" >/dev/null 2>"$T/err"; rc=$?
chk "$([ $rc = 1 ] && grep -q "not an SQLite database" "$T/err" && echo 0)" "a non-database file is named as such ($(cat "$T/err"))"
# said once: one line naming the file once, for every command that opens a knowledge base (the path was printed twice,
# "not a database" twice, and serve added a second line)
for c in "search --db $T/junk.sqlite affinity" "ask --db $T/junk.sqlite --dry-run affinity" "faq --db $T/junk.sqlite list" \
  "faq --db $T/junk.sqlite add q a" "ingest --db $T/junk.sqlite $T/src" "serve --db $T/junk.sqlite --port 0 -m models/default.gguf"; do
  timeout 60 "$PB" $c >/dev/null 2>"$T/err"; rc=$?
  n_path=$(grep -o "junk.sqlite" "$T/err" | wc -l); n_db=$(grep -io "database" "$T/err" | wc -l)
  chk "$([ $rc = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && [ "$n_path" = 1 ] && [ "$n_db" = 1 ] && echo 0)" \
    "${c%% *} on a non-database: one line, the file named once ($(cat "$T/err"))"
done

# ---- ingest: a missing path creates no database (item 3) ----
"$PB" ingest --db "$T/typo.sqlite" "$T/no-such-folder" >/dev/null 2>"$T/err"; rc=$?
chk "$([ $rc = 1 ] && [ ! -e "$T/typo.sqlite" ] && grep -q "no-such-folder" "$T/err" && echo 0)" \
  "ingest of a missing path: exit 1, named, no database created (rc=$rc $(cat "$T/err"))"
# only special files named (a FIFO, a device): nothing to ingest, no empty database left (was: created, exit 3)
mkfifo "$T/in.fifo"
"$PB" ingest --db "$T/typo2.sqlite" "$T/in.fifo" /dev/zero >/dev/null 2>"$T/err"; rc=$?
chk "$([ $rc = 1 ] && [ ! -e "$T/typo2.sqlite" ] && grep -q "in.fifo: not a regular file or folder; nothing to ingest" "$T/err" && echo 0)" \
  "ingest of a FIFO and a device only: exit 1, named, no database created (rc=$rc $(cat "$T/err"))"
mkfifo "$T/fifo.sqlite"
timeout 20 "$PB" ingest --db "$T/fifo.sqlite" "$T/src" >/dev/null 2>"$T/err"; rc=$?
chk "$([ $rc = 1 ] && [ -p "$T/fifo.sqlite" ] && grep -q "FIFO" "$T/err" && echo 0)" "a FIFO as --db is refused ($(cat "$T/err"))"

# ---- faq add / import that fail create no database; an existing one keeps its pairs ----
printf '{"question": "one?", "answer": "yes"}\n{"question": "two?"}\n' >"$T/half.jsonl"
n_left=0; left=""
for c in "import $T/no-such.jsonl" "import $T/half.jsonl" "import $T/src" "add q" "add '' a"; do
  eval "\"\$PB\" faq --db \"\$T/new-faq.sqlite\" $c" >/dev/null 2>"$T/err"; rc=$?
  if [ $rc = 0 ] || [ ! -s "$T/err" ] || [ -e "$T/new-faq.sqlite" ]; then n_left=$((n_left + 1)); left="$left [$c: rc $rc]"; fi
  rm -f "$T/new-faq.sqlite"
done
chk "$([ $n_left = 0 ] && echo 0)" "faq add / import that fail: exit non-zero, said, no database left behind$left"
"$PB" faq --db "$T/kept.sqlite" add "kept?" "yes" >/dev/null 2>&1
"$PB" faq --db "$T/kept.sqlite" import "$T/half.jsonl" >/dev/null 2>"$T/err"; rc=$?
n=$("$PB" faq --db "$T/kept.sqlite" list 2>/dev/null | wc -l)
chk "$([ $rc = 1 ] && [ "$n" = 1 ] && grep -q "half.jsonl' line 2" "$T/err" && echo 0)" \
  "a failed import into an existing FAQ: exit 1 naming the line, the database and its pair kept (rc=$rc, $n pairs)"
# text after a line's JSON object is refused, naming the line and where, and nothing from the file is imported
# (cJSON alone stopped at the object's end: '{...} junk' was imported); whitespace after the object is fine
printf '{"q": "one?", "a": "yes"}\n{"q": "two?", "a": "no"} junk\n' >"$T/tail.jsonl"
"$PB" faq --db "$T/kept.sqlite" import "$T/tail.jsonl" >/dev/null 2>"$T/err"; rc=$?
n=$("$PB" faq --db "$T/kept.sqlite" list 2>/dev/null | wc -l)
chk "$([ $rc = 1 ] && [ "$n" = 1 ] && grep -q "tail.jsonl' line 2: more text after the JSON object (at column 26)" "$T/err" && echo 0)" \
  "faq import: a line with text after its JSON object is refused, nothing imported (rc=$rc, $n pairs, $(cat "$T/err"))"
# a \u0000 escape is refused naming the line (cJSON cut the answer there: "yes" was imported for "yes\u0000 and more");
# an escaped backslash before "u0000" is plain text
printf '{"q": "nul?", "a": "yes\\u0000 and more"}\n' >"$T/nul.jsonl"
"$PB" faq --db "$T/kept.sqlite" import "$T/nul.jsonl" >/dev/null 2>"$T/err"; rc=$?
n=$("$PB" faq --db "$T/kept.sqlite" list 2>/dev/null | wc -l)
chk "$([ $rc = 1 ] && [ "$n" = 1 ] && grep -q "nul.jsonl' line 1: holds a NUL character" "$T/err" && echo 0)" \
  "faq import: a \\u0000 escape is refused naming the line, nothing imported (rc=$rc, $n pairs, $(cat "$T/err"))"
printf '{"q": "path?", "a": "C:\\\\u0000x"}\n' >"$T/bs.jsonl"
"$PB" faq --db "$T/bs.jsonl.sqlite" import "$T/bs.jsonl" >/dev/null 2>"$T/err"; rc=$?
chk "$([ $rc = 0 ] && "$PB" faq --db "$T/bs.jsonl.sqlite" list 2>/dev/null | grep -qF 'C:\u0000x' && echo 0)" \
  "faq import: an escaped backslash before u0000 is text (rc=$rc $(cat "$T/err"))"
printf '{"q": "one?", "a": "yes"} \t\r\n' >"$T/ws.jsonl"
"$PB" faq --db "$T/kept.sqlite" import "$T/ws.jsonl" >"$T/out" 2>"$T/err"; rc=$?
chk "$([ $rc = 0 ] && grep -q "imported 1" "$T/out" && echo 0)" "faq import: whitespace after a line's JSON object is fine (rc=$rc $(cat "$T/err"))"

# ---- ingest: other charsets, no extension, .gz, non-UTF-8 file names (item 3) ----
D="$T/odd"; mkdir "$D"
printf 'Caf\351 cr\350me: the latin one talks about espresso\n' >"$D/latin1.txt"
printf '<html><head><meta charset="iso-8859-1"><title>Stra\337e</title></head><body><h1>Gr\374\337e</h1><p>Die Stra\337e ist lang, sagt das Fahrrad.</p></body></html>' >"$D/de.html"
printf '<html><head><meta http-equiv="Content-Type" content="text/html; charset=windows-1252"></head><body><p>Smart \223quotes\224 cost 5\200 in the bazaar.</p></body></html>' >"$D/w1252.html"
printf 'This README explains the walrus protocol.\n' >"$D/README"
printf '\177ELF\002\001\001\000\000\000binary' >"$D/program"
printf '# Gz notes\n\nThe gzipped note mentions an ocelot.\n' | gzip >"$D/notes.md.gz"
printf 'NEWS: the narwhal release.\n' | gzip >"$D/NEWS.gz"
printf 'not gzip at all' >"$D/broken.txt.gz"
BAD=$(printf 'na\357ve-\377.txt')
printf 'A file with a Latin-1 name about a quokka.\n' >"$D/$BAD"
"$PB" ingest --db "$T/odd.sqlite" "$D" >"$T/out" 2>"$T/err"; rc=$?
chk "$([ $rc = 3 ] && grep -q "7 added" "$T/out" && grep -q "2 skipped" "$T/out" && echo 0)" \
  "odd folder: 7 added, the binary and the broken .gz counted as skipped ($(cat "$T/out"))"
grep -q "skipped $D/program: no extension, sniffed as not text" "$T/err"; chk $? "the binary without extension is named as sniffed, not text"
grep -q "skipped $D/broken.txt.gz: gzip:" "$T/err"; chk $? "a damaged .gz is skipped with zlib's reason"
for pair in "espresso:latin1.txt:Café crème" "Fahrrad:de.html:Straße" "bazaar:w1252.html:“quotes”" "walrus:README:" \
  "ocelot:notes.md.gz:" "narwhal:NEWS.gz:" "quokka:na:"; do
  q=${pair%%:*}; rest=${pair#*:}; f=${rest%%:*}; txt=${rest#*:}
  "$PB" search --db "$T/odd.sqlite" "$q" -k 1 --json >"$T/j" 2>&1
  python3 - "$T/j" "$f" "$txt" <<'PY'
import json, sys
o = json.load(open(sys.argv[1], encoding="utf-8"))
h = o["hits"][0]
ok = ("/" + sys.argv[2]) in h["path"] and (not sys.argv[3] or sys.argv[3] in h["text"] + h["title"] + h["heading"])
sys.exit(0 if ok else 1)
PY
  chk $? "search '$q' finds $f (converted to UTF-8 where needed; JSON parses)"
done
# every JSON output of the knowledge-hub commands parses as strict UTF-8 JSON, with the non-UTF-8 file name in it
jparse() { python3 -c 'import json,sys; d=open(sys.argv[1],"rb").read(); json.loads(d.decode("utf-8","strict"))' "$1"; }
"$PB" search --db "$T/odd.sqlite" "quokka" --json >"$T/j1" 2>/dev/null
"$PB" ask --db "$T/odd.sqlite" --dry-run --json "quokka" >"$T/j2" 2>/dev/null
"$PB" ask --db "$T/odd.sqlite" -m models/default.gguf --fallback-after 0 --json "what about the quokka" >"$T/j3" 2>/dev/null
"$PB" faq --db "$T/faq.sqlite" add "$(printf 'caf\351?')" "$(printf 'cr\350me')" >/dev/null 2>"$T/err"; rc=$?
chk "$([ $rc = 1 ] && grep -q "not UTF-8" "$T/err" && echo 0)" "faq add of non-UTF-8 text is refused, named"
"$PB" faq --db "$T/faq.sqlite" add "what about the café" "crème" >/dev/null 2>&1
"$PB" faq --db "$T/faq.sqlite" list --json >"$T/j4" 2>/dev/null
"$PB" faq --db "$T/faq.sqlite" match "café" --json >"$T/j5" 2>/dev/null
for j in j1 j2 j3 j4 j5; do
  jparse "$T/$j" 2>/dev/null; chk $? "JSON output $j parses as UTF-8 ($(head -c 160 "$T/$j" | tr -c '[:print:]' '?'))"
done
grep -q 'na\\\?u\?f\?ve\|na.ve-' "$T/j1"; chk $? "the non-UTF-8 name is still shown (bad bytes replaced)"
"$PB" faq --db "$T/nofaq.sqlite" list >/dev/null 2>"$T/err"; rc=$?
chk "$([ $rc = 1 ] && [ ! -e "$T/nofaq.sqlite" ] && grep -q "no knowledge base" "$T/err" && echo 0)" \
  "faq list on a missing database: error, none created ($(cat "$T/err"))"

# ---- a folder that cannot be read is said, and --prune keeps its documents (was: skipped silently, exit 0, and
# --prune removed every document under it as "file is gone") ----
mkdir -p "$T/pr/locked" "$T/pr/open"; chmod 755 "$T/pr"
echo "The locked folder talks about a pangolin." >"$T/pr/locked/a.txt"
echo "The open folder talks about a tapir." >"$T/pr/open/b.txt"
"$PB" ingest -q --db "$T/pr.sqlite" "$T/pr" >/dev/null 2>&1
chmod 666 "$T/pr.sqlite"; chmod 000 "$T/pr/locked"; chmod 777 "$T"
as_user "$PB" ingest --prune --db "$T/pr.sqlite" "$T/pr" >"$T/out" 2>"$T/err"; rc=$?
chmod 755 "$T/pr/locked"
n=$("$PB" search --db "$T/pr.sqlite" pangolin 2>/dev/null | grep -c "locked/a.txt")
chk "$([ $rc = 3 ] && [ "$n" = 1 ] && grep -q "skipped $T/pr/locked: cannot read folder: Permission denied" "$T/err" \
  && ! grep -q removed "$T/err" && echo 0)" \
  "an unreadable folder is named, exit 3, --prune keeps its documents (rc=$rc $(cat "$T/err"))"
# ... and a folder that can be listed but not entered (r without x): its entries cannot be examined (lstat), which
# was skipped silently too, so --prune removed them
chmod 644 "$T/pr/locked"
as_user "$PB" ingest --prune --db "$T/pr.sqlite" "$T/pr" >"$T/out" 2>"$T/err"; rc=$?
chmod 755 "$T/pr/locked"
n=$("$PB" search --db "$T/pr.sqlite" pangolin 2>/dev/null | grep -c "locked/a.txt")
chk "$([ $rc = 3 ] && [ "$n" = 1 ] && grep -q "skipped $T/pr/locked/a.txt: cannot examine it: Permission denied" "$T/err" \
  && ! grep -q removed "$T/err" && echo 0)" \
  "an entry of a folder without search permission is named, exit 3, --prune keeps it (rc=$rc $(cat "$T/err"))"

# ---- a database write that fails mid-ingest (a full disk; here the file size limit, with SIGXFSZ ignored so the
# write fails instead of the signal ending the process): one line naming the file once and saying what is kept; the
# documents committed before are intact and a second run finishes ----
mkdir -p "$T/big/a" "$T/big/b"
cp tests/data/kb/corpus/sched_setaffinity.2.md "$T/big/a/"
ls tests/data/kb/corpus/*.md | head -120 | while read -r f; do cp "$f" "$T/big/b/"; done
"$PB" ingest -q --db "$T/big.sqlite" "$T/big/a" >/dev/null 2>&1
(trap '' XFSZ; ulimit -f 1024; exec "$PB" ingest -q --db "$T/big.sqlite" "$T/big/b") >"$T/out" 2>"$T/err"; rc=$?
n=$("$PB" search --db "$T/big.sqlite" "CPU affinity mask" 2>/dev/null | grep -c "sched_setaffinity.2.md")
chk "$([ $rc = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "^pocketbrain ingest: store '$T/big.sqlite': .*; the files committed before it are kept: run the same ingest again to finish$" "$T/err" \
  && [ "$n" = 1 ] && echo 0)" "a write failing mid-ingest: one line, the file once, what is kept; earlier documents intact (rc=$rc n=$n $(cat "$T/err"))"
"$PB" ingest -q --db "$T/big.sqlite" "$T/big/b" >/dev/null 2>&1; rc=$?
n=$(python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute("PRAGMA integrity_check").fetchone()[0], c.execute("SELECT count(*) FROM documents").fetchone()[0])' "$T/big.sqlite")
chk "$([ $rc = 0 ] && [ "$n" = "ok 121" ] && echo 0)" "... and the next run finishes the job ($n)"

# ---- another program writing the knowledge base (here python's sqlite3 holding the write lock): ingest and faq add
# say what "database is locked" means, once, with the file named once ("faq: add: store 'F': faq add: ...") ----
python3 -c 'import sqlite3,sys,time; c=sqlite3.connect(sys.argv[1],isolation_level=None); c.execute("BEGIN IMMEDIATE"); print("locked",flush=True); time.sleep(4); c.execute("ROLLBACK")' "$T/big.sqlite" >"$T/lock" &
lpid=$!; i=0; while ! grep -q locked "$T/lock" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
"$PB" ingest -q --db "$T/big.sqlite" "$T/big/a" >/dev/null 2>"$T/err"; rc1=$?
"$PB" faq --db "$T/big.sqlite" add "Where is the key?" "Under the mat." >/dev/null 2>>"$T/err"; rc2=$?
wait $lpid
chk "$([ $rc1 = 1 ] && [ $rc2 = 1 ] && [ "$(grep -c "^pocketbrain \(ingest\|faq\): store '$T/big.sqlite': .*database is locked (another program is writing this knowledge base; try again when it has finished)" "$T/err")" = 2 ] \
  && [ "$(grep -c "big.sqlite" "$T/err")" = 2 ] && ! grep -q "faq: add:" "$T/err" && echo 0)" "a knowledge base another program is writing: ingest and faq add say so (rc $rc1 $rc2 $(cat "$T/err"))"
