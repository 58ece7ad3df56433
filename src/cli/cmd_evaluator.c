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
    struct cli_host h = {.eo = &o, .prewarm = -1};
    const char *socket_path = NULL;
    const struct cli_opt opts[] = {
        {"socket", 's', CLI_OPT_STRING, &socket_path, "PATH",
         "listen here (default $CUDA_AGENT_EVALUATOR, else evaluator.sock in the state dir)"},
        CLI_HOST_OPTS(&h),
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
    if ((rc = cli_host_setup("evaluator", &h, false)) != 0)
        return rc;

    struct ca_err err = {0};
    struct buf sock;
    buf_init(&sock, CA_LIMIT_PATH);
    if (!socket_path)
        socket_path = getenv("CUDA_AGENT_EVALUATOR");
    if (!socket_path || !*socket_path) {
        if (episode_state_dir(&sock, &err) || buf_addstr(&sock, "/evaluator.sock")) {
            buf_release(&sock);
            cli_host_release(&h);
            return cli_fail(&err);
        }
        socket_path = sock.data;
    }
    o.socket_path = socket_path;

    volatile sig_atomic_t *stop = cli_stop_on_signals();
    fprintf(stderr, "evaluator: starting %zu runner(s) on %s; socket %s\n", o.n_gpus,
            h.cpu ? "the CPU" : "GPU(s)", socket_path);
    rc = evald_serve(&o, stop, &err);
    cli_host_release(&h);
    buf_release(&sock);
    return rc ? cli_fail(&err) : CLI_OK;
}
