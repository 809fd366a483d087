/* Sampling on the device, where the logits are, so that a step's rows send 4 bytes each to the
 * host instead of 129,280 logits (132 MB at B = 256, ~2.5 ms over PCIe) and the host samples
 * nothing (a B = 256 step at T = 1 took ~29 ms on 16 host threads):
 *   - di_cuda_greedy_tokens: the greedy token of each row, the sampler's step 4 at temperature 0
 *     (di_sample_greedy_token);
 *   - di_cuda_sample_tokens (cuda_sample_draw.cu): the token di_sampler_sample_plain draws, for the
 *     rows whose di_plain_sampling has a temperature > 0 -- bit for bit the host's.
 *
 * Greedy. Each entry becomes one 64-bit key whose unsigned order is the CPU loop's choice --
 * high word the sanitised logit (NaN -> -inf, +inf -> FLT_MAX, -0 -> +0, as `sanitize` and `>`
 * treat them) mapped to an order-preserving unsigned, low word ~id so that equal logits prefer the
 * lowest id. The row's token is the maximal key's id, or -1 when that key's logit is -inf (no entry
 * can be sampled). A maximum over keys does not depend on the order of reduction: the result is a
 * function of the row alone, whatever the grid. A decode step has few rows, so a row is cut into
 * slices (up to GREEDY_MAX_SLICES, at least GREEDY_MIN_SLICE entries each) until the grid covers
 * the card twice; pass 1, a block per (slice, row), reduces its slice to a key; pass 2, a warp per
 * row, reduces the row's keys to its token. With one slice a row, pass 1 writes the token itself.
 *
 * Sampled rows: cuda_sample_draw.cu. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"

#define GREEDY_THREADS 256
#define GREEDY_MIN_SLICE 4096 /* entries: below it a block's start-up outweighs its loads */
#define GREEDY_MAX_SLICES 64
#define GREEDY_GRID_TARGET 264 /* blocks: two per multiprocessor of an H100 / H200 */

/* The sanitised logit's bits in an unsigned order: NaN -> -inf, +inf -> FLT_MAX, -0 -> +0. */
__device__ __forceinline__ uint32_t greedy_order(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = 0xff800000u; /* NaN: -inf */
    else if (u == 0x7f800000u) u = 0x7f7fffffu;           /* +inf: FLT_MAX */
    else if (u == 0x80000000u) u = 0u;                     /* -0: +0 */
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
#define GREEDY_ORDER_NEG_INF 0x007fffffu /* greedy_order(-INFINITY): nothing below it but key 0 */

__device__ __forceinline__ uint64_t greedy_key(float x, int64_t id) {
    return ((uint64_t)greedy_order(x) << 32) | (uint32_t)~(uint32_t)id;
}

__device__ __forceinline__ int32_t greedy_token_of(uint64_t key) {
    return (uint32_t)(key >> 32) <= GREEDY_ORDER_NEG_INF ? -1 : (int32_t)~(uint32_t)key;
}

/* block (slice, row): keys[row * slices + slice] = the slice's maximal key, or, with one slice a
 * row, tokens[row] = its token. logits [n, V] */
__global__ void __launch_bounds__(GREEDY_THREADS)
greedy_slices_kernel(const float *__restrict__ logits, int64_t V, int64_t slice_len, uint64_t *__restrict__ keys,
                     int32_t *__restrict__ tokens) {
    DI_PDL_BEGIN();
    const int64_t row = blockIdx.y, lo = (int64_t)blockIdx.x * slice_len;
    const int64_t hi = lo + slice_len < V ? lo + slice_len : V;
    const float *x = logits + row * V;
    uint64_t best = 0;
    int64_t i = lo + threadIdx.x;
    for (; i + 3 * GREEDY_THREADS < hi; i += 4 * GREEDY_THREADS) { /* four loads in flight a thread */
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = x[i + u * GREEDY_THREADS];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const uint64_t k = greedy_key(v[u], i + u * GREEDY_THREADS);
            best = k > best ? k : best;
        }
    }
    for (; i < hi; i += GREEDY_THREADS) {
        const uint64_t k = greedy_key(x[i], i);
        best = k > best ? k : best;
    }
    __shared__ uint64_t warp_best[GREEDY_THREADS / 32];
    best = di_dev_warp_max_u64(best);
    if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x >= 32) return;
    best = threadIdx.x < GREEDY_THREADS / 32 ? warp_best[threadIdx.x] : 0;
    best = di_dev_warp_max_u64(best);
    if (threadIdx.x) return;
    if (gridDim.x == 1) tokens[row] = greedy_token_of(best);
    else keys[row * gridDim.x + blockIdx.x] = best;
}

/* warp per row: tokens[row] = the token of the row's maximal slice key. keys [n, slices] */
__global__ void __launch_bounds__(32) greedy_rows_kernel(const uint64_t *__restrict__ keys, int slices,
                                                          int32_t *__restrict__ tokens) {
    DI_PDL_BEGIN();
    const uint64_t *k = keys + (int64_t)blockIdx.x * slices;
    uint64_t best = 0;
    for (int j = threadIdx.x; j < slices; j += 32) best = k[j] > best ? k[j] : best;
    best = di_dev_warp_max_u64(best);
    if (threadIdx.x == 0) tokens[blockIdx.x] = greedy_token_of(best);
}

static int greedy_slices(int64_t n, int64_t V) {
    int64_t s = (GREEDY_GRID_TARGET + n - 1) / n;
    const int64_t most = (V + GREEDY_MIN_SLICE - 1) / GREEDY_MIN_SLICE;
    if (s > most) s = most;
    if (s > GREEDY_MAX_SLICES) s = GREEDY_MAX_SLICES;
    return s < 1 ? 1 : (int)s;
}

extern "C" size_t di_cuda_greedy_ws_bytes(int64_t n, int64_t V) {
    return sizeof(uint64_t) * (size_t)(n > 0 ? n : 1) * (size_t)greedy_slices(n > 0 ? n : 1, V);
}

extern "C" void di_cuda_greedy_tokens(const float *logits, int64_t n, int64_t V, void *ws, int32_t *tokens,
                                      cudaStream_t s) {
    if (n <= 0 || V <= 0) return;
    if (V > INT32_MAX) { /* the key holds a 32-bit id: no vocabulary comes near */
        fprintf(stderr, "di_cuda_greedy_tokens: a vocabulary of %lld exceeds the key\n", (long long)V);
        abort();
    }
    const int slices = greedy_slices(n, V);
    const int64_t slice_len = (V + slices - 1) / slices;
    for (int64_t r0 = 0; r0 < n; r0 += DI_CUDA_MAX_GRID_Y) { /* rows on the grid's y: at most 65,535 a launch */
        const int64_t m = n - r0 < DI_CUDA_MAX_GRID_Y ? n - r0 : DI_CUDA_MAX_GRID_Y;
        uint64_t *keys = (uint64_t *)ws + r0 * slices; /* [m, slices] */
        greedy_slices_kernel<<<dim3((unsigned)slices, (unsigned)m), GREEDY_THREADS, 0, s>>>(
            logits + r0 * V, V, slice_len, keys, tokens + r0);
        DI_CUDA_LAUNCHED();
        if (slices == 1) continue;
        greedy_rows_kernel<<<(unsigned)m, 32, 0, s>>>(keys, slices, tokens + r0);
        DI_CUDA_LAUNCHED();
    }
}
