/*
 * cli.h - the command-line front end: a table of subcommands (main.c) and
 * an option table per command that both parses argv and prints --help.
 * Only src/cli/ may exit; commands return an exit code (see EXIT CODES in
 * main.c's help, and cli_exit_code()).
 */
#ifndef CA_CLI_H
#define CA_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bus/bus.h"
#include "core/err.h"
#include "eval/evald.h"
#include "eval/gpupool.h"

enum cli_exit {
    CLI_OK = 0,
    CLI_FAILED = 1,    /* the operation failed */
    CLI_USAGE = 2,     /* unknown command or option, bad or missing argument */
    CLI_INVALID = 3,   /* the input (task, dataset, workspace) was rejected */
    CLI_NOTFOUND = 4,  /* a named task, file or selector does not exist */
    CLI_UNAVAIL = 69,  /* a needed component is missing (python3, pyarrow, evaluator) */
    CLI_TEMPFAIL = 75, /* the evaluator could not evaluate (infrastructure error): no verdict */
};

enum cli_opt_kind {
    CLI_OPT_FLAG,   /* bool */
    CLI_OPT_STRING, /* const char * */
    CLI_OPT_INT,    /* int64_t, range-checked */
};

struct cli_opt {
    const char *name; /* long name without "--" */
    char short_name;  /* 0: none */
    enum cli_opt_kind kind;
    void *target;
    const char *arg; /* argument name for help ("DIR") */
    const char *help;
    int64_t lo, hi; /* CLI_OPT_INT range */
};

struct cli_spec {
    const char *usage;       /* "cuda-agent workspace create --task T DIR" */
    const char *summary;     /* one line */
    const char *description; /* paragraphs printed after the options, may be NULL */
    const struct cli_opt *opts;
    int min_args, max_args; /* positional arguments; max -1: unlimited */
};

/*
 * Parse options (anywhere before "--"), collect positionals into args.
 * Returns 0, CLI_USAGE after printing an error, or -1 when --help was
 * printed (the caller returns CLI_OK).
 */
int cli_parse(const struct cli_spec *spec, int argc, char **argv, char ***args, int *nargs);
/*
 * cli_parse as a command's first step. true: go on, *rc is 0 and *args the positionals (the
 * caller frees them; with args NULL they are freed here, for a command that takes none).
 * false: the command is done and returns *rc, CLI_OK after --help or CLI_USAGE after a usage
 * error (printed).
 */
bool cli_parse_cmd(const struct cli_spec *spec, int argc, char **argv, char ***args, int *nargs,
                   int *rc);
void cli_print_help(const struct cli_spec *spec);

/*
 * A long-running command's stop: SIGINT and SIGTERM set *cli_stop_flag() (which the
 * command's loop or service polls) and SIGPIPE is ignored (a closed client is an error
 * return, not a death). Call once, before the loop.
 */
volatile sig_atomic_t *cli_stop_on_signals(void);

/* Print "cuda-agent: error: <msg>" to stderr and return the exit code for err. */
int cli_fail(const struct ca_err *err);
int cli_exit_code(int code);
/* Usage error: message plus "try 'cuda-agent CMD --help'". */
int cli_usage_error(const char *cmd, const char *fmt, ...) CA_PRINTF(2, 3);

/* A subcommand of a command ("workspace create"). */
struct cli_sub {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

/* Run argv[1] from subs (argv[0] is the command), or print help / a usage error. */
int cli_dispatch(const char *cmd, const struct cli_sub *subs, size_t nsubs, int argc, char **argv);

/* Print v as indented JSON on stdout. */
struct json_t;
void cli_print_json(const struct json_t *v);

/* Whether stdout is a terminal (for human vs machine output). */
bool cli_stdout_tty(void);

/* "0,1,3" -> a list of heap strings (*n entries, at most GPUPOOL_MAX_RUNNERS): 0 or -1. */
int cli_split_list(const char *s, char ***out, size_t *n);
/* The GPUs to serve: CUDA_VISIBLE_DEVICES if set, else the indices nvidia-smi lists. */
void cli_detect_gpus(char ***out, size_t *n);

/*
 * A machine's evaluator as `cuda-agent evaluator` and `cuda-agent worker` start it: the options
 * (CLI_HOST_OPTS(h) in a command's option table, h a struct cli_host whose eo points at the
 * command's evald_opts) and what they set up (cli_host_setup: the runners' GPUs, or CPU
 * runners, and the pre-warm count into *eo; cli_host_release frees the GPU list).
 */
struct cli_host {
    struct evald_opts *eo;
    const char *gpus;
    int64_t runners, prewarm;
    bool cpu;    /* set up: --device cpu */
    char **list; /* set up: the GPUs (owned), n entries */
    size_t n;
};
#define CLI_HOST_OPTS(h)                                                                           \
    {                                                                                              \
        "device",       0,                                                                         \
        CLI_OPT_STRING, &(h)->eo->base.device,                                                     \
        "cuda|cpu",     "where to run (default cuda)"},                                            \
        {"gpus",                                                                                   \
         0,                                                                                        \
         CLI_OPT_STRING,                                                                           \
         &(h)->gpus,                                                                               \
         "LIST",                                                                                   \
         "GPUs to serve, one runner each, e.g. 0,1 (default: CUDA_VISIBLE_DEVICES, else all)"},    \
        {"runners",   0,                                                                           \
         CLI_OPT_INT, &(h)->runners,                                                               \
         "N",         "with --device cpu: runners (default 1)",                                    \
         1,           GPUPOOL_MAX_RUNNERS},                                                        \
        {"prewarm",                                                                                \
         0,                                                                                        \
         CLI_OPT_INT,                                                                              \
         &(h)->prewarm,                                                                            \
         "N",                                                                                      \
         "candidate processes each runner keeps pre-warmed (default 8 on a GPU, 1 on the CPU)",    \
         0,                                                                                        \
         16},                                                                                      \
        {"arch",         0,                                                                        \
         CLI_OPT_STRING, &(h)->eo->base.arch,                                                      \
         "SM",           "target architecture (default: the GPU's)"},                              \
        {"cache-dir",                                                                              \
         0,                                                                                        \
         CLI_OPT_STRING,                                                                           \
         &(h)->eo->base.cache_dir,                                                                 \
         "DIR",                                                                                    \
         "evaluator cache (a worker's job directories too; default $CUDA_AGENT_CACHE_DIR or "      \
         "~/.cache/cuda-agent)"},                                                                  \
        {"no-sandbox",                                                                             \
         0,                                                                                        \
         CLI_OPT_FLAG,                                                                             \
         &(h)->eo->base.no_sandbox,                                                                \
         NULL,                                                                                     \
         "compilers and candidates WITHOUT the sandbox (unsafe; hosts without userns)"},           \
        {"no-candidate-sandbox",                                                                   \
         0,                                                                                        \
         CLI_OPT_FLAG,                                                                             \
         &(h)->eo->base.no_candidate_sandbox,                                                      \
         NULL,                                                                                     \
         "candidates WITHOUT their sandbox (unsafe; to measure its cost)"},                        \
    {                                                                                              \
        "cpu-split", 0, CLI_OPT_STRING, &(h)->eo->cpu_split, "SPEC",                               \
            "CPU cores for the runners' timing vs compiling: auto, off, N (cores per runner) or "  \
            "TIMING/...:COMPILE lists, e.g. 15/14:0-13 (default $CUDA_AGENT_CPU_SPLIT, else auto)" \
    }
/* Check h's options (usage errors name cmd) and set up eo->gpus, n_gpus and prewarm; with
 * no_runners (a worker on its test double) no GPU is looked for. 0, or CLI_USAGE (printed). */
int cli_host_setup(const char *cmd, struct cli_host *h, bool no_runners);
void cli_host_release(struct cli_host *h);

/*
 * The job bus's client side for every command that takes --redis (eval, bench run, run, tool,
 * serve): CLI_BUS_OPTS(b) in the option table (--redis, --queue-wait, --wait), b a struct cli_bus
 * initialised with CLI_BUS_INIT; cli_bus_setup after parsing; cli_bus_eval as the evaluation
 * callback (bench_eval_fn, episode_eval_fn) with b as its context. cli_bus_eval opens a
 * connection per call, so any thread (and a forked supervisor) may call it at once.
 */
struct cli_bus {
    const char *url; /* --redis, else $CUDA_AGENT_REDIS (set up); NULL: not on the bus */
    int64_t queue_wait_s, wait_s;
    struct bus_client_opts bo; /* set up */
    /* Set up: the waits as options for a cuda-agent child that reaches the bus itself (the
     * URL goes in its environment, $CUDA_AGENT_REDIS: argv is visible to every local user and
     * the URL may hold a password); NULL-terminated, pointing into this struct. */
    const char *child_args[5];
    char child_wait[2][24];
};
#define CLI_BUS_INIT                                                                               \
    {                                                                                              \
        .queue_wait_s = 60                                                                         \
    }
#define CLI_BUS_OPTS(b)                                                                            \
    {"redis",                                                                                      \
     0,                                                                                            \
     CLI_OPT_STRING,                                                                               \
     &(b)->url,                                                                                    \
     "URL",                                                                                        \
     "evaluate on the workers of this Redis job bus (default $CUDA_AGENT_REDIS when no "           \
     "evaluator is named; see `cuda-agent worker`)"},                                              \
        {"queue-wait",                                                                             \
         0,                                                                                        \
         CLI_OPT_INT,                                                                              \
         &(b)->queue_wait_s,                                                                       \
         "SEC",                                                                                    \
         "with --redis: while every worker is busy, wait this long to queue an evaluation "        \
         "(default 60; 0: \"busy\" at once)",                                                      \
         0,                                                                                        \
         86400},                                                                                   \
    {                                                                                              \
        "wait", 0, CLI_OPT_INT, &(b)->wait_s, "SEC",                                               \
            "with --redis: wait this long for each result (default: twice the timeout + 30 min)",  \
            1, 86400                                                                               \
    }
/*
 * Resolve the evaluator and the bus: the options win; with neither, *evaluator comes from
 * $CUDA_AGENT_EVALUATOR, else the URL from $CUDA_AGENT_REDIS (empty values are unset). A
 * --redis beside an evaluator named by the option evaluator_opt (NULL: the command has none,
 * *evaluator can only come from the environment) is a usage error, and so is a URL that does
 * not parse. 0, or CLI_USAGE (printed).
 */
int cli_bus_setup(const char *cmd, struct cli_bus *b, const char **evaluator,
                  const char *evaluator_opt);
/* Whether Redis answers at b->url (one connection; 0 at once without a URL): 0, or the exit code
 * with the error printed (69: unreachable, or the credentials refused). For commands that would
 * otherwise find out only at their first evaluation, much later. */
int cli_bus_check(const struct cli_bus *b);
/* The evaluation o on the bus (bus_eval) with ctx a set-up struct cli_bus. */
int cli_bus_eval(void *ctx, const struct eval_opts *o, json_t **report, struct ca_err *err);

int cmd_workspace(int argc, char **argv);
int cmd_candidate_sandbox(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_tool(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_evaluator(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_version(int argc, char **argv);

#endif
