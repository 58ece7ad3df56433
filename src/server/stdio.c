/*
 * stdio.c - MCP over stdin/stdout: newline-delimited JSON-RPC messages, one
 * session for the life of the process.
 *
 * The reading thread handles initialize, ping, tools/list and anything
 * malformed itself, in order; tools/call (which may run for minutes) goes to
 * a thread of its own, at most STDIO_INFLIGHT at once, so pings and other
 * calls are answered meanwhile. Replies are written whole under one mutex,
 * one line each. A line over the request limit is read through and refused.
 * At end of input the calls in flight finish and are answered before return.
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/banned.h"

#define STDIO_INFLIGHT 64

struct stdio_ctx {
    struct server *s;
    struct server_session *sess;
    int out_fd;
    pthread_mutex_t out_mu;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int inflight;
};

struct stdio_job {
    struct stdio_ctx *c;
    char *line;
    size_t len;
};

static void emit(struct stdio_ctx *c, json_t *reply)
{
    if (!reply)
        return;
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    if (jsonx_dump(reply, 0, &b) == 0 && buf_addch(&b, '\n') == 0) {
        pthread_mutex_lock(&c->out_mu);
        if (fs_write_all(c->out_fd, b.data, b.len))
            LOG_WARN("stdio: cannot write a reply: %s", strerror(errno));
        pthread_mutex_unlock(&c->out_mu);
    }
    buf_release(&b);
    json_decref(reply);
}

static void handle(struct stdio_ctx *c, const char *line, size_t len)
{
    json_t *reply;
    bool parse_error;
    int64_t t0 = ca_now_us();
    server_rpc(c->s, &c->sess, line, len, &reply, &parse_error);
    if (log_events_on())
        log_event("serve.rpc", ca_now_us() - t0,
                  json_pack("{s:s, s:b}", "transport", "stdio", "error",
                            reply && json_object_get(reply, "error") != NULL));
    emit(c, reply);
}

static void *job_main(void *arg)
{
    struct stdio_job *j = arg;
    struct stdio_ctx *c = j->c;
    handle(c, j->line, j->len);
    free(j->line);
    free(j);
    /* The server's count drops first: once c->inflight reaches 0 the reader may return,
     * free the server and end its stack frame (c with it), so c is not touched after. */
    server__inflight_add(c->s, -1);
    pthread_mutex_lock(&c->mu);
    c->inflight--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* tools/call goes to a thread; everything else is answered in order here. */
static bool is_call(const char *line, size_t len)
{
    json_t *m = json_loadb(line, len, 0, NULL);
    bool call = false;
    if (json_is_object(m)) {
        const char *meth = json_string_value(json_object_get(m, "method"));
        call = meth && strcmp(meth, "tools/call") == 0 && json_object_get(m, "id");
    }
    json_decref(m);
    return call;
}

static void dispatch(struct stdio_ctx *c, const char *line, size_t len)
{
    struct sv t = sv_trim(sv_from(line, len));
    if (t.len == 0)
        return;
    /* The depth check of jsonx_parse runs first in server_rpc; json_loadb here only peeks
     * at what a well-formed line asks for, and is bounded by the line's own limit. */
    if (t.len > c->s->o.max_body || jsonx_depth(t) > CA_LIMIT_JSON_DEPTH || !is_call(t.p, t.len)) {
        handle(c, t.p, t.len);
        return;
    }
    pthread_mutex_lock(&c->mu);
    while (c->inflight >= STDIO_INFLIGHT)
        pthread_cond_wait(&c->cv, &c->mu);
    c->inflight++;
    pthread_mutex_unlock(&c->mu);
    server__inflight_add(c->s, 1);
    struct stdio_job *j = xcalloc(1, sizeof(*j));
    j->c = c;
    j->line = xstrndup(t.p, t.len);
    j->len = t.len;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    if (pthread_create(&th, &attr, job_main, j) != 0) {
        pthread_attr_destroy(&attr);
        handle(c, j->line, j->len); /* no thread: answer it here */
        free(j->line);
        free(j);
        pthread_mutex_lock(&c->mu);
        c->inflight--;
        pthread_mutex_unlock(&c->mu);
        server__inflight_add(c->s, -1);
        return;
    }
    pthread_attr_destroy(&attr);
}

int server_run_stdio(struct server *s, int in_fd, int out_fd, volatile sig_atomic_t *stop,
                     struct ca_err *err)
{
    struct stdio_ctx c = {.s = s, .out_fd = out_fd};
    c.sess = server_session_new(s);
    (void)pthread_mutex_init(&c.out_mu, NULL);
    (void)pthread_mutex_init(&c.mu, NULL);
    (void)pthread_cond_init(&c.cv, NULL);
    size_t max = s->o.max_body;
    struct buf line;
    buf_init(&line, max + 1);
    bool skipping = false; /* inside a line over the limit */
    char chunk[65536];
    int rc = 0;
    while (!(stop && *stop)) {
        struct pollfd p = {.fd = in_fd, .events = POLLIN};
        int k = poll(&p, 1, 500);
        if (k < 0 && errno != EINTR) {
            rc = err_setf(err, -errno, "stdin: %s", strerror(errno));
            break;
        }
        if (k <= 0)
            continue;
        ssize_t n = read(in_fd, chunk, sizeof(chunk));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break;
        const char *p0 = chunk, *end = chunk + n;
        while (p0 < end) {
            const char *nl = memchr(p0, '\n', (size_t)(end - p0));
            size_t take = (size_t)((nl ? nl : end) - p0);
            if (!skipping && buf_add(&line, p0, take)) {
                skipping = true;
                buf_reset(&line);
            }
            if (nl) {
                if (skipping) {
                    char m[128];
                    snprintf(m, sizeof(m), "Request too large: a message is at most %zu bytes",
                             max);
                    emit(&c, json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error",
                                       "code", RPC_INVALID_REQUEST, "message", m));
                } else {
                    dispatch(&c, line.data, line.len);
                }
                skipping = false;
                buf_reset(&line);
            }
            p0 += take + (nl ? 1 : 0);
        }
    }
    if (!skipping && line.len)
        dispatch(&c, line.data, line.len); /* a last line without its newline */
    pthread_mutex_lock(&c.mu);
    while (c.inflight > 0)
        pthread_cond_wait(&c.cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
    buf_release(&line);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    pthread_mutex_destroy(&c.out_mu);
    return rc;
}
