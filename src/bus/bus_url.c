/*
 * bus_url.c - parsing a Redis URL into where to connect and how to log in.
 * Pure (no I/O) and unit-tested. The password never reaches a message: every
 * message names u->shown, where it is "***".
 */
#include "bus/bus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sv.h"
#include "core/banned.h"

static int copy_part(char *dst, size_t cap, struct sv s, const char *what, struct ca_err *err)
{
    if (s.len >= cap)
        return err_setf(err, CA_EUSAGE, "the Redis URL's %s is too long (at most %zu bytes)", what,
                        cap - 1);
    /* %XX escapes, so that a password may hold '@' or ':'. */
    size_t k = 0;
    for (size_t i = 0; i < s.len; i++) {
        char ch = s.p[i];
        if (ch == '%' && i + 2 < s.len) {
            char hex[3] = {s.p[i + 1], s.p[i + 2], 0};
            char *end;
            long v = strtol(hex, &end, 16);
            if (*end || v <= 0)
                return err_setf(err, CA_EUSAGE, "bad %%-escape in the Redis URL's %s", what);
            dst[k++] = (char)v;
            i += 2;
            continue;
        }
        dst[k++] = ch;
    }
    dst[k] = '\0';
    return 0;
}

int bus_url_parse(const char *url, struct bus_url *u, struct ca_err *err)
{
    memset(u, 0, sizeof(*u));
    u->port = 6379;
    if (!url || !*url)
        return err_setf(err, CA_EUSAGE, "no Redis URL: pass --redis redis://HOST:PORT");
    struct sv s = sv_cstr(url);
    int rc;
    if (sv_chop_prefix(&s, sv_cstr("unix://"))) {
        struct sv path = sv_split(&s, '?');
        if (path.len == 0 || path.p[0] != '/')
            return err_setf(err, CA_EUSAGE, "unix:// wants an absolute socket path: unix:///PATH");
        if ((rc = copy_part(u->unix_path, sizeof(u->unix_path), path, "socket path", err)))
            return rc;
        if (s.len) {
            int64_t db;
            if (!sv_chop_prefix(&s, sv_cstr("db=")) ||
                sv_parse_range(s, 0, 1 << 20, &db, "the Redis database number", err))
                return err_setf(err, CA_EUSAGE, "unix:// URLs take only ?db=N");
            u->db = (int)db;
        }
        snprintf(u->shown, sizeof(u->shown), "unix://%s?db=%d", u->unix_path, u->db);
        goto pass;
    }
    u->tls = sv_chop_prefix(&s, sv_cstr("rediss://"));
    if (!u->tls && !sv_chop_prefix(&s, sv_cstr("redis://")))
        return err_setf(err, CA_EUSAGE,
                        "a Redis URL starts with redis://, rediss:// (TLS) or unix:// (e.g. "
                        "redis://127.0.0.1:6379)");
    long at = -1;
    for (size_t i = 0; i < s.len && s.p[i] != '/'; i++)
        if (s.p[i] == '@')
            at = (long)i; /* the last '@' before the path: a password may hold an escaped one */
    bool has_pass = false;
    if (at >= 0) {
        struct sv cred = sv_sub(s, 0, (size_t)at);
        s = sv_sub(s, (size_t)at + 1, s.len - (size_t)at - 1);
        long colon = sv_find_ch(cred, ':');
        struct sv user = colon >= 0 ? sv_sub(cred, 0, (size_t)colon) : cred;
        if ((rc = copy_part(u->user, sizeof(u->user), user, "user", err)))
            return rc;
        if (colon >= 0) {
            struct sv pass = sv_sub(cred, (size_t)colon + 1, cred.len - (size_t)colon - 1);
            if ((rc = copy_part(u->pass, sizeof(u->pass), pass, "password", err)))
                return rc;
            has_pass = true;
        }
    }
    struct sv hostport = sv_split(&s, '/');
    struct sv host = hostport;
    if (hostport.len && hostport.p[0] == '[') { /* [IPv6]:port */
        long close = sv_find_ch(hostport, ']');
        if (close < 0)
            return err_setf(err, CA_EUSAGE, "unclosed [ in the Redis URL's host");
        host = sv_sub(hostport, 1, (size_t)close - 1);
        hostport = sv_sub(hostport, (size_t)close + 1, hostport.len - (size_t)close - 1);
        if (hostport.len && hostport.p[0] != ':')
            return err_setf(err, CA_EUSAGE, "junk after ] in the Redis URL's host");
    } else {
        long colon = sv_find_ch(hostport, ':');
        host = colon >= 0 ? sv_sub(hostport, 0, (size_t)colon) : hostport;
        hostport = colon >= 0 ? sv_sub(hostport, (size_t)colon, hostport.len - (size_t)colon)
                              : sv_from("", 0);
    }
    if (host.len == 0)
        return err_setf(err, CA_EUSAGE, "the Redis URL has no host: redis://HOST:PORT");
    if ((rc = copy_part(u->host, sizeof(u->host), host, "host", err)))
        return rc;
    if (hostport.len) {
        int64_t port;
        if (sv_parse_range(sv_sub(hostport, 1, hostport.len - 1), 1, 65535, &port,
                           "the Redis URL's port", err))
            return CA_EUSAGE;
        u->port = (int)port;
    }
    if (s.len) {
        int64_t db;
        if (sv_parse_range(s, 0, 1 << 20, &db, "the Redis URL's database number", err))
            return CA_EUSAGE;
        u->db = (int)db;
    }
    bool v6 = strchr(u->host, ':') != NULL;
    snprintf(u->shown, sizeof(u->shown), "%s://%s%s%s%s%s%s:%d/%d", u->tls ? "rediss" : "redis",
             u->user, has_pass ? ":***" : "", u->user[0] || has_pass ? "@" : "", v6 ? "[" : "",
             u->host, v6 ? "]" : "", u->port, u->db);
pass:
    if (!u->pass[0]) {
        const char *p = getenv("CUDA_AGENT_REDIS_PASSWORD");
        if (p && *p) {
            if (strlen(p) >= sizeof(u->pass))
                return err_setf(err, CA_EUSAGE, "$CUDA_AGENT_REDIS_PASSWORD is too long");
            snprintf(u->pass, sizeof(u->pass), "%s", p);
        }
    }
    return 0;
}
