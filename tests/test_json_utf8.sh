#!/bin/sh
# test_json_utf8.sh -- every JSON output parses as strict UTF-8 even when what goes into it is not: generated text
# that ends inside a character or splits one across tokens (byte-fallback tokens), a model file name that is not
# UTF-8, a URL with %FF, an HTTP method with a quote. CLI (run --json, info --json) and server (whole answers, every
# stream event, /v1/models, errors). The model: test_gemma4_ref --write-bigram-bytes (greedy decoding answers "é" as
# the byte tokens <0xC3> <0xA9>, after a thought "xy").
BIN=${PB_BIN:-build/pocketbrain}
T=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$T"' EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
# strict: the file is UTF-8 and one JSON value; prints the value of a dotted path when one is given
jget() { python3 - "$@" <<'PY'
import json, sys
v = json.loads(open(sys.argv[1], "rb").read().decode("utf-8", "strict"))
for k in (sys.argv[2].split(".") if len(sys.argv) > 2 else []):
    v = v[int(k)] if isinstance(v, list) else v[k]
sys.stdout.write(v if isinstance(v, str) else json.dumps(v))
PY
}
# every "data: {...}" event of a stream strict; prints the joined delta.content (chat) or text
sse() { python3 - "$1" <<'PY'
import json, sys
raw = open(sys.argv[1], "rb").read()
out = ""
for ev in raw.split(b"\n\n"):
    if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
        continue
    o = json.loads(ev[6:].decode("utf-8", "strict"))
    for c in o.get("choices", []):
        out += (c.get("delta") or {}).get("content") or c.get("text") or ""
sys.stdout.write(out)
PY
}
M="$T/$(printf 'b\377d').gguf"
if ! "${PB_BUILD:-build}/tests/test_gemma4_ref" --write-bigram-bytes "$M"; then nok "write the byte-token model"; exit 1; fi
FFFD=$(printf '\357\277\275')
E=$(printf '\303\251')

# ---- CLI ----
"$BIN" run -m "$M" -p hi --temp 0 --think -n 6 --json >"$T/r6" 2>"$T/err"
t=$(jget "$T/r6" text 2>&1)
if [ "$t" = "$FFFD" ]; then ok "run --json: an answer cut inside a character ends in U+FFFD, JSON parses"
else nok "run --json cut answer: [$t] $(od -c "$T/r6" | head -3)"; fi
"$BIN" run -m "$M" -p hi --temp 0 --think --json >"$T/r" 2>"$T/err"
t=$(jget "$T/r" text 2>&1)
if [ "$t" = "$E" ]; then ok "run --json: a character split across two tokens is whole"; else nok "run --json whole: [$t]"; fi
"$BIN" info --json "$M" >"$T/i" 2>"$T/err"
if jget "$T/i" >/dev/null 2>&1; then ok "info --json of a model with a non-UTF-8 file name parses"
else nok "info --json: $(head -c 200 "$T/i" | od -c | head -3) $(cat "$T/err")"; fi

"$BIN" bench -m "$M" -t 1 -p 4 -n 2 -r 1 --json >"$T/b" 2>"$T/err"
if jget "$T/b" >/dev/null 2>&1; then ok "bench --json of a model with a non-UTF-8 file name parses"
else nok "bench --json: $(head -c 300 "$T/b" | od -c | head -4) $(cat "$T/err")"; fi

# ---- server ----
: >"$T/out" # empty before the launch (tests/test_server_start.sh)
"$BIN" serve -m "$M" --port 0 --quiet >"$T/out" 2>"$T/serr" &
PID=$!
for i in $(seq 1 300); do grep -q listening "$T/out" && break; kill -0 $PID 2>/dev/null || break; sleep 0.1; done
PORT=$(sed -n 's/^listening //p' "$T/out")
U="http://127.0.0.1:$PORT"
post() { # file, max_tokens, stream
  curl -s -N -o "$1" -H "Content-Type: application/json" \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":$2,\"temperature\":0,\"think\":true,\"stream\":$3}" \
    "$U/v1/chat/completions"
}
post "$T/s6" 6 false
t=$(jget "$T/s6" choices.0.message.content 2>&1)
if [ "$t" = "$FFFD" ]; then ok "serve: an answer cut inside a character is U+FFFD in message.content, JSON parses"
else nok "serve cut answer: [$t] $(od -c "$T/s6" | head -4)"; fi
post "$T/s" 20 false
t=$(jget "$T/s" choices.0.message.content 2>&1)
if [ "$t" = "$E" ]; then ok "serve: message.content is the whole character"; else nok "serve whole: [$t]"; fi
post "$T/st" 20 true
t=$(sse "$T/st" 2>&1)
if [ "$t" = "$E" ]; then ok "serve stream: every event parses, the character split across tokens arrives whole"
else nok "serve stream: [$t] $(od -c "$T/st" | grep -m3 '303\|251')"; fi
post "$T/st6" 6 true
t=$(sse "$T/st6" 2>&1)
if [ "$t" = "$FFFD" ]; then ok "serve stream cut inside a character: every event parses, ends in U+FFFD"
else nok "serve stream cut: [$t]"; fi
curl -s -o "$T/m" "$U/v1/models"
if jget "$T/m" data.0.id >/dev/null 2>&1; then ok "/v1/models with a non-UTF-8 model file name parses"
else nok "/v1/models: $(od -c "$T/m" | head -3)"; fi
curl -s -o "$T/u" "$U/v1/%FF%FE"
if [ "$(jget "$T/u" error.code 2>&1)" = not_found ]; then ok "404 for a URL with %FF: the error JSON parses"
else nok "404 %FF: $(od -c "$T/u" | head -3)"; fi
curl -s -o "$T/q" -X 'GE"T' "$U/health"
if jget "$T/q" error.message >/dev/null 2>&1; then ok "405 for a method with a quote: the error JSON parses"
else nok "405 quote method: $(head -c 200 "$T/q")"; fi
kill $PID 2>/dev/null; wait $PID 2>/dev/null; PID=
exit 0
