/* The sampler: turns one row of logits into one token, as a pure function of
 *   (logits row, sampling params, the request's token history, seed, position)
 * so a request's tokens never depend on what else is batched with it, on thread counts or on the
 * order rows are sampled in. docs/SAMPLING.md gives the semantics in full; in short, per row:
 *
 *   1. logit_bias added (sparse token id -> bias)
 *   2. allowed-token mask (structured output): disallowed tokens -> -inf
 *   3. repetition penalty over prompt + output (HF/vLLM: positive logits divided, others multiplied),
 *      then frequency and presence penalties over output tokens only (OpenAI)
 *   4. temperature 0: argmax, ties to the lowest token id. Otherwise logits / temperature, then
 *      min_p and top_k (both thresholds on the logit), then top_p over what is left, renormalised
 *   5. 53 random bits from Philox4x32-10 keyed by (seed, position); the token is found by inverse
 *      CDF over the survivors in ascending token id order, on fixed-point integer weights
 *      (sample/sample_arith.h), so a device that samples a row gets the same token.
 *
 * Non-finite logits: NaN counts as -inf (never sampled), +inf as FLT_MAX (so a row with +inf
 * entries samples among those). A row in which no token is left (all -inf/NaN, or all disallowed)
 * is an error (DI_EINVAL), not a crash and not a made-up token.
 *
 * A di_sampler holds only scratch memory sized for the vocabulary; it carries no state from one call
 * to the next. It is not thread-safe: use one per thread. */
#ifndef DI_SAMPLE_SAMPLER_H
#define DI_SAMPLE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "sample/sample_arith.h"

/* di_sampling_params, di_logit_bias, di_logprobs_mode and di_token_logprob are public types
 * (include/deepinfer.h). */
#define DI_SAMPLER_MAX_LOGPROBS DI_MAX_LOGPROBS

/* A request's tokens so far: the prompt and what has been generated. Borrowed; either may be empty. */
typedef struct di_sample_history {
    const int32_t *prompt_ids; /* [n_prompt] */
    int64_t n_prompt;
    const int32_t *output_ids; /* [n_output] */
    int64_t n_output;
} di_sample_history;

/* Everything one row's draw depends on. */
typedef struct di_sample_row {
    const float *logits; /* [vocab] f32 */
    const di_sampling_params *params;
    const di_sample_history *history;   /* NULL = no history */
    const uint32_t *allowed_mask;       /* [(vocab + 31) / 32]; bit (id % 32) of word id / 32 set =
                                           allowed; NULL = all allowed */
    uint64_t position;                  /* the sequence position of the token being sampled */
} di_sample_row;


typedef struct di_sample_result {
    int32_t token_id;
    float logprob; /* of token_id; 0 when params->logprobs == 0 */
    int32_t n_top; /* min(params->logprobs, tokens with a finite logprob) */
    di_token_logprob top[DI_SAMPLER_MAX_LOGPROBS]; /* by logprob desc, then token id asc */
} di_sample_result;

typedef struct di_sampler di_sampler;

/* Defaults of the OpenAI API: temperature 1, every filter and penalty off, no logprobs, seed 0. */
void di_sampling_params_init(di_sampling_params *p);

/* DI_EINVAL naming the field for: a NaN or out-of-range value, a logit_bias id outside [0, vocab),
 * logprobs outside [0, 20], an unknown logprobs_mode. */
di_status di_sampling_params_validate(const di_sampling_params *p, int32_t vocab_size, di_err *err);

di_status di_sampler_create(int32_t vocab_size, di_sampler **out, di_err *err);
void di_sampler_free(di_sampler *s);

/* Samples one row. Validates the params (as above) and, where a penalty reads it, the history (ids
 * outside the vocabulary: DI_ERANGE). The logits row is not modified. On failure out->token_id = -1. */
di_status di_sampler_sample(di_sampler *s, const di_sample_row *row, di_sample_result *out, di_err *err);

/* Whether a request's rows are sampled by argmax alone -- temperature 0 and nothing that changes
 * the logits or needs them afterwards (no logit_bias, no penalty, no logprobs; the caller adds "no
 * allowed-token mask"): such rows can be reduced to their greedy token where the logits are (a
 * device), and di_sample_greedy_token then gives exactly di_sampler_sample's token. */
bool di_sampling_is_plain_greedy(const di_sampling_params *p);

/* Whether a request's rows are drawn from the logits alone -- temperature > 0 and no logit_bias,
 * penalty or logprobs (the caller adds "no allowed-token mask"): such a row can be sampled where the
 * logits are from its di_plain_sampling (cuda_sample.cu), and di_sampler_sample_plain gives the same
 * token. */
bool di_sampling_is_plain_sampled(const di_sampling_params *p);
di_plain_sampling di_plain_sampling_of(const di_sampling_params *p, uint64_t position);
/* DI_EINVAL as di_sampling_params_validate for its fields, and for a temperature that is not > 0. */
di_status di_plain_sampling_validate(const di_plain_sampling *ps, int32_t vocab_size, di_err *err);
/* di_sampler_sample of one row with these settings, no history and no mask: *token (-1 on failure). */
di_status di_sampler_sample_plain(di_sampler *s, const float *logits, const di_plain_sampling *ps, int32_t *token,
                                  di_err *err);

/* The argmax of one row as step 4 of the sampler takes it: NaN counts as -inf, +inf as FLT_MAX, ties
 * go to the lowest id, -0 equals +0; -1 when every entry is -inf or NaN (di_sampler_sample's
 * DI_EINVAL; di_sample_no_token_error gives its message). */
int32_t di_sample_greedy_token(const float *logits, int32_t vocab);
di_status di_sample_no_token_error(uint64_t position, di_err *err);

/* Samples rows[0..n) one after another into out[0..n); the same as n calls of di_sampler_sample.
 * Stops at the first failing row, whose index the error message names. */
di_status di_sampler_sample_rows(di_sampler *s, const di_sample_row *rows, int64_t n,
                                 di_sample_result *out, di_err *err);

#endif
