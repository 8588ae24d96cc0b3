#!/bin/sh
# test_error_text.sh -- error messages say each thing once: no "session: session:" / "context full: context
# full:" where a caller adds a prefix on top of pb_last_error() that already carries it. A source scan finds
# the class (a caller's "X: %s" + pb_last_error() where library messages start with "X: "), and real error
# paths are run and their output checked for any doubled "word: word:" prefix.
BIN=${PB_BIN:-build/pocketbrain}
M=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }

# ---- source scan ----
# prefixes that library/service messages begin with: pb_error(PB_X, "session: ...") -> "session"
grep -rhoE 'pb_error(_prefix)?\([A-Za-z_]+, "[A-Za-z][A-Za-z ]*: ' src tools | sed -E 's/.*"//; s/: $//' |
  sort -u >"$T/prefixes"
# what callers put in front of the library's text: "...X: %s" within 2 lines before pb_last_error()
grep -rn -B2 'pb_last_error()' tools src --include=*.c | grep -oE '"[^"]*: %s' | sed -E 's/^"//; s/: %s$//; s/.*[[(]//' |
  sort -u >"$T/callers"
dup=$(grep -Fxf "$T/prefixes" "$T/callers" | tr '\n' ' ')
n_pre=$(wc -l <"$T/prefixes")
if [ "$n_pre" -gt 20 ] && [ -z "$dup" ]; then
  ok "no caller prefixes pb_last_error() with a prefix the library already writes ($n_pre library prefixes)"
else
  nok "callers add a prefix the library message already has: $dup (library prefixes: $n_pre)"
fi

# ---- real error paths ----
if [ ! -f "$M" ]; then
  if [ "$CI" = true ]; then nok "no model fixture $M"; exit 1; fi
  echo "ok - skipped the runtime checks: no model fixture"; exit 0
fi
doubled() { grep -E '(^|[ [(])([A-Za-z][a-z ]*[a-z]): \2:' "$1"; }
long=$(i=0; while [ $i -lt 60 ]; do printf 'word%d ' $i; i=$((i + 1)); done)
"$BIN" run -m "$M" -t 1 -c 16 -p "$long" -n 4 >"$T/o1" 2>&1; rc1=$?
printf '%s\n' "$long" | "$BIN" chat -m "$M" -t 1 -c 16 -n 4 >"$T/o2" 2>&1
printf 'not a session' >"$T/bad.pbs"
"$BIN" chat -m "$M" -t 1 --session "$T/bad.pbs" </dev/null >"$T/o3" 2>&1
"$BIN" info "$M" --mem -c 1000000 >"$T/o4" 2>&1
"$BIN" bench -m "$M" -t 1 -d 60000 -p 1 -n 1 -r 1 >"$T/o6" 2>&1 # was "cannot create session: session: n_ctx ..."
grep -q "training context" "$T/o6" || echo "bench: no error about the context" >>"$T/o4"
cat "$T/o1" "$T/o2" "$T/o3" "$T/o4" "$T/o6" >"$T/all"
if [ $rc1 = 1 ] && grep -q "context full" "$T/o1" && grep -q "context full" "$T/o2" && [ -s "$T/o3" ] &&
  grep -q "training context" "$T/o4" && [ -z "$(doubled "$T/all")" ]; then
  ok "context full (run, chat), a bad session file, a refused n_ctx (info, bench): no doubled prefix"
else
  nok "doubled prefix or missing error: $(doubled "$T/all") | $(cat "$T/all")"
fi
# a file that is not a model, through every command that opens one: the file's name at most once in a row
# ("pocketbrain perplexity: junk.gguf: junk.gguf: gguf: bad magic" before cli_fail checked the library's prefix)
head -c 5000 /dev/urandom >"$T/junk.gguf"
printf 'some text\n' >"$T/text.txt"
: >"$T/o5"
for c in "run -m $T/junk.gguf -p hi" "chat -m $T/junk.gguf" "info $T/junk.gguf" "perplexity -m $T/junk.gguf -f $T/text.txt" \
  "serve -m $T/junk.gguf --port 0" "bench -m $T/junk.gguf" "quantize $T/junk.gguf $T/q.gguf q8_0" \
  "tokenize --vocab $T/junk.gguf hi" "detokenize --vocab $T/junk.gguf 1"; do
  timeout 60 "$BIN" $c </dev/null >/dev/null 2>>"$T/o5"
done
twice=$(grep -E '(^|[ ])([^ :]+): \2:' "$T/o5")
if [ "$(grep -c "bad magic" "$T/o5")" -ge 9 ] && [ -z "$twice" ]; then
  ok "a file that is not a model, 9 commands: named once each"
else nok "doubled file name or missing error: $twice | $(cat "$T/o5")"; fi
# the context-full line says what to do once
for f in o1 o2; do
  l=$(grep "context full" "$T/$f" | head -1)
  n_full=$(echo "$l" | grep -o "context full" | wc -l)
  n_c=$(echo "$l" | grep -o "larger -c\|raise -c" | wc -l) # chat: a longer turn than the context, no --context-shift
  if [ "$n_full" = 1 ] && [ "$n_c" = 1 ]; then ok "$f: context full said once, with one remedy: $l"; else
    nok "$f: context full line repeats itself: $l"; fi
done
exit 0
