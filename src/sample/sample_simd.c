/* The host sampler's row passes in a scalar and two x86 vector forms (see sample_simd.h).
 *
 * The weight pass's vector step is di_sample_weight on 4 (AVX2) or 8 (AVX-512F) tokens at once,
 * operation for operation:
 *   ok = z >= kth && z != -inf && x >= skip,      x = (z - max) * inv_t      (compares in double: exact)
 *   x' = ok ? x : 0                                 (so the exp below never leaves the normal range:
 *                                                    skip >= -(63 + 1) ln 2 > -708)
 *   di_sample_exp(x'): the same reduction, polynomial and 2^(j/64) table (a gather), then * 2^k built
 *   from k's bits -- k >= -1022 always, so the scalar form's other branch is never taken
 *   ok &= w >= min_p
 *   W = floor(w * 2^bits): y = w * 2^bits is exact; t = (y + 2^52) - 2^52 rounds it to an integer,
 *   t -= 1 where t > y; W = bits(t + 2^52) - bits(2^52). Exact for y <= 2^52, hence bits <= 52 (a
 *   vocabulary past 1,024 tokens); smaller vocabularies take the scalar form.
 *   bucket: t = W as a double, so its exponent is W's leading bit's place and its top three mantissa
 *   bits are the three below it: bits(t) >> 49 = (lead + 1023) * 8 + next3, di_sample_weight_bucket's
 *   value plus 1023 * 8.
 * The exp sum's vector step is the same exp on 4 / 8 values d = z - max at once (0 below -708 in
 * every form, so 2^k stays normal); its partial sums are the vector's lanes (AVX2: two vectors),
 * i.e. sum i % 8.
 * No multiply is fused with an add: the intrinsics are separate instructions and the file is C11
 * (GCC: -ffp-contract=off). */
#include "sample/sample_simd.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "sample/sample_arith.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DI_SAMPLE_X86 1
#include <immintrin.h>
#endif

_Static_assert(DI_SAMPLE_NO_BUCKET == DI_SAMPLE_WEIGHT_BUCKETS, "the no-weight bucket is one past the last");

#define TWO52 0x1p52
#define BUCKET_BIAS (1023 * 8)
/* The exp sum's terms below e^-708 (< 2^-1021) are 0: the sum holds the max's 1, so they could
 * not change it, and the vector forms' 2^k stays normal. */
#define EXP_SUM_FLOOR DI_SAMPLE_EXP_SUM_FLOOR
#define LANES DI_SAMPLE_EXP_LANES

/* ---- scalar forms (also the vector forms' tails) ---- */

static void copy_scalar(float *dst, const float *src, int32_t from, int32_t n) {
    for (int32_t i = from; i < n; i++) dst[i] = di_sample_sanitize(src[i]);
}

static void mask_scalar(float *z, const uint32_t *allowed, int32_t from, int32_t n) {
    for (int32_t i = from; i < n; i++)
        if (!((allowed[i >> 5] >> (i & 31)) & 1u)) z[i] = -INFINITY;
}

/* The first id in [from, n) whose sanitised value equals m, or -1. */
static int32_t find_scalar(const float *z, int32_t from, int32_t n, float m) {
    for (int32_t i = from; i < n; i++)
        if (di_sample_sanitize(z[i]) == m) return i;
    return -1;
}

static int32_t argmax_scalar(const float *z, int32_t n, bool raw, float *max) {
    float best = -INFINITY;
    int32_t argmax = -1;
    for (int32_t i = 0; i < n; i++) {
        const float v = raw ? di_sample_sanitize(z[i]) : z[i];
        if (v > best) { /* strict: ties go to the lowest id */
            best = v;
            argmax = i;
        }
    }
    *max = best;
    return argmax;
}

static int32_t find_at_least_scalar(const float *z, int32_t from, int32_t n, float thr) {
    for (int32_t i = from; i < n; i++)
        if (di_sample_sanitize(z[i]) >= thr) return i;
    return n;
}

static int32_t find_u16_scalar(const uint16_t *a, int32_t from, int32_t n, uint16_t v) {
    for (int32_t i = from; i < n; i++)
        if (a[i] == v) return i;
    return n;
}

/* The draw's walk from id `from` with the weight before it `acc`. */
static int32_t draw_scalar(const uint64_t *w, int32_t from, int32_t n, uint64_t cut_w, int32_t cut_id, uint64_t acc,
                           uint64_t target) {
    int32_t id = from;
    for (; id < n - 1; id++) {
        acc += w[id] & -(uint64_t)di_sample_kept(w[id], id, cut_w, cut_id); /* branch-free: crossed at random */
        if (acc > target) break;
    }
    return id;
}


/* Adds ids [from, n) into the partial sums (from: a multiple of 8). */
/* from: a multiple of LANES (id i adds into lane i % LANES) */
static void exp_sum_scalar(const float *z, int32_t from, int32_t n, float max, double s[LANES]) {
    for (int32_t i = from; i < n; i++) s[i % LANES] = DI_SA_ADD(s[i % LANES], di_sample_exp_term(z[i], max));
}

static uint64_t weights_scalar(const float *z, int32_t from, int32_t n, const di_weight_filter *f, uint64_t *w,
                               uint16_t *bucket) {
    uint64_t sum = 0;
    for (int32_t i = from; i < n; i++) {
        w[i] = di_sample_weight(z[i], f->max, f->kth, f->inv_t, f->min_p, f->skip, f->bits);
        if (bucket) bucket[i] = w[i] ? (uint16_t)di_sample_weight_bucket(w[i]) : DI_SAMPLE_NO_BUCKET;
        sum += w[i];
    }
    return sum;
}


#if DI_SAMPLE_X86
/* ---- AVX2: 8 floats, 4 doubles a step ---- */

__attribute__((target("avx2"))) static inline __m256 sanitize8(__m256 v) {
    v = _mm256_blendv_ps(v, _mm256_set1_ps(-INFINITY), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_min_ps(v, _mm256_set1_ps(FLT_MAX));
}

__attribute__((target("avx2"))) static void copy_avx2(float *dst, const float *src, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, sanitize8(_mm256_loadu_ps(src + i)));
    copy_scalar(dst, src, i, n);
}

/* 8 ids a step: their byte of the mask spread over the lanes. */
__attribute__((target("avx2"))) static void mask_avx2(float *z, const uint32_t *allowed, int32_t n) {
    const unsigned char *bytes = (const unsigned char *)allowed; /* little-endian: ids 8j .. 8j + 7 in byte j */
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 minus_inf = _mm256_set1_ps(-INFINITY);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i set = _mm256_and_si256(_mm256_set1_epi32(bytes[i >> 3]), bit);
        const __m256 clear = _mm256_castsi256_ps(_mm256_cmpeq_epi32(set, _mm256_setzero_si256()));
        _mm256_storeu_ps(z + i, _mm256_blendv_ps(_mm256_loadu_ps(z + i), minus_inf, clear));
    }
    mask_scalar(z, allowed, i, n);
}

__attribute__((target("avx2"))) static int32_t argmax_avx2(const float *z, int32_t n, bool raw, float *max) {
    __m256 best = _mm256_set1_ps(-INFINITY);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) { /* no NaN after sanitize8: max_ps is a plain maximum */
        const __m256 v = _mm256_loadu_ps(z + i);
        best = _mm256_max_ps(best, raw ? sanitize8(v) : v);
    }
    float lanes[8], m = -INFINITY;
    _mm256_storeu_ps(lanes, best);
    for (int l = 0; l < 8; l++) m = lanes[l] > m ? lanes[l] : m;
    for (int32_t t = i; t < n; t++) {
        const float v = di_sample_sanitize(z[t]);
        m = v > m ? v : m;
    }
    *max = m;
    if (m == -INFINITY) return -1;
    const __m256 mv = _mm256_set1_ps(m);
    for (i = 0; i + 8 <= n; i += 8) { /* -0 == +0: the first of either, as the scalar form */
        const __m256 v = _mm256_loadu_ps(z + i);
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(raw ? sanitize8(v) : v, mv, _CMP_EQ_OQ));
        if (hit) {
            const int32_t id = i + __builtin_ctz((unsigned)hit);
            *max = di_sample_sanitize(z[id]);
            return id;
        }
    }
    const int32_t id = find_scalar(z, i, n, m);
    *max = di_sample_sanitize(z[id]);
    return id;
}

__attribute__((target("avx2"))) static int32_t find_u16_avx2(const uint16_t *a, int32_t from, int32_t n, uint16_t v) {
    const __m256i t = _mm256_set1_epi16((short)v);
    int32_t i = from;
    for (; i + 16 <= n; i += 16) {
        const int hit = _mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)(a + i)), t));
        if (hit) return i + __builtin_ctz((unsigned)hit) / 2;
    }
    return find_u16_scalar(a, i, n, v);
}

/* The walk 16 ids a step: a step's kept weight in one sum (di_sample_kept in lanes), the step that
 * crosses walked alone. */
__attribute__((target("avx2"))) static int32_t draw_avx2(const uint64_t *w, int32_t n, uint64_t cut_w, int32_t cut_id,
                                                         uint64_t target) {
    const __m256i cw = _mm256_set1_epi64x((long long)cut_w), cid = _mm256_set1_epi64x(cut_id);
    const __m256i four = _mm256_set1_epi64x(4);
    uint64_t acc = 0;
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i ids = _mm256_setr_epi64x(i, i + 1, i + 2, i + 3), sum = _mm256_setzero_si256();
        for (int q = 0; q < 4; q++, ids = _mm256_add_epi64(ids, four)) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w + i + 4 * q)); /* < 2^63: signed compares */
            const __m256i kept = _mm256_or_si256(
                _mm256_cmpgt_epi64(v, cw),
                _mm256_andnot_si256(_mm256_cmpgt_epi64(ids, cid), _mm256_cmpeq_epi64(v, cw)));
            sum = _mm256_add_epi64(sum, _mm256_and_si256(v, kept));
        }
        uint64_t lanes[4];
        _mm256_storeu_si256((__m256i *)lanes, sum);
        const uint64_t step = lanes[0] + lanes[1] + lanes[2] + lanes[3];
        if (acc + step > target) break;
        acc += step;
    }
    return draw_scalar(w, i, n, cut_w, cut_id, acc, target);
}

__attribute__((target("avx2"))) static int32_t find_at_least_avx2(const float *z, int32_t from, int32_t n, float thr) {
    const __m256 t = _mm256_set1_ps(thr);
    int32_t i = from;
    for (; i + 8 <= n; i += 8) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(sanitize8(_mm256_loadu_ps(z + i)), t, _CMP_GE_OQ));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    return find_at_least_scalar(z, i, n, thr);
}

/* di_sample_exp(x) of 4 values x in [-708, 0] (2^k stays normal: the scalar form's first branch). */
__attribute__((target("avx2"))) static inline __m256d exp4(__m256d x) {
    const __m256d one = _mm256_set1_pd(1.0);
    __m256d kd = _mm256_add_pd(_mm256_mul_pd(x, _mm256_set1_pd(DI_SA_EXP_TO_N)), _mm256_set1_pd(DI_SA_EXP_MAGIC));
    kd = _mm256_sub_pd(kd, _mm256_set1_pd(DI_SA_EXP_MAGIC));
    const __m256d r = _mm256_sub_pd(_mm256_sub_pd(x, _mm256_mul_pd(kd, _mm256_set1_pd(DI_SA_EXP_LN2_HI))),
                                    _mm256_mul_pd(kd, _mm256_set1_pd(DI_SA_EXP_LN2_LO)));
    __m256d p = _mm256_set1_pd(DI_SA_EXP_C5);
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(DI_SA_EXP_C4));
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(DI_SA_EXP_C3));
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0.5));
    p = _mm256_add_pd(_mm256_mul_pd(p, r), one);
    p = _mm256_add_pd(_mm256_mul_pd(p, r), one);
    const __m128i nn = _mm256_cvttpd_epi32(kd); /* [4] int32, exact */
    const __m128i j = _mm_and_si128(nn, _mm_set1_epi32(63));
    const __m128i k = _mm_srai_epi32(_mm_sub_epi32(nn, j), 6); /* >= -1022 */
    p = _mm256_mul_pd(p, _mm256_i32gather_pd(di_sa_exp2_64, j, 8));
    const __m256i e = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(k), _mm256_set1_epi64x(1023)), 52);
    return _mm256_mul_pd(p, _mm256_castsi256_pd(e));
}

/* The exp sum's terms of 4 values d = z - max <= 0: di_sample_exp(d), 0 below EXP_SUM_FLOOR. */
__attribute__((target("avx2"))) static inline __m256d exp_term4(__m256d d) {
    const __m256d valid = _mm256_cmp_pd(d, _mm256_set1_pd(EXP_SUM_FLOOR), _CMP_GE_OQ);
    return _mm256_and_pd(exp4(_mm256_blendv_pd(_mm256_setzero_pd(), d, valid)), valid);
}

__attribute__((target("avx2"))) static double exp_sum_avx2(const float *z, int32_t n, float max) {
    const __m256d m = _mm256_set1_pd((double)max);
    __m256d acc[LANES / 4]; /* lanes 4j .. 4j + 3 */
    for (int j = 0; j < LANES / 4; j++) acc[j] = _mm256_setzero_pd();
    int32_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES / 4; j += 2) {
            const __m256 v = sanitize8(_mm256_loadu_ps(z + i + 4 * j));
            acc[j] = _mm256_add_pd(acc[j], exp_term4(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), m)));
            acc[j + 1] =
                _mm256_add_pd(acc[j + 1], exp_term4(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), m)));
        }
    double s[LANES];
    for (int j = 0; j < LANES / 4; j++) _mm256_storeu_pd(s + 4 * j, acc[j]);
    exp_sum_scalar(z, i, n, max, s);
    return di_sample_fold_lanes(s);
}

__attribute__((target("avx2"))) static uint64_t weights_avx2(const float *z, int32_t n, const di_weight_filter *f,
                                                             uint64_t *w, uint16_t *bucket) {
    const __m256d max = _mm256_set1_pd((double)f->max), kth = _mm256_set1_pd((double)f->kth);
    const __m256d inv_t = _mm256_set1_pd(f->inv_t), skip = _mm256_set1_pd(f->skip);
    const __m256d min_p = _mm256_set1_pd(f->min_p), minus_inf = _mm256_set1_pd(-INFINITY);
    const __m256d scale = _mm256_set1_pd(di_sample_pow2(f->bits)), two52 = _mm256_set1_pd(TWO52);
    const __m256d one = _mm256_set1_pd(1.0), zero = _mm256_setzero_pd();
    const __m256i two52_bits = _mm256_castpd_si256(two52);
    const __m256i bucket_bias = _mm256_set1_epi64x(BUCKET_BIAS), no_bucket = _mm256_set1_epi64x(DI_SAMPLE_NO_BUCKET);
    const __m256i low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    __m256i sum = _mm256_setzero_si256();
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m256d zd = _mm256_cvtps_pd(_mm_loadu_ps(z + i)); /* [4] */
        const __m256d x = _mm256_mul_pd(_mm256_sub_pd(zd, max), inv_t);
        __m256d ok = _mm256_and_pd(_mm256_cmp_pd(zd, kth, _CMP_GE_OQ), _mm256_cmp_pd(zd, minus_inf, _CMP_NEQ_OQ));
        ok = _mm256_and_pd(ok, _mm256_cmp_pd(x, skip, _CMP_GE_OQ));
        const __m256d wd = exp4(_mm256_blendv_pd(zero, x, ok));
        ok = _mm256_and_pd(ok, _mm256_cmp_pd(wd, min_p, _CMP_GE_OQ));
        const __m256d y = _mm256_mul_pd(wd, scale);
        __m256d t = _mm256_sub_pd(_mm256_add_pd(y, two52), two52);
        t = _mm256_sub_pd(t, _mm256_and_pd(_mm256_cmp_pd(t, y, _CMP_GT_OQ), one));
        __m256i W = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(t, two52)), two52_bits);
        W = _mm256_and_si256(W, _mm256_castpd_si256(ok));
        _mm256_storeu_si256((__m256i *)(w + i), W);
        sum = _mm256_add_epi64(sum, W);
        if (bucket) {
            const __m256i b = _mm256_sub_epi64(_mm256_srli_epi64(_mm256_castpd_si256(t), 49), bucket_bias);
            const __m256i has = _mm256_cmpgt_epi64(W, _mm256_setzero_si256()); /* W < 2^63 */
            const __m256i b64 = _mm256_blendv_epi8(no_bucket, b, has);        /* [4] in the low 32 bits */
            const __m128i b32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b64, low_halves));
            _mm_storel_epi64((__m128i *)(bucket + i), _mm_packus_epi32(b32, b32));
        }
    }
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, sum);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + weights_scalar(z, i, n, f, w, bucket);
}

/* ---- AVX-512F: 16 floats, 8 doubles a step ---- */

__attribute__((target("avx512f"))) static inline __m512 sanitize16(__m512 v) {
    v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_ps(-INFINITY));
    return _mm512_min_ps(v, _mm512_set1_ps(FLT_MAX));
}

__attribute__((target("avx512f"))) static void copy_avx512(float *dst, const float *src, int32_t n) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, sanitize16(_mm512_loadu_ps(src + i)));
    copy_scalar(dst, src, i, n);
}

/* 16 ids a step: their 16 bits of the mask are the store's lane mask. */
__attribute__((target("avx512f"))) static void mask_avx512(float *z, const uint32_t *allowed, int32_t n) {
    const unsigned char *bytes = (const unsigned char *)allowed; /* little-endian: ids 8j .. 8j + 7 in byte j */
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint16_t half;
        memcpy(&half, bytes + (i >> 3), sizeof half);
        _mm512_mask_storeu_ps(z + i, (__mmask16)~half, _mm512_set1_ps(-INFINITY));
    }
    mask_scalar(z, allowed, i, n);
}

__attribute__((target("avx512f"))) static int32_t argmax_avx512(const float *z, int32_t n, bool raw, float *max) {
    __m512 best = _mm512_set1_ps(-INFINITY);
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(z + i);
        best = _mm512_max_ps(best, raw ? sanitize16(v) : v);
    }
    float lanes[16], m = -INFINITY;
    _mm512_storeu_ps(lanes, best);
    for (int l = 0; l < 16; l++) m = lanes[l] > m ? lanes[l] : m;
    for (int32_t t = i; t < n; t++) {
        const float v = di_sample_sanitize(z[t]);
        m = v > m ? v : m;
    }
    *max = m;
    if (m == -INFINITY) return -1;
    const __m512 mv = _mm512_set1_ps(m);
    for (i = 0; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(z + i);
        const __mmask16 hit = _mm512_cmp_ps_mask(raw ? sanitize16(v) : v, mv, _CMP_EQ_OQ);
        if (hit) {
            const int32_t id = i + __builtin_ctz((unsigned)hit);
            *max = di_sample_sanitize(z[id]);
            return id;
        }
    }
    const int32_t id = find_scalar(z, i, n, m);
    *max = di_sample_sanitize(z[id]);
    return id;
}

__attribute__((target("avx512f"))) static int32_t find_at_least_avx512(const float *z, int32_t from, int32_t n,
                                                                      float thr) {
    const __m512 t = _mm512_set1_ps(thr);
    int32_t i = from;
    for (; i + 16 <= n; i += 16) {
        const __mmask16 hit = _mm512_cmp_ps_mask(sanitize16(_mm512_loadu_ps(z + i)), t, _CMP_GE_OQ);
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    return find_at_least_scalar(z, i, n, thr);
}

/* di_sample_exp(x) of 8 values x in [-708, 0]. */
__attribute__((target("avx512f"))) static inline __m512d exp8(__m512d x) {
    const __m512d one = _mm512_set1_pd(1.0);
    __m512d kd = _mm512_add_pd(_mm512_mul_pd(x, _mm512_set1_pd(DI_SA_EXP_TO_N)), _mm512_set1_pd(DI_SA_EXP_MAGIC));
    kd = _mm512_sub_pd(kd, _mm512_set1_pd(DI_SA_EXP_MAGIC));
    const __m512d r = _mm512_sub_pd(_mm512_sub_pd(x, _mm512_mul_pd(kd, _mm512_set1_pd(DI_SA_EXP_LN2_HI))),
                                    _mm512_mul_pd(kd, _mm512_set1_pd(DI_SA_EXP_LN2_LO)));
    __m512d p = _mm512_set1_pd(DI_SA_EXP_C5);
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(DI_SA_EXP_C4));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(DI_SA_EXP_C3));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(0.5));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), one);
    p = _mm512_add_pd(_mm512_mul_pd(p, r), one);
    const __m256i nn = _mm512_cvttpd_epi32(kd); /* [8] int32, exact */
    const __m256i j = _mm256_and_si256(nn, _mm256_set1_epi32(63));
    const __m256i k = _mm256_srai_epi32(_mm256_sub_epi32(nn, j), 6); /* >= -1022 */
    p = _mm512_mul_pd(p, _mm512_i32gather_pd(j, di_sa_exp2_64, 8));
    const __m512i e = _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(k), _mm512_set1_epi64(1023)), 52);
    return _mm512_mul_pd(p, _mm512_castsi512_pd(e));
}

__attribute__((target("avx512f"))) static inline __m512d exp_term8(__m512d d) {
    const __mmask8 valid = _mm512_cmp_pd_mask(d, _mm512_set1_pd(EXP_SUM_FLOOR), _CMP_GE_OQ);
    return _mm512_maskz_mov_pd(valid, exp8(_mm512_maskz_mov_pd(valid, d)));
}

__attribute__((target("avx512f"))) static double exp_sum_avx512(const float *z, int32_t n, float max) {
    const __m512d m = _mm512_set1_pd((double)max);
    __m512d acc[LANES / 8]; /* lanes 8j .. 8j + 7 */
    for (int j = 0; j < LANES / 8; j++) acc[j] = _mm512_setzero_pd();
    int32_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES / 8; j++)
            acc[j] = _mm512_add_pd(
                acc[j], exp_term8(_mm512_sub_pd(_mm512_cvtps_pd(sanitize8(_mm256_loadu_ps(z + i + 8 * j))), m)));
    double s[LANES];
    for (int j = 0; j < LANES / 8; j++) _mm512_storeu_pd(s + 8 * j, acc[j]);
    exp_sum_scalar(z, i, n, max, s);
    return di_sample_fold_lanes(s);
}

__attribute__((target("avx512f"))) static uint64_t weights_avx512(const float *z, int32_t n,
                                                                  const di_weight_filter *f, uint64_t *w,
                                                                  uint16_t *bucket) {
    const __m512d max = _mm512_set1_pd((double)f->max), kth = _mm512_set1_pd((double)f->kth);
    const __m512d inv_t = _mm512_set1_pd(f->inv_t), skip = _mm512_set1_pd(f->skip);
    const __m512d min_p = _mm512_set1_pd(f->min_p), minus_inf = _mm512_set1_pd(-INFINITY);
    const __m512d scale = _mm512_set1_pd(di_sample_pow2(f->bits)), two52 = _mm512_set1_pd(TWO52);
    const __m512d one = _mm512_set1_pd(1.0);
    const __m512i two52_bits = _mm512_castpd_si512(two52);
    const __m512i bucket_bias = _mm512_set1_epi64(BUCKET_BIAS), no_bucket = _mm512_set1_epi64(DI_SAMPLE_NO_BUCKET);
    __m512i sum = _mm512_setzero_si512();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m512d zd = _mm512_cvtps_pd(_mm256_loadu_ps(z + i)); /* [8] */
        const __m512d x = _mm512_mul_pd(_mm512_sub_pd(zd, max), inv_t);
        __mmask8 ok = _mm512_cmp_pd_mask(zd, kth, _CMP_GE_OQ) & _mm512_cmp_pd_mask(zd, minus_inf, _CMP_NEQ_OQ) &
                      _mm512_cmp_pd_mask(x, skip, _CMP_GE_OQ);
        const __m512d wd = exp8(_mm512_maskz_mov_pd(ok, x));
        ok &= _mm512_cmp_pd_mask(wd, min_p, _CMP_GE_OQ);
        const __m512d y = _mm512_mul_pd(wd, scale);
        __m512d t = _mm512_sub_pd(_mm512_add_pd(y, two52), two52);
        t = _mm512_mask_sub_pd(t, _mm512_cmp_pd_mask(t, y, _CMP_GT_OQ), t, one);
        const __m512i W =
            _mm512_maskz_sub_epi64(ok, _mm512_castpd_si512(_mm512_add_pd(t, two52)), two52_bits);
        _mm512_storeu_si512((void *)(w + i), W);
        sum = _mm512_add_epi64(sum, W);
        if (bucket) {
            const __m512i b = _mm512_sub_epi64(_mm512_srli_epi64(_mm512_castpd_si512(t), 49), bucket_bias);
            const __m512i b64 = _mm512_mask_mov_epi64(no_bucket, _mm512_test_epi64_mask(W, W), b);
            _mm_storeu_si128((__m128i *)(bucket + i), _mm512_cvtepi64_epi16(b64));
        }
    }
    uint64_t lanes[8];
    _mm512_storeu_si512((void *)lanes, sum);
    uint64_t total = 0;
    for (int l = 0; l < 8; l++) total += lanes[l];
    return total + weights_scalar(z, i, n, f, w, bucket);
}
#endif

/* Asked on every call: __builtin_cpu_supports reads flags libgcc set at start-up. */
di_sample_form di_sample_best_form(void) {
#if DI_SAMPLE_X86
    if (__builtin_cpu_supports("avx512f")) return DI_SAMPLE_AVX512;
    if (__builtin_cpu_supports("avx2")) return DI_SAMPLE_AVX2;
#endif
    return DI_SAMPLE_SCALAR;
}

/* A form this CPU runs: the one asked for, or the scalar one. */
static di_sample_form runnable(di_sample_form form) { return form <= di_sample_best_form() ? form : DI_SAMPLE_SCALAR; }

void di_sample_sanitized_copy(di_sample_form form, float *dst, const float *src, int32_t n) {
    switch (runnable(form)) {
#if DI_SAMPLE_X86
    case DI_SAMPLE_AVX512: copy_avx512(dst, src, n); return;
    case DI_SAMPLE_AVX2: copy_avx2(dst, src, n); return;
#endif
    default: copy_scalar(dst, src, 0, n); return;
    }
}

void di_sample_apply_mask(di_sample_form form, float *z, const uint32_t *allowed, int32_t n) {
    switch (runnable(form)) {
#if DI_SAMPLE_X86
    case DI_SAMPLE_AVX512: mask_avx512(z, allowed, n); return;
    case DI_SAMPLE_AVX2: mask_avx2(z, allowed, n); return;
#endif
    default: mask_scalar(z, allowed, 0, n); return;
    }
}

int32_t di_sample_argmax(di_sample_form form, const float *z, int32_t n, bool raw, float *max) {
    switch (runnable(form)) {
#if DI_SAMPLE_X86
    case DI_SAMPLE_AVX512: return argmax_avx512(z, n, raw, max);
    case DI_SAMPLE_AVX2: return argmax_avx2(z, n, raw, max);
#endif
    default: return argmax_scalar(z, n, raw, max);
    }
}

/* AVX-512 CPUs run the AVX2 forms of these two (16-bit compares into masks need AVX-512BW). */
int32_t di_sample_find_u16(di_sample_form form, const uint16_t *a, int32_t from, int32_t n, uint16_t v) {
#if DI_SAMPLE_X86
    if (runnable(form) >= DI_SAMPLE_AVX2) return find_u16_avx2(a, from, n, v);
#endif
    return find_u16_scalar(a, from, n, v);
}

int32_t di_sample_draw_index(di_sample_form form, const uint64_t *w, int32_t n, uint64_t cut_w, int32_t cut_id,
                             uint64_t target) {
#if DI_SAMPLE_X86
    if (runnable(form) >= DI_SAMPLE_AVX2) return draw_avx2(w, n, cut_w, cut_id, target);
#endif
    return draw_scalar(w, 0, n, cut_w, cut_id, 0, target);
}

int32_t di_sample_find_at_least(di_sample_form form, const float *z, int32_t from, int32_t n, float thr) {
    switch (runnable(form)) {
#if DI_SAMPLE_X86
    case DI_SAMPLE_AVX512: return find_at_least_avx512(z, from, n, thr);
    case DI_SAMPLE_AVX2: return find_at_least_avx2(z, from, n, thr);
#endif
    default: return find_at_least_scalar(z, from, n, thr);
    }
}

double di_sample_exp_sum(di_sample_form form, const float *z, int32_t n, float max) {
    switch (runnable(form)) {
#if DI_SAMPLE_X86
    case DI_SAMPLE_AVX512: return exp_sum_avx512(z, n, max);
    case DI_SAMPLE_AVX2: return exp_sum_avx2(z, n, max);
#endif
    default: {
        double s[LANES] = {0};
        exp_sum_scalar(z, 0, n, max, s);
        return di_sample_fold_lanes(s);
    }
    }
}

uint64_t di_sample_weights(di_sample_form form, const float *z, int32_t n, const di_weight_filter *f, uint64_t *w,
                           uint16_t *bucket) {
    switch (f->bits > 52 ? DI_SAMPLE_SCALAR : runnable(form)) {
#if DI_SAMPLE_X86
    case DI_SAMPLE_AVX512: return weights_avx512(z, n, f, w, bucket);
    case DI_SAMPLE_AVX2: return weights_avx2(z, n, f, w, bucket);
#endif
    default: return weights_scalar(z, 0, n, f, w, bucket);
    }
}
