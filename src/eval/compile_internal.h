/*
 * compile_internal.h - shared between compile.c (the build), compile_toolchain.c
 * (discovery), compile_cache.c (keys and the cache directory) and
 * compile_log.c (mapping and trimming compiler output). Also used by the
 * unit tests. Not part of the module's interface.
 */
#ifndef CA_COMPILE_INTERNAL_H
#define CA_COMPILE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/hash.h"
#include "core/sv.h"
#include "eval/compile.h"

/* ---- argument vectors (NULL-terminated, heap strings) ---- */

struct compile__argv {
    char **v;
    size_t n, alloc;
};

void compile__argv_init(struct compile__argv *a);
void compile__argv_release(struct compile__argv *a);
void compile__argv_push(struct compile__argv *a, const char *s);
void compile__argv_pushf(struct compile__argv *a, const char *fmt, ...) CA_PRINTF(2, 3);
void compile__argv_pushv(struct compile__argv *a, const struct compile__argv *from);

/* ---- toolchain (compile_toolchain.c) ---- */

struct compile__toolchain {
    char *nvcc;         /* realpath; NULL when not found */
    char *nvcc_version; /* whole `nvcc --version` output: part of every .cu key */
    char *nvcc_release; /* "13.0.88" for people */
    char *cuda_home;    /* nvcc's bin/.. */
    char *cuda_include; /* <cuda_home>/include */
    char *cuda_lib;     /* <cuda_home>/lib64 (or lib) */
    char *cxx;          /* realpath of c++ (or g++) */
    char *cxx_version;  /* first line of `c++ --version` */
    bool cxx_is_gcc;    /* precompiled headers are gcc's .gch */
    char *fuse_ld;      /* "-fuse-ld=lld" etc.: the fastest linker found, or NULL */
    char *nvcc_error;   /* why nvcc is missing, when it is */
    char *cxx_error;

    char *python;      /* the interpreter as asked for */
    char *python_path; /* resolved, NULL when missing */
    char *python_version;
    char *python_include; /* realpath */
    char *ext_suffix;
    bool have_torch;
    char *torch_error; /* why not, for the CA_EUNAVAIL message */
    char *torch_version;
    char *torch_identity; /* version, Python version and torch/version.h's mtime and size */
    char *torch_cuda;     /* torch.version.cuda, may be NULL */
    struct compile__argv torch_includes; /* realpaths */
    struct compile__argv torch_libdirs;  /* realpaths */
    int cxx11_abi;
    struct compile__argv pybind11_defines; /* -DPYBIND11_COMPILER_TYPE="_gcc", ... */
    char *cudnn_include;                   /* from the nvidia-cudnn wheel, or NULL */
    char *cudnn_lib;                       /* its libcudnn.so*, or NULL */
};

/*
 * The toolchain for this interpreter (NULL: $CUDA_AGENT_PYTHON or python3).
 * Discovered on first use, then cached for the life of the process (never
 * freed). Fails only when neither nvcc nor a C++ compiler can be looked for;
 * what is missing is recorded in the struct.
 */
int compile__toolchain_get(const char *python, const struct compile__toolchain **out,
                           struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Parse the discovery script's JSON output into tc (the torch part).
 * Separate for tests.
 */
int compile__toolchain_parse_python(struct compile__toolchain *tc, struct sv json_text,
                                    struct ca_err *err) WARN_UNUSED_RESULT;

/* The Python program that prints the discovery JSON. */
extern const char compile__python_probe[];

/*
 * "sm_90", "90", "9.0", "sm_90a", "compute_90" -> "sm_90" / "sm_90a" in
 * out (16 bytes). NULL or "" asks the GPU (cached), else sm_90.
 */
int compile__arch_resolve(const char *opt, char out[16], struct ca_err *err) WARN_UNUSED_RESULT;
/* The first GPU's compute capability as "sm_XY", or "" without nvidia-smi (cached). */
const char *compile__gpu_arch(void);

/* ---- keys and the cache (compile_cache.c) ---- */

#define COMPILE__KEY_SCHEMA "cuda-agent/compile/v1"

/* What an object depends on besides its argv. */
struct compile__unit_key_in {
    enum compile_role role;
    const char *name;     /* workspace-relative */
    struct sv source;     /* the unit's bytes */
    struct sv deps;       /* bytes of files it includes from kernels/ */
    const char *compiler; /* path */
    const char *compiler_version;
    const char *const *argv;   /* flags, without input and output names */
    const char *headers;       /* identity of the torch and Python headers; bindings only */
    struct sv template_header; /* binding_registry.h, bindings only */
};

void compile__unit_key(const struct compile__unit_key_in *in, char out[HASH128_HEX_LEN + 1]);
/* key over compiler identity, link flags and the objects' keys, in order */
void compile__so_key(const char *linker, const char *linker_version, const char *const *flags,
                     const char *const *object_keys, size_t n, char out[HASH128_HEX_LEN + 1]);
void compile__pch_key(const char *compiler, const char *compiler_version, const char *headers,
                      const char *const *flags, struct sv header, char out[HASH128_HEX_LEN + 1]);

enum compile__entry { COMPILE__OBJ, COMPILE__SO, COMPILE__PCH };

/* Create the cache layout (objects/, so/, pch/, tmp/) under dir. */
int compile__cache_prepare(const char *dir, struct ca_err *err) WARN_UNUSED_RESULT;
/* Path of an entry (objects/ab/<key>.o, so/<key>.so, pch/<key>/) into out (reset first). */
int compile__cache_path(const char *dir, enum compile__entry kind, const char *key,
                        struct buf *out) WARN_UNUSED_RESULT;
/* Whether the entry exists; a hit refreshes its mtime (the LRU clock). */
bool compile__cache_hit(const char *path);
/*
 * Move a finished file into the cache at path: fsync, read-only mode, and
 * rename (replacing an identical entry another evaluator stored meanwhile).
 * Creates the objects/ab/ directory as needed.
 */
int compile__cache_store(const char *file, const char *path, struct ca_err *err) WARN_UNUSED_RESULT;
/* Copy src to dst through a temporary beside dst and a rename. */
int compile__copy_atomic(const char *src, const char *dst, mode_t mode,
                         struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- load_inline cuda sources cut in two (compile_split.c) ---- */

/*
 * A cu-torch source as two translation units with the source's line numbers (after a #line
 * naming it): `dev`, for nvcc without torch (kernels, device code, every function that does not
 * use torch), and `host`, for g++ with the split precompiled header (the host functions that
 * use torch, their launches lowered to calls of the kernels' host stubs, and declarations of
 * the rest). `host` is empty when no function uses torch. `dev_names` ("name\n" each) are the
 * functions the host half uses and the dev half defines: the merged object must not leave them
 * undefined (compile__split_check_object).
 */
struct compile__split {
    struct buf dev, host, dev_names;
    char why[200]; /* why not, when compile__split_source returns 1 */
};

void compile__split_init(struct compile__split *sp);
void compile__split_release(struct compile__split *sp);
/* 0: cut; 1: not cut (sp->why says why). Never an error: the source is built as one unit. */
int compile__split_source(struct sv src, const char *name, struct compile__split *sp);
/*
 * Whether the relocatable object at path leaves one of names undefined (by its C name or its
 * Itanium source name): 1 and why, 0 when none, negative when the file cannot be read.
 */
int compile__split_check_object(const char *path, struct sv names, char *why, size_t why_len);

/* ---- compiler output (compile_log.c) ---- */

/*
 * Append raw compiler output to out with paths mapped back to workspace-
 * relative names: every occurrence of the strip prefixes (the build
 * directory, "/workspace/") removed, a leading "./" dropped, and nvcc's
 * "file(12): " turned into "file:12: ". Lines longer than
 * COMPILE__LINE_MAX are cut. CA_ETOOBIG when out is full (it holds what fitted).
 */
#define COMPILE__LINE_MAX 400
int compile__log_normalize(struct sv raw, const char *const *strip, struct buf *out);

struct compile__trim_result {
    size_t lines;    /* lines appended */
    bool had_errors; /* the log has error diagnostics (else warnings were kept) */
};

/*
 * Keep what matters of a normalized log: each error with its source
 * excerpt (3 lines), up to 3 lines of template-instantiation context and 2
 * notes; include stacks, further instantiation spam, warnings (when there
 * are errors) and summaries dropped. With no error diagnostics, the same
 * for warnings; with neither, the log's first lines. Appends to out.
 */
int compile__log_trim(struct sv log, struct buf *out, struct compile__trim_result *res);

/*
 * Append the lines of text to out while *budget lasts (one line per
 * decrement); lines past the budget are counted in *omitted.
 */
int compile__append_lines(struct buf *out, struct sv text, size_t *budget, size_t *omitted);

#endif
