/*
 * util.h - small building blocks every module uses: checked allocation
 * (abort on OOM, for fixed-size internal allocations only), overflow-checked
 * array growth, BUG()/ASSERT() that stay on in release builds, attributes.
 *
 * Anything sized by outside input must go through struct buf (buf.h) with a
 * bound instead of these helpers.
 */
#ifndef CA_UTIL_H
#define CA_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define WARN_UNUSED_RESULT __attribute__((warn_unused_result))
#define CA_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define CA_NORETURN __attribute__((noreturn))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define FREE_AND_NULL(p)                                                                           \
    do {                                                                                           \
        free(p);                                                                                   \
        (p) = NULL;                                                                                \
    } while (0)

CA_NORETURN void ca__bug(const char *file, int line, const char *fmt, ...) CA_PRINTF(3, 4);

/* A programmer error: print where and abort. Never compiled out. */
#define BUG(...) ca__bug(__FILE__, __LINE__, __VA_ARGS__)
#define ASSERT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ca__bug(__FILE__, __LINE__, "assertion failed: %s", #cond);                            \
    } while (0)

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* xmalloc(a * b) with the multiplication checked. */
void *xmallocarray(size_t nmemb, size_t size);
void *xreallocarray(void *p, size_t nmemb, size_t size);
/* printf into a fresh heap string (internal, small strings only). */
char *xstrfmt(const char *fmt, ...) CA_PRINTF(1, 2);

/* Returns the capacity to grow to so that at least `need` elements fit;
 * aborts on overflow. */
size_t ca__grow_cap(size_t cap, size_t need, size_t elem);

/*
 * Grow array `x` (with `alloc` slots) so that it holds at least `nr` elements.
 * Usage: ALLOC_GROW(items, n + 1, items_alloc);
 */
#define ALLOC_GROW(x, nr, alloc)                                                                   \
    do {                                                                                           \
        if ((size_t)(nr) > (alloc)) {                                                              \
            (alloc) = ca__grow_cap((alloc), (nr), sizeof(*(x)));                                   \
            (x) = xreallocarray((x), (alloc), sizeof(*(x)));                                       \
        }                                                                                          \
    } while (0)

/* Monotonic clock in microseconds. */
int64_t ca_now_us(void);

#endif
