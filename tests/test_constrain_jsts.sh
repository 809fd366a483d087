#!/usr/bin/env bash
# JSON-Schema-Test-Suite draft 7 (Debian package json-schema-test-suite) through `deepinfer
# grammar-check`: fails if any invalid instance is accepted; reports compiled / unsupported counts.
# Skips without the package.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=/usr/share/json-schema-test-suite/tests/draft7
BIN=${DEEPINFER_BIN:-build/deepinfer}
if [ ! -d "$DIR" ]; then echo "SKIP: $DIR not found (apt-get install json-schema-test-suite)"; exit 0; fi
if ! command -v python3 >/dev/null; then echo "SKIP: python3 not found"; exit 0; fi
python3 tools/constrain/jsts.py --bin "$BIN" --tokenizer assets/tokenizer/tokenizer.json --dir "$DIR" --jobs "$(nproc)"
