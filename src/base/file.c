/* Whole-file reads with a size limit (see file.h). Reads until EOF rather than trusting the size
 * reported up front, so pipes and files that change while read are handled. */
#include "base/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

di_status di_read_file(const char *path, size_t max_bytes, const char *what, char **buf, size_t *len,
                       di_err *err) {
    *buf = NULL;
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return di_errf(err, DI_EIO, "%s: cannot open %s (%s)", path, what, strerror(errno));
    size_t cap = 1 << 16, n = 0, got;
    char *b = di_xmalloc(cap + 1);
    while ((got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n > max_bytes) {
            fclose(f);
            free(b);
            return di_errf(err, DI_EFORMAT, "%s: %s larger than %zu bytes", path, what, max_bytes);
        }
        if (n == cap) b = di_xrealloc(b, (cap *= 2) + 1);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return di_errf(err, DI_EIO, "%s: cannot read %s", path, what);
    }
    b[n] = 0;
    *buf = b;
    if (len) *len = n;
    return DI_OK;
}
