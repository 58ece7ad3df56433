/*
 * policy_src.c - the static policy for kernels/NAME.cu and kernels/NAME_binding.cpp.
 *
 * Two passes. The lexer turns the source into preprocessing tokens the way GCC's preprocessor
 * does (nvcc runs the host compiler's preprocessor first), so that what the checker reads is what
 * the compiler will read: line splices (a backslash, optional spaces, a newline) are removed
 * everywhere except inside raw string literals, where they are kept as the standard says; \r\n,
 * \r and \n all end lines; comments and string, character and raw string literals become single
 * tokens whose contents never count; digit separators stay inside numbers; digraphs become the
 * tokens they stand for; directive lines are marked, and an #include's header name is read as
 * one token. Where the lexer could disagree with the compiler (a NUL byte, an unterminated
 * comment or raw string, a universal character name or a stray backslash outside literals) it
 * reports a "lexer" violation instead of guessing.
 *
 * The checker then walks the tokens: identifiers against the name rules of policy.c; qualified
 * names (torch::, at::, c10::, pybind11::, std::, through namespace aliases) against allow-lists;
 * member calls against the ATen tensor methods that compute; #include against the header
 * allow-list; #define against macros that would hide names from this check (token pasting, macro
 * names after . -> ::, macros redefining known names); kernel launches for a stream argument; and
 * inline assembly, allowed only inside __device__/__global__ function bodies of .cu files.
 *
 * The check is lexical, not a C++ front end: it judges names, never types. What it cannot see
 * (tensor arithmetic operators in a binding, calls through pointers obtained at run time) is
 * caught by the object check (policy_elf.c) and the evaluator's runtime defences; the docs list
 * each gap. Conditional compilation is ignored: code under #if 0 is checked like any other.
 *
 * Invariants: token text lives in one arena sized from the input (the text of every token is at
 * most its physical length, plus a NUL), so it never grows; every index into the token array is
 * checked against the region being walked; the input is never read past len.
 */
#include "eval/policy.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "eval/policy_internal.h"
#include "core/banned.h"

/* ---- tokens ---- */

enum tok_kind { TK_IDENT, TK_NUMBER, TK_STRING, TK_PUNCT, TK_HEADER, TK_EOL };

enum dir_kind { DIR_NONE = 0, DIR_INCLUDE, DIR_DEFINE, DIR_UNDEF, DIR_OTHER };

enum tok_flags {
    TF_SPACE = 1 << 0,    /* whitespace or a comment precedes it */
    TF_HASH = 1 << 1,     /* the # that starts a directive line */
    TF_ANGLE = 1 << 2,    /* header name in <...> */
    TF_COMPUTED = 1 << 3, /* #include operand that is not a header name */
};

struct tok {
    uint8_t kind;
    uint8_t dir; /* enum dir_kind of the directive line holding it */
    uint8_t flags;
    uint32_t line;
    uint32_t text; /* offset of the NUL-terminated text in the arena */
    uint32_t len;
};

struct lexer {
    const char *src;
    size_t len;
    size_t pos; /* never left on a line splice */
    uint32_t line;
    char *arena;
    size_t arena_len, arena_cap;
    struct tok *toks;
    size_t n, alloc;
    const char *file;
    struct policy_report *rep;
    bool line_start; /* only whitespace and comments so far on this logical line */
    bool space;
    uint8_t dir;
    bool stop; /* an unrecoverable lexer violation: the rest cannot be read reliably */
};

static bool is_nl(char c)
{
    return c == '\n' || c == '\r';
}

static bool is_hspace(char c)
{
    return c == ' ' || c == '\t' || c == '\f' || c == '\v';
}

static bool is_ident_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c >= 0x80;
}

static bool is_ident_char(unsigned char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9');
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Bytes of the line break at i (\r\n is one). */
static size_t nl_len(const struct lexer *lx, size_t i)
{
    return lx->src[i] == '\r' && i + 1 < lx->len && lx->src[i + 1] == '\n' ? 2 : 1;
}

/* If a line splice starts at i, the offset just past it, else 0. GCC also splices when spaces
 * separate the backslash from the newline. */
static size_t splice_end(const struct lexer *lx, size_t i)
{
    if (i >= lx->len || lx->src[i] != '\\')
        return 0;
    size_t j = i + 1;
    while (j < lx->len && is_hspace(lx->src[j]))
        j++;
    if (j < lx->len && is_nl(lx->src[j]))
        return j + nl_len(lx, j);
    return 0;
}

struct cursor {
    size_t pos;
    uint32_t line;
};

static void skip_splices(const struct lexer *lx, struct cursor *c)
{
    size_t e;
    while ((e = splice_end(lx, c->pos)) != 0) {
        c->pos = e;
        c->line++;
    }
}

static char cur_at(const struct lexer *lx, const struct cursor *c)
{
    return c->pos < lx->len ? lx->src[c->pos] : '\0';
}

static void step(const struct lexer *lx, struct cursor *c)
{
    if (c->pos >= lx->len)
        return;
    if (is_nl(lx->src[c->pos])) {
        c->pos += nl_len(lx, c->pos);
        c->line++;
    } else {
        c->pos++;
    }
    skip_splices(lx, c);
}

static char cur(const struct lexer *lx)
{
    return lx->pos < lx->len ? lx->src[lx->pos] : '\0';
}

/* The logical character k places ahead (0 = current). */
static char peek(const struct lexer *lx, int k)
{
    struct cursor c = {lx->pos, lx->line};
    for (int i = 0; i < k; i++)
        step(lx, &c);
    return cur_at(lx, &c);
}

static void advance(struct lexer *lx)
{
    struct cursor c = {lx->pos, lx->line};
    step(lx, &c);
    lx->pos = c.pos;
    lx->line = c.line;
}

static uint32_t arena_start(struct lexer *lx)
{
    return (uint32_t)lx->arena_len;
}

static void arena_put(struct lexer *lx, char c)
{
    ASSERT(lx->arena_len < lx->arena_cap);
    lx->arena[lx->arena_len++] = c;
}

static struct tok *emit(struct lexer *lx, enum tok_kind kind, uint32_t line, uint32_t text)
{
    arena_put(lx, '\0');
    ALLOC_GROW(lx->toks, lx->n + 1, lx->alloc);
    struct tok *t = &lx->toks[lx->n++];
    t->kind = (uint8_t)kind;
    t->dir = lx->dir;
    t->flags = lx->space ? TF_SPACE : 0;
    t->line = line;
    t->text = text;
    t->len = (uint32_t)(lx->arena_len - 1 - text);
    lx->space = false;
    return t;
}

static void emit_punct(struct lexer *lx, const char *p, int consumed)
{
    uint32_t line = lx->line, text = arena_start(lx);
    for (const char *q = p; *q; q++)
        arena_put(lx, *q);
    for (int i = 0; i < consumed; i++)
        advance(lx);
    emit(lx, TK_PUNCT, line, text);
}

static void lex_violation(struct lexer *lx, uint32_t line, const char *what)
{
    policy_report_addf(lx->rep, lx->file, line, "lexer", "%s", what);
}

/* A comment starting at the cursor (// or / *), skipped; false when there is none. */
static bool skip_comment(struct lexer *lx)
{
    if (cur(lx) != '/')
        return false;
    char n = peek(lx, 1);
    if (n == '/') {
        while (lx->pos < lx->len && !is_nl(cur(lx)))
            advance(lx);
        return true;
    }
    if (n != '*')
        return false;
    uint32_t line = lx->line;
    advance(lx);
    advance(lx);
    for (;;) {
        if (lx->pos >= lx->len) {
            lex_violation(lx, line,
                          "unterminated /* comment: close it with */ (the compiler refuses it "
                          "too, and the policy cannot read past it)");
            lx->stop = true;
            return true;
        }
        if (cur(lx) == '*' && peek(lx, 1) == '/') {
            advance(lx);
            advance(lx);
            return true;
        }
        advance(lx);
    }
}

/* An ordinary string or character literal from its opening quote; an unterminated one ends at
 * the line's end, as GCC's lexer ends it. */
static void lex_quoted(struct lexer *lx, uint32_t line, uint32_t text)
{
    char q = cur(lx);
    advance(lx);
    while (lx->pos < lx->len) {
        char c = cur(lx);
        if (is_nl(c))
            break;
        advance(lx);
        if (c == '\\') {
            if (lx->pos < lx->len && !is_nl(cur(lx)))
                advance(lx);
        } else if (c == q) {
            break;
        }
    }
    emit(lx, TK_STRING, line, text);
}

/* A raw string literal R"delim( ... )delim" from its opening quote, read physically: the
 * standard reverts line splicing inside it. */
static void lex_raw(struct lexer *lx, uint32_t line, uint32_t text)
{
    const char *s = lx->src;
    size_t p = lx->pos + 1; /* after the quote */
    size_t d0 = p;
    while (p < lx->len && s[p] != '(' && p - d0 <= 16) {
        char c = s[p];
        if (c == ')' || c == '\\' || c == '"' || is_hspace(c) || c == ' ' || is_nl(c))
            break;
        p++;
    }
    if (p >= lx->len || s[p] != '(' || p - d0 > 16) {
        lex_violation(lx, line,
                      "malformed raw string delimiter: write R\"(...)\" or R\"tag(...)tag\" with "
                      "a tag of at most 16 letters, digits or punctuation");
        lex_quoted(lx, line, text);
        return;
    }
    size_t dlen = p - d0;
    uint32_t l = lx->line;
    for (size_t i = p + 1; i < lx->len; i++) {
        if (is_nl(s[i])) {
            if (s[i] == '\r' && i + 1 < lx->len && s[i + 1] == '\n')
                i++;
            l++;
            continue;
        }
        if (s[i] == ')' && i + 1 + dlen < lx->len && memcmp(s + i + 1, s + d0, dlen) == 0 &&
            s[i + 1 + dlen] == '"') {
            lx->pos = i + 2 + dlen;
            lx->line = l;
            struct cursor c = {lx->pos, lx->line};
            skip_splices(lx, &c);
            lx->pos = c.pos;
            lx->line = c.line;
            emit(lx, TK_STRING, line, text);
            return;
        }
    }
    lex_violation(lx, line,
                  "unterminated raw string literal: end it with )\" (or )tag\" for R\"tag(); the "
                  "policy cannot read past it");
    lx->stop = true;
}

static bool raw_prefix(const char *id)
{
    return !strcmp(id, "R") || !strcmp(id, "LR") || !strcmp(id, "uR") || !strcmp(id, "UR") ||
           !strcmp(id, "u8R");
}

static bool char_prefix(const char *id)
{
    return !strcmp(id, "L") || !strcmp(id, "u") || !strcmp(id, "U") || !strcmp(id, "u8");
}

static void lex_ident(struct lexer *lx)
{
    uint32_t line = lx->line, text = arena_start(lx);
    while (lx->pos < lx->len && is_ident_char((unsigned char)cur(lx))) {
        arena_put(lx, cur(lx));
        advance(lx);
    }
    const char *id = lx->arena + text;
    arena_put(lx, '\0');
    char c = cur(lx);
    if (c == '"' && raw_prefix(id)) {
        lx->arena_len = text;
        lex_raw(lx, line, text);
        return;
    }
    if ((c == '"' || c == '\'') && char_prefix(id)) {
        lx->arena_len = text;
        lex_quoted(lx, line, text);
        return;
    }
    lx->arena_len--; /* emit adds the NUL */
    emit(lx, TK_IDENT, line, text);
}

/* A preprocessing number: digits, letters, '.', exponent signs and digit separators. */
static void lex_number(struct lexer *lx)
{
    uint32_t line = lx->line, text = arena_start(lx);
    for (;;) {
        char c = cur(lx);
        if (lx->pos >= lx->len)
            break;
        if ((c == 'e' || c == 'E' || c == 'p' || c == 'P') &&
            (peek(lx, 1) == '+' || peek(lx, 1) == '-')) {
            arena_put(lx, c);
            advance(lx);
            arena_put(lx, cur(lx));
            advance(lx);
        } else if (c == '\'' && is_ident_char((unsigned char)peek(lx, 1))) {
            advance(lx); /* the separator is not part of the value */
        } else if (is_ident_char((unsigned char)c) || c == '.') {
            arena_put(lx, c);
            advance(lx);
        } else {
            break;
        }
    }
    emit(lx, TK_NUMBER, line, text);
}

static void skip_hspace_and_comments(struct lexer *lx)
{
    for (;;) {
        if (is_hspace(cur(lx)) && lx->pos < lx->len) {
            advance(lx);
            lx->space = true;
        } else if (cur(lx) == '/' && peek(lx, 1) == '*') {
            skip_comment(lx);
            lx->space = true;
            if (lx->stop)
                return;
        } else {
            return;
        }
    }
}

/* The operand of #include: a header name read as one token. */
static void lex_header(struct lexer *lx)
{
    skip_hspace_and_comments(lx);
    uint32_t line = lx->line, text = arena_start(lx);
    char open = cur(lx);
    if (open != '<' && open != '"') {
        struct tok *t = emit(lx, TK_HEADER, line, text);
        t->flags |= TF_COMPUTED;
        return;
    }
    char close = open == '<' ? '>' : '"';
    advance(lx);
    while (lx->pos < lx->len && cur(lx) != close && !is_nl(cur(lx))) {
        arena_put(lx, cur(lx));
        advance(lx);
    }
    if (cur(lx) != close) {
        lx->arena_len = text;
        struct tok *t = emit(lx, TK_HEADER, line, text);
        t->flags |= TF_COMPUTED;
        return;
    }
    advance(lx);
    struct tok *t = emit(lx, TK_HEADER, line, text);
    if (open == '<')
        t->flags |= TF_ANGLE;
}

static void lex_directive(struct lexer *lx, int hash_len)
{
    lx->dir = DIR_OTHER;
    emit_punct(lx, "#", hash_len);
    lx->toks[lx->n - 1].flags |= TF_HASH;
    skip_hspace_and_comments(lx);
    if (lx->stop || !is_ident_start((unsigned char)cur(lx)))
        return;
    size_t name_at = lx->n;
    lex_ident(lx);
    if (lx->n != name_at + 1 || lx->toks[name_at].kind != TK_IDENT)
        return;
    const char *name = lx->arena + lx->toks[name_at].text;
    uint8_t kind = DIR_OTHER;
    if (!strcmp(name, "include") || !strcmp(name, "include_next") || !strcmp(name, "import") ||
        !strcmp(name, "embed"))
        kind = DIR_INCLUDE;
    else if (!strcmp(name, "define"))
        kind = DIR_DEFINE;
    else if (!strcmp(name, "undef"))
        kind = DIR_UNDEF;
    lx->dir = kind;
    lx->toks[name_at - 1].dir = kind;
    lx->toks[name_at].dir = kind;
    if (kind == DIR_INCLUDE)
        lex_header(lx);
}

static void end_line(struct lexer *lx)
{
    if (lx->dir != DIR_NONE) {
        uint32_t text = arena_start(lx);
        emit(lx, TK_EOL, lx->line, text);
        lx->dir = DIR_NONE;
    }
    lx->line_start = true;
}

static void lex_punct(struct lexer *lx)
{
    char c = cur(lx), n1 = peek(lx, 1), n2 = peek(lx, 2);
    switch (c) {
    case ':':
        if (n1 == ':')
            return emit_punct(lx, "::", 2);
        if (n1 == '>')
            return emit_punct(lx, "]", 2);
        break;
    case '-':
        if (n1 == '>')
            return emit_punct(lx, "->", 2);
        break;
    case '#':
        if (n1 == '#')
            return emit_punct(lx, "##", 2);
        break;
    case '%':
        if (n1 == ':' && n2 == '%' && peek(lx, 3) == ':')
            return emit_punct(lx, "##", 4);
        if (n1 == ':')
            return emit_punct(lx, "#", 2);
        if (n1 == '>')
            return emit_punct(lx, "}", 2);
        break;
    case '<':
        if (n1 == '<' && n2 == '<')
            return emit_punct(lx, "<<<", 3);
        if (n1 == ':' && n2 == ':' && peek(lx, 3) != ':' && peek(lx, 3) != '>')
            return emit_punct(lx, "<", 1); /* C++11: <:: is < :: */
        if (n1 == ':')
            return emit_punct(lx, "[", 2);
        if (n1 == '%')
            return emit_punct(lx, "{", 2);
        break;
    case '>':
        if (n1 == '>' && n2 == '>')
            return emit_punct(lx, ">>>", 3);
        break;
    case '.':
        if (n1 == '.' && n2 == '.')
            return emit_punct(lx, "...", 3);
        break;
    default:
        break;
    }
    char one[2] = {c, '\0'};
    emit_punct(lx, one, 1);
}

static void lex_all(struct lexer *lx)
{
    struct cursor c0 = {0, 1};
    skip_splices(lx, &c0);
    lx->pos = c0.pos;
    lx->line = c0.line;
    lx->line_start = true;
    if (lx->len >= 3 && memcmp(lx->src, "\xef\xbb\xbf", 3) == 0 && lx->pos == 0)
        lx->pos = 3; /* UTF-8 byte order mark */
    while (lx->pos < lx->len && !lx->stop) {
        char c = cur(lx);
        if (is_nl(c)) {
            advance(lx);
            end_line(lx);
            lx->space = true;
            continue;
        }
        if (is_hspace(c)) {
            advance(lx);
            lx->space = true;
            continue;
        }
        if (skip_comment(lx)) {
            lx->space = true;
            continue;
        }
        if (lx->line_start && (c == '#' || (c == '%' && peek(lx, 1) == ':' &&
                                            !(peek(lx, 2) == '%' && peek(lx, 3) == ':')))) {
            lx->line_start = false;
            lex_directive(lx, c == '#' ? 1 : 2);
            continue;
        }
        lx->line_start = false;
        uint32_t line = lx->line, text = arena_start(lx);
        if (is_ident_start((unsigned char)c)) {
            lex_ident(lx);
        } else if (is_digit(c) || (c == '.' && is_digit(peek(lx, 1)))) {
            lex_number(lx);
        } else if (c == '"' || c == '\'') {
            lex_quoted(lx, line, text);
        } else if (c == '\\') {
            char n = peek(lx, 1);
            lex_violation(lx, line,
                          n == 'u' || n == 'U'
                              ? "universal character name (\\u or \\U) outside a literal: write "
                                "identifiers in plain characters"
                              : "stray backslash outside a literal (a line continuation is a "
                                "backslash at the very end of a line)");
            advance(lx);
        } else {
            lex_punct(lx);
        }
    }
    end_line(lx);
}

/* ---- the checker ---- */

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
    const struct lexer *lx;
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

static const struct tok *T(const struct checker *ck, size_t i)
{
    return &ck->lx->toks[i];
}

static const char *txt(const struct checker *ck, size_t i)
{
    return ck->lx->arena + ck->lx->toks[i].text;
}

static bool is_punct(const struct checker *ck, size_t i, size_t end, const char *p)
{
    return i < end && T(ck, i)->kind == TK_PUNCT && strcmp(txt(ck, i), p) == 0;
}

static bool is_ident(const struct checker *ck, size_t i, size_t end, const char *p)
{
    return i < end && T(ck, i)->kind == TK_IDENT && (!p || strcmp(txt(ck, i), p) == 0);
}

static bool comp_is(struct comp c, const char *s)
{
    return policy__eq(c.p, c.len, s);
}

static bool in_set(const char *s, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, set[i]) == 0)
            return true;
    return false;
}

static bool comp_in(struct comp c, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (comp_is(c, set[i]))
            return true;
    return false;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool is_macro(const struct checker *ck, const char *name)
{
    return ck->nmacros &&
           bsearch(&name, ck->macros, ck->nmacros, sizeof(*ck->macros), cmp_str) != NULL;
}

static void violation(struct checker *ck, size_t i, const char *rule, const char *fmt, ...)
    CA_PRINTF(4, 5);

static void violation(struct checker *ck, size_t i, const char *rule, const char *fmt, ...)
{
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    policy_report_addf(ck->rep, ck->file, T(ck, i)->line, rule, "%s", msg);
}

static void hit(struct checker *ck, size_t i, struct comp name, const struct policy__hit *h)
{
    policy__add_hit(ck->rep, ck->file, T(ck, i)->line, name.p, name.len, h);
}

/* ---- vocabularies ---- */

/* ATen tensor methods that compute, copy, convert or reshape (a member call on a tensor). */
static const char *const tensor_compute[] = {
    "abs",
    "absolute",
    "acos",
    "acosh",
    "add",
    "addbmm",
    "addcdiv",
    "addcmul",
    "addmm",
    "addmv",
    "addr",
    "align_as",
    "align_to",
    "all",
    "allclose",
    "amax",
    "amin",
    "aminmax",
    "angle",
    "any",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "argmax",
    "argmin",
    "argsort",
    "argwhere",
    "as_strided",
    "as_strided_scatter",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "backward",
    "baddbmm",
    "bernoulli",
    "bfloat16",
    "bincount",
    "bitwise_and",
    "bitwise_left_shift",
    "bitwise_not",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "bmm",
    "broadcast_to",
    "byte",
    "ceil",
    "cholesky",
    "cholesky_inverse",
    "cholesky_solve",
    "chunk",
    "clamp",
    "clamp_max",
    "clamp_min",
    "clip",
    "clone",
    "coalesce",
    "conj",
    "conj_physical",
    "contiguous",
    "copysign",
    "corrcoef",
    "cos",
    "cosh",
    "count_nonzero",
    "cov",
    "cpu",
    "cross",
    "cuda",
    "cummax",
    "cummin",
    "cumprod",
    "cumsum",
    "deg2rad",
    "dequantize",
    "det",
    "diag",
    "diag_embed",
    "diagflat",
    "diagonal",
    "diagonal_scatter",
    "diff",
    "digamma",
    "dist",
    "div",
    "divide",
    "dot",
    "dsplit",
    "eq",
    "equal",
    "erf",
    "erfc",
    "erfinv",
    "exp",
    "exp2",
    "expand",
    "expand_as",
    "expm1",
    "fix",
    "flatten",
    "flip",
    "fliplr",
    "flipud",
    "float_power",
    "floor",
    "floor_divide",
    "fmax",
    "fmin",
    "fmod",
    "frac",
    "frexp",
    "gather",
    "gcd",
    "ge",
    "geqrf",
    "ger",
    "greater",
    "greater_equal",
    "gt",
    "half",
    "hardshrink",
    "heaviside",
    "histc",
    "histogram",
    "hsplit",
    "hypot",
    "i0",
    "igamma",
    "igammac",
    "index_add",
    "index_copy",
    "index_fill",
    "index_put",
    "index_reduce",
    "index_select",
    "inner",
    "int_repr",
    "inverse",
    "isclose",
    "isfinite",
    "isinf",
    "isnan",
    "isneginf",
    "isposinf",
    "isreal",
    "istft",
    "item",
    "kron",
    "kthvalue",
    "lcm",
    "ldexp",
    "le",
    "lerp",
    "less",
    "less_equal",
    "lgamma",
    "log",
    "log10",
    "log1p",
    "log2",
    "log_softmax",
    "logaddexp",
    "logaddexp2",
    "logcumsumexp",
    "logdet",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logit",
    "logsumexp",
    "lt",
    "lu",
    "lu_solve",
    "masked_fill",
    "masked_scatter",
    "masked_select",
    "matmul",
    "matrix_exp",
    "matrix_power",
    "max",
    "maximum",
    "mean",
    "median",
    "min",
    "minimum",
    "mm",
    "mode",
    "moveaxis",
    "movedim",
    "msort",
    "mul",
    "multinomial",
    "multiply",
    "mv",
    "mvlgamma",
    "nan_to_num",
    "nanmean",
    "nanmedian",
    "nanquantile",
    "nansum",
    "narrow",
    "narrow_copy",
    "ne",
    "neg",
    "negative",
    "new_empty",
    "new_empty_strided",
    "new_full",
    "new_ones",
    "new_tensor",
    "new_zeros",
    "nextafter",
    "nonzero",
    "norm",
    "not_equal",
    "numpy",
    "orgqr",
    "ormqr",
    "outer",
    "permute",
    "pin_memory",
    "pinverse",
    "polygamma",
    "positive",
    "pow",
    "prod",
    "put",
    "qr",
    "quantile",
    "rad2deg",
    "ravel",
    "reciprocal",
    "relu",
    "remainder",
    "renorm",
    "repeat",
    "repeat_interleave",
    "reshape",
    "reshape_as",
    "resolve_conj",
    "resolve_neg",
    "roll",
    "rot90",
    "round",
    "rsqrt",
    "scatter",
    "scatter_add",
    "scatter_reduce",
    "select",
    "select_scatter",
    "sgn",
    "sigmoid",
    "sign",
    "signbit",
    "sin",
    "sinc",
    "sinh",
    "slice_scatter",
    "slogdet",
    "smm",
    "softmax",
    "sort",
    "split",
    "split_with_sizes",
    "sqrt",
    "square",
    "squeeze",
    "sspaddmm",
    "std",
    "stft",
    "sub",
    "subtract",
    "sum",
    "sum_to_size",
    "svd",
    "swapaxes",
    "swapdims",
    "t",
    "take",
    "take_along_dim",
    "tan",
    "tanh",
    "tensor_split",
    "tile",
    "to",
    "to_dense",
    "to_mkldnn",
    "to_sparse",
    "tolist",
    "topk",
    "trace",
    "transpose",
    "triangular_solve",
    "tril",
    "triu",
    "true_divide",
    "trunc",
    "type_as",
    "unbind",
    "unflatten",
    "unfold",
    "unique",
    "unique_consecutive",
    "unsafe_chunk",
    "unsafe_split",
    "unsqueeze",
    "values",
    "var",
    "vdot",
    "view",
    "view_as",
    "vsplit",
    "where",
    "xlogy",
};

/* Unqualified calls that argument-dependent lookup resolves to ATen for tensor arguments. */
static const char *const aten_adl[] = {
    "matmul",
    "mm",
    "bmm",
    "addmm",
    "addmv",
    "baddbmm",
    "einsum",
    "softmax",
    "log_softmax",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "linear",
    "layer_norm",
    "batch_norm",
    "group_norm",
    "instance_norm",
    "dropout",
    "clone",
    "contiguous",
    "cat",
    "concat",
    "concatenate",
    "stack",
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "full_like",
    "rand",
    "randn",
    "randint",
    "rand_like",
    "randn_like",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "index_select",
    "gather",
    "scatter",
    "masked_fill",
    "narrow",
    "reshape",
    "transpose",
    "permute",
    "flatten",
    "squeeze",
    "unsqueeze",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "embedding",
    "mse_loss",
    "cross_entropy",
};

/* torch::X and at::X that are tensor handling. */
static const char *const torch_allowed[] = {
    "Tensor",        "TensorBase",    "empty",       "empty_like",
    "empty_strided", "ScalarType",    "Dtype",       "Device",
    "DeviceType",    "DeviceIndex",   "DeviceGuard", "OptionalDeviceGuard",
    "TensorOptions", "IntArrayRef",   "ArrayRef",    "Layout",
    "MemoryFormat",  "Scalar",        "Half",        "BFloat16",
    "optional",      "nullopt",       "dtype",       "device",
    "layout",        "memory_format", "cuda",
};

static const char *const at_cuda_allowed[] = {
    "getCurrentCUDAStream",
    "CUDAStream",
    "getCurrentDeviceProperties",
    "getDeviceProperties",
    "getCurrentCUDABlasHandle",
    "getCurrentCUDABlasLtHandle",
    "CUDAGuard",
    "OptionalCUDAGuard",
    "warp_size",
    "getNumGPUs",
    "current_device",
    "device_count",
    "getCUDABlasLtWorkspace",
    "getCUDABlasLtWorkspaceSize",
    "getChosenWorkspaceSize",
};

static const char *const c10_allowed[] = {
    "Half",     "BFloat16",       "Float8_e4m3fn", "Float8_e5m2",    "ScalarType",
    "Device",   "DeviceType",     "DeviceIndex",   "IntArrayRef",    "ArrayRef",
    "optional", "nullopt",        "irange",        "Error",          "TensorOptions",
    "Layout",   "MemoryFormat",   "Scalar",        "SymInt",         "elementSize",
    "toString", "isFloatingType", "isComplexType", "isIntegralType", "complex",
    "cuda",
};

static const char *const c10_cuda_allowed[] = {
    "CUDAGuard",  "OptionalCUDAGuard", "getCurrentCUDAStream",
    "CUDAStream", "current_device",    "device_count",
};

/* Allocations that also write the memory. */
static const char *const torch_fills[] = {
    "zeros",    "ones",     "full",    "zeros_like", "ones_like",     "full_like",
    "rand",     "randn",    "randint", "rand_like",  "randn_like",    "arange",
    "linspace", "logspace", "eye",     "tensor",     "scalar_tensor",
};

static const char *const pybind_allowed[] = {
    "module_",
    "module",
    "arg",
    "arg_v",
    "kw_only",
    "pos_only",
    "call_guard",
    "gil_scoped_release",
    "return_value_policy",
    "none",
    "doc",
    "name",
    "overload_cast",
    "value_error",
    "type_error",
    "index_error",
};

static const char *const pybind_members_denied[] = {
    "attr", "import", "add_object", "def_submodule", "reload", "inc_ref", "dec_ref", "ptr", "cast",
};

/* Names a #define may not take: keywords, the namespaces and names the checks rely on. */
static const char *const protected_names[] = {
    "alignas",
    "alignof",
    "asm",
    "auto",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "class",
    "const",
    "constexpr",
    "consteval",
    "constinit",
    "const_cast",
    "continue",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "nullptr",
    "operator",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "while",
    "std",
    "torch",
    "at",
    "c10",
    "caffe2",
    "pybind11",
    "py",
    "cub",
    "cuda",
    "cooperative_groups",
    "data_ptr",
    "const_data_ptr",
    "mutable_data_ptr",
    "sizes",
    "size",
    "dim",
    "numel",
    "stride",
    "strides",
    "scalar_type",
    "dtype",
    "device",
    "is_cuda",
    "is_contiguous",
    "options",
    "def",
    "arg",
    "module_",
    "getCurrentCUDAStream",
    "CUDAGuard",
    "OptionalCUDAGuard",
    "empty",
    "empty_like",
    "empty_strided",
    "stream",
};

static const char *const asm_words[] = {"asm", "__asm__", "__asm"};
static const char *const qualifier_words[] = {"__host__", "__device__", "__global__",
                                              "__location__"};

/* ---- rules ---- */

static bool tensor_method_denied(const char *name)
{
    size_t n = strlen(name);
    if (n >= 2 && name[n - 1] == '_' && name[n - 2] != '_')
        return true; /* add_, copy_, fill_, zero_, resize_, set_: in-place operations */
    return in_set(name, tensor_compute, ARRAY_SIZE(tensor_compute));
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
    else if (in_set(name, pybind_members_denied, ARRAY_SIZE(pybind_members_denied)))
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
    if (n >= 2 && comp_in(c[1], torch_fills, ARRAY_SIZE(torch_fills)))
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
             comp_in(c[1], torch_allowed, ARRAY_SIZE(torch_allowed));
        if (ok && comp_is(c[1], "cuda"))
            ok = n >= 3 && comp_is(c[0], "at") &&
                 comp_in(c[2], at_cuda_allowed, ARRAY_SIZE(at_cuda_allowed));
        if (ok && n >= 3 && (comp_is(c[1], "Tensor") || comp_is(c[1], "TensorBase"))) {
            char m[128];
            int w = snprintf(m, sizeof(m), "%.*s", (int)(c[2].len > 100 ? 100 : c[2].len), c[2].p);
            ok = w > 0 && !tensor_method_denied(m);
        }
    } else if (comp_is(c[0], "c10")) {
        ok = (c[1].len >= 2 && c[1].p[0] == 'k' && c[1].p[1] >= 'A' && c[1].p[1] <= 'Z') ||
             comp_in(c[1], c10_allowed, ARRAY_SIZE(c10_allowed));
        if (ok && comp_is(c[1], "cuda"))
            ok = n >= 3 && comp_in(c[2], c10_cuda_allowed, ARRAY_SIZE(c10_cuda_allowed));
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
        bool ok = comp_in(full[1], pybind_allowed, ARRAY_SIZE(pybind_allowed));
        for (size_t k = 2; ok && k < nfull; k++)
            ok = !comp_in(full[k], pybind_members_denied, ARRAY_SIZE(pybind_members_denied));
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
            comp_in(comps[0], aten_adl, ARRAY_SIZE(aten_adl))) {
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
        const struct tok *t = T(ck, j);
        if (t->kind != TK_PUNCT)
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
        if (T(ck, j)->kind == TK_PUNCT &&
            (!strcmp(p, "(") || !strcmp(p, ")") || !strcmp(p, "<") || !strcmp(p, ">")))
            continue;
        if (T(ck, j)->kind == TK_IDENT &&
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
    if (T(ck, j)->kind == TK_NUMBER ||
        (T(ck, j)->kind == TK_IDENT && in_set(txt(ck, j), int_words, ARRAY_SIZE(int_words))))
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
static size_t check_token(struct checker *ck, size_t i, size_t start, size_t end, bool in_define)
{
    const struct tok *t = T(ck, i);
    const char *p = txt(ck, i);
    if (t->kind == TK_PUNCT) {
        if (!strcmp(p, "##")) {
            violation(ck, i, "macro",
                      "token pasting (##) can build names the policy check cannot see: write "
                      "names out in full");
        } else if (!strcmp(p, "<<<")) {
            if (ck->cu)
                check_launch(ck, i, end);
        } else if (!strcmp(p, ".") || !strcmp(p, "->") || !strcmp(p, "::")) {
            bool ok_next =
                i + 1 < end && (T(ck, i + 1)->kind == TK_IDENT || is_punct(ck, i + 1, end, "*") ||
                                is_punct(ck, i + 1, end, "~"));
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
    if (t->kind != TK_IDENT)
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
    if (in_set(p, asm_words, ARRAY_SIZE(asm_words))) {
        check_asm(ck, i, in_define);
        return i + 1;
    }
    if (!strcmp(p, "cudaStream_t"))
        check_stream_cast(ck, i, end);
    if (in_set(p, qualifier_words, ARRAY_SIZE(qualifier_words))) {
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
            if (T(ck, j)->kind != TK_IDENT)
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

/* ---- directives ---- */

static const char *const std_headers[] = {
    "cstdint",     "cstddef",       "cstdio",
    "cstdlib",     "cstring",       "cmath",
    "cfloat",      "climits",       "cassert",
    "cinttypes",   "cerrno",        "cctype",
    "cstdarg",     "algorithm",     "array",
    "atomic",      "bit",           "bitset",
    "complex",     "functional",    "initializer_list",
    "iostream",    "iomanip",       "iterator",
    "limits",      "map",           "memory",
    "mutex",       "new",           "numeric",
    "numbers",     "optional",      "ostream",
    "sstream",     "stdexcept",     "string",
    "string_view", "tuple",         "type_traits",
    "typeinfo",    "unordered_map", "unordered_set",
    "utility",     "variant",       "vector",
    "set",         "deque",         "list",
    "queue",       "stack",         "exception",
    "assert.h",    "float.h",       "limits.h",
    "math.h",      "stdbool.h",     "stddef.h",
    "stdint.h",    "stdio.h",       "stdlib.h",
    "string.h",    "inttypes.h",    "errno.h",
    "stdarg.h",    "ctype.h",
};

static const char *const cuda_headers[] = {
    "cuda_runtime.h",
    "cuda_runtime_api.h",
    "cuda.h",
    "cudaTypedefs.h",
    "cuda_fp16.h",
    "cuda_fp16.hpp",
    "cuda_bf16.h",
    "cuda_bf16.hpp",
    "cuda_fp8.h",
    "cuda_fp6.h",
    "cuda_fp4.h",
    "mma.h",
    "cooperative_groups.h",
    "cuda_pipeline.h",
    "cuda_pipeline_primitives.h",
    "cuda_awbarrier.h",
    "cuda_awbarrier_primitives.h",
    "cuda_awbarrier_helpers.h",
    "device_launch_parameters.h",
    "device_functions.h",
    "device_types.h",
    "driver_types.h",
    "vector_types.h",
    "vector_functions.h",
    "math_constants.h",
    "math_functions.h",
    "host_defines.h",
    "builtin_types.h",
    "library_types.h",
    "cuComplex.h",
    "cuda_occupancy.h",
    "texture_types.h",
    "surface_types.h",
    "channel_descriptor.h",
    "cuda_texture_types.h",
    "cuda_surface_types.h",
    "texture_fetch_functions.h",
    "surface_functions.h",
    "cublas_v2.h",
    "cublasLt.h",
    "cublas_api.h",
    "cudnn.h",
};

static const char *const cuda_header_dirs[] = {"cooperative_groups/", "cub/", "cuda/", "nv/"};

static const char *const binding_headers[] = {
    "torch/extension.h",     "ATen/cuda/CUDAContext.h",  "c10/cuda/CUDAGuard.h",
    "c10/cuda/CUDAStream.h", "c10/cuda/CUDAException.h", "pybind11/pybind11.h",
    "pybind11/stl.h",
};

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
    if (in_set(h, std_headers, ARRAY_SIZE(std_headers)) ||
        in_set(h, cuda_headers, ARRAY_SIZE(cuda_headers)))
        return true;
    for (size_t i = 0; i < ARRAY_SIZE(cuda_header_dirs); i++)
        if (starts(h, cuda_header_dirs[i]))
            return true;
    if (starts(h, "sm_") && ends(h, ".h"))
        return true; /* sm_*_intrinsics.h, sm_*_atomic_functions.h */
    if (starts(h, "cudnn_") && ends(h, ".h"))
        return true; /* cuDNN 8/9's split headers */
    /* load_inline puts <torch/types.h> before a cuda source: a subset of torch/extension.h. */
    if (ck->torch && ck->cu && !strcmp(h, "torch/types.h"))
        return true;
    return ck->torch && in_set(h, binding_headers, ARRAY_SIZE(binding_headers));
}

static bool header_path_safe(const char *h)
{
    if (!h[0] || h[0] == '/' || strstr(h, "..") || strstr(h, "//"))
        return false;
    for (const char *p = h; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' ||
              c == '.' || c == '/' || c == '-' || c == '+'))
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
    if (!hdr_tok || (T(ck, hdr_tok)->flags & TF_COMPUTED)) {
        violation(ck, at, "include",
                  "#%s must name a header directly (<header> or \"binding_registry.h\"): "
                  "computed includes hide which file is read",
                  dname);
        return;
    }
    const char *h = txt(ck, hdr_tok);
    bool angle = T(ck, hdr_tok)->flags & TF_ANGLE;
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
    if (in_set(name, protected_names, ARRAY_SIZE(protected_names)))
        return true;
    /* torch exists only in bindings: there a macro could rename a tensor method */
    return ck->torch && (in_set(name, tensor_compute, ARRAY_SIZE(tensor_compute)) ||
                         in_set(name, torch_allowed, ARRAY_SIZE(torch_allowed)) ||
                         in_set(name, pybind_allowed, ARRAY_SIZE(pybind_allowed)));
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
    if (is_punct(ck, body, eol, "(") && !(T(ck, body)->flags & TF_SPACE)) {
        size_t j = body + 1;
        for (; j < eol && !is_punct(ck, j, eol, ")"); j++)
            if (T(ck, j)->kind == TK_IDENT && nparams < ARRAY_SIZE(params))
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
        j = check_token(ck, j, body, eol, true);
    return eol + 1;
}

static size_t find_eol(const struct checker *ck, size_t i)
{
    size_t n = ck->lx->n;
    while (i < n && T(ck, i)->kind != TK_EOL)
        i++;
    return i;
}

static size_t check_directive(struct checker *ck, size_t hash)
{
    size_t eol = find_eol(ck, hash);
    size_t name = hash + 1;
    if (name >= eol || T(ck, name)->kind != TK_IDENT)
        return eol + 1;
    switch (T(ck, name)->dir) {
    case DIR_INCLUDE:
        check_include(ck, name,
                      name + 1 < eol && T(ck, name + 1)->kind == TK_HEADER ? name + 1 : 0);
        return eol + 1;
    case DIR_DEFINE:
        return check_define(ck, name, eol, false);
    case DIR_UNDEF:
        return check_define(ck, name, eol, true);
    default:
        break;
    }
    /* #if, #error, #line: their tokens are not code. #pragma can name symbols. */
    bool pragma = strcmp(txt(ck, name), "pragma") == 0;
    for (size_t j = name + 1; j < eol; j++) {
        if (is_punct(ck, j, eol, "##")) {
            violation(ck, j, "macro", "token pasting (##) outside a macro body");
        } else if (pragma && T(ck, j)->kind == TK_IDENT) {
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

static void collect_macros(struct checker *ck)
{
    size_t n = ck->lx->n, cap = 0;
    for (size_t i = 0; i + 2 < n; i++) {
        if (!(T(ck, i)->flags & TF_HASH) || T(ck, i + 1)->dir != DIR_DEFINE ||
            T(ck, i + 2)->kind != TK_IDENT)
            continue;
        ALLOC_GROW(ck->macros, ck->nmacros + 1, cap);
        ck->macros[ck->nmacros++] = txt(ck, i + 2);
    }
    if (ck->nmacros)
        qsort(ck->macros, ck->nmacros, sizeof(*ck->macros), cmp_str);
}

static void check_tokens(struct checker *ck)
{
    collect_macros(ck);
    size_t n = ck->lx->n;
    for (size_t i = 0; i < n;) {
        const struct tok *t = T(ck, i);
        if (t->flags & TF_HASH)
            i = check_directive(ck, i);
        else if (t->dir != DIR_NONE || t->kind == TK_EOL)
            i++;
        else
            i = check_token(ck, i, 0, n, false);
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
    struct lexer lx = {
        .src = code,
        .len = len,
        .line = 1,
        .arena_cap = 2 * len + 64,
        .file = name,
        .rep = rep,
    };
    lx.arena = xmalloc(lx.arena_cap);
    lex_all(&lx);
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
    free(lx.arena);
    free(lx.toks);
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
