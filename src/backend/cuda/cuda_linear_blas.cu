/* Prefill-sized FP8 linears through cuBLAS's BF16 GEMM on weights dequantised to bf16 once a call
 * (di_cuda_ctx.blas_rows: DEEPINFER_GPU_BLAS_PREFILL, calls of at least DI_CUDA_BLAS_MIN_ROWS rows,
 * outside batch-invariant and exact modes and never while a graph is captured).
 *
 * Why: the wgmma kernel (cuda_linear_wgmma.cu) dequantises each weight tile in its consumer
 * warpgroups once per token tile, and its 128 x 128 tiles move more bytes a FLOP than the L2 gives
 * at the bf16 rate: at 4,096 rows it runs the dense linears at 29-54% of the BF16 rate, where
 * cuBLAS runs the same shapes on bf16 operands at 84-100% (`deepinfer-cuda-bench --gemm`, session
 * 52, H100: wq_b 934 -> 476 us, wo_b 841 -> 447, a wo_a group 156 -> 54, the shared w1 276 -> 127).
 * At 4,096 rows one dequantisation of the weight (1 byte read, 2 written a value) costs ~2% of the
 * GEMM it feeds.
 *
 * Numerics: the operands are the wgmma kernel's -- act_quant's values (or the bf16 activations of
 * wo_a) and each weight code times its 32 x 32 block's e8m0 scale, both exact in bf16 -- so every
 * product is the CPU's; cuBLAS sums them over K in fp32 (CUBLAS_COMPUTE_32F, no reduced-precision
 * split-K reductions: di_cuda_ctx_init's math mode) in its own order and rounds once to bf16 (RN),
 * which this file widens into the engine's float rows. That is the reference's sum to fp32
 * rounding, as the wgmma kernel's, not its bits: test_cuda_fwd_ops bounds both the same way. Its
 * results depend on the rows of the call (cuBLAS picks its kernel by shape), hence never in
 * batch-invariant mode.
 *
 * Scratch (the caller's, after its activations): the dequantised weight [N, K] bf16 and the bf16
 * output [rows, N] (~360 MB for wq_b at 4,096 rows, where the wgmma kernel needs ~10 MB). The
 * callers reserve it first (di_cuda_blas_reserve, through di_cuda_scratch_try); where the device
 * has no room for it the call runs on the wgmma kernel instead. */
#include <cublas_v2.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_linear_mma.h"
#include "backend/cuda/cuda_mma.cuh"

#define BLAS_THREADS 256

/* wb [N, K] bf16 = the FP8 weight's codes [N, K] times their 32 x 32 blocks' scales
 * (ws [ceil(N / 32)][K / 32] e8m0): 8 values a thread (K % 32 == 0) */
__global__ void __launch_bounds__(BLAS_THREADS) blas_dequant_fp8_kernel(const uint8_t *__restrict__ wd,
                                                                        const uint8_t *__restrict__ ws, int64_t N,
                                                                        int64_t K, uint4 *__restrict__ wb) {
    DI_PDL_BEGIN();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, per_row = K / 8;
    if (i >= N * per_row) return;
    const int64_t n = i / per_row, k = 8 * (i - n * per_row);
    const uint2 codes = *reinterpret_cast<const uint2 *>(wd + n * K + k);
    const float sc = di_dev_e8m0(ws[(n / 32) * (K / 32) + k / 32]);
    uint32_t out[4];
    const uint32_t words[2] = {codes.x, codes.y};
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
        for (int p = 0; p < 2; p++) {
            float lo, hi;
            di_e4m3x2_to_f32x2((uint16_t)(words[h] >> (16 * p)), &lo, &hi); /* exact */
            out[2 * h + p] = di_bf16x2_rn(lo * sc, hi * sc);                /* exact for a normal product */
        }
    }
    wb[i] = make_uint4(out[0], out[1], out[2], out[3]);
}

static unsigned blas_grid(int64_t n) { return (unsigned)((n + BLAS_THREADS - 1) / BLAS_THREADS); }

static size_t blas_align(size_t b) { return (b + 255) & ~(size_t)255; }

/* the dequantised weight [N, K] and the bf16 output [rows, N] */
static size_t blas_scratch_bytes(int64_t rows, int64_t N, int64_t K) {
    return blas_align(sizeof(uint16_t) * (size_t)(N * K)) + blas_align(sizeof(uint16_t) * (size_t)(rows * N));
}

size_t di_cuda_blas_reserve(di_cuda_ctx *ctx, int64_t rows, int64_t N, int64_t K, size_t act_bytes) {
    if (ctx->blas_rows <= 0 || rows < ctx->blas_rows || !ctx->wgmma || ctx->exact || ctx->capturing || K % 32 != 0 ||
        rows > INT32_MAX / 2)
        return 0;
    const size_t bytes = blas_scratch_bytes(rows, N, K);
    return di_cuda_scratch_try(ctx, act_bytes + bytes) ? bytes : 0;
}

void di_cuda_blas_fp8(di_cuda_ctx *ctx, const uint16_t *xb, int64_t lda, int64_t m, const uint8_t *wd,
                      const uint8_t *ws, int64_t rows_per_group, int n_groups, int64_t K, float *y, int64_t ldy,
                      void *scratch) {
    cudaStream_t s = ctx->stream;
    const int64_t N = rows_per_group * n_groups;
    if (m <= 0 || N <= 0) return;
    if (n_groups > 1 && rows_per_group % 32 != 0) { /* a caller's bug: a group's scales start mid-block */
        fprintf(stderr, "di_cuda_blas_fp8: groups of %lld rows (a multiple of 32 needed)\n", (long long)rows_per_group);
        abort();
    }
    uint16_t *wb = (uint16_t *)scratch;                                                        /* [N, K] */
    uint16_t *yb = (uint16_t *)((uint8_t *)scratch + blas_align(sizeof(uint16_t) * (size_t)(N * K))); /* [m, N] */
    blas_dequant_fp8_kernel<<<blas_grid(N * K / 8), BLAS_THREADS, 0, s>>>(wd, ws, N, K, reinterpret_cast<uint4 *>(wb));
    DI_CUDA_LAUNCHED();
    /* column-major: yb_g [rpg, m] (ld N) = wb_g^T [rpg, K] xb_g [K, m] (ld lda); group g's weight rows
     * g rpg.., its inputs at column g K of x, its outputs at column g rpg of y */
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st = cublasGemmStridedBatchedEx(
        (cublasHandle_t)ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows_per_group, (int)m, (int)K, &one, wb,
        CUDA_R_16BF, (int)K, rows_per_group * K, xb, CUDA_R_16BF, (int)lda, K, &zero, yb, CUDA_R_16BF, (int)N,
        rows_per_group, n_groups, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "di_cuda_blas_fp8: cuBLAS error %d (%lld x %lld x %lld, %d groups)\n", (int)st, (long long)m,
                (long long)rows_per_group, (long long)K, n_groups);
        abort();
    }
    di_cuda_bf16_to_f32(yb, m, N, y, ldy, s);
    ctx->counts.blas++;
}
