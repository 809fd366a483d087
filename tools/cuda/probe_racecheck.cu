/* What compute-sanitizer's racecheck makes of a slot ring between warp roles (issue 5): the
 * handshake of cuda_linear_wgmma.cu in miniature, in several forms, so that a hazard report on the
 * GEMM can be told apart from a tool limitation. One CTA of 384 threads: warpgroup 2 copies stage
 * after stage of global data into WG_SLOTS shared-memory slots; warpgroups 0 and 1 read each stage
 * with plain shared loads and sum it. Every variant is checked against the host's sum, so a real
 * race that changed a value would show as a wrong sum as well as a report.
 *
 *   deepinfer-cuda-probe-racecheck VARIANT [STAGES]
 *     0 named-cpasync   the GEMM's: cp.async, wait_group, bar.arrive "full" / consumers bar.sync;
 *                       consumers bar.arrive "empty" / producer bar.sync before the refill
 *     1 named-st        as 0, but the producer loads to registers and stores (st.shared)
 *     2 named-sync      as 0, but the consumers bar.sync "empty" too (the producer's sync waits
 *                       for them either way)
 *     3 mbar-cpasync    mbarriers: "full" by cp.async.mbarrier.arrive.noinc, "empty" by the
 *                       consumers' mbarrier.arrive, waits by try_wait.parity
 *     4 mbar-wait       mbarriers, "full" arrived after the producer's cp.async.wait_group
 *
 * Run it under `compute-sanitizer --tool racecheck` (tools/cuda/device_model_run.sh --only
 * racecheck_probe): the hazard count per variant is the answer; without the sanitizer it only
 * checks the sums. */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>
#include "backend/cuda/cuda_check.cuh" /* DI_CUDA_CHECK */

#define SLOTS 6
#define AHEAD 5
#define THREADS 384
#define STAGE_BYTES 4096 /* 256 16-byte chunks: 2 per producer thread */

#define CK(call) DI_CUDA_CHECK(call)

enum { FULL = 1, EMPTY = 1 + SLOTS }; /* named barrier ids */

static __device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
static __device__ __forceinline__ void bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }
static __device__ __forceinline__ void cp16(void *s, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(s)), "l"(g) : "memory");
}
static __device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
static __device__ __forceinline__ void mb_init(uint64_t *b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
static __device__ __forceinline__ void mb_arrive(uint64_t *b) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(smem_u32(b)) : "memory");
}
static __device__ __forceinline__ void mb_cp_arrive(uint64_t *b) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(b)) : "memory");
}
static __device__ __forceinline__ void mb_wait(uint64_t *b, int parity) {
    asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra W; }" ::"r"(
                     smem_u32(b)),
                 "r"(parity)
                 : "memory");
}

__global__ void __launch_bounds__(THREADS, 1) ring_kernel(int variant, const uint4 *src, int stages, unsigned long long *out) {
    __shared__ __align__(128) uint4 slot[SLOTS][STAGE_BYTES / 16];
    __shared__ uint64_t full[SLOTS], empty[SLOTS];
    const int tid = threadIdx.x, wg = tid >> 7;
    const bool mbar = variant >= 3;
    if (mbar && tid == 0)
        for (int s = 0; s < SLOTS; s++) {
            mb_init(&full[s], 128);  /* the producer's threads */
            mb_init(&empty[s], 256); /* the consumers' threads */
        }
    __syncthreads();

    if (wg == 2) { /* ---- producer ---- */
        const int p = tid - 256;
        auto load = [&](int st) {
            uint4 *d = slot[st % SLOTS];
            const uint4 *g = src + (size_t)st * (STAGE_BYTES / 16);
            if (variant == 1) {
                d[p] = g[p];
                d[p + 128] = g[p + 128];
            } else {
                cp16(&d[p], &g[p]);
                cp16(&d[p + 128], &g[p + 128]);
            }
        };
        auto wait_empty = [&](int st) { /* stage st - SLOTS consumed */
            if (st < SLOTS) return;
            if (mbar) mb_wait(&empty[st % SLOTS], (st / SLOTS - 1) & 1);
            else bar_sync(EMPTY + st % SLOTS, THREADS);
        };
        if (variant == 3) { /* arrivals ride on the copies: no wait_group at all */
            for (int st = 0; st < stages; st++) {
                wait_empty(st);
                load(st);
                mb_cp_arrive(&full[st % SLOTS]);
            }
            cp_wait<0>();
            return;
        }
        for (int st = 0; st < AHEAD; st++) {
            if (st < stages) load(st);
            cp_commit();
        }
        for (int st = 0; st < stages; st++) {
            cp_wait<AHEAD - 1>();
            if (mbar) mb_arrive(&full[st % SLOTS]);
            else bar_arrive(FULL + st % SLOTS, THREADS);
            const int next = st + AHEAD;
            if (next < stages) {
                wait_empty(next);
                load(next);
            }
            cp_commit();
        }
        cp_wait<0>();
        return;
    }

    /* ---- consumers: each sums its half of every stage's words ---- */
    unsigned long long sum = 0;
    for (int st = 0; st < stages; st++) {
        const uint32_t *w = reinterpret_cast<const uint32_t *>(slot[st % SLOTS]);
        if (mbar) mb_wait(&full[st % SLOTS], (st / SLOTS) & 1);
        else bar_sync(FULL + st % SLOTS, THREADS);
        for (int i = tid; i < STAGE_BYTES / 4; i += 256) sum += w[i];
        if (st + SLOTS < stages) {
            if (mbar) mb_arrive(&empty[st % SLOTS]);
            else if (variant == 2) bar_sync(EMPTY + st % SLOTS, THREADS);
            else bar_arrive(EMPTY + st % SLOTS, THREADS);
        }
    }
    atomicAdd(out, sum);
}

int main(int argc, char **argv) {
    static const char *const names[] = {"named-cpasync", "named-st", "named-sync", "mbar-cpasync", "mbar-wait"};
    const int variant = argc > 1 ? atoi(argv[1]) : 0, stages = argc > 2 ? atoi(argv[2]) : 40;
    if (variant < 0 || variant > 4 || stages < 1) {
        fprintf(stderr, "usage: deepinfer-cuda-probe-racecheck VARIANT(0-4) [STAGES >= 1]\n");
        return 2;
    }
    const size_t words = (size_t)stages * STAGE_BYTES / 4;
    uint32_t *h = (uint32_t *)malloc(words * 4);
    unsigned long long want = 0;
    for (size_t i = 0; i < words; i++) {
        h[i] = (uint32_t)(i * 2654435761u);
        want += h[i];
    }
    uint4 *d;
    unsigned long long *dout, got = 0;
    CK(cudaMalloc(&d, words * 4));
    CK(cudaMalloc(&dout, sizeof got));
    CK(cudaMemcpy(d, h, words * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0, sizeof got));
    ring_kernel<<<1, THREADS>>>(variant, d, stages, dout);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&got, dout, sizeof got, cudaMemcpyDeviceToHost));
    printf("probe-racecheck %s (%d stages, %d slots): sum %s\n", names[variant], stages, SLOTS,
           got == want ? "ok" : "WRONG");
    free(h);
    cudaFree(d);
    cudaFree(dout);
    return got == want ? 0 : 1;
}
