#!/usr/bin/env bash
# Builds the structured-output fuzz target (regex, EBNF, JSON-schema parsers + matcher) with clang's
# libFuzzer (+ ASan, UBSan) and runs it for a bounded time from the seed corpus.
# usage: tests/fuzz/constrain/run.sh [SECONDS] (default 30), from the repository root.
set -u
SECS=${1:-30}
OUT=${FUZZ_OUT:-build-fuzz}
if ! command -v clang >/dev/null; then
    echo "SKIPPED: clang is not installed (apt-get install clang) - the constrain fuzz target was not run"
    exit 0
fi
mkdir -p "$OUT"
if ! echo 'int LLVMFuzzerTestOneInput(const unsigned char*d, unsigned long n){return 0;}' > "$OUT/probe.c" ||
   ! clang -fsanitize=fuzzer "$OUT/probe.c" -o "$OUT/probe" 2>/dev/null; then
    echo "SKIPPED: this clang has no libFuzzer runtime - the constrain fuzz target was not run"
    exit 0
fi
set -e
clang -std=c11 -O1 -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Iinclude -Isrc $(pkg-config --cflags libpcre2-8 libcjson icu-uc) \
    tests/fuzz/constrain/fuzz_constrain.c src/constrain/*.c src/tokenizer/*.c src/base/error.c src/base/file.c \
    $(pkg-config --libs libpcre2-8 libcjson icu-uc) -lpthread -lm -o "$OUT/fuzz_constrain"
mkdir -p "$OUT/corpus"
cp tests/fuzz/constrain/corpus/* "$OUT/corpus/" 2>/dev/null || true
"$OUT/fuzz_constrain" -max_total_time="$SECS" -max_len=1024 -timeout=60 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$OUT/" "$OUT/corpus" 2>&1 | grep -E "^#|stat::number_of_executed_units|ERROR|invariant|SUMMARY|Done" | tail -n 8
status=${PIPESTATUS[0]}
echo "fuzz_constrain: exit status $status after ${SECS}s"
exit "$status"
