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
