/* The V4.1 forward pass over a batch of ragged sequences (model-spec §2).
 *
 * A batch is a list of rows (tokens). Rows are grouped by sequence, in order; the rows of sequence
 * s continue it from position seqs[s]->n_tokens, so one call can hold whole prefills, chunks of a
 * chunked prefill and single decode tokens of different sequences at once. Every op treats rows
 * independently with a fixed reduction order, so a row's result never depends on what else is in
 * the batch (batch-invariant by construction on the CPU).
 *
 * A sequence whose rows start at position 0 is a "fresh prefill" and uses the reference's prefill
 * window lists; every other row uses the decode layout (model-spec §2.4 (2)). Incremental decode
 * follows the intended semantics: every indexer scores against its own KV source's index keys
 * (model-spec §7 Q13; the reference's stale-key quirk is not reproduced). */
#ifndef DI_FORWARD_FORWARD_H
#define DI_FORWARD_FORWARD_H

#include "forward/model.h"
#include "forward/state.h"
#include "sample/sample_arith.h"
#include "sample/sampler.h"

/* What a row's head output is for (di_batch.want_logits). DI_WANT_TOKEN rows compute their logits
 * but only their greedy token leaves the device, DI_WANT_SAMPLE rows only the token the sampler
 * draws from them (row_sampling), DI_WANT_EDITED rows (a device backend's) only what
 * di_sampler_sample gives for them with a logit bias, a mask, penalties or logprobs (sample_rows):
 * the token, and the logprobs where asked. A step of B such requests moves 4 B bytes to the host
 * (~170 more a row with logprobs) instead of B x vocab x 4 (132 MB at B = 256, ~2.5 ms of PCIe),
 * and the host samples nothing. */
enum { DI_WANT_NONE = 0, DI_WANT_LOGITS = 1, DI_WANT_TOKEN = 2, DI_WANT_SAMPLE = 3, DI_WANT_EDITED = 4 };

typedef struct di_batch {
    int n_rows;
    const int32_t *tokens;        /* [n_rows] token ids */
    int n_seqs;
    di_seq_state **seqs;          /* [n_seqs] */
    const int *seq_n_rows;        /* [n_seqs] rows of each sequence (>= 1) */
    float *logits;                /* out [n_rows, vocab] fp32 (or [n_logit_rows, vocab], see below), or NULL */
    const uint8_t *want_logits;   /* [n_rows] DI_WANT_*: which rows run the head (NULL = all, as
                                     DI_WANT_LOGITS); the DI_WANT_LOGITS rows' logits are written
                                     compactly in row order: logits is then [n_logit_rows, vocab] */
    int32_t *head_tokens;         /* out [n_wanted] or NULL: for every row that runs the head, in row
                                     order, computed where the logits are: a DI_WANT_SAMPLE row's
                                     token as di_sampler_sample_plain draws it with row_sampling[r],
                                     a DI_WANT_EDITED row's as di_sampler_sample takes it with
                                     sample_rows[r], any other row's di_sample_greedy_token; -1 when
                                     no token can be drawn (every logit -inf or NaN, after the edits) */
    /* out [n_wanted] or NULL (needed when a DI_WANT_EDITED row asks for logprobs): laid out as
     * head_tokens; a DI_WANT_EDITED row with logprobs gets di_sampler_sample's whole result (token,
     * logprob, top list), bit for bit; the other entries are unspecified */
    di_sample_result *head_logprobs;
    const di_plain_sampling *row_sampling; /* [n_rows], read for DI_WANT_SAMPLE rows only */
    /* [n_rows], read for DI_WANT_EDITED rows only: params, history, allowed_mask and
     * position as di_sampler_sample takes them (logits unused). Read by di_forward_end: the masks'
     * contents may be written between di_forward_begin and di_forward_end (the engine computes
     * them while the device runs the step). */
    const di_sample_row *sample_rows;
    float *main_hidden;           /* out [n_rows, n_targets*D] DSpark inputs (bf16 values), or NULL */
    /* test hook (--replay-topk): forced indexer selections, compressed positions ascending, -1 pad,
     * [n_index_sources, n_rows, index_topk]; NULL = the model's own top-k */
    const int32_t *forced_topk;
    /* optional out: own selections, same layout as forced_topk (for comparing with references) */
    int32_t *topk_out;
    /* optional debug hook: called with named intermediate tensors (names as in the fixture's
     * debug.safetensors; integer tensors are passed as float values); layer -1 for global ones.
     * The hook may overwrite "block_in", "pre_mix_in", "attn_in" and "ffn_in" (teacher forcing). */
    void (*debug_fn)(void *user, const char *name, int layer, float *data, int64_t n);
    void *debug_user;
} di_batch;

di_status di_forward(const di_model *m, di_batch *b, di_err *err);
/* di_forward in two halves, so that the caller can work while a device computes (the engine
 * computes structured-output masks there): di_forward_begin checks the batch and starts the call
 * (the CPU backend computes all of it here); di_forward_end waits for it and fills logits,
 * main_hidden and topk_out. Between the two, the batch, its buffers and its sequences must not be
 * touched (but for the DI_WANT_EDITED rows' masks) and no other forward call may begin. */
di_status di_forward_begin(const di_model *m, di_batch *b, di_err *err);
di_status di_forward_end(const di_model *m, di_batch *b, di_err *err);

/* DSpark draft (model-spec §4.2): seeds the draft rings from main_hidden rows and/or drafts.
 * See dspark.c. */
typedef struct di_dspark_out {
    int32_t tokens[DI_FWD_MAX_DSPARK_BLOCK + 1]; /* [block_size + 1]: column 0 = anchor token, then greedy drafts */
    float *logits;                /* [block_size, vocab] draft logits, or NULL */
    float confidence[DI_FWD_MAX_DSPARK_BLOCK]; /* [block_size] confidence logits */
} di_dspark_out;

/* Writes the DSpark context rows of `n` positions starting at `pos0` from their main_hidden rows
 * ([n, n_targets*D] bf16 values) into the sequence's draft rings. */
void di_dspark_seed(const di_model *m, di_seq_state *s, const float *main_hidden, int64_t pos0,
                    int n);
/* Runs the draft block anchored at position p (whose ring row must already be seeded) with anchor
 * token `next_token` (the token the backbone chose for position p+1). Drafts are greedy. */
di_status di_dspark_draft(const di_model *m, di_seq_state *s, int64_t p, int32_t next_token,
                          di_dspark_out *out, di_err *err);

#endif
