/* BF16 and F32 linear layers through cuBLAS, the context, and the linear dispatcher.
 *
 * The CPU reference sums each output exactly-then-rounded (a double sum rounded once to fp32);
 * cuBLAS accumulates in fp32 in its own order, so these are NOT bit-exact: the difference is
 * within the fp32 summation bound (K + 1) 2^-24 sum_k |x_k w_k| (plus one bf16 ulp where DI_LIN_BF16
 * rounds nearby sums differently); usually a bf16 output is identical or 1 ulp off, but under
 * cancellation (a result much smaller than its terms) it can be several ulps off. CUBLAS_COMPUTE_32F is plain fp32 (no TF32). The tests state these
 * bounds; an exact kernel for the router and the head (whose argmax can hinge on one ulp) is
 * left for the forward-pass port (docs/CUDA.md).
 *
 * Staging: BF16 mode converts x (bf16-exact floats) to bf16 in scratch; F32 mode with BF16
 * weights widens the weights to fp32 in scratch. */
#include <cublas_v2.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"


#define DI_CUBLAS_CHECK(call)                                                                  \
    do {                                                                                       \
        cublasStatus_t st_ = (call);                                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            fprintf(stderr, "%s:%d: cuBLAS error %d: %s\n", __FILE__, __LINE__, (int)st_, #call); \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* the handle on the context's stream with the context's workspace */
static void blas_bind(di_cuda_ctx *ctx) {
    cublasHandle_t h = (cublasHandle_t)ctx->blas;
    DI_CUBLAS_CHECK(cublasSetStream(h, ctx->stream));
    DI_CUBLAS_CHECK(cublasSetWorkspace(h, ctx->blas_ws, DI_CUDA_BLAS_WORKSPACE));
}

extern "C" bool di_cuda_ctx_init(di_cuda_ctx *ctx) {
    memset(ctx, 0, sizeof(*ctx));
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return false;
    }
    /* a blocking stream: it orders with the legacy default stream, so callers that copy or time
     * on stream 0 see the ops' work in order (the engine will pick its own streams later) */
    DI_CUDA_CHECK(cudaStreamCreate(&ctx->stream));
    cublasHandle_t h;
    DI_CUBLAS_CHECK(cublasCreate(&h));
    /* default math: CUBLAS_COMPUTE_32F never uses TF32; no reduced-precision split-K reductions */
    DI_CUBLAS_CHECK(cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    ctx->blas = h;
    /* a workspace of the context's own: without one cuBLAS takes memory on first use, or under stream
     * capture as allocation nodes of the graph (cublasSetStream drops it: blas_bind re-sets it) */
    DI_CUDA_CHECK(cudaMalloc(&ctx->blas_ws, DI_CUDA_BLAS_WORKSPACE));
    blas_bind(ctx);
    return true;
}

extern "C" void di_cuda_ctx_set_priority(di_cuda_ctx *ctx, bool low) {
    int least = 0, greatest = 0; /* numerically least >= greatest */
    DI_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    DI_CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    DI_CUDA_CHECK(cudaStreamDestroy(ctx->stream));
    DI_CUDA_CHECK(cudaStreamCreateWithPriority(&ctx->stream, cudaStreamDefault, low ? least : greatest));
    blas_bind(ctx);
}

extern "C" void di_cuda_ctx_release_retired(di_cuda_ctx *ctx) {
    for (int i = 0; i < ctx->n_retired; i++) DI_CUDA_CHECK(cudaFree(ctx->retired[i]));
    ctx->n_retired = 0;
}

extern "C" void di_cuda_ctx_free(di_cuda_ctx *ctx) {
    if (ctx->blas) cublasDestroy((cublasHandle_t)ctx->blas);
    if (ctx->blas_ws) cudaFree(ctx->blas_ws);
    di_cuda_ctx_release_retired(ctx);
    if (ctx->scratch) cudaFree(ctx->scratch);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
    memset(ctx, 0, sizeof(*ctx));
}

extern "C" void *di_cuda_scratch(di_cuda_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->scratch_bytes) return ctx->scratch;
    if (ctx->capturing) { /* earlier nodes of the graph use the old buffer: keep it until it ran */
        if (ctx->n_retired == DI_CUDA_MAX_RETIRED) {
            fprintf(stderr, "di_cuda_scratch: more than %d growths in one captured call\n", DI_CUDA_MAX_RETIRED);
            abort();
        }
        if (ctx->scratch) ctx->retired[ctx->n_retired++] = ctx->scratch;
        if (bytes < 2 * ctx->scratch_bytes) bytes = 2 * ctx->scratch_bytes;
    } else {
        DI_CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
        if (ctx->scratch) DI_CUDA_CHECK(cudaFree(ctx->scratch));
    }
    DI_CUDA_CHECK(cudaMalloc(&ctx->scratch, bytes));
    ctx->scratch_bytes = bytes;
    return ctx->scratch;
}

extern "C" bool di_cuda_scratch_try(di_cuda_ctx *ctx, size_t bytes) {
    if (ctx->scratch_cap > 0 && bytes > ctx->scratch_cap) return false; /* a test's */
    if (bytes <= ctx->scratch_bytes) return true;
    if (ctx->capturing) return false;
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) { /* out of device memory: keep the old scratch */
        cudaGetLastError();
        return false;
    }
    DI_CUDA_CHECK(cudaStreamSynchronize(ctx->stream)); /* the old scratch may still be read */
    if (ctx->scratch) DI_CUDA_CHECK(cudaFree(ctx->scratch));
    ctx->scratch = p;
    ctx->scratch_bytes = bytes;
    return true;
}

/* V values a thread: four (one 16-byte load, one 8-byte store) where x and out are aligned for
 * them, the last n % 4 by the thread past the vectors; else one */
template <int V>
__global__ void f32_to_bf16_kernel(const float *__restrict__ x, int64_t n, uint16_t *__restrict__ out) {
    DI_PDL_BEGIN();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (V == 1) {
        if (i < n) out[i] = (uint16_t)di_dev_bf16_bits(x[i]);
        return;
    }
    const int64_t nv = n / 4;
    if (i < nv) {
        const float4 v = reinterpret_cast<const float4 *>(x)[i];
        reinterpret_cast<uint2 *>(out)[i] = di_dev_bf16x4_bits(v);
    } else if (i == nv) {
        for (int64_t j = 4 * nv; j < n; j++) out[j] = (uint16_t)di_dev_bf16_bits(x[j]);
    }
}
/* y [rows, ldy] <- x [rows, cols] widened: V (4: one 8-byte load, one 16-byte store) values a thread */
template <int V>
__global__ void bf16_to_f32_kernel(const uint16_t *__restrict__ x, int64_t rows, int64_t cols, float *__restrict__ y,
                                   int64_t ldy) {
    DI_PDL_BEGIN();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, per_row = cols / V;
    if (i >= rows * per_row) return;
    const int64_t r = i / per_row, c = V * (i - r * per_row);
    if (V == 4) {
        const uint2 b = *reinterpret_cast<const uint2 *>(x + r * cols + c);
        *reinterpret_cast<float4 *>(y + r * ldy + c) =
            make_float4(__uint_as_float(b.x << 16), __uint_as_float(b.x & 0xffff0000u), __uint_as_float(b.y << 16),
                        __uint_as_float(b.y & 0xffff0000u));
    } else {
        y[r * ldy + c] = di_dev_bf16_load(x + r * cols + c);
    }
}
__global__ void bf16_round_kernel(float *x, int64_t n) {
    DI_PDL_BEGIN();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = di_dev_bf16_round(x[i]);
}

static unsigned grid_of(int64_t n) { return (unsigned)((n + 255) / 256); }

extern "C" void di_cuda_f32_to_bf16(const float *x, int64_t n, uint16_t *out, cudaStream_t s) {
    if (n <= 0) return;
    if ((uintptr_t)x % 16 == 0 && (uintptr_t)out % 8 == 0) f32_to_bf16_kernel<4><<<grid_of(n / 4 + 1), 256, 0, s>>>(x, n, out);
    else f32_to_bf16_kernel<1><<<grid_of(n), 256, 0, s>>>(x, n, out);
    DI_CUDA_LAUNCHED();
}

extern "C" void di_cuda_bf16_to_f32(const uint16_t *x, int64_t rows, int64_t cols, float *y, int64_t ldy,
                                    cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return;
    if (cols % 4 == 0 && ldy % 4 == 0 && (uintptr_t)x % 8 == 0 && (uintptr_t)y % 16 == 0)
        bf16_to_f32_kernel<4><<<grid_of(rows * cols / 4), 256, 0, s>>>(x, rows, cols, y, ldy);
    else
        bf16_to_f32_kernel<1><<<grid_of(rows * cols), 256, 0, s>>>(x, rows, cols, y, ldy);
    DI_CUDA_LAUNCHED();
}

/* y [m, N] (column-major N x m) = W [N, K] (column-major K x N, transposed) * x [m, K] */
static void gemm(di_cuda_ctx *ctx, const void *w, cudaDataType wt, const void *x, cudaDataType xt,
                 int64_t m, int64_t N, int64_t K, float *y) {
    const float one = 1.0f, zero = 0.0f;
    DI_CUBLAS_CHECK(cublasGemmEx((cublasHandle_t)ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)m,
                                 (int)K, &one, w, wt, (int)K, x, xt, (int)K, &zero, y, CUDA_R_32F,
                                 (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

extern "C" void di_cuda_linear(di_cuda_ctx *ctx, const di_weight *w, const float *x, int64_t m,
                               float *y, di_linear_mode mode) {
    const int64_t K = w->cols, N = w->rows;
    if (m <= 0 || N <= 0) return;
    if (w->row0 != 0) { /* row-block views (one wo_a group) are CPU-only so far */
        fprintf(stderr, "di_cuda_linear: weight views starting at row %lld are not supported yet\n",
                (long long)w->row0);
        abort();
    }
    cudaStream_t s = ctx->stream;
    switch (mode) {
    case DI_LIN_QUANT:
        di_cuda_linear_quant(ctx, w, x, m, y);
        return;
    case DI_LIN_BF16: {
        if (w->dtype != DI_DT_BF16) break;
        uint16_t *xb = (uint16_t *)di_cuda_scratch(ctx, (size_t)(m * K) * 2); /* [m, K] bf16 */
        di_cuda_f32_to_bf16(x, m * K, xb, s);
        gemm(ctx, w->data, CUDA_R_16BF, xb, CUDA_R_16BF, m, N, K, y);
        bf16_round_kernel<<<grid_of(m * N), 256, 0, s>>>(y, m * N);
        DI_CUDA_LAUNCHED();
        return;
    }
    case DI_LIN_F32: {
        const void *wf = w->data;
        if (w->dtype == DI_DT_BF16) {
            float *t = (float *)di_cuda_scratch(ctx, (size_t)(N * K) * 4); /* [N, K] widened */
            di_cuda_bf16_to_f32((const uint16_t *)w->data, N, K, t, K, s);
            wf = t;
        } else if (w->dtype != DI_DT_F32) {
            break;
        }
        gemm(ctx, wf, CUDA_R_32F, x, CUDA_R_32F, m, N, K, y);
        return;
    }
    }
    fprintf(stderr, "di_cuda_linear: weight dtype %d does not fit mode %d\n", (int)w->dtype, (int)mode);
    abort();
}
