/* The host sampler's passes over a whole row, in a scalar and x86 vector forms.
 *
 * A sampled row of V4.1 is 129,280 logits, and the sampler reads them a few times: a sanitised
 * copy, a structured-output mask, the argmax, for T > 0 the weight pass (one exp a token), for
 * logprobs a sum of exps and a search for the best tokens, for top_p a gather of one weight bucket,
 * and the draw's walk over the weights. These are the passes here; on x86-64 CPUs with AVX2 (or
 * AVX-512F) they run 8 (16) floats or 4 (8) doubles a step, the form chosen at run time
 * (di_sample_best_form). Every form gives the same bits as the scalar one: the copy, the mask, the
 * argmax and the searches only compare and select, the walk adds integers, the exp sum fixes its
 * order of addition, and the weight pass runs the same IEEE operations in the same order as
 * sample_arith.h's di_sample_weight (no fused multiply-add, the exp table by a gather, floor by the
 * 2^52 rounding trick) -- so the device sampler's too. tests/test_sampler.c checks each form the
 * CPU has against the scalar one on every token. */
#ifndef DI_SAMPLE_SAMPLE_SIMD_H
#define DI_SAMPLE_SAMPLE_SIMD_H

#include <stdbool.h>
#include <stdint.h>

/* The forms a CPU may run, in order of preference (last best). */
typedef enum di_sample_form { DI_SAMPLE_SCALAR, DI_SAMPLE_AVX2, DI_SAMPLE_AVX512 } di_sample_form;

/* The best form this CPU runs (what the functions without a form take). */
di_sample_form di_sample_best_form(void);

/* dst[i] = di_sample_sanitize(src[i]) for i < n: NaN -> -inf, +inf -> FLT_MAX. */
void di_sample_sanitized_copy(di_sample_form form, float *dst, const float *src, int32_t n);

/* z[i] = -inf for every i < n whose bit (i % 32 of word i / 32) in allowed is clear. */
void di_sample_apply_mask(di_sample_form form, float *z, const uint32_t *allowed, int32_t n);

/* The first id of the largest value of z[0..n) (-1 when every entry is -inf), *max its value;
 * raw: z straight from the model, sanitised on the fly (NaN never wins, +inf counts as FLT_MAX). */
int32_t di_sample_argmax(di_sample_form form, const float *z, int32_t n, bool raw, float *max);

/* The first id in [from, n) whose sanitised value is >= thr, or n. */
int32_t di_sample_find_at_least(di_sample_form form, const float *z, int32_t from, int32_t n, float thr);

/* The sum over i < n of di_sample_exp_term(z[i], max) (max: the row's largest sanitised value,
 * finite), added in the order sample_arith.h fixes whatever the form (DI_SAMPLE_EXP_LANES partial
 * sums, di_sample_fold_lanes), which cuda_sample_logprob.cu keeps too. The log-softmax's normaliser. */
double di_sample_exp_sum(di_sample_form form, const float *z, int32_t n, float max);

/* The first index in [from, n) with a[i] == v, or n (top_p's gather of one weight bucket). */
int32_t di_sample_find_u16(di_sample_form form, const uint16_t *a, int32_t from, int32_t n, uint16_t v);

/* Whether top_p's cut keeps a token of weight w: it is at or above (cut_w, cut_id), the last token
 * kept, in (W desc, id asc) order. */
static inline bool di_sample_kept(uint64_t w, int32_t id, uint64_t cut_w, int32_t cut_id) {
    return w > cut_w || (w == cut_w && id <= cut_id);
}

/* The draw's walk: the first id in [0, n - 1) whose cumulative weight, over the ids the cut keeps
 * (di_sample_kept), exceeds target; n - 1 if none does. */
int32_t di_sample_draw_index(di_sample_form form, const uint64_t *w, int32_t n, uint64_t cut_w, int32_t cut_id,
                             uint64_t target);

/* The filters of one row, as di_sample_weight takes them. */
typedef struct di_weight_filter {
    float max;    /* the row's largest logit (finite) */
    float kth;    /* top_k's value, -inf when off */
    double inv_t; /* di_sample_inv_temperature(T) */
    double min_p; /* 0 = off */
    double skip;  /* di_sample_skip_below(bits, ...) */
    int bits;     /* di_sample_weight_bits(vocab) */
} di_weight_filter;

/* No weight: the bucket given to a token of W = 0 (one past the last weight bucket). */
#define DI_SAMPLE_NO_BUCKET 512

/* w[i] = di_sample_weight(z[i], ...) for i < n (z sanitised); bucket (may be NULL): bucket[i] =
 * di_sample_weight_bucket(w[i]), DI_SAMPLE_NO_BUCKET where w[i] = 0. Returns the sum of w (exact:
 * below 2^63 for n <= the vocabulary the bits were made for). Weights past 2^52 (bits > 52: a
 * vocabulary of at most 1,024) take the scalar form. */
uint64_t di_sample_weights(di_sample_form form, const float *z, int32_t n, const di_weight_filter *f, uint64_t *w,
                           uint16_t *bucket);

#endif
