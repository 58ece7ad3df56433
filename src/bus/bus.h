/*
 * bus.h - the job bus: evaluation jobs over Redis Streams, for evaluating on
 * many machines (docs/internals/bus.md). Clients (`cuda-agent eval --redis`)
 * turn an evaluation into a job; workers (`cuda-agent worker --redis`) take
 * jobs from one consumer group, evaluate each with the evaluator of their own
 * machine (evald's host: policy, sandboxed compilers, candidate sandbox) and
 * record one result per job.
 *
 * What travels: a job is a canonical JSON document naming every input by its
 * SHA-256 (the snapshot of the workspace's writable files, the task file, a
 * KernelBench file); the inputs travel beside it as content-addressed blobs.
 * The job's own SHA-256 is its id and its result's key, so a job delivered
 * twice (a reclaim, a duplicate submission) yields one result. A worker trusts
 * nothing in a job but its hashes: it recomputes every digest, checks paths
 * and sizes against the same rules as a local snapshot, and writes the files
 * into a private job directory before evaluating.
 *
 * Ownership: a struct bus_job is a heap object (_new/_free) owned by its
 * creator. A struct bus_conn is one Redis connection; it is not thread-safe
 * (one per thread). bus_worker_run starts its own threads (one per job slot,
 * one for leases, heartbeats and forgetting dead workers' consumers), each
 * with its own connection; every
 * callback-free function here is safe to call from any thread with its own
 * connection.
 */
#ifndef CA_BUS_H
#define CA_BUS_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/hash.h"
#include "eval/eval.h"

/* Redis keys (docs/internals/bus.md); a deployment is one Redis database. */
#define BUS_STREAM "ca:jobs"
#define BUS_GROUP "ca-workers"
#define BUS_KEY_BLOB "ca:blob:"     /* + sha256: an artifact's bytes */
#define BUS_KEY_RESULT "ca:result:" /* + job sha256: the result JSON */
#define BUS_KEY_DONE "ca:done:"     /* + job sha256: a wake-up list for waiting clients */
#define BUS_KEY_WORKERS "ca:workers"
#define BUS_KEY_STRIKES "ca:strikes"
#define BUS_KEY_QUARANTINE "ca:quarantine"
#define BUS_KEY_CONFIG "ca:config"

#define BUS_JOB_VERSION 1
/* Files of one job (a snapshot holds at most 64 evaluated files). */
#define BUS_MAX_FILES 64
/* Blobs and results live this long (a client resubmits after that). */
#define BUS_TTL_S (24 * 3600)
/* Default bound on jobs queued or running (XLEN of the stream): beyond it, "busy". */
#define BUS_DEFAULT_MAX_QUEUE 1024

/* ---- where Redis is ---- */

#define BUS_URL_SHOWN 512 /* bytes of bus_url.shown */

/*
 * redis://[USER[:PASSWORD]@]HOST[:PORT][/DB], rediss://... (the same over TLS: bus_tls.c,
 * with $CUDA_AGENT_REDIS_CACERT, $CUDA_AGENT_REDIS_CERT and $CUDA_AGENT_REDIS_KEY) or
 * unix:///PATH[?db=N]. The password may instead come from $CUDA_AGENT_REDIS_PASSWORD (argv is
 * visible to every local user).
 */
struct bus_url {
    char host[256];
    int port;
    char unix_path[108];
    char user[128];
    char pass[256];
    int db;
    bool tls;                  /* rediss:// */
    char shown[BUS_URL_SHOWN]; /* for messages: the URL with the password as "***" */
};

int bus_url_parse(const char *url, struct bus_url *u, struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- one connection ---- */

struct bus_conn;

/*
 * Connect (and AUTH, SELECT). CA_EUNAVAIL with a message naming the URL and
 * what to do when Redis cannot be reached or refuses the credentials. A
 * connection lost later is re-established by the next command (one attempt
 * per command: callers that must outlive a Redis restart retry).
 */
int bus_conn_open(const struct bus_url *u, struct bus_conn **out,
                  struct ca_err *err) WARN_UNUSED_RESULT;
/* bus_url_parse, then bus_conn_open; `shown` (may be NULL, else BUS_URL_SHOWN bytes) gets the URL
 * as messages show it, its password as "***". */
int bus_conn_open_url(const char *url, struct bus_conn **out, char *shown,
                      struct ca_err *err) WARN_UNUSED_RESULT;
void bus_conn_free(struct bus_conn *c);

/* ---- jobs ---- */

struct bus_job;

struct bus_job *bus_job_new(void);
void bus_job_free(struct bus_job *job);
/* A workspace file (a writable path: model_new.py, kernels/...); copied. */
int bus_job_add_file(struct bus_job *job, const char *path, const void *data, size_t n,
                     struct ca_err *err) WARN_UNUSED_RESULT;
/* The task file (KernelBench format); copied. */
int bus_job_set_task(struct bus_job *job, const void *data, size_t n,
                     struct ca_err *err) WARN_UNUSED_RESULT;
/* KernelBench mode: the single candidate file instead of workspace files; copied. */
int bus_job_set_kernelbench(struct bus_job *job, const void *data, size_t n,
                            struct ca_err *err) WARN_UNUSED_RESULT;
/* Evaluation options: the evaluator service's request fields (mode, timing, precision, rules,
 * seeds, atol, rtol, timeout_ms, budget_ms, compile_baseline); opts is taken. */
int bus_job_set_opts(struct bus_job *job, json_t *opts, struct ca_err *err) WARN_UNUSED_RESULT;
/* The job of a local evaluation: the workspace's snapshot (the evaluator's own rules) or the
 * KernelBench file, the task as the evaluator would take it, and the request options. A
 * workspace's o->keep_dir receives the snapshot's files and the task here, on the client (a
 * worker cannot write the caller's folders); with a KernelBench file it is refused. */
int bus_job_from_eval(const struct eval_opts *o, struct bus_job **out,
                      struct ca_err *err) WARN_UNUSED_RESULT;
/* The canonical job document; its SHA-256 (the job's id) into id. */
int bus_job_encode(const struct bus_job *job, struct buf *out, char id[SHA256_HEX_LEN + 1],
                   struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- client ---- */

struct bus_client_opts {
    int64_t wait_ms;       /* for the result, from submission; 0: from the job's timeout */
    int64_t queue_wait_ms; /* while every worker is busy (queue full); 0: fail at once */
};

/*
 * Upload the job's blobs, queue it (unless its result exists), wait for its result.
 * *result: {"ok": true, "report", "worker", ...} or {"ok": false, "error", "code", ...} as the
 * worker recorded it. CA_EUNAVAIL: Redis unreachable; CA_ETIMEOUT: the queue stayed full past
 * queue_wait_ms ("busy") or no result came within wait_ms.
 */
int bus_submit_wait(struct bus_conn *c, const struct bus_job *job, const struct bus_client_opts *o,
                    json_t **result, struct ca_err *err) WARN_UNUSED_RESULT;

/* `cuda-agent eval --redis`: the evaluation o over the bus; *report as from eval_run. */
int bus_eval(const char *url, const struct eval_opts *o, const struct bus_client_opts *bo,
             json_t **report, struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- worker ---- */

struct evald_host;

struct bus_worker_opts {
    const char *url;
    const char *name;        /* this worker's name (strikes, quarantine); NULL: host-pid */
    int slots;               /* jobs at once (consumers of the group), 1..256 */
    int64_t reclaim_ms;      /* an entry whose lease is this old is taken over */
    int64_t job_deadline_ms; /* a job's lease is renewed this long at most; 0: from its timeout */
    int max_deliveries;      /* a job delivered more often gets a failure result */
    int max_strikes;         /* failed or abandoned jobs in a row before quarantine */
    int64_t max_queue;       /* published as the queue bound (ca:config); 0: leave it */
    int64_t forget_ms;       /* consumers silent this long, of a worker whose heartbeat is as
                                old, that own no entry, are deleted from the group (>= 1000) */
    struct evald_host *host; /* the evaluator (NULL only with fake) */
    const struct eval_opts *base; /* its base options (cache_dir for job directories) */
    /* The SHA-256 (hex) of every task this worker evaluates (--tasks), sorted by strcmp; a job
     * whose task is another fails without running. NULL: any task. A job's task file runs as
     * the trusted reference (docs/security.md), so this is what limits the code a writer to
     * Redis can run on the worker's trusted side. */
    const char *const *task_shas;
    size_t n_task_shas;
    /* TEST DOUBLE, never a default: "MS[:ok|garbage|hang]" replaces the evaluation by a
     * sleep of about MS ms and a made-up report (bus_fake.c). */
    const char *fake;
};

/*
 * Serve until *stop (signal handler) or quarantine. Returns 0 when stopped,
 * CA_EUNAVAIL when Redis cannot be reached at start, CA_ECHILD (message says
 * why) when this worker was quarantined.
 */
int bus_worker_run(const struct bus_worker_opts *o, volatile sig_atomic_t *stop,
                   struct ca_err *err) WARN_UNUSED_RESULT;

/* {"queued", "pending", "consumers", "workers", "strikes", "quarantine", "max_queue"}. */
int bus_status(const char *url, json_t **out, struct ca_err *err) WARN_UNUSED_RESULT;
/* Lift a worker's quarantine and strikes. */
int bus_release(const char *url, const char *name, struct ca_err *err) WARN_UNUSED_RESULT;

#endif
