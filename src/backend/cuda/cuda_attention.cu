/* Sparse attention over an index list on the GPU (model-spec §2.0 sparse_attn), twin of
 * src/backend/cpu/cpu_attention.c, split over the list's runs of 64 entries.
 *
 * The CPU walks the runs of one (row, head) serially: logits of the run, new running max
 * m_r = max(m_{r-1}, run max), a_r = expf(m_{r-1} - m_r), p = expf(logit - m_r), psum_r and the
 * PV sums of the run in double in list order (rounded to float), then
 * den = den * a_r + psum_r, acc = acc * a_r + pv_r. Only the last two lines are a recurrence; the
 * rest of run r needs nothing of the other runs but m_r, which is a prefix max of the run maxima
 * (max is exact, so any order gives the CPU's value). Three kernels, each rounding what the CPU
 * rounds in the CPU's order, so the result is bit-identical; rows never interact, so it is also
 * batch-invariant (and independent of the row slicing below).
 *
 *   1. attn_logits_kernel, block per (row, run, group of 16 heads), 256 threads: the run's 64 KV
 *      rows (through the device array of row pointers, NULL = index -1, zeros in shared memory) and
 *      the group's 16 q rows staged in shared memory once; warp w takes 4 heads x 32 entries, lane =
 *      entry, so each thread keeps 4 independent dot products (float4 loads: q broadcast, KV rows
 *      padded to stride = 4 mod 32 words, conflict-free). Each dot is the CPU's fp32 `dot += q * k`
 *      in index order (built with -fmad=false), then `* scale`; NULL entries are -INFINITY.
 *      Writes the logits and each run's max over its non-NULL entries.
 *   2. attn_runsum_kernel, same grid: m_r by the CPU's running max over the run maxima from
 *      -1e30; p = di_dev_expf(logit - m_r), psum = double sum of p in list order (thread per
 *      head), bf16(p) kept as double in shared memory; the KV run staged again, and the PV sums
 *      with warp = (8 heads, 128 dims), thread = 8 heads x 4 dims = 32 independent double chains
 *      over the run in list order (fma: bf16 x fp32 is exact in double, so fma = mul + add).
 *      Writes (float)psum and (float)pv.
 *   3. attn_fold_kernel, block per (row, head), thread per dim: the CPU's fold over the runs in
 *      fp32 (a_r from the same prefix max), the sink, out = den > 0 ? bf16(acc / den) : 0.
 * A run with no entry has max -INFINITY, so m stays, a = 1, psum = pv = 0: the CPU's steps. A row
 * with no entry keeps m = -1e30, den = expf(sink + 1e30) = inf and out = 0, as the CPU.
 *
 * At decode batch 1 (64 heads, 640 entries) kernels 1 and 2 have 10 runs x 4 groups = 40 blocks.
 * Shared memory (dim 512): kernel 1 KV 64 x 516 floats + q 16 x 512 = 161 KiB, kernel 2 KV + bf16(p)
 * 16 x 64 doubles + p 16 x 64 floats = 142 KiB (of 227 per block); one block per SM each.
 *
 * Workspace (per row: logits [H, n_idx], run max and psum [H, n_runs], pv [n_runs, H, dim], all
 * fp32; ~1.5 MB per row at the real shape) is allocated stream-ordered (cudaMallocAsync /
 * cudaFreeAsync on the caller's stream) per call; rows are processed in slices so that it stays
 * under ATT_WS_MAX_BYTES (256 MB, ~180 rows at the real shape). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_mma.cuh" /* di_dev_load_kv4 */
#include "backend/cuda/cuda_ops.h"

#define ATT_RUN 64
#define ATT_HG 16 /* heads per block in kernels 1 and 2 */
#define ATT_THREADS 256
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_MAX_DIM 512
#define ATT_PV_HEADS 8                               /* heads per thread in the PV sums */
#define ATT_PV_DIMS 4                                /* dims per thread in the PV sums */
#define ATT_FOLD_THREADS 128
#define ATT_FOLD_DIMS (ATT_MAX_DIM / ATT_FOLD_THREADS) /* 4 */
#define ATT_WS_MAX_BYTES ((size_t)256 << 20)
#define ATT_MAX_SLICE_ROWS 65535 /* grid.y */
/* the PV warp layout below: 2 head octets x 4 quarters of 128 dims = 8 warps */
static_assert(ATT_HG / ATT_PV_HEADS * 4 == ATT_WARPS && ATT_PV_DIMS * 32 * 4 == ATT_MAX_DIM, "PV layout");
static_assert(ATT_HG == 4 * (ATT_WARPS / 2), "logit layout: 4 heads per warp pair");

/* row strides in shared memory (floats): q rows round dim up to 4 (float4 loads); KV rows add 4 so
 * that 8 consecutive rows start in 8 different 4-bank groups (stride = 4 mod 32 for dim 512) */
static __host__ __device__ int att_q_stride(int dim) { return (dim + 3) & ~3; }
static __host__ __device__ int att_kv_stride(int dim) { return att_q_stride(dim) + 4; }

/* dst [n_rows][stride] <- the rows row_s[0..n_rows) (NULL -> zeros), dim floats each. Every thread
 * issues ATT_STAGE_BATCH loads (float4 where dim % 4 == 0) before it stores any, so that they are
 * in flight together (a load-store-load loop would wait for each). Consecutive threads take
 * consecutive float4s of a row: coalesced. */
#define ATT_STAGE_BATCH 16
static __device__ void att_stage_rows(float *dst, int stride, const float *const *row_s, int n_rows, int dim) {
    const int t = threadIdx.x;
    if (dim & 3) { /* small test dims only (never records: their dims are multiples of 16) */
        for (int x = t; x < n_rows * dim; x += ATT_THREADS) {
            const float *row = row_s[x / dim];
            dst[x / dim * stride + x % dim] = row ? row[x % dim] : 0.0f;
        }
        return;
    }
    const int n4 = dim / 4, total = n_rows * n4;
    for (int x0 = t; x0 < total; x0 += ATT_STAGE_BATCH * ATT_THREADS) {
        float4 v[ATT_STAGE_BATCH];
#pragma unroll
        for (int u = 0; u < ATT_STAGE_BATCH; u++) {
            const int x = x0 + u * ATT_THREADS, c = x % n4 * 4;
            v[u] = di_dev_load_kv4(x < total ? row_s[x / n4] : nullptr, c, dim);
        }
#pragma unroll
        for (int u = 0; u < ATT_STAGE_BATCH; u++) {
            const int x = x0 + u * ATT_THREADS;
            if (x < total) *(float4 *)(dst + x / n4 * stride + x % n4 * 4) = v[u];
        }
    }
}

/* logit [rows, H, n_idx] (NULL entries -INFINITY); run_max [rows, H, n_runs] (-INFINITY if the run
 * has no entry). grid (n_runs * head groups, rows). */
__global__ void __launch_bounds__(ATT_THREADS)
attn_logits_kernel(const float *q, int n_heads, int dim, const float *const *kv_rows,
                   int n_idx, int n_runs, float scale, float *__restrict__ logit,
                   float *__restrict__ run_max) {
    DI_PDL_BEGIN();
    extern __shared__ float4 att_smem[];
    const int dq = att_q_stride(dim), dp = att_kv_stride(dim);
    float *kv_s = (float *)att_smem;      /* [ATT_RUN][dp] */
    float *q_s = kv_s + ATT_RUN * dp;     /* [ATT_HG][dq], zero rows past the last head */
    __shared__ const float *row_s[ATT_RUN];
    __shared__ const float *qrow_s[ATT_HG]; /* NULL past the last head */
    __shared__ float max_s[2][ATT_HG];    /* [entry half][head] */

    const int64_t r = blockIdx.y;
    const int run = blockIdx.x % n_runs, h0 = blockIdx.x / n_runs * ATT_HG, t = threadIdx.x;
    const int hb = n_heads - h0 < ATT_HG ? n_heads - h0 : ATT_HG;
    const int r0 = run * ATT_RUN, cnt = n_idx - r0 < ATT_RUN ? n_idx - r0 : ATT_RUN;
    if (t < ATT_RUN) row_s[t] = t < cnt ? kv_rows[r * n_idx + r0 + t] : nullptr;
    if (t < ATT_HG) qrow_s[t] = t < hb ? q + (r * n_heads + h0 + t) * dim : nullptr;
    __syncthreads();
    att_stage_rows(q_s, dq, qrow_s, ATT_HG, dim);
    att_stage_rows(kv_s, dp, row_s, ATT_RUN, dim);
    __syncthreads();

    /* warp w: heads hq..hq+3, entry j; four independent chains, each in index order */
    const int w = t / 32, lane = t % 32, hq = (w >> 1) * 4, j = (w & 1) * 32 + lane;
    const float *kj = kv_s + j * dp, *qh = q_s + hq * dq;
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    const int dim4 = dim & ~3;
    for (int i = 0; i < dim4; i += 4) {
        const float4 k = *(const float4 *)(kj + i);
        const float4 a = *(const float4 *)(qh + i), b = *(const float4 *)(qh + dq + i);
        const float4 c = *(const float4 *)(qh + 2 * dq + i), e = *(const float4 *)(qh + 3 * dq + i);
        d0 += a.x * k.x; d1 += b.x * k.x; d2 += c.x * k.x; d3 += e.x * k.x;
        d0 += a.y * k.y; d1 += b.y * k.y; d2 += c.y * k.y; d3 += e.y * k.y;
        d0 += a.z * k.z; d1 += b.z * k.z; d2 += c.z * k.z; d3 += e.z * k.z;
        d0 += a.w * k.w; d1 += b.w * k.w; d2 += c.w * k.w; d3 += e.w * k.w;
    }
    for (int i = dim4; i < dim; i++) {
        const float k = kj[i];
        d0 += qh[i] * k; d1 += qh[dq + i] * k; d2 += qh[2 * dq + i] * k; d3 += qh[3 * dq + i] * k;
    }
    const bool live = row_s[j] != nullptr; /* false past cnt too */
    const float dots[4] = {d0, d1, d2, d3};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int h = hq + k;
        float lg = live ? dots[k] * scale : -INFINITY;
        if (h < hb && j < cnt) logit[(r * n_heads + h0 + h) * n_idx + r0 + j] = lg;
        for (int off = 16; off > 0; off >>= 1) lg = fmaxf(lg, __shfl_xor_sync(0xffffffffu, lg, off));
        if (lane == 0) max_s[w & 1][h] = lg;
    }
    __syncthreads();
    if (t < hb) run_max[(r * n_heads + h0 + t) * n_runs + run] = fmaxf(max_s[0][t], max_s[1][t]);
}

/* psum [rows, H, n_runs] (float)(double sum of p); run_pv [rows, n_runs, H, dim] (float)(double PV
 * sum of the run). grid (n_runs * head groups, rows). */
__global__ void __launch_bounds__(ATT_THREADS)
attn_runsum_kernel(int n_heads, int dim, const float *const *kv_rows, int n_idx, int n_runs,
                   const float *__restrict__ logit, const float *__restrict__ run_max,
                   float *__restrict__ psum, float *__restrict__ run_pv) {
    DI_PDL_BEGIN();
    extern __shared__ float4 att_smem[];
    const int dp = att_kv_stride(dim);
    double *pb_s = (double *)att_smem;                  /* [ATT_HG][ATT_RUN] bf16(p), 0 if NULL */
    float *kv_s = (float *)(pb_s + ATT_HG * ATT_RUN);   /* [ATT_RUN][dp] */
    __shared__ const float *row_s[ATT_RUN];
    __shared__ float m_s[ATT_HG];                       /* m_r per head */
    __shared__ float p_s[ATT_HG][ATT_RUN];              /* fp32 p */

    const int64_t r = blockIdx.y;
    const int run = blockIdx.x % n_runs, h0 = blockIdx.x / n_runs * ATT_HG, t = threadIdx.x;
    const int hb = n_heads - h0 < ATT_HG ? n_heads - h0 : ATT_HG;
    const int r0 = run * ATT_RUN, cnt = n_idx - r0 < ATT_RUN ? n_idx - r0 : ATT_RUN;
    if (t < ATT_RUN) row_s[t] = t < cnt ? kv_rows[r * n_idx + r0 + t] : nullptr;
    if (t < hb) { /* the CPU's running max after this run */
        const float *rm = run_max + (r * n_heads + h0 + t) * n_runs;
        float m = -1e30f;
        for (int k = 0; k <= run; k++) m = fmaxf(m, rm[k]);
        m_s[t] = m;
    }
    __syncthreads();
    att_stage_rows(kv_s, dp, row_s, ATT_RUN, dim);
    for (int x = t; x < ATT_HG * ATT_RUN; x += ATT_THREADS) {
        const int h = x / ATT_RUN, j = x % ATT_RUN;
        float p = 0.0f;
        if (h < hb && row_s[j]) p = di_dev_expf(logit[(r * n_heads + h0 + h) * n_idx + r0 + j] - m_s[h]);
        p_s[h][j] = p;
        pb_s[x] = (double)di_dev_bf16_round(p);
    }
    __syncthreads();
    if (t < hb) { /* denominator of the run: double sum of the fp32 p in list order */
        double s = 0.0;
        for (int j = 0; j < cnt; j++)
            if (row_s[j]) s += p_s[t][j];
        psum[(r * n_heads + h0 + t) * n_runs + run] = (float)s;
    }

    /* PV: warp w = head octet (w / 4) x dims [128 (w % 4), +128); lane's dims i0 + 32 d */
    const int w = t / 32, lane = t % 32, ho = (w / 4) * ATT_PV_HEADS, i0 = (w % 4) * 128 + lane;
    if (ho >= hb || i0 - lane >= dim) return; /* no barrier below */
    double acc[ATT_PV_HEADS][ATT_PV_DIMS];
#pragma unroll
    for (int a = 0; a < ATT_PV_HEADS; a++)
#pragma unroll
        for (int d = 0; d < ATT_PV_DIMS; d++) acc[a][d] = 0.0;
    for (int j = 0; j < cnt; j++) {
        if (!row_s[j]) continue; /* as the CPU: NULL entries add nothing */
        const float *kj = kv_s + j * dp;
        double kd[ATT_PV_DIMS];
#pragma unroll
        for (int d = 0; d < ATT_PV_DIMS; d++) kd[d] = i0 + 32 * d < dim ? (double)kj[i0 + 32 * d] : 0.0;
#pragma unroll
        for (int a = 0; a < ATT_PV_HEADS; a++) {
            const double pb = pb_s[(ho + a) * ATT_RUN + j];
#pragma unroll
            for (int d = 0; d < ATT_PV_DIMS; d++) acc[a][d] = __fma_rn(pb, kd[d], acc[a][d]);
        }
    }
    float *pv = run_pv + ((r * n_runs + run) * n_heads + h0) * (int64_t)dim;
#pragma unroll
    for (int a = 0; a < ATT_PV_HEADS; a++)
#pragma unroll
        for (int d = 0; d < ATT_PV_DIMS; d++)
            if (ho + a < hb && i0 + 32 * d < dim) pv[(ho + a) * dim + i0 + 32 * d] = (float)acc[a][d];
}

/* out [rows, H, dim] bf16 values. grid (H, rows). With no runs: den = expf(sink + 1e30) = inf,
 * out = 0, as the CPU. */
__global__ void __launch_bounds__(ATT_FOLD_THREADS)
attn_fold_kernel(int n_heads, int dim, int n_runs, const float *__restrict__ run_max,
                 const float *__restrict__ psum, const float *__restrict__ run_pv,
                 const float *__restrict__ sink, float *__restrict__ out) {
    DI_PDL_BEGIN();
    const int64_t r = blockIdx.y;
    const int h = blockIdx.x, t = threadIdx.x;
    const float *rm = run_max + (r * n_heads + h) * n_runs, *ps = psum + (r * n_heads + h) * n_runs;
    float acc[ATT_FOLD_DIMS];
#pragma unroll
    for (int d = 0; d < ATT_FOLD_DIMS; d++) acc[d] = 0.0f;
    float m = -1e30f, den = 0.0f;
#pragma unroll 4 /* lets the loads of several runs be in flight together */
    for (int k = 0; k < n_runs; k++) {
        const float m_new = fmaxf(m, rm[k]);
        const float a = di_dev_expf(m - m_new);
        den = den * a + ps[k];
        const float *pv = run_pv + ((r * n_runs + k) * n_heads + h) * (int64_t)dim;
#pragma unroll
        for (int d = 0; d < ATT_FOLD_DIMS; d++) {
            const int i = t + d * ATT_FOLD_THREADS;
            if (i < dim) acc[d] = acc[d] * a + pv[i];
        }
        m = m_new;
    }
    den += di_dev_expf(sink[h] - m);
#pragma unroll
    for (int d = 0; d < ATT_FOLD_DIMS; d++) {
        const int i = t + d * ATT_FOLD_THREADS;
        if (i < dim) out[(r * n_heads + h) * dim + i] = den > 0.0f ? di_dev_bf16_round(acc[d] / den) : 0.0f;
    }
}

static size_t att_logits_smem(int dim) {
    return sizeof(float) * ((size_t)ATT_RUN * att_kv_stride(dim) + (size_t)ATT_HG * att_q_stride(dim));
}
static size_t att_runsum_smem(int dim) {
    return sizeof(double) * ATT_HG * ATT_RUN + sizeof(float) * (size_t)ATT_RUN * att_kv_stride(dim);
}

/* floats of one row's workspace: logit [H, n_idx], run_max and psum [H, n_runs], run_pv
 * [n_runs, H, dim] */
static int64_t att_row_floats(int n_heads, int dim, int n_idx) {
    const int n_runs = n_idx > 0 ? (n_idx + ATT_RUN - 1) / ATT_RUN : 0;
    const int64_t n_run = (int64_t)n_heads * n_runs;
    return (int64_t)n_heads * (n_idx > 0 ? n_idx : 0) + 2 * n_run + n_run * (dim > 0 ? dim : 0);
}
static int64_t att_slice(int64_t nq, int64_t slice_rows) {
    int64_t S = slice_rows < nq ? slice_rows : nq;
    if (S > ATT_MAX_SLICE_ROWS) S = ATT_MAX_SLICE_ROWS;
    return S < 1 ? 1 : S;
}

extern "C" size_t di_cuda_sparse_attn_ws_bytes(int64_t nq, int n_heads, int dim, int n_idx, int64_t slice_rows) {
    return sizeof(float) * (size_t)(att_slice(nq, slice_rows) * att_row_floats(n_heads, dim, n_idx)) + 16;
}

extern "C" void di_cuda_sparse_attn_sliced(const float *q, int64_t nq, int n_heads, int dim,
                                           const float *const *kv_rows, int n_idx, const float *sink,
                                           float scale, float *out, int64_t slice_rows, float *ws,
                                           cudaStream_t s) {
    if (dim > ATT_MAX_DIM || dim <= 0) {
        fprintf(stderr, "di_cuda_sparse_attn: head dim %d not in 1..%d\n", dim, ATT_MAX_DIM);
        abort();
    }
    if (nq <= 0 || n_heads <= 0) return;
    static bool attr_set;
    if (!attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(attn_logits_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)att_logits_smem(ATT_MAX_DIM)));
        DI_CUDA_CHECK(cudaFuncSetAttribute(attn_runsum_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)att_runsum_smem(ATT_MAX_DIM)));
        attr_set = true;
    }
    const int n_runs = n_idx > 0 ? (n_idx + ATT_RUN - 1) / ATT_RUN : 0;
    const int n_groups = (n_heads + ATT_HG - 1) / ATT_HG;
    /* workspace of one slice of S rows: logit [S, H, n_idx], run_max [S, H, n_runs],
     * psum [S, H, n_runs], run_pv [S, n_runs, H, dim], fp32 */
    const int64_t n_logit = (int64_t)n_heads * (n_idx > 0 ? n_idx : 0), n_run = (int64_t)n_heads * n_runs;
    const int64_t S = att_slice(nq, slice_rows);
    const bool own_ws = ws == nullptr;
    if (own_ws)
        DI_CUDA_CHECK(cudaMallocAsync((void **)&ws, di_cuda_sparse_attn_ws_bytes(nq, n_heads, dim, n_idx, slice_rows), s));
    float *logit = ws, *run_max = logit + S * n_logit, *psum = run_max + S * n_run, *run_pv = psum + S * n_run;
    for (int64_t r0 = 0; r0 < nq; r0 += S) {
        const int64_t rows = nq - r0 < S ? nq - r0 : S;
        const float *const *kvr = kv_rows + r0 * n_idx;
        if (n_runs > 0) {
            const dim3 grid((unsigned)(n_runs * n_groups), (unsigned)rows);
            attn_logits_kernel<<<grid, ATT_THREADS, att_logits_smem(dim), s>>>(
                q + r0 * n_heads * dim, n_heads, dim, kvr, n_idx, n_runs, scale, logit, run_max);
            DI_CUDA_LAUNCHED();
            attn_runsum_kernel<<<grid, ATT_THREADS, att_runsum_smem(dim), s>>>(
                n_heads, dim, kvr, n_idx, n_runs, logit, run_max, psum, run_pv);
            DI_CUDA_LAUNCHED();
        }
        attn_fold_kernel<<<dim3((unsigned)n_heads, (unsigned)rows), ATT_FOLD_THREADS, 0, s>>>(
            n_heads, dim, n_runs, run_max, psum, run_pv, sink, out + r0 * n_heads * dim);
        DI_CUDA_LAUNCHED();
    }
    if (own_ws) DI_CUDA_CHECK(cudaFreeAsync(ws, s));
}

extern "C" int64_t di_cuda_sparse_attn_slice_rows(int64_t nq, int n_heads, int dim, int n_idx) {
    const size_t row_bytes = sizeof(float) * (size_t)att_row_floats(n_heads, dim, n_idx);
    return row_bytes ? (int64_t)(ATT_WS_MAX_BYTES / row_bytes) : nq;
}

extern "C" void di_cuda_sparse_attn(const float *q, int64_t nq, int n_heads, int dim,
                                    const float *const *kv_rows, int n_idx, const float *sink,
                                    float scale, float *out, cudaStream_t s) {
    di_cuda_sparse_attn_sliced(q, nq, n_heads, dim, kv_rows, n_idx, sink, scale, out,
                               di_cuda_sparse_attn_slice_rows(nq, n_heads, dim, n_idx), nullptr, s);
}
