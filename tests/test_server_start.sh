#!/bin/sh
# test_server_start.sh -- the shell tests that start `pocketbrain serve` in the background and wait for its
# "listening PORT" line in a file empty that file in the test's own shell before each launch. The launched child
# truncates it only once it runs, which on a loaded machine can come after the wait's first grep: a script that
# starts a second server into the same file then read the first server's line, found the port gone by the time it
# parsed it, and failed 4 checks ("server did not start" with an empty stderr, test_server_kb under make test).
# A source scan for the class, over tests/*.sh: every line that launches into a file the script polls for
# "listening" must follow a `: >"FILE"` within the 4 lines above it.
# Then the start itself: the memory admission of serve's slots (the second half).
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
n=0
bad=$(for f in tests/*.sh; do
  [ "$f" = tests/test_server_start.sh ] && continue
  # the files a wait loop polls: grep -q listening "FILE"
  for polled in $(sed -n 's/.*grep -q listening "\([^"]*\)".*/\1/p' "$f" | sort -u); do
    awk -v f="$f" -v p="$polled" '
      { line[NR] = $0 }
      index($0, ">\"" p "\"") && $0 ~ /&[ \t]*(#.*)?$/ && $0 !~ /^[ \t]*:[ \t]*>/ {
        found = 0
        for (k = NR - 1; k >= NR - 4 && k > 0; k--) if (index(line[k], ": >\"" p "\"")) found = 1
        if (!found) print f ":" NR ": launches into " p " without emptying it first"
      }' "$f"
  done
done)
for f in tests/*.sh; do [ "$f" != tests/test_server_start.sh ] && grep -q 'grep -q listening' "$f" && n=$((n + 1)); done
if [ "$n" -ge 4 ] && [ -z "$bad" ]; then
  ok "every server launch in the $n scripts that wait for 'listening' empties its file first"
else
  nok "server launches that can read a previous server's 'listening' line ($n scripts): $bad"
fi

# Memory admission of the slots (docs/HARDENING.md): every slot is a session with its own KV cache and scratch, pages
# untouched until its context fills, so `serve -np 16 -c 8192` started and was killed by the OOM killer later. Now
# the weights + slots x (KV + scratch) are checked before the model loads: at start, and for a library model a
# request names. --mem-limit makes the numbers the same on every machine (the peer tiny model: weights 14 MiB, a slot
# of n_ctx 2048 about 20 MiB: 1 slot fits in 140M, 8 do not).
BIN=${PB_BIN:-build/pocketbrain}
F=${PB_SHARED:-../shared}/fixtures/peer/model
MODEL=$F/gemma2-tiny-v.q8_0.gguf
OUT=$(mktemp -d)
PID=""
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$OUT"' EXIT
start() { # serve ARGS... in the background; PORT is its port once it listens, "" when it exited first
  : >"$OUT/stdout"
  "$BIN" serve -m "$MODEL" --port 0 "$@" >"$OUT/stdout" 2>"$OUT/stderr" &
  PID=$!
  for i in $(seq 1 600); do grep -q listening "$OUT/stdout" && break; kill -0 $PID 2>/dev/null || break; sleep 0.1; done
  PORT=$(sed -n 's/^listening //p' "$OUT/stdout")
}
stop() { kill -TERM $PID 2>/dev/null; wait $PID; rc=$?; PID=""; }
chat() { # model-or-empty content max_tokens -> HTTP status, the body in $OUT/body
  m=""; [ -n "$1" ] && m="\"model\":\"$1\","
  curl -s -m 60 -o "$OUT/body" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{$m\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}],\"max_tokens\":$3}" "http://127.0.0.1:$PORT/v1/chat/completions"
}

timeout 60 "$BIN" serve -m "$MODEL" --port 0 -np 8 --mem-limit 140M >"$OUT/stdout" 2>"$OUT/err"; rc=$?
K=$(sed -n 's/.*(use -np \([0-9]*\) or -c \([0-9]*\), or --fit)$/\1/p' "$OUT/err")
C=$(sed -n 's/.*(use -np \([0-9]*\) or -c \([0-9]*\), or --fit)$/\2/p' "$OUT/err")
if [ $rc = 1 ] && grep -q 'not enough memory for 8 slots: needs [0-9]* MiB (weights [0-9]* + 8 slots x (KV [0-9]* for n_ctx 2048 f16 + scratch [0-9]*)) but 140 MiB are available (--mem-limit); [1-7] slots\{0,1\} fits\{0,1\} at n_ctx 2048, or all 8 at n_ctx [0-9]*' "$OUT/err" \
  && [ -n "$K" ] && [ "$K" -ge 1 ] && [ "$K" -lt 8 ] && [ -n "$C" ] && [ $((C % 256)) = 0 ] && [ "$C" -ge 256 ] \
  && [ "$C" -lt 2048 ] && ! grep -q listening "$OUT/stdout"; then
  ok "serve -np 8 --mem-limit 140M: exit 1 before listening, naming -np $K or -c $C"
else
  nok "serve -np 8 over its memory: rc=$rc, $(cat "$OUT/err" "$OUT/stdout")"
fi
# the advice works: either way the server starts
for args in "-np ${K:-1}" "-np 8 -c ${C:-256}"; do
  start $args --mem-limit 140M
  [ -n "$PORT" ] && echo "ok - serve $args --mem-limit 140M (the advice) starts" \
    || echo "not ok - serve $args --mem-limit 140M: $(cat "$OUT/stderr")"
  stop
done
# --fit: the n_ctx the refusal named, said at start, and the slots have it
start -np 8 --mem-limit 140M --fit
if [ -n "$PORT" ] && grep -q "^pocketbrain serve: --fit: n_ctx ${C:-x} for each of the 8 slots (2048 asked; [0-9]* MiB of 140 MiB available)" "$OUT/stderr"; then
  ok "serve -np 8 --mem-limit 140M --fit starts with n_ctx $C, and says so"
else
  nok "serve --fit: port '$PORT', $(cat "$OUT/stderr")"
fi
long=$(yes 'one more word' | head -n 400 | tr '\n' ' ')
code=$(chat "" "$long" 4)
[ "$code" = 400 ] && grep -q "this server's context is ${C:-x} tokens" "$OUT/body" \
  && ok "--fit: the slots' context is $C tokens (a longer prompt -> 400 naming it)" \
  || nok "--fit context: $code $(cat "$OUT/body")"
code=$(chat "" hi 4)
[ "$code" = 200 ] && ok "--fit: the server answers" || nok "--fit: a request -> $code $(cat "$OUT/body")"
stop
# a configuration that fits starts as before: no --fit note, no refusal
start -np 1 --mem-limit 140M
[ -n "$PORT" ] && ! grep -q 'fit\|memory' "$OUT/stderr" && [ "$(chat "" hi 4)" = 200 ] \
  && ok "serve -np 1 --mem-limit 140M starts and answers as before" \
  || nok "serve -np 1 --mem-limit 140M: port '$PORT', $(cat "$OUT/stderr")"
stop
[ $rc = 0 ] && ok "it stops cleanly" || nok "exit status $rc on SIGTERM"

# A library model a request names is admitted before it loads: 2 slots of the tiny q8_0 fit in 56M (14 + 2 x 20
# MiB), its f16 twin's do not (26 MiB of weights, the q8_0's 14 staying open beside it): 500 model_load_failed in
# the OpenAI shape, the model is not loaded and the one before serves on. The q4_0 twin fits with --fit.
mkdir "$OUT/lib"
ln -s "$(cd "$F" && pwd)/gemma2-tiny-v.f16.gguf" "$OUT/lib/big.gguf"
ln -s "$(cd "$F" && pwd)/gemma2-tiny-v.q4_0.gguf" "$OUT/lib/small.gguf"
export PB_MODELS="$OUT/lib"
start -np 2 --mem-limit 56M --fit
[ -n "$PORT" ] || nok "serve -np 2 --mem-limit 56M with a library did not start: $(cat "$OUT/stderr")"
code=$(chat big hi 4)
if [ "$code" = 500 ] && grep -q '"code":"model_load_failed"' "$OUT/body" && grep -q '"type":"server_error"' "$OUT/body" \
  && grep -q "\"message\":\"cannot load model 'big': not enough memory for 2 slots, even with --fit: needs [0-9]* MiB (weights [0-9]* + 2 slots x (KV [0-9]* for n_ctx 2048 f16 + scratch [0-9]*) + the model started with [0-9]*) but 56 MiB are available (--mem-limit); " "$OUT/body"; then
  ok "a library model whose slots do not fit -> 500 model_load_failed saying why"
else
  nok "library model over the memory: $code $(cat "$OUT/body")"
fi
code=$(chat "" hi 4)
[ "$code" = 200 ] && grep -q '"model":"gemma2-tiny-v.q8_0.gguf"' "$OUT/body" \
  && ok "after the refusal the model started with serves on" || nok "after the refusal: $code $(cat "$OUT/body")"
code=$(chat small hi 4)
[ "$code" = 200 ] && grep -q '"model":"small"' "$OUT/body" \
  && grep -q "^pocketbrain serve: model 'small': --fit: n_ctx [0-9]* for each of its slots (2048 asked" "$OUT/stderr" \
  && ok "--fit: a library model that fits at a shorter context loads with it, and the log says so" \
  || nok "library model with --fit: $code $(cat "$OUT/body") $(cat "$OUT/stderr")"
code=$(chat gemma2-tiny-v.q8_0.gguf hi 4)
[ "$code" = 200 ] && ok "and back to the model started with" || nok "back to the first model: $code $(cat "$OUT/body")"
stop

# --gpu / --no-gpu as run's (serve had neither: "unknown option", exit 2): --no-gpu serves on the CPU; --gpu in a build
# without CUDA (CI's) is refused by name before listening, in a CUDA build it serves on the GPU
start -np 1 --no-gpu
[ -n "$PORT" ] && [ "$(chat "" hi 4)" = 200 ] && ok "serve --no-gpu starts and answers" ||
  nok "serve --no-gpu: port '$PORT', $(cat "$OUT/stderr")"
stop
unset PB_MODELS
timeout 60 "$BIN" serve -m "$MODEL" --port 0 --gpu >"$OUT/stdout" 2>"$OUT/err"; rc=$?
if { [ $rc = 1 ] && grep -q "built without CUDA" "$OUT/err" && ! grep -q listening "$OUT/stdout"; } ||
  grep -q listening "$OUT/stdout"; then
  ok "serve --gpu: refused by name without CUDA (rc $rc), or served on the GPU"
else nok "serve --gpu: rc $rc $(cat "$OUT/err")"; fi
