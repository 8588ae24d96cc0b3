#!/bin/sh
# gpu_check.sh -- one call on a CUDA machine: build with `make CUDA=1` (warnings are errors), run the GPU parity
# tests (tests/gpu_parity.c) on the peer tiny Gemma 2 files, the transformers-made tiny Gemma 1/2/3/4 models and
# synth tiny Gemma 1-4 files (a Gemma 4 MoE model refused by name with --gpu, run on the CPU without; a synth E2B
# Q4_K_M, head_dim 512, the wide attention form, in parity runs of its own, its batch checks first: E2B=0 skips
# them), then
# `pocketbrain bench --gpu` on synthesized gemma-2-2b files. Writes logs and JSON under OUT (default /tmp/gpu).
#   sh scripts/gpu_check.sh [FIXTURES_DIR] [TYPES]   FIXTURES_DIR holds gemma2-tiny-v.*.gguf + tokens.bin
#   (default $PB_SHARED/fixtures/peer/model); TYPES: synth types to bench (default "q4_k_m q4_0 q8_0 f16").
# Environment: PB_PAR + PB_BIN (prebuilt parity binary and CLI: no build here), FLOATCHECK=1 (parity again with
# PB_CUDA_FLOAT=1), PDLCHECK=1 (parity again with PB_CUDA_PDL=1), FLOATBENCH=1 (Q4_K_M tg128 on the float path),
# SAMPLEAB (a preset: sampled tg128 with the device top-K on and off), PARSAMPLE (a preset: bench --parallel
# PARALLEL (default 1,8,32) with sampled streams, the device top-K on and off, and greedy), PB_BIN_BASE (a CLI from an earlier tree: tg128 side by side with this tree's; PDLAB=1 adds PB_CUDA_PDL=1),
# VARIANTS (space-separated VAR=VALUE settings, VAR=VALUE,VAR2=VALUE2 for several at once, each a tg128 of this
# tree's CLI on the AB_TYPES files (VARIANTS_P / VARIANTS_N: the bench's -p / -n, default 0 / 128; VARIANTS_SYNTH
# "ARCH SIZE": a synth model of that arch and size instead of gemma-2-2b; a BIN=path in a
# setting runs that CLI instead, a B=N passes -b N, a TT=N --ttft-prompt N), default
# q4_k_m, next to the A/B lines), ALTCHECK (space-separated VAR=VALUE settings, VAR=VALUE,VAR2=VALUE2 for
# several at once: the parity tests again under each), PROFILE=1 (ncu: one
# decode token step's kernels, this CLI and PB_BIN_BASE's), PROFILE_KERNELS (regexes of kernel names: ncu's
# speed-of-light, memory, occupancy and warp-state sections of one launch each, this CLI).
set -u
OUT=${OUT:-/tmp/gpu}
FIX=${1:-${PB_SHARED:-../shared}/fixtures/peer/model}
TYPES=${2-q4_k_m q4_0 q8_0 f16} # an empty TYPES ("") benches nothing
REPS=${REPS:-5}
J=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv
# PB_PAR and PB_BIN: a parity binary and a CLI built (make CUDA=1 CI=true) and linked on another machine with the
# same nvcc; the build here is skipped then (it costs a minute or two of GPU-machine time).
if [ -n "${PB_PAR:-}" ] && [ -n "${PB_BIN:-}" ]; then
  echo "== prebuilt: $PB_PAR, $PB_BIN"
  PAR=$PB_PAR
  PB=$PB_BIN
else
echo "== build (make CUDA=1 CI=true: warnings are errors)"
make -j"$J" CUDA=1 CI=true gpu-tests >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
grep -i "warning" "$OUT/build.log" | head -5
PAR=build-cuda/tests/gpu_parity
# The CLI also links the service libraries (SQLite, libmicrohttpd, ...); a GPU machine without them can run a
# CLI linked elsewhere: PB_BIN names it.
if make -j"$J" CUDA=1 CI=true build-cuda/pocketbrain >>"$OUT/build.log" 2>&1; then
  PB=build-cuda/pocketbrain
elif [ -n "${PB_BIN:-}" ]; then
  echo "CLI not built here (service libraries missing): using $PB_BIN"; PB=$PB_BIN
else
  tail -5 "$OUT/build.log"; exit 1
fi
fi
# PARITY=0: no parity runs at all (a timing-only call: the bench and the switches below)
if [ "${PARITY:-1}" != 0 ]; then
echo "== parity tests"
set --
for q in f16 q8_0 q4_0 q4_k_m q5_k_m q6_k; do
  f="$FIX/gemma2-tiny-v.$q.gguf"
  [ -f "$f" ] && set -- "$@" "$f" "$FIX/tokens.bin"
done
for a in gemma gemma2 gemma3; do # transformers-made tiny models, converted here
  for t in f32 f16 q8_0; do
    $PB convert tests/data/model/$a "/tmp/tiny-$a-$t.gguf" --type $t >/dev/null 2>&1 && set -- "$@" "/tmp/tiny-$a-$t.gguf"
  done
  for t in f16 bf16 q8_0 q4_0 q4_k_m q5_k_m q6_k; do # random tiny models of every weight type
    $PB synth --arch $a --size tiny --type $t -o "/tmp/synth-$a-$t.gguf" >/dev/null 2>&1 &&
      set -- "$@" "/tmp/synth-$a-$t.gguf"
  done
done
# Gemma 3 with 2 query heads a kv head (the q / k norm in the token step's cluster attention blocks of several key
# splits: ALTCHECK="PB_CUDA_SPLITS=32 PB_CUDA_SPLITS=64" runs those forms; the other tiny Gemma 3 files have 3-4)
for t in f16 q4_k_m; do
  $PB synth --arch gemma3 --size tiny-gqa2 --type $t -o "/tmp/synth-gemma3-gqa2-$t.gguf" >/dev/null 2>&1 &&
    set -- "$@" "/tmp/synth-gemma3-gqa2-$t.gguf"
done
# head_dim 256 (the merge's own q8_K/q8_0 forms: every tiny model has head_dim 64, so that path runs only here) and
# row lengths of 640 (Q5_0/Q8_0 fallbacks beside Q4_K/Q6_K: q/k/v of mixed types, one launch a matrix)
$PB synth --arch gemma3 --size 270m --type q4_k_m -o /tmp/synth-gemma3-270m-q4_k_m.gguf --threads "$J" >/dev/null 2>&1 &&
  set -- "$@" /tmp/synth-gemma3-270m-q4_k_m.gguf
# Gemma 4 (dense): the transformers-made E2B-like (PLE, KV sharing, double-wide MLP, 4:1 layers) and k_eq_v models,
# synth tiny files; the MoE model goes to gpu_parity too, which then checks only its refusal and fallback
for a in gemma4_e2b gemma4_keqv gemma4_moe; do
  for t in f32 f16 q8_0; do
    [ $a = gemma4_moe ] && [ $t != f32 ] && continue
    $PB convert tests/data/model/$a "/tmp/tiny-$a-$t.gguf" --type $t >/dev/null 2>&1 && set -- "$@" "/tmp/tiny-$a-$t.gguf" ||
      echo "convert $a $t failed"
  done
done
for t in f16 q8_0 q4_0 q4_k_m; do
  $PB synth --arch gemma4 --size tiny --type $t -o "/tmp/synth-gemma4-$t.gguf" >/dev/null 2>&1 &&
    set -- "$@" "/tmp/synth-gemma4-$t.gguf" || echo "synth gemma4 tiny $t failed"
done
# the MoE model through the CLI: --gpu exits 1 naming it, the default runs it on the CPU
if [ -f /tmp/tiny-gemma4_moe-f32.gguf ]; then
  $PB run -m /tmp/tiny-gemma4_moe-f32.gguf -p hi -n 2 --raw --temp 0 --gpu >/dev/null 2>"$OUT/moe-gpu.err"; rc1=$?
  $PB run -m /tmp/tiny-gemma4_moe-f32.gguf -p hi -n 2 --raw --temp 0 >/dev/null 2>"$OUT/moe-auto.err"; rc2=$?
  if [ $rc1 = 1 ] && grep -q MoE "$OUT/moe-gpu.err" && [ $rc2 = 0 ]; then echo "gemma4 MoE: --gpu refused by name, auto on the CPU: ok"
  else echo "gemma4 MoE: NOT OK (--gpu rc $rc1, auto rc $rc2): $(head -c 300 "$OUT/moe-gpu.err" "$OUT/moe-auto.err")"; fi
fi
timeout ${PAR_TIMEOUT:-300} $PAR "$@" 2>&1 | tee "$OUT/parity.log" | grep -v "^ok"
echo "parity: $(grep -c '^ok' "$OUT/parity.log") ok, $(grep -c '^not ok' "$OUT/parity.log") not ok"
# Gemma 4 E2B at its real shapes (head_dim 512 on the full layers: the wide attention form; 2 x 4.7 GB of weights,
# the CPU side in exact mode too: minutes): its own run and log
if [ "${E2B:-1}" != 0 ]; then
  f=/tmp/synth-gemma4-e2b-q4_k_m.gguf
  [ -f "$f" ] || $PB synth --arch gemma4 --size e2b --type q4_k_m -o "$f" --threads "$J" >/dev/null 2>&1 || echo "synth e2b failed"
  if [ -f "$f" ]; then
    # the batch checks first, on the GPU alone (the full run's CPU side may use up its time before it reaches them):
    # the batched step over the wide form, 20 KV-shared layers and rows crossing the 512-token window
    PB_PAR_ONLY=batch timeout ${E2B_BATCH_TIMEOUT:-240} $PAR "$f" >"$OUT/parity-e2b-batch.log" 2>&1
    echo "parity (gemma4 e2b q4_k_m, batches, rc $?): $(grep -c '^ok' "$OUT/parity-e2b-batch.log") ok, $(grep -c '^not ok' "$OUT/parity-e2b-batch.log") not ok"
    grep "^not ok" "$OUT/parity-e2b-batch.log" | head -8
    # then the state round trips and the refusals (the end of a full run, which the E2B's did not reach in 150 s)
    PB_PAR_ONLY=state timeout ${E2B_STATE_TIMEOUT:-240} $PAR "$f" >"$OUT/parity-e2b-state.log" 2>&1
    echo "parity (gemma4 e2b q4_k_m, state and refusals, rc $?): $(grep -c '^ok' "$OUT/parity-e2b-state.log") ok, $(grep -c '^not ok' "$OUT/parity-e2b-state.log") not ok"
    grep "^not ok" "$OUT/parity-e2b-state.log" | head -8
    timeout ${E2B_TIMEOUT:-540} $PAR "$f" >"$OUT/parity-e2b.log" 2>&1
    echo "parity (gemma4 e2b q4_k_m, rc $?): $(grep -c '^ok' "$OUT/parity-e2b.log") ok, $(grep -c '^not ok' "$OUT/parity-e2b.log") not ok"
    grep "^not ok\|gemma4:" "$OUT/parity-e2b.log" | head -8
  fi
fi
# the batch checks again with every row on its own context's one-token graph and stream (PB_CUDA_BATCH=0): contexts
# stepping concurrently, as two GPU sessions do; a race inside one step shows up here first (docs/CUDA.md)
PB_PAR_ONLY=batch PB_CUDA_BATCH=0 timeout ${PAR_TIMEOUT:-300} $PAR "$@" >"$OUT/parity-concurrent.log" 2>&1
echo "parity (contexts stepping concurrently): $(grep -c '^ok' "$OUT/parity-concurrent.log") ok, $(grep -c '^not ok' "$OUT/parity-concurrent.log") not ok"
grep "^not ok" "$OUT/parity-concurrent.log" | head -5
# the continuous-batching engine test (tests/test_engine_batch.c) with its sessions on the GPU: greedy and seeded
# top-k / top-p sessions sharing a batch give each one's tokens alone (the sampled ones through the device top-K)
TEB=$(dirname "$PAR")/test_engine_batch
if [ -x "$TEB" ] && [ -f "$FIX/gemma2-tiny-v.q8_0.gguf" ]; then
  mkdir -p /tmp/pbsh/fixtures/peer/model && cp "$FIX"/gemma2-tiny-v.q8_0.gguf /tmp/pbsh/fixtures/peer/model/
  PB_SHARED=/tmp/pbsh timeout 300 "$TEB" >"$OUT/engine-batch.log" 2>&1
  echo "engine batch test on the GPU: rc $?, $(grep -c '^ok' "$OUT/engine-batch.log") ok, $(grep -c '^not ok' "$OUT/engine-batch.log") not ok"
  grep "^not ok" "$OUT/engine-batch.log" | head -5
fi
fi # PARITY
if [ -n "${PDLCHECK:-}" ]; then # programmatic dependent launch (PB_CUDA_PDL=1): same checks
  PB_CUDA_PDL=1 $PAR "$@" >"$OUT/parity-pdl.log" 2>&1
  echo "parity (PB_CUDA_PDL=1): $(grep -c '^ok' "$OUT/parity-pdl.log") ok, $(grep -c '^not ok' "$OUT/parity-pdl.log") not ok"
  grep "^not ok" "$OUT/parity-pdl.log" | head -5
fi
if [ -n "${ALTCHECK:-}" ] && [ "${PARITY:-1}" = 0 ]; then
  echo "ALTCHECK skipped: it runs the parity model list, which PARITY=0 does not build"
elif [ -n "${ALTCHECK:-}" ]; then # the parity tests again under each setting (a tuning switch's other path)
  i=0
  for a in $ALTCHECK; do # space-separated; VAR=VALUE,VAR2=VALUE2 for several at once
    i=$((i + 1))
    env $(echo "$a" | tr , ' ') $PAR "$@" >"$OUT/parity-alt$i.log" 2>&1
    echo "parity ($a): $(grep -c '^ok' "$OUT/parity-alt$i.log") ok, $(grep -c '^not ok' "$OUT/parity-alt$i.log") not ok"
    grep "^not ok" "$OUT/parity-alt$i.log" | head -5
  done
fi
if [ -n "${FLOATCHECK:-}" ]; then # the float path (PB_CUDA_FLOAT=1) against the CPU's exact mode
  PB_CUDA_FLOAT=1 $PAR "$@" >"$OUT/parity-float.log" 2>&1
  echo "parity (float path): $(grep -c '^ok' "$OUT/parity-float.log") ok, $(grep -c '^not ok' "$OUT/parity-float.log") not ok"
fi
echo "== bench"
for t in $TYPES; do
  f=/tmp/gemma2-2b-$t.gguf
  [ -f "$f" ] || $PB synth --arch gemma2 --size 2b --type $t -o "$f" --threads "$J" >/dev/null 2>&1 || { echo "synth $t failed"; continue; }
  $PB bench --gpu -m "$f" -p 512 -n 128 -r "$REPS" --json >"$OUT/bench-$t.json" 2>/tmp/bench-$t.err || cat /tmp/bench-$t.err
  python3 - "$OUT/bench-$t.json" "$f" "$t" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1])); r = j["runs"][0]
tg = [v for k, v in r.items() if k.startswith("tg")][0]["median"]
pp = [v for k, v in r.items() if k.startswith("pp")][0]["median"]
size = os.path.getsize(sys.argv[2])
print(f"{sys.argv[3]:7s} {r.get('backend')} {size/2**30:.2f} GiB  tg128 {tg:8.1f} tok/s  pp512 {pp:8.1f} tok/s  "
      f"ttft {r['ttft_ms']['median']:.1f} ms  weights read {size*tg/1e12:.2f} TB/s")
PY
done
# full-size matrices (lanes a row of 16 and 64, 64-row and split-slot tensor-core blocks): prefill at once, in calls
# of 37 and token by token, and the batch checks, bit for bit, on the GPU alone
for t in $TYPES; do
  f=/tmp/gemma2-2b-$t.gguf
  [ -f "$f" ] || continue
  PB_PAR_ONLY=gpu timeout ${PAR_TIMEOUT:-300} $PAR "$f" >"$OUT/parity-2b-$t.log" 2>&1
  echo "parity ($t 2b, GPU only): $(grep -c '^ok' "$OUT/parity-2b-$t.log") ok, $(grep -c '^not ok' "$OUT/parity-2b-$t.log") not ok"
  grep "^not ok" "$OUT/parity-2b-$t.log" | head -5
done
f=/tmp/gemma2-2b-q4_k_m.gguf
if [ -n "${FLOATBENCH:-}" ] && [ -f "$f" ]; then
  PB_CUDA_FLOAT=1 $PB bench --gpu -m "$f" -p 0 -n 128 -r 3 --json >/tmp/float.json 2>/dev/null
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print('q4_k_m float path (PB_CUDA_FLOAT=1): tg128', [v['median'] for k,v in r.items() if k.startswith('tg')][0], 'tok/s')" /tmp/float.json
fi
if [ -n "${PB_BIN_BASE:-}" ]; then # A/B in the same call: a CLI built from an earlier tree, this one, this one + PDL
  echo "== tg128 (-r 3) on the same files: base CLI ($PB_BIN_BASE), this tree (and with PB_CUDA_PDL=1 where PDLAB=1)"
  for t in $TYPES; do
    [ -f /tmp/gemma2-2b-$t.gguf ] || continue
    for v in base this ${PDLAB:+pdl}; do
      b=$PB; [ $v = base ] && b=$PB_BIN_BASE
      pdl=0; [ $v = pdl ] && pdl=1
      PB_CUDA_PDL=$pdl $b bench --gpu -m /tmp/gemma2-2b-$t.gguf -p 0 -n 128 -r 3 --json >/tmp/ab.json 2>/dev/null
      python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print(sys.argv[2], sys.argv[3], 'tg128', [v['median'] for k,v in r.items() if k.startswith('tg')][0], 'tok/s')" /tmp/ab.json "$t" "$v"
    done
  done
fi
if [ -n "${VARIANTS:-}" ]; then # this tree's CLI under tuning switches (docs/CUDA.md)
  # VARIANTS_SYNTH="ARCH SIZE" (e.g. "gemma3 4b"): the variants on that synth model instead of gemma-2-2b
  vm=gemma2-2b
  if [ -n "${VARIANTS_SYNTH:-}" ]; then
    set -- $VARIANTS_SYNTH
    vm=$1-$2
    for t in ${AB_TYPES:-q4_k_m}; do
      [ -f /tmp/$vm-$t.gguf ] || $PB synth --arch $1 --size $2 --type $t -o /tmp/$vm-$t.gguf --threads "$J" >/dev/null \
        2>&1 || echo "synth $vm $t failed"
    done
  fi
  echo "== tg128 (-r 3) of this tree's CLI on $vm with: $VARIANTS"
  for t in ${AB_TYPES:-q4_k_m}; do
    [ -f /tmp/$vm-$t.gguf ] || continue
    for v in $VARIANTS; do
      # BIN=path: that CLI instead of this tree's (an A/B against an older build); B=N: bench -b N; TT=N: --ttft-prompt N
      b=$PB nb= tt=
      for kv in $(echo "$v" | tr , ' '); do
        case $kv in BIN=*) b=${kv#BIN=} ;; B=*) nb="-b ${kv#B=}" ;; TT=*) tt="--ttft-prompt ${kv#TT=}" ;; esac
      done
      env $(echo "$v" | tr , '\n' | grep -v -e '^BIN=' -e '^B=' -e '^TT=' | tr '\n' ' ') $b bench --gpu \
        -m /tmp/$vm-$t.gguf -p ${VARIANTS_P:-0} -n ${VARIANTS_N:-128} -r 3 $nb $tt --json >/tmp/ab.json 2>/dev/null
      python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print(sys.argv[2], sys.argv[3], ' '.join(f'{k} {v[\"median\"]:.1f}' for k,v in r.items() if k[:2] in ('tg','pp')), 'tok/s, ttft', r['ttft_ms']['median'], 'ms')" /tmp/ab.json "$t" "$v"
    done
  done
fi
if [ -n "${SAMPLEAB:-}" ]; then # sampled decode (bench --sample PRESET): the best logits read on the device or not
  echo "== tg128 (-r 3) sampled ($SAMPLEAB preset): device top-K (PB_CUDA_TOPK=1) and every logit pulled (=0), twice"
  for t in ${AB_TYPES:-q4_k_m}; do
    [ -f /tmp/gemma2-2b-$t.gguf ] || continue
    for round in 1 2; do
      for v in 1 0; do
        PB_CUDA_TOPK=$v $PB bench --gpu -m /tmp/gemma2-2b-$t.gguf -p 0 -n 128 -r 3 --sample "$SAMPLEAB" --json \
          >/tmp/ab.json 2>/dev/null
        python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print(sys.argv[2], 'PB_CUDA_TOPK=' + sys.argv[3], 'tg128', [v['median'] for k,v in r.items() if k.startswith('tg')][0], 'tok/s')" /tmp/ab.json "$t" "$v"
      done
    done
  done
fi
if [ -n "${PARSAMPLE:-}" ] && [ -f "$f" ]; then # continuous batching, sampled streams: device top-K on and off
  echo "== bench --parallel ${PARALLEL:-1,8,32} (-p 32 -n 64 -r 2) q4_k_m, streams sampling ($PARSAMPLE) and greedy"
  for v in "1 $PARSAMPLE" "0 $PARSAMPLE" "1 greedy"; do
    set -- $v
    PB_CUDA_TOPK=$1 $PB bench --gpu -m "$f" --parallel ${PARALLEL:-1,8,32} -p 32 -n 64 -r 2 --sample $2 --json \
      >/tmp/par.json 2>/tmp/par.err || { tail -3 /tmp/par.err; continue; }
    python3 - /tmp/par.json "PB_CUDA_TOPK=$1 $2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for r in j["parallel"]:
    b, a = r["batched"], r["alone"]
    print(f"{sys.argv[2]:22s} {r['streams']:3d} streams: batched {b['aggregate_tok_s']:8.1f} tok/s (p50 {b['stream_tok_s_p50']:6.1f}, "
          f"p99 {b['stream_tok_s_p99']:6.1f}, mean batch {b['mean_batch']:.2f}), alone {a['aggregate_tok_s']:8.1f}")
PY
  done
fi
if [ -n "${PROFILE:-}" ] && [ -f "$f" ] && command -v ncu >/dev/null; then
  # One decode step of the tg run (-n 24: the 32-token ttft prompt, then 25 steps with the output mat-vec): ncu
  # times each graph node alone, caches as the step before left them (--cache-control none), clocks untouched. The
  # launches skipped land inside the tg run for 100-300 kernels a step; the summary cuts the profiled launches at
  # k_embed (a step's first kernel) and reports the complete step with the most kernels (one with the output).
  for v in this base; do
    b=$PB; [ $v = base ] && b=${PB_BIN_BASE:-}
    [ -n "$b" ] || continue
    echo "== ncu ($v): kernel times of one decode token step"
    timeout 240 ncu --clock-control none --cache-control none --graph-profiling node --launch-skip ${NCU_SKIP:-6200} \
      --launch-count 700 --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum $b bench --gpu -m "$f" -p 0 \
      -n 24 -r 1 >"$OUT/ncu-$v.csv" 2>/tmp/ncu.err || tail -3 /tmp/ncu.err
    python3 - "$OUT/ncu-$v.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit("no ncu rows")
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
mi = h.index("Metric Name"); ii = h.index("ID")
launches = collections.OrderedDict()
for r in rows[1:]:
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    e = launches.setdefault(r[ii], {"k": r[ki].split("(")[0], "us": 0.0, "mb": 0.0})
    if r[mi].startswith("gpu__time"):
        e["us"] = v / 1000.0 if r[ui] in ("nsecond", "ns") else v * 1000.0 if r[ui] in ("msecond", "ms") else v
    else:
        e["mb"] = v / 1e6 if r[ui] in ("byte",) else v / 1e3 if r[ui] == "Kbyte" else v if r[ui] == "Mbyte" else v * 1e3
steps, cur = [], None
for e in launches.values():
    if e["k"].startswith("k_embed"):
        if cur is not None: steps.append(cur)
        cur = []
    if cur is not None: cur.append(e)
if not steps: sys.exit("no complete step")
st = max(steps, key=len)
t = collections.defaultdict(float); n = collections.Counter(); mb = collections.defaultdict(float)
for e in st: t[e["k"]] += e["us"]; n[e["k"]] += 1; mb[e["k"]] += e["mb"]
tot = sum(t.values()); tmb = sum(mb.values())
for k in sorted(t, key=t.get, reverse=True):
    print(f"{k[:60]:60s} {n[k]:4d} x {t[k]/n[k]:7.2f} us = {t[k]:8.1f} us ({100*t[k]/tot:4.1f}%)  DRAM {mb[k]:7.1f} MB  {mb[k]/max(t[k],1e-9):6.2f} TB/s")
print(f"step: {len(st)} kernels, sum of kernel times {tot:.1f} us, DRAM read {tmb:.1f} MB ({tmb/tot:.2f} TB/s while kernels run)")
PY
  done
fi
if [ -n "${PROFILE_KERNELS:-}" ] && [ -f "$f" ] && command -v ncu >/dev/null; then
  for k in $PROFILE_KERNELS; do # a regex of demangled names, e.g. 'k_mv_geglu<12' (no spaces)
    echo "== ncu sections: the 61st launch matching $k (details in $OUT/ncu-sections.txt)"
    timeout 120 ncu --clock-control none --cache-control none --graph-profiling node --kernel-name-base demangled \
      -k "regex:$k" --launch-skip 60 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section Occupancy --section WarpStateStats --section LaunchStats --section ComputeWorkloadAnalysis \
      --section InstructionStats $PB bench --gpu -m "$f" -p ${PROFILE_P:-0} -n 8 -r 1 \
      >/tmp/ncu-sec.txt 2>&1
    cat /tmp/ncu-sec.txt >>"$OUT/ncu-sections.txt"
    grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Waves Per SM|Stall|Grid Size|Issue Slots Busy|Issued Ipc|Warp Cycles Per Issued" \
      /tmp/ncu-sec.txt | head -16
  done
fi
if [ -n "${PFPROFILE:-}" ] && [ -f "$f" ] && command -v ncu >/dev/null; then
  # the prompt path's kernels: every launch of one pp512 run (a warm-up chunk and one timed), times summed by name
  echo "== ncu: the prompt path's kernels, pp512 (-r 1), summed by kernel"
  timeout 300 ncu --clock-control none --csv --metrics gpu__time_duration.sum $PB bench --gpu -m "$f" -p 512 -n 0 -r 1 \
    >"$OUT/ncu-pf.csv" 2>/tmp/ncu-pf.err || tail -3 /tmp/ncu-pf.err
  python3 - "$OUT/ncu-pf.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit("no ncu rows")
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
t = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    us = v / 1000.0 if r[ui] in ("nsecond", "ns") else v * 1000.0 if r[ui] in ("msecond", "ms") else v
    k = r[ki].split("(")[0][:70]; t[k] += us; n[k] += 1
tot = sum(t.values())
for k in sorted(t, key=t.get, reverse=True)[:25]:
    print(f"{k:70s} {n[k]:5d} x {t[k]/n[k]:8.2f} us = {t[k]/1000:8.2f} ms ({100*t[k]/tot:4.1f}%)")
print(f"all kernels: {tot/1000:.1f} ms")
PY
fi
if [ -n "${G4BENCH:-}" ]; then # Gemma 4 on the GPU: synth E2B Q4_K_M, GPU and CPU side by side
  g=/tmp/synth-gemma4-e2b-q4_k_m.gguf
  [ -f "$g" ] || $PB synth --arch gemma4 --size e2b --type q4_k_m -o "$g" --threads "$J" >/dev/null 2>&1 || echo "synth e2b failed"
  if [ -f "$g" ]; then
    echo "== gemma4 e2b q4_k_m: bench --gpu (-p 512 -n 128 -r 2), then the CPU (--no-gpu, $J threads, -p 128 -n 32 -r 1)"
    $PB bench --gpu -m "$g" -p 512 -n 128 -r 2 --json >"$OUT/bench-e2b-gpu.json" 2>/tmp/e2b.err || tail -3 /tmp/e2b.err
    PB_CUDA_G4_PREFILL=0 $PB bench --gpu -m "$g" -p 512 -n 0 -r 1 --json >"$OUT/bench-e2b-gpu-tokens.json" 2>/dev/null
    timeout 240 $PB bench --no-gpu -m "$g" -p 128 -n 32 -r 1 --threads "$J" --json >"$OUT/bench-e2b-cpu.json" 2>/tmp/e2b.err || tail -3 /tmp/e2b.err
    for j in "$OUT"/bench-e2b-*.json; do
      python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print(sys.argv[1].split('/')[-1], r.get('backend'), {k: v['median'] for k, v in r.items() if k[:2] in ('tg','pp')}, 'ttft', r.get('ttft_ms',{}).get('median'))" "$j" 2>/dev/null
    done
  fi
fi
