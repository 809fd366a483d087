/* Sparse attention over an index list on the GPU (model-spec §2.0 sparse_attn), twin of
 * src/backend/cpu/cpu_attention.c.
 *
 * One thread block per (query row, group of 8 heads), 512 threads. The list is walked in runs of
 * 64 entries, as the reference kernel does: the 64 KV rows of a run (addressed through a device
 * array of row pointers, NULL = index -1) are staged in shared memory, rows padded by one float so
 * that the logit phase (thread = (head, entry), a sequential fp32 dot product over the head
 * dimension, exactly the CPU's order) reads without bank conflicts. Then per head the new running
 * max; p = expf(logit - max) per (head, entry) (di_dev_expf, glibc's algorithm) and bf16(p); the
 * fp32 p summed in double in list order (one thread per head); and the PV sums (thread = (head,
 * dim), a double sum over the run in list order) folded into the fp32 accumulators with the
 * CPU's expressions. Everything the CPU rounds
 * is rounded at the same point in the same order, so the result is bit-identical.
 *
 * This is the parity version: it re-stages each run once per group of 8 heads (8 times for 64
 * heads) and uses fp32/fp64 CUDA cores; a FlashMLA-style kernel (all heads of a query on tensor
 * cores, the KV row loaded once) is future work (docs/CUDA.md). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define ATT_RUN 64
#define ATT_HB 8
#define ATT_THREADS (ATT_HB * ATT_RUN) /* 512 */
#define ATT_MAX_DIM 512
#define ATT_OUT_PER_THREAD (ATT_HB * ATT_MAX_DIM / ATT_THREADS) /* 8 */

__global__ void __launch_bounds__(ATT_THREADS)
sparse_attn_kernel(const float *__restrict__ q, int n_heads, int dim, const float *const *kv_rows,
                   int n_idx, const float *__restrict__ sink, float scale, float *__restrict__ out) {
    extern __shared__ float att_smem[];
    const int dp = dim + 1;
    float *q_s = att_smem;                         /* [ATT_HB][dim] */
    float *kv_s = q_s + ATT_HB * dim;              /* [ATT_RUN][dim + 1] */
    float *logit_s = kv_s + ATT_RUN * dp;          /* [ATT_HB][ATT_RUN] */
    float *pb_s = logit_s + ATT_HB * ATT_RUN;      /* [ATT_HB][ATT_RUN] bf16(p) */
    float *a_s = pb_s + ATT_HB * ATT_RUN;          /* [ATT_HB] rescale of this run */
    __shared__ const float *row_s[ATT_RUN];
    __shared__ float m_s[ATT_HB], den_s[ATT_HB], mnew_s[ATT_HB];

    const int64_t qi = blockIdx.y;
    const int h0 = blockIdx.x * ATT_HB, t = threadIdx.x;
    const int hb = n_heads - h0 < ATT_HB ? n_heads - h0 : ATT_HB;
    const float *const *rows = kv_rows + qi * n_idx;
    for (int i = t; i < hb * dim; i += ATT_THREADS) q_s[i] = q[(qi * n_heads + h0) * dim + i];
    if (t < ATT_HB) {
        m_s[t] = -1e30f;
        den_s[t] = 0.0f;
    }
    float acc[ATT_OUT_PER_THREAD]; /* output (h, i) = o / dim, o % dim with o = t + r * 512 */
#pragma unroll
    for (int r = 0; r < ATT_OUT_PER_THREAD; r++) acc[r] = 0.0f;

    for (int r0 = 0; r0 < n_idx; r0 += ATT_RUN) {
        const int cnt = n_idx - r0 < ATT_RUN ? n_idx - r0 : ATT_RUN;
        __syncthreads(); /* previous run's readers are done with kv_s / row_s */
        if (t < ATT_RUN) row_s[t] = t < cnt ? rows[r0 + t] : nullptr;
        __syncthreads();
        for (int idx = t; idx < ATT_RUN * dim; idx += ATT_THREADS) {
            const int j = idx / dim, i = idx % dim;
            const float *row = row_s[j];
            kv_s[j * dp + i] = row ? row[i] : 0.0f;
        }
        __syncthreads();
        { /* logits: thread = (head, entry) */
            const int h = t / ATT_RUN, j = t % ATT_RUN;
            float lg = -INFINITY;
            if (h < hb && row_s[j]) {
                float dot = 0.0f;
                const float *qh = q_s + h * dim, *kj = kv_s + j * dp;
                for (int i = 0; i < dim; i++) dot += qh[i] * kj[i];
                lg = dot * scale;
            }
            logit_s[h * ATT_RUN + j] = lg;
        }
        __syncthreads();
        if (t < hb) { /* per head: the new running max and the rescale of the old state */
            const int h = t;
            float m_new = m_s[h];
            for (int j = 0; j < cnt; j++)
                if (row_s[j]) m_new = fmaxf(m_new, logit_s[h * ATT_RUN + j]);
            a_s[h] = di_dev_expf(m_s[h] - m_new);
            mnew_s[h] = m_new;
        }
        __syncthreads();
        { /* p against the new max, thread = (head, entry); fp32 p kept for the denominator */
            const int h = t / ATT_RUN, j = t % ATT_RUN;
            float p = 0.0f;
            if (h < hb && j < cnt && row_s[j]) p = di_dev_expf(logit_s[h * ATT_RUN + j] - mnew_s[h]);
            logit_s[h * ATT_RUN + j] = p;
            pb_s[h * ATT_RUN + j] = di_dev_bf16_round(p);
        }
        __syncthreads();
        if (t < hb) { /* per head: sum of p in double in list order, the denominator */
            const int h = t;
            double psum = 0.0;
            for (int j = 0; j < cnt; j++)
                if (row_s[j]) psum += logit_s[h * ATT_RUN + j];
            den_s[h] = den_s[h] * a_s[h] + (float)psum;
            m_s[h] = mnew_s[h];
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < ATT_OUT_PER_THREAD; r++) { /* PV: thread = (head, dim) */
            const int o = t + r * ATT_THREADS, h = o / dim, i = o % dim;
            if (h >= hb) continue;
            double pv = 0.0;
            for (int j = 0; j < cnt; j++)
                if (row_s[j]) pv += (double)pb_s[h * ATT_RUN + j] * kv_s[j * dp + i];
            acc[r] = acc[r] * a_s[h] + (float)pv;
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ATT_OUT_PER_THREAD; r++) {
        const int o = t + r * ATT_THREADS, h = o / dim, i = o % dim;
        if (h >= hb) continue;
        const float den = den_s[h] + di_dev_expf(sink[h0 + h] - m_s[h]);
        out[(qi * n_heads + h0 + h) * dim + i] = den > 0.0f ? di_dev_bf16_round(acc[r] / den) : 0.0f;
    }
}

extern "C" void di_cuda_sparse_attn(const float *q, int64_t nq, int n_heads, int dim,
                                    const float *const *kv_rows, int n_idx, const float *sink,
                                    float scale, float *out, cudaStream_t s) {
    if (dim > ATT_MAX_DIM || dim <= 0) {
        fprintf(stderr, "di_cuda_sparse_attn: head dim %d not in 1..%d\n", dim, ATT_MAX_DIM);
        abort();
    }
    if (nq <= 0) return;
    const size_t smem = sizeof(float) * ((size_t)ATT_HB * dim + (size_t)ATT_RUN * (dim + 1) +
                                         2 * ATT_HB * ATT_RUN + ATT_HB);
    static bool attr_set;
    if (!attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(sparse_attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           180 * 1024));
        attr_set = true;
    }
    dim3 grid((unsigned)((n_heads + ATT_HB - 1) / ATT_HB), (unsigned)nq);
    sparse_attn_kernel<<<grid, ATT_THREADS, smem, s>>>(q, n_heads, dim, kv_rows, n_idx, sink, scale, out);
    DI_CUDA_LAUNCHED();
}
