/* Logprobs on the device (di_cuda_logprob_rows): what di_sampler_sample (sample/sampler.c) lists for
 * a row that asks for them -- the token's logprob and the row's n_top best -- so that such a row
 * sends its ~170-byte result to the host instead of its logits (517 KB at V4.1's vocabulary) and
 * the host samples nothing. Bit for bit the host's, for both of its kinds:
 *
 *   full (full_logprobs: raw mode, and processed mode at temperature 0): value = (double)sanitise(x)
 *     - lse over the whole row, lse = max + di_sample_log(sum) where
 *       max is the largest sanitised logit (a maximum: any order gives it), and the exp sum runs in
 *       sample_arith.h's order -- thread t of the block is lane t, adding di_sample_exp_term of ids
 *       t, t + 256, .. in id order as the host's lanes do; the lanes fold in shared memory by
 *       di_sample_fold_lanes' tree (each level's adds at once);
 *   candidates (candidate_logprobs: processed mode of a sampled row): over the tokens the draw kept
 *     (a weight, and a key at or above the draw's cut: the workspace di_cuda_sample_tokens left,
 *     cuda_sample_ws.cuh), value = ((double)z - max) / T - log(kept mass / 2^bits).
 *
 * The top list: each thread keeps the n_top best (value desc, id asc) of its own ids, in id order,
 * in local memory, non-finite values skipped (the host's top_push over every id in id order gives
 * the n_top best of that order, which lie among the threads' lists); n_top rounds of a block-wide
 * pick of the best head merge the 256 lists. Then the token's own value.
 *
 * A block a row (256 threads: a lane each). A full row's logits are read three times (max, sum,
 * top), from the L2 after the first; the exps cost ~40 double operations an id, so a row takes
 * tens of microseconds -- far below its PCIe copy and the host's pass. At a few rows that block is
 * alone on the card (295 us at B = 1 on an H100, session 46), so up to 16 rows take a cluster of
 * 2-8 blocks a row instead (logprob_cluster_kernel): rank k the ids of a contiguous range of whole
 * 256-id rows, so thread t of every rank is still lane t. The ranks compute their exp terms at
 * once into shared memory (C a lane: 64 at 129,280 ids and 8 ranks, 128 KB), then fold them into
 * the lane sums rank after rank -- rank k starts from rank k - 1's sums, as the lane's one chain
 * in id order does -- and every rank folds the last rank's lane sums by the same tree: the host's
 * bits whatever the cluster. Each rank merges its threads' lists into its own n_top best; rank 0
 * merges the ranks' lists (value desc, id asc is a total order: the same n_top best). */
#include "backend/cuda/cuda_cluster.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_sample_ws.cuh"

#define LP_THREADS DI_SAMPLE_EXP_LANES
#define LP_WARPS (LP_THREADS / 32)
#define LP_LOADS 16 /* a thread's loads in flight in each pass over the row */
#define LP_MAX_CLUSTER 8
#define LP_TERMS_MAX_BYTES (160 * 1024) /* a cluster rank's exp terms in shared memory at most */
static_assert(LP_THREADS % 32 == 0 && LP_THREADS <= 1024, "a lane a thread");

/* (v, id) is better than (w, jd): value desc, then id asc */
__device__ __forceinline__ bool lp_better(double v, int32_t id, double w, int32_t jd) {
    return v > w || (v == w && id < jd);
}

/* A row's values: value(i, x[i], w[i], &v) is false where id i is not listed (a non-finite or,
 * for candidates, a token the draw did not keep); the callers load x[i] and w[i] (LP_LOADS at a
 * time: one block a row is bound by its loads' latency). */
struct lp_values {
    double lse;             /* full */
    const uint64_t *w;      /* [V] candidates: the weights; NULL: full */
    uint64_t cut;           /* candidates: the least kept key */
    int id_bits;
    double max, t, log_kept; /* candidates: the row's max, temperature, log of the kept mass */
    __device__ __forceinline__ double of(float xi) const {
        if (!w) return DI_SA_SUB((double)di_sample_sanitize(xi), lse);
        return DI_SA_SUB(DI_SA_DIV(DI_SA_SUB((double)di_sample_sanitize(xi), max), t), log_kept);
    }
    __device__ __forceinline__ bool value(int64_t i, float xi, uint64_t wi, double *v) const {
        if (w && !(wi && sample_key(wi, i, id_bits) >= cut)) return false;
        *v = of(xi);
        return isfinite(*v);
    }
};

/* the largest sanitised logit of x's ids lo + t, lo + t + LP_THREADS, .. < hi over the block
 * (every thread gets it) */
__device__ __forceinline__ float lp_block_max(const float *__restrict__ x, int64_t lo, int64_t hi) {
    __shared__ float warp_max[LP_WARPS];
    float m = -INFINITY;
    di_dev_for_each_loaded<LP_LOADS>(x, lo + threadIdx.x, LP_THREADS, hi,
                                     [&](int64_t, float v) { m = fmaxf(m, di_sample_sanitize(v)); });
    return di_dev_block_max(m, warp_max, LP_WARPS);
}

/* max + log of the lanes' sums lane [LP_THREADS] (complete, every thread's visible) folded by
 * di_sample_fold_lanes' tree, each level's adds at once; lane is folded in place */
__device__ __forceinline__ double lp_lse_of_lanes(double *lane, float m) {
    const int t = threadIdx.x;
    for (int half = LP_THREADS / 2; half > 0; half >>= 1) {
        if (t < half) lane[t] = DI_SA_ADD(lane[t], lane[t + half]);
        __syncthreads();
    }
    return DI_SA_ADD((double)m, di_sample_log(lane[0]));
}

/* lse of the full log-softmax of x [V]: the block's threads together */
__device__ double lp_lse(const float *__restrict__ x, int64_t V) {
    __shared__ double lane[LP_THREADS];
    const int t = threadIdx.x;
    const float m = lp_block_max(x, 0, V);
    double s = 0.0; /* lane t's sum in id order, then the lanes' tree */
    di_dev_for_each_loaded<LP_LOADS>(x, t, LP_THREADS, V, [&](int64_t, float v) { s = DI_SA_ADD(s, di_sample_exp_term(v, m)); });
    lane[t] = s;
    __syncthreads();
    return lp_lse_of_lanes(lane, m);
}

/* the draw's candidates of row r (its workspace: cut, max, kept mass) */
__device__ __forceinline__ lp_values lp_candidates(const di_cuda_logprob_row &r, int64_t V) {
    lp_values val = {0.0, NULL, 0, 0, 0.0, 0.0, 0.0};
    const sample_row_ws *ws = sample_ws_row(r.sample_ws, r.head_row);
    val.w = sample_ws_weights(r.sample_ws, r.sample_ws_rows, V, r.head_row);
    val.cut = ws->cut;
    val.id_bits = di_sample_id_bits(V);
    val.max = (double)ws->max, val.t = (double)r.temperature;
    val.log_kept =
        di_sample_log(DI_SA_MUL(di_sample_u64_to_double(ws->kept), di_sample_pow2(-di_sample_weight_bits(V))));
    return val;
}

/* this thread's n_top best of ids first, first + LP_THREADS, .. < end (di_sample_top_insert: the
 * host's list, over the thread's ids in id order) into tv / ti [cap]; returns how many */
__device__ __forceinline__ int32_t lp_thread_list(const di_cuda_logprob_row &r, const lp_values &val, int64_t first,
                                                  int64_t end, int cap, double *tv, int32_t *ti) {
    int32_t n = 0;
    for (int64_t i0 = first; cap > 0 && i0 < end; i0 += LP_LOADS * LP_THREADS) {
        float xv[LP_LOADS];
        uint64_t wv[LP_LOADS];
#pragma unroll
        for (int u = 0; u < LP_LOADS; u++) {
            const int64_t i = i0 + u * LP_THREADS;
            xv[u] = i < end ? r.src[i] : 0.0f;
            wv[u] = val.w && i < end ? val.w[i] : 0;
        }
#pragma unroll
        for (int u = 0; u < LP_LOADS; u++) {
            const int64_t i = i0 + u * LP_THREADS;
            double v;
            if (i < end && val.value(i, xv[u], wv[u], &v)) di_sample_top_insert(tv, ti, &n, cap, v, (int32_t)i);
        }
    }
    return n;
}

/* The threads' lists merged: each round takes the best of the threads' heads; thread 0 gets
 * emit(k, id, value) for the k-th best. Returns how many (at most cap; every thread alike). */
template <typename Emit>
__device__ __forceinline__ int lp_block_merge(const double *tv, const int32_t *ti, int32_t n, int cap, Emit emit) {
    __shared__ double warp_v[LP_WARPS];
    __shared__ int32_t warp_id[LP_WARPS];
    const int t = threadIdx.x, w = t / 32, l = t % 32;
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
        if (id == INT32_MAX) break; /* fewer listed values than n_top */
        if (head < n && ti[head] == id) head++;
        if (t == 0) emit(n_top, id, v);
    }
    return n_top;
}

__global__ void __launch_bounds__(LP_THREADS)
logprob_rows_kernel(const di_cuda_logprob_row *__restrict__ rows, int64_t V, const int32_t *__restrict__ tokens,
                    di_sample_result *__restrict__ out) {
    DI_PDL_BEGIN();
    const di_cuda_logprob_row r = rows[blockIdx.x];
    const int t = threadIdx.x;
    di_sample_result *o = &out[r.head_row];
    const int32_t tok = tokens[r.head_row];
    if (tok < 0) { /* no token (the host sampler's error): nothing listed */
        if (t == 0) o->token_id = -1, o->logprob = 0.0f, o->n_top = 0;
        return;
    }
    lp_values val = {0.0, NULL, 0, 0, 0.0, 0.0, 0.0};
    if (r.sample_ws) val = lp_candidates(r, V); /* the draw's candidates */
    else val.lse = lp_lse(r.src, V);
    double tv[DI_SAMPLER_MAX_LOGPROBS];
    int32_t ti[DI_SAMPLER_MAX_LOGPROBS];
    const int32_t n = lp_thread_list(r, val, t, V, r.n_top, tv, ti);
    const int n_top =
        lp_block_merge(tv, ti, n, r.n_top, [&](int k, int32_t id, double v) { o->top[k] = di_token_logprob{id, (float)v}; });
    if (t == 0) o->token_id = tok, o->n_top = n_top, o->logprob = (float)val.of(r.src[tok]);
}

/* ---- a few rows: a cluster of `ranks` blocks a row ---- */

/* lse of the full log-softmax of x [V] over the cluster: this rank's ids [lo, hi) (lo a multiple
 * of LP_THREADS, so thread t is lane t), its exp terms into terms [(hi - lo) / LP_THREADS rounded
 * up][LP_THREADS] (dynamic shared memory), folded into the lane sums rank after rank. */
__device__ double lp_lse_cluster(const float *__restrict__ x, int64_t lo, int64_t hi, int rank, int ranks,
                                 double *terms) {
    __shared__ double lane[LP_THREADS];
    __shared__ float rank_max;
    const int t = threadIdx.x;
    float m = lp_block_max(x, lo, hi);
    if (t == 0) rank_max = m;
    di_cluster_sync();
    for (int c = 0; c < ranks; c++) m = fmaxf(m, *di_cluster_rank_smem(&rank_max, c)); /* a max: any order */
    int n_terms = 0; /* this lane's terms here, in id order */
    di_dev_for_each_loaded<LP_LOADS>(x, lo + t, LP_THREADS, hi, [&](int64_t i, float v) {
        terms[((i - lo) / LP_THREADS) * LP_THREADS + t] = di_sample_exp_term(v, m);
        n_terms++;
    });
    for (int c = 0; c < ranks; c++) { /* the lane's chain: rank c goes on from rank c - 1's sum */
        if (c == rank) {
            double s = c ? *di_cluster_rank_smem(&lane[t], c - 1) : 0.0;
            for (int j = 0; j < n_terms; j++) s = DI_SA_ADD(s, terms[j * LP_THREADS + t]);
            lane[t] = s;
        }
        di_cluster_sync();
    }
    if (rank != ranks - 1) lane[t] = *di_cluster_rank_smem(&lane[t], ranks - 1);
    di_cluster_sync(); /* every rank has its copy: the last one may fold its own */
    return lp_lse_of_lanes(lane, m);
}

__global__ void __launch_bounds__(LP_THREADS, 1)
logprob_cluster_kernel(const di_cuda_logprob_row *__restrict__ rows, int64_t V, const int32_t *__restrict__ tokens,
                       di_sample_result *__restrict__ out, int ranks, int64_t per_rank) {
    DI_PDL_BEGIN();
    extern __shared__ double lp_terms[]; /* [per_rank / LP_THREADS][LP_THREADS] */
    __shared__ double list_v[DI_SAMPLER_MAX_LOGPROBS];
    __shared__ int32_t list_id[DI_SAMPLER_MAX_LOGPROBS];
    __shared__ int list_n;
    const int rank = (int)(blockIdx.x % ranks), t = threadIdx.x;
    const di_cuda_logprob_row r = rows[blockIdx.x / ranks];
    di_sample_result *o = &out[r.head_row];
    const int32_t tok = tokens[r.head_row];
    if (tok < 0) { /* the whole cluster */
        if (t == 0 && rank == 0) o->token_id = -1, o->logprob = 0.0f, o->n_top = 0;
        return;
    }
    const int64_t lo = rank * per_rank < V ? rank * per_rank : V, hi = lo + per_rank < V ? lo + per_rank : V;
    lp_values val = {0.0, NULL, 0, 0, 0.0, 0.0, 0.0};
    if (r.sample_ws) val = lp_candidates(r, V);
    else val.lse = lp_lse_cluster(r.src, lo, hi, rank, ranks, lp_terms);
    double tv[DI_SAMPLER_MAX_LOGPROBS];
    int32_t ti[DI_SAMPLER_MAX_LOGPROBS];
    const int32_t n = lp_thread_list(r, val, lo + t, hi, r.n_top, tv, ti);
    const int mine = lp_block_merge(tv, ti, n, r.n_top, [&](int k, int32_t id, double v) { list_v[k] = v, list_id[k] = id; });
    if (t == 0) list_n = mine;
    di_cluster_sync();
    if (rank == 0 && t == 0) { /* the ranks' lists merged: each pick the best of their heads */
        int head[LP_MAX_CLUSTER] = {0};
        int k = 0;
        for (; k < r.n_top; k++) {
            int best = -1;
            double bv = 0.0;
            int32_t bid = 0;
            for (int c = 0; c < ranks; c++) {
                if (head[c] >= *di_cluster_rank_smem(&list_n, c)) continue;
                const double v = di_cluster_rank_smem(list_v, c)[head[c]];
                const int32_t id = di_cluster_rank_smem(list_id, c)[head[c]];
                if (best < 0 || lp_better(v, id, bv, bid)) best = c, bv = v, bid = id;
            }
            if (best < 0) break;
            head[best]++;
            o->top[k] = di_token_logprob{bid, (float)bv};
        }
        o->token_id = tok, o->n_top = k, o->logprob = (float)val.of(r.src[tok]);
    }
    di_cluster_sync(); /* rank 0 has read every rank's list */
}

/* Blocks a row: a cluster of 8, 4 or 2 while the rows of them fit the card once and a rank's exp
 * terms fit its shared memory (*per_rank: ids a rank, whole LP_THREADS-id rows), else one. */
static int logprob_cluster(int64_t n, int64_t V, int64_t *per_rank) {
    const int64_t lane_rows = (V + LP_THREADS - 1) / LP_THREADS;
    if (lane_rows < 2 * LP_MAX_CLUSTER) return 1; /* a small vocabulary: one block is quick */
    for (int c = LP_MAX_CLUSTER; c > 1; c /= 2) {
        const int64_t rows_a_rank = (lane_rows + c - 1) / c;
        if (n * c <= (int64_t)di_cuda_sm_count() && rows_a_rank * LP_THREADS * (int64_t)sizeof(double) <= LP_TERMS_MAX_BYTES) {
            *per_rank = rows_a_rank * LP_THREADS;
            return c;
        }
    }
    return 1;
}

extern "C" void di_cuda_logprob_rows(const di_cuda_logprob_row *rows, int64_t n, int64_t V, const int32_t *tokens,
                                     di_sample_result *out, cudaStream_t s) {
    if (n <= 0) return;
    int64_t per_rank = 0;
    const int ranks = logprob_cluster(n, V, &per_rank);
    if (ranks > 1) {
        static bool attr_set;
        if (!attr_set) {
            DI_CUDA_CHECK(cudaFuncSetAttribute(logprob_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               LP_TERMS_MAX_BYTES));
            attr_set = true;
        }
        di_cluster_launch(logprob_cluster_kernel, dim3((unsigned)(n * ranks)), LP_THREADS,
                          (size_t)per_rank * sizeof(double), ranks, s, rows, V, tokens, out, ranks, per_rank);
        return;
    }
    logprob_rows_kernel<<<(unsigned)n, LP_THREADS, 0, s>>>(rows, V, tokens, out); /* rows on the grid's x */
    DI_CUDA_LAUNCHED();
}
