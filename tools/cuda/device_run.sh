#!/usr/bin/env bash
# Builds the CUDA backend's parity test and benchmark on the GPU machine, runs both, and leaves the
# logs in $OUT (default /tmp/deepinfer-device-out). Meant for one call of the device tool, well under 8 minutes:
#     bash tools/cuda/device_run.sh
# Build: CMake with -DDI_CUDA=ON when the CPU build's libraries (cJSON, PCRE2, ICU via pkg-config)
# are there; otherwise (the usual case on the CUDA image) a direct build of exactly what the two
# programs need: the CPU reference kernels (src/backend/cpu, src/base/numerics.c) with gcc, the
# CUDA sources with nvcc for sm_90a. The end of the output is a summary: PASS/FAIL per op, then
# the benchmark tables.
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/deepinfer-device-out}"
mkdir -p "$OUT"
T0=$(date +%s)
log() { echo "[device_run $(( $(date +%s) - T0 ))s] $*"; }

{
    date -u
    nvidia-smi || true
    nvcc --version | tail -2
    gcc --version | head -1
    cmake --version | head -1
    ldd --version | head -1
    grep -m1 "model name" /proc/cpuinfo
    nproc
} >"$OUT/machine.txt" 2>&1
log "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

# the CPU reference's expf on this machine vs the device twin's algorithm (attention and Sinkhorn
# parity rest on it)
gcc -O2 -std=c11 -ffp-contract=off tools/cuda/check_expf.c -o /tmp/di_check_expf -lm &&
    /tmp/di_check_expf >"$OUT/expf.log" 2>&1
log "$(tail -1 "$OUT/expf.log" 2>/dev/null)"

BIN=""
JOBS=$(nproc)
if cmake -S . -B build-cuda-dev -DCMAKE_BUILD_TYPE=Release -DDI_CUDA=ON >"$OUT/build.log" 2>&1 &&
    timeout 300 cmake --build build-cuda-dev -j "$JOBS" --target cuda_all >>"$OUT/build.log" 2>&1; then
    BIN=build-cuda-dev
    log "built with CMake (-DDI_CUDA=ON) into $BIN"
else
    log "CMake build not possible here (see build.log); building directly with gcc + nvcc"
    BIN=build-cuda-direct
    mkdir -p "$BIN/obj"
    CFLAGS="-O2 -g -std=c11 -D_GNU_SOURCE -fopenmp -Isrc -Iinclude"
    NVFLAGS="-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -D_GNU_SOURCE -Isrc -Iinclude"
    ok=1
    {
        for f in src/base/numerics.c src/backend/cpu/*.c; do
            gcc $CFLAGS -c "$f" -o "$BIN/obj/$(basename "$f" .c).o" &
        done
        for f in src/backend/cuda/*.cu; do
            nvcc $NVFLAGS -fmad=false -c "$f" -o "$BIN/obj/$(basename "$f" .cu).cu.o" &
        done
        nvcc $NVFLAGS -c tests/cuda/test_cuda_ops.cu -o "$BIN/obj/test_cuda_ops.main.o" &
        nvcc $NVFLAGS -c tools/cuda/bench_roofline.cu -o "$BIN/obj/bench_roofline.main.o" &
        wait
    } >>"$OUT/build.log" 2>&1
    LIBOBJ=$(ls "$BIN"/obj/*.o | grep -v '\.main\.o$')
    nvcc -gencode=arch=compute_90a,code=sm_90a -o "$BIN/test_cuda_ops" "$BIN/obj/test_cuda_ops.main.o" $LIBOBJ \
        -lcublas -lcublasLt -lgomp -lm >>"$OUT/build.log" 2>&1 || ok=0
    nvcc -gencode=arch=compute_90a,code=sm_90a -o "$BIN/deepinfer-cuda-bench" "$BIN/obj/bench_roofline.main.o" \
        $LIBOBJ -lcublas -lcublasLt -lgomp -lm >>"$OUT/build.log" 2>&1 || ok=0
    [ "$ok" = 1 ] || log "direct build FAILED (tail of build.log follows)"
fi
tail -5 "$OUT/build.log"
log "build done"

PARITY_RC=none
if [ -x "$BIN/test_cuda_ops" ]; then
    OMP_NUM_THREADS=$JOBS timeout 300 "$BIN/test_cuda_ops" >"$OUT/parity.log" 2>&1
    PARITY_RC=$?
    log "parity suite exit code $PARITY_RC"
fi
BENCH_RC=none
if [ -x "$BIN/deepinfer-cuda-bench" ]; then
    timeout 200 "$BIN/deepinfer-cuda-bench" >"$OUT/bench.log" 2>&1
    BENCH_RC=$?
    log "benchmark exit code $BENCH_RC"
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$OUT/machine.txt" 2>&1

# compute-sanitizer on the small-shape suite, time permitting (memcheck, then racecheck)
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
SAN_RC="skipped"
if [ -n "$SAN" ] && [ -x "$BIN/test_cuda_ops" ] && [ $(( $(date +%s) - T0 )) -lt 300 ]; then
    SAN_RC=""
    for tool in memcheck racecheck; do
        timeout 75 "$SAN" --tool $tool --error-exitcode 9 "$BIN/test_cuda_ops" --quick >"$OUT/sanitizer-$tool.log" 2>&1
        rc=$?
        SAN_RC="$SAN_RC $tool=$rc"
        log "compute-sanitizer $tool exit code $rc (124 = timed out)"
    done
fi

echo
echo "================ parity: CUDA ops vs CPU reference (exit $PARITY_RC) ================"
echo "expf twin check: $(tail -1 "$OUT/expf.log" 2>/dev/null)"
[ -f "$OUT/parity.log" ] && cat "$OUT/parity.log"
echo
echo "================ benchmark (exit $BENCH_RC) ================"
[ -f "$OUT/bench.log" ] && cat "$OUT/bench.log"
echo
echo "================ compute-sanitizer on test_cuda_ops --quick:$SAN_RC ================"
for f in "$OUT"/sanitizer-*.log; do
    [ -f "$f" ] && { echo "--- $(basename "$f")"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^PASS:|^FAIL:|Error|error" "$f" | head -8; }
done
echo
log "total wall time; logs in $OUT: machine.txt build.log parity.log bench.log sanitizer-*.log"
