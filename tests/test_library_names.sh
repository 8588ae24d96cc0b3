#!/bin/sh
# test_library_names.sh -- every command that takes a model accepts a library name ($PB_MODELS) as well as a
# path: run, chat, bench, info, tokenize, detokenize, logits, perplexity (-m and --kl-model), ingest / search /
# ask (-m and --embed-model), quantize, verify; an unknown name fails clearly. (serve: tests/node.)
PB=${PB_BIN:-build/pocketbrain}
SHARED=${PB_SHARED:-../shared}
P8="$SHARED/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf"
P4="$SHARED/fixtures/peer/model/gemma2-tiny-v.q4_k_m.gguf"
CATALOG="$(pwd)/models/catalog.json" # the source tree's catalog (the tests below run in a temporary directory)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; }
check() { # description, then a command whose status decides
  d=$1; shift
  if "$@"; then ok "$d"; else nok "$d"; sed 's/^/# /' "$T/err" | tail -5; fi
}
run() { "$@" >"$T/out" 2>"$T/err"; rc=$?; }
has() { grep -q -- "$1" "$2"; }
num() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p" "$2"; }

if [ ! -x "$PB" ]; then nok "CLI binary $PB missing"; exit 1; fi
if [ ! -r "$P8" ] || [ ! -r "$P4" ] || [ ! -r models/default.gguf ]; then
  if [ "$CI" = true ]; then nok "fixtures missing ($P8, $P4, models/default.gguf)"; exit 1; fi
  echo "# skip: peer fixtures not found"; ok "skipped (no fixtures)"; exit 0
fi

# an empty library (the directory does not even exist): models says how to get one
export PB_MODELS="$T/lib"
run "$PB" models
check "models on an empty library: exit 0 and how to get a model" [ "$rc" = 0 ]
check "models on an empty library names the directory and pull" has "no models in $T/lib yet; get one with: pocketbrain pull" "$T/out"
run "$PB" models --json
check "models --json on an empty library: an empty list" has '"models":[[:space:]]*\[\]' "$T/out"

# where the library is: $PB_MODELS, else $XDG_DATA_HOME/pocketbrain/models, else ~/.local/share/pocketbrain/models
PB_MODELS= XDG_DATA_HOME="$T/xdg" "$PB" models --json >"$T/out" 2>"$T/err"
check "library location: \$XDG_DATA_HOME/pocketbrain/models when PB_MODELS is empty" has "\"library\":[[:space:]]*\"$T/xdg/pocketbrain/models\"" "$T/out"
env -u PB_MODELS -u XDG_DATA_HOME HOME="$T/home" "$PB" models --json >"$T/out" 2>"$T/err"
check "library location: ~/.local/share/pocketbrain/models without either" has "\"library\":[[:space:]]*\"$T/home/.local/share/pocketbrain/models\"" "$T/out"
# HOME unset (cron, systemd, env -i): the account's home, never a library relative to the working directory
# (was "./.local/share/...": pull put the model under one directory, run from another did not find it)
PBA=$(cd "$(dirname "$PB")" && pwd)/$(basename "$PB")
(cd "$T" && env -u PB_MODELS -u XDG_DATA_HOME -u HOME "$PBA" models --json) >"$T/out" 2>"$T/err"
check "library location without \$HOME: an absolute path" has "\"library\":[[:space:]]*\"/[^\"]*/.local/share/pocketbrain/models\"" "$T/out"
env -u PB_MODELS XDG_DATA_HOME=rel HOME="$T/home" "$PB" models --json >"$T/out" 2>"$T/err"
check "a relative \$XDG_DATA_HOME is ignored (the XDG spec), as the cache's is" has "\"library\":[[:space:]]*\"$T/home/.local/share/pocketbrain/models\"" "$T/out"
# a library that is not a directory: named, exit 1 (was "no models in FILE yet", exit 0)
printf 'x\n' >"$T/afile"
PB_MODELS="$T/afile" "$PB" models >"$T/out" 2>"$T/err"; rc=$?
check "PB_MODELS naming a file: models exits 1 naming it (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q \"cannot read the model library '$T/afile': Not a directory (set by \\\$PB_MODELS)\" '$T/err'"
PB_MODELS="$T/afile" "$PB" models --json >"$T/out" 2>"$T/err"; rc=$?
check "PB_MODELS naming a file: models --json exits 1 too (rc=$rc)" [ "$rc" = 1 ]

mkdir -p "$T/lib"
cp models/default.gguf "$T/lib/tiny.gguf"
cp "$P8" "$T/lib/p8.gguf"
cp "$P4" "$T/lib/p4.gguf"
cd "$T" || exit 1 # no models/default.gguf here: a name that did not resolve cannot fall back to it
case "$PB" in /*) ;; *) PB="$OLDPWD/$PB" ;; esac
echo 'the quick brown fox jumps over the lazy dog and then it runs away' >t1.txt
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do cat t1.txt; done >text.txt

run "$PB" run -m tiny -n 3 --temp 0 -p Hello
check "run -m NAME (rc=$rc)" [ "$rc" = 0 ]
echo Hello | "$PB" chat -m tiny -n 3 >"$T/out" 2>"$T/err"
rc=$?
check "chat -m NAME (rc=$rc)" [ "$rc" = 0 ]
run "$PB" bench -m tiny -p 8 -n 2 -r 1 -t 1 --json
check "bench -m NAME (rc=$rc)" [ "$rc" = 0 ]
run "$PB" info p8
check "info NAME reads the library file" has "file: *$T/lib/p8.gguf" "$T/out"
run "$PB" tokenize -m tiny --ids hello
check "tokenize -m NAME (rc=$rc)" [ "$rc" = 0 ]
ids=$(tr -d '[] \n' <"$T/out" | tr , ' ')
run "$PB" detokenize -m tiny $ids
check "detokenize -m NAME gives the text back ($(cat "$T/out"))" has "hello" "$T/out"
run "$PB" tokenize -m p8 --ids --no-bos "the quick brown fox"
tr -d '[] \n' <"$T/out" | tr , '\n' | awk '{ printf "%c%c%c%c", $1 % 256, int($1 / 256) % 256, 0, 0 }' >ids.bin
run "$PB" logits -m p8 --tokens ids.bin -o l8.f32
check "logits -m NAME (rc=$rc)" [ "$rc" = 0 ]
"$PB" logits -m "$T/lib/p8.gguf" --tokens ids.bin -o l8p.f32 2>/dev/null
check "logits -m NAME = logits -m PATH" cmp -s l8.f32 l8p.f32

# two library names in one command: each must stay its own model (-m p8 --kl-model p4 is not p4 against p4)
run "$PB" perplexity -m p8 --kl-model p4 -f text.txt --ctx 64 --chunks 2 --json
cp "$T/out" names.json
check "perplexity -m NAME --kl-model NAME (rc=$rc)" [ "$rc" = 0 ]
"$PB" perplexity -m "$T/lib/p8.gguf" --kl-model "$T/lib/p4.gguf" -f text.txt --ctx 64 --chunks 2 --json >paths.json 2>/dev/null
kn=$(num kl_mean names.json)
kp=$(num kl_mean paths.json)
check "perplexity with two library names = with two paths (KL $kn vs $kp, not 0)" \
  awk -v a="$kn" -v b="$kp" 'BEGIN { exit !(a != "" && a == b && a > 1e-4) }'

run "$PB" ingest --db kb.sqlite -m tiny --embed-model tiny text.txt
check "ingest -m NAME --embed-model NAME (rc=$rc)" [ "$rc" = 0 ]
run "$PB" search --db kb.sqlite --embed-model tiny fox
check "search --embed-model NAME (rc=$rc)" [ "$rc" = 0 ]
run "$PB" ask --db kb.sqlite -m p8 --embed-model tiny --dry-run "what does the fox do?"
check "ask -m NAME --embed-model NAME --dry-run (rc=$rc)" [ "$rc" = 0 ]

run "$PB" quantize p8 q40.gguf Q4_0 --allow-requantize
check "quantize NAME OUT MIX (rc=$rc)" [ "$rc" = 0 ]
run "$PB" verify tiny
check "verify NAME of a file put there by hand: structure and hash (rc=$rc)" [ "$rc" = 0 ]
sha=$(sed -n 's/^sha256: \([0-9a-f]*\) .*/\1/p' "$T/out")
printf '{"name": "tiny", "sha256": "%s", "sha256_checked_against": "--sha256"}\n' "$sha" >"$T/lib/tiny.json"
run "$PB" verify tiny
check "verify NAME checks the manifest's sha256" has "matches the expected value" "$T/out"
printf '{"name": "tiny", "sha256": "%s"}\n' "$(echo "$sha" | tr 0-9a-f 1-9a-f0)" >"$T/lib/tiny.json"
run "$PB" verify tiny
check "verify NAME: a file that no longer matches its manifest fails (rc=$rc)" [ "$rc" = 1 ]
check "verify NAME: the mismatch is named" has "SHA-256 mismatch" "$T/err"

# a manifest whose numbers are garbled (hand-edited): context -5 and size 1e30 were shown / cast as they were (a
# negative context in `models`, undefined behaviour in the size's cast); now the file's own facts are shown
rm -f "$T/lib/tiny.json"
run "$PB" models --json
tiny_of() { node -e 'const m = JSON.parse(require("fs").readFileSync(0, "utf8")).models.find((x) => x.name === "tiny");
console.log(m ? m.context + " " + m.architecture : "none")' <"$T/out"; }
c0=$(tiny_of | cut -d" " -f1)
printf '{"name": "tiny", "context": -5, "size": 1e30}\n' >"$T/lib/tiny.json"
run "$PB" models --json
c1=$(tiny_of)
check "models: a manifest's context -5 gives way to the file's ($c0 gemma2), got '$c1'" [ "$c0" -gt 0 -a "$c1" = "$c0 gemma2" ]
rm -f "$T/lib/tiny.json"

for c in "run -m nope -p hi" "bench -m nope" "info nope" "tokenize -m nope hi" "detokenize -m nope 2" \
  "logits -m nope --tokens ids.bin -o x.f32" "perplexity -m nope -f text.txt" "quantize nope x.gguf Q4_0" \
  "ingest --db kb.sqlite --embed-model nope text.txt" "search --db kb.sqlite --embed-model nope fox" \
  "ask --db kb.sqlite -m nope --dry-run q" "serve -m nope --port 0"; do
  # shellcheck disable=SC2086
  run "$PB" $c
  check "$c: exit 1 naming the library (rc=$rc)" has "model 'nope' is neither a file nor a model in the library ($T/lib)" "$T/err"
done
run "$PB" verify nope
check "verify nope: clear error (rc=$rc)" [ "$rc" = 1 ]

# a $PB_CATALOG with text after its JSON object is refused, naming where (cJSON alone stopped at the object's end and
# listed the catalog); the same file without the text lists
PB_CATALOG="$CATALOG" "$PB" pull --list >"$T/out" 2>"$T/err"; rc=$?
check "pull --list with \$PB_CATALOG: exit 0 (rc=$rc)" [ "$rc" = 0 -a -s "$T/out" ]
{ cat "$CATALOG"; printf ' junk\n'; } >"$T/catalog.json"
PB_CATALOG="$T/catalog.json" "$PB" pull --list >"$T/out" 2>"$T/err"; rc=$?
check "pull --list with text after the catalog's JSON: exit 1 naming it (rc=$rc: $(cat "$T/err"))" \
  [ "$rc" = 1 -a -n "$(grep "catalog $T/catalog.json is not valid JSON: more text after the JSON value" "$T/err")" ]

# rm reads all its options before it removes anything: `rm NAME --help` printed the help after removing NAME, and a
# mistyped flag was taken for a model's name
cp "$T/lib/tiny.gguf" "$T/lib/victim.gguf"
run "$PB" rm victim --help
check "rm NAME --help: exit 0, prints the usage, removes nothing (rc=$rc)" \
  [ "$rc" = 0 -a -f "$T/lib/victim.gguf" -a -n "$(grep 'usage: pocketbrain rm' "$T/out")" ]
run "$PB" rm victim --frce
check "rm NAME --frce: exit 2 naming the flag, removes nothing (rc=$rc)" \
  [ "$rc" = 2 -a -f "$T/lib/victim.gguf" -a -n "$(grep "unknown flag '--frce' (nothing was removed)" "$T/err")" ]
run "$PB" rm --
check "rm -- without a name: exit 2 (rc=$rc)" [ "$rc" = 2 -a -f "$T/lib/victim.gguf" ]
run "$PB" rm -- victim
check "rm -- NAME removes it (rc=$rc)" [ "$rc" = 0 -a ! -e "$T/lib/victim.gguf" ]
