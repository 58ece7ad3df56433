/*
 * compile_toolchain.c - finding the compilers, CUDA, PyTorch and the GPU's
 * architecture, once per process.
 *
 * Invariants: a toolchain, once discovered, is never changed or freed (it
 * lives in a list keyed by the Python interpreter asked for, under one
 * mutex), so callers may keep the pointer for the life of the process.
 * Discovery runs at most one python3 (one `-c` program printing JSON: an
 * `import torch` costs a second or two), one `nvcc --version` and one
 * `c++ --version`. Every directory handed to compilers is a realpath, so a
 * sandbox can bind it at the same place. Missing pieces are recorded with
 * their reason, not failed on: .cu files need no PyTorch.
 */
#include "eval/compile_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/proc.h"
#include "core/banned.h"

#define VERSION_TIMEOUT_MS 30000
#define PYTHON_TIMEOUT_MS 120000
#define NVIDIA_SMI_TIMEOUT_MS 15000
#define PROBE_OUTPUT_MAX (1 * CA_MIB)

/*
 * Prints one JSON line. torch.utils.cpp_extension gives the include and
 * library directories the way torch's own extension builder uses them;
 * _PYBIND11_* are what torch's pybind11 was built with (extensions must
 * match to share pybind11 types with torch).
 */
const char compile__python_probe[] =
    "import json, os, sys, sysconfig\n"
    "o = {'python_version': sys.version.split()[0],\n"
    "     'python_include': sysconfig.get_paths().get('include'),\n"
    "     'ext_suffix': sysconfig.get_config_var('EXT_SUFFIX')}\n"
    "try:\n"
    "    import torch\n"
    "    from torch.utils import cpp_extension as ce\n"
    "    o['torch_version'] = torch.__version__\n"
    "    o['include_paths'] = list(ce.include_paths())\n"
    "    o['library_paths'] = list(ce.library_paths())\n"
    "    o['cxx11_abi'] = int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))\n"
    "    o['torch_cuda'] = torch.version.cuda\n"
    "    o['pybind11_abi'] = {k: getattr(torch._C, '_PYBIND11_' + k, None)\n"
    "                         for k in ('COMPILER_TYPE', 'STDLIB', 'BUILD_ABI')}\n"
    "except Exception as e:\n"
    "    o['torch_error'] = '%s: %s' % (type(e).__name__, e)\n"
    "try:\n"
    "    import nvidia.cudnn as c\n"
    "    d = list(c.__path__)[0]\n"
    "    libs = sorted(x for x in os.listdir(os.path.join(d, 'lib')) if "
    "x.startswith('libcudnn.so'))\n"
    "    o['cudnn_include'] = os.path.join(d, 'include')\n"
    "    o['cudnn_lib'] = os.path.join(d, 'lib', libs[0]) if libs else None\n"
    "except Exception:\n"
    "    pass\n"
    "print(json.dumps(o))\n";

struct node {
    struct node *next;
    struct compile__toolchain tc;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct node *toolchains;

static char *realpath_or_null(const char *p)
{
    return p ? realpath(p, NULL) : NULL;
}

static char *parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return xstrdup(".");
    if (slash == path)
        return xstrdup("/");
    return xstrndup(path, (size_t)(slash - path));
}

/* Run argv, capture stdout+stderr; returns a heap string (trimmed) or NULL. */
static char *run_capture(const char *const *argv, int64_t timeout_ms, const char **why)
{
    struct proc_opts o = {
        .argv = argv, .timeout_ms = timeout_ms, .out_max = PROBE_OUTPUT_MAX, .merge_stderr = true};
    struct proc_result r;
    proc_result_init(&r);
    struct ca_err e = {0};
    char *out = NULL;
    if (proc_run(&o, &r, &e) == 0 && proc_ok(&r)) {
        buf_rtrim(&r.out);
        out = xstrdup(r.out.data);
    } else if (why) {
        *why = r.timed_out ? "timed out" : e.code ? "could not be started" : "failed";
    }
    proc_result_release(&r);
    return out;
}

static char *find_nvcc(void)
{
    char *p = proc_which("nvcc");
    if (p)
        return p;
    const char *home = getenv("CUDA_HOME");
    if (home && *home) {
        char *c = xstrfmt("%s/bin/nvcc", home);
        if (access(c, X_OK) == 0)
            return c;
        free(c);
    }
    if (access("/usr/local/cuda/bin/nvcc", X_OK) == 0)
        return xstrdup("/usr/local/cuda/bin/nvcc");
    return NULL;
}

/* "Cuda compilation tools, release 13.0, V13.0.88" -> "13.0.88" */
static char *nvcc_release(const char *version)
{
    const char *v = strstr(version, ", V");
    if (!v)
        return xstrdup("unknown");
    v += 3;
    size_t n = strspn(v, "0123456789.");
    return n ? xstrndup(v, n) : xstrdup("unknown");
}

static void discover_nvcc(struct compile__toolchain *tc)
{
    char *found = find_nvcc();
    if (!found) {
        tc->nvcc_error = xstrdup("nvcc was not found in PATH, $CUDA_HOME/bin or "
                                 "/usr/local/cuda/bin: install the CUDA toolkit or put its "
                                 "bin/ directory in PATH");
        return;
    }
    char *real = realpath_or_null(found);
    free(found);
    if (!real) {
        tc->nvcc_error = xstrdup("nvcc: cannot resolve its path");
        return;
    }
    const char *argv[] = {real, "--version", NULL};
    const char *why = "failed";
    char *version = run_capture(argv, VERSION_TIMEOUT_MS, &why);
    if (!version) {
        tc->nvcc_error = xstrfmt("'%s --version' %s: check the CUDA installation", real, why);
        free(real);
        return;
    }
    tc->nvcc = real;
    tc->nvcc_version = version;
    tc->nvcc_release = nvcc_release(version);
    char *bin = parent_dir(real);
    tc->cuda_home = parent_dir(bin);
    free(bin);
    tc->cuda_include = xstrfmt("%s/include", tc->cuda_home);
    tc->cuda_lib = xstrfmt("%s/lib64", tc->cuda_home);
    if (!fs_is_dir(tc->cuda_lib)) {
        free(tc->cuda_lib);
        tc->cuda_lib = xstrfmt("%s/lib", tc->cuda_home);
    }
}

static void discover_cxx(struct compile__toolchain *tc)
{
    char *found = proc_which("c++");
    if (!found)
        found = proc_which("g++");
    char *real = realpath_or_null(found);
    free(found);
    if (!real) {
        tc->cxx_error = xstrdup("no C++ compiler (c++ or g++) in PATH: install g++");
        return;
    }
    const char *argv[] = {real, "--version", NULL};
    const char *why = "failed";
    char *version = run_capture(argv, VERSION_TIMEOUT_MS, &why);
    if (!version) {
        tc->cxx_error = xstrfmt("'%s --version' %s", real, why);
        free(real);
        return;
    }
    char *nl = strchr(version, '\n');
    if (nl)
        *nl = '\0';
    tc->cxx = real;
    tc->cxx_version = version;
    tc->cxx_is_gcc = !strstr(version, "clang") &&
                     (strstr(version, "g++") || strstr(version, "GCC") || strstr(version, "gcc"));
    /*
     * Linking against libtorch_cpu.so is mostly reading its symbol table: lld
     * does it in a third of the time of GNU ld (0.3 s against 1.0-1.5 s here),
     * gold in half. gcc takes -fuse-ld=mold from 12.1 on, lld from 9.
     */
    static const char *const linkers[][2] = {
        {"ld.mold", "-fuse-ld=mold"}, {"ld.lld", "-fuse-ld=lld"}, {"ld.gold", "-fuse-ld=gold"}};
    for (size_t i = 0; i < ARRAY_SIZE(linkers) && !tc->fuse_ld; i++) {
        char *p = proc_which(linkers[i][0]);
        if (p && (i > 0 || tc->cxx_is_gcc))
            tc->fuse_ld = xstrdup(linkers[i][1]);
        free(p);
    }
}

static int get_str_array(const json_t *obj, const char *key, struct compile__argv *out,
                         bool resolve, struct ca_err *err)
{
    json_t *arr = NULL;
    int rc = jsonx_get_array(obj, key, true, &arr, "the PyTorch probe", err);
    if (rc)
        return rc;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (!json_is_string(v))
            return err_setf(err, CA_EPARSE, "the PyTorch probe: %s[%zu] is not a string", key, i);
        if (!resolve) {
            compile__argv_push(out, json_string_value(v));
            continue;
        }
        /* Directories that do not exist (old torch lists TH/THC) are dropped. */
        char *real = realpath(json_string_value(v), NULL);
        if (real && fs_is_dir(real))
            compile__argv_push(out, real);
        free(real);
    }
    return 0;
}

/*
 * The version string does not change when torch is reinstalled from another
 * build of the same version; its headers' version.h does (mtime, size).
 */
static char *torch_identity(const struct compile__toolchain *tc)
{
    struct stat st = {0};
    for (size_t i = 0; i < tc->torch_includes.n; i++) {
        char *p = xstrfmt("%s/torch/version.h", tc->torch_includes.v[i]);
        int ok = stat(p, &st) == 0;
        free(p);
        if (ok)
            break;
    }
    return xstrfmt("torch %s; python %s; version.h %lld.%09ld %lld; abi %d", tc->torch_version,
                   tc->python_version ? tc->python_version : "?", (long long)st.st_mtim.tv_sec,
                   (long)st.st_mtim.tv_nsec, (long long)st.st_size, tc->cxx11_abi);
}

static char *dup_opt(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? xstrdup(json_string_value(v)) : NULL;
}

int compile__toolchain_parse_python(struct compile__toolchain *tc, struct sv text,
                                    struct ca_err *err)
{
    /* Anything torch printed on import comes first; our JSON is the last line. */
    struct sv t = sv_rtrim(text);
    size_t start = t.len;
    while (start > 0 && t.p[start - 1] != '\n')
        start--;
    struct sv last = sv_sub(t, start, t.len - start);
    json_t *o = NULL;
    int rc = jsonx_parse(last, PROBE_OUTPUT_MAX, "the PyTorch probe", &o, err);
    if (rc)
        return rc;
    if (!json_is_object(o)) {
        json_decref(o);
        return err_setf(err, CA_EPARSE, "the PyTorch probe printed no JSON object");
    }
    tc->python_version = dup_opt(o, "python_version");
    tc->python_include = realpath_or_null(json_string_value(json_object_get(o, "python_include")));
    tc->ext_suffix = dup_opt(o, "ext_suffix");
    tc->torch_error = dup_opt(o, "torch_error");
    tc->torch_version = dup_opt(o, "torch_version");
    tc->torch_cuda = dup_opt(o, "torch_cuda");
    char *cudnn_inc = dup_opt(o, "cudnn_include");
    char *cudnn_lib = dup_opt(o, "cudnn_lib");
    tc->cudnn_include = realpath_or_null(cudnn_inc);
    tc->cudnn_lib = realpath_or_null(cudnn_lib);
    free(cudnn_inc);
    free(cudnn_lib);
    if (tc->torch_version && !tc->torch_error) {
        int64_t abi = 0;
        json_t *pb = json_object_get(o, "pybind11_abi");
        rc = get_str_array(o, "include_paths", &tc->torch_includes, true, err);
        if (!rc)
            rc = get_str_array(o, "library_paths", &tc->torch_libdirs, true, err);
        if (!rc)
            rc = jsonx_get_int(o, "cxx11_abi", true, &abi, "the PyTorch probe", err);
        tc->cxx11_abi = abi ? 1 : 0;
        static const char *const pb_keys[] = {"COMPILER_TYPE", "STDLIB", "BUILD_ABI"};
        for (size_t i = 0; !rc && json_is_object(pb) && i < ARRAY_SIZE(pb_keys); i++) {
            const json_t *v = json_object_get(pb, pb_keys[i]);
            if (json_is_string(v))
                compile__argv_pushf(&tc->pybind11_defines, "-DPYBIND11_%s=\"%s\"", pb_keys[i],
                                    json_string_value(v));
        }
        if (!rc && (tc->torch_includes.n == 0 || tc->torch_libdirs.n == 0))
            tc->torch_error = xstrdup("torch.utils.cpp_extension lists no existing include or "
                                      "library directory");
        if (!rc && !tc->python_include)
            tc->torch_error = xstrdup("the Python include directory (Python.h) is missing: "
                                      "install the Python development headers");
        tc->have_torch = !rc && !tc->torch_error;
        if (tc->have_torch)
            tc->torch_identity = torch_identity(tc);
    }
    json_decref(o);
    return rc;
}

static void discover_python(struct compile__toolchain *tc)
{
    char *path = strchr(tc->python, '/')
                     ? (access(tc->python, X_OK) == 0 ? xstrdup(tc->python) : NULL)
                     : proc_which(tc->python);
    if (!path) {
        tc->torch_error =
            xstrfmt("%s was not found%s", tc->python, strchr(tc->python, '/') ? "" : " in PATH");
        return;
    }
    tc->python_path = path;
    const char *argv[] = {path, "-c", compile__python_probe, NULL};
    struct proc_opts o = {
        .argv = argv, .timeout_ms = PYTHON_TIMEOUT_MS, .out_max = PROBE_OUTPUT_MAX};
    struct proc_result r;
    proc_result_init(&r);
    struct ca_err e = {0};
    int64_t t0 = ca_now_us();
    int rc = proc_run(&o, &r, &e);
    if (rc) {
        tc->torch_error = xstrfmt("%s could not be started: %s", path, e.msg);
    } else if (!proc_ok(&r)) {
        struct buf d;
        buf_init(&d, 256);
        if (proc_describe(&r, o.timeout_ms, &d))
            buf_reset(&d);
        buf_rtrim(&r.err);
        const char *tail = r.err.data;
        if (r.err.len > 200)
            tail = r.err.data + r.err.len - 200;
        tc->torch_error = xstrfmt("%s -c <probe> failed (%s): %s", path, d.data, tail);
        buf_release(&d);
    } else {
        struct ca_err pe = {0};
        if (compile__toolchain_parse_python(tc, sv_from(r.out.data, r.out.len), &pe) < 0) {
            free(tc->torch_error);
            tc->torch_error = xstrfmt("%s", pe.msg);
            tc->have_torch = false;
        }
    }
    LOG_DEBUG("compile: python probe %s took %lld us: torch %s", path,
              (long long)(ca_now_us() - t0), tc->have_torch ? tc->torch_version : "missing");
    proc_result_release(&r);
}

int compile__toolchain_get(const char *python, const struct compile__toolchain **out,
                           struct ca_err *err)
{
    if (!python || !*python) {
        const char *env = getenv("CUDA_AGENT_PYTHON");
        python = env && *env ? env : "python3";
    }
    pthread_mutex_lock(&lock);
    struct node *n;
    for (n = toolchains; n; n = n->next)
        if (strcmp(n->tc.python, python) == 0)
            break;
    if (!n) {
        /* Discovered under the lock: concurrent first callers wait for one discovery. */
        n = xcalloc(1, sizeof(*n));
        struct compile__toolchain *tc = &n->tc;
        compile__argv_init(&tc->torch_includes);
        compile__argv_init(&tc->torch_libdirs);
        compile__argv_init(&tc->pybind11_defines);
        tc->python = xstrdup(python);
        discover_nvcc(tc);
        discover_cxx(tc);
        discover_python(tc);
        n->next = toolchains;
        toolchains = n;
    }
    pthread_mutex_unlock(&lock);
    *out = &n->tc;
    (void)err;
    return 0;
}

/* ---- architecture ---- */

static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static char gpu_arch[16];

static void query_gpu(void)
{
    char *smi = proc_which("nvidia-smi");
    if (!smi)
        return;
    const char *argv[] = {smi, "--query-gpu=compute_cap", "--format=csv,noheader", NULL};
    char *out = run_capture(argv, NVIDIA_SMI_TIMEOUT_MS, NULL);
    free(smi);
    if (!out)
        return;
    /* First line: "9.0" */
    unsigned major = 0, minor = 0;
    char tail = 0;
    if (sscanf(out, "%u.%u%c", &major, &minor, &tail) >= 2 && major > 0 && major < 100 &&
        minor < 10)
        snprintf(gpu_arch, sizeof(gpu_arch), "sm_%u%u", major, minor);
    free(out);
}

const char *compile__gpu_arch(void)
{
    pthread_once(&gpu_once, query_gpu);
    return gpu_arch;
}

int compile__arch_resolve(const char *opt, char out[16], struct ca_err *err)
{
    out[0] = '\0';
    if (!opt || !*opt) {
        const char *gpu = compile__gpu_arch();
        snprintf(out, 16, "%s", *gpu ? gpu : COMPILE_DEFAULT_ARCH);
        return 0;
    }
    const char *p = opt;
    if (strncmp(p, "sm_", 3) == 0)
        p += 3;
    else if (strncmp(p, "compute_", 8) == 0)
        p += 8;
    char digits[8];
    size_t n = 0;
    for (; *p && n < sizeof(digits) - 1; p++) {
        if (*p >= '0' && *p <= '9')
            digits[n++] = *p;
        else if (*p == '.' && n == 1 && p != opt)
            continue; /* "9.0" */
        else
            break;
    }
    digits[n] = '\0';
    const char *suffix = p;
    bool suffix_ok = !*suffix || ((*suffix == 'a' || *suffix == 'f') && !suffix[1]);
    if (n < 2 || n > 3 || !suffix_ok || digits[0] == '0')
        return err_setf(err, CA_EUSAGE,
                        "architecture '%.40s' is not like sm_90, sm_90a or 90 (compute "
                        "capability digits, optionally followed by a or f)",
                        opt);
    snprintf(out, 16, "sm_%s%s", digits, suffix);
    return 0;
}

/* ---- description ---- */

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static json_t *argv_json(const struct compile__argv *a)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < a->n; i++)
        json_array_append_new(arr, json_string(a->v[i]));
    return arr;
}

int compile_toolchain_describe(const struct compile_opts *opts, json_t **out, struct ca_err *err)
{
    *out = NULL;
    const struct compile__toolchain *tc;
    int rc = compile__toolchain_get(opts ? opts->python : NULL, &tc, err);
    if (rc)
        return rc;
    char arch[16];
    rc = compile__arch_resolve(opts ? opts->arch : NULL, arch, err);
    if (rc)
        return rc;
    struct buf cache;
    buf_init(&cache, CA_LIMIT_PATH);
    rc = compile_cache_dir(opts, &cache, err);
    if (rc) {
        buf_release(&cache);
        return rc;
    }
    json_t *torch =
        tc->have_torch
            ? json_pack("{s:s, s:o, s:o, s:o, s:i, s:o, s:o, s:o}", "version", tc->torch_version,
                        "cuda", str_or_null(tc->torch_cuda), "include_dirs",
                        argv_json(&tc->torch_includes), "library_dirs",
                        argv_json(&tc->torch_libdirs), "cxx11_abi", tc->cxx11_abi,
                        "pybind11_defines", argv_json(&tc->pybind11_defines), "cudnn_include",
                        str_or_null(tc->cudnn_include), "cudnn_lib", str_or_null(tc->cudnn_lib))
            : json_pack("{s:o}", "error", str_or_null(tc->torch_error));
    *out = json_pack(
        "{s:{s:o, s:o, s:o, s:o}, s:{s:o, s:o, s:o, s:o}, s:{s:o, s:o, s:o, s:o, s:o}, s:o, s:s, "
        "s:o, s:s}",
        "nvcc", "path", str_or_null(tc->nvcc), "version", str_or_null(tc->nvcc_release),
        "cuda_home", str_or_null(tc->cuda_home), "error", str_or_null(tc->nvcc_error), "cxx",
        "path", str_or_null(tc->cxx), "version", str_or_null(tc->cxx_version), "linker",
        str_or_null(tc->fuse_ld), "error", str_or_null(tc->cxx_error), "python", "interpreter",
        json_string(tc->python), "path", str_or_null(tc->python_path), "version",
        str_or_null(tc->python_version), "include", str_or_null(tc->python_include), "ext_suffix",
        str_or_null(tc->ext_suffix), "torch", torch, "arch", arch, "gpu_arch",
        *compile__gpu_arch() ? json_string(compile__gpu_arch()) : json_null(), "cache_dir",
        cache.data);
    buf_release(&cache);
    if (!*out)
        return err_setf(err, -ENOMEM, "compile: cannot build the toolchain description");
    return 0;
}
