/*
 * test.h - the unit-test framework. A test file defines cases with
 * TEST(name) { ... } and links tests/unit/main.c, which runs each case in
 * its own forked process with a timeout, so a crash or hang fails that case
 * only. CHECK* macros record a failure with file:line and keep going;
 * REQUIRE* stop the case. SKIP(need, reason...) ends a case that cannot run
 * here: it counts as skipped, never as passed, and $TEST_REQUIRE turns it
 * into a failure on a host that must be able to run it.
 *
 *   ./test_buf              run every case
 *   ./test_buf NAME...      run the named cases, in this process (for gdb)
 *   ./test_buf --list       list the cases
 * TEST_TIMEOUT (seconds, default 20) bounds each case. TEST_REQUIRE, a
 * comma-separated list of needs (e.g. "userns,cc"), makes a SKIP for any of
 * them a failure: CI names what its machine has.
 */
#ifndef CA_TEST_H
#define CA_TEST_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);

void test__register(const char *name, test_fn fn, const char *file);
void test__fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void test__abort_case(void) __attribute__((noreturn));
void test__skip(const char *file, int line, const char *need, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));
/* A scratch directory unique to the running case, removed afterwards. */
const char *test_tmpdir(void);
/* Repository root (from $CA_REPO, else "."). */
const char *test_repo(void);

#define TEST(name)                                                                                 \
    static void test_##name(void);                                                                 \
    __attribute__((constructor)) static void test__reg_##name(void)                                \
    {                                                                                              \
        test__register(#name, test_##name, __FILE__);                                              \
    }                                                                                              \
    static void test_##name(void)

/*
 * End the running case as skipped, with a reason the runner prints. `need`
 * names what the host lacks, one short word of a fixed vocabulary so that
 * TEST_REQUIRE can name it: "userns" (no sandbox: user namespaces or a
 * seccomp filter missing, as sandbox_supported() says), "nvcc", "cc", "c++",
 * "python3", "pyarrow", "readelf", "curl", "strace", "gdb", "setsid",
 * "openat2", "redis" (redis-server), "root" (needs uid 0), "pids-cgroup", "no-cuda-home"
 * (/usr/local/cuda must be absent), "repo-outside-tmp". A case that
 * already failed a CHECK stays failed. Only the case's own process may
 * skip, not a child it forked.
 */
#define SKIP(need, ...) test__skip(__FILE__, __LINE__, need, __VA_ARGS__)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            test__fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                                    \
    } while (0)
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            test__fail(__FILE__, __LINE__, "REQUIRE(%s)", #cond);                                  \
            test__abort_case();                                                                    \
        }                                                                                          \
    } while (0)
#define CHECK_INT(a, op, b)                                                                        \
    do {                                                                                           \
        long long test__a = (long long)(a), test__b = (long long)(b);                              \
        if (!(test__a op test__b))                                                                 \
            test__fail(__FILE__, __LINE__, "CHECK_INT(%s %s %s): %lld vs %lld", #a, #op, #b,       \
                       test__a, test__b);                                                          \
    } while (0)
#define CHECK_EQ(a, b) CHECK_INT(a, ==, b)
#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *test__a = (a), *test__b = (b);                                                 \
        if (!test__a || !test__b || strcmp(test__a, test__b) != 0)                                 \
            test__fail(__FILE__, __LINE__, "CHECK_STR(%s, %s): \"%s\" vs \"%s\"", #a, #b,          \
                       test__a ? test__a : "(null)", test__b ? test__b : "(null)");                \
    } while (0)
/* haystack contains needle */
#define CHECK_CONTAINS(hay, needle)                                                                \
    do {                                                                                           \
        const char *test__h = (hay), *test__n = (needle);                                          \
        if (!test__h || !strstr(test__h, test__n))                                                 \
            test__fail(__FILE__, __LINE__, "CHECK_CONTAINS(%s, \"%s\"): got \"%s\"", #hay,         \
                       test__n, test__h ? test__h : "(null)");                                     \
    } while (0)

#endif
