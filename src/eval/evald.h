/*
 * evald.h - the evaluator service: one long-lived process per machine that
 * owns the GPU pool (warm trusted runners, pre-warmed candidates), the
 * toolchain discovery and the compile cache, and serves evaluation requests
 * over a unix socket (`cuda-agent evaluator`). `cuda-agent eval --server`
 * and the episode supervisors' evaluator sockets are its clients.
 *
 * Protocol (core/msg.h framing), one request per connection:
 *   {"op": "eval", "workspace": ABS (or "kernelbench_file": ABS with "task"),
 *    "task": PATH?, "mode": "full"|"verify"|"compile", "timing"?, "precision"?, "seeds"?, "atol"?,
 * "rtol"?, "timeout_ms"?, "budget_ms"?, "keep_dir"?}
 *     -> {"ok": true, "report": {...}} | {"ok": false, "error": MSG, "code": N}
 *   {"op": "status"} -> {"ok": true, "pool": {...}, "served": N, "active": N}
 * The device, architecture, cache and sandboxing are the service's own.
 * The socket is created 0600: clients are trusted local processes (the
 * agent's sandbox reaches the evaluator only through its episode
 * supervisor, which sends its own workspace path, never one the agent chose).
 *
 * Threads: one per connection (at most EVALD_MAX_ACTIVE at once; more are
 * refused with a "busy" error), compile jobs run in parallel, GPU jobs
 * queue for the pool's runners.
 */
#ifndef CA_EVALD_H
#define CA_EVALD_H

#include <jansson.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "eval/eval.h"

#define EVALD_MAX_ACTIVE 256

struct evald_opts {
    const char *socket_path;
    struct eval_opts base;   /* device, arch, cache_dir, no_sandbox (+ defaults) */
    const char *const *gpus; /* one runner per entry (CUDA_VISIBLE_DEVICES); NULL: */
    size_t n_gpus;           /*   n_gpus runners with the inherited environment */
    int prewarm;             /* pre-warmed candidates per runner */
    const char *cpu_split;   /* cpuplan_from_host's spec; NULL: $CUDA_AGENT_CPU_SPLIT or auto */
};

/* Start the pool, listen, serve until *stop becomes non-zero (signal handler). */
int evald_serve(const struct evald_opts *opts, volatile sig_atomic_t *stop,
                struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * The service without its socket: the CPU plan applied, the toolchain warmed, the GPU pool
 * started (what evald_serve runs on). The job bus's workers (bus/) evaluate on one.
 * evald_host_eval may be called from many threads at once, as the service's connections do.
 */
struct evald_host;
int evald_host_new(const struct evald_opts *opts, struct evald_host **out,
                   struct ca_err *err) WARN_UNUSED_RESULT;
void evald_host_free(struct evald_host *host);
/* Evaluate one {"op": "eval", ...} request as the socket would; *report as from eval_run. */
int evald_host_eval(struct evald_host *host, const json_t *req, json_t **report,
                    struct ca_err *err) WARN_UNUSED_RESULT;
/* {"pool": {...}, "cpus": {...}}: a new object. */
json_t *evald_host_describe(struct evald_host *host);

/* The request for opts (workspace made absolute); a new object. */
json_t *evald_request_for(const struct eval_opts *opts);

/* Client: evaluate through the service at socket_path; *report as from eval_run. */
int evald_eval(const char *socket_path, const struct eval_opts *opts, json_t **report,
               struct ca_err *err) WARN_UNUSED_RESULT;

#endif
