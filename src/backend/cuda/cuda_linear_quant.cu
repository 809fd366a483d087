/* Block-scaled quantised linear layers on the GPU: FP8 e4m3 weights with 32x32 e8m0 blocks and
 * packed FP4 e2m1 weights with 1x32 e8m0 scales (w4a8), twins of linear_quant() in
 * src/backend/cpu/cpu_linear.c (model-spec §2.0 "Linear layers").
 *
 * Numerics (bit-exact against the CPU): the activation row is act_quant'ed per 32 inside the
 * kernel; for output (m, n) and K block b the block sum of 32 products is computed EXACTLY in
 * integer arithmetic (e4m3 values are integers times 2^-9, e2m1 values integers times 2^-1, so
 * FP8 block sums fit int64 and FP4 ones int32), rounded once to fp32 (as the CPU's exact double
 * sum is), scaled by the two powers of two in the CPU's order, and added to one fp32 accumulator
 * per output in K-block order. Nothing here depends on the tiling.
 *
 * Work split: a thread block stages MT activation rows (quantised, as integers, each 32-block
 * padded to 36 ints so that the 16-byte shared loads of a quarter warp hit distinct banks) in
 * shared memory, then each warp walks output rows n (grid-stride). For one n the 32 lanes take
 * K blocks lane, lane+32, ...: each lane reads its 32 weight bytes (FP8: two 16-byte loads; FP4:
 * one; the next step's are prefetched), forms its block sums for the MT rows into shared memory,
 * and lane m then folds row m's 32 terms into its fp32 accumulator in block order. This is a straightforward CUDA-core kernel, far
 * from the tensor-core rate for large M (see docs/CUDA.md and the benchmark); a wgmma version must
 * keep the exact block sums (e.g. int8 split products) to stay bit-exact. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_ops.h"

#define LQ_WARPS 8
#define LQ_PAD 36 /* ints per staged 32-value block */
#define LQ_SMEM_MAX (200 * 1024)

/* The raw 32 weights of block b of a row: FP8 32 bytes (two 16-byte loads), FP4 16 bytes. */
struct wraw {
    uint4 lo, hi;
};
template <bool FP4>
static __device__ __forceinline__ wraw load_wraw(const uint8_t *wrow, int b) {
    wraw r;
    if (FP4) {
        r.lo = *reinterpret_cast<const uint4 *>(wrow + 16 * b);
        r.hi = make_uint4(0, 0, 0, 0);
    } else {
        const uint4 *p = reinterpret_cast<const uint4 *>(wrow + 32 * b);
        r.lo = p[0];
        r.hi = p[1];
    }
    return r;
}

/* 32 weights as integers: FP8 -> value * 2^9, FP4 -> value * 2 (K order) */
template <bool FP4>
static __device__ __forceinline__ void decode_wraw(const wraw &r, int *wv) {
    if (FP4) {
        const uint32_t w4[4] = {r.lo.x, r.lo.y, r.lo.z, r.lo.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) wv[8 * i + j] = di_dev_e2m1_to_int2((w4[i] >> (4 * j)) & 15);
    } else {
        const uint32_t w8[8] = {r.lo.x, r.lo.y, r.lo.z, r.lo.w, r.hi.x, r.hi.y, r.hi.z, r.hi.w};
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) wv[4 * i + j] = di_dev_e4m3_to_int512((w8[i] >> (8 * j)) & 255);
    }
}

/* exact block sum of one staged activation block with the weights, rounded once to fp32 */
template <bool FP4>
static __device__ __forceinline__ float block_sum(const int *xb, const int *wv) {
    const int4 *x4 = reinterpret_cast<const int4 *>(xb);
    if (FP4) {
        int s = 0; /* |s| <= 32 * 229376 * 12 < 2^27 */
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int4 v = x4[i];
            s += v.x * wv[4 * i] + v.y * wv[4 * i + 1] + v.z * wv[4 * i + 2] + v.w * wv[4 * i + 3];
        }
        return __int2float_rn(s) * 0x1p-10f;
    }
    long long s = 0; /* |s| <= 32 * 229376^2 < 2^41 */
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int4 v = x4[i];
        s += (long long)v.x * wv[4 * i] + (long long)v.y * wv[4 * i + 1] +
             (long long)v.z * wv[4 * i + 2] + (long long)v.w * wv[4 * i + 3];
    }
    return __ll2float_rn(s) * 0x1p-18f;
}

/* Groups (the routed experts of a MoE layer): group g owns rows row_off[g] .. row_off[g+1] of x
 * and y and its own weight (wdata[g], wscale[g]; same shape for all). NULL row_off: one matrix. */
struct lq_groups {
    const uint8_t *const *wdata, *const *wscale;
    const int *row_off;
};

/* y [M, N] = x [M, K] @ w^T; grid.y tiles M by MT rows; grid.z = group */
template <bool FP4, int MT>
__global__ void __launch_bounds__(LQ_WARPS * 32)
linear_quant_kernel(const uint8_t *__restrict__ wdata, const uint8_t *__restrict__ wscale,
                    const float *__restrict__ x, int64_t M, int64_t N, int64_t K,
                    float *__restrict__ y, lq_groups grp) {
    DI_PDL_BEGIN();
    extern __shared__ int4 lq_smem[];
    const int nb = (int)(K / 32), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int *xi = reinterpret_cast<int *>(lq_smem);              /* [MT][nb][LQ_PAD] q * 2^9 */
    float *xs = reinterpret_cast<float *>(xi + MT * nb * LQ_PAD); /* [MT][nb] scales */
    const int64_t m0 = (int64_t)blockIdx.y * MT;
    if (grp.row_off) { /* this block's group: the same arithmetic on its rows and weight */
        const int g = blockIdx.z, r0 = grp.row_off[g];
        M = grp.row_off[g + 1] - r0;
        if (m0 >= M) return; /* uniform over the block */
        wdata = grp.wdata[g];
        wscale = grp.wscale[g];
        x += (int64_t)r0 * K;
        y += (int64_t)r0 * N;
    }

    /* stage: act_quant(x, 32) of rows m0 .. m0+MT-1 (rows past M are zeros, never written) */
    for (int idx = warp; idx < MT * nb; idx += LQ_WARPS) {
        int m = idx / nb, b = idx % nb;
        float v = m0 + m < M ? x[(m0 + m) * K + 32 * b + lane] : 0.0f;
        float amax = fmaxf(di_dev_warp_max(fabsf(v)), 1e-4f);
        float s = di_dev_pow2_ceil(amax * (1.0f / 448.0f));
        float q = di_dev_e4m3_rne(di_dev_clampf(v / s, -448.0f, 448.0f));
        xi[(m * nb + b) * LQ_PAD + lane] = di_dev_q_to_int512(q);
        if (lane == 0) xs[m * nb + b] = s;
    }
    __syncthreads();

    /* [warp][m][lane] scaled block sums of one 32-block step; row stride 33 so that lane m
     * reading row m and the 32 lanes writing one row are both conflict-free */
    __shared__ float term_s[LQ_WARPS][MT][33];
    const int64_t wrow_bytes = FP4 ? K / 2 : K;
    for (int64_t n = (int64_t)blockIdx.x * LQ_WARPS + warp; n < N; n += (int64_t)gridDim.x * LQ_WARPS) {
        const uint8_t *wrow = wdata + n * wrow_bytes;
        const uint8_t *srow = FP4 ? wscale + n * nb : wscale + (n / 32) * nb;
        float acc = 0.0f; /* lane m < MT: the fp32 accumulator of output (m0 + m, n) */
        wraw cur = {}, nxt = {};
        uint8_t cur_s = 0, nxt_s = 0;
        if (lane < nb) {
            cur = load_wraw<FP4>(wrow, lane);
            cur_s = srow[lane];
        }
        for (int b0 = 0; b0 < nb; b0 += 32) {
            const int b = b0 + lane;
            if (b + 32 < nb) { /* prefetch the next step's weights while this one computes */
                nxt = load_wraw<FP4>(wrow, b + 32);
                nxt_s = srow[b + 32];
            }
            if (b < nb) {
                int wv[32];
                decode_wraw<FP4>(cur, wv);
                const float ws = di_dev_e8m0(cur_s);
#pragma unroll
                for (int m = 0; m < MT; m++)
                    term_s[warp][m][lane] = block_sum<FP4>(xi + (m * nb + b) * LQ_PAD, wv) * xs[m * nb + b] * ws;
            }
            __syncwarp();
            if (lane < MT) { /* the CPU's order: one fp32 add per K block, ascending */
                const int cnt = nb - b0 < 32 ? nb - b0 : 32;
                for (int j = 0; j < cnt; j++) acc += term_s[warp][lane][j];
            }
            __syncwarp();
            cur = nxt;
            cur_s = nxt_s;
        }
        if (lane < MT && m0 + lane < M) y[(m0 + lane) * N + n] = di_dev_bf16_round(acc);
    }
}

template <bool FP4, int MT>
static void launch_mt(const di_weight *w, const float *x, int64_t m, float *y, cudaStream_t s,
                      lq_groups grp = lq_groups{nullptr, nullptr, nullptr}, int n_groups = 1) {
    const int64_t K = w->cols, N = w->rows, nb = K / 32;
    const size_t smem = (size_t)MT * nb * (LQ_PAD + 1) * 4;
    /* device queries once per instantiation (they cost more than a small launch); the occupancy
     * for the last K seen (the same few K values recur every layer) */
    static bool attr_set;
    static int64_t occ_k = -1;
    static int per_sm = 1;
    if (!attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(linear_quant_kernel<FP4, MT>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, LQ_SMEM_MAX));
        attr_set = true;
    }
    if (occ_k != K) {
        DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, linear_quant_kernel<FP4, MT>,
                                                                    LQ_WARPS * 32, smem));
        occ_k = K;
    }
    /* m: rows of the largest group (all rows for one matrix) */
    const int64_t tiles_m = (m + MT - 1) / MT;
    int64_t gx = (N + LQ_WARPS - 1) / LQ_WARPS,
            cap = (int64_t)di_cuda_sm_count() * (per_sm > 0 ? per_sm : 1) * 2 / (tiles_m * n_groups);
    if (cap < 1) cap = 1;
    if (gx > cap) gx = cap;
    dim3 grid((unsigned)gx, (unsigned)tiles_m, (unsigned)n_groups);
    linear_quant_kernel<FP4, MT><<<grid, LQ_WARPS * 32, smem, s>>>((const uint8_t *)w->data, w->scale,
                                                                  x, m, N, K, y, grp);
    DI_CUDA_LAUNCHED();
}

/* Row tile for m rows within the shared-memory budget of K (0 if none fits). */
static int pick_mt(int64_t m, int64_t nb) {
    int mt = m >= 8 ? 8 : (m >= 4 ? 4 : (m >= 2 ? 2 : 1));
    while (mt > 1 && (size_t)mt * nb * (LQ_PAD + 1) * 4 > LQ_SMEM_MAX) mt /= 2;
    return (size_t)mt * nb * (LQ_PAD + 1) * 4 > LQ_SMEM_MAX ? 0 : mt;
}

/* The row tile of the exact kernel for a weight and up to `rows` rows; unsupported weights (not FP8
 * or FP4, K not a multiple of 32, K beyond the shared-memory budget) end the process with `who`. */
static int exact_tile(const char *who, const di_weight *w, int64_t rows) {
    const int64_t K = w->cols;
    if (K % 32 != 0 || (w->dtype != DI_DT_F8_E4M3 && w->dtype != DI_DT_I8)) {
        fprintf(stderr, "%s: unsupported weight (dtype %d, cols %lld)\n", who, (int)w->dtype, (long long)K);
        abort();
    }
    const int mt = rows > 0 ? pick_mt(rows, K / 32) : 1;
    if (!mt) {
        fprintf(stderr, "%s: K = %lld too large for the staged kernel\n", who, (long long)K);
        abort();
    }
    return mt;
}

/* the kernel instance for the dtype and row tile */
static void dispatch(const di_weight *w, const float *x, int64_t m, float *y, cudaStream_t s, int mt, lq_groups grp,
                     int n_groups) {
    const bool fp4 = w->dtype == DI_DT_I8;
#define LQ_CASE(MT_)                                                              \
    case MT_:                                                                     \
        if (fp4) launch_mt<true, MT_>(w, x, m, y, s, grp, n_groups);              \
        else launch_mt<false, MT_>(w, x, m, y, s, grp, n_groups);                 \
        break;
    switch (mt) {
        LQ_CASE(1)
        LQ_CASE(2)
        LQ_CASE(4)
        LQ_CASE(8)
    }
#undef LQ_CASE
}

extern "C" void di_cuda_linear_quant_grouped(di_cuda_ctx *ctx, const di_weight *shape, const uint8_t *const *wdata,
                                             const uint8_t *const *wscale, const int *row_off, const int *active,
                                             int n_groups, int64_t rows, int64_t max_rows, const float *x, float *y) {
    cudaStream_t s = ctx->stream;
    if (!ctx->exact && di_cuda_linear_mma_supported(shape)) {
        di_cuda_linear_mma(ctx, shape, NULL, NULL, wdata, wscale, row_off, active, n_groups, rows, max_rows, x, y);
        return;
    }
    const int mt = exact_tile("di_cuda_linear_quant_grouped", shape, max_rows);
    if (n_groups <= 0 || max_rows <= 0 || shape->rows <= 0) return;
    dispatch(shape, x, max_rows, y, s, mt, lq_groups{wdata, wscale, row_off}, n_groups);
}

extern "C" void di_cuda_linear_quant_grouped_pair(di_cuda_ctx *ctx, const di_weight *shape,
                                                  const uint8_t *const *wdata_a, const uint8_t *const *wscale_a,
                                                  const uint8_t *const *wdata_b, const uint8_t *const *wscale_b,
                                                  const int *row_off, const int *active, int n_groups, int64_t rows,
                                                  int64_t max_rows, const float *x, const float *const *x_rows,
                                                  float *y_a, float *y_b) {
    if (!ctx->exact && di_cuda_linear_mma_supported(shape)) {
        di_cuda_linear_mma_pair(ctx, shape, wdata_a, wscale_a, wdata_b, wscale_b, row_off, active, n_groups, rows, max_rows,
                                x, x_rows, y_a, y_b);
        return;
    }
    if (x_rows) {
        fprintf(stderr, "di_cuda_linear_quant_grouped_pair: gathered rows need the tensor-core path\n");
        abort();
    }
    di_cuda_linear_quant_grouped(ctx, shape, wdata_a, wscale_a, row_off, active, n_groups, rows, max_rows, x, y_a);
    di_cuda_linear_quant_grouped(ctx, shape, wdata_b, wscale_b, row_off, active, n_groups, rows, max_rows, x, y_b);
}

/* Quantised linear: picks the row tile MT from M and the shared-memory budget. */
void di_cuda_linear_quant(di_cuda_ctx *ctx, const di_weight *w, const float *x, int64_t m, float *y) {
    cudaStream_t s = ctx->stream;
    if (!ctx->exact && di_cuda_linear_mma_supported(w) && ((uintptr_t)w->data & 15) == 0) {
        di_cuda_linear_mma(ctx, w, (const uint8_t *)w->data, w->scale, NULL, NULL, NULL, NULL, 1, m, m, x, y);
        return;
    }
    const int mt = exact_tile("di_cuda_linear_quant", w, m);
    if (((uintptr_t)w->data & 15) != 0) { /* 16-byte weight loads: upload each tensor on its own */
        fprintf(stderr, "di_cuda_linear_quant: weight data %p is not 16-byte aligned\n", w->data);
        abort();
    }
    if (m <= 0 || w->rows <= 0) return;
    dispatch(w, x, m, y, s, mt, lq_groups{nullptr, nullptr, nullptr}, 1);
}
