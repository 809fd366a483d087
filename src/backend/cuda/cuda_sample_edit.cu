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
#define EDIT_LOADS 8 /* a thread's listed ids (and their logits) loaded at once */

/* z[ids[i]] = f(z[ids[i]], aux[i]) for every i < n (aux may be NULL: 0), EDIT_LOADS ids a thread
 * loaded together and their logits after them -- one block edits a row, and one load at a time
 * left it waiting on each (a stage's ids are distinct, so no store feeds a later load). */
template <typename F>
__device__ __forceinline__ void edit_listed(float *__restrict__ z, const int32_t *__restrict__ ids,
                                            const uint32_t *__restrict__ aux, int32_t n, F f) {
    for (int32_t i0 = threadIdx.x; i0 < n; i0 += EDIT_LOADS * EDIT_THREADS) {
        int32_t id[EDIT_LOADS];
        uint32_t a[EDIT_LOADS];
        float v[EDIT_LOADS];
#pragma unroll
        for (int u = 0; u < EDIT_LOADS; u++) {
            const int32_t i = i0 + u * EDIT_THREADS;
            id[u] = i < n ? ids[i] : -1;
            a[u] = aux && i < n ? aux[i] : 0u;
        }
#pragma unroll
        for (int u = 0; u < EDIT_LOADS; u++) v[u] = id[u] >= 0 ? z[id[u]] : 0.0f;
#pragma unroll
        for (int u = 0; u < EDIT_LOADS; u++)
            if (id[u] >= 0) z[id[u]] = f(v[u], a[u]);
    }
}

__global__ void __launch_bounds__(EDIT_THREADS)
edit_rows_kernel(float *__restrict__ logits, int64_t V, const di_cuda_row_edits *__restrict__ edits) {
    DI_PDL_BEGIN();
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
    if (e.mask) { /* a lane a mask word, a warp 32 words at once; each word's 32 ids stored by the warp */
        const int64_t words = (V + 31) / 32;
        const int lane = threadIdx.x & 31;
        for (int64_t w0 = threadIdx.x - lane; w0 < words; w0 += EDIT_THREADS) {
            const uint32_t mine = w0 + lane < words ? e.mask[w0 + lane] : ~0u;
            for (int k = 0; k < 32; k++) {
                const uint32_t bits = __shfl_sync(0xffffffffu, mine, k);
                const int64_t id = (w0 + k) * 32 + lane;
                if (id < V && !((bits >> lane) & 1u)) z[id] = -INFINITY;
            }
        }
    }
    __syncthreads();
    const float rp = e.repetition_penalty;
    edit_listed(z, e.repeated, NULL, e.n_repeated, [&](float raw, uint32_t) {
        const float v = di_sample_sanitize(raw);
        return di_sample_sanitize(v < 0.0f ? __fmul_rn(v, rp) : __fdiv_rn(v, rp));
    });
    __syncthreads();
    const float fp = e.frequency_penalty, pp = e.presence_penalty;
    edit_listed(z, e.output_ids, e.output_counts, e.n_output, [&](float raw, uint32_t count) {
        const float t = __fsub_rn(di_sample_sanitize(raw), __fmul_rn(fp, (float)count));
        return di_sample_sanitize(__fsub_rn(t, pp));
    });
}

extern "C" void di_cuda_edit_logits(float *logits, int64_t V, const di_cuda_row_edits *edits, int64_t n,
                                    cudaStream_t s) {
    if (n <= 0) return;
    edit_rows_kernel<<<(unsigned)n, EDIT_THREADS, 0, s>>>(logits, V, edits); /* rows on the grid's x */
    DI_CUDA_LAUNCHED();
}
