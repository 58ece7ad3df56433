/*
 * evald.c - the evaluator service: accept loop, one thread per connection,
 * eval_run with the shared GPU pool.
 */
#include "eval/evald.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/msg.h"
#include "core/util.h"
#include "eval/cpuplan.h"
#include "eval/gpupool.h"
#include "core/banned.h"

#define EVALD_IO_TIMEOUT_MS 10000
/* A client waits this long beyond the candidate's own limit (compile + queue + timing). */
#define EVALD_CLIENT_SLACK_MS ((int64_t)30 * 60 * 1000)

struct evald_host {
    const struct evald_opts *o;
    struct gpupool *pool;
    struct cpuplan *plan;
    size_t nrunners;
    char **timing_cpus, *aux_cpus;
};

struct evald {
    struct evald_host *h;
    atomic_int active;
    atomic_llong served;
};

struct conn {
    struct evald *d;
    int fd;
};

static json_t *error_reply(int code, const char *msg)
{
    return json_pack("{s:b, s:s, s:i}", "ok", 0, "error", msg, "code", code);
}

static const char *opt_str(const json_t *req, const char *key, const char *const *allowed,
                           const char *dflt, struct ca_err *err, int *rc)
{
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v))
        return dflt;
    const char *s = json_string_value(v);
    for (size_t i = 0; s && allowed && allowed[i]; i++)
        if (strcmp(s, allowed[i]) == 0)
            return s;
    if (s && !allowed)
        return s;
    *rc = err_setf(err, CA_EUSAGE, "request field \"%s\" has a bad value", key);
    return dflt;
}

/* Request -> eval options over the service's base options. */
static int parse_request(const struct evald_host *d, const json_t *req, struct eval_opts *eo,
                         struct ca_err *err)
{
    static const char *const timings[] = {"events", "kernel", "device", NULL};
    static const char *const precisions[] = {"strict", "tf32", NULL};
    static const char *const rule_sets[] = {"cuda-agent", "kernelbench", NULL};
    int rc = 0;
    *eo = d->o->base;
    eo->pool = d->pool;
    eo->workspace = json_string_value(json_object_get(req, "workspace"));
    eo->kernelbench_file = opt_str(req, "kernelbench_file", NULL, NULL, err, &rc);
    eo->task_ref = opt_str(req, "task", NULL, NULL, err, &rc);
    if (eo->kernelbench_file) {
        if (eo->workspace || eo->kernelbench_file[0] != '/' || !eo->task_ref ||
            eo->task_ref[0] != '/')
            return err_setf(err, CA_EUSAGE,
                            "a KernelBench request has an absolute \"kernelbench_file\" and "
                            "\"task\", and no \"workspace\"");
    } else if (!eo->workspace || eo->workspace[0] != '/') {
        return err_setf(err, CA_EUSAGE, "request needs \"workspace\": an absolute path");
    }
    eo->keep_dir = opt_str(req, "keep_dir", NULL, NULL, err, &rc);
    const char *mode = opt_str(req, "mode", eval_stop_names, "full", err, &rc);
    eo->timing = opt_str(req, "timing", timings, d->o->base.timing, err, &rc);
    eo->precision = opt_str(req, "precision", precisions, d->o->base.precision, err, &rc);
    eo->rules = opt_str(req, "rules", rule_sets, d->o->base.rules, err, &rc);
    if (rc)
        return rc;
    eo->stop = EVAL_STOP_REWARD;
    for (int i = 0; eval_stop_names[i]; i++)
        if (strcmp(mode, eval_stop_names[i]) == 0)
            eo->stop = (enum eval_stop)i;
    json_t *cb = json_object_get(req, "compile_baseline");
    if (cb && !json_is_boolean(cb))
        return err_setf(err, CA_EUSAGE, "\"compile_baseline\" must be true or false");
    if (cb)
        eo->no_compile_baseline = json_is_false(cb);
    int64_t i64;
    if (jsonx_get_int(req, "seeds", false, &i64, "request", err) == 0 &&
        json_object_get(req, "seeds")) {
        if (i64 < 1 || i64 > 64)
            return err_setf(err, CA_EUSAGE, "\"seeds\" must be 1..64");
        eo->seeds = (int)i64;
    }
    if (jsonx_get_int(req, "timeout_ms", false, &i64, "request", err) == 0 &&
        json_object_get(req, "timeout_ms")) {
        if (i64 < 1000 || i64 > 3600 * 1000)
            return err_setf(err, CA_EUSAGE, "\"timeout_ms\" must be 1000..3600000");
        eo->timeout_ms = i64;
    }
    if (jsonx_get_int(req, "budget_ms", false, &i64, "request", err) == 0 &&
        json_object_get(req, "budget_ms")) {
        if (i64 < 1 || i64 > 600 * 1000)
            return err_setf(err, CA_EUSAGE, "\"budget_ms\" must be 1..600000");
        eo->budget_ms = i64;
    }
    json_t *v;
    if ((v = json_object_get(req, "atol")) && json_is_number(v))
        eo->atol = json_number_value(v);
    if ((v = json_object_get(req, "rtol")) && json_is_number(v))
        eo->rtol = json_number_value(v);
    if (eo->atol < 0 || eo->rtol < 0)
        return err_setf(err, CA_EUSAGE, "tolerances must be >= 0");
    return 0;
}

int evald_host_eval(struct evald_host *h, const json_t *req, json_t **report, struct ca_err *err)
{
    struct eval_opts eo;
    int rc = parse_request(h, req, &eo, err);
    if (rc == 0)
        rc = eval_run(&eo, report, err);
    return rc;
}

json_t *evald_host_describe(struct evald_host *h)
{
    return json_pack("{s:o, s:o}", "pool", gpupool_describe(h->pool), "cpus",
                     cpuplan_to_json(h->plan));
}

static json_t *handle(struct evald *d, const json_t *req)
{
    struct ca_err err = {0};
    const char *op = json_string_value(json_object_get(req, "op"));
    if (op && strcmp(op, "status") == 0) {
        json_t *v = evald_host_describe(d->h); /* {"pool", "cpus"} */
        json_object_set_new(v, "ok", json_true());
        json_object_set_new(v, "served", json_integer((json_int_t)atomic_load(&d->served)));
        json_object_set_new(v, "active", json_integer(atomic_load(&d->active) - 1));
        return v;
    }
    if (!op || strcmp(op, "eval") != 0)
        return error_reply(CA_EUSAGE, "unknown op: requests are {\"op\": \"eval\"|\"status\"}");
    json_t *report = NULL;
    int rc = evald_host_eval(d->h, req, &report, &err);
    atomic_fetch_add(&d->served, 1);
    if (rc)
        return error_reply(rc, err.msg);
    return json_pack("{s:b, s:o}", "ok", 1, "report", report);
}

static void *serve_conn(void *arg)
{
    struct conn *c = arg;
    struct ca_err err = {0};
    json_t *req = NULL, *reply;
    if (msg_recv(c->fd, &req, ca_now_us() + (int64_t)EVALD_IO_TIMEOUT_MS * 1000, &err) != 0)
        reply = error_reply(CA_EPARSE, err.msg);
    else if (atomic_load(&c->d->active) > EVALD_MAX_ACTIVE)
        reply = error_reply(CA_EUNAVAIL, "the evaluator is busy; retry later");
    else
        reply = handle(c->d, req);
    if (msg_send(c->fd, reply, ca_now_us() + (int64_t)EVALD_IO_TIMEOUT_MS * 1000, &err))
        LOG_WARN("evaluator: reply lost: %s", err.msg);
    json_decref(reply);
    json_decref(req);
    close(c->fd);
    atomic_fetch_sub(&c->d->active, 1);
    free(c);
    return NULL;
}

static int64_t env_int(const char *name, int64_t dflt, int64_t lo, int64_t hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno || x < lo || x > hi) {
        LOG_WARN("evaluator: ignoring %s=%s (want %lld..%lld)", name, v, (long long)lo,
                 (long long)hi);
        return dflt;
    }
    return x;
}

/*
 * Issue 21: the runners' timing cores and everything else (docs/internals/evald.md, "CPU
 * cores"). The compile pool is placed on the rest at a lower priority; this thread takes the
 * compile cores too, so that every thread the service starts later (connections, compile
 * workers) and the runners until they pin themselves start there.
 */
static int plan_cpus(const struct evald_opts *o, size_t nrunners, struct cpuplan *plan,
                     char ***timing, char **aux, struct ca_err *err)
{
    int rc = cpuplan_from_host(nrunners, o->cpu_split, plan, err);
    if (rc)
        return rc;
    int nice = (int)env_int("CUDA_AGENT_COMPILE_NICE", CPUPLAN_COMPILE_NICE, 0, 19);
    int64_t defer = env_int("CUDA_AGENT_COMPILE_DEFER_MS", CPUPLAN_DEFER_MS, 0, 60000);
    cpuplan_compile_config(plan->isolated ? &plan->compile : NULL, nice, defer);
    char list[1024];
    json_t *j = cpuplan_to_json(plan);
    char *text = json_dumps(j, JSON_COMPACT);
    LOG_INFO("evaluator: CPUs: %s; compile nice %d, defer up to %lld ms", text ? text : "?", nice,
             (long long)defer);
    free(text);
    json_decref(j);
    if (!plan->isolated)
        return 0;
    if (sched_setaffinity(0, sizeof(plan->compile), &plan->compile))
        LOG_WARN("evaluator: cannot move to the compile cores: %s", strerror(errno));
    *timing = xcalloc(nrunners, sizeof(**timing));
    for (size_t i = 0; i < nrunners; i++) {
        cpuplan_format(&plan->runner[i], list, sizeof(list));
        (*timing)[i] = xstrdup(list);
    }
    cpuplan_format(&plan->compile, list, sizeof(list));
    *aux = xstrdup(list);
    return 0;
}

int evald_host_new(const struct evald_opts *o, struct evald_host **out, struct ca_err *err)
{
    struct evald_host *h = xcalloc(1, sizeof(*h));
    h->o = o;
    struct buf cache, hdir;
    buf_init(&cache, CA_LIMIT_PATH);
    buf_init(&hdir, CA_LIMIT_PATH);
    h->nrunners = o->n_gpus ? o->n_gpus : 1;
    h->plan = xcalloc(1, sizeof(*h->plan));
    int rc = plan_cpus(o, h->nrunners, h->plan, &h->timing_cpus, &h->aux_cpus, err);
    if (rc == 0)
        rc = eval_cache_root(&o->base, &cache, err);
    if (rc == 0)
        rc = eval_harness_dir(cache.data, &hdir, err);
    if (rc == 0) {
        int64_t t0 = ca_now_us();
        rc = eval_warm(&o->base, err);
        if (rc == CA_EUNAVAIL) /* no PyTorch: the pool below says so more precisely */
            rc = 0;
        LOG_INFO("evaluator: toolchain ready in %lld ms", (long long)(ca_now_us() - t0) / 1000);
    }
    bool boxed = !o->base.no_sandbox && !o->base.no_candidate_sandbox;
    if (rc == 0 && boxed && !eval_sandbox_bin())
        rc = err_setf(err, CA_EUNAVAIL,
                      "cannot find this program (/proc/self/exe) to run the candidate sandbox");
    if (rc == 0) {
        struct gpupool_opts po = {
            .python = eval_python(),
            .harness_dir = hdir.data,
            .device = o->base.device ? o->base.device : "cuda",
            .gpus = o->gpus,
            .n = h->nrunners,
            .prewarm = o->prewarm,
            .log_fd = 2,
            .sandbox_bin = boxed ? eval_sandbox_bin() : NULL,
            .timing_cpus = (const char *const *)h->timing_cpus,
            .aux_cpus = h->aux_cpus,
        };
        int64_t t0 = ca_now_us();
        rc = gpupool_new(&po, &h->pool, err);
        if (rc == 0)
            LOG_INFO("evaluator: %zu runner(s) ready in %lld ms", po.n,
                     (long long)(ca_now_us() - t0) / 1000);
    }
    buf_release(&cache);
    buf_release(&hdir);
    if (rc) {
        evald_host_free(h);
        return rc;
    }
    *out = h;
    return 0;
}

void evald_host_free(struct evald_host *h)
{
    if (!h)
        return;
    gpupool_free(h->pool);
    for (size_t i = 0; h->timing_cpus && i < h->nrunners; i++)
        free(h->timing_cpus[i]);
    free(h->timing_cpus);
    free(h->aux_cpus);
    free(h->plan);
    free(h);
}

int evald_serve(const struct evald_opts *o, volatile sig_atomic_t *stop, struct ca_err *err)
{
    struct evald d = {0};
    int lfd = -1;
    int rc = evald_host_new(o, &d.h, err);
    if (rc == 0 && (lfd = msg_listen(o->socket_path, 64, err)) < 0)
        rc = lfd;
    if (rc)
        goto out;
    LOG_INFO("evaluator: listening on %s", o->socket_path);
    pthread_attr_t attr;
    /* Both fail only for invalid arguments (glibc's pthread_attr_init cannot fail). */
    (void)pthread_attr_init(&attr);
    (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (!*stop) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        int n = poll(&p, 1, 200);
        if (n <= 0)
            continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        struct conn *c = xmalloc(sizeof(*c));
        *c = (struct conn){.d = &d, .fd = fd};
        atomic_fetch_add(&d.active, 1);
        pthread_t t;
        if (pthread_create(&t, &attr, serve_conn, c) != 0) {
            LOG_WARN("evaluator: cannot start a thread; dropping a connection");
            atomic_fetch_sub(&d.active, 1);
            close(fd);
            free(c);
        }
    }
    pthread_attr_destroy(&attr);
    LOG_INFO("evaluator: stopping; waiting for %d request(s)", atomic_load(&d.active));
    close(lfd);
    lfd = -1;
    (void)unlink(o->socket_path); /* gone already is fine; a stale one is replaced at bind */
    while (atomic_load(&d.active) > 0)
        usleep(20000);
out:
    if (lfd >= 0)
        close(lfd);
    evald_host_free(d.h);
    return rc;
}

json_t *evald_request_for(const struct eval_opts *o)
{
    char abs[PATH_MAX];
    json_t *req = json_pack("{s:s, s:s}", "op", "eval", "mode", eval_stop_names[o->stop]);
    if (o->workspace)
        json_object_set_new(req, "workspace",
                            json_string(realpath(o->workspace, abs) ? abs : o->workspace));
    if (o->kernelbench_file)
        json_object_set_new(
            req, "kernelbench_file",
            json_string(realpath(o->kernelbench_file, abs) ? abs : o->kernelbench_file));
    if (o->task_ref) {
        char t[PATH_MAX];
        json_object_set_new(req, "task", json_string(realpath(o->task_ref, t) ? t : o->task_ref));
    }
    if (o->timing)
        json_object_set_new(req, "timing", json_string(o->timing));
    if (o->precision)
        json_object_set_new(req, "precision", json_string(o->precision));
    if (o->rules)
        json_object_set_new(req, "rules", json_string(o->rules));
    if (o->no_compile_baseline)
        json_object_set_new(req, "compile_baseline", json_false());
    if (o->seeds > 0)
        json_object_set_new(req, "seeds", json_integer(o->seeds));
    if (o->atol > 0)
        json_object_set_new(req, "atol", json_real(o->atol));
    if (o->rtol > 0)
        json_object_set_new(req, "rtol", json_real(o->rtol));
    if (o->timeout_ms > 0)
        json_object_set_new(req, "timeout_ms", json_integer(o->timeout_ms));
    if (o->budget_ms > 0)
        json_object_set_new(req, "budget_ms", json_integer(o->budget_ms));
    if (o->keep_dir)
        json_object_set_new(req, "keep_dir", json_string(o->keep_dir));
    return req;
}

int evald_eval(const char *socket_path, const struct eval_opts *o, json_t **report,
               struct ca_err *err)
{
    json_t *req = evald_request_for(o), *reply = NULL;
    int64_t tmo = (o->timeout_ms > 0 ? o->timeout_ms : 120000) * 2 + EVALD_CLIENT_SLACK_MS;
    int rc = msg_request(socket_path, req, tmo, &reply, err);
    json_decref(req);
    if (rc == -ENOENT || rc == -ECONNREFUSED)
        return err_setf(err, CA_EUNAVAIL,
                        "no evaluator service answers at %s (%s); start one with `cuda-agent "
                        "evaluator --socket %s`",
                        socket_path, strerror(-rc), socket_path);
    if (rc) {
        err_prefix(err, "the evaluator service: ");
        return rc;
    }
    if (json_is_true(json_object_get(reply, "ok")) &&
        json_is_object(json_object_get(reply, "report"))) {
        *report = json_incref(json_object_get(reply, "report"));
        json_decref(reply);
        return 0;
    }
    const char *msg = json_string_value(json_object_get(reply, "error"));
    int64_t code = CA_ECHILD;
    if (jsonx_get_int(reply, "code", false, &code, "reply", NULL) || code >= 0 || code < CA_EFIRST)
        code = CA_ECHILD;
    rc = err_setf(err, (int)code, "the evaluator service: %s", msg ? msg : "a malformed reply");
    json_decref(reply);
    return rc;
}
