/*
 * bench_run.c - the attempts of a plan, in parallel, through the evaluator service or the
 * caller's evaluation callback (the job bus, wired by src/cli).
 *
 * Threads: the calling thread owns the store, the display and the evaluator child; up to
 * --jobs workers each take the next unfinished attempt, evaluate it (evald_eval or the
 * callback, or a `cuda-agent run` child for agent episodes) and hand the result back through a
 * mutex-guarded list. The calling thread records each result in its own transaction as it arrives,
 * so what finished is on disk before the next one is awaited. Workers block SIGINT/SIGTERM: the
 * command's handler sets *stop; then no new attempt starts and the running ones finish and are
 * kept; a second signal (*stop >= 2) abandons them (they stay unfinished and run again on
 * resume). An evaluator that cannot evaluate (a refused or lost connection) is not a result:
 * the attempt stays unfinished and is counted as an error.
 */
#include "bench/bench.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/proc.h"
#include "core/util.h"
#include "eval/eval.h"
#include "eval/evald.h"
#include "core/banned.h"

#define EVALUATOR_START_MS (15 * 60 * 1000)
#define AGENT_OUT_MAX (4 * CA_MIB)

struct result {
    size_t idx; /* into the plan */
    json_t *report, *agent;
    struct bench_timing t;
    int rc;
    char msg[CA_ERR_MSG_MAX];
};

struct runner {
    const struct bench_run_opts *o;
    const struct bench_plan *plan;
    const char *socket;
    size_t *todo; /* plan indices not finished */
    size_t ntodo, next;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct result *results;
    size_t nresults, results_alloc;
    size_t running, workers_alive;
    bool stopping;
};

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static json_t *missing_report(const struct bench_attempt *a)
{
    return json_pack("{s:b, s:s, s:s, s:{s:s}, s:{s:i, s:s}}", "ok", 0, "stage", "missing",
                     "message", "no solution for this task", "task", "id", a->task_id, "reward",
                     "reward", -1, "reason", "no solution: counted as failed");
}

static json_t *load_json(const char *path)
{
    return fs_is_file(path) ? json_load_file(path, 0, NULL) : NULL;
}

static int reward_of(const json_t *r)
{
    const json_t *v = json_object_get(json_object_get(r, "reward"), "reward");
    return json_is_integer(v) ? (int)json_integer_value(v) : -2;
}

/* One agent episode: `cuda-agent run` in a child (its own sandbox, evaluator client). */
static int run_agent(struct runner *r, const struct bench_attempt *a, struct result *res)
{
    const struct bench_run_opts *o = r->o;
    char *out = xstrfmt("%s/agent/%s", o->files_dir, a->task_id);
    struct ca_err err = {0};
    /* Unfinished from an earlier run: start it again from scratch. */
    if (fs_exists(out) && fs_remove_tree(out, &err)) {
        snprintf(res->msg, sizeof(res->msg), "%s", err.msg);
        free(out);
        return -1;
    }
    char turns[24];
    snprintf(turns, sizeof(turns), "%lld", (long long)(o->max_turns > 0 ? o->max_turns : 200));
    const char *argv[32];
    size_t n = 0;
    const char *fixed[] = {o->bin,        "run",   "--task", a->task_path, "--model",
                           o->model,      "--out", out,      "--device",   o->device,
                           "--max-turns", turns,   "--json"};
    for (size_t i = 0; i < ARRAY_SIZE(fixed); i++)
        argv[n++] = fixed[i];
    if (o->base_url) { /* else the child's own default ($OPENAI_BASE_URL) */
        argv[n++] = "--base-url";
        argv[n++] = o->base_url;
    }
    if (!o->eval) {
        argv[n++] = "--evaluator";
        argv[n++] = r->socket;
    }
    for (size_t i = 0; o->agent_args && o->agent_args[i] && n + 1 < ARRAY_SIZE(argv); i++)
        argv[n++] = o->agent_args[i];
    argv[n] = NULL;
    struct proc_opts po = {.argv = argv, .out_max = AGENT_OUT_MAX, .err_max = 64 * CA_KIB};
    struct proc_result pr;
    proc_result_init(&pr);
    int rc = proc_run(&po, &pr, &err);
    json_t *j = rc ? NULL : json_loads(pr.out.data ? pr.out.data : "", 0, NULL);
    if (!json_is_object(j)) {
        struct buf d;
        buf_init(&d, 256);
        if (!rc && proc_describe(&pr, 0, &d))
            buf_reset(&d);
        snprintf(res->msg, sizeof(res->msg), "cuda-agent run on %.60s: %.100s%s%.80s", a->task_id,
                 rc      ? err.msg
                 : d.len ? d.data
                         : "no result",
                 pr.err.len ? ": " : "", pr.err.data ? pr.err.data : "");
        buf_release(&d);
        json_decref(j);
        proc_result_release(&pr);
        free(out);
        return -1;
    }
    proc_result_release(&pr);
    /* The episode's score: the better of its final workspace and best snapshot. */
    char *p = xstrfmt("%s/eval_best.json", out);
    json_t *best = load_json(p);
    free(p);
    p = xstrfmt("%s/eval_final.json", out);
    json_t *fin = load_json(p);
    free(p);
    json_t *report = best && (!fin || reward_of(best) >= reward_of(fin)) ? best : fin;
    if (report)
        json_incref(report);
    json_decref(best);
    json_decref(fin);
    if (!report) {
        const char *why = json_string_value(json_object_get(j, "stop_reason"));
        report = json_pack("{s:b, s:s, s:s, s:{s:s}, s:{s:i, s:s}}", "ok", 0, "stage", "agent",
                           "message", why ? why : "the episode was not scored", "task", "id",
                           a->task_id, "reward", "reward", -1, "reason", "no scored result");
    }
    json_object_set_new(j, "out_dir", json_string(out));
    res->report = report;
    res->agent = j;
    free(out);
    return 0;
}

static void run_one(struct runner *r, size_t idx, struct result *res)
{
    const struct bench_attempt *a = &r->plan->attempts[idx];
    const struct bench_run_opts *o = r->o;
    memset(res, 0, sizeof(*res));
    res->idx = idx;
    res->t.started_us = wall_us();
    int64_t t0 = ca_now_us();
    struct ca_err err = {0};
    if (a->kind == BENCH_KIND_MISSING) {
        res->report = missing_report(a);
    } else if (a->kind == BENCH_KIND_AGENT) {
        res->rc = run_agent(r, a, res);
    } else {
        struct eval_opts eo = {
            .task_ref = a->task_path,
            .rules = o->rules,
            .no_compile_baseline = o->no_compile_baseline,
            .budget_ms = o->budget_ms,
            .timeout_ms = o->timeout_ms,
        };
        if (a->kind == BENCH_KIND_FILE)
            eo.kernelbench_file = a->source;
        else
            eo.workspace = a->source;
        res->rc = o->eval ? o->eval(o->eval_ctx, &eo, &res->report, &err)
                          : evald_eval(r->socket, &eo, &res->report, &err);
        if (res->rc)
            snprintf(res->msg, sizeof(res->msg), "%s", err.msg);
    }
    res->t.finished_us = wall_us();
    res->t.wall_ms = (double)(ca_now_us() - t0) / 1000.0;
}

static void *worker(void *arg)
{
    struct runner *r = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_mutex_lock(&r->mu);
    while (!r->stopping && r->next < r->ntodo) {
        size_t idx = r->todo[r->next++];
        r->running++;
        pthread_mutex_unlock(&r->mu);
        struct result res;
        run_one(r, idx, &res);
        pthread_mutex_lock(&r->mu);
        ALLOC_GROW(r->results, r->nresults + 1, r->results_alloc);
        r->results[r->nresults++] = res;
        r->running--;
        pthread_cond_signal(&r->cv);
    }
    r->workers_alive--;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- the evaluator child ---------------------------------------------------------------- */

struct evaluator {
    struct proc_child child;
    char *socket, *tmpdir;
};

static int evaluator_start(const struct bench_run_opts *o, struct evaluator *ev, struct ca_err *err)
{
    memset(ev, 0, sizeof(*ev));
    ev->child.pid = -1;
    ev->child.in_fd = ev->child.out_fd = -1;
    /* A unix socket path has ~108 bytes: a long run folder gets one in TMPDIR. */
    if (strlen(o->files_dir) + 16 < 100) {
        ev->socket = xstrfmt("%s/evaluator.sock", o->files_dir);
    } else {
        const char *tmp = getenv("TMPDIR");
        ev->tmpdir = xstrfmt("%s/ca-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(ev->tmpdir))
            return err_setf(err, -errno, "%s: %s", ev->tmpdir, strerror(errno));
        ev->socket = xstrfmt("%s/ev.sock", ev->tmpdir);
    }
    unlink(ev->socket);
    char *log = xstrfmt("%s/evaluator.log", o->files_dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        int rc = err_setf(err, -errno, "%s: %s", log, strerror(errno));
        free(log);
        return rc;
    }
    char runners[24];
    snprintf(runners, sizeof(runners), "%d", o->runners > 0 ? o->runners : 1);
    bool cpu = o->device && strcmp(o->device, "cpu") == 0;
    const char *argv[] = {o->bin,
                          "evaluator",
                          "--socket",
                          ev->socket,
                          "--device",
                          cpu ? "cpu" : "cuda",
                          cpu ? "--runners" : NULL,
                          runners,
                          NULL};
    struct proc_opts po = {.argv = argv};
    int rc = proc_spawn(&po, fd, &ev->child, err);
    close(fd);
    if (rc) {
        free(log);
        return rc;
    }
    int64_t t0 = ca_now_us();
    struct stat st;
    while (stat(ev->socket, &st) != 0 || !S_ISSOCK(st.st_mode)) {
        int status;
        if (waitpid(ev->child.pid, &status, WNOHANG) == ev->child.pid) {
            ev->child.pid = -1;
            rc = err_setf(err, CA_EUNAVAIL, "the evaluator service did not start (exit %d): see %s",
                          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), log);
            break;
        }
        if ((ca_now_us() - t0) / 1000 > EVALUATOR_START_MS) {
            rc = err_setf(err, CA_ETIMEOUT,
                          "the evaluator service did not listen within %d s: "
                          "see %s",
                          EVALUATOR_START_MS / 1000, log);
            break;
        }
        usleep(100 * 1000);
    }
    free(log);
    return rc;
}

static void evaluator_stop(struct evaluator *ev)
{
    if (ev->child.pid > 0) {
        kill(ev->child.pid, SIGTERM); /* it stops its runners and removes its socket */
        for (int i = 0; i < 200; i++) {
            if (waitpid(ev->child.pid, NULL, WNOHANG) == ev->child.pid) {
                ev->child.pid = -1;
                break;
            }
            usleep(50 * 1000);
        }
    }
    proc_child_kill(&ev->child);
    if (ev->tmpdir) {
        unlink(ev->socket);
        rmdir(ev->tmpdir);
    }
    free(ev->socket);
    free(ev->tmpdir);
}

/* ---- display ---------------------------------------------------------------------------- */

static void fmt_dur(double s, char *out, size_t n)
{
    if (!isfinite(s) || s < 0)
        snprintf(out, n, "?");
    else if (s < 90)
        snprintf(out, n, "%.0fs", s);
    else if (s < 5400)
        snprintf(out, n, "%.0fm%02.0fs", floor(s / 60), fmod(s, 60));
    else
        snprintf(out, n, "%.0fh%02.0fm", floor(s / 3600), fmod(floor(s / 60), 60));
}

static void show_status(const struct bench_run_stats *st, size_t running, size_t session_done,
                        int64_t t0)
{
    double el = (double)(ca_now_us() - t0) / 1e6;
    size_t left = st->total - st->skipped - st->done - st->errors;
    double eta = session_done ? el / (double)session_done * (double)left : NAN;
    char e[32], a[32];
    fmt_dur(el, e, sizeof(e));
    fmt_dur(eta, a, sizeof(a));
    fprintf(stderr,
            "\r\033[K[bench] %zu/%zu done (%zu failed, %zu infra, %zu errors) | %zu running | "
            "%s elapsed | ETA %s",
            st->skipped + st->done, st->total, st->failed, st->infra, st->errors, running, e, a);
    fflush(stderr);
}

static void env_from_report(struct bench_store *s, const json_t *report, bool *have)
{
    if (*have)
        return;
    const json_t *dev = json_object_get(json_object_get(report, "harness"), "device");
    if (!json_is_object(dev))
        return;
    const char *keys[][2] = {{"name", "gpu"},
                             {"torch", "torch"},
                             {"cuda", "cuda"},
                             {"capability", "capability"},
                             {"type", "device_type"}};
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        const json_t *v = json_object_get(dev, keys[i][0]);
        char *text = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
        if (json_is_string(v))
            (void)bench_store_set_env(s, keys[i][1], json_string_value(v), NULL);
        else if (text)
            (void)bench_store_set_env(s, keys[i][1], text, NULL);
        free(text);
    }
    *have = true;
}

static void print_event(json_t *ev)
{
    char *s = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (s) {
        puts(s);
        fflush(stdout);
    }
    free(s);
    json_decref(ev);
}

static int record(const struct bench_run_opts *o, struct bench_store *s, const struct bench_plan *p,
                  struct result *res, struct bench_run_stats *st, bool *have_env,
                  struct ca_err *err)
{
    const struct bench_attempt *a = &p->attempts[res->idx];
    if (res->rc) {
        st->errors++;
        if (o->json_lines)
            print_event(json_pack("{s:s, s:s, s:s, s:s}", "event", "error", "task", a->task_id,
                                  "key", a->key, "error", res->msg));
        else {
            if (o->tty)
                fputs("\r\033[K", stderr);
            fprintf(stderr, "bench: %s (%s): not evaluated: %s\n", a->task_id, a->key, res->msg);
        }
        return 0;
    }
    int rc = bench_store_record(s, a->id, res->report, &res->t, res->agent, err);
    if (rc)
        return rc;
    env_from_report(s, res->report, have_env);
    struct bench_outcome oc;
    bench_outcome_from_report(res->report, &oc);
    st->done++;
    if (oc.verdict == BENCH_FAILED)
        st->failed++;
    if (oc.verdict == BENCH_INFRA)
        st->infra++;
    const char *verdict = oc.verdict == BENCH_CORRECT  ? "correct"
                          : oc.verdict == BENCH_FAILED ? "failed"
                                                       : "infrastructure";
    const char *stage = json_string_value(json_object_get(res->report, "stage"));
    if (o->json_lines) {
        json_t *ev =
            json_pack("{s:s, s:s, s:s, s:s, s:s?, s:f}", "event", "done", "task", a->task_id, "key",
                      a->key, "verdict", verdict, "stage", stage, "wall_ms", res->t.wall_ms);
        if (oc.verdict == BENCH_CORRECT || oc.verdict == BENCH_FAILED)
            json_object_set_new(ev, "reward", json_integer(oc.reward));
        if (isfinite(oc.speedup_eager))
            json_object_set_new(ev, "speedup_eager", json_real(oc.speedup_eager));
        if (isfinite(oc.speedup_compile))
            json_object_set_new(ev, "speedup_compile", json_real(oc.speedup_compile));
        print_event(ev);
    } else if (!o->tty) {
        fprintf(stderr, "bench: %s (%s): %s, stage %s, %.1f s\n", a->task_id, a->key, verdict,
                stage ? stage : "?", res->t.wall_ms / 1000.0);
    }
    return 0;
}

int bench_run(const struct bench_run_opts *o, struct bench_store *s, const struct bench_plan *p,
              struct bench_run_stats *st, struct ca_err *err)
{
    memset(st, 0, sizeof(*st));
    st->total = p->n;
    int64_t t0 = ca_now_us();
    struct runner *r = xcalloc(1, sizeof(*r));
    r->o = o;
    r->plan = p;
    r->todo = xmallocarray(p->n ? p->n : 1, sizeof(*r->todo));
    bool need_evaluator = false;
    for (size_t i = 0; i < p->n; i++) {
        bool done;
        int rc = bench_store_finished(s, p->attempts[i].id, &done, err);
        if (rc) {
            free(r->todo);
            free(r);
            return rc;
        }
        if (done) {
            st->skipped++;
            continue;
        }
        r->todo[r->ntodo++] = i;
        need_evaluator |= p->attempts[i].kind != BENCH_KIND_MISSING;
    }
    if (o->json_lines)
        print_event(json_pack("{s:s, s:I, s:I}", "event", "start", "attempts",
                              (json_int_t)st->total, "already_finished", (json_int_t)st->skipped));
    struct evaluator ev = {.child = {.pid = -1, .in_fd = -1, .out_fd = -1}};
    int rc = 0;
    r->socket = o->evaluator;
    if (need_evaluator && !o->evaluator && !o->eval) {
        if (o->tty)
            fprintf(stderr, "[bench] starting the evaluator service (log in %s/evaluator.log)",
                    o->files_dir);
        int64_t e0 = ca_now_us();
        rc = evaluator_start(o, &ev, err);
        st->evaluator_start_s = (double)(ca_now_us() - e0) / 1e6;
        if (rc) {
            evaluator_stop(&ev);
            free(r->todo);
            free(r);
            return rc;
        }
        r->socket = ev.socket;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    size_t nworkers = (size_t)(o->jobs > 0 ? o->jobs : 1);
    if (nworkers > r->ntodo)
        nworkers = r->ntodo;
    pthread_t *th = xcalloc(nworkers ? nworkers : 1, sizeof(*th));
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < nworkers; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th[i], &attr, worker, r) == 0)
            r->workers_alive++;
        pthread_attr_destroy(&attr);
    }
    bool have_env = false;
    size_t session_done = 0;
    bool abandoned = false;
    while (r->workers_alive > 0 || r->nresults > 0) {
        if (r->nresults == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 250 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        }
        if (o->stop && *o->stop && !r->stopping) {
            r->stopping = true;
            st->interrupted = true;
            if (o->tty || !o->json_lines)
                fprintf(stderr,
                        "%sbench: stopping: %zu running attempt(s) finish and are kept "
                        "(interrupt again to abandon them; they run again on resume)\n",
                        o->tty ? "\r\033[K" : "", r->running);
        }
        if (o->stop && *o->stop >= 2) {
            abandoned = true;
            break;
        }
        struct result *batch = r->results;
        size_t nbatch = r->nresults;
        r->results = NULL;
        r->nresults = r->results_alloc = 0;
        size_t running = r->running;
        pthread_mutex_unlock(&r->mu);
        for (size_t i = 0; i < nbatch; i++) {
            if (!rc)
                rc = record(o, s, p, &batch[i], st, &have_env, err);
            session_done++;
            json_decref(batch[i].report);
            json_decref(batch[i].agent);
        }
        free(batch);
        if (rc) { /* the store failed: stop starting attempts */
            pthread_mutex_lock(&r->mu);
            r->stopping = true;
            continue;
        }
        if (o->tty)
            show_status(st, running, session_done, t0);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    if (o->tty)
        fputc('\n', stderr);
    st->wall_s = (double)(ca_now_us() - t0) / 1e6;
    if (abandoned) {
        /* Workers still hold the runner: it is left to the process's exit, which follows. */
        evaluator_stop(&ev);
        free(th);
        return rc;
    }
    evaluator_stop(&ev);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(th);
    free(r->todo);
    free(r);
    if (o->json_lines)
        print_event(json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:b}", "event", "end",
                              "finished_now", (json_int_t)st->done, "failed",
                              (json_int_t)st->failed, "infrastructure", (json_int_t)st->infra,
                              "errors", (json_int_t)st->errors, "already_finished",
                              (json_int_t)st->skipped, "wall_s", st->wall_s, "evaluator_start_s",
                              st->evaluator_start_s, "interrupted", st->interrupted));
    return rc;
}
