/*
 * compile_split_lex.c - the tokens of a cuda source for the cut (compile_split.c): identifiers,
 * numbers, strings (raw strings and prefixes too), punctuation one character a token, and each
 * directive as one token to the end of its logical line; comments and splices dropped. Then the
 * helpers every later step reads tokens with, and bracket matching with the nesting checked.
 *
 * Nothing the lexer does not recognise is guessed at: an unterminated comment or string, or
 * too many tokens, declines the cut.
 */
#include "eval/compile_internal.h"

#include <string.h>

#include "core/util.h"
#include "core/banned.h"

/* Tokens of one source: a 4 MiB source has fewer. */
#define TOKENS_MAX ((size_t)1 << 22)

static bool ident_start(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool compile__cut_ident_char(char c)
{
    return ident_start(c) || (c >= '0' && c <= '9');
}

static void push_tok(struct compile__cut *s, enum compile__tok_kind k, size_t off, size_t len,
                     size_t prev_end)
{
    ALLOC_GROW(s->t, s->n + 1, s->talloc);
    s->t[s->n++] =
        (struct compile__tok){.kind = k, .off = off, .len = len, .glued = prev_end == off};
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

int compile__cut_lex(struct compile__cut *s)
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
                return compile__cut_decline(s, "an unterminated comment");
            i = (size_t)(e - p) + 2;
            continue;
        }
        if (s->n >= TOKENS_MAX)
            return compile__cut_decline(s, "over %zu tokens", TOKENS_MAX);
        size_t start = i;
        enum compile__tok_kind k = COMPILE__TK_PUNCT;
        if (c == '#' && line_start) {
            i = directive_end(p, n, i);
            k = COMPILE__TK_DIRECTIVE;
        } else if (ident_start(c)) {
            while (i < n && compile__cut_ident_char(p[i]))
                i++;
            k = COMPILE__TK_IDENT;
            if (i < n && (p[i] == '"' || p[i] == '\'') && string_prefix(p + start, i - start)) {
                size_t e = p[i - 1] == 'R' && p[i] == '"' ? raw_end(p, n, i) : quoted_end(p, n, i);
                if (!e)
                    return compile__cut_decline(s, "an unterminated string");
                i = e;
                k = COMPILE__TK_STRING;
            }
        } else if ((c >= '0' && c <= '9') ||
                   (c == '.' && i + 1 < n && p[i + 1] >= '0' && p[i + 1] <= '9')) {
            /* A pp-number: digits, letters, dots, digit separators, signed exponents. */
            for (i++; i < n;) {
                if (compile__cut_ident_char(p[i]) || p[i] == '.')
                    i++;
                else if (p[i] == '\'' && i + 1 < n && compile__cut_ident_char(p[i + 1]))
                    i += 2;
                else if ((p[i] == '+' || p[i] == '-') && strchr("eEpP", p[i - 1]))
                    i++;
                else
                    break;
            }
            k = COMPILE__TK_NUMBER;
        } else if (c == '"' || c == '\'') {
            size_t e = quoted_end(p, n, i);
            if (!e)
                return compile__cut_decline(s, "an unterminated string or character literal");
            i = e;
            k = COMPILE__TK_STRING;
        } else {
            i++;
        }
        push_tok(s, k, start, i - start, prev_end);
        prev_end = i;
        line_start = false;
    }
    return 0;
}

struct sv compile__cut_tok_sv(const struct compile__cut *s, size_t i)
{
    return sv_from(s->src.p + s->t[i].off, s->t[i].len);
}

size_t compile__cut_tok_end(const struct compile__cut *s, size_t i)
{
    return s->t[i].off + s->t[i].len;
}

bool compile__cut_is_punct(const struct compile__cut *s, size_t i, char c)
{
    return i < s->n && s->t[i].kind == COMPILE__TK_PUNCT && s->src.p[s->t[i].off] == c;
}

bool compile__cut_is_ident(const struct compile__cut *s, size_t i, const char *name)
{
    return i < s->n && s->t[i].kind == COMPILE__TK_IDENT &&
           sv_eq_cstr(compile__cut_tok_sv(s, i), name);
}

/* Three glued c from i: "<<<" or ">>>". */
bool compile__cut_triple(const struct compile__cut *s, size_t i, char c)
{
    return compile__cut_is_punct(s, i, c) && compile__cut_is_punct(s, i + 1, c) &&
           compile__cut_is_punct(s, i + 2, c) && s->t[i + 1].glued && s->t[i + 2].glued;
}

/* "::" from i. */
bool compile__cut_scope_op(const struct compile__cut *s, size_t i)
{
    return compile__cut_is_punct(s, i, ':') && compile__cut_is_punct(s, i + 1, ':') &&
           s->t[i + 1].glued;
}

/* A launch's "<<<" at i (not "operator<< <"). */
bool compile__cut_launch_at(const struct compile__cut *s, size_t i)
{
    return compile__cut_triple(s, i, '<') &&
           !(i > 0 && compile__cut_is_ident(s, i - 1, "operator"));
}

/* The bracket closing the '(', '[' or '{' at i, the nesting checked; SIZE_MAX: none. */
size_t compile__cut_match(const struct compile__cut *s, size_t i)
{
    char stack[256];
    size_t depth = 0;
    for (size_t j = i; j < s->n; j++) {
        if (s->t[j].kind != COMPILE__TK_PUNCT)
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
size_t compile__cut_match_angle(const struct compile__cut *s, size_t i)
{
    size_t depth = 0;
    for (size_t j = i; j < s->n; j++) {
        if (compile__cut_is_punct(s, j, '(') || compile__cut_is_punct(s, j, '[') ||
            compile__cut_is_punct(s, j, '{')) {
            size_t e = compile__cut_match(s, j);
            if (e == SIZE_MAX)
                return SIZE_MAX;
            j = e;
        } else if (compile__cut_is_punct(s, j, '<')) {
            depth++;
        } else if (compile__cut_is_punct(s, j, '>')) {
            if (depth == 0 || --depth == 0)
                return depth == 0 ? j : SIZE_MAX;
        } else if (compile__cut_is_punct(s, j, ';') || compile__cut_is_punct(s, j, '}') ||
                   compile__cut_is_punct(s, j, ')')) {
            return SIZE_MAX;
        }
    }
    return SIZE_MAX;
}
