/* deepinfer-cuda-probe-mma: which tensor-core instruction gives which bits for one 32-wide e4m3
 * block sum (the unit of every quantised GEMM here), on this GPU. A measurement tool, not a test.
 *
 * The same 64 x 64 block sums (A 64 x 32 and B 32 x 64 of e4m3 codes, random signs and
 * exponents over the whole e4m3 range, or over one binade-wide "activation-like" range) are
 * computed five ways and compared bit for bit:
 *   exact     double sum on the host, rounded once to fp32
 *   mma.sync  mma.sync m16n8k32 e4m3 (what the default GEMMs run; ptxas emits two f16 HMMAs on
 *             sm_90)
 *   qgmma     wgmma m64n64k32 e4m3 (QGMMA, the FP8 wgmma of DEEPINFER_GPU_WGMMA=1)
 *   hgmma     the codes widened to f16 (exactly), two wgmma m64n64k16 f16 -> fp32 steps, k 0-15
 *             with a zero accumulator, then k 16-31 accumulated (hgmma_rev: k 16-31 first);
 *             hgmma_mod4(_rev): the halves are k % 4 < 2 and k % 4 >= 2 instead
 * Prints, per data kind, how many of the 4096 x trials sums each way differs from exact and from
 * mma.sync. Built with `make cuda` (build-cuda/deepinfer-cuda-probe-mma [trials]). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_wgmma.cuh"
#include "backend/cuda/cuda_check.cuh" /* DI_CUDA_CHECK */

#define CK(call) DI_CUDA_CHECK(call)

/* ---- device: one trial = A [64][32] and B [64 n][32 k] codes; D [64][64] fp32 ---- */
__global__ void probe_mma_sync(const uint8_t *a, const uint8_t *b, float *d) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint8_t *A = a + blockIdx.x * 2048, *B = b + blockIdx.x * 2048;
    float *D = d + blockIdx.x * 4096;
    const int r0 = 16 * warp + g;
    uint32_t af[4];
    af[0] = *(const uint32_t *)(A + r0 * 32 + 4 * t);
    af[1] = *(const uint32_t *)(A + (r0 + 8) * 32 + 4 * t);
    af[2] = *(const uint32_t *)(A + r0 * 32 + 16 + 4 * t);
    af[3] = *(const uint32_t *)(A + (r0 + 8) * 32 + 16 + 4 * t);
    for (int i = 0; i < 8; i++) {
        const int n = 8 * i + g;
        const uint32_t bf[2] = {*(const uint32_t *)(B + n * 32 + 4 * t), *(const uint32_t *)(B + n * 32 + 16 + 4 * t)};
        float v[4];
        di_mma_e4m3_16832(v, af, bf);
        D[r0 * 64 + 8 * i + 2 * t] = v[0];
        D[r0 * 64 + 8 * i + 2 * t + 1] = v[1];
        D[(r0 + 8) * 64 + 8 * i + 2 * t] = v[2];
        D[(r0 + 8) * 64 + 8 * i + 2 * t + 1] = v[3];
    }
}

#ifndef DI_CUDA_EMU_H
/* the k at f16 position p (0..31) of a tile row: modes 1, 2 in order; modes 3, 4 the k with
 * k % 4 < 2 first (positions 0-15), then those with k % 4 >= 2 -- the split of mma.sync's e4m3
 * registers (k 4t..4t+3, 16+4t..) into f16 pairs without moving data between lanes */
static __device__ __forceinline__ int probe_k(int mode, int p) {
    if (mode <= 2) return p;
    const int half = p >> 4, q = p & 15; /* q-th k of the half: pairs 4i + 2 half, + 1 */
    return 4 * (q >> 1) + 2 * half + (q & 1);
}

/* one warpgroup; mode 0: qgmma (e4m3); f16 hgmma over positions 0-15 then 16-31 (1, 3) or
 * 16-31 first (2, 4), positions in k order (1, 2) or split by k % 4 (3, 4) (probe_k).
 * Operands as [64][128-byte] swizzled tiles: e4m3 rows use bytes 0-31, f16 rows bytes 0-63 */
__global__ void probe_wgmma(const uint8_t *a, const uint8_t *b, float *d, int mode) {
    __shared__ __align__(16) uint8_t raw[2 * 64 * 128 + 1024];
    uint8_t *sa = di_smem_align1024(raw), *sb = sa + 64 * 128; /* swizzled tiles start on 1024 bytes */
    const uint8_t *A = a + blockIdx.x * 2048, *B = b + blockIdx.x * 2048;
    float *D = d + blockIdx.x * 4096;
    const int tid = threadIdx.x;
    for (int i = tid; i < 64 * 8; i += 128) { /* row r, 16-byte chunk c of the 128-byte row */
        const int r = i >> 3, c = i & 7;
        uint4 va = make_uint4(0, 0, 0, 0), vb = make_uint4(0, 0, 0, 0);
        if (mode == 0 && c < 2) {
            va = *(const uint4 *)(A + r * 32 + 16 * c);
            vb = *(const uint4 *)(B + r * 32 + 16 * c);
        } else if (mode != 0 && c < 4) { /* f16 of the codes at positions 8c .. 8c + 7 */
            uint32_t wa[4], wb[4];
            for (int j = 0; j < 4; j++) {
                const int p = 8 * c + 2 * j, k0 = probe_k(mode, p), k1 = probe_k(mode, p + 1);
                const uint16_t pa = (uint16_t)(A[r * 32 + k0] | A[r * 32 + k1] << 8);
                const uint16_t pb = (uint16_t)(B[r * 32 + k0] | B[r * 32 + k1] << 8);
                wa[j] = di_e4m3x2_to_f16x2(pa), wb[j] = di_e4m3x2_to_f16x2(pb);
            }
            va = make_uint4(wa[0], wa[1], wa[2], wa[3]);
            vb = make_uint4(wb[0], wb[1], wb[2], wb[3]);
        }
        *(uint4 *)(sa + r * 128 + ((c ^ (r & 7)) << 4)) = va;
        *(uint4 *)(sb + r * 128 + ((c ^ (r & 7)) << 4)) = vb;
    }
    di_fence_proxy_async();
    __syncthreads();
    float acc[32];
    for (int i = 0; i < 32; i++) acc[i] = 0.0f;
    di_wgmma_fence();
    if (mode == 0) {
        di_wgmma_e4m3_m64n64k32(acc, di_wgmma_desc_sw128(sa), di_wgmma_desc_sw128(sb));
    } else {
        const int first = mode == 1 || mode == 3 ? 0 : 32, second = 32 - first; /* byte offsets of the k16 halves */
        di_wgmma_f16_m64n64k16(acc, di_wgmma_desc_sw128(sa + first), di_wgmma_desc_sw128(sb + first), 0);
        di_wgmma_f16_m64n64k16(acc, di_wgmma_desc_sw128(sa + second), di_wgmma_desc_sw128(sb + second), 1);
    }
    di_wgmma_commit();
    di_wgmma_wait<0>();
    di_wgmma_pin(acc);
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 8; i++)
        for (int r = 0; r < 4; r++) D[(16 * warp + g + 8 * (r >> 1)) * 64 + 8 * i + 2 * t + (r & 1)] = acc[4 * i + r];
}
#endif

/* ---- host ---- */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static double e4m3_value(uint8_t c) {
    const int ex = (c >> 3) & 15, man = c & 7;
    const double v = (ex == 0 ? man : (8 + man) << (ex - 1)) / 512.0;
    return (c & 0x80) ? -v : v;
}
/* wide: any finite code; act: exponent field 11..15 (a few binades, as act_quant'ed blocks) */
static uint8_t rnd_code(bool wide) {
    for (;;) {
        uint8_t c = (uint8_t)rnd();
        if (!wide) c = (uint8_t)((c & 0x87) | ((11 + rnd() % 5) << 3));
        if ((c & 0x7f) != 0x7f) return c;
    }
}

int main(int argc, char **argv) {
    const int trials = argc > 1 ? atoi(argv[1]) : 256;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 0;
    }
    const size_t ab = (size_t)trials * 2048, db = (size_t)trials * 4096 * sizeof(float);
    uint8_t *ha = (uint8_t *)malloc(ab), *hb = (uint8_t *)malloc(ab);
    float *exact = (float *)malloc(db), *got[6];
    for (int k = 0; k < 6; k++) got[k] = (float *)malloc(db);
    uint8_t *da, *dbuf;
    float *dd;
    CK(cudaMalloc(&da, ab));
    CK(cudaMalloc(&dbuf, ab));
    CK(cudaMalloc(&dd, db));
    static const char *names[6] = {"mma.sync", "qgmma", "hgmma", "hgmma_rev", "hgmma_mod4", "hgmma_mod4_rev"};
    printf("block sums of 32 e4m3 products, %d x 4096 per data kind\n\n", trials);
    printf("| data | way | differ from exact | differ from mma.sync |\n|---|---|---|---|\n");
    for (int wide = 0; wide < 2; wide++) {
        for (size_t i = 0; i < ab; i++) ha[i] = rnd_code(wide), hb[i] = rnd_code(wide);
        for (int tr = 0; tr < trials; tr++)
            for (int m = 0; m < 64; m++)
                for (int n = 0; n < 64; n++) {
                    double s = 0.0; /* exact: products are multiples of 2^-18 below 2^18 */
                    for (int k = 0; k < 32; k++)
                        s += e4m3_value(ha[tr * 2048 + m * 32 + k]) * e4m3_value(hb[tr * 2048 + n * 32 + k]);
                    exact[(size_t)tr * 4096 + m * 64 + n] = (float)s;
                }
        CK(cudaMemcpy(da, ha, ab, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dbuf, hb, ab, cudaMemcpyHostToDevice));
        for (int way = 0; way < 6; way++) {
            CK(cudaMemset(dd, 0xff, db));
            if (way == 0) probe_mma_sync<<<trials, 128>>>(da, dbuf, dd);
#ifndef DI_CUDA_EMU_H
            else probe_wgmma<<<trials, 128>>>(da, dbuf, dd, way - 1);
#endif
            CK(cudaGetLastError());
            CK(cudaMemcpy(got[way], dd, db, cudaMemcpyDeviceToHost));
        }
        for (int way = 0; way < 6; way++) {
            long ne = 0, nm = 0;
            for (size_t i = 0; i < (size_t)trials * 4096; i++) {
                ne += memcmp(&got[way][i], &exact[i], 4) != 0;
                nm += memcmp(&got[way][i], &got[0][i], 4) != 0;
            }
            printf("| %s | %s | %ld | %ld |\n", wide ? "wide" : "act-like", names[way], ne, nm);
        }
    }
    cudaFree(da), cudaFree(dbuf), cudaFree(dd);
    free(ha), free(hb), free(exact);
    for (int k = 0; k < 6; k++) free(got[k]);
    return 0;
}
