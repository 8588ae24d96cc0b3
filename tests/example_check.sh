#!/bin/sh
# example_check.sh -- runs an examples/ program on the default model and checks it produced text.
out=$("$1" models/default.gguf "What does 'harbor' mean?" 2>&1); rc=$?
if [ $rc = 0 ] && [ -n "$out" ]; then echo "ok - $(basename "$1") printed an answer"; else echo "not ok - $(basename "$1") rc=$rc: $out"; fi
