#!/bin/sh
# test_armcount.sh -- the armcount qemu plugin on a tiny aarch64 program with a known instruction mix:
# exact counts by class and bytes loaded/stored, in hint-marker and symbol modes; bad arguments refused.
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $*"; }
bad() { echo "not ok - $*"; }
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  if [ "$CI" = true ]; then bad "armcount needs gcc-aarch64-linux-gnu and qemu-user (scripts/deps.sh)"; exit 1; fi
  echo "# skip: no aarch64 cross compiler or qemu-aarch64"; ok "skipped without cross tools"; exit 0
fi
if ! make --no-print-directory armcount >"$T/make.log" 2>&1; then
  bad "make armcount: $(tail -3 "$T/make.log")"; exit 1
fi
PLUG=build/armcount/libarmcount.so
if ! aarch64-linux-gnu-gcc -O1 -static -march=armv8.2-a+dotprod+i8mm tools/armcount/probe.c -o "$T/probe" 2>"$T/cc.log"; then
  bad "cross-compile probe: $(head -3 "$T/cc.log")"; exit 1
fi
want='"total": {"insns": 801, "dot": 200, "mmla": 100, "simd": 100, "ldst": 300, "scalar": 201, "bytes_loaded": 2400, "bytes_stored": 800}'
if qemu-aarch64 -cpu max -plugin "$PLUG,out=$T/h.json" "$T/probe" >/dev/null 2>"$T/q.log"; then
  got=$(grep '"total"' "$T/h.json" | sed 's/^ *//; s/,$//')
  [ "$got" = "$want" ] && ok "hint markers: 801 instructions by class, 2400 bytes loaded, 800 stored" ||
    bad "hint markers: got $got"
  grep -q '"n_regions": 1,' "$T/h.json" && grep -q '"vcpu": 0' "$T/h.json" && ok "one region, per-thread entry" ||
    bad "hint regions: $(head -1 "$T/h.json")"
else
  bad "qemu with plugin (hint): $(tail -3 "$T/q.log")"
fi
if qemu-aarch64 -cpu max -plugin "$PLUG,sym=probe_sum,out=$T/s.json" "$T/probe" >/dev/null 2>"$T/q.log"; then
  r1='{"insns": 43, "dot": 0, "mmla": 0, "simd": 0, "ldst": 10, "scalar": 33, "bytes_loaded": 40, "bytes_stored": 0}'
  r2='{"insns": 23, "dot": 0, "mmla": 0, "simd": 0, "ldst": 5, "scalar": 18, "bytes_loaded": 20, "bytes_stored": 0}'
  regs=$(sed -n '/"regions"/,$p' "$T/s.json" | grep '"insns"' | sed 's/^ *//; s/[],}]*$//; s/$/}/')
  [ "$regs" = "$r1
$r2" ] && ok "sym=probe_sum: two calls, 43 and 23 instructions, 40 and 20 bytes loaded" || bad "sym regions: $regs"
else
  bad "qemu with plugin (sym): $(tail -3 "$T/q.log")"
fi
if qemu-aarch64 -cpu max -plugin "$PLUG,bogus=1" "$T/probe" >/dev/null 2>"$T/e.log"; then
  bad "unknown plugin argument accepted"
else
  grep -q "unknown argument 'bogus=1'" "$T/e.log" && ok "unknown argument refused with a message" ||
    bad "unknown argument message: $(head -2 "$T/e.log")"
fi
