#!/usr/bin/env bash
# Cross-check against HF `tokenizers` (pip) on several MB of mixed text: zero mismatches required.
# Skips, saying so, when python3 or the tokenizers package is missing; uses ../shared/corpora when
# present (the script prints what it found and what it skipped).
set -u
BIN=${DEEPINFER_BIN:-build/deepinfer}
if ! python3 -c "import tokenizers" 2>/dev/null; then
    echo "SKIPPED: python3 with the HF tokenizers package is not available (pip install tokenizers)"
    exit 0
fi
SHARED=../shared
[ -d "$SHARED/corpora" ] || echo "note: $SHARED/corpora is absent; the prose part of the cross-check is skipped"
python3 tools/tokenizer/crosscheck_hf.py --bin "$BIN" \
    --tokenizer tests/data/tokenizer/deepseek_v3_tokenizer.json --shared "$SHARED"
rc=$?
# The shipped V4.1 file (same base BPE, V4.1 added tokens) on a smaller sample.
python3 tools/tokenizer/crosscheck_hf.py --bin "$BIN" --tokenizer assets/tokenizer/tokenizer.json \
    --shared "$SHARED" --max-mb 3 --min-mb 0 || rc=1
exit $rc
