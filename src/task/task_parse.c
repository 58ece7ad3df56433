/*
 * task_parse.c - checking a Python source as a KernelBench-format task
 * without running Python.
 *
 * The source is scanned once into a byte classification (code, string
 * literal, comment; task__scan_init) and split into physical lines that know
 * whether they start a logical line (bracket depth 0, no backslash
 * continuation, not inside a triple-quoted string). Structure is then read
 * from logical line starts only, so text in docstrings and comments never
 * counts. The scan is lexical, not a Python parser: it looks for the few
 * statements a task must have and leaves everything else to the evaluator.
 *
 * Invariants: masked[] has the same length and newlines as the code; every
 * index used stays below len; a task filled here owns all its strings.
 */
#include "task/task.h"

#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/limits.h"
#include "core/sv.h"
#include "task/task_internal.h"
#include "core/banned.h"

#define TASK_FORMAT_HINT                                                                           \
    "a task file must define class Model(nn.Module), get_inputs() and get_init_inputs()"

static bool is_ident(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c >= 0x80;
}

static bool is_hspace(char c)
{
    return c == ' ' || c == '\t' || c == '\f' || c == '\r';
}

/* ---- the byte classification ---- */

/* Offset of the opening quote when a string literal (with an optional prefix
 * such as r, b, f, rb) starts at i, else SIZE_MAX. */
static size_t string_quote_at(const char *code, size_t len, size_t i)
{
    if (code[i] == '"' || code[i] == '\'')
        return i;
    if (i > 0 && is_ident((unsigned char)code[i - 1]))
        return SIZE_MAX;
    for (size_t j = i; j < len && j < i + 2; j++) {
        if (!strchr("rRbBuUfF", code[j]) || code[j] == '\0')
            return SIZE_MAX;
        if (j + 1 < len && (code[j + 1] == '"' || code[j + 1] == '\''))
            return j + 1;
    }
    return SIZE_MAX;
}

/* Mark the literal starting at `start` (quote at q) and return its end. An
 * unterminated single-quoted literal ends at the newline, an unterminated
 * triple-quoted one at the end of the source. */
static size_t mark_string(struct task__scan *s, size_t start, size_t q)
{
    const char *c = s->code;
    size_t len = s->len;
    char quote = c[q];
    bool triple = q + 2 < len && c[q + 1] == quote && c[q + 2] == quote;
    size_t j = q + (triple ? 3 : 1);
    while (j < len) {
        if (c[j] == '\\') {
            j += 2;
            continue;
        }
        if (triple && c[j] == quote && j + 2 < len && c[j + 1] == quote && c[j + 2] == quote) {
            j += 3;
            break;
        }
        if (!triple && c[j] == quote) {
            j++;
            break;
        }
        if (!triple && c[j] == '\n')
            break;
        j++;
    }
    if (j > len)
        j = len;
    memset(s->kind + start, TASK__STRING, j - start);
    return j;
}

void task__scan_init(struct task__scan *s, const char *code, size_t len)
{
    s->code = code;
    s->len = len;
    s->kind = xcalloc(len + 1, 1);
    s->masked = xmalloc(len + 1);
    size_t i = 0;
    while (i < len) {
        if (code[i] == '#') {
            while (i < len && code[i] != '\n')
                s->kind[i++] = TASK__COMMENT;
            continue;
        }
        size_t q = string_quote_at(code, len, i);
        if (q != SIZE_MAX) {
            i = mark_string(s, i, q);
            continue;
        }
        i++;
    }
    for (i = 0; i < len; i++)
        s->masked[i] = s->kind[i] == TASK__CODE || code[i] == '\n' ? code[i] : ' ';
    s->masked[len] = '\0';
}

void task__scan_release(struct task__scan *s)
{
    FREE_AND_NULL(s->masked);
    FREE_AND_NULL(s->kind);
}

/* ---- lines ---- */

struct line {
    size_t off, end; /* [off, end) without the '\n' */
    size_t indent;   /* columns, tabs to the next multiple of 8 as Python does */
    bool start;      /* begins a logical line */
    bool blank;      /* nothing but spaces once strings and comments are gone */
};

static size_t split_lines(const struct task__scan *s, struct line **out)
{
    const char *m = s->masked;
    struct line *lines = NULL;
    size_t n = 0, alloc = 0, depth = 0, off = 0;
    bool continued = false;
    for (;;) {
        const char *nl = memchr(m + off, '\n', s->len - off);
        size_t end = nl ? (size_t)(nl - m) : s->len;
        struct line l = {.off = off, .end = end};
        l.start = depth == 0 && !continued && (off == 0 || s->kind[off - 1] != TASK__STRING);
        size_t k = off;
        for (; k < end && is_hspace(m[k]) && m[k] != '\r'; k++)
            l.indent = m[k] == '\t' ? (l.indent / 8 + 1) * 8 : l.indent + 1;
        while (k < end && is_hspace(m[k]))
            k++;
        l.blank = k == end;
        for (k = off; k < end; k++) {
            if (s->kind[k] != TASK__CODE)
                continue;
            if (m[k] == '(' || m[k] == '[' || m[k] == '{')
                depth++;
            else if ((m[k] == ')' || m[k] == ']' || m[k] == '}') && depth)
                depth--;
        }
        size_t last = end;
        while (last > off && m[last - 1] == '\r')
            last--;
        continued = last > off && m[last - 1] == '\\' && s->kind[last - 1] == TASK__CODE;
        ALLOC_GROW(lines, n + 1, alloc);
        lines[n++] = l;
        if (!nl)
            break;
        off = end + 1;
    }
    *out = lines;
    return n;
}

/* If the masked text at *pos is the keyword/identifier w (followed by a
 * non-identifier byte), advance past it. */
static bool eat_word(const char *m, size_t end, size_t *pos, const char *w)
{
    size_t n = strlen(w);
    if (end - *pos < n || memcmp(m + *pos, w, n) != 0)
        return false;
    if (*pos + n < end && is_ident((unsigned char)m[*pos + n]))
        return false;
    *pos += n;
    return true;
}

static size_t skip_hspace(const char *m, size_t end, size_t pos)
{
    while (pos < end && is_hspace(m[pos]))
        pos++;
    return pos;
}

/* "def NAME(" at the line's first non-blank byte: the offset of '(' or 0. */
static size_t def_at(const char *m, const struct line *l, const char *name)
{
    size_t p = skip_hspace(m, l->end, l->off);
    if (!eat_word(m, l->end, &p, "def"))
        return 0;
    size_t q = skip_hspace(m, l->end, p);
    if (q == p || !eat_word(m, l->end, &q, name))
        return 0;
    q = skip_hspace(m, l->end, q);
    return q < l->end && m[q] == '(' ? q : 0;
}

/* The ')' that closes the '(' at `open` (code bytes only), or SIZE_MAX. */
static size_t matching_paren(const struct task__scan *s, size_t open)
{
    size_t depth = 0;
    for (size_t i = open; i < s->len; i++) {
        if (s->kind[i] != TASK__CODE)
            continue;
        char c = s->masked[i];
        if (c == '(' || c == '[' || c == '{') {
            depth++;
        } else if (c == ')' || c == ']' || c == '}') {
            if (--depth == 0)
                return i;
        }
    }
    return SIZE_MAX;
}

static bool has_word(const char *p, size_t n, const char *w)
{
    size_t wn = strlen(w);
    for (size_t i = 0; i + wn <= n; i++) {
        if (memcmp(p + i, w, wn) != 0)
            continue;
        if ((i == 0 || !is_ident((unsigned char)p[i - 1])) &&
            (i + wn == n || !is_ident((unsigned char)p[i + wn])))
            return true;
    }
    return false;
}

/*
 * The parameter list between the parentheses at open/close on one line:
 * comments dropped, whitespace runs made one space, no space inside
 * brackets or before ",:", one space after ",", no trailing comma.
 */
static char *normalise_params(const struct task__scan *s, size_t open, size_t close)
{
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    bool space = false;
    int rc = 0;
    for (size_t i = open + 1; i < close && !rc; i++) {
        char c = s->code[i];
        enum task__kind k = s->kind[i];
        if (k == TASK__COMMENT)
            continue;
        if (k == TASK__CODE &&
            (c == '\\' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f')) {
            space = true;
            continue;
        }
        if (space && b.len && !strchr("([{", b.data[b.len - 1]) && !strchr(")]},:", c))
            rc |= buf_addch(&b, ' ');
        if (k == TASK__STRING) {
            space = false;
            rc |= buf_addch(&b, c == '\n' || c == '\r' || c == '\t' ? ' ' : c);
            continue;
        }
        space = c == ',';
        rc |= buf_addch(&b, c);
    }
    ASSERT(!rc); /* internal buffer: only OOM could fail, and that aborts */
    while (b.len && (b.data[b.len - 1] == ',' || b.data[b.len - 1] == ' '))
        buf_truncate(&b, b.len - 1);
    return buf_detach(&b, NULL);
}

/* ---- naming ---- */

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

char *task__sanitize_name(const char *s, size_t len)
{
    if (len > TASK__NAME_MAX)
        len = TASK__NAME_MAX;
    if (len == 0)
        return xstrdup("task");
    char *out = xstrndup(s, len);
    for (size_t i = 0; i < len; i++)
        if (!name_char(out[i]) || (i == 0 && (out[i] == '-' || out[i] == '.')))
            out[i] = '_';
    return out;
}

bool task__valid_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > CA_LIMIT_ID || s[0] == '-' || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!name_char(s[i]))
            return false;
    return true;
}

void task__set_name(struct task *t, const char *name)
{
    char hex[HASH64_HEX_LEN + 1];
    hash64_hex(t->hash, hex);
    char *copy = xstrdup(name);
    free(t->name);
    free(t->id);
    t->name = copy;
    t->id = xstrfmt("%s-%.*s", t->name, TASK__ID_HASH_HEX, hex);
}

/* "dir/12_Foo.py" -> "12_Foo" (sanitised); "data.jsonl:3" -> "data.jsonl_3". */
static char *name_from_origin(const char *origin)
{
    struct sv base = sv_cstr(fs_basename(origin));
    if (sv_ends_with(base, SV_LIT(".py")))
        base.len -= 3;
    return task__sanitize_name(base.p, base.len);
}

/* ---- task_parse ---- */

/* "ORIGIN:L:C" for files, "ORIGIN (code line L, column C)" for dataset rows. */
static void where(char *out, size_t n, const char *origin, bool embedded, size_t line, size_t col)
{
    if (embedded && col)
        snprintf(out, n, "%s (code line %zu, column %zu)", origin, line, col);
    else if (embedded)
        snprintf(out, n, "%s (code line %zu)", origin, line);
    else if (col)
        snprintf(out, n, "%s:%zu:%zu", origin, line, col);
    else
        snprintf(out, n, "%s:%zu", origin, line);
}

static int check_bytes(const char *origin, bool embedded, const char *code, size_t len,
                       struct ca_err *err)
{
    char at[CA_ERR_MSG_MAX];
    size_t line, col;
    if (len > CA_LIMIT_TASK_BYTES)
        return err_setf(err, CA_ETOOBIG,
                        "%s: task source is %zu bytes, over the limit of %zu "
                        "(CA_LIMIT_TASK_BYTES)",
                        origin, len, (size_t)CA_LIMIT_TASK_BYTES);
    const char *nul = memchr(code, '\0', len);
    if (nul) {
        sv_line_col(sv_from(code, len), (size_t)(nul - code), &line, &col);
        where(at, sizeof(at), origin, embedded, line, col);
        return err_setf(err, CA_EPARSE, "%s: NUL byte in the task source (a text file expected)",
                        at);
    }
    size_t bad;
    if (!utf8_valid(code, len, &bad)) {
        sv_line_col(sv_from(code, len), bad, &line, &col);
        where(at, sizeof(at), origin, embedded, line, col);
        return err_setf(err, CA_EUTF8,
                        "%s: invalid UTF-8 (byte 0x%02x): task files must be UTF-8 text", at,
                        (unsigned char)code[bad]);
    }
    return 0;
}

struct layout {
    size_t model;      /* line index of the last top-level `class Model`, or SIZE_MAX */
    size_t model_open; /* its '(' or 0 */
    bool get_inputs, get_init_inputs;
};

static void find_top_level(const struct task__scan *s, const struct line *lines, size_t n,
                           struct layout *lay)
{
    const char *m = s->masked;
    lay->model = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        const struct line *l = &lines[i];
        if (!l->start || l->blank || l->indent != 0)
            continue;
        size_t p = l->off;
        if (eat_word(m, l->end, &p, "class")) {
            size_t q = skip_hspace(m, l->end, p);
            if (q > p && eat_word(m, l->end, &q, "Model")) {
                q = skip_hspace(m, l->end, q);
                lay->model = i;
                lay->model_open = q < l->end && m[q] == '(' ? q : 0;
            }
            continue;
        }
        if (def_at(m, l, "get_inputs"))
            lay->get_inputs = true;
        else if (def_at(m, l, "get_init_inputs"))
            lay->get_init_inputs = true;
    }
}

/*
 * Look through Model's body (the lines after `class Model` up to the next
 * top-level statement) at its own indentation for forward and __init__.
 */
static void read_model_body(const struct task__scan *s, const struct line *lines, size_t n,
                            size_t model, bool *forward, size_t *init_open)
{
    size_t indent = 0;
    *forward = false;
    *init_open = 0;
    for (size_t i = model + 1; i < n; i++) {
        const struct line *l = &lines[i];
        if (!l->start || l->blank)
            continue;
        if (l->indent == 0)
            break;
        if (!indent)
            indent = l->indent;
        if (l->indent != indent)
            continue;
        size_t open;
        if (def_at(s->masked, l, "forward"))
            *forward = true;
        else if (!*init_open && (open = def_at(s->masked, l, "__init__")))
            *init_open = open;
    }
}

static int check_layout(const char *origin, bool embedded, const struct task__scan *s,
                        struct task *t, struct ca_err *err)
{
    struct line *lines;
    size_t n = split_lines(s, &lines);
    struct layout lay = {0};
    char at[CA_ERR_MSG_MAX];
    int rc = 0;
    find_top_level(s, lines, n, &lay);
    if (lay.model == SIZE_MAX) {
        rc = err_setf(err, CA_EPARSE, "%s: no top-level `class Model(nn.Module)`: %s", origin,
                      TASK_FORMAT_HINT);
        goto out;
    }
    where(at, sizeof(at), origin, embedded, lay.model + 1, 0);
    size_t close = lay.model_open ? matching_paren(s, lay.model_open) : SIZE_MAX;
    if (close == SIZE_MAX ||
        !has_word(s->masked + lay.model_open, close - lay.model_open, "Module")) {
        rc = err_setf(err, CA_EPARSE, "%s: class Model does not derive from nn.Module: %s", at,
                      TASK_FORMAT_HINT);
        goto out;
    }
    bool forward;
    size_t init_open;
    read_model_body(s, lines, n, lay.model, &forward, &init_open);
    if (!forward) {
        rc = err_setf(err, CA_EPARSE,
                      "%s: class Model has no `def forward()` method: the computation a task "
                      "measures is Model.forward",
                      at);
        goto out;
    }
    if (!lay.get_inputs) {
        rc = err_setf(err, CA_EPARSE, "%s: no top-level `def get_inputs()`: %s", origin,
                      TASK_FORMAT_HINT);
        goto out;
    }
    if (!lay.get_init_inputs) {
        rc = err_setf(err, CA_EPARSE, "%s: no top-level `def get_init_inputs()`: %s", origin,
                      TASK_FORMAT_HINT);
        goto out;
    }
    size_t init_close = init_open ? matching_paren(s, init_open) : SIZE_MAX;
    t->init_signature =
        init_close == SIZE_MAX ? xstrdup("self") : normalise_params(s, init_open, init_close);
out:
    free(lines);
    return rc;
}

int task__parse(const char *origin, bool embedded, const char *code, size_t len, struct task *t,
                struct ca_err *err)
{
    memset(t, 0, sizeof(*t));
    int rc = check_bytes(origin, embedded, code, len, err);
    if (rc)
        return rc;
    struct task__scan s;
    task__scan_init(&s, code, len);
    rc = check_layout(origin, embedded, &s, t, err);
    if (rc) {
        task__scan_release(&s);
        task_release(t);
        return rc;
    }
    t->ops = task__derive_ops_scanned(&s, &t->nops);
    task__scan_release(&s);
    t->code = xstrndup(code, len);
    t->code_len = len;
    t->hash = hash64(code, len);
    t->origin = xstrdup(origin);
    t->ops_unlabelled = true;
    char *name = embedded ? xstrdup("task") : name_from_origin(origin);
    task__set_name(t, name);
    free(name);
    return 0;
}

int task_parse(const char *origin, const char *code, size_t len, struct task *t, struct ca_err *err)
{
    return task__parse(origin, false, code, len, t, err);
}

void task_release(struct task *t)
{
    if (!t)
        return;
    free(t->id);
    free(t->name);
    free(t->code);
    task_free_ops(t->ops, t->nops);
    free(t->data_source);
    free(t->origin);
    free(t->init_signature);
    memset(t, 0, sizeof(*t));
}
