/* safetensors reader: dtype table, single-file opens (the tiny fixture's golden/debug files), data
 * pointers into the mmap, di_tensor_expect's message format, and hand-made headers with each kind of
 * malformed entry. */
#include <cjson/cJSON.h>

#include "model/safetensors.h"
#include "model/tensor_list.h"
#include "test_checkpoint_util.h"
#include "test_harness.h"

static char g_dir[256];

/* Writes `header` as a safetensors file with `data_bytes` of (sparse) data; returns its path. */
static const char *make_file(const char *name, const char *header, uint64_t data_bytes) {
    static char path[512];
    tu_path(path, sizeof path, g_dir, name);
    size_t hl = strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    FILE *f = fopen(path, "wb");
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, hl, f);
    fclose(f);
    CHECK(!truncate(path, (off_t)(8 + hl + data_bytes)));
    return path;
}

static void expect_open_error(const char *header, uint64_t data_bytes, di_status want, const char *msg) {
    const char *path = make_file("bad.safetensors", header, data_bytes);
    di_checkpoint *ck = NULL;
    di_err err = {0};
    di_status st = di_safetensors_open_file(&ck, path, &err);
    CHECKF(st == want && ck == NULL, "status %d for %s (%s)", st, header, err.msg);
    CHECKF(strstr(err.msg, msg) != NULL, "message \"%s\" lacks \"%s\"", err.msg, msg);
    di_checkpoint_close(ck);
}

static void test_dtypes(void) {
    const char *names[] = {"F32", "BF16", "F16", "F8_E4M3", "F8_E8M0", "I8", "I32", "I64", "U8"};
    size_t sizes[] = {4, 2, 2, 1, 1, 1, 4, 8, 1};
    for (int i = 0; i < DI_DT_COUNT; i++) {
        CHECK(di_dtype_parse(names[i]) == i);
        CHECK(!strcmp(di_dtype_name((di_dtype)i), names[i]));
        CHECK(di_dtype_size((di_dtype)i) == sizes[i]);
    }
    CHECK(di_dtype_parse("F8_E5M2") == -1 && di_dtype_parse("bf16") == -1 && di_dtype_parse(NULL) == -1);
    CHECK(di_dtype_size(DI_DT_COUNT) == 0);
}

static void test_golden(void) {
    di_checkpoint *ck = NULL;
    di_err err = {0};
    CHECKF(!di_safetensors_open_file(&ck, DI_TINY_FIXTURE_DIR "/golden.safetensors", &err), "%s", err.msg);
    const di_tensor *t = di_checkpoint_find(ck, "topk.index_layers");
    CHECK(t && t->dtype == DI_DT_I32 && t->ndim == 1 && t->shape[0] == 5 && t->nbytes == 20);
    if (t) {
        const int32_t *v = t->data;
        CHECK(v[0] == 2 && v[1] == 4 && v[2] == 6 && v[3] == 8 && v[4] == 10);
    }
    int64_t shape[2] = {40, 2048};
    CHECKF(!di_tensor_expect(ck, "prompt.3.prefill_logits", DI_DT_F32, 2, shape, &t, &err), "%s", err.msg);
    CHECK(t && di_tensor_numel(t) == 40 * 2048);
    CHECK(di_checkpoint_find(ck, "no.such.tensor") == NULL);
    di_checkpoint_close(ck);

    CHECKF(!di_safetensors_open_file(&ck, DI_TINY_FIXTURE_DIR "/debug.safetensors", &err), "%s", err.msg);
    CHECK(ck && di_checkpoint_count(ck) > 0 && di_checkpoint_find(ck, "final_norm_out") != NULL);
    di_checkpoint_close(ck);
    CHECK(di_safetensors_open_file(&ck, "tests/data/none.safetensors", &err) == DI_EIO && !ck);
}

/* Every tensor's data pointer must address exactly the bytes its header entry names. */
static void test_tiny_dir(void) {
    di_checkpoint *ck = NULL;
    di_err err = {0};
    CHECKF(!di_checkpoint_open(&ck, DI_TINY_FIXTURE_DIR, &err), "%s", err.msg);
    CHECK(di_checkpoint_count(ck) == 1797 && di_checkpoint_total_bytes(ck) == 5325722);
    CHECK(!strcmp(di_checkpoint_dir(ck), DI_TINY_FIXTURE_DIR));
    CHECK(!strcmp(di_checkpoint_shard_name(ck, 0), "model.safetensors") && !di_checkpoint_shard_name(ck, 1));
    CHECK(di_checkpoint_at(ck, 1797) == NULL);
    size_t len = 0;
    char *file = tu_read(DI_TINY_FIXTURE_DIR "/model.safetensors", &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (unsigned char)file[i];
    char *text = strndup(file + 8, hl);
    cJSON *hdr = cJSON_Parse(text);
    size_t n_same = 0, n_entries = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, hdr) {
        if (!strcmp(e->string, "__metadata__")) continue;
        n_entries++;
        const di_tensor *t = di_checkpoint_find(ck, e->string);
        size_t begin = (size_t)cJSON_GetArrayItem(cJSON_GetObjectItem(e, "data_offsets"), 0)->valuedouble;
        n_same += t && !memcmp(t->data, file + 8 + hl + begin, t->nbytes);
    }
    CHECK(n_entries == 1797 && n_same == 1797);
    /* ...and the fixture is exactly the inventory its config expects. */
    di_config cfg;
    CHECKF(!di_config_load(&cfg, DI_TINY_FIXTURE_DIR "/config.json", &err), "%s", err.msg);
    CHECK(di_tensor_list_count(&cfg) == 1797);
    CHECKF(!di_checkpoint_validate(ck, &cfg, &err), "%s", err.msg);
    cJSON_Delete(hdr);
    free(text);
    free(file);
    di_checkpoint_close(ck);
}

static void test_expect_message(void) {
    const char *path = make_file("one.safetensors",
        "{\"layers.2.attn.wkv.weight\":{\"dtype\":\"BF16\",\"shape\":[512,5120],\"data_offsets\":[0,5242880]}}",
        5242880);
    di_checkpoint *ck = NULL;
    di_err err = {0};
    CHECKF(!di_safetensors_open_file(&ck, path, &err), "%s", err.msg);
    int64_t shape[2] = {512, 5120};
    const di_tensor *t = (const di_tensor *)1;
    CHECK(di_tensor_expect(ck, "layers.2.attn.wkv.weight", DI_DT_F8_E4M3, 2, shape, &t, &err) == DI_EFORMAT);
    CHECK(t == NULL);
    CHECKF(!strcmp(err.msg, "layers.2.attn.wkv.weight: expected F8_E4M3 [512, 5120], found BF16 [512, 5120]"),
           "%s", err.msg);
    CHECK(di_tensor_expect(ck, "layers.2.attn.wkv.weight", DI_DT_BF16, 1, shape, NULL, &err) == DI_EFORMAT);
    CHECKF(strstr(err.msg, "expected BF16 [512], found BF16 [512, 5120]") != NULL, "%s", err.msg);
    CHECK(di_tensor_expect(ck, "layers.2.attn.wkv.scale", DI_DT_F8_E8M0, 2, shape, NULL, &err) == DI_EFORMAT);
    CHECKF(!strcmp(err.msg, "layers.2.attn.wkv.scale: missing from the checkpoint (expected F8_E8M0 [512, 5120])"),
           "%s", err.msg);
    CHECK(!di_tensor_expect(ck, "layers.2.attn.wkv.weight", DI_DT_BF16, 2, shape, &t, &err) && t);
    di_checkpoint_close(ck);
}

static void test_malformed(void) {
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, DI_EFORMAT,
                      "tensor a: 5 dims, at most 4 supported");
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, DI_EFORMAT,
                      "tensor a: shape[0] is not a non-negative integer");
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, DI_EFORMAT,
                      "shape[0] is not a non-negative integer");
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, DI_EFORMAT,
                      "tensor a: bad data_offsets [4, 0]");
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, DI_EFORMAT,
                      "tensor a: needs string dtype, array shape, 2 data_offsets");
    expect_open_error("{\"a\":[1,2]}", 4, DI_EFORMAT, "tensor a: entry is not an object");
    expect_open_error("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, DI_EFORMAT, "needs string dtype");
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                      "\"data_offsets\":[0,4]}}", 4, DI_EFORMAT, "tensor a: shape overflows");
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, DI_EFORMAT,
                      "tensor a appears twice");
    expect_open_error("[]", 0, DI_EFORMAT, "header is not a JSON object");
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, DI_EIO,
                      "tensor a ends at data byte 8 but the data section has only 4 bytes");
    /* metadata is skipped; zero-size tensors are allowed */
    const char *ok = make_file("ok.safetensors", "{\"__metadata__\":{\"format\":\"pt\"},"
                               "\"z\":{\"dtype\":\"I64\",\"shape\":[0,3],\"data_offsets\":[0,0]}}", 0);
    di_checkpoint *ck = NULL;
    di_err err = {0};
    CHECKF(!di_safetensors_open_file(&ck, ok, &err), "%s", err.msg);
    CHECK(di_checkpoint_count(ck) == 1 && di_checkpoint_find(ck, "z")->nbytes == 0);
    di_checkpoint_close(ck);
}

/* Deterministic mini-fuzz: random byte edits of the tiny fixture's header (data left sparse) must
 * give DI_OK or an error with a message, never a crash (meaningful under ASan). */
static void test_fuzz_header(void) {
    size_t len = 0;
    char *file = tu_read(DI_TINY_FIXTURE_DIR "/model.safetensors", &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (unsigned char)file[i];
    char path[512];
    tu_path(path, sizeof path, g_dir, "fuzz.safetensors");
    uint64_t rng = 41001;
    int n_err = 0, n_ok = 0;
    char *buf = malloc(8 + hl);
    for (int it = 0; it < 300; it++) {
        memcpy(buf, file, 8 + hl);
        int edits = 1 + it % 4;
        for (int k = 0; k < edits; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)((rng >> 33) % (it % 10 == 0 ? 8 : 8 + hl));
            static const char alphabet[] = "{}[],:\"0123456789-.eE aFIB_";
            buf[at] = alphabet[(rng >> 20) % (sizeof alphabet - 1)];
        }
        tu_write(path, buf, 8 + hl);
        if (truncate(path, (off_t)len)) continue;
        di_checkpoint *ck = NULL;
        di_err err = {0};
        di_status st = di_safetensors_open_file(&ck, path, &err);
        if (st) {
            n_err++;
            CHECKF(err.msg[0] && !ck, "iteration %d: status %d without a message", it, st);
        } else {
            n_ok++;
        }
        di_checkpoint_close(ck);
    }
    printf("fuzz: %d opened, %d rejected\n", n_ok, n_err);
    CHECK(n_err > 0);
    free(buf);
    free(file);
}

int main(void) {
    if (tu_mkdtemp(g_dir, sizeof g_dir, "st")) return 1;
    test_dtypes();
    test_golden();
    test_tiny_dir();
    test_expect_message();
    test_malformed();
    test_fuzz_header();
    tu_rm_rf(g_dir);
    return TEST_SUMMARY();
}
