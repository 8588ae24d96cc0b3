#!/bin/sh
# test_gemma4_cli.sh -- a tiny Gemma 4 model end to end through the CLI: convert the HF folder, run, chat (system
# turn, two turns), info --mem, quantize, serve (chat completion) -- the Gemma 4 turn format and its stop tokens.
BIN=${PB_BIN:-build/pocketbrain}
T=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$T"' EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
M=$T/g4.gguf
if "$BIN" convert tests/data/model/gemma4_e2b "$M" --type f32 >"$T/conv" 2>&1; then ok "convert gemma4_e2b"; else nok "convert: $(tail -1 "$T/conv")"; fi
"$BIN" run -m "$M" -p "the weather" -n 6 --seed 1 --verbose >"$T/run" 2>"$T/run.err"
rc=$?
if [ $rc -eq 0 ] && grep -q "answer [1-6] tok" "$T/run.err"; then ok "run: answers (stats line)"; else nok "run rc $rc: $(tail -2 "$T/run.err")"; fi
printf 'hello there\nand again\n' | "$BIN" chat -m "$M" -n 4 --seed 1 --system "be brief" >"$T/chat" 2>&1
rc=$?
n=$(grep -c "answer [0-9]* tok" "$T/chat")
if [ $rc -eq 0 ] && [ "$n" -eq 2 ]; then ok "chat: two turns with a system prompt"; else nok "chat rc $rc, $n turns: $(tail -3 "$T/chat")"; fi
"$BIN" info --mem "$M" >"$T/info" 2>&1
if grep -q "tokenizer: *gemma4" "$T/info" && grep -q "arch check: *ok" "$T/info" && grep -q "KV" "$T/info"; then ok "info --mem: gemma4 tokenizer, arch check, KV"; else nok "info: $(tail -3 "$T/info")"; fi
if "$BIN" quantize "$M" "$T/q.gguf" q4_k_m >/dev/null 2>&1 && "$BIN" info --tensors "$T/q.gguf" | grep "per_layer_model_proj" | grep -q f32; then
  ok "quantize q4_k_m keeps per_layer_model_proj unquantized"
else nok "quantize q4_k_m"; fi
"$BIN" serve -m "$M" --port 0 >"$T/sout" 2>"$T/serr" &
PID=$!
for i in $(seq 1 300); do grep -q listening "$T/sout" && break; kill -0 $PID 2>/dev/null || break; sleep 0.1; done
PORT=$(sed -n 's/^listening //p' "$T/sout")
if [ -n "$PORT" ] && curl -s -o "$T/body" -H "Content-Type: application/json" \
  -d '{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi <|turn>model"}],"max_tokens":4,"seed":1}' \
  "http://127.0.0.1:$PORT/v1/chat/completions" && grep -q '"choices"' "$T/body"; then
  ok "serve: chat completion on gemma4"
else nok "serve: $(head -c 300 "$T/body" 2>/dev/null) $(tail -2 "$T/serr")"; fi
