/* Steps 1-3 of the sampler (sampler.h: logit bias, allowed-token mask, penalties) as lists of
 * edits to single ids, built once from a row's params, history and mask, and applied by the host
 * sampler to its sanitised copy of the row (di_sample_edits_apply) or by a device to the row where
 * the logits are (cuda_sample_edit.cu: di_cuda_edit_logits) -- the same float operations in the same
 * order, so the same bits, and a row with a bias, a penalty or a structured-output mask can be
 * sampled on the device as a plain one is.
 *
 * The stages, in this order, each over the sanitised logit z of the ids it lists:
 *   1. bias:     the logit_bias entries grouped by token id, an id's entries in request order:
 *                z = sanitise(z + bias), entry by entry;
 *   2. mask:     z = -inf where the allowed mask's bit is clear;
 *   3. repeated: each distinct id of prompt + output once (when repetition_penalty != 1):
 *                z = sanitise(z < 0 ? z * rp : z / rp);
 *   4. output:   each distinct output id once with its count c (when frequency_penalty or
 *                presence_penalty != 0): z = z - fp * c, then z = sanitise(z - pp).
 * Within a stage no id is listed twice (stage 1 groups its duplicates), so a device may edit a
 * stage's ids in parallel, with a barrier between stages. */
#ifndef DI_SAMPLE_SAMPLE_EDITS_H
#define DI_SAMPLE_SAMPLE_EDITS_H

#include "sample/sample_simd.h"
#include "sample/sampler.h"

typedef struct di_sample_edits {
    const di_logit_bias *bias;      /* [n_bias] grouped by token_id, request order within an id */
    int32_t n_bias;
    const uint32_t *mask;           /* [(vocab + 31) / 32] allowed-token bits, or NULL */
    float repetition_penalty;       /* 1: stage 3 off (n_repeated = 0) */
    const int32_t *repeated;        /* [n_repeated] distinct ids of prompt + output */
    int32_t n_repeated;
    float frequency_penalty, presence_penalty; /* both 0: stage 4 off (n_output = 0) */
    const int32_t *output_ids;      /* [n_output] distinct output ids, in order of first appearance */
    const uint32_t *output_counts;  /* [n_output] how often each appears in the output */
    int32_t n_output;
} di_sample_edits;

/* Scratch for building edits for a vocabulary: list storage and per-id marks (all clear between
 * calls). One per thread. */
typedef struct di_sample_editor di_sample_editor;

di_sample_editor *di_sample_editor_new(int32_t vocab);
void di_sample_editor_free(di_sample_editor *ed);

/* The edits of one row (its params valid: di_sampling_params_validate). Checks the history where a
 * penalty reads it (ids outside the vocabulary: DI_ERANGE, as di_sampler_sample reports them). The
 * lists point into ed and the row's params; valid until ed's next build. */
di_status di_sample_edits_build(di_sample_editor *ed, const di_sample_row *row, di_sample_edits *out, di_err *err);

/* The check di_sample_edits_build makes of the history, alone (ed not needed). */
di_status di_sample_history_check(const di_sample_row *row, int32_t vocab, di_err *err);

/* Whether the edits change nothing (no bias, mask or penalty): the row is then plain. */
bool di_sample_edits_empty(const di_sample_edits *e);

/* The four stages on z [vocab], already sanitised (di_sample_sanitized_copy); form: the mask's. */
void di_sample_edits_apply(di_sample_form form, const di_sample_edits *e, float *z, int32_t vocab);

#endif
