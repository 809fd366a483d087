/* Activation quantisers on the GPU (model-spec §2.0 act_quant, fp4_act_quant), twins of
 * src/backend/cpu/cpu_quant.c.
 *
 * Blocks of 16 or 32 values are handled by groups of 16 or 32 lanes of a warp: one value per lane,
 * the block's amax by xor-shuffles inside the group (max is exact, so the reduction order does not
 * matter; fmaxf drops NaN whatever the order, as the CPU loop does). Other block sizes take one
 * thread per block, looping in order. The scale and the rounding are the CPU's expressions on the
 * device twins of numerics.h, so the results are bit-identical. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_mma.cuh" /* di_e4m3_code */
#include "backend/cuda/cuda_ops.h"

static __device__ __forceinline__ float fp4_scale(float amax, int kind) {
    if (kind == DI_FP4_SCALE_UE8M0) {
        amax = fmaxf(amax, 6.0f * 0x1p-126f);
        return di_dev_pow2_ceil(amax * (1.0f / 6.0f));
    }
    amax = fmaxf(amax, 6.0f * 0x1p-9f);
    return di_dev_e4m3_rne(fminf(amax / 6.0f, 448.0f));
}
/* the e2m1 grid value of x in a block of scale s (before the scale), and the value fp4_act_quant leaves */
static __device__ __forceinline__ float fp4_code_value(float x, float s) {
    return di_dev_e2m1_rne(di_dev_clampf(x / s, -6.0f, 6.0f));
}
static __device__ __forceinline__ float fp4_value(float x, float s) { return di_dev_bf16_round(fp4_code_value(x, s) * s); }
/* the e2m1 code (sign bit 8, magnitude index 0..7) of a grid value q */
static __device__ __forceinline__ uint32_t fp4_code(float q) {
    const float a2 = 2.0f * fabsf(q); /* 0, 1, 2, 3, 4, 6, 8, 12 -> magnitude index 0..7 */
    const uint32_t m = a2 <= 4.0f ? (uint32_t)a2 : a2 == 6.0f ? 5u : a2 == 8.0f ? 6u : 7u;
    return signbit(q) ? 8u | m : m;
}

/* x [n], one value per thread; group = 16 or 32 lanes per quantisation block */
template <int GROUP, bool FP4>
__global__ void quant_group_kernel(float *x, int64_t n, int kind) {
    DI_PDL_BEGIN();
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
    DI_PDL_BEGIN();
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

/* fp4_act_quant(key, 32, ue8m0) of n keys [n, idim] into their records (forward/index_key.h) at
 * dst[i]: a warp a 32-block, lane i its dim i (the quantisation of quant_group_kernel); the 8 lanes
 * of a word OR their nibbles together by shuffles */
__global__ void index_key_quant_kernel(const float *__restrict__ key, int64_t n, int idim, int rec_bytes,
                                       uint8_t *const *__restrict__ dst) {
    DI_PDL_BEGIN();
    const int nb = idim / 32, lane = threadIdx.x & 31;
    const int64_t wi = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; /* key wi / nb, block wi % nb */
    if (wi >= n * nb) return; /* whole warps */
    const int64_t k = wi / nb;
    const int b = (int)(wi % nb);
    const float x = key[k * idim + 32 * b + lane];
    float amax = fabsf(x);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = fp4_scale(amax, DI_FP4_SCALE_UE8M0);
    const float q = fp4_code_value(x, s);
    const bool finite = !__ballot_sync(0xffffffffu, isnan(q)) && isfinite(s);
    uint32_t word = (finite ? fp4_code(q) : 0u) << (4 * (lane & 7));
    for (int o = 1; o < 8; o <<= 1) word |= __shfl_xor_sync(0xffffffffu, word, o);
    uint8_t *rec = dst[k];
    if ((lane & 7) == 0) reinterpret_cast<uint32_t *>(rec)[(lane >> 3) * nb + b] = word;
    if (lane == 0) rec[idim / 2 + b] = finite ? (uint8_t)(__float_as_uint(s) >> 23) : (uint8_t)255; /* s = 2^(e - 127) */
    if (b == 0 && idim / 2 + nb + lane < rec_bytes) rec[idim / 2 + nb + lane] = 0; /* the padding (< 32 bytes) */
}

/* a record of dim dims, a scale a block: the codes and scales, padded by less than 32 bytes */
static void check_record(const char *op, int dim, int block, int rec_bytes) {
    const int used = dim / 2 + dim / block;
    if (dim % block || rec_bytes < used || rec_bytes > used + 32) {
        fprintf(stderr, "%s: %d dims in records of %d bytes\n", op, dim, rec_bytes);
        abort();
    }
}

extern "C" void di_cuda_index_key_quant(const float *key, int64_t n, int idim, int rec_bytes, uint8_t *const *dst,
                                        cudaStream_t s) {
    check_record("di_cuda_index_key_quant", idim, 32, rec_bytes);
    if (n <= 0) return;
    const int64_t threads = 32 * n * (idim / 32);
    index_key_quant_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, s>>>(key, n, idim, rec_bytes, dst);
    DI_CUDA_LAUNCHED();
}

/* fp4_act_quant(row, 16, e4m3) of n rows [n, dh] into their records (forward/kv_record.h) at dst[i]:
 * 16 lanes a block, lane i its dim i (the quantisation of quant_group_kernel); an even lane writes
 * its pair's code byte, the group's first lane the scale byte (0x7F: the block held a NaN) */
__global__ void kv_record_quant_kernel(const float *__restrict__ row, int64_t n, int dh, int rec_bytes,
                                       uint8_t *const *__restrict__ dst) {
    DI_PDL_BEGIN();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* row i / dh, dim i % dh */
    const bool live = i < n * dh;
    const float x = live ? row[i] : 0.0f;
    float amax = fabsf(x);
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = fp4_scale(amax, DI_FP4_SCALE_E4M3); /* 2^-9 .. 448 */
    const float q = fp4_code_value(x, s);
    const int lane = threadIdx.x & 31, g0 = lane & 16; /* the group's first lane */
    const bool finite = !((__ballot_sync(0xffffffffu, isnan(q)) >> g0) & 0xffffu);
    const uint32_t code = fp4_code(q);
    const uint32_t hi = __shfl_down_sync(0xffffffffu, code, 1);
    if (!live) return;
    const int64_t k = i / dh;
    const int d = (int)(i % dh);
    uint8_t *rec = dst[k];
    if (!(d & 1)) rec[d / 2] = finite ? (uint8_t)(code | hi << 4) : (uint8_t)0;
    if ((d & 15) == 0) rec[dh / 2 + d / 16] = finite ? di_e4m3_code(s) : (uint8_t)DI_KV_RECORD_NAN;
    if (d < 16) /* the padding (< 32 bytes) */
        for (int j = dh / 2 + dh / 16 + d; j < rec_bytes; j += 16) rec[j] = 0;
}

extern "C" void di_cuda_kv_record_quant(const float *row, int64_t n, int dh, int rec_bytes, uint8_t *const *dst,
                                        cudaStream_t s) {
    check_record("di_cuda_kv_record_quant", dh, 16, rec_bytes);
    if (n <= 0) return;
    const int64_t threads = n * dh;
    kv_record_quant_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, s>>>(row, n, dh, rec_bytes, dst);
    DI_CUDA_LAUNCHED();
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
