#!/bin/sh
# run_default.sh -- `make run`: chat with the embedded default model (one demo question without a terminal).
BIN=${1:-build/pocketbrain}
MODEL=models/default.gguf
if [ ! -f "$MODEL" ]; then
  echo "make run: the default model $MODEL is not in this checkout yet" >&2
  exit 1
fi
if [ -t 0 ] && [ -t 1 ]; then
  exec "$BIN" chat -m "$MODEL"
else
  exec "$BIN" run -m "$MODEL" -p "What does 'harbor' mean?"
fi
