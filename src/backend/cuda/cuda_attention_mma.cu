/* Sparse attention on tensor cores (model-spec §2.0 sparse_attn) by mma.sync: the default CUDA
 * path for shapes the wgmma kernel (cuda_attention_wg.cu: 64 heads a group, dim 512) does not take.
 * cuda_attention.cu keeps the CPU-exact kernels, which DEEPINFER_GPU_EXACT=1 selects.
 *
 * A cluster of n_split CTAs per (row, group of 16 HT heads), 8 warps each; rank c takes the runs
 * [2c, 2c + 2) of the row's list (AM_SPLIT_RUNS, fixed in batch-invariant mode, so that the split
 * never depends on the batch). Outside it, a grid of a few rows takes one run a rank instead (am_split:
 * at B = 1 of V4.1, 40 CTAs in clusters of 10 rather than 20 in clusters of 5). Each rank walks its
 * runs of 64 entries with the reference's online softmax:
 *   compact  the run's live entries to its front, in list order (a row's NULLs sit elsewhere when a
 *            prefill is chunked; the reference's spec lets the order inside a run vary, and packing
 *            makes the sums independent of where the NULLs were);
 *   stage    those KV rows into shared memory as bf16 (fp32 on the bf16 grid, so exact), zero rows
 *            up to a multiple of 16. The group's q rows were staged once, before the first run (with
 *            di_attn_rope: RoPE applied to them there, and the inverse RoPE to the output as the merge
 *            writes it -- rope_kernel's bits, two launches less a layer).
 *   S        logits = (q . kv) * scale, by mma.m16n8k16 bf16 with fp32 accumulation (fragments by
 *            ldmatrix). Warp w: head tile w % HT, the HT entry tiles of 8 from (w / HT) HT.
 *            Dead entries get -inf.
 *   softmax  8 threads a head, 8 entries each. Run max by shuffles; m_new = max(m, run max),
 *            a = exp(m - m_new), p = exp(logit - m_new), den = den a + sum p (fp32). The sum's order
 *            is fixed: 8 sequential adds, then a 3-level shuffle tree. bf16(p) goes to shared memory.
 *   PV       acc = acc a + bf16(p) V by mma (V read with ldmatrix.trans from the same staged rows).
 *            Warp w: head tile w % HT, dims [64 HT (w / HT), +64 HT); the accumulator stays in
 *            registers across the runs.
 * Merge, through the cluster's distributed shared memory, in rank order: M = max m_c,
 * w_c = exp(m_c - M), den = sum den_c w_c + exp(sink - M), out = bf16(sum acc_c w_c / den). A rank
 * whose runs hold no entry adds exact zeros, so a list that only grows by NULL runs gives the same
 * bits; a row with no entry gives 0. The weights are made 16 lanes a head (di_cluster_merge_weights_lanes)
 * and the output's sums load every rank's values before their first add: one remote round trip each
 * where a thread a head chained one a rank (B = 1 of V4.1, ten ranks: 24.1 -> 22.2 us a launch; two
 * ranks 24.7 -> 25.6; session 62).
 *
 * Against the CPU reference, this differs only in summation order. The tensor core sums the dot
 * products and PV products in fp32 (the CPU sums them in sequential fp32 and in double), the run's
 * sum of p is a tree, and the ranks' partial sums are merged at the end. test_cuda_ops bounds the
 * difference per element, allowing for bf16(p) rounding the other way. Each head is computed the
 * same way whatever HT and whatever the other rows, so the result is batch invariant; HT (1 or 2)
 * follows the grid size.
 *
 * Shared memory at dim 512: q 16 HT x 520 bf16, KV 64 x 520 bf16 (each row padded by 16 bytes, so
 * that the 8 rows one ldmatrix phase reads fall in 8 different bank groups), logits 16 HT x 68
 * fp32, p 16 HT x 72 bf16. That is 88 KiB at HT 1 and 111 KiB at HT 2: two CTAs per SM. After the
 * runs the KV buffer holds the rank's acc for the merge, and the logit buffer the merge weights. A
 * CTA stages its next run only after its PV of this one, so loads and tensor work overlap across
 * the two CTAs of an SM, not within one. The CPU emulator runs a cluster's CTAs at once
 * (cuda_cluster.cuh), so it splits the runs as the device does. */
#include "backend/cuda/cuda_cluster.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_ops.h"

#include <type_traits>

#define AM_RUN 64
#define AM_THREADS 256
#define AM_MAX_DIM 512
#define AM_S_STRIDE (AM_RUN + 4) /* floats per logit row */
#define AM_P_STRIDE (AM_RUN + 8) /* bf16 per p row: 144 bytes, 16 mod 128 */
#define AM_STAGE_BATCH 8         /* float4 loads a thread has in flight while staging */
#define AM_MAX_ROWS 65535        /* grid.y */
#define AM_MAX_SPLIT 16          /* ranks of a cluster: sm_90's non-portable cluster size (the portable 8 but for
                                  * the one-run split of a few rows, am_split) */
#define AM_PORTABLE_SPLIT 8      /* ranks of a cluster otherwise */
#define AM_WG_MIN_ROWS 16        /* rows x 64-head groups from which the wgmma kernel is faster (H200:
                                  * 43.3 against 42.6 ms a decode step at B = 8, 49.1 against 50.6 at 32) */
static_assert(AM_MAX_SPLIT * 16 + 16 <= 16 * AM_S_STRIDE, "merge weights fit the logit buffer");
static_assert(AM_THREADS / 32 == 8, "warp layout: 8 warps");

/* bf16 elements per staged q / KV row: dim rounded up to 64, plus 8 (row stride 16 mod 128 bytes) */
static __host__ __device__ int am_row_stride(int dim) { return ((dim + 63) & ~63) + 8; }

template <int HT>
static size_t am_smem_bytes(int dim) {
    const size_t hg = 16 * HT;
    return 2 * (hg + AM_RUN) * am_row_stride(dim) + 4 * hg * AM_S_STRIDE + 2 * hg * AM_P_STRIDE;
}

/* dst [n_rows][stride] bf16 <- rows[0..n_rows) (NULL: zeros), dim fp32 values each (dim % 4 == 0),
 * with rope (q's staging; cos NULL for KV rows) applied for query row `row` before the rounding.
 * Each thread issues AM_STAGE_BATCH float4 loads before storing any; consecutive threads take
 * consecutive float4s of a row (coalesced). A thread's float4s x = t + i AM_THREADS are (row x / n4,
 * column x % n4); both advance by a fixed step, so the divisions by the run-time n4 happen once a
 * thread, not twice a float4; the bf16 pairs come from one cvt each (di_bf16x2_rn_keep_nan). KV rows
 * may be compressed KV records (di_dev_load_kv4_raw: 3 bytes a load), decoded to bf16. */
template <bool ROPE> /* false: no rope code in the KV staging */
static __device__ void am_stage_rows(uint16_t *dst, int stride, const float *const *rows, int n_rows, int dim,
                                     const di_attn_rope &rope, int64_t row) {
    const int n4 = dim / 4, total = n_rows * n4;
    const int step_r = AM_THREADS / n4, step_c = AM_THREADS % n4;
    auto advance = [&](int &r, int &c) {
        r += step_r, c += step_c;
        if (c >= n4) c -= n4, r++;
    };
    int r0 = threadIdx.x / n4, c0 = threadIdx.x % n4; /* of x0 */
    static_assert(AM_STAGE_BATCH <= 32, "a bit a load of the batch");
    for (int x0 = threadIdx.x; x0 < total; x0 += AM_STAGE_BATCH * AM_THREADS) {
        const auto live = [&](int u) { return x0 + u * AM_THREADS < total; };
        uint32_t recs = 0, flts = 0; /* bit u: load u is of a compressed KV record / a row of floats */
        int r = r0, c = c0;
#pragma unroll
        for (int u = 0; u < AM_STAGE_BATCH && !ROPE; u++) {
            const float *p = live(u) ? rows[r] : nullptr;
            recs |= (uint32_t)di_dev_kv_is_record(p) << u;
            flts |= (uint32_t)(p && !di_dev_kv_is_record(p)) << u;
            advance(r, c);
        }
        r = r0, c = c0;
        if (!recs) { /* floats (and NULLs: zeros), AM_STAGE_BATCH float4 loads in flight */
            float4 v[AM_STAGE_BATCH];
#pragma unroll
            for (int u = 0; u < AM_STAGE_BATCH; u++) {
                v[u] = di_dev_load_row4(live(u) ? rows[r] : nullptr, 4 * c);
                advance(r, c);
            }
            r = r0, c = c0;
#pragma unroll
            for (int u = 0; u < AM_STAGE_BATCH; u++) {
                if (!live(u)) break;
                if (ROPE) di_dev_rope4_apply(v[u], di_dev_rope4_coef(4 * c, dim, rope, row, false));
                uint2 packed;
                packed.x = di_bf16x2_rn_keep_nan(v[u].x, v[u].y);
                packed.y = di_bf16x2_rn_keep_nan(v[u].z, v[u].w);
                *(uint2 *)(dst + r * stride + 4 * c) = packed;
                advance(r, c);
            }
        } else if (!flts) { /* records (and NULLs: a zero word decodes to zeros), a word a record in flight */
            uint32_t cw[AM_STAGE_BATCH], sb[AM_STAGE_BATCH];
#pragma unroll
            for (int u = 0; u < AM_STAGE_BATCH; u++) {
                const uint8_t *rec = di_dev_kv_record(live(u) ? rows[r] : nullptr);
                cw[u] = di_dev_kv_codes4(rec, 4 * c);
                sb[u] = di_dev_kv_scale4(rec, 4 * c, dim);
                advance(r, c);
            }
            r = r0, c = c0;
#pragma unroll
            for (int u = 0; u < AM_STAGE_BATCH; u++) {
                if (!live(u)) break;
                *(uint2 *)(dst + r * stride + 4 * c) = di_dev_kv_record_bf16x4(cw[u] | sb[u] << 16);
                advance(r, c);
            }
        } else { /* the batch where the window's rows meet the records: a load at a time */
            for (int u = 0; u < AM_STAGE_BATCH && live(u); u++) {
                const float4 v = di_dev_load_kv4_raw(rows[r], 4 * c, dim);
                *(uint2 *)(dst + r * stride + 4 * c) =
                    recs >> u & 1 ? di_dev_kv_record_bf16x4(__float_as_uint(v.x))
                                  : make_uint2(di_bf16x2_rn_keep_nan(v.x, v.y), di_bf16x2_rn_keep_nan(v.z, v.w));
                advance(r, c);
            }
        }
#pragma unroll
        for (int u = 0; u < AM_STAGE_BATCH; u++) advance(r0, c0); /* the next batch's first */
    }
}

/* out [rows, H, dim] bf16 values: fp32, or (O16) their bf16 bits. grid (head groups x n_split, rows),
 * clusters of (n_split, 1, 1):
 * rank c of a cluster takes runs [c split_runs, (c + 1) split_runs). dim % 32 == 0, <= 512. */
template <int HT, bool O16>
__global__ void __launch_bounds__(AM_THREADS, 2)
attn_mma_kernel(const float *__restrict__ q, int n_heads, int dim, const float *const *kv_rows, int n_idx,
                int n_split, int split_runs, float scale, const float *__restrict__ sink,
                typename std::conditional<O16, uint16_t, float>::type *__restrict__ out, di_attn_rope rope) {
    DI_PDL_BEGIN();
    constexpr int HG = 16 * HT; /* heads of the block */
    constexpr int NT = 8 * HT;  /* PV n-tiles of 8 dims per warp */
    extern __shared__ uint4 am_smem[];
    const int ks = am_row_stride(dim);
    uint16_t *q_s = (uint16_t *)am_smem;                  /* [HG][ks] bf16 */
    uint16_t *kv_s = q_s + HG * ks;                       /* [AM_RUN][ks] bf16 */
    float *part_s = (float *)kv_s;                        /* after the runs: [HG][dim] this rank's acc */
    float *s_s = (float *)(kv_s + AM_RUN * ks);           /* [HG][AM_S_STRIDE] logits */
    uint16_t *p_s = (uint16_t *)(s_s + HG * AM_S_STRIDE); /* [HG][AM_P_STRIDE] bf16(p) */
    float *wt_s = s_s, *dfin_s = s_s + HG * AM_MAX_SPLIT; /* after the runs: [HG][n_split] weights, [HG] den */
    __shared__ const float *row_s[AM_RUN]; /* the run's live entries first, in list order */
    __shared__ const float *qrow_s[HG];
    __shared__ float m_s[HG], den_s[HG], a_s[HG]; /* running max, denominator, this run's rescale */
    __shared__ int live_s;

    const int64_t r = blockIdx.y;
    const int rank = blockIdx.x % n_split, h0 = blockIdx.x / n_split * HG;
    const int t = threadIdx.x, w = t / 32, lane = t % 32, g = lane / 4, tq = lane % 4;
    const int hb = n_heads - h0 < HG ? n_heads - h0 : HG;
    if (t < HG) {
        qrow_s[t] = t < hb ? q + (r * n_heads + h0 + t) * dim : nullptr;
        m_s[t] = -1e30f;
        den_s[t] = 0.0f;
    }
    __syncthreads();
    am_stage_rows<true>(q_s, ks, qrow_s, HG, dim, rope, r);

    const int ht = w % HT;                /* the warp's head tile, in S and in PV */
    const int et0 = (w / HT) * HT;        /* S: entry tiles et0 .. et0 + HT - 1 */
    const int d0 = (w / HT) * 8 * NT;     /* PV: dims d0 .. d0 + 8 NT - 1 */
    const bool pv_live = d0 < dim;
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    const int n_runs = (n_idx + AM_RUN - 1) / AM_RUN;
    const int run_end = (rank + 1) * split_runs < n_runs ? (rank + 1) * split_runs : n_runs;
    for (int run = rank * split_runs; run < run_end; run++) {
        const int r0 = run * AM_RUN, cnt = n_idx - r0 < AM_RUN ? n_idx - r0 : AM_RUN;
        __syncthreads(); /* the previous run's PV is done with kv_s, p_s and row_s */
        if (t < 32) { /* live entries to the front, in list order */
            const int live = di_dev_pack_live_run(kv_rows + r * n_idx + r0, cnt, t, row_s);
            if (t >= live) row_s[t] = nullptr;
            if (t + 32 >= live) row_s[t + 32] = nullptr;
            if (t == 0) live_s = live;
        }
        __syncthreads();
        const int n_stage = (live_s + 15) & ~15; /* rows staged and multiplied: whole k-steps of 16 */
        am_stage_rows<false>(kv_s, ks, row_s, n_stage, dim, rope, r);
        __syncthreads();

        { /* S: logits of the warp's 16 heads x 8 HT entries */
            float sacc[HT][4];
            const uint16_t *qa = q_s + (ht * 16 + lane % 16) * ks + 8 * (lane / 16);
            const uint16_t *kb[HT];
#pragma unroll
            for (int i = 0; i < HT; i++) {
                sacc[i][0] = sacc[i][1] = sacc[i][2] = sacc[i][3] = 0.0f;
                kb[i] = kv_s + ((et0 + i) * 8 + lane % 8) * ks + 8 * (lane / 8);
            }
            if (et0 * 8 < n_stage) {
                for (int k0 = 0; k0 < dim; k0 += 32) { /* two k-steps of 16 */
                    uint32_t a0[4], a1[4];
                    di_ldmatrix_x4(a0, qa + k0);
                    di_ldmatrix_x4(a1, qa + k0 + 16);
#pragma unroll
                    for (int i = 0; i < HT; i++) {
                        if ((et0 + i) * 8 >= n_stage) break;
                        uint32_t b[4]; /* b0 b1 of the first k-step, then of the second */
                        di_ldmatrix_x4(b, kb[i] + k0);
                        const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
                        di_mma_bf16_16816(sacc[i], a0, b_lo, sacc[i]);
                        di_mma_bf16_16816(sacc[i], a1, b_hi, sacc[i]);
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < HT; i++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int head = ht * 16 + g + 8 * (c >> 1), e = (et0 + i) * 8 + 2 * tq + (c & 1);
                    s_s[head * AM_S_STRIDE + e] = row_s[e] ? sacc[i][c] * scale : -INFINITY;
                }
        }
        __syncthreads();

        if (t < 8 * HG) { /* softmax: head t / 8, entries 8 (t % 8) .. + 7 */
            const int hh = t / 8, part = t % 8;
            const float *lg = s_s + hh * AM_S_STRIDE + 8 * part;
            float l[8], mx = -INFINITY;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                l[e] = lg[e];
                mx = fmaxf(mx, l[e]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            const float m_old = m_s[hh], m_new = fmaxf(m_old, mx);
            float ps = 0.0f;
            uint32_t pb[4];
#pragma unroll
            for (int e = 0; e < 8; e += 2) {
                const float p0 = l[e] == -INFINITY ? 0.0f : di_dev_expf(l[e] - m_new);
                const float p1 = l[e + 1] == -INFINITY ? 0.0f : di_dev_expf(l[e + 1] - m_new);
                ps += p0;
                ps += p1;
                pb[e / 2] = di_dev_bf16_bits(p0) | di_dev_bf16_bits(p1) << 16;
            }
            *(uint4 *)(p_s + hh * AM_P_STRIDE + 8 * part) = uint4{pb[0], pb[1], pb[2], pb[3]};
            ps += __shfl_xor_sync(0xffffffffu, ps, 1);
            ps += __shfl_xor_sync(0xffffffffu, ps, 2);
            ps += __shfl_xor_sync(0xffffffffu, ps, 4);
            __syncwarp(); /* every lane of the head has read m_s before part 0 writes it */
            if (part == 0) {
                const float a = di_dev_expf(m_old - m_new);
                den_s[hh] = den_s[hh] * a + ps;
                m_s[hh] = m_new;
                a_s[hh] = a;
            }
        }
        __syncthreads();

        if (pv_live) { /* PV: acc = acc a + bf16(p) V over the run's staged entries */
            const float a_lo = a_s[ht * 16 + g], a_hi = a_s[ht * 16 + g + 8];
#pragma unroll
            for (int n = 0; n < NT; n++) {
                acc[n][0] *= a_lo;
                acc[n][1] *= a_lo;
                acc[n][2] *= a_hi;
                acc[n][3] *= a_hi;
            }
            const uint16_t *pa = p_s + (ht * 16 + lane % 16) * AM_P_STRIDE + 8 * (lane / 16);
            const uint16_t *vb = kv_s + (lane % 16) * ks + d0 + 8 * (lane / 16);
#pragma unroll 1 /* unrolled, the 64 HT accumulators leave no registers for the addresses */
            for (int k0 = 0; k0 < AM_RUN; k0 += 16) {
                if (k0 >= n_stage) break;
                uint32_t pf[4];
                di_ldmatrix_x4(pf, pa + k0);
#pragma unroll
                for (int n2 = 0; n2 < NT / 2; n2++) {
                    if (d0 + 16 * n2 >= dim) break;
                    uint32_t b[4]; /* b0 b1 of dims +16 n2 .. +7, then of +8 .. +15 */
                    di_ldmatrix_x4_trans(b, vb + k0 * ks + 16 * n2);
                    const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
                    di_mma_bf16_16816(acc[2 * n2], pf, b_lo, acc[2 * n2]);
                    di_mma_bf16_16816(acc[2 * n2 + 1], pf, b_hi, acc[2 * n2 + 1]);
                }
            }
        }
    }

    /* merge the cluster's ranks in rank order: M = max m_c, w_c = exp(m_c - M),
     * den = sum den_c w_c + exp(sink - M), out = bf16(sum acc_c w_c / den). A rank with no live
     * entry has m = -1e30, den = 0, acc = 0 and adds exact zeros; with one rank, w = 1 exactly. */
    __syncthreads(); /* every PV is done with kv_s: it becomes part_s */
    if (pv_live)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            float *prow = part_s + (ht * 16 + g + 8 * hh) * dim;
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int col = d0 + 8 * n + 2 * tq;
                if (col >= dim) break;
                *(float2 *)(prow + col) = float2{acc[n][2 * hh], acc[n][2 * hh + 1]};
            }
        }
    di_cluster_sync(); /* every rank's m_s, den_s and part_s are final */
    di_cluster_merge_weights_lanes(m_s, den_s, hb, n_split, sink + h0, wt_s, AM_MAX_SPLIT, dfin_s);
    __syncthreads();
    for (int e4 = rank * AM_THREADS + t; e4 < hb * dim / 4; e4 += n_split * AM_THREADS) { /* 4 values a turn */
        const int e = 4 * e4, head = e / dim;
        float4 p[AM_MAX_SPLIT]; /* every rank's values, loaded before the first add (one remote round trip) */
#pragma unroll
        for (int c = 0; c < AM_MAX_SPLIT; c++)
            p[c] = c < n_split ? *reinterpret_cast<const float4 *>(di_cluster_rank_smem(&part_s[e], c))
                               : float4{0.0f, 0.0f, 0.0f, 0.0f};
        float4 a = float4{0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int c = 0; c < AM_MAX_SPLIT; c++) {
            if (c >= n_split) break;
            const float w = wt_s[head * AM_MAX_SPLIT + c];
            a.x += p[c].x * w;
            a.y += p[c].y * w;
            a.z += p[c].z * w;
            a.w += p[c].w * w;
        }
        const float den = dfin_s[head];
        float4 o = den > 0.0f ? float4{di_dev_bf16_round(a.x / den), di_dev_bf16_round(a.y / den),
                                       di_dev_bf16_round(a.z / den), di_dev_bf16_round(a.w / den)}
                              : float4{0.0f, 0.0f, 0.0f, 0.0f};
        di_dev_rope4_apply(o, di_dev_rope4_coef(e % dim, dim, rope, r, true));
        if constexpr (O16) *reinterpret_cast<uint2 *>(out + (r * n_heads + h0) * dim + e) = di_dev_bf16x4_bits(o);
        else *reinterpret_cast<float4 *>(out + (r * n_heads + h0) * dim + e) = o;
    }
    di_cluster_sync(); /* no rank leaves while another still reads its shared memory */
}

extern "C" bool di_attn_rope_ok(int dim, int off, int rot) {
    return off >= 0 && rot > 0 && off % 4 == 0 && rot % 4 == 0 && off + rot <= dim;
}

extern "C" bool di_cuda_sparse_attn_mma_supported(int n_heads, int dim) {
    return n_heads > 0 && dim > 0 && dim <= AM_MAX_DIM && dim % 32 == 0;
}

/* attn_mma_kernel<HT, O16>'s attributes, once: the largest shape's shared memory, and clusters past
 * the portable size (am_split) */
template <int HT, bool O16>
static void am_attrs(void) {
    static bool attr_set;
    if (attr_set) return;
    DI_CUDA_CHECK(cudaFuncSetAttribute(attn_mma_kernel<HT, O16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)am_smem_bytes<HT>(AM_MAX_DIM)));
#ifndef DI_CUDA_EMU_H
    DI_CUDA_CHECK(cudaFuncSetAttribute(attn_mma_kernel<HT, O16>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
#endif
    attr_set = true;
}

/* out: float (fp32 values) or uint16_t (bf16 bits) */
template <int HT, typename O>
static void am_launch(int n_groups, int n_split, int split_runs, int64_t rows, const float *q, int n_heads, int dim,
                      const float *const *kv_rows, int n_idx, float scale, const float *sink, O *out, di_attn_rope rope,
                      cudaStream_t s) {
    constexpr bool O16 = std::is_same<O, uint16_t>::value;
    am_attrs<HT, O16>();
    di_cluster_launch(attn_mma_kernel<HT, O16>, dim3((unsigned)(n_groups * n_split), (unsigned)rows), AM_THREADS,
                      am_smem_bytes<HT>(dim), n_split, s, q, n_heads, dim, kv_rows, n_idx, n_split, split_runs, scale,
                      sink, out, rope);
}
/* the row chunk's launch of HT x 16 heads a CTA, into out or (non-NULL) out16 */
template <int HT>
static void am_launch_out(int n_split, int split_runs, int64_t rows, const float *q, int n_heads, int dim,
                          const float *const *kv_rows, int n_idx, float scale, const float *sink, float *out,
                          uint16_t *out16, di_attn_rope rope, cudaStream_t s) {
    const int n_groups = (n_heads + 16 * HT - 1) / (16 * HT);
    if (out16)
        am_launch<HT>(n_groups, n_split, split_runs, rows, q, n_heads, dim, kv_rows, n_idx, scale, sink, out16, rope, s);
    else
        am_launch<HT>(n_groups, n_split, split_runs, rows, q, n_heads, dim, kv_rows, n_idx, scale, sink, out, rope, s);
}

#define AM_SPLIT_RUNS 2 /* runs a cluster rank takes (di_cluster_split) */
#define AM_FEW_BLOCKS 16 /* (rows x 16-head groups) at most this: a rank per run, where 2 runs a rank left
                          * most multiprocessors idle (B = 1 of V4.1: 20 CTAs of 132) */

/* whether clusters of n_split CTAs of attn_mma_kernel can be resident (non-portable sizes > 8; asked of
 * the largest CTA, 32 heads of dim 512, so that any shape may take the split) */
static bool am_cluster_fits(int n_split) {
#ifdef DI_CUDA_EMU_H
    (void)n_split;
    return true;
#else
    static signed char known[AM_MAX_SPLIT + 1]; /* 0 unknown, 1 fits, -1 not */
    if (n_split <= AM_PORTABLE_SPLIT) return true;
    if (n_split > AM_MAX_SPLIT) return false;
    if (!known[n_split]) {
        am_attrs<2, false>(); /* the occupancy query below sees the launch's shared memory */
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)n_split, 1, 1);
        cfg.blockDim = dim3(AM_THREADS, 1, 1);
        cfg.dynamicSmemBytes = am_smem_bytes<2>(AM_MAX_DIM);
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = (unsigned)n_split;
        attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        int clusters = 0;
        const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, attn_mma_kernel<2, false>, &cfg);
        if (e != cudaSuccess) (void)cudaGetLastError();
        known[n_split] = e == cudaSuccess && clusters > 0 ? 1 : -1;
    }
    return known[n_split] > 0;
#endif
}

/* the run split of nq rows' lists of n_idx entries (di_attn_split): AM_SPLIT_RUNS runs a rank (portable
 * clusters); under DI_ATTN_SPLIT_AUTO one run a rank where the grid would otherwise be a few CTAs;
 * DI_ATTN_SPLIT_WHOLE one rank. Either way a list that only grows by NULL runs keeps its bits while
 * its runs fit the same rule. */
static void am_split(int64_t nq, int n_heads, int n_idx, di_attn_split split, int *split_runs, int *n_split) {
    const int n_runs = (n_idx + AM_RUN - 1) / AM_RUN;
    if (split == DI_ATTN_SPLIT_WHOLE) {
        di_cluster_split(n_runs, n_runs > 0 ? n_runs : 1, AM_PORTABLE_SPLIT, split_runs, n_split);
        return;
    }
    if (split == DI_ATTN_SPLIT_AUTO && nq * ((n_heads + 15) / 16) <= AM_FEW_BLOCKS && n_runs > 1 &&
        n_runs <= AM_MAX_SPLIT && am_cluster_fits(n_runs)) {
        di_cluster_split(n_runs, 1, AM_MAX_SPLIT, split_runs, n_split);
        return;
    }
    di_cluster_split(n_runs, AM_SPLIT_RUNS, AM_PORTABLE_SPLIT, split_runs, n_split);
}

extern "C" void di_cuda_sparse_attn_mma(const float *q, int64_t nq, int n_heads, int dim,
                                        const float *const *kv_rows, int n_idx, const float *sink,
                                        float scale, float *out, uint16_t *out_bf16, int heads_per_block,
                                        di_attn_split split, const di_attn_rope *rope, cudaStream_t s) {
    if (!di_cuda_sparse_attn_mma_supported(n_heads, dim) || n_idx < 0 ||
        (rope && rope->cos && !di_attn_rope_ok(dim, rope->off, rope->rot))) {
        fprintf(stderr, "di_cuda_sparse_attn_mma: %d heads of dim %d (%d entries) not supported\n", n_heads, dim,
                n_idx);
        abort();
    }
    if (nq <= 0) return;
    /* the wgmma kernel (one CTA a row and 64 heads) once the rows fill the GPU; below that the
     * mma.sync kernel's 16 or 32 heads a CTA spread a few rows wider */
    const bool wg_fills = nq * (n_heads / 64) >= AM_WG_MIN_ROWS;
    if (heads_per_block == 64 ||
        (heads_per_block == 0 && wg_fills && di_cuda_sparse_attn_wg_supported(n_heads, dim))) {
        di_cuda_sparse_attn_wg(q, nq, n_heads, dim, kv_rows, n_idx, sink, scale, out, out_bf16, split, rope, s);
        return;
    }
    int split_runs, n_split;
    am_split(nq, n_heads, n_idx, split, &split_runs, &n_split);
    /* 32 heads a block (KV staged half as often) once the grid fills the GPU twice over */
    int HT = nq * ((n_heads + 31) / 32) * n_split >= 2 * (int64_t)di_cuda_sm_count() ? 2 : 1;
    if (heads_per_block == 16 || heads_per_block == 32) HT = heads_per_block / 16;
    for (int64_t r0 = 0; r0 < nq; r0 += AM_MAX_ROWS) {
        const int64_t rows = nq - r0 < AM_MAX_ROWS ? nq - r0 : AM_MAX_ROWS;
        const float *qs = q + r0 * n_heads * dim;
        const float *const *kvr = kv_rows + r0 * n_idx;
        float *os = out_bf16 ? NULL : out + r0 * n_heads * dim; /* out may be NULL then */
        uint16_t *os16 = out_bf16 ? out_bf16 + r0 * n_heads * dim : NULL;
        const di_attn_rope rp = di_attn_rope_rows(rope, r0);
        if (HT == 2) am_launch_out<2>(n_split, split_runs, rows, qs, n_heads, dim, kvr, n_idx, scale, sink, os, os16, rp, s);
        else am_launch_out<1>(n_split, split_runs, rows, qs, n_heads, dim, kvr, n_idx, scale, sink, os, os16, rp, s);
    }
}
