#!/usr/bin/env bash
# A / B of a change on the device machine: the working tree ("new") against the same tree with the
# files under $AB_OLD put back ("old": the changed files' previous versions, at their repository
# paths under that folder, e.g. exp/old/src/backend/cuda/x.cu -- an untracked folder travels to the
# device with the tree). Builds both (device_model_run.sh's build stage), then runs the bench on
# each in turn, AB_ROUNDS times, so drift of the machine hits both alike; prints the decode and
# prefill rows' ms per step (column 5) and % of roofline per round.
#     AB_OLD=exp/old AB_ROUNDS=3 BENCH="--bench-batch 1,256 --bench-max-context 4096" \
#         bash tools/cuda/device_ab.sh
# AB_OLD may name several folders (space-separated: "exp/main exp/variant"): each is a variant of
# its own, built into its own tree and benched in the same rounds, named by the folder's last part.
# Branches against the tree (each variant folder holds a branch's versions of the files it changes;
# rebase the branches on the tree's commit first):
#     for b in wip/x wip/y; do d=exp/${b#wip/}; git diff --name-only "$(git merge-base HEAD "$b")" "$b" |
#         while read -r f; do mkdir -p "$d/$(dirname "$f")" && git show "$b:$f" > "$d/$f"; done; done
#     AB_OLD="exp/x exp/y" bash tools/cuda/device_ab.sh      (the tree itself is "new")
# Each variant's tree stays built at /tmp/deepinfer-ab-old(-<name>) for its own tests afterwards.
# The first device call of a change usually pairs this with its parity run:
#     bash tools/cuda/device_model_run.sh --only parity && AB_OLD=exp/old bash tools/cuda/device_ab.sh
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/deepinfer-device-out}"
OLD_SETS="${AB_OLD:?AB_OLD: a folder holding the old versions of the changed files (or several)}"
ROUNDS="${AB_ROUNDS:-3}"
BENCH="${BENCH:---bench-batch 1,32 --bench-max-context 4096 --bench-max-prefill 512}"
mkdir -p "$OUT"
bash tools/cuda/device_model_run.sh --only none | tail -1
excludes=(--exclude=./build --exclude=./build-dev --exclude=./build-cuda)
for set in $OLD_SETS; do excludes+=("--exclude=./$set"); done
sides=()
dirs=()
for set in $OLD_SETS; do # one tree a variant: /tmp/deepinfer-ab-old (the first; as before), -old-<name>
    name=$(basename "$set")
    tree=/tmp/deepinfer-ab-old
    [ ${#sides[@]} -gt 0 ] && tree="/tmp/deepinfer-ab-old-$name"
    rm -rf "$tree" && mkdir -p "$tree"
    tar "${excludes[@]}" -cf - . | tar -xf - -C "$tree"
    (cd "$set" && find . -type f) | while read -r f; do cp "$set/$f" "$tree/$f"; done
    (cd "$tree" && OUT="$tree-out" bash tools/cuda/device_model_run.sh --only none | tail -1)
    sides+=("$name")
    dirs+=("$tree")
done
sides+=(new)
dirs+=(.)
[ ${#sides[@]} -eq 2 ] && sides[0]=old
export LD_LIBRARY_PATH=/tmp/di-sysroot/usr/lib/x86_64-linux-gnu DEEPINFER_ACCELERATOR=nvidia
for i in $(seq "$ROUNDS"); do
    for j in "${!sides[@]}"; do
        # shellcheck disable=SC2086
        r=$("${dirs[$j]}/build-dev/deepinfer" bench --backend cuda --quick $BENCH 2>/dev/null |
            grep "^| decode\|^| prefill" | awk -F'|' '{printf "%s%s@%s %s (%s) ", $2, $3, $4, $5, $11}')
        echo "round $i ${sides[$j]}: $r"
    done
done
