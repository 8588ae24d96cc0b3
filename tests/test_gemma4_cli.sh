#!/bin/sh
# test_gemma4_cli.sh -- a tiny Gemma 4 model end to end through the CLI: convert the HF folder, run, chat (system
# turn, two turns, --think), info --mem (KV per layer, PLE table), quantize, serve (chat completion, thinking), ask,
# bench -- the Gemma 4 turn format and its stop tokens.
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
# --think: a chat that drops its thoughts keeps rows beyond the window in its sliding layers (up to 2,048 more, within
# n_ctx): -c 64 gives them 64 cells, 2 x 64 x 16 x 2 = 4096 bytes; total 4 x 4096 + 8192 = 24576. On Gemma 2 (no
# thinking) --think changes nothing.
"$BIN" info --mem -c 64 --kv-type f16 --think "$M" >"$T/mem" 2>&1
L3=$(lay 3); L4=$(lay 4)
tot=$(awk '/^KV by layer:/ {on=1} on && $1 == "total" {print $2}' "$T/mem")
G2=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
"$BIN" info --mem -c 4096 "$G2" 2>/dev/null | grep '^memory:' >"$T/g2a"
"$BIN" info --mem -c 4096 --think "$G2" 2>/dev/null | grep '^memory:' >"$T/g2b"
if echo "$L3" | grep -Eq '^ +3 +sliding +16 +1 +64 +4096$' && echo "$L4" | grep -Eq '^ +4 +full +32 +1 +64 +8192$' &&
  [ "$tot" = 24576 ] && [ -s "$T/g2a" ] && cmp -s "$T/g2a" "$T/g2b"; then
  ok "info --mem --think: sliding layers keep 64 cells (4096 bytes), total 24576; Gemma 2 unchanged"
else nok "info --mem --think: [$L3] [$L4] total [$tot]; gemma 2: $(cat "$T/g2a") / $(cat "$T/g2b")"; fi
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
: >"$T/sout" # empty before the launch (tests/test_server_start.sh)
"$BIN" serve -m "$M" --port 0 >"$T/sout" 2>"$T/serr" &
PID=$!
for i in $(seq 1 300); do grep -q listening "$T/sout" && break; kill -0 $PID 2>/dev/null || break; sleep 0.1; done
PORT=$(sed -n 's/^listening //p' "$T/sout")
if [ -n "$PORT" ] && curl -s -o "$T/body" -H "Content-Type: application/json" \
  -d '{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi <|turn>model"}],"max_tokens":4,"seed":1}' \
  "http://127.0.0.1:$PORT/v1/chat/completions" && grep -q '"choices"' "$T/body"; then
  ok "serve: chat completion on gemma4"
else nok "serve: $(head -c 300 "$T/body" 2>/dev/null) $(tail -2 "$T/serr")"; fi
# thinking (--think): the prompt gains the system turn <|turn>system\n<|think|><turn|>\n (6 ids: 16 instead of 10 for
# "hi": <bos> <|turn> user \n hi <turn|> \n <|turn> model \n); a Gemma 1-3 model refuses it with a message.
"$BIN" run -m "$M" -p hi -n 2 --seed 1 -v >/dev/null 2>"$T/t0"
"$BIN" run -m "$M" -p hi -n 2 --seed 1 -v --think >/dev/null 2>"$T/t1"
if grep -q "prompt 10 tok" "$T/t0" && grep -q "prompt 16 tok" "$T/t1"; then ok "run --think: 6 more prompt ids (the <|think|> system turn)"
else nok "run --think: $(tail -1 "$T/t0") / $(tail -1 "$T/t1")"; fi
printf 'hello\nagain\n' | "$BIN" chat -m "$M" -n 3 --seed 1 --think --system "be brief" >"$T/tc" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c "answer [0-9]* tok" "$T/tc")" -eq 2 ]; then ok "chat --think: two turns"; else nok "chat --think rc $rc: $(tail -2 "$T/tc")"; fi
if "$BIN" convert tests/data/model/gemma3 "$T/g3.gguf" --type f32 >/dev/null 2>&1 &&
  ! "$BIN" run -m "$T/g3.gguf" -p hi -n 1 --think >/dev/null 2>"$T/g3err" && grep -q "thinking needs a Gemma 4" "$T/g3err"; then
  ok "run --think on a Gemma 3 model: refused with a message"
else nok "run --think on gemma3: $(cat "$T/g3err" 2>/dev/null)"; fi
if [ -n "$PORT" ]; then
  curl -s -o "$T/tb" -H "Content-Type: application/json" \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"seed":1,"think":true}' \
    "http://127.0.0.1:$PORT/v1/chat/completions"
  curl -s -o "$T/tb2" -H "Content-Type: application/json" \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"seed":1,"chat_template_kwargs":{"enable_thinking":true}}' \
    "http://127.0.0.1:$PORT/v1/chat/completions"
  curl -s -o "$T/tb3" -H "Content-Type: application/json" \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"seed":1,"think":"yes"}' \
    "http://127.0.0.1:$PORT/v1/chat/completions"
  if tr -d ' \n' <"$T/tb" | grep -q '"reasoning_content":' && tr -d ' \n' <"$T/tb" | grep -q '"prompt_tokens":16' &&
    tr -d ' \n' <"$T/tb2" | grep -q '"prompt_tokens":16' && grep -q "must be a boolean" "$T/tb3"; then
    ok "serve: \"think\": true / chat_template_kwargs.enable_thinking -> 16 prompt tokens, message.reasoning_content"
  else nok "serve think: $(head -c 300 "$T/tb") | $(head -c 200 "$T/tb3")"; fi
else nok "serve think: no server"; fi
# ask (knowledge hub) on Gemma 4: ingest two notes, answer grounded in them with the <|turn> format
mkdir -p "$T/docs"
printf 'Parking is free next to the pipe after six.\nThe office opens at nine.\n' >"$T/docs/a.txt"
printf 'The cafe sells tea and cake. Tea costs two euros.\n' >"$T/docs/b.md"
if "$BIN" ingest --db "$T/kb.sqlite" "$T/docs" >/dev/null 2>&1 &&
  "$BIN" ask --db "$T/kb.sqlite" -m "$M" --max-tokens 16 --seed 1 --fallback-after 0 --json "is parking free?" >"$T/ask" 2>"$T/ask.err" &&
  tr -d ' \n' <"$T/ask" | grep -q '"fallback":false' && tr -d ' \n' <"$T/ask" | grep -q '"generated_tokens":16' &&
  tr -d ' \n' <"$T/ask" | grep -q '"path":"[^"]*a.txt"'; then
  ok "ask: a grounded answer from the model (16 tokens, citation of a.txt, no fallback)"
else nok "ask: $(head -c 300 "$T/ask") $(tail -2 "$T/ask.err")"; fi
# bench: prefill and decode run; its KV bytes by hand at the default n_ctx 256, F16: sliding layers 0-3 hold the
# window (2 x 8 x 16 x 2 = 512 each), full layer 4 the context (2 x 256 x 32 x 2 = 32768), shared layers 0 -> 34816
"$BIN" bench -m "$M" -p 16 -n 8 -r 1 -t 1 --json >"$T/bench" 2>"$T/bench.err"
rc=$?
tr -d ' \t\n' <"$T/bench" >"$T/benchf"
if [ $rc -eq 0 ] && grep -q '"model_type":"gemma4F32"' "$T/benchf" && grep -q '"pp16":{"median":[1-9]' "$T/benchf" &&
  grep -q '"tg8":{"median":[1-9]' "$T/benchf" && grep -q '"kv_bytes":34816,"n_ctx":256' "$T/benchf"; then
  ok "bench: pp16 and tg8 on gemma4, KV 34816 bytes at n_ctx 256"
else nok "bench rc $rc: $(head -c 400 "$T/benchf") $(tail -2 "$T/bench.err")"; fi
# --special with the llama.cpp-converted vocabulary (its types: <bos>/<eos> CONTROL, <|channel>/<channel|>
# USER_DEFINED, <|turn>/<turn|>/<|think|> NORMAL): control tokens print only with --special, and are parsed from
# text only with --special; USER_DEFINED pieces always match (llama.cpp's rule).
V=tests/data/model/gemma4_e2b/llama.f32.gguf
s1=$("$BIN" detokenize --special --vocab "$V" 2 105 1581 107 98 106 107 100 101 1)
s0=$("$BIN" detokenize --vocab "$V" 2 105 1581 107 98 106 107 100 101 1)
w1=$(printf '<bos><|turn>system\n<|think|><turn|>\n<|channel><channel|><eos>')
w0=$(printf '<|turn>system\n<|think|><turn|>\n<|channel><channel|>')
if [ "$s1" = "$w1" ] && [ "$s0" = "$w0" ]; then ok "detokenize --special prints <bos>/<eos>; without it they print nothing"
else nok "detokenize --special: [$s1] / [$s0]"; fi
i1=$("$BIN" tokenize --ids --special --vocab "$V" "<bos><|channel>x<channel|><eos>")
i0=$("$BIN" tokenize --ids --vocab "$V" "<bos><|channel>x<channel|><eos>")
if [ "$i1" = "[2, 2, 100, 449, 101, 1]" ] && [ "$i0" = "[2, 1191, 394, 100, 449, 101, 2012, 394]" ]; then
  ok "tokenize --special parses <bos>/<eos> (2, 1); without it they stay text, <|channel> (user-defined) 100 either way"
else nok "tokenize --special: $i1 / $i0"; fi
# the thought channel end to end: a scripted model (test_gemma4_ref --write-bigram: greedy decoding writes
# <|channel>thought\nxy<channel|>AB<turn|>) -- run prints only the answer, --show-thinking the thought on stderr, the
# server splits them into content and reasoning_content (whole and streamed)
# serve_bg MODEL [ARGS...]: `serve` in the background on a free port; BPID its pid, BPORT its port ("" if it exited)
serve_bg() {
  m=$1; shift
  : >"$T/bsout" # empty before the launch (tests/test_server_start.sh)
  "$BIN" serve -m "$m" --port 0 "$@" >"$T/bsout" 2>"$T/bserr" &
  BPID=$!
  for i in $(seq 1 300); do grep -q listening "$T/bsout" && break; kill -0 $BPID 2>/dev/null || break; sleep 0.1; done
  BPORT=$(sed -n 's/^listening //p' "$T/bsout")
}
BG=$T/bigram.gguf
if "${PB_BUILD:-build}/tests/test_gemma4_ref" --write-bigram "$BG"; then
  a0=$("$BIN" run -m "$BG" -p hi --temp 0 --think 2>"$T/bg0")
  a1=$("$BIN" run -m "$BG" -p hi --temp 0 --think --show-thinking 2>"$T/bg1")
  if [ "$a0" = AB ] && [ "$a1" = AB ] && [ ! -s "$T/bg0" ] && [ "$(cat "$T/bg1")" = xy ]; then
    ok "run --think: the answer alone on stdout; --show-thinking puts the thought on stderr"
  else nok "run thought channel: [$a0] [$a1] stderr [$(cat "$T/bg0")] [$(cat "$T/bg1")]"; fi
  if "$BIN" run -m "$BG" -p hi --temp 0 --think --json | tr -d ' \t\n' | grep -q '"text":"AB","thinking":"xy"'; then
    ok "run --think --json: text AB, thinking xy"
  else nok "run --think --json: $("$BIN" run -m "$BG" -p hi --temp 0 --think --json 2>&1 | head -c 200)"; fi
  # chat: the first turn's thought leaves the context when the second turn starts (its answer's 2 ids re-fed, the
  # context 5 ids shorter: <|channel> thought\n x y <channel|>); --keep-thinking keeps it
  printf 'hi\nhi\n/stats\n' | "$BIN" chat -m "$BG" --temp 0 --think >"$T/bc0" 2>&1
  printf 'hi\nhi\n/stats\n' | "$BIN" chat -m "$BG" --temp 0 --think --keep-thinking >"$T/bc1" 2>&1
  c0=$(sed -n 's/^context: *\([0-9]*\) .*/\1/p' "$T/bc0"); c1=$(sed -n 's/^context: *\([0-9]*\) .*/\1/p' "$T/bc1")
  if [ -n "$c0" ] && [ -n "$c1" ] && [ $((c1 - c0)) -eq 5 ] && grep -q ' 2 re-prefilled' "$T/bc0" &&
    grep -q ' 0 re-prefilled' "$T/bc1" && [ "$(grep -c AB "$T/bc0")" -ge 2 ]; then
    ok "chat --think: the thought leaves the context at the next turn ($c0 tokens; --keep-thinking: $c1)"
  else nok "chat thought dropping: [$c0] [$c1] $(grep -h 'context\|totals' "$T/bc0" "$T/bc1" | tr '\n' ' ')"; fi
  serve_bg "$BG"
  curl -s -o "$T/bb" -H "Content-Type: application/json" \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":20,"temperature":0,"think":true}' \
    "http://127.0.0.1:$BPORT/v1/chat/completions"
  curl -s -N -o "$T/bbs" -H "Content-Type: application/json" \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":20,"temperature":0,"think":true,"stream":true}' \
    "http://127.0.0.1:$BPORT/v1/chat/completions"
  kill $BPID 2>/dev/null; wait $BPID 2>/dev/null
  if tr -d ' \n' <"$T/bb" | grep -q '"content":"AB","reasoning_content":"xy"' &&
    grep -q '"reasoning_content":[[:space:]]*"x' "$T/bbs" && ! grep '"content"' "$T/bbs" | grep -q '"content":[[:space:]]*"[xy]'; then
    ok "serve: message.content AB, message.reasoning_content xy; the stream sends the thought as delta.reasoning_content"
  else nok "serve thought channel: $(head -c 300 "$T/bb") | $(head -c 300 "$T/bbs")"; fi
else nok "test_gemma4_ref --write-bigram failed"; fi
# The server's slots on a model that can think keep ring rows beyond the window (pb_server_slot_params): a
# conversation sent back without its thought, as OpenAI clients send it, cuts the thought and answer out of the
# slot's context; past the window (4 on this model, whose first turn is 25 ids) that re-read the whole prefix before,
# counted as reused. Now the prefix is reused, and /metrics tells re-read tokens apart.
BS=$T/bigram_swa.gguf
if "${PB_BUILD:-build}/tests/test_gemma4_ref" --write-bigram-swa "$BS"; then
  serve_bg "$BS" --parallel 1
  curl -s -o "$T/bw1" -H "Content-Type: application/json" \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":20,"temperature":0,"think":true}' \
    "http://127.0.0.1:$BPORT/v1/chat/completions"
  curl -s -o "$T/bw2" -H "Content-Type: application/json" \
    -d '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"AB"},{"role":"user","content":"hi"}],"max_tokens":20,"temperature":0,"think":true}' \
    "http://127.0.0.1:$BPORT/v1/chat/completions"
  curl -s -o "$T/bwm" "http://127.0.0.1:$BPORT/metrics"
  kill $BPID 2>/dev/null; wait $BPID 2>/dev/null
  rr=$(sed -n 's/^pocketbrain_prompt_tokens_reread_total //p' "$T/bwm")
  ru=$(sed -n 's/^pocketbrain_prompt_tokens_reused_total //p' "$T/bwm")
  if tr -d ' \n' <"$T/bw2" | grep -q '"content":"AB","reasoning_content":"xy"' && [ "$rr" = 0 ] && [ -n "$ru" ] &&
    [ "$ru" -ge 20 ]; then
    ok "serve: a thinking conversation past the window re-sent without its thought: prefix reused ($ru), 0 re-read"
  else nok "serve thought cut past the window: reread [$rr] reused [$ru] $(head -c 200 "$T/bw2")"; fi
else nok "test_gemma4_ref --write-bigram-swa failed"; fi

# config.json counts that are not whole numbers in range are refused naming the key (were truncated: 8.5 -> 8,
# per_layer_config "4x" read as layer 4, its head_dim 32.5 as 32, and the conversion succeeded)
B=$T/badcfg
mkdir -p "$B"
for f in tests/data/model/gemma4_e2b/*; do ln -s "$(pwd)/$f" "$B/$(basename "$f")"; done
bad_cfg() { # sed expression, expected message, label
  rm -f "$B/config.json" "$T/bad.gguf"
  sed "$1" tests/data/model/gemma4_e2b/config.json >"$B/config.json"
  "$BIN" convert "$B" "$T/bad.gguf" --type f32 >"$T/badc" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && grep -qF "$2" "$T/badc" && [ ! -e "$T/bad.gguf" ]; then ok "convert refuses $3"
  else nok "convert with $3: rc $rc, $(tail -1 "$T/badc")"; fi
}
bad_cfg 's/"sliding_window": 8,/"sliding_window": 8.5,/' "'sliding_window' must be an integer" "sliding_window 8.5"
bad_cfg 's/"sliding_window": 8,/"sliding_window": "8",/' "'sliding_window' must be a number" "sliding_window \"8\""
bad_cfg 's/"num_kv_shared_layers": 5,/"num_kv_shared_layers": 4.5,/' "'num_kv_shared_layers' must be an integer" \
  "num_kv_shared_layers 4.5"
bad_cfg 's/"hidden_size_per_layer_input": 8,/"hidden_size_per_layer_input": 1e12,/' \
  "'hidden_size_per_layer_input' must be a" "hidden_size_per_layer_input 1e12"
bad_cfg 's/"4": {/"4x": {/' "per_layer_config key '4x' is not a layer index" "per_layer_config key \"4x\""
bad_cfg 's/"9": {/"-9": {/' "per_layer_config key '-9' is not a layer index" "per_layer_config key \"-9\""
bad_cfg '0,/"head_dim": 32/s//"head_dim": 32.5/' "'per_layer_config.4.head_dim' must be an integer" \
  "per_layer_config head_dim 32.5"
# an added_tokens id of 1.5 in tokenizer.json is refused (was: read as token 1, converted)
rm -f "$B/config.json" "$B/tokenizer.json" "$T/bad.gguf"
ln -s "$(pwd)/tests/data/model/gemma4_e2b/config.json" "$B/config.json"
sed '0,/"id": 1,/s//"id": 1.5,/' tests/data/model/gemma4_e2b/tokenizer.json >"$B/tokenizer.json"
"$BIN" convert "$B" "$T/bad.gguf" --type f32 >"$T/badc" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -qF "an added_tokens entry has no valid id/content" "$T/badc" && [ ! -e "$T/bad.gguf" ]; then
  ok "convert refuses an added_tokens id of 1.5"
else nok "convert with an added_tokens id of 1.5: rc $rc, $(tail -1 "$T/badc")"; fi
