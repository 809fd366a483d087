/* The C view of the emulated CUDA runtime (cuda_emu.h is the C++ one, for translated .cu files):
 * the runtime calls the GPU forward driver (src/backend/cuda/gpu_*.c, plain C) makes, with the
 * same types, routed to C-linkage twins in emu_runtime.cpp (emu_c_*). Streams are synchronous,
 * the stream-ordered allocator is malloc. */
#ifndef DI_CUDA_EMU_C_H
#define DI_CUDA_EMU_C_H

#include <stddef.h>
#include <stdint.h>

typedef enum cudaError { cudaSuccess = 0, cudaErrorNoDevice = 100, cudaErrorNotSupported = 801 } cudaError_t;
typedef struct emu_stream *cudaStream_t;
typedef struct emu_mempool *cudaMemPool_t;
typedef struct emu_event *cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount, l2CacheSize;
    size_t totalGlobalMem;
};

#define EMU_C(ret, name, args) ret emu_c_##name args;
EMU_C(cudaError_t, cudaGetDeviceCount, (int *n))
EMU_C(cudaError_t, cudaGetDeviceProperties, (struct cudaDeviceProp *p, int dev))
EMU_C(cudaError_t, cudaGetDevice, (int *d))
EMU_C(cudaError_t, cudaMalloc, (void **p, size_t n))
EMU_C(cudaError_t, cudaFree, (void *p))
EMU_C(cudaError_t, cudaMemset, (void *d, int v, size_t n))
EMU_C(cudaError_t, cudaMemsetAsync, (void *d, int v, size_t n, cudaStream_t st))
EMU_C(cudaError_t, cudaMemcpy, (void *d, const void *s, size_t n, enum cudaMemcpyKind k))
EMU_C(cudaError_t, cudaMemcpyAsync, (void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st))
EMU_C(cudaError_t, cudaMemcpy2DAsync, (void *d, size_t dpitch, const void *s, size_t spitch, size_t width,
                                       size_t height, enum cudaMemcpyKind k, cudaStream_t st))
EMU_C(cudaError_t, cudaMallocAsync, (void **p, size_t n, cudaStream_t st))
EMU_C(cudaError_t, cudaFreeAsync, (void *p, cudaStream_t st))
EMU_C(cudaError_t, cudaStreamSynchronize, (cudaStream_t s))
EMU_C(cudaError_t, cudaDeviceSynchronize, (void))
EMU_C(cudaError_t, cudaGetLastError, (void))
EMU_C(const char *, cudaGetErrorString, (cudaError_t e))
EMU_C(cudaError_t, cudaDeviceGetDefaultMemPool, (cudaMemPool_t *p, int dev))
EMU_C(cudaError_t, cudaMemPoolSetAttribute, (cudaMemPool_t p, enum cudaMemPoolAttr a, void *v))
EMU_C(cudaError_t, cudaMemPoolTrimTo, (cudaMemPool_t p, size_t keep))
EMU_C(cudaError_t, cudaMemGetInfo, (size_t *free_b, size_t *total_b))
EMU_C(cudaError_t, cudaHostAlloc, (void **p, size_t n, unsigned flags))
EMU_C(cudaError_t, cudaFreeHost, (void *p))
EMU_C(cudaError_t, cudaEventCreate, (cudaEvent_t *e))
EMU_C(cudaError_t, cudaEventDestroy, (cudaEvent_t e))
EMU_C(cudaError_t, cudaEventRecord, (cudaEvent_t e, cudaStream_t s))
EMU_C(cudaError_t, cudaEventElapsedTime, (float *ms, cudaEvent_t a, cudaEvent_t b))
EMU_C(cudaError_t, cudaEventCreateWithFlags, (cudaEvent_t *e, unsigned flags))
EMU_C(cudaError_t, cudaStreamWaitEvent, (cudaStream_t s, cudaEvent_t e, unsigned flags))
#undef EMU_C

/* CUDA graphs: not emulated. Capture never begins, so the driver runs every call eagerly; the
 * other entry points exist only for the compiler. */
typedef struct emu_graph *cudaGraph_t;
typedef struct emu_graph_exec *cudaGraphExec_t;
typedef struct emu_graph_node *cudaGraphNode_t;
typedef struct cudaGraphExecUpdateResultInfo { int result; } cudaGraphExecUpdateResultInfo;
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed };
enum cudaGraphNodeType {
    cudaGraphNodeTypeKernel = 0,
    cudaGraphNodeTypeMemcpy = 1,
    cudaGraphNodeTypeMemAlloc = 10,
    cudaGraphNodeTypeMemFree = 11
};
struct cudaKernelNodeParams { void *func; };
struct cudaMemcpy3DParms { enum cudaMemcpyKind kind; };
static inline cudaError_t cudaGraphNodeGetType(cudaGraphNode_t n, enum cudaGraphNodeType *t) {
    (void)n, (void)t;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t n, struct cudaKernelNodeParams *p) {
    (void)n, (void)p;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t n, struct cudaMemcpy3DParms *p) {
    (void)n, (void)p;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m) {
    (void)s, (void)m;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    (void)s, (void)g;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *n, size_t *count) {
    (void)g, (void)n, (void)count;
    return cudaErrorNotSupported;
}
/* the edges gpu_graph.c makes programmatic (never reached: no graph is captured) */
typedef struct cudaGraphEdgeData {
    unsigned char from_port, to_port, type, reserved[5];
} cudaGraphEdgeData;
enum cudaGraphDependencyType { cudaGraphDependencyTypeDefault = 0, cudaGraphDependencyTypeProgrammatic = 1 };
#define cudaGraphKernelNodePortDefault 0
#define cudaGraphKernelNodePortProgrammatic 1
#define cudaGraphKernelNodePortLaunchCompletion 2
static inline cudaError_t cudaGraphGetEdges(cudaGraph_t g, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                            cudaGraphEdgeData *d, size_t *n) {
    (void)g, (void)from, (void)to, (void)d, (void)n;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaGraphRemoveDependencies(cudaGraph_t g, const cudaGraphNode_t *from,
                                                      const cudaGraphNode_t *to, const cudaGraphEdgeData *d, size_t n) {
    (void)g, (void)from, (void)to, (void)d, (void)n;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaGraphAddDependencies(cudaGraph_t g, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                                                   const cudaGraphEdgeData *d, size_t n) {
    (void)g, (void)from, (void)to, (void)d, (void)n;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *i) {
    (void)e, (void)g, (void)i;
    return cudaErrorNotSupported;
}
#define cudaGraphInstantiateFlagUseNodePriority 8
static inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags) {
    (void)e, (void)g, (void)flags;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    (void)e, (void)s;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    (void)e;
    return cudaErrorNotSupported;
}
static inline cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    (void)g;
    return cudaErrorNotSupported;
}
#define cudaHostAllocDefault 0

#define cudaGetDeviceCount emu_c_cudaGetDeviceCount
#define cudaGetDeviceProperties emu_c_cudaGetDeviceProperties
#define cudaGetDevice emu_c_cudaGetDevice
#define cudaMalloc emu_c_cudaMalloc
#define cudaFree emu_c_cudaFree
#define cudaMemset emu_c_cudaMemset
#define cudaMemsetAsync emu_c_cudaMemsetAsync
#define cudaMemcpy emu_c_cudaMemcpy
#define cudaMemcpyAsync emu_c_cudaMemcpyAsync
#define cudaMemcpy2DAsync emu_c_cudaMemcpy2DAsync
#define cudaMallocAsync emu_c_cudaMallocAsync
#define cudaFreeAsync emu_c_cudaFreeAsync
#define cudaStreamSynchronize emu_c_cudaStreamSynchronize
#define cudaDeviceSynchronize emu_c_cudaDeviceSynchronize
#define cudaGetLastError emu_c_cudaGetLastError
#define cudaGetErrorString emu_c_cudaGetErrorString
#define cudaDeviceGetDefaultMemPool emu_c_cudaDeviceGetDefaultMemPool
#define cudaMemPoolSetAttribute emu_c_cudaMemPoolSetAttribute
#define cudaMemPoolTrimTo emu_c_cudaMemPoolTrimTo
#define cudaMemGetInfo emu_c_cudaMemGetInfo
#define cudaHostAlloc emu_c_cudaHostAlloc
#define cudaFreeHost emu_c_cudaFreeHost
#define cudaEventCreate emu_c_cudaEventCreate
#define cudaEventDestroy emu_c_cudaEventDestroy
#define cudaEventRecord emu_c_cudaEventRecord
#define cudaEventElapsedTime emu_c_cudaEventElapsedTime
#define cudaEventCreateWithFlags emu_c_cudaEventCreateWithFlags
#define cudaEventDisableTiming 2u
#define cudaStreamWaitEvent emu_c_cudaStreamWaitEvent

#endif
