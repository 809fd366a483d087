#!/usr/bin/env bash
# MaskBench coverage (../shared/fixtures/maskbench): every schema compiled by `deepinfer
# grammar-check`, every instance checked through the token-level matcher. Fails if any invalid
# instance is accepted (or the command crashes); reports the pass rate. Skips without the fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=../shared/fixtures/maskbench/data.tar.gz
BIN=${DEEPINFER_BIN:-build/deepinfer}
if [ ! -f "$DATA" ]; then echo "SKIP: $DATA not found"; exit 0; fi
if ! command -v python3 >/dev/null; then echo "SKIP: python3 not found"; exit 0; fi
# Under the sanitizer build (build-asan) a tenth of the sample keeps the run short.
EVERY=1
case "${DI_TEST_BIN_DIR:-}" in *asan*) EVERY=10 ;; esac
python3 tools/constrain/maskbench.py --every "$EVERY" --bin "$BIN" --tokenizer assets/tokenizer/tokenizer.json \
    --data "$DATA" --jobs "$(nproc)" --timeout 120
