/*
 * cmd_synth.c - `cuda-agent synth run|catalog|report|export`: the front end of src/synth.
 * SIGINT/SIGTERM stop handing out seeds; what was recorded stays, and the same command resumes.
 */
#include "cli/cli.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "synth/synth.h"
#include "core/banned.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* "0-99" or "42" into lo, hi. */
static int parse_seeds(const char *s, int64_t *lo, int64_t *hi)
{
    char *end;
    long long a = strtoll(s, &end, 10), b = a;
    if (end == s || a < 0)
        return -1;
    if (*end == '-') {
        const char *p = end + 1;
        b = strtoll(p, &end, 10);
        if (end == p)
            return -1;
    }
    if (*end || b < a)
        return -1;
    *lo = a;
    *hi = b;
    return 0;
}

static int parse_ms(const char *cmd, const char *what, const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v < 0)
        return cli_usage_error(cmd, "--%s %s: a number of milliseconds >= 0", what, s);
    *out = v;
    return 0;
}

static int synth_run_cmd(int argc, char **argv)
{
    struct synth_opts o;
    synth_opts_init(&o);
    const char *seeds = NULL, *min_ms = NULL, *max_ms = NULL, *max_sim = NULL;
    int64_t jobs = 1, threads = 1, timeout_s = 120, want = 0, timing_ms = 300;
    bool no_parquet = false, as_json = false;
    const struct cli_opt opts[] = {
        {"out", 'o', CLI_OPT_STRING, &o.out_dir, "DIR",
         "output folder: synth.db (the store), catalog.json, tasks.jsonl, tasks.parquet, "
         "report.md, report.html, worker.log"},
        {"seeds", 0, CLI_OPT_STRING, &seeds, "LO-HI", "seeds to compose (default 0-99)"},
        {"want", 0, CLI_OPT_INT, &want, "N", "stop once the store holds N accepted tasks", 0,
         100000000},
        {"catalog", 0, CLI_OPT_STRING, &o.catalog, "FILE",
         "operator catalog (default DIR/catalog.json, crawled on the first run)"},
        {"ops", 0, CLI_OPT_STRING, &o.ops, "LIST",
         "compose only these catalog operators (comma-separated)"},
        {"depths", 0, CLI_OPT_STRING, &o.depths, "D:W,...",
         "depth weights, e.g. 1:5,2:83.8,3:8,4:2.2,5:1 (the default)"},
        {"allow-stochastic", 0, CLI_OPT_FLAG, &o.allow_stochastic, NULL,
         "let the composer draw stochastic operators (the filters still reject them)"},
        {"device", 0, CLI_OPT_STRING, &o.device, "DEV", "auto (cuda when present), cpu or cuda"},
        {"compile-backend", 0, CLI_OPT_STRING, &o.compile_backend, "NAME",
         "torch.compile backend (default inductor; aot_eager is quicker on a CPU)"},
        {"min-ms", 0, CLI_OPT_STRING, &min_ms, "MS", "shortest eager runtime kept (default 1)"},
        {"max-ms", 0, CLI_OPT_STRING, &max_ms, "MS", "longest eager runtime kept (default 100)"},
        {"decontaminate", 0, CLI_OPT_STRING, &o.corpus, "DIR",
         "reject tasks whose AST similarity to any .py under DIR is above --max-similarity"},
        {"max-similarity", 0, CLI_OPT_STRING, &max_sim, "X", "similarity bound (default 0.9)"},
        {"jobs", 'j', CLI_OPT_INT, &jobs, "N", "worker processes (default 1)", 1, SYNTH_MAX_JOBS},
        {"threads", 0, CLI_OPT_INT, &threads, "N", "torch threads per worker (default 1)", 1, 256},
        {"timeout", 0, CLI_OPT_INT, &timeout_s, "S",
         "seconds one task may take before it is rejected (default 120)", 1, 86400},
        {"llm-model", 0, CLI_OPT_STRING, &o.llm_model, "NAME",
         "LLM mode: a model rewrites each composition (OpenAI-compatible; API key from "
         "CUDA_AGENT_API_KEY or OPENAI_API_KEY)"},
        {"llm-base-url", 0, CLI_OPT_STRING, &o.llm_base_url, "URL",
         "the model server (default CUDA_AGENT_BASE_URL or OPENAI_BASE_URL)"},
        {"timing-ms", 0, CLI_OPT_INT, &timing_ms, "MS",
         "time spent timing each of eager and compiled per task (default 300)", 1, 60000},
        {"no-parquet", 0, CLI_OPT_FLAG, &no_parquet, NULL, "write tasks.jsonl only"},
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL, "print the run's counts as JSON"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent synth run --out DIR [options]",
        .summary = "Compose tasks from the operator catalog and keep those that pass every filter.",
        .description =
            "Each seed gives one candidate: 1-5 catalog operators in sequence, as a\n"
            "KernelBench-format task. Filters, in order: static (no stochastic operator),\n"
            "similarity (with --decontaminate), eager, deterministic, informative (output\n"
            "not constant, differs across inputs), runtime (eager in [--min-ms, --max-ms]),\n"
            "compile (torch.compile agrees with eager), duplicate. Every candidate is\n"
            "recorded in DIR/synth.db with its reason; running again resumes and skips the\n"
            "seeds already there. tasks.jsonl is a task source: cuda-agent data list\n"
            "DIR/tasks.jsonl, cuda-agent workspace create --task DIR/tasks.jsonl:ID.",
        .opts = opts,
        .min_args = 0,
        .max_args = 0,
    };
    int rc;
    if (!cli_parse_cmd(&spec, argc, argv, NULL, NULL, &rc))
        return rc;
    if (!o.out_dir)
        return cli_usage_error("synth run", "give an output folder with --out DIR");
    if (seeds && parse_seeds(seeds, &o.seed_lo, &o.seed_hi))
        return cli_usage_error("synth run", "--seeds %s: write LO-HI (e.g. 0-999) or one seed",
                               seeds);
    if ((min_ms && (rc = parse_ms("synth run", "min-ms", min_ms, &o.min_ms))) ||
        (max_ms && (rc = parse_ms("synth run", "max-ms", max_ms, &o.max_ms))) ||
        (max_sim && (rc = parse_ms("synth run", "max-similarity", max_sim, &o.max_similarity))))
        return rc;
    o.jobs = (int)jobs;
    o.threads = (int)threads;
    o.timeout_ms = timeout_s * 1000;
    o.timing_ms = timing_ms;
    o.want = want;
    o.parquet = !no_parquet;
    o.progress = !as_json && isatty(STDERR_FILENO);
    o.stop = &stop_flag;
    struct sigaction sa = {.sa_handler = on_signal};
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)signal(SIGPIPE, SIG_IGN);
    struct synth_stats st;
    struct ca_err err = {0};
    rc = synth_run(&o, &st, &err);
    if (rc)
        return cli_fail(&err);
    double per_hour = st.wall_s > 0 ? (double)st.accepted * 3600.0 / st.wall_s : 0;
    if (as_json) {
        json_t *v = json_pack(
            "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:b}", "planned", (json_int_t)st.planned,
            "done", (json_int_t)st.done, "accepted", (json_int_t)st.accepted, "duplicates",
            (json_int_t)st.duplicates, "timeouts", (json_int_t)st.timeouts, "crashes",
            (json_int_t)st.crashes, "total_accepted", (json_int_t)st.total_accepted, "wall_s",
            st.wall_s, "accepted_per_hour", per_hour, "interrupted", st.interrupted);
        cli_print_json(v);
        json_decref(v);
    } else {
        printf(
            "synth: %lld candidate(s) filtered, %lld accepted (%lld duplicate(s), %lld "
            "timeout(s), %lld crash(es)) in %.1f s: %.0f accepted/hour; %lld in %s/tasks.jsonl\n",
            (long long)st.done, (long long)st.accepted, (long long)st.duplicates,
            (long long)st.timeouts, (long long)st.crashes, st.wall_s, per_hour,
            (long long)st.total_accepted, o.out_dir);
    }
    if (st.interrupted) {
        fprintf(stderr, "synth: interrupted; %lld recorded, the same command resumes\n",
                (long long)st.done);
        return 130;
    }
    return CLI_OK;
}

static int synth_catalog_cmd(int argc, char **argv)
{
    const char *out = NULL, *extra = NULL;
    bool no_tf = false;
    const struct cli_opt opts[] = {
        {"out", 'o', CLI_OPT_STRING, &out, "FILE", "write the catalog here (default: stdout)"},
        {"extra", 0, CLI_OPT_STRING, &extra, "FILE",
         "user entries (a JSON object of name -> entry) merged over the crawl"},
        {"no-transformers", 0, CLI_OPT_FLAG, &no_tf, NULL, "do not crawl transformers"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent synth catalog [-o FILE] [--extra FILE]",
        .summary = "Crawl the installed torch (and transformers) into an operator catalog.",
        .description =
            "Introspection gives the operators and their signatures; a checked-in rule table\n"
            "(harness/synth_catalog.py) gives input ranks, shape rules and size templates.\n"
            "Operators without a rule are listed under \"uncovered\" with the reason.",
        .opts = opts,
        .min_args = 0,
        .max_args = 0,
    };
    int rc;
    if (!cli_parse_cmd(&spec, argc, argv, NULL, NULL, &rc))
        return rc;
    struct ca_err err = {0};
    char *tmp = NULL;
    if (!out) {
        const char *t = getenv("TMPDIR");
        tmp = xstrfmt("%s/cuda-agent-catalog-%d.json", t && *t ? t : "/tmp", (int)getpid());
    }
    const char *const ex[] = {extra};
    rc = synth_catalog(out ? out : tmp, ex, extra ? 1 : 0, !no_tf, &err);
    if (rc) {
        free(tmp);
        return cli_fail(&err);
    }
    if (tmp) {
        FILE *f = fopen(tmp, "r");
        char chunk[65536];
        size_t n;
        while (f && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
            fwrite(chunk, 1, n, stdout);
        if (f)
            fclose(f);
        unlink(tmp);
        free(tmp);
    }
    return CLI_OK;
}

static int synth_report_cmd(int argc, char **argv)
{
    bool html = false;
    const struct cli_opt opts[] = {
        {"html", 0, CLI_OPT_FLAG, &html, NULL, "print the HTML page instead of Markdown"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent synth report [--html] DIR",
        .summary =
            "Print the stats report of a synth folder (filters, depths, operators, runtimes).",
        .opts = opts,
        .min_args = 1,
        .max_args = 1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    const char *dir = args[0];
    free(args);
    struct buf b;
    buf_init(&b, BUF_MAX_INTERNAL);
    struct ca_err err = {0};
    rc = synth_report(dir, html, &b, &err);
    if (rc == 0)
        fwrite(b.data, 1, b.len, stdout);
    buf_release(&b);
    return rc ? cli_fail(&err) : CLI_OK;
}

static int synth_export_cmd(int argc, char **argv)
{
    bool no_parquet = false;
    const struct cli_opt opts[] = {
        {"no-parquet", 0, CLI_OPT_FLAG, &no_parquet, NULL, "write tasks.jsonl only"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent synth export DIR",
        .summary = "Rewrite tasks.jsonl, tasks.parquet and the reports from DIR's store.",
        .opts = opts,
        .min_args = 1,
        .max_args = 1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    const char *dir = args[0];
    free(args);
    struct ca_err err = {0};
    int64_t n;
    if (synth_export(dir, !no_parquet, &n, &err))
        return cli_fail(&err);
    printf("%lld task(s) in %s/tasks.jsonl\n", (long long)n, dir);
    return CLI_OK;
}

int cmd_synth(int argc, char **argv)
{
    static const struct cli_sub subs[] = {
        {"run", synth_run_cmd, "compose and filter tasks into a folder (resumable)"},
        {"catalog", synth_catalog_cmd, "crawl the operator catalog from the installed torch"},
        {"report", synth_report_cmd, "print a folder's stats report"},
        {"export", synth_export_cmd, "rewrite a folder's dataset files and reports"},
    };
    return cli_dispatch("synth", subs, ARRAY_SIZE(subs), argc, argv);
}
