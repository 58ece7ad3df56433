/*
 * policy_internal.h - shared between the files of the static policy (policy.c: report and name
 * rules; policy_src.c: C++/CUDA sources, lexed by policy_lex.c, with the words of policy_words.c;
 * policy_py.c: model_new.py; policy_elf.c: built objects). Nothing outside src/eval/policy*.c
 * includes it.
 *
 * A C-level name (an identifier in a source, or an undefined symbol of a built object) is judged
 * by policy__classify_name(), so that a source and the object built from it meet the same rules
 * with the same words. The context says where the name was seen: some entries only make sense in
 * one place (torch's stream helpers are C++ names that never appear unmangled in a symbol table;
 * the Python C API is refused outright in sources but needed by pybind11 in objects).
 */
#ifndef CA_EVAL_POLICY_INTERNAL_H
#define CA_EVAL_POLICY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

struct embedded_file;

/*
 * policy_check_model_new() with the policy's sources taken from those of files[0..n) under
 * harness/policy/ instead of the binary's own (the loader stays the embedded one): how the tests
 * run an altered or broken policy down the evaluator's own path.
 */
int policy__check_model_new_with(const struct embedded_file *files, size_t n, const char *path,
                                 struct policy_report *rep, struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- the source policy's tokens (policy_lex.c) ---- */

enum policy__tok_kind {
    POLICY__TK_IDENT,
    POLICY__TK_NUMBER,
    POLICY__TK_STRING,
    POLICY__TK_PUNCT,
    POLICY__TK_HEADER,
    POLICY__TK_EOL
};

enum policy__dir_kind {
    POLICY__DIR_NONE = 0,
    POLICY__DIR_INCLUDE,
    POLICY__DIR_DEFINE,
    POLICY__DIR_UNDEF,
    POLICY__DIR_OTHER
};

enum policy__tok_flags {
    POLICY__TF_SPACE = 1 << 0,    /* whitespace or a comment precedes it */
    POLICY__TF_HASH = 1 << 1,     /* the # that starts a directive line */
    POLICY__TF_ANGLE = 1 << 2,    /* header name in <...> */
    POLICY__TF_COMPUTED = 1 << 3, /* #include operand that is not a header name */
};

struct policy__tok {
    uint8_t kind;
    uint8_t dir; /* enum policy__dir_kind of the directive line holding it */
    uint8_t flags;
    uint32_t line;
    uint32_t text; /* offset of the NUL-terminated text in the arena */
    uint32_t len;
};

/* A lexed source: every token, their text in one arena. */
struct policy__tokens {
    char *arena;
    struct policy__tok *toks;
    size_t n;
};

/* Lex code[0..len) of file; what the lexer cannot read as the compiler would is reported into
 * rep as a "lexer" violation, and the tokens stop there. */
void policy__lex(const char *file, const char *code, size_t len, struct policy_report *rep,
                 struct policy__tokens *out);
void policy__tokens_release(struct policy__tokens *t);

/* ---- the source policy's vocabularies (policy_words.c), each with its length ---- */

extern const char *const policy__tensor_compute[];
extern const size_t policy__tensor_compute_n;
extern const char *const policy__aten_adl[];
extern const size_t policy__aten_adl_n;
extern const char *const policy__torch_allowed[];
extern const size_t policy__torch_allowed_n;
extern const char *const policy__at_cuda_allowed[];
extern const size_t policy__at_cuda_allowed_n;
extern const char *const policy__c10_allowed[];
extern const size_t policy__c10_allowed_n;
extern const char *const policy__c10_cuda_allowed[];
extern const size_t policy__c10_cuda_allowed_n;
extern const char *const policy__torch_fills[];
extern const size_t policy__torch_fills_n;
extern const char *const policy__pybind_allowed[];
extern const size_t policy__pybind_allowed_n;
extern const char *const policy__pybind_members_denied[];
extern const size_t policy__pybind_members_denied_n;
extern const char *const policy__protected_names[];
extern const size_t policy__protected_names_n;
extern const char *const policy__asm_words[];
extern const size_t policy__asm_words_n;
extern const char *const policy__qualifier_words[];
extern const size_t policy__qualifier_words_n;
extern const char *const policy__std_headers[];
extern const size_t policy__std_headers_n;
extern const char *const policy__cuda_headers[];
extern const size_t policy__cuda_headers_n;
extern const char *const policy__cuda_header_dirs[];
extern const size_t policy__cuda_header_dirs_n;
extern const char *const policy__binding_headers[];
extern const size_t policy__binding_headers_n;

#endif
