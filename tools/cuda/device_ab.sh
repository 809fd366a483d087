#!/usr/bin/env bash
# A / B of a change on the device machine: the working tree ("new") against the same tree with the
# files under $AB_OLD put back ("old": the changed files' previous versions, at their repository
# paths under that folder, e.g. exp/old/src/backend/cuda/x.cu -- an untracked folder travels to the
# device with the tree). Builds both (device_model_run.sh's build stage), then runs the bench on
# each in turn, AB_ROUNDS times, so drift of the machine hits both alike; prints the decode and
# prefill rows' ms per step (column 5) and % of roofline per round.
#     AB_OLD=exp/old AB_ROUNDS=3 BENCH="--bench-batch 1,256 --bench-max-context 4096" \
#         bash tools/cuda/device_ab.sh
# The first device call of a change usually pairs this with its parity run:
#     bash tools/cuda/device_model_run.sh --only parity && AB_OLD=exp/old bash tools/cuda/device_ab.sh
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/deepinfer-device-out}"
OLD_FILES="${AB_OLD:?AB_OLD: a folder holding the old versions of the changed files}"
ROUNDS="${AB_ROUNDS:-3}"
BENCH="${BENCH:---bench-batch 1,32 --bench-max-context 4096 --bench-max-prefill 512}"
mkdir -p "$OUT"
bash tools/cuda/device_model_run.sh --only none | tail -1
OLD_TREE=/tmp/deepinfer-ab-old
rm -rf "$OLD_TREE" && mkdir -p "$OLD_TREE"
tar --exclude=./build --exclude=./build-dev --exclude=./build-cuda --exclude="./$OLD_FILES" -cf - . |
    tar -xf - -C "$OLD_TREE"
(cd "$OLD_FILES" && find . -type f) | while read -r f; do cp "$OLD_FILES/$f" "$OLD_TREE/$f"; done
(cd "$OLD_TREE" && OUT=/tmp/deepinfer-ab-old-out bash tools/cuda/device_model_run.sh --only none | tail -1)
export LD_LIBRARY_PATH=/tmp/di-sysroot/usr/lib/x86_64-linux-gnu DEEPINFER_ACCELERATOR=nvidia
for i in $(seq "$ROUNDS"); do
    for side in old new; do
        dir=.
        [ "$side" = old ] && dir="$OLD_TREE"
        # shellcheck disable=SC2086
        r=$("$dir/build-dev/deepinfer" bench --backend cuda --quick $BENCH 2>/dev/null |
            grep "^| decode\|^| prefill" | awk -F'|' '{printf "%s%s@%s %s (%s) ", $2, $3, $4, $5, $11}')
        echo "round $i $side: $r"
    done
done
