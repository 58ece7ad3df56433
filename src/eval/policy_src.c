/*
 * policy_src.c - the static policy for kernels/NAME.cu and kernels/NAME_binding.cpp.
 *
 * Two passes. The lexer (policy_lex.c) turns the source into preprocessing tokens as the
 * compiler's preprocessor reads them; a NUL byte, which compilers skip, is refused here first.
 *
 * The checker (this file, and policy_src_directives.c for the directives; its word lists in
 * policy_words.c) then walks the tokens: identifiers
 * against the name rules of policy.c; qualified names (torch::, at::, c10::, pybind11::, std::,
 * through namespace aliases) against allow-lists; member calls against the ATen tensor methods that
 * compute; #include against the header allow-list; #define against macros that would hide names
 * from this check (token pasting, macro names after . -> ::, macros redefining known names); kernel
 * launches for a stream argument; and inline assembly, allowed only inside __device__/__global__
 * function bodies of .cu files.
 *
 * The check is lexical, not a C++ front end: it judges names, never types. What it cannot see
 * (tensor arithmetic operators in a binding, calls through pointers obtained at run time) is
 * caught by the object check (policy_elf.c) and the evaluator's runtime defences; the docs list
 * each gap. Conditional compilation is ignored: code under #if 0 is checked like any other.
 *
 * Invariants: every index into the token array is checked against the region being walked.
 */
#include "eval/policy.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "eval/policy_src_internal.h"
#include "core/banned.h"

/* ---- the checker (policy_src_internal.h) ---- */

void policy__src_vviolation(struct checker *ck, size_t i, const char *rule, const char *fmt,
                            va_list ap)
{
    char msg[640];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    policy_report_addf(ck->rep, ck->file, T(ck, i)->line, rule, "%s", msg);
}

/* ---- rules ---- */

static bool tensor_method_denied(const char *name)
{
    size_t n = strlen(name);
    if (n >= 2 && name[n - 1] == '_' && name[n - 2] != '_')
        return true; /* add_, copy_, fill_, zero_, resize_, set_: in-place operations */
    return in_set(name, policy__tensor_compute, policy__tensor_compute_n);
}

static void report_tensor_method(struct checker *ck, size_t i, const char *name)
{
    if (strcmp(name, "contiguous") == 0)
        violation(ck, i, "torch-compute",
                  "`.contiguous()` copies the tensor (torch computation in a binding). Require "
                  "contiguous inputs with CA_CHECK_INPUT (or CA_CHECK_CONTIGUOUS) and handle only "
                  "those, or read the strides in your kernel.");
    else if (strcmp(name, "to") == 0 || strcmp(name, "cpu") == 0 || strcmp(name, "cuda") == 0 ||
             strcmp(name, "half") == 0 || strcmp(name, "bfloat16") == 0)
        violation(ck, i, "torch-compute",
                  "`.%s()` converts or copies the tensor (torch computation in a binding). Check "
                  "dtype and device with CA_CHECK_INPUT/TORCH_CHECK and convert inside your "
                  "kernel if you must.",
                  name);
    else if (strcmp(name, "view") == 0 || strcmp(name, "reshape") == 0 ||
             strcmp(name, "flatten") == 0 || strcmp(name, "squeeze") == 0 ||
             strcmp(name, "unsqueeze") == 0 || strcmp(name, "expand") == 0 ||
             strcmp(name, "permute") == 0 || strcmp(name, "transpose") == 0)
        violation(ck, i, "torch-compute",
                  "`.%s()` is a torch operation (bindings only check, allocate and launch). "
                  "Allocate the output with its final shape (torch::empty(sizes, x.options())) "
                  "and pass sizes to your launcher.",
                  name);
    else
        violation(ck, i, "torch-compute",
                  "`.%s()` is a torch operation on a tensor; bindings may only check inputs, "
                  "allocate outputs with torch::empty* and launch your kernels. Compute it in "
                  "your kernel.",
                  name);
}

static const struct policy__hit hit_pybind = {
    "python", "reaches Python objects or code through pybind11",
    "Bindings use pybind11 only to define functions: m.def(\"name\", &fn, pybind11::arg(\"x\"), "
    "...)."};

/* A name after . or -> (i is the name). */
static void check_member(struct checker *ck, size_t i, size_t end, bool in_define)
{
    const char *name = txt(ck, i);
    if (is_macro(ck, name)) {
        violation(ck, i, "macro",
                  "macro `%s` used as a member name hides which member is used from the "
                  "policy check: write the member name itself",
                  name);
        return;
    }
    if (!ck->torch)
        return;
    (void)end;
    (void)in_define;
    if (tensor_method_denied(name))
        report_tensor_method(ck, i, name);
    else if (in_set(name, policy__pybind_members_denied, policy__pybind_members_denied_n))
        hit(ck, i, (struct comp){name, strlen(name)}, &hit_pybind);
}

static const struct alias *find_alias(const struct checker *ck, struct comp c)
{
    for (size_t i = 0; i < ck->naliases; i++)
        if (comp_is(c, ck->aliases[i].name))
            return &ck->aliases[i];
    return NULL;
}

/* Expand a leading namespace alias: comps[0..*n) in place (bounded by MAX_CHAIN). */
static void expand_alias(const struct checker *ck, struct comp *comps, size_t *n)
{
    const struct alias *a = find_alias(ck, comps[0]);
    if (!a || a->ntarget == 0 || *n - 1 + a->ntarget > MAX_CHAIN)
        return;
    memmove(comps + a->ntarget, comps + 1, (*n - 1) * sizeof(*comps));
    memcpy(comps, a->target, a->ntarget * sizeof(*comps));
    *n = *n - 1 + a->ntarget;
}

static void torch_chain_violation(struct checker *ck, size_t i, const struct comp *c, size_t n)
{
    char name[256] = "";
    size_t len = 0;
    for (size_t k = 0; k < n && len < sizeof(name) - 1; k++) {
        int w = snprintf(name + len, sizeof(name) - len, "%s%.*s", k ? "::" : "",
                         (int)(c[k].len > 80 ? 80 : c[k].len), c[k].p);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (n >= 2 && comp_in(c[1], policy__torch_fills, policy__torch_fills_n))
        violation(ck, i, "torch-compute",
                  "`%s` allocates and fills memory with a torch kernel. Allocate with "
                  "torch::empty, torch::empty_like or torch::empty_strided and write every "
                  "element in your own kernel.",
                  name);
    else if (!ck->torch)
        violation(ck, i, "torch-compute",
                  "`%s` is torch API in a kernel file: kernels/*.cu are plain CUDA. Keep tensor "
                  "handling in the *_binding.cpp and pass pointers and sizes to an extern \"C\" "
                  "launcher.",
                  name);
    else
        violation(ck, i, "torch-compute",
                  "`%s` is torch/ATen beyond tensor handling. In bindings torch is for checking "
                  "inputs (TORCH_CHECK, CA_CHECK_INPUT, .sizes(), .dtype(), ...), allocating "
                  "outputs (torch::empty, empty_like, empty_strided) and the current stream "
                  "(at::cuda::getCurrentCUDAStream()); compute in your kernel.",
                  name);
}

/* torch::, at::, c10::, caffe2:: chains. True when a violation was reported. */
static bool check_torch_chain(struct checker *ck, size_t i, const struct comp *c, size_t n)
{
    if (n < 2)
        return false;
    bool ok;
    if (!ck->torch && (comp_is(c[0], "torch") || comp_is(c[0], "at") || comp_is(c[0], "c10") ||
                       comp_is(c[0], "caffe2"))) {
        ok = false; /* no torch in kernel files at all */
    } else if (comp_is(c[0], "torch") || comp_is(c[0], "at")) {
        ok = (c[1].len >= 2 && c[1].p[0] == 'k' && c[1].p[1] >= 'A' && c[1].p[1] <= 'Z') ||
             comp_in(c[1], policy__torch_allowed, policy__torch_allowed_n);
        if (ok && comp_is(c[1], "cuda"))
            ok = n >= 3 && comp_is(c[0], "at") &&
                 comp_in(c[2], policy__at_cuda_allowed, policy__at_cuda_allowed_n);
        if (ok && n >= 3 && (comp_is(c[1], "Tensor") || comp_is(c[1], "TensorBase"))) {
            char m[128];
            int w = snprintf(m, sizeof(m), "%.*s", (int)(c[2].len > 100 ? 100 : c[2].len), c[2].p);
            ok = w > 0 && !tensor_method_denied(m);
        }
    } else if (comp_is(c[0], "c10")) {
        ok = (c[1].len >= 2 && c[1].p[0] == 'k' && c[1].p[1] >= 'A' && c[1].p[1] <= 'Z') ||
             comp_in(c[1], policy__c10_allowed, policy__c10_allowed_n);
        if (ok && comp_is(c[1], "cuda"))
            ok = n >= 3 && comp_in(c[2], policy__c10_cuda_allowed, policy__c10_cuda_allowed_n);
    } else if (comp_is(c[0], "caffe2")) {
        ok = comp_is(c[1], "TypeMeta");
    } else {
        return false;
    }
    if (!ok)
        torch_chain_violation(ck, i, c, n);
    return !ok;
}

static const struct policy__hit hit_thread_cxx = {
    "thread", "starts a thread",
    "All work must happen inside the call, on the GPU stream the binding passes: remove it."};
static const struct policy__hit hit_library_ns = {
    "library", "belongs to a library other than cuBLAS and cuDNN",
    "Only cuBLAS (matrix products) and cuDNN (convolutions) may be used: write this part as a "
    "kernel."};

/*
 * A qualified or unqualified name starting at token i: i, then (:: IDENT)*. qualified_before:
 * the name follows a :: that belongs to something other than a name (Foo<T>::x, decltype(e)::x).
 * Returns the index after the chain.
 */
static size_t check_chain(struct checker *ck, size_t i, size_t end, bool qualified_before,
                          bool in_define, bool ns_target)
{
    struct comp comps[MAX_CHAIN];
    size_t idx[MAX_CHAIN];
    size_t n = 0, j = i;
    for (;;) {
        if (n < MAX_CHAIN) {
            comps[n] = (struct comp){txt(ck, j), T(ck, j)->len};
            idx[n] = j;
            n++;
        }
        if (is_punct(ck, j + 1, end, "::") && is_ident(ck, j + 2, end, NULL))
            j += 2;
        else
            break;
    }
    size_t next = j + 1;

    /* 1. name rules on each component: they name the problem most precisely */
    for (size_t k = 0; k < n; k++) {
        const struct policy__hit *h = policy__classify_name(comps[k].p, comps[k].len, ck->ctx);
        if (h) {
            hit(ck, idx[k], comps[k], h);
            return next;
        }
    }
    /* 2. macros standing for namespaces or for names after :: */
    for (size_t k = 0; k < n; k++) {
        if ((k > 0 || n > 1 || qualified_before) && is_macro(ck, comps[k].p)) {
            violation(ck, idx[k], "macro",
                      "macro `%s` used %s hides which name is meant from the policy check: "
                      "write the name itself",
                      comps[k].p, k + 1 < n ? "as a namespace" : "after ::");
            return next;
        }
    }
    /* 3. member-like names reached through a type (Foo<T>::sum, decltype(x)::clone) */
    if (qualified_before && ck->torch && tensor_method_denied(comps[0].p)) {
        report_tensor_method(ck, idx[0], comps[0].p);
        return next;
    }
    size_t nfull = n;
    struct comp full[MAX_CHAIN];
    memcpy(full, comps, n * sizeof(*comps));
    if (!qualified_before)
        expand_alias(ck, full, &nfull);

    /* 4. namespaces with rules; a namespace named by `using namespace` or an alias is judged
     * where its members are used */
    if (!qualified_before && !ns_target && check_torch_chain(ck, i, full, nfull))
        return next;
    if (!qualified_before && !ns_target &&
        (comp_is(full[0], "pybind11") || comp_is(full[0], "py")) && nfull >= 2) {
        bool ok = comp_in(full[1], policy__pybind_allowed, policy__pybind_allowed_n);
        for (size_t k = 2; ok && k < nfull; k++)
            ok = !comp_in(full[k], policy__pybind_members_denied, policy__pybind_members_denied_n);
        if (!ok) {
            hit(ck, idx[n - 1], full[nfull - 1], &hit_pybind);
            return next;
        }
    }
    if (!qualified_before && nfull >= 2 && comp_is(full[0], "std") &&
        (comp_is(full[1], "thread") || comp_is(full[1], "jthread") || comp_is(full[1], "async"))) {
        hit(ck, idx[n > 1 ? 1 : 0], full[1], &hit_thread_cxx);
        return next;
    }
    if (!qualified_before && nfull >= 2 &&
        (comp_is(full[0], "cute") || comp_is(full[0], "thrust"))) {
        hit(ck, i, full[0], &hit_library_ns);
        return next;
    }
    /* 5. unqualified names */
    if (n == 1 && !qualified_before) {
        if (ck->using_std && (comp_is(comps[0], "thread") || comp_is(comps[0], "jthread") ||
                              comp_is(comps[0], "async"))) {
            hit(ck, i, comps[0], &hit_thread_cxx);
            return next;
        }
        if (ck->torch && is_punct(ck, next, end, "(") &&
            comp_in(comps[0], policy__aten_adl, policy__aten_adl_n)) {
            violation(ck, i, "torch-compute",
                      "`%s(...)` on tensors resolves to ATen's %s (argument-dependent lookup): "
                      "torch computation in a binding. Compute it in your kernel.",
                      comps[0].p, comps[0].p);
            return next;
        }
    }
    (void)in_define;
    return next;
}

/* using namespace X; namespace A = X; (i at `using` or `namespace`). Returns the next index, or
 * 0 when the tokens are something else. */
static size_t check_namespace_decl(struct checker *ck, size_t i, size_t end)
{
    if (is_ident(ck, i, end, "using") && is_ident(ck, i + 1, end, "namespace")) {
        size_t j = i + 2;
        if (is_punct(ck, j, end, "::"))
            j++;
        if (!is_ident(ck, j, end, NULL))
            return 0;
        struct comp c[MAX_CHAIN];
        size_t n = 0, k = j;
        for (;;) {
            if (n < MAX_CHAIN)
                c[n++] = (struct comp){txt(ck, k), T(ck, k)->len};
            if (is_punct(ck, k + 1, end, "::") && is_ident(ck, k + 2, end, NULL))
                k += 2;
            else
                break;
        }
        expand_alias(ck, c, &n);
        if (comp_is(c[0], "torch") || comp_is(c[0], "at") || comp_is(c[0], "c10") ||
            comp_is(c[0], "caffe2"))
            violation(ck, i, "torch-compute",
                      "`using namespace %.*s` hides which names are torch's from the policy "
                      "check: write torch::, at:: and c10:: in full",
                      (int)c[0].len, c[0].p);
        else if (comp_is(c[0], "pybind11") || comp_is(c[0], "py"))
            violation(ck, i, "python",
                      "`using namespace %.*s` hides which names are pybind11's from the policy "
                      "check: write pybind11:: in full",
                      (int)c[0].len, c[0].p);
        else if (comp_is(c[0], "std") && n == 1)
            ck->using_std = true;
        return check_chain(ck, j, end, false, false, true);
    }
    if (is_ident(ck, i, end, "namespace") && is_ident(ck, i + 1, end, NULL) &&
        is_punct(ck, i + 2, end, "=")) {
        size_t j = i + 3;
        if (is_punct(ck, j, end, "::"))
            j++;
        if (!is_ident(ck, j, end, NULL))
            return 0;
        if (ck->naliases < MAX_ALIASES && T(ck, i + 1)->len < sizeof(ck->aliases[0].name)) {
            struct alias *a = &ck->aliases[ck->naliases++];
            memcpy(a->name, txt(ck, i + 1), T(ck, i + 1)->len + 1);
            a->ntarget = 0;
            for (size_t k = j;; k += 2) {
                if (a->ntarget < ARRAY_SIZE(a->target))
                    a->target[a->ntarget++] = (struct comp){txt(ck, k), T(ck, k)->len};
                if (!(is_punct(ck, k + 1, end, "::") && is_ident(ck, k + 2, end, NULL)))
                    break;
            }
            /* an alias of an alias */
            struct comp tmp[MAX_CHAIN];
            size_t n = a->ntarget;
            memcpy(tmp, a->target, n * sizeof(*tmp));
            ck->naliases--;
            expand_alias(ck, tmp, &n);
            ck->naliases++;
            a->ntarget = n < ARRAY_SIZE(a->target) ? n : ARRAY_SIZE(a->target);
            memcpy(a->target, tmp, a->ntarget * sizeof(*tmp));
        }
        return check_chain(ck, j, end, false, false, true);
    }
    return 0;
}

/*
 * kernel<<<grid, block, shared, stream>>>: i at <<<. The scan stops at the next <<< or ; so
 * that every token is scanned for at most one launch (a file of nothing but <<< stays linear).
 */
static void check_launch(struct checker *ck, size_t i, size_t end)
{
    int depth = 0;
    size_t args = 1, arg4 = 0, arg4_end = 0, close = 0;
    for (size_t j = i + 1; j < end; j++) {
        const struct policy__tok *t = T(ck, j);
        if (t->kind != POLICY__TK_PUNCT)
            continue;
        const char *p = txt(ck, j);
        if (!strcmp(p, "<<<"))
            return;
        if (!strcmp(p, "(") || !strcmp(p, "[") || !strcmp(p, "{")) {
            depth++;
        } else if (!strcmp(p, ")") || !strcmp(p, "]") || !strcmp(p, "}")) {
            if (--depth < 0)
                return;
        } else if (!strcmp(p, ";")) {
            return;
        } else if (depth == 0 && !strcmp(p, ",")) {
            args++;
            if (args == 4)
                arg4 = j + 1;
            if (args == 5)
                arg4_end = j;
        } else if (depth == 0 && !strcmp(p, ">>>")) {
            close = j;
            break;
        }
    }
    if (!close)
        return;
    if (args < 4) {
        violation(ck, i, "stream",
                  "kernel launch without a stream argument runs on the legacy default stream, "
                  "not the current one. Pass the stream the binding gives you: "
                  "kernel<<<grid, block, shared_bytes, stream>>>(...)");
        return;
    }
    if (!arg4_end)
        arg4_end = close;
    /* the stream argument, ignoring casts around it */
    size_t real = 0, which = 0;
    for (size_t j = arg4; j < arg4_end; j++) {
        const char *p = txt(ck, j);
        if (T(ck, j)->kind == POLICY__TK_PUNCT &&
            (!strcmp(p, "(") || !strcmp(p, ")") || !strcmp(p, "<") || !strcmp(p, ">")))
            continue;
        if (T(ck, j)->kind == POLICY__TK_IDENT &&
            (!strcmp(p, "cudaStream_t") || !strcmp(p, "static_cast") ||
             !strcmp(p, "reinterpret_cast")))
            continue;
        real++;
        which = j;
    }
    if (real == 1) {
        const char *p = txt(ck, which);
        if (!strcmp(p, "0") || !strcmp(p, "0u") || !strcmp(p, "0U") || !strcmp(p, "nullptr") ||
            !strcmp(p, "NULL"))
            violation(ck, i, "stream",
                      "kernel launch on stream `%s`, the legacy default stream, not the current "
                      "one. Pass the stream the binding gives you: "
                      "kernel<<<grid, block, shared_bytes, stream>>>(...)",
                      p);
    }
}

/*
 * A cast to cudaStream_t of a number (or of an integer type's value): i at cudaStream_t, in
 * `static_cast<cudaStream_t>(...)`, `reinterpret_cast<cudaStream_t>(...)` or `(cudaStream_t)...`.
 * Handles 0, 1 and 2 are the legacy and per-thread default streams; a number written as a
 * handle names a stream no other check can see.
 */
static void check_stream_cast(struct checker *ck, size_t i, size_t end)
{
    static const char *const int_words[] = {
        "uintptr_t", "intptr_t", "size_t",   "uint64_t", "int64_t", "uint32_t", "int32_t",
        "long",      "int",      "unsigned", "short",    "char",    "std",
    };
    size_t j;
    if (i >= 2 && is_punct(ck, i - 1, end, "<") &&
        (is_ident(ck, i - 2, end, "static_cast") || is_ident(ck, i - 2, end, "reinterpret_cast")) &&
        is_punct(ck, i + 1, end, ">"))
        j = i + 2;
    else if (i >= 1 && is_punct(ck, i - 1, end, "(") && is_punct(ck, i + 1, end, ")"))
        j = i + 2;
    else
        return;
    while (j < end && (is_punct(ck, j, end, "(") || is_punct(ck, j, end, "{")))
        j++;
    if (j >= end)
        return;
    if (T(ck, j)->kind == POLICY__TK_NUMBER ||
        (T(ck, j)->kind == POLICY__TK_IDENT &&
         in_set(txt(ck, j), int_words, ARRAY_SIZE(int_words))))
        violation(ck, i, "stream",
                  "a stream handle made from a number (`%s`): handles 0, 1 and 2 are the legacy "
                  "and per-thread default streams, not the current one. Use the stream the "
                  "binding passes (at::cuda::getCurrentCUDAStream())",
                  txt(ck, j));
}

static void check_asm(struct checker *ck, size_t i, bool in_define)
{
    if (in_define)
        violation(ck, i, "asm",
                  "inline assembly in a macro: the policy cannot tell where the macro is used. "
                  "Put the asm statement in a __device__ function and call that.");
    else if (!ck->cu)
        violation(ck, i, "asm",
                  "inline assembly in a binding (host code) can make system calls. Remove it; "
                  "inline PTX belongs in __device__ functions of a .cu file.");
    else if (ck->device_depth < 0)
        violation(ck, i, "asm",
                  "inline assembly outside a __device__ or __global__ function body runs on the "
                  "host (a __host__ __device__ function is compiled for the host too). Move it "
                  "into a __device__-only function.");
}

static void clear_pending(struct checker *ck)
{
    ck->pend_dev = ck->pend_host = ck->pend_type = false;
    ck->pend_parens = 0;
}

/* One token of code (or of a #define body) at i; returns the next index. */
size_t policy__src_check_token(struct checker *ck, size_t i, size_t start, size_t end,
                               bool in_define)
{
    const struct policy__tok *t = T(ck, i);
    const char *p = txt(ck, i);
    if (t->kind == POLICY__TK_PUNCT) {
        if (!strcmp(p, "##")) {
            violation(ck, i, "macro",
                      "token pasting (##) can build names the policy check cannot see: write "
                      "names out in full");
        } else if (!strcmp(p, "<<<")) {
            if (ck->cu)
                check_launch(ck, i, end);
        } else if (!strcmp(p, ".") || !strcmp(p, "->") || !strcmp(p, "::")) {
            bool ok_next =
                i + 1 < end && (T(ck, i + 1)->kind == POLICY__TK_IDENT ||
                                is_punct(ck, i + 1, end, "*") || is_punct(ck, i + 1, end, "~"));
            if (!ok_next && !(in_define && i + 1 == end))
                violation(ck, i, "macro",
                          "`%s` not followed by a name: member access split across a macro "
                          "argument hides the member from the policy check; write it out",
                          p);
            else if (in_define && i + 1 == end)
                violation(ck, i, "macro",
                          "macro body ending in `%s` hides the member or name used after it "
                          "from the policy check; write it out where it is used",
                          p);
        } else if (!in_define && !strcmp(p, "{")) {
            ck->depth++;
            if (ck->device_depth < 0 && ck->pend_dev && !ck->pend_host && !ck->pend_type)
                ck->device_depth = ck->depth;
            clear_pending(ck);
        } else if (!in_define && !strcmp(p, "}")) {
            if (ck->device_depth == ck->depth)
                ck->device_depth = -1;
            if (ck->depth > 0)
                ck->depth--;
            clear_pending(ck);
        } else if (!in_define && !strcmp(p, ";")) {
            clear_pending(ck);
        } else if (!in_define && ck->pend_dev && !strcmp(p, "(")) {
            ck->pend_parens++;
        } else if (!in_define && ck->pend_dev && !strcmp(p, ")")) {
            ck->pend_parens--;
        } else if (!in_define && ck->pend_dev && ck->pend_parens <= 0 && !strcmp(p, "=") &&
                   !is_ident(ck, i - 1, end, "operator")) {
            clear_pending(ck); /* `__device__ T v = {...}`: an initializer, not a body */
        }
        return i + 1;
    }
    if (t->kind != POLICY__TK_IDENT)
        return i + 1;

    /* a name after . or -> is a member; `x.template f<T>()` too */
    if (i > start && (is_punct(ck, i - 1, end, ".") || is_punct(ck, i - 1, end, "->"))) {
        if (!strcmp(p, "template") && is_ident(ck, i + 1, end, NULL)) {
            check_member(ck, i + 1, end, in_define);
            return i + 2;
        }
        check_member(ck, i, end, in_define);
        return i + 1;
    }
    if (in_set(p, policy__asm_words, policy__asm_words_n)) {
        check_asm(ck, i, in_define);
        return i + 1;
    }
    if (!strcmp(p, "cudaStream_t"))
        check_stream_cast(ck, i, end);
    if (in_set(p, policy__qualifier_words, policy__qualifier_words_n)) {
        if (in_define || !strcmp(p, "__location__"))
            violation(ck, i, "macro",
                      "`%s` %s: write __host__, __device__ and __global__ directly on each "
                      "function, so the policy knows where code runs",
                      p, in_define ? "in a macro" : "spelled through __location__");
        else if (!strcmp(p, "__host__"))
            ck->pend_host = true;
        else
            ck->pend_dev = true;
        return i + 1;
    }
    if ((!strcmp(p, "__attribute__") || !strcmp(p, "__attribute")) &&
        is_punct(ck, i + 1, end, "(") && is_punct(ck, i + 2, end, "(")) {
        /* every attribute of the list, not only the first */
        int depth = 0;
        for (size_t j = i + 1; j < end; j++) {
            if (is_punct(ck, j, end, "("))
                depth++;
            else if (is_punct(ck, j, end, ")") && --depth == 0)
                break;
            if (T(ck, j)->kind != POLICY__TK_IDENT)
                continue;
            const char *a = txt(ck, j);
            if (!strcmp(a, "host") || !strcmp(a, "device") || !strcmp(a, "global") ||
                !strcmp(a, "__host__") || !strcmp(a, "__device__") || !strcmp(a, "__global__"))
                violation(ck, j, "macro",
                          "__attribute__((%s)) spells a CUDA execution space: write __host__, "
                          "__device__ or __global__ directly",
                          a);
            else if (!strcmp(a, "weakref") || !strcmp(a, "alias") || !strcmp(a, "ifunc") ||
                     !strcmp(a, "symver") || !strcmp(a, "constructor") || !strcmp(a, "destructor"))
                violation(ck, j, "dlopen",
                          "__attribute__((%s)) binds code to a symbol by a string or runs it at "
                          "load time, out of sight of the call site; remove it",
                          a);
        }
        return i + 1;
    }
    /* the brace that follows opens a type, not a function (template parameters and function
     * parameters, after < , or (, are not declarations of their own) */
    if (!in_define && ck->pend_parens <= 0 &&
        (!strcmp(p, "struct") || !strcmp(p, "class") || !strcmp(p, "union") || !strcmp(p, "enum") ||
         !strcmp(p, "namespace")) &&
        !(i > start && (is_punct(ck, i - 1, end, "<") || is_punct(ck, i - 1, end, ",") ||
                        is_punct(ck, i - 1, end, "("))))
        ck->pend_type = true;
    if (!strcmp(p, "using") || !strcmp(p, "namespace")) {
        size_t next = check_namespace_decl(ck, i, end);
        if (next)
            return next;
        return i + 1;
    }
    /* Foo<T>::x and decltype(e)::x qualify x by a type; ::x alone is the global namespace */
    bool qualified_before = i >= start + 2 && is_punct(ck, i - 1, end, "::") &&
                            (is_punct(ck, i - 2, end, ">") || is_punct(ck, i - 2, end, ")") ||
                             is_punct(ck, i - 2, end, ">>>"));
    return check_chain(ck, i, end, qualified_before, in_define, false);
}

static void check_tokens(struct checker *ck)
{
    policy__src_collect_macros(ck);
    size_t n = ck->lx->n;
    for (size_t i = 0; i < n;) {
        const struct policy__tok *t = T(ck, i);
        if (t->flags & POLICY__TF_HASH)
            i = policy__src_check_directive(ck, i);
        else if (t->dir != POLICY__DIR_NONE || t->kind == POLICY__TK_EOL)
            i++;
        else
            i = policy__src_check_token(ck, i, 0, n, false);
    }
    free(ck->macros);
    ck->macros = NULL;
}

/* ---- entry point ---- */

static int check_source(const char *name, const char *code, size_t len, bool inline_cuda,
                        struct policy_report *rep, struct ca_err *err)
{
    const char *base = policy__basename(name);
    size_t blen = strlen(base);
    bool cu = blen > 3 && strcmp(base + blen - 3, ".cu") == 0;
    bool bind = blen > 12 && strcmp(base + blen - 12, "_binding.cpp") == 0;
    if (inline_cuda && !cu)
        BUG("policy_check_inline_cuda() on %s, not a .cu file", name);
    if (!cu && !bind) {
        policy_report_addf(rep, name, 0, "file-type",
                           "`%s` is not an evaluated file type: the evaluator builds only "
                           "kernels/NAME.cu (CUDA kernels with extern \"C\" launchers) and "
                           "kernels/NAME_binding.cpp (bindings); rename it or move it out of "
                           "kernels/",
                           base);
        return 0;
    }
    if (len > POLICY_MAX_SOURCE_BYTES) {
        policy_report_addf(rep, name, 0, "file-size",
                           "%zu bytes is over the limit of %zu bytes for one source file: split "
                           "the kernels over several files",
                           len, (size_t)POLICY_MAX_SOURCE_BYTES);
        return err_setf(err, CA_ETOOBIG, "%s: %zu bytes, over the limit of %zu", name, len,
                        (size_t)POLICY_MAX_SOURCE_BYTES);
    }
    const char *nul = memchr(code, '\0', len);
    if (nul) {
        unsigned line = 1;
        for (const char *p = code; p < nul; p++)
            line += *p == '\n';
        policy_report_addf(rep, name, line, "lexer",
                           "NUL byte in the source: compilers skip it, so the policy cannot read "
                           "the file as they do; remove it");
        return 0;
    }
    struct policy__tokens lx;
    policy__lex(name, code, len, rep, &lx);
    struct checker ck = {
        .lx = &lx,
        .rep = rep,
        .file = name,
        .cu = cu,
        .torch = !cu || inline_cuda,
        /* A load_inline source meets pybind11 the way bindings do. */
        .ctx = cu && !inline_cuda ? POLICY__SRC_CU : POLICY__SRC_BIND,
        .device_depth = -1,
    };
    check_tokens(&ck);
    policy__tokens_release(&lx);
    return 0;
}

/* Name rules only advise here (policy.c's decision table); the syntax rules decide. */
static int check_source_as_names(const char *name, const char *code, size_t len, bool inline_cuda,
                                 struct policy_report *rep, struct ca_err *err)
{
    enum policy_basis saved = rep->basis;
    rep->basis = POLICY_BASIS_SOURCE_NAME;
    int rc = check_source(name, code, len, inline_cuda, rep, err);
    rep->basis = saved;
    return rc;
}

int policy_check_source(const char *name, const char *code, size_t len, struct policy_report *rep,
                        struct ca_err *err)
{
    return check_source_as_names(name, code, len, false, rep, err);
}

int policy_check_inline_cuda(const char *name, const char *code, size_t len,
                             struct policy_report *rep, struct ca_err *err)
{
    return check_source_as_names(name, code, len, true, rep, err);
}
