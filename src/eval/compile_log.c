/*
 * compile_log.c - compiler output for the agent: paths mapped back to
 * workspace-relative names, then trimmed to the diagnostics that matter.
 *
 * Design: the output of nvcc (EDG front end, ptxas) and gcc is classified
 * line by line. A "block" is one diagnostic line (error, warning or note)
 * with the lines that follow it (source excerpt, caret, nvcc's "detected
 * during" instantiation list); gcc's context lines ("In function",
 * "In instantiation of", "required from") precede the diagnostic they
 * belong to. Trimming keeps the blocks of one kind (errors, or warnings when
 * there are no errors), each with a bounded excerpt, bounded instantiation
 * context and at most two notes, and drops include stacks and summaries.
 * Nothing here allocates beyond the caller's bounded buffers.
 */
#include "eval/compile_internal.h"

#include <string.h>

#include "core/banned.h"

/* Per kept diagnostic: source excerpt lines, instantiation lines, notes. */
#define EXCERPT_MAX 3
#define INST_MAX 3
#define NOTES_MAX 2
/* lld's ">>> defined at" / ">>> referenced by" lines under a link error. */
#define LLD_MAX 8
/* gcc context lines kept before a diagnostic: the first and the last two. */
#define CONTEXT_LAST 2
/* Lines of a log with no recognisable diagnostics. */
#define RAW_LINES_MAX (2 * COMPILE_ERROR_LINES)

static bool starts_with(struct sv s, const char *prefix)
{
    return sv_starts_with(s, sv_cstr(prefix));
}

static bool contains(struct sv s, const char *needle)
{
    return sv_find(s, sv_cstr(needle)) >= 0;
}

/* ---- normalization ---- */

/* nvcc's "path(12): rest" -> "path:12: rest"; the path has no spaces. */
static int add_mapped_nvcc_loc(struct buf *out, struct sv line, bool *done)
{
    *done = false;
    long open = sv_find_ch(line, '(');
    if (open <= 0)
        return 0;
    for (long i = 0; i < open; i++)
        if (line.p[i] == ' ' || line.p[i] == '\t')
            return 0;
    size_t d = (size_t)open + 1;
    while (d < line.len && line.p[d] >= '0' && line.p[d] <= '9')
        d++;
    if (d == (size_t)open + 1 || d + 2 >= line.len || line.p[d] != ')' || line.p[d + 1] != ':' ||
        line.p[d + 2] != ' ')
        return 0;
    *done = true;
    if (buf_add(out, line.p, (size_t)open) || buf_addch(out, ':') ||
        buf_add(out, line.p + open + 1, d - (size_t)open - 1) ||
        buf_add(out, line.p + d + 1, line.len - d - 1))
        return CA_ETOOBIG;
    return 0;
}

int compile__log_normalize(struct sv raw, const char *const *strip, struct buf *out)
{
    struct buf tmp, line_buf;
    buf_init(&tmp, BUF_MAX_INTERNAL);
    buf_init(&line_buf, BUF_MAX_INTERNAL);
    int rc = 0;
    struct sv rest = raw, line;
    while (!rc && sv_next_line(&rest, &line, NULL)) {
        buf_reset(&tmp);
        for (size_t i = 0; i < line.len && !rc;) {
            bool stripped = false;
            for (size_t k = 0; strip && strip[k]; k++) {
                size_t n = strlen(strip[k]);
                if (n && n <= line.len - i && memcmp(line.p + i, strip[k], n) == 0) {
                    i += n;
                    stripped = true;
                    break;
                }
            }
            if (!stripped)
                rc = buf_addch(&tmp, line.p[i++]);
        }
        if (rc)
            break;
        struct sv m = sv_from(tmp.data, tmp.len);
        while (sv_chop_prefix(&m, SV_LIT("./")))
            ;
        buf_reset(&line_buf);
        bool mapped;
        rc = add_mapped_nvcc_loc(&line_buf, m, &mapped);
        if (!rc && !mapped)
            rc = buf_add(&line_buf, m.p, m.len);
        if (rc)
            break;
        size_t n = line_buf.len;
        bool cut = false;
        if (n > COMPILE__LINE_MAX) {
            n = COMPILE__LINE_MAX;
            /* Never end inside a UTF-8 sequence. */
            while (n > 0 && ((unsigned char)line_buf.data[n] & 0xC0) == 0x80)
                n--;
            cut = true;
        }
        if (buf_add(out, line_buf.data, n) || (cut && buf_addstr(out, "...")) ||
            buf_addch(out, '\n'))
            rc = CA_ETOOBIG;
    }
    buf_release(&tmp);
    buf_release(&line_buf);
    return rc;
}

/* ---- classification ---- */

enum line_kind {
    L_BLANK,
    L_ERROR,
    L_WARNING,
    L_NOTE,
    L_CONTEXT, /* gcc: "In function", "In instantiation of", "required from" */
    L_INCLUDE, /* "In file included from", "                 from" */
    L_INST,    /* nvcc: "detected during", "instantiation of ... at line" */
    L_LLD,     /* lld: ">>> defined at a.o" */
    L_SUMMARY, /* "2 errors detected in the compilation of", "compilation terminated." */
    L_TEXT,    /* excerpts, carets, anything else */
};

/*
 * Does a diagnostic keyword start at s.p[at]? It must follow the line start,
 * a space or a colon, and be followed by optional spaces, an optional nvcc
 * number ("#177-D") and a colon: "error:", "warning #177-D:", "ptxas fatal   :".
 */
static bool keyword_at(struct sv s, size_t at, size_t kwlen)
{
    if (at > 0 && s.p[at - 1] != ' ' && s.p[at - 1] != ':')
        return false;
    size_t i = at + kwlen;
    while (i < s.len && s.p[i] == ' ')
        i++;
    if (i < s.len && s.p[i] == '#') {
        i++;
        while (i < s.len && s.p[i] != ':' && s.p[i] != ' ')
            i++;
    }
    return i < s.len && s.p[i] == ':';
}

/* The earliest diagnostic keyword in the line decides its kind. */
static enum line_kind diagnostic_kind(struct sv s)
{
    static const struct {
        const char *kw;
        enum line_kind kind;
    } kws[] = {{"error", L_ERROR},
               {"fatal", L_ERROR},
               {"warning", L_WARNING},
               {"note", L_NOTE},
               {"remark", L_NOTE}};
    size_t best = s.len;
    enum line_kind kind = L_TEXT;
    for (size_t k = 0; k < ARRAY_SIZE(kws); k++) {
        size_t kwlen = strlen(kws[k].kw);
        for (size_t at = 0; at + kwlen <= s.len && at < best; at++)
            if (memcmp(s.p + at, kws[k].kw, kwlen) == 0 && keyword_at(s, at, kwlen)) {
                best = at;
                kind = kws[k].kind;
                break;
            }
    }
    if (kind != L_TEXT)
        return kind;
    /* The linker: "/usr/bin/ld: cannot find -lfoo", "undefined reference to `x'". */
    if (contains(s, "undefined reference to") || contains(s, "multiple definition of"))
        return L_ERROR;
    long ld = sv_find(s, SV_LIT("ld: "));
    if (ld >= 0 && (ld == 0 || s.p[ld - 1] == '/')) {
        for (long i = 0; i < ld; i++)
            if (s.p[i] == ' ')
                return L_TEXT;
        return L_ERROR;
    }
    return L_TEXT;
}

static enum line_kind classify(struct sv line)
{
    struct sv t = sv_trim(line);
    if (t.len == 0)
        return L_BLANK;
    bool indented = line.p[0] == ' ' || line.p[0] == '\t';
    if (starts_with(line, ">>> "))
        return L_LLD;
    if (starts_with(line, "In file included from ") ||
        (indented && starts_with(t, "from ") && (t.p[t.len - 1] == ',' || t.p[t.len - 1] == ':')))
        return L_INCLUDE;
    if (contains(line, "errors detected in the compilation of") ||
        contains(line, "error detected in the compilation of") ||
        sv_eq_cstr(t, "compilation terminated."))
        return L_SUMMARY;
    if (indented) {
        if (starts_with(t, "detected during") || starts_with(t, "instantiation of") ||
            contains(t, "instantiation contexts not shown") ||
            contains(t, "instantiation context not shown"))
            return L_INST;
        return L_TEXT;
    }
    enum line_kind k = diagnostic_kind(line);
    if (k != L_TEXT)
        return k;
    static const char *const context[] = {
        ": In ",          ": At global scope", ":   required ",      ":   recursively required",
        ":   [ skipping", ":   in ",           "In substitution of", "In instantiation of",
    };
    for (size_t i = 0; i < ARRAY_SIZE(context); i++)
        if (contains(line, context[i]))
            return L_CONTEXT;
    return L_TEXT;
}

/* ---- trimming ---- */

static int emit(struct buf *out, struct sv line, struct compile__trim_result *res)
{
    if (buf_add(out, line.p, line.len) || buf_addch(out, '\n'))
        return CA_ETOOBIG;
    res->lines++;
    return 0;
}

/* gcc context lines gathered before a diagnostic: keep the first and the last two. */
struct pending {
    struct sv first;
    struct sv last[CONTEXT_LAST];
    size_t n;
};

static void pending_add(struct pending *p, struct sv line)
{
    if (p->n == 0)
        p->first = line;
    else {
        memmove(&p->last[0], &p->last[1], sizeof(p->last[0]) * (CONTEXT_LAST - 1));
        p->last[CONTEXT_LAST - 1] = line;
    }
    p->n++;
}

static int pending_emit(struct pending *p, struct buf *out, struct compile__trim_result *res)
{
    int rc = 0;
    if (p->n > 0)
        rc = emit(out, p->first, res);
    size_t tail = p->n - 1 < CONTEXT_LAST ? p->n - 1 : CONTEXT_LAST;
    for (size_t i = CONTEXT_LAST - tail; !rc && p->n > 0 && i < CONTEXT_LAST; i++)
        rc = emit(out, p->last[i], res);
    p->n = 0;
    return rc;
}

int compile__log_trim(struct sv log, struct buf *out, struct compile__trim_result *res)
{
    *res = (struct compile__trim_result){0};
    bool any_error = false, any_warning = false;
    struct sv rest = log, line;
    while (sv_next_line(&rest, &line, NULL)) {
        enum line_kind k = classify(line);
        any_error = any_error || k == L_ERROR;
        any_warning = any_warning || k == L_WARNING;
    }
    res->had_errors = any_error;
    int rc = 0;
    if (!any_error && !any_warning) {
        rest = log;
        while (!rc && res->lines < RAW_LINES_MAX && sv_next_line(&rest, &line, NULL))
            if (sv_trim(line).len)
                rc = emit(out, line, res);
        return rc;
    }

    enum line_kind want = any_error ? L_ERROR : L_WARNING;
    enum { OUTSIDE, IN_HEAD, IN_NOTE } state = OUTSIDE;
    size_t excerpt = 0, inst = 0, notes = 0, lld = 0;
    struct pending ctx = {0};
    rest = log;
    while (!rc && sv_next_line(&rest, &line, NULL)) {
        enum line_kind k = classify(line);
        switch (k) {
        case L_BLANK:
            /* nvcc ends each diagnostic with a blank line; what follows is not its excerpt. */
            state = OUTSIDE;
            break;
        case L_INCLUDE:
        case L_SUMMARY:
            break;
        case L_CONTEXT:
            state = OUTSIDE;
            pending_add(&ctx, line);
            break;
        case L_ERROR:
        case L_WARNING:
            if (k != want) {
                state = OUTSIDE;
                ctx.n = 0;
                break;
            }
            rc = pending_emit(&ctx, out, res);
            if (!rc)
                rc = emit(out, line, res);
            state = IN_HEAD;
            excerpt = inst = notes = lld = 0;
            break;
        case L_NOTE:
            if (state == OUTSIDE) {
                ctx.n = 0;
                break;
            }
            state = IN_NOTE;
            if (notes++ < NOTES_MAX)
                rc = emit(out, line, res);
            break;
        case L_INST:
            if (state != OUTSIDE && inst++ < INST_MAX)
                rc = emit(out, line, res);
            break;
        case L_LLD:
            if (state == IN_HEAD && lld++ < LLD_MAX)
                rc = emit(out, line, res);
            break;
        case L_TEXT:
            if (state == IN_HEAD && excerpt++ < EXCERPT_MAX)
                rc = emit(out, line, res);
            break;
        }
    }
    return rc;
}

int compile__append_lines(struct buf *out, struct sv text, size_t *budget, size_t *omitted)
{
    struct sv line;
    while (sv_next_line(&text, &line, NULL)) {
        if (*budget == 0) {
            (*omitted)++;
            continue;
        }
        if (buf_add(out, line.p, line.len) || buf_addch(out, '\n'))
            return CA_ETOOBIG;
        (*budget)--;
    }
    return 0;
}

/* ---- ptxas -v: what each kernel uses ---- */

/* One <length><name> of an Itanium name at *p (advanced past it); false when there is none. */
static bool mangled_part(struct sv *p, struct sv *out)
{
    size_t k = 0, len = 0;
    while (k < p->len && p->p[k] >= '0' && p->p[k] <= '9' && len < 4096)
        len = len * 10 + (size_t)(p->p[k++] - '0');
    if (k == 0 || len == 0 || k + len > p->len)
        return false;
    *out = sv_sub(*p, k, len);
    *p = sv_sub(*p, k + len, p->len);
    return true;
}

void compile__kernel_name(struct sv mangled, char *out, size_t out_len)
{
    struct sv p = mangled, part;
    size_t n = 0;
    out[0] = '\0';
    if (!sv_chop_prefix(&p, SV_LIT("_Z"))) {
        snprintf(out, out_len, SV_FMT, SV_ARG(mangled));
        return;
    }
    bool nested = sv_chop_prefix(&p, SV_LIT("N"));
    while (mangled_part(&p, &part)) {
        /* the anonymous namespace every kernel file should use: not worth showing */
        if (!sv_starts_with(part, SV_LIT("_GLOBAL__N")))
            n += (size_t)snprintf(out + n, n < out_len ? out_len - n : 0, "%s" SV_FMT,
                                  n ? "::" : "", SV_ARG(part));
        if (!nested || n >= out_len)
            break;
    }
    if (n == 0 || n >= out_len)
        snprintf(out, out_len, SV_FMT, SV_ARG(mangled));
}

static int64_t number_before(struct sv line, const char *what)
{
    const char *at = memmem(line.p, line.len, what, strlen(what));
    if (!at)
        return -1;
    const char *q = at;
    while (q > line.p && q[-1] == ' ')
        q--;
    const char *d = q;
    while (d > line.p && d[-1] >= '0' && d[-1] <= '9')
        d--;
    if (d == q)
        return -1;
    int64_t v = 0;
    for (; d < q && v < INT64_MAX / 10; d++)
        v = v * 10 + (*d - '0');
    return v;
}

bool compile__ptxas_line(struct sv line)
{
    struct sv t = sv_ltrim(line);
    return sv_starts_with(t, SV_LIT("ptxas info")) ||
           (memmem(t.p, t.len, "bytes stack frame", 17) && memmem(t.p, t.len, "spill", 5));
}

size_t compile__ptxas_parse(struct sv log, struct compile_kernel_info *out, size_t max)
{
    size_t n = 0;
    struct compile_kernel_info *cur = NULL;
    struct sv rest = log, line;
    while (sv_next_line(&rest, &line, NULL)) {
        static const char entry[] = "Compiling entry function '";
        static const char props[] = "Function properties for ";
        const char *at = memmem(line.p, line.len, entry, sizeof(entry) - 1);
        if (at) {
            struct sv name = sv_from(at + sizeof(entry) - 1,
                                     line.len - (size_t)(at + sizeof(entry) - 1 - line.p));
            long q = sv_find_ch(name, '\'');
            if (q > 0)
                name = sv_sub(name, 0, (size_t)q);
            cur = NULL;
            for (size_t i = 0; i < n && !cur; i++)
                if (strncmp(out[i].mangled, name.p, name.len) == 0 &&
                    out[i].mangled[name.len] == '\0')
                    cur = &out[i];
            if (!cur && n < max && name.len < sizeof(out[0].mangled)) {
                cur = &out[n++];
                *cur = (struct compile_kernel_info){.registers = -1};
                memcpy(cur->mangled, name.p, name.len);
                cur->mangled[name.len] = '\0';
                compile__kernel_name(name, cur->name, sizeof(cur->name));
            }
            continue;
        }
        at = memmem(line.p, line.len, props, sizeof(props) - 1);
        if (at) {
            /* properties of a device function are not a kernel's: only follow entries */
            struct sv name = sv_trim(sv_from(at + sizeof(props) - 1,
                                             line.len - (size_t)(at + sizeof(props) - 1 - line.p)));
            if (cur &&
                !(strncmp(cur->mangled, name.p, name.len) == 0 && cur->mangled[name.len] == '\0'))
                cur = NULL;
            continue;
        }
        if (!cur)
            continue;
        int64_t v;
        if ((v = number_before(line, "bytes stack frame")) >= 0)
            cur->stack_bytes = v;
        if ((v = number_before(line, "bytes spill stores")) >= 0)
            cur->spill_store_bytes = v;
        if ((v = number_before(line, "bytes spill loads")) >= 0)
            cur->spill_load_bytes = v;
        if ((v = number_before(line, "registers")) >= 0)
            cur->registers = (int)v;
        if ((v = number_before(line, "bytes smem")) >= 0)
            cur->shared_bytes = v;
    }
    return n;
}
