/*
 * compile_split_items.c - the source's macros and namespace-scope items for the cut
 * (compile_split.c): which #define uses torch or makes declarations (also through each other),
 * which token names torch, and the items themselves: directives, namespace and extern "C"
 * blocks, declarations, class definitions and function definitions, with the heads read for
 * a function's name, its side (__global__, __device__, host) and its linkage.
 *
 * What the reader cannot place with confidence (an explicit instantiation, a function-try-block,
 * a constructor or member defined outside its class, a variable declared with its class,
 * unbalanced brackets) declines the cut.
 */
#include "eval/compile_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/banned.h"

/* Namespaces and extern "C" blocks nested in one another. */
#define SCOPES_MAX 64

/* ---- macros and torch ---- */

static bool text_has(struct sv text, const char *const *needles, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memmem(text.p, text.len, needles[i], strlen(needles[i])))
            return true;
    return false;
}

static bool torch_text(struct sv text)
{
    static const char *const needles[] = {
        "torch::", "at::", "c10::", "caffe2::", "py::",   "pybind11",
        "TORCH_",  "C10_", "AT_",   "THC",      "Tensor", "CAFFE_"};
    return text_has(text, needles, ARRAY_SIZE(needles));
}

/* A replacement list that makes or changes declarations, which the cut cannot see through. */
static bool structural_text(struct sv text)
{
    static const char *const words[] = {"__global__",
                                        "__device__",
                                        "__host__",
                                        "__forceinline__",
                                        "__noinline__",
                                        "static",
                                        "inline",
                                        "extern",
                                        "template",
                                        "namespace",
                                        "typedef",
                                        "struct",
                                        "class",
                                        "union",
                                        "__constant__",
                                        "__shared__",
                                        "__managed__",
                                        "<<<",
                                        "__launch_bounds__",
                                        "constexpr",
                                        "using",
                                        "#",
                                        "{",
                                        "}",
                                        ";"};
    return text_has(text, words, ARRAY_SIZE(words));
}

long compile__cut_macro_index(const struct compile__cut *s, struct sv name)
{
    for (size_t i = 0; i < s->nmacros; i++)
        if (sv_eq(s->macros[i], name))
            return (long)i;
    return -1;
}

/* The replacement list of the #define at token i, its name in *name; false if not a #define. */
static bool define_at(const struct compile__cut *s, size_t i, struct sv *name, struct sv *body)
{
    if (s->t[i].kind != COMPILE__TK_DIRECTIVE)
        return false;
    struct sv d = sv_ltrim(sv_sub(compile__cut_tok_sv(s, i), 1, s->t[i].len - 1));
    if (!sv_chop_prefix(&d, SV_LIT("define")))
        return false;
    d = sv_ltrim(d);
    size_t k = 0;
    while (k < d.len && compile__cut_ident_char(d.p[k]))
        k++;
    if (!k)
        return false;
    *name = sv_sub(d, 0, k);
    *body = sv_sub(d, k, d.len - k);
    return true;
}

/* The source's macros, and which use torch or make declarations (also through each other). */
void compile__cut_scan_macros(struct compile__cut *s)
{
    struct sv *bodies = NULL, name, body;
    size_t balloc = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (!define_at(s, i, &name, &body))
            continue;
        ALLOC_GROW(s->macros, s->nmacros + 1, s->macros_alloc);
        ALLOC_GROW(bodies, s->nmacros + 1, balloc);
        s->macros[s->nmacros] = name;
        bodies[s->nmacros] = body;
        s->nmacros++;
    }
    s->macro_torch = xcalloc(s->nmacros + 1, sizeof(bool));
    s->macro_structural = xcalloc(s->nmacros + 1, sizeof(bool));
    for (size_t i = 0; i < s->nmacros; i++) {
        s->macro_torch[i] = torch_text(bodies[i]);
        s->macro_structural[i] = structural_text(bodies[i]);
    }
    /* Each round marks at least one more macro, or ends. */
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < s->nmacros; i++)
            for (size_t j = 0; j < s->nmacros; j++) {
                if (i == j || !memmem(bodies[i].p, bodies[i].len, s->macros[j].p, s->macros[j].len))
                    continue;
                if (s->macro_torch[j] && !s->macro_torch[i])
                    changed = s->macro_torch[i] = true;
                if (s->macro_structural[j] && !s->macro_structural[i])
                    changed = s->macro_structural[i] = true;
            }
    }
    free(bodies);
}

bool compile__cut_torch_token(const struct compile__cut *s, size_t i)
{
    static const char *const namespaces[] = {"torch", "at", "c10", "caffe2", "pybind11", "py"};
    static const char *const prefixes[] = {"AT_", "TORCH_", "C10_", "PYBIND11_", "CAFFE_", "THC"};
    if (s->t[i].kind != COMPILE__TK_IDENT)
        return false;
    struct sv v = compile__cut_tok_sv(s, i);
    /* torch::x, and "using namespace torch" (the names then need no torch::). */
    for (size_t k = 0; k < ARRAY_SIZE(namespaces); k++)
        if (sv_eq_cstr(v, namespaces[k]) &&
            (compile__cut_scope_op(s, i + 1) ||
             (i > 0 && compile__cut_is_ident(s, i - 1, "namespace"))))
            return true;
    for (size_t k = 0; k < ARRAY_SIZE(prefixes); k++)
        if (sv_starts_with(v, sv_cstr(prefixes[k])))
            return true;
    long m = compile__cut_macro_index(s, v);
    return m >= 0 && s->macro_torch[m];
}

/* ---- items ---- */

static struct compile__item *add_item(struct compile__cut *s, enum compile__item_kind k, size_t t0,
                                      size_t t1, bool anon)
{
    ALLOC_GROW(s->it, s->ni + 1, s->ialloc);
    struct compile__item *it = &s->it[s->ni++];
    *it = (struct compile__item){.kind = k,
                                 .t0 = t0,
                                 .t1 = t1,
                                 .head = t0,
                                 .body = SIZE_MAX,
                                 .name = SIZE_MAX,
                                 .in_anon = anon};
    return it;
}

/* Identifiers that take a parenthesised argument list before a declared name. */
static bool attribute_word(struct sv v)
{
    static const char *const words[] = {"__launch_bounds__", "__attribute__", "__declspec",
                                        "alignas",           "__align__",     "decltype",
                                        "noexcept",          "throw",         "__cluster_dims__",
                                        "__maxnreg__",       "sizeof",        "alignof"};
    for (size_t i = 0; i < ARRAY_SIZE(words); i++)
        if (sv_eq_cstr(v, words[i]))
            return true;
    return false;
}

bool compile__cut_class_key(const struct compile__cut *s, size_t i)
{
    return compile__cut_is_ident(s, i, "struct") || compile__cut_is_ident(s, i, "class") ||
           compile__cut_is_ident(s, i, "union") || compile__cut_is_ident(s, i, "enum");
}

/* '=' at i that initialises or defines ("= 0", "= delete"), not one of ==, !=, <=, +=... */
bool compile__cut_assign_eq(const struct compile__cut *s, size_t i)
{
    if (!compile__cut_is_punct(s, i, '='))
        return false;
    if (s->t[i].glued && i > 0 && s->t[i - 1].kind == COMPILE__TK_PUNCT &&
        strchr("=!<>+-*/%&|^", s->src.p[s->t[i - 1].off]))
        return false;
    return !(compile__cut_is_punct(s, i + 1, '=') && s->t[i + 1].glued);
}

/*
 * The name a declaration's head [a, b) declares as a function: the identifier before the first
 * top-level '(' that is not an attribute's, or the token "operator". SIZE_MAX when an '=' or
 * nothing comes first (a variable). *qualified: a scope comes before the name (a member defined
 * outside its class).
 */
size_t compile__cut_head_name(const struct compile__cut *s, size_t a, size_t b, bool *qualified)
{
    *qualified = false;
    for (size_t i = a; i < b; i++) {
        if (compile__cut_assign_eq(s, i))
            return SIZE_MAX;
        if (compile__cut_is_punct(s, i, '[') || compile__cut_is_punct(s, i, '{')) {
            size_t e = compile__cut_match(s, i);
            if (e == SIZE_MAX || e >= b)
                return SIZE_MAX;
            i = e;
            continue;
        }
        if (compile__cut_is_ident(s, i, "operator")) {
            *qualified = i >= a + 2 && compile__cut_scope_op(s, i - 2);
            return i;
        }
        if (!compile__cut_is_punct(s, i, '(') || i == a)
            continue;
        size_t k = i - 1;
        if (s->t[k].kind == COMPILE__TK_IDENT && attribute_word(compile__cut_tok_sv(s, k))) {
            size_t e = compile__cut_match(s, i);
            if (e == SIZE_MAX || e >= b)
                return SIZE_MAX;
            i = e;
            continue;
        }
        if (compile__cut_is_punct(s, k, '>')) {
            /* A template-id (an explicit specialisation): the name is before its '<'. */
            size_t depth = 0;
            for (; k > a; k--) {
                if (compile__cut_is_punct(s, k, '>'))
                    depth++;
                else if (compile__cut_is_punct(s, k, '<') && --depth == 0)
                    break;
            }
            if (k <= a)
                return SIZE_MAX;
            k--;
        }
        if (s->t[k].kind != COMPILE__TK_IDENT)
            return SIZE_MAX;
        *qualified = k >= a + 2 && compile__cut_scope_op(s, k - 2);
        return k;
    }
    return SIZE_MAX;
}

/* Specifiers in a head [a, b), outside parentheses: side, linkage, inline. */
void compile__cut_head_flags(const struct compile__cut *s, struct compile__item *it, size_t a,
                             size_t b)
{
    bool global = false, device = false, host = false;
    for (size_t i = a; i < b; i++) {
        if (compile__cut_is_punct(s, i, '(') || compile__cut_is_punct(s, i, '[')) {
            size_t e = compile__cut_match(s, i);
            if (e == SIZE_MAX || e >= b)
                break;
            i = e;
            continue;
        }
        if (s->t[i].kind != COMPILE__TK_IDENT)
            continue;
        struct sv v = compile__cut_tok_sv(s, i);
        if (sv_eq_cstr(v, "__global__"))
            global = true;
        else if (sv_eq_cstr(v, "__device__"))
            device = true;
        else if (sv_eq_cstr(v, "__host__"))
            host = true;
        else if (sv_eq_cstr(v, "static"))
            it->internal = true;
        else if (sv_eq_cstr(v, "inline") || sv_eq_cstr(v, "__inline__") ||
                 sv_eq_cstr(v, "__forceinline__") || sv_eq_cstr(v, "constexpr") ||
                 sv_eq_cstr(v, "consteval"))
            it->inl = true;
    }
    it->internal = it->internal || it->in_anon;
    it->side = global           ? COMPILE__SIDE_KERNEL
               : device && host ? COMPILE__SIDE_HD
               : device         ? COMPILE__SIDE_DEVICE
                                : COMPILE__SIDE_HOST;
}

/*
 * Whether the class key at i starts a definition: [attributes] [name [<args>]] [final]
 * [: bases] '{'.
 */
static bool class_definition(const struct compile__cut *s, size_t i)
{
    for (i++; i < s->n; i++) {
        if (compile__cut_is_punct(s, i, '{'))
            return true;
        if (compile__cut_is_punct(s, i, ':') && !compile__cut_scope_op(s, i))
            return true;
        if (s->t[i].kind == COMPILE__TK_IDENT && attribute_word(compile__cut_tok_sv(s, i)) &&
            compile__cut_is_punct(s, i + 1, '(')) {
            size_t e = compile__cut_match(s, i + 1);
            if (e == SIZE_MAX)
                return false;
            i = e;
        } else if (compile__cut_is_punct(s, i, '[') && compile__cut_is_punct(s, i + 1, '[')) {
            size_t e = compile__cut_match(s, i);
            if (e == SIZE_MAX)
                return false;
            i = e;
        } else if (compile__cut_is_punct(s, i, '<')) {
            size_t e = compile__cut_match_angle(s, i);
            if (e == SIZE_MAX)
                return false;
            i = e;
        } else if (compile__cut_scope_op(s, i)) {
            i++;
        } else if (s->t[i].kind != COMPILE__TK_IDENT) {
            return false;
        }
    }
    return false;
}

/* One declaration or definition at namespace scope from token i; *end after it. 1: declined. */
static int parse_item(struct compile__cut *s, size_t i, bool anon, size_t *end)
{
    size_t t0 = i, head = i;
    bool tmpl = false;
    while (compile__cut_is_ident(s, head, "template")) {
        if (!compile__cut_is_punct(s, head + 1, '<'))
            return compile__cut_decline(s, "an explicit instantiation");
        size_t e = compile__cut_match_angle(s, head + 1);
        if (e == SIZE_MAX)
            return compile__cut_decline(s, "unbalanced template parameters");
        head = e + 1;
        tmpl = true;
    }
    if (head >= s->n)
        return compile__cut_decline(s, "the source ends inside a declaration");
    bool klass = compile__cut_class_key(s, head + compile__cut_is_ident(s, head, "typedef")) &&
                 class_definition(s, head + compile__cut_is_ident(s, head, "typedef"));
    bool eq = false, paren = false;
    for (size_t j = head; j < s->n; j++) {
        if (s->t[j].kind == COMPILE__TK_DIRECTIVE)
            return compile__cut_decline(s, "a directive inside a declaration");
        if (compile__cut_is_punct(s, j, '(') || compile__cut_is_punct(s, j, '[')) {
            paren = paren || compile__cut_is_punct(s, j, '(');
            size_t e = compile__cut_match(s, j);
            if (e == SIZE_MAX)
                return compile__cut_decline(s, "unbalanced brackets");
            j = e;
            continue;
        }
        if (compile__cut_assign_eq(s, j))
            eq = true;
        if (compile__cut_is_punct(s, j, '}') || compile__cut_is_punct(s, j, ')') ||
            compile__cut_is_punct(s, j, ']'))
            return compile__cut_decline(s, "unbalanced brackets");
        if (compile__cut_is_punct(s, j, ';')) {
            struct compile__item *it = add_item(s, COMPILE__IT_DECL, t0, j + 1, anon);
            it->head = head;
            it->tmpl = tmpl;
            *end = j + 1;
            return 0;
        }
        if (!compile__cut_is_punct(s, j, '{'))
            continue;
        size_t close = compile__cut_match(s, j);
        if (close == SIZE_MAX)
            return compile__cut_decline(s, "unbalanced braces");
        if (klass && !eq) {
            /* A class definition: declarators after its body would be variables. */
            if (!compile__cut_is_punct(s, close + 1, ';') &&
                !(compile__cut_is_ident(s, head, "typedef") &&
                  s->t[close + 1].kind == COMPILE__TK_IDENT &&
                  compile__cut_is_punct(s, close + 2, ';')))
                return compile__cut_decline(s, "a variable declared with its class");
            size_t k = compile__cut_is_punct(s, close + 1, ';') ? close + 1 : close + 2;
            struct compile__item *it = add_item(s, COMPILE__IT_CLASS, t0, k + 1, anon);
            it->head = head;
            it->tmpl = tmpl;
            *end = k + 1;
            return 0;
        }
        if (eq || !paren) {
            /* An initializer, or a brace-initialised variable: on to the ';'. */
            j = close;
            continue;
        }
        /* A function body. ") :" before it is a constructor's initializer list, "try" a
         * function-try-block: neither is cut. */
        if (compile__cut_is_ident(s, j - 1, "try"))
            return compile__cut_decline(s, "a function-try-block");
        for (size_t k = head; k < j; k++)
            if (compile__cut_is_punct(s, k, ')') && compile__cut_is_punct(s, k + 1, ':') &&
                !compile__cut_scope_op(s, k + 1))
                return compile__cut_decline(s, "a constructor defined outside its class");
        struct compile__item *it = add_item(s, COMPILE__IT_FUNC, t0, close + 1, anon);
        it->head = head;
        it->body = j;
        it->tmpl = tmpl;
        *end = close + 1;
        return 0;
    }
    return compile__cut_decline(s, "the source ends inside a declaration");
}

/* The items of the whole source at namespace scope, with the nesting of blocks checked. */
int compile__cut_parse_items(struct compile__cut *s)
{
    bool anon[SCOPES_MAX];
    size_t depth = 0, i = 0;
    while (i < s->n) {
        bool in_anon = depth && anon[depth - 1];
        if (s->t[i].kind == COMPILE__TK_DIRECTIVE || compile__cut_is_punct(s, i, ';')) {
            add_item(s,
                     s->t[i].kind == COMPILE__TK_DIRECTIVE ? COMPILE__IT_DIRECTIVE
                                                           : COMPILE__IT_EMPTY,
                     i, i + 1, in_anon);
            i++;
            continue;
        }
        if (compile__cut_is_punct(s, i, '}')) {
            if (!depth)
                return compile__cut_decline(s, "an unbalanced '}'");
            depth--;
            add_item(s, COMPILE__IT_CLOSE, i, i + 1, in_anon);
            i++;
            continue;
        }
        size_t open = SIZE_MAX;
        bool named = false;
        size_t k = i + compile__cut_is_ident(s, i, "inline");
        if (compile__cut_is_ident(s, k, "namespace")) {
            size_t j = k + 1;
            while (j < s->n && (s->t[j].kind == COMPILE__TK_IDENT || compile__cut_scope_op(s, j))) {
                named = true;
                j += compile__cut_scope_op(s, j) ? 2 : 1;
            }
            if (compile__cut_is_punct(s, j, '{'))
                open = j;
        } else if (compile__cut_is_ident(s, i, "extern") && i + 2 < s->n &&
                   s->t[i + 1].kind == COMPILE__TK_STRING && compile__cut_is_punct(s, i + 2, '{')) {
            open = i + 2;
            named = true;
        }
        if (open != SIZE_MAX) {
            if (depth == SCOPES_MAX)
                return compile__cut_decline(s, "blocks nested too deeply");
            anon[depth] = !named || in_anon;
            depth++;
            add_item(s, COMPILE__IT_OPEN, i, open + 1, in_anon);
            i = open + 1;
            continue;
        }
        size_t end = i;
        if (parse_item(s, i, in_anon, &end))
            return 1;
        i = end;
    }
    if (depth)
        return compile__cut_decline(s, "an unclosed namespace or extern \"C\" block");
    return 0;
}
