#!/bin/sh
# test_pack_cache_cli.sh -- the CLI's packed-weights cache: written under $XDG_CACHE_HOME/pocketbrain (else
# ~/.cache/pocketbrain) by the first `run`, mapped by the next (run -v says which), same output either way;
# --no-pack-cache and PB_PACK_CACHE=off leave it alone; an unwritable location still runs; bench --cold uses it.
BIN=${PB_BIN:-build/pocketbrain}
M=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
if [ ! -f "$M" ]; then
  if [ "$CI" = true ]; then echo "not ok - no model ($M)"; exit 1; fi
  echo "ok - skipped: no model"; exit 0
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else nok "$1"; fi; }
cp "$M" "$T/m.gguf"
R="$BIN run -m $T/m.gguf -t 1 --raw -p Harbors -n 8 --temp 0 -v"
n_files() { find "$1" -type f 2>/dev/null | wc -l; }

XDG_CACHE_HOME=$T/xdg $R >"$T/o1" 2>"$T/e1"; rc=$?
check "first run writes the cache under \$XDG_CACHE_HOME/pocketbrain (rc $rc): $(grep 'pack cache' "$T/e1")" \
  '[ $rc = 0 ] && grep -q "^\[pack cache: wrote $T/xdg/pocketbrain/m-[0-9a-f]*\.pbpack" "$T/e1" && [ $(n_files "$T/xdg") = 1 ]'
XDG_CACHE_HOME=$T/xdg $R >"$T/o2" 2>"$T/e2"; rc=$?
check "second run maps it, nothing repacked (rc $rc): $(grep 'pack cache' "$T/e2")" \
  '[ $rc = 0 ] && grep -q "^\[pack cache: mapped " "$T/e2"'
XDG_CACHE_HOME=$T/xdg $R --no-pack-cache >"$T/o3" 2>"$T/e3"; rc=$?
check "--no-pack-cache: no cache line, same text (rc $rc)" \
  '[ $rc = 0 ] && ! grep -q "pack cache" "$T/e3" && [ -s "$T/o1" ] && cmp -s "$T/o1" "$T/o2" && cmp -s "$T/o1" "$T/o3"'
PB_PACK_CACHE=off XDG_CACHE_HOME=$T/xdg2 $R >"$T/o4" 2>"$T/e4"; rc=$?
check "PB_PACK_CACHE=off: nothing written (rc $rc)" '[ $rc = 0 ] && ! grep -q "pack cache" "$T/e4" && [ ! -e "$T/xdg2" ]'
env -u XDG_CACHE_HOME HOME=$T/home $R >"$T/o5" 2>"$T/e5"; rc=$?
check "no \$XDG_CACHE_HOME: ~/.cache/pocketbrain (rc $rc)" \
  '[ $rc = 0 ] && [ $(n_files "$T/home/.cache/pocketbrain") = 1 ] && cmp -s "$T/o1" "$T/o5"'
: >"$T/blocker"
XDG_CACHE_HOME=$T/blocker $R >"$T/o6" 2>"$T/e6"; rc=$?
check "a file where the cache dir should be: still runs, says why (rc $rc): $(grep 'pack cache' "$T/e6")" \
  '[ $rc = 0 ] && grep -q "^\[pack cache: not written (.*not a directory" "$T/e6" && cmp -s "$T/o1" "$T/o6"'
XDG_CACHE_HOME=$T/xdg $BIN bench -m "$T/m.gguf" -t 1 --cold -r 1 >"$T/b1" 2>&1; rc=$?
check "bench --cold maps the cache (rc $rc)" '[ $rc = 0 ] && grep -q "mapped from the pack cache" "$T/b1"'
XDG_CACHE_HOME=$T/xdg $BIN bench -m "$T/m.gguf" -t 1 --cold -r 1 --no-pack-cache >"$T/b2" 2>&1; rc=$?
check "bench --cold --no-pack-cache repacks (rc $rc)" '[ $rc = 0 ] && grep -q "| repacked |" "$T/b2"'

# rm of a library model takes its packed-weights cache with it (it is as large as the model)
mkdir -p "$T/lib"
cp "$M" "$T/lib/tiny.gguf"
echo '{"name":"tiny","file":"tiny.gguf"}' >"$T/lib/tiny.json"
PB_MODELS=$T/lib XDG_CACHE_HOME=$T/xdgr $BIN run -m tiny -t 1 --raw -p Harbors -n 2 --temp 0 >/dev/null 2>&1
before=$(n_files "$T/xdgr/pocketbrain")
PB_MODELS=$T/lib XDG_CACHE_HOME=$T/xdgr $BIN rm tiny >"$T/rm.out" 2>&1; rc=$?
check "rm NAME removes the model's cache file too (rc $rc, cache files $before -> $(n_files "$T/xdgr/pocketbrain")): $(cat "$T/rm.out")" \
  '[ $rc = 0 ] && [ "$before" = 1 ] && [ $(n_files "$T/xdgr/pocketbrain") = 0 ] && [ ! -e "$T/lib/tiny.gguf" ]'

# A signal while the first open writes the cache (Ctrl-C, kill, a closed terminal) leaves no temp file in the cache
# directory (was: "<model>.pbpack.tmp.<hex>", as large as the weights, left there for good). Polls for the temp
# file and signals it; a run that wrote its cache before it was seen is tried again.
for sig in HUP INT TERM; do
  caught=0
  for try in 1 2 3 4 5 6 7 8; do
    rm -rf "$T/xsig"
    XDG_CACHE_HOME=$T/xsig $R >/dev/null 2>&1 &
    pid=$!
    for i in $(seq 1 400); do ls "$T/xsig/pocketbrain" 2>/dev/null | grep -q tmp && { caught=1; break; }; sleep 0.005; done
    kill -$sig $pid 2>/dev/null
    wait $pid; rc=$?
    [ $caught = 1 ] && break
  done
  if [ $caught = 0 ]; then ok "SIG$sig during the cache write: not caught in 8 tries (the write was too fast), nothing to check"
  else check "SIG$sig during the first open's cache write: status $rc, no temp file left" \
    '[ $rc -gt 128 ] && [ -z "$(ls "$T/xsig/pocketbrain" | grep tmp)" ]'; fi
done
