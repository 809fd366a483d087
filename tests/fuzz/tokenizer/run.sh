#!/usr/bin/env bash
# Builds the tokenizer fuzz target with clang's libFuzzer (+ ASan, UBSan) and runs it for a bounded
# time from the seed corpus. usage: tests/fuzz/tokenizer/run.sh [SECONDS] (default 30), from the
# repository root. Exits 0 with a SKIPPED line when clang with libFuzzer is not available.
set -u
SECS=${1:-30}
OUT=${FUZZ_OUT:-build-fuzz}
if ! command -v clang >/dev/null; then
    echo "SKIPPED: clang is not installed (apt-get install clang) - the tokenizer fuzz target was not run"
    exit 0
fi
mkdir -p "$OUT"
if ! echo 'int LLVMFuzzerTestOneInput(const unsigned char*d, unsigned long n){return 0;}' > "$OUT/probe.c" ||
   ! clang -fsanitize=fuzzer "$OUT/probe.c" -o "$OUT/probe" 2>/dev/null; then
    echo "SKIPPED: this clang has no libFuzzer runtime - the tokenizer fuzz target was not run"
    exit 0
fi
set -e
clang -std=c11 -O1 -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Iinclude -Isrc $(pkg-config --cflags libpcre2-8 libcjson icu-uc) \
    tests/fuzz/tokenizer/fuzz_tokenizer.c src/tokenizer/*.c src/base/error.c src/base/file.c \
    $(pkg-config --libs libpcre2-8 libcjson icu-uc) -lpthread -lm -o "$OUT/fuzz_tokenizer"
mkdir -p "$OUT/corpus"
cp tests/fuzz/tokenizer/corpus/* "$OUT/corpus/" 2>/dev/null || true
"$OUT/fuzz_tokenizer" -max_total_time="$SECS" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$OUT/" "$OUT/corpus" 2>&1 | grep -E "^#|stat::number_of_executed_units|ERROR|invariant|SUMMARY|Done" | tail -n 8
status=${PIPESTATUS[0]}
echo "fuzz_tokenizer: exit status $status after ${SECS}s"
exit "$status"
