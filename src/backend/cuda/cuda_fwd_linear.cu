/* Fixed-order plain linear on the GPU (cuda_fwd_ops.h di_cuda_linear_fixed): y = x @ w^T with
 * BF16, F32 or FP8 (read as its exact bf16 dequantisation) weights, each output a double sum
 * rounded once, in an order that does not depend on the batch -- the twin of linear_plain() in
 * src/backend/cpu/cpu_linear.c without cuBLAS's batch-dependent algorithm choice.
 *
 * Layout: one warp per output n (LIN_WARPS per block), LIN_MT input rows per pass so each weight
 * is read once per pass for up to LIN_MT rows; grid.y spreads the passes. Lane l accumulates
 * (double)x[r, k] * w[n, k] for k = l, l + 32, l + 64, ... in that order (the products of two
 * floats are exact in double), then the 32 lane sums go through a fixed xor-shuffle butterfly
 * (every lane ends with the same value: IEEE addition commutes). The result is rounded to fp32
 * (DI_LIN_F32) or to fp32 then bf16 (DI_LIN_BF16), as the CPU does. Nothing in the order depends
 * on m or on which pass a row falls in, so row r of an m-row call equals that row computed alone.
 * The CPU sums in k order; the two agree bit for bit whenever the double sum is exact (bf16 x
 * bf16 products of moderate range: almost always), and within a double rounding otherwise.
 *
 * Weights are read with scalar loads (BF16 data may be only 2-byte aligned). FP8: the value of
 * (n, k) is e4m3(data[n + row0, k]) * e8m0(scale[(n + row0) / 32, k / 32]) in fp32 (exact),
 * as weight_plain_at() on the CPU. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"

#define LIN_WARPS 4
#define LIN_MT 8
#define LIN_MAX_GRID_Y 65535

enum { LW_BF16, LW_F32, LW_F8 };

template <int DT>
static __device__ __forceinline__ float lin_weight(const void *data, const uint8_t *scale, int64_t ns, int64_t k,
                                                   int64_t K) {
    if (DT == LW_BF16) return di_dev_bf16_load((const uint16_t *)data + ns * K + k);
    if (DT == LW_F32) return ((const float *)data)[ns * K + k];
    const float q = di_dev_e4m3_f32(((const uint8_t *)data)[ns * K + k]);
    return q * di_dev_e8m0(scale[(ns / 32) * ((K + 31) / 32) + k / 32]);
}

/* y [m, N] from x [m, K] and weight rows row0 .. row0 + N of the stored [*, K] matrix */
template <int DT>
__global__ void __launch_bounds__(LIN_WARPS * 32)
linear_fixed_kernel(const void *__restrict__ data, const uint8_t *__restrict__ scale, int64_t row0, int64_t N,
                    int64_t K, const float *__restrict__ x, int64_t m, float *__restrict__ y, bool bf16_out) {
    DI_PDL_BEGIN();
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * LIN_WARPS + (threadIdx.x >> 5);
    if (n >= N) return; /* whole warps */
    const int64_t ns = n + row0;
    for (int64_t m0 = (int64_t)blockIdx.y * LIN_MT; m0 < m; m0 += (int64_t)gridDim.y * LIN_MT) {
        const int mr = m - m0 < LIN_MT ? (int)(m - m0) : LIN_MT;
        const float *xr = x + m0 * K; /* [mr, K] */
        double acc[LIN_MT];            /* lane partial sums of rows m0 .. m0 + mr */
#pragma unroll
        for (int j = 0; j < LIN_MT; j++) acc[j] = 0.0;
#pragma unroll 4
        for (int64_t k = lane; k < K; k += 32) {
            const double wv = (double)lin_weight<DT>(data, scale, ns, k, K);
#pragma unroll
            for (int j = 0; j < LIN_MT; j++)
                if (j < mr) acc[j] += (double)xr[j * K + k] * wv;
        }
#pragma unroll
        for (int j = 0; j < LIN_MT; j++) {
            double v = acc[j];
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0 && j < mr) {
                const float f = (float)v;
                y[(m0 + j) * N + n] = bf16_out ? di_dev_bf16_round(f) : f;
            }
        }
    }
}

extern "C" void di_cuda_linear_fixed(const di_weight *w, const float *x, int64_t m, float *y,
                                     di_linear_mode mode, cudaStream_t s) {
    if (mode == DI_LIN_QUANT ||
        (w->dtype != DI_DT_BF16 && w->dtype != DI_DT_F32 && w->dtype != DI_DT_F8_E4M3) ||
        (w->dtype == DI_DT_F8_E4M3 && !w->scale)) {
        fprintf(stderr, "di_cuda_linear_fixed: unsupported weight dtype %d in mode %d\n", (int)w->dtype, (int)mode);
        abort();
    }
    if (m <= 0 || w->rows <= 0) return;
    const bool bf16_out = mode == DI_LIN_BF16;
    int64_t gy = (m + LIN_MT - 1) / LIN_MT;
    if (gy > LIN_MAX_GRID_Y) gy = LIN_MAX_GRID_Y;
    const dim3 grid((unsigned)((w->rows + LIN_WARPS - 1) / LIN_WARPS), (unsigned)gy);
    switch (w->dtype) {
    case DI_DT_BF16:
        linear_fixed_kernel<LW_BF16><<<grid, LIN_WARPS * 32, 0, s>>>(w->data, w->scale, w->row0, w->rows, w->cols,
                                                                      x, m, y, bf16_out);
        break;
    case DI_DT_F32:
        linear_fixed_kernel<LW_F32><<<grid, LIN_WARPS * 32, 0, s>>>(w->data, w->scale, w->row0, w->rows, w->cols,
                                                                     x, m, y, bf16_out);
        break;
    default:
        linear_fixed_kernel<LW_F8><<<grid, LIN_WARPS * 32, 0, s>>>(w->data, w->scale, w->row0, w->rows, w->cols,
                                                                    x, m, y, bf16_out);
        break;
    }
    DI_CUDA_LAUNCHED();
}
