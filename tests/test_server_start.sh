#!/bin/sh
# test_server_start.sh -- the shell tests that start `pocketbrain serve` in the background and wait for its
# "listening PORT" line in a file empty that file in the test's own shell before each launch. The launched child
# truncates it only once it runs, which on a loaded machine can come after the wait's first grep: a script that
# starts a second server into the same file then read the first server's line, found the port gone by the time it
# parsed it, and failed 4 checks ("server did not start" with an empty stderr, test_server_kb under make test).
# A source scan for the class, over tests/*.sh: every line that launches into a file the script polls for
# "listening" must follow a `: >"FILE"` within the 4 lines above it.
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
