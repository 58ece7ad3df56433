/*
 * compile.h - the evaluator's compile pool: builds the evaluated files of a
 * workspace snapshot (kernels/NAME.cu, kernels/NAME_binding.cpp) together with the
 * template's binding.cpp and binding_registry.h (always the copies embedded
 * in this binary, never the workspace's) into one Python extension module,
 * `cuda_extension` (.so), plus a report.
 *
 * One job per translation unit; jobs run in parallel (up to the CPU count)
 * on a few worker threads, each starting one compiler at a time, directly
 * (proc_run) or in a fresh sandbox (sandbox_run) when opts.use_sandbox.
 * Objects, precompiled headers and linked modules live in a content-
 * addressed cache directory that concurrent evaluators may share: entries
 * appear by rename only, so nobody ever sees half a file. Compiler output
 * is trimmed to the first meaningful errors for the agent.
 *
 * Return convention: a negative code means the evaluator could not do its
 * job (no nvcc, PyTorch not importable, the cache not writable, a bad
 * option). A build that ran but failed because of the sources (compiler
 * errors, a compiler timeout) returns 0 with report.ok false and
 * report.errors saying why; that is the agent's result, not an error here.
 *
 * Ownership: the caller owns the report (compile_report_init/_release) and
 * every string in it. Threads: compile_build may run in several threads at
 * once, each with its own report. The toolchain (compilers, PyTorch paths)
 * is discovered once per process and Python interpreter, then shared
 * read-only; so is the GPU's architecture.
 */
#ifndef CA_COMPILE_H
#define CA_COMPILE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/hash.h"

#define COMPILE_MODULE_NAME "cuda_extension"
#define COMPILE_DEFAULT_TIMEOUT_MS ((int64_t)120000)
#define COMPILE_DEFAULT_CACHE_MAX ((uint64_t)2 << 30)
#define COMPILE_DEFAULT_ARCH "sm_90"
/* Lines of compiler diagnostics kept for the agent (report.errors, each unit's log). */
#define COMPILE_ERROR_LINES 40

struct compile_opts {
    const char *arch;         /* "sm_90", "sm_90a", "90", "9.0"; NULL: the first GPU's
                                 (nvidia-smi), else COMPILE_DEFAULT_ARCH */
    const char *cache_dir;    /* NULL: $CUDA_AGENT_CACHE_DIR/compile, else
                                 $XDG_CACHE_HOME or ~/.cache, then cuda-agent/compile */
    int jobs;                 /* compilers at once; <= 0: the CPU count */
    int64_t timeout_ms;       /* per compiler run; <= 0: COMPILE_DEFAULT_TIMEOUT_MS */
    bool use_sandbox;         /* each compiler in its own sandbox (sandbox.h) */
    bool use_pch;             /* precompiled torch/pybind11 headers for the bindings */
    bool use_light;           /* the light torch/extension.h and torch/types.h for bindings
                                 (and their precompiled header) and cu-torch units; off: the
                                 real headers, as a baseline to measure against */
    bool inline_cuda;         /* KernelBench mode: every kernels/NAME.cu is the cuda_sources of
                                 a load_inline call, built by nvcc with the torch headers
                                 (COMPILE_ROLE_CU_TORCH) as load_inline would build it */
    bool use_split;           /* cu-torch units cut in two where the cut keeps their meaning:
                                 the torch functions by c++ with a precompiled header, the rest
                                 by nvcc without torch (compile.md); off: one nvcc unit each,
                                 the baseline to measure against. Needs use_light. */
    const char *python;       /* NULL: $CUDA_AGENT_PYTHON, else python3 from PATH */
    uint64_t cache_max_bytes; /* pruned to this after a build that stored something;
                                 0: COMPILE_DEFAULT_CACHE_MAX; UINT64_MAX: never */
};

/* Defaults: everything 0/NULL but use_sandbox, use_pch, use_light and use_split, which are on. */
void compile_opts_init(struct compile_opts *o);

enum compile_role {
    COMPILE_ROLE_CU,       /* kernels/NAME.cu: nvcc, no torch */
    COMPILE_ROLE_BINDING,  /* kernels/NAME_binding.cpp: c++ with torch headers */
    COMPILE_ROLE_REGISTRY, /* binding.cpp of the template: c++ with torch headers */
    COMPILE_ROLE_CU_TORCH, /* kernels/NAME.cu with opts.inline_cuda: nvcc with torch headers */
};
/* "cu", "binding", "registry", "cu-torch" */
const char *compile_role_name(enum compile_role role);

/* What ptxas said one kernel uses (nvcc units; `-Xptxas -v`). */
struct compile_kernel_info {
    char mangled[256];
    char name[128];            /* demangled enough to read: "bias_relu_kernel", "ns::gemm" */
    int registers;             /* per thread; -1 when ptxas did not say */
    int64_t shared_bytes;      /* static shared memory per block */
    int64_t stack_bytes;       /* stack frame per thread */
    int64_t spill_store_bytes; /* registers spilled to local memory */
    int64_t spill_load_bytes;
};
#define COMPILE_KERNELS_MAX 64

struct compile_unit_report {
    char *name; /* workspace-relative: "kernels/foo.cu", "binding.cpp" */
    enum compile_role role;
    bool ok;                             /* an object exists for it */
    bool cached;                         /* the object came from the cache: no compiler ran */
    bool timed_out;                      /* its compiler was killed at timeout_ms */
    bool used_pch;                       /* compiled with the precompiled header */
    bool split;                          /* cu-torch built as two halves (nvcc and c++), merged */
    int64_t elapsed_us;                  /* the compiler's wall time (0 when cached) */
    char key[HASH128_HEX_LEN + 1];       /* object cache key; "" when never computed */
    struct buf log;                      /* trimmed: errors, or warnings when it built */
    struct compile_kernel_info *kernels; /* nvcc units: per kernel, from ptxas (also cached) */
    size_t nkernels;
};

struct compile_report {
    struct compile_unit_report *units; /* kernels/ in name order, then binding.cpp */
    size_t n;
    bool ok;                   /* every unit compiled and the module is at so_path */
    bool link_ok, link_cached; /* link_cached: the module came from the cache */
    bool pch_used;             /* some binding compiled with the precompiled header */
    bool pch_built;            /* this build made the precompiled header */
    bool rebuilt;              /* built twice: a cached object was pruned before the link */
    int64_t pch_us, link_us, total_us;
    char arch[16];                    /* "sm_90" */
    char so_key[HASH128_HEX_LEN + 1]; /* "" until the objects are known */
    char *so_path;                    /* out_so, or the cached module when out_so was NULL */
    struct buf errors;                /* for the agent: at most COMPILE_ERROR_LINES lines */
    struct buf full_log; /* every compiler's output, paths mapped, at most CA_LIMIT_COMPILE_LOG */
};

void compile_report_init(struct compile_report *r);
void compile_report_release(struct compile_report *r);

/*
 * Build snapshot_dir (a directory holding kernels/) into the module at
 * out_so (replaced atomically; its directory must exist), or only into the
 * cache when out_so is NULL (report->so_path then names the cached file,
 * which must not be modified). *report must be initialised; it is reset.
 *
 * Without PyTorch the .cu files are still compiled (and cached) and then
 * CA_EUNAVAIL says so; report->units holds what was done.
 */
int compile_build(const struct compile_opts *opts, const char *snapshot_dir, const char *out_so,
                  struct compile_report *report, struct ca_err *err) WARN_UNUSED_RESULT;

/* Discover the toolchain and build the precompiled header now (evaluator
 * start-up), so that the first binding does not wait for it. */
int compile_warm(const struct compile_opts *opts, struct ca_err *err) WARN_UNUSED_RESULT;

/* A new JSON object: {ok, arch, units: [...], link, pch, total_us, errors, log, so_path}. */
json_t *compile_report_to_json(const struct compile_report *r);

/*
 * What compile_build would use (for `cuda-agent eval --doctor`): compilers
 * and versions, CUDA and PyTorch paths, the architecture, the cache
 * directory. A missing nvcc or PyTorch is described, not an error; *out is a
 * new JSON object.
 */
int compile_toolchain_describe(const struct compile_opts *opts, json_t **out,
                               struct ca_err *err) WARN_UNUSED_RESULT;

/* The cache directory opts selects (see compile_opts.cache_dir), appended to out. */
int compile_cache_dir(const struct compile_opts *opts, struct buf *out,
                      struct ca_err *err) WARN_UNUSED_RESULT;
/* The cached object of the unit whose cache key is `key` (a unit report's `key`), appended to
 * out; the file exists while the cache keeps it. */
int compile_object_path(const struct compile_opts *opts, const char *key, struct buf *out,
                        struct ca_err *err) WARN_UNUSED_RESULT;

struct compile_prune_stats {
    uint64_t bytes_before, bytes_after;
    size_t removed;
};

/*
 * Bring the cache under max_bytes by removing the entries used least
 * recently (by mtime: a cache hit touches its entry), and remove build
 * directories left by crashed builds (over an hour old). Safe while other
 * evaluators use the cache: an entry is removed only by unlink/rename.
 * stats may be NULL.
 */
int compile_cache_prune(const char *cache_dir, uint64_t max_bytes,
                        struct compile_prune_stats *stats, struct ca_err *err) WARN_UNUSED_RESULT;

#endif
