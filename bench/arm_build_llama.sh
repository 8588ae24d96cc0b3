#!/bin/sh
# arm_build_llama.sh -- cross-builds llama.cpp's llama-bench for ARM64 (static, armv8.2-a+dotprod+i8mm)
# under /tmp for bench/arm_compare.sh. Never builds into the repo; the source is read, not modified.
# Usage: sh bench/arm_build_llama.sh [SRC] [BUILD]   (default /tmp/llama.cpp /tmp/llama.cpp/build-arm)
# Prints the path of the built llama-bench; exit status 1 when the build fails.
SRC=${1:-${LLAMA_SRC:-/tmp/llama.cpp}}
OUT=${2:-${LLAMA_ARM_BUILD:-$SRC/build-arm}}
BIN="$OUT/bin/llama-bench"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
command -v aarch64-linux-gnu-g++ >/dev/null || { echo "arm_build_llama: needs g++-aarch64-linux-gnu" >&2; exit 1; }
[ -f "$SRC/CMakeLists.txt" ] || { echo "arm_build_llama: no llama.cpp source at $SRC" >&2; exit 1; }
ARCHF="armv8.2-a+dotprod+i8mm"
cmake -S "$SRC" -B "$OUT" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
  -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
  -DCMAKE_C_FLAGS="-march=$ARCHF" -DCMAKE_CXX_FLAGS="-march=$ARCHF" \
  -DCMAKE_EXE_LINKER_FLAGS="-static" -DGGML_CPU_ARM_ARCH="$ARCHF" \
  -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON >"$OUT.cmake.log" 2>&1 ||
  { tail -20 "$OUT.cmake.log" >&2; echo "arm_build_llama: cmake configure failed ($OUT.cmake.log)" >&2; exit 1; }
cmake --build "$OUT" --target llama-bench -j "${JOBS:-2}" >"$OUT.build.log" 2>&1 ||
  { tail -20 "$OUT.build.log" >&2; echo "arm_build_llama: build failed ($OUT.build.log)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "arm_build_llama: $BIN missing after build" >&2; exit 1; }
echo "$BIN"
