#!/usr/bin/env bash
# `deepinfer generate --input` on the bundled tiny fixture (no tokenizer: prompt_ids only), issue 4's
# acceptance:
#   - a JSONL with good lines, a malformed line, an oversized prompt (> the fixture's 256-token
#     context), an unknown field, ids out of range, a wrong type and a blank line: the good lines
#     complete with token_ids and finish_reason (no text), the bad ones get error objects naming the
#     problem, results are valid JSON in input order, exit status 3
#   - greedy generate with prompt_ids reproduces the fixture's repaired_greedy_tokens (golden file,
#     read with tools/fixture/st_read.py): prompts 0, 1 and 3 exactly; the others may diverge only
#     at a choice whose golden margin is below 0.5 (as tests/test_engine.c)
#   - exit status 0 when every line succeeds, 1 when the model cannot load, 2 on usage errors
set -u
BIN=${DEEPINFER_BIN:-build/deepinfer}
FIX=tests/data/v41-tiny
fail=0 pass=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# ------------------------------------------------------------------ mixed good and bad lines
python3 - "$tmp/in.jsonl" <<'EOF'
import json, sys
lines = [
    json.dumps({"id": "g1", "prompt_ids": [0, 17, 42], "max_tokens": 5, "temperature": 0}),
    '{"id": "malformed", "prompt_ids": [0, 1',
    json.dumps({"id": "long", "prompt_ids": [0] + [7] * 299, "max_tokens": 4}),
    json.dumps({"id": "unknown", "prompt_ids": [0, 3], "max_token": 4}),
    "",
    json.dumps({"id": 5, "prompt_ids": [0, 5, 6, 7], "max_tokens": 4, "temperature": 0.8, "seed": 3,
                "logprobs": True, "top_logprobs": 2, "stop_token_ids": [9], "ignore_eos": True}),
    json.dumps({"id": "range", "prompt_ids": [0, 5000]}),
    json.dumps({"id": "type", "prompt_ids": [0, 3], "temperature": "hot"}),
    json.dumps({"prompt_ids": [0, 9, 10], "max_tokens": 3, "logprobs": 1, "top_p": 0.9, "top_k": 50,
                "min_p": 0.01, "presence_penalty": 0.5, "frequency_penalty": 0.2,
                "repetition_penalty": 1.1, "logit_bias": {"100": 5}}),
]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF
"$BIN" generate --model "$FIX" --input "$tmp/in.jsonl" --output "$tmp/out.jsonl" 2>"$tmp/err.txt"
rc=$?
[ "$rc" == 3 ] && ok || bad "mixed file: exit status $rc, want 3 (partial failure); stderr: $(cat "$tmp/err.txt")"
grep -q "3 requests ok, 5 failed" "$tmp/err.txt" && ok || bad "summary line: $(cat "$tmp/err.txt")"
python3 - "$tmp/out.jsonl" <<'EOF' && ok || bad "mixed file results (see above)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]  # every line valid JSON
ids = [r.get("id") for r in rows]
want_ids = ["g1", None, "long", "unknown", 5, "range", "type", 9]
assert ids == want_ids, f"ids/order {ids} != {want_ids}"
by = dict(zip(ids, rows))
for k in ("g1", 5, 9):
    r = by[k]
    assert "error" not in r and "text" not in r, r
    assert r["finish_reason"] in ("stop", "length"), r
    assert len(r["token_ids"]) == r["usage"]["completion_tokens"] > 0, r
    assert all(0 <= t < 2048 for t in r["token_ids"]), r
assert by["g1"]["usage"] == {"prompt_tokens": 3, "completion_tokens": 5} and by["g1"]["finish_reason"] == "length"
assert "logprobs" not in by["g1"]
lp = by[5]["logprobs"]["content"]
assert len(lp) == 4 and all(len(t["top_logprobs"]) == 2 for t in lp), lp
assert [t["token_id"] for t in lp] == by[5]["token_ids"]
assert all(t["logprob"] <= 0 and t["top_logprobs"][0]["logprob"] >= t["top_logprobs"][1]["logprob"] for t in lp)
lp9 = by[9]["logprobs"]["content"]
assert len(lp9) == 3 and all(len(t["top_logprobs"]) == 1 for t in lp9), lp9
expect = {None: "not valid JSON", "long": "context", "unknown": 'unknown field "max_token"',
          "range": "prompt_ids[1] = 5000", "type": '"temperature" must be a number, not a string'}
for k, needle in expect.items():
    e = by[k].get("error")
    assert e and e["type"] == "invalid_request_error" and needle in e["message"], (k, by[k])
    assert set(by[k]) == {"id", "error"}, by[k]
assert by[None]["error"]["message"].startswith("line 2: "), by[None]  # id unreadable: null
assert by["type"]["error"]["message"].startswith("line 8: "), by["type"]
EOF

# ------------------------------------------------------------------ repaired greedy continuations
python3 - "$FIX/golden.safetensors" "$tmp/golden.jsonl" "$tmp/golden_want.json" <<'EOF'
import json, sys
sys.path.insert(0, "tools/fixture")
import st_read
g = st_read.load(sys.argv[1])
want = {}
with open(sys.argv[2], "w") as f:
    for i in range(6):
        ids = [int(x) for x in g[f"prompt.{i}.tokens"].reshape(-1)]
        f.write(json.dumps({"id": i, "prompt_ids": ids, "max_tokens": 17, "temperature": 0,
                            "ignore_eos": True}) + "\n")
        want[i] = {"tokens": [int(x) for x in g[f"prompt.{i}.repaired_greedy_tokens"].reshape(-1)][:17],
                   "margin": [float(x) for x in g[f"prompt.{i}.repaired_greedy_margin"].reshape(-1)][:17]}
json.dump(want, open(sys.argv[3], "w"))
EOF
"$BIN" generate --model "$FIX" --input "$tmp/golden.jsonl" --output "$tmp/golden_out.jsonl" --max-prefill-chunk 7 \
    2>"$tmp/err.txt"
rc=$?
[ "$rc" == 0 ] && ok || bad "golden prompts: exit status $rc; stderr: $(cat "$tmp/err.txt")"
python3 - "$tmp/golden_out.jsonl" "$tmp/golden_want.json" <<'EOF' && ok || bad "repaired greedy tokens"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want = json.load(open(sys.argv[2]))
assert [r["id"] for r in rows] == list(range(6)), rows
for r in rows:
    w = want[str(r["id"])]
    got = r["token_ids"]
    j = 0
    while j < 17 and j < len(got) and got[j] == w["tokens"][j]:
        j += 1
    print(f"  prompt {r['id']} through generate: {j} of 17 repaired greedy tokens"
          + ("" if j == 17 else f", diverges at choice {j} (golden margin {w['margin'][j]:.3f})"))
    if r["id"] in (0, 1, 3):
        assert j == 17, r
    assert j == 17 or w["margin"][j] < 0.5, r
EOF

# ------------------------------------------------------------------ exit statuses
head -1 "$tmp/in.jsonl" > "$tmp/one.jsonl"
"$BIN" generate --model "$FIX" --input "$tmp/one.jsonl" > "$tmp/stdout.jsonl" 2>/dev/null
rc=$?
[ "$rc" == 0 ] && [ "$(wc -l < "$tmp/stdout.jsonl")" == 1 ] && ok || bad "all good, results on stdout: rc=$rc"
: > "$tmp/empty.jsonl"
"$BIN" generate --model "$FIX" --input "$tmp/empty.jsonl" --output "$tmp/e.out" 2>/dev/null
rc=$?
[ "$rc" == 0 ] && [ ! -s "$tmp/e.out" ] && ok || bad "empty input: rc=$rc"
check_rc() { # name, want rc, stderr needle, command...
    local name=$1 want=$2 needle=$3; shift 3
    local err rc
    err=$("$@" 2>&1 >/dev/null); rc=$?
    if [ "$rc" == "$want" ] && [[ "$err" == *"$needle"* ]]; then ok; else bad "$name: rc=$rc (want $want): $err"; fi
}
check_rc "missing model" 1 "config.json" "$BIN" generate --model "$tmp/nomodel" --input "$tmp/one.jsonl"
check_rc "missing input" 1 "--input $tmp/none.jsonl" "$BIN" generate --model "$FIX" --input "$tmp/none.jsonl"
check_rc "no mode" 2 "give --input FILE or -p TEXT" "$BIN" generate --model "$FIX"
check_rc "both modes" 2 "not both" "$BIN" generate --model "$FIX" -p x --input "$tmp/one.jsonl"
check_rc "unknown flag" 2 "unknown option '--frobnicate'" "$BIN" generate --frobnicate
check_rc "bad kv budget" 2 "--kv-budget" "$BIN" generate --model "$FIX" --input "$tmp/one.jsonl" --kv-budget 12Q
check_rc "bad top-p" 2 "--top-p" "$BIN" generate --model "$FIX" -p x --top-p 2
check_rc "negative dense bf16 rows" 2 "DEEPINFER_GPU_DENSE_BF16 -3: must be in [0" \
    env DEEPINFER_GPU_DENSE_BF16=-3 "$BIN" generate --model "$FIX" --input "$tmp/one.jsonl"
check_rc "prompt needs a tokenizer" 1 "tokenizer" "$BIN" generate --model "$FIX" -p "hello"
check_rc "budget too small" 1 "KV budget" "$BIN" generate --model "$FIX" --input "$tmp/one.jsonl" --kv-budget 1K
# a budget with a suffix and the other engine flags are accepted
"$BIN" generate --model "$FIX" --input "$tmp/one.jsonl" --kv-budget 64M --max-num-seqs 2 --max-batch-tokens 64 \
    --max-prefill-chunk 2 --seed 7 > "$tmp/flags.jsonl" 2>/dev/null && cmp -s "$tmp/flags.jsonl" "$tmp/stdout.jsonl" \
    && ok || bad "engine flags change greedy results or fail"

echo "$pass passed, $fail failed"
[ "$fail" == 0 ]
