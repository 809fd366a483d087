/* Device-side number formats and helpers shared by the CUDA kernels (internal header).
 *
 * Every helper here is the bit-for-bit twin of a CPU reference function in base/numerics.h or of
 * the C library call the reference makes, so kernels that follow the reference's order of
 * operations give identical bits. The library is built with -fmad=false (no mul+add contraction),
 * matching the CPU reference's ISO C build, which never fuses.
 *
 * expf: the CPU reference calls glibc's expf, which is not correctly rounded (about 1 result in
 * 13,000 differs from the correctly rounded one). di_dev_expf is the same algorithm (32-entry
 * 2^(i/32) table, degree-3 polynomial in double, one final rounding), written with explicitly
 * rounded double operations. On x86-64 with FMA, glibc runs its FMA build (ifunc), whose
 * compiler fused the argument reduction: kd = fma(InvLn2N, x, Shift), r = fma(InvLn2N, x, -kd).
 * This twin does the same; it agrees with glibc 2.36's expf on every float in (-104, 89) (the
 * unfused reduction differs on 2 of them). tools/cuda/check_expf.c repeats the check on the
 * machine that runs the CPU reference. */
#ifndef DI_CUDA_COMMON_CUH
#define DI_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_check.cuh" /* DI_CUDA_CHECK */
#include "backend/cuda/cuda_ops.h"
extern "C" {
#include "forward/kv_record.h" /* the compressed KV record's layout */
}

/* Checks the launch just made (configuration errors surface here, faults at the next sync). */
#define DI_CUDA_LAUNCHED() DI_CUDA_CHECK(cudaGetLastError())

/* Programmatic dependent launch (gpu_graph.c, DEEPINFER_GPU_PDL): a kernel reached through a
 * programmatic graph edge may be launched before its predecessor has finished; griddepcontrol.wait
 * holds its threads until every prerequisite grid has completed and its memory is visible (for a
 * kernel reached through a plain edge, or launched directly, it returns at once). Every kernel of
 * the forward pass calls DI_PDL_BEGIN() first, before any load or store (but the GEMV twins'
 * PRE form, cuda_linear_gemv.cu, which loads only its weights first), so the edges that
 * gpu_graph.c makes programmatic change nothing that a kernel reads or writes. No kernel calls
 * griddepcontrol.launch_dependents: a dependent is launched as its predecessor's blocks exit
 * (session 46, H100: calling it right after the wait let the dependents' blocks sit resident
 * through their predecessor's run -- B = 1 +0.25 ms, B = 256 +1 ms a step against plain edges;
 * without it B = 1 -0.26 ms, B = 64 -0.9%, B = 256 -0.6%). */
#ifdef DI_CUDA_EMU_H
#define DI_PDL_BEGIN() ((void)0)
#else
#define DI_PDL_BEGIN() asm volatile("griddepcontrol.wait;" ::: "memory")
#endif

/* The most blocks a grid's y (and z) dimension takes: launches over more rows go in pieces. */
#define DI_CUDA_MAX_GRID_Y 65535

/* the current device's multiprocessor count, asked once (launch heuristics that fill the GPU) */
static inline int di_cuda_sm_count(void) {
    static int sms;
    if (!sms) {
        int dev;
        DI_CUDA_CHECK(cudaGetDevice(&dev));
        DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    return sms;
}

/* ---- bf16 (round to nearest even, NaN kept), as di_f32_to_bf16 ---- */
static __device__ __forceinline__ float di_dev_bf16_round(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(((u >> 16) | 0x40u) << 16);
    u += 0x7fffu + ((u >> 16) & 1u);
    return __uint_as_float(u & 0xffff0000u);
}
/* the same rounding as the 16 bits of a bf16 */
static __device__ __forceinline__ uint32_t di_dev_bf16_bits(float f) { return __float_as_uint(di_dev_bf16_round(f)) >> 16; }
/* four values' bf16 bits, in memory order (an 8-byte store) */
static __device__ __forceinline__ uint2 di_dev_bf16x4_bits(float4 v) {
    return make_uint2(di_dev_bf16_bits(v.x) | di_dev_bf16_bits(v.y) << 16, di_dev_bf16_bits(v.z) | di_dev_bf16_bits(v.w) << 16);
}
static __device__ __forceinline__ float di_dev_bf16_load(const uint16_t *p) {
    return __uint_as_float((uint32_t)*p << 16);
}
/* four bf16 values (8 bytes, the lowest address in u.x's low half) as floats */
static __device__ __forceinline__ float4 di_dev_bf16x4_widen(uint2 u) {
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}
/* four bf16 values at p (8-byte aligned) as floats, the lowest address first */
static __device__ __forceinline__ float4 di_dev_bf16x4_load(const uint16_t *p) {
    return di_dev_bf16x4_widen(*reinterpret_cast<const uint2 *>(p));
}
/* two floats that are bf16 values (exactly) as bf16x2, lo in the low half: their high halves */
static __device__ __forceinline__ uint32_t di_bf16x2_of_exact(float lo, float hi) {
    return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
}
/* four floats that are bf16 values (di_dev_bf16_round's results) as their bits, in memory order: the
 * high halves, no second rounding (an 8-byte store) */
static __device__ __forceinline__ uint2 di_dev_bf16x4_of_exact(float4 v) {
    return make_uint2(di_bf16x2_of_exact(v.x, v.y), di_bf16x2_of_exact(v.z, v.w));
}

/* ---- e8m0 scale byte ---- */
static __device__ __forceinline__ float di_dev_e8m0(uint8_t b) {
    /* 2^(b - 127) = b << 23; 0 is 2^-127 (0x00400000) and 255 NaN (0x7fc00000): both add bit 22.
     * Branch-free: the decode-sized GEMMs do two per K block and lane */
    return __uint_as_float((uint32_t)b << 23 | ((uint8_t)(b + 1) <= 1 ? 0x00400000u : 0u));
}

/* ---- minifloat rounding (di_minifloat_rne): x / quantum is exact, rintf rounds half to even ---- */
static __device__ __forceinline__ float di_dev_minifloat_rne(float x, int mant_bits, int min_exp) {
    if (x == 0.0f || !isfinite(x)) return x;
    int e;
    frexpf(x, &e);
    int ex = e - 1;
    if (ex < min_exp) ex = min_exp;
    float quantum = ldexpf(1.0f, ex - mant_bits);
    return rintf(x / quantum) * quantum;
}
static __device__ __forceinline__ float di_dev_e4m3_rne(float x) { return di_dev_minifloat_rne(x, 3, -6); }
static __device__ __forceinline__ float di_dev_e2m1_rne(float x) { return di_dev_minifloat_rne(x, 1, 0); }
/* values c .. c + 3 of a row (c % 4 == 0), zeros for a NULL row: one float4 load where the row is
 * 16-byte aligned, four scalar loads where it is not (the attention kernels' KV and q staging) */
static __device__ __forceinline__ float4 di_dev_load_row4(const float *row, int c) {
    if (!row) return float4{0.0f, 0.0f, 0.0f, 0.0f};
    if (((uintptr_t)row & 15) == 0) return *(const float4 *)(row + c);
    return float4{row[c], row[c + 1], row[c + 2], row[c + 3]};
}
/* act_quant's lane i (8 lanes a 32-value block, 4 values a lane): its values in x [n_blocks * 32]
 * (x + 4 i), or, with a row list, in row i / (8 row_blocks) of rows (rows of row_blocks blocks
 * each, anywhere: the MoE's gather of token rows into expert order) */
static __device__ __forceinline__ const float *di_dev_act_lane(const float *x, const float *const *rows,
                                                               int64_t row_blocks, int64_t i) {
    if (!rows) return x + 4 * i;
    const int64_t per_row = 8 * row_blocks;
    return rows[i / per_row] + 4 * (i % per_row);
}

/* The group of a block of a grouped launch (the decode twins, cuda_linear_gemv*.cu; the tensor-core
 * GEMMs through mm_group_select): slot `slot` (blockIdx.z, or its group part under a K split)
 * through the active list (or the group itself), its first row r0 and its rows M from the row
 * offsets, the block's first row *m0 (its row tile's, set by the caller); or, with a row-tile list
 * (tiles non-NULL, di_group_tiles: [cap][4] ints), entry `slot`'s group, first row, rows and the
 * tile's first row within the group, written to *m0. False (the block has nothing to do) when the
 * slot has no group (an entry past the list's tiles: group -1) or *m0 is past the group's rows.
 * Uniform over the block. */
static __device__ __forceinline__ bool di_dev_block_group(const int *row_off, const int *active, const int *tiles,
                                                          int slot, int64_t *m0, int *gi, int *r0, int64_t *M) {
    if (tiles) {
        const int4 e = __ldg(reinterpret_cast<const int4 *>(tiles) + slot);
        *gi = e.x, *r0 = e.y, *M = e.z, *m0 = e.w;
        return e.x >= 0;
    }
    *gi = active ? active[slot] : slot;
    if (*gi < 0) return false;
    *r0 = row_off[*gi];
    *M = row_off[*gi + 1] - *r0;
    return *m0 < *M;
}

/* A run of up to 64 list entries (cnt of them at lr; NULL = no entry) with its live entries moved
 * to rows[0 .. live), in list order, by one warp (every lane calls); returns live. Where a list
 * has its NULLs (they move with a prefill's chunking) then changes no sum of the attention
 * kernels. rows[live ..] are left as they were. */
static __device__ __forceinline__ int di_dev_pack_live_run(const float *const *lr, int cnt, int lane, const float **rows) {
    const float *e0 = lane < cnt ? lr[lane] : nullptr, *e1 = lane + 32 < cnt ? lr[lane + 32] : nullptr;
    const unsigned b0 = __ballot_sync(0xffffffffu, e0 != nullptr), b1 = __ballot_sync(0xffffffffu, e1 != nullptr);
    const unsigned below = (1u << lane) - 1u;
    const int n0 = __popc(b0);
    if (e0) rows[__popc(b0 & below)] = e0;
    if (e1) rows[n0 + __popc(b1 & below)] = e1;
    return n0 + __popc(b1);
}

static __device__ __forceinline__ float di_dev_clampf(float x, float lo, float hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

/* fast_round_scale: 2^(exponent + (mantissa != 0)) from the fp32 bits (di_pow2_ceil) */
static __device__ __forceinline__ float di_dev_pow2_ceil(float v) {
    uint32_t u = __float_as_uint(v);
    int e = (int)((u >> 23) & 0xffu) - 127 + ((u & 0x7fffffu) != 0);
    return ldexpf(1.0f, e);
}
/* act_quant's block scale from the block's amax, and a value after the quantisation (fake quant: the
 * e4m3 value times the scale, as bf16) -- the CPU's act_quant expressions, for every kernel that quantises */
static __device__ __forceinline__ float di_dev_act_scale(float amax) {
    amax = fmaxf(amax, 1e-4f);
    return di_dev_pow2_ceil(amax * (1.0f / 448.0f));
}
static __device__ __forceinline__ float di_dev_act_value(float x, float s) {
    return di_dev_bf16_round(di_dev_e4m3_rne(di_dev_clampf(x / s, -448.0f, 448.0f)) * s);
}

/* RoPE of one pair, the CPU's fp32 expression (two products, one add / sub, each result rounded
 * to bf16; no contraction, -fmad=false): (a, b) rotated by the angle of cosine c and sine sn (sn
 * negated for the inverse). rope_kernel, the kv norm's epilogue and the attention kernels' folded
 * RoPE all use it. */
static __device__ __forceinline__ void di_dev_rope_pair(float &a, float &b, float c, float sn) {
    const float a0 = a;
    a = di_dev_bf16_round(a0 * c - b * sn);
    b = di_dev_bf16_round(a0 * sn + b * c);
}
/* rope (NULL or cos NULL: none) for a launch of the rows from r0 on */
static inline di_attn_rope di_attn_rope_rows(const di_attn_rope *rope, int64_t r0) {
    di_attn_rope r = {NULL, NULL, 0, 0};
    if (rope && rope->cos) {
        r = *rope;
        r.cos += r0 * (rope->rot / 2);
        r.sin += r0 * (rope->rot / 2);
    }
    return r;
}
/* the rotation of values col .. col + 3 of a row of heads of dim `dim` (col % 4 == 0) for query row
 * `row`: its two pairs' cosines and sines (negated for the inverse), `on` false outside rope's span.
 * A loop whose column stays put loads them once (di_dev_rope4_apply per row). */
struct di_rope4_coef {
    float c0, s0, c1, s1;
    bool on;
};
static __device__ __forceinline__ di_rope4_coef di_dev_rope4_coef(int col, int dim, const di_attn_rope &rope,
                                                                  int64_t row, bool inverse) {
    const int k = col % dim - rope.off;
    if (!rope.cos || k < 0 || k >= rope.rot) return di_rope4_coef{0.0f, 0.0f, 0.0f, 0.0f, false};
    const int64_t i = row * (rope.rot / 2) + k / 2;
    const float s0 = rope.sin[i], s1 = rope.sin[i + 1];
    return di_rope4_coef{rope.cos[i], inverse ? -s0 : s0, rope.cos[i + 1], inverse ? -s1 : s1, true};
}
static __device__ __forceinline__ void di_dev_rope4_apply(float4 &v, const di_rope4_coef &r) {
    if (!r.on) return;
    di_dev_rope_pair(v.x, v.y, r.c0, r.s0);
    di_dev_rope_pair(v.z, v.w, r.c1, r.s1);
}
/* e4m3 code -> the value times 2^9 as an integer (|v| <= 448 * 512): exact integer arithmetic
 * for the GEMM block sums. NaN codes (0x7f/0xff) never occur in checkpoints; they map to 0. */
static __device__ __forceinline__ int di_dev_e4m3_to_int512(uint32_t b) {
    int ex = (b >> 3) & 15, man = b & 7;
    int mag = ex == 0 ? man : (8 + man) << (ex - 1);
    if (ex == 15 && man == 7) mag = 0;
    return (b & 0x80) ? -mag : mag;
}
/* e4m3 code -> its float, as di_e4m3_to_f32 (the CPU's table): 0x80 is -0, 0x7f/0xff are NaN */
static __device__ __forceinline__ float di_dev_e4m3_f32(uint32_t b) {
    const int ex = (b >> 3) & 15, man = b & 7;
    float v = (float)(ex == 0 ? man : (8 + man) << (ex - 1)) * 0x1p-9f; /* exact */
    if (ex == 15 && man == 7) v = __uint_as_float(0x7fc00000u);
    return (b & 0x80) ? -v : v;
}
/* e4m3 grid value (already rounded, |q| <= 448) -> q * 512 as an integer (exact) */
static __device__ __forceinline__ int di_dev_q_to_int512(float q) { return (int)(q * 512.0f); }

/* e2m1 nibble -> value times 2 as an integer */
static __device__ __forceinline__ int di_dev_e2m1_to_int2(uint32_t nib) {
    int e = (nib >> 1) & 3, man = nib & 1;
    int m = e == 0 ? man : (2 + man) << (e - 1); /* 0 1 2 3 4 6 8 12 */
    return (nib & 8) ? -m : m;
}

/* ---- glibc's expf, operation for operation (see the file comment) ---- */
__device__ static const unsigned long long di_dev_exp2f_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull};

static __device__ __forceinline__ float di_dev_expf(float x) {
    if (isnan(x)) return x + x;
    if (x > 0x1.62e42ep6f) return __int_as_float(0x7f800000);
    if (x < -0x1.9fe368p6f) return 0.0f;
    const double inv_ln2_n = 0x1.71547652b82fep+0 * 32.0, shift = 0x1.8p+52;
    const double c0 = 0x1.c6af84b912394p-5 / 32.0 / 32.0 / 32.0;
    const double c1 = 0x1.ebfce50fac4f3p-3 / 32.0 / 32.0;
    const double c2 = 0x1.62e42ff0c52d6p-1 / 32.0;
    /* the argument reduction fused, as in glibc's FMA build (see the file comment) */
    double kd = __fma_rn(inv_ln2_n, (double)x, shift);
    unsigned long long ki = (unsigned long long)__double_as_longlong(kd);
    kd = __dsub_rn(kd, shift);
    double r = __fma_rn(inv_ln2_n, (double)x, -kd);
    unsigned long long t = di_dev_exp2f_tab[ki & 31] + (ki << 47);
    double s = __longlong_as_double((long long)t);
    double p = __dadd_rn(__dmul_rn(c0, r), c1);
    double r2 = __dmul_rn(r, r);
    double y = __dadd_rn(__dmul_rn(c2, r), 1.0);
    y = __dadd_rn(__dmul_rn(p, r2), y);
    y = __dmul_rn(y, s);
    return (float)y;
}

/* one SwiGLU output: bf16(silu(min(g, L)) * clamp(u, -L, L) [* w]) (wt: whether the row weight w
 * applies; moe.c expert_ffn) */
static __device__ __forceinline__ float di_dev_swiglu(float g, float u, float lim, bool wt, float w) {
    const float gv = fminf(g, lim), uv = di_dev_clampf(u, -lim, lim);
    float v = gv / (1.0f + di_dev_expf(-gv)) * uv;
    if (wt) v *= w;
    return di_dev_bf16_round(v);
}
/* di_dev_swiglu of four values of one row (weight w where wt) */
static __device__ __forceinline__ float4 di_dev_swiglu4(float4 g, float4 u, float lim, bool wt, float w) {
    return make_float4(di_dev_swiglu(g.x, u.x, lim, wt, w), di_dev_swiglu(g.y, u.y, lim, wt, w),
                       di_dev_swiglu(g.z, u.z, lim, wt, w), di_dev_swiglu(g.w, u.w, lim, wt, w));
}

/* RMSNorm's block sum of the double partial sums of the first `warps` warps (the block's other threads
 * only pass the barriers), a fixed tree: butterflies within each warp, then warp 0 over the warps'
 * sums. warp_sum: [warps] shared doubles. Every thread gets the total. */
static __device__ __forceinline__ double di_dev_norm_block_sum(double ss, double *warp_sum, int warps) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (warp < warps) {
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) warp_sum[warp] = ss;
    }
    __syncthreads();
    if (warp == 0) {
        ss = lane < warps ? warp_sum[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) warp_sum[0] = ss;
    }
    __syncthreads();
    return warp_sum[0];
}

static __device__ __forceinline__ float di_dev_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* f(j, src[j]) for j = start, start + step, ... < end, in that order, LOADS loads in flight a
 * thread: a pass over a row by one block is bound by its loads' latency, not by bandwidth, with
 * one load at a time (the sampling kernels). */
template <int LOADS = 8, typename T, typename F>
static __device__ __forceinline__ void di_dev_for_each_loaded(const T *__restrict__ src, int64_t start, int64_t step,
                                                              int64_t end, F f) {
    for (int64_t j0 = start; j0 < end; j0 += LOADS * step) {
        T v[LOADS];
#pragma unroll
        for (int u = 0; u < LOADS; u++) v[u] = j0 + u * step < end ? src[j0 + u * step] : T();
#pragma unroll
        for (int u = 0; u < LOADS; u++)
            if (j0 + u * step < end) f(j0 + u * step, v[u]);
    }
}

/* the block's largest float, in every thread: warp butterflies, then each thread over the `warps`
 * warps' maxima (warp_f: [warps] shared floats, reusable once this returns) */
static __device__ __forceinline__ float di_dev_block_max(float v, float *warp_f, int warps) {
    v = di_dev_warp_max(v);
    if ((threadIdx.x & 31) == 0) warp_f[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = warp_f[0];
    for (int w = 1; w < warps; w++) m = fmaxf(m, warp_f[w]);
    __syncthreads();
    return m;
}

/* the warp's largest unsigned 64-bit value, in every lane (the sampling kernels' keys) */
static __device__ __forceinline__ uint64_t di_dev_warp_max_u64(uint64_t v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint64_t w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

#endif
