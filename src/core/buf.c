/*
 * buf.c - the bounded growable buffer. Invariants: data[len] == '\0';
 * len <= max; cap == 0 means data points at the shared empty string and
 * nothing is allocated. A failed grow leaves the contents as they were.
 */
#include "core/buf.h"

#include <stdio.h>
#include <string.h>

#include "core/err.h"
#include "core/banned.h"

static char buf__empty[1];

void buf_init(struct buf *b, size_t max)
{
    b->data = buf__empty;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void buf_release(struct buf *b)
{
    if (b->cap)
        free(b->data);
    buf_init(b, b->max);
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->cap)
        b->data[0] = '\0';
}

int buf_reserve(struct buf *b, size_t extra)
{
    size_t need;
    if (__builtin_add_overflow(b->len, extra, &need) || need > b->max)
        return CA_ETOOBIG;
    if (need + 1 <= b->cap)
        return 0;
    size_t cap = b->cap < 64 ? 64 : b->cap;
    while (cap < need + 1)
        cap = cap > SIZE_MAX / 2 ? need + 1 : cap * 2;
    if (b->cap) {
        b->data = xrealloc(b->data, cap);
    } else {
        b->data = xmalloc(cap);
        b->data[0] = '\0';
    }
    b->cap = cap;
    return 0;
}

int buf_add(struct buf *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    /* p may point into our own storage, which buf_reserve may move. */
    const char *src = p;
    bool self = b->cap && src >= b->data && src < b->data + b->cap;
    size_t off = self ? (size_t)(src - b->data) : 0;
    int rc = buf_reserve(b, n);
    if (rc)
        return rc;
    if (self)
        src = b->data + off;
    memmove(b->data + b->len, src, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_addstr(struct buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

int buf_addch(struct buf *b, char c)
{
    return buf_add(b, &c, 1);
}

int buf_vaddf(struct buf *b, const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n < 0)
        return CA_EPARSE;
    int rc = buf_reserve(b, (size_t)n);
    if (rc)
        return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int buf_addf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vaddf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void buf_truncate(struct buf *b, size_t n)
{
    if (n > b->len)
        BUG("buf_truncate to %zu beyond length %zu", n, b->len);
    b->len = n;
    if (b->cap)
        b->data[n] = '\0';
}

void buf_remove_prefix(struct buf *b, size_t n)
{
    if (n > b->len)
        BUG("buf_remove_prefix of %zu beyond length %zu", n, b->len);
    if (n == 0)
        return;
    memmove(b->data, b->data + n, b->len - n);
    buf_truncate(b, b->len - n);
}

char *buf_detach(struct buf *b, size_t *len)
{
    char *p = b->cap ? b->data : xstrdup("");
    if (len)
        *len = b->len;
    buf_init(b, b->max);
    return p;
}

void buf_rtrim(struct buf *b)
{
    while (b->len && (b->data[b->len - 1] == ' ' || b->data[b->len - 1] == '\t' ||
                      b->data[b->len - 1] == '\n' || b->data[b->len - 1] == '\r'))
        b->len--;
    if (b->cap)
        b->data[b->len] = '\0';
}

int buf_add_html(struct buf *b, const char *s)
{
    int rc = 0;
    for (; s && *s && !rc; s++) {
        switch (*s) {
        case '<':
            rc = buf_addstr(b, "&lt;");
            break;
        case '>':
            rc = buf_addstr(b, "&gt;");
            break;
        case '&':
            rc = buf_addstr(b, "&amp;");
            break;
        case '"':
            rc = buf_addstr(b, "&quot;");
            break;
        default:
            rc = buf_addch(b, *s);
        }
    }
    return rc;
}
