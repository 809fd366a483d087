/* A small JSON reader for chat requests, and Python-style JSON writing for prompts.
 *
 * Why not cJSON here: the prompt must print numbers the way DeepSeek's encoder does (serde_json
 * values written in Python `json.dumps` style: `1.0` stays a float, `1` an integer, floats in
 * Python repr), which needs each number's original lexeme, and message text may contain U+0000,
 * which cJSON's NUL-terminated strings cut. This reader keeps lexemes and string lengths. */
#ifndef DI_TOKENIZER_JSON_LITE_H
#define DI_TOKENIZER_JSON_LITE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

typedef enum di_json_type {
    DI_JSON_NULL,
    DI_JSON_FALSE,
    DI_JSON_TRUE,
    DI_JSON_NUMBER,
    DI_JSON_STRING,
    DI_JSON_ARRAY,
    DI_JSON_OBJECT,
} di_json_type;

typedef struct di_json {
    di_json_type type;
    char *str;   /* STRING: decoded UTF-8 (NUL-terminated, may contain NULs); NUMBER: the lexeme */
    size_t len;
    struct di_json *items; /* ARRAY / OBJECT members, in document order */
    size_t n;
    char *key;   /* member name when inside an object */
    size_t key_len;
} di_json;

/* A growable string. */
typedef struct di_sbuf {
    char *s;
    size_t len, cap;
} di_sbuf;

void di_sbuf_put(di_sbuf *b, const char *s, size_t n);
void di_sbuf_puts(di_sbuf *b, const char *s);
void di_sbuf_free(di_sbuf *b);

/* Parses a whole JSON document (leading/trailing white space allowed). Errors name the offset. */
di_status di_json_parse(const char *text, size_t len, di_json *out, di_err *err);
void di_json_free(di_json *v);
/* Object member by name; with duplicate names the last one wins (as serde_json). NULL if absent
 * or if obj is not an object. */
const di_json *di_json_get(const di_json *obj, const char *key);
/* Writes v as JSON with ", " and ": " separators, non-ASCII unescaped, object members in document
 * order (a duplicate name keeps its first position and its last value), integers as written and
 * floats in Python repr (1.0, 1e-05, 1e+16). */
void di_json_write_py(const di_json *v, di_sbuf *out);
/* Writes a JSON string literal (quotes included) with serde_json escaping. */
void di_json_write_string(const char *s, size_t len, di_sbuf *out);

#endif
