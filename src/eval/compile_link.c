/*
 * compile_link.c - the link of the objects into the extension module: its flags
 * (the libraries the sources name), its key (the objects' keys in order), the
 * cache, and delivery to the caller's path.
 *
 * The linker sees the objects through read-only hard links named after their
 * units, so its messages name workspace files.
 */
#include "eval/compile_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/limits.h"
#include "sandbox/sandbox.h"
#include "core/banned.h"

static bool lib_exists(const struct compile__argv *dirs, const char *name)
{
    for (size_t i = 0; i < dirs->n; i++) {
        char *p = xstrfmt("%s/lib%s.so", dirs->v[i], name);
        bool ok = access(p, F_OK) == 0;
        free(p);
        if (ok)
            return true;
    }
    return false;
}

static bool sources_mention(const struct compile__build *b, const char *token)
{
    for (size_t i = 0; i < b->n; i++)
        if (memmem(b->units[i].src.data, b->units[i].src.len, token, strlen(token)))
            return true;
    return false;
}

/* -shared and the libraries, in link order after the objects. */
static void link_flags(const struct compile__build *b, struct compile__argv *f)
{
    const struct compile__toolchain *tc = b->tc;
    compile__argv_push(f, "-shared");
    if (tc->fuse_ld)
        compile__argv_push(f, tc->fuse_ld);
    for (size_t i = 0; i < tc->torch_libdirs.n; i++) {
        compile__argv_pushf(f, "-L%s", tc->torch_libdirs.v[i]);
        compile__argv_pushf(f, "-Wl,-rpath,%s", tc->torch_libdirs.v[i]);
    }
    /* A CPU-only torch has no c10_cuda/torch_cuda: link what exists. */
    static const char *const torch_libs[] = {"c10",          "torch",    "torch_cpu",
                                             "torch_python", "c10_cuda", "torch_cuda"};
    for (size_t i = 0; i < ARRAY_SIZE(torch_libs); i++)
        if (lib_exists(&tc->torch_libdirs, torch_libs[i]))
            compile__argv_pushf(f, "-l%s", torch_libs[i]);
    compile__argv_pushf(f, "-L%s", tc->cuda_lib);
    compile__argv_pushf(f, "-Wl,-rpath,%s", tc->cuda_lib);
    compile__argv_push(f, "-lcudart");
    if (sources_mention(b, "cublasLt"))
        compile__argv_push(f, "-lcublasLt");
    if (sources_mention(b, "cublas"))
        compile__argv_push(f, "-lcublas");
    if (sources_mention(b, "cudnn")) {
        if (tc->cudnn_lib) {
            char *dir = xstrdup(tc->cudnn_lib);
            char *slash = strrchr(dir, '/');
            if (slash)
                *slash = '\0';
            compile__argv_push(f, tc->cudnn_lib);
            compile__argv_pushf(f, "-Wl,-rpath,%s", dir);
            free(dir);
        } else {
            compile__argv_push(f, "-lcudnn");
        }
    }
}

int compile__link(struct compile__build *b, const char *out_so, struct ca_err *err)
{
    struct compile_report *rep = b->rep;
    const struct compile__toolchain *tc = b->tc;
    struct compile__argv flags, argv;
    compile__argv_init(&flags);
    compile__argv_init(&argv);
    link_flags(b, &flags);
    for (size_t i = 0; i < tc->torch_libdirs.n; i++)
        compile__push_bind(&b->ctx.binds_link, tc->torch_libdirs.v[i]);
    compile__push_bind(&b->ctx.binds_link, tc->cuda_home);
    if (tc->cudnn_lib) {
        char *dir = xstrdup(tc->cudnn_lib);
        *strrchr(dir, '/') = '\0';
        compile__push_bind(&b->ctx.binds_link, dir);
        free(dir);
    }
    const char **keys = xcalloc(b->n + 1, sizeof(*keys));
    for (size_t i = 0; i < b->n; i++)
        keys[i] = b->units[i].key;
    compile__so_key(tc->cxx, tc->cxx_version, (const char *const *)flags.v, keys, b->n,
                    rep->so_key);
    free(keys);
    struct buf so;
    buf_init(&so, CA_LIMIT_PATH + 64);
    if (compile__cache_path(b->cache_dir, COMPILE__SO, rep->so_key, &so))
        BUG("cache path over its bound");
    int rc = 0;
    struct compile__run r;
    compile__run_init(&r);
    int64_t t0 = ca_now_us();
    if (compile__cache_hit(so.data)) {
        rep->link_ok = rep->link_cached = true;
        goto deliver;
    }
    /* Objects through read-only hard links named after their units (the linker's messages). */
    compile__argv_push(&argv, tc->cxx);
    compile__argv_push(&argv, "-o");
    compile__argv_push(&argv, "out/module.so");
    for (size_t i = 0; i < b->n && !rc; i++) {
        struct compile__unit *u = &b->units[i];
        char *rel = xstrfmt("link/%s.o", u->name);
        char *dst = xstrfmt("%s/%s", b->build_dir.data, rel);
        char *parent = xstrdup(dst);
        *strrchr(parent, '/') = '\0';
        if ((mkdir(parent, 0755) != 0 && errno != EEXIST) || link(u->cache_path, dst) != 0) {
            int e = errno;
            /* Pruned by another evaluator since its lookup: compile_build builds again. */
            b->vanished = e == ENOENT && !fs_exists(u->cache_path);
            rc = err_setf(err, -e,
                          "compile: the cached object of %s (%s) vanished or cannot be linked: "
                          "%s",
                          u->name, u->cache_path, strerror(e));
        }
        compile__argv_push(&argv, rel);
        free(rel);
        free(dst);
        free(parent);
    }
    if (rc)
        goto out;
    compile__argv_pushv(&argv, &flags);
    compile__run_tool(&b->ctx, b->build_dir.data, &argv, compile__ro_link, &b->ctx.binds_link, &r);
    if (r.rc) {
        rc = r.rc;
        *err = r.err;
        goto out;
    }
    rep->link_us = r.elapsed_us;
    const char *strip[] = {b->dir_slash, SANDBOX_WORKSPACE "/", "link/", NULL};
    char *title = xstrfmt("link (%s)", r.how);
    compile__log_add(rep, title, &r.out, strip);
    free(title);
    if (!r.ok) {
        struct buf norm, trimmed;
        buf_init(&norm, 2 * COMPILE__RUN_OUTPUT_MAX + 4096);
        buf_init(&trimmed, 2 * COMPILE__RUN_OUTPUT_MAX + 4096);
        (void)!compile__log_normalize(sv_from(r.out.data, r.out.len), strip, &norm);
        struct compile__trim_result tr;
        (void)!buf_addf(&trimmed, "link of %s failed (%s):\n", COMPILE_MODULE_NAME, r.how);
        (void)!compile__log_trim(sv_from(norm.data, norm.len), &trimmed, &tr);
        size_t budget = COMPILE_ERROR_LINES, omitted = 0;
        (void)!compile__append_lines(&rep->errors, sv_from(trimmed.data, trimmed.len), &budget,
                                     &omitted);
        if (omitted)
            (void)!buf_addf(&rep->errors, "[%zu more error lines omitted]\n", omitted);
        buf_release(&norm);
        buf_release(&trimmed);
        goto out;
    }
    char *built = xstrfmt("%s/out/module.so", b->build_dir.data);
    rc = compile__cache_store(built, so.data, err);
    free(built);
    if (rc)
        goto out;
    b->stored = true;
    rep->link_ok = true;
deliver:
    if (out_so) {
        rc = compile__copy_atomic(so.data, out_so, 0755, err);
        if (!rc)
            rep->so_path = xstrdup(out_so);
    } else {
        rep->so_path = xstrdup(so.data);
    }
    if (rep->link_cached)
        rep->link_us = ca_now_us() - t0;
out:
    compile__run_release(&r);
    buf_release(&so);
    compile__argv_release(&flags);
    compile__argv_release(&argv);
    return rc;
}
