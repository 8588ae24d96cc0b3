#!/bin/sh
# test_quantize_cli.sh -- `pocketbrain quantize` end to end ($PB_BIN): outputs identical to llama-quantize's files,
# bad mix / missing input / bad output dir / Ctrl-C leave no file behind.
PB=${PB_BIN:-build/pocketbrain}
SHARED=${PB_SHARED:-../shared}
MD="$SHARED/fixtures/peer/model"
SRC="$MD/gemma2-tiny-v.f16.gguf"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; }
run() { "$@" >"$T/out" 2>"$T/err"; rc=$?; }
has() { grep -q -- "$1" "$2"; }
clean_dir() { [ -z "$(ls -A "$1" 2>/dev/null)" ]; }

if [ ! -x "$PB" ]; then nok "CLI binary $PB missing"; exit 1; fi
if [ ! -r "$SRC" ]; then
  if [ "$CI" = true ]; then nok "peer fixtures missing under $MD"; exit 1; fi
  echo "# skip: peer fixtures not found under $MD"; ok "skipped (no fixtures)"; exit 0
fi
O="$T/o"; mkdir -p "$O"

run "$PB" quantize "$SRC" "$O/x.gguf" q4_k_x
if [ $rc = 2 ] && has "unknown mix 'q4_k_x'" "$T/err" && clean_dir "$O"; then ok "bad mix: exit 2, named, no file"
else nok "bad mix: rc=$rc $(cat "$T/err")"; fi

run "$PB" quantize "$T/missing.gguf" "$O/x.gguf" q8_0
if [ $rc = 1 ] && has "missing.gguf" "$T/err" && clean_dir "$O"; then ok "missing input: exit 1, named, no file"
else nok "missing input: rc=$rc $(cat "$T/err")"; fi

run "$PB" quantize "$SRC" "$T/no/such/dir/x.gguf" q8_0
if [ $rc = 1 ] && has "no/such/dir" "$T/err"; then ok "bad output dir: exit 1, named"
else nok "bad output dir: rc=$rc $(cat "$T/err")"; fi

# Output paths that are not regular files are refused, never replaced (the writer is shared by every command).
mkfifo "$O/fifo"; ln -s "$T/victim" "$O/link"; echo precious > "$T/victim"
run timeout 60 "$PB" quantize "$SRC" "$O/fifo" q8_0
if [ $rc = 1 ] && has "FIFO" "$T/err" && [ -p "$O/fifo" ]; then ok "FIFO output refused, still a FIFO"
else nok "FIFO output: rc=$rc $(cat "$T/err")"; fi
run "$PB" quantize "$SRC" "$O/link" q8_0
if [ $rc = 1 ] && has "symbolic link" "$T/err" && [ -L "$O/link" ] && [ "$(cat "$T/victim")" = precious ]; then
  ok "symlink output refused, link and its target unchanged"
else nok "symlink output: rc=$rc $(cat "$T/err")"; fi
if [ "$(ls -A "$O" | grep -c tmp)" = 0 ]; then ok "no temp file left after refused outputs"; else nok "temp files left: $(ls -A "$O")"; fi
rm -f "$O/fifo" "$O/link"

run "$PB" quantize "$SRC" "$O/x.gguf" q8_0 --threads zero
if [ $rc = 2 ] && clean_dir "$O"; then ok "bad --threads value: exit 2"; else nok "bad --threads: rc=$rc $(cat "$T/err")"; fi

run "$PB" quantize "$MD/gemma2-tiny-v.q8_0.gguf" "$O/x.gguf" q4_0
if [ $rc = 1 ] && has "allow-requantize" "$T/err" && clean_dir "$O"; then ok "quantized input needs --allow-requantize"
else nok "requantize: rc=$rc $(cat "$T/err")"; fi

# Byte-identical to the llama-quantize files stored next to the source (one thread and two).
for m in q8_0 q4_k_m; do
  run "$PB" quantize "$SRC" "$O/$m.gguf" "$m" --threads 2
  if [ $rc = 0 ] && cmp -s "$O/$m.gguf" "$MD/gemma2-tiny-v.$m.gguf"; then ok "$m output == llama-quantize's file"
  else nok "$m output differs from llama-quantize's (rc=$rc) $(cat "$T/err")"; fi
  rm -f "$O/$m.gguf"
done
run "$PB" quantize "$SRC" "$O/q4_0.gguf" Q4_0 -t 1
if [ $rc = 0 ] && cmp -s "$O/q4_0.gguf" "$MD/gemma2-tiny-v.q4_0.gguf"; then ok "Q4_0 (1 thread) == llama-quantize's file"
else nok "Q4_0 output differs (rc=$rc)"; fi
rm -f "$O/q4_0.gguf"

# Q3_K_M: llama-quantize's file is not stored, only its sha256 (metrics.json).
want=$(grep -A4 '"q3_k_m": {' "$MD/metrics.json" | grep -o '"sha256": *"[0-9a-f]\{64\}"' | head -1 | grep -o '[0-9a-f]\{64\}')
run "$PB" quantize "$SRC" "$O/q3.gguf" q3_k_m
got=$(sha256sum "$O/q3.gguf" 2>/dev/null | cut -c1-64)
if [ $rc = 0 ] && [ -n "$want" ] && [ "$got" = "$want" ]; then ok "q3_k_m sha256 == llama-quantize's ($want)"
else nok "q3_k_m sha256 $got, llama-quantize $want (rc=$rc)"; fi
rm -f "$O/q3.gguf"

# Ctrl-C in the middle: no output, no temp file.
"$PB" quantize "$SRC" "$O/f32.gguf" f32 >/dev/null 2>&1
"$PB" quantize "$O/f32.gguf" "$O/int.gguf" q2_k --threads 1 >/dev/null 2>&1 &
pid=$!
# signal as soon as the temp output exists (the quantization runs while it is being written)
for i in $(seq 1 1000); do ls "$O" | grep -q tmp && break; sleep 0.005; done
kill -INT $pid 2>/dev/null
wait $pid; rc=$?
if [ $rc -ne 0 ] && [ ! -e "$O/int.gguf" ] && [ -z "$(ls "$O" | grep tmp)" ]; then ok "SIGINT mid-run: status $rc, no output, no temp file"
elif [ $rc = 0 ]; then nok "SIGINT test: quantize finished before the signal"
else nok "SIGINT left files: $(ls "$O")"; fi
# A closed terminal or ssh session (SIGHUP), a closed pipe (SIGPIPE): the same (they used to end it with the temp
# file -- a partial model -- left behind). Under nohup (SIGHUP ignored) it goes on to the end.
for sig in HUP PIPE; do
  "$PB" quantize "$O/f32.gguf" "$O/sig.gguf" q2_k --threads 1 >/dev/null 2>&1 &
  pid=$!
  for i in $(seq 1 1000); do ls "$O" | grep -q tmp && break; sleep 0.005; done
  kill -$sig $pid 2>/dev/null
  wait $pid; rc=$?
  if [ $rc -gt 128 ] && [ ! -e "$O/sig.gguf" ] && [ -z "$(ls "$O" | grep tmp)" ]; then ok "SIG$sig mid-run: status $rc, no output, no temp file"
  elif [ $rc = 0 ]; then nok "SIG$sig test: quantize finished before the signal"
  else nok "SIG$sig left files (status $rc): $(ls "$O" | tr '\n' ' ')"; rm -f "$O"/sig.gguf*; fi
done
nohup "$PB" quantize "$O/f32.gguf" "$O/sig.gguf" q2_k --threads 1 >/dev/null 2>&1 &
pid=$!
for i in $(seq 1 1000); do ls "$O" | grep -q tmp && break; sleep 0.005; done
kill -HUP $pid 2>/dev/null
wait $pid; rc=$?
if [ $rc = 0 ] && [ -s "$O/sig.gguf" ]; then ok "under nohup SIGHUP is still ignored: quantize finishes"
else nok "nohup quantize: status $rc, files: $(ls "$O" | tr '\n' ' ')"; fi
rm -f "$O/sig.gguf"
# The input truncated in place while it is read (it is mapped): the CLI says what happened and what to do instead,
# removes its temp file and ends by SIGBUS (status 135), never a bare "Bus error" with a temp file left behind.
cp "$O/f32.gguf" "$T/in.gguf"
"$PB" quantize "$T/in.gguf" "$O/bus.gguf" q2_k --threads 1 >/dev/null 2>"$T/bus.err" &
pid=$!
for i in $(seq 1 1000); do ls "$O" | grep -q tmp && break; sleep 0.005; done
truncate -s 4096 "$T/in.gguf"
wait $pid; rc=$?
if [ $rc = 135 ] && has "truncated or rewritten in place" "$T/bus.err" && [ ! -e "$O/bus.gguf" ] && [ -z "$(ls "$O" | grep tmp)" ]; then
  ok "input truncated while quantizing: SIGBUS named ($(cat "$T/bus.err" | head -c 80)...), no output, no temp file"
elif [ $rc = 0 ]; then nok "SIGBUS test: quantize finished before the truncation"
else nok "input truncated while quantizing: status $rc, $(cat "$T/bus.err"), files: $(ls "$O")"; fi
rm -f "$O/f32.gguf" "$O/bus.gguf"
if clean_dir "$O"; then ok "no stray files after all runs"; else nok "stray files: $(ls "$O")"; fi
