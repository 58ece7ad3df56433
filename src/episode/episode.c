/*
 * episode.c - an episode in process (sandbox + shells + tools) and the
 * supervisor that serves it over a unix socket.
 *
 * The supervisor is single-threaded: it polls the listening socket and the
 * shells' output pipes (so background shells never stall), serves one
 * connection at a time to completion, and exits on "close" or after the
 * idle timeout. Starting a supervisor is serialised by an flock on the
 * episode's lock file, so two concurrent first calls cannot start two.
 */
#include "episode/episode.h"
#include "episode/episode_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/msg.h"
#include "sandbox/shell.h"
#include "core/banned.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define BASH_TIMEOUT_DEFAULT_MS 120000
#define START_TIMEOUT_MS 15000
#define IO_TIMEOUT_MS 10000

struct episode {
    char *dir;     /* <state>/<id> */
    char *control; /* <state>/<id>/control */
    char *workspace;
    struct sandbox *sb;
    struct shells *shells;
    struct tool_ctx *tools;
    struct episode__evals *evals;
};

int episode_check_id(const char *id, struct ca_err *err)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > EPISODE_ID_MAX)
        return err_setf(err, CA_EUSAGE, "episode id must be 1 to %d characters", EPISODE_ID_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || (c == '.' && i > 0);
        if (!ok)
            return err_setf(err, CA_EUSAGE,
                            "episode id '%s' may contain only letters, digits, '_', '-' and '.' "
                            "(not first)",
                            id);
    }
    return 0;
}

static int ensure_private_dir(const char *path, struct ca_err *err)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return err_setf(err, -errno, "cannot create %s: %s", path, strerror(errno));
    struct stat st;
    if (lstat(path, &st) != 0)
        return err_setf(err, -errno, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return err_setf(err, CA_EESCAPE,
                        "%s is not a directory owned by this user; refusing to "
                        "keep episode state there",
                        path);
    if ((st.st_mode & 0077) && chmod(path, 0700) != 0)
        return err_setf(err, -errno, "cannot make %s private: %s", path, strerror(errno));
    return 0;
}

int episode_state_dir(struct buf *out, struct ca_err *err)
{
    const char *env = getenv("CUDA_AGENT_STATE_DIR");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int rc;
    if (env && *env)
        rc = buf_addstr(out, env);
    else if (xdg && *xdg)
        rc = buf_addf(out, "%s/cuda-agent", xdg);
    else
        rc = buf_addf(out, "/tmp/cuda-agent-%u", (unsigned)geteuid());
    if (rc)
        return err_setf(err, rc, "state directory path too long");
    return ensure_private_dir(out->data, err);
}

static int episode_dir(const struct episode_opts *o, struct buf *dir, struct ca_err *err)
{
    int rc = episode_check_id(o->id, err);
    if (rc)
        return rc;
    if (o->state_dir) {
        rc = buf_addstr(dir, o->state_dir);
        if (rc == 0)
            rc = ensure_private_dir(dir->data, err);
    } else {
        rc = episode_state_dir(dir, err);
    }
    if (rc)
        return rc;
    if (buf_addf(dir, "/%s", o->id))
        return err_setf(err, CA_ETOOBIG, "episode state path too long");
    return ensure_private_dir(dir->data, err);
}

/* ---- shell tools ---- */

/*
 * Append program output to the model-facing text as valid UTF-8 (invalid
 * bytes and NULs become U+FFFD, counted in "replaced_bytes"), cut at a
 * character boundary if the text would go over its limit.
 */
static int append_output(struct tool_result *res, const char *p, size_t n)
{
    struct buf clean;
    buf_init(&clean, 3 * n + 16);
    long replaced = utf8_sanitize(p, n, &clean);
    if (replaced < 0)
        BUG("sanitised output over 3x its input");
    size_t room = res->text.max - res->text.len;
    size_t take = clean.len;
    if (take > room - 128) {
        take = room - 128;
        while (take && ((unsigned char)clean.data[take] & 0xC0) == 0x80)
            take--;
    }
    int rc = buf_add(&res->text, clean.data, take);
    if (rc == 0 && take < clean.len)
        rc = buf_addf(&res->text, "\n[... %zu more bytes cut: output limit reached ...]",
                      clean.len - take);
    if (replaced)
        json_object_set_new(res->fields, "replaced_bytes", json_integer(replaced));
    buf_release(&clean);
    return rc;
}

static int bash_tool(void *data, const json_t *args, struct tool_result *res)
{
    struct episode *ep = data;
    const char *cmd = json_string_value(json_object_get(args, "command"));
    json_t *t = json_object_get(args, "timeout");
    int64_t timeout = t ? json_integer_value(t) : BASH_TIMEOUT_DEFAULT_MS;
    struct ca_err err = {0};
    if (json_is_true(json_object_get(args, "run_in_background"))) {
        char id[32];
        if (shells_start_bg(ep->shells, cmd, id, sizeof(id), &err))
            return tool_result_errorf(res, "%s", err.msg);
        if (buf_addf(&res->text,
                     "Started background shell %s. Read its output with BashOutput "
                     "(bash_id \"%s\"); stop it with KillBash (shell_id \"%s\").",
                     id, id, id))
            BUG("tool text over its limit");
        json_object_set_new(res->fields, "bash_id", json_string(id));
        return 0;
    }
    struct shell_result r;
    shell_result_init(&r);
    int rc = shells_run(ep->shells, cmd, timeout, 0, &r, &err);
    if (rc) {
        shell_result_release(&r);
        return tool_result_errorf(res, "the command could not be run: %s", err.msg);
    }
    int e = 0;
    if (r.shell_restarted)
        e |= buf_addstr(&res->text, "[the previous shell had exited; this is a new shell: working "
                                    "directory and variables were reset]\n");
    e |= append_output(res, r.output.data, r.output.len);
    if (r.timed_out)
        e |= buf_addf(&res->text,
                      "%s[timed out after %lld ms: every process the command started was killed; "
                      "the shell is still usable]",
                      res->text.len ? "\n" : "", (long long)timeout);
    else if (r.exit_code != 0)
        e |= buf_addf(&res->text, "%s[exit code %d]", res->text.len ? "\n" : "", r.exit_code);
    if (e)
        BUG("tool text over its limit");
    json_object_set_new(res->fields, "exit_code", json_integer(r.exit_code));
    json_object_set_new(res->fields, "timed_out", json_boolean(r.timed_out));
    json_object_set_new(res->fields, "truncated", json_boolean(r.truncated));
    json_object_set_new(res->fields, "output_bytes", json_integer((json_int_t)r.output_bytes));
    json_object_set_new(res->fields, "elapsed_ms", json_real((double)r.elapsed_us / 1000.0));
    res->is_error = r.timed_out;
    shell_result_release(&r);
    return 0;
}

/* Keep only the lines of text[0..len) that match re; appended to out. */
static int filter_lines(const char *text, size_t len, pcre2_code *re, struct buf *out)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    struct sv s = sv_from(text, len), line;
    int rc = 0;
    while (rc == 0 && sv_next_line(&s, &line, NULL)) {
        if (pcre2_match(re, (PCRE2_SPTR)line.p, line.len, 0, 0, md, NULL) >= 0)
            rc = buf_add(out, line.p, line.len) || buf_addch(out, '\n');
    }
    pcre2_match_data_free(md);
    return rc;
}

static int bash_output_tool(void *data, const json_t *args, struct tool_result *res)
{
    struct episode *ep = data;
    const char *id = json_string_value(json_object_get(args, "bash_id"));
    const char *filter = json_string_value(json_object_get(args, "filter"));
    pcre2_code *re = NULL;
    if (filter) {
        int code;
        PCRE2_SIZE off;
        re = pcre2_compile((PCRE2_SPTR)filter, PCRE2_ZERO_TERMINATED,
                           PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &code, &off, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof(msg));
            return tool_result_errorf(res,
                                      "filter is not a valid regular expression: %s (at "
                                      "offset %zu)",
                                      (const char *)msg, (size_t)off);
        }
    }
    struct buf raw;
    buf_init(&raw, CA_LIMIT_TOOL_OUTPUT);
    struct shell_bg_status st;
    struct ca_err err = {0};
    int rc = shells_bg_output(ep->shells, id, &raw, CA_LIMIT_TOOL_OUTPUT - 512, &st, &err);
    if (rc) {
        buf_release(&raw);
        pcre2_code_free(re);
        return tool_result_errorf(res, "%s", err.msg);
    }
    int e = 0;
    if (st.dropped)
        e |= buf_addf(&res->text,
                      "[%zu bytes of older output were dropped: the buffer keeps the "
                      "newest output only]\n",
                      st.dropped);
    if (re) {
        struct buf kept;
        buf_init(&kept, raw.max);
        e |= filter_lines(raw.data, raw.len, re, &kept);
        e |= append_output(res, kept.data, kept.len);
        buf_release(&kept);
    } else {
        e |= append_output(res, raw.data, raw.len);
    }
    if (st.running)
        e |= buf_addf(&res->text, "%s[%s is running]", raw.len ? "\n" : "", id);
    else
        e |= buf_addf(&res->text, "%s[%s exited with code %d]", raw.len ? "\n" : "", id,
                      st.exit_code);
    if (e)
        BUG("tool text over its limit");
    json_object_set_new(res->fields, "running", json_boolean(st.running));
    if (!st.running)
        json_object_set_new(res->fields, "exit_code", json_integer(st.exit_code));
    json_object_set_new(res->fields, "dropped_bytes", json_integer((json_int_t)st.dropped));
    buf_release(&raw);
    pcre2_code_free(re);
    return 0;
}

static int kill_bash_tool(void *data, const json_t *args, struct tool_result *res)
{
    struct episode *ep = data;
    const char *id = json_string_value(json_object_get(args, "shell_id"));
    struct ca_err err = {0};
    if (shells_bg_kill(ep->shells, id, &err))
        return tool_result_errorf(res, "%s", err.msg);
    if (buf_addf(&res->text, "Killed background shell %s.", id))
        BUG("tool text over its limit");
    return 0;
}

/* ---- the in-process episode ---- */

int episode_open(const struct episode_opts *o, struct episode **out, struct ca_err *err)
{
    struct buf dir;
    buf_init(&dir, CA_LIMIT_PATH);
    struct episode *ep = xcalloc(1, sizeof(*ep));
    int rc = episode_dir(o, &dir, err);
    if (rc)
        goto fail;
    if (!o->workspace || !fs_is_dir(o->workspace)) {
        rc = err_setf(err, CA_ENOTFOUND, "workspace %s is not a directory",
                      o->workspace ? o->workspace : "(none given)");
        goto fail;
    }
    ep->dir = buf_detach(&dir, NULL);
    ep->control = xstrfmt("%s/control", ep->dir);
    ep->workspace = realpath(o->workspace, NULL);
    if (!ep->workspace) {
        rc = err_setf(err, -errno, "%s: %s", o->workspace, strerror(errno));
        goto fail;
    }
    rc = ensure_private_dir(ep->control, err);
    if (rc)
        goto fail;
    /* The sandbox's uid 0 maps to us; the control dir must be readable inside. */
    if (chmod(ep->control, 0755) != 0) {
        rc = err_setf(err, -errno, "%s: %s", ep->control, strerror(errno));
        goto fail;
    }
    rc = tool_ctx_new(ep->workspace, &ep->tools, err);
    if (rc)
        goto fail;
    struct sandbox_opts so = {
        .workspace = ep->workspace,
        .ro_paths = tool_ctx_ro_paths(ep->tools),
        .control_dir = ep->control,
        .limits = o->limits,
        .flags = o->sandbox_flags,
    };
    rc = sandbox_start(&so, &ep->sb, err);
    if (rc)
        goto fail;
    rc = shells_new(ep->sb, ep->control, &ep->shells, err);
    if (rc)
        goto fail;
    struct tool_shell_ops ops = {ep, bash_tool, bash_output_tool, kill_bash_tool};
    tool_ctx_set_shell(ep->tools, &ops);
    rc = episode__evals_start(ep->control, ep->dir, ep->workspace, o, &ep->evals, err);
    if (rc)
        goto fail;
    *out = ep;
    return 0;
fail:
    buf_release(&dir);
    episode_close(ep);
    return rc;
}

int episode_call(struct episode *ep, const char *tool, const json_t *args, struct tool_result *res)
{
    return tool_call(ep->tools, tool, args, res);
}

int episode_evals(struct episode *ep, int64_t since, json_t **out, struct ca_err *err)
{
    (void)err;
    *out = episode__evals_since(ep->evals, since);
    return 0;
}

struct sandbox *episode_sandbox(struct episode *ep)
{
    return ep->sb;
}

void episode_close(struct episode *ep)
{
    if (!ep)
        return;
    episode__evals_stop(ep->evals);
    shells_free(ep->shells);
    sandbox_free(ep->sb);
    tool_ctx_free(ep->tools);
    free(ep->workspace);
    free(ep->control);
    free(ep->dir);
    free(ep);
}

/* ---- framing ---- */

/* ---- supervisor ---- */

static json_t *handle(struct episode *ep, const json_t *req, bool *stop)
{
    const char *op = json_string_value(json_object_get(req, "op"));
    const char *tool = json_string_value(json_object_get(req, "tool"));
    if (op && strcmp(op, "ping") == 0)
        return json_pack("{s:b, s:s, s:I, s:I}", "ok", 1, "workspace", ep->workspace,
                         "supervisor_pid", (json_int_t)getpid(), "init_pid",
                         (json_int_t)sandbox_init_pid(ep->sb));
    if (op && strcmp(op, "evals") == 0) {
        int64_t since = 0;
        if (jsonx_get_int(req, "since", false, &since, "request", NULL))
            since = 0;
        json_t *recs = NULL;
        if (episode_evals(ep, since, &recs, NULL))
            recs = json_array();
        return json_pack("{s:b, s:o}", "ok", 1, "evals", recs);
    }
    if (op && strcmp(op, "close") == 0) {
        *stop = true;
        return json_pack("{s:b}", "ok", 1);
    }
    if (!tool)
        return json_pack(
            "{s:b, s:s}", "is_error", 1, "text",
            "a request names a tool (\"tool\") or an op (\"ping\", \"evals\", \"close\")");
    json_t *args = json_object_get(req, "args");
    json_t *empty = NULL;
    if (!args)
        args = empty = json_object();
    struct tool_result res;
    tool_result_init(&res);
    json_t *reply;
    if (episode_call(ep, tool, args, &res) != 0)
        reply = json_pack("{s:b, s:s}", "is_error", 1, "text", "internal error running the tool");
    else
        reply = tool_result_to_json(&res);
    tool_result_release(&res);
    json_decref(empty);
    return reply;
}

/* One connection's request; false when none came (episode_running's probe, or garbage). */
static bool serve_conn(struct episode *ep, int conn, bool *stop)
{
    struct ca_err err = {0};
    json_t *req = NULL;
    int64_t deadline = ca_now_us() + (int64_t)IO_TIMEOUT_MS * 1000;
    if (msg_recv(conn, &req, deadline, &err) != 0) {
        json_t *r = json_pack("{s:b, s:s}", "is_error", 1, "text", err.msg);
        if (msg_send(conn, r, deadline, &err))
            LOG_DEBUG("error reply lost: %s", err.msg);
        json_decref(r);
        return false;
    }
    int64_t t0 = ca_now_us();
    json_t *reply = handle(ep, req, stop);
    if (log_events_on())
        log_event("episode.request", ca_now_us() - t0,
                  json_pack("{s:s?, s:s?}", "tool", json_string_value(json_object_get(req, "tool")),
                            "op", json_string_value(json_object_get(req, "op"))));
    deadline = ca_now_us() + (int64_t)IO_TIMEOUT_MS * 1000;
    if (msg_send(conn, reply, deadline, &err))
        LOG_WARN("reply lost: %s", err.msg);
    json_decref(reply);
    json_decref(req);
    return true;
}

static int serve(struct episode *ep, int lfd, int64_t idle_ms)
{
    int64_t last = ca_now_us();
    bool stop = false;
    while (!stop) {
        struct pollfd pfd[65];
        int fds[64];
        size_t n = shells_poll_fds(ep->shells, fds, ARRAY_SIZE(fds));
        pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (size_t i = 0; i < n; i++)
            pfd[i + 1] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        int64_t left = idle_ms - (ca_now_us() - last) / 1000;
        if (left <= 0) {
            LOG_INFO("episode idle for %lld ms: closing", (long long)idle_ms);
            break;
        }
        int k = poll(pfd, n + 1, left > 60000 ? 60000 : (int)left);
        if (k < 0 && errno != EINTR)
            return -errno;
        shells_drain(ep->shells);
        if (k > 0 && (pfd[0].revents & POLLIN)) {
            int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (conn < 0)
                continue;
            /* Only a request is activity: a liveness probe (connect, close) must not keep an
             * idle episode alive past its TTL (the server's cleanup pass probes). */
            if (serve_conn(ep, conn, &stop))
                last = ca_now_us();
            close(conn);
        }
    }
    return 0;
}

static int connect_sock(const char *dir, struct ca_err *err)
{
    char *path = xstrfmt("%s/sock", dir);
    int fd = msg_connect(path, err);
    if (fd < 0)
        err_setf(err, fd, "episode supervisor at %s: %s", path, strerror(-fd));
    free(path);
    return fd;
}

/* Child side of the start: open the episode, listen, report readiness, serve. */
static CA_NORETURN void supervise(const struct episode_opts *o, const char *dir, int ready_fd)
{
    struct ca_err err = {0};
    struct episode *ep = NULL;
    int lfd = -1;
    char *sock = xstrfmt("%s/sock", dir);
    int rc = episode_open(o, &ep, &err);
    if (rc == 0 && (lfd = msg_listen(sock, 16, &err)) < 0)
        rc = lfd;
    /* One line: the reader stops at the newline, since processes forked while
     * opening the episode may hold copies of ready_fd open. */
    char line[CA_ERR_MSG_MAX + 2];
    snprintf(line, sizeof(line), "%s\n", rc ? err.msg : "ok");
    if (write(ready_fd, line, strlen(line)) < 0)
        rc = rc ? rc : -errno;
    close(ready_fd);
    if (rc == 0) {
        serve(ep, lfd, o->idle_timeout_ms > 0 ? o->idle_timeout_ms : EPISODE_IDLE_DEFAULT_MS);
        (void)unlink(sock); /* a stale socket is replaced at the next bind */
    }
    free(sock);
    episode_close(ep);
    _exit(rc ? 1 : 0);
}

static int start_supervisor(const struct episode_opts *o, const char *dir, struct ca_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return err_setf(err, -errno, "pipe: %s", strerror(errno));
    char *log_path = xstrfmt("%s/supervisor.log", dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        free(log_path);
        return err_setf(err, -e, "fork: %s", strerror(e));
    }
    if (pid == 0) {
        close(p[0]);
        (void)setsid(); /* fails only for a group leader, which a fresh child is not */
        if (fork() != 0)
            _exit(0); /* the supervisor is re-parented away from the caller */
        int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int logfd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        /* A supervisor still holding the caller's stdio would keep its pipes open: without
         * its own, it exits, and the caller reads the closed ready pipe as a failed start. */
        if (nul < 0 || logfd < 0 || dup2(nul, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0)
            _exit(1);
        (void)signal(SIGPIPE, SIG_IGN); /* SIG_ERR only for an invalid signal */
        (void)signal(SIGHUP, SIG_IGN);
        /* Keep nothing of the caller's but the ready pipe (as fd 3): a server's listening
         * socket or client connections held here would outlive the server and hang its
         * clients. */
        if (dup2(p[1], 3) < 0)
            _exit(1);
        if (syscall(SYS_close_range, 4U, ~0U, 0U) != 0)
            for (int fd = 4; fd < 65536; fd++)
                (void)close(fd); /* EBADF for the fds not open: fine */
        supervise(o, dir, 3);
    }
    close(p[1]);
    free(log_path);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    char msg[CA_ERR_MSG_MAX];
    size_t got = 0;
    int64_t deadline = ca_now_us() + (int64_t)START_TIMEOUT_MS * 1000;
    for (;;) {
        if (msg_wait(p[0], POLLIN, deadline) != 0) {
            close(p[0]);
            return err_setf(err, CA_ETIMEOUT, "the episode supervisor did not start within %d ms",
                            START_TIMEOUT_MS);
        }
        ssize_t r = read(p[0], msg + got, sizeof(msg) - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
        if (memchr(msg, '\n', got) || got == sizeof(msg) - 1)
            break;
    }
    close(p[0]);
    msg[got] = '\0';
    char *nl = strchr(msg, '\n');
    if (nl)
        *nl = '\0';
    if (strcmp(msg, "ok") != 0)
        return err_setf(err, CA_ECHILD, "cannot start the episode: %s",
                        got ? msg : "the supervisor died while starting (see supervisor.log)");
    return 0;
}

static int connect_or_start(const struct episode_opts *o, const char *dir, struct ca_err *err)
{
    int fd = connect_sock(dir, err);
    if (fd >= 0 || !o->workspace)
        return fd;
    char *lock_path = xstrfmt("%s/lock", dir);
    int lk = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    free(lock_path);
    if (lk < 0)
        return err_setf(err, -errno, "cannot open the episode lock: %s", strerror(errno));
    while (flock(lk, LOCK_EX) != 0 && errno == EINTR)
        ;
    /* Someone may have started it while we waited for the lock. */
    fd = connect_sock(dir, err);
    if (fd < 0) {
        int rc = start_supervisor(o, dir, err);
        fd = rc ? rc : connect_sock(dir, err);
    }
    close(lk);
    return fd;
}

int episode_request(const struct episode_opts *o, const json_t *req, int64_t timeout_ms,
                    json_t **reply, struct ca_err *err)
{
    struct buf dir;
    buf_init(&dir, CA_LIMIT_PATH);
    int rc = episode_dir(o, &dir, err);
    if (rc) {
        buf_release(&dir);
        return rc;
    }
    int fd = connect_or_start(o, dir.data, err);
    if (fd < 0) {
        if (!o->workspace && (fd == -ENOENT || fd == -ECONNREFUSED))
            fd = err_setf(err, CA_ENOTFOUND,
                          "episode '%s' is not running; give --workspace DIR to start it", o->id);
        buf_release(&dir);
        return fd;
    }
    buf_release(&dir);
    int64_t deadline = timeout_ms > 0 ? ca_now_us() + timeout_ms * 1000 : INT64_MAX;
    rc = msg_send(fd, req, deadline, err);
    if (rc == 0)
        rc = msg_recv(fd, reply, deadline, err);
    close(fd);
    return rc;
}

bool episode_running(const struct episode_opts *o)
{
    struct buf dir;
    buf_init(&dir, CA_LIMIT_PATH);
    struct ca_err err;
    bool up = false;
    if (episode_dir(o, &dir, &err) == 0) {
        int fd = connect_sock(dir.data, &err);
        if (fd >= 0) {
            up = true;
            close(fd);
        }
    }
    buf_release(&dir);
    return up;
}
