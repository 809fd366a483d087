#!/usr/bin/env bash
# Runs the CUDA parity suite's small shapes (test_cuda_ops --quick) with the kernels executed on
# the CPU through cuda_emu.h: a logic check (indexing, barriers, warp collectives) for machines
# without a GPU. Not a substitute for the device run (tools/cuda/device_run.sh).
#     bash tools/cuda/emu/run_emu.sh [test args]
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=${EMU_BUILD:-/tmp/deepinfer-cuda-emu}
mkdir -p "$B"
for f in src/backend/cuda/*.cu tests/cuda/test_cuda_ops.cu; do
    python3 tools/cuda/emu/translate.py "$f" "$B/$(basename "$f" .cu).cpp"
done
CXXFLAGS="-std=c++20 -O2 -pthread -Itools/cuda/emu/include -Isrc -Iinclude -D_GNU_SOURCE -w"
objs=()
for f in "$B"/*.cpp tools/cuda/emu/emu_runtime.cpp; do
    o="$B/$(basename "$f" .cpp).o"
    g++ $CXXFLAGS -c "$f" -o "$o" &
    objs+=("$o")
done
for f in src/base/numerics.c src/backend/cpu/*.c; do
    o="$B/$(basename "$f" .c).c.o"
    gcc -std=c11 -O2 -D_GNU_SOURCE -fopenmp -Isrc -Iinclude -c "$f" -o "$o" &
    objs+=("$o")
done
wait
g++ -pthread -fopenmp -o "$B/test_cuda_ops_emu" "${objs[@]}" -lm
"$B/test_cuda_ops_emu" "${@:---quick}"
