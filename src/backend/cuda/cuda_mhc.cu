/* mHC hyper-connection ops on the GPU (model-spec §2.0 hc_split_sinkhorn, §2.3), twins of
 * src/backend/cpu/cpu_mhc.c, batched over T tokens.
 *
 * hc_mix_logits: the CPU's double sums (sum of squares and fn . x over the n*d values of a token)
 * are split into chunks of MIX_CHUNK values. One thread block per (chunk, group of MIX_TOKENS
 * tokens) stages the chunk of x and of every fn row in shared memory as doubles, then the fp64
 * tensor cores (mma.m8n8k4: a warp per 8 tokens x 8 fn rows) sum the chunk's products, and four
 * chains a token its squares; a second kernel adds the chunk sums (a warp per output, fixed
 * order) and applies the CPU's fp32 tail. (A thread per token and two fn rows, each reading its
 * three operands from shared memory for two FMAs, was bound by shared memory: 123 us a call at 512
 * tokens.) Each fn value fetched serves MIX_TOKENS tokens (the version with a block per token read
 * all 2 MB of fn once per token: a 512-token prefill moved 1 GB through L2 per call). The chunking
 * depends on n*d alone and a token's sums never on the other tokens, so the result does not depend
 * on T (batch invariant). Each product is exact in double (bf16 x f32 needs 32 bits), so the sums
 * differ from the CPU's single index-order chain only in the last double bits, which reach the
 * fp32 result only within 2^-29 of a rounding boundary.
 * hc_split_sinkhorn: for n*n <= 32 one warp per token, lane r*n+k holding c[r][k]; row and column
 * sums gather the n values through shuffles and add them in the CPU's order, every division is
 * the CPU's, so the result is bit-exact (sigmoid and softmax through di_dev_expf, glibc's expf
 * algorithm), 20 iterations in ~2 us instead of a single thread's serial ~n^2 divisions per
 * step. Larger n: one thread per token running the CPU code as is (n <= 8).
 * hc_pre / hc_post: the CPU's fp32 sums in the CPU's order, bit-exact; hc_pre a thread per output
 * value, hc_post a thread per (token, k) for the token's n outputs there. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_ops.h"

#define MIX_THREADS 256
#define MIX_CHUNK 256                /* values of a token's n*d per block */
#define MIX_STRIDE (MIX_CHUNK + 4)   /* doubles per staged row: an m8n8k4 operand in 2 wavefronts */
#define MIX_TOKENS 16                /* tokens per block */
#define MIX_MAX_SLICE 512            /* tokens per pass: bounds the partial sums' workspace */
#define HC_MAX_N 8

/* fn rows staged: nmix rounded up to whole m8n8k4 tiles (the rows past nmix are zeros) */
static __host__ __device__ int mix_fn_rows(int nmix) { return (nmix + 7) & ~7; }
/* doubles of shared memory: x [MIX_TOKENS][MIX_STRIDE], fn [mix_fn_rows(nmix)][MIX_STRIDE] */
static size_t mix_smem_bytes(int nmix) { return sizeof(double) * (size_t)(MIX_TOKENS + mix_fn_rows(nmix)) * MIX_STRIDE; }

/* dst [rows][MIX_STRIDE] doubles <- the first `live` src rows (row stride len floats), cl values
 * each, zeros past cl and in rows live .. rows - 1 (the tensor-core tiles read them). Each thread
 * issues MIX_STAGE_BATCH loads before storing any (a load-store loop would wait out each load: a
 * decode step's call was held by that). */
#define MIX_STAGE_BATCH 8
static __device__ void mix_stage(double *dst, const float *src, int64_t len, int rows, int live, int cl) {
    const int total = rows * MIX_CHUNK;
    for (int k0 = threadIdx.x; k0 < total; k0 += MIX_STAGE_BATCH * MIX_THREADS) {
        float v[MIX_STAGE_BATCH];
#pragma unroll
        for (int u = 0; u < MIX_STAGE_BATCH; u++) {
            const int k = k0 + u * MIX_THREADS, row = k / MIX_CHUNK, i = k % MIX_CHUNK;
            v[u] = k < total && row < live && i < cl ? src[(int64_t)row * len + i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < MIX_STAGE_BATCH; u++) {
            const int k = k0 + u * MIX_THREADS;
            if (k < total) dst[k / MIX_CHUNK * MIX_STRIDE + k % MIX_CHUNK] = (double)v[u];
        }
    }
}

/* part [T, nmix + 1, n_chunks] doubles: chunk sums of fn_j . x (j < nmix) and x . x (j = nmix).
 * grid (n_chunks, token groups of MIX_TOKENS). The fn . x sums are fp64 tensor-core products
 * (mma.m8n8k4: a warp per 8 tokens x 8 fn rows, the chunk's 256 values in k steps of 4); the
 * sums of squares four chains a token (values i = q mod 4), added in q order. */
__global__ void __launch_bounds__(MIX_THREADS)
hc_mix_part_kernel(const float *__restrict__ x, int64_t T, int64_t len, const float *__restrict__ fn, int nmix,
                   int n_chunks, double *__restrict__ part) {
    extern __shared__ double mix_smem[];
    double *xs = mix_smem;                    /* [MIX_TOKENS][MIX_STRIDE] */
    double *fs = xs + MIX_TOKENS * MIX_STRIDE; /* [mix_fn_rows(nmix)][MIX_STRIDE] */
    const int c = blockIdx.x;
    const int64_t t0 = (int64_t)blockIdx.y * MIX_TOKENS, i0 = (int64_t)c * MIX_CHUNK;
    const int nt = T - t0 < MIX_TOKENS ? (int)(T - t0) : MIX_TOKENS;
    const int cl = len - i0 < MIX_CHUNK ? (int)(len - i0) : MIX_CHUNK;
    const int nmix8 = mix_fn_rows(nmix);
    mix_stage(xs, x + t0 * len + i0, len, MIX_TOKENS, nt, cl);
    mix_stage(fs, fn + i0, len, nmix8, nmix, cl);
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int n_tiles = (MIX_TOKENS / 8) * (nmix8 / 8);
    for (int tile = warp; tile < n_tiles; tile += MIX_THREADS / 32) {
        const int mt = tile % (MIX_TOKENS / 8), ft = tile / (MIX_TOKENS / 8);
        const double *xa = xs + (8 * mt + g) * MIX_STRIDE + tq, *fb = fs + (8 * ft + g) * MIX_STRIDE + tq;
        double d[2] = {0.0, 0.0};
#pragma unroll 8
        for (int k = 0; k < MIX_CHUNK; k += 4) di_mma_f64_884(d, xa[k], fb[k], d);
        const int tok = 8 * mt + g, j = 8 * ft + 2 * tq;
        if (tok < nt)
            for (int h = 0; h < 2; h++)
                if (j + h < nmix) part[((t0 + tok) * (nmix + 1) + j + h) * (int64_t)n_chunks + c] = d[h];
    }
    /* sums of squares: thread p < 4 MIX_TOKENS takes token p / 4, values i = p % 4 (mod 4) */
    const int p = threadIdx.x;
    double ss = 0.0;
    if (p < 4 * MIX_TOKENS) {
        const double *xr = xs + (p >> 2) * MIX_STRIDE;
        for (int i = p & 3; i < MIX_CHUNK; i += 4) ss = __fma_rn(xr[i], xr[i], ss); /* exact product */
    }
    ss += __shfl_xor_sync(0xffffffffu, ss, 1);
    ss += __shfl_xor_sync(0xffffffffu, ss, 2);
    if (p < 4 * MIX_TOKENS && (p & 3) == 0 && (p >> 2) < nt)
        part[((t0 + (p >> 2)) * (nmix + 1) + nmix) * (int64_t)n_chunks + c] = ss;
}

/* mix [T, nmix] from the chunk sums: a warp per output, lane l adding chunks l, l + 32, ... in
 * order, then a fixed shuffle tree; then the CPU's fp32 tail */
__global__ void hc_mix_finish_kernel(const double *__restrict__ part, int64_t T, int nmix, int n_chunks, int64_t len,
                                     float eps, float *__restrict__ mix) {
    const int64_t idx = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (idx >= T * nmix) return; /* whole warps leave together */
    const int64_t tok = idx / nmix;
    const int j = (int)(idx % nmix);
    const double *pj = part + (tok * (nmix + 1) + j) * n_chunks, *ps = part + (tok * (nmix + 1) + nmix) * n_chunks;
    double acc = 0.0, ss = 0.0;
    for (int c = lane; c < n_chunks; c += 32) {
        acc += pj[c];
        ss += ps[c];
    }
    for (int o = 16; o > 0; o >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, o);
        ss += __shfl_down_sync(0xffffffffu, ss, o);
    }
    if (lane) return;
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
    if (n < 1 || n > HC_MAX_N) {
        fprintf(stderr, "di_cuda_hc_mix_logits: %d hyper-connection copies (1..%d supported)\n", n, HC_MAX_N);
        abort();
    }
    const int nmix = n * (n + 2);
    const int64_t len = (int64_t)n * d, n_chunks = mix_chunks(n, d);
    const bool own_ws = ws == nullptr;
    if (own_ws) DI_CUDA_CHECK(cudaMallocAsync(&ws, di_cuda_hc_mix_ws_bytes(T, n, d), s));
    double *part = (double *)ws;
    static bool attr_set;
    if (!attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(hc_mix_part_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)mix_smem_bytes(HC_MAX_N * (HC_MAX_N + 2))));
        attr_set = true;
    }
    for (int64_t t0 = 0; t0 < T; t0 += MIX_MAX_SLICE) {
        const int64_t rows = T - t0 < MIX_MAX_SLICE ? T - t0 : MIX_MAX_SLICE;
        const dim3 grid((unsigned)n_chunks, (unsigned)((rows + MIX_TOKENS - 1) / MIX_TOKENS));
        hc_mix_part_kernel<<<grid, MIX_THREADS, mix_smem_bytes(nmix), s>>>(x + t0 * len, rows, len, fn, nmix,
                                                                          (int)n_chunks, part);
        DI_CUDA_LAUNCHED();
        const int64_t outs = rows * nmix;
        hc_mix_finish_kernel<<<(unsigned)((outs * 32 + 127) / 128), 128, 0, s>>>(part, rows, nmix, (int)n_chunks, len, eps,
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

/* V consecutive k a thread (V = 4 where d % 4 == 0 and the rows are 16-byte aligned: one vector
 * access where there were four, and the index arithmetic once for four outputs), each output the
 * same expression in the same order as with V = 1. idx / dv in 32 bits where it fits. */
template <int V>
struct hc_vec;
template <>
struct hc_vec<1> {
    static __device__ __forceinline__ void load(const float *p, float (&v)[1]) { v[0] = *p; }
    static __device__ __forceinline__ void store(float *p, const float (&v)[1]) { *p = v[0]; }
};
template <>
struct hc_vec<4> {
    static __device__ __forceinline__ void load(const float *p, float (&v)[4]) {
        const float4 q = *reinterpret_cast<const float4 *>(p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
    static __device__ __forceinline__ void store(float *p, const float (&v)[4]) {
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    }
};
/* (token, first k) of vector idx of the [T][d / V] grid */
static __device__ __forceinline__ void hc_split(int64_t idx, int64_t dv, bool small, int64_t *tok, int64_t *kv) {
    *tok = small ? (int64_t)((uint32_t)idx / (uint32_t)dv) : idx / dv;
    *kv = idx - *tok * dv;
}

template <int V>
__global__ void hc_pre_kernel(const float *__restrict__ x, int64_t T, int n, int64_t d,
                              const float *__restrict__ p, float *__restrict__ out) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, dv = d / V;
    if (idx >= T * dv) return;
    int64_t tok, kv;
    hc_split(idx, dv, T * dv <= 0x7fffffff, &tok, &kv);
    const int64_t k = kv * V;
    const float *xt = x + tok * n * d + k, *pt = p + tok * n;
    float s[V], xv[V];
#pragma unroll
    for (int v = 0; v < V; v++) s[v] = 0.0f;
    for (int i = 0; i < n; i++) {
        hc_vec<V>::load(xt + i * d, xv);
#pragma unroll
        for (int v = 0; v < V; v++) s[v] += pt[i] * xv[v];
    }
#pragma unroll
    for (int v = 0; v < V; v++) s[v] = di_dev_bf16_round(s[v]);
    hc_vec<V>::store(out + tok * d + k, s);
}

/* the vector width for rows of d floats at these bases */
static int hc_width(int64_t d, const void *a, const void *b, const void *c) {
    return d % 4 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0 ? 4 : 1;
}

extern "C" void di_cuda_hc_pre(const float *x, int64_t T, int n, int64_t d, const float *p, float *out,
                               cudaStream_t s) {
    if (T * d <= 0) return;
    if (hc_width(d, x, out, out) == 4)
        hc_pre_kernel<4><<<(unsigned)((T * d / 4 + 255) / 256), 256, 0, s>>>(x, T, n, d, p, out);
    else
        hc_pre_kernel<1><<<(unsigned)((T * d + 255) / 256), 256, 0, s>>>(x, T, n, d, p, out);
    DI_CUDA_LAUNCHED();
}

/* thread per (token, V values of k): the token's n residual values there loaded once for its n
 * outputs */
template <int V>
__global__ void hc_post_kernel(const float *__restrict__ y, const float *__restrict__ r, int64_t T, int n,
                               int64_t d, const float *__restrict__ post, const float *__restrict__ comb,
                               float *__restrict__ out) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, dv = d / V;
    if (idx >= T * dv) return;
    int64_t tok, kv;
    hc_split(idx, dv, T * dv <= 0x7fffffff, &tok, &kv);
    const int64_t k = kv * V;
    const float *rt = r + tok * n * d + k, *ct = comb + tok * n * n;
    float rv[HC_MAX_N][V], yv[V];
#pragma unroll
    for (int i = 0; i < HC_MAX_N; i++)
        if (i < n) hc_vec<V>::load(rt + i * d, rv[i]);
    hc_vec<V>::load(y + tok * d + k, yv);
    for (int j = 0; j < n; j++) {
        float s[V], o[V];
#pragma unroll
        for (int v = 0; v < V; v++) s[v] = 0.0f;
#pragma unroll
        for (int i = 0; i < HC_MAX_N; i++)
            if (i < n) {
                const float c = ct[i * n + j];
#pragma unroll
                for (int v = 0; v < V; v++) s[v] += c * rv[i][v];
            }
        const float pj = post[tok * n + j];
#pragma unroll
        for (int v = 0; v < V; v++) o[v] = di_dev_bf16_round(pj * yv[v] + s[v]);
        hc_vec<V>::store(out + (tok * n + j) * d + k, o);
    }
}

extern "C" void di_cuda_hc_post(const float *y, const float *r, int64_t T, int n, int64_t d,
                                const float *post, const float *comb, float *out, cudaStream_t s) {
    const int64_t total = T * d;
    if (total <= 0) return;
    if (n < 1 || n > HC_MAX_N) {
        fprintf(stderr, "di_cuda_hc_post: %d hyper-connection copies (1..%d supported)\n", n, HC_MAX_N);
        abort();
    }
    if (hc_width(d, y, r, out) == 4)
        hc_post_kernel<4><<<(unsigned)((total / 4 + 255) / 256), 256, 0, s>>>(y, r, T, n, d, post, comb, out);
    else
        hc_post_kernel<1><<<(unsigned)((total + 255) / 256), 256, 0, s>>>(y, r, T, n, d, post, comb, out);
    DI_CUDA_LAUNCHED();
}
