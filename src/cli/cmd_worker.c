/*
 * cmd_worker.c - `cuda-agent worker --redis URL`: a GPU (or CPU-mode) worker of the Redis
 * Streams job bus: the evaluator service's runners on this machine, fed from the bus instead
 * of a socket. Also --status (the bus at a glance) and --release (lift a quarantine).
 */
#include "cli/cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/bus.h"
#include "core/util.h"
#include "core/hash.h"
#include "eval/evald.h"
#include "eval/gpupool.h"
#include "task/task.h"
#include "core/banned.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The SHA-256 of every task of source (--tasks), sorted: what the worker may run as its
 * trusted reference. A source without tasks is an error: the worker would refuse every job. */
static int task_shas(const char *source, char ***out, size_t *n, struct ca_err *err)
{
    struct task_set set;
    task_set_init(&set);
    int rc = task_load(source, &set, err);
    if (rc == 0 && set.n == 0)
        rc = err_setf(err, CA_ENOTFOUND, "--tasks %s: no tasks there", source);
    if (rc == 0) {
        *out = xcalloc(set.n, sizeof(**out));
        for (size_t i = 0; i < set.n; i++) {
            (*out)[i] = xmalloc(SHA256_HEX_LEN + 1);
            sha256_hex(set.tasks[i].code, set.tasks[i].code_len, (*out)[i]);
        }
        *n = set.n;
        qsort(*out, *n, sizeof(**out), cmp_str);
    }
    task_set_release(&set);
    return rc;
}

int cmd_worker(int argc, char **argv)
{
    struct evald_opts eo = {0};
    struct bus_worker_opts wo = {0};
    struct cli_host h = {.eo = &eo, .prewarm = -1};
    const char *url = NULL, *release = NULL, *tasks = NULL;
    int64_t jobs = 0, reclaim_ms = 60000, deadline_s = 0;
    int64_t max_deliveries = 3, max_strikes = 3, max_queue = 0, forget_ms = 600000;
    bool status = false;
    const struct cli_opt opts[] = {
        {"redis", 0, CLI_OPT_STRING, &url, "URL",
         "the job bus: redis://[USER[:PASS]@]HOST[:PORT][/DB], rediss://... (TLS; "
         "$CUDA_AGENT_REDIS_CACERT, _CERT, _KEY) or unix:///PATH (default $CUDA_AGENT_REDIS; "
         "a password is better in $CUDA_AGENT_REDIS_PASSWORD)"},
        {"name", 0, CLI_OPT_STRING, &wo.name, "NAME",
         "this worker's name for strikes and quarantine (default HOST-PID)"},
        CLI_HOST_OPTS(&h),
        {"jobs", 0, CLI_OPT_INT, &jobs, "N",
         "jobs taken at once (default 2 per runner: one compiles while one runs)", 1, 256},
        {"reclaim-ms", 0, CLI_OPT_INT, &reclaim_ms, "MS",
         "take over a job whose worker has not renewed its lease for this long (default 60000)",
         100, 3600000},
        {"forget-ms", 0, CLI_OPT_INT, &forget_ms, "MS",
         "delete from the group the consumers of workers gone this long (no heartbeat, no "
         "reads) that own no job (default 600000)",
         1000, 86400000},
        {"job-deadline", 0, CLI_OPT_INT, &deadline_s, "SEC",
         "renew a job's lease at most this long (default: twice its timeout + 15 min)", 1, 86400},
        {"max-deliveries", 0, CLI_OPT_INT, &max_deliveries, "N",
         "a job delivered more often gets a failure result (default 3)", 1, 100},
        {"max-strikes", 0, CLI_OPT_INT, &max_strikes, "N",
         "failed or abandoned jobs in a row before a worker is quarantined (default 3)", 1, 1000},
        {"max-queue", 0, CLI_OPT_INT, &max_queue, "N",
         "publish the bound on queued + running jobs; clients beyond it wait or get \"busy\" "
         "(default: leave it; 1024 when unset)",
         1, 10000000},
        {"tasks", 0, CLI_OPT_STRING, &tasks, "SOURCE",
         "evaluate only jobs whose task is one of SOURCE's (a KernelBench-style tree, a .jsonl or "
         "a "
         "task file; matched by SHA-256): a job's task runs as trusted reference code (default: "
         "any task)"},
        {"status", 0, CLI_OPT_FLAG, &status, NULL,
         "print the bus's state (queue, pending jobs, workers, strikes, quarantine) as JSON"},
        {"release", 0, CLI_OPT_STRING, &release, "NAME", "lift worker NAME's quarantine"},
        {"fake-eval", 0, CLI_OPT_STRING, &wo.fake, "SPEC",
         "TEST DOUBLE for the bus's own tests and load benchmark: no evaluation at all, a sleep "
         "of about MS ms and a made-up report (SPEC: MS[:ok|garbage|hang])"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent worker --redis URL [options]",
        .summary = "Evaluate jobs from a Redis Streams job bus on this machine's GPUs.",
        .description =
            "Starts the evaluator's runners as `cuda-agent evaluator` does (one per GPU,\n"
            "pre-warmed candidates, the sandboxes) and takes jobs from the consumer group of\n"
            "the bus (`cuda-agent eval --redis URL` queues them). Each job's files arrive by\n"
            "SHA-256 and are checked before they are written to a private job directory; a\n"
            "job delivered twice gets one result. A job whose worker dies or hangs is taken\n"
            "over after --reclaim-ms; a worker that fails or abandons --max-strikes jobs in a\n"
            "row is quarantined and exits. docs/internals/bus.md has the design.\n\n"
            "Exit status: 0 stopped by SIGINT/SIGTERM (after the jobs in flight); 1 failed;\n"
            "2 usage; 69 Redis unreachable, no PyTorch or no usable GPU; 75 quarantined.",
        .opts = opts,
        .min_args = 0,
        .max_args = 0,
    };
    int rc;
    if (!cli_parse_cmd(&spec, argc, argv, NULL, NULL, &rc))
        return rc;
    if (!url)
        url = getenv("CUDA_AGENT_REDIS");
    if (!url || !*url)
        return cli_usage_error("worker", "--redis URL is required (or set CUDA_AGENT_REDIS)");
    struct ca_err err = {0};
    if (status) {
        json_t *st = NULL;
        if (bus_status(url, &st, &err))
            return cli_fail(&err);
        cli_print_json(st);
        json_decref(st);
        return CLI_OK;
    }
    if (release) {
        if (bus_release(url, release, &err))
            return cli_fail(&err);
        printf("released %s\n", release);
        return CLI_OK;
    }
    struct bus_url u;
    if (bus_url_parse(url, &u, &err))
        return cli_usage_error("worker", "%s", err.msg);
    if ((rc = cli_host_setup("worker", &h, wo.fake != NULL)) != 0)
        return rc;
    char **shas = NULL;
    size_t n_shas = 0;
    if (tasks && task_shas(tasks, &shas, &n_shas, &err)) {
        cli_host_release(&h);
        return cli_fail(&err);
    }
    wo.task_shas = (const char *const *)shas;
    wo.n_task_shas = n_shas;
    wo.url = url;
    wo.slots = jobs ? (int)jobs : wo.fake ? 1 : (int)eo.n_gpus * 2;
    wo.reclaim_ms = reclaim_ms;
    wo.forget_ms = forget_ms;
    wo.job_deadline_ms = deadline_s * 1000;
    wo.max_deliveries = (int)max_deliveries;
    wo.max_strikes = (int)max_strikes;
    wo.max_queue = max_queue;
    wo.base = &eo.base;

    volatile sig_atomic_t *stop = cli_stop_on_signals();
    struct evald_host *host = NULL;
    if (wo.fake) {
        fprintf(stderr,
                "worker: FAKE evaluation backend (--fake-eval %s): a test double that "
                "evaluates nothing\n",
                wo.fake);
    } else {
        fprintf(stderr, "worker: starting %zu runner(s) on %s\n", eo.n_gpus,
                h.cpu ? "the CPU" : "GPU(s)");
        rc = evald_host_new(&eo, &host, &err);
    }
    wo.host = host;
    if (rc == 0)
        rc = bus_worker_run(&wo, stop, &err);
    evald_host_free(host);
    cli_host_release(&h);
    for (size_t i = 0; i < n_shas; i++)
        free(shas[i]);
    free(shas);
    if (rc == CA_ECHILD) { /* quarantined */
        fprintf(stderr, "cuda-agent: error: %s\n", err.msg);
        return CLI_TEMPFAIL;
    }
    return rc ? cli_fail(&err) : CLI_OK;
}
