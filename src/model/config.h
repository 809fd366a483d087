/* Model configuration: the V4.1 fields of an HF `config.json` (model-spec §1.1), parsed and
 * validated. Every field is required; a missing or inconsistent one is an error that names it. */
#ifndef DI_MODEL_CONFIG_H
#define DI_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include "base/error.h"

#define DI_MAX_LAYERS 64       /* backbone + draft blocks; the released model has 43 */
#define DI_MAX_SOURCES 16      /* kv / index source lists */
#define DI_MAX_ENGRAM_LAYERS 4

typedef struct di_config {
    /* top level */
    int bos_token_id, eos_token_id, pad_token_id, image_token_id;
    /* quantization_config */
    int weight_block_size[2]; /* [32, 32] */
    bool scale_ue8m0;         /* scale_fmt == "ue8m0" */
    bool expert_fp4;          /* expert_dtype == "fp4" */
    /* text_config */
    int vocab_size, hidden_size, moe_intermediate_size;
    int num_hidden_layers;    /* backbone layers (40) */
    int num_attention_heads, num_key_value_heads, head_dim, qk_rope_head_dim;
    int q_lora_rank, o_lora_rank, o_groups;
    double swiglu_limit, rms_norm_eps;
    int max_position_embeddings;
    double rope_theta, compress_rope_theta;
    double rope_factor, beta_fast, beta_slow; /* rope_scaling (yarn) */
    int original_max_position_embeddings;
    int n_routed_experts, n_shared_experts, num_experts_per_tok;
    double routed_scaling_factor;
    bool norm_topk_prob;
    int sliding_window;
    int n_compress_ratios;                 /* = num_hidden_layers + num_nextn_predict_layers */
    int compress_ratios[DI_MAX_LAYERS];
    int n_kv_sources, kv_source_layer_ids[DI_MAX_SOURCES];
    int n_index_sources, index_source_layer_ids[DI_MAX_SOURCES];
    int index_n_heads, index_head_dim, index_topk;
    int candidate_source_layer_id, candidate_topk_blocks, candidate_block_size;
    int hc_mult, hc_sinkhorn_iters;
    double hc_eps;
    int n_engram_layers, engram_layer_ids[DI_MAX_ENGRAM_LAYERS];
    int64_t engram_num_embeddings[DI_MAX_ENGRAM_LAYERS];
    int engram_max_ngram_size, engram_vocab_size, engram_n_heads, engram_head_dim;
    int engram_pad_token_id, engram_compressed_vocab_size;
    int num_nextn_predict_layers;          /* DSpark blocks (3) */
    int dspark_block_size, dspark_noise_token_id;
    int n_dspark_targets, dspark_target_layer_ids[DI_MAX_SOURCES];
    int dspark_markov_rank, dspark_n_routed_experts, dspark_num_experts_per_tok;
    /* vision_config (the sizes are required only when vision_num_hidden_layers > 0; else 0) */
    int vision_num_hidden_layers;
    int vision_hidden_size, vision_intermediate_size, vision_num_attention_heads;
    int vision_patch_size, vision_downsample_ratio;
} di_config;

/* Parses and validates config.json at `path`. */
di_status di_config_load(di_config *cfg, const char *path, di_err *err);
/* Parses from a JSON text (used by tests); `origin` names the source in messages. */
di_status di_config_parse(di_config *cfg, const char *json_text, const char *origin, di_err *err);

/* Derived lookups used by the forward pass (model-spec §1.4). */
int di_config_kv_owner(const di_config *cfg, int layer);    /* newest kv source <= layer, or -1 */
int di_config_index_owner(const di_config *cfg, int layer); /* newest index source <= layer, or -1 */
bool di_config_is_kv_source(const di_config *cfg, int layer);
bool di_config_is_index_source(const di_config *cfg, int layer);
int di_config_engram_slot(const di_config *cfg, int layer); /* index into engram_layer_ids, or -1 */
/* Compress ratio of any layer 0 .. num_hidden_layers + num_nextn_predict_layers - 1; 0 outside. */
int di_config_compress_ratio(const di_config *cfg, int layer);

#endif
