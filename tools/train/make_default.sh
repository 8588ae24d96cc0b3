#!/bin/sh
# make_default.sh -- turns train.py's output into models/default.gguf with our own convert + quantize, and measures it.
# Usage: tools/train/make_default.sh OUT_DIR_OF_TRAIN_PY [BUILD_DIR]
#   OUT_DIR_OF_TRAIN_PY holds hf.tar.gz and weights.part* as train.py writes them ($OUT of the GPU run).
# Writes /tmp/pb-default/{hf,f32.gguf,q8_0.gguf,q4_k_m.gguf}, prints perplexity of each on the held-out text
# (same chunking as train.py), and copies the Q8_0 file to models/default.gguf.
set -eu
SRC=${1:?usage: make_default.sh TRAIN_OUT_DIR [BUILD_DIR]}
BUILD=${2:-build}
BIN=$BUILD/pocketbrain
W=/tmp/pb-default
rm -rf "$W"
mkdir -p "$W"
tar xzf "$SRC/hf.tar.gz" -C "$W"
cat "$SRC"/weights.part* >"$W/hf/model.safetensors"
"$BIN" convert "$W/hf" "$W/f32.gguf" --type f32 --name pocketbrain-default
"$BIN" quantize "$W/f32.gguf" "$W/q8_0.gguf" Q8_0
"$BIN" quantize "$W/f32.gguf" "$W/q4_k_m.gguf" Q4_K_M
for m in f32 q8_0 q4_k_m; do
  echo "== $m ($(wc -c <"$W/$m.gguf") bytes)"
  if [ $m = f32 ]; then kl=""; else kl="--kl-model $W/f32.gguf"; fi
  "$BIN" perplexity -m "$W/$m.gguf" -f tests/data/train/heldout.txt --ctx 256 $kl
done
cp "$W/q8_0.gguf" models/default.gguf
echo "models/default.gguf <- $W/q8_0.gguf"
