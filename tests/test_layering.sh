#!/bin/sh
# test_layering.sh -- the rooms' dependencies point one way (docs/ARCHITECTURE.md): for each core room, the rooms its
# sources may include, and, on the built objects, that no room's object calls a function defined in a room above it
# (nm: undefined symbols of a room's objects against the symbols defined by the rooms it may not use).
BUILD=${PB_BUILD:-build}
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }

# room: the rooms it may include (itself always). json (src/json: cJSON checks for store, server and the CLI) is no
# core room: it includes no room, and no core room includes it (libpocketbrain must not depend on cJSON).
allowed() {
  case $1 in
    base) echo "" ;;
    gguf) echo "base tensor" ;;
    tensor) echo "base" ;;
    kernels) echo "base tensor" ;;
    cuda) echo "base" ;;
    model) echo "base gguf tensor kernels cuda tokenizer" ;;
    tokenizer) echo "base gguf tensor" ;;
    sampler) echo "base" ;;
    engine) echo "base gguf tensor kernels model tokenizer sampler" ;;
    json) echo "" ;;
  esac
}
ROOMS="base gguf tensor kernels cuda model tokenizer sampler engine json"
CORE="base gguf tensor kernels cuda model tokenizer sampler engine"

bad=""
for r in $ROOMS; do
  ok_rooms="$r $(allowed "$r")"
  for f in src/$r/*.c src/$r/*.h src/$r/*.cu src/$r/*.cuh; do
    [ -f "$f" ] || continue
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z_]*\)\/.*/\1/p' "$f"); do
      case " $ok_rooms " in *" $inc "*) ;; *) bad="$bad $f->$inc" ;; esac
    done
  done
done
if [ -z "$bad" ]; then ok "every core room includes only the rooms below it"; else nok "includes against the layering:$bad"; fi

# The core library is C11 + libc + libm + pthreads: none of the service rooms' libraries in its sources.
bad=""
for r in $CORE; do
  for f in src/$r/*.c src/$r/*.h src/$r/*.cu src/$r/*.cuh; do
    [ -f "$f" ] || continue
    grep -Eq '^[[:space:]]*#[[:space:]]*include[[:space:]]*<(cjson/|sqlite3\.h|microhttpd\.h|curl/)' "$f" && bad="$bad $f"
  done
done
if [ -z "$bad" ]; then ok "no core room includes cJSON, SQLite, libmicrohttpd or libcurl"; else
  nok "service libraries included by the core:$bad"; fi

# Symbols: what the objects of a room define and what they leave undefined.
# (objects whose source is gone -- a file moved to another room -- are left-overs of an older build: skipped)
objs() { for o in "$BUILD"/src/$1/*.o; do b=${o##*/}; b=${b%.o}; [ -f "src/$1/$b.c" ] || [ -f "src/$1/$b.cu" ] && echo "$o"; done; }
defined() { for o in $(objs "$1"); do nm -g --defined-only "$o"; done | awk '{print $3}' | sort -u; }
undef() { for o in $(objs "$1"); do nm -u "$o"; done | awk '{print $NF}' | sort -u; }
if ! ls "$BUILD"/src/tensor/*.o >/dev/null 2>&1 || ! ls "$BUILD"/src/kernels/*.o >/dev/null 2>&1; then
  nok "no objects under $BUILD/src (build first)"
  exit 0
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
for r in $ROOMS; do defined "$r" >"$T/def.$r"; undef "$r" >"$T/und.$r"; done
bad=""
for r in $ROOMS; do
  ok_rooms="$r $(allowed "$r")"
  for above in $ROOMS; do
    case " $ok_rooms " in *" $above "*) continue ;; esac
    hits=$(comm -12 "$T/und.$r" "$T/def.$above" | tr '\n' ' ')
    [ -n "$hits" ] && bad="$bad [$r calls $above: $hits]"
  done
done
if [ -z "$bad" ]; then ok "no room's objects call a room above it (nm)"; else nok "calls against the layering:$bad"; fi
