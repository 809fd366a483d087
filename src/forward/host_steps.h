/* Steps of the forward pass that every backend takes on the host, from a few bytes of input, in
 * exactly the CPU reference's arithmetic: the MoE routing of a row from its gate logits and the
 * Engram n-gram history of a row. The CPU forward (moe.c, engram.c) and the device backends
 * (src/backend/cuda/gpu_moe.c) call these, so routing never differs between backends. */
#ifndef DI_FORWARD_HOST_STEPS_H
#define DI_FORWARD_HOST_STEPS_H

#include "forward/model.h"
#include "forward/state.h"

/* logits [n_experts] fp32 -> expert [top_k] (selection order), weight [top_k] (model-spec §2.6:
 * sqrt-softplus scores, selection on score + bias, weights normalised on the unbiased scores) */
void di_moe_route_row(const di_model *m, const di_ffn_weights *f, const float *logits, int32_t *expert,
                      float *weight);

/* Compressed ids of the token at position `pos` and the tokens before it, newest first, at most
 * max_n: tokens of this call come from seq_tokens (the call's tokens of the sequence, starting at
 * position pos0), older ones from the state's history. Returns how many. */
int di_engram_row_history(const di_model *m, const di_seq_state *st, const int32_t *seq_tokens, int64_t pos0,
                          int64_t pos, int32_t *last_ids, int max_n);

/* After a forward call: the sequence advances by the n tokens of this call (tokens[0..n)) and
 * keeps the Engram history of the newest ones. The DSpark input is the caller's (host or device). */
void di_seq_commit_tokens(const di_model *m, di_seq_state *st, const int32_t *tokens, int n);

#endif
