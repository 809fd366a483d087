#!/usr/bin/env bash
# Runs a CUDA parity test's small shapes (default: test_cuda_ops --quick) with the kernels executed
# on the CPU through cuda_emu.h: a logic check (indexing, barriers, warp collectives) for machines
# without a GPU. Not a substitute for the device run (tools/cuda/device_run.sh).
#     bash tools/cuda/emu/run_emu.sh [test args]
#     EMU_TEST=test_cuda_fwd_ops bash tools/cuda/emu/run_emu.sh [test args]
# EMU_TEST names the tests/cuda/<name>.cu to build (default test_cuda_ops); EMU_BUILD the build
# folder, EMU_JOBS the parallel compiles (default nproc). Each test gets its own executable, $EMU_BUILD/<name>_emu.
# EMU_SMS=132 makes the emulated card report 132 multiprocessors (an H100's): the launch shapes a
# real card gets, e.g. the sampling kernels' clusters of 8 (`EMU_SMS=132 $EMU_BUILD/<name>_emu args` reruns one).
# EMU_SANITIZE=1 builds with AddressSanitizer and UBSan (-O1 -g): out-of-bounds device buffers (the
# emulator's cudaMalloc is the host heap) and undefined arithmetic in the kernels' logic -- a
# stand-in for compute-sanitizer memcheck when no device time is left (use its own EMU_BUILD folder).
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=${EMU_BUILD:-/tmp/deepinfer-cuda-emu}
T=${EMU_TEST:-test_cuda_ops}
[ -f "tests/cuda/$T.cu" ] || { echo "run_emu.sh: no tests/cuda/$T.cu" >&2; exit 2; }
mkdir -p "$B/kernels" "$B/tests"
srcs=()
for f in src/backend/cuda/*.cu; do
    # not the ceilings (cuBLASLt is not emulated) nor the forward driver's kernels (run_emu_model.sh)
    case "$(basename "$f")" in cuda_ceilings.cu | gpu_kernels.cu) continue ;; esac
    python3 tools/cuda/emu/translate.py "$f" "$B/kernels/$(basename "$f" .cu).cpp"
    srcs+=("$B/kernels/$(basename "$f" .cu).cpp")
done
python3 tools/cuda/emu/translate.py "tests/cuda/$T.cu" "$B/tests/$T.cpp"
srcs+=("$B/tests/$T.cpp" tools/cuda/emu/emu_runtime.cpp)
J=${EMU_JOBS:-$(nproc)}
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$J" ]; do wait -n; done; }
OPT="-O2"
if [ "${EMU_SANITIZE:-0}" = 1 ]; then # the tests leave some host buffers to the exit: no leak report
    OPT="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined"
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
fi
CXXFLAGS="-std=c++20 $OPT -pthread -Itools/cuda/emu/include -Isrc -Iinclude -Itests/cuda -D_GNU_SOURCE -w"
objs=()
for f in "${srcs[@]}"; do
    o="$B/$(basename "$f" .cpp).o"
    throttle
    g++ $CXXFLAGS -c "$f" -o "$o" &
    objs+=("$o")
done
for f in src/base/numerics.c src/base/error.c src/backend/cpu/*.c src/forward/index_key.c src/forward/kv_record.c \
    src/sample/*.c; do
    o="$B/$(basename "$f" .c).c.o"
    throttle
    gcc -std=c11 $OPT -D_GNU_SOURCE -fopenmp -Isrc -Iinclude -c "$f" -o "$o" &
    objs+=("$o")
done
wait
g++ $OPT -pthread -fopenmp -o "$B/${T}_emu" "${objs[@]}" -lm
"$B/${T}_emu" "${@:---quick}"
