/*
 * bench_report.c - a run's results as a table, JSON, Markdown, and two runs side by side.
 *
 * Everything here reads bench_store_export's object, never the database: the same numbers
 * reach the text, the JSON, the Markdown and the HTML page (bench_html.c). Each task is scored
 * by its best finished attempt (bench_outcome_better); the metrics are bench_metrics.c's.
 */
#include "bench/bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "bench/bench_internal.h"
#include "core/banned.h"

const double bench__fast_p_grid[] = {0.0, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0, 5.0};
const size_t bench__fast_p_n = sizeof(bench__fast_p_grid) / sizeof(bench__fast_p_grid[0]);

static double num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

void bench__attempt_outcome(const json_t *a, int level, struct bench_outcome *o)
{
    memset(o, 0, sizeof(*o));
    o->level = level;
    const char *v = json_string_value(json_object_get(a, "verdict"));
    o->verdict = !v                                 ? BENCH_PENDING
                 : strcmp(v, "correct") == 0        ? BENCH_CORRECT
                 : strcmp(v, "failed") == 0         ? BENCH_FAILED
                 : strcmp(v, "infrastructure") == 0 ? BENCH_INFRA
                                                    : BENCH_PENDING;
    const json_t *r = json_object_get(a, "reward");
    o->reward = json_is_integer(r) ? (int)json_integer_value(r) : 0;
    o->speedup_eager = num(a, "speedup_eager");
    o->speedup_compile = num(a, "speedup_compile");
    o->peak_fraction = num(a, "peak_fraction");
    o->timing_noisy = json_integer_value(json_object_get(a, "timing_noisy")) != 0;
}

int bench__best_attempt(const json_t *task, struct bench_outcome *best)
{
    const json_t *atts = json_object_get(task, "attempts");
    int level = (int)json_integer_value(json_object_get(task, "level"));
    memset(best, 0, sizeof(*best));
    best->level = level;
    best->speedup_eager = best->speedup_compile = best->peak_fraction = NAN;
    best->task_id = json_string_value(json_object_get(task, "id"));
    int at = -1;
    size_t i;
    const json_t *a;
    json_array_foreach(atts, i, a)
    {
        struct bench_outcome o;
        bench__attempt_outcome(a, level, &o);
        o.task_id = best->task_id;
        if (at < 0 || bench_outcome_better(&o, best)) {
            *best = o;
            at = (int)i;
        }
    }
    return at;
}

int bench_outcomes_from_export(const json_t *ex, struct bench_outcome **out, size_t *n,
                               struct ca_err *err)
{
    const json_t *tasks = json_object_get(ex, "tasks");
    if (!json_is_array(tasks))
        return err_setf(err, CA_EPARSE, "a bench export without tasks");
    size_t k = json_array_size(tasks);
    struct bench_outcome *o = xcalloc(k ? k : 1, sizeof(*o));
    for (size_t i = 0; i < k; i++)
        (void)bench__best_attempt(json_array_get(tasks, i), &o[i]);
    *out = o;
    *n = k;
    return 0;
}

static const char *verdict_str(enum bench_verdict v)
{
    switch (v) {
    case BENCH_CORRECT:
        return "correct";
    case BENCH_FAILED:
        return "failed";
    case BENCH_INFRA:
        return "infrastructure";
    case BENCH_PENDING:
        break;
    }
    return "pending";
}

static json_t *jnum(double d)
{
    return isfinite(d) ? json_real(d) : json_null();
}

/* Where the time went: sums of the evaluator's stage_ms over finished attempts. */
static json_t *stage_totals(const json_t *ex)
{
    json_t *tot = json_object();
    size_t i, j;
    const json_t *t, *a;
    json_array_foreach(json_object_get(ex, "tasks"), i, t)
    {
        json_array_foreach(json_object_get(t, "attempts"), j, a)
        {
            const char *k;
            const json_t *v;
            json_object_foreach((json_t *)json_object_get(a, "stage_ms"), k, v)
            {
                if (!json_is_number(v))
                    continue;
                double prev = num(tot, k);
                json_object_set_new(tot, k,
                                    json_real((isnan(prev) ? 0 : prev) + json_number_value(v)));
            }
        }
    }
    return tot;
}

json_t *bench_report_json(const json_t *ex)
{
    struct bench_outcome *o = NULL;
    size_t n = 0;
    if (bench_outcomes_from_export(ex, &o, &n, NULL))
        return json_object();
    struct bench_metrics m;
    bench_metrics_compute(o, n, &m);
    json_t *fast = json_array();
    for (size_t i = 0; i < bench__fast_p_n; i++) {
        double p = bench__fast_p_grid[i];
        json_array_append_new(fast, json_pack("{s:f, s:o, s:o}", "p", p, "eager",
                                              jnum(bench_fast_p(o, n, -1, p, false)), "compile",
                                              jnum(bench_fast_p(o, n, -1, p, true))));
    }
    json_t *tasks = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(ex, "tasks"), i, t)
    {
        json_t *c = json_deep_copy(t);
        struct bench_outcome b;
        int at = bench__best_attempt(t, &b);
        json_object_set_new(c, "verdict", json_string(verdict_str(b.verdict)));
        json_object_set_new(c, "best_attempt", at >= 0 ? json_integer(at) : json_null());
        json_object_set_new(c, "reward",
                            b.verdict >= BENCH_FAILED ? json_integer(b.reward) : json_null());
        json_object_set_new(c, "speedup_eager", jnum(b.speedup_eager));
        json_object_set_new(c, "speedup_compile", jnum(b.speedup_compile));
        json_object_set_new(c, "peak_fraction", jnum(b.peak_fraction));
        json_array_append_new(tasks, c);
    }
    json_t *pub = json_array();
    for (size_t k = 0; k < bench_npublished; k++) {
        const struct bench_published *p = &bench_published[k];
        json_array_append_new(pub, json_pack("{s:s, s:o, s:o, s:o, s:o}", "system", p->system,
                                             "pass_rate", jnum(p->pass_rate), "faster_eager_rate",
                                             jnum(p->faster_eager_rate), "faster_compile_rate",
                                             jnum(p->faster_compile_rate),
                                             "geomean_speedup_compile", jnum(p->geomean_compile)));
    }
    json_t *timing = json_deep_copy(json_object_get(ex, "timing"));
    if (!timing)
        timing = json_object();
    json_object_set_new(timing, "stage_ms_total", stage_totals(ex));
    json_t *r = json_pack("{s:O, s:O, s:o, s:o, s:o, s:o, s:o}", "config",
                          json_object_get(ex, "config"), "environment",
                          json_object_get(ex, "environment"), "metrics", bench_metrics_json(&m),
                          "fast_p", fast, "published", pub, "timing", timing, "tasks", tasks);
    free(o);
    return r;
}

/* ---- text --------------------------------------------------------------------------------- */

void bench__fmt_rate(char *out, size_t n, double v, const char *none)
{
    if (isfinite(v))
        snprintf(out, n, "%.1f%%", 100 * v);
    else
        snprintf(out, n, "%s", none);
}

void bench__fmt_times(char *out, size_t n, double v, int digits, const char *none)
{
    if (isfinite(v))
        snprintf(out, n, "%.*fx", digits, v);
    else
        snprintf(out, n, "%s", none);
}

static int level_row(struct buf *b, const struct bench_level_metrics *l)
{
    char lv[16], pr[16], fe[16], fc[16], ge[16], gc[16], pk[16];
    if (l->level < 0)
        snprintf(lv, sizeof(lv), "all");
    else
        snprintf(lv, sizeof(lv), "%d", l->level);
    bench__fmt_rate(pr, sizeof(pr), l->pass_rate, "n/a");
    bench__fmt_rate(fe, sizeof(fe), l->faster_eager_rate, "n/a");
    bench__fmt_rate(fc, sizeof(fc), l->faster_compile_rate, "n/a");
    bench__fmt_times(ge, sizeof(ge), l->geomean_eager, 3, "n/a");
    bench__fmt_times(gc, sizeof(gc), l->geomean_compile, 3, "n/a");
    if (isfinite(l->peak_fraction_median))
        snprintf(pk, sizeof(pk), "%.3f", l->peak_fraction_median);
    else
        snprintf(pk, sizeof(pk), "n/a");
    return buf_addf(b, "%-5s %5zu %7zu %7s %8s %9s %9s %9s %5zu %7zu %7s\n", lv, l->tasks,
                    l->verdicts, pr, fe, fc, ge, gc, l->infra, l->pending, pk);
}

static const char *cfg_str(const json_t *cfg, const char *key)
{
    const char *s = json_string_value(json_object_get(cfg, key));
    return s ? s : "";
}

int bench__metrics_table(const struct bench_metrics *m, struct buf *b)
{
    int rc =
        buf_addf(b, "%-5s %5s %7s %7s %8s %9s %9s %9s %5s %7s %7s\n", "level", "tasks", "verdict",
                 "pass", ">eager", ">compile", "geo/eager", "geo/comp", "infra", "pending", "peak");
    for (int l = 0; l <= BENCH_MAX_LEVEL && !rc; l++)
        if (m->levels[l].tasks)
            rc = level_row(b, &m->levels[l]);
    return rc ? rc : level_row(b, &m->overall);
}

int bench_report_text(const json_t *ex, struct buf *b)
{
    struct bench_outcome *o = NULL;
    size_t n = 0;
    int rc = bench_outcomes_from_export(ex, &o, &n, NULL);
    if (rc)
        return rc;
    struct bench_metrics m;
    bench_metrics_compute(o, n, &m);
    const json_t *cfg = json_object_get(ex, "config"), *env = json_object_get(ex, "environment");
    const char *gpu = json_string_value(json_object_get(env, "gpu"));
    const char *torch = json_string_value(json_object_get(env, "torch"));
    rc = buf_addf(b, "%zu tasks, %s %s, rules %s; %s%s%s\n", n,
                  strcmp(cfg_str(cfg, "mode"), "agent") == 0    ? "agent"
                  : strcmp(cfg_str(cfg, "mode"), "replay") == 0 ? "episodes replayed from"
                                                                : "solutions from",
                  cfg_str(cfg, "source"),
                  *cfg_str(cfg, "rules") ? cfg_str(cfg, "rules") : "cuda-agent",
                  gpu ? gpu : "device not recorded", torch ? ", torch " : "", torch ? torch : "");
    if (!rc)
        rc = bench__metrics_table(&m, b);
    const struct bench_level_metrics *a = &m.overall;
    if (!rc)
        rc = buf_addf(b,
                      "rates over tasks with a verdict; geometric means over correct tasks "
                      "only; faster = speedup > 1 (no margin)\n"
                      "rewards: -1: %zu, 1: %zu, 2: %zu, 3: %zu; timing noisy: %zu\n",
                      a->reward_hist[0], a->reward_hist[1], a->reward_hist[2], a->reward_hist[3],
                      a->noisy);
    if (!rc)
        rc = buf_addstr(b, "fast_p vs eager:");
    for (size_t i = 0; i < bench__fast_p_n && !rc; i++) {
        char v[16];
        bench__fmt_rate(v, sizeof(v), bench_fast_p(o, n, -1, bench__fast_p_grid[i], false), "n/a");
        rc = buf_addf(b, " p=%g %s%s", bench__fast_p_grid[i], v,
                      i + 1 < bench__fast_p_n ? "," : "\n");
    }
    for (size_t k = 0; k < bench_npublished && !rc; k++) {
        const struct bench_published *p = &bench_published[k];
        char pr[16], fc[16], gc[16];
        bench__fmt_rate(pr, sizeof(pr), p->pass_rate, "n/a");
        bench__fmt_rate(fc, sizeof(fc), p->faster_compile_rate, "n/a");
        bench__fmt_times(gc, sizeof(gc), p->geomean_compile, 3, "n/a");
        rc = buf_addf(b, "%s %s: pass %s, faster than compile %s, geomean vs compile %s\n",
                      k == 0 ? "published (DESIGN.md section 1):"
                             : "                                ",
                      p->system, pr, fc, gc);
    }
    const json_t *tm = json_object_get(ex, "timing");
    double span = num(tm, "span_s");
    json_int_t fin = json_integer_value(json_object_get(tm, "finished"));
    if (!rc && fin && isfinite(span) && span > 0)
        rc = buf_addf(b,
                      "time: %lld evaluation(s) in %.1f s of wall clock (%.0f per hour); summed "
                      "per attempt: %.1f s wall, %.1f s compile, %.1f s harness\n",
                      (long long)fin, span, (double)fin / span * 3600.0, num(tm, "sum_wall_s"),
                      num(tm, "sum_compile_s"), num(tm, "sum_harness_s"));
    free(o);
    return rc;
}

/* ---- Markdown ----------------------------------------------------------------------------- */

static int md_row(struct buf *b, const char *name, const struct bench_level_metrics *l)
{
    char pr[16], fe[16], fc[16], ge[16], gc[16];
    bench__fmt_rate(pr, sizeof(pr), l->pass_rate, "—");
    bench__fmt_rate(fe, sizeof(fe), l->faster_eager_rate, "—");
    bench__fmt_rate(fc, sizeof(fc), l->faster_compile_rate, "—");
    bench__fmt_times(ge, sizeof(ge), l->geomean_eager, 2, "—");
    bench__fmt_times(gc, sizeof(gc), l->geomean_compile, 2, "—");
    return buf_addf(b, "| %s | %zu | %zu | %s | %s | %s | %s | %s | %zu | %zu |\n", name, l->tasks,
                    l->verdicts, pr, fe, fc, ge, gc, l->infra, l->pending);
}

int bench_report_markdown(const json_t *ex, struct buf *b)
{
    struct bench_outcome *o = NULL;
    size_t n = 0;
    int rc = bench_outcomes_from_export(ex, &o, &n, NULL);
    if (rc)
        return rc;
    struct bench_metrics m;
    bench_metrics_compute(o, n, &m);
    const json_t *cfg = json_object_get(ex, "config"), *env = json_object_get(ex, "environment");
    const char *gpu = json_string_value(json_object_get(env, "gpu"));
    rc = buf_addf(b,
                  "# cuda-agent bench\n\n%zu tasks; solutions: %s; rules: %s; device: %s; "
                  "cuda-agent %s.\n\n"
                  "| level | tasks | with verdict | pass | faster than eager | faster than "
                  "compile | geomean vs eager | geomean vs compile | infrastructure | pending |\n"
                  "|---|---|---|---|---|---|---|---|---|---|\n",
                  n, cfg_str(cfg, "source"),
                  *cfg_str(cfg, "rules") ? cfg_str(cfg, "rules") : "cuda-agent",
                  gpu ? gpu : "not recorded",
                  json_string_value(json_object_get(env, "cuda_agent"))
                      ? json_string_value(json_object_get(env, "cuda_agent"))
                      : "?");
    for (int l = 0; l <= BENCH_MAX_LEVEL && !rc; l++)
        if (m.levels[l].tasks) {
            char name[16];
            snprintf(name, sizeof(name), "%d", l);
            rc = md_row(b, name, &m.levels[l]);
        }
    if (!rc)
        rc = md_row(b, "**all**", &m.overall);
    for (size_t k = 0; k < bench_npublished && !rc; k++) {
        const struct bench_published *p = &bench_published[k];
        char pr[16], fc[16], gc[16];
        bench__fmt_rate(pr, sizeof(pr), p->pass_rate, "—");
        bench__fmt_rate(fc, sizeof(fc), p->faster_compile_rate, "—");
        bench__fmt_times(gc, sizeof(gc), p->geomean_compile, 2, "—");
        rc = buf_addf(b, "| *%s* | 250 | — | %s | — | %s | — | %s | — | — |\n", p->system, pr, fc,
                      gc);
    }
    const struct bench_level_metrics *a = &m.overall;
    if (!rc)
        rc = buf_addf(b,
                      "\nRates are over the tasks with a verdict (failures count against them); "
                      "geometric means over correct tasks only; \"faster\" is a speedup above 1 "
                      "with no margin. Tasks without a verdict (infrastructure failures, "
                      "unfinished) are counted apart. Each task is scored by its best "
                      "attempt.\n\nRewards: -1: %zu, 1: %zu, 2: %zu, 3: %zu.\n",
                      a->reward_hist[0], a->reward_hist[1], a->reward_hist[2], a->reward_hist[3]);
    if (!rc)
        rc = buf_addstr(b, "\n| p | fast_p vs eager | fast_p vs compile |\n|---|---|---|\n");
    for (size_t i = 0; i < bench__fast_p_n && !rc; i++) {
        char e[16], c[16];
        bench__fmt_rate(e, sizeof(e), bench_fast_p(o, n, -1, bench__fast_p_grid[i], false), "—");
        bench__fmt_rate(c, sizeof(c), bench_fast_p(o, n, -1, bench__fast_p_grid[i], true), "—");
        rc = buf_addf(b, "| %g | %s | %s |\n", bench__fast_p_grid[i], e, c);
    }
    free(o);
    return rc;
}

/* ---- compare ------------------------------------------------------------------------------ */

static const json_t *task_by_name(const json_t *ex, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(ex, "tasks"), i,
                       t) if (strcmp(json_string_value(json_object_get(t, "name")), name) ==
                              0) return t;
    return NULL;
}

static void cell(char *out, size_t n, const json_t *task)
{
    struct bench_outcome o;
    if (!task) {
        snprintf(out, n, "-");
        return;
    }
    (void)bench__best_attempt(task, &o);
    if (o.verdict == BENCH_CORRECT) {
        char s[16];
        bench__fmt_times(s, sizeof(s),
                         isfinite(o.speedup_compile) ? o.speedup_compile : o.speedup_eager, 3,
                         "n/a");
        snprintf(out, n, "%d %s", o.reward, s);
    } else {
        snprintf(out, n, "%s", verdict_str(o.verdict));
    }
}

int bench_compare_text(const json_t *a, const json_t *b, const char *name_a, const char *name_b,
                       struct buf *out)
{
    struct bench_outcome *oa = NULL, *ob = NULL;
    size_t na = 0, nb = 0;
    if (bench_outcomes_from_export(a, &oa, &na, NULL) ||
        bench_outcomes_from_export(b, &ob, &nb, NULL)) {
        free(oa);
        return CA_EPARSE;
    }
    struct bench_metrics ma, mb;
    bench_metrics_compute(oa, na, &ma);
    bench_metrics_compute(ob, nb, &mb);
    int rc = buf_addf(out, "A: %s\n", name_a);
    if (!rc)
        rc = bench__metrics_table(&ma, out);
    if (!rc)
        rc = buf_addf(out, "B: %s\n", name_b);
    if (!rc)
        rc = bench__metrics_table(&mb, out);
    if (!rc)
        rc = buf_addf(out, "\n%-48s %-16s %-16s %s\n", "task", "A (reward speedup)",
                      "B (reward speedup)", "change");
    size_t better = 0, worse = 0;
    const json_t *exs[2] = {a, b};
    for (int side = 0; side < 2 && !rc; side++) {
        size_t i;
        const json_t *t;
        json_array_foreach(json_object_get(exs[side], "tasks"), i, t)
        {
            const char *name = json_string_value(json_object_get(t, "name"));
            const json_t *ta = side == 0 ? t : task_by_name(a, name);
            const json_t *tb = side == 0 ? task_by_name(b, name) : t;
            if (side == 1 && ta)
                continue; /* shown from A's side */
            char ca[40], cb[40];
            cell(ca, sizeof(ca), ta);
            cell(cb, sizeof(cb), tb);
            const char *change = "";
            if (ta && tb) {
                struct bench_outcome x, y;
                (void)bench__best_attempt(ta, &x);
                (void)bench__best_attempt(tb, &y);
                if (bench_outcome_better(&y, &x)) {
                    change = "better";
                    better++;
                } else if (bench_outcome_better(&x, &y)) {
                    change = "worse";
                    worse++;
                }
            } else {
                change = ta ? "only in A" : "only in B";
            }
            rc = buf_addf(out, "%-48.48s %-16s %-16s %s\n", name, ca, cb, change);
            if (rc)
                break;
        }
    }
    if (!rc)
        rc = buf_addf(out, "B better on %zu task(s), worse on %zu\n", better, worse);
    free(oa);
    free(ob);
    return rc;
}

json_t *bench_compare_json(const json_t *a, const json_t *b)
{
    json_t *ra = bench_report_json(a), *rb = bench_report_json(b);
    json_t *tasks = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(ra, "tasks"), i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        const json_t *u = task_by_name(rb, name);
        json_array_append_new(
            tasks, json_pack("{s:s, s:{s:O, s:O, s:O, s:O}, s:o}", "name", name, "a", "verdict",
                             json_object_get(t, "verdict"), "reward", json_object_get(t, "reward"),
                             "speedup_eager", json_object_get(t, "speedup_eager"),
                             "speedup_compile", json_object_get(t, "speedup_compile"), "b",
                             u ? json_pack("{s:O, s:O, s:O, s:O}", "verdict",
                                           json_object_get(u, "verdict"), "reward",
                                           json_object_get(u, "reward"), "speedup_eager",
                                           json_object_get(u, "speedup_eager"), "speedup_compile",
                                           json_object_get(u, "speedup_compile"))
                               : json_null()));
    }
    json_array_foreach(json_object_get(rb, "tasks"), i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (!task_by_name(ra, name))
            json_array_append_new(tasks, json_pack("{s:s, s:n, s:{s:O, s:O}}", "name", name, "a",
                                                   "b", "verdict", json_object_get(t, "verdict"),
                                                   "reward", json_object_get(t, "reward")));
    }
    json_t *r = json_pack("{s:O, s:O, s:o}", "a", json_object_get(ra, "metrics"), "b",
                          json_object_get(rb, "metrics"), "tasks", tasks);
    json_decref(ra);
    json_decref(rb);
    return r;
}
