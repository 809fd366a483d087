/* Shared state of the JSON-schema compiler (json_schema*.c). */
#ifndef DI_CONSTRAIN_JSON_SCHEMA_INTERNAL_H
#define DI_CONSTRAIN_JSON_SCHEMA_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdarg.h>

#include "constrain/constrain.h"

typedef struct js_ref {
    char *ref;
    int rule;
} js_ref;

typedef struct js_ctx {
    g_builder *g;
    cJSON *root;
    const di_constrain_opts *o;
    di_err *err;
    di_status st;
    int r_value, r_string;
    js_ref *refs;
    int n_refs, cap_refs;
    int depth;
    cJSON *owned; /* merged schemas kept alive until the end (an array) */
} js_ctx;

int js_fail(js_ctx *c, di_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int js_any_rule(js_ctx *c);
int js_string_rule(js_ctx *c);
int js_literal(js_ctx *c, const cJSON *v);
void js_escape_string(const char *s, g_ivec *out_bytes);

/* Resolves a local "$ref" ("#", "#/a/b", with ~0 ~1 and %XX decoding); NULL after js_fail. */
const cJSON *js_resolve_ref(js_ctx *c, const char *ref);
/* a AND b as one schema (new object owned by c->owned), or NULL after js_fail. */
const cJSON *js_merge(js_ctx *c, const cJSON *a, const cJSON *b);
/* Annotation-only keywords (ignored everywhere). */
bool js_is_annotation(const char *key);

#endif
