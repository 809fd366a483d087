/* deepinfer public C API: an inference engine for DeepSeek-V4.1-Flash.
 *
 * This header grows issue by issue; today it holds the status codes and the model/forward entry
 * points that the `deepinfer` CLI and tests use. All public symbols are prefixed `di_`. */
#ifndef DEEPINFER_H
#define DEEPINFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DI_VERSION_STRING "0.1.0"

typedef enum di_status {
    DI_OK = 0,
    DI_EINVAL = 1,     /* bad argument or malformed input (config, request, JSON) */
    DI_EIO = 2,        /* file missing, unreadable, truncated */
    DI_EFORMAT = 3,    /* file readable but its content violates the format (safetensors, tokenizer) */
    DI_ENOMEM = 4,     /* a memory budget or allocation could not be met */
    DI_EUNSUPPORTED = 5,
    DI_ERANGE = 6,     /* an id, length or position out of range */
    DI_EINTERNAL = 7,
} di_status;

const char *di_status_name(di_status s);

#ifdef __cplusplus
}
#endif
#endif
