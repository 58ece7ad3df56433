/*
 * reward.h - the reward table (DESIGN §1): -1 when compilation or
 * verification fails; 3 when the candidate is more than `margin` (5%)
 * faster than both eager and torch.compile; 2 when more than `margin`
 * faster than eager only; 1 otherwise. "More than 5% faster" means
 * baseline_time / candidate_time > 1.05.
 *
 * A speed-of-light flag (a measured time below what the hardware can do
 * for the task) is never rewarded above 1 without review: the result says
 * needs_review and names the reason. Pure functions; thread-safe.
 */
#ifndef CA_REWARD_H
#define CA_REWARD_H

#include <jansson.h>
#include <stdbool.h>

#include "core/err.h"

#define REWARD_MARGIN_DEFAULT 0.05

struct reward_input {
    bool compiled;
    bool correct;
    double eager_ms, compile_ms, candidate_ms; /* medians; only read when correct */
    double margin;                             /* 0: REWARD_MARGIN_DEFAULT */
    bool speed_of_light_flag;                  /* faster than the hardware allows */
};

struct reward_result {
    int reward;                                  /* -1, 1, 2 or 3 */
    double speedup_eager, speedup_compile;       /* 0 when not correct */
    bool faster_than_eager, faster_than_compile; /* by the margin */
    bool needs_review;
    const char *reason; /* static text for reports */
};

/* CA_EPARSE when the timings of a correct candidate are not positive finite numbers. */
int reward_compute(const struct reward_input *in, struct reward_result *out,
                   struct ca_err *err) WARN_UNUSED_RESULT;
json_t *reward_to_json(const struct reward_result *r);

#endif
