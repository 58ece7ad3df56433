/*
 * json.c - jansson with our limits: size and nesting depth are checked on
 * the raw text before jansson sees it (jansson's own depth limit is a
 * compile-time constant far above ours), and errors carry line:column.
 */
#include "core/json.h"

#include <string.h>

#include "core/limits.h"
#include "core/banned.h"

size_t jsonx_depth(struct sv text)
{
    size_t depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < text.len; i++) {
        char c = text.p[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max)
                max = depth;
        } else if ((c == ']' || c == '}') && depth) {
            depth--;
        }
    }
    return max;
}

int jsonx_parse(struct sv text, size_t max_bytes, const char *what, json_t **out,
                struct ca_err *err)
{
    *out = NULL;
    if (text.len > max_bytes)
        return err_setf(err, CA_ETOOBIG, "%s: JSON of %zu bytes is over the limit of %zu bytes",
                        what, text.len, max_bytes);
    size_t bad;
    if (!utf8_valid(text.p, text.len, &bad)) {
        size_t line, col;
        sv_line_col(text, bad, &line, &col);
        return err_setf(err, CA_EUTF8, "%s: invalid UTF-8 at line %zu, column %zu", what, line,
                        col);
    }
    size_t depth = jsonx_depth(text);
    if (depth > CA_LIMIT_JSON_DEPTH)
        return err_setf(err, CA_ETOOBIG, "%s: JSON nested %zu deep, over the limit of %d", what,
                        depth, CA_LIMIT_JSON_DEPTH);
    json_error_t je;
    json_t *v = json_loadb(text.p, text.len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!v)
        return err_setf(err, CA_EPARSE, "%s: invalid JSON at line %d, column %d: %s", what, je.line,
                        je.column, je.text);
    *out = v;
    return 0;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "a value";
}

/* Look up key; 1 when present and usable, 0 when absent (and allowed), <0 on error. */
static int lookup(const json_t *obj, const char *key, bool required, const char *expected,
                  json_t **v, const char *what, struct ca_err *err)
{
    if (!json_is_object(obj))
        return err_setf(err, CA_EPARSE, "%s: expected a JSON object, got %s", what,
                        obj ? type_name(obj) : "nothing");
    *v = json_object_get(obj, key);
    if (!*v || json_is_null(*v)) {
        if (required)
            return err_setf(err, CA_EPARSE, "%s: missing required field \"%s\" (%s)", what, key,
                            expected);
        return 0;
    }
    return 1;
}

static int wrong_type(const char *key, const char *expected, const json_t *v, const char *what,
                      struct ca_err *err)
{
    return err_setf(err, CA_EPARSE, "%s: field \"%s\" must be %s, got %s", what, key, expected,
                    type_name(v));
}

int jsonx_get_str(const json_t *obj, const char *key, bool required, const char **out,
                  const char *what, struct ca_err *err)
{
    json_t *v;
    int rc = lookup(obj, key, required, "a string", &v, what, err);
    if (rc <= 0)
        return rc;
    if (!json_is_string(v))
        return wrong_type(key, "a string", v, what, err);
    *out = json_string_value(v);
    return 0;
}

int jsonx_get_int(const json_t *obj, const char *key, bool required, int64_t *out, const char *what,
                  struct ca_err *err)
{
    json_t *v;
    int rc = lookup(obj, key, required, "an integer", &v, what, err);
    if (rc <= 0)
        return rc;
    if (!json_is_integer(v))
        return wrong_type(key, "an integer", v, what, err);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

int jsonx_get_bool(const json_t *obj, const char *key, bool required, bool *out, const char *what,
                   struct ca_err *err)
{
    json_t *v;
    int rc = lookup(obj, key, required, "true or false", &v, what, err);
    if (rc <= 0)
        return rc;
    if (!json_is_boolean(v))
        return wrong_type(key, "true or false", v, what, err);
    *out = json_is_true(v);
    return 0;
}

int jsonx_get_array(const json_t *obj, const char *key, bool required, json_t **out,
                    const char *what, struct ca_err *err)
{
    json_t *v;
    int rc = lookup(obj, key, required, "an array", &v, what, err);
    if (rc <= 0)
        return rc;
    if (!json_is_array(v))
        return wrong_type(key, "an array", v, what, err);
    *out = v;
    return 0;
}

int jsonx_get_object(const json_t *obj, const char *key, bool required, json_t **out,
                     const char *what, struct ca_err *err)
{
    json_t *v;
    int rc = lookup(obj, key, required, "an object", &v, what, err);
    if (rc <= 0)
        return rc;
    if (!json_is_object(v))
        return wrong_type(key, "an object", v, what, err);
    *out = v;
    return 0;
}

static int dump_cb(const char *p, size_t n, void *data)
{
    return buf_add(data, p, n) ? -1 : 0;
}

int jsonx_dump(const json_t *v, int indent, struct buf *b)
{
    size_t flags = JSON_ENCODE_ANY | JSON_PRESERVE_ORDER;
    flags |= indent > 0 ? JSON_INDENT(indent) : JSON_COMPACT;
    size_t before = b->len;
    if (json_dump_callback(v, dump_cb, b, flags) != 0) {
        buf_truncate(b, before);
        return CA_ETOOBIG;
    }
    return 0;
}

json_t *jsonx_string(struct sv s)
{
    if (!utf8_valid(s.p, s.len, NULL))
        return NULL;
    return json_stringn(s.p, s.len);
}
