#!/bin/sh
# arm_compare.sh -- ARM64 without ARM hardware: pocketbrain's and llama.cpp's ARM64 builds run under
# qemu-aarch64 with the armcount plugin (tools/armcount) on the same GGUF files; prints per token, for
# prefill (ppNP) and decode (tgNG): instructions, SIMD int8 dot instructions (SDOT/UDOT/USDOT + SMMLA...),
# bytes loaded, and the ratios ours/theirs. Counts, not time: see docs/ARM.md for what they can tell.
# Method: symbol markers. Every call of pb_forward (ours) and llama_decode (theirs) is one region; the
# prompt is one call of NP tokens, each decode step one call of 1 token. pp = the largest region / NP;
# tg = the mean of the last NG-1 regions (the first decode step is left out on both sides).
# Usage: sh bench/arm_compare.sh [-l LLAMA_BENCH] [MODEL.gguf...]   (default models: synthesizes gemma2 2b
#        Q4_K_M and Q4_0 and gemma3 1b Q4_K_M with `pocketbrain synth` under $MODELS)
#        LLAMA_BENCH (-l or the environment): an ARM64 llama-bench you built yourself, static, with
#        -march=armv8.2-a+dotprod+i8mm (docs/ARM.md gives the commands, to run under /tmp). This script
#        neither fetches nor builds llama.cpp.
# Env: NP (64), NG (8; tg = the mean of NG-1 steps; a 2B step takes minutes under qemu), THREADS (1),
#      MODELS (/tmp/pb-arm-models), PB_ARM (build-arm64/bench/arm_tokens, built here),
#      RAW (a folder to keep the plugin's JSON in). Needs qemu-user, gcc-aarch64-linux-gnu, jq.
set -u
LB=${LLAMA_BENCH:-}
if [ "${1:-}" = -l ]; then
  [ $# -ge 2 ] || { echo "arm_compare.sh: -l needs the path of an ARM64 llama-bench" >&2; exit 2; }
  LB=$2
  shift 2
fi
[ -n "$LB" ] || { echo "arm_compare.sh: no llama-bench given: -l PATH or LLAMA_BENCH=PATH (an ARM64 build; docs/ARM.md says how)" >&2; exit 2; }
case $LB in /*) ;; *) LB=$PWD/$LB ;; esac
[ -f "$LB" ] && [ -x "$LB" ] || { echo "arm_compare.sh: llama-bench '$LB' is not an executable file" >&2; exit 2; }
cd "$(dirname "$0")/.." || exit 2
NP=${NP:-64}
NG=${NG:-8}
T=${THREADS:-1}
MODELS=${MODELS:-/tmp/pb-arm-models}
PB_ARM=${PB_ARM:-build-arm64/bench/arm_tokens}
PLUG=build/armcount/libarmcount.so
sh scripts/deps.sh bench >&2 || exit 2 # qemu, the cross compilers, jq
for c in qemu-aarch64 aarch64-linux-gnu-gcc jq; do
  command -v $c >/dev/null || { echo "arm_compare.sh: needs $c (sh scripts/deps.sh bench)" >&2; exit 2; }
done
[ "$NG" -ge 2 ] || { echo "arm_compare.sh: NG must be at least 2" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

make --no-print-directory armcount >"$TMP/make.log" 2>&1 || { cat "$TMP/make.log" >&2; exit 1; }
if [ "$PB_ARM" = build-arm64/bench/arm_tokens ]; then
  make --no-print-directory CROSS=aarch64-linux-gnu- -j2 "$PB_ARM" >"$TMP/make.log" 2>&1 ||
    { tail -20 "$TMP/make.log" >&2; echo "arm_compare.sh: ARM64 build of pocketbrain failed" >&2; exit 1; }
fi

if [ $# -eq 0 ]; then
  mkdir -p "$MODELS"
  make --no-print-directory -j2 build/pocketbrain >"$TMP/make.log" 2>&1 || { tail -20 "$TMP/make.log" >&2; exit 1; }
  for spec in "gemma2 2b q4_k_m" "gemma2 2b q4_0" "gemma3 1b q4_k_m"; do
    set -- $spec
    f="$MODELS/$1-$2-$3.gguf"
    [ -f "$f" ] || build/pocketbrain synth --arch "$1" --size "$2" --type "$3" -o "$f" >"$TMP/synth.log" 2>&1 ||
      { cat "$TMP/synth.log" >&2; exit 1; }
  done
  set -- "$MODELS/gemma2-2b-q4_k_m.gguf" "$MODELS/gemma2-2b-q4_0.gguf" "$MODELS/gemma3-1b-q4_k_m.gguf"
fi

# count ENGINE MODEL OUT.json: one run under the plugin; prints the run's own output to OUT.txt
count() {
  if [ "$1" = ours ]; then
    qemu-aarch64 -cpu max -plugin "$PLUG,sym=pb_forward,out=$3" "$PB_ARM" "$2" "$NP" "$NG" "$T" >"${3%.json}.txt" 2>&1
  else
    qemu-aarch64 -cpu max -plugin "$PLUG,sym=llama_decode,out=$3" "$LB" -m "$2" -p "$NP" -n "$NG" -r 1 \
      --no-warmup -t "$T" -o json >"${3%.json}.txt" 2>&1
  fi
}
# per-token numbers "insns dot bytes_loaded" of a run: pp from the largest region, tg the mean of the last NG-1
pp() { jq -r --argjson n "$NP" '.regions | max_by(.insns) | "\(.insns / $n) \(.dot / $n) \(.bytes_loaded / $n)"' "$1"; }
tg() {
  jq -r --argjson k "$((NG - 1))" '.regions[-$k:] | "\((map(.insns) | add) / $k) \((map(.dot) | add) / $k) \((map(.bytes_loaded) | add) / $k)"' "$1"
}

echo "# arm_compare.sh $(date -u '+%Y-%m-%d %H:%M UTC'): qemu-aarch64 $(qemu-aarch64 --version | head -1 | awk '{print $3}') -cpu max + armcount, $T thread(s), pp$NP / tg$NG"
echo "# ours: $PB_ARM (sym=pb_forward); llama.cpp: $LB (sym=llama_decode, -march=armv8.2-a+dotprod+i8mm)"
echo
echo "| model | test | ours Minsn/tok | llama Minsn/tok | insn ratio | ours Mdot/tok | llama Mdot/tok | ours MB loaded/tok | llama MB loaded/tok | load ratio | ours load / weights | llama load / weights |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for M in "$@"; do
  [ -f "$M" ] || { echo "arm_compare.sh: model $M not found" >&2; continue; }
  name=$(basename "$M" .gguf)
  count ours "$M" "$TMP/o.json" || { tail -5 "$TMP/o.txt" >&2; echo "arm_compare.sh: ours failed on $M" >&2; continue; }
  count llama "$M" "$TMP/l.json" || { tail -5 "$TMP/l.txt" >&2; echo "arm_compare.sh: llama.cpp failed on $M" >&2; continue; }
  if [ -n "${RAW:-}" ]; then mkdir -p "$RAW" && cp "$TMP/o.json" "$RAW/$name.ours.json" && cp "$TMP/l.json" "$RAW/$name.llama.json"; fi
  wb=$(sed -n 's/.*weight_bytes \([0-9]*\).*/\1/p' "$TMP/o.txt")
  for r in o l; do
    n=$(jq .n_regions "$TMP/$r.json")
    [ "$n" = $((NG + 1)) ] || echo "# warning: $name $r: $n regions (expected $((NG + 1)): one prompt call + $NG decode calls)"
  done
  for test in pp tg; do
    set -- $($test "$TMP/o.json") $($test "$TMP/l.json")
    awk -v m="$name" -v t="$test$([ $test = pp ] && echo "$NP" || echo "$NG")" -v wb="${wb:-0}" \
      -v oi="$1" -v od="$2" -v ob="$3" -v li="$4" -v ld="$5" -v lb="$6" 'BEGIN {
        printf "| %s | %s | %.1f | %.1f | %.2f | %.2f | %.2f | %.0f | %.0f | %.2f | %.3f | %.3f |\n", m, t, oi / 1e6,
          li / 1e6, oi / li, od / 1e6, ld / 1e6, ob / 1e6, lb / 1e6, ob / lb, (wb > 0 ? ob / wb : 0), (wb > 0 ? lb / wb : 0) }'
  done
done
