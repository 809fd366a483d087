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
 * has no room for it the call runs on the wgmma kernel instead.
 *
 * Kept copies (DEEPINFER_GPU_DENSE_BF16 = rows, off by default; di_cuda_dense16): the dense FP8
 * matrices dequantised once at load and kept beside their codes (V4.1-Flash: 13.0 GB for the 40
 * layers' wq_a, wkv, wq_b, wo_a, wo_b and shared w1 / w3 / w2), so that calls from ctx->dense16_rows
 * rows -- decode batches, in captured graphs (the handle has a workspace of its own:
 * DI_CUDA_BLAS_WORKSPACE) -- run the GEMM alone. Why: at 256 rows cuBLAS on bf16 weights takes
 * about half the wgmma kernel's time on every dense linear (session 52, H100, us: wq_b 43.3 / 75.8,
 * wo_b 38.5 / 73.6, a wo_a group 11.3 / 20.5, shared w1 14.9 / 31.7, w2 14.9 / 34.3), where the
 * dequantisation a call loses there. Same products and sums as the per-call path.
 *
 * BF16 weights with fp32 outputs (the head, [129,280 x 5,120]) from DI_CUDA_BLAS_W16_MIN_ROWS rows
 * (di_cuda_blas_w16: cublasGemmEx straight into the float rows, nothing to dequantise or widen):
 * the wgmma kernel ran the head at 256 rows in 1,079 us, cuBLAS in 537 (session 53, H100). */
#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

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

static void blas_dequant_fp8(const uint8_t *wd, const uint8_t *ws, int64_t N, int64_t K, uint16_t *wb, cudaStream_t s) {
    blas_dequant_fp8_kernel<<<blas_grid(N * K / 8), BLAS_THREADS, 0, s>>>(wd, ws, N, K, reinterpret_cast<uint4 *>(wb));
    DI_CUDA_LAUNCHED();
}

static size_t blas_align(size_t b) { return (b + 255) & ~(size_t)255; }

/* ---- the kept copies: open addressing on the codes' address ---- */
static size_t dense16_hash(const uint8_t *codes, int cap) {
    return (size_t)(((uintptr_t)codes >> 8) * 0x9e3779b97f4a7c15ull >> 32) & (size_t)(cap - 1);
}

size_t di_cuda_dense16_bytes(int64_t rows, int64_t cols) { return blas_align(sizeof(uint16_t) * (size_t)(rows * cols)); }

bool di_cuda_dense16_add(di_cuda_dense16 *t, const uint8_t *codes, const uint8_t *scale, int64_t rows, int64_t cols,
                         cudaStream_t s) {
    if (!codes || rows <= 0 || cols <= 0 || cols % 32 != 0) return false;
    if (2 * (t->n + 1) > t->cap) { /* at most half full: rehash into twice the slots */
        const int cap = t->cap ? 2 * t->cap : 64;
        di_cuda_dense16_entry *slot = (di_cuda_dense16_entry *)calloc((size_t)cap, sizeof *slot);
        if (!slot) return false;
        for (int i = 0; i < t->cap; i++) {
            if (!t->slot[i].codes) continue;
            size_t h = dense16_hash(t->slot[i].codes, cap);
            while (slot[h].codes) h = (h + 1) & (size_t)(cap - 1);
            slot[h] = t->slot[i];
        }
        free(t->slot);
        t->slot = slot, t->cap = cap;
    }
    size_t h = dense16_hash(codes, t->cap);
    while (t->slot[h].codes && t->slot[h].codes != codes) h = (h + 1) & (size_t)(t->cap - 1);
    if (t->slot[h].codes) return true; /* already kept */
    uint16_t *w16 = NULL;
    if (cudaMalloc(&w16, di_cuda_dense16_bytes(rows, cols)) != cudaSuccess) { /* no room: keep the rest as they were */
        cudaGetLastError();
        return false;
    }
    blas_dequant_fp8(codes, scale, rows, cols, w16, s);
    t->slot[h] = di_cuda_dense16_entry{codes, w16, rows, cols};
    t->n++;
    t->bytes += di_cuda_dense16_bytes(rows, cols);
    return true;
}

const uint16_t *di_cuda_dense16_find(const di_cuda_dense16 *t, const uint8_t *codes, int64_t cols) {
    if (!t || !t->n || !codes) return NULL;
    for (size_t h = dense16_hash(codes, t->cap);; h = (h + 1) & (size_t)(t->cap - 1)) {
        const di_cuda_dense16_entry *e = &t->slot[h];
        if (!e->codes) return NULL;
        if (e->codes == codes) return e->cols == cols ? e->w16 : NULL;
    }
}

void di_cuda_dense16_free(di_cuda_dense16 *t) {
    for (int i = 0; i < t->cap; i++)
        if (t->slot[i].codes) cudaFree(t->slot[i].w16);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

bool di_cuda_blas_w16_taken(const di_cuda_ctx *ctx, int64_t m, int64_t N) {
    return ctx->blas_w16_rows > 0 && m >= ctx->blas_w16_rows && N >= ctx->blas_w16_n && ctx->wgmma && !ctx->exact &&
           m <= INT32_MAX / 2 && N <= INT32_MAX / 2;
}

void di_cuda_blas_w16(di_cuda_ctx *ctx, const uint16_t *xb, int64_t m, const uint16_t *w, int64_t N, int64_t K, float *y) {
    /* column-major: y [N, m] (ld N) = w^T [N, K] xb [K, m] */
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st = cublasGemmEx((cublasHandle_t)ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)m, (int)K,
                                           &one, w, CUDA_R_16BF, (int)K, xb, CUDA_R_16BF, (int)K, &zero, y, CUDA_R_32F,
                                           (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "di_cuda_blas_w16: cuBLAS error %d (%lld x %lld x %lld)\n", (int)st, (long long)m, (long long)N,
                (long long)K);
        abort();
    }
    ctx->counts.blas++;
}

/* the bf16 output [rows, N], after the dequantised weight [N, K] where the call makes it */
static size_t blas_scratch_bytes(int64_t rows, int64_t N, int64_t K, bool kept) {
    return (kept ? 0 : blas_align(sizeof(uint16_t) * (size_t)(N * K))) + blas_align(sizeof(uint16_t) * (size_t)(rows * N));
}

size_t di_cuda_blas_reserve(di_cuda_ctx *ctx, int64_t rows, int64_t N, int64_t K, size_t act_bytes, int n_w,
                            const uint8_t *const *wd) {
    if (!ctx->wgmma || ctx->exact || K % 32 != 0 || rows > INT32_MAX / 2) return 0;
    bool kept = ctx->dense16 && ctx->dense16_rows > 0 && rows >= ctx->dense16_rows && n_w > 0;
    for (int i = 0; kept && i < n_w; i++) kept = di_cuda_dense16_find(ctx->dense16, wd[i], K) != NULL;
    if (!kept && (ctx->blas_rows <= 0 || rows < ctx->blas_rows || ctx->capturing)) return 0;
    const size_t bytes = blas_scratch_bytes(rows, N, K, kept);
    /* while capturing, the caller's di_cuda_scratch grows the scratch (retiring the old one) */
    return ctx->capturing || di_cuda_scratch_try(ctx, act_bytes + bytes) ? bytes : 0;
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
    /* the kept copy, else the weight dequantised into the scratch, the output after it */
    const uint16_t *kept = di_cuda_dense16_find(ctx->dense16, wd, K), *wb = kept ? kept : (const uint16_t *)scratch;
    uint16_t *yb = (uint16_t *)((uint8_t *)scratch + (kept ? 0 : blas_align(sizeof(uint16_t) * (size_t)(N * K)))); /* [m, N] */
    if (!kept) blas_dequant_fp8(wd, ws, N, K, (uint16_t *)scratch, s);
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
    ctx->counts.blas_kept += kept != NULL;
}
