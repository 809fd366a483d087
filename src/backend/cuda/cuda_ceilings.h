/* The card's ceilings (HBM copy bandwidth, BF16 / FP8 matrix rates) and the benchmark helpers
 * that measure against them (cuda_ceilings.cu). */
#ifndef DI_BACKEND_CUDA_CEILINGS_H
#define DI_BACKEND_CUDA_CEILINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct di_cuda_ceilings {
    double hbm_gbs;      /* copy bandwidth, bytes read + written per second / 1e9 */
    double bf16_tflops;  /* cuBLASLt dense BF16 */
    double fp8_tflops;   /* cuBLASLt dense FP8 e4m3 */
} di_cuda_ceilings;

/* ms of cuBLASLt's BF16 GEMM Y [M, N] = X [M, K] W [N, K]^T on random bf16 data (fp32 accumulation,
 * bf16 out), median; < 0 where cuBLASLt is unavailable or has no algorithm */
double di_cuda_lt_bf16_ms(int64_t M, int64_t N, int64_t K);
/* Measures all three (prints the details when verbose). */
void di_cuda_measure_ceilings(bool quick, bool verbose, di_cuda_ceilings *out);
/* Median over `trials` of event-timed loops of `reps` calls fn(arg, i) on the default stream,
 * after two warm-up calls; milliseconds per call. */
typedef void (*di_bench_fn)(void *arg, int rep);
double di_cuda_time_ms(di_bench_fn fn, void *arg, int reps, int trials);
/* Device buffers of random bytes (e4m3: no NaN codes) / bf16-exact O(1) floats. */
void *di_cuda_dalloc_random(size_t n, bool e4m3);
float *di_cuda_dalloc_random_f32(size_t n);
/* e8m0 scale bytes 2^-7..2^0 / bf16 values of moderate size, in place */
void di_cuda_fill_scale(uint8_t *p, size_t n, uint32_t seed);
void di_cuda_fill_bf16(uint16_t *p, size_t n, uint32_t seed);

#ifdef __cplusplus
}
#endif

#endif
