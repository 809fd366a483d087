/* The released V4.1 layout loads without reading the checkpoint: a synthetic 48-shard checkpoint
 * of the released config (real headers, data as file-system holes, 96,085 tensors) plus the V4.1
 * tokenizer binds every weight of the 40 layers and 3 DSpark blocks, builds the Engram constants
 * (99,092 compressed ids, the real table sizes) and stays far below the checkpoint's size in
 * memory: everything is a view into the lazily mmapped shards. */
#include <sys/resource.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/file.h"
#include "forward/model.h"
#include "model/synthetic_checkpoint.h"
#include "test_harness.h"

int main(void) {
    char dir[] = "/tmp/deepinfer-full-load-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    di_err err = {0};
    char *cfg = NULL;
    CHECK(di_read_file("tests/data/v41-flash-config/config.json", 1 << 20, "config", &cfg, NULL, &err) == DI_OK);
    int shards = 0;
    CHECKF(di_synthetic_checkpoint_write(dir, cfg, &shards, &err) == DI_OK, "%s", err.msg);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp assets/tokenizer/tokenizer.json '%s'/", dir);
    CHECK(system(cmd) == 0);
    double t0 = di_seconds_now();
    di_model *m = NULL;
    di_status st = di_model_load(&m, dir, &err);
    double dt = di_seconds_now() - t0;
    CHECKF(st == DI_OK, "%s", err.msg);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (m) {
        printf("released layout: %d shards, %d layers + %d DSpark blocks, %d compressed token ids, loaded in "
               "%.2f s, max RSS %.0f MB\n", shards, m->n_layers, m->n_total_layers - m->n_layers,
               m->token_map.n_compressed, dt, ru.ru_maxrss / 1024.0);
        CHECK(shards == 48);
        CHECK(m->n_layers == 40 && m->n_total_layers == 43);
        CHECK(m->token_map.n_compressed == 99092);
        CHECK(m->engram.layer[0].num_rows == 384006168 && m->engram.layer[1].num_rows == 384016682);
        CHECK(m->layers[20].is_candidate_source && m->layers[24].uses_candidates);
        CHECK(m->layers[3].kv_owner == 2 && m->layers[39].kv_owner == 20 && m->layers[39].index_owner == 36);
        CHECK(ru.ru_maxrss < 1024 * 1024); /* < 1 GiB resident for a 475 GiB checkpoint */
    }
    di_model_free(m);
    free(cfg);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return TEST_SUMMARY();
}
