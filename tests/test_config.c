/* config.json parsing and validation: the tiny and released configs parse with the right values and
 * schedule lookups; each kind of bad field (missing, wrong type, out of range, inconsistent with
 * another field) is rejected with DI_EINVAL and a message naming the field. Bad configs are the tiny
 * config edited in memory. */
#include <cjson/cJSON.h>

#include "model/config.h"
#include "model/tensor_list.h"
#include "test_checkpoint_util.h"
#include "test_harness.h"

static char *g_tiny;

/* Returns the tiny config with one edit applied by `edit`. */
static char *edited(void (*edit)(cJSON *root)) {
    cJSON *root = cJSON_Parse(g_tiny);
    edit(root);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static cJSON *sect(cJSON *root, const char *name) {
    return name ? cJSON_GetObjectItemCaseSensitive(root, name) : root;
}

static void set(cJSON *root, const char *s, const char *key, cJSON *v) {
    cJSON_ReplaceItemInObjectCaseSensitive(sect(root, s), key, v);
}

static void set_ints(cJSON *root, const char *s, const char *key, const int *v, int n) {
    set(root, s, key, cJSON_CreateIntArray(v, n));
}

/* Parses the edited config and checks the status and that the message contains `want`. */
static void expect_error(const char *label, void (*edit)(cJSON *), const char *want) {
    char *text = edited(edit);
    di_config cfg;
    di_err err = {0};
    di_status st = di_config_parse(&cfg, text, "config.json", &err);
    CHECKF(st == DI_EINVAL, "%s: status %d (%s)", label, st, err.msg);
    CHECKF(strstr(err.msg, want) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err.msg, want);
    free(text);
}

#define T "text_config"
static void e_missing_topk(cJSON *r) { cJSON_DeleteItemFromObject(sect(r, T), "index_topk"); }
static void e_hidden_string(cJSON *r) { set(r, T, "hidden_size", cJSON_CreateString("64")); }
static void e_head_dim_frac(cJSON *r) { set(r, T, "head_dim", cJSON_CreateNumber(64.5)); }
static void e_ratios_short(cJSON *r) {
    int v[14] = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0};
    set_ints(r, T, "compress_ratios", v, 14);
}
static void e_ratio_3(cJSON *r) { cJSON_ReplaceItemInArray(cJSON_GetObjectItem(sect(r, T), "compress_ratios"), 4, cJSON_CreateNumber(3)); }
static void e_mtp_ratio(cJSON *r) { cJSON_ReplaceItemInArray(cJSON_GetObjectItem(sect(r, T), "compress_ratios"), 13, cJSON_CreateNumber(1)); }
static void e_kv_unsorted(cJSON *r) { int v[] = {4, 2, 6}; set_ints(r, T, "kv_source_layer_ids", v, 3); }
static void e_kv_on_swa(cJSON *r) { int v[] = {1, 2, 4, 6}; set_ints(r, T, "kv_source_layer_ids", v, 4); }
static void e_kv_gap(cJSON *r) { int v[] = {4, 6}; set_ints(r, T, "kv_source_layer_ids", v, 2); }
static void e_kv_ratio(cJSON *r) { int v[] = {2, 4}; set_ints(r, T, "kv_source_layer_ids", v, 2); }
static void e_kv_range(cJSON *r) { int v[] = {2, 4, 6, 12}; set_ints(r, T, "kv_source_layer_ids", v, 4); }
static void e_hidden_48(cJSON *r) { set(r, T, "hidden_size", cJSON_CreateNumber(48)); }
static void e_o_groups(cJSON *r) { set(r, T, "o_groups", cJSON_CreateNumber(3)); }
static void e_rope_dim(cJSON *r) { set(r, T, "qk_rope_head_dim", cJSON_CreateNumber(64)); }
static void e_candidate(cJSON *r) { set(r, T, "candidate_source_layer_id", cJSON_CreateNumber(7)); }
static void e_engram_rows(cJSON *r) { int v[] = {1524}; set_ints(r, T, "engram_num_embeddings", v, 1); }
static void e_scale_fmt(cJSON *r) { set(r, "quantization_config", "scale_fmt", cJSON_CreateString("fp32")); }
static void e_no_vision(cJSON *r) { cJSON_DeleteItemFromObject(r, "vision_config"); }
static void e_bos(cJSON *r) { set(r, NULL, "bos_token_id", cJSON_CreateNumber(2048)); }
static void e_no_factor(cJSON *r) {
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(sect(r, T), "rope_scaling"), "factor");
}
static void e_topk_neg(cJSON *r) { set(r, T, "num_experts_per_tok", cJSON_CreateNumber(17)); }
static void e_bool_type(cJSON *r) { set(r, T, "norm_topk_prob", cJSON_CreateNumber(1)); }
static void e_kv_heads(cJSON *r) { set(r, T, "num_key_value_heads", cJSON_CreateNumber(4)); }
static void e_vision_on(cJSON *r) {
    cJSON *v = sect(r, "vision_config");
    set(r, "vision_config", "num_hidden_layers", cJSON_CreateNumber(2));
    cJSON_DeleteItemFromObject(v, "patch_size");
}
static void e_expert_fp8(cJSON *r) { set(r, "quantization_config", "expert_dtype", cJSON_CreateString("fp8")); }
static void e_dspark_target(cJSON *r) { int v[] = {9, 10, 12}; set_ints(r, T, "dspark_target_layer_ids", v, 3); }

static void test_errors(void) {
    expect_error("missing", e_missing_topk, "config.json: text_config.index_topk: missing");
    expect_error("type", e_hidden_string, "text_config.hidden_size: expected an integer, found a string");
    expect_error("fraction", e_head_dim_frac, "text_config.head_dim: expected an integer, found 64.5");
    expect_error("ratios length", e_ratios_short,
                 "text_config.compress_ratios: 14 entries, expected num_hidden_layers + num_nextn_predict_layers = 15");
    expect_error("ratio value", e_ratio_3, "text_config.compress_ratios[4]: 3 out of range [0, 2]");
    expect_error("draft ratio", e_mtp_ratio, "entry 13 (draft block mtp.1) is 1");
    expect_error("kv unsorted", e_kv_unsorted, "text_config.kv_source_layer_ids: not strictly ascending (2 after 4)");
    expect_error("kv on swa", e_kv_on_swa, "text_config.kv_source_layer_ids: layer 1 has compress_ratios[1] = 0");
    expect_error("kv gap", e_kv_gap, "layer 2 has compress ratio 2 but no KV source at or below it");
    expect_error("kv ratio", e_kv_ratio, "layer 6 (ratio 1) reads the global KV of layer 4 (ratio 2)");
    expect_error("kv range", e_kv_range, "layer 12 is not a backbone layer");
    expect_error("hidden 48", e_hidden_48, "text_config.hidden_size: 48 is not a multiple of 32");
    expect_error("o_groups", e_o_groups, "text_config.o_groups: 3 does not divide num_attention_heads 4");
    expect_error("rope dim", e_rope_dim, "text_config.qk_rope_head_dim: 64 must be below head_dim 64");
    expect_error("candidate", e_candidate, "text_config.candidate_source_layer_id: layer 7 is not in index_source_layer_ids");
    expect_error("engram rows", e_engram_rows, "text_config.engram_num_embeddings: 1 entries, expected 2");
    expect_error("scale fmt", e_scale_fmt, "quantization_config.scale_fmt: expected \"ue8m0\", found \"fp32\"");
    expect_error("no vision", e_no_vision, "config.json: vision_config: missing");
    expect_error("bos", e_bos, "bos_token_id: 2048 is not below text_config.vocab_size 2048");
    expect_error("rope factor", e_no_factor, "text_config.rope_scaling.factor: missing");
    expect_error("topk", e_topk_neg, "num_experts_per_tok: 17 exceeds n_routed_experts 16");
    expect_error("bool", e_bool_type, "text_config.norm_topk_prob: expected a boolean, found a number");
    expect_error("kv heads", e_kv_heads, "text_config.num_key_value_heads: 4 out of range [1, 1]");
    expect_error("vision sizes", e_vision_on, "vision_config.patch_size: missing");
    expect_error("dspark target", e_dspark_target, "dspark_target_layer_ids: layer 12 is not a backbone layer");

    di_config cfg;
    di_err err = {0};
    CHECK(di_config_parse(&cfg, "{\"bos_token_id\": 0,", "bad.json", &err) == DI_EINVAL);
    CHECK(strstr(err.msg, "bad.json: not valid JSON") != NULL);
    CHECK(di_config_parse(&cfg, "[1, 2]", "arr.json", &err) == DI_EINVAL);
    CHECK(di_config_load(&cfg, "tests/data/no-such-dir/config.json", &err) == DI_EIO);
    CHECK(strstr(err.msg, "no-such-dir/config.json: cannot open") != NULL);
}

static void test_tiny(void) {
    di_config c;
    di_err err = {0};
    CHECKF(!di_config_load(&c, DI_TINY_FIXTURE_DIR "/config.json", &err), "%s", err.msg);
    CHECK(c.vocab_size == 2048 && c.hidden_size == 64 && c.num_hidden_layers == 12);
    CHECK(c.num_nextn_predict_layers == 3 && c.n_compress_ratios == 15);
    CHECK(c.weight_block_size[0] == 32 && c.scale_ue8m0 && c.expert_fp4);
    CHECK(c.n_kv_sources == 3 && c.n_index_sources == 5 && c.candidate_source_layer_id == 6);
    CHECK(c.n_engram_layers == 2 && c.engram_num_embeddings[1] == 2304);
    CHECK(fabs(c.swiglu_limit - 0.94) < 1e-12 && c.rms_norm_eps == 1e-20 && c.rope_factor == 8);
    CHECK(c.original_max_position_embeddings == 32 && c.vision_num_hidden_layers == 0);
    CHECK(c.n_dspark_targets == 3 && c.dspark_target_layer_ids[2] == 11 && c.dspark_markov_rank == 32);
}

static void test_released(void) {
    di_config c;
    di_err err = {0};
    CHECKF(!di_config_load(&c, "tests/data/v41-flash-config/config.json", &err), "%s", err.msg);
    CHECK(c.num_hidden_layers == 40 && c.hidden_size == 5120 && c.n_routed_experts == 384);
    CHECK(c.engram_num_embeddings[0] == 384006168 && c.vision_num_hidden_layers == 32);
    CHECK(c.vision_hidden_size == 1024 && c.vision_patch_size == 14 && c.vision_downsample_ratio == 3);
    int kv[43], ix[43];
    for (int l = 0; l < 43; l++) {
        kv[l] = di_config_kv_owner(&c, l);
        ix[l] = di_config_index_owner(&c, l);
    }
    CHECK(kv[0] == -1 && kv[1] == -1 && kv[2] == 2 && kv[7] == 2 && kv[8] == 8 && kv[19] == 14);
    CHECK(kv[20] == 20 && kv[39] == 20 && kv[40] == -1 && kv[42] == -1);
    CHECK(ix[1] == -1 && ix[2] == 2 && ix[23] == 20 && ix[24] == 24 && ix[27] == 24 && ix[39] == 36);
    CHECK(ix[40] == -1 && di_config_kv_owner(&c, -1) == -1 && di_config_kv_owner(&c, 99) == -1);
    CHECK(di_config_is_kv_source(&c, 14) && !di_config_is_kv_source(&c, 24));
    CHECK(di_config_is_index_source(&c, 24) && !di_config_is_index_source(&c, 25));
    CHECK(di_config_engram_slot(&c, 1) == 0 && di_config_engram_slot(&c, 14) == 1);
    CHECK(di_config_engram_slot(&c, 2) == -1);
    CHECK(di_config_compress_ratio(&c, 19) == 2 && di_config_compress_ratio(&c, 20) == 1);
    CHECK(di_config_compress_ratio(&c, 41) == 0 && di_config_compress_ratio(&c, 43) == 0);
    CHECK(di_tensor_list_count(&c) == 96085);
}

/* expert_dtype "fp8" (convert.py --expert-dtype fp8): experts become FP8 with 32x32 block scales. */
static void check_fp8_expert(const di_tensor_spec *s, void *user) {
    if (!strcmp(s->name, "layers.0.ffn.experts.3.w2.weight"))
        *(int *)user = s->dtype == DI_DT_F8_E4M3 && s->shape[0] == 64 && s->shape[1] == 96;
}

static void test_expert_fp8(void) {
    char *text = edited(e_expert_fp8);
    di_config c;
    di_err err = {0};
    CHECKF(!di_config_parse(&c, text, "fp8", &err), "%s", err.msg);
    CHECK(!c.expert_fp4 && di_tensor_list_count(&c) == 1797);
    int ok = 0;
    di_tensor_list_for_each(&c, check_fp8_expert, &ok);
    CHECK(ok);
    free(text);
}

int main(void) {
    g_tiny = tu_read(DI_TINY_FIXTURE_DIR "/config.json", NULL);
    CHECK(g_tiny != NULL);
    if (!g_tiny) return TEST_SUMMARY();
    test_tiny();
    test_released();
    test_errors();
    test_expert_fp8();
    free(g_tiny);
    return TEST_SUMMARY();
}
