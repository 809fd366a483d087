/* Reading a whole file into memory (configs, indexes, tokenizer files): one implementation with a
 * size limit, so that an oversized or unreadable file is an error naming it, never a crash. */
#ifndef DI_BASE_FILE_H
#define DI_BASE_FILE_H

#include <stddef.h>
#include "base/error.h"

/* *buf receives a malloc'd, NUL-terminated copy (caller frees) and *len its length without the
 * NUL. A file larger than max_bytes is DI_EFORMAT ("<what> of N bytes is larger than ..."). */
di_status di_read_file(const char *path, size_t max_bytes, const char *what, char **buf, size_t *len,
                       di_err *err);

#endif
