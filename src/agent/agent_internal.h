/*
 * agent_internal.h - what the agent's files share and nobody else uses.
 */
#ifndef CA_AGENT_INTERNAL_H
#define CA_AGENT_INTERNAL_H

#include "agent/agent.h"

struct episode;

/* The evaluation records made after *since, in a new array *out (always
 * set); *since advances. From o->evals when set, else the episode's. */
int agent__poll_evals(const struct agent_opts *o, struct episode *ep, int64_t *since, json_t **out,
                      struct ca_err *err) WARN_UNUSED_RESULT;

#endif
