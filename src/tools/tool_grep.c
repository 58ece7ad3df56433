/*
 * tool_grep.c - Grep: PCRE2 search over workspace files with ripgrep-like
 * output (path:line:text, context lines as path-line-text, "--" between
 * groups), three output modes, glob and type filters, and a head limit.
 *
 * Safety: files are found by the shared walker (no symlinks, nothing
 * outside the workspace, hidden files and folders skipped unless named);
 * binary files (a NUL in the first 8 KiB, or invalid UTF-8) and files over
 * TOOLS__FILE_MAX are skipped and counted; the regex runs with PCRE2's match,
 * depth and heap limits so a catastrophic pattern fails with a message
 * instead of hanging, and the whole search has a time budget.
 *
 * Matching: the file is searched as one subject (JIT when available) with
 * PCRE2_MULTILINE so ^ and $ work per line. Without `multiline` a match
 * must lie within one line, as in ripgrep: a hit that crosses a newline is
 * re-checked with the subject cut at the end of its first line. With
 * `multiline`, '.' also matches newlines and a match may span lines (all its
 * lines are reported). After a hit the search resumes at the next line, so
 * each line counts once; the work is linear in the file size plus the
 * regex's own cost.
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include "tools/tools_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/banned.h"

/* PCRE2 limits per search call: backtracking steps, nesting depth, heap (KiB). */
#define GREP_MATCH_LIMIT 10000000
#define GREP_DEPTH_LIMIT 100000
#define GREP_HEAP_LIMIT_KIB (64 * 1024)
/* Time one Grep call may take, in microseconds. */
#define GREP_BUDGET_US (10 * 1000000)
/* Context lines at most (-A, -B, -C). */
#define GREP_CONTEXT_MAX 100

enum grep_mode { MODE_FILES, MODE_CONTENT, MODE_COUNT };

static const char *const mode_names[] = {"content", "files_with_matches", "count", NULL};
static const char *const type_names[] = {"c", "cpp", "cuda", "py", "md", "json", "txt", NULL};

/* Extensions per type (the index matches type_names). */
static const char *const type_exts[][10] = {
    {"c", "h", NULL},
    {"cpp", "cc", "cxx", "c++", "hpp", "hh", "hxx", "h", "inl", NULL},
    {"cu", "cuh", NULL},
    {"py", "pyi", NULL},
    {"md", "markdown", NULL},
    {"json", NULL},
    {"txt", NULL},
};

/* A run of matching lines. */
struct span {
    size_t first, last; /* 1-based line numbers */
};

struct grep {
    struct tool_ctx *ctx;
    const char *tool;
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    enum grep_mode mode;
    bool multiline, numbers;
    size_t before, after;
    int64_t head_limit; /* 0: none */
    int type;           /* index in type_names, or -1 */
    struct tools__glob glob;
    bool have_glob, glob_negated;
    const char *base_shown; /* "/workspace/dir" */
    int64_t deadline;

    struct buf data;    /* the current file */
    struct span *spans; /* the current file's matches */
    size_t nspans, spans_alloc;
    size_t *starts; /* line start offsets of the current file */
    size_t starts_alloc;

    size_t searched, skipped_binary, skipped_large, files, lines, entries;
    bool printed_group, full, head_hit;
    int rc; /* a refusal (res already filled) */
    struct tool_result *res;
};

static bool type_ok(const struct grep *g, const char *name)
{
    if (g->type < 0)
        return true;
    const char *dot = strrchr(name, '.');
    if (!dot)
        return false;
    for (size_t i = 0; type_exts[g->type][i]; i++)
        if (strcmp(dot + 1, type_exts[g->type][i]) == 0)
            return true;
    return false;
}

static bool glob_ok(const struct grep *g, const char *rel, const char *name)
{
    if (!g->have_glob)
        return true;
    bool m = tools__glob_match(&g->glob, g->glob.has_slash ? rel : name, false);
    return m != g->glob_negated;
}

static void pcre_error(struct grep *g, int code, const char *shown)
{
    if (code == PCRE2_ERROR_MATCHLIMIT || code == PCRE2_ERROR_DEPTHLIMIT ||
        code == PCRE2_ERROR_HEAPLIMIT || code == PCRE2_ERROR_JIT_STACKLIMIT) {
        tool_result_errorf(g->res,
                           "%s: the regular expression is too expensive: it hit PCRE2's "
                           "backtracking limit while searching %s; simplify it (nested "
                           "quantifiers such as (a+)+ or (.*)* backtrack exponentially)",
                           g->tool, shown);
    } else {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof(msg));
        tool_result_errorf(g->res, "%s: searching %s failed: %s", g->tool, shown, (char *)msg);
    }
    g->rc = CA_EPARSE;
}

static void add_span(struct grep *g, size_t first, size_t last)
{
    if (g->nspans && g->spans[g->nspans - 1].last >= first) {
        if (last > g->spans[g->nspans - 1].last)
            g->spans[g->nspans - 1].last = last;
        return;
    }
    ALLOC_GROW(g->spans, g->nspans + 1, g->spans_alloc);
    g->spans[g->nspans++] = (struct span){first, last};
}

static size_t nl_count(const char *p, size_t n)
{
    size_t c = 0;
    const char *end = p + n;
    while ((p = memchr(p, '\n', (size_t)(end - p)))) {
        c++;
        p++;
    }
    return c;
}

/* Find the matching lines of g->data into g->spans; false on a regex failure. */
static bool search(struct grep *g, const char *shown)
{
    const char *s = g->data.data;
    size_t len = g->data.len, pos = 0, cursor = 0, line = 1;
    g->nspans = 0;
    while (pos < len) {
        int rc = pcre2_match(g->re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, g->md, g->mc);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            pcre_error(g, rc, shown);
            return false;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(g->md);
        size_t ms = ov[0], me = ov[1];
        if (me < ms)
            me = ms; /* \K can move the start past the end */
        const char *nl = memchr(s + ms, '\n', len - ms);
        size_t le = nl ? (size_t)(nl - s) : len; /* end of the first line */
        if (!g->multiline && me > le) {
            /* The hit crosses a newline: does its first line match on its own? */
            const char *ls_p = s + ms;
            while (ls_p > s + pos && ls_p[-1] != '\n')
                ls_p--;
            rc = pcre2_match(g->re, (PCRE2_SPTR)s, le, (size_t)(ls_p - s), PCRE2_NO_UTF_CHECK,
                             g->md, g->mc);
            if (rc == PCRE2_ERROR_NOMATCH) {
                if (!nl)
                    break;
                pos = le + 1;
                continue;
            }
            if (rc < 0) {
                pcre_error(g, rc, shown);
                return false;
            }
            ov = pcre2_get_ovector_pointer(g->md);
            ms = ov[0];
            me = ov[1] < ms ? ms : ov[1];
        }
        line += nl_count(s + cursor, ms - cursor);
        cursor = ms;
        size_t last = line + (me > ms ? nl_count(s + ms, me - ms - 1) : 0);
        add_span(g, line, last);
        if (g->mode == MODE_FILES)
            break;
        /* Resume at the start of the line after the match's last line. */
        const char *end_nl =
            memchr(s + (me > ms ? me - 1 : ms), '\n', len - (me > ms ? me - 1 : ms));
        if (!end_nl)
            break;
        line += nl_count(s + cursor, (size_t)(end_nl - s) + 1 - cursor);
        cursor = (size_t)(end_nl - s) + 1;
        pos = cursor;
        if (ca_now_us() > g->deadline)
            break;
    }
    return true;
}

/* Count one output entry against head_limit; false when the limit is reached. */
static bool take_entry(struct grep *g)
{
    if (g->head_limit && (int64_t)g->entries >= g->head_limit) {
        g->head_hit = true;
        return false;
    }
    g->entries++;
    return true;
}

static bool emit(struct grep *g, const char *fmt, ...) CA_PRINTF(2, 3);
static bool emit(struct grep *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        BUG("out of memory formatting Grep output");
    bool ok = tools__out(g->res, s, (size_t)n) == 0;
    free(s);
    if (!ok)
        g->full = true;
    return ok;
}

/* Print the current file's matches with context, ripgrep style. */
static void print_content(struct grep *g, const char *shown)
{
    const char *s = g->data.data;
    size_t len = g->data.len, nlines = 0;
    /* Line starts, so any line can be printed directly. */
    for (size_t off = 0; off < len;) {
        ALLOC_GROW(g->starts, nlines + 2, g->starts_alloc);
        g->starts[nlines++] = off;
        const char *nl = memchr(s + off, '\n', len - off);
        off = nl ? (size_t)(nl - s) + 1 : len;
    }
    ALLOC_GROW(g->starts, nlines + 1, g->starts_alloc);
    g->starts[nlines] = len;

    struct buf one;
    buf_init(&one, BUF_MAX_INTERNAL);
    size_t printed_to = 0; /* last line printed in this file */
    for (size_t k = 0; k < g->nspans && !g->full && !g->head_hit; k++) {
        const struct span *sp = &g->spans[k];
        size_t from = sp->first > g->before ? sp->first - g->before : 1;
        size_t to = sp->last + g->after;
        if (to > nlines)
            to = nlines;
        if (from <= printed_to)
            from = printed_to + 1;
        bool ctx_on = g->before || g->after;
        if (ctx_on && g->printed_group && from > printed_to + 1 && !emit(g, "--\n"))
            break;
        for (size_t l = from; l <= to; l++) {
            /* A line is a match line if some span covers it. */
            bool is_match = false;
            for (size_t q = k; q < g->nspans && g->spans[q].first <= l; q++)
                if (l <= g->spans[q].last) {
                    is_match = true;
                    break;
                }
            if (!take_entry(g))
                break;
            size_t a = g->starts[l - 1], b = g->starts[l];
            if (b > a && s[b - 1] == '\n')
                b--;
            if (b > a && s[b - 1] == '\r')
                b--;
            char sep = is_match ? ':' : '-';
            buf_reset(&one);
            int rc = g->numbers ? buf_addf(&one, "%s%c%zu%c", shown, sep, l, sep)
                                : buf_addf(&one, "%s%c", shown, sep);
            if (rc || tools__add_line(&one, sv_from(s + a, b - a)))
                BUG("internal buffer overflow");
            if (tools__out(g->res, one.data, one.len)) {
                g->full = true;
                break;
            }
            printed_to = l;
            g->printed_group = true;
        }
        /* Later spans inside what was printed are done. */
        while (k + 1 < g->nspans && g->spans[k + 1].last <= printed_to)
            k++;
    }
    buf_release(&one);
}

/* Search one regular file open as fd (consumed); shown is its /workspace path. */
static void grep_file(struct grep *g, int fd, const char *shown)
{
    buf_reset(&g->data);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return;
    }
    if ((uint64_t)st.st_size > TOOLS__FILE_MAX ||
        fs_read_fd(fd, TOOLS__FILE_MAX, &g->data, shown, NULL)) {
        close(fd);
        g->skipped_large++;
        return;
    }
    close(fd);
    if (tools__is_binary(g->data.data, g->data.len)) {
        g->skipped_binary++;
        return;
    }
    g->searched++;
    if (!search(g, shown) || !g->nspans)
        return;
    g->files++;
    for (size_t k = 0; k < g->nspans; k++)
        g->lines += g->spans[k].last - g->spans[k].first + 1;
    if (g->mode == MODE_FILES) {
        if (take_entry(g))
            emit(g, "%s\n", shown);
    } else if (g->mode == MODE_COUNT) {
        size_t c = 0;
        for (size_t k = 0; k < g->nspans; k++)
            c += g->spans[k].last - g->spans[k].first + 1;
        if (take_entry(g))
            emit(g, "%s:%zu\n", shown, c);
    } else {
        print_content(g, shown);
    }
}

static int grep_visit(void *data, const struct tools__walk_entry *e)
{
    struct grep *g = data;
    if (g->rc || g->full || g->head_hit)
        return -1;
    if (ca_now_us() > g->deadline)
        return -1;
    if (e->name[0] == '.')
        return 1; /* hidden: skipped, folders not entered */
    if (S_ISDIR(e->st->st_mode) || !S_ISREG(e->st->st_mode))
        return 0;
    if (!type_ok(g, e->name) || !glob_ok(g, e->rel, e->name))
        return 0;
    int fd = openat(e->dirfd, e->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return 0;
    char shown[CA_LIMIT_PATH + 32];
    snprintf(shown, sizeof(shown), "%s/%s", g->base_shown, e->rel);
    grep_file(g, fd, shown);
    return 0;
}

static int compile(struct grep *g, const json_t *args)
{
    size_t plen;
    const char *pat = tools__str(args, "pattern", &plen);
    uint32_t opts = PCRE2_UTF | PCRE2_MULTILINE;
    if (tools__bool(args, "-i", false))
        opts |= PCRE2_CASELESS;
    if (g->multiline)
        opts |= PCRE2_DOTALL;
    int code;
    PCRE2_SIZE off;
    g->re = pcre2_compile((PCRE2_SPTR)pat, plen, opts, &code, &off, NULL);
    if (!g->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof(msg));
        tool_result_errorf(g->res,
                           "%s: invalid regular expression at offset %zu: %s (PCRE2 syntax: "
                           "escape literal ( ) [ ] { } . * + ? | \\ with a backslash)",
                           g->tool, (size_t)off, (char *)msg);
        return CA_EPARSE;
    }
    (void)pcre2_jit_compile(g->re, PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
    g->md = pcre2_match_data_create_from_pattern(g->re, NULL);
    g->mc = pcre2_match_context_create(NULL);
    if (!g->md || !g->mc)
        BUG("out of memory creating PCRE2 match data");
    pcre2_set_match_limit(g->mc, GREP_MATCH_LIMIT);
    pcre2_set_depth_limit(g->mc, GREP_DEPTH_LIMIT);
    pcre2_set_heap_limit(g->mc, GREP_HEAP_LIMIT_KIB);
    return 0;
}

static int setup(struct grep *g, const json_t *args)
{
    const char *mode = tools__str(args, "output_mode", NULL);
    g->mode = !mode || strcmp(mode, "files_with_matches") == 0 ? MODE_FILES
              : strcmp(mode, "content") == 0                   ? MODE_CONTENT
                                                               : MODE_COUNT;
    g->multiline = tools__bool(args, "multiline", false);
    g->numbers = tools__bool(args, "-n", true);
    int64_t c = tools__int(args, "-C", 0);
    g->before = (size_t)tools__int(args, "-B", c);
    g->after = (size_t)tools__int(args, "-A", c);
    g->head_limit = tools__int(args, "head_limit", 0);
    g->type = -1;
    const char *type = tools__str(args, "type", NULL);
    for (int i = 0; type && type_names[i]; i++)
        if (strcmp(type, type_names[i]) == 0)
            g->type = i;
    const char *glob = tools__str(args, "glob", NULL);
    if (glob && *glob) {
        g->glob_negated = glob[0] == '!';
        char msg[256];
        if (tools__glob_compile(glob + g->glob_negated, &g->glob, msg, sizeof(msg))) {
            tool_result_errorf(g->res, "%s: glob: %s", g->tool, msg);
            return CA_EPARSE;
        }
        g->have_glob = true;
    }
    return compile(g, args);
}

static void finish(struct grep *g, const char *pattern, size_t plen)
{
    struct tool_result *res = g->res;
    if (g->head_hit)
        tools__out_tail(res, "[head_limit %lld reached; more results exist]\n",
                        (long long)g->head_limit);
    if (g->full)
        tools__out_tail(res,
                        "[output truncated at the %zu KiB tool output limit; narrow the search "
                        "(path, glob, type) or use head_limit]\n",
                        CA_LIMIT_TOOL_OUTPUT / CA_KIB);
    if (!g->files)
        tools__out_tail(res, "No matches for /%.*s/ in %s (%zu files searched)\n",
                        (int)tools__utf8_cut(pattern, plen, 200), pattern, g->base_shown,
                        g->searched);
    if (g->skipped_binary || g->skipped_large)
        tools__out_tail(res, "(skipped %zu binary and %zu oversized files)\n", g->skipped_binary,
                        g->skipped_large);
    if (ca_now_us() > g->deadline)
        tools__out_tail(res, "[the search stopped at its %d s time limit; results are partial]\n",
                        GREP_BUDGET_US / 1000000);
    json_object_set_new(res->fields, "path", json_string(g->base_shown));
    json_object_set_new(res->fields, "mode",
                        json_string(g->mode == MODE_FILES     ? "files_with_matches"
                                    : g->mode == MODE_CONTENT ? "content"
                                                              : "count"));
    json_object_set_new(res->fields, "files", json_integer((json_int_t)g->files));
    if (g->mode != MODE_FILES)
        json_object_set_new(res->fields, "matches", json_integer((json_int_t)g->lines));
    json_object_set_new(res->fields, "searched", json_integer((json_int_t)g->searched));
    json_object_set_new(res->fields, "truncated",
                        json_boolean(g->head_hit || g->full || ca_now_us() > g->deadline));
}

static int run_grep(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    struct grep *g = xcalloc(1, sizeof(*g));
    g->ctx = ctx;
    g->tool = "Grep";
    g->res = res;
    g->deadline = ca_now_us() + GREP_BUDGET_US;
    buf_init(&g->data, TOOLS__FILE_MAX);
    struct tools__path base;
    size_t plen;
    const char *pattern = tools__str(args, "pattern", &plen);
    if (tools__path_arg("Grep", args, "path", true, &base, res) || setup(g, args))
        goto out;
    g->base_shown = base.shown;

    int fd = fs_root_open_at(&ctx->root, base.rel[0] ? base.rel : ".",
                             O_RDONLY | O_NONBLOCK | O_NOCTTY, 0, NULL);
    if (fd < 0) {
        tools__fs_error(res, "Grep", fd, &base, "open");
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        tools__fs_error(res, "Grep", -errno, &base, "open");
        close(fd);
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        struct tools__walk_stats stats;
        (void)tools__walk(fd, grep_visit, g, &stats);
    } else {
        /* One file named explicitly: searched whatever the filters say. */
        grep_file(g, fd, base.shown);
    }
    if (g->rc)
        goto out;
    finish(g, pattern, plen);
out:
    if (g->have_glob)
        tools__glob_release(&g->glob);
    pcre2_match_data_free(g->md);
    pcre2_match_context_free(g->mc);
    pcre2_code_free(g->re);
    buf_release(&g->data);
    free(g->spans);
    free(g->starts);
    free(g);
    return 0;
}

static const struct tools__arg grep_args[] = {
    {"pattern", TOOLS__STRING, true,
     "The regular expression (PCRE2 syntax, like ripgrep's): e.g. \"__global__\\\\s+void\", "
     "\"def forward\". Escape literal ( ) [ ] { } . * + ? | with a backslash."},
    {"path", TOOLS__STRING, false,
     "The file or folder to search (default: /workspace), \"/workspace/NAME\" or relative to "
     "/workspace."},
    {"glob", TOOLS__STRING, false,
     "Only search files whose name matches this glob (e.g. \"*.cu\", \"*.{cu,cpp}\"; with a '/' "
     "it matches the path under the searched folder; a leading '!' excludes).",
     .max_len = 4096},
    {"type", TOOLS__STRING, false,
     "Only search files of this type: c (.c .h), cpp (.cpp .cc .hpp .h ...), cuda (.cu .cuh), "
     "py, md, json, txt.",
     .choices = type_names},
    {"output_mode", TOOLS__STRING, false,
     "\"files_with_matches\" (default): the paths of files that match; \"content\": the matching "
     "lines as path:line:text (honours -n, -A, -B, -C); \"count\": path:number of matching lines.",
     .choices = mode_names},
    {"-i", TOOLS__BOOLEAN, false, "Case-insensitive search."},
    {"-n", TOOLS__BOOLEAN, false, "Show line numbers in content mode (default true)."},
    {"-A", TOOLS__INTEGER, false, "Lines of context after each match (content mode).", .min = 0,
     .max = GREP_CONTEXT_MAX},
    {"-B", TOOLS__INTEGER, false, "Lines of context before each match (content mode).", .min = 0,
     .max = GREP_CONTEXT_MAX},
    {"-C", TOOLS__INTEGER, false, "Lines of context before and after each match (content mode).",
     .min = 0, .max = GREP_CONTEXT_MAX},
    {"multiline", TOOLS__BOOLEAN, false,
     "Let matches span lines: '.' matches newlines too (default false: a match lies within one "
     "line)."},
    {"head_limit", TOOLS__INTEGER, false,
     "Return at most this many output lines (content), files (files_with_matches) or entries "
     "(count).",
     .min = 1, .max = 1000000},
    {NULL},
};

const struct tools__spec tools__grep_spec = {
    "Grep",
    "Search file contents in the workspace with a regular expression (PCRE2, ripgrep-like). "
    "Searches folders recursively (hidden files, binary files and symlinks are skipped). "
    "output_mode \"files_with_matches\" (default) lists matching files; \"content\" shows "
    "matching lines as /workspace/path:line:text with optional context (-A/-B/-C; context lines "
    "use '-' and groups are separated by \"--\"); \"count\" gives matching lines per file. Filter "
    "with glob or type; limit with head_limit. Output is capped at 64 KiB. Use this instead of "
    "grep or rg in Bash.",
    grep_args,
    run_grep,
};
