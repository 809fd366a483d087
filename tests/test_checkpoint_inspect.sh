#!/usr/bin/env bash
# `deepinfer inspect`: the tiny fixture validates (exit 0, summary); a missing directory and a
# damaged copy fail with exit 1 and a message naming the culprit; no --model is a usage error (2).
set -u
bin="${DEEPINFER_BIN:-build/deepinfer}"
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }

out=$("$bin" inspect --model tests/data/v41-tiny 2>&1); rc=$?
check "tiny: exit 0" "[ $rc -eq 0 ]"
check "tiny: 1797 tensors" "grep -q 'tensors:  1797 (expected 1797)' <<<\"\$out\""
check "tiny: 1 shard" "grep -q 'shards:   1' <<<\"\$out\""

out=$("$bin" inspect --model tests/data/no-such-model 2>&1); rc=$?
check "missing dir: exit 1" "[ $rc -eq 1 ]"
check "missing dir: names config.json" "grep -q 'no-such-model/config.json: cannot open' <<<\"\$out\""

tmp=$(mktemp -d /tmp/di_inspect_XXXXXX)
cp tests/data/v41-tiny/config.json tests/data/v41-tiny/model.safetensors tests/data/v41-tiny/model.safetensors.index.json "$tmp/"
chmod u+w "$tmp"/*
sed -i 's/"hidden_size": 64/"hidden_size": 96/' "$tmp/config.json"
out=$("$bin" inspect --model "$tmp" 2>&1); rc=$?
check "contradicting config: exit 1" "[ $rc -eq 1 ]"
check "contradicting config: names embed.weight" "grep -q 'embed.weight: expected BF16 \[2048, 96\], found BF16 \[2048, 64\]' <<<\"\$out\""
rm -rf "$tmp"

"$bin" inspect >/dev/null 2>&1; rc=$?
check "no --model: exit 2" "[ $rc -eq 2 ]"
exit $fail
