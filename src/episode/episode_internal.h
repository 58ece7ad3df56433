/*
 * episode_internal.h - shared between episode.c and episode_eval.c.
 */
#ifndef CA_EPISODE_INTERNAL_H
#define CA_EPISODE_INTERNAL_H

#include <jansson.h>
#include <stdint.h>

#include "core/err.h"
#include "episode/episode.h"

struct episode__evals;

/* Listen on <control>/eval.sock and serve evaluations of workspace in a thread, as o's
 * evaluator and eval_device say; records and kept files go under dir/evals/. */
int episode__evals_start(const char *control, const char *dir, const char *workspace,
                         const struct episode_opts *o, struct episode__evals **out,
                         struct ca_err *err) WARN_UNUSED_RESULT;
/* Stop the thread (waits for a running evaluation) and free; NULL is a no-op. */
void episode__evals_stop(struct episode__evals *ev);
/* A new array of the records with seq > since. */
json_t *episode__evals_since(struct episode__evals *ev, int64_t since);

#endif
