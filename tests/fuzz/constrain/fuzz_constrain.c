/* libFuzzer target for the structured-output parsers and the matcher. The first input byte picks
 * the parser (0 regex, 1 EBNF, 2 JSON schema); the rest up to a NUL byte is the source, what follows
 * drives a matcher over a 256-token byte vocabulary. Besides "no crash, no sanitizer report" it
 * checks: a failed compile has a message (unsupported ones start "unsupported: "); on a compiled
 * grammar the mask agrees with accept_token for every byte at every step, EOS is in the mask iff
 * the text is complete, and rollback restores the mask. Built and run by run.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"

#define REQUIRE(c)                                                            \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                          \
        }                                                                     \
    } while (0)

static di_token_trie *g_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    static uint8_t bytes[256];
    const uint8_t *p[257];
    size_t l[257];
    for (int i = 0; i < 256; i++) bytes[i] = (uint8_t)i, p[i] = &bytes[i], l[i] = 1;
    p[256] = NULL, l[256] = 0;
    g_vocab = di_token_trie_from_bytes(p, l, 257, 256);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    di_constrain_kind kinds[3] = {DI_CONSTRAIN_REGEX, DI_CONSTRAIN_EBNF, DI_CONSTRAIN_JSON_SCHEMA};
    di_constrain_kind kind = kinds[data[0] % 3];
    const char *src = (const char *)data + 1;
    size_t n = size - 1;
    const uint8_t *nul = memchr(src, 0, n);
    size_t src_len = nul ? (size_t)((const char *)nul - src) : n;
    const uint8_t *drive = nul ? nul + 1 : NULL;
    size_t n_drive = nul ? size - 1 - src_len - 1 : 0;
    di_constrain_opts o;
    di_constrain_opts_init(&o);
    o.json_ws_flexible = data[0] & 4;
    di_grammar *g = NULL;
    di_err err = {0};
    di_status st = di_constrain_compile(kind, src, src_len, &o, &g, &err);
    if (st) {
        REQUIRE(g == NULL && err.msg[0]);
        REQUIRE((st == DI_EUNSUPPORTED) == !strncmp(err.msg, "unsupported: ", 13));
        return 0;
    }
    di_matcher *m = di_matcher_new(g, g_vocab);
    uint32_t mask[9], again[9];
    for (size_t i = 0; i <= n_drive && i < 64; i++) {
        di_matcher_fill_mask(m, mask);
        for (int b = 0; b <= 256; b++) {
            bool in = (mask[b / 32] >> (b % 32)) & 1;
            bool ok = di_matcher_accept_token(m, b);
            REQUIRE(in == ok);
            if (ok) {
                REQUIRE(di_matcher_rollback(m, 1) == 1);
                di_matcher_fill_mask(m, again);
                REQUIRE(!memcmp(mask, again, sizeof mask));
            }
        }
        REQUIRE(((mask[8] & 1) != 0) == di_matcher_can_end(m));
        if (i == n_drive) break;
        /* follow the driving byte, or the first allowed one after it */
        int pick = -1;
        for (int k = 0; k < 256 && pick < 0; k++) {
            int b = (drive[i] + k) & 255;
            if ((mask[b / 32] >> (b % 32)) & 1) pick = b;
        }
        if (pick < 0) break;
        REQUIRE(di_matcher_accept_token(m, pick));
    }
    di_matcher_free(m);
    di_grammar_free(g);
    return 0;
}
