/* Paged block pool for the state that grows with context: the compressed global KV entries and
 * index keys of the KV-source layers (model-spec §3.2). A block holds `block_entries` entries of
 * `entry_floats` floats each; a sequence owns a block table per KV source. The pool is either
 * bounded (a fixed number of blocks carved from a memory budget; allocation fails cleanly when it
 * runs out, and the scheduler preempts) or unbounded (grows on demand; for tools and tests that
 * run one sequence). Blocks are recycled through a free list; their memory is never returned to
 * the system until the pool is destroyed. */
#ifndef DI_KV_KV_POOL_H
#define DI_KV_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

typedef struct di_kv_pool {
    int block_entries;      /* entries per block */
    int entry_floats;       /* floats per entry (compressed KV row + index key) */
    int64_t n_blocks;       /* blocks allocated so far */
    int64_t max_blocks;     /* 0 = unbounded */
    int64_t n_free;
    int32_t *free_list;     /* [n_free] block ids */
    int64_t free_cap;
    float **chunks;         /* block memory, allocated in chunks of blocks */
    int64_t n_chunks, chunk_cap;
    int blocks_per_chunk;
} di_kv_pool;

void di_kv_pool_init(di_kv_pool *p, int block_entries, int entry_floats, int64_t max_blocks);
void di_kv_pool_destroy(di_kv_pool *p);
/* Returns a block id, or -1 if a bounded pool is exhausted. */
int32_t di_kv_pool_alloc(di_kv_pool *p);
void di_kv_pool_free(di_kv_pool *p, int32_t block);
/* Blocks in use. */
int64_t di_kv_pool_used(const di_kv_pool *p);
/* Blocks that can still be allocated (INT64_MAX if unbounded). */
int64_t di_kv_pool_available(const di_kv_pool *p);
size_t di_kv_pool_block_bytes(const di_kv_pool *p);
/* Entry `slot` of block `block`: [entry_floats] floats. */
float *di_kv_pool_entry(const di_kv_pool *p, int32_t block, int slot);

#endif
