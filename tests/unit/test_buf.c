/* Unit tests of the bounded buffer (core/buf). */
#include "test.h"

#include "core/buf.h"
#include "core/err.h"

TEST(buf_starts_empty_and_terminated)
{
    struct buf b;
    buf_init(&b, 100);
    CHECK_EQ(b.len, 0);
    CHECK_STR(b.data, "");
    buf_release(&b);
}

TEST(buf_add_and_format)
{
    struct buf b;
    buf_init(&b, 1000);
    REQUIRE(buf_addstr(&b, "hello") == 0);
    REQUIRE(buf_addch(&b, ' ') == 0);
    REQUIRE(buf_addf(&b, "%d-%s", 42, "x") == 0);
    CHECK_STR(b.data, "hello 42-x");
    CHECK_EQ(b.len, 10);
    buf_release(&b);
}

TEST(buf_refuses_growth_past_max_and_keeps_contents)
{
    struct buf b;
    buf_init(&b, 8);
    REQUIRE(buf_addstr(&b, "12345678") == 0);
    CHECK_EQ(buf_addch(&b, '9'), CA_ETOOBIG);
    CHECK_EQ(buf_addf(&b, "%s", "more"), CA_ETOOBIG);
    CHECK_STR(b.data, "12345678");
    CHECK_EQ(b.len, 8);
    buf_release(&b);
}

TEST(buf_overflowing_size_is_refused)
{
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    REQUIRE(buf_addstr(&b, "x") == 0);
    CHECK_EQ(buf_reserve(&b, SIZE_MAX), CA_ETOOBIG);
    buf_release(&b);
}

TEST(buf_large_growth)
{
    struct buf b;
    buf_init(&b, 1 << 22);
    for (int i = 0; i < 100000; i++)
        REQUIRE(buf_addstr(&b, "abcdefghij") == 0);
    CHECK_EQ(b.len, 1000000);
    CHECK_EQ(b.data[b.len], '\0');
    buf_release(&b);
}

TEST(buf_detach_hands_over)
{
    struct buf b;
    buf_init(&b, 100);
    size_t len;
    char *empty = buf_detach(&b, &len);
    CHECK_STR(empty, "");
    CHECK_EQ(len, 0);
    free(empty);
    REQUIRE(buf_addstr(&b, "abc") == 0);
    char *p = buf_detach(&b, &len);
    CHECK_STR(p, "abc");
    CHECK_EQ(len, 3);
    CHECK_EQ(b.len, 0);
    CHECK_STR(b.data, "");
    free(p);
    buf_release(&b);
}

TEST(buf_truncate_reset_rtrim)
{
    struct buf b;
    buf_init(&b, 100);
    REQUIRE(buf_addstr(&b, "line  \n\r\t") == 0);
    buf_rtrim(&b);
    CHECK_STR(b.data, "line");
    buf_truncate(&b, 2);
    CHECK_STR(b.data, "li");
    buf_reset(&b);
    CHECK_STR(b.data, "");
    buf_release(&b);
}

TEST(buf_add_from_itself)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    REQUIRE(buf_addstr(&b, "abc") == 0);
    for (int i = 0; i < 10; i++)
        REQUIRE(buf_add(&b, b.data, b.len) == 0);
    CHECK_EQ(b.len, 3 * 1024);
    CHECK(memcmp(b.data + 3000, "abc", 3) == 0);
    buf_release(&b);
}

TEST(buf_add_html_escapes_markup)
{
    struct buf b;
    buf_init(&b, 64);
    REQUIRE(buf_add_html(&b, "<a href=\"x\">R&D</a>") == 0);
    CHECK_STR(b.data, "&lt;a href=&quot;x&quot;&gt;R&amp;D&lt;/a&gt;");
    REQUIRE(buf_add_html(&b, NULL) == 0);
    CHECK_EQ(b.len, strlen("&lt;a href=&quot;x&quot;&gt;R&amp;D&lt;/a&gt;"));
    buf_reset(&b);
    CHECK_EQ(buf_add_html(&b, "<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<"), CA_ETOOBIG);
    buf_release(&b);
}
