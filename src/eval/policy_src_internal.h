/*
 * policy_src_internal.h - the checker of the source policy, shared by its two files:
 * policy_src.c (the token walk: names, qualified names, member calls, launches, inline
 * assembly; the entry points) and policy_src_directives.c (#include, #define/#undef, #pragma
 * and the other directives). Nothing else includes it.
 */
#ifndef CA_EVAL_POLICY_SRC_INTERNAL_H
#define CA_EVAL_POLICY_SRC_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "eval/policy_internal.h"

#define MAX_CHAIN 12
#define MAX_ALIASES 32

struct comp {
    const char *p;
    size_t len;
};

struct alias {
    char name[64];
    struct comp target[4]; /* points into the arena */
    size_t ntarget;
};

struct checker {
    const struct policy__tokens *lx;
    struct policy_report *rep;
    const char *file;
    bool cu;    /* compiled by nvcc: device code, launches, PTX in device bodies */
    bool torch; /* torch allowed as in bindings (a binding, or a load_inline cuda source) */
    unsigned ctx;
    int depth;
    int device_depth; /* brace depth of the device function body we are in, or -1 */
    bool pend_dev, pend_host;
    int pend_parens; /* parentheses open since the pending declaration started */
    bool pend_type;  /* the declaration so far has struct/class/union/enum: its brace is a type */
    bool using_std;
    struct alias aliases[MAX_ALIASES];
    size_t naliases;
    const char **macros; /* names #defined in this file, sorted */
    size_t nmacros;
};

static inline const struct policy__tok *T(const struct checker *ck, size_t i)
{
    return &ck->lx->toks[i];
}

static inline const char *txt(const struct checker *ck, size_t i)
{
    return ck->lx->arena + ck->lx->toks[i].text;
}

static inline bool is_punct(const struct checker *ck, size_t i, size_t end, const char *p)
{
    return i < end && T(ck, i)->kind == POLICY__TK_PUNCT && strcmp(txt(ck, i), p) == 0;
}

static inline bool is_ident(const struct checker *ck, size_t i, size_t end, const char *p)
{
    return i < end && T(ck, i)->kind == POLICY__TK_IDENT && (!p || strcmp(txt(ck, i), p) == 0);
}

static inline bool comp_is(struct comp c, const char *s)
{
    return policy__eq(c.p, c.len, s);
}

static inline bool in_set(const char *s, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, set[i]) == 0)
            return true;
    return false;
}

static inline bool comp_in(struct comp c, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (comp_is(c, set[i]))
            return true;
    return false;
}

static inline int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static inline bool is_macro(const struct checker *ck, const char *name)
{
    return ck->nmacros &&
           bsearch(&name, ck->macros, ck->nmacros, sizeof(*ck->macros), cmp_str) != NULL;
}

/* A violation at token i (its line), the message formatted (policy_src.c). */
void policy__src_vviolation(struct checker *ck, size_t i, const char *rule, const char *fmt,
                            va_list ap);

static inline void violation(struct checker *ck, size_t i, const char *rule, const char *fmt, ...)
    CA_PRINTF(4, 5);

static inline void violation(struct checker *ck, size_t i, const char *rule, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    policy__src_vviolation(ck, i, rule, fmt, ap);
    va_end(ap);
}

static inline void hit(struct checker *ck, size_t i, struct comp name, const struct policy__hit *h)
{
    policy__add_hit(ck->rep, ck->file, T(ck, i)->line, name.p, name.len, h);
}

/* One token (or a construct starting there) of the code between start and end; returns the
 * index after it (policy_src.c). in_define: inside a #define's body. */
size_t policy__src_check_token(struct checker *ck, size_t i, size_t start, size_t end,
                               bool in_define);

/* The directive whose # is at token hash; returns the index after its line
 * (policy_src_directives.c). */
size_t policy__src_check_directive(struct checker *ck, size_t hash);

/* The names #defined in the file, sorted, into ck->macros (policy_src_directives.c). */
void policy__src_collect_macros(struct checker *ck);

#endif
