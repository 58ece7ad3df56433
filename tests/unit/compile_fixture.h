/*
 * compile_fixture.h - shared set-up of the compile-pool tests (test_compile.c,
 * test_compile_inline.c, test_compile_keys.c): repository and fixture paths, the nvcc and
 * sandbox guards, snapshot directories, the fake PyTorch of tests/eval/compile (stub headers,
 * a fake python3 printing the toolchain probe's JSON, stub libraries made here) and the
 * common build set-up (struct tbuild). Included once per test file; everything is static, and
 * a file may leave some helpers unused.
 */
#ifndef CA_COMPILE_FIXTURE_H
#define CA_COMPILE_FIXTURE_H

#include "test.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/proc.h"
#include "core/util.h"
#include "eval/compile.h"
#include "eval/compile_internal.h"
#include "eval/cpuplan.h"
#include "eval/eval.h"
#include "sandbox/sandbox.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

#define SOFTMAX "examples/solutions/softmax_last_dim/kernels/softmax_last_dim.cu"

static char *repo_path(const char *rel)
{
    char *root = realpath(test_repo(), NULL);
    REQUIRE(root);
    char *p = xstrfmt("%s/%s", root, rel);
    free(root);
    return p;
}

static char *fixture(const char *rel)
{
    char *r = xstrfmt("tests/eval/compile/%s", rel);
    char *p = repo_path(r);
    free(r);
    return p;
}

/* Skip the case where there is no nvcc. */
static void need_nvcc(void)
{
    char *p = proc_which("nvcc");
    if (!p && access("/usr/local/cuda/bin/nvcc", X_OK) == 0)
        p = xstrdup("/usr/local/cuda/bin/nvcc");
    if (!p)
        SKIP("nvcc", "nvcc not found in PATH or /usr/local/cuda/bin");
    free(p);
}

/* Skip the case where this host cannot make a sandbox. */
static void need_sandbox(void)
{
    struct ca_err why = {0};
    if (!sandbox_supported(&why))
        SKIP("userns", "no sandbox here: %s", why.msg);
}

static void write_text(const char *path, const char *text)
{
    struct ca_err err = {0};
    REQUIRE(fs_write_atomic(path, text, strlen(text), 0644, &err) == 0);
}

static char *read_text(const char *path)
{
    struct buf b;
    buf_init(&b, 64 * 1024 * 1024);
    struct ca_err err = {0};
    REQUIRE(fs_read_file(path, b.max, &b, &err) == 0);
    return buf_detach(&b, NULL);
}

/* A snapshot directory <tmp>/<name> with an empty kernels/. */
static char *snapshot(const char *name)
{
    char *dir = xstrfmt("%s/%s", test_tmpdir(), name);
    char *k = xstrfmt("%s/kernels", dir);
    struct ca_err err = {0};
    REQUIRE(fs_mkdirs(k, 0755, &err) == 0);
    free(k);
    return dir;
}

/* Copy a file (repository-relative, or a fixture "src/NAME") into snap/kernels/dest. */
static void put_file(const char *snap, const char *dest, const char *from_repo)
{
    char *src = repo_path(from_repo);
    char *text = read_text(src);
    char *dst = xstrfmt("%s/kernels/%s", snap, dest);
    write_text(dst, text);
    free(src);
    free(text);
    free(dst);
}

static void put_text(const char *snap, const char *dest, const char *text)
{
    char *dst = xstrfmt("%s/kernels/%s", snap, dest);
    write_text(dst, text);
    free(dst);
}

static void base_opts(struct compile_opts *o, const char *cache)
{
    compile_opts_init(o);
    o->use_sandbox = false;
    o->cache_dir = cache;
}

/* A python3 without PyTorch: .cu files build, bindings cannot. */
static void no_torch(struct compile_opts *o)
{
    static char *py;
    if (!py)
        py = fixture("fake_python_notorch");
    o->python = py;
}

/* Stub libc10.so & co. in dir (torch_cuda and c10_cuda left out, as in a CPU-only torch). */
static void make_stub_libs(const char *dir)
{
    struct ca_err err = {0};
    REQUIRE(fs_mkdirs(dir, 0755, &err) == 0);
    static const char *const names[] = {"c10", "torch", "torch_cpu", "torch_python"};
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        char *out = xstrfmt("%s/lib%s.so", dir, names[i]);
        const char *argv[] = {"cc", "-shared", "-o", out, "-x", "c", "/dev/null", NULL};
        struct proc_opts po = {.argv = argv, .timeout_ms = 30000};
        struct proc_result r;
        proc_result_init(&r);
        REQUIRE(proc_run(&po, &r, &err) == 0);
        CHECK(proc_ok(&r));
        proc_result_release(&r);
        free(out);
    }
}

/* The fake PyTorch of tests/eval/compile, with stub libraries in lib_dir. */
static void fake_torch(struct compile_opts *o, const char *lib_dir)
{
    static char *py;
    make_stub_libs(lib_dir);
    setenv("FAKE_TORCH_LIB", lib_dir, 1);
    if (!py)
        py = fixture("fake_python");
    o->python = py;
}

static const struct compile_unit_report *unit(const struct compile_report *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->units[i].name, name) == 0)
            return &r->units[i];
    test__fail(__FILE__, __LINE__, "no unit %s in the report", name);
    test__abort_case();
}

static int build(const struct compile_opts *o, const char *snap, const char *out_so,
                 struct compile_report *r, struct ca_err *err)
{
    err_clear(err);
    int rc = compile_build(o, snap, out_so, r, err);
    if (rc && rc != CA_EUNAVAIL)
        fprintf(stderr, "  compile_build: %s\n", err->msg);
    return rc;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static size_t count_files(const char *dir)
{
    char *cmd = xstrfmt("find '%s' -type f | wc -l", dir);
    const char *argv[] = {"sh", "-c", cmd, NULL};
    struct proc_opts po = {.argv = argv, .timeout_ms = 10000};
    struct proc_result r;
    proc_result_init(&r);
    struct ca_err err = {0};
    REQUIRE(proc_run(&po, &r, &err) == 0);
    size_t n = strtoul(r.out.data, NULL, 10);
    proc_result_release(&r);
    free(cmd);
    return n;
}

/* The common set-up of a build test: a snapshot directory ("snap"), a cache, the fake torch
 * (stub libraries in "fakelib"), an output path, default options, a report and an error. */
struct tbuild {
    char *snap, *cache, *lib, *out;
    struct compile_opts o;
    struct compile_report r;
    struct ca_err err;
};

static void tb_begin(struct tbuild *t)
{
    t->snap = snapshot("snap");
    t->cache = xstrfmt("%s/cache", test_tmpdir());
    t->lib = xstrfmt("%s/fakelib", test_tmpdir());
    t->out = xstrfmt("%s/cuda_extension.so", test_tmpdir());
    base_opts(&t->o, t->cache);
    fake_torch(&t->o, t->lib);
    compile_report_init(&t->r);
    t->err = (struct ca_err){0};
}

static void tb_end(struct tbuild *t)
{
    compile_report_release(&t->r);
    free(t->snap);
    free(t->cache);
    free(t->lib);
    free(t->out);
}

/* Prints the report's errors and log when the build failed (to read a failing check). */
static void tb_show_errors(const struct tbuild *t)
{
    if (!t->r.ok)
        fprintf(stderr, "  errors:\n%s\n  log:\n%s\n", t->r.errors.data, t->r.full_log.data);
}

#pragma GCC diagnostic pop

#endif
