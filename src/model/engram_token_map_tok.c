/* The Engram compressed token map of a real checkpoint, built from its tokenizer.json: every id is
 * decoded alone with special tokens kept (HF `decode([t], skip_special_tokens=False)`) and paired
 * with its raw byte-level token string, then handed to di_engram_token_map_build (engram_consts.h). */
#include <stdlib.h>

#include "model/engram_consts.h"
#include "tokenizer/tokenizer.h"

di_status di_engram_token_map_from_tokenizer(const char *path, di_engram_token_map *out, di_err *err) {
    di_tokenizer *tok = NULL;
    di_status st = di_tokenizer_load(path, &tok, err);
    if (st) return st;
    const int32_t V = di_tokenizer_vocab_size(tok);
    char **decoded = di_xcalloc((size_t)V, sizeof(char *));
    const char **raw = di_xcalloc((size_t)V, sizeof(char *));
    size_t *decoded_len = di_xcalloc((size_t)V, sizeof(size_t)), *raw_len = di_xcalloc((size_t)V, sizeof(size_t));
    for (int32_t id = 0; id < V && !st; id++) {
        raw[id] = di_tokenizer_id_to_token(tok, id, &raw_len[id]);
        if (!raw[id]) {
            st = di_errf(err, DI_EFORMAT, "%s: token id %d has no entry (the map needs every id)", path, id);
            break;
        }
        st = di_tokenizer_decode(tok, &id, 1, false, &decoded[id], &decoded_len[id], err);
    }
    if (!st) st = di_engram_token_map_build((const char *const *)decoded, decoded_len, raw, raw_len, V, out, err);
    for (int32_t id = 0; id < V; id++) free(decoded[id]);
    free(decoded);
    free(raw);
    free(decoded_len);
    free(raw_len);
    di_tokenizer_free(tok);
    return st;
}
