/* The quantised linears (FP8 e4m3 weights with 32x32 e8m0 scales, packed FP4 e2m1 weights with
 * 1x32 e8m0 scales; act_quant'ed e4m3 activations with per-32 scales) on wgmma, for prefill-sized
 * row counts. EXPERIMENTAL, off by default (DEEPINFER_GPU_WGMMA=1 -> di_cuda_ctx.wgmma;
 * cuda_linear_mma.cu hands it the FP8 / FP4 calls past 16 rows a group): the same bits as the
 * mma.sync tiles (docs/PERFORMANCE.md, sessions 8-9).
 *
 * Numerics: the mma.sync kernel's, bit for bit (test_cuda_fwd_ops "wgmma_twin"). sm_90 runs an
 * mma.sync e4m3 block sum as two f16 HMMAs, the k with k % 4 < 2 summed first and the others
 * accumulated onto that (tools/cuda/probe_mma_numerics.cu: identical on 2M wide-range sums). So
 * the operands are widened to f16 (exactly) with each 32-block's k in that order, and a block is
 * two k16 f16 wgmmas, the second accumulating; then the mma.sync kernel's fold, acc =
 * fma(blocksum, xs * ws, acc) in ascending K-block order. (The FP8 wgmma, QGMMA, keeps fewer bits:
 * 40% of activation-like block sums differ from exact, and the tiny fixture's replay error
 * tripled with it.) The activations are widened once per call (act_quant_f16_kernel: the
 * act_quant codes as f16, permuted so), the weights per CTA.
 *
 * Roles (one CTA of three warpgroups a multiprocessor): warpgroups 0 and 1 consume, each 64 of
 * the CTA's 128 weight rows x BT tokens (wgmma m64nBTk16: weights as A, tokens as B, both K-major
 * f16 in the 128-byte swizzle); warpgroup 2 produces. A stage is 64 K values (2 scale blocks).
 * The producer copies (cp.async) the stage's f16 activations and their scales straight into one
 * of WG_SLOTS operand slots and the raw weight codes into its own ring, WG_AHEAD stages ahead,
 * then widens the weights (e2m1 -> e4m3 -> f16) into the slot and signals it full (named
 * barrier); the consumers wait for it, run each block's two wgmmas, fold, and signal the slot
 * empty. So the widening and the loads overlap the consumers' wgmmas, and one consumer's wait
 * and fold overlap the other's wgmmas (in the session-8 version every thread widened between
 * barriers and each warpgroup waited out its own wgmmas: slower than mma.sync). The weight
 * scales of the CTA's rows for its whole K split are copied once, at the start. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_linear_mma.h"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_wgmma.cuh"

#define WG_BW 128        /* weight rows per CTA: two consumer warpgroups of 64 */
#define WG_THREADS 384   /* two consumer warpgroups, then the producer */
#define WG_SLOTS 5       /* f16 operand slots, a stage each */
#define WG_AHEAD 3       /* stages loaded ahead of the widening (<= WG_SLOTS - 2: the producer
                          * widens stage s while the consumers still hold s - 1) */
#define WG_RAW (WG_AHEAD + 1) /* the producer's ring of raw weight stages */
/* weight-scale blocks of one K split cached per CTA: FP4 one byte a row and block (K <= 5120),
 * FP8 one a 32-row block */
#define WG_SCALE_BLOCKS_FP4 160
#define WG_SCALE_BLOCKS_FP8 1024

/* named barriers: the producer's own, then one "full" and one "empty" per slot */
enum { WG_BAR_PRODUCER = 1, WG_BAR_FULL = 2, WG_BAR_EMPTY = 2 + WG_SLOTS };

template <bool FP4, int BT>
struct wg_layout {
    static constexpr int W16 = WG_BW * 128; /* [BW][128 B] the stage's weights, 64 f16 a row, swizzled */
    static constexpr int X16 = BT * 128;    /* [BT][128 B] its activations */
    static constexpr int XS = 2 * BT * 4;   /* [2][BT] fp32 activation scales of its two blocks */
    static constexpr int SLOT = (W16 + X16 + XS + 1023) / 1024 * 1024;
    static constexpr int RAW = FP4 ? WG_BW * 32 : WG_BW * 64; /* [BW][32 | 64 B] packed FP4 | FP8 codes */
    static constexpr int SCALE_ROWS = FP4 ? WG_BW : WG_BW / 32;
    static constexpr int SCALES = SCALE_ROWS * (FP4 ? WG_SCALE_BLOCKS_FP4 : WG_SCALE_BLOCKS_FP8); /* [rows][split] e8m0 */
    static constexpr int SMEM = WG_SLOTS * SLOT + WG_RAW * RAW + SCALES + 1024; /* + alignment slack */
};

/* act_quant(x, 32) as f16 values of the e4m3 codes (exact), each 32-block's k reordered: first
 * the k with k % 4 < 2, then the others (what the wgmma pair sums as mma.sync's HMMA pair does);
 * scales as di_cuda_act_quant_e4m3. 8 lanes a block, 4 values a lane (act_quant_e4m3_kernel's
 * quantisation). */
__global__ void act_quant_f16_kernel(const float *__restrict__ x, int64_t n_blocks, uint32_t *__restrict__ xh,
                                     float *__restrict__ s) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, blk = i >> 3;
    if ((i & ~(int64_t)31) >= n_blocks * 8) return; /* whole warps */
    const bool live = blk < n_blocks;
    const float4 v = di_dev_load_row4(live ? x + 4 * i : nullptr, 0);
    float sc;
    const uint32_t codes = di_act_quant_e4m3_x4(v, &sc);
    if (!live) return;
    const int l = (int)(i & 7); /* k 4l .. 4l + 3 -> positions 2l, 2l + 1 and 16 + 2l, 16 + 2l + 1 */
    xh[16 * blk + l] = di_e4m3x2_to_f16x2((uint16_t)(codes & 0xffffu));
    xh[16 * blk + 8 + l] = di_e4m3x2_to_f16x2((uint16_t)(codes >> 16));
    if (l == 0) s[blk] = sc;
}

void di_cuda_act_quant_f16(const float *x, int64_t n_blocks, uint16_t *xh, float *scale, cudaStream_t s) {
    if (n_blocks <= 0) return;
    const int64_t threads = 256;
    act_quant_f16_kernel<<<(unsigned)((n_blocks * 8 + threads - 1) / threads), (unsigned)threads, 0, s>>>(
        x, n_blocks, reinterpret_cast<uint32_t *>(xh), scale);
    DI_CUDA_LAUNCHED();
}

/* the k16 wgmma of a consumer: N = 64 or 128 tokens */
static __device__ __forceinline__ void wg_mma(float (&d)[32], uint64_t a, uint64_t b, int acc) {
    di_wgmma_f16_m64n64k16(d, a, b, acc);
}
static __device__ __forceinline__ void wg_mma(float (&d)[64], uint64_t a, uint64_t b, int acc) {
    di_wgmma_f16_m64n128k16(d, a, b, acc);
}

/* xh: [rows][K] f16 (act_quant_f16_kernel's), xs [rows][K/32]; y [rows][N] (or part[ks]) */
template <bool FP4, int BT>
__global__ void __launch_bounds__(WG_THREADS, 1)
wg_gemm_kernel(const uint16_t *__restrict__ xh, const float *__restrict__ xs, int64_t M, int64_t N, int64_t K,
               const uint8_t *__restrict__ wdata, const uint8_t *__restrict__ wscale, float *__restrict__ y,
               mm_groups grp, int ksplit, int split_blocks, float *__restrict__ part, int64_t part_stride) {
    typedef wg_layout<FP4, BT> L;
    constexpr int NI = BT / 8; /* n8 column groups of a consumer's D */
    extern __shared__ int4 wg_smem4[];
    uint8_t *const smem = di_smem_align1024(reinterpret_cast<uint8_t *>(wg_smem4)); /* [WG_SLOTS][SLOT] */
    uint8_t *const raw0 = smem + WG_SLOTS * L::SLOT;                                /* [WG_RAW][RAW] */
    uint8_t *const scales = raw0 + WG_RAW * L::RAW;                                 /* [SCALE_ROWS][nbs] */
    const int64_t nb = K / 32, wrow = FP4 ? K / 2 : K;
    const int64_t n0 = (int64_t)blockIdx.x * WG_BW, m0 = (int64_t)blockIdx.y * BT;
    const int ks = blockIdx.z % ksplit, gz = blockIdx.z / ksplit;
    const int64_t blk0 = (int64_t)ks * split_blocks, blk1 = blk0 + split_blocks < nb ? blk0 + split_blocks : nb;
    const int nbs = (int)(blk1 - blk0), nk = nbs / 2; /* K % 128 == 0, splits on 16 blocks */
    if (ksplit > 1) y = part + ks * part_stride;
    if (grp.row_off) {
        int r0;
        if (!mm_group_select(grp, gz, m0, &M, &wdata, &wscale, &r0)) return; /* uniform over the block */
        xh += (int64_t)r0 * K;
        xs += (int64_t)r0 * nb;
        y += (int64_t)r0 * N;
    }
    const int tid = threadIdx.x, wg = tid >> 7;

    if (wg == 2) { /* ---- the producer ---- */
        const int p = tid - 256;
        /* the split's weight scales of the CTA's rows (FP4) or 32-row blocks (FP8), once */
        const int words = nbs / 4;
        for (int i = p; i < L::SCALE_ROWS * words; i += 128) {
            const int r = i / words, c = i % words;
            const bool ok = FP4 ? n0 + r < N : n0 + 32 * r < N;
            const int64_t srow = FP4 ? n0 + r : n0 / 32 + r;
            di_cp_async4(scales + r * nbs + 4 * c, ok ? wscale + srow * nb + blk0 + 4 * c : wscale, ok);
        }
        /* stage st's activations and scales into its slot, its weight codes into the raw ring */
        auto load = [&](int st) {
            const int64_t b = blk0 + 2 * st; /* its first K block */
            uint8_t *x16 = smem + (st % WG_SLOTS) * L::SLOT + L::W16;
            float *sa = reinterpret_cast<float *>(x16 + L::X16);
            for (int i = p; i < BT * 8; i += 128) { /* token r, 16-byte chunk c (swizzled) */
                const int r = i >> 3, c = i & 7;
                const bool ok = m0 + r < M;
                di_cp_async16(x16 + r * 128 + ((c ^ (r & 7)) << 4), ok ? xh + (m0 + r) * K + 32 * b + 8 * c : xh, ok);
            }
            for (int i = p; i < 2 * BT; i += 128) {
                const int j = i / BT, r = i % BT;
                const bool ok = m0 + r < M;
                di_cp_async4(sa + j * BT + r, ok ? xs + (m0 + r) * nb + b + j : xs, ok);
            }
            constexpr int RCH = FP4 ? 2 : 4; /* 16-byte chunks per weight row and stage */
            uint8_t *raw = raw0 + (st % WG_RAW) * L::RAW;
            for (int i = p; i < WG_BW * RCH; i += 128) {
                const int r = i / RCH, c = i % RCH;
                const bool ok = n0 + r < N;
                di_cp_async16(raw + r * (16 * RCH) + 16 * c,
                              ok ? wdata + (n0 + r) * wrow + b * (16 * RCH / 2) + 16 * c : wdata, ok);
            }
        };
        /* stage st's weights -> f16 in its slot. Item (row r, block j, half h: k 16h .. 16h + 15 of
         * the block): the k with k % 4 < 2 go to chunk 4j + h of the row, the others to 4j + 2 + h */
        auto widen = [&](int st) {
            const uint8_t *raw = raw0 + (st % WG_RAW) * L::RAW;
            uint8_t *w16 = smem + (st % WG_SLOTS) * L::SLOT;
            for (int i = p; i < WG_BW * 4; i += 128) {
                const int r = i >> 2, j = (i >> 1) & 1, h = i & 1;
                uint32_t w[4]; /* e4m3 codes of k 16h + 4q .. + 3 */
                if (FP4) {
                    const uint2 v = *reinterpret_cast<const uint2 *>(raw + r * 32 + 16 * j + 8 * h);
                    w[0] = di_e2m1x4_to_e4m3x4(v.x & 0xffffu);
                    w[1] = di_e2m1x4_to_e4m3x4(v.x >> 16);
                    w[2] = di_e2m1x4_to_e4m3x4(v.y & 0xffffu);
                    w[3] = di_e2m1x4_to_e4m3x4(v.y >> 16);
                } else {
                    const uint4 v = *reinterpret_cast<const uint4 *>(raw + r * 64 + 32 * j + 16 * h);
                    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
                }
                uint32_t lo[4], hi[4];
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    lo[q] = di_e4m3x2_to_f16x2((uint16_t)(w[q] & 0xffffu));
                    hi[q] = di_e4m3x2_to_f16x2((uint16_t)(w[q] >> 16));
                }
                uint8_t *row = w16 + r * 128;
                *reinterpret_cast<uint4 *>(row + (((4 * j + h) ^ (r & 7)) << 4)) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
                *reinterpret_cast<uint4 *>(row + (((4 * j + 2 + h) ^ (r & 7)) << 4)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            }
        };
        for (int st = 0; st < WG_AHEAD; st++) { /* the first stages' slots are free */
            if (st < nk) load(st);
            di_cp_async_commit();
        }
        for (int st = 0; st < nk; st++) {
            di_cp_async_wait<WG_AHEAD - 1>();   /* stage st landed (this thread's copies) */
            di_bar_sync(WG_BAR_PRODUCER, 128); /* everyone's; and stage st - 1's raw ring entry is widened */
            const int next = st + WG_AHEAD;
            if (next < nk) {
                if (next >= WG_SLOTS) di_bar_sync(WG_BAR_EMPTY + next % WG_SLOTS, WG_THREADS); /* next - SLOTS consumed */
                load(next);
            }
            di_cp_async_commit();
            widen(st);
            di_fence_proxy_async(); /* the slot's copies and stores, visible to wgmma */
            di_bar_arrive(WG_BAR_FULL + st % WG_SLOTS, WG_THREADS);
        }
        di_cp_async_wait<0>();
        return;
    }

    /* ---- the consumers: rows rw0, rw0 + 8 of the CTA's weight rows x tokens tc0 + 8i, + 1 ---- */
    const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int rw0 = wg * 64 + (warp & 3) * 16 + g, tc0 = 2 * t4;
    const uint8_t *sw0 = scales + (FP4 ? rw0 : rw0 / 32) * nbs, *sw1 = FP4 ? sw0 + 8 * nbs : sw0;
    float acc[4 * NI];
#pragma unroll
    for (int i = 0; i < 4 * NI; i++) acc[i] = 0.0f;
    /* acc += block j of the slot (split block bl): fma(d, xs * ws, acc), the mma.sync kernel's fold */
    auto fold = [&](float (&d)[4 * NI], const uint8_t *slot, int j, int bl) {
        di_wgmma_pin(d);
        const float *sa = reinterpret_cast<const float *>(slot + L::W16 + L::X16) + j * BT;
        const float w0 = di_dev_e8m0(sw0[bl]), w1 = FP4 ? di_dev_e8m0(sw1[bl]) : w0;
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const float2 s = *reinterpret_cast<const float2 *>(sa + tc0 + 8 * i);
            acc[4 * i + 0] = __fmaf_rn(d[4 * i + 0], s.x * w0, acc[4 * i + 0]);
            acc[4 * i + 1] = __fmaf_rn(d[4 * i + 1], s.y * w0, acc[4 * i + 1]);
            acc[4 * i + 2] = __fmaf_rn(d[4 * i + 2], s.x * w1, acc[4 * i + 2]);
            acc[4 * i + 3] = __fmaf_rn(d[4 * i + 3], s.y * w1, acc[4 * i + 3]);
        }
    };
    /* block j of the slot: the k % 4 < 2 half with a zero accumulator, then the other half */
    auto issue = [&](float (&d)[4 * NI], const uint8_t *slot, int j) {
        const uint8_t *a = slot + wg * 64 * 128 + 64 * j, *b = slot + L::W16 + 64 * j;
        di_wgmma_fence();
        wg_mma(d, di_wgmma_desc_sw128(a), di_wgmma_desc_sw128(b), 0);
        wg_mma(d, di_wgmma_desc_sw128(a + 32), di_wgmma_desc_sw128(b + 32), 1);
        di_wgmma_commit();
    };
    float d0[4 * NI];
    for (int st = 0; st < nk; st++) {
        const uint8_t *slot = smem + (st % WG_SLOTS) * L::SLOT;
        di_bar_sync(WG_BAR_FULL + st % WG_SLOTS, WG_THREADS);
        if (BT == 64) { /* both blocks in flight (two D buffers fit the registers) */
            float d1[4 * NI];
            issue(d0, slot, 0);
            issue(d1, slot, 1);
            di_wgmma_wait<1>();
            fold(d0, slot, 0, 2 * st);
            di_wgmma_wait<0>();
            fold(d1, slot, 1, 2 * st + 1);
        } else {
#pragma unroll
            for (int j = 0; j < 2; j++) {
                issue(d0, slot, j);
                di_wgmma_wait<0>();
                fold(d0, slot, j, 2 * st + j);
            }
        }
        /* the producer waits for the slot only if it loads a later stage into it */
        if (st + WG_SLOTS < nk) di_bar_arrive(WG_BAR_EMPTY + st % WG_SLOTS, WG_THREADS);
    }

    const bool round = ksplit == 1; /* partial sums stay fp32 */
#pragma unroll
    for (int i = 0; i < NI; i++)
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

template <bool FP4, int BT>
static void wg_launch(const uint16_t *xh, const float *xs, int64_t max_rows, int64_t N, int64_t K,
                      const uint8_t *wdata, const uint8_t *wscale, float *y, const mm_groups &grp, unsigned slots,
                      int64_t rows, int ksplit, int split_blocks, float *part, cudaStream_t s) {
    typedef wg_layout<FP4, BT> L;
    static bool attr_set;
    if (!attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(wg_gemm_kernel<FP4, BT>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::SMEM));
        attr_set = true;
    }
    const dim3 grid((unsigned)((N + WG_BW - 1) / WG_BW), (unsigned)((max_rows + BT - 1) / BT), slots * (unsigned)ksplit);
    wg_gemm_kernel<FP4, BT><<<grid, WG_THREADS, L::SMEM, s>>>(xh, xs, max_rows, N, K, wdata, wscale, y, grp, ksplit,
                                                            split_blocks, part, rows * N);
    DI_CUDA_LAUNCHED();
}

bool di_wg_gemm_fits(bool fp4, int64_t K) {
    return K % 128 == 0 && K / 32 <= (fp4 ? WG_SCALE_BLOCKS_FP4 : WG_SCALE_BLOCKS_FP8);
}

void di_wg_gemm(bool fp4, const uint16_t *xh, const float *xs, int64_t max_rows, int64_t rows_per_group, int64_t N,
                int64_t K, const uint8_t *wdata, const uint8_t *wscale, float *y, const mm_groups &grp, int n_groups,
                int64_t rows, int ksplit, int split_blocks, float *part, cudaStream_t s) {
    /* with an active list only min(groups, rows) slots can have rows */
    const unsigned slots = (unsigned)(grp.active && rows < n_groups ? rows : n_groups);
    /* 64 tokens a CTA up to 64 rows a group (both blocks of a stage in flight), else 128 */
    if (rows_per_group <= 64) {
        if (fp4) wg_launch<true, 64>(xh, xs, max_rows, N, K, wdata, wscale, y, grp, slots, rows, ksplit, split_blocks, part, s);
        else wg_launch<false, 64>(xh, xs, max_rows, N, K, wdata, wscale, y, grp, slots, rows, ksplit, split_blocks, part, s);
    } else {
        if (fp4) wg_launch<true, 128>(xh, xs, max_rows, N, K, wdata, wscale, y, grp, slots, rows, ksplit, split_blocks, part, s);
        else wg_launch<false, 128>(xh, xs, max_rows, N, K, wdata, wscale, y, grp, slots, rows, ksplit, split_blocks, part, s);
    }
}
