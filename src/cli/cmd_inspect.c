/* `deepinfer inspect --model DIR`: loads config.json, opens every shard (headers + lazy mmap, no
 * weight data is read), validates the tensors against the config's expected inventory, and prints a
 * short summary. Any failure prints the loader's message (which names the file, field or tensor) and
 * exits 1; bad usage exits 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/tensor_list.h"

static void print_summary(const di_config *c, const di_checkpoint *ck) {
    uint64_t bytes = di_checkpoint_total_bytes(ck);
    printf("model:    %s\n", di_checkpoint_dir(ck));
    printf("layers:   %d backbone + %d DSpark blocks; hidden %d, heads %d x %d, vocab %d\n",
           c->num_hidden_layers, c->num_nextn_predict_layers, c->hidden_size, c->num_attention_heads,
           c->head_dim, c->vocab_size);
    printf("experts:  %d routed (top-%d) + %d shared, inter %d, %s; DSpark %d (top-%d)\n",
           c->n_routed_experts, c->num_experts_per_tok, c->n_shared_experts, c->moe_intermediate_size,
           c->expert_fp4 ? "FP4" : "FP8", c->dspark_n_routed_experts, c->dspark_num_experts_per_tok);
    printf("sources:  %d KV, %d index, %d Engram layers; vision layers %d\n", c->n_kv_sources,
           c->n_index_sources, c->n_engram_layers, c->vision_num_hidden_layers);
    printf("tensors:  %zu (expected %zu)\n", di_checkpoint_count(ck), di_tensor_list_count(c));
    printf("bytes:    %llu (%.2f GiB)\n", (unsigned long long)bytes, (double)bytes / (1024.0 * 1024 * 1024));
    printf("shards:   %d\n", di_checkpoint_shard_count(ck));
    printf("status:   ok\n");
}

int di_cmd_inspect(di_settings *s, int argc, char **argv) {
    int n_pos = 0;
    if (!di_cli_parse(s, argc, argv, &n_pos)) return 2;
    if (n_pos > 0 || !s->model_dir || !*s->model_dir) {
        fprintf(stderr, "usage: deepinfer inspect --model DIR\n");
        return 2;
    }
    const char *dir = s->model_dir;
    size_t n = strlen(dir) + sizeof "/config.json";
    char *cpath = malloc(n);
    if (!cpath) return 1;
    snprintf(cpath, n, "%s/config.json", dir);
    di_err err = {0};
    di_config cfg;
    di_checkpoint *ck = NULL;
    di_status st = di_config_load(&cfg, cpath, &err);
    if (!st) st = di_checkpoint_open(&ck, dir, &err);
    if (!st) st = di_checkpoint_validate(ck, &cfg, &err);
    if (st)
        fprintf(stderr, "deepinfer inspect: %s: %s (%s)\n", dir, err.msg, di_status_name(st));
    else
        print_summary(&cfg, ck);
    di_checkpoint_close(ck);
    free(cpath);
    return st ? 1 : 0;
}
