/* Per-sequence state of the V4.1 forward pass (model-spec §3): everything a later call needs from
 * earlier tokens of the same sequence.
 *   - a SWA ring per layer (backbone and DSpark blocks): `window` rows of Dh, slot = pos % window
 *   - per KV-source layer: the compressed global KV entries and their index keys (grow with context)
 *   - per ratio-2 KV source: the pending first token of an incomplete pair (k and gate logits, fp32)
 *   - the Engram n-gram history (compressed ids of the last max_ngram-1 tokens)
 *   - the DSpark input of the newest position (main_hidden), for drafting
 * Values are bf16-exact floats (the fake-quantised form the reference stores), but for the
 * compressed entries, which are stored as records of the same values: the KV row as FP4 codes with
 * e4m3 scales (forward/kv_record.h: 288 of 2,048 bytes) and the index key as MXFP4
 * (forward/index_key.h: 68 of 512). The compressed entries live in a paged block pool
 * (kv/kv_pool.h) through a block table per KV source; the fixed part (rings, pending pair,
 * history) is allocated with the state. */
#ifndef DI_FORWARD_STATE_H
#define DI_FORWARD_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include "forward/model.h"
#include "kv/kv_pool.h"

typedef struct di_kv_source_state {
    int ratio;         /* compression ratio of this KV source (entries = tokens / ratio) */
    int32_t *blocks;   /* [n_blocks] block table into the pool (block layout: di_seq_block) */
    int64_t n_blocks, cap_blocks;
    int64_t n;         /* entries present */
    float *pend_k;     /* [Dh] fp32: k of the pending (even-position) token, ratio 2 only */
    float *pend_z;     /* [Dh] fp32: its gate logits */
    bool has_pending;
} di_kv_source_state;

typedef struct di_seq_state {
    const di_mem_ops *mem;             /* NULL: host memory; else every buffer below (rings, pending
                                          pair, main_hidden, the pool's entries) is device memory */
    di_kv_pool *pool;                  /* where the compressed entries live (shared or owned) */
    bool owns_pool;
    int dh, idx_dim;                   /* compressed KV row and index key dims */
    int row_bytes;                     /* a KV row record's bytes (di_kv_record_bytes(dh)) */
    int key_bytes;                     /* an index key record's bytes (di_index_key_bytes(idx_dim)) */
    int64_t n_tokens;                  /* positions 0..n_tokens-1 are in the state */
    int n_layers, n_kv;                /* array lengths of swa and kv */
    float **swa;                       /* [n_total_layers] -> [window, Dh] ring */
    di_kv_source_state *kv;            /* [n_kv_sources] */
    int32_t engram_hist[8];            /* compressed ids of the newest tokens, [0] = newest */
    int n_hist;
    float *main_hidden;                /* [n_targets * D] DSpark input of position n_tokens-1 */
    bool has_main_hidden;
} di_seq_state;

/* A state with its own unbounded pool (tools, tests, single-sequence runs). */
di_seq_state *di_seq_state_new(const di_model *m);
/* A state whose compressed entries come from a shared (usually bounded) pool. */
di_seq_state *di_seq_state_new_in(const di_model *m, di_kv_pool *pool);
/* The pool geometry a model needs: floats per entry (its KV row record and its key record, counted
 * in 4-byte units; a block's row records and key records lie apart: di_seq_block). */
int di_kv_entry_floats(const di_model *m);
void di_seq_state_free(di_seq_state *s);
/* Makes sure blocks exist for every compressed entry that tokens up to position n_tokens_total-1
 * can produce. Returns DI_ENOMEM (allocating nothing) if a bounded pool has too few free blocks. */
di_status di_seq_state_reserve(di_seq_state *s, int64_t n_tokens_total, di_err *err);
/* Blocks a sequence needs in total for n_tokens (for admission control). */
int64_t di_seq_state_blocks_needed(const di_seq_state *s, int64_t n_tokens);
/* Compressed entry g of KV source `src`: its KV row record and its index key record. A pool block
 * of be = block_entries entries holds [be][row_bytes] row records, then [be][key_bytes] key
 * records: a block's keys lie together, so the indexer, which reads every key of its sequence at
 * every step, streams them (with each key inside its entry, every key read opened a DRAM page of
 * its own and the records' 7.5x fewer bytes ran no faster: docs/PERFORMANCE.md, session 31).
 * Device kernels address the same layout (gpu_kernels.cu, gpu_indexer.c, the bench's pool fill)
 * through di_seq_keys_offset. */
static inline float *di_seq_block(const di_seq_state *s, int src, int64_t g) {
    return di_kv_pool_entry(s->pool, s->kv[src].blocks[g / s->pool->block_entries], 0);
}
/* bytes from a block's start to its first key record */
static inline int64_t di_seq_keys_offset(int block_entries, int row_bytes) { return (int64_t)block_entries * row_bytes; }
static inline uint8_t *di_seq_kv_rec(const di_seq_state *s, int src, int64_t g) {
    return (uint8_t *)di_seq_block(s, src, g) + (g % s->pool->block_entries) * s->row_bytes;
}
static inline uint8_t *di_seq_ikey(const di_seq_state *s, int src, int64_t g) {
    const int be = s->pool->block_entries;
    return (uint8_t *)di_seq_block(s, src, g) + di_seq_keys_offset(be, s->row_bytes) + (g % be) * s->key_bytes;
}
/* The values of entry g's KV row (host or device state): out [dh]. */
void di_seq_kv_values(const di_seq_state *s, int src, int64_t g, float *out);
/* The values of entry g's index key (host or device state): out [idx_dim]. */
void di_seq_ikey_values(const di_seq_state *s, int src, int64_t g, float *out);
/* Copies n floats of the state's memory (a ring, an entry: host or device) to host memory. */
void di_seq_state_read(const di_seq_state *s, float *dst, const float *src, size_t n);
/* Bytes held by the state (for reporting memory per sequence). */
size_t di_seq_state_bytes(const di_model *m, const di_seq_state *s);
/* Forgets every token (the state of an empty sequence), keeping the allocations. */
void di_seq_state_reset(di_seq_state *s);

/* Appends one compressed entry (its KV row record and index key record) to KV source `src`; its
 * block must have been reserved (di_seq_state_reserve). */
void di_seq_append_entry(di_seq_state *s, int src, const uint8_t *kv_rec, const uint8_t *ikey_rec);

#endif
