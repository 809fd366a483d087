#!/usr/bin/env bash
# Cross-check `deepinfer render` against DeepSeek's own encoder (PyPI deepseek-recipe) on random chat
# requests: zero mismatches required. Skips, saying so, when the package is not installed.
set -u
BIN=${DEEPINFER_BIN:-build/deepinfer}
if ! python3 -c "import deepseek_recipe" 2>/dev/null; then
    echo "SKIPPED: python3 with the deepseek-recipe package is not available (pip install deepseek-recipe==0.2.0)"
    exit 0
fi
python3 tools/tokenizer/crosscheck_prompt.py --bin "$BIN" --tokenizer assets/tokenizer/tokenizer.json --n 1500
