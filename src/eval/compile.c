/*
 * compile.c - one build: snapshot in, extension module and report out.
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
 *   leaves obj/ for the cache (rename) as soon as its compiler is done, so
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
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/embed.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/proc.h"
#include "eval/compile_internal.h"
#include "eval/cpuplan.h"
#include "sandbox/sandbox.h"
#include "core/banned.h"

#define TEMPLATE_BINDING "template/binding.cpp"
#define TEMPLATE_REGISTRY "template/binding_registry.h"
#define REGISTRY_UNIT "binding.cpp"
#define REGISTRY_HEADER "binding_registry.h"
/* All source bytes of one snapshot together. */
#define SNAPSHOT_BYTES_MAX (64 * CA_MIB)
/* Compiler output kept per run (stdout and stderr together). */
#define RUN_OUTPUT_MAX CA_LIMIT_COMPILE_LOG
#define ENV_BIN "/usr/bin/env"
/* Per compiler process (RLIMIT_AS) and per sandbox (cgroup memory). */
#define SANDBOX_COMPILE_AS ((uint64_t)16 << 30)
#define SANDBOX_COMPILE_MEMORY ((uint64_t)8 << 30)

/* The precompiled header: what binding_registry.h includes before anything else. */
static const char pch_header[] =
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
#define LIGHT_DIR "light"
static const char light_header[] =
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
static const char light_types_header[] =
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
#define SPLIT_PCH_DIR "pch_split"
#define SPLIT_DIR "split"
static const char split_pch_header[] =
    "/* cuda-agent: precompiled torch headers for the torch half of split cuda sources. */\n"
    "#define CUDA_AGENT_LIGHT_NO_PYBIND 1\n"
    "#include <torch/types.h>\n"
    "#include <cuda.h>\n"
    "#include <cuda_runtime.h>\n"
    "#include <ATen/cuda/CUDAContext.h>\n"
    "#include <c10/cuda/CUDAGuard.h>\n"
    "#include <torch/extension.h>\n";
/* Part of every cu-torch key: a change to the cut changes the objects it makes. */
#define SPLIT_VERSION "cuda-agent/split/v1"

/* Paths of the build directory bound read-only for compilers. */
static const char *const ro_compile[] = {"kernels",     REGISTRY_UNIT, REGISTRY_HEADER, "pch",
                                         SPLIT_PCH_DIR, SPLIT_DIR,     LIGHT_DIR,       NULL};
static const char *const ro_link[] = {"kernels", REGISTRY_UNIT, REGISTRY_HEADER,
                                      "pch",     SPLIT_PCH_DIR, SPLIT_DIR,
                                      LIGHT_DIR, "link",        NULL};

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

void compile_report_init(struct compile_report *r)
{
    *r = (struct compile_report){0};
    buf_init(&r->errors, CA_LIMIT_COMPILE_LOG);
    buf_init(&r->full_log, CA_LIMIT_COMPILE_LOG);
}

static void units_release(struct compile_report *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->units[i].name);
        buf_release(&r->units[i].log);
    }
    FREE_AND_NULL(r->units);
    r->n = 0;
}

void compile_report_release(struct compile_report *r)
{
    units_release(r);
    FREE_AND_NULL(r->so_path);
    buf_release(&r->errors);
    buf_release(&r->full_log);
}

/* ---- running one compiler ---- */

struct run {
    int rc; /* < 0: the compiler could not be started (err says why) */
    struct ca_err err;
    bool ok, timed_out;
    char how[96]; /* "exit 1", "killed by signal 9 (Killed)", "timed out after 5000 ms" */
    struct buf out;
    int64_t elapsed_us;
};

/* Shared by every run of one build; read-only once the build starts running jobs. */
struct ctx {
    const char *build_dir; /* absolute */
    int64_t timeout_ms;
    bool sandbox;
    struct compile__argv env; /* NAME=VALUE */
    /* Host directories compilers need (sandbox binds), per kind of run. */
    struct compile__argv binds_cu, binds_cxx, binds_link, binds_cu_torch;
};

static void run_init(struct run *r)
{
    *r = (struct run){0};
    buf_init(&r->out, 2 * RUN_OUTPUT_MAX + 64);
}

static void run_release(struct run *r)
{
    buf_release(&r->out);
}

static void run_direct(const struct ctx *c, const char *dir, char *const *argv, struct run *r)
{
    struct proc_opts o = {.argv = (const char *const *)argv,
                          .env = (const char *const *)c->env.v,
                          .cwd = dir,
                          .out_max = RUN_OUTPUT_MAX,
                          .merge_stderr = true,
                          .timeout_ms = c->timeout_ms};
    struct proc_result pr;
    proc_result_init(&pr);
    r->rc = proc_run(&o, &pr, &r->err);
    if (!r->rc) {
        r->ok = proc_ok(&pr);
        r->timed_out = pr.timed_out;
        struct buf how;
        buf_init(&how, sizeof(r->how) - 1);
        if (proc_describe(&pr, c->timeout_ms, &how) == 0)
            snprintf(r->how, sizeof(r->how), "%s", how.data);
        buf_release(&how);
        if (buf_add(&r->out, pr.out.data, pr.out.len) ||
            (pr.out_truncated && buf_addstr(&r->out, "\n[output truncated]\n")))
            BUG("run output over its bound");
    }
    r->elapsed_us = pr.elapsed_us;
    proc_result_release(&pr);
}

/* strsignal is not thread-safe; these are the signals a compiler dies of. */
static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGKILL:
        return "SIGKILL";
    case SIGSEGV:
        return "SIGSEGV";
    case SIGABRT:
        return "SIGABRT";
    case SIGBUS:
        return "SIGBUS";
    case SIGTERM:
        return "SIGTERM";
    case SIGXCPU:
        return "SIGXCPU (CPU time limit)";
    case SIGXFSZ:
        return "SIGXFSZ (file size limit)";
    }
    return "a signal";
}

static void run_sandboxed(const struct ctx *c, const char *dir, char *const *argv,
                          const char *const *ro, const struct compile__argv *binds, struct run *r)
{
    /* The sandbox starts programs with its own minimal environment: set ours through env -i. */
    struct compile__argv full;
    compile__argv_init(&full);
    compile__argv_push(&full, ENV_BIN);
    compile__argv_push(&full, "-i");
    compile__argv_pushv(&full, &c->env);
    for (size_t i = 0; argv[i]; i++)
        compile__argv_push(&full, argv[i]);
    struct sandbox_opts so = {
        .workspace = dir,
        .ro_paths = ro,
        .extra_ro_binds = (const char *const *)binds->v,
        .hostname = "compile",
        /* Compilers are hungry: cicc on a large kernel, cc1plus on the torch headers. */
        .limits = {.cpu_seconds = (uint64_t)(c->timeout_ms / 1000) + 30,
                   .address_space = SANDBOX_COMPILE_AS,
                   .memory_bytes = SANDBOX_COMPILE_MEMORY},
    };
    struct sandbox_run_result sr;
    sandbox_run_result_init(&sr);
    int64_t t0 = ca_now_us();
    r->rc =
        sandbox_run(&so, (const char *const *)full.v, c->timeout_ms, RUN_OUTPUT_MAX, &sr, &r->err);
    r->elapsed_us = ca_now_us() - t0;
    if (!r->rc) {
        r->timed_out = sr.timed_out;
        r->ok = !sr.timed_out && WIFEXITED(sr.status) && WEXITSTATUS(sr.status) == 0;
        if (sr.timed_out)
            snprintf(r->how, sizeof(r->how), "timed out after %lld ms", (long long)c->timeout_ms);
        else if (WIFSIGNALED(sr.status))
            snprintf(r->how, sizeof(r->how), "killed by %s", signal_name(WTERMSIG(sr.status)));
        else
            snprintf(r->how, sizeof(r->how), "exit %d", WEXITSTATUS(sr.status));
        if (buf_add(&r->out, sr.out.data, sr.out.len) ||
            buf_add(&r->out, sr.err.data, sr.err.len) ||
            ((sr.out_truncated || sr.err_truncated) &&
             buf_addstr(&r->out, "\n[output truncated]\n")))
            BUG("run output over its bound");
    }
    sandbox_run_result_release(&sr);
    compile__argv_release(&full);
}

static void run_tool_here(const struct ctx *c, const char *dir, const struct compile__argv *argv,
                          const char *const *ro, const struct compile__argv *binds, struct run *r)
{
    /* A timed section on a GPU runner: the new compiler waits for it (bounded, cpuplan.h). */
    int64_t waited = cpuplan_defer_compile();
    if (waited > 0)
        LOG_DEBUG("compile: waited %lld ms for a timed section", (long long)waited);
    buf_reset(&r->out);
    r->rc = 0;
    r->ok = r->timed_out = false;
    r->how[0] = '\0';
    err_clear(&r->err);
    if (log__level >= LOG_LEVEL_DEBUG) {
        struct buf cmd;
        buf_init(&cmd, 8192);
        for (size_t i = 0; i < argv->n; i++)
            if (buf_addf(&cmd, "%s%s", i ? " " : "", argv->v[i]))
                break;
        LOG_DEBUG("compile: %s%s (in %s)", c->sandbox ? "[sandbox] " : "", cmd.data, dir);
        buf_release(&cmd);
    }
    if (c->sandbox)
        run_sandboxed(c, dir, argv->v, ro, binds, r);
    else
        run_direct(c, dir, argv->v, r);
}

/* One compiler run on a thread of its own, placed for compiling (cpuplan.h). */
struct tool_call {
    const struct ctx *c;
    const char *dir;
    const struct compile__argv *argv, *binds;
    const char *const *ro;
    struct run *r;
};

static void *tool_call_run(void *arg)
{
    struct tool_call *t = arg;
    (void)cpuplan_place_thread();
    run_tool_here(t->c, t->dir, t->argv, t->ro, t->binds, t->r);
    return NULL;
}

/*
 * Every compiler starts here. It inherits its affinity and nice value from the thread that
 * forks it: the pool's workers are placed for compiling once (cpuplan_place_thread); a thread
 * that is not (the build's own, for the precompiled header and the link) hands the run to a
 * short-lived placed thread, since its nice value could not be lowered again afterwards.
 */
static void run_tool(const struct ctx *c, const char *dir, const struct compile__argv *argv,
                     const char *const *ro, const struct compile__argv *binds, struct run *r)
{
    if (cpuplan_thread_unplaced()) {
        struct tool_call t = {c, dir, argv, binds, ro, r};
        pthread_t th;
        if (pthread_create(&th, NULL, tool_call_run, &t) == 0) {
            pthread_join(th, NULL);
            return;
        }
        LOG_WARN("compile: no thread for a placed compiler run; running it unplaced");
    }
    run_tool_here(c, dir, argv, ro, binds, r);
}

/* ---- units and jobs ---- */

struct unit {
    char *name; /* workspace-relative */
    enum compile_role role;
    struct buf src;
    char digest[HASH128_HEX_LEN + 1]; /* of src, for the keys of units including it */
    struct buf deps;                  /* "name digest\n" of the units it includes */
    char key[HASH128_HEX_LEN + 1];
    char *cache_path;
    bool hit;
};

struct job {
    struct unit *u;
    struct compile_unit_report *rep;
    struct compile__argv argv;       /* with the precompiled header or light headers, when used */
    struct compile__argv argv_plain; /* without them (retry); empty when not used */
    bool light;                      /* argv has the light torch/extension.h and types.h */
    bool pch;                        /* argv has the precompiled header */
    char obj[40];                    /* obj/<n>.o in the build directory */
    const struct compile__argv *binds;
    /* A cu-torch unit cut in two (compile_split.c): the halves, their merge into obj, and the
     * names the merged object must define. argv_dev empty: not cut; argv_host empty: no torch
     * half, the nvcc half is the object. The unit's own argv is the fallback. */
    struct compile__argv argv_dev, argv_host, argv_merge;
    const struct compile__argv *binds_host;
    struct buf split_names;
    /* Written by the worker. */
    struct run run;
    bool used_pch, retried;
    bool split_ok;        /* the object is the merged halves */
    int64_t split_us;     /* time spent on halves that failed, before the fallback */
    struct buf split_log; /* why the halves failed, and what their compilers said */
    int store_rc;
    struct ca_err store_err;
};

struct pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    struct job **queue;
    size_t qhead, qlen, qalloc;
    size_t pending; /* submitted, not finished */
    bool stop;
    pthread_t *threads;
    size_t nthreads, max_threads;
    const struct ctx *ctx;
};

/*
 * A PCH-specific failure: gcc names the .gch ("pch.h.gch: created by a
 * different GCC executable"), PCH ("had to relocate PCH", "one or more PCH
 * files were found, but they were invalid") or the missing header itself.
 */
static bool pch_failure(const struct buf *out)
{
    return strstr(out->data, ".gch") || strstr(out->data, "PCH") ||
           strstr(out->data, "precompiled header") || strstr(out->data, "pch/pch.h: No such file");
}

/*
 * A failure the light torch headers may have caused: a name or header the real ones would have
 * brought (gcc's and EDG's words), with a torch, ATen, c10 or pybind11 name on the error's line
 * or on the source lines the compiler quotes after it. Any other error fails the same way twice,
 * so it is not retried: a broken binding costs one compile, not two. A unit the heuristic
 * misjudges costs its author time, never a wrong verdict.
 */
static bool light_failure(const struct buf *out)
{
    static const char *const words[] = {"is undefined",
                                        "has no member",
                                        "was not declared",
                                        "is not a member of",
                                        "incomplete type",
                                        "no instance of",
                                        "no matching",
                                        "cannot open source file",
                                        "No such file",
                                        "not a class, namespace",
                                        "must be a class or namespace",
                                        "has not been declared",
                                        "does not name a type",
                                        "is not a namespace"};
    /* scalar_t and AT_*: the names AT_DISPATCH_* macros bring (found on leaderboard code). */
    static const char *const names[] = {"torch",    "at::", "'at'",   "\"at\"",   "ATen", "c10",
                                        "pybind11", "py::", "Tensor", "scalar_t", "AT_"};
    const char *p = out->data, *end = out->data + out->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        bool word = false;
        for (size_t i = 0; !word && i < ARRAY_SIZE(words); i++)
            word = memmem(p, (size_t)(eol - p), words[i], strlen(words[i])) != NULL;
        if (word) {
            /* This line and the two after it (gcc and EDG quote the source there). */
            const char *q = eol;
            for (int k = 0; k < 2 && q < end; k++) {
                const char *n2 = memchr(q + 1, '\n', (size_t)(end - q - 1));
                q = n2 ? n2 : end;
            }
            for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                if (memmem(p, (size_t)(q - p), names[i], strlen(names[i])))
                    return true;
        }
        p = eol + 1;
    }
    return false;
}

/* One half of a split unit, on a thread of its own. */
struct half {
    const struct ctx *c;
    const struct compile__argv *argv, *binds;
    struct run run;
};

static void *half_run(void *arg)
{
    struct half *h = arg;
    (void)cpuplan_place_thread();
    run_tool(h->c, h->c->build_dir, h->argv, ro_compile, h->binds, &h->run);
    return NULL;
}

/* Appends a compiler's output to the split log, as much as fits. */
static void split_log_add(struct job *j, const char *title, const struct run *r)
{
    (void)!buf_addf(&j->split_log, "-- %s (%s)\n", title, r->rc ? r->err.msg : r->how);
    size_t room = j->split_log.max - j->split_log.len;
    (void)!buf_add(&j->split_log, r->out.data, r->out.len < room ? r->out.len : room);
}

/*
 * The halves of a split cu-torch unit, at once (the torch half on a second thread), then their
 * merge into obj and the check of what the merged object leaves undefined. true: j->obj is the
 * unit's object and j->run says how it went. false: the unit is to be built whole, and
 * j->split_log says why; j->run is reset.
 */
static bool run_split(const struct ctx *c, struct job *j)
{
    int64_t t0 = ca_now_us();
    bool have_host = j->argv_host.n > 0, threaded = false;
    struct half host = {.c = c, .argv = &j->argv_host, .binds = j->binds_host};
    run_init(&host.run);
    pthread_t th;
    if (have_host)
        threaded = pthread_create(&th, NULL, half_run, &host) == 0;
    run_tool(c, c->build_dir, &j->argv_dev, ro_compile, j->binds, &j->run);
    if (have_host && threaded)
        pthread_join(th, NULL);
    else if (have_host)
        half_run(&host);
    const char *why = NULL;
    char check[256] = "";
    if (j->run.rc || !j->run.ok)
        why = "the nvcc half did not compile";
    else if (have_host && (host.run.rc || !host.run.ok))
        why = "the torch half did not compile";
    else if (have_host && strstr(host.run.out.data, "used but never defined"))
        why = "the torch half uses a function that only the nvcc half defines inline or static";
    struct run merge;
    run_init(&merge);
    if (!why && have_host) {
        run_tool(c, c->build_dir, &j->argv_merge, ro_compile, j->binds_host, &merge);
        if (merge.rc || !merge.ok)
            why = "the halves did not merge";
    }
    if (!why && have_host) {
        char *obj = xstrfmt("%s/%s", c->build_dir, j->obj);
        int rc = compile__split_check_object(obj, sv_from(j->split_names.data, j->split_names.len),
                                             check, sizeof(check));
        free(obj);
        if (rc < 0)
            snprintf(check, sizeof(check), "the merged object cannot be read: %s", ca_strerror(rc));
        if (rc)
            why = check;
    }
    /* The nvcc half alone past its time: the whole unit would be too. */
    bool timed_out = j->run.timed_out;
    if (!why || timed_out) {
        j->split_ok = !why;
        j->used_pch = have_host && !strstr(host.run.out.data, "pch.h.gch");
        if (have_host) {
            size_t room = j->run.out.max - j->run.out.len;
            (void)!buf_add(&j->run.out, host.run.out.data,
                           host.run.out.len < room ? host.run.out.len : room);
        }
        j->run.elapsed_us = ca_now_us() - t0;
        run_release(&host.run);
        run_release(&merge);
        return true;
    }
    (void)!buf_addf(&j->split_log, "cut in two, not built so: %s\n", why);
    split_log_add(j, "nvcc half", &j->run);
    if (have_host) {
        split_log_add(j, "torch half", &host.run);
        if (merge.how[0] || merge.rc)
            split_log_add(j, "merge", &merge);
    }
    LOG_INFO("compile: %s: %s; building it as one unit", j->u->name, why);
    j->split_us = ca_now_us() - t0;
    run_release(&host.run);
    run_release(&merge);
    return false;
}

/* The unit as one compiler run; a failure the accelerators may have caused is run again
 * without them. */
static void run_whole(const struct ctx *c, struct job *j)
{
    run_tool(c, c->build_dir, &j->argv, ro_compile, j->binds, &j->run);
    bool accel = j->argv_plain.n > 0;
    j->used_pch = j->pch;
    if (!j->run.ok && accel && !j->run.timed_out &&
        ((j->light && light_failure(&j->run.out)) || (j->pch && pch_failure(&j->run.out)))) {
        LOG_INFO("compile: %s failed with the %s; retrying without", j->u->name,
                 j->light && j->pch ? "light torch headers and their precompiled header"
                 : j->light         ? "light torch headers"
                                    : "precompiled header");
        j->retried = true;
        j->used_pch = false;
        int64_t first = j->run.elapsed_us;
        run_tool(c, c->build_dir, &j->argv_plain, ro_compile, j->binds, &j->run);
        j->run.elapsed_us += first;
    }
    j->run.elapsed_us += j->split_us;
    /* -Winvalid-pch: "pch/pch.h.gch: not used because ..."; the header was parsed instead. */
    if (j->run.ok && j->used_pch && strstr(j->run.out.data, "pch.h.gch")) {
        LOG_WARN("compile: %s: the precompiled header was not usable", j->u->name);
        j->used_pch = false;
    }
}

static void job_run(const struct ctx *c, struct job *j)
{
    if (!j->argv_dev.n || !run_split(c, j))
        run_whole(c, j);
    if (!j->run.ok)
        return;
    /* Out of the build directory at once: no later compiler can touch the cached inode. */
    struct buf obj;
    buf_init(&obj, CA_LIMIT_PATH);
    if (fs_join(&obj, c->build_dir, j->obj))
        j->store_rc = err_setf(&j->store_err, CA_ETOOBIG, "object path too long");
    else
        j->store_rc = compile__cache_store(obj.data, j->u->cache_path, &j->store_err);
    buf_release(&obj);
}

static void *worker(void *arg)
{
    struct pool *p = arg;
    int prc = cpuplan_place_thread();
    if (prc)
        LOG_WARN("compile: cannot place a worker for compiling: %s", ca_strerror(prc));
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->qhead == p->qlen && !p->stop)
            pthread_cond_wait(&p->work, &p->mu);
        /* Stopped: a build that failed early drops what is still queued. */
        if (p->stop || p->qhead == p->qlen)
            break;
        struct job *j = p->queue[p->qhead++];
        pthread_mutex_unlock(&p->mu);
        job_run(p->ctx, j);
        pthread_mutex_lock(&p->mu);
        p->pending--;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_init(struct pool *p, const struct ctx *c, size_t max_threads)
{
    *p = (struct pool){.ctx = c, .max_threads = max_threads ? max_threads : 1};
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = xcalloc(p->max_threads, sizeof(*p->threads));
}

static void pool_submit(struct pool *p, struct job *j)
{
    pthread_mutex_lock(&p->mu);
    ALLOC_GROW(p->queue, p->qlen + 1, p->qalloc);
    p->queue[p->qlen++] = j;
    p->pending++;
    /* A thread per queued job, up to the limit; idle threads wait for the next. */
    if (p->nthreads < p->max_threads && p->nthreads < p->pending) {
        if (pthread_create(&p->threads[p->nthreads], NULL, worker, p) == 0)
            p->nthreads++;
        else if (p->nthreads == 0)
            BUG("cannot start a compile worker thread");
    }
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

static void pool_wait(struct pool *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void pool_release(struct pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p->queue);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
}

/* ---- the build ---- */

struct build {
    const struct compile_opts *opts;
    const struct compile__toolchain *tc;
    struct compile_report *rep;
    char *cache_dir;
    struct buf build_dir;
    char *dir_slash; /* build_dir + "/": stripped from compiler output */
    struct ctx ctx;
    struct unit *units;
    size_t n, units_alloc;
    struct job *jobs;
    size_t njobs;
    struct pool pool;
    bool pool_started;
    struct compile__argv cu_flags, cxx_flags, cu_torch_flags;
    struct compile__argv split_flags;  /* c++ for the torch half of a split cu-torch unit */
    struct compile__argv cu_torch_key; /* a cu-torch key's flags: both ways to build it */
    char *cu_identity;                 /* nvcc and the host compiler it uses */
    char pch_key[HASH128_HEX_LEN + 1], split_pch_key[HASH128_HEX_LEN + 1];
    bool pch_ready, split_pch_ready;
    bool stored; /* something new went into the cache */
};

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

static struct unit *add_unit(struct build *b, char *name, enum compile_role role)
{
    ALLOC_GROW(b->units, b->n + 1, b->units_alloc);
    struct unit *u = &b->units[b->n++];
    *u = (struct unit){.name = name, .role = role};
    buf_init(&u->src, CA_LIMIT_WRITE_BYTES);
    buf_init(&u->deps, BUF_MAX_INTERNAL);
    return u;
}

/* kernels/NAME.cu and kernels/NAME_binding.cpp of the snapshot, in name order, then binding.cpp. */
static int load_snapshot(struct build *b, const char *snapshot_dir, struct ca_err *err)
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
        struct unit *u =
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
        struct unit *u = add_unit(b, xstrdup(REGISTRY_UNIT), COMPILE_ROLE_REGISTRY);
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
static void scan_includes(struct build *b, struct unit *u)
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
            struct unit *v = &b->units[i];
            if (v == u || v->role == COMPILE_ROLE_REGISTRY ||
                !sv_eq(in, sv_cstr(v->name + strlen("kernels/"))))
                continue;
            if (buf_addf(&u->deps, "%s %s\n", v->name, v->digest))
                BUG("internal buffer overflow");
        }
    }
}

static int write_file(const char *dir, const char *rel, const void *data, size_t len,
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

static int make_dirs(const char *dir, const char *const *subdirs, struct ca_err *err)
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

/* Writes the light headers under DIR/light/torch/ (DIR/light/torch must exist). */
static int write_light_headers(const char *dir, struct ca_err *err)
{
    int rc = write_file(dir, LIGHT_DIR "/torch/extension.h", light_header, sizeof(light_header) - 1,
                        err);
    if (!rc)
        rc = write_file(dir, LIGHT_DIR "/torch/types.h", light_types_header,
                        sizeof(light_types_header) - 1, err);
    return rc;
}

/* The build directory: tmp/build.tmp-XXXXXX with the units and template files. */
static int prepare_build_dir(struct build *b, struct ca_err *err)
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
    static const char *const subdirs[] = {
        "kernels", "obj", "pch",     SPLIT_PCH_DIR,        SPLIT_DIR,
        "link",    "out", LIGHT_DIR, (LIGHT_DIR "/torch"), NULL};
    rc = make_dirs(b->build_dir.data, subdirs, err);
    if (!rc)
        rc = write_light_headers(b->build_dir.data, err);
    for (size_t i = 0; !rc && i < b->n; i++)
        rc = write_file(b->build_dir.data, b->units[i].name, b->units[i].src.data,
                        b->units[i].src.len, err);
    if (!rc) {
        const struct embedded_file *h = embed_find(TEMPLATE_REGISTRY);
        rc = write_file(b->build_dir.data, REGISTRY_HEADER, h->data, h->len, err);
    }
    return rc;
}

static void push_bind(struct compile__argv *a, const char *dir)
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
static void make_cu_torch_flags(struct build *b, const char *num)
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
        push_bind(&b->ctx.binds_cu_torch, tc->torch_includes.v[i]);
    }
    compile__argv_push(f, "-isystem");
    compile__argv_push(f, tc->python_include);
    if (tc->cudnn_include) {
        compile__argv_push(f, "-isystem");
        compile__argv_push(f, tc->cudnn_include);
    }
    push_bind(&b->ctx.binds_cu_torch, tc->cuda_home);
    push_bind(&b->ctx.binds_cu_torch, tc->python_include);
    push_bind(&b->ctx.binds_cu_torch, tc->cudnn_include);
}

/*
 * KernelBench mode: nvcc's flags for cu-torch units (which also build the nvcc half of a split
 * one, without the light headers), c++'s for the torch half (the bindings' flags, the
 * __CUDA_NO_HALF* defines nvcc's host pass gets, the light headers, and no warning for the CUDA
 * attributes g++ ignores on the kernels' declarations), the split header's key, and the flags
 * in a cu-torch object's key: both ways of building it, so that a change to either misses.
 */
static void make_split_flags(struct build *b, const char *num)
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
                                        LIGHT_DIR};
    for (size_t i = 0; i < ARRAY_SIZE(extra); i++)
        compile__argv_push(f, extra[i]);
    struct buf hdrs;
    buf_init(&hdrs, sizeof(split_pch_header) + sizeof(light_header) + sizeof(light_types_header));
    if (buf_addstr(&hdrs, split_pch_header) || buf_addstr(&hdrs, light_header) ||
        buf_addstr(&hdrs, light_types_header))
        BUG("precompiled header inputs over their bound");
    compile__pch_key(tc->cxx, tc->cxx_version, tc->torch_identity, (const char *const *)f->v,
                     sv_from(hdrs.data, hdrs.len), b->split_pch_key);
    buf_release(&hdrs);
    compile__argv_pushv(&b->cu_torch_key, &b->cu_torch_flags);
    compile__argv_push(&b->cu_torch_key, SPLIT_VERSION);
    compile__argv_pushv(&b->cu_torch_key, f);
}

static void make_flags(struct build *b, const char *arch)
{
    const struct compile__toolchain *tc = b->tc;
    struct compile__argv *f = &b->cu_flags;
    const char *num = arch + 3; /* "90", "90a" */
    compile__argv_push(f, tc->nvcc);
    compile__argv_push(f, "-ccbin");
    compile__argv_push(f, tc->cxx);
    static const char *const cu_common[] = {
        "-c", "-O3", "-std=c++17", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr", "-lineinfo",
    };
    for (size_t i = 0; i < ARRAY_SIZE(cu_common); i++)
        compile__argv_push(f, cu_common[i]);
    compile__argv_push(f, "-gencode");
    compile__argv_pushf(f, "arch=compute_%s,code=[sm_%s,compute_%s]", num, num, num);
    if (tc->cudnn_include)
        compile__argv_pushf(f, "-I%s", tc->cudnn_include);
    b->cu_identity = xstrfmt("%s\n%s", tc->nvcc_version, tc->cxx_version);

    push_bind(&b->ctx.binds_cu, tc->cuda_home);
    push_bind(&b->ctx.binds_cu, tc->cudnn_include);
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
        push_bind(&b->ctx.binds_cxx, tc->torch_includes.v[i]);
    }
    compile__argv_push(f, "-isystem");
    compile__argv_push(f, tc->cuda_include);
    compile__argv_push(f, "-isystem");
    compile__argv_push(f, tc->python_include);
    if (tc->cudnn_include) {
        compile__argv_push(f, "-isystem");
        compile__argv_push(f, tc->cudnn_include);
    }
    push_bind(&b->ctx.binds_cxx, tc->cuda_home);
    push_bind(&b->ctx.binds_cxx, tc->python_include);
    push_bind(&b->ctx.binds_cxx, tc->cudnn_include);
    /* The light headers are part of what the precompiled header holds. */
    struct buf hdrs;
    buf_init(&hdrs, sizeof(pch_header) + sizeof(light_header) + sizeof(light_types_header));
    if (buf_addstr(&hdrs, pch_header) ||
        (b->opts->use_light &&
         (buf_addstr(&hdrs, light_header) || buf_addstr(&hdrs, light_types_header))))
        BUG("precompiled header inputs over their bound");
    compile__pch_key(tc->cxx, tc->cxx_version, tc->torch_identity,
                     (const char *const *)b->cxx_flags.v, sv_from(hdrs.data, hdrs.len), b->pch_key);
    buf_release(&hdrs);
    if (b->opts->inline_cuda)
        make_split_flags(b, num);
}

static void unit_key(struct build *b, struct unit *u)
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
static void prepare_split(struct build *b, struct job *j, size_t n)
{
    struct compile__split sp;
    compile__split_init(&sp);
    if (compile__split_source(sv_from(j->u->src.data, j->u->src.len), j->u->name, &sp)) {
        LOG_DEBUG("compile: %s is built as one unit: %s", j->u->name, sp.why);
        compile__split_release(&sp);
        return;
    }
    bool have_host = sp.host.len > 0;
    char *dev = xstrfmt(SPLIT_DIR "/%zu.dev.cu", n), *host = xstrfmt(SPLIT_DIR "/%zu.host.cpp", n);
    char *dev_obj = xstrfmt("obj/%zu.dev.o", n), *host_obj = xstrfmt("obj/%zu.host.o", n);
    struct ca_err e = {0};
    if (write_file(b->build_dir.data, dev, sp.dev.data, sp.dev.len, &e) ||
        (have_host && write_file(b->build_dir.data, host, sp.host.data, sp.host.len, &e))) {
        LOG_WARN("compile: %s is built as one unit: %s", j->u->name, e.msg);
        goto out;
    }
    compile__argv_pushv(&j->argv_dev, &b->cu_torch_flags);
    compile__argv_push(&j->argv_dev, "-o");
    compile__argv_push(&j->argv_dev, have_host ? dev_obj : j->obj);
    compile__argv_push(&j->argv_dev, dev);
    if (have_host) {
        compile__argv_pushv(&j->argv_host, &b->split_flags);
        static const char *const pch[] = {"-include", SPLIT_PCH_DIR "/pch.h", "-Winvalid-pch",
                                          "-o"};
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

static void submit(struct build *b, struct unit *u, struct compile_unit_report *rep)
{
    if (!b->pool_started) {
        size_t cpus = b->opts->jobs > 0 ? (size_t)b->opts->jobs : (size_t)cpu_count();
        pool_init(&b->pool, &b->ctx, cpus);
        b->pool_started = true;
    }
    struct job *j = &b->jobs[b->njobs];
    *j = (struct job){.u = u, .rep = rep};
    snprintf(j->obj, sizeof(j->obj), "obj/%zu.o", b->njobs);
    b->njobs++;
    run_init(&j->run);
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
        compile__argv_push(&j->argv, LIGHT_DIR);
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
    pool_submit(&b->pool, j);
}

static void jobs_release(struct build *b)
{
    for (size_t i = 0; i < b->njobs; i++) {
        struct job *j = &b->jobs[i];
        run_release(&j->run);
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

static struct pch_spec binding_pch(struct build *b)
{
    return (struct pch_spec){.dir = "pch",
                             .header = pch_header,
                             .flags = &b->cxx_flags,
                             .light = b->opts->use_light,
                             .key = b->pch_key,
                             .ready = &b->pch_ready};
}

static struct pch_spec split_pch(struct build *b)
{
    return (struct pch_spec){.dir = SPLIT_PCH_DIR,
                             .header = split_pch_header,
                             .flags = &b->split_flags,
                             .key = b->split_pch_key,
                             .ready = &b->split_pch_ready};
}

static int link_pch_into_build(struct build *b, const char *entry, const char *dir)
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

/* Append one compiler's output to the full log; once it is full, say so once. */
static void log_add(struct compile_report *rep, const char *title, const struct buf *raw,
                    const char *const *strip)
{
    static const char full[] = "[log truncated]\n";
    struct buf *l = &rep->full_log;
    if (sv_ends_with(sv_from(l->data, l->len), SV_LIT(full)))
        return;
    if (buf_addf(l, "== %s\n", title) ||
        compile__log_normalize(sv_from(raw->data, raw->len), strip, l)) {
        /* Keep what fitted, then the marker (room for it is made if needed). */
        size_t room = sizeof(full) - 1;
        if (l->max - l->len < room)
            buf_truncate(l, l->len > room ? l->len - room : 0);
        (void)!buf_addstr(l, full);
    }
}

/*
 * Make sure a precompiled header exists in the cache and link it into the
 * build directory. Failing to make it is not an error of the build: the
 * units are then compiled without it. Runs on the build's thread while
 * the pool compiles .cu files.
 */
static int ensure_pch(struct build *b, const struct pch_spec *spec, struct ca_err *err)
{
    struct compile_report *rep = b->rep;
    struct buf entry, failed, tmp;
    buf_init(&entry, CA_LIMIT_PATH + 64);
    buf_init(&failed, CA_LIMIT_PATH + 64);
    buf_init(&tmp, CA_LIMIT_PATH + 64);
    int rc = 0;
    struct run r;
    run_init(&r);
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
    static const char *const subdirs[] = {"pch", LIGHT_DIR, (LIGHT_DIR "/torch"), NULL};
    rc = make_dirs(tmp.data, subdirs, err);
    if (!rc)
        rc = write_file(tmp.data, "pch/pch.h", spec->header, strlen(spec->header), err);
    if (!rc && b->opts->use_light)
        rc = write_light_headers(tmp.data, err);
    if (rc)
        goto out;
    struct compile__argv argv;
    compile__argv_init(&argv);
    compile__argv_pushv(&argv, spec->flags);
    if (spec->light) {
        compile__argv_push(&argv, "-I");
        compile__argv_push(&argv, LIGHT_DIR);
    }
    static const char *const tail[] = {"-x", "c++-header", "pch/pch.h", "-o", "pch/pch.h.gch"};
    for (size_t i = 0; i < ARRAY_SIZE(tail); i++)
        compile__argv_push(&argv, tail[i]);
    static const char *const no_ro[] = {NULL};
    run_tool(&b->ctx, tmp.data, &argv, no_ro, &b->ctx.binds_cxx, &r);
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
        log_add(rep, title, &r.out, strip);
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
    run_release(&r);
    buf_release(&entry);
    buf_release(&failed);
    buf_release(&tmp);
    return rc;
}

static const char *unit_tool(const struct unit *u)
{
    return u->role == COMPILE_ROLE_CU || u->role == COMPILE_ROLE_CU_TORCH ? "nvcc" : "c++";
}

/* Header line for a unit whose compiler failed without saying why, or was stopped. */
static int failure_line(struct buf *out, const struct job *j)
{
    const char *tool = unit_tool(j->u);
    if (j->run.timed_out)
        return buf_addf(out,
                        "%s: %s %s: the compile was stopped (simplify the templates or "
                        "unrolling, or split the file)\n",
                        j->u->name, tool, j->run.how);
    if (strncmp(j->run.how, "killed", 6) == 0)
        return buf_addf(out, "%s: %s was %s (out of memory?)\n", j->u->name, tool, j->run.how);
    return 0;
}

/* Trimmed diagnostics of one failed or warned unit into its own log, and errors into *errors. */
static void unit_logs(struct build *b, struct job *j, size_t *budget, size_t *omitted,
                      bool *errors_full)
{
    struct compile_unit_report *ur = j->rep;
    const char *strip[] = {b->dir_slash, SANDBOX_WORKSPACE "/", NULL};
    struct buf norm, trimmed;
    buf_init(&norm, 2 * RUN_OUTPUT_MAX + 4096);
    buf_init(&trimmed, 2 * RUN_OUTPUT_MAX + 4096);
    (void)!compile__log_normalize(sv_from(j->run.out.data, j->run.out.len), strip, &norm);
    if (j->split_log.len) {
        char *t = xstrfmt("%s (cut in two, then built whole)", ur->name);
        log_add(b->rep, t, &j->split_log, strip);
        free(t);
    }
    char *title = xstrfmt("%s (%s%s)", ur->name, j->run.how,
                          j->split_ok   ? ", cut in two: nvcc and c++ halves merged"
                          : !j->retried ? ""
                          : j->light    ? ", retried with the full torch headers"
                                        : ", retried without the precompiled header");
    log_add(b->rep, title, &j->run.out, strip);
    free(title);

    struct compile__trim_result tr;
    if (!j->run.ok)
        (void)!failure_line(&trimmed, j);
    (void)!compile__log_trim(sv_from(norm.data, norm.len), &trimmed, &tr);
    if (!j->run.ok && trimmed.len == 0)
        (void)!buf_addf(&trimmed, "%s: %s failed (%s) without a message\n", ur->name,
                        unit_tool(j->u), j->run.how);
    size_t unit_budget = COMPILE_ERROR_LINES, unit_omitted = 0;
    (void)!compile__append_lines(&ur->log, sv_from(trimmed.data, trimmed.len), &unit_budget,
                                 &unit_omitted);
    if (unit_omitted)
        (void)!buf_addf(&ur->log, "[%zu more %s lines omitted]\n", unit_omitted,
                        tr.had_errors || !j->run.ok ? "error" : "warning");
    if (!j->run.ok && !*errors_full &&
        compile__append_lines(&b->rep->errors, sv_from(trimmed.data, trimmed.len), budget, omitted))
        *errors_full = true;
    buf_release(&norm);
    buf_release(&trimmed);
}

/* Collect results of finished jobs into the report; 0, or an infrastructure error. */
static int collect(struct build *b, struct ca_err *err)
{
    size_t budget = COMPILE_ERROR_LINES, omitted = 0;
    bool full = false;
    int rc = 0;
    for (size_t i = 0; i < b->njobs; i++) {
        struct job *j = &b->jobs[i];
        struct compile_unit_report *ur = j->rep;
        if (j->run.rc) {
            /* The compiler could not run at all: the evaluator's problem, not the agent's. */
            if (!rc)
                rc = err_setf(err, j->run.rc, "compile %s: %s", ur->name, j->run.err.msg);
            continue;
        }
        if (j->store_rc && !rc)
            rc = err_setf(err, j->store_rc, "%s", j->store_err.msg);
        ur->ok = j->run.ok && !j->store_rc;
        ur->timed_out = j->run.timed_out;
        ur->used_pch = j->used_pch;
        ur->split = j->split_ok;
        ur->elapsed_us = j->run.elapsed_us;
        b->rep->pch_used = b->rep->pch_used || j->used_pch;
        b->stored = b->stored || ur->ok;
        unit_logs(b, j, &budget, &omitted, &full);
        if (log_events_on())
            log_event("compile.unit", ur->elapsed_us,
                      json_pack("{s:s, s:s, s:b, s:b, s:b, s:b}", "unit", ur->name, "role",
                                compile_role_name(ur->role), "ok", ur->ok, "pch", ur->used_pch,
                                "split", ur->split, "timed_out", ur->timed_out));
    }
    if (omitted)
        (void)!buf_addf(&b->rep->errors, "[%zu more error lines omitted]\n", omitted);
    return rc;
}

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

static bool sources_mention(const struct build *b, const char *token)
{
    for (size_t i = 0; i < b->n; i++)
        if (memmem(b->units[i].src.data, b->units[i].src.len, token, strlen(token)))
            return true;
    return false;
}

/* -shared and the libraries, in link order after the objects. */
static void link_flags(const struct build *b, struct compile__argv *f)
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

static int do_link(struct build *b, const char *out_so, struct ca_err *err)
{
    struct compile_report *rep = b->rep;
    const struct compile__toolchain *tc = b->tc;
    struct compile__argv flags, argv;
    compile__argv_init(&flags);
    compile__argv_init(&argv);
    link_flags(b, &flags);
    for (size_t i = 0; i < tc->torch_libdirs.n; i++)
        push_bind(&b->ctx.binds_link, tc->torch_libdirs.v[i]);
    push_bind(&b->ctx.binds_link, tc->cuda_home);
    if (tc->cudnn_lib) {
        char *dir = xstrdup(tc->cudnn_lib);
        *strrchr(dir, '/') = '\0';
        push_bind(&b->ctx.binds_link, dir);
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
    struct run r;
    run_init(&r);
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
        struct unit *u = &b->units[i];
        char *rel = xstrfmt("link/%s.o", u->name);
        char *dst = xstrfmt("%s/%s", b->build_dir.data, rel);
        char *parent = xstrdup(dst);
        *strrchr(parent, '/') = '\0';
        if ((mkdir(parent, 0755) != 0 && errno != EEXIST) || link(u->cache_path, dst) != 0)
            rc = err_setf(err, -errno,
                          "compile: the cached object of %s (%s) vanished or cannot be linked: "
                          "%s; build again",
                          u->name, u->cache_path, strerror(errno));
        compile__argv_push(&argv, rel);
        free(rel);
        free(dst);
        free(parent);
    }
    if (rc)
        goto out;
    compile__argv_pushv(&argv, &flags);
    run_tool(&b->ctx, b->build_dir.data, &argv, ro_link, &b->ctx.binds_link, &r);
    if (r.rc) {
        rc = r.rc;
        *err = r.err;
        goto out;
    }
    rep->link_us = r.elapsed_us;
    const char *strip[] = {b->dir_slash, SANDBOX_WORKSPACE "/", "link/", NULL};
    char *title = xstrfmt("link (%s)", r.how);
    log_add(rep, title, &r.out, strip);
    free(title);
    if (!r.ok) {
        struct buf norm, trimmed;
        buf_init(&norm, 2 * RUN_OUTPUT_MAX + 4096);
        buf_init(&trimmed, 2 * RUN_OUTPUT_MAX + 4096);
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
    run_release(&r);
    buf_release(&so);
    compile__argv_release(&flags);
    compile__argv_release(&argv);
    return rc;
}

static void build_release(struct build *b)
{
    if (b->pool_started)
        pool_release(&b->pool);
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

static void make_env(struct build *b)
{
    struct compile__argv *e = &b->ctx.env;
    const char *tmp = getenv("TMPDIR");
    compile__argv_pushf(e, "PATH=%s/bin:/usr/local/bin:/usr/bin:/bin", b->tc->cuda_home);
    compile__argv_push(e, "LC_ALL=C");
    compile__argv_push(e, "HOME=/tmp");
    /* Inside a sandbox /tmp is its own; outside, keep the operator's TMPDIR. */
    compile__argv_pushf(e, "TMPDIR=%s", !b->ctx.sandbox && tmp && *tmp ? tmp : "/tmp");
}

static void report_reset(struct compile_report *r)
{
    compile_report_release(r);
    compile_report_init(r);
}

static int start(struct build *b, struct ca_err *err)
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
    make_env(b);
    make_flags(b, b->rep->arch);
    return 0;
}

static char *unavailable_torch(const struct compile__toolchain *tc)
{
    return xstrfmt("PyTorch is not importable by %s (needed to build bindings): install it or set "
                   "CUDA_AGENT_PYTHON (%s)",
                   tc->python, tc->torch_error ? tc->torch_error : "unknown reason");
}

int compile_build(const struct compile_opts *opts, const char *snapshot_dir, const char *out_so,
                  struct compile_report *report, struct ca_err *err)
{
    int64_t t0 = ca_now_us();
    report_reset(report);
    struct compile_opts defaults;
    compile_opts_init(&defaults);
    struct build b = {.opts = opts ? opts : &defaults, .rep = report};
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
        struct unit *u = &b.units[i];
        if (u->role != COMPILE_ROLE_CU)
            continue;
        unit_key(&b, u);
        memcpy(report->units[i].key, u->key, sizeof(u->key));
        report->units[i].ok = report->units[i].cached = u->hit;
        if (!u->hit)
            submit(&b, u, &report->units[i]);
    }
    bool torch = b.tc->have_torch;
    if (torch) {
        bool need = false, need_split = false;
        for (size_t i = 0; i < b.n; i++) {
            struct unit *u = &b.units[i];
            if (u->role == COMPILE_ROLE_CU)
                continue;
            unit_key(&b, u);
            memcpy(report->units[i].key, u->key, sizeof(u->key));
            report->units[i].ok = report->units[i].cached = u->hit;
            if (u->role == COMPILE_ROLE_CU_TORCH)
                need_split = need_split || !u->hit;
            else
                need = need || !u->hit;
        }
        /* The cu-torch units are the longest jobs: they start before the bindings' header,
         * after the header of their torch halves (made once, then a cache hit). */
        if (need_split && b.opts->use_split && b.opts->use_light && b.tc->cxx_is_gcc) {
            struct pch_spec sp = split_pch(&b);
            rc = ensure_pch(&b, &sp, err);
            if (rc)
                goto out;
        }
        for (size_t i = 0; i < b.n; i++)
            if (b.units[i].role == COMPILE_ROLE_CU_TORCH && !b.units[i].hit)
                submit(&b, &b.units[i], &report->units[i]);
        if (need && b.opts->use_pch && b.tc->cxx_is_gcc) {
            struct pch_spec bp = binding_pch(&b);
            rc = ensure_pch(&b, &bp, err);
            if (rc)
                goto out;
        }
        for (size_t i = 0; i < b.n; i++)
            if (b.units[i].role != COMPILE_ROLE_CU && b.units[i].role != COMPILE_ROLE_CU_TORCH &&
                !b.units[i].hit)
                submit(&b, &b.units[i], &report->units[i]);
    }
    if (b.pool_started)
        pool_wait(&b.pool);
    rc = collect(&b, err);
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
    rc = do_link(&b, out_so, err);
    report->ok = !rc && report->link_ok;
out:
    report->total_us = ca_now_us() - t0;
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

int compile_warm(const struct compile_opts *opts, struct ca_err *err)
{
    struct compile_opts defaults;
    compile_opts_init(&defaults);
    struct compile_report rep;
    compile_report_init(&rep);
    struct build b = {.opts = opts ? opts : &defaults, .rep = &rep};
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
        struct pch_spec bp = binding_pch(&b);
        rc = ensure_pch(&b, &bp, err);
    }
    if (!rc && split && b.tc->cxx_is_gcc) {
        struct pch_spec sp = split_pch(&b);
        rc = ensure_pch(&b, &sp, err);
    }
    build_release(&b);
    compile_report_release(&rep);
    return rc;
}

/* ---- JSON ---- */

static json_t *text_json(const struct buf *b)
{
    struct buf clean;
    buf_init(&clean, BUF_MAX_INTERNAL);
    if (utf8_sanitize(b->data, b->len, &clean) < 0)
        BUG("internal buffer overflow");
    json_t *s = json_stringn(clean.data, clean.len);
    buf_release(&clean);
    return s ? s : json_string("");
}

json_t *compile_report_to_json(const struct compile_report *r)
{
    json_t *units = json_array();
    for (size_t i = 0; i < r->n; i++) {
        const struct compile_unit_report *u = &r->units[i];
        struct buf name;
        buf_init(&name, BUF_MAX_INTERNAL);
        (void)!buf_addstr(&name, u->name);
        json_array_append_new(
            units, json_pack("{s:o, s:s, s:b, s:b, s:b, s:b, s:b, s:I, s:s, s:o}", "name",
                             text_json(&name), "role", compile_role_name(u->role), "ok", u->ok,
                             "cached", u->cached, "timed_out", u->timed_out, "pch", u->used_pch,
                             "split", u->split, "elapsed_us", (json_int_t)u->elapsed_us, "key",
                             u->key, "log", text_json(&u->log)));
        buf_release(&name);
    }
    return json_pack("{s:b, s:s, s:o, s:{s:b, s:b, s:I}, s:{s:b, s:b, s:I}, s:I, s:s, s:s?, "
                     "s:o, s:o}",
                     "ok", r->ok, "arch", r->arch, "units", units, "link", "ok", r->link_ok,
                     "cached", r->link_cached, "elapsed_us", (json_int_t)r->link_us, "pch", "used",
                     r->pch_used, "built", r->pch_built, "elapsed_us", (json_int_t)r->pch_us,
                     "total_us", (json_int_t)r->total_us, "so_key", r->so_key, "so_path",
                     r->so_path, "errors", text_json(&r->errors), "log", text_json(&r->full_log));
}
