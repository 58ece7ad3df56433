/*
 * json.h - helpers over jansson: bounded parsing with a depth limit and a
 * position in the error, typed field getters that produce messages naming
 * the field, and dumping into a bounded buf.
 *
 * Ownership follows jansson: getters return borrowed references; the parse
 * functions return a new reference the caller must json_decref().
 */
#ifndef CA_JSON_H
#define CA_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/sv.h"

/*
 * Parse exactly one JSON value from `text` (trailing whitespace allowed).
 * Refuses input over max_bytes (CA_ETOOBIG), nesting deeper than
 * CA_LIMIT_JSON_DEPTH, invalid UTF-8, and syntax errors (CA_EPARSE with line
 * and column). `what` names the input in messages ("line 12 of data.jsonl").
 */
int jsonx_parse(struct sv text, size_t max_bytes, const char *what, json_t **out,
                struct ca_err *err) WARN_UNUSED_RESULT;

/* Deepest nesting of arrays/objects in text (strings skipped). */
size_t jsonx_depth(struct sv text);

/*
 * Typed getters from an object. `required` false: a missing key (or null)
 * leaves *out untouched and returns 0. A present key of the wrong type is
 * CA_EPARSE naming `what` and the key.
 */
int jsonx_get_str(const json_t *obj, const char *key, bool required, const char **out,
                  const char *what, struct ca_err *err) WARN_UNUSED_RESULT;
int jsonx_get_int(const json_t *obj, const char *key, bool required, int64_t *out, const char *what,
                  struct ca_err *err) WARN_UNUSED_RESULT;
int jsonx_get_bool(const json_t *obj, const char *key, bool required, bool *out, const char *what,
                   struct ca_err *err) WARN_UNUSED_RESULT;
int jsonx_get_array(const json_t *obj, const char *key, bool required, json_t **out,
                    const char *what, struct ca_err *err) WARN_UNUSED_RESULT;
int jsonx_get_object(const json_t *obj, const char *key, bool required, json_t **out,
                     const char *what, struct ca_err *err) WARN_UNUSED_RESULT;

/* Append the compact (or indented, indent > 0) dump of v to b. */
int jsonx_dump(const json_t *v, int indent, struct buf *b) WARN_UNUSED_RESULT;

/* json_stringn with a length, refusing invalid UTF-8 (returns NULL). */
json_t *jsonx_string(struct sv s);

#endif
