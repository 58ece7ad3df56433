/*
 * synth_internal.h - what the files of src/synth share: the store (synth_store.c), the
 * outputs (synth_out.c) and the report (synth_report.c). Prefix synth__.
 */
#ifndef CA_SYNTH_INTERNAL_H
#define CA_SYNTH_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "synth/synth.h"

#define SYNTH_DB "synth.db"

struct synth_store;

/* One recorded candidate, borrowed from the store while the callback runs. */
struct synth_row {
    const char *stream, *status, *filter, *reason, *id, *name, *code, *ops, *filters, *key;
    int64_t seed, depth;
    double eager_ms, compile_ms; /* NAN when not measured */
};

/* Open dir/synth.db. settings != NULL: create it when new, else refuse a store whose filter
 * settings differ (naming the first that does). settings == NULL: it must exist. */
int synth__store_open(const char *dir, const json_t *settings, struct synth_store **out,
                      struct ca_err *err) WARN_UNUSED_RESULT;
void synth__store_free(struct synth_store *s);
bool synth__store_has(struct synth_store *s, const char *stream, int64_t seed);
/* Record a worker's answer (or a synthesised one for a timeout or crash). An accepted answer
 * whose key is already accepted is recorded as rejected by the "duplicate" filter; *dup says
 * so. */
int synth__store_record(struct synth_store *s, const char *stream, const json_t *answer, bool *dup,
                        struct ca_err *err) WARN_UNUSED_RESULT;
int64_t synth__store_count(struct synth_store *s, bool accepted_only);
/* Every row in (stream, seed) order; accepted_only: only accepted ones. fn returning non-zero
 * stops the walk and is returned. */
int synth__store_each(struct synth_store *s, bool accepted_only,
                      int (*fn)(const struct synth_row *r, void *ctx), void *ctx,
                      struct ca_err *err) WARN_UNUSED_RESULT;

/* "conv2d_relu" from ["nn.Conv2d", "F.relu"]: lowercased last components, cut at a whole
 * component to 48 bytes (as src/task names unnamed rows); "task" for none. */
void synth__name_from_ops(const json_t *ops, char *out, size_t n);

/* ---- LLM mode (synth_llm.c) ---- */
struct llm_client;
/* The first ```python (or ```) block of a reply, else all of it (heap). */
char *synth__extract_code(const char *text);
/* The operators src/task derives from code, as a JSON array (owned). */
json_t *synth__ops_of(const char *code);
/* Ask the model to write a task from the composer's draft; *code gets it (heap). */
int synth__llm_rewrite(struct llm_client *c, const char *draft, const json_t *ops, int64_t seq,
                       char **code, struct ca_err *err) WARN_UNUSED_RESULT;

#endif
