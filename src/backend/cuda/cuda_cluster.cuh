/* Thread-block clusters (sm_90) for the attention kernels, whose ranks split one row's runs and
 * merge through distributed shared memory, and for the sampling kernels of a few rows
 * (cuda_sample_draw.cu) (internal header): the cluster barrier, a pointer to the same shared
 * variable in another rank, the merge weights, the run split and the cluster launch. The CPU
 * emulator (tools/cuda/emu) runs a cluster's CTAs at once (emu::launch_cluster), so it splits as
 * the device does. */
#ifndef DI_CUDA_CLUSTER_CUH
#define DI_CUDA_CLUSTER_CUH

#include "backend/cuda/cuda_common.cuh" /* the runtime, or the emulator's (DI_CUDA_EMU_H) */

#ifdef DI_CUDA_EMU_H
static void di_cluster_sync(void) { emu::cluster_sync(); }
template <class T>
static T *di_cluster_rank_smem(T *p, int rank) { return emu::cluster_map(p, rank); }
#else
#include <cooperative_groups.h>
static __device__ __forceinline__ void di_cluster_sync(void) { cooperative_groups::this_cluster().sync(); }
template <class T>
static __device__ __forceinline__ T *di_cluster_rank_smem(T *p, int rank) {
    return cooperative_groups::this_cluster().map_shared_rank(p, rank);
}
#endif

/* The merge of one head's online-softmax states over the cluster's ranks, in rank order: M = max
 * m_c, w[c] = exp(m_c - M); returns sum den_c w[c] + exp(sink - M), the final denominator. m and
 * den point at this rank's copies (every rank keeps them at the same offsets). */
static __device__ __forceinline__ float di_cluster_merge_weights(float *m, float *den, int n_split, float sink,
                                                                 float *w) {
    float mx = -1e30f;
    for (int c = 0; c < n_split; c++) mx = fmaxf(mx, *di_cluster_rank_smem(m, c));
    float d = 0.0f;
    for (int c = 0; c < n_split; c++) {
        const float wc = di_dev_expf(*di_cluster_rank_smem(m, c) - mx);
        w[c] = wc;
        d += *di_cluster_rank_smem(den, c) * wc;
    }
    return d + di_dev_expf(sink - mx);
}

/* di_cluster_merge_weights of heads 0 .. heads - 1 at once, 16 lanes a head: lane c of a half warp
 * reads rank c's state (n_split <= 16). m [heads], den [heads]: this rank's copies; w [heads][w_stride]
 * <- the weights, dfin [heads] <- the final denominators. The same bits: the max is exact in any
 * order, each weight is one expf of the same operands, and lane 0 of the head adds the products
 * den_c w_c in rank order (shuffled to it, all issued before the first add). Every thread of the
 * block calls (blockDim.x a multiple of 32). The one-thread-a-head form chains n_split rounds of a
 * remote load and an expf: at B = 1 of V4.1 (ten ranks) the block's other warps waiting on it held
 * ~14% of attn_mma_kernel's stall samples (docs/PERFORMANCE.md, session 62). */
static __device__ __forceinline__ void di_cluster_merge_weights_lanes(float *m, float *den, int heads, int n_split,
                                                                      const float *sink, float *w, int w_stride,
                                                                      float *dfin) {
    const unsigned full = 0xffffffffu;
    const int c = (int)(threadIdx.x & 15), per = (int)(blockDim.x / 16);
    for (int h0 = 0; h0 < heads; h0 += per) { /* uniform over the block */
        const int h = h0 + (int)(threadIdx.x / 16);
        const bool on = h < heads && c < n_split;
        const float mc = on ? *di_cluster_rank_smem(m + h, c) : -1e30f;
        const float dc = on ? *di_cluster_rank_smem(den + h, c) : 0.0f;
        float mx = fmaxf(-1e30f, mc);
        for (int o = 8; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(full, mx, o));
        const float wc = on ? di_dev_expf(mc - mx) : 0.0f;
        const float pc = dc * wc;
        if (on) w[h * w_stride + c] = wc;
        const float es = h < heads ? di_dev_expf(sink[h] - mx) : 0.0f;
        float d = 0.0f;
        for (int k = 0; k < 16; k++) {
            const float v = __shfl_sync(full, pc, (int)(threadIdx.x & 16) | k);
            if (k < n_split) d += v;
        }
        if (c == 0 && h < heads) dfin[h] = d + es;
    }
}
/* The run split of a row's list: `want` runs a rank whatever the list's length (lists of one model
 * differ only in trailing NULL runs, whose ranks add exact zeros, so the split never depends on
 * the batch), more only past max_split ranks. */
static inline void di_cluster_split(int n_runs, int want, int max_split, int *split_runs, int *n_split) {
    *split_runs = n_runs > want * max_split ? (n_runs + max_split - 1) / max_split : want;
    *n_split = n_runs > 0 ? (n_runs + *split_runs - 1) / *split_runs : 1;
}

/* kernel<<<grid, threads, smem, s>>>(args...) in clusters of (n_split, 1, 1) */
template <class... P, class... A>
static void di_cluster_launch(void (*kernel)(P...), dim3 grid, int threads, size_t smem, int n_split, cudaStream_t s,
                              A... args) {
#ifdef DI_CUDA_EMU_H
    (void)s;
    emu::launch_cluster(kernel, grid, dim3(threads), smem, (unsigned)n_split)(args...);
#else
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)n_split;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
#endif
    DI_CUDA_LAUNCHED();
}

#endif
