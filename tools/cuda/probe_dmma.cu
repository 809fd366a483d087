/* What the fp64 tensor cores give the mHC mix sums (issue 5; cuda_mhc.cu): sm_90's mma.sync shapes
 * for f64 -- the m8n8k4 of sm_80 and the m16n8k4 / k8 / k16 that PTX 7.8 added for sm_90 -- timed
 * on one GPU, and the m16n8k16 fragment layout checked against a CPU product.
 *
 * Lines printed:
 *   layout    m16n8k16 with A[m][k] = m + 16 k + 1 and B[k][n] = (k + 1) (n + 3) (small integers:
 *             exact) against the CPU's product, for the layout cuda_mma.cuh's di_mma_f64_16816
 *             assumes (lane 4 g + t: a[i] = A[g + 8 (i % 2)][t + 4 (i / 2)], b[i] = B[t + 4 i][g],
 *             d[i] = D[g + 8 (i / 2)][2 t + i % 2]) -- "ok" or the first difference
 *   chain     the same k16 as four m8n8k4 steps (value 4 t + u of the step at sub-step u) against
 *             one m16n8k16 (mapping k = t + 4 j to value 4 t + j) on random doubles: how many of
 *             the outputs differ in any bit (the summation order inside the instruction)
 *   rate      TFLOP/s of each shape with every multiprocessor busy (blocks x 8 warps, 6 independent
 *             accumulator chains a warp), and the latency of one dependent chain (one warp), in
 *             cycles an instruction (clock64)
 *     deepinfer-cuda-probe-dmma */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_mma.cuh" /* di_mma_f64_884 and di_mma_f64_16816: the wrappers the mix sums call */
#include "backend/cuda/cuda_check.cuh" /* DI_CUDA_CHECK */

#define CK(call) DI_CUDA_CHECK(call)

/* m16n8k4 and m16n8k8 (sm_90), accumulating in place: shapes the engine does not use, timed here alone */
static __device__ __forceinline__ void mma1684(double (&d)[4], const double (&a)[2], double b) {
    asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                 : "d"(a[0]), "d"(a[1]), "d"(b));
}
static __device__ __forceinline__ void mma1688(double (&d)[4], const double (&a)[4], const double (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                 : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
}

/* A [16][16], B [16][8] row-major -> D [16][8] through one m16n8k16 (the assumed layout) */
__global__ void layout_kernel(const double *A, const double *B, double *D) {
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    double a[8], b[4], d[4] = {0.0, 0.0, 0.0, 0.0};
    for (int i = 0; i < 8; i++) a[i] = A[(g + 8 * (i % 2)) * 16 + t + 4 * (i / 2)];
    for (int i = 0; i < 4; i++) b[i] = B[(t + 4 * i) * 8 + g];
    di_mma_f64_16816(d, a, b, d);
    for (int i = 0; i < 4; i++) D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

/* X [tiles][16 tokens][16 values], F [tiles][8 rows][16 values]: D884 via two 8-token halves of four
 * m8n8k4 sub-steps (sub-step u: k index t = value 4 t + u), D16816 via one m16n8k16 (k = t + 4 j:
 * value 4 t + j); both [tiles][16][8] */
__global__ void chain_kernel(const double *X, const double *F, double *D884, double *D16816) {
    const int tile = blockIdx.x, lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const double *x = X + tile * 256, *f = F + tile * 128;
    double a[8], b[4], d[4] = {0.0, 0.0, 0.0, 0.0};
    for (int j = 0; j < 4; j++) {
        a[2 * j] = x[g * 16 + 4 * t + j];
        a[2 * j + 1] = x[(g + 8) * 16 + 4 * t + j];
        b[j] = f[g * 16 + 4 * t + j];
    }
    di_mma_f64_16816(d, a, b, d);
    for (int i = 0; i < 4; i++) D16816[tile * 128 + (g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
    for (int h = 0; h < 2; h++) {
        double e[2] = {0.0, 0.0};
        for (int u = 0; u < 4; u++) di_mma_f64_884(e, x[(g + 8 * h) * 16 + 4 * t + u], f[g * 16 + 4 * t + u], e);
        for (int i = 0; i < 2; i++) D884[tile * 128 + (g + 8 * h) * 8 + 2 * t + i] = e[i];
    }
}

#define CHAINS 6
/* SHAPE 0: m8n8k4, 1: m16n8k4, 2: m16n8k8, 3: m16n8k16; iters dependent steps of CHAINS chains */
template <int SHAPE>
__global__ void rate_kernel(int iters, double seed, double *out, long long *cycles) {
    double d[CHAINS][4];
    double a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = seed * (threadIdx.x + i);
    for (int i = 0; i < 4; i++) b[i] = seed * (i + 1);
    for (int c = 0; c < CHAINS; c++)
        for (int i = 0; i < 4; i++) d[c][i] = 0.0;
    const long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int c = 0; c < CHAINS; c++) {
            if constexpr (SHAPE == 0) {
                double dd[2] = {d[c][0], d[c][1]};
                di_mma_f64_884(dd, a[c & 7], b[c & 3], dd);
                d[c][0] = dd[0], d[c][1] = dd[1];
            } else if constexpr (SHAPE == 1) {
                const double aa[2] = {a[0], a[1]};
                mma1684(d[c], aa, b[0]);
            } else if constexpr (SHAPE == 2) {
                const double aa[4] = {a[0], a[1], a[2], a[3]}, bb[2] = {b[0], b[1]};
                mma1688(d[c], aa, bb);
            } else {
                di_mma_f64_16816(d[c], a, b, d[c]);
            }
        }
    }
    const long long t1 = clock64();
    double s = 0.0;
    for (int c = 0; c < CHAINS; c++)
        for (int i = 0; i < 4; i++) s += d[c][i];
    if (s == 12345.0) out[0] = s; /* keeps the chains live */
    if (threadIdx.x == 0 && blockIdx.x == 0) cycles[0] = t1 - t0;
}

template <int SHAPE>
__global__ void latency_kernel(int iters, double seed, double *out, long long *cycles) {
    double d[4] = {0.0, 0.0, 0.0, 0.0}, a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = seed * (threadIdx.x + i);
    for (int i = 0; i < 4; i++) b[i] = seed * (i + 1);
    const long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
        if constexpr (SHAPE == 0) {
            double dd[2] = {d[0], d[1]};
            di_mma_f64_884(dd, a[0], b[0], dd);
            d[0] = dd[0], d[1] = dd[1];
        } else if constexpr (SHAPE == 1) {
            const double aa[2] = {a[0], a[1]};
            mma1684(d, aa, b[0]);
        } else if constexpr (SHAPE == 2) {
            const double aa[4] = {a[0], a[1], a[2], a[3]}, bb[2] = {b[0], b[1]};
            mma1688(d, aa, bb);
        } else {
            di_mma_f64_16816(d, a, b, d);
        }
    }
    const long long t1 = clock64();
    if (d[0] + d[1] + d[2] + d[3] == 12345.0) out[0] = d[0];
    if (threadIdx.x == 0) cycles[0] = t1 - t0;
}

static const char *shape_name[4] = {"m8n8k4", "m16n8k4", "m16n8k8", "m16n8k16"};
static const double shape_flops[4] = {8 * 8 * 4 * 2, 16 * 8 * 4 * 2, 16 * 8 * 8 * 2, 16 * 8 * 16 * 2};

template <int SHAPE>
static void time_shape(int sms, double *dout, long long *dcyc) {
    const int iters = 4096, blocks = sms * 4, threads = 256;
    rate_kernel<SHAPE><<<blocks, threads>>>(16, 1e-3, dout, dcyc); /* warm-up */
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    rate_kernel<SHAPE><<<blocks, threads>>>(iters, 1e-3, dout, dcyc);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double flops = (double)blocks * (threads / 32) * iters * CHAINS * shape_flops[SHAPE];
    latency_kernel<SHAPE><<<1, 32>>>(iters, 1e-3, dout, dcyc);
    long long cyc = 0;
    CK(cudaMemcpy(&cyc, dcyc, sizeof cyc, cudaMemcpyDeviceToHost));
    printf("rate      %-9s %7.2f TFLOP/s (%d blocks x 8 warps, %d chains)   latency %.1f cycles an instruction\n",
           shape_name[SHAPE], flops / (ms * 1e-3) / 1e12, blocks, CHAINS, (double)cyc / iters);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

int main(void) {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d multiprocessors\n", prop.name, prop.multiProcessorCount);
    /* layout */
    double A[256], B[128], D[128], ref[128];
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++) A[m * 16 + k] = m + 16 * k + 1;
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 8; n++) B[k * 8 + n] = (k + 1) * (n + 3);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            double s = 0.0;
            for (int k = 0; k < 16; k++) s += A[m * 16 + k] * B[k * 8 + n];
            ref[m * 8 + n] = s;
        }
    double *dA, *dB, *dD;
    CK(cudaMalloc(&dA, sizeof A));
    CK(cudaMalloc(&dB, sizeof B));
    CK(cudaMalloc(&dD, sizeof D));
    CK(cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice));
    layout_kernel<<<1, 32>>>(dA, dB, dD);
    CK(cudaMemcpy(D, dD, sizeof D, cudaMemcpyDeviceToHost));
    int bad = -1;
    for (int i = 0; i < 128 && bad < 0; i++)
        if (D[i] != ref[i]) bad = i;
    if (bad < 0) printf("layout    m16n8k16 f64: ok (128 outputs equal the CPU product)\n");
    else printf("layout    m16n8k16 f64: DIFFERS at D[%d][%d]: %.0f, CPU %.0f\n", bad / 8, bad % 8, D[bad], ref[bad]);
    /* chain */
    const int tiles = 4096;
    double *X = (double *)malloc(sizeof(double) * tiles * 256), *F = (double *)malloc(sizeof(double) * tiles * 128);
    double *R884 = (double *)malloc(sizeof(double) * tiles * 128), *R16 = (double *)malloc(sizeof(double) * tiles * 128);
    uint64_t st = 88172645463325252ull;
    auto rnd = [&]() { /* a double of 8 significant bits times 2^[-8, 8) (a bf16-like value) */
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        const double mant = (double)(128 + (st & 127)) / 128.0, sign = (st >> 7) & 1 ? -1.0 : 1.0;
        return sign * ldexp(mant, (int)((st >> 8) % 16) - 8);
    };
    for (int i = 0; i < tiles * 256; i++) X[i] = rnd();
    for (int i = 0; i < tiles * 128; i++) F[i] = rnd() * (1.0 + ldexp((double)((st >> 20) & 0xffff), -24));
    double *dX, *dF, *d884, *d16;
    CK(cudaMalloc(&dX, sizeof(double) * tiles * 256));
    CK(cudaMalloc(&dF, sizeof(double) * tiles * 128));
    CK(cudaMalloc(&d884, sizeof(double) * tiles * 128));
    CK(cudaMalloc(&d16, sizeof(double) * tiles * 128));
    CK(cudaMemcpy(dX, X, sizeof(double) * tiles * 256, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dF, F, sizeof(double) * tiles * 128, cudaMemcpyHostToDevice));
    chain_kernel<<<tiles, 32>>>(dX, dF, d884, d16);
    CK(cudaMemcpy(R884, d884, sizeof(double) * tiles * 128, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(R16, d16, sizeof(double) * tiles * 128, cudaMemcpyDeviceToHost));
    int differ = 0;
    for (int i = 0; i < tiles * 128; i++) differ += memcmp(&R884[i], &R16[i], 8) != 0;
    printf("chain     four m8n8k4 vs one m16n8k16 over k16: %d of %d outputs differ in some bit\n", differ, tiles * 128);
    /* rates */
    double *dout;
    long long *dcyc;
    CK(cudaMalloc(&dout, 64));
    CK(cudaMalloc(&dcyc, 64));
    time_shape<0>(prop.multiProcessorCount, dout, dcyc);
    time_shape<1>(prop.multiProcessorCount, dout, dcyc);
    time_shape<2>(prop.multiProcessorCount, dout, dcyc);
    time_shape<3>(prop.multiProcessorCount, dout, dcyc);
    return bad < 0 ? 0 : 1;
}
