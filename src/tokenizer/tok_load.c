/* Loading a Hugging Face tokenizer.json into a di_tokenizer.
 *
 * The file is parsed with cJSON (the 7.8 MB V3 file parses in well under the 200 ms budget), then
 * every section is checked against what this implementation supports: a construct we would get
 * wrong is refused with DI_EUNSUPPORTED naming it, malformed content with DI_EFORMAT naming the
 * field and entry. After parsing we build the derived tables: per-id token strings and decoded
 * bytes, the merge map keyed by the two input ids, the byte-level alphabet, and the added-token
 * tries. The JSON tree is freed before returning; the tokenizer owns flat arrays only. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "base/file.h"

#define DI_TOK_MAX_FILE_BYTES (512u << 20)
#define DI_TOK_MAX_IDS (1 << 24)

/* GPT-2's byte <-> printable-char table: bytes that are printable Latin-1 map to themselves, the
 * rest to U+0100 + n in byte order. */
static void build_byte_alphabet(di_tokenizer *t, int16_t cp_to_byte[324]) {
    int n = 0;
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        int cp = printable ? b : 256 + n++;
        cp_to_byte[cp] = (int16_t)b;
        if (cp < 0x80) {
            t->byte_char[b][0] = (char)cp;
            t->byte_char_len[b] = 1;
        } else {
            t->byte_char[b][0] = (char)(0xC0 | (cp >> 6));
            t->byte_char[b][1] = (char)(0x80 | (cp & 0x3F));
            t->byte_char_len[b] = 2;
        }
    }
}

/* The arena is sized once from the JSON length (every string in it, plus its NUL, is shorter than
 * its quoted JSON spelling; decoded bytes are never longer than the string), so it never moves and
 * the hash maps can keep pointers into it. */
static uint32_t arena_add(di_tokenizer *t, const void *p, size_t n) {
    if (t->arena_len + n + 1 > t->arena_cap) di_die("tokenizer arena overflow (bug)");
    uint32_t off = (uint32_t)t->arena_len;
    if (n) memcpy(t->arena + off, p, n);
    t->arena[off + n] = 0;
    t->arena_len += n + 1;
    return off;
}

static const char *tok_str(const di_tokenizer *t, int32_t id) { return t->arena + t->str_off[id]; }

/* Reads an optional boolean field; absent or null gives `dflt`. */
static di_status get_bool(const cJSON *obj, const char *key, bool dflt, bool *out, const char *where,
                          di_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return DI_OK;
    }
    if (!cJSON_IsBool(v)) return di_errf(err, DI_EFORMAT, "%s.%s is not a boolean", where, key);
    *out = cJSON_IsTrue(v);
    return DI_OK;
}

static bool is_empty_str_or_null(const cJSON *v) {
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && !v->valuestring[0]);
}

static di_status check_model_options(const cJSON *model, di_err *err) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "BPE")))
        return di_errf(err, DI_EUNSUPPORTED, "model.type is not \"BPE\"");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return di_errf(err, DI_EUNSUPPORTED, "model.dropout is set (BPE dropout is not supported)");
    static const char *const empty_keys[] = {"unk_token", "continuing_subword_prefix",
                                             "end_of_word_suffix"};
    for (size_t i = 0; i < 3; i++)
        if (!is_empty_str_or_null(cJSON_GetObjectItemCaseSensitive(model, empty_keys[i])))
            return di_errf(err, DI_EUNSUPPORTED, "model.%s is set (not supported)", empty_keys[i]);
    bool flag;
    if (get_bool(model, "byte_fallback", false, &flag, "model", err)) return err->status;
    if (flag) return di_errf(err, DI_EUNSUPPORTED, "model.byte_fallback is true (not supported)");
    if (get_bool(model, "ignore_merges", false, &flag, "model", err)) return err->status;
    if (flag) return di_errf(err, DI_EUNSUPPORTED, "model.ignore_merges is true (not supported)");
    return DI_OK;
}

/* First pass over model.vocab: the largest id, so the id arrays can be sized. */
static di_status scan_vocab(const cJSON *vocab, int32_t *max_id, di_err *err) {
    if (!cJSON_IsObject(vocab)) return di_errf(err, DI_EFORMAT, "model.vocab is missing or not an object");
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= DI_TOK_MAX_IDS ||
            e->valuedouble != (double)(int32_t)e->valuedouble)
            return di_errf(err, DI_EFORMAT, "model.vocab[\"%s\"] is not an id in [0, %d)", e->string,
                           DI_TOK_MAX_IDS);
        if ((int32_t)e->valuedouble > *max_id) *max_id = (int32_t)e->valuedouble;
    }
    return DI_OK;
}

static di_status scan_added(const cJSON *added, int32_t *max_id, di_err *err) {
    if (!added || cJSON_IsNull(added)) return DI_OK;
    if (!cJSON_IsArray(added)) return di_errf(err, DI_EFORMAT, "added_tokens is not an array");
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= DI_TOK_MAX_IDS ||
            id->valuedouble != (double)(int32_t)id->valuedouble)
            return di_errf(err, DI_EFORMAT, "added_tokens[%d].id is missing or not an id", i);
        if ((int32_t)id->valuedouble > *max_id) *max_id = (int32_t)id->valuedouble;
        i++;
    }
    return DI_OK;
}

static di_status set_token(di_tokenizer *t, int32_t id, const char *s, uint8_t flags, const char *where,
                           di_err *err) {
    size_t len = strlen(s), bad;
    if (!len) return di_errf(err, DI_EFORMAT, "%s: empty token string", where);
    if (!di_utf8_valid(s, len, &bad))
        return di_errf(err, DI_EFORMAT, "%s: token string is not valid UTF-8 (byte %zu)", where, bad);
    t->str_off[id] = arena_add(t, s, len);
    t->str_len[id] = (uint32_t)len;
    t->flags[id] = flags;
    return DI_OK;
}

static di_status load_vocab(di_tokenizer *t, const cJSON *vocab, di_err *err) {
    size_t n = (size_t)cJSON_GetArraySize(vocab);
    di_smap_init(&t->vocab, n, t->arena, t->str_off, t->str_len);
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = (int32_t)e->valuedouble;
        if (t->flags[id])
            return di_errf(err, DI_EFORMAT, "model.vocab[\"%.60s\"]: id %d is used twice", e->string, id);
        if (set_token(t, id, e->string, DI_TOKF_USED, "model.vocab", err)) /* where: named on error only */
            return di_err_prefix(err, "model.vocab[\"%.60s\"]", e->string);
        if (!di_smap_put(&t->vocab, id))
            return di_errf(err, DI_EFORMAT, "model.vocab[\"%.60s\"]: duplicate token", e->string);
    }
    t->n_base = (int32_t)n;
    return DI_OK;
}

/* One merge: "left right" (older files) or ["left", "right"] (newer ones). */
static di_status merge_parts(const cJSON *m, int i, const char **l, size_t *ll, const char **r,
                             size_t *rl, di_err *err) {
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return di_errf(err, DI_EFORMAT, "model.merges[%d] \"%.80s\" is not two tokens split by one space", i, s);
        *l = s, *ll = (size_t)(sp - s), *r = sp + 1, *rl = strlen(sp + 1);
        return DI_OK;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
        cJSON_IsString(m->child->next)) {
        *l = m->child->valuestring, *ll = strlen(*l);
        *r = m->child->next->valuestring, *rl = strlen(*r);
        return DI_OK;
    }
    return di_errf(err, DI_EFORMAT, "model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", i);
}

static di_status load_merges(di_tokenizer *t, const cJSON *merges, di_err *err) {
    if (!cJSON_IsArray(merges)) return di_errf(err, DI_EFORMAT, "model.merges is missing or not an array");
    di_pmap_init(&t->merges, (size_t)cJSON_GetArraySize(merges));
    char *joined = NULL;
    size_t joined_cap = 0;
    int rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *l = NULL, *r = NULL;
        size_t ll = 0, rl = 0;
        if (merge_parts(m, rank, &l, &ll, &r, &rl, err)) break;
        int32_t a = di_smap_get(&t->vocab, l, ll), b = di_smap_get(&t->vocab, r, rl);
        if (a < 0 || b < 0) {
            di_errf(err, DI_EFORMAT, "model.merges[%d]: \"%.*s\" is not in model.vocab", rank,
                    (int)(a < 0 ? ll : rl), a < 0 ? l : r);
            break;
        }
        if (ll + rl > joined_cap) {
            joined_cap = (ll + rl) * 2;
            joined = di_xrealloc(joined, joined_cap);
        }
        memcpy(joined, l, ll);
        memcpy(joined + ll, r, rl);
        int32_t c = di_smap_get(&t->vocab, joined, ll + rl);
        if (c < 0) {
            di_errf(err, DI_EFORMAT, "model.merges[%d]: the merged token \"%.*s\" is not in model.vocab",
                    rank, (int)(ll + rl), joined);
            break;
        }
        di_pmap_put(&t->merges, a, b, rank, c); /* a repeated pair keeps its first (lowest) rank */
        rank++;
    }
    free(joined);
    return err->status;
}

static di_status load_added(di_tokenizer *t, const cJSON *added, di_err *err) {
    di_smap_init(&t->added, 64, t->arena, t->str_off, t->str_len);
    di_trie_init(&t->trie_raw);
    di_trie_init(&t->trie_norm);
    if (!added || cJSON_IsNull(added)) return DI_OK;
    int i = 0;
    const cJSON *e;
    char where[64];
    cJSON_ArrayForEach(e, added) {
        snprintf(where, sizeof where, "added_tokens[%d]", i++);
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsString(content)) return di_errf(err, DI_EFORMAT, "%s.content is not a string", where);
        bool special, normalized, lstrip, rstrip, single_word;
        if (get_bool(e, "special", false, &special, where, err) ||
            get_bool(e, "normalized", !special, &normalized, where, err) ||
            get_bool(e, "lstrip", false, &lstrip, where, err) ||
            get_bool(e, "rstrip", false, &rstrip, where, err) ||
            get_bool(e, "single_word", false, &single_word, where, err))
            return err->status;
        uint8_t f = DI_TOKF_USED | DI_TOKF_ADDED | (special ? DI_TOKF_SPECIAL : 0) |
                    (normalized ? DI_TOKF_NORMALIZED : 0) | (lstrip ? DI_TOKF_LSTRIP : 0) |
                    (rstrip ? DI_TOKF_RSTRIP : 0) | (single_word ? DI_TOKF_SINGLE_WORD : 0);
        if ((t->flags[id] & DI_TOKF_ADDED))
            return di_errf(err, DI_EFORMAT, "%s: id %d is used by two added tokens", where, id);
        if (t->flags[id] && strcmp(tok_str(t, id), content->valuestring))
            return di_errf(err, DI_EFORMAT, "%s: id %d is \"%.60s\" in model.vocab but \"%.60s\" here",
                           where, id, tok_str(t, id), content->valuestring);
        if (set_token(t, id, content->valuestring, f, where, err)) return err->status;
        if (!di_smap_put(&t->added, id))
            return di_errf(err, DI_EFORMAT, "%s: content \"%.60s\" appears twice", where, tok_str(t, id));
        di_trie_add(normalized ? &t->trie_norm : &t->trie_raw, (const uint8_t *)tok_str(t, id),
                    t->str_len[id], id);
    }
    return DI_OK;
}

static bool type_is(const cJSON *obj, const char *type) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(v) && !strcmp(v->valuestring, type);
}

static const char *type_of(const cJSON *obj) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(v) ? v->valuestring : "(none)";
}

static di_status check_normalizer(const cJSON *norm, di_err *err) {
    if (!norm || cJSON_IsNull(norm)) return DI_OK;
    if (type_is(norm, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
        if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 0) return DI_OK;
    }
    return di_errf(err, DI_EUNSUPPORTED, "normalizer \"%s\" is not supported (only none or an empty Sequence)",
                   type_of(norm));
}

static di_status check_byte_level(const cJSON *bl, const char *where, di_err *err) {
    bool prefix, use_regex;
    if (get_bool(bl, "add_prefix_space", false, &prefix, where, err) ||
        get_bool(bl, "use_regex", true, &use_regex, where, err))
        return err->status;
    if (prefix) return di_errf(err, DI_EUNSUPPORTED, "%s.add_prefix_space is true (not supported)", where);
    if (use_regex) return di_errf(err, DI_EUNSUPPORTED, "%s.use_regex is true (not supported)", where);
    return DI_OK;
}

static di_status load_split(di_tokenizer *t, const cJSON *sp, const char *where, di_err *err) {
    const cJSON *behavior = cJSON_GetObjectItemCaseSensitive(sp, "behavior");
    if (!cJSON_IsString(behavior) || strcmp(behavior->valuestring, "Isolated"))
        return di_errf(err, DI_EUNSUPPORTED, "%s.behavior is not \"Isolated\"", where);
    bool invert;
    if (get_bool(sp, "invert", false, &invert, where, err)) return err->status;
    if (invert) return di_errf(err, DI_EUNSUPPORTED, "%s.invert is true (not supported)", where);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sp, "pattern");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    if (!cJSON_IsString(re))
        return di_errf(err, DI_EUNSUPPORTED, "%s.pattern is not {\"Regex\": ...}", where);
    if (t->n_splits == DI_TOK_MAX_SPLITS)
        return di_errf(err, DI_EUNSUPPORTED, "pre_tokenizer: more than %d Split steps", DI_TOK_MAX_SPLITS);
    if (di_tok_compile_split(t, re->valuestring, strlen(re->valuestring), err))
        return di_err_prefix(err, "%s.pattern", where);
    return DI_OK;
}

/* The pre-tokenizer: Split steps in order, then one ByteLevel(use_regex=false) at the end. */
static di_status load_pretok(di_tokenizer *t, const cJSON *pre, di_err *err) {
    if (!pre || cJSON_IsNull(pre)) return di_errf(err, DI_EUNSUPPORTED, "pre_tokenizer is missing");
    const cJSON *steps = pre, *one = NULL;
    if (type_is(pre, "Sequence")) {
        steps = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
        if (!cJSON_IsArray(steps)) return di_errf(err, DI_EFORMAT, "pre_tokenizer.pretokenizers is not an array");
    } else {
        one = pre;
    }
    int i = 0, n = one ? 1 : cJSON_GetArraySize(steps);
    bool saw_byte_level = false;
    char where[64];
    for (const cJSON *s = one ? one : steps->child; s && i < n; s = s->next, i++) {
        snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%d]", i);
        if (saw_byte_level) return di_errf(err, DI_EUNSUPPORTED, "%s: a step after ByteLevel", where);
        if (type_is(s, "Split")) {
            if (load_split(t, s, where, err)) return err->status;
        } else if (type_is(s, "ByteLevel")) {
            if (check_byte_level(s, where, err)) return err->status;
            saw_byte_level = true;
        } else {
            return di_errf(err, DI_EUNSUPPORTED, "%s: pre-tokenizer \"%s\" is not supported", where, type_of(s));
        }
    }
    if (!saw_byte_level) return di_errf(err, DI_EUNSUPPORTED, "pre_tokenizer has no ByteLevel step");
    return DI_OK;
}

/* Decoded bytes of every id: the byte-level chars mapped back to bytes, or, if the token has a char
 * outside that alphabet (e.g. "<｜User｜>"), its UTF-8 as is, like HF's ByteLevel decoder. */
static void build_decoded(di_tokenizer *t, const int16_t cp_to_byte[324]) {
    uint8_t *buf = di_xmalloc(1024);
    size_t buf_cap = 1024;
    for (int32_t id = 0; id < t->n_ids; id++) {
        if (!t->flags[id]) continue;
        const uint8_t *s = (const uint8_t *)tok_str(t, id);
        size_t len = t->str_len[id], n = 0;
        if (len > buf_cap) buf = di_xrealloc(buf, buf_cap = len);
        bool mapped = true;
        for (size_t i = 0; i < len && mapped;) {
            uint32_t cp;
            if (s[i] < 0x80) cp = s[i++];
            else if ((s[i] & 0xE0) == 0xC0) cp = ((s[i] & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu), i += 2;
            else cp = 0xFFFFFFFF, i++;
            if (cp >= 324 || cp_to_byte[cp] < 0) mapped = false;
            else buf[n++] = (uint8_t)cp_to_byte[cp];
        }
        if (!mapped) {
            memcpy(buf, s, len);
            n = len;
        }
        t->dec_off[id] = arena_add(t, buf, n);
        t->dec_len[id] = (uint32_t)n;
    }
    free(buf);
}

static di_status load_tree(di_tokenizer *t, const cJSON *root, di_err *err) {
    if (!cJSON_IsObject(root)) return di_errf(err, DI_EFORMAT, "the top level is not a JSON object");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return di_errf(err, DI_EFORMAT, "\"model\" is missing or not an object");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *decoder = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (check_model_options(model, err) ||
        check_normalizer(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err))
        return err->status;
    if (!decoder || !type_is(decoder, "ByteLevel"))
        return di_errf(err, DI_EUNSUPPORTED, "decoder \"%s\" is not supported (only ByteLevel)",
                       decoder ? type_of(decoder) : "(none)");
    int32_t max_id = -1;
    if (scan_vocab(vocab, &max_id, err) || scan_added(added, &max_id, err)) return err->status;
    if (max_id < 0) return di_errf(err, DI_EFORMAT, "model.vocab is empty");
    t->n_ids = max_id + 1;
    t->str_off = di_xcalloc((size_t)t->n_ids, sizeof *t->str_off);
    t->str_len = di_xcalloc((size_t)t->n_ids, sizeof *t->str_len);
    t->dec_off = di_xcalloc((size_t)t->n_ids, sizeof *t->dec_off);
    t->dec_len = di_xcalloc((size_t)t->n_ids, sizeof *t->dec_len);
    t->flags = di_xcalloc((size_t)t->n_ids, 1);
    if (load_vocab(t, vocab, err) ||
        load_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), err) ||
        load_added(t, added, err) ||
        load_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), err))
        return err->status;
    int16_t cp_to_byte[324];
    build_byte_alphabet(t, cp_to_byte);
    build_decoded(t, cp_to_byte);
    for (int b = 0; b < 256; b++) t->byte_id[b] = di_smap_get(&t->vocab, t->byte_char[b], t->byte_char_len[b]);
    return DI_OK;
}

di_status di_tokenizer_load_json(const char *json, size_t len, const char *name, di_tokenizer **out,
                                 di_err *err) {
    *out = NULL;
    di_err_clear(err);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root) {
        size_t off = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        return di_errf(err, DI_EFORMAT, "%s: not valid JSON (parse error near byte %zu)", name, off);
    }
    di_tokenizer *t = di_xcalloc(1, sizeof *t);
    t->name = di_xstrdup(name);
    t->arena_cap = 2 * len + 64;
    t->arena = di_xmalloc(t->arena_cap);
    di_bpe_cache_init(&t->cache);
    di_err local = {0};
    if (!err) err = &local;
    di_status st = load_tree(t, root, err);
    cJSON_Delete(root);
    if (st) {
        di_err_prefix(err, "%s", name);
        di_tokenizer_free(t);
        return st;
    }
    *out = t;
    return DI_OK;
}

di_status di_tokenizer_load(const char *path, di_tokenizer **out, di_err *err) {
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    di_status st = di_read_file(path, DI_TOK_MAX_FILE_BYTES, "tokenizer file", &buf, &len, err);
    if (!st) st = di_tokenizer_load_json(buf, len, path, out, err);
    free(buf);
    return st;
}

void di_tokenizer_free(di_tokenizer *t) {
    if (!t) return;
    free(t->name);
    free(t->arena);
    free(t->str_off);
    free(t->str_len);
    free(t->dec_off);
    free(t->dec_len);
    free(t->flags);
    di_smap_free(&t->vocab);
    di_smap_free(&t->added);
    di_pmap_free(&t->merges);
    for (int i = 0; i < t->n_splits; i++) pcre2_code_free(t->split_re[i]);
    di_trie_free(&t->trie_raw);
    di_trie_free(&t->trie_norm);
    di_bpe_cache_free(&t->cache);
    free(t);
}

int32_t di_tokenizer_vocab_size(const di_tokenizer *t) { return t->n_ids; }

int32_t di_tokenizer_token_id(const di_tokenizer *t, const char *token, size_t len) {
    int32_t id = di_smap_get(&t->added, token, len);
    return id >= 0 ? id : di_smap_get(&t->vocab, token, len);
}

const char *di_tokenizer_id_to_token(const di_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_ids || !t->flags[id]) return NULL;
    if (len) *len = t->str_len[id];
    return t->arena + t->str_off[id];
}

const uint8_t *di_tokenizer_id_bytes(const di_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_ids || !t->flags[id]) return NULL;
    if (len) *len = t->dec_len[id];
    return (const uint8_t *)t->arena + t->dec_off[id];
}

bool di_tokenizer_is_added(const di_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && (t->flags[id] & DI_TOKF_ADDED);
}

bool di_tokenizer_is_special(const di_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && (t->flags[id] & DI_TOKF_SPECIAL);
}
