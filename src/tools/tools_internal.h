/*
 * tools_internal.h - what the tool files share: the argument tables (one per
 * tool, read by the validator and the schema generator in tool_args.c), the
 * episode state behind struct tool_ctx, path mapping from what the agent
 * typed to a confined workspace path, the read set behind the
 * read-before-write rule, bounded output helpers, and the glob matcher and
 * tree walker that Glob and Grep both use.
 *
 * Everything here runs on the thread that owns the tool_ctx.
 */
#ifndef CA_TOOLS_INTERNAL_H
#define CA_TOOLS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "core/hash.h"
#include "core/limits.h"
#include "core/sv.h"
#include "tools/tools.h"

/* Where the workspace appears to the agent; the prefix paths may carry. */
#define TOOLS__WORKSPACE "/workspace"
/* Largest file Read, Edit, NotebookEdit and Grep load (bigger ones: use Bash). */
#define TOOLS__FILE_MAX (16 * CA_MIB)
/* Model-facing text a tool fills before it stops and adds its closing marker. */
#define TOOLS__BODY_MAX (CA_LIMIT_TOOL_OUTPUT - 1024)
/* Characters of one line shown by Read, Grep and Edit snippets. */
#define TOOLS__LINE_MAX 2000
/* Bytes probed for a NUL to call a file binary. */
#define TOOLS__BINARY_PROBE 8192
/* Strings in arguments unless the table says otherwise. */
#define TOOLS__STRING_MAX (64 * CA_KIB)
/* Entries of the read set; past it the set starts afresh (files must be Read again). */
#define TOOLS__READ_SET_MAX 16384
/* Directory entries one Glob or Grep call looks at. */
#define TOOLS__WALK_MAX 100000

/* ---- argument tables (tool_args.c) ---- */

enum tools__type {
    TOOLS__STRING,
    TOOLS__INTEGER,
    TOOLS__BOOLEAN,
    TOOLS__ARRAY, /* of objects described by items */
};

struct tools__arg {
    const char *name; /* NULL ends a table */
    enum tools__type type;
    bool required;
    const char *description;
    size_t max_len;                 /* strings: bytes (0: TOOLS__STRING_MAX) */
    int64_t min, max;               /* integers: value range; arrays: item count; inclusive */
    const char *const *choices;     /* strings: the allowed values, NULL-terminated */
    const struct tools__arg *items; /* arrays: the fields of each item (an object) */
};

struct tools__spec {
    const char *name;
    const char *description;
    const struct tools__arg *args;
    /* Runs a validated call; 0 when handled (also refusals), <0 internal failure. */
    int (*run)(struct tool_ctx *ctx, const json_t *args, struct tool_result *res);
};

extern const struct tools__spec tools__bash_spec, tools__bash_output_spec, tools__kill_bash_spec,
    tools__read_spec, tools__write_spec, tools__edit_spec, tools__multi_edit_spec, tools__glob_spec,
    tools__grep_spec, tools__notebook_edit_spec, tools__todo_write_spec;

/* The spec named `name`, or NULL. */
const struct tools__spec *tools__find(const char *name);
/* Check args against spec's table; on a refusal fill res and return CA_EPARSE. */
int tools__args_check(const struct tools__spec *spec, const json_t *args, struct tool_result *res);
/* The OpenAI function schema of one tool (new reference). */
json_t *tools__schema(const struct tools__spec *spec);

/* Typed reads of validated arguments (absent or null: the default). */
const char *tools__str(const json_t *args, const char *key, size_t *len);
int64_t tools__int(const json_t *args, const char *key, int64_t dflt);
bool tools__bool(const json_t *args, const char *key, bool dflt);

/* ---- episode state ---- */

struct tools__read {
    char *key; /* resolved workspace-relative path; NULL: free slot */
    struct hash128 hash;
};

struct tools__file_id {
    dev_t dev;
    ino_t ino;
    bool valid;
};

struct tool_ctx {
    struct fs_root root;
    char *root_real; /* realpath of the root, to resolve symlinks in keys */
    char **ro;       /* read-only paths from the manifest, NULL-terminated */
    size_t nro;
    struct tools__file_id *ro_ids; /* their identities at open, for checks without /proc */
    struct tools__read *reads;     /* open addressing; cap a power of two */
    size_t nreads, reads_cap;
    json_t *todos; /* array, as TodoWrite last set it */
    struct tool_shell_ops shell;
    bool have_shell;
};

/* Record (or update) that key was read with this content hash. */
void tools__read_set_put(struct tool_ctx *ctx, const char *key, struct hash128 h);
/* The hash key was read with, or NULL. */
const struct hash128 *tools__read_set_get(const struct tool_ctx *ctx, const char *key);

/* ---- paths (tool_path.c) ---- */

struct tools__path {
    char rel[CA_LIMIT_PATH + 1];    /* normalised, relative to the root; "" is the root */
    char shown[CA_LIMIT_PATH + 16]; /* "/workspace/rel", for the model */
    char key[CA_LIMIT_PATH + 1];    /* rel with symlinks inside the root resolved */
    bool exists;                    /* key names something (tools__resolve) */
};

/*
 * Map the path argument `key` of args ("/workspace/x", "x", "./x") into p.
 * Refusals (absolute elsewhere, "..", NUL, too long, empty unless allow_root)
 * fill res naming the tool and argument and return CA_EESCAPE or CA_EPARSE.
 * A missing optional argument yields the root.
 */
int tools__path_arg(const char *tool, const json_t *args, const char *key, bool allow_root,
                    struct tools__path *p, struct tool_result *res);
/*
 * Fill p->key and p->exists: the target with symlinks inside the root
 * resolved (a missing target: its parent resolved plus the last name).
 * Escapes fill res and return CA_EESCAPE; a missing parent leaves
 * key = rel and exists = false.
 */
int tools__resolve(struct tool_ctx *ctx, const char *tool, struct tools__path *p,
                   struct tool_result *res);
/*
 * Normalise s (len bytes, already free of "/workspace") into out (CA_LIMIT_PATH + 1 bytes): no
 * "." or empty components. Returns 0, CA_EESCAPE for "..", CA_ETOOBIG past the depth limit.
 */
int tools__normalise(const char *s, size_t len, char *out);
/* The identity of rel beneath the root (symlinks inside followed). */
struct tools__file_id tools__file_id(const struct tool_ctx *ctx, const char *rel);
/* Whether rel (normalised) is, or lies inside, a read-only path. */
bool tools__read_only(const struct tool_ctx *ctx, const char *rel);
/* Refuse writing p if read-only (by name or resolved key): fills res, returns CA_EESCAPE. */
int tools__check_writable(const struct tool_ctx *ctx, const char *tool, const struct tools__path *p,
                          struct tool_result *res);
/* Turn a failed file operation into a model-facing message without host paths. */
int tools__fs_error(struct tool_result *res, const char *tool, int code,
                    const struct tools__path *p, const char *doing);

/*
 * Load p (following symlinks inside the root) into b, bounded by
 * TOOLS__FILE_MAX; *st gets its stat. A missing file returns -ENOENT without
 * touching res when missing_ok; other refusals (a directory, not a regular
 * file, too large, escapes) fill res and return their code.
 */
int tools__load(struct tool_ctx *ctx, const char *tool, const struct tools__path *p,
                bool missing_ok, struct buf *b, struct stat *st, struct tool_result *res);
/* Read-before-write: p->key must be in the read set with content's hash. */
int tools__check_fresh(const struct tool_ctx *ctx, const char *tool, const struct tools__path *p,
                       const struct buf *content, struct tool_result *res);
/* Write data to p->key (creating parents), atomically; record it as read. */
int tools__store(struct tool_ctx *ctx, const char *tool, struct tools__path *p, const char *data,
                 size_t len, mode_t mode, struct tool_result *res);

/* ---- text ---- */

/* Append to res->text unless it would pass TOOLS__BODY_MAX: then CA_ETOOBIG, unchanged. */
int tools__out(struct tool_result *res, const char *p, size_t n) WARN_UNUSED_RESULT;
int tools__outf(struct tool_result *res, const char *fmt, ...) CA_PRINTF(2, 3) WARN_UNUSED_RESULT;
/* Append past the body budget (closing markers); the total limit still holds. */
void tools__out_tail(struct tool_result *res, const char *fmt, ...) CA_PRINTF(2, 3);
/* Append line to b cut at TOOLS__LINE_MAX characters with a marker, then "\n". */
int tools__add_line(struct buf *b, struct sv line) WARN_UNUSED_RESULT;
/* "%6zu\t" + the line, cat -n style. */
int tools__add_numbered(struct buf *b, size_t lineno, struct sv line) WARN_UNUSED_RESULT;
/* utf8_valid with a fast path for ASCII. */
bool tools__utf8_valid(const char *p, size_t n, size_t *bad_offset);
/* NUL in the first TOOLS__BINARY_PROBE bytes, or invalid UTF-8. */
bool tools__is_binary(const char *p, size_t n);
/* Bytes of the longest prefix of p[0..n) ending on a UTF-8 boundary, at most max. */
size_t tools__utf8_cut(const char *p, size_t n, size_t max);
/* Up to 200 bytes of s for a message, cut on a character boundary: "%.*s%s" takes these. */
#define TOOLS__SHOW_MAX 200
#define TOOLS__SHOW(s, n)                                                                          \
    (int)tools__utf8_cut((s), (n), TOOLS__SHOW_MAX), (s), ((n) > TOOLS__SHOW_MAX ? "..." : "")
/* Lines in [p, p+n): newlines, plus one for a last line without one. */
size_t tools__count_lines(const char *p, size_t n);

/* ---- globs (tool_glob.c) ---- */

struct tools__glob_alt {
    char *text;      /* one brace-expanded alternative */
    struct sv *segs; /* its '/'-separated segments, into text */
    size_t nsegs;
};

struct tools__glob {
    struct tools__glob_alt *alts;
    size_t nalts;
    bool has_slash; /* some alternative has a '/' (else it matches base names) */
};

/* Compile pattern; on a bad one (too many alternatives) CA_EPARSE with msg set. */
int tools__glob_compile(const char *pattern, struct tools__glob *g, char *msg, size_t msgsz);
void tools__glob_release(struct tools__glob *g);
/* Whether the slash-separated path matches; partial: whether something beneath the
 * directory path could match. */
bool tools__glob_match(const struct tools__glob *g, const char *path, bool partial);

/* ---- tree walk (tool_glob.c) ---- */

struct tools__walk_entry {
    const char *rel;       /* relative to the walk's base */
    const char *name;      /* last component */
    int dirfd;             /* the directory holding it */
    const struct stat *st; /* lstat: symlinks are reported, never followed */
};

/* 0: go on; 1: do not descend (directories); <0: stop the walk with that code. */
typedef int (*tools__walk_fn)(void *data, const struct tools__walk_entry *e);

struct tools__walk_stats {
    size_t visited;
    bool capped; /* stopped at TOOLS__WALK_MAX entries */
};

/* Walk the directory base (an fd beneath the root; consumed) in name order,
 * depth first, calling fn for every entry; never follows symlinks. */
int tools__walk(int basefd, tools__walk_fn fn, void *data, struct tools__walk_stats *stats);

#endif
