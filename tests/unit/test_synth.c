/*
 * test_synth.c - src/synth without torch: the store (resume keys, duplicates, settings), the
 * report's counts and escaping, option checks, and the worker pool against a fake worker (a
 * shell script speaking the JSON-lines protocol) that hangs, crashes and babbles on given
 * seeds, so timeouts and crashes are rejections with reasons and the run goes on.
 */
#include "test.h"

#include <jansson.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/util.h"
#include "synth/synth.h"
#include "synth/synth_internal.h"

static const char TASK_CODE[] =
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
    "    def forward(self, x):\n        return torch.relu(x)  # %s\n\n\n"
    "def get_inputs():\n    return [torch.randn(4)]\n\n\n"
    "def get_init_inputs():\n    return []\n";

static json_t *settings(double max_ms)
{
    return json_pack("{s:f, s:f, s:s}", "min_ms", 1.0, "max_ms", max_ms, "device", "cpu");
}

static json_t *answer(int seed, bool ok, const char *key, const char *reason, const char *op)
{
    char tag[32];
    snprintf(tag, sizeof(tag), "seed %d", seed);
    char *code = xstrfmt(TASK_CODE, tag);
    json_t *a = json_pack("{s:i, s:b, s:s, s:s, s:[s,s], s:i, s:f, s:f, s:{s:{s:b}}}", "seed", seed,
                          "ok", ok, "code", code, "key", key, "ops", op, "F.relu", "depth", 2,
                          "eager_ms", 5.0, "compile_ms", 4.0, "filters", "compile", "ok", ok);
    if (reason)
        json_object_set_new(a, "reason", json_string(reason));
    free(code);
    return a;
}

static void record(struct synth_store *s, const char *stream, json_t *a, bool want_dup)
{
    struct ca_err err = {0};
    bool dup = !want_dup;
    CHECK_EQ(synth__store_record(s, stream, a, &dup, &err), 0);
    CHECK_EQ(dup, want_dup);
    json_decref(a);
}

struct collect {
    struct buf b;
};

static int collect_row(const struct synth_row *r, void *ctx)
{
    struct collect *c = ctx;
    return buf_addf(&c->b, "%s:%lld:%s:%s;", r->stream, (long long)r->seed, r->status,
                    r->filter ? r->filter : "-");
}

TEST(store_records_once_dedups_and_keeps_reasons)
{
    const char *dir = test_tmpdir();
    struct ca_err err = {0};
    struct synth_store *s;
    json_t *set = settings(100);
    REQUIRE(synth__store_open(dir, set, &s, &err) == 0);
    record(s, "st1", answer(0, true, "k0", NULL, "nn.Conv2d"), false);
    record(s, "st1", answer(1, true, "k0", NULL, "nn.Conv2d"), true); /* same normalised code */
    record(s, "st1", answer(2, false, "k2", "runtime: too slow: eager 300 ms > 100 ms", "nn.X"),
           false);
    record(s, "st2", answer(0, true, "k3", NULL, "nn.Linear"), false);
    CHECK(synth__store_has(s, "st1", 0));
    CHECK(synth__store_has(s, "st2", 0));
    CHECK(!synth__store_has(s, "st2", 1));
    CHECK_EQ(synth__store_count(s, true), 2);
    CHECK_EQ(synth__store_count(s, false), 4);
    /* A seed is recorded once: a second answer for it is refused, the first stays. */
    bool dup;
    json_t *again = answer(2, true, "k9", NULL, "nn.X");
    CHECK(synth__store_record(s, "st1", again, &dup, &err) != 0);
    json_decref(again);
    struct collect c;
    buf_init(&c.b, 4096);
    CHECK_EQ(synth__store_each(s, false, collect_row, &c, &err), 0);
    CHECK_STR(c.b.data, "st1:0:accepted:-;st1:1:rejected:duplicate;st1:2:rejected:runtime;"
                        "st2:0:accepted:-;");
    buf_release(&c.b);
    synth__store_free(s);

    /* Reopening with other filter settings is refused, naming the setting. */
    json_t *other = settings(50);
    CHECK(synth__store_open(dir, other, &s, &err) == CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "max_ms");
    json_decref(other);
    REQUIRE(synth__store_open(dir, set, &s, &err) == 0);
    CHECK_EQ(synth__store_count(s, false), 4);
    synth__store_free(s);
    json_decref(set);
}

TEST(store_refuses_what_is_not_a_store)
{
    const char *dir = test_tmpdir();
    struct ca_err err = {0};
    struct synth_store *s = NULL;
    CHECK_EQ(synth__store_open(dir, NULL, &s, &err), CA_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "no synth store");
    struct buf p;
    buf_init(&p, 4096);
    REQUIRE(fs_join(&p, dir, "synth.db") == 0);
    REQUIRE(fs_write_atomic(p.data, "not sqlite at all, just text.....", 33, 0644, &err) == 0);
    json_t *set = settings(100);
    CHECK(synth__store_open(dir, set, &s, &err) != 0);
    CHECK(s == NULL);
    json_decref(set);
    buf_release(&p);
}

TEST(name_from_ops)
{
    char name[64];
    json_t *ops = json_pack("[s,s,s]", "nn.Conv2d", "F.relu", "torch.log_softmax");
    synth__name_from_ops(ops, name, sizeof(name));
    CHECK_STR(name, "conv2d_relu_log_softmax");
    json_decref(ops);
    synth__name_from_ops(NULL, name, sizeof(name));
    CHECK_STR(name, "task");
    ops = json_pack("[s,s,s,s,s,s]", "nn.AdaptiveAvgPool3d", "nn.ConvTranspose3d",
                    "nn.InstanceNorm2d", "nn.Hardswish", "nn.Softplus", "nn.Tanh");
    synth__name_from_ops(ops, name, sizeof(name));
    CHECK(strlen(name) <= 48);
    CHECK_STR(name, "adaptiveavgpool3d_convtranspose3d_instancenorm2d");
    json_decref(ops);
}

TEST(report_counts_each_filter_over_what_reached_it)
{
    const char *dir = test_tmpdir();
    struct ca_err err = {0};
    struct synth_store *s;
    json_t *set = settings(100);
    REQUIRE(synth__store_open(dir, set, &s, &err) == 0);
    json_decref(set);
    record(s, "a", answer(0, true, "k0", NULL, "nn.Conv2d"), false);
    record(s, "a", answer(1, true, "k0", NULL, "nn.Conv2d"), true);
    record(s, "a", answer(2, false, "k2", "runtime: too fast", "nn.Conv2d"), false);
    record(s, "a", answer(3, false, "k3", "static: stochastic operator dropout", "nn.Conv2d"),
           false);
    record(s, "a", answer(4, false, "k4", "timeout: no answer in 10 ms", "nn.Conv2d"), false);
    record(s, "a", answer(5, true, "k5", NULL, "<b>"), false);
    synth__store_free(s);
    struct buf md, html;
    buf_init(&md, 1 << 20);
    buf_init(&html, 1 << 20);
    REQUIRE(synth_report(dir, false, &md, &err) == 0);
    REQUIRE(synth_report(dir, true, &html, &err) == 0);
    CHECK_CONTAINS(md.data, "6 candidates, 2 accepted (33.3%), 1 timeouts, 0 crashes");
    /* 5 reach static (the timeout reached no filter); 4 pass it and reach runtime; 3 pass. */
    CHECK_CONTAINS(md.data, "| static | 5 | 4 | 80.0% |");
    CHECK_CONTAINS(md.data, "| runtime | 4 | 3 | 75.0% |");
    CHECK_CONTAINS(md.data, "| duplicate | 3 | 2 | 66.7% |");
    CHECK_CONTAINS(md.data, "| similarity | - | - | not run");
    CHECK_CONTAINS(md.data, "| 2 | 2 | 100.0% | 83.8% |");
    CHECK_CONTAINS(md.data, "| 5-10 ms | 2 | 100.0% |");
    CHECK_CONTAINS(md.data, "| F.relu | 2 |");
    CHECK_CONTAINS(md.data, "| runtime: too fast | 1 |");
    CHECK_CONTAINS(md.data, "| timeout: no answer in N ms | 1 |");
    CHECK_CONTAINS(html.data, "&lt;b&gt;");
    CHECK_CONTAINS(html.data, "<table id=reasons>");
    CHECK(strstr(html.data, "<b>") == NULL);
    CHECK(strstr(html.data, "http") == NULL);
    buf_release(&md);
    buf_release(&html);
}

TEST(run_checks_options_before_starting_anything)
{
    struct synth_opts o;
    struct synth_stats st;
    struct ca_err err = {0};
    synth_opts_init(&o);
    o.out_dir = test_tmpdir();
    o.seed_lo = 5;
    o.seed_hi = 1;
    CHECK_EQ(synth_run(&o, &st, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "seed range");
    synth_opts_init(&o);
    o.out_dir = test_tmpdir();
    o.min_ms = 10;
    o.max_ms = 5;
    CHECK_EQ(synth_run(&o, &st, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "runtime window");
    synth_opts_init(&o);
    o.out_dir = test_tmpdir();
    o.depths = "2:1,0:3";
    CHECK_EQ(synth_run(&o, &st, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "\"0:3\"");
    synth_opts_init(&o);
    o.out_dir = test_tmpdir();
    o.device = "tpu";
    CHECK_EQ(synth_run(&o, &st, &err), CA_EUSAGE);
}

/* A fake worker: seed 1 hangs, seed 2 dies, seed 3 writes garbage, seeds 4 and 5 give the same
 * normalised code, seed 7 an answer over SYNTH_LIMIT_ANSWER, every other seed an accepted task. */
static const char FAKE_WORKER[] =
    "#!/bin/sh\n"
    "read cfg\n"
    "echo '{\"ready\": true, \"fingerprint\": \"f\", \"device\": \"cpu\", \"torch\": \"fake\"}'\n"
    "while read line; do\n"
    "  seed=$(echo \"$line\" | tr -cd 0-9)\n"
    "  case $seed in\n"
    "  1) sleep 60 ;;\n"
    "  2) exit 1 ;;\n"
    "  3) echo 'this is not JSON' ;;\n"
    "  7) head -c 4300000 /dev/zero | tr '\\0' x; echo ;;\n"
    "  4|5) sed \"s/SEED/$seed/g; s/KEY/dup/\" \"$(dirname \"$0\")/answer.tmpl\" ;;\n"
    "  *) sed \"s/SEED/$seed/g; s/KEY/k$seed/\" \"$(dirname \"$0\")/answer.tmpl\" ;;\n"
    "  esac\n"
    "done\n";

static void write_file(const char *dir, const char *name, const char *text, mode_t mode)
{
    struct buf p;
    struct ca_err err = {0};
    buf_init(&p, 4096);
    REQUIRE(fs_join(&p, dir, name) == 0);
    REQUIRE(fs_write_atomic(p.data, text, strlen(text), mode, &err) == 0);
    buf_release(&p);
}

static void fake_setup(const char *dir, struct synth_opts *o, struct buf *out)
{
    write_file(dir, "fake_python", FAKE_WORKER, 0755);
    json_t *a = answer(0, true, "KEY", NULL, "torch.relu");
    json_object_set_new(a, "seed", json_string("SEED"));
    char *line = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    /* "seed": "SEED" -> a number; the code's tag "# seed 0" -> "# seed SEED". */
    struct buf t;
    buf_init(&t, 1 << 16);
    for (const char *p = line; *p; p++) {
        if (strncmp(p, "\"SEED\"", 6) == 0) {
            REQUIRE(buf_addstr(&t, "SEED") == 0);
            p += 5;
        } else if (strncmp(p, "seed 0", 6) == 0) {
            REQUIRE(buf_addstr(&t, "seed SEED") == 0);
            p += 5;
        } else {
            REQUIRE(buf_addch(&t, *p) == 0);
        }
    }
    REQUIRE(buf_addch(&t, '\n') == 0);
    free(line);
    write_file(dir, "answer.tmpl", t.data, 0644);
    buf_release(&t);
    write_file(dir, "cat.json",
               "{\"schema\": \"cuda-agent-synth-catalog/1\", \"ops\": "
               "{\"torch.relu\": {}}}",
               0644);
    struct buf py, cache;
    buf_init(&py, 4096);
    buf_init(&cache, 4096);
    REQUIRE(fs_join(&py, dir, "fake_python") == 0);
    REQUIRE(fs_join(&cache, dir, "cache") == 0);
    setenv("CUDA_AGENT_PYTHON", py.data, 1);
    setenv("CUDA_AGENT_CACHE_DIR", cache.data, 1);
    buf_release(&py);
    buf_release(&cache);
    REQUIRE(fs_join(out, dir, "out") == 0);
    synth_opts_init(o);
    o->out_dir = out->data;
    o->parquet = false;
    o->timeout_ms = 1500;
}

TEST(pool_turns_hangs_and_crashes_into_rejections)
{
    const char *dir = test_tmpdir();
    struct synth_opts o;
    struct buf out, cat;
    buf_init(&out, 4096);
    buf_init(&cat, 4096);
    fake_setup(dir, &o, &out);
    REQUIRE(fs_join(&cat, dir, "cat.json") == 0);
    o.catalog = cat.data;
    o.seed_lo = 0;
    o.seed_hi = 7;
    o.jobs = 2;
    struct synth_stats st;
    struct ca_err err = {0};
    int rc = synth_run(&o, &st, &err);
    REQUIRE(rc == 0 || (fprintf(stderr, "%s\n", err.msg), 0));
    CHECK_EQ(st.planned, 8);
    CHECK_EQ(st.done, 8);
    CHECK_EQ(st.accepted, 3); /* 0, 4, 6 */
    CHECK_EQ(st.timeouts, 1);
    CHECK_EQ(st.crashes, 3); /* 2 died, 3 babbled, 7 over the limit */
    CHECK_EQ(st.duplicates, 1);
    CHECK(!st.interrupted);
    struct buf md;
    buf_init(&md, 1 << 20);
    REQUIRE(synth_report(out.data, false, &md, &err) == 0);
    CHECK_CONTAINS(md.data, "8 candidates, 3 accepted");
    CHECK_CONTAINS(md.data, "1 timeouts, 3 crashes");
    CHECK_CONTAINS(md.data, "| crash: the answer is over the size limit | 1 |");
    buf_release(&md);
    /* tasks.jsonl holds the accepted ones, in seed order, loadable as a task source. */
    struct buf p, text;
    buf_init(&p, 4096);
    buf_init(&text, 1 << 20);
    REQUIRE(fs_join(&p, out.data, "tasks.jsonl") == 0);
    REQUIRE(fs_read_file(p.data, 1 << 20, &text, &err) == 0);
    const char *s0 = strstr(text.data, "\"seed\":0,"), *s4 = strstr(text.data, "\"seed\":4,");
    const char *s6 = strstr(text.data, "\"seed\":6,");
    CHECK(s0 && s4 && s6 && s0 < s4 && s4 < s6);
    CHECK(strstr(text.data, "\"seed\":5,") == NULL);
    CHECK_CONTAINS(text.data, "\"data_source\":\"torch#2\"");
    /* The catalog that made them is kept, named by the first part of the stream. */
    const char *stream = strstr(text.data, "\"stream\":\"");
    REQUIRE(stream != NULL);
    char kept[64];
    snprintf(kept, sizeof(kept), "catalogs/%.16s.json", stream + 10);
    buf_reset(&p);
    REQUIRE(fs_join(&p, out.data, kept) == 0);
    CHECK(fs_is_file(p.data));
    /* Running again does nothing: every seed is recorded. */
    rc = synth_run(&o, &st, &err);
    CHECK_EQ(rc, 0);
    CHECK_EQ(st.planned, 0);
    CHECK_EQ(st.done, 0);
    CHECK_EQ(st.total_accepted, 3);
    buf_release(&p);
    buf_release(&text);
    buf_release(&out);
    buf_release(&cat);
}

TEST(pool_unknown_operator_and_stop)
{
    const char *dir = test_tmpdir();
    struct synth_opts o;
    struct buf out, cat;
    buf_init(&out, 4096);
    buf_init(&cat, 4096);
    fake_setup(dir, &o, &out);
    REQUIRE(fs_join(&cat, dir, "cat.json") == 0);
    o.catalog = cat.data;
    o.ops = "torch.relu, nn.Nope";
    struct synth_stats st;
    struct ca_err err = {0};
    CHECK_EQ(synth_run(&o, &st, &err), CA_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "unknown operator \"nn.Nope\"");
    /* A stop before anything ran: no error, interrupted, nothing recorded. */
    static volatile sig_atomic_t stop = 1;
    o.ops = NULL;
    o.stop = &stop;
    o.seed_hi = 3;
    CHECK_EQ(synth_run(&o, &st, &err), 0);
    CHECK(st.interrupted);
    CHECK_EQ(st.done, 0);
    buf_release(&out);
    buf_release(&cat);
}
