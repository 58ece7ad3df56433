/* test_bench.c - bench metrics by hand, the SQLite store (resume, idempotence, refused
 * databases), the plan's bad input, and the HTML page's escaping. */
#include "test.h"

#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <unistd.h>

#include "bench/bench.h"
#include "core/buf.h"
#include "core/util.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

static struct bench_outcome out(int level, enum bench_verdict v, int reward, double se, double sc)
{
    struct bench_outcome o = {.task_id = "t",
                              .level = level,
                              .verdict = v,
                              .reward = reward,
                              .speedup_eager = se,
                              .speedup_compile = sc,
                              .peak_fraction = NAN};
    return o;
}

/* Level 1: correct 2.0x/1.5x (reward 3), correct 1.0x/0.5x (a tie with eager: not faster),
 * failed. Level 2: correct 4.0x/2.0x, infrastructure, pending. */
TEST(metrics_by_hand)
{
    struct bench_outcome o[] = {
        out(1, BENCH_CORRECT, 3, 2.0, 1.5), out(1, BENCH_CORRECT, 1, 1.0, 0.5),
        out(1, BENCH_FAILED, -1, NAN, NAN), out(2, BENCH_CORRECT, 3, 4.0, 2.0),
        out(2, BENCH_INFRA, 0, NAN, NAN),   out(2, BENCH_PENDING, 0, NAN, NAN),
    };
    o[0].peak_fraction = 0.5;
    o[3].peak_fraction = 0.1;
    o[3].timing_noisy = true;
    struct bench_metrics m;
    bench_metrics_compute(o, ARRAY_SIZE(o), &m);
    const struct bench_level_metrics *a = &m.overall;
    CHECK_EQ(a->tasks, 6);
    CHECK_EQ(a->verdicts, 4); /* infrastructure and pending have no verdict */
    CHECK_EQ(a->infra, 1);
    CHECK_EQ(a->pending, 1);
    CHECK_EQ(a->correct, 3);
    CHECK(NEAR(a->pass_rate, 3.0 / 4));
    CHECK_EQ(a->faster_eager, 2); /* 2.0 and 4.0; 1.0 is a tie */
    CHECK(NEAR(a->faster_eager_rate, 2.0 / 4));
    CHECK_EQ(a->faster_compile, 2);
    CHECK(NEAR(a->faster_compile_rate, 2.0 / 4));
    /* Over correct tasks only: the failure is not a zero in the mean. */
    CHECK(NEAR(a->geomean_eager, cbrt(2.0 * 1.0 * 4.0)));
    CHECK(NEAR(a->geomean_compile, cbrt(1.5 * 0.5 * 2.0)));
    CHECK_EQ(a->reward_hist[0], 1);
    CHECK_EQ(a->reward_hist[1], 1);
    CHECK_EQ(a->reward_hist[2], 0);
    CHECK_EQ(a->reward_hist[3], 2);
    CHECK(NEAR(a->peak_fraction_median, 0.3));
    CHECK_EQ(a->noisy, 1);

    const struct bench_level_metrics *l1 = &m.levels[1], *l2 = &m.levels[2];
    CHECK_EQ(l1->tasks, 3);
    CHECK(NEAR(l1->pass_rate, 2.0 / 3));
    CHECK(NEAR(l1->faster_eager_rate, 1.0 / 3));
    CHECK(NEAR(l1->geomean_eager, sqrt(2.0)));
    CHECK_EQ(l2->verdicts, 1);
    CHECK(NEAR(l2->pass_rate, 1.0));
    CHECK(NEAR(l2->geomean_compile, 2.0));
    CHECK_EQ(m.levels[3].tasks, 0);
}

TEST(metrics_without_verdicts_or_compile_timings)
{
    struct bench_outcome o[] = {out(1, BENCH_INFRA, 0, NAN, NAN),
                                out(1, BENCH_PENDING, 0, NAN, NAN)};
    struct bench_metrics m;
    bench_metrics_compute(o, ARRAY_SIZE(o), &m);
    CHECK_EQ(m.overall.verdicts, 0);
    CHECK(isnan(m.overall.pass_rate)); /* unknown, not 0% */
    CHECK(isnan(m.overall.geomean_eager));
    /* --no-compile-baseline: no torch.compile speedup anywhere -> the rate is unknown. */
    struct bench_outcome k[] = {out(1, BENCH_CORRECT, 2, 1.5, NAN),
                                out(1, BENCH_FAILED, -1, NAN, NAN)};
    bench_metrics_compute(k, ARRAY_SIZE(k), &m);
    CHECK(NEAR(m.overall.pass_rate, 0.5));
    CHECK(isnan(m.overall.faster_compile_rate));
    CHECK(isnan(m.overall.geomean_compile));
    CHECK(NEAR(m.overall.geomean_eager, 1.5));
    /* With compile timings somewhere, a level whose tasks all failed has 0%, not unknown. */
    struct bench_outcome c[] = {out(1, BENCH_CORRECT, 3, 2.0, 1.2),
                                out(2, BENCH_FAILED, -1, NAN, NAN)};
    bench_metrics_compute(c, ARRAY_SIZE(c), &m);
    CHECK(m.levels[2].faster_compile_rate == 0.0);
    CHECK(NEAR(m.overall.faster_compile_rate, 0.5));
}

TEST(fast_p_counts_strictly_faster_over_verdicts)
{
    struct bench_outcome o[] = {
        out(1, BENCH_CORRECT, 3, 2.0, 1.0), out(1, BENCH_CORRECT, 1, 1.0, 0.5),
        out(1, BENCH_FAILED, -1, NAN, NAN), out(1, BENCH_INFRA, 0, NAN, NAN)};
    CHECK(NEAR(bench_fast_p(o, 4, -1, 0.0, false), 2.0 / 3)); /* fast_0 is the pass rate */
    CHECK(NEAR(bench_fast_p(o, 4, -1, 1.0, false), 1.0 / 3)); /* 1.0 is not > 1 */
    CHECK(NEAR(bench_fast_p(o, 4, -1, 1.0, true), 0.0));
    CHECK(NEAR(bench_fast_p(o, 4, 1, 1.5, false), 1.0 / 3));
    CHECK(bench_fast_p(o, 4, -1, 2.0, false) == 0.0);
    CHECK(isnan(bench_fast_p(o, 4, 2, 0.0, false))); /* no task at level 2 */
}

TEST(best_attempt_order)
{
    struct bench_outcome fail = out(1, BENCH_FAILED, -1, NAN, NAN),
                         infra = out(1, BENCH_INFRA, 0, NAN, NAN),
                         pend = out(1, BENCH_PENDING, 0, NAN, NAN),
                         c1 = out(1, BENCH_CORRECT, 1, 3.0, 0.9),
                         c3 = out(1, BENCH_CORRECT, 3, 1.2, 1.1),
                         c3b = out(1, BENCH_CORRECT, 3, 1.3, 1.2);
    CHECK(bench_outcome_better(&fail, &infra));
    CHECK(bench_outcome_better(&infra, &pend));
    CHECK(bench_outcome_better(&c1, &fail));
    CHECK(bench_outcome_better(&c3, &c1)); /* the reward first */
    CHECK(bench_outcome_better(&c3b, &c3));
    CHECK(!bench_outcome_better(&c3, &c3));
    CHECK(!bench_outcome_better(&fail, &fail));
}

TEST(outcome_from_reports)
{
    struct bench_outcome o;
    json_t *r = json_loads("{\"ok\": true, \"stage\": \"done\", \"reward\": {\"reward\": 2,"
                           " \"speedup_eager\": 1.5, \"speedup_compile\": null},"
                           " \"harness\": {\"timing\": {\"sol\": {\"peak_fraction\": 0.25}}}}",
                           0, NULL);
    REQUIRE(r);
    bench_outcome_from_report(r, &o);
    CHECK_EQ(o.verdict, BENCH_CORRECT);
    CHECK_EQ(o.reward, 2);
    CHECK(o.speedup_eager == 1.5 && isnan(o.speedup_compile) && o.peak_fraction == 0.25);
    json_decref(r);
    r = json_loads("{\"ok\": false, \"stage\": \"verify\", \"reward\": {\"reward\": -1,"
                   " \"speedup_eager\": 9.0}}",
                   0, NULL);
    bench_outcome_from_report(r, &o);
    CHECK_EQ(o.verdict, BENCH_FAILED);
    CHECK(isnan(o.speedup_eager)); /* a failed candidate's timing never counts */
    json_decref(r);
    r = json_loads("{\"ok\": false, \"stage\": \"infrastructure\", \"infrastructure_error\": true}",
                   0, NULL);
    bench_outcome_from_report(r, &o);
    CHECK_EQ(o.verdict, BENCH_INFRA);
    json_decref(r);
    bench_outcome_from_report(NULL, &o);
    CHECK_EQ(o.verdict, BENCH_PENDING);
}

static char *db_path(const char *name)
{
    return xstrfmt("%s/%s", test_tmpdir(), name);
}

static json_t *config(const char *rules)
{
    return json_pack("{s:s, s:s}", "mode", "map", "rules", rules);
}

/* One task, one attempt, planned (twice: a no-op) and optionally recorded. */
static void plan_one(struct bench_store *s, struct bench_attempt *a)
{
    struct ca_err err = {0};
    REQUIRE(bench_store_begin(s, &err) == 0);
    REQUIRE(bench_store_add_task(s, "t1-abc", "l1_t1", 1, "t1.py", 42, "code", &err) == 0);
    bench_attempt_release(a);
    a->task_id = xstrdup("t1-abc");
    a->key = xstrdup("file");
    a->source = xstrdup("/s.py");
    a->kind = BENCH_KIND_FILE;
    REQUIRE(bench_store_plan(s, a, &err) == 0);
    int64_t id = a->id;
    REQUIRE(bench_store_plan(s, a, &err) == 0);
    CHECK_EQ(a->id, id);
    REQUIRE(bench_store_commit(s, &err) == 0);
}

static const char *REPORT = "{\"ok\": true, \"stage\": \"done\", \"reward\": {\"reward\": 3,"
                            " \"speedup_eager\": 2.0, \"speedup_compile\": 1.5}}";

TEST(store_resumes_and_records_once)
{
    char *path = db_path("run.sqlite");
    struct ca_err err = {0};
    json_t *cfg = config("kernelbench");
    struct bench_store *s = NULL;
    REQUIRE(bench_store_open(path, cfg, &s, &err) == 0);
    struct bench_attempt a = {0};
    plan_one(s, &a);
    bool done = true;
    REQUIRE(bench_store_finished(s, a.id, &done, &err) == 0);
    CHECK(!done);
    bench_store_free(s); /* "killed" before the attempt finished */

    REQUIRE(bench_store_open(path, cfg, &s, &err) == 0);
    plan_one(s, &a);
    REQUIRE(bench_store_finished(s, a.id, &done, &err) == 0);
    CHECK(!done);
    json_t *r = json_loads(REPORT, 0, NULL);
    struct bench_timing t = {.started_us = 1, .finished_us = 2, .wall_ms = 3.5};
    REQUIRE(bench_store_record(s, a.id, r, &t, NULL, &err) == 0);
    json_t *other = json_loads("{\"ok\": false, \"stage\": \"verify\"}", 0, NULL);
    REQUIRE(bench_store_record(s, a.id, other, &t, NULL, &err) == 0); /* the first stands */
    bench_store_free(s);

    REQUIRE(bench_store_open(path, NULL, &s, &err) == 0); /* read-only, as bench report */
    REQUIRE(bench_store_finished(s, a.id, &done, &err) == 0);
    CHECK(done);
    json_t *ex = NULL;
    REQUIRE(bench_store_export(s, true, &ex, &err) == 0);
    json_t *att = json_array_get(
        json_object_get(json_array_get(json_object_get(ex, "tasks"), 0), "attempts"), 0);
    CHECK_STR(json_string_value(json_object_get(att, "verdict")), "correct");
    CHECK_EQ(json_integer_value(json_object_get(att, "reward")), 3);
    CHECK(json_equal(json_object_get(att, "report"), r));
    CHECK(json_number_value(json_object_get(att, "wall_ms")) == 3.5);
    CHECK_EQ(json_array_size(
                 json_object_get(json_array_get(json_object_get(ex, "tasks"), 0), "attempts")),
             1);
    json_decref(ex);
    bench_store_free(s);
    json_decref(r);
    json_decref(other);
    json_decref(cfg);
    bench_attempt_release(&a);
    free(path);
}

TEST(store_refuses_other_settings_foreign_and_corrupt)
{
    char *path = db_path("run.sqlite");
    struct ca_err err = {0};
    json_t *cfg = config("kernelbench"), *cfg2 = config("cuda-agent");
    struct bench_store *s = NULL;
    REQUIRE(bench_store_open(path, cfg, &s, &err) == 0);
    bench_store_free(s);
    CHECK_EQ(bench_store_open(path, cfg2, &s, &err), CA_EPARSE);
    CHECK(s == NULL);
    CHECK_CONTAINS(err.msg, "--rules was \"kernelbench\", now \"cuda-agent\"");

    char *foreign = db_path("foreign.sqlite");
    sqlite3 *db;
    REQUIRE(sqlite3_open(foreign, &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "CREATE TABLE meta(key TEXT, value TEXT)", NULL, NULL, NULL) ==
            SQLITE_OK);
    sqlite3_close(db);
    CHECK_EQ(bench_store_open(foreign, cfg, &s, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "not a cuda-agent bench run");

    char *junk = db_path("junk.sqlite");
    FILE *f = fopen(junk, "w");
    REQUIRE(f);
    for (int i = 0; i < 512; i++)
        fputs("garbage!", f);
    fclose(f);
    CHECK_EQ(bench_store_open(junk, cfg, &s, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "not a bench run database");

    char *none = db_path("none.sqlite");
    CHECK_EQ(bench_store_open(none, NULL, &s, &err), CA_ENOTFOUND);
    CHECK(access(none, F_OK) != 0); /* a report never creates a database */
    json_decref(cfg);
    json_decref(cfg2);
    free(path);
    free(foreign);
    free(junk);
    free(none);
}

static int plan_with(struct bench_plan_opts *o, struct ca_err *err)
{
    char *path = db_path("plan.sqlite");
    json_t *cfg = config("x");
    struct bench_store *s = NULL;
    REQUIRE(bench_store_open(path, cfg, &s, err) == 0);
    char *files = db_path("files");
    o->files_dir = files;
    struct bench_plan p;
    int rc = bench_plan_build(o, s, &p, err);
    if (rc == 0)
        bench_plan_release(&p);
    bench_store_free(s);
    json_decref(cfg);
    unlink(path);
    free(path);
    free(files);
    return rc;
}

TEST(plan_bad_input)
{
    char *tasks = xstrfmt("%s/tests/bench/cpu/tasks", test_repo());
    char *map = xstrfmt("%s/tests/bench/fake/map.jsonl", test_repo());
    struct ca_err err = {0};
    struct bench_plan_opts o = {.tasks_source = tasks, .map = map, .tasks = "nope"};
    CHECK_EQ(plan_with(&o, &err), CA_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "no task 'nope'");

    o.tasks = NULL;
    o.levels = "1,banana";
    CHECK_EQ(plan_with(&o, &err), CA_EUSAGE);

    o.levels = "2";
    CHECK_EQ(plan_with(&o, &err), 0);

    char *bad = db_path("bad.jsonl");
    FILE *f = fopen(bad, "w");
    REQUIRE(f);
    fputs("{\"task\": \"l1_1_Swish\"}\n", f); /* no solution */
    fclose(f);
    o.map = bad;
    o.levels = NULL;
    CHECK_EQ(plan_with(&o, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "bad.jsonl:1: expected");

    f = fopen(bad, "w");
    REQUIRE(f);
    fputs("{\"task\": \"l1_1_Swish\", \"solution\": \"gone.py\"}\n", f);
    fclose(f);
    CHECK_EQ(plan_with(&o, &err), CA_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "gone.py: no such file");

    struct bench_plan_opts none = {.tasks_source = tasks, .solutions = "/nonexistent/dir"};
    CHECK_EQ(plan_with(&none, &err), CA_ENOTFOUND);
    free(tasks);
    free(map);
    free(bad);
}

TEST(sample_is_stratified_and_seeded)
{
    char *tasks = xstrfmt("%s/tests/bench/cpu/tasks", test_repo());
    char *path = db_path("s.sqlite");
    char *files = db_path("files");
    struct ca_err err = {0};
    json_t *cfg = config("x");
    char first[2][64] = {"", ""};
    for (int round = 0; round < 2; round++) {
        struct bench_store *s = NULL;
        REQUIRE(bench_store_open(path, cfg, &s, &err) == 0);
        struct bench_plan_opts o = {.tasks_source = tasks,
                                    .solutions = test_tmpdir(),
                                    .sample = 2,
                                    .seed = 11,
                                    .files_dir = files};
        struct bench_plan p;
        REQUIRE(bench_plan_build(&o, s, &p, &err) == 0);
        CHECK_EQ(p.ntasks, 2);
        CHECK_EQ(p.n, 2);
        CHECK(p.attempts[0].level == 1 && p.attempts[1].level == 2); /* one per level */
        CHECK_EQ(p.attempts[0].kind, BENCH_KIND_MISSING); /* no files in the solutions dir */
        snprintf(first[round], sizeof(first[round]), "%s", p.attempts[0].task_id);
        bench_plan_release(&p);
        bench_store_free(s);
    }
    CHECK_STR(first[0], first[1]); /* the same seed picks the same tasks */
    json_decref(cfg);
    free(tasks);
    free(path);
    free(files);
}

TEST(html_is_self_contained_and_escaped)
{
    json_t *ex = json_loads(
        "{\"config\": {\"source\": \"<b>dir</b>\"}, \"environment\": {\"gpu\": \"G\"},"
        " \"timing\": {},"
        " \"tasks\": [{\"id\": \"a-1\", \"name\": \"a\", \"level\": 1, \"attempts\": ["
        "   {\"key\": \"file\", \"verdict\": \"correct\", \"reward\": 3, \"speedup_eager\": 2.0,"
        "    \"speedup_compile\": 1.5, \"message\": \"</script><script>alert(1)</script>\"}]},"
        "  {\"id\": \"b-2\", \"name\": \"b\", \"level\": 2, \"attempts\": ["
        "   {\"key\": \"file\", \"verdict\": \"failed\", \"reward\": -1}]}]}",
        0, NULL);
    REQUIRE(ex);
    struct buf b;
    buf_init(&b, 64 * 1024 * 1024);
    REQUIRE(bench_report_html(ex, &b) == 0);
    CHECK_CONTAINS(b.data, "id=\"chart-speedup\"");
    CHECK_CONTAINS(b.data, "id=\"chart-fastp\"");
    CHECK_CONTAINS(b.data, "id=\"chart-rewards\"");
    CHECK_CONTAINS(b.data, "CUDA Agent (paper");
    CHECK_CONTAINS(b.data, "&lt;b&gt;dir&lt;/b&gt;");
    CHECK(strstr(b.data, "</script><script>alert") == NULL);
    CHECK(strstr(b.data, "http://") == NULL || strstr(b.data, "http://www.w3.org/2000/svg"));
    CHECK(strstr(b.data, "https://") == NULL);
    buf_reset(&b);
    REQUIRE(bench_report_markdown(ex, &b) == 0);
    CHECK_CONTAINS(b.data, "| **all** | 2 | 2 | 50.0% | 50.0% | 50.0% | 2.00x | 1.50x | 0 | 0 |");
    buf_release(&b);
    json_decref(ex);
}
