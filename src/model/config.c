/* config.json -> di_config (model-spec §1.1), with every field required and validated.
 *
 * How it works: a small reader context (`jrd`) wraps cJSON lookups. Each getter checks presence,
 * JSON type, integrality and range, and on the first failure records an error of the form
 * "config.json: text_config.index_topk: missing" (or "...: expected an integer, found string", or
 * "...: 0 out of range [1, 1048576]"); later getters become no-ops, so the parse functions read as a
 * flat list of fields and a single status check at the end. After the fields are read,
 * `check_schedule` validates the cross-field structure the forward pass and the tensor inventory
 * rely on (layer schedule, source lists, divisibility). Semantics that belong to other modules
 * (e.g. the Engram prime sums) are not checked here. */
#include "model/config.h"
#include "base/file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *origin; /* file name used as message prefix */
    di_err *err;
    di_status st;
} jrd;

static const char *json_type_name(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

/* Records the first error only; returns false so getters can `return fail(...)`. */
static bool fail(jrd *r, const char *sect, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool fail(jrd *r, const char *sect, const char *key, const char *fmt, ...) {
    if (r->st != DI_OK) return false;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    r->st = di_errf(r->err, DI_EINVAL, "%s: %s%s%s: %s", r->origin, sect ? sect : "",
                    sect ? "." : "", key, what);
    return false;
}

static const cJSON *get_item(jrd *r, const cJSON *obj, const char *sect, const char *key) {
    if (r->st != DI_OK) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) fail(r, sect, key, "missing");
    return v;
}

/* An integral JSON number in [lo, hi]. */
static bool num_to_i64(jrd *r, const cJSON *v, const char *sect, const char *key, int64_t lo,
                       int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(v)) return fail(r, sect, key, "expected an integer, found %s", json_type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0)
        return fail(r, sect, key, "expected an integer, found %.17g", d);
    int64_t x = (int64_t)d;
    if (x < lo || x > hi)
        return fail(r, sect, key, "%lld out of range [%lld, %lld]", (long long)x, (long long)lo,
                    (long long)hi);
    *out = x;
    return true;
}

static bool get_int(jrd *r, const cJSON *obj, const char *sect, const char *key, int64_t lo, int64_t hi,
                    int *out) {
    const cJSON *v = get_item(r, obj, sect, key);
    int64_t x = 0;
    if (!v || !num_to_i64(r, v, sect, key, lo, hi, &x)) return false;
    *out = (int)x;
    return true;
}

/* A finite JSON number; `positive` requires > 0, otherwise >= 0. */
static bool get_num(jrd *r, const cJSON *obj, const char *sect, const char *key, bool positive,
                    double *out) {
    const cJSON *v = get_item(r, obj, sect, key);
    if (!v) return false;
    if (!cJSON_IsNumber(v)) return fail(r, sect, key, "expected a number, found %s", json_type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || (positive && d == 0))
        return fail(r, sect, key, "%g out of range (expected %s)", d, positive ? "> 0" : ">= 0");
    *out = d;
    return true;
}

static bool get_bool(jrd *r, const cJSON *obj, const char *sect, const char *key, bool *out) {
    const cJSON *v = get_item(r, obj, sect, key);
    if (!v) return false;
    if (!cJSON_IsBool(v)) return fail(r, sect, key, "expected a boolean, found %s", json_type_name(v));
    *out = cJSON_IsTrue(v);
    return true;
}

/* A required string that must equal one supported value (the engine implements only that one). */
static bool expect_str(jrd *r, const cJSON *obj, const char *sect, const char *key, const char *want) {
    const cJSON *v = get_item(r, obj, sect, key);
    if (!v) return false;
    if (!cJSON_IsString(v)) return fail(r, sect, key, "expected a string, found %s", json_type_name(v));
    if (strcmp(v->valuestring, want))
        return fail(r, sect, key, "expected \"%s\", found \"%s\"", want, v->valuestring);
    return true;
}

static const cJSON *get_object(jrd *r, const cJSON *obj, const char *sect, const char *key) {
    const cJSON *v = get_item(r, obj, sect, key);
    if (v && !cJSON_IsObject(v)) {
        fail(r, sect, key, "expected an object, found %s", json_type_name(v));
        return NULL;
    }
    return v;
}

/* An array of integers in [lo, hi], at most `cap` long; its length goes to *n. */
static bool get_i64_array(jrd *r, const cJSON *obj, const char *sect, const char *key, int cap, int64_t lo,
                          int64_t hi, int64_t *vals, int *n) {
    const cJSON *v = get_item(r, obj, sect, key);
    if (!v) return false;
    if (!cJSON_IsArray(v)) return fail(r, sect, key, "expected an array, found %s", json_type_name(v));
    int len = cJSON_GetArraySize(v);
    if (len > cap) return fail(r, sect, key, "%d entries, at most %d supported", len, cap);
    char elem[96];
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        snprintf(elem, sizeof elem, "%s[%d]", key, i);
        if (!num_to_i64(r, e, sect, elem, lo, hi, &vals[i])) return false;
        i++;
    }
    *n = len;
    return true;
}

static bool get_int_array(jrd *r, const cJSON *obj, const char *sect, const char *key, int cap, int lo,
                          int hi, int *vals, int *n) {
    int64_t tmp[DI_MAX_LAYERS];
    if (cap > DI_MAX_LAYERS) cap = DI_MAX_LAYERS;
    if (!get_i64_array(r, obj, sect, key, cap, lo, hi, tmp, n)) return false;
    for (int i = 0; i < *n; i++) vals[i] = (int)tmp[i];
    return true;
}

#define BIG 1000000000 /* upper bound for sizes that have no tighter natural limit */

static void parse_top(jrd *r, const cJSON *root, di_config *c) {
    get_int(r, root, NULL, "bos_token_id", 0, BIG, &c->bos_token_id);
    get_int(r, root, NULL, "eos_token_id", 0, BIG, &c->eos_token_id);
    get_int(r, root, NULL, "pad_token_id", 0, BIG, &c->pad_token_id);
    get_int(r, root, NULL, "image_token_id", 0, BIG, &c->image_token_id);
    const char *S = "quantization_config";
    const cJSON *q = get_object(r, root, NULL, S);
    if (!q) return;
    expect_str(r, q, S, "quant_method", "fp8");
    expect_str(r, q, S, "activation_scheme", "dynamic");
    int n = 0;
    if (get_int_array(r, q, S, "weight_block_size", 2, 1, 4096, c->weight_block_size, &n) &&
        (n != 2 || c->weight_block_size[0] != 32 || c->weight_block_size[1] != 32))
        fail(r, S, "weight_block_size", "expected [32, 32] (the only block size of V4.1)");
    expect_str(r, q, S, "scale_fmt", "ue8m0");
    c->scale_ue8m0 = r->st == DI_OK;
    const cJSON *ed = get_item(r, q, S, "expert_dtype");
    if (ed && (!cJSON_IsString(ed) || (strcmp(ed->valuestring, "fp4") && strcmp(ed->valuestring, "fp8"))))
        fail(r, S, "expert_dtype", "expected \"fp4\" or \"fp8\", found %s",
             cJSON_IsString(ed) ? ed->valuestring : json_type_name(ed));
    else if (ed)
        c->expert_fp4 = !strcmp(ed->valuestring, "fp4");
}

static void parse_text_dims(jrd *r, const cJSON *t, di_config *c) {
    const char *S = "text_config";
    get_int(r, t, S, "vocab_size", 1, BIG, &c->vocab_size);
    get_int(r, t, S, "hidden_size", 1, 1 << 20, &c->hidden_size);
    get_int(r, t, S, "moe_intermediate_size", 1, 1 << 20, &c->moe_intermediate_size);
    get_int(r, t, S, "num_hidden_layers", 1, DI_MAX_LAYERS, &c->num_hidden_layers);
    get_int(r, t, S, "num_attention_heads", 1, 4096, &c->num_attention_heads);
    get_int(r, t, S, "num_key_value_heads", 1, 1, &c->num_key_value_heads);
    get_int(r, t, S, "head_dim", 1, 1 << 16, &c->head_dim);
    get_int(r, t, S, "qk_rope_head_dim", 2, 1 << 16, &c->qk_rope_head_dim);
    get_int(r, t, S, "q_lora_rank", 1, 1 << 20, &c->q_lora_rank);
    get_int(r, t, S, "o_lora_rank", 1, 1 << 20, &c->o_lora_rank);
    get_int(r, t, S, "o_groups", 1, 4096, &c->o_groups);
    expect_str(r, t, S, "hidden_act", "silu");
    get_num(r, t, S, "swiglu_limit", false, &c->swiglu_limit);
    get_num(r, t, S, "rms_norm_eps", true, &c->rms_norm_eps);
    bool b = false;
    if (get_bool(r, t, S, "attention_bias", &b) && b) fail(r, S, "attention_bias", "expected false");
    if (get_bool(r, t, S, "tie_word_embeddings", &b) && b)
        fail(r, S, "tie_word_embeddings", "expected false (head.weight is its own tensor)");
    get_int(r, t, S, "max_position_embeddings", 1, 1 << 30, &c->max_position_embeddings);
    get_num(r, t, S, "rope_theta", true, &c->rope_theta);
    get_num(r, t, S, "compress_rope_theta", true, &c->compress_rope_theta);
    const char *R = "text_config.rope_scaling";
    const cJSON *rs = get_object(r, t, S, "rope_scaling");
    if (rs) {
        expect_str(r, rs, R, "rope_type", "yarn");
        get_num(r, rs, R, "factor", true, &c->rope_factor);
        get_num(r, rs, R, "beta_fast", true, &c->beta_fast);
        get_num(r, rs, R, "beta_slow", true, &c->beta_slow);
        get_int(r, rs, R, "original_max_position_embeddings", 1, 1 << 30,
                &c->original_max_position_embeddings);
    }
}

static void parse_text_moe_attn(jrd *r, const cJSON *t, di_config *c) {
    const char *S = "text_config";
    get_int(r, t, S, "n_routed_experts", 1, 65536, &c->n_routed_experts);
    get_int(r, t, S, "n_shared_experts", 1, 64, &c->n_shared_experts);
    get_int(r, t, S, "num_experts_per_tok", 1, 65536, &c->num_experts_per_tok);
    expect_str(r, t, S, "scoring_func", "sqrtsoftplus");
    expect_str(r, t, S, "topk_method", "noaux_tc");
    get_bool(r, t, S, "norm_topk_prob", &c->norm_topk_prob);
    get_num(r, t, S, "routed_scaling_factor", true, &c->routed_scaling_factor);
    get_int(r, t, S, "sliding_window", 1, 1 << 20, &c->sliding_window);
    get_int_array(r, t, S, "compress_ratios", DI_MAX_LAYERS, 0, 2, c->compress_ratios,
                  &c->n_compress_ratios);
    int L = DI_MAX_LAYERS;
    get_int_array(r, t, S, "kv_source_layer_ids", DI_MAX_SOURCES, 0, L, c->kv_source_layer_ids,
                  &c->n_kv_sources);
    get_int_array(r, t, S, "index_source_layer_ids", DI_MAX_SOURCES, 0, L, c->index_source_layer_ids,
                  &c->n_index_sources);
    get_int(r, t, S, "index_n_heads", 1, 4096, &c->index_n_heads);
    get_int(r, t, S, "index_head_dim", 1, 1 << 16, &c->index_head_dim);
    get_int(r, t, S, "index_topk", 1, 1 << 24, &c->index_topk);
    get_int(r, t, S, "candidate_source_layer_id", 0, L, &c->candidate_source_layer_id);
    get_int(r, t, S, "candidate_topk_blocks", 1, 1 << 24, &c->candidate_topk_blocks);
    get_int(r, t, S, "candidate_block_size", 1, 1 << 20, &c->candidate_block_size);
    get_int(r, t, S, "hc_mult", 1, 16, &c->hc_mult);
    get_int(r, t, S, "hc_sinkhorn_iters", 0, 1000, &c->hc_sinkhorn_iters);
    get_num(r, t, S, "hc_eps", true, &c->hc_eps);
}

static void parse_text_engram_dspark(jrd *r, const cJSON *t, di_config *c) {
    const char *S = "text_config";
    get_int_array(r, t, S, "engram_layer_ids", DI_MAX_ENGRAM_LAYERS, 0, DI_MAX_LAYERS,
                  c->engram_layer_ids, &c->n_engram_layers);
    int n_rows = 0;
    if (get_i64_array(r, t, S, "engram_num_embeddings", DI_MAX_ENGRAM_LAYERS, 1, (int64_t)1 << 40,
                      c->engram_num_embeddings, &n_rows) &&
        n_rows != c->n_engram_layers)
        fail(r, S, "engram_num_embeddings", "%d entries, expected %d (one per engram_layer_ids entry)",
             n_rows, c->n_engram_layers);
    get_int(r, t, S, "engram_max_ngram_size", 2, 16, &c->engram_max_ngram_size);
    get_int(r, t, S, "engram_vocab_size", 1, BIG, &c->engram_vocab_size);
    get_int(r, t, S, "engram_n_heads", 1, 1024, &c->engram_n_heads);
    get_int(r, t, S, "engram_head_dim", 1, 1 << 16, &c->engram_head_dim);
    get_int(r, t, S, "engram_pad_token_id", 0, BIG, &c->engram_pad_token_id);
    get_int(r, t, S, "engram_compressed_vocab_size", 1, BIG, &c->engram_compressed_vocab_size);
    get_int(r, t, S, "num_nextn_predict_layers", 0, DI_MAX_LAYERS, &c->num_nextn_predict_layers);
    get_int(r, t, S, "dspark_block_size", 1, 1024, &c->dspark_block_size);
    get_int(r, t, S, "dspark_noise_token_id", 0, BIG, &c->dspark_noise_token_id);
    get_int_array(r, t, S, "dspark_target_layer_ids", DI_MAX_SOURCES, 0, DI_MAX_LAYERS,
                  c->dspark_target_layer_ids, &c->n_dspark_targets);
    get_int(r, t, S, "dspark_markov_rank", 1, 1 << 16, &c->dspark_markov_rank);
    get_int(r, t, S, "dspark_n_routed_experts", 1, 65536, &c->dspark_n_routed_experts);
    get_int(r, t, S, "dspark_num_experts_per_tok", 1, 65536, &c->dspark_num_experts_per_tok);
}

static void parse_vision(jrd *r, const cJSON *root, di_config *c) {
    const char *S = "vision_config";
    const cJSON *v = get_object(r, root, NULL, S);
    if (!v) return;
    get_int(r, v, S, "num_hidden_layers", 0, 1024, &c->vision_num_hidden_layers);
    if (r->st != DI_OK || c->vision_num_hidden_layers == 0) return; /* text-only: sizes unused */
    get_int(r, v, S, "hidden_size", 1, 1 << 16, &c->vision_hidden_size);
    get_int(r, v, S, "intermediate_size", 1, 1 << 20, &c->vision_intermediate_size);
    get_int(r, v, S, "num_attention_heads", 1, 1024, &c->vision_num_attention_heads);
    get_int(r, v, S, "patch_size", 1, 1024, &c->vision_patch_size);
    get_int(r, v, S, "downsample_ratio", 1, 64, &c->vision_downsample_ratio);
}

/* A source list must be strictly ascending, inside the backbone, on compressed layers. */
static void check_source_list(jrd *r, const di_config *c, const char *key, const int *ids, int n) {
    for (int i = 0; i < n && r->st == DI_OK; i++) {
        if (ids[i] >= c->num_hidden_layers)
            fail(r, "text_config", key, "layer %d is not a backbone layer (num_hidden_layers = %d)", ids[i],
                 c->num_hidden_layers);
        else if (i > 0 && ids[i] <= ids[i - 1])
            fail(r, "text_config", key, "not strictly ascending (%d after %d)", ids[i], ids[i - 1]);
        else if (c->compress_ratios[ids[i]] == 0)
            fail(r, "text_config", key, "layer %d has compress_ratios[%d] = 0; a source needs ratio 1 or 2",
                 ids[i], ids[i]);
    }
}

/* Cross-field checks of the layer schedule (model-spec §1.4). */
static void check_schedule(jrd *r, const di_config *c) {
    const char *S = "text_config";
    int n_all = c->num_hidden_layers + c->num_nextn_predict_layers;
    if (n_all > DI_MAX_LAYERS)
        fail(r, S, "num_nextn_predict_layers", "%d backbone + %d draft layers exceed %d",
             c->num_hidden_layers, c->num_nextn_predict_layers, DI_MAX_LAYERS);
    else if (c->n_compress_ratios != n_all)
        fail(r, S, "compress_ratios", "%d entries, expected num_hidden_layers + num_nextn_predict_layers = %d",
             c->n_compress_ratios, n_all);
    for (int l = c->num_hidden_layers; l < n_all && r->st == DI_OK; l++)
        if (c->compress_ratios[l] != 0)
            fail(r, S, "compress_ratios", "entry %d (draft block mtp.%d) is %d; draft blocks are SWA-only (0)",
                 l, l - c->num_hidden_layers, c->compress_ratios[l]);
    if (r->st != DI_OK) return;
    check_source_list(r, c, "kv_source_layer_ids", c->kv_source_layer_ids, c->n_kv_sources);
    check_source_list(r, c, "index_source_layer_ids", c->index_source_layer_ids, c->n_index_sources);
    for (int l = 0; l < c->num_hidden_layers && r->st == DI_OK; l++) {
        if (c->compress_ratios[l] == 0) continue;
        int kv = di_config_kv_owner(c, l);
        if (kv < 0)
            fail(r, S, "kv_source_layer_ids", "layer %d has compress ratio %d but no KV source at or below it",
                 l, c->compress_ratios[l]);
        else if (c->compress_ratios[kv] != c->compress_ratios[l])
            fail(r, S, "compress_ratios", "layer %d (ratio %d) reads the global KV of layer %d (ratio %d)", l,
                 c->compress_ratios[l], kv, c->compress_ratios[kv]);
        else if (di_config_index_owner(c, l) < 0)
            fail(r, S, "index_source_layer_ids", "layer %d has compress ratio %d but no index source at or below it",
                 l, c->compress_ratios[l]);
    }
    if (r->st == DI_OK && !di_config_is_index_source(c, c->candidate_source_layer_id))
        fail(r, S, "candidate_source_layer_id", "layer %d is not in index_source_layer_ids",
             c->candidate_source_layer_id);
}

static void check_engram_dspark(jrd *r, const di_config *c) {
    const char *S = "text_config";
    for (int i = 0; i < c->n_engram_layers && r->st == DI_OK; i++) {
        int l = c->engram_layer_ids[i];
        int64_t min_rows = (int64_t)(c->engram_max_ngram_size - 1) * c->engram_n_heads * c->engram_vocab_size;
        if (l >= c->num_hidden_layers)
            fail(r, S, "engram_layer_ids", "layer %d is not a backbone layer", l);
        else if (i > 0 && l <= c->engram_layer_ids[i - 1])
            fail(r, S, "engram_layer_ids", "not strictly ascending (%d after %d)", l, c->engram_layer_ids[i - 1]);
        else if (c->engram_num_embeddings[i] < min_rows)
            fail(r, S, "engram_num_embeddings", "entry %d is %lld, below (max_ngram-1) x heads x "
                 "engram_vocab_size = %lld", i, (long long)c->engram_num_embeddings[i], (long long)min_rows);
    }
    if (r->st == DI_OK && c->engram_head_dim % 32)
        fail(r, S, "engram_head_dim", "%d is not a multiple of 32 (1x32 scale groups)", c->engram_head_dim);
    if (r->st == DI_OK && c->engram_compressed_vocab_size > c->vocab_size)
        fail(r, S, "engram_compressed_vocab_size", "%d exceeds vocab_size %d", c->engram_compressed_vocab_size,
             c->vocab_size);
    if (c->num_nextn_predict_layers > 0 && c->n_dspark_targets == 0)
        fail(r, S, "dspark_target_layer_ids", "empty, but num_nextn_predict_layers = %d",
             c->num_nextn_predict_layers);
    for (int i = 0; i < c->n_dspark_targets && r->st == DI_OK; i++) {
        int l = c->dspark_target_layer_ids[i];
        if (l >= c->num_hidden_layers)
            fail(r, S, "dspark_target_layer_ids", "layer %d is not a backbone layer", l);
        else if (i > 0 && l <= c->dspark_target_layer_ids[i - 1])
            fail(r, S, "dspark_target_layer_ids", "not strictly ascending (%d after %d)", l,
                 c->dspark_target_layer_ids[i - 1]);
    }
    if (r->st == DI_OK && c->dspark_num_experts_per_tok > c->dspark_n_routed_experts)
        fail(r, S, "dspark_num_experts_per_tok", "%d exceeds dspark_n_routed_experts %d",
             c->dspark_num_experts_per_tok, c->dspark_n_routed_experts);
}

/* Sizes the tensor shapes and the kernels depend on. */
static void check_dims(jrd *r, const di_config *c) {
    const char *S = "text_config";
    struct { const char *key; int id; } ids[] = {
        {"bos_token_id", c->bos_token_id}, {"eos_token_id", c->eos_token_id},
        {"pad_token_id", c->pad_token_id}, {"image_token_id", c->image_token_id},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].id >= c->vocab_size)
            fail(r, NULL, ids[i].key, "%d is not below text_config.vocab_size %d", ids[i].id, c->vocab_size);
    if (c->dspark_noise_token_id >= c->vocab_size)
        fail(r, S, "dspark_noise_token_id", "%d is not below vocab_size %d", c->dspark_noise_token_id,
             c->vocab_size);
    if (c->engram_pad_token_id >= c->vocab_size)
        fail(r, S, "engram_pad_token_id", "%d is not below vocab_size %d", c->engram_pad_token_id, c->vocab_size);
    if (c->hidden_size % 32)
        fail(r, S, "hidden_size", "%d is not a multiple of 32 (FP8/FP4 scale blocks)", c->hidden_size);
    if (c->moe_intermediate_size % 32)
        fail(r, S, "moe_intermediate_size", "%d is not a multiple of 32", c->moe_intermediate_size);
    if (c->head_dim % 32)
        fail(r, S, "head_dim", "%d is not a multiple of 32 (per-32 KV quantisation)", c->head_dim);
    if (c->head_dim <= c->qk_rope_head_dim)
        fail(r, S, "qk_rope_head_dim", "%d must be below head_dim %d", c->qk_rope_head_dim, c->head_dim);
    if (c->qk_rope_head_dim % 2)
        fail(r, S, "qk_rope_head_dim", "%d is odd (RoPE rotates pairs)", c->qk_rope_head_dim);
    if (c->num_attention_heads % c->o_groups)
        fail(r, S, "o_groups", "%d does not divide num_attention_heads %d", c->o_groups, c->num_attention_heads);
    if (c->index_head_dim % 32)
        fail(r, S, "index_head_dim", "%d is not a multiple of 32 (FP4 index keys, per-32 scales)",
             c->index_head_dim);
    if (c->num_experts_per_tok > c->n_routed_experts)
        fail(r, S, "num_experts_per_tok", "%d exceeds n_routed_experts %d", c->num_experts_per_tok,
             c->n_routed_experts);
    if (c->original_max_position_embeddings > c->max_position_embeddings)
        fail(r, "text_config.rope_scaling", "original_max_position_embeddings",
             "%d exceeds max_position_embeddings %d", c->original_max_position_embeddings,
             c->max_position_embeddings);
}

di_status di_config_parse(di_config *cfg, const char *json_text, const char *origin, di_err *err) {
    memset(cfg, 0, sizeof *cfg);
    jrd r = {origin ? origin : "config.json", err, DI_OK};
    cJSON *root = cJSON_Parse(json_text);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= json_text ? (long)(at - json_text) : -1;
        return di_errf(err, DI_EINVAL, "%s: not valid JSON (near byte %ld)", r.origin, off);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return di_errf(err, DI_EINVAL, "%s: top level is not a JSON object", r.origin);
    }
    parse_top(&r, root, cfg);
    const cJSON *t = get_object(&r, root, NULL, "text_config");
    if (t) {
        parse_text_dims(&r, t, cfg);
        parse_text_moe_attn(&r, t, cfg);
        parse_text_engram_dspark(&r, t, cfg);
    }
    parse_vision(&r, root, cfg);
    if (r.st == DI_OK) check_dims(&r, cfg);
    if (r.st == DI_OK) check_schedule(&r, cfg);
    if (r.st == DI_OK) check_engram_dspark(&r, cfg);
    cJSON_Delete(root);
    return r.st;
}

di_status di_config_load(di_config *cfg, const char *path, di_err *err) {
    char *buf = NULL;
    di_status st = di_read_file(path, (size_t)64 << 20, "config", &buf, NULL, err);
    if (st) return st;
    st = di_config_parse(cfg, buf, path, err);
    free(buf);
    return st;
}

int di_config_compress_ratio(const di_config *cfg, int layer) {
    if (layer < 0 || layer >= cfg->n_compress_ratios) return 0;
    return cfg->compress_ratios[layer];
}

/* Newest entry of ids[0..n) that is <= layer, for layers that compress; -1 otherwise. */
static int newest_at_or_below(const di_config *cfg, const int *ids, int n, int layer) {
    if (layer < 0 || layer >= cfg->num_hidden_layers || di_config_compress_ratio(cfg, layer) == 0) return -1;
    int owner = -1;
    for (int i = 0; i < n && ids[i] <= layer; i++) owner = ids[i];
    return owner;
}

int di_config_kv_owner(const di_config *cfg, int layer) {
    return newest_at_or_below(cfg, cfg->kv_source_layer_ids, cfg->n_kv_sources, layer);
}

int di_config_index_owner(const di_config *cfg, int layer) {
    return newest_at_or_below(cfg, cfg->index_source_layer_ids, cfg->n_index_sources, layer);
}

static bool in_list(const int *ids, int n, int layer) {
    for (int i = 0; i < n; i++)
        if (ids[i] == layer) return true;
    return false;
}

bool di_config_is_kv_source(const di_config *cfg, int layer) {
    return in_list(cfg->kv_source_layer_ids, cfg->n_kv_sources, layer);
}

bool di_config_is_index_source(const di_config *cfg, int layer) {
    return in_list(cfg->index_source_layer_ids, cfg->n_index_sources, layer);
}

int di_config_engram_slot(const di_config *cfg, int layer) {
    for (int i = 0; i < cfg->n_engram_layers; i++)
        if (cfg->engram_layer_ids[i] == layer) return i;
    return -1;
}
