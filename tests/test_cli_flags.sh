#!/bin/sh
# test_cli_flags.sh -- CLI input rules: `pocketbrain help CMD`; --seed and every other numeric flag refuse
# negatives, overflow and garbage (exit 2 naming the flag, then the command's usage line, in every command); every
# long flag takes --flag=V as --flag V, a switch refuses =V, a short flag refuses -n5 / -n=5 naming it; lists (bench -t,
# --parallel) are plain digits without empty items; prompts that are not UTF-8 (-p, -f, stdin, --system, --stop) are
# refused naming the byte; `info --mem -c N` and `run -c N` accept the same N; a value flag
# without its value and empty values that change meaning are refused; stdout that cannot be written (full disk,
# closed) ends in exit 1 naming it; a closed stdout or stderr is not reused for a file.
BIN=${PB_BIN:-build/pocketbrain}
M=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
[ -f "$M" ] || M=models/default.gguf
if [ ! -f "$M" ]; then
  if [ "$CI" = true ]; then echo "not ok - no model ($M)"; exit 1; fi
  echo "ok - skipped: no model"; exit 0
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
R="$BIN run -m $M -t 1"

# ---- help CMD ----
"$BIN" help run >"$T/h1" 2>&1; rc1=$?
"$BIN" run --help >"$T/h2" 2>&1
"$BIN" help nosuchcmd >"$T/h3" 2>&1; rc3=$?
if [ $rc1 = 0 ] && cmp -s "$T/h1" "$T/h2" && grep -q -- "--prompt" "$T/h1" && [ $rc3 = 2 ] && grep -q "nosuchcmd" "$T/h3"; then
  ok "help run = run --help; help of an unknown command exits 2"
else nok "help CMD: rc $rc1/$rc3: $(head -3 "$T/h1") / $(cat "$T/h3")"; fi
n_help=0; n_cmd=0
for c in $("$BIN" --help | sed -n 's/^  \([a-z]*\) .*/\1/p'); do
  n_cmd=$((n_cmd + 1))
  "$BIN" help "$c" >"$T/hc" 2>&1 && grep -q "pocketbrain $c" "$T/hc" && n_help=$((n_help + 1))
done
if [ $n_cmd -ge 10 ] && [ $n_help = $n_cmd ]; then ok "help CMD shows the help of all $n_cmd commands"; else
  nok "help CMD: $n_help of $n_cmd commands"; fi

# ---- numeric flags: negative, overflow, garbage, blanks ----
# flag value: each must exit 2 with a message naming the flag, without loading anything
bad_count=0; bad_list=""
said_twice=0; twice_list=""
try_bad() { # cmd... (the last argument is the value)
  timeout 20 "$@" >"$T/o" 2>"$T/e" </dev/null; rc=$?
  if [ $rc != 2 ]; then bad_count=$((bad_count + 1)); bad_list="$bad_list [$* -> rc $rc]"; fi
  # said once: one "pocketbrain CMD:" line, at most one usage line (was: "--top-p expects ..." + "bad value for --top-p")
  if [ "$(grep -c '^pocketbrain ' "$T/e")" != 1 ] || [ "$(grep -c '^usage:' "$T/e")" -gt 1 ]; then
    said_twice=$((said_twice + 1)); [ $said_twice -le 3 ] && twice_list="$twice_list [$*: $(tr '\n' '|' <"$T/e")]"
  fi
}
for v in -1 18446744073709551616 99999999999999999999999 abc 12abc "" " 5" "+5" 1.5 0x10; do
  try_bad $R -p hi --seed "$v"
done
for v in -1 99999999999999999999 abc 3.5 " 4" "" nan; do
  try_bad $R -p hi -n "$v"
  try_bad $R -p hi -c "$v"
  try_bad $R -p hi --top-k "$v"
  try_bad $BIN bench -m "$M" -p "$v"
  try_bad $BIN bench -m "$M" --ttft-prompt "$v"
  try_bad $BIN bench -m "$M" -b "$v"
  try_bad $BIN perplexity -m "$M" -f /dev/null --ctx "$v"
  try_bad $BIN logits -m "$M" --batch "$v"
  try_bad $BIN serve -m "$M" --port "$v"
  try_bad $BIN search --db "$T/kb.db" -k "$v" word
done
for v in nan inf -inf abc " 0.5" "" 1e999 0.5x 0x10 0x1p-1; do # hexadecimal: strtod read 0x10 as 16
  try_bad $R -p hi --temp "$v"
  try_bad $R -p hi --top-p "$v"
  try_bad $R -p hi --mem-limit "$v"
done
try_bad $R -p hi --mem-limit K
try_bad $R -p hi --top-p
try_bad $R -p hi --thermal ""
try_bad $BIN info "$M" --mem -c 5
try_bad $BIN info "$M" --mem --mem-limit 0 # was: 0 taken as "detect", the explicit limit ignored (run refuses it)
for f in "-c 64" "--ctx=64" "--kv-type q8_0" "--mem-limit 1G" "--think"; do # without --mem: ignored, exit 0
  # shellcheck disable=SC2086
  try_bad $BIN info "$M" $f
done
if [ $bad_count = 0 ]; then ok "bad numeric values of every numeric flag exit 2"; else
  nok "numeric flags accepted bad values ($bad_count):$bad_list"; fi
if [ $said_twice = 0 ]; then ok "each bad value is said once (one message line, one usage line)"; else
  nok "bad values said twice ($said_twice):$twice_list"; fi
# ---- every command, every parse helper: a bad value prints its message, then the command's usage line once ----
# serve, ask, search, convert, logits, perplexity, pull, quantize, synth, bench --parallel -n 0, run's --system /
# --stop and detokenize's ids printed the message alone (exit 2 without the usage line the other commands print)
no_usage=0; no_usage_list=""; n_usage=0
try_usage() { # cmd... : exit 2, one "pocketbrain CMD:" line, exactly one "usage:" line, nothing on stdout
  n_usage=$((n_usage + 1))
  timeout 20 "$@" >"$T/o" 2>"$T/e" </dev/null; rc=$?
  if [ $rc != 2 ] || [ -s "$T/o" ] || [ "$(grep -c '^pocketbrain ' "$T/e")" != 1 ] || [ "$(grep -c '^usage:' "$T/e")" != 1 ]; then
    no_usage=$((no_usage + 1)); [ $no_usage -le 6 ] && no_usage_list="$no_usage_list [$* -> rc $rc: $(head -3 "$T/e" | cut -c1-100 | tr '\n' '|')]"
  fi
}
for f in "--port abc" "--parallel 0" "--queue -1" "-c 1" "--mem-limit x" "-t 0" "--max-body x" "--max-tokens 0" \
  "--fallback-after x" "--max-conn 0" "--max-conn-per-client 0" "--header-timeout 0" "--idle-timeout 0" \
  "--write-timeout 0"; do
  # shellcheck disable=SC2086
  try_usage "$BIN" serve -m "$M" $f
done
for f in "-k 0" "--per-doc -1"; do try_usage "$BIN" search --db "$T/kb.db" $f word; done
for f in "-k 0" "--ctx 1" "--max-tokens 1" "--seed -1" "--fallback-after -1"; do try_usage "$BIN" ask --db "$T/kb.db" $f what; done
for f in "--batch 0" "--threads -1" "--kv-type x"; do try_usage "$BIN" logits -m "$M" $f; done
for f in "--ctx 1" "--batch 0" "--chunks 0" "--threads -1" "--kv-type x"; do try_usage "$BIN" perplexity -m "$M" -f /dev/null $f; done
for f in "--retries x" "--timeout 0"; do try_usage "$BIN" pull $f tiny; done
for f in "--seed -1" "--threads 0"; do try_usage "$BIN" synth --arch gemma2 --size tiny --type f16 -o "$T/s.gguf" $f; done
try_usage "$BIN" synth --arch gemma2 --size nosuch --type f16 -o "$T/s.gguf"
try_usage "$BIN" convert "$T" "$T/c.gguf" --threads 0
try_usage "$BIN" quantize "$M" "$T/q.gguf" Q8_0 --threads 0
for f in "--chunk-tokens 1" "--overlap -1"; do try_usage "$BIN" ingest --db "$T/kb.db" $f "$T"; done
try_usage "$BIN" bench -m "$M" --parallel 2 -n 0
try_usage $R -p hi --system "$(printf 'caf\351')"
try_usage $R -p hi --stop "$(printf '\377')"
try_usage "$BIN" detokenize --vocab "$M" 5 x
try_usage "$BIN" detokenize --vocab "$M" 5,
try_usage $R -p hi -n abc # run, chat, bench and info printed it already: kept so
try_usage "$BIN" chat -m "$M" --temp x
try_usage "$BIN" bench -m "$M" -r 0
try_usage "$BIN" info "$M" --mem -c x
if [ $no_usage = 0 ]; then ok "every command: a bad flag value prints one message and one usage line ($n_usage cases)"; else
  nok "bad values without (or with more than) one usage line ($no_usage of $n_usage):$no_usage_list"; fi

# ---- short flags take their value as the next argument: "-n5" / "-n=5" named as what they are ----
# They were refused, never misread, but as "unknown flag '-n=5'" for a flag the command has.
short_bad=0; short_list=""
try_short() { # flag cmd... : exit 2, nothing on stdout, the message names the short flag and the form
  f=$1; shift
  timeout 20 "$@" >"$T/o" 2>"$T/e" </dev/null; rc=$?
  if [ $rc != 2 ] || [ -s "$T/o" ] || ! grep -q -- "^pocketbrain [a-z]*: $f takes" "$T/e" || [ "$(grep -c '^usage:' "$T/e")" != 1 ]; then
    short_bad=$((short_bad + 1)); [ $short_bad -le 6 ] && short_list="$short_list [$* -> rc $rc: $(head -1 "$T/e")]"
  fi
}
try_short -n $R -p hi -n5
try_short -n $R -p hi -n=5
try_short -m "$BIN" run -m="$M" -p hi
try_short -s $R -p hi -s=7
try_short -p $R -p=hi
try_short -v $R -p hi -v=1
try_short -c "$BIN" chat -m "$M" -c=64
try_short -r "$BIN" bench -m "$M" -r3
try_short -p "$BIN" bench -m "$M" -p=8
try_short -np "$BIN" serve -m "$M" -np=2
try_short -c "$BIN" serve -m "$M" -c64
try_short -q "$BIN" serve -m "$M" -q=1
try_short -k "$BIN" search --db "$T/kb.db" -k=3 word
try_short -k "$BIN" ask --db "$T/kb.db" -k3 what
try_short -c "$BIN" info "$M" --mem -c=64
try_short -m "$BIN" tokenize -m="$M" hi
try_short -m "$BIN" detokenize -m="$M" 5
try_short -q "$BIN" ingest --db "$T/kb.db" -q=1 "$T"
try_short -t "$BIN" quantize "$M" "$T/q.gguf" Q8_0 -t=2
try_short -o "$BIN" synth --arch gemma2 --size tiny --type f16 -o="$T/s.gguf"
try_short -o "$BIN" logits -m "$M" -o="$T/l.f32"
try_short -f "$BIN" perplexity -m "$M" -f=/dev/null
try_short -t "$BIN" convert "$T" "$T/c.gguf" -t=2
try_short -q "$BIN" pull -q=1 tiny
if [ $short_bad = 0 ]; then ok "short flags with an attached value (-n5, -n=5, -m=FILE in 16 commands) are refused naming the flag"; else
  nok "short flags with an attached value ($short_bad):$short_list"; fi
if [ -e "$T/s.gguf" ] || [ -e "$T/c.gguf" ] || [ -e "$T/q.gguf" ] || [ -e "$T/l.f32" ] || [ -e "$T/kb.db" ]; then
  nok "a refused flag still wrote a file: $(ls "$T" | tr '\n' ' ')"
else ok "refused flags wrote nothing (no model, logits or knowledge base)"; fi

$R -p hi --seed 18446744073709551615 -n 2 >/dev/null 2>"$T/e"; rc=$?
if [ $rc = 0 ]; then ok "--seed 2^64-1 is accepted"; else nok "--seed 2^64-1: rc $rc $(cat "$T/e")"; fi
$R -p hi --seed 18446744073709551616 >/dev/null 2>"$T/e"
if grep -q -- "--seed expects an integer in \[0, 18446744073709551615\]" "$T/e"; then ok "--seed overflow names the range"; else
  nok "--seed overflow message: $(cat "$T/e")"; fi

# ---- a value flag given last, without its value: exit 2 naming the flag (convert --threads exited 2 silently) ----
silent=0; silent_list=""
while read -r c flags; do
  for f in $flags; do
    timeout 20 $BIN $c $f </dev/null >"$T/o" 2>"$T/e"; rc=$?
    if [ $rc != 2 ] || ! grep -q -- "$f" "$T/e"; then silent=$((silent + 1)); silent_list="$silent_list [$c $f -> rc $rc: $(head -c 80 "$T/e")]"; fi
  done
done <<EOF
run -m --model -t --threads -c --ctx -b --batch --kv-type --mem-limit --thermal --preset --temp --top-k --top-p --min-p --repeat-penalty --presence-penalty --frequency-penalty --repeat-last-n --seed -n --max-tokens --stop --system -p --prompt -f --file
chat -m -t -c --kv-type --temp --seed -n --stop --system --session
serve -m -c -t --parallel --queue --api-key --max-body --max-tokens --thermal --db --faq --fallback-after --host --port --allow-host --cors --max-conn --max-conn-per-client --header-timeout --idle-timeout --write-timeout
bench -m -t -p -n -d -b -r --kv-type --sample --ttft-prompt --parallel
info -c --kv-type --mem-limit
quantize --threads
convert --type --threads --name
verify --sha256
synth --arch --size --type -o --vocab --seed --threads --name
logits -m --tokens -o --batch --threads --kv-type
perplexity -m -f --ctx --batch --chunks --threads --kv-type --kl-base --kl-model --save-logits
tokenize --vocab
detokenize --vocab
ingest --db --vocab --chunk-tokens --overlap --embed-model
search --db -k --per-doc --embed-model
ask --db -m --faq --preset --embed-model -k --ctx --max-tokens --seed --fallback-after
faq --db
pull --name --sha256 --token --retries --timeout
EOF
if [ $silent = 0 ]; then ok "every value flag without its value exits 2 naming the flag"; else
  nok "flags without a value not named ($silent):$silent_list"; fi

# ---- --flag=VALUE and --flag VALUE alike, for every long flag in every command's help; a switch refuses a value ----
# `--file=X`, `--session=X`, `--sha256=X`, `--vocab=X` and 165 more were "unknown" while run's common flags took
# both forms. A trailing unknown flag stops each command once its flags are read, before any work.
same=0; switch=0; uneven=0; uneven_list=""; notflag=""
for c in $("$BIN" --help | sed -n 's/^  \([a-z]*\) .*/\1/p'); do
  for f in $("$BIN" help "$c" 2>&1 | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
    timeout 20 "$BIN" "$c" "$f" zz --no-such-flag </dev/null >"$T/o1" 2>"$T/e1"; r1=$?
    timeout 20 "$BIN" "$c" "$f=zz" --no-such-flag </dev/null >"$T/o2" 2>"$T/e2"; r2=$?
    if grep -q "unknown [a-z]* '$f'" "$T/e1"; then notflag="$notflag $c:$f"; continue; fi # named, not taken
    if [ $r1 = $r2 ] && cmp -s "$T/o1" "$T/o2" && cmp -s "$T/e1" "$T/e2"; then same=$((same + 1)); continue; fi
    if [ $r2 = 2 ] && grep -q -- "$f takes no value (got '$f=zz')" "$T/e2" && [ "$(grep -c '^pocketbrain ' "$T/e2")" = 1 ]; then
      switch=$((switch + 1)); continue
    fi
    uneven=$((uneven + 1)); [ $uneven -le 5 ] && uneven_list="$uneven_list [$c $f=zz -> rc $r2: $(head -1 "$T/e2")]"
  done
done
if [ $uneven = 0 ] && [ $same -ge 100 ] && [ $switch -ge 40 ] && [ "$notflag" = " detokenize:--ids" ]; then
  ok "every long flag: --flag=V same as --flag V ($same value flags), a switch refuses =V ($switch switches)"
else nok "flag forms: $uneven uneven:$uneven_list; $same value, $switch switches; named but not taken:$notflag"; fi

# ---- lists and ids: plain decimal digits, no sign, blank, empty item (strtol took "+1", " 1", "1," and "1,,2") ----
list_bad=0; list_list=""
for v in +1 " 1" "1 " 1, ,1 1,,2 "1, 2" 0x2 -1 0 99999999999999999999 ""; do
  for f in -t --parallel; do
    timeout 20 "$BIN" bench -m "$M" $f "$v" --no-such-flag </dev/null >"$T/o" 2>"$T/e"; rc=$?
    if [ $rc != 2 ] || ! grep -q -- "$f expects a list" "$T/e"; then list_bad=$((list_bad + 1)); list_list="$list_list [$f '$v' -> rc $rc]"; fi
  done
done
if [ $list_bad = 0 ]; then ok "bench -t / --parallel lists: a sign, blank, empty item or overflow exits 2 naming the flag"; else
  nok "bench lists accepted ($list_bad):$list_list"; fi
# the same flag, the same values in every command: --kv-type q8 (run's alias) and a 64-bit --seed in ask
timeout 20 "$BIN" bench -m "$M" --kv-type q8 --no-such-flag </dev/null >"$T/o" 2>"$T/e"; r1=$?
timeout 20 "$BIN" perplexity -m "$M" -f /dev/null --kv-type q8 --no-such-flag </dev/null >"$T/o" 2>"$T/e2"; r2=$?
timeout 20 "$BIN" ask --db "$T/none.sqlite" --seed 18446744073709551615 what </dev/null >"$T/o" 2>"$T/e3"; r3=$?
if [ $r1 = 2 ] && grep -q -- "--no-such-flag" "$T/e" && [ $r2 = 2 ] && grep -q -- "--no-such-flag" "$T/e2" &&
  [ $r3 = 1 ] && grep -q "no knowledge base" "$T/e3"; then
  ok "--kv-type q8 in bench and perplexity as in run; ask --seed takes 0..2^64-1 as run's"
else nok "per-command values: bench rc $r1 $(head -1 "$T/e"); perplexity rc $r2 $(head -1 "$T/e2"); ask rc $r3 $(head -1 "$T/e3")"; fi

$R -p hi -n 2 --keep-thinking >"$T/o" 2>"$T/e"; rc=$?
if [ $rc = 2 ] && grep -q -- "--keep-thinking is chat's" "$T/e" && [ ! -s "$T/o" ]; then
  ok "run --keep-thinking (chat's flag) is refused, not ignored"
else nok "run --keep-thinking: rc $rc $(head -c 200 "$T/e")"; fi

# ---- empty values that would change meaning silently ----
timeout 20 "$BIN" serve -m "$M" --port 0 --api-key "" </dev/null >"$T/o" 2>"$T/e"; rc=$?
if [ $rc = 2 ] && grep -q -- "--api-key is empty" "$T/e" && [ ! -s "$T/o" ]; then
  ok "serve --api-key '' is refused (it served without authentication: --api-key \"\$KEY\" with KEY unset)"
else nok "serve --api-key '': rc $rc $(head -c 200 "$T/e")"; fi
timeout 20 "$BIN" serve -m "$M" --port 0 --thermal "" </dev/null >"$T/o" 2>"$T/e"; rc=$?
if [ $rc = 2 ] && grep -q -- "--thermal needs" "$T/e"; then ok "serve --thermal '' is refused, as run's"; else
  nok "serve --thermal '': rc $rc $(head -c 200 "$T/e")"; fi

# ---- output that cannot be written: a full disk (/dev/full), a closed stdout -> exit 1 naming it, not 0 ----
if [ -w /dev/full ]; then
  n_full=0; full_list=""
  while read -r args; do
    eval "timeout 60 \"\$BIN\" $args" </dev/null >/dev/full 2>"$T/e"; rc=$?
    if [ $rc != 1 ] || ! grep -q "cannot write the output to stdout: No space left on device" "$T/e"; then
      n_full=$((n_full + 1)); full_list="$full_list [$args -> rc $rc: $(head -c 100 "$T/e")]"
    fi
  done <<EOF
run -m "$M" -t 1 -p hi -n 2
run -m "$M" -t 1 -p hi -n 2 --json
info "$M"
info "$M" --json --mem
tokenize --vocab "$M" hello
verify "$M"
bench -m "$M" -t 1 -p 8 -n 2 -r 1
models
--help
help run
pull --list
EOF
  if [ $n_full = 0 ]; then ok "stdout on a full disk: every command exits 1 and says so"; else
    nok "stdout on a full disk not reported ($n_full):$full_list"; fi
else
  ok "skipped: no /dev/full"
fi
$R -p hi -n 2 >&- 2>"$T/e"; rc=$?
if [ $rc = 1 ] && grep -q "cannot write the output to stdout: Bad file descriptor" "$T/e"; then
  ok "run with stdout closed exits 1 naming it"
else nok "run with stdout closed: rc $rc $(cat "$T/e")"; fi
# a closed stdout / stderr is not handed to the next file opened: `run -v 2>&-` wrote its stats line, `run >&-` its
# answer, into the packed-weights cache being written, which was committed damaged (the next run rebuilt it)
XDG_CACHE_HOME="$T/pc0" $R -v -p hi -n 4 >/dev/null 2>&1
XDG_CACHE_HOME="$T/pc1" $R -v -p hi -n 4 >/dev/null 2>&-
XDG_CACHE_HOME="$T/pc2" $R -v -p hi -n 4 >&- 2>/dev/null
pc0=$(ls "$T"/pc0/pocketbrain/*.pbpack 2>/dev/null)
if [ -z "$pc0" ]; then ok "skipped: no packed-weights cache written for this model"
elif cmp -s "$pc0" "$T/pc1/pocketbrain/$(basename "$pc0")" && cmp -s "$pc0" "$T/pc2/pocketbrain/$(basename "$pc0")"; then
  ok "run with stderr or stdout closed: nothing written into the packed-weights cache"
else nok "run with stderr / stdout closed: the packed-weights cache differs ($(ls -l "$T"/pc?/pocketbrain/ | tr '\n' ' '))"; fi

# ---- text that is not UTF-8 ----
printf 'caf\351 au lait' >"$T/latin1.txt"
$R -f "$T/latin1.txt" -n 2 >"$T/o" 2>"$T/e"; rc=$?
if [ $rc = 1 ] && grep -q "latin1.txt' is not valid UTF-8 (byte 3 is 0xe9)" "$T/e" && [ ! -s "$T/o" ]; then
  ok "a Latin-1 prompt file is refused naming the byte"
else nok "latin-1 -f: rc $rc $(cat "$T/e")"; fi
$R -n 2 <"$T/latin1.txt" >"$T/o" 2>"$T/e"; rc=$?
if [ $rc = 1 ] && grep -q "stdin is not valid UTF-8" "$T/e"; then ok "a Latin-1 prompt on stdin is refused"; else nok "latin-1 stdin: rc $rc $(cat "$T/e")"; fi
$R -p "$(cat "$T/latin1.txt")" -n 2 >"$T/o" 2>"$T/e"; rc=$?
r1=$rc
$R -p hi --system "$(cat "$T/latin1.txt")" -n 2 >"$T/o" 2>"$T/e2"; r2=$?
$R -p hi --stop "$(printf '\377')" -n 2 >"$T/o" 2>"$T/e3"; r3=$?
if [ $r1 = 1 ] && [ $r2 = 2 ] && [ $r3 = 2 ] && grep -q "not valid UTF-8" "$T/e" && grep -q -- "--system is not valid" "$T/e2"; then
  ok "-p, --system and --stop that are not UTF-8 are refused"
else nok "non-UTF-8 -p/--system/--stop: rc $r1 $r2 $r3"; fi
printf 'one\000two' >"$T/nul.txt"
$R -f "$T/nul.txt" -n 2 >"$T/o" 2>"$T/e"; rc=$?
if [ $rc = 1 ] && grep -q "NUL byte at byte 3" "$T/e"; then ok "a prompt file with a NUL byte is refused"; else nok "NUL: rc $rc $(cat "$T/e")"; fi
printf 'h\303\251llo \342\202\254 \360\237\230\200' >"$T/utf8.txt"
$R -f "$T/utf8.txt" -n 2 >"$T/o" 2>"$T/e"; rc=$?
if [ $rc = 0 ]; then ok "a UTF-8 prompt file (2, 3, 4-byte characters) is accepted"; else nok "utf-8 file: rc $rc $(cat "$T/e")"; fi
printf '%s\n' "$(cat "$T/latin1.txt")" "/stats" "/quit" | "$BIN" chat -m "$M" -t 1 -n 2 >"$T/o" 2>"$T/e"; rc=$?
if [ $rc = 0 ] && grep -q "this line is not valid UTF-8" "$T/e" && grep -q "0 turns" "$T/o"; then
  ok "chat: a line that is not UTF-8 is refused, the chat goes on"
else nok "chat non-UTF-8 line: rc $rc $(cat "$T/e") $(cat "$T/o")"; fi

# a prompt with more tokens than bytes (each " " of "x x x" is 3 byte tokens in the tiny vocabulary)
xs=$(i=0; while [ $i -lt 60 ]; do printf 'x '; i=$((i + 1)); done)
$R --raw -p "$xs" -n 1 >"$T/o" 2>"$T/e"; rc=$?
if [ $rc = 0 ]; then ok "--raw: a prompt of more tokens than bytes is generated from"; else nok "--raw many tokens: rc $rc $(cat "$T/e")"; fi

# ---- info --mem -c N agrees with run -c N (tiny model: n_ctx_train 8192; -c at least 16) ----
train=$("$BIN" info "$M" --json | grep -o '"n_ctx_train":[0-9]*' | grep -o '[0-9]*$')
[ -n "$train" ] || train=8192
agree=0; disagree=""
for c in 1 15 16 $train $((train + 1)) 1000000 1048577; do
  "$BIN" info "$M" --mem -c $c >"$T/i" 2>&1; ri=$?
  $R -c $c --raw -p hi -n 1 >/dev/null 2>"$T/r"; rr=$?
  # both accept (0) or both refuse (info: 1 for a refused n_ctx, 2 for a flag out of range; run the same)
  if [ $ri = $rr ]; then agree=$((agree + 1)); else disagree="$disagree -c $c: info $ri run $rr;"; fi
done
if [ -z "$disagree" ]; then ok "info --mem -c N and run -c N accept and refuse the same N ($agree values incl. 15/16 and $train/$((train + 1)))"; else
  nok "info --mem and run disagree:$disagree"; fi
"$BIN" info "$M" --mem -c $((train + 1)) >"$T/i" 2>&1
if grep -q "exceeds the model's training context $train" "$T/i"; then ok "info --mem says why n_ctx $((train + 1)) is refused"; else
  nok "info --mem refused reason: $(cat "$T/i" | grep memory)"; fi
exit 0
