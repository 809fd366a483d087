/* A CPU stand-in for the parts of CUDA the backend's kernels use, to run their LOGIC without a GPU
 * (tools/cuda/emu/run_emu.sh). Each thread block runs on blockDim real threads (std::thread, made
 * once per launch); __syncthreads, named barriers (bar.sync / bar.arrive between warp roles) and
 * the warp primitives (shuffles, ballot, __syncwarp) are barriers; each __shared__ variable is the
 * block's own storage (translate.py: cta_shared, garbage at first use like the device's); device
 * memory is host memory. Blocks run one after another, except a cluster's (launch_cluster), which
 * run at once on rank x blockDim threads: cluster_sync is a barrier over them all and cluster_map
 * finds a variable's storage in another rank (distributed shared memory).
 *
 * What it checks: indexing, bounds, barrier placement, warp-collective usage -- the bugs that make
 * a kernel wrong at every size. What it does not: nvcc's code generation and the device's
 * arithmetic (host libm, g++ instead of nvcc), timing, memory coalescing. Races show up only by
 * chance. Results from it are not GPU results. */
#ifndef DI_CUDA_EMU_H
#define DI_CUDA_EMU_H

#include <barrier>
#include <condition_variable>
#include <mutex>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <math.h>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) double2 { double x, y; };
struct alignas(8) float2 { float x, y; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
static inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline double2 make_double2(double a, double b) { return double2{a, b}; }

typedef enum cudaError { cudaSuccess = 0, cudaErrorNoDevice = 100, cudaErrorNotSupported = 801 } cudaError_t;
typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
typedef struct emu_graph *cudaGraph_t;           /* graphs are not emulated (cuda_emu_c.h) */
typedef struct emu_graph_exec *cudaGraphExec_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount };
#define cudaStreamNonBlocking 1
#define cudaStreamDefault 0
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount, l2CacheSize;
    size_t totalGlobalMem;
};

namespace emu {
extern thread_local dim3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
/* bar.sync / bar.arrive id, count: a phase ends when `count` threads have arrived */
struct named_barrier {
    std::mutex m;
    std::condition_variable cv;
    int arrived = 0;
    unsigned phase = 0;
};
/* mbarrier: a phase completes when `count` arrivals came; wait(parity) returns once the phase
 * of that parity completed (current phase parity differs) */
struct mbarrier {
    std::mutex m;
    std::condition_variable cv;
    int count = 0, arrived = 0;
    unsigned phase = 0;
    void init(int n) {
        std::lock_guard<std::mutex> lock(m);
        count = n, arrived = 0, phase = 0;
    }
    void arrive() {
        std::lock_guard<std::mutex> lock(m);
        if (++arrived == count) {
            arrived = 0;
            phase++;
            cv.notify_all();
        }
    }
    void wait(int parity) {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return (int)(phase & 1u) != parity; });
    }
};
struct cluster_state;
struct block_state {
    std::barrier<> *block_bar;
    named_barrier named[16];
    std::mutex mbar_m;
    std::map<const void *, std::unique_ptr<mbarrier>> mbar; /* by shared-memory address */
    std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
    std::vector<uint64_t> xbuf; /* [threads] warp exchange */
    std::vector<unsigned char> dyn_store; /* the launch's dynamic shared memory, this block's: */
    unsigned char *dyn = nullptr;         /* at a 1,024-byte boundary in every block, as on the device,
                                           * so that a kernel's own alignment of it pads every rank alike */
    size_t dyn_bytes = 0;
    std::mutex smem_m;
    std::map<const void *, std::vector<std::max_align_t>> smem; /* each __shared__ declaration's, by its key */
    cluster_state *cluster = nullptr;
};
struct cluster_state {
    std::barrier<> *bar;              /* every thread of every rank */
    std::vector<block_state *> ranks; /* by rank (blockIdx.x - the cluster's first) */
};
extern thread_local block_state *g_block; /* the block this thread runs */
static inline void *dyn_smem() { return g_block->dyn; }
static inline void fill_garbage(std::vector<std::max_align_t> &v, size_t bytes) {
    v.assign((bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t) + 1, std::max_align_t{});
    memset((void *)v.data(), 0xcd, v.size() * sizeof(std::max_align_t));
}
static inline void make_dyn_smem(block_state &b, size_t bytes) {
    b.dyn_store.assign(bytes + 1024, 0xcd); /* garbage, like uninitialised shared memory */
    b.dyn = (unsigned char *)(((uintptr_t)b.dyn_store.data() + 1023) & ~(uintptr_t)1023);
    b.dyn_bytes = bytes;
}
/* block b's storage of the __shared__ declaration `key`, made at its first use */
static inline unsigned char *smem_of(block_state *b, const void *key, size_t bytes) {
    std::lock_guard<std::mutex> lock(b->smem_m);
    std::vector<std::max_align_t> &v = b->smem[key];
    if (v.empty()) fill_garbage(v, bytes);
    return (unsigned char *)v.data();
}
template <class T>
static inline T &cta_shared(const void *key) { return *reinterpret_cast<T *>(smem_of(g_block, key, sizeof(T))); }
/* p (shared memory of this thread's block) in the block of `rank` of its cluster */
template <class T>
static inline T *cluster_map(T *p, int rank) {
    block_state *me = g_block;
    if (!me->cluster) {
        if (rank != 0) fprintf(stderr, "emu: rank %d of a block outside a cluster\n", rank), abort();
        return p;
    }
    block_state *other = me->cluster->ranks[(size_t)rank];
    const unsigned char *q = (const unsigned char *)p;
    auto inside = [&](const std::vector<std::max_align_t> &v) {
        return q >= (const unsigned char *)v.data() && q < (const unsigned char *)(v.data() + v.size());
    };
    if (q >= me->dyn && q < me->dyn + me->dyn_bytes) return (T *)(other->dyn + (q - me->dyn));
    const void *key = nullptr;
    size_t off = 0, bytes = 0;
    {
        std::lock_guard<std::mutex> lock(me->smem_m);
        for (auto &e : me->smem)
            if (inside(e.second)) {
                key = e.first, off = (size_t)(q - (const unsigned char *)e.second.data());
                bytes = e.second.size() * sizeof(std::max_align_t);
                break;
            }
    }
    if (!key) fprintf(stderr, "emu: cluster_map of an address outside shared memory\n"), abort();
    return (T *)(smem_of(other, key, bytes) + off);
}

template <class... P>
struct launcher {
    void (*k)(P...);
    dim3 g, b;
    size_t smem;
    unsigned cx; /* blocks a cluster along x (1: none) */
    template <class... A>
    void operator()(A... args) {
        gridDim = g;
        blockDim = b;
        const unsigned nt = b.x * b.y * b.z;
        if (nt % 32 != 0) {
            fprintf(stderr, "emu: block of %u threads is not whole warps\n", nt);
            abort();
        }
        if (cx < 1 || g.x % cx != 0) {
            fprintf(stderr, "emu: a grid of %u blocks along x in clusters of %u\n", g.x, cx);
            abort();
        }
        /* one std::thread per CUDA thread of a cluster for the whole launch (creating them per block
         * cost more than most kernels' work); the clusters run one after another on them */
        std::barrier<> start(cx * nt + 1), done(cx * nt + 1);
        std::vector<block_state *> st(cx);
        cluster_state *cl = nullptr;
        dim3 cur;
        bool stop = false;
        std::vector<std::thread> th;
        th.reserve(cx * nt);
        for (unsigned r = 0; r < cx; r++)
            for (unsigned t = 0; t < nt; t++)
                th.emplace_back([&, r, t]() {
                    threadIdx = dim3(t % b.x, (t / b.x) % b.y, t / (b.x * b.y));
                    for (;;) {
                        start.arrive_and_wait();
                        if (stop) return;
                        blockIdx = dim3(cur.x + r, cur.y, cur.z);
                        g_block = st[r];
                        k(((P)args)...);
                        st[r]->warp_bar[t / 32]->arrive_and_drop(); /* threads that returned early free the rest */
                        st[r]->block_bar->arrive_and_drop();
                        if (cl) cl->bar->arrive_and_drop();
                        g_block = nullptr;
                        done.arrive_and_wait();
                    }
                });
        for (unsigned bz = 0; bz < g.z; bz++)
            for (unsigned by = 0; by < g.y; by++)
                for (unsigned bx = 0; bx < g.x; bx += cx) {
                    std::vector<std::unique_ptr<std::barrier<>>> bars;
                    std::vector<std::unique_ptr<block_state>> states;
                    std::barrier<> cbar((std::ptrdiff_t)(cx * nt));
                    cluster_state cs;
                    cs.bar = &cbar;
                    for (unsigned r = 0; r < cx; r++) {
                        bars.emplace_back(new std::barrier<>((std::ptrdiff_t)nt));
                        states.emplace_back(new block_state);
                        block_state &state = *states.back();
                        state.block_bar = bars.back().get();
                        for (unsigned w = 0; w < nt / 32; w++) state.warp_bar.emplace_back(new std::barrier<>(32));
                        state.xbuf.assign(nt, 0);
                        make_dyn_smem(state, smem + 16);
                        state.cluster = cx > 1 ? &cs : nullptr;
                        cs.ranks.push_back(&state);
                        st[r] = &state;
                    }
                    cl = cx > 1 ? &cs : nullptr;
                    cur = dim3(bx, by, bz);
                    start.arrive_and_wait(); /* the blocks run */
                    done.arrive_and_wait();
                }
        stop = true;
        start.arrive_and_wait();
        for (auto &x : th) x.join();
    }
};
template <class... P>
launcher<P...> launch(void (*k)(P...), dim3 g, dim3 b, size_t smem = 0, cudaStream_t = nullptr) {
    return launcher<P...>{k, g, b, smem, 1};
}
/* k in clusters of cx blocks along x, a cluster's blocks at once */
template <class... P>
launcher<P...> launch_cluster(void (*k)(P...), dim3 g, dim3 b, size_t smem, unsigned cx) {
    return launcher<P...>{k, g, b, smem, cx};
}
static inline void cluster_sync() {
    if (g_block->cluster) g_block->cluster->bar->arrive_and_wait();
    else g_block->block_bar->arrive_and_wait();
}

static inline unsigned flat_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
static inline uint64_t exchange(uint64_t v, unsigned src_lane) {
    const unsigned t = flat_tid(), w = t / 32;
    g_block->xbuf[t] = v;
    g_block->warp_bar[w]->arrive_and_wait();
    uint64_t r = g_block->xbuf[w * 32 + (src_lane & 31)];
    g_block->warp_bar[w]->arrive_and_wait();
    return r;
}
/* every lane's v into all[lane] behind the two barriers of one exchange (32 exchanges took 64: the
 * mma fragments, ldmatrix's row addresses) */
static inline void exchange_all(uint64_t v, uint64_t all[32]) {
    const unsigned t = flat_tid(), w = t / 32;
    g_block->xbuf[t] = v;
    g_block->warp_bar[w]->arrive_and_wait();
    for (unsigned i = 0; i < 32; i++) all[i] = g_block->xbuf[w * 32 + i];
    g_block->warp_bar[w]->arrive_and_wait();
}
static inline mbarrier &mbarrier_at(const void *addr) {
    std::lock_guard<std::mutex> lock(g_block->mbar_m);
    std::unique_ptr<mbarrier> &b = g_block->mbar[addr];
    if (!b) b.reset(new mbarrier);
    return *b;
}
static inline void named_barrier_arrive(int id, int count, bool wait) {
    named_barrier &b = g_block->named[id];
    std::unique_lock<std::mutex> lock(b.m);
    const unsigned phase = b.phase;
    if (++b.arrived == count) {
        b.arrived = 0;
        b.phase++;
        b.cv.notify_all();
        return;
    }
    if (wait) b.cv.wait(lock, [&] { return b.phase != phase; });
}
} // namespace emu

using emu::blockDim;
using emu::blockIdx;
using emu::gridDim;
using emu::threadIdx;

static inline void __syncthreads() { emu::g_block->block_bar->arrive_and_wait(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::g_block->warp_bar[emu::flat_tid() / 32]->arrive_and_wait(); }
template <class T>
static inline T __shfl_sync(unsigned, T v, int src) {
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    u = emu::exchange(u, (unsigned)src);
    T r;
    memcpy(&r, &u, sizeof(T));
    return r;
}
template <class T>
static inline T __shfl_xor_sync(unsigned m, T v, int x) { return __shfl_sync(m, v, (int)((emu::flat_tid() & 31) ^ x)); }
template <class T>
static inline T __shfl_down_sync(unsigned m, T v, unsigned d) { /* lanes past the warp keep their own value */
    const unsigned lane = emu::flat_tid() & 31;
    return __shfl_sync(m, v, (int)(lane + d < 32 ? lane + d : lane));
}
template <class T>
static inline T __shfl_up_sync(unsigned m, T v, unsigned d) { /* lanes below d keep their own value */
    const unsigned lane = emu::flat_tid() & 31;
    return __shfl_sync(m, v, (int)(lane >= d ? lane - d : lane));
}
static inline unsigned __ballot_sync(unsigned, int pred) {
    const unsigned t = emu::flat_tid(), w = t / 32;
    emu::g_block->xbuf[t] = pred ? 1 : 0;
    emu::g_block->warp_bar[w]->arrive_and_wait();
    unsigned m = 0;
    for (int i = 0; i < 32; i++) m |= (unsigned)emu::g_block->xbuf[w * 32 + i] << i;
    emu::g_block->warp_bar[w]->arrive_and_wait();
    return m;
}
static inline int __any_sync(unsigned m, int pred) { return __ballot_sync(m, pred) != 0u; }
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
static inline int __ffs(unsigned v) { return __builtin_ffs((int)v); }
static inline int __clzll(long long v) { return v ? __builtin_clzll((unsigned long long)v) : 64; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __int2float_rn(int v) { return (float)v; }
/* the read-only data cache's load: a plain load */
template <class T>
static inline T __ldg(const T *p) { return *p; }
/* prmt's default mode with selectors 0..7 (the sign-replicate flag is not emulated) */
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = (unsigned long long)x | (unsigned long long)y << 32;
    unsigned r = 0;
    for (int n = 0; n < 4; n++) r |= (unsigned)((v >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
    return r;
}
static inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
static inline float __ll2float_rn(long long v) { return (float)v; }

/* ---- runtime API ---- */
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev);
cudaError_t cudaMalloc(void **p, size_t n);
template <class T> cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t st); /* cudaMalloc: streams are synchronous */
cudaError_t cudaFreeAsync(void *p, cudaStream_t st);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaMemset(void *d, int v, size_t n);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned f, int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
template <class T> cudaError_t cudaFuncSetAttribute(T, cudaFuncAttribute, int) { return cudaSuccess; }
/* events: the C runtime's (cuda_emu_c.h), for the driver's header-inline helpers (gpu_internal.h's
 * gpu_side_fork) that translated .cu files include */
extern "C" cudaError_t emu_c_cudaEventRecord(cudaEvent_t e, cudaStream_t s);
extern "C" cudaError_t emu_c_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return emu_c_cudaEventRecord(e, s); }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    return emu_c_cudaStreamWaitEvent(s, e, flags);
}
template <class T>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, T, int, size_t) { *n = 1; return cudaSuccess; }

#endif
