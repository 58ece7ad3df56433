/*
 * util.c - allocation wrappers that abort on OOM (for fixed-size internal
 * allocations, never for sizes chosen by outside input), BUG(), the clock.
 */
#include "core/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/banned.h"

void ca__bug(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "BUG: %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

static void *oom(size_t n)
{
    fprintf(stderr, "fatal: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    return p ? p : oom(n);
}

void *xcalloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    return p ? p : oom(nmemb * size);
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    return q ? q : oom(n);
}

void *xmallocarray(size_t nmemb, size_t size)
{
    return xreallocarray(NULL, nmemb, size);
}

void *xreallocarray(void *p, size_t nmemb, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(nmemb, size, &n))
        BUG("array size overflow: %zu x %zu", nmemb, size);
    return xrealloc(p, n);
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *xstrfmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        BUG("bad format: %s", fmt);
    char *p = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

size_t ca__grow_cap(size_t cap, size_t need, size_t elem)
{
    size_t next = cap < 8 ? 8 : cap + cap / 2;
    if (next < cap || next < need)
        next = need;
    size_t bytes;
    if (__builtin_mul_overflow(next, elem, &bytes))
        BUG("array growth overflow: %zu elements of %zu bytes", next, elem);
    return next;
}

int64_t ca_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
