/*
 * bench_metrics.c - the paper's metrics (DESIGN.md section 1) over task outcomes.
 *
 * Definitions, per level and overall, over the tasks with a verdict (correct or failed):
 *   pass rate            correct / verdicts
 *   faster than eager    (correct and speedup_eager > 1) / verdicts
 *   faster than compile  (correct and speedup_compile > 1) / verdicts
 *   geomean vs eager     exp(mean(log speedup_eager)) over correct tasks only
 *   geomean vs compile   the same over correct tasks with a torch.compile speedup
 * No margin: a speedup of exactly 1 is not faster. Failed tasks are in the rates'
 * denominators and never in a geometric mean (as the paper: "over correct tasks only").
 * Tasks without a verdict (infrastructure failures, unfinished) are counted apart.
 */
#include "bench/bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "eval/eval_report.h"
#include "core/banned.h"

const struct bench_published bench_published[] = {
    {"CUDA Agent (paper, KernelBench L1-3)", 0.988, NAN, 0.968, 2.11},
    {"CUDA Agent without the agent loop (paper ablation)", NAN, NAN, 0.141, NAN},
    {"CUDA Agent without RFT (paper ablation)", NAN, NAN, 0.498, NAN},
    {"CUDA Agent without value pretraining (paper ablation)", NAN, NAN, 0.509, NAN},
};
const size_t bench_npublished = sizeof(bench_published) / sizeof(bench_published[0]);

static int rank(enum bench_verdict v)
{
    switch (v) {
    case BENCH_CORRECT:
        return 3;
    case BENCH_FAILED:
        return 2;
    case BENCH_INFRA:
        return 1;
    case BENCH_PENDING:
        break;
    }
    return 0;
}

/* a > b, with NAN below every number. */
static int cmp_num(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) ? (isnan(b) ? 0 : -1) : 1;
    return a > b ? 1 : a < b ? -1 : 0;
}

bool bench_outcome_better(const struct bench_outcome *a, const struct bench_outcome *b)
{
    if (rank(a->verdict) != rank(b->verdict))
        return rank(a->verdict) > rank(b->verdict);
    if (a->verdict != BENCH_CORRECT)
        return false;
    if (a->reward != b->reward)
        return a->reward > b->reward;
    int c = cmp_num(a->speedup_compile, b->speedup_compile);
    if (c)
        return c > 0;
    return cmp_num(a->speedup_eager, b->speedup_eager) > 0;
}

static double positive(const json_t *v)
{
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    return isfinite(d) && d > 0 ? d : NAN;
}

void bench_outcome_from_report(const json_t *report, struct bench_outcome *o)
{
    struct eval_report r;
    eval_report_read(report, &r);
    o->speedup_eager = o->speedup_compile = o->peak_fraction = NAN;
    o->timing_noisy = false;
    o->reward = 0;
    if (!report) {
        o->verdict = BENCH_PENDING;
        return;
    }
    if (r.infrastructure_error) {
        o->verdict = BENCH_INFRA;
        return;
    }
    if (!r.ok || !r.has_reward || !r.reward_is_int || r.reward < 1) {
        o->verdict = BENCH_FAILED;
        o->reward = -1;
        return;
    }
    o->verdict = BENCH_CORRECT;
    o->reward = (int)r.reward;
    const json_t *rw = json_object_get(report, "reward");
    o->speedup_eager = positive(json_object_get(rw, "speedup_eager"));
    o->speedup_compile = positive(json_object_get(rw, "speedup_compile"));
    const json_t *sol = json_object_get(
        json_object_get(json_object_get(json_object_get(report, "harness"), "timing"), "sol"),
        "peak_fraction");
    o->peak_fraction = positive(sol);
    o->timing_noisy = r.timing_noisy;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

static void compute_one(const struct bench_outcome *o, size_t n, int level, bool any_compile,
                        struct bench_level_metrics *m)
{
    memset(m, 0, sizeof(*m));
    m->level = level;
    double log_e = 0, log_c = 0;
    size_t n_e = 0;
    double *peaks = xmallocarray(n ? n : 1, sizeof(*peaks));
    for (size_t i = 0; i < n; i++) {
        const struct bench_outcome *t = &o[i];
        if (level >= 0 && t->level != level)
            continue;
        m->tasks++;
        switch (t->verdict) {
        case BENCH_PENDING:
            m->pending++;
            continue;
        case BENCH_INFRA:
            m->infra++;
            continue;
        case BENCH_FAILED:
            m->verdicts++;
            m->reward_hist[0]++;
            continue;
        case BENCH_CORRECT:
            break;
        }
        m->verdicts++;
        m->correct++;
        if (t->reward >= 1 && t->reward <= 3)
            m->reward_hist[t->reward]++;
        if (t->timing_noisy)
            m->noisy++;
        if (!isnan(t->speedup_eager)) {
            log_e += log(t->speedup_eager);
            n_e++;
            if (t->speedup_eager > 1.0)
                m->faster_eager++;
        }
        if (!isnan(t->speedup_compile)) {
            log_c += log(t->speedup_compile);
            m->compile_measured++;
            if (t->speedup_compile > 1.0)
                m->faster_compile++;
        }
        if (!isnan(t->peak_fraction))
            peaks[m->peak_fraction_n++] = t->peak_fraction;
    }
    double v = m->verdicts ? (double)m->verdicts : NAN;
    m->pass_rate = (double)m->correct / v;
    m->faster_eager_rate = (double)m->faster_eager / v;
    /* Without any torch.compile timing (--no-compile-baseline) the rate is unknown, not 0. */
    /* Without any torch.compile timing in the run (--no-compile-baseline) the rate is
     * unknown, not 0. */
    m->faster_compile_rate = any_compile ? (double)m->faster_compile / v : NAN;
    m->geomean_eager = n_e ? exp(log_e / (double)n_e) : NAN;
    m->geomean_compile = m->compile_measured ? exp(log_c / (double)m->compile_measured) : NAN;
    m->peak_fraction_median = NAN;
    if (m->peak_fraction_n) {
        qsort(peaks, m->peak_fraction_n, sizeof(*peaks), cmp_double);
        size_t k = m->peak_fraction_n;
        m->peak_fraction_median = k % 2 ? peaks[k / 2] : (peaks[k / 2 - 1] + peaks[k / 2]) / 2;
    }
    free(peaks);
}

void bench_metrics_compute(const struct bench_outcome *o, size_t n, struct bench_metrics *m)
{
    memset(m, 0, sizeof(*m));
    bool any_compile = false;
    for (size_t i = 0; i < n; i++)
        any_compile |= !isnan(o[i].speedup_compile);
    compute_one(o, n, -1, any_compile, &m->overall);
    for (int l = 0; l <= BENCH_MAX_LEVEL; l++) {
        bool present = false;
        for (size_t i = 0; i < n && !present; i++)
            present = o[i].level == l;
        if (present)
            compute_one(o, n, l, any_compile, &m->levels[l]);
        else
            m->levels[l].level = l;
    }
}

double bench_fast_p(const struct bench_outcome *o, size_t n, int level, double p, bool vs_compile)
{
    size_t verdicts = 0, fast = 0;
    for (size_t i = 0; i < n; i++) {
        if ((level >= 0 && o[i].level != level) ||
            (o[i].verdict != BENCH_CORRECT && o[i].verdict != BENCH_FAILED))
            continue;
        verdicts++;
        double s = vs_compile ? o[i].speedup_compile : o[i].speedup_eager;
        if (o[i].verdict == BENCH_CORRECT && !isnan(s) && s > p)
            fast++;
    }
    return verdicts ? (double)fast / (double)verdicts : NAN;
}

static json_t *num_or_null(double d)
{
    return isfinite(d) ? json_real(d) : json_null();
}

static json_t *level_json(const struct bench_level_metrics *m)
{
    json_t *j = json_object();
    json_object_set_new(j, "level", m->level < 0 ? json_string("all") : json_integer(m->level));
    json_object_set_new(j, "tasks", json_integer((json_int_t)m->tasks));
    json_object_set_new(j, "verdicts", json_integer((json_int_t)m->verdicts));
    json_object_set_new(j, "pending", json_integer((json_int_t)m->pending));
    json_object_set_new(j, "infrastructure", json_integer((json_int_t)m->infra));
    json_object_set_new(j, "correct", json_integer((json_int_t)m->correct));
    json_object_set_new(j, "faster_eager", json_integer((json_int_t)m->faster_eager));
    json_object_set_new(j, "faster_compile", json_integer((json_int_t)m->faster_compile));
    json_object_set_new(j, "compile_measured", json_integer((json_int_t)m->compile_measured));
    json_object_set_new(j, "pass_rate", num_or_null(m->pass_rate));
    json_object_set_new(j, "faster_eager_rate", num_or_null(m->faster_eager_rate));
    json_object_set_new(j, "faster_compile_rate", num_or_null(m->faster_compile_rate));
    json_object_set_new(j, "geomean_speedup_eager", num_or_null(m->geomean_eager));
    json_object_set_new(j, "geomean_speedup_compile", num_or_null(m->geomean_compile));
    json_object_set_new(j, "reward_histogram",
                        json_pack("{s:I, s:I, s:I, s:I}", "-1", (json_int_t)m->reward_hist[0], "1",
                                  (json_int_t)m->reward_hist[1], "2", (json_int_t)m->reward_hist[2],
                                  "3", (json_int_t)m->reward_hist[3]));
    json_object_set_new(j, "peak_fraction_median", num_or_null(m->peak_fraction_median));
    json_object_set_new(j, "peak_fraction_tasks", json_integer((json_int_t)m->peak_fraction_n));
    json_object_set_new(j, "timing_noisy", json_integer((json_int_t)m->noisy));
    return j;
}

json_t *bench_metrics_json(const struct bench_metrics *m)
{
    json_t *levels = json_array();
    for (int l = 0; l <= BENCH_MAX_LEVEL; l++)
        if (m->levels[l].tasks)
            json_array_append_new(levels, level_json(&m->levels[l]));
    return json_pack("{s:o, s:o}", "overall", level_json(&m->overall), "levels", levels);
}
