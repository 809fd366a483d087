#!/usr/bin/env bash
# Runs the structured-output libFuzzer target (tests/fuzz/constrain) for a bounded 30 s; it prints
# SKIPPED when clang/libFuzzer is missing.
set -u
FUZZ_OUT=${DI_TEST_BIN_DIR:-build}/fuzz-constrain bash tests/fuzz/constrain/run.sh "${DI_FUZZ_SECONDS:-30}"
