#!/bin/bash
# The numpy default_rng port (src/model/numpy_pcg64.c) against numpy itself: many seeds and ranges,
# every branch of the bounded draw. Skipped (passes) when python3 or numpy is missing.
set -euo pipefail
bin="${DI_TEST_BIN_DIR:-build}/test_engram_consts"
if ! python3 -c 'import numpy' 2>/dev/null; then
    echo "skip: python3 with numpy not available"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 tools/engram/numpy_cases.py "$tmp/cases.txt"
"$bin" --numpy-cases "$tmp/cases.txt"
