/* Warp-level tensor-core and async-copy primitives for sm_90 kernels (internal header): FP8 e4m3
 * mma.sync m16n8k32 with fp32 accumulation (and the same sum as two f16 m16n8k16 mmas), its int8
 * form with exact int32 sums, cp.async 16/4-byte copies into shared memory with zero fill, and the
 * e2m1 -> e4m3 (and -> int8) widening of packed FP4 weights.
 *
 * Fragment layout of mma.m16n8k32 with 8-bit inputs (PTX ISA "Matrix Fragments for mma.m16n8k32"),
 * lane = 4 g + t:
 *   A 16x32 row-major: a0 row g, k 4t..4t+3 | a1 row g+8, k 4t.. | a2 row g, k 16+4t.. | a3 row g+8, k 16+4t..
 *   B 32x8 col-major:  b0 col g, k 4t..4t+3 | b1 col g, k 16+4t..
 *   C 16x8 fp32:       c0, c1 row g, cols 2t, 2t+1 | c2, c3 row g+8, cols 2t, 2t+1
 * (lowest k in the lowest byte of each register).
 *
 * Under the CPU emulator (tools/cuda/emu, which defines DI_CUDA_EMU_H) the same functions come
 * from tools/cuda/emu/include/cuda_emu_mma.h: the layout above, computed exactly in double. */
#ifndef DI_CUDA_MMA_CUH
#define DI_CUDA_MMA_CUH

#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"

#ifdef DI_CUDA_EMU_H
#include "cuda_emu_mma.h"
#else

/* d = A(16x32 e4m3) * B(32x8 e4m3), accumulator input zero */
static __device__ __forceinline__ void di_mma_e4m3_16832(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.0f));
}

/* d = A(16x32 s8) * B(32x8 s8), int32 sums (exact), accumulator input zero: the e4m3 fragment
 * layout with signed bytes */
static __device__ __forceinline__ void di_mma_s8_16832(int d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
}

/* d += A(16x32 s8) * B(32x8 s8), int32 (exact while the sums fit): di_mma_s8_16832 accumulating */
static __device__ __forceinline__ void di_mma_s8_16832_acc(int d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* fp64 m8n8k4: d = A (8x4) B (4x8) + c. Lane 4g + t holds a = A[g][t], b = B[t][g] and
 * d[0 / 1] = D[g][2t / 2t + 1] */
static __device__ __forceinline__ void di_mma_f64_884(double d[2], double a, double b, const double c[2]) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%4,%5};\n"
                 : "=d"(d[0]), "=d"(d[1])
                 : "d"(a), "d"(b), "d"(c[0]), "d"(c[1]));
}

/* fp64 m16n8k16 (sm_90): d = A (16x16) B (16x8) + c. Lane 4g + t holds a[i] = A[g + 8 (i % 2)][t + 4 (i / 2)],
 * b[i] = B[t + 4 i][g] and d[i] = D[g + 8 (i / 2)][2t + i % 2] (tools/cuda/probe_dmma.cu checks the layout).
 * One instruction does the flops of eight m8n8k4 (docs/PERFORMANCE.md, session 56: the rates of the two) */
static __device__ __forceinline__ void di_mma_f64_16816(double d[4], const double a[8], const double b[4],
                                                        const double c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7,%8,%9,%10,%11}, "
                 "{%12,%13,%14,%15}, {%16,%17,%18,%19};\n"
                 : "=d"(d[0]), "=d"(d[1]), "=d"(d[2]), "=d"(d[3])
                 : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]),
                   "d"(b[1]), "d"(b[2]), "d"(b[3]), "d"(c[0]), "d"(c[1]), "d"(c[2]), "d"(c[3]));
}

/* d = A(16x16 bf16) * B(16x8 bf16) + c, fp32 accumulation; fragments as for k32 with 2-byte
 * elements: a0 row g, k 2t..2t+1 | a1 row g+8 | a2 row g, k 8+2t.. | a3 row g+8, k 8+2t..;
 * b0 col g, k 2t..2t+1 | b1 col g, k 8+2t.. */
static __device__ __forceinline__ void di_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                         const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}

/* f16 m16n8k16 (fp32 accumulation): the bf16 fragment layout */
static __device__ __forceinline__ void di_mma_f16_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                        const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}

/* ldmatrix: four 8x8 matrices of 16-bit elements from shared memory; lanes 8m..8m+7 give the row
 * addresses (16 bytes each, 16-byte aligned) of matrix m. Plain: lane 4g + t receives row g,
 * elements 2t, 2t+1 of each matrix in r[m] (the A / B fragment layout of mma.m16n8k16 when the
 * matrix rows run along k). .trans: lane 4g + t receives rows 2t, 2t+1 of column g (the B layout
 * when the stored rows run along k, as V [entry][dim] in P V). Lower element in the low half. */
static __device__ __forceinline__ void di_ldmatrix_x4(uint32_t r[4], const void *row) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}
static __device__ __forceinline__ void di_ldmatrix_x4_trans(uint32_t r[4], const void *row) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}

/* two e4m3 codes (lower k in the low byte) -> the same two values as f16 (low half first): exact */
static __device__ __forceinline__ uint32_t di_e4m3x2_to_f16x2(uint16_t v) {
    uint32_t h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(v));
    return h2;
}

/* four e4m3 codes (lowest k in the lowest byte) -> the same values as f16 pairs: lo = bytes 0, 1,
 * hi = bytes 2, 3 (one conversion each, reading the halves in place) */
static __device__ __forceinline__ void di_e4m3x4_to_f16x4(uint32_t v, uint32_t *lo, uint32_t *hi) {
    asm("{.reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;}\n"
        : "=r"(*lo), "=r"(*hi)
        : "r"(v));
}

/* the same two values as fp32, through f16: exact */
static __device__ __forceinline__ void di_e4m3x2_to_f32x2(uint16_t v, float *lo, float *hi) {
    asm("{.reg .f16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;}\n"
        : "=f"(*lo), "=f"(*hi)
        : "r"(di_e4m3x2_to_f16x2(v)));
}

/* the same two values as bf16 (low half first), through f16: exact */
static __device__ __forceinline__ uint32_t di_e4m3x2_to_bf16x2(uint16_t v) {
    uint32_t r;
    float lo, hi;
    di_e4m3x2_to_f32x2(v, &lo, &hi);
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* 16 bytes global -> shared; bytes past `valid` (0 or 16) are zero-filled */
static __device__ __forceinline__ void di_cp_async16(void *smem, const void *gmem, bool valid) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
/* 4 bytes global -> shared, zero-filled when !valid */
static __device__ __forceinline__ void di_cp_async4(void *smem, const void *gmem, bool valid) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 4 : 0));
}
static __device__ __forceinline__ void di_cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
/* wait until at most N committed groups are still in flight */
template <int N>
static __device__ __forceinline__ void di_cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif

/* The block sum of di_mma_e4m3_16832 from f16 operands, as sm_90 computes that instruction (it has
 * no e4m3 mma: ptxas widens the operands to f16 and issues two m16n8k16 mmas, the first over the
 * k % 4 < 2 halves with zero accumulator, the second over the others accumulating, then adds the
 * zero accumulator input): lo / hi are the fragments' low / high 16-bit halves widened to f16 --
 * A lo[r] = a[r]'s k 4t, 4t + 1 (or 16 + those), hi[r] its k 4t + 2, 4t + 3; B the same of b0, b1.
 * Same bits as di_mma_e4m3_16832 on the same values (test_cuda_fwd_ops compares the kernels built
 * on each); what a caller gains is the freedom to keep operands as f16 (activations staged once,
 * weights widened straight to f16) instead of widening them for every mma. */
static __device__ __forceinline__ void di_mma_e4m3_16832_f16(float d[4], const uint32_t a_lo[4], const uint32_t a_hi[4],
                                                             const uint32_t b_lo[2], const uint32_t b_hi[2]) {
    const float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    di_mma_f16_16816(d, a_lo, b_lo, z);
    di_mma_f16_16816(d, a_hi, b_hi, d);
#pragma unroll
    for (int i = 0; i < 4; i++) d[i] += 0.0f; /* the instruction's zero accumulator input: -0 -> +0 */
}
/* The same block sum for a caller that only folds it, acc = fma(d, s, acc) from acc = +0 with s >= +0
 * or NaN (a product of scales): without the final +0, which turns a -0 sum into +0. It cannot change
 * the fold's bits: d * s is then +-0 or NaN, acc + (+-0) = acc for acc != 0, and +0 + (-0) = +0 in
 * round-to-nearest, so acc is never -0; a NaN d gives the canonical NaN either way. Four FADDs an
 * mma fewer (the decode twin's inner loop: ~180 instructions a 4-block chunk). */
static __device__ __forceinline__ void di_mma_e4m3_16832_f16_fold(float d[4], const uint32_t a_lo[4],
                                                                  const uint32_t a_hi[4], const uint32_t b_lo[2],
                                                                  const uint32_t b_hi[2]) {
    const float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    di_mma_f16_16816(d, a_lo, b_lo, z);
    di_mma_f16_16816(d, a_hi, b_hi, d);
}

/* e4m3 code of a value already on the e4m3 grid (|q| <= 448) */
static __device__ __forceinline__ uint8_t di_e4m3_code(float q) {
    const int iv = (int)(fabsf(q) * 512.0f); /* exact: q = iv * 2^-9 */
    uint32_t code;
    if (iv < 8) {
        code = (uint32_t)iv; /* subnormal */
    } else {
        int e = 0;
        while ((iv >> e) >= 16) e++;
        code = (uint32_t)(e + 1) << 3 | (uint32_t)((iv >> e) - 8);
    }
    return (uint8_t)(code | (q < 0.0f && iv ? 0x80u : 0u));
}

/* act_quant(x, 32) of one 32-value block held four values per lane by 8 consecutive lanes (lane
 * groups of 8 aligned in the warp, all 32 lanes call): this lane's 4 e4m3 codes (lowest k in the
 * lowest byte), the block's power-of-two scale in *scale -- the CPU's act_quant (the max of a set
 * is the max in any order) */
static __device__ __forceinline__ uint32_t di_act_quant_e4m3_x4(float4 v, float *scale) {
    float m = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    for (int o = 4; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float sc = di_dev_act_scale(m);
    *scale = sc;
    /* q / sc as q * (1 / sc): sc is a power of two in [2^-22, 2^120] (di_dev_act_scale), so 1 / sc is
     * exact and both are the correctly rounded q 2^-e -- the same bits, one division instead of four
     * (an infinite amax makes sc +inf: 0 or NaN either way) */
    const float inv = 1.0f / sc;
    float q[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) q[i] = di_dev_clampf(q[i] * inv, -448.0f, 448.0f);
#ifdef DI_CUDA_EMU_H
    uint32_t codes = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) codes |= (uint32_t)di_e4m3_code(di_dev_e4m3_rne(q[i])) << (8 * i);
    return codes;
#else
    /* the hardware's round-to-nearest-even to e4m3 (the value from operand a goes to the high
     * byte): di_dev_e4m3_rne's grid, subnormals included; then no negative zero, as di_e4m3_code */
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(q[1]), "f"(q[0]));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(q[3]), "f"(q[2]));
    const uint32_t codes = (uint32_t)lo | (uint32_t)hi << 16;
    return codes & ~(__vcmpeq4(codes & 0x7f7f7f7fu, 0u) & 0x80808080u);
#endif
}

/* act_quant(x, 32) of one 32-value block held a value a lane by a whole warp: this lane's e4m3 code
 * and the block's scale -- di_act_quant_e4m3_x4's arithmetic value for value */
static __device__ __forceinline__ uint8_t di_act_quant_e4m3_x1(float v, float *scale) {
    float m = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float sc = di_dev_act_scale(m);
    *scale = sc;
    const float q = di_dev_clampf(v / sc, -448.0f, 448.0f);
#ifdef DI_CUDA_EMU_H
    return di_e4m3_code(di_dev_e4m3_rne(q));
#else
    uint16_t pair; /* q in the low byte */
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(pair) : "f"(0.0f), "f"(q));
    const uint32_t code = pair & 0xffu;
    return (uint8_t)((code & 0x7fu) ? code : 0u); /* no negative zero */
#endif
}

/* act_quant_digits' output of lane i (8 lanes a 32-value block, 4 values a lane): its 4 e4m3 codes as
 * the signed base-128 digits of their integers (512 x) into dg [blocks][3][32] int8 (digit d of value
 * k at 32 d + k; as words [blocks][3][8]) and, lane 8b, the block's scale times 2^-10 into xs [b] */
static __device__ __forceinline__ void di_act_digits_store(uint32_t codes, float scale, int64_t i, uint32_t *dg,
                                                           float *xs) {
    uint32_t d[3] = {0u, 0u, 0u};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const int q = di_dev_e4m3_to_int512((codes >> (8 * e)) & 0xffu);
        const int d0 = ((q + 64) & 127) - 64, q1 = (q - d0) / 128; /* exact divisions */
        const int d1 = ((q1 + 64) & 127) - 64, d2 = (q1 - d1) / 128;
        d[0] |= ((uint32_t)d0 & 0xffu) << (8 * e);
        d[1] |= ((uint32_t)d1 & 0xffu) << (8 * e);
        d[2] |= ((uint32_t)d2 & 0xffu) << (8 * e);
    }
    const int64_t blk = i >> 3;
    uint32_t *out = dg + blk * 24 + (i & 7);
    out[0] = d[0], out[8] = d[1], out[16] = d[2];
    if ((i & 7) == 0) xs[blk] = scale * 0x1p-10f;
}

/* act_quant's lane i of x's n_blocks 32-value blocks (8 lanes a block, 4 values a lane; x's values
 * or, with a row list, di_dev_act_lane's): its 4 e4m3 codes and the block's scale. Every lane of a
 * warp calls (the block max is a shuffle); false for the lanes past the last block */
static __device__ __forceinline__ bool di_act_quant_lane(const float *x, const float *const *rows, int64_t row_blocks,
                                                         int64_t n_blocks, int64_t i, uint32_t *codes, float *scale) {
    const bool live = (i >> 3) < n_blocks;
    const float4 v = di_dev_load_row4(live ? di_dev_act_lane(x, rows, row_blocks, i) : nullptr, 0); /* zeros past the end */
    *codes = di_act_quant_e4m3_x4(v, scale);
    return live;
}

/* Four packed e2m1 codes (bits 0..15, lowest k in the lowest nibble; higher bits are ignored) ->
 * four e4m3 bytes of the same values (every e2m1 value is an e4m3 value): magnitudes through a
 * byte-permute table; signs
 * through a second permute that uses each nibble's sign bit as prmt's sign-replicate flag (bytes
 * of 0x7f come out 0x7f for a positive code, 0x00 for a negative one; + 1 leaves bit 7 clear
 * exactly for the negative ones). Five instructions for four values. */
static __device__ __forceinline__ uint32_t di_e2m1x4_to_e4m3x4(uint32_t nib16) {
    /* magnitude codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6 as e4m3 */
    const uint32_t lut_lo = 0x3C383000u, lut_hi = 0x4C484440u;
    const uint32_t sel = nib16 & 0x7777u;
#ifdef DI_CUDA_EMU_H
    const uint32_t lut[2] = {lut_lo, lut_hi}, sgn = nib16 & 0x8888u;
    uint32_t mag = 0;
    for (int i = 0; i < 4; i++) {
        const uint32_t idx = (sel >> (4 * i)) & 7u;
        mag |= ((lut[idx >> 2] >> (8 * (idx & 3))) & 0xffu) << (8 * i);
    }
    return mag | ((sgn & 0x8u) << 4) | ((sgn & 0x80u) << 8) | ((sgn & 0x800u) << 12) | ((sgn & 0x8000u) << 16);
#else
    uint32_t mag, pos;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(mag) : "r"(lut_lo), "r"(lut_hi), "r"(sel));
    asm("prmt.b32 %0, %1, %1, %2;\n" : "=r"(pos) : "r"(0x7f7f7f7fu), "r"(nib16)); /* reads bits 0..15 alone */
    return (~(pos + 0x01010101u) & 0x80808080u) | mag;
#endif
}

/* Eight packed e2m1 codes (a word, lowest k in the lowest nibble) -> their values times 2 as int8
 * (0, +-1, 2, 3, 4, 6, 8, 12), lowest k in the lowest byte: *lo k 0..3, *hi k 4..7. With a code as
 * prmt's selector, a positive code copies its magnitude from the table, and a negative one (its
 * sign bit is prmt's sign-replicate flag) replicates the table byte's clear top bit: 0. So a lookup
 * of the word gives the positive codes' values, a lookup of the word with every sign flipped the
 * negative codes' magnitudes n, negated per byte without borrows as (0x80 - n) ^ 0x80 (n <= 12);
 * the two are byte-disjoint. Eleven instructions for eight values. */
static __device__ __forceinline__ void di_e2m1x8_to_s8x8(uint32_t w, uint32_t *lo, uint32_t *hi) {
#ifdef DI_CUDA_EMU_H
    uint32_t r[2] = {0u, 0u};
    for (int i = 0; i < 8; i++) r[i >> 2] |= ((uint32_t)di_dev_e2m1_to_int2((w >> (4 * i)) & 15u) & 0xffu) << (8 * (i & 3));
    *lo = r[0];
    *hi = r[1];
#else
    const uint32_t lut_lo = 0x03020100u, lut_hi = 0x0C080604u, wn = w ^ 0x88888888u;
    uint32_t p0, p1, n0, n1;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(p0) : "r"(lut_lo), "r"(lut_hi), "r"(w)); /* selectors: bits 0..15 */
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(p1) : "r"(lut_lo), "r"(lut_hi), "r"(w >> 16));
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(n0) : "r"(lut_lo), "r"(lut_hi), "r"(wn));
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(n1) : "r"(lut_lo), "r"(lut_hi), "r"(wn >> 16));
    *lo = p0 | ((0x80808080u - n0) ^ 0x80808080u);
    *hi = p1 | ((0x80808080u - n1) ^ 0x80808080u);
#endif
}

/* Four packed e2m1 codes (bits 0..15, lowest k in the lowest nibble; higher bits are ignored) ->
 * four bytes 64 + 2 v (52..76, v the code's value), lowest k in the lowest byte. A positive code's
 * byte comes from one byte-permute table, a negative code's from a second table looked up with every
 * sign flipped; each table's bytes are below 0x80, so prmt's sign-replicate flag (a code's sign bit)
 * zeroes the other sign's bytes in each lookup. -0 comes out as +0's byte. Four instructions. */
#define DI_E2M1_OFF64_POS_LO 0x43424140u /* 64 + 2 v for 0, .5, 1, 1.5 */
#define DI_E2M1_OFF64_NEG_LO 0x3D3E3F40u /* 64 - 2 v for the same */
/* pos_lo / neg_lo: the tables' first words, DI_E2M1_OFF64_POS_LO / _NEG_LO -- a caller in a hot loop
 * passes them in registers it loaded once (di_e2m1_off64_lut): the instruction takes one table word
 * as an immediate, and given constants for both, ptxas rematerialised the other into a register at
 * every use (~16 moves a stage of the wgmma GEMM, ~32 a 16-key step of the index scores) */
__device__ static const uint32_t di_e2m1_off64_lo_tab[2] = {DI_E2M1_OFF64_POS_LO, DI_E2M1_OFF64_NEG_LO};
/* the two words by a volatile load, once a kernel: a value ptxas cannot rematerialise */
static __device__ __forceinline__ void di_e2m1_off64_lut(uint32_t *pos_lo, uint32_t *neg_lo) {
    const volatile uint32_t *t = di_e2m1_off64_lo_tab;
    *pos_lo = t[0], *neg_lo = t[1];
}
static __device__ __forceinline__ uint32_t di_e2m1x4_to_off64(uint32_t nib16, uint32_t pos_lo = DI_E2M1_OFF64_POS_LO,
                                                              uint32_t neg_lo = DI_E2M1_OFF64_NEG_LO) {
    const uint32_t pos_hi = 0x4C484644u; /* 64 + 2 v for 2, 3, 4, 6 */
    const uint32_t neg_hi = 0x34383A3Cu; /* 64 - 2 v */
#ifdef DI_CUDA_EMU_H
    static const uint8_t tw[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        const uint32_t c = (nib16 >> (4 * i)) & 15u;
        r |= (uint32_t)(c & 8u ? 64 - tw[c & 7u] : 64 + tw[c]) << (8 * i);
    }
    (void)pos_lo, (void)pos_hi, (void)neg_lo, (void)neg_hi;
    return r;
#else
    uint32_t p, n;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(p) : "r"(pos_lo), "r"(pos_hi), "r"(nib16)); /* selectors: bits 0..15 */
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(n) : "r"(neg_lo), "r"(neg_hi), "r"(nib16 ^ 0x8888u));
    return p | n;
#endif
}

/* a * b per bf16 half, rounded to nearest even (exact here: a code's value times a power of two) */
static __device__ __forceinline__ uint32_t di_bf16x2_mul(uint32_t a, uint32_t b) {
#ifdef DI_CUDA_EMU_H
    uint32_t r = 0;
    for (int h = 0; h < 2; h++) {
        const float p = __uint_as_float((a >> (16 * h)) << 16) * __uint_as_float((b >> (16 * h)) << 16);
        const uint32_t u = __float_as_uint(p);
        r |= ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << (16 * h);
    }
    return r;
#else
    uint32_t r;
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
    return r;
#endif
}

/* a * b + c per bf16 half, rounded once to nearest even */
static __device__ __forceinline__ uint32_t di_bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
#ifdef DI_CUDA_EMU_H
    uint32_t r = 0;
    for (int h = 0; h < 2; h++) {
        const float p = fmaf(__uint_as_float((a >> (16 * h)) << 16), __uint_as_float((b >> (16 * h)) << 16),
                             __uint_as_float((c >> (16 * h)) << 16));
        const uint32_t u = __float_as_uint(p); /* exact here: the bf16 rounding below is the only one */
        r |= ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << (16 * h);
    }
    return r;
#else
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#endif
}

/* Bytes 64 + 2 v read as bf16 under a 0x43 byte are 192 + 2 v, so with h = 2^(e - 128) and
 * c = -192 h one bf16 fma gives v * 2^(e - 127): the e2m1 value times its e8m0 scale, exact (every
 * operand and the result are bf16 values with at most 8 significant bits). For scale bytes e in
 * 2..248 ("plain": every byte of a real checkpoint) h and c are normal and finite, and their bits
 * are two integer multiply-adds. Other bytes (2^-127, 2^-126, NaN, the largest scales) take h = 1/2,
 * c = -96 -- the value itself -- and a multiply by di_dev_e8m0's scale, as bf16 (di_e2m1_bf16_scale
 * below). */
struct di_e2m1_scale {
    uint32_t h, c, s; /* bf16x2 pairs: the fma's multiplier and addend, and (not plain) the scale */
};
static __device__ __forceinline__ di_e2m1_scale di_e2m1_bf16_scale(uint32_t e, bool plain) {
    di_e2m1_scale r;
    if (plain) {
        r.h = e * 0x00800080u - 0x00800080u; /* exponent field e - 1 */
        r.c = e * 0x00800080u + 0x83408340u; /* -1.5 * 2^(e - 121): sign, exponent e + 6, mantissa .1 */
        r.s = 0u;
    } else {
        const uint32_t sb = __float_as_uint(di_dev_e8m0((uint8_t)e)) >> 16;
        r.h = 0x3F003F00u; /* 0.5 */
        r.c = 0xC2C0C2C0u; /* -96 */
        r.s = sb | sb << 16;
    }
    return r;
}

/* di_e2m1x4_to_off64's four bytes -> four bf16 values times the scale: out[0] = k 0, 1, out[1] =
 * k 2, 3 (low half first). Four instructions (six outside the plain scales). */
static __device__ __forceinline__ void di_off64x4_to_bf16x4(uint32_t b, const di_e2m1_scale &sc, bool plain,
                                                            uint32_t out[2]) {
    out[0] = di_bf16x2_fma(__byte_perm(b, 0x43434343u, 0x4140), sc.h, sc.c);
    out[1] = di_bf16x2_fma(__byte_perm(b, 0x43434343u, 0x4342), sc.h, sc.c);
    if (!plain) {
        out[0] = di_bf16x2_mul(out[0], sc.s);
        out[1] = di_bf16x2_mul(out[1], sc.s);
    }
}

/* Two e4m3 codes (lower k in the low byte) -> bf16 pair of their values times 2^-112 (low half
 * first), exact: the f16 of an e4m3 value is normal or zero with its 7 low mantissa bits clear, so
 * its bits shifted right by 3 (sign kept) are the bf16 with the same exponent field -- 2^-112 of the
 * value for f16's bias of 15 against bf16's 127. The mask clears each half's 3 lowest bits, so the
 * 32-bit shift moves nothing across the halves even from a NaN (the device's f16 NaN is 0x7fff). A
 * NaN code comes out finite (the f16 NaN's exponent field is a bf16 normal's), unlike the other
 * decodes. Four instructions. */
static __device__ __forceinline__ uint32_t di_e4m3x2_to_bf16x2_m112(uint16_t v) {
    const uint32_t h = di_e4m3x2_to_f16x2(v);
    return (h & 0x7FF87FF8u) >> 3 | (h & 0x80008000u);
}
/* the bf16 pair of 2^(e - 127 + 112) for an e8m0 byte e in 10..142 ("plain" for FP8): the
 * multiplier that turns di_e4m3x2_to_bf16x2_m112's values into code values times the scale, exactly
 * (the multiplier and every product normal and finite: the smallest code, 2^-9, times 2^-117). Other
 * bytes take the fp32 decode (di_dev_e8m0) instead. */
static __device__ __forceinline__ uint32_t di_e4m3_bf16_scale(uint32_t e) { return e * 0x00800080u + 0x38003800u; }

/* Does a word of four e8m0 scale bytes hold one that is not plain -- FP4 (fp4): a byte outside
 * 2..248 (di_e2m1_bf16_scale); FP8: outside 10..142 (di_e4m3_bf16_scale)? Bytewise without carries
 * between bytes: a byte <= 1 is a zero byte of w & 0xFE.. (the exact zero-byte test), a byte >= 249
 * (> 142) has bit 7 set and its low 7 bits + 7 (+ 113) reach 128, a byte < 10 has bit 7 clear and
 * its low 7 bits + 118 stay below 128. */
static __device__ __forceinline__ bool di_e8m0x4_any_odd(bool fp4, uint32_t w) {
    const uint32_t lo7 = w & 0x7F7F7F7Fu, hi = w & 0x80808080u;
    if (!fp4) return (((lo7 + 0x71717171u) & hi) | (~(lo7 + 0x76767676u) & ~w & 0x80808080u)) != 0u;
    const uint32_t t = w & 0xFEFEFEFEu;
    return (((t - 0x01010101u) & ~t & 0x80808080u) | ((lo7 + 0x07070707u) & hi)) != 0u;
}

/* an act_quant lane's 4 e4m3 codes times its block's (power-of-two) scale as 4 bf16 values, the
 * CPU's act_quant values exactly (a code times a power of two is exact in fp32 and in bf16) */
static __device__ __forceinline__ uint2 di_act_qbf16x4(uint32_t codes, float scale) {
    float q[4];
    di_e4m3x2_to_f32x2((uint16_t)(codes & 0xffffu), &q[0], &q[1]);
    di_e4m3x2_to_f32x2((uint16_t)(codes >> 16), &q[2], &q[3]);
    return make_uint2(di_bf16x2_of_exact(q[0] * scale, q[1] * scale), di_bf16x2_of_exact(q[2] * scale, q[3] * scale));
}

/* two floats rounded to bf16 (nearest even: di_dev_bf16_round's bits for every non-NaN value) as
 * bf16x2, lo in the low half: one cvt on the device */
static __device__ __forceinline__ uint32_t di_bf16x2_rn(float lo, float hi) {
#ifdef DI_CUDA_EMU_H
    return di_dev_bf16_bits(lo) | di_dev_bf16_bits(hi) << 16;
#else
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#endif
}
/* di_bf16x2_rn where a NaN keeps its payload (quietened), as di_dev_bf16_bits gives it, instead of
 * the cvt's canonical NaN: the same bits as the integer form for every input */
static __device__ __forceinline__ uint32_t di_bf16x2_rn_keep_nan(float lo, float hi) {
    if (isnan(lo) || isnan(hi)) return di_dev_bf16_bits(lo) | di_dev_bf16_bits(hi) << 16;
    return di_bf16x2_rn(lo, hi);
}
/* ---- compressed KV records in attention lists (forward/kv_record.h) ----
 * An entry's values c .. c + 3 as loaded (c % 4 == 0): a row of floats (di_dev_load_row4), or, for
 * a record (DI_KV_REF_RECORD in the pointer's low bit; dim % 16 == 0), its four e2m1 codes and
 * their block's e4m3 scale byte in .x's bits (codes | scale << 16) -- a 2-byte and a 1-byte load
 * where a row takes 16 bytes -- which di_dev_kv_record_bf16x4 decodes. The staging loops issue a
 * batch of loads before converting any; a batch of records alone loads through di_dev_kv_codes4 /
 * di_dev_kv_scale4 (predicated, no branch), since a use of a loaded value inside a row's branch (as
 * the word's OR here) makes each row wait for its own loads: 3.2x the wgmma attention's time. */
static __device__ __forceinline__ bool di_dev_kv_is_record(const float *row) {
    return (reinterpret_cast<uintptr_t>(row) & DI_KV_REF_RECORD) != 0;
}
static __device__ __forceinline__ const uint8_t *di_dev_kv_record(const float *row) { /* NULL stays NULL */
    return reinterpret_cast<const uint8_t *>(reinterpret_cast<uintptr_t>(row) & ~(uintptr_t)DI_KV_REF_RECORD);
}
static __device__ __forceinline__ uint32_t di_dev_kv_codes4(const uint8_t *rec, int c) { /* codes of c .. c + 3 */
    return rec ? *reinterpret_cast<const uint16_t *>(rec + c / 2) : 0u;
}
static __device__ __forceinline__ uint32_t di_dev_kv_scale4(const uint8_t *rec, int c, int dim) { /* their scale byte */
    return rec ? (uint32_t)rec[dim / 2 + c / DI_KV_RECORD_BLOCK] : 0u;
}
static __device__ __forceinline__ float4 di_dev_load_kv4_raw(const float *row, int c, int dim) {
    if (!di_dev_kv_is_record(row)) return di_dev_load_row4(row, c);
    const uint8_t *rec = di_dev_kv_record(row);
    return float4{__uint_as_float(di_dev_kv_codes4(rec, c) | di_dev_kv_scale4(rec, c, dim) << 16), 0.0f, 0.0f, 0.0f};
}
/* A record's e4m3 scale byte b (positive) as a bf16 pair; the NaN byte 0x7F gives NaNs. */
static __device__ __forceinline__ uint32_t di_dev_kv_scale_bf16x2(uint32_t b) {
    uint32_t s = b < 8 ? __float_as_uint((float)b * 0x1p-9f) >> 16 : (b << 4) + 0x3C00u;
    if (b == DI_KV_RECORD_NAN) s = 0x7FC0u;
    return s | s << 16;
}
/* four e2m1 codes (bits 0 .. 15 of w, the lower dim first; the bits above are ignored) times the
 * scale pair s (di_dev_kv_scale_bf16x2), as bf16 pairs (lower dim in the low half): the codes
 * widened to bf16 e2m1 values by byte permutes (the values' high and low bytes looked up apart,
 * then interleaved), the signs set, times the scale in bf16 -- exact (a product has at most 6
 * significant bits), so these are the CPU's di_kv_record_values */
static __device__ __forceinline__ uint2 di_dev_kv_codes_bf16x4(uint32_t w, uint32_t s) {
    const uint32_t sel = w & 0x7777u; /* magnitude indices */
    const uint32_t hi = __byte_perm(0x3F3F3F00u, 0x40404040u, sel); /* bf16 high bytes of 0 .5 1 1.5 | 2 3 4 6 */
    const uint32_t lo = __byte_perm(0xC0800000u, 0xC0804000u, sel); /* and low bytes */
    const uint32_t v0 = __byte_perm(lo, hi, 0x5140) | (w << 12 & 0x8000u) | (w << 24 & 0x80000000u);
    const uint32_t v1 = __byte_perm(lo, hi, 0x7362) | (w << 4 & 0x8000u) | (w << 16 & 0x80000000u);
    return uint2{di_bf16x2_mul(v0, s), di_bf16x2_mul(v1, s)};
}
/* a record word (codes | scale byte << 16) decoded */
static __device__ __forceinline__ uint2 di_dev_kv_record_bf16x4(uint32_t w) {
    return di_dev_kv_codes_bf16x4(w, di_dev_kv_scale_bf16x2(w >> 16));
}
/* values c .. c + 3 of an entry as floats (the exact kernels' staging) */
static __device__ __forceinline__ float4 di_dev_load_kv4(const float *row, int c, int dim) {
    const float4 v = di_dev_load_kv4_raw(row, c, dim);
    if (!di_dev_kv_is_record(row)) return v;
    const uint2 b = di_dev_kv_record_bf16x4(__float_as_uint(v.x));
    return float4{__uint_as_float(b.x << 16), __uint_as_float(b.x & 0xffff0000u), __uint_as_float(b.y << 16),
                  __uint_as_float(b.y & 0xffff0000u)};
}

#endif
