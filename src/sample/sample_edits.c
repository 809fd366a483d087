/* Building and applying a row's edits (sample_edits.h). The builder's cost is that of the host
 * sampler's old in-place stages: one pass over the history marking ids (marks cleared over the
 * listed ids afterwards, so the scratch stays clear), and a stable merge sort of the bias entries
 * when they are not already grouped by id (rarely: clients send a map). */
#include "sample/sample_edits.h"

#include <stdlib.h>
#include <string.h>

struct di_sample_editor {
    int32_t vocab;
    uint8_t *seen;          /* [vocab] stage 3's marks; all zero between calls */
    uint32_t *counts;       /* [vocab] stage 4's counts; all zero between calls */
    int32_t *repeated;      /* [cap_repeated] */
    int32_t *output_ids;    /* [cap_output] */
    uint32_t *output_counts; /* [cap_output] */
    int64_t cap_repeated, cap_output;
    di_logit_bias *bias, *bias_tmp; /* [cap_bias] the grouped copy and the merge's scratch */
    int64_t cap_bias;
};

di_sample_editor *di_sample_editor_new(int32_t vocab) {
    di_sample_editor *ed = di_xcalloc(1, sizeof *ed);
    ed->vocab = vocab;
    ed->seen = di_xcalloc((size_t)vocab, sizeof *ed->seen);
    ed->counts = di_xcalloc((size_t)vocab, sizeof *ed->counts);
    return ed;
}

void di_sample_editor_free(di_sample_editor *ed) {
    if (!ed) return;
    free(ed->seen);
    free(ed->counts);
    free(ed->repeated);
    free(ed->output_ids);
    free(ed->output_counts);
    free(ed->bias);
    free(ed->bias_tmp);
    free(ed);
}

static di_status check_ids(const int32_t *ids, int64_t n, int32_t vocab, const char *what, di_err *err) {
    if (n < 0 || (n > 0 && !ids))
        return di_errf(err, DI_EINVAL, "sampling: history.%s: %lld ids but %s", what, (long long)n,
                       n < 0 ? "a negative count" : "no array");
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return di_errf(err, DI_ERANGE, "sampling: history.%s[%lld] = %d: outside the vocabulary [0, %d)", what,
                           (long long)i, ids[i], vocab);
    return DI_OK;
}

/* a[0..n) sorted by token_id, stably (tmp: n entries of scratch) */
static void merge_sort_bias(di_logit_bias *a, di_logit_bias *tmp, int32_t n) {
    if (n < 2) return;
    const int32_t h = n / 2;
    merge_sort_bias(a, tmp, h);
    merge_sort_bias(a + h, tmp, n - h);
    int32_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = a[j].token_id < a[i].token_id ? a[j++] : a[i++]; /* ties: the left first */
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, sizeof *a * (size_t)n);
}

static void grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return;
    *cap = need > 2 * *cap ? need : 2 * *cap;
    *p = di_xrealloc(*p, elem * (size_t)*cap);
}

/* Which penalties read the row's history: the repetition penalty prompt + output, frequency and
 * presence the output. */
static void penalties_read(const di_sample_row *row, bool *repetition, bool *frequency) {
    const di_sampling_params *p = row->params;
    *repetition = row->history && p->repetition_penalty != 1.0f;
    *frequency = row->history && (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

di_status di_sample_history_check(const di_sample_row *row, int32_t vocab, di_err *err) {
    const di_sample_history *h = row->history;
    bool repetition, frequency;
    penalties_read(row, &repetition, &frequency);
    di_status st;
    if (repetition && (st = check_ids(h->prompt_ids, h->n_prompt, vocab, "prompt_ids", err))) return st;
    if ((repetition || frequency) && (st = check_ids(h->output_ids, h->n_output, vocab, "output_ids", err)))
        return st;
    return DI_OK;
}

di_status di_sample_edits_build(di_sample_editor *ed, const di_sample_row *row, di_sample_edits *out, di_err *err) {
    const di_sampling_params *p = row->params;
    const di_sample_history *h = row->history;
    memset(out, 0, sizeof *out);
    out->repetition_penalty = 1.0f;
    bool repetition, frequency;
    penalties_read(row, &repetition, &frequency);
    const di_status st = di_sample_history_check(row, ed->vocab, err);
    if (st) return st;

    out->bias = p->logit_bias, out->n_bias = p->n_logit_bias;
    bool grouped = true;
    for (int32_t i = 1; i < p->n_logit_bias && grouped; i++)
        grouped = p->logit_bias[i - 1].token_id <= p->logit_bias[i].token_id;
    if (!grouped) {
        grow((void **)&ed->bias, &ed->cap_bias, p->n_logit_bias, sizeof *ed->bias);
        ed->bias_tmp = di_xrealloc(ed->bias_tmp, sizeof *ed->bias_tmp * (size_t)ed->cap_bias);
        memcpy(ed->bias, p->logit_bias, sizeof *ed->bias * (size_t)p->n_logit_bias);
        merge_sort_bias(ed->bias, ed->bias_tmp, p->n_logit_bias);
        out->bias = ed->bias;
    }
    out->mask = row->allowed_mask;

    if (repetition) { /* once per distinct token of prompt + output */
        const int64_t most = h->n_prompt + h->n_output;
        grow((void **)&ed->repeated, &ed->cap_repeated, most < ed->vocab ? most : ed->vocab, sizeof *ed->repeated);
        int32_t n = 0;
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *ids = pass ? h->output_ids : h->prompt_ids;
            const int64_t m = pass ? h->n_output : h->n_prompt;
            for (int64_t i = 0; i < m; i++) {
                const int32_t id = ids[i];
                if (ed->seen[id]) continue;
                ed->seen[id] = 1;
                ed->repeated[n++] = id;
            }
        }
        for (int32_t i = 0; i < n; i++) ed->seen[ed->repeated[i]] = 0;
        out->repetition_penalty = p->repetition_penalty;
        out->repeated = ed->repeated, out->n_repeated = n;
    }
    if (frequency) { /* vLLM's: fp per occurrence, pp once, over the output only */
        const int64_t most = h->n_output < ed->vocab ? h->n_output : ed->vocab;
        if (most > ed->cap_output) {
            grow((void **)&ed->output_ids, &ed->cap_output, most, sizeof *ed->output_ids);
            ed->output_counts = di_xrealloc(ed->output_counts, sizeof *ed->output_counts * (size_t)ed->cap_output);
        }
        int32_t n = 0;
        for (int64_t i = 0; i < h->n_output; i++) ed->counts[h->output_ids[i]]++;
        for (int64_t i = 0; i < h->n_output; i++) {
            const int32_t id = h->output_ids[i];
            if (!ed->counts[id]) continue; /* already listed */
            ed->output_ids[n] = id;
            ed->output_counts[n++] = ed->counts[id];
            ed->counts[id] = 0;
        }
        out->frequency_penalty = p->frequency_penalty, out->presence_penalty = p->presence_penalty;
        out->output_ids = ed->output_ids, out->output_counts = ed->output_counts, out->n_output = n;
    }
    return DI_OK;
}

bool di_sample_edits_empty(const di_sample_edits *e) {
    return !e->n_bias && !e->mask && !e->n_repeated && !e->n_output;
}

void di_sample_edits_apply(di_sample_form form, const di_sample_edits *e, float *z, int32_t vocab) {
    for (int32_t i = 0; i < e->n_bias; i++) {
        const int32_t id = e->bias[i].token_id;
        z[id] = di_sample_sanitize(z[id] + e->bias[i].bias);
    }
    if (e->mask) di_sample_apply_mask(form, z, e->mask, vocab);
    const float rp = e->repetition_penalty;
    for (int32_t i = 0; i < e->n_repeated; i++) {
        const int32_t id = e->repeated[i];
        z[id] = di_sample_sanitize(z[id] < 0.0f ? z[id] * rp : z[id] / rp); /* a tiny rp can overflow */
    }
    const float fp = e->frequency_penalty, pp = e->presence_penalty;
    for (int32_t i = 0; i < e->n_output; i++) {
        const int32_t id = e->output_ids[i];
        const float t = z[id] - fp * (float)e->output_counts[i]; /* two roundings, as the device's */
        z[id] = di_sample_sanitize(t - pp);
    }
}
