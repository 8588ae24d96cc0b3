#!/bin/sh
# compare.sh -- pocketbrain vs llama.cpp on the same GGUF files, same machine, same window: for each model
# and thread count, runs `pocketbrain bench` and llama-bench interleaved (ours, theirs, ours, theirs ...,
# each with -r REPS), measures the streaming-read bandwidth before and after each pair (bench/kernels -b),
# and prints a Markdown table of medians: pp/tg tok/s, ratio ours/theirs, and decode as % of the
# bandwidth roofline (model bytes per token / bandwidth).
# Usage: sh bench/compare.sh LLAMA_BENCH MODEL.gguf [MODEL.gguf...]
# Env: PB_BIN (default build/pocketbrain), PB_KBENCH (default build/bench/kernels), THREADS ("1 2"),
#      REPS (3), ROUNDS (2: interleaved rounds per engine), NP (512), NG (128). Needs jq.
set -u
LB=${1:?usage: compare.sh LLAMA_BENCH MODEL.gguf [MODEL.gguf...]}
shift
[ $# -ge 1 ] || { echo "usage: compare.sh LLAMA_BENCH MODEL.gguf [MODEL.gguf...]" >&2; exit 2; }
PB=${PB_BIN:-build/pocketbrain}
KB=${PB_KBENCH:-build/bench/kernels}
THREADS=${THREADS:-"1 2"}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-2}
NP=${NP:-512}
NG=${NG:-128}
for x in "$LB" "$PB" "$KB"; do [ -x "$x" ] || { echo "compare.sh: $x is not an executable" >&2; exit 2; }; done
command -v jq >/dev/null || { echo "compare.sh: needs jq" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
bw() { "$KB" -b -t "$1" -m 512 -r 5 | awk '/bandwidth_gbs/ {print $2}'; }

echo "# compare.sh $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs"
echo "# pocketbrain: $PB; llama.cpp: $LB; pp$NP / tg$NG, -r $REPS per run, $ROUNDS interleaved rounds each"
echo
echo "| model | threads | GB/s | ours pp$NP | llama.cpp pp$NP | ratio | ours tg$NG | llama.cpp tg$NG | ratio | ours tg % roofline | llama tg % roofline |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for M in "$@"; do
  [ -f "$M" ] || { echo "compare.sh: $M not found" >&2; continue; }
  # bytes a decode step streams: the file, less a Gemma 4 PLE table (per_layer_token_embd: mapped, one row per layer
  # and token is read, so it is not streamed -- about half of an E2B file)
  ple=$("$PB" info --json --mem -c 256 "$M" 2>/dev/null | jq -r '.memory.ple_table // 0' 2>/dev/null)
  bytes=$(( $(stat -c %s "$M") - ${ple:-0} ))
  for T in $THREADS; do
    : >"$TMP/bw"; : >"$TMP/opp"; : >"$TMP/otg"; : >"$TMP/lpp"; : >"$TMP/ltg"
    r=0
    while [ $r -lt "$ROUNDS" ]; do
      bw "$T" >>"$TMP/bw"
      "$PB" bench -m "$M" -t "$T" -p "$NP" -n "$NG" -r "$REPS" --json >"$TMP/o.json" 2>"$TMP/o.err" ||
        { echo "# pocketbrain bench failed: $(tail -1 "$TMP/o.err")" >&2; }
      jq -r ".runs[0][\"pp$NP\"].median // empty" "$TMP/o.json" >>"$TMP/opp"
      jq -r ".runs[0][\"tg$NG\"].median // empty" "$TMP/o.json" >>"$TMP/otg"
      "$LB" -m "$M" -t "$T" -p "$NP" -n "$NG" -r "$REPS" -o json >"$TMP/l.json" 2>"$TMP/l.err" ||
        { echo "# llama-bench failed: $(tail -1 "$TMP/l.err")" >&2; }
      # llama-bench's samples_ts holds every repetition; we take their median like ours
      jq -r ".[] | select(.n_prompt == $NP and .n_gen == 0) | .samples_ts | sort | .[(length/2|floor)]" "$TMP/l.json" >>"$TMP/lpp"
      jq -r ".[] | select(.n_prompt == 0 and .n_gen == $NG) | .samples_ts | sort | .[(length/2|floor)]" "$TMP/l.json" >>"$TMP/ltg"
      bw "$T" >>"$TMP/bw"
      r=$((r + 1))
    done
    B=$(median <"$TMP/bw"); OPP=$(median <"$TMP/opp"); OTG=$(median <"$TMP/otg")
    LPP=$(median <"$TMP/lpp"); LTG=$(median <"$TMP/ltg")
    awk -v m="$(basename "$M")" -v t="$T" -v b="$B" -v opp="$OPP" -v lpp="$LPP" -v otg="$OTG" -v ltg="$LTG" \
      -v bytes="$bytes" 'BEGIN {
        roof = b * 1e9 / bytes;  # tokens/s if every weight byte is read once per token at the measured bandwidth
        printf "| %s | %d | %.1f | %.1f | %.1f | %.2fx | %.2f | %.2f | %.2fx | %.0f%% | %.0f%% |\n",
          m, t, b, opp, lpp, (lpp > 0 ? opp / lpp : 0), otg, ltg, (ltg > 0 ? otg / ltg : 0),
          100 * otg / roof, 100 * ltg / roof }'
  done
done
echo
echo "# roofline: tg tok/s if each byte of the file were read once per token at the measured streaming-read"
echo "# bandwidth (median of the bandwidth runs around each pair); KV reads at tg$NG are not counted; a Gemma 4"
echo "# PLE table (per_layer_token_embd, one row per layer read per token) is not counted as streamed."
