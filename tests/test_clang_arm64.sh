#!/bin/sh
# test_clang_arm64.sh -- the phone builds of docs/MOBILE.md compile the core library with clang (Xcode's for iOS, the
# NDK's for Android), and the CI's ARM64 build uses GCC only. clang refuses some things GCC takes (a NEON lane index
# that is a constant only after unrolling: arm_neon.c's Q5_0 one-token tile broke `make lib` with clang that way), so
# every core source is compiled here by clang for aarch64 with the Makefile's warnings and ISA flags, -fsyntax-only.
# Needs clang and the ARM64 glibc headers (scripts/deps.sh test: clang, libc6-dev-arm64-cross).
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; }

printf '#include <arm_neon.h>\n#include <stdio.h>\nint main(void) { return 0; }\n' >"$T/probe.c"
if ! command -v clang >/dev/null || ! clang --target=aarch64-linux-gnu -fsyntax-only "$T/probe.c" 2>/dev/null; then
  if [ "$CI" = true ]; then nok "clang for aarch64-linux-gnu is not usable (scripts/deps.sh test)"; exit 1; fi
  ok "skipped: no clang with ARM64 headers"
  exit 0
fi
WARN="-Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wdouble-promotion -Wformat=2
 -Wno-unused-parameter"
n=0
bad=""
for f in src/base/*.c src/gguf/*.c src/tensor/*.c src/kernels/*.c src/model/*.c src/tokenizer/*.c src/sampler/*.c \
  src/engine/*.c src/cuda/stub.c; do
  case "$f" in */x86_*) continue ;; esac
  isa=""
  case "$f" in
    */arm_neon.c) isa="-march=armv8.2-a+dotprod+fp16" ;; # the Makefile's ISA_FLAGS of these two files
    */arm_i8mm.c) isa="-march=armv8.2-a+dotprod+fp16+i8mm" ;;
  esac
  # shellcheck disable=SC2086
  if ! clang --target=aarch64-linux-gnu -std=c11 -O2 -D_GNU_SOURCE -Werror $WARN -Iinclude -Isrc $isa \
    -fsyntax-only "$f" >"$T/log" 2>&1; then
    bad="$bad $f"
    sed 's/^/# /' "$T/log" | head -6
  fi
  n=$((n + 1))
done
if [ -z "$bad" ] && [ "$n" -gt 30 ]; then ok "clang (aarch64, -Werror) compiles all $n core sources"; else
  nok "clang (aarch64) refuses:$bad ($n files)"; fi
exit 0
