#!/bin/sh
# test_server_kb.sh -- `serve --db KB --faq FAQ`: "use my documents" answers carry sources pointing to the
# right files; with --fallback-after the FAQ answer comes back clearly marked as a fallback.
BIN=${PB_BIN:-build/pocketbrain}
MODEL=${PB_TEST_MODEL:-models/default.gguf}
[ -f "$MODEL" ] || MODEL=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
OUT=$(mktemp -d)
PID=
trap 'kill $PID 2>/dev/null; rm -rf "$OUT"' EXIT
mkdir -p "$OUT/docs"
printf '# Lighthouses\n\nThe Pharos of Alexandria was a lighthouse built by the Ptolemaic Kingdom.\n' >"$OUT/docs/pharos.md"
printf '# Volcanoes\n\nMauna Loa on Hawaii is one of the largest shield volcanoes on Earth.\n' >"$OUT/docs/volcano.md"
printf '# Bread\n\nSourdough bread rises thanks to wild yeast and lactic acid bacteria.\n' >"$OUT/docs/bread.md"
"$BIN" ingest --db "$OUT/kb.sqlite" -q "$OUT/docs" >"$OUT/ingest.log" 2>&1 && echo "ok - ingest 3 documents" || echo "not ok - ingest: $(cat "$OUT/ingest.log")"
"$BIN" faq --db "$OUT/faq.sqlite" add "How do I reset my password?" "Open Settings, then Account, then Reset password." >/dev/null 2>&1 \
  && echo "ok - faq add" || echo "not ok - faq add"

start() { # args...
  # emptied here, before the launch: the wait below must not read the previous server's "listening" line (the
  # child truncates the files only once it runs, which on a loaded machine can come after the first grep)
  : >"$OUT/stdout"; : >"$OUT/stderr"
  "$BIN" serve -m "$MODEL" --port 0 "$@" >"$OUT/stdout" 2>"$OUT/stderr" &
  PID=$!
  for i in $(seq 1 600); do grep -q listening "$OUT/stdout" && break; kill -0 $PID 2>/dev/null || break; sleep 0.1; done # up to 60 s
  PORT=$(sed -n 's/^listening //p' "$OUT/stdout")
  URL=http://127.0.0.1:$PORT
  [ -n "$PORT" ] || echo "not ok - server did not start: $(cat "$OUT/stderr")"
}
stop() { kill -TERM $PID; wait $PID; }

start --db "$OUT/kb.sqlite" --faq "$OUT/faq.sqlite"
curl -s "$URL/health" | grep -q '"knowledge_base":true' && echo "ok - /health tells the web UI there is a knowledge base" \
  || echo "not ok - /health: $(curl -s "$URL/health")"
curl -s "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Which lighthouse did the Ptolemaic Kingdom build?"}],"use_documents":true,"max_tokens":8}' >"$OUT/r1"
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const s = r.sources || [];
console.log((s.length >= 1 && /pharos\.md/.test(s[0].source) ? "ok" : "not ok") + " - first source is pharos.md: " + JSON.stringify(s.map(x => x.location)));
console.log((s.every(x => typeof x.num === "number" && x.location) ? "ok" : "not ok") + " - sources are numbered with locations");
console.log((r.choices && typeof r.choices[0].message.content === "string" ? "ok" : "not ok") + " - grounded answer returned");
' "$OUT/r1"
curl -sN "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Tell me about Mauna Loa volcano"}],"use_documents":true,"stream":true,"max_tokens":4}' >"$OUT/r2"
grep -q '"sources":\[{"num":1,"source":"[^"]*volcano.md"' "$OUT/r2" && echo "ok - streamed answer carries its sources first" \
  || echo "not ok - streamed sources: $(head -c 400 "$OUT/r2")"
stop

# FAQ fallback: no token within 0.1 ms -> the FAQ answer, marked
start --faq "$OUT/faq.sqlite" --fallback-after 0.0001
curl -s "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"how can I reset my password"}],"max_tokens":8}' >"$OUT/r3"
grep -q '\[FAQ fallback\] Open Settings, then Account, then Reset password.' "$OUT/r3" && grep -q '"pocketbrain_fallback":"faq"' "$OUT/r3" \
  && echo "ok - FAQ fallback answer, clearly marked" || echo "not ok - fallback: $(cat "$OUT/r3")"
curl -sN "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"reset password please"}],"stream":true,"max_tokens":8}' >"$OUT/r4"
grep -q 'FAQ fallback' "$OUT/r4" && grep -q 'data: \[DONE\]' "$OUT/r4" && echo "ok - streamed FAQ fallback ends cleanly" \
  || echo "not ok - streamed fallback: $(cat "$OUT/r4")"
curl -s "$URL/metrics" | grep -q '^pocketbrain_fallbacks_total [2-9]' && echo "ok - fallbacks counted in /metrics" || echo "not ok - fallback metric"
curl -s "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"zebra quantum"}],"max_tokens":3}' >"$OUT/r5"
grep -q 'FAQ fallback' "$OUT/r5" && echo "not ok - no FAQ match must not fall back: $(cat "$OUT/r5")" || echo "ok - without a FAQ match the model answers"
stop
[ $? = 0 ] && echo "ok - clean exit" || echo "not ok - exit status"
# a mistyped --db is an error, never a silently created empty knowledge base
"$BIN" serve -m "$MODEL" --port 0 --db "$OUT/typo.sqlite" >/dev/null 2>"$OUT/err"; rc=$?
[ $rc = 1 ] && [ ! -e "$OUT/typo.sqlite" ] && grep -q "no knowledge base at '$OUT/typo.sqlite'" "$OUT/err" \
  && echo "ok - serve --db on a missing file: exit 1, clear message, nothing created" || echo "not ok - missing --db: rc=$rc $(cat "$OUT/err")"

# the sources get what the slot's context leaves (not a fixed half of the training context): with -c 256 a long
# document is cut to fit and the answer comes back; a max_tokens that leaves no room is a 400 naming the field
mkdir -p "$OUT/long"
i=0; : >"$OUT/long/lighthouse.md"
while [ $i -lt 40 ]; do
  echo "The Pharos lighthouse of Alexandria guided sailors into the harbor for centuries, line $i." >>"$OUT/long/lighthouse.md"
  i=$((i + 1))
done
"$BIN" ingest --db "$OUT/long.sqlite" -q "$OUT/long" >/dev/null 2>&1
start --db "$OUT/long.sqlite" -c 256
code=$(curl -s -o "$OUT/r6" -w '%{http_code}' "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"What guided sailors into the harbor of Alexandria?"}],"use_documents":true,"max_tokens":16}')
[ "$code" = 200 ] && grep -q '"sources":\[{"num":1' "$OUT/r6" && echo "ok - -c 256: sources cut to the context, answer 200 (was a 400: half the training context for sources)" \
  || echo "not ok - -c 256 with sources: $code $(head -c 300 "$OUT/r6")"
code=$(curl -s -o "$OUT/r7" -w '%{http_code}' "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"What guided sailors?"}],"use_documents":true,"max_tokens":200}')
[ "$code" = 400 ] && grep -q 'no room for sources' "$OUT/r7" && echo "ok - max_tokens leaving no room for sources: 400 naming it" \
  || echo "not ok - no room: $code $(head -c 300 "$OUT/r7")"
stop

# a knowledge base kept up to date while serve runs: an ingest beside it adds a document, edits one and renames one;
# the next request finds the new text at its current place (the corpus makes it large enough for the C scorer, whose
# cached row lengths missed every chunk committed by another process: new and edited documents were not found)
mkdir -p "$OUT/live"
cp tests/data/kb/corpus/sched_setaffinity.2.md tests/data/kb/corpus/pipe.7.md "$OUT/live/"
"$BIN" ingest --db "$OUT/live.sqlite" -q tests/data/kb/corpus "$OUT/live" >/dev/null 2>&1
start --db "$OUT/live.sqlite"
ask_live() { # question -> the first source's location
  curl -s "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}],\"use_documents\":true,\"max_tokens\":2}" |
    node -e 'let d="";process.stdin.on("data",c=>d+=c).on("end",()=>{const s=JSON.parse(d).sources||[];console.log(s.length?s[0].location:"none")})'
}
ask_live "zorblax fennimore" >/dev/null # the statistics are cached by now
printf '# Zorblax\n\nThe zorblax fennimore is a flux capacitor.\n' >"$OUT/live/zorblax.md"
printf '# Pipes\n\nA quuxified pipe carries wibble.\n' >"$OUT/live/pipe.7.md"
"$BIN" ingest --db "$OUT/live.sqlite" -q "$OUT/live" >/dev/null 2>&1
loc=$(ask_live "zorblax fennimore")
[ "$loc" = "$OUT/live/zorblax.md:1-3" ] && echo "ok - serve finds a document ingested while it runs" || echo "not ok - new document while serving: $loc"
loc=$(ask_live "quuxified wibble")
[ "$loc" = "$OUT/live/pipe.7.md:1-3" ] && echo "ok - serve finds the edited text of a re-ingested document" || echo "not ok - edited document while serving: $loc"
# a source whose file was edited or deleted after its ingest says so: the answer quotes text the file no longer has
ask_state() { # question -> the first source's location and file_state
  curl -s "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}],\"use_documents\":true,\"max_tokens\":2}" |
    node -e 'let d="";process.stdin.on("data",c=>d+=c).on("end",()=>{const s=JSON.parse(d).sources||[];console.log(s.length?s[0].location+" "+s[0].file_state:"none")})'
}
st=$(ask_state "zorblax fennimore")
[ "$st" = "$OUT/live/zorblax.md:1-3 unchanged" ] || echo "not ok - file_state of an unchanged source: $st"
printf '# Zorblax\n\nNo longer about capacitors at all.\n' >"$OUT/live/zorblax.md"
st1=$(ask_state "zorblax fennimore"); rm "$OUT/live/zorblax.md"; st2=$(ask_state "zorblax fennimore")
[ "$st1" = "$OUT/live/zorblax.md:1-3 changed" ] && [ "$st2" = "$OUT/live/zorblax.md:1-3 gone" ] \
  && echo "ok - a source's file edited, then deleted, since its ingest: file_state changed, then gone" || echo "not ok - file_state: '$st1' '$st2'"
stop

# the knowledge-base file itself replaced while serve runs: a backup renamed over it, or deleted and made anew by ingest.
# The server read the old file (its open inode) until a restart. And an ingest beside it left its frames in
# kb.sqlite-wal, which SQLite then replayed over the backup put at that name: once serve stopped, search found the old
# knowledge base again, now written into the backup's file
mkdir -p "$OUT/swap" "$OUT/bk"
cp tests/data/kb/corpus/*.md "$OUT/swap/"
printf '# Quokka\n\nThe quokka backup note.\n' >"$OUT/bk/quokka.md"
printf '# Narwhal\n\nThe narwhal fresh note.\n' >"$OUT/bk/narwhal.md"
"$BIN" ingest --db "$OUT/backup.sqlite" -q "$OUT/bk/quokka.md" >/dev/null 2>&1
"$BIN" ingest --db "$OUT/swap.sqlite" -q "$OUT/bk/narwhal.md" >/dev/null 2>&1
start --db "$OUT/swap.sqlite"
"$BIN" ingest --db "$OUT/swap.sqlite" -q "$OUT/swap" >/dev/null 2>&1 & ipid=$!
i=0; while kill -0 $ipid 2>/dev/null && [ $i -lt 600 ]; do ask_live "pipe capacity" >/dev/null; i=$((i + 1)); done # read while it writes
wait $ipid
cp "$OUT/backup.sqlite" "$OUT/restore.tmp"; mv "$OUT/restore.tmp" "$OUT/swap.sqlite"
loc=$(ask_live "quokka backup"); old=$(ask_live "pipe capacity atomic")
[ "$loc" = "$OUT/bk/quokka.md:1-3" ] && [ "$old" = none ] && grep -q "note: '$OUT/swap.sqlite' was replaced by another file: reading the new one" "$OUT/stderr" \
  && echo "ok - a backup renamed over the kb file under serve: the next request reads the backup, the log says so" || echo "not ok - restored backup: '$loc' '$old' $(tail -3 "$OUT/stderr")"
stop
n=$("$BIN" search --db "$OUT/swap.sqlite" "pipe capacity quokka" --json -k 10 | grep -o '"rank":' | wc -l)
[ "$n" = 1 ] && echo "ok - the restored backup stays the backup once serve stops ($n hit)" || echo "not ok - search after the restore and the server's stop: $n hits"

start --db "$OUT/swap.sqlite"
ask_live "quokka backup" >/dev/null
rm "$OUT/swap.sqlite"
health=$(curl -s "$URL/health"); loc=$(ask_live "quokka backup")
echo "$health" | grep -q "\"knowledge_base_note\":\"'$OUT/swap.sqlite' is gone (No such file or directory): answering from the one read before" && [ "$loc" = "$OUT/bk/quokka.md:1-3" ] \
  && echo "ok - kb file deleted under serve: /health says so, answers come from the one read before" || echo "not ok - deleted kb: $loc $health"
"$BIN" ingest --db "$OUT/swap.sqlite" -q "$OUT/bk/narwhal.md" >/dev/null 2>&1
loc=$(ask_live "narwhal fresh"); old=$(ask_live "quokka backup"); health=$(curl -s "$URL/health")
[ "$loc" = "$OUT/bk/narwhal.md:1-3" ] && [ "$old" = none ] && ! echo "$health" | grep -q knowledge_base_note \
  && echo "ok - kb file made anew by ingest under serve: the next request reads the new one" || echo "not ok - re-created kb: '$loc' '$old' $health"
printf 'not a database\n' >"$OUT/junk"; mv "$OUT/junk" "$OUT/swap.sqlite"
code=$(curl -s -o "$OUT/r8" -w '%{http_code}' "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"narwhal"}],"use_documents":true,"max_tokens":2}')
[ "$code" = 500 ] && grep -q "the knowledge base could not be searched: replaced by a file that cannot be read: store '$OUT/swap.sqlite': not a knowledge base" "$OUT/r8" \
  && curl -s "$URL/health" | grep -q '"knowledge_base_note":"replaced by a file that cannot be read' \
  && echo "ok - a kb file replaced by one that is no knowledge base: the request and /health say so" || echo "not ok - junk kb: $code $(cat "$OUT/r8")"
stop
