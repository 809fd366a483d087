/* Paged block pool (see kv_pool.h). */
#include "kv/kv_pool.h"

#include <assert.h>
#include <stdlib.h>

#include "base/error.h"

void di_kv_pool_init(di_kv_pool *p, int block_entries, int entry_floats, int64_t max_blocks) {
    *p = (di_kv_pool){0};
    p->block_entries = block_entries;
    p->entry_floats = entry_floats;
    p->max_blocks = max_blocks;
    p->blocks_per_chunk = 64;
}

void di_kv_pool_set_mem(di_kv_pool *p, const di_mem_ops *mem) {
    assert(p->n_blocks == 0);
    p->mem = mem;
}

/* Device pools: room for one more block, doubling the single allocation. Returns false when the
 * device is out of memory. */
static bool dev_grow(di_kv_pool *p) {
    if (p->n_blocks < p->dev_cap_blocks) return true;
    /* a bounded pool takes its whole budget at once (as vLLM does), so it never holds two copies */
    int64_t cap = p->max_blocks ? p->max_blocks : p->dev_cap_blocks ? p->dev_cap_blocks * 2 : 64;
    float *nb = p->mem->alloc(di_kv_pool_block_bytes(p) * (size_t)cap);
    if (!nb) return false;
    if (p->dev_base) {
        p->mem->copy(nb, p->dev_base, di_kv_pool_block_bytes(p) * (size_t)p->n_blocks);
        p->mem->release(p->dev_base);
    }
    p->dev_base = nb;
    p->dev_cap_blocks = cap;
    return true;
}

void di_kv_pool_destroy(di_kv_pool *p) {
    if (p->dev_base) p->mem->release(p->dev_base);
    for (int64_t i = 0; i < p->n_chunks; i++) free(p->chunks[i]);
    free(p->chunks);
    free(p->free_list);
    *p = (di_kv_pool){0};
}

size_t di_kv_pool_block_bytes(const di_kv_pool *p) {
    return sizeof(float) * (size_t)p->block_entries * (size_t)p->entry_floats;
}

int32_t di_kv_pool_alloc(di_kv_pool *p) {
    if (p->n_free > 0) return p->free_list[--p->n_free];
    if (p->max_blocks && p->n_blocks >= p->max_blocks) return -1;
    if (p->n_blocks >= INT32_MAX) return -1;
    if (p->mem) {
        if (!dev_grow(p)) return -1;
        return (int32_t)p->n_blocks++;
    }
    if (p->n_blocks == p->n_chunks * p->blocks_per_chunk) {
        if (p->n_chunks == p->chunk_cap) {
            p->chunk_cap = p->chunk_cap ? p->chunk_cap * 2 : 16;
            p->chunks = di_xrealloc(p->chunks, sizeof(float *) * (size_t)p->chunk_cap);
        }
        p->chunks[p->n_chunks++] = di_xmalloc(di_kv_pool_block_bytes(p) * (size_t)p->blocks_per_chunk);
    }
    return (int32_t)p->n_blocks++;
}

void di_kv_pool_free(di_kv_pool *p, int32_t block) {
    assert(block >= 0 && block < p->n_blocks);
    if (p->n_free == p->free_cap) {
        p->free_cap = p->free_cap ? p->free_cap * 2 : 64;
        p->free_list = di_xrealloc(p->free_list, sizeof(int32_t) * (size_t)p->free_cap);
    }
    p->free_list[p->n_free++] = block;
}

int64_t di_kv_pool_used(const di_kv_pool *p) { return p->n_blocks - p->n_free; }

int64_t di_kv_pool_available(const di_kv_pool *p) {
    if (!p->max_blocks) return INT64_MAX;
    return p->max_blocks - p->n_blocks + p->n_free;
}

float *di_kv_pool_entry(const di_kv_pool *p, int32_t block, int slot) {
    assert(block >= 0 && block < p->n_blocks && slot >= 0 && slot < p->block_entries);
    if (p->mem) return p->dev_base + ((size_t)block * p->block_entries + slot) * p->entry_floats;
    float *chunk = p->chunks[block / p->blocks_per_chunk];
    return chunk + ((size_t)(block % p->blocks_per_chunk) * p->block_entries + slot) * p->entry_floats;
}
