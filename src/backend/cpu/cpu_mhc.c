/* CPU reference of the mHC hyper-connection ops (model-spec §2.0 hc_split_sinkhorn, §2.3).
 * For one token the stream X is [n_hc, D] bf16; hc_mixes turns it into the pre-mix (n_hc), the
 * post gains (n_hc) and the n_hc x n_hc combination matrix through sigmoids and a Sinkhorn
 * normalisation, all in fp32. */
#include "backend/cpu/cpu_ops.h"

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* mix: [n*(n+2)] fp32; scale: [3]; base: [n*(n+2)] -> pre [n], post [n], comb [n][n] */
void di_cpu_hc_split_sinkhorn(const float *mix, const float *scale, const float *base, int n,
                              int iters, float eps, float *pre, float *post, float *comb) {
    for (int i = 0; i < n; i++) {
        pre[i] = sigmoidf(mix[i] * scale[0] + base[i]) + eps;
        post[i] = 2.0f * sigmoidf(mix[n + i] * scale[1] + base[n + i]);
    }
    float *c = comb;
    for (int r = 0; r < n; r++) {
        float mx = -INFINITY;
        for (int k = 0; k < n; k++) {
            c[r * n + k] = mix[2 * n + r * n + k] * scale[2] + base[2 * n + r * n + k];
            mx = fmaxf(mx, c[r * n + k]);
        }
        float sum = 0.0f;
        for (int k = 0; k < n; k++) {
            c[r * n + k] = expf(c[r * n + k] - mx);
            sum += c[r * n + k];
        }
        for (int k = 0; k < n; k++) c[r * n + k] = c[r * n + k] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            for (int r = 0; r < n; r++) {
                float s = 0.0f;
                for (int k = 0; k < n; k++) s += c[r * n + k];
                for (int k = 0; k < n; k++) c[r * n + k] /= s + eps;
            }
        }
        for (int k = 0; k < n; k++) {
            float s = 0.0f;
            for (int r = 0; r < n; r++) s += c[r * n + k];
            for (int r = 0; r < n; r++) c[r * n + k] /= s + eps;
        }
    }
}

/* X: [n_hc, d] bf16 of one token; fn: [n*(n+2), n*d] f32 (unaligned ok) -> mix [n*(n+2)] */
void di_cpu_hc_mix_logits(const float *x, int n, int64_t d, const void *fn, float eps, float *mix) {
    const int64_t len = n * d;
    double ss = 0.0;
    for (int64_t i = 0; i < len; i++) ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)(ss / (double)len) + eps);
    const uint8_t *f = fn;
    for (int j = 0; j < n * (n + 2); j++) {
        double acc = 0.0;
        for (int64_t i = 0; i < len; i++) acc += (double)di_f32_load(f + 4 * (j * len + i)) * x[i];
        mix[j] = (float)acc * inv;
    }
}

/* out[d] = bf16(sum_i p[i] * X[i]) */
void di_cpu_hc_pre(const float *x, int n, int64_t d, const float *p, float *out) {
    for (int64_t k = 0; k < d; k++) {
        float s = 0.0f;
        for (int i = 0; i < n; i++) s += p[i] * x[i * d + k];
        out[k] = di_bf16_round(s);
    }
}

/* out[j] = bf16(post[j] * y + sum_i comb[i][j] * R[i]); out may not alias R */
void di_cpu_hc_post(const float *y, const float *r, int n, int64_t d, const float *post,
                    const float *comb, float *out) {
    for (int j = 0; j < n; j++) {
        for (int64_t k = 0; k < d; k++) {
            float s = 0.0f;
            for (int i = 0; i < n; i++) s += comb[i * n + j] * r[i * d + k];
            out[j * d + k] = di_bf16_round(post[j] * y[k] + s);
        }
    }
}
