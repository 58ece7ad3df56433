/* Unit tests of string views, bounded parsers and UTF-8 validation (core/sv). */
#include "test.h"

#include "core/sv.h"

TEST(sv_basics)
{
    struct sv s = SV_LIT("  hello world \n");
    CHECK(sv_eq_cstr(sv_trim(s), "hello world"));
    CHECK(sv_starts_with(sv_trim(s), SV_LIT("hell")));
    CHECK(sv_ends_with(sv_trim(s), SV_LIT("world")));
    CHECK_EQ(sv_find(s, SV_LIT("world")), 8);
    CHECK_EQ(sv_find(s, SV_LIT("nope")), -1);
    CHECK_EQ(sv_find_ch(s, 'o'), 6);
    CHECK(sv_eq_cstr(sv_sub(s, 2, 5), "hello"));
    CHECK(sv_eq_cstr(sv_sub(s, 100, 5), ""));
    struct sv t = SV_LIT("prefix:rest");
    CHECK(sv_chop_prefix(&t, SV_LIT("prefix:")));
    CHECK(sv_eq_cstr(t, "rest"));
    CHECK(!sv_chop_prefix(&t, SV_LIT("zzz")));
    char *d = sv_dup(t);
    CHECK_STR(d, "rest");
    free(d);
}

TEST(sv_lines)
{
    struct sv s = SV_LIT("a\r\nbb\n\nlast");
    struct sv line;
    bool nl;
    REQUIRE(sv_next_line(&s, &line, &nl));
    CHECK(sv_eq_cstr(line, "a") && nl);
    REQUIRE(sv_next_line(&s, &line, &nl));
    CHECK(sv_eq_cstr(line, "bb"));
    REQUIRE(sv_next_line(&s, &line, &nl));
    CHECK(sv_eq_cstr(line, ""));
    REQUIRE(sv_next_line(&s, &line, &nl));
    CHECK(sv_eq_cstr(line, "last") && !nl);
    CHECK(!sv_next_line(&s, &line, &nl));
}

TEST(sv_split_fields)
{
    struct sv s = SV_LIT("a:b::c");
    CHECK(sv_eq_cstr(sv_split(&s, ':'), "a"));
    CHECK(sv_eq_cstr(sv_split(&s, ':'), "b"));
    CHECK(sv_eq_cstr(sv_split(&s, ':'), ""));
    CHECK(sv_eq_cstr(sv_split(&s, ':'), "c"));
    CHECK_EQ(s.len, 0);
}

TEST(sv_parse_numbers)
{
    struct ca_err err = {0};
    uint64_t u;
    int64_t i;
    CHECK_EQ(sv_parse_u64(SV_LIT("18446744073709551615"), &u, "n", &err), 0);
    CHECK(u == UINT64_MAX);
    CHECK_EQ(sv_parse_u64(SV_LIT("18446744073709551616"), &u, "n", &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "out of range");
    CHECK_EQ(sv_parse_i64(SV_LIT("-9223372036854775808"), &i, "n", &err), 0);
    CHECK(i == INT64_MIN);
    CHECK_EQ(sv_parse_i64(SV_LIT("9223372036854775808"), &i, "n", &err), CA_EPARSE);
    CHECK_EQ(sv_parse_i64(SV_LIT("-"), &i, "n", &err), CA_EPARSE);
    CHECK_EQ(sv_parse_u64(SV_LIT(""), &u, "--turns", &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "--turns");
    CHECK_EQ(sv_parse_u64(SV_LIT("12a"), &u, "n", &err), CA_EPARSE);
    CHECK_EQ(sv_parse_u64(SV_LIT(" 1"), &u, "n", &err), CA_EPARSE);
    CHECK_EQ(sv_parse_u64(SV_LIT("-1"), &u, "n", &err), CA_EPARSE);
    CHECK_EQ(sv_parse_range(SV_LIT("5"), 1, 4, &i, "--n", &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "1 to 4");
    CHECK_EQ(sv_parse_range(SV_LIT("4"), 1, 4, &i, "--n", &err), 0);
    CHECK_EQ(i, 4);
}

TEST(sv_parse_sizes)
{
    uint64_t v;
    CHECK_EQ(sv_parse_size(SV_LIT("64k"), &v, "s", NULL), 0);
    CHECK(v == 65536);
    CHECK_EQ(sv_parse_size(SV_LIT("2G"), &v, "s", NULL), 0);
    CHECK(v == 2ULL << 30);
    CHECK_EQ(sv_parse_size(SV_LIT("99999999999999999999G"), &v, "s", NULL), CA_EPARSE);
    CHECK_EQ(sv_parse_size(SV_LIT("17179869184G"), &v, "s", NULL), CA_EPARSE);
    CHECK_EQ(sv_parse_size(SV_LIT("k"), &v, "s", NULL), CA_EPARSE);
}

TEST(utf8_validation)
{
    size_t off;
    CHECK(utf8_valid("plain ascii", 11, NULL));
    CHECK(utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9, NULL)); /* é € 😀 */
    CHECK(!utf8_valid("ab\xff", 3, &off));
    CHECK_EQ(off, 2);
    CHECK(!utf8_valid("\xc0\xaf", 2, &off)); /* overlong '/' */
    CHECK_EQ(off, 0);
    CHECK(!utf8_valid("\xed\xa0\x80", 3, &off));     /* surrogate */
    CHECK(!utf8_valid("\xf4\x90\x80\x80", 4, &off)); /* above U+10FFFF */
    CHECK(!utf8_valid("x\xe2\x82", 3, &off));        /* truncated sequence */
    CHECK_EQ(off, 1);
    CHECK(!utf8_valid("\x80", 1, &off)); /* lone continuation byte */
}

TEST(line_and_column)
{
    size_t line, col;
    struct sv s = SV_LIT("ab\ncd\nef");
    sv_line_col(s, 4, &line, &col);
    CHECK_EQ(line, 2);
    CHECK_EQ(col, 2);
    sv_line_col(s, 0, &line, &col);
    CHECK_EQ(line, 1);
    CHECK_EQ(col, 1);
}

TEST(utf8_sanitize_replaces_bad_bytes_and_nul)
{
    struct buf b;
    buf_init(&b, 100);
    CHECK_EQ(utf8_sanitize("ok\xc3\xa9", 4, &b), 0);
    CHECK_STR(b.data, "ok\xc3\xa9");
    buf_reset(&b);
    CHECK_EQ(utf8_sanitize("a\xff"
                           "b\0c\xe2\x82",
                           7, &b),
             4);
    CHECK_STR(b.data, "a\xef\xbf\xbd"
                      "b\xef\xbf\xbd"
                      "c\xef\xbf\xbd\xef\xbf\xbd");
    CHECK(utf8_valid(b.data, b.len, NULL));
    struct buf small;
    buf_init(&small, 4);
    CHECK(utf8_sanitize("\xff\xff", 2, &small) < 0);
    buf_release(&small);
    buf_release(&b);
}
