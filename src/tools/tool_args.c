/*
 * tool_args.c - one argument table per tool drives both the JSON schema the
 * model sees (OpenAI function format) and the check every call passes before
 * its tool runs, so the two can never disagree.
 *
 * The check refuses, with a message naming the tool and the argument: a
 * non-object, unknown (extra) arguments, missing required ones, wrong JSON
 * types (true for an integer, 5.0 for an integer, "3" for an integer),
 * integers out of range, strings over their byte limit or outside their
 * enum, arrays with too few or too many items, and the same inside each
 * array item. A null value counts as absent (models often send null for an
 * optional argument). After the check, tools read their arguments with
 * tools__str/int/bool without re-checking types.
 */
#include "tools/tools_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/banned.h"

static const char *type_schema_name(enum tools__type t)
{
    switch (t) {
    case TOOLS__STRING:
        return "string";
    case TOOLS__INTEGER:
        return "integer";
    case TOOLS__BOOLEAN:
        return "boolean";
    case TOOLS__ARRAY:
        return "array";
    }
    BUG("unknown argument type %d", (int)t);
}

static const char *type_words(enum tools__type t)
{
    switch (t) {
    case TOOLS__STRING:
        return "a string";
    case TOOLS__INTEGER:
        return "an integer";
    case TOOLS__BOOLEAN:
        return "true or false";
    case TOOLS__ARRAY:
        return "an array";
    }
    BUG("unknown argument type %d", (int)t);
}

static const char *json_words(const json_t *v)
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
        return "a number with a fraction or exponent";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "a value";
}

static const struct tools__arg *find_arg(const struct tools__arg *table, const char *name)
{
    for (const struct tools__arg *a = table; a->name; a++)
        if (strcmp(a->name, name) == 0)
            return a;
    return NULL;
}

/* A known argument the unknown one was probably meant to be, or NULL. */
static const char *guess_arg(const struct tools__arg *table, const char *name)
{
    size_t n = strlen(name);
    for (const struct tools__arg *a = table; a->name; a++)
        if (strcasecmp(a->name, name) == 0)
            return a->name;
    if (n < 3)
        return NULL;
    for (const struct tools__arg *a = table; a->name; a++)
        if (strstr(a->name, name) || (strlen(a->name) >= 3 && strstr(name, a->name)))
            return a->name;
    return NULL;
}

/* "file_path (required), offset, limit" */
static void list_args(struct tool_result *res, const struct tools__arg *table)
{
    for (const struct tools__arg *a = table; a->name; a++)
        tools__out_tail(res, "%s%s%s", a == table ? "" : ", ", a->name,
                        a->required ? " (required)" : "");
}

/* Shown length of a key or value in messages. */
#define SHOWN 100
#define SHOWK(s) (int)tools__utf8_cut((s), strlen(s), SHOWN), (s)

static int check_value(const char *tool, const char *where, const struct tools__arg *a,
                       const json_t *v, struct tool_result *res);

/* Check obj against table; where ("" or "edits[2].") prefixes argument names. */
static int check_object(const char *tool, const char *where, const struct tools__arg *table,
                        const json_t *obj, struct tool_result *res)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        if (find_arg(table, k))
            continue;
        const char *guess = guess_arg(table, k);
        tool_result_errorf(res, "%s: unknown argument '%s%.*s'", tool, where, SHOWK(k));
        if (guess)
            tools__out_tail(res, " (did you mean '%s'?)", guess);
        tools__out_tail(res, "; %s%s takes: ", tool, *where ? " items" : "");
        list_args(res, table);
        return CA_EPARSE;
    }
    for (const struct tools__arg *a = table; a->name; a++) {
        v = json_object_get(obj, a->name);
        if (!v || json_is_null(v)) {
            if (!a->required)
                continue;
            tool_result_errorf(res, "%s: missing required argument '%s%s' (%s): %s", tool, where,
                               a->name, type_words(a->type), a->description);
            return CA_EPARSE;
        }
        int rc = check_value(tool, where, a, v, res);
        if (rc)
            return rc;
    }
    return 0;
}

static int check_value(const char *tool, const char *where, const struct tools__arg *a,
                       const json_t *v, struct tool_result *res)
{
    bool ok = false;
    switch (a->type) {
    case TOOLS__STRING:
        ok = json_is_string(v);
        break;
    case TOOLS__INTEGER:
        ok = json_is_integer(v);
        break;
    case TOOLS__BOOLEAN:
        ok = json_is_boolean(v);
        break;
    case TOOLS__ARRAY:
        ok = json_is_array(v);
        break;
    }
    if (!ok) {
        tool_result_errorf(res, "%s: argument '%s%s' must be %s, not %s", tool, where, a->name,
                           type_words(a->type), json_words(v));
        if (a->type == TOOLS__INTEGER && json_is_string(v))
            tools__out_tail(res, " (write the number without quotes)");
        if (a->type == TOOLS__BOOLEAN && json_is_string(v))
            tools__out_tail(res, " (write true or false without quotes)");
        return CA_EPARSE;
    }

    if (a->type == TOOLS__STRING) {
        size_t len = json_string_length(v), max = a->max_len ? a->max_len : TOOLS__STRING_MAX;
        if (len > max) {
            tool_result_errorf(res, "%s: argument '%s%s' is %zu bytes, over its limit of %zu bytes",
                               tool, where, a->name, len, max);
            if (max >= CA_MIB)
                tools__out_tail(res, "; split the work into several smaller calls");
            return CA_EPARSE;
        }
        if (!a->choices)
            return 0;
        const char *s = json_string_value(v);
        for (size_t i = 0; a->choices[i]; i++)
            if (strlen(a->choices[i]) == len && memcmp(a->choices[i], s, len) == 0)
                return 0;
        tool_result_errorf(res, "%s: argument '%s%s' must be one of", tool, where, a->name);
        for (size_t i = 0; a->choices[i]; i++)
            tools__out_tail(res, "%s \"%s\"", i ? "," : "", a->choices[i]);
        tools__out_tail(res, ", not \"%.*s\"", (int)tools__utf8_cut(s, len, SHOWN), s);
        return CA_EPARSE;
    }
    if (a->type == TOOLS__INTEGER) {
        json_int_t n = json_integer_value(v);
        if (n < a->min || n > a->max) {
            tool_result_errorf(res, "%s: argument '%s%s' must be between %lld and %lld, not %lld",
                               tool, where, a->name, (long long)a->min, (long long)a->max,
                               (long long)n);
            return CA_EPARSE;
        }
        return 0;
    }
    if (a->type == TOOLS__ARRAY) {
        size_t n = json_array_size(v);
        if ((int64_t)n < a->min || (int64_t)n > a->max) {
            tool_result_errorf(res, "%s: argument '%s%s' must have %lld to %lld items, not %zu",
                               tool, where, a->name, (long long)a->min, (long long)a->max, n);
            return CA_EPARSE;
        }
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item)
        {
            char sub[128];
            snprintf(sub, sizeof(sub), "%s%s[%zu].", where, a->name, i);
            if (!json_is_object(item)) {
                tool_result_errorf(res, "%s: %s%s[%zu] must be an object, not %s", tool, where,
                                   a->name, i, json_words(item));
                return CA_EPARSE;
            }
            int rc = check_object(tool, sub, a->items, item, res);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int tools__args_check(const struct tools__spec *spec, const json_t *args, struct tool_result *res)
{
    if (!json_is_object(args)) {
        tool_result_errorf(res, "%s: the arguments must be a JSON object, not %s", spec->name,
                           args ? json_words(args) : "nothing");
        return CA_EPARSE;
    }
    return check_object(spec->name, "", spec->args, args, res);
}

/* {"type":"object","properties":{...},"required":[...],"additionalProperties":false} */
static json_t *object_schema(const struct tools__arg *table)
{
    json_t *props = json_object(), *required = json_array();
    for (const struct tools__arg *a = table; a->name; a++) {
        json_t *p = json_pack("{s:s, s:s}", "type", type_schema_name(a->type), "description",
                              a->description);
        if (a->choices) {
            json_t *e = json_array();
            for (size_t i = 0; a->choices[i]; i++)
                json_array_append_new(e, json_string(a->choices[i]));
            json_object_set_new(p, "enum", e);
        }
        if (a->type == TOOLS__INTEGER) {
            json_object_set_new(p, "minimum", json_integer(a->min));
            json_object_set_new(p, "maximum", json_integer(a->max));
        }
        if (a->type == TOOLS__ARRAY) {
            json_object_set_new(p, "minItems", json_integer(a->min));
            json_object_set_new(p, "maxItems", json_integer(a->max));
            json_object_set_new(p, "items", object_schema(a->items));
        }
        json_object_set_new(props, a->name, p);
        if (a->required)
            json_array_append_new(required, json_string(a->name));
    }
    return json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required",
                     required, "additionalProperties", 0);
}

json_t *tools__schema(const struct tools__spec *spec)
{
    return json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function", "function", "name", spec->name,
                     "description", spec->description, "parameters", object_schema(spec->args));
}
