/* CPU reference of sparse_attn (model-spec §2.0): one query row of H heads attends over a list of
 * KV rows (each row is both key and value), given as pointers so that SWA ring slots, rows of the
 * current chunk and compressed-cache entries mix freely; NULL is the reference's index -1.
 *
 * The online softmax runs over runs of 64 list entries in list order, exactly as the kernel does:
 * the running max starts at -1e30, probabilities are taken against the max after each run, the PV
 * product uses bf16-rounded probabilities, and the per-head sink adds exp(sink - m) to the
 * denominator only. The run an entry falls in decides which max its probability is rounded
 * against, so callers must build the list in the reference's order (window first). Logits q.k are
 * summed in fp32 in index order, as the reference does; the PV sums of a run are exact-then-rounded. */
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"

#define ATTN_RUN 64

void di_cpu_sparse_attn(const float *q, int n_heads, int dim, const float *const *kv, int n_idx,
                        const float *sink, float scale, float *out) {
    float *acc = malloc(sizeof(float) * (size_t)dim);   /* [dim] fp32 running PV */
    double *run_pv = malloc(sizeof(double) * (size_t)dim); /* [dim] PV sum of one run */
    for (int h = 0; h < n_heads; h++) {
        const float *qh = q + (size_t)h * dim;
        float m = -1e30f, den = 0.0f;
        for (int i = 0; i < dim; i++) acc[i] = 0.0f;
        for (int r0 = 0; r0 < n_idx; r0 += ATTN_RUN) {
            int r1 = r0 + ATTN_RUN < n_idx ? r0 + ATTN_RUN : n_idx;
            float logit[ATTN_RUN];
            float m_new = m;
            for (int j = r0; j < r1; j++) {
                if (!kv[j]) {
                    logit[j - r0] = -INFINITY;
                    continue;
                }
                float dot = 0.0f;
                for (int i = 0; i < dim; i++) dot += qh[i] * kv[j][i];
                logit[j - r0] = dot * scale;
                m_new = fmaxf(m_new, logit[j - r0]);
            }
            float a = expf(m - m_new);
            double psum = 0.0;
            for (int i = 0; i < dim; i++) run_pv[i] = 0.0;
            for (int j = r0; j < r1; j++) {
                if (!kv[j]) continue;
                float p = expf(logit[j - r0] - m_new);
                psum += p;
                float pb = di_bf16_round(p);
                for (int i = 0; i < dim; i++) run_pv[i] += (double)pb * kv[j][i];
            }
            den = den * a + (float)psum;
            for (int i = 0; i < dim; i++) acc[i] = acc[i] * a + (float)run_pv[i];
            m = m_new;
        }
        den += expf(sink[h] - m);
        float *oh = out + (size_t)h * dim;
        for (int i = 0; i < dim; i++) oh[i] = den > 0.0f ? di_bf16_round(acc[i] / den) : 0.0f;
    }
    free(acc);
    free(run_pv);
}
