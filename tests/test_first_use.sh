#!/bin/sh
# test_first_use.sh -- what a first-time user meets following README "Using it", docs/MODELS.md and the man page
# literally, with the shipped default model standing in for a pulled one:
# - a catalog name without quantization (`gemma-2-2b-it`) names the library's default quantization for `verify` as
#   for every -m (verify looked for a file of that name);
# - a folder named like a library model (the Hugging Face checkout `./gemma-2-2b-it` that README's convert line
#   reads) does not hide the model from -m, info and verify ("'gemma-2-2b-it' is not a regular file");
# - chat's /retry gives a new answer when sampling (the sampler is seeded afresh each turn, so the same seed gave
#   the same answer again), reproducibly: retry N samples with seed + N;
# - a -c above the model's training context is said as an option problem, not "cannot read model";
# - PB_MODEL takes a library name as -m does (PB_MODEL=gemma-2-2b-it after a pull was "No such file").
PB=${PB_BIN:-build/pocketbrain}
case "$PB" in /*) ;; *) PB="$(pwd)/$PB" ;; esac
MODEL="$(pwd)/models/default.gguf"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; }

if [ ! -x "$PB" ] || [ ! -r "$MODEL" ]; then nok "CLI $PB or $MODEL missing"; exit 1; fi
export PB_MODELS="$T/lib"
export XDG_CACHE_HOME="$T/cache" # run alone too, the packed-weights cache files stay in $T
mkdir -p "$PB_MODELS"
cp "$MODEL" "$PB_MODELS/gemma-2-2b-it:q4_k_m.gguf" # as `pocketbrain pull gemma-2-2b-it` names it
cd "$T" || exit 1

# verify takes the name the other commands take (MODELS.md: `verify NAME`; `-m gemma-2-2b-it` finds :q4_k_m)
"$PB" verify gemma-2-2b-it >out 2>err; rc=$?
if [ $rc = 0 ] && grep -q "^sha256: [0-9a-f]\{64\}  $PB_MODELS/gemma-2-2b-it:q4_k_m.gguf" out; then
  ok "verify gemma-2-2b-it checks the library's gemma-2-2b-it:q4_k_m"
else nok "verify gemma-2-2b-it: rc $rc: $(cat out err)"; fi

# the Hugging Face folder of the same name in the working directory (README: convert ./gemma-2-2b-it out.gguf)
mkdir gemma-2-2b-it
"$PB" run -m gemma-2-2b-it -p "What does 'harbor' mean?" -n 4 >out 2>err; rc=$?
if [ $rc = 0 ] && [ -s out ]; then ok "run -m gemma-2-2b-it beside a folder ./gemma-2-2b-it runs the library model"; else
  nok "run -m NAME beside a folder of that name: rc $rc: $(cat err)"; fi
"$PB" info gemma-2-2b-it >out 2>err; rc=$?
if [ $rc = 0 ] && grep -q "^file: *$PB_MODELS/gemma-2-2b-it:q4_k_m.gguf" out; then
  ok "info gemma-2-2b-it beside the folder reads the library file"
else nok "info NAME beside a folder of that name: rc $rc: $(head -2 out) $(cat err)"; fi
"$PB" verify gemma-2-2b-it >out 2>err; rc=$?
if [ $rc = 0 ]; then ok "verify gemma-2-2b-it beside the folder"; else nok "verify NAME beside a folder: rc $rc: $(cat err)"; fi
# a folder that is no library model still fails, named as what it is
mkdir notamodel
"$PB" run -m notamodel -p hi >out 2>err; rc=$?
if [ $rc = 1 ] && grep -q "'notamodel' is not a regular file" err; then ok "run -m FOLDER (no such model): rc 1, named"; else
  nok "run -m FOLDER: rc $rc: $(cat err)"; fi
# a path to the folder stays a path
"$PB" info ./gemma-2-2b-it >out 2>err; rc=$?
if [ $rc = 1 ] && grep -q "not a regular file" err; then ok "info ./FOLDER is the folder, refused"; else
  nok "info ./FOLDER: rc $rc: $(cat err)"; fi

# PB_MODEL=NAME (the man page: "a name from the model library works as well as a path")
PB_MODEL=gemma-2-2b-it "$PB" run -p "What does 'harbor' mean?" -n 4 -v >out 2>err; rc=$?
if [ $rc = 0 ] && [ -s out ]; then ok "PB_MODEL=gemma-2-2b-it runs the library model"; else
  nok "PB_MODEL=NAME: rc $rc: $(cat err)"; fi
PB_MODEL=gemma-2-2b-it "$PB" tokenize --ids hello >out 2>err; rc=$?
if [ $rc = 0 ] && grep -q '^\[2,' out; then ok "PB_MODEL=NAME: tokenize's default vocabulary"; else
  nok "PB_MODEL=NAME tokenize: rc $rc: $(cat out err)"; fi
PB_MODEL=no-such-model "$PB" run -p hi >out 2>err; rc=$?
if [ $rc = 1 ] && grep -q "no-such-model" err; then ok "PB_MODEL naming nothing: rc 1, named"; else
  nok "PB_MODEL=no-such-model: rc $rc: $(cat err)"; fi

# /retry while sampling: a new answer, the one a first turn with seed + 1 gives
printf "Tell me a word.\n/retry\n" | "$PB" chat -m "$MODEL" -n 16 --no-stats >retry.out 2>err; rc=$?
a1=$(grep -v '^\[' retry.out | sed -n 1p)
a2=$(grep -v '^\[' retry.out | sed -n 2p)
printf "Tell me a word.\n" | "$PB" chat -m "$MODEL" -n 16 --no-stats --seed 43 >seed43.out 2>/dev/null
a43=$(grep -v '^\[' seed43.out | sed -n 1p)
if [ $rc = 0 ] && [ -n "$a1" ] && [ -n "$a2" ] && [ "$a1" != "$a2" ] && [ "$a2" = "$a43" ] &&
  grep -q '^\[retry 1: seed 43\]' retry.out; then
  ok "chat /retry with sampling: a new answer (seed 43: '$a2'), not the first one again"
else nok "chat /retry with sampling: rc $rc, [$a1] then [$a2], seed 43 gives [$a43]: $(cat retry.out err)"; fi
# greedy has one answer: /retry gives it again and says nothing about seeds
printf "What does 'harbor' mean?\n/retry\n" | "$PB" chat -m "$MODEL" -n 16 --no-stats --temp 0 >greedy.out 2>&1
g1=$(grep -v '^\[' greedy.out | sed -n 1p)
g2=$(grep -v '^\[' greedy.out | sed -n 2p)
if [ -n "$g1" ] && [ "$g1" = "$g2" ] && ! grep -q 'seed' greedy.out; then ok "chat /retry greedy: the same answer"; else
  nok "chat /retry greedy: [$g1] [$g2] $(cat greedy.out)"; fi

# the man page's `chat -c 8192 ...` on a model trained for 512: the option is named, the file is not blamed
"$PB" run -m "$MODEL" -c 8192 -p hi >out 2>err; rc=$?
if [ $rc = 1 ] && grep -q "n_ctx 8192 exceeds the model's training context 512" err && ! grep -q "cannot read model" err; then
  ok "run -c 8192 on a 512-token model: $(cat err)"
else nok "run -c 8192: rc $rc: $(cat err)"; fi
exit 0
