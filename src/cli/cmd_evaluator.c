/*
 * cmd_evaluator.c - `cuda-agent evaluator`: run the evaluator service in the
 * foreground (warm GPU runners, pre-warmed candidates, shared compile
 * cache) until SIGINT or SIGTERM.
 */
#include "cli/cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/limits.h"
#include "core/proc.h"
#include "core/util.h"
#include "episode/episode.h"
#include "eval/evald.h"
#include "eval/gpupool.h"
#include "core/banned.h"

int cmd_evaluator(int argc, char **argv)
{
    struct evald_opts o = {0};
    const char *gpus = NULL, *socket_path = NULL;
    int64_t runners = 0, prewarm = -1;
    const struct cli_opt opts[] = {
        {"socket", 's', CLI_OPT_STRING, &socket_path, "PATH",
         "listen here (default $CUDA_AGENT_EVALUATOR, else evaluator.sock in the state dir)"},
        {"device", 0, CLI_OPT_STRING, &o.base.device, "cuda|cpu", "where to run (default cuda)"},
        {"gpus", 0, CLI_OPT_STRING, &gpus, "LIST",
         "GPUs to serve, one runner each, e.g. 0,1 (default: CUDA_VISIBLE_DEVICES, else all)"},
        {"runners", 0, CLI_OPT_INT, &runners, "N", "with --device cpu: runners (default 1)", 1,
         GPUPOOL_MAX_RUNNERS},
        {"prewarm", 0, CLI_OPT_INT, &prewarm, "N",
         "candidate processes each runner keeps pre-warmed (default 8 on a GPU, 1 on the CPU)", 0,
         16},
        {"arch", 0, CLI_OPT_STRING, &o.base.arch, "SM", "target architecture (default: the GPU's)"},
        {"cache-dir", 0, CLI_OPT_STRING, &o.base.cache_dir, "DIR",
         "evaluator cache (default $CUDA_AGENT_CACHE_DIR or ~/.cache/cuda-agent)"},
        {"no-sandbox", 0, CLI_OPT_FLAG, &o.base.no_sandbox, NULL,
         "compilers and candidates WITHOUT the sandbox (unsafe; hosts without userns)"},
        {"no-candidate-sandbox", 0, CLI_OPT_FLAG, &o.base.no_candidate_sandbox, NULL,
         "candidates WITHOUT their sandbox (unsafe; to measure its cost)"},
        {"cpu-split", 0, CLI_OPT_STRING, &o.cpu_split, "SPEC",
         "CPU cores for the runners' timing vs compiling: auto, off, N (cores per runner) or "
         "TIMING/...:COMPILE lists, e.g. 15/14:0-13 (default $CUDA_AGENT_CPU_SPLIT, else auto)"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent evaluator [options]",
        .summary = "Run the evaluator service: warm GPU runners behind a unix socket.",
        .description =
            "Keeps one trusted runner per GPU (PyTorch imported, CUDA initialised) with\n"
            "candidate processes pre-warmed, discovers the toolchain and builds the\n"
            "precompiled header once, then serves `cuda-agent eval --server PATH` and the\n"
            "episodes' ./compile, ./verify and ./profile (set CUDA_AGENT_EVALUATOR=PATH for\n"
            "them) until SIGINT or SIGTERM. Logs go to stderr.\n\n"
            "Exit status: 0 stopped by a signal; 1 could not start; 2 usage; 69 no PyTorch\n"
            "or no usable GPU.",
        .opts = opts,
        .min_args = 0,
        .max_args = 0,
    };
    int rc;
    if (!cli_parse_cmd(&spec, argc, argv, NULL, NULL, &rc))
        return rc;
    if (o.base.device && strcmp(o.base.device, "cuda") && strcmp(o.base.device, "cpu"))
        return cli_usage_error("evaluator", "--device must be cuda or cpu");
    bool cpu = o.base.device && strcmp(o.base.device, "cpu") == 0;
    if (gpus && cpu)
        return cli_usage_error("evaluator", "--gpus needs --device cuda");
    if (runners && !cpu)
        return cli_usage_error("evaluator", "--runners is for --device cpu; use --gpus");

    struct ca_err err = {0};
    struct buf sock;
    buf_init(&sock, CA_LIMIT_PATH);
    if (!socket_path)
        socket_path = getenv("CUDA_AGENT_EVALUATOR");
    if (!socket_path || !*socket_path) {
        if (episode_state_dir(&sock, &err) || buf_addstr(&sock, "/evaluator.sock")) {
            buf_release(&sock);
            return cli_fail(&err);
        }
        socket_path = sock.data;
    }
    char **list = NULL;
    size_t n = 0;
    if (cpu)
        n = runners ? (size_t)runners : 1;
    else if (gpus && (cli_split_list(gpus, &list, &n) || n == 0))
        return cli_usage_error("evaluator", "--gpus wants a list such as 0,1 (at most %d)",
                               GPUPOOL_MAX_RUNNERS);
    else if (!gpus)
        cli_detect_gpus(&list, &n);
    o.socket_path = socket_path;
    o.gpus = (const char *const *)list;
    o.n_gpus = n ? n : 1;
    /* A warm evaluation takes well under a second on a GPU while a fresh candidate needs
     * several (Python, torch, CUDA context, profiler): enough must wait in line. */
    o.prewarm = prewarm >= 0 ? (int)prewarm : cpu ? 1 : 8;

    volatile sig_atomic_t *stop = cli_stop_on_signals();
    fprintf(stderr, "evaluator: starting %zu runner(s) on %s; socket %s\n", o.n_gpus,
            cpu ? "the CPU" : "GPU(s)", socket_path);
    rc = evald_serve(&o, stop, &err);
    for (size_t i = 0; i < n && list; i++)
        free(list[i]);
    free(list);
    buf_release(&sock);
    return rc ? cli_fail(&err) : CLI_OK;
}
