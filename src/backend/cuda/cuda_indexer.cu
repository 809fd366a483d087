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
 * Longer rows go in stages when the caller gives scratch (di_cuda_topk_scratch_bytes): chunks of
 * 4,096 scores a block on the register kernel, each chunk's top k to a candidate list of 64-bit
 * keys, then the top k of the lists (chunked again while longer than a chunk) -- a 32K row is 8
 * blocks at once and one over 4,096 candidates. Exact: a key of the row's top k is in its chunk's
 * top k, and the lists keep entry order (ascending positions). Without scratch they take the
 * global passes (topk_kernel), whose time is one L2 round trip a key after another (a 32K row ~210
 * us): KPT 8 ran 17.5 us against 16.5 -- with the loads gone, the first passes' atomics (similar
 * scores share their top digits: every key on one or two bins) set the time -- though KPT 32 on a
 * 32K row ran 48 us against 210. Aggregating a warp's equal bins (ballot rounds or
 * __match_any_sync) made the global passes slower (380 / 284 us against 210). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define TOPK_THREADS 1024
#define TOPK_RADIX 8 /* key bits decided per pass */
#define TOPK_BINS (1 << TOPK_RADIX)
#define TOPK_MAX_KPT 4 /* scores a thread in registers */
#define TOPK_STAGE_MIN_P 4096 /* longer rows go in stages (with scratch) */

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

/* One round of the ordered compaction: returns the output slot of this thread's entry (used only
 * when sel) -- its rank among the entries selected in earlier rounds (base_s, advanced here) and
 * before it in this one. Every thread calls, rounds in entry order. */
static __device__ int topk_compact_slot(bool sel, int *red, int *base_s, int lane, int warp) {
    const unsigned ballot = __ballot_sync(0xffffffffu, sel);
    __syncthreads();
    if (lane == 0) red[warp] = __popc(ballot);
    __syncthreads();
    int before = *base_s;
    for (int i = 0; i < warp; i++) before += red[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        int tot = 0;
        for (int i = 0; i < TOPK_THREADS / 32; i++) tot += red[i];
        *base_s += tot;
    }
    __syncthreads();
    return before + __popc(ballot & ((1u << lane) - 1u));
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
    DI_PDL_BEGIN();
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
        const bool sel = key != 0ull && key >= thr;
        const int slot = topk_compact_slot(sel, sh.red, &sh.base, lane, warp);
        if (sel) out[slot] = (int32_t)t;
    }
    for (int j = kk + threadIdx.x; j < k; j += TOPK_THREADS) out[j] = -1;
}

/* One chunk of a row (or the whole row) held in registers, KPT keys a thread: key j of thread i is
 * the chunk's entry j * TOPK_THREADS + i. The row is fp32 scores (IN_KEYS false: an entry's
 * position is its index in the row) or a candidate list of 64-bit keys a previous stage wrote
 * (IN_KEYS: positions inside the keys, 0 for none). Grid (rows, chunks) -- rows on x, whose limit
 * is 2^31 - 1, not y's 65,535: block (r, c) takes entries [c * chunk, (c + 1) * chunk) of row r (len
 * entries a row). OUT_KEYS: the chunk's top k as keys, in entry order, to out + (r * chunks + c) *
 * k, 0-padded (the next stage's candidates); else its positions to out + r * k, -1 padded (one
 * chunk a row). */
template <int KPT, bool IN_KEYS, bool OUT_KEYS>
__global__ void __launch_bounds__(TOPK_THREADS)
topk_reg_kernel(const void *__restrict__ in_all, int64_t len, int chunk, int k, void *__restrict__ out_all) {
    DI_PDL_BEGIN();
    __shared__ topk_shared sh;
    const int64_t r = blockIdx.x, e0 = (int64_t)blockIdx.y * chunk; /* the block's first entry */
    const int64_t n = len - e0 < chunk ? len - e0 : chunk;           /* entries of this chunk */
    unsigned long long key[KPT]; /* [KPT] sort keys, 0: not selectable or past the chunk */
    int nvalid = 0;
#pragma unroll
    for (int j = 0; j < KPT; j++) {
        const int64_t i = (int64_t)j * TOPK_THREADS + threadIdx.x, e = e0 + i;
        if (IN_KEYS) key[j] = i < n ? static_cast<const unsigned long long *>(in_all)[r * len + e] : 0ull;
        else key[j] = i < n ? topk_key(static_cast<const float *>(in_all) + r * len, e) : 0ull;
        nvalid += key[j] != 0ull;
    }
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
        for (int j = 0; j < KPT; j++) topk_count(sh.hist, key[j], thr, hi, shift);
        if (topk_pass_close(&sh, &thr, &need, shift, lane, warp)) break;
    }
    if (threadIdx.x == 0) sh.base = 0;
    __syncthreads();
    unsigned long long *const out_keys = static_cast<unsigned long long *>(out_all) + (r * gridDim.y + blockIdx.y) * k;
    int32_t *const out_pos = static_cast<int32_t *>(out_all) + r * k;
#pragma unroll
    for (int j = 0; j < KPT; j++) {
        if (kk == 0 || (int64_t)j * TOPK_THREADS >= n) break; /* uniform */
        const bool sel = key[j] != 0ull && key[j] >= thr;
        const int slot = topk_compact_slot(sel, sh.red, &sh.base, lane, warp);
        if (!sel) continue;
        if (OUT_KEYS) out_keys[slot] = key[j];
        else out_pos[slot] = (int32_t)(0xffffffffu - (uint32_t)key[j]); /* the key's position */
    }
    for (int j = kk + threadIdx.x; j < k; j += TOPK_THREADS) {
        if (OUT_KEYS) out_keys[j] = 0ull;
        else out_pos[j] = -1;
    }
}

/* A row is selected in stages when it is longer than one chunk and a chunk's top k at most halves
 * it: a key of the row's top k is among its chunk's top k, so the row's top k is the top k of
 * the chunks' lists (in entry order, so ascending positions), themselves chunked again while
 * longer than a chunk. A 32K row: 8 blocks of 4,096 scores, then one over 8 x 512 candidates. */
#define TOPK_CHUNK (TOPK_THREADS * TOPK_MAX_KPT)
#define TOPK_SCRATCH_MAX ((size_t)64 << 20) /* bytes of candidate lists: rows in groups beyond it */

static int64_t topk_chunks(int64_t len) { return (len + TOPK_CHUNK - 1) / TOPK_CHUNK; }
static bool g_topk_always_stage; /* tests: stage wherever it is possible */
extern "C" void di_cuda_topk_always_stage(bool on) { g_topk_always_stage = on; }

/* Whether R rows of P scores go in stages: possible past one chunk with 2 k <= a chunk; worth it
 * while the stages cost less than the global passes, one block a row. A cost model fitted to ncu
 * times in the decode step on the H200 (session 28; docs/PERFORMANCE.md): a stage of n blocks
 * ~8 us + 5.9 us x n / SMs (128-1,152 blocks: 14-59 us); the global passes ~15 us + 1.4 us a
 * 1,024 scores a wave of rows (a 32K row 60 us, 131K ~200), slower as R x P grows past the L2
 * (128 rows of 131K: 381 us in deepinfer-cuda-bench --topk). So B = 64 at 32K stages (~58 us
 * against 59), B = 128 does not (89 against 60: 9 chunks x 128 rows), B <= 8 does from 8K scores
 * (19 against 26 us at 8K, 35 against 200 at 131K). */
static bool topk_staged(int64_t R, int64_t P, int k) {
    if (P <= TOPK_STAGE_MIN_P || 2 * (int64_t)k > TOPK_CHUNK || topk_chunks(P) > 65535 /* grid.y */) return false;
    if (g_topk_always_stage) return true;
    const double sms = (double)di_cuda_sm_count();
    double staged_us = 0.0;
    int64_t len = P;
    for (; len > TOPK_CHUNK; len = topk_chunks(len) * k) staged_us += 8.0 + 5.9 * (double)(R * topk_chunks(len)) / sms;
    staged_us += 8.0 + 5.9 * (double)R / sms; /* the last stage: a block a row */
    const double global_us = (15.0 + 1.4 * (double)P / 1024.0) * ceil((double)R / sms) *
                             (1.0 + (double)R * (double)P / (double)(1 << 24));
    return staged_us < global_us;
}

/* bytes of one row's candidate lists: the first stage's, and the second's (the later stages reuse
 * the two in turn: each list at most half the one before) */
static size_t topk_row_scratch(int64_t P, int k) {
    const int64_t first = topk_chunks(P) * k;
    return sizeof(unsigned long long) * (size_t)(first + topk_chunks(first) * k);
}

/* rows whose candidate lists fit TOPK_SCRATCH_MAX together (at least one) */
static int64_t topk_group_rows(int64_t R, size_t row) {
    const int64_t fit = (int64_t)(TOPK_SCRATCH_MAX / row);
    return R < fit ? R : fit > 0 ? fit : 1;
}

extern "C" size_t di_cuda_topk_scratch_bytes(int64_t R, int64_t P, int k) {
    if (R <= 0 || k <= 0 || !topk_staged(R, P, k)) return 0;
    const size_t row = topk_row_scratch(P, k);
    return row * (size_t)topk_group_rows(R, row);
}

/* R rows of len entries (fp32 scores, or IN_KEYS 64-bit keys) on the register kernel, one block a
 * row; false (nothing launched) past TOPK_CHUNK entries */
template <bool IN_KEYS>
static bool topk_reg_launch(const void *in, int64_t R, int64_t len, int k, int32_t *out, cudaStream_t s) {
    const dim3 g((unsigned)R, 1);
    const int64_t per = (len + TOPK_THREADS - 1) / TOPK_THREADS; /* entries a thread */
    const int c = (int)(len < TOPK_CHUNK ? len : TOPK_CHUNK);
    if (per <= 1) topk_reg_kernel<1, IN_KEYS, false><<<g, TOPK_THREADS, 0, s>>>(in, len, c, k, out);
    else if (per <= 2) topk_reg_kernel<2, IN_KEYS, false><<<g, TOPK_THREADS, 0, s>>>(in, len, c, k, out);
    else if (per <= TOPK_MAX_KPT)
        topk_reg_kernel<TOPK_MAX_KPT, IN_KEYS, false><<<g, TOPK_THREADS, 0, s>>>(in, len, c, k, out);
    else return false;
    return true;
}

/* rows of scores, one block a row: the register kernels up to TOPK_CHUNK scores, the global passes
 * beyond */
static void topk_one_block(const float *score, int64_t R, int64_t P, int k, int32_t *out, cudaStream_t s) {
    if (!topk_reg_launch<false>(score, R, P, k, out, s))
        topk_kernel<<<(unsigned)R, TOPK_THREADS, 0, s>>>(score, P, k, out);
    DI_CUDA_LAUNCHED();
}

extern "C" void di_cuda_topk(const float *score, int64_t R, int64_t P, int k, int32_t *out, void *scratch,
                             cudaStream_t s) {
    if (R <= 0 || k <= 0) return;
    if (P >= 0xffffffffll) {
        fprintf(stderr, "di_cuda_topk: %lld positions exceed the 32-bit key\n", (long long)P);
        abort();
    }
    if (!scratch || !topk_staged(R, P, k)) {
        topk_one_block(score, R, P, k, out, s);
        return;
    }
    const int64_t group = topk_group_rows(R, topk_row_scratch(P, k)); /* rows a pass */
    unsigned long long *const list0 = static_cast<unsigned long long *>(scratch); /* [group][chunks(P) * k] */
    unsigned long long *const list1 = list0 + group * topk_chunks(P) * k;        /* [group][its chunks * k] */
    for (int64_t r0 = 0; r0 < R; r0 += group) {
        const int64_t rows = R - r0 < group ? R - r0 : group;
        int64_t len = topk_chunks(P) * k; /* the candidates a row after the first stage */
        topk_reg_kernel<TOPK_MAX_KPT, false, true><<<dim3((unsigned)rows, (unsigned)topk_chunks(P)), TOPK_THREADS, 0,
                                                      s>>>(score + r0 * P, P, TOPK_CHUNK, k, list0);
        DI_CUDA_LAUNCHED();
        unsigned long long *cur = list0, *next = list1;
        for (; len > TOPK_CHUNK; len = topk_chunks(len) * k) {
            topk_reg_kernel<TOPK_MAX_KPT, true, true><<<dim3((unsigned)rows, (unsigned)topk_chunks(len)),
                                                        TOPK_THREADS, 0, s>>>(cur, len, TOPK_CHUNK, k, next);
            DI_CUDA_LAUNCHED();
            unsigned long long *const t = cur;
            cur = next, next = t;
        }
        topk_reg_launch<true>(cur, rows, len, k, out + r0 * k, s); /* len <= TOPK_CHUNK: launches */
        DI_CUDA_LAUNCHED();
    }
}
