/* The paged KV block pool (kv/kv_pool.h) in both layouts: host chunks, and the single-allocation
 * "device" layout the GPU backend uses (exercised here with host memory behind di_mem_ops, so CI
 * covers the growth, copy and exhaustion logic without a GPU):
 *   - blocks are recycled through the free list; a bounded pool refuses past its budget;
 *   - an unbounded device pool grows by reallocating, and the entries written before a growth keep
 *     their values at the new addresses;
 *   - a bounded device pool takes its whole budget with the first block (no second copy later);
 *   - a device allocation that fails makes di_kv_pool_alloc return -1 and di_seq_state_reserve a
 *     clean DI_ENOMEM, not a crash. */
#include <stdlib.h>
#include <string.h>

#include "forward/state.h"
#include "kv/kv_pool.h"
#include "test_harness.h"

static int g_allocs, g_fail_after = -1;
static size_t g_last_bytes;
static void *fake_alloc(size_t bytes) {
    if (g_fail_after >= 0 && g_allocs >= g_fail_after) return NULL;
    g_allocs++;
    g_last_bytes = bytes;
    return calloc(1, bytes);
}
static void fake_release(void *p) { free(p); }
static void fake_copy(void *d, const void *s, size_t n) { memcpy(d, s, n); }
static const di_mem_ops k_fake = {fake_alloc, fake_release, fake_copy, fake_copy};

static void test_host_pool(void) {
    di_kv_pool p;
    di_kv_pool_init(&p, 16, 8, 3);
    int32_t a = di_kv_pool_alloc(&p), b = di_kv_pool_alloc(&p), c = di_kv_pool_alloc(&p);
    CHECK(a == 0 && b == 1 && c == 2);
    CHECK(di_kv_pool_alloc(&p) == -1); /* bounded: 3 blocks */
    CHECK(di_kv_pool_available(&p) == 0);
    di_kv_pool_free(&p, b);
    CHECK(di_kv_pool_alloc(&p) == b); /* recycled */
    CHECK(di_kv_pool_used(&p) == 3);
    di_kv_pool_destroy(&p);
}

static void test_device_pool_growth(void) {
    g_allocs = 0;
    g_fail_after = -1;
    di_kv_pool p;
    di_kv_pool_init(&p, 4, 5, 0); /* unbounded */
    di_kv_pool_set_mem(&p, &k_fake);
    int32_t first = di_kv_pool_alloc(&p);
    CHECK(first == 0 && p.dev_base != NULL && p.dev_cap_blocks == 64);
    float *e = di_kv_pool_entry(&p, first, 3);
    for (int i = 0; i < 5; i++) e[i] = 1.5f + (float)i;
    CHECK(e == p.dev_base + (0 * 4 + 3) * 5); /* one allocation: base + (block * 4 + slot) * 5 */
    for (int i = 1; i < 65; i++) CHECK(di_kv_pool_alloc(&p) == i);
    CHECK(p.dev_cap_blocks == 128 && g_allocs == 2); /* grew once, by doubling */
    const float *moved = di_kv_pool_entry(&p, first, 3);
    int same = 1;
    for (int i = 0; i < 5; i++) same &= moved[i] == 1.5f + (float)i;
    CHECK(same); /* the entry kept its values through the reallocation */
    di_kv_pool_destroy(&p);
}

static void test_device_pool_bounded(void) {
    g_allocs = 0;
    g_fail_after = -1;
    di_kv_pool p;
    di_kv_pool_init(&p, 16, 8, 1000);
    di_kv_pool_set_mem(&p, &k_fake);
    CHECK(di_kv_pool_alloc(&p) == 0);
    CHECK(p.dev_cap_blocks == 1000 && g_last_bytes == (size_t)1000 * di_kv_pool_block_bytes(&p));
    for (int i = 1; i < 1000; i++) di_kv_pool_alloc(&p);
    CHECK(g_allocs == 1); /* the whole budget at once: never a second copy */
    CHECK(di_kv_pool_alloc(&p) == -1);
    di_kv_pool_destroy(&p);
}

static void test_device_oom(void) {
    g_allocs = 0;
    g_fail_after = 0; /* every device allocation fails */
    di_kv_pool p;
    di_kv_pool_init(&p, 16, 8, 0);
    di_kv_pool_set_mem(&p, &k_fake);
    CHECK(di_kv_pool_alloc(&p) == -1);
    CHECK(p.dev_base == NULL && p.n_blocks == 0);
    /* through a sequence state: reserve reports it instead of storing block -1 */
    di_seq_state st;
    memset(&st, 0, sizeof st);
    di_kv_source_state ks;
    memset(&ks, 0, sizeof ks);
    ks.ratio = 2;
    st.pool = &p;
    st.n_kv = 1;
    st.kv = &ks;
    di_err err = {0};
    CHECK(di_seq_state_reserve(&st, 100, &err) == DI_ENOMEM);
    CHECKF(strstr(err.msg, "device memory exhausted") != NULL, "%s", err.msg);
    free(ks.blocks);
    di_kv_pool_destroy(&p);
    g_fail_after = -1;
}

int main(void) {
    test_host_pool();
    test_device_pool_growth();
    test_device_pool_bounded();
    test_device_oom();
    return TEST_SUMMARY();
}
