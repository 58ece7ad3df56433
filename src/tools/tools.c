/*
 * tools.c - the tool registry and dispatch, tool results, episode state
 * (read set, todo list, shell callbacks), path mapping and the file helpers
 * every file tool shares, and the shell tools' tables (their work is
 * delegated to struct tool_shell_ops).
 *
 * Invariants:
 * - Every path the agent gives is normalised lexically first (tools__path_arg:
 *   "/workspace/" stripped, "." and repeated slashes dropped, ".." and other
 *   absolute paths refused), then opened only through the confined root
 *   (fs_root_*), so no call reaches outside the workspace, whatever
 *   symlinks the agent planted with Bash.
 * - Messages for the model never carry host paths: a file is always named as
 *   the agent would type it ("/workspace/...").
 * - The read set maps a path with its symlinks resolved (the "key") to the
 *   content hash seen by the last Read or write; Write, Edit, MultiEdit and
 *   NotebookEdit change an existing file only when its current content still
 *   has that hash. Writes go to the key, so a symlink inside the workspace
 *   is written through, and the read-only check sees the real target.
 * - res->text never passes CA_LIMIT_TOOL_OUTPUT: tools fill it up to
 *   TOOLS__BODY_MAX and keep the rest for their closing marker.
 */
#include "tools/tools.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/log.h"
#include "tools/tools_internal.h"
#include "workspace/workspace.h"
#include "core/banned.h"

const char *const tool_names[] = {
    "Bash",      "BashOutput", "KillBash", "Read",         "Write",     "Edit",
    "MultiEdit", "Glob",       "Grep",     "NotebookEdit", "TodoWrite", NULL,
};

static const struct tools__spec *const specs[] = {
    &tools__bash_spec,  &tools__bash_output_spec,   &tools__kill_bash_spec,  &tools__read_spec,
    &tools__write_spec, &tools__edit_spec,          &tools__multi_edit_spec, &tools__glob_spec,
    &tools__grep_spec,  &tools__notebook_edit_spec, &tools__todo_write_spec,
};

const struct tools__spec *tools__find(const char *name)
{
    for (size_t i = 0; i < ARRAY_SIZE(specs); i++)
        if (strcmp(specs[i]->name, name) == 0)
            return specs[i];
    return NULL;
}

json_t *tool_schemas(void)
{
    json_t *a = json_array();
    for (size_t i = 0; i < ARRAY_SIZE(specs); i++)
        json_array_append_new(a, tools__schema(specs[i]));
    return a;
}

/* ---- results ---- */

void tool_result_init(struct tool_result *r)
{
    r->is_error = false;
    buf_init(&r->text, CA_LIMIT_TOOL_OUTPUT);
    r->fields = json_object();
}

void tool_result_release(struct tool_result *r)
{
    buf_release(&r->text);
    json_decref(r->fields);
    r->fields = NULL;
}

int tool_result_errorf(struct tool_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        BUG("out of memory formatting a tool message");
    r->is_error = true;
    buf_reset(&r->text);
    if (buf_add(&r->text, s, tools__utf8_cut(s, (size_t)n, r->text.max)))
        BUG("tool message does not fit its buffer");
    free(s);
    return 0;
}

/* The text as a JSON string, invalid UTF-8 bytes replaced by U+FFFD. */
static json_t *text_json(const struct buf *t)
{
    size_t bad;
    if (tools__utf8_valid(t->data, t->len, &bad))
        return json_stringn(t->data, t->len);
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    const char *p = t->data;
    size_t n = t->len;
    while (!utf8_valid(p, n, &bad)) {
        if (buf_add(&b, p, bad) || buf_addstr(&b, "\xef\xbf\xbd"))
            BUG("internal buffer overflow");
        p += bad + 1;
        n -= bad + 1;
    }
    if (buf_add(&b, p, n))
        BUG("internal buffer overflow");
    json_t *s = json_stringn(b.data, b.len);
    buf_release(&b);
    return s;
}

json_t *tool_result_to_json(const struct tool_result *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "is_error", json_boolean(r->is_error));
    json_object_set_new(o, "text", text_json(&r->text));
    const char *k;
    json_t *v;
    if (!r->fields)
        return o;
    json_object_foreach(r->fields, k, v)
    {
        if (!json_object_get(o, k))
            json_object_set(o, k, v);
    }
    return o;
}

/* ---- text helpers ---- */

int tools__out(struct tool_result *res, const char *p, size_t n)
{
    if (res->text.len + n > TOOLS__BODY_MAX)
        return CA_ETOOBIG;
    if (buf_add(&res->text, p, n))
        BUG("tool text over its limit below the body budget");
    return 0;
}

int tools__outf(struct tool_result *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        BUG("out of memory formatting tool output");
    int rc = tools__out(res, s, (size_t)n);
    free(s);
    return rc;
}

void tools__out_tail(struct tool_result *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vaddf(&res->text, fmt, ap);
    va_end(ap);
    (void)rc; /* markers are short and the body budget leaves them room */
}

size_t tools__utf8_cut(const char *p, size_t n, size_t max)
{
    if (n <= max)
        return n;
    size_t k = max;
    while (k > 0 && ((unsigned char)p[k] & 0xC0) == 0x80)
        k--;
    return k;
}

/* Characters (code points) in p[0..n), counting lead bytes. */
static size_t utf8_chars(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

int tools__add_line(struct buf *b, struct sv line)
{
    if (line.len <= TOOLS__LINE_MAX) /* fewer bytes than the limit: fewer characters too */
        return buf_add(b, line.p, line.len) ? CA_ETOOBIG : buf_addch(b, '\n');
    /* Find the byte where character TOOLS__LINE_MAX starts. */
    size_t chars = 0, i = 0;
    for (; i < line.len; i++) {
        if (((unsigned char)line.p[i] & 0xC0) != 0x80 && chars++ == TOOLS__LINE_MAX)
            break;
    }
    if (i == line.len)
        return buf_add(b, line.p, line.len) ? CA_ETOOBIG : buf_addch(b, '\n');
    size_t more = utf8_chars(line.p + i, line.len - i);
    int rc = buf_add(b, line.p, i);
    if (!rc)
        rc = buf_addf(b, "\xe2\x80\xa6 [line truncated: %zu more characters]\n", more);
    return rc;
}

int tools__add_numbered(struct buf *b, size_t lineno, struct sv line)
{
    /* "%6zu\t" by hand: Read formats thousands of these per call. */
    char num[32];
    size_t i = sizeof(num);
    num[--i] = '\t';
    do {
        num[--i] = (char)('0' + lineno % 10);
        lineno /= 10;
    } while (lineno);
    while (sizeof(num) - i < 7)
        num[--i] = ' ';
    size_t before = b->len;
    int rc = buf_add(b, num + i, sizeof(num) - i);
    if (!rc)
        rc = tools__add_line(b, line);
    if (rc)
        buf_truncate(b, before);
    return rc;
}

/* Length of the ASCII prefix of p, eight bytes at a time. */
static size_t ascii_prefix(const char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof(w));
        if (w & 0x8080808080808080ull)
            break;
    }
    while (i < n && !((unsigned char)p[i] & 0x80))
        i++;
    return i;
}

bool tools__utf8_valid(const char *p, size_t n, size_t *bad)
{
    size_t a = ascii_prefix(p, n);
    if (a == n)
        return true;
    if (utf8_valid(p + a, n - a, bad))
        return true;
    if (bad)
        *bad += a;
    return false;
}

bool tools__is_binary(const char *p, size_t n)
{
    if (memchr(p, '\0', n < TOOLS__BINARY_PROBE ? n : TOOLS__BINARY_PROBE))
        return true;
    return !tools__utf8_valid(p, n, NULL);
}

size_t tools__count_lines(const char *p, size_t n)
{
    size_t lines = 0;
    const char *end = p + n;
    for (const char *q = p; q < end; q++) {
        q = memchr(q, '\n', (size_t)(end - q));
        if (!q)
            break;
        lines++;
    }
    if (n && p[n - 1] != '\n')
        lines++;
    return lines;
}

/* ---- argument access ---- */

const char *tools__str(const json_t *args, const char *key, size_t *len)
{
    const json_t *v = json_object_get(args, key);
    if (!json_is_string(v)) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = json_string_length(v);
    return json_string_value(v);
}

int64_t tools__int(const json_t *args, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(args, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

bool tools__bool(const json_t *args, const char *key, bool dflt)
{
    const json_t *v = json_object_get(args, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* ---- read set ---- */

static void read_set_clear(struct tool_ctx *ctx)
{
    for (size_t i = 0; i < ctx->reads_cap; i++)
        FREE_AND_NULL(ctx->reads[i].key);
    ctx->nreads = 0;
}

static struct tools__read *read_slot(const struct tool_ctx *ctx, const char *key)
{
    size_t mask = ctx->reads_cap - 1;
    for (size_t i = hash64(key, strlen(key)) & mask;; i = (i + 1) & mask) {
        struct tools__read *r = &ctx->reads[i];
        if (!r->key || strcmp(r->key, key) == 0)
            return r;
    }
}

static void read_set_grow(struct tool_ctx *ctx)
{
    struct tools__read *old = ctx->reads;
    size_t old_cap = ctx->reads_cap;
    ctx->reads_cap = old_cap ? old_cap * 2 : 64;
    ctx->reads = xcalloc(ctx->reads_cap, sizeof(*ctx->reads));
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key)
            *read_slot(ctx, old[i].key) = old[i];
    free(old);
}

void tools__read_set_put(struct tool_ctx *ctx, const char *key, struct hash128 h)
{
    if (ctx->nreads >= TOOLS__READ_SET_MAX)
        read_set_clear(ctx);
    if ((ctx->nreads + 1) * 4 > ctx->reads_cap * 3)
        read_set_grow(ctx);
    struct tools__read *r = read_slot(ctx, key);
    if (!r->key) {
        r->key = xstrdup(key);
        ctx->nreads++;
    }
    r->hash = h;
}

const struct hash128 *tools__read_set_get(const struct tool_ctx *ctx, const char *key)
{
    if (!ctx->nreads)
        return NULL;
    const struct tools__read *r = read_slot(ctx, key);
    return r->key ? &r->hash : NULL;
}

/* ---- paths ---- */

/* Up to 200 bytes of s for a message, cut on a character boundary. */
#define SHOW_MAX 200
#define SHOW(s, n) (int)tools__utf8_cut((s), (n), SHOW_MAX), (s), ((n) > SHOW_MAX ? "..." : "")

/*
 * Normalise s (len bytes, already free of "/workspace") into out: no "." or
 * empty components. Returns 0, CA_EESCAPE for "..", CA_ETOOBIG past the
 * depth limit.
 */
static int normalise(const char *s, size_t len, char *out)
{
    const char *q = s, *end = s + len;
    size_t o = 0;
    int depth = 0;
    while (q < end) {
        while (q < end && *q == '/')
            q++;
        if (q == end)
            break;
        const char *c = q;
        while (q < end && *q != '/')
            q++;
        size_t cl = (size_t)(q - c);
        if (cl == 1 && c[0] == '.')
            continue;
        if (cl == 2 && c[0] == '.' && c[1] == '.')
            return CA_EESCAPE;
        if (++depth > CA_LIMIT_PATH_DEPTH)
            return CA_ETOOBIG;
        if (o)
            out[o++] = '/';
        memcpy(out + o, c, cl);
        o += cl;
    }
    out[o] = '\0';
    return 0;
}

static const char path_rule[] = "paths live under " TOOLS__WORKSPACE ": give \"" TOOLS__WORKSPACE
                                "/NAME\" or a path relative to it, "
                                "such as \"kernels/my_kernel.cu\"";

int tools__path_arg(const char *tool, const json_t *args, const char *key, bool allow_root,
                    struct tools__path *p, struct tool_result *res)
{
    size_t len;
    const char *s = tools__str(args, key, &len);
    p->exists = false;
    if (!s) {
        s = "";
        len = 0;
    }
    if (memchr(s, '\0', len)) {
        tool_result_errorf(res, "%s: %s contains a NUL byte; %s", tool, key, path_rule);
        return CA_EPARSE;
    }
    if (len > CA_LIMIT_PATH) {
        tool_result_errorf(res, "%s: %s is %zu bytes long, over the limit of %d; %s", tool, key,
                           len, CA_LIMIT_PATH, path_rule);
        return CA_ETOOBIG;
    }
    const char *q = s;
    size_t qlen = len;
    size_t wl = strlen(TOOLS__WORKSPACE);
    if (len && s[0] == '/') {
        if (len < wl || memcmp(s, TOOLS__WORKSPACE, wl) != 0 || (len > wl && s[wl] != '/')) {
            tool_result_errorf(res, "%s: %s '%.*s%s' is outside the workspace; %s", tool, key,
                               SHOW(s, len), path_rule);
            return CA_EESCAPE;
        }
        q += wl;
        qlen -= wl;
    }
    int rc = normalise(q, qlen, p->rel);
    if (rc == CA_EESCAPE) {
        tool_result_errorf(res,
                           "%s: %s '%.*s%s' has a '..' component, which would leave the "
                           "workspace; %s",
                           tool, key, SHOW(s, len), path_rule);
        return rc;
    }
    if (rc) {
        tool_result_errorf(res, "%s: %s '%.*s%s' has more than %d components", tool, key,
                           SHOW(s, len), CA_LIMIT_PATH_DEPTH);
        return rc;
    }
    if (!p->rel[0] && !allow_root) {
        if (!len)
            tool_result_errorf(res,
                               "%s: %s is empty; give a file path such as "
                               "\"" TOOLS__WORKSPACE "/model_new.py\"",
                               tool, key);
        else
            tool_result_errorf(res,
                               "%s: %s names the workspace directory itself; give a file "
                               "path such as \"" TOOLS__WORKSPACE "/model_new.py\"",
                               tool, key);
        return CA_EPARSE;
    }
    snprintf(p->shown, sizeof(p->shown), "%s%s%s", TOOLS__WORKSPACE, p->rel[0] ? "/" : "", p->rel);
    snprintf(p->key, sizeof(p->key), "%s", p->rel);
    return 0;
}

/* The path of fd (beneath the root) relative to the root, from /proc. */
static int fd_rel(const struct tool_ctx *ctx, int fd, char *out, size_t outsz)
{
    char link[64], real[CA_LIMIT_PATH + 1];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof(real) - 1);
    if (n < 0)
        return -errno;
    if ((size_t)n >= sizeof(real) - 1)
        return -ENAMETOOLONG;
    real[n] = '\0';
    size_t rl = strlen(ctx->root_real);
    if (strcmp(ctx->root_real, "/") == 0)
        rl = 0;
    if (strncmp(real, ctx->root_real, rl) != 0 || (real[rl] != '/' && real[rl] != '\0'))
        return CA_EESCAPE;
    const char *rest = real + rl;
    while (*rest == '/')
        rest++;
    if ((size_t)snprintf(out, outsz, "%s", rest) >= outsz)
        return -ENAMETOOLONG;
    return 0;
}

int tools__resolve(struct tool_ctx *ctx, const char *tool, struct tools__path *p,
                   struct tool_result *res)
{
    char key[CA_LIMIT_PATH + 1];
    snprintf(p->key, sizeof(p->key), "%s", p->rel);
    p->exists = false;
    int fd = fs_root_open_at(&ctx->root, p->rel[0] ? p->rel : ".", O_PATH, 0, NULL);
    if (fd >= 0) {
        p->exists = true;
        int rc = fd_rel(ctx, fd, key, sizeof(key));
        close(fd);
        if (rc == CA_EESCAPE)
            return tools__fs_error(res, tool, rc, p, "open");
        if (!rc)
            snprintf(p->key, sizeof(p->key), "%s", key);
        return 0;
    }
    if (fd == CA_EESCAPE)
        return tools__fs_error(res, tool, fd, p, "open");
    if (fd != -ENOENT)
        return 0; /* the operation itself reports it */
    /* A new file: resolve its parent. */
    const char *slash = strrchr(p->rel, '/');
    char parent[CA_LIMIT_PATH + 1];
    snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - p->rel) : 1,
             slash ? p->rel : ".");
    fd = fs_root_open_at(&ctx->root, parent, O_PATH | O_DIRECTORY, 0, NULL);
    if (fd == CA_EESCAPE)
        return tools__fs_error(res, tool, fd, p, "open");
    if (fd < 0)
        return 0;
    int rc = fd_rel(ctx, fd, key, sizeof(key));
    close(fd);
    if (rc == CA_EESCAPE)
        return tools__fs_error(res, tool, rc, p, "open");
    if (!rc) {
        const char *base = slash ? slash + 1 : p->rel;
        if ((size_t)snprintf(p->key, sizeof(p->key), "%s%s%s", key, key[0] ? "/" : "", base) >=
            sizeof(p->key))
            snprintf(p->key, sizeof(p->key), "%s", p->rel);
    }
    return 0;
}

bool tools__read_only(const struct tool_ctx *ctx, const char *rel)
{
    for (size_t i = 0; i < ctx->nro; i++) {
        size_t n = strlen(ctx->ro[i]);
        if (strncmp(rel, ctx->ro[i], n) == 0 && (rel[n] == '\0' || rel[n] == '/'))
            return true;
    }
    return false;
}

/* The identity of rel beneath the root (symlinks inside followed). */
static struct tools__file_id file_id(const struct tool_ctx *ctx, const char *rel)
{
    struct tools__file_id id = {0, 0, false};
    int fd = fs_root_open_at(&ctx->root, rel, O_PATH, 0, NULL);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0)
        id = (struct tools__file_id){st.st_dev, st.st_ino, true};
    if (fd >= 0)
        close(fd);
    return id;
}

int tools__check_writable(const struct tool_ctx *ctx, const char *tool, const struct tools__path *p,
                          struct tool_result *res)
{
    static const char rule[] = "is read-only in this workspace (it is part of the task "
                               "infrastructure); write your code in model_new.py or kernels/";
    if (tools__read_only(ctx, p->rel)) {
        tool_result_errorf(res, "%s: %s %s", tool, p->shown, rule);
        return CA_EESCAPE;
    }
    if (tools__read_only(ctx, p->key)) {
        tool_result_errorf(res, "%s: %s resolves to " TOOLS__WORKSPACE "/%s, which %s", tool,
                           p->shown, p->key, rule);
        return CA_EESCAPE;
    }
    if (!p->exists)
        return 0;
    /* The same file by identity: covers symlinked folders even where keys
     * cannot be resolved (no /proc). */
    struct tools__file_id id = file_id(ctx, p->key);
    for (size_t i = 0; id.valid && i < ctx->nro; i++) {
        if (ctx->ro_ids[i].valid && ctx->ro_ids[i].dev == id.dev && ctx->ro_ids[i].ino == id.ino) {
            tool_result_errorf(res, "%s: %s is the file " TOOLS__WORKSPACE "/%s, which %s", tool,
                               p->shown, ctx->ro[i], rule);
            return CA_EESCAPE;
        }
    }
    return 0;
}

int tools__fs_error(struct tool_result *res, const char *tool, int code,
                    const struct tools__path *p, const char *doing)
{
    switch (code) {
    case CA_EESCAPE:
        tool_result_errorf(res,
                           "%s: %s leads outside " TOOLS__WORKSPACE " through a symlink; tools "
                           "only reach files inside " TOOLS__WORKSPACE,
                           tool, p->shown);
        break;
    case -ENOENT:
        tool_result_errorf(res, "%s: %s does not exist (Glob lists files, e.g. pattern \"**/*\")",
                           tool, p->shown);
        break;
    case -ENOTDIR:
        tool_result_errorf(res, "%s: cannot %s %s: a part of the path is a file, not a folder",
                           tool, doing, p->shown);
        break;
    case -EISDIR:
        tool_result_errorf(res, "%s: %s is a directory; give a file path", tool, p->shown);
        break;
    case -ENOSPC:
    case -EDQUOT:
        tool_result_errorf(res,
                           "%s: cannot %s %s: the workspace is out of disk space; delete "
                           "files you no longer need",
                           tool, doing, p->shown);
        break;
    default:
        tool_result_errorf(res, "%s: cannot %s %s: %s", tool, doing, p->shown, ca_strerror(code));
        break;
    }
    return code;
}

int tools__load(struct tool_ctx *ctx, const char *tool, const struct tools__path *p,
                bool missing_ok, struct buf *b, struct stat *st, struct tool_result *res)
{
    int fd = fs_root_open_at(&ctx->root, p->rel[0] ? p->rel : ".", O_RDONLY | O_NOCTTY | O_NONBLOCK,
                             0, NULL);
    if (fd < 0) {
        if (fd == -ENOENT && missing_ok)
            return fd;
        return tools__fs_error(res, tool, fd, p, "open");
    }
    int rc = 0;
    if (fstat(fd, st) != 0) {
        rc = tools__fs_error(res, tool, -errno, p, "read");
    } else if (S_ISDIR(st->st_mode)) {
        if (strcmp(tool, "Read") == 0)
            tool_result_errorf(res,
                               "%s: %s is a directory; list it with Glob (pattern \"%s/*\") or "
                               "Bash (ls %s)",
                               tool, p->shown, p->shown, p->shown);
        else
            tool_result_errorf(res, "%s: %s is a directory; give a file path", tool, p->shown);
        rc = -EISDIR;
    } else if (!S_ISREG(st->st_mode)) {
        tool_result_errorf(res, "%s: %s is not a regular file (a device, FIFO or socket)", tool,
                           p->shown);
        rc = -EINVAL;
    } else if ((uint64_t)st->st_size > TOOLS__FILE_MAX) {
        tool_result_errorf(res,
                           "%s: %s is %lld bytes, over the %zu MiB this tool handles; look at "
                           "parts of it with Bash (head, sed -n, grep)",
                           tool, p->shown, (long long)st->st_size, TOOLS__FILE_MAX / CA_MIB);
        rc = CA_ETOOBIG;
    } else {
        rc = fs_read_fd(fd, TOOLS__FILE_MAX, b, p->rel, NULL);
        if (rc)
            tools__fs_error(res, tool, rc, p, "read");
    }
    close(fd);
    return rc;
}

int tools__check_fresh(const struct tool_ctx *ctx, const char *tool, const struct tools__path *p,
                       const struct buf *content, struct tool_result *res)
{
    const struct hash128 *h = tools__read_set_get(ctx, p->key);
    if (!h) {
        tool_result_errorf(res,
                           "%s: %s already exists and has not been Read in this episode; Read it "
                           "first (files are changed only after you have seen them)",
                           tool, p->shown);
        return CA_EPARSE;
    }
    struct hash128 now = hash128(content->data, content->len);
    if (now.hi != h->hi || now.lo != h->lo) {
        tool_result_errorf(res, "%s: %s was modified since you read it; Read it again", tool,
                           p->shown);
        return CA_EPARSE;
    }
    return 0;
}

static int write_all(int fd, const char *p, size_t len)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/*
 * Replace rel beneath root atomically: a temporary ".<name>.tmp-<hex>" in
 * the same folder (O_EXCL, O_NOFOLLOW), then rename. Unlike
 * fs_root_write_atomic it does not fsync: an episode's workspace needs
 * readers to see the old or the new file, never half of one, but not
 * durability across a power cut, and the two fsyncs cost a millisecond or
 * more per Edit. The mode is set with fchmod, so the umask does not change
 * an existing file's mode.
 */
static int replace_file(const struct fs_root *root, const char *rel, const char *data, size_t len,
                        mode_t mode)
{
    const char *slash = strrchr(rel, '/');
    const char *base = slash ? slash + 1 : rel;
    char dir[CA_LIMIT_PATH + 1], tmp[NAME_MAX + 1];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - rel) : 1, slash ? rel : ".");
    int dirfd = fs_root_open_at(root, dir, O_PATH | O_DIRECTORY, 0, NULL);
    if (dirfd < 0)
        return dirfd;
    static unsigned counter;
    int fd = -1, rc = 0;
    for (int tries = 0; fd < 0; tries++) {
        uint64_t seed[3] = {(uint64_t)ca_now_us(), (uint64_t)getpid(), counter++};
        char hex[HASH64_HEX_LEN + 1];
        hash64_hex(hash64(seed, sizeof(seed)), hex);
        if ((size_t)snprintf(tmp, sizeof(tmp), ".%.200s.tmp-%.12s", base, hex) >= sizeof(tmp)) {
            rc = -ENAMETOOLONG;
            goto out;
        }
        fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && (errno != EEXIST || tries == 100)) {
            rc = -errno;
            goto out;
        }
    }
    rc = write_all(fd, data, len);
    if (!rc && fchmod(fd, mode) != 0)
        rc = -errno;
    if (close(fd) != 0 && !rc && errno != EINTR)
        rc = -errno;
    if (!rc && renameat(dirfd, tmp, dirfd, base) != 0)
        rc = -errno;
    if (rc)
        unlinkat(dirfd, tmp, 0);
out:
    close(dirfd);
    return rc;
}

int tools__store(struct tool_ctx *ctx, const char *tool, struct tools__path *p, const char *data,
                 size_t len, mode_t mode, struct tool_result *res)
{
    int rc;
    if (!p->exists) {
        const char *slash = strrchr(p->key, '/');
        if (slash) {
            char parent[CA_LIMIT_PATH + 1];
            snprintf(parent, sizeof(parent), "%.*s", (int)(slash - p->key), p->key);
            rc = fs_root_mkdirs(&ctx->root, parent, 0755, NULL);
            if (rc)
                return tools__fs_error(res, tool, rc, p, "create the folders for");
            /* Now that the folders exist, the key can be resolved fully. */
            rc = tools__resolve(ctx, tool, p, res);
            if (rc)
                return rc;
            rc = tools__check_writable(ctx, tool, p, res);
            if (rc)
                return rc;
        }
    }
    rc = replace_file(&ctx->root, p->key, data, len, mode);
    if (rc)
        return tools__fs_error(res, tool, rc, p, "write");
    tools__read_set_put(ctx, p->key, hash128(data, len));
    return 0;
}

/* ---- shell tools: tables here, work in the supervisor ---- */

static int no_shell(struct tool_result *res, const char *tool)
{
    return tool_result_errorf(res,
                              "%s: no shell is attached to this episode; the file tools (Read, "
                              "Write, Edit, Glob, Grep, ...) still work",
                              tool);
}

static int run_bash(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    if (!ctx->have_shell || !ctx->shell.bash)
        return no_shell(res, "Bash");
    return ctx->shell.bash(ctx->shell.data, args, res);
}

static int run_bash_output(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    if (!ctx->have_shell || !ctx->shell.bash_output)
        return no_shell(res, "BashOutput");
    return ctx->shell.bash_output(ctx->shell.data, args, res);
}

static int run_kill_bash(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    if (!ctx->have_shell || !ctx->shell.kill_bash)
        return no_shell(res, "KillBash");
    return ctx->shell.kill_bash(ctx->shell.data, args, res);
}

static const struct tools__arg bash_args[] = {
    {"command", TOOLS__STRING, true, "The bash command line to run."},
    {"timeout", TOOLS__INTEGER, false,
     "Time limit in milliseconds (at most 600000 = 10 minutes); the command and everything it "
     "started are killed when it passes.",
     .min = 1, .max = 600000},
    {"description", TOOLS__STRING, false,
     "What the command does, in 5-10 words (for the record; not executed).", .max_len = 1024},
    {"run_in_background", TOOLS__BOOLEAN, false,
     "Start the command in a background shell and return its id at once; read its output with "
     "BashOutput, stop it with KillBash."},
    {NULL},
};

const struct tools__spec tools__bash_spec = {
    "Bash",
    "Run a command in this episode's persistent bash shell inside the sandbox. The shell starts "
    "in /workspace; the working directory and environment variables persist between calls. "
    "stdout and stderr are returned together, capped at 64 KiB with a visible truncation marker, "
    "with the exit code. The sandbox has no network and no GPU: build and test your kernels with "
    "the workspace's ./compile, ./verify and ./profile commands. Processes a command leaves "
    "running when it returns are stopped; use run_in_background for long jobs. Prefer Read, Grep "
    "and Glob over cat, grep and find, and Edit or Write over sed or "
    "echo redirection.",
    bash_args,
    run_bash,
};

static const struct tools__arg bash_output_args[] = {
    {"bash_id", TOOLS__STRING, true,
     "The id of the background shell, as returned by Bash with run_in_background.", .max_len = 256},
    {"filter", TOOLS__STRING, false,
     "Optional regular expression: only output lines matching it are returned (others are "
     "discarded).",
     .max_len = 4096},
    {NULL},
};

const struct tools__spec tools__bash_output_spec = {
    "BashOutput",
    "Return the output a background shell (started by Bash with run_in_background) produced since "
    "the last BashOutput call for it, and whether it is still running or its exit code.",
    bash_output_args,
    run_bash_output,
};

static const struct tools__arg kill_bash_args[] = {
    {"shell_id", TOOLS__STRING, true, "The id of the background shell to kill.", .max_len = 256},
    {NULL},
};

const struct tools__spec tools__kill_bash_spec = {
    "KillBash",
    "Kill a background shell started by Bash with run_in_background, and everything it started.",
    kill_bash_args,
    run_kill_bash,
};

/* ---- episode context ---- */

static int load_manifest(struct tool_ctx *ctx, const char *workspace, struct ca_err *err)
{
    struct buf text;
    buf_init(&text, CA_LIMIT_JSON_BYTES);
    json_t *manifest = NULL, *ro = NULL;
    char what[CA_LIMIT_PATH + 32];
    snprintf(what, sizeof(what), "%s/%s", workspace, WORKSPACE_MANIFEST);
    int rc = fs_root_read(&ctx->root, WORKSPACE_MANIFEST, CA_LIMIT_JSON_BYTES, &text, err);
    if (rc == -ENOENT) {
        rc = err_setf(err, CA_ENOTFOUND,
                      "'%s' is not a workspace: it has no %s (create one with cuda-agent "
                      "workspace create)",
                      workspace, WORKSPACE_MANIFEST);
        goto out;
    }
    if (rc)
        goto out;
    rc = jsonx_parse(sv_from(text.data, text.len), CA_LIMIT_JSON_BYTES, what, &manifest, err);
    if (rc)
        goto out;
    rc = jsonx_get_object(manifest, "read_only", true, &ro, what, err);
    if (rc)
        goto out;
    ctx->ro = xcalloc(json_object_size(ro) + 1, sizeof(*ctx->ro));
    const char *k;
    json_t *v;
    json_object_foreach(ro, k, v)
    {
        char norm[CA_LIMIT_PATH + 1];
        if (fs_check_relpath(k, NULL) || normalise(k, strlen(k), norm) || !norm[0]) {
            rc = err_setf(err, CA_EPARSE, "%s: read_only path '%.200s' is not a relative path",
                          what, k);
            goto out;
        }
        ctx->ro[ctx->nro++] = xstrdup(norm);
    }
    ctx->ro_ids = xcalloc(ctx->nro + 1, sizeof(*ctx->ro_ids));
    for (size_t i = 0; i < ctx->nro; i++)
        ctx->ro_ids[i] = file_id(ctx, ctx->ro[i]);
out:
    json_decref(manifest);
    buf_release(&text);
    return rc;
}

int tool_ctx_new(const char *workspace, struct tool_ctx **out, struct ca_err *err)
{
    *out = NULL;
    struct tool_ctx *ctx = xcalloc(1, sizeof(*ctx));
    ctx->root.fd = -1;
    ctx->todos = json_array();
    int rc = fs_root_open(&ctx->root, workspace, err);
    if (rc) {
        ctx->root.fd = -1;
        goto fail;
    }
    ctx->root_real = realpath(workspace, NULL);
    if (!ctx->root_real) {
        rc = err_setf(err, -errno, "cannot resolve '%s': %s", workspace, strerror(errno));
        goto fail;
    }
    rc = load_manifest(ctx, workspace, err);
    if (rc)
        goto fail;
    *out = ctx;
    return 0;
fail:
    tool_ctx_free(ctx);
    return rc;
}

void tool_ctx_free(struct tool_ctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->root.fd >= 0)
        fs_root_release(&ctx->root);
    free(ctx->root_real);
    for (size_t i = 0; i < ctx->nro; i++)
        free(ctx->ro[i]);
    free(ctx->ro);
    free(ctx->ro_ids);
    read_set_clear(ctx);
    free(ctx->reads);
    json_decref(ctx->todos);
    free(ctx);
}

void tool_ctx_set_shell(struct tool_ctx *ctx, const struct tool_shell_ops *ops)
{
    ctx->have_shell = ops != NULL;
    if (ops)
        ctx->shell = *ops;
    else
        memset(&ctx->shell, 0, sizeof(ctx->shell));
}

const char *const *tool_ctx_ro_paths(const struct tool_ctx *ctx)
{
    return (const char *const *)ctx->ro;
}

const json_t *tool_ctx_todos(const struct tool_ctx *ctx)
{
    return ctx->todos;
}

json_t *tool_ctx_save(const struct tool_ctx *ctx)
{
    json_t *read = json_object();
    for (size_t i = 0; i < ctx->reads_cap; i++) {
        if (!ctx->reads[i].key)
            continue;
        char hex[HASH128_HEX_LEN + 1];
        hash128_hex(ctx->reads[i].hash, hex);
        json_object_set_new(read, ctx->reads[i].key, json_string(hex));
    }
    return json_pack("{s:o, s:O}", "read", read, "todos", ctx->todos);
}

static bool parse_hex64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

int tool_ctx_restore(struct tool_ctx *ctx, const json_t *state, struct ca_err *err)
{
    json_t *read = NULL, *todos = NULL;
    int rc = jsonx_get_object(state, "read", false, &read, "tool state", err);
    if (!rc)
        rc = jsonx_get_array(state, "todos", false, &todos, "tool state", err);
    if (rc)
        return rc;
    if (todos) {
        /* The same rules TodoWrite applies. */
        struct tool_result res;
        tool_result_init(&res);
        json_t *args = json_pack("{s:O}", "todos", todos);
        rc = tools__args_check(&tools__todo_write_spec, args, &res);
        json_decref(args);
        if (rc)
            err_setf(err, CA_EPARSE, "tool state: %s", res.text.data);
        tool_result_release(&res);
        if (rc)
            return CA_EPARSE;
    }
    const char *k;
    json_t *v;
    if (read) {
        json_object_foreach(read, k, v)
        {
            const char *hex = json_string_value(v);
            struct hash128 h;
            if (!hex || strlen(hex) != HASH128_HEX_LEN || !parse_hex64(hex, &h.hi) ||
                !parse_hex64(hex + 16, &h.lo) || fs_check_relpath(k, NULL))
                return err_setf(err, CA_EPARSE,
                                "tool state: read entry '%.200s' needs a relative path and a %d "
                                "hex digit hash",
                                k, HASH128_HEX_LEN);
        }
        read_set_clear(ctx);
        json_object_foreach(read, k, v)
        {
            const char *hex = json_string_value(v);
            struct hash128 h;
            if (parse_hex64(hex, &h.hi) && parse_hex64(hex + 16, &h.lo))
                tools__read_set_put(ctx, k, h);
        }
    }
    if (todos) {
        json_decref(ctx->todos);
        ctx->todos = json_deep_copy(todos);
    }
    return 0;
}

/* ---- dispatch ---- */

int tool_call(struct tool_ctx *ctx, const char *name, const json_t *args, struct tool_result *res)
{
    ASSERT(ctx && res);
    res->is_error = false;
    buf_reset(&res->text);
    if (!res->fields)
        res->fields = json_object();
    json_object_clear(res->fields);

    const struct tools__spec *spec = name ? tools__find(name) : NULL;
    if (!spec) {
        size_t n = name ? strlen(name) : 0;
        tool_result_errorf(res, "unknown tool '%.*s%s'; the tools are:", SHOW(name ? name : "", n));
        for (size_t i = 0; tool_names[i]; i++)
            tools__out_tail(res, "%s %s", i ? "," : "", tool_names[i]);
        return 0;
    }
    if (!json_is_object(args)) {
        tool_result_errorf(res, "%s: the arguments must be a JSON object (e.g. {\"%s\": ...})",
                           spec->name, spec->args[0].name);
        return 0;
    }
    if (tools__args_check(spec, args, res))
        return 0;
    int64_t t0 = ca_now_us();
    int rc = spec->run(ctx, args, res);
    LOG_DEBUG("tool %s: %s in %lld us", spec->name,
              rc              ? "failed"
              : res->is_error ? "refused"
                              : "done",
              (long long)(ca_now_us() - t0));
    return rc;
}
