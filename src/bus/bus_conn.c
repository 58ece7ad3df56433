/*
 * bus_conn.c - one Redis connection (hiredis, blocking, with timeouts) and
 * the command helpers every other file of the bus uses.
 *
 * A connection that broke (Redis restarted, network) is dropped and made
 * again by the next command, once: the caller decides whether to retry, and
 * how long. Error replies become codes with the server's words in the
 * message; connection problems are CA_EUNAVAIL and name the URL (password
 * hidden) and what to do.
 */
#include "bus/bus_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/sigpipe.h"
#include "core/banned.h"

#define BUS_CONNECT_TIMEOUT_MS 3000
/* Longer than any blocking command we send (XREADGROUP/BLPOP block at most 2 s). */
#define BUS_COMMAND_TIMEOUT_MS 15000

int64_t bus__wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void drop(struct bus_conn *c)
{
    if (c->ctx)
        redisFree(c->ctx); /* closes the socketpair's end: a TLS relay ends with it */
    c->ctx = NULL;
    bus__tls_close(c->tls);
    c->tls = NULL;
}

static int unreachable(const struct bus_conn *c, const char *why, struct ca_err *err)
{
    return err_setf(err, CA_EUNAVAIL,
                    "cannot reach Redis at %s (%s); start redis-server there or fix --redis "
                    "(or $CUDA_AGENT_REDIS)",
                    c->url.shown, why);
}

/*
 * Run one command on a connected context; the raw reply (maybe an error reply) in *out.
 * hiredis writes with write(): a write to a connection the server reset raises SIGPIPE in this
 * thread, which would kill a command that does not ignore it (eval --redis). It is held back and
 * the lost connection is an error like any other.
 */
static int raw(struct bus_conn *c, redisReply **out, int argc, const char **argv,
               const size_t *lens, struct ca_err *err)
{
    struct sigpipe_guard guard;
    sigpipe_block(&guard);
    redisReply *r = redisCommandArgv(c->ctx, argc, argv, lens);
    guard.caused = r == NULL;
    sigpipe_restore(&guard);
    if (!r) {
        char why[160], tls[320];
        snprintf(why, sizeof(why), "%s", c->ctx->errstr[0] ? c->ctx->errstr : "connection lost");
        snprintf(tls, sizeof(tls), "%s", bus__tls_why(c->tls));
        drop(c);
        if (tls[0]) /* the server ended the TLS connection and said why */
            return err_setf(err, CA_EUNAVAIL, "Redis at %s ended the connection (%s)", c->url.shown,
                            tls);
        return err_setf(err, CA_EUNAVAIL, "lost Redis at %s (%s); is it running?", c->url.shown,
                        why);
    }
    *out = r;
    return 0;
}

static int connect_now(struct bus_conn *c, struct ca_err *err)
{
    struct timeval ctv = {BUS_CONNECT_TIMEOUT_MS / 1000, 0};
    struct timeval tv = {BUS_COMMAND_TIMEOUT_MS / 1000, 0};
    redisContext *ctx;
    if (c->url.tls) {
        char why[320];
        int fd;
        if (bus__tls_open(&c->url, BUS_CONNECT_TIMEOUT_MS, &c->tls, &fd, why, sizeof(why)) != 0)
            return unreachable(c, why, err);
        if (!(ctx = redisConnectFd(fd))) {
            close(fd);
            bus__tls_close(c->tls);
            c->tls = NULL;
        }
    } else {
        ctx = c->url.unix_path[0] ? redisConnectUnixWithTimeout(c->url.unix_path, ctv)
                                  : redisConnectWithTimeout(c->url.host, c->url.port, ctv);
    }
    if (!ctx)
        return unreachable(c, "out of memory", err);
    if (ctx->err) {
        char why[160];
        snprintf(why, sizeof(why), "%s", ctx->errstr);
        c->ctx = ctx;
        drop(c);
        return unreachable(c, why, err);
    }
    c->ctx = ctx;
    if (redisSetTimeout(ctx, tv) != REDIS_OK)
        LOG_WARN("bus: cannot set a command timeout on the Redis connection");
    if (!c->url.unix_path[0] && !c->url.tls) /* the TLS relay's socket has its own */
        (void)redisEnableKeepAlive(ctx);     /* best effort: dead peers are found by timeouts too */
    redisReply *r = NULL;
    int rc = 0;
    if (c->url.pass[0]) {
        const char *argv[3] = {"AUTH", c->url.user[0] ? c->url.user : c->url.pass, c->url.pass};
        rc = raw(c, &r, c->url.user[0] ? 3 : 2, argv, NULL, err);
        if (rc == 0 && r->type == REDIS_REPLY_ERROR)
            rc = err_setf(err, CA_EUNAVAIL,
                          "Redis at %s refused the credentials (%.120s); check the user and "
                          "password in the URL or $CUDA_AGENT_REDIS_PASSWORD",
                          c->url.shown, r->str);
        if (r)
            freeReplyObject(r);
        r = NULL;
    }
    if (rc == 0 && c->url.db) {
        char db[16];
        snprintf(db, sizeof(db), "%d", c->url.db);
        const char *argv[2] = {"SELECT", db};
        rc = raw(c, &r, 2, argv, NULL, err);
        if (rc == 0 && r->type == REDIS_REPLY_ERROR)
            rc = err_setf(err, CA_EUNAVAIL, "Redis at %s: SELECT %s failed (%.120s)", c->url.shown,
                          db, r->str);
        if (r)
            freeReplyObject(r);
    }
    if (rc == 0) { /* a server that wants credentials says so now, not at the first job */
        const char *argv[1] = {"PING"};
        rc = raw(c, &r, 1, argv, NULL, err);
        if (rc == 0 && r->type == REDIS_REPLY_ERROR)
            rc = err_setf(err, CA_EUNAVAIL,
                          "Redis at %s refused us (%.120s); give the user and password in the "
                          "URL (redis://USER:PASS@HOST) or $CUDA_AGENT_REDIS_PASSWORD",
                          c->url.shown, r->str);
        if (r)
            freeReplyObject(r);
    }
    if (rc)
        drop(c);
    return rc;
}

int bus_conn_open(const struct bus_url *u, struct bus_conn **out, struct ca_err *err)
{
    struct bus_conn *c = xcalloc(1, sizeof(*c));
    c->url = *u;
    int rc = connect_now(c, err);
    if (rc) {
        bus_conn_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int bus_conn_open_url(const char *url, struct bus_conn **out, char *shown, struct ca_err *err)
{
    struct bus_url u;
    int rc = bus_url_parse(url, &u, err);
    if (rc == 0 && shown)
        memcpy(shown, u.shown, sizeof(u.shown));
    if (rc == 0)
        rc = bus_conn_open(&u, out, err);
    explicit_bzero(u.pass, sizeof(u.pass));
    return rc;
}

void bus_conn_free(struct bus_conn *c)
{
    if (!c)
        return;
    drop(c);
    explicit_bzero(c->url.pass, sizeof(c->url.pass));
    free(c);
}

int bus__cmd(struct bus_conn *c, redisReply **reply, struct ca_err *err, int argc,
             const char **argv, const size_t *lens)
{
    int rc;
    if (!c->ctx && (rc = connect_now(c, err)) != 0)
        return rc;
    redisReply *r = NULL;
    if ((rc = raw(c, &r, argc, argv, lens, err)) != 0)
        return rc;
    if (r->type != REDIS_REPLY_ERROR) {
        *reply = r;
        return 0;
    }
    /* LOADING: a restarted Redis replaying its AOF; NOAUTH/NOPERM/WRONGPASS: credentials;
     * MASTERDOWN/READONLY: a replica. All mean "not usable now", not "bad command". */
    bool unavailable = strncmp(r->str, "LOADING", 7) == 0 || strncmp(r->str, "NOAUTH", 6) == 0 ||
                       strncmp(r->str, "NOPERM", 6) == 0 || strncmp(r->str, "WRONGPASS", 9) == 0 ||
                       strncmp(r->str, "MASTERDOWN", 10) == 0 ||
                       strncmp(r->str, "READONLY", 8) == 0;
    rc = err_setf(err, unavailable ? CA_EUNAVAIL : -EPROTO, "Redis at %s: %s: %.160s", c->url.shown,
                  argv[0], r->str);
    freeReplyObject(r);
    return rc;
}

int bus__cmds_(struct bus_conn *c, redisReply **reply, struct ca_err *err, ...)
{
    const char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, err);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL;) {
        ASSERT(argc < (int)ARRAY_SIZE(argv));
        argv[argc++] = a;
    }
    va_end(ap);
    return bus__cmd(c, reply, err, argc, argv, NULL);
}
