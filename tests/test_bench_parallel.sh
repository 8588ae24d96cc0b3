#!/bin/sh
# test_bench_parallel.sh -- `pocketbrain bench --parallel N,...` on the tiny peer model: the table and the JSON name
# each stream count with batched and alone rows (aggregate tok/s, per-stream p50 >= p99 > 0, the mean batch size:
# above 1 when 3 streams decode at once), and bad counts exit 2; flags --cold or --parallel do not use are refused.
BIN=${PB_BIN:-build/pocketbrain}
M=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
[ -f "$M" ] || M=models/default.gguf
if [ ! -f "$M" ]; then
  if [ "$CI" = true ]; then echo "not ok - no model ($M)"; exit 1; fi
  echo "ok - skipped: no model"; exit 0
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else nok "$1"; fi; }

$BIN bench -m "$M" -t 1 --parallel 1,3 -p 8 -n 16 -r 2 >"$T/md" 2>"$T/err"; rc=$?
check "bench --parallel 1,3: batched and alone rows for 1 and 3 streams (rc $rc)" \
  '[ $rc = 0 ] && grep -q "| 1 | batched |" "$T/md" && grep -q "| 3 | alone |" "$T/md" && grep -q "aggregate t/s" "$T/md" && grep -q "Load average" "$T/md"'
$BIN bench -m "$M" -t 1 --parallel 1,3 -p 8 -n 16 -r 2 --json >"$T/json" 2>"$T/err"; rc=$?
node -e '
const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const p = j.parallel, bad = [];
if (!Array.isArray(p) || p.length !== 2 || p[0].streams !== 1 || p[1].streams !== 3) bad.push("streams");
for (const r of p || []) for (const mode of ["batched", "alone"]) {
  const m = r[mode];
  if (!m || !(m.aggregate_tok_s > 0) || !(m.stream_tok_s_p50 >= m.stream_tok_s_p99) || !(m.stream_tok_s_p99 > 0)) bad.push(mode + " " + r.streams);
}
if (p && !(Math.abs(p[0].batched.mean_batch - 1) < 1e-9)) bad.push("one stream: batch 1");
if (p && !(p[1].batched.mean_batch > 1 && p[1].batched.mean_batch <= 3)) bad.push("three streams: mean batch " + p[1].batched.mean_batch);
if (p && !(p[1].gain > 0)) bad.push("gain");
if (j.n_gen !== 16 || j.n_prompt !== 8 || j.threads !== 1 || typeof j.load_avg_before !== "string") bad.push("header");
if (bad.length) { console.log("bad: " + bad.join(", ")); process.exit(1); }
console.log("mean batch of 3 streams " + p[1].batched.mean_batch.toFixed(2) + ", gain " + p[1].gain.toFixed(2));
' "$T/json" >"$T/check" 2>&1; vrc=$?
check "bench --parallel --json: sane numbers, steps of several streams ($(cat "$T/check"))" '[ $rc = 0 ] && [ $vrc = 0 ]'
$BIN bench -m "$M" -t 1 --parallel 2 -p 4 -n 6 -r 1 --sample precise --json >"$T/sj" 2>"$T/err"; rc=$?
check "bench --parallel 2 --sample precise: sampled streams, the preset named in the JSON (rc $rc)" \
  '[ $rc = 0 ] && grep -q "\"sample\":[[:space:]]*\"precise\"" "$T/sj" && grep -q "\"streams\":[[:space:]]*2" "$T/sj"'
$BIN bench -m "$M" -t 1 --cold --sample balanced >"$T/out" 2>"$T/err"; rc=$?
check "bench --cold --sample: exit 2, refused by name (rc $rc)" '[ $rc = 2 ] && grep -q -- "--sample is not taken with --cold" "$T/err"'
# what --cold or --parallel does not use is refused by name (-p, -n, -d, --kv-type, --gpu with --cold, -d and
# --ttft-prompt with --parallel ran the benchmark without them, not a word said)
n_ign=0; ign=""
for args in "--cold -p 64" "--cold -n 4" "--cold -d 8" "--cold --ttft-prompt 8" "--cold --kv-type q8_0" "--cold --no-gpu" \
  "--cold --parallel 2" "--parallel 2 -d 8" "--parallel 2 --ttft-prompt 8"; do
  # shellcheck disable=SC2086
  timeout 20 $BIN bench -m "$M" -t 1 -r 1 $args >"$T/out" 2>"$T/err"; rc=$?
  f=$(echo "$args" | awk '{print ($1 == "--cold") ? $2 : $3}'); mode=$(echo "$args" | awk '{print $1}')
  if [ $rc != 2 ] || ! grep -q -- "$f is not taken with $mode" "$T/err"; then n_ign=$((n_ign + 1)); ign="$ign [$args: rc $rc]"; fi
done
check "bench: a flag --cold or --parallel does not use is refused by name ($n_ign not:$ign)" '[ $n_ign = 0 ]'
$BIN bench -m "$M" -t 1 --parallel 65 >"$T/out" 2>"$T/err"; rc=$?
check "bench --parallel 65: exit 2 naming the limit" '[ $rc = 2 ] && grep -q "64" "$T/err"'
$BIN bench -m "$M" -t 1 --parallel 0 >"$T/out" 2>"$T/err"; rc=$?
check "bench --parallel 0: exit 2" '[ $rc = 2 ] && grep -q -- "--parallel" "$T/err"'
$BIN bench -m "$M" -t 1 --parallel 2 -n 0 >"$T/out" 2>"$T/err"; rc=$?
check "bench --parallel with -n 0: exit 2 (nothing to decode)" '[ $rc = 2 ]'
