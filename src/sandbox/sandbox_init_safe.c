/*
 * sandbox_init_safe.c - the small helpers the clone child's files share
 * (sandbox_init*.c), every one async-signal-safe: the child is a
 * fork-style copy of one thread of a possibly multi-threaded host, so
 * string helpers of our own instead of libc's formatting, raw system
 * calls, and the control socket's send and set-up failure report.
 */
#include "sandbox/sandbox_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/banned.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

size_t sandbox__init_str_len(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

void sandbox__init_put_str(char *buf, size_t cap, size_t *pos, const char *s)
{
    while (*s && *pos + 1 < cap)
        buf[(*pos)++] = *s++;
    buf[*pos] = '\0';
}

int sandbox__init_send_msg(const struct sandbox__msg *m)
{
    ssize_t n;
    do
        n = send(sandbox__init_st.ctl, m, sizeof(*m), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof(*m) ? 0 : -1;
}

CA_NORETURN void sandbox__init_setup_fail(int step, int index, int e)
{
    struct sandbox__msg m = {
        .type = SANDBOX__MSG_SETUP_FAIL, .stage = step, .index = index, .err = e};
    sandbox__init_send_msg(&m);
    _exit(1);
}

/* close_range, or a walk of /proc/self/fd where it is missing. */
void sandbox__init_close_from(unsigned lo, unsigned hi, int flags)
{
    if (lo > hi)
        return;
    if (syscall(SYS_close_range, lo, hi, flags) == 0)
        return;
    int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    char dbuf[4096];
    for (;;) {
        long n = syscall(SYS_getdents64, dfd, dbuf, sizeof(dbuf));
        if (n <= 0)
            break;
        for (long off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(dbuf + off);
            off += d->d_reclen;
            unsigned fd = 0;
            const char *p = d->d_name;
            if (*p < '0' || *p > '9')
                continue;
            while (*p >= '0' && *p <= '9')
                fd = fd * 10 + (unsigned)(*p++ - '0');
            if (fd < lo || fd > hi || (int)fd == dfd)
                continue;
            if (flags & CLOSE_RANGE_CLOEXEC)
                fcntl((int)fd, F_SETFD, FD_CLOEXEC);
            else
                close((int)fd);
        }
    }
    close(dfd);
}
