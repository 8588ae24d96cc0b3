#!/bin/sh
# make_corpus.sh -- rebuilds tests/data/kb/corpus/ (the knowledge-base evaluation set) from the Linux
# man-pages installed by Debian's manpages + manpages-dev packages (sections 2 and 7): each page is
# rendered with groff, converted to Markdown (section names become "## " headings) and kept when it
# carries an SPDX license line. LICENSES.tsv records that line per file, NOTICES.txt each page's
# copyright/permission header (kept with the modified copies, as the licenses ask), and COPYING.manpages
# is Debian's copyright file with the full license texts. Deterministic for one manpages version
# (6.03-2 here). Needs groff, col, dpkg. Usage: sh tests/data/kb/make_corpus.sh  (from the repo root)
set -e
OUT=tests/data/kb/corpus
MAX_BYTES=${MAX_BYTES:-16000}
rm -rf "$OUT"; mkdir -p "$OUT"
printf 'file\tsource\tspdx_license\n' > tests/data/kb/LICENSES.tsv
printf 'Copyright and permission headers of the man-pages in corpus/ (from their roff sources).\n' \
  > tests/data/kb/NOTICES.txt
cp /usr/share/doc/manpages/copyright tests/data/kb/COPYING.manpages
for sec in 2 7; do
  for f in /usr/share/man/man$sec/*.gz; do
    [ -L "$f" ] && continue
    zcat "$f" | head -c 3 | grep -q '^\.so' && continue
    lic=$(zcat "$f" | grep -m1 -o 'SPDX-License-Identifier: [A-Za-z0-9.+-]*' | sed 's/.*: //') || true
    [ -n "$lic" ] || continue
    name=$(basename "$f" .gz)            # e.g. getcwd.2
    page=${name%.*}; s=${name##*.}
    md="$OUT/$page.$s.md"
    # -rHY=0: no hyphenation (search sees whole words); -rcR=1: one continuous page
    zcat "$f" | groff -t -man -Tutf8 -rHY=0 -rLL=78n -rcR=1 -P-c 2>/dev/null | col -bx | awk -v title="$page($s)" '
      NR == 1 { print "# " title; next }                          # the running header line
      /^Linux man-pages [0-9]/ { next }                            # the footer line
      /^[A-Z][A-Z0-9 ,\/-]*$/ { print "## " $0; next }            # section: NAME, DESCRIPTION, ...
      /^   [A-Z][A-Za-z0-9 ,()_-]*$/ && length($0) < 60 { sub(/^ +/, ""); print "### " $0; next }
      { sub(/^       /, ""); print }                               # the body indent
    ' | cat -s > "$md"
    if [ "$(wc -c < "$md")" -gt "$MAX_BYTES" ]; then rm -f "$md"; continue; fi
    { printf '\n==> %s <==\n' "$page.$s.md"; zcat "$f" | sed -n '/^[^.]/q; /^\.\\"/p' | sed 's/^\.\\" \{0,1\}//'; } \
      >> tests/data/kb/NOTICES.txt
    pkg=$(dpkg -S "$f" 2>/dev/null | cut -d: -f1); printf '%s\t%s\t%s\n' "$page.$s.md" "${pkg:-manpages} ${f#/usr/share/man/} (Debian)" "$lic" >> tests/data/kb/LICENSES.tsv
  done
done
echo "corpus: $(ls "$OUT" | wc -l) documents, $(du -sk "$OUT" | cut -f1) KiB"
