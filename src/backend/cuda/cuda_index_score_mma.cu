/* The lightning indexer's scores on bf16 tensor cores, over paged keys (di_cuda_index_score_paged,
 * cuda_fwd_ops.h: the forward pass) or contiguous ones (di_cuda_index_score, cuda_ops.h);
 * model-spec §2.4 (6). Bit-identical to index_scores() in src/forward/indexer.c. They replaced
 * CUDA-core kernels that summed each q_h . k_t in double, a warp per key, and staged a row's whole
 * query per 8 keys: 22% of a 4,096-token prefill (docs/PERFORMANCE.md, session 10). The config
 * requires idim % 32 == 0; nh <= 32 and idim <= 128 as before.
 *
 * Why the tensor core's sums are the CPU's: q and the keys are on the FP4 grid (fp4_act_quant with
 * ue8m0 scales, blocks of 32 along the head dim), so within one 32-block every product is an e2m1
 * x e2m1 product (at most 4 significant bits) times one power of two, and the block's sum of 32
 * is a multiple of that power below 2^11 of it: exact in fp32, and exactly what mma.m16n8k16
 * returns (two k16 steps, the block's partial in fp32 as c). The blocks' partials are then added
 * in double, as are the 32 head terms (bf16 values): exact, whatever the order, as the CPU's
 * double sums in index / head order are -- so both round the same exact value (to float, then
 * bf16). That holds while the block scales of a row span less than ~2^38 and the head terms less
 * than ~2^40, far beyond anything fp4_act_quant of real activations gives; the tests compare bit
 * for bit on wide-range data.
 *
 * Layout: one warp per query row and part of the keys (all the row's heads: 16 a m-tile, A = q as
 * bf16 in shared memory, staged once a CTA, its fragments by ldmatrix), keys in n8 tiles as B,
 * straight from the row's paged pool (each lane loads key g's dims of its fragment; the warps of a
 * CTA are consecutive rows of mostly one sequence, so a key tile is read from L2 once and from L1
 * after). With fewer rows than warps (decode at small B) the rows share the CTA's warps, each warp
 * on its part of the CTA's keys: at B = 1 a CTA ran one warp (the 7 others returned at once), 3 a
 * multiprocessor, each staging the row's q alone -- 96 / 170 us a launch over 64K / 131K keys at
 * 128K context, now 31 / 47 (session 28). Keys at or past the row's live count (its sequence's
 * keys, its visible prefix) are not computed: they score -inf, as in the CUDA-core kernel. The
 * kernel waits on its key loads (ncu, B = 256: 71% of stall samples on them); with q's 64 fragment
 * registers a thread (150 in all) one CTA fit a multiprocessor, 8 warps to hide that latency:
 * 496-994 us a launch at B = 256, DRAM 12% busy. From shared memory (8.5 KB a row) IM_BLOCKS_PER_SM
 * CTAs fit, and the key chunks are sized so that a decode launch is one wave. A warp's key load
 * touches 8 keys' rows, 32 bytes of each, and without a hint the L2 fetched those sectors from DRAM
 * piecemeal: the 8-byte key loads carry an L2::256B prefetch (ncu, 128K context, session 29: B = 8
 * a 131K-key launch 257 -> 209 us, 64K keys 141 -> 116; B = 1 47 -> 41, 30.5 -> 27.3; L2::128B
 * gained less). Where the entries allow, a lane's loads are 16 bytes (im_load_b), half as many:
 * B = 8 209 -> 182 us, B = 64 (64 rows of 64K or 131K keys) 1,212 -> 1,032 on average, B = 1 40 -> 36.
 *
 * Key records (the forward pass's pools since session 31; forward/index_key.h): a key is its e2m1
 * codes and one ue8m0 scale a 32-block, 68 bytes for 128 dims instead of 512, a pool block's records
 * together. Lane 4g + t4 loads word t4 of every block of key g (one 16-byte load for 4 blocks: the
 * record interleaves them) and widens the codes to bf16 e2m1 values without their scales
 * (di_e2m1x4_to_off64, one bf16 fma a pair); the key's block scales multiply the block's exact fp32
 * sum instead, in double, where the fp32 keys' sums were added (dot = fma(c, 2^(e - 127), dot): the
 * same exact terms). A word's 8 dims are one k16 step's b0 / b1 pairs of that lane for two steps
 * (im_q_pos stages q to match). 7.5x fewer bytes, and the launches ran no faster (B = 64 at 128K
 * 1,039 -> 1,095 us, B = 8 181 -> 184, B = 1 36.0 -> 37.6; session 31): the keys' bytes never bound
 * it -- ncu, a B = 64 launch: issue slots 63% busy with ~1.4 eligible warps a scheduler, DRAM 9%, the
 * ALU pipe 54%, ~100 warp instructions a (row, key) against 4 mma; one block-table load a step
 * instead of one a key ran no faster. Session 33: at 3 CTAs a multiprocessor the records kernel had 80
 * registers and ~65 spill loads / stores a 16-key step (1,447 SASS instructions; the fp32 kernels
 * spill little); at 2 it has 118 and none, and the e2m1 tables' first words come from registers
 * (di_e2m1_off64_lut): 1,295 a step. 128K context: a B = 256 launch (8 rows a CTA) 161 -> 134 us, B =
 * 64 57 -> 43, B = 8 18-20 -> 16-17; the B = 256 step 111.5 -> 103.9 ms. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_mma.cuh"

#define IM_WARPS 8 /* query rows per CTA */
#define IM_BLOCKS_PER_SM 3 /* CTAs a multiprocessor holds (shared memory: 3 x 68 KB) */
/* the records' kernel (LW 0) at IM_BLOCKS_PER_SM: 80 registers, and ~65 spill loads / stores a
 * 16-key step; two CTAs leave it 128 (session 33) */
#define IM_REC_BLOCKS_PER_SM 2
#define IM_CTAS_PER_SM(records) ((records) ? IM_REC_BLOCKS_PER_SM : IM_BLOCKS_PER_SM)
#define IM_NT 2    /* n8 key tiles per step */
#define IM_MAX_KS 8 /* k16 steps: idim <= 128 */
#define IM_MAX_HEADS 32
#define IM_Q_STRIDE (16 * IM_MAX_KS + 8) /* bf16 per staged q row: 272 bytes, 16 mod 128 (ldmatrix's 8 rows
                                          * fall in distinct bank groups) */
#define IM_SMEM ((size_t)IM_WARPS * IM_MAX_HEADS * IM_Q_STRIDE * 2)

/* A key's dims as the mma's B fragments, LW floats a load (1, 2 or 4: what the entries' alignment
 * allows). LW 1 / 2: lane 4g + t4 loads dims 2 t4, + 1 (b0) and 2 t4 + 8, + 9 (b1) of each 16, the
 * fragment's own k. LW 4: one 16-byte load of dims 4 t4 .. 4 t4 + 3 (b0 the first pair, b1 the
 * second), half the load instructions: the k16 step then pairs fragment position 2 t4 (+ 1) with
 * dim 4 t4 (+ 1) and 8 + 2 t4 (+ 1) with 4 t4 + 2 (+ 3), and q is staged in that order (im_q_pos).
 * Dims stay in their 32-block, whose fp32 sum is exact in any order, so the scores are the same. */
static __device__ __forceinline__ float2 im_ldg2(const float *p) {
#ifdef DI_CUDA_EMU_H
    return *reinterpret_cast<const float2 *>(p);
#else
    float2 v;
    asm("ld.global.nc.L2::256B.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "l"(p));
    return v;
#endif
}
static __device__ __forceinline__ float4 im_ldg4(const float *p) {
#ifdef DI_CUDA_EMU_H
    return *reinterpret_cast<const float4 *>(p);
#else
    float4 v;
    asm("ld.global.nc.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
#endif
}
/* b[0], b[1] of k16 step ks from kt (the key's dims at this lane's first: + 2 t4, or + 4 t4 for LW 4);
 * zero unless ok */
template <int LW>
static __device__ __forceinline__ void im_load_b(const float *kt, int ks, bool ok, uint32_t b[2]) {
    if (LW == 4) {
        const float4 v = ok ? im_ldg4(kt + 16 * ks) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        b[0] = di_bf16x2_of_exact(v.x, v.y);
        b[1] = di_bf16x2_of_exact(v.z, v.w);
    } else {
        auto pair = [&](const float *p) {
            if (LW == 2) {
                const float2 v = im_ldg2(p);
                return di_bf16x2_of_exact(v.x, v.y);
            }
            return di_bf16x2_of_exact(p[0], p[1]);
        };
        b[0] = ok ? pair(kt + 16 * ks) : 0u;
        b[1] = ok ? pair(kt + 16 * ks + 8) : 0u;
    }
}
/* the staged position of q's dims 2c, 2c + 1 (LW 4: pair j of a 16-dim chunk, dims 4 (j / 2) + 2 (j % 2),
 * goes where im_load_b's b0 (j even) or b1 (j odd) meets it; LW 0, key records: dim 32 b + 8 t + 4 h +
 * 2 v of block b goes to k16 step 2 b + h, b_v's pair of lane t -- where im_record_b puts it) */
static __device__ __forceinline__ int im_q_pos(int c, int lw) {
    if (lw == 0) {
        const int l = (2 * c) & 31;
        return 32 * (c >> 4) + 16 * ((l >> 2) & 1) + 8 * ((l >> 1) & 1) + 2 * (l >> 3);
    }
    const int j = c & 7;
    return lw == 4 ? 16 * (c >> 3) + 8 * (j & 1) + (j & ~1) : 2 * c;
}

/* Key records: word t4 of each of a key's nb blocks (one 16-byte load for 4 blocks; the record
 * interleaves them), zero unless ok */
static __device__ __forceinline__ void im_load_record(const uint8_t *rec, int nb, int t4, bool ok, uint32_t wd[4]) {
    if (ok && nb == 4) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(rec) + t4);
        wd[0] = v.x, wd[1] = v.y, wd[2] = v.z, wd[3] = v.w;
        return;
    }
#pragma unroll
    for (int b = 0; b < 4; b++) wd[b] = ok && b < nb ? __ldg(reinterpret_cast<const uint32_t *>(rec) + t4 * nb + b) : 0u;
}
/* the b fragments of k16 steps 2 b and 2 b + 1 from block b's word (dims 8 t4 .. 8 t4 + 7 of the
 * block, lower dims in the lower nibbles): the codes' e2m1 values as bf16, unscaled */
static __device__ __forceinline__ void im_record_b(uint32_t word, uint32_t lut_pos, uint32_t lut_neg, uint32_t b_lo[2],
                                                   uint32_t b_hi[2]) { /* lut_*: di_e2m1_off64_lut's */
    const di_e2m1_scale unit = {0x3F003F00u, 0xC2C0C2C0u, 0u}; /* 0.5 (192 + 2v) - 96 = v */
    di_off64x4_to_bf16x4(di_e2m1x4_to_off64(word & 0xffffu, lut_pos, lut_neg), unit, true, b_lo);
    di_off64x4_to_bf16x4(di_e2m1x4_to_off64(word >> 16, lut_pos, lut_neg), unit, true, b_hi);
}
/* a block scale byte as the double 2^(e - 127) (255: NaN, the record's mark of a non-finite block) */
static __device__ __forceinline__ double im_scale(uint32_t bytes, int b) {
    const uint32_t e = (bytes >> (8 * b)) & 0xffu;
    return e == 255u ? __longlong_as_double(0x7ff8000000000000ll) : __longlong_as_double((long long)(e + 896u) << 52);
}

/* A: pair i of query row r's q (head i / (idim / 2), dims 2 (i % (idim / 2)), + 1) as bf16 into the
 * row's [32 heads][IM_Q_STRIDE] in shared memory, q_s (heads past nh zero), at im_q_pos */
static __device__ __forceinline__ void im_stage_q_pair(const float *__restrict__ qi, int64_t r, int nh, int idim, int i,
                                                       int lw, uint16_t *q_s) {
    const int h = i / (idim / 2), c = i % (idim / 2);
    const float *q = qi + (r * nh + (h < nh ? h : 0)) * idim + 2 * c;
    *reinterpret_cast<uint32_t *>(q_s + h * IM_Q_STRIDE + im_q_pos(c, lw)) =
        h < nh ? di_bf16x2_of_exact(q[0], q[1]) : 0u;
}

/* grid (ceil(P / kc), ceil(R / rpc)): a CTA takes rpc query rows (1, 2, 4 or IM_WARPS) and a chunk
 * of kc keys (a multiple of 8 IM_NT wpr); warp w works on row w % rpc, on the w / rpc-th part of
 * the chunk (wpr = IM_WARPS / rpc warps a row, kc / wpr keys each). Key addresses as
 * di_cuda_index_score_paged's (block_entries = 2^be_shift); LW: floats a key load (block_floats,
 * key_offset and key_stride multiples of it), or 0: keys are records (16-byte aligned) */
template <int LW, bool SHARED>
__global__ void __launch_bounds__(IM_WARPS * 32, IM_CTAS_PER_SM(LW == 0))
index_score_mma_kernel(const float *__restrict__ qi, const float *__restrict__ w, const float *__restrict__ pool,
                       const int32_t *__restrict__ blocks, int be_shift, int64_t block_floats, int key_offset,
                       int key_stride, int64_t R, int64_t P, int nh, int idim, const int64_t *__restrict__ visible,
                       float *__restrict__ score, di_index_rows rows, int kc, int rpc_arg) {
    DI_PDL_BEGIN();
    extern __shared__ uint4 im_smem[];
    const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3, warp = threadIdx.x >> 5;
    const int rpc = SHARED ? rpc_arg : IM_WARPS, wpr = IM_WARPS / rpc, kcw = kc / wpr;
    const int mt_n = nh > 16 ? 2 : 1;
    const int64_t r = (int64_t)blockIdx.y * rpc + warp % rpc;
    uint16_t *const q_s = reinterpret_cast<uint16_t *>(im_smem) + (warp % rpc) * IM_MAX_HEADS * IM_Q_STRIDE;
    /* this warp's keys: [k0, k1) (one warp a row: the CTA's chunk, which starts before P) */
    const int64_t c0 = (int64_t)blockIdx.x * kc + (SHARED ? (int64_t)(warp / rpc) * kcw : 0);
    const int64_t k0 = !SHARED || c0 < P ? c0 : P, k1 = c0 + kcw < P ? c0 + kcw : P;
    if (SHARED) { /* rows shared by warps: their q staged once, by the whole CTA */
        const int row_pairs = 16 * mt_n * (idim / 2);
        for (int i = threadIdx.x; i < rpc * row_pairs; i += IM_WARPS * 32) {
            const int slot = i / row_pairs;
            const int64_t rr = (int64_t)blockIdx.y * rpc + slot;
            if (rr < R)
                im_stage_q_pair(qi, rr, nh, idim, i % row_pairs, LW,
                                reinterpret_cast<uint16_t *>(im_smem) + slot * IM_MAX_HEADS * IM_Q_STRIDE);
        }
        __syncthreads();
    }
    if (r >= R) return;
    int64_t live = P;
    if (rows.pool) {
        pool = rows.pool[r];
        blocks = rows.blocks[r];
        live = rows.n_keys[r];
    }
    if (visible && visible[r] < live) live = visible[r];
    if (live < 0) live = 0;
    float *const srow = score + r * P;
    const int64_t stop = live < k1 ? live : k1; /* keys computed: [k0, stop) */
    if (stop <= k0) { /* the whole part is past the row's live keys */
        for (int64_t t = k0 + lane; t < k1; t += 32) srow[t] = -INFINITY;
        return;
    }
    /* A (q's heads x dims in the row's slot); fragments by ldmatrix: lane l addresses head 16 mt + l % 16,
     * positions 16 ks + 8 (l / 16) -> a0..a3 = heads g, g + 8 x positions 2 t4 (+ 8) (the dims im_q_pos put
     * there). A warp a row stages it alone. */
    if (!SHARED) {
        for (int i = lane; i < 16 * mt_n * (idim / 2); i += 32) im_stage_q_pair(qi, r, nh, idim, i, LW, q_s);
        __syncwarp();
    }
    const int ks_n = idim / 16;
    const uint16_t *qa = q_s + (lane % 16) * IM_Q_STRIDE + 8 * (lane / 16);
    float wh[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int h = 16 * mt + 8 * hh + g;
            wh[mt][hh] = mt < mt_n && h < nh ? w[r * nh + h] : 0.0f;
        }

    const int nb = idim / 32; /* LW 0: a record's blocks */
    uint32_t lut_pos = 0u, lut_neg = 0u; /* LW 0: the e2m1 tables' first words in registers */
    if (LW == 0) di_e2m1_off64_lut(&lut_pos, &lut_neg);
    /* key t's record or floats (t < live: P < 2^31) */
    auto key_at = [&](int64_t t) {
        const int tt = (int)t;
        return pool + key_offset +
               (blocks ? blocks[tt >> be_shift] * block_floats + (int64_t)(tt & ((1 << be_shift) - 1)) * key_stride
                       : (int64_t)tt * key_stride);
    };
    int64_t t0 = k0;
    for (; t0 < stop; t0 += 8 * IM_NT) {
        /* B: key t0 + 8 j + g, its fragment of k16 step ks (im_load_b); keys past live are zero.
         * LW 0: the records' words (wd), widened below, and the block scales of the keys this lane's
         * sums belong to, t0 + 8 j + 2 t4 (+ 1) (sc) */
        uint32_t b[IM_NT][IM_MAX_KS][2], wd[IM_NT][4], sc[IM_NT][2];
#pragma unroll
        for (int j = 0; j < IM_NT; j++) {
            const int64_t t = t0 + 8 * j + g;
            const bool ok = t < live;
            if (LW == 0) {
                im_load_record(reinterpret_cast<const uint8_t *>(key_at(ok ? t : 0)), nb, t4, ok, wd[j]);
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int64_t ts = t0 + 8 * j + 2 * t4 + u;
                    sc[j][u] = ts < live ? __ldg(reinterpret_cast<const uint32_t *>(
                                               reinterpret_cast<const uint8_t *>(key_at(ts)) + idim / 2))
                                         : 0x7f7f7f7fu;
                }
            } else {
                const float *kt = key_at(ok ? t : 0) + (LW == 4 ? 4 : 2) * t4;
#pragma unroll
                for (int ks = 0; ks < IM_MAX_KS; ks++) im_load_b<LW>(kt, ks, ok && ks < ks_n, b[j][ks]);
            }
        }
#pragma unroll
        for (int j = 0; j < IM_NT; j++) {
            double skd[2][4]; /* LW 0: the block scales of keys 2 t4 (+ 1) as doubles (im_scale) */
            if (LW == 0)
#pragma unroll
                for (int bb = 0; bb < 4; bb++) {
                    if (bb >= nb) break;
                    im_record_b(wd[j][bb], lut_pos, lut_neg, b[j][2 * bb], b[j][2 * bb + 1]);
                    skd[0][bb] = im_scale(sc[j][0], bb);
                    skd[1][bb] = im_scale(sc[j][1], bb);
                }
            double part[2] = {0.0, 0.0}; /* this lane's head terms of keys 2 t4, 2 t4 + 1 of the tile */
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                if (mt >= mt_n) break;
                double dot[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
                for (int ks = 0; ks < IM_MAX_KS; ks += 2) { /* one 32-block: its exact fp32 sum */
                    if (ks >= ks_n) break;
                    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    uint32_t a0[4], a1[4];
                    di_ldmatrix_x4(a0, qa + 16 * mt * IM_Q_STRIDE + 16 * ks);
                    di_ldmatrix_x4(a1, qa + 16 * mt * IM_Q_STRIDE + 16 * (ks + 1));
                    di_mma_bf16_16816(c, a0, b[j][ks], c);
                    di_mma_bf16_16816(c, a1, b[j][ks + 1], c);
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        dot[e] = LW == 0 ? fma((double)c[e], skd[e & 1][ks / 2], dot[e]) : dot[e] + (double)c[e];
                }
                /* d[e]: head 16 mt + g + 8 (e >> 1), key 2 t4 + (e & 1); the two keys' roundings in one
                 * cvt each (the first's NaN, canonical there, is dropped by the relu as the CPU's is) */
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const uint32_t sb = di_bf16x2_rn((float)dot[2 * hh], (float)dot[2 * hh + 1]);
                    const float s0 = fmaxf(__uint_as_float(sb << 16), 0.0f);
                    const float s1 = fmaxf(__uint_as_float(sb & 0xffff0000u), 0.0f);
                    const uint32_t tb = di_bf16x2_rn_keep_nan(s0 * wh[mt][hh], s1 * wh[mt][hh]);
                    part[0] += (double)__uint_as_float(tb << 16);
                    part[1] += (double)__uint_as_float(tb & 0xffff0000u);
                }
            }
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) { /* the other heads: lanes of the same t4 */
                part[0] += __shfl_xor_sync(0xffffffffu, part[0], o);
                part[1] += __shfl_xor_sync(0xffffffffu, part[1], o);
            }
            const int64_t t = t0 + 8 * j + 2 * t4 + (g & 1);
            const double total = g & 1 ? part[1] : part[0];
            if (g < 2 && t < P) srow[t] = t < live ? di_dev_bf16_round((float)total) : -INFINITY;
        }
    }
    for (int64_t t = t0 + lane; t < k1; t += 32) srow[t] = -INFINITY; /* past the row's live keys */
}

void di_cuda_index_score_paged(const float *qi, const float *w, const float *pool, const int32_t *blocks,
                               int block_entries, int64_t block_floats, int key_offset, int key_stride, bool records,
                               int64_t R, int64_t P, int nh, int idim, const int64_t *visible,
                               const di_index_rows *rows, float *score, cudaStream_t s) {
    const int64_t align = block_floats | key_offset | key_stride;
    int be_shift = 0; /* block_entries = 2^be_shift: the kernel's key addresses take a shift, not a division */
    while (be_shift < 30 && (1 << be_shift) < block_entries) be_shift++;
    if (nh > 32 || idim % 32 || idim > 16 * IM_MAX_KS || block_entries <= 0 || (1 << be_shift) != block_entries ||
        (records && (align % 4 || (!rows && (uintptr_t)pool % 16)))) {
        fprintf(stderr, "di_cuda_index_score_paged: %d heads x %d dims (need <= 32 x a multiple of 32 <= %d), %d entries "
                "per block (a power of two) of %lld floats, %s at %d + %d a key (records: multiples of 4)\n", nh, idim,
                16 * IM_MAX_KS, block_entries, (long long)block_floats, records ? "key records" : "keys", key_offset,
                key_stride);
        abort();
    }
    if (R <= 0 || P <= 0) return;
    const di_index_rows none = {NULL, NULL, NULL};
    typedef void (*kernel_fn)(const float *, const float *, const float *, const int32_t *, int, int64_t, int, int,
                              int64_t, int64_t, int, int, const int64_t *, float *, di_index_rows, int, int);
    static const kernel_fn kernels[4][2] = { /* [4-, 8-, 16-byte key loads, records][rows sharing a CTA's warps] */
        {index_score_mma_kernel<1, false>, index_score_mma_kernel<1, true>},
        {index_score_mma_kernel<2, false>, index_score_mma_kernel<2, true>},
        {index_score_mma_kernel<4, false>, index_score_mma_kernel<4, true>},
        {index_score_mma_kernel<0, false>, index_score_mma_kernel<0, true>}};
    static bool attr_set;
    if (!attr_set) {
        for (int i = 0; i < 8; i++)
            DI_CUDA_CHECK(cudaFuncSetAttribute(kernels[i / 2][i % 2], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)IM_SMEM));
        attr_set = true;
    }
    /* rows a CTA: fewer rows than warps share the warps (each on its part of the keys) */
    int rpc = 1;
    while (rpc < IM_WARPS && rpc < R) rpc *= 2;
    const int wpr = IM_WARPS / rpc;
    /* split the keys while the rows alone leave resident CTAs unused (decode: a warp per row would walk
     * all its keys alone), into as many chunks as one wave holds; each score is computed the same
     * whatever the split */
    const int64_t step = 8 * IM_NT, tiles = (P + step - 1) / step, row_groups = (R + rpc - 1) / rpc;
    int64_t chunks = (int64_t)di_cuda_sm_count() * IM_CTAS_PER_SM(records) / row_groups;
    if (chunks < 1) chunks = 1;
    if (chunks > tiles) chunks = tiles;
    const int64_t warp_tiles = (tiles + chunks * wpr - 1) / (chunks * wpr); /* key steps a warp */
    const int kc = (int)(warp_tiles * wpr * step);
    const dim3 grid((unsigned)((P + kc - 1) / kc), (unsigned)row_groups);
    /* key loads as wide as the entries allow (paged pools: device allocations, 256-byte aligned) */
    const bool lw4 = align % 4 == 0 && (rows || (uintptr_t)pool % 16 == 0);
    const kernel_fn kernel = kernels[records ? 3 : lw4 ? 2 : align % 2 == 0 ? 1 : 0][rpc < IM_WARPS];
    kernel<<<grid, IM_WARPS * 32, IM_SMEM, s>>>(qi, w, pool, blocks, be_shift, block_floats, key_offset,
                                               key_stride, R, P, nh, idim, visible, score, rows ? *rows : none, kc, rpc);
    DI_CUDA_LAUNCHED();
}

void di_cuda_index_score(const float *qi, const float *w, const float *keys, int64_t R, int64_t P, int nh, int idim,
                         const int64_t *visible, float *score, cudaStream_t s) {
    di_cuda_index_score_paged(qi, w, keys, NULL, 1, idim, 0, idim, false, R, P, nh, idim, visible, NULL, score, s);
}
