/* The host's monotonic clock in seconds, for timing stages, steps and progress (never for results:
 * nothing computed depends on it). */
#ifndef DI_BASE_CLOCK_H
#define DI_BASE_CLOCK_H

/* seconds since an arbitrary fixed point (CLOCK_MONOTONIC): differences are elapsed time */
double di_seconds_now(void);

#endif
