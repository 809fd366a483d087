/* Compressor pairs, paged index scores and the candidate pool on the GPU (cuda_fwd_ops.h), twins
 * of di_fwd_compress (ratio-2 pair), index_scores over a sequence's paged keys and candidate_pool
 * in src/forward/indexer.c.
 *
 * cmp_pair: thread per (pair, d), the CPU's fp32 expression with di_dev_expf (glibc's expf).
 * index_score_paged: index_score_kernel's arithmetic (cuda_index_score.cuh), with key t looked up
 * through the sequence's block table (or, batched, each row's own sequence's). block_max: thread per (row, block), fmaxf over the block's
 * positions in position order, as the CPU; the newest visible block pinned to +inf. cand_flags:
 * zero the row's flags, then one thread per kept block sets its flag. cand_apply: thread per
 * score. All bit-identical to the CPU (no reductions across threads). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_index_score.cuh"

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

/* grid (key groups of IDX_WARPS, R): warp per (r, key t). rows.pool set: row r's own pool, block
 * table and key count (keys past it score -inf); P is then the row stride of score. */
__global__ void __launch_bounds__(IDX_WARPS * 32)
index_score_paged_kernel(const float *__restrict__ qi, const float *__restrict__ w, const float *__restrict__ pool,
                         const int32_t *__restrict__ blocks, int block_entries, int entry_floats, int key_offset,
                         int64_t P, int nh, int idim, const int64_t *__restrict__ visible, float *__restrict__ score,
                         di_index_rows rows) {
    __shared__ float q_s[32][IDX_MAX_DIM + 1];
    __shared__ float w_s[32];
    const int64_t r = blockIdx.y;
    const int64_t t = (int64_t)blockIdx.x * IDX_WARPS + (threadIdx.x >> 5);
    int64_t n_keys = P;
    if (rows.pool) {
        pool = rows.pool[r];
        blocks = rows.blocks[r];
        n_keys = rows.n_keys[r];
        if ((int64_t)blockIdx.x * IDX_WARPS >= n_keys) { /* the whole block is past this row's keys */
            if ((threadIdx.x & 31) == 0 && t < P) score[r * P + t] = -INFINITY;
            return;
        }
    }
    di_dev_index_load_query(qi, w, r, nh, idim, q_s, w_s);
    __syncthreads();
    if (t >= P) return;
    if (t >= n_keys) {
        if ((threadIdx.x & 31) == 0) score[r * P + t] = -INFINITY;
        return;
    }
    const int64_t entry = (int64_t)blocks[t / block_entries] * block_entries + t % block_entries;
    const float *kt = pool + entry * entry_floats + key_offset; /* [idim] FP4 grid */
    const float sc = di_dev_index_score_key(q_s, w_s, kt, nh, idim);
    if ((threadIdx.x & 31) == 0) score[r * P + t] = !visible || t < visible[r] ? sc : -INFINITY;
}

extern "C" void di_cuda_index_score_paged(const float *qi, const float *w, const float *pool,
                                          const int32_t *blocks, int block_entries, int entry_floats,
                                          int key_offset, int64_t R, int64_t P, int nh, int idim,
                                          const int64_t *visible, const di_index_rows *rows, float *score,
                                          cudaStream_t s) {
    if (nh > 32 || idim > IDX_MAX_DIM || block_entries <= 0) {
        fprintf(stderr, "di_cuda_index_score_paged: %d heads x %d dims exceeds 32 x %d (or %d entries per block)\n",
                nh, idim, IDX_MAX_DIM, block_entries);
        abort();
    }
    if (R <= 0 || P <= 0) return;
    dim3 grid((unsigned)((P + IDX_WARPS - 1) / IDX_WARPS), (unsigned)R);
    const di_index_rows none = {NULL, NULL, NULL};
    index_score_paged_kernel<<<grid, IDX_WARPS * 32, 0, s>>>(qi, w, pool, blocks, block_entries, entry_floats,
                                                             key_offset, P, nh, idim, visible, score, rows ? *rows : none);
    DI_CUDA_LAUNCHED();
}

/* bscore [R, nb]: thread per (r, b) */
__global__ void __launch_bounds__(EW_THREADS)
block_max_kernel(const float *__restrict__ score, int64_t R, int64_t P, int bs, int64_t nb,
                 const int64_t *__restrict__ visible, float *__restrict__ bscore) {
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
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * EW_THREADS)
        p[i] = 0;
}

/* thread per (r, j) of blocks [R, keep]: flags[r, blocks[r, j]] = 1 (kept blocks are distinct) */
__global__ void __launch_bounds__(EW_THREADS)
cand_set_kernel(const int32_t *__restrict__ blocks, int64_t R, int keep, int64_t nb, uint8_t *__restrict__ flags) {
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
