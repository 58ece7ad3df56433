/*
 * policy_src_directives.c - the source policy's preprocessing directives: #include against the
 * header allow-list (and what a refused header is for), #define/#undef against macros that would
 * hide names from the check (token pasting, macro parameters after . -> ::, redefined keywords,
 * reserved or policy names; a macro body is checked like code), #pragma naming or renaming
 * symbols, and the names a file #defines (collected first, so that the token walk knows them).
 * The token walk itself is policy_src.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/policy_src_internal.h"
#include "core/banned.h"

static bool starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool ends(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool header_allowed(const struct checker *ck, const char *h)
{
    if (in_set(h, policy__std_headers, policy__std_headers_n) ||
        in_set(h, policy__cuda_headers, policy__cuda_headers_n))
        return true;
    for (size_t i = 0; i < policy__cuda_header_dirs_n; i++)
        if (starts(h, policy__cuda_header_dirs[i]))
            return true;
    if (starts(h, "sm_") && ends(h, ".h"))
        return true; /* sm_*_intrinsics.h, sm_*_atomic_functions.h */
    if (starts(h, "cudnn_") && ends(h, ".h"))
        return true; /* cuDNN 8/9's split headers */
    /* load_inline puts <torch/types.h> before a cuda source: a subset of torch/extension.h. */
    if (ck->torch && ck->cu && !strcmp(h, "torch/types.h"))
        return true;
    return ck->torch && in_set(h, policy__binding_headers, policy__binding_headers_n);
}

static bool header_path_safe(const char *h)
{
    if (!h[0] || h[0] == '/' || strstr(h, "..") || strstr(h, "//"))
        return false;
    for (const char *p = h; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '/' || c == '-' || c == '+'))
            return false;
    }
    return true;
}

static void check_include(struct checker *ck, size_t name_tok, size_t hdr_tok)
{
    const char *dname = txt(ck, name_tok);
    size_t at = hdr_tok ? hdr_tok : name_tok;
    if (!strcmp(dname, "include_next") || !strcmp(dname, "embed")) {
        violation(ck, at, "include",
                  "#%s is not allowed: include headers by name with #include <...>", dname);
        return;
    }
    if (!hdr_tok || (T(ck, hdr_tok)->flags & POLICY__TF_COMPUTED)) {
        violation(ck, at, "include",
                  "#%s must name a header directly (<header> or \"binding_registry.h\"): "
                  "computed includes hide which file is read",
                  dname);
        return;
    }
    const char *h = txt(ck, hdr_tok);
    bool angle = T(ck, hdr_tok)->flags & POLICY__TF_ANGLE;
    if (!header_path_safe(h)) {
        violation(ck, at, "include",
                  "#include of `%s`: header names are plain relative names (letters, digits, "
                  "_ . / - +, no .. and no absolute paths)",
                  h);
        return;
    }
    if (!strcmp(h, "binding_registry.h")) {
        if (ck->cu)
            violation(ck, at, "include",
                      "binding_registry.h brings in torch: include it only in "
                      "kernels/*_binding.cpp. A .cu file is plain CUDA with extern \"C\" "
                      "launchers.");
        else if (angle)
            violation(ck, at, "include", "write #include \"binding_registry.h\" (with quotes)");
        return;
    }
    if (header_allowed(ck, h))
        return;
    const char *lib = NULL;
    static const char *const lib_prefixes[] = {
        "thrust/",  "cutlass/", "cute/", "cufft",   "curand",    "cusparse",   "cusolver",
        "cutensor", "nvrtc",    "nccl",  "nvshmem", "nvml",      "nvToolsExt", "nvtx3/",
        "npp",      "cublasXt", "cupti", "nvjpeg",  "nvJitLink", "cufile",
    };
    for (size_t k = 0; k < ARRAY_SIZE(lib_prefixes); k++)
        if (starts(h, lib_prefixes[k]))
            lib = h;
    if (lib) {
        violation(ck, at, "library",
                  "<%s> is a library other than cuBLAS and cuDNN: only cuBLAS (matrix products) "
                  "and cuDNN (convolutions) may be used; write this part as a kernel",
                  h);
    } else if (!strcmp(h, "Python.h") || starts(h, "python") || !strcmp(h, "pybind11/embed.h") ||
               !strcmp(h, "pybind11/eval.h")) {
        violation(ck, at, "python",
                  "<%s> reaches the Python interpreter: bindings take and return tensors through "
                  "m.def and pybind11::arg only (binding_registry.h includes what they need)",
                  h);
    } else if (!ck->torch && (starts(h, "torch/") || starts(h, "ATen/") || starts(h, "c10/") ||
                              starts(h, "pybind11/"))) {
        violation(ck, at, "include",
                  "<%s> in a kernel file: kernels/*.cu are plain CUDA, built by nvcc without "
                  "torch. Keep tensor handling in the *_binding.cpp and pass pointers and sizes "
                  "to an extern \"C\" launcher.",
                  h);
    } else if (starts(h, "torch/") || starts(h, "ATen/") || starts(h, "c10/") ||
               starts(h, "pybind11/")) {
        violation(ck, at, "torch-compute",
                  "<%s> is torch API beyond tensor handling: include \"binding_registry.h\" "
                  "(torch/extension.h, the CUDA context and guard) and compute in your kernel",
                  h);
    } else if (!strcmp(h, "thread") || !strcmp(h, "future") || !strcmp(h, "pthread.h") ||
               !strcmp(h, "threads.h") || !strcmp(h, "execution") || !strcmp(h, "stop_token") ||
               !strcmp(h, "semaphore") || !strcmp(h, "latch") || !strcmp(h, "barrier") ||
               !strcmp(h, "omp.h")) {
        violation(ck, at, "thread",
                  "<%s> is for threads: all work happens inside the call, on the stream the "
                  "binding passes",
                  h);
    } else if (!strcmp(h, "fstream") || !strcmp(h, "filesystem") || !strcmp(h, "fcntl.h") ||
               !strcmp(h, "dirent.h") || !strcmp(h, "sys/mman.h") || !strcmp(h, "sys/stat.h") ||
               !strcmp(h, "sys/file.h") || !strcmp(h, "sys/sendfile.h")) {
        violation(ck, at, "file",
                  "<%s> is for files: kernels and bindings get data only as tensors", h);
    } else if (!strcmp(h, "sys/socket.h") || starts(h, "netinet/") || starts(h, "arpa/") ||
               !strcmp(h, "netdb.h") || !strcmp(h, "sys/un.h")) {
        violation(ck, at, "network", "<%s> is for the network: remove it", h);
    } else if (!strcmp(h, "dlfcn.h") || !strcmp(h, "link.h")) {
        violation(ck, at, "dlopen",
                  "<%s> is for loading code at run time: call only functions you write and the "
                  "allowed CUDA, cuBLAS and cuDNN functions",
                  h);
    } else if (!strcmp(h, "unistd.h") || !strcmp(h, "signal.h") || !strcmp(h, "csignal") ||
               !strcmp(h, "spawn.h") || starts(h, "sys/")) {
        violation(ck, at, "process",
                  "<%s> is for processes, signals and system calls: kernels and bindings may "
                  "only compute",
                  h);
    } else if (!strcmp(h, "chrono") || !strcmp(h, "ctime") || !strcmp(h, "time.h")) {
        violation(ck, at, "include",
                  "<%s>: timing is the evaluator's job, and code that behaves differently by the "
                  "clock is refused; remove it",
                  h);
    } else if (!angle) {
        violation(ck, at, "include",
                  "#include \"%s\": only kernels/*.cu and kernels/*_binding.cpp are taken from "
                  "your workspace, so a header of yours is not there when the evaluator builds. "
                  "Put shared code in the .cu or .cpp itself%s.",
                  h, !ck->torch ? "" : " (bindings include only \"binding_registry.h\")");
    } else {
        violation(
            ck, at, "include",
            "<%s> is not on the list of headers kernels and bindings may include: CUDA "
            "runtime and math headers, cooperative_groups, cub, cuda/*, cuBLAS, cuDNN, C "
            "and C++ standard headers without threads, files or clocks%s",
            h, !ck->torch ? "" : ", and in bindings \"binding_registry.h\" and torch/extension.h");
    }
}

static bool protected_macro_name(const struct checker *ck, const char *name)
{
    if (name[0] == '_' && (name[1] == '_' || (name[1] >= 'A' && name[1] <= 'Z')))
        return true; /* reserved identifiers: __device__, __CUDA_ARCH__, _Pragma, ... */
    if (in_set(name, policy__protected_names, policy__protected_names_n))
        return true;
    /* torch exists only in bindings: there a macro could rename a tensor method */
    return ck->torch && (in_set(name, policy__tensor_compute, policy__tensor_compute_n) ||
                         in_set(name, policy__torch_allowed, policy__torch_allowed_n) ||
                         in_set(name, policy__pybind_allowed, policy__pybind_allowed_n));
}

/* #define / #undef at the directive's name token; returns the index after the line's EOL. */
static size_t check_define(struct checker *ck, size_t name_tok, size_t eol, bool undef)
{
    size_t m = name_tok + 1;
    if (!is_ident(ck, m, eol, NULL))
        return eol + 1;
    const char *name = txt(ck, m);
    struct comp mc = {name, T(ck, m)->len};
    const struct policy__hit *h = policy__classify_name(mc.p, mc.len, ck->ctx);
    if (h) {
        hit(ck, m, mc, h);
    } else if (protected_macro_name(ck, name)) {
        violation(ck, m, "macro",
                  "#%s %s: redefining a keyword, a reserved name or a name the policy relies on "
                  "would hide what the code does; pick another name",
                  undef ? "undef" : "define", name);
    }
    if (undef)
        return eol + 1;
    size_t body = m + 1;
    const char *params[64];
    size_t nparams = 0;
    if (is_punct(ck, body, eol, "(") && !(T(ck, body)->flags & POLICY__TF_SPACE)) {
        size_t j = body + 1;
        for (; j < eol && !is_punct(ck, j, eol, ")"); j++)
            if (T(ck, j)->kind == POLICY__TK_IDENT && nparams < ARRAY_SIZE(params))
                params[nparams++] = txt(ck, j);
        body = j + 1;
    }
    for (size_t j = body; j < eol; j++) {
        if ((is_punct(ck, j, eol, ".") || is_punct(ck, j, eol, "->") ||
             is_punct(ck, j, eol, "::")) &&
            is_ident(ck, j + 1, eol, NULL) && in_set(txt(ck, j + 1), params, nparams)) {
            violation(ck, j, "macro",
                      "macro parameter `%s` used after `%s`: a member or qualified name passed "
                      "as a macro argument is hidden from the policy check; write it out",
                      txt(ck, j + 1), txt(ck, j));
            break;
        }
    }
    for (size_t j = body; j < eol;)
        j = policy__src_check_token(ck, j, body, eol, true);
    return eol + 1;
}

static size_t find_eol(const struct checker *ck, size_t i)
{
    size_t n = ck->lx->n;
    while (i < n && T(ck, i)->kind != POLICY__TK_EOL)
        i++;
    return i;
}

size_t policy__src_check_directive(struct checker *ck, size_t hash)
{
    size_t eol = find_eol(ck, hash);
    size_t name = hash + 1;
    if (name >= eol || T(ck, name)->kind != POLICY__TK_IDENT)
        return eol + 1;
    switch (T(ck, name)->dir) {
    case POLICY__DIR_INCLUDE:
        check_include(ck, name,
                      name + 1 < eol && T(ck, name + 1)->kind == POLICY__TK_HEADER ? name + 1 : 0);
        return eol + 1;
    case POLICY__DIR_DEFINE:
        return check_define(ck, name, eol, false);
    case POLICY__DIR_UNDEF:
        return check_define(ck, name, eol, true);
    default:
        break;
    }
    /* #if, #error, #line: their tokens are not code. #pragma can name symbols. */
    bool pragma = strcmp(txt(ck, name), "pragma") == 0;
    for (size_t j = name + 1; j < eol; j++) {
        if (is_punct(ck, j, eol, "##")) {
            violation(ck, j, "macro", "token pasting (##) outside a macro body");
        } else if (pragma && T(ck, j)->kind == POLICY__TK_IDENT) {
            const char *p = txt(ck, j);
            if (j == name + 1 && (!strcmp(p, "weak") || !strcmp(p, "redefine_extname"))) {
                violation(ck, j, "dlopen",
                          "#pragma %s renames or weakens symbols, so calls are not what they "
                          "name; remove it",
                          p);
                break;
            }
            struct comp c = {p, T(ck, j)->len};
            const struct policy__hit *h = policy__classify_name(c.p, c.len, ck->ctx);
            if (h) {
                hit(ck, j, c, h);
                break;
            }
        }
    }
    return eol + 1;
}

void policy__src_collect_macros(struct checker *ck)
{
    size_t n = ck->lx->n, cap = 0;
    for (size_t i = 0; i + 2 < n; i++) {
        if (!(T(ck, i)->flags & POLICY__TF_HASH) || T(ck, i + 1)->dir != POLICY__DIR_DEFINE ||
            T(ck, i + 2)->kind != POLICY__TK_IDENT)
            continue;
        ALLOC_GROW(ck->macros, ck->nmacros + 1, cap);
        ck->macros[ck->nmacros++] = txt(ck, i + 2);
    }
    if (ck->nmacros)
        qsort(ck->macros, ck->nmacros, sizeof(*ck->macros), cmp_str);
}
