/*
 * cli_bus.c - the job bus's client options, shared by every command that evaluates through
 * it (cli.h: CLI_BUS_OPTS, cli_bus_setup, cli_bus_eval). The commands wire the bus into the
 * layers that must not know it (bench, episode, agent, server) as an evaluation callback, or,
 * for processes they start, as $CUDA_AGENT_REDIS.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>

#include "bus/bus.h"
#include "core/banned.h"

static const char *env_or_null(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int cli_bus_setup(const char *cmd, struct cli_bus *b, const char **evaluator,
                  const char *evaluator_opt)
{
    if (b->url && !*b->url)
        return cli_usage_error(cmd, "--redis needs a URL (redis://HOST:PORT)");
    if (b->url && *evaluator)
        return cli_usage_error(cmd, "%s and --redis exclude each other",
                               evaluator_opt ? evaluator_opt : "$CUDA_AGENT_EVALUATOR");
    if (!b->url && !*evaluator)
        *evaluator = env_or_null("CUDA_AGENT_EVALUATOR");
    if (!b->url && !*evaluator)
        b->url = env_or_null("CUDA_AGENT_REDIS");
    if (!b->url)
        return 0;
    struct bus_url u;
    struct ca_err err = {0};
    if (bus_url_parse(b->url, &u, &err))
        return cli_usage_error(cmd, "%s", err.msg);
    b->bo.wait_ms = b->wait_s * 1000;
    b->bo.queue_wait_ms = b->queue_wait_s * 1000;
    snprintf(b->child_wait[0], sizeof(b->child_wait[0]), "%lld", (long long)b->queue_wait_s);
    snprintf(b->child_wait[1], sizeof(b->child_wait[1]), "%lld", (long long)b->wait_s);
    size_t n = 0;
    b->child_args[n++] = "--queue-wait";
    b->child_args[n++] = b->child_wait[0];
    if (b->wait_s) { /* else the child's default, from each evaluation's timeout */
        b->child_args[n++] = "--wait";
        b->child_args[n++] = b->child_wait[1];
    }
    b->child_args[n] = NULL;
    return 0;
}

int cli_bus_check(const struct cli_bus *b)
{
    if (!b->url)
        return 0; /* not on the bus: nothing to check */
    struct bus_conn *c = NULL;
    struct ca_err err = {0};
    if (bus_conn_open_url(b->url, &c, NULL, &err))
        return cli_fail(&err);
    bus_conn_free(c);
    return 0;
}

int cli_bus_eval(void *ctx, const struct eval_opts *o, json_t **report, struct ca_err *err)
{
    const struct cli_bus *b = ctx;
    return bus_eval(b->url, o, &b->bo, report, err);
}
