/*
 * compile_flags.c - the flags of every kind of unit (nvcc for .cu and cu-torch
 * units, c++ for bindings and the torch half of a split unit), the keys of the
 * precompiled headers that depend on them, the host directories each kind of
 * run binds into its sandbox, and the compilers' environment.
 *
 * Everything here decides an object: a flag changed here changes the keys.
 */
#include "eval/compile_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/limits.h"
#include "core/banned.h"

/* Part of every cu-torch key: a change to the cut changes the objects it makes. */
#define SPLIT_VERSION "cuda-agent/split/v1"

void compile__push_bind(struct compile__argv *a, const char *dir)
{
    if (dir && *dir)
        compile__argv_push(a, dir);
}

/* Flags that decide an object (argv without output and input). */

/*
 * The C++ standard the PyTorch headers need: recent releases refuse anything
 * before C++20 (torch/all.h says so with an #error), older ones build with
 * C++17. Read from the headers rather than guessed from a version number.
 */
static const char *torch_cxx_std(const struct compile__toolchain *tc)
{
    for (size_t i = 0; i < tc->torch_includes.n; i++) {
        struct buf path, text;
        buf_init(&path, CA_LIMIT_PATH);
        buf_init(&text, 256 * CA_KIB);
        bool cxx20 = false;
        if (fs_join(&path, tc->torch_includes.v[i], "torch/csrc/api/include/torch/all.h") == 0 &&
            fs_read_file(path.data, text.max, &text, NULL) == 0)
            cxx20 = strstr(text.data, "C++20") != NULL;
        bool found = text.len > 0;
        buf_release(&path);
        buf_release(&text);
        if (found)
            return cxx20 ? "-std=c++20" : "-std=c++17";
    }
    return "-std=c++17";
}

/*
 * nvcc for a load_inline cuda source (KernelBench mode): the flags torch's extension builder
 * gives such a file (its C++ standard, ABI and pybind11 ABI, extension defines, the __CUDA_NO_HALF*
 * defines that keep torch's own half operators unambiguous, and the torch and Python include
 * directories), with this build's optimisation and architecture. No precompiled header: nvcc parses
 * the headers in its own front end, so a gcc .gch cannot serve it.
 */
static void make_cu_torch_flags(struct compile__build *b, const char *num)
{
    const struct compile__toolchain *tc = b->tc;
    struct compile__argv *f = &b->cu_torch_flags;
    compile__argv_push(f, tc->nvcc);
    compile__argv_push(f, "-ccbin");
    compile__argv_push(f, tc->cxx);
    compile__argv_push(f, torch_cxx_std(tc));
    static const char *const common[] = {
        "-c",
        "-O3",
        "-Xcompiler",
        "-fPIC",
        "--expt-relaxed-constexpr",
        "-lineinfo",
        "-Xptxas",
        "-v",
        ("-DTORCH_EXTENSION_NAME=" COMPILE_MODULE_NAME),
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        "-D__CUDA_NO_HALF_OPERATORS__",
        "-D__CUDA_NO_HALF_CONVERSIONS__",
        "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-D__CUDA_NO_HALF2_OPERATORS__",
    };
    for (size_t i = 0; i < ARRAY_SIZE(common); i++)
        compile__argv_push(f, common[i]);
    compile__argv_pushf(f, "-D_GLIBCXX_USE_CXX11_ABI=%d", tc->cxx11_abi);
    /* pybind11's inline functions must match the bindings' copies (one of them is linked). */
    compile__argv_pushv(f, &tc->pybind11_defines);
    compile__argv_push(f, "-gencode");
    compile__argv_pushf(f, "arch=compute_%s,code=[sm_%s,compute_%s]", num, num, num);
    for (size_t i = 0; i < tc->torch_includes.n; i++) {
        compile__argv_push(f, "-isystem");
        compile__argv_push(f, tc->torch_includes.v[i]);
        compile__push_bind(&b->ctx.binds_cu_torch, tc->torch_includes.v[i]);
    }
    compile__argv_push(f, "-isystem");
    compile__argv_push(f, tc->python_include);
    if (tc->cudnn_include) {
        compile__argv_push(f, "-isystem");
        compile__argv_push(f, tc->cudnn_include);
    }
    compile__push_bind(&b->ctx.binds_cu_torch, tc->cuda_home);
    compile__push_bind(&b->ctx.binds_cu_torch, tc->python_include);
    compile__push_bind(&b->ctx.binds_cu_torch, tc->cudnn_include);
}

/*
 * KernelBench mode: nvcc's flags for cu-torch units (which also build the nvcc half of a split
 * one, without the light headers), c++'s for the torch half (the bindings' flags, the
 * __CUDA_NO_HALF* defines nvcc's host pass gets, the light headers, and no warning for the CUDA
 * attributes g++ ignores on the kernels' declarations), the split header's key, and the flags
 * in a cu-torch object's key: both ways of building it, so that a change to either misses.
 */
static void make_split_flags(struct compile__build *b, const char *num)
{
    const struct compile__toolchain *tc = b->tc;
    make_cu_torch_flags(b, num);
    struct compile__argv *f = &b->split_flags;
    compile__argv_pushv(f, &b->cxx_flags);
    static const char *const extra[] = {"-D__CUDA_NO_HALF_OPERATORS__",
                                        "-D__CUDA_NO_HALF_CONVERSIONS__",
                                        "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
                                        "-D__CUDA_NO_HALF2_OPERATORS__",
                                        "-Wno-attributes",
                                        "-I",
                                        COMPILE__LIGHT_DIR};
    for (size_t i = 0; i < ARRAY_SIZE(extra); i++)
        compile__argv_push(f, extra[i]);
    struct buf hdrs;
    buf_init(&hdrs, (strlen(compile__split_pch_header) + 1) + (strlen(compile__light_header) + 1) +
                        (strlen(compile__light_types_header) + 1));
    if (buf_addstr(&hdrs, compile__split_pch_header) || buf_addstr(&hdrs, compile__light_header) ||
        buf_addstr(&hdrs, compile__light_types_header))
        BUG("precompiled header inputs over their bound");
    compile__pch_key(tc->cxx, tc->cxx_version, tc->torch_identity, (const char *const *)f->v,
                     sv_from(hdrs.data, hdrs.len), b->split_pch_key);
    buf_release(&hdrs);
    compile__argv_pushv(&b->cu_torch_key, &b->cu_torch_flags);
    compile__argv_push(&b->cu_torch_key, SPLIT_VERSION);
    compile__argv_pushv(&b->cu_torch_key, f);
}

void compile__make_flags(struct compile__build *b, const char *arch)
{
    const struct compile__toolchain *tc = b->tc;
    struct compile__argv *f = &b->cu_flags;
    const char *num = arch + 3; /* "90", "90a" */
    compile__argv_push(f, tc->nvcc);
    compile__argv_push(f, "-ccbin");
    compile__argv_push(f, tc->cxx);
    static const char *const cu_common[] = {
        "-c",
        "-O3",
        "-std=c++17",
        "-Xcompiler",
        "-fPIC",
        "--expt-relaxed-constexpr",
        "-lineinfo",
        /* registers, spills and shared memory per kernel, for the report */
        "-Xptxas",
        "-v",
    };
    for (size_t i = 0; i < ARRAY_SIZE(cu_common); i++)
        compile__argv_push(f, cu_common[i]);
    compile__argv_push(f, "-gencode");
    compile__argv_pushf(f, "arch=compute_%s,code=[sm_%s,compute_%s]", num, num, num);
    if (tc->cudnn_include)
        compile__argv_pushf(f, "-I%s", tc->cudnn_include);
    b->cu_identity = xstrfmt("%s\n%s", tc->nvcc_version, tc->cxx_version);

    compile__push_bind(&b->ctx.binds_cu, tc->cuda_home);
    compile__push_bind(&b->ctx.binds_cu, tc->cudnn_include);
    if (!tc->have_torch)
        return;

    f = &b->cxx_flags;
    compile__argv_push(f, tc->cxx);
    compile__argv_push(f, torch_cxx_std(tc));
    /* -O1: a binding checks its arguments, allocates and launches; -O2 costs a third more
     * compile time (pybind11's and torch's inline code) for ~0.15 us less per call
     * (bench/binding_opt.py). */
    static const char *const cxx_common[] = {
        "-c",
        "-O1",
        "-fPIC",
        ("-DTORCH_EXTENSION_NAME=" COMPILE_MODULE_NAME),
        "-DTORCH_API_INCLUDE_EXTENSION_H",
    };
    for (size_t i = 0; i < ARRAY_SIZE(cxx_common); i++)
        compile__argv_push(f, cxx_common[i]);
    compile__argv_pushf(f, "-D_GLIBCXX_USE_CXX11_ABI=%d", tc->cxx11_abi);
    compile__argv_pushv(f, &tc->pybind11_defines);
    compile__argv_push(f, "-I.");
    for (size_t i = 0; i < tc->torch_includes.n; i++) {
        compile__argv_push(f, "-isystem");
        compile__argv_push(f, tc->torch_includes.v[i]);
        compile__push_bind(&b->ctx.binds_cxx, tc->torch_includes.v[i]);
    }
    compile__argv_push(f, "-isystem");
    compile__argv_push(f, tc->cuda_include);
    compile__argv_push(f, "-isystem");
    compile__argv_push(f, tc->python_include);
    if (tc->cudnn_include) {
        compile__argv_push(f, "-isystem");
        compile__argv_push(f, tc->cudnn_include);
    }
    compile__push_bind(&b->ctx.binds_cxx, tc->cuda_home);
    compile__push_bind(&b->ctx.binds_cxx, tc->python_include);
    compile__push_bind(&b->ctx.binds_cxx, tc->cudnn_include);
    /* The light headers are part of what the precompiled header holds. */
    struct buf hdrs;
    buf_init(&hdrs, (strlen(compile__pch_header) + 1) + (strlen(compile__light_header) + 1) +
                        (strlen(compile__light_types_header) + 1));
    if (buf_addstr(&hdrs, compile__pch_header) ||
        (b->opts->use_light && (buf_addstr(&hdrs, compile__light_header) ||
                                buf_addstr(&hdrs, compile__light_types_header))))
        BUG("precompiled header inputs over their bound");
    compile__pch_key(tc->cxx, tc->cxx_version, tc->torch_identity,
                     (const char *const *)b->cxx_flags.v, sv_from(hdrs.data, hdrs.len), b->pch_key);
    buf_release(&hdrs);
    if (b->opts->inline_cuda)
        make_split_flags(b, num);
}

void compile__make_env(struct compile__build *b)
{
    struct compile__argv *e = &b->ctx.env;
    const char *tmp = getenv("TMPDIR");
    compile__argv_pushf(e, "PATH=%s/bin:/usr/local/bin:/usr/bin:/bin", b->tc->cuda_home);
    compile__argv_push(e, "LC_ALL=C");
    compile__argv_push(e, "HOME=/tmp");
    /* Inside a sandbox /tmp is its own; outside, keep the operator's TMPDIR. */
    compile__argv_pushf(e, "TMPDIR=%s", !b->ctx.sandbox && tmp && *tmp ? tmp : "/tmp");
}
