#!/usr/bin/env bash
# `deepinfer grammar-check`: the protocol (ok + accept/reject lines; or one unsupported:/error: line)
# for each constraint kind, through the real tokenizer.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${DEEPINFER_BIN:-build/deepinfer}
TOK=assets/tokenizer/tokenizer.json
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
expect() { # name, expected output, actual output
    if [ "$2" != "$3" ]; then echo "FAIL $1: expected [$2] got [$3]"; fail=1; else echo "ok $1"; fi
}
printf '[a-z]+@[a-z]+\\.(com|org)\n' > "$T/re"
out=$(printf '"ab@cd.com"\n"ab@cd.net"\nnot json\n"x@y.org"\n' | "$BIN" grammar-check --regex "$T/re" --tokenizer $TOK | tr '\n' ' ')
expect regex "ok accept reject reject accept " "$out"
printf 'root ::= "(" root ")" | "x"\n' > "$T/g"
out=$(printf '"((x))"\n"(x"\n' | "$BIN" grammar-check --ebnf "$T/g" --tokenizer $TOK | tr '\n' ' ')
expect ebnf "ok accept reject " "$out"
printf '{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}' > "$T/s"
out=$(printf '"{\\"a\\": 1}"\n"{\\"a\\": 1.5}"\n"{}"\n' | "$BIN" grammar-check --json-schema "$T/s" --tokenizer $TOK | tr '\n' ' ')
expect schema "ok accept reject reject " "$out"
out=$(printf '"{\\"a\\": 1}"\n' | "$BIN" grammar-check --json-schema "$T/s" --json-compact --tokenizer $TOK | tr '\n' ' ')
expect compact "ok reject " "$out"
printf '{"type":"object","not":{"required":["a"]}}' > "$T/u"
out=$("$BIN" grammar-check --json-schema "$T/u" --tokenizer $TOK < /dev/null || true)
expect unsupported "unsupported: not" "$out"
printf '(ab' > "$T/bad"
out=$("$BIN" grammar-check --regex "$T/bad" --tokenizer $TOK < /dev/null || true)
expect error "error: regex: missing ')' at offset 3" "$out"
out=$("$BIN" grammar-check --ebnf "$T/missing" --tokenizer $TOK < /dev/null || true)
case "$out" in error:*) echo "ok missing-file";; *) echo "FAIL missing-file: $out"; fail=1;; esac
exit $fail
