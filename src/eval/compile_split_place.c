/*
 * compile_split_place.c - what each half of the cut (compile_split.c) gets of each item, and
 * every reason not to cut: the table at the top of compile_split.c applied (kernels and device
 * functions to nvcc, torch functions to g++, declarations to both, helpers the torch half uses
 * copied), the prelude of includes the precompiled header stands in for, and the names the
 * host half uses checked against what the dev half defines.
 *
 * Invariant: a cut that passes these checks is the same program as the source; anything these
 * checks cannot show to be so declines.
 */
#include "eval/compile_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/banned.h"

/* A macro that makes declarations named in [a, b): the cut cannot see what it declares. */
static bool structural_macro_in(const struct compile__cut *s, size_t a, size_t b)
{
    for (size_t i = a; i < b; i++) {
        if (s->t[i].kind != COMPILE__TK_IDENT)
            continue;
        long m = compile__cut_macro_index(s, compile__cut_tok_sv(s, i));
        if (m >= 0 && s->macro_structural[m])
            return true;
    }
    return false;
}

static bool range_has_ident(const struct compile__cut *s, size_t a, size_t b, const char *name)
{
    for (size_t i = a; i < b; i++)
        if (compile__cut_is_ident(s, i, name))
            return true;
    return false;
}

static struct sv item_name(const struct compile__cut *s, const struct compile__item *it)
{
    return it->name == SIZE_MAX ? sv_from("", 0) : compile__cut_tok_sv(s, it->name);
}

/* A function declaration's parentheses: empty, or starting like a parameter declaration. */
static bool parameter_list(const struct compile__cut *s, size_t open)
{
    size_t i = open + 1;
    return compile__cut_is_punct(s, i, ')') || s->t[i].kind == COMPILE__TK_IDENT ||
           compile__cut_scope_op(s, i) ||
           (compile__cut_is_punct(s, i, '.') && compile__cut_is_punct(s, i + 1, '.'));
}

/* The variable names a declaration [a, b) defines: the identifier before each top-level
 * '=', ',', ';', '[', '{' or '('. Marked dev-only in names (a byte per token). */
static void variable_names(const struct compile__cut *s, size_t a, size_t b, bool *names)
{
    for (size_t i = a + 1; i < b; i++) {
        if (compile__cut_is_punct(s, i, '<')) {
            size_t e = compile__cut_match_angle(s, i);
            if (e != SIZE_MAX && e < b) {
                i = e;
                continue;
            }
        }
        bool stop = compile__cut_is_punct(s, i, '=') || compile__cut_is_punct(s, i, ',') ||
                    compile__cut_is_punct(s, i, ';') || compile__cut_is_punct(s, i, '[') ||
                    compile__cut_is_punct(s, i, '{') || compile__cut_is_punct(s, i, '(');
        if (stop && s->t[i - 1].kind == COMPILE__TK_IDENT)
            names[i - 1] = true;
        if ((compile__cut_is_punct(s, i, '(') || compile__cut_is_punct(s, i, '[') ||
             compile__cut_is_punct(s, i, '{'))) {
            size_t e = compile__cut_match(s, i);
            if (e == SIZE_MAX || e >= b)
                return;
            i = e;
        } else if (compile__cut_is_punct(s, i, '=')) {
            /* Skip the initializer to the next top-level ','. */
            for (i++;
                 i < b && !compile__cut_is_punct(s, i, ',') && !compile__cut_is_punct(s, i, ';');
                 i++)
                if (compile__cut_is_punct(s, i, '(') || compile__cut_is_punct(s, i, '[') ||
                    compile__cut_is_punct(s, i, '{')) {
                    size_t e = compile__cut_match(s, i);
                    if (e == SIZE_MAX || e >= b)
                        return;
                    i = e;
                }
            i--;
        }
    }
}

int compile__cut_classify(struct compile__cut *s, bool *dev_only_names)
{
    for (size_t i = 0; i < s->n; i++) {
        struct sv v = compile__cut_tok_sv(s, i);
        if ((s->t[i].kind == COMPILE__TK_IDENT &&
             (sv_starts_with(v, SV_LIT("__CUDACC")) || sv_starts_with(v, SV_LIT("__NVCC")))) ||
            (s->t[i].kind == COMPILE__TK_DIRECTIVE &&
             (memmem(v.p, v.len, "__CUDACC", 8) || memmem(v.p, v.len, "__NVCC", 6))))
            return compile__cut_decline(
                s, "the source tests __CUDACC__ or __NVCC__, which nvcc's host pass "
                   "defines");
    }
    for (size_t n = 0; n < s->ni; n++) {
        struct compile__item *it = &s->it[n];
        if (it->kind == COMPILE__IT_DIRECTIVE || it->kind == COMPILE__IT_OPEN ||
            it->kind == COMPILE__IT_CLOSE || it->kind == COMPILE__IT_EMPTY)
            continue;
        size_t head_end = it->kind == COMPILE__IT_FUNC ? it->body : it->t1;
        if (s->t[it->head].kind == COMPILE__TK_IDENT &&
            compile__cut_macro_index(s, compile__cut_tok_sv(s, it->head)) >= 0)
            return compile__cut_decline(s, "a declaration that starts with a macro (%.*s)",
                                        (int)s->t[it->head].len, s->src.p + s->t[it->head].off);
        if (structural_macro_in(s, it->t0, it->kind == COMPILE__IT_CLASS ? it->t1 : head_end))
            return compile__cut_decline(s, "a declaration made with a macro");
        compile__cut_head_flags(s, it, it->head, head_end);
        for (size_t i = it->t0; i < it->t1; i++) {
            it->torch = it->torch || compile__cut_torch_token(s, i);
            it->launches = it->launches || compile__cut_launch_at(s, i);
        }
        if (it->kind == COMPILE__IT_FUNC) {
            bool qualified;
            it->name = compile__cut_head_name(s, it->head, it->body, &qualified);
            if (it->name == SIZE_MAX)
                return compile__cut_decline(s,
                                            "a function definition whose name the cut cannot read");
            if (qualified)
                return compile__cut_decline(s, "a member function defined outside its class (%.*s)",
                                            (int)s->t[it->name].len, s->src.p + s->t[it->name].off);
            it->static_local = range_has_ident(s, it->body, it->t1, "static") ||
                               range_has_ident(s, it->body, it->t1, "thread_local");
            if (it->torch && it->side != COMPILE__SIDE_HOST)
                return compile__cut_decline(s, "device code that uses torch (%.*s)",
                                            (int)s->t[it->name].len, s->src.p + s->t[it->name].off);
            continue;
        }
        if (it->kind == COMPILE__IT_CLASS) {
            if (it->torch)
                return compile__cut_decline(s, "a type that uses torch");
            it->static_local = range_has_ident(s, it->t0, it->t1, "static") ||
                               range_has_ident(s, it->t0, it->t1, "thread_local");
            if (it->static_local && it->internal)
                return compile__cut_decline(s, "static members of a class in an unnamed namespace");
            continue;
        }
        /* A declaration: of a type, alias or assertion; of a function; or of variables. */
        size_t h = it->head;
        if (compile__cut_is_ident(s, h, "typedef") || compile__cut_is_ident(s, h, "using") ||
            compile__cut_is_ident(s, h, "static_assert") ||
            compile__cut_is_ident(s, h, "namespace") ||
            (compile__cut_class_key(s, h) && it->t1 == h + 3)) {
            if (it->torch)
                return compile__cut_decline(s, "a declaration outside functions that uses torch");
            it->typeish = true;
            continue;
        }
        bool qualified;
        size_t name = compile__cut_head_name(s, h, it->t1, &qualified);
        if (name != SIZE_MAX && !qualified &&
            (compile__cut_is_ident(s, name, "operator") || parameter_list(s, name + 1))) {
            it->proto = true;
            it->name = name;
            continue;
        }
        if (it->torch)
            return compile__cut_decline(s, "a variable that uses torch");
        bool device = false, constant = false, changeable = false;
        for (size_t i = h; i < it->t1 && !compile__cut_assign_eq(s, i); i++) {
            if (compile__cut_is_ident(s, i, "__device__") ||
                compile__cut_is_ident(s, i, "__constant__") ||
                compile__cut_is_ident(s, i, "__managed__") ||
                compile__cut_is_ident(s, i, "__shared__"))
                device = true;
            else if (compile__cut_is_ident(s, i, "constexpr") ||
                     compile__cut_is_ident(s, i, "const"))
                constant = true;
            else if (compile__cut_is_punct(s, i, '*') || compile__cut_is_punct(s, i, '&') ||
                     compile__cut_is_ident(s, i, "thread_local") ||
                     compile__cut_is_ident(s, i, "mutable") ||
                     compile__cut_is_ident(s, i, "extern"))
                changeable = true;
        }
        /* "const T *p" can change; "constexpr T *p" cannot. */
        bool frozen = range_has_ident(s, h, it->t1, "constexpr") || (constant && !changeable);
        it->dev_only_var = device || !frozen;
        if (it->dev_only_var)
            variable_names(s, h, it->t1, dev_only_names);
    }
    return 0;
}

/* The header an "#include <...>" directive at item i names ("<cuda.h>"); empty if another. */
struct sv compile__cut_system_include(const struct compile__cut *s, size_t i)
{
    const struct compile__item *it = &s->it[i];
    if (it->kind != COMPILE__IT_DIRECTIVE)
        return sv_from("", 0);
    struct sv d = compile__cut_tok_sv(s, it->t0);
    struct sv t = sv_ltrim(sv_sub(d, 1, d.len - 1));
    if (!sv_chop_prefix(&t, SV_LIT("include")))
        return sv_from("", 0);
    t = sv_ltrim(t);
    long close = sv_find_ch(t, '>');
    if (!t.len || t.p[0] != '<' || close < 0)
        return sv_from("", 0);
    return sv_sub(t, 0, (size_t)close + 1);
}

/* Prefixes of the macros ATen/cuda/CUDAContext.h and c10/cuda/CUDAGuard.h (with the cuBLAS,
 * cuSPARSE, cuSOLVER and inttypes headers they include) define beyond torch/types.h and
 * cuda_runtime.h, with torch 2.15 and CUDA 13. */
static bool late_macro_like(struct sv v)
{
    static const char *const prefixes[] = {"CU",         "NV_",       "cublas",
                                           "cusparse",   "cusolver",  "PRI",
                                           "SCN",        "AT_",       "TORCH_",
                                           "C10_",       "_NV_",      "__NV_",
                                           "__BFLOAT",   "__CUDA_",   "__PRI",
                                           "_GLIBCXX_",  "_INTTYPES", "__gwchar",
                                           "____gwchar", "__cpp_",    "IF_DEVICE_OR_CUDACC",
                                           "REGISTER_"};
    for (size_t i = 0; i < ARRAY_SIZE(prefixes); i++)
        if (sv_starts_with(v, sv_cstr(prefixes[i])))
            return true;
    return false;
}

/*
 * The host half's precompiled header holds <torch/types.h>, <cuda.h>, <cuda_runtime.h> (the
 * prelude load_inline gives cuda sources), <ATen/cuda/CUDAContext.h> and <c10/cuda/CUDAGuard.h>
 * (what the light <torch/extension.h> adds to torch/types.h), ahead of the source. That shows
 * the source nothing new when its first lines are #include <...> directives naming the first
 * three, and it includes the other two (or <torch/extension.h>) at namespace scope: the headers
 * then only come earlier. Before that include there must be no other directive (a #define the
 * headers would not have seen), and nothing the host half holds may use a name those headers
 * define as a macro (it would be expanded where the source did not expand it).
 */
int compile__cut_check_includes(struct compile__cut *s)
{
    enum { TYPES, CUDA, RUNTIME, CONTEXT, GUARD, EXTENSION, N };
    static const char *const pch[N] = {"<torch/types.h>",        "<cuda.h>",
                                       "<cuda_runtime.h>",       "<ATen/cuda/CUDAContext.h>",
                                       "<c10/cuda/CUDAGuard.h>", "<torch/extension.h>"};
    bool found[N] = {false}, leading = true;
    size_t i = 0, depth = 0, first_late = 0;
    for (; i < s->ni && !(found[TYPES] && found[CUDA] && found[RUNTIME] &&
                          (found[EXTENSION] || (found[CONTEXT] && found[GUARD])));
         i++) {
        const struct compile__item *it = &s->it[i];
        depth += it->kind == COMPILE__IT_OPEN;
        depth -= it->kind == COMPILE__IT_CLOSE;
        if (it->kind != COMPILE__IT_DIRECTIVE) {
            if (leading)
                first_late = i;
            leading = false;
            continue;
        }
        struct sv h = compile__cut_system_include(s, i);
        if (!h.len)
            return compile__cut_decline(
                s, "a directive other than #include <...> before the torch includes");
        for (size_t k = 0; k < N; k++)
            found[k] = found[k] || (!depth && (leading || k >= CONTEXT) && sv_eq_cstr(h, pch[k]));
    }
    if (!found[TYPES] || !found[CUDA] || !found[RUNTIME])
        return compile__cut_decline(
            s, "the source does not start with #include <torch/types.h>, <cuda.h> "
               "and <cuda_runtime.h> (load_inline's prelude)");
    if (leading)
        first_late = i;
    if (!(found[EXTENSION] || (found[CONTEXT] && found[GUARD])))
        return compile__cut_decline(
            s, "no #include <torch/extension.h> (or <ATen/cuda/CUDAContext.h> and "
               "<c10/cuda/CUDAGuard.h>) at namespace scope");
    for (size_t n = first_late; n < i; n++) {
        const struct compile__item *it = &s->it[n];
        if (it->host == COMPILE__PL_BLANK || it->kind == COMPILE__IT_DIRECTIVE)
            continue;
        size_t end = it->host == COMPILE__PL_TEXT ? it->t1 : it->body;
        for (size_t k = it->t0; k < end; k++)
            if (s->t[k].kind == COMPILE__TK_IDENT && late_macro_like(compile__cut_tok_sv(s, k)))
                return compile__cut_decline(
                    s,
                    "%.*s, before #include <torch/extension.h>, may be a macro of "
                    "the torch headers",
                    (int)s->t[k].len, s->src.p + s->t[k].off);
    }
    return 0;
}

/* A directive that includes a torch, ATen, c10 or pybind11 header. */
static bool torch_include(struct sv d)
{
    struct sv t = sv_ltrim(sv_sub(d, 1, d.len - 1));
    if (!sv_chop_prefix(&t, SV_LIT("include")))
        return false;
    t = sv_ltrim(t);
    if (t.len < 2)
        return false;
    t = sv_sub(t, 1, t.len - 1);
    static const char *const dirs[] = {"torch/", "ATen/", "c10/", "pybind11/", "caffe2/", "THC/"};
    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
        if (sv_starts_with(t, sv_cstr(dirs[i])))
            return true;
    return false;
}

/* Whether any item of kind FUNC or DECL that satisfies `pred` is named `name`. */
static bool any_named(const struct compile__cut *s, struct sv name,
                      bool (*pred)(const struct compile__item *it))
{
    for (size_t i = 0; i < s->ni; i++)
        if (s->it[i].name != SIZE_MAX && pred(&s->it[i]) && sv_eq(item_name(s, &s->it[i]), name))
            return true;
    return false;
}

static bool is_kernel(const struct compile__item *it)
{
    return it->side == COMPILE__SIDE_KERNEL && (it->kind == COMPILE__IT_FUNC || it->proto);
}

static bool is_bad_kernel(const struct compile__item *it)
{
    return is_kernel(it) && (it->tmpl || it->internal);
}

/* Identifiers of [a, b) into the host half's names (directives: every identifier inside). */
static void mark_names(struct compile__cut *s, size_t a, size_t b)
{
    for (size_t i = a; i < b; i++)
        s->host_names[i] =
            s->t[i].kind == COMPILE__TK_IDENT || s->t[i].kind == COMPILE__TK_DIRECTIVE;
}

static bool host_names_has(const struct compile__cut *s, struct sv name)
{
    for (size_t i = 0; i < s->n; i++) {
        if (!s->host_names[i])
            continue;
        if (s->t[i].kind == COMPILE__TK_IDENT) {
            if (sv_eq(compile__cut_tok_sv(s, i), name))
                return true;
            continue;
        }
        /* A directive: the name as a whole word of its text. */
        struct sv d = compile__cut_tok_sv(s, i);
        for (size_t k = 0; k + name.len <= d.len; k++)
            if (memcmp(d.p + k, name.p, name.len) == 0 &&
                (k == 0 || !compile__cut_ident_char(d.p[k - 1])) &&
                (k + name.len == d.len || !compile__cut_ident_char(d.p[k + name.len])))
                return true;
    }
    return false;
}

/* What each half gets of each item (the table at the top). */
int compile__cut_place_items(struct compile__cut *s, bool *torch_functions)
{
    *torch_functions = false;
    for (size_t n = 0; n < s->ni; n++) {
        struct compile__item *it = &s->it[n];
        it->dev = it->host = COMPILE__PL_TEXT;
        switch (it->kind) {
        case COMPILE__IT_DIRECTIVE:
            if (torch_include(compile__cut_tok_sv(s, it->t0)))
                it->dev = COMPILE__PL_BLANK;
            break;
        case COMPILE__IT_OPEN:
        case COMPILE__IT_CLOSE:
        case COMPILE__IT_EMPTY:
        case COMPILE__IT_CLASS:
            break;
        case COMPILE__IT_DECL:
            if (it->proto && it->torch)
                it->dev = COMPILE__PL_BLANK;
            else if (it->dev_only_var)
                it->host = COMPILE__PL_BLANK;
            break;
        case COMPILE__IT_FUNC:
            if (it->side == COMPILE__SIDE_KERNEL) {
                it->host = COMPILE__PL_PROTO;
            } else if (it->side == COMPILE__SIDE_DEVICE) {
                /* Deleted only where this is the first declaration (C++'s rule for it). */
                bool declared = false;
                for (size_t k = 0; k < n && !declared; k++)
                    declared = s->it[k].kind == COMPILE__IT_DECL && s->it[k].proto &&
                               sv_eq(item_name(s, &s->it[k]), item_name(s, it));
                it->host = declared ? COMPILE__PL_PROTO : COMPILE__PL_DELETED;
            } else if (it->side == COMPILE__SIDE_HOST && it->torch) {
                it->dev = COMPILE__PL_BLANK;
                *torch_functions = true;
            } else if (!(it->inl || it->tmpl || it->internal)) {
                /* Defined by the dev half (external linkage), declared for the host half. */
                it->host = COMPILE__PL_PROTO;
            } else {
                /* Inline, template or internal: the host half gets a copy if it uses it. */
                it->host = COMPILE__PL_BLANK;
            }
            break;
        }
    }
    if (!*torch_functions)
        return 0;
    /* The host half's names, from what it holds as written; copies add theirs, until no
     * further definition is needed. */
    for (size_t n = 0; n < s->ni; n++) {
        struct compile__item *it = &s->it[n];
        if (it->host == COMPILE__PL_TEXT && it->kind != COMPILE__IT_OPEN &&
            it->kind != COMPILE__IT_CLOSE)
            mark_names(s, it->t0, it->t1);
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t n = 0; n < s->ni; n++) {
            struct compile__item *it = &s->it[n];
            if (it->kind != COMPILE__IT_FUNC || it->host != COMPILE__PL_BLANK ||
                it->side == COMPILE__SIDE_KERNEL || it->side == COMPILE__SIDE_DEVICE)
                continue;
            if (!compile__cut_is_ident(s, it->name, "operator") &&
                !host_names_has(s, item_name(s, it)))
                continue;
            if (it->internal && it->static_local)
                return compile__cut_decline(
                    s,
                    "%.*s has internal linkage and static locals: the two halves "
                    "would have a copy each",
                    (int)s->t[it->name].len, s->src.p + s->t[it->name].off);
            it->host = COMPILE__PL_TEXT;
            mark_names(s, it->t0, it->t1);
            changed = true;
        }
    }
    return 0;
}

/* names += "name\n", once. */
static int add_name(struct compile__cut *s, struct buf *names, struct sv v)
{
    struct sv rest = sv_from(names->data, names->len), line;
    while (sv_next_line(&rest, &line, NULL))
        if (sv_eq(line, v))
            return 0;
    if (buf_add(names, v.p, v.len) || buf_addch(names, '\n'))
        return compile__cut_decline(s, "too many names");
    return 0;
}

/*
 * What the host half names, checked: each launch is of a kernel of the source that the dev
 * half defines with external linkage (not a template, not static or in an unnamed namespace); a
 * kernel is otherwise only taken as a value, never called; no variable that only the dev half
 * holds is named. The names the host half expects the dev half to define go to names.
 */
int compile__cut_check_host_refs(struct compile__cut *s, const bool *dev_only_names,
                                 struct buf *names)
{
    struct sv *dev_only = NULL;
    size_t ndev = 0, alloc = 0;
    for (size_t k = 0; k < s->n; k++)
        if (dev_only_names[k]) {
            ALLOC_GROW(dev_only, ndev + 1, alloc);
            dev_only[ndev++] = compile__cut_tok_sv(s, k);
        }
    int rc = 0;
    for (size_t n = 0; n < s->ni && !rc; n++) {
        const struct compile__item *it = &s->it[n];
        if (it->host != COMPILE__PL_TEXT || it->kind == COMPILE__IT_DIRECTIVE ||
            it->kind == COMPILE__IT_OPEN || it->kind == COMPILE__IT_CLOSE)
            continue;
        for (size_t i = it->t0; i < it->t1 && !rc; i++) {
            if (compile__cut_launch_at(s, i) &&
                (s->t[i - 1].kind != COMPILE__TK_IDENT ||
                 !any_named(s, compile__cut_tok_sv(s, i - 1), is_kernel))) {
                rc = compile__cut_decline(
                    s, "a launch of something other than a kernel of the source");
                break;
            }
            if (s->t[i].kind != COMPILE__TK_IDENT || i == it->name)
                continue;
            struct sv v = compile__cut_tok_sv(s, i);
            for (size_t k = 0; k < ndev && !rc; k++)
                if (sv_eq(dev_only[k], v))
                    rc = compile__cut_decline(
                        s,
                        "host code that uses %.*s, a device variable or one that "
                        "changes",
                        (int)v.len, v.p);
            if (rc || !any_named(s, v, is_kernel))
                continue;
            if (any_named(s, v, is_bad_kernel))
                rc = compile__cut_decline(
                    s,
                    "host code that uses %.*s, a template kernel or one with internal "
                    "linkage",
                    (int)v.len, v.p);
            else if (compile__cut_is_punct(s, i + 1, '(') ||
                     (compile__cut_is_punct(s, i + 1, '<') && !compile__cut_launch_at(s, i + 1)))
                rc = compile__cut_decline(s, "%.*s called or instantiated other than by a launch",
                                          (int)v.len, v.p);
            else
                rc = add_name(s, names, v);
        }
    }
    /* Functions the host half declares and uses, which the dev half defines. */
    for (size_t n = 0; n < s->ni && !rc; n++) {
        const struct compile__item *it = &s->it[n];
        if (it->kind == COMPILE__IT_FUNC && it->host == COMPILE__PL_PROTO &&
            it->side != COMPILE__SIDE_KERNEL && !compile__cut_is_ident(s, it->name, "operator") &&
            host_names_has(s, item_name(s, it)))
            rc = add_name(s, names, item_name(s, it));
    }
    free(dev_only);
    return rc;
}
