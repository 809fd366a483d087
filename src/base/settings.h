/* Settings registry (see settings_list.h for the declarations). A di_settings value is filled once
 * at start-up: defaults, then DEEPINFER_* variables, then CLI flags (flags win). Nothing else in the
 * code base calls getenv. */
#ifndef DI_BASE_SETTINGS_H
#define DI_BASE_SETTINGS_H

#include <stdbool.h>
#include <stdio.h>
#include "base/error.h"

#define DI_SETTING_T_STR char *
#define DI_SETTING_T_INT long
#define DI_SETTING_T_BOOL bool
#define DI_SETTING_T_FLOAT double

typedef struct di_settings {
#define DI_SETTING(field, type, flag, env, def, doc) DI_SETTING_T_##type field;
#include "base/settings_list.h"
#undef DI_SETTING
    /* which settings were given explicitly (flag or env), by registry index */
    bool given[64];
} di_settings;

/* Defaults then environment. Returns DI_EINVAL naming the variable if one does not parse. */
di_status di_settings_init(di_settings *s, di_err *err);
/* Consumes registry flags from argv[first..argc). Positional arguments and anything after `--` are
 * left in place (compacted to the front, from index `first`) and their count returned in *n_rest.
 * An unknown flag is an error naming it. */
di_status di_settings_parse_args(di_settings *s, int argc, char **argv, int first, int *n_rest,
                                 di_err *err);
bool di_settings_given(const di_settings *s, const char *field);
void di_settings_print_markdown(FILE *f);
void di_settings_free(di_settings *s);

#endif
