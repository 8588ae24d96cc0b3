#!/bin/sh
# test_gemma4_cli.sh -- a tiny Gemma 4 model end to end through the CLI: convert the HF folder, run, chat (system
# turn, two turns), info --mem (KV per layer, PLE table), quantize, serve (chat completion) -- the Gemma 4 turn format and its stop tokens.
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
# info --mem per layer, by hand from config.json (gemma4_e2b): layers 0-3 sliding (window 8, head dim 16, 1 KV head),
# layer 4 full (head dim 32, 1 KV head), 5-9 KV-shared (5-8 read layer 3, 9 reads layer 4). -c 64, F16 KV (2 bytes):
# sliding 2 (K+V) x 8 x 16 x 2 = 512, full 2 x 64 x 32 x 2 = 8192, shared 0; total 4 x 512 + 8192 = 10240.
# PLE table: 10 layers x 8 x 2048 tokens x 4 bytes (f32) = 655360.
"$BIN" info --mem -c 64 --kv-type f16 "$M" >"$T/mem" 2>&1
lay() { awk -v l="$1" '/^KV by layer:/ {on=1; next} on && $1 == l {print; exit}' "$T/mem"; }
L3=$(lay 3); L4=$(lay 4); L5=$(lay 5); L9=$(lay 9)
tot=$(awk '/^KV by layer:/ {on=1} on && $1 == "total" {print $2}' "$T/mem")
if echo "$L3" | grep -Eq '^ +3 +sliding +16 +1 +8 +512$' && echo "$L4" | grep -Eq '^ +4 +full +32 +1 +64 +8192$' &&
  echo "$L5" | grep -Eq '^ +5 +sliding +16 +1 +- +0 +shared with layer 3$' &&
  echo "$L9" | grep -Eq '^ +9 +full +32 +1 +- +0 +shared with layer 4$' && [ "$tot" = 10240 ] &&
  grep -q "PLE table per_layer_token_embd.weight: 655360 bytes .*mapped.*not streamed" "$T/mem"; then
  ok "info --mem: KV per layer (512 sliding, 8192 full, shared layers 0 naming their source), total 10240, PLE table 655360"
else nok "info --mem per layer: [$L3] [$L4] [$L5] [$L9] total [$tot]: $(grep -c . "$T/mem") lines"; fi
# gemma4_keqv (llama.cpp's file): sliding layers 0-4 with 2 KV heads of 16, the full layer 5 with 1 of 32; -c 64 F32:
# sliding 2 x 8 x 2 x 16 x 4 = 2048, full 2 x 64 x 32 x 4 = 16384; total 5 x 2048 + 16384 = 26624; no PLE table.
"$BIN" info --json --mem -c 64 --kv-type f32 tests/data/model/gemma4_keqv/llama.f32.gguf | tr -d ' \t\n' >"$T/memj"
if grep -q '"layer":0,"type":"sliding","head_dim":16,"kv_heads":2,"kv_bytes":2048}' "$T/memj" &&
  grep -q '"layer":5,"type":"full","head_dim":32,"kv_heads":1,"kv_bytes":16384}' "$T/memj" &&
  grep -q '"kv":26624,' "$T/memj" && grep -q '"ple_table":0[,}]' "$T/memj"; then
  ok "info --json --mem: keqv layers 2048 (2 KV heads x 16) / 16384 (1 x 32), kv 26624, no PLE table"
else nok "info --json --mem keqv: $(grep -o '"memory".*' "$T/memj" | head -c 400)"; fi
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
