/*
 * tool_text.c - what every tool writes its result with: bounded output into
 * res->text (tools__out*, never past TOOLS__BODY_MAX), UTF-8-safe cuts, line
 * and numbered-line helpers, binary and line-count probes, and typed access
 * to a call's validated arguments.
 */
#include "tools/tools_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/log.h"
#include "workspace/workspace.h"
#include "core/banned.h"

/* ---- text helpers ---- */

int tools__out(struct tool_result *res, const char *p, size_t n)
{
    if (res->text.len + n > TOOLS__BODY_MAX)
        return CA_ETOOBIG;
    if (buf_add(&res->text, p, n))
        BUG("tool text over its limit below the body budget");
    return 0;
}

int tools__outf(struct tool_result *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        BUG("out of memory formatting tool output");
    int rc = tools__out(res, s, (size_t)n);
    free(s);
    return rc;
}

void tools__out_tail(struct tool_result *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vaddf(&res->text, fmt, ap);
    va_end(ap);
    (void)rc; /* markers are short and the body budget leaves them room */
}

size_t tools__utf8_cut(const char *p, size_t n, size_t max)
{
    if (n <= max)
        return n;
    size_t k = max;
    while (k > 0 && ((unsigned char)p[k] & 0xC0) == 0x80)
        k--;
    return k;
}

/* Characters (code points) in p[0..n), counting lead bytes. */
static size_t utf8_chars(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

int tools__add_line(struct buf *b, struct sv line)
{
    if (line.len <= TOOLS__LINE_MAX) /* fewer bytes than the limit: fewer characters too */
        return buf_add(b, line.p, line.len) ? CA_ETOOBIG : buf_addch(b, '\n');
    /* Find the byte where character TOOLS__LINE_MAX starts. */
    size_t chars = 0, i = 0;
    for (; i < line.len; i++) {
        if (((unsigned char)line.p[i] & 0xC0) != 0x80 && chars++ == TOOLS__LINE_MAX)
            break;
    }
    if (i == line.len)
        return buf_add(b, line.p, line.len) ? CA_ETOOBIG : buf_addch(b, '\n');
    size_t more = utf8_chars(line.p + i, line.len - i);
    int rc = buf_add(b, line.p, i);
    if (!rc)
        rc = buf_addf(b, "\xe2\x80\xa6 [line truncated: %zu more characters]\n", more);
    return rc;
}

int tools__add_numbered(struct buf *b, size_t lineno, struct sv line)
{
    /* "%6zu\t" by hand: Read formats thousands of these per call. */
    char num[32];
    size_t i = sizeof(num);
    num[--i] = '\t';
    do {
        num[--i] = (char)('0' + lineno % 10);
        lineno /= 10;
    } while (lineno);
    while (sizeof(num) - i < 7)
        num[--i] = ' ';
    size_t before = b->len;
    int rc = buf_add(b, num + i, sizeof(num) - i);
    if (!rc)
        rc = tools__add_line(b, line);
    if (rc)
        buf_truncate(b, before);
    return rc;
}

/* Length of the ASCII prefix of p, eight bytes at a time. */
static size_t ascii_prefix(const char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof(w));
        if (w & 0x8080808080808080ull)
            break;
    }
    while (i < n && !((unsigned char)p[i] & 0x80))
        i++;
    return i;
}

bool tools__utf8_valid(const char *p, size_t n, size_t *bad)
{
    size_t a = ascii_prefix(p, n);
    if (a == n)
        return true;
    if (utf8_valid(p + a, n - a, bad))
        return true;
    if (bad)
        *bad += a;
    return false;
}

bool tools__is_binary(const char *p, size_t n)
{
    if (memchr(p, '\0', n < TOOLS__BINARY_PROBE ? n : TOOLS__BINARY_PROBE))
        return true;
    return !tools__utf8_valid(p, n, NULL);
}

size_t tools__count_lines(const char *p, size_t n)
{
    size_t lines = 0;
    const char *end = p + n;
    for (const char *q = p; q < end; q++) {
        q = memchr(q, '\n', (size_t)(end - q));
        if (!q)
            break;
        lines++;
    }
    if (n && p[n - 1] != '\n')
        lines++;
    return lines;
}

/* ---- argument access ---- */

const char *tools__str(const json_t *args, const char *key, size_t *len)
{
    const json_t *v = json_object_get(args, key);
    if (!json_is_string(v)) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = json_string_length(v);
    return json_string_value(v);
}

int64_t tools__int(const json_t *args, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(args, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

bool tools__bool(const json_t *args, const char *key, bool dflt)
{
    const json_t *v = json_object_get(args, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}
