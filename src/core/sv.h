/*
 * sv.h - a borrowed string view (pointer + length) and bounded parsers over
 * it. Views never own memory and need no NUL terminator; every parser here
 * checks bounds and overflow and reports where input went wrong.
 */
#ifndef CA_SV_H
#define CA_SV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"

struct sv {
    const char *p;
    size_t len;
};

#define SV_LIT(s) ((struct sv){(s), sizeof(s) - 1})
/* printf("%.*s", SV_ARG(v)) */
#define SV_FMT "%.*s"
#define SV_ARG(v) (int)(v).len, (v).p

struct sv sv_from(const char *p, size_t len);
struct sv sv_cstr(const char *s);
bool sv_eq(struct sv a, struct sv b);
bool sv_eq_cstr(struct sv a, const char *s);
bool sv_starts_with(struct sv s, struct sv prefix);
bool sv_ends_with(struct sv s, struct sv suffix);
/* Offset of the first `needle` in s, or -1. */
long sv_find(struct sv s, struct sv needle);
long sv_find_ch(struct sv s, char c);
struct sv sv_trim(struct sv s);
struct sv sv_ltrim(struct sv s);
struct sv sv_rtrim(struct sv s);
/* The bytes [start, start+len) clamped to s. */
struct sv sv_sub(struct sv s, size_t start, size_t len);
/* If s starts with prefix, drop it and return true. */
bool sv_chop_prefix(struct sv *s, struct sv prefix);
/*
 * Split off the next line (without its "\n" or "\r\n") into *line and advance
 * *s past it. Returns false when *s is empty. A last line without a newline is
 * returned too; *had_newline (may be NULL) says whether it ended in one.
 */
bool sv_next_line(struct sv *s, struct sv *line, bool *had_newline);
/* Split at the first `sep`: *head gets what precedes it; s advances past it.
 * Without a separator *head is all of s and s becomes empty. */
struct sv sv_split(struct sv *s, char sep);
/* Heap copy with NUL terminator. */
char *sv_dup(struct sv s);

/*
 * Parse the whole view as a decimal integer. No sign for u64; optional '-'
 * for i64; no spaces, no empty input, overflow checked. 0 or CA_EPARSE
 * (with a message naming `what`).
 */
int sv_parse_u64(struct sv s, uint64_t *out, const char *what,
                 struct ca_err *err) WARN_UNUSED_RESULT;
int sv_parse_i64(struct sv s, int64_t *out, const char *what,
                 struct ca_err *err) WARN_UNUSED_RESULT;
/* Like sv_parse_i64 with an inclusive range check. */
int sv_parse_range(struct sv s, int64_t lo, int64_t hi, int64_t *out, const char *what,
                   struct ca_err *err) WARN_UNUSED_RESULT;
/* A size such as "512", "64k", "16M", "2G" (powers of 1024). */
int sv_parse_size(struct sv s, uint64_t *out, const char *what,
                  struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Check UTF-8 validity (no overlongs, no surrogates, nothing above U+10FFFF).
 * Returns true when valid; else *bad_offset (may be NULL) gets the offset of
 * the first bad byte.
 */
bool utf8_valid(const char *p, size_t n, size_t *bad_offset);
/*
 * Append p[0..n) to out as valid UTF-8 text: each invalid byte and each NUL
 * becomes U+FFFD. Returns how many bytes were replaced, or a negative code
 * when out's bound was reached (out then holds what fitted).
 */
long utf8_sanitize(const char *p, size_t n, struct buf *out);

/* 1-based line and column of byte offset `off` in s. */
void sv_line_col(struct sv s, size_t off, size_t *line, size_t *col);

#endif
