/*
 * server.c - the server's life cycle, its results, tools/call's dispatch and
 * /metrics. The rest of the server, one idea a file: session.c (MCP
 * sessions), episodes.c (the episode table and the records on disk), tool_calls.c
 * (the tool list, argument checks, list_tasks and the agent tools), start.c
 * (start_episode), evaluate.c (evaluate and finish), reclaim.c (the cleanup
 * policy), and the protocol and transports: mcp.c, stdio.c, http.c,
 * openenv.c.
 *
 * Invariants: s->mu guards the session list, the episode table and the
 * counters, and is never held across a call to an episode (those block for
 * as long as a tool or an evaluation runs).
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/banned.h"

static const double lat_bounds[SERVER__BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02,
                                                   0.05,  0.1,    0.5,   2.5,  30};

void server__random_hex(char *out, size_t nhex)
{
    unsigned char b[32];
    size_t n = (nhex + 1) / 2;
    ASSERT(n <= sizeof(b));
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(b + got, n - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            BUG("getrandom failed: %s", strerror(errno));
        got += (size_t)r;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < nhex; i++)
        out[i] = hex[(b[i / 2] >> (i % 2 ? 0 : 4)) & 15];
    out[nhex] = '\0';
}

/* ---- results ---- */

json_t *server__tool_result(const char *text, size_t len, json_t *structured, bool is_error)
{
    json_t *t = jsonx_string(sv_from(text, len));
    if (!t)
        t = json_string("(the tool's text was not valid UTF-8)");
    json_t *r = json_pack("{s:[{s:s, s:o}], s:b}", "content", "type", "text", "text", t, "isError",
                          is_error);
    if (structured)
        json_object_set_new(r, "structuredContent", structured);
    return r;
}

json_t *server__tool_errorf(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return server__tool_result(msg, strlen(msg), json_pack("{s:s}", "error", msg), true);
}

/* ---- life cycle ---- */

const struct server_opts *server_opts(const struct server *s)
{
    return &s->o;
}

int server_new(const struct server_opts *o, struct server **out, struct ca_err *err)
{
    if (!o->root)
        return err_setf(err, CA_EUSAGE, "the server needs a root directory for its episodes");
    struct server *s = xcalloc(1, sizeof(*s));
    s->o = *o;
    if (!s->o.max_episodes)
        s->o.max_episodes = SERVER_MAX_EPISODES_DEFAULT;
    if (!s->o.ttl_ms)
        s->o.ttl_ms = SERVER_TTL_DEFAULT_MS;
    if (!s->o.max_body)
        s->o.max_body = CA_LIMIT_REQUEST_BYTES;
    if (!s->o.max_output || s->o.max_output > CA_LIMIT_TOOL_OUTPUT)
        s->o.max_output = CA_LIMIT_TOOL_OUTPUT;
    if (!s->o.max_sessions)
        s->o.max_sessions = SERVER_MAX_SESSIONS_DEFAULT;
    s->keep_finished = o->keep_finished == 0  ? SERVER_KEEP_FINISHED_DEFAULT
                       : o->keep_finished < 0 ? 0
                                              : o->keep_finished;
    s->finished_ttl_s = o->finished_ttl_s == 0  ? SERVER_FINISHED_TTL_DEFAULT_S
                        : o->finished_ttl_s < 0 ? 0
                                                : o->finished_ttl_s;
    task_set_init(&s->tasks);
    (void)pthread_mutex_init(&s->mu, NULL); /* default attributes: cannot fail on Linux */
    pthread_condattr_t ca;
    (void)pthread_condattr_init(&ca);
    (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    (void)pthread_cond_init(&s->reclaim_cv, &ca);
    (void)pthread_condattr_destroy(&ca);
    s->tool_list = server__build_tool_list();
    int rc = fs_mkdirs(o->root, 0700, err);
    if (rc)
        goto fail;
    s->root = realpath(o->root, NULL);
    if (!s->root) {
        rc = err_setf(err, -errno, "%s: %s", o->root, strerror(errno));
        goto fail;
    }
    s->episodes_dir = xstrfmt("%s/episodes", s->root);
    s->ws_dir = xstrfmt("%s/workspaces", s->root);
    if ((rc = fs_mkdirs(s->episodes_dir, 0700, err)) || (rc = fs_mkdirs(s->ws_dir, 0700, err)))
        goto fail;
    struct buf sd;
    buf_init(&sd, CA_LIMIT_PATH);
    if (o->state_dir) {
        rc = fs_mkdirs(o->state_dir, 0700, err);
        if (rc == 0 && buf_addstr(&sd, o->state_dir))
            rc = err_setf(err, CA_ETOOBIG, "state directory path too long");
    } else {
        rc = episode_state_dir(&sd, err);
    }
    if (rc) {
        buf_release(&sd);
        goto fail;
    }
    s->state_dir = buf_detach(&sd, NULL);
    s->o.state_dir = s->state_dir;
    if (o->tasks && (rc = task_load(o->tasks, &s->tasks, err)))
        goto fail;
    if (!(o->flags & SERVER_NO_EPISODES) && (rc = server__reclaim_start(s, err)))
        goto fail;
    s->o.root = s->root;
    *out = s;
    return 0;
fail:
    server_free(s);
    return rc;
}

void server_free(struct server *s)
{
    if (!s)
        return;
    server__reclaim_stop(s);
    while (s->sessions) {
        struct server_session *n = s->sessions->next;
        free(s->sessions);
        s->sessions = n;
    }
    while (s->episodes) {
        struct server__episode *n = s->episodes->next;
        server__episode_free(s->episodes);
        s->episodes = n;
    }
    task_set_release(&s->tasks);
    json_decref(s->tool_list);
    free(s->kept);
    pthread_cond_destroy(&s->reclaim_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->root);
    free(s->state_dir);
    free(s->episodes_dir);
    free(s->ws_dir);
    free(s);
}

int64_t server_inflight(struct server *s)
{
    return atomic_load(&s->inflight);
}

void server__inflight_add(struct server *s, int d)
{
    atomic_fetch_add(&s->inflight, d);
}

/* ---- dispatch ---- */

int server_call_tool(struct server *s, const char *name, const json_t *args, json_t **result)
{
    int64_t t0 = ca_now_us();
    json_t *empty = NULL;
    if (!args)
        args = empty = json_object();
    json_t *r;
    if (strcmp(name, "list_tasks") == 0)
        r = server__tool_list_tasks(s, args);
    else if (strcmp(name, "start_episode") == 0)
        r = server__tool_start_episode(s, args);
    else if (strcmp(name, "evaluate") == 0)
        r = server__tool_evaluate(s, args);
    else if (strcmp(name, "finish") == 0)
        r = server__tool_finish(s, args);
    else if (server__is_agent_tool(name))
        r = server__tool_agent(s, name, args);
    else {
        json_decref(empty);
        return CA_ENOTFOUND;
    }
    json_decref(empty);
    double sec = (double)(ca_now_us() - t0) / 1e6;
    bool err = json_is_true(json_object_get(r, "isError"));
    pthread_mutex_lock(&s->mu);
    s->tool_calls++;
    s->tool_errors += err;
    s->lat_sum += sec;
    size_t b = 0;
    while (b < SERVER__BUCKETS && sec > lat_bounds[b])
        b++;
    s->lat_buckets[b]++;
    pthread_mutex_unlock(&s->mu);
    if (log_events_on())
        log_event("serve.tool", ca_now_us() - t0,
                  json_pack("{s:s, s:s?, s:b}", "tool", name, "episode",
                            json_string_value(json_object_get(args, "episode_id")), "is_error",
                            err));
    *result = r;
    return 0;
}

/* ---- metrics ---- */

void server__count_http(struct server *s, unsigned status)
{
    pthread_mutex_lock(&s->mu);
    s->http_requests[status >= 100 && status < 600 ? status / 100 : 0]++;
    pthread_mutex_unlock(&s->mu);
}

int server_metrics(struct server *s, struct buf *out)
{
    pthread_mutex_lock(&s->mu);
    server__expire_locked(s);
    int e = 0;
    e |= buf_addf(out,
                  "# HELP cuda_agent_episodes_live Episodes started and not finished or expired.\n"
                  "# TYPE cuda_agent_episodes_live gauge\ncuda_agent_episodes_live %" PRId64 "\n"
                  "# HELP cuda_agent_episodes_max The most live episodes this server holds.\n"
                  "# TYPE cuda_agent_episodes_max gauge\ncuda_agent_episodes_max %" PRId64 "\n"
                  "# TYPE cuda_agent_episodes_started_total counter\n"
                  "cuda_agent_episodes_started_total %" PRId64 "\n"
                  "# TYPE cuda_agent_episodes_finished_total counter\n"
                  "cuda_agent_episodes_finished_total %" PRId64 "\n"
                  "# TYPE cuda_agent_episodes_expired_total counter\n"
                  "cuda_agent_episodes_expired_total %" PRId64 "\n"
                  "# HELP cuda_agent_episodes_reclaimed_total Ended episodes whose workspace "
                  "and snapshots the cleanup policy removed.\n"
                  "# TYPE cuda_agent_episodes_reclaimed_total counter\n"
                  "cuda_agent_episodes_reclaimed_total %" PRId64 "\n"
                  "# HELP cuda_agent_episodes_on_disk Episodes whose trees are on disk.\n"
                  "# TYPE cuda_agent_episodes_on_disk gauge\n"
                  "cuda_agent_episodes_on_disk %" PRId64 "\n"
                  "# TYPE cuda_agent_mcp_sessions gauge\ncuda_agent_mcp_sessions %" PRId64 "\n"
                  "# TYPE cuda_agent_rpc_requests_total counter\n"
                  "cuda_agent_rpc_requests_total %" PRId64 "\n"
                  "# TYPE cuda_agent_rpc_errors_total counter\n"
                  "cuda_agent_rpc_errors_total %" PRId64 "\n"
                  "# TYPE cuda_agent_requests_inflight gauge\n"
                  "cuda_agent_requests_inflight %" PRId64 "\n"
                  "# TYPE cuda_agent_tool_call_errors_total counter\n"
                  "cuda_agent_tool_call_errors_total %" PRId64 "\n",
                  s->live, s->o.max_episodes, s->episodes_started, s->episodes_finished,
                  s->episodes_expired, s->episodes_reclaimed, (int64_t)s->nkept, s->nsessions,
                  s->rpc_requests, s->rpc_errors, (int64_t)atomic_load(&s->inflight),
                  s->tool_errors);
    e |= buf_addstr(out, "# HELP cuda_agent_http_requests_total HTTP responses by status class.\n"
                         "# TYPE cuda_agent_http_requests_total counter\n");
    for (int c = 1; c <= 5; c++)
        e |= buf_addf(out, "cuda_agent_http_requests_total{code=\"%dxx\"} %" PRId64 "\n", c,
                      s->http_requests[c]);
    e |= buf_addstr(out, "# HELP cuda_agent_tool_call_seconds Time to answer one tools/call.\n"
                         "# TYPE cuda_agent_tool_call_seconds histogram\n");
    int64_t cum = 0;
    for (size_t b = 0; b < SERVER__BUCKETS; b++) {
        cum += s->lat_buckets[b];
        e |= buf_addf(out, "cuda_agent_tool_call_seconds_bucket{le=\"%g\"} %" PRId64 "\n",
                      lat_bounds[b], cum);
    }
    cum += s->lat_buckets[SERVER__BUCKETS];
    e |= buf_addf(out,
                  "cuda_agent_tool_call_seconds_bucket{le=\"+Inf\"} %" PRId64 "\n"
                  "cuda_agent_tool_call_seconds_sum %.6f\n"
                  "cuda_agent_tool_call_seconds_count %" PRId64 "\n",
                  cum, s->lat_sum, s->tool_calls);
    pthread_mutex_unlock(&s->mu);
    return e ? CA_ETOOBIG : 0;
}
