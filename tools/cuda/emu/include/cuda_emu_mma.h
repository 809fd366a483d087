/* CPU-emulator versions of src/backend/cuda/cuda_mma.cuh (included from there when cuda_emu.h is
 * in use): the mma.m16n8k32 e4m3 and m16n8k16 bf16 fragment layouts and ldmatrix, and cp.async
 * as immediate copies (wait/commit are no-ops, so a pipeline's barriers are still needed and still
 * checked). Arithmetic model (the device's internal accumulation may differ in the last bits): an
 * e4m3 block sum is the exact sum of the products with k % 4 < 2 rounded to fp32, plus the exact
 * sum of the others, rounded again -- the two f16 HMMAs sm_90 runs for it, and what an f16
 * wgmma pair in that k order computes (probe_mma_numerics.cu); a bf16 or f16 mma or a k16 wgmma is its
 * exact sum with c rounded once. */
#ifndef DI_CUDA_EMU_MMA_H
#define DI_CUDA_EMU_MMA_H

#include <cmath>
#include <cstdint>
#include <cstring>

static inline double emu_e4m3_value(uint32_t b) {
    const int ex = (b >> 3) & 15, man = b & 7;
    double v = (double)(ex == 0 ? man : (8 + man) << (ex - 1)) / 512.0;
    return (b & 0x80) ? -v : v;
}

/* every lane of the warp publishes its 6 fragment registers (a0..a3, b0, b1); all[lane][reg] */
static inline void emu_gather_fragments(const uint32_t a[4], const uint32_t b[2], uint32_t all[32][6]) {
    uint64_t packed[3] = {(uint64_t)a[0] | (uint64_t)a[1] << 32, (uint64_t)a[2] | (uint64_t)a[3] << 32,
                          (uint64_t)b[0] | (uint64_t)b[1] << 32};
    for (int r = 0; r < 3; r++) {
        uint64_t v[32];
        emu::exchange_all(packed[r], v);
        for (unsigned src = 0; src < 32; src++) {
            all[src][2 * r] = (uint32_t)v[src];
            all[src][2 * r + 1] = (uint32_t)(v[src] >> 32);
        }
    }
}

static inline void di_mma_e4m3_16832(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    const unsigned lane = emu::flat_tid() & 31;
    uint32_t all[32][6];
    emu_gather_fragments(a, b, all);
    auto A = [&](int row, int k) -> uint32_t { /* byte of A[row][k] */
        const int g = row & 7, reg = (row >> 3) + 2 * (k >> 4), tt = (k & 15) >> 2;
        return (all[4 * g + tt][reg] >> (8 * (k & 3))) & 0xffu;
    };
    auto B = [&](int k, int col) -> uint32_t {
        const int reg = 4 + (k >> 4), tt = (k & 15) >> 2;
        return (all[4 * col + tt][reg] >> (8 * (k & 3))) & 0xffu;
    };
    const int g = (int)lane >> 2, tq = (int)lane & 3;
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * tq + (i & 1);
        double s[2] = {0.0, 0.0}; /* exact: products of e4m3 values, multiples of 2^-18 below 2^23 */
        for (int k = 0; k < 32; k++) s[(k >> 1) & 1] += emu_e4m3_value(A(row, k)) * emu_e4m3_value(B(k, col));
        d[i] = (float)((double)(float)s[0] + s[1]);
    }
}

/* s8 m16n8k32: exact int32 sums of the signed-byte products */
static inline void di_mma_s8_16832(int d[4], const uint32_t a[4], const uint32_t b[2]) {
    const unsigned lane = emu::flat_tid() & 31;
    uint32_t all[32][6];
    emu_gather_fragments(a, b, all);
    auto A = [&](int row, int k) { /* A[row][k] */
        const int g = row & 7, reg = (row >> 3) + 2 * (k >> 4), tt = (k & 15) >> 2;
        return (int)(int8_t)((all[4 * g + tt][reg] >> (8 * (k & 3))) & 0xffu);
    };
    auto B = [&](int k, int col) {
        const int reg = 4 + (k >> 4), tt = (k & 15) >> 2;
        return (int)(int8_t)((all[4 * col + tt][reg] >> (8 * (k & 3))) & 0xffu);
    };
    const int g = (int)lane >> 2, tq = (int)lane & 3;
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * tq + (i & 1);
        int s = 0;
        for (int k = 0; k < 32; k++) s += A(row, k) * B(k, col);
        d[i] = s;
    }
}

/* s8 m16n8k32 accumulating into d */
static inline void di_mma_s8_16832_acc(int d[4], const uint32_t a[4], const uint32_t b[2]) {
    int p[4];
    di_mma_s8_16832(p, a, b);
    for (int i = 0; i < 4; i++) d[i] += p[i];
}

/* fp64 m8n8k4: every lane's a and b through the warp, then c + the four products by fma in k order */
static inline void di_mma_f64_884(double d[2], double a, double b, const double c[2]) {
    const unsigned lane = emu::flat_tid() & 31;
    double A[32], B[32];
    uint64_t ua, ub, va[32], vb[32];
    memcpy(&ua, &a, 8);
    memcpy(&ub, &b, 8);
    emu::exchange_all(ua, va);
    emu::exchange_all(ub, vb);
    memcpy(A, va, sizeof A);
    memcpy(B, vb, sizeof B);
    const int g = (int)lane >> 2, tq = (int)lane & 3;
    double out[2];
    for (int i = 0; i < 2; i++) {
        const int col = 2 * tq + i;
        double s = c[i];
        for (int k = 0; k < 4; k++) s = fma(A[4 * g + k], B[4 * col + k], s); /* A[g][k], B[k][col] */
        out[i] = s;
    }
    d[0] = out[0];
    d[1] = out[1];
}

/* fp64 m16n8k16: every lane's a[8] and b[4] through the warp, then c + the sixteen products by fma in
 * k order */
static inline void di_mma_f64_16816(double d[4], const double a[8], const double b[4], const double c[4]) {
    const unsigned lane = emu::flat_tid() & 31;
    double A[8][32], B[4][32]; /* [register][lane] */
    for (int r = 0; r < 12; r++) {
        uint64_t u, v[32];
        memcpy(&u, r < 8 ? &a[r] : &b[r - 8], 8);
        emu::exchange_all(u, v);
        memcpy(r < 8 ? A[r] : B[r - 8], v, sizeof v);
    }
    auto Am = [&](int row, int k) { return A[(row >> 3) + 2 * (k >> 2)][4 * (row & 7) + (k & 3)]; };
    auto Bm = [&](int k, int col) { return B[k >> 2][4 * col + (k & 3)]; };
    const int g = (int)lane >> 2, tq = (int)lane & 3;
    double out[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * tq + (i & 1);
        double s = c[i];
        for (int k = 0; k < 16; k++) s = fma(Am(row, k), Bm(k, col), s);
        out[i] = s;
    }
    for (int i = 0; i < 4; i++) d[i] = out[i];
}

/* m16n8k16 with 16-bit inputs, `value` decoding one (bf16 or f16): exact products summed in double
 * with c, rounded once */
template <class Decode>
static inline void emu_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], Decode value) {
    const unsigned lane = emu::flat_tid() & 31;
    uint32_t all[32][6];
    emu_gather_fragments(a, b, all);
    auto A = [&](int row, int k) { /* a0 row g k 2t.. | a1 row g+8 | a2 row g k 8+2t.. | a3 */
        const int g = row & 7, reg = (row >> 3) + 2 * (k >> 3), tt = (k & 7) >> 1;
        return value((all[4 * g + tt][reg] >> (16 * (k & 1))) & 0xffffu);
    };
    auto B = [&](int k, int col) {
        const int reg = 4 + (k >> 3), tt = (k & 7) >> 1;
        return value((all[4 * col + tt][reg] >> (16 * (k & 1))) & 0xffffu);
    };
    const int g = (int)lane >> 2, tq = (int)lane & 3;
    float out[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * tq + (i & 1);
        double s = c[i];
        for (int k = 0; k < 16; k++) s += A(row, k) * B(k, col);
        out[i] = (float)s;
    }
    for (int i = 0; i < 4; i++) d[i] = out[i];
}

static inline void di_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    emu_mma_16816(d, a, b, c, [](uint32_t bits16) { return (double)__uint_as_float(bits16 << 16); });
}

static inline double emu_f16_value(uint32_t h);
static inline void di_mma_f16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    emu_mma_16816(d, a, b, c, [](uint32_t bits16) { return emu_f16_value(bits16); });
}

/* ldmatrix .x4 (plain or .trans): every lane publishes its row address; lane 4g + t then reads
 * row g, elements 2t, 2t+1 (plain) or rows 2t, 2t+1, element g (trans) of matrix m */
static inline void emu_ldmatrix_x4(uint32_t r[4], const void *row, bool trans) {
    const unsigned lane = emu::flat_tid() & 31, g = lane >> 2, t = lane & 3;
    uint64_t addr[32];
    emu::exchange_all((uint64_t)(uintptr_t)row, addr);
    const uint16_t *rows[32];
    for (unsigned src = 0; src < 32; src++) rows[src] = (const uint16_t *)(uintptr_t)addr[src];
    for (int m = 0; m < 4; m++) {
        if (!trans) r[m] = (uint32_t)rows[8 * m + g][2 * t] | (uint32_t)rows[8 * m + g][2 * t + 1] << 16;
        else r[m] = (uint32_t)rows[8 * m + 2 * t][g] | (uint32_t)rows[8 * m + 2 * t + 1][g] << 16;
    }
}
static inline void di_ldmatrix_x4(uint32_t r[4], const void *row) { emu_ldmatrix_x4(r, row, false); }
static inline void di_ldmatrix_x4_trans(uint32_t r[4], const void *row) { emu_ldmatrix_x4(r, row, true); }

static inline uint32_t di_e4m3x2_to_bf16x2(uint16_t v) {
    uint32_t r = 0;
    for (int i = 0; i < 2; i++) {
        const float f = (float)emu_e4m3_value((v >> (8 * i)) & 0xffu);
        r |= (__float_as_uint(f) >> 16) << (16 * i); /* exact: e4m3 values fit bf16 */
    }
    return r;
}

/* f16 bits of a value exactly representable as a normal f16 (every e4m3 value is) */
static inline uint32_t emu_f16_bits(double v) {
    if (v == 0.0) return std::signbit(v) ? 0x8000u : 0u;
    int e;
    const double f = std::frexp(std::fabs(v), &e); /* |v| = f 2^e, f in [0.5, 1) */
    return (v < 0 ? 0x8000u : 0u) | (uint32_t)(e - 1 + 15) << 10 | (uint32_t)std::lround((2.0 * f - 1.0) * 1024.0);
}
static inline double emu_f16_value(uint32_t h) {
    const int ex = (h >> 10) & 31, man = h & 1023;
    const double v = ex == 31 ? (man ? NAN : INFINITY)
                     : ex     ? std::ldexp(1.0 + man / 1024.0, ex - 15)
                              : std::ldexp(man / 1024.0, -14);
    return (h & 0x8000u) ? -v : v;
}
/* a NaN code (0x7f, 0xff) gives the device's canonical f16 NaN, 0x7fff */
static inline uint32_t emu_e4m3_f16_bits(uint8_t c) {
    if ((c & 0x7f) == 0x7f) return 0x7fffu;
    return emu_f16_bits((c & 0x7f) ? emu_e4m3_value(c) : ((c & 0x80) ? -0.0 : 0.0));
}
static inline uint32_t di_e4m3x2_to_f16x2(uint16_t v) {
    return emu_e4m3_f16_bits((uint8_t)(v & 0xffu)) | emu_e4m3_f16_bits((uint8_t)(v >> 8)) << 16;
}

static inline void di_e4m3x4_to_f16x4(uint32_t v, uint32_t *lo, uint32_t *hi) {
    *lo = di_e4m3x2_to_f16x2((uint16_t)v);
    *hi = di_e4m3x2_to_f16x2((uint16_t)(v >> 16));
}

static inline void di_e4m3x2_to_f32x2(uint16_t v, float *lo, float *hi) {
    const uint32_t h = di_e4m3x2_to_f16x2(v);
    *lo = (float)emu_f16_value(h & 0xffffu);
    *hi = (float)emu_f16_value(h >> 16);
}

static inline void di_cp_async16(void *smem, const void *gmem, bool valid) {
    if (valid) memcpy(smem, gmem, 16);
    else memset(smem, 0, 16);
}
static inline void di_cp_async4(void *smem, const void *gmem, bool valid) {
    if (valid) memcpy(smem, gmem, 4);
    else memset(smem, 0, 4);
}
static inline void di_cp_async_commit(void) {}
template <int N>
static inline void di_cp_async_wait(void) {}

/* ---- wgmma (src/backend/cuda/cuda_wgmma.cuh): a descriptor is the operand's host address (the
 * 128-byte swizzle applied to host address bits, so tiles must start on 1024 bytes as on the
 * device); the product is computed at issue; fences and waits are no-ops. The FP8 wgmma is not
 * emulated: only the device probe (tools/cuda/probe_mma_numerics.cu) issues it ---- */
static inline uint64_t di_wgmma_desc_sw128(const void *smem) { return (uint64_t)(uintptr_t)smem; }
static inline uint8_t *di_smem_align1024(uint8_t *p) { return p + ((1024u - ((uintptr_t)p & 1023u)) & 1023u); }
static inline void di_fence_proxy_async(void) {}
static inline void di_wgmma_fence(void) {}
static inline void di_wgmma_commit(void) {}
template <int N>
static inline void di_wgmma_wait(void) {}
template <int R>
static inline void di_wgmma_pin(float (&)[R]) {}
static inline void di_wgmma_f16_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int acc) {
    const unsigned t = emu::flat_tid(), lane = t & 31, warp_in_group = (t >> 5) & 3;
    auto at = [](uint64_t desc, int row, int k) -> double { /* f16 (row, k) of a K-major operand, swizzled */
        uintptr_t addr = (uintptr_t)desc + (uintptr_t)(row >> 3) * 1024 + (uintptr_t)(row & 7) * 128 + (uintptr_t)(2 * k);
        addr ^= ((addr >> 7) & 7u) << 4;
        return emu_f16_value(*(const uint16_t *)addr);
    };
    const int g = (int)lane >> 2, tq = (int)lane & 3;
    for (int i = 0; i < 8; i++)
        for (int r = 0; r < 4; r++) {
            const int row = 16 * (int)warp_in_group + g + 8 * (r >> 1), col = 8 * i + 2 * tq + (r & 1);
            double s = 0.0; /* exact: 16 products of e4m3 values */
            for (int k = 0; k < 16; k++) s += at(desc_a, row, k) * at(desc_b, col, k);
            d[4 * i + r] = acc ? (float)((double)d[4 * i + r] + s) : (float)s;
        }
}
static inline uint64_t di_wgmma_desc_add(uint64_t desc, uint32_t bytes) { return desc + bytes; }
/* MN-major descriptors carry their LBO in bits 48.. of the host address (x86-64 user addresses
 * stay below 2^47) */
static inline uint64_t di_wgmma_desc_sw128_mn(const void *smem, uint32_t lbo) {
    return (uint64_t)(uintptr_t)smem | (uint64_t)(lbo >> 4) << 48;
}
/* bf16 (row, k) of a K-major operand, and (k, n) of an MN-major one, in the 128-byte swizzle */
static inline double emu_bf16_kmajor(uint64_t desc, int row, int k) {
    uintptr_t addr = (uintptr_t)desc + (uintptr_t)(row >> 3) * 1024 + (uintptr_t)(row & 7) * 128 + (uintptr_t)(2 * k);
    addr ^= ((addr >> 7) & 7u) << 4;
    return (double)__uint_as_float((uint32_t)*(const uint16_t *)addr << 16);
}
static inline double emu_bf16_mnmajor(uint64_t desc, int k, int n) {
    const uintptr_t base = (uintptr_t)(desc & ((1ull << 48) - 1)), lbo = (uintptr_t)(desc >> 48) << 4;
    uintptr_t addr = base + (uintptr_t)(n >> 6) * lbo + (uintptr_t)(k >> 3) * 1024 + (uintptr_t)(k & 7) * 128 +
                     (uintptr_t)(2 * (n & 63));
    addr ^= ((addr >> 7) & 7u) << 4;
    return (double)__uint_as_float((uint32_t)*(const uint16_t *)addr << 16);
}
/* both operands in shared memory: d[4i + r] of this thread, N / 8 column groups */
template <int N, bool MN_B>
static inline void emu_wgmma_ss_bf16_k16(float *d, uint64_t desc_a, uint64_t desc_b, bool acc) {
    const unsigned t = emu::flat_tid(), lane = t & 31, warp_in_group = (t >> 5) & 3;
    const int g = (int)lane >> 2, tq = (int)lane & 3;
    for (int i = 0; i < N / 8; i++)
        for (int r = 0; r < 4; r++) {
            const int row = 16 * (int)warp_in_group + g + 8 * (r >> 1), col = 8 * i + 2 * tq + (r & 1);
            double sum = 0.0;
            for (int k = 0; k < 16; k++)
                sum += emu_bf16_kmajor(desc_a, row, k) *
                       (MN_B ? emu_bf16_mnmajor(desc_b, k, col) : emu_bf16_kmajor(desc_b, col, k));
            d[4 * i + r] = acc ? (float)((double)d[4 * i + r] + sum) : (float)sum;
        }
}
static inline void di_wgmma_bf16_m64n32k16(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int acc) {
    emu_wgmma_ss_bf16_k16<32, false>(d, desc_a, desc_b, acc != 0);
}
static inline void di_wgmma_bf16_m64n128k16_tb(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    emu_wgmma_ss_bf16_k16<128, true>(d, desc_a, desc_b, true);
}
/* A from registers: this warp's 16 rows of A from its lanes' fragments (bf16), B from shared
 * memory; always accumulating */
template <int N>
static inline void emu_wgmma_rs_k16(float *d, const uint32_t a[4], uint64_t desc_b) {
    const unsigned t = emu::flat_tid(), lane = t & 31;
    uint32_t all[32][6];
    const uint32_t zero[2] = {0, 0};
    emu_gather_fragments(a, zero, all);
    auto A = [&](int row, int k) { /* row 0..15 of the warp's slice */
        const int g = row & 7, reg = (row >> 3) + 2 * (k >> 3), tt = (k & 7) >> 1;
        return (double)__uint_as_float(((all[4 * g + tt][reg] >> (16 * (k & 1))) & 0xffffu) << 16);
    };
    const int g = (int)lane >> 2, tq = (int)lane & 3;
    for (int i = 0; i < N / 8; i++)
        for (int r = 0; r < 4; r++) {
            const int row = g + 8 * (r >> 1), col = 8 * i + 2 * tq + (r & 1);
            double s = 0.0;
            for (int k = 0; k < 16; k++) s += A(row, k) * emu_bf16_kmajor(desc_b, col, k);
            d[4 * i + r] = (float)((double)d[4 * i + r] + s);
        }
}
static inline void di_wgmma_bf16_rs_m64n32k16(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b) {
    emu_wgmma_rs_k16<32>(d, a, desc_b);
}
static inline void di_wgmma_bf16_rs_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
    emu_wgmma_rs_k16<64>(d, a, desc_b);
}
static inline void di_wgmma_bf16_rs_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
    emu_wgmma_rs_k16<128>(d, a, desc_b);
}
template <int N>
static inline void di_setmaxnreg_dec(void) {}
template <int N>
static inline void di_setmaxnreg_inc(void) {}
/* named barriers: the block's emulated ones (cuda_emu.h) */
static inline void di_bar_sync(int id, int count) { emu::named_barrier_arrive(id, count, true); }
static inline void di_bar_arrive(int id, int count) { emu::named_barrier_arrive(id, count, false); }
/* mbarriers: the block's emulated ones, keyed by their shared-memory address (cuda_emu.h) */
static inline void di_mbar_init(uint64_t *b, int count) { emu::mbarrier_at(b).init(count); }
static inline void di_mbar_arrive(uint64_t *b) { emu::mbarrier_at(b).arrive(); }
static inline void di_mbar_wait(uint64_t *b, int parity) { emu::mbarrier_at(b).wait(parity); }
#endif
