/*
 * tool_edit.c - Edit (one exact string replacement) and MultiEdit (several,
 * in order, all or nothing) on one file.
 *
 * Both share apply_edit(), which works on the in-memory content: old_string
 * must occur exactly once unless replace_all, must differ from new_string,
 * and a miss comes back with hints (line-number prefixes copied from Read,
 * CRLF line endings, a line that matches when whitespace is ignored). The
 * file is written once, atomically, after every edit succeeded, so a failing
 * MultiEdit leaves it untouched. The same read-before-write and read-only
 * rules as Write apply. An empty old_string on a file that does not exist
 * creates it with new_string (for MultiEdit: the first edit), as agents
 * trained on Claude Code expect.
 *
 * Searching is memmem (linear); building the result is one pass; hints are
 * one pass over the lines. Nothing is quadratic in the file size.
 */
#include "tools/tools_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/banned.h"

/* Line numbers listed when old_string is ambiguous. */
#define EDIT_LIST_LINES 20
/* Context lines shown around an edit, and the most lines of a snippet. */
#define SNIPPET_CONTEXT 3
#define SNIPPET_LINES 40
/* Edits in one MultiEdit. */
#define MULTI_EDIT_MAX 100

struct edit {
    struct sv old, new;
    bool all;
};

struct edit_done {
    size_t count;      /* occurrences replaced */
    size_t first;      /* byte offset of the first replacement in the result */
    size_t first_line; /* its line number */
};

static size_t count_nl(const char *p, size_t n)
{
    size_t c = 0;
    const char *end = p + n;
    while ((p = memchr(p, '\n', (size_t)(end - p)))) {
        c++;
        p++;
    }
    return c;
}

/* Copy s with each run of whitespace made one space, trimmed. */
static void collapse_ws(struct sv s, struct buf *out)
{
    buf_reset(out);
    bool space = false;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.p[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
            space = out->len > 0;
            continue;
        }
        if ((space && buf_addch(out, ' ')) || buf_addch(out, c))
            BUG("internal buffer overflow");
        space = false;
    }
}

/* Whether some line of s starts with optional spaces, digits and a tab (Read's numbering). */
static bool has_line_numbers(struct sv s)
{
    struct sv line;
    while (sv_next_line(&s, &line, NULL)) {
        size_t i = 0;
        while (i < line.len && line.p[i] == ' ')
            i++;
        size_t d = i;
        while (i < line.len && line.p[i] >= '0' && line.p[i] <= '9')
            i++;
        if (i > d && i < line.len && line.p[i] == '\t')
            return true;
    }
    return false;
}

/* Append to an internal message buffer (unbounded: BUF_MAX_INTERNAL). */
static void why_add(struct buf *why, const char *fmt, ...) CA_PRINTF(2, 3);
static void why_add(struct buf *why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (buf_vaddf(why, fmt, ap))
        BUG("internal buffer overflow");
    va_end(ap);
}

/* Explain why old was not found in content. */
static void hint_not_found(struct sv content, struct sv old, struct buf *why)
{
    why_add(why, "old_string was not found in the file");
    if (has_line_numbers(old))
        why_add(why, "; it seems to include the line-number prefixes Read shows (spaces, digits, "
                     "a tab): give the file's text only");
    if (sv_find(content, SV_LIT("\r\n")) >= 0 && sv_find(old, SV_LIT("\r\n")) < 0 &&
        sv_find_ch(old, '\n') >= 0)
        why_add(why, "; the file has Windows line endings (\\r\\n)");

    /* The first non-blank line of old_string, looked for line by line,
     * as it is and with whitespace runs collapsed. */
    struct sv rest = old, first = {"", 0}, line;
    while (sv_next_line(&rest, &line, NULL)) {
        first = sv_trim(line);
        if (first.len)
            break;
    }
    if (first.len) {
        struct buf want, have;
        buf_init(&want, BUF_MAX_INTERNAL);
        buf_init(&have, BUF_MAX_INTERNAL);
        collapse_ws(first, &want);
        rest = content;
        size_t lineno = 0, found = 0;
        struct sv hit = {"", 0};
        while (!found && sv_next_line(&rest, &line, NULL)) {
            lineno++;
            bool match = sv_find(line, first) >= 0;
            if (!match && line.len >= want.len) {
                collapse_ws(line, &have);
                match = sv_find(sv_from(have.data, have.len), sv_from(want.data, want.len)) >= 0;
            }
            if (match) {
                found = lineno;
                hit = line;
            }
        }
        if (found) {
            why_add(why,
                    "; the closest match is line %zu, which holds the first line of "
                    "old_string (check whitespace, indentation and the lines after it):\n",
                    found);
            if (tools__add_numbered(why, found, hit))
                BUG("internal buffer overflow");
        } else {
            why_add(why, "; not even its first line appears in the file");
        }
        buf_release(&want);
        buf_release(&have);
    }
    why_add(why, "%sRead the file again to get its exact current text.",
            why->data[why->len - 1] == '\n' ? "" : "\n");
}

/*
 * Apply e to content (replaced by the result). On refusal, why gets the
 * reason and CA_EPARSE is returned with content unchanged.
 */
static int apply_edit(struct buf *content, const struct edit *e, struct edit_done *done,
                      struct buf *why)
{
    struct sv text = sv_from(content->data, content->len);
    if (sv_eq(e->old, e->new)) {
        why_add(why, "old_string and new_string are identical; there is nothing to change");
        return CA_EPARSE;
    }
    if (!e->old.len) {
        why_add(why, "old_string is empty; give the exact text to replace");
        return CA_EPARSE;
    }

    size_t count = 0, nlines = 0, lines[EDIT_LIST_LINES], line = 1, scanned = 0;
    const char *hit, *pos = text.p, *end = text.p + text.len;
    while ((hit = memmem(pos, (size_t)(end - pos), e->old.p, e->old.len))) {
        line += count_nl(text.p + scanned, (size_t)(hit - text.p) - scanned);
        scanned = (size_t)(hit - text.p);
        if (nlines < EDIT_LIST_LINES && (!nlines || lines[nlines - 1] != line))
            lines[nlines++] = line;
        count++;
        pos = hit + e->old.len;
    }
    if (count == 0) {
        hint_not_found(text, e->old, why);
        return CA_EPARSE;
    }
    if (count > 1 && !e->all) {
        why_add(why, "old_string occurs %zu times (at lines", count);
        for (size_t i = 0; i < nlines; i++)
            why_add(why, "%s %zu", i ? "," : "", lines[i]);
        why_add(why,
                "%s); include more of the surrounding text to make it unique, or set "
                "replace_all to change every occurrence",
                nlines == EDIT_LIST_LINES ? ", ..." : "");
        return CA_EPARSE;
    }

    struct buf out;
    buf_init(&out, TOOLS__FILE_MAX);
    pos = text.p;
    size_t first = 0;
    int rc = 0;
    for (size_t i = 0; !rc && i < count; i++) {
        hit = memmem(pos, (size_t)(end - pos), e->old.p, e->old.len);
        if (i == 0)
            first = (size_t)(hit - text.p);
        rc = buf_add(&out, pos, (size_t)(hit - pos));
        if (!rc)
            rc = buf_add(&out, e->new.p, e->new.len);
        pos = hit + e->old.len;
    }
    if (!rc)
        rc = buf_add(&out, pos, (size_t)(end - pos));
    if (rc) {
        buf_release(&out);
        why_add(why, "the result would be over the %zu MiB file limit", TOOLS__FILE_MAX / CA_MIB);
        return CA_EPARSE;
    }
    done->count = count;
    done->first = first;
    done->first_line = lines[0];
    buf_release(content);
    *content = out;
    return 0;
}

/* Lines around [start, start+len) of content, numbered, into res. */
static void snippet(struct tool_result *res, const struct buf *content, size_t start, size_t len)
{
    size_t first = 1 + count_nl(content->data, start);
    size_t last = first + count_nl(content->data + start, len ? len - 1 : 0);
    size_t from = first > SNIPPET_CONTEXT ? first - SNIPPET_CONTEXT : 1;
    size_t to = last + SNIPPET_CONTEXT;
    bool more = false;
    if (to - from + 1 > SNIPPET_LINES) {
        to = from + SNIPPET_LINES - 1;
        more = true;
    }
    /* Walk to line `from` from the start of the edited line. */
    const char *p = content->data + start;
    while (p > content->data && p[-1] != '\n')
        p--;
    for (size_t l = first; l > from; l--) {
        p--; /* the '\n' ending line l-1 */
        while (p > content->data && p[-1] != '\n')
            p--;
    }
    struct sv rest = sv_from(p, (size_t)(content->data + content->len - p)), line;
    struct buf one;
    buf_init(&one, BUF_MAX_INTERNAL);
    for (size_t l = from; l <= to && sv_next_line(&rest, &line, NULL); l++) {
        buf_reset(&one);
        if (tools__add_numbered(&one, l, line))
            BUG("internal buffer overflow");
        if (tools__out(res, one.data, one.len))
            break;
    }
    buf_release(&one);
    if (more)
        tools__out_tail(res, "       \xe2\x80\xa6 (Read the file for the rest)\n");
}

/* The part Edit and MultiEdit share: resolve, check, load. *exists false: new file. */
static int prepare(struct tool_ctx *ctx, const char *tool, const json_t *args,
                   struct tools__path *p, struct buf *content, mode_t *mode, bool *exists,
                   struct tool_result *res)
{
    if (tools__path_arg(tool, args, "file_path", false, p, res) ||
        tools__resolve(ctx, tool, p, res) || tools__check_writable(ctx, tool, p, res))
        return CA_EPARSE;
    struct stat st;
    int rc = tools__load(ctx, tool, p, true, content, &st, res);
    if (rc == -ENOENT) {
        *exists = false;
        p->exists = false;
        *mode = 0644;
        return 0;
    }
    if (rc)
        return rc;
    if (tools__is_binary(content->data, content->len)) {
        tool_result_errorf(res, "%s: %s is a binary file (%zu bytes); %s edits text files only",
                           tool, p->shown, content->len, tool);
        return CA_EPARSE;
    }
    if (tools__check_fresh(ctx, tool, p, content, res))
        return CA_EPARSE;
    *exists = true;
    *mode = st.st_mode & 07777;
    return 0;
}

static struct edit edit_from(const json_t *obj)
{
    struct edit e;
    e.old.p = tools__str(obj, "old_string", &e.old.len);
    e.new.p = tools__str(obj, "new_string", &e.new.len);
    e.all = tools__bool(obj, "replace_all", false);
    return e;
}

static void set_fields(struct tool_result *res, const struct tools__path *p, size_t count,
                       bool created)
{
    json_object_set_new(res->fields, "path", json_string(p->shown));
    json_object_set_new(res->fields, "replacements", json_integer((json_int_t)count));
    json_object_set_new(res->fields, "created", json_boolean(created));
}

static int run_edit(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    struct tools__path p;
    struct buf content, why;
    buf_init(&content, TOOLS__FILE_MAX);
    buf_init(&why, BUF_MAX_INTERNAL);
    mode_t mode;
    bool exists;
    struct edit e = edit_from(args);
    if (prepare(ctx, "Edit", args, &p, &content, &mode, &exists, res))
        goto out;

    if (!e.old.len && (!exists || !content.len)) {
        /* Create (or fill an empty file) with new_string. */
        if (tools__store(ctx, "Edit", &p, e.new.p, e.new.len, mode, res))
            goto out;
        tools__out_tail(res, "%s %s with new_string as its content (%zu bytes)\n",
                        exists ? "Filled the empty file" : "Created", p.shown, e.new.len);
        set_fields(res, &p, 0, !exists);
        goto out;
    }
    if (!exists) {
        tool_result_errorf(res,
                           "Edit: %s does not exist; create it with Write (or Edit with an empty "
                           "old_string)",
                           p.shown);
        goto out;
    }
    if (!e.old.len) {
        tool_result_errorf(res,
                           "Edit: old_string is empty but %s already has content; give the exact "
                           "text to replace, or use Write to replace the whole file",
                           p.shown);
        goto out;
    }
    struct edit_done done;
    if (apply_edit(&content, &e, &done, &why)) {
        tool_result_errorf(res, "Edit: %s: %s", p.shown, why.data);
        goto out;
    }
    if (tools__store(ctx, "Edit", &p, content.data, content.len, mode, res))
        goto out;
    if (done.count == 1)
        tools__out_tail(res,
                        "Edited %s: replaced 1 occurrence at line %zu. The lines around it "
                        "now read:\n",
                        p.shown, done.first_line);
    else
        tools__out_tail(res,
                        "Edited %s: replaced all %zu occurrences (the first at line %zu). "
                        "The lines around the first now read:\n",
                        p.shown, done.count, done.first_line);
    snippet(res, &content, done.first, e.new.len);
    set_fields(res, &p, done.count, false);
out:
    buf_release(&content);
    buf_release(&why);
    return 0;
}

static int run_multi_edit(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    struct tools__path p;
    struct buf content, why;
    buf_init(&content, TOOLS__FILE_MAX);
    buf_init(&why, BUF_MAX_INTERNAL);
    mode_t mode;
    bool exists;
    const json_t *edits = json_object_get(args, "edits");
    size_t n = json_array_size(edits), start = 0, total = 0;
    size_t lines[MULTI_EDIT_MAX], counts[MULTI_EDIT_MAX];
    if (prepare(ctx, "MultiEdit", args, &p, &content, &mode, &exists, res))
        goto out;

    struct edit e0 = edit_from(json_array_get(edits, 0));
    if (!exists || (!e0.old.len && !content.len)) {
        if (e0.old.len) {
            tool_result_errorf(res,
                               "MultiEdit: %s does not exist; to create it, give the first edit "
                               "an empty old_string and the file's content as new_string",
                               p.shown);
            goto out;
        }
        buf_reset(&content);
        if (buf_add(&content, e0.new.p, e0.new.len))
            BUG("edit string over the file limit");
        start = 1;
        lines[0] = 1;
        counts[0] = 0;
    }
    for (size_t i = start; i < n; i++) {
        struct edit e = edit_from(json_array_get(edits, i));
        struct edit_done done;
        if (!e.old.len) {
            tool_result_errorf(res,
                               "MultiEdit: edit %zu of %zu has an empty old_string (only the "
                               "first edit of a new file may); no changes were written",
                               i + 1, n);
            goto out;
        }
        buf_reset(&why);
        if (apply_edit(&content, &e, &done, &why)) {
            tool_result_errorf(res,
                               "MultiEdit: edit %zu of %zu failed on %s: %s\nNo changes "
                               "were written (edits apply in order, all or nothing",
                               i + 1, n, p.shown, why.data);
            if (i == 1)
                tools__out_tail(res, "; edit 2 sees the file as edit 1 left it");
            else if (i > 1)
                tools__out_tail(res, "; edit %zu sees the file as edits 1-%zu left it", i + 1, i);
            tools__out_tail(res, ").");
            goto out;
        }
        lines[i] = done.first_line;
        counts[i] = done.count;
        total += done.count;
    }
    if (tools__store(ctx, "MultiEdit", &p, content.data, content.len, mode, res))
        goto out;
    tools__out_tail(res, "%s %s: applied %zu edit%s (%zu replacement%s)\n",
                    exists ? "Edited" : "Created", p.shown, n, n == 1 ? "" : "s", total,
                    total == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++) {
        if (i < start)
            tools__out_tail(res, "  edit %zu: created the file with its new_string\n", i + 1);
        else
            tools__out_tail(res, "  edit %zu: %zu occurrence%s, first at line %zu\n", i + 1,
                            counts[i], counts[i] == 1 ? "" : "s", lines[i]);
    }
    set_fields(res, &p, total, !exists);
out:
    buf_release(&content);
    buf_release(&why);
    return 0;
}

static const struct tools__arg edit_args[] = {
    {"file_path", TOOLS__STRING, true,
     "The file to edit: \"/workspace/NAME\" or a path relative to /workspace."},
    {"old_string", TOOLS__STRING, true,
     "The exact text to replace, including whitespace and indentation, without Read's line-number "
     "prefixes. It must occur exactly once unless replace_all is true. Empty: create a file that "
     "does not exist yet with new_string as its content.",
     .max_len = CA_LIMIT_WRITE_BYTES},
    {"new_string", TOOLS__STRING, true,
     "The text to put in its place (must differ from "
     "old_string).",
     .max_len = CA_LIMIT_WRITE_BYTES},
    {"replace_all", TOOLS__BOOLEAN, false,
     "Replace every occurrence of old_string (default false: exactly one must exist)."},
    {NULL},
};

const struct tools__spec tools__edit_spec = {
    "Edit",
    "Replace an exact string in a workspace file. old_string must match the file's text exactly "
    "(whitespace included, without the line-number prefixes Read shows) and occur exactly once, "
    "unless replace_all is true. The file must have been Read in this episode and not changed "
    "since; read-only infrastructure files cannot be edited. The result shows the edited lines. "
    "With an empty old_string and a file that does not exist, the file is created with "
    "new_string.",
    edit_args,
    run_edit,
};

static const struct tools__arg multi_edit_item[] = {
    {"old_string", TOOLS__STRING, true,
     "The exact text to replace (in the file as the previous edits left it).",
     .max_len = CA_LIMIT_WRITE_BYTES},
    {"new_string", TOOLS__STRING, true, "The text to put in its place.",
     .max_len = CA_LIMIT_WRITE_BYTES},
    {"replace_all", TOOLS__BOOLEAN, false,
     "Replace every occurrence (default false: exactly one must exist)."},
    {NULL},
};

static const struct tools__arg multi_edit_args[] = {
    {"file_path", TOOLS__STRING, true,
     "The file to edit: \"/workspace/NAME\" or a path relative to /workspace."},
    {"edits", TOOLS__ARRAY, true,
     "The edits, applied in order; each works on the result of the previous ones.", .min = 1,
     .max = MULTI_EDIT_MAX, .items = multi_edit_item},
    {NULL},
};

const struct tools__spec tools__multi_edit_spec = {
    "MultiEdit",
    "Make several exact string replacements in one workspace file in one step. Edits apply in "
    "order, each to the result of the previous ones, with the same rules as Edit; if any edit "
    "fails, none is written. The file must have been Read in this episode and not changed since. "
    "To create a new file, give the first edit an empty old_string.",
    multi_edit_args,
    run_multi_edit,
};
