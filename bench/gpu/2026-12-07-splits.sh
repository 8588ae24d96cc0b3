#!/bin/sh
# 2026-12-07-splits.sh -- one device call: the cp.async key rows (on by default since 2026-12-07) with the cluster
# form's new split rule (32 splits up to n_ctx 1,024, 64 above) against the tree before (PB_CUDA_AKV=0 and the old
# rule's split count forced), tg128 at depths 0 / 512 / 2,048 / 4,000, then the parity of the
# new defaults (FULL=1: scripts/gpu_check.sh, E2B=0, and the Q4_K_M bench). Build here first: `make CUDA=1 CI=true gpu-dev` in a clean clone, copy its
# .dev-cuda/cuda-bins.tar.gz and fix/ into this checkout's .dev-cuda/ (ignored) and carry them.
set -u
O=${OUT:-/tmp/out}; mkdir -p $O; L=$O/log.txt
exec > $L 2>&1
date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
mkdir -p /tmp/b && tar xzf .dev-cuda/cuda-bins.tar.gz -C /tmp/b
PB=/tmp/b/pocketbrain
$PB synth --arch gemma2 --size 2b --type q4_k_m -o /tmp/g2b.gguf --threads 16 >/dev/null 2>&1 || echo "synth failed"
b() { d=$1; shift; printf -- '-- d%s %-36s' "$d" "$*"; env "$@" $PB bench --gpu -m /tmp/g2b.gguf -p 0 -n 128 -d $d -r 2 2>&1 | grep -o 'tg128[^|]*|[^|]*|[^|]*' | tr '\n' ' '; echo; }
# bench's n_ctx: the need rounded up to 256 (d0: 256, d512: 768, d2048: 2,304, d4000: 4,352); the old rule's splits
# there: 16, 16, 32 (18 bumped to the cluster form's 32), 64 (34 bumped)
for r in 1; do
  b 0 X=0; b 0 PB_CUDA_AKV=0 PB_CUDA_SPLITS=16
  b 512 X=0; b 512 PB_CUDA_AKV=0 PB_CUDA_SPLITS=16
  b 2048 X=0; b 2048 PB_CUDA_AKV=0 PB_CUDA_SPLITS=32
  b 4000 X=0; b 4000 PB_CUDA_AKV=0 PB_CUDA_SPLITS=64
done
date -u
# the D form's parity under the new default splits (the akv call's set: the peer Q4_K_M file with long prompts, a
# synth Gemma 2 Q8_0, a Gemma 3 of 2 query heads a kv head), then the 2b file GPU-only; FULL=1: scripts/gpu_check.sh
$PB synth --arch gemma2 --size tiny --type q8_0 -o /tmp/s2-q8_0.gguf >/dev/null 2>&1
$PB synth --arch gemma3 --size tiny-gqa2 --type q4_k_m -o /tmp/s3g.gguf >/dev/null 2>&1
F=".dev-cuda/fix/gemma2-tiny-v.q4_k_m.gguf .dev-cuda/fix/tokens.bin /tmp/s2-q8_0.gguf /tmp/s3g.gguf"
PB_PAR_LONG=1 timeout 100 /tmp/b/gpu_parity $F > $O/par-default.log 2>&1
echo "parity default rc=$? $(grep -c '^ok' $O/par-default.log) ok $(grep -c '^not ok' $O/par-default.log) not ok"; grep '^not ok' $O/par-default.log | head -5
PB_PAR_ONLY=gpu timeout 100 /tmp/b/gpu_parity /tmp/g2b.gguf > $O/par-2b.log 2>&1
echo "parity 2b gpu-only rc=$? $(grep -c '^ok' $O/par-2b.log) ok $(grep -c '^not ok' $O/par-2b.log) not ok"
date -u
if [ "${FULL:-0}" = 1 ]; then
  mkdir -p /tmp/gc
  E2B=0 REPS=2 PB_PAR=/tmp/b/gpu_parity PB_BIN=$PB OUT=/tmp/gc PAR_TIMEOUT=150 timeout 300 sh scripts/gpu_check.sh .dev-cuda/fix q4_k_m
  echo "gpu_check rc=$?"; cp /tmp/gc/*.log $O/ 2>/dev/null
  date -u
fi
