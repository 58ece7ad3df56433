/*
 * start.c - start_episode: the task (by reference, or inline code where the
 * operator allows it), the workspace, the episode's supervisor (started
 * through this program's own `tool` command), the record, and the system
 * prompt and task message the model gets. A live-episode slot is reserved
 * first and given back on any failure, with the workspace removed.
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/proc.h"
#include "eval/eval.h"
#include "sandbox/sandbox.h"
#include "workspace/workspace.h"
#include "core/banned.h"

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
    const char *argv[24];
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
    for (size_t i = 0; s->o.redis && s->o.redis_args && s->o.redis_args[i] && n < 20; i++)
        argv[n++] = s->o.redis_args[i];
    argv[n++] = "Bash";
    argv[n++] = "{\"command\": \"true\"}";
    argv[n] = NULL;
    /* The evaluator settings are the server's, whatever this process's environment says. The
     * bus's URL goes in the environment, not argv: every local user can read a command line,
     * and the URL may hold a password. */
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    const char **envp = xcalloc(nenv + 4, sizeof(*envp));
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (strncmp(environ[i], "CUDA_AGENT_EVALUATOR=", 21) &&
            strncmp(environ[i], "CUDA_AGENT_EVAL_DEVICE=", 23) &&
            strncmp(environ[i], "CUDA_AGENT_REDIS=", 17))
            envp[k++] = environ[i];
    char *ev = s->o.evaluator ? xstrfmt("CUDA_AGENT_EVALUATOR=%s", s->o.evaluator) : NULL;
    char *dev = s->o.eval_device ? xstrfmt("CUDA_AGENT_EVAL_DEVICE=%s", s->o.eval_device) : NULL;
    char *bus = s->o.redis ? xstrfmt("CUDA_AGENT_REDIS=%s", s->o.redis) : NULL;
    if (ev)
        envp[k++] = ev;
    if (dev)
        envp[k++] = dev;
    if (bus)
        envp[k++] = bus;
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
    free(bus);
    free(envp);
    return rc;
}

json_t *server__tool_start_episode(struct server *s, const json_t *args)
{
    static const char *const keys[] = {"task", "code", "seed", "limits", NULL};
    static const char *const lkeys[] = {"wall_s", "ttl_s", NULL};
    json_t *bad = server__check_keys("start_episode", args, keys);
    int64_t seed = 0, wall_s = s->o.wall_ms / 1000, ttl_s = s->o.ttl_ms / 1000;
    if (bad || (bad = server__get_int("start_episode", args, "seed", INT64_MIN, INT64_MAX, &seed)))
        return bad;
    json_t *limits = json_object_get(args, "limits");
    if (limits && !json_is_object(limits))
        return server__tool_errorf("start_episode: limits must be an object");
    if (limits &&
        ((bad = server__check_keys("start_episode limits", limits, lkeys)) ||
         (bad = server__get_int("start_episode", limits, "wall_s", 1,
                                s->o.wall_ms ? s->o.wall_ms / 1000 : 30 * 86400, &wall_s)) ||
         (bad = server__get_int("start_episode", limits, "ttl_s", 1, s->o.ttl_ms / 1000, &ttl_s))))
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
    server__random_hex(hex, 16);
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
        server__episode_free(e);
        goto out;
    }
    user = xstrfmt("The task is `model.py` in your workspace:\n\n```python\n%s\n```\n\n"
                   "Write `ModelNew` in `model_new.py` with your own CUDA kernels in `kernels/`, "
                   "following SKILL.md: make it correct first (`./verify`), then fast "
                   "(`./profile`). Call finish when you are done.",
                   task->code);
    server__save_record(s, e);
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
