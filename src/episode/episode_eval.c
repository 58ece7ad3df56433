/*
 * episode_eval.c - the episode's evaluator socket: what the workspace's
 * ./compile, ./verify and ./profile talk to from inside the sandbox.
 *
 * A thread per episode listens on <control>/eval.sock (the control dir is
 * bound read-only at /run/cuda-agent in the sandbox; connecting to a socket
 * needs no write access to the mount). A request names only the command:
 * {"command": "compile"|"verify"|"profile"}; everything else (the workspace
 * path, the task, the options) is the episode's own, so nothing the agent
 * sends can point the evaluator elsewhere. The thread serves one request at
 * a time: through the episode's evaluation callback when it has one (the job
 * bus), else through the evaluator service when the options name its socket,
 * else by running the pipeline in this process (on the options' device,
 * default cuda). The reply is
 * {"exit": STATUS, "text": REPORT}; each evaluation is also recorded (see
 * episode_evals) with a copy of the files it evaluated under
 * <episode>/evals/<seq>/.
 */
#include "episode/episode_internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/msg.h"
#include "core/util.h"
#include "eval/eval.h"
#include "eval/eval_report.h"
#include "eval/evald.h"
#include "core/banned.h"

#define EVAL_IO_TIMEOUT_MS 10000
#define EVAL_RECORDS_MAX 10000

struct episode__evals {
    char *workspace, *dir, *sock;
    char *evaluator, *device; /* NULL: in process; NULL: cuda */
    episode_eval_fn *eval;    /* before both, when set */
    void *eval_ctx;
    int lfd;
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t mu;
    json_t *records; /* array, under mu */
    int64_t seq;
};

/* No verdict: 69 the evaluator (service, Redis) is unreachable; 75 it gave no answer in time
 * (a full job queue, a result that did not come); 1 otherwise. */
static int exit_for(int rc)
{
    return rc == CA_EUNAVAIL ? 69 : rc == CA_ETIMEOUT ? 75 : 1;
}

static json_t *run_one(struct episode__evals *ev, const char *command)
{
    struct eval_opts eo = {.workspace = ev->workspace};
    eo.stop = strcmp(command, "compile") == 0  ? EVAL_STOP_COMPILE
              : strcmp(command, "verify") == 0 ? EVAL_STOP_VERIFY
                                               : EVAL_STOP_REWARD;
    eo.device = ev->device;
    int64_t seq = ev->seq + 1;
    char *keep = xstrfmt("%s/evals/%lld", ev->dir, (long long)seq);
    if (eo.stop != EVAL_STOP_COMPILE)
        eo.keep_dir = keep;
    struct ca_err err = {0};
    json_t *report = NULL;
    int64_t t0 = ca_now_us();
    int rc = ev->eval        ? ev->eval(ev->eval_ctx, &eo, &report, &err)
             : ev->evaluator ? evald_eval(ev->evaluator, &eo, &report, &err)
                             : eval_run(&eo, &report, &err);
    struct eval_report er;
    eval_report_read(report, &er); /* NULL (the evaluator failed) reads as empty */
    struct buf text;
    buf_init(&text, CA_LIMIT_TOOL_OUTPUT * 2);
    int status;
    if (rc) {
        status = exit_for(rc);
        if (buf_addf(&text, "%s: the evaluator failed: %s\n", command, err.msg))
            LOG_DEBUG("message cut");
    } else {
        status = er.ok ? 0 : 1;
        if (eval_format(report, &text))
            LOG_DEBUG("report cut");
    }
    json_t *reply = json_pack("{s:i, s:s%}", "exit", status, "text", text.data, text.len);
    if (report) {
        json_t *rec =
            json_pack("{s:I, s:s, s:b, s:o, s:s?, s:O, s:s?, s:f}", "seq", (json_int_t)seq,
                      "command", command, "ok", er.ok, "reward",
                      er.reward_is_int ? json_integer((json_int_t)er.reward) : json_null(), "stage",
                      *er.stage ? er.stage : NULL, "report", report, "snapshot_dir",
                      eo.keep_dir && fs_is_dir(keep) ? keep : NULL, "elapsed_ms",
                      (double)(ca_now_us() - t0) / 1000.0);
        pthread_mutex_lock(&ev->mu);
        ev->seq = seq;
        if (json_array_size(ev->records) < EVAL_RECORDS_MAX)
            json_array_append_new(ev->records, rec);
        else
            json_decref(rec);
        pthread_mutex_unlock(&ev->mu);
        if (eo.keep_dir && fs_is_dir(keep)) {
            char *path = xstrfmt("%s/report.json", keep);
            struct buf b;
            buf_init(&b, CA_LIMIT_JSON_BYTES);
            struct ca_err e;
            if (jsonx_dump(report, JSON_INDENT(1), &b) ||
                fs_write_atomic(path, b.data, b.len, 0600, &e))
                LOG_WARN("episode: could not keep %s", path);
            buf_release(&b);
            free(path);
        }
    }
    json_decref(report);
    buf_release(&text);
    free(keep);
    return reply;
}

static void serve_one(struct episode__evals *ev, int fd)
{
    struct ca_err err = {0};
    json_t *req = NULL, *reply;
    const char *cmd = NULL;
    if (msg_recv(fd, &req, ca_now_us() + (int64_t)EVAL_IO_TIMEOUT_MS * 1000, &err) != 0)
        reply = json_pack("{s:i, s:s}", "exit", 64, "text", err.msg);
    else if (!(cmd = json_string_value(json_object_get(req, "command"))) ||
             (strcmp(cmd, "compile") && strcmp(cmd, "verify") && strcmp(cmd, "profile")))
        reply = json_pack("{s:i, s:s}", "exit", 64, "text",
                          "a request is {\"command\": \"compile\"|\"verify\"|\"profile\"}\n");
    else
        reply = run_one(ev, cmd);
    if (msg_send(fd, reply, ca_now_us() + (int64_t)EVAL_IO_TIMEOUT_MS * 1000, &err))
        LOG_WARN("episode: evaluation reply lost: %s", err.msg);
    json_decref(reply);
    json_decref(req);
}

static void *eval_thread(void *arg)
{
    struct episode__evals *ev = arg;
    while (!atomic_load(&ev->stop)) {
        struct pollfd p = {.fd = ev->lfd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int fd = accept4(ev->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        serve_one(ev, fd);
        close(fd);
    }
    return NULL;
}

int episode__evals_start(const char *control, const char *dir, const char *workspace,
                         const struct episode_opts *o, struct episode__evals **out,
                         struct ca_err *err)
{
    struct episode__evals *ev = xcalloc(1, sizeof(*ev));
    ev->sock = xstrfmt("%s/eval.sock", control);
    ev->lfd = msg_listen(ev->sock, 8, err);
    if (ev->lfd < 0) {
        int rc = ev->lfd;
        free(ev->sock);
        free(ev);
        return rc;
    }
    /* Inside the sandbox we are another uid mapped to ours: let it connect. */
    if (chmod(ev->sock, 0666) != 0)
        LOG_WARN("episode: chmod %s: %s", ev->sock, strerror(errno));
    ev->workspace = xstrdup(workspace);
    ev->dir = xstrdup(dir);
    ev->evaluator = o->evaluator && *o->evaluator ? xstrdup(o->evaluator) : NULL;
    ev->device = o->eval_device && *o->eval_device ? xstrdup(o->eval_device) : NULL;
    ev->eval = o->eval;
    ev->eval_ctx = o->eval_ctx;
    ev->records = json_array();
    (void)pthread_mutex_init(&ev->mu, NULL); /* default attributes: cannot fail on Linux */
    if (pthread_create(&ev->thread, NULL, eval_thread, ev) != 0) {
        int rc = err_setf(err, CA_ECHILD, "cannot start the evaluator socket's thread");
        ev->thread = 0;
        episode__evals_stop(ev);
        return rc;
    }
    *out = ev;
    return 0;
}

void episode__evals_stop(struct episode__evals *ev)
{
    if (!ev)
        return;
    atomic_store(&ev->stop, 1);
    if (ev->thread)
        pthread_join(ev->thread, NULL);
    close(ev->lfd);
    (void)unlink(ev->sock); /* in the episode's own directory, removed with it */
    pthread_mutex_destroy(&ev->mu);
    json_decref(ev->records);
    free(ev->sock);
    free(ev->dir);
    free(ev->workspace);
    free(ev->evaluator);
    free(ev->device);
    free(ev);
}

json_t *episode__evals_since(struct episode__evals *ev, int64_t since)
{
    json_t *out = json_array();
    if (!ev)
        return out;
    pthread_mutex_lock(&ev->mu);
    size_t i;
    json_t *r;
    json_array_foreach(ev->records, i, r)
    {
        if (json_integer_value(json_object_get(r, "seq")) > since)
            json_array_append_new(out, json_deep_copy(r));
    }
    pthread_mutex_unlock(&ev->mu);
    return out;
}
