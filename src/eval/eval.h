/*
 * eval.h - the evaluation pipeline behind `cuda-agent eval`: snapshot the
 * workspace's writable files, check them against the static policy,
 * compile them into the `cuda_extension` module, verify and time the result
 * with the harness (trusted reference process + throw-away candidate
 * process), and compute the reward.
 *
 * The evaluator trusts nothing in the workspace but the writable files it
 * snapshots (and model.py only when its hash matches the manifest, or the
 * task given explicitly). Every stage's findings go into one JSON report;
 * the first failing stage ends the evaluation with reward -1 and a message
 * the agent can act on.
 *
 * Not thread-safe per call; separate calls are independent.
 */
#ifndef CA_EVAL_H
#define CA_EVAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"

struct gpupool;

/* Where eval_run stops: at the reward (the default); after the static policy, before any
 * compiler runs (a quick check of what the stages after it would refuse outright); after
 * compiling (the workspace's ./compile); after verification (./verify). */
enum eval_stop { EVAL_STOP_REWARD = 0, EVAL_STOP_POLICY, EVAL_STOP_COMPILE, EVAL_STOP_VERIFY };

/* Each stop's name in a service or job-bus request's "mode", indexed by enum eval_stop and
 * ended by NULL: "full", "policy", "compile", "verify". */
extern const char *const eval_stop_names[];

struct eval_opts {
    const char *workspace; /* the episode workspace; NULL with kernelbench_file */
    const char *task_ref;  /* optional: the task (else the workspace's model.py) */
    /* KernelBench mode: instead of a workspace, one Python file whose ModelNew calls kernels
     * built by torch.utils.cpp_extension.load_inline; task_ref is then required. The file is
     * read statically into workspace-shaped sources (stage "extract") that the evaluator builds
     * itself: the candidate never runs load_inline. */
    const char *kernelbench_file;
    const char *device;        /* "cuda" (default) or "cpu" */
    const char *arch;          /* e.g. "sm_90"; NULL: from the GPU, else sm_90 */
    const char *timing;        /* "events", "kernel" or "device" (harness/timing.py); NULL:
                                * eval_timing's default for the rules and device */
    const char *precision;     /* "strict" (default) or "tf32" */
    const char *rules;         /* "cuda-agent" (default: SKILL.md's rules) or "kernelbench" */
    int seeds;                 /* input sets; 0: 5 */
    double atol, rtol;         /* 0: 1e-2 */
    int64_t timeout_ms;        /* candidate wall clock; 0: 120 s */
    int64_t budget_ms;         /* timing budget per measured function; 0: harness default */
    const char *cache_dir;     /* NULL: $CUDA_AGENT_CACHE_DIR or ~/.cache/cuda-agent */
    bool no_sandbox;           /* compilers run without the sandbox (hosts without namespaces) */
    bool no_candidate_sandbox; /* candidates run without the sandbox (also implied by no_sandbox) */
    enum eval_stop stop;       /* where the pipeline stops (the reward by default) */
    bool no_compile_baseline;  /* time eager only, no torch.compile baseline (reward: eager) */
    struct gpupool *pool;      /* warm GPU runners (the evaluator service); NULL: one-shot */
    const char *keep_dir;      /* when set: the evaluated files are copied here (made) */
};

/* Run the pipeline; *report is a new JSON object (also on stage failures,
 * which are not errors of this function: see report.ok / report.stage).
 * Returns a negative code only when the evaluator itself cannot run. */
int eval_run(const struct eval_opts *opts, json_t **report, struct ca_err *err) WARN_UNUSED_RESULT;

/* The report eval_run gives when the files themselves are refused before the policy (stage
 * "snapshot", or "extract" for a KernelBench file; message; reward -1), for an evaluator that
 * takes the files elsewhere (the job bus's client): refused is a candidate's verdict there too.
 * Errors only from the reward's computation. */
int eval_refused_report(const struct eval_opts *opts, const char *message, json_t **report,
                        struct ca_err *err) WARN_UNUSED_RESULT;
/* Whether an error taking the files (snapshot, extraction, task) is the candidate's: refused. */
bool eval_refusal(int code);

/* The evaluator's cache root for these options (made 0700), appended to out. */
int eval_cache_root(const struct eval_opts *opts, struct buf *out,
                    struct ca_err *err) WARN_UNUSED_RESULT;
/* The timing method these options ask for: opts->timing when set, else the default (issue
 * 21): "device" for SKILL.md's rules on a GPU (the GPU's time, not the host's: rewards that
 * hold under load), "events" for KernelBench's rules (the wall-clock cost of a call, as
 * KernelBench measures it) and on the CPU (where both are the wall clock). */
const char *eval_timing(const struct eval_opts *opts);
/* The Python interpreter with PyTorch: $CUDA_AGENT_PYTHON, else python3. */
const char *eval_python(void);
/* This program, whose `candidate-sandbox` command the harness runs every candidate in
 * (/proc/self/exe); NULL when it cannot be found. */
const char *eval_sandbox_bin(void);
/* Discover the toolchain and build the precompiled header now (service start-up). */
int eval_warm(const struct eval_opts *opts, struct ca_err *err) WARN_UNUSED_RESULT;

/* The human report (what ./compile, ./verify and ./profile print). */
int eval_format(const json_t *report, struct buf *out) WARN_UNUSED_RESULT;

/* Snapshot the workspace's writable files into dir (created); lists them in *files. */
int eval_snapshot(const char *workspace, const char *dir, json_t **files,
                  struct ca_err *err) WARN_UNUSED_RESULT;

/* Copy the evaluated files (files: their paths under snap) and snap's model.py (the task) into
 * keep (made 0700): what opts->keep_dir receives. */
int eval_keep_files(const char *snap, const json_t *files, const char *keep,
                    struct ca_err *err) WARN_UNUSED_RESULT;

/* The task's code as the evaluator would take it: opts->task_ref resolved, else the workspace's
 * model.py only while the manifest's hashes still match (CA_EPARSE otherwise); appended to code,
 * with the task's public description in *task_json (a new reference). */
int eval_task_code(const struct eval_opts *opts, struct buf *code, json_t **task_json,
                   struct ca_err *err) WARN_UNUSED_RESULT;

/* Write the embedded harness files (harness/NAME.py) under cache_dir (once per content hash);
 * *path receives the directory. */
int eval_harness_dir(const char *cache_dir, struct buf *path,
                     struct ca_err *err) WARN_UNUSED_RESULT;

#endif
