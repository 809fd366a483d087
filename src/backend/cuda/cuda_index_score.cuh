/* The indexer's per-key score on the device (internal header), shared by index_score_kernel
 * (cuda_indexer.cu: keys contiguous) and index_score_paged_kernel (cuda_fwd_index.cu: keys in a
 * block pool). One warp scores one key, lane = head (<= 32 heads): q_h . k_t in double in index
 * order, bf16; relu times the bf16 head weight, bf16; the warp adds the head terms in double in
 * head order and rounds once to bf16 -- the three roundings of index_scores() in
 * src/forward/indexer.c. */
#ifndef DI_CUDA_INDEX_SCORE_CUH
#define DI_CUDA_INDEX_SCORE_CUH

#include "backend/cuda/cuda_common.cuh"

#define IDX_WARPS 8
#define IDX_MAX_DIM 128

/* q_s [32][IDX_MAX_DIM + 1], w_s [32] <- query row r's heads and weights (whole block; the caller
 * syncs) */
static __device__ __forceinline__ void di_dev_index_load_query(const float *qi, const float *w, int64_t r, int nh,
                                                               int idim, float (*q_s)[IDX_MAX_DIM + 1], float *w_s) {
    for (int i = threadIdx.x; i < nh * idim; i += IDX_WARPS * 32) q_s[i / idim][i % idim] = qi[r * nh * idim + i];
    if (threadIdx.x < nh) w_s[threadIdx.x] = w[r * nh + threadIdx.x];
}

/* score of key kt [idim] (every lane of the warp calls it; every lane gets the result) */
static __device__ __forceinline__ float di_dev_index_score_key(const float (*q_s)[IDX_MAX_DIM + 1], const float *w_s,
                                                               const float *kt, int nh, int idim) {
    const int lane = threadIdx.x & 31;
    float term = 0.0f;
    if (lane < nh) {
        double dot = 0.0;
        for (int d = 0; d < idim; d++) dot += (double)q_s[lane][d] * kt[d];
        const float sv = di_dev_bf16_round((float)dot);
        term = di_dev_bf16_round(fmaxf(sv, 0.0f) * w_s[lane]);
    }
    double sum = 0.0;
    for (int h = 0; h < nh; h++) sum += (double)__shfl_sync(0xffffffffu, term, h);
    return di_dev_bf16_round((float)sum);
}

#endif
