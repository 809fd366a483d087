/* CPU references of the row-level selection and gating steps of the forward pass (called by
 * src/forward/indexer.c, moe.c and engram.c, and the references of the CUDA parity tests): top-k
 * with the lower position on exact ties, MoE routing, the candidate pool's block maxima, the
 * Engram gate. */
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"

/* Positions of the k highest scores, ascending; -inf ones -> -1. Exact ties go to the lower
 * position. torch.topk leaves tie order unspecified: at the first selection difference of the
 * fixture prompts (each an exact bf16 tie) the reference kept the higher position in some and the
 * lower in others; over whole runs the lower-position rule is the closer one (fixture README). */
void di_cpu_topk_select(const float *score, int64_t n, int k, int32_t *out) {
    uint8_t *taken = calloc((size_t)(n ? n : 1), 1);
    int got = 0;
    for (; got < k; got++) {
        int64_t best = -1;
        for (int64_t t = 0; t < n; t++)
            if (!taken[t] && score[t] > -INFINITY && (best < 0 || score[t] > score[best])) best = t;
        if (best < 0) break;
        taken[best] = 1;
    }
    int j = 0;
    for (int64_t t = 0; t < n; t++)
        if (taken[t]) out[j++] = (int32_t)t;
    for (; j < k; j++) out[j] = -1;
    free(taken);
}

void di_cpu_moe_route(const float *logits, const float *bias, int E, int k, float scale, int32_t *expert,
                      float *weight) {
    float score[DI_CPU_MOE_MAX_E], biased[DI_CPU_MOE_MAX_E];
    for (int e = 0; e < E; e++) {
        float z = logits[e];
        float sp = z > 20.0f ? z : log1pf(expf(z));
        score[e] = sqrtf(sp);
        biased[e] = score[e] + bias[e];
    }
    uint8_t taken[DI_CPU_MOE_MAX_E] = {0};
    float sum = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || biased[e] > biased[best])) best = e;
        taken[best] = 1;
        expert[j] = best;
        weight[j] = score[best];
        sum += score[best];
    }
    for (int j = 0; j < k; j++) weight[j] = weight[j] / (sum + 1e-20f) * scale;
}

void di_cpu_block_max(const float *score, int64_t P, int bs, int64_t visible, float *bscore) {
    const int64_t nb = (P + bs - 1) / bs;
    for (int64_t b = 0; b < nb; b++) {
        float mx = -INFINITY;
        for (int64_t t = b * bs; t < (b + 1) * bs && t < P; t++) mx = fmaxf(mx, score[t]);
        bscore[b] = mx;
    }
    if (visible > 0) bscore[(visible - 1) / bs] = INFINITY;
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

void di_cpu_engram_gate(float *X, const float *kv, const float *qk, int64_t R, int n, int64_t D, float eps,
                        float inv_sqrt_d) {
    const int64_t KV = (int64_t)(n + 1) * D;
    for (int64_t r = 0; r < R; r++) {
        const float *value = kv + r * KV + n * D;
        for (int i = 0; i < n; i++) {
            float *x = X + (r * n + i) * D;
            const float *key = kv + r * KV + i * D, *w = qk + i * D;
            double sx = 0.0, sk = 0.0, dot = 0.0;
            for (int64_t d = 0; d < D; d++) {
                sx += (double)x[d] * x[d];
                sk += (double)key[d] * key[d];
                dot += (double)(x[d] * w[d] * key[d]);
            }
            float rx = 1.0f / sqrtf((float)(sx / (double)D) + eps);
            float rk = 1.0f / sqrtf((float)(sk / (double)D) + eps);
            float g = (float)dot * (rx * rk) * inv_sqrt_d;
            g = sigmoidf(copysignf(sqrtf(fmaxf(fabsf(g), 1e-6f)), g));
            for (int64_t d = 0; d < D; d++) x[d] = di_bf16_round(x[d] + g * value[d]);
        }
    }
}
