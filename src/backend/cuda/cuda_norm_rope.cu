/* RMSNorm and RoPE on the GPU, twins of src/backend/cpu/cpu_norm_rope.c.
 *
 * RMSNorm: one thread block per row. The CPU takes sum(x^2) in double in index order and rounds
 * the mean once to fp32; here each thread sums a strided slice in double and a fixed tree of
 * warp shuffles adds the partial sums. For bf16 inputs each square is exact in double and the sum is exact whenever
 * the squares span fewer than ~37 binades, so both orders give the same double; otherwise they
 * can differ in the last double bit, which changes the fp32 mean only within 2^-29 of a rounding
 * boundary. Everything after the mean is the CPU's fp32 expression. A launch may run two norms
 * (norm_job: the attention's q and kv norms, one launch a layer less at decode).
 *
 * RoPE: one thread per rotated pair, the CPU's fp32 expression (di_dev_rope_pair). Bit-exact. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_ops.h"

#define NORM_THREADS 256

/* values a thread keeps in registers: rows up to NORM_THREADS * NORM_PER = 2,048 values (32, for
 * the model's 5,120-value rows, took 118 registers and ran slower: 6.3 -> 10.6 us a launch at
 * B = 1, a 4,096-token prefill +10 ms; docs/PERFORMANCE.md session 15) */
#define NORM_PER 8

/* PER > 0: the row's values (d <= NORM_THREADS * PER) and weights are loaded once, all at the
 * start, and kept in registers for the output (the q / kv / index norms of a decode step: ~3.8 ->
 * 3.4 us a launch at B = 1); PER == 0: any d, read twice. Same sums either way: thread i adds
 * values i, i + NORM_THREADS, ... in that order */
/* kv's epilogue (di_cuda_rmsnorm_rope_quant, PER > 0): rope_kernel's rotation of values off .. off + rot
 * of the row (a pair's partner is the neighbouring lane), then act_quant(y, 32) in place
 * (quant_group_kernel's: a warp's 32 values of one j are one block), on the values in registers */
struct norm_rope_quant {
    bool on;
    int off, rot;                     /* off even, off + rot <= d, d % 32 == 0 */
    const float *cos_rows, *sin_rows; /* [rows][rot / 2] */
};

/* one RMSNorm over rows of d values, x -> y [rows, d] with w [d] bf16 bits; yq / ysc (or NULL): y's
 * act_quant codes and scales too (PER > 0, d % 32 == 0); rq: the kv epilogue */
struct norm_job {
    const float *x;
    const uint16_t *w;
    int64_t d;
    float *y;
    uint8_t *yq;
    float *ysc;
    norm_rope_quant rq;
};

/* block b < m0: row b of job j0; else row b - m0 of job j1 (two norms of one layer in one launch) */
template <int PER>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(norm_job j0, norm_job j1, unsigned m0, float eps) {
    DI_PDL_BEGIN();
    __shared__ double warp_sum[NORM_THREADS / 32];
    const bool second = blockIdx.x >= m0; /* uniform over the block */
    const norm_job j = second ? j1 : j0;
    const int64_t row = blockIdx.x - (second ? m0 : 0u), d = j.d;
    const uint16_t *__restrict__ w = j.w;
    const norm_rope_quant rq = j.rq;
    uint8_t *__restrict__ yq = j.yq;
    float *__restrict__ ysc = j.ysc;
    const float *xr = j.x + row * d;
    double ss = 0.0;
    float xv[PER ? PER : 1], wv[PER ? PER : 1];
    if (PER) {
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const int64_t i = threadIdx.x + (int64_t)j * NORM_THREADS;
            xv[j] = i < d ? xr[i] : 0.0f;
            wv[j] = i < d ? di_dev_bf16_load(w + i) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < PER; j++)
            if (threadIdx.x + (int64_t)j * NORM_THREADS < d) ss += (double)xv[j] * xv[j];
    } else {
        for (int64_t i = threadIdx.x; i < d; i += NORM_THREADS) ss += (double)xr[i] * xr[i];
    }
    const float mean = (float)(di_dev_norm_block_sum(ss, warp_sum, NORM_THREADS / 32) / (double)d);
    const float inv = 1.0f / sqrtf(mean + eps);
    float *yr = j.y + row * d;
    if (PER) {
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const int64_t i = threadIdx.x + (int64_t)j * NORM_THREADS;
            float v = di_dev_bf16_round(wv[j] * (xv[j] * inv));
            if (rq.on && (i & ~31) < d) { /* uniform over the warp */
                const float partner = __shfl_xor_sync(0xffffffffu, v, 1);
                const int k = (int)i - rq.off;
                if (k >= 0 && k < rq.rot) {
                    const int half = rq.rot / 2, r = (int)row;
                    float a = (k & 1) ? partner : v, b = (k & 1) ? v : partner; /* the pair */
                    di_dev_rope_pair(a, b, rq.cos_rows[r * half + k / 2], rq.sin_rows[r * half + k / 2]);
                    v = (k & 1) ? b : a;
                }
                float a = fabsf(v);
                for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
                v = di_dev_act_value(v, di_dev_act_scale(a));
            }
            if (i < d) yr[i] = v;
            /* act_quant(y, 32) (d % 32 == 0): the warp's 32 values of this j are one block, all in or out */
            if (yq && (i & ~31) < d) {
                float sc;
                yq[row * d + i] = di_act_quant_e4m3_x1(v, &sc);
                if ((threadIdx.x & 31) == 0) ysc[row * (d / 32) + i / 32] = sc;
            }
        }
    } else {
        for (int64_t i = threadIdx.x; i < d; i += NORM_THREADS)
            yr[i] = di_dev_bf16_round(di_dev_bf16_load(w + i) * (xr[i] * inv));
    }
}

extern "C" void di_cuda_rmsnorm(const float *x, const uint16_t *w_bf16, int64_t m, int64_t d,
                                float eps, float *y, cudaStream_t s) {
    di_cuda_rmsnorm_q(x, w_bf16, m, d, eps, y, NULL, s);
}

extern "C" bool di_cuda_rmsnorm_q_supported(int64_t d) { return d % 32 == 0 && d <= NORM_THREADS * NORM_PER; }

/* the norm's other forms: none, or exactly the codes and their scales */
static bool codes_only(const di_cuda_act_forms *yq) {
    return !yq || (yq->q && yq->scale && !yq->bf16 && !yq->digits);
}

extern "C" void di_cuda_rmsnorm_q(const float *x, const uint16_t *w_bf16, int64_t m, int64_t d, float eps, float *y,
                                  const di_cuda_act_forms *yq, cudaStream_t s) {
    if (m <= 0) return;
    if (yq && (!di_cuda_rmsnorm_q_supported(d) || !codes_only(yq))) {
        fprintf(stderr, "di_cuda_rmsnorm_q: rows of %lld values (or forms other than the codes) not supported\n",
                (long long)d);
        abort();
    }
    const norm_job job = {x, w_bf16, d, y, yq ? yq->q : nullptr, yq ? yq->scale : nullptr, norm_rope_quant{}};
    if (d <= NORM_THREADS * NORM_PER)
        rmsnorm_kernel<NORM_PER><<<(unsigned)m, NORM_THREADS, 0, s>>>(job, job, (unsigned)m, eps);
    else
        rmsnorm_kernel<0><<<(unsigned)m, NORM_THREADS, 0, s>>>(job, job, (unsigned)m, eps);
    DI_CUDA_LAUNCHED();
}

/* di_cuda_rmsnorm_forms: rmsnorm_kernel<0>'s sums and values (d % 32 == 0), written with y's bf16
 * bits and act_quant(y, 32)'s values as bf16 -- act_quant_bf16_kernel's quads: a lane 4 values a
 * turn, 8 lanes a 32-value block (d / 4 % 8 == 0: a block's lanes all in or all out). A kernel of
 * its own: the forms' code inside rmsnorm_kernel made its other launches 8-17% slower (B = 256, H100) */
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_forms_kernel(const float *__restrict__ x, const uint16_t *__restrict__ w, int64_t d, float eps,
                     float *__restrict__ y, uint16_t *__restrict__ yb, uint16_t *__restrict__ yqb) {
    DI_PDL_BEGIN();
    __shared__ double warp_sum[NORM_THREADS / 32];
    const int64_t row = blockIdx.x, quads = d / 4;
    const float *xr = x + row * d;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += NORM_THREADS) ss += (double)xr[i] * xr[i];
    const float mean = (float)(di_dev_norm_block_sum(ss, warp_sum, NORM_THREADS / 32) / (double)d);
    const float inv = 1.0f / sqrtf(mean + eps);
    for (int64_t q0 = threadIdx.x & ~31; q0 < quads; q0 += NORM_THREADS) { /* warp-uniform */
        const int64_t q = q0 + (threadIdx.x & 31), k = 4 * q;
        const bool in = q < quads;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (in) {
            const float4 xv = *reinterpret_cast<const float4 *>(xr + k);
            v.x = di_dev_bf16_round(di_dev_bf16_load(w + k) * (xv.x * inv));
            v.y = di_dev_bf16_round(di_dev_bf16_load(w + k + 1) * (xv.y * inv));
            v.z = di_dev_bf16_round(di_dev_bf16_load(w + k + 2) * (xv.z * inv));
            v.w = di_dev_bf16_round(di_dev_bf16_load(w + k + 3) * (xv.w * inv));
        }
        float sc;
        const uint32_t codes = yqb ? di_act_quant_e4m3_x4(v, &sc) : 0u; /* every lane: the block max is a shuffle */
        if (!in) continue;
        *reinterpret_cast<float4 *>(y + row * d + k) = v;
        if (yb) *reinterpret_cast<uint2 *>(yb + row * d + k) = di_dev_bf16x4_bits(v);
        if (yqb) *reinterpret_cast<uint2 *>(yqb + row * d + k) = di_act_qbf16x4(codes, sc);
    }
}

extern "C" bool di_cuda_rmsnorm_forms_supported(int64_t d) { return d % 32 == 0; }

extern "C" void di_cuda_rmsnorm_forms(const float *x, const uint16_t *w_bf16, int64_t m, int64_t d, float eps, float *y,
                                      uint16_t *y_bf16, uint16_t *y_qbf16, cudaStream_t s) {
    if (m <= 0) return;
    if (!di_cuda_rmsnorm_forms_supported(d) || ((uintptr_t)x | (uintptr_t)y | (uintptr_t)y_bf16 | (uintptr_t)y_qbf16) % 16) {
        fprintf(stderr, "di_cuda_rmsnorm_forms: rows of %lld values (or unaligned rows) not supported\n", (long long)d);
        abort();
    }
    rmsnorm_forms_kernel<<<(unsigned)m, NORM_THREADS, 0, s>>>(x, w_bf16, d, eps, y, y_bf16, y_qbf16);
    DI_CUDA_LAUNCHED();
}

extern "C" bool di_cuda_rmsnorm_rope_quant_supported(int64_t d, int64_t offset, int rot_dim) {
    return d % 32 == 0 && d <= NORM_THREADS * NORM_PER && offset % 2 == 0 && rot_dim % 2 == 0 && offset >= 0 &&
           offset + rot_dim <= d;
}

extern "C" void di_cuda_rmsnorm_rope_quant(const float *x, const uint16_t *w_bf16, int64_t m, int64_t d, float eps,
                                           int64_t offset, int rot_dim, const float *cos_rows, const float *sin_rows,
                                           float *y, cudaStream_t s) {
    if (m <= 0) return;
    if (!di_cuda_rmsnorm_rope_quant_supported(d, offset, rot_dim)) {
        fprintf(stderr, "di_cuda_rmsnorm_rope_quant: d = %lld, rotation %d at %lld not supported\n", (long long)d,
                rot_dim, (long long)offset);
        abort();
    }
    const norm_job job = {x, w_bf16, d, y, nullptr, nullptr, {true, (int)offset, rot_dim, cos_rows, sin_rows}};
    rmsnorm_kernel<NORM_PER><<<(unsigned)m, NORM_THREADS, 0, s>>>(job, job, (unsigned)m, eps);
    DI_CUDA_LAUNCHED();
}

extern "C" void di_cuda_rmsnorm_q_kv(int64_t m, float eps, const float *xq, const uint16_t *wq, int64_t dq, float *yq,
                                     const di_cuda_act_forms *fq, const float *xkv, const uint16_t *wkv, int64_t dkv,
                                     int64_t offset, int rot_dim, const float *cos_rows, const float *sin_rows,
                                     float *ykv, cudaStream_t s) {
    if (m <= 0) return;
    if (!di_cuda_rmsnorm_q_supported(dq) || !di_cuda_rmsnorm_rope_quant_supported(dkv, offset, rot_dim) ||
        !codes_only(fq)) {
        fprintf(stderr, "di_cuda_rmsnorm_q_kv: q rows of %lld, kv rows of %lld (rotation %d at %lld) not supported\n",
                (long long)dq, (long long)dkv, rot_dim, (long long)offset);
        abort();
    }
    const norm_job q = {xq, wq, dq, yq, fq ? fq->q : nullptr, fq ? fq->scale : nullptr, norm_rope_quant{}};
    const norm_job kv = {xkv, wkv, dkv, ykv, nullptr, nullptr, {true, (int)offset, rot_dim, cos_rows, sin_rows}};
    rmsnorm_kernel<NORM_PER><<<(unsigned)(2 * m), NORM_THREADS, 0, s>>>(q, kv, (unsigned)m, eps);
    DI_CUDA_LAUNCHED();
}

__global__ void rope_kernel(float *x, int64_t rows, int64_t n_vec, int64_t stride, int64_t offset,
                            int half, const float *__restrict__ cos_rows,
                            const float *__restrict__ sin_rows, bool inverse) {
    DI_PDL_BEGIN();
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * n_vec * half) return;
    const int i = (int)(idx % half);
    const int64_t v = idx / half, r = v / n_vec;
    float *p = x + v * stride + offset;
    float a = p[2 * i], b = p[2 * i + 1];
    di_dev_rope_pair(a, b, cos_rows[r * half + i], inverse ? -sin_rows[r * half + i] : sin_rows[r * half + i]);
    p[2 * i] = a;
    p[2 * i + 1] = b;
}

extern "C" void di_cuda_rope(float *x, int64_t rows, int64_t n_vec, int64_t stride, int64_t offset,
                             int rot_dim, const float *cos_rows, const float *sin_rows, bool inverse,
                             cudaStream_t s) {
    const int64_t n = rows * n_vec * (rot_dim / 2);
    if (n <= 0) return;
    rope_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, rows, n_vec, stride, offset, rot_dim / 2,
                                                           cos_rows, sin_rows, inverse);
    DI_CUDA_LAUNCHED();
}
