/*
 * sandbox_guard.h - what every sandbox test file needs before its own set-up: the guard that
 * skips a case where this host cannot make a sandbox, and writing a small file. Included by
 * sandbox_fixture.h (the walls and running programs) and test_sandbox_escape.c (whose
 * workspace differs). Everything is static.
 */
#ifndef CA_SANDBOX_GUARD_H
#define CA_SANDBOX_GUARD_H

#include "test.h"

#include <fcntl.h>
#include <unistd.h>

#include "core/util.h"
#include "sandbox/sandbox.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Skip the case where this host cannot make a sandbox. */
static void need_sandbox(void)
{
    struct ca_err why = {0};
    if (!sandbox_supported(&why))
        SKIP("userns", "no sandbox here: %s", why.msg);
}

static void write_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, s, strlen(s)) == (ssize_t)strlen(s));
    close(fd);
}

#pragma GCC diagnostic pop

#endif
