#!/bin/sh
# test_chat.sh -- `pocketbrain chat` driven through tmux like a person: two turns, /stats, /save, quit
# (session saved), resume with --session (no re-prefill), Ctrl-C during an answer, /reset, /quit; Ctrl-C
# at the prompt (feedback, the next Ctrl-D still leaves), a full context said once with fitting advice; a failed piped
# /save or /load exits 1, its message starting "session load" / "session save" naming the file; a long piped line is
# one turn, a line with a NUL byte is refused; SIGHUP, SIGTERM and SIGPIPE save --session first.
BIN=${PB_BIN:-build/pocketbrain}
# the tiny peer model (n_ctx_train 8192, vocab 4096); models/default.gguf only when the fixture is absent
M=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
[ -f "$M" ] || M=models/default.gguf
if [ ! -f "$M" ] || ! command -v tmux >/dev/null 2>&1; then
  if [ "$CI" = true ]; then echo "not ok - no model or no tmux"; exit 1; fi
  echo "ok - skipped: no model or no tmux"; exit 0
fi
T=$(mktemp -d)
S=pbchat_$$
cleanup() { tmux kill-session -t $S 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
screen() { tmux capture-pane -p -t $S -S -300 2>/dev/null; }
# wait_for PATTERN COUNT SECONDS: until PATTERN occurs COUNT times on the screen
wait_for() {
  i=0
  while [ $i -lt $(($3 * 5)) ]; do
    n=$(screen | grep -c -- "$1")
    [ "$n" -ge "$2" ] && return 0
    sleep 0.2; i=$((i + 1))
  done
  return 1
}
alive() { tmux has-session -t $S 2>/dev/null && [ -z "$(tmux list-panes -t $S -F '#{pane_dead}' | grep 1)" ]; }
ABS_BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
ABS_M=$(cd "$(dirname "$M")" && pwd)/$(basename "$M")

# ---- first session: two turns, /stats, /save, /quit ----
tmux new-session -d -s $S -x 160 -y 50 "cd '$T' && '$ABS_BIN' chat -m '$ABS_M' -t 1 -c 2048 -n 12 --session chat.pbs; echo EXITED-\$?; sleep 30"
if wait_for "pocketbrain chat --" 1 30; then ok "chat starts and shows its banner"; else nok "chat starts"; screen; exit 1; fi
tmux send-keys -t $S "Hello, who are you?" Enter
if wait_for "\[prompt [0-9]* tok, answer 12 tok" 1 60; then ok "turn 1 answered with token counts"; else nok "turn 1"; screen; fi
tmux send-keys -t $S "Tell me more." Enter
if wait_for "\[prompt [0-9]* tok, answer 12 tok" 2 60; then ok "turn 2 answered"; else nok "turn 2"; screen; fi
p1=$(screen | grep -o "\[prompt [0-9]* tok" | sed -n 1p | grep -o "[0-9]*")
p2=$(screen | grep -o "\[prompt [0-9]* tok" | sed -n 2p | grep -o "[0-9]*")
# the history before turn 2 holds turn 1's prompt + 11 fed answer tokens; a re-prefill would count them all
if [ -n "$p2" ] && [ "$p2" -lt $((p1 + 11)) ]; then ok "turn 2 prefilled only its own $p2 tokens (history: $((p1 + 11)))"; else nok "turn 2 prompt tokens $p2 vs $p1"; fi
tmux send-keys -t $S "/stats" Enter
if wait_for "context: *[0-9]* / 2048 tokens, 2 turns" 1 10; then ok "/stats shows the context and 2 turns"; else nok "/stats"; screen; fi
if screen | grep -q "thermal: *off"; then ok "/stats shows the thermal state"; else nok "/stats thermal"; fi
tmux send-keys -t $S "/save $T/copy.pbs" Enter
if wait_for "\[saved [0-9]* tokens to" 1 10 && [ -s "$T/copy.pbs" ]; then ok "/save FILE writes the session"; else nok "/save"; screen; fi
tmux send-keys -t $S "/quit" Enter
if wait_for "EXITED-0" 1 20 && [ -s "$T/chat.pbs" ]; then ok "/quit exits 0 and saves --session chat.pbs"; else nok "/quit"; screen; fi
n_saved=$(screen | grep -o "context: *[0-9]*" | grep -o "[0-9]*$")
tmux kill-session -t $S 2>/dev/null

# ---- second session: resume, a long answer stopped with Ctrl-C, the program goes on ----
tmux new-session -d -s $S -x 160 -y 50 "cd '$T' && '$ABS_BIN' chat -m '$ABS_M' -t 1 -c 2048 -n 0 --session chat.pbs; echo EXITED-\$?; sleep 30"
if wait_for "\[resumed chat.pbs: [0-9]* tokens, 2 turns\]" 1 30; then ok "--session resumes the saved conversation"; else nok "resume"; screen; fi
tmux send-keys -t $S "Now write a very long story." Enter
# Ctrl-C once the answer is streaming (text below the prompt line), however slow the machine
i=0
while [ $i -lt 300 ] && [ "$(screen | sed -n '/Now write a very long story\./,$p' | sed 1d | grep -c .)" = 0 ]; do
  sleep 0.2; i=$((i + 1))
done
tmux send-keys -t $S C-c
if wait_for "\[stopped\]" 1 20; then ok "Ctrl-C stops the answer"; else nok "Ctrl-C"; screen; fi
sleep 0.5
if alive && ! screen | grep -q "EXITED"; then ok "the program is still running after Ctrl-C"; else nok "program died on Ctrl-C"; screen; fi
p3=$(screen | grep -o "\[prompt [0-9]* tok" | tail -1 | grep -o "[0-9]*")
if [ -n "$p3" ] && [ -n "$n_saved" ] && [ "$p3" -lt "$n_saved" ]; then ok "resumed turn prefilled $p3 tokens, not the $n_saved of history"; else nok "resumed prefill $p3 vs $n_saved"; fi
tmux send-keys -t $S "/stats" Enter
if wait_for "context: *[0-9]* / 2048 tokens, 3 turns" 1 10; then ok "after Ctrl-C the stopped answer stays as turn 3"; else nok "stats after Ctrl-C"; screen; fi
tmux send-keys -t $S "/reset" Enter
if wait_for "\[conversation reset\]" 1 10; then ok "/reset"; else nok "/reset"; fi
tmux send-keys -t $S "/nonsense" Enter
if wait_for "unknown command /nonsense" 1 10; then ok "unknown command is reported, not fatal"; else nok "unknown command"; fi
tmux send-keys -t $S "/load $T/copy.pbs" Enter
if wait_for "\[loaded [0-9]* tokens, 2 turns" 1 10; then ok "/load FILE restores a saved conversation"; else nok "/load"; screen; fi
tmux send-keys -t $S C-d
if wait_for "EXITED-0" 1 20; then ok "Ctrl-D leaves with exit 0"; else nok "Ctrl-D"; screen; fi

# ---- third session: Ctrl-C at the prompt, a full context ----
tmux kill-session -t $S 2>/dev/null
tmux new-session -d -s $S -x 160 -y 50 "cd '$T' && '$ABS_BIN' chat -m '$ABS_M' -t 1 -c 48 -n 4; echo EXITED-\$?; sleep 30"
if wait_for "pocketbrain chat --" 1 30; then :; else nok "third chat starts"; screen; fi
sleep 0.3
tmux send-keys -t $S C-c
if wait_for "Ctrl-D or /quit leaves" 1 10; then ok "Ctrl-C at an empty prompt says how to leave"; else nok "Ctrl-C at the prompt: no feedback"; screen; fi
tmux send-keys -t $S "half a line"
sleep 0.3
tmux send-keys -t $S C-c
if wait_for "Ctrl-D or /quit leaves" 2 10 && alive; then ok "Ctrl-C drops a half-typed line, the chat goes on"; else nok "Ctrl-C on a half line"; screen; fi
long="$(i=0; while [ $i -lt 40 ]; do printf 'word%d ' $i; i=$((i + 1)); done)"
tmux send-keys -t $S "$long" Enter
if wait_for "context full" 1 20; then
  l=$(screen | grep "context full" | tr -d '\n')
  if [ "$(echo "$l" | grep -o "context full" | wc -l)" = 1 ] && [ "$(echo "$l" | grep -o "larger -c" | wc -l)" = 1 ] &&
    ! echo "$l" | grep -q "context-shift\|/reset"; then ok "a full context is said once, with what to do once: $l"; else nok "context full line: $l"; fi
else nok "no context full message"; screen; fi
if [ -z "$(screen)" ] || screen | grep -qE '(^|[ [(])([A-Za-z][a-z ]*[a-z]): \2:'; then nok "doubled prefix on the chat screen"; screen; else ok "no doubled error prefix on the chat screen"; fi
tmux send-keys -t $S C-d
if wait_for "EXITED-0" 1 20; then ok "Ctrl-D after Ctrl-C at the prompt leaves (not swallowed)"; else nok "Ctrl-D after Ctrl-C swallowed"; screen; fi
tmux kill-session -t $S 2>/dev/null
# Ctrl-C at the prompt, then straight away Ctrl-D: it leaves
tmux new-session -d -s $S -x 160 -y 50 "cd '$T' && '$ABS_BIN' chat -m '$ABS_M' -t 1 -c 64; echo EXITED-\$?; sleep 30"
wait_for "pocketbrain chat --" 1 30
sleep 0.3
tmux send-keys -t $S C-c
wait_for "Ctrl-D or /quit leaves" 1 10
tmux send-keys -t $S C-d
if wait_for "EXITED-0" 1 10; then ok "Ctrl-D right after Ctrl-C at the prompt leaves (not swallowed)"; else nok "Ctrl-D right after Ctrl-C swallowed"; screen; fi
tmux kill-session -t $S 2>/dev/null

# a corrupt session file is refused with a clear error and left as it is
printf 'garbage that is not a session' >"$T/bad.pbs"
cp "$T/bad.pbs" "$T/bad.orig"
(cd "$T" && "$ABS_BIN" chat -m "$ABS_M" -t 1 --session bad.pbs </dev/null >"$T/out" 2>"$T/err"); rc=$?
if [ $rc = 1 ] && grep -q "not a pocketbrain session file" "$T/err" && cmp -s "$T/bad.pbs" "$T/bad.orig"; then
  ok "corrupt --session file: clear error, file untouched"
else nok "corrupt session rc=$rc: $(cat "$T/err")"; fi
# a --session FILE that cannot be saved (missing directory, a directory or a link at the name) is refused at the
# start, before any turn (was: the whole conversation, then "cannot save the session" at exit, the chat lost)
for bad in "nodir/s.pbs" "adir" "alink.pbs"; do
  mkdir -p "$T/adir"; ln -sf chat.pbs "$T/alink.pbs" # a link to a good session: resumed, then not saved
  (cd "$T" && printf 'Hi\n' | "$ABS_BIN" chat -m "$ABS_M" -t 1 -n 4 --session "$bad" >"$T/out" 2>"$T/err"); rc=$?
  if [ $rc = 1 ] && grep -q -- "--session: .*'$bad'.*the conversation could not be saved there" "$T/err" && \
    ! grep -q "answer" "$T/out" && [ ! -L "$T/chat.pbs" ]; then
    ok "--session $bad: refused before the first turn, named"
  else nok "--session $bad rc=$rc: $(cat "$T/err") / $(cat "$T/out")"; fi
done
# the terminal closed (SIGHUP) or a kill (SIGTERM) after a turn: --session is saved, then the process ends by the
# signal (was: killed at once, the conversation since the start lost)
for sig in HUP TERM; do
  rm -f "$T/in.fifo" "$T/hup.pbs"; mkfifo "$T/in.fifo"
  (printf 'Hi\n'; sleep 30) >"$T/in.fifo" & writer=$!
  (cd "$T" && exec "$ABS_BIN" chat -m "$ABS_M" -t 1 -n 4 --session hup.pbs <"$T/in.fifo" >"$T/out" 2>"$T/err") & pid=$!
  for i in $(seq 1 150); do grep -q "answer 4 tok" "$T/out" 2>/dev/null && break; sleep 0.1; done
  kill -$sig $pid; wait $pid; rc=$?
  kill $writer 2>/dev/null; wait $writer 2>/dev/null
  (cd "$T" && printf '/stats\n' | "$ABS_BIN" chat -m "$ABS_M" -t 1 --session hup.pbs >"$T/res" 2>&1)
  if [ $rc -gt 128 ] && grep -q "saved hup.pbs" "$T/out" && grep -q "resumed hup.pbs: [0-9]* tokens, 1 turns" "$T/res"; then
    ok "SIG$sig after a turn: --session saved (1 turn resumed), status $rc"
  else nok "SIG$sig: status $rc, out: $(cat "$T/out") err: $(cat "$T/err") resume: $(cat "$T/res")"; fi
done
# stdout a pipe whose reader left (SIGPIPE: `chat | head`, a `tee` that ended) during an answer: --session is saved the
# same way, then the process ends by the signal (was: killed by the first write after, the conversation lost)
rm -f "$T/pipe.pbs"
{ (cd "$T" && (printf 'Tell me a long story.\n'; sleep 3) | "$ABS_BIN" chat -m "$ABS_M" -t 1 -n 200 --session pipe.pbs \
  2>"$T/err"); echo $? >"$T/rc"; } | head -c 1 >/dev/null
(cd "$T" && printf '/stats\n' | "$ABS_BIN" chat -m "$ABS_M" -t 1 --session pipe.pbs >"$T/res" 2>&1)
if [ "$(cat "$T/rc")" = 141 ] && grep -q "resumed pipe.pbs: [0-9]* tokens, 1 turns" "$T/res"; then
  ok "SIGPIPE during an answer: --session saved (1 turn resumed), status 141"
else nok "SIGPIPE: status $(cat "$T/rc"), err: $(cat "$T/err") resume: $(cat "$T/res")"; fi
# piped mode (no tty): answers and commands work without a terminal
printf 'Hi\n/stats\n/quit\n' | "$BIN" chat -m "$M" -t 1 -n 4 >"$T/pipe" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "answer 4 tok" "$T/pipe" && grep -q "1 turns" "$T/pipe"; then ok "chat works from a pipe"; else nok "pipe: $(cat "$T/pipe")"; fi
# a piped /save or /load that fails makes the exit status 1 (it said so on stdout and exited 0: a script's save lost)
printf 'Hi\n/save %s/no/such/dir/s.pbs\n/quit\n' "$T" | "$BIN" chat -m "$M" -t 1 -n 2 >"$T/ps" 2>"$T/pse"; rc=$?
printf '/load %s/missing.pbs\n' "$T" | "$BIN" chat -m "$M" -t 1 -n 2 >"$T/pl" 2>"$T/ple"; rc2=$?
printf 'Hi\n/save %s/good.pbs\n' "$T" | "$BIN" chat -m "$M" -t 1 -n 2 >"$T/pg" 2>&1; rc3=$?
if [ $rc = 1 ] && grep -q '\[save failed' "$T/ps" && grep -q '1 /save or /load command failed' "$T/pse" &&
  [ $rc2 = 1 ] && grep -q '\[load failed' "$T/pl" && [ $rc3 = 0 ] && [ -s "$T/good.pbs" ]; then
  ok "piped chat: a failed /save or /load exits 1, naming it on stderr; a good /save exits 0"
else nok "piped /save, /load failures: rc $rc / $rc2 / $rc3: $(cat "$T/pse" "$T/ple")"; fi
# every failed /load and /save starts "session load" / "session save" and names the file once, as --session's
# messages do (a /load of a file that could not be opened said only "cannot open '...'", a directory "'...' is not a
# regular file")
mkdir -p "$T/ldir"
printf '/load %s/missing.pbs\n/load %s/ldir\n/load %s/bad.orig\n/save %s/no/dir/s.pbs\n' "$T" "$T" "$T" "$T" |
  "$BIN" chat -m "$M" -t 1 -n 2 >"$T/pm" 2>&1; rc=$?
n_named=0
for f in missing.pbs ldir bad.orig; do
  l=$(grep "^\[load failed: " "$T/pm" | grep -F "$T/$f'")
  if echo "$l" | grep -q "^\[load failed: session load[ :]" && [ "$(echo "$l" | grep -o -F "$T/$f'" | wc -l)" = 1 ]; then
    n_named=$((n_named + 1))
  fi
done
if [ $rc = 1 ] && [ $n_named = 3 ] && grep -q "^\[save failed: session save '$T/no/dir/s.pbs': " "$T/pm"; then
  ok "chat: a failed /load (missing, a directory, not a session) says 'session load' and the file once, as /save"
else nok "chat /load messages: rc $rc, $n_named of 3: $(grep 'failed' "$T/pm" | tr '\n' ' ')"; fi
# a piped line of 64 KiB or more is one turn (a fixed 64 KiB buffer cut it into two turns, each answered)
awk 'BEGIN { for (i = 0; i < 14000; i++) printf "word "; print "" }' >"$T/long.txt"
"$BIN" chat -m "$M" -t 1 -n 1 <"$T/long.txt" >"$T/long.out" 2>&1; rc=$?
n=$(grep -c '\[prompt [0-9]* tok' "$T/long.out")
if [ $rc = 0 ] && [ "$n" = 1 ]; then ok "a piped line of 70,000 bytes is one turn"; else
  nok "long piped line: rc $rc, $n turns: $(grep -a '\[' "$T/long.out" | head -4)"; fi
# /retry answers the last question again (greedy: the same answer, the context as before: turns 2, tokens equal),
# /undo takes the last exchange out; past the model's window of 32 (the first turn is ~60 tokens) neither reads
# the conversation again (chat's rings keep 512 rows more); nothing to undo / retry is said, not done
printf 'What is a harbor, and why do ships need one in a storm? Tell me.\nAnd a lighthouse?\n/stats\n/retry\n/stats\n/undo\n/undo\n/undo\n/retry\n/stats\n' |
  "$BIN" chat -m "$M" -t 1 -n 12 --temp 0 >"$T/ur" 2>&1; rc=$?
a2=$(grep '^\[prompt' "$T/ur" | sed -n 2p | sed 's/, [0-9.]* tok.s//'); a3=$(grep '^\[prompt' "$T/ur" | sed -n 3p | sed 's/, [0-9.]* tok.s//')
ans=$(grep -v '^\[\|^context\|^totals\|^last\|^sampling\|^thermal\|^system' "$T/ur")
c1=$(sed -n 's/^context: *\([0-9]*\) .*/\1/p' "$T/ur" | sed -n 1p); c2=$(sed -n 's/^context: *\([0-9]*\) .*/\1/p' "$T/ur" | sed -n 2p)
c3=$(sed -n 's/^context: *\([0-9]*\) .*/\1/p' "$T/ur" | sed -n 3p)
if [ $rc = 0 ] && [ -n "$a2" ] && [ "$a2" = "$a3" ] && [ "$(echo "$ans" | sed -n 2p)" = "$(echo "$ans" | sed -n 3p)" ] &&
  [ -n "$c1" ] && [ "$c1" = "$c2" ] && [ "$c1" -gt 64 ] && [ "$c3" = 0 ] &&
  grep -q 'last exchange removed: 1 turn left' "$T/ur" && grep -q 'last exchange removed: 0 turns left' "$T/ur" &&
  grep -q 'nothing to undo: the conversation is empty' "$T/ur" && grep -q 'nothing to retry' "$T/ur" &&
  ! grep -q 'read again' "$T/ur" && grep -q ' 0 re-prefilled' "$T/ur"; then
  ok "chat /retry: the same answer and context ($c1 tokens); /undo twice empties it; nothing read again"
else nok "chat /retry /undo: rc $rc [$a2] [$a3] [$c1] [$c2] [$c3]: $(grep '^\[\|^totals' "$T/ur" | tr '\n' ' ')"; fi
# /retry after a turn that did not go in (context full) asks it again: the exchange before stays (was: undone, the
# conversation emptied)
long="$(i=0; while [ $i -lt 40 ]; do printf 'word%d ' $i; i=$((i + 1)); done)"
printf 'Hi there\n%s\n/retry\n/stats\n' "$long" | "$BIN" chat -m "$M" -t 1 -c 80 -n 4 --temp 0 >"$T/rf" 2>&1; rc=$?
if [ $rc = 0 ] && [ "$(grep -c 'context full' "$T/rf")" = 2 ] && grep -q 'context: *29 / 80 tokens, 1 turns' "$T/rf"; then
  ok "chat /retry after a context-full turn asks it again, the exchange before kept"
else nok "chat /retry after context full: rc $rc: $(grep '^\[\|^context' "$T/rf" | tr '\n' ' ')"; fi
# what a full context advises fits the case: /reset and --context-shift only where they make room (both were advised
# for a turn longer than the context alone, and --context-shift with it on)
w4="word0 word1 word2 word3"
printf 'Hi there\n%s\n' "$w4" | "$BIN" chat -m "$M" -t 1 -c 64 -n 4 >"$T/cf1" 2>&1
printf '%s\n' "$long" | "$BIN" chat -m "$M" -t 1 -c 48 -n 4 >"$T/cf2" 2>&1
printf 'Hi\n%s\n' "$w4" | "$BIN" chat -m "$M" -t 1 -c 56 -n 2 --context-shift --system "Be brief" >"$T/cf3" 2>&1
if grep -q 'context full: [0-9]* tokens in the context.*/reset starts over.*--context-shift' "$T/cf1" &&
  grep -q 'turn alone.* -- write a shorter message, or restart with a larger -c\]' "$T/cf2" &&
  grep -q 'does not make enough room -- write a shorter message, or restart with a larger -c\]' "$T/cf3"; then
  ok "chat: a full context advises /reset and --context-shift only where they help"
else nok "chat context-full advice: $(grep -h 'context full' "$T/cf1" "$T/cf2" "$T/cf3")"; fi
# a piped line with a NUL byte is refused by name (was: cut at the NUL without a word, the rest of it never asked)
printf 'Hi\0 and the rest of the question\n' | "$BIN" chat -m "$M" -t 1 -n 4 >"$T/nul" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q 'this line contains a NUL byte at byte 2' "$T/nul" && ! grep -q '^\[prompt' "$T/nul"; then
  ok "chat: a piped line with a NUL byte is refused, not cut short"
else nok "chat NUL line: rc $rc: $(cat "$T/nul")"; fi
"$BIN" chat --bad >/dev/null 2>"$T/err"; rc=$?
if [ $rc = 2 ] && grep -q -- "--bad" "$T/err"; then ok "chat: unknown flag exits 2"; else nok "chat bad flag"; fi
exit 0
