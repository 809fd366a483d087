/* Internal interface of the GPU forward pass (gpu_*.c): the device copy of the weights and the
 * state of one forward call. Host C code; the kernels it launches are declared in cuda_ops.h,
 * cuda_fwd_ops.h and below (gpu_kernels.cu).
 *
 * The driver mirrors src/forward/ stage by stage on device buffers: same op order, same
 * roundings, same list layouts, so each stage can be checked against the CPU reference (the
 * debug hook downloads intermediate tensors by the same names). Host-side decisions that need few
 * bytes stay on the host, exactly as the CPU computes them: the Engram hash rows, RoPE cos/sin
 * rows, compressor pairing and every index/pointer list (MoE routing too in exact mode and debug
 * runs; by default it runs on the device, gpu_moe.c). */
#ifndef DI_BACKEND_CUDA_GPU_INTERNAL_H
#define DI_BACKEND_CUDA_GPU_INTERNAL_H

#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "forward/device.h"
#include "forward/forward.h"

/* A device copy of di_model: `dm` has the host model's fields with every weight, norm vector and
 * table pointer replaced by a device pointer (so stage code reads L->attn.wq_a etc. as the CPU
 * does); the per-layer mHC constants the CPU keeps inline live in `hc`. */
typedef struct gpu_layer_consts {
    float *attn_base, *ffn_base;   /* [n(n+2)] */
    float *attn_scale, *ffn_scale; /* [3] */
    float *gate_bias;              /* [n_experts] the router's bias (routing on the device) */
    const uint8_t *const *expert_ptrs; /* [6][resident experts]: w1, w3, w2 data and scale pointers */
} gpu_layer_consts;

/* A per-call bump buffer: pieces are taken in order and never reused within a forward call; all
 * are released at the start of the next call (the stream is idle then), when the buffer also
 * grows by what did not fit (`want`). Two of them:
 * - pinned host staging for the per-call uploads (pointer lists, tables) and downloads: a pageable
 *   copy may synchronise the stream, a pinned one never does; what does not fit goes pageable, or
 *   while capturing a graph into a pinned piece of its own (gpu_pinned_extra);
 * - a device arena for the temporaries (a decode step makes hundreds; each stream-ordered
 *   allocation costs microseconds of host time); larger or overflowing ones use the pool, except
 *   while capturing, when the arena takes every size it can and what overflows it comes from
 *   spill chunks (gpu_spill). */
typedef struct gpu_bump {
    uint8_t *base;
    size_t cap, used, want;
} gpu_bump;

/* Device memory for the temporaries a capture could not fit into the arena: chunks of plain
 * cudaMalloc'ed memory (allowed while a relaxed capture records), bump-allocated and freed at the
 * next reset. Not the stream-ordered pool: cudaMallocAsync while capturing records allocation and
 * free nodes, the graph then maps memory of its own and reuses addresses between its nodes, and
 * compute-sanitizer memcheck attributes accesses to those addresses to the wrong allocation
 * (invalid writes reported in a kernel writing a live buffer: the MoE row lists' memcheck failure
 * of session 12, clean eagerly and with the arena large enough). */
typedef struct gpu_spill {
    gpu_bump *chunk;           /* [n], each cudaMalloc'ed; pieces come from the newest */
    int n, cap;
} gpu_spill;

/* Executable CUDA graphs kept for reuse (gpu_graph.c), per piece and topology, and the pinned
 * pieces and device spill chunks a capture had to allocate because staging or the arena was full
 * (freed at the next reset). 128 slots since the pieces went from 4 layers to 2 (session 51): as
 * many topologies kept a piece as before. */
enum { GPU_GRAPH_SLOTS = 128, GPU_GRAPH_MAX_ROWS = 256, GPU_GRAPH_PIECE_LAYERS = 2, GPU_PIECE_EVENTS = 32 };
typedef struct gpu_graphs {
    struct {
        cudaGraphExec_t exec;  /* NULL: free slot */
        int piece;
        size_t n_nodes;
        uint64_t sig;          /* hash of the node types, kernel functions, copy directions in order */
        uint64_t last_use;
    } slot[GPU_GRAPH_SLOTS];
    uint64_t tick;
    void **extra_pinned;
    int n_extra, cap_extra;
    gpu_spill spill;
    di_graph_stats stats;
    bool pdl_refused;          /* the driver refused a programmatic edge: plain edges only */
} gpu_graphs;

typedef struct gpu_fwd gpu_fwd;

/* A call's head token pass left to gpu_forward_end (gpu_head.c): its DI_WANT_EDITED rows' masks
 * are written while the device runs the call. logits NULL: none. */
typedef struct gpu_head_pending {
    float *logits;               /* [n_out, V] device, the call's temporary until the pass */
    int n_out;
    int *rows;                   /* [n_out] the batch row of each head row */
    di_plain_sampling *sampling; /* [n_out] temperature 0: a greedy row */
    bool any_sampled;
} gpu_head_pending;

typedef struct gpu_model {
    di_model dm;               /* device pointers (layers below) */
    gpu_bump stg;              /* cudaHostAlloc'ed */
    gpu_bump arena;            /* cudaMalloc'ed */
    gpu_graphs graphs;
    struct gpu_fwd *pending;   /* the call begun and not yet ended (its downloads), or NULL */
    /* step timing on the device's clock: events at the start and end of each forward call; once
     * gpu_step_times has been asked (piece_timing), around each graph piece's launch too (in: just
     * before it, out: just after it), the device's wait for a piece being the time from the
     * previous piece's out to its in */
    cudaEvent_t ev_start, ev_end, ev_prev_end;
    cudaEvent_t ev_piece_in[GPU_PIECE_EVENTS], ev_piece_out[GPU_PIECE_EVENTS];
    bool have_end, piece_timing;
    double last_gpu_ms, last_idle_ms, last_piece_wait_ms;
    di_layer *layers;          /* [n_total_layers] */
    gpu_layer_consts *hc;      /* [n_total_layers] */
    di_cuda_ctx cx;            /* stream + cuBLAS */
    /* a second stream (its own scratch) for work independent of the main stream's: the shared expert
     * beside the routed experts, a sublayer's mHC mixes beside the sublayer; forked from and joined
     * back into the main stream by the events (ev_hc_join: the mixes') */
    di_cuda_ctx cx_side;
    cudaEvent_t ev_fork, ev_join, ev_hc_join;
    struct di_sample_editor *editor; /* the edited rows' lists (gpu_head.c), made at the first */
    void **allocs;             /* every weight allocation, for detach */
    int n_allocs, cap_allocs;
    size_t bytes;              /* weight bytes on the device */
    di_cuda_dense16 dense16;   /* bf16 copies of the dense FP8 matrices (DEEPINFER_GPU_DENSE_BF16; both contexts') */
} gpu_model;

/* One forward call. Host arrays as in the CPU's fwd_ctx; device arrays prefixed d_. */
struct gpu_fwd {
    const di_model *m;         /* host model: config, RoPE, Engram constants, routing biases */
    const gpu_model *g;
    const di_model *dm;        /* &g->dm */
    di_batch *b;
    cudaStream_t s;
    di_cuda_ctx *cx;
    di_cuda_ctx *cx_side;      /* &g->cx_side (gpu_model) */
    gpu_bump *stg;             /* &g->stg */
    gpu_bump *arena;           /* &g->arena */
    int R;
    int *row_seq;              /* [R] */
    int64_t *row_pos;          /* [R] */
    int *seq_row0;             /* [n_seqs] */
    int64_t *seq_pos0;         /* [n_seqs] */
    int64_t *d_row_pos;        /* [R] */
    /* the same per-call tables on the device, for the attention list builder (uploaded once) */
    int *d_row_seq;            /* [R] */
    int64_t *d_seq_pos0;       /* [n_seqs] */
    int *d_seq_row0, *d_seq_n_rows; /* [n_seqs] */
    const float **d_pools;     /* [n_seqs] pool base of each sequence */
    int32_t **d_blocks_dev;    /* [n_kv_sources * n_seqs] d_blocks, itself on the device */
    float *d_cos[2], *d_sin[2]; /* [R, rope_dim/2] per RoPE kind (0: ratio-0 layers, 1: compressed) */
    int32_t **d_blocks;        /* [n_kv_sources * n_seqs] device block tables (uploaded per call) */
    int32_t *d_block_tables;   /* the tables above, concatenated in that order (one upload) */
    /* indexer selections per index-source slot: d_sel[slot] [R, index_topk] */
    int32_t **d_sel;
    int *sel_len;
    bool *sel_valid;
    /* candidate pool flags of every row: d_cand [R, cand_nb] (cand_nb -1: none yet this call) */
    uint8_t *d_cand;
    int64_t cand_nb;
    float *d_main_hidden;      /* [R, n_targets * D] */
    /* CUDA graph capture of this call (gpu_graph.c): on while the stream records; reusable while
     * nothing needed a spill chunk or an extra pinned piece (both are freed after the call) */
    bool capturing, graph_reusable;
    int graph_piece;           /* pieces launched so far in this call */
    int pieces_timed;          /* of which with their launch events (gpu_model.ev_piece_*) */
    double capture_t0;
    /* device-to-host copies into pinned staging, copied to their host destinations once the call
     * has finished (gpu_downloads_finish) */
    struct gpu_pending_download { void *host; const void *pinned; size_t bytes; } *dl;
    int n_dl, cap_dl;
    gpu_head_pending head_pending;
    /* a sublayer's mixes forked to the side stream (gpu_forward.c hc_mixes), not yet joined;
     * their scratch, freed at the join */
    bool hc_forked;
    void *hc_fork_ws, *hc_fork_mix;
};

/* a CUDA runtime call that must succeed (the process ends with the file, line and message) */
#define GPU_CK(call)                                                                             \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) di_die("%s:%d: CUDA error: %s", __FILE__, __LINE__, cudaGetErrorString(e_)); \
    } while (0)

/* the side stream (cx_side), ordered after everything enqueued on the main stream so far (the
 * shared expert's and the mHC mixes' forks; each joins back through its own event) */
static inline cudaStream_t gpu_side_fork(const gpu_fwd *f) {
    GPU_CK(cudaEventRecord(f->g->ev_fork, f->s));
    GPU_CK(cudaStreamWaitEvent(f->cx_side->stream, f->g->ev_fork, 0));
    return f->cx_side->stream;
}

/* experts of a layer whose weights this device holds, the first ones: all, or the bench's EP-N
 * proxy's resident count (the expert-pointer table's [6][E] layout and the grouping use it) */
static inline int gpu_resident_experts(const di_model *m, const di_ffn_weights *fw) {
    return m->proxy.resident_experts ? m->proxy.resident_experts : fw->n_experts;
}

/* ---- memory (gpu_backend.c) ---- */
void *gpu_alloc(const gpu_fwd *f, size_t bytes);      /* device temporaries: arena, else spill / the pool */
void gpu_free(const gpu_fwd *f, void *p);
void *gpu_upload(const gpu_fwd *f, const void *host, size_t bytes); /* new device copy, never syncs */
void gpu_bumps_reset(gpu_fwd *f);                     /* start of a forward call */
void gpu_download(const gpu_fwd *f, void *host, const void *dev, size_t bytes); /* synchronous */
/* host [bytes] <- dev when the call has finished (gpu_forward_end); never waits, so it may
 * be captured */
void gpu_download_async(gpu_fwd *f, void *host, const void *dev, size_t bytes);
void gpu_downloads_finish(gpu_fwd *f);               /* after the stream is idle */
/* pinned host memory for one call while capturing (staging full), freed at the next reset */
void *gpu_pinned_extra(gpu_fwd *f, size_t bytes);
/* Debug hook on a device tensor: download, call, upload back (teacher forcing may overwrite). */
void gpu_debug(const gpu_fwd *f, const char *name, int layer, float *dev, int64_t n);
/* gpu_debug of n bf16 values (the stream), handed to the hook as floats */
void gpu_debug_bf16(const gpu_fwd *f, const char *name, int layer, uint16_t *dev, int64_t n);

/* ---- stage profile (bench): when on, each stage boundary synchronises and charges the host
 * time since the previous boundary to the stage that ran. Off: no cost. ---- */
typedef enum gpu_stage_id {
    ST_OTHER, ST_MHC, ST_ATTN_QKV, ST_COMPRESS, ST_INDEXER, ST_ATTN_CORE, ST_ATTN_OUT, ST_MOE_ROUTE,
    ST_MOE_EXPERTS, ST_MOE_SHARED, ST_ENGRAM, ST_HEAD, ST_COUNT
} gpu_stage_id;
void gpu_stage(const gpu_fwd *f, gpu_stage_id next);
bool gpu_profiling(void);

/* ---- CUDA graphs (gpu_graph.c) ---- */
/* Starts capturing the call's stream if the call may run as a graph (see gpu_graph.c); false:
 * the call runs eagerly. */
bool gpu_graph_begin(gpu_fwd *f);
/* Ends the capture and launches the graph (updating a kept executable graph when one of the
 * same topology exists); records the step's start event just before the launch. */
void gpu_graph_launch(gpu_fwd *f, cudaEvent_t start);
/* While capturing: launches what was captured so far as one piece and captures on (the device runs
 * the piece while the host captures the next). */
void gpu_graph_cut(gpu_fwd *f, cudaEvent_t start);
void gpu_graphs_drop(gpu_model *g);                  /* destroys the kept executable graphs */
void gpu_graphs_free(gpu_model *g);
void gpu_graph_stats(const di_model *m, di_graph_stats *out);
void gpu_step_times(const di_model *m, di_step_times *out); /* device.h step_times */
/* device.h forward_begin / forward_end (gpu_forward.c): enqueue a call; wait for it (b unused) */
di_status gpu_forward_begin(const di_model *m, di_batch *b, di_err *err);
di_status gpu_forward_end(const di_model *m, di_batch *b, di_err *err);

/* ---- stages ---- */
/* y [m, w.rows] = x [m, w.cols] @ w^T (gpu_forward.c): quantised modes through the exact
 * block-scaled kernel; plain modes through the fixed-order kernel (batch invariant), or cuBLAS
 * for large m outside batch-invariant mode */
void gpu_linear(const gpu_fwd *f, const di_weight *w, const float *x, int64_t m, float *y,
                di_linear_mode mode);
/* n DI_LIN_QUANT linears of the same x (y[i] [m, w[i]->rows]; the bits of n gpu_linear calls): at
 * decode sizes x quantised once and one launch for all (di_cuda_linear_mma_set) */
void gpu_linear_quant_set(const gpu_fwd *f, int n, const di_weight *const *w, const float *x, int64_t m,
                          float *const *y);
/* copy rows through host-built pointer lists (uploaded here) */
void gpu_copy_rows(const gpu_fwd *f, float *const *dst_host, const float *const *src_host,
                   int64_t n, int64_t width);
/* in-place RoPE of rows with the call's per-row tables of `kind` */
void gpu_rope_rows(const gpu_fwd *f, int kind, float *x, int64_t n_vec, int64_t stride,
                   int64_t offset, bool inverse);
void gpu_attention(gpu_fwd *f, const di_layer *L, const di_layer *hL, const float *x, float *out);
void gpu_compress(gpu_fwd *f, const di_layer *L, const di_layer *hL, const float *x);
void gpu_indexer(gpu_fwd *f, const di_layer *L, const di_layer *hL, const float *x, const float *qr);
void gpu_moe(gpu_fwd *f, const di_layer *L, const di_layer *hL, const float *x, float *out);
/* The MoE's output left as its combine's operands, for the kernel that reads it next to make
 * (di_cuda_hc_post_ops' combine fields); `own` the device buffers they live in, freed by
 * gpu_moe_combine_free once that kernel is enqueued. */
typedef struct {
    const float *const *slot_rows; /* [R, K] */
    const int32_t *order;          /* [R, K] */
    const float *shared;           /* [R, D] */
    int K;
    void *own[4]; /* slot_rows, order, the expert outputs the slots point into, shared */
} gpu_moe_combine;
/* gpu_moe without its combine launch where the device path runs (else false: call gpu_moe) */
bool gpu_moe_deferred(gpu_fwd *f, const di_layer *L, const float *x, gpu_moe_combine *c);
void gpu_moe_combine_free(gpu_fwd *f, gpu_moe_combine *c);
/* whether the routed experts' w1 / w3 of this step read the FFN input's int8-twin digits: its
 * producer then makes them (di_cuda_act_forms.digits) and the twin reads them through the MoE's
 * row list, with no gathering launch */
bool gpu_moe_input_digits(const gpu_fwd *f, const di_layer *L);
void gpu_engram(gpu_fwd *f, const di_layer *L, const di_layer *hL, uint16_t *X); /* X [R, n, D] bf16 */

/* The final collapse, norm, vocabulary projection and each head row's logits or token (gpu_head.c);
 * with DI_WANT_EDITED rows the token pass is left to gpu_head_finish. */
void gpu_head(gpu_fwd *f, const uint16_t *X, const float *pre); /* X [R, n, D] bf16 */
/* Enqueues the token pass gpu_head left, if any (the masks are written by now); run false: drops
 * it (a call abandoned: its batch may be gone). */
void gpu_head_finish(gpu_fwd *f, bool run);

/* ---- kernels of the driver (gpu_kernels.cu) ---- */
/* Attention index lists [R, n_list] of KV row pointers in the reference's order (attention.c
 * build_index_list), NULL padded: window entries (a fresh prefill row gets min(S, W) of them,
 * other rows W), then sel_len compressed entries of `sel` [R, sel_stride] (or none if sel is
 * NULL), then NULL up to n_list. Per sequence (device arrays [n_seqs]): pos0, row0, n_rows, ring
 * base of this layer, compressed entry count and block table. */
typedef struct gpu_list_args {
    const int *row_seq;        /* [R] */
    const int64_t *row_pos;    /* [R] */
    const int64_t *seq_pos0;   /* [n_seqs] */
    const int *seq_row0, *seq_n_rows; /* [n_seqs] */
    float *const *ring;        /* [n_seqs] ring base of the layer */
    const float *kv;           /* [R, dh] this call's rows */
    int window, dh;
    bool write_rings;          /* one row a sequence: each row's kv also goes into its ring slot (no row of
                                * the call can need the entry it replaces); needs n_list >= dh / 4, dh % 4 == 0 */
    const int32_t *sel;        /* [R, sel_stride] or NULL */
    int sel_stride, sel_len;
    const int64_t *n_entries;  /* [n_seqs] compressed entries present */
    const int32_t *const *blocks; /* [n_seqs] block tables */
    const float *const *pool;  /* [n_seqs] pool base of each sequence (states may own pools) */
    int block_entries, entry_floats; /* a block: [block_entries][row_bytes] KV row records first (state.h) */
    int row_bytes;                   /* a KV row record's (forward/kv_record.h) */
} gpu_list_args;
void gpu_build_attn_lists(const gpu_list_args *a, int64_t R, int n_list, const float **list,
                          cudaStream_t s);

#endif
