/* The card's ceilings, measured in the same run as whatever they judge (docs/PERFORMANCE.md):
 * HBM copy bandwidth (cudaMemcpy device-to-device and a 16-byte copy kernel, bytes read + written)
 * and dense BF16 / FP8 e4m3 matrix rates through cuBLASLt (fp32 accumulation, bf16 out, random
 * data, n^3 with n = 8192, 4096 in quick mode). Used by deepinfer-cuda-bench and by the GPU model
 * benchmark of `deepinfer bench` (through the device backend). Also the timing helper both use:
 * the median of event-timed loops. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ceilings.h"
#include "backend/cuda/cuda_common.cuh"

#define CK(call) DI_CUDA_CHECK(call)

static int g_quick;
static double g_hbm_gbs, g_bf16_tflops, g_fp8_tflops;

/* ---- random device data ---- */
__global__ void fill_bytes_kernel(uint8_t *p, size_t n, uint32_t seed, uint8_t mask_nan_e4m3) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        uint8_t b = (uint8_t)h;
        if (mask_nan_e4m3 && (b & 0x7f) == 0x7f) b = 0x38; /* NaN code -> 1.0 */
        p[i] = b;
    }
}
__global__ void fill_scale_kernel(uint8_t *p, size_t n, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = (uint8_t)(120 + ((i * 7919u + seed) % 8));
}
__global__ void fill_f32_kernel(float *p, size_t n, uint32_t seed) { /* bf16-exact O(1) values */
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16;
        h *= 0x45d9f3bu;
        h ^= h >> 16;
        p[i] = (float)((int)(h & 1023) - 512) / 256.0f;
    }
}
__global__ void fill_bf16_kernel(uint16_t *p, size_t n, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16;
        p[i] = (uint16_t)(0x3c00 + (h & 0x7ff)) | (uint16_t)((h & 0x10000) ? 0x8000 : 0);
    }
}
extern "C" void *di_cuda_dalloc_random(size_t n, bool e4m3) {
    void *p;
    CK(cudaMalloc(&p, n));
    fill_bytes_kernel<<<1024, 256>>>((uint8_t *)p, n, (uint32_t)rand(), e4m3);
    CK(cudaGetLastError());
    return p;
}
extern "C" float *di_cuda_dalloc_random_f32(size_t n) {
    float *p;
    CK(cudaMalloc(&p, n * 4));
    fill_f32_kernel<<<1024, 256>>>(p, n, (uint32_t)rand());
    CK(cudaGetLastError());
    return p;
}

/* ---- timing: median of `trials` event-timed loops of `reps` calls ---- */
extern "C" double di_cuda_time_ms(di_bench_fn fn, void *arg, int reps, int trials) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 2; i++) fn(arg, i); /* warm-up */
    CK(cudaDeviceSynchronize());
    double t[16];
    if (trials > 16) trials = 16;
    for (int k = 0; k < trials; k++) {
        CK(cudaEventRecord(a, 0));
        for (int i = 0; i < reps; i++) fn(arg, i);
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t[k] = ms / reps;
    }
    CK(cudaGetLastError());
    for (int i = 0; i < trials; i++)
        for (int j = i + 1; j < trials; j++)
            if (t[j] < t[i]) {
                double s = t[i];
                t[i] = t[j];
                t[j] = s;
            }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return t[trials / 2];
}

/* ---- 1. copy bandwidth ---- */
struct copy_arg { void *dst, *src; size_t bytes; };
static void run_memcpy(void *p, int rep) {
    copy_arg *c = (copy_arg *)p;
    CK(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, 0));
}
__global__ void copy_kernel(const int4 *__restrict__ src, int4 *__restrict__ dst, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
}
static void run_copy_kernel(void *p, int rep) {
    copy_arg *c = (copy_arg *)p;
    int dev, sms;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    copy_kernel<<<sms * 8, 512>>>((const int4 *)c->src, (int4 *)c->dst, c->bytes / 16);
}

static void bench_copy(bool verbose) {
    copy_arg c;
    c.bytes = (size_t)(g_quick ? 512 : 2048) << 20;
    c.src = di_cuda_dalloc_random(c.bytes, false);
    CK(cudaMalloc(&c.dst, c.bytes));
    double ms1 = di_cuda_time_ms(run_memcpy, &c, 5, 5), ms2 = di_cuda_time_ms(run_copy_kernel, &c, 5, 5);
    double gb1 = 2.0 * c.bytes / ms1 / 1e6, gb2 = 2.0 * c.bytes / ms2 / 1e6;
    g_hbm_gbs = gb1 > gb2 ? gb1 : gb2;
    if (verbose) printf("HBM copy bandwidth (bytes read + written, %zu MiB buffers)\n", c.bytes >> 20);
    if (verbose) printf("  cudaMemcpy D2D      %8.1f GB/s  (%.3f ms)\n", gb1, ms1);
    if (verbose) printf("  copy kernel (16 B)  %8.1f GB/s  (%.3f ms)\n", gb2, ms2);
    if (verbose) printf("  roofline uses       %8.1f GB/s\n\n", g_hbm_gbs);
    cudaFree(c.src);
    cudaFree(c.dst);
}

/* ---- 2. cuBLASLt matrix rates ---- */
struct lt_arg {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    void *a, *b, *c, *ws;
    size_t ws_bytes;
};
static void run_lt(void *p, int rep) {
    lt_arg *g = (lt_arg *)p;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasLtMatmul(g->lt, g->op, &one, g->a, g->la, g->b, g->lb, &zero, g->c, g->lc,
                                       g->c, g->lc, &g->algo, g->ws, g->ws_bytes, 0);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasLtMatmul failed: %d\n", (int)st);
        exit(2);
    }
}

/* ms of one D [N, M] bf16 = A^T B (column-major, "TN" as FP8 requires: A [K, N], B [K, M] of
 * `type`, random data), median of `reps`-call loops; < 0 where cuBLASLt has no algorithm */
static double lt_gemm_ms(cublasLtHandle_t lt, cudaDataType type, int64_t M, int64_t N, int64_t K, int reps) {
    lt_arg g;
    memset(&g, 0, sizeof g);
    g.lt = lt;
    const size_t el = type == CUDA_R_16BF ? 2 : 1;
    g.a = di_cuda_dalloc_random((size_t)(K * N) * el, type != CUDA_R_16BF);
    g.b = di_cuda_dalloc_random((size_t)(K * M) * el, type != CUDA_R_16BF);
    if (type == CUDA_R_16BF) {
        fill_bf16_kernel<<<1024, 256>>>((uint16_t *)g.a, (size_t)(K * N), 1);
        fill_bf16_kernel<<<1024, 256>>>((uint16_t *)g.b, (size_t)(K * M), 2);
    }
    CK(cudaMalloc(&g.c, (size_t)(N * M) * 2));
    g.ws_bytes = 64 << 20;
    CK(cudaMalloc(&g.ws, g.ws_bytes));
    cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatrixLayoutCreate(&g.la, type, K, N, K);
    cublasLtMatrixLayoutCreate(&g.lb, type, K, M, K);
    cublasLtMatrixLayoutCreate(&g.lc, CUDA_R_16BF, N, M, N);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g.ws_bytes,
                                         sizeof g.ws_bytes);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, g.op, g.la, g.lb, g.lc, g.lc, pref, 1, &res, &found);
    double ms = -1.0;
    if (st == CUBLAS_STATUS_SUCCESS && found != 0) {
        g.algo = res.algo;
        ms = di_cuda_time_ms(run_lt, &g, reps, 5);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(g.la);
    cublasLtMatrixLayoutDestroy(g.lb);
    cublasLtMatrixLayoutDestroy(g.lc);
    cublasLtMatmulDescDestroy(g.op);
    cudaFree(g.a), cudaFree(g.b), cudaFree(g.c), cudaFree(g.ws);
    return ms;
}

/* n^3 of `type`: TFLOP/s (0 where cuBLASLt has no algorithm) */
static double bench_lt(cublasLtHandle_t lt, cudaDataType type, const char *name, int n, bool verbose) {
    const double ms = lt_gemm_ms(lt, type, n, n, n, g_quick ? 3 : 10);
    if (ms < 0.0) {
        if (verbose) printf("  %-6s %5d^3  no cuBLASLt algorithm\n", name, n);
        return 0.0;
    }
    const double tflops = 2.0 * n * (double)n * n / ms / 1e9;
    if (verbose) printf("  %-6s %5d^3  %8.1f TFLOP/s  (%.3f ms)\n", name, n, tflops, ms);
    return tflops;
}

extern "C" double di_cuda_lt_bf16_ms(int64_t M, int64_t N, int64_t K) {
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return -1.0;
    const double ms = lt_gemm_ms(lt, CUDA_R_16BF, M, N, K, 10);
    cublasLtDestroy(lt);
    return ms;
}

static void bench_matrix_rates(bool verbose) {
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        if (verbose) printf("cuBLASLt unavailable\n");
        return;
    }
    if (verbose) printf("Dense matrix rates (cuBLASLt, fp32 accumulation, bf16 out, random data)\n");
    const int n = g_quick ? 4096 : 8192;
    g_bf16_tflops = bench_lt(lt, CUDA_R_16BF, "BF16", n, verbose);
    g_fp8_tflops = bench_lt(lt, CUDA_R_8F_E4M3, "FP8", n, verbose);
    if (verbose) printf("\n");
    cublasLtDestroy(lt);
}

extern "C" void di_cuda_measure_ceilings(bool quick, bool verbose, di_cuda_ceilings *out) {
    g_quick = quick;
    bench_copy(verbose);
    bench_matrix_rates(verbose);
    out->hbm_gbs = g_hbm_gbs;
    out->bf16_tflops = g_bf16_tflops;
    out->fp8_tflops = g_fp8_tflops;
}

extern "C" void di_cuda_fill_scale(uint8_t *p, size_t n, uint32_t seed) {
    fill_scale_kernel<<<256, 256>>>(p, n, seed);
    CK(cudaGetLastError());
}
extern "C" void di_cuda_fill_bf16(uint16_t *p, size_t n, uint32_t seed) {
    fill_bf16_kernel<<<64, 256>>>(p, n, seed);
    CK(cudaGetLastError());
}
