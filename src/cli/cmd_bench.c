/*
 * cmd_bench.c - `cuda-agent bench run|report|compare`: a suite of KernelBench tasks scored
 * with the paper's metrics, one SQLite database per run (src/bench). The run's settings are
 * stored with it: running the same command again resumes it, and a finished run run again
 * changes nothing. SIGINT/SIGTERM stop starting attempts and keep what finished; a second one
 * abandons the running attempts (they run again on resume).
 */
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bus/bus.h"
#include "core/buf.h"
#include "core/fs.h"
#include "core/limits.h"
#include "core/proc.h"
#include "core/util.h"
#include "eval/eval.h"
#include "core/banned.h"

static volatile sig_atomic_t stop_count;

static void on_signal(int sig)
{
    (void)sig;
    if (stop_count < 2)
        stop_count++;
}

/* RUN.sqlite -> RUN (the stem the .files folder, .html and .md share). */
static char *run_stem(const char *db)
{
    size_t n = strlen(db);
    const char *exts[] = {".sqlite", ".sqlite3", ".db"};
    for (size_t i = 0; i < ARRAY_SIZE(exts); i++) {
        size_t e = strlen(exts[i]);
        if (n > e && strcmp(db + n - e, exts[i]) == 0)
            return xstrndup(db, n - e);
    }
    return xstrdup(db);
}

static char *abs_or_copy(const char *p)
{
    char *r = p ? realpath(p, NULL) : NULL;
    return r ? r : p ? xstrdup(p) : NULL;
}

static void set_str(json_t *o, const char *k, const char *v)
{
    if (v)
        json_object_set_new(o, k, json_string(v));
}

/* gpu: ask nvidia-smi here (not when the evaluations run on CPU or on the bus's workers; the
 * reports' harness.device says what they ran on). */
static void record_environment(struct bench_store *s, bool gpu)
{
    char host[256] = "";
    (void)gethostname(host, sizeof(host) - 1);
    char ver[96], now[32] = "";
    snprintf(ver, sizeof(ver), "%s (%s)", CA_VERSION, CA_GIT_REV);
    time_t t = time(NULL);
    struct tm tm;
    if (gmtime_r(&t, &tm))
        strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", &tm);
    (void)bench_store_set_env(s, "cuda_agent", ver, NULL);
    (void)bench_store_set_env(s, "commit", CA_GIT_REV, NULL);
    (void)bench_store_set_env(s, "host", host, NULL);
    (void)bench_store_set_env(s, "last_started_at", now, NULL);
    if (!gpu)
        return;
    const char *argv[] = {"nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader",
                          NULL};
    struct proc_opts po = {.argv = argv, .timeout_ms = 20000, .out_max = 16 * CA_KIB};
    struct proc_result r;
    proc_result_init(&r);
    if (proc_run(&po, &r, NULL) == 0 && proc_ok(&r) && r.out.data) {
        char *nl = strchr(r.out.data, '\n');
        if (nl)
            *nl = '\0';
        char *comma = strrchr(r.out.data, ',');
        if (comma) {
            *comma = '\0';
            (void)bench_store_set_env(s, "driver", comma + 1 + (comma[1] == ' '), NULL);
            (void)bench_store_set_env(s, "gpu_smi", r.out.data, NULL);
        }
    }
    proc_result_release(&r);
}

static int write_reports(struct bench_store *s, const char *html, const char *md,
                         struct ca_err *err)
{
    json_t *ex = NULL;
    int rc = bench_store_export(s, html != NULL, &ex, err);
    if (rc)
        return rc;
    struct buf b;
    buf_init(&b, (size_t)1 << 31);
    if (html) {
        if ((rc = bench_report_html(ex, &b)) ||
            (rc = fs_write_atomic(html, b.data, b.len, 0644, err)))
            goto out;
    }
    if (md) {
        buf_reset(&b);
        if ((rc = bench_report_markdown(ex, &b)) ||
            (rc = fs_write_atomic(md, b.data, b.len, 0644, err)))
            goto out;
    }
out:
    if (rc && !err->msg[0])
        err_setf(err, rc, "writing the reports: %s", ca_strerror(rc));
    buf_release(&b);
    json_decref(ex);
    return rc;
}

static int print_report(struct bench_store *s, bool as_json, struct ca_err *err)
{
    json_t *ex = NULL;
    int rc = bench_store_export(s, false, &ex, err);
    if (rc)
        return rc;
    if (as_json) {
        json_t *r = bench_report_json(ex);
        cli_print_json(r);
        json_decref(r);
    } else {
        struct buf b;
        buf_init(&b, (size_t)1 << 30);
        if (bench_report_text(ex, &b) == 0)
            fputs(b.data, stdout);
        buf_release(&b);
    }
    json_decref(ex);
    return 0;
}

static int bench_run_cmd(int argc, char **argv)
{
    struct bench_plan_opts po = {0};
    struct bench_run_opts ro = {0};
    const char *db = NULL;
    int64_t sample = 0, seed = 0, jobs = 4, runners = 1, budget_ms = 0, timeout_s = 0,
            max_turns = 0;
    struct cli_bus bus = CLI_BUS_INIT;
    bool as_json = false, no_html = false, retry_infra = false, retime_noisy = false;
    const struct cli_opt opts[] = {
        {"db", 0, CLI_OPT_STRING, &db, "RUN.sqlite",
         "the run's database (made; an existing run resumes)"},
        {"levels", 0, CLI_OPT_STRING, &po.levels, "LIST", "only these levels, e.g. 1,2"},
        {"tasks", 0, CLI_OPT_STRING, &po.tasks, "LIST",
         "only these tasks (ids, id prefixes, names or file stems, comma-separated)"},
        {"sample", 0, CLI_OPT_INT, &sample, "N", "N tasks, stratified by level", 1, 1000000},
        {"seed", 0, CLI_OPT_INT, &seed, "S", "the sample's seed (default 0)", 0, INT64_MAX},
        {"solutions", 0, CLI_OPT_STRING, &po.solutions, "DIR",
         "KernelBench-format files in KernelBench's layouts"},
        {"map", 0, CLI_OPT_STRING, &po.map, "FILE",
         "task -> solution file: JSONL, or the leaderboard corpus's data.json"},
        {"label", 0, CLI_OPT_STRING, &po.label, "NAME", "with --map: only this label's solutions"},
        {"workspaces", 0, CLI_OPT_STRING, &po.workspaces, "DIR",
         "one workspace per task: DIR/<task name or id>/"},
        {"replay", 0, CLI_OPT_STRING, &po.replay, "DIR",
         "earlier `cuda-agent run` outputs (DIR or DIR/<run>/): each one's best snapshot"},
        {"model", 'm', CLI_OPT_STRING, &ro.model, "NAME", "run the agent on each task"},
        {"base-url", 0, CLI_OPT_STRING, &ro.base_url, "URL",
         "the model server (OpenAI-compatible; default $OPENAI_BASE_URL)"},
        {"max-turns", 0, CLI_OPT_INT, &max_turns, "N", "agent turn limit (default 200)", 1, 100000},
        {"rules", 0, CLI_OPT_STRING, &ro.rules, "cuda-agent|kernelbench",
         "the evaluator's rule set (default cuda-agent)"},
        {"no-compile-baseline", 0, CLI_OPT_FLAG, &ro.no_compile_baseline, NULL,
         "time eager only (KernelBench's baseline), not torch.compile"},
        {"budget-ms", 0, CLI_OPT_INT, &budget_ms, "MS", "timing budget per measured function", 10,
         600000},
        {"timeout", 0, CLI_OPT_INT, &timeout_s, "SEC", "candidate wall clock (default 120)", 1,
         3600},
        {"evaluator", 0, CLI_OPT_STRING, &ro.evaluator, "SOCKET",
         "use this evaluator service (default $CUDA_AGENT_EVALUATOR; else one is started)"},
        CLI_BUS_OPTS(&bus),
        {"device", 0, CLI_OPT_STRING, &ro.device, "cuda|cpu",
         "the started evaluator's device (default cuda)"},
        {"runners", 0, CLI_OPT_INT, &runners, "N", "with --device cpu: the started runners", 1, 64},
        {"jobs", 'j', CLI_OPT_INT, &jobs, "N", "attempts at once (default 4)", 1, 256},
        {"retry-infra", 0, CLI_OPT_FLAG, &retry_infra, NULL,
         "run again the attempts that ended without a verdict (infrastructure failures)"},
        {"retime-noisy", 0, CLI_OPT_FLAG, &retime_noisy, NULL,
         "run again the correct attempts whose timing was noisy (e.g. with --jobs 1)"},
        {"no-html", 0, CLI_OPT_FLAG, &no_html, NULL, "do not write RUN.html and RUN.md"},
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL, "JSON lines on stdout (start, done, end)"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent bench run --db RUN.sqlite [options] [TASKS]",
        .summary = "Evaluate solutions (or the agent) on a task suite; results in SQLite.",
        .description =
            "TASKS is a KernelBench-style tree (level1/N_Name.py ...) or a JSONL task set; with\n"
            "--map DATA.json (the leaderboard corpus) the tasks are its problem files. One\n"
            "source of solutions: --solutions DIR (level_L_problem_N_sample_S_kernel.py as\n"
            "KernelBench writes them, or levelL/N_Name.py; a task without a file counts as\n"
            "failed), --map FILE (JSONL {\"task\", \"solution\", \"label\"?, \"level\"?}, paths\n"
            "relative to FILE), --workspaces DIR, --replay DIR (the best snapshot of each\n"
            "`cuda-agent run --out` folder in DIR, its task from its trajectory), or --model M\n"
            "(an agent episode per task).\n\n"
            "Running the same command again resumes the run (finished attempts are kept, the\n"
            "rest run); other settings on an existing database are refused. At the end the\n"
            "table is printed and RUN.html and RUN.md are written beside the database;\n"
            "evaluator and agent files go to RUN.files/.\n\n"
            "With --redis URL (or CUDA_AGENT_REDIS) the attempts are queued on the job bus and\n"
            "evaluated by its workers (`cuda-agent worker`), with the workers' device and\n"
            "settings; no evaluator is started here. With --model the agents' ./compile,\n"
            "./verify, ./profile and final scoring go to the bus too (`cuda-agent run "
            "--redis`).\n\n"
            "Ctrl-C: no new attempts start; the running ones finish and are kept. Twice: they\n"
            "are abandoned (and run again on resume).\n\n"
            "Exit status: 0 every attempt finished; 1 the run failed; 2 usage; 3 a bad map or\n"
            "database; 4 a task, file or folder does not exist; 69 no evaluator; 75 some\n"
            "attempts could not be evaluated (run again to retry them; with --redis also\n"
            "when Redis was unreachable, the queue stayed full or no result came in time);\n"
            "130 interrupted.",
        .opts = opts,
        .min_args = 0,
        .max_args = 1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    const char *tasks_arg = nargs ? args[0] : NULL;
    free(args);
    int sources = !!po.solutions + !!po.map + !!po.workspaces + !!po.replay + !!ro.model;
    if (!db)
        return cli_usage_error("bench run", "--db RUN.sqlite is required");
    if (sources != 1)
        return cli_usage_error("bench run", "give one source of solutions: --solutions, --map, "
                                            "--workspaces, --replay or --model");
    if (po.label && !po.map)
        return cli_usage_error("bench run", "--label needs --map");
    if (!tasks_arg && !po.map)
        return cli_usage_error("bench run", "expected TASKS (a KernelBench tree or JSONL)");
    if (ro.rules && strcmp(ro.rules, "cuda-agent") && strcmp(ro.rules, "kernelbench"))
        return cli_usage_error("bench run", "--rules must be cuda-agent or kernelbench");
    if (ro.model && ((ro.rules && strcmp(ro.rules, "cuda-agent")) || ro.no_compile_baseline))
        return cli_usage_error("bench run",
                               "--model: episodes are scored as `cuda-agent run` scores them, "
                               "under SKILL.md's rules with both baselines; --rules kernelbench "
                               "and --no-compile-baseline are for solutions");
    if (ro.device && strcmp(ro.device, "cuda") && strcmp(ro.device, "cpu"))
        return cli_usage_error("bench run", "--device must be cuda or cpu");
    if ((rc = cli_bus_setup("bench run", &bus, &ro.evaluator, "--evaluator")))
        return rc;
    const char *redis = bus.url;
    if (redis && (ro.device || runners != 1))
        return cli_usage_error("bench run", "--device and --runners are the started evaluator's; "
                                            "with --redis the workers' own settings apply");
    if (redis) {
        ro.eval = cli_bus_eval;
        ro.eval_ctx = &bus;
        /* The agent children (`cuda-agent run`) reach the bus themselves: the URL in their
         * environment, the waits as options. */
        if (ro.model &&
            (setenv("CUDA_AGENT_REDIS", redis, 1) || unsetenv("CUDA_AGENT_EVALUATOR"))) {
            fprintf(stderr, "cuda-agent: error: cannot set CUDA_AGENT_REDIS for the agents\n");
            return CLI_FAILED;
        }
        ro.agent_args = bus.child_args;
    }

    char *stem = run_stem(db);
    char *files = xstrfmt("%s.files", stem), *html = xstrfmt("%s.html", stem),
         *md = xstrfmt("%s.md", stem);
    char *abs_tasks = abs_or_copy(tasks_arg), *abs_sol = abs_or_copy(po.solutions),
         *abs_map = abs_or_copy(po.map), *abs_ws = abs_or_copy(po.workspaces),
         *abs_replay = abs_or_copy(po.replay);
    json_t *cfg = json_object();
    set_str(cfg, "tasks_source", abs_tasks);
    set_str(cfg, "levels", po.levels);
    set_str(cfg, "tasks", po.tasks);
    if (sample)
        json_object_set_new(cfg, "sample", json_integer(sample));
    json_object_set_new(cfg, "seed", json_integer(seed));
    set_str(cfg, "mode",
            ro.model        ? "agent"
            : po.workspaces ? "workspaces"
            : po.replay     ? "replay"
            : po.solutions  ? "solutions"
                            : "map");
    set_str(cfg, "source",
            ro.model     ? ro.model
            : abs_ws     ? abs_ws
            : abs_replay ? abs_replay
            : abs_sol    ? abs_sol
                         : abs_map);
    set_str(cfg, "label", po.label);
    set_str(cfg, "rules", ro.rules ? ro.rules : "cuda-agent");
    json_object_set_new(cfg, "no_compile_baseline", json_boolean(ro.no_compile_baseline));
    if (budget_ms)
        json_object_set_new(cfg, "budget_ms", json_integer(budget_ms));
    if (timeout_s)
        json_object_set_new(cfg, "timeout_s", json_integer(timeout_s));
    set_str(cfg, "base_url", ro.base_url);
    if (max_turns)
        json_object_set_new(cfg, "max_turns", json_integer(max_turns));

    struct ca_err err = {0};
    struct bench_store *s = NULL;
    struct bench_plan plan = {0};
    struct bench_run_stats st = {0};
    int exit_code = CLI_OK;
    bool created = access(db, F_OK) != 0;
    if ((rc = fs_mkdirs(files, 0755, &err)) || (rc = bench_store_open(db, cfg, &s, &err))) {
        exit_code = cli_fail(&err);
        goto out;
    }
    char *files_abs = abs_or_copy(files);
    free(files);
    files = files_abs;
    po.tasks_source = abs_tasks;
    po.sample = sample;
    po.seed = (uint64_t)seed;
    po.solutions = abs_sol;
    po.map = abs_map;
    po.workspaces = abs_ws;
    po.replay = abs_replay;
    po.model = ro.model;
    po.files_dir = files;
    if ((rc = bench_plan_build(&po, s, &plan, &err))) {
        exit_code = cli_fail(&err);
        if (created) { /* a run refused at planning leaves nothing behind */
            bench_store_free(s);
            s = NULL;
            const char *sfx[] = {"", "-wal", "-shm"};
            for (size_t i = 0; i < ARRAY_SIZE(sfx); i++) {
                char *p = xstrfmt("%s%s", db, sfx[i]);
                unlink(p);
                free(p);
            }
            if (fs_remove_tree(files, NULL))
                fprintf(stderr, "cuda-agent: warning: could not remove %s\n", files);
        }
        goto out;
    }
    for (size_t i = 0; i < plan.nwarnings; i++)
        fprintf(stderr, "cuda-agent: warning: %s\n", plan.warnings[i]);
    if (retry_infra) {
        size_t reset = 0;
        if ((rc = bench_store_reset_infra(s, &reset, &err))) {
            exit_code = cli_fail(&err);
            goto out;
        }
        if (reset)
            fprintf(stderr, "bench: %zu attempt(s) without a verdict run again\n", reset);
    }
    if (retime_noisy) {
        size_t reset = 0;
        if ((rc = bench_store_reset_noisy(s, &reset, &err))) {
            exit_code = cli_fail(&err);
            goto out;
        }
        fprintf(stderr, "bench: %zu correct attempt(s) with noisy timing run again\n", reset);
    }
    /* Only a run with work to do touches the database: a finished one run again changes
     * nothing. */
    bool work = false;
    for (size_t i = 0; i < plan.n && !work; i++) {
        bool done = false;
        if ((rc = bench_store_finished(s, plan.attempts[i].id, &done, &err))) {
            exit_code = cli_fail(&err);
            goto out;
        }
        work = !done;
    }
    if (work)
        record_environment(s, !redis && !(ro.device && strcmp(ro.device, "cpu") == 0));

    ro.bin = eval_sandbox_bin();
    if (!ro.bin) {
        err_setf(&err, CA_EUNAVAIL, "cannot find this program (/proc/self/exe)");
        exit_code = cli_fail(&err);
        goto out;
    }
    ro.device = ro.device ? ro.device : "cuda";
    ro.jobs = (int)jobs;
    ro.runners = (int)runners;
    ro.budget_ms = budget_ms;
    ro.timeout_ms = timeout_s * 1000;
    ro.max_turns = max_turns;
    ro.files_dir = files;
    ro.json_lines = as_json;
    ro.tty = !as_json && isatty(STDERR_FILENO);
    ro.stop = &stop_count;
    struct sigaction sa = {.sa_handler = on_signal};
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)signal(SIGPIPE, SIG_IGN);
    rc = bench_run(&ro, s, &plan, &st, &err);
    if (rc) {
        exit_code = cli_fail(&err);
        goto out;
    }
    if (stop_count >= 2) { /* workers may still run: leave at once, the store is consistent */
        fprintf(stderr, "bench: abandoned the running attempts; run the same command to resume\n");
        bench_store_free(s);
        _exit(130);
    }
    if (!no_html && (rc = write_reports(s, html, md, &err))) {
        exit_code = cli_fail(&err);
        goto out;
    }
    if (!as_json) {
        (void)print_report(s, false, &err);
        if (!no_html)
            printf("report: %s (and %s)\n", html, md);
    }
    if (st.interrupted) {
        fprintf(stderr,
                "bench: interrupted: %zu of %zu attempt(s) finished; run the same "
                "command to resume\n",
                st.skipped + st.done, st.total);
        exit_code = 130;
    } else if (st.errors) {
        fprintf(stderr, "bench: %zu attempt(s) could not be evaluated; run again to retry them\n",
                st.errors);
        exit_code = CLI_TEMPFAIL;
    }
out:
    bench_plan_release(&plan);
    bench_store_free(s);
    json_decref(cfg);
    free(stem);
    free(files);
    free(html);
    free(md);
    free(abs_tasks);
    free(abs_sol);
    free(abs_map);
    free(abs_ws);
    free(abs_replay);
    return exit_code;
}

static int bench_report_cmd(int argc, char **argv)
{
    bool as_json = false;
    const char *html = NULL, *md = NULL;
    const struct cli_opt opts[] = {
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL,
         "metrics, fast_p, published rows and every task as JSON"},
        {"html", 0, CLI_OPT_STRING, &html, "FILE", "write the HTML report here"},
        {"md", 0, CLI_OPT_STRING, &md, "FILE", "write the Markdown summary here"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent bench report [--json] [--html FILE] [--md FILE] RUN.sqlite",
        .summary = "Print a run's metrics per level and overall (also while it runs).",
        .description = "Exit status: 0 printed; 3 not a bench database; 4 no such file.",
        .opts = opts,
        .min_args = 1,
        .max_args = 1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    struct ca_err err = {0};
    struct bench_store *s = NULL;
    rc = bench_store_open(args[0], NULL, &s, &err);
    free(args);
    if (rc)
        return cli_fail(&err);
    if ((html || md) && (rc = write_reports(s, html, md, &err))) {
        bench_store_free(s);
        return cli_fail(&err);
    }
    rc = print_report(s, as_json, &err);
    bench_store_free(s);
    return rc ? cli_fail(&err) : CLI_OK;
}

static int bench_compare_cmd(int argc, char **argv)
{
    bool as_json = false;
    const struct cli_opt opts[] = {
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL, "both runs' metrics and every task as JSON"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent bench compare [--json] RUN_A.sqlite RUN_B.sqlite",
        .summary = "Two runs side by side: metrics, then task by task (matched by name).",
        .description = "Exit status: 0 printed; 3 not a bench database; 4 no such file.",
        .opts = opts,
        .min_args = 2,
        .max_args = 2,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    struct ca_err err = {0};
    struct bench_store *a = NULL, *b = NULL;
    json_t *ea = NULL, *eb = NULL;
    int exit_code = CLI_OK;
    if ((rc = bench_store_open(args[0], NULL, &a, &err)) ||
        (rc = bench_store_open(args[1], NULL, &b, &err)) ||
        (rc = bench_store_export(a, false, &ea, &err)) ||
        (rc = bench_store_export(b, false, &eb, &err))) {
        exit_code = cli_fail(&err);
        goto out;
    }
    if (as_json) {
        json_t *j = bench_compare_json(ea, eb);
        cli_print_json(j);
        json_decref(j);
    } else {
        struct buf out;
        buf_init(&out, (size_t)1 << 30);
        if (bench_compare_text(ea, eb, args[0], args[1], &out) == 0)
            fputs(out.data, stdout);
        buf_release(&out);
    }
out:
    json_decref(ea);
    json_decref(eb);
    bench_store_free(a);
    bench_store_free(b);
    free(args);
    return exit_code;
}

int cmd_bench(int argc, char **argv)
{
    static const struct cli_sub subs[] = {
        {"run", bench_run_cmd, "evaluate a task suite's solutions (or the agent) into RUN.sqlite"},
        {"report", bench_report_cmd, "print a run's metrics; write its HTML and Markdown"},
        {"compare", bench_compare_cmd, "two runs side by side, task by task"},
    };
    return cli_dispatch("bench", subs, ARRAY_SIZE(subs), argc, argv);
}
