/* The runtime side of cuda_emu.h: host memory as device memory, a naive GemmEx. */
#include <chrono>

#include "cublas_v2.h"

namespace emu {
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
thread_local block_state *g_block;
} // namespace emu

/* the multiprocessors the emulated device reports: 4, or $EMU_SMS (e.g. 132, an H100's, for the
 * launch shapes a real card gets: the sampling kernels' clusters) */
static int emu_sms(void) {
    const char *e = getenv("EMU_SMS");
    const int n = e ? atoi(e) : 0;
    return n > 0 ? n : 4;
}

cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    strcpy(p->name, "CPU emulation (tools/cuda/emu)");
    p->major = 9;
    p->multiProcessorCount = emu_sms();
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr, int) { *v = emu_sms(); return cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n) {
    *p = aligned_alloc(256, (n + 255) / 256 * 256);
    memset(*p, 0xa5, n); /* garbage */
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t) { return cudaMemcpy(d, s, n, k); }
cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = nullptr; return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = nullptr; return cudaSuccess; }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned, int) { *s = nullptr; return cudaSuccess; } /* one order */
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    *least = *greatest = 0;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t) { return "emulated"; }

cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = (cublasHandle_t)1; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }

static float load_as(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* the value stored as type t (bf16: rounded to nearest even, as cuBLAS's epilogue) */
static void store_as(void *p, cudaDataType t, size_t i, float v) {
    if (t == CUDA_R_32F) {
        ((float *)p)[i] = v;
        return;
    }
    uint32_t u;
    memcpy(&u, &v, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}
/* column-major C[m, n] = op(A)[m, k] op(B)[k, n], fp32 sums in k order */
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B,
                            cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t, cublasGemmAlgo_t) {
    const float al = *(const float *)alpha, be = *(const float *)beta;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++) {
                float a = ta == CUBLAS_OP_N ? load_as(A, at, (size_t)l * lda + i) : load_as(A, at, (size_t)i * lda + l);
                float b = tb == CUBLAS_OP_N ? load_as(B, bt, (size_t)j * ldb + l) : load_as(B, bt, (size_t)l * ldb + j);
                s += a * b;
            }
            const size_t at_c = (size_t)j * ldc + i;
            store_as(C, ct, at_c, al * s + (be != 0.0f ? be * load_as(C, ct, at_c) : 0.0f));
        }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t comp, cublasGemmAlgo_t algo) {
    const size_t ea = at == CUDA_R_32F ? 4 : 2, eb = bt == CUDA_R_32F ? 4 : 2, ec = ct == CUDA_R_32F ? 4 : 2;
    for (int g = 0; g < batch; g++)
        cublasGemmEx(h, ta, tb, m, n, k, alpha, (const char *)A + g * sa * ea, at, lda, (const char *)B + g * sb * eb,
                     bt, ldb, beta, (char *)C + g * sc * ec, ct, ldc, comp, algo);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the C view (cuda_emu_c.h) for the GPU driver's C files ---- */
extern "C" {
cudaError_t emu_c_cudaGetDeviceCount(int *n) { return cudaGetDeviceCount(n); }
cudaError_t emu_c_cudaGetDeviceProperties(cudaDeviceProp *p, int dev) { return cudaGetDeviceProperties(p, dev); }
cudaError_t emu_c_cudaGetDevice(int *d) { return cudaGetDevice(d); }
cudaError_t emu_c_cudaMalloc(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t emu_c_cudaFree(void *p) { return cudaFree(p); }
cudaError_t emu_c_cudaMemset(void *d, int v, size_t n) { return cudaMemset(d, v, n); }
cudaError_t emu_c_cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) { return cudaMemset(d, v, n); }
cudaError_t emu_c_cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) { return cudaMemcpy(d, s, n, k); }
cudaError_t emu_c_cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t) {
    return cudaMemcpy(d, s, n, k);
}
cudaError_t emu_c_cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width, size_t height,
                                    cudaMemcpyKind, cudaStream_t) {
    for (size_t r = 0; r < height; r++) memcpy((char *)d + r * dpitch, (const char *)s + r * spitch, width);
    return cudaSuccess;
}
cudaError_t emu_c_cudaMallocAsync(void **p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t emu_c_cudaFreeAsync(void *p, cudaStream_t) { return cudaFree(p); }
cudaError_t emu_c_cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t emu_c_cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t emu_c_cudaGetLastError(void) { return cudaSuccess; }
const char *emu_c_cudaGetErrorString(cudaError_t) { return "emulated"; }
cudaError_t emu_c_cudaDeviceGetDefaultMemPool(void **p, int) { *p = nullptr; return cudaSuccess; }
cudaError_t emu_c_cudaMemPoolSetAttribute(void *, int, void *) { return cudaSuccess; }
cudaError_t emu_c_cudaMemPoolTrimTo(void *, size_t) { return cudaSuccess; } /* frees are immediate here */
/* events: the host clock at record (streams are synchronous here) */
struct emu_event {
    double t;
};
cudaError_t emu_c_cudaEventCreate(emu_event **e) {
    *e = new emu_event{0.0};
    return cudaSuccess;
}
cudaError_t emu_c_cudaEventDestroy(emu_event *e) {
    delete e;
    return cudaSuccess;
}
cudaError_t emu_c_cudaEventRecord(emu_event *e, cudaStream_t) {
    e->t = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return cudaSuccess;
}
cudaError_t emu_c_cudaEventCreateWithFlags(emu_event **e, unsigned) { return emu_c_cudaEventCreate(e); }
/* every stream runs in call order on the host: a wait is already met */
cudaError_t emu_c_cudaStreamWaitEvent(cudaStream_t, emu_event *, unsigned) { return cudaSuccess; }
cudaError_t emu_c_cudaEventElapsedTime(float *ms, emu_event *a, emu_event *b) {
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}
cudaError_t emu_c_cudaHostAlloc(void **p, size_t n, unsigned) {
    *p = malloc(n);
    return cudaSuccess;
}
cudaError_t emu_c_cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t emu_c_cudaMemGetInfo(size_t *f, size_t *t) { *f = (size_t)8 << 30; *t = (size_t)16 << 30; return cudaSuccess; }
}
