/* The quantised linears (FP8 e4m3 weights with 32x32 e8m0 scales, packed FP4 e2m1 weights with
 * 1x32 e8m0 scales; act_quant'ed e4m3 activations with per-32 scales) on wgmma, for prefill-sized
 * row counts. EXPERIMENTAL, off by default (DEEPINFER_GPU_WGMMA=1 -> di_cuda_ctx.wgmma;
 * cuda_linear_mma.cu calls it for the FP8 / FP4 calls past 16 rows a group): the same bits as the
 * mma.sync tiles, slower so far (docs/PERFORMANCE.md, session 8).
 *
 * Numerics: the mma.sync kernel's, bit for bit (test_cuda_fwd_ops "wgmma_twin"). sm_90 runs an
 * mma.sync e4m3 block sum as two f16 HMMAs, the k with k % 4 < 2 summed first and the others
 * accumulated onto that (tools/cuda/probe_mma_numerics.cu: identical on 2M wide-range sums). So
 * the operands are widened to f16 (exactly) with each 32-block's k in that order, and a block is
 * two m64n64k16 f16 wgmmas, the second accumulating; then the mma.sync kernel's fold, acc =
 * fma(blocksum, xs * ws, acc) in ascending K-block order. (The FP8 wgmma, QGMMA, keeps fewer bits:
 * 40% of activation-like block sums differ from exact, and the tiny fixture's replay error
 * tripled with it.)
 *
 * Roles: the weights are wgmma's A (64 weight rows per warpgroup), the activations its B (64
 * tokens per warpgroup), both K-major in shared memory in the 128-byte swizzle (cuda_wgmma.cuh):
 * y^T tile = W tile * X tile^T. A CTA has WGW x WGT warpgroups: 64 WGW weight rows x 64 WGT tokens.
 *
 * Pipeline: a stage is 128 K values (4 scale blocks): the activation codes, the weights (FP8
 * codes or packed FP4), the activation scales [token][4] and the weight scales [row or 32-row
 * block][4], all by cp.async into a ring of 4 stages loaded 2 ahead; once a stage has landed all
 * threads widen its operands into one of two f16 tile pairs. Per block: issue its wgmma pair into
 * one of two D buffers, wait for the previous block's and fold it while this one runs on the
 * tensor cores; the stage's last block is waited for and folded before the next stage (ptxas
 * serialises every wgmma when a D register is read across a loop's back edge while a wgmma is in
 * flight). ~160 registers, ~170-200 KB of shared memory: one CTA of two warpgroups per SM -- the
 * reason it is slow (each warpgroup's waits and folds are not covered by another's wgmmas). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_linear_mma.h"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_wgmma.cuh"

#define WG_TN 64     /* tokens per warpgroup (wgmma N) */
#define WG_STAGES 4  /* ring of stages; loads run 2 stages ahead */

template <bool FP4, int WGW, int WGT>
struct wg_layout {
    static constexpr int BW = 64 * WGW, BT = WG_TN * WGT; /* weight rows, tokens per CTA */
    static constexpr int ACT = BT * 128;                   /* [BT][128] e4m3 codes as loaded */
    static constexpr int WT = FP4 ? BW * 64 : BW * 128;    /* FP4 [BW][64] packed | FP8 [BW][128] codes */
    static constexpr int SA = BT * 16;                     /* [BT][4] fp32 activation scales */
    static constexpr int SW = FP4 ? BW * 4 : (BW / 32) * 4; /* [rows][4] e8m0 weight scales */
    static constexpr int STAGE = (ACT + WT + SA + SW + 1023) / 1024 * 1024;
    /* f16 operand tiles of one stage, two 64-value panels each [rows][128 bytes], swizzled */
    static constexpr int A16 = BW * 256, B16 = BT * 256, OPS = A16 + B16;
    static constexpr int SMEM = WG_STAGES * STAGE + 2 * OPS + 1024; /* + alignment slack */
};

template <bool FP4, int WGW, int WGT>
__global__ void __launch_bounds__(128 * WGW * WGT, 1)
wg_gemm_kernel(const uint8_t *__restrict__ xq, const float *__restrict__ xs, int64_t M, int64_t N, int64_t K,
               const uint8_t *__restrict__ wdata, const uint8_t *__restrict__ wscale, float *__restrict__ y,
               mm_groups grp, int ksplit, int split_blocks, float *__restrict__ part, int64_t part_stride) {
    typedef wg_layout<FP4, WGW, WGT> L;
    constexpr int NT = 128 * WGW * WGT;
    extern __shared__ int4 wg_smem4[];
    uint8_t *smem = di_smem_align1024(reinterpret_cast<uint8_t *>(wg_smem4));
    const int64_t nb = K / 32, wrow = FP4 ? K / 2 : K;
    const int64_t n0 = (int64_t)blockIdx.x * L::BW, m0 = (int64_t)blockIdx.y * L::BT;
    const int ks = blockIdx.z % ksplit, gz = blockIdx.z / ksplit;
    const int64_t blk0 = (int64_t)ks * split_blocks, blk1 = blk0 + split_blocks < nb ? blk0 + split_blocks : nb;
    const int64_t kt0 = blk0 / 4, nk = (blk1 - blk0) / 4; /* K % 128 == 0, splits on 16 blocks */
    if (ksplit > 1) y = part + ks * part_stride;
    if (grp.row_off) {
        int r0;
        if (!mm_group_select(grp, gz, m0, &M, &wdata, &wscale, &r0)) return; /* uniform over the block */
        xq += (int64_t)r0 * K;
        xs += (int64_t)r0 * nb;
        y += (int64_t)r0 * N;
    }
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int wg = warp >> 2, wgw = wg % WGW, wgt = wg / WGW;
    const int rw0 = wgw * 64 + (warp & 3) * 16 + g; /* this thread's weight rows: rw0, rw0 + 8 */
    const int tc0 = wgt * WG_TN + 2 * t4;            /* its tokens: tc0 + 8 i, + 1 (i = 0..7) */

    auto load_stage = [&](int st, int64_t kt) {
        uint8_t *act = smem + st * L::STAGE, *wt = act + L::ACT, *sw = wt + L::WT + L::SA;
        float *sa = reinterpret_cast<float *>(wt + L::WT);
        for (int i = tid; i < L::BT * 8; i += NT) { /* token r, 16-byte chunk c */
            const int r = i >> 3, c = i & 7;
            const bool ok = m0 + r < M;
            di_cp_async16(act + r * 128 + 16 * c, ok ? xq + (m0 + r) * K + kt * 128 + 16 * c : xq, ok);
        }
        constexpr int WCH = FP4 ? 4 : 8; /* 16-byte chunks per weight row and stage */
        for (int i = tid; i < L::BW * WCH; i += NT) {
            const int r = i / WCH, c = i % WCH;
            const bool ok = n0 + r < N;
            di_cp_async16(wt + r * (WCH * 16) + 16 * c, ok ? wdata + (n0 + r) * wrow + kt * (WCH * 16) + 16 * c : wdata, ok);
        }
        for (int i = tid; i < L::BT; i += NT) {
            const bool ok = m0 + i < M;
            di_cp_async16(sa + 4 * i, ok ? xs + (m0 + i) * nb + 4 * kt : xs, ok);
        }
        constexpr int SROWS = FP4 ? L::BW : L::BW / 32;
        for (int i = tid; i < SROWS; i += NT) {
            const bool ok = n0 + (FP4 ? i : 32 * i) < N;
            const int64_t srow = FP4 ? n0 + i : n0 / 32 + i;
            di_cp_async4(sw + 4 * i, ok ? wscale + srow * nb + 4 * kt : wscale, ok);
        }
    };
    /* Stage st's operands -> the f16 tiles `ops` (A: BW weight rows, then B: BT tokens), each row
     * two 64-value panels [rows][128 bytes] in the 128-byte swizzle. Within every 32-value block
     * the k with k % 4 < 2 come first (positions 0-15), then the others: the two k16 wgmma steps
     * then sum the halves that mma.sync's two f16 HMMAs sum, which gives its bits. A 16-value
     * chunk c of a stage row (k 16c ..) splits into the halves' positions 8 (c & 1) .. of block c / 2. */
    auto put16 = [&](uint8_t *tile, int rows, int r, int c, uint4 codes) {
        const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
        uint32_t lo[4], hi[4]; /* f16 pairs of codes 4i, 4i + 1 (k % 4 < 2) and 4i + 2, 4i + 3 */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = di_e4m3x2_to_f16x2((uint16_t)(w[i] & 0xffffu));
            hi[i] = di_e4m3x2_to_f16x2((uint16_t)(w[i] >> 16));
        }
        const int j = c >> 1, cc = (j & 1) * 4 + (c & 1); /* 16-byte chunk of the low half in the panel row */
        uint8_t *row = tile + (j >> 1) * rows * 128 + r * 128;
        *reinterpret_cast<uint4 *>(row + ((cc ^ (r & 7)) << 4)) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        *reinterpret_cast<uint4 *>(row + (((cc + 2) ^ (r & 7)) << 4)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    };
    uint8_t *const ops0 = smem + WG_STAGES * L::STAGE;
    auto to_f16 = [&](int st, uint8_t *ops) {
        const uint8_t *act = smem + st * L::STAGE, *wt = act + L::ACT;
        for (int i = tid; i < L::BT * 8; i += NT) {
            const int r = i >> 3, c = i & 7;
            put16(ops + L::A16, L::BT, r, c, *reinterpret_cast<const uint4 *>(act + r * 128 + 16 * c));
        }
        for (int i = tid; i < L::BW * 8; i += NT) {
            const int r = i >> 3, c = i & 7;
            uint4 codes;
            if (FP4) { /* 16 packed values -> 16 e4m3 codes */
                const uint2 p = *reinterpret_cast<const uint2 *>(wt + r * 64 + 8 * c);
                codes = make_uint4(di_e2m1x4_to_e4m3x4(p.x & 0xffffu), di_e2m1x4_to_e4m3x4(p.x >> 16),
                                   di_e2m1x4_to_e4m3x4(p.y & 0xffffu), di_e2m1x4_to_e4m3x4(p.y >> 16));
            } else {
                codes = *reinterpret_cast<const uint4 *>(wt + r * 128 + 16 * c);
            }
            put16(ops, L::BW, r, c, codes);
        }
    };
    /* descriptors of k16 step h of block j: this warpgroup's weight rows / tokens in the f16 tiles */
    auto desc_a = [&](const uint8_t *ops, int j, int h) {
        return di_wgmma_desc_sw128(ops + (j >> 1) * L::BW * 128 + wgw * 64 * 128 + (j & 1) * 64 + 32 * h);
    };
    auto desc_b = [&](const uint8_t *ops, int j, int h) {
        return di_wgmma_desc_sw128(ops + L::A16 + (j >> 1) * L::BT * 128 + wgt * WG_TN * 128 + (j & 1) * 64 + 32 * h);
    };

    float acc[32];
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = 0.0f;
    /* acc += block j of stage st: fma(d, xs * ws, acc), the mma.sync kernel's fold */
    auto fold = [&](float (&d)[32], int st, int j) {
        di_wgmma_pin(d);
        const uint8_t *stg = smem + st * L::STAGE + L::ACT + L::WT;
        const float *sa = reinterpret_cast<const float *>(stg);
        const uint8_t *sw = stg + L::SA;
        const float w0 = di_dev_e8m0(sw[FP4 ? 4 * rw0 + j : 4 * (rw0 / 32) + j]);
        const float w1 = FP4 ? di_dev_e8m0(sw[4 * (rw0 + 8) + j]) : w0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float s0 = sa[4 * (tc0 + 8 * i) + j], s1 = sa[4 * (tc0 + 8 * i + 1) + j];
            acc[4 * i + 0] = __fmaf_rn(d[4 * i + 0], s0 * w0, acc[4 * i + 0]);
            acc[4 * i + 1] = __fmaf_rn(d[4 * i + 1], s1 * w0, acc[4 * i + 1]);
            acc[4 * i + 2] = __fmaf_rn(d[4 * i + 2], s0 * w1, acc[4 * i + 2]);
            acc[4 * i + 3] = __fmaf_rn(d[4 * i + 3], s1 * w1, acc[4 * i + 3]);
        }
    };
    float d0[32], d1[32];
    /* block j: the k % 4 < 2 half with a zero accumulator, then the other half accumulated */
    auto issue = [&](float (&d)[32], const uint8_t *ops, int j) {
        di_wgmma_fence();
        di_wgmma_f16_m64n64k16(d, desc_a(ops, j, 0), desc_b(ops, j, 0), 0);
        di_wgmma_f16_m64n64k16(d, desc_a(ops, j, 1), desc_b(ops, j, 1), 1);
        di_wgmma_commit();
    };

    load_stage(0, kt0);
    di_cp_async_commit();
    if (nk > 1) load_stage(1, kt0 + 1);
    di_cp_async_commit();
    for (int64_t it = 0; it < nk; it++) {
        di_cp_async_wait<1>(); /* this stage landed (the next may still be in flight) */
        const int st = (int)(it % WG_STAGES);
        __syncthreads(); /* landed for every thread; the f16 tiles of stage it-2 are retired */
        uint8_t *ops = ops0 + (it & 1) * L::OPS;
        to_f16(st, ops);
        di_fence_proxy_async();
        __syncthreads(); /* visible to the async proxy; stage it-2 is retired and folded everywhere */
        if (it + 2 < nk) load_stage((int)((it + 2) % WG_STAGES), kt0 + it + 2);
        di_cp_async_commit();
        issue(d0, ops, 0);
        issue(d1, ops, 1);
        di_wgmma_wait<1>();
        fold(d0, st, 0);
        issue(d0, ops, 2);
        di_wgmma_wait<1>();
        fold(d1, st, 1);
        issue(d1, ops, 3);
        di_wgmma_wait<1>();
        fold(d0, st, 2);
        di_wgmma_wait<0>();
        fold(d1, st, 3);
    }
    di_cp_async_wait<0>();

    const bool round = ksplit == 1; /* partial sums stay fp32 */
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t tok = m0 + tc0 + 8 * i + h;
            if (tok >= M) continue;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int64_t n = n0 + rw0 + 8 * r;
                const float v = acc[4 * i + 2 * r + h];
                if (n < N) y[tok * N + n] = round ? di_dev_bf16_round(v) : v;
            }
        }
}

template <bool FP4, int WGW, int WGT>
static void wg_launch(const uint8_t *xq, const float *xs, int64_t max_rows, int64_t N, int64_t K,
                      const uint8_t *wdata, const uint8_t *wscale, float *y, const mm_groups &grp, unsigned slots,
                      int64_t rows, int ksplit, int split_blocks, float *part, cudaStream_t s) {
    typedef wg_layout<FP4, WGW, WGT> L;
    static bool attr_set;
    if (!attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(wg_gemm_kernel<FP4, WGW, WGT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           L::SMEM));
        attr_set = true;
    }
    const dim3 grid((unsigned)((N + L::BW - 1) / L::BW), (unsigned)((max_rows + L::BT - 1) / L::BT),
                    slots * (unsigned)ksplit);
    wg_gemm_kernel<FP4, WGW, WGT><<<grid, 128 * WGW * WGT, L::SMEM, s>>>(xq, xs, max_rows, N, K, wdata, wscale, y, grp,
                                                                        ksplit, split_blocks, part, rows * N);
    DI_CUDA_LAUNCHED();
}

void di_wg_gemm(bool fp4, const uint8_t *xq, const float *xs, int64_t max_rows, int64_t N,
                int64_t K, const uint8_t *wdata, const uint8_t *wscale, float *y, const mm_groups &grp, int n_groups,
                int64_t rows, int ksplit, int split_blocks, float *part, cudaStream_t s) {
    /* with an active list only min(groups, rows) slots can have rows */
    const unsigned slots = (unsigned)(grp.active && rows < n_groups ? rows : n_groups);
    /* 128 weight rows x 64 tokens a CTA (a CTA of 4 warpgroups would need 2x the registers) */
    if (fp4) wg_launch<true, 2, 1>(xq, xs, max_rows, N, K, wdata, wscale, y, grp, slots, rows, ksplit, split_blocks, part, s);
    else wg_launch<false, 2, 1>(xq, xs, max_rows, N, K, wdata, wscale, y, grp, slots, rows, ksplit, split_blocks, part, s);
}
