/* The sampler's arithmetic, written once for the host (sampler.c) and the device (cuda_sample_*.cu),
 * so that a row sampled on a GPU gets the host sampler's token bit for bit.
 *
 * A draw must not depend on where it runs, and two things in the obvious sampler do: libm's `exp`
 * (CUDA's double `exp` and glibc's may differ in the last ulp) and double sums whose value
 * depends on their order (the host adds in id order; a device reduces in a tree). So:
 *
 *   - di_sample_exp is exp from IEEE adds and multiplies alone (Cody-Waite reduction by ln2 / 64, a
 *     table of 2^(j/64), a degree-5 polynomial, a power of two): every step is one correctly rounded operation,
 *     so any IEEE machine computes the same bits provided nothing fuses a multiply into an add.
 *     The device writes each operation as a _rn intrinsic (never fused); the host file is C11
 *     (GCC: -ffp-contract=off) and clang is told so below. Accurate to ~2 ulp on [-745, 0].
 *   - a token's weight w = exp((z - max) * (1 / T)) (in (0, 1]: its probability over the top token's) is
 *     used as the fixed-point integer W = floor(w * 2^bits), bits = 63 - ceil(log2(vocab)), so that
 *     a row's sum of weights is below 2^63 and every sum -- of a row, a bucket, a prefix -- is an
 *     exact integer whatever the order of addition. Tokens with w < 2^-bits (2^-46 at V4.1's
 *     129,280: (z - max) / T below -31.9) get weight 0 and are never drawn; the mass this drops is
 *     below vocab * 2^-bits of the top token's (1.8e-9 at 129,280).
 *   - the draw: U = floor(r * total / 2^53) for Philox's 53 random bits r (u = r / 2^53 as before),
 *     and the token is the first survivor, in ascending id order, whose cumulative weight exceeds U.
 *   - top_p compares doubles rounded from those exact integers (di_sample_u64_to_double is a
 *     correctly rounded conversion on both sides).
 *   - logprobs (the log-softmax over a row, cuda_sample_logprob.cu on the device): its sum of exps
 *     in DI_SAMPLE_EXP_LANES lanes folded in a fixed tree, and di_sample_log written like
 *     di_sample_exp.
 *
 * Philox4x32-10 lives here too (sample/philox.c wraps it for the host). Plain C99 with the
 * qualifiers below: this header is included by C and by CUDA C++. */
#ifndef DI_SAMPLE_SAMPLE_ARITH_H
#define DI_SAMPLE_SAMPLE_ARITH_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define DI_SA_FN __host__ __device__ static inline
#else
#define DI_SA_FN static inline
#endif

#if defined(__clang__) && !defined(__CUDACC__)
#pragma STDC FP_CONTRACT OFF
#endif

/* A request's sampling reduced to what a draw needs when nothing else applies (temperature > 0; no
 * bias, penalty, mask or logprobs: di_sampling_is_plain_sampled), with the position it samples at.
 * The device sampler reads an array of these (one a head row); temperature 0 there means "not a
 * sampled row". 32 bytes, the same layout in C and CUDA. */
typedef struct di_plain_sampling {
    float temperature; /* > 0 */
    float top_p;       /* (0, 1]; 1 = off */
    float min_p;       /* [0, 1]; 0 = off */
    int32_t top_k;     /* >= 0; 0 or >= vocab = off */
    uint64_t seed;     /* the Philox key */
    uint64_t position; /* the sequence position of the token being sampled */
} di_plain_sampling;

/* One IEEE operation each, rounded to nearest, never fused with another. */
#if defined(__CUDA_ARCH__)
#define DI_SA_ADD(a, b) __dadd_rn((a), (b))
#define DI_SA_SUB(a, b) __dsub_rn((a), (b))
#define DI_SA_MUL(a, b) __dmul_rn((a), (b))
#define DI_SA_DIV(a, b) __ddiv_rn((a), (b))
#else
DI_SA_FN double di_sa_add(double a, double b) { return a + b; }
DI_SA_FN double di_sa_sub(double a, double b) { return a - b; }
DI_SA_FN double di_sa_mul(double a, double b) { return a * b; }
DI_SA_FN double di_sa_div(double a, double b) { return a / b; }
#define DI_SA_ADD(a, b) di_sa_add((a), (b))
#define DI_SA_SUB(a, b) di_sa_sub((a), (b))
#define DI_SA_MUL(a, b) di_sa_mul((a), (b))
#define DI_SA_DIV(a, b) di_sa_div((a), (b))
#endif

DI_SA_FN uint64_t di_sa_double_bits(double d) {
#if defined(__CUDA_ARCH__)
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
#endif
}

DI_SA_FN double di_sa_bits_double(uint64_t u) {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)u);
#else
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
#endif
}

DI_SA_FN uint32_t di_sa_float_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

DI_SA_FN float di_sa_bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* A logit as the sampler sees it: NaN -> -inf (never sampled), +inf -> FLT_MAX (the largest finite
 * logit, so +inf tokens share the mass). Branch-free: it runs over every logit of every row. */
DI_SA_FN float di_sample_sanitize(float x) {
    x = x != x ? -INFINITY : x;
    return x > FLT_MAX ? FLT_MAX : x;
}

/* Order-preserving map of a non-NaN float to uint32 (larger float -> larger key; top_k's radix
 * select) and back. */
DI_SA_FN uint32_t di_sample_float_key(float f) {
    const uint32_t u = di_sa_float_bits(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
DI_SA_FN float di_sample_key_float(uint32_t k) { return di_sa_bits_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

/* 2^e for -1022 <= e <= 1023, exactly. */
DI_SA_FN double di_sample_pow2(int e) { return di_sa_bits_double((uint64_t)(e + 1023) << 52); }

/* 2^(j / 64), j = 0..63, correctly rounded; the device reads its own copy (global memory: the lanes
 * of a warp index it apart). */
#define DI_SA_EXP2_64_TABLE { \
    0x1.0000000000000p+0, 0x1.02c9a3e778061p+0, 0x1.059b0d3158574p+0, 0x1.0874518759bc8p+0, \
    0x1.0b5586cf9890fp+0, 0x1.0e3ec32d3d1a2p+0, 0x1.11301d0125b51p+0, 0x1.1429aaea92de0p+0, \
    0x1.172b83c7d517bp+0, 0x1.1a35beb6fcb75p+0, 0x1.1d4873168b9aap+0, 0x1.2063b88628cd6p+0, \
    0x1.2387a6e756238p+0, 0x1.26b4565e27cddp+0, 0x1.29e9df51fdee1p+0, 0x1.2d285a6e4030bp+0, \
    0x1.306fe0a31b715p+0, 0x1.33c08b26416ffp+0, 0x1.371a7373aa9cbp+0, 0x1.3a7db34e59ff7p+0, \
    0x1.3dea64c123422p+0, 0x1.4160a21f72e2ap+0, 0x1.44e086061892dp+0, 0x1.486a2b5c13cd0p+0, \
    0x1.4bfdad5362a27p+0, 0x1.4f9b2769d2ca7p+0, 0x1.5342b569d4f82p+0, 0x1.56f4736b527dap+0, \
    0x1.5ab07dd485429p+0, 0x1.5e76f15ad2148p+0, 0x1.6247eb03a5585p+0, 0x1.6623882552225p+0, \
    0x1.6a09e667f3bcdp+0, 0x1.6dfb23c651a2fp+0, 0x1.71f75e8ec5f74p+0, 0x1.75feb564267c9p+0, \
    0x1.7a11473eb0187p+0, 0x1.7e2f336cf4e62p+0, 0x1.82589994cce13p+0, 0x1.868d99b4492edp+0, \
    0x1.8ace5422aa0dbp+0, 0x1.8f1ae99157736p+0, 0x1.93737b0cdc5e5p+0, 0x1.97d829fde4e50p+0, \
    0x1.9c49182a3f090p+0, 0x1.a0c667b5de565p+0, 0x1.a5503b23e255dp+0, 0x1.a9e6b5579fdbfp+0, \
    0x1.ae89f995ad3adp+0, 0x1.b33a2b84f15fbp+0, 0x1.b7f76f2fb5e47p+0, 0x1.bcc1e904bc1d2p+0, \
    0x1.c199bdd85529cp+0, 0x1.c67f12e57d14bp+0, 0x1.cb720dcef9069p+0, 0x1.d072d4a07897cp+0, \
    0x1.d5818dcfba487p+0, 0x1.da9e603db3285p+0, 0x1.dfc97337b9b5fp+0, 0x1.e502ee78b3ff6p+0, \
    0x1.ea4afa2a490dap+0, 0x1.efa1bee615a27p+0, 0x1.f50765b6e4540p+0, 0x1.fa7c1819e90d8p+0, \
    }
#if defined(__CUDACC__)
static __device__ const double di_sa_exp2_64_dev[64] = DI_SA_EXP2_64_TABLE;
#endif
static const double di_sa_exp2_64[64] = DI_SA_EXP2_64_TABLE;

/* exp(x) for x in [-745, 0] (0 below -745 and for NaN), the same bits on every IEEE machine.
 * x = (64 k + j) ln2 / 64 + r with 64 k + j = round(x * 64 / ln2) (by the 1.5 * 2^52 trick) and
 * ln2 / 64 split so that its product with that integer is exact; then 2^k * 2^(j/64) * p(r) with p
 * the degree-5 Taylor polynomial by Horner (|r| <= ln2 / 128: its remainder is below 2^-54).
 * For k < -1022 the power of two is applied in two exact steps and one rounding into the subnormals. */
#define DI_SA_EXP_TO_N 0x1.71547652b82fep+6    /* 64 / ln 2 */
#define DI_SA_EXP_MAGIC 0x1.8p52               /* x + magic - magic rounds x to an integer */
#define DI_SA_EXP_LN2_HI 0x1.62e42fee00000p-7  /* ln 2 / 64, high part (its products with n exact) */
#define DI_SA_EXP_LN2_LO 0x1.a39ef35793c76p-39 /* ln 2 / 64, low part */
#define DI_SA_EXP_C5 0x1.1111111111111p-7      /* 1 / 5!, 1 / 4!, 1 / 3!, correctly rounded */
#define DI_SA_EXP_C4 0x1.5555555555555p-5
#define DI_SA_EXP_C3 0x1.5555555555555p-3
DI_SA_FN double di_sample_exp(double x) {
    if (!(x >= -745.0)) return 0.0;
    double kd = DI_SA_ADD(DI_SA_MUL(x, DI_SA_EXP_TO_N), DI_SA_EXP_MAGIC); /* x * 64 / ln 2, to an integer */
    kd = DI_SA_SUB(kd, DI_SA_EXP_MAGIC);
    const double r =
        DI_SA_SUB(DI_SA_SUB(x, DI_SA_MUL(kd, DI_SA_EXP_LN2_HI)), DI_SA_MUL(kd, DI_SA_EXP_LN2_LO));
    double p = DI_SA_EXP_C5; /* then 1 / i! for i = 4 .. 0 by Horner */
    p = DI_SA_ADD(DI_SA_MUL(p, r), DI_SA_EXP_C4);
    p = DI_SA_ADD(DI_SA_MUL(p, r), DI_SA_EXP_C3);
    p = DI_SA_ADD(DI_SA_MUL(p, r), 0x1p-1);
    p = DI_SA_ADD(DI_SA_MUL(p, r), 0x1p+0);
    p = DI_SA_ADD(DI_SA_MUL(p, r), 0x1p+0);
    const int n = (int)kd; /* in [-68,800, 0] */
    const int j = n & 63, k = (n - j) / 64;
#if defined(__CUDA_ARCH__)
    const double t = di_sa_exp2_64_dev[j];
#else
    const double t = di_sa_exp2_64[j];
#endif
    p = DI_SA_MUL(p, t);
    if (k >= -1022) return DI_SA_MUL(p, di_sample_pow2(k));
    return DI_SA_MUL(DI_SA_MUL(p, di_sample_pow2(-511)), di_sample_pow2(k + 511));
}

/* log(x), the same bits on every IEEE machine (adds, multiplies and one divide, each rounded once):
 * x = 2^k m with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f / (2 + f), and
 * log(m) = 2 atanh(s) = 2s + s R = f - s (f - R) with R = 2 (z/3 + z^2/5 + ... + z^9/19), z = s^2
 * <= 0.0295 (the series' next term is below 2^-54 of 2s); then k ln 2 with ln 2 split so that k
 * times its high part is exact. Within ~1 ulp of libm's log (tests/test_sampler.c); 0 -> -inf,
 * +inf -> +inf, x < 0 or NaN -> NaN. The log-softmax's lse is max + di_sample_log(exp sum) on the
 * host and on the device alike (libm's and CUDA's log may differ in the last bit). */
#define DI_SA_LOG_SQRT2 0x1.6a09e667f3bcdp+0
#define DI_SA_LOG_LN2_HI 0x1.62e42fee00000p-1 /* ln 2, high part (k times it exact for |k| < 2^11) */
#define DI_SA_LOG_LN2_LO 0x1.a39ef35793c76p-33
DI_SA_FN double di_sample_log(double x) {
    if (!(x > 0.0)) return x == 0.0 ? -INFINITY : NAN;
    if (x > DBL_MAX) return x;
    int k = 0;
    if (x < 0x1p-1022) { /* subnormal: scaled by 2^54, exactly */
        x = DI_SA_MUL(x, 0x1p54);
        k = -54;
    }
    const uint64_t u = di_sa_double_bits(x);
    k += (int)(u >> 52) - 1023;
    double m = di_sa_bits_double((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull); /* [1, 2) */
    if (m > DI_SA_LOG_SQRT2) {
        m = DI_SA_MUL(m, 0.5);
        k++;
    }
    const double f = DI_SA_SUB(m, 1.0);
    const double s = DI_SA_DIV(f, DI_SA_ADD(2.0, f));
    const double z = DI_SA_MUL(s, s);
    double p = 0x1.af286bca1af28p-4; /* 2 / 19, then 2 / 17 .. 2 / 3 by Horner, correctly rounded */
    p = DI_SA_ADD(DI_SA_MUL(p, z), 0x1.e1e1e1e1e1e1ep-4);
    p = DI_SA_ADD(DI_SA_MUL(p, z), 0x1.1111111111111p-3);
    p = DI_SA_ADD(DI_SA_MUL(p, z), 0x1.3b13b13b13b14p-3);
    p = DI_SA_ADD(DI_SA_MUL(p, z), 0x1.745d1745d1746p-3);
    p = DI_SA_ADD(DI_SA_MUL(p, z), 0x1.c71c71c71c71cp-3);
    p = DI_SA_ADD(DI_SA_MUL(p, z), 0x1.2492492492492p-2);
    p = DI_SA_ADD(DI_SA_MUL(p, z), 0x1.999999999999ap-2);
    p = DI_SA_ADD(DI_SA_MUL(p, z), 0x1.5555555555555p-1);
    const double R = DI_SA_MUL(p, z);
    const double log1p_f = DI_SA_SUB(f, DI_SA_MUL(s, DI_SA_SUB(f, R)));
    const double kd = (double)k;
    return DI_SA_ADD(DI_SA_MUL(kd, DI_SA_LOG_LN2_HI), DI_SA_ADD(log1p_f, DI_SA_MUL(kd, DI_SA_LOG_LN2_LO)));
}

/* The log-softmax's normaliser: sum over a row of exp(sanitise(z) - max) (max: the row's largest
 * sanitised value), added in an order a device reproduces: DI_SAMPLE_EXP_LANES partial sums, id i
 * into lane i % DI_SAMPLE_EXP_LANES in id order (a thread a lane on the device, vectors of lanes on
 * the host), then folded by di_sample_fold_lanes. Terms below e^-708 count 0: they cannot change a
 * sum that holds the max's 1. */
#define DI_SAMPLE_EXP_LANES 256
#define DI_SAMPLE_EXP_SUM_FLOOR -708.0
DI_SA_FN double di_sample_exp_term(float z, float max) {
    const double d = DI_SA_SUB((double)di_sample_sanitize(z), (double)max);
    return d >= DI_SAMPLE_EXP_SUM_FLOOR ? di_sample_exp(d) : 0.0;
}
/* s[i] += s[i + w] for w = LANES / 2, LANES / 4, .., 1; the sum is then s[0] (a device runs each
 * w's adds at once). */
DI_SA_FN double di_sample_fold_lanes(double *s) {
    for (int w = DI_SAMPLE_EXP_LANES / 2; w > 0; w >>= 1)
        for (int i = 0; i < w; i++) s[i] = DI_SA_ADD(s[i], s[i + w]);
    return s[0];
}

/* A best-first list of at most cap (value, id) pairs -- value desc, then id asc -- offered ids in
 * ascending order: (v, i) goes in where it belongs, the last one drops out when the list is full; a
 * value equal to the last listed one does not enter (that id is lower), nor a non-finite one. The
 * host's logprob lists (sampler.c) and each device thread's (cuda_sample_logprob.cu) are this. */
DI_SA_FN void di_sample_top_insert(double *value, int32_t *id, int32_t *n, int32_t cap, double v, int32_t i) {
    if (cap <= 0 || !isfinite(v)) return;
    if (*n == cap) {
        if (!(v > value[*n - 1])) return;
        (*n)--;
    }
    int32_t k = (*n)++;
    for (; k > 0 && value[k - 1] < v; k--) {
        value[k] = value[k - 1];
        id[k] = id[k - 1];
    }
    value[k] = v;
    id[k] = i;
}

/* ceil(log2(vocab)): the bits a token id needs in a key. */
DI_SA_FN int di_sample_id_bits(int64_t vocab) {
    int b = 0;
    while (((int64_t)1 << b) < vocab) b++;
    return b;
}

/* The fixed-point position of a weight: W = floor(w * 2^bits) <= 2^bits, and vocab such weights sum
 * below 2^63. */
DI_SA_FN int di_sample_weight_bits(int64_t vocab) { return 63 - di_sample_id_bits(vocab); }

/* floor(w * 2^bits) for w in [0, 1] (the multiply is exact; the conversion truncates). */
DI_SA_FN uint64_t di_sample_weight_fixed(double w, int bits) {
    return (uint64_t)DI_SA_MUL(w, di_sample_pow2(bits));
}

/* The weight (0 = not a candidate) of a sanitised logit z under the filters' thresholds: z below
 * the top_k value (or -inf), w = exp((z - max) * inv_t) below min_p, or a fixed-point weight of 0;
 * inv_t = di_sample_inv_temperature(T) (a multiply a token, not a division: a double division is a
 * long instruction sequence on a GPU). Arguments below `skip` (exp < 2^-(bits+1), or certainly
 * < min_p) skip the exp: only a shortcut, the result is the same. */
DI_SA_FN double di_sample_inv_temperature(float temperature) { return 1.0 / (double)temperature; }
DI_SA_FN uint64_t di_sample_weight(float z, float max, float kth, double inv_t, double min_p, double skip, int bits) {
    if (!(z >= kth) || z == -INFINITY) return 0; /* below top_k, or -inf */
    const double x = DI_SA_MUL(DI_SA_SUB((double)z, (double)max), inv_t);
    if (x < skip) return 0;
    const double w = di_sample_exp(x);
    if (w < min_p) return 0;
    return di_sample_weight_fixed(w, bits);
}

/* The `skip` of di_sample_weight: below it exp(x) * 2^bits < 1/2 (for every x of this exp's ~2 ulp),
 * and, when min_p > 0, exp(x) < min_p; ln_min_p = log(min_p) or anything below (the device has no
 * libm log of the host's: it passes -inf). */
DI_SA_FN double di_sample_skip_below(int bits, double ln_min_p) {
    const double no_weight = -0x1.62e42fefa39efp-1 * (double)(bits + 1); /* -(bits + 1) ln 2 */
    const double below_min_p = ln_min_p - 1e-6;
    return below_min_p > no_weight ? below_min_p : no_weight;
}

/* Correctly rounded u64 -> double (round to nearest even), written out so no compiler or device
 * conversion is trusted for it. */
DI_SA_FN double di_sample_u64_to_double(uint64_t v) {
    if (v < ((uint64_t)1 << 53)) return (double)(int64_t)v; /* exact */
#if defined(__CUDA_ARCH__)
    const int shift = 11 - __clzll((long long)v); /* v >> shift has 53 bits */
#else
    const int shift = 11 - __builtin_clzll(v);
#endif
    uint64_t m = v >> shift;
    const uint64_t rest = v & (((uint64_t)1 << shift) - 1), half = (uint64_t)1 << (shift - 1);
    if (rest > half || (rest == half && (m & 1))) m++; /* m may reach 2^53: still exact below */
    return DI_SA_MUL((double)(int64_t)m, di_sample_pow2(shift));
}

/* floor(a * b / 2^53) for a < 2^53, b < 2^63: U of the draw, from a 128-bit product. */
DI_SA_FN uint64_t di_sample_mul_shift53(uint64_t a, uint64_t b) {
    const uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    const uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    const uint64_t lo = (mid << 32) | (p00 & 0xffffffffu);
    const uint64_t hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
    return (hi << 11) | (lo >> 53);
}

/* Buckets of weights for top_p: the leading bit's place and the next three bits (eight buckets an
 * octave), monotone in W; W > 0 gives 0..511. */
#define DI_SAMPLE_WEIGHT_BUCKETS 512
DI_SA_FN uint32_t di_sample_weight_bucket(uint64_t w) {
#if defined(__CUDA_ARCH__)
    const int lead = 63 - __clzll((long long)w);
#else
    const int lead = 63 - __builtin_clzll(w);
#endif
    const uint32_t next3 = lead >= 3 ? (uint32_t)(w >> (lead - 3)) & 7u : (uint32_t)(w << (3 - lead)) & 7u;
    return (uint32_t)lead * 8u + next3;
}

/* Philox4x32-10 (Salmon et al., SC'11; Random123's constants): out = f(ctr, key). */
DI_SA_FN void di_philox4x32_10_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u; /* golden ratio */
            k1 += 0xBB67AE85u; /* sqrt(3) - 1 */
        }
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        const uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        c1 = (uint32_t)p1;
        c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c3 = (uint32_t)p0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* 53 random bits for (seed, position, stream): the first two words of Philox4x32-10 with counter
 * {position lo, position hi, stream, 0} and key {seed lo, seed hi}. */
DI_SA_FN uint64_t di_philox_bits53(uint64_t seed, uint64_t position, uint32_t stream) {
    const uint32_t ctr[4] = {(uint32_t)position, (uint32_t)(position >> 32), stream, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t r[4];
    di_philox4x32_10_block(ctr, key, r);
    return ((uint64_t)r[0] << 21) | (r[1] >> 11);
}

#endif
