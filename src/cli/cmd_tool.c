/*
 * cmd_tool.c - `cuda-agent tool`: run one tool call in an episode and print
 * the result as JSON. The first call for an episode starts its supervisor
 * (sandbox + persistent shell); later calls reuse it; --close ends it.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "episode/episode.h"
#include "tools/tools.h"
#include "core/banned.h"

int cmd_tool(int argc, char **argv)
{
    const char *workspace = NULL, *episode = NULL, *state_dir = NULL;
    bool do_close = false, ping = false, schemas = false, insecure = false, evals = false;
    int64_t timeout_ms = 0, idle_s = 0;
    struct cli_bus bus = CLI_BUS_INIT;
    const struct cli_opt opts[] = {
        {"workspace", 'w', CLI_OPT_STRING, &workspace, "DIR",
         "the episode's workspace (needed to start the episode)"},
        {"episode", 'e', CLI_OPT_STRING, &episode, "ID", "episode id ([A-Za-z0-9_.-], up to 64)"},
        {"close", 0, CLI_OPT_FLAG, &do_close, NULL, "end the episode: stop its sandbox and shells"},
        {"ping", 0, CLI_OPT_FLAG, &ping, NULL, "check that the episode's supervisor answers"},
        {"evals", 0, CLI_OPT_FLAG, &evals, NULL,
         "print the evaluations the workspace's ./compile, ./verify, ./profile asked for"},
        {"schemas", 0, CLI_OPT_FLAG, &schemas, NULL,
         "print every tool's JSON schema (OpenAI function format) and exit"},
        {"timeout", 0, CLI_OPT_INT, &timeout_ms, "MS", "give up waiting for the reply after MS", 1,
         3600000},
        {"idle-timeout", 0, CLI_OPT_INT, &idle_s, "SEC",
         "a new episode ends after SEC without calls (default 7200)", 1, 7 * 86400},
        {"state-dir", 0, CLI_OPT_STRING, &state_dir, "DIR",
         "where episodes keep their sockets (default $CUDA_AGENT_STATE_DIR, "
         "$XDG_RUNTIME_DIR/cuda-agent or /tmp/cuda-agent-UID)"},
        {"insecure-no-sandbox", 0, CLI_OPT_FLAG, &insecure, NULL,
         "run the episode WITHOUT a sandbox (unsafe; for hosts without user namespaces)"},
        CLI_BUS_OPTS(&bus),
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent tool [--workspace DIR] --episode ID NAME ARGS_JSON",
        .summary =
            "Run one tool call (Bash, Read, Write, Edit, MultiEdit, Glob, Grep, BashOutput,\n"
            "KillBash, NotebookEdit, TodoWrite) in an episode and print the result as JSON.",
        .description =
            "ARGS_JSON is the tool's arguments as a JSON object ('-' reads it from stdin).\n"
            "The first call for an episode starts a supervisor holding the episode's sandbox\n"
            "and persistent shell; later calls reuse them (the shell keeps its working\n"
            "directory and variables). End it with: cuda-agent tool --episode ID --close\n\n"
            "The workspace's ./compile, ./verify and ./profile go to the workers of the job bus\n"
            "with --redis; else to the evaluator service at $CUDA_AGENT_EVALUATOR when set,\n"
            "else to the bus at $CUDA_AGENT_REDIS when set; else they run in the supervisor on\n"
            "$CUDA_AGENT_EVAL_DEVICE (default cuda). The call that starts the episode decides,\n"
            "for its whole life.\n\n"
            "Exit status: 0 the tool ran; 1 the tool reported an error (see \"text\");\n"
            "2 usage; 4 no such episode; 69 no sandbox is possible on this host, or the job\n"
            "bus's Redis does not answer when an episode on it is to start.",
        .opts = opts,
        .min_args = 0,
        .max_args = 2,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    struct ca_err err = {0};
    json_t *req = NULL, *reply = NULL;
    struct buf in;
    buf_init(&in, CA_LIMIT_REQUEST_BYTES);
    if (schemas) {
        json_t *s = tool_schemas();
        cli_print_json(s);
        json_decref(s);
        rc = CLI_OK;
        goto out;
    }
    if (!episode) {
        rc = cli_usage_error("tool", "--episode is required");
        goto out;
    }
    if (do_close || ping || evals) {
        if (nargs || (do_close + ping + evals) > 1) {
            rc = cli_usage_error("tool", "--close, --ping and --evals go alone, without a tool "
                                         "call");
            goto out;
        }
        req = json_pack("{s:s}", "op", do_close ? "close" : ping ? "ping" : "evals");
    } else {
        if (nargs != 2) {
            rc = cli_usage_error("tool", "expected a tool NAME and its ARGS_JSON");
            goto out;
        }
        const char *text = args[1];
        size_t len = strlen(text);
        if (strcmp(text, "-") == 0) {
            rc = fs_read_fd(0, CA_LIMIT_REQUEST_BYTES, &in, "standard input", &err);
            if (rc) {
                rc = cli_fail(&err);
                goto out;
            }
            text = in.data;
            len = in.len;
        }
        json_t *targs;
        rc = jsonx_parse(sv_from(text, len), CA_LIMIT_REQUEST_BYTES, "ARGS_JSON", &targs, &err);
        if (rc) {
            rc = cli_usage_error("tool", "%s", err.msg);
            goto out;
        }
        req = json_pack("{s:s, s:o}", "tool", args[0], "args", targs);
    }
    const char *evaluator = NULL;
    if ((rc = cli_bus_setup("tool", &bus, &evaluator, NULL)))
        goto out;
    if (insecure)
        fprintf(stderr, "cuda-agent: WARNING: --insecure-no-sandbox: the episode's commands run "
                        "WITHOUT isolation, with your user's full access to this machine\n");
    struct episode_opts eo = {
        .state_dir = state_dir,
        .id = episode,
        .workspace = do_close || ping || evals ? NULL : workspace,
        .sandbox_flags = insecure ? SANDBOX_INSECURE : 0,
        .idle_timeout_ms = idle_s * 1000,
        /* The episode's ./compile, ./verify and ./profile: through this service, else on the
         * bus (the supervisor is forked from this process: bus stays valid there), else in
         * process on this device (cuda by default). */
        .evaluator = evaluator,
        .eval_device = getenv("CUDA_AGENT_EVAL_DEVICE"),
        .eval = bus.url ? cli_bus_eval : NULL,
        .eval_ctx = &bus,
    };
    if (do_close && !episode_running(&eo)) {
        printf("{\"ok\": true, \"note\": \"episode was not running\"}\n");
        rc = CLI_OK;
        goto out;
    }
    /* An episode about to start on the bus: Redis must answer now (exit 69 here, before the
     * model sees anything), as `run` and `serve` check it at their start. A Redis lost later
     * still reaches the episode's commands as their evaluator's failure. */
    if (bus.url && eo.workspace && !episode_running(&eo) && (rc = cli_bus_check(&bus)))
        goto out;
    rc = episode_request(&eo, req, timeout_ms, &reply, &err);
    if (rc) {
        rc = cli_fail(&err);
        goto out;
    }
    cli_print_json(reply);
    rc = json_is_true(json_object_get(reply, "is_error")) ? CLI_FAILED : CLI_OK;
out:
    json_decref(req);
    json_decref(reply);
    buf_release(&in);
    free(args);
    return rc;
}
