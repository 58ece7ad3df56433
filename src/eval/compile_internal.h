/*
 * compile_internal.h - shared between compile.c (the build) and its parts
 * (compile_run.c, compile_pool.c, compile_retry.c, compile_flags.c,
 * compile_pch.c, compile_link.c, compile_report.c), compile_toolchain.c
 * (discovery), compile_cache.c (keys and the cache directory),
 * compile_split*.c (cutting cu-torch sources) and compile_log.c (mapping and
 * trimming compiler output). Also used by the unit tests. Not part of the
 * module's interface.
 */
#ifndef CA_COMPILE_INTERNAL_H
#define CA_COMPILE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/hash.h"
#include "core/limits.h"
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
 * Move a finished file into the cache at path: fsync, read-only mode, hard
 * link, unlink. An entry already there (equal content, another evaluator's)
 * stays and the file is dropped. Creates the objects/ab/ directory as needed.
 */
int compile__cache_store(const char *file, const char *path, struct ca_err *err) WARN_UNUSED_RESULT;
/* Copy src to dst through a temporary beside dst and a rename. */
int compile__copy_atomic(const char *src, const char *dst, mode_t mode,
                         struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- load_inline cuda sources cut in two (compile_split*.c) ---- */

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

/*
 * The cut's own state and steps, shared by the files that make it: compile_split.c (the
 * order of the steps, why not), compile_split_lex.c (tokens and brackets),
 * compile_split_items.c (macros and namespace-scope items), compile_split_place.c (what
 * each half gets of each item, and the checks that decline) and compile_split_emit.c (the two
 * halves written). Every step that returns int returns 0 or 1: declined, with
 * compile__cut_decline's reason in why.
 */
enum compile__tok_kind {
    COMPILE__TK_IDENT,
    COMPILE__TK_NUMBER,
    COMPILE__TK_STRING,
    COMPILE__TK_PUNCT,
    COMPILE__TK_DIRECTIVE
};

struct compile__tok {
    enum compile__tok_kind kind;
    size_t off, len;
    bool glued; /* starts where the previous token ended: no space or comment between */
};

enum compile__item_kind {
    COMPILE__IT_DIRECTIVE,
    COMPILE__IT_OPEN,
    COMPILE__IT_CLOSE,
    COMPILE__IT_EMPTY,
    COMPILE__IT_DECL,
    COMPILE__IT_CLASS,
    COMPILE__IT_FUNC
};
enum compile__item_side {
    COMPILE__SIDE_HOST,
    COMPILE__SIDE_KERNEL,
    COMPILE__SIDE_DEVICE,
    COMPILE__SIDE_HD
};
/* What a half gets of an item. */
enum compile__place { COMPILE__PL_TEXT, COMPILE__PL_BLANK, COMPILE__PL_PROTO, COMPILE__PL_DELETED };

struct compile__item {
    enum compile__item_kind kind;
    size_t t0, t1; /* tokens [t0, t1) */
    size_t head;   /* the first token after the template<...> prefixes */
    size_t body;   /* COMPILE__IT_FUNC: the body's '{' */
    size_t name; /* COMPILE__IT_FUNC and function declarations: the name's token; SIZE_MAX: none */
    enum compile__item_side side;
    bool in_anon;  /* in an unnamed namespace */
    bool torch;    /* names torch: its namespaces, macros, or a macro of the source using them */
    bool tmpl;     /* a template */
    bool internal; /* static, or in an unnamed namespace */
    bool inl;      /* inline, __forceinline__ or constexpr */
    bool typeish;  /* COMPILE__IT_DECL: typedef, using, static_assert, alias, forward declaration */
    bool proto;    /* COMPILE__IT_DECL: declares a function */
    bool dev_only_var; /* COMPILE__IT_DECL: a device variable, or a host one that can change */
    bool static_local; /* COMPILE__IT_FUNC, COMPILE__IT_CLASS: a static or thread_local inside */
    bool launches;     /* a <<< >>> launch inside */
    enum compile__place dev, host;
};

struct compile__cut {
    struct sv src;
    struct compile__tok *t;
    size_t n, talloc;
    struct compile__item *it;
    size_t ni, ialloc;
    /* The source's #define names; whether each uses torch, or makes declarations. */
    struct sv *macros;
    bool *macro_torch, *macro_structural;
    size_t nmacros, macros_alloc;
    /* Identifiers the host half names (a byte per token: used there). */
    bool *host_names;
    char *why;
    size_t why_len;
};

/* 1, with the first reason given kept in s->why (compile_split.c). */
int compile__cut_decline(struct compile__cut *s, const char *fmt, ...) CA_PRINTF(2, 3);

/* Tokens and brackets (compile_split_lex.c). */
bool compile__cut_ident_char(char c);
int compile__cut_lex(struct compile__cut *s);
struct sv compile__cut_tok_sv(const struct compile__cut *s, size_t i);
size_t compile__cut_tok_end(const struct compile__cut *s, size_t i);
bool compile__cut_is_punct(const struct compile__cut *s, size_t i, char c);
bool compile__cut_is_ident(const struct compile__cut *s, size_t i, const char *name);
bool compile__cut_triple(const struct compile__cut *s, size_t i, char c);
bool compile__cut_scope_op(const struct compile__cut *s, size_t i);
bool compile__cut_launch_at(const struct compile__cut *s, size_t i);
size_t compile__cut_match(const struct compile__cut *s, size_t i);
size_t compile__cut_match_angle(const struct compile__cut *s, size_t i);

/* Macros and namespace-scope items (compile_split_items.c). */
long compile__cut_macro_index(const struct compile__cut *s, struct sv name);
void compile__cut_scan_macros(struct compile__cut *s);
bool compile__cut_torch_token(const struct compile__cut *s, size_t i);
bool compile__cut_class_key(const struct compile__cut *s, size_t i);
bool compile__cut_assign_eq(const struct compile__cut *s, size_t i);
size_t compile__cut_head_name(const struct compile__cut *s, size_t a, size_t b, bool *qualified);
void compile__cut_head_flags(const struct compile__cut *s, struct compile__item *it, size_t a,
                             size_t b);
int compile__cut_parse_items(struct compile__cut *s);

/* What each half gets, and the checks (compile_split_place.c). */
int compile__cut_classify(struct compile__cut *s, bool *dev_only_names);
struct sv compile__cut_system_include(const struct compile__cut *s, size_t i);
int compile__cut_check_includes(struct compile__cut *s);
int compile__cut_place_items(struct compile__cut *s, bool *torch_functions);
int compile__cut_check_host_refs(struct compile__cut *s, const bool *dev_only_names,
                                 struct buf *names);

/* The two halves (compile_split_emit.c). */
int compile__cut_write_halves(struct compile__cut *s, const char *name, bool torch_functions,
                              struct compile__split *out);

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
/*
 * ptxas -v's report (nvcc units): whether a line is part of it (such lines are taken out of
 * the log the agent reads, and shown per kernel instead), and the kernels it describes, in
 * order, at most max. compile__kernel_name reads an Itanium name far enough for people:
 * "_ZN12_GLOBAL__N_16kernelEPKf" -> "kernel"; anything else is copied.
 */
bool compile__ptxas_line(struct sv line);
size_t compile__ptxas_parse(struct sv log, struct compile_kernel_info *out, size_t max);
void compile__kernel_name(struct sv mangled, char *out, size_t out_len);
/* The ptxas lines of an object, kept beside it in the cache (objects/ab/<key>.o.info). */
#define COMPILE__INFO_SUFFIX ".info"

int compile__append_lines(struct buf *out, struct sv text, size_t *budget, size_t *omitted);

/* ---- the build (compile.c and its parts) ---- */

/* Compiler output kept per run (stdout and stderr together). */
#define COMPILE__RUN_OUTPUT_MAX CA_LIMIT_COMPILE_LOG
/* Directories of the build directory: light torch headers, split halves and their header. */
#define COMPILE__LIGHT_DIR "light"
#define COMPILE__SPLIT_PCH_DIR "pch_split"
#define COMPILE__SPLIT_DIR "split"

/* Paths of the build directory bound read-only for compilers and for the linker (compile.c). */
extern const char *const compile__ro_compile[];
extern const char *const compile__ro_link[];

/* One compiler run (compile_run.c). */
struct compile__run {
    int rc; /* < 0: the compiler could not be started (err says why) */
    struct ca_err err;
    bool ok, timed_out;
    char how[96]; /* "exit 1", "killed by signal 9 (Killed)", "timed out after 5000 ms" */
    struct buf out;
    int64_t elapsed_us;
};

/* Shared by every run of one build; read-only once the build starts running jobs. */
struct compile__ctx {
    const char *build_dir; /* absolute */
    int64_t timeout_ms;
    bool sandbox;
    struct compile__argv env; /* NAME=VALUE */
    /* Host directories compilers need (sandbox binds), per kind of run. */
    struct compile__argv binds_cu, binds_cxx, binds_link, binds_cu_torch;
};

void compile__run_init(struct compile__run *r);
void compile__run_release(struct compile__run *r);
/* Runs argv in dir (sandboxed when c->sandbox, with ro read-only and binds bound); r says how. */
void compile__run_tool(const struct compile__ctx *c, const char *dir,
                       const struct compile__argv *argv, const char *const *ro,
                       const struct compile__argv *binds, struct compile__run *r);

/* Units, jobs and the pool (compile_pool.c). */
struct compile__unit {
    char *name; /* workspace-relative */
    enum compile_role role;
    struct buf src;
    char digest[HASH128_HEX_LEN + 1]; /* of src, for the keys of units including it */
    struct buf deps;                  /* "name digest\n" of the units it includes */
    char key[HASH128_HEX_LEN + 1];
    char *cache_path;
    bool hit;
};

struct compile__job {
    struct compile__unit *u;
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
    struct compile__run run;
    bool used_pch, retried;
    bool split_ok;        /* the object is the merged halves */
    int64_t split_us;     /* time spent on halves that failed, before the fallback */
    struct buf split_log; /* why the halves failed, and what their compilers said */
    int store_rc;
    struct ca_err store_err;
};

struct compile__pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    struct compile__job **queue;
    size_t qhead, qlen, qalloc;
    size_t pending; /* submitted, not finished */
    bool stop;
    pthread_t *threads;
    size_t nthreads, max_threads;
    const struct compile__ctx *ctx;
};

void compile__pool_init(struct compile__pool *p, const struct compile__ctx *c, size_t max_threads);
void compile__pool_submit(struct compile__pool *p, struct compile__job *j);
void compile__pool_wait(struct compile__pool *p);
void compile__pool_release(struct compile__pool *p);

/* Whether a failed unit is retried without the precompiled / light headers (compile_retry.c). */
bool compile__pch_failure(const struct buf *out);
bool compile__light_failure(const struct buf *out);

/* One build's state, owned by compile_build() or compile_warm() on one thread. */
struct compile__build {
    const struct compile_opts *opts;
    const struct compile__toolchain *tc;
    struct compile_report *rep;
    char *cache_dir;
    struct buf build_dir;
    char *dir_slash; /* build_dir + "/": stripped from compiler output */
    struct compile__ctx ctx;
    struct compile__unit *units;
    size_t n, units_alloc;
    struct compile__job *jobs;
    size_t njobs;
    struct compile__pool pool;
    bool pool_started;
    struct compile__argv cu_flags, cxx_flags, cu_torch_flags;
    struct compile__argv split_flags;  /* c++ for the torch half of a split cu-torch unit */
    struct compile__argv cu_torch_key; /* a cu-torch key's flags: both ways to build it */
    char *cu_identity;                 /* nvcc and the host compiler it uses */
    char pch_key[HASH128_HEX_LEN + 1], split_pch_key[HASH128_HEX_LEN + 1];
    bool pch_ready, split_pch_ready;
    bool stored;   /* something new went into the cache */
    bool vanished; /* a cached object was pruned between its lookup and the link */
};

/* Files of the build directory (compile.c). */
int compile__write_file(const char *dir, const char *rel, const void *data, size_t len,
                        struct ca_err *err) WARN_UNUSED_RESULT;
int compile__make_dirs(const char *dir, const char *const *subdirs,
                       struct ca_err *err) WARN_UNUSED_RESULT;

/* Flags and environment (compile_flags.c). */
void compile__push_bind(struct compile__argv *a, const char *dir);
void compile__make_flags(struct compile__build *b, const char *arch);
void compile__make_env(struct compile__build *b);

/* Precompiled and light headers (compile_pch.c). */
extern const char compile__pch_header[];
extern const char compile__light_header[];
extern const char compile__light_types_header[];
extern const char compile__split_pch_header[];
int compile__write_light_headers(const char *dir, struct ca_err *err) WARN_UNUSED_RESULT;
int compile__ensure_binding_pch(struct compile__build *b, struct ca_err *err) WARN_UNUSED_RESULT;
int compile__ensure_split_pch(struct compile__build *b, struct ca_err *err) WARN_UNUSED_RESULT;

/* The link (compile_link.c). */
int compile__link(struct compile__build *b, const char *out_so,
                  struct ca_err *err) WARN_UNUSED_RESULT;

/* The report (compile_report.c). */
void compile__log_add(struct compile_report *rep, const char *title, const struct buf *raw,
                      const char *const *strip);
int compile__collect(struct compile__build *b, struct ca_err *err) WARN_UNUSED_RESULT;
/* A unit's kernel table from ptxas's lines, or from those kept beside its cached object. */
void compile__unit_kernels(struct compile_unit_report *ur, struct sv ptxas);
void compile__unit_kernels_cached(struct compile_unit_report *ur, const char *cache_path);

#endif
