/* Decode-sized linear layers on tensor cores: the twin of cuda_linear_mma.cu's FP8 / FP4
 * (DI_LIN_QUANT) GEMM, of its bf16 x FP8 one (A16, wo_a) and of its bf16 x BF16 one (W16: the head,
 * di_cuda_w16_twin_taken; no scales, a unit one in the fold) for at most DI_GEMV_MAX_ROWS activation
 * rows of one matrix or DI_GEMV_MAX_GROUP_ROWS per group (di_cuda_gemv_ok), where the tiled kernel
 * streams weights at 10-22% of the HBM rate (a single 16-row tile per block, weights staged through
 * shared memory, one act_quant or bf16 conversion launch and one split-K reduce launch around it).
 *
 * Same numbers, bit for bit: every output is the fold, in ascending K-block order within the same
 * K splits (mm_ksplit's, from the weight's shape), of acc = fma(blocksum, xs * ws, acc), where the
 * block sum is the same mma.sync m16n8k32 e4m3 instruction over the same 32 products, and the
 * splits' partial sums are added in split order before the bf16 rounding. The tiled kernel puts the
 * activations in A (rows = tokens) and the weights in B; the twin swaps them (A = 16 weight rows,
 * B = 8 tokens: one mma covers a warp's 16 features, where A's 16 token rows were mostly empty at
 * decode) -- the tensor core's sum of one output is the same either way (test_cuda_fwd_ops
 * compares the two kernels bit for bit on the H200). So batch invariance and every test of the
 * tiled kernel carry over.
 *
 * Layout: a warp owns 16 output features of one K split. FP8 (A16's too) and BF16 weight rows stream
 * through a ring of chunks in shared memory (cp.async of whole 128-byte row segments; GV_CH below),
 * from which lane 4g + t reads its fragment of rows g and g + 8 (FP8: one ldmatrix a block; W16: one
 * a k16 half; A16: the two words holding each of its halfword pairs, merged by one byte permute).
 * FP4 rows stream straight from global memory into fragment registers through a ring of GV_STEP
 * blocks (lane pairs each load one of the two words both need and exchange them by a shuffle;
 * merged, then widened to e4m3). The block first copies its activation rows into shared memory (the
 * e4m3 codes and scales of the tiled path's act_quant launch, which runs once per call: quantising
 * in every block cost more than the weights' streaming; scales transposed so a lane's two tokens
 * are one 8-byte load; A16 / W16: converts them to bf16, two k16 bf16 mmas per block and the weight
 * scale alone, as the tiled kernel) while the
 * first weights load. sm_90 has no e4m3 mma: ptxas turns each into two f16 mmas over f16-widened
 * operands, so the kernel issues those itself (di_mma_e4m3_16832_f16, the same bits) and, for
 * FP4 blocks of 8 rows, stages the activations already widened to f16 -- each B fragment is then
 * two 8-byte shared loads instead of two loads and four conversions per block and token tile
 * (gv_x16). Rows are padded so a warp's fragment loads of its 8 rows hit all 32 banks. MT tokens
 * per block: one n8 tile per 8. A block holds tiles_per_block feature tiles x ksplit splits, one
 * warp each; splits meet in shared memory. Needs K % 128 == 0 (scale rows read 4 blocks per load).
 * One launch may run two matrices over the same activations (gv_mat: w1 and w3, wq_a and wkv), the
 * second's blocks after the first's, each with its own K split: alone, each left multiprocessors
 * idle (w1: 108 blocks of one warp group on 132 multiprocessors at B = 1). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_mma.cuh"

#include <type_traits>

#define GV_WARPS 8        /* warps per block (feature tiles x K splits), at most */
#define GV_TILE 16        /* output features per warp */
#define GV_SMEM_MAX (227 * 1024) /* the opt-in limit of a block on sm_90 */

/* FP8 / A16 / W16: the weights stream through shared memory. Each warp copies its 16 rows a chunk of
 * 128 bytes a row at a time (GV_CH FP8 K blocks, 2 BF16 ones: a quarter warp's 16-byte cp.async
 * fills a whole line) into a ring of GV_RING(MT) chunks and reads its fragments from there (FP8:
 * one ldmatrix a block).
 * The register ring that FP4 keeps (4-byte loads straight into fragment registers, a lane pair's
 * words exchanged by shuffles) touched 8 rows' lines for 128 bytes a load: for FP8 it held the L1
 * at 60-90% of its throughput while DRAM ran at 15-40% (ncu, B = 1). FP4 through the ring (8-block
 * chunks) ran as fast at B = 1 and 13-17% slower at B = 8-64, where its f16 activation rows and
 * the ring left one block a multiprocessor (session 16). */
#define GV_CH 4
#define GV_RING(mt) ((mt) == 8 ? 4 : 3) /* 16-row blocks stage twice the activations: one chunk less */
#define GV_PITCH 144                    /* bytes of a staged row: 128 + 16, so 8 rows' fragment loads hit all 32 banks */
#define GV_SLOT (16 * GV_PITCH + 16)    /* a chunk in the ring: its 16 rows, then its scale word (4 blocks) */
#define GV_STEP 16 /* FP4: K blocks a step of the register ring (its slots: how far its loads run ahead);
                    * 32 ran slower on the H200 (40.5 us a launch against 31.7) */

/* act_quant'ed x FP8 / FP4 weights; bf16 x FP8 weights (wo_a); bf16 x BF16 weights (router, head) */
enum { GV_FP8, GV_FP4, GV_A16, GV_W16 };
static constexpr __host__ __device__ bool gv_bf16_act(int mode) { return mode == GV_A16 || mode == GV_W16; }

/* one weight matrix (or set of groups) of a launch: a launch runs up to GV_MATS of them over the same
 * activations (w1 and w3, wq_a and wkv: one launch fills the card where each alone left
 * multiprocessors idle), matrix 1's blocks after matrix 0's along grid.x */
#define GV_MATS DI_GEMV_MAX_MATS
struct gv_mat {
    const uint8_t *wdata, *wscale;                   /* one matrix */
    const uint8_t *const *wdata_g, *const *wscale_g; /* groups: [n_groups] device pointers */
    float *y;                                        /* [rows, ldy] */
    int64_t N, ldy;
    int ksplit, split_blocks, tiles_per_block; /* its warps: tiles_per_block x ksplit (<= the block's) */
    int blocks;                                /* its blocks along grid.x */
};

struct gv_args {
    const float *x;    /* A16: [rows, lda] fp32 activations (bf16-exact values) */
    const uint8_t *xq; /* FP8 / FP4: [rows, K] their act_quant e4m3 codes (act_quant_e4m3_kernel's) */
    const float *xsg;  /*             [rows, K / 32] and scales */
    int64_t M, K, lda;
    const int *row_off, *active; /* groups: [n_groups + 1], slot -> group or NULL */
    const int *tiles;            /* groups: NULL, or the row-tile list (di_group_tiles) blockIdx.z indexes */
    /* row_off NULL and several groups (A16, wo_a): block-diagonal slices of one matrix, group g
     * reading x columns g * K.., weight rows g * N.. and writing y columns g * N.. */
    gv_mat mat[GV_MATS];
    int n_mats;
    int xrows;     /* activation rows staged per block: min(MT, max_rows) rounded up to even */
    bool out_bf16; /* outputs rounded to bf16 (else fp32: W16's plain F32 mode) */
    /* or NULL: act_quant(y, 32) too, codes [rows, ldy] and scales [rows, ldy / 32], made by the K
     * splits' sum (one matrix, ksplit > 1, gv_codes_ok: wo_a's output for wo_b) */
    uint8_t *yq;
    float *ysc;
};

/* FP4: the register ring's weight words (a lane pair's two words of rows g, g + 8 per block: this
 * lane's one, merged with the partner's at use) and scale words (4 blocks each) of features g, g + 8 */
struct gv_fp4_step {
    uint32_t w[2][GV_STEP];
    uint32_t sc[2][GV_STEP / 4];
};

/* FP4 blocks of 8 activation rows stage them as f16 (the e4m3 values widened once, exactly), so
 * the mma's B fragments are plain shared-memory loads: the FP4 twin is bound by its instruction
 * count. FP8 keeps the e4m3 codes (staged as f16 its twin ran 2% slower on the H200: 21.8 against
 * 21.3 us a launch of the (80, 1, 1) grid at B = 1), as do blocks of 16 rows (K = 8,192 would not
 * fit twice) */
static constexpr __host__ __device__ bool gv_x16(int mode, int mt) { return mode == GV_FP4 && mt == 8; }
/* bytes of a staged row: padded by 16 (32 for f16) so that a warp's fragment loads of its 8 rows
 * hit all 32 banks */
static constexpr __host__ __device__ int64_t gv_xrow_bytes(int mode, int mt, int64_t K) {
    return gv_bf16_act(mode) ? 2 * K + 16 : gv_x16(mode, mt) ? 2 * K + 32 : K + 16;
}

/* shared memory of a block: xrows staged activation rows (f16, codes or bf16), their scales (not
 * A16) and the K splits' partial sums [warps][MT][16]; then the warps' weight rings, 128-byte
 * aligned: the ring's offset */
static __host__ __device__ size_t gv_ring_offset(int mode, int mt, int xrows, int64_t K, int warps) {
    const size_t b = (size_t)xrows * (size_t)gv_xrow_bytes(mode, mt, K) +
                     (gv_bf16_act(mode) ? 0 : sizeof(float) * (size_t)mt * (size_t)(K / 32)) +
                     sizeof(float) * (size_t)warps * mt * GV_TILE;
    return (b + 127) & ~(size_t)127;
}

/* PRE: a launch of single matrices (no row_off; FP8 / A16 / W16) issues its weight ring's first
 * chunks before griddepcontrol.wait -- nothing there reads what an earlier kernel writes (the
 * weights, the launch's arguments) -- and stages the activations after it. Reached through a
 * programmatic edge (gpu_graph.c), the kernel is launched as its predecessor's blocks exit, so its
 * first weights are in flight while the predecessor's memory is flushed (session 50, H100: B = 1
 * ~10.7 -> ~10.25 ms a step, B = 64 -2%). Launching it earlier still -- from the predecessor's
 * launch (port LaunchCompletion), its blocks resident and their first chunks loading while the
 * predecessor ran -- was slower at B = 1 (~11.3 ms) and the same past it. Groups (the routed
 * experts) read their weights' addresses from the routing's lists, after the wait. */
template <int MODE, int MT, bool PRE>
__global__ void __launch_bounds__(GV_WARPS * 32, 2) gemv_bs_kernel(gv_args a) {
    static_assert(!PRE || MODE != GV_FP4, "the FP4 twin's register ring starts after the wait");
    if (!PRE) DI_PDL_BEGIN();
    constexpr bool FP4 = MODE == GV_FP4, W16 = MODE == GV_W16;
    constexpr bool A16 = gv_bf16_act(MODE); /* bf16 activations (A16 and W16) */
    constexpr bool X16 = gv_x16(MODE, MT); /* activations staged as f16 */
    constexpr int TH = MT / 8; /* token halves: n8 mma tiles */
    extern __shared__ int4 gv_smem[];
    /* this block's matrix (uniform over the block): fields copied out one by one (a dynamic index
     * into the parameters would copy them to local memory) */
    const bool second = a.n_mats > 1 && blockIdx.x >= (unsigned)a.mat[0].blocks;
    auto pick = [&](auto v0, auto v1) { return second ? v1 : v0; };
    const int64_t N = pick(a.mat[0].N, a.mat[1].N), ldy = pick(a.mat[0].ldy, a.mat[1].ldy);
    const int ksplit = pick(a.mat[0].ksplit, a.mat[1].ksplit), split_blocks = pick(a.mat[0].split_blocks, a.mat[1].split_blocks);
    const int tiles_per_block = pick(a.mat[0].tiles_per_block, a.mat[1].tiles_per_block);
    const unsigned bx = blockIdx.x - (second ? (unsigned)a.mat[0].blocks : 0u);
    const int64_t K = a.K, nb = K / 32, xrow = gv_xrow_bytes(MODE, MT, K);
    const int xrows = a.xrows;
    int64_t M = a.M;
    const float *x = a.x;
    const uint8_t *xqg = a.xq;
    const float *xsg = a.xsg;
    float *y = pick(a.mat[0].y, a.mat[1].y);
    const uint8_t *wdata = pick(a.mat[0].wdata, a.mat[1].wdata), *wscale = pick(a.mat[0].wscale, a.mat[1].wscale);
    int64_t m0 = (int64_t)blockIdx.y * MT; /* the block's first row (of its group) */
    int64_t y_off = 0; /* y's offset from the matrix's y (the codes' too) */
    if (!PRE && a.row_off) { /* this block's group (uniform over the block; PRE: never groups) */
        int gi, r0;
        if (!di_dev_block_group(a.row_off, a.active, a.tiles, (int)blockIdx.z, &m0, &gi, &r0, &M)) return;
        wdata = pick(a.mat[0].wdata_g, a.mat[1].wdata_g)[gi];
        wscale = pick(a.mat[0].wscale_g, a.mat[1].wscale_g)[gi];
        x += (int64_t)r0 * a.lda;
        xqg += (int64_t)r0 * K;
        xsg += (int64_t)r0 * nb;
        y_off = (int64_t)r0 * ldy;
    } else if (blockIdx.z) { /* block-diagonal slice (N % 32 == 0) */
        const int64_t gi = blockIdx.z;
        x += gi * K;
        wdata += gi * N * K;
        wscale += gi * (N / 32) * nb;
        y_off = gi * N;
    }
    y += y_off;
    int rows = M - m0 < MT ? (int)(M - m0) : MT;
    rows = rows < xrows ? rows : xrows; /* xrows >= every block's rows (the launcher's bound) */
    uint8_t *xq = reinterpret_cast<uint8_t *>(gv_smem); /* [xrows][xrow] rows m0..: f16, e4m3 codes or (A16) bf16 */
    float *xs = reinterpret_cast<float *>(xq + xrows * xrow); /* [nb][MT] their scales (not A16) */
    float *part = xs + (A16 ? 0 : MT * nb);                   /* [ksplit][tiles_per_block][MT][16] */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int tile_local = warp / ksplit, ks = warp % ksplit;
    const bool mine_warp = warp < tiles_per_block * ksplit; /* the block's other matrix may take more warps */
    const int64_t n0 = ((int64_t)bx * tiles_per_block + tile_local) * GV_TILE;
    const int64_t blk0 = (int64_t)ks * split_blocks;
    const int64_t blk1 = blk0 + split_blocks < nb ? blk0 + split_blocks : nb;
    const bool busy = mine_warp && n0 < N && blk0 < nb; /* uniform over the warp */

    /* FP8 / A16 / W16: the warp's ring of RING chunks, each CH K blocks (128 bytes) of its 16 weight
     * rows and (not W16) the tile's 32-row block's scale word: lane l copies 16 bytes at column l % 8
     * of rows 4i + l / 8 (a row past N copies row N - 1: its products land only in outputs that are
     * never stored), lane 0 the scale word */
    constexpr bool STAGED = !FP4;
    constexpr int RING = GV_RING(MT), CH = W16 ? 2 : GV_CH, BB = W16 ? 64 : 32; /* blocks a chunk, bytes a block */
    uint8_t *ring = reinterpret_cast<uint8_t *>(gv_smem) + gv_ring_offset(MODE, MT, xrows, K, blockDim.x / 32) +
                    warp * RING * GV_SLOT; /* [RING][16 rows][GV_PITCH], then the scale word */
    const uint8_t *csrc[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t n = n0 + 4 * i + (lane >> 3) < N ? n0 + 4 * i + (lane >> 3) : N - 1;
        csrc[i] = wdata + n * (BB / 32) * K + 16 * (lane & 7);
    }
    const uint8_t *tile_scales = W16 ? NULL : wscale + (n0 < N ? n0 / 32 : 0) * nb;
    const int n_chunks = STAGED && busy ? (int)((blk1 - blk0) / CH) : 0; /* splits are whole chunks */
    auto issue_chunk = [&](int c) {
        const int64_t b = blk0 + (int64_t)c * CH;
        uint8_t *dst = ring + (c % RING) * GV_SLOT;
#pragma unroll
        for (int i = 0; i < 4; i++) di_cp_async16(dst + (4 * i + (lane >> 3)) * GV_PITCH + 16 * (lane & 7), csrc[i] + BB * b, true);
        if (!W16 && lane == 0) di_cp_async4(dst + 16 * GV_PITCH, tile_scales + b, true);
    };
    /* the ring's first RING - 1 chunks, a group each (every warp commits as many groups) */
    auto issue_ring_prologue = [&]() {
        for (int c = 0; c < RING - 1; c++) {
            if (c < n_chunks) issue_chunk(c);
            di_cp_async_commit();
        }
    };

    /* FP4: the register ring. Lane 4g + t needs halfword t & 1 of the words at 4(t >> 1) and
     * 8 + 4(t >> 1) of each 16-byte block of rows g and g + 8 (a row past N reads row N - 1); lanes t
     * and t ^ 1 need the other halves of the same words, so the even lane loads the first word, the
     * odd one the second, and one shuffle gives each the other: pair_sel merges (mine, partner's)
     * into (first word's, second word's) halfword t & 1. wp[h]: the lane's word of row h at block blk0,
     * then a step ahead of the blocks in use; sp[h]: scale row h (4 blocks a word) */
    const uint32_t pair_sel = (t & 1) ? 0x3276u : 0x5410u;
    auto pair_merge = [&](uint32_t mine) { return __byte_perm(mine, __shfl_xor_sync(0xffffffffu, mine, 1), pair_sel); };
    const uint8_t *wp[2] = {NULL, NULL}, *sp[2] = {NULL, NULL};
    for (int h = 0; FP4 && h < 2; h++) {
        const int64_t n = n0 + 8 * h + g < N ? n0 + 8 * h + g : N - 1;
        wp[h] = wdata + n * (K / 2) + 16 * blk0 + 8 * (t & 1) + 4 * (t >> 1);
        sp[h] = wscale + n * nb + blk0;
    }
    auto word = [](const uint8_t *p) { return __ldg(reinterpret_cast<const uint32_t *>(p)); };
    /* slot j of st <- block j of wp; the scale slots q <- blocks 4q.. of sp */
    auto load_block = [&](gv_fp4_step &st, int j) {
#pragma unroll
        for (int h = 0; h < 2; h++) st.w[h][j] = word(wp[h] + 16 * j);
    };
    auto load_scales = [&](gv_fp4_step &st, int q) {
#pragma unroll
        for (int h = 0; h < 2; h++) st.sc[h][q] = word(sp[h] + 4 * q);
    };
    auto advance = [&]() {
        for (int h = 0; h < 2; h++) wp[h] += 16 * GV_STEP, sp[h] += GV_STEP;
    };
    gv_fp4_step st; /* each slot is refilled with the block a step ahead as soon as it is used */

    /* The activation rows m0 .. m0 + rows (32-bit indices: no 64-bit division). Each copy is issued
     * before any is waited for: a loop of one load and one store a turn took a round trip to the L2
     * per turn (B = 1: 5-16 turns, 2-6 us of a 10-20 us launch). Quantised codes (unless widened)
     * and scales go by cp.async -- the scales transposed, rows past the block's zero-filled --, as
     * the group committed before the weight ring's (waited for below, the ring's still in flight);
     * bf16 and f16 rows, converted on the way, through registers, a batch of loads at a time. */
    /* PRE: the ring's first chunks before the wait, the staging group after them (waited for whole) */
    if (PRE) {
        issue_ring_prologue();
        DI_PDL_BEGIN();
    }
    if (!A16) {
        if (!X16)
            for (int i = threadIdx.x; i < rows * (int)(K / 16); i += blockDim.x) { /* 16 codes a copy */
                const int r = i / (int)(K / 16), c = i - r * (int)(K / 16);
                di_cp_async16(xq + r * xrow + 16 * c, xqg + (m0 + r) * K + 16 * c, true);
            }
        for (int i = threadIdx.x; i < MT * (int)nb; i += blockDim.x) { /* scale j of row r -> xs[j][r] */
            const int r = i / (int)nb, j = i - r * (int)nb;
            di_cp_async4(xs + j * MT + r, xsg + (m0 + (r < rows ? r : 0)) * nb + j, r < rows);
        }
    }
    di_cp_async_commit();
    if (STAGED && !PRE) { /* in flight while the activations are staged */
        issue_ring_prologue();
    } else if (busy) {
        const int64_t n = blk1 - blk0;
#pragma unroll
        for (int j = 0; j < GV_STEP; j++) {
            if (j < n) load_block(st, j);
            if (j % 4 == 0 && j < n) load_scales(st, j / 4); /* blk1 and blk0 are multiples of 4 */
        }
        advance();
    }

    constexpr int BATCH = 8; /* loads in flight a thread */
    if (A16) { /* rows m0 .. m0 + rows as bf16 (di_cuda_f32_to_bf16's rounding), two values a load */
        const int pairs = (int)(K / 2), n = rows * pairs;
        for (int base = threadIdx.x; base < n; base += BATCH * blockDim.x) {
            float2 v[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; u++) {
                const int i = base + u * (int)blockDim.x, r = i / pairs, c = i - r * pairs;
                if (i < n) v[u] = __ldg(reinterpret_cast<const float2 *>(x + (m0 + r) * a.lda + 2 * c));
            }
#pragma unroll
            for (int u = 0; u < BATCH; u++) {
                const int i = base + u * (int)blockDim.x, r = i / pairs, c = i - r * pairs;
                if (i < n)
                    *reinterpret_cast<uint32_t *>(xq + r * xrow + 4 * c) =
                        di_dev_bf16_bits(v[u].x) | di_dev_bf16_bits(v[u].y) << 16;
            }
        }
    } else if (X16) { /* the act_quant'ed codes widened to f16 (exact), 16 a load */
        const int quads = (int)(K / 16), n = rows * quads;
        for (int base = threadIdx.x; base < n; base += BATCH / 2 * blockDim.x) {
            uint4 q[BATCH / 2];
#pragma unroll
            for (int u = 0; u < BATCH / 2; u++) {
                const int i = base + u * (int)blockDim.x, r = i / quads, c = i - r * quads;
                if (i < n) q[u] = __ldg(reinterpret_cast<const uint4 *>(xqg + (m0 + r) * K + 16 * c));
            }
#pragma unroll
            for (int u = 0; u < BATCH / 2; u++) {
                const int i = base + u * (int)blockDim.x, r = i / quads, c = i - r * quads;
                if (i >= n) continue;
                const uint32_t qw[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
                uint32_t h[8];
#pragma unroll
                for (int w = 0; w < 4; w++) di_e4m3x4_to_f16x4(qw[w], &h[2 * w], &h[2 * w + 1]);
                uint4 *dst = reinterpret_cast<uint4 *>(xq + r * xrow + 32 * c);
                dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
                dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
            }
        }
    }
    if (STAGED && !PRE) di_cp_async_wait<RING - 1>(); /* this thread's staging copies (the ring's may be in flight) */
    else di_cp_async_wait<0>(); /* PRE: the ring's chunks too, issued before the wait */
    __syncthreads();

    /* acc[th]: features g, g + 8 (rows of the A operand) x tokens 8 th + 2t, + 1 (B's columns):
     * [g, 2t], [g, 2t+1], [g+8, 2t], [g+8, 2t+1] */
    float acc[TH][4];
#pragma unroll
    for (int th = 0; th < TH; th++)
#pragma unroll
        for (int r = 0; r < 4; r++) acc[th][r] = 0.0f;
    /* token row 8 th + g (past the block's rows: its last row, whose products only reach outputs that
     * are never stored) at k 4t: the f16 quad (X16), the e4m3 quad, or (A16) the bf16 pair k 2t, 2t+1;
     * and the scale pair of tokens 8 th + 2t, + 1 */
    const uint8_t *xa[TH];
    const float *xsa[TH];
#pragma unroll
    for (int th = 0; th < TH; th++) {
        const int r = 8 * th + g < rows ? 8 * th + g : rows - 1;
        xa[th] = xq + r * xrow + (X16 ? 8 : 4) * t;
        xsa[th] = xs + 8 * th + 2 * t;
    }

    /* FP8 / FP4: the block sum of block bj for every token tile (B: the activations, 32 k x 8 tokens:
     * b0 token g k 4t.., b1 k 16 + 4t.., as f16 pairs) from A's f16 fragment wf (wf[0..3] = a_lo,
     * wf[4..7] = a_hi: the e4m3 quads a0 row g k 4t.., a1 row g + 8, a2 row g k 16 + 4t.., a3 row
     * g + 8 widened to f16, the low pair (k 4t, 4t + 1) for the first f16 mma, the high pair for the
     * second), folded into acc with the scales sb0, sb1 of features g, g + 8 */
    auto mma_tokens = [&](const uint32_t *wf, float sb0, float sb1, int64_t bj) {
#pragma unroll
        for (int th = 0; th < TH; th++) {
            uint32_t b_lo[2], b_hi[2];
            if (X16) { /* 8 bytes each: the quad's low pair, then its high pair */
                const uint2 q0 = *reinterpret_cast<const uint2 *>(xa[th] + 64 * bj);
                const uint2 q1 = *reinterpret_cast<const uint2 *>(xa[th] + 64 * bj + 32);
                b_lo[0] = q0.x, b_hi[0] = q0.y, b_lo[1] = q1.x, b_hi[1] = q1.y;
            } else {
                const uint32_t q0 = *reinterpret_cast<const uint32_t *>(xa[th] + 32 * bj);
                const uint32_t q1 = *reinterpret_cast<const uint32_t *>(xa[th] + 32 * bj + 16);
                di_e4m3x4_to_f16x4(q0, &b_lo[0], &b_hi[0]);
                di_e4m3x4_to_f16x4(q1, &b_lo[1], &b_hi[1]);
            }
            const float2 s2 = *reinterpret_cast<const float2 *>(xsa[th] + bj * MT); /* tokens 8 th + 2t, + 1 */
            float d[4];
            di_mma_e4m3_16832_f16_fold(d, wf, wf + 4, b_lo, b_hi);
            acc[th][0] = __fmaf_rn(d[0], s2.x * sb0, acc[th][0]);
            acc[th][1] = __fmaf_rn(d[1], s2.y * sb0, acc[th][1]);
            acc[th][2] = __fmaf_rn(d[2], s2.x * sb1, acc[th][2]);
            acc[th][3] = __fmaf_rn(d[3], s2.y * sb1, acc[th][3]);
        }
    };

    /* A16: the block sum of block bj for every token tile from A's bf16 fragment wf (per k16 half hh:
     * a0 row g k 2t.., a1 row g + 8, a2 row g k 8 + 2t.., a3 row g + 8): B the activations, per k16
     * half b0 token g k 2t.., b1 k 8 + 2t..; two k16 bf16 mmas; folded with the weight scale sb */
    auto mma_tokens_a16 = [&](const uint32_t *wf, float sb, int64_t bj) {
#pragma unroll
        for (int th = 0; th < TH; th++) {
            uint32_t xf[4];
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const uint8_t *p = xa[th] + 64 * bj + 32 * hh;
                xf[2 * hh + 0] = *reinterpret_cast<const uint32_t *>(p);
                xf[2 * hh + 1] = *reinterpret_cast<const uint32_t *>(p + 16);
            }
            float d[4];
            const float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            di_mma_bf16_16816(d, wf, xf, z);
            di_mma_bf16_16816(d, wf + 4, xf + 2, d);
#pragma unroll
            for (int r = 0; r < 4; r++) acc[th][r] = __fmaf_rn(d[r], sb, acc[th][r]);
        }
    };
    /* A16: a lane needs halfword t & 1 of the words at 4(t >> 1) and 8 + 4(t >> 1) of each 16-byte half
     * of a row's 32-byte block: merged, the low half holds k 2t, 2t + 1 of the half's first 8 values,
     * the high half those of its second 8 */
    const uint32_t half_sel = (t & 1) ? 0x7632u : 0x5410u;
    auto merged = [&](const uint8_t *p) {
        return __byte_perm(*reinterpret_cast<const uint32_t *>(p + 4 * (t >> 1)),
                           *reinterpret_cast<const uint32_t *>(p + 8 + 4 * (t >> 1)), half_sel);
    };
    /* FP8 / A16 / W16: chunk c waits for its copies (the group committed RING - 1 groups ago; __syncwarp
     * makes the other lanes' copies visible), then its blocks; the chunk RING - 1 ahead goes into the
     * slot the previous chunk left */
    for (int c = 0; c < n_chunks; c++) {
        if (c + RING - 1 < n_chunks) issue_chunk(c + RING - 1);
        di_cp_async_commit();
        di_cp_async_wait<RING - 1>();
        __syncwarp();
        const uint8_t *slot = ring + (c % RING) * GV_SLOT;
        const uint32_t scw = W16 ? 0 : *reinterpret_cast<const uint32_t *>(slot + 16 * GV_PITCH);
        /* ldmatrix's row address: matrix m = lane / 8 takes rows 8(m & 1).. at byte 16(m >> 1).. */
        const uint8_t *lrow = slot + ((lane & 7) + 8 * ((lane >> 3) & 1)) * GV_PITCH + 16 * (lane >> 4);
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int64_t bj = blk0 + (int64_t)c * CH + j;
            const float sb = W16 ? 1.0f : di_dev_e8m0((uint8_t)(scw >> (8 * j)));
            uint32_t wf[8];
            if (W16) { /* bf16 rows: one ldmatrix a k16 half gives its a0..a3 */
                di_ldmatrix_x4(wf, lrow + 64 * j);
                di_ldmatrix_x4(wf + 4, lrow + 64 * j + 32);
                mma_tokens_a16(wf, sb, bj);
            } else if (A16) { /* rows g, g + 8 of each k16 half, widened to bf16 */
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const uint32_t w0 = merged(slot + g * GV_PITCH + 32 * j + 16 * hh);
                    const uint32_t w1 = merged(slot + (g + 8) * GV_PITCH + 32 * j + 16 * hh);
                    wf[4 * hh + 0] = di_e4m3x2_to_bf16x2((uint16_t)w0);
                    wf[4 * hh + 1] = di_e4m3x2_to_bf16x2((uint16_t)w1);
                    wf[4 * hh + 2] = di_e4m3x2_to_bf16x2((uint16_t)(w0 >> 16));
                    wf[4 * hh + 3] = di_e4m3x2_to_bf16x2((uint16_t)(w1 >> 16));
                }
                mma_tokens_a16(wf, sb, bj);
            } else { /* one ldmatrix (matrix m: rows 8(m & 1).., bytes 16(m >> 1).. of the block): lane
                      * 4g + t receives row g's bytes 4t.. of each: a0..a3 */
                uint32_t wq[4];
                di_ldmatrix_x4(wq, lrow + 32 * j);
#pragma unroll
                for (int r = 0; r < 4; r++) di_e4m3x4_to_f16x4(wq[r], &wf[r], &wf[4 + r]);
                mma_tokens(wf, sb, sb, bj);
            }
        }
        __syncwarp(); /* every lane done with the slot before it is refilled */
    }

    /* FP4: one step of GV_STEP blocks from b (in the buffer's slots 0..), refilling each slot with block
     * b + GV_STEP + j while those are in the split; `full` (compile-time) when all GV_STEP blocks are
     * in the split: no branch inside, so the step is one stretch of code (splits are whole steps but
     * for the remainder of the last one, which refills nothing) */
    auto step = [&](int64_t b, auto full) {
        const int64_t refill = decltype(full)::value ? blk1 - b - GV_STEP : 0; /* blocks to load ahead */
#pragma unroll
        for (int j = 0; j < GV_STEP; j++) {
            const int64_t bj = b + j;
            if (!decltype(full)::value && bj >= blk1) break; /* uniform */
            /* rows g, g + 8: k 4t.. and 16 + 4t.. as e4m3 quads, widened to f16 */
            const uint32_t w0 = pair_merge(st.w[0][j]), w1 = pair_merge(st.w[1][j]);
            const uint32_t wq[4] = {di_e2m1x4_to_e4m3x4(w0), di_e2m1x4_to_e4m3x4(w1), di_e2m1x4_to_e4m3x4(w0 >> 16),
                                    di_e2m1x4_to_e4m3x4(w1 >> 16)};
            const float sb0 = di_dev_e8m0((uint8_t)(st.sc[0][j / 4] >> (8 * (j % 4))));
            const float sb1 = di_dev_e8m0((uint8_t)(st.sc[1][j / 4] >> (8 * (j % 4))));
            uint32_t wf[8];
#pragma unroll
            for (int r = 0; r < 4; r++) di_e4m3x4_to_f16x4(wq[r], &wf[r], &wf[4 + r]);
            /* slot j is free: the block a step ahead (its scale word once its 4 blocks are used) */
            if (j < refill) load_block(st, j);
            if (j % 4 == 3 && j - 3 < refill) load_scales(st, j / 4);
            mma_tokens(wf, sb0, sb1, bj);
        }
        advance();
    };
    for (int64_t b = blk0; !STAGED && busy && b < blk1; b += GV_STEP) {
        if (b + GV_STEP <= blk1) step(b, std::true_type());
        else step(b, std::false_type());
    }

    /* outputs: features n0 + g (+ 8) x tokens 8 th + 2t (+ 1) */
    if (ksplit == 1) {
#pragma unroll
        for (int th = 0; th < TH; th++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int tok = 8 * th + 2 * t + (r & 1);
                const int64_t c = n0 + 8 * (r >> 1) + g;
                if (busy && tok < rows && c < N) y[(m0 + tok) * ldy + c] = a.out_bf16 ? di_dev_bf16_round(acc[th][r]) : acc[th][r];
            }
        return;
    }
    if (mine_warp) {
        float *mine = part + ((int64_t)ks * tiles_per_block + tile_local) * MT * GV_TILE;
#pragma unroll
        for (int th = 0; th < TH; th++)
#pragma unroll
            for (int r = 0; r < 4; r++) mine[(8 * th + 2 * t + (r & 1)) * GV_TILE + 8 * (r >> 1) + g] = acc[th][r];
    }
    __syncthreads();
    /* the splits' partial sums added in split order, then rounded (mm_reduce_kernel's order) */
    const int per_split = tiles_per_block * MT * GV_TILE;
    auto split_sum = [&](int i) {
        float v = part[i];
        for (int k = 1; k < ksplit; k++) v += part[k * per_split + i];
        return a.out_bf16 ? di_dev_bf16_round(v) : v;
    };
    if (a.yq) { /* and act_quant(y, 32): a warp a 32-feature block of a token, a lane a feature */
        const int fblocks = tiles_per_block * GV_TILE / 32;
        const int64_t c0 = (int64_t)bx * tiles_per_block * GV_TILE; /* the block's first feature */
        for (int u = warp; u < MT * fblocks; u += blockDim.x / 32) {
            const int tok = u / fblocks, fl = u % fblocks * 32 + lane;
            if (tok >= rows || c0 + fl - lane >= N) continue; /* uniform over the warp (N % 32 == 0) */
            const float v = split_sum((fl / GV_TILE * MT + tok) * GV_TILE + fl % GV_TILE);
            const int64_t e = (m0 + tok) * ldy + c0 + fl;
            y[e] = v;
            float sc;
            a.yq[y_off + e] = di_act_quant_e4m3_x1(v, &sc);
            if (lane == 0) a.ysc[(y_off + e) / 32] = sc;
        }
        return;
    }
    for (int i = threadIdx.x; i < per_split; i += blockDim.x) {
        const int tl = i / (MT * GV_TILE), tok = i / GV_TILE % MT, f = i % GV_TILE;
        const int64_t c = ((int64_t)bx * tiles_per_block + tl) * GV_TILE + f;
        if (tok >= rows || c >= N) continue;
        y[(m0 + tok) * ldy + c] = split_sum(i);
    }
}

/* shared memory of a block of `warps` warps (gv_ring_offset's layout) */
static size_t gv_smem_bytes(int mode, int mt, int xrows, int64_t K, int warps) {
    return gv_ring_offset(mode, mt, xrows, K, warps) + (mode == GV_FP4 ? 0 : (size_t)warps * GV_RING(mt) * GV_SLOT);
}

static int gv_tiles_per_block(int ksplit) { return ksplit >= GV_WARPS ? 1 : GV_WARPS / ksplit; }
static int gv_mt(int64_t rows_per_group) { return rows_per_group <= 8 ? 8 : 16; } /* activation rows per block */

bool di_cuda_gemv_ok(bool bf16_act, bool grouped, int64_t K, int64_t rows_per_group, int ksplit) {
    const int mt = gv_mt(rows_per_group);
    return rows_per_group <= (grouped ? DI_GEMV_MAX_GROUP_ROWS : DI_GEMV_MAX_ROWS) && K % 128 == 0 && ksplit <= GV_WARPS &&
           /* a block of the most warps (a launch of two matrices); quantised: FP4's f16 rows or FP8's rings */
           (bf16_act ? gv_smem_bytes(GV_A16, mt, mt, K, GV_WARPS) <= GV_SMEM_MAX
                     : gv_smem_bytes(GV_FP4, mt, mt, K, GV_WARPS) <= GV_SMEM_MAX &&
                           gv_smem_bytes(GV_FP8, mt, mt, K, GV_WARPS) <= GV_SMEM_MAX);
}

/* PRE for a launch: single matrices whose weights stream through the shared ring */
static bool gv_pre(int mode, const gv_args &a) { return mode != GV_FP4 && !a.row_off; }

template <int MODE, int MT>
static void gv_launch(gv_args a, int64_t max_rows, int slots, int tiles_cap, cudaStream_t s) {
    constexpr int PRE_MODE = MODE == GV_FP4 ? GV_FP8 : MODE; /* FP4 never takes PRE (gv_pre) */
    static bool attr_set;
    if (!attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(gemv_bs_kernel<MODE, MT, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           GV_SMEM_MAX));
        DI_CUDA_CHECK(cudaFuncSetAttribute(gemv_bs_kernel<PRE_MODE, MT, true>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, GV_SMEM_MAX));
        attr_set = true;
    }
    a.xrows = max_rows < MT ? (int)(max_rows + 1) / 2 * 2 : MT;
    unsigned blocks = 0, warps = 0;
    for (int i = 0; i < a.n_mats; i++) { /* the block: the most warps of the matrices */
        gv_mat *m = &a.mat[i];
        const int64_t tiles = (m->N + GV_TILE - 1) / GV_TILE;
        m->blocks = (int)((tiles + m->tiles_per_block - 1) / m->tiles_per_block);
        blocks += (unsigned)m->blocks;
        const unsigned w = (unsigned)(m->tiles_per_block * m->ksplit);
        warps = w > warps ? w : warps;
    }
    const size_t smem = gv_smem_bytes(MODE, MT, a.xrows, a.K, (int)warps);
    const dim3 grid(blocks, a.tiles ? 1u : (unsigned)((max_rows + MT - 1) / MT),
                    a.tiles ? (unsigned)tiles_cap : (unsigned)slots);
    if (gv_pre(MODE, a)) gemv_bs_kernel<PRE_MODE, MT, true><<<grid, warps * 32, smem, s>>>(a);
    else gemv_bs_kernel<MODE, MT, false><<<grid, warps * 32, smem, s>>>(a);
    DI_CUDA_LAUNCHED();
}

template <int MODE>
static void gv_run(const gv_args &a, int64_t max_rows, int64_t rows_per_group, int slots, cudaStream_t s,
                   int tiles_cap = 0) {
    if (gv_mt(rows_per_group) == 8) gv_launch<MODE, 8>(a, max_rows, slots, tiles_cap, s);
    else gv_launch<MODE, 16>(a, max_rows, slots, tiles_cap, s);
}

int di_cuda_gemv_tile(int64_t rows_per_group) { return gv_mt(rows_per_group); }

static gv_mat gv_mat_of(const di_gemv_mat &m, int64_t ldy) {
    return gv_mat{m.wdata, m.wscale, m.wdata_g, m.wscale_g, m.y, m.N, ldy,
                  m.ksplit, m.split_blocks, gv_tiles_per_block(m.ksplit), 0};
}

void di_cuda_gemv_quant(cudaStream_t s, bool fp4, int64_t K, int n_mats, const di_gemv_mat *mats, const int *row_off,
                        const int *active, int n_groups, int64_t rows, int64_t max_rows, int64_t rows_per_group,
                        const uint8_t *xq, const float *xs, const di_group_tiles *tiles) {
    if (rows <= 0 || max_rows <= 0 || n_mats <= 0) return;
    if (!row_off || (tiles && tiles->cap <= 0)) tiles = NULL;
    if (tiles && tiles->bt > gv_mt(rows_per_group)) { /* a caller's bug */
        fprintf(stderr, "di_cuda_gemv_quant: a tile list of %d rows for blocks of %d\n", tiles->bt, gv_mt(rows_per_group));
        abort();
    }
    if (n_mats > GV_MATS) { /* a caller's bug */
        fprintf(stderr, "di_cuda_gemv_quant: %d matrices in one launch (at most %d)\n", n_mats, GV_MATS);
        abort();
    }
    gv_args a = {NULL, xq, xs, max_rows, K, K, row_off, active, tiles ? tiles->list : NULL, {}, 0, 0, true};
    for (int i = 0; i < n_mats; i++)
        if (mats[i].N > 0) a.mat[a.n_mats++] = gv_mat_of(mats[i], mats[i].N);
    if (!a.n_mats) return;
    /* with an active list only min(groups, rows) slots can have rows */
    const int slots = row_off && active && rows < n_groups ? (int)rows : (row_off ? n_groups : 1);
    const int cap = tiles ? tiles->cap : 0;
    if (fp4) gv_run<GV_FP4>(a, max_rows, rows_per_group, slots, s, cap);
    else gv_run<GV_FP8>(a, max_rows, rows_per_group, slots, s, cap);
}

bool di_cuda_gemv_codes_ok(int64_t N, int64_t ldy, int ksplit) {
    return ksplit > 1 && gv_tiles_per_block(ksplit) * GV_TILE % 32 == 0 && N % 32 == 0 && ldy % 32 == 0;
}

void di_cuda_gemv_bf16w8(cudaStream_t s, const uint8_t *wdata, const uint8_t *wscale, int64_t rows_per_group,
                         int n_groups, int64_t K, const float *x, int64_t lda, int64_t m, float *y, int64_t ldy,
                         int ksplit, int split_blocks, uint8_t *yq, float *ysc) {
    if (m <= 0 || rows_per_group <= 0) return;
    if (yq && !di_cuda_gemv_codes_ok(rows_per_group, ldy, ksplit)) { /* a caller's bug */
        fprintf(stderr, "di_cuda_gemv_bf16w8: no act_quant epilogue for N %lld, ldy %lld, %d K splits\n",
                (long long)rows_per_group, (long long)ldy, ksplit);
        abort();
    }
    const di_gemv_mat one = {rows_per_group, wdata, wscale, NULL, NULL, ksplit, split_blocks, y};
    gv_args a = {x, NULL, NULL, m, K, lda, NULL, NULL, NULL, {gv_mat_of(one, ldy)}, 1, 0, true, yq, ysc};
    gv_run<GV_A16>(a, m, m, n_groups, s);
}

void di_cuda_gemv_w16(cudaStream_t s, const uint16_t *wdata, int64_t N, int64_t K, const float *x, int64_t m, float *y,
                      bool out_bf16, int ksplit, int split_blocks) {
    if (m <= 0 || N <= 0) return;
    const di_gemv_mat one = {N, reinterpret_cast<const uint8_t *>(wdata), NULL, NULL, NULL, ksplit, split_blocks, y};
    gv_args a = {x, NULL, NULL, m, K, K, NULL, NULL, NULL, {gv_mat_of(one, N)}, 1, 0, out_bf16};
    gv_run<GV_W16>(a, m, m, 1, s);
}
