#!/bin/sh
# 2026-12-06-akv-measure.sh -- one device call measuring bench/gpu/2026-12-06-akv.patch (docs/CUDA.md "Decode at depth"):
# build here first: git clone . /tmp/pbgpu && cd /tmp/pbgpu && git apply bench/gpu/2026-12-06-akv.patch &&
#   make -j2 CUDA=1 CI=true gpu-dev; copy its .dev-cuda/cuda-bins.tar.gz and fix/ into this checkout's .dev-cuda/
#   (ignored through .git/info/exclude) and carry them with this script: sh bench/gpu/2026-12-06-akv-measure.sh
# Writes $OUT/log.txt (tg128 per setting, parity counts, ncu lines), most important measurements first.
set -u
O=${OUT:-/tmp/out}; mkdir -p $O; L=$O/log.txt
exec > $L 2>&1
date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
mkdir -p /tmp/b && tar xzf .dev-cuda/cuda-bins.tar.gz -C /tmp/b
PB=/tmp/b/pocketbrain; PAR=/tmp/b/gpu_parity
t0=$(date +%s)
$PB synth --arch gemma2 --size 2b --type q4_k_m -o /tmp/g2b.gguf --threads 16 >/dev/null 2>&1 || echo "synth failed"
echo "synth $(( $(date +%s) - t0 )) s"
b() { d=$1; shift; printf -- '-- d%s %-32s' "$d" "$*"; env "$@" $PB bench --gpu -m /tmp/g2b.gguf -p 0 -n 128 -d $d -r 2 2>&1 | grep -o 'tg128[^|]*|[^|]*|[^|]*' | tr '\n' ' '; echo; }
for r in 1 2; do
  b 2048 X=0; b 2048 PB_CUDA_AKV=0; b 2048 PB_CUDA_SPLITS=64 PB_CUDA_AKV=0; b 2048 PB_CUDA_SPLITS=64
done
for r in 1 2; do b 0 X=0; b 0 PB_CUDA_AKV=0; b 0 PB_CUDA_SPLITS=64; b 0 PB_CUDA_SPLITS=32; done
date -u
$PB synth --arch gemma2 --size tiny --type q8_0 -o /tmp/s2-q8_0.gguf >/dev/null 2>&1
$PB synth --arch gemma3 --size tiny-gqa2 --type q4_k_m -o /tmp/s3g.gguf >/dev/null 2>&1
F=".dev-cuda/fix/gemma2-tiny-v.q4_k_m.gguf .dev-cuda/fix/tokens.bin /tmp/s2-q8_0.gguf /tmp/s3g.gguf"
PB_PAR_LONG=1 timeout 100 $PAR $F > $O/par-default.log 2>&1
echo "parity default rc=$? $(grep -c '^ok' $O/par-default.log) ok $(grep -c '^not ok' $O/par-default.log) not ok"; grep '^not ok' $O/par-default.log | head -5
date -u
b 4000 X=0; b 4000 PB_CUDA_AKV=0; b 2048 PB_CUDA_AKV=4; b 2048 PB_CUDA_SPLITS=64 PB_CUDA_AKV=4
PB_PAR_ONLY=gpu timeout 100 $PAR /tmp/g2b.gguf > $O/par-2b.log 2>&1
echo "parity 2b gpu-only rc=$? $(grep -c '^ok' $O/par-2b.log) ok $(grep -c '^not ok' $O/par-2b.log) not ok"
date -u
PB_CUDA_SPLITS=64 PB_PAR_LONG=1 timeout 100 $PAR $F > $O/par-64.log 2>&1
echo "parity S64 rc=$? $(grep -c '^ok' $O/par-64.log) ok $(grep -c '^not ok' $O/par-64.log) not ok"; grep '^not ok' $O/par-64.log | head -5
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for ak in 8 0; do
  PB_CUDA_AKV=$ak timeout 60 $NCU --clock-control none --graph-profiling node -k regex:k_attn_cl -s 1600 -c 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
    $PB bench --gpu -m /tmp/g2b.gguf -p 0 -n 128 -d 2048 -r 1 > $O/ncu-akv$ak.txt 2>&1
  echo "ncu akv=$ak rc=$?"; grep -E 'Duration|DRAM Throughput|Registers Per|Dynamic Shared|Warp Cycles Per Issued|Achieved Occupancy' $O/ncu-akv$ak.txt
done
date -u
