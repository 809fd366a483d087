/* The RoPE row cache (src/forward/rope_cache.c): a kept row is bit for bit the row computed from its
 * position -- both kinds, positions around chunk boundaries and the table's end, the same chunk
 * asked for by many threads at once (the first use fills it under the lock), and positions past
 * max_position_embeddings (not cached, still computed). */
#include <omp.h>

#include "forward/model.h"
#include "test_harness.h"

/* model_load.c's formula: cos / sin in double of the fp32 angle */
static int row_mismatches(const di_model *m, int kind, int64_t pos) {
    const int half = m->cfg.qk_rope_head_dim / 2;
    float cs[64], sn[64];
    di_model_rope_row(m, kind, pos, cs, sn);
    int bad = 0;
    for (int i = 0; i < half; i++) {
        const float angle = (float)pos * m->rope_freq[kind][i];
        bad += cs[i] != (float)cos((double)angle) || sn[i] != (float)sin((double)angle);
    }
    return bad;
}

int main(void) {
    di_model *m = NULL;
    di_err err = {0};
    if (di_model_load(&m, DI_TINY_FIXTURE_DIR, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    CHECK(m->cfg.qk_rope_head_dim / 2 <= 64);
    const int64_t max = m->cfg.max_position_embeddings;
    const int64_t probe[] = {0, 1, 255, 256, 257, 511, 4095, 4096, max - 257, max - 256, max - 1, max, max + 1,
                             3 * max + 17};
    int bad = 0;
    for (int pass = 0; pass < 2; pass++) /* the first fills chunks, the second reads them */
        for (int kind = 0; kind < 2; kind++)
            for (size_t i = 0; i < sizeof probe / sizeof probe[0]; i++)
                if (probe[i] >= 0) bad += row_mismatches(m, kind, probe[i]);
    CHECKF(bad == 0, "%d values differ from their position's formula", bad);
    bad = 0;
    const int64_t n = max < 4096 ? max : 4096;
#pragma omp parallel for reduction(+ : bad) num_threads(8)
    for (int64_t p = 0; p < 8 * n; p++) bad += row_mismatches(m, (int)(p & 1), (p * 7919) % n); /* every thread, every chunk */
    CHECKF(bad == 0, "threads: %d values differ", bad);
    printf("rope cache: %lld positions of both kinds, from 8 threads, equal to their formula\n", (long long)n);
    di_model_free(m);
    return TEST_SUMMARY();
}
