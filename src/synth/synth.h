/*
 * synth.h - `cuda-agent synth`: Ops-6K-style training tasks, composed from an operator catalog
 * and filtered (DESIGN.md section 1, "Data pipeline"; docs/internals/synth.md).
 *
 * The torch work (crawling the catalog, composing, the filters) is Python: the embedded
 * harness/synth_*.py files, run as worker processes. This module is the C side: it lays the
 * scripts out, starts --jobs workers, hands each one seed at a time over JSON lines, kills and
 * restarts a worker that runs past the per-task timeout or dies (the task is rejected with that
 * reason), and records every answer in a SQLite store in the output folder. From the store it
 * writes the dataset (tasks.jsonl, tasks.parquet) and the stats report (report.md, report.html).
 *
 * Store (synth.db, WAL): one row per (stream, seed), written in one statement when its answer
 * arrives; a killed run loses only the tasks in flight, and a resumed run skips every seed the
 * store already has. A stream is the catalog's fingerprint plus the composition settings (depth
 * weights, operator subset, stochastic allowed): the same seed in another stream is another
 * task, so adding operators or seeds extends a set and never redoes what it holds. Filter
 * settings (window, device, compile backend, similarity bound, corpus) are fixed per store: a
 * resumed run with other values is refused, since its rows would not be comparable.
 *
 * Duplicates: an accepted task whose normalised code hash (synth_compose.dedup_key) is already
 * accepted is recorded as rejected ("duplicate") naming the task it repeats.
 *
 * Not thread-safe; synth_run blocks the calling thread and watches *opts->stop (a signal flag).
 */
#ifndef CA_SYNTH_H
#define CA_SYNTH_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"

#define SYNTH_SCHEMA "cuda-agent-synth"
#define SYNTH_SCHEMA_VERSION 1
#define SYNTH_MAX_JOBS 256
#define SYNTH_MAX_SEEDS 100000000
/* One worker answer (a task's code and its filter results) and the catalog file. */
#define SYNTH_LIMIT_ANSWER (4 * 1024 * 1024)
#define SYNTH_LIMIT_CATALOG (16 * 1024 * 1024)

struct synth_opts {
    const char *out_dir;      /* created; holds synth.db, catalog.json, outputs, worker.log */
    const char *catalog;      /* NULL: out_dir/catalog.json, crawled on the first run */
    int64_t seed_lo, seed_hi; /* inclusive */
    int64_t want;             /* stop once the store holds this many accepted tasks; 0: all */
    int jobs;                 /* worker processes */
    int threads;              /* torch threads per worker */
    const char *device;       /* "auto", "cpu", "cuda" */
    const char *compile_backend;
    double min_ms, max_ms, max_similarity;
    const char *depths; /* "1:5,2:83.8,..."; NULL: the default */
    const char *ops;    /* comma-separated subset of the catalog; NULL: all */
    const char *corpus; /* decontamination tree; NULL: none */
    bool allow_stochastic;
    bool parquet;       /* also write tasks.parquet (needs pyarrow) */
    int64_t timeout_ms; /* per task */
    int64_t timing_ms;  /* wall time spent timing eager, and again compiled, per task */
    bool progress;      /* a progress line on stderr */
    /* LLM mode: each seed's composition is rewritten by this model (OpenAI-compatible;
     * base URL and API key from llm_base_url or the environment, see src/llm/llm.h). */
    const char *llm_model, *llm_base_url;
    volatile sig_atomic_t *stop; /* set by a signal handler: stop dispatching, keep the rest */
};

void synth_opts_init(struct synth_opts *o);

struct synth_stats {
    int64_t planned;  /* seeds in range not yet in the store at the start */
    int64_t done;     /* answers recorded by this run */
    int64_t accepted; /* of those, accepted */
    int64_t timeouts, crashes, duplicates;
    int64_t total_accepted; /* in the store (this stream and all others) at the end */
    double wall_s;
    bool interrupted;
};

/* Compose and filter every seed of the range not yet in the store, then write the outputs.
 * Returns 0 (also when interrupted: stats->interrupted), or an error. */
int synth_run(const struct synth_opts *o, struct synth_stats *stats,
              struct ca_err *err) WARN_UNUSED_RESULT;

/* Crawl the installed torch into a catalog file; extra: user entry files merged over it. */
int synth_catalog(const char *out_path, const char *const *extra, int nextra, bool transformers,
                  struct ca_err *err) WARN_UNUSED_RESULT;

/* Write tasks.jsonl (and tasks.parquet when parquet), report.md and report.html from the
 * store in dir. *naccepted receives the number of tasks written. */
int synth_export(const char *dir, bool parquet, int64_t *naccepted,
                 struct ca_err *err) WARN_UNUSED_RESULT;

/* The stats report of the store in dir, as Markdown or (html) a self-contained page. */
int synth_report(const char *dir, bool html, struct buf *out,
                 struct ca_err *err) WARN_UNUSED_RESULT;

#endif
