#!/bin/sh
# cross_test.sh -- ARM64 check: cross-builds the core library and a subset of the unit tests with
# aarch64-linux-gnu-gcc (static, build-arm64/) and runs them under qemu-aarch64 from the repo root, so
# ../shared fixtures resolve as on the host. The subset (kernels, model, gguf, quant, and the public API under misuse:
# test_api_contract forks a child per call, which qemu-user runs like any process) keeps the run under ~5 minutes on
# 2 cores; the whole unit suite is too slow under emulation.
# Usage: sh scripts/cross_test.sh [TEST_NAME...]   (default: the subset below)
# PB_CROSS_BUILD=DIR builds in DIR instead of build-arm64 (a second checkout user's own folder).
# Prints run.sh-style PASS/FAIL lines and "N passed, N failed"; exit status 1 on any failure.
cd "$(dirname "$0")/.." || exit 1
BUILD=${PB_CROSS_BUILD:-build-arm64}
TESTS=${*:-"test_kernels test_quant test_quant_dot test_gguf test_gguf_malformed test_model test_pack test_pack_model test_matmul_group test_pool_wake test_api_contract"}
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  echo "not ok - cross_test needs gcc-aarch64-linux-gnu and qemu-user (scripts/deps.sh)"
  exit 1
fi
targets=""
for t in $TESTS; do
  if [ -f "tests/$t.c" ]; then targets="$targets $BUILD/tests/$t"; else echo "# $t: tests/$t.c not found, skipped"; fi
done
mkdir -p "$BUILD"
if ! make --no-print-directory CROSS=aarch64-linux-gnu- BUILD=$BUILD -j2 $targets >"$BUILD/cross-build.log" 2>&1; then
  tail -20 "$BUILD/cross-build.log"
  echo "not ok - ARM64 cross build failed (log: $BUILD/cross-build.log)"
  exit 1
fi
LOGS="$BUILD/test-logs"
mkdir -p "$LOGS"
pass=0; fail=0
for bin in $targets; do
  name=$(basename "$bin")
  start=$(date +%s)
  # -cpu max: an ARMv8.x CPU with dotprod and fp16, so the NEON kernels are the ones dispatched
  # at most 600 s a test: a hang (there was one: a lost wake-up, see src/base/pool.c) fails by name
  timeout -k 10 600 qemu-aarch64 -cpu max "$bin" >"$LOGS/$name.log" 2>&1
  rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "not ok - $name timed out after 600 s under qemu" >>"$LOGS/$name.log"; fi
  p=$(grep -c '^ok ' "$LOGS/$name.log"); f=$(grep -c '^not ok ' "$LOGS/$name.log")
  [ "$rc" != 0 ] && [ "$f" = 0 ] && f=1
  [ "$p" = 0 ] && [ "$f" = 0 ] && f=1
  pass=$((pass + p)); fail=$((fail + f))
  secs=$(( $(date +%s) - start ))
  if [ "$f" = 0 ]; then echo "PASS $name [arm64/qemu] ($p checks, ${secs}s)"; else
    echo "FAIL $name [arm64/qemu] ($p passed, $f failed, rc $rc, ${secs}s) -- log: $LOGS/$name.log"
    grep '^not ok ' "$LOGS/$name.log" | head -10 | sed 's/^/    /'
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
