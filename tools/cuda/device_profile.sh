#!/usr/bin/env bash
# Per-kernel device times of a `deepinfer bench` run, on the device machine (issue 5): builds the tree
# (device_model_run.sh's build stage), runs the bench under Nsight Compute with one metric
# (gpu__time_duration.sum; --clock-control none, as METHOD.md asks) and folds the launches into a
# table per kernel and grid: launches, total and mean microseconds, share. Only what the bench puts
# inside the backend's profiler range is recorded: the last direct-launch decode step of each batch
# size at the first context and the largest prefill (profiling every launch of a bench run,
# weight generation and ceilings included, takes far longer than a device call).
#     PROFILE_ARGS="--bench-batch 1 --bench-max-context 4096 --bench-max-prefill 512" \
#         bash tools/cuda/device_profile.sh [TAG]
# (--bench-max-prefill 0 runs no prefill row: the table then holds the decode step alone.)
# NCU_DETAIL="ncu flags" instead runs ncu's own report (e.g. "--section WarpStateStats -k regex:gemv
# --launch-skip 40 --launch-count 2") over the same range into $OUT/detail-TAG.txt, no table.
# -k matches the function name without template arguments; one instantiation by its mangled name:
# "--kernel-name-base mangled -k regex:ILb1ELi64E" is wg_gemm_kernel<true, 64> (a demangled regex
# with "<" matched nothing in session 12; with --kernel-name-base demangled the name reads
# "wg_gemm_kernel<(int)1, (int)64, ...>", and NCU_DETAIL is split at spaces, so match a space with
# "." -- session 60: -k regex:wg_gemm_kernel<\(int\)1,.\(int\)64,.\(int\)2,.\(bool\)1>). For stall
# samples per SASS instruction ncu documents "--section SourceCounters --page source
# --print-source sass"; tools/cuda/ncu_sass_mix.py folds that text into each launch's warp
# instructions by opcode, its most executed instructions (--top) and its most stalled ones (--stalls).
# Output: $OUT/profile-TAG.txt (the table, also on stdout) and $OUT/profile-TAG.csv.gz (ncu's rows).
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/deepinfer-device-out}"
TAG="${1:-run}"
mkdir -p "$OUT"
bash tools/cuda/device_model_run.sh --only none || exit 1
export LD_LIBRARY_PATH=/tmp/di-sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "device_profile: no ncu on this machine"; exit 1; }
RAW="$OUT/profile-$TAG.csv"
ncu_bench() { # ncu flags...: the bench under ncu, recording only the bench's profiler range
    timeout "${PROFILE_TIMEOUT:-420}" "$NCU" --profile-from-start off "$@" \
        build-dev/deepinfer bench --backend cuda --quick ${PROFILE_ARGS:-} 2>"$OUT/profile-$TAG.err"
}
if [ -n "${NCU_DETAIL:-}" ]; then
    ncu_bench $NCU_DETAIL >"$OUT/detail-$TAG.txt"
    echo "device_profile: ncu exit $?"
    exit 0
fi
ncu_bench --clock-control none --metrics gpu__time_duration.sum --csv >"$RAW"
echo "device_profile: ncu exit $?; $(grep -c '^"' "$RAW") rows"
python3 - "$RAW" >"$OUT/profile-$TAG.txt" <<'PY'
import csv, sys, collections
rows = [l for l in open(sys.argv[1], errors="replace") if l.startswith('"')]
agg = collections.defaultdict(lambda: [0, 0.0])
total = 0.0
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    k = r["Kernel Name"].replace("void ", "", 1)
    j = k.find("(", k.rfind(">") + 1 if ">" in k else 0)
    name = (k[:j] if j >= 0 else k)[:110]
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    us = float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], 1e-3)
    key = (name, r["Grid Size"], r["Block Size"])
    agg[key][0] += 1
    agg[key][1] += us
    total += us
print(f"total kernel time {total/1e3:.1f} ms over {sum(v[0] for v in agg.values())} launches\n")
print("| kernel | grid | block | launches | total ms | mean us | share |")
print("|---|---|---|---|---|---|---|")
for (name, grid, block), (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:80]:
    print(f"| {name} | {grid} | {block} | {n} | {us/1e3:.2f} | {us/n:.1f} | {100*us/total:.1f}% |")
PY
cat "$OUT/profile-$TAG.txt"
gzip -f "$RAW"
