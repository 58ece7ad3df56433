/*
 * cmd_run.c - `cuda-agent run`: the agent loop on one task against an
 * OpenAI-compatible model server, with a live status line when stderr is a
 * terminal, a short summary otherwise, and --json for scripts.
 *
 * SIGINT/SIGTERM ask the loop to stop after the call in flight (the
 * trajectory stays resumable); a second SIGINT kills the process the usual
 * way (SA_RESETHAND).
 */
#include "cli/cli.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/limits.h"
#include "sandbox/sandbox.h"
#include "core/banned.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

struct display {
    bool tty;
    int64_t t0;
    char tool[40];
    char last_eval[96];
    char scoring[48];
};

static void show(struct display *d, const struct agent_event *ev)
{
    switch (ev->kind) {
    case AGENT_EV_TURN:
        snprintf(d->tool, sizeof(d->tool), "waiting for the model");
        break;
    case AGENT_EV_TOOL:
        snprintf(d->tool, sizeof(d->tool), "%s", ev->tool);
        break;
    case AGENT_EV_EVAL: {
        const char *cmd = json_string_value(json_object_get(ev->eval, "command"));
        json_int_t reward = json_integer_value(json_object_get(ev->eval, "reward"));
        bool ok = json_is_true(json_object_get(ev->eval, "ok"));
        snprintf(d->last_eval, sizeof(d->last_eval), "%s %s, reward %lld",
                 cmd           ? cmd
                 : ev->message ? ev->message
                               : "eval",
                 ok ? "ok" : "failed", (long long)reward);
        break;
    }
    case AGENT_EV_SCORE:
        snprintf(d->scoring, sizeof(d->scoring), "scoring the %s", ev->message);
        break;
    }
    if (!d->tty)
        return;
    double secs = (double)(ca_now_us() - d->t0) / 1e6;
    fprintf(stderr, "\r\033[K[turn %lld/%lld] %s | ~%lldk tokens | last eval: %s | %.0f s",
            (long long)ev->turn + (ev->kind == AGENT_EV_TURN ? 1 : 0), (long long)ev->max_turns,
            d->scoring[0] ? d->scoring : d->tool, (long long)(ev->tokens / 1000),
            d->last_eval[0] ? d->last_eval : "none", secs);
    fflush(stderr);
}

static void on_event(void *data, const struct agent_event *ev)
{
    show(data, ev);
}

static bool parse_real(const char *s, double lo, double hi, double *out)
{
    if (!s)
        return true;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static void print_summary(const json_t *res)
{
    const json_t *t = json_object_get(res, "timings");
    printf("stop: %s after %lld turn(s) (%.1f s: model %.1f s, tools %.1f s)\n",
           json_string_value(json_object_get(res, "stop_reason")),
           (long long)json_integer_value(json_object_get(res, "turns")),
           json_number_value(json_object_get(t, "wall_ms")) / 1000.0,
           json_number_value(json_object_get(t, "model_ms")) / 1000.0,
           json_number_value(json_object_get(t, "tool_ms")) / 1000.0);
    const char *detail = json_string_value(json_object_get(res, "detail"));
    if (detail)
        printf("detail: %s\n", detail);
    const json_t *rw = json_object_get(res, "rewards");
    const json_t *reward = json_object_get(rw, "reward");
    const json_t *fin = json_object_get(rw, "final"), *best = json_object_get(rw, "best");
    if (json_is_string(json_object_get(rw, "note")))
        printf("reward: %s\n", json_string_value(json_object_get(rw, "note")));
    else if (json_is_integer(reward))
        printf("reward: %lld (final workspace %s, best snapshot %s)\n",
               (long long)json_integer_value(reward),
               json_is_integer(json_object_get(fin, "reward")) ? "scored" : "not scored",
               json_is_object(best) ? "scored" : "none recorded");
    else
        printf("reward: none (%s)\n", json_string_value(json_object_get(fin, "error"))
                                          ? json_string_value(json_object_get(fin, "error"))
                                          : "not scored");
    printf("trajectory: %s\n", json_string_value(json_object_get(res, "trajectory")));
}

int cmd_run(int argc, char **argv)
{
    struct agent_opts o = {0};
    llm_opts_init(&o.llm);
    const char *resume = NULL, *temperature = NULL, *top_p = NULL;
    int64_t max_turns = 0, context = 0, wall_s = 0, max_tokens = 0, seed = -1, timeout_s = 0,
            stall_s = 0, retries = -1, backoff_ms = 0, tool_out = 0;
    bool as_json = false, insecure = false;
    struct cli_bus bus = CLI_BUS_INIT;
    const struct cli_opt opts[] = {
        {"task", 't', CLI_OPT_STRING, &o.task_ref, "TASK",
         "the task: a .py file, or SOURCE:SELECTOR (see 'cuda-agent data list')"},
        {"model", 'm', CLI_OPT_STRING, &o.llm.model, "NAME",
         "model name sent to the server (default $CUDA_AGENT_MODEL)"},
        {"base-url", 0, CLI_OPT_STRING, &o.llm.base_url, "URL",
         "server, e.g. http://127.0.0.1:8000/v1 (default $OPENAI_BASE_URL)"},
        {"out", 'o', CLI_OPT_STRING, &o.out_dir, "DIR",
         "output directory (default runs/run-DATE-PID)"},
        {"resume", 0, CLI_OPT_STRING, &resume, "DIR", "continue the interrupted episode in DIR"},
        {"max-turns", 0, CLI_OPT_INT, &max_turns, "N", "turn limit (default 200; 150 in training)",
         1, 100000},
        {"context-tokens", 0, CLI_OPT_INT, &context, "N", "context budget (default 131072)", 1024,
         100000000},
        {"wall-clock", 0, CLI_OPT_INT, &wall_s, "SEC", "wall-clock budget (default none)", 1,
         30 * 86400},
        {"tool-output-max", 0, CLI_OPT_INT, &tool_out, "BYTES",
         "longer tool outputs are trimmed with a marker (default 16384)", 256,
         (int64_t)CA_LIMIT_TOOL_OUTPUT},
        {"temperature", 0, CLI_OPT_STRING, &temperature, "X",
         "sampling temperature (server default)"},
        {"top-p", 0, CLI_OPT_STRING, &top_p, "X", "nucleus sampling (server default)"},
        {"max-tokens", 0, CLI_OPT_INT, &max_tokens, "N", "completion tokens per reply", 1,
         10000000},
        {"seed", 0, CLI_OPT_INT, &seed, "N", "sampling seed", 0, INT64_MAX},
        {"tool-choice", 0, CLI_OPT_STRING, &o.llm.tool_choice, "auto|required|none",
         "tool_choice sent to the server (default auto)"},
        {"logprobs", 0, CLI_OPT_FLAG, &o.llm.logprobs, NULL, "ask for logprobs and record them"},
        {"token-ids", 0, CLI_OPT_FLAG, &o.llm.token_ids, NULL,
         "ask for token ids (vLLM return_token_ids) and record them"},
        {"no-text-tools", 0, CLI_OPT_FLAG, &o.llm.no_text_tools, NULL,
         "no <tool_call> / fenced JSON calls from the reply text"},
        {"request-timeout", 0, CLI_OPT_INT, &timeout_s, "SEC",
         "limit on one model request (default 600)", 1, 86400},
        {"stall-timeout", 0, CLI_OPT_INT, &stall_s, "SEC",
         "cut a reply when nothing arrives for SEC (default off: a reply\n"
         "                               arrives whole, so SEC must exceed the longest generation)",
         1, 86400},
        {"retries", 0, CLI_OPT_INT, &retries, "N",
         "retries on 429, 5xx and connection errors (default 4)", 0, 100},
        {"retry-backoff-ms", 0, CLI_OPT_INT, &backoff_ms, "MS",
         "first wait before a retry, doubled each time (default 1000)", 1, 600000},
        {"no-eval", 0, CLI_OPT_FLAG, &o.no_eval, NULL, "do not score the result at the end"},
        {"device", 0, CLI_OPT_STRING, &o.device, "cuda|cpu", "evaluation device (default cuda)"},
        {"evaluator", 0, CLI_OPT_STRING, &o.evaluator, "SOCK",
         "evaluator service socket (default $CUDA_AGENT_EVALUATOR, else in process)"},
        CLI_BUS_OPTS(&bus),
        {"cache-dir", 0, CLI_OPT_STRING, &o.cache_dir, "DIR", "evaluator cache"},
        {"eval-no-sandbox", 0, CLI_OPT_FLAG, &o.eval_no_sandbox, NULL,
         "run the evaluator's compilers and candidates without the sandbox (unsafe)"},
        {"state-dir", 0, CLI_OPT_STRING, &o.state_dir, "DIR", "where the episode keeps its state"},
        {"insecure-no-sandbox", 0, CLI_OPT_FLAG, &insecure, NULL,
         "run the tools WITHOUT a sandbox (unsafe)"},
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL, "print the result as JSON"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent run --task T --model NAME --base-url URL [options]",
        .summary = "Let a model (any OpenAI-compatible server) solve one task in a sandboxed\n"
                   "episode, record its trajectory, and score the result.",
        .description =
            "The API key comes from $CUDA_AGENT_API_KEY or $OPENAI_API_KEY (never a flag, never\n"
            "logged). The episode stops when the model answers without tool calls, at\n"
            "--max-turns, when the conversation outgrows --context-tokens (older tool outputs\n"
            "are elided first), at --wall-clock, or on SIGINT/SIGTERM. Then the evaluator\n"
            "scores the final workspace and the best correct snapshot recorded by the agent's\n"
            "./verify and ./profile runs; the reward is the better of the two.\n\n"
            "OUT holds workspace/, trajectory.jsonl (one line per turn as it happens; see\n"
            "docs/trajectory.schema.json), evals/ (snapshots of the agent's evaluations) and\n"
            "the final reports. --resume OUT continues an interrupted episode. The agent's\n"
            "./compile, ./verify and ./profile and the final scoring use --device and\n"
            "--evaluator, or with --redis (or CUDA_AGENT_REDIS) the workers of the job bus\n"
            "(`cuda-agent worker`; the evaluated files and the task travel with each job, and\n"
            "the workers' own device and settings apply).\n\n"
            "Exit status: 0 the episode ran to a normal stop (answer, turn limit, context,\n"
            "wall clock); 1 the model server failed or the run was interrupted (resumable);\n"
            "2 usage; 3 bad task or trajectory; 4 not found; 69 no sandbox or evaluator (or\n"
            "Redis unreachable at the start).",
        .opts = opts,
        .min_args = 0,
        .max_args = 0,
    };
    int rc;
    if (!cli_parse_cmd(&spec, argc, argv, NULL, NULL, &rc))
        return rc;
    if (!parse_real(temperature, 0, 100, &o.llm.temperature))
        return cli_usage_error("run", "--temperature must be a number from 0 to 100");
    if (!parse_real(top_p, 0, 1, &o.llm.top_p))
        return cli_usage_error("run", "--top-p must be a number from 0 to 1");
    if (o.device && strcmp(o.device, "cuda") && strcmp(o.device, "cpu"))
        return cli_usage_error("run", "--device must be cuda or cpu");
    if (o.llm.tool_choice && strcmp(o.llm.tool_choice, "auto") &&
        strcmp(o.llm.tool_choice, "required") && strcmp(o.llm.tool_choice, "none"))
        return cli_usage_error("run", "--tool-choice must be auto, required or none");
    if (resume && o.out_dir && strcmp(resume, o.out_dir) != 0)
        return cli_usage_error("run", "--resume DIR is the output directory; drop --out");
    if (!resume && !o.task_ref)
        return cli_usage_error("run", "--task is required (or --resume DIR)");
    char default_out[128];
    if (resume) {
        o.out_dir = resume;
        o.resume = true;
    } else if (!o.out_dir) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        char stamp[32];
        strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
        snprintf(default_out, sizeof(default_out), "runs/run-%s-%d", stamp, (int)getpid());
        o.out_dir = default_out;
    }
    if (!resume) {
        llm_opts_from_env(&o.llm);
    } else if (!o.llm.api_key) {
        /* Server and model come from the trajectory unless given again; the
         * key is never stored, so it comes from the environment. */
        struct llm_opts env;
        llm_opts_init(&env);
        llm_opts_from_env(&env);
        o.llm.api_key = env.api_key;
    }
    o.max_turns = max_turns;
    o.context_tokens = context;
    o.wall_ms = wall_s * 1000;
    o.tool_output_max = tool_out;
    o.llm.max_tokens = max_tokens;
    o.llm.seed = seed;
    o.llm.timeout_ms = timeout_s * 1000;
    o.llm.stall_ms = stall_s * 1000;
    o.llm.retries = (int)retries;
    o.llm.backoff_ms = backoff_ms;
    o.sandbox_flags = insecure ? SANDBOX_INSECURE : 0;
    /* The flags win over the environment; both reach the final scoring and the episode's
     * evaluator socket (the workspace's ./compile, ./verify, ./profile) through o. */
    if ((rc = cli_bus_setup("run", &bus, &o.evaluator, "--evaluator")))
        return rc;
    if (bus.url) {
        /* Found out now, not after the episode: its evaluations would all fail. */
        if ((rc = cli_bus_check(&bus)))
            return rc;
        o.eval = cli_bus_eval;
        o.eval_ctx = &bus;
    }
    if (!o.device)
        o.device = getenv("CUDA_AGENT_EVAL_DEVICE");
    if (insecure)
        fprintf(stderr, "cuda-agent: WARNING: --insecure-no-sandbox: the agent's commands run "
                        "WITHOUT isolation, with your user's full access to this machine\n");

    struct display d = {.tty = isatty(2), .t0 = ca_now_us()};
    o.on_event = on_event;
    o.event_data = &d;
    o.cancel = &stop_flag;
    struct sigaction sa = {0}, old_int, old_term;
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    /* sigaction fails only for an invalid signal or handler: neither here. */
    (void)sigaction(SIGINT, &sa, &old_int);
    (void)sigaction(SIGTERM, &sa, &old_term);

    json_t *res = NULL;
    struct ca_err err = {0};
    rc = agent_run(&o, &res, &err);
    (void)sigaction(SIGINT, &old_int, NULL);
    (void)sigaction(SIGTERM, &old_term, NULL);
    if (d.tty)
        fputs("\r\033[K", stderr);
    if (rc)
        return cli_fail(&err);
    if (as_json)
        cli_print_json(res);
    else
        print_summary(res);
    const char *why = json_string_value(json_object_get(res, "stop_reason"));
    rc = why && (strcmp(why, "model_error") == 0 || strcmp(why, "interrupted") == 0) ? CLI_FAILED
                                                                                     : CLI_OK;
    json_decref(res);
    return rc;
}
