/* mHC hyper-connection ops on the GPU (model-spec §2.0 hc_split_sinkhorn, §2.3), twins of
 * src/backend/cpu/cpu_mhc.c, batched over T tokens.
 *
 * hc_mix_logits: the CPU's double sums (sum of squares and fn . x over the n*d values of a token)
 * are split into chunks of MIX_CHUNK values: one thread block per (chunk, token, group of
 * MIX_GROUP outputs) takes per-thread double sums and a fixed tree, a second kernel adds the chunk
 * sums in chunk order and applies the CPU's fp32 tail. The chunking depends on n*d alone, so a
 * token's result never depends on T (batch invariant); a decode step (T = 1) spreads its 1.5 MB of
 * fn over ~130 blocks instead of 24. Each product is exact in double (bf16 x f32 needs 32 bits),
 * so the order can differ from the CPU's index-order sums only in the last double bit, which
 * reaches the fp32 result only within 2^-29 of a rounding boundary.
 * hc_split_sinkhorn: for n*n <= 32 one warp per token, lane r*n+k holding c[r][k]; row and column
 * sums gather the n values through shuffles and add them in the CPU's order, every division is
 * the CPU's, so the result is bit-exact (sigmoid and softmax through di_dev_expf, glibc's expf
 * algorithm), 20 iterations in ~2 us instead of a single thread's serial ~n^2 divisions per
 * step. Larger n: one thread per token running the CPU code as is (n <= 8).
 * hc_pre / hc_post: one thread per output value, the CPU's fp32 sums in the CPU's order. Bit-exact. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define MIX_THREADS 256
#define MIX_CHUNK 512      /* values of a token's n*d per block (2 per thread) */
#define MIX_GROUP 8        /* outputs per block; output nmix is the sum of squares */
#define MIX_MAX_SLICE 512  /* tokens per pass: bounds the partial sums' workspace */
#define HC_MAX_N 8

/* part [T, nmix + 1, n_chunks] doubles: chunk sums of fn_j . x (j < nmix) and x . x (j = nmix) */
__global__ void __launch_bounds__(MIX_THREADS)
hc_mix_part_kernel(const float *__restrict__ x, int64_t len, const float *__restrict__ fn, int nmix,
                   int n_chunks, double *__restrict__ part) {
    __shared__ double warp_sum[MIX_THREADS / 32][MIX_GROUP];
    const int64_t tok = blockIdx.y, c = blockIdx.x;
    const int j0 = blockIdx.z * MIX_GROUP;
    const float *xt = x + tok * len;
    double a[MIX_GROUP];
#pragma unroll
    for (int jj = 0; jj < MIX_GROUP; jj++) a[jj] = 0.0;
#pragma unroll
    for (int v = 0; v < MIX_CHUNK / MIX_THREADS; v++) {
        const int64_t i = c * MIX_CHUNK + v * MIX_THREADS + threadIdx.x;
        if (i >= len) break;
        const double xv = (double)xt[i];
#pragma unroll
        for (int jj = 0; jj < MIX_GROUP; jj++) {
            const int j = j0 + jj;
            if (j < nmix) a[jj] += (double)fn[(int64_t)j * len + i] * xv;
            else if (j == nmix) a[jj] += xv * xv;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int jj = 0; jj < MIX_GROUP; jj++) {
        double v = a[jj];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) warp_sum[warp][jj] = v;
    }
    __syncthreads();
    if (threadIdx.x < MIX_GROUP && j0 + (int)threadIdx.x <= nmix) {
        double v = 0.0;
        for (int w = 0; w < MIX_THREADS / 32; w++) v += warp_sum[w][threadIdx.x];
        part[(tok * (nmix + 1) + j0 + threadIdx.x) * n_chunks + c] = v;
    }
}

/* mix [T, nmix] from the chunk sums, in chunk order, then the CPU's fp32 tail */
__global__ void hc_mix_finish_kernel(const double *__restrict__ part, int64_t T, int nmix, int n_chunks, int64_t len,
                                     float eps, float *__restrict__ mix) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * nmix) return;
    const int64_t tok = idx / nmix;
    const int j = (int)(idx % nmix);
    const double *pj = part + (tok * (nmix + 1) + j) * n_chunks, *ps = part + (tok * (nmix + 1) + nmix) * n_chunks;
    double acc = 0.0, ss = 0.0;
    for (int c = 0; c < n_chunks; c++) {
        acc += pj[c];
        ss += ps[c];
    }
    const float inv = 1.0f / sqrtf((float)(ss / (double)len) + eps);
    mix[idx] = (float)acc * inv;
}

static int64_t mix_chunks(int n, int64_t d) { return ((int64_t)n * d + MIX_CHUNK - 1) / MIX_CHUNK; }

extern "C" size_t di_cuda_hc_mix_ws_bytes(int64_t T, int n, int64_t d) {
    const int64_t slice = T < MIX_MAX_SLICE ? T : MIX_MAX_SLICE;
    return sizeof(double) * (size_t)(slice * (n * (n + 2) + 1) * mix_chunks(n, d));
}

extern "C" void di_cuda_hc_mix_logits(const float *x, int64_t T, int n, int64_t d, const float *fn,
                                      float eps, float *mix, void *ws, cudaStream_t s) {
    if (T <= 0) return;
    const int nmix = n * (n + 2);
    const int64_t len = (int64_t)n * d, n_chunks = mix_chunks(n, d);
    const bool own_ws = ws == nullptr;
    if (own_ws) DI_CUDA_CHECK(cudaMallocAsync(&ws, di_cuda_hc_mix_ws_bytes(T, n, d), s));
    double *part = (double *)ws;
    for (int64_t t0 = 0; t0 < T; t0 += MIX_MAX_SLICE) {
        const int64_t rows = T - t0 < MIX_MAX_SLICE ? T - t0 : MIX_MAX_SLICE;
        const dim3 grid((unsigned)n_chunks, (unsigned)rows, (unsigned)((nmix + 1 + MIX_GROUP - 1) / MIX_GROUP));
        hc_mix_part_kernel<<<grid, MIX_THREADS, 0, s>>>(x + t0 * len, len, fn, nmix, (int)n_chunks, part);
        DI_CUDA_LAUNCHED();
        const int64_t outs = rows * nmix;
        hc_mix_finish_kernel<<<(unsigned)((outs + 127) / 128), 128, 0, s>>>(part, rows, nmix, (int)n_chunks, len, eps,
                                                                           mix + t0 * nmix);
        DI_CUDA_LAUNCHED();
    }
    if (own_ws) DI_CUDA_CHECK(cudaFreeAsync(ws, s));
}

static __device__ __forceinline__ float dev_sigmoidf(float x) { return 1.0f / (1.0f + di_dev_expf(-x)); }

/* one warp per token (n*n <= 32): lane r*n+k holds c[r][k]; 4 tokens per block */
__global__ void hc_sinkhorn_warp_kernel(const float *__restrict__ mix_all, const float *__restrict__ scale,
                                        const float *__restrict__ base, int64_t T, int n, int iters, float eps,
                                        float *pre_all, float *post_all, float *comb_all) {
    const int64_t tok = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (tok >= T) return; /* whole warps leave together */
    const int lane = threadIdx.x & 31, nn = n * n;
    const unsigned full = 0xffffffffu;
    const float *mix = mix_all + tok * n * (n + 2);
    if (lane < n) {
        pre_all[tok * n + lane] = dev_sigmoidf(mix[lane] * scale[0] + base[lane]) + eps;
        post_all[tok * n + lane] = 2.0f * dev_sigmoidf(mix[n + lane] * scale[1] + base[n + lane]);
    }
    const int r = lane / n, k = lane % n;
    const int row0 = (r < n ? r : 0) * n; /* idle lanes (lane >= n*n) read row 0 and column k */
    float v = lane < nn ? mix[2 * n + lane] * scale[2] + base[2 * n + lane] : 0.0f;
    float mx = -INFINITY;
    for (int kk = 0; kk < n; kk++) mx = fmaxf(mx, __shfl_sync(full, v, row0 + kk));
    v = di_dev_expf(v - mx);
    float sum = 0.0f;
    for (int kk = 0; kk < n; kk++) sum += __shfl_sync(full, v, row0 + kk);
    v = v / sum + eps;
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            float sr = 0.0f;
            for (int kk = 0; kk < n; kk++) sr += __shfl_sync(full, v, row0 + kk);
            v /= sr + eps;
        }
        float sc = 0.0f;
        for (int rr = 0; rr < n; rr++) sc += __shfl_sync(full, v, rr * n + k);
        v /= sc + eps;
    }
    if (lane < nn) comb_all[tok * nn + lane] = v;
}

__global__ void hc_split_sinkhorn_kernel(const float *__restrict__ mix_all, const float *__restrict__ scale,
                                         const float *__restrict__ base, int64_t T, int n, int iters,
                                         float eps, float *pre_all, float *post_all, float *comb_all) {
    const int64_t tok = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (tok >= T) return;
    const float *mix = mix_all + tok * n * (n + 2);
    float *pre = pre_all + tok * n, *post = post_all + tok * n, *c = comb_all + tok * n * n;
    for (int i = 0; i < n; i++) {
        pre[i] = dev_sigmoidf(mix[i] * scale[0] + base[i]) + eps;
        post[i] = 2.0f * dev_sigmoidf(mix[n + i] * scale[1] + base[n + i]);
    }
    for (int r = 0; r < n; r++) {
        float mx = -INFINITY;
        for (int k = 0; k < n; k++) {
            c[r * n + k] = mix[2 * n + r * n + k] * scale[2] + base[2 * n + r * n + k];
            mx = fmaxf(mx, c[r * n + k]);
        }
        float sum = 0.0f;
        for (int k = 0; k < n; k++) {
            c[r * n + k] = di_dev_expf(c[r * n + k] - mx);
            sum += c[r * n + k];
        }
        for (int k = 0; k < n; k++) c[r * n + k] = c[r * n + k] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            for (int r = 0; r < n; r++) {
                float s = 0.0f;
                for (int k = 0; k < n; k++) s += c[r * n + k];
                for (int k = 0; k < n; k++) c[r * n + k] /= s + eps;
            }
        }
        for (int k = 0; k < n; k++) {
            float s = 0.0f;
            for (int r = 0; r < n; r++) s += c[r * n + k];
            for (int r = 0; r < n; r++) c[r * n + k] /= s + eps;
        }
    }
}

extern "C" void di_cuda_hc_split_sinkhorn(const float *mix, const float *scale, const float *base,
                                          int64_t T, int n, int iters, float eps, float *pre,
                                          float *post, float *comb, cudaStream_t s) {
    if (T <= 0) return;
    if (n * n <= 32) {
        hc_sinkhorn_warp_kernel<<<(unsigned)((T + 3) / 4), 128, 0, s>>>(mix, scale, base, T, n, iters, eps, pre,
                                                                         post, comb);
    } else {
        hc_split_sinkhorn_kernel<<<(unsigned)((T + 63) / 64), 64, 0, s>>>(mix, scale, base, T, n, iters, eps, pre,
                                                                         post, comb);
    }
    DI_CUDA_LAUNCHED();
}

__global__ void hc_pre_kernel(const float *__restrict__ x, int64_t T, int n, int64_t d,
                              const float *__restrict__ p, float *__restrict__ out) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * d) return;
    const int64_t tok = idx / d, k = idx % d;
    const float *xt = x + tok * n * d, *pt = p + tok * n;
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += pt[i] * xt[i * d + k];
    out[idx] = di_dev_bf16_round(s);
}

extern "C" void di_cuda_hc_pre(const float *x, int64_t T, int n, int64_t d, const float *p, float *out,
                               cudaStream_t s) {
    if (T * d <= 0) return;
    hc_pre_kernel<<<(unsigned)((T * d + 255) / 256), 256, 0, s>>>(x, T, n, d, p, out);
    DI_CUDA_LAUNCHED();
}

__global__ void hc_post_kernel(const float *__restrict__ y, const float *__restrict__ r, int64_t T, int n,
                               int64_t d, const float *__restrict__ post, const float *__restrict__ comb,
                               float *__restrict__ out) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * n * d) return;
    const int64_t k = idx % d, tj = idx / d, tok = tj / n;
    const int j = (int)(tj % n);
    const float *rt = r + tok * n * d, *ct = comb + tok * n * n;
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += ct[i * n + j] * rt[i * d + k];
    out[idx] = di_dev_bf16_round(post[tok * n + j] * y[tok * d + k] + s);
}

extern "C" void di_cuda_hc_post(const float *y, const float *r, int64_t T, int n, int64_t d,
                                const float *post, const float *comb, float *out, cudaStream_t s) {
    const int64_t total = T * n * d;
    if (total <= 0) return;
    hc_post_kernel<<<(unsigned)((total + 255) / 256), 256, 0, s>>>(y, r, T, n, d, post, comb, out);
    DI_CUDA_LAUNCHED();
}
