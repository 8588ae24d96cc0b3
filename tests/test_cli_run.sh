#!/bin/sh
# test_cli_run.sh -- `pocketbrain run` end to end (pipe, -p, -f, --raw, --json, seeds, stop, Ctrl-C, flags,
# memory admission and --fit), `bench` and `info --mem` on the tiny peer model (or models/default.gguf).
BIN=${PB_BIN:-build/pocketbrain}
# the tiny peer model (n_ctx_train 8192, vocab 4096); models/default.gguf only when the fixture is absent
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
R="$BIN run -m $M -t 1"

echo "What is a harbor?" | $R -n 8 >"$T/out" 2>"$T/err"; rc=$?
check "run reads the prompt from a pipe and streams an answer (rc $rc)" '[ $rc = 0 ] && [ -s "$T/out" ]'

$R -p "What is a harbor?" -n 8 --json >"$T/json" 2>"$T/err"; rc=$?
check "--json: one object with text, counts, timings" \
  '[ $rc = 0 ] && grep -q "\"n_generated\":8" "$T/json" && grep -q "\"stop_reason\":\"max_tokens\"" "$T/json" && grep -q "\"text\":" "$T/json" && grep -q "\"n_prompt\":[1-9]" "$T/json" && grep -q "\"decode_tok_s\":" "$T/json" && [ $(wc -l <"$T/json") = 1 ]'

$R -p "Tell me about ships" -n 12 --temp 1 --top-k 0 --seed 7 >"$T/s1" 2>/dev/null
$R -p "Tell me about ships" -n 12 --temp 1 --top-k 0 --seed 7 >"$T/s2" 2>/dev/null
$R -p "Tell me about ships" -n 12 --temp 1 --top-k 0 --seed 8 >"$T/s3" 2>/dev/null
check "same --seed and settings -> the same text" 'cmp -s "$T/s1" "$T/s2" && [ -s "$T/s1" ]'
check "another --seed -> another text" '! cmp -s "$T/s1" "$T/s3"'

printf 'Once upon a time' >"$T/prompt.txt"
$R -f "$T/prompt.txt" -n 6 --raw --temp 0 >"$T/raw1" 2>/dev/null; rc1=$?
$R -p "Once upon a time" -n 6 --raw --temp 0 >"$T/raw2" 2>/dev/null; rc2=$?
check "--raw completion from -f FILE equals -p (greedy)" '[ $rc1 = 0 ] && [ $rc2 = 0 ] && cmp -s "$T/raw1" "$T/raw2" && [ -s "$T/raw1" ]'
$R -p "Once upon a time" -n 6 --temp 0 >"$T/chat1" 2>/dev/null
check "the chat template changes the answer vs --raw" '! cmp -s "$T/raw1" "$T/chat1"'

# a stop string taken from the greedy answer: the output stops right before it
$R -p "Say something" -n 24 --temp 0 >"$T/full" 2>/dev/null
stop=$(head -c 40 "$T/full" | tail -c 6)
if [ -n "$stop" ]; then
  $R -p "Say something" -n 24 --temp 0 --stop "$stop" --json >"$T/stopj" 2>/dev/null
  check "--stop ends the answer (stop reason 'stop')" 'grep -q "\"stop_reason\":\"stop\"" "$T/stopj"'
fi

$R -p hi --bogus-flag >"$T/out" 2>"$T/err"; rc=$?
check "unknown flag: exit 2, message names it, usage line" '[ $rc = 2 ] && grep -q -- "--bogus-flag" "$T/err" && grep -q "^usage: pocketbrain run" "$T/err"'
$R -p hi --temp hot >"$T/out" 2>"$T/err"; rc=$?
check "bad value: exit 2 naming --temp" '[ $rc = 2 ] && grep -q -- "--temp" "$T/err"'
$R -p hi --preset wild >"$T/out" 2>"$T/err"; rc=$?
check "unknown preset: exit 2" '[ $rc = 2 ] && grep -q "wild" "$T/err"'
$R -f "$T" -n 2 >"$T/out" 2>"$T/err"; rc=$?
check "-f DIRECTORY: exit 1 naming the read error, not 'the prompt is empty'" '[ $rc = 1 ] && grep -q "prompt file: cannot read .*Is a directory" "$T/err"'
$R -n 2 <"$T" >"$T/out" 2>"$T/err"; rc=$?
check "stdin that cannot be read: exit 1 naming the read error" '[ $rc = 1 ] && grep -q "cannot read the prompt on stdin: Is a directory" "$T/err"'
$R -p hi -c >"$T/out" 2>"$T/err"; rc=$?
check "missing flag value: exit 2" '[ $rc = 2 ] && grep -q -- "-c needs a value" "$T/err"'
$BIN run --help >"$T/help"; rc=$?
check "run --help lists the common flags" '[ $rc = 0 ] && grep -q -- "--preset" "$T/help" && grep -q -- "--mem-limit" "$T/help" && grep -q -- "--thermal" "$T/help"'
$BIN run -m /nonexistent.gguf -p hi >"$T/out" 2>"$T/err"; rc=$?
check "missing model file: exit 1 with a message" '[ $rc = 1 ] && grep -q "nonexistent" "$T/err"'

# memory admission
$R -p hi -n 2 -c 8192 --mem-limit 40M >"$T/out" 2>"$T/err"; rc=$?
check "--mem-limit too small: refused with the numbers and the largest n_ctx" '[ $rc = 1 ] && grep -q "MiB" "$T/err" && grep -q "largest n_ctx that fits is [0-9]" "$T/err"'
$R -p hi -n 2 --mem-limit 1M >"$T/out" 2>"$T/err"; rc=$?
check "--mem-limit below the weights: says no n_ctx fits (was: 'the largest n_ctx that fits is 0 (use --ctx 0' -- the default context)" \
  '[ $rc = 1 ] && grep -q "the weights and scratch alone do not fit, at any n_ctx" "$T/err" && ! grep -q -- "--ctx 0" "$T/err"'
$R -p hi -n 2 -c 8192 --mem-limit 40M --fit >"$T/out" 2>"$T/err"; rc=$?
check "--fit lowers n_ctx / uses a q8_0 KV cache and says so" '[ $rc = 0 ] && grep -q -- "--fit: using a q8_0 KV cache and n_ctx [0-9]*" "$T/err" && [ -s "$T/out" ]'
$BIN info --mem -c 8192 "$M" >"$T/info" 2>&1; rc=$?
check "info --mem -c 8192 prints the estimate" '[ $rc = 0 ] && grep -q "memory: *n_ctx 8192, f16 KV: weights" "$T/info" && grep -q "largest n_ctx" "$T/info"'
# chat and serve keep 512 more rows in each sliding-window ring (their admission counts them; info --mem did not)
check "info --mem: a chat / serve session's KV with the 512 extra ring rows" 'grep -q "chat / serve: KV .* MiB (512 more rows in each sliding-window ring" "$T/info"'
$BIN info --mem -c 256 --json "$M" >"$T/infoj" 2>&1
check "info --mem --json: kv_chat_serve above kv, total_chat_serve above total" \
  'python3 -c "import json,sys; m=json.load(open(sys.argv[1]))[\"memory\"]; sys.exit(0 if m[\"kv_chat_serve\"] > m[\"kv\"] and m[\"total_chat_serve\"] - m[\"total\"] == m[\"kv_chat_serve\"] - m[\"kv\"] else 1)" "$T/infoj"'

# a model whose header gives a 2^24-token training context: the largest n_ctx said is one -c takes (was 16777216)
python3 - "$M" "$T/ctx24.gguf" <<'EOF'
import struct, sys
b = open(sys.argv[1], 'rb').read()
k = b'gemma2.context_length'
i = b.index(struct.pack('<Q', len(k)) + k) + 8 + len(k) + 4  # the u32 value after the key and its type
open(sys.argv[2], 'wb').write(b[:i] + struct.pack('<I', 1 << 24) + b[i + 4:])
EOF
$BIN info --mem --mem-limit 100G "$T/ctx24.gguf" >"$T/info" 2>&1; rc=$?
$BIN info --mem --mem-limit 100G --json "$T/ctx24.gguf" >"$T/infoj" 2>&1
check "info --mem, training context 2^24: the largest n_ctx that fits is -c's most, 1048576 (rc $rc)" \
  '[ $rc = 0 ] && grep -q "largest n_ctx that fits: 1048576 (the most -c takes)$" "$T/info" && grep -q "\"max_n_ctx\":[[:space:]]*1048576," "$T/infoj"'

# NaN / inf in a matrix, or values an F16 KV cache cannot hold: a clear error, never an answer (a NaN was token 0 --
# empty text, exit 0 -- or finite garbage: Gemma 2's soft-cap, quantized products and the attention's exp hid it)
plant() { # FILE OUT TENSOR BYTE_OFFSET HEX: a copy of FILE with bytes HEX written at that offset of TENSOR's data
  "$BIN" info "$1" --tensors --json >"$T/tensors.json" 2>/dev/null
  python3 - "$@" "$T/tensors.json" <<'EOF'
import json, sys
src, dst, name, off, hexb, tj = sys.argv[1:]
t = [t for t in json.load(open(tj))['tensors'] if t['name'] == name][0]
b = bytearray(open(src, 'rb').read())
o = t['offset'] + int(off)
v = bytes.fromhex(hexb)
b[o:o + len(v)] = v
open(dst, 'wb').write(b)
EOF
}
plant "$M" "$T/nan_q.gguf" blk.3.attn_q.weight 0 007e # the first Q8_0 block's scale: fp16 NaN
$BIN run -m "$T/nan_q.gguf" -t 1 -p "Once upon a time" -n 4 --temp 0 >"$T/out" 2>"$T/err"; rc=$?
check "gemma2 q8_0, NaN scale in blk.3.attn_q: exit 1 naming non-finite values, no text (rc $rc)" \
  '[ $rc = 1 ] && grep -q "the model produced a non-finite key (nan) at position 0 in layer 4" "$T/err" && [ ! -s "$T/out" ]'
plant "$M" "$T/inf_out.gguf" token_embd.weight 0 007c # fp16 inf: the logit of token 0
$BIN run -m "$T/inf_out.gguf" -t 1 -p "Once upon a time" -n 4 --temp 0.7 >"$T/out" 2>"$T/err"; rc=$?
check "gemma2 q8_0, inf scale in the output matrix, sampled: exit 1 naming non-finite logits (rc $rc)" \
  '[ $rc = 1 ] && grep -q "the model produced non-finite logits at position [0-9]* (-\{0,1\}inf at index 0)" "$T/err" && [ ! -s "$T/out" ]'
if $BIN synth --arch gemma4 --size tiny --type f32 -o "$T/g4.gguf" >/dev/null 2>&1; then
  plant "$T/g4.gguf" "$T/g4nan.gguf" blk.1.ffn_down.weight 0 0000c07f # f32 NaN
  $BIN run -m "$T/g4nan.gguf" -t 1 -p "Once upon a time" -n 4 --temp 0 >"$T/out" 2>"$T/err"; rc=$?
  check "gemma4 f32, NaN in blk.1.ffn_down: exit 1 naming non-finite values (rc $rc)" \
    '[ $rc = 1 ] && grep -q "the model produced a non-finite key (nan) at position 0 in layer 2" "$T/err" && [ ! -s "$T/out" ]'
else
  nok "synth gemma4 tiny"
fi
plant "$M" "$T/big_v.gguf" blk.0.attn_v.weight 0 0064 # the first block's scale 1024: V rows near 4e5
$BIN run -m "$T/big_v.gguf" -t 1 -p "Once upon a time" -n 4 --temp 0 >"$T/out" 2>"$T/err"; rc=$?
check "V past what an F16 KV cache stores: exit 1 naming the layer and --kv-type f32 (rc $rc)" \
  '[ $rc = 1 ] && grep -q "layer 0.s value at position 0 is .*, beyond the 65520 the f16 KV cache stores (an f32 KV cache holds it: --kv-type f32)" "$T/err" && [ ! -s "$T/out" ]'
$BIN run -m "$T/big_v.gguf" -t 1 -p "Once upon a time" -n 4 --temp 0 --kv-type f32 >"$T/out" 2>"$T/err"; rc=$?
check "... and with --kv-type f32 it answers (rc $rc)" '[ $rc = 0 ] && [ -s "$T/out" ]'

# thermal governor through the CLI
echo 95000 >"$T/temp"
$R -p hi -n 3 --thermal "$T/temp" >"$T/out" 2>"$T/err"; rc=$?
check "--thermal FILE runs (hot: one thread, pauses)" '[ $rc = 0 ] && [ -s "$T/out" ]'
$R -p hi -n 3 --thermal "$T/missing" >"$T/out" 2>"$T/err"; rc=$?
check "--thermal with an unreadable file: exit 1" '[ $rc = 1 ] && grep -q "thermal" "$T/err"'

# context full is an error by default, not a silent truncation
$R -p "Tell me a long story about ships and the sea" -c 64 -n 0 >"$T/out" 2>"$T/err"; rc=$?
check "context full: exit 1 with 'context full'" '[ $rc = 1 ] && grep -q "context full" "$T/err"'
$R -p hi -c 64 -n 0 >"$T/out" 2>"$T/err"; rc=$?
check "context full while answering: exit 1, --context-shift advised (it lets the answer go on)" \
  '[ $rc = 1 ] && grep -q "tokens in the context" "$T/err" && grep -q "use --context-shift" "$T/err"'
# a prompt longer than the context: --context-shift cannot help (it was advised, even with it on)
LONG=$(printf 'word %.0s' $(seq 1 80))
for shift in "" --context-shift; do
  $R -p "$LONG" -c 48 -n 4 $shift >"$T/out" 2>"$T/err"; rc=$?
  check "a prompt longer than -c ${shift:-(no shift)}: exit 1, 'shorten the prompt', no --context-shift advice" \
    '[ $rc = 1 ] && grep -q "shorten the prompt, or raise -c" "$T/err" && ! grep -q "use --context-shift" "$T/err"'
done

# Ctrl-C (SIGINT) stops the answer: partial text, exit 130
$R -p "Tell me a very long story" -n 0 -c 4096 >"$T/out" 2>"$T/err" &
pid=$!
# signal once the answer is streaming (the handler is in place), however slow the machine
for i in $(seq 1 600); do [ -s "$T/out" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -INT $pid
wait $pid; rc=$?
check "SIGINT stops run with exit 130 and keeps the partial answer (rc $rc)" '[ $rc = 130 ] && grep -q "interrupted" "$T/err" && [ -s "$T/out" ]'

# bench
$BIN bench -m "$M" -t 1 -p 16 -n 4 -r 2 >"$T/bench" 2>&1; rc=$?
check "bench prints llama-bench style rows pp16 / tg4" '[ $rc = 0 ] && grep -q "| pp16 |" "$T/bench" && grep -q "| tg4 |" "$T/bench" && grep -q "ttft" "$T/bench"'
$BIN bench -m "$M" -t 1 -p 16 -n 4 -r 2 --json >"$T/benchj" 2>&1; rc=$?
check "bench --json has runs with median/min/max" '[ $rc = 0 ] && grep -q "\"runs\"" "$T/benchj" && grep -q "\"median\"" "$T/benchj" && grep -q "\"peak_rss_bytes\"" "$T/benchj"'
$BIN bench -m "$M" -t 1 -p 8 -n 0 -r 1 --ttft-prompt 40 --json >"$T/bencht" 2>&1; rc=$?
check "bench --ttft-prompt 40: the TTFT test's prompt length in the JSON" '[ $rc = 0 ] && grep -q "\"ttft_prompt\":[[:space:]]*40" "$T/bencht" && grep -q "\"ttft_ms\"" "$T/bencht"'
$BIN bench -m "$M" -t 1 -p 16 -n 0 -r 1 -b 4 --json >"$T/benchb" 2>&1; rc=$?
check "bench -b 4: pp16 in chunks of 4 tokens, n_batch in the JSON (256 by default)" '[ $rc = 0 ] && grep -q "\"n_batch\":[[:space:]]*4" "$T/benchb" && grep -q "\"pp16\"" "$T/benchb" && grep -q "\"n_batch\":[[:space:]]*256" "$T/benchj"'
$BIN bench -m "$M" -t 1 --cold -b 8 >"$T/out" 2>"$T/err"; rc=$?
check "bench -b with --cold: exit 2 naming both (rc $rc)" '[ $rc = 2 ] && grep -q -- "-b is not taken with --cold" "$T/err"'
$BIN bench -m "$M" -t 1 -p 0 -n 6 -r 1 --sample creative --json >"$T/benchs" 2>&1; rc=$?
check "bench --sample creative: sampled decode, the preset named in the JSON" '[ $rc = 0 ] && grep -q "\"sample\":[[:space:]]*\"creative\"" "$T/benchs" && grep -q "\"tg6\"" "$T/benchs"'
$BIN bench -m "$M" -t 1 -p 0 -n 2 -r 1 >"$T/benchg" 2>&1; rc=$?
check "bench says its decode is greedy by default" '[ $rc = 0 ] && grep -q "decode greedy" "$T/benchg"'
$BIN bench -m "$M" -t 1 --sample hot >"$T/out" 2>"$T/err"; rc=$?
check "bench --sample hot: exit 2 naming the flag and the choices (rc $rc)" '[ $rc = 2 ] && grep -q -- "--sample expects greedy, precise" "$T/err" && grep -q "hot" "$T/err"'
$BIN bench -m "$M" -t 1 -p 8 -n 4 -d 24 -r 1 >"$T/benchd" 2>&1; rc=$?
check "bench --depth runs pp / tg after a 24-token context (rows pp8 @ d24 / tg4 @ d24)" '[ $rc = 0 ] && grep -q "| pp8 @ d24 |" "$T/benchd" && grep -q "| tg4 @ d24 |" "$T/benchd"'
$BIN bench -m "$M" -t 1 --cold -r 2 >"$T/cold" 2>&1; rc=$?
check "bench --cold: a cold-start row (fresh processes, how the weights were loaded, page cache state said)" \
  '[ $rc = 0 ] && grep -q "process start -> first token (24-token prompt)" "$T/cold" && grep -qE "^\| 1 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| (mapped from the pack cache|repacked[^|]*) \| ([0-9]+% \(evicted|unknown)" "$T/cold"'
$BIN bench -m "$M" -t 1 --cold -r 1 --json >"$T/coldj" 2>&1; rc=$?
check "bench --cold --json: cold_ms, open_ms, first_token_ms, resident_before" \
  '[ $rc = 0 ] && grep -q "\"cold_ms\"" "$T/coldj" && grep -q "\"first_token_ms\"" "$T/coldj" && grep -q "\"resident_before\"" "$T/coldj"'
$BIN bench -m /nonexistent.gguf -t 1 --cold -r 1 >"$T/out" 2>"$T/err"; rc=$?
check "bench --cold on a missing model fails with a message (rc $rc)" '[ $rc != 0 ] && grep -q "nonexistent" "$T/err"'
$BIN bench -m "$M" -t 1 -d -5 >"$T/out" 2>"$T/err"; rc=$?
check "bench -d -5: exit 2 naming the flag" '[ $rc = 2 ] && grep -q -- "-d" "$T/err"'
$BIN bench -m "$M" -t 0 >"$T/out" 2>"$T/err"; rc=$?
check "bench -t 0: exit 2" '[ $rc = 2 ]'

# GPU flags: --no-gpu is the CPU; --gpu without a usable GPU (a build without CUDA, or no device) fails with the reason
$R -p "Once upon a time" -n 6 --raw --temp 0 --no-gpu >"$T/cpu1" 2>/dev/null; rc=$?
check "--no-gpu gives the same greedy text (rc $rc)" '[ $rc = 0 ] && cmp -s "$T/raw2" "$T/cpu1"'
if ! command -v nvidia-smi >/dev/null 2>&1; then
  $R -p "hi" -n 2 --gpu >"$T/out" 2>"$T/err"; rc=$?
  check "--gpu without a GPU: exit 1 naming the reason" '[ $rc = 1 ] && grep -Eq "without CUDA|no CUDA device" "$T/err" && [ ! -s "$T/out" ]'
  $BIN bench -m "$M" --gpu -p 4 -n 4 -r 1 >"$T/out" 2>"$T/err"; rc=$?
  check "bench --gpu without a GPU: exit 1 naming the reason" '[ $rc = 1 ] && grep -Eq "without CUDA|no CUDA device" "$T/err"'
fi
exit 0
