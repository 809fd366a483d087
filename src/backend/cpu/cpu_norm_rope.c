/* CPU reference of RMSNorm and RoPE (model-spec §2.0, §1.5).
 * RMSNorm: y = bf16(w * (x * rsqrt(mean(x^2) + eps))) with fp32 math and the mean taken exactly.
 * RoPE: interleaved pairs (x[2i], x[2i+1]) rotated by (cos, sin) of the table row for the
 * position, fp32 math, bf16 result; `inverse` negates sin (used on the attention output). */
#include "backend/cpu/cpu_ops.h"

void di_cpu_rmsnorm(const float *x, const void *w_bf16, int64_t m, int64_t d, float eps, float *y) {
    const uint8_t *w = w_bf16;
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * d;
        double ss = 0.0;
        for (int64_t i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
        float mean = (float)(ss / (double)d);
        float inv = 1.0f / sqrtf(mean + eps);
        for (int64_t i = 0; i < d; i++) y[r * d + i] = di_bf16_round(di_bf16_load(w + 2 * i) * (xr[i] * inv));
    }
}

void di_cpu_rope(float *x, int64_t n_vec, int64_t stride, int64_t offset, int rot_dim,
                 const float *cos_row, const float *sin_row, bool inverse) {
    for (int64_t v = 0; v < n_vec; v++) {
        float *p = x + v * stride + offset;
        for (int i = 0; i < rot_dim / 2; i++) {
            float a = p[2 * i], b = p[2 * i + 1];
            float c = cos_row[i], s = inverse ? -sin_row[i] : sin_row[i];
            p[2 * i] = di_bf16_round(a * c - b * s);
            p[2 * i + 1] = di_bf16_round(a * s + b * c);
        }
    }
}
