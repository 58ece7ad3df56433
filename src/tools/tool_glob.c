/*
 * tool_glob.c - Glob (files by name pattern, newest first), and the glob
 * matcher and tree walker Glob and Grep share.
 *
 * Patterns: '*' (any characters but '/'), '?' (one character), '[...]'
 * (a class: ranges, '!' or '^' negates), '{a,b}' (alternatives, nested
 * allowed), '**' as a whole segment (any number of folders), '\' escapes.
 * As in shells, a name starting with '.' is matched only by a pattern
 * segment starting with '.', and '**' does not enter such folders.
 *
 * Matching: braces are expanded once at compile time (at most GLOB_ALTS
 * alternatives); each alternative is a list of segments matched against the
 * path's segments with the classic greedy algorithm (one backtrack point for
 * '**', one per segment for '*'), so a match is linear in the path length
 * times the pattern length, never exponential. A "partial" match answers
 * whether anything beneath a folder could match, which prunes the walk.
 *
 * The walk opens every folder with O_NOFOLLOW relative to its parent's fd,
 * starting from a folder opened through the confined root: symlinks are
 * reported as entries but never followed, so nothing outside the workspace
 * is listed. It is bounded in depth (CA_LIMIT_PATH_DEPTH) and entries
 * (TOOLS__WALK_MAX).
 */
#include "tools/tools_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/banned.h"

/* Alternatives one pattern may expand to. */
#define GLOB_ALTS 256
/* Matches Glob lists. */
#define GLOB_LIST_MAX 1000

/* ---- brace expansion ---- */

struct alts {
    char **v;
    size_t n, alloc;
};

/* Find the first brace group with a top-level comma: *open, *close. */
static bool find_group(const char *s, const char **open, const char **close)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            continue;
        }
        if (*p != '{')
            continue;
        int depth = 0;
        bool comma = false;
        for (const char *q = p; *q; q++) {
            if (*q == '\\' && q[1]) {
                q++;
                continue;
            }
            if (*q == '{')
                depth++;
            else if (*q == '}' && --depth == 0) {
                if (!comma)
                    break;
                *open = p;
                *close = q;
                return true;
            } else if (*q == ',' && depth == 1)
                comma = true;
        }
    }
    return false;
}

static int expand(const char *s, struct alts *out)
{
    const char *open, *close;
    if (!find_group(s, &open, &close)) {
        if (out->n == GLOB_ALTS)
            return CA_ETOOBIG;
        ALLOC_GROW(out->v, out->n + 1, out->alloc);
        out->v[out->n++] = xstrdup(s);
        return 0;
    }
    const char *alt = open + 1;
    int depth = 0;
    for (const char *q = open + 1; q <= close; q++) {
        if (*q == '\\' && q < close - 1) {
            q++;
            continue;
        }
        if (*q == '{') {
            depth++;
            continue;
        }
        if (*q == '}' && depth > 0) {
            depth--;
            continue;
        }
        if (!(q == close || (*q == ',' && depth == 0)))
            continue;
        char *one = xstrfmt("%.*s%.*s%s", (int)(open - s), s, (int)(q - alt), alt, close + 1);
        int rc = expand(one, out);
        free(one);
        if (rc)
            return rc;
        alt = q + 1;
    }
    return 0;
}

/* ---- matching ---- */

/* Decode one UTF-8 character (invalid bytes count as one character each). */
static size_t utf8_next(const char *s, size_t n, unsigned *cp)
{
    unsigned char c = (unsigned char)s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (len > n)
        len = 1;
    for (size_t i = 1; i < len; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            len = 1;
    if (len == 1) {
        *cp = c;
        return 1;
    }
    unsigned v = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++)
        v = v << 6 | ((unsigned char)s[i] & 0x3F);
    *cp = v;
    return len;
}

/*
 * Match the class at p[*pi] == '[' against character ch. Returns 1 match,
 * 0 no match (*pi advanced past the class either way), -1 malformed (no
 * closing ']': the caller treats '[' literally).
 */
static int class_match(struct sv p, size_t *pi, unsigned ch)
{
    size_t i = *pi + 1;
    bool neg = false, hit = false;
    if (i < p.len && (p.p[i] == '!' || p.p[i] == '^')) {
        neg = true;
        i++;
    }
    bool first = true;
    while (i < p.len && (p.p[i] != ']' || first)) {
        first = false;
        unsigned lo, hi;
        if (p.p[i] == '\\' && i + 1 < p.len)
            i++;
        i += utf8_next(p.p + i, p.len - i, &lo);
        hi = lo;
        if (i + 1 < p.len && p.p[i] == '-' && p.p[i + 1] != ']') {
            i++;
            if (p.p[i] == '\\' && i + 1 < p.len)
                i++;
            i += utf8_next(p.p + i, p.len - i, &hi);
        }
        if (ch >= lo && ch <= hi)
            hit = true;
    }
    if (i >= p.len)
        return -1;
    *pi = i + 1;
    return hit != neg;
}

/* One segment pattern against one name ('*' never crosses '/': names hold none). */
static bool seg_match(struct sv p, struct sv s)
{
    if (s.len && s.p[0] == '.' && !(p.len && p.p[0] == '.'))
        return false;
    size_t pi = 0, si = 0, star_p = SIZE_MAX, star_s = 0;
    while (si < s.len) {
        if (pi < p.len) {
            char c = p.p[pi];
            unsigned ch;
            size_t clen = utf8_next(s.p + si, s.len - si, &ch);
            if (c == '*') {
                star_p = ++pi;
                star_s = si;
                continue;
            }
            if (c == '?') {
                pi++;
                si += clen;
                continue;
            }
            if (c == '[') {
                size_t save = pi;
                int r = class_match(p, &pi, ch);
                if (r == 1) {
                    si += clen;
                    continue;
                }
                if (r == -1 && s.p[si] == '[') {
                    pi = save + 1;
                    si++;
                    continue;
                }
                pi = save;
            } else {
                size_t adv = 1;
                if (c == '\\' && pi + 1 < p.len) {
                    c = p.p[pi + 1];
                    adv = 2;
                }
                if (c == s.p[si]) {
                    pi += adv;
                    si++;
                    continue;
                }
            }
        }
        if (star_p == SIZE_MAX)
            return false;
        unsigned ch;
        pi = star_p;
        star_s += utf8_next(s.p + star_s, s.len - star_s, &ch);
        si = star_s;
    }
    while (pi < p.len && p.p[pi] == '*')
        pi++;
    return pi == p.len;
}

static bool is_dstar(struct sv seg)
{
    return seg.len == 2 && seg.p[0] == '*' && seg.p[1] == '*';
}

static bool alt_match(const struct tools__glob_alt *a, const struct sv *path, size_t ns,
                      bool partial)
{
    size_t np = a->nsegs, i = 0, j = 0, star_i = SIZE_MAX, star_j = 0;
    while (j < ns) {
        if (i < np && is_dstar(a->segs[i])) {
            star_i = ++i;
            star_j = j;
            continue;
        }
        if (i < np && seg_match(a->segs[i], path[j])) {
            i++;
            j++;
            continue;
        }
        if (star_i == SIZE_MAX || path[star_j].p[0] == '.')
            return false;
        i = star_i;
        j = ++star_j;
    }
    if (partial)
        return i < np || star_i != SIZE_MAX;
    while (i < np && is_dstar(a->segs[i]))
        i++;
    return i == np;
}

bool tools__glob_match(const struct tools__glob *g, const char *path, bool partial)
{
    struct sv segs[CA_LIMIT_PATH_DEPTH + 1];
    size_t ns = 0;
    struct sv rest = sv_cstr(path);
    while (rest.len) {
        struct sv seg = sv_split(&rest, '/');
        if (!seg.len)
            continue;
        if (ns == ARRAY_SIZE(segs))
            return false;
        segs[ns++] = seg;
    }
    for (size_t k = 0; k < g->nalts; k++)
        if (alt_match(&g->alts[k], segs, ns, partial))
            return true;
    return false;
}

int tools__glob_compile(const char *pattern, struct tools__glob *g, char *msg, size_t msgsz)
{
    memset(g, 0, sizeof(*g));
    struct alts a = {0};
    if (expand(pattern, &a)) {
        for (size_t i = 0; i < a.n; i++)
            free(a.v[i]);
        free(a.v);
        snprintf(msg, msgsz,
                 "the pattern expands to more than %d alternatives; use fewer {a,b} "
                 "groups",
                 GLOB_ALTS);
        return CA_EPARSE;
    }
    g->alts = xcalloc(a.n, sizeof(*g->alts));
    g->nalts = a.n;
    for (size_t i = 0; i < a.n; i++) {
        struct tools__glob_alt *alt = &g->alts[i];
        alt->text = a.v[i];
        if (strchr(alt->text, '/'))
            g->has_slash = true;
        size_t nsegs = 1;
        for (const char *c = alt->text; *c; c++)
            nsegs += *c == '/';
        alt->segs = xcalloc(nsegs, sizeof(*alt->segs));
        struct sv rest = sv_cstr(alt->text);
        while (rest.len) {
            struct sv seg = sv_split(&rest, '/');
            /* "a//b" and "./a" mean "a/b" and "a". */
            if (seg.len && !(seg.len == 1 && seg.p[0] == '.'))
                alt->segs[alt->nsegs++] = seg;
        }
    }
    free(a.v);
    return 0;
}

void tools__glob_release(struct tools__glob *g)
{
    for (size_t i = 0; i < g->nalts; i++) {
        free(g->alts[i].text);
        free(g->alts[i].segs);
    }
    free(g->alts);
    memset(g, 0, sizeof(*g));
}

/* ---- walking ---- */

struct walk {
    tools__walk_fn fn;
    void *data;
    struct tools__walk_stats *stats;
    char rel[CA_LIMIT_PATH + 1];
    int rc;
};

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Walk the directory open as fd (consumed); false to stop everything. */
static bool walk_dir(struct walk *w, int fd, size_t rel_len, int depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return true;
    }
    char **names = NULL;
    size_t n = 0, alloc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (w->stats->visited + n >= TOOLS__WALK_MAX)
            break;
        ALLOC_GROW(names, n + 1, alloc);
        names[n++] = xstrdup(e->d_name);
    }
    if (n)
        qsort(names, n, sizeof(*names), cmp_names);
    bool go = true;
    for (size_t i = 0; go && i < n; i++) {
        if (w->stats->visited >= TOOLS__WALK_MAX) {
            w->stats->capped = true;
            go = false;
            break;
        }
        w->stats->visited++;
        struct stat st;
        if (fstatat(dirfd(d), names[i], &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        size_t nl = strlen(names[i]);
        if (rel_len + 1 + nl > CA_LIMIT_PATH)
            continue;
        size_t len = rel_len;
        if (len)
            w->rel[len++] = '/';
        memcpy(w->rel + len, names[i], nl + 1);
        len += nl;
        struct tools__walk_entry ent = {w->rel, names[i], dirfd(d), &st};
        int r = w->fn(w->data, &ent);
        if (r < 0) {
            w->rc = r;
            go = false;
        } else if (r == 0 && S_ISDIR(st.st_mode) && depth < CA_LIMIT_PATH_DEPTH) {
            int sub = openat(dirfd(d), names[i],
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
            if (sub >= 0)
                go = walk_dir(w, sub, len, depth + 1);
        }
        w->rel[rel_len] = '\0';
    }
    if (!go && w->stats->visited >= TOOLS__WALK_MAX)
        w->stats->capped = true;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return go;
}

int tools__walk(int basefd, tools__walk_fn fn, void *data, struct tools__walk_stats *stats)
{
    struct walk *w = xcalloc(1, sizeof(*w));
    w->fn = fn;
    w->data = data;
    w->stats = stats;
    stats->visited = 0;
    stats->capped = false;
    walk_dir(w, basefd, 0, 0);
    int rc = w->rc;
    free(w);
    return rc;
}

/* ---- the Glob tool ---- */

struct glob_hit {
    char *rel;
    struct timespec mtime;
};

struct glob_run {
    const struct tools__glob *g;
    struct glob_hit *hits;
    size_t n, alloc;
};

static int glob_visit(void *data, const struct tools__walk_entry *e)
{
    struct glob_run *r = data;
    if (S_ISDIR(e->st->st_mode))
        return tools__glob_match(r->g, e->rel, true) ? 0 : 1;
    if (!tools__glob_match(r->g, e->rel, false))
        return 0;
    ALLOC_GROW(r->hits, r->n + 1, r->alloc);
    r->hits[r->n].rel = xstrdup(e->rel);
    r->hits[r->n++].mtime = e->st->st_mtim;
    return 0;
}

static int cmp_hits(const void *pa, const void *pb)
{
    const struct glob_hit *a = pa, *b = pb;
    if (a->mtime.tv_sec != b->mtime.tv_sec)
        return a->mtime.tv_sec < b->mtime.tv_sec ? 1 : -1;
    if (a->mtime.tv_nsec != b->mtime.tv_nsec)
        return a->mtime.tv_nsec < b->mtime.tv_nsec ? 1 : -1;
    return strcmp(a->rel, b->rel);
}

/* Strip "/workspace/" and "./" from a pattern; refuse other absolute ones and "..". */
static int pattern_rel(const char *tool, const char *pat, const char **out, struct tool_result *res)
{
    size_t wl = strlen(TOOLS__WORKSPACE);
    if (pat[0] == '/') {
        if (strncmp(pat, TOOLS__WORKSPACE, wl) != 0 || (pat[wl] != '/' && pat[wl] != '\0')) {
            tool_result_errorf(res,
                               "%s: pattern '%.200s' is an absolute path outside the workspace; "
                               "give a pattern relative to /workspace (e.g. \"**/*.cu\") or "
                               "starting with \"/workspace/\"",
                               tool, pat);
            return CA_EESCAPE;
        }
        pat += wl;
    }
    while (*pat == '/' || (pat[0] == '.' && pat[1] == '/'))
        pat += *pat == '/' ? 1 : 2;
    for (const char *s = pat; *s;) {
        const char *end = strchrnul(s, '/');
        if (end - s == 2 && s[0] == '.' && s[1] == '.') {
            tool_result_errorf(res,
                               "%s: pattern '%.200s' has a '..' component; patterns match inside "
                               "/workspace only",
                               tool, pat);
            return CA_EESCAPE;
        }
        s = *end ? end + 1 : end;
    }
    *out = pat;
    return 0;
}

static int run_glob(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    size_t plen;
    const char *pattern = tools__str(args, "pattern", &plen), *rel;
    if (memchr(pattern, '\0', plen))
        return tool_result_errorf(res, "Glob: pattern contains a NUL byte");
    if (pattern_rel("Glob", pattern, &rel, res))
        return 0;
    if (!*rel)
        return tool_result_errorf(res, "Glob: pattern is empty; give one such as \"**/*.cu\"");
    struct tools__path base;
    if (tools__path_arg("Glob", args, "path", true, &base, res))
        return 0;
    struct tools__glob g;
    char msg[256];
    if (tools__glob_compile(rel, &g, msg, sizeof(msg)))
        return tool_result_errorf(res, "Glob: %s", msg);

    int fd = fs_root_open_at(&ctx->root, base.rel[0] ? base.rel : ".",
                             O_RDONLY | O_DIRECTORY | O_NONBLOCK, 0, NULL);
    if (fd < 0) {
        if (fd == -ENOTDIR)
            tool_result_errorf(res,
                               "Glob: path %s is a file, not a folder; give a folder (or "
                               "leave path out to search all of /workspace)",
                               base.shown);
        else
            tools__fs_error(res, "Glob", fd, &base, "open");
        tools__glob_release(&g);
        return 0;
    }
    struct glob_run run = {&g, NULL, 0, 0};
    struct tools__walk_stats stats;
    int rc = tools__walk(fd, glob_visit, &run, &stats);
    tools__glob_release(&g);
    if (rc)
        BUG("glob walk stopped with %d", rc);
    if (run.n)
        qsort(run.hits, run.n, sizeof(*run.hits), cmp_hits);

    size_t listed = 0;
    for (; listed < run.n && listed < GLOB_LIST_MAX; listed++)
        if (tools__outf(res, "%s/%s\n", base.shown, run.hits[listed].rel))
            break;
    if (run.n == 0)
        tools__out_tail(res, "No files match '%.200s' in %s\n", pattern, base.shown);
    else if (listed < run.n)
        tools__out_tail(res,
                        "[showing the %zu most recently modified of %zu matches; narrow the "
                        "pattern or the path to see others]\n",
                        listed, run.n);
    if (stats.capped)
        tools__out_tail(res, "[the search stopped after %d entries; give a narrower path]\n",
                        TOOLS__WALK_MAX);
    json_object_set_new(res->fields, "path", json_string(base.shown));
    json_object_set_new(res->fields, "matches", json_integer((json_int_t)run.n));
    json_object_set_new(res->fields, "truncated", json_boolean(listed < run.n || stats.capped));
    for (size_t i = 0; i < run.n; i++)
        free(run.hits[i].rel);
    free(run.hits);
    return 0;
}

static const struct tools__arg glob_args[] = {
    {"pattern", TOOLS__STRING, true,
     "The glob pattern, relative to path (or starting with \"/workspace/\"): e.g. \"**/*.cu\", "
     "\"kernels/*.{cu,cpp}\", \"*.py\".",
     .max_len = 4096},
    {"path", TOOLS__STRING, false,
     "The folder to search in (default: /workspace), \"/workspace/NAME\" or relative to "
     "/workspace."},
    {NULL},
};

const struct tools__spec tools__glob_spec = {
    "Glob",
    "Find files in the workspace by name pattern. Supports * (any characters except /), ? (one "
    "character), [abc] and [a-z] classes, {a,b} alternatives, and ** for any number of folders "
    "(\"**/*.cu\" finds .cu files at any depth; \"*.cu\" only directly in path). Names starting "
    "with '.' match only patterns that start with '.'. Returns /workspace/... paths, most "
    "recently modified first, at most 1000. Symlinked folders are not entered.",
    glob_args,
    run_glob,
};
