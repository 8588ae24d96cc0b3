#!/bin/sh
# gemma4_llama_quant.sh -- llama.cpp's error vs transformers on our Q8_0 / Q4_K_M quantizations of the tiny Gemma 4
# models (tests/data/model/gemma4_*): writes llama_quant_err.txt in each folder ("TYPE mean max" per line), which
# test_gemma4_quant compares our error against (ours <= llama.cpp's + 10%).
#   sh tools/reference/gemma4_llama_quant.sh [LLAMA_DIR (default /tmp/llama.cpp)] [LLAMA_BUILD (default $LLAMA_DIR/build-cpu)]
# Needs build/pocketbrain and a built libllama; builds tools/reference/llama_logits.cpp under /tmp.
set -e
L=${1:-/tmp/llama.cpp}
B=${2:-$L/build-cpu}
T=$(mktemp -d /tmp/pb_g4q.XXXXXX)
g++ -O1 -std=c++17 tools/reference/llama_logits.cpp -I"$L/include" -I"$L/ggml/include" -L"$B/bin" -lllama -lggml \
    -lggml-base -Wl,-rpath,"$B/bin" -o "$T/llama_logits"
for n in gemma4_e2b gemma4_keqv gemma4_moe; do
    D=tests/data/model/$n
    : > "$D/llama_quant_err.txt"
    for q in q8_0 q4_k_m; do
        ./build/pocketbrain quantize "$D/llama.f32.gguf" "$T/$q.gguf" $q > /dev/null 2>&1
        "$T/llama_logits" "$T/$q.gguf" "$D/tokens.bin" "$T/$q.f32" 2> /dev/null
        python3 - "$T/$q.f32" "$D/logits.f64.f32" $q >> "$D/llama_quant_err.txt" <<'PY'
import array, sys
a = array.array('f'); a.frombytes(open(sys.argv[1], 'rb').read())
b = array.array('f'); b.frombytes(open(sys.argv[2], 'rb').read())
d = [abs(x - y) for x, y in zip(a, b)]
print(sys.argv[3], "%.6g" % (sum(d) / len(d)), "%.6g" % max(d))
PY
    done
    cat "$D/llama_quant_err.txt"
done
rm -rf "$T"
