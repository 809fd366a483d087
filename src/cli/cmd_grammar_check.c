/* `deepinfer grammar-check --json-schema FILE | --regex FILE | --ebnf FILE --tokenizer FILE`
 *
 * Compiles the constraint, then reads candidates on stdin, one JSON-encoded string per line, and
 * prints `ok` followed by one `accept` / `reject` line per candidate. If the constraint cannot be
 * compiled it prints a single line `unsupported: <feature>` or `error: <message>` (exit status 1).
 *
 * Each candidate goes through the same path as generation: it is tokenised (no special tokens), fed
 * to a token-level matcher token by token, and must then allow EOS. A candidate that is not a JSON
 * string, or not valid UTF-8, is rejected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "constrain/constrain.h"
#include "tokenizer/tokenizer.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 14, n = 0;
    char *b = di_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) b = di_xrealloc(b, cap *= 2);
        size_t got = fread(b + n, 1, cap - n - 1, f);
        if (!got) break;
        n += got;
    }
    fclose(f);
    b[n] = 0;
    *len = n;
    return b;
}

static int hexv(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes a JSON string literal (the whole line, surrounding whitespace allowed) into UTF-8 bytes
 * in out (NUL bytes kept). Returns false if the line is not exactly one JSON string or holds a lone
 * surrogate. */
static bool decode_json_string(const char *s, size_t n, char **out, size_t *out_len) {
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
    if (i >= n || s[i] != '"') return false;
    i++;
    char *b = di_xmalloc(n * 4 + 4);
    size_t k = 0;
    bool ok = false;
    while (i < n) {
        unsigned char c = (unsigned char)s[i++];
        if (c == '"') { ok = true; break; }
        if (c < 0x20) break;
        if (c != '\\') { b[k++] = (char)c; continue; }
        if (i >= n) break;
        char e = s[i++];
        uint32_t cp = 0;
        switch (e) {
        case '"': b[k++] = '"'; continue;
        case '\\': b[k++] = '\\'; continue;
        case '/': b[k++] = '/'; continue;
        case 'b': b[k++] = '\b'; continue;
        case 'f': b[k++] = '\f'; continue;
        case 'n': b[k++] = '\n'; continue;
        case 'r': b[k++] = '\r'; continue;
        case 't': b[k++] = '\t'; continue;
        case 'u': break;
        default: goto done;
        }
        for (int d = 0; d < 4; d++) {
            if (i >= n || hexv(s[i]) < 0) goto done;
            cp = cp * 16 + (uint32_t)hexv(s[i++]);
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            if (i + 6 > n || s[i] != '\\' || s[i + 1] != 'u') goto done;
            i += 2;
            for (int d = 0; d < 4; d++) {
                if (hexv(s[i]) < 0) goto done;
                lo = lo * 16 + (uint32_t)hexv(s[i++]);
            }
            if (lo < 0xDC00 || lo > 0xDFFF) goto done;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            goto done;
        }
        k += (size_t)g_utf8_encode(cp, b + k);
    }
done:
    if (ok) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
        ok = i == n;
    }
    if (!ok) {
        free(b);
        return false;
    }
    *out = b;
    *out_len = k;
    return true;
}

/* Tokenise, then feed the matcher token by token, then EOS. */
static bool check_candidate(di_tokenizer *tok, di_grammar *g, const di_token_trie *v, const char *text,
                            size_t len) {
    size_t bad;
    if (!di_utf8_valid(text, len, &bad)) return false;
    di_token_vec ids = {0};
    di_err err = {0};
    if (di_tokenizer_encode(tok, text, len, false, &ids, &err)) return false;
    di_matcher *m = di_matcher_new(g, v);
    bool ok = true;
    for (size_t i = 0; i < ids.n && ok; i++) ok = di_matcher_accept_token(m, ids.ids[i]);
    if (ok) ok = di_matcher_accept_token(m, di_token_trie_eos(v));
    di_matcher_free(m);
    di_token_vec_free(&ids);
    return ok;
}

int di_cmd_grammar_check(di_settings *s, int argc, char **argv) {
    int n_pos = 0;
    if (!di_cli_parse(s, argc, argv, &n_pos)) return 2;
    const char *path = NULL;
    di_constrain_kind kind = DI_CONSTRAIN_REGEX;
    int n_given = 0;
    if (s->json_schema && s->json_schema[0]) path = s->json_schema, kind = DI_CONSTRAIN_JSON_SCHEMA, n_given++;
    if (s->regex && s->regex[0]) path = s->regex, kind = DI_CONSTRAIN_REGEX, n_given++;
    if (s->ebnf && s->ebnf[0]) path = s->ebnf, kind = DI_CONSTRAIN_EBNF, n_given++;
    if (n_given != 1 || n_pos) {
        fprintf(stderr, "usage: deepinfer grammar-check (--json-schema FILE | --regex FILE | --ebnf FILE) "
                        "--tokenizer FILE < candidates\n");
        return 2;
    }
    if (!s->tokenizer || !s->tokenizer[0]) {
        fprintf(stderr, "deepinfer grammar-check: --tokenizer FILE is required\n");
        return 2;
    }
    di_err err = {0};
    di_tokenizer *tok = NULL;
    if (di_tokenizer_load(s->tokenizer, &tok, &err)) {
        fprintf(stderr, "deepinfer grammar-check: %s\n", err.msg);
        return 1;
    }
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        printf("error: cannot read %s\n", path);
        di_tokenizer_free(tok);
        return 1;
    }
    if (kind == DI_CONSTRAIN_REGEX && len && text[len - 1] == '\n') {
        /* a regex file's trailing newline is not part of the pattern */
        text[--len] = 0;
        if (len && text[len - 1] == '\r') text[--len] = 0;
    }
    di_constrain_opts opts;
    di_constrain_opts_init(&opts);
    opts.json_ws_flexible = !s->json_compact;
    di_grammar *g = NULL;
    di_status st = di_constrain_compile(kind, text, len, &opts, &g, &err);
    free(text);
    if (st) {
        if (!strncmp(err.msg, "unsupported: ", 13)) printf("%s\n", err.msg);
        else printf("error: %s\n", err.msg);
        di_tokenizer_free(tok);
        return 1;
    }
    int32_t eos = di_tokenizer_token_id(tok, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                        strlen("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"));
    if (eos < 0) eos = 1;
    di_token_trie *v = NULL;
    if (di_token_trie_build(tok, eos, &v, &err)) {
        printf("error: %s\n", err.msg);
        di_grammar_free(g);
        di_tokenizer_free(tok);
        return 1;
    }
    printf("ok\n");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (n == 0) continue;
        char *cand;
        size_t clen;
        bool ok = false;
        if (decode_json_string(line, (size_t)n, &cand, &clen)) {
            ok = check_candidate(tok, g, v, cand, clen);
            free(cand);
        }
        printf(ok ? "accept\n" : "reject\n");
        fflush(stdout);
    }
    free(line);
    di_token_trie_free(v);
    di_grammar_free(g);
    di_tokenizer_free(tok);
    return 0;
}
