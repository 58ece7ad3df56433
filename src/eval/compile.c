/*
 * compile.c - one build: snapshot in, extension module and report out.
 *
 * This file holds the build's order of work and its directory; the parts live
 * beside it: compile_run.c (running one compiler), compile_pool.c (the worker
 * threads and what one job does), compile_retry.c (which failures are retried
 * without the accelerators), compile_flags.c (compiler flags and environment),
 * compile_pch.c (the precompiled and light headers), compile_link.c (the link)
 * and compile_report.c (the report and its JSON).
 *
 * Flow: discover the toolchain (cached per process); copy the snapshot's
 * units and the embedded template files into a fresh build directory under
 * the cache's tmp/; key every unit; hand the misses to a pool of worker
 * threads (one compiler per worker, directly or in a sandbox whose workspace
 * is the build directory); meanwhile, on this thread, make sure the
 * precompiled header exists when a binding must be compiled; then the
 * bindings; then the link (itself cached by the objects' keys).
 *
 * Invariants:
 * - Compilers see only the build directory: units and template files there
 *   are read-only inside the sandbox, outputs go to obj/, and an object
 *   leaves obj/ for the cache (link, unlink) as soon as its compiler is done, so
 *   no later compiler of the build can touch a cache inode. The linker sees
 *   the objects through hard links in link/, read-only.
 * - The precompiled header is an accelerator only: keys do not depend on it
 *   (it holds exactly the headers binding_registry.h includes first), and a
 *   binding that fails for a PCH-specific reason is retried without it.
 * - So are the light torch/extension.h and torch/types.h (light/ in the
 *   build directory, searched first by bindings and by cu-torch units, and
 *   by the precompiled header): a source that includes either gets the part
 *   of torch the policy lets it use, and a unit that fails for want of a
 *   name is retried with the real headers (and without the precompiled one).
 * - Every path a compiler prints is mapped back to workspace-relative names
 *   before anyone reads it: units are compiled as "kernels/NAME" with the
 *   build directory as the working directory.
 * - The pool's state (queue, counters) is guarded by one mutex; a job's own
 *   fields belong to the worker running it until it is counted done.
 */
#include "eval/compile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/embed.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "eval/compile_internal.h"
#include "sandbox/sandbox.h"
#include "core/banned.h"

#define TEMPLATE_BINDING "template/binding.cpp"
#define TEMPLATE_REGISTRY "template/binding_registry.h"
#define REGISTRY_UNIT "binding.cpp"
#define REGISTRY_HEADER "binding_registry.h"
/* All source bytes of one snapshot together. */
#define SNAPSHOT_BYTES_MAX (64 * CA_MIB)

/* Paths of the build directory bound read-only for compilers. */
const char *const compile__ro_compile[] = {"kernels",
                                           REGISTRY_UNIT,
                                           REGISTRY_HEADER,
                                           "pch",
                                           COMPILE__SPLIT_PCH_DIR,
                                           COMPILE__SPLIT_DIR,
                                           COMPILE__LIGHT_DIR,
                                           NULL};
const char *const compile__ro_link[] = {
    "kernels",          REGISTRY_UNIT,      REGISTRY_HEADER, "pch", COMPILE__SPLIT_PCH_DIR,
    COMPILE__SPLIT_DIR, COMPILE__LIGHT_DIR, "link",          NULL};

void compile_opts_init(struct compile_opts *o)
{
    *o = (struct compile_opts){
        .use_sandbox = true, .use_pch = true, .use_light = true, .use_split = true};
}

const char *compile_role_name(enum compile_role role)
{
    switch (role) {
    case COMPILE_ROLE_CU:
        return "cu";
    case COMPILE_ROLE_BINDING:
        return "binding";
    case COMPILE_ROLE_REGISTRY:
        return "registry";
    case COMPILE_ROLE_CU_TORCH:
        return "cu-torch";
    }
    return "unknown";
}

static int cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static struct compile__unit *add_unit(struct compile__build *b, char *name, enum compile_role role)
{
    ALLOC_GROW(b->units, b->n + 1, b->units_alloc);
    struct compile__unit *u = &b->units[b->n++];
    *u = (struct compile__unit){.name = name, .role = role};
    buf_init(&u->src, CA_LIMIT_WRITE_BYTES);
    buf_init(&u->deps, BUF_MAX_INTERNAL);
    return u;
}

/* kernels/NAME.cu and kernels/NAME_binding.cpp of the snapshot, in name order, then binding.cpp. */
static int load_snapshot(struct compile__build *b, const char *snapshot_dir, struct ca_err *err)
{
    struct fs_root root;
    int rc = fs_root_open(&root, snapshot_dir, err);
    if (rc)
        return rc;
    char **names = NULL;
    size_t nnames = 0, alloc = 0;
    int dfd = fs_root_open_at(&root, "kernels", O_RDONLY | O_DIRECTORY, 0, err);
    if (dfd == -ENOENT) {
        err_clear(err);
    } else if (dfd < 0) {
        rc = dfd;
        goto out;
    } else {
        DIR *d = fdopendir(dfd);
        if (!d) {
            close(dfd);
            rc =
                err_setf(err, -errno, "snapshot '%s': kernels/: %s", snapshot_dir, strerror(errno));
            goto out;
        }
        struct dirent *de;
        while ((de = readdir(d))) {
            struct stat st;
            const char *nm = de->d_name;
            if (nm[0] == '.' || !(ends_with(nm, ".cu") || ends_with(nm, "_binding.cpp")) ||
                fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
                continue;
            if (nnames == CA_LIMIT_WORKSPACE_FILES) {
                closedir(d);
                rc = err_setf(err, CA_ETOOBIG,
                              "snapshot '%s' has more than %d source files in kernels/",
                              snapshot_dir, CA_LIMIT_WORKSPACE_FILES);
                goto out;
            }
            ALLOC_GROW(names, nnames + 1, alloc);
            names[nnames++] = xstrdup(nm);
        }
        closedir(d);
    }
    if (nnames)
        qsort(names, nnames, sizeof(*names), cmp_str);

    size_t total = 0;
    for (size_t i = 0; i < nnames && !rc; i++) {
        struct compile__unit *u =
            add_unit(b, xstrfmt("kernels/%s", names[i]),
                     !ends_with(names[i], ".cu")
                         ? COMPILE_ROLE_BINDING
                         : (b->opts->inline_cuda ? COMPILE_ROLE_CU_TORCH : COMPILE_ROLE_CU));
        rc = fs_root_read(&root, u->name, CA_LIMIT_WRITE_BYTES, &u->src, err);
        if (rc) {
            err_prefix(err, "snapshot");
            break;
        }
        total += u->src.len;
        if (total > SNAPSHOT_BYTES_MAX)
            rc = err_setf(err, CA_ETOOBIG, "snapshot '%s': sources over %zu MiB together",
                          snapshot_dir, SNAPSHOT_BYTES_MAX / CA_MIB);
    }
    if (!rc) {
        const struct embedded_file *ef = embed_find(TEMPLATE_BINDING);
        if (!ef || !embed_find(TEMPLATE_REGISTRY))
            BUG("the template's binding files are not embedded");
        struct compile__unit *u = add_unit(b, xstrdup(REGISTRY_UNIT), COMPILE_ROLE_REGISTRY);
        if (buf_add(&u->src, ef->data, ef->len))
            BUG("embedded binding.cpp over the source limit");
    }
out:
    for (size_t i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    fs_root_release(&root);
    return rc;
}

/* #include "X" / <X> naming another unit: its digest joins the includer's key. */
static void scan_includes(struct compile__build *b, struct compile__unit *u)
{
    struct sv rest = sv_from(u->src.data, u->src.len), line;
    while (sv_next_line(&rest, &line, NULL)) {
        struct sv t = sv_ltrim(line);
        if (!sv_chop_prefix(&t, SV_LIT("#")))
            continue;
        t = sv_ltrim(t);
        if (!sv_chop_prefix(&t, SV_LIT("include")))
            continue;
        t = sv_ltrim(t);
        if (t.len < 2 || (t.p[0] != '"' && t.p[0] != '<'))
            continue;
        struct sv in = sv_sub(t, 1, t.len - 1);
        long end = sv_find_ch(in, t.p[0] == '"' ? '"' : '>');
        if (end < 0)
            continue;
        in = sv_sub(in, 0, (size_t)end);
        while (sv_chop_prefix(&in, SV_LIT("./")) || sv_chop_prefix(&in, SV_LIT("../")))
            ;
        sv_chop_prefix(&in, SV_LIT("kernels/"));
        for (size_t i = 0; i < b->n; i++) {
            struct compile__unit *v = &b->units[i];
            if (v == u || v->role == COMPILE_ROLE_REGISTRY ||
                !sv_eq(in, sv_cstr(v->name + strlen("kernels/"))))
                continue;
            if (buf_addf(&u->deps, "%s %s\n", v->name, v->digest))
                BUG("internal buffer overflow");
        }
    }
}

int compile__write_file(const char *dir, const char *rel, const void *data, size_t len,
                        struct ca_err *err)
{
    char *path = xstrfmt("%s/%s", dir, rel);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    int rc = 0;
    if (fd < 0) {
        rc = err_setf(err, -errno, "compile: create '%s': %s", path, strerror(errno));
    } else {
        const char *p = data;
        while (!rc && len > 0) {
            ssize_t w = write(fd, p, len);
            if (w < 0 && errno != EINTR)
                rc = err_setf(err, -errno, "compile: write '%s': %s", path, strerror(errno));
            else if (w > 0) {
                p += w;
                len -= (size_t)w;
            }
        }
        close(fd);
    }
    free(path);
    return rc;
}

int compile__make_dirs(const char *dir, const char *const *subdirs, struct ca_err *err)
{
    for (size_t i = 0; subdirs[i]; i++) {
        char *p = xstrfmt("%s/%s", dir, subdirs[i]);
        int rc = mkdir(p, 0755) == 0 || errno == EEXIST
                     ? 0
                     : err_setf(err, -errno, "compile: mkdir '%s': %s", p, strerror(errno));
        free(p);
        if (rc)
            return rc;
    }
    return 0;
}

/* The build directory: tmp/build.tmp-XXXXXX with the units and template files. */
static int prepare_build_dir(struct compile__build *b, struct ca_err *err)
{
    char *base = xstrfmt("%s/tmp/build", b->cache_dir);
    struct buf tmp;
    buf_init(&tmp, CA_LIMIT_PATH);
    int rc = fs_mkdtemp_beside(base, &tmp, err);
    free(base);
    if (!rc) {
        char *real = realpath(tmp.data, NULL);
        if (!real)
            rc = err_setf(err, -errno, "compile: resolve '%s': %s", tmp.data, strerror(errno));
        else if (buf_addstr(&b->build_dir, real))
            rc = err_setf(err, CA_ETOOBIG, "compile: build directory path too long");
        free(real);
    }
    buf_release(&tmp);
    if (rc)
        return rc;
    b->ctx.build_dir = b->build_dir.data;
    b->dir_slash = xstrfmt("%s/", b->build_dir.data);
    static const char *const subdirs[] = {"kernels",
                                          "obj",
                                          "pch",
                                          COMPILE__SPLIT_PCH_DIR,
                                          COMPILE__SPLIT_DIR,
                                          "link",
                                          "out",
                                          COMPILE__LIGHT_DIR,
                                          (COMPILE__LIGHT_DIR "/torch"),
                                          NULL};
    rc = compile__make_dirs(b->build_dir.data, subdirs, err);
    if (!rc)
        rc = compile__write_light_headers(b->build_dir.data, err);
    for (size_t i = 0; !rc && i < b->n; i++)
        rc = compile__write_file(b->build_dir.data, b->units[i].name, b->units[i].src.data,
                                 b->units[i].src.len, err);
    if (!rc) {
        const struct embedded_file *h = embed_find(TEMPLATE_REGISTRY);
        rc = compile__write_file(b->build_dir.data, REGISTRY_HEADER, h->data, h->len, err);
    }
    return rc;
}

static void unit_key(struct compile__build *b, struct compile__unit *u)
{
    const struct compile__toolchain *tc = b->tc;
    const struct embedded_file *h = embed_find(TEMPLATE_REGISTRY);
    bool cu = u->role == COMPILE_ROLE_CU, cu_torch = u->role == COMPILE_ROLE_CU_TORCH;
    struct compile__unit_key_in in = {
        .role = u->role,
        .name = u->name,
        .source = sv_from(u->src.data, u->src.len),
        .deps = sv_from(u->deps.data, u->deps.len),
        .compiler = cu || cu_torch ? tc->nvcc : tc->cxx,
        .compiler_version = cu || cu_torch ? b->cu_identity : tc->cxx_version,
        .argv = (const char *const *)(cu         ? b->cu_flags.v
                                      : cu_torch ? b->cu_torch_key.v
                                                 : b->cxx_flags.v),
        .headers = cu ? "" : tc->torch_identity,
        .template_header = cu || cu_torch ? SV_LIT("") : sv_from(h->data, h->len),
    };
    compile__unit_key(&in, u->key);
    struct buf p;
    buf_init(&p, CA_LIMIT_PATH + 64);
    if (compile__cache_path(b->cache_dir, COMPILE__OBJ, u->key, &p))
        BUG("cache path over its bound");
    u->cache_path = buf_detach(&p, NULL);
    u->hit = compile__cache_hit(u->cache_path);
}

/*
 * A cu-torch job cut in two where compile__split_source can (else it stays one nvcc run):
 * split/N.dev.cu for nvcc with the unit's flags (no light headers: the half has no torch),
 * split/N.host.cpp for c++ with the split precompiled header, merged by a relocatable link into
 * the unit's object. Both name the unit (#line), so their messages read like its own.
 */
static void prepare_split(struct compile__build *b, struct compile__job *j, size_t n)
{
    struct compile__split sp;
    compile__split_init(&sp);
    if (compile__split_source(sv_from(j->u->src.data, j->u->src.len), j->u->name, &sp)) {
        LOG_DEBUG("compile: %s is built as one unit: %s", j->u->name, sp.why);
        compile__split_release(&sp);
        return;
    }
    bool have_host = sp.host.len > 0;
    char *dev = xstrfmt(COMPILE__SPLIT_DIR "/%zu.dev.cu", n),
         *host = xstrfmt(COMPILE__SPLIT_DIR "/%zu.host.cpp", n);
    char *dev_obj = xstrfmt("obj/%zu.dev.o", n), *host_obj = xstrfmt("obj/%zu.host.o", n);
    struct ca_err e = {0};
    if (compile__write_file(b->build_dir.data, dev, sp.dev.data, sp.dev.len, &e) ||
        (have_host &&
         compile__write_file(b->build_dir.data, host, sp.host.data, sp.host.len, &e))) {
        LOG_WARN("compile: %s is built as one unit: %s", j->u->name, e.msg);
        goto out;
    }
    compile__argv_pushv(&j->argv_dev, &b->cu_torch_flags);
    compile__argv_push(&j->argv_dev, "-o");
    compile__argv_push(&j->argv_dev, have_host ? dev_obj : j->obj);
    compile__argv_push(&j->argv_dev, dev);
    if (have_host) {
        compile__argv_pushv(&j->argv_host, &b->split_flags);
        static const char *const pch[] = {"-include", COMPILE__SPLIT_PCH_DIR "/pch.h",
                                          "-Winvalid-pch", "-o"};
        for (size_t i = 0; i < ARRAY_SIZE(pch); i++)
            compile__argv_push(&j->argv_host, pch[i]);
        compile__argv_push(&j->argv_host, host_obj);
        compile__argv_push(&j->argv_host, host);
        static const char *const merge[] = {"-r", "-nostdlib", "-o"};
        compile__argv_push(&j->argv_merge, b->tc->cxx);
        for (size_t i = 0; i < ARRAY_SIZE(merge); i++)
            compile__argv_push(&j->argv_merge, merge[i]);
        compile__argv_push(&j->argv_merge, j->obj);
        compile__argv_push(&j->argv_merge, dev_obj);
        compile__argv_push(&j->argv_merge, host_obj);
        j->binds_host = &b->ctx.binds_cxx;
        if (buf_add(&j->split_names, sp.dev_names.data, sp.dev_names.len))
            BUG("split names over their bound");
    }
out:
    free(dev);
    free(host);
    free(dev_obj);
    free(host_obj);
    compile__split_release(&sp);
}

static void submit(struct compile__build *b, struct compile__unit *u,
                   struct compile_unit_report *rep)
{
    if (!b->pool_started) {
        size_t cpus = b->opts->jobs > 0 ? (size_t)b->opts->jobs : (size_t)cpu_count();
        compile__pool_init(&b->pool, &b->ctx, cpus);
        b->pool_started = true;
    }
    struct compile__job *j = &b->jobs[b->njobs];
    *j = (struct compile__job){.u = u, .rep = rep};
    snprintf(j->obj, sizeof(j->obj), "obj/%zu.o", b->njobs);
    b->njobs++;
    compile__run_init(&j->run);
    compile__argv_init(&j->argv);
    compile__argv_init(&j->argv_plain);
    compile__argv_init(&j->argv_dev);
    compile__argv_init(&j->argv_host);
    compile__argv_init(&j->argv_merge);
    buf_init(&j->split_names, CA_LIMIT_COMPILE_LOG);
    buf_init(&j->split_log, CA_LIMIT_COMPILE_LOG);
    bool cu = u->role == COMPILE_ROLE_CU, cu_torch = u->role == COMPILE_ROLE_CU_TORCH;
    compile__argv_pushv(&j->argv, cu         ? &b->cu_flags
                                  : cu_torch ? &b->cu_torch_flags
                                             : &b->cxx_flags);
    j->binds = cu ? &b->ctx.binds_cu : cu_torch ? &b->ctx.binds_cu_torch : &b->ctx.binds_cxx;
    /* The light headers matter to a binding (binding_registry.h includes torch/extension.h) and
     * to a cu-torch source that includes torch/extension.h or torch/types.h (load_inline's
     * prelude); the precompiled header, built with them, to bindings. */
    j->light = b->opts->use_light && !cu &&
               (!cu_torch || memmem(u->src.data, u->src.len, "torch/extension.h", 17) ||
                memmem(u->src.data, u->src.len, "torch/types.h", 13));
    j->pch = !cu && !cu_torch && b->pch_ready;
    if (j->light || j->pch) {
        compile__argv_pushv(&j->argv_plain, &j->argv);
        compile__argv_push(&j->argv_plain, "-o");
        compile__argv_push(&j->argv_plain, j->obj);
        compile__argv_push(&j->argv_plain, u->name);
    }
    if (j->light) {
        compile__argv_push(&j->argv, "-I");
        compile__argv_push(&j->argv, COMPILE__LIGHT_DIR);
    }
    if (j->pch) {
        compile__argv_push(&j->argv, "-include");
        compile__argv_push(&j->argv, "pch/pch.h");
        compile__argv_push(&j->argv, "-Winvalid-pch");
    }
    compile__argv_push(&j->argv, "-o");
    compile__argv_push(&j->argv, j->obj);
    compile__argv_push(&j->argv, u->name);
    if (cu_torch && j->light && b->opts->use_split && b->split_pch_ready)
        prepare_split(b, j, b->njobs - 1);
    compile__pool_submit(&b->pool, j);
}

static void jobs_release(struct compile__build *b)
{
    for (size_t i = 0; i < b->njobs; i++) {
        struct compile__job *j = &b->jobs[i];
        compile__run_release(&j->run);
        compile__argv_release(&j->argv);
        compile__argv_release(&j->argv_plain);
        compile__argv_release(&j->argv_dev);
        compile__argv_release(&j->argv_host);
        compile__argv_release(&j->argv_merge);
        buf_release(&j->split_names);
        buf_release(&j->split_log);
    }
    free(b->jobs);
}

static void build_release(struct compile__build *b)
{
    if (b->pool_started)
        compile__pool_release(&b->pool);
    jobs_release(b);
    for (size_t i = 0; i < b->n; i++) {
        free(b->units[i].name);
        free(b->units[i].cache_path);
        buf_release(&b->units[i].src);
        buf_release(&b->units[i].deps);
    }
    free(b->units);
    if (b->build_dir.len) {
        struct ca_err e = {0};
        if (fs_remove_tree(b->build_dir.data, &e))
            LOG_WARN("compile: %s", e.msg);
    }
    buf_release(&b->build_dir);
    free(b->dir_slash);
    compile__argv_release(&b->ctx.env);
    compile__argv_release(&b->ctx.binds_cu);
    compile__argv_release(&b->ctx.binds_cxx);
    compile__argv_release(&b->ctx.binds_link);
    compile__argv_release(&b->ctx.binds_cu_torch);
    compile__argv_release(&b->cu_torch_flags);
    compile__argv_release(&b->split_flags);
    compile__argv_release(&b->cu_torch_key);
    compile__argv_release(&b->cu_flags);
    compile__argv_release(&b->cxx_flags);
    free(b->cu_identity);
    free(b->cache_dir);
}

static void report_reset(struct compile_report *r)
{
    compile_report_release(r);
    compile_report_init(r);
}

static int start(struct compile__build *b, struct ca_err *err)
{
    const struct compile_opts *o = b->opts;
    int rc = compile__arch_resolve(o->arch, b->rep->arch, err);
    if (rc)
        return rc;
    rc = compile__toolchain_get(o->python, &b->tc, err);
    if (rc)
        return rc;
    if (!b->tc->nvcc)
        return err_setf(err, CA_EUNAVAIL, "%s", b->tc->nvcc_error);
    if (!b->tc->cxx)
        return err_setf(err, CA_EUNAVAIL, "%s", b->tc->cxx_error);
    b->ctx.sandbox = o->use_sandbox;
    b->ctx.timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : COMPILE_DEFAULT_TIMEOUT_MS;
    if (o->use_sandbox) {
        struct ca_err why = {0};
        if (!sandbox_supported(&why))
            return err_setf(err, CA_EUNAVAIL, "compilers cannot be sandboxed here: %s", why.msg);
    }
    struct buf dir;
    buf_init(&dir, CA_LIMIT_PATH);
    rc = compile_cache_dir(o, &dir, err);
    if (!rc)
        rc = compile__cache_prepare(dir.data, err);
    if (!rc) {
        char *real = realpath(dir.data, NULL);
        if (!real)
            rc = err_setf(err, -errno, "compile cache '%s': %s", dir.data, strerror(errno));
        b->cache_dir = real;
    }
    buf_release(&dir);
    if (rc)
        return rc;
    compile__argv_init(&b->ctx.env);
    compile__argv_init(&b->ctx.binds_cu);
    compile__argv_init(&b->ctx.binds_cxx);
    compile__argv_init(&b->ctx.binds_link);
    compile__argv_init(&b->ctx.binds_cu_torch);
    compile__argv_init(&b->cu_torch_flags);
    compile__argv_init(&b->split_flags);
    compile__argv_init(&b->cu_torch_key);
    compile__argv_init(&b->cu_flags);
    compile__argv_init(&b->cxx_flags);
    compile__make_env(b);
    compile__make_flags(b, b->rep->arch);
    return 0;
}

static char *unavailable_torch(const struct compile__toolchain *tc)
{
    return xstrfmt("PyTorch is not importable by %s (needed to build bindings): install it or set "
                   "CUDA_AGENT_PYTHON (%s)",
                   tc->python, tc->torch_error ? tc->torch_error : "unknown reason");
}

static int build_once(const struct compile_opts *opts, const char *snapshot_dir, const char *out_so,
                      struct compile_report *report, bool *vanished, struct ca_err *err)
{
    int64_t t0 = ca_now_us();
    report_reset(report);
    struct compile_opts defaults;
    compile_opts_init(&defaults);
    struct compile__build b = {.opts = opts ? opts : &defaults, .rep = report};
    buf_init(&b.build_dir, CA_LIMIT_PATH);
    int rc = start(&b, err);
    if (!rc)
        rc = load_snapshot(&b, snapshot_dir, err);
    if (rc)
        goto out;
    rc = prepare_build_dir(&b, err);
    if (rc)
        goto out;

    report->n = b.n;
    report->units = xcalloc(b.n, sizeof(*report->units));
    b.jobs = xcalloc(b.n, sizeof(*b.jobs));
    for (size_t i = 0; i < b.n; i++) {
        struct compile_unit_report *ur = &report->units[i];
        ur->name = xstrdup(b.units[i].name);
        ur->role = b.units[i].role;
        buf_init(&ur->log, CA_LIMIT_COMPILE_LOG);
        hash128_hex(hash128(b.units[i].src.data, b.units[i].src.len), b.units[i].digest);
    }
    for (size_t i = 0; i < b.n; i++)
        scan_includes(&b, &b.units[i]);

    /* .cu files first: they need no torch, and run while the PCH is made. */
    for (size_t i = 0; i < b.n; i++) {
        struct compile__unit *u = &b.units[i];
        if (u->role != COMPILE_ROLE_CU)
            continue;
        unit_key(&b, u);
        memcpy(report->units[i].key, u->key, sizeof(u->key));
        report->units[i].ok = report->units[i].cached = u->hit;
        if (!u->hit)
            submit(&b, u, &report->units[i]);
        else
            compile__unit_kernels_cached(&report->units[i], u->cache_path);
    }
    bool torch = b.tc->have_torch;
    if (torch) {
        bool need = false, need_split = false;
        for (size_t i = 0; i < b.n; i++) {
            struct compile__unit *u = &b.units[i];
            if (u->role == COMPILE_ROLE_CU)
                continue;
            unit_key(&b, u);
            memcpy(report->units[i].key, u->key, sizeof(u->key));
            report->units[i].ok = report->units[i].cached = u->hit;
            if (u->hit && u->role == COMPILE_ROLE_CU_TORCH)
                compile__unit_kernels_cached(&report->units[i], u->cache_path);
            if (u->role == COMPILE_ROLE_CU_TORCH)
                need_split = need_split || !u->hit;
            else
                need = need || !u->hit;
        }
        /* The cu-torch units are the longest jobs: they start before the bindings' header,
         * after the header of their torch halves (made once, then a cache hit). */
        if (need_split && b.opts->use_split && b.opts->use_light && b.tc->cxx_is_gcc) {
            rc = compile__ensure_split_pch(&b, err);
            if (rc)
                goto out;
        }
        for (size_t i = 0; i < b.n; i++)
            if (b.units[i].role == COMPILE_ROLE_CU_TORCH && !b.units[i].hit)
                submit(&b, &b.units[i], &report->units[i]);
        if (need && b.opts->use_pch && b.tc->cxx_is_gcc) {
            rc = compile__ensure_binding_pch(&b, err);
            if (rc)
                goto out;
        }
        for (size_t i = 0; i < b.n; i++)
            if (b.units[i].role != COMPILE_ROLE_CU && b.units[i].role != COMPILE_ROLE_CU_TORCH &&
                !b.units[i].hit)
                submit(&b, &b.units[i], &report->units[i]);
    }
    if (b.pool_started)
        compile__pool_wait(&b.pool);
    rc = compile__collect(&b, err);
    if (rc)
        goto out;

    if (!torch) {
        char *msg = unavailable_torch(b.tc);
        for (size_t i = 0; i < b.n; i++)
            if (b.units[i].role != COMPILE_ROLE_CU)
                (void)!buf_addf(&report->units[i].log, "not built: %s\n", msg);
        (void)!buf_addf(&report->errors, "%s\n", msg);
        rc = err_setf(err, CA_EUNAVAIL, "%s", msg);
        free(msg);
        goto out;
    }
    bool all_ok = true;
    for (size_t i = 0; i < b.n; i++)
        all_ok = all_ok && report->units[i].ok;
    if (!all_ok)
        goto out;
    rc = compile__link(&b, out_so, err);
    report->ok = !rc && report->link_ok;
out:
    report->total_us = ca_now_us() - t0;
    *vanished = b.vanished;
    bool prune = b.stored && b.cache_dir && b.opts->cache_max_bytes != UINT64_MAX;
    char *cache_dir = prune ? xstrdup(b.cache_dir) : NULL;
    build_release(&b);
    if (prune) {
        struct ca_err e = {0};
        uint64_t max =
            b.opts->cache_max_bytes ? b.opts->cache_max_bytes : COMPILE_DEFAULT_CACHE_MAX;
        if (compile_cache_prune(cache_dir, max, NULL, &e))
            LOG_WARN("compile: %s", e.msg);
        free(cache_dir);
    }
    if (log_events_on())
        log_event("compile.build", report->total_us,
                  json_pack("{s:b, s:i, s:b, s:b}", "ok", report->ok, "units", (int)report->n,
                            "link_cached", report->link_cached, "pch_built", report->pch_built));
    return rc;
}

int compile_build(const struct compile_opts *opts, const char *snapshot_dir, const char *out_so,
                  struct compile_report *report, struct ca_err *err)
{
    int64_t t0 = ca_now_us();
    bool vanished = false;
    int rc = build_once(opts, snapshot_dir, out_so, report, &vanished, err);
    /* Another evaluator's pruning took an object this build had found: once more, which
     * compiles it again. Not the candidate's failure, and rare (a hit refreshes the entry). */
    if (rc && vanished) {
        LOG_WARN("%s; building again", err->msg);
        *err = (struct ca_err){0};
        rc = build_once(opts, snapshot_dir, out_so, report, &vanished, err);
        report->rebuilt = true;
        report->total_us = ca_now_us() - t0;
    }
    return rc;
}

int compile_warm(const struct compile_opts *opts, struct ca_err *err)
{
    struct compile_opts defaults;
    compile_opts_init(&defaults);
    struct compile_report rep;
    compile_report_init(&rep);
    struct compile__build b = {.opts = opts ? opts : &defaults, .rep = &rep};
    buf_init(&b.build_dir, CA_LIMIT_PATH);
    int rc = start(&b, err);
    if (!rc && !b.tc->have_torch) {
        char *msg = unavailable_torch(b.tc);
        rc = err_setf(err, CA_EUNAVAIL, "%s", msg);
        free(msg);
    }
    bool split = b.opts->inline_cuda && b.opts->use_split && b.opts->use_light;
    if (!rc && (b.opts->use_pch || split) && b.tc->cxx_is_gcc)
        rc = prepare_build_dir(&b, err);
    if (!rc && b.opts->use_pch && b.tc->cxx_is_gcc) {
        rc = compile__ensure_binding_pch(&b, err);
    }
    if (!rc && split && b.tc->cxx_is_gcc) {
        rc = compile__ensure_split_pch(&b, err);
    }
    build_release(&b);
    compile_report_release(&rep);
    return rc;
}
