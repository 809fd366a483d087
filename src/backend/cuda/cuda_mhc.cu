/* mHC hyper-connection ops on the GPU (model-spec §2.0 hc_split_sinkhorn, §2.3), twins of
 * src/backend/cpu/cpu_mhc.c, batched over T tokens.
 *
 * hc_mix_logits: one thread block per (token, output j); the CPU's double sums (sum of squares
 * and fn . x over n*d values) are taken as per-thread strided double sums plus a fixed tree, so
 * they can differ from the CPU's index-order double sums in the last double bit (each product is
 * exact in double: bf16 x f32 needs 32 bits), which reaches the fp32 result only within 2^-29 of
 * a rounding boundary. The fp32 tail is the CPU's expression.
 * hc_split_sinkhorn: one thread per token running the CPU code as is (n <= 8; sigmoid and softmax
 * through di_dev_expf, glibc's expf algorithm). Bit-exact.
 * hc_pre / hc_post: one thread per output value, the CPU's fp32 sums in the CPU's order. Bit-exact. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define MIX_THREADS 256
#define HC_MAX_N 8

__global__ void __launch_bounds__(MIX_THREADS)
hc_mix_logits_kernel(const float *__restrict__ x, int n, int64_t d, const float *__restrict__ fn,
                     float eps, float *__restrict__ mix) {
    __shared__ double part_ss[MIX_THREADS], part_acc[MIX_THREADS];
    const int64_t len = n * d, tok = blockIdx.y;
    const int j = blockIdx.x, nmix = n * (n + 2);
    const float *xt = x + tok * len, *f = fn + (int64_t)j * len;
    double ss = 0.0, acc = 0.0;
    for (int64_t i = threadIdx.x; i < len; i += MIX_THREADS) {
        ss += (double)xt[i] * xt[i];
        acc += (double)f[i] * xt[i];
    }
    part_ss[threadIdx.x] = ss;
    part_acc[threadIdx.x] = acc;
    __syncthreads();
    for (int o = MIX_THREADS / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) {
            part_ss[threadIdx.x] += part_ss[threadIdx.x + o];
            part_acc[threadIdx.x] += part_acc[threadIdx.x + o];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const float inv = 1.0f / sqrtf((float)(part_ss[0] / (double)len) + eps);
        mix[tok * nmix + j] = (float)part_acc[0] * inv;
    }
}

extern "C" void di_cuda_hc_mix_logits(const float *x, int64_t T, int n, int64_t d, const float *fn,
                                      float eps, float *mix, cudaStream_t s) {
    if (T <= 0) return;
    dim3 grid((unsigned)(n * (n + 2)), (unsigned)T);
    hc_mix_logits_kernel<<<grid, MIX_THREADS, 0, s>>>(x, n, d, fn, eps, mix);
    DI_CUDA_LAUNCHED();
}

static __device__ __forceinline__ float dev_sigmoidf(float x) { return 1.0f / (1.0f + di_dev_expf(-x)); }

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
    hc_split_sinkhorn_kernel<<<(unsigned)((T + 63) / 64), 64, 0, s>>>(mix, scale, base, T, n, iters,
                                                                     eps, pre, post, comb);
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
