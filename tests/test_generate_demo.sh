#!/usr/bin/env bash
# `deepinfer generate` with text on the bundled demonstration model (random weights, real V4.1
# tokenizer; generated into a temporary cache here):
#   - with no --model the demo model runs, with the random-weights notice on stderr
#   - -p streams a completion to stdout, then a newline; greedy output equals the "text" of the same
#     request through --input (streamed text == result text), and -p --chat equals a "messages" line
#   - the same seed gives the same sampled text through -p and through a JSONL line
#   - stop strings cut the text; a bad chat message gets an error result naming the field
set -u
BIN=${DEEPINFER_BIN:-build/deepinfer}
fail=0 pass=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
unset DEEPINFER_HF_MODEL_DIR
export DEEPINFER_DEMO_MODEL_DIR="$tmp/demo"

"$BIN" generate -p "Hello" --temperature 0 --max-tokens 12 > "$tmp/p.txt" 2> "$tmp/p.err"
rc=$?
[ "$rc" == 0 ] && ok || bad "-p on the demo model: rc=$rc: $(cat "$tmp/p.err")"
grep -q "RANDOM weights" "$tmp/p.err" && grep -q "no model given" "$tmp/p.err" && ok || bad "no notice: $(cat "$tmp/p.err")"
[ -s "$tmp/p.txt" ] && [ "$(tail -c 1 "$tmp/p.txt" | od -An -c | tr -d ' ')" == '\n' ] && ok || bad "-p output: $(cat "$tmp/p.txt")"
"$BIN" generate -p "Hello" --chat --temperature 0 --max-tokens 12 > "$tmp/c.txt" 2>/dev/null && ok || bad "-p --chat failed"
"$BIN" generate -p "Hello" --temperature 1 --seed 5 --max-tokens 12 > "$tmp/s1.txt" 2>/dev/null &&
"$BIN" generate -p "Hello" --temperature 1 --seed 5 --max-tokens 12 > "$tmp/s2.txt" 2>/dev/null &&
    cmp -s "$tmp/s1.txt" "$tmp/s2.txt" && ok || bad "same seed, different text"
# --model given: no notice
"$BIN" generate --model "$tmp/demo" -p "Hello" --max-tokens 2 2> "$tmp/m.err" > /dev/null
! grep -q "RANDOM weights" "$tmp/m.err" && ok || bad "notice printed with --model"

cat > "$tmp/in.jsonl" <<'EOF'
{"id": "raw", "prompt": "Hello", "max_tokens": 12, "temperature": 0}
{"id": "chat", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 12, "temperature": 0}
{"id": "seeded", "prompt": "Hello", "max_tokens": 12, "temperature": 1, "seed": 5}
{"id": "badrole", "messages": [{"role": "bot", "content": "x"}]}
EOF
"$BIN" generate --input "$tmp/in.jsonl" --output "$tmp/out.jsonl" 2> "$tmp/b.err"
rc=$?
[ "$rc" == 3 ] && ok || bad "demo JSONL: rc=$rc (want 3): $(cat "$tmp/b.err")"
python3 - "$tmp" <<'EOF' && ok || bad "streamed text vs results"
import json, sys
d = sys.argv[1]
rows = {r["id"]: r for r in map(json.loads, open(f"{d}/out.jsonl"))}
streamed = lambda f: open(f"{d}/{f}", encoding="utf-8").read()
for rid, f in (("raw", "p.txt"), ("chat", "c.txt"), ("seeded", "s1.txt")):
    r = rows[rid]
    assert "text" in r and len(r["token_ids"]) == r["usage"]["completion_tokens"], r
    assert streamed(f) == r["text"] + "\n", (rid, streamed(f), r["text"])
assert rows["chat"]["usage"]["prompt_tokens"] > rows["raw"]["usage"]["prompt_tokens"]
e = rows["badrole"]["error"]
assert e["type"] == "invalid_request_error" and "messages[0].role" in e["message"], e
EOF
# a stop string cuts the text where it first appears, finish_reason "stop"
python3 - "$tmp" <<'EOF'
import json, sys
d = sys.argv[1]
text = json.loads(open(f"{d}/out.jsonl").readline())["text"]
stop = text[len(text) // 2: len(text) // 2 + 2]
json.dump({"stop": stop, "want": text[:text.find(stop)]}, open(f"{d}/stop.json", "w"))
open(f"{d}/stop.jsonl", "w").write(json.dumps({"prompt": "Hello", "max_tokens": 12, "temperature": 0, "stop": [stop]}) + "\n")
EOF
"$BIN" generate --input "$tmp/stop.jsonl" --output "$tmp/stop_out.jsonl" 2>/dev/null && python3 - "$tmp" <<'EOF' && ok || bad "stop string"
import json, sys
d = sys.argv[1]
want = json.load(open(f"{d}/stop.json"))
r = json.loads(open(f"{d}/stop_out.jsonl").readline())
assert r["finish_reason"] == "stop" and r["text"] == want["want"], (r, want)
EOF

echo "$pass passed, $fail failed"
[ "$fail" == 0 ]
