/* JSON schema: local $ref resolution and the conjunction of two schemas (for allOf, $ref with
 * sibling keywords, and keywords beside anyOf/oneOf, which are distributed into each alternative).
 *
 * js_merge(a, b) returns one schema whose instances are exactly those valid under both, or fails
 * with `unsupported: allOf combining <keyword>` when it cannot say so exactly. Rules per keyword:
 * lower bounds take the max, upper bounds the min, `type` and `enum` intersect, `required` unites,
 * `properties` merge per name (a name known to one side only is merged with the other side's
 * additionalProperties), `items` / `additionalProperties` merge recursively, equal values are kept,
 * and composition keywords present on both sides are moved into an `allOf` to be merged later. */
#include "constrain/json_schema_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const cJSON *js_resolve_ref(js_ctx *c, const char *ref) {
    if (ref[0] != '#') {
        js_fail(c, DI_EUNSUPPORTED, "$ref to another document (%.200s)", ref);
        return NULL;
    }
    const cJSON *cur = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        js_fail(c, DI_EUNSUPPORTED, "$ref to an anchor (%.200s)", ref);
        return NULL;
    }
    while (*p == '/') {
        p++;
        char tokbuf[512];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tokbuf) {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            else if (ch == '%' && p[0] && p[1]) {
                int hi = p[0], lo = p[1];
                int h = hi >= '0' && hi <= '9' ? hi - '0' : (hi | 32) >= 'a' && (hi | 32) <= 'f' ? (hi | 32) - 'a' + 10 : -1;
                int l = lo >= '0' && lo <= '9' ? lo - '0' : (lo | 32) >= 'a' && (lo | 32) <= 'f' ? (lo | 32) - 'a' + 10 : -1;
                if (h >= 0 && l >= 0) ch = (char)(h * 16 + l), p += 2;
            }
            tokbuf[n++] = ch;
        }
        tokbuf[n] = 0;
        if (cJSON_IsArray(cur)) {
            char *e;
            long i = strtol(tokbuf, &e, 10);
            cur = *e || n == 0 ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tokbuf);
        } else {
            cur = NULL;
        }
        if (!cur) {
            js_fail(c, DI_EINVAL, "$ref %.200s does not resolve", ref);
            return NULL;
        }
    }
    return cur;
}

static cJSON *keep(js_ctx *c, cJSON *o) {
    cJSON_AddItemToArray(c->owned, o);
    return o;
}

static void put(cJSON *o, const char *k, const cJSON *v) { cJSON_AddItemReferenceToObject(o, k, (cJSON *)v); }

static bool in_list(const char *k, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k)) return true;
    return false;
}

/* type as a list of names; NULL = absent */
static void type_names(const cJSON *t, const char **out, int *n) {
    *n = 0;
    if (cJSON_IsString(t)) out[(*n)++] = t->valuestring;
    else if (cJSON_IsArray(t))
        for (const cJSON *e = t->child; e && *n < 8; e = e->next)
            if (cJSON_IsString(e)) out[(*n)++] = e->valuestring;
}

static cJSON *merge_type(const cJSON *a, const cJSON *b) {
    const char *x[8], *y[8];
    int nx, ny;
    type_names(a, x, &nx);
    type_names(b, y, &ny);
    cJSON *out = cJSON_CreateArray();
    for (int i = 0; i < nx; i++)
        for (int j = 0; j < ny; j++) {
            const char *r = NULL;
            if (!strcmp(x[i], y[j])) r = x[i];
            else if (!strcmp(x[i], "integer") && !strcmp(y[j], "number")) r = "integer";
            else if (!strcmp(x[i], "number") && !strcmp(y[j], "integer")) r = "integer";
            if (r) cJSON_AddItemToArray(out, cJSON_CreateString(r));
        }
    return out;
}

static const cJSON *deref_top(js_ctx *c, const cJSON *s) {
    for (int i = 0; i < 16; i++) {
        if (!cJSON_IsObject(s)) return s;
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        if (!cJSON_IsString(r)) return s;
        /* a $ref with siblings: merge the target with the siblings */
        bool siblings = false;
        for (const cJSON *k = s->child; k; k = k->next)
            if (strcmp(k->string, "$ref") && !js_is_annotation(k->string)) siblings = true;
        const cJSON *t = js_resolve_ref(c, r->valuestring);
        if (!t) return NULL;
        if (siblings) {
            cJSON *rest = keep(c, cJSON_CreateObject());
            for (const cJSON *k = s->child; k; k = k->next)
                if (strcmp(k->string, "$ref")) put(rest, k->string, k);
            return js_merge(c, t, rest);
        }
        s = t;
    }
    js_fail(c, DI_EUNSUPPORTED, "$ref chain longer than 16");
    return NULL;
}

const cJSON *js_merge(js_ctx *c, const cJSON *a, const cJSON *b) {
    if (c->st) return NULL;
    if (++c->depth > 64) {
        c->depth--;
        js_fail(c, DI_EUNSUPPORTED, "allOf merge deeper than 64 (recursive $ref under allOf)");
        return NULL;
    }
    const cJSON *res = NULL;
    a = deref_top(c, a);
    b = a ? deref_top(c, b) : NULL;
    if (!a || !b) goto out;
    if (cJSON_IsBool(a) || cJSON_IsBool(b)) {
        if (cJSON_IsFalse(a) || cJSON_IsFalse(b)) res = keep(c, cJSON_CreateFalse());
        else res = cJSON_IsBool(a) ? b : a;
        goto out;
    }
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) {
        js_fail(c, DI_EINVAL, "a schema must be an object or a boolean");
        goto out;
    }
    cJSON *o = keep(c, cJSON_CreateObject());
    static const char *const maxes[] = {"minLength", "minItems", "minimum", "minProperties", NULL};
    static const char *const mins[] = {"maxLength", "maxItems", "maximum", "maxProperties", NULL};
    static const char *const compo[] = {"anyOf", "oneOf", NULL};
    cJSON *all_of = NULL;
    /* every allOf item of both sides goes into one allOf (a second "allOf" key would be ignored) */
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(pass ? b : a, "allOf");
        if (!x) continue;
        if (!cJSON_IsArray(x)) {
            js_fail(c, DI_EINVAL, "allOf must be an array");
            goto out;
        }
        if (!all_of) all_of = cJSON_AddArrayToObject(o, "allOf");
        for (const cJSON *e = x->child; e; e = e->next) cJSON_AddItemReferenceToArray(all_of, (cJSON *)e);
    }
    for (const cJSON *ka = a->child; ka; ka = ka->next) {
        const char *k = ka->string;
        const cJSON *kb = cJSON_GetObjectItemCaseSensitive(b, k);
        if (js_is_annotation(k) || !strcmp(k, "allOf")) continue;
        if (!kb) {
            if (!strcmp(k, "properties") || !strcmp(k, "additionalProperties")) continue; /* below */
            put(o, k, ka);
            continue;
        }
        if (!strcmp(k, "properties") || !strcmp(k, "additionalProperties") || !strcmp(k, "required")) continue;
        if (in_list(k, compo)) {
            if (!all_of) all_of = cJSON_AddArrayToObject(o, "allOf");
            cJSON *w = cJSON_CreateObject();
            put(w, k, kb);
            cJSON_AddItemToArray(all_of, w);
            put(o, k, ka);
            continue;
        }
        if (cJSON_Compare(ka, kb, true)) { put(o, k, ka); continue; }
        if (in_list(k, maxes) && cJSON_IsNumber(ka) && cJSON_IsNumber(kb)) {
            put(o, k, ka->valuedouble >= kb->valuedouble ? ka : kb);
            continue;
        }
        if (in_list(k, mins) && cJSON_IsNumber(ka) && cJSON_IsNumber(kb)) {
            put(o, k, ka->valuedouble <= kb->valuedouble ? ka : kb);
            continue;
        }
        if ((!strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum")) && cJSON_IsNumber(ka) && cJSON_IsNumber(kb)) {
            bool lo = !strcmp(k, "exclusiveMinimum");
            put(o, k, (ka->valuedouble >= kb->valuedouble) == lo ? ka : kb);
            continue;
        }
        if (!strcmp(k, "type")) {
            cJSON_AddItemToObject(o, "type", merge_type(ka, kb));
            continue;
        }
        if (!strcmp(k, "enum") && cJSON_IsArray(ka) && cJSON_IsArray(kb)) {
            cJSON *e = cJSON_AddArrayToObject(o, "enum");
            for (const cJSON *x = ka->child; x; x = x->next)
                for (const cJSON *y = kb->child; y; y = y->next)
                    if (cJSON_Compare(x, y, true)) {
                        cJSON_AddItemToArray(e, cJSON_Duplicate(x, true));
                        break;
                    }
            continue;
        }
        if (!strcmp(k, "const")) { /* differing consts: nothing matches */
            cJSON_AddItemToObject(o, "enum", cJSON_CreateArray());
            continue;
        }
        if (!strcmp(k, "items") && !cJSON_IsArray(ka) && !cJSON_IsArray(kb)) {
            const cJSON *m = js_merge(c, ka, kb);
            if (!m) goto out;
            put(o, k, m);
            continue;
        }
        if (!strcmp(k, "uniqueItems")) { put(o, k, cJSON_IsTrue(ka) ? ka : kb); continue; }
        if (!strcmp(k, "nullable")) { put(o, k, cJSON_IsFalse(ka) ? ka : kb); continue; }
        if (!strcmp(k, "format") || !strcmp(k, "pattern") || !strcmp(k, "$ref") ||
            !strcmp(k, "patternProperties") || !strcmp(k, "prefixItems") || !strcmp(k, "items") ||
            !strcmp(k, "additionalItems") || !strcmp(k, "dependencies") || !strcmp(k, "not") || !strcmp(k, "if") ||
            !strcmp(k, "multipleOf") || !strcmp(k, "contains") || !strcmp(k, "propertyNames") ||
            !strcmp(k, "dependentRequired") || !strcmp(k, "dependentSchemas") || !strcmp(k, "then") ||
            !strcmp(k, "else") || !strcmp(k, "unevaluatedProperties") || !strcmp(k, "unevaluatedItems") ||
            !strcmp(k, "minContains") || !strcmp(k, "maxContains") || !strcmp(k, "$dynamicRef") ||
            !strcmp(k, "$recursiveRef") || !strcmp(k, "nullable") || !strcmp(k, "exclusiveMinimum") ||
            !strcmp(k, "exclusiveMaximum")) {
            js_fail(c, DI_EUNSUPPORTED, "allOf combining two different '%s'", k);
            goto out;
        }
        /* a non-standard keyword with different values: validators ignore it */
        put(o, k, ka);
    }
    for (const cJSON *kb = b->child; kb; kb = kb->next) {
        const char *k = kb->string;
        if (js_is_annotation(k) || !strcmp(k, "allOf") || cJSON_GetObjectItemCaseSensitive(a, k)) continue;
        if (!strcmp(k, "properties") || !strcmp(k, "additionalProperties")) continue;
        put(o, k, kb);
    }
    /* required: union */
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "required"), *rb = cJSON_GetObjectItemCaseSensitive(b, "required");
    if (ra || rb) {
        cJSON *r = cJSON_AddArrayToObject(o, "required");
        for (int pass = 0; pass < 2; pass++)
            for (const cJSON *e = (pass ? rb : ra) ? (pass ? rb : ra)->child : NULL; e; e = e->next) {
                bool dup = false;
                for (const cJSON *x = r->child; x; x = x->next) dup |= cJSON_Compare(x, e, true);
                if (!dup) cJSON_AddItemToArray(r, cJSON_Duplicate(e, true));
            }
    }
    /* properties and additionalProperties */
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties"), *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
    const cJSON *aa = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    const cJSON *ppa = cJSON_GetObjectItemCaseSensitive(a, "patternProperties");
    const cJSON *ppb = cJSON_GetObjectItemCaseSensitive(b, "patternProperties");
    if ((ppa && ppa->child) || (ppb && ppb->child)) {
        if (pa || pb || aa || ab) {
            js_fail(c, DI_EUNSUPPORTED, "patternProperties");
            goto out;
        }
    }
    if (pa || pb) {
        cJSON *p = cJSON_AddObjectToObject(o, "properties");
        for (int pass = 0; pass < 2; pass++) {
            const cJSON *px = pass ? pb : pa, *py = pass ? pa : pb, *ay = pass ? aa : ab;
            for (const cJSON *e = px ? px->child : NULL; e; e = e->next) {
                if (cJSON_GetObjectItemCaseSensitive(p, e->string)) continue;
                const cJSON *other = py ? cJSON_GetObjectItemCaseSensitive(py, e->string) : NULL;
                if (!other) other = ay; /* NULL = any */
                const cJSON *m = other ? js_merge(c, pass ? other : e, pass ? e : other) : e;
                if (!m) goto out;
                put(p, e->string, m);
            }
        }
    }
    if (aa || ab) {
        const cJSON *m = aa && ab ? js_merge(c, aa, ab) : aa ? aa : ab;
        if (!m) goto out;
        put(o, "additionalProperties", m);
    }
    res = o;
out:
    c->depth--;
    return c->st ? NULL : res;
}
