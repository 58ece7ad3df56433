/*
 * shell.c - the persistent and background shells of an episode.
 *
 * Invariants: at most one foreground command runs at a time (calls are
 * sequential); fg_pid is 0 when no persistent shell is alive; every pipe we
 * read is non-blocking and is drained by any waiting call; bytes that could
 * be the start of an end marker are held back (pending) until the next read
 * proves otherwise, so the marker never leaks into a command's output.
 */
#include "sandbox/shell.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/proc.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/sv.h"
#include "core/banned.h"

#define CMD_FILE "cmd.sh"
#define MARKER_PREFIX "\n__CA_END_"
#define BG_KEEP (CA_LIMIT_TOOL_OUTPUT * 16)
#define KILL_GRACE_MS 2000
#define SHELL_PATH                                                                                 \
    "/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static const char *const shell_env[] = {
    "PATH=" SHELL_PATH, "HOME=/tmp",     "LANG=C.UTF-8", "TERM=dumb",
    "PAGER=cat",        "GIT_PAGER=cat", "PS1=",         "PS2=",
};

/* s as one word for sh: in single quotes, each ' as '\''. */
static char *sh_quote(const char *s)
{
    struct buf b;
    buf_init(&b, CA_LIMIT_PATH * 4 + 2);
    int e = buf_addstr(&b, "'");
    for (const char *p = s; *p; p++)
        e |= *p == '\'' ? buf_addstr(&b, "'\\''") : buf_add(&b, p, 1);
    e |= buf_addstr(&b, "'");
    char *out = xstrdup(e ? "'/nonexistent'" : b.data);
    buf_release(&b);
    return out;
}

struct bg_shell {
    char id[16];
    int pid;
    int fd; /* read end of its output, -1 once at EOF */
    bool running;
    int status;
    struct buf data; /* unread output, oldest dropped past BG_KEEP */
    size_t dropped;
};

struct shells {
    struct sandbox *sb;
    char *ctl_dir;                        /* the control directory, host path */
    char *ctl_seen;                       /* ... as the shell sees it, quoted for sh */
    char *env[ARRAY_SIZE(shell_env) + 2]; /* shell_env, the evaluator's socket, NULL */
    int fg_pid, fg_in, fg_out;
    bool fg_started_once;
    bool fg_exited; /* its exit event arrived */
    int fg_status;
    struct bg_shell *bg;
    size_t nbg, bg_alloc;
    unsigned bg_seq;
};

void shell_result_init(struct shell_result *r)
{
    memset(r, 0, sizeof(*r));
    buf_init(&r->output, CA_LIMIT_TOOL_OUTPUT);
}

void shell_result_release(struct shell_result *r)
{
    buf_release(&r->output);
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

static int start_fg(struct shells *sh, struct ca_err *err)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) < 0)
        return err_setf(err, -errno, "cannot create a pipe for the shell: %s", strerror(errno));
    if (pipe2(out, O_CLOEXEC) < 0) {
        int e = errno;
        close(in[0]);
        close(in[1]);
        return err_setf(err, -e, "cannot create a pipe for the shell: %s", strerror(e));
    }
    static const char *const argv[] = {"bash", "--noprofile", "--norc", NULL};
    struct sandbox_cmd cmd = {
        .argv = argv,
        .env = (const char *const *)sh->env,
        .stdin_fd = in[0],
        .stdout_fd = out[1],
        .stderr_fd = out[1],
        .new_pgroup = true,
    };
    int pid = 0;
    int rc = sandbox_exec(sh->sb, &cmd, &pid, err);
    close(in[0]);
    close(out[1]);
    if (rc) {
        close(in[1]);
        close(out[0]);
        return rc;
    }
    set_nonblock(out[0]);
    sh->fg_pid = pid;
    sh->fg_exited = false;
    sh->fg_in = in[1];
    sh->fg_out = out[0];
    return 0;
}

int shells_new(struct sandbox *sb, const char *control_dir_host, struct shells **out,
               struct ca_err *err)
{
    struct shells *sh = xcalloc(1, sizeof(*sh));
    sh->sb = sb;
    sh->ctl_dir = xstrdup(control_dir_host);
    /* Unconfined programs see the host's paths: the control directory is where it lies. */
    const char *seen = sandbox_is_insecure(sb) ? control_dir_host : SANDBOX_CONTROL;
    sh->ctl_seen = sh_quote(seen);
    size_t n = 0;
    for (; n < ARRAY_SIZE(shell_env); n++)
        sh->env[n] = xstrdup(shell_env[n]);
    sh->env[n++] = xstrfmt("CUDA_AGENT_EVAL_SOCKET=%s/eval.sock", seen);
    sh->env[n] = NULL;
    sh->fg_in = sh->fg_out = -1;
    int rc = start_fg(sh, err);
    if (rc) {
        shells_free(sh);
        return rc;
    }
    sh->fg_started_once = true;
    *out = sh;
    return 0;
}

static void stop_fg(struct shells *sh)
{
    if (sh->fg_pid) {
        struct ca_err ignored;
        if (sandbox_kill_tree(sh->sb, sh->fg_pid, SIGKILL, true, &ignored))
            LOG_DEBUG("killing the shell: %s", ignored.msg);
    }
    sh->fg_pid = 0;
    proc_fd_close(&sh->fg_in);
    proc_fd_close(&sh->fg_out);
}

void shells_free(struct shells *sh)
{
    if (!sh)
        return;
    stop_fg(sh);
    for (size_t i = 0; i < sh->nbg; i++) {
        struct ca_err ignored;
        if (sh->bg[i].running && sandbox_kill_tree(sh->sb, sh->bg[i].pid, SIGKILL, true, &ignored))
            LOG_DEBUG("killing %s: %s", sh->bg[i].id, ignored.msg);
        proc_fd_close(&sh->bg[i].fd);
        buf_release(&sh->bg[i].data);
    }
    free(sh->bg);
    free(sh->ctl_dir);
    free(sh->ctl_seen);
    for (size_t i = 0; sh->env[i]; i++)
        free(sh->env[i]);
    free(sh);
}

/* Append to a background buffer, dropping the oldest bytes past BG_KEEP. */
static void bg_append(struct bg_shell *b, const char *p, size_t n)
{
    if (n >= BG_KEEP) {
        b->dropped += b->data.len + (n - BG_KEEP);
        buf_reset(&b->data);
        p += n - BG_KEEP;
        n = BG_KEEP;
    } else if (b->data.len + n > BG_KEEP) {
        size_t drop = b->data.len + n - BG_KEEP;
        memmove(b->data.data, b->data.data + drop, b->data.len - drop);
        buf_truncate(&b->data, b->data.len - drop);
        b->dropped += drop;
    }
    if (buf_add(&b->data, p, n))
        BUG("background buffer over its bound");
}

static void drain_bg(struct bg_shell *b)
{
    char chunk[16384];
    while (b->fd >= 0) {
        ssize_t n = read(b->fd, chunk, sizeof(chunk));
        if (n > 0) {
            bg_append(b, chunk, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        proc_fd_close(&b->fd); /* EOF or error */
    }
}

/* Consume pending exit events; the fg shell's exit is recorded too. */
static void read_events(struct shells *sh)
{
    struct sandbox_event ev;
    struct ca_err err;
    while (sandbox_read_event(sh->sb, &ev, &err) == 0) {
        if (sh->fg_pid && ev.pid == sh->fg_pid) {
            sh->fg_exited = true;
            sh->fg_status = ev.status;
            continue;
        }
        for (size_t i = 0; i < sh->nbg; i++)
            if (sh->bg[i].pid == ev.pid && sh->bg[i].running) {
                sh->bg[i].running = false;
                sh->bg[i].status = ev.status;
            }
    }
}

/* Consume events for up to ms until exited(sh, arg) holds; false on timeout. */
static bool wait_event(struct shells *sh, bool (*exited)(struct shells *, void *), void *arg,
                       int64_t ms)
{
    int64_t deadline = ca_now_us() + ms * 1000;
    for (;;) {
        read_events(sh);
        if (exited(sh, arg))
            return true;
        int64_t left = (deadline - ca_now_us()) / 1000;
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = sandbox_event_fd(sh->sb), .events = POLLIN};
        if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
            return false;
    }
}

static bool fg_gone(struct shells *sh, void *arg)
{
    return sh->fg_exited;
}

static bool bg_gone(struct shells *sh, void *arg)
{
    return !((struct bg_shell *)arg)->running;
}

void shells_drain(struct shells *sh)
{
    for (size_t i = 0; i < sh->nbg; i++)
        drain_bg(&sh->bg[i]);
    read_events(sh);
}

size_t shells_poll_fds(const struct shells *sh, int *fds, size_t max)
{
    size_t n = 0;
    if (n < max)
        fds[n++] = sandbox_event_fd(sh->sb);
    for (size_t i = 0; i < sh->nbg && n < max; i++)
        if (sh->bg[i].fd >= 0)
            fds[n++] = sh->bg[i].fd;
    return n;
}

/* The foreground capture: head up to out_max - tail_max, then a rolling tail. */
struct capture {
    struct shell_result *r;
    size_t head_max, tail_max;
    struct buf tail;
};

static void emit(struct capture *c, const char *p, size_t n)
{
    c->r->output_bytes += n;
    struct buf *head = &c->r->output;
    size_t room = head->len < c->head_max ? c->head_max - head->len : 0;
    size_t take = n < room ? n : room;
    if (take && buf_add(head, p, take))
        BUG("shell capture over its bound");
    p += take;
    n -= take;
    if (!n)
        return;
    if (n >= c->tail_max) {
        buf_reset(&c->tail);
        p += n - c->tail_max;
        n = c->tail_max;
    } else if (c->tail.len + n > c->tail_max) {
        size_t drop = c->tail.len + n - c->tail_max;
        memmove(c->tail.data, c->tail.data + drop, c->tail.len - drop);
        buf_truncate(&c->tail, c->tail.len - drop);
    }
    if (buf_add(&c->tail, p, n))
        BUG("shell tail over its bound");
}

static void finish_capture(struct capture *c)
{
    struct shell_result *r = c->r;
    if (r->output_bytes > r->output.len + c->tail.len) {
        r->truncated = true;
        size_t omitted = r->output_bytes - r->output.len - c->tail.len;
        char mark[160];
        snprintf(mark, sizeof(mark), "\n[... %zu bytes of output omitted: %zu bytes in all ...]\n",
                 omitted, r->output_bytes);
        if (buf_addstr(&r->output, mark) || buf_add(&r->output, c->tail.data, c->tail.len))
            BUG("shell capture over its bound");
    } else if (c->tail.len && buf_add(&r->output, c->tail.data, c->tail.len)) {
        BUG("shell capture over its bound");
    }
}

static void make_nonce(char *out, size_t n)
{
    unsigned char raw[8];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        uint64_t t = (uint64_t)ca_now_us() ^ (uint64_t)getpid() << 32;
        memcpy(raw, &t, sizeof(raw));
    }
    snprintf(out, n, "%02x%02x%02x%02x%02x%02x%02x%02x", raw[0], raw[1], raw[2], raw[3], raw[4],
             raw[5], raw[6], raw[7]);
}

/* Wait for readable fds (fg output, bg outputs, events) up to ms. */
static void wait_io(struct shells *sh, int64_t ms)
{
    struct pollfd pfd[64];
    int fds[64];
    size_t n = 0;
    if (sh->fg_out >= 0)
        fds[n++] = sh->fg_out;
    n += shells_poll_fds(sh, fds + n, ARRAY_SIZE(fds) - n);
    for (size_t i = 0; i < n; i++)
        pfd[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    if (ms > 1000)
        ms = 1000;
    if (poll(pfd, n, (int)(ms < 0 ? 0 : ms)) < 0 && errno != EINTR)
        LOG_DEBUG("poll: %s", strerror(errno));
}

int shells_run(struct shells *sh, const char *cmd, int64_t timeout_ms, size_t out_max,
               struct shell_result *r, struct ca_err *err)
{
    int64_t t0 = ca_now_us();
    if (out_max == 0 || out_max > CA_LIMIT_TOOL_OUTPUT - 256)
        out_max = CA_LIMIT_TOOL_OUTPUT - 256;
    if (!sh->fg_pid) {
        int rc = start_fg(sh, err);
        if (rc)
            return rc;
        r->shell_restarted = sh->fg_started_once;
        sh->fg_started_once = true;
    }
    struct buf path;
    buf_init(&path, CA_LIMIT_PATH);
    int rc = fs_join(&path, sh->ctl_dir, CMD_FILE);
    if (rc == 0)
        rc = fs_write_atomic(path.data, cmd, strlen(cmd), 0644, err);
    buf_release(&path);
    if (rc)
        return rc;

    char nonce[24], marker[64];
    make_nonce(nonce, sizeof(nonce));
    snprintf(marker, sizeof(marker), MARKER_PREFIX "%s_", nonce);
    char *line = xstrfmt(". %s/" CMD_FILE " </dev/null 2>&1; printf '\\n__CA_END_%s_%%d__\\n' $?\n",
                         sh->ctl_seen, nonce);
    rc = fs_write_all(sh->fg_in, line, strlen(line));
    free(line);
    if (rc) {
        stop_fg(sh);
        return err_setf(err, rc, "the shell stopped reading commands: %s", strerror(-rc));
    }

    struct capture cap = {.r = r, .tail_max = out_max / 4};
    cap.head_max = out_max - cap.tail_max;
    buf_init(&cap.tail, cap.tail_max);
    size_t mlen = strlen(marker);
    char pending[256];
    size_t npending = 0;
    char data[16384 + sizeof(pending)];
    bool done = false, killed = false, eof = false;
    int64_t deadline = timeout_ms > 0 ? t0 + timeout_ms * 1000 : INT64_MAX;
    while (!done) {
        ssize_t n = read(sh->fg_out, data + npending, sizeof(data) - npending - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
            eof = true;
            break;
        }
        if (n > 0) {
            memcpy(data, pending, npending);
            size_t len = npending + (size_t)n;
            data[len] = '\0';
            const char *hit = memmem(data, len, marker, mlen);
            if (hit) {
                const char *code = hit + mlen;
                const char *end = memmem(code, len - (size_t)(code - data), "__\n", 3);
                if (!end) { /* the status has not fully arrived yet */
                    size_t keep = len - (size_t)(hit - data);
                    emit(&cap, data, (size_t)(hit - data));
                    memmove(pending, hit, keep);
                    npending = keep;
                    continue;
                }
                emit(&cap, data, (size_t)(hit - data));
                /* The marker's nonce is unknown to the command, so what follows it is the
                 * shell's own printf of $? (0-255); anything else is reported, as -1. */
                int64_t status;
                struct ca_err perr = {0};
                if (sv_parse_range(sv_from(code, (size_t)(end - code)), 0, 255, &status,
                                   "the shell's exit status", &perr) == 0) {
                    r->exit_code = (int)status;
                } else {
                    LOG_WARN("%s", perr.msg);
                    r->exit_code = -1;
                }
                done = true;
                break;
            }
            size_t keep = len < mlen + 16 ? len : mlen + 16;
            emit(&cap, data, len - keep);
            memmove(pending, data + len - keep, keep);
            npending = keep;
            continue;
        }
        shells_drain(sh);
        int64_t now = ca_now_us();
        if (now >= deadline) {
            if (!killed) {
                struct ca_err kerr;
                r->timed_out = killed = true;
                if (sandbox_kill_tree(sh->sb, sh->fg_pid, SIGKILL, false, &kerr))
                    LOG_WARN("timeout kill: %s", kerr.msg);
                deadline = now + KILL_GRACE_MS * 1000;
                continue;
            }
            /* The shell itself is stuck: start over with a new one. */
            stop_fg(sh);
            eof = true;
            break;
        }
        wait_io(sh, (deadline - now) / 1000 + 1);
    }
    if (done && !eof) {
        /* What the command left running (`cmd &`, orphans, a fork bomb) is stopped, so
         * leftovers cannot pile up against the sandbox's limits; long jobs belong in
         * background shells. */
        struct ca_err kerr;
        int krc = sandbox_kill_tree(sh->sb, sh->fg_pid, SIGKILL, false, &kerr);
        if (krc && krc != -ESRCH)
            LOG_WARN("stopping leftovers: %s", kerr.msg);
    }
    if (!done)
        emit(&cap, pending, npending);
    finish_capture(&cap);
    buf_release(&cap.tail);
    if (eof) {
        /* The shell exited (e.g. `exit 3`) or was killed: report its status. */
        if (sh->fg_pid) {
            if (!wait_event(sh, fg_gone, NULL, 1000))
                sh->fg_status = SIGKILL; /* no report: treat as killed */
            r->exit_code = WIFEXITED(sh->fg_status) ? WEXITSTATUS(sh->fg_status)
                                                    : 128 + WTERMSIG(sh->fg_status);
        } else {
            r->exit_code = 128 + SIGKILL;
        }
        stop_fg(sh);
    }
    r->elapsed_us = ca_now_us() - t0;
    shells_drain(sh);
    return 0;
}

static struct bg_shell *find_bg(struct shells *sh, const char *id)
{
    for (size_t i = 0; i < sh->nbg; i++)
        if (strcmp(sh->bg[i].id, id) == 0)
            return &sh->bg[i];
    return NULL;
}

int shells_start_bg(struct shells *sh, const char *cmd, char *id, size_t id_len, struct ca_err *err)
{
    if (sh->nbg >= 64)
        return err_setf(err, CA_ETOOBIG,
                        "64 background shells were already started in this episode; kill the "
                        "ones you no longer need with KillBash");
    int out[2];
    if (pipe2(out, O_CLOEXEC) < 0)
        return err_setf(err, -errno, "cannot create a pipe: %s", strerror(errno));
    const char *argv[] = {"bash", "--noprofile", "--norc", "-c", cmd, NULL};
    struct sandbox_cmd c = {
        .argv = argv,
        .env = (const char *const *)sh->env,
        .stdin_fd = -1,
        .stdout_fd = out[1],
        .stderr_fd = out[1],
        .new_pgroup = true,
    };
    int pid = 0;
    int rc = sandbox_exec(sh->sb, &c, &pid, err);
    close(out[1]);
    if (rc) {
        close(out[0]);
        return rc;
    }
    set_nonblock(out[0]);
    ALLOC_GROW(sh->bg, sh->nbg + 1, sh->bg_alloc);
    struct bg_shell *b = &sh->bg[sh->nbg++];
    memset(b, 0, sizeof(*b));
    snprintf(b->id, sizeof(b->id), "bash_%u", ++sh->bg_seq);
    b->pid = pid;
    b->fd = out[0];
    b->running = true;
    buf_init(&b->data, BG_KEEP);
    snprintf(id, id_len, "%s", b->id);
    return 0;
}

int shells_bg_output(struct shells *sh, const char *id, struct buf *out, size_t out_max,
                     struct shell_bg_status *st, struct ca_err *err)
{
    shells_drain(sh);
    struct bg_shell *b = find_bg(sh, id);
    if (!b)
        return err_setf(err, CA_ENOTFOUND, "no background shell '%s' in this episode", id);
    size_t n = b->data.len < out_max ? b->data.len : out_max;
    int rc = buf_add(out, b->data.data, n);
    if (rc)
        return err_setf(err, rc, "background output over the limit");
    memmove(b->data.data, b->data.data + n, b->data.len - n);
    buf_truncate(&b->data, b->data.len - n);
    st->running = b->running;
    st->exit_code = b->running             ? 0
                    : WIFEXITED(b->status) ? WEXITSTATUS(b->status)
                                           : 128 + WTERMSIG(b->status);
    st->dropped = b->dropped;
    b->dropped = 0;
    return 0;
}

int shells_bg_kill(struct shells *sh, const char *id, struct ca_err *err)
{
    struct bg_shell *b = find_bg(sh, id);
    if (!b)
        return err_setf(err, CA_ENOTFOUND, "no background shell '%s' in this episode", id);
    if (!b->running)
        return 0;
    int rc = sandbox_kill_tree(sh->sb, b->pid, SIGKILL, true, err);
    if (rc)
        return rc;
    if (!wait_event(sh, bg_gone, b, 2000))
        return err_setf(err, CA_ETIMEOUT, "background shell '%s' did not stop after SIGKILL", id);
    shells_drain(sh);
    return 0;
}
