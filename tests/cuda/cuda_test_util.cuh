/* What the CUDA parity tests (test_cuda_ops.cu, test_cuda_fwd_ops.cu) share: the CUDA-call check,
 * the random inputs (splitmix64, a seed per test: #define CUDA_TEST_SEED before including, so a
 * test's inputs stay what they were), device buffers (uploads and NaN-poisoned outputs, each
 * synchronised so that the context's stream never overtakes them) and the device line a test
 * prints first. */
#ifndef DI_CUDA_TEST_UTIL_CUH
#define DI_CUDA_TEST_UTIL_CUH

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.cuh"

extern "C" {
#include "base/numerics.h"
}

#ifndef CUDA_TEST_SEED
#error "define CUDA_TEST_SEED before including cuda_test_util.cuh"
#endif

#define CK(call) DI_CUDA_CHECK(call)

/* ---- random inputs (splitmix64) ---- */
static uint64_t g_rng = CUDA_TEST_SEED;
static uint64_t rnd_u64(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rnd_unit(void) { return (float)((rnd_u64() >> 40) * 0x1p-24); } /* [0, 1) */
static float rnd_normalish(void) { return (rnd_unit() + rnd_unit() + rnd_unit() - 1.5f) * 2.0f; }
/* bf16-exact activations of wide range: mostly O(scale), some tiny, some large, some exact zeros */
static void fill_wide(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = rnd_u64() & 1023;
        float v = rnd_normalish() * scale;
        if (r < 4) v = 0.0f;
        else if (r < 12) v *= 300.0f;
        else if (r < 20) v *= 1e-3f;
        x[i] = di_bf16_round(v);
    }
}

/* ---- device buffers ---- */
static void *dev_upload(const void *h, size_t bytes) {
    void *d;
    CK(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* the context's stream must not overtake the copy */
    return d;
}
static void *dev_poisoned_with(size_t bytes, int byte) {
    void *d;
    CK(cudaMalloc(&d, bytes ? bytes : 1));
    CK(cudaMemset(d, byte, bytes));
    CK(cudaDeviceSynchronize());
    return d;
}
static void *dev_poisoned(size_t bytes) { return dev_poisoned_with(bytes, 0xff); } /* NaN floats */
static void dev_download(void *h, const void *d, size_t bytes) {
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}
/* d [n] <- n floats on the bf16 grid as their bf16 bits (the mHC stream's form: exact) */
static void dev_copy_bf16(uint16_t *d, const float *x, int64_t n) {
    uint16_t *h = (uint16_t *)malloc(2 * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) h[i] = di_f32_to_bf16(x[i]);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(d, h, 2 * (size_t)n, cudaMemcpyHostToDevice));
    free(h);
}
static uint16_t *dev_upload_bf16(const float *x, int64_t n) {
    uint16_t *d = (uint16_t *)dev_poisoned(2 * (size_t)n);
    dev_copy_bf16(d, x, n);
    return d;
}
/* h [n] <- n bf16 values on the device, widened */
static void dev_download_bf16(float *h, const uint16_t *d, int64_t n) {
    uint16_t *b = (uint16_t *)malloc(2 * (size_t)(n ? n : 1));
    dev_download(b, d, 2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = di_bf16_to_f32(b[i]);
    free(b);
}

/* ---- the quantised linears' tensor-core bound ----
 * Weight n, k of an FP8 (32x32 ue8m0 blocks) or FP4 (e2m1 codes two a byte, a ue8m0 scale per 32 of
 * a row) matrix of K columns, as the CPU reads it. */
static double quant_weight_value(bool fp4, const uint8_t *wd, const uint8_t *ws, int64_t K, int64_t n, int64_t k) {
    return fp4 ? (double)di_e2m1_lut[(wd[(n * K + k) / 2] >> (4 * (k & 1))) & 15] * di_e8m0_to_f32(ws[n * (K / 32) + k / 32])
               : (double)di_e4m3_to_f32(wd[n * K + k]) * di_e8m0_to_f32(ws[(n / 32) * ((K + 31) / 32) + k / 32]);
}
/* How far a tensor-core output may lie from the CPU's ref = y[r, n] of x [., K] times that matrix:
 * each 32-product block sum comes from a tensor core whose accumulation keeps about 14 bits relative
 * to the largest addend (DeepSeek-V3 report, 3.3.2): a block sum is off by less than
 * 32 * 2^-14 * max|p| <= 2^-9 * sum|p|; over all blocks <= 2^-9 * sum_k |xq_k w_k| <=
 * 2^-9 * 1.07 * sum_k |x_k w_k| (act_quant moves a value by at most 2^-4 of its block's max), plus
 * one bf16 ulp where the final roundings of the two nearby sums part ways. */
static double quant_linear_bound(bool fp4, const uint8_t *wd, const uint8_t *ws, int64_t K, const float *x_row, int64_t n,
                                 float ref) {
    double sabs = 0.0;
    for (int64_t k = 0; k < K; k++) sabs += fabs(x_row[k] * quant_weight_value(fp4, wd, ws, K, n, k));
    return 0x1p-9 * 1.07 * sabs + ldexp(1.0, ilogb(ref == 0.0f ? 1e-30f : ref) - 7);
}

/* Prints the device line; false, after "SKIPPED: no CUDA device", where there is none. */
static bool cuda_test_device(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no CUDA device\n");
        return false;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    return true;
}

#endif
