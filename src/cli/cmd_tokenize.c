/* `deepinfer tokenize | detokenize | render`: the tokenizer on the command line.
 *
 *   tokenize   --tokenizer FILE [--special]       UTF-8 text on stdin  -> JSON array of ids
 *              [--jsonl]                         JSON lines {"text": ...} -> one id array per line
 *   detokenize --tokenizer FILE [--skip-special]  JSON array of ids    -> text on stdout
 *              [--jsonl]                         one id array per line -> one JSON string per line
 *   render     --tokenizer FILE [--jsonl]         OpenAI-style chat JSON -> JSON array of ids
 *                                                 (--jsonl: one request per line, one array per line)
 *
 * No BOS or other tokens are added by tokenize. Errors (bad file, invalid UTF-8, malformed JSON, an
 * id out of range) go to stderr as one line naming what is wrong, with exit status 1; usage errors
 * exit 2. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "tokenizer/json_lite.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"

static char *read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *b = di_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) b = di_xrealloc(b, cap *= 2);
        size_t got = fread(b + n, 1, cap - n - 1, f);
        n += got;
        if (!got) break;
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* Parses flags and loads --tokenizer; prints the error and returns NULL on failure (*rc set). */
static di_tokenizer *open_tokenizer(di_settings *s, int argc, char **argv, int *rc) {
    int n_pos = 0;
    *rc = 2;
    if (!di_cli_parse(s, argc, argv, &n_pos)) return NULL;
    if (n_pos) {
        fprintf(stderr, "deepinfer %s: unexpected argument '%s' (input is read from stdin)\n", argv[0], argv[1]);
        return NULL;
    }
    if (!s->tokenizer || !s->tokenizer[0]) {
        fprintf(stderr, "deepinfer %s: --tokenizer FILE is required\n", argv[0]);
        return NULL;
    }
    di_tokenizer *t = NULL;
    di_err err = {0};
    if (di_tokenizer_load(s->tokenizer, &t, &err)) {
        fprintf(stderr, "deepinfer %s: %s\n", argv[0], err.msg);
        *rc = 1;
        return NULL;
    }
    return t;
}

static void print_ids(const di_token_vec *v) {
    putchar('[');
    for (size_t i = 0; i < v->n; i++) printf(i ? ", %d" : "%d", v->ids[i]);
    fputs("]\n", stdout);
}

/* --jsonl: one JSON object per line with a "text" string. */
static int tokenize_jsonl(di_tokenizer *t, bool special, char *all, size_t len) {
    di_token_vec v = {0};
    di_err err = {0};
    int line_no = 0, rc = 0;
    for (char *line = all, *end; line < all + len && !rc; line = end + 1) {
        end = memchr(line, '\n', (size_t)(all + len - line));
        if (!end) end = all + len;
        line_no++;
        if (end == line) continue;
        di_json j;
        v.n = 0;
        if (di_json_parse(line, (size_t)(end - line), &j, &err)) {
            fprintf(stderr, "deepinfer tokenize: stdin line %d: %s\n", line_no, err.msg);
            rc = 1;
            continue;
        }
        const di_json *text = di_json_get(&j, "text");
        if (!text || text->type != DI_JSON_STRING) {
            fprintf(stderr, "deepinfer tokenize: stdin line %d: not a JSON object with a \"text\" string\n", line_no);
            rc = 1;
        } else if (di_tokenizer_encode(t, text->str, text->len, special, &v, &err)) {
            fprintf(stderr, "deepinfer tokenize: stdin line %d: %s\n", line_no, err.msg);
            rc = 1;
        } else {
            print_ids(&v);
        }
        di_json_free(&j);
    }
    di_token_vec_free(&v);
    return rc;
}

int di_cmd_tokenize(di_settings *s, int argc, char **argv) {
    int rc;
    di_tokenizer *t = open_tokenizer(s, argc, argv, &rc);
    if (!t) return rc;
    size_t len;
    char *text = read_stream(stdin, &len);
    di_token_vec v = {0};
    di_err err = {0};
    rc = 0;
    if (s->jsonl) {
        rc = tokenize_jsonl(t, s->special, text, len);
    } else if (di_tokenizer_encode(t, text, len, s->special, &v, &err)) {
        fprintf(stderr, "deepinfer tokenize: stdin: %s\n", err.msg);
        rc = 1;
    } else {
        print_ids(&v);
    }
    di_token_vec_free(&v);
    free(text);
    di_tokenizer_free(t);
    return rc;
}

/* Reads a JSON array of integer ids. */
static di_status parse_ids(const char *json, size_t len, di_token_vec *v, di_err *err) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return di_errf(err, DI_EINVAL, "stdin is not a JSON array of token ids");
    }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int64_t)e->valuedouble ||
            e->valuedouble < INT32_MIN || e->valuedouble > INT32_MAX) {
            cJSON_Delete(root);
            return di_errf(err, DI_EINVAL, "element %d of the id array is not an integer id", i);
        }
        di_token_vec_push(v, (int32_t)e->valuedouble);
        i++;
    }
    cJSON_Delete(root);
    return DI_OK;
}

/* --jsonl: each line a JSON array of ids; prints each text as a JSON string line ("null" + an error
 * on stderr for a bad line). */
static int detokenize_jsonl(di_tokenizer *t, bool skip_special, char *all, size_t len) {
    int rc = 0, line_no = 0;
    di_token_vec v = {0};
    di_err err = {0};
    for (char *line = all, *end; line < all + len; line = end + 1) {
        end = memchr(line, '\n', (size_t)(all + len - line));
        if (!end) end = all + len;
        line_no++;
        if (end == line) continue;
        char *text = NULL;
        size_t text_len = 0;
        v.n = 0;
        if (parse_ids(line, (size_t)(end - line), &v, &err) ||
            di_tokenizer_decode(t, v.ids, v.n, skip_special, &text, &text_len, &err)) {
            fprintf(stderr, "deepinfer detokenize: stdin line %d: %s\n", line_no, err.msg);
            puts("null");
            rc = 1;
        } else {
            di_sbuf b = {0};
            di_json_write_string(text, text_len, &b);
            fwrite(b.s, 1, b.len, stdout);
            putchar('\n');
            di_sbuf_free(&b);
        }
        free(text);
    }
    di_token_vec_free(&v);
    return rc;
}

int di_cmd_detokenize(di_settings *s, int argc, char **argv) {
    int rc;
    di_tokenizer *t = open_tokenizer(s, argc, argv, &rc);
    if (!t) return rc;
    size_t len;
    char *json = read_stream(stdin, &len);
    di_token_vec v = {0};
    di_err err = {0};
    char *text = NULL;
    size_t text_len = 0;
    rc = 0;
    if (s->jsonl) {
        rc = detokenize_jsonl(t, s->skip_special, json, len);
    } else if (parse_ids(json, len, &v, &err) ||
               di_tokenizer_decode(t, v.ids, v.n, s->skip_special, &text, &text_len, &err)) {
        fprintf(stderr, "deepinfer detokenize: %s\n", err.msg);
        rc = 1;
    } else {
        fwrite(text, 1, text_len, stdout);
    }
    free(text);
    di_token_vec_free(&v);
    free(json);
    di_tokenizer_free(t);
    return rc;
}

int di_cmd_render(di_settings *s, int argc, char **argv) {
    int rc;
    di_tokenizer *t = open_tokenizer(s, argc, argv, &rc);
    if (!t) return rc;
    size_t len;
    char *json = read_stream(stdin, &len);
    di_token_vec v = {0};
    di_err err = {0};
    rc = 0;
    int line_no = 0;
    for (char *line = json, *end; line < json + len || (!s->jsonl && line == json); line = end + 1) {
        end = s->jsonl ? memchr(line, '\n', (size_t)(json + len - line)) : NULL;
        if (!end) end = json + len;
        line_no++;
        if (s->jsonl && end == line) continue;
        v.n = 0;
        if (di_prompt_render_request(t, line, (size_t)(end - line), &v, &err)) {
            if (s->jsonl) fprintf(stderr, "deepinfer render: stdin line %d: %s\n", line_no, err.msg);
            else fprintf(stderr, "deepinfer render: %s\n", err.msg);
            rc = 1;
            if (s->jsonl) puts("null");
        } else {
            print_ids(&v);
        }
        if (!s->jsonl) break;
    }
    di_token_vec_free(&v);
    free(json);
    di_tokenizer_free(t);
    return rc;
}
