/*
 * reward.c - the reward table. Kept apart from measuring so that it can be
 * tested exhaustively and audited at a glance.
 */
#include "eval/reward.h"

#include <math.h>

#include "core/banned.h"

static bool valid_ms(double v)
{
    return isfinite(v) && v > 0;
}

int reward_compute(const struct reward_input *in, struct reward_result *out, struct ca_err *err)
{
    *out = (struct reward_result){.reward = -1};
    if (!in->compiled) {
        out->reason = "compilation failed";
        return 0;
    }
    if (!in->correct) {
        out->reason = "verification failed";
        return 0;
    }
    /* A NaN compile time is an absent torch.compile baseline (not measured, or torch.compile
     * failed): the candidate cannot be faster than it, so the reward is at most 2. */
    bool have_compile = !isnan(in->compile_ms);
    if (!valid_ms(in->eager_ms) || (have_compile && !valid_ms(in->compile_ms)) ||
        !valid_ms(in->candidate_ms))
        return err_setf(err, CA_EPARSE,
                        "reward needs positive finite timings (eager %g ms, compile %g ms, "
                        "candidate %g ms)",
                        in->eager_ms, in->compile_ms, in->candidate_ms);
    double margin = in->margin > 0 ? in->margin : REWARD_MARGIN_DEFAULT;
    out->speedup_eager = in->eager_ms / in->candidate_ms;
    out->speedup_compile = have_compile ? in->compile_ms / in->candidate_ms : NAN;
    out->faster_than_eager = out->speedup_eager > 1.0 + margin;
    out->faster_than_compile = have_compile && out->speedup_compile > 1.0 + margin;
    if (in->speed_of_light_flag) {
        out->reward = 1;
        out->needs_review = true;
        out->reason = "correct, but faster than the hardware allows for this task: held at 1 "
                      "until reviewed";
        return 0;
    }
    if (out->faster_than_eager && out->faster_than_compile) {
        out->reward = 3;
        out->reason = "correct and faster than both eager and torch.compile";
    } else if (out->faster_than_eager) {
        out->reward = 2;
        out->reason = "correct and faster than eager, not than torch.compile";
    } else {
        out->reward = 1;
        out->reason = "correct, not faster than eager by the margin";
    }
    return 0;
}

json_t *reward_to_json(const struct reward_result *r)
{
    /* JSON has no NaN: a speedup without its baseline is null. */
    json_t *se = isfinite(r->speedup_eager) ? json_real(r->speedup_eager) : json_null();
    json_t *sc = isfinite(r->speedup_compile) ? json_real(r->speedup_compile) : json_null();
    return json_pack("{s:i, s:o, s:o, s:b, s:b, s:b, s:s}", "reward", r->reward, "speedup_eager",
                     se, "speedup_compile", sc, "faster_than_eager", r->faster_than_eager,
                     "faster_than_compile", r->faster_than_compile, "needs_review", r->needs_review,
                     "reason", r->reason ? r->reason : "");
}
