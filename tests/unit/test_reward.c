/* Unit tests of the reward table (eval/reward). */
#include "test.h"

#include <math.h>

#include "eval/reward.h"

static int reward_of(double eager, double compile, double cand)
{
    struct reward_input in = {.compiled = true,
                              .correct = true,
                              .eager_ms = eager,
                              .compile_ms = compile,
                              .candidate_ms = cand};
    struct reward_result r;
    REQUIRE(reward_compute(&in, &r, NULL) == 0);
    return r.reward;
}

TEST(reward_failures_are_minus_one)
{
    struct reward_result r;
    struct reward_input in = {
        .compiled = false, .correct = true, .eager_ms = 1, .compile_ms = 1, .candidate_ms = 0.1};
    REQUIRE(reward_compute(&in, &r, NULL) == 0);
    CHECK_EQ(r.reward, -1);
    CHECK_STR(r.reason, "compilation failed");
    in.compiled = true;
    in.correct = false;
    REQUIRE(reward_compute(&in, &r, NULL) == 0);
    CHECK_EQ(r.reward, -1);
    CHECK_STR(r.reason, "verification failed");
}

TEST(reward_table)
{
    CHECK_EQ(reward_of(1.0, 1.0, 0.5), 3);   /* 2x faster than both */
    CHECK_EQ(reward_of(1.0, 0.5, 0.45), 3);  /* 2.2x eager, 1.11x compile */
    CHECK_EQ(reward_of(1.0, 0.5, 0.48), 2);  /* 1.04x compile: not past the margin */
    CHECK_EQ(reward_of(1.0, 0.5, 0.476), 3); /* 1.0504x compile */
    CHECK_EQ(reward_of(1.0, 0.5, 0.9), 2);   /* slower than compile */
    CHECK_EQ(reward_of(1.0, 0.5, 0.96), 1);  /* 1.04x eager */
    CHECK_EQ(reward_of(1.0, 0.5, 2.0), 1);   /* slower than both: still correct */
}

TEST(reward_margin_boundary_is_strict)
{
    /* Exactly 5% faster is not "more than 5% faster". */
    CHECK_EQ(reward_of(1.05, 1.05, 1.0), 1);
    struct reward_input in = {.compiled = true,
                              .correct = true,
                              .eager_ms = 1.2,
                              .compile_ms = 1.2,
                              .candidate_ms = 1.0,
                              .margin = 0.25};
    struct reward_result r;
    REQUIRE(reward_compute(&in, &r, NULL) == 0);
    CHECK_EQ(r.reward, 1);
    CHECK(fabs(r.speedup_eager - 1.2) < 1e-12);
}

TEST(reward_speed_of_light_needs_review)
{
    struct reward_input in = {.compiled = true,
                              .correct = true,
                              .eager_ms = 1,
                              .compile_ms = 1,
                              .candidate_ms = 0.001,
                              .speed_of_light_flag = true};
    struct reward_result r;
    REQUIRE(reward_compute(&in, &r, NULL) == 0);
    CHECK_EQ(r.reward, 1);
    CHECK(r.needs_review);
    CHECK(r.faster_than_compile);
    json_t *j = reward_to_json(&r);
    CHECK(json_is_true(json_object_get(j, "needs_review")));
    json_decref(j);
}

TEST(reward_rejects_bad_timings)
{
    struct ca_err err = {0};
    double bad[] = {0.0, -1.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct reward_input in = {.compiled = true,
                                  .correct = true,
                                  .eager_ms = 1,
                                  .compile_ms = 1,
                                  .candidate_ms = bad[i]};
        struct reward_result r;
        CHECK_EQ(reward_compute(&in, &r, &err), CA_EPARSE);
        CHECK_CONTAINS(err.msg, "positive finite");
    }
}

/* No torch.compile baseline (--no-compile-baseline, or torch.compile failed): NaN compile time.
 * Faster than eager earns 2 at most; a bad compile time that is not NaN is still an error. */
TEST(reward_without_a_compile_baseline)
{
    CHECK_EQ(reward_of(2.0, NAN, 1.0), 2);
    CHECK_EQ(reward_of(1.0, NAN, 1.0), 1);
    struct reward_input in = {
        .compiled = true, .correct = true, .eager_ms = 2, .compile_ms = NAN, .candidate_ms = 1};
    struct reward_result r;
    REQUIRE(reward_compute(&in, &r, NULL) == 0);
    CHECK(!r.faster_than_compile);
    json_t *j = reward_to_json(&r);
    REQUIRE(j);
    CHECK(json_is_null(json_object_get(j, "speedup_compile")));
    CHECK(json_number_value(json_object_get(j, "speedup_eager")) == 2.0);
    json_decref(j);
    struct ca_err err = {0};
    in.compile_ms = -1;
    CHECK_EQ(reward_compute(&in, &r, &err), CA_EPARSE);
}
