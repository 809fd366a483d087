/* Samples the rows of a step on several host threads (sampler_pool.c): the same tokens as
 * di_sampler_sample row by row, whatever the thread count. */
#ifndef DI_SAMPLE_SAMPLER_POOL_H
#define DI_SAMPLE_SAMPLER_POOL_H

#include "sample/sampler.h"

typedef struct di_sampler_pool di_sampler_pool;

/* A pool for rows of `vocab` logits (DI_EINVAL for vocab <= 0), one sampler a thread of
 * omp_get_max_threads() at creation. */
di_status di_sampler_pool_create(int32_t vocab, di_sampler_pool **out, di_err *err);
void di_sampler_pool_free(di_sampler_pool *p);

/* For i < n: status[i] = di_sampler_sample(rows[i] -> out[i], errs[i]); rows run in parallel and
 * independently (a failing row stops no other). Not reentrant: one call at a time per pool, and not
 * from inside an OpenMP parallel region. */
void di_sampler_pool_sample(di_sampler_pool *p, const di_sample_row *rows, int64_t n, di_sample_result *out,
                            di_status *status, di_err *errs);

#endif
