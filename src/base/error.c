/* Error buffers and checked allocation (see error.h). */
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

di_status di_errf(di_err *err, di_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

di_status di_err_prefix(di_err *err, const char *fmt, ...) {
    if (!err) return DI_OK;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t np = strlen(prefix), cap = sizeof err->msg;
    if (np + 2 >= cap) np = cap - 3;
    size_t nold = strnlen(err->msg, cap - 1);
    if (np + 2 + nold >= cap) nold = cap - 1 - np - 2;
    memmove(err->msg + np + 2, err->msg, nold);
    memcpy(err->msg, prefix, np);
    err->msg[np] = ':';
    err->msg[np + 1] = ' ';
    err->msg[np + 2 + nold] = 0;
    return err->status;
}

void di_err_clear(di_err *err) {
    if (err) {
        err->status = DI_OK;
        err->msg[0] = 0;
    }
}

void di_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("deepinfer: fatal: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void *di_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) di_die("out of memory allocating %zu bytes", n);
    return p;
}

void *di_xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) di_die("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *di_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) di_die("out of memory reallocating to %zu bytes", n);
    return q;
}

char *di_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = di_xmalloc(n);
    memcpy(p, s, n);
    return p;
}
