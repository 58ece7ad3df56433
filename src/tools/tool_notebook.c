/*
 * tool_notebook.c - NotebookEdit: replace, insert or delete one cell of a
 * Jupyter notebook (.ipynb).
 *
 * The notebook is parsed with jansson (bounded, depth-limited), changed in
 * memory and written back atomically in nbformat's layout (indent 1, key
 * order kept, a final newline); every field we do not touch is kept. A
 * replaced code cell loses its now-stale outputs and execution count.
 * Sources are stored as nbformat does, a list of lines each ending in "\n"
 * but the last. The read-before-write and read-only rules of Write apply.
 */
#include "tools/tools_internal.h"

#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/banned.h"

/* Cell ids listed when a cell_id is not found. */
#define NB_LIST_IDS 20

static const char *const cell_types[] = {"code", "markdown", NULL};
static const char *const edit_modes[] = {"replace", "insert", "delete", NULL};

/* nbformat's source: ["line\n", ..., "last"]. */
static json_t *source_lines(const char *s, size_t len)
{
    json_t *a = json_array();
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '\n')
            continue;
        json_array_append_new(a, json_stringn(s + start, i + 1 - start));
        start = i + 1;
    }
    if (start < len)
        json_array_append_new(a, json_stringn(s + start, len - start));
    return a;
}

static void make_code(json_t *cell)
{
    json_object_set_new(cell, "execution_count", json_null());
    json_object_set_new(cell, "outputs", json_array());
}

/* A cell id not used in cells: 8 hex digits from a hash of the notebook's state. */
static void fresh_id(const json_t *cells, char out[HASH64_HEX_LEN + 1])
{
    uint64_t seed = (uint64_t)ca_now_us() ^ json_array_size(cells);
    for (;;) {
        seed = hash64(&seed, sizeof(seed));
        hash64_hex(seed, out);
        out[8] = '\0';
        bool used = false;
        size_t i;
        json_t *c;
        json_array_foreach(cells, i, c)
        {
            const char *id = json_string_value(json_object_get(c, "id"));
            if (id && strcmp(id, out) == 0)
                used = true;
        }
        if (!used)
            return;
    }
}

/* Whether cells carry ids (nbformat 4.5 and later). */
static bool uses_ids(const json_t *nb, const json_t *cells)
{
    json_int_t major = json_integer_value(json_object_get(nb, "nbformat"));
    json_int_t minor = json_integer_value(json_object_get(nb, "nbformat_minor"));
    if (major > 4 || (major == 4 && minor >= 5))
        return true;
    return json_object_get(json_array_get(cells, 0), "id") != NULL;
}

/* Find the cell the call names; -1 (res filled) when it names none properly. */
static long find_cell(const json_t *args, const json_t *cells, const struct tools__path *p,
                      bool for_insert, struct tool_result *res)
{
    size_t n = json_array_size(cells);
    const char *id = tools__str(args, "cell_id", NULL);
    int64_t num = tools__int(args, "cell_number", -1);
    long by_id = -1;
    if (id) {
        size_t i;
        json_t *c;
        json_array_foreach(cells, i, c)
        {
            const char *cid = json_string_value(json_object_get(c, "id"));
            if (cid && strcmp(cid, id) == 0) {
                by_id = (long)i;
                break;
            }
        }
        if (by_id < 0) {
            tool_result_errorf(res, "NotebookEdit: no cell of %s has id '%.100s'", p->shown, id);
            size_t listed = 0;
            json_array_foreach(cells, i, c)
            {
                const char *cid = json_string_value(json_object_get(c, "id"));
                if (!cid || listed == NB_LIST_IDS)
                    continue;
                tools__out_tail(res, "%s %.64s", listed++ ? "," : "; its cell ids are", cid);
            }
            if (!listed)
                tools__out_tail(res, "; its cells have no ids: use cell_number (0 is the first "
                                     "cell)");
            return -1;
        }
        if (num >= 0 && num != by_id) {
            tool_result_errorf(res,
                               "NotebookEdit: cell_id '%.100s' is cell %ld, but cell_number is "
                               "%lld; give one of them",
                               id, by_id, (long long)num);
            return -1;
        }
        return for_insert ? by_id + 1 : by_id;
    }
    if (num < 0) {
        if (for_insert)
            return (long)n; /* append */
        tool_result_errorf(res, "NotebookEdit: say which cell: give cell_id or cell_number (0 is "
                                "the first cell)");
        return -1;
    }
    if ((size_t)num > n || (!for_insert && (size_t)num == n)) {
        tool_result_errorf(res,
                           "NotebookEdit: cell_number %lld is out of range: %s has %zu cells "
                           "(numbered 0 to %zu)%s",
                           (long long)num, p->shown, n, n ? n - 1 : 0,
                           for_insert ? "; to append, use cell_number equal to the cell count"
                                      : "");
        return -1;
    }
    return (long)num;
}

static int run_notebook_edit(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    struct tools__path p;
    struct buf b, out;
    buf_init(&b, TOOLS__FILE_MAX);
    buf_init(&out, TOOLS__FILE_MAX);
    json_t *nb = NULL;
    if (tools__path_arg("NotebookEdit", args, "notebook_path", false, &p, res) ||
        tools__resolve(ctx, "NotebookEdit", &p, res) ||
        tools__check_writable(ctx, "NotebookEdit", &p, res))
        goto out;
    size_t rl = strlen(p.rel);
    if (rl < 6 || strcmp(p.rel + rl - 6, ".ipynb") != 0) {
        tool_result_errorf(res,
                           "NotebookEdit: %s is not a Jupyter notebook (.ipynb); use Edit for "
                           "other files",
                           p.shown);
        goto out;
    }
    struct stat st;
    if (tools__load(ctx, "NotebookEdit", &p, false, &b, &st, res) ||
        tools__check_fresh(ctx, "NotebookEdit", &p, &b, res))
        goto out;
    struct ca_err err;
    json_t *cells;
    if (jsonx_parse(sv_from(b.data, b.len), TOOLS__FILE_MAX, p.shown, &nb, &err)) {
        tool_result_errorf(res, "NotebookEdit: %s is not a valid notebook: %s", p.shown, err.msg);
        goto out;
    }
    if (!json_is_object(nb) || !json_is_array(cells = json_object_get(nb, "cells"))) {
        tool_result_errorf(res, "NotebookEdit: %s is not a notebook: it has no \"cells\" list",
                           p.shown);
        goto out;
    }

    const char *mode = tools__str(args, "edit_mode", NULL);
    if (!mode)
        mode = "replace";
    const char *type = tools__str(args, "cell_type", NULL);
    size_t slen;
    const char *src = tools__str(args, "new_source", &slen);
    bool insert = strcmp(mode, "insert") == 0, del = strcmp(mode, "delete") == 0;
    if (!del && !src) {
        tool_result_errorf(res, "NotebookEdit: edit_mode \"%s\" needs new_source", mode);
        goto out;
    }
    if (insert && !type) {
        tool_result_errorf(res, "NotebookEdit: edit_mode \"insert\" needs cell_type (\"code\" or "
                                "\"markdown\")");
        goto out;
    }
    long idx = find_cell(args, cells, &p, insert, res);
    if (idx < 0)
        goto out;

    json_t *cell = NULL;
    char id[HASH64_HEX_LEN + 1] = "";
    if (insert) {
        cell = json_object();
        json_object_set_new(cell, "cell_type", json_string(type));
        if (strcmp(type, "code") == 0)
            json_object_set_new(cell, "execution_count", json_null());
        if (uses_ids(nb, cells)) {
            fresh_id(cells, id);
            json_object_set_new(cell, "id", json_string(id));
        }
        json_object_set_new(cell, "metadata", json_object());
        if (strcmp(type, "code") == 0)
            json_object_set_new(cell, "outputs", json_array());
        json_object_set_new(cell, "source", source_lines(src, slen));
        json_array_insert_new(cells, (size_t)idx, cell);
    } else if (del) {
        json_array_remove(cells, (size_t)idx);
    } else {
        cell = json_array_get(cells, (size_t)idx);
        if (!json_is_object(cell)) {
            tool_result_errorf(res, "NotebookEdit: cell %ld of %s is not an object", idx, p.shown);
            goto out;
        }
        const char *old_type = json_string_value(json_object_get(cell, "cell_type"));
        if (type && (!old_type || strcmp(type, old_type) != 0)) {
            json_object_set_new(cell, "cell_type", json_string(type));
            if (strcmp(type, "markdown") == 0) {
                json_object_del(cell, "outputs");
                json_object_del(cell, "execution_count");
            }
        }
        const char *now = json_string_value(json_object_get(cell, "cell_type"));
        if (now && strcmp(now, "code") == 0)
            make_code(cell); /* the old outputs no longer belong to this source */
        json_object_set_new(cell, "source", source_lines(src, slen));
    }

    if (jsonx_dump(nb, 1, &out) || buf_addch(&out, '\n')) {
        tool_result_errorf(res,
                           "NotebookEdit: the edited notebook would be over the %zu MiB file "
                           "limit",
                           TOOLS__FILE_MAX / CA_MIB);
        goto out;
    }
    if (tools__store(ctx, "NotebookEdit", &p, out.data, out.len, st.st_mode & 07777, res))
        goto out;
    size_t n = json_array_size(cells);
    if (insert)
        tools__out_tail(res,
                        "Inserted a new %s cell at index %ld%s%s%s in %s; it now has %zu "
                        "cells\n",
                        type, idx, id[0] ? " (id " : "", id, id[0] ? ")" : "", p.shown, n);
    else if (del)
        tools__out_tail(res, "Deleted cell %ld of %s; it now has %zu cells\n", idx, p.shown, n);
    else
        tools__out_tail(res, "Replaced the source of cell %ld (%s) in %s\n", idx,
                        json_string_value(json_object_get(cell, "cell_type")), p.shown);
    json_object_set_new(res->fields, "path", json_string(p.shown));
    json_object_set_new(res->fields, "edit_mode", json_string(mode));
    json_object_set_new(res->fields, "cell", json_integer(idx));
    json_object_set_new(res->fields, "cells", json_integer((json_int_t)n));
    if (id[0])
        json_object_set_new(res->fields, "cell_id", json_string(id));
out:
    json_decref(nb);
    buf_release(&b);
    buf_release(&out);
    return 0;
}

static const struct tools__arg notebook_args[] = {
    {"notebook_path", TOOLS__STRING, true,
     "The notebook (.ipynb) to edit: \"/workspace/NAME.ipynb\" or a path relative to /workspace."},
    {"cell_id", TOOLS__STRING, false,
     "The id of the cell to replace or delete (for insert: the new cell goes after it).",
     .max_len = 256},
    {"cell_number", TOOLS__INTEGER, false,
     "The index of the cell (0 is the first); for insert, the index the new cell will have.",
     .min = 0, .max = 1000000},
    {"new_source", TOOLS__STRING, false,
     "The new source of the cell (needed for replace and insert).",
     .max_len = CA_LIMIT_WRITE_BYTES},
    {"cell_type", TOOLS__STRING, false,
     "\"code\" or \"markdown\": needed for insert; for replace, changes the cell's type.",
     .choices = cell_types},
    {"edit_mode", TOOLS__STRING, false, "\"replace\" (default), \"insert\" or \"delete\".",
     .choices = edit_modes},
    {NULL},
};

const struct tools__spec tools__notebook_edit_spec = {
    "NotebookEdit",
    "Replace, insert or delete one cell of a Jupyter notebook (.ipynb) in the workspace. Name "
    "the cell by cell_id or by cell_number (0 is the first cell). insert puts a new cell after "
    "cell_id, at cell_number, or at the end when neither is given, and needs cell_type. Replacing "
    "a code cell clears its outputs. The notebook must have been Read in this episode and not "
    "changed since.",
    notebook_args,
    run_notebook_edit,
};
