/* Linear layers on tensor cores (the default GPU path; the CUDA-core twins with the CPU's exact
 * sums -- cuda_linear_quant.cu, cuda_fwd_linear.cu -- serve DEEPINFER_GPU_EXACT=1).
 *
 * Modes: FP8 / FP4 (DI_LIN_QUANT, described next); A16 = bf16 activations x FP8 weights (DI_LIN_BF16
 * with an FP8 weight, wo_a: block sums of two bf16 m16n8k16 mmas, folded with the weight scale);
 * W16 = bf16 activations x BF16 weights (plain modes: router, head, indexer and compressor
 * projections; fp32 output or bf16-rounded). Plain-mode inputs are bf16-exact in this model (norm
 * and RoPE outputs), so their conversion to bf16 loses nothing; sums are fp32 in the tensor core.
 *
 * y [M, N] = bf16( sum over K blocks b of  blocksum_b(m, n) * xs[m, b] * ws(n, b) ), where the
 * activations are act_quant'ed per 32 values to e4m3 codes (xq [M, K], scales xs [M, K/32], as
 * the CPU does) and the weights are FP8 e4m3 with 32x32 e8m0 scales or packed FP4 e2m1 with 1x32
 * e8m0 scales (w4a8; widened to e4m3 in registers, exactly). Each 32-wide block sum is one
 * mma.sync m16n8k32 e4m3 with a zero accumulator (the tensor core's sum of 32 exact products,
 * rounded to fp32: equal to the CPU's exactly rounded sum except where the hardware's internal
 * alignment drops bits; sm_90 runs it as two f16 HMMAs, whose bits are those of an f16 sum over the
 * k with k % 4 < 2 accumulated with the rest: tools/cuda/probe_mma_numerics.cu), folded into the
 * fp32 accumulator as acc = fma(blocksum, xs * ws, acc) in ascending K-block order -- the CPU's
 * fold. Every output element goes through the same instructions in the same order whatever the
 * tile configuration, so results do not depend on M or on the batch (batch invariance holds with
 * any of the configurations below).
 *
 * Tiling: a block computes BM x BN outputs with WM x WN warps (warp tile (BM/WM) x (BN/WN) =
 * MI m16 x NI n8 mma tiles); K advances BKB scale blocks (128 or 512 values) per pipeline stage,
 * STAGES stages in flight through cp.async (zero-filled past M and N). Shared rows are padded by 16 bytes
 * so that the 32-bit fragment loads of a warp hit 32 distinct banks. Groups (the routed experts
 * of a layer): grid.z = group, each with its own rows (row_off, on the device) and weights. Three
 * configurations by rows per group: <= 16 (decode: BM 16, BN 32, 512 K values per stage, many
 * blocks streaming long weight-row segments), <= 64, larger (128 K values per stage). With
 * di_cuda_ctx.wgmma (the default) the FP8 / FP4 calls past the twin's rows (16 of one matrix, 8 a
 * group), and the W16 ones past 16 rows, go to cuda_linear_wgmma.cu (bf16-dequantised operands
 * summed over K in the tensor core: not these bits).
 * Needs K % 32 == 0; a last stage with fewer than 4 blocks skips the missing ones. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_linear_mma.h"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_ops.h"

#define MM_BK 128      /* K values per pipeline stage of the 64- and 128-row configurations */
#define MM_SPLIT_UNIT 16 /* K splits start on multiples of 16 blocks of 32 (the largest stage) */

/* operand kinds: act_quant'ed e4m3 activations with FP8 or FP4 weights (DI_LIN_QUANT); bf16
 * activations with FP8 weights (A16: no activation quantisation, weight scale only) or with BF16
 * weights (W16: no scales) for the plain modes */
enum { MM_FP8, MM_FP4, MM_A16, MM_W16 };

/* act_quant(x, 32) as e4m3 codes: 8 lanes per 32-value block of x [n_blocks * 32], 4 values a lane
 * (a warp per block, one value a lane, moved 0.7 TB/s at a 512-token prefill's expert inputs) */
__global__ void act_quant_e4m3_kernel(const float *__restrict__ x, const float *const *__restrict__ rows,
                                      int64_t row_blocks, int64_t n_blocks, uint8_t *__restrict__ q,
                                      float *__restrict__ s) {
    DI_PDL_BEGIN();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, blk = i >> 3;
    if ((i & ~(int64_t)31) >= n_blocks * 8) return; /* whole warps (n_blocks * 8 lanes, rounded up) */
    uint32_t codes;
    float sc;
    if (!di_act_quant_lane(x, rows, row_blocks, n_blocks, i, &codes, &sc)) return;
    reinterpret_cast<uint32_t *>(q)[i] = codes;
    if ((i & 7) == 0) s[blk] = sc;
}

void di_cuda_act_quant_e4m3(const float *x, const float *const *rows, int64_t row_blocks, int64_t n_blocks, uint8_t *q,
                            float *scale, cudaStream_t s) {
    if (n_blocks <= 0) return;
    const int64_t threads = 256;
    act_quant_e4m3_kernel<<<(unsigned)((n_blocks * 8 + threads - 1) / threads), (unsigned)threads, 0, s>>>(
        x, rows, row_blocks, n_blocks, q, scale);
    DI_CUDA_LAUNCHED();
}

/* BKB: blocks of 32 K values per stage (BK = 32 BKB values); rows padded by 16 bytes, which keeps
 * the 32-bit fragment loads of a warp on 32 distinct banks for any BK multiple of 128 */
template <int MODE, int BM, int BN, int BKB>
struct mm_layout {
    static constexpr bool FP4 = MODE == MM_FP4, W16 = MODE == MM_W16, A16 = MODE == MM_A16 || W16;
    static constexpr int BK = 32 * BKB;
    static constexpr int AROW = (A16 ? 2 * BK : BK) + 16;
    static constexpr int BROW = (FP4 ? BK / 2 : W16 ? 2 * BK : BK) + 16;
    static constexpr int A_BYTES = BM * AROW;                    /* [BM][AROW] e4m3 or bf16 */
    static constexpr int B_BYTES = BN * BROW;                    /* [BN][BROW] e4m3, packed e2m1 or bf16 */
    static constexpr int SA_BYTES = A16 ? 0 : BM * BKB * 4;      /* [BM][BKB] fp32 activation scales */
    static constexpr int SB_BYTES = W16 ? 0 : FP4 ? BN * BKB : (BN / 32) * BKB; /* [rows][BKB] e8m0 weight scales */
    static constexpr int STAGE = (A_BYTES + B_BYTES + SA_BYTES + SB_BYTES + 15) / 16 * 16;
};

/* xa: e4m3 codes (FP8/FP4) or bf16 bits (A16), row stride lda elements; y row stride ldy */
template <int MODE, int BM, int BN, int WM, int WN, int STAGES, int BKB>
__global__ void __launch_bounds__(WM * WN * 32)
gemm_bs_kernel(const uint8_t *__restrict__ xa, int64_t lda, const float *__restrict__ xs, int64_t M, int64_t N,
               int64_t K, const uint8_t *__restrict__ wdata, const uint8_t *__restrict__ wscale,
               float *__restrict__ y, int64_t ldy, bool out_bf16, mm_groups grp, int ksplit, int split_blocks,
               float *__restrict__ part, int64_t part_stride) {
    DI_PDL_BEGIN();
    typedef mm_layout<MODE, BM, BN, BKB> L;
    constexpr int BK = L::BK;
    constexpr bool FP4 = L::FP4, A16 = L::A16, W16 = L::W16;
    constexpr int AE = A16 ? 2 : 1;                    /* bytes per A element */
    constexpr int BEPC = FP4 ? 32 : W16 ? 8 : 16;      /* B elements per 16-byte chunk */
    constexpr int NT = WM * WN * 32, MI = BM / WM / 16, NI = BN / WN / 8;
    extern __shared__ int4 mm_smem4[];
    uint8_t *smem = reinterpret_cast<uint8_t *>(mm_smem4);
    const int64_t nb = K / 32;               /* the last stage may hold fewer than BKB blocks */
    const bool whole_scales = nb % BKB == 0; /* scale rows allow 16/4-byte copies */
    const int64_t wrow = FP4 ? K / 2 : W16 ? 2 * K : K;      /* weight row bytes */
    const int64_t n0 = (int64_t)blockIdx.x * BN;
    int64_t m0 = (int64_t)blockIdx.y * BM; /* the block's first row (of its group) */
    /* split K (single matrices with few column blocks): split ks sums K blocks [blk0, blk1) into
     * part[ks]; split_blocks is a multiple of every configuration's BKB, so all configurations
     * fold the same blocks into the same partial sums */
    const int ks = blockIdx.z % ksplit, gz = blockIdx.z / ksplit;
    const int64_t blk0 = (int64_t)ks * split_blocks, blk1 = blk0 + split_blocks < nb ? blk0 + split_blocks : nb;
    const int64_t kt0 = blk0 / BKB, kt1 = (blk1 + BKB - 1) / BKB;
    if (ksplit > 1) y = part + ks * part_stride;
    if (grp.row_off) {
        int r0;
        if (!mm_group_select(grp, gz, &m0, &M, &wdata, &wscale, &r0)) return; /* uniform over the block */
        xa += (int64_t)r0 * lda * AE;
        xs += (int64_t)r0 * nb;
        y += (int64_t)r0 * ldy;
    } else if (gz) { /* block-diagonal slice (FP8 weights: w_row_off is a multiple of 32) */
        const int64_t gi = gz;
        xa += gi * grp.a_col_off * AE;
        wdata += gi * grp.w_row_off * wrow;
        if (!W16) wscale += gi * (grp.w_row_off / 32) * nb;
        y += gi * grp.y_col_off;
    }
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN, g = lane >> 2, t4 = lane & 3;

    auto load_stage = [&](int st, int64_t kt) {
        uint8_t *As = smem + st * L::STAGE, *Bs = As + L::A_BYTES, *Sa = Bs + L::B_BYTES, *Sb = Sa + L::SA_BYTES;
        const int64_t k0 = kt * BK;
        constexpr int ACH = BK * AE / 16; /* 16-byte chunks per A row and stage */
        for (int i = tid; i < BM * ACH; i += NT) {
            const int r = i / ACH, c = i % ACH;
            const bool ok = m0 + r < M && k0 + c * (16 / AE) < K;
            di_cp_async16(As + r * L::AROW + c * 16, ok ? xa + ((m0 + r) * lda + k0) * AE + c * 16 : xa, ok);
        }
        constexpr int BCH = BK / BEPC; /* 16-byte chunks per B row and stage */
        for (int i = tid; i < BN * BCH; i += NT) {
            const int r = i / BCH, c = i % BCH;
            const bool ok = n0 + r < N && k0 + c * BEPC < K;
            di_cp_async16(Bs + r * L::BROW + c * 16, ok ? wdata + (n0 + r) * wrow + k0 * 16 / BEPC + c * 16 : wdata,
                          ok);
        }
        /* scales of the stage's BKB K blocks (zeros past K); plain loads when rows are not aligned */
        if (!A16)
            for (int i = tid; i < BM * (BKB / 4); i += NT) {
                const int r = i / (BKB / 4), c = i % (BKB / 4); /* 4 scales per 16-byte chunk */
                const bool ok = m0 + r < M;
                if (whole_scales) {
                    di_cp_async16(Sa + r * BKB * 4 + c * 16, ok ? xs + (m0 + r) * nb + kt * BKB + 4 * c : xs, ok);
                } else {
                    float *d = reinterpret_cast<float *>(Sa + r * BKB * 4 + c * 16);
                    for (int j = 0; j < 4; j++) {
                        const int64_t b = kt * BKB + 4 * c + j;
                        d[j] = ok && b < nb ? xs[(m0 + r) * nb + b] : 0.0f;
                    }
                }
            }
        if (!W16) {
            constexpr int SROWS = FP4 ? BN : BN / 32;
            for (int i = tid; i < SROWS; i += NT) {
                const bool ok = n0 + (FP4 ? i : 32 * i) < N;
                const int64_t srow = FP4 ? n0 + i : n0 / 32 + i;
                if (whole_scales && BKB == 4) {
                    di_cp_async4(Sb + i * 4, ok ? wscale + srow * nb + kt * 4 : wscale, ok);
                } else if (whole_scales && BKB == 16) {
                    di_cp_async16(Sb + i * 16, ok ? wscale + srow * nb + kt * 16 : wscale, ok);
                } else {
                    for (int j = 0; j < BKB; j++) {
                        const int64_t b = kt * BKB + j;
                        Sb[i * BKB + j] = ok && b < nb ? wscale[srow * nb + b] : 0;
                    }
                }
            }
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[mi][ni][r] = 0.0f;

#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (kt0 + st < kt1) load_stage(st, kt0 + st);
        di_cp_async_commit();
    }
    for (int64_t kt = kt0; kt < kt1; kt++) {
        di_cp_async_wait<STAGES - 2>();
        __syncthreads(); /* stage kt landed for everyone; stage kt-1 is free again */
        if (kt + STAGES - 1 < kt1) load_stage((int)((kt - kt0 + STAGES - 1) % STAGES), kt + STAGES - 1);
        di_cp_async_commit();
        const uint8_t *As = smem + (int)((kt - kt0) % STAGES) * L::STAGE, *Bs = As + L::A_BYTES;
        const float *Sa = reinterpret_cast<const float *>(Bs + L::B_BYTES);
        const uint8_t *Sb = Bs + L::B_BYTES + L::SA_BYTES;
#pragma unroll
        for (int kb = 0; kb < BKB; kb++) {
            if (kt * BKB + kb >= blk1) break; /* uniform: past K or past this split */
            uint32_t af[MI][A16 ? 8 : 4]; /* A16: the two k16 halves of the block */
            float sa[MI][2];
#pragma unroll
            for (int mi = 0; mi < MI; mi++) {
                const int r = wm * (BM / WM) + mi * 16 + g;
                if (A16) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint8_t *p = As + r * L::AROW + kb * 64 + h * 32 + t4 * 4;
                        af[mi][4 * h + 0] = *reinterpret_cast<const uint32_t *>(p);
                        af[mi][4 * h + 1] = *reinterpret_cast<const uint32_t *>(p + 8 * L::AROW);
                        af[mi][4 * h + 2] = *reinterpret_cast<const uint32_t *>(p + 16);
                        af[mi][4 * h + 3] = *reinterpret_cast<const uint32_t *>(p + 8 * L::AROW + 16);
                    }
                    sa[mi][0] = sa[mi][1] = 1.0f;
                } else {
                    const uint8_t *p = As + r * L::AROW + kb * 32 + t4 * 4;
                    af[mi][0] = *reinterpret_cast<const uint32_t *>(p);
                    af[mi][1] = *reinterpret_cast<const uint32_t *>(p + 8 * L::AROW);
                    af[mi][2] = *reinterpret_cast<const uint32_t *>(p + 16);
                    af[mi][3] = *reinterpret_cast<const uint32_t *>(p + 8 * L::AROW + 16);
                    sa[mi][0] = Sa[r * BKB + kb];
                    sa[mi][1] = Sa[(r + 8) * BKB + kb];
                }
            }
#pragma unroll
            for (int ni = 0; ni < NI; ni++) {
                const int cb = wn * (BN / WN) + ni * 8; /* first column of this n8 tile */
                uint32_t bf[A16 ? 4 : 2];
                float sb0, sb1;
                if (FP4) {
                    const uint8_t *p = Bs + (cb + g) * L::BROW + kb * 16 + t4 * 2;
                    bf[0] = di_e2m1x4_to_e4m3x4(*reinterpret_cast<const uint16_t *>(p));
                    bf[1] = di_e2m1x4_to_e4m3x4(*reinterpret_cast<const uint16_t *>(p + 8));
                    sb0 = di_dev_e8m0(Sb[(cb + 2 * t4) * BKB + kb]);
                    sb1 = di_dev_e8m0(Sb[(cb + 2 * t4 + 1) * BKB + kb]);
                } else if (W16) { /* bf16 weights: k pairs as A's */
                    const uint8_t *p = Bs + (cb + g) * L::BROW + kb * 64 + t4 * 4;
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        bf[2 * h] = *reinterpret_cast<const uint32_t *>(p + 32 * h);
                        bf[2 * h + 1] = *reinterpret_cast<const uint32_t *>(p + 32 * h + 16);
                    }
                    sb0 = sb1 = 1.0f;
                } else if (A16) { /* k pairs 2t, 2t+1 and 8+2t, 9+2t of each k16 half */
                    const uint8_t *p = Bs + (cb + g) * L::BROW + kb * 32 + t4 * 2;
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        bf[2 * h] = di_e4m3x2_to_bf16x2(*reinterpret_cast<const uint16_t *>(p + 16 * h));
                        bf[2 * h + 1] = di_e4m3x2_to_bf16x2(*reinterpret_cast<const uint16_t *>(p + 16 * h + 8));
                    }
                    sb0 = sb1 = di_dev_e8m0(Sb[(cb / 32) * BKB + kb]);
                } else {
                    const uint8_t *p = Bs + (cb + g) * L::BROW + kb * 32 + t4 * 4;
                    bf[0] = *reinterpret_cast<const uint32_t *>(p);
                    bf[1] = *reinterpret_cast<const uint32_t *>(p + 16);
                    sb0 = sb1 = di_dev_e8m0(Sb[(cb / 32) * BKB + kb]);
                }
#pragma unroll
                for (int mi = 0; mi < MI; mi++) {
                    float d[4];
                    if (A16) { /* the block sum of 32 products: two k16 mmas */
                        const float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        di_mma_bf16_16816(d, af[mi], bf, z);
                        di_mma_bf16_16816(d, af[mi] + 4, bf + 2, d);
                    } else {
                        di_mma_e4m3_16832(d, af[mi], bf);
                    }
                    acc[mi][ni][0] = __fmaf_rn(d[0], sa[mi][0] * sb0, acc[mi][ni][0]);
                    acc[mi][ni][1] = __fmaf_rn(d[1], sa[mi][0] * sb1, acc[mi][ni][1]);
                    acc[mi][ni][2] = __fmaf_rn(d[2], sa[mi][1] * sb0, acc[mi][ni][2]);
                    acc[mi][ni][3] = __fmaf_rn(d[3], sa[mi][1] * sb1, acc[mi][ni][3]);
                }
            }
        }
    }
    di_cp_async_wait<0>();

#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++) {
            const int64_t r = m0 + wm * (BM / WM) + mi * 16 + g, c = n0 + wn * (BN / WN) + ni * 8 + 2 * t4;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t rr = r + 8 * h;
                if (rr >= M) continue;
                const float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
                const bool round = out_bf16 && ksplit == 1; /* partial sums stay fp32 */
                if (c < N) y[rr * ldy + c] = round ? di_dev_bf16_round(v0) : v0;
                if (c + 1 < N) y[rr * ldy + c + 1] = round ? di_dev_bf16_round(v1) : v1;
            }
        }
}

struct mm_args {
    const uint8_t *xa;
    int64_t lda;
    const float *xs;
    int64_t max_rows, N, K;
    const uint8_t *wdata, *wscale;
    float *y;
    int64_t ldy;
    bool out_bf16;
    mm_groups grp;
    int n_groups;
    int64_t rows_hint; /* typical rows per group: picks the tile configuration (0: max_rows) */
    int ksplit;        /* K splits (1: none); then part [ksplit][rows][ldy] fp32, summed by mm_reduce */
    int split_blocks;  /* K blocks of 32 per split, a multiple of MM_SPLIT_UNIT */
    float *part;
    int64_t rows;      /* rows of y (all groups) */
    bool keep_parts;   /* K split: the partial sums stay in part for the consumer (no reduce launch) */
    int consumers;     /* wgmma: 2 / 3 consumer warpgroups chosen with the K split, 0: the kernel's choice */
};

/* y [rows, ldy] = the K splits' partial sums added in split order (then bf16-rounded) */
__global__ void mm_reduce_kernel(const float *__restrict__ part, int ksplit, int64_t n, bool out_bf16,
                                 float *__restrict__ y) {
    DI_PDL_BEGIN();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = part[i];
        for (int k = 1; k < ksplit; k++) v += part[k * n + i];
        y[i] = out_bf16 ? di_dev_bf16_round(v) : v;
    }
}

/* nb K blocks in about n splits on MM_SPLIT_UNIT boundaries (fewer where K is short): the split count */
static int mm_ksplit_n(int64_t nb, int64_t n, int *split_blocks) {
    const int64_t per = ((nb + n - 1) / n + MM_SPLIT_UNIT - 1) / MM_SPLIT_UNIT * MM_SPLIT_UNIT;
    *split_blocks = (int)per;
    return (int)((nb + per - 1) / per);
}

/* K splits from the weight's shape (never from the rows of a single matrix, so its results do not
 * depend on the batch): enough blocks of 32 columns x split to fill the card at decode, at most 8,
 * and at least 2 stages of 128 per split; each split a multiple of MM_SPLIT_UNIT blocks. Groups of
 * experts never split: their rows per group change with the batch, and since the decode twin takes
 * a warp per 16 features (session 6) unsplit groups ran as fast at B = 1 and 10% faster at B = 8-32
 * than groups split at decode sizes (wo_a's slices: MM_SLICE_SPLITS). Returns the split count and
 * its length in blocks. */
static int mm_ksplit(int64_t N, int64_t K, bool single_matrix, int *split_blocks) {
    const int64_t nb = K / 32, col_blocks = (N + 31) / 32, stages = (K + MM_BK - 1) / MM_BK;
    int64_t ks = (256 + col_blocks - 1) / col_blocks;
    if (ks > 8) ks = 8;
    if (ks > stages / 2) ks = stages / 2;
    return mm_ksplit_n(nb, single_matrix && ks > 1 ? ks : 1, split_blocks);
}
/* wo_a's block-diagonal slices (di_cuda_linear_bf16w8 with groups) split K in two: unsplit, the
 * decode twin ran 64 blocks (8 slices x 8 of 8 warps) on 132 multiprocessors. Two splits: decode
 * at B = 1-64 0.3-0.6 ms a step faster; four: slower at B = 8 and at a 512-token prefill (session
 * 18). A function of the shape alone, as every split: batch invariance holds. */
#define MM_SLICE_SPLITS 2

/* K splits: y = their partial sums added in split order */
static void reduce_splits(const mm_args &a, cudaStream_t s) {
    if (a.ksplit <= 1 || a.keep_parts) return;
    const int64_t n = a.rows * a.ldy;
    mm_reduce_kernel<<<(unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096), 256, 0, s>>>(a.part, a.ksplit, n,
                                                                                              a.out_bf16, a.y);
    DI_CUDA_LAUNCHED();
}

template <int MODE, int BM, int BN, int WM, int WN, int STAGES, int BKB>
static void launch(const mm_args &a, cudaStream_t s) {
    const size_t smem = (size_t)STAGES * mm_layout<MODE, BM, BN, BKB>::STAGE;
    static bool attr_set;
    if (!attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(gemm_bs_kernel<MODE, BM, BN, WM, WN, STAGES, BKB>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr_set = true;
    }
    /* with an active list only min(groups, rows) slots can have rows */
    const int64_t slots = a.grp.active && a.rows < a.n_groups ? a.rows : a.n_groups;
    const dim3 grid((unsigned)((a.N + BN - 1) / BN), (unsigned)((a.max_rows + BM - 1) / BM), (unsigned)slots);
    const dim3 grid_k(grid.x, grid.y, grid.z * (unsigned)a.ksplit);
    gemm_bs_kernel<MODE, BM, BN, WM, WN, STAGES, BKB><<<grid_k, WM * WN * 32, smem, s>>>(
        a.xa, a.lda, a.xs, a.max_rows, a.N, a.K, a.wdata, a.wscale, a.y, a.ldy, a.out_bf16, a.grp, a.ksplit,
        a.split_blocks, a.part, a.rows * a.ldy);
    DI_CUDA_LAUNCHED();
    reduce_splits(a, s);
}

/* a's GEMM on the wgmma kernel (xa: the activations as bf16 values), then its K splits' sum; tiles:
 * a row-tile list of a's groups, or NULL */
static void wg_run(const di_cuda_ctx *ctx, const mm_args &a, bool fp4, const di_group_tiles *tiles, cudaStream_t s) {
    di_wg_gemm(fp4, (const uint16_t *)a.xa, a.lda, a.max_rows, a.rows_hint ? a.rows_hint : a.max_rows, a.N, a.K, a.wdata,
               a.wscale, a.y, a.ldy, a.grp, a.n_groups, a.rows, a.ksplit, a.split_blocks, a.part, s, tiles, nullptr,
               nullptr, nullptr, ctx->wg_consumers ? ctx->wg_consumers : a.consumers);
    reduce_splits(a, s);
}

/* The context's scratch for one call: act_bytes of converted activations, then (K split) the
 * partial sums [ksplit, rows, ldy] fp32 in *part. */
static uint8_t *mm_scratch(di_cuda_ctx *ctx, size_t act_bytes, int ksplit, int64_t rows, int64_t ldy, float **part) {
    const size_t a = (act_bytes + 255) & ~(size_t)255;
    uint8_t *base = (uint8_t *)di_cuda_scratch(ctx, a + (ksplit > 1 ? sizeof(float) * ksplit * (size_t)(rows * ldy) : 0));
    *part = (float *)(base + a);
    return base;
}

/* the configuration for the rows per group (any gives the same bits: see the file comment) */
template <int MODE>
static void run_cfg(const mm_args &a, cudaStream_t s) {
    const int64_t rows = a.rows_hint ? a.rows_hint : a.max_rows;
    /* decode: 512 K values per stage, 4 stages: long row segments and 64 KB of weights in flight */
    if (rows <= 16) launch<MODE, 16, 32, 1, 4, 4, 16>(a, s);
    else if (rows <= 64) launch<MODE, 64, 128, 2, 4, 3, 4>(a, s);
    else launch<MODE, 128, 128, 2, 4, 3, 4>(a, s);
}

/* wo_a's block-diagonal slices on the wgmma kernel (single matrices: di_cuda_wg_ksplit below) drop
 * the shape's K split once the unsplit grid fills the GPU twice over (prefill sizes): the split is
 * there so that decode-sized calls fill the card with the same bits at every batch, but the wgmma
 * kernel's bits depend on its path anyway (batch-invariant mode never takes it), and at 4,096 rows
 * the partial sums' traffic and the reduce launch bought nothing. Returns the split to use. */
static int wg_ksplit(int64_t N, int64_t rows, int64_t K, int ksplit, int *split_blocks) {
    if (ksplit == 1 || (N + 127) / 128 * ((rows + 127) / 128) < 2 * (int64_t)di_cuda_sm_count()) return ksplit;
    return mm_ksplit(N, K, false, split_blocks); /* 1, the whole K */
}

/* K splits a single matrix's wgmma call may take (the partial sums' buffers grow with them) */
#define WG_MAX_SPLITS 8
/* di_cuda_wg_ksplit_slots' cost model, in units of a CTA's time for one K block of 32 (~0.4 us:
 * 128 x 128 tiles): a CTA's fixed part (the copies ahead of its first stage, its stores); the
 * reduce's launch and tail, and a block for each partial per 16 output tiles of 128 x 128 (a
 * partial of 64 KiB read at ~3 TB/s). Fitted on session 34's H200 A / B: with them the model's
 * ratios of the measured splits (wo_b, the shared expert's w1 / w3 and w2 at B = 64 - 256) are
 * within 4% of ncu's. */
#define WG_CTA_BLOCKS 8
#define WG_REDUCE_BLOCKS 8
#define WG_REDUCE_TILES 16
#define WG_SCHED_ENTRIES 64

/* The time the block scheduler takes for n_groups groups of n CTAs, group z's each len[z] long,
 * on `slots` CTA slots: grid z (the split) is the slowest index, so the groups start in order, and
 * each CTA on the slot that is free first. The slots' free times as (time, slots) entries in
 * ascending time; a group moves the earliest slots on. */
static int64_t wg_makespan(int64_t slots, int n_groups, int64_t n, const int64_t *len) {
    int64_t t[WG_SCHED_ENTRIES], c[WG_SCHED_ENTRIES];
    int e = 1;
    t[0] = 0, c[0] = slots;
    for (int z = 0; z < n_groups; z++)
        for (int64_t left = n; left > 0;) {
            const int64_t m = c[0] < left ? c[0] : left, at = t[0] + len[z];
            left -= m;
            if ((c[0] -= m) == 0) { /* the earliest entry used up */
                for (int i = 1; i < e; i++) t[i - 1] = t[i], c[i - 1] = c[i];
                e--;
            }
            int i = 0;
            while (i < e && t[i] < at) i++;
            if (i < e && t[i] == at) {
                c[i] += m;
            } else {
                if (e == WG_SCHED_ENTRIES) return INT64_MAX; /* never at these sizes: no such split */
                for (int j = e; j > i; j--) t[j] = t[j - 1], c[j] = c[j - 1];
                t[i] = at, c[i] = m, e++;
            }
        }
    return e > 0 ? t[e - 1] : 0;
}

/* A single matrix's K split on the wgmma kernel (not a function of the shape alone: batch-invariant
 * mode never takes this kernel): none where the unsplit grid fills the card twice over (prefill
 * sizes, as wg_ksplit), else the split count whose CTAs the block scheduler finishes first
 * (wg_makespan, each CTA its split's K blocks plus a fixed part), with the reduce of the partials
 * added -- fewer splits on a tie. The shape's split (mm_ksplit) ignored the rows: at B = 256,
 * wo_b's 2 splits made 160 CTAs on 132 multiprocessors, two rounds of the half K; 3 splits take
 * 94.8 -> 73.4 us (session 34). */
int di_cuda_wg_ksplit_slots(int64_t N, int64_t rows, int64_t K, int64_t slots, int *split_blocks, int *consumers) {
    const int64_t nb = K / 32, bt = di_wg_gemm_tile(rows, false);
    const int64_t tiles = (N + 127) / 128 * ((rows + 127) / 128);
    if (consumers) *consumers = 0; /* the kernel's choice (by its waves) where K stays whole */
    if ((N + 127) / 128 * ((rows + bt - 1) / bt) >= 2 * slots) return mm_ksplit_n(nb, 1, split_blocks);
    int best = 1, best_blocks = (int)nb, best_nc = 2;
    int64_t best_cost = INT64_MAX;
    /* two consumer warpgroups a CTA (128 weight rows), and for 128-token tiles three (192 rows; a
     * CTA DI_WG_THREE_TIME_PCT % as long): lengths in hundredths of a two-consumer block */
    for (int nc = 2; nc <= (consumers && bt == 128 ? 3 : 2); nc++) {
        const int64_t bw = 64 * nc, pct = nc == 3 ? DI_WG_THREE_TIME_PCT : 100;
        const int64_t ctas = (N + bw - 1) / bw * ((rows + bt - 1) / bt);
        for (int n = 1; n <= WG_MAX_SPLITS; n++) {
            int per;
            const int k = mm_ksplit_n(nb, n, &per);
            if (k != n && n > 1) continue; /* the same split as a smaller n */
            int64_t len[WG_MAX_SPLITS];
            for (int z = 0; z < k; z++) { /* split z's blocks (the last may be short) and the fixed part */
                const int64_t left = nb - (int64_t)z * per;
                len[z] = ((left < per ? left : per) + WG_CTA_BLOCKS) * pct;
            }
            const int64_t span = wg_makespan(slots, k, ctas, len);
            if (span == INT64_MAX) continue;
            const int64_t reduce = 100 * (WG_REDUCE_BLOCKS + k * ((tiles + WG_REDUCE_TILES - 1) / WG_REDUCE_TILES));
            const int64_t cost = span + (k > 1 ? reduce : 0);
            if (cost < best_cost) best = k, best_blocks = per, best_nc = nc, best_cost = cost;
        }
    }
    *split_blocks = best_blocks;
    if (consumers) *consumers = best_nc;
    return best;
}
int di_cuda_wg_ksplit(const di_cuda_ctx *ctx, bool fp4, int64_t N, int64_t rows, int64_t K, int *split_blocks,
                      int *consumers) {
    if (consumers) *consumers = 0;
    if (ctx->wg_ksplit > 0) return mm_ksplit_n(K / 32, ctx->wg_ksplit, split_blocks);
    const int64_t slots = (int64_t)di_cuda_sm_count() * di_wg_gemm_ctas_per_sm(fp4, di_wg_gemm_tile(rows, false));
    return di_cuda_wg_ksplit_slots(N, rows, K, slots, split_blocks, consumers);
}

extern "C" void di_cuda_act_forms_note(di_cuda_ctx *ctx, const float *x, int64_t rows, int64_t K,
                                       di_cuda_act_forms forms) {
    int slot = -1; /* x's own, else a free one, else the one noted longest ago (the round-robin slot took a
                    * live form where the other slot was free) */
    for (int i = 0; i < DI_CUDA_ACT_FORMS_SLOTS && slot < 0; i++)
        if (ctx->act_forms[i].x == x) slot = i;
    for (int i = 0; i < DI_CUDA_ACT_FORMS_SLOTS && slot < 0; i++)
        if (!ctx->act_forms[i].x) slot = i;
    if (slot < 0) {
        slot = 0;
        for (int i = 1; i < DI_CUDA_ACT_FORMS_SLOTS; i++)
            if (ctx->act_forms[i].noted < ctx->act_forms[slot].noted) slot = i;
    }
    ctx->act_forms[slot].x = x;
    ctx->act_forms[slot].rows = rows;
    ctx->act_forms[slot].K = K;
    ctx->act_forms[slot].forms = forms;
    ctx->act_forms[slot].noted = ++ctx->act_forms_clock;
}

extern "C" void di_cuda_act_forms_forget(di_cuda_ctx *ctx, const float *x) {
    for (int i = 0; i < DI_CUDA_ACT_FORMS_SLOTS; i++)
        if (ctx->act_forms[i].x == x) ctx->act_forms[i].x = NULL;
}

/* the noted forms of x [rows, K] (rows < 0: any rows -- the buffer a row list points into), or NULL;
 * noted_rows (or NULL): the rows they cover */
static const di_cuda_act_forms *act_forms_lookup(const di_cuda_ctx *ctx, const float *x, int64_t rows, int64_t K,
                                                 int64_t *noted_rows = nullptr) {
    for (int i = 0; x && i < DI_CUDA_ACT_FORMS_SLOTS; i++)
        if (ctx->act_forms[i].x == x && (rows < 0 || ctx->act_forms[i].rows == rows) && ctx->act_forms[i].K == K) {
            if (noted_rows) *noted_rows = ctx->act_forms[i].rows;
            return &ctx->act_forms[i].forms;
        }
    return NULL;
}

extern "C" int di_group_tiles_cap(int bt, int n_groups, int64_t rows, int64_t max_rows) {
    if (bt <= 0 || n_groups <= 0 || rows <= 0 || max_rows <= 0) return 0;
    const int64_t live = rows < n_groups ? rows : n_groups;     /* groups that can have rows */
    const int64_t by_rows = (rows + live * (bt - 1)) / bt;      /* the sum of ceil(rows_g / bt) over them, at most */
    const int64_t by_slots = live * ((max_rows + bt - 1) / bt); /* none past max_rows */
    return (int)(by_rows < by_slots ? by_rows : by_slots);
}

extern "C" void di_cuda_group_tiles_note(di_cuda_ctx *ctx, const int *row_off, const di_group_tiles *lists, int n) {
    ctx->group_tiles.row_off = row_off;
    ctx->group_tiles.n = 0;
    for (int i = 0; i < n && ctx->group_tiles.n < DI_GROUP_TILE_LISTS; i++)
        if (lists[i].list && lists[i].bt > 0 && lists[i].cap > 0) ctx->group_tiles.lists[ctx->group_tiles.n++] = lists[i];
}

extern "C" void di_cuda_group_tiles_forget(di_cuda_ctx *ctx, const int *row_off) {
    if (ctx->group_tiles.row_off == row_off) ctx->group_tiles.row_off = NULL, ctx->group_tiles.n = 0;
}

extern "C" const di_group_tiles *di_cuda_group_tiles_find(const di_cuda_ctx *ctx, const int *row_off, int bt) {
    if (!row_off || bt <= 0 || ctx->group_tiles.row_off != row_off) return NULL;
    for (int i = 0; i < ctx->group_tiles.n; i++)
        if (ctx->group_tiles.lists[i].bt == bt) return &ctx->group_tiles.lists[i];
    return NULL;
}

extern "C" const di_cuda_act_forms *di_cuda_act_forms_find(const di_cuda_ctx *ctx, const float *x, int64_t rows,
                                                           int64_t K) {
    return act_forms_lookup(ctx, x, rows, K);
}

/* x [rows, K]'s act_quant codes made by its producer, or NULL */
static const di_cuda_act_forms *act_codes_made(const di_cuda_ctx *ctx, const float *x, int64_t rows, int64_t K) {
    const di_cuda_act_forms *f = di_cuda_act_forms_find(ctx, x, rows, K);
    return f && f->q ? f : NULL;
}

/* x [rows, K] as bf16 bits in xb: its producer's, or converted into scratch (xb_scratch) */
static const uint16_t *act_bf16(const di_cuda_ctx *ctx, const float *x, int64_t rows, int64_t K, uint16_t *xb_scratch) {
    const di_cuda_act_forms *f = di_cuda_act_forms_find(ctx, x, rows, K);
    if (f && f->bf16) return f->bf16;
    di_cuda_f32_to_bf16(x, rows * K, xb_scratch, ctx->stream);
    return xb_scratch;
}

bool di_cuda_wgmma_taken(const di_cuda_ctx *ctx, bool fp4, int64_t K, int64_t rows_per_group) {
    /* past the twin's rows (a single matrix's <= 16 never get here); groups of 9-16 rows (B = 128 of
     * EP-8) stream their weights faster here than through the 16-row tiles */
    return ctx->wgmma && !ctx->exact && rows_per_group > DI_GEMV_MAX_GROUP_ROWS && di_wg_gemm_fits(fp4, K);
}

bool di_cuda_linear_mma_supported(const di_weight *w) {
    return w->cols % 32 == 0 && (w->dtype == DI_DT_F8_E4M3 || w->dtype == DI_DT_I8) && w->row0 == 0;
}

/* which kernel a quantised linear of this shape and these rows runs, and its K split */
struct mm_plan {
    int64_t per_group; /* rows a group (their mean over the groups, at most max_rows) */
    int ksplit, split_blocks;
    int consumers;       /* wgmma, a single matrix: the consumer warpgroups chosen with its K split (0: the kernel's) */
    bool twin, wg, imma; /* the decode twin (imma: its FP4 int8 form), the wgmma kernel, else the tiles */
    int tile;            /* grouped: the rows of a block's tile over a tile list (0: the kernel takes none) */
    const di_group_tiles *tiles; /* the noted list of such tiles for row_off, or NULL */
    int64_t tile_rows;   /* rows a block works on at most: tiles' tile, else max_rows */
};
static mm_plan linear_plan(const di_cuda_ctx *ctx, const di_weight *shape, bool grouped, int n_groups, int64_t rows,
                           int64_t max_rows, const int *row_off = nullptr) {
    mm_plan p;
    const int64_t K = shape->cols, N = shape->rows;
    const int64_t avg = grouped ? (rows + n_groups - 1) / n_groups : max_rows;
    p.per_group = avg < max_rows ? avg : max_rows;
    p.ksplit = mm_ksplit(N, K, !grouped && n_groups == 1, &p.split_blocks);
    const bool fp4 = shape->dtype == DI_DT_I8;
    p.twin = !ctx->tiled_only && di_cuda_gemv_ok(false, grouped || n_groups > 1, K, p.per_group, p.ksplit); /* decode sizes */
    p.wg = !p.twin && di_cuda_wgmma_taken(ctx, fp4, K, p.per_group); /* prefill sizes */
    /* FP4 at <= 4 rows an expert: exact sums on int8 mma, from the codes' digits */
    p.imma = p.twin && fp4 && ctx->fp4_imma && p.ksplit == 1 && p.per_group <= DI_GEMV_IMMA_ROWS &&
             di_cuda_gemv_imma_ok(K, max_rows);
    p.consumers = 0;
    if (p.wg)
        p.ksplit = !grouped && n_groups == 1 ? di_cuda_wg_ksplit(ctx, fp4, N, max_rows, K, &p.split_blocks, &p.consumers)
                                             : wg_ksplit(N, max_rows, K, p.ksplit, &p.split_blocks);
    /* over a tile list a block takes tiles of about the groups' mean rows (the int8 twin: not the
     * largest group's, which sizes its blocks without a list) */
    p.tile = !grouped ? 0
             : p.imma ? di_cuda_gemv_imma_tile(p.per_group)
             : p.twin ? di_cuda_gemv_tile(p.per_group)
             : p.wg   ? di_wg_gemm_tile(p.per_group, true)
                      : 0;
    p.tiles = di_cuda_group_tiles_find(ctx, row_off, p.tile);
    p.tile_rows = p.tiles ? p.tile : max_rows;
    return p;
}

int di_cuda_linear_group_tile(const di_cuda_ctx *ctx, const di_weight *shape, int n_groups, int64_t rows,
                               int64_t max_rows) {
    if (ctx->exact || !di_cuda_linear_mma_supported(shape) || rows <= 0 || max_rows <= 0 || n_groups <= 0) return 0;
    return linear_plan(ctx, shape, true, n_groups, rows, max_rows).tile;
}

di_act_form di_cuda_linear_act_form(const di_cuda_ctx *ctx, const di_weight *shape, bool grouped, int n_groups,
                                    int64_t rows, int64_t max_rows) {
    if (ctx->exact || !di_cuda_linear_mma_supported(shape) || ((uintptr_t)shape->data & 15) != 0 || rows <= 0 ||
        max_rows <= 0)
        return DI_ACT_FORM_NONE;
    const mm_plan p = linear_plan(ctx, shape, grouped, n_groups, rows, max_rows);
    return p.wg ? DI_ACT_FORM_QBF16 : p.imma ? DI_ACT_FORM_DIGITS : DI_ACT_FORM_E4M3;
}

/* x [rows, K] (all groups' rows; or through the row list x_rows) quantised once, then the GEMM of
 * every group, for each of n_mats (<= DI_GEMV_MAX_MATS) weight sets (same shape) into y[m]: at
 * decode sizes one twin launch for all of them. sw (or NULL): the int8 twin makes two sets'
 * SwiGLU instead (the caller checked that it takes the call) */
static void linear_mma_sets(di_cuda_ctx *ctx, const di_weight *shape, int n_mats, const uint8_t *const *wdata,
                            const uint8_t *const *wscale, const uint8_t *const *const *wdata_g,
                            const uint8_t *const *const *wscale_g, const int *row_off, const int *active, int n_groups,
                            int64_t rows, int64_t max_rows, const float *x, const float *const *x_rows, float *const *y,
                            const di_gemv_swiglu *sw = nullptr) {
    cudaStream_t s = ctx->stream;
    const int64_t K = shape->cols, N = shape->rows, nb = K / 32;
    if (rows <= 0 || max_rows <= 0 || N <= 0) return;
    const mm_plan plan = linear_plan(ctx, shape, row_off != NULL, n_groups, rows, max_rows, row_off);
    const int64_t per_group = plan.per_group;
    int split_blocks = plan.split_blocks, ksplit = plan.ksplit;
    const bool fp4 = shape->dtype == DI_DT_I8, twin = plan.twin, wg = plan.wg, imma = plan.imma;
    const size_t q_bytes = ((size_t)(rows * K) * (wg ? 2 : imma ? 3 : 1) + 255) & ~(size_t)255;
    /* single FP8 matrices of prefill sizes: cuBLAS's BF16 GEMM on the dequantised weight where its
     * scratch fits, else the wgmma kernel */
    const size_t blas_bytes =
        wg && !fp4 && !row_off && n_groups == 1 && wdata ? di_cuda_blas_reserve(ctx, rows, N, K, q_bytes, n_mats, wdata)
                                                         : 0;
    const bool blas = blas_bytes > 0;
    float *part;
    uint8_t *xq = mm_scratch(ctx, q_bytes + blas_bytes + (wg ? 0 : sizeof(float) * (size_t)(rows * nb)),
                             twin || blas ? 1 : ksplit, rows, N,
                             &part); /* [rows, K] e4m3 codes, (wgmma) their values as bf16 or (imma) digits x3 */
    uint8_t *blas_ws = xq + q_bytes; /* blas: its weight and output */
    float *xsc = wg ? NULL : (float *)(xq + q_bytes); /* [rows, K/32]; wgmma's values carry their scales */
    /* x's forms made by its producer; through a row list its digits (the int8 twin) or its bf16
     * values (the wgmma pair launch, below) are read in place */
    int64_t made_rows = 0;
    const di_cuda_act_forms *made = act_forms_lookup(ctx, x, x_rows ? -1 : rows, K, &made_rows);
    const float *const *digit_rows = NULL; /* the int8 twin reads made's digits through x_rows */
    const bool wg_pair = wg && n_mats == 2 && wdata_g && ksplit == 1;
    const bool wg_gather = /* the FP4 kernels alone have a gathering instantiation (the routed experts') */
        wg_pair && fp4 && x_rows && made && made->qbf16 && made_rows * K <= INT32_MAX;
    if (wg && made && made->qbf16 && (!x_rows || wg_gather)) xq = (uint8_t *)made->qbf16;
    else if (wg) di_cuda_act_quant_bf16(x, x_rows, nb, rows * nb, (uint16_t *)xq, s);
    else if (imma && made && made->digits) xq = made->digits, xsc = made->digit_scale, digit_rows = x_rows;
    else if (imma) di_cuda_act_quant_digits(x, x_rows, nb, rows * nb, xq, xsc, s);
    else if (made && made->q && !x_rows) xq = made->q, xsc = made->scale;
    else di_cuda_act_quant_e4m3(x, x_rows, nb, rows * nb, xq, xsc, s);
    if (twin) {
        di_gemv_mat mats[DI_GEMV_MAX_MATS];
        for (int m = 0; m < n_mats; m++)
            mats[m] = di_gemv_mat{N, wdata ? wdata[m] : NULL, wscale ? wscale[m] : NULL, wdata_g ? wdata_g[m] : NULL,
                                  wscale_g ? wscale_g[m] : NULL, ksplit, split_blocks, y[m]};
        if (imma) {
            ctx->counts.fp4_imma++;
            ctx->counts.fp4_imma_row += di_cuda_gemv_imma_one_row(plan.tile_rows);
            ctx->counts.fp4_imma_swiglu += sw != nullptr;
            di_cuda_gemv_fp4_imma(s, K, n_mats, mats, row_off, active, n_groups, rows, max_rows, xq, xsc, digit_rows, x, sw,
                                  plan.tiles);
        } else
            di_cuda_gemv_quant(s, fp4, K, n_mats, mats, row_off, active, n_groups, rows, max_rows, per_group, xq, xsc,
                               plan.tiles);
        return;
    }
    if (blas) {
        for (int m = 0; m < n_mats; m++)
            di_cuda_blas_fp8(ctx, (const uint16_t *)xq, K, rows, wdata[m], wscale[m], N, 1, K, y[m], N, blas_ws);
        return;
    }
    if (wg_pair) { /* the pair in one launch: the two share its waves */
        const mm_groups grp = {wdata_g[0], wscale_g[0], row_off, active, 0, 0, 0, NULL, wg_gather ? x_rows : NULL,
                               wg_gather ? x : NULL};
        ctx->counts.wg_gather += wg_gather;
        di_wg_gemm(fp4, (const uint16_t *)xq, K, max_rows, per_group, N, K, NULL, NULL, y[0], N, grp, n_groups, rows, 1,
                   split_blocks, part, s, plan.tiles, wdata_g[1], wscale_g[1], y[1], ctx->wg_consumers);
        return;
    }
    for (int m = 0; m < n_mats; m++) { /* the partial sums (K splits) are reused in stream order */
        const uint8_t *wd = wdata ? wdata[m] : NULL, *ws = wscale ? wscale[m] : NULL;
        const uint8_t *const *wdg = wdata_g ? wdata_g[m] : NULL, *const *wsg = wscale_g ? wscale_g[m] : NULL;
        mm_args a = {xq, K, xsc, max_rows, N, K, wd, ws, y[m], N, true, {wdg, wsg, row_off, active, 0, 0, 0},
                     n_groups, per_group, ksplit, split_blocks, part, rows};
        a.consumers = plan.consumers;
        if (wg) wg_run(ctx, a, fp4, plan.tiles, s);
        else if (fp4) run_cfg<MM_FP4>(a, s);
        else run_cfg<MM_FP8>(a, s);
    }
}

void di_cuda_linear_mma(di_cuda_ctx *ctx, const di_weight *shape, const uint8_t *wdata, const uint8_t *wscale,
                        const uint8_t *const *wdata_g, const uint8_t *const *wscale_g, const int *row_off,
                        const int *active, int n_groups, int64_t rows, int64_t max_rows, const float *x, float *y) {
    linear_mma_sets(ctx, shape, 1, wdata ? &wdata : NULL, wscale ? &wscale : NULL, wdata_g ? &wdata_g : NULL,
                    wscale_g ? &wscale_g : NULL, row_off, active, n_groups, rows, max_rows, x, NULL, &y);
}

void di_cuda_linear_mma_pair(di_cuda_ctx *ctx, const di_weight *shape, const uint8_t *const *wdata_a,
                             const uint8_t *const *wscale_a, const uint8_t *const *wdata_b,
                             const uint8_t *const *wscale_b, const int *row_off, const int *active, int n_groups,
                             int64_t rows, int64_t max_rows, const float *x, const float *const *x_rows, float *y_a,
                             float *y_b) {
    const uint8_t *const *wd[2] = {wdata_a, wdata_b}, *const *ws[2] = {wscale_a, wscale_b};
    float *const y[2] = {y_a, y_b};
    linear_mma_sets(ctx, shape, 2, NULL, NULL, wd, ws, row_off, active, n_groups, rows, max_rows, x, x_rows, y);
}

bool di_cuda_linear_mma_pair_swiglu(di_cuda_ctx *ctx, const di_weight *shape, const uint8_t *const *wdata_a,
                                    const uint8_t *const *wscale_a, const uint8_t *const *wdata_b,
                                    const uint8_t *const *wscale_b, const int *row_off, const int *active, int n_groups,
                                    int64_t rows, int64_t max_rows, const float *x, const float *const *x_rows,
                                    const di_gemv_swiglu *sw) {
    if (ctx->exact || !di_cuda_linear_mma_supported(shape) || rows <= 0 || max_rows <= 0) return false;
    const mm_plan plan = linear_plan(ctx, shape, row_off != NULL, n_groups, rows, max_rows, row_off);
    if (!plan.imma || !di_cuda_gemv_imma_swiglu_ok(shape->cols, shape->rows, plan.tile_rows)) return false;
    const uint8_t *const *wd[2] = {wdata_a, wdata_b}, *const *ws[2] = {wscale_a, wscale_b};
    float *const y[2] = {sw->h, sw->h}; /* not written */
    linear_mma_sets(ctx, shape, 2, NULL, NULL, wd, ws, row_off, active, n_groups, rows, max_rows, x, x_rows, y, sw);
    return true;
}

/* the set past the twin's rows: x's act_quant values as bf16 once (a launch each matrix converted
 * them for itself: at B = 256 two of 4.7 us a layer for wq_a / wkv and two for the shared w1 / w3,
 * a 4,096-token prefill's 33 us each), then each matrix's wgmma call with its own K split -- the
 * bits of the matrices alone */
static void linear_mma_set_wg(di_cuda_ctx *ctx, int n, const di_weight *const *w, const float *x, int64_t m,
                              float *const *y) {
    const int64_t K = w[0]->cols, nb = K / 32;
    const bool fp4 = w[0]->dtype == DI_DT_I8;
    int ksplit[DI_GEMV_MAX_MATS], split_blocks[DI_GEMV_MAX_MATS], consumers[DI_GEMV_MAX_MATS];
    int64_t part_row = 0; /* the largest split's partial sums a row: [ksplit][m][N], reused in stream order */
    int64_t max_n = 0;    /* the largest matrix's rows (cuBLAS's scratch) */
    for (int i = 0; i < n; i++) {
        ksplit[i] = di_cuda_wg_ksplit(ctx, fp4, w[i]->rows, m, K, &split_blocks[i], &consumers[i]);
        const int64_t need = ksplit[i] > 1 ? ksplit[i] * w[i]->rows : 0;
        part_row = need > part_row ? need : part_row;
        max_n = w[i]->rows > max_n ? w[i]->rows : max_n;
    }
    const size_t xb_bytes = (sizeof(uint16_t) * (size_t)(m * K) + 255) & ~(size_t)255;
    /* cuBLAS's BF16 GEMM on dequantised weights where its scratch fits, else the wgmma kernel */
    const uint8_t *codes[DI_GEMV_MAX_MATS];
    for (int i = 0; i < n; i++) codes[i] = (const uint8_t *)w[i]->data;
    const size_t blas_bytes = fp4 ? 0 : di_cuda_blas_reserve(ctx, m, max_n, K, xb_bytes, n, codes);
    const bool blas = blas_bytes > 0;
    const size_t extra = blas ? blas_bytes : sizeof(float) * (size_t)(m * part_row); /* after xb */
    uint8_t *base = (uint8_t *)di_cuda_scratch(ctx, xb_bytes + extra);
    const uint16_t *xb = (const uint16_t *)base; /* [m, K] bf16: x's producer's (the MoE's input), or made here */
    float *part = (float *)(base + xb_bytes);    /* [ksplit][m][N] of the matrix in flight */
    const di_cuda_act_forms *made = act_forms_lookup(ctx, x, m, K);
    if (made && made->qbf16) xb = made->qbf16;
    else di_cuda_act_quant_bf16(x, NULL, nb, m * nb, (uint16_t *)base, ctx->stream);
    for (int i = 0; i < n; i++) {
        const int64_t N = w[i]->rows;
        if (blas) { /* the scratch after xb reused in stream order */
            di_cuda_blas_fp8(ctx, xb, K, m, (const uint8_t *)w[i]->data, w[i]->scale, N, 1, K, y[i], N, base + xb_bytes);
            continue;
        }
        const mm_groups grp = {NULL, NULL, NULL, NULL, 0, 0, 0, NULL};
        mm_args a = {(const uint8_t *)xb, K, NULL, m, N, K, (const uint8_t *)w[i]->data, w[i]->scale, y[i], N, true,
                     grp, 1, m, ksplit[i], split_blocks[i], part, m};
        a.consumers = consumers[i];
        wg_run(ctx, a, fp4, NULL, ctx->stream);
    }
}

bool di_cuda_linear_mma_set(di_cuda_ctx *ctx, int n, const di_weight *const *w, const float *x, int64_t m,
                            float *const *y) {
    if (n < 1 || n > DI_GEMV_MAX_MATS || ctx->tiled_only || ctx->exact || m <= 0) return false;
    const int64_t K = w[0]->cols, nb = K / 32;
    const bool fp4 = w[0]->dtype == DI_DT_I8;
    di_gemv_mat mats[DI_GEMV_MAX_MATS];
    bool twin = true;
    for (int i = 0; i < n; i++) {
        if (w[i]->cols != K || w[i]->dtype != w[0]->dtype || !di_cuda_linear_mma_supported(w[i]) ||
            ((uintptr_t)w[i]->data & 15) != 0)
            return false;
        int split_blocks;
        const int ksplit = mm_ksplit(w[i]->rows, K, true, &split_blocks); /* each matrix's own */
        twin = twin && di_cuda_gemv_ok(false, false, K, m, ksplit);
        mats[i] = di_gemv_mat{w[i]->rows, (const uint8_t *)w[i]->data, w[i]->scale, NULL, NULL, ksplit, split_blocks, y[i]};
    }
    if (!twin) {
        if (!di_cuda_wgmma_taken(ctx, fp4, K, m)) return false;
        linear_mma_set_wg(ctx, n, w, x, m, y);
        return true;
    }
    const size_t q_bytes = ((size_t)(m * K) + 255) & ~(size_t)255;
    float *part;
    uint8_t *xq = mm_scratch(ctx, q_bytes + sizeof(float) * (size_t)(m * nb), 1, m, 0, &part); /* [m, K] e4m3 codes */
    float *xsc = (float *)(xq + q_bytes);                                                     /* [m, K/32] */
    const di_cuda_act_forms *made = act_codes_made(ctx, x, m, K);
    if (made) xq = made->q, xsc = made->scale;
    else di_cuda_act_quant_e4m3(x, NULL, nb, m * nb, xq, xsc, ctx->stream);
    di_cuda_gemv_quant(ctx->stream, w[0]->dtype == DI_DT_I8, K, n, mats, NULL, NULL, 1, m, m, m, xq, xsc, NULL);
    return true;
}

bool di_cuda_linear_bf16w8_supported(const di_weight *w, int64_t rows_per_group, int n_groups, int64_t lda) {
    /* groups must start on a 32-row scale block (group g's scales are read relative to its first row) */
    return w->dtype == DI_DT_F8_E4M3 && w->scale && w->cols % 32 == 0 && w->row0 % 32 == 0 &&
           (n_groups == 1 || rows_per_group % 32 == 0) && lda % 8 == 0 && ((uintptr_t)w->data & 15) == 0;
}

/* di_cuda_linear_bf16w8's K split of the shape (*ksplit, *split_blocks; the wgmma kernel may drop
 * it: wg_ksplit), and whether the call of m rows takes the decode twin */
static bool bf16w8_twin(const di_cuda_ctx *ctx, const di_weight *w, int64_t rows_per_group, int n_groups, int64_t m,
                        int *ksplit, int *split_blocks) {
    *ksplit = n_groups > 1 ? mm_ksplit_n(w->cols / 32, MM_SLICE_SPLITS, split_blocks)
                           : mm_ksplit(rows_per_group, w->cols, true, split_blocks);
    return !ctx->tiled_only && di_cuda_gemv_ok(true, n_groups > 1, w->cols, m, *ksplit);
}

bool di_cuda_linear_bf16w8_reads_bf16(const di_cuda_ctx *ctx, const di_weight *w, int64_t rows_per_group, int n_groups,
                                      int64_t m) {
    int ksplit, split_blocks;
    return m > 0 && !bf16w8_twin(ctx, w, rows_per_group, n_groups, m, &ksplit, &split_blocks);
}

/* x [m, lda] (bf16-exact values; group g's inputs are columns g*cols_per_group..) -> y [m, ldy]:
 * n_groups diagonal blocks of the FP8 weight `w` (rows_per_group rows each, from w->row0) */
bool di_cuda_linear_bf16w8(di_cuda_ctx *ctx, const di_weight *w, int64_t rows_per_group, int n_groups,
                           const float *x, int64_t lda, int64_t m, float *y, int64_t ldy, const di_cuda_act_forms *yq) {
    cudaStream_t s = ctx->stream;
    if (m <= 0 || rows_per_group <= 0) return false;
    const int64_t K = w->cols, nb = K / 32, n_in = m * lda;
    int ksplit, split_blocks;
    const bool twin = bf16w8_twin(ctx, w, rows_per_group, n_groups, m, &ksplit, &split_blocks);
    const uint8_t *wd = (const uint8_t *)w->data + w->row0 * K, *ws = w->scale + (w->row0 / 32) * nb;
    if (twin) { /* decode sizes: the twin kernel */
        const bool codes = yq && yq->q && yq->scale && di_cuda_gemv_codes_ok(rows_per_group, ldy, ksplit);
        di_cuda_gemv_bf16w8(s, wd, ws, rows_per_group, n_groups, K, x, lda, m, y, ldy, ksplit, split_blocks,
                            codes ? yq->q : NULL, codes ? yq->scale : NULL);
        return codes;
    }
    const bool wg = di_cuda_wgmma_taken(ctx, false, K, m); /* past the twin's rows */
    const size_t xs_bytes = (sizeof(uint16_t) * (size_t)n_in + 255) & ~(size_t)255;
    /* prefill sizes: cuBLAS's BF16 GEMM where its scratch fits */
    const size_t blas_bytes = wg ? di_cuda_blas_reserve(ctx, m, rows_per_group * n_groups, K, xs_bytes, 1, &wd) : 0;
    const bool blas = blas_bytes > 0;
    if (wg) ksplit = wg_ksplit(rows_per_group * n_groups, m, K, ksplit, &split_blocks);
    float *part;
    uint8_t *base = mm_scratch(ctx, xs_bytes + blas_bytes, blas ? 1 : ksplit, m, ldy, &part);
    const uint16_t *xb = act_bf16(ctx, x, m, lda, (uint16_t *)base); /* [m, lda] */
    if (blas) {
        di_cuda_blas_fp8(ctx, xb, lda, m, wd, ws, rows_per_group, n_groups, K, y, ldy, base + xs_bytes);
        return false;
    }
    const mm_args a = {(const uint8_t *)xb, lda, NULL, m, rows_per_group, K, wd, ws, y, ldy, true,
                       {NULL, NULL, NULL, NULL, K, rows_per_group, rows_per_group}, n_groups, 0, ksplit, split_blocks, part, m};
    if (wg) { /* the FP8 wgmma kernel on the bf16 values */
        wg_run(ctx, a, false, NULL, s);
        return false;
    }
    run_cfg<MM_A16>(a, s);
    return false;
}

/* BF16 linears on the decode twin: at least this many output features, at most this many rows */
#define W16_TWIN_MIN_N 8192
#define W16_TWIN_MAX_ROWS 4

bool di_cuda_w16_twin_taken(const di_cuda_ctx *ctx, const di_weight *w, int64_t m) {
    int split_blocks;
    const int ksplit = mm_ksplit(w->rows, w->cols, true, &split_blocks);
    return !ctx->tiled_only && w->rows >= W16_TWIN_MIN_N && m <= W16_TWIN_MAX_ROWS &&
           di_cuda_gemv_ok(true, false, w->cols, m, ksplit);
}

bool di_cuda_linear_w16_supported(const di_weight *w) {
    return w->dtype == DI_DT_BF16 && w->cols % 32 == 0 && w->row0 == 0 && ((uintptr_t)w->data & 15) == 0;
}

/* y [m, N] = x [m, K] (bf16-exact values) @ W^T with BF16 weights, fp32 sums; bf16-rounded or not; with
 * keep_parts a K split's partial sums are left unreduced and returned (else y is) */
static const float *linear_w16(di_cuda_ctx *ctx, const di_weight *w, const float *x, int64_t m, float *y, bool out_bf16,
                               bool keep_parts, int *ksplit_out) {
    cudaStream_t s = ctx->stream;
    *ksplit_out = 1;
    if (m <= 0 || w->rows <= 0) return y;
    const int64_t K = w->cols, n_in = m * K;
    int shape_blocks;
    const int shape_split = mm_ksplit(w->rows, K, true, &shape_blocks);
    /* the decode twin for large matrices at few rows only (the head: 704 -> 332 us at B = 1, 95% of
     * the HBM copy rate); the router gate (384 rows: 24 blocks of 5 warps) ran slower on it (13.8 us
     * against 9.4 with the reduce), and B = 8 / 16 steps ran 6% / 13% slower with every BF16 linear
     * on the twin (session 16) */
    if (di_cuda_w16_twin_taken(ctx, w, m)) {
        di_cuda_gemv_w16(s, (const uint16_t *)w->data, w->rows, K, x, m, y, out_bf16, shape_split, shape_blocks);
        return y;
    }
    /* past the twin's rows the wgmma kernel (H200, B = 256: the head 1.86 -> 1.04 ms, the router's
     * gate 30 -> 18.5 us against the tiled kernel's 128 x 128 tiles; session 35) */
    const bool wg = di_cuda_wgmma_taken(ctx, false, K, m);
    /* fp32 outputs of a large matrix (the head) at 128 rows and more: cuBLAS's GEMM (the wgmma
     * kernel's 128 x 128 tiles ran the head at 256 rows at half its rate: DI_CUDA_BLAS_W16_MIN_ROWS) */
    const bool blas = wg && !out_bf16 && !keep_parts && di_cuda_blas_w16_taken(ctx, m, w->rows);
    int split_blocks = shape_blocks;
    /* BF16 weights take two consumer warpgroups a CTA: no choice of three */
    const int ksplit = blas ? 1 : wg ? di_cuda_wg_ksplit(ctx, false, w->rows, m, K, &split_blocks, NULL) : shape_split;
    float *part;
    uint16_t *xs = (uint16_t *)mm_scratch(ctx, sizeof(uint16_t) * (size_t)n_in, ksplit, m, w->rows, &part); /* [m, K] */
    const uint16_t *xb = act_bf16(ctx, x, m, K, xs);
    if (blas) {
        di_cuda_blas_w16(ctx, xb, m, (const uint16_t *)w->data, w->rows, K, y);
        return y;
    }
    const mm_args a = {(const uint8_t *)xb, K, NULL, m, w->rows, K, (const uint8_t *)w->data, NULL, y, w->rows,
                       out_bf16, {NULL, NULL, NULL, NULL, 0, 0, 0}, 1, 0, ksplit, split_blocks, part, m,
                       keep_parts};
    if (wg) {
        di_wg_gemm_w16(xb, m, w->rows, K, (const uint16_t *)w->data, y, out_bf16, ksplit, split_blocks, part, s);
        reduce_splits(a, s);
    } else {
        run_cfg<MM_W16>(a, s);
    }
    if (!keep_parts || ksplit == 1) return y;
    *ksplit_out = ksplit;
    return part;
}

void di_cuda_linear_w16(di_cuda_ctx *ctx, const di_weight *w, const float *x, int64_t m, float *y, bool out_bf16) {
    int ksplit;
    linear_w16(ctx, w, x, m, y, out_bf16, false, &ksplit);
}

const float *di_cuda_linear_w16_parts(di_cuda_ctx *ctx, const di_weight *w, const float *x, int64_t m, float *y,
                                      int *ksplit) {
    return linear_w16(ctx, w, x, m, y, false, true, ksplit);
}
