/*
 * cmd_serve.c - `cuda-agent serve`: the RL environment server (src/server)
 * over stdio or HTTP, until end of input (stdio) or SIGINT/SIGTERM (both;
 * HTTP drains the requests in flight first).
 */
#include "cli/cli.h"

#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/log.h"
#include "sandbox/sandbox.h"
#include "server/server.h"
#include "core/banned.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

int cmd_serve(int argc, char **argv)
{
    bool use_stdio = false, insecure = false, log_json = false, allow_code = false;
    const char *http = NULL, *root = NULL, *tasks = NULL, *state_dir = NULL, *token_file = NULL;
    const char *device = NULL;
    int64_t max_episodes = 0, ttl_s = 0, wall_s = 0, max_body = 0, max_output = 0, drain_s = 600;
    int64_t keep_finished = -1, finished_ttl_s = -1; /* -1: not given */
    struct cli_bus bus = CLI_BUS_INIT;
    const struct cli_opt opts[] = {
        {"stdio", 0, CLI_OPT_FLAG, &use_stdio, NULL, "speak MCP on stdin/stdout"},
        {"http", 0, CLI_OPT_STRING, &http, "ADDR:PORT",
         "listen for HTTP: MCP at /mcp, OpenEnv at /reset /step /state /schema /ws, /metrics "
         "(port 0: any free port)"},
        {"tasks", 't', CLI_OPT_STRING, &tasks, "SOURCE",
         "the tasks offered (a .py, a KernelBench tree or a JSONL dataset)"},
        {"root", 0, CLI_OPT_STRING, &root, "DIR",
         "where episodes' workspaces and records go (default $CUDA_AGENT_STATE_DIR/serve or "
         "/tmp/cuda-agent-serve-UID)"},
        {"state-dir", 0, CLI_OPT_STRING, &state_dir, "DIR", "episodes' supervisor sockets"},
        {"device", 0, CLI_OPT_STRING, &device, "cuda|cpu",
         "where evaluations run when no evaluator service is named ($CUDA_AGENT_EVALUATOR)"},
        CLI_BUS_OPTS(&bus),
        {"max-episodes", 0, CLI_OPT_INT, &max_episodes, "N", "live episodes at most (256)", 1,
         100000},
        {"episode-ttl", 0, CLI_OPT_INT, &ttl_s, "SEC",
         "an episode ends after SEC without calls (7200)", 1, 7 * 86400},
        {"episode-wall", 0, CLI_OPT_INT, &wall_s, "SEC",
         "an episode's tools stop SEC after its start (default: no limit)", 1, 30 * 86400},
        {"keep-finished", 0, CLI_OPT_INT, &keep_finished, "N",
         "ended episodes (finished or idle-expired) that keep their workspace and snapshots, "
         "newest first (64; 0: none); records and results always stay",
         0, 1000000},
        {"finished-ttl", 0, CLI_OPT_INT, &finished_ttl_s, "SEC",
         "an ended episode's workspace and snapshots go SEC after its end (86400; 0: no age "
         "limit)",
         0, 10 * 365 * 86400},
        {"max-body", 0, CLI_OPT_INT, &max_body, "BYTES", "largest request (8 MiB)", 1024, 64 << 20},
        {"max-output", 0, CLI_OPT_INT, &max_output, "BYTES",
         "largest text of one tool result (64 KiB)", 1024, 64 << 10},
        {"token-file", 0, CLI_OPT_STRING, &token_file, "FILE",
         "bearer token HTTP clients must send (also $CUDA_AGENT_SERVE_TOKEN); required off "
         "loopback"},
        {"drain-timeout", 0, CLI_OPT_INT, &drain_s, "SEC",
         "on SIGTERM, wait this long for requests in flight (600)", 0, 86400},
        {"allow-task-code", 0, CLI_OPT_FLAG, &allow_code, NULL,
         "let HTTP clients start episodes from inline task code (it runs in the evaluator's "
         "trusted reference process; stdio always may)"},
        {"log-json", 0, CLI_OPT_FLAG, &log_json, NULL,
         "JSON-lines events (requests, tool calls, episodes) on stderr"},
        {"insecure-no-sandbox", 0, CLI_OPT_FLAG, &insecure, NULL,
         "run episodes WITHOUT a sandbox (unsafe; hosts without user namespaces)"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent serve (--stdio | --http ADDR:PORT) [--tasks SOURCE] [options]",
        .summary = "Serve episodes to RL trainers and agent harnesses over MCP (stdio or "
                   "Streamable HTTP)\nand the OpenEnv HTTP/WebSocket contract.",
        .description =
            "MCP tools: list_tasks, start_episode (-> episode_id, system prompt, task message),\n"
            "the agent tools (Bash, Read, Write, Edit, ...) with an episode_id, evaluate\n"
            "(compile / verify / profile) and finish (-> reward, best of trajectory). Results\n"
            "carry structuredContent with the raw numbers. Episodes outlive their client until\n"
            "their idle TTL; a restarted server re-attaches to running ones.\n\n"
            "Evaluations go to the workers of the job bus with --redis; else to the evaluator\n"
            "service at $CUDA_AGENT_EVALUATOR when set, else to the bus at $CUDA_AGENT_REDIS\n"
            "when set; else they run in the episode on --device (cuda by default).\n\n"
            "Exit status: 0 stopped (end of input, SIGINT or SIGTERM); 1 could not start;\n"
            "2 usage (also: a non-loopback --http without a token); 69 Redis unreachable.",
        .opts = opts,
        .max_args = 0,
    };
    int rc;
    if (!cli_parse_cmd(&spec, argc, argv, NULL, NULL, &rc))
        return rc;
    if (use_stdio == (http != NULL))
        return cli_usage_error("serve", "give one of --stdio and --http ADDR:PORT");
    if (device && strcmp(device, "cuda") && strcmp(device, "cpu"))
        return cli_usage_error("serve", "--device must be cuda or cpu");
    const char *evaluator = NULL;
    if ((rc = cli_bus_setup("serve", &bus, &evaluator, NULL)) || (rc = cli_bus_check(&bus)))
        return rc;
    struct ca_err err = {0};
    struct buf token, rootb;
    buf_init(&token, 4096);
    buf_init(&rootb, 4096);
    const char *env_tok = getenv("CUDA_AGENT_SERVE_TOKEN");
    if (token_file) {
        if (fs_read_file(token_file, 4096, &token, &err)) {
            rc = cli_fail(&err);
            goto out;
        }
        buf_rtrim(&token);
    } else if (env_tok && *env_tok && buf_addstr(&token, env_tok)) {
        rc = cli_usage_error("serve", "$CUDA_AGENT_SERVE_TOKEN is over 4 KiB");
        goto out;
    }
    int lo = http ? server_addr_loopback(http, &err) : 1;
    if (lo < 0) {
        rc = cli_usage_error("serve", "--http: %s", err.msg);
        goto out;
    }
    if (!lo && token.len == 0) {
        rc = cli_usage_error("serve",
                             "%s is not a loopback address: a bearer token is required "
                             "(--token-file FILE or $CUDA_AGENT_SERVE_TOKEN)",
                             http);
        goto out;
    }
    if (!root) {
        const char *sd = getenv("CUDA_AGENT_STATE_DIR");
        if (sd && *sd ? buf_addf(&rootb, "%s/serve", sd)
                      : buf_addf(&rootb, "/tmp/cuda-agent-serve-%u", (unsigned)geteuid())) {
            rc = cli_usage_error("serve", "state path too long");
            goto out;
        }
        root = rootb.data;
    }
    if (insecure)
        fprintf(stderr, "cuda-agent: WARNING: --insecure-no-sandbox: episodes' commands run "
                        "WITHOUT isolation, with your user's full access to this machine\n");
    if (log_json)
        log_set_event_fd(2);
    struct server_opts so = {
        .root = root,
        .state_dir = state_dir,
        .tasks = tasks,
        .evaluator = evaluator,
        .eval_device = device ? device : getenv("CUDA_AGENT_EVAL_DEVICE"),
        .redis = bus.url,
        .redis_args = bus.child_args,
        .eval = bus.url ? cli_bus_eval : NULL,
        .eval_ctx = &bus,
        .sandbox_flags = insecure ? SANDBOX_INSECURE : 0,
        .max_episodes = max_episodes,
        .ttl_ms = ttl_s * 1000,
        .wall_ms = wall_s * 1000,
        .keep_finished = keep_finished < 0    ? 0
                         : keep_finished == 0 ? -1
                                              : keep_finished,
        .finished_ttl_s = finished_ttl_s < 0    ? 0
                          : finished_ttl_s == 0 ? -1
                                                : finished_ttl_s,
        .max_body = (size_t)max_body,
        .max_output = (size_t)max_output,
        .token = token.len ? token.data : NULL,
        .allow_code = allow_code || use_stdio,
    };
    /* One malloc arena per connection thread would cost ~100 KiB per idle keep-alive
     * client; a few arenas serve two cores' worth of threads as well. */
    (void)mallopt(M_ARENA_MAX, 4); /* 0 only for an unknown parameter */
    struct server *s = NULL;
    if (server_new(&so, &s, &err)) {
        rc = cli_fail(&err);
        goto out;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    /* sigaction fails only for an invalid signal or handler: neither here. */
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)signal(SIGPIPE, SIG_IGN); /* SIG_ERR only for an invalid signal */
    rc = use_stdio ? server_run_stdio(s, 0, 1, &stop_flag, &err)
                   : server_run_http(s, http, &stop_flag, drain_s * 1000, &err);
    if (server_inflight(s) == 0)
        server_free(s); /* else threads still use it: the process ends with them */
    rc = rc ? cli_fail(&err) : CLI_OK;
out:
    buf_release(&token);
    buf_release(&rootb);
    return rc;
}
