/*
 * gpupool.c - runners (harness/worker.py) behind a mutex and a condition
 * variable: a job takes a free runner, talks to it without holding the
 * lock, and gives it back.
 *
 * Worker protocol (harness/worker.py): JSON lines. The runner writes
 * {"ready": true, ...} once, then answers each request line
 * {"id": N, "argv": [...]} with {"id": N, "rc": STATUS, ...}.
 */
#include "eval/gpupool.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/log.h"
#include "core/msg.h"
#include "core/proc.h"
#include "core/util.h"
#include "eval/cpuplan.h"
#include "core/banned.h"

#define REPLY_LINE_MAX (64 * 1024)

extern char **environ;

struct runner {
    char *gpu;  /* CUDA_VISIBLE_DEVICES, or NULL */
    char **env; /* environ with CUDA_VISIBLE_DEVICES set */
    struct proc_child child;
    struct buf line; /* bytes read past the last reply */
    bool busy;
    int64_t jobs, restarts;
};

struct gpupool {
    struct gpupool_opts o;
    char *worker_py;
    char prewarm[16];
    struct runner *r;
    size_t n;
    int64_t next_id;
    pthread_mutex_t mu;
    pthread_cond_t freed;
};

static bool env_is(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static char **env_with(const char *gpu, const char *timing_cpus, const char *aux_cpus)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = xcalloc(n + 4, sizeof(*env));
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!(gpu && env_is(environ[i], "CUDA_VISIBLE_DEVICES")) &&
            !env_is(environ[i], "CUDA_AGENT_TIMING_CPUS") &&
            !env_is(environ[i], "CUDA_AGENT_AUX_CPUS"))
            env[k++] = xstrdup(environ[i]);
    if (gpu)
        env[k++] = xstrfmt("CUDA_VISIBLE_DEVICES=%s", gpu);
    if (timing_cpus)
        env[k++] = xstrfmt("CUDA_AGENT_TIMING_CPUS=%s", timing_cpus);
    if (aux_cpus)
        env[k++] = xstrfmt("CUDA_AGENT_AUX_CPUS=%s", aux_cpus);
    env[k] = NULL;
    return env;
}

/* One line from the runner (without the newline) into *line, by the deadline. */
static int read_line(struct runner *r, int64_t deadline_us, struct buf *line, struct ca_err *err)
{
    for (;;) {
        char *nl = r->line.len ? memchr(r->line.data, '\n', r->line.len) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - r->line.data);
            buf_reset(line);
            int rc = buf_add(line, r->line.data, n);
            buf_remove_prefix(&r->line, n + 1);
            return rc ? err_setf(err, rc, "runner reply over %d bytes", REPLY_LINE_MAX) : 0;
        }
        if (r->line.len >= REPLY_LINE_MAX)
            return err_setf(err, CA_ETOOBIG, "runner reply over %d bytes", REPLY_LINE_MAX);
        int rc = msg_wait(r->child.out_fd, POLLIN, deadline_us);
        if (rc)
            return err_setf(err, rc, "the runner did not answer in time");
        char tmp[4096];
        ssize_t got = read(r->child.out_fd, tmp, sizeof(tmp));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return err_setf(err, CA_ECHILD, "the runner exited");
        if (buf_add(&r->line, tmp, (size_t)got))
            return err_setf(err, CA_ETOOBIG, "runner reply over %d bytes", REPLY_LINE_MAX);
    }
}

static void runner_stop(struct runner *r)
{
    proc_child_kill(&r->child);
    buf_reset(&r->line);
}

static int runner_start(struct gpupool *p, struct runner *r, struct ca_err *err)
{
    const char *argv[] = {p->o.python,
                          "-B",
                          p->worker_py,
                          "--device",
                          p->o.device,
                          "--prewarm",
                          p->prewarm,
                          "--timing-signals",
                          p->o.sandbox_bin ? "--sandbox" : "--no-sandbox",
                          p->o.sandbox_bin,
                          NULL};
    struct proc_opts po = {.argv = argv, .env = (const char *const *)r->env};
    int rc = proc_spawn(&po, p->o.log_fd, &r->child, err);
    if (rc)
        return rc;
    struct buf line;
    buf_init(&line, REPLY_LINE_MAX);
    json_t *hello = NULL;
    rc = read_line(r, ca_now_us() + GPUPOOL_START_TIMEOUT_MS * 1000, &line, err);
    if (rc == 0)
        rc = jsonx_parse(sv_from(line.data, line.len), REPLY_LINE_MAX, "runner greeting", &hello,
                         err);
    if (rc == 0 && !json_is_true(json_object_get(hello, "ready"))) {
        const char *why = json_string_value(json_object_get(hello, "error"));
        rc = err_setf(err, CA_EUNAVAIL, "%s", why ? why : "the runner is not ready");
    }
    if (rc == 0)
        LOG_INFO("gpupool: runner %s ready (pid %d, torch %s)", r->gpu ? r->gpu : "-", r->child.pid,
                 json_string_value(json_object_get(hello, "torch")));
    else
        runner_stop(r);
    json_decref(hello);
    buf_release(&line);
    if (rc)
        err_prefix(err, "starting the GPU runner%s%s: ", r->gpu ? " for GPU " : "",
                   r->gpu ? r->gpu : "");
    return rc;
}

int gpupool_new(const struct gpupool_opts *o, struct gpupool **out, struct ca_err *err)
{
    if (o->n == 0 || o->n > GPUPOOL_MAX_RUNNERS)
        return err_setf(err, CA_EUSAGE, "a GPU pool has 1 to %d runners, not %zu",
                        GPUPOOL_MAX_RUNNERS, o->n);
    struct gpupool *p = xcalloc(1, sizeof(*p));
    p->o = *o;
    p->worker_py = xstrfmt("%s/worker.py", o->harness_dir);
    snprintf(p->prewarm, sizeof(p->prewarm), "%d", o->prewarm < 0 ? 0 : o->prewarm);
    p->n = o->n;
    p->r = xcalloc(o->n, sizeof(*p->r));
    (void)pthread_mutex_init(&p->mu, NULL); /* default attributes: cannot fail on Linux */
    pthread_cond_init(&p->freed, NULL);
    for (size_t i = 0; i < p->n; i++) {
        struct runner *r = &p->r[i];
        r->gpu = o->gpus ? xstrdup(o->gpus[i]) : NULL;
        r->env = env_with(r->gpu, o->timing_cpus ? o->timing_cpus[i] : NULL, o->aux_cpus);
        r->child = (struct proc_child){.pid = -1, .in_fd = -1, .out_fd = -1};
        buf_init(&r->line, 2 * REPLY_LINE_MAX);
    }
    for (size_t i = 0; i < p->n; i++) {
        int rc = runner_start(p, &p->r[i], err);
        if (rc) {
            gpupool_free(p);
            return rc;
        }
    }
    *out = p;
    return 0;
}

void gpupool_free(struct gpupool *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++) {
        struct runner *r = &p->r[i];
        if (r->child.pid > 0) {
            /* EOF first: the worker kills its pre-warmed candidates and exits. */
            close(r->child.in_fd);
            r->child.in_fd = -1;
            struct buf ignored;
            buf_init(&ignored, REPLY_LINE_MAX);
            struct ca_err e;
            (void)!read_line(r, ca_now_us() + 5000 * 1000, &ignored, &e);
            buf_release(&ignored);
        }
        runner_stop(r);
        buf_release(&r->line);
        for (char **e = r->env; e && *e; e++)
            free(*e);
        free(r->env);
        free(r->gpu);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->freed);
    free(p->r);
    free(p->worker_py);
    free(p);
}

static int job_on(struct gpupool *p, struct runner *r, int64_t id, const char *const *argv,
                  int64_t timeout_ms, int *status, struct ca_err *err)
{
    int rc = 0;
    if (r->child.pid > 0 && waitpid(r->child.pid, NULL, WNOHANG) == r->child.pid) {
        LOG_WARN("gpupool: runner %s (pid %d) exited between jobs; starting another",
                 r->gpu ? r->gpu : "-", r->child.pid);
        r->child.pid = -1; /* reaped */
        runner_stop(r);
    }
    if (r->child.pid <= 0) {
        r->restarts++;
        rc = runner_start(p, r, err);
        if (rc)
            return rc;
    }
    json_t *args = json_array();
    for (size_t i = 0; argv[i]; i++)
        json_array_append_new(args, json_string(argv[i]));
    json_t *req = json_pack("{s:I, s:o}", "id", (json_int_t)id, "argv", args);
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    struct buf line;
    buf_init(&line, REPLY_LINE_MAX);
    json_t *reply = NULL;
    if (!text) {
        rc = err_setf(err, CA_EPARSE, "cannot encode the job");
        goto out;
    }
    size_t tl = strlen(text);
    text[tl] = '\n'; /* json_dumps' NUL becomes the line end */
    rc = fs_write_all(r->child.in_fd, text, tl + 1);
    free(text);
    if (rc) {
        rc = err_setf(err, CA_ECHILD, "the runner is gone: %s", strerror(-rc));
        goto out;
    }
    int64_t deadline = timeout_ms > 0 ? ca_now_us() + timeout_ms * 1000 : INT64_MAX;
    size_t index = (size_t)(r - p->r);
    for (;;) {
        rc = read_line(r, deadline, &line, err);
        if (rc == 0)
            rc = jsonx_parse(sv_from(line.data, line.len), REPLY_LINE_MAX, "runner reply", &reply,
                             err);
        json_t *tw = rc == 0 ? json_object_get(reply, "timing") : NULL;
        if (!json_is_boolean(tw) || json_object_get(reply, "id"))
            break;
        /* A timed section opened or closed: the compile pool holds new compilers meanwhile. */
        cpuplan_timing_mark(index, json_is_true(tw));
        json_decref(reply);
        reply = NULL;
    }
    cpuplan_timing_mark(index, false);
    int64_t got_id = -1, st = -1;
    if (rc == 0 && (jsonx_get_int(reply, "id", true, &got_id, "runner reply", err) ||
                    jsonx_get_int(reply, "rc", true, &st, "runner reply", err)))
        rc = CA_EPARSE;
    if (rc == 0 && got_id != id)
        rc = err_setf(err, CA_EPARSE, "the runner answered job %lld, expected %lld",
                      (long long)got_id, (long long)id);
    if (rc == 0) {
        *status = (int)st;
        r->jobs++;
    }
out:
    if (rc) {
        LOG_WARN("gpupool: runner %s (pid %d) failed a job, restarting it: %s",
                 r->gpu ? r->gpu : "-", r->child.pid, err->msg);
        runner_stop(r);
        rc = rc == CA_ETIMEOUT ? rc : CA_ECHILD;
    }
    json_decref(reply);
    buf_release(&line);
    return rc;
}

int gpupool_run(struct gpupool *p, const char *const *argv, int64_t timeout_ms, int *status,
                struct ca_err *err)
{
    pthread_mutex_lock(&p->mu);
    struct runner *r = NULL;
    for (;;) {
        for (size_t i = 0; i < p->n && !r; i++)
            if (!p->r[i].busy)
                r = &p->r[i];
        if (r)
            break;
        pthread_cond_wait(&p->freed, &p->mu);
    }
    r->busy = true;
    int64_t id = ++p->next_id;
    pthread_mutex_unlock(&p->mu);

    int rc = job_on(p, r, id, argv, timeout_ms, status, err);

    pthread_mutex_lock(&p->mu);
    r->busy = false;
    pthread_cond_signal(&p->freed);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

json_t *gpupool_describe(struct gpupool *p)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n; i++) {
        const struct runner *r = &p->r[i];
        json_array_append_new(arr, json_pack("{s:s?, s:I, s:I, s:I, s:b}", "gpu", r->gpu, "pid",
                                             (json_int_t)r->child.pid, "jobs", (json_int_t)r->jobs,
                                             "restarts", (json_int_t)r->restarts, "busy", r->busy));
    }
    pthread_mutex_unlock(&p->mu);
    return json_pack("{s:s, s:o}", "device", p->o.device, "runners", arr);
}
