/* Errors: every fallible function returns a di_status and, on failure, fills a di_err whose message
 * names the file, tensor or field at fault. The buffer is caller-owned (usually on the stack), so
 * errors need no allocation and cannot themselves fail. */
#ifndef DI_BASE_ERROR_H
#define DI_BASE_ERROR_H

#include <stdarg.h>
#include "deepinfer.h"

typedef struct di_err {
    di_status status;
    char msg[1024];
} di_err;

/* Sets err (if non-NULL) and returns status, so callers write `return di_errf(err, DI_EINVAL, ...)`. */
di_status di_errf(di_err *err, di_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends "context: " to an existing message (for adding the file name on the way up). */
di_status di_err_prefix(di_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void di_err_clear(di_err *err);

/* Fatal, for invariants broken by a bug (never for bad input). */
void di_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* Allocation that aborts on out-of-memory: the engine's small host allocations are not recoverable
 * conditions; large buffers (caches, weights) use explicit checked paths instead. */
void *di_xmalloc(size_t n);
void *di_xcalloc(size_t count, size_t size);
void *di_xrealloc(void *p, size_t n);
char *di_xstrdup(const char *s);

#endif
