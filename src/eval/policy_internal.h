/*
 * policy_internal.h - shared between the files of the static policy (policy.c: report and name
 * rules; policy_src.c: C++/CUDA sources; policy_py.c: model_new.py; policy_elf.c: built
 * objects). Nothing outside src/eval/policy*.c includes it.
 *
 * A C-level name (an identifier in a source, or an undefined symbol of a built object) is judged
 * by policy__classify_name(), so that a source and the object built from it meet the same rules
 * with the same words. The context says where the name was seen: some entries only make sense in
 * one place (torch's stream helpers are C++ names that never appear unmangled in a symbol table;
 * the Python C API is refused outright in sources but needed by pybind11 in objects).
 */
#ifndef CA_EVAL_POLICY_INTERNAL_H
#define CA_EVAL_POLICY_INTERNAL_H

#include <stddef.h>

#include "eval/policy.h"

enum policy__ctx {
    POLICY__SRC_CU = 1 << 0,   /* identifier in kernels/NAME.cu */
    POLICY__SRC_BIND = 1 << 1, /* identifier in kernels/NAME_binding.cpp */
    POLICY__ELF_DYN = 1 << 2,  /* undefined symbol of the linked shared object */
    POLICY__ELF_REL = 1 << 3,  /* undefined symbol of one of the agent's object files */
};
#define POLICY__SRC (POLICY__SRC_CU | POLICY__SRC_BIND)
#define POLICY__ELF (POLICY__ELF_DYN | POLICY__ELF_REL)
#define POLICY__ALL (POLICY__SRC | POLICY__ELF)

/* Why a name is refused: the rule id, what the name does, and what to do instead. */
struct policy__hit {
    const char *rule;
    const char *what;    /* completes "`NAME` ...", e.g. "starts a process" */
    const char *instead; /* a sentence: what legitimate code does */
};

/*
 * The rule a C-level name breaks in context ctx (one POLICY__* bit), or NULL when it is allowed
 * as far as name rules go. name[0..len) need not be NUL-terminated.
 */
const struct policy__hit *policy__classify_name(const char *name, size_t len, unsigned ctx);

/* Report hit for name[0..len) as "`NAME` WHAT. INSTEAD" */
void policy__add_hit(struct policy_report *rep, const char *file, unsigned line, const char *name,
                     size_t len, const struct policy__hit *hit);

/* name[0..len) equals the NUL-terminated s / starts with it. */
int policy__eq(const char *name, size_t len, const char *s);
int policy__starts(const char *name, size_t len, const char *prefix);

/* The last path component of path (borrowed). */
const char *policy__basename(const char *path);

#endif
