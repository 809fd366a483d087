/* The element-wise stages of MoE and Engram on the GPU (cuda_fwd_ops.h), twins of loops in
 * src/forward/moe.c (SwiGLU of expert_ffn, the combine of di_fwd_moe) and src/forward/engram.c
 * (the table gather and the gate of di_fwd_engram).
 *
 * SwiGLU, combine and gather are one thread per output element with the CPU's expression in the
 * CPU's order (fp32, -fmad=false, di_dev_expf for glibc's expf): bit-identical.
 *
 * The Engram gate has three double sums over D per (row, copy): one thread block of GATE_THREADS
 * per (r, i); thread t sums d = t, t + GATE_THREADS, ... in order, then a fixed xor-shuffle tree
 * per warp and the warps' partials in warp order. The CPU sums in d order; the two agree whenever
 * the sums are exact (x^2 and key^2 of bf16 values always are; the fp32 products x * qk * key are
 * exact in double, so only an exponent spread beyond ~29 bits across a row can differ). The order
 * depends only on D, never on R: batch invariant. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"

#define EW_THREADS 256
#define GATE_THREADS 256

static unsigned ew_blocks(int64_t n) {
    int64_t b = (n + EW_THREADS - 1) / EW_THREADS;
    return (unsigned)(b > 8192 ? 8192 : b);
}

/* h [n, inter] = bf16(silu(min(g, L)) * clamp(u, -L, L) [* wt[r]]); h may alias g */
__global__ void __launch_bounds__(EW_THREADS)
swiglu_kernel(const float *g, const float *__restrict__ u, int64_t n, int64_t inter, float lim,
              const float *__restrict__ wt, float *h) {
    const int64_t total = n * inter;
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < total; i += (int64_t)gridDim.x * EW_THREADS) {
        const float gv = fminf(g[i], lim), uv = di_dev_clampf(u[i], -lim, lim);
        float v = gv / (1.0f + di_dev_expf(-gv)) * uv;
        if (wt) v *= wt[i / inter];
        h[i] = di_dev_bf16_round(v);
    }
}

extern "C" void di_cuda_swiglu(const float *g, const float *u, int64_t n, int64_t inter, float limit,
                               const float *wt, float *h, cudaStream_t s) {
    if (n <= 0 || inter <= 0) return;
    swiglu_kernel<<<ew_blocks(n * inter), EW_THREADS, 0, s>>>(g, u, n, inter, limit, wt, h);
    DI_CUDA_LAUNCHED();
}

/* out [R, D] = bf16(sum_j eo[r, order[r, j], :] in j order + shared[r, :]), fp32 */
__global__ void __launch_bounds__(EW_THREADS)
moe_combine_kernel(const float *__restrict__ eo, const int32_t *__restrict__ order,
                   const float *__restrict__ shared, int64_t R, int K, int64_t D, float *__restrict__ out) {
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < R * D; i += (int64_t)gridDim.x * EW_THREADS) {
        const int64_t r = i / D, k = i % D;
        float acc = 0.0f;
        for (int j = 0; j < K; j++) acc += eo[(r * K + order[r * K + j]) * D + k];
        acc += shared[i];
        out[i] = di_dev_bf16_round(acc);
    }
}

extern "C" void di_cuda_moe_combine(const float *eo, const int32_t *order, const float *shared, int64_t R,
                                    int K, int64_t D, float *out, cudaStream_t s) {
    if (R <= 0 || D <= 0) return;
    moe_combine_kernel<<<ew_blocks(R * D), EW_THREADS, 0, s>>>(eo, order, shared, R, K, D, out);
    DI_CUDA_LAUNCHED();
}

/* e [R, ncols * hd] = bf16(e4m3(table[row, d]) * e8m0(scale[row, d / 32])), row = rows[r, c] */
__global__ void __launch_bounds__(EW_THREADS)
engram_gather_kernel(const uint8_t *__restrict__ table, const uint8_t *__restrict__ scale,
                     const int64_t *__restrict__ rows, int64_t R, int ncols, int hd, float *__restrict__ e) {
    const int64_t E = (int64_t)ncols * hd;
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < R * E; i += (int64_t)gridDim.x * EW_THREADS) {
        const int64_t r = i / E, c = (i % E) / hd, d = i % hd;
        const int64_t row = rows[r * ncols + c];
        const float q = di_dev_e4m3_f32(table[row * hd + d]);
        e[i] = di_dev_bf16_round(q * di_dev_e8m0(scale[row * (hd / 32) + d / 32]));
    }
}

extern "C" void di_cuda_engram_gather(const uint8_t *table, const uint8_t *scale, const int64_t *rows,
                                      int64_t R, int ncols, int hd, float *e, cudaStream_t s) {
    if (R <= 0 || ncols <= 0 || hd <= 0) return;
    engram_gather_kernel<<<ew_blocks(R * ncols * hd), EW_THREADS, 0, s>>>(table, scale, rows, R, ncols, hd, e);
    DI_CUDA_LAUNCHED();
}

/* fixed-order block sum of one double per thread: xor tree in each warp, then warps in order;
 * every thread gets the result. `red` [GATE_THREADS / 32] shared. */
static __device__ double gate_block_sum(double v, double *red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* red may still be read from the previous sum */
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < GATE_THREADS / 32; w++) s += red[w];
    return s;
}

/* block per (r, i) of X [R, n, D]: the gate g from x, key_i, qk_i; then x += g * value, bf16 */
__global__ void __launch_bounds__(GATE_THREADS)
engram_gate_kernel(float *__restrict__ X, const float *__restrict__ kv, const float *__restrict__ qk, int n,
                   int64_t D, float eps, float inv_sqrt_d) {
    __shared__ double red[GATE_THREADS / 32];
    const int64_t ri = blockIdx.x, r = ri / n;
    const int i = (int)(ri % n);
    float *x = X + ri * D;                                     /* [D] bf16 */
    const float *key = kv + r * (n + 1) * D + (int64_t)i * D;  /* [D] bf16 */
    const float *value = kv + r * (n + 1) * D + (int64_t)n * D; /* [D] bf16 */
    const float *w = qk + (int64_t)i * D;                      /* [D] */
    double sx = 0.0, sk = 0.0, dot = 0.0;
    for (int64_t d = threadIdx.x; d < D; d += GATE_THREADS) {
        sx += (double)x[d] * x[d];
        sk += (double)key[d] * key[d];
        dot += (double)(x[d] * w[d] * key[d]);
    }
    sx = gate_block_sum(sx, red);
    sk = gate_block_sum(sk, red);
    dot = gate_block_sum(dot, red);
    const float rx = 1.0f / sqrtf((float)(sx / (double)D) + eps);
    const float rk = 1.0f / sqrtf((float)(sk / (double)D) + eps);
    float g = (float)dot * (rx * rk) * inv_sqrt_d;
    g = copysignf(sqrtf(fmaxf(fabsf(g), 1e-6f)), g);
    g = 1.0f / (1.0f + di_dev_expf(-g));
    for (int64_t d = threadIdx.x; d < D; d += GATE_THREADS) x[d] = di_dev_bf16_round(x[d] + g * value[d]);
}

extern "C" void di_cuda_engram_gate(float *X, const float *kv, const float *qk, int64_t R, int n, int64_t D,
                                    float eps, float inv_sqrt_d, cudaStream_t s) {
    if (R <= 0 || n <= 0) return;
    engram_gate_kernel<<<(unsigned)(R * n), GATE_THREADS, 0, s>>>(X, kv, qk, n, D, eps, inv_sqrt_d);
    DI_CUDA_LAUNCHED();
}
