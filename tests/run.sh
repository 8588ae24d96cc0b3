#!/bin/sh
# run.sh -- runs every test (C binaries, shell and node tests) and prints "N passed, N failed".
# Usage: tests/run.sh BUILD_DIR [--unit-only] [--qemu] [--filter NAME]
# Each test prints lines "ok - ..." / "not ok - ..."; a test that exits non-zero without a
# "not ok" line counts as one failure. Logs go to BUILD_DIR/test-logs/. Each test gets at most
# PB_TEST_TIMEOUT seconds (default 900): a hung test fails by name instead of eating CI's time.
BUILD=${1:-build}; shift
UNIT_ONLY=0; QEMU=""; FILTER=""
while [ $# -gt 0 ]; do
  case "$1" in
    --unit-only) UNIT_ONLY=1 ;;
    --qemu) QEMU="qemu-aarch64" ;;
    --filter) shift; FILTER="$1" ;;
  esac
  shift
done
export PB_BUILD="$BUILD"
export PB_BIN="$BUILD/pocketbrain"
export PB_MODELS="$BUILD/test-library" # an empty model library: tests never see the user's pulled models
mkdir -p "$BUILD/test-cache" # the CLI's packed-weights cache, never the user's ~/.cache (absolute: XDG ignores relative)
export XDG_CACHE_HOME="$(cd "$BUILD/test-cache" && pwd)"
LOGS="$BUILD/test-logs"; mkdir -p "$LOGS"
TEST_TIMEOUT=${PB_TEST_TIMEOUT:-900}
pass=0; fail=0; failed_names=""
run_one() { # name, command...
  name=$1; shift
  case "$name" in *"$FILTER"*) ;; *) return ;; esac
  start=$(date +%s)
  timeout -k 10 "$TEST_TIMEOUT" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "not ok - $name timed out after ${TEST_TIMEOUT}s" >>"$LOGS/$name.log"; fi
  p=$(grep -c '^ok ' "$LOGS/$name.log"); f=$(grep -c '^not ok ' "$LOGS/$name.log")
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; echo "not ok - $name exited with status $rc" >>"$LOGS/$name.log"; fi
  if [ "$p" = 0 ] && [ "$f" = 0 ]; then f=1; echo "not ok - $name ran no check" >>"$LOGS/$name.log"; fi
  pass=$((pass + p)); fail=$((fail + f))
  secs=$(( $(date +%s) - start ))
  if [ "$f" = 0 ]; then echo "PASS $name ($p checks, ${secs}s)"; else
    echo "FAIL $name ($p passed, $f failed, ${secs}s) -- log: $LOGS/$name.log"
    grep '^not ok ' "$LOGS/$name.log" | head -20 | sed 's/^/    /'
    failed_names="$failed_names $name"
  fi
}
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  case "$t" in *.d|*.o) continue ;; esac
  run_one "$(basename "$t")" $QEMU "$t"
done
if [ "$UNIT_ONLY" = 0 ]; then
  for t in "$BUILD"/tests/itest_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d|*.o) continue ;; esac
    run_one "$(basename "$t")" "$t"
  done
  for t in "$BUILD"/examples/*; do
    [ -x "$t" ] || continue
    case "$t" in *.d|*.o) continue ;; esac
    run_one "example_$(basename "$t")" sh tests/example_check.sh "$t"
  done
  for t in tests/test_*.sh; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t" .sh)" sh "$t"
  done
  for t in tests/node/test_*.mjs; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t" .mjs)" node "$t"
  done
fi
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
