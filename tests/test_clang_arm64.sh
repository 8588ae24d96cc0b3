#!/bin/sh
# test_clang_arm64.sh -- the phone builds of docs/MOBILE.md compile the core library with clang (Xcode's for iOS, the
# NDK's for Android), and the CI's ARM64 build uses GCC only. clang refuses some things GCC takes (a NEON lane index
# that is a constant only after unrolling: arm_neon.c's Q5_0 one-token tile broke `make lib` with clang that way), so
# every core source is compiled here by clang for aarch64 with the Makefile's warnings and ISA flags, -fsyntax-only;
# then docs/MOBILE.md's Android recipe is run as written (below).
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

# docs/MOBILE.md's Android recipe, as written there, with Debian's clang standing in for the NDK's: its ```sh block
# under "## Android" runs with TC pointing at a wrapper named as the NDK's compiler (clang --target=aarch64-linux-gnu,
# lld) and its build folder and jni.c moved to a temporary directory. Then: the shared object has 16 KiB-aligned
# segments and exports the API, and examples/simple.c linked against the archive answers under qemu-aarch64.
if ! command -v ld.lld >/dev/null || ! command -v llvm-ar >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  if [ "$CI" = true ]; then nok "the Android recipe needs ld.lld, llvm-ar and qemu-aarch64"; else
    ok "skipped: the Android recipe of docs/MOBILE.md (no ld.lld, llvm-ar or qemu-aarch64)"; fi
  exit 0
fi
mkdir -p "$T/tc"
# (the NDK's clang links with lld by default: the stand-in names it only where it links, since a compile given
# -fuse-ld fails under the -Werror of CI builds: "argument unused during compilation")
printf '#!/bin/sh\ncase " $* " in *" -c "*) exec clang --target=aarch64-linux-gnu "$@" ;; esac\nexec clang --target=aarch64-linux-gnu -fuse-ld=lld "$@"\n' \
  >"$T/tc/aarch64-linux-android28-clang"
chmod +x "$T/tc/aarch64-linux-android28-clang"
ln -s "$(command -v llvm-ar)" "$T/tc/llvm-ar"
cat >"$T/jni.c" <<'EOF'
#include <pocketbrain.h>
int pbj_abi(void); /* stands for the app's JNI glue */
int pbj_abi(void) { return pb_abi_version(); }
EOF
awk '/^## Android/ { a = 1 } a && /^```sh/ { b = 1; next } b && /^```/ { exit } b' docs/MOBILE.md |
  grep -v '^NDK=\|^TC=' | sed "s|build-android|$T/build-android|g; s| jni\.c | $T/jni.c |" >"$T/recipe.sh"
if grep -q 'make lib' "$T/recipe.sh" && TC="$T/tc" sh -e "$T/recipe.sh" >"$T/recipe.log" 2>&1 &&
  [ -f "$T/build-android/libpocketbrain.a" ] && [ -f "$T/build-android/libpocketbrain.so" ]; then
  ok "docs/MOBILE.md's Android recipe builds libpocketbrain.a and libpocketbrain.so (clang for the NDK's)"
else
  nok "docs/MOBILE.md's Android recipe failed: $(tail -5 "$T/recipe.log" | tr '\n' ' ')"
  exit 0
fi
so="$T/build-android/libpocketbrain.so"
align=$(readelf -lW "$so" | awk '$1 == "LOAD" { print $NF }' | sort -u | tr '\n' ' ')
if [ "$align" = "0x4000 " ] && nm -D --defined-only "$so" | grep -q ' T pb_session_chat$'; then
  ok "the shared object: LOAD segments aligned $align(16 KiB pages), pb_session_chat exported"
else nok "the shared object: LOAD alignment '$align', exports: $(nm -D --defined-only "$so" | grep -c ' T pb_')"; fi
model=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
if "$T/tc/aarch64-linux-android28-clang" -std=c11 -O2 -Iinclude examples/simple.c -o "$T/simple" \
  "$T/build-android/libpocketbrain.a" -lm -lpthread -static >"$T/link.log" 2>&1 &&
  out=$(qemu-aarch64 -cpu max "$T/simple" "$model" "What is a harbor?" 2>&1) && [ -n "$out" ]; then
  ok "examples/simple.c linked against that archive answers under qemu-aarch64"
else nok "simple.c on the Android-recipe archive: $(tail -3 "$T/link.log") $out"; fi
exit 0
