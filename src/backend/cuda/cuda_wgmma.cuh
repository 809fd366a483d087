/* Warpgroup-level tensor-core primitives for sm_90a (internal header): wgmma.mma_async
 * m64n64k16 f16, m64n32k16 bf16 and m64n64k32 e4m3 with both operands in shared memory (128-byte
 * swizzle), m64n128k16 bf16 with B MN-major, and m64n32k16 / m64n64k16 / m64n128k16 bf16 with A from
 * registers, -> fp32; its fences, the shared-memory descriptors, setmaxnreg, and the barriers
 * between warp roles (named barriers, mbarriers).
 *
 * A (64 x K) and B (K x 64), K-major: row m of A / column n of B is 32 contiguous bytes (16 f16 or
 * 32 e4m3 values: one instruction's K) of row m / n of a [rows][128-byte] tile whose 16-byte chunk
 * c of row r sits at chunk c ^ (r & 7) (the 128-byte swizzle; the tile starts on 1024 bytes, 8-row
 * groups 1024 bytes apart); a later K step starts 32 bytes further into the rows. (A from
 * registers would save the A tile, but ptxas serialises every wgmma when registers feeding a later
 * one are written while an earlier one is in flight.)
 * D (64 x 64 fp32): warp w, lane 4g + t holds d[4i + 0/1] = (row 16w + g, cols 8i + 2t, +1) and
 * d[4i + 2/3] = (row 16w + g + 8, the same cols), i = 0..7 (N = 128: i = 0..15).
 *
 * wgmma runs asynchronously: issue (after di_wgmma_fence), di_wgmma_commit, and read D only after
 * di_wgmma_wait<n> has retired that group and di_wgmma_pin has told the compiler so. Shared memory written by threads (cp.async included) must pass
 * di_fence_proxy_async before a barrier that precedes the wgmma reading it (wgmma reads through
 * the async proxy).
 *
 * Under the CPU emulator (tools/cuda/emu) the same functions come from cuda_emu_mma.h: the
 * descriptor is the host address, the product is computed at issue from the layouts above. */
#ifndef DI_CUDA_WGMMA_CUH
#define DI_CUDA_WGMMA_CUH

#include <stdint.h>

#include "backend/cuda/cuda_mma.cuh"

#ifndef DI_CUDA_EMU_H
/* the descriptor of a K-major e4m3 operand at `smem` in the 128-byte swizzle (LBO unused = 1,
 * SBO = 1024 bytes between 8-row groups, mode 1 in bits 62-63) */
static __device__ __forceinline__ uint64_t di_wgmma_desc_sw128(const void *smem) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFFu) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}
/* the descriptor of an MN-major operand (wgmma's B with trans-b) in the 128-byte swizzle: atoms of
 * 8 K-rows x 64 16-bit N values (128 bytes a row), 8-row groups 1024 bytes apart along K (SBO), N
 * atoms `lbo` bytes apart (LBO) */
static __device__ __forceinline__ uint64_t di_wgmma_desc_sw128_mn(const void *smem, uint32_t lbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFFu) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFFu) << 16 | (uint64_t)(1024 >> 4) << 32 |
           (uint64_t)1 << 62;
}
/* a descriptor moved `bytes` (a multiple of 16) further into shared memory: its address field is
 * the address / 16, and shared addresses stay below 2^18, so nothing carries out of it */
static __device__ __forceinline__ uint64_t di_wgmma_desc_add(uint64_t desc, uint32_t bytes) {
    return (desc & 0xFFFFFFFF00000000ull) | (uint32_t)((uint32_t)desc + (bytes >> 4)); /* a 32-bit add */
}
/* the first 1024-byte boundary at or after p in shared memory (swizzled tiles start there) */
static __device__ __forceinline__ uint8_t *di_smem_align1024(uint8_t *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return p + ((1024u - (a & 1023u)) & 1023u);
}
static __device__ __forceinline__ void di_fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
static __device__ __forceinline__ void di_wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void di_wgmma_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* wait until at most N committed wgmma groups are in flight */
template <int N>
static __device__ __forceinline__ void di_wgmma_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* the compiler may not move uses of these registers across this point (after a wait: D is final) */
template <int R>
static __device__ __forceinline__ void di_wgmma_pin(float (&r)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(r[i])::"memory");
}

/* the D operand lists of a wgmma with 16 / 32 / 64 fp32 outputs (N = 32 / 64 / 128) */
#define DI_WGMMA_REGS16 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
#define DI_WGMMA_OUT16(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define DI_WGMMA_REGS32 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define DI_WGMMA_REGS64 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define DI_WGMMA_OUT32(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define DI_WGMMA_OUT64(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

/* d = A (64x16 f16) * B (16x64 f16) (+ d when acc), both K-major in shared memory (descriptors of
 * 16 values = 32 bytes of each row), fp32 accumulation */
static __device__ __forceinline__ void di_wgmma_f16_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " DI_WGMMA_REGS32 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : DI_WGMMA_OUT32(d)
                 : "l"(desc_a), "l"(desc_b), "r"(acc));
}

/* d = A (64x16 bf16) * B (16x32 bf16) (+ d when acc), both K-major in shared memory (the layout
 * above), fp32 accumulation: the attention kernel's logits (cuda_attention_wg.cu) */
static __device__ __forceinline__ void di_wgmma_bf16_m64n32k16(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " DI_WGMMA_REGS16 "%16, %17, p, 1, 1, 0, 0;\n}\n"
                 : DI_WGMMA_OUT16(d)
                 : "l"(desc_a), "l"(desc_b), "r"(acc));
}
/* d += A (64x16 bf16, K-major) * B (16x128 bf16, MN-major: di_wgmma_desc_sw128_mn), both in shared
 * memory: the attention kernel's p V */
static __device__ __forceinline__ void di_wgmma_bf16_m64n128k16_tb(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " DI_WGMMA_REGS64 "%64, %65, p, 1, 1, 0, 1;\n}\n"
                 : DI_WGMMA_OUT64(d)
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

/* d += A (64x16 bf16) * B (16xN bf16), N = 32, 64 or 128, A from registers, B K-major in shared
 * memory (a descriptor as above): a[4] is this thread's share of the 64x16 A tile, the
 * mma.m16n8k16 A fragment of its warp's 16 rows (warp w of the group: rows 16w..; lane 4g + t:
 * a0 = row g, k 2t and 2t + 1 (low half first), a1 = row g + 8, a2 = row g, k 2t + 8, 2t + 9, a3 =
 * row g + 8, k 2t + 8, 2t + 9). Always accumulates. The registers must not change until the
 * wgmma retired. */
static __device__ __forceinline__ void di_wgmma_bf16_rs_m64n32k16(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " DI_WGMMA_REGS16
                 "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
                 : DI_WGMMA_OUT16(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
static __device__ __forceinline__ void di_wgmma_bf16_rs_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " DI_WGMMA_REGS32
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : DI_WGMMA_OUT32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
static __device__ __forceinline__ void di_wgmma_bf16_rs_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " DI_WGMMA_REGS64
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                 : DI_WGMMA_OUT64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

/* warp-specialised register budgets: a warpgroup gives registers back (dec) or takes them (inc);
 * N a multiple of 8 in 24..256, every warp of the warpgroup executes it */
template <int N>
static __device__ __forceinline__ void di_setmaxnreg_dec(void) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
static __device__ __forceinline__ void di_setmaxnreg_inc(void) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* Named barriers (ids 1..15; 0 is __syncthreads) between warp roles of a CTA: `count` threads (a
 * multiple of 32) take part; di_bar_sync waits for them, di_bar_arrive signals without waiting.
 * They serve orderings that guard no shared memory (the wgmma consumers' turns). A shared-memory
 * slot handed from one role to another goes through an mbarrier (below): compute-sanitizer's
 * racecheck reports every arrive / sync handshake over shared memory as a race, stores and
 * cp.async alike, and none through mbarriers (tools/cuda/probe_racecheck.cu, docs/CUDA.md). */
static __device__ __forceinline__ void di_bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
static __device__ __forceinline__ void di_bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* mbarriers (a 64-bit word in shared memory): init by one thread before a __syncthreads, a phase
 * completes when `count` threads have arrived (arrive: release of the thread's earlier accesses);
 * di_mbar_wait(b, parity) returns once the phase of that parity has completed (phase k has parity
 * k & 1; the first phase is 0, so waiting for parity 1 before any completion returns at once). */
static __device__ __forceinline__ void di_mbar_init(uint64_t *b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(b)), "r"(count)
                 : "memory");
}
static __device__ __forceinline__ void di_mbar_arrive(uint64_t *b) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(b))
                 : "memory");
}
static __device__ __forceinline__ void di_mbar_wait(uint64_t *b, int parity) {
    asm volatile("{\n.reg .pred p;\nDI_MBAR_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra DI_MBAR_WAIT;\n}\n" ::"r"((uint32_t)__cvta_generic_to_shared(b)),
                 "r"(parity)
                 : "memory");
}

/* d = A (64x32 e4m3) * B (32x64 e4m3), both K-major in shared memory (descriptors); the
 * accumulator input is ignored */
static __device__ __forceinline__ void di_wgmma_e4m3_m64n64k32(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " DI_WGMMA_REGS32 "%32, %33, p, 1, 1;\n}\n"
                 : DI_WGMMA_OUT32(d)
                 : "l"(desc_a), "l"(desc_b), "n"(0));
}
#endif

#endif
