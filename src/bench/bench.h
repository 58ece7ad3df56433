/*
 * bench.h - `cuda-agent bench`: a suite of KernelBench tasks scored the way the paper scores
 * them. Four parts, one-way on core, task and eval (nothing else uses bench):
 *
 *   plan     which tasks (a KernelBench tree or JSONL set; --levels, --tasks, a stratified
 *            --sample) and, per task, the attempts to evaluate: KernelBench-format files
 *            (--solutions DIR in KernelBench's layouts, or a --map file, incl. the leaderboard
 *            corpus's data.json), workspaces (--workspaces DIR) or agent episodes (--model);
 *   store    one SQLite database per run (WAL): the run's settings, environment, tasks,
 *            attempts, every evaluator report whole, timings, baselines, agent results. An
 *            attempt is written once, in one transaction, when it finishes: a killed run
 *            loses only what was running, and re-running a finished run changes nothing;
 *   runner   the attempts in parallel (--jobs) through the evaluator service (a running one,
 *            or one started for the run), or through an evaluation callback the caller hands
 *            down (src/cli's job bus client: bench does not depend on bus/), with progress on
 *            a terminal or JSON lines;
 *   metrics  pass rate, faster-than-eager / -compile rates and geometric-mean speedups per
 *            level and overall (DESIGN.md section 1), fast_p, the reward histogram and the
 *            fraction of the hardware's peak; text, JSON, Markdown and one self-contained HTML
 *            page; two runs side by side.
 *
 * How tasks count (docs/internals/bench.md): each task is scored by its best finished attempt.
 * A task whose every finished attempt was an infrastructure failure (the evaluator could not
 * give a verdict) or that has not finished yet has no verdict: it is counted apart and left out
 * of every rate's denominator. Rates are over the tasks with a verdict; a failed task counts in
 * their denominators and never in a numerator; "faster" is a strictly larger speedup than 1
 * (a tie is not faster); the geometric means are over correct tasks only (the paper's
 * definition), so failures do not enter them.
 *
 * Not thread-safe: one store per thread; the runner's workers never touch the store (the
 * calling thread records what they hand back).
 */
#ifndef CA_BENCH_H
#define CA_BENCH_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "eval/eval.h"

/* Limits of what a bench run reads from outside (the map file, a solutions folder). */
#define BENCH_LIMIT_MAP_BYTES (64 * 1024 * 1024)
#define BENCH_LIMIT_ATTEMPTS 1000000
#define BENCH_LIMIT_SOLUTION_BYTES (4 * 1024 * 1024)
#define BENCH_MAX_LEVEL 16
#define BENCH_SCHEMA "cuda-agent-bench"
#define BENCH_SCHEMA_VERSION 1

/* ---- metrics ----------------------------------------------------------------------------- */

enum bench_verdict {
    BENCH_PENDING = 0, /* no finished attempt */
    BENCH_INFRA,       /* finished, but the evaluator gave no verdict */
    BENCH_FAILED,      /* compile, policy or verification failed (reward -1) */
    BENCH_CORRECT,     /* verified (reward >= 1) */
};

/* One task's result: its best finished attempt. Speedups and peak_fraction are NAN when
 * absent (not measured, or not correct). */
struct bench_outcome {
    const char *task_id; /* borrowed */
    int level;           /* 0: none */
    enum bench_verdict verdict;
    int reward; /* -1, 1, 2, 3; 0 without a verdict */
    double speedup_eager, speedup_compile;
    double peak_fraction;
    bool timing_noisy;
};

struct bench_level_metrics {
    int level; /* -1: overall */
    size_t tasks, verdicts, pending, infra;
    size_t correct, faster_eager, faster_compile;
    size_t compile_measured; /* correct tasks with a torch.compile speedup */
    double pass_rate, faster_eager_rate, faster_compile_rate; /* NAN without verdicts */
    double geomean_eager, geomean_compile; /* NAN without correct (measured) tasks */
    size_t reward_hist[4];                 /* rewards -1, 1, 2, 3 */
    double peak_fraction_median;           /* NAN when none reported */
    size_t peak_fraction_n;
    size_t noisy; /* correct tasks whose reward rests on a noisy timing */
};

struct bench_metrics {
    struct bench_level_metrics overall;
    struct bench_level_metrics levels[BENCH_MAX_LEVEL + 1]; /* index = level; .tasks 0: absent */
};

/* The outcome a better attempt gives: correct beats failed beats infra beats pending; then the
 * higher reward, the higher torch.compile speedup, the higher eager speedup. */
bool bench_outcome_better(const struct bench_outcome *a, const struct bench_outcome *b);
/* Fill o's verdict, reward, speedups and peak_fraction from an evaluator report. */
void bench_outcome_from_report(const json_t *report, struct bench_outcome *o);
void bench_metrics_compute(const struct bench_outcome *o, size_t n, struct bench_metrics *m);
/* KernelBench's fast_p: the share of tasks with a verdict (level < 0: all levels) that are
 * correct and more than p times faster than the baseline (eager, or torch.compile). */
double bench_fast_p(const struct bench_outcome *o, size_t n, int level, double p, bool vs_compile);
json_t *bench_metrics_json(const struct bench_metrics *m);

/* ---- store ------------------------------------------------------------------------------- */

struct bench_store;

/* An attempt as planned: what to evaluate for one task. */
enum bench_kind {
    BENCH_KIND_FILE,      /* a KernelBench-format file (source: its path) */
    BENCH_KIND_WORKSPACE, /* a workspace folder (source: its path) */
    BENCH_KIND_AGENT,     /* an agent episode (source: the model) */
    BENCH_KIND_MISSING,   /* no solution for the task: recorded as a failure, not evaluated */
};

struct bench_attempt {
    int64_t id; /* the store's */
    char *task_id, *task_path, *key, *source, *label;
    int level;
    enum bench_kind kind;
    json_t *extra; /* e.g. the leaderboard's speedup; may be NULL */
};
void bench_attempt_release(struct bench_attempt *a);

/*
 * Open (or create) the run database at path. A new database gets the schema and config (the
 * run's settings as JSON); an existing one must be a bench database of this schema version
 * whose stored settings equal config (CA_EPARSE otherwise, naming the difference). config
 * NULL opens an existing run read-only (report, compare).
 */
int bench_store_open(const char *path, const json_t *config, struct bench_store **out,
                     struct ca_err *err) WARN_UNUSED_RESULT;
void bench_store_free(struct bench_store *s);
/* The stored settings (borrowed). */
const json_t *bench_store_config(const struct bench_store *s);

/* Record the task (if new) and the attempt (if new; a.id receives its id either way), in the
 * caller's transaction (bench_store_begin / _commit). */
int bench_store_begin(struct bench_store *s, struct ca_err *err) WARN_UNUSED_RESULT;
int bench_store_commit(struct bench_store *s, struct ca_err *err) WARN_UNUSED_RESULT;
void bench_store_rollback(struct bench_store *s);
int bench_store_add_task(struct bench_store *s, const char *id, const char *name, int level,
                         const char *origin, uint64_t hash, const char *code,
                         struct ca_err *err) WARN_UNUSED_RESULT;
int bench_store_plan(struct bench_store *s, struct bench_attempt *a,
                     struct ca_err *err) WARN_UNUSED_RESULT;
/* Whether the attempt has finished (its report is stored). */
int bench_store_finished(struct bench_store *s, int64_t attempt_id, bool *done,
                         struct ca_err *err) WARN_UNUSED_RESULT;

/* What the runner measured around one attempt. */
struct bench_timing {
    int64_t started_us, finished_us; /* wall clock (CLOCK_REALTIME) */
    double wall_ms;                  /* the attempt as the runner saw it */
};
/* Record a finished attempt: the report (whole), its timing and, for agent runs, the
 * episode's result (may be NULL), in one transaction. Recording twice keeps the first. */
int bench_store_record(struct bench_store *s, int64_t attempt_id, const json_t *report,
                       const struct bench_timing *t, const json_t *agent,
                       struct ca_err *err) WARN_UNUSED_RESULT;
/* Best effort: the environment describes the run, it never decides a result. */
/* Forget the results of attempts that ended in an infrastructure failure (no verdict), so that
 * they run again; *n receives how many. One transaction. */
int bench_store_reset_infra(struct bench_store *s, size_t *n,
                            struct ca_err *err) WARN_UNUSED_RESULT;
/* The same for the correct attempts whose timing was noisy (a `noisy_timing` flag: measured
 * while the host was busy), so that they are timed again, e.g. with --jobs 1 once the compile
 * load is gone. */
int bench_store_reset_noisy(struct bench_store *s, size_t *n,
                            struct ca_err *err) WARN_UNUSED_RESULT;
int bench_store_set_env(struct bench_store *s, const char *key, const char *value,
                        struct ca_err *err);

/* Everything a report needs, as one JSON object: {"config", "environment", "tasks": [{id, name,
 * level, verdict, best: {...}, attempts: [{key, label, source, kind, status, stage, reward,
 * speedup_eager, speedup_compile, peak_fraction, message, wall_ms, compile_ms, harness_ms,
 * report?, agent?}]}], "timing": {...}}. with_reports: include each report whole. */
int bench_store_export(struct bench_store *s, bool with_reports, json_t **out,
                       struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- plan -------------------------------------------------------------------------------- */

struct bench_plan_opts {
    const char *tasks_source; /* KernelBench tree or JSONL; NULL with a leaderboard map */
    const char *levels;       /* "1,2" or NULL */
    const char *tasks;        /* comma-separated selectors or NULL */
    int64_t sample;           /* 0: all */
    uint64_t seed;
    const char *solutions;  /* KernelBench-format files (KernelBench layouts) */
    const char *map;        /* JSONL {task, solution, label?} or the leaderboard's data.json */
    const char *label;      /* with map: only this label's solutions */
    const char *workspaces; /* DIR/<task name or id>/ */
    const char *replay;     /* `cuda-agent run` outputs: DIR or DIR/<run>/ with trajectory.jsonl */
    const char *model;      /* agent episodes */
    const char *files_dir;  /* where task files are written for the evaluator (made) */
};

struct bench_plan {
    struct bench_attempt *attempts;
    size_t n, alloc;
    size_t ntasks;
    char **warnings;
    size_t nwarnings, warnings_alloc;
};
void bench_plan_release(struct bench_plan *p);
/* Build the plan and record tasks and attempts in the store (one transaction). */
int bench_plan_build(const struct bench_plan_opts *o, struct bench_store *s, struct bench_plan *p,
                     struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- runner ------------------------------------------------------------------------------ */

/*
 * An evaluation done elsewhere (e.g. on a worker of the job bus): *report as from eval_run;
 * non-zero (with err set) when no report came, which leaves the attempt unfinished. Called
 * from the runner's worker threads, up to --jobs at once, with the caller's ctx.
 */
typedef int bench_eval_fn(void *ctx, const struct eval_opts *o, json_t **report,
                          struct ca_err *err);

struct bench_run_opts {
    const char *bin;       /* this program (for the evaluator and agent children) */
    const char *evaluator; /* a running service's socket; NULL: start one (unless eval) */
    /* When set, every solution, workspace and replay attempt is evaluated by eval(eval_ctx,
     * ...) and no evaluator service is started. Agent episodes (`cuda-agent run` children)
     * then get no --evaluator: they evaluate as their environment and agent_args say (the
     * caller's to set, e.g. the job bus's URL and waits). */
    bench_eval_fn *eval;
    void *eval_ctx;
    /* NULL-terminated; appended to the `cuda-agent run` children's arguments */
    const char *const *agent_args;
    const char *device; /* "cuda" (default) or "cpu" */
    const char *rules;  /* passed through */
    bool no_compile_baseline;
    int64_t budget_ms, timeout_ms;
    int jobs;              /* attempts at once */
    int runners;           /* with a started CPU evaluator: its runners */
    const char *files_dir; /* evaluator socket/log and agent outputs go here */
    const char *model, *base_url;
    int64_t max_turns;
    bool json_lines; /* one JSON line per event on stdout */
    bool tty;        /* a live status line on stderr */
    volatile sig_atomic_t *stop;
};

struct bench_run_stats {
    size_t total, skipped, done, failed, infra, errors;
    double wall_s;
    double evaluator_start_s; /* starting the evaluator service (0: a running one was used) */
    bool interrupted;
};

int bench_run(const struct bench_run_opts *o, struct bench_store *s, const struct bench_plan *p,
              struct bench_run_stats *st, struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- reports ----------------------------------------------------------------------------- */

/* From bench_store_export's object (with or without reports): outcomes borrow its strings. */
int bench_outcomes_from_export(const json_t *ex, struct bench_outcome **out, size_t *n,
                               struct ca_err *err) WARN_UNUSED_RESULT;
int bench_report_text(const json_t *ex, struct buf *out) WARN_UNUSED_RESULT;
/* {"metrics", "fast_p", "tasks": [...], "config", "environment", "timing"} */
json_t *bench_report_json(const json_t *ex);
int bench_report_markdown(const json_t *ex, struct buf *out) WARN_UNUSED_RESULT;
int bench_report_html(const json_t *ex, struct buf *out) WARN_UNUSED_RESULT;
/* Two runs side by side: metrics, then every task in either with both outcomes. */
int bench_compare_text(const json_t *a, const json_t *b, const char *name_a, const char *name_b,
                       struct buf *out) WARN_UNUSED_RESULT;
json_t *bench_compare_json(const json_t *a, const json_t *b);

/* The paper's published numbers (DESIGN.md section 1) for the reports. */
struct bench_published {
    const char *system;
    double pass_rate, faster_eager_rate, faster_compile_rate, geomean_compile; /* NAN: n/a */
};
extern const struct bench_published bench_published[];
extern const size_t bench_npublished;

#endif
