/*
 * task_load.c - reading task sources: one .py file, a KernelBench-style tree
 * of level<N>/ folders, a JSONL dataset, and a parquet dataset converted to
 * JSONL by the embedded src/task/parquet_import.py.
 *
 * Every loader fills a task__loader (a private set plus indexes by code hash
 * and by id) and merges it into the caller's set only at the end, so a
 * source that fails halfway leaves the caller's set as it was. The JSONL
 * reader streams: at most one line (CA_LIMIT_JSONL_LINE) plus one read chunk
 * is in memory, whatever the size of the file.
 */
#include "task/task.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/embed.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/proc.h"
#include "core/sv.h"
#include "task/task_internal.h"
#include "core/banned.h"

#define PARQUET_SCRIPT "src/task/parquet_import.py"
#define PARQUET_TIMEOUT_MS (300 * 1000)
/* The script's exit codes for a clean refusal: bad input, missing pyarrow. */
#define PARQUET_EXIT_INPUT 2
#define PARQUET_EXIT_NO_PYARROW 3
#define READ_CHUNK (64 * CA_KIB)
/* Highest level folder number we accept (level1 .. level999). */
#define LEVEL_MAX 999

/* ---- the loader ---- */

void task__loader_init(struct task__loader *ld)
{
    task_set_init(&ld->set);
    task__index_init(&ld->by_code);
    task__index_init(&ld->by_id);
}

void task__loader_release(struct task__loader *ld)
{
    task_set_release(&ld->set);
    task__index_release(&ld->by_code);
    task__index_release(&ld->by_id);
}

int task__loader_add(struct task__loader *ld, struct task *t, struct ca_err *err)
{
    struct task_set *set = &ld->set;
    int rc = 0;
    for (size_t s = task__index_first(&ld->by_code, t->hash); s != SIZE_MAX;
         s = task__index_next(&ld->by_code, t->hash, s)) {
        const struct task *o = &set->tasks[ld->by_code.vals[s] - 1];
        if (o->code_len == t->code_len && memcmp(o->code, t->code, t->code_len) == 0) {
            ALLOC_GROW(set->dups, set->ndups + 1, set->dups_alloc);
            set->dups[set->ndups].origin = t->origin;
            set->dups[set->ndups++].kept_id = xstrdup(o->id);
            t->origin = NULL;
            goto out;
        }
    }
    uint64_t key = task__id_key(t->id);
    for (size_t s = task__index_first(&ld->by_id, key); s != SIZE_MAX;
         s = task__index_next(&ld->by_id, key, s)) {
        const struct task *o = &set->tasks[ld->by_id.vals[s] - 1];
        if (strcmp(o->id, t->id) == 0) {
            rc = err_setf(err, CA_EDUP,
                          "%s: task id \"%s\" is already used by %s for different code", t->origin,
                          t->id, o->origin);
            goto out;
        }
    }
    if (set->n >= CA_LIMIT_DATASET_TASKS) {
        rc = err_setf(err, CA_ETOOBIG,
                      "%s: more than %d tasks in one source "
                      "(CA_LIMIT_DATASET_TASKS)",
                      t->origin, CA_LIMIT_DATASET_TASKS);
        goto out;
    }
    ALLOC_GROW(set->tasks, set->n + 1, set->alloc);
    task__index_add(&ld->by_code, t->hash, set->n);
    task__index_add(&ld->by_id, key, set->n);
    set->relabelled += t->ops_relabelled;
    set->tasks[set->n++] = *t;
    memset(t, 0, sizeof(*t));
    return 0;
out:
    task_release(t);
    return rc;
}

/* Merge what ld loaded into set; ld is released either way. */
static int loader_finish(struct task__loader *ld, struct task_set *set, struct ca_err *err)
{
    int rc = task__set_merge_all(set, &ld->set, err);
    task__loader_release(ld);
    return rc;
}

/* ---- one file ---- */

/* Parse the file at path as a task named `name` (NULL: from the file name). */
static int load_py(const char *path, const char *name, int level, struct task__loader *ld,
                   struct ca_err *err)
{
    struct buf b;
    struct task t;
    buf_init(&b, CA_LIMIT_TASK_BYTES);
    int rc = fs_read_file(path, CA_LIMIT_TASK_BYTES, &b, err);
    if (rc == CA_ETOOBIG)
        rc = err_setf(err, rc, "%s: task file is over the limit of %zu bytes (CA_LIMIT_TASK_BYTES)",
                      path, (size_t)CA_LIMIT_TASK_BYTES);
    if (!rc)
        rc = task_parse(path, b.data, b.len, &t, err);
    buf_release(&b);
    if (rc)
        return rc;
    t.level = level;
    if (name)
        task__set_name(&t, name);
    return task__loader_add(ld, &t, err);
}

int task_load_file(const char *path, struct task_set *set, struct ca_err *err)
{
    struct task__loader ld;
    task__loader_init(&ld);
    int rc = load_py(path, NULL, 0, &ld, err);
    if (rc) {
        task__loader_release(&ld);
        return rc;
    }
    return loader_finish(&ld, set, err);
}

/* ---- a tree ---- */

struct entry {
    char *name;
    unsigned long num; /* the level, or the leading number of N_Name.py */
    bool has_num;
};

static void entries_free(struct entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].name);
    free(e);
}

/* Leading decimal number of s (at most 9 digits) followed by `stop`. */
static bool leading_number(const char *s, char stop, unsigned long *out)
{
    size_t i = 0;
    unsigned long v = 0;
    while (s[i] >= '0' && s[i] <= '9' && i < 9)
        v = v * 10 + (unsigned long)(s[i++] - '0');
    if (i == 0 || s[i] != stop)
        return false;
    *out = v;
    return true;
}

static int entry_cmp(const void *pa, const void *pb)
{
    const struct entry *a = pa, *b = pb;
    if (a->has_num != b->has_num)
        return a->has_num ? -1 : 1;
    if (a->has_num && a->num != b->num)
        return a->num < b->num ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int join(struct buf *b, const char *dir, const char *name, struct ca_err *err)
{
    buf_reset(b);
    if (fs_join(b, dir, name))
        return err_setf(err, CA_ETOOBIG, "%s/%s: path longer than %d bytes (CA_LIMIT_PATH)", dir,
                        name, CA_LIMIT_PATH);
    return 0;
}

/*
 * List dir: with want_levels, the folders "level<N>" (N >= 1, no leading
 * zero); otherwise the regular files "*.py" (hidden ones skipped). Sorted.
 */
static int list_dir(const char *dir, bool want_levels, struct entry **out, size_t *nout,
                    struct ca_err *err)
{
    struct entry *e = NULL;
    size_t n = 0, alloc = 0;
    struct buf path;
    int rc = 0;
    DIR *d = opendir(dir);
    if (!d)
        return err_setf(err, -errno, "%s: cannot open directory: %s", dir, strerror(errno));
    buf_init(&path, CA_LIMIT_PATH);
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                rc = err_setf(err, -errno, "%s: cannot read directory: %s", dir, strerror(errno));
            break;
        }
        const char *name = de->d_name;
        struct entry item = {0};
        if (name[0] == '.')
            continue;
        if (want_levels) {
            if (strncmp(name, "level", 5) != 0 || name[5] == '0' ||
                !leading_number(name + 5, '\0', &item.num) || item.num > LEVEL_MAX)
                continue;
            item.has_num = true;
        } else {
            if (!sv_ends_with(sv_cstr(name), SV_LIT(".py")))
                continue;
            item.has_num = leading_number(name, '_', &item.num);
        }
        rc = join(&path, dir, name, err);
        if (rc)
            break;
        if (want_levels ? !fs_is_dir(path.data) : !fs_is_file(path.data))
            continue;
        if (n >= CA_LIMIT_DATASET_TASKS) {
            rc = err_setf(err, CA_ETOOBIG, "%s: more than %d entries (CA_LIMIT_DATASET_TASKS)", dir,
                          CA_LIMIT_DATASET_TASKS);
            break;
        }
        item.name = xstrdup(name);
        ALLOC_GROW(e, n + 1, alloc);
        e[n++] = item;
    }
    closedir(d);
    buf_release(&path);
    if (rc) {
        entries_free(e, n);
        return rc;
    }
    if (n)
        qsort(e, n, sizeof(*e), entry_cmp);
    *out = e;
    *nout = n;
    return 0;
}

static int load_level(const char *dir, unsigned long level, struct task__loader *ld,
                      struct ca_err *err)
{
    struct entry *files;
    size_t nfiles;
    struct buf path;
    int rc = list_dir(dir, false, &files, &nfiles, err);
    if (rc)
        return rc;
    buf_init(&path, CA_LIMIT_PATH);
    for (size_t i = 0; i < nfiles && !rc; i++) {
        rc = join(&path, dir, files[i].name, err);
        if (rc)
            break;
        struct sv stem = sv_cstr(files[i].name);
        stem.len -= 3; /* ".py" */
        /* Level folders prefix the name (l1_19_ReLU); a flat folder keeps the stem. */
        char *raw = level ? xstrfmt("l%lu_" SV_FMT, level, SV_ARG(stem)) : sv_dup(stem);
        char *name = task__sanitize_name(raw, strlen(raw));
        rc = load_py(path.data, name, (int)level, ld, err);
        free(name);
        free(raw);
    }
    buf_release(&path);
    entries_free(files, nfiles);
    return rc;
}

int task_load_tree(const char *dir, struct task_set *set, struct ca_err *err)
{
    struct entry *levels;
    size_t nlevels;
    struct buf path;
    struct task__loader ld;
    int rc = list_dir(dir, true, &levels, &nlevels, err);
    if (rc)
        return rc;
    task__loader_init(&ld);
    buf_init(&path, CA_LIMIT_PATH);
    for (size_t i = 0; i < nlevels && !rc; i++) {
        rc = join(&path, dir, levels[i].name, err);
        if (!rc)
            rc = load_level(path.data, levels[i].num, &ld, err);
    }
    /* Without level folders, a directory is a flat folder of task files (level 0). */
    if (nlevels == 0)
        rc = load_level(dir, 0, &ld, err);
    buf_release(&path);
    entries_free(levels, nlevels);
    if (!rc && ld.set.n == 0 && ld.set.ndups == 0)
        rc = err_setf(err, CA_EPARSE,
                      "%s: no task files: a task directory holds *.py task files, or level<N>/ "
                      "folders of N_Name.py files (the KernelBench layout)",
                      dir);
    if (rc) {
        task__loader_release(&ld);
        return rc;
    }
    return loader_finish(&ld, set, err);
}

/* ---- JSONL ---- */

struct line_reader {
    int fd;
    struct buf b; /* unread bytes are [pos, b.len) */
    size_t pos;
    char *chunk;
    bool eof;
};

/*
 * Next line into *line (without "\n"; valid until the next call). Returns 1
 * for a line, 0 at the end, CA_ETOOBIG for a line over CA_LIMIT_JSONL_LINE,
 * or -errno.
 */
static int reader_next(struct line_reader *r, struct sv *line, bool *had_newline)
{
    for (;;) {
        const char *start = r->b.data + r->pos;
        size_t avail = r->b.len - r->pos;
        const char *nl = memchr(start, '\n', avail);
        if (nl) {
            if ((size_t)(nl - start) > CA_LIMIT_JSONL_LINE)
                return CA_ETOOBIG;
            *line = sv_from(start, (size_t)(nl - start));
            *had_newline = true;
            r->pos += (size_t)(nl - start) + 1;
            return 1;
        }
        if (avail > CA_LIMIT_JSONL_LINE)
            return CA_ETOOBIG;
        if (r->eof) {
            if (!avail)
                return 0;
            *line = sv_from(start, avail);
            *had_newline = false;
            r->pos = r->b.len;
            return 1;
        }
        if (r->pos) { /* keep only the unread tail, at the front */
            memmove(r->b.data, start, avail);
            buf_truncate(&r->b, avail);
            r->pos = 0;
        }
        ssize_t got;
        do
            got = read(r->fd, r->chunk, READ_CHUNK);
        while (got < 0 && errno == EINTR);
        if (got < 0)
            return -errno;
        if (got == 0)
            r->eof = true;
        else if (buf_add(&r->b, r->chunk, (size_t)got))
            return CA_ETOOBIG;
    }
}

/* One row as JSON, with positions in "FILE:LINE" terms (the line is one record). */
static int parse_row(struct sv line, bool last_unterminated, const char *origin, json_t **out,
                     struct ca_err *err)
{
    size_t bad;
    *out = NULL;
    if (!utf8_valid(line.p, line.len, &bad))
        return err_setf(err, CA_EUTF8, "%s: invalid UTF-8 at column %zu", origin, bad + 1);
    size_t depth = jsonx_depth(line);
    if (depth > CA_LIMIT_JSON_DEPTH)
        return err_setf(err, CA_ETOOBIG, "%s: JSON nested %zu deep, over the limit of %d", origin,
                        depth, CA_LIMIT_JSON_DEPTH);
    json_error_t je;
    json_t *v = json_loadb(line.p, line.len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!v) {
        if (last_unterminated)
            return err_setf(err, CA_EPARSE,
                            "%s: truncated JSON line (file ends mid-record): %s at column %d",
                            origin, je.text, je.column);
        return err_setf(err, CA_EPARSE, "%s: invalid JSON at column %d: %s", origin, je.column,
                        je.text);
    }
    if (!json_is_object(v)) {
        json_decref(v);
        return err_setf(err, CA_EPARSE, "%s: each line must be a JSON object with \"code\"",
                        origin);
    }
    *out = v;
    return 0;
}

static void free_strings(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static int label_from_array(const json_t *a, const char *origin, char ***out, size_t *n,
                            struct ca_err *err)
{
    size_t count = json_array_size(a);
    char **v = xcalloc(count + 1, sizeof(*v));
    for (size_t i = 0; i < count; i++) {
        const json_t *item = json_array_get(a, i);
        if (!json_is_string(item)) {
            free_strings(v, i);
            return err_setf(err, CA_EPARSE,
                            "%s: field \"ops\" must be a list of operator names (strings); "
                            "item %zu is not a string",
                            origin, i + 1);
        }
        v[i] = xstrdup(json_string_value(item));
    }
    *out = v;
    *n = count;
    return 0;
}

/*
 * A Python list literal of plain strings, as some datasets store labels:
 * "['nn.Conv2d', 'torch.relu']". No escapes (operator names have none).
 */
static bool label_from_python(struct sv s, char ***out, size_t *n)
{
    char **v = NULL;
    size_t count = 0, alloc = 0;
    s = sv_trim(s);
    if (!sv_chop_prefix(&s, SV_LIT("[")) || !sv_ends_with(s, SV_LIT("]")))
        return false;
    s.len--;
    for (;;) {
        s = sv_trim(s);
        if (!s.len)
            break;
        char q = s.p[0];
        if (q != '\'' && q != '"')
            goto bad;
        long end = sv_find_ch(sv_sub(s, 1, s.len - 1), q);
        if (end < 0)
            goto bad;
        struct sv item = sv_sub(s, 1, (size_t)end);
        if (sv_find_ch(item, '\\') >= 0)
            goto bad;
        ALLOC_GROW(v, count + 2, alloc);
        v[count++] = sv_dup(item);
        s = sv_trim(sv_sub(s, (size_t)end + 2, s.len));
        if (s.len && !sv_chop_prefix(&s, SV_LIT(",")))
            goto bad;
    }
    if (!v)
        v = xcalloc(1, sizeof(*v));
    *out = v;
    *n = count;
    return true;
bad:
    free_strings(v, count);
    return false;
}

static const char *json_type_name(const json_t *v)
{
    if (json_is_object(v))
        return "an object";
    if (json_is_boolean(v))
        return "a boolean";
    return "a number";
}

/* The "ops" label: *given false when absent or null. */
static int read_label(const json_t *row, const char *origin, bool *given, char ***out, size_t *n,
                      struct ca_err *err)
{
    const json_t *v = json_object_get(row, "ops");
    *given = false;
    if (!v || json_is_null(v))
        return 0;
    *given = true;
    if (json_is_array(v))
        return label_from_array(v, origin, out, n, err);
    if (!json_is_string(v))
        return err_setf(err, CA_EPARSE,
                        "%s: field \"ops\" must be a list of operator names (or a string "
                        "holding one), got %s",
                        origin, json_type_name(v));
    struct sv text = sv_from(json_string_value(v), json_string_length(v));
    json_t *inner = NULL;
    if (jsonx_depth(text) <= CA_LIMIT_JSON_DEPTH)
        inner = json_loadb(text.p, text.len, JSON_DECODE_ANY, NULL);
    if (json_is_array(inner)) {
        int rc = label_from_array(inner, origin, out, n, err);
        json_decref(inner);
        return rc;
    }
    json_decref(inner);
    if (label_from_python(text, out, n))
        return 0;
    return err_setf(err, CA_EPARSE,
                    "%s: field \"ops\" is a string but not a list of operator names: \"%.60s\"",
                    origin, json_string_value(v));
}

/* Turn one row into a task and hand it to the loader. */
static int load_row(const json_t *row, const char *origin, struct task__loader *ld,
                    struct ca_err *err)
{
    const char *code = NULL, *data_source = NULL, *id = NULL, *name = NULL;
    int64_t level = 0;
    bool given;
    char **label = NULL;
    size_t nlabel = 0;
    struct task t;
    int rc;
    if ((rc = jsonx_get_str(row, "code", true, &code, origin, err)) ||
        (rc = jsonx_get_str(row, "data_source", false, &data_source, origin, err)) ||
        (rc = jsonx_get_str(row, "id", false, &id, origin, err)) ||
        (rc = jsonx_get_str(row, "name", false, &name, origin, err)) ||
        (rc = jsonx_get_int(row, "level", false, &level, origin, err)))
        return rc;
    if (level < 0 || level > LEVEL_MAX)
        return err_setf(err, CA_EPARSE, "%s: field \"level\" must be 0..%d, got %lld", origin,
                        LEVEL_MAX, (long long)level);
    if (id && !task__valid_id(id))
        return err_setf(err, CA_EPARSE,
                        "%s: field \"id\" must be 1-%d characters of A-Z a-z 0-9 _ . - "
                        "(not starting with - or .)",
                        origin, CA_LIMIT_ID);
    rc = read_label(row, origin, &given, &label, &nlabel, err);
    if (rc)
        return rc;
    const json_t *jcode = json_object_get(row, "code");
    rc = task__parse(origin, true, code, json_string_length(jcode), &t, err);
    if (rc)
        goto out;
    t.level = (int)level;
    if (data_source)
        t.data_source = xstrdup(data_source);
    char *tname =
        name ? task__sanitize_name(name, strlen(name)) : task__name_from_ops(t.ops, t.nops);
    task__set_name(&t, tname);
    free(tname);
    if (id) {
        free(t.id);
        t.id = xstrdup(id);
    }
    t.ops_unlabelled = !given;
    t.ops_relabelled = given && !task__ops_agree(t.ops, t.nops, label, nlabel);
    rc = task__loader_add(ld, &t, err);
out:
    free_strings(label, nlabel);
    return rc;
}

int task__load_jsonl(const char *path, const char *shown, const char *row_word,
                     struct task_set *set, struct ca_err *err)
{
    struct line_reader r = {.pos = 0};
    struct task__loader ld;
    size_t lineno = 0;
    int rc = 0;
    r.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r.fd < 0)
        return err_setf(err, -errno, "%s: cannot open: %s", shown, strerror(errno));
    buf_init(&r.b, CA_LIMIT_JSONL_LINE + READ_CHUNK + 1);
    r.chunk = xmalloc(READ_CHUNK);
    task__loader_init(&ld);
    for (;;) {
        struct sv line;
        bool had_newline;
        int got = reader_next(&r, &line, &had_newline);
        lineno++;
        if (got == 0)
            break;
        if (got == CA_ETOOBIG) {
            rc = err_setf(err, CA_ETOOBIG,
                          "%s:%s%zu: line longer than %zu bytes (CA_LIMIT_JSONL_LINE)", shown,
                          row_word, lineno, (size_t)CA_LIMIT_JSONL_LINE);
            break;
        }
        if (got < 0) {
            rc = err_setf(err, got, "%s: read error: %s", shown, strerror(-got));
            break;
        }
        if (sv_trim(line).len == 0)
            continue;
        char *origin = xstrfmt("%s:%s%zu", shown, row_word, lineno);
        json_t *row;
        rc = parse_row(line, !had_newline, origin, &row, err);
        if (!rc) {
            rc = load_row(row, origin, &ld, err);
            json_decref(row);
        }
        free(origin);
        if (rc)
            break;
    }
    close(r.fd);
    free(r.chunk);
    buf_release(&r.b);
    if (rc) {
        task__loader_release(&ld);
        return rc;
    }
    return loader_finish(&ld, set, err);
}

int task_load_jsonl(const char *path, struct task_set *set, struct ca_err *err)
{
    return task__load_jsonl(path, path, "", set, err);
}

/* ---- dispatch ---- */

int task_load(const char *source, struct task_set *set, struct ca_err *err)
{
    struct sv s = sv_cstr(source);
    if (fs_is_dir(source))
        return task_load_tree(source, set, err);
    if (!fs_exists(source))
        return err_setf(err, -ENOENT, "%s: no such file or directory", source);
    if (sv_ends_with(s, SV_LIT(".jsonl")))
        return task_load_jsonl(source, set, err);
    if (sv_ends_with(s, SV_LIT(".py")))
        return task_load_file(source, set, err);
    if (sv_ends_with(s, SV_LIT(".parquet")))
        return err_setf(err, CA_EUSAGE,
                        "%s: parquet is not loaded directly: run `cuda-agent data import %s "
                        "-o %.*s.jsonl` first",
                        source, source, (int)(s.len - 8), source);
    return err_setf(err, CA_EUSAGE,
                    "%s: unknown task source: expected a .py task file, a .jsonl dataset or a "
                    "directory with level<N>/ folders",
                    source);
}

/* ---- parquet ---- */

/* The last non-empty line of a child's stderr, for a message. */
static struct sv last_line(const struct buf *b)
{
    struct sv s = sv_rtrim(sv_from(b->data, b->len));
    size_t i = s.len;
    while (i > 0 && s.p[i - 1] != '\n')
        i--;
    return sv_trim(sv_sub(s, i, s.len - i));
}

static int run_import_script(const char *parquet, const char *tmp, struct ca_err *err)
{
    const struct embedded_file *script = embed_find(PARQUET_SCRIPT);
    if (!script)
        BUG("%s is not embedded in the binary", PARQUET_SCRIPT);
    char *python = proc_which("python3");
    if (!python)
        return err_setf(err, CA_EUNAVAIL,
                        "%s: importing parquet needs python3 with pyarrow, and python3 is not in "
                        "PATH (install python3, then `pip install pyarrow`)",
                        parquet);
    const char *argv[] = {python, "-", parquet, tmp, NULL};
    struct proc_opts opts = {
        .argv = argv,
        .stdin_data = script->data,
        .stdin_len = script->len,
        .timeout_ms = PARQUET_TIMEOUT_MS,
    };
    struct proc_result res;
    proc_result_init(&res);
    int rc = proc_run(&opts, &res, err);
    if (rc) {
        err_prefix(err, "%s: cannot run python3", parquet);
        goto out;
    }
    if (proc_ok(&res))
        goto out;
    struct sv why = last_line(&res.err);
    if (res.timed_out) {
        rc = err_setf(err, CA_ETIMEOUT, "%s: the import step ran past %d s", parquet,
                      PARQUET_TIMEOUT_MS / 1000);
    } else if (!res.signaled && res.exit_code == PARQUET_EXIT_NO_PYARROW) {
        rc = err_setf(err, CA_EUNAVAIL, "%s: " SV_FMT, parquet, SV_ARG(why));
    } else if (!res.signaled && res.exit_code == PARQUET_EXIT_INPUT) {
        rc = err_setf(err, CA_EPARSE, "%s: " SV_FMT, parquet, SV_ARG(why));
    } else {
        struct buf how;
        buf_init(&how, CA_ERR_MSG_MAX);
        if (proc_describe(&res, PARQUET_TIMEOUT_MS, &how))
            buf_reset(&how);
        rc = err_setf(err, CA_ECHILD, "%s: the python3 import step failed (%s): " SV_FMT, parquet,
                      how.data, SV_ARG(why));
        buf_release(&how);
    }
out:
    proc_result_release(&res);
    free(python);
    return rc;
}

int task_import_parquet(const char *parquet, const char *out_path, struct task_set *set,
                        struct ca_err *err)
{
    struct task_set tmpset;
    task_set_init(&tmpset);
    if (strlen(out_path) + 16 > CA_LIMIT_PATH)
        return err_setf(err, CA_ETOOBIG, "%s: path longer than %d bytes (CA_LIMIT_PATH)", out_path,
                        CA_LIMIT_PATH);
    if (!fs_is_file(parquet))
        return err_setf(err, -ENOENT, "%s: no such file", parquet);
    char *tmp = xstrfmt("%s.tmp-XXXXXX", out_path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int rc = err_setf(err, -errno, "%s: cannot create a temporary file beside it: %s", out_path,
                          strerror(errno));
        free(tmp);
        return rc;
    }
    close(fd);
    int rc = run_import_script(parquet, tmp, err);
    if (!rc)
        rc = task__load_jsonl(tmp, parquet, "row ", &tmpset, err);
    if (!rc)
        rc = task__set_merge_check(set, &tmpset, err);
    if (!rc)
        rc = task_set_write_jsonl(&tmpset, out_path, err);
    if (!rc)
        task__set_merge(set, &tmpset);
    (void)unlink(tmp); /* a leftover temporary file is no failure of the import */
    free(tmp);
    task_set_release(&tmpset);
    return rc;
}
