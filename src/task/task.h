/*
 * task.h - tasks in KernelBench format and the sources they come from.
 *
 * A task is a Python file defining `class Model(nn.Module)` (with forward),
 * `get_inputs()` and `get_init_inputs()`. Sources:
 *   - one .py file;
 *   - a KernelBench-style tree: DIR/level1/ DIR/level2/ ... holding N_Name.py
 *     (level taken from the folder);
 *   - an Ops-6K-style JSONL file: one object per line with "code", "ops"
 *     (list of operator names, optional) and "data_source" ("torch#N",
 *     optional); optional "id"/"name" fields are honoured.
 *   - a parquet file of the published dataset converts to that JSONL through
 *     a small embedded Python step (pyarrow): task_import_parquet().
 *
 * Ids are stable: "<name>-<first 12 hex of xxh64(code)>", where name is the
 * file stem (tree: "l<level>_<stem>"), or for dataset rows without a name the
 * derived ops joined by '_'. Operators are always derived from the code; a
 * label that disagrees with them (or is missing) is replaced and reported.
 * Exact duplicate code within one source is dropped and reported; an
 * explicit id used twice for different code is an error.
 *
 * Every error names the file and, where there is one, the line.
 * A task_set owns all its tasks and strings. Not thread-safe.
 */
#ifndef CA_TASK_H
#define CA_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/err.h"

struct task {
    char *id;
    char *name;
    int level;  /* KernelBench level from the tree, else 0 */
    char *code; /* the Python source, NUL-terminated */
    size_t code_len;
    uint64_t hash; /* hash64(code) */
    char **ops;    /* operators derived from the code ("nn.Conv2d", "torch.relu") */
    size_t nops;
    bool ops_relabelled;  /* a label was given and disagreed with the code */
    bool ops_unlabelled;  /* no label was given */
    char *data_source;    /* "torch#2" or NULL */
    char *origin;         /* "path/file.py" or "data.jsonl:12", for messages */
    char *init_signature; /* Model.__init__ parameter list, e.g. "self, n, k=3" */
};

struct task_duplicate {
    char *origin;  /* where the dropped copy was */
    char *kept_id; /* the task it duplicates */
};

struct task_set {
    struct task *tasks;
    size_t n, alloc;
    struct task_duplicate *dups;
    size_t ndups, dups_alloc;
    size_t relabelled; /* tasks whose ops label disagreed with the code */
};

void task_set_init(struct task_set *set);
void task_set_release(struct task_set *set);

/*
 * Validate `code` as a KernelBench-format task and fill *t (caller-owned,
 * released with task_release). `origin` names it in messages, with
 * positions as ORIGIN:LINE:COL. Checks: size limit, no NUL bytes,
 * valid UTF-8 (reports line:col), a top-level `class Model(...)` deriving
 * from a Module with a `def forward`, top-level `def get_inputs` and
 * `def get_init_inputs`.
 */
int task_parse(const char *origin, const char *code, size_t len, struct task *t,
               struct ca_err *err) WARN_UNUSED_RESULT;
void task_release(struct task *t);

/* Operators called in code, in order of first use, deduplicated. Returns a
 * NULL-terminated heap array of heap strings (free with task_free_ops). */
char **task_derive_ops(const char *code, size_t len, size_t *n);
void task_free_ops(char **ops, size_t n);

/* Load a source (file .py, directory tree, .jsonl) and append its tasks. */
int task_load(const char *source, struct task_set *set, struct ca_err *err) WARN_UNUSED_RESULT;
int task_load_file(const char *path, struct task_set *set, struct ca_err *err) WARN_UNUSED_RESULT;
int task_load_tree(const char *dir, struct task_set *set, struct ca_err *err) WARN_UNUSED_RESULT;
int task_load_jsonl(const char *path, struct task_set *set, struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Find one task by selector: an exact id, an exact name, or a unique id
 * prefix. CA_ENOTFOUND / CA_EAMBIGUOUS with a message listing candidates.
 */
int task_set_find(const struct task_set *set, const char *selector, const struct task **out,
                  struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Resolve a task reference: "PATH" (a .py file, or a source holding exactly
 * one task) or "PATH:SELECTOR". The set receives the loaded source.
 */
int task_resolve(const char *ref, struct task_set *set, const struct task **out,
                 struct ca_err *err) WARN_UNUSED_RESULT;

/* {"id","name","level","ops","ops_relabelled","data_source","origin","hash",
 *  "init_signature","code"?} */
json_t *task_to_json(const struct task *t, bool with_code);

/* Write the set as normalised JSONL (code, ops, data_source, id, name,
 * level), atomically (temp file + rename); nothing is left on failure. */
int task_set_write_jsonl(const struct task_set *set, const char *path,
                         struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Convert a parquet dataset (columns code, ops, data_source) into
 * normalised JSONL at out_path via python3 + pyarrow, then load it into set
 * (deduplicated, relabelled). Nothing is left at out_path on failure.
 */
int task_import_parquet(const char *parquet, const char *out_path, struct task_set *set,
                        struct ca_err *err) WARN_UNUSED_RESULT;

#endif
