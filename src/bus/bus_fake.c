/*
 * bus_fake.c - TEST DOUBLE: a made-up evaluation for the bus's load and fault tests, selected
 * only by `cuda-agent worker --fake-eval SPEC` (never a default, never from the environment).
 * Everything else of a job still happens for real (the job's digest, fetching and verifying
 * every artifact, the private job directory); only the evaluator is replaced by a sleep of a
 * realistic, jittered length and a report derived from the job's id, so that tests can check
 * that each job got its own result.
 *
 * SPEC is "MS[:MODE]": MS the median latency in ms (log-normal, sigma 0.25, like GPU jobs whose
 * sizes vary); MODE ok (default), garbage (a report that is not one: what a broken runner
 * returns), hang (never finishes; the worker stops renewing the job's lease at its deadline).
 */
#include "bus/bus_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/sv.h"
#include "core/banned.h"

static int parse(const char *spec, int64_t *ms, const char **mode, struct ca_err *err)
{
    struct sv s = sv_cstr(spec), num = sv_split(&s, ':');
    if (sv_parse_range(num, 0, 600000, ms, "--fake-eval's latency (ms)", err))
        return CA_EUSAGE;
    *mode = s.len ? s.p : "ok";
    if (strcmp(*mode, "ok") && strcmp(*mode, "garbage") && strcmp(*mode, "hang"))
        return err_setf(err, CA_EUSAGE, "--fake-eval MS[:ok|garbage|hang], not \"%s\"", spec);
    return 0;
}

int bus__fake_check(const char *spec, struct ca_err *err)
{
    int64_t ms;
    const char *mode;
    return parse(spec, &ms, &mode, err);
}

int bus__fake_eval(const char *spec, const char *job_id, atomic_int *quit, json_t **report,
                   struct ca_err *err)
{
    int64_t ms;
    const char *mode;
    int rc = parse(spec, &ms, &mode, err);
    if (rc)
        return rc;
    if (strcmp(mode, "hang") == 0) {
        while (!atomic_load(quit))
            usleep(50000);
        return err_setf(err, CA_ETIMEOUT, "the fake evaluation hung (test double)");
    }
    /* Box-Muller from a per-call seed: jobs of one process differ. */
    unsigned seed = (unsigned)(ca_now_us() ^ (int64_t)(uintptr_t)job_id);
    double u1 = (rand_r(&seed) + 1.0) / ((double)RAND_MAX + 2.0);
    double u2 = (rand_r(&seed) + 1.0) / ((double)RAND_MAX + 2.0);
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    int64_t us = (int64_t)((double)ms * 1000.0 * exp(0.25 * z));
    for (int64_t t = 0; t < us && !atomic_load(quit); t += 10000)
        usleep((useconds_t)(us - t < 10000 ? us - t : 10000));
    if (strcmp(mode, "garbage") == 0) {
        *report = json_string("\x01garbage");
        return 0;
    }
    /* The reward follows from the job's id: a test can predict it. */
    int r = (int)strtol((char[]){job_id[0], 0}, NULL, 16) % 4;
    int reward = r == 0 ? -1 : r;
    *report = json_pack("{s:b, s:s, s:b, s:{s:i}, s:s}", "ok", reward > 0, "stage",
                        reward > 0 ? "done" : "verify", "fake", 1, "reward", "reward", reward,
                        "job", job_id);
    return 0;
}
