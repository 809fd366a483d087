/* C++ (translated .cu files): the emulated runtime and kernels; C (the GPU driver): its C view. */
#ifdef __cplusplus
#include "cuda_emu.h"
#else
#include "cuda_emu_c.h"
#endif
