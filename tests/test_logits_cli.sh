#!/usr/bin/env bash
# `deepinfer logits` end to end: prompt 3 of the tiny fixture with the recorded selections gives the
# golden prefill logits (float32 LE, [n_ids, vocab]); --prefill splits prefill and decode; bad
# arguments and inputs are clear errors with a non-zero status.
set -u
BIN=${DEEPINFER_BIN:-./build/deepinfer}
FIX=tests/data/v41-tiny
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

ids=$(python3 -c "
import sys; sys.path.insert(0, 'tools/fixture'); import st_read
g = st_read.load('$FIX/golden.safetensors')
print(','.join(str(int(x)) for x in g['prompt.3.tokens']))")
if "$BIN" logits --model "$FIX" --ids "$ids" --replay-topk "$FIX/golden.safetensors:prompt.3.topk" --out "$TMP/l.f32"; then ok; else bad "logits run"; fi
if python3 - "$TMP/l.f32" <<'PY'
import sys; sys.path.insert(0, 'tools/fixture'); import st_read, numpy as np
g = st_read.load('tests/data/v41-tiny/golden.safetensors')
ref = g['prompt.3.prefill_logits']
got = np.fromfile(sys.argv[1], np.float32).reshape(ref.shape)
d = np.abs(got - ref)
print(f"logits CLI, prompt 3 replay: mean {d.mean():.5f} max {d.max():.5f}")
sys.exit(0 if d.mean() <= 0.02 and d.max() <= 0.8 else 1)
PY
then ok; else bad "logits differ from golden"; fi

# prefill 10 + one decode step per remaining id gives the same rows as one prefill (the tiny
# model's attention lists fit one softmax run, so the two window layouts agree exactly)
if "$BIN" logits --model "$FIX" --ids "$ids" --prefill 10 --replay-topk "$FIX/golden.safetensors:prompt.3.topk" --out "$TMP/l3.f32" \
   && cmp -s "$TMP/l.f32" "$TMP/l3.f32"; then ok; else bad "prefill 10 + decode differs from one prefill"; fi

expect_error() { # expect_error "pattern" args...
  local pat=$1; shift
  local out
  out=$("$BIN" logits "$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -ne 0 ] && grep -q -- "$pat" <<<"$out"; then ok; else bad "logits $* -> rc $rc, '$out' (wanted '$pat')"; fi
}
expect_error "usage" --model "$FIX"
expect_error "bad id" --model "$FIX" --ids 1,x
expect_error "outside \[0, 2048)" --model "$FIX" --ids 0,5000
expect_error "config.json" --model "$TMP/nowhere" --ids 0,1
expect_error "exceeds" --model "$FIX" --ids 0,1 --prefill 5
expect_error "no tensor" --model "$FIX" --ids 0,1 --replay-topk "$FIX/golden.safetensors:nope"
expect_error "FILE:TENSOR" --model "$FIX" --ids 0,1 --replay-topk "$FIX/golden.safetensors"
expect_error "unknown backend 'tpu'" --model "$FIX" --ids 0,1 --backend tpu
if ! "$BIN" logits --backend cuda --model "$FIX" --ids 0,1 --out "$TMP/g.f32" 2>/dev/null; then
  # a CPU-only build or no GPU: a clear error, not a crash
  expect_error "backend cuda" --model "$FIX" --ids 0,1 --backend cuda
  DEEPINFER_ACCELERATOR=nvidia expect_error "backend cuda" --model "$FIX" --ids 0,1
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
