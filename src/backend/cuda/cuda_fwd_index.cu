/* Compressor pairs and the candidate pool on the GPU (cuda_fwd_ops.h), twins of di_fwd_compress
 * (ratio-2 pair) and candidate_pool in src/forward/indexer.c.
 *
 * cmp_pair: thread per (pair, d), the CPU's fp32 expression with di_dev_expf (glibc's expf).
 * block_max: thread per (row, block), fmaxf over the block's positions in position order, as the
 * CPU; the newest visible block pinned to +inf. cand_flags: zero the row's flags, then one thread
 * per kept block sets its flag. cand_apply: thread per score. All bit-identical to the CPU (no
 * reductions across threads). The paged index scores are in cuda_index_score_mma.cu. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"

#define EW_THREADS 256

static unsigned ew_blocks(int64_t n) {
    int64_t b = (n + EW_THREADS - 1) / EW_THREADS;
    return (unsigned)(b > 8192 ? 8192 : b);
}

/* latent [n, dh] bf16 from the pair's two fp32 key rows and gate-logit rows */
__global__ void __launch_bounds__(EW_THREADS)
cmp_pair_kernel(const float *const *__restrict__ k0, const float *const *__restrict__ z0,
                const float *const *__restrict__ k1, const float *const *__restrict__ z1, int64_t n, int dh,
                float *__restrict__ latent) {
    DI_PDL_BEGIN();
    for (int64_t j = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; j < n * dh; j += (int64_t)gridDim.x * EW_THREADS) {
        const int64_t i = j / dh;
        const int d = (int)(j % dh);
        const float a = z0[i][d], b = z1[i][d], mx = fmaxf(a, b);
        const float e0 = di_dev_expf(a - mx), e1 = di_dev_expf(b - mx), sum = e0 + e1;
        latent[j] = di_dev_bf16_round(k0[i][d] * (e0 / sum) + k1[i][d] * (e1 / sum));
    }
}

extern "C" void di_cuda_cmp_pair(const float *const *k0, const float *const *z0, const float *const *k1,
                                 const float *const *z1, int64_t n, int dh, float *latent, cudaStream_t s) {
    if (n <= 0 || dh <= 0) return;
    cmp_pair_kernel<<<ew_blocks(n * dh), EW_THREADS, 0, s>>>(k0, z0, k1, z1, n, dh, latent);
    DI_CUDA_LAUNCHED();
}

/* bscore [R, nb]: thread per (r, b) */
__global__ void __launch_bounds__(EW_THREADS)
block_max_kernel(const float *__restrict__ score, int64_t R, int64_t P, int bs, int64_t nb,
                 const int64_t *__restrict__ visible, float *__restrict__ bscore) {
    DI_PDL_BEGIN();
    for (int64_t j = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; j < R * nb; j += (int64_t)gridDim.x * EW_THREADS) {
        const int64_t r = j / nb, b = j % nb, vis = visible[r];
        float mx = -INFINITY;
        for (int64_t t = b * bs; t < (b + 1) * bs && t < P; t++) mx = fmaxf(mx, score[r * P + t]);
        if (vis > 0 && b == (vis - 1) / bs) mx = INFINITY;
        bscore[j] = mx;
    }
}

extern "C" void di_cuda_block_max(const float *score, int64_t R, int64_t P, int bs, const int64_t *visible,
                                  float *bscore, cudaStream_t s) {
    const int64_t nb = (P + bs - 1) / bs;
    if (R <= 0 || nb <= 0) return;
    block_max_kernel<<<ew_blocks(R * nb), EW_THREADS, 0, s>>>(score, R, P, bs, nb, visible, bscore);
    DI_CUDA_LAUNCHED();
}

__global__ void __launch_bounds__(EW_THREADS) zero_bytes_kernel(uint8_t *__restrict__ p, int64_t n) {
    DI_PDL_BEGIN();
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * EW_THREADS)
        p[i] = 0;
}

/* thread per (r, j) of blocks [R, keep]: flags[r, blocks[r, j]] = 1 (kept blocks are distinct) */
__global__ void __launch_bounds__(EW_THREADS)
cand_set_kernel(const int32_t *__restrict__ blocks, int64_t R, int keep, int64_t nb, uint8_t *__restrict__ flags) {
    DI_PDL_BEGIN();
    for (int64_t j = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; j < R * keep; j += (int64_t)gridDim.x * EW_THREADS) {
        const int32_t b = blocks[j];
        if (b >= 0 && b < nb) flags[(j / keep) * nb + b] = 1;
    }
}

extern "C" void di_cuda_cand_flags(const int32_t *blocks, int64_t R, int keep, int64_t nb, uint8_t *flags,
                                   cudaStream_t s) {
    if (R <= 0 || nb <= 0) return;
    zero_bytes_kernel<<<ew_blocks(R * nb), EW_THREADS, 0, s>>>(flags, R * nb);
    DI_CUDA_LAUNCHED();
    if (keep <= 0) return;
    cand_set_kernel<<<ew_blocks(R * keep), EW_THREADS, 0, s>>>(blocks, R, keep, nb, flags);
    DI_CUDA_LAUNCHED();
}

/* score [R, P]: -inf outside the row's kept blocks */
__global__ void __launch_bounds__(EW_THREADS)
cand_apply_kernel(float *__restrict__ score, int64_t R, int64_t P, int bs, const uint8_t *__restrict__ flags,
                  int64_t nb) {
    DI_PDL_BEGIN();
    for (int64_t j = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; j < R * P; j += (int64_t)gridDim.x * EW_THREADS) {
        const int64_t r = j / P, b = (j % P) / bs;
        if (b >= nb || !flags[r * nb + b]) score[j] = -INFINITY;
    }
}

extern "C" void di_cuda_cand_apply(float *score, int64_t R, int64_t P, int bs, const uint8_t *flags, int64_t nb,
                                   cudaStream_t s) {
    if (R <= 0 || P <= 0) return;
    cand_apply_kernel<<<ew_blocks(R * P), EW_THREADS, 0, s>>>(score, R, P, bs, flags, nb);
    DI_CUDA_LAUNCHED();
}
