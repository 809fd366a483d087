#!/usr/bin/env bash
# CLI tests for `deepinfer tokenize | detokenize | render`: round trips and the error paths
# (missing/malformed tokenizer.json, invalid UTF-8, malformed id arrays, ids out of range).
set -u
BIN=${DEEPINFER_BIN:-build/deepinfer}
TOK=tests/data/tokenizer/deepseek_v3_tokenizer.json
fail=0 pass=0
check() { # name, expected, actual
    if [ "$2" == "$3" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: expected [$2] got [$3]"; fi
}
check_err() { # name, expected exit status, stderr must contain, command...
    local name=$1 want_rc=$2 needle=$3; shift 3
    local out rc
    out=$("$@" 2>&1 >/dev/null); rc=$?
    if [ "$rc" == "$want_rc" ] && [[ "$out" == *"$needle"* ]]; then pass=$((pass + 1));
    else fail=$((fail + 1)); echo "FAIL $name: rc=$rc (want $want_rc), stderr: $out"; fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

check "tokenize plain" "[19923, 2058, 818, 28217, 6756, 28217, 32]" \
    "$(printf 'Hello world <｜User｜>' | "$BIN" tokenize --tokenizer "$TOK")"
check "tokenize --special" "[19923, 2058, 223, 128803]" \
    "$(printf 'Hello world <｜User｜>' | "$BIN" tokenize --tokenizer "$TOK" --special)"
check "tokenize empty" "[]" "$(printf '' | "$BIN" tokenize --tokenizer "$TOK")"
check "detokenize" "Hello world<｜User｜><｜begin▁of▁sentence｜>" \
    "$(echo '[19923, 2058, 128803, 0]' | "$BIN" detokenize --tokenizer "$TOK")"
check "detokenize --skip-special" "Hello world<｜User｜>" \
    "$(echo '[19923, 2058, 128803, 0]' | "$BIN" detokenize --tokenizer "$TOK" --skip-special)"
text=$'Round trip: ünïcödé 世界 🎉\n\ttabs  and   spaces\r\n12345 <｜Assistant｜>'
check "round trip" "$text" \
    "$(printf '%s' "$text" | "$BIN" tokenize --tokenizer "$TOK" --special | "$BIN" detokenize --tokenizer "$TOK")"

check_err "no --tokenizer" 2 "--tokenizer FILE is required" "$BIN" tokenize
check_err "missing file" 1 "cannot open" "$BIN" tokenize --tokenizer "$tmp/none.json"
printf '{"model": {"vocab": ' > "$tmp/trunc.json"
check_err "malformed json" 1 "not valid JSON" "$BIN" tokenize --tokenizer "$tmp/trunc.json"
echo '{"model": {"type": "Unigram"}}' > "$tmp/unigram.json"
check_err "unsupported model" 1 "model.type" "$BIN" tokenize --tokenizer "$tmp/unigram.json"
check_err "invalid utf-8" 1 "not valid UTF-8 (bad byte 0xff at offset 1)" \
    bash -c "printf 'a\xffb' | '$BIN' tokenize --tokenizer '$TOK'"
check_err "id out of range" 1 "token id 200000 (at index 1) is out of range" \
    bash -c "echo '[1, 200000]' | '$BIN' detokenize --tokenizer '$TOK'"
check_err "negative id" 1 "token id -3" bash -c "echo '[-3]' | '$BIN' detokenize --tokenizer '$TOK'"
check_err "not an array" 1 "not a JSON array" bash -c "echo '{\"a\":1}' | '$BIN' detokenize --tokenizer '$TOK'"
check_err "non-integer id" 1 "element 1 of the id array" bash -c "echo '[1, 2.5]' | '$BIN' detokenize --tokenizer '$TOK'"

# The shipped V4.1 tokenizer: official hash, and its chat tokens.
V41=assets/tokenizer/tokenizer.json
check "V4.1 sha256" "c90dfa01249db1be4245780a052ede752e1361c612ac6d08e2bdada7d599476b" \
    "$(sha256sum "$V41" | cut -d' ' -f1)"
check "V4.1 tokenize --special" "[0, 128799, 128803, 19923, 128804, 128821]" \
    "$(printf '<｜begin▁of▁sentence｜><｜System｜><｜User｜>Hello<｜Assistant｜><think>' | "$BIN" tokenize --tokenizer "$V41" --special)"

check "detokenize --jsonl" "$(printf '%s\n%s\nnull' '"<｜begin▁of▁sentence｜>Hello"' '"\n"')" \
    "$(printf '[0, 19923]\n[201]\n[999999]\n' | "$BIN" detokenize --tokenizer "$V41" --jsonl 2>/dev/null)"

# render: OpenAI-style chat request -> prompt ids
check "render empty user" "[0, 128803, 128804, 128822]" \
    "$(echo '{"messages":[{"role":"user","content":""}],"thinking":{"type":"disabled"}}' | "$BIN" render --tokenizer "$V41")"
check "render jsonl" "$(printf '[0, 128803, 128804, 128822]\n[0, 128803, 90, 128804, 128822]')" \
    "$(printf '%s\n%s\n' '{"messages":[{"role":"user","content":""}],"thinking":false}' \
        '{"messages":[{"role":"user","content":"x"}],"thinking":false}' | "$BIN" render --tokenizer "$V41" --jsonl)"
check_err "render bad role" 1 "messages[0].role" \
    bash -c "echo '{\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}' | '$BIN' render --tokenizer '$V41'"
check_err "render malformed json" 1 "chat request: JSON" \
    bash -c "echo '{\"messages\": [' | '$BIN' render --tokenizer '$V41'"
check_err "render with a V3 tokenizer" 1 "no token" \
    bash -c "echo '{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}' | '$BIN' render --tokenizer '$TOK'"

echo "$pass passed, $fail failed"
[ "$fail" == 0 ]
