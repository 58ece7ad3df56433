/*
 * policy_lex.c - the lexer of the source policy: C++/CUDA source into preprocessing tokens, the
 * way GCC's preprocessor reads it (nvcc runs the host compiler's preprocessor first), so that what
 * the checker (policy_src.c) reads is what the compiler will read.
 *
 * Line splices (a backslash, optional spaces, a newline) are removed everywhere except inside raw
 * string literals, where they are kept as the standard says; \r\n, \r and \n all end lines;
 * comments and string, character and raw string literals become single tokens whose contents never
 * count; digit separators stay inside numbers; digraphs become the tokens they stand for;
 * directive lines are marked, and an #include's header name is read as one token. Where the lexer
 * could disagree with the compiler (an unterminated comment or raw string, a universal character
 * name or a stray backslash outside literals) it reports a "lexer" violation instead of guessing,
 * and stops.
 *
 * Invariants: token text lives in one arena sized from the input (the text of every token is at
 * most its physical length, plus a NUL), so it never grows; the input is never read past len.
 */
#include "eval/policy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "eval/policy_internal.h"
#include "core/banned.h"

struct lexer {
    const char *src;
    size_t len;
    size_t pos; /* never left on a line splice */
    uint32_t line;
    char *arena;
    size_t arena_len, arena_cap;
    struct policy__tok *toks;
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

static struct policy__tok *emit(struct lexer *lx, enum policy__tok_kind kind, uint32_t line,
                                uint32_t text)
{
    arena_put(lx, '\0');
    ALLOC_GROW(lx->toks, lx->n + 1, lx->alloc);
    struct policy__tok *t = &lx->toks[lx->n++];
    t->kind = (uint8_t)kind;
    t->dir = lx->dir;
    t->flags = lx->space ? POLICY__TF_SPACE : 0;
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
    emit(lx, POLICY__TK_PUNCT, line, text);
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
    emit(lx, POLICY__TK_STRING, line, text);
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
            emit(lx, POLICY__TK_STRING, line, text);
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
    emit(lx, POLICY__TK_IDENT, line, text);
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
    emit(lx, POLICY__TK_NUMBER, line, text);
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
        struct policy__tok *t = emit(lx, POLICY__TK_HEADER, line, text);
        t->flags |= POLICY__TF_COMPUTED;
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
        struct policy__tok *t = emit(lx, POLICY__TK_HEADER, line, text);
        t->flags |= POLICY__TF_COMPUTED;
        return;
    }
    advance(lx);
    struct policy__tok *t = emit(lx, POLICY__TK_HEADER, line, text);
    if (open == '<')
        t->flags |= POLICY__TF_ANGLE;
}

static void lex_directive(struct lexer *lx, int hash_len)
{
    lx->dir = POLICY__DIR_OTHER;
    emit_punct(lx, "#", hash_len);
    lx->toks[lx->n - 1].flags |= POLICY__TF_HASH;
    skip_hspace_and_comments(lx);
    if (lx->stop || !is_ident_start((unsigned char)cur(lx)))
        return;
    size_t name_at = lx->n;
    lex_ident(lx);
    if (lx->n != name_at + 1 || lx->toks[name_at].kind != POLICY__TK_IDENT)
        return;
    const char *name = lx->arena + lx->toks[name_at].text;
    uint8_t kind = POLICY__DIR_OTHER;
    if (!strcmp(name, "include") || !strcmp(name, "include_next") || !strcmp(name, "import") ||
        !strcmp(name, "embed"))
        kind = POLICY__DIR_INCLUDE;
    else if (!strcmp(name, "define"))
        kind = POLICY__DIR_DEFINE;
    else if (!strcmp(name, "undef"))
        kind = POLICY__DIR_UNDEF;
    lx->dir = kind;
    lx->toks[name_at - 1].dir = kind;
    lx->toks[name_at].dir = kind;
    if (kind == POLICY__DIR_INCLUDE)
        lex_header(lx);
}

static void end_line(struct lexer *lx)
{
    if (lx->dir != POLICY__DIR_NONE) {
        uint32_t text = arena_start(lx);
        emit(lx, POLICY__TK_EOL, lx->line, text);
        lx->dir = POLICY__DIR_NONE;
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

/* ---- entry point ---- */

void policy__lex(const char *file, const char *code, size_t len, struct policy_report *rep,
                 struct policy__tokens *out)
{
    struct lexer lx = {
        .src = code,
        .len = len,
        .line = 1,
        .arena_cap = 2 * len + 64,
        .file = file,
        .rep = rep,
    };
    lx.arena = xmalloc(lx.arena_cap);
    lex_all(&lx);
    *out = (struct policy__tokens){.arena = lx.arena, .toks = lx.toks, .n = lx.n};
}

void policy__tokens_release(struct policy__tokens *t)
{
    free(t->arena);
    free(t->toks);
    memset(t, 0, sizeof(*t));
}
