/*
 * msg.c - length-prefixed JSON messages over a stream socket or pipe.
 */
#include "core/msg.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/json.h"
#include "core/limits.h"
#include "core/util.h"
#include "core/banned.h"

int msg_wait(int fd, short events, int64_t deadline_us)
{
    for (;;) {
        int64_t left = deadline_us == INT64_MAX ? -1 : (deadline_us - ca_now_us()) / 1000;
        if (deadline_us != INT64_MAX && left <= 0)
            return CA_ETIMEOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

static int read_full(int fd, void *p, size_t n, int64_t deadline_us)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r > 0) {
            c += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0)
            return -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        int rc = msg_wait(fd, POLLIN, deadline_us);
        if (rc)
            return rc;
    }
    return 0;
}

static int write_full(int fd, const void *p, size_t n, int64_t deadline_us)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w > 0) {
            c += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN)
            return -errno;
        int rc = msg_wait(fd, POLLOUT, deadline_us);
        if (rc)
            return rc;
    }
    return 0;
}

int msg_send(int fd, const json_t *msg, int64_t deadline_us, struct ca_err *err)
{
    struct buf b;
    buf_init(&b, CA_LIMIT_REQUEST_BYTES);
    int rc = buf_addstr(&b, "    ");
    if (rc == 0)
        rc = jsonx_dump(msg, 0, &b);
    if (rc) {
        buf_release(&b);
        return err_setf(err, rc, "message over %zu bytes", (size_t)CA_LIMIT_REQUEST_BYTES);
    }
    uint32_t len = (uint32_t)(b.len - 4);
    unsigned char hdr[4] = {len >> 24, len >> 16, len >> 8, len};
    memcpy(b.data, hdr, 4);
    rc = write_full(fd, b.data, b.len, deadline_us);
    buf_release(&b);
    if (rc)
        return err_setf(err, rc, "cannot send: %s", ca_strerror(rc));
    return 0;
}

int msg_recv(int fd, json_t **msg, int64_t deadline_us, struct ca_err *err)
{
    unsigned char hdr[4];
    int rc = read_full(fd, hdr, 4, deadline_us);
    if (rc)
        return err_setf(err, rc, "no reply: %s", ca_strerror(rc));
    uint32_t len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
    if (len > CA_LIMIT_REQUEST_BYTES)
        return err_setf(err, CA_ETOOBIG, "message of %u bytes is over the limit of %zu", len,
                        (size_t)CA_LIMIT_REQUEST_BYTES);
    char *body = xmalloc(len + 1);
    rc = read_full(fd, body, len, deadline_us);
    if (rc == 0)
        rc = jsonx_parse(sv_from(body, len), CA_LIMIT_REQUEST_BYTES, "message", msg, err);
    else
        err_setf(err, rc, "truncated message: %s", ca_strerror(rc));
    free(body);
    return rc;
}

static int addr_of(const char *path, struct sockaddr_un *sa, struct ca_err *err)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(sa->sun_path))
        return err_setf(err, CA_ETOOBIG,
                        "socket path '%s' is empty or longer than %zu bytes; use a shorter "
                        "directory",
                        path, sizeof(sa->sun_path) - 1);
    memcpy(sa->sun_path, path, n);
    return 0;
}

int msg_listen(const char *path, int backlog, struct ca_err *err)
{
    struct sockaddr_un sa;
    int rc = addr_of(path, &sa, err);
    if (rc)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_setf(err, -errno, "socket: %s", strerror(errno));
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        (void)unlink(path); /* bind reports what matters if it is still there */
    mode_t old = umask(0077);
    int b = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    umask(old);
    if (b != 0 || listen(fd, backlog) != 0) {
        e = b != 0 ? e : errno;
        close(fd);
        return err_setf(err, -e, "cannot listen on %s: %s", path, strerror(e));
    }
    return fd;
}

int msg_connect(const char *path, struct ca_err *err)
{
    struct sockaddr_un sa;
    int rc = addr_of(path, &sa, err);
    if (rc)
        return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_setf(err, -errno, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = errno;
        close(fd);
        return err_setf(err, -e, "cannot connect to %s: %s", path, strerror(e));
    }
    return fd;
}

int msg_request(const char *path, const json_t *req, int64_t timeout_ms, json_t **reply,
                struct ca_err *err)
{
    int fd = msg_connect(path, err);
    if (fd < 0)
        return fd;
    int64_t deadline = timeout_ms > 0 ? ca_now_us() + timeout_ms * 1000 : INT64_MAX;
    int rc = msg_send(fd, req, deadline, err);
    if (rc == 0)
        rc = msg_recv(fd, reply, deadline, err);
    close(fd);
    return rc;
}
