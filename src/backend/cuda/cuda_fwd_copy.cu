/* Data movement and tiny element-wise stages of the GPU forward pass (cuda_fwd_ops.h): row copies
 * through pointer lists or strides, the embedding into the hc stream, the hc mean of a DSpark target and the
 * indexer's head-weight scale.
 *
 * All are memory-bound loops with no reductions across threads: thread blocks per row (rows may be
 * anywhere, so each block reads its own row pointer), threads striding over the row. The
 * arithmetic is the CPU loop's expression per element (hc_mean sums its n copies in i order in
 * fp32 in one thread), so results are bit-identical. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"

#define COPY_THREADS 256

/* row i on blocks (i, 0..): each block copies COPY_CHUNK floats of the row, a thread's
 * COPY_PER_THREAD loads issued before its stores (a decode step copies a few rows of 4096-16384
 * floats: one block per row left the copy latency-bound, ~10 us for 6 rows) */
#define COPY_PER_THREAD 4
#define COPY_CHUNK (COPY_THREADS * COPY_PER_THREAD)
__global__ void __launch_bounds__(COPY_THREADS)
copy_rows_kernel(float *const *__restrict__ dst, const float *const *__restrict__ src, int64_t width) {
    DI_PDL_BEGIN();
    float *d = dst[blockIdx.x];
    if (!d) return;
    const float *s = src[blockIdx.x];
    const int64_t k0 = (int64_t)blockIdx.y * COPY_CHUNK + threadIdx.x;
    float v[COPY_PER_THREAD];
#pragma unroll
    for (int u = 0; u < COPY_PER_THREAD; u++) {
        const int64_t k = k0 + u * COPY_THREADS;
        v[u] = s && k < width ? s[k] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < COPY_PER_THREAD; u++) {
        const int64_t k = k0 + u * COPY_THREADS;
        if (k < width) d[k] = v[u];
    }
}

extern "C" void di_cuda_copy_rows(float *const *dst, const float *const *src, int64_t n, int64_t width,
                                  cudaStream_t s) {
    if (n <= 0 || width <= 0) return;
    const int64_t chunks = (width + COPY_CHUNK - 1) / COPY_CHUNK;
    if (chunks > 65535) {
        fprintf(stderr, "di_cuda_copy_rows: rows of %lld floats exceed the grid\n", (long long)width);
        abort();
    }
    copy_rows_kernel<<<dim3((unsigned)n, (unsigned)chunks), COPY_THREADS, 0, s>>>(dst, src, width);
    DI_CUDA_LAUNCHED();
}

/* block per row: dst [rows, width] (row stride dpitch floats) = src (row stride spitch floats) */
__global__ void __launch_bounds__(COPY_THREADS)
copy_strided_kernel(float *__restrict__ dst, int64_t dpitch, const float *__restrict__ src, int64_t spitch,
                    int64_t width) {
    DI_PDL_BEGIN();
    float *d = dst + (int64_t)blockIdx.x * dpitch;
    const float *s = src + (int64_t)blockIdx.x * spitch;
    for (int64_t k = threadIdx.x; k < width; k += COPY_THREADS) d[k] = s[k];
}

extern "C" void di_cuda_copy_strided(float *dst, int64_t dpitch, const float *src, int64_t spitch, int64_t width,
                                     int64_t rows, cudaStream_t s) {
    if (rows <= 0 || width <= 0) return;
    copy_strided_kernel<<<(unsigned)rows, COPY_THREADS, 0, s>>>(dst, dpitch, src, spitch, width);
    DI_CUDA_LAUNCHED();
}

/* block per (r, copy i): X [R, n, D] bf16 row (r, i) = table row tokens[r]; pre [R, n] one-hot */
__global__ void __launch_bounds__(COPY_THREADS)
embed_kernel(const uint16_t *__restrict__ table, const int32_t *__restrict__ tokens, int n, int64_t D,
             uint16_t *__restrict__ X, float *__restrict__ pre) {
    DI_PDL_BEGIN();
    const int64_t ri = blockIdx.x; /* r * n + i */
    const int64_t r = ri / n;
    const int i = (int)(ri % n);
    const uint16_t *e = table + (int64_t)tokens[r] * D; /* [D] bf16 bits */
    uint16_t *x = X + ri * D;
    for (int64_t k = threadIdx.x; k < D; k += COPY_THREADS) x[k] = e[k];
    if (threadIdx.x == 0) pre[ri] = i == 0 ? 1.0f : 0.0f;
}

extern "C" void di_cuda_embed(const uint16_t *table, const int32_t *tokens, int64_t R, int n, int64_t D,
                              uint16_t *X, float *pre, cudaStream_t s) {
    if (R <= 0 || n <= 0) return;
    embed_kernel<<<(unsigned)(R * n), COPY_THREADS, 0, s>>>(table, tokens, n, D, X, pre);
    DI_CUDA_LAUNCHED();
}

/* block per row r: out[r * stride + k] = bf16((X[r, 0, k] + ... + X[r, n-1, k]) / n), fp32 */
__global__ void __launch_bounds__(COPY_THREADS)
hc_mean_kernel(const uint16_t *__restrict__ X, int n, int64_t D, float *__restrict__ out, int64_t out_stride) {
    DI_PDL_BEGIN();
    const int64_t r = blockIdx.x;
    const uint16_t *x = X + r * n * D; /* [n, D] bf16 */
    for (int64_t k = threadIdx.x; k < D; k += COPY_THREADS) {
        float s = 0.0f;
        for (int i = 0; i < n; i++) s += di_dev_bf16_load(x + i * D + k);
        out[r * out_stride + k] = di_dev_bf16_round(s / (float)n);
    }
}

extern "C" void di_cuda_hc_mean(const uint16_t *X, int64_t R, int n, int64_t D, float *out, int64_t out_stride,
                                cudaStream_t s) {
    if (R <= 0 || D <= 0) return;
    hc_mean_kernel<<<(unsigned)R, COPY_THREADS, 0, s>>>(X, n, D, out, out_stride);
    DI_CUDA_LAUNCHED();
}

__global__ void __launch_bounds__(COPY_THREADS) scale_bf16_kernel(float *__restrict__ x, int64_t n, float scale) {
    DI_PDL_BEGIN();
    for (int64_t i = (int64_t)blockIdx.x * COPY_THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * COPY_THREADS)
        x[i] = di_dev_bf16_round(x[i] * scale);
}

extern "C" void di_cuda_scale_bf16(float *x, int64_t n, float scale, cudaStream_t s) {
    if (n <= 0) return;
    int64_t blocks = (n + COPY_THREADS - 1) / COPY_THREADS;
    if (blocks > 4096) blocks = 4096;
    scale_bf16_kernel<<<(unsigned)blocks, COPY_THREADS, 0, s>>>(x, n, scale);
    DI_CUDA_LAUNCHED();
}
