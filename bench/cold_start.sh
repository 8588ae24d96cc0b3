#!/bin/sh
# cold_start.sh -- cold start side by side: wall time of one process that loads MODEL and produces one token
# after a ~24-token prompt, pocketbrain vs llama.cpp, alternating, the model file evicted from the page cache
# (posix_fadvise DONTNEED through python3) before every run. Not a test: run by hand, numbers are noisy.
# usage: bench/cold_start.sh MODEL.gguf [REPS] [THREADS]   (LLAMA_BIN=/tmp/llama.cpp/build-cpu/bin)
M=$1; REPS=${2:-3}; TH=${3:-2}
PB=${PB_BIN:-build/pocketbrain}
LL=${LLAMA_BIN:-/tmp/llama.cpp/build-cpu/bin}/llama-completion
P="The quick brown fox jumps over the lazy dog while the farmer watches from the old red barn near the river"
# pocketbrain's packed-weights cache (written by the untimed first run below) is evicted too; PB_PACK_CACHE=off to
# compare without it.
C=${XDG_CACHE_HOME:-$HOME/.cache}/pocketbrain
ev1() { python3 -c "import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" "$1"; }
evict() { ev1 "$M"; for f in "$C"/*.pbpack; do [ -f "$f" ] && ev1 "$f"; done; }
"$PB" run -m "$M" -t "$TH" --raw -p "warm the cache" -n 1 --temp 0 >/dev/null 2>&1
now() { date +%s%N; }
i=0
while [ $i -lt "$REPS" ]; do
  evict; t=$(now); "$PB" run -m "$M" -t "$TH" --raw -p "$P" -n 1 --temp 0 >/dev/null 2>&1; pb=$((($(now) - t) / 1000000))
  evict; t=$(now); "$LL" -m "$M" -t "$TH" -p "$P" -n 1 --temp 0 -no-cnv --no-warmup >/dev/null 2>/tmp/cold_ll.log </dev/null
  ll=$((($(now) - t) / 1000000))
  echo "run $i: pocketbrain ${pb} ms, llama.cpp ${ll} ms (load $(grep -o 'load time = *[0-9.]* ms' /tmp/cold_ll.log | grep -o '[0-9.]* ms'))"
  i=$((i + 1))
done
