#!/bin/sh
# example_check.sh -- runs an examples/ program on the default model and checks it produced text.
# Before models/default.gguf exists, the tiny peer model (random weights) stands in for it.
model=models/default.gguf
if [ ! -f "$model" ]; then
  model=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
  echo "# models/default.gguf not found; using $model"
fi
out=$("$1" "$model" "What does 'harbor' mean?" 2>&1); rc=$?
if [ $rc = 0 ] && [ -n "$out" ]; then echo "ok - $(basename "$1") printed an answer"; else echo "not ok - $(basename "$1") rc=$rc: $out"; fi
