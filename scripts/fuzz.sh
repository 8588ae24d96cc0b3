#!/bin/sh
# fuzz.sh -- builds the libFuzzer targets (`make fuzz`) and runs each tests/fuzz_*.c for SECONDS over its seed corpus.
# Usage: sh scripts/fuzz.sh [SECONDS]   (default 60, per target)
# Corpus of a target: the first tests/data/... path named on line 2 of its source, else tests/data/<name minus fuzz_>/.
# The seed corpus is only read; new inputs go to build-fuzz/corpus-<name>/, crashes to build-fuzz/artifacts/<name>/.
# Prints "ok - <name> N runs, no crash" or "not ok - <name> ..." per target; exit status 1 if any failed.
SECS=${1:-60}
cd "$(dirname "$0")/.." || exit 1
OUT=build-fuzz
mkdir -p "$OUT"
if ! make --no-print-directory fuzz >"$OUT/build.log" 2>&1; then
  tail -20 "$OUT/build.log"
  echo "not ok - make fuzz failed (log: $OUT/build.log)"
  exit 1
fi
fail=0
found=0
for src in tests/fuzz_*.c; do
  [ -f "$src" ] || continue
  found=1
  name=$(basename "$src" .c)
  bin="$OUT/$name"
  seeds=$(sed -n 2p "$src" | grep -o 'tests/data/[A-Za-z0-9_./-]*' | head -1)
  [ -n "$seeds" ] || seeds="tests/data/${name#fuzz_}/"
  work="$OUT/corpus-$name"
  art="$OUT/artifacts/$name"
  log="$OUT/$name.log"
  mkdir -p "$work" "$art"
  dirs="$work"
  if [ -d "$seeds" ]; then dirs="$work $seeds"; else echo "# $name: seed corpus $seeds missing, starting empty"; fi
  if [ ! -x "$bin" ]; then echo "not ok - $name was not built"; fail=1; continue; fi
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$art/" $dirs >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  crashes=$(ls "$art" 2>/dev/null | wc -l)
  if [ "$rc" = 0 ] && [ "$crashes" = 0 ] && [ -n "$runs" ]; then
    echo "ok - $name $runs runs, no crash"
  else
    echo "not ok - $name exit $rc, ${runs:-?} runs, $crashes artifact(s) in $art (log: $log)"
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5 | sed 's/^/#   /'
    fail=1
  fi
done
[ "$found" = 1 ] || { echo "not ok - no tests/fuzz_*.c targets"; exit 1; }
exit $fail
