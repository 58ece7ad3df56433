/*
 * server.c - the server's state (sessions, episodes, metrics) and its tools:
 * list_tasks, start_episode, the agent tools with an episode_id, evaluate and
 * finish.
 *
 * Invariants: s->mu guards the session list, the episode table and the
 * counters, and is never held across a call to an episode (those block for
 * as long as a tool or an evaluation runs). An episode in the table is
 * pinned by `busy` while calls run on it, so expiry never frees it under a
 * caller. An episode's record on disk (<root>/episodes/<id>.json) is written
 * at start and at finish; it is what a restarted server re-attaches from.
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
#include "core/msg.h"
#include "core/proc.h"
#include "eval/eval.h"
#include "eval/eval_report.h"
#include "sandbox/sandbox.h"
#include "tools/tools.h"
#include "workspace/workspace.h"
#include "core/banned.h"

/* Bounds on one call to an episode: a Bash call may run 10 minutes; an evaluation longer. */
#define TOOL_TIMEOUT_MS (11 * 60 * 1000)
#define EVAL_TIMEOUT_MS (60 * 60 * 1000)
#define LIST_TASKS_MAX 1000

static const double lat_bounds[SERVER__BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02,
                                                   0.05,  0.1,    0.5,   2.5,  30};

static void random_hex(char *out, size_t nhex)
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

/* ---- tool list ---- */

static json_t *prop(const char *type, const char *desc)
{
    return json_pack("{s:s, s:s}", "type", type, "description", desc);
}

static json_t *tool_def(const char *name, const char *desc, json_t *props, json_t *required)
{
    return json_pack("{s:s, s:s, s:{s:s, s:o, s:o, s:b}}", "name", name, "description", desc,
                     "inputSchema", "type", "object", "properties", props, "required", required,
                     "additionalProperties", 0);
}

#define EPISODE_ID_DESC "The episode, as start_episode returned it."

static json_t *build_tool_list(void)
{
    json_t *list = json_array();
    json_array_append_new(
        list, tool_def("list_tasks",
                       "List the tasks this server offers (id, name, KernelBench level, operators)."
                       " Pass one id to start_episode.",
                       json_pack("{s:o, s:o, s:o}", "filter",
                                 prop("string", "Only tasks whose id or name contains this."),
                                 "offset", prop("integer", "Skip this many (default 0)."), "limit",
                                 prop("integer", "At most this many (default and most 1000).")),
                       json_array()));
    json_t *limits = json_pack(
        "{s:s, s:s, s:{s:o, s:o}, s:b}", "type", "object", "description",
        "Per-episode limits, within the server's own.", "properties", "wall_s",
        prop("integer", "Seconds after which the episode's tools stop (finish still works)."),
        "ttl_s", prop("integer", "Seconds without calls after which the episode ends."),
        "additionalProperties", 0);
    json_array_append_new(
        list,
        tool_def("start_episode",
                 "Start an episode: a fresh workspace for one task in its own sandbox with a "
                 "persistent shell. Returns episode_id (pass it to every other tool), the system "
                 "prompt (the workspace's SKILL.md) and the task message for the model.",
                 json_pack("{s:o, s:o, s:o, s:o}", "task",
                           prop("string", "A task id, name or unique id prefix from list_tasks."),
                           "code",
                           prop("string", "Or: the task's Python source in KernelBench format "
                                          "(class Model, get_inputs, get_init_inputs)."),
                           "seed",
                           prop("integer", "Recorded with the episode (the evaluator draws its "
                                           "own secret input seeds)."),
                           "limits", limits),
                 json_array()));
    json_t *schemas = tool_schemas();
    size_t i;
    json_t *fn;
    json_array_foreach(schemas, i, fn)
    {
        json_t *f = json_object_get(fn, "function");
        json_t *params = json_deep_copy(json_object_get(f, "parameters"));
        json_object_set_new(json_object_get(params, "properties"), "episode_id",
                            prop("string", EPISODE_ID_DESC));
        json_t *req = json_object_get(params, "required");
        if (!req)
            json_object_set_new(params, "required", req = json_array());
        json_array_insert_new(req, 0, json_string("episode_id"));
        json_array_append_new(list, json_pack("{s:O, s:O, s:o}", "name", json_object_get(f, "name"),
                                              "description", json_object_get(f, "description"),
                                              "inputSchema", params));
    }
    json_decref(schemas);
    json_array_append_new(
        list,
        tool_def("evaluate",
                 "Evaluate the episode's workspace as the trusted evaluator sees it: compile, "
                 "verify (correctness against the reference on fresh inputs) or profile (verify, "
                 "then time against eager PyTorch and torch.compile, and reward). The result's "
                 "structuredContent holds the evaluator's report.",
                 json_pack("{s:o, s:{s:s, s:[sss], s:s}}", "episode_id",
                           prop("string", EPISODE_ID_DESC), "stage", "type", "string", "enum",
                           "compile", "verify", "profile", "description",
                           "What to run (default profile)."),
                 json_pack("[s]", "episode_id")));
    json_array_append_new(
        list,
        tool_def("finish",
                 "End the episode and return its reward: the best correct evaluation of the "
                 "trajectory (-1 when none was correct; else 1, 2 or 3 by speedup over eager and "
                 "torch.compile), with its metrics and snapshot. Stops the sandbox.",
                 json_pack("{s:o, s:o}", "episode_id", prop("string", EPISODE_ID_DESC),
                           "final_eval",
                           prop("boolean", "Profile the workspace as it is now first (default "
                                           "true).")),
                 json_pack("[s]", "episode_id")));
    return list;
}

json_t *server_tool_list(const struct server *s)
{
    return json_incref(s->tool_list);
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
    s->tool_list = build_tool_list();
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

static void episode_entry_free(struct server__episode *e)
{
    if (!e)
        return;
    free(e->workspace);
    free(e->task_id);
    json_decref(e->result);
    free(e);
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
        episode_entry_free(s->episodes);
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

/* ---- sessions ---- */

/* Take *pp out of the list; free it unless someone still holds it. Under mu. */
static void unlink_session_locked(struct server *s, struct server_session **pp)
{
    struct server_session *gone = *pp;
    *pp = gone->next;
    gone->next = NULL;
    gone->ended = true;
    s->nsessions--;
    if (gone->refs == 0)
        free(gone);
}

void server_session_release(struct server *s, struct server_session *sess)
{
    if (!sess)
        return;
    pthread_mutex_lock(&s->mu);
    bool gone = --sess->refs == 0 && sess->ended;
    pthread_mutex_unlock(&s->mu);
    if (gone)
        free(sess);
}

struct server_session *server_session_new(struct server *s)
{
    struct server_session *n = xcalloc(1, sizeof(*n));
    random_hex(n->id, SERVER_SESSION_ID_LEN);
    n->last_us = ca_now_us();
    n->refs = 1;
    pthread_mutex_lock(&s->mu);
    if (s->nsessions >= s->o.max_sessions) {
        /* Drop the least recently used: a client that comes back gets 404 and
         * initializes again, as the transport specifies. */
        struct server_session **pp = &s->sessions, **oldest = pp;
        for (; *pp; pp = &(*pp)->next)
            if ((*pp)->last_us < (*oldest)->last_us)
                oldest = pp;
        unlink_session_locked(s, oldest);
    }
    n->next = s->sessions;
    s->sessions = n;
    s->nsessions++;
    pthread_mutex_unlock(&s->mu);
    return n;
}

struct server_session *server_session_find(struct server *s, const char *id)
{
    pthread_mutex_lock(&s->mu);
    struct server_session *p = s->sessions;
    for (; p; p = p->next)
        if (strcmp(p->id, id) == 0) {
            p->last_us = ca_now_us();
            p->refs++;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    return p;
}

const char *server_session_id(const struct server_session *sess)
{
    return sess->id;
}

const char *server_session_version(const struct server_session *sess)
{
    return sess->version;
}

int server_session_end(struct server *s, const char *id)
{
    int rc = CA_ENOTFOUND;
    pthread_mutex_lock(&s->mu);
    for (struct server_session **pp = &s->sessions; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->id, id) == 0) {
            unlink_session_locked(s, pp);
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- the episode table ---- */

struct episode_opts server__ep_opts(const struct server *s, const char *id, const char *workspace)
{
    return (struct episode_opts){
        .state_dir = s->state_dir,
        .id = id,
        .workspace = workspace,
        .sandbox_flags = s->o.sandbox_flags,
        .idle_timeout_ms = s->o.ttl_ms,
        .evaluator = s->o.evaluator,
        .eval_device = s->o.eval_device,
    };
}

/* Drop entries idle past their TTL (their supervisors have ended themselves). Under mu. */
void server__expire_locked(struct server *s)
{
    int64_t now = ca_now_us();
    for (struct server__episode **pp = &s->episodes; *pp;) {
        struct server__episode *e = *pp;
        if (e->busy == 0 && (now - e->last_us) / 1000 > e->ttl_ms) {
            *pp = e->next;
            if (!e->result) {
                s->live--;
                s->episodes_expired++;
            }
            LOG_INFO("episode %s: idle past its TTL, dropped", e->id);
            episode_entry_free(e);
            continue;
        }
        pp = &e->next;
    }
}

static json_t *record_of(const struct server__episode *e)
{
    json_t *rec =
        json_pack("{s:s, s:s, s:s?, s:I, s:I, s:I, s:I, s:O?}", "episode_id", e->id, "workspace",
                  e->workspace, "task_id", e->task_id, "seed", (json_int_t)e->seed, "created_unix",
                  (json_int_t)time(NULL) - (ca_now_us() - e->created_us) / 1000000, "wall_ms",
                  (json_int_t)e->wall_ms, "ttl_ms", (json_int_t)e->ttl_ms, "result", e->result);
    if (e->ended_unix)
        json_object_set_new(rec, "ended_unix", json_integer((json_int_t)e->ended_unix));
    return rec;
}

static void save_record(struct server *s, const struct server__episode *e)
{
    json_t *rec = record_of(e);
    char *path = xstrfmt("%s/%s.json", s->episodes_dir, e->id);
    struct buf b;
    buf_init(&b, CA_LIMIT_JSON_BYTES);
    struct ca_err err = {0};
    if (jsonx_dump(rec, 2, &b) || fs_write_atomic(path, b.data, b.len, 0600, &err))
        LOG_WARN("episode %s: cannot write its record %s: %s", e->id, path, err.msg);
    buf_release(&b);
    free(path);
    json_decref(rec);
}

/* An episode a restarted server left: its record, if its supervisor still answers or it
 * finished. NULL when there is none. */
static struct server__episode *load_record(struct server *s, const char *id)
{
    if (episode_check_id(id, NULL))
        return NULL;
    char *path = xstrfmt("%s/%s.json", s->episodes_dir, id);
    struct buf b;
    buf_init(&b, CA_LIMIT_JSON_BYTES);
    json_t *rec = NULL;
    struct server__episode *e = NULL;
    if (fs_read_file(path, CA_LIMIT_JSON_BYTES, &b, NULL) == 0 &&
        jsonx_parse(sv_from(b.data, b.len), CA_LIMIT_JSON_BYTES, path, &rec, NULL) == 0) {
        const char *ws = json_string_value(json_object_get(rec, "workspace"));
        json_t *result = json_object_get(rec, "result");
        struct episode_opts eo = server__ep_opts(s, id, NULL);
        /* A removed episode's supervisor is gone (and episode_running would make its
         * state directory again). */
        bool gone = json_object_get(rec, "reclaimed_unix") != NULL;
        if (ws && (json_is_object(result) || (!gone && episode_running(&eo)))) {
            e = xcalloc(1, sizeof(*e));
            snprintf(e->id, sizeof(e->id), "%s", id);
            e->workspace = xstrdup(ws);
            const char *tid = json_string_value(json_object_get(rec, "task_id"));
            e->task_id = tid ? xstrdup(tid) : NULL;
            e->seed = json_integer_value(json_object_get(rec, "seed"));
            e->created_us = e->last_us = ca_now_us();
            e->wall_ms = json_integer_value(json_object_get(rec, "wall_ms"));
            e->ttl_ms = json_integer_value(json_object_get(rec, "ttl_ms"));
            if (e->ttl_ms <= 0)
                e->ttl_ms = s->o.ttl_ms;
            e->result = json_is_object(result) ? json_incref(result) : NULL;
            e->ended_unix = json_integer_value(json_object_get(rec, "ended_unix"));
        }
    }
    json_decref(rec);
    buf_release(&b);
    free(path);
    return e;
}

/* Find and pin an episode (busy++); NULL with a message in *why. */
static struct server__episode *pin(struct server *s, const json_t *args, json_t **why)
{
    const char *id = json_string_value(json_object_get(args, "episode_id"));
    if (!id) {
        *why = server__tool_errorf("episode_id is required: a string, as start_episode "
                                   "returned it");
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    server__expire_locked(s);
    struct server__episode *e = s->episodes;
    while (e && strcmp(e->id, id) != 0)
        e = e->next;
    if (!e) {
        pthread_mutex_unlock(&s->mu);
        struct server__episode *found = load_record(s, id);
        pthread_mutex_lock(&s->mu);
        for (e = s->episodes; e && strcmp(e->id, id) != 0; e = e->next)
            ;
        if (!e && found) {
            found->next = s->episodes;
            s->episodes = e = found;
            if (!found->result)
                s->live++;
            found = NULL;
            LOG_INFO("episode %s: re-attached from its record", id);
        }
        episode_entry_free(found);
    }
    if (!e) {
        pthread_mutex_unlock(&s->mu);
        *why = server__tool_errorf("no episode '%.80s' (unknown, or it ended after its idle TTL): "
                                   "start one with start_episode",
                                   id);
        return NULL;
    }
    e->busy++;
    e->calls++;
    e->last_us = ca_now_us();
    pthread_mutex_unlock(&s->mu);
    return e;
}

static void unpin(struct server *s, struct server__episode *e)
{
    pthread_mutex_lock(&s->mu);
    e->busy--;
    e->last_us = ca_now_us();
    pthread_mutex_unlock(&s->mu);
}

static bool past_wall(const struct server__episode *e)
{
    return e->wall_ms > 0 && (ca_now_us() - e->created_us) / 1000 > e->wall_ms;
}

/* ---- argument checks ---- */

/* Refuse keys outside `allowed` (NULL-terminated); a message for the model, or NULL. */
static json_t *check_keys(const char *tool, const json_t *args, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)args, k, v)
    {
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], k) != 0)
            i++;
        if (!allowed[i])
            return server__tool_errorf("%s: unknown argument '%.64s'", tool, k);
    }
    return NULL;
}

static json_t *get_int(const char *tool, const json_t *args, const char *key, int64_t lo,
                       int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(args, key);
    if (!v || json_is_null(v))
        return NULL;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return server__tool_errorf("%s: %s must be an integer from %" PRId64 " to %" PRId64, tool,
                                   key, lo, hi);
    *out = json_integer_value(v);
    return NULL;
}

/* ---- list_tasks ---- */

static json_t *tool_list_tasks(struct server *s, const json_t *args)
{
    static const char *const keys[] = {"filter", "offset", "limit", NULL};
    json_t *bad = check_keys("list_tasks", args, keys);
    int64_t offset = 0, limit = LIST_TASKS_MAX;
    if (bad || (bad = get_int("list_tasks", args, "offset", 0, INT32_MAX, &offset)) ||
        (bad = get_int("list_tasks", args, "limit", 1, LIST_TASKS_MAX, &limit)))
        return bad;
    json_t *f = json_object_get(args, "filter");
    if (f && !json_is_string(f))
        return server__tool_errorf("list_tasks: filter must be a string");
    const char *filter = f ? json_string_value(f) : NULL;
    json_t *tasks = json_array();
    int64_t matched = 0;
    for (size_t i = 0; i < s->tasks.n; i++) {
        const struct task *t = &s->tasks.tasks[i];
        if (filter && !strstr(t->id, filter) && !strstr(t->name, filter))
            continue;
        if (matched++ < offset || (int64_t)json_array_size(tasks) >= limit)
            continue;
        json_t *ops = json_array();
        for (size_t k = 0; k < t->nops; k++)
            json_array_append_new(ops, json_string(t->ops[k]));
        json_array_append_new(tasks, json_pack("{s:s, s:s, s:i, s:o, s:s?}", "id", t->id, "name",
                                               t->name, "level", t->level, "ops", ops,
                                               "data_source", t->data_source));
    }
    json_t *sc = json_pack("{s:o, s:I, s:I}", "tasks", tasks, "total", (json_int_t)matched,
                           "offset", (json_int_t)offset);
    struct buf text;
    buf_init(&text, CA_LIMIT_TOOL_OUTPUT);
    size_t i;
    json_t *t;
    int e = buf_addf(&text, "%" PRId64 " task(s)%s\n", matched,
                     s->tasks.n ? "" : " (this server was started without --tasks: pass code)");
    json_array_foreach(tasks, i, t) e |=
        buf_addf(&text, "%s\n", json_string_value(json_object_get(t, "id")));
    if (e)
        LOG_DEBUG("list_tasks text cut");
    json_t *r = server__tool_result(text.data, text.len, sc, false);
    buf_release(&text);
    return r;
}

/* ---- start_episode ---- */

extern char **environ;

/*
 * Start the episode's supervisor. Through this program's own `tool` command when it can be
 * found: the supervisor is then forked from that small, fresh, single-threaded process, not
 * from this one (a fork of a busy multi-threaded server would keep copies of its heap and of
 * every thread's stack for as long as the episode lives: about 0.6 MiB an episode). The
 * first call is a Bash `true`, which also starts the persistent shell.
 */
static int start_supervisor(struct server *s, const struct server__episode *e, struct ca_err *err)
{
    const char *exe = eval_sandbox_bin();
    if (!exe || !strstr(exe, "cuda-agent")) {
        struct episode_opts eo = server__ep_opts(s, e->id, e->workspace);
        eo.idle_timeout_ms = e->ttl_ms;
        json_t *ping = json_pack("{s:s}", "op", "ping"), *reply = NULL;
        int rc = episode_request(&eo, ping, 60000, &reply, err);
        json_decref(ping);
        json_decref(reply);
        return rc;
    }
    char ttl[32];
    snprintf(ttl, sizeof(ttl), "%lld", (long long)(e->ttl_ms + 999) / 1000);
    const char *argv[16];
    size_t n = 0;
    argv[n++] = exe;
    argv[n++] = "tool";
    argv[n++] = "--workspace";
    argv[n++] = e->workspace;
    argv[n++] = "--episode";
    argv[n++] = e->id;
    argv[n++] = "--state-dir";
    argv[n++] = s->state_dir;
    argv[n++] = "--idle-timeout";
    argv[n++] = ttl;
    if (s->o.sandbox_flags & SANDBOX_INSECURE)
        argv[n++] = "--insecure-no-sandbox";
    argv[n++] = "Bash";
    argv[n++] = "{\"command\": \"true\"}";
    argv[n] = NULL;
    /* The evaluator settings are the server's, whatever this process's environment says. */
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    const char **envp = xcalloc(nenv + 3, sizeof(*envp));
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (strncmp(environ[i], "CUDA_AGENT_EVALUATOR=", 21) &&
            strncmp(environ[i], "CUDA_AGENT_EVAL_DEVICE=", 23))
            envp[k++] = environ[i];
    char *ev = s->o.evaluator ? xstrfmt("CUDA_AGENT_EVALUATOR=%s", s->o.evaluator) : NULL;
    char *dev = s->o.eval_device ? xstrfmt("CUDA_AGENT_EVAL_DEVICE=%s", s->o.eval_device) : NULL;
    if (ev)
        envp[k++] = ev;
    if (dev)
        envp[k++] = dev;
    struct proc_opts po = {.argv = argv, .env = envp, .timeout_ms = 60000, .merge_stderr = true};
    struct proc_result r;
    proc_result_init(&r);
    int rc = proc_run(&po, &r, err);
    if (rc == 0 && !proc_ok(&r)) {
        buf_rtrim(&r.out);
        rc = err_setf(err, r.exit_code == 69 ? CA_EUNAVAIL : CA_ECHILD, "%s",
                      r.out.len ? r.out.data : "the episode's supervisor did not start");
    }
    proc_result_release(&r);
    free(ev);
    free(dev);
    free(envp);
    return rc;
}

static json_t *tool_start_episode(struct server *s, const json_t *args)
{
    static const char *const keys[] = {"task", "code", "seed", "limits", NULL};
    static const char *const lkeys[] = {"wall_s", "ttl_s", NULL};
    json_t *bad = check_keys("start_episode", args, keys);
    int64_t seed = 0, wall_s = s->o.wall_ms / 1000, ttl_s = s->o.ttl_ms / 1000;
    if (bad || (bad = get_int("start_episode", args, "seed", INT64_MIN, INT64_MAX, &seed)))
        return bad;
    json_t *limits = json_object_get(args, "limits");
    if (limits && !json_is_object(limits))
        return server__tool_errorf("start_episode: limits must be an object");
    if (limits &&
        ((bad = check_keys("start_episode limits", limits, lkeys)) ||
         (bad = get_int("start_episode", limits, "wall_s", 1,
                        s->o.wall_ms ? s->o.wall_ms / 1000 : 30 * 86400, &wall_s)) ||
         (bad = get_int("start_episode", limits, "ttl_s", 1, s->o.ttl_ms / 1000, &ttl_s))))
        return bad;
    json_t *jt = json_object_get(args, "task"), *jc = json_object_get(args, "code");
    if ((jt && !json_is_string(jt)) || (jc && !json_is_string(jc)) || (!jt == !jc))
        return server__tool_errorf("start_episode: give either task (a string from list_tasks) "
                                   "or code (the task's Python source)");
    if (jc && !s->o.allow_code)
        return server__tool_errorf("start_episode: this server takes only its own tasks (task, "
                                   "from list_tasks): inline code needs --allow-task-code");
    if (s->o.flags & SERVER_NO_EPISODES)
        return server__tool_errorf("start_episode: this server starts no episodes");
    struct ca_err err = {0};
    struct task inline_task = {0};
    const struct task *task = NULL;
    int rc;
    if (jt) {
        rc = task_set_find(&s->tasks, json_string_value(jt), &task, &err);
        if (rc)
            return server__tool_errorf("start_episode: %s", err.msg);
    } else {
        rc = task_parse("start_episode code", json_string_value(jc), json_string_length(jc),
                        &inline_task, &err);
        if (rc)
            return server__tool_errorf("start_episode: the task code was rejected: %s", err.msg);
        task = &inline_task;
    }
    pthread_mutex_lock(&s->mu);
    server__expire_locked(s);
    bool full = s->live >= s->o.max_episodes;
    if (!full)
        s->live++; /* reserved; given back below on failure */
    pthread_mutex_unlock(&s->mu);
    if (full) {
        task_release(&inline_task);
        return server__tool_errorf("start_episode: the server holds its maximum of %" PRId64
                                   " live episodes: finish one, or wait for idle ones to end",
                                   s->o.max_episodes);
    }
    struct server__episode *e = xcalloc(1, sizeof(*e));
    char hex[17];
    random_hex(hex, 16);
    snprintf(e->id, sizeof(e->id), "ep-%s", hex);
    e->workspace = xstrfmt("%s/%s", s->ws_dir, e->id);
    e->task_id = xstrdup(task->id);
    e->seed = seed;
    e->created_us = e->last_us = ca_now_us();
    e->wall_ms = wall_s * 1000;
    e->ttl_ms = ttl_s * 1000;
    json_t *result = NULL;
    struct buf skill;
    buf_init(&skill, CA_LIMIT_TASK_BYTES + 4096);
    char *user = NULL;
    int64_t t0 = ca_now_us();
    rc = workspace_create(task, e->workspace, 0, &err);
    if (rc == 0)
        rc = start_supervisor(s, e, &err);
    char *skill_path = xstrfmt("%s/SKILL.md", e->workspace);
    if (rc == 0)
        rc = fs_read_file(skill_path, CA_LIMIT_TASK_BYTES, &skill, &err);
    free(skill_path);
    if (rc) {
        result = server__tool_errorf("start_episode: cannot start the episode: %s", err.msg);
        struct ca_err e2;
        if (fs_is_dir(e->workspace) && fs_remove_tree(e->workspace, &e2))
            LOG_WARN("cannot remove %s: %s", e->workspace, e2.msg);
        pthread_mutex_lock(&s->mu);
        s->live--;
        pthread_mutex_unlock(&s->mu);
        episode_entry_free(e);
        goto out;
    }
    user = xstrfmt("The task is `model.py` in your workspace:\n\n```python\n%s\n```\n\n"
                   "Write `ModelNew` in `model_new.py` with your own CUDA kernels in `kernels/`, "
                   "following SKILL.md: make it correct first (`./verify`), then fast "
                   "(`./profile`). Call finish when you are done.",
                   task->code);
    save_record(s, e);
    json_t *sc = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:f}", "episode_id", e->id,
                           "task_id", e->task_id, "system_prompt", skill.data, "task_message", user,
                           "seed", (json_int_t)seed, "wall_s", (json_int_t)wall_s, "ttl_s",
                           (json_int_t)ttl_s, "start_ms", (double)(ca_now_us() - t0) / 1000.0);
    if (!sc) {
        result = server__tool_errorf("start_episode: SKILL.md or the task is not valid UTF-8");
        goto out;
    }
    char *text = xstrfmt("Started episode %s for task %s. Pass episode_id \"%s\" to the tools. "
                         "structuredContent holds system_prompt (SKILL.md) and task_message.",
                         e->id, e->task_id, e->id);
    result = server__tool_result(text, strlen(text), sc, false);
    free(text);
    pthread_mutex_lock(&s->mu);
    e->next = s->episodes;
    s->episodes = e;
    s->episodes_started++;
    server__kept_ended_locked(s, e->id, 0);
    pthread_mutex_unlock(&s->mu);
    if (log_events_on())
        log_event("serve.episode_start", ca_now_us() - t0,
                  json_pack("{s:s, s:s}", "episode", e->id, "task", e->task_id));
out:
    free(user);
    buf_release(&skill);
    task_release(&inline_task);
    return result;
}

/* ---- agent tools ---- */

static bool is_agent_tool(const char *name)
{
    for (size_t i = 0; tool_names[i]; i++)
        if (strcmp(tool_names[i], name) == 0)
            return true;
    return false;
}

/* Cut text to the server's output limit at a UTF-8 boundary, saying so. */
static json_t *text_result(struct server *s, const char *text, size_t len, json_t *sc, bool err)
{
    size_t max = s->o.max_output;
    if (len <= max)
        return server__tool_result(text, len, sc, err);
    size_t keep = max > 128 ? max - 128 : max;
    while (keep && ((unsigned char)text[keep] & 0xC0) == 0x80)
        keep--;
    struct buf b;
    buf_init(&b, max + 256);
    if (buf_add(&b, text, keep) ||
        buf_addf(&b, "\n[... %zu more bytes cut: the server's output limit ...]", len - keep))
        BUG("bounded text over its bound");
    json_t *r = server__tool_result(b.data, b.len, sc, err);
    buf_release(&b);
    return r;
}

static json_t *tool_agent(struct server *s, const char *name, const json_t *args)
{
    json_t *why = NULL;
    struct server__episode *e = pin(s, args, &why);
    if (!e)
        return why;
    json_t *result = NULL, *reply = NULL;
    if (e->result || e->finishing) {
        result = server__tool_errorf("episode %s has finished: start a new one", e->id);
        goto out;
    }
    if (past_wall(e)) {
        result = server__tool_errorf("episode %s ran past its wall-clock limit of %" PRId64
                                     " s: only finish is accepted now",
                                     e->id, e->wall_ms / 1000);
        goto out;
    }
    json_t *targs = json_deep_copy(args);
    json_object_del(targs, "episode_id");
    json_t *req = json_pack("{s:s, s:o}", "tool", name, "args", targs);
    struct episode_opts eo = server__ep_opts(s, e->id, NULL);
    struct ca_err err = {0};
    int rc = episode_request(&eo, req, TOOL_TIMEOUT_MS, &reply, &err);
    json_decref(req);
    if (rc) {
        result = server__tool_errorf("episode %s did not answer: %s", e->id, err.msg);
        goto out;
    }
    const char *text = json_string_value(json_object_get(reply, "text"));
    bool is_error = json_is_true(json_object_get(reply, "is_error"));
    json_t *sc = json_deep_copy(reply);
    json_object_del(sc, "text"); /* it is the content block; no need to send it twice */
    json_object_set_new(sc, "episode_id", json_string(e->id));
    result = text_result(s, text ? text : "", text ? strlen(text) : 0, sc, is_error);
out:
    json_decref(reply);
    unpin(s, e);
    return result;
}

/* ---- evaluate and finish ---- */

/* Run one evaluation through the episode's own evaluator socket (what ./compile etc. use) and
 * return the record it made (new reference) and the reply's text in *text. */
static int run_eval(struct server *s, struct server__episode *e, const char *stage, json_t **record,
                    char **text, struct ca_err *err)
{
    *record = NULL;
    *text = NULL;
    char *sock = xstrfmt("%s/%s/control/eval.sock", s->state_dir, e->id);
    json_t *req = json_pack("{s:s}", "command", stage), *reply = NULL;
    int rc = msg_request(sock, req, EVAL_TIMEOUT_MS, &reply, err);
    json_decref(req);
    free(sock);
    if (rc)
        return rc;
    const char *t = json_string_value(json_object_get(reply, "text"));
    *text = xstrdup(t ? t : "");
    /* The newest record is this evaluation's: the episode's socket serves one at a time, and
     * only the agent's own ./compile etc. could have run one in between (also a true record). */
    json_t *q = json_pack("{s:s, s:I}", "op", "evals", "since", (json_int_t)0), *ans = NULL;
    struct episode_opts eo = server__ep_opts(s, e->id, NULL);
    rc = episode_request(&eo, q, 60000, &ans, err);
    json_decref(q);
    json_t *evals = json_object_get(ans, "evals");
    if (rc == 0 && json_array_size(evals))
        *record = json_incref(json_array_get(evals, json_array_size(evals) - 1));
    else if (rc == 0)
        *record = json_pack("{s:s, s:b, s:i}", "command", stage, "ok", 0, "exit",
                            (int)json_integer_value(json_object_get(reply, "exit")));
    json_decref(ans);
    json_decref(reply);
    return rc;
}

static json_t *eval_summary(const json_t *rec)
{
    struct eval_report r;
    const json_t *report = json_object_get(rec, "report");
    eval_report_read(report, &r);
    json_t *o = json_pack("{s:O?, s:O?, s:b, s:s?, s:O?, s:O?}", "seq", json_object_get(rec, "seq"),
                          "command", json_object_get(rec, "command"), "ok", r.ok, "stage",
                          *r.stage ? r.stage : NULL, "reward", json_object_get(rec, "reward"),
                          "snapshot_dir", json_object_get(rec, "snapshot_dir"));
    if (r.speedup_eager == r.speedup_eager && r.speedup_eager > 0)
        json_object_set_new(o, "speedup_eager", json_real(r.speedup_eager));
    if (r.speedup_compile == r.speedup_compile && r.speedup_compile > 0)
        json_object_set_new(o, "speedup_compile", json_real(r.speedup_compile));
    if (r.candidate.present && r.candidate.median_ms == r.candidate.median_ms)
        json_object_set_new(o, "candidate_ms", json_real(r.candidate.median_ms));
    if (r.eager.present && r.eager.median_ms == r.eager.median_ms)
        json_object_set_new(o, "eager_ms", json_real(r.eager.median_ms));
    if (r.compile.present && r.compile.median_ms == r.compile.median_ms)
        json_object_set_new(o, "compile_ms", json_real(r.compile.median_ms));
    if (*r.message)
        json_object_set_new(o, "message", json_string(r.message));
    if (json_is_number(json_object_get(rec, "elapsed_ms")))
        json_object_set(o, "elapsed_ms", json_object_get(rec, "elapsed_ms"));
    return o;
}

static json_t *tool_evaluate(struct server *s, const json_t *args)
{
    static const char *const keys[] = {"episode_id", "stage", NULL};
    json_t *bad = check_keys("evaluate", args, keys);
    if (bad)
        return bad;
    json_t *js = json_object_get(args, "stage");
    const char *stage = js ? json_string_value(js) : "profile";
    if (!stage || (strcmp(stage, "compile") && strcmp(stage, "verify") && strcmp(stage, "profile")))
        return server__tool_errorf("evaluate: stage must be compile, verify or profile");
    json_t *why = NULL;
    struct server__episode *e = pin(s, args, &why);
    if (!e)
        return why;
    json_t *result = NULL;
    if (e->result || e->finishing) {
        result = server__tool_errorf("episode %s has finished: start a new one", e->id);
    } else if (past_wall(e)) {
        result = server__tool_errorf("episode %s ran past its wall-clock limit: only finish is "
                                     "accepted now",
                                     e->id);
    } else {
        json_t *rec = NULL;
        char *text = NULL;
        struct ca_err err = {0};
        int rc = run_eval(s, e, stage, &rec, &text, &err);
        if (rc) {
            result = server__tool_errorf("evaluate: the evaluator could not run: %s", err.msg);
        } else {
            json_t *sc = eval_summary(rec);
            json_object_set_new(sc, "episode_id", json_string(e->id));
            json_object_set(sc, "report", json_object_get(rec, "report"));
            bool ok = json_is_true(json_object_get(rec, "ok"));
            result = text_result(s, text, strlen(text), sc, !ok);
        }
        json_decref(rec);
        free(text);
    }
    unpin(s, e);
    return result;
}

/* A record's worth as the episode's answer: its reward, or 1 for a passing ./verify (correct,
 * untimed); 0 when it is no candidate. The same rule as the agent's best of trajectory. */
static json_int_t candidate_reward(const json_t *rec)
{
    const json_t *reward = json_object_get(rec, "reward");
    if (!json_is_true(json_object_get(rec, "ok")) ||
        !json_is_string(json_object_get(rec, "snapshot_dir")))
        return 0;
    if (json_is_integer(reward))
        return json_integer_value(reward) >= 1 ? json_integer_value(reward) : 0;
    const char *cmd = json_string_value(json_object_get(rec, "command"));
    return cmd && strcmp(cmd, "verify") == 0 ? 1 : 0;
}

static double speedup_of(const json_t *rec)
{
    struct eval_report r;
    eval_report_read(json_object_get(rec, "report"), &r);
    return r.speedup_compile == r.speedup_compile ? r.speedup_compile : 0;
}

/* Highest reward, then highest speedup over torch.compile, then the latest. */
static const json_t *best_record(const json_t *records)
{
    const json_t *best = NULL;
    json_int_t best_reward = 0;
    size_t i;
    const json_t *rec;
    json_array_foreach(records, i, rec)
    {
        json_int_t a = candidate_reward(rec);
        if (a < 1)
            continue;
        if (!best || a > best_reward || (a == best_reward && speedup_of(rec) >= speedup_of(best))) {
            best = rec;
            best_reward = a;
        }
    }
    return best;
}

static json_t *tool_finish(struct server *s, const json_t *args)
{
    static const char *const keys[] = {"episode_id", "final_eval", NULL};
    json_t *bad = check_keys("finish", args, keys);
    if (bad)
        return bad;
    json_t *jf = json_object_get(args, "final_eval");
    if (jf && !json_is_boolean(jf))
        return server__tool_errorf("finish: final_eval must be true or false");
    json_t *why = NULL;
    struct server__episode *e = pin(s, args, &why);
    if (!e)
        return why;
    json_t *result = NULL, *final = NULL, *ans = NULL;
    pthread_mutex_lock(&s->mu);
    json_t *done = e->result ? json_deep_copy(e->result) : NULL;
    bool busy = e->finishing;
    if (!done && !busy)
        e->finishing = true;
    pthread_mutex_unlock(&s->mu);
    if (done || busy) {
        static const char again[] = "The episode had finished; its result again.";
        result = done ? server__tool_result(again, sizeof(again) - 1, done, false)
                      : server__tool_errorf("finish is already running for episode %s", e->id);
        goto out;
    }
    int64_t t0 = ca_now_us();
    struct ca_err err = {0};
    if (!jf || json_is_true(jf)) {
        json_t *rec = NULL;
        char *text = NULL;
        if (run_eval(s, e, "profile", &rec, &text, &err) == 0)
            final = eval_summary(rec);
        else
            final = json_pack("{s:s}", "error", err.msg);
        json_decref(rec);
        free(text);
    }
    json_t *q = json_pack("{s:s, s:I}", "op", "evals", "since", (json_int_t)0);
    struct episode_opts eo = server__ep_opts(s, e->id, NULL);
    int rc = episode_request(&eo, q, 60000, &ans, &err);
    json_decref(q);
    if (rc) {
        pthread_mutex_lock(&s->mu);
        e->finishing = false;
        pthread_mutex_unlock(&s->mu);
        result = server__tool_errorf("finish: episode %s did not answer: %s", e->id, err.msg);
        goto out;
    }
    json_t *evals = json_object_get(ans, "evals");
    const json_t *best = best_record(evals);
    json_int_t reward = best ? candidate_reward(best) : -1;
    json_t *sc = json_pack(
        "{s:s, s:s?, s:I, s:o, s:o, s:I, s:I, s:f, s:s, s:s}", "episode_id", e->id, "task_id",
        e->task_id, "reward", (json_int_t)reward, "best", best ? eval_summary(best) : json_null(),
        "final", final ? final : json_null(), "evaluations", (json_int_t)json_array_size(evals),
        "tool_calls", (json_int_t)e->calls, "wall_s", (double)(ca_now_us() - e->created_us) / 1e6,
        "workspace", e->workspace, "reason",
        best ? "best correct evaluation of the trajectory" : "no correct evaluation: reward -1");
    final = NULL;
    /* The sandbox goes; the workspace, the snapshots and this result stay. */
    json_t *close = json_pack("{s:s}", "op", "close"), *closed = NULL;
    if (episode_request(&eo, close, 30000, &closed, &err))
        LOG_WARN("episode %s: close: %s", e->id, err.msg);
    json_decref(close);
    json_decref(closed);
    pthread_mutex_lock(&s->mu);
    e->result = json_incref(sc);
    e->ended_unix = time(NULL);
    e->finishing = false;
    s->live--;
    s->episodes_finished++;
    server__kept_ended_locked(s, e->id, e->ended_unix);
    pthread_mutex_unlock(&s->mu);
    save_record(s, e);
    server__reclaim_kick(s);
    char *text = xstrfmt("Episode %s finished: reward %lld (%s).", e->id, (long long)reward,
                         best ? "best correct evaluation" : "no correct evaluation");
    result = server__tool_result(text, strlen(text), sc, false);
    free(text);
    if (log_events_on())
        log_event("serve.episode_finish", ca_now_us() - t0,
                  json_pack("{s:s, s:I}", "episode", e->id, "reward", (json_int_t)reward));
out:
    json_decref(final);
    json_decref(ans);
    unpin(s, e);
    return result;
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
        r = tool_list_tasks(s, args);
    else if (strcmp(name, "start_episode") == 0)
        r = tool_start_episode(s, args);
    else if (strcmp(name, "evaluate") == 0)
        r = tool_evaluate(s, args);
    else if (strcmp(name, "finish") == 0)
        r = tool_finish(s, args);
    else if (is_agent_tool(name))
        r = tool_agent(s, name, args);
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
