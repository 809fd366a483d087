/* The indexer's top-k selection on the GPU (model-spec §2.4 (6)), the twin of topk_select() in
 * src/forward/indexer.c. (The scores are in cuda_index_score_mma.cu.)
 *
 * One thread block per row. The order "higher score first, lower position on exact ties"
 * is a total order on 64-bit keys (order-preserving score bits << 32 | ~position; -0 counts as
 * +0, as the CPU's comparisons do), so the selection is "every key >= the k-th largest key",
 * found by a radix select (8 passes of 8 bits, a shared-memory histogram each; a 64-step bitwise
 * search with a block-wide count per bit took 72 us a row at decode), then written in ascending position
 * order by a block-wide ordered compaction, and padded with -1. -inf (and NaN) scores are never
 * selected, as on the CPU. Exact. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define TOPK_THREADS 1024
#define TOPK_RADIX 8                 /* key bits decided per pass */
#define TOPK_BINS (1 << TOPK_RADIX)

/* Sort key: larger is better; 0 for entries that can never be selected. */
static __device__ __forceinline__ unsigned long long topk_key(const float *score, int64_t t) {
    float v = score[t];
    if (!(v > -INFINITY)) return 0ull;
    if (v == 0.0f) v = 0.0f; /* -0 ties with +0 */
    uint32_t u = __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (0xffffffffu - (uint32_t)t);
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

__global__ void __launch_bounds__(TOPK_THREADS)
topk_kernel(const float *__restrict__ score_all, int64_t P, int k, int32_t *__restrict__ out_all) {
    __shared__ int red[TOPK_THREADS / 32];
    __shared__ int hist[TOPK_BINS];
    __shared__ unsigned long long thr_s;
    __shared__ int need_s, base_s;
    const float *score = score_all + (int64_t)blockIdx.x * P;
    int32_t *out = out_all + (int64_t)blockIdx.x * k;
    int nvalid = 0;
    for (int64_t t = threadIdx.x; t < P; t += TOPK_THREADS) nvalid += topk_key(score, t) != 0ull;
    nvalid = block_sum_int(nvalid, red);
    const int kk = nvalid < k ? nvalid : k;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* the kk-th largest key, a digit of TOPK_RADIX bits a pass from the top: among the keys that
     * match the digits chosen so far, `need` of them are still to be taken; the histogram of their
     * next digit gives the digit where the count from the top reaches `need` */
    unsigned long long thr = 0ull;
    int need = kk;
    for (int shift = 64 - TOPK_RADIX; kk > 0 && shift >= 0; shift -= TOPK_RADIX) {
        for (int i = threadIdx.x; i < TOPK_BINS; i += TOPK_THREADS) hist[i] = 0;
        __syncthreads();
        const unsigned long long hi = shift + TOPK_RADIX >= 64 ? 0ull : ~0ull << (shift + TOPK_RADIX);
        for (int64_t t = threadIdx.x; t < P; t += TOPK_THREADS) {
            const unsigned long long key = topk_key(score, t);
            if (key != 0ull && (key & hi) == (thr & hi)) atomicAdd(&hist[(int)(key >> shift) & (TOPK_BINS - 1)], 1);
        }
        __syncthreads();
        if (warp == 0) { /* lane l: bins from the top, TOPK_BINS / 32 each; counts summed from the top */
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
                        thr_s = thr | (unsigned long long)(TOPK_BINS - 1 - PER * lane - q) << shift;
                        need_s = need - cum;
                        break;
                    }
                    cum += c[q];
                }
        }
        __syncthreads();
        thr = thr_s;
        need = need_s;
    }
    /* ordered compaction of the keys >= thr (exactly kk of them: keys are distinct) */
    if (threadIdx.x == 0) base_s = 0;
    __syncthreads();
    for (int64_t c0 = 0; kk > 0 && c0 < P; c0 += TOPK_THREADS) {
        const int64_t t = c0 + threadIdx.x;
        const bool sel = t < P && topk_key(score, t) >= thr && topk_key(score, t) != 0ull;
        const unsigned ballot = __ballot_sync(0xffffffffu, sel);
        __syncthreads();
        if (lane == 0) red[warp] = __popc(ballot);
        __syncthreads();
        int before = base_s;
        for (int i = 0; i < warp; i++) before += red[i];
        if (sel) out[before + __popc(ballot & ((1u << lane) - 1u))] = (int32_t)t;
        __syncthreads();
        if (threadIdx.x == 0) {
            int tot = 0;
            for (int i = 0; i < TOPK_THREADS / 32; i++) tot += red[i];
            base_s += tot;
        }
        __syncthreads();
    }
    for (int j = kk + threadIdx.x; j < k; j += TOPK_THREADS) out[j] = -1;
}

extern "C" void di_cuda_topk(const float *score, int64_t R, int64_t P, int k, int32_t *out, cudaStream_t s) {
    if (R <= 0 || k <= 0) return;
    if (P >= 0xffffffffll) {
        fprintf(stderr, "di_cuda_topk: %lld positions exceed the 32-bit key\n", (long long)P);
        abort();
    }
    topk_kernel<<<(unsigned)R, TOPK_THREADS, 0, s>>>(score, P, k, out);
    DI_CUDA_LAUNCHED();
}
