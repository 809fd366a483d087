/* Decode-sized FP4 expert GEMMs with exact block sums on int8 tensor cores: the routed experts'
 * calls of at most DI_GEMV_IMMA_ROWS rows an expert on average (decode at B <= 32 of EP-8) outside
 * batch-invariant mode (di_cuda_ctx.fp4_imma; there the f16 twin of cuda_linear_gemv.cu keeps the
 * bits of the tiled kernel). The f16 twin spends ~32 of its ~73 instructions a 32-value block and
 * warp widening e2m1 to f16 (docs/PERFORMANCE.md, session 14); int8 needs one table lookup a
 * sign (di_e2m1x8_to_s8x8).
 *
 * Numerics, bit for bit the CPU's linear_quant (and the exact kernel, cuda_linear_quant.cu): e2m1
 * values are integers times 2^-1 (|2 w| <= 12: int8) and e4m3 values integers times 2^-9 (|512 x|
 * <= 229,376: 18 bits). act_quant_digits_kernel splits each activation's integer into three signed
 * base-128 digits, 512 x = d0 + 128 d1 + 16384 d2 (d0, d1 in -64..63, d2 in -14..14), and each
 * digit is a column of an int8 mma.sync m16n8k32: the three int32 column sums, shifted and added,
 * are the block's sum of products times 2^10 exactly (|S| < 2^27). Rounded once to fp32 (the CPU
 * rounds its exact double sum once) and folded as acc = fma(S, xs 2^-10 * ws, acc) in ascending
 * K-block order: the CPU's acc += bs * xs * ws, since the scales are powers of two (equal while
 * xs * ws >= 2^-116, so that xs 2^-10 ws stays a normal float: act_quant's scales are >= 2^-22 and a
 * checkpoint's weight scales near 1). No K split: the
 * experts' calls (groups) never split K. Within a block sum the order of the k does not matter (the
 * sum is exact), so a lane takes the weight word its own loads bring: lane 4g + t reads word t
 * (k 8t..8t+7) of rows g and g + 8 of each 16-byte block, and the digit columns in shared memory
 * are stored in plain k order, which puts the same k in B's fragment. The digits are gathered into
 * expert order by act_quant_digits_kernel, or (x_rows) read in place through the MoE's row list
 * where the FFN input's producer made them (hc_block_in: one launch less a layer at B = 1).
 *
 * Layout: a block of 8 warps, each 16 feature rows of one matrix (a launch may run w1 and
 * w3 over the same rows, as the f16 twin does), for TT (2 or 4) token rows of one group; calls whose
 * groups have one row each take gemv_fp4_imma_row_kernel (below: 16-byte weight loads). Its
 * shared memory holds the TT rows' digits for the whole K as two mma B tiles a K block: T0
 * [nb][2 TT][32] (column 2r = d0, 2r + 1 = d1 of token r) and T1 [nb][TT][32] (d2 of token r at
 * column r); lane 4g + t reads column g of T0 and g / 2 of T1 (columns past the tokens alias others:
 * their sums land in outputs never stored), so D0's c0 / c1 are token t's d0 / d1 sums of row g
 * (c2 / c3 row g + 8) and D1's c0 / c2 its d2 sums. Weight words stream through a register ring of
 * GI_STEP blocks, as in the f16 twin. Where a ring step's weight scales are all in 1..254 (every warp
 * of a real checkpoint), 2^(e - 127) is e << 23: two instructions a scale instead of
 * di_dev_e8m0's seven (its cases 0 and 255 keep their own path).
 *
 * Measured (H200, EP-8 rank proxy at 4K context; docs/PERFORMANCE.md, session 18): w1 + w3 at B = 1
 * 51.4 -> 40.4 us a layer, w2 29.5 -> 22.0; decode B = 8 33.2 -> 30.3 ms, B = 32 37.9 -> 34.4. The
 * one-row kernel (session 24): w1 + w3 41.7 -> 37.6 us, w2 22.2 -> 20.0. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_mma.cuh"

#include <type_traits>

#define GI_WARPS 8               /* warps a block, 16 feature rows each */
#define GI_STEP 8                /* K blocks a step of the weight register ring */
#define GI_MIN_BLOCKS 3          /* blocks a multiprocessor: 80 registers (16-block steps and two blocks a
                                  * multiprocessor were 5-10% slower at 16 rows an expert; blocks of 4
                                  * warps, slower still: docs/PERFORMANCE.md, session 18) */
#define GI_SMEM_MAX (227 * 1024) /* the opt-in limit of a block on sm_90 */

/* act_quant(x, 32) as the signed base-128 digits of its codes' integers (512 x): dg [n_blocks][3][32]
 * int8 (digit d of value k at 32 d + k) and xs [n_blocks] = the block's scale times 2^-10; 8 lanes a
 * 32-value block, 4 values a lane (act_quant_e4m3_kernel's codes) */
__global__ void act_quant_digits_kernel(const float *__restrict__ x, const float *const *__restrict__ rows,
                                        int64_t row_blocks, int64_t n_blocks, uint32_t *__restrict__ dg,
                                        float *__restrict__ xs) {
    DI_PDL_BEGIN();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if ((i & ~(int64_t)31) >= n_blocks * 8) return; /* whole warps */
    uint32_t codes;
    float sc;
    if (!di_act_quant_lane(x, rows, row_blocks, n_blocks, i, &codes, &sc)) return;
    di_act_digits_store(codes, sc, i, dg, xs);
}

void di_cuda_act_quant_digits(const float *x, const float *const *rows, int64_t row_blocks, int64_t n_blocks,
                              uint8_t *dg, float *xs, cudaStream_t s) {
    if (n_blocks <= 0) return;
    const int64_t threads = 256;
    act_quant_digits_kernel<<<(unsigned)((n_blocks * 8 + threads - 1) / threads), (unsigned)threads, 0, s>>>(
        x, rows, row_blocks, n_blocks, reinterpret_cast<uint32_t *>(dg), xs);
    DI_CUDA_LAUNCHED();
}

/* one matrix of a launch (di_gemv_mat's fields; its blocks along grid.x, matrix 1's after matrix 0's) */
struct gi_mat {
    const uint8_t *wdata, *wscale;                   /* one matrix */
    const uint8_t *const *wdata_g, *const *wscale_g; /* groups: [n_groups] device pointers */
    float *y;                                        /* [rows, N] */
    int64_t N;
    int blocks;
};
struct gi_args {
    const uint8_t *xd; /* [rows][K / 32][3][32] int8 digits (act_quant_digits_kernel's) */
    const float *xs;   /* [rows][K / 32] their scales times 2^-10 */
    const float *const *x_rows; /* NULL, or row p's digits are those of row (x_rows[p] - x_base) / K */
    const float *x_base;
    int64_t M, K;
    const int *row_off, *active; /* groups: [n_groups + 1], slot -> group or NULL */
    const int *tiles;            /* groups: NULL, or the row-tile list (di_group_tiles) blockIdx.z indexes */
    gi_mat mat[DI_GEMV_MAX_MATS];
    int n_mats;
    di_gemv_swiglu sw; /* h NULL, or the SwiGLU of matrices 0 and 1 (the one-row kernel) */
};

/* the weight register ring: lane 4g + t's word t of rows g, g + 8 a block, and their scale words
 * (4 blocks each) */
struct gi_ring {
    uint32_t w[2][GI_STEP];
    uint32_t sc[2][GI_STEP / 4];
};

/* shared memory of a block of TT token rows: T0, T1 (96 TT bytes a K block), the scales and the rows'
 * digit rows (4 ints) */
static __host__ __device__ size_t gi_smem_bytes(int tt, int64_t K) {
    return (size_t)(K / 32) * (size_t)tt * (96 + 4) + 16;
}
static int gi_tokens(int64_t max_rows) { return max_rows <= 1 ? 1 : max_rows <= 2 ? 2 : 4; }

/* what a block works on: its matrix (uniform over the block; matrix 1's blocks after matrix 0's
 * along grid.x), its group's weights, digit rows and outputs */
struct gi_block {
    const uint8_t *wdata, *wscale, *xd; /* xd, xsg: the group's first row (not x_rows) */
    const float *xsg;
    float *y;         /* the group's first output row */
    int64_t N, M;     /* the matrix's features, the group's rows */
    int64_t m_first;  /* the group's first row of the call */
    unsigned bx;      /* the block's index within its matrix */
};
/* false where the block has no rows (its group is inactive, or shorter than *m0, the block's first
 * row in its group: blockIdx.y's tile, or through the tile list its entry's); matrix `mat`, block bx
 * of it */
static __device__ __forceinline__ bool gi_block_of(const gi_args &a, int mat, unsigned bx, int64_t *m0, gi_block *b) {
    const gi_mat &mt = a.mat[mat];
    *b = gi_block{mt.wdata, mt.wscale, a.xd, a.xs, mt.y, mt.N, a.M, 0, bx};
    if (!a.row_off) return *m0 < b->M;
    int gi, r0;
    if (!di_dev_block_group(a.row_off, a.active, a.tiles, (int)blockIdx.z, m0, &gi, &r0, &b->M)) return false;
    b->wdata = mt.wdata_g[gi];
    b->wscale = mt.wscale_g[gi];
    if (!a.x_rows) {
        b->xd += (int64_t)r0 * (a.K / 32) * 96;
        b->xsg += (int64_t)r0 * (a.K / 32);
    }
    b->y += (int64_t)r0 * b->N;
    b->m_first = r0;
    return true;
}
/* gi_block_of for the matrix of this block (matrix 1's blocks after matrix 0's along grid.x) */
static __device__ __forceinline__ bool gi_block_of(const gi_args &a, int64_t *m0, gi_block *b) {
    const bool second = a.n_mats > 1 && blockIdx.x >= (unsigned)a.mat[0].blocks;
    return gi_block_of(a, second ? 1 : 0, blockIdx.x - (second ? (unsigned)a.mat[0].blocks : 0u), m0, b);
}
/* the digit row (of xd / xsg) of the group's row p */
static __device__ __forceinline__ int gi_digit_row(const gi_args &a, const gi_block &b, int64_t p) {
    return a.x_rows ? (int)((a.x_rows[b.m_first + p] - a.x_base) / a.K) : (int)p;
}

/* a ring step of the kernels below, step(i, full, plain), with its two flags as compile-time types: full
 * when the whole step lies in K (no bound check inside), plain when its scale bytes are all in 1..254 */
template <class Step, class I>
static __device__ __forceinline__ void gi_run_step(Step &step, I i, bool full, bool plain) {
    if (full) {
        if (plain) step(i, std::true_type(), std::true_type());
        else step(i, std::true_type(), std::false_type());
    } else {
        if (plain) step(i, std::false_type(), std::true_type());
        else step(i, std::false_type(), std::false_type());
    }
}

template <int TT>
__global__ void __launch_bounds__(GI_WARPS * 32, GI_MIN_BLOCKS) gemv_fp4_imma_kernel(gi_args a) {
    DI_PDL_BEGIN();
    extern __shared__ int4 gi_smem[];
    int64_t m0 = (int64_t)blockIdx.y * TT;
    gi_block blk;
    if (!gi_block_of(a, &m0, &blk)) return;
    const int64_t N = blk.N, K = a.K, nb = K / 32, M = blk.M;
    const unsigned bx = blk.bx;
    float *y = blk.y;
    const uint8_t *wdata = blk.wdata, *wscale = blk.wscale, *xd = blk.xd;
    const float *xsg = blk.xsg;
    const int rows = M - m0 < TT ? (int)(M - m0) : TT;
    int *dig_row_s = reinterpret_cast<int *>(reinterpret_cast<uint8_t *>(gi_smem) + gi_smem_bytes(TT, K) - 16);
    if (threadIdx.x < TT) /* the digit rows of the block's TT token rows */
        dig_row_s[threadIdx.x] = gi_digit_row(a, blk, m0 + (threadIdx.x < rows ? threadIdx.x : 0));
    __syncthreads();
    uint8_t *t0 = reinterpret_cast<uint8_t *>(gi_smem);   /* [nb][2 TT][32] digits 0, 1 */
    uint8_t *t1 = t0 + nb * 2 * TT * 32;                  /* [nb][TT][32] digit 2 */
    float *xs = reinterpret_cast<float *>(t1 + nb * TT * 32); /* [nb][TT] */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t n0 = ((int64_t)bx * GI_WARPS + warp) * 16;
    const bool busy = n0 < N; /* uniform over the warp */

    /* the ring: rows past N read row N - 1 (their outputs are never stored) */
    const uint8_t *wp[2], *sp[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t n = n0 + 8 * h + g < N ? n0 + 8 * h + g : N - 1;
        wp[h] = wdata + n * (K / 2) + 4 * t;
        sp[h] = wscale + n * nb;
    }
    auto word = [](const uint8_t *p) { return __ldg(reinterpret_cast<const uint32_t *>(p)); };
    auto load_block = [&](gi_ring &st, int j) {
#pragma unroll
        for (int h = 0; h < 2; h++) st.w[h][j] = word(wp[h] + 16 * j);
    };
    auto load_scales = [&](gi_ring &st, int q) {
#pragma unroll
        for (int h = 0; h < 2; h++) st.sc[h][q] = word(sp[h] + 4 * q);
    };
    auto advance = [&]() {
#pragma unroll
        for (int h = 0; h < 2; h++) wp[h] += 16 * GI_STEP, sp[h] += GI_STEP;
    };
    gi_ring st; /* each slot is refilled with the block a step ahead as soon as it is used */
#pragma unroll
    for (int q = 0; q < GI_STEP / 4; q++) st.sc[0][q] = st.sc[1][q] = 0x7f7f7f7fu; /* past K: plain (below) */
    if (busy) {
#pragma unroll
        for (int j = 0; j < GI_STEP; j++) {
            if (j < nb) load_block(st, j);
            if (j % 4 == 0 && j < nb) load_scales(st, j / 4); /* nb % 4 == 0 */
        }
        advance();
    }

    /* the TT token rows' digits (zeros past the group's rows) while the first weights load: a row
     * block's 96 bytes in 16-byte pieces u (digit u / 2, half u % 2); then their scales, all by
     * cp.async and 32-bit indices (a loop of plain loads waited on the L2 once a turn, and its 64-bit
     * divisions cost ~100 instructions each) */
    const int nbi = (int)nb, pieces = TT * nbi * 6;
    for (int i = threadIdx.x; i < pieces; i += blockDim.x) {
        const int r = i / (nbi * 6), rem = i - r * nbi * 6, b = rem / 6;
        const int u = rem - 6 * b, dgt = u >> 1, half = u & 1;
        uint8_t *dst = dgt < 2 ? t0 + (b * 2 * TT + 2 * r + dgt) * 32 + 16 * half : t1 + (b * TT + r) * 32 + 16 * half;
        di_cp_async16(dst, r < rows ? xd + ((int64_t)dig_row_s[r] * nb + b) * 96 + 32 * dgt + 16 * half : xd, r < rows);
    }
    for (int i = threadIdx.x; i < TT * nbi; i += blockDim.x) { /* xs[j][r] = row r's scale j */
        const int r = i % TT;
        di_cp_async4(xs + i, xsg + (int64_t)dig_row_s[r < rows ? r : 0] * nb + i / TT, r < rows);
    }
    di_cp_async_commit();
    di_cp_async_wait<0>();
    __syncthreads();

    /* B fragments: column g of T0, g / 2 of T1, bytes 8t.. (b0 k 4t.. = the word's k 8t..8t+3,
     * b1 k 16 + 4t.. = its k 8t+4..); the scale of token t */
    const uint8_t *b0p = t0 + (g % (2 * TT)) * 32 + 8 * t, *b1p = t1 + ((g >> 1) % TT) * 32 + 8 * t;
    const float *xsp = xs + (t < TT ? t : TT - 1);
    float acc0 = 0.0f, acc1 = 0.0f; /* token t x features n0 + g, n0 + g + 8 */
    /* whether the step's scale bytes (every lane's) are all in 1..254: then 2^(b - 127) is b << 23, a
     * normal float -- di_dev_e8m0 without its cases of 0 (2^-127) and 255 (NaN) */
    auto plain_step = [&]() {
        uint32_t odd = 0;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int q = 0; q < GI_STEP / 4; q++) { /* a zero byte in v, in ~v */
                const uint32_t v = st.sc[h][q];
                odd |= ((v - 0x01010101u) & ~v) | ((~v - 0x01010101u) & v);
            }
        return !__ballot_sync(0xffffffffu, (odd & 0x80808080u) != 0);
    };
    /* one step of GI_STEP blocks from b, refilling each slot with block b + GI_STEP + j while those exist;
     * `full` when all GI_STEP blocks are in K (no branch inside); `plain`: plain_step() */
    auto step = [&](int64_t b, auto full, auto plain) {
        const int64_t refill = decltype(full)::value ? nb - b - GI_STEP : 0;
        auto scale = [&](uint32_t w, int j) {
            const uint32_t e = (w >> (8 * (j % 4))) & 0xffu;
            return decltype(plain)::value ? __uint_as_float(e << 23) : di_dev_e8m0((uint8_t)e);
        };
#pragma unroll
        for (int j = 0; j < GI_STEP; j++) {
            const int64_t bj = b + j;
            if (!decltype(full)::value && bj >= nb) break; /* uniform */
            uint32_t af[4]; /* a0 row g k 4t.. = its word's k 8t..8t+3, a2 = k 8t+4.., a1 / a3 row g + 8 */
            di_e2m1x8_to_s8x8(st.w[0][j], &af[0], &af[2]);
            di_e2m1x8_to_s8x8(st.w[1][j], &af[1], &af[3]);
            const float sb0 = scale(st.sc[0][j / 4], j), sb1 = scale(st.sc[1][j / 4], j);
            if (j < refill) load_block(st, j);
            if (j % 4 == 3 && j - 3 < refill) load_scales(st, j / 4);
            const uint2 q0 = *reinterpret_cast<const uint2 *>(b0p + bj * (2 * TT * 32));
            const uint2 q1 = *reinterpret_cast<const uint2 *>(b1p + bj * (TT * 32));
            const uint32_t bf0[2] = {q0.x, q0.y}, bf1[2] = {q1.x, q1.y};
            int d0[4], d1[4];
            di_mma_s8_16832(d0, af, bf0);
            di_mma_s8_16832(d1, af, bf1);
            const float xv = xsp[bj * TT];
            acc0 = __fmaf_rn(__int2float_rn(d0[0] + d0[1] * 128 + d1[0] * 16384), xv * sb0, acc0);
            acc1 = __fmaf_rn(__int2float_rn(d0[2] + d0[3] * 128 + d1[2] * 16384), xv * sb1, acc1);
        }
        advance();
    };
    for (int64_t b = 0; busy && b < nb; b += GI_STEP) gi_run_step(step, b, b + GI_STEP <= nb, plain_step());
    if (!busy || t >= rows) return;
    if (n0 + g < N) y[(m0 + t) * N + n0 + g] = di_dev_bf16_round(acc0);
    if (n0 + g + 8 < N) y[(m0 + t) * N + n0 + g + 8] = di_dev_bf16_round(acc1);
}

/* One token row a block (every group of the call has at most one row: the routed experts at B = 1).
 * gemv_fp4_imma_kernel's lanes load 4-byte words: each warp load touches 8 rows, half a 32-byte
 * sector each, and ncu had the L1 80% busy on them (docs/PERFORMANCE.md, session 21). Here a lane
 * loads 16-byte blocks -- lane 4g + t block 4c + t of rows g and g + 8, a quad of four K blocks a
 * warp load -- and the mma sums four blocks at once, each through its own output columns: in the
 * quad's mma i lane t holds word i (k 8i..8i+7) of its block, and B's column 2t' + d holds digit d of
 * block 4c + t' where lane t' brings it (k rows 4t'.., 16 + 4t'..) and zeros elsewhere, so column
 * 2t' + d sums only block t''s products; four mmas (i = 0..3) accumulate a quad's whole blocks, exact
 * in int32 as before. One mma for digits 0 / 1 (columns 2t' + d), one for digit 2 (columns 2t'). A
 * lane then holds its block's sums of rows g, g + 8 in c0..c3 (column 2t, 2t + 1 its own block): the
 * block sums and their scales xs * ws go round the quad's four lanes by shuffles and every lane folds
 * the four in block order -- the same fma chain, so the same bits as gemv_fp4_imma_kernel at one
 * row (and the exact kernel's). B's zeros are a 32-byte zero row in shared memory that the other
 * lanes' pointers stay on. Measured and not kept (session 24): 8-row warps (twice the warps: slower),
 * the signs' products summed apart (23% fewer instructions: no faster), digits laid out without
 * bank conflicts (no faster). */
#define GR_QUADS 2 /* quads a step of the weight register ring (8 K blocks, as GI_STEP; 4 with 2 blocks a
                    * multiprocessor, and loads with an L2::256B hint, were no faster: session 24) */
/* The SwiGLU form's deeper ring, where its grid leaves at most GR_DEEP_BLOCKS blocks a
 * multiprocessor (B = 1's 216 blocks of six experts): three quads a step at launch bounds of that
 * many blocks (more registers). Session 63 (H200): three quads everywhere took B = 1's w1 + w3
 * launch 38.82 -> 38.00 us, w2 none faster, and B = 8's launches (three blocks a multiprocessor)
 * 3-5% slower; session 64 (H100), this form: B = 1's w1 + w3 39.90 -> 38.50 us, B = 8 unchanged. */
#define GR_QUADS_DEEP 3
#define GR_DEEP_BLOCKS 2

#define GR_SW_FEATURES (GI_WARPS * 8) /* features of both matrices a block makes the SwiGLU of (4 warps each) */

/* digits [nb][96], xs [nb], zeros, the row; then (SW) the block's two outputs [2][GR_SW_FEATURES] */
static __host__ __device__ size_t gr_smem_bytes(int64_t K, bool sw) {
    return (size_t)(K / 32) * 100 + 48 + (sw ? 2 * GR_SW_FEATURES * sizeof(float) : 0);
}

/* SW (a.sw.h set): warps 0-3 take 64 features of matrix 0 and warps 4-7 the same of matrix 1; the
 * block then makes their SwiGLU, h's act_quant digits and scales, as swiglu_forms_kernel does, by
 * its first warp (8 lanes a 32-value block) */
template <bool SW, int GR_Q = GR_QUADS, int MIN_BLOCKS = GI_MIN_BLOCKS>
__global__ void __launch_bounds__(GI_WARPS * 32, MIN_BLOCKS) gemv_fp4_imma_row_kernel(gi_args a) {
    DI_PDL_BEGIN();
    constexpr int H = 2; /* rows g, g + 8 of a lane */
    extern __shared__ int4 gi_smem[];
    int64_t m0 = blockIdx.y;
    const int mat = SW ? (int)(threadIdx.x >> 5) / (GI_WARPS / 2) : 0; /* SW: the warp's matrix */
    gi_block blk;
    if (!(SW ? gi_block_of(a, mat, blockIdx.x, &m0, &blk) : gi_block_of(a, &m0, &blk))) return; /* uniform */
    const int64_t N = blk.N, K = a.K, nb = K / 32;
    const int nbi = (int)nb, nq = nbi / 4; /* K % 128 == 0 */
    uint8_t *dg = reinterpret_cast<uint8_t *>(gi_smem);               /* [nb][3][32] the row's digits */
    float *xs = reinterpret_cast<float *>(dg + nb * 96);              /* [nb] their scales times 2^-10 */
    uint32_t *zeros = reinterpret_cast<uint32_t *>(xs + nb);          /* [8] */
    int *dig_row_s = reinterpret_cast<int *>(zeros + 8);
    if (threadIdx.x == 0) dig_row_s[0] = gi_digit_row(a, blk, m0);
    if (threadIdx.x < 8) zeros[threadIdx.x] = 0u;
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t n0 = SW ? (int64_t)blk.bx * GR_SW_FEATURES + 16 * (warp % (GI_WARPS / 2))
                          : ((int64_t)blk.bx * GI_WARPS + warp) * 16;
    const bool busy = n0 < N; /* uniform over the warp; SW: every warp (N % GR_SW_FEATURES == 0) */

    /* the ring: a slot holds a quad's block t of rows g, g + 8 and their scale words (rows past N
     * read row N - 1; their outputs are never stored) */
    struct gr_ring {
        uint4 w[GR_Q][H];
        uint32_t sc[GR_Q][H];
    };
    const uint8_t *wp[H], *sp[H];
#pragma unroll
    for (int h = 0; h < H; h++) {
        const int64_t n = n0 + 8 * h + g < N ? n0 + 8 * h + g : N - 1;
        wp[h] = blk.wdata + n * (K / 2) + 16 * t;
        sp[h] = blk.wscale + n * nb;
    }
    auto load_quad = [&](gr_ring &st, int j) {
#pragma unroll
        for (int h = 0; h < H; h++) {
            st.w[j][h] = __ldg(reinterpret_cast<const uint4 *>(wp[h] + 64 * j));
            st.sc[j][h] = __ldg(reinterpret_cast<const uint32_t *>(sp[h] + 4 * j));
        }
    };
    auto advance = [&]() {
#pragma unroll
        for (int h = 0; h < H; h++) wp[h] += 64 * GR_Q, sp[h] += 4 * GR_Q;
    };
    gr_ring st;
#pragma unroll
    for (int j = 0; j < GR_Q; j++)
#pragma unroll
        for (int h = 0; h < H; h++) st.sc[j][h] = 0x7f7f7f7fu; /* past K: plain */
    if (busy) {
#pragma unroll
        for (int j = 0; j < GR_Q; j++)
            if (j < nq) load_quad(st, j);
        advance();
    }

    /* the row's digits and scales while the first weights load (cp.async, 32-bit indices) */
    const uint8_t *xd = blk.xd + (int64_t)dig_row_s[0] * nb * 96;
    for (int i = threadIdx.x; i < nbi * 6; i += blockDim.x) di_cp_async16(dg + 16 * i, xd + 16 * i, true);
    for (int i = threadIdx.x; i < nbi; i += blockDim.x) di_cp_async4(xs + i, blk.xsg + (int64_t)dig_row_s[0] * nb + i, true);
    di_cp_async_commit();
    di_cp_async_wait<0>();
    __syncthreads();

    /* B's owners: column g = 2t' + d of the digits-0 / 1 mma is lane t' = g / 2's digit g % 2; column
     * g = 2t' of the digit-2 mma lane t''s digit 2 (odd columns zero). A quad later: 4 blocks on */
    const bool own01 = t == g >> 1, own2 = !(g & 1) && t == g >> 1;
    const uint8_t *b01 = own01 ? dg + 96 * t + 32 * (g & 1) : reinterpret_cast<const uint8_t *>(zeros);
    const uint8_t *b2 = own2 ? dg + 96 * t + 64 : reinterpret_cast<const uint8_t *>(zeros);
    const int b01_step = own01 ? 384 : 0, b2_step = own2 ? 384 : 0;
    const uint32_t byte_t = 0x4440u | (uint32_t)t; /* __byte_perm selector: byte t of a word */
    float acc[H] = {}; /* features n0 + g, n0 + g + 8 (every lane of the group the same) */
    auto plain_step = [&]() { /* every scale byte of the step (every lane's) in 1..254 */
        uint32_t odd = 0;
#pragma unroll
        for (int j = 0; j < GR_Q; j++)
#pragma unroll
            for (int h = 0; h < H; h++) {
                const uint32_t v = st.sc[j][h];
                odd |= ((v - 0x01010101u) & ~v) | ((~v - 0x01010101u) & v);
            }
        return !__ballot_sync(0xffffffffu, (odd & 0x80808080u) != 0);
    };
    /* one step of GR_Q quads from quad q, refilling each slot with quad q + GR_Q + j while
     * those exist; `full` when all its quads are in K; `plain`: plain_step() */
    auto step = [&](int q, auto full, auto plain) {
        const int refill = decltype(full)::value ? nq - q - GR_Q : 0;
#pragma unroll
        for (int j = 0; j < GR_Q; j++) {
            const int qj = q + j;
            if (!decltype(full)::value && qj >= nq) break; /* uniform */
            int d01[4] = {0, 0, 0, 0}, d2[4] = {0, 0, 0, 0};
            uint32_t w[H][4], sc[H];
#pragma unroll
            for (int h = 0; h < H; h++) {
                w[h][0] = st.w[j][h].x, w[h][1] = st.w[j][h].y, w[h][2] = st.w[j][h].z, w[h][3] = st.w[j][h].w;
                sc[h] = __byte_perm(st.sc[j][h], 0u, byte_t);
            }
            if (j < refill) load_quad(st, j);
#pragma unroll
            for (int i = 0; i < 4; i++) { /* word i of the lane's block: a0 / a2 row g, a1 / a3 row g + 8 */
                uint32_t af[4];
                di_e2m1x8_to_s8x8(w[0][i], &af[0], &af[2]);
                di_e2m1x8_to_s8x8(w[1][i], &af[1], &af[3]);
                const uint2 q01 = *reinterpret_cast<const uint2 *>(b01 + qj * b01_step + 8 * i);
                const uint2 q2 = *reinterpret_cast<const uint2 *>(b2 + qj * b2_step + 8 * i);
                const uint32_t bf01[2] = {q01.x, q01.y}, bf2[2] = {q2.x, q2.y};
                di_mma_s8_16832_acc(d01, af, bf01);
                di_mma_s8_16832_acc(d2, af, bf2);
            }
            /* the lane's block 4 qj + t: sums of its rows and their multipliers */
            auto scale = [&](uint32_t e) {
                return decltype(plain)::value ? __uint_as_float(e << 23) : di_dev_e8m0((uint8_t)e);
            };
            const float xv = xs[4 * qj + t];
#pragma unroll
            for (int h = 0; h < H; h++) {
                const float sh = __int2float_rn(d01[2 * h] + d01[2 * h + 1] * 128 + d2[2 * h] * 16384);
                const float mh = xv * scale(sc[h]);
#pragma unroll
                for (int r = 0; r < 4; r++) { /* blocks in K order: lane r of the group holds block 4 qj + r */
                    const int src = (lane & ~3) | r;
                    acc[h] = __fmaf_rn(__shfl_sync(0xffffffffu, sh, src), __shfl_sync(0xffffffffu, mh, src), acc[h]);
                }
            }
        }
        advance();
    };
    for (int q = 0; busy && q < nq; q += GR_Q) gi_run_step(step, q, q + GR_Q <= nq, plain_step());
    if (!SW) {
        if (!busy || t != 0) return;
#pragma unroll
        for (int h = 0; h < H; h++)
            if (n0 + g + 8 * h < N) blk.y[m0 * N + n0 + g + 8 * h] = di_dev_bf16_round(acc[h]);
        return;
    }
    /* the two outputs, bf16-rounded as stored, then the SwiGLU of value f = 4 lane .. 4 lane + 3 */
    float *gu = reinterpret_cast<float *>(reinterpret_cast<uint8_t *>(gi_smem) + gr_smem_bytes(K, false)); /* [2][64] */
    if (t == 0) {
#pragma unroll
        for (int h = 0; h < H; h++) gu[mat * GR_SW_FEATURES + (n0 - (int64_t)blk.bx * GR_SW_FEATURES) + g + 8 * h] = di_dev_bf16_round(acc[h]);
    }
    __syncthreads();
    if (warp != 0) return;
    const int64_t row = blk.m_first + m0; /* the call's row: h's, wt's */
    const bool in = lane < GR_SW_FEATURES / 4;
    const int f = 4 * (lane % (GR_SW_FEATURES / 4));
    const bool has_w = a.sw.wt != nullptr;
    const float w = has_w ? a.sw.wt[row] : 1.0f, lim = a.sw.limit;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f); /* lanes past the features: blocks of their own */
    if (in) /* gu is 16-byte aligned: nb % 4 == 0 */
        v = di_dev_swiglu4(*reinterpret_cast<const float4 *>(gu + f),
                           *reinterpret_cast<const float4 *>(gu + GR_SW_FEATURES + f), lim, has_w, w);
    float sc;
    const uint32_t codes = di_act_quant_e4m3_x4(v, &sc);
    if (!in) return;
    const int64_t at = row * N + (int64_t)blk.bx * GR_SW_FEATURES + f; /* h's value index */
    *reinterpret_cast<float4 *>(a.sw.h + at) = v;
    di_act_digits_store(codes, sc, at / 4, reinterpret_cast<uint32_t *>(a.sw.digits), a.sw.digit_scale);
}

static size_t gi_launch_smem(int tt, int64_t K, bool sw) { return tt == 1 ? gr_smem_bytes(K, sw) : gi_smem_bytes(tt, K); }

bool di_cuda_gemv_imma_ok(int64_t K, int64_t max_rows) {
    return K % 128 == 0 && gi_launch_smem(gi_tokens(max_rows), K, false) <= GI_SMEM_MAX;
}

bool di_cuda_gemv_imma_one_row(int64_t max_rows) { return gi_tokens(max_rows) == 1; }

int di_cuda_gemv_imma_tile(int64_t rows_per_group) { return gi_tokens(rows_per_group); }

bool di_cuda_gemv_imma_swiglu_ok(int64_t K, int64_t N, int64_t max_rows) {
    return K % 128 == 0 && N % GR_SW_FEATURES == 0 && di_cuda_gemv_imma_one_row(max_rows) &&
           gr_smem_bytes(K, true) <= GI_SMEM_MAX;
}

/* tt token rows a block: gemv_fp4_imma_row_kernel for one (SW: with the SwiGLU), else
 * gemv_fp4_imma_kernel<tt> */
template <int TT, bool SW = false>
static void gi_launch(gi_args a, int64_t max_rows, int slots, const di_group_tiles *tiles, cudaStream_t s) {
    unsigned blocks = 0;
    for (int i = 0; i < a.n_mats; i++) {
        a.mat[i].blocks = (int)((a.mat[i].N + 16 * GI_WARPS - 1) / (16 * GI_WARPS));
        blocks += (unsigned)a.mat[i].blocks;
    }
    if (SW) blocks = (unsigned)(a.mat[0].N / GR_SW_FEATURES); /* both matrices' features a block */
    const dim3 grid(blocks, tiles ? 1u : (unsigned)((max_rows + TT - 1) / TT), tiles ? (unsigned)tiles->cap : (unsigned)slots);
    const bool deep = SW && (int64_t)grid.x * grid.y * grid.z <= GR_DEEP_BLOCKS * (int64_t)di_cuda_sm_count();
    void (*kernel)(gi_args);
    if constexpr (TT != 1) kernel = gemv_fp4_imma_kernel<TT>;
    else if constexpr (SW)
        kernel = deep ? gemv_fp4_imma_row_kernel<true, GR_QUADS_DEEP, GR_DEEP_BLOCKS> : gemv_fp4_imma_row_kernel<true>;
    else kernel = gemv_fp4_imma_row_kernel<false>;
    static bool attr_set[2];
    if (!attr_set[deep]) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, GI_SMEM_MAX));
        attr_set[deep] = true;
    }
    kernel<<<grid, GI_WARPS * 32, gi_launch_smem(TT, a.K, SW), s>>>(a);
    DI_CUDA_LAUNCHED();
}
void di_cuda_gemv_fp4_imma(cudaStream_t s, int64_t K, int n_mats, const di_gemv_mat *mats, const int *row_off,
                           const int *active, int n_groups, int64_t rows, int64_t max_rows, const uint8_t *xd,
                           const float *xs, const float *const *x_rows, const float *x_base, const di_gemv_swiglu *sw,
                           const di_group_tiles *tiles) {
    if (rows <= 0 || max_rows <= 0 || n_mats <= 0) return;
    if (!row_off || (tiles && tiles->cap <= 0)) tiles = NULL;
    /* rows a block: a group's at most, or the tile list's tile */
    const int64_t tile_rows = tiles ? tiles->bt : max_rows;
    if (tiles && gi_tokens(tile_rows) < tile_rows) { /* a caller's bug */
        fprintf(stderr, "di_cuda_gemv_fp4_imma: a tile list of %d rows (at most %d)\n", tiles->bt, gi_tokens(4));
        abort();
    }
    if (sw && (n_mats != 2 || mats[0].N != mats[1].N || !di_cuda_gemv_imma_swiglu_ok(K, mats[0].N, tile_rows))) {
        fprintf(stderr, "di_cuda_gemv_fp4_imma: the SwiGLU of %d matrices of %lld features, %lld rows: not supported\n",
                n_mats, (long long)mats[0].N, (long long)max_rows);
        abort();
    }
    if (n_mats > DI_GEMV_MAX_MATS || !di_cuda_gemv_imma_ok(K, tile_rows)) { /* a caller's bug */
        fprintf(stderr, "di_cuda_gemv_fp4_imma: %d matrices, K %lld, %lld rows: not this kernel's call\n", n_mats,
                (long long)K, (long long)max_rows);
        abort();
    }
    gi_args a = {xd, xs, x_rows, x_base, max_rows, K, row_off, active, tiles ? tiles->list : NULL, {}, 0,
                 sw ? *sw : di_gemv_swiglu{}};
    for (int i = 0; i < n_mats; i++) {
        if (mats[i].N <= 0) continue;
        if (mats[i].ksplit != 1) {
            fprintf(stderr, "di_cuda_gemv_fp4_imma: a K split of %d (the kernel sums the whole K)\n", mats[i].ksplit);
            abort();
        }
        a.mat[a.n_mats++] = gi_mat{mats[i].wdata, mats[i].wscale, mats[i].wdata_g, mats[i].wscale_g, mats[i].y,
                                   mats[i].N, 0};
    }
    if (!a.n_mats) return;
    const int slots = row_off && active && rows < n_groups ? (int)rows : (row_off ? n_groups : 1);
    if (sw) {
        gi_launch<1, true>(a, max_rows, slots, tiles, s);
        return;
    }
    switch (gi_tokens(tile_rows)) {
    case 1: gi_launch<1>(a, max_rows, slots, tiles, s); break;
    case 2: gi_launch<2>(a, max_rows, slots, tiles, s); break;
    default: gi_launch<4>(a, max_rows, slots, tiles, s); break;
    }
}
