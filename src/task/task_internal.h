/*
 * task_internal.h - shared between the files of the task module (parse, ops,
 * load, set operations); nothing outside src/task/ includes it.
 *
 * The scan: a Python source is classified byte by byte once (code, string
 * literal, comment) so that every later pass can look at code only. The
 * loader: a source is loaded into a private task_set first and merged into
 * the caller's set only when all of it loaded, so a failed load leaves the
 * caller's set as it was.
 */
#ifndef CA_TASK_INTERNAL_H
#define CA_TASK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/limits.h"
#include "task/task.h"

/* Longest task name we make (stems, dataset names); ids add "-" + 12 hex. */
#define TASK__NAME_MAX (CA_LIMIT_ID / 2)
/* Hex digits of hash64(code) in an id. */
#define TASK__ID_HASH_HEX 12
/* Longest name made from operator names for dataset rows without a name. */
#define TASK__OPS_NAME_MAX 48

enum task__kind {
    TASK__CODE = 0,
    TASK__STRING, /* a string literal, prefix and quotes included */
    TASK__COMMENT,
};

struct task__scan {
    const char *code;
    size_t len;
    /* code with string and comment bytes turned into ' ' (newlines kept),
     * NUL-terminated: offsets and line numbers match code */
    char *masked;
    unsigned char *kind; /* enum task__kind per byte */
};

void task__scan_init(struct task__scan *s, const char *code, size_t len);
void task__scan_release(struct task__scan *s);

/*
 * task_parse() with a switch for code embedded in a dataset row
 * (`embedded`): positions then read "ORIGIN (code line L, column C)"
 * rather than "ORIGIN:L:C", and the name is a placeholder the loader
 * replaces with task__set_name().
 */
int task__parse(const char *origin, bool embedded, const char *code, size_t len, struct task *t,
                struct ca_err *err) WARN_UNUSED_RESULT;

/* Replace t's name with a copy of `name` and make id "<name>-<12 hex>". */
void task__set_name(struct task *t, const char *name);
/* Heap copy of s[0..len) limited to [A-Za-z0-9_.-] (others become '_') and
 * TASK__NAME_MAX bytes; never empty ("task"). */
char *task__sanitize_name(const char *s, size_t len);
/* Whether s is usable as an explicit id: 1..CA_LIMIT_ID bytes of
 * [A-Za-z0-9_.-], not starting with '-' or '.'. */
bool task__valid_id(const char *s);

char **task__derive_ops_scanned(const struct task__scan *s, size_t *n);
/* Whether a label names the same operators as the derived list: the sets
 * of lowercased last components ("nn.ReLU" -> "relu") are equal. */
bool task__ops_agree(char *const *derived, size_t nderived, char *const *label, size_t nlabel);
/* "conv2d_relu" from ["nn.Conv2d", "torch.relu"]; "task" when empty. */
char *task__name_from_ops(char *const *ops, size_t n);

/* ---- a hash index from 64-bit keys to task positions (multimap) ---- */

struct task__index {
    uint64_t *keys;
    size_t *vals; /* position + 1; 0 marks an empty slot */
    size_t cap;   /* 0 or a power of two, at most half full */
    size_t n;
};

void task__index_init(struct task__index *ix);
void task__index_release(struct task__index *ix);
void task__index_add(struct task__index *ix, uint64_t key, size_t pos);
/*
 * Walk the entries with `key`:
 *   for (size_t s = task__index_first(ix, k); s != SIZE_MAX; s = task__index_next(ix, k, s))
 *       use(ix->vals[s] - 1);
 */
size_t task__index_first(const struct task__index *ix, uint64_t key);
size_t task__index_next(const struct task__index *ix, uint64_t key, size_t slot);
uint64_t task__id_key(const char *id);

/* ---- loading one source ---- */

struct task__loader {
    struct task_set set; /* what loaded so far; not yet visible to the caller */
    struct task__index by_code, by_id;
};

void task__loader_init(struct task__loader *ld);
void task__loader_release(struct task__loader *ld);
/*
 * Take *t over (it is left zeroed, also on error). Exact duplicate code is
 * dropped and recorded in ld->set.dups; an id already used for different
 * code is CA_EDUP naming both origins.
 */
int task__loader_add(struct task__loader *ld, struct task *t,
                     struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * JSONL loader behind task_load_jsonl() and task_import_parquet(): origins
 * read "<shown>:<row_word><line>" ("data.jsonl:12", "data.parquet:row 12").
 */
int task__load_jsonl(const char *path, const char *shown, const char *row_word,
                     struct task_set *set, struct ca_err *err) WARN_UNUSED_RESULT;

/* ---- merging a loaded source into the caller's set ---- */

/* 0 when every task of src can join dst: no id of src is in dst for
 * different code. CA_EDUP naming both origins otherwise. */
int task__set_merge_check(const struct task_set *dst, const struct task_set *src,
                          struct ca_err *err) WARN_UNUSED_RESULT;
/* Move src's tasks and duplicates into dst (src is left empty). A task
 * already in dst (same id, same code) is not added twice. Call
 * task__set_merge_check() first. */
void task__set_merge(struct task_set *dst, struct task_set *src);
/* check + merge; src is released either way. */
int task__set_merge_all(struct task_set *dst, struct task_set *src,
                        struct ca_err *err) WARN_UNUSED_RESULT;

#endif
