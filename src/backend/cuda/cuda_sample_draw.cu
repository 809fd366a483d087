/* Sampled tokens on the device: for each logits row whose di_plain_sampling has a temperature > 0,
 * the token di_sampler_sample_plain draws on the host, bit for bit -- both sides run the arithmetic
 * of sample/sample_arith.h: an exp of IEEE operations and fixed-point integer weights W, whose
 * sums are exact in any order (so the atomics' order changes nothing). A step of plain-sampled
 * requests then sends 4 bytes a row to the host and the host samples nothing.
 *
 * Three launches:
 *   1. thresholds, a cluster of blocks a row like the draw's: the max of the sanitised logits and,
 *      for top_k, the k-th largest (a radix select over the float keys, four 8-bit digits: the
 *      host's value whatever its digits); clears the row's histogram and sum;
 *   2. weights, a block per (slice, row) -- the exps are the work (double precision), spread over
 *      the card: W of every id into the workspace ([n, V] u64, 0 for a filtered token), the row's
 *      sum and, for top_p, its histogram of count and mass over the weight buckets (eight an
 *      octave), added into the row's by integer atomics;
 *   3. draw, a cluster of blocks a row (row_cluster: up to 8 when the rows leave the card idle, else
 *      one), integers only, reading W: for top_p the bucket holding the cut (the lowest non-empty
 *      bucket whose first key's mass before it, rounded to double, is still below top_p * total) and
 *      the cut inside it, by a radix select over 64-bit keys (W << id bits | ~id: the order (W desc,
 *      id asc)) -- the bucket's keys gathered into shared memory when they fit (SAMPLE_CAP), and
 *      digits only below the highest bit where its smallest and largest keys differ; then U =
 *      floor(r * kept mass / 2^53) and the first kept token in id order whose cumulative weight
 *      exceeds it (a warp a segment of ids, the segments' sums scanned in order, one warp walking
 *      the segment that holds U). A cluster's ranks share the row's ids (thread t of rank k takes
 *      ids k * 512 + t, a step of ranks * 512), each keeps its own gathered keys, and every histogram, minimum,
 *      maximum and segment sum is the ranks' partials added through distributed shared memory: exact
 *      integers, so every rank takes the same digit and the draw does not depend on the cluster's
 *      size. One block alone read a flat row's 1 MB of weights about seven times at ~340 us (an H100,
 *      session 46), its multiprocessor alone waiting on the L2; clusters of 8: 577 -> 202 us under
 *      ncu (session 48). Past 16 rows (`<false>`) a row has one block, the stride a constant and
 *      no cluster barrier, two blocks a multiprocessor (see this_row_part).
 * A thread adds a run of histogram entries with one digit at once (hist_run): a flat row, whose
 * weights share a bucket and whose keys share digits, would otherwise send every entry's atomic to
 * one address. */
#include "backend/cuda/cuda_cluster.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_sample_ws.cuh"

#define SAMPLE_THREADS 512
#define SAMPLE_WARPS (SAMPLE_THREADS / 32)
#define SAMPLE_CAP 4096             /* keys of the cut's bucket gathered into shared memory (32 KB) */
#define WEIGHT_THREADS 256
#define WEIGHT_MIN_SLICE 2048       /* ids a weights block at least */
#define WEIGHT_GRID_TARGET (132 * 8) /* weights blocks a launch: every multiprocessor several times */
#define NB DI_SAMPLE_WEIGHT_BUCKETS
#define ROW_MAX_CLUSTER 8           /* blocks a row of the thresholds and draw at most (the portable cluster size) */
/* loads in flight a thread in the passes of a row's one block: at one row its block alone is on
 * the card, waiting on the L2. The thresholds' float passes take 16 (session 45; H100, ncu: 32 -> 26
 * us at B = 1); the draw's 64-bit weights 8 (16 ran 339 -> 359 us at B = 1 and 1,061 -> 1,702 us
 * at B = 256: session 46) */
#define ROW_LOADS 16
#define DRAW_LOADS 8

/* A row's state between the launches: sample_row_ws (cuda_sample_ws.cuh), before the weights. */

/* v >> s for s up to 64 (a key's digits above the one at hand) */
__device__ __forceinline__ uint64_t sample_shr(uint64_t v, int s) { return s >= 64 ? 0 : v >> s; }

typedef struct sample_smem {
    uint64_t mass[NB]; /* per bucket, then per digit: the whole cluster's */
    uint32_t count[NB];
    uint64_t part_mass[256]; /* a digit's histogram over this rank's keys */
    uint32_t part_count[256];
    uint64_t keys[SAMPLE_CAP]; /* the cut's bucket, when it fits: this rank's keys */
    uint64_t warp_u64[SAMPLE_WARPS];
    uint64_t seg_sums[ROW_MAX_CLUSTER * SAMPLE_WARPS]; /* the draw's segments, every rank's warps */
    float warp_f[SAMPLE_WARPS];
    uint64_t mass_above, base, rank_u64; /* rank_u64: a rank's value for the others (cluster_share_u64) */
    uint32_t n_keys, remaining;
    int chosen, walker;
} sample_smem;

/* A thread's run of histogram entries with one digit, added to shared memory when the digit
 * changes. */
typedef struct hist_run {
    uint32_t digit, n;
    uint64_t mass;
} hist_run;

__device__ __forceinline__ void run_flush(hist_run *r, uint32_t *count, uint64_t *mass) {
    if (!r->n) return;
    atomicAdd(&count[r->digit], r->n);
    if (r->mass) atomicAdd((unsigned long long *)&mass[r->digit], (unsigned long long)r->mass);
    r->n = 0;
    r->mass = 0;
}

__device__ __forceinline__ void run_add(hist_run *r, uint32_t digit, uint64_t w, uint32_t *count, uint64_t *mass) {
    if (r->n && r->digit != digit) run_flush(r, count, mass);
    r->digit = digit;
    r->n++;
    r->mass += w;
}

__device__ __forceinline__ uint64_t warp_sum_u64(uint64_t v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* block-wide reductions of SAMPLE_THREADS threads (every thread gets the result) */
__device__ uint64_t block_max_u64(uint64_t v, sample_smem *sm) {
    v = di_dev_warp_max_u64(v);
    if ((threadIdx.x & 31) == 0) sm->warp_u64[threadIdx.x >> 5] = v;
    __syncthreads();
    uint64_t m = 0;
    for (int w = 0; w < SAMPLE_WARPS; w++) m = sm->warp_u64[w] > m ? sm->warp_u64[w] : m;
    __syncthreads();
    return m;
}

/* A row's ids among the ranks of its cluster (thresholds, draw): this thread's first and the stride.
 * CL false: one block a row (many rows), every field a constant -- its loads' offsets immediates and
 * no cluster barrier, so the kernel keeps the registers of two blocks a multiprocessor (the
 * runtime stride took the draw 64 -> 110 registers, one block a multiprocessor, 1.1 -> 1.7 ms at
 * B = 256: H100, ncu, session 48). */
typedef struct row_part {
    int rank, ranks;
    int64_t first, step;
} row_part;
template <bool CL>
__device__ __forceinline__ row_part this_row_part(int ranks) { /* blockIdx.x = row * ranks + rank */
    if (!CL) return {0, 1, (int64_t)threadIdx.x, SAMPLE_THREADS};
    const int rank = (int)(blockIdx.x % ranks);
    return {rank, ranks, (int64_t)rank * SAMPLE_THREADS + threadIdx.x, (int64_t)ranks * SAMPLE_THREADS};
}

/* Every rank's v (thread 0's) into sm->seg_sums [ranks], in rank order, in every rank. The caller
 * reads them, then calls di_cluster_sync before rank_u64 or seg_sums is written again. */
__device__ __forceinline__ void cluster_share_u64(uint64_t v, const row_part &part, sample_smem *sm) {
    if (threadIdx.x == 0) sm->rank_u64 = v;
    di_cluster_sync();
    if (threadIdx.x < part.ranks) sm->seg_sums[threadIdx.x] = *di_cluster_rank_smem(&sm->rank_u64, (int)threadIdx.x);
    __syncthreads();
}

/* The cluster's largest of the ranks' v (every thread of every rank gets it). */
__device__ __forceinline__ uint64_t cluster_max_u64(uint64_t v, const row_part &part, sample_smem *sm) {
    v = block_max_u64(v, sm);
    if (part.ranks == 1) return v;
    cluster_share_u64(v, part, sm);
    uint64_t m = 0;
    for (int c = 0; c < part.ranks; c++) m = sm->seg_sums[c] > m ? sm->seg_sums[c] : m;
    di_cluster_sync(); /* every rank has read rank_u64, and this one seg_sums */
    return m;
}

/* Where a rank adds its digit histogram: the cluster's sums when it is alone. */
__device__ __forceinline__ uint32_t *part_counts(const row_part &part, sample_smem *sm) {
    return part.ranks == 1 ? sm->count : sm->part_count;
}
__device__ __forceinline__ uint64_t *part_masses(const row_part &part, sample_smem *sm) {
    return part.ranks == 1 ? sm->mass : sm->part_mass;
}

/* count / mass [256] <- the ranks' part_count / part_mass added up (every rank the same sums: exact
 * integers). The partials may be written again once this returns. */
__device__ __forceinline__ void cluster_digit_sums(const row_part &part, sample_smem *sm) {
    if (part.ranks == 1) { /* they are the sums */
        __syncthreads();
        return;
    }
    di_cluster_sync(); /* every rank's partials complete */
    for (int d = threadIdx.x; d < 256; d += SAMPLE_THREADS) {
        uint32_t c = 0;
        uint64_t m = 0;
#pragma unroll
        for (int k = 0; k < ROW_MAX_CLUSTER; k++) /* the loads issued together */
            if (k < part.ranks) {
                c += di_cluster_rank_smem(sm->part_count, k)[d];
                m += di_cluster_rank_smem(sm->part_mass, k)[d];
            }
        sm->count[d] = c, sm->mass[d] = m;
    }
    di_cluster_sync(); /* every rank has read them; count / mass complete in this one */
}

/* The cluster's largest of the ranks' block maxima m (fmaxf in rank order; every thread of every
 * rank gets it). */
__device__ __forceinline__ float cluster_max_f(float m, const row_part &part, sample_smem *sm) {
    if (part.ranks == 1) return m;
    cluster_share_u64(__float_as_uint(m), part, sm);
    float r = __uint_as_float((uint32_t)sm->seg_sums[0]);
    for (int c = 1; c < part.ranks; c++) r = fmaxf(r, __uint_as_float((uint32_t)sm->seg_sums[c]));
    di_cluster_sync(); /* every rank has read rank_u64, and this one seg_sums */
    return r;
}

/* ---- 1. thresholds ---- */

/* The k-th largest sanitised logit of x [V] (1 <= k < V): four 8-bit digits of the float keys, from
 * the top; a digit's bucket is the one where the count from the top reaches the rank still wanted
 * (the cluster's counts: every rank takes the same). */
__device__ __forceinline__ float kth_largest(const float *x, int64_t V, int32_t k, const row_part &part, sample_smem *sm) {
    uint32_t prefix = 0;
    if (threadIdx.x == 0) sm->remaining = (uint32_t)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint32_t *const counts = part_counts(part, sm);
        uint64_t *const masses = part_masses(part, sm);
        for (int d = threadIdx.x; d < 256; d += SAMPLE_THREADS) counts[d] = 0, masses[d] = 0;
        __syncthreads();
        hist_run run = {0, 0, 0};
        di_dev_for_each_loaded<ROW_LOADS>(x, part.first, part.step, V, [&](int64_t, float v) {
            const uint32_t key = di_sample_float_key(di_sample_sanitize(v));
            if (sample_shr(key, shift + 8) == sample_shr(prefix, shift + 8))
                run_add(&run, (key >> shift) & 255u, 0, counts, masses);
        });
        run_flush(&run, counts, masses);
        cluster_digit_sums(part, sm);
        if (threadIdx.x == 0) {
            uint32_t b = 255, rem = sm->remaining;
            while (sm->count[b] < rem) rem -= sm->count[b--]; /* the counts from the top reach rem */
            sm->remaining = rem;
            sm->chosen = (int)b;
        }
        __syncthreads();
        prefix |= (uint32_t)sm->chosen << shift;
    }
    return di_sample_key_float(prefix);
}

/* a cluster of `ranks` blocks a row (sampled rows only): ws[row]'s max and kth; its sum and
 * histogram cleared. logits [n, V] */
template <bool CL>
__global__ void __launch_bounds__(SAMPLE_THREADS, CL ? 1 : 2)
sample_thresholds_kernel(const float *__restrict__ logits, int64_t V, const di_plain_sampling *__restrict__ params,
                         sample_row_ws *__restrict__ ws, int ranks) {
    DI_PDL_BEGIN();
    __shared__ sample_smem sm;
    const int64_t row = CL ? blockIdx.x / ranks : blockIdx.x;
    const row_part part = this_row_part<CL>(ranks);
    const di_plain_sampling p = params[row];
    if (!(p.temperature > 0.0f)) return; /* the whole cluster */
    sample_row_ws *r = &ws[row];
    for (int b = part.first; b < NB; b += part.step) r->count[b] = 0, r->mass[b] = 0;
    const float *x = logits + row * V;
    float m = -INFINITY;
    di_dev_for_each_loaded<ROW_LOADS>(x, part.first, part.step, V,
                                      [&](int64_t, float v) { m = fmaxf(m, di_sample_sanitize(v)); });
    m = cluster_max_f(di_dev_block_max(m, sm.warp_f, SAMPLE_WARPS), part, &sm);
    const float kth = m > -INFINITY && p.top_k > 0 && p.top_k < V ? kth_largest(x, V, p.top_k, part, &sm) : -INFINITY;
    if (threadIdx.x == 0 && part.rank == 0) r->total = 0, r->max = m, r->kth = kth;
}

/* ---- 2. weights ---- */

/* block (slice, row) (sampled rows with a finite max): W [n, V] of the slice's ids; the slice's
 * sum and (top_p) histogram added into ws[row]. */
__global__ void __launch_bounds__(WEIGHT_THREADS)
sample_weights_kernel(const float *__restrict__ logits, int64_t V, int64_t slice_len,
                      const di_plain_sampling *__restrict__ params, sample_row_ws *__restrict__ ws,
                      uint64_t *__restrict__ W) {
    DI_PDL_BEGIN();
    __shared__ uint32_t count[NB];
    __shared__ uint64_t mass[NB];
    __shared__ uint64_t warp_sum[WEIGHT_THREADS / 32];
    const int64_t row = blockIdx.y;
    const di_plain_sampling p = params[row];
    if (!(p.temperature > 0.0f)) return;
    sample_row_ws *r = &ws[row];
    const float max = r->max, kth = r->kth;
    if (max == -INFINITY) return; /* nothing to draw: the draw writes -1 */
    const bool top_p = p.top_p < 1.0f;
    const int bits = di_sample_weight_bits(V);
    const double inv_t = di_sample_inv_temperature(p.temperature), min_p = p.min_p;
    const double skip = di_sample_skip_below(bits, -INFINITY); /* no log(min_p) here: the no-weight shortcut */
    for (int b = threadIdx.x; b < NB && top_p; b += WEIGHT_THREADS) count[b] = 0, mass[b] = 0;
    __syncthreads();
    const float *x = logits + row * V;
    uint64_t *w_row = W + row * V;
    const int64_t lo = (int64_t)blockIdx.x * slice_len, hi = lo + slice_len < V ? lo + slice_len : V;
    uint64_t sum = 0;
    hist_run run = {0, 0, 0};
    di_dev_for_each_loaded(x, lo + threadIdx.x, WEIGHT_THREADS, hi, [&](int64_t i, float z) {
        const uint64_t w = di_sample_weight(di_sample_sanitize(z), max, kth, inv_t, min_p, skip, bits);
        w_row[i] = w;
        sum += w;
        if (top_p && w) run_add(&run, di_sample_weight_bucket(w), w, count, mass);
    });
    run_flush(&run, count, mass);
    sum = warp_sum_u64(sum);
    if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t t = 0;
        for (int w = 0; w < WEIGHT_THREADS / 32; w++) t += warp_sum[w];
        atomicAdd((unsigned long long *)&r->total, (unsigned long long)t);
    }
    for (int b = threadIdx.x; b < NB && top_p; b += WEIGHT_THREADS)
        if (count[b]) {
            atomicAdd(&r->count[b], count[b]);
            atomicAdd((unsigned long long *)&r->mass[b], (unsigned long long)mass[b]);
        }
}

/* ---- 3. draw ---- */

/* top_p's walk over a histogram (n buckets, the highest first, sm->mass_above the mass of
 * everything higher): the lowest non-empty bucket whose first key's mass before it, as a double,
 * is < target -- the last that holds kept keys. Thread 0; the choice and the mass above it go to
 * shared memory. */
__device__ void cut_walk(int n, double target, sample_smem *sm) {
    if (threadIdx.x != 0) return;
    uint64_t before = sm->mass_above, chosen_before = before;
    int chosen = -1;
    for (int b = n - 1; b >= 0; b--) {
        if (!sm->count[b]) continue;
        if (!(di_sample_u64_to_double(before) < target)) break;
        chosen = b;
        chosen_before = before;
        before += sm->mass[b];
    }
    sm->chosen = chosen; /* >= 0: the first non-empty bucket passes (mass_above passed before) */
    sm->mass_above = chosen_before;
}

/* Keys (sample_key): (W desc, id asc) as one unsigned order; W comes back out of one. No key is 0
 * (W >= 1). */

/* f(key) for every key of weight bucket `bucket`: from shared memory when gathered, else from the
 * row's weights. */
template <typename F>
__device__ __forceinline__ void for_each_bucket_key(const uint64_t *w_row, int64_t V, int id_bits, uint32_t bucket,
                                                    bool gathered, const row_part &part, const sample_smem *sm, F f) {
    if (gathered) {
        for (int64_t j = threadIdx.x; j < (int64_t)sm->n_keys; j += SAMPLE_THREADS) f(sm->keys[j]);
        return;
    }
    di_dev_for_each_loaded<DRAW_LOADS>(w_row, part.first, part.step, V, [&](int64_t j, uint64_t w) {
        if (w && di_sample_weight_bucket(w) == bucket) f(sample_key(w, j, id_bits));
    });
}

/* This rank's keys of the bucket under `prefix`'s digits above `shift` into sm->keys (they fit). */
__device__ __forceinline__ void gather_keys(const uint64_t *w_row, int64_t V, int id_bits, uint32_t bucket, const row_part &part,
                            uint64_t prefix, int shift, sample_smem *sm) {
    if (threadIdx.x == 0) sm->n_keys = 0;
    __syncthreads();
    for_each_bucket_key(w_row, V, id_bits, bucket, false, part, sm, [&](uint64_t key) {
        if (sample_shr(key, shift) == sample_shr(prefix, shift)) sm->keys[atomicAdd(&sm->n_keys, 1u)] = key;
    });
    __syncthreads();
}

/* The smallest kept key of weight bucket `bucket`: the bucket's smallest and largest keys first
 * (their common leading bits are every key's), then 8-bit digits from the one holding the highest
 * bit where they differ -- a flat row, whose keys differ in their id bits alone, takes three digits
 * instead of eight. Read from the row's weights, the keys under the digits taken so far are
 * gathered into shared memory as soon as they fit. Returns it; sm->mass_above becomes the mass of
 * the larger keys. */
__device__ __forceinline__ uint64_t cut_key(const uint64_t *w_row, int64_t V, int id_bits, uint32_t bucket, bool gathered,
                            double target, const row_part &part, sample_smem *sm) {
    uint64_t lo = ~(uint64_t)0, hi = 0;
    for_each_bucket_key(w_row, V, id_bits, bucket, gathered, part, sm, [&](uint64_t key) {
        lo = key < lo ? key : lo;
        hi = key > hi ? key : hi;
    });
    lo = ~cluster_max_u64(~lo, part, sm);
    hi = cluster_max_u64(hi, part, sm);
    if (lo == hi) return lo; /* one key: kept (the bucket's first key is), mass_above as it is */
    const int first = (63 - __clzll((long long)(lo ^ hi))) / 8 * 8;
    uint64_t prefix = first + 8 >= 64 ? 0 : lo & ~((((uint64_t)1) << (first + 8)) - 1);
    for (int shift = first; shift >= 0; shift -= 8) {
        uint32_t *const counts = part_counts(part, sm);
        uint64_t *const masses = part_masses(part, sm);
        for (int d = threadIdx.x; d < 256; d += SAMPLE_THREADS) counts[d] = 0, masses[d] = 0;
        __syncthreads();
        hist_run run = {0, 0, 0};
        for_each_bucket_key(w_row, V, id_bits, bucket, gathered, part, sm, [&](uint64_t key) {
            if (sample_shr(key, shift + 8) == sample_shr(prefix, shift + 8))
                run_add(&run, (uint32_t)(key >> shift) & 255u, key >> id_bits, counts, masses);
        });
        run_flush(&run, counts, masses);
        cluster_digit_sums(part, sm);
        cut_walk(256, target, sm);
        __syncthreads();
        prefix |= (uint64_t)sm->chosen << shift;
        const bool fits = !gathered && shift > 0 && sm->count[sm->chosen] <= SAMPLE_CAP;
        __syncthreads(); /* every thread has read count: alone, a rank's next digit rewrites it */
        if (fits) {
            /* the keys under the prefix fit: gather them, and read shared memory from here on */
            gather_keys(w_row, V, id_bits, bucket, part, prefix, shift, sm);
            gathered = true;
        }
    }
    return prefix;
}

/* a cluster of `ranks` blocks a row (sampled rows): tokens[row] = the draw. W [n, V] */
template <bool CL>
__global__ void __launch_bounds__(SAMPLE_THREADS, CL ? 1 : 2)
sample_draw_kernel(const uint64_t *__restrict__ W, int64_t V, const di_plain_sampling *__restrict__ params,
                   sample_row_ws *__restrict__ ws, int32_t *__restrict__ tokens, int ranks) {
    DI_PDL_BEGIN();
    __shared__ sample_smem sm;
    const int64_t row = CL ? blockIdx.x / ranks : blockIdx.x;
    const row_part part = this_row_part<CL>(ranks);
    const di_plain_sampling p = params[row];
    if (!(p.temperature > 0.0f)) return; /* the whole cluster: every rank reads the same row */
    const sample_row_ws *r = &ws[row];
    if (r->max == -INFINITY) { /* nothing can be drawn */
        if (threadIdx.x == 0 && part.rank == 0) tokens[row] = -1;
        return;
    }
    const uint64_t *w_row = W + row * V;
    const int id_bits = di_sample_id_bits(V);
    const uint64_t total = r->total; /* >= 2^bits: the max's weight */
    uint64_t cut = 0, kept = total;  /* no top_p: every weighted token */
    if (p.top_p < 1.0f) {
        const double target = (double)p.top_p * di_sample_u64_to_double(total);
        for (int b = threadIdx.x; b < NB; b += SAMPLE_THREADS) sm.count[b] = r->count[b], sm.mass[b] = r->mass[b];
        if (threadIdx.x == 0) sm.mass_above = 0;
        __syncthreads();
        cut_walk(NB, target, &sm); /* every rank alike */
        __syncthreads();
        const uint32_t bucket = (uint32_t)sm.chosen;
        const bool gathered = sm.count[bucket] <= SAMPLE_CAP;
        __syncthreads(); /* count is reused */
        if (gathered) gather_keys(w_row, V, id_bits, bucket, part, 0, 64, &sm); /* the whole bucket */
        cut = cut_key(w_row, V, id_bits, bucket, gathered, target, part, &sm);
        kept = sm.mass_above + (cut >> id_bits);
    }
    if (threadIdx.x == 0 && part.rank == 0) ws[row].cut = cut, ws[row].kept = kept; /* for processed logprobs */

    /* the draw: the first kept token, in id order, whose cumulative weight exceeds U. A warp sums
     * a segment of ids (the ranks' warps in rank order); the segment holding U is cut into a run of
     * ids a thread of its rank, whose sums are scanned; the thread whose run holds U walks it. */
    const uint64_t U = di_sample_mul_shift53(di_philox_bits53(p.seed, p.position, 0), kept);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, segs = part.ranks * SAMPLE_WARPS;
    const int64_t seg = ((V + segs - 1) / segs + 31) / 32 * 32; /* ids a warp */
    uint64_t mine = 0;
    const int64_t lo = (int64_t)(part.rank * SAMPLE_WARPS + warp) * seg, hi = lo + seg < V ? lo + seg : V;
    di_dev_for_each_loaded<DRAW_LOADS>(w_row, lo + lane, 32, hi, [&](int64_t i, uint64_t w) {
        if (w && sample_key(w, i, id_bits) >= cut) mine += w;
    });
    mine = warp_sum_u64(mine);
    if (lane == 0) sm.warp_u64[warp] = mine;
    const uint64_t *seg_sums = sm.warp_u64; /* [segs] */
    if (part.ranks == 1) {
        __syncthreads();
    } else {
        di_cluster_sync();
        for (int w = threadIdx.x; w < segs; w += SAMPLE_THREADS)
            sm.seg_sums[w] = di_cluster_rank_smem(sm.warp_u64, w / SAMPLE_WARPS)[w % SAMPLE_WARPS];
        di_cluster_sync(); /* every rank has its copy of the sums: the walker's rank goes on alone */
        seg_sums = sm.seg_sums;
    }
    if (threadIdx.x == 0) { /* the segment holding U (the segments add up to kept > U), every rank alike */
        uint64_t base = 0;
        int w = 0;
        while (w < segs - 1 && base + seg_sums[w] <= U) base += seg_sums[w++];
        sm.walker = w;
        sm.base = base;
    }
    __syncthreads();
    if (sm.walker / SAMPLE_WARPS != part.rank) return;
    const int64_t s_lo = sm.walker * seg, s_hi = s_lo + seg < V ? s_lo + seg : V;
    const int64_t per = (seg + SAMPLE_THREADS - 1) / SAMPLE_THREADS; /* ids a thread: 16 at 129,280 and one rank */
    const int64_t t_lo = s_lo + threadIdx.x * per, t_hi = t_lo + per < s_hi ? t_lo + per : s_hi;
    uint64_t own = 0;
    di_dev_for_each_loaded<DRAW_LOADS>(w_row, t_lo, 1, t_hi, [&](int64_t i, uint64_t w) {
        if (w && sample_key(w, i, id_bits) >= cut) own += w;
    });
    /* exclusive prefix of the threads' sums, in thread order */
    uint64_t incl = own;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint64_t t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
    }
    if (lane == 31) sm.warp_u64[warp] = incl;
    __syncthreads();
    uint64_t acc = sm.base + incl - own;
    for (int w = 0; w < warp; w++) acc += sm.warp_u64[w];
    if (!(acc <= U && U < acc + own)) return; /* exactly one thread goes on: the runs tile the segment */
    for (int64_t i = t_lo; i < t_hi; i++) {
        const uint64_t w = w_row[i];
        if (!w || sample_key(w, i, id_bits) < cut) continue;
        acc += w;
        if (acc > U) {
            tokens[row] = (int32_t)i;
            return;
        }
    }
}

/* Blocks a row of the thresholds and the draw: a cluster of up to ROW_MAX_CLUSTER while n rows of
 * them fit the card once, so that a few rows do not leave all but a few multiprocessors idle; one
 * past that (many rows hide each other's latency). */
static int row_cluster(int64_t n) {
    int c = ROW_MAX_CLUSTER;
    while (c > 1 && n * c > (int64_t)di_cuda_sm_count()) c /= 2;
    return c;
}

static int64_t weight_slices(int64_t n, int64_t V) {
    int64_t s = (WEIGHT_GRID_TARGET + n - 1) / n;
    const int64_t most = (V + WEIGHT_MIN_SLICE - 1) / WEIGHT_MIN_SLICE;
    if (s > most) s = most;
    return s < 1 ? 1 : s;
}

extern "C" size_t di_cuda_sample_ws_bytes(int64_t n, int64_t V) {
    const size_t rows = (size_t)(n > 0 ? n : 1);
    return rows * sizeof(sample_row_ws) + rows * (size_t)(V > 0 ? V : 1) * sizeof(uint64_t);
}

extern "C" void di_cuda_sample_tokens(const float *logits, int64_t n, int64_t V, const di_plain_sampling *params,
                                      void *ws, int32_t *tokens, cudaStream_t s) {
    if (n <= 0 || V <= 0) return;
    if (V > ((int64_t)1 << 31)) { /* the keys hold a 31-bit id: no vocabulary comes near */
        fprintf(stderr, "di_cuda_sample_tokens: a vocabulary of %lld exceeds the key\n", (long long)V);
        abort();
    }
    sample_row_ws *rows = (sample_row_ws *)ws;       /* [n] */
    uint64_t *W = (uint64_t *)(rows + n);             /* [n, V] */
    const int64_t slices = weight_slices(n, V), slice_len = (V + slices - 1) / slices;
    for (int64_t r0 = 0; r0 < n; r0 += DI_CUDA_MAX_GRID_Y) { /* rows on the weights' grid y: 65,535 a launch */
        const int64_t m = n - r0 < DI_CUDA_MAX_GRID_Y ? n - r0 : DI_CUDA_MAX_GRID_Y;
        const float *lg = logits + r0 * V;
        const int ranks = row_cluster(m);
        if (ranks > 1)
            di_cluster_launch(sample_thresholds_kernel<true>, dim3((unsigned)(m * ranks)), SAMPLE_THREADS, 0, ranks, s,
                              lg, V, params + r0, rows + r0, ranks);
        else
            sample_thresholds_kernel<false><<<(unsigned)m, SAMPLE_THREADS, 0, s>>>(lg, V, params + r0, rows + r0, 1);
        DI_CUDA_LAUNCHED();
        sample_weights_kernel<<<dim3((unsigned)slices, (unsigned)m), WEIGHT_THREADS, 0, s>>>(
            lg, V, slice_len, params + r0, rows + r0, W + r0 * V);
        DI_CUDA_LAUNCHED();
        if (ranks > 1)
            di_cluster_launch(sample_draw_kernel<true>, dim3((unsigned)(m * ranks)), SAMPLE_THREADS, 0, ranks, s,
                              (const uint64_t *)(W + r0 * V), V, params + r0, rows + r0, tokens + r0, ranks);
        else
            sample_draw_kernel<false><<<(unsigned)m, SAMPLE_THREADS, 0, s>>>((const uint64_t *)(W + r0 * V), V,
                                                                            params + r0, rows + r0, tokens + r0, 1);
        DI_CUDA_LAUNCHED();
    }
}
