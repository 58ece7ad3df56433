/*
 * bus_load - the job bus under load: throughput and queue latency with many
 * simulated GPU workers (issue 20).
 *
 *   make bench && bench/bus_load.sh [JOBS [CLIENTS [WORKERS SLOTS [LATENCY_MS]]]]
 *   build/bench/bus_load --redis URL [--jobs N] [--clients N]   (the driver alone)
 *
 * The driver submits JOBS distinct jobs (a workspace-shaped file set of a
 * few KiB, each with its own content, so no two share a result) from
 * CLIENTS threads, each with its own connection, through bus_submit_wait:
 * the same upload, queueing script and wait as `cuda-agent eval --redis`.
 * The workers (bus_load.sh starts them) run the fake evaluation backend, a
 * TEST DOUBLE with a log-normal latency; everything else is real: digests,
 * blob fetches and checks, job directories, leases, the record script.
 * Prints one JSON object: jobs/s, and per job the queue latency (XADD to a
 * worker's pickup, as the worker measured it) and the client's end-to-end
 * time, p50/p99/max.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/bus.h"
#include "core/util.h"

struct run {
    struct bus_url url;
    int jobs;
    atomic_int next, failed;
    double *queue_ms, *e2e_ms;
    unsigned salt;
};

static void *client(void *arg)
{
    struct run *r = arg;
    struct bus_conn *c = NULL;
    struct ca_err err = {0};
    if (bus_conn_open(&r->url, &c, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    char kernel[4096], model[1024], task[2048];
    memset(task, '#', sizeof(task) - 1);
    task[sizeof(task) - 1] = 0;
    for (int i; (i = atomic_fetch_add(&r->next, 1)) < r->jobs;) {
        snprintf(model, sizeof(model), "# job %u-%d\nclass ModelNew: pass\n", r->salt, i);
        memset(kernel, 'k', sizeof(kernel) - 1);
        kernel[sizeof(kernel) - 1] = 0;
        struct bus_job *j = bus_job_new();
        json_t *res = NULL;
        struct bus_client_opts o = {.wait_ms = 600000, .queue_wait_ms = 600000};
        int64_t t0 = ca_now_us();
        int rc = bus_job_set_task(j, task, strlen(task), &err);
        if (rc == 0)
            rc = bus_job_add_file(j, "model_new.py", model, strlen(model), &err);
        if (rc == 0)
            rc = bus_job_add_file(j, "kernels/k.cu", kernel, strlen(kernel), &err);
        if (rc == 0)
            rc = bus_job_set_opts(j, json_pack("{s:s}", "mode", "full"), &err);
        if (rc == 0)
            rc = bus_submit_wait(c, j, &o, &res, &err);
        r->e2e_ms[i] = (double)(ca_now_us() - t0) / 1000.0;
        json_t *q = json_object_get(res, "queue_ms");
        r->queue_ms[i] = json_is_number(q) ? json_number_value(q) : -1;
        if (rc || !json_is_true(json_object_get(res, "ok"))) {
            atomic_fetch_add(&r->failed, 1);
            fprintf(stderr, "job %d: %s\n", i, rc ? err.msg : "failed");
        }
        json_decref(res);
        bus_job_free(j);
    }
    bus_conn_free(c);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static json_t *dist(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    int p99 = (int)(0.99 * (n - 1) + 0.5);
    return json_pack("{s:f, s:f, s:f}", "p50", v[n / 2], "p99", v[p99], "max", v[n - 1]);
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    int jobs = 1000, clients = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--redis") == 0)
            url = argv[i + 1];
        else if (strcmp(argv[i], "--jobs") == 0)
            jobs = (int)strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--clients") == 0)
            clients = (int)strtol(argv[i + 1], NULL, 10);
    }
    struct run r = {.jobs = jobs, .salt = (unsigned)ca_now_us()};
    struct ca_err err = {0};
    if (!url || jobs < 1 || clients < 1 || clients > 1024 || bus_url_parse(url, &r.url, &err)) {
        fprintf(stderr, "usage: bus_load --redis URL [--jobs N] [--clients N] %s\n", err.msg);
        return 2;
    }
    r.queue_ms = xcalloc((size_t)jobs, sizeof(double));
    r.e2e_ms = xcalloc((size_t)jobs, sizeof(double));
    pthread_t *t = xcalloc((size_t)clients, sizeof(*t));
    int64_t t0 = ca_now_us();
    for (int i = 0; i < clients; i++)
        if (pthread_create(&t[i], NULL, client, &r))
            return 1;
    for (int i = 0; i < clients; i++)
        pthread_join(t[i], NULL);
    double wall = (double)(ca_now_us() - t0) / 1e6;
    json_t *out =
        json_pack("{s:i, s:i, s:i, s:f, s:f, s:o, s:o}", "jobs", jobs, "clients", clients, "failed",
                  atomic_load(&r.failed), "wall_s", wall, "jobs_per_s", jobs / wall, "queue_ms",
                  dist(r.queue_ms, jobs), "end_to_end_ms", dist(r.e2e_ms, jobs));
    char *s = json_dumps(out, JSON_INDENT(2) | JSON_REAL_PRECISION(4));
    printf("%s\n", s);
    free(s);
    json_decref(out);
    free(t);
    free(r.queue_ms);
    free(r.e2e_ms);
    return atomic_load(&r.failed) ? 1 : 0;
}
