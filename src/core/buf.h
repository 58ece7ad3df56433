/*
 * buf.h - the one growable byte buffer, always NUL-terminated, with a
 * mandatory maximum size. Growing past the maximum fails with CA_ETOOBIG and
 * leaves the contents unchanged, so a buffer filled from outside input (a
 * request, a model reply, a child's output) can never grow without bound.
 *
 * A buf is caller-owned storage: buf_init()/buf_release(). Not thread-safe.
 * buf_detach() hands the heap string over to the caller.
 */
#ifndef CA_BUF_H
#define CA_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/util.h"

struct buf {
    char *data; /* never NULL after buf_init: points to "" when empty */
    size_t len;
    size_t cap; /* bytes allocated, 0 while data points to the shared "" */
    size_t max; /* most bytes len may reach */
};

/* For internal buffers that hold our own bounded data. */
#define BUF_MAX_INTERNAL ((size_t)1 << 40)

void buf_init(struct buf *b, size_t max);
void buf_release(struct buf *b);
/* Empty the buffer, keep its storage. */
void buf_reset(struct buf *b);
/* Make room for `extra` more bytes; CA_ETOOBIG past b->max. */
int buf_reserve(struct buf *b, size_t extra) WARN_UNUSED_RESULT;
int buf_add(struct buf *b, const void *p, size_t n) WARN_UNUSED_RESULT;
int buf_addstr(struct buf *b, const char *s) WARN_UNUSED_RESULT;
int buf_addch(struct buf *b, char c) WARN_UNUSED_RESULT;
int buf_addf(struct buf *b, const char *fmt, ...) CA_PRINTF(2, 3) WARN_UNUSED_RESULT;
/* s (NULL: nothing) with <, >, & and " written as HTML entities. */
int buf_add_html(struct buf *b, const char *s) WARN_UNUSED_RESULT;
int buf_vaddf(struct buf *b, const char *fmt, va_list ap) CA_PRINTF(2, 0) WARN_UNUSED_RESULT;
/* Shorten to n bytes (n <= len). */
void buf_truncate(struct buf *b, size_t n);
/* Drop the first n bytes (n <= len). */
void buf_remove_prefix(struct buf *b, size_t n);
/* Hand the data over (heap, NUL-terminated); the buffer is left empty. */
char *buf_detach(struct buf *b, size_t *len);
/* Remove trailing whitespace. */
void buf_rtrim(struct buf *b);

#endif
