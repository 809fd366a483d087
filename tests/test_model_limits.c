/* A config beyond the forward pass's fixed buffers (hc_mult, head_dim, expert counts, ...) is
 * refused at model load with an error naming the field, never run into a buffer overflow. */
#include <cjson/cJSON.h>
#include <unistd.h>

#include "base/file.h"
#include "forward/model.h"
#include "test_harness.h"

static void expect_refused(const char *field, int value) {
    char dir[] = "/tmp/deepinfer-limits-XXXXXX";
    if (!mkdtemp(dir)) return;
    char *text = NULL;
    di_err err = {0};
    CHECK(di_read_file(DI_TINY_FIXTURE_DIR "/config.json", 1 << 20, "config", &text, NULL, &err) == DI_OK);
    cJSON *root = cJSON_Parse(text);
    cJSON *tc = cJSON_GetObjectItem(root, "text_config");
    cJSON_ReplaceItemInObject(tc, field, cJSON_CreateNumber(value));
    char *out = cJSON_Print(root);
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs(out, f);
    fclose(f);
    di_model *m = NULL;
    di_status st = di_model_load(&m, dir, &err);
    printf("  %s = %d: %s\n", field, value, err.msg);
    CHECK(st != DI_OK && m == NULL);
    CHECKF(strstr(err.msg, field) != NULL, "message does not name %s: %s", field, err.msg);
    unlink(path);
    rmdir(dir);
    free(out);
    cJSON_Delete(root);
    free(text);
}

int main(void) {
    printf("configs beyond the forward pass's limits:\n");
    expect_refused("hc_mult", 8);
    expect_refused("head_dim", 2048);
    expect_refused("num_experts_per_tok", 32);
    expect_refused("dspark_block_size", 9);
    return TEST_SUMMARY();
}
