/* Per-sequence state of the V4.1 forward pass (model-spec §3): everything a later call needs from
 * earlier tokens of the same sequence.
 *   - a SWA ring per layer (backbone and DSpark blocks): `window` rows of Dh, slot = pos % window
 *   - per KV-source layer: the compressed global KV entries and their index keys (grow with context)
 *   - per ratio-2 KV source: the pending first token of an incomplete pair (k and gate logits, fp32)
 *   - the Engram n-gram history (compressed ids of the last max_ngram-1 tokens)
 *   - the DSpark input of the newest position (main_hidden), for drafting
 * The CPU reference keeps each as plain arrays (values bf16-exact, the fake-quantised form the
 * reference stores); the paged block pools of the engine issue replace the growing arrays. */
#ifndef DI_FORWARD_STATE_H
#define DI_FORWARD_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include "forward/model.h"

typedef struct di_kv_source_state {
    float *ckv;        /* [cap, Dh] compressed KV entries (post-RoPE, FP4 fake-quantised) */
    float *ikeys;      /* [cap, idx_dim] index keys (post-RoPE, FP4 fake-quantised) */
    int64_t n, cap;    /* entries present / allocated */
    float *pend_k;     /* [Dh] fp32: k of the pending (even-position) token, ratio 2 only */
    float *pend_z;     /* [Dh] fp32: its gate logits */
    bool has_pending;
} di_kv_source_state;

typedef struct di_seq_state {
    int64_t n_tokens;                  /* positions 0..n_tokens-1 are in the state */
    int n_layers, n_kv;                /* array lengths of swa and kv */
    float **swa;                       /* [n_total_layers] -> [window, Dh] ring */
    di_kv_source_state *kv;            /* [n_kv_sources] */
    int32_t engram_hist[8];            /* compressed ids of the newest tokens, [0] = newest */
    int n_hist;
    float *main_hidden;                /* [n_targets * D] DSpark input of position n_tokens-1 */
    bool has_main_hidden;
} di_seq_state;

di_seq_state *di_seq_state_new(const di_model *m);
void di_seq_state_free(di_seq_state *s);
/* Bytes held by the state (for reporting memory per sequence). */
size_t di_seq_state_bytes(const di_model *m, const di_seq_state *s);
/* Forgets every token (the state of an empty sequence), keeping the allocations. */
void di_seq_state_reset(di_seq_state *s);

/* Appends one compressed entry (and its index key) to a KV source. */
void di_kv_source_append(di_kv_source_state *ks, const float *ckv_row, const float *ikey_row,
                         int dh, int idx_dim);

#endif
