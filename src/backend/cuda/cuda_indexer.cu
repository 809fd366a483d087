/* The indexer's top-k selection on the GPU (model-spec §2.4 (6)), the twin of topk_select() in
 * src/forward/indexer.c. (The scores are in cuda_index_score_mma.cu.)
 *
 * One thread block per row. The order "higher score first, lower position on exact ties"
 * is a total order on 64-bit keys (order-preserving score bits << 32 | ~position; -0 counts as
 * +0, as the CPU's comparisons do), so the selection is "every key >= the k-th largest key",
 * found by a radix select (up to 8 passes of 8 bits, a shared-memory histogram each; a 64-step
 * bitwise search with a block-wide count per bit took 72 us a row at decode), then written in
 * ascending position order by a block-wide ordered compaction, and padded with -1. -inf (and NaN)
 * scores are never selected, as on the CPU. Exact.
 * The select stops at the pass whose chosen bin holds exactly the keys still needed: every key of
 * that bin is taken whatever its lower bits, so the threshold's lower bits stay 0 (without ties
 * that is within the score's 32 bits, not after all 64).
 * Rows of up to TOPK_MAX_KPT * 1,024 scores are read once into registers, KPT a thread, all loads
 * in flight together (topk_reg_kernel), and each pass reads registers: ncu on the H200 (session 27,
 * the bench's rows at 4K) 4.1 us for KPT 1 and 12.9 for KPT 4 against 16.5 for the global passes.
 * Longer rows keep the global passes (topk_kernel), whose time is one L2 round trip a key after
 * another (a 32K row ~210 us): KPT 8 ran 17.5 us against 16.5 -- with the loads gone, the first
 * passes' atomics (similar scores share their top digits: every key on one or two bins) set the
 * time -- though KPT 32 on a 32K row ran 48 us against 210. Aggregating a warp's equal bins
 * (ballot rounds or __match_any_sync) made the global passes slower (380 / 284 us against 210). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define TOPK_THREADS 1024
#define TOPK_RADIX 8 /* key bits decided per pass */
#define TOPK_BINS (1 << TOPK_RADIX)
#define TOPK_MAX_KPT 4 /* scores a thread in registers */

/* The order-preserving bits of a score; 0 for scores that can never be selected (-inf, NaN). */
static __device__ __forceinline__ uint32_t topk_bits(float v) {
    if (!(v > -INFINITY)) return 0u;
    if (v == 0.0f) v = 0.0f; /* -0 ties with +0 */
    const uint32_t u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* never 0 for a finite or +inf score */
}

/* Sort key: larger is better; 0 for entries that can never be selected. */
static __device__ __forceinline__ unsigned long long topk_key_of(uint32_t bits, int64_t t) {
    return bits ? ((unsigned long long)bits << 32) | (0xffffffffu - (uint32_t)t) : 0ull;
}

static __device__ __forceinline__ unsigned long long topk_key(const float *score, int64_t t) {
    return topk_key_of(topk_bits(score[t]), t);
}

/* one key into the pass's histogram: keys that match the digits chosen so far (above `shift`) */
static __device__ __forceinline__ void topk_count(int *hist, unsigned long long key, unsigned long long thr,
                                                  unsigned long long hi, int shift) {
    if (key != 0ull && (key & hi) == (thr & hi)) atomicAdd(&hist[(int)(key >> shift) & (TOPK_BINS - 1)], 1);
}

static __device__ int block_sum_int(int v, int *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    int total = 0;
    for (int i = 0; i < TOPK_THREADS / 32; i++) total += red[i];
    return total;
}

/* Warp 0, after a pass: the digit (at `shift`) where the count from the top reaches `need`. Lane l
 * holds bins from the top, TOPK_BINS / 32 each, counts summed from the top; the lane whose bins
 * hold the digit writes the threshold, the keys still needed within its bin, and whether that bin
 * is taken whole (the select can stop). */
static __device__ void topk_choose_digit(const int *hist, unsigned long long thr, int need, int shift, int lane,
                                         unsigned long long *thr_s, int *need_s, bool *done_s) {
    constexpr int PER = TOPK_BINS / 32;
    int c[PER], sum = 0;
#pragma unroll
    for (int q = 0; q < PER; q++) sum += c[q] = hist[TOPK_BINS - 1 - PER * lane - q];
    int incl = sum;
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_sync(0xffffffffu, incl, lane >= o ? lane - o : lane);
        if (lane >= o) incl += v;
    }
    int cum = incl - sum;
    if (cum < need && need <= incl) /* one lane: the digit is in its bins */
        for (int q = 0; q < PER; q++) {
            if (cum + c[q] >= need) {
                *thr_s = thr | (unsigned long long)(TOPK_BINS - 1 - PER * lane - q) << shift;
                *need_s = need - cum;
                *done_s = c[q] == need - cum; /* the whole bin is taken: lower bits need not be decided */
                break;
            }
            cum += c[q];
        }
}

/* One chunk of the ordered compaction: position t, if selected, goes to out at its rank among the
 * selected positions so far (base_s, advanced here). Every thread calls, chunks in position order. */
static __device__ void topk_compact_step(bool sel, int64_t t, int32_t *out, int *red, int *base_s, int lane,
                                         int warp) {
    const unsigned ballot = __ballot_sync(0xffffffffu, sel);
    __syncthreads();
    if (lane == 0) red[warp] = __popc(ballot);
    __syncthreads();
    int before = *base_s;
    for (int i = 0; i < warp; i++) before += red[i];
    if (sel) out[before + __popc(ballot & ((1u << lane) - 1u))] = (int32_t)t;
    __syncthreads();
    if (threadIdx.x == 0) {
        int tot = 0;
        for (int i = 0; i < TOPK_THREADS / 32; i++) tot += red[i];
        *base_s += tot;
    }
    __syncthreads();
}

/* A block's shared state through a select: the warp sums, the pass's histogram, the digits chosen
 * so far (thr), the keys still needed within them, the compaction's base, whether it is done. */
struct topk_shared {
    int red[TOPK_THREADS / 32];
    int hist[TOPK_BINS];
    unsigned long long thr;
    int need, base;
    bool done;
};

/* A radix pass opens with the histogram cleared and closes with warp 0's digit; every thread
 * calls both and then reads the new threshold and need. Returns whether the select is done
 * (uniform: read after the barrier, written again only by a later pass). */
static __device__ void topk_pass_open(topk_shared *sh) {
    for (int i = threadIdx.x; i < TOPK_BINS; i += TOPK_THREADS) sh->hist[i] = 0;
    __syncthreads();
}
static __device__ bool topk_pass_close(topk_shared *sh, unsigned long long *thr, int *need, int shift, int lane,
                                       int warp) {
    __syncthreads();
    if (warp == 0) topk_choose_digit(sh->hist, *thr, *need, shift, lane, &sh->thr, &sh->need, &sh->done);
    __syncthreads();
    *thr = sh->thr;
    *need = sh->need;
    return sh->done;
}

/* Rows of any length: every pass reads the scores from global memory. */
__global__ void __launch_bounds__(TOPK_THREADS)
topk_kernel(const float *__restrict__ score_all, int64_t P, int k, int32_t *__restrict__ out_all) {
    __shared__ topk_shared sh;
    const float *score = score_all + (int64_t)blockIdx.x * P;
    int32_t *out = out_all + (int64_t)blockIdx.x * k;
    int nvalid = 0;
    for (int64_t t = threadIdx.x; t < P; t += TOPK_THREADS) nvalid += topk_key(score, t) != 0ull;
    nvalid = block_sum_int(nvalid, sh.red);
    const int kk = nvalid < k ? nvalid : k;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* the kk-th largest key, a digit of TOPK_RADIX bits a pass from the top: among the keys that
     * match the digits chosen so far, `need` of them are still to be taken */
    unsigned long long thr = 0ull;
    int need = kk;
    if (threadIdx.x == 0) sh.done = false;
    for (int shift = 64 - TOPK_RADIX; kk > 0 && shift >= 0; shift -= TOPK_RADIX) {
        topk_pass_open(&sh);
        const unsigned long long hi = shift + TOPK_RADIX >= 64 ? 0ull : ~0ull << (shift + TOPK_RADIX);
        for (int64_t t = threadIdx.x; t < P; t += TOPK_THREADS) topk_count(sh.hist, topk_key(score, t), thr, hi, shift);
        if (topk_pass_close(&sh, &thr, &need, shift, lane, warp)) break;
    }
    /* ordered compaction of the keys >= thr (exactly kk of them: keys are distinct) */
    if (threadIdx.x == 0) sh.base = 0;
    __syncthreads();
    for (int64_t c0 = 0; kk > 0 && c0 < P; c0 += TOPK_THREADS) {
        const int64_t t = c0 + threadIdx.x;
        const unsigned long long key = t < P ? topk_key(score, t) : 0ull;
        topk_compact_step(key != 0ull && key >= thr, t, out, sh.red, &sh.base, lane, warp);
    }
    for (int j = kk + threadIdx.x; j < k; j += TOPK_THREADS) out[j] = -1;
}

/* Rows of P <= KPT * TOPK_THREADS: thread i holds the bits of positions j * TOPK_THREADS + i. */
template <int KPT>
__global__ void __launch_bounds__(TOPK_THREADS)
topk_reg_kernel(const float *__restrict__ score_all, int64_t P, int k, int32_t *__restrict__ out_all) {
    __shared__ topk_shared sh;
    const float *score = score_all + (int64_t)blockIdx.x * P;
    int32_t *out = out_all + (int64_t)blockIdx.x * k;
    uint32_t bits[KPT]; /* [KPT] order-preserving score bits, 0: not selectable or past the row */
    int nvalid = 0;
#pragma unroll
    for (int j = 0; j < KPT; j++) {
        const int64_t t = (int64_t)j * TOPK_THREADS + threadIdx.x;
        bits[j] = t < P ? topk_bits(score[t]) : 0u;
    }
#pragma unroll
    for (int j = 0; j < KPT; j++) nvalid += bits[j] != 0u;
    nvalid = block_sum_int(nvalid, sh.red);
    const int kk = nvalid < k ? nvalid : k;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long thr = 0ull;
    int need = kk;
    if (threadIdx.x == 0) sh.done = false;
    for (int shift = 64 - TOPK_RADIX; kk > 0 && shift >= 0; shift -= TOPK_RADIX) {
        topk_pass_open(&sh);
        const unsigned long long hi = shift + TOPK_RADIX >= 64 ? 0ull : ~0ull << (shift + TOPK_RADIX);
#pragma unroll
        for (int j = 0; j < KPT; j++)
            topk_count(sh.hist, topk_key_of(bits[j], (int64_t)j * TOPK_THREADS + threadIdx.x), thr, hi, shift);
        if (topk_pass_close(&sh, &thr, &need, shift, lane, warp)) break;
    }
    if (threadIdx.x == 0) sh.base = 0;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < KPT; j++) {
        if (kk == 0 || (int64_t)j * TOPK_THREADS >= P) break; /* uniform */
        const int64_t t = (int64_t)j * TOPK_THREADS + threadIdx.x;
        const unsigned long long key = topk_key_of(bits[j], t);
        topk_compact_step(key != 0ull && key >= thr, t, out, sh.red, &sh.base, lane, warp);
    }
    for (int j = kk + threadIdx.x; j < k; j += TOPK_THREADS) out[j] = -1;
}

extern "C" void di_cuda_topk(const float *score, int64_t R, int64_t P, int k, int32_t *out, cudaStream_t s) {
    if (R <= 0 || k <= 0) return;
    if (P >= 0xffffffffll) {
        fprintf(stderr, "di_cuda_topk: %lld positions exceed the 32-bit key\n", (long long)P);
        abort();
    }
    const unsigned g = (unsigned)R;
    const int64_t per = (P + TOPK_THREADS - 1) / TOPK_THREADS; /* scores a thread */
    if (per <= 1) topk_reg_kernel<1><<<g, TOPK_THREADS, 0, s>>>(score, P, k, out);
    else if (per <= 2) topk_reg_kernel<2><<<g, TOPK_THREADS, 0, s>>>(score, P, k, out);
    else if (per <= TOPK_MAX_KPT) topk_reg_kernel<TOPK_MAX_KPT><<<g, TOPK_THREADS, 0, s>>>(score, P, k, out);
    else topk_kernel<<<g, TOPK_THREADS, 0, s>>>(score, P, k, out);
    DI_CUDA_LAUNCHED();
}
