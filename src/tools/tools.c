/*
 * tools.c - the tool registry and dispatch, tool results, and the episode
 * state behind struct tool_ctx (manifest, read set, todo list, shell
 * callbacks, save and restore). Path mapping and the shared file helpers
 * are in tool_path.c, output and argument helpers in tool_text.c, the
 * shell tools' tables in tool_shell.c.
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
        if (fs_check_relpath(k, NULL) || tools__normalise(k, strlen(k), norm) || !norm[0]) {
            rc = err_setf(err, CA_EPARSE, "%s: read_only path '%.200s' is not a relative path",
                          what, k);
            goto out;
        }
        ctx->ro[ctx->nro++] = xstrdup(norm);
    }
    ctx->ro_ids = xcalloc(ctx->nro + 1, sizeof(*ctx->ro_ids));
    for (size_t i = 0; i < ctx->nro; i++)
        ctx->ro_ids[i] = tools__file_id(ctx, ctx->ro[i]);
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
        tool_result_errorf(
            res, "unknown tool '%.*s%s'; the tools are:", TOOLS__SHOW(name ? name : "", n));
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
