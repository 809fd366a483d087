/* A loaded V4.1 model: the validated config, the mmapped checkpoint, and every weight bound to the
 * place the forward pass uses it (model-spec §5.2). Binding copies only the Engram q*k gain product
 * and small f32 vectors; everything else, wo_a included (used as its exact bf16 dequantisation), is
 * a view into the mmapped shards. */
#ifndef DI_FORWARD_MODEL_H
#define DI_FORWARD_MODEL_H

#include <stdbool.h>
#include "backend/ops.h"
#include "model/config.h"
#include "model/engram_consts.h"
#include "model/safetensors.h"

/* Sizes the forward pass keeps in fixed buffers; a config beyond them is refused at load with an
 * error naming the field (the released model is well inside every one). */
enum {
    DI_FWD_MAX_HEAD_DIM = 1024,      /* head_dim, index_head_dim */
    DI_FWD_MAX_ROPE_DIM = 512,       /* qk_rope_head_dim */
    DI_FWD_MAX_EXPERTS = 512,        /* n_routed_experts, dspark_n_routed_experts */
    DI_FWD_MAX_TOPK_EXPERTS = 16,    /* num_experts_per_tok, dspark_num_experts_per_tok */
    DI_FWD_MAX_HC = 6,               /* hc_mult: n*(n+2) mix coefficients in 64 */
    DI_FWD_MAX_DSPARK_BLOCK = 7,     /* dspark_block_size */
};

typedef struct di_attn_weights {
    di_weight wq_a, wq_b, wkv, wo_a, wo_b; /* wo_a: FP8 [groups*o_rank, H/groups*Dh], used as bf16 */
    const void *q_norm, *kv_norm;          /* bf16 [q_lora], [Dh] */
    float *attn_sink;                      /* [H] f32 (copied) */
    /* compressor: kv-source layers only */
    di_weight cmp_wkv, cmp_wgate;          /* BF16 [Dh, D]; wgate only for ratio 2 */
    const void *cmp_norm;                  /* bf16 [Dh] */
    di_weight idx_wk;                      /* BF16 [idx_dim, Dh] (kv sources) */
    const void *idx_k_norm;                /* bf16 [idx_dim] */
    /* indexer query: index-source layers only */
    di_weight idx_wq_b;                    /* FP8 [idx_heads*idx_dim, q_lora] */
    di_weight idx_weights_proj;            /* BF16 [idx_heads, D] */
} di_attn_weights;

typedef struct di_ffn_weights {
    int n_experts, top_k;
    di_weight gate;                        /* BF16 [E, D], run in fp32 */
    float *gate_bias, *gate_bias_vl;       /* [E] f32 (copied) */
    di_weight *w1, *w2, *w3;               /* [E] FP4: w1/w3 [inter, D], w2 [D, inter] */
    di_weight sh_w1, sh_w2, sh_w3;         /* FP8 shared expert */
} di_ffn_weights;

typedef struct di_engram_weights {
    const uint8_t *table;                  /* e4m3 [rows, engram_head_dim] */
    const uint8_t *table_scale;            /* e8m0 [rows, engram_head_dim/32] */
    int64_t rows;
    di_weight wkv;                         /* FP8 [(hc+1)*D, cols*engram_head_dim] */
    float *qk;                             /* [hc, D] f32: q_weight * k_weight */
} di_engram_weights;

typedef struct di_layer {
    int id, ratio;
    bool is_dspark;
    bool is_kv_source, is_index_source, is_candidate_source, uses_candidates;
    int kv_owner, index_owner;             /* layer ids (-1 for ratio-0 layers) */
    int kv_slot;                           /* index of kv_owner in cfg.kv_source_layer_ids */
    int index_slot;                        /* index of index_owner in cfg.index_source_layer_ids */
    int engram_slot;                       /* -1 unless an Engram layer */
    const void *attn_norm, *ffn_norm;      /* bf16 [D] */
    const void *hc_attn_fn, *hc_ffn_fn;    /* f32 [24, hc*D] (views, unaligned ok) */
    float hc_attn_base[32], hc_ffn_base[32], hc_attn_scale[3], hc_ffn_scale[3];
    di_attn_weights attn;
    di_ffn_weights ffn;
    di_engram_weights engram;
} di_layer;

typedef struct di_dspark_weights {
    di_weight main_proj;                   /* FP8 [D, n_targets*D] */
    const void *main_norm, *norm;          /* bf16 [D] */
    di_weight markov_embed, markov_head;   /* BF16 [V, rank] */
    di_weight conf_proj;                   /* BF16 [1, D + rank] */
} di_dspark_weights;

struct di_device_backend;

typedef struct di_model {
    di_config cfg;
    di_checkpoint *ck;
    const di_ops *ops;
    int n_layers;                          /* backbone */
    int n_total_layers;                    /* backbone + DSpark blocks */
    di_layer *layers;                      /* [n_total_layers] */
    const void *embed;                     /* bf16 [V, D] */
    di_weight head;                        /* BF16 [V, D], run in fp32 */
    const void *norm;                      /* bf16 [D] */
    di_dspark_weights dspark;
    /* RoPE frequencies (model-spec §1.5): [0] ratio-0 layers, [1] compressed layers */
    float rope_freq[2][DI_FWD_MAX_ROPE_DIM / 2];
    struct di_rope_cache *rope_cache;      /* rows by position, computed once (rope_cache.c) */
    /* Engram */
    di_engram_consts engram;
    di_engram_token_map token_map;         /* compressed id per token */
    int32_t engram_pad_id;
    /* device backend (forward/device.h): NULL = the CPU reference runs on the host views above */
    const struct di_device_backend *dev_backend;
    void *dev;                             /* the backend's copy of the weights */
    bool batch_invariant;                  /* fixed reduction orders on the device */
    bool exact_gemm;                       /* device GEMMs with the CPU's exact block sums */
    bool wgmma_gemm;                       /* prefill-sized device GEMMs on bf16 wgmma (default) */
    bool device_graphs;                    /* decode-sized device calls captured as CUDA graphs */
    bool device_pdl;                       /* their kernel -> kernel edges programmatic (gpu_graph.c) */
    bool blas_gemm;                        /* prefill-sized FP8 linears on cuBLAS BF16 (cuda_linear_blas.cu) */
    int64_t dense16_rows;                  /* > 0: dense FP8 matrices also kept as bf16 on the device, calls of at
                                            * least this many rows on cuBLAS over them (DEEPINFER_GPU_DENSE_BF16;
                                            * set before selecting the backend) */
    /* benchmark rank proxy (`deepinfer bench` on a device; set before selecting the backend):
     * weights are generated on the device instead of copied (the checkpoint may be a sparse
     * synthetic one), only experts [0, resident_experts) of each layer are resident and routing is
     * uniform over them, Engram tables have engram_rows rows (hash rows wrap). Zero = off. */
    struct {
        bool synthetic;
        int resident_experts;
        int64_t engram_rows;
    } proxy;
} di_model;

/* Opens DIR (config.json + safetensors), validates every tensor against the config, binds the
 * weights and builds the Engram constants (token map from DIR's tokenizer.json, or from a fixture's
 * tokenizer_stub.json). */
di_status di_model_load(di_model **out, const char *dir, di_err *err);
void di_model_free(di_model *m);

/* cos/sin of RoPE for one position: kind 0 = ratio-0 table, 1 = compressed (YaRN) table; rows of
 * positions below max_position_embeddings are computed once and kept (rope_cache.c, thread-safe). */
void di_model_rope_row(const di_model *m, int kind, int64_t pos, float *cos_out, float *sin_out);
void di_rope_cache_init(di_model *m); /* after the frequencies (model load) */
void di_rope_cache_free(di_model *m);

#endif
