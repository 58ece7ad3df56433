/*
 * sandbox_fixture.h - shared set-up of the sandbox tests (test_sandbox.c, test_sandbox_run.c):
 * the guard of sandbox_guard.h, a workspace like an episode's (read-only
 * MANIFEST and tools/, writable rest), a bash script run to completion, a started sandbox, and
 * reading a pipe until a word shows up. Included once per test file; everything is static, and
 * a file may leave some helpers unused.
 */
#ifndef CA_SANDBOX_FIXTURE_H
#define CA_SANDBOX_FIXTURE_H

#include "sandbox_guard.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "sandbox/sandbox.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

static char ws[4096];
static const char *const ro_paths[] = {"MANIFEST", "tools", NULL};

static char *read_file(const char *path)
{
    static char buf[4096];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

/* A workspace like an episode's: a read-only MANIFEST and tools/, writable rest. */
static struct sandbox_opts make_ws(void)
{
    snprintf(ws, sizeof(ws), "%s/ws", test_tmpdir());
    REQUIRE(mkdir(ws, 0755) == 0);
    char p[4200];
    snprintf(p, sizeof(p), "%s/MANIFEST", ws);
    write_file(p, "{\"read_only\": [\"MANIFEST\", \"tools\"]}\n");
    snprintf(p, sizeof(p), "%s/tools", ws);
    REQUIRE(mkdir(p, 0755) == 0);
    snprintf(p, sizeof(p), "%s/tools/compile", ws);
    write_file(p, "#!/bin/sh\necho compiling\n");
    chmod(p, 0755);
    snprintf(p, sizeof(p), "%s/kernels", ws);
    REQUIRE(mkdir(p, 0755) == 0);
    return (struct sandbox_opts){.workspace = ws, .ro_paths = ro_paths};
}

/* bash -c script in a fresh sandbox; returns sandbox_run's code. */
static int sh(const struct sandbox_opts *o, const char *script, struct sandbox_run_result *r)
{
    struct ca_err err = {0};
    sandbox_run_result_init(r);
    int rc = sandbox_run(o, ARGV("bash", "-c", script), 10000, 0, r, &err);
    if (rc)
        fprintf(stderr, "  sandbox_run: %s\n", err.msg);
    if (r->err.len)
        fprintf(stderr, "  (stderr: %s)\n", r->err.data);
    return rc;
}

static int exit_code(const struct sandbox_run_result *r)
{
    return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -WTERMSIG(r->status);
}

static struct sandbox *start(const struct sandbox_opts *o)
{
    struct sandbox *sb = NULL;
    struct ca_err err = {0};
    int rc = sandbox_start(o, &sb, &err);
    if (rc)
        fprintf(stderr, "  sandbox_start: %s\n", err.msg);
    REQUIRE(rc == 0);
    return sb;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Read from fd until `want` shows up or ms pass; the text so far in buf. */
static bool read_until(int fd, const char *want, char *buf, size_t cap, int ms)
{
    size_t len = 0;
    buf[0] = '\0';
    int64_t end = ca_now_us() + (int64_t)ms * 1000;
    while (!strstr(buf, want) && ca_now_us() < end && len + 1 < cap) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
    }
    return strstr(buf, want) != NULL;
}

#pragma GCC diagnostic pop

#endif
