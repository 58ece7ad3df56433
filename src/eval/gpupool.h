/*
 * gpupool.h - the evaluator's GPU pool: one long-lived trusted runner
 * (harness/worker.py) per GPU, each serving one job at a time, with
 * candidate processes pre-warmed by the runner.
 *
 * A job is evaluate.py's argument list; the runner writes the result JSON to
 * the job's --out and reports evaluate.py's exit status. gpupool_run blocks
 * until a runner is free, then until its job ends. A runner that dies, hangs
 * past the job's deadline or breaks its protocol is killed; that job fails
 * with CA_ECHILD and the runner is started again for the next job, so one
 * bad job never takes the pool down. (Candidates' own crashes, hangs and
 * CUDA errors are contained inside the runner already: they are results.)
 *
 * Threads: gpupool_run may be called from any number of threads at once;
 * gpupool_new/_free from one. Runners' stderr goes to opts.log_fd.
 */
#ifndef CA_GPUPOOL_H
#define CA_GPUPOOL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define GPUPOOL_MAX_RUNNERS 64
#define GPUPOOL_START_TIMEOUT_MS ((int64_t)180000)

struct gpupool_opts {
    const char *python;      /* the runners' and candidates' interpreter */
    const char *harness_dir; /* holds worker.py, evaluate.py, candidate.py */
    const char *device;      /* "cuda" or "cpu" */
    const char *const *gpus; /* per runner, its CUDA_VISIBLE_DEVICES; NULL: inherited */
    size_t n;                /* runners: 1..GPUPOOL_MAX_RUNNERS */
    int prewarm;             /* candidates each runner keeps warm (worker.py --prewarm) */
    int log_fd;              /* runners' stderr; < 0: inherited */
    const char *sandbox_bin; /* cuda-agent, whose candidate-sandbox isolates candidates;
                                NULL: candidates run WITHOUT isolation (--no-sandbox) */
    /* Issue 21: per runner, the CPU list its timing runs on (CUDA_AGENT_TIMING_CPUS: the
     * runner pins itself there), and the list where it pre-warms candidates
     * (CUDA_AGENT_AUX_CPUS); NULL: not set. A runner reports its timed sections as lines
     * {"timing": true|false} before its reply; they go to cpuplan_timing_mark. */
    const char *const *timing_cpus;
    const char *aux_cpus;
};

struct gpupool;

/* Starts every runner and waits until each is ready (or failed to start: an error). */
int gpupool_new(const struct gpupool_opts *opts, struct gpupool **out,
                struct ca_err *err) WARN_UNUSED_RESULT;
void gpupool_free(struct gpupool *pool);

/*
 * Run one evaluate.py job (argv: its arguments, NULL-terminated, without the
 * interpreter or script) on the next free runner; *status gets evaluate.py's
 * exit status. timeout_ms bounds the job once a runner has it.
 */
int gpupool_run(struct gpupool *pool, const char *const *argv, int64_t timeout_ms, int *status,
                struct ca_err *err) WARN_UNUSED_RESULT;

/* {"runners": [{"gpu", "pid", "jobs", "restarts", "busy"}...], "device"}: a new object. */
json_t *gpupool_describe(struct gpupool *pool);

#endif
