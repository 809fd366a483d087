/* mHC hyper-connection ops on the GPU (model-spec §2.0 hc_split_sinkhorn, §2.3), twins of
 * src/backend/cpu/cpu_mhc.c, batched over T tokens. The residual stream (x, r, out [T, n, d]) is
 * bf16 bits, as the reference keeps it: every value is a bf16-rounded hc_post (embedding, Engram)
 * output, so the kernels move 2 bytes a value where the fp32 buffer took 4 (session 55).
 *
 * hc_mix_logits: the CPU's double sums (sum of squares and fn . x over the n*d values of a token)
 * are split into chunks of mix_chunk values (256; 128 for n >= 5). One thread block per (chunk,
 * group of MIX_TOKENS tokens) stages the chunk of every fn row in shared memory as doubles, then
 * each warp streams its tokens' x from global memory and the fp64 tensor cores (a chain per 8 fn
 * rows: mma.m16n8k16 over 16 tokens and half the chunk for up to 24 fn rows, the model's n = 4,
 * since session 56; mma.m8n8k4 over 8 tokens otherwise) sum the chunk's products, a chain a lane
 * its squares; a second kernel adds the chunk sums (a warp per output, fixed order) and applies
 * the CPU's fp32 tail. (Earlier forms:
 * a thread per token and two fn rows, bound by shared memory, 123 us a call at 512 tokens; x staged
 * as doubles too, 16 tokens and 256 values a block, 82 us: its blocks waited on their staging and a
 * warp's 64 dependent mmas.) Each fn value fetched serves MIX_TOKENS tokens. The chunking depends
 * on n*d alone and a token's sums never on the other tokens, so the result does not depend on T
 * (batch invariant). Each product is exact in double (bf16 x f32 needs 32 bits), so the sums
 * differ from the CPU's single index-order chain only in the last double bits, which reach the
 * fp32 result only within 2^-29 of a rounding boundary.
 * hc_split_sinkhorn: for n*n <= 32 one warp per token, lane r*n+k holding c[r][k]; row and column
 * sums gather the n values through shuffles and add them in the CPU's order, every division is
 * the CPU's, so the result is bit-exact (sigmoid and softmax through di_dev_expf, glibc's expf
 * algorithm), 20 iterations in ~2 us instead of a single thread's serial ~n^2 divisions per
 * step. Larger n: one thread per token running the CPU code as is (n <= 8).
 * hc_pre / hc_post: the CPU's fp32 sums in the CPU's order, bit-exact; hc_pre a thread per output
 * value, hc_post a thread per (token, k) for the token's n outputs there -- and, past 32 tokens,
 * the next input's hc_pre of those outputs too (di_cuda_hc_post_pre; session 49, ncu on an H100,
 * B = 256: hc_post 18.4 -> 21.8 us and hc_pre's 10.3 gone, a sublayer; a 512-token prefill 34.4 ->
 * 41.8 and 16.9 gone), and the MoE combine left to it (di_cuda_hc_post_combine_pre; session 50,
 * B = 256: hc_post 21.9 + the combine's 17.7 -> 37.9 us a layer).
 * The model's weights these kernels read (fn rows, Sinkhorn scales and bases) are loaded before
 * griddepcontrol.wait: nothing earlier in a step writes them (session 50).
 * At <= 32 tokens (decode steps) a sublayer's input runs as two launches: the chunk kernel of the
 * mix sums, which can make its x first as hc_post of the previous sublayer (and that sublayer's
 * MoE combine before it), and hc_block_in_kernel, which can also write act_quant's codes and the
 * bf16 bits of its output for the linears that read it (session 22: ~5 launches fewer a layer). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_wgmma.cuh"

#define MIX_THREADS 256
#define MIX_WARPS (MIX_THREADS / 32)
#define MIX_TOKENS (8 * MIX_WARPS)   /* tokens per block: a warp per 8 (m8n8k4), or 16 a warp per half chunk (m16n8k16) */
#define MIX_MAX_SLICE 1024           /* tokens per pass: bounds the partial sums' workspace */
#define HC_MAX_N 8

/* fn rows staged: nmix rounded up to whole m8n8k4 tiles (the rows past nmix are zeros) */
static __host__ __device__ constexpr int mix_fn_rows(int nmix) { return (nmix + 7) & ~7; }
/* values of a token's n*d per block: 256, or 128 for more than 24 fn rows (n >= 5), so that a
 * block's fn chunk as doubles stays under 85 KB. (512 halved the blocks of a decode step and
 * doubled their mma chains: B = 1 lost 0.5 ms a step; 256 gives the decode step 80 blocks.) */
static __host__ __device__ constexpr int mix_chunk(int nmix) { return mix_fn_rows(nmix) <= 24 ? 256 : 128; }
/* doubles per staged fn row: chunk + 2, so that the 16-byte loads of a quarter warp (rows g, g + 1
 * at 4 t..) fall on distinct banks */
static __host__ __device__ constexpr int mix_stride(int nmix) { return mix_chunk(nmix) + 2; }
static __host__ __device__ size_t mix_smem_bytes(int nmix) { return sizeof(double) * (size_t)mix_fn_rows(nmix) * mix_stride(nmix); }

/* fs [ROWS][mix_stride] doubles <- fn's rows (stride len floats) from i0, cl values each (mix_chunk
 * at most), zeros past cl and in rows nmix .. ROWS - 1 (the tensor-core tiles read them). A thread
 * issues all its loads before it converts and stores any (a load-store loop waits out each load):
 * with 8-byte rows a pair a load (n = 4: twelve a thread for the 24 rows of a 256-value chunk),
 * else a value a load, MIX_STAGE_BATCH at a time. The shape is compile-time: with the chunk a
 * run-time value each value's row and column took an integer division (~1,000 instructions a
 * thread for 24 values). Session 36's forms, ncu us a launch of the decode step's fused chunk
 * kernel / a prefill's (1,024 tokens): run-time shape 8.5 / 70.9; compile-time, a value a load
 * 9.3 / 63.5 (ptxas converted each value right after its load: a round trip to memory a value);
 * a quad a load 7.4 / 68.6 (a warp's 16-byte stores, 32 bytes apart, hit every bank twice); a pair
 * a load, this form, 7.3 / 68.0 (the combine-fused decode kernel 9.9 -> 10.3). Why the value form
 * runs the prefill's launch faster is not known. Since session 49 a POST kernel issues the pair
 * form's loads before it makes its x (mix_fn_pairs), so the two sets of loads are in flight together:
 * the combine-fused decode kernel 19.35 -> 19.00 us (ncu, H100). A chunk of 128 values (160 blocks
 * at n = 4) ran slower there: 10.55 -> 12.19 us for the hc_post-fused kernel, 19.35 -> 18.97 for the
 * combine-fused one, 27.2 -> 30.6 for B = 256's (80 x 4 blocks). */
#define MIX_STAGE_BATCH 24
/* the pair form's loads of a thread (n = 4: twelve float2), held in registers until stored: a POST
 * kernel issues them before making its x, so that both sets of loads are in flight together */
template <int ROWS>
struct mix_fn_pairs {
    static constexpr int CHUNK = mix_chunk(ROWS), PROW = CHUNK / 2, RSTEP = MIX_THREADS / PROW, PER = ROWS / RSTEP;
    static_assert(MIX_THREADS % PROW == 0 && ROWS % RSTEP == 0, "whole rows a pass of the block");
    float2 v[PER];
    bool on; /* the pair form applies: len even, fn 8-byte aligned (cl even too: chunks start at even values) */
    __device__ void load(const float *fn, int64_t len, int nmix, int cl) {
        on = len % 2 == 0 && (uintptr_t)fn % 8 == 0;
        if (!on) return;
        const int i = 2 * (threadIdx.x % PROW), r0 = threadIdx.x / PROW; /* this thread's pair; first row */
#pragma unroll
        for (int u = 0; u < PER; u++) {
            const int row = r0 + RSTEP * u;
            v[u] = i < cl && row < nmix ? __ldg(reinterpret_cast<const float2 *>(fn + row * len + i)) : make_float2(0.0f, 0.0f);
        }
    }
    __device__ void store(double *fs) const {
        constexpr int stride = mix_stride(ROWS);
        const int i = 2 * (threadIdx.x % PROW), r0 = threadIdx.x / PROW;
#pragma unroll
        for (int u = 0; u < PER; u++) /* stride even: a warp's 16-byte stores side by side, no bank conflict */
            *reinterpret_cast<double2 *>(fs + (r0 + RSTEP * u) * stride + i) = make_double2(v[u].x, v[u].y);
    }
};

/* fs [ROWS][mix_stride] doubles <- fn's rows (stride len floats) from i0, cl values each, in the value
 * form (see above), where the pair form (mix_fn_pairs) does not apply */
template <int ROWS>
static __device__ void mix_stage_fn_values(double *fs, const float *fn, int64_t len, int nmix, int cl) {
    constexpr int CHUNK = mix_chunk(ROWS), stride = mix_stride(ROWS);
    constexpr unsigned total = ROWS * CHUNK;
    for (unsigned k0 = threadIdx.x; k0 < total; k0 += MIX_STAGE_BATCH * MIX_THREADS) {
        float v[MIX_STAGE_BATCH];
#pragma unroll
        for (unsigned u = 0; u < MIX_STAGE_BATCH; u++) {
            const unsigned k = k0 + u * MIX_THREADS, row = k / CHUNK, i = k % CHUNK;
            v[u] = k < total && row < (unsigned)nmix && i < (unsigned)cl ? fn[row * len + i] : 0.0f;
        }
#pragma unroll
        for (unsigned u = 0; u < MIX_STAGE_BATCH; u++) {
            const unsigned k = k0 + u * MIX_THREADS;
            if (k < total) fs[k / CHUNK * stride + k % CHUNK] = (double)v[u];
        }
    }
}

/* POST: the kernel first makes x itself, as hc_post of the previous sublayer (x = out = hc_post(y, r,
 * post, comb), hc_post_kernel's expression bit for bit): the whole block computes its chunk of its
 * tokens' stream into shared memory (and out), then the warps sum from there. The separate hc_post
 * launch (~4.7 us at B = 1, mostly its start) goes. Needs d % 4 == 0 and 16-byte rows (a quad lies
 * in one copy j) and at most MIX_TOKENS tokens (one token group). A first form in which each lane made
 * its own quads inside the sum loop ran B = 8 1.2 ms a step slower: a turn's loads waited for the
 * previous turn's stores (out may alias r as far as the compiler knows) on one warp of eight. */
struct hc_post_src {
    const float *y;                   /* [T, d] */
    const uint16_t *r;                /* [T, n, d] bf16: the stream */
    const float *post, *comb;         /* [T, n], [T, n, n] */
    uint16_t *out;                    /* [T, n, d] bf16: the new stream, the x of the mix sums */
    int n;
    int d;
    /* POST == 2: y is the MoE's combine, made here (moe_combine4_kernel's sums; y unused) */
    const float *const *slot_rows; /* [T, K] slot -> its expert output row */
    const int32_t *order;          /* [T, K] slots by ascending expert */
    const float *shared;           /* [T, d] the shared expert's output */
    int K;
};

/* y's quad at (tok, pos): y itself, or (COMBINE) the MoE combine there -- bf16(0 + the slots' rows in
 * order + shared), moe_combine4_kernel's sums */
template <bool COMBINE>
static __device__ __forceinline__ float4 hc_post_y(const hc_post_src &p, int64_t tok, int pos) {
    if constexpr (!COMBINE) {
        return __ldg(reinterpret_cast<const float4 *>(p.y + tok * p.d + pos));
    } else {
        float4 v[DI_CUDA_COMBINE_MAX_K];
#pragma unroll
        for (int j = 0; j < DI_CUDA_COMBINE_MAX_K; j++)
            if (j < p.K) v[j] = *reinterpret_cast<const float4 *>(p.slot_rows[tok * p.K + p.order[tok * p.K + j]] + pos);
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int j = 0; j < DI_CUDA_COMBINE_MAX_K; j++)
            if (j < p.K) acc.x += v[j].x, acc.y += v[j].y, acc.z += v[j].z, acc.w += v[j].w;
        const float4 sh = __ldg(reinterpret_cast<const float4 *>(p.shared + tok * p.d + pos));
        acc.x += sh.x, acc.y += sh.y, acc.z += sh.z, acc.w += sh.w;
        return make_float4(di_dev_bf16_round(acc.x), di_dev_bf16_round(acc.y), di_dev_bf16_round(acc.z),
                           di_dev_bf16_round(acc.w));
    }
}
/* floats of a token's staged chunk: chunk + 16, so that the quads of a quarter warp's two tokens
 * fall on distinct banks */
static __host__ __device__ int mix_post_stride(int nmix) { return mix_chunk(nmix) + 16; }

/* xs [tokens][mix_post_stride] <- values i0 .. i0 + cl of hc_post's output for `tokens` tokens from
 * tok0, also stored to out; a batch of quads a thread with all their loads issued first */
template <bool COMBINE>
static __device__ void mix_post_stage(const hc_post_src &p, int64_t tok0, int tokens, int64_t i0, int cl, int xstride,
                                      float *xs) {
    constexpr int BATCH = COMBINE ? 1 : 2; /* the combine's K rows take the second quad's registers */
    const int quads = cl / 4, total = tokens * quads, len = p.n * p.d;
    for (int q0 = threadIdx.x; q0 < total; q0 += BATCH * MIX_THREADS) {
        float4 rv[BATCH][HC_MAX_N], yv[BATCH];
        float c[BATCH][HC_MAX_N], pj[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; u++) {
            const int q = q0 + u * MIX_THREADS;
            if (q >= total) break;
            const int tl = q / quads, flat = (int)i0 + 4 * (q - tl * quads), j = flat / p.d, pos = flat - j * p.d;
            const int64_t tok = tok0 + tl;
            const float *ct = p.comb + tok * p.n * p.n;
#pragma unroll
            for (int i = 0; i < HC_MAX_N; i++)
                if (i < p.n) {
                    c[u][i] = __ldg(ct + i * p.n + j);
                    rv[u][i] = di_dev_bf16x4_load(p.r + tok * len + i * p.d + pos);
                }
            pj[u] = __ldg(p.post + tok * p.n + j);
            yv[u] = hc_post_y<COMBINE>(p, tok, pos);
        }
#pragma unroll
        for (int u = 0; u < BATCH; u++) {
            const int q = q0 + u * MIX_THREADS;
            if (q >= total) break;
            const int tl = q / quads, k = 4 * (q - tl * quads);
            float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int i = 0; i < HC_MAX_N; i++)
                if (i < p.n) {
                    const float ci = c[u][i];
                    s.x += ci * rv[u][i].x, s.y += ci * rv[u][i].y, s.z += ci * rv[u][i].z, s.w += ci * rv[u][i].w;
                }
            const float4 o = make_float4(di_dev_bf16_round(pj[u] * yv[u].x + s.x), di_dev_bf16_round(pj[u] * yv[u].y + s.y),
                                         di_dev_bf16_round(pj[u] * yv[u].z + s.z), di_dev_bf16_round(pj[u] * yv[u].w + s.w));
            *reinterpret_cast<float4 *>(xs + tl * xstride + k) = o;
            *reinterpret_cast<uint2 *>(p.out + (tok0 + tl) * len + i0 + k) = di_dev_bf16x4_of_exact(o);
        }
    }
}

/* part [T, nmix + 1, n_chunks] doubles: chunk sums of fn_j . x (j < nmix) and x . x (j = nmix).
 * grid (n_chunks, token groups of MIX_TOKENS). The block stages its chunk of every fn row once as
 * doubles; each warp then streams its tokens' x straight from global memory, 16 values a step
 * (lane 4g + t: values 4t .. 4t + 3 of the step of token g (and g + 8), one 8-byte load where x's
 * rows allow), and sums on the fp64 tensor cores, a chain an 8-row tile of fn. The sums of squares:
 * one chain a lane and token over its values, the four lanes of a token added by shuffles. Each
 * product is exact in double; the order of the additions is fixed by the chunking alone, never by T.
 * Two forms by the fn tiles (NFT):
 *   MIX_T16 (NFT <= 3, the model's n = 4 among them): warp w sums the 16 tokens 16 (w % 4) .. of the
 *     group over half w / 4 of the chunk with m16n8k16 (sm_90's fp64 shape: the flops of eight
 *     m8n8k4 in one instruction; its k index t + 4j stands for value 4t + j of the step), and the
 *     second half's warp hands its sums to the first through shared memory, which adds them (half
 *     0 + half 1) and stores. (tools/cuda/probe_dmma.cu on an H200: m8n8k4 reaches 33 TFLOP/s,
 *     m16n8k16 66, and one m16n8k16 equals four chained m8n8k4 bit for bit. The kernel gained
 *     little from the rate -- it waits on its loads: B = 256 22.2 -> 21.2 us a launch at two blocks
 *     a multiprocessor, 19.4 at three; docs/PERFORMANCE.md, session 56.)
 *   else: warp w sums the 8 tokens 8 w .. over the whole chunk with m8n8k4 (sub-step u: the k
 *     index t stands for value 4t + u) -- 10 fn tiles of m16n8 accumulators would take 160
 *     registers. */
static __host__ __device__ constexpr bool mix_t16(int nft) { return nft <= 3; }
/* shared memory where the second half's warps of MIX_T16 leave their sums: [4][32 lanes][4 NFT + 2] */
static __host__ __device__ size_t mix_half_bytes(int nmix) {
    const int nft = mix_fn_rows(nmix) / 8;
    return mix_t16(nft) ? sizeof(double) * 128 * (size_t)(4 * nft + 2) : 0;
}
template <int NFT, bool V4, int POST>
/* POST: one token group, 80 blocks at n = 4 -- one a multiprocessor, so ptxas may use more
 * registers (at two a multiprocessor these kernels spilled). MIX_T16 with x's 8-byte loads: three a
 * multiprocessor (80 registers; ~84 B of the fn pairs spill, tools/cuda/spills_allowed.txt), so that
 * B = 256's 320 blocks run as one wave -- faster than two without spills (session 56) */
__global__ void __launch_bounds__(MIX_THREADS, POST ? 1 : (mix_t16(NFT) && V4 ? 3 : 2))
hc_mix_part_kernel(const uint16_t *__restrict__ x, int64_t T, int64_t len, const float *__restrict__ fn, int nmix,
                   int n_chunks, double *__restrict__ part, hc_post_src ps) {
    extern __shared__ double mix_smem[];
    double *fs = mix_smem; /* [NFT * 8][mix_stride] */
    constexpr int chunk = mix_chunk(8 * NFT), stride = mix_stride(8 * NFT); /* nmix's: mix_fn_rows(nmix) = 8 NFT */
    constexpr bool T16 = mix_t16(NFT);
    constexpr int TPL = T16 ? 2 : 1;                   /* tokens a lane */
    constexpr int SPAN = T16 ? chunk / 2 : chunk;      /* values of the chunk a warp sums */
    const int c = blockIdx.x;
    const int64_t i0 = (int64_t)c * chunk;
    const int cl = len - i0 < chunk ? (int)(len - i0) : chunk;
    const int64_t tok0 = (int64_t)blockIdx.y * MIX_TOKENS;
    const int post_tokens = POST ? (T - tok0 < MIX_TOKENS ? (int)(T - tok0) : MIX_TOKENS) : 0;
    float *xs = reinterpret_cast<float *>(fs + NFT * 8 * stride); /* POST: [tokens][xstride] */
    const int xstride = mix_post_stride(nmix);
    mix_fn_pairs<8 * NFT> fp; /* the weights' loads before the wait: nothing earlier writes them */
    fp.load(fn + i0, len, nmix, cl);
    DI_PDL_BEGIN();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int64_t tw = T16 ? tok0 + 16 * (warp & 3) : tok0 + 8 * warp; /* the warp's first token */
    const int kb = T16 ? (warp >> 2) * SPAN : 0;                           /* its first value of the chunk */
    int64_t tok[TPL];        /* this lane's tokens: g, g + 8 of the warp's */
    bool live[TPL];
    const uint16_t *xr[TPL]; /* (not POST) their values from kb of the chunk */
#pragma unroll
    for (int u = 0; u < TPL; u++) {
        tok[u] = tw + g + 8 * u;
        live[u] = tok[u] < T;
        xr[u] = x + (live[u] ? tok[u] : 0) * len + i0 + kb;
    }
    /* PREFETCH: a lane's values of the chunk (4 a step) all loaded before the fn staging, so that one
     * round trip to memory serves the warp's whole chunk -- the sum loop issuing a step's loads then
     * waiting for them took a round trip every step or two (ncu on an H100, us a launch: 1,024 tokens
     * 70.7 -> 61.8, B = 256 26.7 -> 24.3) */
    constexpr bool PREFETCH = V4 && !POST;
    constexpr int STEPS = SPAN / 16;
    uint2 xq[TPL][PREFETCH ? STEPS : 1];
    if constexpr (PREFETCH) {
#pragma unroll
        for (int u = 0; u < TPL; u++)
#pragma unroll
            for (int st = 0; st < STEPS; st++) {
                const int k = 16 * st + 4 * tq;
                xq[u][st] = live[u] && kb + k < cl ? *reinterpret_cast<const uint2 *>(xr[u] + k) : make_uint2(0u, 0u);
            }
    }
    if (POST) mix_post_stage<POST == 2>(ps, tok0, post_tokens, i0, cl, xstride, xs);
    if (fp.on) fp.store(fs);
    else mix_stage_fn_values<8 * NFT>(fs, fn + i0, len, nmix, cl);
    __syncthreads();
    const bool busy = tw < T; /* the warp has a token */
    if (!T16 && !busy) return; /* whole warps (MIX_T16's meet at a barrier below) */
    double d[NFT][2 * TPL], ss[TPL];
#pragma unroll
    for (int nt = 0; nt < NFT; nt++)
#pragma unroll
        for (int i = 0; i < 2 * TPL; i++) d[nt][i] = 0.0;
#pragma unroll
    for (int u = 0; u < TPL; u++) ss[u] = 0.0;
    /* the step of values k0 .. k0 + 15 of the chunk (v[u]: token u's four, k0 + 4 tq ..) */
    auto sum_step = [&](int k0, const float4 (&v)[TPL]) {
        const int k = k0 + 4 * tq;
        double xa[TPL][4];
#pragma unroll
        for (int u = 0; u < TPL; u++) {
            xa[u][0] = v[u].x, xa[u][1] = v[u].y, xa[u][2] = v[u].z, xa[u][3] = v[u].w;
#pragma unroll
            for (int j = 0; j < 4; j++) ss[u] = __fma_rn(xa[u][j], xa[u][j], ss[u]); /* exact product */
        }
        double a[8];
        if constexpr (T16) { /* a[2j + u] = token u's value 4 tq + j: A[g + 8 u][tq + 4 j] */
#pragma unroll
            for (int j = 0; j < 4; j++) a[2 * j] = xa[0][j], a[2 * j + 1] = xa[TPL - 1][j];
        }
#pragma unroll
        for (int nt = 0; nt < NFT; nt++) {
            const double2 *fb = reinterpret_cast<const double2 *>(fs + (8 * nt + g) * stride + k);
            const double2 b01 = fb[0], b23 = fb[1]; /* fn row 8 nt + g, values k .. k + 3 */
            if constexpr (T16) {
                const double b[4] = {b01.x, b01.y, b23.x, b23.y};
                di_mma_f64_16816(d[nt], a, b, d[nt]);
            } else {
                di_mma_f64_884(d[nt], xa[0][0], b01.x, d[nt]);
                di_mma_f64_884(d[nt], xa[0][1], b01.y, d[nt]);
                di_mma_f64_884(d[nt], xa[0][2], b23.x, d[nt]);
                di_mma_f64_884(d[nt], xa[0][3], b23.y, d[nt]);
            }
        }
    };
    if (busy) {
        if constexpr (PREFETCH) {
#pragma unroll
            for (int st = 0; st < STEPS; st++) {
                if (kb + 16 * st >= cl) break;
                float4 v[TPL];
#pragma unroll
                for (int u = 0; u < TPL; u++) v[u] = di_dev_bf16x4_widen(xq[u][st]);
                sum_step(kb + 16 * st, v);
            }
        } else {
#pragma unroll 2
            for (int k0 = kb; k0 < kb + SPAN && k0 < cl; k0 += 16) {
                const int k = k0 + 4 * tq; /* this lane's four values */
                float4 v[TPL];
#pragma unroll
                for (int u = 0; u < TPL; u++) {
                    v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (!live[u]) continue;
                    if (POST) { /* d % 4 == 0: cl % 4 == 0 too */
                        if (k < cl) v[u] = *reinterpret_cast<const float4 *>(xs + (tok[u] - tok0) * xstride + k);
                    } else { /* n d % 4 != 0 or x not 8-byte aligned */
                        const uint16_t *xk = xr[u] - kb + k;
                        v[u].x = k < cl ? di_dev_bf16_load(xk) : 0.0f;
                        v[u].y = k + 1 < cl ? di_dev_bf16_load(xk + 1) : 0.0f;
                        v[u].z = k + 2 < cl ? di_dev_bf16_load(xk + 2) : 0.0f;
                        v[u].w = k + 3 < cl ? di_dev_bf16_load(xk + 3) : 0.0f;
                    }
                }
                sum_step(k0, v);
            }
        }
    }
#pragma unroll
    for (int u = 0; u < TPL; u++) {
        ss[u] += __shfl_xor_sync(0xffffffffu, ss[u], 1);
        ss[u] += __shfl_xor_sync(0xffffffffu, ss[u], 2);
    }
    if constexpr (T16) { /* the chunk's second half (warps 4..7) into the first's sums */
        double *hs = reinterpret_cast<double *>(reinterpret_cast<uint8_t *>(mix_smem) + mix_smem_bytes(nmix) +
                                                sizeof(float) * (size_t)post_tokens * xstride) +
                     ((warp & 3) * 32 + lane) * (4 * NFT + 2);
        if (warp >= 4 && busy) {
#pragma unroll
            for (int nt = 0; nt < NFT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) hs[4 * nt + i] = d[nt][i];
            hs[4 * NFT] = ss[0], hs[4 * NFT + 1] = ss[TPL - 1];
        }
        __syncthreads();
        if (warp >= 4 || !busy) return;
#pragma unroll
        for (int nt = 0; nt < NFT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) d[nt][i] += hs[4 * nt + i];
        ss[0] += hs[4 * NFT], ss[TPL - 1] += hs[4 * NFT + 1];
    }
#pragma unroll
    for (int u = 0; u < TPL; u++) {
        if (!live[u]) continue;
        double *pt = part + tok[u] * (nmix + 1) * (int64_t)n_chunks + c;
#pragma unroll
        for (int nt = 0; nt < NFT; nt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int j = 8 * nt + 2 * tq + h;
                if (j < nmix) pt[(int64_t)j * n_chunks] = d[nt][2 * u + h];
            }
        if (tq == u) pt[(int64_t)nmix * n_chunks] = ss[u];
    }
}

/* mix value j of a token from its chunk sums pt [nmix + 1][n_chunks], on one warp: lane l adds chunks
 * l, l + 32, ... in order, then a fixed shuffle tree; then the CPU's fp32 tail. Valid in lane 0. Up to
 * 32 MIX_FINISH_LOADS chunks a lane's loads all go out before its adds (a loop of dependent adds
 * waited out one load round trip a turn; hc_mix_finish_kernel at B = 256, ncu on an H100: 5.48 ->
 * 4.97 us a launch). */
#define MIX_FINISH_LOADS 4
static __device__ __forceinline__ float hc_mix_finish_one(const double *__restrict__ pt, int nmix, int j, int n_chunks,
                                                          int64_t len, float eps) {
    const int lane = threadIdx.x & 31;
    const double *pj = pt + (int64_t)j * n_chunks, *ps = pt + (int64_t)nmix * n_chunks;
    double acc = 0.0, ss = 0.0;
    if (n_chunks <= 32 * MIX_FINISH_LOADS) { /* every load issued before the first add (a decode step: 80 chunks) */
        double vj[MIX_FINISH_LOADS], vs[MIX_FINISH_LOADS];
#pragma unroll
        for (int u = 0; u < MIX_FINISH_LOADS; u++) {
            const int c = lane + 32 * u;
            vj[u] = c < n_chunks ? pj[c] : 0.0;
            vs[u] = c < n_chunks ? ps[c] : 0.0;
        }
#pragma unroll
        for (int u = 0; u < MIX_FINISH_LOADS; u++)
            if (lane + 32 * u < n_chunks) acc += vj[u], ss += vs[u];
    } else {
        for (int c = lane; c < n_chunks; c += 32) {
            acc += pj[c];
            ss += ps[c];
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, o);
        ss += __shfl_down_sync(0xffffffffu, ss, o);
    }
    const float inv = 1.0f / sqrtf((float)(ss / (double)len) + eps);
    return (float)acc * inv;
}

/* mix [T, nmix] from the chunk sums: a warp per output */
__global__ void hc_mix_finish_kernel(const double *__restrict__ part, int64_t T, int nmix, int n_chunks, int64_t len,
                                     float eps, float *__restrict__ mix) {
    DI_PDL_BEGIN();
    const int64_t idx = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (idx >= T * nmix) return; /* whole warps leave together */
    const int64_t tok = idx / nmix;
    const int j = (int)(idx % nmix);
    const float v = hc_mix_finish_one(part + tok * (nmix + 1) * n_chunks, nmix, j, n_chunks, len, eps);
    if ((threadIdx.x & 31) == 0) mix[idx] = v;
}

static int64_t mix_chunks(int n, int64_t d) {
    const int chunk = mix_chunk(n * (n + 2));
    return ((int64_t)n * d + chunk - 1) / chunk;
}

extern "C" size_t di_cuda_hc_mix_ws_bytes(int64_t T, int n, int64_t d) {
    const int64_t slice = T < MIX_MAX_SLICE ? T : MIX_MAX_SLICE;
    return sizeof(double) * (size_t)(slice * (n * (n + 2) + 1) * mix_chunks(n, d));
}

template <int NFT, bool V4, int POST>
static void mix_part_launch(dim3 grid, const uint16_t *x, int64_t rows, int64_t len, const float *fn, int nmix,
                            int n_chunks, double *part, const hc_post_src &ps, cudaStream_t s) {
    static size_t attr_set; /* the largest dynamic shared memory set so far */
    const int64_t post_tokens = POST ? (rows < MIX_TOKENS ? rows : MIX_TOKENS) : 0;
    const size_t smem =
        mix_smem_bytes(nmix) + sizeof(float) * (size_t)(post_tokens * mix_post_stride(nmix)) + mix_half_bytes(nmix);
    if (smem > attr_set) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(hc_mix_part_kernel<NFT, V4, POST>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr_set = smem;
    }
    hc_mix_part_kernel<NFT, V4, POST><<<grid, MIX_THREADS, smem, s>>>(x, rows, len, fn, nmix, n_chunks, part, ps);
    DI_CUDA_LAUNCHED();
}
template <bool V4, int POST>
static void mix_part(dim3 grid, const uint16_t *x, int64_t rows, int64_t len, const float *fn, int nmix, int n_chunks,
                     double *part, const hc_post_src &ps, cudaStream_t s) {
    switch (mix_fn_rows(nmix) / 8) { /* n = 1..8: nmix 3, 8, 15, 24, 35, 48, 63, 80 */
    case 1: mix_part_launch<1, V4, POST>(grid, x, rows, len, fn, nmix, n_chunks, part, ps, s); break;
    case 2: mix_part_launch<2, V4, POST>(grid, x, rows, len, fn, nmix, n_chunks, part, ps, s); break;
    case 3: mix_part_launch<3, V4, POST>(grid, x, rows, len, fn, nmix, n_chunks, part, ps, s); break;
    case 5: mix_part_launch<5, V4, POST>(grid, x, rows, len, fn, nmix, n_chunks, part, ps, s); break;
    default:
        if constexpr (POST) { /* the fused input's n * n <= 32: n <= 5 */
            fprintf(stderr, "mix_part: hc_post fused for %d mix rows\n", nmix);
            abort();
        } else {
            switch (mix_fn_rows(nmix) / 8) {
            case 6: mix_part_launch<6, V4, POST>(grid, x, rows, len, fn, nmix, n_chunks, part, ps, s); break;
            case 8: mix_part_launch<8, V4, POST>(grid, x, rows, len, fn, nmix, n_chunks, part, ps, s); break;
            default: mix_part_launch<10, V4, POST>(grid, x, rows, len, fn, nmix, n_chunks, part, ps, s); break;
            }
        }
    }
}

/* part [rows, nmix + 1, n_chunks] <- the chunk sums of x's rows t0 .. t0 + rows (one slice); with post
 * (x = post->out; di_cuda_hc_post_block_in_supported holds), x made first as hc_post of post's operands */
static void mix_part_slice(const uint16_t *x, int64_t t0, int64_t rows, int n, int64_t d, const float *fn, double *part,
                           cudaStream_t s, const hc_post_src *post = nullptr) {
    const int nmix = n * (n + 2);
    const int64_t len = (int64_t)n * d, n_chunks = mix_chunks(n, d);
    const bool v4 = len % 4 == 0 && (uintptr_t)x % 8 == 0;
    const dim3 grid((unsigned)n_chunks, (unsigned)((rows + MIX_TOKENS - 1) / MIX_TOKENS));
    if (post) { /* one slice: the fused input's T <= HB_MAX_TOKENS */
        if (post->slot_rows) mix_part<true, 2>(grid, post->out, rows, len, fn, nmix, (int)n_chunks, part, *post, s);
        else mix_part<true, 1>(grid, post->out, rows, len, fn, nmix, (int)n_chunks, part, *post, s);
    } else if (v4) {
        mix_part<true, 0>(grid, x + t0 * len, rows, len, fn, nmix, (int)n_chunks, part, hc_post_src{}, s);
    } else {
        mix_part<false, 0>(grid, x + t0 * len, rows, len, fn, nmix, (int)n_chunks, part, hc_post_src{}, s);
    }
}

static void hc_check_n(const char *who, int n) {
    if (n < 1 || n > HC_MAX_N) {
        fprintf(stderr, "%s: %d hyper-connection copies (1..%d supported)\n", who, n, HC_MAX_N);
        abort();
    }
}

extern "C" void di_cuda_hc_mix_logits(const uint16_t *x, int64_t T, int n, int64_t d, const float *fn,
                                      float eps, float *mix, void *ws, cudaStream_t s) {
    if (T <= 0) return;
    hc_check_n("di_cuda_hc_mix_logits", n);
    const int nmix = n * (n + 2);
    const int64_t len = (int64_t)n * d, n_chunks = mix_chunks(n, d);
    const bool own_ws = ws == nullptr;
    if (own_ws) DI_CUDA_CHECK(cudaMallocAsync(&ws, di_cuda_hc_mix_ws_bytes(T, n, d), s));
    double *part = (double *)ws;
    for (int64_t t0 = 0; t0 < T; t0 += MIX_MAX_SLICE) {
        const int64_t rows = T - t0 < MIX_MAX_SLICE ? T - t0 : MIX_MAX_SLICE;
        mix_part_slice(x, t0, rows, n, d, fn, part, s);
        const int64_t outs = rows * nmix;
        hc_mix_finish_kernel<<<(unsigned)((outs * 32 + 127) / 128), 128, 0, s>>>(part, rows, nmix, (int)n_chunks, len, eps,
                                                                           mix + t0 * nmix);
        DI_CUDA_LAUNCHED();
    }
    if (own_ws) DI_CUDA_CHECK(cudaFreeAsync(ws, s));
}

static __device__ __forceinline__ float dev_sigmoidf(float x) { return 1.0f / (1.0f + di_dev_expf(-x)); }

/* A lane's Sinkhorn weights (hc_sinkhorn_warp's lane l): the three scales and base[l], base[n + l]
 * (l < n), base[2n + l] (l < n*n) -- loaded apart from the mix, so that a kernel may load them
 * before it waits for its predecessors (they are the model's) */
struct hc_sk_weights {
    float s0, s1, s2, b_pre, b_post, b_comb;
    __device__ void load(const float *__restrict__ scale, const float *__restrict__ base, int n) {
        const int lane = threadIdx.x & 31;
        s0 = scale[0], s1 = scale[1], s2 = scale[2];
        b_pre = lane < n ? base[lane] : 0.0f;
        b_post = lane < n ? base[n + lane] : 0.0f;
        b_comb = lane < n * n ? base[2 * n + lane] : 0.0f;
    }
};

/* The Sinkhorn of one token on one warp (n*n <= 32): lane r*n+k holds c[r][k]; mix is the token's
 * n(n+2) logits (global or shared memory), wt the lane's weights, pre / post / comb its outputs.
 * NC: n known at compile time (the model's 4: the shuffles of a sum issue together and only the
 * adds form a chain -- same values, same order: 9.3 -> 6.4 us a launch at B = 1), or 0 for n_any */
template <int NC>
static __device__ __forceinline__ void hc_sinkhorn_warp(const float *mix, const hc_sk_weights &wt, int n_any, int iters,
                                                        float eps, float *pre, float *post, float *comb) {
    const int n = NC ? NC : n_any;
    const int lane = threadIdx.x & 31, nn = n * n;
    const unsigned full = 0xffffffffu;
    if (lane < n) {
        pre[lane] = dev_sigmoidf(mix[lane] * wt.s0 + wt.b_pre) + eps;
        post[lane] = 2.0f * dev_sigmoidf(mix[n + lane] * wt.s1 + wt.b_post);
    }
    const int r = lane / n, k = lane % n;
    const int row0 = (r < n ? r : 0) * n; /* idle lanes (lane >= n*n) read row 0 and column k */
    float v = lane < nn ? mix[2 * n + lane] * wt.s2 + wt.b_comb : 0.0f;
    float mx = -INFINITY;
    for (int kk = 0; kk < n; kk++) mx = fmaxf(mx, __shfl_sync(full, v, row0 + kk));
    v = di_dev_expf(v - mx);
    float sum = 0.0f;
    for (int kk = 0; kk < n; kk++) sum += __shfl_sync(full, v, row0 + kk);
    v = v / sum + eps;
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            float sr = 0.0f;
            for (int kk = 0; kk < n; kk++) sr += __shfl_sync(full, v, row0 + kk);
            v /= sr + eps;
        }
        float sc = 0.0f;
        for (int rr = 0; rr < n; rr++) sc += __shfl_sync(full, v, rr * n + k);
        v /= sc + eps;
    }
    if (lane < nn) comb[lane] = v;
}

/* one warp per token (n*n <= 32), 4 tokens per block */
template <int NC>
__global__ void hc_sinkhorn_warp_kernel(const float *__restrict__ mix_all, const float *__restrict__ scale,
                                        const float *__restrict__ base, int64_t T, int n_any, int iters, float eps,
                                        float *pre_all, float *post_all, float *comb_all) {
    const int n = NC ? NC : n_any;
    hc_sk_weights wt;
    wt.load(scale, base, n); /* before the wait: the model's */
    DI_PDL_BEGIN();
    const int64_t tok = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (tok >= T) return; /* whole warps leave together */
    hc_sinkhorn_warp<NC>(mix_all + tok * n * (n + 2), wt, n, iters, eps, pre_all + tok * n, post_all + tok * n,
                         comb_all + tok * n * n);
}

__global__ void hc_split_sinkhorn_kernel(const float *__restrict__ mix_all, const float *__restrict__ scale,
                                         const float *__restrict__ base, int64_t T, int n, int iters,
                                         float eps, float *pre_all, float *post_all, float *comb_all) {
    DI_PDL_BEGIN();
    const int64_t tok = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (tok >= T) return;
    const float *mix = mix_all + tok * n * (n + 2);
    float *pre = pre_all + tok * n, *post = post_all + tok * n, *c = comb_all + tok * n * n;
    for (int i = 0; i < n; i++) {
        pre[i] = dev_sigmoidf(mix[i] * scale[0] + base[i]) + eps;
        post[i] = 2.0f * dev_sigmoidf(mix[n + i] * scale[1] + base[n + i]);
    }
    for (int r = 0; r < n; r++) {
        float mx = -INFINITY;
        for (int k = 0; k < n; k++) {
            c[r * n + k] = mix[2 * n + r * n + k] * scale[2] + base[2 * n + r * n + k];
            mx = fmaxf(mx, c[r * n + k]);
        }
        float sum = 0.0f;
        for (int k = 0; k < n; k++) {
            c[r * n + k] = di_dev_expf(c[r * n + k] - mx);
            sum += c[r * n + k];
        }
        for (int k = 0; k < n; k++) c[r * n + k] = c[r * n + k] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            for (int r = 0; r < n; r++) {
                float s = 0.0f;
                for (int k = 0; k < n; k++) s += c[r * n + k];
                for (int k = 0; k < n; k++) c[r * n + k] /= s + eps;
            }
        }
        for (int k = 0; k < n; k++) {
            float s = 0.0f;
            for (int r = 0; r < n; r++) s += c[r * n + k];
            for (int r = 0; r < n; r++) c[r * n + k] /= s + eps;
        }
    }
}

extern "C" void di_cuda_hc_split_sinkhorn(const float *mix, const float *scale, const float *base,
                                          int64_t T, int n, int iters, float eps, float *pre,
                                          float *post, float *comb, cudaStream_t s) {
    if (T <= 0) return;
    if (n == 4) {
        hc_sinkhorn_warp_kernel<4><<<(unsigned)((T + 3) / 4), 128, 0, s>>>(mix, scale, base, T, n, iters, eps, pre,
                                                                            post, comb);
    } else if (n * n <= 32) {
        hc_sinkhorn_warp_kernel<0><<<(unsigned)((T + 3) / 4), 128, 0, s>>>(mix, scale, base, T, n, iters, eps, pre,
                                                                            post, comb);
    } else {
        hc_split_sinkhorn_kernel<<<(unsigned)((T + 63) / 64), 64, 0, s>>>(mix, scale, base, T, n, iters, eps, pre,
                                                                         post, comb);
    }
    DI_CUDA_LAUNCHED();
}

/* V consecutive k a thread (V = 4 where d % 4 == 0 and the rows are aligned -- 16 bytes for floats,
 * 8 for the bf16 stream: one vector access where there were four, and the index arithmetic once for
 * four outputs), each output the same expression in the same order as with V = 1. idx / dv in 32
 * bits where it fits. The stream's values go as bf16 bits: a store takes values already rounded to
 * bf16 (their high halves). */
template <int V>
struct hc_vec;
template <>
struct hc_vec<1> {
    static __device__ __forceinline__ void load(const float *p, float (&v)[1]) { v[0] = *p; }
    static __device__ __forceinline__ void load(const uint16_t *p, float (&v)[1]) { v[0] = di_dev_bf16_load(p); }
    static __device__ __forceinline__ void store(float *p, const float (&v)[1]) { *p = v[0]; }
    static __device__ __forceinline__ void store(uint16_t *p, const float (&v)[1]) {
        *p = (uint16_t)(__float_as_uint(v[0]) >> 16);
    }
};
template <>
struct hc_vec<4> {
    static __device__ __forceinline__ void load(const float *p, float (&v)[4]) {
        const float4 q = *reinterpret_cast<const float4 *>(p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
    static __device__ __forceinline__ void load(const uint16_t *p, float (&v)[4]) {
        const float4 q = di_dev_bf16x4_load(p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
    static __device__ __forceinline__ void store(float *p, const float (&v)[4]) {
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    }
    static __device__ __forceinline__ void store(uint16_t *p, const float (&v)[4]) {
        *reinterpret_cast<uint2 *>(p) = di_dev_bf16x4_of_exact(make_float4(v[0], v[1], v[2], v[3]));
    }
};
/* hc_post's width where d % 8 == 0 and the rows are 16-byte aligned: a 16-byte access of each bf16
 * row (a lane's loads in flight twice hc_vec<4>'s) */
template <>
struct hc_vec<8> {
    static __device__ __forceinline__ void put(float (&v)[8], const float4 &a, const float4 &b) {
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
    static __device__ __forceinline__ void load(const float *p, float (&v)[8]) {
        put(v, reinterpret_cast<const float4 *>(p)[0], reinterpret_cast<const float4 *>(p)[1]);
    }
    static __device__ __forceinline__ void load(const uint16_t *p, float (&v)[8]) {
        const uint4 q = *reinterpret_cast<const uint4 *>(p);
        put(v, di_dev_bf16x4_widen(make_uint2(q.x, q.y)), di_dev_bf16x4_widen(make_uint2(q.z, q.w)));
    }
    static __device__ __forceinline__ void store(float *p, const float (&v)[8]) {
        reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
    static __device__ __forceinline__ void store(uint16_t *p, const float (&v)[8]) {
        const uint2 a = di_dev_bf16x4_of_exact(make_float4(v[0], v[1], v[2], v[3]));
        const uint2 b = di_dev_bf16x4_of_exact(make_float4(v[4], v[5], v[6], v[7]));
        *reinterpret_cast<uint4 *>(p) = make_uint4(a.x, a.y, b.x, b.y);
    }
};
/* (token, first k) of vector idx of the [T][d / V] grid */
static __device__ __forceinline__ void hc_split(int64_t idx, int64_t dv, bool small, int64_t *tok, int64_t *kv) {
    *tok = small ? (int64_t)((uint32_t)idx / (uint32_t)dv) : idx / dv;
    *kv = idx - *tok * dv;
}

template <int V>
__global__ void hc_pre_kernel(const uint16_t *__restrict__ x, int64_t T, int n, int64_t d,
                              const float *__restrict__ p, float *__restrict__ out) {
    DI_PDL_BEGIN();
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, dv = d / V;
    if (idx >= T * dv) return;
    int64_t tok, kv;
    hc_split(idx, dv, T * dv <= 0x7fffffff, &tok, &kv);
    const int64_t k = kv * V;
    const uint16_t *xt = x + tok * n * d + k;
    const float *pt = p + tok * n;
    float s[V], xv[V];
#pragma unroll
    for (int v = 0; v < V; v++) s[v] = 0.0f;
    for (int i = 0; i < n; i++) {
        hc_vec<V>::load(xt + i * d, xv);
#pragma unroll
        for (int v = 0; v < V; v++) s[v] += pt[i] * xv[v];
    }
#pragma unroll
    for (int v = 0; v < V; v++) s[v] = di_dev_bf16_round(s[v]);
    hc_vec<V>::store(out + tok * d + k, s);
}

/* the vector width for rows of d values at these bases: f32 rows a, b, bf16 rows c, e */
static int hc_width(int64_t d, const float *a, const float *b, const uint16_t *c, const uint16_t *e) {
    return d % 4 == 0 && ((uintptr_t)a | (uintptr_t)b) % 16 == 0 && ((uintptr_t)c | (uintptr_t)e) % 8 == 0 ? 4 : 1;
}
/* hc_post's: 8 where d % 8 == 0 and the bf16 rows are 16-byte aligned too, else hc_width's (ncu on an
 * H100, us a launch, 4 -> 8: a 4,096-token prefill 287 -> 251, its combine-fused form 470 -> 418;
 * B = 256 19.0 -> 19.1 and 35.1 -> 33.4) */
static int hc_post_width(int64_t d, const float *a, const float *b, const uint16_t *c, const uint16_t *e) {
    const int w = hc_width(d, a, b, c, e);
    return w == 4 && d % 8 == 0 && ((uintptr_t)c | (uintptr_t)e) % 16 == 0 ? 8 : w;
}

extern "C" void di_cuda_hc_pre(const uint16_t *x, int64_t T, int n, int64_t d, const float *p, float *out,
                               cudaStream_t s) {
    if (T * d <= 0) return;
    if (hc_width(d, out, out, x, x) == 4)
        hc_pre_kernel<4><<<(unsigned)((T * d / 4 + 255) / 256), 256, 0, s>>>(x, T, n, d, p, out);
    else
        hc_pre_kernel<1><<<(unsigned)((T * d + 255) / 256), 256, 0, s>>>(x, T, n, d, p, out);
    DI_CUDA_LAUNCHED();
}

/* ---- a sublayer's mHC input in one launch (after the mix sums' chunk kernel), for a few tokens ----
 * One block of HB_THREADS per token. Its last warp runs the Sinkhorn; the other HB_WORKERS threads:
 *   A  warp j < n(n+2): the token's mix logit j from its chunk sums (hc_mix_finish_kernel's sums),
 *      handed to the Sinkhorn warp, which starts at once (mix_ready) and runs beside B and C;
 *      then every worker pre-mixes values t, t + HB_WORKERS, .. of hc_pre(x, p_in) into shared
 *      memory (p_in: the pre weights of an earlier mix, so nothing here waits for this one);
 *   B  threads 0..255 sum the squares of values i, i + 256, .. in that order and add the partial
 *      sums by rmsnorm_kernel's tree (di_dev_norm_block_sum's: butterflies in each of the 8 warps,
 *      then one over the warps' sums, which every worker warp computes alike);
 *   C  the workers write y = rmsnorm's expression of each value.
 * The hand-overs are mbarriers (racecheck takes those; it reports named-barrier hand-overs of shared
 * memory as races). Every value is the separate kernels' expression in their order, so the bits
 * are theirs (test_cuda_ops compares the two paths). At B = 1 those four launches took ~20 us a
 * sublayer, each mostly its start and its few blocks' latency; a token a block of 256 threads doing
 * the phases one after another ran no faster, hence the wide block. The Sinkhorn (20 iterations of
 * dependent shuffles and divisions, ~2 us) ran after B until session 20. Past HB_MAX_TOKENS the
 * separate kernels, which spread the tokens' work over many more blocks, are faster. Since session
 * 49 (n = 4) the workers load their hc_pre inputs before A and their norm weights right after it,
 * where the loops had waited out a load a turn: 10.29 -> 9.99 us a launch (ncu, H100, B = 1 and
 * 32) -- the Sinkhorn, which the workers do not wait for, is most of what is left of its chain
 * (the separate hc_sinkhorn_warp_kernel: 6.9 us a launch). */
#define HB_THREADS 1024
#define HB_WORKERS (HB_THREADS - 32) /* all but the Sinkhorn warp */
#define HB_NORM_THREADS 256          /* rmsnorm_kernel's NORM_THREADS: its order of the sum of squares */
#define HB_MAX_D 5120                /* the pre-mixed row in shared memory */
#define HB_MAX_TOKENS 32
#define HB_PER ((HB_MAX_D + HB_WORKERS - 1) / HB_WORKERS)       /* hc_pre values a worker */
#define HB_QUADS ((HB_MAX_D / 4 + HB_WORKERS - 1) / HB_WORKERS) /* C's quads a worker */

template <int NC>
__global__ void __launch_bounds__(HB_THREADS, 1)
hc_block_in_kernel(const uint16_t *__restrict__ x, int n_any, int64_t d, const float *__restrict__ p_in,
                   const uint16_t *__restrict__ w, float eps, const double *__restrict__ part, int n_chunks,
                   const float *__restrict__ scale, const float *__restrict__ base, int iters, float hc_eps,
                   float *pre_out, float *post, float *comb, float *__restrict__ y, di_cuda_act_forms yf) {
    constexpr int NORM_WARPS = HB_NORM_THREADS / 32;
    const int n = NC ? NC : n_any, nmix = n * (n + 2);
    const int64_t tok = blockIdx.x, len = (int64_t)n * d;
    const int t = threadIdx.x, warp = t >> 5, lane = t & 31;
    __shared__ float row_s[HB_MAX_D]; /* hc_pre's bf16 values */
    __shared__ float mix_s[48];       /* n(n+2) <= 35 (the warp Sinkhorn: n * n <= 32) */
    __shared__ double warp_sum[NORM_WARPS];
    __shared__ uint64_t mix_ready, row_ready, sum_ready; /* mbarriers: mix_s, row_s, warp_sum written */
    /* before the wait, what no earlier kernel writes: the Sinkhorn warp's weights (its chain is the
     * kernel's tail), the barriers. (The workers' norm weights there too spilled at n = 4.) */
    const bool sk_warp = warp == HB_THREADS / 32 - 1;
    hc_sk_weights wt;
    if (sk_warp) wt.load(scale, base, n);
    if (t == 0) {
        di_mbar_init(&mix_ready, HB_WORKERS);
        di_mbar_init(&row_ready, HB_WORKERS);
        di_mbar_init(&sum_ready, NORM_WARPS);
    }
    __syncthreads();
    DI_PDL_BEGIN();
    if (sk_warp) {
        di_mbar_wait(&mix_ready, 0);
        hc_sinkhorn_warp<NC>(mix_s, wt, n, iters, hc_eps, pre_out + tok * n, post + tok * n, comb + tok * n * n);
        return;
    }
    /* hc_pre's inputs (NC: d <= HB_MAX_D, HB_PER values a thread of each of the n copies), loaded
     * first so that they land while A's sums run */
    const uint16_t *xt = x + tok * len;
    const float *pt = p_in + tok * n;
    float xv[NC ? HB_PER : 1][NC ? NC : 1], pv[NC ? NC : 1];
    if (NC) {
#pragma unroll
        for (int i = 0; i < (NC ? NC : 1); i++) pv[i] = pt[i];
#pragma unroll
        for (int u = 0; u < HB_PER; u++) {
            const int64_t k = t + (int64_t)u * HB_WORKERS;
#pragma unroll
            for (int i = 0; i < (NC ? NC : 1); i++) xv[u][i] = k < d ? di_dev_bf16_load(xt + i * d + k) : 0.0f;
        }
    }
    for (int j = warp; j < nmix; j += HB_WORKERS / 32) { /* A */
        const float v = hc_mix_finish_one(part + tok * (nmix + 1) * n_chunks, nmix, j, n_chunks, len, eps);
        if (lane == 0) mix_s[j] = v;
    }
    di_mbar_arrive(&mix_ready);
    float wq[HB_QUADS][4]; /* C's norm weights (the quads' form): quads warp * 32 + lane + HB_WORKERS u */
    const bool forms = yf.q || yf.bf16;
#pragma unroll
    for (int u = 0; u < HB_QUADS; u++) {
        const int64_t k = 4 * ((int64_t)warp * 32 + lane + (int64_t)u * HB_WORKERS);
#pragma unroll
        for (int e = 0; e < 4; e++) wq[u][e] = forms && k + e < d ? di_dev_bf16_load(w + k + e) : 0.0f;
    }
    if (NC) { /* hc_pre's values t, t + HB_WORKERS, ..: loaded above, summed here in the same order */
#pragma unroll
        for (int u = 0; u < HB_PER; u++) {
            const int64_t k = t + (int64_t)u * HB_WORKERS;
            if (k >= d) break;
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < NC; i++) sum += pv[i] * xv[u][i];
            row_s[k] = di_dev_bf16_round(sum);
        }
    } else {
        for (int64_t k = t; k < d; k += HB_WORKERS) {
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < HC_MAX_N; i++)
                if (i < n) sum += pt[i] * di_dev_bf16_load(xt + i * d + k);
            row_s[k] = di_dev_bf16_round(sum);
        }
    }
    di_mbar_arrive(&row_ready);
    di_mbar_wait(&row_ready, 0);
    if (warp < NORM_WARPS) { /* B */
        double ss = 0.0;
        for (int64_t k = t; k < d; k += HB_NORM_THREADS) ss += (double)row_s[k] * row_s[k];
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) {
            warp_sum[warp] = ss;
            di_mbar_arrive(&sum_ready);
        }
    }
    di_mbar_wait(&sum_ready, 0);
    double ss = lane < NORM_WARPS ? warp_sum[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float mean = (float)(ss / (double)d);
    const float inv = 1.0f / sqrtf(mean + eps); /* C */
    float *yr = y + tok * d;
    if (!forms) {
        for (int64_t k = t; k < d; k += HB_WORKERS)
            yr[k] = di_dev_bf16_round(di_dev_bf16_load(w + k) * (row_s[k] * inv));
        return;
    }
    /* and y's other forms (d % 32 == 0): act_quant(y, 32), a warp's 32 lanes taking 32 quads, 8 lanes a
     * 32-value block (with digits, also as the int8 twin's digits); y's bf16 bits */
    const int quads = (int)(d / 4);
#pragma unroll
    for (int u = 0; u < HB_QUADS; u++) { /* warp-uniform: the block max is a shuffle */
        const int q0 = warp * 32 + u * HB_WORKERS, q = q0 + lane, k = 4 * q;
        if (q0 >= quads) break;
        const bool in = q < quads; /* quads % 8 == 0: a block's 8 lanes are all in or all out */
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (in) {
            v.x = di_dev_bf16_round(wq[u][0] * (row_s[k] * inv));
            v.y = di_dev_bf16_round(wq[u][1] * (row_s[k + 1] * inv));
            v.z = di_dev_bf16_round(wq[u][2] * (row_s[k + 2] * inv));
            v.w = di_dev_bf16_round(wq[u][3] * (row_s[k + 3] * inv));
        }
        float sc;
        const uint32_t codes = yf.q ? di_act_quant_e4m3_x4(v, &sc) : 0u; /* yf.q: uniform over the block */
        if (!in) continue;
        *reinterpret_cast<float4 *>(yr + k) = v;
        if (yf.q) {
            *reinterpret_cast<uint32_t *>(yf.q + tok * d + k) = codes;
            if ((lane & 7) == 0) yf.scale[tok * (d / 32) + q / 8] = sc;
        }
        if (yf.digits) /* the int8 twin's digits of the same codes (act_quant_digits_kernel's) */
            di_act_digits_store(codes, sc, tok * quads + q, reinterpret_cast<uint32_t *>(yf.digits), yf.digit_scale);
        if (yf.bf16) /* di_cuda_f32_to_bf16's bits */
            *reinterpret_cast<uint2 *>(yf.bf16 + tok * d + k) =
                make_uint2(di_dev_bf16_bits(v.x) | di_dev_bf16_bits(v.y) << 16,
                           di_dev_bf16_bits(v.z) | di_dev_bf16_bits(v.w) << 16);
    }
}

extern "C" bool di_cuda_hc_block_in_supported(int64_t T, int n, int64_t d) {
    return T <= HB_MAX_TOKENS && n >= 1 && n * n <= 32 && d >= 1 && d <= HB_MAX_D;
}

/* the fused input after its mix sums' chunk kernel (which, with post, makes x first) */
static void hc_block_in(const uint16_t *x, int64_t T, int n, int64_t d, const float *fn, float eps, const float *scale,
                        const float *base, int iters, float hc_eps, const float *p_in, const uint16_t *norm_w,
                        float *pre_out, float *post, float *comb, float *y, const di_cuda_act_forms *yq, void *ws,
                        cudaStream_t s, const hc_post_src *made_by) {
    if (T <= 0) return;
    if (!di_cuda_hc_block_in_supported(T, n, d) ||
        (yq && (d % 32 != 0 || (uintptr_t)y % 16 != 0 || (!yq->q) != (!yq->scale) ||
                (!yq->digits) != (!yq->digit_scale) || (yq->digits && !yq->q)))) {
        fprintf(stderr, "di_cuda_hc_block_in: T = %lld, n = %d, d = %lld%s not supported\n", (long long)T, n,
                (long long)d, yq ? " with the rows' other forms" : "");
        abort();
    }
    const di_cuda_act_forms yf = yq ? *yq : di_cuda_act_forms{};
    const int n_chunks = (int)mix_chunks(n, d);
    double *part = (double *)ws; /* di_cuda_hc_mix_ws_bytes(T, n, d) */
    mix_part_slice(x, 0, T, n, d, fn, part, s, made_by);
    if (n == 4)
        hc_block_in_kernel<4><<<(unsigned)T, HB_THREADS, 0, s>>>(x, n, d, p_in, norm_w, eps, part, n_chunks, scale, base,
                                                                 iters, hc_eps, pre_out, post, comb, y, yf);
    else
        hc_block_in_kernel<0><<<(unsigned)T, HB_THREADS, 0, s>>>(x, n, d, p_in, norm_w, eps, part, n_chunks, scale, base,
                                                                 iters, hc_eps, pre_out, post, comb, y, yf);
    DI_CUDA_LAUNCHED();
}

extern "C" void di_cuda_hc_block_in(const uint16_t *x, int64_t T, int n, int64_t d, const float *fn, float eps,
                                    const float *scale, const float *base, int iters, float hc_eps, const float *p_in,
                                    const uint16_t *norm_w, float *pre_out, float *post, float *comb, float *y,
                                    const di_cuda_act_forms *yq, void *ws, cudaStream_t s) {
    hc_block_in(x, T, n, d, fn, eps, scale, base, iters, hc_eps, p_in, norm_w, pre_out, post, comb, y, yq, ws, s,
                nullptr);
}

extern "C" bool di_cuda_hc_post_block_in_supported(const di_cuda_hc_post_ops *p, int64_t T, int n, int64_t d) {
    const bool combine = p->slot_rows != NULL; /* y is the MoE combine of these (di_cuda_moe_combine's operands) */
    const float *y = combine ? p->shared : p->y;
    return di_cuda_hc_block_in_supported(T, n, d) && hc_width(d, y, y, p->r, p->out) == 4 && p->out != p->r &&
           (!combine || (p->K >= 1 && p->K <= DI_CUDA_COMBINE_MAX_K));
}

extern "C" void di_cuda_hc_post_block_in(const di_cuda_hc_post_ops *p, int64_t T, int n, int64_t d, const float *fn,
                                         float eps, const float *scale, const float *base, int iters, float hc_eps,
                                         const float *p_in, const uint16_t *norm_w, float *pre_out, float *post,
                                         float *comb, float *y, const di_cuda_act_forms *yq, void *ws,
                                         cudaStream_t s) {
    if (T <= 0) return;
    if (!di_cuda_hc_post_block_in_supported(p, T, n, d)) {
        fprintf(stderr, "di_cuda_hc_post_block_in: T = %lld, n = %d, d = %lld or its rows not supported\n",
                (long long)T, n, (long long)d);
        abort();
    }
    const hc_post_src made_by = {p->y, p->r, p->post, p->comb, p->out, n, (int)d, p->slot_rows, p->order, p->shared, p->K};
    hc_block_in(p->out, T, n, d, fn, eps, scale, base, iters, hc_eps, p_in, norm_w, pre_out, post, comb, y, yq, ws, s,
                &made_by);
}

/* thread per (token, V values of k): the token's n residual values there loaded once for its n
 * outputs. COMBINE (V = 4): y is the MoE's combine of cs's operands, made here (hc_post_y's sums,
 * moe_combine4_kernel's) -- past the fused input's rows the deferred combine's own launch and its
 * [T, d] round trip go */
template <int V, bool COMBINE = false>
__global__ void hc_post_kernel(const float *__restrict__ y, const uint16_t *__restrict__ r, int64_t T, int n,
                               int64_t d, const float *__restrict__ post, const float *__restrict__ comb,
                               uint16_t *__restrict__ out, const float *__restrict__ p_in, float *__restrict__ pre_row,
                               hc_post_src cs) {
    static_assert(!COMBINE || V % 4 == 0, "the combine's sums go by quads");
    DI_PDL_BEGIN();
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, dv = d / V;
    if (idx >= T * dv) return;
    int64_t tok, kv;
    hc_split(idx, dv, T * dv <= 0x7fffffff, &tok, &kv);
    const int64_t k = kv * V;
    const uint16_t *rt = r + tok * n * d + k;
    const float *ct = comb + tok * n * n;
    float rv[HC_MAX_N][V], yv[V];
#pragma unroll
    for (int i = 0; i < HC_MAX_N; i++)
        if (i < n) hc_vec<V>::load(rt + i * d, rv[i]);
    if constexpr (COMBINE) {
#pragma unroll
        for (int u = 0; u < V / 4; u++) {
            const float4 q = hc_post_y<true>(cs, tok, (int)k + 4 * u);
            yv[4 * u] = q.x, yv[4 * u + 1] = q.y, yv[4 * u + 2] = q.z, yv[4 * u + 3] = q.w;
        }
    } else {
        hc_vec<V>::load(y + tok * d + k, yv);
    }
    float m[V]; /* with p_in: hc_pre(out, p_in) at (tok, k..) */
#pragma unroll
    for (int v = 0; v < V; v++) m[v] = 0.0f;
    for (int j = 0; j < n; j++) {
        float s[V], o[V];
#pragma unroll
        for (int v = 0; v < V; v++) s[v] = 0.0f;
#pragma unroll
        for (int i = 0; i < HC_MAX_N; i++)
            if (i < n) {
                const float c = ct[i * n + j];
#pragma unroll
                for (int v = 0; v < V; v++) s[v] += c * rv[i][v];
            }
        const float pj = post[tok * n + j];
#pragma unroll
        for (int v = 0; v < V; v++) o[v] = di_dev_bf16_round(pj * yv[v] + s[v]);
        hc_vec<V>::store(out + (tok * n + j) * d + k, o);
        if (p_in) { /* hc_pre_kernel's sum over the copies, in its order */
            const float pi = p_in[tok * n + j];
#pragma unroll
            for (int v = 0; v < V; v++) m[v] += pi * o[v];
        }
    }
    if (!p_in) return;
#pragma unroll
    for (int v = 0; v < V; v++) m[v] = di_dev_bf16_round(m[v]);
    hc_vec<V>::store(pre_row + tok * d + k, m);
}

/* hc_post_kernel<V, COMBINE> over the T * d values, V a thread, 256 threads a block */
template <int V, bool COMBINE = false>
static void hc_post_launch(const float *y, const uint16_t *r, int64_t T, int n, int64_t d, const float *post,
                           const float *comb, uint16_t *out, const float *p_in, float *pre_row, const hc_post_src &cs,
                           cudaStream_t s) {
    hc_post_kernel<V, COMBINE><<<(unsigned)((T * d / V + 255) / 256), 256, 0, s>>>(y, r, T, n, d, post, comb, out, p_in,
                                                                                   pre_row, cs);
    DI_CUDA_LAUNCHED();
}

extern "C" void di_cuda_hc_post_pre(const float *y, const uint16_t *r, int64_t T, int n, int64_t d, const float *post,
                                    const float *comb, uint16_t *out, const float *p_in, float *pre_row, cudaStream_t s) {
    if (T * d <= 0) return;
    hc_check_n("di_cuda_hc_post", n);
    switch (hc_post_width(d, y, pre_row, r, out)) {
    case 8: hc_post_launch<8>(y, r, T, n, d, post, comb, out, p_in, pre_row, hc_post_src{}, s); break;
    case 4: hc_post_launch<4>(y, r, T, n, d, post, comb, out, p_in, pre_row, hc_post_src{}, s); break;
    default: hc_post_launch<1>(y, r, T, n, d, post, comb, out, p_in, pre_row, hc_post_src{}, s); break;
    }
}

extern "C" bool di_cuda_hc_post_combine_supported(const di_cuda_hc_post_ops *p, int n, int64_t d) {
    return p->slot_rows && n >= 1 && n <= HC_MAX_N && p->K >= 1 && p->K <= DI_CUDA_COMBINE_MAX_K &&
           hc_width(d, p->shared, p->shared, p->r, p->out) == 4 && d <= INT32_MAX;
}

extern "C" void di_cuda_hc_post_combine_pre(const di_cuda_hc_post_ops *p, int64_t T, int n, int64_t d,
                                            const float *p_in, float *pre_row, cudaStream_t s) {
    if (T * d <= 0) return;
    if (!di_cuda_hc_post_combine_supported(p, n, d) || (pre_row && (uintptr_t)pre_row % 16 != 0)) {
        fprintf(stderr, "di_cuda_hc_post_combine_pre: n = %d, d = %lld, K = %d or its rows not supported\n", n,
                (long long)d, p->K);
        abort();
    }
    const hc_post_src cs = {NULL, p->r, p->post, p->comb, p->out, n, (int)d, p->slot_rows, p->order, p->shared, p->K};
    if (hc_post_width(d, p->shared, pre_row, p->r, p->out) == 8)
        hc_post_launch<8, true>(NULL, p->r, T, n, d, p->post, p->comb, p->out, p_in, pre_row, cs, s);
    else
        hc_post_launch<4, true>(NULL, p->r, T, n, d, p->post, p->comb, p->out, p_in, pre_row, cs, s);
}

extern "C" void di_cuda_hc_post(const float *y, const uint16_t *r, int64_t T, int n, int64_t d,
                                const float *post, const float *comb, uint16_t *out, cudaStream_t s) {
    di_cuda_hc_post_pre(y, r, T, n, d, post, comb, out, NULL, NULL, s);
}
