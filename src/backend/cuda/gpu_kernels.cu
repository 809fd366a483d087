/* Kernels of the GPU forward driver itself (gpu_internal.h): the attention index lists, built on
 * the device from the per-call tables and the indexer's selections in exactly the order of the
 * CPU's build_index_list (src/forward/attention.c; at decode the same launch writes the rows' kv
 * into their SWA rings; compressed entries are their pool records, marked DI_KV_REF_RECORD, which
 * the attention kernels decode as they stage them), and the deterministic random fill that gives config-only models (the
 * benchmark's) their weights and its fast-forwarded sequences their KV entries. */
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"

extern "C" {
#include "backend/cuda/gpu_internal.h"
}

/* one thread per (row, list entry); with write_rings the row's first dh / 4 threads also copy its kv
 * row into the ring (a float4 each) */
__global__ void attn_list_kernel(gpu_list_args a, int64_t R, int n_list, const float **list) {
    DI_PDL_BEGIN();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * n_list) return;
    const int64_t r = i / n_list;
    const int j = (int)(i % n_list);
    const int s = a.row_seq[r];
    const int64_t t = a.row_pos[r], pos0 = a.seq_pos0[s];
    const int W = a.window;
    const float *out = nullptr;
    int nw;
    int64_t first;
    if (pos0 == 0) { /* fresh prefill: min(S, W) entries from max(0, t - W + 1) */
        const int S = a.seq_n_rows[s];
        nw = S < W ? S : W;
        first = t - W + 1 > 0 ? t - W + 1 : 0;
    } else {
        nw = W;
        first = t - W + 1;
    }
    if (j < nw) {
        const int64_t q = first + j;
        if (q >= 0 && q <= t) {
            if (q >= pos0) out = a.kv + (a.seq_row0[s] + (q - pos0)) * (int64_t)a.dh;
            else out = a.ring[s] + (q % W) * (int64_t)a.dh;
        }
    } else if (a.sel && j - nw < a.sel_len) {
        const int32_t g = a.sel[r * a.sel_stride + (j - nw)];
        if (g >= 0 && g < a.n_entries[s]) {
            const int32_t blk = a.blocks[s][g / a.block_entries];
            const uint8_t *rec = reinterpret_cast<const uint8_t *>(a.pool[s] + (int64_t)blk * a.block_entries * a.entry_floats) +
                                 (int64_t)(g % a.block_entries) * a.row_bytes;
            out = reinterpret_cast<const float *>(reinterpret_cast<uintptr_t>(rec) | DI_KV_REF_RECORD); /* a record */
        }
    }
    list[i] = out;
    if (a.write_rings && j < a.dh / 4)
        reinterpret_cast<float4 *>(a.ring[s] + (t % W) * (int64_t)a.dh)[j] =
            reinterpret_cast<const float4 *>(a.kv + r * (int64_t)a.dh)[j];
}

extern "C" void gpu_build_attn_lists(const gpu_list_args *a, int64_t R, int n_list, const float **list,
                                     cudaStream_t s) {
    const int64_t n = R * n_list;
    if (n <= 0) return;
    attn_list_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(*a, R, n_list, list);
    DI_CUDA_LAUNCHED();
}

/* ---- deterministic random weights (kinds as in gpu_backend.c) ---- */
__device__ static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* byte i of a buffer of `kind` from the random word r */
__device__ static uint8_t random_byte(int kind, uint64_t r, size_t i) {
    switch (kind) {
    case 0: return (uint8_t)(r & 0x77) | (uint8_t)(r >> 8 & 0x80); /* e4m3, |v| < 2: no NaN */
    case 1: return (uint8_t)(120 + (r % 4));                       /* e8m0 2^-7..2^-4 */
    case 2: /* bf16 in (-0.0625, 0.0625), little-endian pairs: exponent byte odd, mantissa even */
        return (i & 1) ? (uint8_t)(0x3c | (r >> 8 & 0x80)) - (uint8_t)(r % 2) : (uint8_t)r;
    case 3: /* f32 small: bytes 0-2 random, byte 3 sign + exponent 0x3c (~[2^-7, 2^-6)) */
        return (i & 3) == 3 ? (uint8_t)(0x3c | (r >> 8 & 0x80)) : (uint8_t)r;
    default: return (uint8_t)r; /* FP4 pairs: every code is finite */
    }
}

__global__ void fill_random_kernel(uint8_t *p, size_t bytes, uint64_t seed, int kind) {
    DI_PDL_BEGIN();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += stride)
        p[i] = random_byte(kind, mix64(seed + i), i);
}

extern "C" void gpu_fill_random(void *dev, size_t bytes, uint64_t seed, int kind, cudaStream_t s) {
    if (!bytes) return;
    fill_random_kernel<<<1024, 256, 0, s>>>((uint8_t *)dev, bytes, seed, kind);
    DI_CUDA_LAUNCHED();
}

/* KV pool blocks of block_bytes (state.h's layout): block_entries KV row records of row_bytes for dh
 * dims (forward/kv_record.h: random codes, e4m3 scales 2^-6 .. 2^-5), then index key records of
 * key_bytes for idim dims (forward/index_key.h: random codes, block scales 2^-7 .. 2^0); zero padding */
__global__ void fill_kv_blocks_kernel(uint8_t *p, size_t bytes, int block_bytes, int block_entries, int row_bytes, int dh,
                                      int key_bytes, int idim, uint64_t seed) {
    DI_PDL_BEGIN();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const int keys_offset = block_entries * row_bytes;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += stride) {
        const uint64_t r = mix64(seed + i);
        const int pos = (int)(i % (size_t)block_bytes);
        const int rel = pos < keys_offset ? pos % row_bytes : (pos - keys_offset) % key_bytes;
        const int n_codes = pos < keys_offset ? dh / 2 : idim / 2, n_scales = pos < keys_offset ? dh / 16 : idim / 32;
        uint8_t v = 0;
        if (rel < n_codes) v = random_byte(4, r, (size_t)rel); /* codes */
        else if (rel < n_codes + n_scales) v = pos < keys_offset ? (uint8_t)(8 + r % 8) : (uint8_t)(120 + r % 8);
        p[i] = v;
    }
}

extern "C" void gpu_fill_kv_blocks(void *dev, size_t bytes, int block_bytes, int block_entries, int row_bytes, int dh,
                                   int key_bytes, int idim, uint64_t seed, cudaStream_t s) {
    if (!bytes) return;
    fill_kv_blocks_kernel<<<1024, 256, 0, s>>>((uint8_t *)dev, bytes, block_bytes, block_entries, row_bytes, dh, key_bytes,
                                               idim, seed);
    DI_CUDA_LAUNCHED();
}
