#!/bin/bash
# The C Engram key normaliser and token-map builder against HF `tokenizers`, zero differences
# expected: (1) the normaliser on every Unicode scalar value alone plus 100,000 random short strings
# (tools/engram/normalize_cases.py); (2) the token map of real tokenizer.json files
# (tools/engram/token_map.py): the V3 tokenizer kept in ../shared and, once present, the project's
# V4.1 tokenizer (whose map must have 99,092 ids). Skipped (passes) without python `tokenizers`;
# a missing tokenizer file skips only its own check.
set -euo pipefail
bin="${DI_TEST_BIN_DIR:-build}/test_engram_token_map_hf_check"
if ! python3 -c 'import tokenizers' 2>/dev/null; then
    echo "skip: python3 with the tokenizers package not available"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 tools/engram/normalize_cases.py "$tmp/normalize.json"
"$bin" "$tmp/normalize.json"
ran=0
check() { # FILE [EXPECTED_COUNT]
    local file=$1 expect=${2:-}
    [ -f "$file" ] || { echo "skip: $file not present"; return 0; }
    python3 tools/engram/token_map.py "$file" --dump "$tmp/dump.json" ${expect:+--expect-count "$expect"}
    "$bin" "$tmp/dump.json"
    ran=$((ran + 1))
}
check ../shared/tokenizer/deepseek_v3_tokenizer.json
check assets/tokenizer/tokenizer.json 99092
[ "$ran" -gt 0 ] || echo "skip: no tokenizer.json found"
