/* The CPU backend's op table (see backend/ops.h). */
#include "backend/cpu/cpu_ops.h"

void di_cpu_rmsnorm(const float *x, const void *w_bf16, int64_t m, int64_t d, float eps, float *y);

const di_ops di_cpu_ops = {
    .name = "cpu",
    .linear = di_cpu_linear,
    .act_quant_inplace = di_cpu_act_quant_inplace,
    .fp4_quant_inplace = di_cpu_fp4_quant_inplace,
    .rmsnorm = di_cpu_rmsnorm,
};
