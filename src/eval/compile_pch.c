/*
 * compile_pch.c - the precompiled headers (the bindings', and the torch half's of
 * split units) and the light torch headers they are built with.
 *
 * A precompiled header is an accelerator only: made once per key in the cache
 * (a compiler that refused it is remembered), hard-linked into each build, and
 * never part of an object's key. Runs on the build's thread.
 */
#include "eval/compile_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/limits.h"
#include "core/log.h"
#include "sandbox/sandbox.h"
#include "core/banned.h"

/* The precompiled header: what binding_registry.h includes before anything else. */
const char compile__pch_header[] =
    "/* cuda-agent: precompiled torch and pybind11 headers for bindings. */\n"
    "#include <torch/extension.h>\n"
    "#include <ATen/cuda/CUDAContext.h>\n"
    "#include <c10/cuda/CUDAGuard.h>\n"
    "#include <cuda_runtime_api.h>\n"
    "#include <pybind11/pybind11.h>\n"
    "#include <vector>\n";

/*
 * What a binding, or a load_inline source, that includes torch/extension.h gets first. The real
 * header adds torch's C++ frontend (nn, optim, data, jit, ...), which the policy refuses in such
 * sources anyway, and which makes a binding's compile, precompiled header or not, and nvcc, parsing
 * it in three front ends, several times slower. gcc units get pybind11 and torch's type casters
 * for it (bindings, load_inline's cpp source); nvcc units (cu-torch) may not bind, nor the torch
 * half of a split one (CUDA_AGENT_LIGHT_NO_PYBIND, defined by its precompiled header).
 * Include guards, not #pragma once: the precompiled header is built in another directory, and
 * gcc would take this file there and here for two different files.
 */
const char compile__light_header[] =
    "/* cuda-agent: the tensor API of torch/extension.h for bindings and load_inline sources. */\n"
    "#ifndef CUDA_AGENT_LIGHT_TORCH_EXTENSION_H\n"
    "#define CUDA_AGENT_LIGHT_TORCH_EXTENSION_H\n"
    "#include <torch/types.h>\n"
    "#include <ATen/cuda/CUDAContext.h>\n"
    "#include <c10/cuda/CUDAGuard.h>\n"
    "#if !defined(__CUDACC__) && !defined(CUDA_AGENT_LIGHT_NO_PYBIND)\n"
    "#include <torch/csrc/utils/pybind.h>\n"
    "#endif\n"
    "#endif\n";

/*
 * What `#include <torch/types.h>` (load_inline's prelude for cuda sources, and the light
 * torch/extension.h above) finds first: the tensor class, the functions that allocate outputs
 * (empty and zeros, ones, full: what KernelBench solutions allocate with; the policy reads the
 * built module to judge which may be called), and the torch:: names of at:: and of the dtypes,
 * without ATen/ATen.h (every operator's declaration: most of nvcc's time on such a unit). A
 * unit that needs more is retried with the real header, as for the light torch/extension.h.
 */
const char compile__light_types_header[] =
    "/* cuda-agent: the part of torch/types.h bindings and load_inline sources may use. */\n"
    "#ifndef CUDA_AGENT_LIGHT_TORCH_TYPES_H\n"
    "#define CUDA_AGENT_LIGHT_TORCH_TYPES_H\n"
    "#include <optional>\n"
    "#include <ATen/core/Tensor.h>\n"
    "#include <ATen/ops/empty.h>\n"
    "#include <ATen/ops/empty_like.h>\n"
    "#include <ATen/ops/empty_strided.h>\n"
    "#include <ATen/ops/zeros.h>\n"
    "#include <ATen/ops/zeros_like.h>\n"
    "#include <ATen/ops/ones.h>\n"
    "#include <ATen/ops/ones_like.h>\n"
    "#include <ATen/ops/full.h>\n"
    "#include <ATen/ops/full_like.h>\n"
    "#include <c10/cuda/CUDAStream.h>\n"
    "namespace torch {\n"
    "using namespace at;\n"
    "using std::nullopt;\n"
    "using std::optional;\n"
    "using Dtype = at::ScalarType;\n"
    "#define CA_TORCH_DTYPE_(sized, short_name, at_name) \\\n"
    "    constexpr auto sized = at::at_name;         \\\n"
    "    constexpr auto short_name = at::at_name;\n"
    "CA_TORCH_DTYPE_(kUInt8, kU8, kByte)\n"
    "CA_TORCH_DTYPE_(kInt8, kI8, kChar)\n"
    "CA_TORCH_DTYPE_(kInt16, kI16, kShort)\n"
    "CA_TORCH_DTYPE_(kInt32, kI32, kInt)\n"
    "CA_TORCH_DTYPE_(kInt64, kI64, kLong)\n"
    "CA_TORCH_DTYPE_(kUInt16, kU16, kUInt16)\n"
    "CA_TORCH_DTYPE_(kUInt32, kU32, kUInt32)\n"
    "CA_TORCH_DTYPE_(kUInt64, kU64, kUInt64)\n"
    "CA_TORCH_DTYPE_(kFloat16, kF16, kHalf)\n"
    "CA_TORCH_DTYPE_(kFloat32, kF32, kFloat)\n"
    "CA_TORCH_DTYPE_(kFloat64, kF64, kDouble)\n"
    "#undef CA_TORCH_DTYPE_\n"
    "} // namespace torch\n"
    "#endif\n";

/*
 * The precompiled header of the torch half of a split cu-torch unit (compile_split.c): the
 * prelude load_inline gives cuda sources and what the light torch/extension.h adds, which the
 * cut requires the source to include first, so it holds nothing the source does not. The light
 * torch/extension.h without pybind11, as nvcc's pass sees it: the half only checks, allocates
 * and launches, and pybind11 alone costs a g++ unit seconds of code it emits in every object.
 */
const char compile__split_pch_header[] =
    "/* cuda-agent: precompiled torch headers for the torch half of split cuda sources. */\n"
    "#define CUDA_AGENT_LIGHT_NO_PYBIND 1\n"
    "#include <torch/types.h>\n"
    "#include <cuda.h>\n"
    "#include <cuda_runtime.h>\n"
    "#include <ATen/cuda/CUDAContext.h>\n"
    "#include <c10/cuda/CUDAGuard.h>\n"
    "#include <torch/extension.h>\n";

/* Writes the light headers under DIR/light/torch/ (DIR/light/torch must exist). */
int compile__write_light_headers(const char *dir, struct ca_err *err)
{
    int rc = compile__write_file(dir, COMPILE__LIGHT_DIR "/torch/extension.h",
                                 compile__light_header, strlen(compile__light_header), err);
    if (!rc)
        rc = compile__write_file(dir, COMPILE__LIGHT_DIR "/torch/types.h",
                                 compile__light_types_header, strlen(compile__light_types_header),
                                 err);
    return rc;
}

/* Files of a finished directory made durable and read-only before it enters the cache. */
static int seal_file(const char *path, struct ca_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_setf(err, -errno, "compile: open '%s': %s", path, strerror(errno));
    int rc = fsync(fd) == 0 && fchmod(fd, 0444) == 0
                 ? 0
                 : err_setf(err, -errno, "compile: seal '%s': %s", path, strerror(errno));
    close(fd);
    return rc;
}

/* One of the precompiled headers: the bindings', or the torch half's of split units. */
struct pch_spec {
    const char *dir;                   /* where the build directory has it */
    const char *header;                /* its text */
    const struct compile__argv *flags; /* the c++ flags of the units that use it */
    bool light;                        /* the flags lack the light headers' -I: add it */
    const char *key;
    bool *ready;
};

static struct pch_spec binding_pch(struct compile__build *b)
{
    return (struct pch_spec){.dir = "pch",
                             .header = compile__pch_header,
                             .flags = &b->cxx_flags,
                             .light = b->opts->use_light,
                             .key = b->pch_key,
                             .ready = &b->pch_ready};
}

static struct pch_spec split_pch(struct compile__build *b)
{
    return (struct pch_spec){.dir = COMPILE__SPLIT_PCH_DIR,
                             .header = compile__split_pch_header,
                             .flags = &b->split_flags,
                             .key = b->split_pch_key,
                             .ready = &b->split_pch_ready};
}

static int link_pch_into_build(struct compile__build *b, const char *entry, const char *dir)
{
    static const char *const files[] = {"pch.h", "pch.h.gch"};
    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        char *from = xstrfmt("%s/%s", entry, files[i]);
        char *to = xstrfmt("%s/%s/%s", b->build_dir.data, dir, files[i]);
        int rc = link(from, to) == 0 ? 0 : -errno;
        if (rc)
            LOG_WARN("compile: cannot link the precompiled header %s into the build: %s", from,
                     strerror(-rc));
        free(from);
        free(to);
        if (rc)
            return rc;
    }
    return 0;
}

/*
 * Make sure a precompiled header exists in the cache and link it into the
 * build directory. Failing to make it is not an error of the build: the
 * units are then compiled without it. Runs on the build's thread while
 * the pool compiles .cu files.
 */
static int ensure_pch(struct compile__build *b, const struct pch_spec *spec, struct ca_err *err)
{
    struct compile_report *rep = b->rep;
    struct buf entry, failed, tmp;
    buf_init(&entry, CA_LIMIT_PATH + 64);
    buf_init(&failed, CA_LIMIT_PATH + 64);
    buf_init(&tmp, CA_LIMIT_PATH + 64);
    int rc = 0;
    struct compile__run r;
    compile__run_init(&r);
    if (compile__cache_path(b->cache_dir, COMPILE__PCH, spec->key, &entry) ||
        buf_addf(&failed, "%s.failed", entry.data))
        BUG("cache path over its bound");
    char *gch = xstrfmt("%s/pch.h.gch", entry.data);
    if (compile__cache_hit(gch)) {
        (void)compile__cache_hit(entry.data);
        goto link;
    }
    if (fs_exists(failed.data)) {
        LOG_DEBUG("compile: precompiled header %s failed before; not retried", spec->key);
        goto out;
    }
    char *base = xstrfmt("%s/tmp/pch", b->cache_dir);
    rc = fs_mkdtemp_beside(base, &tmp, err);
    free(base);
    if (rc)
        goto out;
    static const char *const subdirs[] = {"pch", COMPILE__LIGHT_DIR, (COMPILE__LIGHT_DIR "/torch"),
                                          NULL};
    rc = compile__make_dirs(tmp.data, subdirs, err);
    if (!rc)
        rc = compile__write_file(tmp.data, "pch/pch.h", spec->header, strlen(spec->header), err);
    if (!rc && b->opts->use_light)
        rc = compile__write_light_headers(tmp.data, err);
    if (rc)
        goto out;
    struct compile__argv argv;
    compile__argv_init(&argv);
    compile__argv_pushv(&argv, spec->flags);
    if (spec->light) {
        compile__argv_push(&argv, "-I");
        compile__argv_push(&argv, COMPILE__LIGHT_DIR);
    }
    static const char *const tail[] = {"-x", "c++-header", "pch/pch.h", "-o", "pch/pch.h.gch"};
    for (size_t i = 0; i < ARRAY_SIZE(tail); i++)
        compile__argv_push(&argv, tail[i]);
    static const char *const no_ro[] = {NULL};
    compile__run_tool(&b->ctx, tmp.data, &argv, no_ro, &b->ctx.binds_cxx, &r);
    compile__argv_release(&argv);
    rep->pch_us += r.elapsed_us;
    if (r.rc) {
        rc = r.rc;
        *err = r.err;
        goto out;
    }
    if (!r.ok) {
        char *tmp_slash = xstrfmt("%s/", tmp.data);
        const char *strip[] = {tmp_slash, SANDBOX_WORKSPACE "/", NULL};
        char *title = xstrfmt("precompiled header (%s): not used", r.how);
        compile__log_add(rep, title, &r.out, strip);
        free(title);
        free(tmp_slash);
        LOG_WARN("compile: building the precompiled header failed (%s); bindings compile "
                 "without it",
                 r.how);
        /* A compiler that said no will say no again: remember it. Not after a timeout, a
         * kill or a lack of resources, which another time may not repeat. */
        static const char *const transient[] = {"Killed signal", "internal compiler error",
                                                "No space left", "Cannot allocate memory",
                                                "out of memory"};
        bool remember = strncmp(r.how, "exit ", 5) == 0 && strstr(r.out.data, "error");
        for (size_t i = 0; remember && i < ARRAY_SIZE(transient); i++)
            remember = !strstr(r.out.data, transient[i]);
        struct ca_err e2 = {0};
        if (remember && fs_write_atomic(failed.data, r.out.data, r.out.len, 0644, &e2))
            LOG_WARN("compile: %s", e2.msg);
        goto out;
    }
    char *h = xstrfmt("%s/pch/pch.h", tmp.data), *g = xstrfmt("%s/pch/pch.h.gch", tmp.data);
    rc = seal_file(h, err);
    if (!rc)
        rc = seal_file(g, err);
    free(h);
    free(g);
    if (rc)
        goto out;
    char *dir = xstrfmt("%s/pch", tmp.data);
    struct ca_err e2 = {0};
    int mv = fs_rename_noreplace(dir, entry.data, &e2);
    free(dir);
    /* Another evaluator made the same header meanwhile: theirs is as good. */
    if (mv && mv != -EEXIST && mv != -ENOTEMPTY) {
        rc = mv;
        *err = e2;
        goto out;
    }
    rep->pch_built = rep->pch_built || mv == 0;
    b->stored = true;
link:
    *spec->ready = link_pch_into_build(b, entry.data, spec->dir) == 0;
out:
    if (tmp.len) {
        struct ca_err e3 = {0};
        if (fs_remove_tree(tmp.data, &e3))
            LOG_WARN("compile: %s", e3.msg);
    }
    free(gch);
    compile__run_release(&r);
    buf_release(&entry);
    buf_release(&failed);
    buf_release(&tmp);
    return rc;
}

int compile__ensure_binding_pch(struct compile__build *b, struct ca_err *err)
{
    struct pch_spec spec = binding_pch(b);
    return ensure_pch(b, &spec, err);
}

int compile__ensure_split_pch(struct compile__build *b, struct ca_err *err)
{
    struct pch_spec spec = split_pch(b);
    return ensure_pch(b, &spec, err);
}
