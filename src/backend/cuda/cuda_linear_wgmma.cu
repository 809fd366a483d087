/* The quantised linears (FP8 e4m3 weights with 32x32 e8m0 scales, packed FP4 e2m1 weights with
 * 1x32 e8m0 scales; act_quant'ed e4m3 activations with per-32 scales) on wgmma, for prefill-sized
 * row counts. The default (DEEPINFER_GPU_WGMMA, on -> di_cuda_ctx.wgmma; cuda_linear_mma.cu hands
 * it the FP8 / FP4 calls past the decode twin's rows, outside batch-invariant and exact modes): 2.2x
 * the mma.sync tiles at 512 rows an expert (docs/PERFORMANCE.md, sessions 8-9). The BF16 plain
 * linears (router gate, head, compressor and indexer weights) past the same rows take it too
 * (di_wg_gemm_w16, WG_W16: the weights copied as they are, in the activations' swizzle, and loaded
 * into A fragments by ldmatrix -- no scales, no dequantisation; session 35: at B = 256 the head
 * 1.86 -> 1.04 ms, the router's gate 30 -> 18.5 us a layer against the mma.sync tiles). The slots
 * pass between the roles through mbarriers: with named barriers (bar.arrive / bar.sync) racecheck reported every
 * refill as a race, as it does for any arrive / sync handshake over shared memory
 * (tools/cuda/probe_racecheck.cu, docs/CUDA.md session 10).
 *
 * Numerics: the operands are dequantised exactly to bf16 -- the activations' codes times their
 * scales once per call (act_quant_bf16_kernel: the CPU's act_quant values), the weights' codes
 * times their e8m0 scales per CTA (e4m3 and e2m1 values have at most 4 significant bits, the
 * scales are powers of two, bf16 has fp32's exponent range) -- so each product is the CPU's
 * product exactly, and the tensor core sums them over the whole K in fp32 (bf16 wgmma k16
 * steps). That is the reference's sum to fp32 rounding, but not the mma.sync tiles' bits: those
 * fold each 32-block's sum with its scales (acc = fma(blocksum, xs * ws, acc)), which needs two
 * CUDA-core instructions per output and block -- as many issue slots as the 16-bit tensor rate
 * leaves, so an exact twin on wgmma ran no faster than mma.sync (session 9). Batch-invariant and
 * exact modes never come here. (The FP8 wgmma, QGMMA, keeps fewer bits of the products' sum: the
 * tiny fixture's replay error tripled with it.)
 *
 * The dequantisation (its issue slots bound this kernel) has two forms with the same bf16 values:
 * "plain" where every scale byte of the CTA's rows is in the range of a real checkpoint (FP4
 * 2..248, FP8 10..142), the general one (the scale decoded as fp32, then a multiply) otherwise and
 * for 32-token FP8 tiles (one-wave grids, where the plain form's longer chain cost B = 16 / 32
 * 1.5-2%; session 20).
 * Plain FP4: a code's byte 64 + 2v from two byte-permute lookups, one bf16 fma with h = 2^(e - 128),
 * c = -192 h built from the scale byte by integer multiply-adds (di_e2m1_bf16_scale); -0 comes out
 * +0, which no sum from +0 can tell apart. Plain FP8: e4m3 -> f16 (one cvt), the f16 bits shifted
 * into a bf16 of the value times 2^-112, one bf16 multiply by 2^(e - 15)
 * (di_e4m3x2_to_bf16x2_m112): a NaN weight code comes out finite there, where the CPU and the other
 * kernels propagate it. The producer counts the scale words that are not plain while the first
 * stages load; every stage of the CTA then takes one form.
 *
 * Roles (one CTA of three warpgroups a multiprocessor): warpgroups 0 and 1 consume, each 64 of
 * the CTA's 128 weight rows x BT tokens; warpgroup 2 only copies. (128-token tiles of FP8 / FP4
 * weights with an unsplit K take three consumers and 192 rows where the grid is several waves
 * deep -- wg_three_consumers; they take turns in order 0, 1, 2.) A stage is 64 K values (2 scale
 * blocks) in one of WG_SLOTS slots: the bf16 activations (K-major, 128-byte swizzle: wgmma's B
 * from shared memory) and the raw weight codes, copied by cp.async WG_AHEAD stages ahead; the
 * producer signals a slot full (mbarrier) when its copies landed. A consumer dequantises its
 * rows' codes of the stage straight into wgmma A fragments (registers: no widened tile in shared
 * memory, and the work is spread over 8 warps), issues the stage's four k16 wgmmas (m64nBTk16,
 * A from registers), waits for them and signals the slot empty. ptxas serialises every wgmma
 * (C7513) when registers feeding one are written while another of the warpgroup is in flight, so
 * the next stage's dequantisation waits for this one's wgmmas; instead the two consumers take
 * turns issuing (ping-pong): one dequantises while the other's wgmmas run (not the two-CTA FP4
 * 64-token tiles, whose wgmmas are short: TURNS). The weight scales of
 * the CTA's rows for its whole K split are copied once, at the start. FP4 tiles whose shared memory
 * allows two CTAs a multiprocessor are compiled for two (80 registers a thread). Row_off groups
 * may take their token rows through a list (mm_groups.x_rows, the MoE's gather): the producer
 * copies each row from the bf16 form of the FFN input (one conversion of its R rows, gpu_moe.c)
 * instead of a conversion of the 6 R gathered rows.
 *
 * Measured (session 9, docs/PERFORMANCE.md; 48 experts x 512 rows, w1): the exact twin of the
 * mma.sync fold on f16 wgmma, a producer widening into shared memory, 135 TFLOP/s (mma.sync: 140);
 * without the fold, 211; dequantising in the consumers, 308; this version 303 there and 1.15x
 * faster at 32-64 rows an expert. What bounds it at 512 rows: the activation copies through L2
 * (1.54 ms of its 1.92 without any dequantisation). Session 19 (the plain forms, a scale check per
 * CTA, the stage's fence before the turn's wait): consumer loop 227 -> 170 SASS instructions a stage
 * (FP4, 64 tokens) and 199 -> 167 (FP8, 128); decode B = 128 / 256 7% / 6% faster, a 512-token
 * prefill 6%, a 4,096-token one 1.4%. Session 33: an FP4 tile of at most BT / 2 tokens runs wgmmas of
 * half the width (B = 256: 32 rows an expert on 64-token tiles, the tensor pipe ~20% busy after), and
 * the e2m1 tables' first words come from registers loaded once instead of a constant ptxas moved into
 * a register at every use (FP4 consumer loop 168 -> 150 SASS instructions a stage but in the
 * two-CTA kernels' 64-token loop, where the two registers cost spills): the routed experts' w1 / w3
 * and w2 launches at B = 256 235 -> 202 and 238 -> 204 us, the step 70.7 -> 66.6 ms. Session 34:
 * w1 and w3 in one launch (wg_second): at B = 256 864 CTAs of one matrix took 3.3 waves of two a
 * multiprocessor, the pair's 1,728 take 6.5 -- 2 x 202.8 -> 390.5 us. Session 37 (ncu stall samples
 * of a prefill's wq_b, 20 stages a CTA): tensor pipe 30% busy; a stage ~1,100 cycles against 512 of
 * wgmma (a consumer's dequantisation, then its own wgmmas), the tile's checked store ~27% of the
 * consumers' time (now unchecked for whole tiles: 1,190 -> 1,103 us), the first stage's copies ~9%
 * (one CTA a multiprocessor, no tile loop to hide them). Session 38: a third consumer warpgroup for
 * those one-CTA layouts (192 weight rows, 512 threads, 128 registers, no spills): a CTA takes ~1.27x
 * the time for 1.5x the rows -- a 4,096-token prefill 560 -> 512 ms. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_linear_mma.h"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_wgmma.cuh"

#include <type_traits>


#define WG_SLOTS 6       /* stage slots (a "full" and an "empty" mbarrier each) */
#define WG_AHEAD 5       /* stages loaded ahead (<= WG_SLOTS - 1) */
/* weight-scale blocks of one K split cached per CTA: FP4 one byte a row and block (K <= 5120),
 * FP8 one a 32-row block */
#define WG_SCALE_BLOCKS_FP4 160
#define WG_SCALE_BLOCKS_FP8 1024

/* named barriers: the consumers' turns (1, 2); the slots go through mbarriers */
enum { WG_BAR_TURN = 1 };

/* the weights' form: FP8 e4m3 with 32 x 32 scales, packed FP4 e2m1 with 1 x 32 scales, or BF16
 * (the plain linears: router gate, head, compressor and indexer weights -- no scales, nothing to
 * dequantise: a consumer loads its A fragments from the slot by ldmatrix) */
enum { WG_FP8, WG_FP4, WG_W16 };

template <int WT, int BT, int NC = 2>
struct wg_layout {
    static constexpr bool FP4 = WT == WG_FP4, W16 = WT == WG_W16;
    static constexpr int BW = 64 * NC;           /* weight rows per CTA: NC consumer warpgroups of 64 */
    static constexpr int THREADS = 128 * NC + 128; /* the consumers, then the producer */
    static constexpr int X16 = BT * 128;                  /* [BT][128 B] a stage's 64 bf16 activations a token, swizzled */
    static constexpr int RB = W16 ? 128 : FP4 ? 32 : 64;  /* raw weight bytes per row and stage (W16: swizzled as X16) */
    static constexpr int SLOT = (X16 + BW * RB + 1023) / 1024 * 1024; /* + [BW][RB] codes */
    static constexpr int SCALE_ROWS = W16 ? 0 : FP4 ? BW : BW / 32;
    static constexpr int SCALES = SCALE_ROWS * (FP4 ? WG_SCALE_BLOCKS_FP4 : WG_SCALE_BLOCKS_FP8); /* [rows][split] e8m0 */
    static constexpr int MBARS = SCALES; /* [2][WG_SLOTS] mbarriers: full, empty (SCALES % 8 == 0), then
                                          * the count of scale words that are not plain (an int) */
    static constexpr int SMEM = WG_SLOTS * SLOT + SCALES + 2 * WG_SLOTS * 8 + 16 + 1024; /* + alignment slack */
    /* FP4: two CTAs a multiprocessor where shared memory allows, so ptxas keeps to 80 registers a
     * thread (at 84 the 32- and 64-token kernels ran one a multiprocessor, 9% slower) */
    static constexpr int CTAS_PER_SM = FP4 && 2 * SMEM <= 227 * 1024 ? 2 : 1;
};

/* act_quant(x, 32) as bf16 values: each code times its block's scale, exact (the values the CPU's
 * act_quant leaves); 8 lanes a block, 4 values a lane (act_quant_e4m3_kernel's quantisation) */
__global__ void act_quant_bf16_kernel(const float *__restrict__ x, const float *const *__restrict__ rows,
                                      int64_t row_blocks, int64_t n_blocks, uint2 *__restrict__ xb) {
    DI_PDL_BEGIN();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if ((i & ~(int64_t)31) >= n_blocks * 8) return; /* whole warps */
    uint32_t codes;
    float sc;
    if (!di_act_quant_lane(x, rows, row_blocks, n_blocks, i, &codes, &sc)) return;
    xb[i] = di_act_qbf16x4(codes, sc);
}

void di_cuda_act_quant_bf16(const float *x, const float *const *rows, int64_t row_blocks, int64_t n_blocks, uint16_t *xb,
                            cudaStream_t s) {
    if (n_blocks <= 0) return;
    const int64_t threads = 256;
    act_quant_bf16_kernel<<<(unsigned)((n_blocks * 8 + threads - 1) / threads), (unsigned)threads, 0, s>>>(
        x, rows, row_blocks, n_blocks, reinterpret_cast<uint2 *>(xb));
    DI_CUDA_LAUNCHED();
}

/* the k16 wgmma of a consumer, A from registers: N = 32, 64 or 128 tokens */
static __device__ __forceinline__ void wg_mma(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
    di_wgmma_bf16_rs_m64n32k16(d, a, b);
}
static __device__ __forceinline__ void wg_mma(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    di_wgmma_bf16_rs_m64n64k16(d, a, b);
}
static __device__ __forceinline__ void wg_mma(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
    di_wgmma_bf16_rs_m64n128k16(d, a, b);
}

/* a launch's second weight set over the same rows (the experts' w3 beside w1), row_off groups
 * without a K split: the CTAs past the first nx along x take it, so that the two matrices share
 * their waves (B = 256 of EP-8: 864 CTAs of w1 alone fill 3.3 waves of two a multiprocessor) */
struct wg_second {
    const uint8_t *const *wdata, *const *wscale; /* [n_groups] device pointers, or NULL: none */
    float *y;                                    /* [rows][ldy] */
    int nx;                                      /* the first matrix's CTAs along x */
};

/* xb: [rows][lda] bf16 (act_quant_bf16_kernel's, or bf16 activations); y [rows][ldy] (or part[ks]),
 * rounded to bf16 where out_bf16 (and K unsplit). GATHER: the token rows through grp.x_rows (an
 * instantiation of its own: the row offsets' producer code as a runtime branch made every
 * instantiation 3-7% slower at B = 256 -- the producer's issue slots are the consumers') */
template <int WT, int BT, int NC, bool GATHER>
__global__ void __launch_bounds__(wg_layout<WT, BT, NC>::THREADS, wg_layout<WT, BT, NC>::CTAS_PER_SM)
wg_gemm_kernel(const uint16_t *__restrict__ xb, int64_t lda, int64_t M, int64_t N, int64_t K,
               const uint8_t *__restrict__ wdata, const uint8_t *__restrict__ wscale, float *__restrict__ y, int64_t ldy,
               mm_groups grp, int ksplit, int split_blocks, float *__restrict__ part, int64_t part_stride,
               wg_second second, bool out_bf16) {
    DI_PDL_BEGIN();
    typedef wg_layout<WT, BT, NC> L;
    constexpr bool FP4 = L::FP4, W16 = L::W16;
    constexpr int NI = BT / 8, RB = L::RB; /* n8 column groups of a consumer's D; raw bytes a row */
    extern __shared__ int4 wg_smem4[];
    uint8_t *const smem = di_smem_align1024(reinterpret_cast<uint8_t *>(wg_smem4)); /* [WG_SLOTS][SLOT] */
    uint8_t *const scales = smem + WG_SLOTS * L::SLOT;                              /* [SCALE_ROWS][nbs] */
    uint64_t *const full = reinterpret_cast<uint64_t *>(scales + L::MBARS), *const empty = full + WG_SLOTS;
    int *const odd_scales = reinterpret_cast<int *>(empty + WG_SLOTS);
    const int64_t nb = K / 32, wrow = W16 ? 2 * K : FP4 ? K / 2 : K; /* weight row bytes */
    int bx = (int)blockIdx.x;
    if (second.wdata && bx >= second.nx) { /* the second weight set */
        bx -= second.nx;
        grp.wdata = second.wdata, grp.wscale = second.wscale;
        y = second.y;
    }
    const int64_t n0 = (int64_t)bx * L::BW;
    int64_t m0 = (int64_t)blockIdx.y * BT; /* the block's first row (of its group) */
    const int ks = blockIdx.z % ksplit, gz = blockIdx.z / ksplit;
    const int64_t blk0 = (int64_t)ks * split_blocks, blk1 = blk0 + split_blocks < nb ? blk0 + split_blocks : nb;
    const int nbs = (int)(blk1 - blk0), nk = nbs / 2; /* K % 128 == 0, splits on 16 blocks */
    if (ksplit > 1) y = part + ks * part_stride;
    if (grp.row_off) {
        int r0;
        if (!mm_group_select(grp, gz, &m0, &M, &wdata, &wscale, &r0)) return; /* uniform over the block */
        if constexpr (GATHER) grp.x_rows += r0; /* x_rows[m]: the group's row m */
        else xb += (int64_t)r0 * lda;
        y += (int64_t)r0 * ldy;
    } else if (gz) { /* block-diagonal slice (wo_a; FP8 weights: w_row_off is a multiple of 32) */
        xb += gz * grp.a_col_off;
        wdata += gz * grp.w_row_off * wrow;
        wscale += gz * (FP4 ? grp.w_row_off : grp.w_row_off / 32) * nb;
        y += gz * grp.y_col_off;
    }
    const int tid = threadIdx.x, wg = tid >> 7;
    /* an FP4 tile whose tokens fit its first half runs the wgmmas of half the width (m64n(BT/2)k16):
     * half the tensor work, and the producer copies half the activations (B = 256 of EP-8: 32 rows
     * an expert on 64-token tiles, which stay 64 so that an expert's rows past 32 cost no second
     * pass over its weights). Not FP8: its tiles are whole but for a matrix's last */
    const bool half = FP4 && BT >= 64 && M - m0 <= BT / 2;
    if (tid == 0) {
        for (int i = 0; i < WG_SLOTS; i++) {
            di_mbar_init(&full[i], 128);  /* the producer's threads, once their copies landed */
            di_mbar_init(&empty[i], 128 * NC); /* the consumers' threads, once done with the slot */
        }
        *odd_scales = 0;
    }
    __syncthreads();

    if (wg == NC) { /* ---- the producer: copies only ---- */
        const int p = tid - 128 * NC;
        /* the split's weight scales of the CTA's rows (FP4) or 32-row blocks (FP8), once */
        const int words = nbs / 4;
        for (int i = p; i < L::SCALE_ROWS * words; i += 128) {
            const int r = i / words, c = i % words;
            const bool ok = FP4 ? n0 + r < N : n0 + 32 * r < N;
            const int64_t srow = FP4 ? n0 + r : n0 / 32 + r;
            di_cp_async4(scales + r * nbs + 4 * c, ok ? wscale + srow * nb + blk0 + 4 * c : wscale, ok);
        }
        /* this thread's copies of a stage: activation rows xr + 16 i (16-byte chunk xc), weight
         * rows wr + 128 / RCH i (chunk wc) for the CTA's BW rows; zero-filled past M and N */
        constexpr int RCH = RB / 16; /* 16-byte chunks per weight row and stage */
        const int xr = p >> 3, xc = p & 7, wr = p / RCH, wc = p % RCH;
        const uint16_t *xsrc = xb + (m0 + xr) * lda + 8 * xc + 32 * blk0;
        const uint8_t *wsrc = wdata + (n0 + wr) * wrow + (RB / 2) * blk0 + 16 * wc;
        /* GATHER: the offsets in xb of this thread's chunk of rows xr + 16 i (below 2^31: the caller
         * checks; 32 bits, since 64-bit pointers spilled at the 64-token tiles' 80 registers) */
        [[maybe_unused]] int32_t xg[GATHER ? BT / 16 : 1];
        if constexpr (GATHER) {
#pragma unroll
            for (int i = 0; i < BT / 16; i++) {
                const int64_t m = m0 + xr + 16 * i;
                xg[i] = m < M ? (int32_t)(grp.x_rows[m] - grp.x_base) + 8 * xc + 32 * (int32_t)blk0 : 0;
            }
        }
        auto load = [&](int st) {
            uint8_t *x16 = smem + (st % WG_SLOTS) * L::SLOT, *w = x16 + L::X16;
#pragma unroll
            for (int i = 0; i < BT / 16; i++) { /* 16 tokens a pass of 128 threads */
                if (half && i >= BT / 32) break; /* the consumers read the tile's first half alone */
                const int r = xr + 16 * i;
                const bool ok = m0 + r < M;
                if constexpr (GATHER)
                    di_cp_async16(x16 + r * 128 + ((xc ^ (r & 7)) << 4), ok ? xb + xg[i] + 64 * st : xb, ok);
                else
                    di_cp_async16(x16 + r * 128 + ((xc ^ (r & 7)) << 4), ok ? xsrc + (int64_t)16 * i * lda + 64 * st : xb,
                                  ok);
            }
#pragma unroll
            for (int i = 0; i < L::BW * RCH / 128; i++) {
                const int r = wr + (128 / RCH) * i;
                const bool ok = n0 + r < N;
                const int chunk = W16 ? wc ^ (r & 7) : wc; /* W16: ldmatrix's 8 rows on distinct banks */
                di_cp_async16(w + r * RB + 16 * chunk, ok ? wsrc + (int64_t)(128 / RCH) * i * wrow + RB * st : wdata, ok);
            }
        };
        di_cp_async_commit(); /* the scales: a copy group of their own, older than every stage's */
        for (int st = 0; st < WG_AHEAD; st++) { /* the first slots are free */
            if (st < nk) load(st);
            di_cp_async_commit();
        }
        { /* the scales landed (the stages' groups may not have): count this thread's words not plain
           * while the first stages are still on their way; stage 0's arrival releases the count */
            di_cp_async_wait<WG_AHEAD>();
            const int64_t rows_left = FP4 ? N - n0 : (N - n0 + 31) / 32; /* zero-filled rows past N */
            const int valid = (int)(rows_left < L::SCALE_ROWS ? rows_left : L::SCALE_ROWS) * words;
            for (int i = p; i < valid; i += 128) /* word i: row i / words, bytes 4 (i % words) .. */
                if (di_e8m0x4_any_odd(FP4, reinterpret_cast<const uint32_t *>(scales)[i])) atomicAdd(odd_scales, 1);
        }
        for (int st = 0; st < nk; st++) {
            di_cp_async_wait<WG_AHEAD - 1>(); /* stage st landed (this thread's copies) */
            di_fence_proxy_async();            /* the activations, visible to wgmma */
            di_mbar_arrive(&full[st % WG_SLOTS]);
            const int next = st + WG_AHEAD;
            if (next < nk) {
                if (next >= WG_SLOTS) di_mbar_wait(&empty[next % WG_SLOTS], (next / WG_SLOTS - 1) & 1); /* next - SLOTS consumed */
                load(next);
            }
            di_cp_async_commit();
        }
        di_cp_async_wait<0>();
        return;
    }

    /* ---- the consumers: D rows ra, ra + 8 of the CTA's weight rows x tokens tc0 + 8i, + 1 ---- */
    const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int ra = wg * 64 + (warp & 3) * 16 + g, tc0 = 2 * t4;
    const uint8_t *sca = scales + (FP4 ? ra : ra / 32) * nbs, *scb = FP4 ? sca + 8 * nbs : sca;
    uint32_t lut_pos = 0u, lut_neg = 0u; /* the FP4 tables' first words in registers */
    if (FP4) di_e2m1_off64_lut(&lut_pos, &lut_neg);
    float d[4 * NI];
#pragma unroll
    for (int i = 0; i < 4 * NI; i++) d[i] = 0.0f;
    /* stage st's A fragments of rows ra, ra + 8: a[kk] for k 16 kk .. of the stage (block kk / 2):
     * a0 / a1 k 2t, 2t + 1 of rows ra / ra + 8, a2 / a3 k 2t + 8, 2t + 9 -- codes times scales.
     * e[h][j]: the scale bytes of row ra + 8 h, block j of the stage. PLAIN: every scale byte of the
     * CTA's rows plain -- FP4: di_e2m1_bf16_scale's one bf16 fma a pair of values; FP8: the
     * multiplier of di_e4m3x2_to_bf16x2_m112's values as two bf16 bytes, one multiply a pair */
    auto dequant = [&](const uint8_t *slot, const uint32_t (&e)[2][2], uint32_t (&a)[4][4], auto plain_tag, uint32_t lp,
                       uint32_t ln) { /* lp / ln: the FP4 tables' first words */
        constexpr bool PLAIN = decltype(plain_tag)::value;
        if constexpr (W16) { /* matrix m = lane / 8 of a k16 step: rows 8 (m & 1).., k 8 (m >> 1).. */
            const int lr = wg * 64 + (warp & 3) * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
            const uint8_t *row = slot + L::X16 + lr * RB;
#pragma unroll
            for (int kk = 0; kk < 4; kk++) di_ldmatrix_x4(a[kk], row + 16 * ((2 * kk + (lane >> 4)) ^ (lr & 7)));
            return;
        }
        const uint8_t *w = slot + L::X16 + ra * RB;
#pragma unroll
        for (int h = 0; h < 2; h++) { /* row ra, then ra + 8 */
            const uint8_t *row = w + h * 8 * RB;
            uint32_t v[RB / 4]; /* the row's codes of the stage, 4 bytes a word */
#pragma unroll
            for (int q = 0; q < RB / 16; q++) {
                const uint4 u = *reinterpret_cast<const uint4 *>(row + 16 * q);
                v[4 * q] = u.x, v[4 * q + 1] = u.y, v[4 * q + 2] = u.z, v[4 * q + 3] = u.w;
            }
#pragma unroll
            for (int j = 0; j < 2; j++) {
#pragma unroll
                for (int kk = 2 * j; kk < 2 * j + 2; kk++) {
                    if (FP4) { /* byte t of words 2kk, 2kk + 1: k 2t, 2t + 1 and 2t + 8, 2t + 9 */
                        uint32_t o[2];
                        const uint32_t nib = __byte_perm(v[2 * kk], v[2 * kk + 1], (uint32_t)(t4 | (t4 + 4) << 4));
                        di_off64x4_to_bf16x4(di_e2m1x4_to_off64(nib, lp, ln), di_e2m1_bf16_scale(e[h][j], PLAIN), PLAIN,
                                             o);
                        a[kk][h] = o[0];
                        a[kk][h + 2] = o[1];
                    } else { /* bytes 2t, 2t + 1 of words 4kk, 4kk + 1 (k 2t ..) and 4kk + 2, + 3 (k 2t + 8 ..) */
                        const uint32_t sel = (uint32_t)(2 * t4 | (2 * t4 + 1) << 4);
#pragma unroll
                        for (int c = 0; c < 2; c++) {
                            const uint16_t codes = (uint16_t)__byte_perm(v[4 * kk + 2 * c], v[4 * kk + 2 * c + 1], sel);
                            if (PLAIN) {
                                a[kk][h + 2 * c] = di_bf16x2_mul(di_e4m3x2_to_bf16x2_m112(codes), di_e4m3_bf16_scale(e[h][j]));
                            } else {
                                const float sw = di_dev_e8m0((uint8_t)e[h][j]);
                                float f0, f1;
                                di_e4m3x2_to_f32x2(codes, &f0, &f1);
                                a[kk][h + 2 * c] = di_bf16x2_of_exact(f0 * sw, f1 * sw);
                            }
                        }
                    }
                }
            }
        }
    };
    /* stage st: wait for its slot, dequantise, issue its wgmmas and wait for them (ptxas
     * serialises every wgmma (C7513) when registers feeding one are written while another of the
     * warpgroup is in flight), then release the slot. The two consumers take turns issuing
     * (ping-pong): consumer 1 issues stage st after consumer 0 did, consumer 0 stage st + 1 after
     * consumer 1 issued st -- so one dequantises while the other's wgmmas run, instead of both
     * dequantising at once and then both waiting on the tensor cores (three consumers: 0, 1, 2, 0). */
    uint32_t a[4][4];
    /* FP4 64-token tiles, two CTAs a multiprocessor, take no turns: their wgmmas are a quarter of
     * their stage or less (half tiles: m64n32), and with two CTAs' four consumers on the
     * multiprocessor the turn's barrier only delayed them (session 38: B = 256's w1 / w3 389 -> 376
     * us, w2 206 -> 200; the 32-token tiles of B = 128 ran 0.8% slower without turns, so they keep them) */
    constexpr bool TURNS = !(FP4 && L::CTAS_PER_SM == 2 && BT == 64);
    auto stages = [&](auto &d, auto plain_tag) { /* d: [4 * NI] of BT tokens, or [2 * NI] of a half tile */
        /* the FP4 tables' words from registers, but in the two-CTA kernels' 64-token loops: there
         * the two registers cost spills (ptxas then rematerialises the constants, ~16 moves a stage) */
        constexpr bool tight = L::CTAS_PER_SM == 2 && std::extent<std::remove_reference_t<decltype(d)>>::value == 32;
        const uint32_t lp = tight ? DI_E2M1_OFF64_POS_LO : lut_pos, ln = tight ? DI_E2M1_OFF64_NEG_LO : lut_neg;
        for (int st = 0, si = 0, phase = 0; st < nk; st++) { /* si = st % WG_SLOTS, phase = (st / WG_SLOTS) & 1 */
            const uint8_t *slot = smem + si * L::SLOT;
            const uint64_t desc = di_wgmma_desc_sw128(slot); /* the slot's activations: wgmma's B */
            di_mbar_wait(&full[si], phase);
            const uint32_t e[2][2] = {{W16 ? 0u : sca[2 * st], W16 ? 0u : sca[2 * st + 1]}, /* W16: no scales */
                                      {W16 ? 0u : scb[2 * st], W16 ? 0u : scb[2 * st + 1]}};
            dequant(slot, e, a, plain_tag, lp, ln);
            /* the fence first: the fragments' registers are written before it, so ptxas cannot move
             * the dequantisation past the turn's wait (with the wait first it moved most of it there,
             * and one consumer's dequantisation no longer overlapped the other's wgmmas) */
            di_wgmma_fence();
            if (TURNS && (wg > 0 || st > 0)) /* the previous consumer issued */
                di_bar_sync(WG_BAR_TURN + (wg == 0 ? NC - 1 : wg - 1), 256);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wg_mma(d, a[kk], di_wgmma_desc_add(desc, 32 * kk));
            di_wgmma_commit();
            if (TURNS && (wg < NC - 1 || st + 1 < nk)) di_bar_arrive(WG_BAR_TURN + wg, 256); /* the next one's turn */
            di_wgmma_wait<0>();
            if (st + WG_SLOTS < nk) di_mbar_arrive(&empty[si]);
            if (++si == WG_SLOTS) si = 0, phase ^= 1;
        }
    };
    /* stage 0's arrival releases the producer's count of scale words not plain (counted before its
     * threads arrived): the CTA's stages all take the plain dequantisation or all the general one */
    if (nk > 0) di_mbar_wait(&full[0], 0);
    /* dd's NI' = extent / 4 column groups of D into y (rounded to bf16 but for K splits' fp32 parts).
     * A tile wholly inside M x N (every tile of a prefill's matrices but the last along each) stores
     * from two row pointers stepped 8 tokens at a time, without a bound check: the checked loop
     * costs ~24 instructions a value (bounds, 64-bit addresses, ldy reloaded), and its ~1,500 a
     * thread were a quarter of the consumers' time in a 4,096-token prefill's wq_b (session 37) */
    auto store = [&](const auto &dd) {
        constexpr int NJ = std::extent<std::remove_reference_t<decltype(dd)>>::value / 4;
        const bool round = ksplit == 1 && (!W16 || out_bf16); /* FP8 / FP4: always bf16 */
        if (m0 + 8 * NJ <= M && n0 + L::BW <= N) {
            auto whole = [&](auto round_tag) {
                constexpr bool RND = decltype(round_tag)::value;
                float *p0 = y + (m0 + tc0) * ldy + n0 + ra, *p1 = p0 + ldy; /* tokens tc0, tc0 + 1 */
                const int64_t step = 8 * ldy;
#pragma unroll
                for (int i = 0; i < NJ; i++, p0 += step, p1 += step) { /* dd[4 i + h + 2 r]: token + h, row + 8 r */
                    p0[0] = RND ? di_dev_bf16_round(dd[4 * i]) : dd[4 * i];
                    p1[0] = RND ? di_dev_bf16_round(dd[4 * i + 1]) : dd[4 * i + 1];
                    p0[8] = RND ? di_dev_bf16_round(dd[4 * i + 2]) : dd[4 * i + 2];
                    p1[8] = RND ? di_dev_bf16_round(dd[4 * i + 3]) : dd[4 * i + 3];
                }
            };
            if (round) whole(std::true_type());
            else whole(std::false_type());
            return;
        }
#pragma unroll
        for (int i = 0; i < NJ; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t tok = m0 + tc0 + 8 * i + h;
                if (tok >= M) continue;
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int64_t n = n0 + ra + 8 * r;
                    const float v = dd[4 * i + 2 * r + h];
                    if (n < N) y[tok * ldy + n] = round ? di_dev_bf16_round(v) : v;
                }
            }
    };
    if constexpr (FP4 && BT >= 64) { /* a half tile: its own accumulators */
        if (half) {
            float dh[2 * NI];
#pragma unroll
            for (int i = 0; i < 2 * NI; i++) dh[i] = 0.0f;
            if (nk == 0 || *odd_scales == 0) stages(dh, std::true_type());
            else stages(dh, std::false_type());
            di_wgmma_pin(dh);
            store(dh);
            return;
        }
    }
    if ((FP4 || W16 || BT > 32) && (nk == 0 || *odd_scales == 0)) stages(d, std::true_type());
    else stages(d, std::false_type()); /* 32-token FP8 tiles: the general form (shorter chain, one-wave grids) */
    di_wgmma_pin(d);
    store(d);
}

template <int WT, int BT, int NC, bool GATHER>
static void wg_launch_kernel(const uint16_t *xb, int64_t lda, int64_t max_rows, int64_t N, int64_t K,
                             const uint8_t *wdata, const uint8_t *wscale, float *y, int64_t ldy, const mm_groups &grp,
                             unsigned slots, int64_t rows, int ksplit, int split_blocks, float *part, cudaStream_t s,
                             wg_second second, bool out_bf16) {
    /* slots: the groups' slots, or (grp.tiles) the tile list's entries: a CTA each along z */
    typedef wg_layout<WT, BT, NC> L;
    static bool attr_set;
    if (!attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(wg_gemm_kernel<WT, BT, NC, GATHER>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, L::SMEM));
        attr_set = true;
    }
    second.nx = (int)((N + L::BW - 1) / L::BW);
    const dim3 grid((unsigned)second.nx * (second.wdata ? 2u : 1u), grp.tiles ? 1u : (unsigned)((max_rows + BT - 1) / BT),
                    slots * (unsigned)ksplit);
    wg_gemm_kernel<WT, BT, NC, GATHER><<<grid, L::THREADS, L::SMEM, s>>>(
        xb, lda, max_rows, N, K, wdata, wscale, y, ldy, grp, ksplit, split_blocks, part, rows * ldy, second, out_bf16);
    DI_CUDA_LAUNCHED();
}

/* the kernel with rows through grp.x_rows: FP4 weights alone (the routed experts' w1 / w3; di_wg_gemm
 * refuses the others) */
template <int WT, int BT, int NC>
static void wg_launch(const uint16_t *xb, int64_t lda, int64_t max_rows, int64_t N, int64_t K, const uint8_t *wdata,
                      const uint8_t *wscale, float *y, int64_t ldy, const mm_groups &grp, unsigned slots, int64_t rows,
                      int ksplit, int split_blocks, float *part, cudaStream_t s, wg_second second, bool out_bf16) {
    if constexpr (WT == WG_FP4) {
        if (grp.x_rows) {
            wg_launch_kernel<WT, BT, NC, true>(xb, lda, max_rows, N, K, wdata, wscale, y, ldy, grp, slots, rows, ksplit,
                                               split_blocks, part, s, second, out_bf16);
            return;
        }
    }
    wg_launch_kernel<WT, BT, NC, false>(xb, lda, max_rows, N, K, wdata, wscale, y, ldy, grp, slots, rows, ksplit,
                                        split_blocks, part, s, second, out_bf16);
}

/* Three consumer warpgroups (192 weight rows a CTA) for a 128-token tile of FP8 / FP4 weights with
 * an unsplit K, where their fewer, longer CTAs finish first. A CTA of three took ~1.27x the time
 * of one of two for 1.5x the rows (session 38: the one-CTA-a-multiprocessor layouts, where the
 * third consumer's dequantisation fills tensor-pipe time the two left idle; a 4,096-token
 * prefill's wq_b 1,108 -> 938 us, the routed w1 / w3 2,888 -> 2,428), so waves of CTAs decide:
 * DI_WG_THREE_TIME_PCT w3 < 100 w2 (w2 / w3: waves of the two- / three-consumer grid). A grid of
 * one or two waves keeps two consumers (B = 256's shared w2, 80 CTAs: 54 of three ran 31 -> 38
 * us). Where K is split the caller chose the count with the split (di_cuda_wg_ksplit_slots). yz:
 * the grid's y x z extent, pair: w1 and w3 in one launch (twice the CTAs along x). */
static bool wg_three_consumers(int64_t N, int64_t yz, bool pair) {
    const int64_t sms = di_cuda_sm_count(), per = pair ? 2 * yz : yz;
    const int64_t w2 = ((N + 127) / 128 * per + sms - 1) / sms, w3 = ((N + 191) / 192 * per + sms - 1) / sms;
    return DI_WG_THREE_TIME_PCT * w3 < 100 * w2;
}

/* wg_launch with the tile of bt tokens (32, 64 or 128; 128 with two or three consumers) */
template <int WT>
static void wg_launch_bt(int bt, const uint16_t *xb, int64_t lda, int64_t max_rows, int64_t N, int64_t K,
                         const uint8_t *wdata, const uint8_t *wscale, float *y, int64_t ldy, const mm_groups &grp,
                         unsigned slots, int64_t rows, int ksplit, int split_blocks, float *part, cudaStream_t s,
                         wg_second second, bool out_bf16, int consumers) {
    constexpr int NC_MAX = WT == WG_W16 ? 2 : 3; /* BF16: six slots of 192 rows' 128-byte stages do not fit */
    if (bt == 32)
        wg_launch<WT, 32, 2>(xb, lda, max_rows, N, K, wdata, wscale, y, ldy, grp, slots, rows, ksplit, split_blocks, part,
                             s, second, out_bf16);
    else if (bt == 64)
        wg_launch<WT, 64, 2>(xb, lda, max_rows, N, K, wdata, wscale, y, ldy, grp, slots, rows, ksplit, split_blocks, part,
                             s, second, out_bf16);
    else if (NC_MAX == 3 &&
             (consumers ? consumers == 3
                        : ksplit == 1 && wg_three_consumers(N, (grp.tiles ? 1 : (max_rows + 127) / 128) * (int64_t)slots,
                                                            second.wdata != NULL)))
        wg_launch<WT, 128, NC_MAX>(xb, lda, max_rows, N, K, wdata, wscale, y, ldy, grp, slots, rows, ksplit, split_blocks,
                                   part, s, second, out_bf16);
    else
        wg_launch<WT, 128, 2>(xb, lda, max_rows, N, K, wdata, wscale, y, ldy, grp, slots, rows, ksplit, split_blocks,
                              part, s, second, out_bf16);
}

/* 32 tokens a CTA, 64, else 128. A group's rows scatter about their mean (routing), and a group past
 * one tile streams its weights once more per tile: 32-token tiles only while the mean leaves that
 * room (16 rows an expert at B = 128 of EP-8, not the 32 of B = 256) */
int di_wg_gemm_tile(int64_t rows_per_group, bool grouped) {
    return rows_per_group <= (grouped ? 20 : 32) ? 32 : rows_per_group <= 64 ? 64 : 128;
}

template <int WT>
static int wg_ctas_per_sm(int bt) {
    return bt == 32 ? wg_layout<WT, 32>::CTAS_PER_SM : bt == 64 ? wg_layout<WT, 64>::CTAS_PER_SM
                                                               : wg_layout<WT, 128>::CTAS_PER_SM;
}
int di_wg_gemm_ctas_per_sm(bool fp4, int bt) { return fp4 ? wg_ctas_per_sm<WG_FP4>(bt) : wg_ctas_per_sm<WG_FP8>(bt); }
/* di_wg_gemm_w16's K split is chosen on di_wg_gemm_ctas_per_sm(false, bt)'s slots */
static_assert(wg_layout<WG_W16, 32>::CTAS_PER_SM == wg_layout<WG_FP8, 32>::CTAS_PER_SM &&
                  wg_layout<WG_W16, 64>::CTAS_PER_SM == wg_layout<WG_FP8, 64>::CTAS_PER_SM &&
                  wg_layout<WG_W16, 128>::CTAS_PER_SM == wg_layout<WG_FP8, 128>::CTAS_PER_SM,
              "BF16 weights take the FP8 kernels' CTA slots");

bool di_wg_gemm_fits(bool fp4, int64_t K) {
    return K % 128 == 0 && K / 32 <= (fp4 ? WG_SCALE_BLOCKS_FP4 : WG_SCALE_BLOCKS_FP8);
}

void di_wg_gemm(bool fp4, const uint16_t *xb, int64_t lda, int64_t max_rows, int64_t rows_per_group, int64_t N,
                int64_t K, const uint8_t *wdata, const uint8_t *wscale, float *y, int64_t ldy, const mm_groups &grp_in,
                int n_groups, int64_t rows, int ksplit, int split_blocks, float *part, cudaStream_t s,
                const di_group_tiles *tiles, const uint8_t *const *wdata_b, const uint8_t *const *wscale_b,
                float *y_b, int consumers) {
    const int bt = di_wg_gemm_tile(rows_per_group, grp_in.row_off != NULL);
    if (wdata_b && (!grp_in.row_off || ksplit != 1 || !wscale_b || !y_b)) { /* a caller's bug */
        fprintf(stderr, "di_wg_gemm: a second weight set needs row_off groups without a K split\n");
        abort();
    }
    if (grp_in.x_rows && (!fp4 || !grp_in.row_off || !grp_in.x_base || lda != K)) { /* a caller's bug */
        fprintf(stderr, "di_wg_gemm: rows through a list need FP4 weights in row_off groups over a [rows, K] form\n");
        abort();
    }
    const wg_second second = {wdata_b, wscale_b, y_b, 0};
    if (!grp_in.row_off || (tiles && tiles->cap <= 0)) tiles = NULL;
    if (tiles && tiles->bt > bt) { /* a caller's bug */
        fprintf(stderr, "di_wg_gemm: a tile list of %d rows for CTAs of %d\n", tiles->bt, bt);
        abort();
    }
    mm_groups grp = grp_in;
    grp.tiles = tiles ? tiles->list : NULL;
    /* with an active list only min(groups, rows) slots can have rows; with a tile list, its entries */
    const unsigned slots = tiles ? (unsigned)tiles->cap : (unsigned)(grp.active && rows < n_groups ? rows : n_groups);
    if (fp4)
        wg_launch_bt<WG_FP4>(bt, xb, lda, max_rows, N, K, wdata, wscale, y, ldy, grp, slots, rows, ksplit, split_blocks,
                             part, s, second, true, consumers);
    else
        wg_launch_bt<WG_FP8>(bt, xb, lda, max_rows, N, K, wdata, wscale, y, ldy, grp, slots, rows, ksplit, split_blocks,
                             part, s, second, true, consumers);
}

void di_wg_gemm_w16(const uint16_t *xb, int64_t rows, int64_t N, int64_t K, const uint16_t *w, float *y, bool out_bf16,
                    int ksplit, int split_blocks, float *part, cudaStream_t s) {
    if (K % 128 != 0) { /* a caller's bug: di_wg_gemm_fits(false, K) */
        fprintf(stderr, "di_wg_gemm_w16: K %lld is not a multiple of 128\n", (long long)K);
        abort();
    }
    const mm_groups grp = {NULL, NULL, NULL, NULL, 0, 0, 0, NULL};
    wg_launch_bt<WG_W16>(di_wg_gemm_tile(rows, false), xb, K, rows, N, K, reinterpret_cast<const uint8_t *>(w), NULL, y,
                         N, grp, 1u, rows, ksplit, split_blocks, part, s, wg_second{NULL, NULL, NULL, 0}, out_bf16, 2);
}
