#!/usr/bin/env bash
# The GPU forward pass on the device machine, in one call of the device tool (issue 5):
#   1. builds the whole tree with -DDI_CUDA=ON (the CPU build's libraries -- cJSON, PCRE2, ICU -- come
#      as Debian packages carried in .sysroot/debs and unpacked into a private sysroot: the GPU image
#      has none of them and no network; `tools/cuda/fetch_sysroot_debs.sh` fetches them here),
#   2. the per-op parity suites (test_cuda_ops, test_cuda_fwd_ops),
#   3. the model tests on the GPU (DEEPINFER_ACCELERATOR=nvidia): the v41-tiny fixture in replay,
#      free and greedy modes and through the engine, chunked = one-shot, batch invariance (default
#      and DEEPINFER_BATCH_INVARIANT=1), CUDA graphs = eager launches (test_device_graphs), a wide
#      demo-model variant against the CPU (test_wide_model_gpu: the int8 expert twin and its fused
#      SwiGLU) and the fixture again with DEEPINFER_ENFORCE_EAGER=1,
#   4. compute-sanitizer memcheck and racecheck on a fixture run,
#   5. `deepinfer bench` (the whole-model EP-8 rank proxy) and a generate demo on the bundled model.
# Logs land in $OUT, packed into $OUT/logs.tar.gz at the end (the device tool returns 8 files;
# KEEP_LOGS=1 leaves them loose); the summary is the end of stdout. Stages past a time budget are
# skipped.
#     bash tools/cuda/device_model_run.sh [--quick] [--only STAGES]   (STAGES: e.g. "build,parity,fixture";
#     all: parity,fixture,sanitize,memcheck,bench,bench_bi,demo; BENCH_ARGS passes options to the bench;
#     "mmasync", only when named: the model tests and the bench with DEEPINFER_GPU_WGMMA=0;
#     "racecheck_probe", only when named: tools/cuda/probe_racecheck.cu's variants under racecheck)
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/deepinfer-device-out}"
mkdir -p "$OUT"
T0=$(date +%s)
QUICK=0
ONLY="build,parity,fixture,sanitize,memcheck,bench,bench_bi,demo"
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --only) ONLY="build,$2"; shift ;;
    esac
    shift
done
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }
log() { echo "[device_model_run $(($(date +%s) - T0))s] $*"; }
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
export NCCL_NVLS_ENABLE=0
JOBS=$(nproc)

# ---- 1. build ----
SR=/tmp/di-sysroot
mkdir -p "$SR"
if ! ls .sysroot/debs/*.deb >/dev/null 2>&1 && ! pkg-config --exists libcjson 2>/dev/null; then
    # the GPU image has neither the CPU build's libraries nor network (session 64 lost a call to this)
    log "no cJSON here and no .sysroot/debs: run tools/cuda/fetch_sysroot_debs.sh on the host and name .sysroot in the device tool's carry"
fi
for f in .sysroot/debs/*.deb; do
    [ -f "$f" ] || continue
    if command -v dpkg >/dev/null; then dpkg -x "$f" "$SR"; else
        (cd "$SR" && ar p "$OLDPWD/$f" "$(ar t "$OLDPWD/$f" | grep data.tar)" | tar -x --auto-compress 2>/dev/null ||
            ar p "$OLDPWD/$f" data.tar.xz | tar -xJ); fi
done
LIBDIR="$SR/usr/lib/x86_64-linux-gnu"
export PKG_CONFIG_LIBDIR="$LIBDIR/pkgconfig:$SR/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$SR"
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PKGCONF=$(command -v pkg-config || echo "$SR/usr/bin/pkgconf")
{ date -u; nvidia-smi; nvcc --version | tail -2; ldd --version | head -1; cmake --version | head -1; } >"$OUT/machine.txt" 2>&1
B=build-dev
MADE="build.log machine.txt" # the logs this script writes: the ones it packs (a caller's own stay)
if cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DDI_CUDA=ON -DPKG_CONFIG_EXECUTABLE="$PKGCONF" >"$OUT/build.log" 2>&1 &&
    cmake --build $B -j "$JOBS" >>"$OUT/build.log" 2>&1; then
    log "build ok"
else
    log "BUILD FAILED (tail of build.log):"
    grep -E "error|Error" "$OUT/build.log" | head -20
    tail -15 "$OUT/build.log"
    exit 1
fi

run() { # name timeout_s command...: runs, logs to $OUT/name.log, prints one status line
    local name=$1 t=$2
    shift 2
    MADE="$MADE $name.log"
    local s=$(date +%s)
    timeout "$t" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    log "$name: exit $rc in $(($(date +%s) - s)) s; $(grep -E 'passed|PASS|FAIL|SKIPPED' "$OUT/$name.log" | tail -1)"
    return $rc
}

# ---- 2. per-op parity ----
if want parity; then
    run parity_ops 240 $B/test_cuda_ops
    grep -E "^FAIL" "$OUT/parity_ops.log" | head -10
    run parity_fwd_ops 240 $B/test_cuda_fwd_ops
    grep -E "^FAIL" "$OUT/parity_fwd_ops.log" | head -10
    # the small shapes the full run leaves to --quick (exhaustive FP4 / e8m0 decodes, edge cases)
    run parity_fwd_ops_quick 120 $B/test_cuda_fwd_ops --quick
    grep -E "^FAIL" "$OUT/parity_fwd_ops_quick.log" | head -10
fi

# ---- 3. model tests on the GPU ----
if want fixture; then
    export DEEPINFER_ACCELERATOR=nvidia
    run fixture_tiny 300 $B/test_fixture_tiny
    grep -E "backend|prompt|argmax|CHECK" "$OUT/fixture_tiny.log" | head -40
    run fixture_debug 300 $B/test_fixture_debug
    grep -E "CHECK|layer|differ" "$OUT/fixture_debug.log" | head -20
    # the exact GEMMs (DEEPINFER_GPU_EXACT=1): every tensor as on the CPU
    DEEPINFER_GPU_EXACT=1 run fixture_debug_exact 300 $B/test_fixture_debug
    grep -E "CHECK" "$OUT/fixture_debug_exact.log" | head -10
    run forward_chunked 300 $B/test_forward_chunked
    grep -E "CHECK" "$OUT/forward_chunked.log" | head -5
    run batch_invariance 300 $B/test_batch_invariance
    grep -E "batch of|CHECK" "$OUT/batch_invariance.log" | head -10
    run engine 300 $B/test_engine
    grep -E "CHECK" "$OUT/engine.log" | head -10
    # CUDA graphs: graph = eager bit for bit, kept graphs reused; the fixture with every kernel launched directly
    run device_graphs 300 $B/test_device_graphs
    grep -E "graphs:|calls|CHECK|differ" "$OUT/device_graphs.log" | head -10
    # the routed experts' int8 twin and its fused SwiGLU end to end (widths the fixture does not reach)
    run wide_model 300 $B/test_wide_model_gpu
    grep -E "prompt|twin|argmax agreement|CHECK|SKIPPED" "$OUT/wide_model.log" | head -50
    DEEPINFER_ENFORCE_EAGER=1 run fixture_tiny_eager 300 $B/test_fixture_tiny
    grep -E "CHECK" "$OUT/fixture_tiny_eager.log" | head -10
    unset DEEPINFER_ACCELERATOR
fi

# ---- 3b. the prefill-sized GEMMs on the mma.sync tiles (DEEPINFER_GPU_WGMMA=0): the model tests and
# the bench with them ----
if want mmasync; then
    export DEEPINFER_ACCELERATOR=nvidia DEEPINFER_GPU_WGMMA=0
    for t in fixture_tiny fixture_debug forward_chunked engine device_graphs; do
        run mmasync_$t 300 $B/test_$t
        grep -E "^FAIL" "$OUT/mmasync_$t.log" | head -5
    done
    run mmasync_bench 400 $B/deepinfer bench --backend cuda --quick ${BENCH_ARGS:-}
    grep -E "^\| (decode|prefill)" "$OUT/mmasync_bench.log"
    unset DEEPINFER_ACCELERATOR DEEPINFER_GPU_WGMMA
fi

# ---- 4. sanitizers on a fixture run ----
if want sanitize && command -v compute-sanitizer >/dev/null; then
    export DEEPINFER_ACCELERATOR=nvidia
    want memcheck && run memcheck 420 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_forward_chunked
    want memcheck && grep -E "ERROR SUMMARY|passed" "$OUT/memcheck.log" | tail -2
    want memcheck && grep -m3 -A8 "^========= [A-Z]" "$OUT/memcheck.log" | grep -v SUMMARY | head -30
    # racecheck is far slower: one short run (4-token prefill + 2 decode steps)
    run racecheck 200 compute-sanitizer --tool racecheck --error-exitcode 9 $B/deepinfer logits --backend cuda \
        --model tests/data/v41-tiny --ids 0,5,9,17,33,70 --prefill 4 --out /tmp/di-racecheck.f32
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|passed" "$OUT/racecheck.log" | tail -2
    # a 20-token prefill: the tiny model's dense FP8 linears then take the wgmma kernel (> 16 rows)
    run racecheck_wgmma 200 compute-sanitizer --tool racecheck --error-exitcode 9 $B/deepinfer logits --backend cuda \
        --model tests/data/v41-tiny --ids 0,5,9,17,33,70,81,99,120,7,44,61,300,12,15,88,91,240,3,64,77,19 \
        --prefill 20 --out /tmp/di-racecheck2.f32
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|passed" "$OUT/racecheck_wgmma.log" | tail -2
    # kernels the tiny model's shapes do not reach (the decode-sized GEMM twin needs K % 128 == 0):
    # the op suite's small shapes under both tools
    want memcheck && run memcheck_ops 180 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_cuda_fwd_ops --quick
    want memcheck && grep -E "ERROR SUMMARY|passed" "$OUT/memcheck_ops.log" | tail -2
    run racecheck_ops 240 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_cuda_fwd_ops --quick
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|passed" "$OUT/racecheck_ops.log" | tail -2
    # the wgmma attention kernel takes only the real shape (64 heads of dim 512): its op cases
    want memcheck && run memcheck_attn 180 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_cuda_ops --attn
    want memcheck && grep -E "ERROR SUMMARY|passed" "$OUT/memcheck_attn.log" | tail -2
    run racecheck_attn 240 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_cuda_ops --attn
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|passed" "$OUT/racecheck_attn.log" | tail -2
    unset DEEPINFER_ACCELERATOR
fi

# ---- 4b. what racecheck makes of slot-ring handshakes (only when named): the hazards each form of
# tools/cuda/probe_racecheck.cu reports, every sum checked ----
if want racecheck_probe && command -v compute-sanitizer >/dev/null; then
    for v in 0 1 2 3 4; do
        run racecheck_probe_$v 120 compute-sanitizer --tool racecheck $B/deepinfer-cuda-probe-racecheck $v
        grep -E "probe-racecheck|RACECHECK SUMMARY" "$OUT/racecheck_probe_$v.log" | tr '\n' ' '
        echo
    done
fi

# ---- 5. benchmark and demo ----
if want bench; then
    BQ=""
    [ "$QUICK" = 1 ] && BQ="--quick"
    run bench 400 $B/deepinfer bench --backend cuda $BQ ${BENCH_ARGS:-}
    cat "$OUT/bench.log"
fi
if want bench_bi; then # the same in batch-invariant mode: its cost against the default
    BQ=""
    [ "$QUICK" = 1 ] && BQ="--quick"
    DEEPINFER_BATCH_INVARIANT=1 run bench_bi 400 $B/deepinfer bench --backend cuda $BQ ${BENCH_ARGS:-}
    cat "$OUT/bench_bi.log"
fi
if want demo; then
    run demo 120 $B/deepinfer generate --backend cuda -p "The capital of France is" --max-tokens 24 --temperature 0 \
        --demo-model-dir /tmp/di-demo
    tail -5 "$OUT/demo.log"
fi
# the device tool brings back at most 8 files: the stages' logs travel as one archive
# (tar xzf logs.tar.gz) unless KEEP_LOGS=1 leaves them as they are
# (logs-2.tar.gz, ... when an earlier stage of the same call packed its own: device_profile.sh
# builds through this script after its caller's logs are packed). Only this script's own logs:
# a caller's log in $OUT (bash x.sh > $OUT/x.log) is left where it is.
made=$(cd "$OUT" && for f in $MADE; do [ -e "$f" ] && echo "$f"; done)
if [ "${KEEP_LOGS:-0}" != 1 ] && [ -n "$made" ]; then
    A=logs.tar.gz
    n=2
    while [ -e "$OUT/$A" ]; do A=logs-$n.tar.gz; n=$((n + 1)); done
    # shellcheck disable=SC2086
    (cd "$OUT" && tar czf "$A" $made && rm -f $made)
fi
log "done"
