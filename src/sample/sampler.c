/* The sampler (see sampler.h and docs/SAMPLING.md for the semantics).
 *
 * How one row is processed, and what each stage costs for a vocabulary of V (129,280 for V4.1):
 *   - the row is copied into scratch z[V] with NaN -> -inf and +inf -> FLT_MAX (one pass);
 *   - bias, mask and penalties touch only the listed ids (sample/sample_edits.c lists them from the
 *     params and the history; a device sampling the row applies the same lists);
 *   - one pass finds the max and the argmax (lowest id on ties): greedy stops here;
 *   - top_k: the k-th largest logit -- for k <= 1,024 by a min-heap of the k best fed only the logits
 *     above its least (a SIMD search skips the rest: a few hundred pushes on a row in random order),
 *     otherwise (or when a row feeds the heap too often) by a radix select on the float bits
 *     (16 + 8 + 8 bits; O(V), no sort);
 *   - one pass computes w = exp((z - max) * (1 / T)) (di_sample_exp) for tokens at or above the top_k
 *     threshold and the fixed-point weight W = floor(w * 2^bits) of those with w >= min_p (w is
 *     p / p_max, so this is min_p's test), 0 for the others: a weight for every id, in id order
 *     (sample/sample_arith.h: integer weights make every sum exact, so the device sampler gets the
 *     same token);
 *   - top_p: a histogram of candidate mass over weight buckets (eight an octave; the weight pass
 *     writes each token's) finds the bucket where the mass in (W desc, id asc) order crosses top_p;
 *     only that bucket's tokens are sorted (never the whole nucleus); the cut is the last (W, id)
 *     kept, and the draw skips the tokens past it;
 *   - the draw: 53 bits r from Philox keyed by (seed, position), U = floor(r * total / 2^53), the
 *     first survivor in ascending id order whose cumulative weight exceeds U.
 * The passes over the whole row (the copy, the argmax, the weights) run in SIMD where the CPU has it
 * (sample/sample_simd.c: the same bits in every form). Nothing here reads a clock, a thread id,
 * another row or a previous call. */
#include "sample/sampler.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sample/philox.h"
#include "sample/sample_edits.h"
#include "sample/sample_arith.h"
#include "sample/sample_simd.h"

/* A row's weight pass is spread over the threads in slices of at least this many ids. */
#define WEIGHT_SLICE_MIN 16384

/* top_k up to this many takes the heap (kth_largest_small), larger ones the radix select. */
#define SMALL_TOP_K 1024

/* A token and its weight; as top_p's cut, the last kept in (W desc, id asc) order. */
typedef struct weighted_id {
    uint64_t w;
    int32_t id;
} weighted_id;

/* The cut that keeps every token. */
static const weighted_id keep_all = {0, INT32_MAX};

struct di_sampler {
    int32_t vocab;
    di_sample_form form; /* the row passes' SIMD form (di_sample_best_form) */
    float *z;            /* [vocab] f32 processed logits, indexed by token id */
    uint64_t *w;         /* [vocab] fixed-point weight floor(exp((z - max) * (1/T)) * 2^bits) of each id,
                            0 = not a candidate */
    uint16_t *bucket;    /* [vocab] top_p: di_sample_weight_bucket of w, DI_SAMPLE_NO_BUCKET for w = 0 */
    int weight_bits;     /* di_sample_weight_bits(vocab) */
    uint32_t *keys;      /* [vocab] radix-select scratch: order-preserving keys of z */
    uint32_t *hist16;    /* [65536] radix-select histogram of the keys' top 16 bits */
    float heap[SMALL_TOP_K]; /* top_k <= SMALL_TOP_K: min-heap of the k largest logits so far */
    weighted_id *sorted; /* [vocab] top_p scratch: the tokens of one weight bucket */
    /* top_p: candidate mass per weight bucket (+ none), ids in four interleaved tables (consecutive
       ids of one bucket do not wait on each other's add) */
    uint64_t bucket_mass[4][DI_SAMPLE_WEIGHT_BUCKETS + 1];
    di_sample_editor *editor; /* steps 1-3's lists (sample_edits.h) */
};

void di_sampling_params_init(di_sampling_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->logprobs_mode = DI_LOGPROBS_RAW;
}

di_status di_sampling_params_validate(const di_sampling_params *p, int32_t vocab_size, di_err *err) {
    if (!(isfinite(p->temperature) && p->temperature >= 0.0f))
        return di_errf(err, DI_EINVAL, "sampling: temperature = %g: must be a finite number >= 0 (0 = greedy)",
                       p->temperature);
    if (p->top_k < 0)
        return di_errf(err, DI_EINVAL, "sampling: top_k = %d: must be >= 0 (0 = off)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return di_errf(err, DI_EINVAL, "sampling: top_p = %g: must be in (0, 1] (1 = off)", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return di_errf(err, DI_EINVAL, "sampling: min_p = %g: must be in [0, 1] (0 = off)", p->min_p);
    if (!(isfinite(p->repetition_penalty) && p->repetition_penalty > 0.0f))
        return di_errf(err, DI_EINVAL, "sampling: repetition_penalty = %g: must be a finite number > 0 (1 = off)",
                       p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return di_errf(err, DI_EINVAL, "sampling: presence_penalty = %g: must be in [-2, 2] (0 = off)",
                       p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return di_errf(err, DI_EINVAL, "sampling: frequency_penalty = %g: must be in [-2, 2] (0 = off)",
                       p->frequency_penalty);
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return di_errf(err, DI_EINVAL, "sampling: logit_bias: %d entries but %s", p->n_logit_bias,
                       p->n_logit_bias < 0 ? "a negative count" : "no array");
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const di_logit_bias *b = &p->logit_bias[i];
        if (b->token_id < 0 || b->token_id >= vocab_size)
            return di_errf(err, DI_EINVAL, "sampling: logit_bias[%d].token_id = %d: outside the vocabulary [0, %d)",
                           i, b->token_id, vocab_size);
        if (!isfinite(b->bias))
            return di_errf(err, DI_EINVAL, "sampling: logit_bias[%d].bias = %g (token %d): must be finite", i,
                           b->bias, b->token_id);
    }
    if (p->logprobs < 0 || p->logprobs > DI_SAMPLER_MAX_LOGPROBS)
        return di_errf(err, DI_EINVAL, "sampling: logprobs = %d: must be in [0, %d] (0 = off)", p->logprobs,
                       DI_SAMPLER_MAX_LOGPROBS);
    if (p->logprobs_mode != DI_LOGPROBS_RAW && p->logprobs_mode != DI_LOGPROBS_PROCESSED)
        return di_errf(err, DI_EINVAL, "sampling: logprobs_mode = %d: must be 0 (raw) or 1 (processed)",
                       (int)p->logprobs_mode);
    return DI_OK;
}

di_status di_sampler_create(int32_t vocab_size, di_sampler **out, di_err *err) {
    *out = NULL;
    if (vocab_size <= 0)
        return di_errf(err, DI_EINVAL, "sampler: vocab_size = %d: must be > 0", vocab_size);
    di_sampler *s = di_xcalloc(1, sizeof *s);
    size_t v = (size_t)vocab_size;
    s->vocab = vocab_size;
    s->weight_bits = di_sample_weight_bits(vocab_size);
    s->z = di_xmalloc(v * sizeof *s->z);
    s->form = di_sample_best_form();
    s->w = di_xmalloc(v * sizeof *s->w);
    s->bucket = di_xmalloc(v * sizeof *s->bucket);
    s->keys = di_xmalloc(v * sizeof *s->keys);
    s->hist16 = di_xmalloc(65536 * sizeof *s->hist16);
    s->sorted = di_xmalloc(v * sizeof *s->sorted);
    s->editor = di_sample_editor_new(vocab_size);
    *out = s;
    return DI_OK;
}

void di_sampler_free(di_sampler *s) {
    if (!s) return;
    free(s->z);
    free(s->w);
    free(s->bucket);
    free(s->keys);
    free(s->hist16);
    free(s->sorted);
    di_sample_editor_free(s->editor);
    free(s);
}

/* Steps 1-3 of sampler.h: bias, mask, penalties, on the sanitised copy z (sample_edits.h: the
 * device applies the same edits to a row it samples). */
static di_status process_logits(di_sampler *s, const di_sample_row *row, di_err *err) {
    di_sample_edits edits;
    const di_status st = di_sample_edits_build(s->editor, row, &edits, err);
    if (st) return st;
    di_sample_sanitized_copy(s->form, s->z, row->logits, s->vocab);
    di_sample_edits_apply(s->form, &edits, s->z, s->vocab);
    return DI_OK;
}

/* In a histogram hist[0..n_buckets) of keys, the bucket holding the `*remaining`-th largest key;
 * *remaining becomes its rank within that bucket. */
static uint32_t rank_bucket(const uint32_t *hist, uint32_t n_buckets, uint32_t *remaining) {
    uint32_t b = n_buckets - 1;
    while (hist[b] < *remaining) { /* terminates: the histogram sums to at least *remaining */
        *remaining -= hist[b];
        b--;
    }
    return b;
}

/* The k-th largest value of z (1 <= k <= vocab): radix select on order-preserving keys. The first
 * digit is the top 16 bits (sign, exponent, 7 mantissa bits), which splits a logit row finely enough
 * that few keys survive it; two 8-bit digits finish on those few. */
static float kth_largest(di_sampler *s, int32_t k) {
    assert(k >= 1 && k <= s->vocab);
    uint32_t *keys = s->keys;   /* [vocab] */
    uint32_t *hist = s->hist16; /* [65536] */
    uint32_t remaining = (uint32_t)k;
    memset(hist, 0, 65536 * sizeof *hist);
    for (int32_t i = 0; i < s->vocab; i++) hist[(keys[i] = di_sample_float_key(s->z[i])) >> 16]++;
    uint32_t top = rank_bucket(hist, 65536, &remaining);
    int64_t n = 0;
    for (int32_t i = 0; i < s->vocab; i++)
        if ((keys[i] >> 16) == top) keys[n++] = keys[i];
    uint32_t answer = top << 16;
    for (int shift = 8; shift >= 0; shift -= 8) {
        uint32_t hist8[256] = {0};
        for (int64_t i = 0; i < n; i++) hist8[(keys[i] >> shift) & 255u]++;
        uint32_t b = rank_bucket(hist8, 256, &remaining);
        answer |= b << shift;
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++)
            if (((keys[i] >> shift) & 255u) == b) keys[m++] = keys[i];
        n = m;
    }
    return di_sample_key_float(answer);
}

/* Restores the min-heap h[0..k) below i after h[i] changed. */
static void sift_down(float *h, int32_t k, int32_t i) {
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= k) return;
        if (c + 1 < k && h[c + 1] < h[c]) c++;
        if (!(h[c] < h[i])) return;
        const float t = h[c];
        h[c] = h[i], h[i] = t;
        i = c;
    }
}

/* The k-th largest value of z for 1 <= k <= SMALL_TOP_K, or NAN when the row fed the heap more
 * than a row in random order would (a rising row: the caller takes the radix select). The heap
 * holds the k largest values seen; only a value above its least changes it. */
static float kth_largest_small(di_sampler *s, int32_t k) {
    float *h = s->heap; /* [k] */
    memcpy(h, s->z, sizeof(float) * (size_t)k);
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i); /* heapify */
    int64_t budget = 16 * (int64_t)k + 4096; /* pushes; random order needs about k ln(vocab / k) */
    for (int32_t id = k;; id++) {
        /* z > least <=> z >= the next float up (-inf's is -FLT_MAX; FLT_MAX's is +inf: none) */
        id = di_sample_find_at_least(s->form, s->z, id, s->vocab, nextafterf(h[0], INFINITY));
        if (id >= s->vocab) return h[0];
        if (--budget < 0) return NAN;
        h[0] = s->z[id];
        sift_down(h, k, 0);
    }
}

/* The k-th largest value of z, 1 <= k < vocab. */
static float top_k_value(di_sampler *s, int32_t k) {
    const float v = k <= SMALL_TOP_K ? kth_largest_small(s, k) : NAN;
    return v == v ? v : kth_largest(s, k);
}

/* Fills w[vocab] with each token's weight (0 unless it passes top_k and min_p with a weight W > 0),
 * and bucket[vocab] with their weight buckets where top_p needs them; returns the sum of the
 * weights. max is the row's max of z. */
static uint64_t weigh_tokens(di_sampler *s, const di_sampling_params *p, float max) {
    const double min_p = p->min_p;
    const di_weight_filter f = {
        .max = max,
        .kth = p->top_k > 0 && p->top_k < s->vocab ? top_k_value(s, p->top_k) : -INFINITY,
        .inv_t = di_sample_inv_temperature(p->temperature),
        .min_p = min_p,
        .skip = di_sample_skip_below(s->weight_bits, min_p > 0.0 ? log(min_p) : -INFINITY),
        .bits = s->weight_bits,
    };
    uint16_t *bucket = p->top_p < 1.0f ? s->bucket : NULL; /* [vocab] */
    /* A row sampled alone (not inside the pool's threads) spreads its weight pass over the threads:
     * each id's weight is its own and the sum is of integers, so the result is the same. */
    const int32_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    const int32_t slices = threads < s->vocab / WEIGHT_SLICE_MIN ? threads : s->vocab / WEIGHT_SLICE_MIN;
    if (slices <= 1) return di_sample_weights(s->form, s->z, s->vocab, &f, s->w, bucket);
    const int32_t len = ((s->vocab + slices - 1) / slices + 15) & ~15; /* slices * len >= vocab; whole vector steps */
    uint64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) num_threads(slices)
    for (int32_t i = 0; i < slices; i++) {
        const int32_t lo = i * len < s->vocab ? i * len : s->vocab;
        const int32_t hi = lo + len < s->vocab ? lo + len : s->vocab;
        total += di_sample_weights(s->form, s->z + lo, hi - lo, &f, s->w + lo, bucket ? bucket + lo : NULL);
    }
    return total;
}

static int cmp_w_desc_id_asc(const void *a, const void *b) {
    const weighted_id *x = a, *y = b;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* top_p: keeps the shortest prefix of the candidates in (W desc, id asc) order whose mass reaches
 * top_p of the total: a token is kept when the mass before it, rounded to double, is < top_p *
 * total (the same test the device makes). Without sorting the nucleus: a histogram of mass by
 * weight bucket, walked from the top, finds the bucket where the mass crosses the target; only that
 * bucket's tokens are sorted. The kept set is then everything at or above the last kept (W, id) in
 * that order: returns that cut (keep_all when the target is reached only with every candidate), and
 * *total becomes the kept mass. */
static weighted_id apply_top_p(di_sampler *s, uint64_t *total, double top_p) {
    const double target = top_p * di_sample_u64_to_double(*total);
    const int32_t n = s->vocab;
    const uint64_t *w = s->w;        /* [vocab] */
    const uint16_t *bkt = s->bucket; /* [vocab] */
    uint64_t(*mass4)[DI_SAMPLE_WEIGHT_BUCKETS + 1] = s->bucket_mass;
    memset(mass4, 0, sizeof s->bucket_mass);
    int32_t id = 0; /* no weight: the extra bucket */
    for (; id + 4 <= n; id += 4)
        for (int q = 0; q < 4; q++) mass4[q][bkt[id + q]] += w[id + q];
    for (; id < n; id++) mass4[0][bkt[id]] += w[id];
    uint64_t cum = 0; /* the mass before the bucket (then the token) at hand: exact */
    weighted_id last = {0, -1};
    for (int32_t b = DI_SAMPLE_WEIGHT_BUCKETS - 1; b >= 0 && last.id < 0; b--) {
        const uint64_t mass = mass4[0][b] + mass4[1][b] + mass4[2][b] + mass4[3][b];
        if (mass == 0) continue;
        if (di_sample_u64_to_double(cum + mass) < target) { /* the next bucket's first token is kept */
            cum += mass;
            continue;
        }
        int32_t nb = 0;
        for (int32_t i = di_sample_find_u16(s->form, bkt, 0, n, (uint16_t)b); i < n;
             i = di_sample_find_u16(s->form, bkt, i + 1, n, (uint16_t)b))
            s->sorted[nb++] = (weighted_id){w[i], i};
        qsort(s->sorted, (size_t)nb, sizeof *s->sorted, cmp_w_desc_id_asc);
        /* the bucket's first token is kept (the mass before it passed the test above); the cut is
         * the last one whose mass before it still does */
        for (int32_t k = 0; k < nb && di_sample_u64_to_double(cum) < target; k++) {
            cum += s->sorted[k].w;
            last = s->sorted[k];
        }
    }
    if (last.id < 0) return keep_all; /* the target is reached only with every candidate */
    *total = cum;
    return last;
}

/* The n best (value desc, id asc) of a stream of (value, id) pushed in ascending id order. */
typedef struct top_list {
    int32_t n, cap;
    double value[DI_SAMPLER_MAX_LOGPROBS];
    int32_t id[DI_SAMPLER_MAX_LOGPROBS];
} top_list;

static void top_push(top_list *t, double value, int32_t id) {
    di_sample_top_insert(t->value, t->id, &t->n, t->cap, value, id);
}

static void top_store(const top_list *t, di_sample_result *out) {
    out->n_top = t->n;
    for (int32_t i = 0; i < t->n; i++) out->top[i] = (di_token_logprob){t->id[i], (float)t->value[i]};
}

/* The largest float <= v. */
static float float_at_or_below(double v) {
    const float f = (float)v; /* to nearest: may be above v (+inf past FLT_MAX) */
    return (double)f > v ? nextafterf(f, -INFINITY) : f;
}

/* The best (value desc, id asc) of value = sanitise(x[id]) - lse over a row, into t. Only tokens
 * whose logit could enter the list are looked at: once it is full, a token enters only if
 * fl(z - lse) > least, hence (rounding is monotone) z - lse > least exactly, z > least + lse; the
 * search skips to the next logit at or above a float below that sum (its double rounding undone by
 * one step down), and top_push decides exactly. */
static void top_of_row(di_sample_form form, const float *x, int32_t vocab, double lse, top_list *t) {
    if (t->cap == 0) return;
    for (int32_t id = 0;; id++) {
        float thr = -INFINITY;
        if (t->n == t->cap) thr = float_at_or_below(nextafter(t->value[t->n - 1] + lse, -INFINITY));
        if ((id = di_sample_find_at_least(form, x, id, vocab, thr)) >= vocab) return;
        top_push(t, (double)di_sample_sanitize(x[id]) - lse, id);
    }
}

/* log_softmax over a whole row x (sanitised on the fly), in double: exps by di_sample_exp added in
 * sample_arith.h's fixed order, and di_sample_log -- the device's logprobs (cuda_sample_logprob.cu)
 * are these bit for bit. */
static void full_logprobs(di_sample_form form, const float *x, int32_t vocab, int32_t n_top, di_sample_result *out) {
    float max;
    di_sample_argmax(form, x, vocab, true, &max); /* finite: the row has a token */
    const double lse = (double)max + di_sample_log(di_sample_exp_sum(form, x, vocab, max));
    top_list t = {.cap = n_top};
    top_of_row(form, x, vocab, lse, &t);
    out->logprob = (float)((double)di_sample_sanitize(x[out->token_id]) - lse);
    top_store(&t, out);
}

/* A candidate's logprob in the distribution sampled from: its weight over the survivors' (in log
 * form, at the temperature); log_total: the log of the survivors' mass over the top token's. */
static inline double candidate_logprob(const di_sampler *s, int32_t id, float max, double temperature,
                                       double log_total) {
    return ((double)s->z[id] - (double)max) / temperature - log_total;
}

/* Log-probabilities of the distribution sampled from: the candidates, renormalised (log by
 * di_sample_log: cuda_sample_logprob.cu computes them bit for bit). A candidate's
 * logprob is non-decreasing in its logit, so once the list is full only a logit above the least
 * listed one's can enter: the search skips to those, and top_push decides exactly. */
static void candidate_logprobs(const di_sampler *s, weighted_id cut, uint64_t total, float max, double temperature,
                               int32_t n_top, di_sample_result *out) {
    const double log_total = di_sample_log(ldexp(di_sample_u64_to_double(total), -s->weight_bits));
    out->logprob = (float)candidate_logprob(s, out->token_id, max, temperature, log_total); /* a kept candidate */
    top_list t = {.cap = n_top};
    for (int32_t id = 0; n_top > 0; id++) {
        const float thr = t.n == t.cap ? nextafterf(s->z[t.id[t.n - 1]], INFINITY) : -INFINITY;
        if ((id = di_sample_find_at_least(s->form, s->z, id, s->vocab, thr)) >= s->vocab) break;
        if (s->w[id] && di_sample_kept(s->w[id], id, cut.w, cut.id))
            top_push(&t, candidate_logprob(s, id, max, temperature, log_total), id);
    }
    top_store(&t, out);
}

di_status di_sampler_sample(di_sampler *s, const di_sample_row *row, di_sample_result *out, di_err *err) {
    const di_sampling_params *p = row->params;
    memset(out, 0, sizeof *out);
    out->token_id = -1;
    di_status st = di_sampling_params_validate(p, s->vocab, err);
    if (st || (st = process_logits(s, row, err))) return st;
    float max;
    const int32_t argmax = di_sample_argmax(s->form, s->z, s->vocab, false, &max);
    if (argmax < 0) return di_sample_no_token_error(row->position, err);

    if (p->temperature == 0.0f) {
        out->token_id = argmax;
        if (p->logprobs > 0)
            full_logprobs(s->form, p->logprobs_mode == DI_LOGPROBS_RAW ? row->logits : s->z, s->vocab, p->logprobs,
                          out);
        return DI_OK;
    }

    uint64_t total = weigh_tokens(s, p, max);
    assert(s->w[argmax] > 0); /* the argmax has w = 1 (W = 2^bits) and passes every filter */
    const weighted_id cut = p->top_p < 1.0f ? apply_top_p(s, &total, p->top_p) : keep_all;
    /* the draw: U = floor(r * total / 2^53) for Philox's 53 bits r at (seed, position); the first id
     * whose cumulative weight over the kept tokens exceeds U (U < total, and the kept weights add up
     * to total exactly, so some id's does; a weight of 0 never does) */
    const uint64_t u =
        di_sample_mul_shift53(di_philox_bits53(p->seed, row->position, DI_PHILOX_STREAM_SAMPLE), total);
    out->token_id = di_sample_draw_index(s->form, s->w, s->vocab, cut.w, cut.id, u);
    if (p->logprobs > 0) {
        if (p->logprobs_mode == DI_LOGPROBS_RAW)
            full_logprobs(s->form, row->logits, s->vocab, p->logprobs, out);
        else
            candidate_logprobs(s, cut, total, max, p->temperature, p->logprobs, out);
    }
    return DI_OK;
}

/* Nothing changes the logits (bias, penalties) and nothing needs them afterwards (logprobs). */
static bool plain_params(const di_sampling_params *p) {
    return p->n_logit_bias == 0 && p->repetition_penalty == 1.0f && p->frequency_penalty == 0.0f &&
           p->presence_penalty == 0.0f && p->logprobs == 0;
}

bool di_sampling_is_plain_greedy(const di_sampling_params *p) { return p->temperature == 0.0f && plain_params(p); }

bool di_sampling_is_plain_sampled(const di_sampling_params *p) { return p->temperature > 0.0f && plain_params(p); }

di_plain_sampling di_plain_sampling_of(const di_sampling_params *p, uint64_t position) {
    return (di_plain_sampling){.temperature = p->temperature, .top_p = p->top_p, .min_p = p->min_p,
                               .top_k = p->top_k, .seed = p->seed, .position = position};
}

/* The full params of a plain-sampled row: its settings, everything else off. */
static di_sampling_params params_of_plain(const di_plain_sampling *ps) {
    di_sampling_params p;
    di_sampling_params_init(&p);
    p.temperature = ps->temperature, p.top_p = ps->top_p, p.min_p = ps->min_p, p.top_k = ps->top_k;
    p.seed = ps->seed;
    return p;
}

di_status di_plain_sampling_validate(const di_plain_sampling *ps, int32_t vocab_size, di_err *err) {
    const di_sampling_params p = params_of_plain(ps);
    di_status st = di_sampling_params_validate(&p, vocab_size, err);
    if (!st && !(ps->temperature > 0.0f))
        st = di_errf(err, DI_EINVAL, "sampling: temperature = %g: a sampled row needs one > 0", ps->temperature);
    return st;
}

di_status di_sampler_sample_plain(di_sampler *s, const float *logits, const di_plain_sampling *ps, int32_t *token,
                                  di_err *err) {
    const di_sampling_params p = params_of_plain(ps);
    const di_sample_row row = {.logits = logits, .params = &p, .position = ps->position};
    di_sample_result res;
    const di_status st = di_sampler_sample(s, &row, &res, err);
    *token = res.token_id;
    return st;
}

int32_t di_sample_greedy_token(const float *logits, int32_t vocab) {
    float max;
    return di_sample_argmax(di_sample_best_form(), logits, vocab, true, &max);
}

di_status di_sample_no_token_error(uint64_t position, di_err *err) {
    return di_errf(err, DI_EINVAL,
                   "sampling: no token can be sampled at position %llu: every logit is -inf or NaN after "
                   "bias, mask and penalties",
                   (unsigned long long)position);
}

di_status di_sampler_sample_rows(di_sampler *s, const di_sample_row *rows, int64_t n, di_sample_result *out,
                                 di_err *err) {
    for (int64_t i = 0; i < n; i++) {
        di_status st = di_sampler_sample(s, &rows[i], &out[i], err);
        if (st) {
            if (err) di_err_prefix(err, "row %lld", (long long)i);
            return st;
        }
    }
    return DI_OK;
}
