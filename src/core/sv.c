/*
 * sv.c - string views and bounded parsers. Nothing here reads past p+len or
 * needs a NUL terminator; every numeric parser checks overflow and rejects
 * empty input, signs where not allowed, and trailing garbage.
 */
#include "core/sv.h"

#include <string.h>

#include "core/banned.h"

struct sv sv_from(const char *p, size_t len)
{
    return (struct sv){p, len};
}

struct sv sv_cstr(const char *s)
{
    return (struct sv){s, s ? strlen(s) : 0};
}

bool sv_eq(struct sv a, struct sv b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

bool sv_eq_cstr(struct sv a, const char *s)
{
    return sv_eq(a, sv_cstr(s));
}

bool sv_starts_with(struct sv s, struct sv prefix)
{
    return s.len >= prefix.len && (prefix.len == 0 || memcmp(s.p, prefix.p, prefix.len) == 0);
}

bool sv_ends_with(struct sv s, struct sv suffix)
{
    return s.len >= suffix.len &&
           (suffix.len == 0 || memcmp(s.p + s.len - suffix.len, suffix.p, suffix.len) == 0);
}

long sv_find(struct sv s, struct sv needle)
{
    if (needle.len == 0)
        return 0;
    if (needle.len > s.len)
        return -1;
    const char *hit = memmem(s.p, s.len, needle.p, needle.len);
    return hit ? (long)(hit - s.p) : -1;
}

long sv_find_ch(struct sv s, char c)
{
    const char *hit = s.len ? memchr(s.p, c, s.len) : NULL;
    return hit ? (long)(hit - s.p) : -1;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

struct sv sv_ltrim(struct sv s)
{
    while (s.len && is_space(*s.p)) {
        s.p++;
        s.len--;
    }
    return s;
}

struct sv sv_rtrim(struct sv s)
{
    while (s.len && is_space(s.p[s.len - 1]))
        s.len--;
    return s;
}

struct sv sv_trim(struct sv s)
{
    return sv_rtrim(sv_ltrim(s));
}

struct sv sv_sub(struct sv s, size_t start, size_t len)
{
    if (start > s.len)
        start = s.len;
    if (len > s.len - start)
        len = s.len - start;
    return (struct sv){s.p + start, len};
}

bool sv_chop_prefix(struct sv *s, struct sv prefix)
{
    if (!sv_starts_with(*s, prefix))
        return false;
    s->p += prefix.len;
    s->len -= prefix.len;
    return true;
}

bool sv_next_line(struct sv *s, struct sv *line, bool *had_newline)
{
    if (s->len == 0)
        return false;
    long nl = sv_find_ch(*s, '\n');
    size_t take = nl < 0 ? s->len : (size_t)nl;
    *line = (struct sv){s->p, take};
    if (line->len && line->p[line->len - 1] == '\r')
        line->len--;
    if (had_newline)
        *had_newline = nl >= 0;
    size_t adv = nl < 0 ? s->len : take + 1;
    s->p += adv;
    s->len -= adv;
    return true;
}

struct sv sv_split(struct sv *s, char sep)
{
    long at = sv_find_ch(*s, sep);
    struct sv head;
    if (at < 0) {
        head = *s;
        s->p += s->len;
        s->len = 0;
        return head;
    }
    head = (struct sv){s->p, (size_t)at};
    s->p += at + 1;
    s->len -= (size_t)at + 1;
    return head;
}

char *sv_dup(struct sv s)
{
    char *p = xmalloc(s.len + 1);
    if (s.len)
        memcpy(p, s.p, s.len);
    p[s.len] = '\0';
    return p;
}

static int bad_number(struct sv s, const char *what, const char *why, struct ca_err *err)
{
    if (s.len > 40)
        return err_setf(err, CA_EPARSE, "%s: '%.40s...' is %s", what, s.p, why);
    return err_setf(err, CA_EPARSE, "%s: '" SV_FMT "' is %s", what, SV_ARG(s), why);
}

static int parse_digits(struct sv s, uint64_t limit, uint64_t *out, const char *what,
                        struct ca_err *err)
{
    if (s.len == 0)
        return err_setf(err, CA_EPARSE, "%s: expected a number, got nothing", what);
    uint64_t v = 0;
    for (size_t i = 0; i < s.len; i++) {
        unsigned d = (unsigned char)s.p[i] - '0';
        if (d > 9)
            return bad_number(s, what, "not a whole decimal number", err);
        if (v > (limit - d) / 10)
            return bad_number(s, what, "out of range", err);
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int sv_parse_u64(struct sv s, uint64_t *out, const char *what, struct ca_err *err)
{
    return parse_digits(s, UINT64_MAX, out, what, err);
}

int sv_parse_i64(struct sv s, int64_t *out, const char *what, struct ca_err *err)
{
    bool neg = s.len && s.p[0] == '-';
    struct sv digits = neg ? sv_sub(s, 1, s.len) : s;
    uint64_t v;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int rc = parse_digits(digits, limit, &v, what, err);
    if (rc)
        return rc == CA_EPARSE && digits.len == 0 && neg
                   ? err_setf(err, CA_EPARSE, "%s: expected a number after '-'", what)
                   : rc;
    if (neg)
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    else
        *out = (int64_t)v;
    return 0;
}

int sv_parse_range(struct sv s, int64_t lo, int64_t hi, int64_t *out, const char *what,
                   struct ca_err *err)
{
    int64_t v;
    int rc = sv_parse_i64(s, &v, what, err);
    if (rc)
        return rc;
    if (v < lo || v > hi)
        return err_setf(err, CA_EPARSE, "%s: %lld is out of range (%lld to %lld)", what,
                        (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

int sv_parse_size(struct sv s, uint64_t *out, const char *what, struct ca_err *err)
{
    uint64_t mult = 1;
    if (s.len) {
        switch (s.p[s.len - 1]) {
        case 'k':
        case 'K':
            mult = 1ULL << 10;
            break;
        case 'm':
        case 'M':
            mult = 1ULL << 20;
            break;
        case 'g':
        case 'G':
            mult = 1ULL << 30;
            break;
        default:
            break;
        }
        if (mult != 1)
            s.len--;
    }
    uint64_t v;
    int rc = sv_parse_u64(s, &v, what, err);
    if (rc)
        return rc;
    if (v > UINT64_MAX / mult)
        return bad_number(s, what, "out of range", err);
    *out = v * mult;
    return 0;
}

bool utf8_valid(const char *p, size_t n, size_t *bad_offset)
{
    const unsigned char *s = (const unsigned char *)p;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t need;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            need = 1, min = 0x80, c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            need = 2, min = 0x800, c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            need = 3, min = 0x10000, c &= 0x07;
        } else {
            goto bad;
        }
        if (n - i <= need)
            goto bad;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                goto bad;
            c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            goto bad;
        i += need + 1;
    }
    return true;
bad:
    if (bad_offset)
        *bad_offset = i;
    return false;
}

void sv_line_col(struct sv s, size_t off, size_t *line, size_t *col)
{
    size_t l = 1, c = 1;
    for (size_t i = 0; i < off && i < s.len; i++) {
        if (s.p[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

long utf8_sanitize(const char *p, size_t n, struct buf *out)
{
    static const char repl[] = "\xef\xbf\xbd"; /* U+FFFD */
    long replaced = 0;
    size_t i = 0;
    while (i < n) {
        size_t bad;
        size_t run = n - i;
        if (utf8_valid(p + i, run, &bad))
            bad = run;
        /* p[i..i+bad) is valid; NULs inside it are replaced too. */
        size_t start = i, end = i + bad;
        for (size_t k = start; k < end; k++) {
            if (p[k] != '\0')
                continue;
            if (buf_add(out, p + start, k - start) || buf_add(out, repl, 3))
                return CA_ETOOBIG;
            replaced++;
            start = k + 1;
        }
        if (buf_add(out, p + start, end - start))
            return CA_ETOOBIG;
        i = end;
        if (i < n) {
            if (buf_add(out, repl, 3))
                return CA_ETOOBIG;
            replaced++;
            i++;
        }
    }
    return replaced;
}
