/* Names of the public status codes. */
#include "deepinfer.h"

const char *di_status_name(di_status s) {
    switch (s) {
    case DI_OK: return "ok";
    case DI_EINVAL: return "invalid input";
    case DI_EIO: return "I/O error";
    case DI_EFORMAT: return "format error";
    case DI_ENOMEM: return "out of memory";
    case DI_EUNSUPPORTED: return "unsupported";
    case DI_ERANGE: return "out of range";
    case DI_EINTERNAL: return "internal error";
    }
    return "unknown status";
}
