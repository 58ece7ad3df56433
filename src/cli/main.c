/*
 * main.c - the cuda-agent entry point: global options, then dispatch
 * through the subcommand table. Each cmd_<name>() lives in
 * src/cli/cmd_<name>.c and returns its exit code.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/banned.h"

struct cli_cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct cli_cmd commands[] = {
    {"workspace", cmd_workspace, "create or check an episode workspace from a task"},
    {"eval", cmd_eval, "compile, verify, profile and reward a workspace"},
    {"evaluator", cmd_evaluator, "run the evaluator service (warm GPU runners on a socket)"},
    {"worker", cmd_worker, "evaluate jobs from a Redis Streams job bus (one per GPU host)"},
    {"candidate-sandbox", cmd_candidate_sandbox,
     "run a program in the candidate sandbox (the evaluator's harness uses it)"},
    {"tool", cmd_tool, "run one agent tool call in an episode's sandbox (persistent shell)"},
    {"run", cmd_run, "let a model solve a task in a sandboxed episode (agent loop) and score it"},
    {"bench", cmd_bench, "score a task suite (solutions or the agent): metrics, SQLite, report"},
    {"data", cmd_data,
     "list, check and import task sources (.py, KernelBench tree, JSONL, parquet)"},
    {"synth", cmd_synth, "synthesise training tasks from torch operators, filtered (Ops-6K style)"},
    {"serve", cmd_serve, "serve episodes over MCP (stdio, HTTP) and OpenEnv to RL trainers"},
    {"version", cmd_version, "print the version"},
};

static void print_usage(FILE *out)
{
    fprintf(out, "usage: cuda-agent [--log-level LEVEL] <command> [options] [args]\n\n"
                 "cuda-agent lets language models write, verify and profile CUDA kernels\n"
                 "against PyTorch reference tasks, and turns the result into a reward.\n\n"
                 "commands:\n");
    int w = 0; /* the names' column: the longest name */
    for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
        if ((int)strlen(commands[i].name) > w)
            w = (int)strlen(commands[i].name);
    for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
        fprintf(out, "  %-*s %s\n", w, commands[i].name, commands[i].summary);
    fprintf(out,
            "\nglobal options:\n"
            "  --log-level LEVEL  error, warn (default), info, debug or trace\n"
            "  --version          print the version and exit\n"
            "  -h, --help         show this help; 'cuda-agent <command> --help' for a command\n"
            "\nexit codes:\n"
            "  0   success\n"
            "  1   the operation failed\n"
            "  2   usage error: unknown command or option, bad or missing argument\n"
            "  3   the input (task, dataset, workspace) was rejected\n"
            "  4   a named task, file or selector does not exist or is ambiguous\n"
            "  69  a needed component is missing (python3, pyarrow, the evaluator)\n");
}

int cmd_version(int argc, char **argv)
{
    static const struct cli_spec spec = {
        .usage = "cuda-agent version",
        .summary = "Print the version and the git revision it was built from.",
        .max_args = 0,
    };
    int rc;
    if (!cli_parse_cmd(&spec, argc, argv, NULL, NULL, &rc))
        return rc;
    printf("cuda-agent %s (%s)\n", CA_VERSION, CA_GIT_REV);
    return CLI_OK;
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_usage(stdout);
            return CLI_OK;
        }
        if (strcmp(a, "--version") == 0) {
            printf("cuda-agent %s (%s)\n", CA_VERSION, CA_GIT_REV);
            return CLI_OK;
        }
        if (strcmp(a, "--log-level") == 0 || strncmp(a, "--log-level=", 12) == 0) {
            const char *v = a[11] == '=' ? a + 12 : (i + 1 < argc ? argv[++i] : NULL);
            int lvl = v ? log_level_parse(v) : -1;
            if (lvl < 0)
                return cli_usage_error(NULL, "--log-level needs one of error, warn, info, "
                                             "debug, trace");
            log_set_level((enum log_level)lvl);
            continue;
        }
        return cli_usage_error(NULL, "unknown option '%s'", a);
    }
    if (i >= argc) {
        print_usage(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[i];
    if (strcmp(name, "help") == 0) {
        if (i + 1 >= argc) {
            print_usage(stdout);
            return CLI_OK;
        }
        name = argv[i + 1];
        for (size_t c = 0; c < ARRAY_SIZE(commands); c++)
            if (strcmp(commands[c].name, name) == 0) {
                char *help_argv[] = {argv[i + 1], "--help", NULL};
                return commands[c].fn(2, help_argv);
            }
        return cli_usage_error(NULL, "unknown command '%s'", name);
    }
    for (size_t c = 0; c < ARRAY_SIZE(commands); c++)
        if (strcmp(commands[c].name, name) == 0)
            return commands[c].fn(argc - i, argv + i);
    return cli_usage_error(NULL, "unknown command '%s' (see 'cuda-agent --help')", name);
}
