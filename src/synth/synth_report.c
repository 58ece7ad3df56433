/*
 * synth_report.c - the stats report of a synth store: counts, each filter's pass rate, and the
 * depth, operator and runtime histograms of the accepted tasks, as Markdown or as one
 * self-contained HTML page (inline CSS bars; no script, no external resource).
 *
 * Filters run in a fixed order and a candidate stops at the first it fails, so a filter's pass
 * rate is over the candidates that reached it: reached(f) = rows whose first failure is f or
 * later (or none), passed(f) = those whose first failure is later (or none). Timeouts and
 * crashes happen at no known filter and are counted apart.
 */
#include "synth/synth_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/banned.h"

static const char *const FILTERS[] = {"compose", "static",        "similarity",
                                      "eager",   "deterministic", "informative",
                                      "runtime", "compile",       "duplicate"};
#define NFILTERS (sizeof(FILTERS) / sizeof(FILTERS[0]))
static const double RT_EDGES[] = {1, 2, 5, 10, 20, 50, 100};
#define NRT (sizeof(RT_EDGES) / sizeof(RT_EDGES[0]) + 1)
#define MAX_OPS_SHOWN 60
#define MAX_REASONS_SHOWN 20
#define REASON_MAX 160

struct op_count {
    char *name;
    int64_t n;
};

struct stats {
    int64_t total, accepted, timeouts, crashes, other;
    int64_t first_fail[NFILTERS]; /* rows whose first failure is FILTERS[i] */
    int64_t depth[6];
    int64_t rt[NRT];
    bool similarity_ran;
    struct op_count *ops;
    size_t nops, ops_cap;
    struct op_count *reasons; /* rejection reasons with numbers replaced by N */
    size_t nreasons, reasons_cap;
    double eager_sum, compile_sum;
    int64_t ntimed;
};

static void count_in(struct op_count **v, size_t *n, size_t *cap, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*v)[i].name, name) == 0) {
            (*v)[i].n++;
            return;
        }
    if (*n == *cap) {
        *cap = ca__grow_cap(*cap, *n + 1, sizeof(**v));
        *v = xreallocarray(*v, *cap, sizeof(**v));
    }
    (*v)[(*n)++] = (struct op_count){xstrdup(name), 1};
}

static void count_op(struct stats *s, const char *name)
{
    count_in(&s->ops, &s->nops, &s->ops_cap, name);
}

/* "runtime: too slow: eager 209.790 ms > 100.0 ms" -> "runtime: too slow: eager N ms > N ms",
 * cut to REASON_MAX bytes, so that reasons group. */
static void count_reason(struct stats *s, const char *reason)
{
    char norm[REASON_MAX + 1];
    size_t n = 0;
    for (const char *p = reason; *p && n < REASON_MAX; p++) {
        if (*p >= '0' && *p <= '9') {
            while ((p[1] >= '0' && p[1] <= '9') || (p[1] == '.' && p[2] >= '0' && p[2] <= '9'))
                p++;
            norm[n++] = 'N';
        } else {
            norm[n++] = *p;
        }
    }
    norm[n] = '\0';
    count_in(&s->reasons, &s->nreasons, &s->reasons_cap, norm);
}

static int on_row(const struct synth_row *r, void *vctx)
{
    struct stats *s = vctx;
    s->total++;
    if (r->filters && strstr(r->filters, "\"similarity\""))
        s->similarity_ran = true;
    if (strcmp(r->status, "accepted") != 0) {
        const char *f = r->filter ? r->filter : "";
        count_reason(s, r->reason ? r->reason : "(none)");
        size_t i;
        for (i = 0; i < NFILTERS; i++)
            if (strcmp(f, FILTERS[i]) == 0)
                break;
        if (i < NFILTERS)
            s->first_fail[i]++;
        else if (strcmp(f, "timeout") == 0)
            s->timeouts++;
        else if (strcmp(f, "crash") == 0)
            s->crashes++;
        else
            s->other++;
        return 0;
    }
    s->accepted++;
    if (r->depth >= 1 && r->depth <= 5)
        s->depth[r->depth]++;
    if (!isnan(r->eager_ms)) {
        size_t b = 0;
        while (b < NRT - 1 && r->eager_ms >= RT_EDGES[b])
            b++;
        s->rt[b]++;
        s->eager_sum += r->eager_ms;
        s->ntimed++;
        if (!isnan(r->compile_ms))
            s->compile_sum += r->compile_ms;
    }
    json_t *ops = r->ops ? json_loads(r->ops, 0, NULL) : NULL;
    size_t i;
    json_t *v;
    json_array_foreach(ops, i, v)
    {
        if (json_is_string(v))
            count_op(s, json_string_value(v));
    }
    json_decref(ops);
    return 0;
}

static int by_count(const void *a, const void *b)
{
    const struct op_count *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? 1 : -1;
    return strcmp(x->name, y->name);
}

static double pct(int64_t n, int64_t d)
{
    return d > 0 ? 100.0 * (double)n / (double)d : 0.0;
}

/* reached and passed of filter i. */
static void filter_counts(const struct stats *s, size_t i, int64_t *reached, int64_t *passed)
{
    int64_t before = s->timeouts + s->crashes + s->other;
    for (size_t k = 0; k < i; k++)
        before += s->first_fail[k];
    *reached = s->total - before;
    *passed = *reached - s->first_fail[i];
}

static void rt_label(size_t b, char *out, size_t n)
{
    if (b == 0)
        snprintf(out, n, "< %g ms", RT_EDGES[0]);
    else if (b == NRT - 1)
        snprintf(out, n, ">= %g ms", RT_EDGES[NRT - 2]);
    else
        snprintf(out, n, "%g-%g ms", RT_EDGES[b - 1], RT_EDGES[b]);
}

static int markdown(const struct stats *s, struct buf *b)
{
    int rc = buf_addf(b,
                      "# Synthesised tasks\n\n%lld candidates, %lld accepted (%.1f%%), %lld "
                      "timeouts, %lld crashes\n\n## Filters\n\n"
                      "| filter | reached | passed | pass rate |\n| --- | ---: | ---: | ---: |\n",
                      (long long)s->total, (long long)s->accepted, pct(s->accepted, s->total),
                      (long long)s->timeouts, (long long)s->crashes);
    for (size_t i = 0; rc == 0 && i < NFILTERS; i++) {
        int64_t reached, passed;
        filter_counts(s, i, &reached, &passed);
        if (strcmp(FILTERS[i], "similarity") == 0 && !s->similarity_ran)
            rc = buf_addf(b, "| similarity | - | - | not run (no --decontaminate) |\n");
        else
            rc = buf_addf(b, "| %s | %lld | %lld | %.1f%% |\n", FILTERS[i], (long long)reached,
                          (long long)passed, pct(passed, reached));
    }
    if (rc == 0)
        rc = buf_addf(b, "\n## Depth (operators per task)\n\n| depth | tasks | share | paper |\n"
                         "| ---: | ---: | ---: | ---: |\n");
    for (int d = 1; rc == 0 && d <= 5; d++)
        rc = buf_addf(b, "| %d | %lld | %.1f%% | %s |\n", d, (long long)s->depth[d],
                      pct(s->depth[d], s->accepted), d == 2 ? "83.8%" : "");
    if (rc == 0)
        rc = buf_addf(b,
                      "\n## Eager runtime\n\n| runtime | tasks | share |\n| --- | ---: | ---: |\n");
    for (size_t k = 0; rc == 0 && k < NRT; k++) {
        char label[32];
        rt_label(k, label, sizeof(label));
        rc = buf_addf(b, "| %s | %lld | %.1f%% |\n", label, (long long)s->rt[k],
                      pct(s->rt[k], s->ntimed));
    }
    if (rc == 0 && s->ntimed)
        rc = buf_addf(b, "\nMean eager %.3f ms, mean torch.compile %.3f ms.\n",
                      s->eager_sum / (double)s->ntimed, s->compile_sum / (double)s->ntimed);
    if (rc == 0)
        rc = buf_addf(b, "\n## Operators (%zu distinct)\n\n| operator | tasks |\n| --- | ---: |\n",
                      s->nops);
    for (size_t i = 0; rc == 0 && i < s->nops && i < MAX_OPS_SHOWN; i++)
        rc = buf_addf(b, "| %s | %lld |\n", s->ops[i].name, (long long)s->ops[i].n);
    if (rc == 0 && s->nops > MAX_OPS_SHOWN)
        rc = buf_addf(b, "| (%zu more) | |\n", s->nops - MAX_OPS_SHOWN);
    if (rc == 0)
        rc = buf_addstr(b, "\n## Rejections by reason (numbers as N)\n\n| reason | candidates |\n"
                           "| --- | ---: |\n");
    for (size_t i = 0; rc == 0 && i < s->nreasons && i < MAX_REASONS_SHOWN; i++) {
        rc = buf_addstr(b, "| ");
        for (const char *p = s->reasons[i].name; rc == 0 && *p; p++)
            rc = *p == '|' ? buf_addstr(b, "\\|") : buf_addch(b, *p == '\n' ? ' ' : *p);
        if (rc == 0)
            rc = buf_addf(b, " | %lld |\n", (long long)s->reasons[i].n);
    }
    return rc;
}

static int bar_row(struct buf *b, const char *label, int64_t n, double share, const char *extra)
{
    int rc = buf_addstr(b, "<tr><td>");
    if (rc == 0)
        rc = buf_add_html(b, label);
    if (rc == 0)
        rc = buf_addf(b,
                      "</td><td class=n>%lld</td><td class=n>%.1f%%</td><td class=bar>"
                      "<div style=\"width:%.1f%%\"></div></td><td>%s</td></tr>\n",
                      (long long)n, share, share, extra ? extra : "");
    return rc;
}

static int html(const struct stats *s, struct buf *b)
{
    int rc = buf_addf(
        b,
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        "<title>Synthesised tasks</title><style>"
        "body{font-family:sans-serif;margin:2em;max-width:60em}"
        "table{border-collapse:collapse;margin-bottom:1.5em}"
        "td,th{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:left}"
        "td.n{text-align:right}td.bar{width:20em}td.bar div{background:#4a7;height:.9em}"
        "</style></head><body>\n<h1>Synthesised tasks</h1>\n"
        "<p id=summary>%lld candidates, %lld accepted (%.1f%%), %lld timeouts, %lld crashes</p>\n"
        "<h2>Filters</h2>\n<table id=filters><tr><th>filter</th><th>reached</th><th>passed</th>"
        "<th>pass rate</th></tr>\n",
        (long long)s->total, (long long)s->accepted, pct(s->accepted, s->total),
        (long long)s->timeouts, (long long)s->crashes);
    for (size_t i = 0; rc == 0 && i < NFILTERS; i++) {
        int64_t reached, passed;
        filter_counts(s, i, &reached, &passed);
        if (strcmp(FILTERS[i], "similarity") == 0 && !s->similarity_ran)
            rc = buf_addf(b, "<tr><td>similarity</td><td colspan=3>not run (no "
                             "--decontaminate)</td></tr>\n");
        else
            rc = buf_addf(b,
                          "<tr><td>%s</td><td class=n>%lld</td><td class=n>%lld</td>"
                          "<td class=n>%.1f%%</td></tr>\n",
                          FILTERS[i], (long long)reached, (long long)passed, pct(passed, reached));
    }
    if (rc == 0)
        rc = buf_addstr(b, "</table>\n<h2>Depth</h2>\n<table id=depth><tr><th>depth</th>"
                           "<th>tasks</th><th>share</th><th></th><th>paper</th></tr>\n");
    for (int d = 1; rc == 0 && d <= 5; d++) {
        char label[8];
        snprintf(label, sizeof(label), "%d", d);
        rc = bar_row(b, label, s->depth[d], pct(s->depth[d], s->accepted), d == 2 ? "83.8%" : "");
    }
    if (rc == 0)
        rc = buf_addstr(b, "</table>\n<h2>Eager runtime</h2>\n<table id=runtime><tr><th>runtime"
                           "</th><th>tasks</th><th>share</th><th></th><th></th></tr>\n");
    for (size_t k = 0; rc == 0 && k < NRT; k++) {
        char label[32];
        rt_label(k, label, sizeof(label));
        rc = bar_row(b, label, s->rt[k], pct(s->rt[k], s->ntimed), NULL);
    }
    if (rc == 0)
        rc = buf_addf(b,
                      "</table>\n<h2>Operators (%zu distinct)</h2>\n<table id=ops><tr><th>"
                      "operator</th><th>tasks</th><th>share</th><th></th><th></th></tr>\n",
                      s->nops);
    for (size_t i = 0; rc == 0 && i < s->nops && i < MAX_OPS_SHOWN; i++)
        rc = bar_row(b, s->ops[i].name, s->ops[i].n, pct(s->ops[i].n, s->accepted), NULL);
    if (rc == 0)
        rc = buf_addstr(b, "</table>\n<h2>Rejections by reason</h2>\n<table id=reasons><tr>"
                           "<th>reason (numbers as N)</th><th>candidates</th><th>share</th><th>"
                           "</th><th></th></tr>\n");
    int64_t rejected = s->total - s->accepted;
    for (size_t i = 0; rc == 0 && i < s->nreasons && i < MAX_REASONS_SHOWN; i++)
        rc = bar_row(b, s->reasons[i].name, s->reasons[i].n, pct(s->reasons[i].n, rejected), NULL);
    if (rc == 0)
        rc = buf_addstr(b, "</table>\n</body></html>\n");
    return rc;
}

int synth_report(const char *dir, bool as_html, struct buf *out, struct ca_err *err)
{
    struct synth_store *st;
    int rc = synth__store_open(dir, NULL, &st, err);
    if (rc)
        return rc;
    struct stats s;
    memset(&s, 0, sizeof(s));
    rc = synth__store_each(st, false, on_row, &s, err);
    synth__store_free(st);
    if (rc == 0) {
        if (s.nops > 1)
            qsort(s.ops, s.nops, sizeof(*s.ops), by_count);
        if (s.nreasons > 1)
            qsort(s.reasons, s.nreasons, sizeof(*s.reasons), by_count);
        rc = as_html ? html(&s, out) : markdown(&s, out);
        if (rc)
            rc = err_setf(err, rc, "the report is too large");
    }
    for (size_t i = 0; i < s.nops; i++)
        free(s.ops[i].name);
    free(s.ops);
    for (size_t i = 0; i < s.nreasons; i++)
        free(s.reasons[i].name);
    free(s.reasons);
    return rc;
}
