/* The sampler's steps 1-3 on the device (di_cuda_edit_logits): a row's logit bias, allowed-token
 * mask and penalties applied in place where its logits are, so that a request with any of them is
 * sampled on the device like a plain one (cuda_sample.cu, cuda_sample_draw.cu) and sends 4 bytes a
 * row to the host instead of its logits (517 KB at V4.1's vocabulary) -- structured output above
 * all, whose every row carries a mask.
 *
 * The host builds the lists (sample/sample_edits.c) and applies them itself to its copy of a row
 * (di_sample_edits_apply); here a block a row applies the same four stages, a barrier between
 * them, each id of a stage by one thread:
 *   1. bias: the thread at the first entry of an id's group adds the group's entries in order;
 *   2. mask: a thread an id (the 32 ids of a mask word share one load a warp): -inf where clear;
 *   3. repeated ids: z < 0 ? z * rp : z / rp;    4. output ids: z - fp * count, then - pp;
 * every value sanitised on the way (NaN -> -inf, +inf -> FLT_MAX) exactly where the host's is, with
 * IEEE single operations (the build's -fmad=false keeps 4.'s product and difference apart, as the
 * host's ISO C build does). Ids outside the lists keep their raw values: the samplers sanitise what
 * they read, as the host sanitises its copy first. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"

#define EDIT_THREADS 512

__global__ void __launch_bounds__(EDIT_THREADS)
edit_rows_kernel(float *__restrict__ logits, int64_t V, const di_cuda_row_edits *__restrict__ edits) {
    const di_cuda_row_edits e = edits[blockIdx.x];
    float *z = logits + e.row * V; /* [V] */
    for (int32_t i = threadIdx.x; i < e.n_bias; i += EDIT_THREADS) {
        const int32_t id = e.bias_ids[i];
        if (i > 0 && e.bias_ids[i - 1] == id) continue; /* not the first of its group */
        float v = di_sample_sanitize(z[id]);
        for (int32_t j = i; j < e.n_bias && e.bias_ids[j] == id; j++) v = di_sample_sanitize(__fadd_rn(v, e.bias[j]));
        z[id] = v;
    }
    __syncthreads();
    if (e.mask)
        for (int64_t id = threadIdx.x; id < V; id += EDIT_THREADS)
            if (!((e.mask[id >> 5] >> (id & 31)) & 1u)) z[id] = -INFINITY;
    __syncthreads();
    const float rp = e.repetition_penalty;
    for (int32_t i = threadIdx.x; i < e.n_repeated; i += EDIT_THREADS) {
        const int32_t id = e.repeated[i];
        const float v = di_sample_sanitize(z[id]);
        z[id] = di_sample_sanitize(v < 0.0f ? __fmul_rn(v, rp) : __fdiv_rn(v, rp));
    }
    __syncthreads();
    const float fp = e.frequency_penalty, pp = e.presence_penalty;
    for (int32_t i = threadIdx.x; i < e.n_output; i += EDIT_THREADS) {
        const int32_t id = e.output_ids[i];
        const float t = __fsub_rn(di_sample_sanitize(z[id]), __fmul_rn(fp, (float)e.output_counts[i]));
        z[id] = di_sample_sanitize(__fsub_rn(t, pp));
    }
}

extern "C" void di_cuda_edit_logits(float *logits, int64_t V, const di_cuda_row_edits *edits, int64_t n,
                                    cudaStream_t s) {
    if (n <= 0) return;
    edit_rows_kernel<<<(unsigned)n, EDIT_THREADS, 0, s>>>(logits, V, edits); /* rows on the grid's x */
    DI_CUDA_LAUNCHED();
}
