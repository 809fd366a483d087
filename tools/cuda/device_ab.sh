#!/usr/bin/env bash
# A / B of a change on the device machine: the working tree ("new") against the same tree with the
# files under $AB_OLD put back ("old": the changed files' previous versions, at their repository
# paths under that folder, e.g. exp/old/src/backend/cuda/x.cu -- an untracked folder travels to the
# device with the tree). Builds the tree (device_model_run.sh's build stage), then each variant in
# the same build folder: its files copied in, an incremental build (seconds: only what they touch),
# its binaries set aside under /tmp/deepinfer-ab/<name>/, the tree's files put back. Then, each on
# every side: the tests of $AB_TESTS, per-kernel times of $AB_NCU, and the bench AB_ROUNDS times,
# sides alternated so drift of the machine hits all alike (decode and prefill rows' ms per step,
# column 5, and % of roofline).
#     AB_OLD=exp/old AB_ROUNDS=3 BENCH="--bench-batch 1,256 --bench-max-context 4096" \
#         bash tools/cuda/device_ab.sh
# AB_OLD may name several folders (space-separated: "exp/main exp/variant"): each is a variant of
# its own, named by the folder's last part. Branches against the tree (each variant folder holds a
# branch's versions of the files it changes; rebase the branches on the tree's commit first):
#     for b in wip/x wip/y; do d=exp/${b#wip/}; git diff --name-only HEAD "$b" |
#         while read -r f; do mkdir -p "$d/$(dirname "$f")" && git show "$b:$f" > "$d/$f"; done; done
#     AB_OLD="exp/x exp/y" bash tools/cuda/device_ab.sh      (the tree itself is "new")
# AB_TESTS: test commands separated by ';', each run on every side from the tree's root with that
#     side's binary (e.g. "test_cuda_ops --topk; test_fixture_tiny"; DEEPINFER_ACCELERATOR=nvidia).
# AB_NCU: a kernel-name regex: each side's bench (BENCH's arguments) under ncu, kernels matching it
#     timed (gpu__time_duration, --clock-control none) and summed per kernel and grid: mean us a
#     launch, side by side -- steadier than step times for a change to a few kernels. ncu flushes
#     the caches before each kernel by default (--cache-control all), so a kernel that reads what
#     the one before it wrote runs L2-cold there; AB_NCU_FLAGS="--cache-control none" (any further
#     ncu flags) keeps them as the step leaves them. The regex meets ncu's function base name
#     (`wg_gemm_kernel`, no template arguments: `wg_gemm_kernel<1` matches nothing); for one
#     instantiation add AB_NCU_FLAGS="--kernel-name-base demangled" and match the demangled name,
#     e.g. AB_NCU='wg_gemm_kernel<\(int\)1, \(int\)64'.
# AB_NCU_DETAIL: ncu flags for a report of each side's own (e.g. "--section WarpStateStats
#     --section SchedulerStats -k regex:attn_wg --launch-skip 10 --launch-count 2"), over the same
#     bench into detail-<side>.txt, packed with the logs -- warp states side by side (session 61
#     ran this by hand to compare three attention kernels).
# AB_ENV: further sides that run the tree's binaries under environment settings, space-separated
#     name:VAR=VALUE[,VAR=VALUE..] entries, e.g. AB_ENV="nopdl:DEEPINFER_GPU_PDL=0" -- a knob's
#     two settings A / B'd within one build (AB_OLD may then be empty).
# AB_BINS: the binaries set aside (default deepinfer and the test binaries AB_TESTS names).
# The first device call of a change usually pairs this with its parity run:
#     bash tools/cuda/device_model_run.sh --only parity && AB_OLD=exp/old bash tools/cuda/device_ab.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT="${OUT:-/tmp/deepinfer-device-out}"
OLD_SETS="${AB_OLD-}"
[ -n "$OLD_SETS" ] || [ -n "${AB_ENV:-}" ] || { echo "AB_OLD: a folder holding the old versions of the changed files (or several); or AB_ENV" >&2; exit 2; }
ROUNDS="${AB_ROUNDS:-3}"
BENCH="${BENCH:---bench-batch 1,32 --bench-max-context 4096 --bench-max-prefill 512}"
STASH=/tmp/deepinfer-ab
T0=$(date +%s)
log() { echo "[device_ab $(($(date +%s) - T0))s] $*"; }
mkdir -p "$OUT"
bash tools/cuda/device_model_run.sh --only none | tail -1
[ -x build-dev/deepinfer ] || exit 1
export PATH="$PATH:/usr/local/cuda/bin"
bins="deepinfer ${AB_BINS:-}"
IFS=';' read -ra tests <<<"${AB_TESTS:-}"
for t in "${tests[@]}"; do # each test's binary: the command's first word
    read -ra words <<<"$t"
    [ ${#words[@]} -gt 0 ] && bins="$bins ${words[0]}"
done
set_aside() { # name: this build's binaries to $STASH/name
    rm -rf "${STASH:?}/$1" && mkdir -p "$STASH/$1"
    for b in $bins; do cp "build-dev/$b" "$STASH/$1/" || return 1; done
}
rm -rf "$STASH/tree" && mkdir -p "$STASH/tree" && : >"$STASH/tree-absent"
set_aside new || exit 1
for set in $OLD_SETS; do # the tree's own versions of every file a variant replaces (or adds)
    (cd "$set" && find . -type f) | while read -r f; do
        if [ -f "$f" ]; then
            mkdir -p "$STASH/tree/$(dirname "$f")" && cp "$f" "$STASH/tree/$f"
        else echo "$f" >>"$STASH/tree-absent"; fi
    done
done
restore_tree() {
    (cd "$STASH/tree" && find . -type f) | while read -r f; do cp "$STASH/tree/$f" "$f"; done # mtime: now
    while read -r f; do rm -f "$f"; done <"$STASH/tree-absent"
}
sides=()
n_sets=$(wc -w <<<"$OLD_SETS")
for set in $OLD_SETS; do
    name=$(basename "$set")
    [ "$n_sets" -eq 1 ] && name=old
    (cd "$set" && find . -type f) | while read -r f; do cp "$set/$f" "$f"; done
    if cmake --build build-dev -j "$(nproc)" >"$OUT/build-ab-$name.log" 2>&1 && set_aside "$name"; then
        log "$name built"
        sides+=("$name")
    else
        log "$name: BUILD FAILED (errors of build-ab-$name.log):"
        grep -E "error" "$OUT/build-ab-$name.log" | head -10
    fi
    restore_tree
done
sides+=(new)
declare -A side_env=() # AB_ENV's sides: the tree's binaries under "VAR=VALUE .."
for e in ${AB_ENV:-}; do
    side_env[${e%%:*}]="${e#*:}"
    sides+=("${e%%:*}")
done
side_dir() { [ -n "${side_env[$1]+x}" ] && echo "$STASH/new" || echo "$STASH/$1"; }
side_vars() { echo "${side_env[$1]:-}" | tr , ' '; } # its VAR=VALUE words (none: plain `env`)
cmake --build build-dev -j "$(nproc)" >"$OUT/build-ab-tree.log" 2>&1 || log "the tree's rebuild failed"
export LD_LIBRARY_PATH=/tmp/di-sysroot/usr/lib/x86_64-linux-gnu DEEPINFER_ACCELERATOR=nvidia
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1) # AB_NCU, AB_NCU_DETAIL
ncu_side() { # side, ncu flags...: that side's bench under ncu (its environment, the bench's profiler range)
    local side=$1
    shift
    # shellcheck disable=SC2086
    # shellcheck disable=SC2046
    env $(side_vars "$side") timeout "${AB_NCU_TIMEOUT:-150}" "$NCU" --profile-from-start off --clock-control none \
        "$@" "$(side_dir "$side")/deepinfer" bench --backend cuda --quick $BENCH
}

for t in "${tests[@]}"; do
    read -ra words <<<"$t"
    [ ${#words[@]} -gt 0 ] || continue
    for side in "${sides[@]}"; do
        logf="$OUT/test-$side-${words[0]}.log"
        # shellcheck disable=SC2046
        timeout "${AB_TEST_TIMEOUT:-300}" env $(side_vars "$side") "$(side_dir "$side")/${words[0]}" "${words[@]:1}" \
            >"$logf" 2>&1
        log "$side ${words[*]}: exit $? $(grep -E 'passed|PASS|FAIL|SKIPPED' "$logf" | tail -1)"
        grep -m5 "^FAIL" "$logf"
    done
done

if [ -n "${AB_NCU:-}" ]; then
    for side in "${sides[@]}"; do
        # shellcheck disable=SC2086
        ncu_side "$side" ${AB_NCU_FLAGS:-} --metrics gpu__time_duration.sum --csv -k "regex:$AB_NCU" \
            >"$OUT/ncu-ab-$side.csv" 2>/dev/null
        log "ncu $side: exit $?"
    done
    python3 - "$OUT" "${sides[@]}" <<'PY'
import csv, collections, sys
out, sides = sys.argv[1], sys.argv[2:]
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
table = collections.defaultdict(dict)  # (kernel, grid, block) -> side -> (launches, mean us)
for side in sides:
    try:
        rows = [l for l in open(f"{out}/ncu-ab-{side}.csv", errors="replace") if l.startswith('"')]
    except OSError:
        continue
    agg = collections.defaultdict(lambda: [0, 0.0])
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        k = r["Kernel Name"].replace("void ", "", 1)
        j = k.find("(", k.rfind(">") + 1 if ">" in k else 0)
        key = ((k[:j] if j >= 0 else k)[:70], r["Grid Size"], r["Block Size"])
        agg[key][0] += 1
        agg[key][1] += float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], 1e-3)
    for key, (n, us) in agg.items():
        table[key][side] = (n, us / n)
print("| kernel | grid | block | " + " | ".join(f"{s} (n, mean us)" for s in sides) + " |")
print("|---|---|---|" + "---|" * len(sides))
for key in sorted(table):
    cells = [f"{table[key][s][0]}, {table[key][s][1]:.2f}" if s in table[key] else "-" for s in sides]
    print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
PY
fi

if [ -n "${AB_NCU_DETAIL:-}" ]; then
    for side in "${sides[@]}"; do
        # shellcheck disable=SC2086
        ncu_side "$side" $AB_NCU_DETAIL >"$OUT/detail-$side.txt" 2>&1
        log "ncu detail $side: exit $?"
    done
fi

for i in $(seq "$ROUNDS"); do
    for side in "${sides[@]}"; do
        # shellcheck disable=SC2086
        # shellcheck disable=SC2046
        # the whole table (its ceilings lines too) kept as bench-<side>-<round>.txt
        env $(side_vars "$side") "$(side_dir "$side")/deepinfer" bench --backend cuda --quick $BENCH \
            >"$OUT/bench-$side-$i.txt" 2>/dev/null
        r=$(grep "^| decode\|^| prefill" "$OUT/bench-$side-$i.txt" |
            awk -F'|' '{printf "%s%s@%s %s (%s) ", $2, $3, $4, $5, $11}')
        echo "round $i $side: $r"
    done
done
# the device tool brings back at most 8 files: this script's logs and ncu tables travel as one
# archive (tar xzf ab-logs.tar.gz; ab-logs-2.tar.gz, ... after an earlier run of the same call)
# unless KEEP_LOGS=1 leaves them loose
files=$(cd "$OUT" && ls build-ab-*.log test-*.log ncu-ab-*.csv detail-*.txt bench-*.txt 2>/dev/null; true)
if [ "${KEEP_LOGS:-0}" != 1 ] && [ -n "$files" ]; then
    A=ab-logs.tar.gz n=2
    while [ -e "$OUT/$A" ]; do A=ab-logs-$n.tar.gz n=$((n + 1)); done
    # shellcheck disable=SC2086
    (cd "$OUT" && tar czf "$A" $files && rm -f $files)
fi
