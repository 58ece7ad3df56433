/*
 * bench_html.c - one self-contained HTML page per run: no network, inline CSS, SVG and JS.
 *
 * The metrics table (beside the paper's published rows) and the three charts (speedup
 * distribution, fast_p curves, reward histogram) are written here as HTML and SVG, so they
 * show without JavaScript. The task table is built by the page's script from the run's data,
 * embedded as JSON (slashes escaped, so no "</script>" can end it early): sortable by any
 * column, filterable, and each row opens the task's attempts, its best attempt's evaluator
 * report and, for agent runs, the trajectory's turns (tools called, evaluations).
 */
#include "bench/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_internal.h"
#include "core/util.h"
#include "core/banned.h"

#define TRAJECTORY_MAX (32 * 1024 * 1024)
#define TRAJECTORY_TURNS_MAX 400

static const char *CSS =
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#1d2433;"
    "padding:0 16px}h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}"
    ".sub{color:#5b6477;margin:0 0 16px}table{border-collapse:collapse;width:100%}"
    "th,td{padding:4px 8px;border-bottom:1px solid #e3e6ee;text-align:right;white-space:nowrap}"
    "#metrics{font-size:13px}#metrics th{white-space:normal;vertical-align:bottom}"
    "#metrics td:first-child{white-space:normal;max-width:260px}"
    "th:first-child,td:first-child{text-align:left}th{background:#f4f6fa;font-weight:600}"
    "tr.pub td{color:#5b6477;font-style:italic}tr.all td{font-weight:600}"
    "#tasks th{cursor:pointer;user-select:none}#tasks tr.t:hover{background:#f7f9fd;"
    "cursor:pointer}.correct{color:#137333}.failed{color:#b3261e}.infrastructure,.pending"
    "{color:#8a6d00}.charts{display:flex;flex-wrap:wrap;gap:16px}.charts figure{margin:0;"
    "border:1px solid #e3e6ee;border-radius:6px;padding:8px}figcaption{font-size:13px;"
    "color:#5b6477}pre{background:#f4f6fa;padding:8px;overflow:auto;max-height:420px;"
    "font-size:12px;white-space:pre-wrap}td.detail{text-align:left;white-space:normal}"
    "input#filter{padding:4px 8px;width:280px;margin:0 0 8px}.note{color:#5b6477;"
    "font-size:13px}.cards{display:flex;gap:12px;flex-wrap:wrap}.card{border:1px solid "
    "#e3e6ee;border-radius:6px;padding:8px 14px;min-width:150px}.card b{display:block;"
    "font-size:22px}";

static int metrics_row(struct buf *b, const char *cls, const char *name,
                       const struct bench_level_metrics *l)
{
    char pr[24], fe[24], fc[24], ge[24], gc[24], pk[24];
    bench__fmt_rate(pr, sizeof(pr), l->pass_rate, "&mdash;");
    bench__fmt_rate(fe, sizeof(fe), l->faster_eager_rate, "&mdash;");
    bench__fmt_rate(fc, sizeof(fc), l->faster_compile_rate, "&mdash;");
    bench__fmt_times(ge, sizeof(ge), l->geomean_eager, 2, "&mdash;");
    bench__fmt_times(gc, sizeof(gc), l->geomean_compile, 2, "&mdash;");
    if (isfinite(l->peak_fraction_median))
        snprintf(pk, sizeof(pk), "%.3f", l->peak_fraction_median);
    else
        snprintf(pk, sizeof(pk), "&mdash;");
    return buf_addf(b,
                    "<tr class=\"%s\"><td>%s</td><td>%zu</td><td>%zu</td><td>%s</td><td>%s</td>"
                    "<td>%s</td><td>%s</td><td>%s</td><td>%zu / %zu / %zu / %zu</td><td>%zu</td>"
                    "<td>%zu</td><td>%s</td></tr>\n",
                    cls, name, l->tasks, l->verdicts, pr, fe, fc, ge, gc, l->reward_hist[0],
                    l->reward_hist[1], l->reward_hist[2], l->reward_hist[3], l->infra, l->pending,
                    pk);
}

static int metrics_table(struct buf *b, const struct bench_metrics *m)
{
    int rc = buf_addstr(
        b, "<div style=\"overflow-x:auto\"><table "
           "id=\"metrics\"><thead><tr><th>level</th><th>tasks</th><th>with verdict</th>"
           "<th>pass rate</th><th>faster than eager</th><th>faster than compile</th>"
           "<th>geomean vs eager</th><th>geomean vs compile</th><th>rewards -1/1/2/3</th>"
           "<th>infrastructure</th><th>pending</th><th>peak fraction (median)</th></tr></thead>"
           "<tbody>\n");
    for (int l = 0; l <= BENCH_MAX_LEVEL && !rc; l++)
        if (m->levels[l].tasks) {
            char name[24];
            snprintf(name, sizeof(name), "level %d", l);
            rc = metrics_row(b, "lvl", name, &m->levels[l]);
        }
    if (!rc)
        rc = metrics_row(b, "all", "all levels", &m->overall);
    for (size_t k = 0; k < bench_npublished && !rc; k++) {
        const struct bench_published *p = &bench_published[k];
        char pr[24], fe[24], fc[24], gc[24];
        bench__fmt_rate(pr, sizeof(pr), p->pass_rate, "&mdash;");
        bench__fmt_rate(fe, sizeof(fe), p->faster_eager_rate, "&mdash;");
        bench__fmt_rate(fc, sizeof(fc), p->faster_compile_rate, "&mdash;");
        bench__fmt_times(gc, sizeof(gc), p->geomean_compile, 2, "&mdash;");
        rc = buf_addf(b,
                      "<tr class=\"pub\"><td>%s</td><td>250</td><td>&mdash;</td><td>%s</td>"
                      "<td>%s</td><td>%s</td><td>&mdash;</td><td>%s</td><td>&mdash;</td>"
                      "<td>&mdash;</td><td>&mdash;</td><td>&mdash;</td></tr>\n",
                      p->system, pr, fe, fc, gc);
    }
    return rc ? rc
              : buf_addstr(
                    b, "</tbody></table></div>\n<p class=\"note\">Rates are over the tasks with "
                       "a verdict: a failed task counts against them. Geometric means "
                       "are over correct tasks only (the paper's definition). Faster "
                       "means a speedup above 1, no margin. Tasks without a verdict "
                       "(infrastructure failures, unfinished) are counted apart. Each "
                       "task is scored by its best attempt. Published rows: DESIGN.md "
                       "section 1 (KernelBench levels 1-3, 250 tasks, vs "
                       "torch.compile).</p>\n");
}

/* ---- SVG charts ---------------------------------------------------------------------------- */

#define W 520
#define H 260
#define ML 48
#define MB 36
#define MT 16
#define MR 16

static int axes(struct buf *b, const char *id, const char *title)
{
    return buf_addf(b,
                    "<figure><svg class=\"chart\" id=\"%s\" width=\"%d\" height=\"%d\" "
                    "viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"%s\" "
                    "xmlns=\"http://www.w3.org/2000/svg\">"
                    "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#1d2433\"/>"
                    "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#1d2433\"/>",
                    id, W, H, W, H, title, ML, H - MB, W - MR, H - MB, ML, MT, ML, H - MB);
}

static int end_chart(struct buf *b, const char *caption)
{
    return buf_addf(b, "</svg><figcaption>%s</figcaption></figure>\n", caption);
}

/* Speedups of correct tasks in log2 bins from 1/16x to 16x (the ends gather the rest). */
static int speedup_chart(struct buf *b, const struct bench_outcome *o, size_t n)
{
    enum { NB = 16 };
    size_t ce[NB] = {0}, cc[NB] = {0}, maxc = 1;
    for (size_t i = 0; i < n; i++) {
        if (o[i].verdict != BENCH_CORRECT)
            continue;
        double v[2] = {o[i].speedup_eager, o[i].speedup_compile};
        for (int k = 0; k < 2; k++) {
            if (!isfinite(v[k]))
                continue;
            int bin = (int)floor((log2(v[k]) + 4.0) * 2.0);
            bin = bin < 0 ? 0 : bin >= NB ? NB - 1 : bin;
            size_t *c = k ? &cc[bin] : &ce[bin];
            (*c)++;
            if (*c > maxc)
                maxc = *c;
        }
    }
    int rc = axes(b, "chart-speedup", "speedup distribution");
    double bw = (double)(W - ML - MR) / NB, ph = H - MB - MT;
    for (int i = 0; i < NB && !rc; i++) {
        double x = ML + i * bw;
        double he = ph * (double)ce[i] / (double)maxc, hc = ph * (double)cc[i] / (double)maxc;
        rc = buf_addf(b,
                      "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                      "fill=\"#4c78a8\"><title>vs eager: %zu</title></rect>"
                      "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                      "fill=\"#f58518\"><title>vs compile: %zu</title></rect>",
                      x + 1, H - MB - he, bw / 2 - 1, he, ce[i], x + bw / 2, H - MB - hc,
                      bw / 2 - 1, hc, cc[i]);
        if (!rc && i % 2 == 0)
            rc = buf_addf(b,
                          "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" "
                          "text-anchor=\"middle\">%gx</text>",
                          x, H - MB + 14, pow(2.0, i / 2.0 - 4.0));
    }
    if (!rc)
        rc = buf_addf(b,
                      "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#b3261e\" "
                      "stroke-dasharray=\"4 3\"/><text x=\"%d\" y=\"%d\" font-size=\"11\">%zu"
                      "</text><text x=\"%d\" y=\"%d\" font-size=\"12\">speedup (log scale); "
                      "blue: vs eager, orange: vs torch.compile</text>",
                      ML + 8 * bw, MT, ML + 8 * bw, H - MB, 4, MT + 10, maxc, ML, H - 6);
    return rc ? rc : end_chart(b, "Speedups of correct tasks (their best attempt)");
}

static int fast_p_chart(struct buf *b, const struct bench_outcome *o, size_t n)
{
    int rc = axes(b, "chart-fastp", "fast_p curves");
    const double pmax = 4.0;
    const char *colors[2] = {"#4c78a8", "#f58518"};
    for (int k = 0; k < 2 && !rc; k++) {
        if (isnan(bench_fast_p(o, n, -1, 0.0, k == 1)) ||
            (k == 1 && bench_fast_p(o, n, -1, 0.0, true) == 0.0 &&
             bench_fast_p(o, n, -1, 0.0, false) > 0.0))
            continue; /* no torch.compile timings */
        rc = buf_addf(b,
                      "<polyline class=\"curve\" fill=\"none\" stroke=\"%s\" "
                      "stroke-width=\"2\" points=\"",
                      colors[k]);
        for (int i = 0; i <= 200 && !rc; i++) {
            double p = pmax * i / 200.0, f = bench_fast_p(o, n, -1, p, k == 1);
            rc = buf_addf(b, "%.1f,%.1f ", ML + (W - ML - MR) * p / pmax,
                          H - MB - (H - MB - MT) * (isfinite(f) ? f : 0));
        }
        if (!rc)
            rc = buf_addstr(b, "\"/>");
    }
    for (int i = 0; i <= 4 && !rc; i++)
        rc = buf_addf(b,
                      "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%d"
                      "</text><text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">"
                      "%d%%</text>",
                      ML + (W - ML - MR) * i / pmax, H - MB + 14, i, ML - 4,
                      H - MB - (H - MB - MT) * i / 4.0 + 4, 25 * i);
    if (!rc)
        rc = buf_addf(b,
                      "<text x=\"%d\" y=\"%d\" font-size=\"12\">p: fraction of tasks correct and "
                      "more than p times faster</text>",
                      ML, H - 6);
    return rc ? rc : end_chart(b, "fast_p (KernelBench): blue vs eager, orange vs torch.compile");
}

static int reward_chart(struct buf *b, const struct bench_level_metrics *m)
{
    int rc = axes(b, "chart-rewards", "reward histogram");
    size_t v[5] = {m->reward_hist[0], m->reward_hist[1], m->reward_hist[2], m->reward_hist[3],
                   m->infra};
    const char *name[5] = {"-1", "1", "2", "3", "infra"};
    const char *color[5] = {"#b3261e", "#9aa5b8", "#4c78a8", "#137333", "#8a6d00"};
    size_t maxv = 1;
    for (int i = 0; i < 5; i++)
        maxv = v[i] > maxv ? v[i] : maxv;
    double bw = (double)(W - ML - MR) / 5, ph = H - MB - MT;
    for (int i = 0; i < 5 && !rc; i++) {
        double h = ph * (double)v[i] / (double)maxv, x = ML + i * bw;
        rc = buf_addf(b,
                      "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                      "fill=\"%s\"/><text x=\"%.1f\" y=\"%d\" font-size=\"12\" "
                      "text-anchor=\"middle\">%s</text><text x=\"%.1f\" y=\"%.1f\" "
                      "font-size=\"11\" text-anchor=\"middle\">%zu</text>",
                      x + 8, H - MB - h, bw - 16, h, color[i], x + bw / 2, H - MB + 14, name[i],
                      x + bw / 2, H - MB - h - 3, v[i]);
    }
    return rc ? rc : end_chart(b, "Rewards of the tasks' best attempts (infra: no verdict)");
}

/* ---- trajectories ------------------------------------------------------------------------ */

/* Per agent attempt: its turns (tools called, evaluations) from trajectory.jsonl. */
static void add_trajectories(json_t *tasks)
{
    size_t i, j;
    json_t *t, *a;
    json_array_foreach(tasks, i, t)
    {
        json_array_foreach(json_object_get(t, "attempts"), j, a)
        {
            const char *path =
                json_string_value(json_object_get(json_object_get(a, "agent"), "trajectory"));
            FILE *f = path ? fopen(path, "re") : NULL;
            if (!f)
                continue;
            json_t *turns = json_array();
            char *line = NULL;
            size_t cap = 0, total = 0;
            ssize_t len;
            while ((len = getline(&line, &cap, f)) > 0 && total < TRAJECTORY_MAX &&
                   json_array_size(turns) < TRAJECTORY_TURNS_MAX) {
                total += (size_t)len;
                json_t *l = json_loadb(line, (size_t)len, 0, NULL);
                const char *type = json_string_value(json_object_get(l, "type"));
                if (type && strcmp(type, "turn") == 0) {
                    json_t *tools = json_array(), *evals = json_array();
                    size_t k;
                    json_t *x;
                    json_array_foreach(json_object_get(l, "tool_results"), k, x)
                        json_array_append_new(tools,
                                              json_pack("{s:O?, s:O?, s:O?}", "name",
                                                        json_object_get(x, "name"), "is_error",
                                                        json_object_get(x, "is_error"), "ms",
                                                        json_object_get(x, "ms")));
                    json_array_foreach(json_object_get(l, "evals"), k, x)
                        json_array_append_new(evals, json_pack("{s:O?, s:O?, s:O?}", "command",
                                                               json_object_get(x, "command"), "ok",
                                                               json_object_get(x, "ok"), "reward",
                                                               json_object_get(x, "reward")));
                    json_array_append_new(turns, json_pack("{s:O?, s:o, s:o}", "turn",
                                                           json_object_get(l, "turn"), "tools",
                                                           tools, "evals", evals));
                }
                json_decref(l);
            }
            free(line);
            fclose(f);
            json_object_set_new(a, "turns", turns);
        }
    }
}

static const char *JS =
    "(function(){\n"
    "var D=JSON.parse(document.getElementById('bench-data').textContent);\n"
    "var cols=[['name','task'],['level','level'],['verdict','verdict'],['reward','reward'],"
    "['speedup_eager','vs eager'],['speedup_compile','vs compile'],['peak_fraction','peak'],"
    "['stage','stage'],['wall_s','wall s'],['attempts_n','attempts']];\n"
    "var rows=D.tasks.map(function(t){var b=t.best_attempt==null?null:t.attempts[t.best_attempt];"
    "return {t:t,name:t.name,level:t.level,verdict:t.verdict,reward:t.reward,"
    "speedup_eager:t.speedup_eager,speedup_compile:t.speedup_compile,"
    "peak_fraction:t.peak_fraction,stage:b?b.stage:null,"
    "wall_s:b&&b.wall_ms!=null?b.wall_ms/1000:null,attempts_n:t.attempts.length,best:b};});\n"
    "var key='name',dir=1,open={};\n"
    "if(location.hash=='#open-all')rows.forEach(function(r){open[r.t.id]=true;});\n"
    "function fmt(k,v){if(v==null)return '\\u2014';if(typeof v==='number'){"
    "if(k.indexOf('speedup')==0)return v.toFixed(3)+'x';if(k=='peak_fraction')"
    "return v.toFixed(3);if(k=='wall_s')return v.toFixed(1);}return String(v);}\n"
    "function el(tag,cls,text){var e=document.createElement(tag);if(cls)e.className=cls;"
    "if(text!=null)e.textContent=text;return e;}\n"
    "function detail(r){var d=el('td','detail');d.colSpan=cols.length;"
    "d.appendChild(el('div','note',r.t.id+' \\u2014 '+(r.t.origin||'')));"
    "var ul=el('ul');r.t.attempts.forEach(function(a,i){ul.appendChild(el('li',null,"
    "(i===r.t.best_attempt?'[best] ':'')+a.key+(a.label?' ('+a.label+')':'')+': '+a.verdict+"
    "(a.reward!=null?', reward '+a.reward:'')+(a.stage?', stage '+a.stage:'')+"
    "(a.message?' \\u2014 '+a.message:'')+(a.source?' \\u2014 '+a.source:'')));});"
    "d.appendChild(ul);var b=r.best;if(b&&b.turns){d.appendChild(el('div',null,"
    "'trajectory: '+b.turns.length+' turn(s)'));var tl=el('ol');b.turns.forEach(function(t){"
    "tl.appendChild(el('li',null,t.tools.map(function(x){return x.name+(x.is_error?'(error)':'')"
    "}).join(', ')+(t.evals.length?' | evals: '+t.evals.map(function(e){return e.command+' '+"
    "(e.ok?'ok':'failed')+(e.reward!=null?' '+e.reward:'')}).join(', '):'')));});"
    "d.appendChild(tl);}if(b&&b.agent){d.appendChild(el('div',null,'agent result'));"
    "d.appendChild(el('pre',null,JSON.stringify(b.agent,null,1)));}"
    "if(b&&b.report){d.appendChild(el('div',null,'evaluator report (best attempt)'));"
    "d.appendChild(el('pre','report',JSON.stringify(b.report,null,1)));}return d;}\n"
    "function render(){var q=document.getElementById('filter').value.toLowerCase();"
    "var tb=document.querySelector('#tasks tbody');tb.textContent='';"
    "rows.slice().sort(function(a,b){var x=a[key],y=b[key];if(x==null&&y==null)return 0;"
    "if(x==null)return 1;if(y==null)return -1;return (x<y?-1:x>y?1:0)*dir;})"
    ".forEach(function(r){if(q&&(r.name+' '+r.verdict+' '+(r.stage||'')).toLowerCase()"
    ".indexOf(q)<0)return;var tr=el('tr','t');cols.forEach(function(c){var td=el('td',"
    "c[0]=='verdict'?r.verdict:null,fmt(c[0],r[c[0]]));tr.appendChild(td);});"
    "tr.onclick=function(){open[r.t.id]=!open[r.t.id];render();};tb.appendChild(tr);"
    "if(open[r.t.id]){var dr=el('tr');dr.appendChild(detail(r));tb.appendChild(dr);}});}\n"
    "var hr=document.querySelector('#tasks thead tr');cols.forEach(function(c){"
    "var th=el('th',null,c[1]);th.onclick=function(){dir=key==c[0]?-dir:1;key=c[0];render();};"
    "hr.appendChild(th);});document.getElementById('filter').oninput=render;render();\n"
    "document.body.setAttribute('data-rendered',rows.length);\n"
    "})();\n";

static int card(struct buf *b, const char *what, const char *value)
{
    return buf_addf(b, "<div class=\"card\"><b>%s</b>%s</div>", value, what);
}

int bench_report_html(const json_t *ex, struct buf *b)
{
    json_t *rep = bench_report_json(ex);
    add_trajectories(json_object_get(rep, "tasks"));
    struct bench_outcome *o = NULL;
    size_t n = 0;
    int rc = bench_outcomes_from_export(ex, &o, &n, NULL);
    if (rc) {
        json_decref(rep);
        return rc;
    }
    struct bench_metrics m;
    bench_metrics_compute(o, n, &m);
    const json_t *cfg = json_object_get(ex, "config"), *env = json_object_get(ex, "environment");
    rc = buf_addf(b,
                  "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width\">"
                  "<title>cuda-agent bench</title><style>%s</style></head><body>\n"
                  "<h1>cuda-agent bench</h1><p class=\"sub\">",
                  CSS);
    const char *fields[][2] = {
        {"source", "solutions"}, {"tasks_source", "tasks"}, {"rules", "rules"}};
    for (size_t i = 0; i < ARRAY_SIZE(fields) && !rc; i++) {
        const char *v = json_string_value(json_object_get(cfg, fields[i][0]));
        if (!v)
            continue;
        rc = buf_addf(b, "%s: <code>", fields[i][1]);
        if (!rc)
            rc = buf_add_html(b, v);
        if (!rc)
            rc = buf_addstr(b, "</code> &middot; ");
    }
    const char *ek;
    const json_t *ev;
    json_object_foreach((json_t *)env, ek, ev)
    {
        if (rc || !json_is_string(ev))
            continue;
        rc = buf_addf(b, "%s: ", ek);
        if (!rc)
            rc = buf_add_html(b, json_string_value(ev));
        if (!rc)
            rc = buf_addstr(b, " &middot; ");
    }
    char v1[32], v2[32], v3[32], v4[32];
    bench__fmt_rate(v1, sizeof(v1), m.overall.pass_rate, "&mdash;");
    bench__fmt_rate(v2, sizeof(v2), m.overall.faster_compile_rate, "&mdash;");
    bench__fmt_times(v3, sizeof(v3), m.overall.geomean_compile, 2, "&mdash;");
    bench__fmt_times(v4, sizeof(v4), m.overall.geomean_eager, 2, "&mdash;");
    if (!rc)
        rc = buf_addf(b, "%zu tasks</p><div class=\"cards\">", n);
    if (!rc)
        rc = card(b, "pass rate", v1);
    if (!rc)
        rc = card(b, "faster than torch.compile", v2);
    if (!rc)
        rc = card(b, "geomean vs torch.compile", v3);
    if (!rc)
        rc = card(b, "geomean vs eager", v4);
    if (!rc && (m.overall.infra || m.overall.pending)) {
        char c[64];
        snprintf(c, sizeof(c), "%zu / %zu", m.overall.infra, m.overall.pending);
        rc = card(b, "no verdict: infrastructure / pending", c);
    }
    if (!rc)
        rc = buf_addstr(b, "</div><h2>Metrics</h2>\n");
    if (!rc)
        rc = metrics_table(b, &m);
    if (!rc)
        rc = buf_addstr(b, "<h2>Charts</h2><div class=\"charts\">\n");
    if (!rc)
        rc = speedup_chart(b, o, n);
    if (!rc)
        rc = fast_p_chart(b, o, n);
    if (!rc)
        rc = reward_chart(b, &m.overall);
    if (!rc)
        rc = buf_addstr(b, "</div><h2>Tasks</h2><input id=\"filter\" placeholder=\"filter by "
                           "task, verdict or stage\"><table id=\"tasks\"><thead><tr></tr></thead>"
                           "<tbody></tbody></table>\n<script type=\"application/json\" "
                           "id=\"bench-data\">");
    char *data = json_dumps(rep, JSON_COMPACT | JSON_ESCAPE_SLASH | JSON_REAL_PRECISION(8));
    if (!rc)
        rc = data ? buf_addstr(b, data) : CA_ETOOBIG;
    free(data);
    if (!rc)
        rc = buf_addf(b, "</script>\n<script>%s</script>\n</body></html>\n", JS);
    json_decref(rep);
    free(o);
    return rc;
}
