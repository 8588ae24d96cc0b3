#!/bin/sh
# test_make_fresh.sh -- `make test` on a fresh machine: packages that deps installs must reach the flags
# of the build that follows (pkg-config is asked after deps, not when make first parsed the Makefile).
# Simulated: a pkg-config that knows poppler-glib only once a fake deps script has "installed" it.
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
real=$(command -v pkg-config)
mkdir -p "$T/bin"
cat >"$T/bin/pkg-config" <<EOS
#!/bin/sh
case "\$*" in *poppler-glib*) [ -f "$T/installed" ] || exit 1 ;; esac
exec "$real" "\$@"
EOS
chmod +x "$T/bin/pkg-config"
printf 'touch "%s/installed"\n' "$T" >"$T/deps.sh"
if PATH="$T/bin:$PATH" make --no-print-directory test BUILD="$T/build" DEPS_SCRIPT="$T/deps.sh" \
     BUILD_GOALS="$T/build/src/store/store_extract.o" TEST_RUNNER=true >"$T/log" 2>&1; then
  echo "ok - make test compiles the PDF extractor with flags found after deps ran"
else
  echo "not ok - make test on a fresh machine: flags were taken before deps installed the packages"
  sed 's/^/# /' "$T/log" | tail -5
fi
