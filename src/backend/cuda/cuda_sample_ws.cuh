/* The sampled rows' workspace (di_cuda_sample_tokens, cuda_sample_draw.cu), which the processed
 * logprobs of those rows read after the draw (cuda_sample_logprob.cu): per row its thresholds, its
 * weights' sum and top_p histogram, and the draw's cut; then every row's weights.
 *     ws = sample_row_ws [n] | W [n, V] (u64: the fixed-point weights, 0 for a filtered token) */
#ifndef DI_BACKEND_CUDA_SAMPLE_WS_CUH
#define DI_BACKEND_CUDA_SAMPLE_WS_CUH

#include <stdint.h>

#include "sample/sample_arith.h"

typedef struct sample_row_ws {
    uint64_t total;      /* the sum of the row's W */
    uint64_t cut, kept;  /* the draw's: the least kept key (0: every weighted token) and the kept mass */
    float max, kth;      /* the largest sanitised logit; top_k's value (-inf: off) */
    uint32_t count[DI_SAMPLE_WEIGHT_BUCKETS]; /* top_p: weights a bucket */
    uint64_t mass[DI_SAMPLE_WEIGHT_BUCKETS];  /* top_p: W a bucket */
} sample_row_ws;

/* A token's key: (W desc, id asc) as unsigned order -- W above ceil(log2 V) bits of ~id. */
__device__ __forceinline__ uint64_t sample_key(uint64_t w, int64_t i, int id_bits) {
    return (w << id_bits) | (((uint64_t)1 << id_bits) - 1 - (uint64_t)i);
}

__host__ __device__ inline const sample_row_ws *sample_ws_row(const void *ws, int64_t row) {
    return (const sample_row_ws *)ws + row;
}
__host__ __device__ inline const uint64_t *sample_ws_weights(const void *ws, int64_t n, int64_t V, int64_t row) {
    return (const uint64_t *)((const sample_row_ws *)ws + n) + row * V;
}

#endif
