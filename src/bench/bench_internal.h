/*
 * bench_internal.h - what bench_report.c shares with bench_html.c (bench__ prefix).
 */
#ifndef CA_BENCH_INTERNAL_H
#define CA_BENCH_INTERNAL_H

#include "bench/bench.h"

/* The p values the reports tabulate fast_p at. */
extern const double bench__fast_p_grid[];
extern const size_t bench__fast_p_n;

/* One exported attempt's outcome (task_id left NULL). */
void bench__attempt_outcome(const json_t *attempt, int level, struct bench_outcome *o);
/* The task's best attempt into *best; its index, or -1 without attempts. */
int bench__best_attempt(const json_t *task, struct bench_outcome *best);
/* The per-level metrics table of `bench report`. */
int bench__metrics_table(const struct bench_metrics *m, struct buf *b) WARN_UNUSED_RESULT;
/* A rate as "12.5%" and a ratio as "1.234x" (`digits` decimals) into out[n]; `none` where the
 * value is not finite (a rate with no denominator, no correct task). */
void bench__fmt_rate(char *out, size_t n, double v, const char *none);
void bench__fmt_times(char *out, size_t n, double v, int digits, const char *none);

#endif
