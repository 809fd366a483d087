/* The CUDA-call check every CUDA file shares -- the library's kernels (through cuda_common.cuh),
 * the parity tests (tests/cuda/cuda_test_util.cuh) and the standalone probes of tools/cuda/: a
 * failed call prints where and what failed, then aborts (a library error that reaches here is a
 * bug, never bad input: input is checked before any launch). Needs only the CUDA runtime. */
#ifndef DI_CUDA_CHECK_CUH
#define DI_CUDA_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define DI_CUDA_CHECK(call)                                                                     \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: CUDA error %s: %s\n", __FILE__, __LINE__, #call,           \
                    cudaGetErrorString(e_));                                                    \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

#endif
