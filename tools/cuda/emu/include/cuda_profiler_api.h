/* Emulator: the profiler range calls do nothing (no profiler attaches to the emulated device). */
#ifndef DI_EMU_CUDA_PROFILER_API_H
#define DI_EMU_CUDA_PROFILER_API_H
#include "cuda_runtime_api.h" /* the C or C++ view */
static inline cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
static inline cudaError_t cudaProfilerStop(void) { return cudaSuccess; }
#endif
