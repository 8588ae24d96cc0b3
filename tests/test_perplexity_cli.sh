#!/bin/sh
# test_perplexity_cli.sh -- `pocketbrain perplexity`: saved-logits KL round trip, --kl-model, and bad-input errors.
BIN=${PB_BIN:-build/pocketbrain}
MODEL=models/default.gguf
TEXT=tests/data/train/heldout.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; fails=$((fails + 1)); }
num() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p" "$2"; }

# The same model as its own reference: KL 0 and full top-1 agreement, via a saved logits file and via --kl-model.
if "$BIN" perplexity -m "$MODEL" -f "$TEXT" --ctx 64 --chunks 2 --save-logits "$TMP/base.f32" --json >"$TMP/a.json" &&
  "$BIN" perplexity -m "$MODEL" -f "$TEXT" --ctx 64 --chunks 2 --kl-base "$TMP/base.f32" --json >"$TMP/b.json" &&
  "$BIN" perplexity -m "$MODEL" -f "$TEXT" --ctx 64 --chunks 2 --batch 16 --kl-model "$MODEL" --json >"$TMP/c.json"; then
  size=$(wc -c <"$TMP/base.f32")
  want=$((2 * 32 * 8192 * 4))
  [ "$size" = "$want" ] && ok "--save-logits wrote $size bytes (2 chunks x 32 scored x 8192)" || nok "--save-logits size $size, want $want"
  pa=$(num ppl "$TMP/a.json"); pc=$(num ppl "$TMP/c.json")
  if awk -v a="$pa" -v c="$pc" 'BEGIN { d = a - c; exit !(a > 1 && d < 1e-3 * a && d > -1e-3 * a) }'; then
    ok "perplexity $pa with batch 64 equals $pc with batch 16"
  else
    nok "perplexity differs by batch: $pa vs $pc"
  fi
  for f in b c; do
    kl=$(num kl_mean "$TMP/$f.json"); t1=$(num top1_agree "$TMP/$f.json")
    if awk -v k="$kl" -v t="$t1" 'BEGIN { exit !(k != "" && k < 1e-6 && t == 1) }'; then
      ok "self-KL ($f): mean $kl, top-1 agreement $t1"
    else
      nok "self-KL ($f): mean '$kl', top-1 '$t1'"
    fi
  done
else
  nok "perplexity runs failed"
fi

# Bad input: clear message, non-zero status, no output file left behind.
"$BIN" perplexity -m "$MODEL" -f "$TMP/missing.txt" >/dev/null 2>"$TMP/e1" && nok "missing text accepted" ||
  ok "missing text: $(head -1 "$TMP/e1")"
printf 'short' >"$TMP/short.txt"
"$BIN" perplexity -m "$MODEL" -f "$TMP/short.txt" --save-logits "$TMP/out.f32" >/dev/null 2>"$TMP/e2" &&
  nok "text shorter than a chunk accepted" || {
  grep -q "fewer than one chunk" "$TMP/e2" && [ ! -e "$TMP/out.f32" ] &&
    ok "short text: $(head -1 "$TMP/e2"), no file left" || nok "short text: $(cat "$TMP/e2")"
}
head -c 100 "$TMP/base.f32" >"$TMP/trunc.f32"
"$BIN" perplexity -m "$MODEL" -f "$TEXT" --ctx 64 --chunks 2 --kl-base "$TMP/trunc.f32" >/dev/null 2>"$TMP/e3" &&
  nok "truncated --kl-base accepted" || ok "truncated --kl-base: $(head -1 "$TMP/e3")"
# --kl-base that is a directory or a FIFO: refused at once (a FIFO blocked for ever; a directory "had" 2^63 bytes and
# failed with "short read" after the first chunk)
mkdir -p "$TMP/kldir"; mkfifo "$TMP/kl.fifo"
for k in kldir kl.fifo; do
  timeout 20 "$BIN" perplexity -m "$MODEL" -f "$TEXT" --ctx 64 --chunks 2 --kl-base "$TMP/$k" >/dev/null 2>"$TMP/e5"; rc=$?
  [ $rc = 1 ] && grep -q -- "--kl-base $TMP/$k: not a regular file" "$TMP/e5" && ok "--kl-base $k: refused at once" ||
    nok "--kl-base $k: status $rc, $(cat "$TMP/e5")"
done
"$BIN" perplexity -m "$MODEL" -f "$TEXT" --ctx 63 >/dev/null 2>"$TMP/e4"
[ $? = 2 ] && ok "odd --ctx is a usage error" || nok "odd --ctx: $(cat "$TMP/e4")"
[ "$fails" = 0 ]
