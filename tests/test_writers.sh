#!/bin/sh
# test_writers.sh -- every file pocketbrain writes goes through the atomic writer (src/base/os_unix.c: random O_EXCL |
# O_NOFOLLOW temp name, non-regular targets refused, fsync + rename + directory fsync) or, where a file must be
# written in place (a download's part, a lock), is opened with O_NOFOLLOW. A source scan for the class: fopen() for
# writing, creat(), open(... O_CREAT ...) without O_NOFOLLOW, rename() outside the writer. tools/armcount is a qemu
# plugin for the tests, not part of pocketbrain.
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
files=$(find src tools -name '*.c' ! -path 'tools/armcount/*' | sort)
n=$(echo "$files" | wc -l)
# fopen with a mode that writes: "w", "a", "r+" (any of them followed by b / x / e)
w=$(grep -nE 'fopen\([^;]*"(w|a|r\+)' $files)
if [ -z "$w" ]; then ok "no fopen() for writing in $n source files"; else nok "fopen() for writing bypasses the atomic writer: $w"; fi
c=$(grep -nE '\bcreat\(|mkstemp\(|tmpfile\(' $files)
if [ -z "$c" ]; then ok "no creat() / mkstemp() / tmpfile()"; else nok "other file creation: $c"; fi
# open() calls that create: the statement (up to its ';') must name O_NOFOLLOW
o=$(for f in $files; do
  awk -v f="$f" '/[^_a-z]open\(/ { s = ""; l = NR } l { s = s $0 } l && /;/ { if (s ~ /O_CREAT/ && s !~ /O_NOFOLLOW/) print f ":" l ": " s; l = 0 }' "$f"
done)
if [ -z "$o" ]; then ok "every open(... O_CREAT ...) has O_NOFOLLOW"; else nok "open() that creates and follows links: $o"; fi
# rename(): the writer's commit, and pull's part -> model (checked with pb_output_check just before)
r=$(grep -nE '(^|[^_a-z])rename\(' $files | grep -v '^src/base/os_unix.c:')
echo "$r" | while IFS= read -r hit; do
  [ -z "$hit" ] && continue
  f=${hit%%:*}; rest=${hit#*:}; l=${rest%%:*}
  from=$((l > 8 ? l - 8 : 1))
  sed -n "${from},${l}p" "$f" | grep -q 'pb_output_check' || echo "$hit"
done >"${TMPDIR:-/tmp}/pb_writers.$$"
bad=$(cat "${TMPDIR:-/tmp}/pb_writers.$$"); rm -f "${TMPDIR:-/tmp}/pb_writers.$$"
if [ -z "$bad" ]; then ok "every rename() outside the atomic writer checks its target first ($(echo "$r" | grep -c .) found)"
else nok "rename() over an unchecked target: $bad"; fi

# ---- the writer at run time (strace): temp O_EXCL|O_NOFOLLOW, file fsync before the rename, directory fsync after ----
BIN=${PB_BIN:-build/pocketbrain}
SRC=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.f16.gguf
if ! command -v strace >/dev/null 2>&1 || [ ! -r "$SRC" ]; then
  if [ "$CI" = true ]; then nok "strace or $SRC missing (scripts/deps.sh test installs strace)"; exit 1; fi
  ok "skipped the strace check: no strace or no fixture"; exit 0
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
BIN=$(abs "$BIN"); SRC=$(abs "$SRC")
(cd "$T" && strace -f -e trace=openat,fsync,fdatasync,rename,renameat,renameat2 -o st.log "$BIN" quantize "$SRC" out.gguf q8_0 \
  >/dev/null 2>&1)
awk '
  /"out\.gguf\.tmp\.[0-9a-f]+", O_WRONLY\|O_CREAT\|O_EXCL\|O_NOFOLLOW/ { split($0, a, "= "); tmpfd = a[2] + 0; opened = NR }
  opened && !renamed && index($0, "fsync(" tmpfd ")") { synced = NR }
  /rename\("out\.gguf\.tmp\.[0-9a-f]+", "out\.gguf"\) = 0/ { renamed = NR }
  renamed && /O_DIRECTORY/ { split($0, b, "= "); dirfd = b[2] + 0; diropen = NR }
  diropen && index($0, "fsync(" dirfd ")") { dirsync = NR }
  END { exit !(opened && synced > opened && renamed > synced && dirsync > renamed) }' "$T/st.log"
if [ $? = 0 ]; then ok "quantize's output: random temp O_EXCL|O_NOFOLLOW, fsync, rename, directory fsync (strace)"
else nok "the writer's syscalls are not temp/fsync/rename/dir-fsync: $(grep -E 'out.gguf|fsync|O_DIRECTORY' "$T/st.log" | tail -8 | tr '\n' ' ')"; fi
