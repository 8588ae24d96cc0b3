#!/bin/sh
# example_check.sh -- runs an examples/ program on the default model and checks it produced text; and checks that
# the C code blocks of the API docs are the programs that run here, so the docs cannot drift from code that compiles:
#   - an example marks a doc block with a line  /* docs/API.md "Heading" */  and the line  /* end of docs/API.md
#     "Heading" */; the lines between must be the first ```c block under that heading, line for line (leading and
#     trailing blanks aside); a doc line that is only  /* ... */  stands for any lines of the example (a thread loop);
#   - every ```c block of docs/API.md and docs/MOBILE.md must be marked by some example (one block per heading).
# The example runs in a temporary directory (it may write files: api_tour.c saves chat.pbs). Usage: BINARY
# Before models/default.gguf exists, the tiny peer model (random weights) stands in for it.
bin=$1
name=$(basename "$bin")
src=examples/$name.c
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
model=models/default.gguf
if [ ! -f "$model" ]; then
  model=${PB_SHARED:-../shared}/fixtures/peer/model/gemma2-tiny-v.q8_0.gguf
  echo "# models/default.gguf not found; using $model"
fi
case "$model" in /*) ;; *) model=$(pwd)/$model ;; esac
case "$bin" in /*) ;; *) bin=$(pwd)/$bin ;; esac
out=$(cd "$T" && "$bin" "$model" "What does 'harbor' mean?" 2>&1); rc=$?
if [ $rc = 0 ] && [ -n "$out" ]; then echo "ok - $name printed an answer"; else echo "not ok - $name rc=$rc: $out"; fi

# the first ```c block after the heading line that ends with the heading text (doc, heading) -> stdout
doc_block() {
  awk -v h="$2" '
    /^#/ { n = length(h); if (length($0) >= n && substr($0, length($0) - n + 1) == h) found = 1; next }
    found && !inblock && /^```c[ \t]*$/ { inblock = 1; next }
    inblock && /^```/ { exit }
    inblock { print }' "$1"
}
# the lines of src between the marks of (doc, heading) -> stdout
marked() {
  awk -v mark_open="/* $2 \"$3\" */" -v mark_end="/* end of $2 \"$3\" */" '
    { t = $0; sub(/^[ \t]+/, "", t); sub(/[ \t]+$/, "", t) }
    t == mark_end { exit }
    inside { print }
    t == mark_open { inside = 1 }' "$1"
}
# doc block file, example lines file: exit 0 when they agree; else prints the first doc line that does not match
agree() {
  awk '
    { t = $0; sub(/^[ \t]+/, "", t); sub(/[ \t]+$/, "", t) }
    FNR == NR { if (t != "") doc[nd++] = t; next }
    { if (t != "") ex[ne++] = t }
    END {
      i = 0; j = 0
      while (i < nd) {
        if (doc[i] == "/* ... */") {          # any example lines, up to the next doc line
          i++
          if (i == nd) { j = ne; break }
          while (j < ne && ex[j] != doc[i]) j++
          if (j == ne) { print "doc line \"" doc[i] "\" not found after the ... in the example"; exit 1 }
          continue
        }
        if (j >= ne || ex[j] != doc[i]) {
          print "doc line \"" doc[i] "\", example: \"" (j < ne ? ex[j] : "(end)") "\""; exit 1
        }
        i++; j++
      }
      if (j < ne) { print "example line \"" ex[j] "\" is not in the doc block"; exit 1 }
      if (nd == 0) { print "no doc block"; exit 1 }
    }' "$1" "$2"
}

# this example's marked blocks
if [ -f "$src" ]; then
  sed -n 's|^[ \t]*/\* \(docs/[A-Za-z0-9_.-]*\.md\) "\([^"]*\)" \*/[ \t]*$|\1\t\2|p' "$src" | while IFS='	' read -r doc head; do
    doc_block "$doc" "$head" >"$T/doc.txt"
    marked "$src" "$doc" "$head" >"$T/ex.txt"
    if why=$(agree "$T/doc.txt" "$T/ex.txt"); then
      echo "ok - $name runs the C block of $doc \"$head\" ($(grep -c . "$T/doc.txt") lines, as written there)"
    else echo "not ok - $doc \"$head\" and $src differ: $why"; fi
  done
fi

# every C block of the API docs is some example's
missing=""
for doc in docs/API.md docs/MOBILE.md; do
  heads=$(awk '/^#/ { h = $0; sub(/^#+[ \t]*/, "", h) } /^```c[ \t]*$/ { print h }' "$doc")
  [ -n "$heads" ] || continue
  dups=$(printf '%s\n' "$heads" | sort | uniq -d)
  [ -z "$dups" ] || missing="$missing [$doc: two C blocks under \"$dups\"]"
  while IFS= read -r head; do
    grep -qF "/* $doc \"$head\" */" examples/*.c || missing="$missing [$doc \"$head\"]"
  done <<EOF
$heads
EOF
done
if [ -z "$missing" ]; then echo "ok - every C block of docs/API.md and docs/MOBILE.md is an example's (checked by $name's run)"
else echo "not ok - C blocks that no example runs:$missing"; fi
