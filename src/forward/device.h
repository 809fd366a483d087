/* Device backends of the forward pass. The CPU code in src/forward/ is the reference and runs on
 * host memory; a device backend (the CUDA one, src/backend/cuda/gpu_*.c, in a -DDI_CUDA=ON build)
 * takes over a loaded model: it copies the weights to its memory, allocates the per-sequence state
 * (SWA rings, paged compressed KV, pending pairs) there through `mem`, and runs di_forward with
 * the same batch interface, so the engine, the CLI and the tests drive either unchanged.
 *
 * Selection: "cpu", "cuda" (an error when not built in or no device), or "auto" (cuda when a
 * usable device exists, else cpu). DeepInfer's DEEPINFER_ACCELERATOR=nvidia means "cuda". */
#ifndef DI_FORWARD_DEVICE_H
#define DI_FORWARD_DEVICE_H

#include "forward/forward.h"

/* How forward calls ran as graphs: `captured` calls were captured and launched as graphs (in
 * pieces of a few layers), `updated` pieces by updating a kept executable graph in place,
 * `instantiated` by building a new one (a new topology, or a call whose temporaries did not fit
 * the arena yet), `rejected` the updates the driver refused (a kept graph of the same topology key
 * that could not take the new parameters; none expected); the host
 * seconds spent capturing, updating and instantiating. */
typedef struct di_graph_stats {
    int64_t captured, updated, instantiated, rejected;
    double capture_s, update_s, instantiate_s;
    int64_t memory_nodes;  /* allocation / free nodes found in captured graphs (none are wanted) */
    int64_t spill_chunks;  /* device memory taken while capturing because the arena was full */
    int64_t programmatic_edges; /* kernel -> kernel edges made programmatic (DEEPINFER_GPU_PDL) */
} di_graph_stats;

/* A forward call on the device's clock: from its first to its last operation (gpu_ms), the
 * device's idle time before it since the previous call ended (idle_ms; < 0 for the first call:
 * the gap a host step loop leaves between steps), and inside it the device's idle time between
 * graph pieces, waiting for the host to capture and launch the next (piece_wait_ms; < 0 for a
 * call without graph pieces, or before the first step_times call: a backend may time pieces only
 * once asked). */
typedef struct di_step_times {
    double gpu_ms, idle_ms, piece_wait_ms;
} di_step_times;

/* How often forward calls took some of a device's fast paths since attach, so that a test can tell
 * that a path it means to check ran (and did not fall back). Counted on the host as each launch is
 * issued; a call run as a CUDA graph is captured anew every time (kept graphs are updated from the
 * new capture), so graph calls count as eager ones do. */
typedef struct di_device_path_counts {
    int64_t fp4_imma;        /* routed-expert (FP4) GEMM calls on the int8 twin, any of its kernels */
    int64_t fp4_imma_row;    /* of which on its one-row kernel (at most one row an expert) */
    int64_t fp4_imma_swiglu; /* of which w1 / w3 pairs whose launch made the SwiGLU and w2's digits too */
    int64_t blas_kept;       /* dense FP8 linears on cuBLAS over their kept bf16 copies (DEEPINFER_GPU_DENSE_BF16) */
} di_device_path_counts;

typedef struct di_device_backend {
    const char *name;                                      /* "cuda" */
    di_mem_ops mem;                                        /* zeroed alloc, release, D2D copy */
    void (*upload)(void *dev, const void *host, size_t bytes);
    void (*download)(void *host, const void *dev, size_t bytes);
    di_status (*attach)(di_model *m, di_err *err);         /* weights to the device: sets m->dev */
    void (*detach)(di_model *m);
    /* di_forward_begin / di_forward_end: start a call (asynchronous), then wait for its results */
    di_status (*forward_begin)(const di_model *m, di_batch *b, di_err *err);
    di_status (*forward_end)(const di_model *m, di_batch *b, di_err *err);
    void (*describe)(char *buf, size_t cap);               /* device name and memory */
    /* benchmarks: the card's ceilings (copy GB/s, BF16 and FP8 TFLOP/s, measured now), free and
     * total device memory (a synchronisation; cached forward temporaries given back first), random
     * bytes into device memory, and a full synchronisation */
    void (*ceilings)(bool quick, double *hbm_gbs, double *bf16_tflops, double *fp8_tflops);
    void (*mem_info)(size_t *free_bytes, size_t *total_bytes);
    void (*fill_random)(void *dev, size_t bytes, uint64_t seed);
    /* KV pool memory: blocks of block_bytes holding block_entries KV row records of row_bytes for dh
     * dims (forward/kv_record.h), then as many index key records of key_bytes for idim dims
     * (forward/index_key.h; state.h's block layout), random codes and sane scales */
    void (*fill_kv_pool)(void *dev, size_t bytes, int block_bytes, int block_entries, int row_bytes, int dh,
                         int key_bytes, int idim, uint64_t seed);
    /* stage profile: returns the stage names and the seconds charged to each since the last call
     * (either may be NULL), resets them and turns profiling on or off (off costs nothing) */
    void (*profile)(bool on, const char *const **names, double *seconds);
    int n_profile_stages;
    /* the last forward call on the device's clock (di_step_times) */
    void (*step_times)(const di_model *m, di_step_times *out);
    /* CUDA graphs since attach (NULL: the backend has none) */
    void (*graph_stats)(const di_model *m, di_graph_stats *out);
    /* fast-path counts since attach (NULL: the backend keeps none) */
    void (*path_counts)(const di_model *m, di_device_path_counts *out);
    /* brackets the work an external profiler records when started with capture off (Nsight
     * Compute's --profile-from-start off: tools/cuda/device_profile.sh); NULL: none */
    void (*profiler_range)(bool on);
    /* page-locked host memory for a forward call's results (logits): the device copies into it
     * directly, without the staging buffer and the host copy after it (132 MB a step at B = 256) */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
} di_device_backend;

/* The CUDA backend, or NULL with the reason in *why (not built in, no device). */
const di_device_backend *di_cuda_backend(const char **why);

/* Flags of di_model_select_backend (the CPU always behaves as with both). */
enum {
    DI_BACKEND_BATCH_INVARIANT = 1, /* fixed reduction orders whatever the batch */
    DI_BACKEND_EXACT = 2,           /* quantised GEMMs with the CPU's exact block sums (slower) */
    DI_BACKEND_EAGER = 4,           /* launch every kernel directly: no CUDA graphs */
    DI_BACKEND_WGMMA = 8,           /* prefill-sized quantised GEMMs on wgmma (DEEPINFER_GPU_WGMMA) */
    DI_BACKEND_PDL = 16,            /* graphs' kernel edges programmatic (DEEPINFER_GPU_PDL) */
    DI_BACKEND_BLAS = 32,           /* prefill-sized FP8 linears on cuBLAS BF16 (DEEPINFER_GPU_BLAS_PREFILL) */
};
/* Moves a loaded model to backend `name` ("cpu" | "cuda" | "nvidia" | "auto"; NULL or "" = cpu)
 * with DI_BACKEND_* `flags`. Must be called before any sequence state is created for the model. */
di_status di_model_select_backend(di_model *m, const char *name, unsigned flags, di_err *err);
/* Host memory for a forward call's results (di_batch.logits): page-locked where the model runs on
 * a device backend (written there directly), else malloc. NULL when out of memory. */
void *di_model_result_alloc(const di_model *m, size_t bytes);
void di_model_result_free(const di_model *m, void *p);
/* "cpu" or the device backend's name */
const char *di_model_backend_name(const di_model *m);

#endif
