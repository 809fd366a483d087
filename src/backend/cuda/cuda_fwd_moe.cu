/* The element-wise stages of MoE and Engram on the GPU (cuda_fwd_ops.h), twins of loops in
 * src/forward/moe.c (SwiGLU of expert_ffn, the combine of di_fwd_moe) and src/forward/engram.c
 * (the table gather and the gate of di_fwd_engram).
 *
 * SwiGLU, combine and gather are one thread per output element with the CPU's expression in the
 * CPU's order (fp32, -fmad=false, di_dev_expf for glibc's expf): bit-identical.
 *
 * The Engram gate has three double sums over D per (row, copy): one thread block of GATE_THREADS
 * per (r, i); thread t sums d = t, t + GATE_THREADS, ... in order, then a fixed xor-shuffle tree
 * per warp and the warps' partials in warp order. The CPU sums in d order; the two agree whenever
 * the sums are exact (x^2 and key^2 of bf16 values always are; the fp32 products x * qk * key are
 * exact in double, so only an exponent spread beyond ~29 bits across a row can differ). The order
 * depends only on D, never on R: batch invariant. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_mma.cuh"

#define EW_THREADS 256
#define GATE_THREADS 256

static unsigned ew_blocks(int64_t n) {
    int64_t b = (n + EW_THREADS - 1) / EW_THREADS;
    return (unsigned)(b > 8192 ? 8192 : b);
}

/* ---- routing on the device (no host round trip; the default mode) ---- */
/* warp per row: the arithmetic of di_moe_route_row (forward/moe.c) with CUDA's log1pf (glibc's may
 * differ in the last bit, which can swap two experts whose biased scores tie to that bit). Lane l
 * holds experts l, l + 32, ... in registers (ROUTE_PER of them): their logits and biases load
 * together and each of the K picks scans registers, not shared memory (17.1 -> 11.0 us a launch
 * at B = 1, docs/PERFORMANCE.md session 15); the scores stay in shared memory for lane 0's tail */
#define ROUTE_PER (DI_MOE_ROUTE_MAX_E / 32)
/* the router's K splits (di_cuda_linear_w16_parts) this kernel adds, at most */
#define ROUTE_MAX_SPLITS 8

/* logit i of logits [ksplit][n] fp32: the splits' partial sums added in split order (mm_reduce_kernel's
 * sum, so that its launch is not needed), the loads issued together */
static __device__ __forceinline__ float route_logit(const float *__restrict__ logits, int ksplit, int64_t n, int64_t i) {
    float p[ROUTE_MAX_SPLITS];
#pragma unroll
    for (int k = 0; k < ROUTE_MAX_SPLITS; k++) p[k] = k < ksplit ? logits[k * n + i] : 0.0f;
    float v = p[0];
#pragma unroll
    for (int k = 1; k < ROUTE_MAX_SPLITS; k++)
        if (k < ksplit) v += p[k];
    return v;
}

/* an expert's score: sqrt(softplus(z)) as di_moe_route_row computes it */
static __device__ __forceinline__ float route_score(float z) {
    return sqrtf(z > 20.0f ? z : log1pf(di_dev_expf(z)));
}

/* row r's routing on one warp from its scores sc [E] (route_score, written before the call and made
 * visible to the warp); bias [E] in global or shared memory. ex_s (or NULL): the row's K experts
 * also into shared memory, for the block that groups them */
static __device__ __forceinline__ void moe_route_row(const float *sc, const float *bias, int64_t r, int E, int K,
                                                     float scale, int resident, int32_t *__restrict__ expert,
                                                     float *__restrict__ weight, int32_t *__restrict__ order,
                                                     int *ex_s) {
    const int lane = threadIdx.x & 31;
    float bi[ROUTE_PER]; /* biased scores of experts lane + 32 i; -inf past E and once taken */
#pragma unroll
    for (int i = 0; i < ROUTE_PER; i++) {
        const int e = lane + 32 * i;
        bi[i] = e < E ? sc[e] + bias[e] : -INFINITY;
    }
    /* pick j lands in lane j's register (K <= 32): no per-thread arrays, which sat in local memory */
    int mine = -1;
    for (int j = 0; j < K; j++) { /* the highest biased score not taken; the lower expert on ties */
        float bv = -INFINITY;
        int be = -1;
#pragma unroll
        for (int i = 0; i < ROUTE_PER; i++) /* ascending expert: a later equal score never wins */
            if (bi[i] != -INFINITY && (be < 0 || bi[i] > bv)) bv = bi[i], be = lane + 32 * i;
        for (int o = 16; o > 0; o >>= 1) { /* a total order (score down, expert up): every lane agrees */
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (oe >= 0 && (be < 0 || ov > bv || (ov == bv && oe < be))) bv = ov, be = oe;
        }
        if (lane == j) mine = be;
        if ((be & 31) == lane) { /* taken: the owner lane drops it */
#pragma unroll
            for (int i = 0; i < ROUTE_PER; i++)
                if (i == be >> 5) bi[i] = -INFINITY;
        }
    }
    /* lane j < K: pick j's unbiased score; their sum in pick order (the same in every lane) */
    const float wv = lane < K ? sc[mine] : 0.0f;
    float sum = 0.0f;
    for (int j = 0; j < K; j++) sum += __shfl_sync(0xffffffffu, wv, j);
    const int ex = resident ? (int)((r * K + lane) % resident) : mine; /* bench EP-N proxy */
    /* slots in ascending expert id, picks of one expert in pick order (a stable sort): slot j goes
     * to position #{i : ex_i < ex_j, or ex_i == ex_j and i < j} */
    int pos = 0;
    for (int i = 0; i < K; i++) {
        const int exi = __shfl_sync(0xffffffffu, ex, i);
        pos += exi < ex || (exi == ex && i < lane);
    }
    if (lane >= K) return;
    expert[r * K + lane] = ex;
    if (ex_s) ex_s[r * K + lane] = ex;
    weight[r * K + lane] = wv / (sum + 1e-20f) * scale;
    order[r * K + pos] = lane;
}

__global__ void __launch_bounds__(EW_THREADS)
moe_route_kernel(const float *__restrict__ logits, int ksplit, const float *__restrict__ bias, int64_t R, int E, int K,
                 float scale, int resident, int32_t *__restrict__ expert, float *__restrict__ weight,
                 int32_t *__restrict__ order) {
    DI_PDL_BEGIN();
    __shared__ float score_s[EW_THREADS / 32][DI_MOE_ROUTE_MAX_E];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * (EW_THREADS / 32) + warp;
    if (r >= R) return; /* whole warps */
    for (int e = lane; e < E; e += 32) score_s[warp][e] = route_score(route_logit(logits, ksplit, R * E, r * E + e));
    __syncwarp();
    moe_route_row(score_s[warp], bias, r, E, K, scale, resident, expert, weight, order, nullptr);
}

extern "C" void di_cuda_moe_route(const float *logits, int ksplit, const float *bias, int64_t R, int E, int K,
                                  float scale, int resident, int32_t *expert, float *weight, int32_t *order,
                                  cudaStream_t s) {
    if (E > DI_MOE_ROUTE_MAX_E || K > DI_MOE_ROUTE_MAX_K || K > E || ksplit < 1 || ksplit > ROUTE_MAX_SPLITS) {
        fprintf(stderr, "di_cuda_moe_route: %d experts, top %d, %d K splits exceeds %d / %d / %d\n", E, K, ksplit,
                DI_MOE_ROUTE_MAX_E, DI_MOE_ROUTE_MAX_K, ROUTE_MAX_SPLITS);
        abort();
    }
    if (R <= 0) return;
    moe_route_kernel<<<(unsigned)((R + EW_THREADS / 32 - 1) / (EW_THREADS / 32)), EW_THREADS, 0, s>>>(
        logits, ksplit, bias, R, E, K, scale, resident, expert, weight, order);
    DI_CUDA_LAUNCHED();
}

/* The assignments [R*K] grouped per expert, rows ascending within an expert (the CPU's gather
 * order), in two launches. moe_count_kernel (one block): counts per expert, their exclusive prefix
 * (row_off) and the list of experts with rows. moe_place_kernel (a block per expert): each warp
 * takes a contiguous segment of the assignments, counts its expert's hits there by ballot, the
 * warps' counts are prefixed in warp order, and a second pass writes the hits at their positions.
 * (One block placing every expert, a warp per expert, took 620 us for a 4,096-token prefill.) */
#define GROUP_THREADS 1024 /* moe_count_kernel: one thread per expert (E <= GROUP_THREADS) */
#define PLACE_THREADS 512

/* exclusive prefix of v over the block (blockDim.x == GROUP_THREADS) in thread order; *total the sum.
 * The warps' sums are prefixed by a shuffle scan, a lane a warp (a loop over the 32 sums in every
 * thread was half the routing kernel's instructions at B = 1) */
static_assert(GROUP_THREADS / 32 == 32, "group_block_scan: a lane for each warp's sum");
static __device__ int group_block_scan(int v, int *warp_s, int *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += u;
    }
    __syncthreads(); /* warp_s may still be read by a previous scan */
    if (lane == 31) warp_s[warp] = inc;
    __syncthreads();
    const int ws = warp_s[lane];
    int wi = ws; /* warps 0 .. lane's sums */
    for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, wi, o);
        if (lane >= o) wi += u;
    }
    *total = __shfl_sync(0xffffffffu, wi, 31);
    return __shfl_sync(0xffffffffu, wi - ws, warp) + inc - v;
}

/* the row-tile lists a grouping kernel writes (di_group_tiles; list NULL: none), by value */
struct group_tile_lists {
    di_group_tiles l[DI_GROUP_TILE_LISTS];
};
static group_tile_lists tile_lists_of(const di_group_tiles *tiles, int n_tiles) {
    group_tile_lists t = {};
    for (int i = 0; i < n_tiles && i < DI_GROUP_TILE_LISTS; i++) t.l[i] = tiles[i];
    return t;
}

/* thread t's expert count c (G experts) -> row_off [G + 1], the active list (the experts with rows
 * ascending, then -1; NULL: none) and the tile lists (expert t's tiles at its tiles' prefix, then
 * group -1 to the list's end); returns expert t's offset */
static __device__ int group_offsets(int c, int G, int *warp_s, int *__restrict__ row_off, int *__restrict__ active,
                                    const group_tile_lists &tiles) {
    const int t = threadIdx.x;
    int total, n_act;
    const int off = group_block_scan(c, warp_s, &total);
    const int slot = group_block_scan(c > 0, warp_s, &n_act);
    if (t < G) row_off[t] = off;
    if (t == 0) row_off[G] = total;
    if (active && t < G) {
        if (c > 0) active[slot] = t;
        if (t >= n_act) active[t] = -1;
    }
    for (int i = 0; i < DI_GROUP_TILE_LISTS; i++) {
        const di_group_tiles tl = tiles.l[i];
        if (!tl.list) continue; /* uniform: a kernel parameter */
        const int n = t < G ? (c + tl.bt - 1) / tl.bt : 0;
        int n_tiles;
        const int first = group_block_scan(n, warp_s, &n_tiles);
        int4 *list = reinterpret_cast<int4 *>(tl.list);
        for (int j = 0; j < n && first + j < tl.cap; j++) list[first + j] = int4{t, off, c, j * tl.bt};
        for (int e = n_tiles + t; e < tl.cap; e += blockDim.x) list[e] = int4{-1, 0, 0, 0};
    }
    return off;
}

__global__ void __launch_bounds__(GROUP_THREADS)
moe_count_kernel(const int32_t *__restrict__ expert, int64_t n, int E, int *__restrict__ row_off,
                 int *__restrict__ active, group_tile_lists tiles) {
    DI_PDL_BEGIN();
    __shared__ int cnt[GROUP_THREADS], warp_s[GROUP_THREADS / 32];
    const int t = threadIdx.x;
    cnt[t] = 0;
    __syncthreads();
    for (int64_t i = t; i < n; i += GROUP_THREADS) atomicAdd(&cnt[expert[i]], 1);
    __syncthreads();
    group_offsets(t < E ? cnt[t] : 0, E, warp_s, row_off, active, tiles);
}

/* block e: expert e's assignments to positions row_off[e] .. row_off[e + 1] */
__global__ void __launch_bounds__(PLACE_THREADS)
moe_place_kernel(const int32_t *__restrict__ expert, const float *__restrict__ weight, int64_t n, int K,
                 const float *x, const float *yg, int64_t D, const int *__restrict__ row_off, const float **x_rows,
                 const float **slot_rows, float *__restrict__ wts) {
    DI_PDL_BEGIN();
    constexpr int NW = PLACE_THREADS / 32;
    __shared__ int warp_n[NW];
    const int e = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int first = row_off[e];
    if (row_off[e + 1] == first) return; /* uniform over the block */
    const int64_t seg = (n + NW * 32 - 1) / (NW * 32) * 32; /* whole ballots a warp */
    const int64_t i0 = warp * seg, i1 = i0 + seg < n ? i0 + seg : n;
    int hits = 0;
    for (int64_t i = i0 + lane; i - lane < i1; i += 32)
        hits += __popc(__ballot_sync(0xffffffffu, i < i1 && expert[i] == e));
    if (lane == 0) warp_n[warp] = hits;
    __syncthreads();
    int pos = first;
    for (int w = 0; w < warp; w++) pos += warp_n[w];
    for (int64_t i = i0 + lane; i - lane < i1; i += 32) {
        const bool hit = i < i1 && expert[i] == e;
        const unsigned m = __ballot_sync(0xffffffffu, hit);
        if (hit) {
            const int p = pos + __popc(m & ((1u << lane) - 1u));
            x_rows[p] = x + i / K * D;
            slot_rows[i] = yg + (int64_t)p * D;
            wts[p] = weight[i];
        }
        pos += __popc(m);
    }
}

/* Routing and grouping of a few rows in one block (ROUTE_GROUP_MAX_ROWS rows, E <= GROUP_THREADS):
 * warp r routes row r (moe_route_kernel's moe_route_row), then the block counts and places the
 * assignments as moe_count_kernel and moe_place_kernel do -- a position is the expert's offset plus
 * the assignment's rank among the expert's earlier ones, the order moe_place_kernel's ballots give.
 * At B = 1 the three launches took ~17 us a layer, mostly their starts. */
#define ROUTE_GROUP_MAX_ROWS 16
__global__ void __launch_bounds__(GROUP_THREADS)
moe_route_group_kernel(const float *__restrict__ logits, int ksplit, const float *__restrict__ bias, int R, int E, int K,
                       float scale, int resident, int G, int32_t *__restrict__ expert, float *__restrict__ weight,
                       int32_t *__restrict__ order, const float *x, const float *yg, int64_t D,
                       int *__restrict__ row_off, int *__restrict__ active, const float **x_rows,
                       const float **slot_rows, float *__restrict__ wts, group_tile_lists tiles) {
    DI_PDL_BEGIN();
    __shared__ float score_s[ROUTE_GROUP_MAX_ROWS][DI_MOE_ROUTE_MAX_E], bias_s[DI_MOE_ROUTE_MAX_E];
    __shared__ int cnt[GROUP_THREADS], warp_s[GROUP_THREADS / 32], ex_s[ROUTE_GROUP_MAX_ROWS * DI_MOE_ROUTE_MAX_K];
    const int t = threadIdx.x, warp = t >> 5, n = R * K;
    /* every thread: scores and biases, so that the routing warps start from shared memory */
    for (int i = t; i < R * E; i += GROUP_THREADS) score_s[i / E][i % E] = route_score(route_logit(logits, ksplit, R * E, i));
    for (int e = t; e < E; e += GROUP_THREADS) bias_s[e] = bias[e];
    cnt[t] = 0;
    __syncthreads();
    if (warp < R) moe_route_row(score_s[warp], bias_s, warp, E, K, scale, resident, expert, weight, order, ex_s);
    __syncthreads();
    if (t < n) atomicAdd(&cnt[ex_s[t]], 1);
    __syncthreads();
    const int off = group_offsets(t < G ? cnt[t] : 0, G, warp_s, row_off, active, tiles);
    __syncthreads(); /* cnt is reused for the offsets */
    if (t < G) cnt[t] = off;
    __syncthreads();
    if (t < n) {
        const int e = ex_s[t];
        int p = cnt[e];
        for (int i = 0; i < t; i++) p += ex_s[i] == e;
        x_rows[p] = x + (int64_t)(t / K) * D;
        slot_rows[t] = yg + (int64_t)p * D;
        wts[p] = weight[t];
    }
}

extern "C" void di_cuda_moe_route_group(const float *logits, int ksplit, const float *bias, int64_t R, int E, int K,
                                        float scale, int resident, int G, int32_t *expert, float *weight, int32_t *order,
                                        const float *x, const float *yg, int64_t D, int *row_off, int *active,
                                        const float **x_rows, const float **slot_rows, float *wts,
                                        const di_group_tiles *tiles, int n_tiles, cudaStream_t s) {
    if (R > ROUTE_GROUP_MAX_ROWS || G > GROUP_THREADS || E > DI_MOE_ROUTE_MAX_E || K > DI_MOE_ROUTE_MAX_K || K > E ||
        R <= 0 || ksplit < 1 || ksplit > ROUTE_MAX_SPLITS) {
        di_cuda_moe_route(logits, ksplit, bias, R, E, K, scale, resident, expert, weight, order, s);
        di_cuda_moe_group(expert, weight, R, K, G, x, yg, D, row_off, active, x_rows, slot_rows, wts, tiles, n_tiles, s);
        return;
    }
    moe_route_group_kernel<<<1, GROUP_THREADS, 0, s>>>(logits, ksplit, bias, (int)R, E, K, scale, resident, G, expert,
                                                       weight, order, x, yg, D, row_off, active, x_rows, slot_rows, wts,
                                                       tile_lists_of(tiles, n_tiles));
    DI_CUDA_LAUNCHED();
}

extern "C" void di_cuda_moe_group(const int32_t *expert, const float *weight, int64_t R, int K, int E,
                                  const float *x, const float *yg, int64_t D, int *row_off, int *active,
                                  const float **x_rows, const float **slot_rows, float *wts,
                                  const di_group_tiles *tiles, int n_tiles, cudaStream_t s) {
    if (E > GROUP_THREADS) {
        fprintf(stderr, "di_cuda_moe_group: %d experts exceed %d\n", E, GROUP_THREADS);
        abort();
    }
    moe_count_kernel<<<1, GROUP_THREADS, 0, s>>>(expert, R * K, E, row_off, active, tile_lists_of(tiles, n_tiles));
    DI_CUDA_LAUNCHED();
    if (R * K <= 0 || E <= 0) return;
    moe_place_kernel<<<(unsigned)E, PLACE_THREADS, 0, s>>>(expert, weight, R * K, K, x, yg, D, row_off, x_rows,
                                                           slot_rows, wts);
    DI_CUDA_LAUNCHED();
}

/* h [n, inter] = bf16(silu(min(g, L)) * clamp(u, -L, L) [* wt[r]]); h may alias g */
__global__ void __launch_bounds__(EW_THREADS)
swiglu_kernel(const float *g, const float *__restrict__ u, int64_t n, int64_t inter, float lim,
              const float *__restrict__ wt, float *h) {
    DI_PDL_BEGIN();
    const int64_t total = n * inter;
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < total; i += (int64_t)gridDim.x * EW_THREADS)
        h[i] = di_dev_swiglu(g[i], u[i], lim, wt != nullptr, wt ? wt[i / inter] : 1.0f);
}

extern "C" void di_cuda_swiglu(const float *g, const float *u, int64_t n, int64_t inter, float limit,
                               const float *wt, float *h, cudaStream_t s) {
    if (n <= 0 || inter <= 0) return;
    swiglu_kernel<<<ew_blocks(n * inter), EW_THREADS, 0, s>>>(g, u, n, inter, limit, wt, h);
    DI_CUDA_LAUNCHED();
}

/* The same four values a thread (inter % 32 == 0, 16-byte aligned rows), with h's act_quant in the
 * form the next linear reads (act_quant_e4m3_kernel's codes and scales, act_quant_digits_kernel's
 * digits, or act_quant_bf16_kernel's values as bf16): 8 lanes a 32-value block, as those kernels, so
 * no launch of theirs follows */
template <di_act_form FORM>
__global__ void __launch_bounds__(EW_THREADS)
swiglu_forms_kernel(const float *g, const float *__restrict__ u, int64_t n, int64_t inter, float lim,
                    const float *__restrict__ wt, float *h, di_cuda_act_forms forms) {
    DI_PDL_BEGIN();
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x, quads = n * inter / 4;
    if ((i & ~(int64_t)31) >= quads) return; /* whole warps; quads % 8 == 0: a block's lanes all in or out */
    const bool in = i < quads;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (in) {
        const float4 g4 = reinterpret_cast<const float4 *>(g)[i], u4 = reinterpret_cast<const float4 *>(u)[i];
        const bool has_w = wt != nullptr;
        const float w = has_w ? wt[4 * i / inter] : 1.0f;
        v = di_dev_swiglu4(g4, u4, lim, has_w, w);
        reinterpret_cast<float4 *>(h)[i] = v;
    }
    float sc;
    const uint32_t codes = di_act_quant_e4m3_x4(v, &sc);
    if (!in) return;
    if (FORM == DI_ACT_FORM_DIGITS) {
        di_act_digits_store(codes, sc, i, reinterpret_cast<uint32_t *>(forms.digits), forms.digit_scale);
    } else if (FORM == DI_ACT_FORM_QBF16) {
        reinterpret_cast<uint2 *>(forms.qbf16)[i] = di_act_qbf16x4(codes, sc);
    } else {
        reinterpret_cast<uint32_t *>(forms.q)[i] = codes;
        if ((i & 7) == 0) forms.scale[i >> 3] = sc;
    }
}

extern "C" bool di_cuda_swiglu_forms_supported(const float *g, const float *u, int64_t inter, const float *h) {
    return inter % 32 == 0 && ((uintptr_t)g | (uintptr_t)u | (uintptr_t)h) % 16 == 0;
}

extern "C" void di_cuda_swiglu_forms(const float *g, const float *u, int64_t n, int64_t inter, float limit,
                                     const float *wt, float *h, const di_cuda_act_forms *forms, cudaStream_t s) {
    if (n <= 0 || inter <= 0) return;
    /* exactly one form, whole: the digits and their scales, the codes and theirs, or the bf16 values */
    const bool digits = forms->digits && forms->digit_scale, codes = forms->q && forms->scale;
    const bool qbf16 = forms->qbf16 != nullptr;
    const bool partial = !forms->digits != !forms->digit_scale || !forms->q != !forms->scale;
    const bool one = digits + codes + qbf16 == 1 && !partial;
    if (!di_cuda_swiglu_forms_supported(g, u, inter, h) || forms->bf16 || !one) {
        fprintf(stderr, "di_cuda_swiglu_forms: inter = %lld, the rows' alignment or the forms asked not supported\n",
                (long long)inter);
        abort();
    }
    const int64_t quads = n * inter / 4;
    const unsigned blocks = (unsigned)((quads + EW_THREADS - 1) / EW_THREADS);
    if (digits)
        swiglu_forms_kernel<DI_ACT_FORM_DIGITS><<<blocks, EW_THREADS, 0, s>>>(g, u, n, inter, limit, wt, h, *forms);
    else if (qbf16)
        swiglu_forms_kernel<DI_ACT_FORM_QBF16><<<blocks, EW_THREADS, 0, s>>>(g, u, n, inter, limit, wt, h, *forms);
    else
        swiglu_forms_kernel<DI_ACT_FORM_E4M3><<<blocks, EW_THREADS, 0, s>>>(g, u, n, inter, limit, wt, h, *forms);
    DI_CUDA_LAUNCHED();
}

/* out [R, D] = bf16(sum_j slot_rows[r K + order[r, j]][:] in j order + shared[r, :]), fp32 */
__global__ void __launch_bounds__(EW_THREADS)
moe_combine_kernel(const float *const *__restrict__ slot_rows, const int32_t *__restrict__ order,
                   const float *__restrict__ shared, int64_t R, int K, int64_t D, float *__restrict__ out) {
    DI_PDL_BEGIN();
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < R * D; i += (int64_t)gridDim.x * EW_THREADS) {
        const int64_t r = i / D, k = i % D;
        float acc = 0.0f;
        for (int j = 0; j < K; j++) acc += slot_rows[r * K + order[r * K + j]][k];
        acc += shared[i];
        out[i] = di_dev_bf16_round(acc);
    }
}

/* The same sums four values a thread (D % 4 == 0, 16-byte aligned rows): the K row pointers are looked
 * up first and the K vectors then load together, where the loop above waits out order -> row ->
 * value for each j in turn (279 us a 4,096-token prefill call on the H200, ~2 TB/s). Each output is
 * still 0 + slot rows in j order + shared, rounded once. */
#define COMBINE_MAX_K DI_CUDA_COMBINE_MAX_K /* the mHC kernel that can make the combine too: the same bound */
__global__ void __launch_bounds__(EW_THREADS)
moe_combine4_kernel(const float *const *__restrict__ slot_rows, const int32_t *__restrict__ order,
                    const float *__restrict__ shared, int64_t R, int K, int64_t D, float *__restrict__ out) {
    DI_PDL_BEGIN();
    const int64_t D4 = D / 4;
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < R * D4; i += (int64_t)gridDim.x * EW_THREADS) {
        const int64_t r = i / D4, k = (i % D4) * 4;
        float4 v[COMBINE_MAX_K];
#pragma unroll
        for (int j = 0; j < COMBINE_MAX_K; j++)
            if (j < K) v[j] = *reinterpret_cast<const float4 *>(slot_rows[r * K + order[r * K + j]] + k);
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int j = 0; j < COMBINE_MAX_K; j++)
            if (j < K) acc.x += v[j].x, acc.y += v[j].y, acc.z += v[j].z, acc.w += v[j].w;
        const float4 sh = *reinterpret_cast<const float4 *>(shared + r * D + k);
        acc.x += sh.x, acc.y += sh.y, acc.z += sh.z, acc.w += sh.w;
        *reinterpret_cast<float4 *>(out + r * D + k) = make_float4(
            di_dev_bf16_round(acc.x), di_dev_bf16_round(acc.y), di_dev_bf16_round(acc.z), di_dev_bf16_round(acc.w));
    }
}

extern "C" void di_cuda_moe_combine(const float *const *slot_rows, const int32_t *order, const float *shared,
                                    int64_t R, int K, int64_t D, float *out, cudaStream_t s) {
    if (R <= 0 || D <= 0) return;
    if (K <= COMBINE_MAX_K && D % 4 == 0 && ((uintptr_t)shared | (uintptr_t)out) % 16 == 0)
        moe_combine4_kernel<<<ew_blocks(R * D / 4), EW_THREADS, 0, s>>>(slot_rows, order, shared, R, K, D, out);
    else
        moe_combine_kernel<<<ew_blocks(R * D), EW_THREADS, 0, s>>>(slot_rows, order, shared, R, K, D, out);
    DI_CUDA_LAUNCHED();
}

/* e [R, ncols * hd] = bf16(e4m3(table[row, d]) * e8m0(scale[row, d / 32])), row = rows[r, c] */
__global__ void __launch_bounds__(EW_THREADS)
engram_gather_kernel(const uint8_t *__restrict__ table, const uint8_t *__restrict__ scale,
                     const int64_t *__restrict__ rows, int64_t R, int ncols, int hd, float *__restrict__ e) {
    DI_PDL_BEGIN();
    const int64_t E = (int64_t)ncols * hd;
    for (int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x; i < R * E; i += (int64_t)gridDim.x * EW_THREADS) {
        const int64_t r = i / E, c = (i % E) / hd, d = i % hd;
        const int64_t row = rows[r * ncols + c];
        const float q = di_dev_e4m3_f32(table[row * hd + d]);
        e[i] = di_dev_bf16_round(q * di_dev_e8m0(scale[row * (hd / 32) + d / 32]));
    }
}

extern "C" void di_cuda_engram_gather(const uint8_t *table, const uint8_t *scale, const int64_t *rows,
                                      int64_t R, int ncols, int hd, float *e, cudaStream_t s) {
    if (R <= 0 || ncols <= 0 || hd <= 0) return;
    engram_gather_kernel<<<ew_blocks(R * ncols * hd), EW_THREADS, 0, s>>>(table, scale, rows, R, ncols, hd, e);
    DI_CUDA_LAUNCHED();
}

/* fixed-order block sum of one double per thread: xor tree in each warp, then warps in order;
 * every thread gets the result. `red` [GATE_THREADS / 32] shared. */
static __device__ double gate_block_sum(double v, double *red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* red may still be read from the previous sum */
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < GATE_THREADS / 32; w++) s += red[w];
    return s;
}

/* block per (r, i) of X [R, n, D]: the gate g from x, key_i, qk_i; then x += g * value, bf16 */
__global__ void __launch_bounds__(GATE_THREADS)
engram_gate_kernel(uint16_t *__restrict__ X, const float *__restrict__ kv, const float *__restrict__ qk, int n,
                   int64_t D, float eps, float inv_sqrt_d) {
    DI_PDL_BEGIN();
    __shared__ double red[GATE_THREADS / 32];
    const int64_t ri = blockIdx.x, r = ri / n;
    const int i = (int)(ri % n);
    uint16_t *x = X + ri * D;                                  /* [D] bf16 bits */
    const float *key = kv + r * (n + 1) * D + (int64_t)i * D;  /* [D] bf16 */
    const float *value = kv + r * (n + 1) * D + (int64_t)n * D; /* [D] bf16 */
    const float *w = qk + (int64_t)i * D;                      /* [D] */
    double sx = 0.0, sk = 0.0, dot = 0.0;
    for (int64_t d = threadIdx.x; d < D; d += GATE_THREADS) {
        const float xd = di_dev_bf16_load(x + d);
        sx += (double)xd * xd;
        sk += (double)key[d] * key[d];
        dot += (double)(xd * w[d] * key[d]);
    }
    sx = gate_block_sum(sx, red);
    sk = gate_block_sum(sk, red);
    dot = gate_block_sum(dot, red);
    const float rx = 1.0f / sqrtf((float)(sx / (double)D) + eps);
    const float rk = 1.0f / sqrtf((float)(sk / (double)D) + eps);
    float g = (float)dot * (rx * rk) * inv_sqrt_d;
    g = copysignf(sqrtf(fmaxf(fabsf(g), 1e-6f)), g);
    g = 1.0f / (1.0f + di_dev_expf(-g));
    for (int64_t d = threadIdx.x; d < D; d += GATE_THREADS)
        x[d] = (uint16_t)di_dev_bf16_bits(di_dev_bf16_load(x + d) + g * value[d]);
}

extern "C" void di_cuda_engram_gate(uint16_t *X, const float *kv, const float *qk, int64_t R, int n, int64_t D,
                                    float eps, float inv_sqrt_d, cudaStream_t s) {
    if (R <= 0 || n <= 0) return;
    engram_gate_kernel<<<(unsigned)(R * n), GATE_THREADS, 0, s>>>(X, kv, qk, n, D, eps, inv_sqrt_d);
    DI_CUDA_LAUNCHED();
}
