/* Sampling many rows at once on the host: one di_sampler (scratch for the vocabulary) a thread, the
 * rows spread over the threads. A step of B sampled requests hands the host B rows of 129,280
 * logits; one thread takes ~0.26 ms a row at temperature 1 (docs/SAMPLING.md: the development
 * machine, SIMD passes), so B = 256 on one thread would add ~70 ms to a ~57 ms device step. Each
 * row's draw is a pure function of the row (sampler.h), so the tokens do not depend on the number
 * of threads or on which thread takes which row.
 *
 * Samplers past the first are made on first use by the thread that owns them (a sampler's memory,
 * ~5 MB at 129,280 ids, is only spent where threads actually sample). */
#include "sample/sampler_pool.h"

#include <omp.h>
#include <stdlib.h>

#include "base/error.h"

struct di_sampler_pool {
    int32_t vocab;
    int n;                 /* samplers: the most threads an OpenMP region may have */
    di_sampler **samplers; /* [n] NULL until a thread first samples */
};

di_status di_sampler_pool_create(int32_t vocab, di_sampler_pool **out, di_err *err) {
    *out = NULL;
    di_sampler_pool *p = di_xcalloc(1, sizeof *p);
    p->vocab = vocab;
    p->n = omp_get_max_threads() > 0 ? omp_get_max_threads() : 1;
    p->samplers = di_xcalloc((size_t)p->n, sizeof *p->samplers);
    di_status st = di_sampler_create(vocab, &p->samplers[0], err); /* checks the vocabulary once */
    if (st) {
        di_sampler_pool_free(p);
        return st;
    }
    *out = p;
    return DI_OK;
}

void di_sampler_pool_free(di_sampler_pool *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) di_sampler_free(p->samplers[i]);
    free(p->samplers);
    free(p);
}

void di_sampler_pool_sample(di_sampler_pool *p, const di_sample_row *rows, int64_t n, di_sample_result *out,
                            di_status *status, di_err *errs) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->n) if (n > 1)
    for (int64_t i = 0; i < n; i++) {
        di_sampler **s = &p->samplers[omp_get_thread_num()]; /* a thread's own: < p->n by num_threads */
        errs[i].status = DI_OK;
        errs[i].msg[0] = 0;
        if (!*s && di_sampler_create(p->vocab, s, &errs[i])) { /* cannot fail: samplers[0] took this vocab */
            status[i] = errs[i].status;
            continue;
        }
        status[i] = di_sampler_sample(*s, &rows[i], &out[i], &errs[i]);
    }
}
