/* Running one sequence of ids through the model the way the `logits` command and the fixture tests
 * do: the first n_prefill ids as one prefill, the rest one decode step each, with optional forced
 * indexer selections (the --replay-topk test hook). */
#ifndef DI_FORWARD_RUN_H
#define DI_FORWARD_RUN_H

#include "forward/forward.h"

typedef struct di_replay_topk {
    const int32_t *sel;   /* [n_index_sources, n_positions, index_topk] */
    int64_t n_positions;
} di_replay_topk;

/* logits: out [n_ids, vocab]; topk_out (optional): [n_index_sources, n_ids, index_topk] own
 * selections; main_hidden (optional): [n_ids, n_targets*D]. The state is created and freed here
 * unless `keep_state` is given (then it receives it). */
di_status di_run_ids(const di_model *m, const int32_t *ids, int n_ids, int n_prefill,
                     const di_replay_topk *replay, float *logits, int32_t *topk_out,
                     float *main_hidden, di_seq_state **keep_state, di_err *err);

/* Loads an I32 tensor [n_index_sources, n_positions, index_topk] from FILE:TENSOR. */
di_status di_replay_topk_load(const di_model *m, const char *spec, di_replay_topk *out,
                              void **owner, di_err *err);
void di_replay_topk_free(void *owner);

#endif
