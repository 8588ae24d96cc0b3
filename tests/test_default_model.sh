#!/bin/sh
# test_default_model.sh -- acceptance checks of the embedded default model (models/default.gguf): held-out
# perplexity against the stored transformers number, on-topic answers to held-out questions, multi-turn chat.
BIN=${PB_BIN:-build/pocketbrain}
MODEL=models/default.gguf
DATA=tests/data/train
CHUNKS=${PB_PPL_CHUNKS:-6}   # chunks of 256 tokens scored (the whole file has 136; kept short for make test)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; fails=$((fails + 1)); }

if [ ! -f "$MODEL" ]; then
  nok "$MODEL is missing"
  exit 1
fi
size=$(wc -c <"$MODEL")
if [ "$size" -le 20971520 ]; then ok "model size $size bytes <= 20 MiB"; else nok "model size $size bytes > 20 MiB"; fi

# 1. Perplexity on the first $CHUNKS chunks vs transformers' float32 number for the same chunks (stored by
#    tools/train/train.py in transformers_ppl.json: per-chunk NLL sums). A quantized model may be at most 5% worse.
if "$BIN" perplexity -m "$MODEL" -f "$DATA/heldout.txt" --ctx 256 --chunks "$CHUNKS" --json >"$TMP/ppl.json" 2>"$TMP/ppl.err"; then
  ours=$(sed -n 's/.*"ppl": \([0-9.]*\).*/\1/p' "$TMP/ppl.json")
  ref=$(tr -d '\n ' <"$DATA/transformers_ppl.json" | awk -v n="$CHUNKS" '{
      match($0, /"per_chunk_nll_sum":\[[^]]*\]/); s = substr($0, RSTART + 21, RLENGTH - 22);
      k = split(s, a, ","); match($0, /"per_chunk_count":[0-9]+/); c = substr($0, RSTART + 18, RLENGTH - 18);
      t = 0; for (i = 1; i <= n && i <= k; i++) t += a[i]; printf "%.6f", exp(t / (n * c)) }')
  if [ -n "$ours" ] && [ -n "$ref" ] && awk -v a="$ours" -v b="$ref" 'BEGIN { d = (a - b) / b; exit !(d < 0.05 && d > -0.05) }'; then
    ok "held-out perplexity $ours vs transformers float32 $ref ($CHUNKS chunks of 256): within 5%"
  else
    nok "held-out perplexity '$ours' vs transformers float32 '$ref' ($CHUNKS chunks): not within 5%"
  fi
else
  nok "pocketbrain perplexity failed: $(cat "$TMP/ppl.err")"
fi

# 2. Held-out words (never asked about in training): the greedy answer must define the asked word in the
#    trained answer form ("'WORD' is a <part of speech> meaning ...").
on_topic=0
while IFS= read -r q; do
  [ -n "$q" ] || continue
  w=$(printf '%s' "$q" | sed "s/^What does '\(.*\)' mean?$/\1/")
  a=$("$BIN" run -m "$MODEL" --temp 0 -n 32 -p "$q" 2>/dev/null)
  if printf '%s' "$a" | grep -q "^'$w' is an\{0,1\} \(noun\|verb\|adjective\|adverb\) meaning ."; then
    on_topic=$((on_topic + 1))
  else
    echo "# off-topic: $q -> $a"
  fi
done <"$DATA/questions.txt"
if [ "$on_topic" -ge 9 ]; then ok "held-out questions answered on topic: $on_topic/10"; else nok "held-out questions on topic: $on_topic/10 (want >= 9)"; fi

# 3. A training word gets its trained definition (the demo question of `make run`).
a=$("$BIN" run -m "$MODEL" --temp 0 -n 60 -p "What does 'harbor' mean?" 2>/dev/null)
case "$a" in
  *"'harbor' is a noun meaning"*port*) ok "harbor: $a" ;;
  *) nok "harbor answer: '$a'" ;;
esac

# 4. Multi-turn: a follow-up "Use it in a sentence." must use the word from the first turn.
printf "What does 'harbor' mean?\nUse it in a sentence.\n" |
  "$BIN" chat -m "$MODEL" --temp 0 -n 60 --no-stats >"$TMP/chat.txt" 2>"$TMP/chat.err"
first=$(sed -n 1p "$TMP/chat.txt")
second=$(sed -n 2p "$TMP/chat.txt")
if printf '%s' "$first" | grep -q "^'harbor' is a noun" && printf '%s' "$second" | grep -qi "harbo"; then
  ok "multi-turn follow-up uses the word: $(tr '\n' ' ' <"$TMP/chat.txt" | cut -c1-300)"
else
  nok "multi-turn: $(cat "$TMP/chat.txt" "$TMP/chat.err" | tr '\n' ' ' | cut -c1-400)"
fi
[ "$fails" = 0 ]
