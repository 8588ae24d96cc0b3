#!/bin/sh
# test_kb_walkthrough.sh -- runs the knowledge-hub walk-through of docs/KNOWLEDGE.md (the commands between its
# walkthrough markers, kb.sqlite moved to a temp folder) with the shipped corpus and model, and checks each step.
BIN=${PB_BIN:-build/pocketbrain}
DOC=docs/KNOWLEDGE.md
T=$(mktemp -d /tmp/pb_kb_walk.XXXXXX)
trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }

if [ ! -r models/default.gguf ]; then nok "models/default.gguf is missing (it ships with the repository)"; exit 1; fi
sed -n '/<!-- walkthrough:begin -->/,/<!-- walkthrough:end -->/p' "$DOC" | grep '^build/pocketbrain ' >"$T/cmds"
n=$(wc -l <"$T/cmds")
if [ "$n" = 4 ]; then ok "the walk-through has 4 commands"; else nok "walk-through commands: $n (expected 4)"; exit 1; fi
i=0
while IFS= read -r line; do
  i=$((i + 1))
  cmd=$(printf '%s' "$line" | sed "s#^build/pocketbrain #\"\$BIN\" #; s#--db kb.sqlite#--db \"\$T/kb.sqlite\"#")
  eval "$cmd" >"$T/out.$i" 2>"$T/err.$i"
  echo $? >"$T/rc.$i"
done <"$T/cmds"
rc() { cat "$T/rc.$1"; }

if [ "$(rc 1)" = 0 ] && grep -q "318 added" "$T/out.1"; then ok "step 1: ingest adds the 318 shipped pages"
else nok "step 1: ingest rc=$(rc 1) $(cat "$T/out.1" "$T/err.1")"; fi
if [ "$(rc 2)" = 0 ] && head -1 "$T/out.2" | grep -q "sched_setaffinity.2.md:"; then ok "step 2: search ranks sched_setaffinity first"
else nok "step 2: search rc=$(rc 2) $(head -3 "$T/out.2") $(cat "$T/err.2")"; fi
if [ "$(rc 3)" = 0 ] && grep -q "by the model's tokenizer" "$T/out.3" && grep -q "^\[1\] .*sched_setaffinity" "$T/out.3" &&
  grep -q "context 512 = " "$T/out.3"; then ok "step 3: ask --dry-run counts real tokens in the model's context"
else nok "step 3: ask --dry-run rc=$(rc 3) $(tail -5 "$T/out.3") $(cat "$T/err.3")"; fi
if [ "$(rc 4)" = 0 ] && grep -q "^Sources" "$T/out.4" && ! grep -q "does not fit" "$T/out.4" "$T/err.4" &&
  ! grep -q "fallback" "$T/out.4" "$T/err.4"; then
  ok "step 4: ask answers with the shipped model out of the box (no fallback)"
else nok "step 4: ask rc=$(rc 4) $(tail -5 "$T/out.4") $(cat "$T/err.4")"; fi

# The budget holds for a context barely above the answer: the prompt shrinks to fit, never past the context.
"$BIN" ask --db "$T/kb.sqlite" --dry-run --json --ctx 300 "How can I bind a process to particular CPUs?" >"$T/j" 2>&1
if python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); sys.exit(0 if o["counted_by"]=="tokenizer" and o["prompt_tokens"]+o["max_tokens"]<=o["n_ctx"]==300 and o["sources"]>=1 else 1)' "$T/j"
then ok "dry-run --ctx 300: exact prompt tokens + answer fit the context"
else nok "dry-run --ctx 300: $(cat "$T/j")"; fi
"$BIN" ask --db "$T/kb.sqlite" --dry-run --max-tokens 500 "How can I bind a process to particular CPUs?" >/dev/null 2>"$T/e"; rc=$?
if [ $rc = 2 ] && grep -q "max-tokens 500 leaves" "$T/e"; then ok "an answer budget that leaves no room is a usage error naming the numbers"
else nok "--max-tokens 500 in a 512 context: rc=$rc $(cat "$T/e")"; fi
