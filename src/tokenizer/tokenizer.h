/* Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json`, byte-exact with HF `tokenizers`.
 *
 * What is supported is what DeepSeek-V3/V4/V4.1 files use: model.type BPE (no dropout, no byte
 * fallback, no subword prefix/suffix), no normalizer (null or an empty Sequence), a pre-tokenizer
 * that is a Sequence of Split(Regex, Isolated) steps ending in ByteLevel(use_regex=false), and a
 * ByteLevel decoder. Anything else is refused at load time with DI_EUNSUPPORTED naming the field.
 *
 * Ids: the id space is [0, vocab_size) where vocab_size = max(base vocab id, added token id) + 1
 * (129,280 for V4.1). Every function that takes ids checks them and returns DI_ERANGE.
 *
 * Text: encode takes UTF-8 bytes and refuses invalid UTF-8 (DI_EINVAL with the byte offset).
 * Decode returns UTF-8 in which each invalid byte sequence became U+FFFD, exactly as Rust's
 * `String::from_utf8_lossy` does over the whole decoded byte string (what HF's ByteLevel decoder does).
 *
 * Thread safety: a loaded tokenizer is immutable apart from its BPE cache, which is guarded by a
 * mutex, so any function may be called from several threads at once. */
#ifndef DI_TOKENIZER_TOKENIZER_H
#define DI_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct di_tokenizer di_tokenizer;

/* A growable array of token ids. Functions that produce ids append to it; free with
 * di_token_vec_free. A zero-initialised value is an empty vector. */
typedef struct di_token_vec {
    int32_t *ids; /* [n] */
    size_t n, cap;
} di_token_vec;

void di_token_vec_push(di_token_vec *v, int32_t id);
void di_token_vec_append(di_token_vec *v, const int32_t *ids, size_t n);
void di_token_vec_free(di_token_vec *v);

/* Loads a tokenizer.json file. On failure *out is NULL and err names the file and the field. */
di_status di_tokenizer_load(const char *path, di_tokenizer **out, di_err *err);
/* Same from a JSON text in memory; `name` is used in error messages. */
di_status di_tokenizer_load_json(const char *json, size_t len, const char *name, di_tokenizer **out,
                                 di_err *err);
void di_tokenizer_free(di_tokenizer *t);

/* Size of the id space, added tokens included (129,280 for V4.1). */
int32_t di_tokenizer_vocab_size(const di_tokenizer *t);
/* Id of a token string: an added token's content first, then a base-vocab (byte-level) string,
 * as HF `token_to_id`. Returns -1 when there is none. */
int32_t di_tokenizer_token_id(const di_tokenizer *t, const char *token, size_t len);
/* The token string of an id as HF `id_to_token`: an added token's content, or the raw byte-level
 * vocab string (e.g. "Ġthe"). NULL when id is out of range or unused. Not NUL-terminated
 * (use *len); valid until di_tokenizer_free. */
const char *di_tokenizer_id_to_token(const di_tokenizer *t, int32_t id, size_t *len);
/* The bytes an id contributes to decoded text (byte-level alphabet mapped back to bytes; may be
 * a partial UTF-8 sequence). NULL when id is out of range or unused. */
const uint8_t *di_tokenizer_id_bytes(const di_tokenizer *t, int32_t id, size_t *len);
/* True for added tokens, and for added tokens flagged "special" (skipped by skip_special). */
bool di_tokenizer_is_added(const di_tokenizer *t, int32_t id);
bool di_tokenizer_is_special(const di_tokenizer *t, int32_t id);

/* Encodes UTF-8 text, appending ids to *out. allow_special = true matches added tokens in the text
 * first, as HF `encode(text, add_special_tokens=False)` does (non-normalized added tokens, then
 * normalized ones, leftmost-longest, honouring lstrip/rstrip/single_word); false tokenises
 * everything as plain text (a typed "<｜User｜>" becomes ordinary tokens). Never adds BOS/EOS. */
di_status di_tokenizer_encode(di_tokenizer *t, const char *text, size_t len, bool allow_special,
                              di_token_vec *out, di_err *err);

/* Decodes ids to UTF-8 text (see the lossy rule above). skip_special drops added tokens flagged
 * special, as HF `decode(ids, skip_special_tokens=True)`. *text is malloc'd and NUL-terminated
 * (caller frees); *len excludes the NUL. An out-of-range or unused id is DI_ERANGE. */
di_status di_tokenizer_decode(const di_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                              char **text, size_t *len, di_err *err);

/* One id's text, exactly HF `decode([id], skip_special_tokens=False)` (a partial UTF-8 sequence
 * becomes U+FFFD). Same ownership as di_tokenizer_decode. */
di_status di_tokenizer_decode_id(const di_tokenizer *t, int32_t id, char **text, size_t *len, di_err *err);

/* Streaming detokenizer: feed ids one at a time and get back the text that became final. Text is
 * never split inside a UTF-8 character, and the concatenation of everything returned (including
 * di_detok_finish) equals di_tokenizer_decode of the whole sequence. */
typedef struct di_detok {
    const di_tokenizer *tok;
    bool skip_special;
    uint8_t pending[4]; /* a proper prefix of a UTF-8 sequence still waiting for bytes */
    size_t n_pending;
    char *out; /* output buffer returned to the caller, reused across calls */
    size_t out_cap;
} di_detok;

void di_detok_init(di_detok *d, const di_tokenizer *t, bool skip_special);
/* Returns the newly final text in *text (valid until the next call; NUL-terminated; *len bytes). */
di_status di_detok_push(di_detok *d, int32_t id, const char **text, size_t *len, di_err *err);
/* Flushes an incomplete trailing sequence (as one U+FFFD, like the whole decode) and resets. */
void di_detok_finish(di_detok *d, const char **text, size_t *len);
void di_detok_free(di_detok *d);

/* UTF-8 helpers shared with the prompt renderer and the CLI. */
/* Returns true if s[0..len) is valid UTF-8; otherwise false and the offset of the first bad byte. */
bool di_utf8_valid(const char *s, size_t len, size_t *bad_offset);
/* Appends bytes to a malloc'd buffer with lossy UTF-8 repair (Rust from_utf8_lossy rules). When
 * `final` is false, a trailing proper prefix of a UTF-8 sequence is not consumed: its length is
 * returned and the caller keeps those bytes for later. */
size_t di_utf8_lossy_append(const uint8_t *src, size_t n, bool final, char **buf, size_t *len,
                            size_t *cap);

#endif
