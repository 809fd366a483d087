/* di_constrain_compile: front end by kind, then di_grammar_build (see constrain.h). */
#include "constrain/constrain.h"

void di_constrain_opts_init(di_constrain_opts *o) {
    o->json_ws_flexible = true;
    o->json_ws_max = 0;
}

di_status di_constrain_compile(di_constrain_kind kind, const char *text, size_t len,
                               const di_constrain_opts *opts, di_grammar **out, di_err *err) {
    di_constrain_opts def;
    if (!opts) {
        di_constrain_opts_init(&def);
        opts = &def;
    }
    *out = NULL;
    g_builder g;
    g_builder_init(&g);
    int root = -1;
    di_status st;
    switch (kind) {
    case DI_CONSTRAIN_REGEX: st = di_regex_build(&g, text, len, false, &root, err); break;
    case DI_CONSTRAIN_EBNF: st = di_ebnf_build(&g, text, len, &root, err); break;
    case DI_CONSTRAIN_JSON_SCHEMA: st = di_json_schema_build(&g, text, len, opts, &root, err); break;
    case DI_CONSTRAIN_JSON_OBJECT:
        st = di_json_schema_build(&g, "{\"type\":\"object\"}", 17, opts, &root, err);
        break;
    default: st = di_errf(err, DI_EINVAL, "unknown constraint kind %d", (int)kind);
    }
    if (!st) st = di_grammar_build(&g, root, out, err);
    g_builder_free(&g);
    return st;
}
