#!/usr/bin/env bash
# Runs model tests (default: test_forward_chunked) with the GPU forward pass executed on the CPU
# through the emulated CUDA runtime (cuda_emu.h for the translated kernels, cuda_emu_c.h for the
# C driver): a logic check of the driver (pointer lists, paged addressing, stage order) on a
# machine without a GPU. Slow: every thread block runs on real threads. Not a device result.
#     bash tools/cuda/emu/run_emu_model.sh [test_name ...]
# EMU_TEST_ARGS: arguments for each test (e.g. "sampling" for test_engine's sampling paths alone).
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=${EMU_BUILD:-/tmp/deepinfer-cuda-emu-model}
mkdir -p "$B/obj"
TESTS=("${@:-test_forward_chunked}")
rm -f "$B"/*.cpp
# cuda_ceilings.cu measures the card through cuBLASLt, which is not emulated: a stub stands in
for f in src/backend/cuda/*.cu; do
    [ "$(basename "$f")" = cuda_ceilings.cu ] && continue
    python3 tools/cuda/emu/translate.py "$f" "$B/$(basename "$f" .cu).cpp"
done
cat >"$B/ceilings_stub.cpp" <<'STUB'
#include "backend/cuda/cuda_ceilings.h"
extern "C" void di_cuda_measure_ceilings(bool, bool, di_cuda_ceilings *c) { c->hbm_gbs = c->bf16_tflops = c->fp8_tflops = 0; }
STUB
CXXFLAGS="-std=c++20 -O2 -pthread -Itools/cuda/emu/include -Isrc -Iinclude -D_GNU_SOURCE -w"
CFLAGS="-std=c11 -O2 -fopenmp -D_GNU_SOURCE -DDI_WITH_CUDA -DDI_SOURCE_DIR=\"$PWD\" -Isrc -Iinclude \
  -Itools/cuda/emu/include $(pkg-config --cflags libcjson libpcre2-8 icu-uc) -w"
objs=()
n=0
build() { # src obj compiler flags...
    local src=$1 obj=$2
    shift 2
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then "$@" -c "$src" -o "$obj" & n=$((n + 1)); fi
    objs+=("$obj")
    if [ $n -ge 2 ]; then wait; n=0; fi
}
for f in "$B"/*.cpp tools/cuda/emu/emu_runtime.cpp; do build "$f" "$B/obj/$(basename "$f" .cpp).o" g++ $CXXFLAGS; done
for f in $(ls src/base/*.c src/model/*.c src/tokenizer/*.c src/forward/*.c src/kv/*.c src/engine/*.c \
    src/backend/cpu/*.c src/sample/*.c src/constrain/*.c src/cli/cmd_*.c src/backend/cuda/*.c); do
    o="$B/obj/$(echo "$f" | tr / _).o"
    build "$f" "$o" gcc $CFLAGS
done
wait
# the demo model embeds the tokenizer with .incbin relative to the source dir
LIBS="$(pkg-config --libs libcjson libpcre2-8 icu-uc) -fopenmp -lm"
for t in "${TESTS[@]}"; do
    gcc $CFLAGS -c tests/$t.c -o "$B/obj/$t.main.o" -Itests
    g++ -pthread -o "$B/$t" "$B/obj/$t.main.o" "${objs[@]}" $LIBS
    echo "== $t (GPU path, emulated)"
    DI_TEST_BACKEND=cuda "$B/$t" ${EMU_TEST_ARGS:-}
done
