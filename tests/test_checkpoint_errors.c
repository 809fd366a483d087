/* Loading damaged copies of the tiny fixture: each fault (truncated shard, bad header length, wrong or
 * unknown dtype, size mismatch, missing tensor, extra tensor, index/shard disagreement, missing shard,
 * config contradicting the tensors) must give its own clear error naming the file or tensor, never a
 * crash (this test also runs under ASan + UBSan). Each case works in a fresh temp copy. */
#include <cjson/cJSON.h>

#include "model/config.h"
#include "model/safetensors.h"
#include "model/tensor_list.h"
#include "test_checkpoint_util.h"
#include "test_harness.h"

static char g_dir[256];
static char *g_model, *g_index, *g_config; /* pristine fixture files */
static size_t g_model_len, g_index_len, g_config_len;

static void fresh_copy(void) {
    char p[512];
    tu_rm_rf(g_dir);
    if (tu_mkdtemp(g_dir, sizeof g_dir, "ckerr")) abort();
    tu_path(p, sizeof p, g_dir, "model.safetensors");
    tu_write(p, g_model, g_model_len);
    tu_path(p, sizeof p, g_dir, "model.safetensors.index.json");
    tu_write(p, g_index, g_index_len);
    tu_path(p, sizeof p, g_dir, "config.json");
    tu_write(p, g_config, g_config_len);
}

static void write_in_copy(const char *name, const void *data, size_t len) {
    char p[512];
    tu_path(p, sizeof p, g_dir, name);
    tu_write(p, data, len);
}

static uint64_t header_len(const char *file) {
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = (h << 8) | (unsigned char)file[i];
    return h;
}

/* Rewrites the shard of the copy with its header edited through cJSON (data section unchanged). */
static void edit_header(void (*edit)(cJSON *hdr, const char *arg), const char *arg) {
    uint64_t hl = header_len(g_model);
    char *text = strndup(g_model + 8, hl);
    cJSON *hdr = cJSON_Parse(text);
    edit(hdr, arg);
    char *out = cJSON_PrintUnformatted(hdr);
    size_t nl = strlen(out), data = g_model_len - 8 - hl;
    char *file = malloc(8 + nl + data);
    for (int i = 0; i < 8; i++) file[i] = (char)((uint64_t)nl >> (8 * i));
    memcpy(file + 8, out, nl);
    memcpy(file + 8 + nl, g_model + 8 + hl, data);
    write_in_copy("model.safetensors", file, 8 + nl + data);
    free(file);
    free(out);
    cJSON_Delete(hdr);
    free(text);
}

/* Same for the index's weight_map. */
static void edit_index(void (*edit)(cJSON *wm, const char *arg), const char *arg) {
    cJSON *root = cJSON_Parse(g_index);
    edit(cJSON_GetObjectItem(root, "weight_map"), arg);
    char *out = cJSON_PrintUnformatted(root);
    write_in_copy("model.safetensors.index.json", out, strlen(out));
    free(out);
    cJSON_Delete(root);
}

/* Opens (and if that works, validates) the copy; checks status and message. */
static void expect_load_error(const char *label, di_status want_st, const char *want_msg) {
    char cpath[512];
    tu_path(cpath, sizeof cpath, g_dir, "config.json");
    di_err err = {0};
    di_config cfg;
    di_checkpoint *ck = NULL;
    di_status st = di_config_load(&cfg, cpath, &err);
    if (!st) st = di_checkpoint_open(&ck, g_dir, &err);
    if (!st) st = di_checkpoint_validate(ck, &cfg, &err);
    di_checkpoint_close(ck);
    CHECKF(st == want_st, "%s: status %d, expected %d (%s)", label, st, want_st, err.msg);
    CHECKF(strstr(err.msg, want_msg) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err.msg, want_msg);
    printf("  %-20s -> %s\n", label, err.msg);
}

static void set_dtype(cJSON *hdr, const char *arg) { /* arg = "name=DTYPE" */
    char name[160];
    const char *eq = strchr(arg, '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(hdr, name), "dtype", cJSON_CreateString(eq + 1));
}
static void transpose(cJSON *hdr, const char *name) {
    cJSON *sh = cJSON_GetObjectItem(cJSON_GetObjectItem(hdr, name), "shape");
    int a = cJSON_GetArrayItem(sh, 0)->valueint, b = cJSON_GetArrayItem(sh, 1)->valueint;
    int v[2] = {b, a};
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(hdr, name), "shape", cJSON_CreateIntArray(v, 2));
}
static void drop(cJSON *obj, const char *name) { cJSON_DeleteItemFromObject(obj, name); }
static void add_empty(cJSON *hdr, const char *name) {
    cJSON *e = cJSON_CreateObject();
    int shape[1] = {0}, off[2] = {0, 0};
    cJSON_AddStringToObject(e, "dtype", "BF16");
    cJSON_AddItemToObject(e, "shape", cJSON_CreateIntArray(shape, 1));
    cJSON_AddItemToObject(e, "data_offsets", cJSON_CreateIntArray(off, 2));
    cJSON_AddItemToObject(hdr, name, e);
}
static void index_add(cJSON *wm, const char *name) { cJSON_AddStringToObject(wm, name, "model.safetensors"); }
static void index_move(cJSON *wm, const char *name) {
    cJSON_ReplaceItemInObject(wm, name, cJSON_CreateString("model-00002-of-00002.safetensors"));
}
static void index_escape(cJSON *wm, const char *name) {
    cJSON_ReplaceItemInObject(wm, name, cJSON_CreateString("../model.safetensors"));
}
static void overlap(cJSON *hdr, const char *name) { /* move `name` inside layers.0.attn.wkv.weight */
    cJSON *src = cJSON_GetObjectItem(cJSON_GetObjectItem(hdr, "layers.0.attn.wkv.weight"), "data_offsets");
    cJSON *off = cJSON_GetObjectItem(cJSON_GetObjectItem(hdr, name), "data_offsets");
    double b = cJSON_GetArrayItem(off, 0)->valuedouble, e = cJSON_GetArrayItem(off, 1)->valuedouble;
    double at = cJSON_GetArrayItem(src, 0)->valuedouble + 2;
    cJSON_ReplaceItemInArray(off, 0, cJSON_CreateNumber(at));
    cJSON_ReplaceItemInArray(off, 1, cJSON_CreateNumber(at + (e - b)));
}
static void past_end(cJSON *hdr, const char *name) {
    cJSON *off = cJSON_GetObjectItem(cJSON_GetObjectItem(hdr, name), "data_offsets");
    double b = cJSON_GetArrayItem(off, 0)->valuedouble, e = cJSON_GetArrayItem(off, 1)->valuedouble;
    cJSON_ReplaceItemInArray(off, 0, cJSON_CreateNumber(b + 1e9));
    cJSON_ReplaceItemInArray(off, 1, cJSON_CreateNumber(e + 1e9));
}

static void test_shard_faults(void) {
    fresh_copy();
    char p[512];
    tu_path(p, sizeof p, g_dir, "model.safetensors");
    CHECK(!truncate(p, (off_t)g_model_len - 1000));
    expect_load_error("truncated shard", DI_EIO, "model.safetensors: tensor");
    expect_load_error("truncated shard", DI_EIO, "(file truncated?)");

    fresh_copy();
    tu_path(p, sizeof p, g_dir, "model.safetensors");
    CHECK(!truncate(p, 5));
    expect_load_error("5-byte shard", DI_EFORMAT, "too short for the 8-byte header length");

    char *bad = malloc(g_model_len);
    memcpy(bad, g_model, g_model_len);
    uint64_t big = (uint64_t)g_model_len; /* larger than file - 8 */
    for (int i = 0; i < 8; i++) bad[i] = (char)(big >> (8 * i));
    fresh_copy();
    write_in_copy("model.safetensors", bad, g_model_len);
    expect_load_error("header length", DI_EFORMAT, "model.safetensors: header length 5503402 is impossible");
    for (int i = 0; i < 8; i++) bad[i] = (char)0xff;
    write_in_copy("model.safetensors", bad, g_model_len);
    expect_load_error("header length 2^64", DI_EFORMAT, "header length 18446744073709551615 is impossible");
    uint64_t shorter = header_len(g_model) - 10; /* cuts the JSON */
    for (int i = 0; i < 8; i++) bad[i] = (char)(shorter >> (8 * i));
    write_in_copy("model.safetensors", bad, g_model_len);
    expect_load_error("header cut", DI_EFORMAT, "model.safetensors: header is not a JSON object");
    free(bad);

    fresh_copy();
    edit_header(set_dtype, "layers.2.attn.wkv.weight=F8_E5M3");
    expect_load_error("unknown dtype", DI_EFORMAT, "tensor layers.2.attn.wkv.weight: unknown dtype \"F8_E5M3\"");
    fresh_copy();
    edit_header(set_dtype, "layers.2.attn.wkv.weight=BF16");
    expect_load_error("size mismatch", DI_EFORMAT,
                      "tensor layers.2.attn.wkv.weight: data_offsets span 4096 bytes, but BF16 x 4096 elements needs 8192");
    fresh_copy();
    edit_header(overlap, "layers.0.attn.wq_a.scale"); /* 4 bytes inside wkv's 4096 */
    expect_load_error("overlap", DI_EFORMAT, "layers.0.attn.wkv.weight and layers.0.attn.wq_a.scale overlap");
    fresh_copy();
    edit_header(past_end, "head.weight");
    expect_load_error("offset past end", DI_EIO, "tensor head.weight ends at data byte");
}

static void test_inventory_faults(void) {
    fresh_copy();
    edit_header(set_dtype, "layers.2.attn.wkv.weight=I8");
    expect_load_error("wrong dtype", DI_EFORMAT,
                      "layers.2.attn.wkv.weight: expected F8_E4M3 [64, 64], found I8 [64, 64]");
    fresh_copy();
    edit_header(set_dtype, "layers.3.ffn_norm.weight=F16");
    expect_load_error("bf16 vs f16", DI_EFORMAT, "layers.3.ffn_norm.weight: expected BF16 [64], found F16 [64]");
    fresh_copy();
    edit_header(transpose, "layers.5.attn.wq_a.weight");
    expect_load_error("wrong shape", DI_EFORMAT,
                      "layers.5.attn.wq_a.weight: expected F8_E4M3 [96, 64], found F8_E4M3 [64, 96]");
    fresh_copy();
    edit_header(drop, "layers.4.engram.k_weight");
    expect_load_error("absent from shard", DI_EFORMAT,
                      "model.safetensors.index.json: tensor layers.4.engram.k_weight is listed in model.safetensors "
                      "but is absent from it");
    fresh_copy();
    edit_header(drop, "mtp.1.ffn.experts.7.w3.scale");
    edit_index(drop, "mtp.1.ffn.experts.7.w3.scale");
    expect_load_error("missing tensor", DI_EFORMAT,
                      "mtp.1.ffn.experts.7.w3.scale: missing from the checkpoint (expected F8_E8M0 [96, 2])");
    fresh_copy();
    edit_header(add_empty, "layers.0.attn.extra");
    expect_load_error("not in index", DI_EFORMAT,
                      "model.safetensors: holds tensor layers.0.attn.extra, which model.safetensors.index.json does not list");
    edit_index(index_add, "layers.0.attn.extra");
    expect_load_error("unexpected tensor", DI_EFORMAT, "layers.0.attn.extra: unexpected tensor");
    fresh_copy();
    edit_index(index_move, "norm.weight");
    expect_load_error("missing shard", DI_EIO, "model-00002-of-00002.safetensors: cannot open");
    fresh_copy();
    edit_index(index_escape, "norm.weight");
    expect_load_error("path escape", DI_EFORMAT, "weight_map[\"norm.weight\"] is not a plain shard file name");
    fresh_copy();
    write_in_copy("model.safetensors.index.json", "{\"weight_map\": [", 16);
    expect_load_error("bad index", DI_EFORMAT, "model.safetensors.index.json: not valid JSON");
}

static void test_config_contradicts(void) {
    fresh_copy();
    cJSON *root = cJSON_Parse(g_config);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "text_config"), "hidden_size", cJSON_CreateNumber(96));
    char *out = cJSON_PrintUnformatted(root);
    write_in_copy("config.json", out, strlen(out));
    expect_load_error("hidden_size 96", DI_EFORMAT, "embed.weight: expected BF16 [2048, 96], found BF16 [2048, 64]");
    free(out);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "text_config"), "hidden_size", cJSON_CreateNumber(64));
    int ids[] = {2, 4, 6, 8, 9, 10};
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "text_config"), "index_source_layer_ids",
                              cJSON_CreateIntArray(ids, 6));
    out = cJSON_PrintUnformatted(root);
    write_in_copy("config.json", out, strlen(out));
    expect_load_error("extra index source", DI_EFORMAT, "layers.9.attn.indexer.wq_b.weight: missing from the checkpoint");
    free(out);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "text_config"), "index_source_layer_ids",
                              cJSON_CreateIntArray(ids, 4));
    out = cJSON_PrintUnformatted(root);
    write_in_copy("config.json", out, strlen(out));
    expect_load_error("fewer index sources", DI_EFORMAT, "layers.10.attn.indexer.weights_proj.weight: unexpected tensor");
    free(out);
    cJSON_Delete(root);
}

static void test_no_index(void) {
    fresh_copy();
    char p[512];
    tu_path(p, sizeof p, g_dir, "model.safetensors.index.json");
    unlink(p);
    di_err err = {0};
    di_checkpoint *ck = NULL;
    CHECKF(!di_checkpoint_open(&ck, g_dir, &err), "%s", err.msg);
    CHECK(di_checkpoint_count(ck) == 1797 && di_checkpoint_shard_count(ck) == 1);
    di_checkpoint_close(ck);
    tu_path(p, sizeof p, g_dir, "model.safetensors");
    unlink(p);
    expect_load_error("no shards", DI_EIO, "neither model.safetensors.index.json nor model.safetensors exists");
}

int main(void) {
    g_model = tu_read(DI_TINY_FIXTURE_DIR "/model.safetensors", &g_model_len);
    g_index = tu_read(DI_TINY_FIXTURE_DIR "/model.safetensors.index.json", &g_index_len);
    g_config = tu_read(DI_TINY_FIXTURE_DIR "/config.json", &g_config_len);
    CHECK(g_model && g_index && g_config);
    if (!g_model || !g_index || !g_config) return TEST_SUMMARY();
    test_shard_faults();
    test_inventory_faults();
    test_config_contradicts();
    test_no_index();
    tu_rm_rf(g_dir);
    free(g_model);
    free(g_index);
    free(g_config);
    return TEST_SUMMARY();
}
