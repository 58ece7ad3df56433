/*
 * tool_read.c - Read: a text file with line numbers (cat -n style), from a
 * line offset for at most `limit` lines; very long lines cut with a marker;
 * the whole text bounded by the tool output limit with a marker saying where
 * to continue. Binary files (a NUL in the first 8 KiB, or invalid UTF-8) are
 * refused; .ipynb notebooks are shown as their cells; directories are
 * refused with a pointer to Glob.
 *
 * Every successful Read records the file's content hash in the episode's
 * read set (whatever part was shown): that is what lets Write and Edit
 * change it later, and tell whether it changed on disk since.
 */
#include "tools/tools_internal.h"

#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/banned.h"

/* Lines returned when the call gives no limit. */
#define READ_DEFAULT_LIMIT 2000
/* Bytes of one notebook cell output shown. */
#define NB_OUTPUT_MAX 2000

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void render_text(const json_t *args, const struct tools__path *p, const struct buf *b,
                        struct tool_result *res)
{
    size_t total = tools__count_lines(b->data, b->len);
    int64_t offset = tools__int(args, "offset", 1);
    int64_t limit = tools__int(args, "limit", READ_DEFAULT_LIMIT);
    if (offset < 1)
        offset = 1;
    json_object_set_new(res->fields, "lines", json_integer((json_int_t)total));
    json_object_set_new(res->fields, "offset", json_integer(offset));
    if ((uint64_t)offset > total) {
        json_object_set_new(res->fields, "returned", json_integer(0));
        json_object_set_new(res->fields, "truncated", json_false());
        tools__out_tail(res,
                        "%s has %zu lines; offset %lld is past its end (give an offset "
                        "between 1 and %zu)\n",
                        p->shown, total, (long long)offset, total);
        return;
    }

    struct sv rest = sv_from(b->data, b->len), line;
    size_t lineno = 0, returned = 0;
    bool cut = false;
    struct buf one;
    buf_init(&one, BUF_MAX_INTERNAL);
    while (returned < (uint64_t)limit && sv_next_line(&rest, &line, NULL)) {
        if (++lineno < (uint64_t)offset)
            continue;
        buf_reset(&one);
        if (tools__add_numbered(&one, lineno, line))
            BUG("internal buffer overflow");
        if (tools__out(res, one.data, one.len)) {
            cut = true;
            break;
        }
        returned++;
    }
    buf_release(&one);

    size_t last = (size_t)offset + returned - 1;
    if (cut)
        tools__out_tail(res,
                        "\n[output truncated at the %zu KiB tool output limit: showed lines "
                        "%lld-%zu of %zu; call Read with offset=%zu to continue]\n",
                        CA_LIMIT_TOOL_OUTPUT / CA_KIB, (long long)offset, last, total, last + 1);
    else if (last < total)
        tools__out_tail(res,
                        "\n[showed lines %lld-%zu of %zu; call Read with offset=%zu to read "
                        "more]\n",
                        (long long)offset, last, total, last + 1);
    json_object_set_new(res->fields, "returned", json_integer((json_int_t)returned));
    json_object_set_new(res->fields, "truncated", json_boolean(last < total));
}

/* Text of a notebook "source"/"text" field: a string or an array of strings. */
static void nb_text(const json_t *v, struct buf *out)
{
    if (json_is_string(v)) {
        if (buf_add(out, json_string_value(v), json_string_length(v)))
            BUG("internal buffer overflow");
        return;
    }
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s)
    {
        if (json_is_string(s) && buf_add(out, json_string_value(s), json_string_length(s)))
            BUG("internal buffer overflow");
    }
}

/* Add text (one cell's source or output) to res, line by line; false when full. */
static bool nb_emit(struct tool_result *res, const struct buf *text, size_t max)
{
    struct sv rest = sv_from(text->data, tools__utf8_cut(text->data, text->len, max)), line;
    struct buf one;
    buf_init(&one, BUF_MAX_INTERNAL);
    bool ok = true;
    while (ok && sv_next_line(&rest, &line, NULL)) {
        buf_reset(&one);
        if (tools__add_line(&one, line))
            BUG("internal buffer overflow");
        ok = tools__out(res, one.data, one.len) == 0;
    }
    buf_release(&one);
    if (ok && text->len > max)
        ok = tools__outf(res, "\xe2\x80\xa6 [output truncated: %zu more bytes]\n",
                         text->len - max) == 0;
    return ok;
}

/* Render a notebook's cells; false when b is not a notebook (shown as text instead). */
static bool render_notebook(const struct tools__path *p, const struct buf *b,
                            struct tool_result *res)
{
    json_t *nb = NULL, *cells;
    if (jsonx_parse(sv_from(b->data, b->len), TOOLS__FILE_MAX, p->shown, &nb, NULL) ||
        !json_is_array(cells = json_object_get(nb, "cells"))) {
        json_decref(nb);
        return false;
    }
    size_t n = json_array_size(cells), shown = 0;
    bool ok = tools__outf(res, "%s: Jupyter notebook with %zu cells\n", p->shown, n) == 0;
    struct buf text;
    buf_init(&text, BUF_MAX_INTERNAL);
    for (size_t i = 0; ok && i < n; i++) {
        const json_t *cell = json_array_get(cells, i);
        const char *type = json_string_value(json_object_get(cell, "cell_type"));
        const char *id = json_string_value(json_object_get(cell, "id"));
        ok = tools__outf(res, "\n[cell %zu] %s%s%.64s%s\n", i, type ? type : "unknown",
                         id ? " (id: " : "", id ? id : "", id ? ")" : "") == 0;
        buf_reset(&text);
        nb_text(json_object_get(cell, "source"), &text);
        ok = ok && nb_emit(res, &text, TOOLS__BODY_MAX);
        size_t j;
        json_t *o;
        json_array_foreach(json_object_get(cell, "outputs"), j, o)
        {
            if (!ok)
                break;
            buf_reset(&text);
            const char *ename = json_string_value(json_object_get(o, "ename"));
            if (ename) {
                const char *evalue = json_string_value(json_object_get(o, "evalue"));
                if (buf_addf(&text, "%s: %s", ename, evalue ? evalue : ""))
                    BUG("internal buffer overflow");
            } else if (json_object_get(o, "text")) {
                nb_text(json_object_get(o, "text"), &text);
            } else {
                nb_text(json_object_get(json_object_get(o, "data"), "text/plain"), &text);
            }
            if (!text.len)
                continue;
            ok = tools__outf(res, "[cell %zu output]\n", i) == 0 &&
                 nb_emit(res, &text, NB_OUTPUT_MAX);
        }
        if (ok)
            shown = i + 1;
    }
    buf_release(&text);
    if (!ok)
        tools__out_tail(res,
                        "\n[output truncated at the %zu KiB tool output limit after cell %zu of "
                        "%zu; use Bash (e.g. python3 or jq) to see the rest]\n",
                        CA_LIMIT_TOOL_OUTPUT / CA_KIB, shown ? shown - 1 : 0, n);
    json_object_set_new(res->fields, "cells", json_integer((json_int_t)n));
    json_object_set_new(res->fields, "returned", json_integer((json_int_t)shown));
    json_object_set_new(res->fields, "truncated", json_boolean(shown < n));
    json_decref(nb);
    return true;
}

static int run_read(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    struct tools__path p;
    if (tools__path_arg("Read", args, "file_path", false, &p, res) ||
        tools__resolve(ctx, "Read", &p, res))
        return 0;
    struct buf b;
    buf_init(&b, TOOLS__FILE_MAX);
    struct stat st;
    if (tools__load(ctx, "Read", &p, false, &b, &st, res))
        goto out;
    json_object_set_new(res->fields, "path", json_string(p.shown));
    if (tools__is_binary(b.data, b.len)) {
        tool_result_errorf(res, "Read: %s is a binary file (%zu bytes); Read shows text only",
                           p.shown, b.len);
        goto out;
    }
    tools__read_set_put(ctx, p.key, hash128(b.data, b.len));
    if (b.len == 0) {
        json_object_set_new(res->fields, "lines", json_integer(0));
        json_object_set_new(res->fields, "offset", json_integer(1));
        json_object_set_new(res->fields, "returned", json_integer(0));
        json_object_set_new(res->fields, "truncated", json_false());
        tools__out_tail(res, "(%s exists but is empty: 0 bytes)\n", p.shown);
        goto out;
    }
    if (!has_suffix(p.rel, ".ipynb") || !render_notebook(&p, &b, res))
        render_text(args, &p, &b, res);
out:
    buf_release(&b);
    return 0;
}

static const struct tools__arg read_args[] = {
    {"file_path", TOOLS__STRING, true,
     "The file to read: \"/workspace/NAME\" or a path relative to /workspace."},
    {"offset", TOOLS__INTEGER, false,
     "The line number to start at (1 is the first line). Use it with limit for long files.",
     .min = 0, .max = 1000000000},
    {"limit", TOOLS__INTEGER, false, "The number of lines to read (default 2000).", .min = 1,
     .max = 1000000000},
    {NULL},
};

const struct tools__spec tools__read_spec = {
    "Read",
    "Read a text file from the workspace. Paths are \"/workspace/NAME\" or relative to /workspace "
    "(e.g. \"model.py\", \"kernels/my_kernel.cu\"). The result is numbered like cat -n (line "
    "number, tab, line); by default up to 2000 lines from the start; use offset and limit for "
    "other parts of long files. Lines longer than 2000 characters are cut; the whole result is "
    "capped at 64 KiB with a note saying which offset to continue from. Binary files are refused; "
    ".ipynb notebooks are shown cell by cell; directories are refused (use Glob). You must Read a "
    "file before you change it with Write, Edit, MultiEdit or NotebookEdit.",
    read_args,
    run_read,
};
