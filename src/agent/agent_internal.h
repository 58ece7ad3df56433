/*
 * agent_internal.h - what the agent's files share and nobody else uses.
 */
#ifndef CA_AGENT_INTERNAL_H
#define CA_AGENT_INTERNAL_H

#include "agent/agent.h"

struct episode;

/* Append the evaluation records made after *since to a new array *out and
 * advance *since. No records (and 0) when the episode keeps none. */
int agent__poll_evals(struct episode *ep, int64_t *since, json_t **out,
                      struct ca_err *err) WARN_UNUSED_RESULT;

#endif
