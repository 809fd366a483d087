/* What programmatic dependent launch (PDL) could buy a decode step's graph (issue 5, B = 1): a chain
 * shaped like a B = 1 layer -- single-block kernels (norms, routing, lists) between grid-wide
 * streaming kernels (the GEMV twins) -- captured once, replayed as a CUDA graph, its kernel-to-kernel
 * edges either plain or made programmatic after capture (the way the engine's captured pieces
 * would be: cudaGraphGetEdges, then each kernel -> kernel edge removed and added back with
 * cudaGraphDependencyTypeProgrammatic). Every kernel begins with griddepcontrol.wait (a no-op
 * without a programmatic edge), so each reads its predecessor's output only after it completed.
 *
 * Variants (one line each, microseconds a replay and a node, median of the replays):
 *   plain        ordinary edges
 *   pdl-exit     programmatic edges, port Programmatic, no explicit trigger (the trigger is each
 *                block's exit)
 *   pdl-trigger  the same, every kernel calling griddepcontrol.launch_dependents right after its wait
 *   pdl-launch   port LaunchCompletion: a dependent may start once every block of its predecessor
 *                has started
 *   +prefetch    the streaming kernels also load their first weights before the wait (weights are
 *                read-only: nothing a predecessor writes)
 * and the same chain with the streaming kernels alone and the tiny kernels alone, to tell the
 * per-node overhead from the streaming time.
 *     deepinfer-cuda-probe-pdl [nodes] [stream_mb]      (defaults 880 nodes, 8 MB a streaming kernel)
 * Checks: every replay's chain value equals the node count (each tiny kernel adds one to its
 * predecessor's), so an edge that let a kernel read early would show. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_check.cuh" /* DI_CUDA_CHECK */

#define CK(call) DI_CUDA_CHECK(call)

__device__ __forceinline__ void pdl_wait(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger(void) { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

/* one block: chain[0] += 1 (with a read of it first, so that the order matters) */
__global__ void tiny_kernel(int *chain, int trigger) {
    pdl_wait();
    if (trigger) pdl_trigger();
    __shared__ int v;
    if (threadIdx.x == 0) v = chain[0];
    __syncthreads();
    if (threadIdx.x == 0) chain[0] = v + 1;
}

/* grid-wide: sums a slice of w (uint4 [n]) into sums[block]; reads chain[0] after the wait and
 * stores it to chain[1] (a dependence on the predecessor's output). prefetch: the first loads of a
 * thread issued before the wait. */
__global__ void __launch_bounds__(256) stream_kernel(const uint4 *__restrict__ w, int64_t n, int *chain,
                                                     unsigned *sums, int trigger, int prefetch) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint4 first[4];
    int n_first = 0;
    if (prefetch)
        for (; n_first < 4 && i + n_first * stride < n; n_first++) first[n_first] = w[i + n_first * stride];
    pdl_wait();
    if (trigger) pdl_trigger();
    unsigned acc = 0;
    for (int k = 0; k < n_first; k++) acc += first[k].x ^ first[k].y ^ first[k].z ^ first[k].w;
    i += (int64_t)n_first * stride;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = w[i], b = w[i + stride], c = w[i + 2 * stride], d = w[i + 3 * stride];
        acc += a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n; i += stride) acc += w[i].x;
    if (blockIdx.x == 0 && threadIdx.x == 0) chain[1] = chain[0];
    if (acc == 0x9e3779b9u) sums[blockIdx.x] = acc; /* keeps the loads */
}

typedef struct variant {
    const char *name;
    int programmatic, port, trigger, prefetch;
} variant;

/* kernel -> kernel edges of g made programmatic from `port` */
static int make_programmatic(cudaGraph_t g, int port) {
    size_t n = 0;
    CK(cudaGraphGetEdges(g, NULL, NULL, NULL, &n));
    cudaGraphNode_t *from = (cudaGraphNode_t *)malloc(sizeof(cudaGraphNode_t) * (n ? n : 1));
    cudaGraphNode_t *to = (cudaGraphNode_t *)malloc(sizeof(cudaGraphNode_t) * (n ? n : 1));
    cudaGraphEdgeData *ed = (cudaGraphEdgeData *)calloc(n ? n : 1, sizeof(cudaGraphEdgeData));
    CK(cudaGraphGetEdges(g, from, to, ed, &n));
    int changed = 0;
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType a, b;
        CK(cudaGraphNodeGetType(from[i], &a));
        CK(cudaGraphNodeGetType(to[i], &b));
        if (a != cudaGraphNodeTypeKernel || b != cudaGraphNodeTypeKernel) continue;
        CK(cudaGraphRemoveDependencies(g, &from[i], &to[i], &ed[i], 1));
        cudaGraphEdgeData p;
        memset(&p, 0, sizeof p);
        p.from_port = (unsigned char)port;
        p.type = cudaGraphDependencyTypeProgrammatic;
        CK(cudaGraphAddDependencies(g, &from[i], &to[i], &p, 1));
        changed++;
    }
    free(from);
    free(to);
    free(ed);
    return changed;
}

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* pattern: 0 layer-like (two tiny kernels, then a streaming one), 1 streaming only, 2 tiny only */
static void run(const variant *v, int pattern, int nodes, const uint4 *w, int64_t slice, int64_t n_slices,
                int *chain, unsigned *sums, cudaStream_t s) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMemsetAsync(chain, 0, 2 * sizeof(int), s));
    int tinies = 0;
    for (int k = 0; k < nodes; k++) {
        const bool streaming = pattern == 1 || (pattern == 0 && k % 3 == 2);
        if (streaming) {
            const uint4 *wk = w + (k % n_slices) * slice; /* a fresh slice each time: from HBM, not L2 */
            stream_kernel<<<132 * 2, 256, 0, s>>>(wk, slice, chain, sums, v->trigger, v->prefetch);
        } else {
            tiny_kernel<<<1, 128, 0, s>>>(chain, v->trigger);
            tinies++;
        }
    }
    CK(cudaStreamEndCapture(s, &g));
    int edges = v->programmatic ? make_programmatic(g, v->port) : 0;
    cudaGraphExec_t x;
    CK(cudaGraphInstantiate(&x, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    enum { REPS = 15 };
    float ms[REPS];
    int bad = 0;
    for (int r = -2; r < REPS; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(x, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaStreamSynchronize(s));
        int got[2];
        CK(cudaMemcpy(got, chain, sizeof got, cudaMemcpyDeviceToHost));
        if (got[0] != tinies) bad++;
        if (r >= 0) CK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    qsort(ms, REPS, sizeof(float), cmp_f);
    const char *pat = pattern == 0 ? "layer-like" : pattern == 1 ? "streaming" : "tiny";
    printf("| %-10s | %-22s | %5d | %5d | %9.1f | %6.2f | %s |\n", pat, v->name, nodes, edges, ms[REPS / 2] * 1e3,
           ms[REPS / 2] * 1e3 / nodes, bad ? "CHAIN WRONG" : "ok");
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

int main(int argc, char **argv) {
    const int nodes = argc > 1 ? atoi(argv[1]) : 880;
    const double mb = argc > 2 ? atof(argv[2]) : 8.0;
    const int64_t slice = (int64_t)(mb * 1048576.0) / 16;           /* uint4 a streaming kernel */
    const int64_t n_slices = (int64_t)(2048.0 / mb) > 1 ? (int64_t)(2048.0 / mb) : 1; /* 2 GB rotated */
    uint4 *w;
    int *chain;
    unsigned *sums;
    CK(cudaMalloc(&w, (size_t)slice * n_slices * 16));
    CK(cudaMemset(w, 1, (size_t)slice * n_slices * 16));
    CK(cudaMalloc(&chain, 2 * sizeof(int)));
    CK(cudaMalloc(&sums, 4096 * sizeof(unsigned)));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const variant vs[] = {
        {"plain", 0, 0, 0, 0},
        {"pdl-exit", 1, cudaGraphKernelNodePortProgrammatic, 0, 0},
        {"pdl-trigger", 1, cudaGraphKernelNodePortProgrammatic, 1, 0},
        {"pdl-trigger+prefetch", 1, cudaGraphKernelNodePortProgrammatic, 1, 1},
        {"pdl-launch", 1, cudaGraphKernelNodePortLaunchCompletion, 0, 0},
        {"pdl-launch+prefetch", 1, cudaGraphKernelNodePortLaunchCompletion, 0, 1},
    };
    printf("probe-pdl: %d nodes, %.1f MB a streaming kernel (264 blocks x 256 threads), %lld slices rotated\n", nodes,
           mb, (long long)n_slices);
    printf("| pattern | edges | nodes | programmatic | us a replay | us a node | chain |\n|---|---|---|---|---|---|---|\n");
    for (int pattern = 0; pattern < 3; pattern++)
        for (int round = 0; round < 2; round++)
            for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) run(&vs[i], pattern, nodes, w, slice, n_slices, chain, sums, s);
    CK(cudaFree(w));
    CK(cudaFree(chain));
    CK(cudaFree(sums));
    return 0;
}
