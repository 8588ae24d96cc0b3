#!/bin/sh
# test_cli_info.sh -- `pocketbrain info` and `pocketbrain verify` on peer GGUFs, broken files and bad flags ($PB_BIN).
PB=${PB_BIN:-build/pocketbrain}
SHARED=${PB_SHARED:-../shared}
PEER="$SHARED/fixtures/peer"
M="$PEER/model/gemma2-tiny-v.q4_k_m.gguf"
Q="$PEER/quant/quant_vectors.gguf"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; }
check() { # description, then a command whose status decides
  d=$1; shift
  if "$@"; then ok "$d"; else nok "$d"; fi
}
# run CMD...: stdout in $T/out, stderr in $T/err, status in $rc
run() { "$@" >"$T/out" 2>"$T/err"; rc=$?; }
has() { grep -q -- "$1" "$2"; }

if [ ! -x "$PB" ]; then nok "CLI binary $PB missing"; exit 1; fi
if [ ! -r "$M" ] || [ ! -r "$Q" ]; then
  if [ "$CI" = true ]; then nok "peer fixtures missing under $PEER"; exit 1; fi
  echo "# skip: peer fixtures not found under $PEER"; ok "skipped (no fixtures)"; exit 0
fi
if command -v python3 >/dev/null 2>&1; then JSON="python3 -c"; JS=py; else JSON="node -e"; JS=node; fi
json() { # python/node expression over the parsed stdout in $T/out; must print "yes"
  if [ $JS = py ]; then
    python3 -c "import json,sys; d=json.load(open('$T/out')); print('yes' if ($1) else 'no: '+repr(d)[:300])"
  else
    node -e "const d=JSON.parse(require('fs').readFileSync('$T/out','utf8')); console.log(($2) ? 'yes' : 'no')"
  fi
}

# ---- info ----
run "$PB" info "$M"
check "info q4_k_m exits 0 (rc=$rc)" [ "$rc" = 0 ]
check "info prints the architecture gemma2" has "architecture:  gemma2" "$T/out"
check "info prints the tensor count" has "288 tensors" "$T/out"
check "info prints hyperparameters" has "block_count  *26" "$T/out"
check "info prints the tokenizer summary" has "tokenizer:     llama, 4096 tokens, bos 2, eos 1" "$T/out"
check "info prints the file type" has "file type:     Q4_K_M (15)" "$T/out"
check "info prints the parameter total" has "parameters:    13854976" "$T/out"
check "info prints type counts" has "f32 105 q5_0 26 q4_K 130 q6_K 27" "$T/out"
check "info runs the architecture check" has "arch check:    ok" "$T/out"

run "$PB" info "$M" --json --tensors --kv
check "info --json exits 0" [ "$rc" = 0 ]
r=$(json "d['architecture']=='gemma2' and d['n_tensors']==288 and len(d['tensors'])==288 and d['tensor_types']['q4_K']==130 and d['hparams']['block_count']==26 and d['hparams']['attention.layer_norm_rms_epsilon']==1e-06 and d['tokenizer']['n_vocab']==4096 and d['tokenizer']['bos_token_id']==2 and d['arch_check']['status']=='ok' and d['kv']['tokenizer.ggml.tokens']['value']['n']==4096 and d['n_params']==13854976" \
  "d.architecture==='gemma2' && d.n_tensors===288 && d.tensors.length===288 && d.tensor_types.q4_K===130 && d.arch_check.status==='ok'")
check "info --json parses and has arch, counts, hparams, tokenizer, tensors ($r)" [ "$r" = yes ]
r=$(json "sum(t['bytes'] for t in d['tensors'])==d['tensor_bytes'] and all(t['offset']+t['bytes']<=d['file_size'] for t in d['tensors'])" "true")
check "info --json tensor bytes add up and lie inside the file ($r)" [ "$r" = yes ]

run "$PB" info "$M" --kv
check "info --kv lists every key with type" has "tokenizer.ggml.tokens  *ARRAY  *STRING\[4096\]" "$T/out"
run "$PB" info "$M" --tensors
check "info --tensors prints the table" has "blk.0.attn_q.weight  *q4_K  *\[256, 128\]  *18432" "$T/out"

run "$PB" info "$Q"
check "info on a non-model GGUF exits 0 and skips the architecture check" sh -c "[ $rc = 0 ] && grep -q 'arch check:    skipped' '$T/out'"

# a gemma2 file with one tensor renamed (same length, structure intact): the architecture check fails
python3 - "$M" "$T/renamed.gguf" <<'EOF'
import sys
b = open(sys.argv[1], 'rb').read()
i = b.index(b'blk.0.attn_q.weight')
open(sys.argv[2], 'wb').write(b[:i] + b'blk.0.attn_q.weighX' + b[i + 19:])
EOF
run "$PB" info "$T/renamed.gguf"
check "info: missing blk.0.attn_q.weight fails the architecture check with status 1 (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q 'arch check:    FAILED' '$T/out' && grep -q 'blk.0.attn_q.weight' '$T/out'"

# a gemma2 file whose header run refuses (a required key renamed): info fails too, not "skipped" with status 0
python3 - "$M" "$T/nokey.gguf" <<'EOF'
import sys
b = open(sys.argv[1], 'rb').read()
i = b.index(b'\x1b\0\0\0\0\0\0\0gemma2.attention.head_count') + 8  # length 27: not head_count_kv
open(sys.argv[2], 'wb').write(b[:i] + b'gemma2.attention.head_counX' + b[i + 27:])
EOF
run "$PB" info "$T/nokey.gguf"
check "info: a gemma2 header run refuses fails with status 1, naming the key (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q \"arch check:    FAILED (model: required key 'gemma2.attention.head_count' is missing)\" '$T/out' && grep -q 'hyperparameter check' '$T/err'"

run "$PB" info "$M" --bogus
check "info --bogus: exit 2 naming the flag (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q \"unknown flag '--bogus'\" '$T/err'"
run "$PB" info
check "info without a file: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q 'missing MODEL.gguf' '$T/err'"
run "$PB" info "$T/does-not-exist.gguf"
check "info on a missing file: exit 1 with a clear message (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q \"cannot open '$T/does-not-exist.gguf': No such file\" '$T/err'"
run "$PB" info tests/data/gguf/n_dims_5.gguf
check "info on a malformed file: exit 1 naming the field (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q \"tensor 0 'a': n_dims 5 out of range\" '$T/err'"

# ---- verify ----
sum=$(sha256sum "$M" | cut -c1-64)
run "$PB" verify "$M" --sha256 "$sum"
check "verify with the right --sha256: exit 0 (rc=$rc)" [ "$rc" = 0 ]
check "verify prints the hash" has "sha256: $sum" "$T/out"
check "verify reports the structure" has "gguf:   ok: v3, 31 keys, 288 tensors" "$T/out"
upper=$(echo "$sum" | tr a-f A-F)
run "$PB" verify "$M" --sha256 "$upper"
check "verify accepts upper-case hex (rc=$rc)" [ "$rc" = 0 ]
if [ "$(echo "$sum" | cut -c1)" = 0 ]; then bad="1$(echo "$sum" | cut -c2-)"; else bad="0$(echo "$sum" | cut -c2-)"; fi
run "$PB" verify "$M" --sha256 "$bad"
check "verify with a wrong --sha256: exit 1 and MISMATCH (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q MISMATCH '$T/out'"
run "$PB" verify "$M"
check "verify without --sha256: exit 0 (rc=$rc)" [ "$rc" = 0 ]
run "$PB" verify "$M" --sha256 abc
check "verify --sha256 abc: exit 2 naming the flag (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q -- '--sha256 expects 64 hex digits' '$T/err'"
run "$PB" verify "$M" --sha256
check "verify --sha256 without value: exit 2 (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q -- '--sha256 needs a value' '$T/err'"
run "$PB" verify "$M" --frobnicate
check "verify --frobnicate: exit 2 naming the flag (rc=$rc)" sh -c "[ $rc = 2 ] && grep -q \"unknown flag '--frobnicate'\" '$T/err'"
run "$PB" verify
check "verify without a file: exit 2 (rc=$rc)" [ "$rc" = 2 ]
run "$PB" verify "$T/missing.gguf"
check "verify on a missing file: exit 1 with a clear message (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q \"cannot open '$T/missing.gguf': No such file\" '$T/err'"

head -c 5000000 "$M" >"$T/trunc.gguf"
run "$PB" verify "$T/trunc.gguf"
check "verify on a truncated model: exit 1, names the tensor past end of file (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q \"tensor [0-9]* '.*': data \[.*) past end of file (size 5000000)\" '$T/out'"
tsum=$(sha256sum "$T/trunc.gguf" | cut -c1-64)
check "verify still prints the hash of a malformed file" has "sha256: $tsum" "$T/out"

printf 'plain text, not a model\n' >"$T/plain.txt"
psum=$(sha256sum "$T/plain.txt" | cut -c1-64)
run "$PB" verify "$T/plain.txt"
check "verify on a non-GGUF file: exit 1, suggests --hash-only (rc=$rc)" sh -c "[ $rc = 1 ] && grep -q -- '--hash-only' '$T/err'"
run "$PB" verify "$T/plain.txt" --hash-only --sha256 "$psum"
check "verify --hash-only with the right hash: exit 0 (rc=$rc)" sh -c "[ $rc = 0 ] && grep -q 'sha256: $psum' '$T/out'"
: >"$T/empty"
run "$PB" verify "$T/empty" --hash-only --sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
check "verify --hash-only of an empty file gives the empty-input SHA-256 (rc=$rc)" [ "$rc" = 0 ]

# ---- a FIFO where a model or session file is read: refused at once, never a wait for a writer ----
# (open() without O_NONBLOCK blocked: info, run -m, chat --session, quantize, bench, tokenize --vocab hung)
mkfifo "$T/fifo.gguf"
for cmd in "info" "info --mem" "run -p hi -m" "bench -n 1 -m" "tokenize hi --vocab"; do
  # shellcheck disable=SC2086
  run timeout 20 "$PB" $cmd "$T/fifo.gguf" </dev/null
  check "$cmd FIFO: exit 1 at once, 'not a regular file' (rc=$rc)" \
    sh -c "[ $rc = 1 ] && grep -q \"'$T/fifo.gguf' is not a regular file\" '$T/err'"
done
run timeout 20 "$PB" chat --session "$T/fifo.gguf" </dev/null
check "chat --session FIFO: exit 1 at once, the FIFO named (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q \"'$T/fifo.gguf' is a FIFO\" '$T/err'"
run timeout 20 "$PB" quantize "$T/fifo.gguf" "$T/fq.gguf" q8_0
check "quantize FIFO input: exit 1 at once, no output (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q 'not a regular file' '$T/err' && ! ls '$T'/fq.gguf* >/dev/null 2>&1"
run timeout 20 "$PB" run -p hi -n 1 --thermal "$T/fifo.gguf" </dev/null
check "run --thermal FIFO: exit 1 at once, the temperature file named (rc=$rc)" \
  sh -c "[ $rc = 1 ] && grep -q \"cannot read a temperature .* from '$T/fifo.gguf'\" '$T/err'"
