/* The host's share of a step of sampled requests (`deepinfer bench` on a device, after the main
 * table): the rows whose logits reach the host are sampled there, B rows of the model's vocabulary a
 * step, on the engine's sampler pool (sample/sampler_pool.h). Printed per batch size and sampling
 * setting, on every host thread and on one, so the table shows both the cost a step of sampled
 * requests adds to the device's and what the threads save. Greedy requests without logprobs never
 * reach it (their token is taken on the device).
 *
 * Logits: B rows of N(0, 3^2)-like values (broad, as an untrained head's: top_p keeps most of the
 * vocabulary, the costliest case for the nucleus), each its own memory as in a step. Median of 5
 * calls. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "cli/commands.h"
#include "sample/sample_simd.h"
#include "sample/sampler_pool.h"

/* ms of one pool call over B rows, the median of 5; < 0 on error */
static double time_pool(int32_t vocab, int threads, const float *logits, int B, const di_sampling_params *p) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    di_sampler_pool *pool = NULL;
    di_err err = {0};
    double ms = -1.0;
    di_sample_row *rows = calloc((size_t)B, sizeof *rows);
    di_sample_result *out = calloc((size_t)B, sizeof *out);
    di_status *st = calloc((size_t)B, sizeof *st);
    di_err *errs = calloc((size_t)B, sizeof *errs);
    if (!di_sampler_pool_create(vocab, &pool, &err)) {
        for (int i = 0; i < B; i++)
            rows[i] = (di_sample_row){.logits = logits + (size_t)i * vocab, .params = p, .position = (uint64_t)(1000 + i)};
        double t[5];
        for (int rep = 0; rep < 5; rep++) {
            const double t0 = di_seconds_now();
            di_sampler_pool_sample(pool, rows, B, out, st, errs);
            t[rep] = di_seconds_now() - t0;
        }
        ms = st[0] ? -1.0 : 1e3 * di_bench_median(t, 5);
    }
    di_sampler_pool_free(pool);
    free(rows), free(out), free(st), free(errs);
    omp_set_num_threads(saved);
    return ms;
}

void di_bench_host_sampling(int32_t vocab, const int *Bs, int n_B) {
    const int most = n_B ? Bs[n_B - 1] : 1; /* Bs ascending */
    float *logits = malloc(sizeof(float) * (size_t)vocab * (size_t)most); /* [most, vocab]: rows apart, as a step's */
    if (!logits) return;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int32_t i = 0; i < vocab; i++) { /* a sum of four uniforms: roughly normal, sd ~3 */
        double s = 0;
        for (int k = 0; k < 4; k++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            s += (double)(r >> 11) * 0x1p-53;
        }
        logits[i] = (float)((s - 2.0) * 5.2);
    }
    for (int b = 1; b < most; b++) /* row b: row 0 rotated, so every row has its own argmax */
        for (int32_t i = 0; i < vocab; i++) logits[(size_t)b * vocab + i] = logits[(i + 977 * b) % vocab];
    struct {
        const char *what;
        float temperature, top_p;
        int32_t top_k, logprobs;
    } modes[] = {{"greedy + logprobs 1", 0.0f, 1.0f, 0, 1},
                 {"T = 1", 1.0f, 1.0f, 0, 0},
                 {"T = 0.7, top_p = 0.95", 0.7f, 0.95f, 0, 0},
                 {"T = 0.7, top_k = 50", 0.7f, 1.0f, 50, 0}};
    const int all = omp_get_max_threads();
    static const char *forms[] = {"scalar", "AVX2", "AVX-512F"};
    printf("\nhost sampling of a step's rows (requests whose logits reach the host; vocabulary %d; median of 5; "
           "ms a step on %d threads and on 1; row passes in the %s form):\n\n",
           vocab, all, forms[di_sample_best_form()]);
    printf("| sampling | B | ms, %d threads | ms, 1 thread | speed-up |\n|---|---|---|---|---|\n", all);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (int bi = 0; bi < n_B; bi++) {
            di_sampling_params p;
            di_sampling_params_init(&p);
            p.temperature = modes[m].temperature, p.top_p = modes[m].top_p;
            p.top_k = modes[m].top_k, p.logprobs = modes[m].logprobs, p.seed = 7;
            const double many = time_pool(vocab, all, logits, Bs[bi], &p);
            const double one = time_pool(vocab, 1, logits, Bs[bi], &p);
            printf("| %s | %d | %.2f | %.2f | %.1fx |\n", modes[m].what, Bs[bi], many, one, many > 0 ? one / many : 0.0);
            fflush(stdout);
        }
    free(logits);
}
