/*
 * eval_report.h - the evaluator's report read once into a struct: the one reader of the
 * report's keys (docs/internals/eval.md lists them) for every consumer in C (the pipeline's
 * reward and message, eval_format, the episode's evaluation records, the agent's scoring).
 *
 * The report stays JSON on the wire and on disk (eval_run and evald_eval make it; the
 * harness writes its "harness" section); eval_report_read() takes what a consumer needs from
 * it. A missing or mistyped key reads as absent: "" for strings, false, 0 or NAN for
 * numbers, with a `has_` flag where absent and zero differ. Strings and `raw` are borrowed
 * from the JSON and live as long as it does, unchanged. Pure; thread-safe.
 */
#ifndef CA_EVAL_REPORT_H
#define CA_EVAL_REPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What eval_format shows of the lists; the rest is counted. */
#define EVAL_REPORT_FLAGS_MAX 64
#define EVAL_REPORT_FUNCTIONS_MAX 64

/* harness.timing.{eager,compile,candidate}. */
struct eval_report_timing {
    bool present;      /* the key is there (null or {"error": ...} included) */
    double median_ms;  /* NAN when absent or not a number */
    const char *error; /* {"error": ...}: why there is no measurement (borrowed); else "" */
    double cv;
    int64_t n;
};

struct eval_report {
    const json_t *raw; /* the report read */
    bool ok;
    const char *stage;   /* the stage the run ended at */
    const char *message; /* the failing stage's message */
    const char *task_id;

    /* "reward": absent before the reward stage (and for --compile-only / --verify-only). */
    bool has_reward;
    bool reward_is_int;
    int64_t reward; /* 0 unless reward_is_int */
    double speedup_eager, speedup_compile;
    const char *reward_reason;

    /* "kernelbench": a KernelBench-format candidate's file and its extension functions. */
    bool has_kernelbench;
    const char *kb_file;
    size_t n_kb_functions; /* all of them; the first EVAL_REPORT_FUNCTIONS_MAX are here */
    const char *kb_functions[EVAL_REPORT_FUNCTIONS_MAX];

    /* "compile" and "stage_ms"."compile". */
    bool has_compile;
    bool compile_ok;
    double compile_ms;

    /* "harness": verification and timing, as the harness reported them. */
    bool has_harness;
    bool harness_ok;
    const char *harness_stage;   /* where the harness stopped ("timing": after timing) */
    const char *failure_kind;    /* the check that failed */
    const char *failure_message; /* "" when none */
    bool has_launches;           /* verification.launches, with GPU time recorded */
    int64_t extension_kernels;
    double extension_us, total_us;
    size_t n_flags; /* all of them; the first EVAL_REPORT_FLAGS_MAX are here */
    struct {
        const char *kind, *message;
    } flags[EVAL_REPORT_FLAGS_MAX];
    struct eval_report_timing eager, compile, candidate;
    bool sol_flagged; /* timing.sol.flagged: faster than the hardware allows */
    /* A "noisy_timing" flag (issue 21): the timing the reward rests on was noisy, and which
     * decisions its noise puts at risk (the flag's decision_at_risk, borrowed, or NULL). */
    bool timing_noisy;
    const json_t *decision_at_risk;
    /* "infrastructure_error": the evaluator could not evaluate (no verdict, no reward). */
    bool infrastructure_error;
    /* "compile" and "harness"."device" as JSON, for eval_format's per-kernel and device
     * lines (borrowed; NULL when absent). */
    const json_t *compile_json, *device_json;
};

/* Read report (NULL reads as an empty report) into *out. */
void eval_report_read(const json_t *report, struct eval_report *out);

#endif
