/* Logprobs on the device (di_cuda_logprob_rows): the sampler's full_logprobs (sample/sampler.c) for
 * the rows that ask for them -- the token's log-softmax value and the row's n_top best -- so that
 * such a row sends its ~170-byte result to the host instead of its logits (517 KB at V4.1's
 * vocabulary) and the host samples nothing. Bit for bit the host's:
 *
 *   1. max: the largest sanitised logit (a maximum: any order gives it);
 *   2. the exp sum in sample_arith.h's order: thread t of the block is lane t, adding
 *      di_sample_exp_term of ids t, t + 256, .. in id order, as the host's lanes do; then the lanes
 *      fold in shared memory by di_sample_fold_lanes' tree (each level's adds at once);
 *   3. lse = max + di_sample_log(sum), the same IEEE operations as the host's;
 *   4. the top list: each thread keeps the n_top best (value desc, id asc) of its own ids in local
 *      memory, value = (double)sanitise(x) - lse, non-finite values skipped (the host's top_push
 *      over every id gives the n_top best of that order, which lie among the threads' lists);
 *      then n_top rounds of a block-wide best-head pick merge the 256 lists;
 *   5. the token's value: (float)((double)sanitise(x[token]) - lse).
 *
 * A block a row (256 threads: one a lane). The row's logits are read three times (max, sum, top),
 * from the L2 after the first; the exps cost ~40 double operations an id, so a row takes tens of
 * microseconds -- far below its PCIe copy and the host's pass. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"

#define LP_THREADS DI_SAMPLE_EXP_LANES
#define LP_WARPS (LP_THREADS / 32)
static_assert(LP_THREADS % 32 == 0 && LP_THREADS <= 1024, "a lane a thread");

/* (v, id) is better than (w, jd): value desc, then id asc */
__device__ __forceinline__ bool lp_better(double v, int32_t id, double w, int32_t jd) {
    return v > w || (v == w && id < jd);
}

__global__ void __launch_bounds__(LP_THREADS)
logprob_rows_kernel(const di_cuda_logprob_row *__restrict__ rows, int64_t V, const int32_t *__restrict__ tokens,
                    di_sample_result *__restrict__ out) {
    __shared__ double lane[LP_THREADS];
    __shared__ float warp_max[LP_WARPS];
    __shared__ double warp_v[LP_WARPS];
    __shared__ int32_t warp_id[LP_WARPS];
    const di_cuda_logprob_row r = rows[blockIdx.x];
    const float *__restrict__ x = r.src; /* [V] */
    const int t = threadIdx.x, w = t / 32, l = t % 32;

    /* 1. the max of the sanitised row */
    float m = -INFINITY;
    for (int64_t i = t; i < V; i += LP_THREADS) m = fmaxf(m, di_sample_sanitize(x[i]));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (l == 0) warp_max[w] = m;
    __syncthreads();
    m = warp_max[0];
    for (int k = 1; k < LP_WARPS; k++) m = fmaxf(m, warp_max[k]);

    /* 2. lane t's sum in id order, then the lanes' tree */
    double s = 0.0;
    for (int64_t i = t; i < V; i += LP_THREADS) s = DI_SA_ADD(s, di_sample_exp_term(x[i], m));
    lane[t] = s;
    __syncthreads();
    for (int half = LP_THREADS / 2; half > 0; half >>= 1) {
        if (t < half) lane[t] = DI_SA_ADD(lane[t], lane[t + half]);
        __syncthreads();
    }
    /* 3. */
    const double lse = DI_SA_ADD((double)m, di_sample_log(lane[0]));

    /* 4. this thread's n_top best, (value desc, id asc); its ids come in ascending order, so an
     * equal value never displaces a listed one */
    const int cap = r.n_top;
    double tv[DI_SAMPLER_MAX_LOGPROBS];
    int32_t ti[DI_SAMPLER_MAX_LOGPROBS];
    int n = 0;
    for (int64_t i = t; cap > 0 && i < V; i += LP_THREADS) {
        const double v = DI_SA_SUB((double)di_sample_sanitize(x[i]), lse);
        if (!isfinite(v) || (n == cap && !(v > tv[n - 1]))) continue;
        int k = n < cap ? n++ : n - 1;
        for (; k > 0 && tv[k - 1] < v; k--) {
            tv[k] = tv[k - 1];
            ti[k] = ti[k - 1];
        }
        tv[k] = v;
        ti[k] = (int32_t)i;
    }
    /* the lists' merge: each round takes the best of the threads' heads */
    di_sample_result *o = &out[r.head_row];
    int head = 0, n_top = 0;
    for (; n_top < cap; n_top++) {
        double v = head < n ? tv[head] : -INFINITY; /* an empty head loses to every finite value */
        int32_t id = head < n ? ti[head] : INT32_MAX;
        for (int k = 16; k > 0; k >>= 1) {
            const double ov = __shfl_xor_sync(0xffffffffu, v, k);
            const int32_t oid = __shfl_xor_sync(0xffffffffu, id, k);
            if (lp_better(ov, oid, v, id)) v = ov, id = oid;
        }
        if (l == 0) warp_v[w] = v, warp_id[w] = id;
        __syncthreads();
        v = warp_v[0], id = warp_id[0];
        for (int k = 1; k < LP_WARPS; k++)
            if (lp_better(warp_v[k], warp_id[k], v, id)) v = warp_v[k], id = warp_id[k];
        __syncthreads(); /* every thread has read the round's picks before the next writes them */
        if (id == INT32_MAX) break; /* fewer finite values than n_top */
        if (head < n && ti[head] == id) head++;
        if (t == 0) o->top[n_top] = di_token_logprob{id, (float)v};
    }
    /* 5. */
    if (t == 0) {
        const int32_t tok = tokens[r.head_row];
        o->token_id = tok;
        o->n_top = n_top;
        o->logprob = tok >= 0 ? (float)DI_SA_SUB((double)di_sample_sanitize(x[tok]), lse) : 0.0f;
    }
}

extern "C" void di_cuda_logprob_rows(const di_cuda_logprob_row *rows, int64_t n, int64_t V, const int32_t *tokens,
                                     di_sample_result *out, cudaStream_t s) {
    if (n <= 0) return;
    logprob_rows_kernel<<<(unsigned)n, LP_THREADS, 0, s>>>(rows, V, tokens, out); /* rows on the grid's x */
    DI_CUDA_LAUNCHED();
}
