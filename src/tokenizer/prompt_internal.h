/* Internal to the prompt encoder: a prompt under construction is its text plus the spans of that
 * text that are control tokens. Encoding turns each span into its token id and each stretch of text
 * between spans into plain BPE (no added-token matching), which is how deepseek-recipe encodes a
 * rendered prompt: text a user wrote can never become a control token, and adjacent text from
 * different parts of the template is tokenised as one piece. */
#ifndef DI_TOKENIZER_PROMPT_INTERNAL_H
#define DI_TOKENIZER_PROMPT_INTERNAL_H

#include "tokenizer/json_lite.h"
#include "tokenizer/prompt.h"

typedef struct di_pspan {
    size_t off, len;
} di_pspan;

typedef struct di_pbuf {
    di_sbuf text;
    di_pspan *spans; /* [n_spans], increasing offsets */
    size_t n_spans, cap_spans;
} di_pbuf;

void di_pbuf_text(di_pbuf *b, const char *s, size_t n);
void di_pbuf_textz(di_pbuf *b, const char *s);
void di_pbuf_special(di_pbuf *b, const char *token);
/* Appends fixed template text in which every occurrence of one of the NULL-terminated `specials` is a
 * control token. */
void di_pbuf_template(di_pbuf *b, const char *s, const char *const *specials);
void di_pbuf_free(di_pbuf *b);

/* dsml.c: writes tool calls as the V4.1 template does ("<｜DSML｜ calls>\n...\n</｜DSML｜ calls>"). */
void di_dsml_write_calls(di_pbuf *b, const di_tool_call *calls, size_t n);

#endif
