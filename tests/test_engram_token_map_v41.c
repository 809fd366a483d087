/* The Engram compressed token map of the real V4.1 tokenizer (assets/tokenizer/tokenizer.json),
 * built through our own tokenizer's single-id decode and the reference's normaliser chain, must have
 * exactly engram_compressed_vocab_size = 99,092 keys (both the reference and vLLM assert it), with
 * the pad token's compressed id 2. tests/test_engram_token_map_hf.sh compares it id by id with
 * HF `tokenizers`. */
#include "model/engram_consts.h"
#include "test_harness.h"

int main(void) {
    di_err err = {0};
    di_engram_token_map map = {0};
    di_status st = di_engram_token_map_from_tokenizer("assets/tokenizer/tokenizer.json", &map, &err);
    CHECKF(st == DI_OK, "%s", err.msg);
    if (st == DI_OK) {
        printf("V4.1 tokenizer: %d ids, %d compressed ids, pad -> %d\n", map.vocab_size, map.n_compressed,
               di_engram_token_map_get(&map, 2));
        CHECK(map.vocab_size == 129280);
        CHECK(map.n_compressed == 99092);
        CHECK(di_engram_token_map_get(&map, 2) == 2);
        CHECK(di_engram_token_map_get(&map, 0) == 0 && di_engram_token_map_get(&map, 1) == 1);
        CHECK(di_engram_token_map_get(&map, 129280) == DI_ENGRAM_DEAD);
    }
    di_engram_token_map_free(&map);
    return TEST_SUMMARY();
}
