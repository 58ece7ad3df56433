/*
 * cmd_eval.c - `cuda-agent eval`: compile, verify, profile and reward a
 * workspace, or a KernelBench-style file with --kernelbench-file, with a
 * human report or --json.
 */
#include "cli/cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/limits.h"
#include "eval/compile.h"
#include "eval/eval.h"
#include "eval/evald.h"
#include "core/banned.h"

static int eval_doctor(void)
{
    struct compile_opts co;
    compile_opts_init(&co);
    json_t *d = NULL;
    struct ca_err err = {0};
    if (compile_toolchain_describe(&co, &d, &err))
        return cli_fail(&err);
    cli_print_json(d);
    json_decref(d);
    return CLI_OK;
}

int cmd_eval(int argc, char **argv)
{
    struct eval_opts o = {0};
    bool as_json = false, doctor = false, policy_only = false, compile_only = false,
         verify_only = false;
    int64_t seeds = 0, timeout_s = 0, budget_ms = 0;
    const char *atol = NULL, *rtol = NULL, *server = NULL;
    struct cli_bus bus = CLI_BUS_INIT;
    const struct cli_opt opts[] = {
        {"task", 't', CLI_OPT_STRING, &o.task_ref, "TASK",
         "evaluate against this task instead of the workspace's model.py"},
        {"kernelbench-file", 0, CLI_OPT_STRING, &o.kernelbench_file, "FILE",
         "evaluate a KernelBench-style file (ModelNew + load_inline) against --task, "
         "without a workspace"},
        {"device", 0, CLI_OPT_STRING, &o.device, "cuda|cpu", "where to run (default cuda)"},
        {"arch", 0, CLI_OPT_STRING, &o.arch, "SM",
         "target architecture, e.g. sm_90 (default: the GPU's)"},
        {"timing", 0, CLI_OPT_STRING, &o.timing, "events|kernel|device",
         "CUDA-event wall time, summed kernel time, or events with the host's launch work "
         "hidden behind a lead kernel (default: device; events under --rules kernelbench and "
         "on the CPU)"},
        {"precision", 0, CLI_OPT_STRING, &o.precision, "strict|tf32",
         "strict fp32 accuracy (default) or allow TF32 (baselines then use TF32 too)"},
        {"rules", 0, CLI_OPT_STRING, &o.rules, "cuda-agent|kernelbench",
         "the rule set: SKILL.md's (default, for RL rewards) or what KernelBench accepts"},
        {"seeds", 0, CLI_OPT_INT, &seeds, "N", "input sets to verify (default 5)", 1, 100},
        {"atol", 0, CLI_OPT_STRING, &atol, "X", "absolute tolerance (default 1e-2)"},
        {"rtol", 0, CLI_OPT_STRING, &rtol, "X", "relative tolerance (default 1e-2)"},
        {"timeout", 0, CLI_OPT_INT, &timeout_s, "SEC", "candidate wall clock (default 120)", 1,
         3600},
        {"budget-ms", 0, CLI_OPT_INT, &budget_ms, "MS", "timing budget per measured function", 10,
         600000},
        {"cache-dir", 0, CLI_OPT_STRING, &o.cache_dir, "DIR",
         "evaluator cache (default $CUDA_AGENT_CACHE_DIR or ~/.cache/cuda-agent)"},
        {"policy-only", 0, CLI_OPT_FLAG, &policy_only, NULL,
         "stop after the static policy (nothing is compiled or run)"},
        {"compile-only", 0, CLI_OPT_FLAG, &compile_only, NULL, "stop after compiling"},
        {"verify-only", 0, CLI_OPT_FLAG, &verify_only, NULL, "stop after verification"},
        {"no-compile-baseline", 0, CLI_OPT_FLAG, &o.no_compile_baseline, NULL,
         "time PyTorch eager only (KernelBench's baseline), not torch.compile"},
        {"no-sandbox", 0, CLI_OPT_FLAG, &o.no_sandbox, NULL,
         "compilers and candidates WITHOUT the sandbox (unsafe; hosts without userns)"},
        {"no-candidate-sandbox", 0, CLI_OPT_FLAG, &o.no_candidate_sandbox, NULL,
         "candidates WITHOUT their sandbox (unsafe; to measure its cost)"},
        {"server", 0, CLI_OPT_STRING, &server, "SOCKET",
         "evaluate through the evaluator service (default $CUDA_AGENT_EVALUATOR when set)"},
        CLI_BUS_OPTS(&bus),
        {"doctor", 0, CLI_OPT_FLAG, &doctor, NULL,
         "describe the toolchain (nvcc, compiler, PyTorch, GPU architecture) and exit"},
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL, "print the full report as JSON"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent eval [options] WORKSPACE\n"
                 "       cuda-agent eval [options] --task TASK --kernelbench-file FILE",
        .summary = "Compile, verify and profile a workspace's kernels and compute the reward.",
        .description =
            "Stages: snapshot of the writable files; static policy; compile (cached); verify\n"
            "on fresh random inputs in a throw-away candidate process; time eager,\n"
            "torch.compile and the candidate the same way; reward -1/1/2/3.\n\n"
            "With --kernelbench-file, FILE is one Python file whose ModelNew calls kernels\n"
            "built by torch.utils.cpp_extension.load_inline. Its sources are read without\n"
            "running the file (stage \"extract\": they must be string literals or module-level\n"
            "string constants) and built by the evaluator's compile pool, never by load_inline;\n"
            "the other stages are a workspace's.\n\n"
            "Exit status: 0 the candidate is correct (reward >= 1); 1 it is not (reward -1,\n"
            "the report says why); 2 usage; 69 a needed component (nvcc, PyTorch, the\n"
            "evaluator service) is missing; 75 an infrastructure error (the evaluator ran\n"
            "out of GPU memory in its own work, or the task is too large for the GPU): no\n"
            "verdict on the candidate, no reward.\n\n"
            "With --server (or CUDA_AGENT_EVALUATOR) the service does the work with its own\n"
            "device, architecture, cache and sandbox settings (see `cuda-agent evaluator`).\n"
            "With --redis (or CUDA_AGENT_REDIS) a worker of the job bus does, on whichever\n"
            "machine takes the job; the workspace's evaluated files and the task travel with\n"
            "it (`cuda-agent worker`). Exit 75 also when every worker stayed busy past\n"
            "--queue-wait or no result came within --wait; 69 when Redis is unreachable.",
        .opts = opts,
        .min_args = 0,
        .max_args = 1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    if (doctor) {
        free(args);
        return eval_doctor();
    }
    if (o.kernelbench_file && (nargs != 0 || !o.task_ref)) {
        free(args);
        return cli_usage_error("eval", nargs ? "--kernelbench-file takes no WORKSPACE"
                                             : "--kernelbench-file needs --task TASK");
    }
    if (!o.kernelbench_file && nargs != 1) {
        free(args);
        return cli_usage_error("eval", "expected a WORKSPACE directory");
    }
    o.workspace = nargs ? args[0] : NULL;
    o.seeds = (int)seeds;
    o.timeout_ms = timeout_s * 1000;
    o.budget_ms = budget_ms;
    o.stop = policy_only    ? EVAL_STOP_POLICY
             : compile_only ? EVAL_STOP_COMPILE
             : verify_only  ? EVAL_STOP_VERIFY
                            : EVAL_STOP_REWARD;
    const char *bad = NULL;
    if (policy_only + compile_only + verify_only > 1)
        bad = "--policy-only, --compile-only and --verify-only exclude each other";
    else if (o.device && strcmp(o.device, "cuda") && strcmp(o.device, "cpu"))
        bad = "--device must be cuda or cpu";
    else if (o.timing && strcmp(o.timing, "events") && strcmp(o.timing, "kernel") &&
             strcmp(o.timing, "device"))
        bad = "--timing must be events, kernel or device";
    else if (o.precision && strcmp(o.precision, "strict") && strcmp(o.precision, "tf32"))
        bad = "--precision must be strict or tf32";
    else if (o.rules && strcmp(o.rules, "cuda-agent") && strcmp(o.rules, "kernelbench"))
        bad = "--rules must be cuda-agent or kernelbench";
    if (!bad && atol) {
        char *end;
        o.atol = strtod(atol, &end);
        if (*end || !(o.atol > 0) || !isfinite(o.atol))
            bad = "--atol must be a positive number";
    }
    if (!bad && rtol) {
        char *end;
        o.rtol = strtod(rtol, &end);
        if (*end || !(o.rtol > 0) || !isfinite(o.rtol))
            bad = "--rtol must be a positive number";
    }
    if (bad) {
        free(args);
        return cli_usage_error("eval", "%s", bad);
    }
    struct ca_err err = {0};
    json_t *report = NULL;
    if ((rc = cli_bus_setup("eval", &bus, &server, "--server"))) {
        free(args);
        return rc;
    }
    if (bus.url)
        rc = cli_bus_eval(&bus, &o, &report, &err);
    else if (server)
        rc = evald_eval(server, &o, &report, &err);
    else
        rc = eval_run(&o, &report, &err);
    free(args);
    if (rc == CA_ETIMEOUT && bus.url) { /* busy, or no result in time: no verdict */
        fprintf(stderr, "cuda-agent: error: %s\n", err.msg);
        return CLI_TEMPFAIL;
    }
    if (rc)
        return cli_fail(&err);
    if (as_json) {
        cli_print_json(report);
    } else {
        struct buf b;
        buf_init(&b, CA_LIMIT_TOOL_OUTPUT * 2);
        if (eval_format(report, &b) == 0)
            fputs(b.data, stdout);
        buf_release(&b);
    }
    rc = json_is_true(json_object_get(report, "ok"))                     ? CLI_OK
         : json_is_true(json_object_get(report, "infrastructure_error")) ? CLI_TEMPFAIL
                                                                         : CLI_FAILED;
    json_decref(report);
    return rc;
}
