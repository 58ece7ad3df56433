/*
 * compile_pool.c - the build's worker threads and what one job does: a split
 * cu-torch unit's halves and their merge, or the unit whole (retried without the
 * accelerators when compile_retry.c says so), then its object into the cache.
 *
 * A thread per queued job up to the limit. The pool's state (queue, counters) is
 * guarded by one mutex; a job's own fields belong to the worker running it until
 * it is counted done.
 */
#include "eval/compile_internal.h"
#include "eval/cpuplan.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/banned.h"

/* One half of a split unit, on a thread of its own. */
struct half {
    const struct compile__ctx *c;
    const struct compile__argv *argv, *binds;
    struct compile__run run;
};

static void *half_run(void *arg)
{
    struct half *h = arg;
    (void)cpuplan_place_thread();
    compile__run_tool(h->c, h->c->build_dir, h->argv, compile__ro_compile, h->binds, &h->run);
    return NULL;
}

/* Appends a compiler's output to the split log, as much as fits. */
static void split_log_add(struct compile__job *j, const char *title, const struct compile__run *r)
{
    (void)!buf_addf(&j->split_log, "-- %s (%s)\n", title, r->rc ? r->err.msg : r->how);
    size_t room = j->split_log.max - j->split_log.len;
    (void)!buf_add(&j->split_log, r->out.data, r->out.len < room ? r->out.len : room);
}

/*
 * The halves of a split cu-torch unit, at once (the torch half on a second thread), then their
 * merge into obj and the check of what the merged object leaves undefined. true: j->obj is the
 * unit's object and j->run says how it went. false: the unit is to be built whole, and
 * j->split_log says why; j->run is reset.
 */
static bool run_split(const struct compile__ctx *c, struct compile__job *j)
{
    int64_t t0 = ca_now_us();
    bool have_host = j->argv_host.n > 0, threaded = false;
    struct half host = {.c = c, .argv = &j->argv_host, .binds = j->binds_host};
    compile__run_init(&host.run);
    pthread_t th;
    if (have_host)
        threaded = pthread_create(&th, NULL, half_run, &host) == 0;
    compile__run_tool(c, c->build_dir, &j->argv_dev, compile__ro_compile, j->binds, &j->run);
    if (have_host && threaded)
        pthread_join(th, NULL);
    else if (have_host)
        half_run(&host);
    const char *why = NULL;
    char check[256] = "";
    if (j->run.rc || !j->run.ok)
        why = "the nvcc half did not compile";
    else if (have_host && (host.run.rc || !host.run.ok))
        why = "the torch half did not compile";
    else if (have_host && strstr(host.run.out.data, "used but never defined"))
        why = "the torch half uses a function that only the nvcc half defines inline or static";
    struct compile__run merge;
    compile__run_init(&merge);
    if (!why && have_host) {
        compile__run_tool(c, c->build_dir, &j->argv_merge, compile__ro_compile, j->binds_host,
                          &merge);
        if (merge.rc || !merge.ok)
            why = "the halves did not merge";
    }
    if (!why && have_host) {
        char *obj = xstrfmt("%s/%s", c->build_dir, j->obj);
        int rc = compile__split_check_object(obj, sv_from(j->split_names.data, j->split_names.len),
                                             check, sizeof(check));
        free(obj);
        if (rc < 0)
            snprintf(check, sizeof(check), "the merged object cannot be read: %s", ca_strerror(rc));
        if (rc)
            why = check;
    }
    /* The nvcc half alone past its time: the whole unit would be too. */
    bool timed_out = j->run.timed_out;
    if (!why || timed_out) {
        j->split_ok = !why;
        j->used_pch = have_host && !strstr(host.run.out.data, "pch.h.gch");
        if (have_host) {
            size_t room = j->run.out.max - j->run.out.len;
            (void)!buf_add(&j->run.out, host.run.out.data,
                           host.run.out.len < room ? host.run.out.len : room);
        }
        j->run.elapsed_us = ca_now_us() - t0;
        compile__run_release(&host.run);
        compile__run_release(&merge);
        return true;
    }
    (void)!buf_addf(&j->split_log, "cut in two, not built so: %s\n", why);
    split_log_add(j, "nvcc half", &j->run);
    if (have_host) {
        split_log_add(j, "torch half", &host.run);
        if (merge.how[0] || merge.rc)
            split_log_add(j, "merge", &merge);
    }
    LOG_INFO("compile: %s: %s; building it as one unit", j->u->name, why);
    j->split_us = ca_now_us() - t0;
    compile__run_release(&host.run);
    compile__run_release(&merge);
    return false;
}

/* The unit as one compiler run; a failure the accelerators may have caused is run again
 * without them. */
static void run_whole(const struct compile__ctx *c, struct compile__job *j)
{
    compile__run_tool(c, c->build_dir, &j->argv, compile__ro_compile, j->binds, &j->run);
    bool accel = j->argv_plain.n > 0;
    j->used_pch = j->pch;
    if (!j->run.ok && accel && !j->run.timed_out &&
        ((j->light && compile__light_failure(&j->run.out)) ||
         (j->pch && compile__pch_failure(&j->run.out)))) {
        LOG_INFO("compile: %s failed with the %s; retrying without", j->u->name,
                 j->light && j->pch ? "light torch headers and their precompiled header"
                 : j->light         ? "light torch headers"
                                    : "precompiled header");
        j->retried = true;
        j->used_pch = false;
        int64_t first = j->run.elapsed_us;
        compile__run_tool(c, c->build_dir, &j->argv_plain, compile__ro_compile, j->binds, &j->run);
        j->run.elapsed_us += first;
    }
    j->run.elapsed_us += j->split_us;
    /* -Winvalid-pch: "pch/pch.h.gch: not used because ..."; the header was parsed instead. */
    if (j->run.ok && j->used_pch && strstr(j->run.out.data, "pch.h.gch")) {
        LOG_WARN("compile: %s: the precompiled header was not usable", j->u->name);
        j->used_pch = false;
    }
}

/*
 * ptxas's lines beside the cached object, so that a later build that hits the cache still
 * reports each kernel's registers and spills. Best effort: without the file, no numbers.
 */
static void store_info(const struct compile__job *j)
{
    struct buf info;
    buf_init(&info, j->run.out.len + 1);
    struct sv rest = sv_from(j->run.out.data, j->run.out.len), line;
    while (sv_next_line(&rest, &line, NULL))
        if (compile__ptxas_line(line))
            (void)!(buf_add(&info, line.p, line.len) || buf_addch(&info, '\n'));
    if (info.len) {
        char *path = xstrfmt("%s" COMPILE__INFO_SUFFIX, j->u->cache_path);
        struct ca_err e = {0};
        if (fs_write_atomic(path, info.data, info.len, 0444, &e))
            LOG_DEBUG("compile: %s", e.msg);
        free(path);
    }
    buf_release(&info);
}

static void job_run(const struct compile__ctx *c, struct compile__job *j)
{
    if (!j->argv_dev.n || !run_split(c, j))
        run_whole(c, j);
    if (!j->run.ok)
        return;
    /* Out of the build directory at once: no later compiler can touch the cached inode. */
    struct buf obj;
    buf_init(&obj, CA_LIMIT_PATH);
    if (fs_join(&obj, c->build_dir, j->obj))
        j->store_rc = err_setf(&j->store_err, CA_ETOOBIG, "object path too long");
    else
        j->store_rc = compile__cache_store(obj.data, j->u->cache_path, &j->store_err);
    buf_release(&obj);
    if (!j->store_rc)
        store_info(j);
}

static void *worker(void *arg)
{
    struct compile__pool *p = arg;
    int prc = cpuplan_place_thread();
    if (prc)
        LOG_WARN("compile: cannot place a worker for compiling: %s", ca_strerror(prc));
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->qhead == p->qlen && !p->stop)
            pthread_cond_wait(&p->work, &p->mu);
        /* Stopped: a build that failed early drops what is still queued. */
        if (p->stop || p->qhead == p->qlen)
            break;
        struct compile__job *j = p->queue[p->qhead++];
        pthread_mutex_unlock(&p->mu);
        job_run(p->ctx, j);
        pthread_mutex_lock(&p->mu);
        p->pending--;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void compile__pool_init(struct compile__pool *p, const struct compile__ctx *c, size_t max_threads)
{
    *p = (struct compile__pool){.ctx = c, .max_threads = max_threads ? max_threads : 1};
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = xcalloc(p->max_threads, sizeof(*p->threads));
}

void compile__pool_submit(struct compile__pool *p, struct compile__job *j)
{
    pthread_mutex_lock(&p->mu);
    ALLOC_GROW(p->queue, p->qlen + 1, p->qalloc);
    p->queue[p->qlen++] = j;
    p->pending++;
    /* A thread per queued job, up to the limit; idle threads wait for the next. */
    if (p->nthreads < p->max_threads && p->nthreads < p->pending) {
        if (pthread_create(&p->threads[p->nthreads], NULL, worker, p) == 0)
            p->nthreads++;
        else if (p->nthreads == 0)
            BUG("cannot start a compile worker thread");
    }
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void compile__pool_wait(struct compile__pool *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void compile__pool_release(struct compile__pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p->queue);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
}
