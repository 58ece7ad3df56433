/*
 * compile_split.c - a load_inline cuda source cut into two translation units: the host
 * functions that use torch, for g++ with a precompiled torch header, and everything else, for
 * nvcc without torch (docs/internals/compile.md, "Split cu-torch units").
 *
 * Why: nvcc parses every header three times (cudafe++, cicc, the host compiler) and a gcc
 * precompiled header serves none of them, so a cu-torch unit costs ten times a plain .cu. In a
 * load_inline source torch is used by host functions only (argument checks, allocation, the
 * launch); kernels and device helpers are plain CUDA. Cut there, nvcc compiles a plain .cu and
 * g++ compiles the torch functions against the precompiled header, each in a fraction of the
 * time, and at once.
 *
 * The cut is lexical: tokens (comments, strings, raw strings and directives recognised), then
 * the namespace-scope items (directives, namespace and extern "C" blocks, declarations, class
 * definitions, function definitions), then for each item what each half gets:
 *
 *   item                                     dev (nvcc)       host (g++)
 *   #include of torch, ATen, c10, pybind11   blank            as written
 *   other directives, types, prototypes,     as written       as written
 *     constexpr and const variables
 *   host function that uses torch            blank            as written, launches lowered
 *   __global__ kernel                        as written       its declaration
 *   __device__ function                      as written       its declaration, "= delete"
 *   other function                           as written       its declaration; its definition
 *                                                             when it is inline, a template or
 *                                                             internal and the host half uses it
 *   mutable or device variable               as written       blank
 *
 * A launch `k<<<g, b, s, st>>>(args)` in the host half becomes what cudafe++ makes of it,
 * `(__cudaPushCallConfiguration(g, b, s, st)) ? (void)0 : k(args)`: a call of the kernel's host
 * stub, which the dev half defines and registers. A deleted declaration keeps overload
 * resolution what it was and makes a call of device code from host code an error, as nvcc does.
 * Both halves keep the source's line numbers and name it with #line, so messages, __FILE__ and
 * __LINE__ are the same.
 *
 * Invariant: the cut is an accelerator, never a change of meaning. What it cannot show to be the
 * same program (device code or a type that uses torch, a template or internal kernel launched
 * from host code, a mutable variable both halves would see, a source that tests __CUDACC__, a
 * macro that makes declarations, anything the tokenizer does not recognise) is not split:
 * compile__split_source returns 1 and says why. A split whose halves do not compile, or whose
 * merged object leaves a name undefined that the dev half should define
 * (compile__split_check_object), is built again as one nvcc unit by the caller.
 *
 * Thread-safe: no global state.
 */
#include "eval/compile_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/limits.h"
#include "core/util.h"
#include "core/banned.h"

/* Tokens of one source: a 4 MiB source has fewer. */
#define TOKENS_MAX ((size_t)1 << 22)
/* Either half: the source plus the lowered launches and a few lines. */
#define HALF_MAX (2 * CA_LIMIT_WRITE_BYTES + 4096)
#define NAMES_MAX ((size_t)1 << 20)
/* Largest object file read by the symbol check. */
#define OBJECT_MAX_BYTES ((off_t)1 << 30)
/* Namespaces and extern "C" blocks nested in one another. */
#define SCOPES_MAX 64

enum tok_kind { TK_IDENT, TK_NUMBER, TK_STRING, TK_PUNCT, TK_DIRECTIVE };

struct tok {
    enum tok_kind kind;
    size_t off, len;
    bool glued; /* starts where the previous token ended: no space or comment between */
};

enum item_kind { IT_DIRECTIVE, IT_OPEN, IT_CLOSE, IT_EMPTY, IT_DECL, IT_CLASS, IT_FUNC };
enum item_side { SIDE_HOST, SIDE_KERNEL, SIDE_DEVICE, SIDE_HD };
/* What a half gets of an item. */
enum place { PL_TEXT, PL_BLANK, PL_PROTO, PL_DELETED };

struct item {
    enum item_kind kind;
    size_t t0, t1; /* tokens [t0, t1) */
    size_t head;   /* the first token after the template<...> prefixes */
    size_t body;   /* IT_FUNC: the body's '{' */
    size_t name;   /* IT_FUNC and function declarations: the name's token; SIZE_MAX: none */
    enum item_side side;
    bool in_anon;  /* in an unnamed namespace */
    bool torch;    /* names torch: its namespaces, macros, or a macro of the source using them */
    bool tmpl;     /* a template */
    bool internal; /* static, or in an unnamed namespace */
    bool inl;      /* inline, __forceinline__ or constexpr */
    bool typeish;  /* IT_DECL: typedef, using, static_assert, alias, forward declaration */
    bool proto;    /* IT_DECL: declares a function */
    bool dev_only_var; /* IT_DECL: a device variable, or a host one that can change */
    bool static_local; /* IT_FUNC, IT_CLASS: a static or thread_local inside */
    bool launches;     /* a <<< >>> launch inside */
    enum place dev, host;
};

struct split {
    struct sv src;
    struct tok *t;
    size_t n, talloc;
    struct item *it;
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

static int decline(struct split *s, const char *fmt, ...) CA_PRINTF(2, 3);
static int decline(struct split *s, const char *fmt, ...)
{
    if (!s->why[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->why, s->why_len, fmt, ap);
        va_end(ap);
    }
    return 1;
}

/* ---- tokens ---- */

static bool ident_start(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool ident_char(char c)
{
    return ident_start(c) || (c >= '0' && c <= '9');
}

static void push_tok(struct split *s, enum tok_kind k, size_t off, size_t len, size_t prev_end)
{
    ALLOC_GROW(s->t, s->n + 1, s->talloc);
    s->t[s->n++] = (struct tok){.kind = k, .off = off, .len = len, .glued = prev_end == off};
}

/* The end of the quoted literal whose quote is at i; 0 when it is not closed on its line. */
static size_t quoted_end(const char *p, size_t n, size_t i)
{
    char q = p[i];
    for (i++; i < n; i++) {
        if (p[i] == '\\' && i + 1 < n)
            i++;
        else if (p[i] == q)
            return i + 1;
        else if (p[i] == '\n')
            return 0;
    }
    return 0;
}

/* The end of the raw string R"delim( ... )delim" whose quote is at i; 0 when malformed. */
static size_t raw_end(const char *p, size_t n, size_t i)
{
    size_t d0 = i + 1, d = d0;
    while (d < n && p[d] != '(' && d - d0 <= 16)
        d++;
    if (d >= n || p[d] != '(')
        return 0;
    size_t dlen = d - d0;
    for (size_t k = d + 1; k + dlen + 1 < n; k++)
        if (p[k] == ')' && memcmp(p + k + 1, p + d0, dlen) == 0 && p[k + 1 + dlen] == '"')
            return k + dlen + 2;
    return 0;
}

/* A directive runs to the end of its logical line: splices, comments and strings inside. */
static size_t directive_end(const char *p, size_t n, size_t i)
{
    while (i < n) {
        if (p[i] == '\\' && i + 1 < n && p[i + 1] == '\n') {
            i += 2;
        } else if (p[i] == '\\' && i + 2 < n && p[i + 1] == '\r' && p[i + 2] == '\n') {
            i += 3;
        } else if (p[i] == '/' && i + 1 < n && p[i + 1] == '*') {
            const char *e = memmem(p + i + 2, n - i - 2, "*/", 2);
            i = e ? (size_t)(e - p) + 2 : n;
        } else if (p[i] == '/' && i + 1 < n && p[i + 1] == '/') {
            while (i < n && p[i] != '\n')
                i++;
        } else if (p[i] == '"') {
            size_t e = quoted_end(p, n, i);
            i = e ? e : i + 1;
        } else if (p[i] == '\n') {
            break;
        } else {
            i++;
        }
    }
    return i;
}

static bool string_prefix(const char *p, size_t len)
{
    static const char *const prefixes[] = {"R", "u8", "u", "U", "L", "u8R", "uR", "UR", "LR"};
    for (size_t i = 0; i < ARRAY_SIZE(prefixes); i++)
        if (strlen(prefixes[i]) == len && memcmp(prefixes[i], p, len) == 0)
            return true;
    return false;
}

static int lex(struct split *s)
{
    const char *p = s->src.p;
    size_t n = s->src.len, i = 0, prev_end = SIZE_MAX;
    bool line_start = true;
    while (i < n) {
        char c = p[i];
        if (c == '\n') {
            line_start = true;
            i++;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            i++;
            continue;
        }
        if (c == '\\' && i + 1 < n && p[i + 1] == '\n') {
            i += 2;
            continue;
        }
        if (c == '/' && i + 1 < n && p[i + 1] == '/') {
            /* A line comment ends at a newline that is not spliced. */
            for (i += 2; i < n && !(p[i] == '\n' && p[i - 1] != '\\'); i++)
                ;
            continue;
        }
        if (c == '/' && i + 1 < n && p[i + 1] == '*') {
            const char *e = memmem(p + i + 2, n - i - 2, "*/", 2);
            if (!e)
                return decline(s, "an unterminated comment");
            i = (size_t)(e - p) + 2;
            continue;
        }
        if (s->n >= TOKENS_MAX)
            return decline(s, "over %zu tokens", TOKENS_MAX);
        size_t start = i;
        enum tok_kind k = TK_PUNCT;
        if (c == '#' && line_start) {
            i = directive_end(p, n, i);
            k = TK_DIRECTIVE;
        } else if (ident_start(c)) {
            while (i < n && ident_char(p[i]))
                i++;
            k = TK_IDENT;
            if (i < n && (p[i] == '"' || p[i] == '\'') && string_prefix(p + start, i - start)) {
                size_t e = p[i - 1] == 'R' && p[i] == '"' ? raw_end(p, n, i) : quoted_end(p, n, i);
                if (!e)
                    return decline(s, "an unterminated string");
                i = e;
                k = TK_STRING;
            }
        } else if ((c >= '0' && c <= '9') ||
                   (c == '.' && i + 1 < n && p[i + 1] >= '0' && p[i + 1] <= '9')) {
            /* A pp-number: digits, letters, dots, digit separators, signed exponents. */
            for (i++; i < n;) {
                if (ident_char(p[i]) || p[i] == '.')
                    i++;
                else if (p[i] == '\'' && i + 1 < n && ident_char(p[i + 1]))
                    i += 2;
                else if ((p[i] == '+' || p[i] == '-') && strchr("eEpP", p[i - 1]))
                    i++;
                else
                    break;
            }
            k = TK_NUMBER;
        } else if (c == '"' || c == '\'') {
            size_t e = quoted_end(p, n, i);
            if (!e)
                return decline(s, "an unterminated string or character literal");
            i = e;
            k = TK_STRING;
        } else {
            i++;
        }
        push_tok(s, k, start, i - start, prev_end);
        prev_end = i;
        line_start = false;
    }
    return 0;
}

static struct sv tok_sv(const struct split *s, size_t i)
{
    return sv_from(s->src.p + s->t[i].off, s->t[i].len);
}

static size_t tok_end(const struct split *s, size_t i)
{
    return s->t[i].off + s->t[i].len;
}

static bool is_punct(const struct split *s, size_t i, char c)
{
    return i < s->n && s->t[i].kind == TK_PUNCT && s->src.p[s->t[i].off] == c;
}

static bool is_ident(const struct split *s, size_t i, const char *name)
{
    return i < s->n && s->t[i].kind == TK_IDENT && sv_eq_cstr(tok_sv(s, i), name);
}

/* Three glued c from i: "<<<" or ">>>". */
static bool triple(const struct split *s, size_t i, char c)
{
    return is_punct(s, i, c) && is_punct(s, i + 1, c) && is_punct(s, i + 2, c) &&
           s->t[i + 1].glued && s->t[i + 2].glued;
}

/* "::" from i. */
static bool scope_op(const struct split *s, size_t i)
{
    return is_punct(s, i, ':') && is_punct(s, i + 1, ':') && s->t[i + 1].glued;
}

/* A launch's "<<<" at i (not "operator<< <"). */
static bool launch_at(const struct split *s, size_t i)
{
    return triple(s, i, '<') && !(i > 0 && is_ident(s, i - 1, "operator"));
}

/* The bracket closing the '(', '[' or '{' at i, the nesting checked; SIZE_MAX: none. */
static size_t match(const struct split *s, size_t i)
{
    char stack[256];
    size_t depth = 0;
    for (size_t j = i; j < s->n; j++) {
        if (s->t[j].kind != TK_PUNCT)
            continue;
        char c = s->src.p[s->t[j].off];
        if (c == '(' || c == '[' || c == '{') {
            if (depth == sizeof(stack))
                return SIZE_MAX;
            stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (c == ')' || c == ']' || c == '}') {
            if (!depth || stack[depth - 1] != c)
                return SIZE_MAX;
            if (--depth == 0)
                return j;
        }
    }
    return SIZE_MAX;
}

/* The '>' closing the '<' at i of a template parameter or argument list; SIZE_MAX: none. */
static size_t match_angle(const struct split *s, size_t i)
{
    size_t depth = 0;
    for (size_t j = i; j < s->n; j++) {
        if (is_punct(s, j, '(') || is_punct(s, j, '[') || is_punct(s, j, '{')) {
            size_t e = match(s, j);
            if (e == SIZE_MAX)
                return SIZE_MAX;
            j = e;
        } else if (is_punct(s, j, '<')) {
            depth++;
        } else if (is_punct(s, j, '>')) {
            if (depth == 0 || --depth == 0)
                return depth == 0 ? j : SIZE_MAX;
        } else if (is_punct(s, j, ';') || is_punct(s, j, '}') || is_punct(s, j, ')')) {
            return SIZE_MAX;
        }
    }
    return SIZE_MAX;
}

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

static long macro_index(const struct split *s, struct sv name)
{
    for (size_t i = 0; i < s->nmacros; i++)
        if (sv_eq(s->macros[i], name))
            return (long)i;
    return -1;
}

/* The replacement list of the #define at token i, its name in *name; false if not a #define. */
static bool define_at(const struct split *s, size_t i, struct sv *name, struct sv *body)
{
    if (s->t[i].kind != TK_DIRECTIVE)
        return false;
    struct sv d = sv_ltrim(sv_sub(tok_sv(s, i), 1, s->t[i].len - 1));
    if (!sv_chop_prefix(&d, SV_LIT("define")))
        return false;
    d = sv_ltrim(d);
    size_t k = 0;
    while (k < d.len && ident_char(d.p[k]))
        k++;
    if (!k)
        return false;
    *name = sv_sub(d, 0, k);
    *body = sv_sub(d, k, d.len - k);
    return true;
}

/* The source's macros, and which use torch or make declarations (also through each other). */
static void scan_macros(struct split *s)
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

static bool torch_token(const struct split *s, size_t i)
{
    static const char *const namespaces[] = {"torch", "at", "c10", "caffe2", "pybind11", "py"};
    static const char *const prefixes[] = {"AT_", "TORCH_", "C10_", "PYBIND11_", "CAFFE_", "THC"};
    if (s->t[i].kind != TK_IDENT)
        return false;
    struct sv v = tok_sv(s, i);
    /* torch::x, and "using namespace torch" (the names then need no torch::). */
    for (size_t k = 0; k < ARRAY_SIZE(namespaces); k++)
        if (sv_eq_cstr(v, namespaces[k]) &&
            (scope_op(s, i + 1) || (i > 0 && is_ident(s, i - 1, "namespace"))))
            return true;
    for (size_t k = 0; k < ARRAY_SIZE(prefixes); k++)
        if (sv_starts_with(v, sv_cstr(prefixes[k])))
            return true;
    long m = macro_index(s, v);
    return m >= 0 && s->macro_torch[m];
}

/* ---- items ---- */

static struct item *add_item(struct split *s, enum item_kind k, size_t t0, size_t t1, bool anon)
{
    ALLOC_GROW(s->it, s->ni + 1, s->ialloc);
    struct item *it = &s->it[s->ni++];
    *it = (struct item){.kind = k,
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

static bool class_key(const struct split *s, size_t i)
{
    return is_ident(s, i, "struct") || is_ident(s, i, "class") || is_ident(s, i, "union") ||
           is_ident(s, i, "enum");
}

/* '=' at i that initialises or defines ("= 0", "= delete"), not one of ==, !=, <=, +=... */
static bool assign_eq(const struct split *s, size_t i)
{
    if (!is_punct(s, i, '='))
        return false;
    if (s->t[i].glued && i > 0 && s->t[i - 1].kind == TK_PUNCT &&
        strchr("=!<>+-*/%&|^", s->src.p[s->t[i - 1].off]))
        return false;
    return !(is_punct(s, i + 1, '=') && s->t[i + 1].glued);
}

/*
 * The name a declaration's head [a, b) declares as a function: the identifier before the first
 * top-level '(' that is not an attribute's, or the token "operator". SIZE_MAX when an '=' or
 * nothing comes first (a variable). *qualified: a scope comes before the name (a member defined
 * outside its class).
 */
static size_t head_name(const struct split *s, size_t a, size_t b, bool *qualified)
{
    *qualified = false;
    for (size_t i = a; i < b; i++) {
        if (assign_eq(s, i))
            return SIZE_MAX;
        if (is_punct(s, i, '[') || is_punct(s, i, '{')) {
            size_t e = match(s, i);
            if (e == SIZE_MAX || e >= b)
                return SIZE_MAX;
            i = e;
            continue;
        }
        if (is_ident(s, i, "operator")) {
            *qualified = i >= a + 2 && scope_op(s, i - 2);
            return i;
        }
        if (!is_punct(s, i, '(') || i == a)
            continue;
        size_t k = i - 1;
        if (s->t[k].kind == TK_IDENT && attribute_word(tok_sv(s, k))) {
            size_t e = match(s, i);
            if (e == SIZE_MAX || e >= b)
                return SIZE_MAX;
            i = e;
            continue;
        }
        if (is_punct(s, k, '>')) {
            /* A template-id (an explicit specialisation): the name is before its '<'. */
            size_t depth = 0;
            for (; k > a; k--) {
                if (is_punct(s, k, '>'))
                    depth++;
                else if (is_punct(s, k, '<') && --depth == 0)
                    break;
            }
            if (k <= a)
                return SIZE_MAX;
            k--;
        }
        if (s->t[k].kind != TK_IDENT)
            return SIZE_MAX;
        *qualified = k >= a + 2 && scope_op(s, k - 2);
        return k;
    }
    return SIZE_MAX;
}

/* Specifiers in a head [a, b), outside parentheses: side, linkage, inline. */
static void head_flags(const struct split *s, struct item *it, size_t a, size_t b)
{
    bool global = false, device = false, host = false;
    for (size_t i = a; i < b; i++) {
        if (is_punct(s, i, '(') || is_punct(s, i, '[')) {
            size_t e = match(s, i);
            if (e == SIZE_MAX || e >= b)
                break;
            i = e;
            continue;
        }
        if (s->t[i].kind != TK_IDENT)
            continue;
        struct sv v = tok_sv(s, i);
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
    it->side = global ? SIDE_KERNEL : device && host ? SIDE_HD : device ? SIDE_DEVICE : SIDE_HOST;
}

/*
 * Whether the class key at i starts a definition: [attributes] [name [<args>]] [final]
 * [: bases] '{'.
 */
static bool class_definition(const struct split *s, size_t i)
{
    for (i++; i < s->n; i++) {
        if (is_punct(s, i, '{'))
            return true;
        if (is_punct(s, i, ':') && !scope_op(s, i))
            return true;
        if (s->t[i].kind == TK_IDENT && attribute_word(tok_sv(s, i)) && is_punct(s, i + 1, '(')) {
            size_t e = match(s, i + 1);
            if (e == SIZE_MAX)
                return false;
            i = e;
        } else if (is_punct(s, i, '[') && is_punct(s, i + 1, '[')) {
            size_t e = match(s, i);
            if (e == SIZE_MAX)
                return false;
            i = e;
        } else if (is_punct(s, i, '<')) {
            size_t e = match_angle(s, i);
            if (e == SIZE_MAX)
                return false;
            i = e;
        } else if (scope_op(s, i)) {
            i++;
        } else if (s->t[i].kind != TK_IDENT) {
            return false;
        }
    }
    return false;
}

/* One declaration or definition at namespace scope from token i; *end after it. 1: declined. */
static int parse_item(struct split *s, size_t i, bool anon, size_t *end)
{
    size_t t0 = i, head = i;
    bool tmpl = false;
    while (is_ident(s, head, "template")) {
        if (!is_punct(s, head + 1, '<'))
            return decline(s, "an explicit instantiation");
        size_t e = match_angle(s, head + 1);
        if (e == SIZE_MAX)
            return decline(s, "unbalanced template parameters");
        head = e + 1;
        tmpl = true;
    }
    if (head >= s->n)
        return decline(s, "the source ends inside a declaration");
    bool klass = class_key(s, head + is_ident(s, head, "typedef")) &&
                 class_definition(s, head + is_ident(s, head, "typedef"));
    bool eq = false, paren = false;
    for (size_t j = head; j < s->n; j++) {
        if (s->t[j].kind == TK_DIRECTIVE)
            return decline(s, "a directive inside a declaration");
        if (is_punct(s, j, '(') || is_punct(s, j, '[')) {
            paren = paren || is_punct(s, j, '(');
            size_t e = match(s, j);
            if (e == SIZE_MAX)
                return decline(s, "unbalanced brackets");
            j = e;
            continue;
        }
        if (assign_eq(s, j))
            eq = true;
        if (is_punct(s, j, '}') || is_punct(s, j, ')') || is_punct(s, j, ']'))
            return decline(s, "unbalanced brackets");
        if (is_punct(s, j, ';')) {
            struct item *it = add_item(s, IT_DECL, t0, j + 1, anon);
            it->head = head;
            it->tmpl = tmpl;
            *end = j + 1;
            return 0;
        }
        if (!is_punct(s, j, '{'))
            continue;
        size_t close = match(s, j);
        if (close == SIZE_MAX)
            return decline(s, "unbalanced braces");
        if (klass && !eq) {
            /* A class definition: declarators after its body would be variables. */
            if (!is_punct(s, close + 1, ';') &&
                !(is_ident(s, head, "typedef") && s->t[close + 1].kind == TK_IDENT &&
                  is_punct(s, close + 2, ';')))
                return decline(s, "a variable declared with its class");
            size_t k = is_punct(s, close + 1, ';') ? close + 1 : close + 2;
            struct item *it = add_item(s, IT_CLASS, t0, k + 1, anon);
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
        if (is_ident(s, j - 1, "try"))
            return decline(s, "a function-try-block");
        for (size_t k = head; k < j; k++)
            if (is_punct(s, k, ')') && is_punct(s, k + 1, ':') && !scope_op(s, k + 1))
                return decline(s, "a constructor defined outside its class");
        struct item *it = add_item(s, IT_FUNC, t0, close + 1, anon);
        it->head = head;
        it->body = j;
        it->tmpl = tmpl;
        *end = close + 1;
        return 0;
    }
    return decline(s, "the source ends inside a declaration");
}

/* The items of the whole source at namespace scope, with the nesting of blocks checked. */
static int parse_items(struct split *s)
{
    bool anon[SCOPES_MAX];
    size_t depth = 0, i = 0;
    while (i < s->n) {
        bool in_anon = depth && anon[depth - 1];
        if (s->t[i].kind == TK_DIRECTIVE || is_punct(s, i, ';')) {
            add_item(s, s->t[i].kind == TK_DIRECTIVE ? IT_DIRECTIVE : IT_EMPTY, i, i + 1, in_anon);
            i++;
            continue;
        }
        if (is_punct(s, i, '}')) {
            if (!depth)
                return decline(s, "an unbalanced '}'");
            depth--;
            add_item(s, IT_CLOSE, i, i + 1, in_anon);
            i++;
            continue;
        }
        size_t open = SIZE_MAX;
        bool named = false;
        size_t k = i + is_ident(s, i, "inline");
        if (is_ident(s, k, "namespace")) {
            size_t j = k + 1;
            while (j < s->n && (s->t[j].kind == TK_IDENT || scope_op(s, j))) {
                named = true;
                j += scope_op(s, j) ? 2 : 1;
            }
            if (is_punct(s, j, '{'))
                open = j;
        } else if (is_ident(s, i, "extern") && i + 2 < s->n && s->t[i + 1].kind == TK_STRING &&
                   is_punct(s, i + 2, '{')) {
            open = i + 2;
            named = true;
        }
        if (open != SIZE_MAX) {
            if (depth == SCOPES_MAX)
                return decline(s, "blocks nested too deeply");
            anon[depth] = !named || in_anon;
            depth++;
            add_item(s, IT_OPEN, i, open + 1, in_anon);
            i = open + 1;
            continue;
        }
        size_t end = i;
        if (parse_item(s, i, in_anon, &end))
            return 1;
        i = end;
    }
    if (depth)
        return decline(s, "an unclosed namespace or extern \"C\" block");
    return 0;
}

/* ---- facts about the items ---- */

/* A macro that makes declarations named in [a, b): the cut cannot see what it declares. */
static bool structural_macro_in(const struct split *s, size_t a, size_t b)
{
    for (size_t i = a; i < b; i++) {
        if (s->t[i].kind != TK_IDENT)
            continue;
        long m = macro_index(s, tok_sv(s, i));
        if (m >= 0 && s->macro_structural[m])
            return true;
    }
    return false;
}

static bool range_has_ident(const struct split *s, size_t a, size_t b, const char *name)
{
    for (size_t i = a; i < b; i++)
        if (is_ident(s, i, name))
            return true;
    return false;
}

static struct sv item_name(const struct split *s, const struct item *it)
{
    return it->name == SIZE_MAX ? sv_from("", 0) : tok_sv(s, it->name);
}

/* A function declaration's parentheses: empty, or starting like a parameter declaration. */
static bool parameter_list(const struct split *s, size_t open)
{
    size_t i = open + 1;
    return is_punct(s, i, ')') || s->t[i].kind == TK_IDENT || scope_op(s, i) ||
           (is_punct(s, i, '.') && is_punct(s, i + 1, '.'));
}

/* The variable names a declaration [a, b) defines: the identifier before each top-level
 * '=', ',', ';', '[', '{' or '('. Marked dev-only in names (a byte per token). */
static void variable_names(const struct split *s, size_t a, size_t b, bool *names)
{
    for (size_t i = a + 1; i < b; i++) {
        if (is_punct(s, i, '<')) {
            size_t e = match_angle(s, i);
            if (e != SIZE_MAX && e < b) {
                i = e;
                continue;
            }
        }
        bool stop = is_punct(s, i, '=') || is_punct(s, i, ',') || is_punct(s, i, ';') ||
                    is_punct(s, i, '[') || is_punct(s, i, '{') || is_punct(s, i, '(');
        if (stop && s->t[i - 1].kind == TK_IDENT)
            names[i - 1] = true;
        if ((is_punct(s, i, '(') || is_punct(s, i, '[') || is_punct(s, i, '{'))) {
            size_t e = match(s, i);
            if (e == SIZE_MAX || e >= b)
                return;
            i = e;
        } else if (is_punct(s, i, '=')) {
            /* Skip the initializer to the next top-level ','. */
            for (i++; i < b && !is_punct(s, i, ',') && !is_punct(s, i, ';'); i++)
                if (is_punct(s, i, '(') || is_punct(s, i, '[') || is_punct(s, i, '{')) {
                    size_t e = match(s, i);
                    if (e == SIZE_MAX || e >= b)
                        return;
                    i = e;
                }
            i--;
        }
    }
}

static int classify(struct split *s, bool *dev_only_names)
{
    for (size_t i = 0; i < s->n; i++) {
        struct sv v = tok_sv(s, i);
        if ((s->t[i].kind == TK_IDENT &&
             (sv_starts_with(v, SV_LIT("__CUDACC")) || sv_starts_with(v, SV_LIT("__NVCC")))) ||
            (s->t[i].kind == TK_DIRECTIVE &&
             (memmem(v.p, v.len, "__CUDACC", 8) || memmem(v.p, v.len, "__NVCC", 6))))
            return decline(s, "the source tests __CUDACC__ or __NVCC__, which nvcc's host pass "
                              "defines");
    }
    for (size_t n = 0; n < s->ni; n++) {
        struct item *it = &s->it[n];
        if (it->kind == IT_DIRECTIVE || it->kind == IT_OPEN || it->kind == IT_CLOSE ||
            it->kind == IT_EMPTY)
            continue;
        size_t head_end = it->kind == IT_FUNC ? it->body : it->t1;
        if (s->t[it->head].kind == TK_IDENT && macro_index(s, tok_sv(s, it->head)) >= 0)
            return decline(s, "a declaration that starts with a macro (%.*s)",
                           (int)s->t[it->head].len, s->src.p + s->t[it->head].off);
        if (structural_macro_in(s, it->t0, it->kind == IT_CLASS ? it->t1 : head_end))
            return decline(s, "a declaration made with a macro");
        head_flags(s, it, it->head, head_end);
        for (size_t i = it->t0; i < it->t1; i++) {
            it->torch = it->torch || torch_token(s, i);
            it->launches = it->launches || launch_at(s, i);
        }
        if (it->kind == IT_FUNC) {
            bool qualified;
            it->name = head_name(s, it->head, it->body, &qualified);
            if (it->name == SIZE_MAX)
                return decline(s, "a function definition whose name the cut cannot read");
            if (qualified)
                return decline(s, "a member function defined outside its class (%.*s)",
                               (int)s->t[it->name].len, s->src.p + s->t[it->name].off);
            it->static_local = range_has_ident(s, it->body, it->t1, "static") ||
                               range_has_ident(s, it->body, it->t1, "thread_local");
            if (it->torch && it->side != SIDE_HOST)
                return decline(s, "device code that uses torch (%.*s)", (int)s->t[it->name].len,
                               s->src.p + s->t[it->name].off);
            continue;
        }
        if (it->kind == IT_CLASS) {
            if (it->torch)
                return decline(s, "a type that uses torch");
            it->static_local = range_has_ident(s, it->t0, it->t1, "static") ||
                               range_has_ident(s, it->t0, it->t1, "thread_local");
            if (it->static_local && it->internal)
                return decline(s, "static members of a class in an unnamed namespace");
            continue;
        }
        /* A declaration: of a type, alias or assertion; of a function; or of variables. */
        size_t h = it->head;
        if (is_ident(s, h, "typedef") || is_ident(s, h, "using") ||
            is_ident(s, h, "static_assert") || is_ident(s, h, "namespace") ||
            (class_key(s, h) && it->t1 == h + 3)) {
            if (it->torch)
                return decline(s, "a declaration outside functions that uses torch");
            it->typeish = true;
            continue;
        }
        bool qualified;
        size_t name = head_name(s, h, it->t1, &qualified);
        if (name != SIZE_MAX && !qualified &&
            (is_ident(s, name, "operator") || parameter_list(s, name + 1))) {
            it->proto = true;
            it->name = name;
            continue;
        }
        if (it->torch)
            return decline(s, "a variable that uses torch");
        bool device = false, constant = false, changeable = false;
        for (size_t i = h; i < it->t1 && !assign_eq(s, i); i++) {
            if (is_ident(s, i, "__device__") || is_ident(s, i, "__constant__") ||
                is_ident(s, i, "__managed__") || is_ident(s, i, "__shared__"))
                device = true;
            else if (is_ident(s, i, "constexpr") || is_ident(s, i, "const"))
                constant = true;
            else if (is_punct(s, i, '*') || is_punct(s, i, '&') || is_ident(s, i, "thread_local") ||
                     is_ident(s, i, "mutable") || is_ident(s, i, "extern"))
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
static struct sv system_include(const struct split *s, size_t i)
{
    const struct item *it = &s->it[i];
    if (it->kind != IT_DIRECTIVE)
        return sv_from("", 0);
    struct sv d = tok_sv(s, it->t0);
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
static int check_includes(struct split *s)
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
        const struct item *it = &s->it[i];
        depth += it->kind == IT_OPEN;
        depth -= it->kind == IT_CLOSE;
        if (it->kind != IT_DIRECTIVE) {
            if (leading)
                first_late = i;
            leading = false;
            continue;
        }
        struct sv h = system_include(s, i);
        if (!h.len)
            return decline(s, "a directive other than #include <...> before the torch includes");
        for (size_t k = 0; k < N; k++)
            found[k] = found[k] || (!depth && (leading || k >= CONTEXT) && sv_eq_cstr(h, pch[k]));
    }
    if (!found[TYPES] || !found[CUDA] || !found[RUNTIME])
        return decline(s, "the source does not start with #include <torch/types.h>, <cuda.h> "
                          "and <cuda_runtime.h> (load_inline's prelude)");
    if (leading)
        first_late = i;
    if (!(found[EXTENSION] || (found[CONTEXT] && found[GUARD])))
        return decline(s, "no #include <torch/extension.h> (or <ATen/cuda/CUDAContext.h> and "
                          "<c10/cuda/CUDAGuard.h>) at namespace scope");
    for (size_t n = first_late; n < i; n++) {
        const struct item *it = &s->it[n];
        if (it->host == PL_BLANK || it->kind == IT_DIRECTIVE)
            continue;
        size_t end = it->host == PL_TEXT ? it->t1 : it->body;
        for (size_t k = it->t0; k < end; k++)
            if (s->t[k].kind == TK_IDENT && late_macro_like(tok_sv(s, k)))
                return decline(s,
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
static bool any_named(const struct split *s, struct sv name, bool (*pred)(const struct item *it))
{
    for (size_t i = 0; i < s->ni; i++)
        if (s->it[i].name != SIZE_MAX && pred(&s->it[i]) && sv_eq(item_name(s, &s->it[i]), name))
            return true;
    return false;
}

static bool is_kernel(const struct item *it)
{
    return it->side == SIDE_KERNEL && (it->kind == IT_FUNC || it->proto);
}

static bool is_bad_kernel(const struct item *it)
{
    return is_kernel(it) && (it->tmpl || it->internal);
}

/* Identifiers of [a, b) into the host half's names (directives: every identifier inside). */
static void mark_names(struct split *s, size_t a, size_t b)
{
    for (size_t i = a; i < b; i++)
        s->host_names[i] = s->t[i].kind == TK_IDENT || s->t[i].kind == TK_DIRECTIVE;
}

static bool host_names_has(const struct split *s, struct sv name)
{
    for (size_t i = 0; i < s->n; i++) {
        if (!s->host_names[i])
            continue;
        if (s->t[i].kind == TK_IDENT) {
            if (sv_eq(tok_sv(s, i), name))
                return true;
            continue;
        }
        /* A directive: the name as a whole word of its text. */
        struct sv d = tok_sv(s, i);
        for (size_t k = 0; k + name.len <= d.len; k++)
            if (memcmp(d.p + k, name.p, name.len) == 0 && (k == 0 || !ident_char(d.p[k - 1])) &&
                (k + name.len == d.len || !ident_char(d.p[k + name.len])))
                return true;
    }
    return false;
}

/* What each half gets of each item (the table at the top). */
static int place_items(struct split *s, bool *torch_functions)
{
    *torch_functions = false;
    for (size_t n = 0; n < s->ni; n++) {
        struct item *it = &s->it[n];
        it->dev = it->host = PL_TEXT;
        switch (it->kind) {
        case IT_DIRECTIVE:
            if (torch_include(tok_sv(s, it->t0)))
                it->dev = PL_BLANK;
            break;
        case IT_OPEN:
        case IT_CLOSE:
        case IT_EMPTY:
        case IT_CLASS:
            break;
        case IT_DECL:
            if (it->proto && it->torch)
                it->dev = PL_BLANK;
            else if (it->dev_only_var)
                it->host = PL_BLANK;
            break;
        case IT_FUNC:
            if (it->side == SIDE_KERNEL) {
                it->host = PL_PROTO;
            } else if (it->side == SIDE_DEVICE) {
                /* Deleted only where this is the first declaration (C++'s rule for it). */
                bool declared = false;
                for (size_t k = 0; k < n && !declared; k++)
                    declared = s->it[k].kind == IT_DECL && s->it[k].proto &&
                               sv_eq(item_name(s, &s->it[k]), item_name(s, it));
                it->host = declared ? PL_PROTO : PL_DELETED;
            } else if (it->side == SIDE_HOST && it->torch) {
                it->dev = PL_BLANK;
                *torch_functions = true;
            } else if (!(it->inl || it->tmpl || it->internal)) {
                /* Defined by the dev half (external linkage), declared for the host half. */
                it->host = PL_PROTO;
            } else {
                /* Inline, template or internal: the host half gets a copy if it uses it. */
                it->host = PL_BLANK;
            }
            break;
        }
    }
    if (!*torch_functions)
        return 0;
    /* The host half's names, from what it holds as written; copies add theirs, until no
     * further definition is needed. */
    for (size_t n = 0; n < s->ni; n++) {
        struct item *it = &s->it[n];
        if (it->host == PL_TEXT && it->kind != IT_OPEN && it->kind != IT_CLOSE)
            mark_names(s, it->t0, it->t1);
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t n = 0; n < s->ni; n++) {
            struct item *it = &s->it[n];
            if (it->kind != IT_FUNC || it->host != PL_BLANK || it->side == SIDE_KERNEL ||
                it->side == SIDE_DEVICE)
                continue;
            if (!is_ident(s, it->name, "operator") && !host_names_has(s, item_name(s, it)))
                continue;
            if (it->internal && it->static_local)
                return decline(s,
                               "%.*s has internal linkage and static locals: the two halves "
                               "would have a copy each",
                               (int)s->t[it->name].len, s->src.p + s->t[it->name].off);
            it->host = PL_TEXT;
            mark_names(s, it->t0, it->t1);
            changed = true;
        }
    }
    return 0;
}

/* names += "name\n", once. */
static int add_name(struct split *s, struct buf *names, struct sv v)
{
    struct sv rest = sv_from(names->data, names->len), line;
    while (sv_next_line(&rest, &line, NULL))
        if (sv_eq(line, v))
            return 0;
    if (buf_add(names, v.p, v.len) || buf_addch(names, '\n'))
        return decline(s, "too many names");
    return 0;
}

/*
 * What the host half names, checked: each launch is of a kernel of the source that the dev
 * half defines with external linkage (not a template, not static or in an unnamed namespace); a
 * kernel is otherwise only taken as a value, never called; no variable that only the dev half
 * holds is named. The names the host half expects the dev half to define go to names.
 */
static int check_host_refs(struct split *s, const bool *dev_only_names, struct buf *names)
{
    struct sv *dev_only = NULL;
    size_t ndev = 0, alloc = 0;
    for (size_t k = 0; k < s->n; k++)
        if (dev_only_names[k]) {
            ALLOC_GROW(dev_only, ndev + 1, alloc);
            dev_only[ndev++] = tok_sv(s, k);
        }
    int rc = 0;
    for (size_t n = 0; n < s->ni && !rc; n++) {
        const struct item *it = &s->it[n];
        if (it->host != PL_TEXT || it->kind == IT_DIRECTIVE || it->kind == IT_OPEN ||
            it->kind == IT_CLOSE)
            continue;
        for (size_t i = it->t0; i < it->t1 && !rc; i++) {
            if (launch_at(s, i) &&
                (s->t[i - 1].kind != TK_IDENT || !any_named(s, tok_sv(s, i - 1), is_kernel))) {
                rc = decline(s, "a launch of something other than a kernel of the source");
                break;
            }
            if (s->t[i].kind != TK_IDENT || i == it->name)
                continue;
            struct sv v = tok_sv(s, i);
            for (size_t k = 0; k < ndev && !rc; k++)
                if (sv_eq(dev_only[k], v))
                    rc = decline(s,
                                 "host code that uses %.*s, a device variable or one that "
                                 "changes",
                                 (int)v.len, v.p);
            if (rc || !any_named(s, v, is_kernel))
                continue;
            if (any_named(s, v, is_bad_kernel))
                rc = decline(s,
                             "host code that uses %.*s, a template kernel or one with internal "
                             "linkage",
                             (int)v.len, v.p);
            else if (is_punct(s, i + 1, '(') || (is_punct(s, i + 1, '<') && !launch_at(s, i + 1)))
                rc = decline(s, "%.*s called or instantiated other than by a launch", (int)v.len,
                             v.p);
            else
                rc = add_name(s, names, v);
        }
    }
    /* Functions the host half declares and uses, which the dev half defines. */
    for (size_t n = 0; n < s->ni && !rc; n++) {
        const struct item *it = &s->it[n];
        if (it->kind == IT_FUNC && it->host == PL_PROTO && it->side != SIDE_KERNEL &&
            !is_ident(s, it->name, "operator") && host_names_has(s, item_name(s, it)))
            rc = add_name(s, names, item_name(s, it));
    }
    free(dev_only);
    return rc;
}

/* ---- the two halves ---- */

static int add_newlines(struct buf *out, struct sv text)
{
    for (size_t i = 0; i < text.len; i++)
        if (text.p[i] == '\n' && buf_addch(out, '\n'))
            return CA_ETOOBIG;
    return 0;
}

static struct sv span(const struct split *s, size_t from_off, size_t to_off)
{
    return sv_from(s->src.p + from_off, to_off - from_off);
}

/*
 * Tokens [a, b) as written, with each launch lowered as cudafe++ lowers it:
 *   k<<<cfg>>>(args)  ->  ((::__cudaPushCallConfiguration(cfg)) ? (void)0 : k(args))
 * Lines are kept: what is dropped keeps its newlines.
 */
static int add_lowered(struct split *s, size_t a, size_t b, struct buf *out)
{
    size_t pos = s->t[a].off;
    for (size_t i = a; i < b; i++) {
        if (!launch_at(s, i))
            continue;
        /* The kernel's name and its qualifiers: [::][ns::]...k */
        size_t callee = i - 1;
        while (callee >= a + 2 && scope_op(s, callee - 2)) {
            if (callee >= a + 3 && s->t[callee - 3].kind == TK_IDENT) {
                callee -= 3;
            } else {
                callee -= 2;
                break;
            }
        }
        size_t cfg = i + 3, close = SIZE_MAX;
        for (size_t j = cfg; j < b; j++) {
            if (is_punct(s, j, '(') || is_punct(s, j, '[') || is_punct(s, j, '{')) {
                size_t e = match(s, j);
                if (e == SIZE_MAX || e >= b)
                    break;
                j = e;
            } else if (triple(s, j, '>')) {
                close = j;
                break;
            } else if (launch_at(s, j) || is_punct(s, j, ';')) {
                break;
            }
        }
        if (close == SIZE_MAX || close == cfg || !is_punct(s, close + 3, '('))
            return decline(s, "a launch whose configuration the cut cannot read");
        size_t lp = close + 3, rp = match(s, lp);
        if (rp == SIZE_MAX || rp >= b)
            return decline(s, "a launch whose arguments the cut cannot read");
        for (size_t j = lp; j < rp; j++)
            if (launch_at(s, j))
                return decline(s, "a launch inside a launch's arguments");
        if (buf_add(out, s->src.p + pos, s->t[callee].off - pos) ||
            buf_addstr(out, "((::__cudaPushCallConfiguration(") ||
            buf_add(out, s->src.p + s->t[cfg].off, tok_end(s, close - 1) - s->t[cfg].off) ||
            buf_addstr(out, ")) ? (void)0 : ") ||
            buf_add(out, s->src.p + s->t[callee].off, s->t[i].off - s->t[callee].off) ||
            add_newlines(out, span(s, tok_end(s, close + 2), s->t[lp].off)) ||
            buf_add(out, s->src.p + s->t[lp].off, tok_end(s, rp) - s->t[lp].off) ||
            buf_addch(out, ')'))
            return decline(s, "the halves are too large");
        pos = tok_end(s, rp);
        i = rp;
    }
    if (buf_add(out, s->src.p + pos, tok_end(s, b - 1) - pos))
        return decline(s, "the halves are too large");
    return 0;
}

static int add_item_text(struct split *s, const struct item *it, enum place pl, bool host,
                         struct buf *out)
{
    size_t start = s->t[it->t0].off, end = tok_end(s, it->t1 - 1);
    int rc = 0;
    switch (pl) {
    case PL_TEXT:
        if (host && it->launches)
            return add_lowered(s, it->t0, it->t1, out);
        rc = buf_add(out, s->src.p + start, end - start);
        break;
    case PL_BLANK:
        rc = add_newlines(out, span(s, start, end));
        break;
    case PL_PROTO:
    case PL_DELETED: {
        /* The head, without the blanks before the body, then ";" or " = delete;". */
        size_t head = s->t[it->body].off;
        while (head > start && (s->src.p[head - 1] == ' ' || s->src.p[head - 1] == '\t'))
            head--;
        rc = buf_add(out, s->src.p + start, head - start);
        if (!rc)
            rc = buf_addstr(out, pl == PL_PROTO ? ";" : " = delete;");
        if (!rc)
            rc = add_newlines(out, span(s, head, end));
        break;
    }
    }
    return rc ? decline(s, "the halves are too large") : 0;
}

/*
 * The C library headers torch/types.h (and so torch/extension.h) includes, light or real:
 * code written against torch uses FLT_MAX, INT_MAX, assert... without including them. The nvcc
 * half gets them where torch was included first; they cost nvcc next to nothing, unlike the
 * C++ library headers torch also brings (<algorithm> alone adds a quarter to a small unit).
 */
static const char torch_c_headers[] = "#include <cassert>\n#include <cfloat>\n#include <climits>\n"
                                      "#include <cmath>\n#include <cstddef>\n#include <cstdint>\n"
                                      "#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n";

/* Whether the source includes torch/types.h or torch/extension.h first, before any code. */
static bool includes_torch_first(const struct split *s)
{
    for (size_t i = 0; i < s->ni && s->it[i].kind == IT_DIRECTIVE; i++) {
        struct sv h = system_include(s, i);
        if (sv_eq_cstr(h, "<torch/types.h>") || sv_eq_cstr(h, "<torch/extension.h>"))
            return true;
    }
    return false;
}

static int write_halves(struct split *s, const char *name, bool torch_functions,
                        struct compile__split *out)
{
    if ((includes_torch_first(s) && buf_addstr(&out->dev, torch_c_headers)) ||
        buf_addf(&out->dev, "#line 1 \"%s\"\n", name))
        return decline(s, "the halves are too large");
    /* What nvcc's host pass has and g++ lacks: the launch's entry point into the CUDA runtime,
     * and the CUDA qualifiers cuda_runtime.h defines only for nvcc (host_defines.h), as nvcc
     * defines them for host code. */
    if (torch_functions &&
        buf_addf(&out->host,
                 "/* cuda-agent: the torch functions of %s, for g++; the rest is built by "
                 "nvcc. */\n"
                 "extern \"C\" unsigned __cudaPushCallConfiguration(dim3, dim3, size_t = 0, "
                 "struct CUstream_st * = 0);\n"
                 "#ifndef __launch_bounds__\n#define __launch_bounds__(...)\n#endif\n"
                 "#ifndef __noinline__\n#define __noinline__ __attribute__((noinline))\n#endif\n"
                 "#ifndef __nv_register_params__\n#define __nv_register_params__\n#endif\n"
                 "#line 1 \"%s\"\n",
                 name, name))
        return decline(s, "the halves are too large");
    size_t pos = 0;
    for (size_t n = 0; n < s->ni; n++) {
        const struct item *it = &s->it[n];
        struct sv gap = span(s, pos, s->t[it->t0].off);
        if (buf_add(&out->dev, gap.p, gap.len) ||
            (torch_functions && buf_add(&out->host, gap.p, gap.len)))
            return decline(s, "the halves are too large");
        if (add_item_text(s, it, it->dev, false, &out->dev) ||
            (torch_functions && add_item_text(s, it, it->host, true, &out->host)))
            return 1;
        pos = tok_end(s, it->t1 - 1);
    }
    struct sv tail = span(s, pos, s->src.len);
    if (buf_add(&out->dev, tail.p, tail.len) ||
        (torch_functions && buf_add(&out->host, tail.p, tail.len)))
        return decline(s, "the halves are too large");
    return 0;
}

/* ---- interface ---- */

void compile__split_init(struct compile__split *sp)
{
    buf_init(&sp->dev, HALF_MAX);
    buf_init(&sp->host, HALF_MAX);
    buf_init(&sp->dev_names, NAMES_MAX);
    sp->why[0] = '\0';
}

void compile__split_release(struct compile__split *sp)
{
    buf_release(&sp->dev);
    buf_release(&sp->host);
    buf_release(&sp->dev_names);
}

int compile__split_source(struct sv src, const char *name, struct compile__split *out)
{
    buf_reset(&out->dev);
    buf_reset(&out->host);
    buf_reset(&out->dev_names);
    out->why[0] = '\0';
    struct split s = {.src = src, .why = out->why, .why_len = sizeof(out->why)};
    bool *dev_only = NULL, torch_functions = false;
    int rc = lex(&s);
    if (!rc) {
        scan_macros(&s);
        dev_only = xcalloc(s.n + 1, sizeof(bool));
        s.host_names = xcalloc(s.n + 1, sizeof(bool));
        rc = parse_items(&s);
    }
    if (!rc)
        rc = classify(&s, dev_only);
    if (!rc)
        rc = place_items(&s, &torch_functions);
    if (!rc && torch_functions)
        rc = check_includes(&s);
    if (!rc && torch_functions)
        rc = check_host_refs(&s, dev_only, &out->dev_names);
    if (!rc)
        rc = write_halves(&s, name, torch_functions, out);
    if (rc) {
        buf_reset(&out->dev);
        buf_reset(&out->host);
        buf_reset(&out->dev_names);
    }
    free(dev_only);
    free(s.host_names);
    free(s.t);
    free(s.it);
    free(s.macros);
    free(s.macro_torch);
    free(s.macro_structural);
    return rc ? 1 : 0;
}

/* Whether sym names `name`: the C name itself, or the Itanium source-name <length><name>. */
static bool symbol_names(const char *sym, struct sv name)
{
    if (strlen(sym) == name.len && memcmp(sym, name.p, name.len) == 0)
        return true;
    char len[24];
    int k = snprintf(len, sizeof(len), "%zu", name.len);
    for (const char *p = sym; (p = strstr(p, len)); p++) {
        if (p > sym && p[-1] >= '0' && p[-1] <= '9')
            continue;
        if (strncmp(p + k, name.p, name.len) == 0)
            return true;
    }
    return false;
}

int compile__split_check_object(const char *path, struct sv names, char *why, size_t why_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size > OBJECT_MAX_BYTES) {
        close(fd);
        return CA_ETOOBIG;
    }
    (void)elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    int rc = e ? 0 : CA_EPARSE;
    bool bad = false;
    Elf_Scn *scn = NULL;
    while (!rc && !bad && (scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || !sh.sh_entsize)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t count = sh.sh_size / sh.sh_entsize;
        for (size_t i = 0; d && i < count && !bad; i++) {
            GElf_Sym sym;
            if (!gelf_getsym(d, (int)i, &sym) || sym.st_shndx != SHN_UNDEF || !sym.st_name)
                continue;
            const char *nm = elf_strptr(e, sh.sh_link, sym.st_name);
            if (!nm)
                continue;
            struct sv rest = names, line;
            while (!bad && sv_next_line(&rest, &line, NULL))
                if (line.len && symbol_names(nm, line)) {
                    snprintf(why, why_len,
                             "the torch half uses %.*s, which the nvcc half leaves undefined "
                             "(%s)",
                             (int)line.len, line.p, nm);
                    bad = true;
                }
        }
    }
    if (e)
        elf_end(e);
    close(fd);
    return rc ? rc : bad ? 1 : 0;
}
