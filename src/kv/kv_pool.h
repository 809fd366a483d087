/* Paged block pool for the state that grows with context: the compressed global KV entries and
 * index keys of the KV-source layers (model-spec §3.2). A block holds `block_entries` entries of
 * `entry_floats` floats each; a sequence owns a block table per KV source. The pool is either
 * bounded (a fixed number of blocks carved from a memory budget; allocation fails cleanly when it
 * runs out, and the scheduler preempts) or unbounded (grows on demand; for tools and tests that
 * run one sequence). Blocks are recycled through a free list; their memory is never returned to
 * the system until the pool is destroyed.
 *
 * Host pools allocate in chunks of blocks (addresses stay fixed). A device pool (di_kv_pool_set_mem,
 * used when the model runs on a GPU) keeps all blocks in ONE allocation so that kernels address an
 * entry as base + (block * block_entries + slot) * entry_floats; it grows by reallocating (a copy)
 * only inside di_kv_pool_alloc, i.e. while sequences reserve blocks before a forward call, never
 * while one runs. Its memory is never touched by the host. */
#ifndef DI_KV_KV_POOL_H
#define DI_KV_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/* Memory of a device backend: zeroed allocation (NULL on failure), release, device-to-device copy,
 * device-to-host copy (for tests and tools that inspect state). */
typedef struct di_mem_ops {
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*to_host)(void *dst, const void *src, size_t bytes);
} di_mem_ops;

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
    const di_mem_ops *mem;  /* NULL = host chunks; else one device allocation: */
    float *dev_base;        /* [dev_cap_blocks, block_entries, entry_floats] */
    int64_t dev_cap_blocks;
} di_kv_pool;

void di_kv_pool_init(di_kv_pool *p, int block_entries, int entry_floats, int64_t max_blocks);
void di_kv_pool_destroy(di_kv_pool *p);
/* Puts the pool's blocks in device memory (before the first allocation). */
void di_kv_pool_set_mem(di_kv_pool *p, const di_mem_ops *mem);
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
