#!/bin/sh
# test_install.sh -- `make install` into a DESTDIR: CLI, library, header, man page and pocketbrain.pc; a small
# program compiled and linked through pkg-config runs; `make uninstall` removes it all. Also: `make run`
# installs only the run level of scripts/deps.sh (no test toolchain), `make test` the test level.
BUILD=${PB_BUILD:-build}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
MK="make --no-print-directory -s BUILD=$BUILD"

# ---- deps levels ----
run_pkgs=$(sh scripts/deps.sh --list run)
test_pkgs=$(sh scripts/deps.sh --list test)
leak=""
for p in chromium qemu-user valgrind clang lld llvm gcc-aarch64-linux-gnu tmux; do # lld, llvm: the Android recipe (test_clang_arm64)
  case " $run_pkgs " in *" $p "*) leak="$leak $p" ;; esac
  case " $test_pkgs " in *" $p "*) ;; *) leak="$leak (test lacks $p)" ;; esac
done
case " $run_pkgs " in *" gcc "*) ;; *) leak="$leak (run lacks gcc)" ;; esac
if [ -z "$leak" ]; then ok "deps.sh run: compiler + libraries only; test adds the toolchain"; else nok "deps levels:$leak"; fi
if make -n run 2>/dev/null | grep -q "deps.sh run" && make -n test 2>/dev/null | grep -q "deps.sh test"; then
  ok "make run uses deps level run, make test level test"
else nok "make run/test deps levels: $(make -n run 2>&1 | head -3)"; fi

# ---- install ----
D="$T/stage"; P=/opt/pocketbrain
$MK install PREFIX=$P DESTDIR="$D" >"$T/log" 2>&1; rc=$?
missing=""
for f in bin/pocketbrain lib/libpocketbrain.a include/pocketbrain.h share/man/man1/pocketbrain.1 lib/pkgconfig/pocketbrain.pc; do
  [ -f "$D$P/$f" ] || missing="$missing $f"
done
if [ $rc = 0 ] && [ -z "$missing" ] && [ -x "$D$P/bin/pocketbrain" ]; then ok "make install DESTDIR PREFIX installs bin, lib, header, man page, .pc"; else
  nok "make install rc $rc, missing:$missing $(tail -5 "$T/log")"; fi
if grep -q "^prefix=$P\$" "$D$P/lib/pkgconfig/pocketbrain.pc" && ! grep -q "$D" "$D$P/lib/pkgconfig/pocketbrain.pc"; then
  ok "pocketbrain.pc names PREFIX, not the DESTDIR"; else nok "pocketbrain.pc: $(cat "$D$P/lib/pkgconfig/pocketbrain.pc")"; fi
cat >"$T/hello.c" <<'EOF'
#include <pocketbrain.h>
#include <stdio.h>
int main(void) {
    pb_model *m = NULL;
    pb_status s = pb_model_open("/nonexistent.gguf", NULL, &m);
    printf("pocketbrain %s abi %d open=%s\n", pb_version(), pb_abi_version(), pb_status_name(s));
    return s == PB_OK;
}
EOF
PC="pkg-config --define-variable=prefix=$D$P"
export PKG_CONFIG_PATH="$D$P/lib/pkgconfig"
cflags=$($PC --cflags pocketbrain) && libs=$($PC --libs pocketbrain) &&
  cc -std=c11 $cflags "$T/hello.c" -o "$T/hello" $libs 2>"$T/cc"; rc=$?
out=$("$T/hello" 2>&1)
ver=$(sed -n 's/^#define PB_VERSION_STRING "\(.*\)"/\1/p' include/pocketbrain.h)
if [ $rc = 0 ] && echo "$out" | grep -q "pocketbrain $ver abi [0-9]* open=PB_ERR_IO"; then
  ok "a program built with pkg-config --cflags --libs pocketbrain links and runs: $out"
else nok "pkg-config build rc $rc: $(cat "$T/cc") $out"; fi
if [ "$($PC --modversion pocketbrain)" = "$ver" ]; then ok "pkg-config --modversion = $ver"; else nok "modversion"; fi
if "$D$P/bin/pocketbrain" --version | grep -q "$ver"; then ok "the installed CLI runs"; else nok "installed CLI"; fi

# ---- uninstall ----
$MK uninstall PREFIX=$P DESTDIR="$D" >"$T/log" 2>&1; rc=$?
left=$(find "$D" -type f | sed "s|$D||" | tr '\n' ' ')
if [ $rc = 0 ] && [ -z "$left" ]; then ok "make uninstall removes every installed file"; else nok "uninstall rc $rc left: $left"; fi
exit 0
