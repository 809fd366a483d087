/* Sparse attention on wgmma for the V4.1 shape (64 heads a group, head dim 512; model-spec §2.0
 * sparse_attn): the default CUDA path where it applies. cuda_attention_mma.cu keeps the mma.sync
 * kernel for other shapes (the tiny fixture's) and cuda_attention.cu the CPU-exact one.
 *
 * The heads share one KV row per entry (MQA), so one CTA takes all 64 heads of a row: each KV row
 * is staged once for 64 heads (the mma.sync kernel stages it once per 16 or 32), and both
 * products run as warpgroup MMAs with M = 64 heads. A cluster of n_split CTAs per (row, group of
 * 64 heads); rank c takes the runs [c split_runs, (c + 1) split_runs) of 64 entries (AW_SPLIT_RUNS,
 * fixed in batch-invariant mode, so the split never depends on the batch) and the ranks merge through
 * distributed shared memory in rank order, as the mma.sync kernel does. Outside that mode, at least a
 * row a multiprocessor (AW_WHOLE_ROWS_PER_SM) takes a CTA a row (a cluster of one).
 *
 * Roles (one CTA of four warpgroups a multiprocessor):
 *   producers (warpgroups 2, 3; sessions 60-61: the consumers waited on one producer for ~19% of
 *            their stall samples) -- producer p stages heads 32 p .. 32 p + 31
 *            of the group's q rows once (RoPE applied there with di_attn_rope; the merge applies
 *            the inverse to the output), then the runs j with j % 2 == p into KV tile p:
 *            the run's live entries first, in list order (where a row's NULLs sit then changes no
 *            sum: a chunked prefill moves them), each fp32 value rounded to bf16 (the KV and q
 *            values are on the bf16 grid, so exact) into 64-dim slices in the 128-byte swizzle;
 *            rows past the live ones are zeros. Thread pt converts dims 4 pt .. 4 pt + 3 of every
 *            row, AW_BATCH rows in flight. A tile goes full / empty through mbarriers.
 *   consumers (warpgroups 0, 1): warpgroup w computes the logits of its 32 entries of the run for
 *            all 64 heads (m64n32k16 over the 512 dims, both operands in shared memory), scaled,
 *            -inf past the live entries. The two exchange their row maxima through shared memory
 *            (an mbarrier as the barrier of the 256 threads): m_new = max(m, max_0, max_1),
 *            a = exp(m - m_new), p = exp(logit - m_new). Each keeps its own share of the
 *            denominator, den_w = den_w a + sum of its p (a thread's 8 values in order, then
 *            lanes xor 1, 2), and writes bf16(p) into the run's P tile (64 heads x 64 entries).
 *            Then acc = acc a + bf16(P) V over the whole run, warpgroup w for dims
 *            [256 w, 256 w + 256) (two m64n128k16 chains, V MN-major from the same KV tile): the
 *            accumulator, 128 fp32 a thread, stays in registers across the runs.
 * Merge: den = den_0 + den_1 per rank; over the ranks in order M = max m_c, w_c = exp(m_c - M),
 * den = sum den_c w_c + exp(sink - M), out = bf16(sum acc_c w_c / den). A rank whose runs hold no
 * entry adds exact zeros, so a list that only grows by NULL runs gives the same bits; a row with
 * no entry gives 0. The CPU emulator runs a cluster's CTAs at once, so it splits as the device does.
 *
 * Against the CPU this differs only in summation order (the tensor core's fp32 sums, the
 * denominator's tree, the merge), within the bound test_cuda_ops checks for the mma.sync kernel;
 * each head's result depends on its row alone, so it is batch invariant.
 *
 * Shared memory: q tile 64 KiB, two KV tiles 128 KiB, P tile 8 KiB, ~6 KiB of lists, maxima and
 * mbarriers. After the runs the KV tiles hold the rank's acc [64][512] fp32 for the merge and the
 * P tile the merge weights.
 *
 * Measured (H200, docs/PERFORMANCE.md session 11): the sparse-attention stage of a 4,096-token
 * prefill 353 -> 121 ms against the mma.sync kernel, 25 -> 10 ms a decode step at B = 256. With
 * one CTA a row it spreads fewer CTAs over the GPU than the mma.sync kernel below ~16 rows
 * (di_cuda_sparse_attn_mma then keeps the latter outside batch-invariant mode). Session 34: runs of
 * records alone staged with 16-byte loads, all in flight at once (aw_stage_records): a launch at
 * B = 256 240.6 -> 185.2 us, a 4,096-token prefill's 3,069 -> 2,439. Session 61 (H100, ncu us a
 * launch, one producer -> two): B = 256 190.3 -> 179.8, a 4,096-token prefill 2,450 -> 2,408, two
 * ranks of B = 64 70.4 -> 58.2. */
#include "backend/cuda/cuda_cluster.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_wgmma.cuh"

#define AW_HEADS 64            /* heads of a CTA: wgmma's M */
#define AW_DIM 512             /* the head dimension this kernel takes */
#define AW_RUN 64              /* list entries a run */
#define AW_PRODUCERS 2         /* producer warpgroups: producer p stages q's heads 32 p .. 32 p + 31 and the
                                * runs j with j % 2 == p, into KV tile p */
#define AW_THREADS (256 + 128 * AW_PRODUCERS) /* consumer warpgroups 0 and 1, then the producers */
#define AW_SLICE 8192          /* bytes of one 64-dim slice of a 64-row tile (bf16, 128-byte swizzle) */
#define AW_TILE (8 * AW_SLICE) /* a 64 x 512 bf16 tile */
#define AW_BATCH 8             /* float4 loads a producer thread has in flight */
/* runs a cluster rank takes (more only past AW_MAX_SPLIT ranks): V4.1's lists of 128 + 512 entries
 * make two equal ranks. (H200, the bench's 4,096-token prefill: 4 runs a rank 842 ms, 8 runs 824,
 * 5 runs 781.) */
#define AW_SPLIT_RUNS 5
/* rows a multiprocessor from which (DI_ATTN_SPLIT_AUTO) a CTA takes a whole row: no second rank staging
 * the same q rows and no merge. H200, against the split: a 4,096-token prefill 647 -> 625 ms, a
 * 512-token one 109.0 -> 104.6, decode B = 256 77.9 -> 76.5, B = 128 59.3 -> 58.9; below one row a
 * multiprocessor (B = 16 .. 64) the split's twice as many CTAs are faster by ~1.3 ms a step */
#define AW_WHOLE_ROWS_PER_SM 1
#define AW_MAX_SPLIT 8         /* ranks of a cluster (the portable cluster size) */
#define AW_MAX_ROWS 65535      /* grid.y */
/* registers a thread (setmaxnreg): the accumulators alone are 128 a consumer. The warpgroups
 * trade within the CTA's allocation, 128 a thread at __launch_bounds__(512, 1); a consumer's
 * setmaxnreg.inc beyond what the producers gave back would wait forever. */
#define AW_PRODUCER_REGS 80
#define AW_CONSUMER_REGS 176
#define AW_LAUNCH_REGS (65536 / AW_THREADS)

static_assert(128 * AW_PRODUCERS * AW_PRODUCER_REGS + 256 * AW_CONSUMER_REGS <= AW_THREADS * AW_LAUNCH_REGS,
              "register trade exceeds the CTA's");

/* byte offsets in the (1024-aligned) dynamic shared memory */
enum {
    AW_Q = 0,                       /* [8 slices][64 heads][128 B] */
    AW_KV = AW_Q + AW_TILE,         /* [2][8 slices][64 entries][128 B]; after the runs [64][512] fp32 acc */
    AW_P = AW_KV + 2 * AW_TILE,     /* [64 heads][128 B] bf16(p); after the runs the merge weights */
    AW_ROWS = AW_P + 8192,          /* [4 * AW_PRODUCERS producer warps][64] const float *: a warp's staged rows */
    AW_RED = AW_ROWS + 4 * AW_PRODUCERS * 64 * 8, /* [2 run parities][2 consumers][64] fp32 row maxima */
    AW_MS = AW_RED + 2 * 2 * 64 * 4, /* [64] fp32 running max (after the runs: the rank's) */
    AW_DEN = AW_MS + 64 * 4,        /* [2 consumers][64] fp32 denominators, then [64] their sum */
    AW_LIVE = AW_DEN + 3 * 64 * 4,  /* [2] int: live entries of the run in each KV tile */
    AW_BARS = AW_LIVE + 16,         /* mbarriers: q full, full[2], empty[2], the consumers' exchange */
    AW_SMEM = AW_BARS + 6 * 8 + 1024 /* + alignment slack */
};
enum { BAR_Q = 0, BAR_FULL = 1, BAR_EMPTY = 3, BAR_X = 5 };

/* Is every live row of a run a compressed KV record at a 16-byte boundary (a warp's vote over its
 * copy of the run's list)? Then aw_stage_records stages it. */
static __device__ __forceinline__ bool aw_run_records(const float *const *rows, int n_live, int lane) {
    bool other = false;
    for (int r = lane; r < n_live; r += 32) {
        const float *p = rows[r];
        other |= !di_dev_kv_is_record(p) || (reinterpret_cast<uintptr_t>(di_dev_kv_record(p)) & 15u) != 0;
    }
    return !__any_sync(0xffffffffu, other);
}

/* tile [64 rows][512 dims] bf16 (swizzled slices) <- a run of records rows[0 .. n_live) (the rest
 * zeros): thread pt of warp w takes rows lane and lane + 32, slices w and w + 4 (64 dims each:
 * 32 bytes of codes, 4 scale bytes) -- its 12 loads all in flight before any decode, 16-byte ones
 * for the codes. (aw_stage's batches issue a 2- and a 1-byte load for every 4 values, 64 rounds of
 * them a run: latency-bound, ~9 us a run at B = 256.) A store writes one 16-byte chunk of 8 dims;
 * a warp's lanes write the same chunk of 32 rows, which the swizzle spreads over the banks. */
static __device__ void aw_stage_records(uint8_t *tile, const float *const *rows, int n_live, int pt) {
    const int lane = pt & 31, w = pt >> 5;
    uint4 cw[2][2][2]; /* [row h][slice i][16 bytes j]: codes of dims 64 (w + 4 i) + 32 j .. */
    uint32_t sc[2][2]; /* [row h][slice i]: the slice's 4 scale bytes */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = lane + 32 * h;
        const uint8_t *rec = di_dev_kv_record(r < n_live ? rows[r] : nullptr);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int m = w + 4 * i;
#pragma unroll
            for (int j = 0; j < 2; j++)
                cw[h][i][j] = rec ? *reinterpret_cast<const uint4 *>(rec + 32 * m + 16 * j) : make_uint4(0u, 0u, 0u, 0u);
            sc[h][i] = rec ? *reinterpret_cast<const uint32_t *>(rec + AW_DIM / 2 + 4 * m) : 0u;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = lane + 32 * h;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint8_t *row = tile + (w + 4 * i) * AW_SLICE + r * 128;
#pragma unroll
            for (int ch = 0; ch < 8; ch++) { /* dims 8 ch .. of the slice: word ch % 4 of cw[h][i][ch / 4] */
                const uint4 &c = cw[h][i][ch >> 2];
                const uint32_t wd = (ch & 3) == 0 ? c.x : (ch & 3) == 1 ? c.y : (ch & 3) == 2 ? c.z : c.w;
                const uint32_t s = di_dev_kv_scale_bf16x2(sc[h][i] >> (8 * (ch >> 1)) & 0xffu); /* 16 dims a scale */
                const uint2 a = di_dev_kv_codes_bf16x4(wd, s), b = di_dev_kv_codes_bf16x4(wd >> 16, s);
                *reinterpret_cast<uint4 *>(row + ((ch ^ (r & 7)) << 4)) = make_uint4(a.x, a.y, b.x, b.y);
            }
        }
    }
}

/* tile [64 rows][512 dims] bf16 (swizzled slices) <- rows[0 .. n_live) (the rest zeros); thread pt
 * (0..127) of the producer converts dims 4 pt .. 4 pt + 3 of every row, with rope (q's staging;
 * cos NULL for KV rows) applied for query row `row` before the rounding; KV rows may be compressed
 * KV records (di_dev_load_kv4_raw), decoded to bf16 */
template <bool ROPE> /* false: no rope code in the KV staging (the producer's registers are capped) */
static __device__ void aw_stage(uint8_t *tile, const float *const *rows, int n_live, int n_rows, int pt,
                                const di_attn_rope &rope, int64_t row) {
    uint8_t *col = tile + (pt >> 4) * AW_SLICE + (pt & 1) * 8;
    const int chunk = (pt & 15) >> 1;
    const di_rope4_coef rc = ROPE ? di_dev_rope4_coef(4 * pt, AW_DIM, rope, row, false) : di_rope4_coef{}; /* one column */
    static_assert(AW_BATCH <= 32, "a bit a row of the batch");
    /* whole batches: a batch past n_rows would write zeros over the other producer's half of q */
    static_assert(AW_RUN % AW_BATCH == 0 && AW_HEADS / AW_PRODUCERS % AW_BATCH == 0, "AW_BATCH divides a staging");
    auto dst = [&](int r) { return (uint2 *)(col + r * 128 + ((chunk ^ (r & 7)) << 4)); };
    if (!ROPE && aw_run_records(rows, n_live, pt & 31)) {
        aw_stage_records(tile, rows, n_live, pt);
        return;
    }
    for (int r0 = 0; r0 < n_rows; r0 += AW_BATCH) { /* n_rows: AW_RUN (a run) or 32 (a producer's half of q) */
        uint32_t recs = 0, flts = 0; /* bit u: row r0 + u is a compressed KV record / a row of floats */
#pragma unroll
        for (int u = 0; u < AW_BATCH && !ROPE; u++) {
            const float *p = r0 + u < n_live ? rows[r0 + u] : nullptr;
            recs |= (uint32_t)di_dev_kv_is_record(p) << u;
            flts |= (uint32_t)(p && !di_dev_kv_is_record(p)) << u;
        }
        if (!recs) { /* floats (and NULLs: zeros), AW_BATCH float4 loads in flight */
            float4 v[AW_BATCH];
#pragma unroll
            for (int u = 0; u < AW_BATCH; u++) v[u] = di_dev_load_row4(r0 + u < n_live ? rows[r0 + u] : nullptr, 4 * pt);
#pragma unroll
            for (int u = 0; u < AW_BATCH; u++) {
                if (ROPE) di_dev_rope4_apply(v[u], rc);
                *dst(r0 + u) = make_uint2(di_bf16x2_rn(v[u].x, v[u].y), di_bf16x2_rn(v[u].z, v[u].w));
            }
        } else if (!flts) { /* records (and NULLs: a zero word decodes to zeros), a word a row in flight */
            uint32_t cw[AW_BATCH], sb[AW_BATCH];
#pragma unroll
            for (int u = 0; u < AW_BATCH; u++) {
                const uint8_t *rec = di_dev_kv_record(r0 + u < n_live ? rows[r0 + u] : nullptr);
                cw[u] = di_dev_kv_codes4(rec, 4 * pt);
                sb[u] = di_dev_kv_scale4(rec, 4 * pt, AW_DIM);
            }
#pragma unroll
            for (int u = 0; u < AW_BATCH; u++) *dst(r0 + u) = di_dev_kv_record_bf16x4(cw[u] | sb[u] << 16);
        } else { /* the one batch of a run where the window's rows meet the records: a row at a time */
            for (int u = 0; u < AW_BATCH; u++) {
                const float4 v = di_dev_load_kv4_raw(r0 + u < n_live ? rows[r0 + u] : nullptr, 4 * pt, AW_DIM);
                *dst(r0 + u) = recs >> u & 1 ? di_dev_kv_record_bf16x4(__float_as_uint(v.x))
                                             : make_uint2(di_bf16x2_rn(v.x, v.y), di_bf16x2_rn(v.z, v.w));
            }
        }
    }
}

/* the 256 consumer threads meet (the mbarrier's phase `phase`) */
static __device__ __forceinline__ void aw_consumers_meet(uint64_t *bar, int phase) {
    di_mbar_arrive(bar);
    di_mbar_wait(bar, phase & 1);
}

/* out [rows, H, 512] bf16 values (fp32), or out16 (non-NULL: instead) their bf16 bits. grid (H / 64 x
 * n_split, rows), clusters of (n_split, 1, 1). */
__global__ void __launch_bounds__(AW_THREADS, 1)
attn_wg_kernel(const float *__restrict__ q, int n_heads, const float *const *kv_rows, int n_idx, int n_split,
               int split_runs, float scale, const float *__restrict__ sink, float *__restrict__ out,
               uint16_t *__restrict__ out16, di_attn_rope rope) {
    DI_PDL_BEGIN();
    extern __shared__ int4 aw_smem4[];
    uint8_t *const sm = di_smem_align1024(reinterpret_cast<uint8_t *>(aw_smem4));
    uint8_t *const q_t = sm + AW_Q, *const kv_t = sm + AW_KV, *const p_t = sm + AW_P;
    const float **const rows_s = reinterpret_cast<const float **>(sm + AW_ROWS);
    float *const red_s = reinterpret_cast<float *>(sm + AW_RED), *const m_s = reinterpret_cast<float *>(sm + AW_MS);
    float *const den_s = reinterpret_cast<float *>(sm + AW_DEN);
    int *const live_s = reinterpret_cast<int *>(sm + AW_LIVE);
    uint64_t *const bars = reinterpret_cast<uint64_t *>(sm + AW_BARS);

    const int64_t r = blockIdx.y;
    const int rank = blockIdx.x % n_split, h0 = blockIdx.x / n_split * AW_HEADS;
    const int t = threadIdx.x, wg = t / 128, lane = t % 32;
    const int n_runs = (n_idx + AW_RUN - 1) / AW_RUN, run0 = rank * split_runs;
    const int n_my = (run0 + split_runs < n_runs ? run0 + split_runs : n_runs) - run0; /* may be <= 0 */
    if (t == 0) {
        di_mbar_init(&bars[BAR_Q], 128 * AW_PRODUCERS);
        di_mbar_init(&bars[BAR_FULL], 128);
        di_mbar_init(&bars[BAR_FULL + 1], 128);
        di_mbar_init(&bars[BAR_EMPTY], 256);
        di_mbar_init(&bars[BAR_EMPTY + 1], 256);
        di_mbar_init(&bars[BAR_X], 256);
    }
    __syncthreads();

    if (wg >= 2) { /* producer pw: q's heads 32 pw .., then the runs j = pw, pw + 2, .. into KV tile pw */
        di_setmaxnreg_dec<AW_PRODUCER_REGS>();
        static_assert(AW_PRODUCERS == 2 && AW_HEADS == 64, "a producer a KV tile, half of q each");
        const int pw = wg - 2, pt = t - 256 - 128 * pw;
        const float **rows_w = rows_s + (4 * pw + (pt >> 5)) * 64; /* this warp's own copy of the list */
        for (int i = lane; i < AW_HEADS / 2; i += 32) rows_w[i] = q + (r * n_heads + h0 + 32 * pw + i) * AW_DIM;
        __syncwarp();
        aw_stage<true>(q_t + 32 * pw * 128, rows_w, AW_HEADS / 2, AW_HEADS / 2, pt, rope, r); /* rows 32 pw .. */
        di_fence_proxy_async();
        di_mbar_arrive(&bars[BAR_Q]);
        for (int j = pw; j < n_my; j += 2) {
            const int b = pw, r0 = (run0 + j) * AW_RUN, cnt = n_idx - r0 < AW_RUN ? n_idx - r0 : AW_RUN;
            if (j >= 2) di_mbar_wait(&bars[BAR_EMPTY + b], ((j >> 1) - 1) & 1);
            __syncwarp(); /* every lane is done with the previous list */
            const int live = di_dev_pack_live_run(kv_rows + r * n_idx + r0, cnt, lane, rows_w);
            __syncwarp();
            if (pt == 0) live_s[b] = live;
            aw_stage<false>(kv_t + b * AW_TILE, rows_w, live, AW_RUN, pt, rope, r); /* an empty run: zeros, no loads */
            di_fence_proxy_async();
            di_mbar_arrive(&bars[BAR_FULL + b]);
        }
    } else { /* consumers */
        di_setmaxnreg_inc<AW_CONSUMER_REGS>();
        /* warpgroup c: head rows hr0 = 16 w + g and hr1 = hr0 + 8 of its warp w */
        const int c = wg, g = lane >> 2, tq = lane & 3, hr0 = 16 * ((t % 128) >> 5) + g, hr1 = hr0 + 8;
        float acc[2][64]; /* [dims 256 c + 128 h ..][the wgmma D layout] */
        float m0 = -1e30f, m1 = -1e30f, den0 = 0.0f, den1 = 0.0f;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 64; i++) acc[h][i] = 0.0f;
        int xphase = 0;
        di_mbar_wait(&bars[BAR_Q], 0);
        for (int j = 0; j < n_my; j++) {
            const int b = j & 1;
            di_mbar_wait(&bars[BAR_FULL + b], (j >> 1) & 1);
            const int live = live_s[b];
            /* a run without live entries adds nothing: its logits are -inf, its rows zeros */
            const uint8_t *kv = kv_t + b * AW_TILE;
            float s[16]; /* s[4i + 0/1]: head hr0, entries 32 c + 8 i + 2 tq, +1; s[4i + 2/3]: head hr1 */
            const uint64_t dq = di_wgmma_desc_sw128(q_t), dk = di_wgmma_desc_sw128(kv + 32 * c * 128);
            di_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < AW_DIM / 16; kk++) {
                const uint32_t off = (kk >> 2) * AW_SLICE + (kk & 3) * 32;
                di_wgmma_bf16_m64n32k16(s, di_wgmma_desc_add(dq, off), di_wgmma_desc_add(dk, off), kk > 0);
            }
            di_wgmma_commit();
            di_wgmma_wait<0>();
            di_wgmma_pin(s);
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const bool ok = 32 * c + 8 * i + 2 * tq + e < live;
                    s[4 * i + e] = ok ? s[4 * i + e] * scale : -INFINITY;
                    s[4 * i + 2 + e] = ok ? s[4 * i + 2 + e] * scale : -INFINITY;
                    mx0 = fmaxf(mx0, s[4 * i + e]);
                    mx1 = fmaxf(mx1, s[4 * i + 2 + e]);
                }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            float *red = red_s + (j & 1) * 128; /* [2 consumers][64]: by run parity, so a fast
                                                 * warpgroup's next write never meets a slow one's read */
            if (tq == 0) {
                red[c * 64 + hr0] = mx0;
                red[c * 64 + hr1] = mx1;
            }
            aw_consumers_meet(&bars[BAR_X], xphase++);
            const float mn0 = fmaxf(m0, fmaxf(red[hr0], red[64 + hr0]));
            const float mn1 = fmaxf(m1, fmaxf(red[hr1], red[64 + hr1]));
            const float a0 = di_dev_expf(m0 - mn0), a1 = di_dev_expf(m1 - mn1);
            float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float p[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float lg = s[4 * i + e], mn = e < 2 ? mn0 : mn1;
                    p[e] = lg == -INFINITY ? 0.0f : di_dev_expf(lg - mn);
                }
                ps0 += p[0];
                ps0 += p[1];
                ps1 += p[2];
                ps1 += p[3];
                /* P row h: entries 32 c + 8 i + 2 tq, +1 at bytes 64 c + 16 i + 4 tq (chunk 4 c + i) */
                const int chunk = ((4 * c + i) ^ (hr0 & 7)) << 4; /* hr1 & 7 == hr0 & 7 */
                *(uint32_t *)(p_t + hr0 * 128 + chunk + 4 * tq) = di_bf16x2_rn(p[0], p[1]);
                *(uint32_t *)(p_t + hr1 * 128 + chunk + 4 * tq) = di_bf16x2_rn(p[2], p[3]);
            }
            ps0 += __shfl_xor_sync(0xffffffffu, ps0, 1);
            ps0 += __shfl_xor_sync(0xffffffffu, ps0, 2);
            ps1 += __shfl_xor_sync(0xffffffffu, ps1, 1);
            ps1 += __shfl_xor_sync(0xffffffffu, ps1, 2);
            den0 = den0 * a0 + ps0;
            den1 = den1 * a1 + ps1;
            m0 = mn0;
            m1 = mn1;
            di_fence_proxy_async(); /* P, written by threads, is read by wgmma */
            aw_consumers_meet(&bars[BAR_X], xphase++);
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < 16; i++) {
                    acc[h][4 * i] *= a0;
                    acc[h][4 * i + 1] *= a0;
                    acc[h][4 * i + 2] *= a1;
                    acc[h][4 * i + 3] *= a1;
                }
            const uint64_t dp = di_wgmma_desc_sw128(p_t), dv = di_wgmma_desc_sw128_mn(kv + 4 * c * AW_SLICE, AW_SLICE);
            di_wgmma_fence();
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int kk = 0; kk < AW_RUN / 16; kk++)
                    di_wgmma_bf16_m64n128k16_tb(acc[h], di_wgmma_desc_add(dp, kk * 32),
                                                di_wgmma_desc_add(dv, 2 * h * AW_SLICE + kk * 2048));
            di_wgmma_commit();
            di_wgmma_wait<0>();
            di_wgmma_pin(acc[0]);
            di_wgmma_pin(acc[1]);
            di_mbar_arrive(&bars[BAR_EMPTY + b]);
        }
        /* the KV tiles become this rank's acc [64][512] fp32 once both consumers' last PV is done
         * (the producer finished with them before the last run was full) */
        aw_consumers_meet(&bars[BAR_X], xphase++);
        float *const part = reinterpret_cast<float *>(kv_t);
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const int col = 256 * c + 128 * h + 8 * i + 2 * tq;
                *(float2 *)(part + hr0 * AW_DIM + col) = float2{acc[h][4 * i], acc[h][4 * i + 1]};
                *(float2 *)(part + hr1 * AW_DIM + col) = float2{acc[h][4 * i + 2], acc[h][4 * i + 3]};
            }
        if (tq == 0) {
            if (c == 0) {
                m_s[hr0] = m0;
                m_s[hr1] = m1;
            }
            den_s[c * 64 + hr0] = den0;
            den_s[c * 64 + hr1] = den1;
        }
    }

    /* merge; the P tile holds the weights */
    __syncthreads();
    float *const part_s = reinterpret_cast<float *>(kv_t);
    float *const wt_s = reinterpret_cast<float *>(p_t), *const dfin_s = wt_s + AW_HEADS * AW_MAX_SPLIT;
    if (t < AW_HEADS) den_s[128 + t] = den_s[t] + den_s[64 + t];
    di_cluster_sync(); /* every rank's m_s, sums and part_s are final */
    if (t < AW_HEADS)
        dfin_s[t] = di_cluster_merge_weights(&m_s[t], &den_s[128 + t], n_split, sink[h0 + t], wt_s + t * AW_MAX_SPLIT);
    __syncthreads();
    const float4 *parts[AW_MAX_SPLIT]; /* each rank's acc, mapped once */
#pragma unroll
    for (int k = 0; k < AW_MAX_SPLIT; k++)
        parts[k] = reinterpret_cast<const float4 *>(di_cluster_rank_smem(part_s, k < n_split ? k : 0));
    const int64_t o0 = (r * n_heads + h0) * AW_DIM; /* the CTA's first output value */
    static_assert(AW_THREADS % (AW_DIM / 4) == 0, "a thread's merge columns stay put");
    const di_rope4_coef rc = di_dev_rope4_coef(4 * ((rank * AW_THREADS + t) % (AW_DIM / 4)), AW_DIM, rope, r, true);
    for (int e = rank * AW_THREADS + t; e < AW_HEADS * AW_DIM / 4; e += n_split * AW_THREADS) {
        const int head = e / (AW_DIM / 4);
        float4 a = float4{0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < AW_MAX_SPLIT; k++) {
            if (k >= n_split) break;
            const float4 p = parts[k][e];
            const float w = wt_s[head * AW_MAX_SPLIT + k];
            a.x += p.x * w;
            a.y += p.y * w;
            a.z += p.z * w;
            a.w += p.w * w;
        }
        const float den = dfin_s[head];
        float4 o = den > 0.0f ? float4{di_dev_bf16_round(a.x / den), di_dev_bf16_round(a.y / den),
                                       di_dev_bf16_round(a.z / den), di_dev_bf16_round(a.w / den)}
                              : float4{0.0f, 0.0f, 0.0f, 0.0f};
        di_dev_rope4_apply(o, rc);
        if (out16) reinterpret_cast<uint2 *>(out16 + o0)[e] = di_dev_bf16x4_bits(o);
        else reinterpret_cast<float4 *>(out + o0)[e] = o;
    }
    di_cluster_sync(); /* no rank leaves while another still reads its shared memory */
}

extern "C" bool di_cuda_sparse_attn_wg_supported(int n_heads, int dim) {
    return n_heads > 0 && n_heads % AW_HEADS == 0 && dim == AW_DIM;
}

extern "C" void di_cuda_sparse_attn_wg(const float *q, int64_t nq, int n_heads, int dim, const float *const *kv_rows,
                                       int n_idx, const float *sink, float scale, float *out, uint16_t *out_bf16,
                                       di_attn_split split, const di_attn_rope *rope, cudaStream_t s) {
    if (!di_cuda_sparse_attn_wg_supported(n_heads, dim) || n_idx < 0 ||
        (rope && rope->cos && !di_attn_rope_ok(dim, rope->off, rope->rot))) {
        fprintf(stderr, "di_cuda_sparse_attn_wg: %d heads of dim %d (%d entries) not supported\n", n_heads, dim, n_idx);
        abort();
    }
    if (nq <= 0) return;
    static bool attr_set;
    if (!attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(attn_wg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)AW_SMEM));
        attr_set = true;
    }
    const int n_runs = (n_idx + AW_RUN - 1) / AW_RUN;
    const bool whole = split == DI_ATTN_SPLIT_WHOLE ||
                       (split == DI_ATTN_SPLIT_AUTO &&
                        nq * (n_heads / AW_HEADS) >= (int64_t)AW_WHOLE_ROWS_PER_SM * di_cuda_sm_count());
    int split_runs, n_split;
    di_cluster_split(n_runs, whole ? (n_runs > 0 ? n_runs : 1) : AW_SPLIT_RUNS, AW_MAX_SPLIT, &split_runs, &n_split);
    for (int64_t r0 = 0; r0 < nq; r0 += AW_MAX_ROWS) {
        const int64_t rows = nq - r0 < AW_MAX_ROWS ? nq - r0 : AW_MAX_ROWS;
        const float *qs = q + r0 * n_heads * dim;
        const float *const *kvr = kv_rows + r0 * n_idx;
        float *os = out_bf16 ? NULL : out + r0 * n_heads * dim; /* out may be NULL then */
        uint16_t *os16 = out_bf16 ? out_bf16 + r0 * n_heads * dim : NULL;
        di_cluster_launch(attn_wg_kernel, dim3((unsigned)(n_heads / AW_HEADS * n_split), (unsigned)rows), AW_THREADS,
                          (size_t)AW_SMEM, n_split, s, qs, n_heads, kvr, n_idx, n_split, split_runs, scale, sink, os,
                          os16, di_attn_rope_rows(rope, r0));
    }
}
