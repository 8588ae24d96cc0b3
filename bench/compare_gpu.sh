#!/bin/sh
# compare_gpu.sh -- pocketbrain vs llama.cpp on one NVIDIA GPU, side by side in one call: the same synth files,
# interleaved runs (ours, theirs, ours, theirs ...), medians of pp/tg tok/s, the ratio ours/theirs, decode as % of
# the bandwidth roofline, and the time to prefill a long prompt. Prints a Markdown table.
# Usage: sh bench/compare_gpu.sh LLAMA_BENCH [TYPES]
#   LLAMA_BENCH: a llama-bench built with CUDA (this script builds nothing; docs/CUDA.md "Side by side" says how a
#   person builds one under /tmp). TYPES: synth weight types (default "q4_k_m q4_0 q8_0 f16").
# Env: PB_BIN (default build-cuda/pocketbrain), ARCH (gemma2), SIZE (2b), DIR (where the synth files go, default
#   /tmp/pbgpu; made once, reused), REPS (3 per run), ROUNDS (2 interleaved rounds per engine), NP (512), NG (128),
#   NLONG (2000: the long prompt, 0 = skip), FA (1: llama.cpp's flash attention), BW_GBS (4300: the roofline's
#   bandwidth, the H200's measured device-to-device copy rate). Needs python3 (JSON).
set -u
LB=${1:?usage: compare_gpu.sh LLAMA_BENCH [TYPES]}
TYPES=${2:-q4_k_m q4_0 q8_0 f16}
PB=${PB_BIN:-build-cuda/pocketbrain}
ARCH=${ARCH:-gemma2}
SIZE=${SIZE:-2b}
DIR=${DIR:-/tmp/pbgpu}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-2}
NP=${NP:-512}
NG=${NG:-128}
NLONG=${NLONG:-2000}
FA=${FA:-1}
BW=${BW_GBS:-4300}
for x in "$LB" "$PB"; do [ -x "$x" ] || { echo "compare_gpu.sh: $x is not an executable" >&2; exit 2; }; done
command -v python3 >/dev/null || { echo "compare_gpu.sh: needs python3" >&2; exit 2; }
mkdir -p "$DIR" || exit 2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
# ours: the median of a named test in `bench --json` (runs[0][name].median)
ours() { python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1]))["runs"][0][sys.argv[2]]["median"])
except Exception: pass' "$1" "$2"; }
# theirs: the median of llama-bench's samples for (n_prompt, n_gen)
theirs() { python3 -c 'import json,sys
try:
  for r in json.load(open(sys.argv[1])):
    if r["n_prompt"] == int(sys.argv[2]) and r["n_gen"] == int(sys.argv[3]):
      s = sorted(r["samples_ts"]); print(s[len(s)//2])
except Exception: pass' "$1" "$2" "$3"; }

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "# compare_gpu.sh $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n): ${gpu:-no nvidia-smi}"
echo "# pocketbrain: $PB; llama.cpp: $LB (-ngl 99 -fa $FA); synth $ARCH $SIZE; pp$NP / tg$NG, -r $REPS a run,"
echo "# $ROUNDS interleaved rounds each; long prompt: pp$NLONG, one run a round"
echo
echo "| file | ours pp$NP | llama.cpp pp$NP | ratio | ours tg$NG | llama.cpp tg$NG | ratio | ours % roofline | llama.cpp % roofline | ours pp$NLONG ms | llama.cpp pp$NLONG ms |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for t in $TYPES; do
  M="$DIR/$ARCH-$SIZE-$t.gguf"
  if [ ! -f "$M" ]; then
    "$PB" synth --arch "$ARCH" --size "$SIZE" --type "$t" -o "$M" >"$TMP/synth.log" 2>&1 ||
      { echo "compare_gpu.sh: synth $t failed: $(tail -1 "$TMP/synth.log")" >&2; continue; }
  fi
  bytes=$(stat -c %s "$M")
  for f in opp otg olong lpp ltg llong; do : >"$TMP/$f"; done
  r=0
  while [ "$r" -lt "$ROUNDS" ]; do
    "$PB" bench --gpu -m "$M" -p "$NP" -n "$NG" -r "$REPS" --json >"$TMP/o.json" 2>"$TMP/o.err" ||
      echo "# pocketbrain bench failed: $(tail -1 "$TMP/o.err")" >&2
    ours "$TMP/o.json" "pp$NP" >>"$TMP/opp"
    ours "$TMP/o.json" "tg$NG" >>"$TMP/otg"
    "$LB" -m "$M" -ngl 99 -fa "$FA" -p "$NP" -n "$NG" -r "$REPS" -o json >"$TMP/l.json" 2>"$TMP/l.err" ||
      echo "# llama-bench failed: $(tail -1 "$TMP/l.err")" >&2
    theirs "$TMP/l.json" "$NP" 0 >>"$TMP/lpp"
    theirs "$TMP/l.json" 0 "$NG" >>"$TMP/ltg"
    if [ "$NLONG" -gt 0 ]; then
      "$PB" bench --gpu -m "$M" -p "$NLONG" -n 0 -r 1 --json >"$TMP/o2.json" 2>"$TMP/o2.err" ||
        echo "# pocketbrain bench pp$NLONG failed: $(tail -1 "$TMP/o2.err")" >&2
      ours "$TMP/o2.json" "pp$NLONG" >>"$TMP/olong"
      "$LB" -m "$M" -ngl 99 -fa "$FA" -p "$NLONG" -n 0 -r 1 -o json >"$TMP/l2.json" 2>"$TMP/l2.err" ||
        echo "# llama-bench pp$NLONG failed: $(tail -1 "$TMP/l2.err")" >&2
      theirs "$TMP/l2.json" "$NLONG" 0 >>"$TMP/llong"
    fi
    r=$((r + 1))
  done
  awk -v m="$(basename "$M")" -v bytes="$bytes" -v bw="$BW" -v nl="$NLONG" \
    -v opp="$(median <"$TMP/opp")" -v lpp="$(median <"$TMP/lpp")" -v otg="$(median <"$TMP/otg")" \
    -v ltg="$(median <"$TMP/ltg")" -v olong="$(median <"$TMP/olong")" -v llong="$(median <"$TMP/llong")" 'BEGIN {
      roof = bw * 1e9 / bytes # tok/s if each byte of the file were read once a token at BW
      printf "| %s | %.0f | %.0f | %.2fx | %.1f | %.1f | %.2fx | %.1f%% | %.1f%% | %s | %s |\n", m, opp, lpp,
        (lpp > 0 ? opp / lpp : 0), otg, ltg, (ltg > 0 ? otg / ltg : 0), 100 * otg / roof, 100 * ltg / roof,
        (olong > 0 ? sprintf("%.0f", 1000 * nl / olong) : "-"), (llong > 0 ? sprintf("%.0f", 1000 * nl / llong) : "-") }'
done
echo
echo "# roofline: tg tok/s if each byte of the file were read once a token at $BW GB/s (the output matrix is the"
echo "# embedding, read every token); KV reads are not counted. pp$NLONG ms = $NLONG / the pp$NLONG rate: the prefill"
echo "# of a $NLONG-token prompt, without the first sampled token."
