/* test_eval_report.c - the evaluator report's typed reader and the text made from it. */
#include "test.h"

#include <jansson.h>
#include <math.h>

#include "core/buf.h"
#include "eval/eval.h"
#include "eval/eval_internal.h"
#include "eval/eval_report.h"

static const char *FULL =
    "{\"ok\": true, \"stage\": \"done\", \"task\": {\"id\": \"swish\"},"
    " \"kernelbench\": {\"file\": \"kb.py\", \"functions\": [\"f\", \"g\"]},"
    " \"compile\": {\"ok\": true}, \"stage_ms\": {\"compile\": 1500},"
    " \"reward\": {\"reward\": 3, \"speedup_eager\": 2.5, \"speedup_compile\": 1.25,"
    "   \"reason\": \"faster than both\"},"
    " \"harness\": {\"ok\": true, \"stage\": \"done\","
    "   \"verification\": {\"launches\": {\"extension_kernels\": 2, \"extension_us\": 30.0,"
    "     \"total_us\": 40.0}},"
    "   \"flags\": [{\"kind\": \"sol\", \"message\": \"fast\"}],"
    "   \"timing\": {\"eager\": {\"median_ms\": 2.0, \"cv\": 0.01, \"n\": 100},"
    "     \"compile\": {\"median_ms\": 1.0, \"cv\": 0.02, \"n\": 90},"
    "     \"candidate\": {\"median_ms\": 0.8, \"cv\": 0.005, \"n\": 120},"
    "     \"sol\": {\"flagged\": true}}}}";

TEST(eval_report_reads_every_section)
{
    json_t *j = json_loads(FULL, 0, NULL);
    REQUIRE(j);
    struct eval_report r;
    eval_report_read(j, &r);
    CHECK(r.raw == j);
    CHECK(r.ok);
    CHECK_STR(r.stage, "done");
    CHECK_STR(r.task_id, "swish");
    CHECK(r.has_kernelbench);
    CHECK_STR(r.kb_file, "kb.py");
    CHECK_EQ(r.n_kb_functions, 2);
    CHECK_STR(r.kb_functions[1], "g");
    CHECK(r.has_compile && r.compile_ok);
    CHECK(r.compile_ms == 1500.0);
    CHECK(r.has_reward && r.reward_is_int);
    CHECK_EQ(r.reward, 3);
    CHECK(r.speedup_eager == 2.5 && r.speedup_compile == 1.25);
    CHECK_STR(r.reward_reason, "faster than both");
    CHECK(r.has_harness && r.harness_ok);
    CHECK(r.has_launches);
    CHECK_EQ(r.extension_kernels, 2);
    CHECK(r.extension_us == 30.0 && r.total_us == 40.0);
    CHECK_EQ(r.n_flags, 1);
    CHECK_STR(r.flags[0].kind, "sol");
    CHECK(r.eager.present && r.eager.median_ms == 2.0 && r.eager.n == 100);
    CHECK(r.compile.present && r.compile.median_ms == 1.0);
    CHECK(r.candidate.present && r.candidate.median_ms == 0.8 && r.candidate.cv == 0.005);
    CHECK(r.sol_flagged);
    json_decref(j);
}

TEST(eval_report_absent_and_mistyped_keys_read_as_absent)
{
    struct eval_report r;
    eval_report_read(NULL, &r);
    CHECK(!r.ok && !r.has_reward && !r.has_harness && !r.has_compile);
    CHECK_STR(r.stage, "");
    CHECK_STR(r.failure_message, "");
    CHECK(isnan(r.candidate.median_ms) && !r.candidate.present);

    json_t *j = json_loads("{\"ok\": 1, \"stage\": 7, \"reward\": {\"reward\": \"3\"},"
                           " \"harness\": {\"ok\": false, \"stage\": \"timing\","
                           "   \"failure\": {\"kind\": \"mismatch\", \"message\": \"row 3\"},"
                           "   \"verification\": {\"launches\": {\"total_us\": 0}},"
                           "   \"timing\": {\"candidate\": {\"median_ms\": \"x\"}}}}",
                           0, NULL);
    REQUIRE(j);
    eval_report_read(j, &r);
    CHECK(!r.ok);           /* 1 is not true */
    CHECK_STR(r.stage, ""); /* not a string */
    CHECK(r.has_reward && !r.reward_is_int);
    CHECK_EQ(r.reward, 0);
    CHECK(!r.harness_ok);
    CHECK_STR(r.harness_stage, "timing");
    CHECK_STR(r.failure_kind, "mismatch");
    CHECK_STR(r.failure_message, "row 3");
    CHECK(!r.has_launches); /* no GPU time recorded */
    CHECK(r.candidate.present && isnan(r.candidate.median_ms));
    json_decref(j);
}

TEST(eval_format_shows_the_report)
{
    json_t *j = json_loads(FULL, 0, NULL);
    REQUIRE(j);
    struct buf b;
    buf_init(&b, 1 << 16);
    REQUIRE(eval_format(j, &b) == 0);
    CHECK_CONTAINS(b.data, "task: swish\n");
    CHECK_CONTAINS(b.data, "kernelbench: kb.py (functions: f, g)\n");
    CHECK_CONTAINS(b.data, "compile: ok (1.50 s)\n");
    CHECK_CONTAINS(b.data, "kernels: 2 in your extension, 75% of the forward's GPU time "
                           "(30.0 of 40.0 us)\n");
    CHECK_CONTAINS(b.data, "flag sol: fast\n");
    CHECK_CONTAINS(b.data, "candidate  median 0.8000 ms  (CV 0.5%, n=120)\n");
    CHECK_CONTAINS(b.data, "speedup: 2.50x vs eager, 1.25x vs torch.compile\n");
    CHECK_CONTAINS(b.data, "reward: 3 (faster than both)\n");
    buf_release(&b);
    json_decref(j);

    /* A failed verification: the stage, its message and the failed check, no reward. */
    j = json_loads("{\"ok\": false, \"stage\": \"verify\", \"message\": \"row 3 differs\","
                   " \"harness\": {\"failure\": {\"kind\": \"mismatch\"}}}",
                   0, NULL);
    REQUIRE(j);
    buf_init(&b, 1 << 16);
    REQUIRE(eval_format(j, &b) == 0);
    CHECK_CONTAINS(b.data, "verify failed:\nrow 3 differs\n");
    CHECK_CONTAINS(b.data, "check that failed: mismatch\n");
    CHECK(!strstr(b.data, "reward:"));
    buf_release(&b);
    json_decref(j);

    /* No torch.compile time (it failed, or --no-compile-baseline): said so, not "0.0000 ms"
     * and "0.00x vs torch.compile", which read as a candidate infinitely slower than it. */
    const char *none[] = {"{\"error\": \"RuntimeError: inductor failed\"}", "null"};
    for (size_t i = 0; i < ARRAY_SIZE(none); i++) {
        char *text = xstrfmt("{\"ok\": true, \"stage\": \"reward\", \"harness\": {\"timing\": {"
                             " \"eager\": {\"median_ms\": 2.0, \"cv\": 0.01, \"n\": 100},"
                             " \"compile\": %s,"
                             " \"candidate\": {\"median_ms\": 1.0, \"cv\": 0.01, \"n\": 100}}},"
                             " \"reward\": {\"reward\": 2, \"speedup_eager\": 2.0,"
                             " \"speedup_compile\": null, \"reason\": \"faster than eager\"}}",
                             none[i]);
        j = json_loads(text, 0, NULL);
        REQUIRE(j);
        struct eval_report r;
        eval_report_read(j, &r);
        CHECK(isnan(r.speedup_compile));
        buf_init(&b, 1 << 16);
        REQUIRE(eval_format(j, &b) == 0);
        CHECK_CONTAINS(b.data, "speedup: 2.00x vs eager, none vs torch.compile (no baseline)\n");
        CHECK(!strstr(b.data, "0.00x"));
        CHECK(!strstr(b.data, "compile    median"));
        if (i == 0)
            CHECK_CONTAINS(b.data, "compile    not measured: RuntimeError: inductor failed\n");
        CHECK_CONTAINS(b.data, "reward: 2 (faster than eager)\n");
        buf_release(&b);
        json_decref(j);
        free(text);
    }
}

TEST(eval_timing_defaults_by_rules_and_device)
{
    struct eval_opts o = {0};
    CHECK_STR(eval_timing(&o), "device"); /* SKILL.md's rules on a GPU: the GPU's time */
    o.rules = "cuda-agent";
    o.device = "cuda";
    CHECK_STR(eval_timing(&o), "device");
    o.rules = "kernelbench"; /* KernelBench's own measure */
    CHECK_STR(eval_timing(&o), "events");
    o.rules = NULL;
    o.device = "cpu"; /* the wall clock either way, without device timing's note */
    CHECK_STR(eval_timing(&o), "events");
    o.timing = "kernel"; /* asked for: kept */
    CHECK_STR(eval_timing(&o), "kernel");
    o.rules = "kernelbench";
    o.device = "cuda";
    o.timing = "device";
    CHECK_STR(eval_timing(&o), "device");
}

/* A KernelBench file's generated lines placed in it: kernels/kb_m.cu's lines 5-7 are lines
 * 20-22 of the file, its binding's line 6 is line 40; nothing else is placed. */
TEST(kernelbench_places_generated_lines_in_the_candidates_file)
{
    json_t *lines = json_loads("{\"kernels/kb_m.cu\": [[5, 20, 3]],"
                               " \"kernels/kb_m_binding.cpp\": [[6, 40, 1]]}",
                               0, NULL);
    REQUIRE(lines);
    CHECK_EQ(eval__kernelbench_origin(lines, "kernels/kb_m.cu", 5), 20);
    CHECK_EQ(eval__kernelbench_origin(lines, "kernels/kb_m.cu", 7), 22);
    CHECK_EQ(eval__kernelbench_origin(lines, "kernels/kb_m.cu", 4), 0); /* the prelude */
    CHECK_EQ(eval__kernelbench_origin(lines, "kernels/kb_m.cu", 8), 0);
    CHECK_EQ(eval__kernelbench_origin(lines, "kernels/kb_m_binding.cpp", 6), 40);
    CHECK_EQ(eval__kernelbench_origin(lines, "kernels/other.cu", 5), 0);
    CHECK_EQ(eval__kernelbench_origin(lines, "model_new.py", 33), 33); /* FILE's own lines */

    const char *log = "kernels/kb_m.cu:6: error: identifier \"x\" is undefined\n"
                      "      int y = x;\n"
                      "kernels/kb_m.cu:2:10: fatal error: nothing.h: No such file\n"
                      "kernels/kb_m_binding.cpp:6:3: error: expected ';'\n"
                      "kernels/kb m.cu:6: error: a path with a space\n"
                      "kernels/kb_m.cu:x: error: no line\n"
                      "in kernels/kb_m.cu:6: not at the start\n"
                      "kernels/kb_m.cu:99999999999: error: past any line";
    struct buf out;
    buf_init(&out, 4096);
    REQUIRE(eval__kernelbench_place_log(sv_cstr(log), "cand.py", lines, &out) == 0);
    CHECK_STR(out.data, "cand.py:21 (kernels/kb_m.cu:6): error: identifier \"x\" is undefined\n"
                        "      int y = x;\n"
                        "kernels/kb_m.cu:2:10: fatal error: nothing.h: No such file\n"
                        "cand.py:40 (kernels/kb_m_binding.cpp:6:3): error: expected ';'\n"
                        "kernels/kb m.cu:6: error: a path with a space\n"
                        "kernels/kb_m.cu:x: error: no line\n"
                        "in kernels/kb_m.cu:6: not at the start\n"
                        "kernels/kb_m.cu:99999999999: error: past any line");
    /* Bounded like any buf: a log that does not fit fails, and the caller keeps the raw log. */
    struct buf tiny;
    buf_init(&tiny, 16);
    CHECK(eval__kernelbench_place_log(sv_cstr(log), "cand.py", lines, &tiny) != 0);
    buf_release(&tiny);
    buf_release(&out);
    json_decref(lines);
}
