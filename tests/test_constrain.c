/* Structured output: regex, EBNF and JSON-schema compilers, the matcher (byte and token level),
 * masks against a brute-force check over the real vocabulary, rollback, and error reporting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"
#include "constrain/token_trie.h"
#include "test_harness.h"

static di_grammar *compile(di_constrain_kind kind, const char *text, di_err *err) {
    di_grammar *g = NULL;
    di_constrain_opts o;
    di_constrain_opts_init(&o);
    if (di_constrain_compile(kind, text, strlen(text), &o, &g, err)) return NULL;
    return g;
}

/* Byte-level whole-string match through a matcher (vocabulary of single bytes). */
static di_token_trie *byte_vocab(void) {
    static uint8_t bytes[256];
    const uint8_t *p[257];
    size_t l[257];
    for (int i = 0; i < 256; i++) bytes[i] = (uint8_t)i, p[i] = &bytes[i], l[i] = 1;
    p[256] = NULL, l[256] = 0;
    return di_token_trie_from_bytes(p, l, 257, 256);
}

static bool matches(di_grammar *g, const di_token_trie *v, const char *s, size_t n) {
    di_matcher *m = di_matcher_new(g, v);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) ok = di_matcher_accept_token(m, (uint8_t)s[i]);
    if (ok) ok = di_matcher_accept_token(m, 256);
    di_matcher_free(m);
    return ok;
}

static void expect(di_constrain_kind kind, const char *src, const char *const *yes, const char *const *no) {
    di_err err = {0};
    di_grammar *g = compile(kind, src, &err);
    CHECKF(g != NULL, "compile %s: %s", src, err.msg);
    if (!g) return;
    di_token_trie *v = byte_vocab();
    for (int i = 0; yes[i]; i++) CHECKF(matches(g, v, yes[i], strlen(yes[i])), "%s should accept '%s'", src, yes[i]);
    for (int i = 0; no[i]; i++) CHECKF(!matches(g, v, no[i], strlen(no[i])), "%s should reject '%s'", src, no[i]);
    di_token_trie_free(v);
    di_grammar_free(g);
}

static void expect_error(di_constrain_kind kind, const char *src, const char *prefix) {
    di_err err = {0};
    di_grammar *g = compile(kind, src, &err);
    CHECKF(g == NULL && !strncmp(err.msg, prefix, strlen(prefix)), "%s: expected '%s...', got '%s'", src, prefix,
           g ? "(compiled)" : err.msg);
    di_grammar_free(g);
}

#define L(...) (const char *const[]){__VA_ARGS__, NULL}

static void test_regex(void) {
    expect(DI_CONSTRAIN_REGEX, "[a-z]+@[a-z]+\\.(com|org)", L("ab@cd.com", "x@y.org"), L("ab@cd.net", "@x.com", "ab@cd.comx", ""));
    expect(DI_CONSTRAIN_REGEX, "a{2,3}b?", L("aa", "aaa", "aab"), L("a", "aaaa", "b"));
    expect(DI_CONSTRAIN_REGEX, "\\d{3}-\\w+\\s?", L("123-ab_9", "000-x "), L("12-a", "123-", "123-a  "));
    expect(DI_CONSTRAIN_REGEX, "[^abc]*", L("", "xyz", "\xc3\xa9t\xc3\xa9"), L("a", "xxb"));
    expect(DI_CONSTRAIN_REGEX, "^(?:x|y)(?<n>z)*$", L("x", "yzz"), L("xy", "z"));
    expect(DI_CONSTRAIN_REGEX, "\\u00e9.\\x41", L("\xc3\xa9" "bA", "\xc3\xa9\xe2\x82\xac" "A"), L("\xc3\xa9\nA", "eA"));
    expect(DI_CONSTRAIN_REGEX, "(a|ab)(c|bcd)", L("abcd", "ac", "abc"), L("ab", "abcdd"));
    expect_error(DI_CONSTRAIN_REGEX, "(?=a)b", "unsupported: regex lookaround");
    expect_error(DI_CONSTRAIN_REGEX, "(a)\\1", "unsupported: regex backreference");
    expect_error(DI_CONSTRAIN_REGEX, "\\bword", "unsupported: regex word boundary");
    expect_error(DI_CONSTRAIN_REGEX, "(ab", "regex: missing ')'");
    expect_error(DI_CONSTRAIN_REGEX, "a{3,1}", "regex: quantifier");
    expect_error(DI_CONSTRAIN_REGEX, "[z-a]", "regex: range out of order");
}

static void test_ebnf(void) {
    const char *g1 = "root ::= \"{\" pair (\",\" pair)* \"}\"   # an object\n"
                     "pair ::= key \":\" value\n"
                     "key ::= [a-z]+\n"
                     "value ::= [0-9]{1,3} | \"null\" | root\n";
    expect(DI_CONSTRAIN_EBNF, g1, L("{a:1}", "{a:1,bb:null}", "{a:{b:22}}"), L("{}", "{a:1234}", "{a:1,}", "{A:1}"));
    expect(DI_CONSTRAIN_EBNF, "root ::= [^\\n]* \"\\n\"", L("abc\n", "\n"), L("a\nb\n", "abc"));
    expect(DI_CONSTRAIN_EBNF, "root ::= ( \"a\" | \"b\" )? \"c\"+", L("c", "acc", "bc"), L("abc", ""));
    expect_error(DI_CONSTRAIN_EBNF, "root ::= x\n", "undefined rule 'x'");
    expect_error(DI_CONSTRAIN_EBNF, "root ::= root \"a\" | \"b\"\n", "unsupported: left recursion");
    expect_error(DI_CONSTRAIN_EBNF, "start ::= \"a\"\n", "ebnf: no rule 'root'");
    expect_error(DI_CONSTRAIN_EBNF, "root ::= \"a\n", "ebnf: unterminated string literal");
}

static void test_json_schema(void) {
    expect(DI_CONSTRAIN_JSON_SCHEMA,
           "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":3},"
           "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120}},\"required\":[\"name\"],"
           "\"additionalProperties\":false}",
           L("{\"name\":\"bob\"}", "{\"name\": \"b\\n\", \"age\": 120}", "{ \"name\" : \"\" , \"age\" : 0 }"),
           L("{}", "{\"name\":\"bobby\"}", "{\"name\":\"b\",\"age\":121}", "{\"name\":\"b\",\"age\":-1}",
             "{\"name\":\"b\",\"x\":1}", "{\"age\":1,\"name\":\"b\"}", "{\"name\":\"b\",\"age\":1.5}"));
    /* additional members may not reuse a declared name */
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}",
           L("{}", "{\"a\":1}", "{\"b\":\"x\",\"a\":2,\"ab\":[1,{}]}"), L("{\"a\":\"x\"}", "{\"b\":1,\"a\":\"x\"}"));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"enum\":[\"red\",1,null,[1,2]]}", L("\"red\"", "1", "1.0", "null", "[1, 2]"),
           L("\"blue\"", "2", "[2,1]"));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}",
           L("[true]", "[true,false]"), L("[]", "[true,true,true]", "[1]"));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\":-2,\"exclusiveMaximum\":3}",
           L("-2", "0", "2.999", "-1.5", "2"), L("-2.5", "3", "3.0", "-3", "1e1"));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"date\"}", L("\"2024-02-29\"", "\"2023-12-31\""),
           L("\"2023-02-29\"", "\"2023-13-01\"", "\"2023-04-31\""));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^a+\\\"$\"}", L("\"aa\\\"\""), L("\"aa\"", "\"ba\\\"\""));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"b\"}", L("\"abc\"", "\"b\""), L("\"ac\""));
    expect(DI_CONSTRAIN_JSON_SCHEMA,
           "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$defs/node\"}},"
           "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
           L("{}", "{\"next\":{\"next\":{}}}"), L("{\"next\":1}", "{\"x\":{}}"));
    expect(DI_CONSTRAIN_JSON_SCHEMA,
           "{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", L("\"x\"", "5"), L("5.5", "null"));
    expect(DI_CONSTRAIN_JSON_SCHEMA,
           "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
           "{\"properties\":{\"a\":{\"minimum\":5}}}]}",
           L("{\"a\":5}", "{\"a\":7,\"b\":1}"), L("{\"a\":4}", "{}"));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^[a-c]+$\",\"minLength\":2,\"maxLength\":3}",
           L("\"ab\"", "\"cca\""), L("\"a\"", "\"abca\"", "\"ad\""));
    expect(DI_CONSTRAIN_JSON_SCHEMA,
           "{\"type\":\"object\",\"properties\":{\"x1\":{\"type\":\"string\"}},"
           "\"patternProperties\":{\"^x\":{\"maxLength\":1},\"^y\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"null\"}}",
           L("{\"x1\":\"a\"}", "{\"xz\":\"a\",\"y\":3,\"z\":null}", "{}"),
           L("{\"x1\":\"ab\"}", "{\"x1\":1}", "{\"y\":\"a\"}", "{\"z\":1}", "{\"xz\":\"ab\"}"));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"object\",\"not\":{}}", L(NULL), L("{}", "null"));
    expect(DI_CONSTRAIN_JSON_SCHEMA,
           "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{\"type\":\"integer\"}},\"additionalProperties\":false,"
           "\"dependencies\":{\"a\":[\"b\"],\"c\":{\"properties\":{\"c\":{\"minimum\":3}}}}}",
           L("{}", "{\"b\":1}", "{\"a\":1,\"b\":2}", "{\"c\":3}", "{\"a\":1,\"b\":2,\"c\":4}"),
           L("{\"a\":1}", "{\"a\":1,\"c\":5}", "{\"c\":2}", "{\"b\":1,\"c\":1}"));
    expect_error(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"object\",\"not\":{\"required\":[\"a\"]}}", "unsupported: not");
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"not\":{\"type\":[\"string\",\"number\",\"object\",\"array\"]}}",
           L("null", "true"), L("1", "1.5", "\"a\"", "{}", "[]"));
    expect_error(DI_CONSTRAIN_JSON_SCHEMA, "{\"not\":{\"type\":\"integer\"}}", "unsupported: not: {type: integer}");
    /* regression: merging two schemas that both carry allOf must keep both lists (a second
     * "allOf" key was ignored, accepting {"foo":1,"bar":2}) */
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"dependencies\":{\"foo\":true,\"bar\":false}}", L("{\"foo\":1}", "{}", "3"),
           L("{\"foo\":1,\"bar\":2}", "{\"bar\":2}"));
    expect(DI_CONSTRAIN_JSON_SCHEMA,
           "{\"allOf\":[{\"allOf\":[{\"type\":\"integer\"}]},{\"allOf\":[{\"minimum\":3}]}]}", L("3", "4"), L("2", "3.5", "\"x\""));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"uri\"}",
           L("\"https://example.com/a/b?x=1#f\"", "\"http://a.b:8080\"", "\"urn:isbn:0451450523\"", "\"mailto:x@y.org\""),
           L("\"example.com\"", "\"http://a b\"", "\"http://a:99999\"", "\"http://x/%zz\"", "\"\""));
    expect_error(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"hostname\"}", "unsupported: format hostname");
    /* minProperties / maxProperties: additional members count once toward the minimum (two may
     * repeat a key, and a validator keeps one), every member toward the maximum */
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"object\",\"minProperties\":1}", L("{\"a\":1}", "{\"a\":1,\"b\":[]}"),
           L("{}", "{ }"));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"minProperties\":2}",
           L("{\"a\":1,\"b\":2}", "{\"a\":1,\"x\":2}", "{\"x\":0,\"b\":2}", "{\"a\":1,\"b\":2,\"c\":3}"),
           L("{\"a\":1}", "{\"x\":1,\"x\":2}", "{\"x\":1,\"y\":2}", "{}"));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"object\",\"maxProperties\":1}", L("{}", "{\"a\":1}"),
           L("{\"a\":1,\"b\":2}", "{\"a\":1,\"a\":1}"));
    expect(DI_CONSTRAIN_JSON_SCHEMA,
           "{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"minProperties\":2,\"maxProperties\":2}",
           L("{\"a\":1,\"b\":2}", "{\"b\":true,\"a\":1}", "3"), L("{\"a\":1}", "{\"a\":1,\"b\":2,\"c\":3}", "{\"b\":1}"));
    expect(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"object\",\"minProperties\":2,\"maxProperties\":1}", L(NULL), L("{}", "{\"a\":1}"));
    expect_error(DI_CONSTRAIN_JSON_SCHEMA, "{\"minProperties\":-1}", "json schema: minProperties must be a non-negative integer");
    expect_error(DI_CONSTRAIN_JSON_SCHEMA, "{\"maxProperties\":1.5}", "json schema: maxProperties must be a non-negative integer");
    expect_error(DI_CONSTRAIN_JSON_SCHEMA, "{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":2}]}",
                 "unsupported: oneOf with overlapping alternatives");
    expect_error(DI_CONSTRAIN_JSON_SCHEMA, "{\"$ref\":\"http://example.com/s.json\"}", "unsupported: $ref to another document");
    expect_error(DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":", "json schema: not valid JSON");
    expect_error(DI_CONSTRAIN_JSON_SCHEMA, "{\"$ref\":\"#/nope\"}", "json schema: $ref #/nope does not resolve");
}

/* Masks against brute force (accept + rollback) over the real 129,280-token vocabulary, at every
 * token of `prefix`; then the text is completed with `rest` and EOS must be the way out. */
static void check_masks(di_tokenizer *tok, di_token_trie *v, const char *schema, const char *prefix, const char *rest) {
    di_err err = {0};
    di_grammar *g = compile(DI_CONSTRAIN_JSON_SCHEMA, schema, &err);
    CHECKF(g != NULL, "%s", err.msg);
    if (!g) return;
    int32_t n = di_tokenizer_vocab_size(tok);
    uint32_t *mask = calloc((size_t)(n + 31) / 32, 4);
    di_matcher *m = di_matcher_new(g, v);
    di_token_vec ids = {0};
    di_tokenizer_encode(tok, prefix, strlen(prefix), false, &ids, &err);
    for (size_t step = 0; step <= ids.n; step++) {
        di_matcher_fill_mask(m, mask);
        int bad = 0, allowed = 0;
        for (int32_t id = 0; id < n; id++) {
            bool in_mask = (mask[id / 32] >> (id % 32)) & 1;
            bool ok = di_matcher_accept_token(m, id);
            if (ok) di_matcher_rollback(m, 1);
            bad += ok != in_mask;
            allowed += ok;
        }
        CHECKF(bad == 0, "step %zu: %d tokens where mask and matcher disagree", step, bad);
        CHECKF(allowed > 0, "step %zu: nothing allowed", step);
        CHECK(((mask[0] >> 1) & 1) == 0); /* EOS not allowed before the object is complete */
        if (step < ids.n) CHECK(di_matcher_accept_token(m, ids.ids[step]));
    }
    /* finish the text; then EOS is the only way on */
    CHECK(di_matcher_accept_bytes(m, (const uint8_t *)rest, strlen(rest)));
    di_matcher_fill_mask(m, mask);
    CHECK((mask[0] >> 1) & 1);
    CHECK(di_matcher_can_end(m));
    CHECK(di_matcher_accept_token(m, 1));
    CHECK(di_matcher_is_finished(m));
    CHECK(!di_matcher_accept_token(m, 1));
    /* rollback past EOS and the closing bytes */
    CHECK(di_matcher_rollback(m, 2) == 2);
    CHECK(!di_matcher_can_end(m));
    di_matcher_free(m);
    di_token_vec_free(&ids);
    free(mask);
    di_grammar_free(g);
}

/* Fast masks against the reference walk (di_matcher_fill_mask_reference) at every token of `text`
 * (which the grammar must accept), on a grammar whose positions are sets of several stacks. */
static void check_reference(di_tokenizer *tok, di_token_trie *v, di_constrain_kind kind, const char *src, const char *text) {
    di_err err = {0};
    di_grammar *g = compile(kind, src, &err);
    CHECKF(g != NULL, "%s", err.msg);
    if (!g) return;
    size_t words = ((size_t)di_tokenizer_vocab_size(tok) + 31) / 32;
    uint32_t *mask = calloc(words, 4), *ref = calloc(words, 4);
    di_matcher *m = di_matcher_new(g, v);
    di_token_vec ids = {0};
    di_tokenizer_encode(tok, text, strlen(text), false, &ids, &err);
    for (size_t step = 0; step <= ids.n; step++) {
        di_matcher_fill_mask(m, mask);
        di_matcher_fill_mask_reference(m, ref);
        CHECKF(!memcmp(mask, ref, words * 4), "%s: step %zu: mask differs from the reference", src, step);
        if (step == ids.n) break;
        bool ok = di_matcher_accept_token(m, ids.ids[step]);
        CHECKF(ok, "%s: step %zu: token %d refused", src, step, ids.ids[step]);
        if (!ok) break;
    }
    CHECK(di_matcher_can_end(m));
    di_matcher_free(m);
    di_token_vec_free(&ids);
    free(mask);
    free(ref);
    di_grammar_free(g);
}

static void test_masks_reference(di_tokenizer *tok, di_token_trie *v) {
    /* declared names next to free extra keys: inside a key every declared prefix is a stack */
    check_reference(tok, v, DI_CONSTRAIN_JSON_SCHEMA,
                    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"names\":{\"type\":\"array\","
                    "\"items\":{\"type\":\"string\"}},\"nam\":{\"type\":\"number\"}},\"additionalProperties\":{\"type\":\"integer\"}}",
                    "{\"name\": \"x y\", \"names\": [\"a\", \"bc\"], \"nam\": 1.5e3, \"namex\": 12, \"other\": -7}");
    /* anyOf of strings with different shapes: several string states alive at once */
    check_reference(tok, v, DI_CONSTRAIN_JSON_SCHEMA,
                    "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"},"
                    "{\"type\":\"string\",\"maxLength\":5},{\"type\":\"string\",\"format\":\"date\"},{\"type\":\"integer\"}]}}",
                    "[\"abcdefgh\", \"2024-01-02\", \"A b\", 42, \"zz\"]");
    /* counted strings: the plain slices up to the remaining length, and past DI_TRIE_SLICE_MAX */
    check_reference(tok, v, DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":3,\"maxLength\":60}",
                    "\"Les na\xc3\xafves \xe4\xb8\xad\xe6\x96\x87 fish \\\" and chips, 1234567890 abcdefgh\"");
    check_reference(tok, v, DI_CONSTRAIN_JSON_SCHEMA, "{\"type\":\"string\",\"maxLength\":400}",
                    "\"                                                                 long run of spaces\"");
    /* regex and EBNF with accepting loops (text may end inside them) */
    check_reference(tok, v, DI_CONSTRAIN_REGEX, "[a-z ]*(foo|bar)?[0-9]*", "hello world foo123");
    check_reference(tok, v, DI_CONSTRAIN_EBNF, "root ::= item (\",\" item)*\nitem ::= [a-z]+ | \"(\" root \")\"",
                    "ab,(cd,(ef)),gh");
}

static void test_masks_real_vocab(void) {
    di_tokenizer *tok = NULL;
    di_err err = {0};
    if (di_tokenizer_load("assets/tokenizer/tokenizer.json", &tok, &err)) {
        CHECKF(0, "tokenizer: %s", err.msg);
        return;
    }
    di_token_trie *v = NULL;
    CHECK(di_token_trie_build(tok, 1, &v, &err) == DI_OK);
    const char *s1 = "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\","
                     "\"items\":{\"enum\":[\"a\",\"b\"]}}},\"required\":[\"id\",\"tags\"],\"additionalProperties\":false}";
    check_masks(tok, v, s1, "{\"id\": 12, \"tags\": [\"a\"", "]}");
    /* strings: free, counted, patterned; the second grammar reuses the vocabulary's shared
     * context-free masks of the first where their string states have the same shape */
    const char *s2 = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"string\"},\"c\":{\"type\":\"string\",\"maxLength\":40},"
                     "\"p\":{\"type\":\"string\",\"pattern\":\"^[a-z ]+$\"}},\"required\":[\"n\",\"c\",\"p\"]}";
    check_masks(tok, v, s2, "{\"n\": \"h\\u00e9llo w\\\"orld\", \"c\": \"caf\xc3\xa9 au lait, s'il vous pla", "it\", \"p\": \"ab c\"}");
    check_masks(tok, v, s2, "{\"n\": \"abc\", \"c\": \"0123456789012345678901234567890123456", "7\", \"p\": \"x\"}");
    check_masks(tok, v, s1, "{\"id\": -3", ", \"tags\": []}");
    test_masks_reference(tok, v);
    di_token_trie_free(v);
    di_tokenizer_free(tok);
}

/* A property name that is not valid UTF-8 and ends inside a multi-byte sequence (cJSON accepts
 * it): compiling must neither read past the name (ASan found utf8_to_cps doing so) nor fail
 * obscurely. Regression for the fuzz corpus entry regress-utf8-truncated-key. */
static void test_truncated_utf8_key(void) {
    const char schema[] = "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, "
                          "\"\xf1\": {\"type\": \"string\"}, \"\xe2\x82\": {\"type\": \"string\"}}}";
    di_err err = {0};
    di_grammar *g = compile(DI_CONSTRAIN_JSON_SCHEMA, schema, &err);
    CHECKF(g != NULL || err.msg[0], "neither a grammar nor an error message");
    if (g) {
        di_token_trie *v = byte_vocab();
        CHECK(matches(g, v, "{\"a\":1}", 7));
        CHECK(!matches(g, v, "{\"a\":\"x\"}", 9));
        di_token_trie_free(v);
        di_grammar_free(g);
    }
}

/* An ambiguous grammar whose parse paths double with every "~" (item's first alternative and root
 * derive the same strings):
 * the matcher's stacks stay capped (matcher.c, MATCHER_MAX_STACKS) -- text within the cap still
 * matches, and past it the mask empties instead of the set growing without bound (3 GB in 64 bytes
 * before). Regression for the fuzz corpus entry regress-ambiguous-stacks. */
static void test_ambiguous_stacks(void) {
    const char src[] = "root ::= \"~\" item \"}\"\nitem ::= \"~\" item \"}\" | root | \"a\"\n";
    di_err err = {0};
    di_grammar *g = compile(DI_CONSTRAIN_EBNF, src, &err);
    CHECKF(g != NULL, "compile: %s", err.msg);
    if (!g) return;
    di_token_trie *v = byte_vocab();
    di_matcher *m = di_matcher_new(g, v);
    uint32_t mask[9];
    int depth = 0; /* "~" accepted in a row */
    for (; depth < 64; depth++) {
        di_matcher_fill_mask(m, mask);
        const bool in = (mask['~' / 32] >> ('~' % 32)) & 1;
        CHECK(in == di_matcher_accept_token(m, '~'));
        if (!in) break;
    }
    CHECKF(depth >= 8 && depth < 64, "'~' accepted %d times in a row (the cap should stop it past 8, before 64)",
           depth);
    di_matcher_free(m);
    CHECK(matches(g, v, "~~~a}}}", 7)); /* shallow text is unaffected */
    CHECK(!matches(g, v, "~~a}}}", 6));
    di_token_trie_free(v);
    di_grammar_free(g);
}

/* Plain-string lengths of tokens (the slices of token_trie.h). */
static void test_plain_chars(void) {
#define PL(s) di_trie_plain_chars((const uint8_t *)(s), sizeof(s) - 1)
    CHECK(PL("abc") == 3);
    CHECK(PL(" x\x7f") == 3);
    CHECK(PL("caf\xc3\xa9") == 4);
    CHECK(PL("\xe4\xb8") == 1);             /* cut short: still one code point */
    CHECK(PL("\xf0\x9f\x98\x80!") == 2);
    CHECK(PL("a\"") == -1);
    CHECK(PL("\\n") == -1);
    CHECK(PL("\n") == -1);
    CHECK(PL("\xb8\x80") == -1);            /* starts inside a code point */
    CHECK(PL("\xed\xa0\x80") == -1);        /* surrogate */
    CHECK(PL("\xe0\x80\x80") == -1);        /* overlong */
    CHECK(PL("\xf4\x90\x80\x80") == -1);    /* above U+10FFFF */
    CHECK(PL("\xc0\xaf") == -1);
#undef PL
}

int main(void) {
    test_plain_chars();
    test_regex();
    test_truncated_utf8_key();
    test_ambiguous_stacks();
    test_ebnf();
    test_json_schema();
    test_masks_real_vocab();
    return TEST_SUMMARY();
}
