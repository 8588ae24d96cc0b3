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
