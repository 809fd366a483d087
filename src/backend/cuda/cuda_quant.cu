/* Activation quantisers on the GPU (model-spec §2.0 act_quant, fp4_act_quant), twins of
 * src/backend/cpu/cpu_quant.c.
 *
 * Blocks of 16 or 32 values are handled by groups of 16 or 32 lanes of a warp: one value per lane,
 * the block's amax by xor-shuffles inside the group (max is exact, so the reduction order does not
 * matter; fmaxf drops NaN whatever the order, as the CPU loop does). Other block sizes take one
 * thread per block, looping in order. The scale and the rounding are the CPU's expressions on the
 * device twins of numerics.h, so the results are bit-identical. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

static __device__ __forceinline__ float fp4_scale(float amax, int kind) {
    if (kind == DI_FP4_SCALE_UE8M0) {
        amax = fmaxf(amax, 6.0f * 0x1p-126f);
        return di_dev_pow2_ceil(amax * (1.0f / 6.0f));
    }
    amax = fmaxf(amax, 6.0f * 0x1p-9f);
    return di_dev_e4m3_rne(fminf(amax / 6.0f, 448.0f));
}
static __device__ __forceinline__ float fp4_value(float x, float s) {
    return di_dev_bf16_round(di_dev_e2m1_rne(di_dev_clampf(x / s, -6.0f, 6.0f)) * s);
}

/* x [n], one value per thread; group = 16 or 32 lanes per quantisation block */
template <int GROUP, bool FP4>
__global__ void quant_group_kernel(float *x, int64_t n, int kind) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    float a = fabsf(v);
    for (int o = GROUP / 2; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    if (i >= n) return;
    x[i] = FP4 ? fp4_value(v, fp4_scale(a, kind)) : di_dev_act_value(v, di_dev_act_scale(a));
}

/* x [n], one thread per block of `block` values (any block size) */
template <bool FP4>
__global__ void quant_serial_kernel(float *x, int64_t n, int block, int kind) {
    int64_t b = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * block;
    if (b >= n) return;
    float a = 0.0f;
    for (int i = 0; i < block; i++) a = fmaxf(a, fabsf(x[b + i]));
    float s = FP4 ? fp4_scale(a, kind) : di_dev_act_scale(a);
    for (int i = 0; i < block; i++) x[b + i] = FP4 ? fp4_value(x[b + i], s) : di_dev_act_value(x[b + i], s);
}

template <bool FP4>
static void quant_launch(float *x, int64_t n, int block, int kind, cudaStream_t s) {
    if (n <= 0) return;
    if (block == 32 || block == 16) {
        unsigned grid = (unsigned)((n + 255) / 256);
        if (block == 32) quant_group_kernel<32, FP4><<<grid, 256, 0, s>>>(x, n, kind);
        else quant_group_kernel<16, FP4><<<grid, 256, 0, s>>>(x, n, kind);
    } else {
        int64_t nb = n / block;
        quant_serial_kernel<FP4><<<(unsigned)((nb + 127) / 128), 128, 0, s>>>(x, n, block, kind);
    }
    DI_CUDA_LAUNCHED();
}

extern "C" void di_cuda_act_quant_inplace(float *x, int64_t n, int block, cudaStream_t s) {
    if (n % block != 0 || block > 128) {
        fprintf(stderr, "di_cuda_act_quant_inplace: n %lld not a multiple of block %d (<= 128)\n",
                (long long)n, block);
        abort();
    }
    quant_launch<false>(x, n, block, 0, s);
}

extern "C" void di_cuda_fp4_quant_inplace(float *x, int64_t n, int block, di_fp4_scale kind,
                                          cudaStream_t s) {
    if (n % block != 0) {
        fprintf(stderr, "di_cuda_fp4_quant_inplace: n %lld not a multiple of block %d\n",
                (long long)n, block);
        abort();
    }
    quant_launch<true>(x, n, block, (int)kind, s);
}
