#!/usr/bin/env bash
# Runs the tokenizer libFuzzer target (tests/fuzz/tokenizer) for a bounded 30 s; it prints SKIPPED
# when clang/libFuzzer is missing.
set -u
FUZZ_OUT=${DI_TEST_BIN_DIR:-build}/fuzz-tokenizer bash tests/fuzz/tokenizer/run.sh "${DI_FUZZ_SECONDS:-30}"
